//! `harness bench pipeline`: payouts per second through the whole stack (lock-servers,
//! executors, payment-resource, rail) with 1, 2 and 4 executors at each concurrency.

use std::time::{Duration, Instant};

use crate::bench_cpu::cpu_micros;

/// Options of `harness bench pipeline`.
#[derive(Debug, Clone, clap::Args)]
pub struct PipelineBenchOptions {
    /// Payouts per run.
    #[arg(long, default_value_t = 300)]
    pub payouts: usize,
    /// Executor counts to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    pub executors: Vec<usize>,
    /// `EXECUTOR_CONCURRENCY` values to measure (payouts each executor works on at once): every
    /// executor count runs with each. 1 is the executor of one payout at a time.
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    pub concurrency: Vec<u32>,
}

/// Payouts per second through the whole pipeline for each executor count and concurrency,
/// each on a fresh stack, timed from the executors' start until every payout is terminal.
/// Ratios are to the first row (the first executor count at the first concurrency). Attempts
/// per payout: every executor's attempts (all outcomes, read once the payouts are terminal)
/// over the payouts; above 1 is work lost to executors meeting on the same payout.
pub async fn run_pipeline(options: &PipelineBenchOptions) -> anyhow::Result<()> {
    println!(
        "| executors | concurrency | payouts | seconds | payouts/s | ratio to the first row | attempts per payout | lock-server CPU s (replica 1 / 2) |\n|---|---|---|---|---|---|---|---|"
    );
    let mut baseline = None;
    for &count in &options.executors {
        for &concurrency in &options.concurrency {
            let mut stack =
                crate::stack::Stack::start(crate::stack::StackOptions::default(), None).await?;
            let ids = stack
                .create_payouts(&format!("bench-{count}-{concurrency}"), options.payouts)
                .await?;
            let cpu_before = replica_cpu_seconds(&stack)?;
            let started = Instant::now();
            for i in 0..count {
                let env = [
                    ("RUST_LOG", "warn".to_owned()),
                    ("EXECUTOR_CONCURRENCY", concurrency.to_string()),
                ];
                stack.start_executor(&format!("executor-{i}"), &env).await?;
            }
            stack.wait_terminal(&ids, Duration::from_secs(600)).await?;
            let seconds = started.elapsed().as_secs_f64();
            let cpu: Vec<String> = replica_cpu_seconds(&stack)?
                .iter()
                .zip(&cpu_before)
                .map(|(after, before)| format!("{:.2}", after - before))
                .collect();
            let mut attempts = 0.0;
            for executor in &stack.executors {
                attempts += stack
                    .metrics(&executor.url)
                    .await?
                    .sum("payout_execute_seconds_count", &[])?;
            }
            let rate = options.payouts as f64 / seconds;
            let base = *baseline.get_or_insert(rate);
            println!(
                "| {count} | {concurrency} | {} | {seconds:.2} | {rate:.1} | {:.2} | {:.2} | {} |",
                options.payouts,
                rate / base,
                attempts / options.payouts as f64,
                cpu.join(" / ")
            );
        }
    }
    Ok(())
}

/// CPU seconds (user + system) each lock-server replica of `stack` has used so far: shows
/// whether both replicas work (sessions spread over the endpoints).
fn replica_cpu_seconds(stack: &crate::stack::Stack) -> anyhow::Result<Vec<f64>> {
    stack
        .lock_servers
        .iter()
        .map(|server| Ok(cpu_micros(server.process.pid())? / 1e6))
        .collect()
}
