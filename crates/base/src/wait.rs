//! Retry timing for the watching sources (`src-api`, `src-etcd`), upstream
//! apimachinery's `wait.Backoff` and `wait.Jitter`: a wait that doubles from an initial
//! value up to a cap after each failure, each sleep stretched by a random fraction so
//! that many kubelets do not retry in step. Pure but for [`jitter_fraction`]; the
//! sources keep their own constants and decide when to reset.

use std::time::Duration;

/// One source's backoff parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Backoff {
    /// The first wait, and the floor.
    pub initial: Duration,
    /// The longest wait (upstream's `Cap`).
    pub cap: Duration,
    /// Upstream's `Jitter`: each sleep is stretched by up to this fraction of itself.
    pub jitter: f64,
}

impl Backoff {
    /// The wait after one more failure: `current` doubled (upstream's `Factor` 2), within
    /// [`initial`, `cap`].
    ///
    /// [`initial`]: Backoff::initial
    /// [`cap`]: Backoff::cap
    pub fn next(&self, current: Duration) -> Duration {
        current.saturating_mul(2).clamp(self.initial, self.cap)
    }

    /// What is actually slept for a wait of `d`: `d` stretched by `jitter × fraction`
    /// (`wait.Jitter`), `fraction` in [0, 1) from [`jitter_fraction`] (clamped here).
    pub fn jittered(&self, d: Duration, fraction: f64) -> Duration {
        let stretch = self.jitter.max(0.0) * fraction.clamp(0.0, 1.0);
        d.checked_add(d.mul_f64(stretch)).unwrap_or(d)
    }
}

/// A small pseudo-random number for jitter (xorshift over the clock and a counter):
/// spreading retries needs no cryptographic randomness, and no crate.
pub fn jitter_fraction() -> f64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0x9e37_79b9_7f4a_7c15);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut x = nanos ^ COUNTER.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    (x >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: Backoff = Backoff {
        initial: Duration::from_millis(800),
        cap: Duration::from_secs(30),
        jitter: 0.5,
    };

    #[test]
    fn waits_double_from_the_initial_to_the_cap() {
        let mut d = B.initial;
        let mut seen = vec![d.as_millis()];
        for _ in 0..7 {
            d = B.next(d);
            seen.push(d.as_millis());
        }
        assert_eq!(seen, [800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]);
        // Below the floor (a zero left over) starts again at the initial wait.
        assert_eq!(B.next(Duration::ZERO), B.initial);
        assert_eq!(B.next(Duration::MAX), B.cap);
    }

    #[test]
    fn jitter_stretches_by_at_most_the_factor() {
        let d = Duration::from_secs(2);
        assert_eq!(B.jittered(d, 0.0), d);
        assert_eq!(B.jittered(d, 0.5), Duration::from_millis(2500));
        assert_eq!(B.jittered(d, 7.0), Duration::from_secs(3));
        assert_eq!(B.jittered(d, -1.0), d);
    }

    #[test]
    fn jitter_is_a_fraction() {
        for _ in 0..100 {
            let j = jitter_fraction();
            assert!((0.0..1.0).contains(&j), "{j}");
        }
    }
}
