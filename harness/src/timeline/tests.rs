//! The pictures as an operator reads them, on a synthetic run like a long campaign's (212 s,
//! six executors, hundreds of grants, pauses, kills, losses, fenced writes and zombies): an
//! axis that covers the run, labels only where they fit and never over one another, every
//! mark with its details, a legend that counts what the history holds, zombies one click
//! away. `TIMELINE_PICTURES=DIR` keeps the pictures drawn, for a look.

use super::*;
use crate::audit::DeclaredLoss;
use crate::history::{Fault, GrantSpan, WriteOp};
use canvas::LabelBox;
use chrono::Duration;
use mark::Mark;

/// The synthetic run's length.
const RUN_MS: i64 = 212_000;
/// Its executors.
const EXECUTORS: usize = 6;

fn base() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-01T12:00:00Z")
        .unwrap_or_else(|e| panic!("{e}"))
        .with_timezone(&Utc)
}

fn at(ms: i64) -> DateTime<Utc> {
    base() + Duration::milliseconds(ms)
}

/// A run and the writes the checker would call zombies.
struct Run {
    history: History,
    refused: Vec<WriteOp>,
}

impl Run {
    fn grant(&mut self, payout: i64, token: i64, owner: &str, ms: (i64, i64), expired: bool) {
        let key = format!("payout:{payout}");
        self.history
            .spans
            .entry(key.clone())
            .or_default()
            .push(GrantSpan {
                key,
                token,
                session: format!("s-{owner}"),
                owner: owner.to_owned(),
                granted_at: at(ms.0),
                ended_at: at(ms.1),
                expired,
            });
    }

    fn write(&mut self, owner: &str, payout: i64, token: i64, ms: i64, result: &str) -> WriteOp {
        let write = WriteOp {
            executor: owner.to_owned(),
            invoked_at: at(ms - 40),
            at: at(ms),
            payout_id: payout,
            step: "submit".into(),
            token,
            result: result.into(),
            deadline_at: at(ms - 200),
        };
        self.history.writes.push(write.clone());
        write
    }

    fn fault(&mut self, kind: &'static str, target: &str, ms: (i64, i64)) {
        self.history.faults.push(Fault {
            kind,
            target: target.to_owned(),
            start: at(ms.0),
            end: at(ms.1),
        });
    }

    fn loss(&mut self, owner: &str, grant: Option<(String, i64)>, ms: i64) {
        let loss = DeclaredLoss {
            session: format!("s-{owner}"),
            grant,
            reason: "deadline_passed".into(),
            deadline: at(ms),
        };
        self.history.losses.push((owner.to_owned(), loss));
    }
}

/// Six executors working payouts one after another for 212 s (a few grants long enough to
/// label), every eighth grant expiring at the server with a loss declared before it, pauses,
/// partitions, replica, proxy and store faults, four zombie episodes and two fenced writes
/// close together on one lane.
fn synthetic_run() -> Run {
    let mut rng = fastrand::Rng::with_seed(7);
    let mut run = Run {
        history: History::default(),
        refused: Vec::new(),
    };
    let owners: Vec<String> = (0..EXECUTORS).map(|e| format!("executor-{e}")).collect();
    for owner in &owners {
        run.history
            .audit
            .sessions_by_owner
            .insert(owner.clone(), vec![format!("s-{owner}")]);
    }
    let mut payout = 0;
    for owner in &owners {
        let mut t = rng.i64(0..800);
        while t < RUN_MS - 30_000 {
            payout += 1;
            let held = if rng.u32(0..30) == 0 {
                rng.i64(15_000..25_000)
            } else {
                rng.i64(80..2_500)
            };
            let expired = rng.u32(0..8) == 0;
            run.grant(payout, 1, owner, (t, t + held), expired);
            if expired {
                run.loss(owner, Some((format!("payout:{payout}"), 1)), t + held - 150);
            } else {
                run.write(owner, payout, 1, t + held - 20, "ok");
            }
            t += held + rng.i64(30..700);
        }
    }
    for n in 0..4 {
        let (a, b) = (&owners[n], &owners[n + 1]);
        let t0 = 20_000 + 45_000 * n as i64;
        payout += 1;
        run.grant(payout, 1, a, (t0, t0 + 2_000), true);
        run.fault("pause", a, (t0 + 300, t0 + 4_000));
        run.loss(a, Some((format!("payout:{payout}"), 1)), t0 + 1_800);
        run.grant(payout, 2, b, (t0 + 2_100, t0 + 2_600), false);
        let stale = run.write(a, payout, 1, t0 + 4_050, "fenced");
        run.refused.push(stale);
    }
    for (ms, payout) in [(100_000, 1), (100_300, 2), (150_000, 3)] {
        run.write(&owners[5], payout, 1, ms, "fenced");
    }
    run.loss(&owners[2], None, 90_000);
    for _ in 0..60 {
        let start = rng.i64(0..RUN_MS - 8_000);
        let owner = &owners[rng.usize(0..EXECUTORS)];
        run.fault("pause", owner, (start, start + rng.i64(200..6_000)));
    }
    for (kind, target, start) in [
        ("partition", "executor-1", 40_000),
        ("partition", "executor-4", 120_000),
        ("replica-kill", "lock-server-1", 30_000),
        ("replica-kill", "lock-server-2", 110_000),
        ("replica-kill", "lock-server-1", 170_000),
        ("store-restart", "postgres", 60_000),
        ("store-stall", "postgres", 140_000),
        ("proxy-kill", "rail-proxy", 80_000),
        ("rail-fault", "payout 9", 50_000),
    ] {
        run.fault(kind, target, (start, start + 2_500));
    }
    run
}

