//! `payment-resource` binary: flags, logs, serve until SIGTERM/SIGINT. A startup failure is
//! one line on stderr and exit code 1.

use payment_resource::{Config, Server};

#[tokio::main]
async fn main() {
    let config: Config = service_kit::parse_or_exit("payment-resource");
    service_kit::logging::init(config.log_format);
    let result = async {
        let server = Server::build(&config).await?;
        server.run_until(service_kit::shutdown::signal()).await?;
        anyhow::Ok(())
    };
    if let Err(err) = result.await {
        eprintln!("payment-resource: {err:#}");
        std::process::exit(1);
    }
}
