//! `rail-proxy` binary: flags, logs, serve until SIGTERM/SIGINT.

use rail_proxy::{Config, Server};

#[tokio::main]
async fn main() {
    let config: Config = service_kit::parse_or_exit("rail-proxy");
    service_kit::logging::init(config.log_format);
    let result = async {
        let server = Server::build(&config).await?;
        server.run_until(service_kit::shutdown::signal()).await?;
        anyhow::Ok(())
    };
    if let Err(err) = result.await {
        eprintln!("rail-proxy: {err:#}");
        std::process::exit(1);
    }
}