/// The picture of `run` (the whole run, or with a key the first zombie's episode), kept
/// under `TIMELINE_PICTURES` when set.
fn draw(run: &Run, zombies: &[Zombie<'_>], view_key: Option<&str>, file: &str) -> String {
    let (from, to) = match (view_key, zombies.first()) {
        (Some(_), Some(z)) => (
            z.granted_at - Duration::milliseconds(500),
            z.write.at + Duration::milliseconds(500),
        ),
        _ => (first_event(&run.history).unwrap_or_else(base), at(RUN_MS)),
    };
    let svg = render(
        &run.history,
        &View {
            title: "synthetic run",
            from,
            to,
            key: view_key,
            zombies,
        },
    );
    if let Some(dir) = std::env::var_os("TIMELINE_PICTURES") {
        let path = std::path::Path::new(&dir).join(file);
        std::fs::write(&path, &svg).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    svg
}

fn parse(svg: &str) -> roxmltree::Document<'_> {
    roxmltree::Document::parse(svg).unwrap_or_else(|e| panic!("{e}\n{svg}"))
}

fn of_class<'a, 'i>(
    doc: &'a roxmltree::Document<'i>,
    class: &'a str,
) -> impl Iterator<Item = roxmltree::Node<'a, 'i>> + 'a {
    doc.descendants()
        .filter(move |n| n.attribute("class") == Some(class))
}

fn number(node: roxmltree::Node<'_, '_>, attribute: &str) -> f64 {
    node.attribute(attribute)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{attribute} of {node:?}"))
}

/// The axis's ticks: each its x and its value in milliseconds.
fn ticks(doc: &roxmltree::Document<'_>) -> Vec<(f64, f64)> {
    of_class(doc, "tick")
        .map(|n| {
            let text = n.text().unwrap_or_default();
            let value = match (text.strip_suffix(" ms"), text.strip_suffix(" s")) {
                (Some(ms), _) => ms.parse::<f64>().ok(),
                (None, Some(s)) => s.parse::<f64>().ok().map(|s| s * 1_000.0),
                _ => None,
            };
            let value = value.unwrap_or_else(|| panic!("a tick label {text:?}"));
            (number(n, "x"), value)
        })
        .collect()
}

/// The legend's count for `kind`.
fn legend_count(doc: &roxmltree::Document<'_>, kind: Mark) -> usize {
    let entry = of_class(doc, "legend")
        .find(|n| n.attribute("data-kind") == Some(kind.id()))
        .unwrap_or_else(|| panic!("no legend entry for {kind:?}"));
    let text = entry
        .children()
        .find(|n| n.attribute("class") == Some("entry"))
        .and_then(|n| n.text())
        .unwrap_or_default();
    assert!(text.starts_with(kind.legend()), "{text}");
    text.rsplit(": ")
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a count in {text:?}"))
}

/// The marks of `kind` in the picture.
fn marks<'a, 'i>(doc: &'a roxmltree::Document<'i>, kind: Mark) -> Vec<roxmltree::Node<'a, 'i>> {
    of_class(doc, "mark")
        .filter(|n| n.attribute("data-kind") == Some(kind.id()))
        .collect()
}

