//! The picture of a run: a self-contained SVG with one lane per executor and per replica,
//! grant intervals labelled with their tokens, pause spans, the client-declared losses, the
//! server-side expiries, replica kills, and every fenced write marked. One picture for the
//! whole run, and one per zombie episode (a paused holder whose stale write was fenced),
//! zoomed on that payout's key.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};

use crate::history::{History, WriteOp};

/// Width of the drawing area in pixels.
const WIDTH_PX: f64 = 1400.0;
/// Height of one lane.
const LANE_PX: f64 = 34.0;
/// Left margin for lane names.
const LEFT_PX: f64 = 150.0;

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

struct Scale {
    from: DateTime<Utc>,
    to: DateTime<Utc>,
}

impl Scale {
    fn x(&self, at: DateTime<Utc>) -> f64 {
        let span = (self.to - self.from).num_microseconds().unwrap_or(1).max(1) as f64;
        let off = (at - self.from).num_microseconds().unwrap_or(0) as f64;
        LEFT_PX + (off / span).clamp(0.0, 1.0) * (WIDTH_PX - LEFT_PX - 20.0)
    }
}

/// The picture being drawn: its time scale, lanes and SVG text so far.
struct Canvas<'a> {
    scale: Scale,
    /// Lane names, top to bottom.
    lanes: Vec<String>,
    /// With a key, only that key's grants, losses and writes are drawn.
    key: Option<&'a str>,
    svg: String,
}

/// The lanes of `history`: one per executor, one per killed replica, then the store.
fn lanes(history: &History) -> Vec<String> {
    let mut lanes: Vec<String> = history.audit.sessions_by_owner.keys().cloned().collect();
    let mut replicas: Vec<String> = history
        .faults
        .iter()
        .filter(|f| f.kind == "replica-kill")
        .map(|f| f.target.clone())
        .collect();
    replicas.sort();
    replicas.dedup();
    lanes.extend(replicas);
    lanes.push("store".to_owned());
    lanes
}

/// The top of lane number `lane`, in pixels.
fn y_of(lane: usize) -> f64 {
    40.0 + LANE_PX * lane as f64
}

