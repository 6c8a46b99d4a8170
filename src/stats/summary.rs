//! Pure pieces of the summary (upstream's `summary_sys_containers.go`,
//! `cadvisor_stats_provider.go` and `helper.go` conversions): CPU rates from successive
//! samples, pod figures summed from their containers, the pod cgroup above a
//! container's, the raw figures turned into `stats/v1alpha1` values, `/proc/net/dev`,
//! a container's writable layer from its `/proc/<pid>/mountinfo`, and the
//! `only_cpu_and_memory` reduction.

use std::path::PathBuf;
use std::time::{Instant, SystemTime};

use super::cgroupfs::{FsStats as RawFs, MemoryStats as RawMem};
use super::fsscan::DirUsage;
use super::types::{
    ContainerStats, CpuStats, FsStats, InterfaceStats, MemoryStats, NetworkStats, NodeStats,
    PodStats, Summary,
};
use base::time::k8s_time;

/// The default interface whose counters a summary's network figures carry inline
/// (upstream's `defaultNetworkInterfaceName`).
const DEFAULT_INTERFACE: &str = "eth0";

/// Interface name prefixes cAdvisor leaves out of network figures.
const IGNORED_DEVICES: [&str; 4] = ["lo", "veth", "docker", "nerdctl"];

/// One cgroup's figures, as sampled, with the labels `/metrics/cadvisor` gives it.
#[derive(Clone, Debug, Default)]
pub(crate) struct CgroupSample {
    /// cAdvisor's `id`: the cgroup path (`/`, `/docker/<id>`, `/kubepods/...`).
    pub id: String,
    /// cAdvisor's `name`: the Docker container name ("" for pod and node cgroups).
    pub name: String,
    /// The image ("" for pod and node cgroups).
    pub image: String,
    /// The pod's namespace ("" for the node).
    pub namespace: String,
    /// The pod's name ("" for the node).
    pub pod: String,
    /// The container's name in the spec, `POD` for a sandbox, "" for a pod cgroup.
    pub container: String,
    /// When sampled.
    pub time: Option<SystemTime>,
    /// Cumulative CPU time, ns.
    pub cpu_ns: Option<u64>,
    /// CPU rate since the previous sample, nanocores.
    pub nano_cores: Option<u64>,
    /// Memory.
    pub memory: Option<RawMem>,
    /// Tasks.
    pub pids: Option<u64>,
    /// Writable layer usage.
    pub rootfs: Option<DirUsage>,
    /// Network interfaces (a sandbox's).
    pub network: Vec<InterfaceStats>,
    /// When the container started.
    pub start_time: Option<SystemTime>,
}

/// The pod cgroup above a container's: its parent when the parent is named for the
/// pod (`pod<uid>` with cgroupfs, `…-pod<uid_with_underscores>.slice` with systemd).
pub(crate) fn parent_pod_cgroup(container_cgroup: &str, uid: &str) -> Option<String> {
    if uid.is_empty() {
        return None;
    }
    let (parent, _) = container_cgroup.trim_end_matches('/').rsplit_once('/')?;
    let base = parent.rsplit('/').next()?;
    let dashed = format!("pod{uid}");
    let underscored = format!("pod{}", uid.replace('-', "_"));
    (base == dashed || base.ends_with(&format!("{underscored}.slice"))).then(|| parent.to_string())
}

/// Cores used between two cumulative samples (ns, when), in nanocores; None when the
/// counter went back (a cgroup made again) or no time passed.
pub(crate) fn nano_cores(prev: (u64, Instant), cur: (u64, Instant)) -> Option<u64> {
    let dt = cur.1.checked_duration_since(prev.1)?.as_nanos();
    let used = u128::from(cur.0.checked_sub(prev.0)?);
    if dt == 0 {
        return None;
    }
    u64::try_from(used.saturating_mul(1_000_000_000) / dt).ok()
}

