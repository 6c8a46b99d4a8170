//! `make bench`: the cost of container GC and what it keeps on disk.
//!
//! 1. One container GC pass over 110 dead containers (110 pods' containers, one dead
//!    instance each, which the policy keeps: the steady cost), then a pass that
//!    removes them all (their pods gone): wall time and this process's CPU, beside
//!    dockerd's CPU for the same pass.
//! 2. Ten crash-looping pods under a real rkubelet with the default policy for
//!    `GC_BENCH_MINUTES` (default 4; 0 skips it): containers kept and bytes under Docker's
//!    container directories, sampled every 30 s (flat after the first minute is the
//!    target).
#![allow(clippy::disallowed_methods)] // clippy.toml's sort ban is for shipped code

#[allow(dead_code)] // this bench needs only the process helpers
mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use docker::Docker;
use k8s_openapi::api::core::v1::Pod;
use rkubelet::gc::{ContainerGc, GcPolicy, PodState};
use rkubelet::kuberuntime::container::dns::DnsSettings;
use rkubelet::kuberuntime::container::NodeContext;
use rkubelet::kuberuntime::{ManagerConfig, RuntimeManager};
use rkubelet::pod_workers::PodWorkers;
use rkubelet::status::manager::{PodManagerView, PodSnapshot};
use rkubelet::volume::VolumeManager;
use runtime::config::{ContainerConfig, PodSandboxConfig};
use runtime::{ContainerState, Runtime};

const BUSYBOX: &str = "rkubelet/busybox:1.35";
const PAUSE: &str = "rkubelet/pause:3.10";
const SOCK: &str = "unix:///var/run/docker.sock";

/// This process's CPU time, in seconds (nanosecond clock: one pass is well under a
/// clock tick).
fn self_cpu() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills the struct we own.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

fn dockerd_pid() -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        (comm.trim() == "dockerd").then_some(pid)
    })
}

fn publish(view: &PodManagerView, uids: &[String]) {
    view.publish(PodSnapshot {
        pods: uids
            .iter()
            .map(|u| {
                let mut p = Pod::default();
                p.metadata.uid = Some(u.clone());
                Arc::new(p)
            })
            .collect(),
        mirrors: vec![],
        sources_ready: true,
    });
}

fn gc_pass_cost() {
    let docker: Arc<dyn Runtime> = Arc::new(Docker::connect(SOCK).expect("docker"));
    let node = format!("bench-gc-{}", std::process::id());
    let dir = std::env::temp_dir().join(&node);
    std::fs::create_dir_all(&dir).expect("dir");
    let manager = Arc::new(RuntimeManager::new(
        docker.clone(),
        ManagerConfig {
            node_name: node.clone(),
            pod_infra_image: Some(PAUSE.into()),
            node: NodeContext {
                root_dir: dir.clone(),
                host_ips: vec![],
                dns: DnsSettings {
                    cluster_dns: vec![],
                    cluster_domain: String::new(),
                    resolv_conf: String::new(),
                },
                allocatable: Default::default(),
                volumes: Arc::new(VolumeManager::new(
                    dir.clone(),
                    docker.clone(),
                    node.clone(),
                    0,
                )),
            },
            logs: Default::default(),
        },
    ));
    let view = Arc::new(PodManagerView::default());
    let gc = ContainerGc::new(
        docker.clone(),
        manager,
        &node,
        GcPolicy::default(),
        PodState {
            pods: view.clone(),
            workers: Arc::new(PodWorkers::default()),
        },
    );
    // 110 dead containers (created, never started), one per pod.
    let uids: Vec<String> = (0..110).map(|i| format!("{node}-uid-{i}")).collect();
    for (i, uid) in uids.iter().enumerate() {
        let labels = BTreeMap::from([
            ("io.rkubelet.node".to_string(), node.clone()),
            ("io.kubernetes.pod.uid".to_string(), uid.clone()),
            ("io.kubernetes.pod.name".to_string(), format!("p{i}")),
            ("io.kubernetes.pod.namespace".to_string(), "default".into()),
            ("io.kubernetes.container.name".to_string(), "c".into()),
            (
                "annotation.io.kubernetes.container.restartCount".to_string(),
                "0".into(),
            ),
        ]);
        docker
            .create_container(
                "",
                &ContainerConfig {
                    args: Some(vec!["true".into()]),
                    labels,
                    ..ContainerConfig::named(format!("k8s_c_p{i}_default_{uid}_0"), BUSYBOX)
                },
                &PodSandboxConfig::default(),
            )
            .expect("create");
    }
    publish(&view, &uids);
    let dockerd = dockerd_pid();
    let measure = |what: &str| {
        let d0 = dockerd.map(common::cpu_ticks).unwrap_or(0);
        let (c0, t0) = (self_cpu(), Instant::now());
        let removed = gc.collect().expect("gc pass");
        let (cpu, wall) = (self_cpu() - c0, t0.elapsed());
        let d = dockerd.map(common::cpu_ticks).unwrap_or(0) - d0;
        println!(
            "{what:<44} removed {removed:>3}  wall {:>7.1} ms  rkubelet CPU {:>6.2} ms  \
             dockerd CPU {:>6} ms",
            wall.as_secs_f64() * 1e3,
            cpu * 1e3,
            d * 10
        );
    };
    measure("GC pass, 110 dead containers, all kept");
    measure("GC pass, 110 dead containers, all kept (2)");
    publish(&view, &[]);
    measure("GC pass, 110 dead containers of gone pods");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Bytes of regular files under `dir`.
fn du(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => du(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map(|m| m.len()).unwrap_or(0),
            _ => 0,
        })
        .sum()
}

