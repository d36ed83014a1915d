//! What a campaign must find once the nemesis stops: every payout terminal within the bound
//! and every service ready, no payout at the rail twice, a balanced ledger, a history that
//! passes its checks (`history`), and at least the events it was asked to see.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, bail};
use payment_api::Payout;

use super::nemesis::continue_stopped_until;
use super::options::{ChaosOptions, ChaosReport, LIVENESS_BOUND};
use super::setup::Campaign;
use crate::history::{Fault, History, RailTransfer, WriteOp};
use crate::stack::Stack;

/// What the checks found, for the report.
pub(super) struct Found {
    pub history: History,
    pub faults: Vec<Fault>,
    /// Zombie writes: sent after a pause that outlived their grant, refused by the resource.
    pub refused: Vec<WriteOp>,
    pub pauses_while_holding: usize,
    /// Payouts the rail received more than once.
    pub duplicates: usize,
}

/// Waits for every payout to end and every service to be ready, continuing at once any
/// executor that stops itself meanwhile.
pub(super) async fn drain(campaign: &Campaign, ids: &[i64]) -> anyhow::Result<Vec<Payout>> {
    let done = Arc::new(AtomicBool::new(false));
    let continuer = continue_stopped_until(campaign.executor_pids.clone(), done.clone());
    let drained = async {
        let payouts = campaign
            .stack
            .lock()
            .await
            .wait_terminal(ids, LIVENESS_BOUND)
            .await
            .context("I7: every payout terminal once the faults stopped")?;
        campaign
            .stack
            .lock()
            .await
            .all_ready()
            .await
            .context("a service did not recover")?;
        anyhow::Ok(payouts)
    }
    .await;
    done.store(true, Ordering::SeqCst);
    continuer.await?;
    drained
}

/// The rail, the ledger and the recorded history; `Err` on any violation.
pub(super) async fn check(stack: &Stack, ids: &[i64], faults: Vec<Fault>) -> anyhow::Result<Found> {
    let mut rail = Vec::new();
    let mut duplicates = 0;
    for id in ids {
        let received = stack.rail_received(*id).await?;
        duplicates += usize::from(received.len() > 1);
        rail.extend(received.iter().map(|r| RailTransfer {
            payout_id: *id,
            token: r.transfer.presented_token,
        }));
    }
    let ledger = stack.ledger().await?;
    if ledger.balance_by_currency.iter().any(|(_, sum)| *sum != 0)
        || ledger.postings != ledger.settled_payouts
        || ledger.payouts_with_extra_postings != 0
    {
        bail!("I6: the ledger does not balance: {ledger:?}");
    }
    let history = History::read(
        &stack.lock_server_logs(),
        &stack.executor_logs(),
        rail,
        faults.clone(),
    )?;
    let refused = history.check()?;
    let pauses_while_holding = faults
        .iter()
        .filter(|f| f.kind == "pause")
        .filter(|f| {
            history
                .spans
                .values()
                .flatten()
                .any(|s| s.owner == f.target && s.granted_at <= f.start && f.start < s.ended_at)
        })
        .count();
    Ok(Found {
        history,
        faults,
        refused,
        pauses_while_holding,
        duplicates,
    })
}

/// A campaign that saw none of the events it checks proves nothing: each minimum is a
/// failure, never a quiet zero.
pub(super) fn minimums(
    report: &ChaosReport,
    payouts: usize,
    options: &ChaosOptions,
) -> anyhow::Result<()> {
    let writes = report.writes;
    if writes < payouts {
        bail!("the executors logged {writes} writes for {payouts} payouts: the history went blind");
    }
    for (what, got, want) in [
        ("pauses", report.count("pause"), options.expect_pauses),
        (
            "pauses while holding a grant",
            report.pauses_while_holding,
            options.expect_pauses_holding,
        ),
        (
            "zombie writes fenced",
            report.stale_writes_fenced,
            options.expect_zombies,
        ),
        (
            "declared losses",
            report.declared_losses,
            options.expect_losses,
        ),
        (
            "replica kills",
            report.count("replica-kill"),
            options.expect_replica_kills,
        ),
        (
            "store restarts",
            report.count("store-restart"),
            options.expect_store_restarts,
        ),
        (
            "partitions",
            report.count("partition"),
            options.expect_partitions,
        ),
    ] {
        if got < want {
            bail!("the campaign saw {got} {what}, fewer than the {want} expected");
        }
    }
    Ok(())
}
