//! `rail-stub` binary: flags, logs, serve until SIGTERM/SIGINT.

use rail_stub::{Config, Server};

#[tokio::main]
async fn main() {
    let config: Config = service_kit::parse_or_exit("rail-stub");
    service_kit::logging::init(config.log_format);
    let result = async {
        let server = Server::build(&config).await?;
        server.run_until(service_kit::shutdown::signal()).await?;
        anyhow::Ok(())
    };
    if let Err(err) = result.await {
        eprintln!("rail-stub: {err:#}");
        std::process::exit(1);
    }
}
