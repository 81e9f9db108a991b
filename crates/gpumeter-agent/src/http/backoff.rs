//! Exponential back-off with full jitter between an initial and a largest wait.

use std::time::Duration;

/// Retry waits: after the `n`th failure in a row (from 1), a uniformly random wait between
/// `initial` and `min(max, initial × 2^(n-1))` (full jitter, with `initial` as the floor so a
/// dead receiver is never hammered). [`reset`](Self::reset) after a success.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    failures: u32,
    rng: fastrand::Rng,
}

impl Backoff {
    /// A back-off between `initial` and `max` (`initial <= max`, else `initial` alone).
    pub fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff {
            initial,
            max: max.max(initial),
            failures: 0,
            rng: fastrand::Rng::new(),
        }
    }

    /// Counts a failure and gives the wait before the next try.
    pub fn next_delay(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let doublings = (self.failures - 1).min(32);
        let ceiling = self
            .initial
            .checked_mul(1u32 << doublings.min(31))
            .map_or(self.max, |c| c.min(self.max));
        let lo = self.initial.as_nanos() as u64;
        let hi = (ceiling.as_nanos() as u64).max(lo);
        Duration::from_nanos(self.rng.u64(lo..=hi))
    }

    /// The failures in a row so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Forgets the failures (after a success).
    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_stay_between_initial_and_the_doubled_ceiling() {
        let initial = Duration::from_millis(10);
        let max = Duration::from_millis(70);
        let mut b = Backoff::new(initial, max);
        let ceilings = [10, 20, 40, 70, 70, 70];
        for (n, ceiling) in ceilings.iter().enumerate() {
            let d = b.next_delay();
            assert!(d >= initial, "failure {n}: {d:?}");
            assert!(d <= Duration::from_millis(*ceiling), "failure {n}: {d:?}");
        }
        assert_eq!(b.failures(), 6);
        b.reset();
        assert_eq!(b.failures(), 0);
        assert!(b.next_delay() <= initial);
    }

    #[test]
    fn many_failures_never_overflow() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(300));
        for _ in 0..100 {
            assert!(b.next_delay() <= Duration::from_secs(300));
        }
    }
}
