//! Image GC's tracking and decisions (upstream `image_gc_manager.go`, reference §8.2),
//! pure: when each image was first detected and last used, how many bytes the disk
//! usage asks for, and which unused images go, least recently used first.
//! [`super::ImageGc`] lists, measures and removes.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime};

use runtime::ImageDetails;

/// Upstream `ImageGCPolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImagePolicy {
    /// `imageGCHighThresholdPercent`: usage at or above which GC frees space; 100 off.
    pub high_percent: u8,
    /// `imageGCLowThresholdPercent`: usage GC frees down to.
    pub low_percent: u8,
    /// `imageMinimumGCAge`: an image first detected less long ago stays.
    pub min_age: Duration,
    /// `imageMaximumGCAge`: an image unused this long goes whatever the usage; zero off.
    pub max_age: Duration,
}

impl Default for ImagePolicy {
    /// Upstream's defaults.
    fn default() -> Self {
        ImagePolicy {
            high_percent: 85,
            low_percent: 80,
            min_age: Duration::from_secs(120),
            max_age: Duration::ZERO,
        }
    }
}

/// What the kubelet remembers of one image (upstream `imageRecord`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageRecord {
    /// When this kubelet first saw it (the epoch for images found at start, as
    /// upstream's zero time: a restart does not make old images young).
    pub first_detected: SystemTime,
    /// When a container last used it (the epoch: never seen used).
    pub last_used: SystemTime,
    /// Its size in bytes.
    pub size: u64,
    /// Its tags, for logs.
    pub tags: Vec<String>,
}

/// The image records by image ID.
#[derive(Clone, Debug, Default)]
pub(crate) struct ImageRecords {
    records: HashMap<String, ImageRecord>,
    /// The first detection has run (images found by it count as old).
    initialized: bool,
}

impl ImageRecords {
    /// Upstream `detectImages`: records new images (first detected now, or at the
    /// epoch on the first pass), marks `in_use` ones used now, forgets images that are
    /// gone. `in_use` holds image IDs.
    pub(crate) fn detect(
        &mut self,
        images: &[ImageDetails],
        in_use: &HashSet<String>,
        now: SystemTime,
    ) {
        let detected = if self.initialized {
            now
        } else {
            SystemTime::UNIX_EPOCH
        };
        self.initialized = true;
        let present: HashSet<&str> = images.iter().map(|i| i.id.as_str()).collect();
        self.records.retain(|id, _| present.contains(id.as_str()));
        for i in images {
            let r = self
                .records
                .entry(i.id.clone())
                .or_insert_with(|| ImageRecord {
                    first_detected: detected,
                    last_used: SystemTime::UNIX_EPOCH,
                    size: 0,
                    tags: Vec::new(),
                });
            r.size = u64::try_from(i.size).unwrap_or(0);
            r.tags = i.repo_tags.clone();
            if in_use.contains(&i.id) {
                r.last_used = now;
            }
        }
    }

    #[cfg(test)]
    /// One image's record.
    pub(crate) fn get(&self, id: &str) -> Option<&ImageRecord> {
        self.records.get(id)
    }

    /// Forgets a removed image.
    pub(crate) fn forget(&mut self, id: &str) {
        self.records.remove(id);
    }

    /// Upstream's eviction candidates: images not in use, not pinned, first detected
    /// at least `min_age` ago; least recently used first, then first detected first
    /// (the ID breaks ties so the order is stable).
    pub(crate) fn candidates(
        &self,
        in_use: &HashSet<String>,
        pinned: &HashSet<String>,
        min_age: Duration,
        now: SystemTime,
    ) -> Vec<(String, ImageRecord)> {
        let mut v: Vec<(String, ImageRecord)> = self
            .records
            .iter()
            .filter(|(id, r)| {
                !in_use.contains(*id)
                    && !pinned.contains(*id)
                    && now
                        .duration_since(r.first_detected)
                        .is_ok_and(|age| age >= min_age)
            })
            .map(|(id, r)| (id.clone(), r.clone()))
            .collect();
        base::sort::sort_by(&mut v, |a, b| {
            (a.1.last_used, a.1.first_detected, &a.0).cmp(&(
                b.1.last_used,
                b.1.first_detected,
                &b.0,
            ))
        });
        v
    }
}

