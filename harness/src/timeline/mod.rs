//! The picture of a run: a self-contained SVG with one lane per executor, per killed replica,
//! rail-proxy (when killed) and the store, under a time axis (seconds, or milliseconds for a
//! short window, from the window's start). Grant intervals, pause and partition spans,
//! replica, proxy and store downtime, the client-declared losses, the server-side expiries
//! and every fenced write are marked; a label is drawn only where it fits, and every mark
//! carries its full details in a `<title>` (a hover tooltip). A legend counts each kind of
//! mark. One picture for the whole run, whose zombie badges link to one picture per zombie
//! episode (a paused holder whose stale write was fenced), zoomed on that payout's key.
//!
//! The parts: `canvas` (geometry, scale, label placement), `mark` (kinds, colours, counts),
//! `axis`, `marks` (what the lanes show), `legend` and `zombie` (the episodes).

mod axis;
mod canvas;
mod legend;
mod mark;
mod marks;
mod zombie;

pub use zombie::{Zombie, episodes};

use std::fmt::Write as _;

use chrono::{DateTime, Utc};

use crate::history::History;

/// What one picture shows.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    /// Its title.
    pub title: &'a str,
    /// The window's start: the axis's zero.
    pub from: DateTime<Utc>,
    /// The window's end.
    pub to: DateTime<Utc>,
    /// With a key, only that key's grants, losses and writes (a zombie episode's picture);
    /// without, the whole run, whose zombie badges link to the episodes' pictures.
    pub key: Option<&'a str>,
    /// The run's zombie episodes, whose fenced writes get a numbered badge.
    pub zombies: &'a [Zombie<'a>],
}

/// The lanes of `history`: one per executor, one per killed replica, rail-proxy if it was
/// killed, then the store.
fn lanes(history: &History) -> Vec<String> {
    let mut lanes: Vec<String> = history.audit.sessions_by_owner.keys().cloned().collect();
    let mut killed: Vec<String> = history
        .faults
        .iter()
        .filter(|f| f.kind == "replica-kill" || f.kind == "proxy-kill")
        .map(|f| f.target.clone())
        .collect();
    killed.sort();
    killed.dedup();
    lanes.extend(killed);
    lanes.push("store".to_owned());
    lanes
}

/// The earliest instant of `history`: its first grant, write, fault or declared loss (the
/// whole run's picture starts there).
pub fn first_event(history: &History) -> Option<DateTime<Utc>> {
    let grants = history.spans.values().flatten().map(|s| s.granted_at);
    let writes = history.writes.iter().map(|w| w.invoked_at);
    let faults = history.faults.iter().map(|f| f.start);
    let losses = history.losses.iter().map(|(_, l)| l.deadline);
    grants.chain(writes).chain(faults).chain(losses).min()
}

/// Draws `history` as `view` asks.
pub fn render(history: &History, view: &View<'_>) -> String {
    let scale = canvas::Scale {
        from: view.from,
        to: view.to,
    };
    let mut canvas = canvas::Canvas::new(scale, lanes(history), view.key, view.zombies);
    marks::draw_lanes(&mut canvas);
    axis::draw(&mut canvas);
    marks::draw_faults(&mut canvas, history);
    marks::keep_marks_clear(&mut canvas, history);
    marks::draw_grants(&mut canvas, history);
    marks::draw_losses(&mut canvas, history);
    marks::draw_fenced_writes(&mut canvas, history);
    legend::draw(&mut canvas);
    let height = canvas.lanes_bottom() + legend::HEIGHT_PX;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" width="{}" height="{height:.0}" font-family="monospace" font-size="{}">"#,
        canvas::WIDTH_PX,
        canvas::FONT_PX
    );
    let _ = writeln!(svg, r#"<title>{}</title>"#, crate::svg::escape(view.title));
    let _ = writeln!(
        svg,
        r##"<rect width="100%" height="100%" fill="#fff"/><text x="10" y="18" font-size="13">{} ({} to {}, {})</text>"##,
        crate::svg::escape(view.title),
        view.from.format("%H:%M:%S%.3f"),
        view.to.format("%H:%M:%S%.3f"),
        canvas::lasting(view.from, view.to)
    );
    svg.push_str(&canvas.svg);
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests;
