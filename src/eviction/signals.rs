//! The node's eviction signals read from the kernel (upstream
//! `makeSignalObservations` over the summary; here straight from the stats module's
//! cgroupfs, procfs and statvfs readers, never Docker's stats API): `memory.available`
//! = MemTotal − the root cgroup's working set (usage − inactive file pages; on v2,
//! where the root has no `memory.current`, runc's figures from `/proc/meminfo`),
//! `nodefs.*` from statvfs of the kubelet's root directory, `imagefs.*` of Docker's
//! root directory, `pid.available` = min(`pid_max`, `threads-max`) − the tasks in
//! `/proc/loadavg`. Every path is a setting so unit tests read a fake tree.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::api::Signal;
use super::helpers::{Observation, Observations};
use crate::stats::cgroupfs::{read_rlimit, CgroupFs};

/// Where the signals are read.
#[derive(Clone, Debug)]
pub(crate) struct NodeSignals {
    /// The cgroup filesystem's mount (`/sys/fs/cgroup`).
    pub cgroup_root: PathBuf,
    /// procfs (`/proc`).
    pub proc_root: PathBuf,
    /// The kubelet's root directory (nodefs).
    pub root_dir: PathBuf,
    /// Docker's root directory (imagefs); None: not known, no imagefs signals.
    pub image_dir: Option<PathBuf>,
}

impl NodeSignals {
    /// The host's paths for these directories.
    pub(crate) fn host(root_dir: PathBuf, image_dir: Option<PathBuf>) -> Self {
        NodeSignals {
            cgroup_root: "/sys/fs/cgroup".into(),
            proc_root: "/proc".into(),
            root_dir,
            image_dir,
        }
    }

    /// Every signal that could be read now; one that fails is logged at debug and
    /// missing (its thresholds are then not met).
    pub(crate) fn observe(&self) -> Observations {
        let mut out = Observations::new();
        let now = Instant::now();
        let mut put = |s: Signal, v: Option<(i128, i128)>| {
            if let Some((available, capacity)) = v {
                out.insert(
                    s,
                    Observation {
                        available,
                        capacity,
                        time: now,
                    },
                );
            } else {
                log::debug!("eviction: no observation of {s}");
            }
        };
        put(Signal::MemoryAvailable, self.memory());
        let nodefs = statvfs(&self.root_dir);
        put(Signal::NodeFsAvailable, nodefs.map(|f| (f.avail, f.size)));
        put(
            Signal::NodeFsInodesFree,
            nodefs.map(|f| (f.inodes_free, f.inodes)),
        );
        // The containers' writable layers are on Docker's root directory (upstream's
        // summary gives a runtime without a container filesystem of its own its image
        // filesystem as `containerFs`); without one known, on the node's.
        let mut containerfs = nodefs;
        if let Some(dir) = &self.image_dir {
            let imagefs = statvfs(dir);
            put(Signal::ImageFsAvailable, imagefs.map(|f| (f.avail, f.size)));
            put(
                Signal::ImageFsInodesFree,
                imagefs.map(|f| (f.inodes_free, f.inodes)),
            );
            containerfs = imagefs;
        }
        put(
            Signal::ContainerFsAvailable,
            containerfs.map(|f| (f.avail, f.size)),
        );
        put(
            Signal::ContainerFsInodesFree,
            containerfs.map(|f| (f.inodes_free, f.inodes)),
        );
        put(Signal::PidAvailable, self.pids());
        out
    }

    /// (available, capacity) of memory.
    pub(crate) fn memory(&self) -> Option<(i128, i128)> {
        let m = CgroupFs::detect(&self.cgroup_root)
            .node_memory(&self.proc_root)
            .map_err(|e| log::debug!("eviction: node memory: {e}"))
            .ok()?;
        let total = i128::from(m.limit_bytes?);
        Some((total - i128::from(m.working_set_bytes), total))
    }

    /// (available, capacity) of the pods' memory (`allocatableMemory.available`): the
    /// `kubepods` cgroup's limit (node allocatable when enforced; `allocatable` when it
    /// has none) less its working set.
    pub(crate) fn pods_memory(&self, kubepods: &str, allocatable: i128) -> Option<(i128, i128)> {
        let m = CgroupFs::detect(&self.cgroup_root)
            .memory(kubepods)
            .map_err(|e| log::debug!("eviction: {kubepods} memory: {e}"))
            .ok()?;
        let capacity = m.limit_bytes.map_or(allocatable, i128::from);
        Some((capacity - i128::from(m.working_set_bytes), capacity))
    }

    /// Whether Docker's root directory is a filesystem of its own (a dedicated image
    /// filesystem, upstream `HasDedicatedImageFs`): another device than the root dir's.
    pub(crate) fn dedicated_image_fs(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        let Some(dir) = &self.image_dir else {
            return false;
        };
        match (fs::metadata(&self.root_dir), fs::metadata(dir)) {
            (Ok(a), Ok(b)) => a.dev() != b.dev(),
            _ => false,
        }
    }

    /// (available, capacity) of pids.
    pub(crate) fn pids(&self) -> Option<(i128, i128)> {
        let r = read_rlimit(&self.proc_root);
        let max = i128::from(r.max_pid?);
        Some((max - i128::from(r.running_processes?), max))
    }
}

/// A filesystem's figures (bytes and inodes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FsFigures {
    /// Bytes available to unprivileged users.
    pub avail: i128,
    /// Total bytes.
    pub size: i128,
    /// Free inodes.
    pub inodes_free: i128,
    /// Total inodes.
    pub inodes: i128,
}

