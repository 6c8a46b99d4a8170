//! Tests that run inside the qemu guest of `hack/cgroup2-guest.sh` (`make
//! test-cgroup2`): on a real cgroup v2 hierarchy set up as systemd sets it up (every
//! controller on v2, handed down from the root, the test in `/init.scope`), with the
//! systemd cgroup driver (the fake runtime answers `systemd`, version 2, as Docker does
//! on current Raspberry Pi OS and Debian). They drive the kubelet over the fake runtime
//! ([`super::testing::Node`]) and check what the kernel shows: `kubepods.slice`, the QoS
//! and pod slices with the `cpu.weight`, `cpu.max` and `memory.max` the container
//! manager writes, node allocatable on `kubepods.slice`, pod slices removed with their
//! pods; the stats readers and the eviction signals on a pod slice with a process in
//! it; and, booted with `cgroup_disable=memory`, the start-up message, the
//! `/healthz?verbose` warning and the refusal of pods with memory limits.
//!
//! The script sets `RKUBELET_CGROUP2_GUEST` to `memory` or `nomemory` (how it booted
//! the kernel, so the detection is checked, not trusted). Anywhere else each test
//! prints that it did not run and passes: this host's cgroups are v1, which the
//! modules' own unit tests and the integration tests cover, as they cover v2 on fake
//! trees.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::testing::{self, pod, Node};
use crate::cm::resources::{burstable_shares, shares_to_weight};
use crate::kuberuntime::container::milli_cpu_to_shares;
use crate::podconfig::Source;
use crate::stats::cgroupfs::{cgroup_of_pid, CgroupFs, CgroupVersion};

/// The cgroup2 mount the kubelet uses, as in the daemon.
const MOUNT: &str = crate::cm::CGROUP_MOUNT;
/// How long a test waits for the kernel or the pod killer (TCG is slow).
const DEADLINE: Duration = Duration::from_secs(60);

/// In the guest: whether the script booted the kernel with the memory controller.
/// Elsewhere None, said on stderr.
fn guest(test: &str) -> Option<bool> {
    let memory = match std::env::var("RKUBELET_CGROUP2_GUEST").as_deref() {
        Ok("memory") => true,
        Ok("nomemory") => false,
        Ok(other) => panic!("RKUBELET_CGROUP2_GUEST={other:?}: expected memory or nomemory"),
        Err(_) => {
            eprintln!("{test}: not run here: it runs in the cgroup v2 guest (make test-cgroup2)");
            return None;
        }
    };
    assert!(
        Path::new(MOUNT).join("cgroup.controllers").exists(),
        "{MOUNT} is no cgroup2 mount"
    );
    Some(memory)
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
        .trim()
        .to_string()
}

fn words(p: &Path) -> Vec<String> {
    read(p).split_whitespace().map(str::to_string).collect()
}

