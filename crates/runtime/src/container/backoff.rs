//! Restart and pull backoff (upstream `flowcontrol.Backoff` as the kubelet uses it):
//! per key, 10 s doubling to 300 s, no jitter. Pure: every call takes the times.
//!
//! Two clocks use it. Image pulls time their backoff from the last failed pull
//! (`Instant`, [`Backoff::next`] / [`Backoff::is_in_backoff_since_update`]). Container
//! restarts time it from the dead container's `finishedAt`, a wall-clock time read from
//! the runtime (`SystemTime`, [`Backoff::next_at`] / [`Backoff::is_in_backoff_since`]),
//! exactly as upstream's `doBackOff` does: `IsInBackOffSince(key, finishedAt)` and
//! `Next(key, finishedAt)`. That is what makes a container that ran for ten minutes
//! before dying start again at 10 s: its `finishedAt` is more than 600 s after the
//! entry's last update (upstream's kubelet `HasExpiredFunc`).
//!
//! A wall clock that steps must neither stall nor storm a crash loop (upstream's
//! does: stepped back an hour, `Since(finishedAt)` is negative for an hour and the
//! container waits that long; a runtime whose clock runs ahead of the kubelet's makes
//! every wait look over). So a restart also records the monotonic moment it was
//! decided ([`Backoff::next_at_mono`]), and [`Backoff::is_in_backoff_since_mono`]
//! measures the time since the finish as the wall clock says, but never more than the
//! monotonic time since that restart (the container finished after it), and by the
//! monotonic time alone when the finish lies in the wall clock's future.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

/// Upstream `containerBackOffPeriod` / image backoff initial period.
pub const INITIAL: Duration = Duration::from_secs(10);
/// Upstream `MaxContainerBackOff` / `MaxImageBackOff`.
pub(crate) const MAX: Duration = Duration::from_secs(300);
/// An entry whose event is this much younger than its last update starts over
/// (upstream: the kubelet's expiry function, 600 s; also `2 × MAX`).
pub(crate) const RESET_AFTER: Duration = Duration::from_secs(600);

/// How much more time the wall clock may show since a finish than the monotonic clock
/// since the restart before it, before it counts as stepped (NTP slews at most
/// 500 ppm; a container's start and run fill the rest).
pub(crate) const STEP_TOLERANCE: Duration = Duration::from_secs(60);

/// A point in time the backoff can measure from: `Instant` (pulls) or `SystemTime`
/// (container finish times, which come from the runtime as wall-clock times).
pub trait Moment: Copy + std::fmt::Debug {
    /// `self - earlier`, zero if `earlier` is later.
    fn since(self, earlier: Self) -> Duration;
}

impl Moment for Instant {
    fn since(self, earlier: Self) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

impl Moment for SystemTime {
    fn since(self, earlier: Self) -> Duration {
        self.duration_since(earlier).unwrap_or(Duration::ZERO)
    }
}

#[derive(Clone, Copy, Debug)]
struct Entry<T> {
    backoff: Duration,
    last_update: T,
    /// When the last update was made on the monotonic clock (restarts only).
    updated_mono: Option<Instant>,
}

/// Backoff entries by key (`<pod>_<ns>_<uid>_<container>_<hash>` for restarts).
#[derive(Debug)]
pub struct Backoff<T: Moment = Instant> {
    entries: HashMap<String, Entry<T>>,
}

impl<T: Moment> Default for Backoff<T> {
    fn default() -> Self {
        Backoff {
            entries: HashMap::new(),
        }
    }
}

impl<T: Moment> Backoff<T> {
    /// The current backoff of `key`, if it has one that has not expired by `now`
    /// (upstream `Get`, with housekeeping's expiry applied).
    pub fn get(&self, key: &str, now: T) -> Option<Duration> {
        self.entries
            .get(key)
            .filter(|e| now.since(e.last_update) <= RESET_AFTER)
            .map(|e| e.backoff)
    }

    /// Upstream `IsInBackOffSince(key, event)`: true while less than the current
    /// backoff has passed since `event`, unless the entry expired relative to the event.
    pub(crate) fn is_in_backoff_since(&self, key: &str, event: T, now: T) -> bool {
        self.entries.get(key).is_some_and(|e| {
            event.since(e.last_update) <= RESET_AFTER && now.since(event) < e.backoff
        })
    }