/// statvfs(3) of `path`, as the signals use it.
pub(crate) fn statvfs(path: &Path) -> Option<FsFigures> {
    let f = crate::stats::cgroupfs::statvfs(path)
        .map_err(|e| log::debug!("eviction: {e}"))
        .ok()?;
    Some(FsFigures {
        avail: i128::from(f.available_bytes),
        size: i128::from(f.capacity_bytes),
        inodes_free: i128::from(f.inodes_free),
        inodes: i128::from(f.inodes),
    })
}

/// Bytes used under `dir` (regular files' allocated blocks, not following links), at
/// most `budget` entries visited so a huge volume cannot hold the loop: None when the
/// budget ran out or `dir` could not be read.
pub(crate) fn disk_usage(dir: &Path, budget: usize) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut stack = vec![dir.to_path_buf()];
    let mut left = budget;
    let mut total: u64 = 0;
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).ok()? {
            left = left.checked_sub(1)?;
            let Ok(entry) = entry else { continue };
            let Ok(meta) = entry.metadata() else { continue };
            total = total.saturating_add(meta.blocks().saturating_mul(512));
            if meta.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        fs::write(p, text).expect("write");
    }

    fn tree(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("rkubelet-eviction-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).expect("mkdir");
        d
    }

    const MEMINFO: &str = "MemTotal:        1048576 kB\nMemFree:          262144 kB\n\
                           MemAvailable:     524288 kB\nInactive(file):   131072 kB\n";

    #[test]
    fn memory_available_from_a_v1_tree() {
        let d = tree("v1");
        write(&d, "proc/meminfo", MEMINFO);
        write(&d, "cg/memory/memory.usage_in_bytes", "805306368\n");
        write(
            &d,
            "cg/memory/memory.stat",
            "cache 1\ninactive_file 9\ntotal_inactive_file 268435456\n",
        );
        write(&d, "proc/sys/kernel/pid_max", "4194304\n");
        write(&d, "proc/loadavg", "0.10 0.20 0.30 2/304 12345\n");
        let s = NodeSignals {
            cgroup_root: d.join("cg"),
            proc_root: d.join("proc"),
            root_dir: d.clone(),
            image_dir: None,
        };
        // 1 GiB − (768 MiB − 256 MiB).
        assert_eq!(s.memory(), Some((512 << 20, 1 << 30)));
        assert_eq!(s.pids(), Some((4_194_304 - 304, 4_194_304)));
        let o = s.observe();
        assert_eq!(o[&Signal::MemoryAvailable].available, 512 << 20);
        assert!(o[&Signal::NodeFsAvailable].capacity > 0);
        assert!(!o.contains_key(&Signal::ImageFsAvailable));
        // No image filesystem known: the containers' layers are on the node's.
        assert_eq!(
            o[&Signal::ContainerFsAvailable].capacity,
            o[&Signal::NodeFsAvailable].capacity
        );
        assert!(o.contains_key(&Signal::ContainerFsInodesFree));
        assert!(!s.dedicated_image_fs());
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn pods_memory_from_the_kubepods_cgroup() {
        let d = tree("pods");
        write(&d, "cg/memory/kp/memory.usage_in_bytes", "314572800\n");
        write(
            &d,
            "cg/memory/kp/memory.stat",
            "total_inactive_file 104857600\n",
        );
        let s = NodeSignals {
            cgroup_root: d.join("cg"),
            proc_root: d.join("proc"),
            root_dir: d.clone(),
            image_dir: Some(d.clone()),
        };
        // No limit on the cgroup: the allocatable given; working set 300 − 100 MiB.
        assert_eq!(
            s.pods_memory("/kp", 1 << 30),
            Some(((1 << 30) - (200 << 20), 1 << 30))
        );
        // Enforced allocatable: the cgroup's limit.
        write(&d, "cg/memory/kp/memory.limit_in_bytes", "536870912\n");
        assert_eq!(
            s.pods_memory("/kp", 1 << 30),
            Some(((512 << 20) - (200 << 20), 512 << 20))
        );
        assert_eq!(s.pods_memory("/missing", 1 << 30), None);
        // Docker's root on the same filesystem as the root dir.
        assert!(!s.dedicated_image_fs());
        let o = s.observe();
        assert_eq!(
            o[&Signal::ContainerFsAvailable].capacity,
            o[&Signal::ImageFsAvailable].capacity
        );
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn memory_available_from_a_v2_tree() {
        let d = tree("v2");
        write(&d, "proc/meminfo", MEMINFO);
        write(&d, "cg/cgroup.controllers", "cpu memory pids\n");
        write(
            &d,
            "cg/memory.stat",
            "anon 1\nfile 2\ninactive_file 134217728\n",
        );
        let s = NodeSignals {
            cgroup_root: d.join("cg"),
            proc_root: d.join("proc"),
            root_dir: d.clone(),
            image_dir: Some(d.clone()),
        };
        // working set = (1 GiB − 256 MiB) − 128 MiB = 640 MiB; available 384 MiB.
        assert_eq!(s.memory(), Some((384 << 20, 1 << 30)));
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn disk_usage_is_bounded() {
        let d = tree("du");
        write(&d, "a/b/file", &"x".repeat(10_000));
        write(&d, "a/other", "y");
        let used = disk_usage(&d, 100).expect("within budget");
        assert!(used >= 10_000, "{used}");
        assert_eq!(disk_usage(&d, 2), None);
        let _ = fs::remove_dir_all(&d);
    }
}
