//! The `prober` thread's deadline heap: which probe is due next. Upstream gives every
//! probe its own goroutine and ticker; rkubelet keeps one min-heap of due times on one
//! thread instead, so the number of threads does not grow with the number of probes.
//!
//! Entries are never removed from the middle: a rescheduled or removed probe leaves a
//! stale entry behind, which the caller recognises (its due time no longer matches the
//! probe's) and drops when it surfaces. That keeps every operation O(log n).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant, SystemTime};

/// A min-heap of (due time, key); equal due times come out in insertion order.
#[derive(Debug)]
pub(crate) struct DeadlineHeap<K: Ord> {
    heap: BinaryHeap<Reverse<(Instant, u64, K)>>,
    seq: u64,
}

impl<K: Ord> Default for DeadlineHeap<K> {
    fn default() -> Self {
        DeadlineHeap {
            heap: BinaryHeap::new(),
            seq: 0,
        }
    }
}

impl<K: Ord> DeadlineHeap<K> {
    /// Schedules `key` at `due`.
    pub(crate) fn push(&mut self, due: Instant, key: K) {
        self.seq += 1;
        self.heap.push(Reverse((due, self.seq, key)));
    }

    /// The earliest due time, if any.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((due, _, _))| *due)
    }

    /// Removes and returns the earliest entry if it is due at `now`.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<(Instant, K)> {
        if self.next_due()? > now {
            return None;
        }
        self.heap.pop().map(|Reverse((due, _, key))| (due, key))
    }

    /// Entries, stale ones included.
    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }

    #[cfg(test)]
    /// True when nothing is scheduled.
    pub(crate) fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

/// When a probe of a container first runs: `initialDelaySeconds` after the container
/// started (upstream measures from `startedAt` too, but only notices on its next tick;
/// scheduling the deadline itself makes the first probe punctual). A probe whose delay
/// has already passed runs at once, or after `spread` when the prober itself has just
/// started (upstream's random sleep that keeps a restarted kubelet from probing every
/// container at the same instant). The wait is never more than the initial delay: a
/// start time in the wall clock's future (the clock stepped back since, or the
/// runtime's clock runs ahead) must not hold the probe for the difference.
pub(crate) fn first_due(
    now: Instant,
    now_wall: SystemTime,
    started_at: Option<SystemTime>,
    initial_delay: Duration,
    spread: Duration,
) -> Instant {
    let wait = started_at
        .map(|s| base::time::saturating_system_add(s, initial_delay))
        .and_then(|at| at.duration_since(now_wall).ok())
        .map_or(Duration::ZERO, |w| w.min(initial_delay));
    base::time::saturating_deadline(now, if wait.is_zero() { spread } else { wait })
}

/// The next due time after a probe due at `due` ran (or was skipped): one period on,
/// skipping whole periods that already passed, so a late prober does not fire a burst
/// of catch-up probes (upstream's ticker drops missed ticks the same way).
pub(crate) fn next_due(due: Instant, period: Duration, now: Instant) -> Instant {
    let next = base::time::saturating_deadline(due, period);
    if next > now || period.is_zero() {
        return next.max(now);
    }
    let behind = now.duration_since(next).as_nanos();
    let missed = behind / period.as_nanos() + 1;
    let missed = u32::try_from(missed).unwrap_or(u32::MAX);
    let skip = period
        .checked_mul(missed)
        .unwrap_or(base::time::MAX_TIMEOUT);
    base::time::saturating_deadline(next, skip)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heap_pops_in_due_order_then_insertion_order() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut h = DeadlineHeap::default();
        h.push(ms(30), "c");
        h.push(ms(10), "a");
        h.push(ms(20), "b1");
        h.push(ms(20), "b2");
        h.push(ms(50), "late");
        assert_eq!(h.next_due(), Some(ms(10)));
        assert_eq!(h.pop_due(ms(5)), None, "nothing due yet");
        let mut order = Vec::new();
        while let Some((due, k)) = h.pop_due(ms(30)) {
            order.push((due, k));
        }
        assert_eq!(
            order,
            vec![(ms(10), "a"), (ms(20), "b1"), (ms(20), "b2"), (ms(30), "c")]
        );
        assert_eq!(h.len(), 1);
        assert_eq!(h.pop_due(ms(100)), Some((ms(50), "late")));
        assert!(h.is_empty());
    }

    #[test]
    fn first_probe_waits_for_the_initial_delay_from_container_start() {
        let now = Instant::now();
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let s = Duration::from_secs;
        let spread = Duration::from_millis(700);
        for (started, delay, want) in [
            // Started 2 s ago, delay 5 s: 3 s from now.
            (Some(990 + 8), s(5), now + s(3)),
            // Delay already passed: now (plus the start-up spread).
            (Some(900), s(5), now + spread),
            // No delay.
            (Some(1000), s(0), now + spread),
            // Start time unknown: now.
            (None, s(5), now + spread),
            // Started "an hour from now" (the wall clock stepped back): the delay, not
            // an hour.
            (Some(1000 + 3600), s(5), now + s(5)),
        ] {
            let started = started.map(|t| SystemTime::UNIX_EPOCH + s(t));
            assert_eq!(
                first_due(now, wall, started, delay, spread),
                want,
                "{started:?} {delay:?}"
            );
        }
    }

    #[test]
    fn next_due_keeps_the_phase_and_skips_missed_periods() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        // On time: one period on.
        assert_eq!(next_due(t0, s(10), t0 + ms(3)), t0 + s(10));
        // 25 s late with a 10 s period: the next tick on the original grid.
        assert_eq!(next_due(t0, s(10), t0 + s(25)), t0 + s(30));
        // Exactly on a grid point: the one after it.
        assert_eq!(next_due(t0, s(1), t0 + s(3)), t0 + s(4));
    }
}
