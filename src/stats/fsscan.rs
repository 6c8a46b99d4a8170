//! Disk usage of directories (containers' writable layers and log directories, pod
//! volumes), measured by a bounded periodic scan: upstream's `fsResourceAnalyzer`
//! (`pkg/kubelet/server/stats/fs_resource_analyzer.go`), which caches each volume's
//! `du` for `calcPeriod` (1 min).
//!
//! [`FsScanner::scan`] is given the wanted directories on every `stats` tick; it keeps
//! each one's last figures, and measures again only those older than [`FS_PERIOD`],
//! oldest first, until the tick's budget of visited entries is spent, so a node with
//! many large volumes spreads the work over several ticks instead of stalling one. One
//! directory's walk is itself capped ([`DU_MAX_ENTRIES`]): a directory with more entries
//! reports what was counted. The walk is `du -x`: blocks actually allocated, links not
//! followed, other filesystems (mounts below the directory) not entered.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use super::cgroupfs::{statvfs, FsStats};

/// How long one measurement is used (upstream's `calcPeriod`).
pub(crate) const FS_PERIOD: Duration = Duration::from_secs(60);

/// Entries one tick may visit, all directories together: ~20 ms of `lstat`s on an SD
/// card, so a 10 s tick stays cheap however much is stored.
pub(crate) const TICK_BUDGET: u64 = 20_000;

/// Entries one directory's walk may visit before it stops and reports what it counted.
pub(crate) const DU_MAX_ENTRIES: u64 = 200_000;

/// What one directory uses, and the filesystem it is on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct DirUsage {
    /// Bytes allocated (`st_blocks × 512`, as `du`).
    pub used_bytes: u64,
    /// Entries (inodes) below and including the directory.
    pub inodes_used: u64,
    /// The filesystem holding the directory, when `statvfs` answered.
    pub fs: Option<FsStats>,
    /// The walk stopped at [`DU_MAX_ENTRIES`].
    pub partial: bool,
}

/// One measured directory.
#[derive(Clone, Copy, Debug)]
struct Entry {
    usage: DirUsage,
    measured: Instant,
    at: SystemTime,
}

/// The cached measurements.
#[derive(Debug, Default)]
pub(crate) struct FsScanner {
    cache: HashMap<PathBuf, Entry>,
}

impl FsScanner {
    /// Measures the stale ones of `wanted` within `budget` entries, forgets directories
    /// no longer wanted; returns the entries visited.
    pub(crate) fn scan(&mut self, wanted: &[PathBuf], now: Instant, budget: u64) -> u64 {
        let keep: std::collections::HashSet<&PathBuf> = wanted.iter().collect();
        self.cache.retain(|p, _| keep.contains(p));
        let mut stale: Vec<(Option<Instant>, &PathBuf)> = wanted
            .iter()
            .filter_map(|p| match self.cache.get(p) {
                None => Some((None, p)),
                Some(e) if now.saturating_duration_since(e.measured) >= FS_PERIOD => {
                    Some((Some(e.measured), p))
                }
                Some(_) => None,
            })
            .collect();
        // Never measured first, then the oldest.
        base::sort::sort(&mut stale);
        let mut spent = 0u64;
        for (_, p) in stale {
            if spent >= budget {
                break;
            }
            // A walk begun is finished (up to its own cap): the budget is checked between
            // directories.
            let usage = dir_usage(p, DU_MAX_ENTRIES);
            spent = spent.saturating_add(usage.inodes_used.max(1));
            self.cache.insert(
                p.clone(),
                Entry {
                    usage,
                    measured: now,
                    at: SystemTime::now(),
                },
            );
        }
        spent
    }

    /// The last figures of `dir`, with when they were measured; None before its first.
    pub(crate) fn get(&self, dir: &Path) -> Option<(DirUsage, SystemTime)> {
        self.cache.get(dir).map(|e| (e.usage, e.at))
    }
}

/// `du -x` of `dir` (a directory or a single file), visiting at most `max` entries.
pub(crate) fn dir_usage(dir: &Path, max: u64) -> DirUsage {
    let mut u = DirUsage {
        fs: statvfs(dir).ok(),
        ..DirUsage::default()
    };
    let Ok(top) = std::fs::symlink_metadata(dir) else {
        u.fs = None;
        return u;
    };
    let dev = top.dev();
    u.used_bytes = top.blocks().saturating_mul(512);
    u.inodes_used = 1;
    if !top.is_dir() {
        return u;
    }
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in rd.flatten() {
            if u.inodes_used >= max {
                u.partial = true;
                return u;
            }
            let Ok(m) = entry.metadata() else {
                continue;
            };
            if m.dev() != dev {
                continue;
            }
            u.inodes_used += 1;
            u.used_bytes = u.used_bytes.saturating_add(m.blocks().saturating_mul(512));
            if m.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    u
}

#[cfg(test)]
mod tests {
    use super::*;
    use base::testutil::TempDir;

    fn fill(dir: &Path, files: usize, bytes: usize) {
        std::fs::create_dir_all(dir).expect("mkdir");
        for i in 0..files {
            std::fs::write(dir.join(format!("f{i}")), vec![7u8; bytes]).expect("write");
        }
    }

    #[test]
    fn du_counts_allocated_blocks_and_entries() {
        let t = TempDir::new("du");
        fill(&t.0.join("a/b"), 3, 64 * 1024);
        std::os::unix::fs::symlink("/etc", t.0.join("a/link")).expect("link");
        let u = dir_usage(&t.0, DU_MAX_ENTRIES);
        // t, a, b, three files, the link.
        assert_eq!(u.inodes_used, 7);
        assert!(u.used_bytes >= 3 * 64 * 1024, "{u:?}");
        assert!(u.used_bytes < 3 * 64 * 1024 + 64 * 1024, "{u:?}");
        assert!(!u.partial);
        assert!(u.fs.is_some());
        let capped = dir_usage(&t.0, 3);
        assert!(capped.partial);
        assert_eq!(capped.inodes_used, 3);
        let file = dir_usage(&t.0.join("a/b/f0"), 10);
        assert_eq!(file.inodes_used, 1);
        let gone = dir_usage(&t.0.join("gone"), 10);
        assert_eq!((gone.inodes_used, gone.fs), (0, None));
    }

    #[test]
    fn scanner_measures_stale_dirs_within_the_budget_and_forgets_unwanted_ones() {
        let t = TempDir::new("scan");
        let dirs: Vec<PathBuf> = (0..3).map(|i| t.0.join(format!("d{i}"))).collect();
        for d in &dirs {
            fill(d, 9, 10);
        }
        let mut s = FsScanner::default();
        let now = Instant::now();
        // Each directory is 10 entries: a budget of 15 measures two.
        assert_eq!(s.scan(&dirs, now, 15), 20);
        assert_eq!(dirs.iter().filter(|d| s.get(d).is_some()).count(), 2);
        // The next tick takes the one left; the others are fresh.
        assert_eq!(s.scan(&dirs, now + Duration::from_secs(10), 15), 10);
        assert!(dirs.iter().all(|d| s.get(d).is_some()));
        assert_eq!(s.scan(&dirs, now + Duration::from_secs(20), 15), 0);
        // After the period, measured again, and a change is seen.
        fill(&dirs[0], 19, 10);
        s.scan(&dirs[..1], now + FS_PERIOD + Duration::from_secs(1), 100);
        assert_eq!(s.get(&dirs[0]).expect("measured").0.inodes_used, 20);
        assert!(s.get(&dirs[1]).is_none(), "no longer wanted");
    }
}
