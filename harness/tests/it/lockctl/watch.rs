//! `lockctl watch` on real processes: it prints what happens under its prefix, one JSON line
//! per event with rising positions (a run's grant and release, a campaign's proclaim), and
//! nothing of other keys; a bad prefix is one line and exit 64.

use super::*;

/// The `(kind, lock_key, position)` of each event line of a `watch --json` log.
fn printed(log: &str) -> Vec<(String, String, u64)> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l.get("kind").is_some())
        .map(|l| {
            let text = |f: &str| l[f].as_str().unwrap_or_default().to_owned();
            (
                text("kind"),
                text("lock_key"),
                l["position"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_each_event_under_its_prefix_in_order() {
    let fx = fixture().await;
    let watch = fx.spawn("watch", &["--json", "watch", "w:", "--after", "0"]);
    let run = fx.ctl(&["run", "w:1", "--", "true"], &[]).await;
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    let other = fx.ctl(&["run", "x:1", "--", "true"], &[]).await;
    assert_eq!(other.status.code(), Some(0), "{other:?}");
    let elect = fx
        .ctl(&["elect", "w:e", "--value", "host-a", "--", "true"], &[])
        .await;
    assert_eq!(elect.status.code(), Some(0), "{elect:?}");
    let seen = poll_until(
        "the watch to print five events",
        Duration::from_secs(20),
        || async {
            let seen = printed(&watch.log());
            (seen.len() >= 5).then_some(seen)
        },
    )
    .await;
    let kinds: Vec<(&str, &str)> = seen
        .iter()
        .map(|(k, key, _)| (k.as_str(), key.as_str()))
        .collect();
    assert_eq!(
        kinds[..5],
        [
            ("granted", "w:1"),
            ("released", "w:1"),
            ("granted", "w:e"),
            ("proclaimed", "w:e"),
            ("released", "w:e")
        ],
        "{}",
        watch.log()
    );
    assert!(
        seen.windows(2).all(|w| w[0].2 < w[1].2),
        "positions rise: {seen:?}"
    );
    let bad = fx.ctl(&["watch", "has space"], &[]).await;
    assert_fails(&bad, 64, "prefix");
}
