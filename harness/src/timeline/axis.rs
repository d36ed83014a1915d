//! The time axis: ticks at a "nice" step (1, 2 or 5 × 10^k) from the window's start, at
//! least [`TICK_GAP_MIN_PX`] apart, labelled in seconds, or in milliseconds when the step is
//! under a second; light vertical grid lines through the lanes.

use std::fmt::Write as _;

use super::canvas::{Canvas, LANES_TOP_PX, Scale};
use crate::svg::escape;

/// The least distance between two ticks, so their labels never crowd.
pub const TICK_GAP_MIN_PX: f64 = 80.0;
/// The finest step the axis takes.
const STEP_MIN_MS: f64 = 1.0;

/// The smallest step of 1, 2 or 5 × 10^k milliseconds (at least [`STEP_MIN_MS`]) that puts
/// ticks at least [`TICK_GAP_MIN_PX`] apart on a window of `span_ms` drawn `width_px` wide.
pub fn nice_step_ms(span_ms: f64, width_px: f64) -> f64 {
    let least = (span_ms * TICK_GAP_MIN_PX / width_px.max(1.0)).max(STEP_MIN_MS);
    crate::svg::nice_step(least)
}

/// The ticks of a window of `span_ms` at `step_ms`: each offset in milliseconds and its label.
pub fn ticks(span_ms: f64, step_ms: f64) -> Vec<(f64, String)> {
    let count = (span_ms / step_ms + 1e-9).floor() as usize;
    (0..=count)
        .map(|i| {
            let ms = step_ms * i as f64;
            let label = if step_ms >= 1_000.0 {
                format!("{} s", (ms / 1_000.0).round())
            } else {
                format!("{} ms", ms.round())
            };
            (ms, label)
        })
        .collect()
}

/// Draws the axis above the lanes and its grid lines through them.
pub fn draw(canvas: &mut Canvas<'_>) {
    let scale = canvas.scale;
    let step = nice_step_ms(scale.span_ms(), Scale::RIGHT_PX - Scale::LEFT_PX);
    let bottom = canvas.lanes_bottom();
    let svg = &mut canvas.svg;
    let _ = writeln!(
        svg,
        r##"<text x="10" y="{:.1}" fill="#555"><title>the axis: time since the window's start, {}</title>t0 {}</text>"##,
        LANES_TOP_PX - 8.0,
        escape(&scale.from.to_rfc3339()),
        scale.from.format("%H:%M:%S%.3f")
    );
    let _ = writeln!(
        svg,
        r##"<line x1="{:.1}" y1="{LANES_TOP_PX:.1}" x2="{:.1}" y2="{LANES_TOP_PX:.1}" stroke="#888"/>"##,
        Scale::LEFT_PX,
        Scale::RIGHT_PX
    );
    for (ms, label) in ticks(scale.span_ms(), step) {
        let x = scale.x_of_ms(ms);
        let _ = writeln!(
            svg,
            r##"<line x1="{x:.1}" y1="{LANES_TOP_PX:.1}" x2="{x:.1}" y2="{bottom:.1}" stroke="#eee"/><line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{LANES_TOP_PX:.1}" stroke="#888"/><text class="tick" x="{x:.1}" y="{:.1}" text-anchor="middle" fill="#555">{label}</text>"##,
            LANES_TOP_PX - 5.0,
            LANES_TOP_PX - 8.0,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_nice_and_far_enough_apart() {
        // A 212 s run on 1230 px: at least 13.8 s between ticks, so 20 s.
        assert_eq!(nice_step_ms(212_000.0, 1230.0), 20_000.0);
        // A 4 s zombie window: at least 260 ms, so 500 ms.
        assert_eq!(nice_step_ms(4_000.0, 1230.0), 500.0);
        assert_eq!(nice_step_ms(15_375.0, 1230.0), 1_000.0);
        assert_eq!(nice_step_ms(0.001, 1230.0), STEP_MIN_MS);
        for span in [1.0, 37.0, 999.0, 4_321.0, 60_000.0, 212_000.0, 904_000.0] {
            let step = nice_step_ms(span, 1230.0);
            assert!(step * 1230.0 / span >= TICK_GAP_MIN_PX - 1e-6 || step == STEP_MIN_MS);
            let mantissa = step / 10f64.powf(step.log10().floor());
            assert!(
                [1.0, 2.0, 5.0].iter().any(|m| (m - mantissa).abs() < 1e-9),
                "{step}"
            );
        }
    }

    #[test]
    fn ticks_read_in_seconds_or_in_milliseconds_for_short_windows() {
        let long: Vec<String> = ticks(212_000.0, 20_000.0)
            .into_iter()
            .map(|t| t.1)
            .collect();
        assert_eq!(long.first().map(String::as_str), Some("0 s"));
        assert_eq!(long.last().map(String::as_str), Some("200 s"));
        assert_eq!(long.len(), 11);
        let short: Vec<String> = ticks(4_000.0, 500.0).into_iter().map(|t| t.1).collect();
        assert_eq!(short[1], "500 ms");
        assert_eq!(short.last().map(String::as_str), Some("4000 ms"));
    }
}
