//! The node's eviction signals read from the kernel (upstream
//! `makeSignalObservations` over the summary; here straight from cgroupfs, procfs and
//! statvfs, never Docker's stats API): `memory.available` = MemTotal − the root
//! cgroup's working set (usage − inactive file pages; v1 `memory.usage_in_bytes` and
//! `memory.stat`'s `total_inactive_file`, v2 — where the root has no `memory.current` —
//! MemTotal − MemFree and `memory.stat`'s `inactive_file`, as cAdvisor does),
//! `nodefs.*` from statvfs of the kubelet's root directory, `imagefs.*` of Docker's
//! root directory, `pid.available` = `pid_max` − the tasks in `/proc/loadavg`. Every
//! path is a setting so unit tests read a fake tree.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::api::Signal;
use super::helpers::{Observation, Observations};

/// Where the signals are read.
#[derive(Clone, Debug)]
pub struct NodeSignals {
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
    pub fn host(root_dir: PathBuf, image_dir: Option<PathBuf>) -> Self {
        NodeSignals {
            cgroup_root: "/sys/fs/cgroup".into(),
            proc_root: "/proc".into(),
            root_dir,
            image_dir,
        }
    }

    /// Every signal that could be read now; one that fails is logged at debug and
    /// missing (its thresholds are then not met).
    pub fn observe(&self) -> Observations {
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
        if let Some(dir) = &self.image_dir {
            let imagefs = statvfs(dir);
            put(Signal::ImageFsAvailable, imagefs.map(|f| (f.avail, f.size)));
            put(
                Signal::ImageFsInodesFree,
                imagefs.map(|f| (f.inodes_free, f.inodes)),
            );
        }
        put(Signal::PidAvailable, self.pids());
        out
    }

    /// (available, capacity) of memory.
    pub fn memory(&self) -> Option<(i128, i128)> {
        let meminfo = fs::read_to_string(self.proc_root.join("meminfo")).ok()?;
        let total = meminfo_field(&meminfo, "MemTotal")?;
        let v2 = self.cgroup_root.join("cgroup.controllers").exists();
        let working_set = if v2 {
            let free = meminfo_field(&meminfo, "MemFree")?;
            let stat = fs::read_to_string(self.cgroup_root.join("memory.stat")).ok()?;
            let inactive = stat_field(&stat, "inactive_file").unwrap_or(0);
            (total - free - inactive).max(0)
        } else {
            let dir = self.cgroup_root.join("memory");
            let usage: i128 = fs::read_to_string(dir.join("memory.usage_in_bytes"))
                .ok()?
                .trim()
                .parse()
                .ok()?;
            let stat = fs::read_to_string(dir.join("memory.stat")).ok()?;
            let inactive = stat_field(&stat, "total_inactive_file").unwrap_or(0);
            (usage - inactive).max(0)
        };
        Some((total - working_set, total))
    }

    /// (available, capacity) of pids.
    pub fn pids(&self) -> Option<(i128, i128)> {
        let max: i128 = fs::read_to_string(self.proc_root.join("sys/kernel/pid_max"))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let loadavg = fs::read_to_string(self.proc_root.join("loadavg")).ok()?;
        let tasks: i128 = loadavg
            .split_whitespace()
            .nth(3)?
            .split_once('/')?
            .1
            .parse()
            .ok()?;
        Some((max - tasks, max))
    }
}

/// A `/proc/meminfo` line's value in bytes (`MemTotal:  8025760 kB`).
pub fn meminfo_field(text: &str, name: &str) -> Option<i128> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(name)?.strip_prefix(':')?;
        let mut it = rest.split_whitespace();
        let n: i128 = it.next()?.parse().ok()?;
        Some(if it.next() == Some("kB") { n * 1024 } else { n })
    })
}

/// A `memory.stat` line's value (`total_inactive_file 1234`).
pub fn stat_field(text: &str, name: &str) -> Option<i128> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == name).then(|| v.trim().parse().ok()).flatten()
    })
}

/// A filesystem's figures (bytes and inodes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FsFigures {
    /// Bytes available to unprivileged users.
    pub avail: i128,
    /// Total bytes.
    pub size: i128,
    /// Free inodes.
    pub inodes_free: i128,
    /// Total inodes.
    pub inodes: i128,
}

