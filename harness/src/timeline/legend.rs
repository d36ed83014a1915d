//! The legend below the lanes: each kind of mark with its swatch and how many of it the
//! picture holds ("fenced writes: 4").

use std::fmt::Write as _;

use super::canvas::{Canvas, WIDTH_PX};
use super::mark::{Counts, Mark};

/// Entries per legend row.
const COLUMNS: usize = 4;
/// The height of one legend row.
pub const ROW_PX: f64 = 18.0;
/// The gap between the last lane and the legend's first row.
pub const GAP_PX: f64 = 22.0;
/// The height the legend takes below the lanes.
pub const HEIGHT_PX: f64 = GAP_PX + ROW_PX * Mark::ALL.len().div_ceil(COLUMNS) as f64;

/// The swatch of `kind` at (`x`, `y`), its top left corner, 16 × 10 px.
fn swatch(kind: Mark, x: f64, y: f64) -> String {
    let colour = kind.colour();
    match kind {
        Mark::GrantReleased | Mark::GrantExpired => format!(
            r#"<rect x="{x:.1}" y="{y:.1}" width="16" height="10" fill="{colour}" stroke="{}" stroke-width="0.7"/>"#,
            kind.edge()
        ),
        Mark::Loss => format!(
            r#"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{colour}" stroke-width="2" stroke-dasharray="3,2"/>"#,
            x + 8.0,
            y - 2.0,
            x + 8.0,
            y + 12.0
        ),
        Mark::Fenced => format!(
            r#"<text x="{:.1}" y="{:.1}" font-size="14" font-weight="bold" fill="{colour}">✗</text>"#,
            x + 3.0,
            y + 10.0
        ),
        Mark::Zombie => format!(
            r##"<rect x="{x:.1}" y="{y:.1}" width="16" height="11" rx="3" fill="{colour}"/><text x="{:.1}" y="{:.1}" font-size="9" fill="#fff" font-weight="bold">Z</text>"##,
            x + 5.0,
            y + 9.0
        ),
        Mark::Pause | Mark::Partition | Mark::Downtime => format!(
            r#"<rect x="{x:.1}" y="{y:.1}" width="16" height="10" fill="{colour}" opacity="0.6"/>"#
        ),
    }
}

/// The text of `kind`'s legend entry.
pub fn entry(kind: Mark, counts: &Counts) -> String {
    format!("{}: {}", kind.legend(), counts.get(kind))
}

/// Draws the legend below the lanes.
pub fn draw(canvas: &mut Canvas<'_>) {
    let top = canvas.lanes_bottom() + GAP_PX;
    let column_px = (WIDTH_PX - 20.0) / COLUMNS as f64;
    for (i, kind) in Mark::ALL.into_iter().enumerate() {
        let x = 10.0 + column_px * (i % COLUMNS) as f64;
        let y = top + ROW_PX * (i / COLUMNS) as f64;
        let _ = writeln!(
            canvas.svg,
            r#"<g class="legend" data-kind="{}">{}<text class="entry" x="{:.1}" y="{:.1}">{}</text></g>"#,
            kind.id(),
            swatch(kind, x, y - 9.0),
            x + 22.0,
            y,
            entry(kind, &canvas.counts)
        );
    }
}
