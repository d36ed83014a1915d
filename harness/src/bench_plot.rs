//! The pictures of `harness bench locks --plots DIR`: granted locks per second against the
//! client count, one line per side (one picture for distinct keys, one for the hot key), and
//! the distribution of one client's acquire-plus-release time per side. Self-contained SVG,
//! drawn from the same figures the table prints.

use std::fmt::Write as _;
use std::path::Path;

use crate::svg::escape;

/// Width and height of a picture, pixels.
const WIDTH_PX: f64 = 900.0;
const HEIGHT_PX: f64 = 420.0;
/// Margins around the plotting area: left (tick labels), right (legend), top, bottom.
const LEFT_PX: f64 = 70.0;
const RIGHT_PX: f64 = 330.0;
const TOP_PX: f64 = 40.0;
const BOTTOM_PX: f64 = 50.0;
/// The rate axis reaches at least this much above the highest rate, so no dot sits on the frame.
const HEADROOM: f64 = 1.1;
/// Ticks wanted on a linear axis, about.
const LINEAR_TICKS: f64 = 6.0;
/// One colour per side, in the order sides first appear.
const COLOURS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf", "#7f7f7f",
];

/// One side's figures at one client count and workload.
#[derive(Debug, Clone)]
pub(crate) struct PlotPoint {
    pub(crate) clients: usize,
    pub(crate) hot: bool,
    pub(crate) side: String,
    pub(crate) granted_per_s: f64,
    /// Cycle percentiles 0..=100, milliseconds (empty: not measured).
    pub(crate) cycle_ms: Vec<f64>,
}

/// Writes `granted-distinct.svg`, `granted-hot.svg` and `latency-1-client.svg` into `dir`.
pub(crate) fn write_all(dir: &Path, title: &str, points: &[PlotPoint]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (hot, name) in [(false, "distinct"), (true, "hot")] {
        let of: Vec<&PlotPoint> = points.iter().filter(|p| p.hot == hot).collect();
        let heading = format!("{title}: granted locks per second, {name} keys");
        std::fs::write(
            dir.join(format!("granted-{name}.svg")),
            rate_svg(&heading, &of),
        )?;
    }
    let lone: Vec<&PlotPoint> = (points.iter())
        .filter(|p| p.clients == 1 && !p.hot && !p.cycle_ms.is_empty())
        .collect();
    // Without a one-client run there is no distribution to draw.
    if !lone.is_empty() {
        let heading = format!("{title}: one client's acquire + release, distribution");
        std::fs::write(
            dir.join("latency-1-client.svg"),
            latency_svg(&heading, &lone),
        )?;
    }
    Ok(())
}

/// The sides of `points` in the order they first appear.
fn sides<'a>(points: &[&'a PlotPoint]) -> Vec<&'a str> {
    let mut sides: Vec<&str> = Vec::new();
    for point in points {
        if !sides.contains(&point.side.as_str()) {
            sides.push(&point.side);
        }
    }
    sides
}

/// Round steps (1, 2 or 5 × 10^k) giving about `LINEAR_TICKS` ticks from 0 to `max`.
fn linear_ticks(max: f64) -> Vec<f64> {
    let step = crate::svg::nice_step(max / LINEAR_TICKS);
    let count = (max / step).ceil() as usize;
    (0..=count).map(|i| i as f64 * step).collect()
}

/// Ticks 1, 2, 5 × 10^k covering `min..=max` (both positive and finite), for a log axis.
fn log_ticks(min: f64, max: f64) -> Vec<f64> {
    assert!(min > 0.0 && max.is_finite(), "a log axis over {min}..{max}");
    let mut ticks = Vec::new();
    let mut power = 10f64.powf(min.log10().floor());
    while power <= max * 10.0 {
        for m in [1.0, 2.0, 5.0] {
            let tick = m * power;
            if tick >= min / 2.0 && tick <= max * 2.0 {
                ticks.push(tick);
            }
        }
        power *= 10.0;
    }
    ticks
}

/// A tick label: no decimals from 10 up, one below, two below 1.
fn tick_label(value: f64) -> String {
    match value {
        v if v >= 10.0 || v == 0.0 => format!("{v:.0}"),
        v if v >= 1.0 => format!("{v:.1}"),
        v => format!("{v:.2}"),
    }
}

