//! Upstream's pod cache (`kubecontainer.Cache`, read with `GetNewerThan`): each pod's
//! sandboxes and containers as the last sync read them, with the PLEG's generation of
//! the pod taken just before that read. A sync of a pod whose generation has not moved
//! since reads nothing from the runtime: at 110 idle pods that is 110 lists and 220
//! inspects a minute fewer. Entries are bounded by the pods the node runs: the runtime
//! manager drops a pod's when its containers are removed.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::container::RuntimePod;
use base::loops::lock;

/// One pod's containers as read, and what vouches for them.
#[derive(Debug)]
struct Entry {
    generation: u64,
    read_at: Instant,
    pod: RuntimePod,
}

/// The pod cache. One small lock, never held across a runtime call.
#[derive(Debug, Default)]
pub struct PodCache {
    pods: Mutex<HashMap<String, Entry>>,
}

impl PodCache {
    /// The pod as last read, when it was read at `generation` less than `max_age`
    /// before `now`.
    pub fn get(
        &self,
        uid: &str,
        generation: u64,
        now: Instant,
        max_age: Duration,
    ) -> Option<RuntimePod> {
        lock(&self.pods)
            .get(uid)
            .filter(|e| {
                e.generation == generation && now.saturating_duration_since(e.read_at) < max_age
            })
            .map(|e| e.pod.clone())
    }

    /// Keeps `pod`, read at `read_at` after the PLEG's `generation` of it was taken.
    pub fn set(&self, uid: &str, generation: u64, read_at: Instant, pod: &RuntimePod) {
        lock(&self.pods).insert(
            uid.to_string(),
            Entry {
                generation,
                read_at,
                pod: pod.clone(),
            },
        );
    }

    /// Forgets a pod.
    pub fn remove(&self, uid: &str) {
        lock(&self.pods).remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_serves_only_its_generation_and_only_while_fresh() {
        let cache = PodCache::default();
        let t0 = Instant::now();
        let max = Duration::from_secs(60);
        assert!(cache.get("u", 1, t0, max).is_none());
        cache.set("u", 1, t0, &RuntimePod::default());
        assert!(cache
            .get("u", 1, t0 + Duration::from_secs(59), max)
            .is_some());
        assert!(
            cache.get("u", 2, t0, max).is_none(),
            "the PLEG saw a change"
        );
        assert!(cache.get("u", 1, t0 + max, max).is_none(), "too old");
        cache.remove("u");
        assert!(cache.get("u", 1, t0, max).is_none());
    }
}