/// What the history holds of each kind, for the whole run's picture.
fn expected(run: &Run) -> Vec<(Mark, usize)> {
    let h = &run.history;
    let spans: Vec<&GrantSpan> = h.spans.values().flatten().collect();
    let faults = |kinds: &[&str]| h.faults.iter().filter(|f| kinds.contains(&f.kind)).count();
    vec![
        (
            Mark::GrantReleased,
            spans.iter().filter(|s| !s.expired).count(),
        ),
        (
            Mark::GrantExpired,
            spans.iter().filter(|s| s.expired).count(),
        ),
        (Mark::Pause, faults(&["pause"])),
        (Mark::Partition, faults(&["partition"])),
        (
            Mark::Downtime,
            faults(&["replica-kill", "proxy-kill", "store-restart", "store-stall"]),
        ),
        (Mark::Loss, h.losses.len()),
        (
            Mark::Fenced,
            h.writes.iter().filter(|w| w.result == "fenced").count(),
        ),
        (Mark::Zombie, run.refused.len()),
    ]
}

#[test]
fn a_long_run_has_an_axis_in_seconds_that_covers_it() {
    let run = synthetic_run();
    let zombies = episodes(&run.history, &run.refused);
    let svg = draw(&run, &zombies, None, "timeline.svg");
    let doc = parse(&svg);
    let ticks = ticks(&doc);
    assert!(ticks.len() >= 5, "{ticks:?}");
    assert_eq!(ticks[0].1, 0.0);
    let step = ticks[1].1 - ticks[0].1;
    for pair in ticks.windows(2) {
        assert!(pair[1].1 > pair[0].1, "tick values rise: {ticks:?}");
        assert!(
            pair[1].0 - pair[0].0 >= axis::TICK_GAP_MIN_PX - 0.5,
            "{ticks:?}"
        );
        assert!(
            (pair[1].1 - pair[0].1 - step).abs() < 1e-6,
            "one step: {ticks:?}"
        );
    }
    let span_ms =
        (at(RUN_MS) - first_event(&run.history).unwrap_or_else(base)).num_milliseconds() as f64;
    let last = ticks[ticks.len() - 1].1;
    assert!(
        last <= span_ms && last > span_ms - step,
        "{last} of {span_ms}"
    );
    let labels: Vec<&str> = of_class(&doc, "tick").filter_map(|n| n.text()).collect();
    assert!(labels.iter().all(|l| l.ends_with(" s")), "{labels:?}");
}

#[test]
fn labels_are_drawn_only_where_they_fit_and_never_over_one_another() {
    let run = synthetic_run();
    let zombies = episodes(&run.history, &run.refused);
    let zombie_key = zombies[0].key();
    for (key, file) in [
        (None, "labels.svg"),
        (Some(zombie_key.as_str()), "labels-zoom.svg"),
    ] {
        let svg = draw(&run, &zombies[..1], key, file);
        let doc = parse(&svg);
        let labels: Vec<(LabelBox, roxmltree::Node<'_, '_>)> = of_class(&doc, "label")
            .map(|n| {
                let text = n.text().unwrap_or_default();
                (LabelBox::of_text(number(n, "x"), number(n, "y"), text), n)
            })
            .collect();
        for (i, (a, _)) in labels.iter().enumerate() {
            for (b, _) in &labels[i + 1..] {
                assert!(!a.overlaps(b), "labels overlap: {a:?} and {b:?}");
            }
        }
        // A grant's label lies inside its bar.
        for (label, node) in &labels {
            let group = node.parent().unwrap_or_else(|| panic!("a label's group"));
            if let Some(bar) = group.children().find(|c| c.has_tag_name("rect"))
                && group.attribute("data-kind") != Some(Mark::Fenced.id())
            {
                let right = number(bar, "x") + number(bar, "width");
                assert!(
                    label.x2 <= right,
                    "a label past its bar: {label:?} > {right}"
                );
            }
        }
    }
    let svg = draw(&run, &zombies, None, "timeline.svg");
    let doc = parse(&svg);
    let grants = marks(&doc, Mark::GrantReleased).len() + marks(&doc, Mark::GrantExpired).len();
    let placed = of_class(&doc, "label").count();
    // Not vacuous: the long grants are labelled, the short ones (most) are not.
    assert!(
        placed >= 5 && placed * 4 < grants,
        "{placed} labels of {grants} grants"
    );
    let fenced_labels = of_class(&doc, "label")
        .filter(|n| n.text().is_some_and(|t| t.starts_with("fenced")))
        .count();
    assert!(
        fenced_labels < marks(&doc, Mark::Fenced).len(),
        "two fenced writes 300 ms apart cannot both be labelled"
    );
}

