//! The resource analyzer: the `stats` loop (upstream's cAdvisor housekeeping and
//! `pkg/kubelet/stats` providers, folded into one thread). Every tick it samples the
//! node and, while somebody reads them ([`INTEREST`]), every running pod and container
//! from cgroupfs and `/proc` (never Docker's stats API, which takes 1–2 s per
//! container), measures disk usage through the bounded [`FsScanner`], and publishes one
//! [`Snapshot`] the ports serve from ([`StatsProvider`]): a request samples nothing
//! itself; on a node nobody read, it wakes a tick and waits for it. Unread, a tick
//! lists nothing and measures only the disks of the pods the eviction manager checks
//! against an ephemeral-storage limit.
//!
//! The runtime is asked one container list per tick, an inspect of each container once
//! (its pid, log and layer directories, start time, image), and the image list once a
//! minute (the image filesystem's usage). A container's cgroup comes from
//! `/proc/<pid>/cgroup` of its main process, read once; so does its writable layer
//! when the runtime does not say it (CRI: the overlay `upperdir` at `/` in
//! `/proc/<pid>/mountinfo`). The same reads serve Docker and CRI runtimes: CRI's
//! `ListContainerStats` would cost a round trip and the runtime's own sampling, and
//! answers no pod cgroup, task count or network. A pod's figures are its pod
//! cgroup's when the container manager made one (a container's cgroup parent named
//! `pod<uid>`), else its containers' and sandbox's summed. Network figures are the
//! sandbox's `/proc/<pid>/net/dev` (the pod's network namespace); host-network pods
//! have none, as upstream.
//!
//! `usageNanoCores` is the CPU time between two samples of the same cgroup over the wall
//! time between them ([`nano_cores`]); the first sample of a cgroup has none.
//!
//! Cheap by design: per container and tick, three cgroup files (usage, `memory.stat`,
//! CPU); memory limits, task counts and sandboxes (a pause process) once a minute.
//! The file is over 800 lines because its one loop test builds a whole fake node.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use super::cgroupfs::{self, CgroupFs, CgroupVersion, FsStats as RawFs, KernelFiles};
use super::fsscan::{FsScanner, FS_PERIOD, TICK_BUDGET};
use super::openfiles::OpenFiles;
use super::summary::{
    cpu_stats, memory_stats, nano_cores, network_stats, node_fs, parent_pod_cgroup, parse_net_dev,
    root_upper_dir, sum_samples, usage_fs, volume_fs, CgroupSample,
};
use super::types::{
    ContainerStats, CpuStats, FsStats, NodeStats, PodReference, PodStats, ProcessStats,
    RlimitStats, RuntimeStats, Summary, VolumeStats,
};
use crate::pleg::PlegShared;
use base::loops::lock;
use base::time::k8s_time;
use runtime::container::labels;
use runtime::{ContainerState, Runtime, RuntimeError};

/// The sampling period: cAdvisor's housekeeping interval, which upstream's CPU rates
/// are computed over.
pub(crate) const STATS_PERIOD: Duration = Duration::from_secs(10);

/// Volume plugins whose directories are measured (those under
/// `<root>/pods/<uid>/volumes/`; hostPath and persistent volumes are not the pod's).
const MEASURED_PLUGINS: [&str; 5] = [
    "kubernetes.io~empty-dir",
    "kubernetes.io~configmap",
    "kubernetes.io~secret",
    "kubernetes.io~downward-api",
    "kubernetes.io~projected",
];

/// Where the analyzer looks.
#[derive(Clone, Debug)]
pub(crate) struct StatsConfig {
    /// The node's name (label filter and `nodeName`).
    pub node_name: String,
    /// `--root-dir`: nodefs, and the pods' volume directories.
    pub root_dir: PathBuf,
    /// `/proc` (tests point it at a fake tree).
    pub proc_root: PathBuf,
    /// The cgroup hierarchy.
    pub cgroups: CgroupFs,
    /// The PLEG, when one runs: the runtime is listed again only when it has seen a
    /// container change (or [`LIST_AT_LEAST`] passed), not at every tick.
    pub pleg: Option<Arc<PlegShared>>,
}

/// With a PLEG, the analyzer's own list of the runtime's containers still runs at
/// least this often (a safety net, as the evented PLEG's own relist).
pub(crate) const LIST_AT_LEAST: Duration = Duration::from_secs(60);

impl StatsConfig {
    /// The node's own: its name and root directory, `/proc`, `/sys/fs/cgroup`.
    pub(crate) fn new(cfg: &crate::config::KubeletConfig) -> StatsConfig {
        StatsConfig {
            node_name: cfg.node_name.clone(),
            root_dir: cfg.root_dir.clone(),
            proc_root: PathBuf::from("/proc"),
            cgroups: CgroupFs::host(),
            pleg: None,
        }
    }

    /// Lists the runtime only when `pleg` has seen a container change.
    pub(crate) fn with_pleg(mut self, pleg: Arc<PlegShared>) -> StatsConfig {
        self.pleg = Some(pleg);
        self
    }
}

/// What one tick produced: the summary and the cgroups behind it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Snapshot {
    /// The `/stats/summary` document.
    pub summary: Summary,
    /// Every sampled cgroup (node root, pod cgroups, containers, sandboxes), for
    /// `/metrics/cadvisor`.
    pub cgroups: Vec<CgroupSample>,
    /// The node's memory capacity (`machine_memory_bytes`).
    pub machine_memory_bytes: Option<u64>,
    /// When the tick ran; None before the first.
    pub time: Option<SystemTime>,
    /// Why the last tick could not sample the pods (the runtime's error).
    pub error: Option<String>,
    /// Whether the tick sampled the pods' cgroups and network counters and measured
    /// their disks: only while a reader wants them ([`StatsProvider::wanted`]).
    /// Without, only the pods with an ephemeral-storage limit carry figures, their disk
    /// figures ([`StatsProvider::want_disk`]).
    pub cgroups_sampled: bool,
}

/// How long after a reader's last request every tick goes on sampling the pods'
/// cgroups: longer than any usual scrape interval (metrics-server 15 s, Prometheus
/// 30–60 s), so a scraped node samples every [`STATS_PERIOD`] as cAdvisor does.
pub(crate) const INTEREST: Duration = Duration::from_secs(180);

/// How long a reader waits for the tick its request woke, on a node nobody read for
/// [`INTEREST`]. A tick at 110 pods takes ~10 ms; past this the reader gets the last
/// snapshot (the node's figures, not the pods').
pub(crate) const DEMAND_WAIT: Duration = Duration::from_secs(3);

/// The latest [`Snapshot`], shared with the ports and the eviction manager, and when
/// a reader last asked for the pods' cgroup figures.
#[derive(Debug, Default)]
pub(crate) struct StatsProvider {
    shared: Mutex<Shared>,
    published: Condvar,
    /// Runs a `stats` tick now (set by [`super::start`]; none in tests that tick by
    /// hand).
    wake: OnceLock<crossbeam_channel::Sender<()>>,
}

