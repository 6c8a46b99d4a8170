//! The eviction manager's wiring into this kubelet: its inputs (the node's signals,
//! `allocatableMemory.available` from the container manager's `kubepods` cgroup, the
//! pod manager's pods that still run, their usage from the `stats` loop's last
//! snapshot — each container's working set, writable layer and logs — and the bytes
//! of their emptyDir volumes from a bounded scan), the `containerfs.*` thresholds
//! derived at start, and its kill path (upstream `killPodNow`): the pod's status
//! becomes Failed, reason `Evicted`, with a `DisruptionTarget` condition, and the pod
//! workers stop it with the eviction's grace, as any kill. Also admission under
//! pressure (§9.4) for the sync loop. The image filesystem is the runtime's root
//! directory as it says at start (Docker's `DockerRootDir`, containerd's
//! `containerdRootDir`), else `/var/lib/docker` on Docker.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};

use crate::config::KubeletConfig;
use crate::eviction::api::{derive_container_fs_thresholds, parse_threshold_config, Signal};
use crate::eviction::helpers::{ContainerUsage, Observation, Observations, PodUsage};
use crate::eviction::signals::{disk_usage, NodeSignals};
use crate::eviction::{Config, Evictor, Inputs, Manager, PressureState, MONITORING_PERIOD};
use crate::metrics::KubeletMetrics;
use crate::pod_workers::{Kill, PodWorkers, Work};
use crate::status::manager::PodManagerView;
use crate::status::StatusCache;
use base::loops::{Loops, Periodic};

/// The eviction loop's name.
pub(super) const THREAD: &str = "eviction";
/// Entries one emptyDir scan may visit: a volume with more is skipped this pass.
const DU_BUDGET: usize = 20_000;
/// Upstream's eviction reason (pod status and event).
pub(super) const REASON: &str = "Evicted";
/// Where Docker keeps its images when `/info` has not said otherwise.
const DOCKER_ROOT: &str = "/var/lib/docker";

/// The eviction manager's settings from the flags; Err with upstream's words.
pub(super) fn config(cfg: &KubeletConfig) -> Result<Config, crate::eviction::api::ThresholdError> {
    let thresholds = parse_threshold_config(
        cfg.eviction_hard.as_deref(),
        cfg.eviction_soft.as_deref().unwrap_or(""),
        cfg.eviction_soft_grace_period.as_deref().unwrap_or(""),
        cfg.eviction_minimum_reclaim.as_deref().unwrap_or(""),
    )?;
    Ok(Config {
        thresholds,
        pressure_transition_period: cfg.eviction_pressure_transition_period,
        max_pod_grace_period: Duration::from_secs(u64::from(cfg.eviction_max_pod_grace_period)),
        local_storage_capacity_isolation: true,
    })
}

/// What the loop needs from the kubelet.
pub(super) struct Parts {
    pub(super) view: Arc<PodManagerView>,
    pub(super) statuses: Arc<crate::status::StatusCache>,
    pub(super) workers: Arc<PodWorkers>,
    /// The resource analyzer's figures (the containers' working sets and disk use).
    pub(super) stats: Arc<crate::stats::analyzer::StatsProvider>,
    pub(super) metrics: Arc<KubeletMetrics>,
    pub(super) state: Arc<PressureState>,
    /// Container and image GC, the node-level reclaim tried before evicting a pod.
    pub(super) gc: Option<crate::gc::Gc>,
    /// The container manager: where the `kubepods` cgroup is
    /// (`allocatableMemory.available`).
    pub(super) cm: Arc<crate::cm::ContainerManager>,
    /// The pods' allocatable memory in bytes (capacity − reserved − hard eviction).
    pub(super) allocatable_memory: i128,
}

/// The image filesystem's directory: the runtime's root as its info says, else
/// Docker's default on Docker; None when neither is known (no imagefs signals).
pub(super) fn image_dir(info: Option<runtime::RuntimeInfo>, docker: bool) -> Option<PathBuf> {
    let dir = match info.map(|i| i.root_dir).filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d),
        None if docker => PathBuf::from(DOCKER_ROOT),
        None => return None,
    };
    dir.is_dir().then_some(dir)
}

