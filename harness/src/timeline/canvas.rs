//! The drawing surface the timeline's parts share: the picture's geometry and time scale, its
//! lanes, the SVG text so far, the label boxes already placed (a label is drawn only where it
//! fits and covers no other) and the count of each kind of mark drawn (for the legend).

use std::fmt::Write as _;

use crate::svg::escape;

use chrono::{DateTime, Utc};

use super::mark::{Counts, Mark};
use super::zombie::Zombie;

/// Width of the whole picture.
pub const WIDTH_PX: f64 = 1400.0;
/// Height of one lane.
pub const LANE_PX: f64 = 34.0;
/// Left margin, for the lane names.
pub const LEFT_PX: f64 = 150.0;
/// Right margin.
pub const RIGHT_PX: f64 = 20.0;
/// The top of the first lane: below the title and the axis's tick labels.
pub const LANES_TOP_PX: f64 = 60.0;
/// The font size of labels (the SVG's default).
pub const FONT_PX: f64 = 10.0;
/// The estimated advance of one character of the monospace font at [`FONT_PX`]: a little over
/// the usual 0.6 em, so an estimate errs wide and a label judged to fit does.
pub const CHAR_PX: f64 = 6.5;

/// The estimated width of `text` at [`FONT_PX`].
pub fn text_px(text: &str) -> f64 {
    text.chars().count() as f64 * CHAR_PX
}

/// The picture's window in time, mapped onto the plot's width.
#[derive(Debug, Clone, Copy)]
pub struct Scale {
    /// The window's start: the axis's zero.
    pub from: DateTime<Utc>,
    /// The window's end.
    pub to: DateTime<Utc>,
}

impl Scale {
    /// The plot's left edge (time zero).
    pub const LEFT_PX: f64 = LEFT_PX;
    /// The plot's right edge (the window's end).
    pub const RIGHT_PX: f64 = WIDTH_PX - RIGHT_PX;

    /// The window's length in milliseconds (at least a microsecond).
    pub fn span_ms(&self) -> f64 {
        (self.to - self.from).num_microseconds().unwrap_or(1).max(1) as f64 / 1_000.0
    }

    /// The milliseconds from the window's start to `at`.
    pub fn offset_ms(&self, at: DateTime<Utc>) -> f64 {
        (at - self.from).num_microseconds().unwrap_or(0) as f64 / 1_000.0
    }

    /// The x of `ms` milliseconds after the window's start, clamped to the plot.
    pub fn x_of_ms(&self, ms: f64) -> f64 {
        Self::LEFT_PX + (ms / self.span_ms()).clamp(0.0, 1.0) * (Self::RIGHT_PX - Self::LEFT_PX)
    }

    /// The x of the instant `at`, clamped to the plot.
    pub fn x(&self, at: DateTime<Utc>) -> f64 {
        self.x_of_ms(self.offset_ms(at))
    }

    /// `at` for a tooltip: on the axis (`+12.345 s`) and on the wall clock.
    pub fn when(&self, at: DateTime<Utc>) -> String {
        format!(
            "+{:.3} s ({})",
            self.offset_ms(at) / 1_000.0,
            at.format("%H:%M:%S%.3f")
        )
    }
}

/// How long from `start` to `end`, for a tooltip.
pub fn lasting(start: DateTime<Utc>, end: DateTime<Utc>) -> String {
    let ms = (end - start).num_milliseconds();
    format!("{}.{:03} s", ms / 1_000, (ms % 1_000).abs())
}

/// The box a label's text takes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LabelBox {
    /// Left.
    pub x1: f64,
    /// Right.
    pub x2: f64,
    /// Top.
    pub y1: f64,
    /// Bottom.
    pub y2: f64,
}

impl LabelBox {
    /// The box of `text` starting at `x` on `baseline`, at [`FONT_PX`].
    pub fn of_text(x: f64, baseline: f64, text: &str) -> Self {
        Self {
            x1: x,
            x2: x + text_px(text),
            y1: baseline - 0.8 * FONT_PX,
            y2: baseline + 0.2 * FONT_PX,
        }
    }