#[derive(Debug, Default)]
struct Shared {
    latest: Arc<Snapshot>,
    asked: Option<Instant>,
    /// The pods whose disk figures are measured while nobody reads the stats: those
    /// with an ephemeral-storage limit (the eviction manager's last pass).
    disk_wanted: HashSet<String>,
    /// Counts publications, so a reader knows a tick ran after its request.
    published: u64,
}

impl StatsProvider {
    /// The latest snapshot as it is (empty, `time: None`, before the first tick): the
    /// pods' figures are in it only while somebody reads them
    /// ([`StatsProvider::demand`]), but for the disk figures of the pods
    /// [`StatsProvider::want_disk`] names.
    pub(crate) fn latest(&self) -> Arc<Snapshot> {
        lock(&self.shared).latest.clone()
    }

    /// The snapshot a reader of the pods' CPU, memory and network figures wants (the
    /// ports, the eviction manager ranking pods): the latest when it has them; else,
    /// on a node nobody read for [`INTEREST`], the one of the tick this request wakes
    /// (waiting at most `wait`). Every call keeps the sampling on for [`INTEREST`].
    pub(crate) fn demand(&self, wait: Duration) -> Arc<Snapshot> {
        let mut g = lock(&self.shared);
        g.asked = Some(Instant::now());
        let Some(wake) = self.wake.get() else {
            return g.latest.clone();
        };
        if g.latest.cgroups_sampled {
            return g.latest.clone();
        }
        let seen = g.published;
        let _ = wake.try_send(());
        let deadline = Instant::now() + wait;
        while g.published == seen || !g.latest.cgroups_sampled {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            g = match self.published.wait_timeout(g, left) {
                Ok((g, _)) => g,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
        g.latest.clone()
    }

    /// Whether a reader asked within [`INTEREST`] of `now`: the tick samples the pods'
    /// cgroups.
    pub(crate) fn wanted(&self, now: Instant) -> bool {
        lock(&self.shared)
            .asked
            .is_some_and(|at| now.saturating_duration_since(at) < INTEREST)
    }

    /// Says which pods' disk figures (writable layer, logs, volumes) must be measured
    /// even while nobody reads the stats: the eviction manager's pods with an
    /// ephemeral-storage limit, at each of its passes.
    pub(crate) fn want_disk(&self, uids: HashSet<String>) {
        lock(&self.shared).disk_wanted = uids;
    }

    fn disk_wanted(&self) -> HashSet<String> {
        lock(&self.shared).disk_wanted.clone()
    }

    /// Replaces the snapshot and wakes the readers waiting for it.
    pub(crate) fn publish(&self, s: Snapshot) {
        let mut g = lock(&self.shared);
        g.latest = Arc::new(s);
        g.published += 1;
        drop(g);
        self.published.notify_all();
    }

    /// The channel whose message runs a tick now ([`super::start`]).
    pub(super) fn set_wake(&self, tx: crossbeam_channel::Sender<()>) {
        let _ = self.wake.set(tx);
    }
}

/// Whether a cgroup's figures did not move between two samples (cAdvisor's test for
/// backing off its housekeeping): the same CPU time and memory usage.
fn stood_still(a: &CgroupSample, b: &CgroupSample) -> bool {
    a.cpu_ns.is_some()
        && a.cpu_ns == b.cpu_ns
        && a.memory.map(|m| m.usage_bytes) == b.memory.map(|m| m.usage_bytes)
}

/// Whether a cgroup's usage files stay open between samples (those read every tick)
/// or are opened for each read (those read once a minute).
#[derive(Clone, Copy, Debug)]
enum Keep {
    Open,
    Closed,
}

/// What the images take on the image filesystem, and which filesystem that is.
#[derive(Debug, Default)]
struct ImagesUsed {
    bytes: u64,
    inodes: Option<u64>,
    /// The filesystem the runtime named (None: the runtime's root directory's).
    mountpoint: Option<PathBuf>,
}

/// What the analyzer knows of a running container from its one inspect.
#[derive(Clone, Debug)]
struct Known {
    name: String,
    image: String,
    pod: PodReference,
    container: String,
    sandbox: bool,
    pid: u32,
    host_network: bool,
    started: Option<SystemTime>,
    log_dir: Option<PathBuf>,
    rootfs_dir: Option<PathBuf>,
    /// Resolved from `/proc/<pid>/cgroup` on first use.
    cgroup: Option<String>,
}

/// The `stats` loop's state.
#[derive(Debug)]
pub(crate) struct Analyzer {
    cfg: StatsConfig,
    runtime: Arc<dyn Runtime>,
    provider: Arc<StatsProvider>,
    filter: Vec<String>,
    known: HashMap<String, Known>,
    cpu_prev: HashMap<String, (u64, Instant)>,
    fs: FsScanner,
    runtime_root: Option<PathBuf>,
    images_used: Option<(u64, Instant)>,
    volumes: HashMap<String, (Vec<(String, PathBuf)>, Instant)>,
    /// Per cgroup, what changes rarely and is read once a minute: its memory limit and
    /// task count.
    slow: HashMap<String, (Option<u64>, Option<u64>, Instant)>,
    /// Sandboxes' samples, taken once a minute (a pause process's figures stand still).
    sandboxes: HashMap<String, (CgroupSample, Instant)>,
    /// Each cgroup's last fresh sample, when it was taken, and whether it is reused at
    /// the next tick: cAdvisor's dynamic housekeeping — a cgroup whose CPU time and
    /// memory usage did not move between its last two samples is read every other
    /// tick (20 s) until they move again.
    still: HashMap<String, (CgroupSample, Instant, bool)>,
    /// The same for each sandbox's interface counters (`/proc/<pid>/net/dev`): read
    /// every other tick while they stand still.
    net_still: HashMap<String, (Vec<super::types::InterfaceStats>, Instant, bool)>,
    boot_time: Option<SystemTime>,
    /// The PLEG's generation at the last list of the runtime, and when it ran.
    listed: Option<(u64, Instant)>,
    /// The cgroup and `net/dev` files read every tick, kept open.
    files: OpenFiles,
}

impl Analyzer {
    /// An analyzer publishing into `provider`.
    pub(crate) fn new(
        cfg: StatsConfig,
        runtime: Arc<dyn Runtime>,
        provider: Arc<StatsProvider>,
    ) -> Self {
        let filter = vec![format!("{}={}", labels::MANAGED_BY_NODE, cfg.node_name)];
        let boot_time = boot_time(&cfg.proc_root);
        Analyzer {
            cfg,
            runtime,
            provider,
            filter,
            known: HashMap::new(),
            cpu_prev: HashMap::new(),
            fs: FsScanner::default(),
            runtime_root: None,
            images_used: None,
            volumes: HashMap::new(),
            slow: HashMap::new(),
            sandboxes: HashMap::new(),
            still: HashMap::new(),
            net_still: HashMap::new(),
            boot_time,
            listed: None,
            files: OpenFiles::for_this_process(),
        }
    }

    /// One tick: sample, measure, publish. A runtime that cannot be listed still gets
    /// the node's figures published, with the error (`scrape_error`).
    pub(crate) fn tick(&mut self) -> Result<(), RuntimeError> {
        let now = Instant::now();
        let sampled = self.provider.wanted(now);
        // Unread, only the disks of the pods the eviction manager names are measured.
        let disk_wanted = if sampled {
            HashSet::new()
        } else {
            self.provider.disk_wanted()
        };
        // Nobody reads the pods' figures and no pod's disk is wanted: the runtime is
        // not even listed (the next tick that needs it lists, its generation moved on).
        let pods_needed = sampled || !disk_wanted.is_empty();
        let listed = if pods_needed {
            self.refresh_containers(now)
        } else {
            Ok(())
        };
        // The root cgroup's figures, read once for the node and for `/`.
        let proc_root = self.cfg.proc_root.clone();
        let root_cpu = self.cfg.cgroups.node_cpu(&proc_root).ok();
        let root_memory = self.cfg.cgroups.node_memory(&proc_root).ok();
        let node = self.node_stats(now, root_cpu.as_ref(), root_memory.as_ref(), sampled);
        let mut cgroups = Vec::new();
        let pods = if pods_needed {
            self.pod_stats(now, node.fs.as_ref(), sampled, &disk_wanted, &mut cgroups)
        } else {
            Vec::new()
        };
        let machine_memory_bytes = node.memory.as_ref().and_then(|m| {
            m.available_bytes
                .zip(m.working_set_bytes)
                .map(|(a, w)| a + w)
        });
        if let Some(cpu) = root_cpu {
            // cAdvisor's `/` container, for `/metrics/cadvisor`.
            cgroups.insert(
                0,
                CgroupSample {
                    id: "/".into(),
                    time: Some(SystemTime::now()),
                    cpu_ns: Some(cpu.usage_core_nanoseconds),
                    memory: root_memory,
                    ..CgroupSample::default()
                },
            );
        }
        // CPU samples of cgroups not sampled for three periods (gone containers and
        // pods) are forgotten.
        let recent = |at: &Instant| now.saturating_duration_since(*at) < STATS_PERIOD * 3;
        self.cpu_prev.retain(|_, (_, at)| recent(at));
        self.slow
            .retain(|_, (_, _, at)| now.saturating_duration_since(*at) < FS_PERIOD * 2);
        self.sandboxes
            .retain(|_, (_, at)| now.saturating_duration_since(*at) < FS_PERIOD * 2);
        self.still.retain(|_, (_, at, _)| recent(at));
        self.net_still.retain(|_, (_, at, _)| recent(at));
        self.files.forget_unread(now);
        let mut snap = Snapshot {
            summary: Summary { node, pods },
            cgroups,
            machine_memory_bytes,
            time: Some(SystemTime::now()),
            error: None,
            cgroups_sampled: sampled,
        };
        let result = match listed {
            Ok(()) => Ok(()),
            Err(e) => {
                snap.error = Some(e.to_string());
                Err(e)
            }
        };
        self.provider.publish(snap);
        result
    }

    /// Lists the node's containers, inspects the new running ones, forgets the others.
    /// With a PLEG that has seen no container change since the last list (of under
    /// [`LIST_AT_LEAST`] ago), the containers known stay as they are: at 110 idle pods
    /// the list is 330 containers' JSON every 10 s, for nothing.
    fn refresh_containers(&mut self, now: Instant) -> Result<(), RuntimeError> {
        // Read before the list: a change during it makes the next tick list again.
        let generation = self.cfg.pleg.as_ref().map(|p| p.containers_generation());
        if let (Some(g), Some((last, at))) = (generation, self.listed) {
            if g == last && now.saturating_duration_since(at) < LIST_AT_LEAST {
                return Ok(());
            }
        }
        let list = self.runtime.list_containers(&self.filter)?;
        self.listed = generation.map(|g| (g, now));
        let running: HashSet<&str> = list
            .iter()
            .filter(|c| c.state == ContainerState::Running)
            .map(|c| c.id.as_str())
            .collect();
        self.known.retain(|id, _| running.contains(id.as_str()));
        for id in running {
            if self.known.contains_key(id) {
                continue;
            }
            let d = match self.runtime.inspect_container(id) {
                Ok(d) => d,
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(e),
            };
            if d.state != ContainerState::Running || d.pid == 0 {
                continue;
            }
            let l = &d.labels;
            let get = |k: &str| l.get(k).cloned().unwrap_or_default();
            let sandbox =
                l.get(labels::DOCKER_TYPE).map(String::as_str) == Some(labels::TYPE_SANDBOX);
            let non_empty = |s: &str| (!s.is_empty()).then(|| PathBuf::from(s));
            self.known.insert(
                id.to_string(),
                Known {
                    name: d.name.clone(),
                    image: d.image.clone(),
                    pod: PodReference {
                        name: get(labels::POD_NAME),
                        namespace: get(labels::POD_NAMESPACE),
                        uid: get(labels::POD_UID),
                    },
                    container: if sandbox {
                        labels::SANDBOX_CONTAINER_NAME.to_string()
                    } else {
                        get(labels::CONTAINER_NAME)
                    },
                    sandbox,
                    pid: d.pid,
                    host_network: d.host_network,
                    started: d.started_at,
                    log_dir: non_empty(&d.log_path).and_then(|p| p.parent().map(Path::to_path_buf)),
                    rootfs_dir: non_empty(&d.rootfs_dir).or_else(|| {
                        let path = self.cfg.proc_root.join(d.pid.to_string()).join("mountinfo");
                        std::fs::read_to_string(path)
                            .ok()
                            .and_then(|m| root_upper_dir(&m))
                    }),
                    cgroup: None,
                },
            );
        }
        Ok(())
    }

    /// Samples one cgroup, with its CPU rate against `key`'s previous sample; a cgroup
    /// that stood still at its last two samples gets its last one again, once.
    fn sample(&mut self, cgroup: &str, key: &str, now: Instant, keep: Keep) -> CgroupSample {
        if let Some((last, _, reuse)) = self.still.get_mut(cgroup) {
            if *reuse {
                *reuse = false;
                return last.clone();
            }
        }
        let s = self.sample_now(cgroup, key, now, keep);
        let unchanged = self
            .still
            .get(cgroup)
            .is_some_and(|(last, _, _)| stood_still(last, &s));
        self.still
            .insert(cgroup.to_string(), (s.clone(), now, unchanged));
        s
    }

    /// A sandbox's interface counters; while they stand still, read every other tick
    /// (the last ones stand for the tick between), as its cgroup.
    fn net_dev(
        &mut self,
        id: &str,
        path: &Path,
        now: Instant,
    ) -> Option<Vec<super::types::InterfaceStats>> {
        if let Some((last, _, reuse)) = self.net_still.get_mut(id) {
            if *reuse {
                *reuse = false;
                return Some(last.clone());
            }
        }
        let ifaces = parse_net_dev(&self.files.read(path).ok()?);
        let unchanged = self
            .net_still
            .get(id)
            .is_some_and(|(last, _, _)| *last == ifaces);
        self.net_still
            .insert(id.to_string(), (ifaces.clone(), now, unchanged));
        Some(ifaces)
    }

    /// Reads one cgroup now.
    fn sample_now(&mut self, cgroup: &str, key: &str, now: Instant, keep: Keep) -> CgroupSample {
        let cg = &self.cfg.cgroups;
        let (cpu, memory) = match keep {
            Keep::Open => (
                cg.cpu_from(&mut self.files, cgroup),
                cg.memory_usage_from(&mut self.files, cgroup),
            ),
            Keep::Closed => (cg.cpu(cgroup), cg.memory_usage(cgroup)),
        };
        let cpu_ns = cpu.ok().map(|c| c.usage_core_nanoseconds);
        let mut memory = memory.ok();
        // The limit and the task count once a minute: each file read costs ~25 µs of
        // kernel time, and 220 containers are read every 10 s.
        let fresh = self
            .slow
            .get(cgroup)
            .filter(|(_, _, at)| now.saturating_duration_since(*at) < FS_PERIOD)
            .map(|(l, p, _)| (*l, *p));
        let (limit, pids) = match fresh {
            Some(v) => v,
            None => {
                let v = (cg.memory_limit(cgroup), cg.pids(cgroup).ok());
                self.slow.insert(cgroup.to_string(), (v.0, v.1, now));
                v
            }
        };
        if let Some(m) = memory.as_mut() {
            m.limit_bytes = limit;
        }
        let nano_cores = cpu_ns.and_then(|ns| self.rate(key, ns, now));
        CgroupSample {
            id: cgroup.to_string(),
            time: Some(SystemTime::now()),
            cpu_ns,
            nano_cores,
            memory,
            pids,
            ..CgroupSample::default()
        }
    }

    /// The rate against `key`'s previous sample, which `ns` then replaces.
    fn rate(&mut self, key: &str, ns: u64, now: Instant) -> Option<u64> {
        let prev = self.cpu_prev.insert(key.to_string(), (ns, now));
        prev.and_then(|p| nano_cores(p, (ns, now)))
    }

    /// The node-level figures; with `sampled` false (nobody reads them), not the
    /// `pods` system container nor the image filesystem.
    fn node_stats(
        &mut self,
        now: Instant,
        root_cpu: Option<&cgroupfs::CpuStats>,
        root_memory: Option<&cgroupfs::MemoryStats>,
        sampled: bool,
    ) -> NodeStats {
        let proc_root = self.cfg.proc_root.clone();
        let wall = SystemTime::now();
        let cpu = root_cpu.map(|c| {
            let rate = self.rate("/", c.usage_core_nanoseconds, now);
            CpuStats {
                time: Some(k8s_time(wall)),
                usage_nano_cores: rate,
                usage_core_nano_seconds: Some(c.usage_core_nanoseconds),
            }
        });
        let memory = root_memory.map(|m| memory_stats(m, wall));
        let network = std::fs::read_to_string(proc_root.join("net/dev"))
            .ok()
            .map(|t| network_stats(parse_net_dev(&t), wall));
        let fs = cgroupfs::statvfs(&self.cfg.root_dir)
            .ok()
            .map(|s| node_fs(&s, wall));
        // The images' size (a Docker list) and the pods' cgroup only for a reader.
        let image_fs = sampled.then(|| self.image_fs(now)).flatten();
        let image_fs = image_fs.map(|(s, used)| FsStats {
            used_bytes: Some(used.bytes),
            inodes_used: used.inodes,
            ..node_fs(&s, wall)
        });
        let rl = cgroupfs::read_rlimit(&proc_root);
        let mut system_containers = Vec::new();
        for kubepods in ["/kubepods", "/kubepods.slice"] {
            if sampled && self.cfg.cgroups.exists(kubepods) {
                let s = self.sample(kubepods, kubepods, now, Keep::Open);
                system_containers.push(ContainerStats {
                    name: "pods".into(),
                    start_time: self.boot_time.map(k8s_time),
                    cpu: cpu_stats(&s),
                    memory: s.memory.map(|m| memory_stats(&m, wall)),
                    ..ContainerStats::default()
                });
                break;
            }
        }
        NodeStats {
            node_name: self.cfg.node_name.clone(),
            system_containers,
            start_time: self.boot_time.map(k8s_time),
            cpu,
            memory,
            network,
            fs,
            runtime: image_fs.map(|f| RuntimeStats {
                image_fs: Some(f),
                container_fs: None,
            }),
            rlimit: Some(RlimitStats {
                time: Some(k8s_time(wall)),
                maxpid: rl.max_pid,
                curproc: rl.running_processes,
            }),
        }
    }

    /// The image filesystem and what the images take on it: the runtime's own account
    /// where it gives one (CRI's `ImageFsInfo`, as upstream's CRI stats provider; an
    /// answer from the runtime's memory, asked at each reading), else the sizes of the
    /// image list (Docker's, listed once a minute). The filesystem is the one the
    /// runtime names, else its root directory's.
    fn image_fs(&mut self, now: Instant) -> Option<(RawFs, ImagesUsed)> {
        if self.runtime_root.is_none() {
            match self.runtime.info().map(|i| i.root_dir) {
                Ok(d) if !d.is_empty() => self.runtime_root = Some(PathBuf::from(d)),
                Ok(_) => return None,
                Err(e) => {
                    log::debug!("stats: the runtime's root directory: {e}");
                    return None;
                }
            }
        }
        let used = match self.runtime.image_fs_usage() {
            Ok(Some(u)) => ImagesUsed {
                bytes: u.used_bytes,
                inodes: u.inodes_used,
                mountpoint: Some(PathBuf::from(u.mountpoint))
                    .filter(|m| !m.as_os_str().is_empty() && m.exists()),
            },
            Ok(None) => ImagesUsed {
                bytes: self.listed_images_size(now),
                ..ImagesUsed::default()
            },
            Err(e) => {
                log::debug!("stats: the image filesystem's usage: {e}");
                return None;
            }
        };
        let on = match &used.mountpoint {
            Some(m) => m.as_path(),
            None => self.runtime_root.as_deref()?,
        };
        let fs = cgroupfs::statvfs(on).ok()?;
        Some((fs, used))
    }

    /// The sizes of the runtime's images summed, listed at most once a minute.
    fn listed_images_size(&mut self, now: Instant) -> u64 {
        let stale = self
            .images_used
            .is_none_or(|(_, at)| now.saturating_duration_since(at) >= FS_PERIOD);
        if stale {
            match self.runtime.list_images() {
                Ok(images) => {
                    let used = images
                        .iter()
                        .map(|i| u64::try_from(i.size).unwrap_or(0))
                        .fold(0u64, u64::saturating_add);
                    self.images_used = Some((used, now));
                }
                Err(e) => log::debug!("stats: listing images: {e}"),
            }
        }
        self.images_used.map_or(0, |(u, _)| u)
    }

    /// Every pod's figures, and the cgroups sampled for them into `out`; with
    /// `sample` false (nobody reads them), the disk figures of the pods in
    /// `disk_wanted` only: no cgroup or `net/dev` is read.
    fn pod_stats(
        &mut self,
        now: Instant,
        nodefs: Option<&FsStats>,
        sample: bool,
        disk_wanted: &HashSet<String>,
        out: &mut Vec<CgroupSample>,
    ) -> Vec<PodStats> {
        let version = self.cfg.cgroups.version();
        let proc_root = self.cfg.proc_root.clone();
        // Resolve cgroups of containers seen for the first time.
        let cgroups = self.cfg.cgroups.clone();
        for (id, k) in self.known.iter_mut() {
            if k.cgroup.is_none() {
                k.cgroup = cgroupfs::cgroup_of_pid(&proc_root, k.pid, version)
                    .ok()
                    .or_else(|| docker_default_cgroup(&cgroups, id));
            }
        }
        // Taken out for the tick (the samplers below borrow `self`), put back at its end.
        let known = std::mem::take(&mut self.known);
        let mut by_pod: BTreeMap<&str, Vec<(&str, &Known)>> = BTreeMap::new();
        for (id, k) in &known {
            by_pod
                .entry(k.pod.uid.as_str())
                .or_default()
                .push((id.as_str(), k));
        }
        // The directories to measure this tick: layers, log directories, volumes; of
        // every pod while somebody reads them, else of the pods the eviction manager
        // checks against ephemeral-storage limits.
        let measured = |uid: &str| sample || disk_wanted.contains(uid);
        let mut wanted: Vec<PathBuf> = Vec::new();
        for k in known.values().filter(|k| measured(&k.pod.uid)) {
            wanted.extend(k.rootfs_dir.iter().cloned());
            wanted.extend(k.log_dir.iter().cloned());
        }
        self.volumes
            .retain(|uid, _| by_pod.contains_key(uid.as_str()) && measured(uid));
        for &uid in by_pod.keys().filter(|u| measured(u)) {
            let fresh = self
                .volumes
                .get(uid)
                .is_some_and(|(_, at)| now.saturating_duration_since(*at) < FS_PERIOD);
            if !fresh {
                let dirs = volume_dirs(&self.cfg.root_dir, uid);
                self.volumes.insert(uid.to_string(), (dirs, now));
            }
            if let Some((dirs, _)) = self.volumes.get(uid) {
                wanted.extend(dirs.iter().map(|(_, p)| p.clone()));
            }
        }
        self.fs.scan(&wanted, now, TICK_BUDGET);

        let mut pods = Vec::with_capacity(by_pod.len());
        for (uid, mut members) in by_pod {
            base::sort::sort_by(&mut members, |a, b| a.1.container.cmp(&b.1.container));
            let wall = SystemTime::now();
            let pod_ref = members[0].1.pod.clone();
            let mut containers = Vec::new();
            let mut samples = Vec::new();
            let mut pod_cgroup = None;
            let mut network = None;
            let mut start = None;
            let mut ephemeral = (0u64, 0u64, false);
            for &(id, k) in &members {
                let Some(cg) = k.cgroup.as_deref() else {
                    continue;
                };
                let cached = self
                    .sandboxes
                    .get(id)
                    .filter(|(_, at)| {
                        sample && k.sandbox && now.saturating_duration_since(*at) < FS_PERIOD
                    })
                    .map(|(s, _)| s.clone());
                let mut s = match cached {
                    Some(s) => s,
                    None if !sample => CgroupSample::default(),
                    None => {
                        // A sandbox is read once a minute: kept open, its files
                        // would be closed unread after 30 s and opened again.
                        let keep = if k.sandbox { Keep::Closed } else { Keep::Open };
                        let s = self.sample(cg, cg, now, keep);
                        if k.sandbox {
                            self.sandboxes.insert(id.to_string(), (s.clone(), now));
                        }
                        s
                    }
                };
                s.name = k.name.clone();
                s.image = k.image.clone();
                s.namespace = k.pod.namespace.clone();
                s.pod = k.pod.name.clone();
                s.container = k.container.clone();
                s.start_time = k.started;
                if pod_cgroup.is_none() && sample {
                    pod_cgroup = parent_pod_cgroup(cg, uid);
                }
                let rootfs = k.rootfs_dir.as_ref().and_then(|d| self.fs.get(d));
                let logs = k.log_dir.as_ref().and_then(|d| self.fs.get(d));
                for (u, _) in rootfs.iter().chain(logs.iter()) {
                    ephemeral.0 = ephemeral.0.saturating_add(u.used_bytes);
                    ephemeral.1 = ephemeral.1.saturating_add(u.inodes_used);
                    ephemeral.2 = true;
                }
                s.rootfs = rootfs.map(|(u, _)| u);
                if k.sandbox {
                    start = k.started;
                    if !k.host_network && sample {
                        let path = proc_root.join(k.pid.to_string()).join("net/dev");
                        if let Some(ifaces) = self.net_dev(id, &path, now) {
                            s.network = ifaces;
                            network = Some(network_stats(s.network.clone(), wall));
                        }
                    }
                } else {
                    containers.push(ContainerStats {
                        name: k.container.clone(),
                        start_time: k.started.map(k8s_time),
                        cpu: cpu_stats(&s),
                        memory: s.memory.map(|m| memory_stats(&m, wall)),
                        rootfs: rootfs.map(|(u, at)| usage_fs(&u, at)),
                        logs: logs.map(|(u, at)| usage_fs(&u, at)),
                    });
                }
                samples.push(s);
            }
            // The pod cgroup when there is one, else the members summed.
            let pod_sample = match pod_cgroup {
                Some(pc) => {
                    let mut s = self.sample(&pc, &pc, now, Keep::Open);
                    s.namespace = pod_ref.namespace.clone();
                    s.pod = pod_ref.name.clone();
                    out.push(s.clone());
                    s
                }
                None if !sample => CgroupSample::default(),
                None => {
                    let mut s = sum_samples(&samples);
                    let key = format!("pod:{uid}");
                    s.nano_cores = s.cpu_ns.and_then(|ns| self.rate(&key, ns, now));
                    s
                }
            };
            let mut volume = Vec::new();
            if let Some((dirs, _)) = self.volumes.get(uid) {
                for (name, dir) in dirs {
                    if let Some((u, at)) = self.fs.get(dir) {
                        // Every measured plugin's volume is the pod's local ephemeral
                        // storage (upstream's `isEphemeralVolume` set).
                        ephemeral.0 = ephemeral.0.saturating_add(u.used_bytes);
                        ephemeral.1 = ephemeral.1.saturating_add(u.inodes_used);
                        ephemeral.2 = true;
                        volume.push(VolumeStats {
                            fs: volume_fs(&u, at),
                            name: name.clone(),
                        });
                    }
                }
            }
            let ephemeral_storage = ephemeral.2.then(|| FsStats {
                time: Some(k8s_time(wall)),
                available_bytes: nodefs.and_then(|f| f.available_bytes),
                capacity_bytes: nodefs.and_then(|f| f.capacity_bytes),
                used_bytes: Some(ephemeral.0),
                inodes_free: nodefs.and_then(|f| f.inodes_free),
                inodes: nodefs.and_then(|f| f.inodes),
                inodes_used: Some(ephemeral.1),
            });
            pods.push(PodStats {
                pod_ref,
                start_time: start.map(k8s_time),
                containers,
                cpu: cpu_stats(&pod_sample),
                memory: pod_sample.memory.map(|m| memory_stats(&m, wall)),
                network,
                volume,
                ephemeral_storage,
                process_stats: pod_sample.pids.map(|n| ProcessStats {
                    process_count: Some(n),
                }),
            });
            if sample {
                out.extend(samples);
            }
        }
        self.known = known;
        pods
    }
}

/// A pod's volume directories: (volume name, directory), sorted.
fn volume_dirs(root: &Path, uid: &str) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    if uid.is_empty() || uid.contains('/') || uid.starts_with('.') {
        return out;
    }
    let base = root.join("pods").join(uid).join("volumes");
    // The plugins present, from one listing: most pods have one or two of the five,
    // and a pod without volumes has no `volumes` directory at all.
    let Ok(present) = std::fs::read_dir(&base) else {
        return out;
    };
    let present: Vec<String> = present
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| MEASURED_PLUGINS.contains(&n.as_str()))
        .collect();
    for plugin in present {
        let Ok(rd) = std::fs::read_dir(base.join(plugin)) else {
            continue;
        };
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                out.push((e.file_name().to_string_lossy().into_owned(), e.path()));
            }
        }
    }
    base::sort::sort(&mut out);
    out
}

