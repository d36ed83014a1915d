//! What every SVG picture of the harness draws with (the campaign's timelines, the
//! benchmarks' plots): text escaped for SVG, and the "nice" axis step.

/// `text` safe inside an SVG element or attribute.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The smallest step of 1, 2 or 5 × 10^k that is at least `least` (positive): axis ticks
/// at round values.
pub fn nice_step(least: f64) -> f64 {
    let least = least.max(f64::MIN_POSITIVE);
    let mut decade = 10f64.powf(least.log10().floor());
    loop {
        for factor in [1.0, 2.0, 5.0] {
            // A hair of slack: 1000 / 5 must not miss 200 for a rounding error.
            if factor * decade >= least * (1.0 - 1e-9) {
                return factor * decade;
            }
        }
        decade *= 10.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_the_smallest_round_value_at_least_asked() {
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(nice_step(1.0), 1.0);
        assert_eq!(nice_step(1.2), 2.0);
        assert_eq!(nice_step(200.0), 200.0);
        assert_eq!(nice_step(849.3), 1000.0);
        assert_eq!(nice_step(3.1), 5.0);
        assert_eq!(escape("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
    }
}
