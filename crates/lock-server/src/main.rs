//! `lock-server` binary: parse flags, set up logs, serve until SIGTERM/SIGINT.
//! A startup failure is one line on stderr and exit code 1.

use lock_server::{Config, Server, shutdown_signal};

#[tokio::main]
async fn main() {
    let config: Config = service_kit::parse_or_exit("lock-server");
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