/// Starts the `eviction` loop (every 10 s); `image_dir` is the image filesystem
/// ([`image_dir`]).
pub(super) fn start(
    loops: &Loops,
    cfg: &KubeletConfig,
    mut config: Config,
    parts: Parts,
    image_dir: Option<PathBuf>,
) -> Result<(), base::loops::SpawnError> {
    let signals = NodeSignals::host(cfg.root_dir.clone(), image_dir);
    let dedicated = signals.dedicated_image_fs();
    let (thresholds, warnings) = derive_container_fs_thresholds(&config.thresholds, dedicated);
    for w in warnings {
        log::warn!("eviction manager: {w}");
    }
    config.thresholds = thresholds;
    let inputs = KubeletInputs {
        cm: parts.cm,
        allocatable_memory: parts.allocatable_memory,
        signals,
        root_dir: cfg.root_dir.clone(),
        view: parts.view,
        statuses: parts.statuses.clone(),
        stats: parts.stats,
    };
    let evictor = KubeletEvictor {
        statuses: parts.statuses,
        workers: parts.workers,
        recent: Vec::new(),
    };
    let mut manager = Manager::new(config, &cfg.node_name, Box::new(inputs), Box::new(evictor))
        .with_state(parts.state)
        .with_metrics(parts.metrics);
    if let Some(gc) = parts.gc {
        // Upstream's disk reclaim: every dead container, then every unused image —
        // the images only while image GC is on (`--image-gc-high-threshold` under 100;
        // upstream deletes them even then).
        let images = (cfg.image_gc_high_threshold_percent < 100).then(|| gc.clone());
        manager = manager.with_reclaimer(
            "containers",
            Box::new(move || gc.collect_containers().map(drop).map_err(|e| e.to_string())),
        );
        if let Some(images) = images {
            manager = manager.with_reclaimer(
                "images",
                Box::new(move || {
                    images
                        .delete_unused_images()
                        .map(drop)
                        .map_err(|e| e.to_string())
                }),
            );
        }
    }
    loops.spawn_periodic(
        Periodic {
            name: THREAD.into(),
            period: MONITORING_PERIOD,
            wake: None,
        },
        move || {
            manager.tick(std::time::Instant::now());
            Ok::<(), std::convert::Infallible>(())
        },
    )
}

struct KubeletInputs {
    cm: Arc<crate::cm::ContainerManager>,
    allocatable_memory: i128,
    signals: NodeSignals,
    root_dir: PathBuf,
    view: Arc<PodManagerView>,
    statuses: Arc<StatusCache>,
    stats: Arc<crate::stats::analyzer::StatsProvider>,
}

impl Inputs for KubeletInputs {
    fn observe(&mut self) -> Observations {
        let mut out = self.signals.observe();
        let pods = self
            .cm
            .pods_cgroup()
            .and_then(|kubepods| self.signals.pods_memory(&kubepods, self.allocatable_memory));
        if let Some((available, capacity)) = pods {
            out.insert(
                Signal::AllocatableMemoryAvailable,
                Observation {
                    available,
                    capacity,
                    time: std::time::Instant::now(),
                },
            );
        }
        out
    }