#[test]
fn every_mark_carries_its_details_in_a_title() {
    let run = synthetic_run();
    let zombies = episodes(&run.history, &run.refused);
    let svg = draw(&run, &zombies, None, "timeline.svg");
    let doc = parse(&svg);
    for (kind, count) in expected(&run) {
        if kind == Mark::Zombie {
            continue; // a zombie is a fenced write's badge, inside its mark
        }
        let found = marks(&doc, kind);
        assert_eq!(found.len(), count, "{kind:?}");
        for mark in found {
            let title = mark
                .first_element_child()
                .filter(|c| c.has_tag_name("title"))
                .and_then(|t| t.text())
                .unwrap_or_else(|| panic!("{kind:?} without a title"));
            let needles: &[&str] = match kind {
                Mark::GrantReleased => &["payout:", "token", "granted +", "released +"],
                Mark::GrantExpired => &["payout:", "token", "granted +", "expired at the server"],
                Mark::Pause | Mark::Partition | Mark::Downtime => &[" of ", "from +", " to +"],
                Mark::Loss => &["client-declared loss of", "deadline +"],
                Mark::Fenced => &["fenced submit of payout", "with token", "refused +"],
                Mark::Zombie => &[],
            };
            for needle in needles {
                assert!(title.contains(needle), "{kind:?}: {needle} not in {title}");
            }
        }
    }
}

#[test]
fn the_legend_counts_what_the_history_holds() {
    let run = synthetic_run();
    let zombies = episodes(&run.history, &run.refused);
    let svg = draw(&run, &zombies, None, "timeline.svg");
    let doc = parse(&svg);
    let expected = expected(&run);
    assert!(expected.iter().all(|(_, n)| *n > 0), "{expected:?}");
    for (kind, count) in expected {
        assert_eq!(legend_count(&doc, kind), count, "{kind:?}");
    }
    assert_eq!(legend_count(&doc, Mark::Fenced), 7);
}

#[test]
fn zombies_are_one_click_away_and_their_pictures_have_the_axis_and_legend() {
    let run = synthetic_run();
    let zombies = episodes(&run.history, &run.refused);
    assert_eq!(zombies.len(), 4);
    let svg = draw(&run, &zombies, None, "timeline.svg");
    let doc = parse(&svg);
    let links: Vec<(&str, String)> = doc
        .descendants()
        .filter(|n| n.has_tag_name("a"))
        .map(|a| {
            let badge = a
                .descendants()
                .find(|n| n.attribute("class") == Some("badge"))
                .and_then(|n| n.text())
                .unwrap_or_default();
            (a.attribute("href").unwrap_or_default(), badge.to_owned())
        })
        .collect();
    let wanted: Vec<(String, String)> = zombies
        .iter()
        .map(|z| (z.file_name(), format!("Z{}", z.number)))
        .collect();
    assert_eq!(links.len(), wanted.len());
    for ((href, badge), (file, number)) in links.iter().zip(&wanted) {
        assert_eq!((*href, badge), (file.as_str(), number));
    }
    for zombie in &zombies {
        let key = zombie.key();
        let file = zombie.file_name();
        let svg = draw(&run, std::slice::from_ref(zombie), Some(&key), &file);
        let doc = parse(&svg);
        let ticks = ticks(&doc);
        assert!(ticks.len() >= 5, "{ticks:?}");
        let labels: Vec<&str> = of_class(&doc, "tick").filter_map(|n| n.text()).collect();
        assert!(labels.iter().all(|l| l.ends_with(" ms")), "{labels:?}");
        assert_eq!(legend_count(&doc, Mark::Zombie), 1);
        assert_eq!(legend_count(&doc, Mark::Fenced), 1);
        assert_eq!(legend_count(&doc, Mark::GrantExpired), 1);
        assert_eq!(legend_count(&doc, Mark::GrantReleased), 1);
        assert!(
            !doc.descendants().any(|n| n.has_tag_name("a")),
            "no link in an episode"
        );
        let text: String = of_class(&doc, "label")
            .filter_map(|n| n.text())
            .collect::<Vec<_>>()
            .join(" ");
        for needle in [format!("{key} t1"), format!("{key} t2"), "fenced t1".into()] {
            assert!(text.contains(&needle), "{needle} not in {text}");
        }
    }
}