/// The boot time (`btime` of `/proc/stat`): the root container's creation time
/// upstream reports as the node's `startTime`.
fn boot_time(proc_root: &Path) -> Option<SystemTime> {
    let text = std::fs::read_to_string(proc_root.join("stat")).ok()?;
    let secs = text
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
}

/// Where Docker puts a container without a cgroup parent, for when its process is not
/// visible in our `/proc` (rkubelet in another PID namespace): `/docker/<id>`
/// (cgroupfs driver) or `/system.slice/docker-<id>.scope` (systemd driver).
fn docker_default_cgroup(cg: &CgroupFs, id: &str) -> Option<String> {
    [
        format!("/docker/{id}"),
        format!("/system.slice/docker-{id}.scope"),
    ]
    .into_iter()
    .find(|c| cg.exists(c))
}

/// Whether the analyzer can run here: the cgroup hierarchy is mounted.
pub(crate) fn cgroups_present(cg: &CgroupFs) -> bool {
    match cg.version() {
        CgroupVersion::V1 => cg.root().join("memory").is_dir(),
        CgroupVersion::V2 => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base::testutil::TempDir;
    use runtime::config::{ContainerConfig, PodSandboxConfig};
    use runtime::fake::{FakeClock, FakeRuntime};

    fn put(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }

    /// A cgroup tree, a `/proc` and a root dir, each its own temporary directory.
    fn trees(tag: &str) -> (TempDir, TempDir, TempDir) {
        (
            TempDir::new(&format!("{tag}-cg")),
            TempDir::new(&format!("{tag}-proc")),
            TempDir::new(&format!("{tag}-root")),
        )
    }

    /// Node `n1`'s analyzer config over [`trees`].
    fn config(cg: &TempDir, proc_root: &TempDir, root: &TempDir) -> StatsConfig {
        StatsConfig {
            node_name: "n1".into(),
            root_dir: root.0.clone(),
            proc_root: proc_root.0.clone(),
            cgroups: CgroupFs::detect(&cg.0),
            pleg: None,
        }
    }

    /// A pod's sandbox and one container in a fake runtime; returns their pids.
    fn run_pod(rt: &FakeRuntime, uid: &str) -> (u32, u32) {
        let mut pids = Vec::new();
        for (kind, name) in [
            (labels::TYPE_SANDBOX, "POD"),
            (labels::TYPE_CONTAINER, "app"),
        ] {
            let l: std::collections::BTreeMap<String, String> = [
                (labels::MANAGED_BY_NODE, "n1"),
                (labels::POD_UID, uid),
                (labels::POD_NAME, "web"),
                (labels::POD_NAMESPACE, "default"),
                (labels::CONTAINER_NAME, name),
                (labels::DOCKER_TYPE, kind),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
            let id = rt
                .create_container(
                    "",
                    &ContainerConfig {
                        labels: l,
                        ..ContainerConfig::named(format!("k8s_{name}_web_{uid}"), "pause")
                    },
                    &PodSandboxConfig::default(),
                )
                .expect("create");
            rt.start_container(&id).expect("start");
            pids.push(rt.inspect_container(&id).expect("inspect").pid);
        }
        (pids[0], pids[1])
    }

    /// A v2 cgroup tree with a pod cgroup holding the sandbox and the app container
    /// (each `(pid, memory.current)`), the sandbox's `net/dev`, `/proc/meminfo` and an
    /// emptyDir file; returns the pod cgroup.
    fn v2_pod(
        cg: &TempDir,
        proc_root: &TempDir,
        root: &TempDir,
        uid: &str,
        [(sb_pid, sb_mem), (app_pid, app_mem)]: [(u32, u64); 2],
    ) -> &'static str {
        let pod_cg = "kubepods/besteffort/podu-1";
        put(&cg.0, "cgroup.controllers", "cpu memory pids\n");
        put(&cg.0, "cpu.stat", "usage_usec 5000000\n");
        for (pid, leaf, mem) in [(sb_pid, "sb", sb_mem), (app_pid, "app", app_mem)] {
            let dir = format!("{pod_cg}/{leaf}");
            put(&cg.0, &format!("{dir}/memory.current"), &format!("{mem}\n"));
            put(
                &cg.0,
                &format!("{dir}/memory.stat"),
                "inactive_file 0\nanon 10\n",
            );
            put(&cg.0, &format!("{dir}/cpu.stat"), "usage_usec 1000\n");
            put(&cg.0, &format!("{dir}/pids.current"), "1\n");
            put(
                &proc_root.0,
                &format!("{pid}/cgroup"),
                &format!("0::/{dir}\n"),
            );
        }
        put(
            &proc_root.0,
            &format!("{sb_pid}/net/dev"),
            "h1\nh2\n  eth0: 10 1 0 0 0 0 0 0 20 2 0 0 0 0 0 0\n",
        );
        put(
            &proc_root.0,
            "meminfo",
            "MemTotal: 1000 kB\nMemFree: 500 kB\n",
        );
        put(
            &root.0,
            &format!("pods/{uid}/volumes/kubernetes.io~empty-dir/data/f"),
            "hello",
        );
        // The app's writable layer, which the fake runtime does not say (as a CRI
        // runtime): the overlay at its `/`.
        put(&root.0, "layers/app/fs/written", "a file");
        put(
            &proc_root.0,
            &format!("{app_pid}/mountinfo"),
            &format!(
                "1 0 0:1 / / rw - overlay overlay rw,lowerdir=/l,upperdir={},workdir=/w\n",
                root.0.join("layers/app/fs").display()
            ),
        );
        pod_cg
    }

    /// Pod `u-1` running in a fake runtime over a v2 tree ([`run_pod`], [`v2_pod`]
    /// with each container's `memory.current`).
    struct V2Pod {
        cg: TempDir,
        proc_root: TempDir,
        root: TempDir,
        rt: Arc<FakeRuntime>,
        pod_cg: &'static str,
        sb_pid: u32,
    }

    fn v2_pod_running(tag: &str, [sb_mem, app_mem]: [u64; 2]) -> V2Pod {
        let (cg, proc_root, root) = trees(tag);
        let rt = Arc::new(FakeRuntime::new(FakeClock::default()).with_image("pause"));
        let (sb_pid, app_pid) = run_pod(&rt, "u-1");
        let pod_cg = v2_pod(
            &cg,
            &proc_root,
            &root,
            "u-1",
            [(sb_pid, sb_mem), (app_pid, app_mem)],
        );
        V2Pod {
            cg,
            proc_root,
            root,
            rt,
            pod_cg,
            sb_pid,
        }
    }

    #[test]
    fn with_a_pleg_the_runtime_is_listed_again_only_after_a_container_change() {
        use crate::pleg::Pleg;
        use runtime::fake::Op;
        let (cg, proc_root, root) = trees("an-gen");
        let rt = Arc::new(FakeRuntime::new(FakeClock::default()).with_image("pause"));
        let shared = Arc::new(PlegShared::default());
        let (tx, _rx) = base::chan::bounded(64);
        let mut pleg = Pleg::new(rt.clone(), "n1", tx, shared.clone(), None);
        run_pod(&rt, "u-1");
        pleg.relist().expect("relist");
        let cfg = config(&cg, &proc_root, &root).with_pleg(shared.clone());
        let provider = Arc::new(StatsProvider::default());
        provider.demand(Duration::ZERO);
        let mut a = Analyzer::new(cfg, rt.clone(), provider.clone());
        let lists = || rt.count(Op::List);
        let before = lists();
        a.tick().expect("tick");
        assert_eq!(lists(), before + 1, "the first tick lists");
        a.tick().expect("tick");
        a.tick().expect("tick");
        assert_eq!(lists(), before + 1, "nothing changed: no list");
        assert_eq!(
            provider.latest().summary.pods.len(),
            1,
            "the pod is still known"
        );
        // A second pod starts; the PLEG sees it, so the next tick lists and finds it.
        run_pod(&rt, "u-2");
        pleg.relist().expect("relist");
        let before = lists();
        a.tick().expect("tick");
        assert_eq!(lists(), before + 1, "a container changed: listed again");
        assert_eq!(provider.latest().summary.pods.len(), 2);
        // A relist that finds nothing new changes nothing.
        pleg.relist().expect("relist");
        let before = lists();
        a.tick().expect("tick");
        assert_eq!(lists(), before, "no change: no list");
    }

    #[test]
    fn a_tick_assembles_node_pod_and_container_figures_from_a_v2_tree() {
        let V2Pod {
            cg,
            proc_root,
            root,
            rt,
            pod_cg,
            sb_pid,
        } = v2_pod_running("an", [1000, 50_000]);
        let uid = "u-1";
        put(&cg.0, &format!("{pod_cg}/memory.current"), "51000\n");
        put(&cg.0, &format!("{pod_cg}/memory.stat"), "inactive_file 0\n");
        put(&cg.0, &format!("{pod_cg}/cpu.stat"), "usage_usec 2000\n");
        put(&cg.0, &format!("{pod_cg}/pids.current"), "2\n");
        put(
            &proc_root.0,
            "stat",
            "cpu 1 0 1 0 0 0 0 0\nbtime 1700000000\n",
        );
        put(&proc_root.0, "loadavg", "0 0 0 1/50 9\n");
        let provider = Arc::new(StatsProvider::default());
        // A reader: the pods' cgroups are sampled at every tick.
        provider.demand(Duration::ZERO);
        let cfg = config(&cg, &proc_root, &root);
        let mut a = Analyzer::new(cfg, rt.clone(), provider.clone());
        a.tick().expect("tick");
        put(&cg.0, &format!("{pod_cg}/cpu.stat"), "usage_usec 3000\n");
        std::thread::sleep(Duration::from_millis(5));
        a.tick().expect("tick");

        let snap = provider.latest();
        let s = &snap.summary;
        assert_eq!(s.node.node_name, "n1");
        assert_eq!(
            s.node.cpu.as_ref().and_then(|c| c.usage_core_nano_seconds),
            Some(5_000_000_000)
        );
        assert_eq!(
            s.node.memory.as_ref().and_then(|m| m.working_set_bytes),
            Some(500 * 1024)
        );
        assert_eq!(s.node.rlimit.as_ref().and_then(|r| r.curproc), Some(50));
        assert_eq!(s.pods.len(), 1);
        let p = &s.pods[0];
        assert_eq!(
            (p.pod_ref.name.as_str(), p.pod_ref.uid.as_str()),
            ("web", uid)
        );
        // The pod cgroup's figures, not the sum.
        assert_eq!(
            p.memory.as_ref().and_then(|m| m.working_set_bytes),
            Some(51_000)
        );
        let cpu = p.cpu.as_ref().expect("pod cpu");
        assert_eq!(cpu.usage_core_nano_seconds, Some(3_000_000));
        assert!(cpu.usage_nano_cores.is_some(), "a rate on the second tick");
        assert_eq!(
            p.process_stats.as_ref().and_then(|x| x.process_count),
            Some(2)
        );
        assert_eq!(
            p.network.as_ref().map(|n| n.default.rx_bytes),
            Some(Some(10))
        );
        let names: Vec<&str> = p.containers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["app"]);
        assert_eq!(
            p.containers[0]
                .memory
                .as_ref()
                .and_then(|m| m.working_set_bytes),
            Some(50_000)
        );
        assert!(
            p.containers[0]
                .rootfs
                .as_ref()
                .and_then(|r| r.used_bytes)
                .is_some_and(|b| b > 0),
            "the writable layer found through mountinfo"
        );
        assert_eq!(p.volume.len(), 1);
        assert_eq!(p.volume[0].name, "data");
        assert!(p
            .ephemeral_storage
            .as_ref()
            .and_then(|e| e.used_bytes)
            .is_some());
        // cAdvisor's view: root, pod cgroup, sandbox, container.
        let ids: Vec<&str> = snap.cgroups.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids[0], "/");
        assert!(ids.contains(&"/kubepods/besteffort/podu-1"));
        assert!(snap.error.is_none());

        // The runtime down: the node's figures still come, with the error.
        rt.fail(
            runtime::fake::Op::List,
            1,
            runtime::fake::Fault::Unavailable,
        );
        assert!(a.tick().is_err());
        let snap = provider.latest();
        assert!(snap.error.is_some() && snap.summary.node.cpu.is_some());

        // Dynamic housekeeping. The app container stood still at ticks 1 and 2, so
        // the failed tick above reused its figures; now it is read again.
        let app_ws = |provider: &StatsProvider| {
            provider.latest().summary.pods[0].containers[0]
                .memory
                .as_ref()
                .and_then(|m| m.working_set_bytes)
        };
        put(&cg.0, &format!("{pod_cg}/app/memory.current"), "60000\n");
        a.tick().expect("tick");
        assert_eq!(
            app_ws(&provider),
            Some(60_000),
            "read: its last tick was a reuse"
        );
        // It moved, so the next tick reads it too; unmoved there, the one after reuses.
        a.tick().expect("tick");
        put(&cg.0, &format!("{pod_cg}/app/memory.current"), "70000\n");
        a.tick().expect("tick");
        assert_eq!(app_ws(&provider), Some(60_000), "reused for one tick");
        a.tick().expect("tick");
        assert_eq!(app_ws(&provider), Some(70_000), "read again the tick after");

        // The sandbox's interface counters back off the same way.
        let rx = |provider: &StatsProvider| {
            provider.latest().summary.pods[0]
                .network
                .as_ref()
                .and_then(|n| n.default.rx_bytes)
        };
        let net = |rx: u64| format!("h1\nh2\n  eth0: {rx} 1 0 0 0 0 0 0 20 2 0 0 0 0 0 0\n");
        put(&proc_root.0, &format!("{sb_pid}/net/dev"), &net(99));
        a.tick().expect("tick");
        a.tick().expect("tick");
        assert_eq!(rx(&provider), Some(99));
        put(&proc_root.0, &format!("{sb_pid}/net/dev"), &net(123));
        a.tick().expect("tick");
        assert_eq!(rx(&provider), Some(99), "stood still: reused for one tick");
        a.tick().expect("tick");
        assert_eq!(rx(&provider), Some(123));
    }

    #[test]
    fn nobody_reading_leaves_the_pods_cgroups_unread_and_a_reader_wakes_a_sampling_tick() {
        let V2Pod {
            cg,
            proc_root,
            root,
            rt,
            ..
        } = v2_pod_running("an-demand", [50_000, 50_000]);
        let uid = "u-1";
        let provider = Arc::new(StatsProvider::default());
        let (wake, woken) = crossbeam_channel::bounded(1);
        provider.set_wake(wake);
        let mut a = Analyzer::new(config(&cg, &proc_root, &root), rt.clone(), provider.clone());

        // Nobody asked: the node's figures only; the runtime is not even listed.
        let lists = || rt.count(runtime::fake::Op::List);
        let before = lists();
        a.tick().expect("tick");
        let snap = provider.latest();
        assert!(!snap.cgroups_sampled);
        assert!(
            snap.summary.node.cpu.is_some(),
            "the node is always sampled"
        );
        assert!(snap.summary.pods.is_empty());
        assert_eq!(lists(), before);
        assert_eq!(snap.cgroups.len(), 1, "only the root for /metrics/cadvisor");
        assert!(a.files.is_empty(), "no cgroup file opened");
        // The eviction manager checks the pod against an ephemeral-storage limit: its
        // disks are measured, still no cgroup read.
        provider.want_disk([uid.to_string()].into_iter().collect());
        a.tick().expect("tick");
        let snap = provider.latest();
        let p = &snap.summary.pods[0];
        assert_eq!(p.pod_ref.uid, uid);
        assert!(p.cpu.is_none() && p.memory.is_none() && p.network.is_none());
        assert!(p.containers[0].memory.is_none());
        assert_eq!(
            p.volume.len(),
            1,
            "disk figures for the local-storage limits"
        );
        assert!(p.ephemeral_storage.is_some() && p.memory.is_none());
        assert!(a.files.is_empty());
        provider.want_disk(HashSet::new());

        // A reader wakes a tick and gets its snapshot.
        let ticker = std::thread::Builder::new()
            .name("stats-test".into())
            .spawn(move || {
                woken.recv().expect("woken");
                a.tick().expect("tick");
                a
            })
            .expect("spawn");
        let snap = provider.demand(Duration::from_secs(60));
        let mut a = ticker.join().expect("ticker");
        assert!(snap.cgroups_sampled);
        let p = &snap.summary.pods[0];
        assert_eq!(
            p.containers[0]
                .memory
                .as_ref()
                .and_then(|m| m.working_set_bytes),
            Some(50_000)
        );
        assert!(p.network.is_some());
        // It stays on for INTEREST, then the ticks go back to disk figures only.
        assert!(provider.wanted(Instant::now()));
        assert!(!provider.wanted(Instant::now() + INTEREST));
        a.tick().expect("tick");
        assert!(provider.latest().cgroups_sampled);
    }

    #[test]
    fn a_cgroup_stands_still_when_cpu_and_memory_do_not_move() {
        let s = |cpu: u64, mem: u64| CgroupSample {
            cpu_ns: Some(cpu),
            memory: Some(crate::stats::cgroupfs::MemoryStats {
                usage_bytes: mem,
                ..crate::stats::cgroupfs::MemoryStats::default()
            }),
            ..CgroupSample::default()
        };
        assert!(stood_still(&s(5, 100), &s(5, 100)));
        assert!(!stood_still(&s(5, 100), &s(6, 100)));
        assert!(!stood_still(&s(5, 100), &s(5, 101)));
        // No CPU figure: never assumed still.
        assert!(!stood_still(
            &CgroupSample::default(),
            &CgroupSample::default()
        ));
    }
}