    fn active_pods(&mut self) -> Vec<Arc<Pod>> {
        self.view
            .get()
            .pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| {
                let uid = p.metadata.uid.as_deref().unwrap_or_default();
                let st = self.statuses.get(uid);
                // Known to this kubelet and not done.
                st.is_some_and(|s| !crate::status::is_terminal_phase(s.phase.as_deref()))
            })
            .cloned()
            .collect()
    }

    fn pod_usage(&mut self, pods: &[Arc<Pod>], fresh: bool) -> BTreeMap<String, PodUsage> {
        let mut out: BTreeMap<String, PodUsage> = BTreeMap::new();
        // The containers' figures are the resource analyzer's last sample (upstream's
        // summary provider): a working set and a writable layer + logs each, read once
        // for both. A pod it has not sampled yet has none. The working sets are sampled
        // only while somebody reads them: ranking for an eviction asks for them.
        // While nobody reads the stats, only the pods with a container's
        // ephemeral-storage limit have their disks measured.
        self.stats.want_disk(
            pods.iter()
                .filter(|p| crate::eviction::helpers::has_container_storage_limit(p))
                .filter_map(|p| p.metadata.uid.clone())
                .collect(),
        );
        let snapshot = if fresh {
            self.stats.demand(crate::stats::DEMAND_WAIT)
        } else {
            self.stats.latest()
        };
        for ps in &snapshot.summary.pods {
            let usage = out.entry(ps.pod_ref.uid.clone()).or_default();
            for c in &ps.containers {
                let used = |fs: &Option<crate::stats::types::FsStats>| {
                    fs.as_ref().and_then(|f| f.used_bytes)
                };
                let ephemeral = match (used(&c.rootfs), used(&c.logs)) {
                    (None, None) => None,
                    (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
                };
                usage.containers.push(ContainerUsage {
                    name: c.name.clone(),
                    working_set: c.memory.as_ref().and_then(|m| m.working_set_bytes),
                    ephemeral,
                });
            }
        }
        // emptyDir use fresher than the analyzer's (its scans are cached a minute):
        // `sizeLimit` is enforced on it.
        for p in pods {
            let Some(uid) = p.metadata.uid.as_deref() else {
                continue;
            };
            let dirs = p
                .spec
                .iter()
                .flat_map(|s| s.volumes.iter().flatten())
                .filter(|v| v.empty_dir.is_some());
            for v in dirs {
                let dir = self
                    .root_dir
                    .join("pods")
                    .join(uid)
                    .join("volumes/kubernetes.io~empty-dir")
                    .join(&v.name);
                if let Some(bytes) = disk_usage(&dir, DU_BUDGET) {
                    out.entry(uid.to_string())
                        .or_default()
                        .volumes
                        .insert(v.name.clone(), bytes);
                }
            }
        }
        out
    }
}

struct KubeletEvictor {
    statuses: Arc<StatusCache>,
    workers: Arc<PodWorkers>,
    /// Evictions of the last [`REASSERT_FOR`]: (UID, message, when).
    recent: Vec<(String, String, std::time::Instant)>,
}

/// How long an eviction's status is re-applied when a sync that was in flight when
/// the pod was evicted wrote its own status over it.
const REASSERT_FOR: Duration = Duration::from_secs(120);

impl Evictor for KubeletEvictor {
    fn evict(&mut self, pod: &Pod, grace: Duration, message: &str) -> bool {
        let Some(uid) = pod.metadata.uid.as_deref() else {
            return false;
        };
        let mut st = self
            .statuses
            .get(uid)
            .map(|s| (*s).clone())
            .unwrap_or_default();
        evicted_status(&mut st, message, std::time::SystemTime::now());
        self.statuses.set(uid, st);
        self.recent.push((
            uid.to_string(),
            message.to_string(),
            std::time::Instant::now(),
        ));
        self.workers.update_pod(
            uid,
            Work::Kill(Kill {
                pod: Some(Arc::new(pod.clone())),
                grace: Some(grace),
                remove: false,
            }),
        );
        true
    }

    fn tick(&mut self) {
        self.recent.retain(|(_, _, at)| at.elapsed() < REASSERT_FOR);
        for (uid, message, _) in &self.recent {
            let Some(st) = self.statuses.get(uid) else {
                continue;
            };
            if st.reason.as_deref() != Some(REASON) {
                let mut st = (*st).clone();
                evicted_status(&mut st, message, std::time::SystemTime::now());
                self.statuses.set(uid, st);
            }
        }
    }
}

/// An evicted pod's status (upstream `evictPod`'s status function): Failed, reason
/// `Evicted`, the message, and the `DisruptionTarget` condition
/// (`TerminationByKubelet`).
pub(super) fn evicted_status(st: &mut PodStatus, message: &str, now: std::time::SystemTime) {
    st.phase = Some("Failed".into());
    st.reason = Some(REASON.into());
    st.message = Some(message.into());
    let conds = st.conditions.get_or_insert_with(Vec::new);
    conds.retain(|c| c.type_ != "DisruptionTarget");
    conds.push(PodCondition {
        type_: "DisruptionTarget".into(),
        status: "True".into(),
        reason: Some("TerminationByKubelet".into()),
        message: Some(message.into()),
        last_transition_time: Some(base::time::k8s_time(now)),
        ..Default::default()
    });
}

