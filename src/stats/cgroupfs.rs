//! Readers of one cgroup's figures from cgroupfs (v1 and v2), of the node's
//! `/proc/meminfo`, `/proc/vmstat`, `/proc/stat` and task limits, and of a filesystem's
//! `statvfs`: the raw samples the resource analyzer and the eviction manager are built on
//! (upstream reads them through cAdvisor, which reads them through runc's libcontainer).
//!
//! Figures follow cAdvisor's `setMemoryStats` and runc's `GetStats`:
//! - usage: v1 `memory.usage_in_bytes`, v2 `memory.current`;
//! - working set: usage − inactive file pages (v1 `memory.stat` `total_inactive_file`,
//!   v2 `inactive_file`), 0 when the inactive pages exceed the usage;
//! - RSS: v1 `total_rss` (`rss` without hierarchy), v2 `anon`;
//! - page faults: `pgfault`, `pgmajfault` of `memory.stat` (the cgroup's own on v1, as
//!   cAdvisor's `ContainerData`);
//! - cpu: v1 `cpuacct.usage` (ns), v2 `cpu.stat` `usage_usec` × 1000;
//! - pids: `pids.current` of the pids controller.
//!
//! The v2 root cgroup has no `memory.current`: as runc's `rootStatsFromMeminfo`, the
//! node's figures there come from `/proc/meminfo` (usage = MemTotal − MemFree) and
//! `/proc/vmstat` ([`CgroupFs::node_memory`]).
//!
//! A cgroup is named by its path from the hierarchy's root (`/`, `/docker/<id>`,
//! `/kubepods/burstable/pod<uid>`), as `/proc/<pid>/cgroup` prints it. Every reader is
//! one or two small reads of kernel files; nothing here blocks for long or keeps state.
//! The file is over 800 lines because half of it is the tests on fake v1 and v2 trees.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Kernel pseudo-files here are small; a file larger than this is not a cgroup file.
pub(super) const MAX_FILE: u64 = 256 * 1024;
/// The room a small file is read into at once (see [`read_small`]): more than a
/// `memory.stat` (~1 KiB on v1, ~2 KiB on v2) or `/proc/meminfo`.
pub(super) const READ_AHEAD: usize = 4096;

/// cAdvisor's `isMemoryUnlimited`: a limit above 2^62 bytes means "no limit" (v1 prints
/// `PAGE_COUNTER_MAX` pages, 9223372036854771712 on 4 KiB pages).
const UNLIMITED_ABOVE: u64 = 1 << 62;

/// `USER_HZ`: the unit of `/proc/stat`'s times, 100 on every Linux architecture.
const USER_HZ: u64 = 100;

/// Why a figure could not be read: the file and what went wrong.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SampleError {
    /// Opening or reading a file, or `statvfs` of a path, failed.
    #[error("reading {path}: {source}")]
    Io {
        /// The file or path.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The file did not hold what it should.
    #[error("reading {path}: {detail}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What was missing or malformed.
        detail: String,
    },
}

impl SampleError {
    #[cfg(test)]
    /// True when the file or cgroup does not exist (a container gone between a listing
    /// and the read, a controller not mounted).
    pub(crate) fn is_not_found(&self) -> bool {
        matches!(self, SampleError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

/// Which cgroup hierarchy the node has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CgroupVersion {
    /// One hierarchy per controller (`/sys/fs/cgroup/memory/...`).
    V1,
    /// The unified hierarchy (`/sys/fs/cgroup/...`, `cgroup.controllers` at its root).
    V2,
}

/// One cgroup's memory figures, in bytes and counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct MemoryStats {
    /// Total usage (page cache included).
    pub usage_bytes: u64,
    /// Usage minus inactive file pages: what the kernel cannot easily reclaim; the
    /// figure OOM kills and evictions are decided on.
    pub working_set_bytes: u64,
    /// Anonymous memory and swap cache.
    pub rss_bytes: u64,
    /// Inactive file pages (what was taken off the usage for the working set).
    pub inactive_file_bytes: u64,
    /// Page faults.
    pub page_faults: u64,
    /// Major page faults.
    pub major_page_faults: u64,
    /// The memory limit; `None` when unlimited.
    pub limit_bytes: Option<u64>,
}

/// One cgroup's cumulative CPU time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CpuStats {
    /// CPU time used by the cgroup's tasks since it was made, in nanoseconds.
    pub usage_core_nanoseconds: u64,
}

