//! Container and image GC over a `FakeRuntime`: what a pass removes, what it keeps.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use super::*;
use crate::kuberuntime::container::dns::DnsSettings;
use crate::kuberuntime::container::NodeContext;
use crate::kuberuntime::ManagerConfig;
use crate::status::manager::PodSnapshot;
use crate::volume::VolumeManager;
use base::testutil::TempDir;
use runtime::config::{ContainerConfig, PodSandboxConfig};
use runtime::fake::{FakeClock, FakeRuntime, Fault, Op};

const NODE: &str = "node1";
const IMAGE: &str = "busybox:1";

struct World {
    rt: Arc<FakeRuntime>,
    clock: FakeClock,
    gc: ContainerGc,
    view: Arc<PodManagerView>,
    _dir: TempDir,
}

fn world(policy: GcPolicy) -> World {
    let clock = FakeClock::default();
    let rt = Arc::new(FakeRuntime::new(clock.clone()).with_image(IMAGE));
    let dir = TempDir::new("gc");
    let runtime: Arc<dyn Runtime> = rt.clone();
    let manager = Arc::new(RuntimeManager::new(
        runtime.clone(),
        ManagerConfig {
            node_name: NODE.into(),
            pod_infra_image: Some(IMAGE.into()),
            node: NodeContext {
                root_dir: dir.0.clone(),
                host_ips: vec![],
                dns: DnsSettings {
                    cluster_dns: vec![],
                    cluster_domain: String::new(),
                    resolv_conf: String::new(),
                },
                allocatable: Default::default(),
                volumes: Arc::new(VolumeManager::new(
                    dir.0.clone(),
                    runtime.clone(),
                    NODE.into(),
                    0,
                )),
            },
            logs: Default::default(),
        },
    ));
    let view = Arc::new(PodManagerView::default());
    let gc = ContainerGc::new(
        runtime,
        manager,
        NODE,
        policy,
        PodState {
            pods: view.clone(),
            workers: Arc::new(PodWorkers::default()),
        },
    );
    World {
        rt,
        clock,
        gc,
        view,
        _dir: dir,
    }
}

impl World {
    /// A container of pod `uid` (`POD` for its sandbox), attempt `rc`, that ran and
    /// exited (or still runs); a second later than the last one.
    fn container(&self, uid: &str, name: &str, rc: u32, running: bool) -> String {
        self.clock.advance(Duration::from_secs(1));
        let mut l = BTreeMap::from([
            (labels::MANAGED_BY_NODE.to_string(), NODE.to_string()),
            (labels::POD_UID.to_string(), uid.to_string()),
            (labels::POD_NAME.to_string(), "web".to_string()),
            (labels::POD_NAMESPACE.to_string(), "default".to_string()),
            (labels::CONTAINER_NAME.to_string(), name.to_string()),
            (labels::RESTART_COUNT.to_string(), rc.to_string()),
        ]);
        if name == "POD" {
            l.insert(labels::DOCKER_TYPE.into(), labels::TYPE_SANDBOX.into());
        }
        let id = self
            .rt
            .create_container(
                "",
                &ContainerConfig {
                    labels: l,
                    ..ContainerConfig::named(format!("k8s_{name}_{uid}_{rc}"), IMAGE)
                },
                &PodSandboxConfig::default(),
            )
            .expect("create");
        self.rt.start_container(&id).expect("start");
        if !running {
            self.rt.kill_container(&id, "SIGKILL").expect("kill");
        }
        id
    }

    fn publish(&self, uids: &[&str], ready: bool) {
        let pods = uids
            .iter()
            .map(|u| {
                let mut p = Pod::default();
                p.metadata.uid = Some(u.to_string());
                Arc::new(p)
            })
            .collect();
        self.view.publish(PodSnapshot {
            pods,
            mirrors: vec![],
            sources_ready: ready,
        });
    }

    fn ids(&self) -> Vec<String> {
        let mut v: Vec<String> = self.rt.containers().into_iter().map(|c| c.id).collect();
        base::sort::sort(&mut v);
        v
    }
}

#[test]
fn a_pass_keeps_the_running_and_the_newest_dead_instance_and_the_live_sandbox() {
    let w = world(GcPolicy::default());
    let s0 = w.container("u1", "POD", 0, false);
    let s1 = w.container("u1", "POD", 1, true);
    let _a0 = w.container("u1", "app", 0, false);
    let _a1 = w.container("u1", "app", 1, false);
    let a2 = w.container("u1", "app", 2, false);
    let a3 = w.container("u1", "app", 3, true);
    w.publish(&["u1"], true);
    assert_eq!(w.gc.collect().expect("gc"), 3);
    let mut want = vec![s1, a2, a3];
    base::sort::sort(&mut want);
    assert_eq!(w.ids(), want);
    let _ = s0;
}

#[test]
fn a_gone_pod_leaves_nothing_after_one_pass_but_only_once_sources_are_ready() {
    let w = world(GcPolicy::default());
    w.container("u1", "POD", 0, false);
    w.container("u1", "app", 0, false);
    w.container("u1", "app", 1, false);
    w.publish(&[], false);
    w.gc.collect().expect("gc");
    assert_eq!(
        w.ids().len(),
        2,
        "sources not ready: only the policy's extra goes"
    );
    w.publish(&[], true);
    w.gc.collect().expect("gc");
    assert!(w.ids().is_empty(), "{:?}", w.ids());
}

