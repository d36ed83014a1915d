//! `rail-stub` binary: flags, logs, serve until SIGTERM/SIGINT.

use rail_stub::Config;

#[tokio::main]
async fn main() {
    let config: Config = service_kit::parse_or_exit("rail-stub");
    service_kit::run_main("rail-stub", config.log_format, async {
        rail_stub::build(&config)
            .await
            .map_err(|e| format!("{e:#}"))
    })
    .await;
}