/// The node's `/proc/meminfo`, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct MemInfo {
    /// `MemTotal`.
    pub total_bytes: u64,
    /// `MemFree`.
    pub free_bytes: u64,
    /// `MemAvailable` (`None` on kernels before 3.14).
    pub available_bytes: Option<u64>,
    /// `Inactive(file)`.
    pub inactive_file_bytes: u64,
    /// `AnonPages`.
    pub anon_bytes: u64,
}

/// A filesystem's size and use, from `statvfs(2)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FsStats {
    /// Total size (`f_blocks × f_frsize`).
    pub capacity_bytes: u64,
    /// Space available to unprivileged users (`f_bavail × f_frsize`), as upstream.
    pub available_bytes: u64,
    /// Space used (`(f_blocks − f_bfree) × f_frsize`).
    pub used_bytes: u64,
    /// Total inodes (`f_files`).
    pub inodes: u64,
    /// Free inodes (`f_ffree`).
    pub inodes_free: u64,
    /// Inodes in use.
    pub inodes_used: u64,
}

/// The node's task limit and task count (upstream's `pidlimit.Stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Rlimit {
    /// min(`kernel.pid_max`, `kernel.threads-max`).
    pub max_pid: Option<i64>,
    /// Tasks (threads) on the node: the fourth field of `/proc/loadavg` after its `/`.
    pub running_processes: Option<i64>,
}

/// The cgroup filesystem of one node: where it is mounted and which version it is.
#[derive(Clone, Debug)]
pub(crate) struct CgroupFs {
    root: PathBuf,
    version: CgroupVersion,
    /// v1: the cpuacct controller's directory, found on first use.
    cpuacct: OnceLock<PathBuf>,
}

impl CgroupFs {
    /// The hierarchy at `root`, of the version given (tests build fake trees).
    pub(crate) fn new(root: impl Into<PathBuf>, version: CgroupVersion) -> CgroupFs {
        CgroupFs {
            root: root.into(),
            version,
            cpuacct: OnceLock::new(),
        }
    }

    /// The hierarchy at `root`: v2 when `cgroup.controllers` is at its root, else v1
    /// (a hybrid mount, v1 controllers with `unified/` beside them, is v1, as runc's
    /// `IsCgroup2UnifiedMode`).
    pub(crate) fn detect(root: impl Into<PathBuf>) -> CgroupFs {
        let root = root.into();
        let version = if root.join("cgroup.controllers").exists() {
            CgroupVersion::V2
        } else {
            CgroupVersion::V1
        };
        CgroupFs::new(root, version)
    }

    /// The node's hierarchy at `/sys/fs/cgroup`.
    pub(crate) fn host() -> CgroupFs {
        CgroupFs::detect("/sys/fs/cgroup")
    }

    /// Which version the hierarchy is.
    pub(crate) fn version(&self) -> CgroupVersion {
        self.version
    }

    /// Where the hierarchy is mounted.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// The directory of `cgroup` in `controller`'s hierarchy (v1) or the unified one.
    fn dir(&self, controller: &str, cgroup: &str) -> PathBuf {
        let rel = cgroup.trim_start_matches('/');
        match self.version {
            CgroupVersion::V1 if controller == "cpuacct" => self
                .cpuacct
                .get_or_init(|| {
                    // Some distributions mount the pair as one `cpu,cpuacct` directory
                    // without the `cpuacct` link. Looked up once: it was a `stat` for
                    // every container every tick.
                    let base = self.root.join(controller);
                    if base.exists() {
                        base
                    } else {
                        self.root.join("cpu,cpuacct")
                    }
                })
                .join(rel),
            CgroupVersion::V1 => self.root.join(controller).join(rel),
            CgroupVersion::V2 => self.root.join(rel),
        }
    }

    /// Whether `cgroup` exists (its memory directory, v1, or its directory, v2).
    pub(crate) fn exists(&self, cgroup: &str) -> bool {
        self.dir("memory", cgroup).is_dir()
    }

    /// `cgroup`'s memory figures.
    pub(crate) fn memory(&self, cgroup: &str) -> Result<MemoryStats, SampleError> {
        let mut m = self.memory_usage(cgroup)?;
        m.limit_bytes = self.memory_limit(cgroup);
        Ok(m)
    }