#[test]
fn the_newest_instance_survives_max_dead_containers_zero() {
    let w = world(GcPolicy {
        max_containers: 0,
        ..GcPolicy::default()
    });
    w.container("u1", "app", 0, false);
    let a1 = w.container("u1", "app", 1, false);
    w.publish(&["u1"], true);
    w.gc.collect().expect("gc");
    assert_eq!(w.ids(), vec![a1], "its restart count lives on its label");
}

#[test]
fn a_died_container_prunes_its_older_instances() {
    let w = world(GcPolicy::default());
    let a0 = w.container("u1", "app", 0, false);
    let a1 = w.container("u1", "app", 1, false);
    let a2 = w.container("u1", "app", 2, false);
    let b0 = w.container("u1", "side", 0, false);
    // The one that died is the newest dead instance: it stays, the older ones go,
    // the other container's are untouched.
    assert_eq!(w.gc.prune_died("u1", &a2).expect("prune"), 2);
    let mut want = vec![a2, b0];
    base::sort::sort(&mut want);
    assert_eq!(w.ids(), want);
    assert!(!w.ids().contains(&a0) && !w.ids().contains(&a1));
}

#[test]
fn a_runtime_failure_is_an_error_not_a_panic() {
    let w = world(GcPolicy::default());
    w.container("u1", "app", 0, false);
    w.container("u1", "app", 1, false);
    w.container("u1", "app", 2, false);
    w.publish(&["u1"], true);
    w.rt.fail(Op::Remove, 1, Fault::Unavailable);
    let e = w.gc.collect().expect_err("one removal failed");
    assert!(e.to_string().contains("remove container"), "{e}");
    // The next pass finishes the job.
    w.gc.collect().expect("gc");
    assert_eq!(w.ids().len(), 1);
}

#[test]
fn image_gc_frees_least_recently_used_first_never_in_use_or_pause() {
    let clock = FakeClock::default();
    let rt = Arc::new(
        FakeRuntime::new(clock)
            .with_image("old:1")
            .with_image("newer:1")
            .with_image("used:1")
            .with_image("pause:1"),
    );
    let runtime: Arc<dyn Runtime> = rt.clone();
    let id = rt
        .create_container(
            "",
            &ContainerConfig {
                ..ContainerConfig::named("c", "used:1")
            },
            &PodSandboxConfig::default(),
        )
        .expect("create");
    let images = ImageGc::new(
        runtime,
        ImagePolicy {
            min_age: Duration::ZERO,
            ..ImagePolicy::default()
        },
        "pause:1",
        NODE,
    );
    // First detection: everything old; then "newer" is used by a container for a
    // while, which makes it more recently used than "old".
    images.detect(SystemTime::now()).expect("detect");
    let n = rt
        .create_container(
            "",
            &ContainerConfig {
                ..ContainerConfig::named("n", "newer:1")
            },
            &PodSandboxConfig::default(),
        )
        .expect("create");
    images.detect(SystemTime::now()).expect("detect");
    rt.remove_container(&n).expect("remove");
    // One image's worth: "old" goes.
    assert_eq!(images.free_space(1).expect("free"), 1 << 20);
    let left = |rt: &FakeRuntime| {
        let mut v: Vec<String> = rt
            .list_images()
            .expect("test value")
            .into_iter()
            .flat_map(|i| i.repo_tags)
            .collect();
        base::sort::sort(&mut v);
        v
    };
    assert_eq!(left(&rt), ["newer:1", "pause:1", "used:1"]);
    // Everything unused: "newer" goes; "used" and the pause image never.
    let e = images.free_space(u64::MAX).expect_err("shortfall");
    assert!(e.to_string().contains("Failed to garbage collect"), "{e}");
    assert_eq!(left(&rt), ["pause:1", "used:1"]);
    let _ = id;
}

#[test]
fn image_gc_never_removes_the_runtimes_own_sandbox_image() {
    // containerd runs sandboxes on its own `sandbox_image`, which need not be the
    // kubelet's `--pod-infra-container-image`.
    let rt = Arc::new(
        FakeRuntime::new(FakeClock::default())
            .with_image("old:1")
            .with_image("docker.io/library/pause:3.9")
            .with_image("pause:1"),
    );
    rt.set_info(runtime::RuntimeInfo {
        sandbox_image: "pause:3.9".into(),
        ..Default::default()
    });
    let runtime: Arc<dyn Runtime> = rt.clone();
    let images = ImageGc::new(
        runtime,
        ImagePolicy {
            min_age: Duration::ZERO,
            ..ImagePolicy::default()
        },
        "pause:1",
        NODE,
    );
    let e = images.free_space(u64::MAX).expect_err("shortfall");
    assert!(e.to_string().contains("Failed to garbage collect"), "{e}");
    let mut left: Vec<String> = rt
        .list_images()
        .expect("list")
        .into_iter()
        .flat_map(|i| i.repo_tags)
        .collect();
    base::sort::sort(&mut left);
    assert_eq!(left, ["docker.io/library/pause:3.9", "pause:1"]);
}
