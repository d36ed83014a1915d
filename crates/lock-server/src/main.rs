//! `lock-server` binary: parse flags, set up logs, serve until SIGTERM/SIGINT.

use clap::Parser;
use lock_server::{Config, Server, shutdown_signal};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    lock_server::logging::init(config.log_format);
    let server = Server::build(&config).await?;
    server.run_until(shutdown_signal()).await?;
    Ok(())
}
