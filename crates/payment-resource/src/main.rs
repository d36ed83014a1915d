//! `payment-resource` binary: flags, logs, serve until SIGTERM/SIGINT.

use payment_resource::Config;

#[tokio::main]
async fn main() {
    let config: Config = service_kit::parse_or_exit("payment-resource");
    service_kit::run_main("payment-resource", config.log_format, async {
        payment_resource::build(&config)
            .await
            .map_err(|e| format!("{e:#}"))
    })
    .await;
}
