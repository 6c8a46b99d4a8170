//! Restart and pull backoff (upstream `flowcontrol.Backoff` as the kubelet uses it):
//! per key, 10 s doubling to 300 s, forgotten when the last bump is older than 600 s.
//! Pure: every call takes `now`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Upstream `containerBackOffPeriod` / image backoff initial period.
pub const INITIAL: Duration = Duration::from_secs(10);
/// Upstream `MaxContainerBackOff` / `MaxImageBackOff`.
pub const MAX: Duration = Duration::from_secs(300);
/// An entry untouched this long starts over (a container that ran 10 min restarts fast).
pub const RESET_AFTER: Duration = Duration::from_secs(600);

#[derive(Clone, Copy, Debug)]
struct Entry {
    backoff: Duration,
    last_update: Instant,
}

/// Backoff entries by key (`<pod>_<ns>_<uid>_<container>_<hash>` for restarts).
#[derive(Debug, Default)]
pub struct Backoff {
    entries: HashMap<String, Entry>,
}

impl Backoff {
    /// The current backoff of `key`, if it has one that has not expired.
    pub fn get(&self, key: &str, now: Instant) -> Option<Duration> {
        self.entries
            .get(key)
            .filter(|e| now.saturating_duration_since(e.last_update) <= RESET_AFTER)
            .map(|e| e.backoff)
    }

    /// True while `key` must wait: the event it is timed from (e.g. the dead
    /// container's finish, `elapsed` ago) is younger than the current backoff.
    pub fn is_in_backoff(&self, key: &str, elapsed: Duration, now: Instant) -> bool {
        self.get(key, now).is_some_and(|b| elapsed < b)
    }

    /// True while less than the current backoff has passed since the key was last
    /// bumped (upstream `IsInBackOffSinceUpdate`, used for image pulls).
    pub fn is_in_backoff_since_update(&self, key: &str, now: Instant) -> bool {
        self.entries
            .get(key)
            .is_some_and(|e| now.saturating_duration_since(e.last_update) < e.backoff)
    }

    /// Records an attempt: the first bump sets the initial period, each next one doubles
    /// it up to the maximum; an expired entry starts again at the initial period.
    pub fn next(&mut self, key: &str, now: Instant) {
        let backoff = match self.get(key, now) {
            None => INITIAL,
            Some(b) => (b * 2).min(MAX),
        };
        self.entries.insert(
            key.to_string(),
            Entry {
                backoff,
                last_update: now,
            },
        );
    }

    /// Forgets expired entries (housekeeping).
    pub fn gc(&mut self, now: Instant) {
        self.entries
            .retain(|_, e| now.saturating_duration_since(e.last_update) <= RESET_AFTER);
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
    fn waits_only_while_younger_than_the_backoff() {
        let mut b = Backoff::default();
        let t0 = Instant::now();
        b.next("k", t0);
        assert!(b.is_in_backoff("k", Duration::from_secs(9), t0));
        assert!(!b.is_in_backoff("k", Duration::from_secs(10), t0));
        assert!(!b.is_in_backoff("other", Duration::ZERO, t0));
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
}