/// Upstream's amount to free: with usage at or above the high threshold, enough bytes
/// to come down to the low one; else 0. `None` for a capacity of 0 (upstream's
/// `InvalidDiskCapacity`).
pub(crate) fn bytes_to_free(policy: &ImagePolicy, capacity: u64, available: u64) -> Option<u64> {
    if capacity == 0 {
        return None;
    }
    if policy.high_percent >= 100 {
        return Some(0);
    }
    let used_percent = 100u128 - u128::from(available) * 100 / u128::from(capacity);
    if used_percent < u128::from(policy.high_percent) {
        return Some(0);
    }
    let target = u128::from(capacity) * u128::from(100 - policy.low_percent.min(100)) / 100;
    Some(u64::try_from(target.saturating_sub(u128::from(available))).unwrap_or(u64::MAX))
}

/// The candidates to remove to free `bytes`, in order (all of them when the total
/// falls short: the caller reports the shortfall).
pub fn choose(candidates: &[(String, ImageRecord)], bytes: u64) -> Vec<(String, ImageRecord)> {
    let mut freed = 0u64;
    let mut out = Vec::new();
    for c in candidates {
        if freed >= bytes {
            break;
        }
        freed = freed.saturating_add(c.1.size);
        out.push(c.clone());
    }
    out
}

/// Upstream `freeOldImages`: candidates unused for longer than `max_age` (zero: none).
pub fn too_old(
    candidates: &[(String, ImageRecord)],
    max_age: Duration,
    now: SystemTime,
) -> Vec<(String, ImageRecord)> {
    if max_age.is_zero() {
        return Vec::new();
    }
    candidates
        .iter()
        .filter(|(_, r)| {
            // A never-used image counts from when it was first detected.
            let since = r.last_used.max(r.first_detected);
            now.duration_since(since).is_ok_and(|d| d > max_age)
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn img(id: &str, size: i64) -> ImageDetails {
        ImageDetails {
            id: id.into(),
            repo_tags: vec![format!("{id}:latest")],
            repo_digests: vec![],
            size,
            entrypoint: vec![],
            cmd: vec![],
            user: String::new(),
            stop_signal: String::new(),
        }
    }

    fn t(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600 + s)
    }

    fn set(ids: &[&str]) -> HashSet<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn least_recently_used_go_first_and_in_use_pinned_and_young_never() {
        let mut r = ImageRecords::default();
        let images = vec![img("a", 10), img("b", 10), img("c", 10), img("pause", 1)];
        // First pass at start: a used.
        r.detect(&images, &set(&["a"]), t(0));
        // Later: b used, then c.
        r.detect(&images, &set(&["b"]), t(100));
        r.detect(&images, &set(&["c"]), t(200));
        // A new image appears: young.
        let mut more = images.clone();
        more.push(img("new", 50));
        r.detect(&more, &set(&[]), t(300));
        let c = r.candidates(
            &set(&[]),
            &set(&["pause"]),
            Duration::from_secs(120),
            t(310),
        );
        let ids: Vec<&str> = c.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c"]);
        let c = r.candidates(&set(&["b"]), &set(&["pause"]), Duration::ZERO, t(310));
        let ids: Vec<&str> = c.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["new", "a", "c"], "never used sorts first; b in use");
        assert_eq!(choose(&c, 55).len(), 2);
        assert_eq!(choose(&c, 0).len(), 0);
        assert_eq!(choose(&c, 1000).len(), 3);
    }

    #[test]
    fn gone_images_are_forgotten() {
        let mut r = ImageRecords::default();
        r.detect(&[img("a", 1), img("b", 1)], &set(&[]), t(0));
        r.detect(&[img("b", 1)], &set(&[]), t(10));
        assert!(r.get("a").is_none());
        assert_eq!(
            r.get("b").expect("test value").first_detected,
            SystemTime::UNIX_EPOCH
        );
    }

    #[test]
    fn bytes_to_free_follows_the_thresholds() {
        let p = ImagePolicy::default();
        assert_eq!(bytes_to_free(&p, 0, 0), None);
        assert_eq!(bytes_to_free(&p, 1000, 200), Some(0), "80 % used");
        // 90 % used: free down to 80 %: 200 available needed, 100 there.
        assert_eq!(bytes_to_free(&p, 1000, 100), Some(100));
        let off = ImagePolicy {
            high_percent: 100,
            ..p
        };
        assert_eq!(bytes_to_free(&off, 1000, 0), Some(0));
    }

    #[test]
    fn max_age_takes_long_unused_images() {
        let mut r = ImageRecords::default();
        r.detect(&[img("a", 1), img("b", 1)], &set(&["a", "b"]), t(0));
        r.detect(&[img("a", 1), img("b", 1)], &set(&["b"]), t(100));
        let c = r.candidates(&set(&[]), &set(&[]), Duration::ZERO, t(200));
        let old: Vec<String> = too_old(&c, Duration::from_secs(150), t(200))
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        assert_eq!(old, ["a"]);
        assert!(too_old(&c, Duration::ZERO, t(200)).is_empty());
    }
}