impl Canvas<'_> {
    fn lane_of(&self, name: &str) -> Option<usize> {
        self.lanes.iter().position(|l| l == name)
    }

    /// Whether `key` is one this picture leaves out.
    fn other_key(&self, key: &str) -> bool {
        self.key.is_some_and(|k| k != key)
    }

    /// Whether the instant `at` falls outside the picture's window.
    fn outside(&self, at: DateTime<Utc>) -> bool {
        at < self.scale.from || at > self.scale.to
    }

    /// The lane names and their separating lines.
    fn draw_lanes(&mut self) {
        for (i, lane) in self.lanes.iter().enumerate() {
            let y = y_of(i);
            let _ = writeln!(
                self.svg,
                r##"<text x="10" y="{}">{}</text><line x1="{LEFT_PX}" y1="{}" x2="{}" y2="{}" stroke="#ddd"/>"##,
                y + 18.0,
                escape(lane),
                y + LANE_PX,
                WIDTH_PX - 20.0,
                y + LANE_PX
            );
        }
    }

    /// Pauses, partitions, replica kills and store faults, as shaded spans on their lanes.
    fn draw_faults(&mut self, history: &History) {
        for fault in &history.faults {
            let lane = match fault.kind {
                "pause" | "partition" | "replica-kill" => self.lane_of(&fault.target),
                "store-restart" | "store-stall" => self.lane_of("store"),
                _ => None,
            };
            let Some(lane) = lane else { continue };
            if fault.end < self.scale.from || fault.start > self.scale.to {
                continue;
            }
            let (x1, x2) = (self.scale.x(fault.start), self.scale.x(fault.end));
            let color = match fault.kind {
                "pause" => "#bbb",
                "partition" => "#9bf",
                _ => "#f99",
            };
            let _ = writeln!(
                self.svg,
                r#"<rect x="{x1:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{color}" opacity="0.6"><title>{} {}</title></rect>"#,
                y_of(lane) + 2.0,
                (x2 - x1).max(1.0),
                LANE_PX - 4.0,
                fault.kind,
                escape(&fault.target)
            );
        }
    }

    /// Grant intervals labelled with their tokens, and the server-side expiries.
    fn draw_grants(&mut self, history: &History) {
        for span in history.spans.values().flatten() {
            if self.other_key(&span.key)
                || span.ended_at < self.scale.from
                || span.granted_at > self.scale.to
            {
                continue;
            }
            let Some(lane) = self.lane_of(&span.owner) else {
                continue;
            };
            let (x1, x2) = (self.scale.x(span.granted_at), self.scale.x(span.ended_at));
            let y = y_of(lane) + 8.0;
            let fill = if span.expired { "#fc8" } else { "#8c8" };
            let _ = writeln!(
                self.svg,
                r##"<rect x="{x1:.1}" y="{y:.1}" width="{:.1}" height="14" fill="{fill}" stroke="#444"><title>{} token {} ({})</title></rect><text x="{:.1}" y="{:.1}">{} t{}</text>"##,
                (x2 - x1).max(2.0),
                escape(&span.key),
                span.token,
                if span.expired {
                    "expired at the server"
                } else {
                    "released"
                },
                x1 + 2.0,
                y + 11.0,
                escape(&span.key),
                span.token
            );
            if span.expired {
                let _ = writeln!(
                    self.svg,
                    r#"<line x1="{x2:.1}" y1="{:.1}" x2="{x2:.1}" y2="{:.1}" stroke="orange" stroke-width="2"><title>server-side expiry of token {}</title></line>"#,
                    y - 6.0,
                    y + 20.0,
                    span.token
                );
            }
        }
    }

    /// The client-declared losses, as red dashes on the executors' lanes.
    fn draw_losses(&mut self, history: &History) {
        for (executor, loss) in &history.losses {
            let Some((loss_key, token)) = &loss.grant else {
                continue;
            };
            if self.other_key(loss_key) || self.outside(loss.deadline) {
                continue;
            }
            let Some(lane) = self.lane_of(executor) else {
                continue;
            };
            let x = self.scale.x(loss.deadline);
            let _ = writeln!(
                self.svg,
                r#"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="red" stroke-width="2" stroke-dasharray="3,2"><title>client-declared loss of {} token {token} ({})</title></line>"#,
                y_of(lane) + 2.0,
                y_of(lane) + LANE_PX - 2.0,
                escape(loss_key),
                escape(&loss.reason)
            );
        }
    }

    /// Every fenced write, marked ✗ on its executor's lane.
    fn draw_fenced_writes(&mut self, history: &History) {
        for w in history.writes.iter().filter(|w| w.result == "fenced") {
            if self.other_key(&format!("payout:{}", w.payout_id)) || self.outside(w.at) {
                continue;
            }
            let Some(lane) = self.lane_of(&w.executor) else {
                continue;
            };
            let (x, y) = (self.scale.x(w.at), y_of(lane) + LANE_PX / 2.0);
            let _ = writeln!(
                self.svg,
                r##"<text x="{:.1}" y="{:.1}" fill="black" font-size="14" font-weight="bold">✗<title>fenced {} of payout {} with token {}</title></text><text x="{:.1}" y="{:.1}" fill="#900">fenced t{}</text>"##,
                x - 4.0,
                y + 5.0,
                escape(&w.step),
                w.payout_id,
                w.token,
                x + 6.0,
                y + 14.0,
                w.token
            );
        }
    }
}