/// The plotting area's corners: x from `left()` to `right()`, y from `bottom()` up to `top()`.
fn left() -> f64 {
    LEFT_PX
}
fn right() -> f64 {
    WIDTH_PX - RIGHT_PX
}
fn top() -> f64 {
    TOP_PX
}
fn bottom() -> f64 {
    HEIGHT_PX - BOTTOM_PX
}

/// The picture's frame, title and axis names.
fn frame(svg: &mut String, title: &str, x_name: &str, y_name: &str) {
    let _ = writeln!(
        svg,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH_PX}" height="{HEIGHT_PX}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{LEFT_PX}" y="22" font-size="14" font-weight="bold">{}</text>
<text x="{}" y="{}" text-anchor="middle">{x_name}</text>
<text x="16" y="{}" text-anchor="middle" transform="rotate(-90 16 {})">{y_name}</text>
<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#444"/>"##,
        escape(title),
        (left() + right()) / 2.0,
        HEIGHT_PX - 12.0,
        (top() + bottom()) / 2.0,
        (top() + bottom()) / 2.0,
        left(),
        top(),
        right() - left(),
        bottom() - top(),
    );
}

/// A grid line and its label at `y` (a horizontal tick) or `x` (a vertical one).
fn y_tick(svg: &mut String, y: f64, label: &str) {
    let _ = writeln!(
        svg,
        r##"<line x1="{}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#e4e4e4"/><text x="{}" y="{:.1}" text-anchor="end">{label}</text>"##,
        left(),
        right(),
        left() - 6.0,
        y + 4.0
    );
}
fn x_tick(svg: &mut String, x: f64, label: &str) {
    let _ = writeln!(
        svg,
        r##"<line x1="{x:.1}" y1="{}" x2="{x:.1}" y2="{}" stroke="#e4e4e4"/><text x="{x:.1}" y="{}" text-anchor="middle">{label}</text>"##,
        top(),
        bottom(),
        bottom() + 16.0
    );
}

/// One legend entry, the `index`th, in the side's colour.
fn legend(svg: &mut String, index: usize, side: &str) {
    let y = top() + 10.0 + 20.0 * index as f64;
    let x = right() + 12.0;
    let _ = writeln!(
        svg,
        r##"<line x1="{x}" y1="{y}" x2="{}" y2="{y}" stroke="{}" stroke-width="3"/><text x="{}" y="{}">{}</text>"##,
        x + 22.0,
        COLOURS[index % COLOURS.len()],
        x + 28.0,
        y + 4.0,
        escape(side)
    );
}

/// A line through `points` (pixels) in the colour of side `index`, with dots when `dots`.
fn polyline(svg: &mut String, index: usize, points: &[(f64, f64)], dots: bool) {
    let colour = COLOURS[index % COLOURS.len()];
    let path: Vec<String> = points
        .iter()
        .map(|(x, y)| format!("{x:.1},{y:.1}"))
        .collect();
    let _ = writeln!(
        svg,
        r##"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"/>"##,
        path.join(" ")
    );
    for (x, y) in points.iter().filter(|_| dots) {
        let _ = writeln!(
            svg,
            r##"<circle cx="{x:.1}" cy="{y:.1}" r="3.5" fill="{colour}"/>"##
        );
    }
}

/// Granted/s (linear) against the client counts (evenly spaced, in run order), a line a side.
fn rate_svg(title: &str, points: &[&PlotPoint]) -> String {
    let mut counts: Vec<usize> = points.iter().map(|p| p.clients).collect();
    counts.sort_unstable();
    counts.dedup();
    let max = points.iter().map(|p| p.granted_per_s).fold(1.0, f64::max);
    let ticks = linear_ticks(max * HEADROOM);
    let y_max = *ticks.last().unwrap_or(&max);
    let y_of = |v: f64| bottom() - v / y_max * (bottom() - top());
    let slot = (right() - left()) / counts.len().max(1) as f64;
    let x_of = |clients: usize| {
        let i = counts.iter().position(|c| *c == clients).unwrap_or(0);
        left() + slot * (i as f64 + 0.5)
    };
    let mut svg = String::new();
    frame(&mut svg, title, "clients", "granted locks / s");
    for tick in &ticks {
        y_tick(&mut svg, y_of(*tick), &tick_label(*tick));
    }
    for clients in &counts {
        x_tick(&mut svg, x_of(*clients), &clients.to_string());
    }
    for (index, side) in sides(points).iter().enumerate() {
        let line: Vec<(f64, f64)> = (points.iter())
            .filter(|p| p.side == *side)
            .map(|p| (x_of(p.clients), y_of(p.granted_per_s)))
            .collect();
        polyline(&mut svg, index, &line, true);
        legend(&mut svg, index, side);
    }
    svg.push_str("</svg>\n");
    svg
}