/// Admission under pressure (upstream's eviction admit handler, §9.4), as one of the
/// sync loop's admit handlers: a refused pod is rejected with reason `Evicted` and the
/// message `The node had condition: [..]. `, before the resource fit is checked.
pub(super) struct PressureAdmit(pub(super) Arc<PressureState>);

impl crate::admission::AdmitHandler for PressureAdmit {
    fn admit(&self, pod: &Pod, _others: &[&Pod]) -> Option<crate::admission::Rejection> {
        self.0
            .admit(pod)
            .map(|message| crate::admission::Rejection {
                reason: REASON.into(),
                message,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_image_filesystem_is_the_runtimes_root_else_dockers_default_on_docker() {
        let tmp = base::testutil::TempDir::new("ev-imagedir");
        let info = |root: &str| {
            Some(runtime::RuntimeInfo {
                root_dir: root.into(),
                ..Default::default()
            })
        };
        let root = tmp.0.display().to_string();
        // containerd's root, whichever runtime said it.
        assert_eq!(image_dir(info(&root), false), Some(tmp.0.clone()));
        assert_eq!(image_dir(info(&root), true), Some(tmp.0.clone()));
        // A CRI runtime that does not say: no imagefs signals, not Docker's directory.
        assert_eq!(image_dir(info(""), false), None);
        assert_eq!(image_dir(None, false), None);
        // A root that is not there: none either.
        assert_eq!(image_dir(info(&format!("{root}/gone")), false), None);
    }

    #[test]
    fn evicted_status_is_failed_with_a_disruption_target() {
        let mut st = PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        };
        evicted_status(
            &mut st,
            "The node was low on resource: memory. ",
            std::time::SystemTime::now(),
        );
        assert_eq!(st.phase.as_deref(), Some("Failed"));
        assert_eq!(st.reason.as_deref(), Some("Evicted"));
        let c = &st.conditions.as_ref().expect("conditions")[0];
        assert_eq!(c.type_, "DisruptionTarget");
        assert_eq!(c.reason.as_deref(), Some("TerminationByKubelet"));
    }

    #[test]
    fn under_disk_pressure_admission_rejects_with_the_condition() {
        use crate::admission::AdmitHandler;
        let state = Arc::new(PressureState::default());
        let handler = PressureAdmit(state.clone());
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}
        }))
        .expect("pod");
        assert!(handler.admit(&pod, &[]).is_none());
        state.set(vec![crate::eviction::api::Condition::DiskPressure]);
        let r = handler.admit(&pod, &[]).expect("rejected");
        assert_eq!(r.reason, "Evicted");
        assert_eq!(r.message, "The node had condition: [DiskPressure]. ");
    }

    #[test]
    fn an_evicted_status_overwritten_by_a_sync_in_flight_is_applied_again() {
        let statuses = Arc::new(StatusCache::default());
        let mut e = KubeletEvictor {
            statuses: statuses.clone(),
            workers: Arc::new(PodWorkers::default()),
            recent: Vec::new(),
        };
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "uid": "u1"},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}))
        .expect("pod");
        assert!(e.evict(&pod, Duration::ZERO, "m. "));
        assert_eq!(
            statuses.get("u1").and_then(|s| s.reason.clone()).as_deref(),
            Some("Evicted")
        );
        statuses.set(
            "u1",
            PodStatus {
                phase: Some("Running".into()),
                ..Default::default()
            },
        );
        e.tick();
        let st = statuses.get("u1").expect("status");
        assert_eq!(st.phase.as_deref(), Some("Failed"));
        assert_eq!(st.message.as_deref(), Some("m. "));
    }

    #[test]
    fn flags_become_thresholds() {
        let args = [
            "rkubelet".to_string(),
            "--eviction-hard=memory.available<1Gi".into(),
            "--eviction-pressure-transition-period=30s".into(),
        ];
        let cfg = match crate::config::load(args.to_vec()) {
            Ok(crate::config::Loaded::Run(cfg)) => cfg,
            other => panic!("config: {other:?}"),
        };
        let c = config(&cfg).expect("valid");
        assert_eq!(c.thresholds.len(), 1);
        assert_eq!(c.pressure_transition_period, Duration::from_secs(30));
    }
}