/// Members' figures summed (a pod without its own cgroup). A figure missing from every
/// member stays missing.
pub(crate) fn sum_samples(samples: &[CgroupSample]) -> CgroupSample {
    fn add(a: Option<u64>, b: Option<u64>) -> Option<u64> {
        match (a, b) {
            (Some(a), Some(b)) => Some(a.saturating_add(b)),
            (a, b) => a.or(b),
        }
    }
    let mut out = CgroupSample {
        time: Some(SystemTime::now()),
        ..CgroupSample::default()
    };
    for s in samples {
        out.cpu_ns = add(out.cpu_ns, s.cpu_ns);
        out.pids = add(out.pids, s.pids);
        if let Some(m) = s.memory {
            let o = out.memory.get_or_insert_with(RawMem::default);
            o.usage_bytes = o.usage_bytes.saturating_add(m.usage_bytes);
            o.working_set_bytes = o.working_set_bytes.saturating_add(m.working_set_bytes);
            o.rss_bytes = o.rss_bytes.saturating_add(m.rss_bytes);
            o.inactive_file_bytes = o.inactive_file_bytes.saturating_add(m.inactive_file_bytes);
            o.page_faults = o.page_faults.saturating_add(m.page_faults);
            o.major_page_faults = o.major_page_faults.saturating_add(m.major_page_faults);
        }
    }
    out
}

/// A sample's CPU figures.
pub(crate) fn cpu_stats(s: &CgroupSample) -> Option<CpuStats> {
    s.cpu_ns.map(|ns| CpuStats {
        time: s.time.map(k8s_time),
        usage_nano_cores: s.nano_cores,
        usage_core_nano_seconds: Some(ns),
    })
}

/// Memory figures: `availableBytes` = limit − working set when there is a limit.
pub(crate) fn memory_stats(m: &RawMem, at: SystemTime) -> MemoryStats {
    MemoryStats {
        time: Some(k8s_time(at)),
        available_bytes: m.limit_bytes.map(|l| l.saturating_sub(m.working_set_bytes)),
        usage_bytes: Some(m.usage_bytes),
        working_set_bytes: Some(m.working_set_bytes),
        rss_bytes: Some(m.rss_bytes),
        page_faults: Some(m.page_faults),
        major_page_faults: Some(m.major_page_faults),
    }
}

/// A whole filesystem's figures (nodefs, imagefs).
pub(crate) fn node_fs(s: &RawFs, at: SystemTime) -> FsStats {
    FsStats {
        time: Some(k8s_time(at)),
        available_bytes: Some(s.available_bytes),
        capacity_bytes: Some(s.capacity_bytes),
        used_bytes: Some(s.used_bytes),
        inodes_free: Some(s.inodes_free),
        inodes: Some(s.inodes),
        inodes_used: Some(s.inodes_used),
    }
}

/// A directory's usage on its filesystem (rootfs, logs).
pub(crate) fn usage_fs(u: &DirUsage, at: SystemTime) -> FsStats {
    FsStats {
        time: Some(k8s_time(at)),
        available_bytes: u.fs.map(|f| f.available_bytes),
        capacity_bytes: u.fs.map(|f| f.capacity_bytes),
        used_bytes: Some(u.used_bytes),
        inodes_free: u.fs.map(|f| f.inodes_free),
        inodes: u.fs.map(|f| f.inodes),
        inodes_used: Some(u.inodes_used),
    }
}

/// A volume's figures: upstream's `fsResourceAnalyzer` gives a volume its usage and
/// the capacity of the filesystem holding it (a tmpfs's for memory-backed ones).
pub(crate) fn volume_fs(u: &DirUsage, at: SystemTime) -> FsStats {
    usage_fs(u, at)
}

/// Network figures from interfaces: the default one inline.
pub(crate) fn network_stats(interfaces: Vec<InterfaceStats>, at: SystemTime) -> NetworkStats {
    let default = interfaces
        .iter()
        .find(|i| i.name == DEFAULT_INTERFACE)
        .cloned()
        .unwrap_or_default();
    NetworkStats {
        time: Some(k8s_time(at)),
        default,
        interfaces,
    }
}

/// The writable layer of a container from its process's `/proc/<pid>/mountinfo`:
/// the `upperdir` of the overlay mounted at its `/` (the topmost such mount). A CRI
/// runtime does not say where a container's layer is (Docker's inspect does:
/// `GraphDriver.Data.UpperDir`); containerd's overlayfs snapshotter mounts it this
/// way. None for another root filesystem (a native snapshotter, a VM runtime).
pub(crate) fn root_upper_dir(mountinfo: &str) -> Option<PathBuf> {
    mountinfo
        .lines()
        .rev()
        .find_map(|line| {
            let (mount, fs) = line.split_once(" - ")?;
            let mount_point = mount.split(' ').nth(4)?;
            let mut fs = fs.split(' ');
            let (fstype, _source, options) = (fs.next()?, fs.next()?, fs.next()?);
            (mount_point == "/" && fstype == "overlay").then_some(options)
        })?
        .split(',')
        .find_map(|o| o.strip_prefix("upperdir="))
        .map(|d| PathBuf::from(crate::volume::mount::unescape(d)))
}

