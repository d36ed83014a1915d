//! What a timeline shows on its lanes: the lanes themselves, the faults as shaded spans, the
//! grants as bars, the client-declared losses as red dashes and the fenced writes as ✗, the
//! zombies' with a numbered badge (a link to the episode's picture in the whole run's). Every
//! mark is a group of class `mark` whose `<title>` says all there is to know of it (a hover
//! tooltip); a label is drawn only where it fits.

use std::fmt::Write as _;

use super::canvas::{Canvas, FONT_PX, LANE_PX, LEFT_PX, LabelBox, Scale, lasting, text_px};
use super::mark::Mark;
use crate::audit::DeclaredLoss;
use crate::history::{Fault, History, WriteOp};
use crate::svg::escape;

/// Where in a lane a grant's bar begins.
const BAR_TOP_PX: f64 = 7.0;
/// A grant bar's height.
const BAR_PX: f64 = 15.0;
/// Where in a lane the row of fenced-write labels and badges sits (its baseline).
const LOW_ROW_PX: f64 = 32.0;
/// The height of a zombie's badge.
const BADGE_PX: f64 = 11.0;
/// Half the width of a fenced write's ✗ (at 14 px, bold).
const CROSS_HALF_PX: f64 = 5.0;

/// Opens a mark's group: its class, its kind and its tooltip.
fn open(svg: &mut String, kind: Mark, title: &str) {
    let _ = write!(
        svg,
        r#"<g class="mark" data-kind="{}"><title>{}</title>"#,
        kind.id(),
        escape(title)
    );
}

/// The lane names, a light band on every other lane and the separating lines.
pub fn draw_lanes(canvas: &mut Canvas<'_>) {
    let right = Scale::RIGHT_PX;
    for (i, lane) in canvas.lanes.iter().enumerate() {
        let y = Canvas::lane_top(i);
        if i % 2 == 1 {
            let _ = writeln!(
                canvas.svg,
                r##"<rect x="0" y="{y:.1}" width="{right:.1}" height="{LANE_PX:.1}" fill="#f7f7f7"/>"##,
            );
        }
        let _ = writeln!(
            canvas.svg,
            r##"<text x="10" y="{:.1}">{}</text><line x1="{LEFT_PX}" y1="{:.1}" x2="{right:.1}" y2="{:.1}" stroke="#ddd"/>"##,
            y + LANE_PX / 2.0 + 3.0,
            escape(lane),
            y + LANE_PX,
            y + LANE_PX
        );
    }
}

/// The lane and kind of mark a fault is drawn as, if this picture has its lane.
fn fault_place(canvas: &Canvas<'_>, fault: &Fault) -> Option<(usize, Mark)> {
    let (lane, kind) = match fault.kind {
        "pause" => (fault.target.as_str(), Mark::Pause),
        "partition" => (fault.target.as_str(), Mark::Partition),
        "replica-kill" | "proxy-kill" => (fault.target.as_str(), Mark::Downtime),
        "store-restart" | "store-stall" => ("store", Mark::Downtime),
        _ => return None,
    };
    Some((canvas.lane_of(lane)?, kind))
}

/// Pauses, partitions, replica and rail-proxy kills and store faults, as shaded spans.
pub fn draw_faults(canvas: &mut Canvas<'_>, history: &History) {
    for fault in &history.faults {
        let Some((lane, kind)) = fault_place(canvas, fault) else {
            continue;
        };
        if canvas.misses(fault.start, fault.end) {
            continue;
        }
        let scale = canvas.scale;
        let (x1, x2) = (scale.x(fault.start), scale.x(fault.end));
        let title = format!(
            "{} of {}: from {} to {}, {}",
            fault.kind,
            fault.target,
            scale.when(fault.start),
            scale.when(fault.end),
            lasting(fault.start, fault.end)
        );
        open(&mut canvas.svg, kind, &title);
        let _ = writeln!(
            canvas.svg,
            r#"<rect x="{x1:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}" opacity="0.6"/></g>"#,
            Canvas::lane_top(lane) + 2.0,
            (x2 - x1).max(1.0),
            LANE_PX - 4.0,
            kind.colour()
        );
        canvas.count(kind);
    }
}