/// Each side's cycle time (log scale) at each percentile 0..=99 (the slowest 1 % would
/// stretch the axis; the table gives the p99).
fn latency_svg(title: &str, points: &[&PlotPoint]) -> String {
    const SHOWN_PERCENTILES: usize = 100;
    let shown = |p: &PlotPoint| p.cycle_ms[..SHOWN_PERCENTILES.min(p.cycle_ms.len())].to_vec();
    let all: Vec<f64> = points.iter().flat_map(|p| shown(p)).collect();
    let min = all.iter().copied().fold(f64::INFINITY, f64::min).max(0.01);
    let max = all.iter().copied().fold(min * 10.0, f64::max);
    let ticks = log_ticks(min, max);
    let (lo, hi) = (
        ticks.first().copied().unwrap_or(min).log10(),
        ticks.last().copied().unwrap_or(max).log10(),
    );
    let x_of = |ms: f64| left() + (ms.max(min).log10() - lo) / (hi - lo) * (right() - left());
    let y_of = |pct: f64| bottom() - pct / 100.0 * (bottom() - top());
    let mut svg = String::new();
    frame(
        &mut svg,
        title,
        "milliseconds (log scale)",
        "cycles at or under (%)",
    );
    for pct in [0.0, 25.0, 50.0, 75.0, 90.0, 99.0] {
        y_tick(&mut svg, y_of(pct), &format!("{pct:.0}"));
    }
    for tick in &ticks {
        x_tick(&mut svg, x_of(*tick), &tick_label(*tick));
    }
    for (index, point) in points.iter().enumerate() {
        let line: Vec<(f64, f64)> = (shown(point).iter().enumerate())
            .map(|(pct, ms)| (x_of(*ms), y_of(pct as f64)))
            .collect();
        polyline(&mut svg, index, &line, false);
        let p50 = point.cycle_ms[50];
        legend(
            &mut svg,
            index,
            &format!("{} (p50 {p50:.2} ms)", point.side),
        );
    }
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(clients: usize, side: &str, rate: f64, p50_ms: f64) -> PlotPoint {
        PlotPoint {
            clients,
            hot: false,
            side: side.to_owned(),
            granted_per_s: rate,
            cycle_ms: (0..=100)
                .map(|p| p50_ms * (0.5 + p as f64 / 100.0))
                .collect(),
        }
    }

    #[test]
    fn linear_ticks_cover_the_maximum_in_round_steps() {
        assert_eq!(
            linear_ticks(5_096.0),
            [0.0, 1000.0, 2000.0, 3000.0, 4000.0, 5000.0, 6000.0]
        );
        assert_eq!(linear_ticks(79.0), [0.0, 20.0, 40.0, 60.0, 80.0]);
    }

    #[test]
    fn log_ticks_cover_the_range() {
        assert_eq!(log_ticks(0.4, 3.0), [0.2, 0.5, 1.0, 2.0, 5.0]);
    }

    #[test]
    fn a_rate_picture_draws_a_line_and_a_legend_entry_per_side_at_its_figures() {
        let points = [
            point(1, "SDK", 1000.0, 0.5),
            point(8, "SDK", 3000.0, 1.0),
            point(1, "etcd lock API", 1200.0, 0.4),
            point(8, "etcd lock API", 5000.0, 0.8),
        ];
        let refs: Vec<&PlotPoint> = points.iter().collect();
        let svg = rate_svg("t", &refs);
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert_eq!(svg.matches("<circle").count(), 4);
        assert!(svg.contains(">SDK</text>") && svg.contains(">etcd lock API</text>"));
        // 5,000/s sits on the 5000 tick's height: the axis runs 0..6000.
        let y_5000 = bottom() - 5000.0 / 6000.0 * (bottom() - top());
        assert!(svg.contains(&format!("cy=\"{y_5000:.1}\"")), "{svg}");
        let latency = latency_svg("t", &refs[..1]);
        assert!(latency.contains("SDK (p50 0.50 ms)"), "{latency}");
    }
}