/// statvfs(3) of `path`.
pub fn statvfs(path: &Path) -> Option<FsFigures> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut s = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `c` is a NUL-terminated path and `s` points to writable memory of the
    // struct's size; statvfs fills it on success only, which we check.
    let rc = unsafe { libc::statvfs(c.as_ptr(), s.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it initialised the struct.
    let s = unsafe { s.assume_init() };
    let frsize = i128::from(s.f_frsize);
    Some(FsFigures {
        avail: i128::from(s.f_bavail) * frsize,
        size: i128::from(s.f_blocks) * frsize,
        inodes_free: i128::from(s.f_ffree),
        inodes: i128::from(s.f_files),
    })
}

/// Bytes used under `dir` (regular files' allocated blocks, not following links), at
/// most `budget` entries visited so a huge volume cannot hold the loop: None when the
/// budget ran out or `dir` could not be read.
pub fn disk_usage(dir: &Path, budget: usize) -> Option<u64> {
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

/// A container's memory working set from cgroup v1 under Docker's cgroupfs parent
/// (`memory/docker/<id>`) or cgroup v2 (`docker/<id>`, or the systemd driver's
/// `system.slice/docker-<id>.scope`), in bytes.
pub fn container_working_set(cgroup_root: &Path, id: &str) -> Option<u64> {
    let v2 = cgroup_root.join("cgroup.controllers").exists();
    if v2 {
        for rel in [
            format!("docker/{id}"),
            format!("system.slice/docker-{id}.scope"),
        ] {
            let dir = cgroup_root.join(rel);
            let Ok(cur) = fs::read_to_string(dir.join("memory.current")) else {
                continue;
            };
            let usage: i128 = cur.trim().parse().ok()?;
            let stat = fs::read_to_string(dir.join("memory.stat")).ok()?;
            let inactive = stat_field(&stat, "inactive_file").unwrap_or(0);
            return u64::try_from((usage - inactive).max(0)).ok();
        }
        return None;
    }
    for rel in [
        format!("memory/docker/{id}"),
        format!("memory/system.slice/docker-{id}.scope"),
    ] {
        let dir = cgroup_root.join(rel);
        let Ok(u) = fs::read_to_string(dir.join("memory.usage_in_bytes")) else {
            continue;
        };
        let usage: i128 = u.trim().parse().ok()?;
        let stat = fs::read_to_string(dir.join("memory.stat")).ok()?;
        let inactive = stat_field(&stat, "total_inactive_file").unwrap_or(0);
        return u64::try_from((usage - inactive).max(0)).ok();
    }
    None
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
                           MemAvailable:     524288 kB\n";

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
        write(&d, "cg/docker/abc/memory.current", "1000\n");
        write(&d, "cg/docker/abc/memory.stat", "inactive_file 100\n");
        let s = NodeSignals {
            cgroup_root: d.join("cg"),
            proc_root: d.join("proc"),
            root_dir: d.clone(),
            image_dir: Some(d.clone()),
        };
        // working set = (1 GiB − 256 MiB) − 128 MiB = 640 MiB; available 384 MiB.
        assert_eq!(s.memory(), Some((384 << 20, 1 << 30)));
        assert_eq!(container_working_set(&d.join("cg"), "abc"), Some(900));
        assert_eq!(container_working_set(&d.join("cg"), "nope"), None);
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn container_working_set_v1() {
        let d = tree("v1c");
        write(&d, "memory/docker/abc/memory.usage_in_bytes", "5000\n");
        write(
            &d,
            "memory/docker/abc/memory.stat",
            "total_inactive_file 1000\n",
        );
        assert_eq!(container_working_set(&d, "abc"), Some(4000));
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

    #[test]
    fn meminfo_and_stat_fields() {
        assert_eq!(meminfo_field(MEMINFO, "MemTotal"), Some(1 << 30));
        assert_eq!(meminfo_field(MEMINFO, "Mem"), None);
        assert_eq!(stat_field("a 1\ntotal_a 2\n", "total_a"), Some(2));
    }
}
