//! What a lock costs etcd: the calls and proposals one side of `harness bench locks` made
//! etcd serve, per granted lock, read from the members' own `/metrics` before and after the
//! side (etcd 3.4's gRPC and server counters): the lock-server on etcd next to etcd's own
//! lock API on the same members.

use std::collections::BTreeMap;

/// gRPC methods counted, in the table's order: the calls of a lock cycle through the
/// lock-server. etcd 3.4 counts no `Lock` or `Unlock` call of its lock API here (one each a
/// cycle); its proposals are counted.
const METHODS: [&str; 6] = [
    "Range",
    "Txn",
    "Put",
    "DeleteRange",
    "LeaseKeepAlive",
    "LeaseGrant",
];
/// Raft proposals committed: every member commits each, so the table reads one member's.
const PROPOSALS: &str = "etcd_server_proposals_committed_total";
/// Requests (a unary call, or one message of a stream) by method.
const RECEIVED: &str = "grpc_server_msg_received_total";
/// Events sent to watchers.
const WATCH_EVENTS: &str = "etcd_debugging_mvcc_events_total";

/// Counter values of all members, by the table's column.
#[derive(Debug, Clone, Default)]
pub(crate) struct EtcdCounts(BTreeMap<&'static str, f64>);

/// The table's header cells after the side's.
pub(crate) fn header() -> String {
    let mut cells = vec!["proposals".to_owned()];
    cells.extend(METHODS.iter().map(|m| m.to_string()));
    cells.push("watch events".to_owned());
    format!(
        "| clients | keys | side | {} |\n|---|---|---|{}",
        cells.join(" | "),
        "---|".repeat(cells.len())
    )
}

/// The members' counters now.
pub(crate) async fn read(
    http: &reqwest::Client,
    endpoints: &[String],
) -> anyhow::Result<EtcdCounts> {
    let mut counts = BTreeMap::new();
    for (index, endpoint) in endpoints.iter().enumerate() {
        let text = (http.get(format!("{endpoint}/metrics")).send().await?)
            .error_for_status()?
            .text()
            .await?;
        if index == 0 {
            counts.insert("proposals", counter(&text, PROPOSALS, None)?);
        }
        for method in METHODS {
            *counts.entry(method).or_default() += counter(&text, RECEIVED, Some(method))?;
        }
        *counts.entry("watch events").or_default() += counter(&text, WATCH_EVENTS, None)?;
    }
    Ok(EtcdCounts(counts))
}

impl EtcdCounts {
    /// The row cells: each counter's growth from `self` to `later`, per grant.
    pub(crate) fn per_grant_cells(&self, later: &EtcdCounts, granted: u64) -> String {
        let grants = granted.max(1) as f64;
        let cell = |name: &str| {
            let grew = later.0.get(name).unwrap_or(&0.0) - self.0.get(name).unwrap_or(&0.0);
            format!("{:.2}", grew / grants)
        };
        let mut cells = vec![cell("proposals")];
        cells.extend(METHODS.iter().map(|m| cell(m)));
        cells.push(cell("watch events"));
        cells.join(" | ")
    }
}

/// The sum of `family`'s samples in `text` (those of gRPC `method` when given); a family
/// with no sample is an error, never 0.
fn counter(text: &str, family: &str, method: Option<&str>) -> anyhow::Result<f64> {
    let label = method.map(|m| format!("grpc_method=\"{m}\""));
    let values: Vec<f64> = (text.lines())
        .filter(|l| {
            l.strip_prefix(family)
                .is_some_and(|rest| rest.starts_with([' ', '{']))
        })
        .filter(|l| {
            label
                .as_ref()
                .is_none_or(|label| l.contains(label.as_str()))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .collect();
    anyhow::ensure!(
        !values.is_empty(),
        "{family} {method:?} missing from etcd's /metrics"
    );
    Ok(values.iter().sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_sum_a_methods_samples_and_refuse_an_absent_family() {
        let text = "\
grpc_server_msg_received_total{grpc_method=\"Txn\",grpc_service=\"etcdserverpb.KV\",grpc_type=\"unary\"} 7
grpc_server_msg_received_total{grpc_method=\"Range\",grpc_service=\"etcdserverpb.KV\",grpc_type=\"unary\"} 3
etcd_server_proposals_committed_total 12
";
        assert_eq!(counter(text, RECEIVED, Some("Txn")).unwrap(), 7.0);
        assert_eq!(counter(text, PROPOSALS, None).unwrap(), 12.0);
        assert!(counter(text, WATCH_EVENTS, None).is_err());
        let before = EtcdCounts(BTreeMap::from([("proposals", 10.0), ("Txn", 4.0)]));
        let after = EtcdCounts(BTreeMap::from([("proposals", 14.0), ("Txn", 8.0)]));
        assert!(
            before
                .per_grant_cells(&after, 2)
                .starts_with("2.00 | 0.00 | 2.00 |")
        );
    }
}