    /// Whether the two boxes share any area.
    pub fn overlaps(&self, other: &Self) -> bool {
        self.x1 < other.x2 && other.x1 < self.x2 && self.y1 < other.y2 && other.y1 < self.y2
    }
}

/// The picture being drawn: its time scale, lanes and SVG text so far.
pub struct Canvas<'a> {
    /// The window.
    pub scale: Scale,
    /// Lane names, top to bottom.
    pub lanes: Vec<String>,
    /// With a key, only that key's grants, losses and writes are drawn.
    pub key: Option<&'a str>,
    /// The run's zombie episodes: their fenced writes get a numbered badge.
    pub zombies: &'a [Zombie<'a>],
    /// The SVG so far.
    pub svg: String,
    /// The marks drawn, by kind.
    pub counts: Counts,
    /// The labels placed so far.
    placed: Vec<LabelBox>,
}

impl<'a> Canvas<'a> {
    /// An empty picture of `lanes` over `scale`.
    pub fn new(
        scale: Scale,
        lanes: Vec<String>,
        key: Option<&'a str>,
        zombies: &'a [Zombie<'a>],
    ) -> Self {
        Self {
            scale,
            lanes,
            key,
            zombies,
            svg: String::new(),
            counts: Counts::default(),
            placed: Vec::new(),
        }
    }

    /// The lane named `name`, if the picture has one.
    pub fn lane_of(&self, name: &str) -> Option<usize> {
        self.lanes.iter().position(|l| l == name)
    }

    /// The top of lane number `lane`.
    pub fn lane_top(lane: usize) -> f64 {
        LANES_TOP_PX + LANE_PX * lane as f64
    }

    /// The bottom of the last lane.
    pub fn lanes_bottom(&self) -> f64 {
        Self::lane_top(self.lanes.len())
    }

    /// Whether `key` is one this picture leaves out.
    pub fn other_key(&self, key: &str) -> bool {
        self.key.is_some_and(|k| k != key)
    }

    /// Whether the instant `at` falls outside the window.
    pub fn outside(&self, at: DateTime<Utc>) -> bool {
        at < self.scale.from || at > self.scale.to
    }

    /// Whether the interval from `start` to `end` misses the window.
    pub fn misses(&self, start: DateTime<Utc>, end: DateTime<Utc>) -> bool {
        end < self.scale.from || start > self.scale.to
    }

    /// Whether the zombie badges link to the episodes' own pictures: in the whole run's.
    pub fn links(&self) -> bool {
        self.key.is_none()
    }

    /// Places the label `text` at `x` on `baseline` if it lies `within` those x bounds (and the
    /// plot) and covers no label or mark placed before; draws it (class `label`) and answers
    /// whether it did.
    pub fn label(
        &mut self,
        x: f64,
        baseline: f64,
        within: (f64, f64),
        text: &str,
        fill: &str,
    ) -> bool {
        let candidate = LabelBox::of_text(x, baseline, text);
        let fits = candidate.x1 >= within.0.max(Scale::LEFT_PX)
            && candidate.x2 <= within.1.min(Scale::RIGHT_PX);
        if !fits || !self.reserve(candidate) {
            return false;
        }
        let _ = write!(
            self.svg,
            r#"<text class="label" x="{x:.1}" y="{baseline:.1}" fill="{fill}">{}</text>"#,
            escape(text)
        );
        true
    }

    /// Takes `area` for a label or badge if no label placed before covers it.
    pub fn reserve(&mut self, area: LabelBox) -> bool {
        if self.placed.iter().any(|p| p.overlaps(&area)) {
            return false;
        }
        self.placed.push(area);
        true
    }

    /// Keeps `area` free of labels placed after (a mark that must stay visible).
    pub fn block(&mut self, area: LabelBox) {
        self.placed.push(area);
    }

    /// Counts one mark of `kind`.
    pub fn count(&mut self, kind: Mark) {
        self.counts.add(kind);
    }
}