/// Polls `f` until it holds, failing with `what` after [`DEADLINE`].
fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let until = Instant::now() + DEADLINE;
    while !f() {
        assert!(Instant::now() < until, "{what}: not within {DEADLINE:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_memory_controller_is_found_or_reported_once_with_its_fix_in_healthz() {
    let Some(memory) = guest("the_memory_controller_is_found_or_reported") else {
        return;
    };
    let proc_cgroups = std::fs::read_to_string("/proc/cgroups").ok();
    let missing = super::memory_cgroup_missing(Path::new(MOUNT), proc_cgroups.as_deref());
    assert_eq!(
        missing.is_none(),
        memory,
        "{missing:?}; /proc/cgroups:\n{proc_cgroups:?}"
    );
    let (_shutdown, stop) = base::loops::shutdown_channel();
    let loops = base::loops::Loops::new(stop);
    let checks = crate::health::HealthChecks {
        registry: loops.registry(),
        pleg: Arc::default(),
        runtime: Arc::default(),
        network: Arc::default(),
        sync_frequency: Duration::from_secs(1),
        node_warnings: missing
            .clone()
            .map(|w| (super::MEMORY_CGROUP_WARNING.to_string(), w))
            .into_iter()
            .collect(),
    };
    let reply = crate::server::healthz(
        &checks,
        &wire::server::Req::new("GET", "/healthz?verbose"),
        None,
    );
    let body = String::from_utf8_lossy(&reply.body).to_string();
    eprintln!("/healthz?verbose:\n{body}");
    if memory {
        assert!(!body.contains("memory-cgroup"), "{body}");
    } else {
        let why = missing.expect("missing");
        for part in [
            "memory limits cannot be enforced",
            "MemoryCgroupMissing",
            "pods without one run",
            "cgroup_memory=1 cgroup_enable=memory",
        ] {
            assert!(why.contains(part), "{part:?} not in {why:?}");
        }
        assert!(
            body.contains(&format!("warning: memory-cgroup: {why}\n")),
            "{body}"
        );
    }
}

/// A pod's cgroup slice under the mount.
fn slice(rel: &str) -> PathBuf {
    Path::new(MOUNT).join(rel.trim_start_matches('/'))
}

#[test]
fn pods_get_systemd_slices_with_their_limits_and_readable_stats_then_lose_them() {
    let Some(memory) = guest("pods_get_systemd_slices_with_their_limits") else {
        return;
    };
    let rt = testing::runtime(&testing::clock());
    rt.set_info(runtime::RuntimeInfo {
        cgroup_driver: "systemd".into(),
        cgroup_version: "2".into(),
        ..Default::default()
    });
    let mut n = Node::with_memory_cgroup(&rt, &[Source::File], memory);
    let settings = super::node::cm_settings(
        &n.cfg,
        &super::node::node_settings(&n.cfg),
        &crate::nodestatus::machine::read(&n.cfg.root_dir),
    );
    n.snapshot(
        Source::File,
        vec![
            pod(
                "g",
                "u-g-1",
                "{containers: [{name: a, image: 'busybox:1', resources: \
                 {requests: {cpu: 250m, memory: 64Mi}, limits: {cpu: 250m, memory: 64Mi}}}]}",
            ),
            pod(
                "b",
                "u-b-1",
                "{containers: [{name: a, image: 'busybox:1', resources: \
                 {requests: {cpu: 100m}, limits: {cpu: 500m}}}]}",
            ),
            pod(
                "e",
                "u-e-1",
                "{containers: [{name: a, image: 'busybox:1'}]}",
            ),
        ],
    );

    // The hierarchy: kubepods.slice with node allocatable, the QoS slices, handed
    // down cpu and pids (and memory when the kernel has it).
    let handed: Vec<String> = if memory {
        vec!["cpu".into(), "memory".into(), "pids".into()]
    } else {
        vec!["cpu".into(), "pids".into()]
    };
    let kubepods = slice("/kubepods.slice");
    let burstable = kubepods.join("kubepods-burstable.slice");
    let besteffort = kubepods.join("kubepods-besteffort.slice");
    for dir in [&kubepods, &burstable] {
        let on = words(&dir.join("cgroup.subtree_control"));
        assert_eq!(on, handed, "{}", dir.display());
    }
    assert_eq!(
        n.handler.cm.pods_cgroup().as_deref(),
        Some("/kubepods.slice")
    );
    let weight = |milli: i128| {
        shares_to_weight(u64::try_from(milli_cpu_to_shares(milli)).expect("shares")).to_string()
    };
    assert_eq!(
        read(&kubepods.join("cpu.weight")),
        weight(settings.allocatable_cpu_milli)
    );
    assert_eq!(
        read(&burstable.join("cpu.weight")),
        shares_to_weight(burstable_shares([100])).to_string()
    );
    assert_eq!(read(&besteffort.join("cpu.weight")), "1");

    // The pods' slices, handed to the runtime as each sandbox's cgroup parent.
    let b_rel = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podu_b_1.slice";
    let e_rel = "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podu_e_1.slice";
    let g_rel = "/kubepods.slice/kubepods-podu_g_1.slice";
    let (b, e, g) = (slice(b_rel), slice(e_rel), slice(g_rel));
    assert_eq!(
        rt.cgroup_parent("u-b-1").as_deref(),
        Some("kubepods-burstable-podu_b_1.slice")
    );
    assert_eq!(
        rt.cgroup_parent("u-e-1").as_deref(),
        Some("kubepods-besteffort-podu_e_1.slice")
    );
    assert_eq!(read(&b.join("cpu.weight")), weight(100));
    assert_eq!(read(&b.join("cpu.max")), "50000 100000");
    assert_eq!(read(&b.join("pids.max")), "max");
    assert_eq!(read(&e.join("cpu.weight")), "1");
    assert_eq!(read(&e.join("cpu.max")), "max 100000");
    if memory {
        assert_eq!(
            read(&kubepods.join("memory.max")),
            settings.allocatable_memory.to_string()
        );
        assert_eq!(read(&b.join("memory.max")), "max", "no memory limit");
        assert_eq!(
            rt.cgroup_parent("u-g-1").as_deref(),
            Some("kubepods-podu_g_1.slice")
        );
        assert_eq!(read(&g.join("memory.max")), (64u64 << 20).to_string());
        assert_eq!(read(&g.join("cpu.max")), "25000 100000");
        assert_eq!(read(&g.join("cpu.weight")), weight(250));
        assert!(n.running("u-g-1", "a").is_some());
    } else {
        // No memory files anywhere; the pod with a memory limit is refused.
        for dir in [&kubepods, &burstable, &b] {
            assert!(!dir.join("memory.max").exists(), "{}", dir.display());
        }
        assert!(!g.exists());
        assert!(n.containers_of("u-g-1").is_empty(), "never run");
        let st = n.sl.statuses.get("u-g-1").expect("a status");
        assert_eq!(st.phase.as_deref(), Some("Failed"));
        assert_eq!(
            st.reason.as_deref(),
            Some(super::admit::MEMORY_CGROUP_MISSING)
        );
        let message = st.message.clone().unwrap_or_default();
        assert!(
            message.contains("memory limit (64Mi) cannot be enforced")
                && message.contains("cgroup_enable=memory"),
            "{message}"
        );
    }
    assert!(n.running("u-b-1", "a").is_some());
    assert!(n.running("u-e-1", "a").is_some());

    // A process in the burstable pod's slice: it works once moved, then sleeps.
    let mut child = std::process::Command::new("/bin/sh")
        .args([
            "-c",
            "read go; x=$(seq 1 300000 | tail -n 1); exec sleep 600",
        ])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("spawn sh");
    let pid = child.id();
    std::fs::write(b.join("cgroup.procs"), pid.to_string()).expect("move into the pod slice");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"go\n")
        .expect("go");
    let stats = CgroupFs::host();
    assert_eq!(stats.version(), CgroupVersion::V2);
    assert_eq!(
        cgroup_of_pid(Path::new("/proc"), pid, CgroupVersion::V2).expect("its cgroup"),
        b_rel
    );
    wait_for("the work done and only sleep left", || {
        stats.pids(b_rel).ok() == Some(1)
            && read(&Path::new("/proc").join(pid.to_string()).join("comm")) == "sleep"
    });
    let cpu = stats.cpu(b_rel).expect("cpu.stat");
    assert!(cpu.usage_core_nanoseconds > 0, "{cpu:?}");
    let node = stats.node_memory(Path::new("/proc")).expect("node memory");
    let total = crate::stats::cgroupfs::read_meminfo(Path::new("/proc/meminfo"))
        .expect("meminfo")
        .total_bytes;
    assert_eq!(node.limit_bytes, Some(total));
    let signals = crate::eviction::signals::NodeSignals::host(n.cfg.root_dir.clone(), None);
    let (available, capacity) = signals.memory().expect("memory.available");
    assert_eq!(capacity, i128::from(total));
    assert!(
        0 < available && available < capacity,
        "{available}/{capacity}"
    );
    let allocatable = i128::from(settings.allocatable_memory);
    if memory {
        let m = stats.memory(b_rel).expect("memory of the pod slice");
        assert!(m.usage_bytes > 0, "{m:?}");
        assert!(m.working_set_bytes <= m.usage_bytes, "{m:?}");
        assert!(m.rss_bytes > 0, "{m:?}");
        assert_eq!(m.limit_bytes, None, "memory.max is max");
        assert_eq!(stats.memory_limit(g_rel), Some(64 << 20));
        let (available, capacity) = signals
            .pods_memory("/kubepods.slice", i128::MAX)
            .expect("allocatableMemory.available");
        assert_eq!(capacity, allocatable, "the limit of kubepods.slice");
        assert!(available < capacity, "the pod's process is charged");
    } else {
        let err = stats.memory(b_rel).expect_err("no memory.current");
        assert!(err.is_not_found(), "{err}");
        assert_eq!(signals.pods_memory("/kubepods.slice", allocatable), None);
    }

    // Gone with their pods (the process first: a cgroup with one cannot be removed).
    child.kill().expect("kill");
    child.wait().expect("wait");
    n.snapshot(Source::File, vec![]);
    wait_for("the pod slices removed", || {
        !b.exists() && !e.exists() && !g.exists()
    });
    // A slice left by a pod removed while the kubelet was down: `pod-cgroup-gc`'s sweep
    // reads its UID back from the systemd name and removes it.
    let stray = besteffort.join("kubepods-besteffort-podstray_1.slice");
    std::fs::create_dir(&stray).expect("a stray pod slice");
    n.handler
        .cm
        .remove_orphans(&|uid| uid != "stray-1")
        .expect("the sweep");
    assert!(!stray.exists());
    for dir in [besteffort, burstable, kubepods] {
        std::fs::remove_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    }
}
