//! `rail-proxy` binary: flags, logs, serve until SIGTERM/SIGINT.

use rail_proxy::Config;

#[tokio::main]
async fn main() {
    let config: Config = service_kit::parse_or_exit("rail-proxy");
    service_kit::run_main("rail-proxy", config.log_format, async {
        rail_proxy::build(&config)
            .await
            .map_err(|e| format!("{e:#}"))
    })
    .await;
}