    /// [`Self::is_in_backoff_since`] that a stepped wall clock cannot stall or storm:
    /// the time since `event` is the wall clock's, unless `event` is after `now` (the
    /// clock stepped back) or the wall clock shows more than [`STEP_TOLERANCE`] beyond
    /// the monotonic time since the entry's last update (`mono_now` against
    /// [`Self::next_at_mono`]'s; it stepped ahead): then that monotonic time.
    /// Entries updated without a monotonic time behave as [`Self::is_in_backoff_since`].
    pub fn is_in_backoff_since_mono(&self, key: &str, event: T, now: T, mono_now: Instant) -> bool {
        let Some(e) = self.entries.get(key) else {
            return false;
        };
        let Some(mono) = e
            .updated_mono
            .map(|m| mono_now.saturating_duration_since(m))
        else {
            return self.is_in_backoff_since(key, event, now);
        };
        let wall = now.since(event);
        let stepped_back = wall.is_zero() && !event.since(now).is_zero();
        let stepped_ahead = wall > mono.saturating_add(STEP_TOLERANCE);
        let elapsed = if stepped_back || stepped_ahead {
            mono
        } else {
            wall
        };
        !Self::expired(e, event, Some(mono_now)) && elapsed < e.backoff
    }

    /// Upstream's expiry: `event` more than [`RESET_AFTER`] after the last update (the
    /// container ran that long). `event` is the runtime's clock and the update the
    /// kubelet's: with a monotonic time for both, the monotonic clock must agree that
    /// that long has passed since the update, or a step between them would reset the
    /// backoff on every crash.
    fn expired(e: &Entry<T>, event: T, mono_now: Option<Instant>) -> bool {
        event.since(e.last_update) > RESET_AFTER
            && e.updated_mono
                .zip(mono_now)
                .is_none_or(|(u, n)| n.saturating_duration_since(u) > RESET_AFTER)
    }

    /// The backoff [`Self::is_in_backoff_since`] measures against (for messages).
    pub fn current(&self, key: &str) -> Option<Duration> {
        self.entries.get(key).map(|e| e.backoff)
    }

    /// True while less than the current backoff has passed since the key was last
    /// bumped (upstream `IsInBackOffSinceUpdate`, used for image pulls).
    pub fn is_in_backoff_since_update(&self, key: &str, now: T) -> bool {
        self.entries
            .get(key)
            .is_some_and(|e| now.since(e.last_update) < e.backoff)
    }

    /// Records an attempt: the first bump sets the initial period, each next one doubles
    /// it up to the maximum; an expired entry starts again at the initial period.
    pub fn next(&mut self, key: &str, now: T) {
        self.next_at(key, now, now);
    }

    /// Upstream `Next(key, event)`: like [`Self::next`], but the entry expires when
    /// `event` is more than [`RESET_AFTER`] after its last update (a container that ran
    /// ten minutes before dying starts over at the initial period).
    pub fn next_at(&mut self, key: &str, event: T, now: T) {
        self.update(key, event, now, None);
    }

    /// [`Self::next_at`], also recording `mono_now` for
    /// [`Self::is_in_backoff_since_mono`].
    pub fn next_at_mono(&mut self, key: &str, event: T, now: T, mono_now: Instant) {
        self.update(key, event, now, Some(mono_now));
    }

    fn update(&mut self, key: &str, event: T, now: T, updated_mono: Option<Instant>) {
        let backoff = match self.entries.get(key) {
            Some(e) if !Self::expired(e, event, updated_mono) => (e.backoff * 2).min(MAX),
            _ => INITIAL,
        };
        self.entries.insert(
            key.to_string(),
            Entry {
                backoff,
                last_update: now,
                updated_mono,
            },
        );
    }

    /// Forgets expired entries (housekeeping; upstream `GC`).
    pub fn gc(&mut self, now: T) {
        self.entries
            .retain(|_, e| now.since(e.last_update) <= RESET_AFTER);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_the_cap() {
        let mut b = Backoff::default();
        let t0 = Instant::now();
        let mut seen = vec![];
        for i in 0..8 {
            let now = t0 + Duration::from_secs(i);
            b.next("k", now);
            seen.push(b.get("k", now).map(|d| d.as_secs()));
        }
        assert_eq!(
            seen,
            [10, 20, 40, 80, 160, 300, 300, 300].map(Some).to_vec()
        );
    }

    #[test]
    fn pulls_wait_only_while_younger_than_the_backoff() {
        let mut b = Backoff::default();
        let t0 = Instant::now();
        b.next("k", t0);
        assert!(b.is_in_backoff_since_update("k", t0 + Duration::from_secs(9)));
        assert!(!b.is_in_backoff_since_update("k", t0 + Duration::from_secs(10)));
        assert!(!b.is_in_backoff_since_update("other", t0));
    }

    #[test]
    fn resets_after_ten_quiet_minutes() {
        let mut b = Backoff::default();
        let t0 = Instant::now();
        b.next("k", t0);
        b.next("k", t0);
        let later = t0 + RESET_AFTER + Duration::from_secs(1);
        assert_eq!(b.get("k", later), None);
        b.next("k", later);
        assert_eq!(b.get("k", later), Some(INITIAL));
        b.gc(later + RESET_AFTER + Duration::from_secs(1));
        assert_eq!(b.get("k", later), None);
    }

    fn wall(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + s)
    }