/// Draws `history` between `from` and `to`; with `key`, only that key's grants and writes.
pub fn render(
    history: &History,
    title: &str,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    key: Option<&str>,
) -> String {
    let lanes = lanes(history);
    let height = 60.0 + LANE_PX * lanes.len() as f64 + 40.0;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH_PX}" height="{height}" font-family="monospace" font-size="10">"#
    );
    let _ = writeln!(svg, r#"<title>{}</title>"#, escape(title));
    let _ = writeln!(
        svg,
        r#"<text x="10" y="18" font-size="13">{} ({} to {})</text>"#,
        escape(title),
        from.format("%H:%M:%S%.3f"),
        to.format("%H:%M:%S%.3f")
    );
    let mut canvas = Canvas {
        scale: Scale { from, to },
        lanes,
        key,
        svg,
    };
    canvas.draw_lanes();
    canvas.draw_faults(history);
    canvas.draw_grants(history);
    canvas.draw_losses(history);
    canvas.draw_fenced_writes(history);
    let mut svg = canvas.svg;
    let legend_y = height - 14.0;
    let _ = writeln!(
        svg,
        r#"<text x="10" y="{legend_y:.1}">green: grant released · amber: grant expired at the server (orange line) · grey: process paused · blue: cut off the network · pink: replica/store down · red dashes: client-declared loss · ✗: fenced write</text>"#
    );
    svg.push_str("</svg>\n");
    svg
}

/// The zombie episodes: each fenced write after a pause, with the whole episode's window
/// (from the stale grant to the fenced write).
pub fn episodes<'h>(
    history: &'h History,
    refused: &'h [WriteOp],
) -> Vec<(&'h WriteOp, DateTime<Utc>)> {
    refused
        .iter()
        .filter_map(|w| {
            let key = format!("payout:{}", w.payout_id);
            let start = history
                .spans
                .get(&key)?
                .iter()
                .find(|s| s.token == w.token)?
                .granted_at;
            Some((w, start))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Fault, GrantSpan};

    #[test]
    fn the_picture_is_svg_and_holds_the_episodes_tokens() {
        let at = |s: &str| -> DateTime<Utc> {
            DateTime::parse_from_rfc3339(s)
                .unwrap_or_else(|e| panic!("{e}"))
                .with_timezone(&Utc)
        };
        let mut history = History::default();
        history
            .audit
            .sessions_by_owner
            .insert("executor-a".into(), vec!["s1".into()]);
        history
            .audit
            .sessions_by_owner
            .insert("executor-b".into(), vec!["s2".into()]);
        history.spans.insert(
            "payout:7".into(),
            vec![
                GrantSpan {
                    key: "payout:7".into(),
                    token: 3,
                    session: "s1".into(),
                    owner: "executor-a".into(),
                    granted_at: at("2026-01-01T00:00:01Z"),
                    ended_at: at("2026-01-01T00:00:03Z"),
                    expired: true,
                },
                GrantSpan {
                    key: "payout:7".into(),
                    token: 4,
                    session: "s2".into(),
                    owner: "executor-b".into(),
                    granted_at: at("2026-01-01T00:00:03.5Z"),
                    ended_at: at("2026-01-01T00:00:04Z"),
                    expired: false,
                },
            ],
        );
        history.faults.push(Fault {
            kind: "pause",
            target: "executor-a".into(),
            start: at("2026-01-01T00:00:01.5Z"),
            end: at("2026-01-01T00:00:05Z"),
        });
        let fenced = WriteOp {
            executor: "executor-a".into(),
            invoked_at: at("2026-01-01T00:00:05.1Z"),
            at: at("2026-01-01T00:00:05.2Z"),
            payout_id: 7,
            step: "submit".into(),
            token: 3,
            result: "fenced".into(),
            deadline_at: at("2026-01-01T00:00:01.4Z"),
        };
        history.writes.push(fenced.clone());
        let refused = vec![fenced];
        let episodes = episodes(&history, &refused);
        assert_eq!(episodes.len(), 1);
        let svg = render(
            &history,
            "zombie <test>",
            at("2026-01-01T00:00:00Z"),
            at("2026-01-01T00:00:06Z"),
            Some("payout:7"),
        );
        let doc = roxmltree::Document::parse(&svg).unwrap_or_else(|e| panic!("{e}\n{svg}"));
        assert_eq!(doc.root_element().tag_name().name(), "svg");
        let text: String = doc
            .descendants()
            .filter_map(|n| n.text())
            .collect::<Vec<_>>()
            .join(" ");
        for needle in [
            "payout:7 t3",
            "payout:7 t4",
            "fenced t3",
            "executor-a",
            "executor-b",
        ] {
            assert!(text.contains(needle), "{needle} missing from {text}");
        }
    }
}