    /// `cgroup`'s memory limit (`None`: unlimited or unreadable).
    pub(crate) fn memory_limit(&self, cgroup: &str) -> Option<u64> {
        let dir = self.dir("memory", cgroup);
        let limit = match self.version {
            CgroupVersion::V1 => read_u64(&dir.join("memory.limit_in_bytes")).ok(),
            CgroupVersion::V2 => read_small(&dir.join("memory.max"))
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok()),
        };
        limit.filter(|l| *l <= UNLIMITED_ABOVE)
    }

    /// `cgroup`'s memory figures without its limit (`limit_bytes: None`): one file
    /// fewer for samplers that read the limit less often than the usage.
    pub(crate) fn memory_usage(&self, cgroup: &str) -> Result<MemoryStats, SampleError> {
        self.memory_usage_from(&mut OpenEachTime, cgroup)
    }

    /// [`CgroupFs::memory_usage`], its files read through `files`.
    pub(crate) fn memory_usage_from(
        &self,
        files: &mut impl KernelFiles,
        cgroup: &str,
    ) -> Result<MemoryStats, SampleError> {
        let dir = self.dir("memory", cgroup);
        match self.version {
            CgroupVersion::V1 => {
                let usage = read_u64_from(files, &dir.join("memory.usage_in_bytes"))?;
                let stat = files.read(&dir.join("memory.stat"))?;
                let [total_inactive, inactive, total_rss, rss, faults, major] = flat_keys(
                    &stat,
                    [
                        "total_inactive_file",
                        "inactive_file",
                        "total_rss",
                        "rss",
                        "pgfault",
                        "pgmajfault",
                    ],
                );
                let inactive = total_inactive.or(inactive).unwrap_or(0);
                Ok(MemoryStats {
                    usage_bytes: usage,
                    working_set_bytes: usage.saturating_sub(inactive),
                    rss_bytes: total_rss.or(rss).unwrap_or(0),
                    inactive_file_bytes: inactive,
                    page_faults: faults.unwrap_or(0),
                    major_page_faults: major.unwrap_or(0),
                    limit_bytes: None,
                })
            }
            CgroupVersion::V2 => {
                let usage = read_u64_from(files, &dir.join("memory.current"))?;
                let stat = files.read(&dir.join("memory.stat"))?;
                let [inactive, anon, faults, major] =
                    flat_keys(&stat, ["inactive_file", "anon", "pgfault", "pgmajfault"]);
                let inactive = inactive.unwrap_or(0);
                Ok(MemoryStats {
                    usage_bytes: usage,
                    working_set_bytes: usage.saturating_sub(inactive),
                    rss_bytes: anon.unwrap_or(0),
                    inactive_file_bytes: inactive,
                    page_faults: faults.unwrap_or(0),
                    major_page_faults: major.unwrap_or(0),
                    limit_bytes: None,
                })
            }
        }
    }

    /// `cgroup`'s cumulative CPU time.
    pub(crate) fn cpu(&self, cgroup: &str) -> Result<CpuStats, SampleError> {
        self.cpu_from(&mut OpenEachTime, cgroup)
    }

    /// [`CgroupFs::cpu`], its file read through `files`.
    pub(crate) fn cpu_from(
        &self,
        files: &mut impl KernelFiles,
        cgroup: &str,
    ) -> Result<CpuStats, SampleError> {
        match self.version {
            CgroupVersion::V1 => {
                let path = self.dir("cpuacct", cgroup).join("cpuacct.usage");
                let ns = read_u64_from(files, &path)?;
                Ok(CpuStats {
                    usage_core_nanoseconds: ns,
                })
            }
            CgroupVersion::V2 => {
                let path = self.dir("cpu", cgroup).join("cpu.stat");
                let text = files.read(&path)?;
                let usec = flat_key(&text, "usage_usec").ok_or_else(|| SampleError::Parse {
                    path,
                    detail: "no usage_usec".to_string(),
                })?;
                Ok(CpuStats {
                    usage_core_nanoseconds: usec.saturating_mul(1000),
                })
            }
        }
    }

    /// The number of tasks in `cgroup` (`pids.current`).
    pub(crate) fn pids(&self, cgroup: &str) -> Result<u64, SampleError> {
        read_u64(&self.dir("pids", cgroup).join("pids.current"))
    }

    /// The node's memory: the root cgroup's on v1 (as cAdvisor's root container), and on
    /// v2, where the root has no `memory.current`, runc's figures from `/proc/meminfo`
    /// and `/proc/vmstat` under `proc_root`. The limit is the node's memory either way.
    pub(crate) fn node_memory(&self, proc_root: &Path) -> Result<MemoryStats, SampleError> {
        let meminfo = read_meminfo(&proc_root.join("meminfo"))?;
        match self.version {
            CgroupVersion::V1 => {
                let mut m = self.memory("/")?;
                m.limit_bytes = Some(meminfo.total_bytes);
                Ok(m)
            }
            CgroupVersion::V2 => {
                let usage = meminfo.total_bytes.saturating_sub(meminfo.free_bytes);
                let vmstat = read_small(&proc_root.join("vmstat")).unwrap_or_default();
                let get = |k: &str| flat_key(&vmstat, k).unwrap_or(0);
                Ok(MemoryStats {
                    usage_bytes: usage,
                    working_set_bytes: usage.saturating_sub(meminfo.inactive_file_bytes),
                    rss_bytes: meminfo.anon_bytes,
                    inactive_file_bytes: meminfo.inactive_file_bytes,
                    page_faults: get("pgfault"),
                    major_page_faults: get("pgmajfault"),
                    limit_bytes: Some(meminfo.total_bytes),
                })
            }
        }
    }

    /// The node's cumulative CPU time: the root cgroup's (`cpuacct.usage` on v1, the
    /// root `cpu.stat` on v2), or the busy time of `/proc/stat` under `proc_root` where
    /// the root has none (v2 kernels before 5.8).
    pub(crate) fn node_cpu(&self, proc_root: &Path) -> Result<CpuStats, SampleError> {
        match self.cpu("/") {
            Ok(c) => Ok(c),
            Err(_) => read_proc_stat_cpu(&proc_root.join("stat")),
        }
    }
}

