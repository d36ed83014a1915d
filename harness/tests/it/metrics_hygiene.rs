//! What an operator's Prometheus sees before anything happened: every
//! series C4 pins is on its service's `/metrics` from start, with HELP text, and
//! `promtool check metrics` has nothing to say about any service's page.

use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use harness::stack::{Stack, StackOptions};
use test_support::poll_until;

const EXECUTOR_DEADLINE: Duration = Duration::from_secs(30);

/// Metric names pinned in C4: the first cell of every table row whose second is a type.
fn pinned_in_c4() -> BTreeSet<String> {
    let c4 = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../docs/contracts/C4-observability.md"),
    )
    .expect("read C4");
    c4.lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let (name, kind) = (cells.get(1)?, cells.get(2)?);
            let name = name.strip_prefix('`')?.strip_suffix('`')?;
            ["counter", "gauge", "histogram"]
                .contains(kind)
                .then(|| name.to_owned())
        })
        .collect()
}

/// `promtool check metrics` on `page`: its complaints (empty when clean).
fn promtool_complaints(page: &str) -> String {
    let promtool = std::env::var("PROMTOOL").unwrap_or_else(|_| "promtool".into());
    let mut child = Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot run {promtool} ({e}): run `apt-get install prometheus` (script/test does), or set PROMTOOL")
        });
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(page.as_bytes())
        .expect("write the page");
    let out = child.wait_with_output().expect("promtool ran");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() && said.trim().is_empty() {
        String::new()
    } else {
        format!("exit {:?}: {said}", out.status.code())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_pinned_series_is_exported_from_start_with_help_and_promtool_is_clean() {
    let pinned = pinned_in_c4();
    assert!(pinned.len() >= 30, "C4's tables were not read: {pinned:?}");
    let mut stack = Stack::start(StackOptions::default(), None).await.unwrap();
    stack.start_executor("executor-a", &[]).await.unwrap();
    let http = reqwest::Client::new();
    let scrape = |url: String| {
        let http = http.clone();
        async move {
            http.get(format!("{url}/metrics"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        }
    };
    // The executor's SDK series exist once its session is open.
    let executor_url = stack.executors[0].url.clone();
    poll_until("the executor's session to open", EXECUTOR_DEADLINE, || {
        let page = scrape(executor_url.clone());
        async move {
            page.await
                .contains("lock_session_lost_total{")
                .then_some(())
        }
    })
    .await;
    let services = [
        ("lock-server", stack.lock_servers[0].url.clone()),
        ("payment-resource", stack.payment_url.clone()),
        ("rail-proxy", stack.proxy_url.clone()),
        ("rail-stub", stack.rail_url.clone()),
        ("payout-executor", executor_url),
    ];
    let mut described = BTreeSet::new();
    let mut failures = Vec::new();
    for (service, url) in services {
        let page = scrape(url).await;
        let complaints = promtool_complaints(&page);
        if !complaints.is_empty() {
            failures.push(format!("{service}: promtool check metrics: {complaints}"));
        }
        for line in page.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap_or_default();
                // A HELP line without a series is an exporter quirk, not an export.
                if page.lines().any(|l| {
                    l.strip_prefix(name)
                        .is_some_and(|r| r.starts_with(['{', ' ', '_']))
                }) {
                    described.insert(name.to_owned());
                }
            }
        }
    }
    for name in &pinned {
        if !described.contains(name) {
            failures.push(format!(
                "{name}: pinned in C4 but not exported at start with HELP text by any service"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The metric names a PromQL expression reads: identifiers outside label matchers and
/// grouping clauses that are neither functions, keywords, durations nor dashboard variables.
fn metric_names(expr: &str) -> Vec<String> {
    const KEYWORDS: [&str; 8] = [
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "offset",
    ];
    /// Aggregation operators: `sum by (x) (...)` puts the call's parenthesis after `by`.
    const AGGREGATIONS: [&str; 12] = [
        "sum",
        "min",
        "max",
        "avg",
        "count",
        "stddev",
        "stdvar",
        "topk",
        "bottomk",
        "quantile",
        "count_values",
        "group",
    ];
    let mut plain = String::new();
    let mut depth = 0;
    for c in expr.chars() {
        match c {
            '{' | '[' => depth += 1,
            '}' | ']' => depth -= 1,
            _ if depth == 0 => plain.push(c),
            _ => {}
        }
    }
    let bytes: Vec<char> = plain.chars().collect();
    let mut names = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c == '$' {
            while i < bytes.len() && (bytes[i].is_alphanumeric() || "$_".contains(bytes[i])) {
                i += 1;
            }
            continue;
        }
        if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == '_') {
                i += 1;
            }
            let word: String = bytes[start..i].iter().collect();
            let rest: String = bytes[i..].iter().collect();
            let next = rest.trim_start().chars().next();
            let is_call = next == Some('(');
            if KEYWORDS.contains(&word.as_str()) {
                // `by (a, b)`: skip the grouping labels too.
                if let Some(close) = rest.find(')').filter(|_| next == Some('(')) {
                    i += rest[..=close].chars().count();
                }
            } else if !is_call && !AGGREGATIONS.contains(&word.as_str()) {
                names.push(word);
            }
            continue;
        }
        if c.is_ascii_digit() {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == '.') {
                i += 1;
            }
            continue;
        }
        i += 1;
    }
    names
}

#[test]
fn the_promql_reader_finds_metric_names_and_nothing_else() {
    assert_eq!(
        metric_names(
            "histogram_quantile(0.99, sum by (le, route) (rate(lock_http_request_duration_seconds_bucket{route=\"/x\"}[$__rate_interval]))) * 60"
        ),
        ["lock_http_request_duration_seconds_bucket"]
    );
    assert_eq!(
        metric_names("sum(rate(a_total[5m])) / (sum(b_total) + up)"),
        ["a_total", "b_total", "up"]
    );
}

/// The Grafana dashboard an operator imports reads only metrics C4 pins (and Prometheus'
/// own `up`): a renamed metric breaks this test, not a panel in production.
#[test]
fn the_dashboard_queries_only_metrics_pinned_in_c4() {
    let pinned = pinned_in_c4();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/grafana/payouts-dashboard.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("read the dashboard"))
            .expect("the dashboard is JSON");
    let mut exprs = Vec::new();
    collect_exprs(&dashboard, &mut exprs);
    assert!(
        exprs.len() >= 10,
        "the dashboard's queries were not found: {exprs:?}"
    );
    let mut unknown = Vec::new();
    for expr in &exprs {
        for name in metric_names(expr) {
            let family = ["_bucket", "_count", "_sum"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix).filter(|f| pinned.contains(*f)))
                .unwrap_or(&name);
            if family != "up" && !pinned.contains(family) {
                unknown.push(format!("{name} in {expr}"));
            }
        }
    }
    assert!(unknown.is_empty(), "not pinned in C4: {unknown:?}");
}

fn collect_exprs(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("expr", serde_json::Value::String(expr)) => out.push(expr.clone()),
                    _ => collect_exprs(v, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| collect_exprs(v, out)),
        _ => {}
    }
}