    /// A container that dies at once each time: restart 1 is immediate, then the waits
    /// are 10 s, 20 s, 40 s … measured from each death.
    #[test]
    fn crash_loop_waits_measured_from_each_finish() {
        let mut b: Backoff<SystemTime> = Backoff::default();
        let mut now = 0;
        let mut waits = vec![];
        for _ in 0..7 {
            let died = wall(now);
            let mut t = now;
            while b.is_in_backoff_since("k", died, wall(t)) {
                t += 1;
            }
            waits.push(t - now);
            b.next_at("k", died, wall(t));
            now = t + 1; // runs one second, dies again
        }
        assert_eq!(waits, [0, 10, 20, 40, 80, 160, 300]);
    }

    /// Upstream's expiry compares the event (the container's finish) with the last
    /// update: ten minutes of running resets the backoff even if `now` is later still.
    #[test]
    fn a_long_run_before_the_crash_starts_over() {
        let mut b: Backoff<SystemTime> = Backoff::default();
        for _ in 0..4 {
            b.next_at("k", wall(0), wall(0));
        }
        assert_eq!(b.current("k"), Some(Duration::from_secs(80)));
        let died = wall(601);
        assert!(!b.is_in_backoff_since("k", died, wall(601)));
        b.next_at("k", died, wall(601));
        assert_eq!(b.current("k"), Some(INITIAL));
        // A short run keeps doubling.
        let died = wall(605);
        assert!(b.is_in_backoff_since("k", died, wall(605)));
        b.next_at("k", died, wall(615));
        assert_eq!(b.current("k"), Some(Duration::from_secs(20)));
    }

    /// A crash loop under a wall clock that steps: an hour back (the finish lies in
    /// the future) the wait is timed on the monotonic clock from the restart, not an
    /// hour; an hour ahead (or a runtime clock an hour behind) the wait is still the
    /// backoff, not over at once.
    #[test]
    fn a_stepped_wall_clock_neither_stalls_nor_storms_the_crash_loop() {
        let mono0 = Instant::now();
        let mono = |s: u64| mono0 + Duration::from_secs(s);
        let mut b: Backoff<SystemTime> = Backoff::default();
        // Restarted at 0 (monotonic 0), died at 1; backoff 10 s.
        b.next_at_mono("k", wall(0), wall(0), mono(0));
        let died = wall(1);
        // As before when the clock does not step.
        assert!(b.is_in_backoff_since_mono("k", died, wall(5), mono(5)));
        assert!(!b.is_in_backoff_since_mono("k", died, wall(12), mono(12)));
        // Stepped back an hour at monotonic 3: the finish is in the future.
        let back = |s: u64| wall(s) - Duration::from_secs(3600);
        assert!(b.is_in_backoff_since_mono("k", died, back(5), mono(5)));
        assert!(
            !b.is_in_backoff_since_mono("k", died, back(12), mono(12)),
            "no hour-long stall"
        );
        // Stepped ahead an hour: the wall says an hour passed, the monotonic clock 5 s.
        let ahead = |s: u64| wall(s) + Duration::from_secs(3600);
        assert!(
            b.is_in_backoff_since_mono("k", died, ahead(5), mono(5)),
            "no restart before the backoff"
        );
        assert!(!b.is_in_backoff_since_mono("k", died, ahead(11), mono(11)));
        // An hour back, the next restart keeps doubling: the finish an hour after the
        // update on the wall clock is not ten minutes of running.
        b.next_at_mono("k", died, back(12), mono(12));
        assert_eq!(b.current("k"), Some(Duration::from_secs(20)));
        let died = wall(13);
        assert!(b.is_in_backoff_since_mono("k", died, back(20), mono(20)));
        assert!(!b.is_in_backoff_since_mono("k", died, back(33), mono(33)));
        // An entry without a monotonic time is timed by the wall clock alone.
        b.next_at("w", wall(0), wall(0));
        assert!(b.is_in_backoff_since_mono("w", wall(1), wall(5), mono(500)));
    }
}