/// Grant intervals, labelled `payout:ID tN` where the label fits inside the bar, and an
/// orange line at each server-side expiry.
pub fn draw_grants(canvas: &mut Canvas<'_>, history: &History) {
    for span in history.spans.values().flatten() {
        if canvas.other_key(&span.key) || canvas.misses(span.granted_at, span.ended_at) {
            continue;
        }
        let Some(lane) = canvas.lane_of(&span.owner) else {
            continue;
        };
        let scale = canvas.scale;
        let (x1, x2) = (scale.x(span.granted_at), scale.x(span.ended_at));
        let y = Canvas::lane_top(lane) + BAR_TOP_PX;
        let kind = if span.expired {
            Mark::GrantExpired
        } else {
            Mark::GrantReleased
        };
        let title = format!(
            "{} token {} held by {} (session {}): granted {}, {} {}, after {}",
            span.key,
            span.token,
            span.owner,
            span.session,
            scale.when(span.granted_at),
            if span.expired {
                "expired at the server"
            } else {
                "released"
            },
            scale.when(span.ended_at),
            lasting(span.granted_at, span.ended_at)
        );
        open(&mut canvas.svg, kind, &title);
        let width = (x2 - x1).max(1.0);
        let edge = if width >= 4.0 { kind.edge() } else { "none" };
        let _ = write!(
            canvas.svg,
            r#"<rect x="{x1:.1}" y="{y:.1}" width="{width:.1}" height="{BAR_PX}" fill="{}" stroke="{edge}" stroke-width="0.7"/>"#,
            kind.colour()
        );
        if span.expired {
            let _ = write!(
                canvas.svg,
                r#"<line x1="{x2:.1}" y1="{:.1}" x2="{x2:.1}" y2="{:.1}" stroke="orange" stroke-width="2"/>"#,
                y - 4.0,
                y + BAR_PX + 4.0,
            );
        }
        let label = format!("{} t{}", span.key, span.token);
        // At the bar's start, else at its end (past a mark at its start).
        let baseline = y + BAR_PX - 4.0;
        let within = (x1 + 2.0, x2 - 2.0);
        if !canvas.label(within.0, baseline, within, &label, "#000") {
            canvas.label(within.1 - text_px(&label), baseline, within, &label, "#000");
        }
        let _ = writeln!(canvas.svg, "</g>");
        canvas.count(kind);
    }
}

/// A client-declared loss this picture shows: its executor, what was lost, when and its lane.
struct ShownLoss<'h> {
    executor: &'h str,
    what: String,
    loss: &'h DeclaredLoss,
    lane: usize,
}

/// The client-declared losses this picture shows; a session's loss that held nothing only in
/// the whole run's picture.
fn losses<'h>(canvas: &Canvas<'_>, history: &'h History) -> Vec<ShownLoss<'h>> {
    let mut shown = Vec::new();
    for (executor, loss) in &history.losses {
        let what = match &loss.grant {
            Some((key, token)) if !canvas.other_key(key) => format!("{key} token {token}"),
            Some(_) => continue,
            None if canvas.key.is_none() => format!("session {} (holding nothing)", loss.session),
            None => continue,
        };
        if canvas.outside(loss.deadline) {
            continue;
        }
        if let Some(lane) = canvas.lane_of(executor) {
            shown.push(ShownLoss {
                executor,
                what,
                loss,
                lane,
            });
        }
    }
    shown
}

/// The client-declared losses, as red dashes on the executors' lanes at the SDK's
/// conservative deadline.
pub fn draw_losses(canvas: &mut Canvas<'_>, history: &History) {
    for shown in losses(canvas, history) {
        let (loss, top) = (shown.loss, Canvas::lane_top(shown.lane));
        let x = canvas.scale.x(loss.deadline);
        let title = format!(
            "client-declared loss of {} by {} ({}): deadline {}",
            shown.what,
            shown.executor,
            loss.reason,
            canvas.scale.when(loss.deadline)
        );
        open(&mut canvas.svg, Mark::Loss, &title);
        let _ = writeln!(
            canvas.svg,
            r#"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="{}" stroke-width="2" stroke-dasharray="3,2"/></g>"#,
            top + 2.0,
            top + LANE_PX - 2.0,
            Mark::Loss.colour()
        );
        canvas.count(Mark::Loss);
    }
}

/// A zombie's badge `Zn` at `x` on the low row of the lane at `top`: always drawn (the number
/// matches its picture's file); answers where the row continues.
fn badge(canvas: &mut Canvas<'_>, number: usize, x: f64, top: f64) -> f64 {
    let text = format!("Z{number}");
    let width = text_px(&text) + 4.0;
    let y = top + LOW_ROW_PX - BADGE_PX + 2.0;
    canvas.reserve(LabelBox {
        x1: x,
        x2: x + width,
        y1: y,
        y2: y + BADGE_PX,
    });
    let _ = write!(
        canvas.svg,
        r##"<rect x="{x:.1}" y="{y:.1}" width="{width:.1}" height="{BADGE_PX}" rx="3" fill="{}"/><text class="badge" x="{:.1}" y="{:.1}" fill="#fff" font-weight="bold">{text}</text>"##,
        Mark::Zombie.colour(),
        x + 2.0,
        top + LOW_ROW_PX,
    );
    x + width + 3.0
}

