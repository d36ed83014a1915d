//! `lock-server` binary: parse flags, set up logs, serve until SIGTERM/SIGINT (or print a new
//! signing key with `--generate-signing-key`, or write a local CA and certificates with
//! `--generate-tls DIR`).
//! A startup failure is one line on stderr and exit code 1.

use lock_server::{Config, Server, shutdown_signal};

/// Under load glibc's allocator took 13 % of the lock-server's CPU (`perf`, 32 clients: each
/// request allocates its body, headers, JSON and futures on one worker and often frees them
/// on another); mimalloc's per-thread heaps cost a fraction of that.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() {
    let config: Config = service_kit::parse_or_exit("lock-server");
    if config.generate_signing_key {
        match lock_server::generate_signing_key(&config.signing_key_id) {
            Ok(lines) => println!("{lines}"),
            Err(err) => {
                eprintln!("lock-server: {err}");
                std::process::exit(1);
            }
        }
        return;
    }
    if let Some(dir) = &config.generate_tls {
        match lock_server::generate_tls(dir, &config.tls_names) {
            Ok(files) => println!("{files}"),
            Err(err) => {
                eprintln!("lock-server: {err}");
                std::process::exit(1);
            }
        }
        return;
    }
    service_kit::logging::init(config.log_format);
    if let Err(err) = run(config).await {
        eprintln!("lock-server: {err:#}");
        std::process::exit(1);
    }
}

async fn run(config: Config) -> anyhow::Result<()> {
    let server = Server::build(&config).await?;
    server.run_until(shutdown_signal()).await?;
    Ok(())
}