fn crash_loop_disk() {
    let minutes: u64 = std::env::var("GC_BENCH_MINUTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    let docker = Docker::connect(SOCK).expect("docker");
    let node = format!("bench-crash-{}", std::process::id());
    let dir = std::env::temp_dir().join(&node);
    std::fs::create_dir_all(dir.join("manifests")).expect("dir");
    for i in 0..10 {
        // 10 KB of log, then a crash.
        let body = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: crash{i}\nspec:\n  \
             terminationGracePeriodSeconds: 0\n  containers:\n  - name: c\n    image: {BUSYBOX}\n    \
             command: [\"sh\", \"-c\", \"yes 0123456789012345678901234567890123456789 | head -c 10240; exit 1\"]\n"
        );
        common::write_manifest(&dir.join("manifests"), &format!("c{i}.yaml"), &body);
    }
    let (mut child, _, _) = common::spawn_kubelet_with(&dir, &node, PAUSE, &[]);
    let began = Instant::now();
    let cpu0 = common::cpu_ticks(child.id());
    println!("\n10 crash-looping pods, default GC policy, {minutes} min:");
    println!(
        "{:>6}  {:>10}  {:>6}  {:>12}",
        "min", "containers", "dead", "bytes"
    );
    let filter = [format!("io.rkubelet.node={node}")];
    while began.elapsed() < Duration::from_secs(minutes * 60) {
        std::thread::sleep(Duration::from_secs(30));
        let list = docker.list_containers(&filter).unwrap_or_default();
        let dead = list
            .iter()
            .filter(|c| c.state != ContainerState::Running)
            .count();
        let bytes: u64 = list
            .iter()
            .map(|c| du(&Path::new("/var/lib/docker/containers").join(&c.id)))
            .sum();
        println!(
            "{:>6.1}  {:>10}  {:>6}  {:>12}",
            began.elapsed().as_secs_f64() / 60.0,
            list.len(),
            dead,
            bytes
        );
    }
    let cpu = (common::cpu_ticks(child.id()) - cpu0) as f64 / 100.0;
    println!(
        "rkubelet CPU over the run: {cpu:.1} s ({:.2} % of a core)",
        cpu * 100.0 / began.elapsed().as_secs_f64()
    );
    let _ = child.kill();
    let _ = child.wait();
    for c in docker.list_containers(&filter).unwrap_or_default() {
        let _ = docker.remove_container(&c.id);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    gc_pass_cost();
    // GC_BENCH_MINUTES=0: the pass cost only.
    if std::env::var("GC_BENCH_MINUTES").ok().as_deref() != Some("0") {
        crash_loop_disk();
    }
}