/// The interfaces of a `/proc/<pid>/net/dev` text, cAdvisor's ignored ones left out.
pub(crate) fn parse_net_dev(text: &str) -> Vec<InterfaceStats> {
    let mut out = Vec::new();
    for line in text.lines().skip(2) {
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        let name = name.trim();
        // cAdvisor's `isIgnoredDevice`: loopback, the host ends of veth pairs and the
        // runtime's bridges are not the node's or the pod's traffic.
        if name.is_empty() || IGNORED_DEVICES.iter().any(|p| name.starts_with(p)) {
            continue;
        }
        let f: Vec<u64> = rest
            .split_whitespace()
            .map(|v| v.parse().unwrap_or(0))
            .collect();
        if f.len() < 16 {
            continue;
        }
        out.push(InterfaceStats {
            name: name.to_string(),
            rx_bytes: Some(f[0]),
            rx_errors: Some(f[2]),
            tx_bytes: Some(f[8]),
            tx_errors: Some(f[10]),
        });
    }
    base::sort::sort_by(&mut out, |a, b| a.name.cmp(&b.name));
    out
}

/// The summary with only what `?only_cpu_and_memory=true` asks (upstream's
/// `GetCPUAndMemoryStats`): names, start times, CPU and memory.
pub(crate) fn cpu_and_memory_only(s: &Summary) -> Summary {
    let c = |c: &ContainerStats| ContainerStats {
        name: c.name.clone(),
        start_time: c.start_time.clone(),
        cpu: c.cpu.clone(),
        memory: c.memory.clone(),
        ..ContainerStats::default()
    };
    Summary {
        node: NodeStats {
            node_name: s.node.node_name.clone(),
            system_containers: s.node.system_containers.iter().map(c).collect(),
            start_time: s.node.start_time.clone(),
            cpu: s.node.cpu.clone(),
            memory: s.node.memory.clone(),
            ..NodeStats::default()
        },
        pods: s
            .pods
            .iter()
            .map(|p| PodStats {
                pod_ref: p.pod_ref.clone(),
                start_time: p.start_time.clone(),
                containers: p.containers.iter().map(c).collect(),
                cpu: p.cpu.clone(),
                memory: p.memory.clone(),
                ..PodStats::default()
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::types::VolumeStats;
    use std::time::Duration;

    const NET_DEV: &str = "Inter-|   Receive                                                |  Transmit\n \
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
lo:     100       1    0    0    0     0          0         0      100       1    0    0    0     0       0          0\n  \
eth0:    2660      30    1    0    0     0          0         0     1200      12    2    0    0     0       0          0\n";

    #[test]
    fn net_dev_leaves_out_loopback_and_puts_eth0_inline() {
        let i = parse_net_dev(NET_DEV);
        assert_eq!(
            i,
            vec![InterfaceStats {
                name: "eth0".into(),
                rx_bytes: Some(2660),
                rx_errors: Some(1),
                tx_bytes: Some(1200),
                tx_errors: Some(2),
            }]
        );
        let n = network_stats(i, SystemTime::UNIX_EPOCH);
        assert_eq!(n.default.name, "eth0");
        let v = serde_json::to_value(&n).expect("json");
        assert_eq!(v["rxBytes"], 2660);
        assert_eq!(v["interfaces"][0]["txErrors"], 2);
        assert!(network_stats(vec![], SystemTime::UNIX_EPOCH)
            .default
            .name
            .is_empty());
    }

    #[test]
    fn rates_from_successive_samples() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(10);
        // 5 s of CPU in 10 s: half a core.
        assert_eq!(nano_cores((0, t0), (5_000_000_000, t1)), Some(500_000_000));
        assert_eq!(nano_cores((10, t0), (5, t1)), None, "counter reset");
        assert_eq!(nano_cores((0, t0), (5, t0)), None, "no time passed");
        assert_eq!(nano_cores((0, t1), (5, t0)), None);
    }

    #[test]
    fn pod_cgroups_are_recognised_for_both_drivers() {
        let uid = "1b4e28ba-2fa1-11d2-883f-0016d3cca427";
        assert_eq!(
            parent_pod_cgroup(&format!("/kubepods/burstable/pod{uid}/abc"), uid),
            Some(format!("/kubepods/burstable/pod{uid}"))
        );
        let sd = "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1b4e28ba_2fa1_11d2_883f_0016d3cca427.slice/docker-abc.scope";
        assert_eq!(
            parent_pod_cgroup(sd, uid).as_deref(),
            Some("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1b4e28ba_2fa1_11d2_883f_0016d3cca427.slice")
        );
        assert_eq!(parent_pod_cgroup("/docker/abc", uid), None);
        assert_eq!(parent_pod_cgroup("/docker/abc", ""), None);
    }

    #[test]
    fn summing_members_and_available_bytes() {
        let m = |ws| RawMem {
            usage_bytes: ws + 10,
            working_set_bytes: ws,
            rss_bytes: 1,
            ..RawMem::default()
        };
        let a = CgroupSample {
            cpu_ns: Some(5),
            memory: Some(m(100)),
            pids: Some(2),
            ..CgroupSample::default()
        };
        let b = CgroupSample {
            cpu_ns: Some(7),
            memory: Some(m(50)),
            ..CgroupSample::default()
        };
        let s = sum_samples(&[a, b]);
        assert_eq!(s.cpu_ns, Some(12));
        assert_eq!(s.pids, Some(2));
        let mem = s.memory.expect("memory");
        assert_eq!((mem.working_set_bytes, mem.usage_bytes), (150, 170));
        let none = sum_samples(&[]);
        assert!(none.cpu_ns.is_none() && none.memory.is_none());
        let limited = RawMem {
            limit_bytes: Some(1000),
            working_set_bytes: 300,
            ..RawMem::default()
        };
        assert_eq!(
            memory_stats(&limited, SystemTime::UNIX_EPOCH).available_bytes,
            Some(700)
        );
        assert_eq!(
            memory_stats(&m(1), SystemTime::UNIX_EPOCH).available_bytes,
            None
        );
    }

    #[test]
    fn only_cpu_and_memory_drops_the_rest() {
        let s = Summary {
            node: NodeStats {
                node_name: "n".into(),
                fs: Some(FsStats::default()),
                cpu: Some(CpuStats::default()),
                ..NodeStats::default()
            },
            pods: vec![PodStats {
                containers: vec![ContainerStats {
                    name: "c".into(),
                    rootfs: Some(FsStats::default()),
                    memory: Some(MemoryStats::default()),
                    ..ContainerStats::default()
                }],
                volume: vec![VolumeStats::default()],
                ..PodStats::default()
            }],
        };
        let v = serde_json::to_value(cpu_and_memory_only(&s)).expect("json");
        assert!(v["node"].get("fs").is_none());
        assert!(v["node"].get("cpu").is_some());
        assert!(v["pods"][0].get("volume").is_none());
        assert!(v["pods"][0]["containers"][0].get("rootfs").is_none());
        assert!(v["pods"][0]["containers"][0].get("memory").is_some());
    }

    #[test]
    fn the_writable_layer_is_the_upperdir_of_the_overlay_at_root() {
        let info = "\
1541 1450 0:123 / / rw,relatime - overlay overlay rw,lowerdir=/r/snapshots/1/fs,upperdir=/r/snap\\040shots/7/fs,workdir=/r/snapshots/7/work
1542 1541 0:125 / /proc rw,nosuid - proc proc rw
1550 1541 8:1 /var/lib/k/pods/u/volumes/data /data rw - ext4 /dev/sda1 rw
";
        assert_eq!(
            root_upper_dir(info),
            Some(PathBuf::from("/r/snap shots/7/fs"))
        );
        // Not an overlay at `/` (an overlay mounted elsewhere does not count).
        let other =
            "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n2 1 0:5 / /x rw - overlay o rw,upperdir=/u\n";
        assert_eq!(root_upper_dir(other), None);
        assert_eq!(root_upper_dir(""), None);
    }
}