/// The cgroup path of `controller`'s hierarchy in a `/proc/<pid>/cgroup` text: the v1
/// line naming the controller (`4:memory:/docker/<id>`, also in a comma list), or the
/// v2 line (`0::/system.slice/docker-<id>.scope`).
pub(crate) fn parse_proc_cgroup(text: &str, version: CgroupVersion) -> Option<String> {
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let wanted = match version {
            CgroupVersion::V2 => controllers.is_empty(),
            CgroupVersion::V1 => controllers.split(',').any(|c| c == "memory"),
        };
        if wanted {
            return Some(path.to_string());
        }
    }
    None
}

/// The memory cgroup (v1) or unified cgroup (v2) of process `pid`, from
/// `<proc_root>/<pid>/cgroup`.
pub(crate) fn cgroup_of_pid(
    proc_root: &Path,
    pid: u32,
    version: CgroupVersion,
) -> Result<String, SampleError> {
    let path = proc_root.join(pid.to_string()).join("cgroup");
    let text = read_small(&path)?;
    parse_proc_cgroup(&text, version).ok_or_else(|| SampleError::Parse {
        path,
        detail: format!("no {version:?} cgroup line"),
    })
}

/// Parses `/proc/meminfo` text (values in kB).
pub(crate) fn parse_meminfo(text: &str) -> MemInfo {
    let get = |key: &str| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            if k.trim() != key {
                return None;
            }
            let kb = v.trim().trim_end_matches("kB").trim().parse::<u64>().ok()?;
            Some(kb.saturating_mul(1024))
        })
    };
    MemInfo {
        total_bytes: get("MemTotal").unwrap_or(0),
        free_bytes: get("MemFree").unwrap_or(0),
        available_bytes: get("MemAvailable"),
        inactive_file_bytes: get("Inactive(file)").unwrap_or(0),
        anon_bytes: get("AnonPages").unwrap_or(0),
    }
}

/// Reads `/proc/meminfo` (or a fake at `path`); an error when it has no `MemTotal`.
pub(crate) fn read_meminfo(path: &Path) -> Result<MemInfo, SampleError> {
    let m = parse_meminfo(&read_small(path)?);
    if m.total_bytes == 0 {
        return Err(SampleError::Parse {
            path: path.to_path_buf(),
            detail: "no MemTotal".to_string(),
        });
    }
    Ok(m)
}

