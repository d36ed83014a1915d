//! Readings of a monotonic clock: `u64` nanoseconds on an arbitrary origin that may wrap.
//! Compare them only with [`deadline_passed`] and [`nanos_until`] (subtraction), never with
//! `<` on raw values.

/// Whether `deadline_nanos` has passed at `now_nanos` (wrapping-safe).
pub fn deadline_passed(now_nanos: u64, deadline_nanos: u64) -> bool {
    // Reinterpret the wrapped difference as signed: correct while the two readings are
    // within 292 years of each other.
    now_nanos.wrapping_sub(deadline_nanos) as i64 >= 0
}

/// Nanoseconds left until `deadline_nanos` at `now_nanos`; zero once it has passed.
pub fn nanos_until(now_nanos: u64, deadline_nanos: u64) -> u64 {
    let left = deadline_nanos.wrapping_sub(now_nanos) as i64;
    u64::try_from(left).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comparisons_survive_wrapping() {
        let before_wrap = u64::MAX - 5;
        let after_wrap = 4;
        assert!(deadline_passed(after_wrap, before_wrap));
        assert!(!deadline_passed(before_wrap, after_wrap));
        assert_eq!(nanos_until(before_wrap, after_wrap), 10);
        assert_eq!(nanos_until(after_wrap, before_wrap), 0);
    }
}
