//! Upstream's pod cache (`kubecontainer.Cache`, read with `GetNewerThan`): each pod's
//! sandboxes and containers as the last sync read them, with the PLEG's generation of
//! the pod taken just before that read. A sync of a pod whose generation has not moved
//! since reads nothing from the runtime: at 110 idle pods that is 110 lists and 220
//! inspects a minute fewer. Entries are bounded by the pods the node runs: the runtime
//! manager drops a pod's when its containers are removed.
//!
//! An entry lives as long as its pod, so its containers' labels (a dozen each, the
//! biggest part of an entry) are kept packed, one string and one index each instead
//! of a tree of two dozen strings, and unpacked by [`PodCache::get`].

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::container::RuntimePod;
use crate::ContainerDetails;
use base::loops::lock;

/// One pod's containers as read, and what vouches for them.
#[derive(Debug)]
struct Entry {
    generation: u64,
    read_at: Instant,
    sandboxes: Vec<Packed>,
    containers: Vec<Packed>,
}

/// A container's details with its labels packed.
#[derive(Debug, PartialEq, Eq)]
struct Packed {
    /// Everything but the labels (left empty).
    details: ContainerDetails,
    labels: PackedLabels,
}

impl Packed {
    fn new(c: &ContainerDetails) -> Packed {
        Packed {
            details: ContainerDetails {
                labels: BTreeMap::new(),
                ..c.clone()
            },
            labels: PackedLabels::new(&c.labels),
        }
    }

    fn unpack(&self) -> ContainerDetails {
        ContainerDetails {
            labels: self.labels.unpack(),
            ..self.details.clone()
        }
    }
}

/// Labels as one string of keys and values one after the other, in key order, and
/// where each of them ends.
#[derive(Debug, PartialEq, Eq)]
struct PackedLabels {
    text: Box<str>,
    ends: Box<[u32]>,
}

impl PackedLabels {
    fn new(labels: &BTreeMap<String, String>) -> PackedLabels {
        let mut text = String::with_capacity(labels.iter().map(|(k, v)| k.len() + v.len()).sum());
        let mut ends = Vec::with_capacity(labels.len() * 2);
        for (k, v) in labels {
            for s in [k, v] {
                text.push_str(s);
                // Labels come from the runtime's answer, bounded far below 4 GiB.
                ends.push(u32::try_from(text.len()).unwrap_or(u32::MAX));
            }
        }
        PackedLabels {
            text: text.into_boxed_str(),
            ends: ends.into_boxed_slice(),
        }
    }

    fn unpack(&self) -> BTreeMap<String, String> {
        let mut start = 0;
        let mut parts = self.ends.iter().map(|&end| {
            let end = end as usize;
            let s = self.text.get(start..end).unwrap_or_default().to_string();
            start = end;
            s
        });
        let mut labels = BTreeMap::new();
        while let (Some(k), Some(v)) = (parts.next(), parts.next()) {
            labels.insert(k, v);
        }
        labels
    }
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
            .map(|e| RuntimePod {
                sandboxes: e.sandboxes.iter().map(Packed::unpack).collect(),
                containers: e.containers.iter().map(Packed::unpack).collect(),
            })
    }

    /// Keeps `pod`, read at `read_at` after the PLEG's `generation` of it was taken.
    /// A read that found the pod as kept renews the entry it has: every 5 minutes each
    /// pod is read again whatever the PLEG says, and an entry made anew amid that
    /// read's decode would pin a page of the freed decode for the pod's life.
    pub fn set(&self, uid: &str, generation: u64, read_at: Instant, pod: &RuntimePod) {
        let sandboxes: Vec<Packed> = pod.sandboxes.iter().map(Packed::new).collect();
        let containers: Vec<Packed> = pod.containers.iter().map(Packed::new).collect();
        let mut pods = lock(&self.pods);
        match pods.get_mut(uid) {
            Some(e) if e.sandboxes == sandboxes && e.containers == containers => {
                e.generation = generation;
                e.read_at = read_at;
            }
            _ => {
                pods.insert(
                    uid.to_string(),
                    Entry {
                        generation,
                        read_at,
                        sandboxes,
                        containers,
                    },
                );
            }
        }
    }

    /// Marks a pod's entry, kept at `generation`, as read again at `read_at` (the
    /// runtime's list agreed with it); no entry of that generation, no change.
    pub fn renew(&self, uid: &str, generation: u64, read_at: Instant) {
        if let Some(e) = lock(&self.pods)
            .get_mut(uid)
            .filter(|e| e.generation == generation)
        {
            e.read_at = read_at;
        }
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

    #[test]
    fn a_pod_comes_back_as_it_was_kept_labels_included() {
        let cache = PodCache::default();
        let t0 = Instant::now();
        let c = |id: &str, labels: &[(&str, &str)]| ContainerDetails {
            id: id.into(),
            name: format!("k8s_{id}"),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            state: crate::ContainerState::Running,
            image: "busybox".into(),
            image_id: "sha256:1".into(),
            created: std::time::SystemTime::UNIX_EPOCH,
            started_at: Some(std::time::SystemTime::UNIX_EPOCH),
            finished_at: None,
            exit_code: 0,
            oom_killed: false,
            error: String::new(),
            pid: 7,
            ip_address: "10.0.0.2".into(),
            additional_ips: vec!["fd00::2".into()],
            host_network: false,
            stop_signal: String::new(),
            rootfs_dir: String::new(),
            log_path: "/var/log/pods/x/c/0.log".into(),
        };
        let pod = RuntimePod {
            sandboxes: vec![c("s", &[("io.kubernetes.pod.uid", "u"), ("empty", "")])],
            containers: vec![
                c("a", &[("k", "v"), ("ünï", "cödé"), ("", "no key")]),
                c("b", &[]),
            ],
        };
        cache.set("u", 1, t0, &pod);
        let back = cache.get("u", 1, t0, Duration::from_secs(1)).expect("kept");
        assert_eq!(back.sandboxes, pod.sandboxes);
        assert_eq!(back.containers, pod.containers);

        // Read again, unchanged: the entry is renewed (new generation and time), the
        // same storage kept.
        let storage =
            |cache: &PodCache| lock(&cache.pods)["u"].containers[0].labels.text.as_ptr() as usize;
        let kept = storage(&cache);
        let t1 = t0 + Duration::from_secs(300);
        cache.set("u", 2, t1, &pod);
        assert!(cache.get("u", 1, t1, Duration::from_secs(1)).is_none());
        assert!(cache.get("u", 2, t1, Duration::from_secs(1)).is_some());
        assert_eq!(storage(&cache), kept);
        // Changed: replaced.
        let mut changed = pod.clone();
        changed.containers[0].state = crate::ContainerState::Exited;
        cache.set("u", 3, t1, &changed);
        let back = cache.get("u", 3, t1, Duration::from_secs(1)).expect("kept");
        assert_eq!(back.containers, changed.containers);
    }
}