/// The node's busy CPU time from `/proc/stat` text: the `cpu` line's user, nice,
/// system, irq, softirq and steal ticks (idle and iowait left out), in nanoseconds.
pub(crate) fn parse_proc_stat_cpu(text: &str) -> Option<CpuStats> {
    let line = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some("cpu"))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse::<u64>().unwrap_or(0))
        .collect();
    if f.len() < 4 {
        return None;
    }
    // user nice system idle iowait irq softirq steal …
    let busy = [0usize, 1, 2, 5, 6, 7]
        .iter()
        .filter_map(|i| f.get(*i))
        .fold(0u64, |a, v| a.saturating_add(*v));
    Some(CpuStats {
        usage_core_nanoseconds: busy.saturating_mul(1_000_000_000 / USER_HZ),
    })
}

/// Reads the node's busy CPU time from `/proc/stat` (or a fake at `path`).
pub(crate) fn read_proc_stat_cpu(path: &Path) -> Result<CpuStats, SampleError> {
    parse_proc_stat_cpu(&read_small(path)?).ok_or_else(|| SampleError::Parse {
        path: path.to_path_buf(),
        detail: "no cpu line".to_string(),
    })
}

/// The node's task limit and count under `proc_root` (upstream's `pidlimit.Stats`:
/// min of `pid_max` and `threads-max`, the task count of `/proc/loadavg`). A figure that
/// cannot be read is `None`.
pub(crate) fn read_rlimit(proc_root: &Path) -> Rlimit {
    let max_pid = ["sys/kernel/pid_max", "sys/kernel/threads-max"]
        .iter()
        .filter_map(|f| read_small(&proc_root.join(f)).ok())
        .filter_map(|s| s.trim().parse::<i64>().ok())
        .min();
    let running_processes = read_small(&proc_root.join("loadavg"))
        .ok()
        .and_then(|s| parse_loadavg_tasks(&s));
    Rlimit {
        max_pid,
        running_processes,
    }
}

/// The task count of a `/proc/loadavg` text (`0.20 0.18 0.12 1/80 11206` → 80).
pub(crate) fn parse_loadavg_tasks(text: &str) -> Option<i64> {
    let field = text.split_whitespace().nth(3)?;
    field.split_once('/')?.1.parse().ok()
}

/// `statvfs(2)` of `path`: the size and use of the filesystem holding it.
pub(crate) fn statvfs(path: &Path) -> Result<FsStats, SampleError> {
    let io_err = |source| SampleError::Io {
        path: path.to_path_buf(),
        source,
    };
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| io_err(io::Error::from(io::ErrorKind::InvalidInput)))?;
    let s = rustix::fs::statvfs(c.as_c_str()).map_err(|e| io_err(e.into()))?;
    let (blocks, bfree, bavail, frsize, files, ffree) = (
        s.f_blocks, s.f_bfree, s.f_bavail, s.f_frsize, s.f_files, s.f_ffree,
    );
    Ok(FsStats {
        capacity_bytes: blocks.saturating_mul(frsize),
        available_bytes: bavail.saturating_mul(frsize),
        used_bytes: blocks.saturating_sub(bfree).saturating_mul(frsize),
        inodes: files,
        inodes_free: ffree,
        inodes_used: files.saturating_sub(ffree),
    })
}

/// A value of a flat-keyed file (`memory.stat`, `cpu.stat`, `/proc/vmstat`: `key value`
/// lines).
fn flat_key(text: &str, key: &str) -> Option<u64> {
    let [v] = flat_keys(text, [key]);
    v
}

/// The values of `keys` in a flat-keyed file, in one pass over its lines (the first
/// line of each key counts): `memory.stat` is read for every container every tick.
fn flat_keys<const N: usize>(text: &str, keys: [&str; N]) -> [Option<u64>; N] {
    let mut out = [None; N];
    let mut left = N;
    for l in text.lines() {
        let Some((k, v)) = l.split_once(' ') else {
            continue;
        };
        if let Some(i) = keys.iter().position(|key| *key == k) {
            if out[i].is_none() {
                out[i] = v.trim().parse::<u64>().ok();
                left -= 1;
                if left == 0 {
                    break;
                }
            }
        }
    }
    out
}

