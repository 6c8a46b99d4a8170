//! A bounded cache whose entries expire: the kubelet port's memory of the API
//! server's answers (a token's user, a request's decision), as upstream's
//! `cachedTokenAuthenticator` and the webhook authorizer's decision cache keep them.
//! Pure: `now` is passed in, so expiry and eviction are table-tested without waiting.
//!
//! Bounded: at most `cap` entries. Inserting a new key into a full cache first drops
//! what has expired, then the least recently used entry, so a flood of distinct tokens
//! costs at most `cap` entries and pushes out the rarely used ones first. That scan is
//! linear, and runs only when the cache is full (each insert there follows a call to
//! the API server, which costs far more).

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// Entries by key, each with its expiry and when it was last used.
#[derive(Debug)]
pub(crate) struct TtlCache<K, V> {
    entries: HashMap<K, Slot<V>>,
    cap: usize,
    /// A use counter: larger is more recent.
    clock: u64,
}

#[derive(Debug)]
struct Slot<V> {
    value: V,
    expires: Instant,
    used: u64,
}

impl<K: Hash + Eq + Clone, V: Clone> TtlCache<K, V> {
    /// An empty cache of at most `cap` entries.
    pub(crate) fn new(cap: usize) -> Self {
        TtlCache {
            entries: HashMap::new(),
            cap,
            clock: 0,
        }
    }

    /// The value of `key` if it has not expired at `now` (an expired one is dropped).
    pub(crate) fn get(&mut self, key: &K, now: Instant) -> Option<V> {
        self.clock += 1;
        let clock = self.clock;
        match self.entries.get_mut(key) {
            Some(slot) if now < slot.expires => {
                slot.used = clock;
                Some(slot.value.clone())
            }
            Some(_) => {
                self.entries.remove(key);
                None
            }
            None => None,
        }
    }

    /// Keeps `value` for `key` until `now + ttl`; a zero TTL keeps nothing.
    pub(crate) fn insert(&mut self, key: K, value: V, ttl: Duration, now: Instant) {
        let expires = base::time::saturating_deadline(now, ttl);
        if expires <= now || self.cap == 0 {
            return;
        }
        if !self.entries.contains_key(&key) && self.entries.len() >= self.cap {
            self.entries.retain(|_, slot| now < slot.expires);
            if self.entries.len() >= self.cap {
                let lru = self
                    .entries
                    .iter()
                    .min_by_key(|(_, slot)| slot.used)
                    .map(|(k, _)| k.clone());
                if let Some(k) = lru {
                    self.entries.remove(&k);
                }
            }
        }
        self.clock += 1;
        self.entries.insert(
            key,
            Slot {
                value,
                expires,
                used: self.clock,
            },
        );
    }

    #[cfg(test)]
    /// How many entries are held (expired ones included until they are dropped).
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    #[cfg(test)]
    /// Whether nothing is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn entries_expire_after_their_own_ttl() {
        let t0 = Instant::now();
        let mut c = TtlCache::new(8);
        c.insert("allowed", true, 300 * S, t0);
        c.insert("denied", false, 30 * S, t0);
        c.insert("never", true, Duration::ZERO, t0);
        assert_eq!(c.get(&"allowed", t0 + 29 * S), Some(true));
        assert_eq!(c.get(&"denied", t0 + 29 * S), Some(false));
        assert_eq!(c.get(&"denied", t0 + 30 * S), None, "expired at its TTL");
        assert_eq!(c.get(&"allowed", t0 + 299 * S), Some(true));
        assert_eq!(c.get(&"allowed", t0 + 300 * S), None);
        assert_eq!(c.get(&"never", t0), None, "a zero TTL caches nothing");
        assert!(c.is_empty(), "expired entries are dropped when met");
        // A TTL too large for the clock is capped, never a panic.
        c.insert("long", true, Duration::MAX, t0);
        assert_eq!(c.get(&"long", t0 + 1000 * S), Some(true));
    }

    #[test]
    fn a_full_cache_drops_expired_entries_then_the_least_recently_used() {
        let t0 = Instant::now();
        let mut c = TtlCache::new(3);
        c.insert(1, "a", 10 * S, t0);
        c.insert(2, "b", 100 * S, t0);
        c.insert(3, "c", 100 * S, t0);
        // 1 has expired by now: it goes first, the others stay.
        c.insert(4, "d", 100 * S, t0 + 20 * S);
        assert_eq!(c.len(), 3);
        assert_eq!(c.get(&2, t0 + 20 * S), Some("b"));
        // Nothing expired: the least recently used (3; 2 was just read) goes.
        c.insert(5, "e", 100 * S, t0 + 21 * S);
        assert_eq!(c.len(), 3);
        assert_eq!(c.get(&3, t0 + 21 * S), None);
        assert_eq!(c.get(&2, t0 + 21 * S), Some("b"));
        assert_eq!(c.get(&4, t0 + 21 * S), Some("d"));
        assert_eq!(c.get(&5, t0 + 21 * S), Some("e"));
        // Replacing a key in a full cache evicts nothing.
        c.insert(5, "E", 100 * S, t0 + 22 * S);
        assert_eq!(c.len(), 3);
        assert_eq!(c.get(&5, t0 + 22 * S), Some("E"));
        // However many keys, never more than the cap.
        for k in 100..2000 {
            c.insert(k, "x", 100 * S, t0 + 23 * S);
        }
        assert_eq!(c.len(), 3);
    }
}