/// The fenced writes this picture shows, each with its lane.
fn fenced_writes<'h>(canvas: &Canvas<'_>, history: &'h History) -> Vec<(&'h WriteOp, usize)> {
    history
        .writes
        .iter()
        .filter(|w| w.result == "fenced")
        .filter(|w| !canvas.other_key(&format!("payout:{}", w.payout_id)) && !canvas.outside(w.at))
        .filter_map(|w| Some((w, canvas.lane_of(&w.executor)?)))
        .collect()
}

/// The area of a fenced write's ✗ at `x` on the lane at `top`.
fn cross_box(x: f64, top: f64) -> LabelBox {
    LabelBox {
        x1: x - CROSS_HALF_PX,
        x2: x + CROSS_HALF_PX,
        y1: top + LANE_PX / 2.0 - 6.0,
        y2: top + LANE_PX / 2.0 + 6.0,
    }
}

/// Keeps every fenced write's ✗ and every loss's dash clear of the labels (drawn before
/// them): a label never hides a mark.
pub fn keep_marks_clear(canvas: &mut Canvas<'_>, history: &History) {
    for (w, lane) in fenced_writes(canvas, history) {
        let area = cross_box(canvas.scale.x(w.at), Canvas::lane_top(lane));
        canvas.block(area);
    }
    for shown in losses(canvas, history) {
        let (x, top) = (
            canvas.scale.x(shown.loss.deadline),
            Canvas::lane_top(shown.lane),
        );
        canvas.block(LabelBox {
            x1: x - 1.0,
            x2: x + 1.0,
            y1: top,
            y2: top + LANE_PX,
        });
    }
}

/// Every fenced write, marked ✗ on its executor's lane, `fenced tN` beside it where that
/// fits; a zombie's also with its badge, linked to its picture in the whole run's.
pub fn draw_fenced_writes(canvas: &mut Canvas<'_>, history: &History) {
    for (w, lane) in fenced_writes(canvas, history) {
        let scale = canvas.scale;
        let zombie = canvas.zombies.iter().find(|z| z.write == w).cloned();
        let mut title = format!(
            "fenced {} of payout {} by {} with token {}: sent {}, refused {}",
            w.step,
            w.payout_id,
            w.executor,
            w.token,
            scale.when(w.invoked_at),
            scale.when(w.at)
        );
        if let Some(z) = &zombie {
            let _ = write!(
                title,
                "; zombie {} (its grant from {}), picture {}",
                z.number,
                scale.when(z.granted_at),
                z.file_name()
            );
        }
        let link = zombie.as_ref().filter(|_| canvas.links()).map(|z| {
            let file = escape(&z.file_name());
            format!(r#"<a href="{file}" xlink:href="{file}">"#)
        });
        if let Some(open_link) = &link {
            canvas.svg.push_str(open_link);
        }
        open(&mut canvas.svg, Mark::Fenced, &title);
        let (x, top) = (scale.x(w.at), Canvas::lane_top(lane));
        let _ = write!(
            canvas.svg,
            r##"<text class="cross" x="{:.1}" y="{:.1}" fill="{}" stroke="#fff" stroke-width="3" paint-order="stroke" font-size="14" font-weight="bold">✗</text>"##,
            x - CROSS_HALF_PX,
            top + LANE_PX / 2.0 + 5.0,
            Mark::Fenced.colour()
        );
        let mut next = x + CROSS_HALF_PX + 1.0;
        if let Some(z) = &zombie {
            next = badge(canvas, z.number, next, top);
            canvas.count(Mark::Zombie);
        }
        let label = format!("fenced t{}", w.token);
        let baseline = top + LOW_ROW_PX;
        // Right of the mark, else (at the window's right edge, say) left of it.
        if !canvas.label(next, baseline, (next, f64::INFINITY), &label, "#900") {
            let end = x - CROSS_HALF_PX - 1.0;
            let start = end - text_px(&label);
            canvas.label(start, baseline, (f64::NEG_INFINITY, end), &label, "#900");
        }
        canvas.svg.push_str("</g>");
        if link.is_some() {
            canvas.svg.push_str("</a>");
        }
        canvas.svg.push('\n');
        canvas.count(Mark::Fenced);
    }
}

/// Keeps `FONT_PX` and the low row consistent: a label on the low row stays inside its lane.
const _: () = assert!(LOW_ROW_PX + 0.2 * FONT_PX <= LANE_PX);