/// A small kernel file's text, at most [`MAX_FILE`] bytes. Read into [`READ_AHEAD`]
/// bytes of room from the start: a kernel file has no size to go by, and from an empty
/// buffer the standard library probes with a 32-byte read and grows, ~6 `read(2)`s for
/// a v1 `memory.stat`; with room, two (the text, then the end).
fn read_small(path: &Path) -> Result<String, SampleError> {
    let io_err = |source| SampleError::Io {
        path: path.to_path_buf(),
        source,
    };
    let f = File::open(path).map_err(io_err)?;
    let mut text = String::with_capacity(READ_AHEAD);
    f.take(MAX_FILE).read_to_string(&mut text).map_err(io_err)?;
    Ok(text)
}

/// Where a sampler's kernel files are read from: opened for each read
/// ([`OpenEachTime`]), or kept open between samples
/// ([`super::openfiles::OpenFiles`]).
pub(crate) trait KernelFiles {
    /// `path`'s text, at most [`MAX_FILE`] bytes.
    fn read(&mut self, path: &Path) -> Result<String, SampleError>;
}

/// Each file opened, read and closed (what the one-off readers use).
#[derive(Debug, Default)]
pub(crate) struct OpenEachTime;

impl KernelFiles for OpenEachTime {
    fn read(&mut self, path: &Path) -> Result<String, SampleError> {
        read_small(path)
    }
}

/// A file holding one unsigned number.
fn read_u64(path: &Path) -> Result<u64, SampleError> {
    read_u64_from(&mut OpenEachTime, path)
}

/// A file holding one unsigned number, read through `files`.
fn read_u64_from(files: &mut impl KernelFiles, path: &Path) -> Result<u64, SampleError> {
    let text = files.read(path)?;
    text.trim().parse::<u64>().map_err(|e| SampleError::Parse {
        path: path.to_path_buf(),
        detail: format!("{:?} is not a number: {e}", text.trim()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use base::testutil::TempDir;
    use std::fs;

    fn put(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().expect("read")).expect("read");
        fs::write(p, text).expect("read");
    }

    const V1_STAT: &str = "cache 1000\nrss 300\npgfault 77\npgmajfault 3\ninactive_file 10\n\
        total_cache 5000\ntotal_rss 4000\ntotal_pgfault 999\ntotal_inactive_file 2000\n";

    fn v1_tree() -> TempDir {
        let t = TempDir::new("cg-v1");
        let c = "docker/abc";
        put(
            &t.0,
            &format!("memory/{c}/memory.usage_in_bytes"),
            "10000\n",
        );
        put(&t.0, &format!("memory/{c}/memory.stat"), V1_STAT);
        put(
            &t.0,
            &format!("memory/{c}/memory.limit_in_bytes"),
            "9223372036854771712\n",
        );
        put(&t.0, &format!("cpuacct/{c}/cpuacct.usage"), "123456789\n");
        put(&t.0, &format!("pids/{c}/pids.current"), "4\n");
        put(&t.0, "memory/memory.usage_in_bytes", "80000\n");
        put(
            &t.0,
            "memory/memory.stat",
            "total_inactive_file 30000\ntotal_rss 100\n",
        );
        put(&t.0, "cpuacct/cpuacct.usage", "999\n");
        t
    }

    fn v2_tree() -> TempDir {
        let t = TempDir::new("cg-v2");
        put(&t.0, "cgroup.controllers", "cpu memory pids\n");
        let c = "system.slice/docker-abc.scope";
        put(&t.0, &format!("{c}/memory.current"), "10000\n");
        put(
            &t.0,
            &format!("{c}/memory.stat"),
            "anon 4000\nfile 5000\ninactive_file 2500\npgfault 88\npgmajfault 2\n",
        );
        put(&t.0, &format!("{c}/memory.max"), "1048576\n");
        put(
            &t.0,
            &format!("{c}/cpu.stat"),
            "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n",
        );
        put(&t.0, &format!("{c}/pids.current"), "7\n");
        t
    }

    fn proc_tree() -> TempDir {
        let t = TempDir::new("proc");
        put(
            &t.0,
            "meminfo",
            "MemTotal:        1000 kB\nMemFree:          200 kB\nMemAvailable:     600 kB\n\
             AnonPages:        150 kB\nInactive(file):   300 kB\n",
        );
        put(
            &t.0,
            "vmstat",
            "nr_free_pages 1\npgfault 5000\npgmajfault 40\n",
        );
        put(
            &t.0,
            "stat",
            "cpu  100 5 50 9000 20 1 2 3 0 0\ncpu0 100 5 50 9000 20 1 2 3 0 0\n",
        );
        put(&t.0, "loadavg", "0.20 0.18 0.12 1/80 11206\n");
        put(&t.0, "sys/kernel/pid_max", "4194304\n");
        put(&t.0, "sys/kernel/threads-max", "63000\n");
        put(
            &t.0,
            "42/cgroup",
            "12:pids:/docker/abc\n4:cpu,memory:/docker/abc\n0::/\n",
        );
        t
    }

    #[test]
    fn flat_keys_reads_each_keys_first_line_in_one_pass() {
        let text = "cache 1\nrss 2\nrss 9\nbad\nswap x\ntotal_rss 3\n";
        assert_eq!(
            flat_keys(text, ["total_rss", "rss", "swap", "absent"]),
            [Some(3), Some(2), None, None]
        );
        assert_eq!(flat_key(text, "cache"), Some(1));
    }

    #[test]
    fn detects_the_version_from_the_root() {
        assert_eq!(CgroupFs::detect(&v1_tree().0).version(), CgroupVersion::V1);
        assert_eq!(CgroupFs::detect(&v2_tree().0).version(), CgroupVersion::V2);
    }

    #[test]
    fn v1_memory_takes_hierarchical_rss_and_inactive_file() {
        let t = v1_tree();
        let cg = CgroupFs::new(&t.0, CgroupVersion::V1);
        let m = cg.memory("/docker/abc").expect("read");
        assert_eq!(
            m,
            MemoryStats {
                usage_bytes: 10000,
                working_set_bytes: 8000,
                rss_bytes: 4000,
                inactive_file_bytes: 2000,
                page_faults: 77,
                major_page_faults: 3,
                limit_bytes: None,
            }
        );
        assert!(cg.exists("/docker/abc"));
        assert!(!cg.exists("/docker/gone"));
    }

    #[test]
    fn v1_cpu_and_pids() {
        let t = v1_tree();
        let cg = CgroupFs::new(&t.0, CgroupVersion::V1);
        assert_eq!(
            cg.cpu("/docker/abc").expect("read").usage_core_nanoseconds,
            123456789
        );
        assert_eq!(cg.pids("/docker/abc").expect("read"), 4);
    }

    #[test]
    fn v1_cpuacct_under_a_combined_mount() {
        let t = TempDir::new("cg-v1c");
        put(&t.0, "cpu,cpuacct/docker/x/cpuacct.usage", "55\n");
        let cg = CgroupFs::new(&t.0, CgroupVersion::V1);
        assert_eq!(
            cg.cpu("/docker/x").expect("read").usage_core_nanoseconds,
            55
        );
    }

    #[test]
    fn v2_memory_cpu_pids() {
        let t = v2_tree();
        let cg = CgroupFs::new(&t.0, CgroupVersion::V2);
        let c = "/system.slice/docker-abc.scope";
        let m = cg.memory(c).expect("read");
        assert_eq!(
            m,
            MemoryStats {
                usage_bytes: 10000,
                working_set_bytes: 7500,
                rss_bytes: 4000,
                inactive_file_bytes: 2500,
                page_faults: 88,
                major_page_faults: 2,
                limit_bytes: Some(1048576),
            }
        );
        assert_eq!(cg.cpu(c).expect("read").usage_core_nanoseconds, 1_500_000);
        assert_eq!(cg.pids(c).expect("read"), 7);
    }

    #[test]
    fn v2_max_is_unlimited_and_working_set_never_negative() {
        let t = v2_tree();
        let c = "system.slice/docker-abc.scope";
        put(&t.0, &format!("{c}/memory.max"), "max\n");
        put(&t.0, &format!("{c}/memory.stat"), "inactive_file 20000\n");
        let m = CgroupFs::new(&t.0, CgroupVersion::V2)
            .memory(c)
            .expect("read");
        assert_eq!(m.limit_bytes, None);
        assert_eq!(m.working_set_bytes, 0);
    }

    #[test]
    fn a_missing_cgroup_is_not_found() {
        let t = v2_tree();
        let cg = CgroupFs::new(&t.0, CgroupVersion::V2);
        let e = cg.memory("/gone").expect_err("an error");
        assert!(e.is_not_found(), "{e}");
        assert!(e.to_string().contains("gone/memory.current"), "{e}");
        put(&t.0, "bad/memory.current", "lots\n");
        put(&t.0, "bad/memory.stat", "");
        let e = cg.memory("/bad").expect_err("an error");
        assert!(!e.is_not_found());
        assert!(e.to_string().contains("not a number"), "{e}");
    }

    #[test]
    fn node_memory_v1_is_the_root_cgroup_with_the_machine_limit() {
        let (t, p) = (v1_tree(), proc_tree());
        let m = CgroupFs::new(&t.0, CgroupVersion::V1)
            .node_memory(&p.0)
            .expect("read");
        assert_eq!(m.usage_bytes, 80000);
        assert_eq!(m.working_set_bytes, 50000);
        assert_eq!(m.limit_bytes, Some(1000 * 1024));
    }

    #[test]
    fn node_memory_v2_comes_from_meminfo_and_vmstat() {
        let (t, p) = (v2_tree(), proc_tree());
        let m = CgroupFs::new(&t.0, CgroupVersion::V2)
            .node_memory(&p.0)
            .expect("read");
        assert_eq!(
            m,
            MemoryStats {
                usage_bytes: 800 * 1024,
                working_set_bytes: 500 * 1024,
                rss_bytes: 150 * 1024,
                inactive_file_bytes: 300 * 1024,
                page_faults: 5000,
                major_page_faults: 40,
                limit_bytes: Some(1000 * 1024),
            }
        );
    }

    #[test]
    fn node_cpu_falls_back_to_proc_stat() {
        let (t, p) = (v2_tree(), proc_tree());
        let cg = CgroupFs::new(&t.0, CgroupVersion::V2);
        // user 100 + nice 5 + system 50 + irq 1 + softirq 2 + steal 3 = 161 ticks.
        assert_eq!(
            cg.node_cpu(&p.0).expect("read").usage_core_nanoseconds,
            161 * 10_000_000
        );
        put(&t.0, "cpu.stat", "usage_usec 7\n");
        assert_eq!(
            cg.node_cpu(&p.0).expect("read").usage_core_nanoseconds,
            7000
        );
        let v1 = v1_tree();
        let cg = CgroupFs::new(&v1.0, CgroupVersion::V1);
        assert_eq!(cg.node_cpu(&p.0).expect("read").usage_core_nanoseconds, 999);
    }

    #[test]
    fn meminfo_rlimit_and_loadavg() {
        let p = proc_tree();
        let m = read_meminfo(&p.0.join("meminfo")).expect("read");
        assert_eq!(m.available_bytes, Some(600 * 1024));
        assert_eq!(m.free_bytes, 200 * 1024);
        assert!(read_meminfo(&p.0.join("vmstat")).is_err());
        assert_eq!(
            read_rlimit(&p.0),
            Rlimit {
                max_pid: Some(63000),
                running_processes: Some(80),
            }
        );
        assert_eq!(parse_loadavg_tasks("garbage"), None);
    }

    #[test]
    fn proc_cgroup_lines() {
        let p = proc_tree();
        assert_eq!(
            cgroup_of_pid(&p.0, 42, CgroupVersion::V1).expect("read"),
            "/docker/abc"
        );
        assert_eq!(
            cgroup_of_pid(&p.0, 42, CgroupVersion::V2).expect("read"),
            "/"
        );
        assert!(cgroup_of_pid(&p.0, 43, CgroupVersion::V1)
            .expect_err("an error")
            .is_not_found());
        assert_eq!(
            parse_proc_cgroup("1:name=systemd:/x\n", CgroupVersion::V1),
            None
        );
    }

    #[test]
    fn statvfs_of_a_real_directory() {
        let t = TempDir::new("statvfs");
        let s = statvfs(&t.0).expect("read");
        assert!(s.capacity_bytes > 0);
        assert!(s.available_bytes <= s.capacity_bytes);
        assert!(s.used_bytes <= s.capacity_bytes);
        assert!(statvfs(&t.0.join("missing"))
            .expect_err("an error")
            .is_not_found());
    }

    #[test]
    fn the_host_hierarchy_reads() {
        // Whatever this machine has, its root figures read.
        let cg = CgroupFs::host();
        let proc_root = Path::new("/proc");
        assert!(cg.node_memory(proc_root).expect("read").usage_bytes > 0);
        assert!(cg.node_cpu(proc_root).expect("read").usage_core_nanoseconds > 0);
    }
}
