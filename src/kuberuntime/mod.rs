//! The kubelet's runtime manager (upstream `pkg/kubelet/kuberuntime`): reads a pod's
//! containers from the runtime, decides what to start and stop
//! ([`actions::compute_pod_actions`]), and does it through the [`Runtime`] trait:
//! `SyncPod`, `startContainer` (with the termination-message file; its postStart hook
//! and a sync's container kills are returned for the pod killer, which calls back
//! here), `killContainer` (preStop hook, grace period, sidecar termination order) and
//! `KillPod`.
//!
//! (Over 800 lines: sync, start and kill share the manager's private helpers; the kill
//! steps are the part to move out next, into a `kill.rs`.)
//!
//! It is called only from pod workers and the pod killer, one pod at a time, so it
//! blocks freely. The sync loop never calls it.

pub(crate) mod actions;
pub mod container;
pub(crate) mod hooks;
pub(crate) mod logs;

use base::safepath::{safe_join, UnsafePathError};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::Receiver;
use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Pod};

use crate::images::ImageManager;
use crate::metrics::{KubeletMetrics, CONTAINER, INIT_CONTAINER};
use crate::record;
use actions::{ActionInputs, KillAction, KillReason, PodActions, StartAction};
use backoff::Backoff;
use base::loops::{lock, Never};
use labels::ContainerKind;
use runtime::config::{Mount, PodSandboxConfig};
use runtime::container::cache::PodCache;
use runtime::container::results::ResultsCache;
use runtime::container::{backoff, format_pod, helpers, labels, short, RuntimePod, Waiting};
use runtime::{ContainerDetails, ContainerState, Runtime, RuntimeError};

/// Upstream `minimumGracePeriodInSeconds`: every stop gets at least this long between
/// its signal and SIGKILL, after the preStop hook's time is taken off.
pub(crate) const MIN_GRACE: Duration = Duration::from_secs(2);
/// Upstream `MaxContainerTerminationMessageLength`: bytes read from the end of the
/// termination-message file.
pub(crate) const MAX_TERMINATION_MESSAGE: u64 = 4096;
/// Upstream `MaxContainerTerminationMessageLogLines`: log lines read for
/// `FallbackToLogsOnError`.
pub(crate) const TERMINATION_MESSAGE_LOG_LINES: u64 = 80;
/// Upstream `MaxContainerTerminationMessageLogLength`: bytes kept of those lines.
pub(crate) const TERMINATION_MESSAGE_LOG_BYTES: usize = 2048;
/// Termination messages of exited containers are cached (an exited container never
/// changes); past this many entries the cache starts over, which only costs re-reads.
const MESSAGE_CACHE_ENTRIES: usize = 4096;
/// The sandbox holds only namespaces: no grace needed beyond a moment.
const SANDBOX_STOP_GRACE: Duration = Duration::from_secs(2);
/// A pod's containers as a sync read them serve the next syncs while the PLEG saw no
/// change of the pod, but at most this long: then one resync in five (at the 1 min
/// resync period) lists the pod's containers whatever the PLEG says, a safety net of its
/// own beside the evented PLEG's full relist, and reads them again when the list shows
/// other containers or other states than the kept ones.
pub(crate) const POD_CACHE_MAX_AGE: Duration = Duration::from_secs(5 * 60);

/// Errors of one pod sync, with the pod (and container) they concern.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The runtime failed a call needed for the whole pod.
    #[error("pod {pod}: {what}")]
    Runtime {
        /// `name_namespace(uid)`.
        pod: String,
        /// What the kubelet was doing.
        what: &'static str,
        /// The runtime's error.
        source: RuntimeError,
    },
}

impl SyncError {
    /// True when the sync failed because the runtime is down.
    pub fn runtime_unavailable(&self) -> bool {
        match self {
            SyncError::Runtime { source, .. } => source.is_unavailable(),
        }
    }
}

/// What the caller knows that the sync needs besides the pod. A struct, so that more
/// inputs (probe results) are added without touching every caller.
#[derive(Clone, Debug, Default)]
pub struct SyncInputs {
    /// The pod must not run any more (terminal phase, active deadline passed, being
    /// deleted): stop it, start nothing.
    pub terminal: bool,
    /// The pod's cgroup as the runtime's `CgroupParent` ("" for the runtime's
    /// default): the sandbox and every container are created under it.
    pub cgroup_parent: String,
}

/// What one sync found and decided, for the status computation.
#[derive(Debug, Default)]
pub struct SyncResult {
    /// The pod's containers after the sync's actions.
    pub runtime_pod: RuntimePod,
    /// Containers not started, with their waiting reasons.
    pub waiting: BTreeMap<String, Waiting>,
    /// Sync again after this long even without events (a backoff expires).
    pub requeue_after: Option<Duration>,
    /// Every container and the sandbox must stop, and something still runs: the caller
    /// hands the kill to the pod killer (a slow stop must not hold a pod worker), then
    /// syncs again.
    pub kill_pod: bool,
    /// Containers to stop before anything else of the sync (a failed liveness or
    /// startup probe, a changed spec): the caller hands them to the pod killer (a
    /// signal, then state until the exit or SIGKILL at the deadline) and syncs again
    /// when they are down, which starts what must start. Nothing was started.
    pub kill_containers: Vec<ContainerStop>,
    /// A container this sync started has a postStart hook: the caller has it run
    /// where its wait blocks only this pod, and syncs again when it returned (the
    /// containers after it start then, as upstream's `SyncPod` starts them after the
    /// hook). A failed hook stops the container.
    pub post_start: Option<PostStart>,
    /// The containers this sync started, with their labels: their log links are made
    /// from the pod's status read at the end of the sync (no inspect of its own
    /// between one container's start and the next one's create).
    started: Vec<(String, BTreeMap<String, String>)>,
}

/// A started container's postStart hook, to run off the pod worker
/// ([`RuntimeManager::post_start`]).
#[derive(Debug)]
pub struct PostStart {
    /// The container's spec (the hook, its ports for `httpGet`).
    container: Container,
    /// The started container's ID.
    id: String,
    kind: ContainerKind,
    handler: LifecycleHandler,
    /// The address an `httpGet` hook reaches the pod at.
    hook_ip: String,
}

impl PostStart {
    /// The container's name (for logs and tests).
    pub fn name(&self) -> &str {
        &self.container.name
    }
}

/// What the containers a sync starts need of their sandbox, read once per sync.
struct SandboxFacts<'a> {
    id: &'a str,
    /// What it was run with (regenerated each sync, as upstream's `SyncPod` does): its
    /// containers are created in its cgroup.
    config: &'a PodSandboxConfig,
    /// Its IPs (the node's family first) for the containers' environment and
    /// `/etc/hosts`, or why they could not be read.
    ips: Result<&'a [String], &'a str>,
    /// The address hooks (httpGet) reach the containers at.
    hook_ip: &'a str,
}

/// One container's stop within a pod kill, owned so that it can be carried out on
/// another thread, and in steps: the preStop hook
/// ([`RuntimeManager::pre_stop_in_kill`]), its turn ([`ContainerStop::is_turn`]),
/// the stop signal ([`RuntimeManager::signal_in_kill`]), and SIGKILL when the grace
/// it returns has passed without an exit. Dropping it ends the stop for the stops
/// waiting on it (the sidecars it outlives).
#[derive(Debug)]
pub struct ContainerStop {
    container: ContainerDetails,
    kill: KillAction,
    /// The grace period left: the whole one until the preStop hook took its time.
    grace: Duration,
    /// When the wait for its turn began (after the hook): a sidecar's wait is taken
    /// off its grace in whole seconds, as upstream's `waitForTurn`.
    waiting_since: Option<Instant>,
    /// Closed when the containers this one must outlive (a sidecar's) are down.
    outlive: Vec<Receiver<Never>>,
    /// Dropped when this stop ends: the stops waiting on it go on.
    done: crossbeam_channel::Sender<Never>,
}

impl ContainerStop {
    /// The container's name (for logs and tests).
    pub fn name(&self) -> &str {
        &self.kill.name
    }

    /// The container's ID.
    pub fn id(&self) -> &str {
        &self.container.id
    }

    /// Whether this stop may send its signal now (upstream `waitForTurn` returns):
    /// every container it must outlive is down, or its grace is used up waiting, or
    /// it has no grace left. The first call starts the wait; it never blocks.
    pub fn is_turn(&mut self, now: Instant) -> bool {
        if self.grace.is_zero() {
            return true;
        }
        let outlived = self.outlive.iter().all(|rx| {
            matches!(
                rx.try_recv(),
                Err(crossbeam_channel::TryRecvError::Disconnected)
            )
        });
        let since = *self.waiting_since.get_or_insert(now);
        outlived || now >= base::time::saturating_deadline(since, self.grace)
    }

    /// When a stop that is not yet its turn becomes so anyway (its grace used up
    /// waiting); None before the wait began.
    pub fn turn_deadline(&self) -> Option<Instant> {
        self.waiting_since
            .map(|since| base::time::saturating_deadline(since, self.grace))
    }
}

/// A pod kill, planned (upstream `killContainersWithSyncResult` with
/// `newTerminationOrdering`): the running containers' stops in an order a pool can
/// take them in — every stop that waits for nobody first, then the sidecars from the
/// last to the first — and the pod's containers as they were.
#[derive(Debug)]
pub struct KillPlan {
    /// Carry these out, in parallel as far as the caller can; any stop waits only for
    /// stops before it in the list.
    pub stops: Vec<ContainerStop>,
    runtime_pod: RuntimePod,
}

impl KillPlan {
    /// The stops, and the pod's containers to hand to
    /// [`RuntimeManager::finish_kill`].
    pub fn into_parts(self) -> (Vec<ContainerStop>, RuntimePod) {
        (self.stops, self.runtime_pod)
    }
}

/// A whole-pod kill (upstream `KillPod`): what the pod killer carries out.
#[derive(Clone, Debug)]
pub struct KillPodRequest {
    /// The pod's UID.
    pub uid: String,
    /// The pod's spec when known (hooks, grace periods, sidecar order); orphans have
    /// none and are stopped with what their labels say.
    pub pod: Option<Arc<Pod>>,
    /// Replaces every container's grace period (a deletion's grace, an orphan's).
    pub grace_override: Option<Duration>,
    /// Remove the containers and the pod's directory afterwards (the pod is gone from
    /// its source), rather than keep them for status and logs (the pod is done).
    pub remove: bool,
}

/// Settings of the runtime manager.
#[derive(Clone, Debug)]
pub struct ManagerConfig {
    /// The node's name (the `io.rkubelet.node` label).
    pub node_name: String,
    /// `--pod-infra-container-image`, made present before a sandbox runs; None: the
    /// runtime runs its own sandbox image (CRI's `sandbox_image`).
    pub pod_infra_image: Option<String>,
    /// What container configs need from the node: root dir, IPs, DNS, volumes.
    pub node: container::NodeContext,
    /// Container log rotation and the log links' directories.
    pub logs: logs::LogSettings,
}

/// Syncs and kills pods through the runtime. Shared by all pod workers and the pod
/// killer.
#[derive(Debug)]
pub struct RuntimeManager {
    runtime: Arc<dyn Runtime>,
    cfg: ManagerConfig,
    /// Shared with the sync loop's housekeeping (through [`BackoffGc`]) so that it can
    /// expire entries without holding the whole manager.
    backoff: Arc<Mutex<Backoff<SystemTime>>>,
    images: ImageManager,
    /// Termination messages of exited containers by container ID.
    messages: Mutex<HashMap<String, String>>,
    /// Liveness and startup results (upstream's `livenessManager`/`startupManager`).
    probes: Option<Arc<ResultsCache>>,
    /// Started pods and containers, and their failures.
    metrics: Arc<KubeletMetrics>,
    /// Each pod's cgroup parent, from its last sync's inputs (forgotten when the
    /// pod's containers are removed).
    cgroup_parents: Mutex<HashMap<String, String>>,
    /// Vouches for what a sync read of a pod (per-pod generations).
    pleg: Option<Arc<crate::pleg::PlegShared>>,
    /// Upstream's pod cache: each pod as the last sync read it, while the PLEG vouches
    /// that nothing of it changed since.
    pod_cache: PodCache,
    /// The runtime's name once it has answered `version` ([`RuntimeManager::runtime_type`]).
    runtime_type: Mutex<Option<String>>,
}

/// The per-container directory of a pod (upstream `getPodContainerDir`):
/// `<root>/pods/<uid>/containers/<name>`; a UID or name that is not one plain name is
/// refused.
pub(crate) fn pod_container_dir(
    root: &Path,
    uid: &str,
    name: &str,
) -> Result<PathBuf, UnsafePathError> {
    let pod = safe_join(&root.join("pods"), uid)?;
    safe_join(&pod.join("containers"), name)
}

impl RuntimeManager {
    /// A manager over `runtime`.
    pub fn new(runtime: Arc<dyn Runtime>, cfg: ManagerConfig) -> Self {
        let images = ImageManager::new(runtime.clone(), &cfg.node.root_dir);
        images.set_objects(cfg.node.volumes.objects().clone());
        RuntimeManager {
            images,
            runtime,
            cfg,
            backoff: Arc::new(Mutex::new(Backoff::default())),
            messages: Mutex::new(HashMap::new()),
            probes: None,
            metrics: Arc::default(),
            cgroup_parents: Mutex::new(HashMap::new()),
            pleg: None,
            pod_cache: PodCache::default(),
            runtime_type: Mutex::new(None),
        }
    }

    /// The runtime's name (upstream `runtimeName`: `docker`, `containerd`, `cri-o`), the
    /// scheme of its container IDs in pod statuses: the `version` answer's, asked once
    /// (no lock held while asking). Until the runtime answers, `docker` for Docker and
    /// `cri` for a CRI runtime.
    pub(crate) fn runtime_type(&self) -> String {
        if let Some(t) = lock(&self.runtime_type).clone() {
            return t;
        }
        match self.runtime.version() {
            Ok(v) => {
                *lock(&self.runtime_type) = Some(v.runtime_name.clone());
                v.runtime_name
            }
            Err(e) => {
                log::debug!("the runtime's name: {e}");
                if self.cfg.logs.runtime_writes_files {
                    "cri".into()
                } else {
                    "docker".into()
                }
            }
        }
    }

    /// Syncs read a pod's containers from the runtime only when `pleg` saw them change
    /// since the last read (or [`POD_CACHE_MAX_AGE`] passed); without it, every sync
    /// reads them.
    pub fn with_pleg(mut self, pleg: Arc<crate::pleg::PlegShared>) -> Self {
        self.pleg = Some(pleg);
        self
    }

    /// Records started pods and containers (and their failures) into `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<KubeletMetrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Kills (and restarts) containers whose liveness or startup probe failed, by the
    /// results in `probes`.
    pub fn with_probe_results(mut self, probes: Arc<ResultsCache>) -> Self {
        self.probes = Some(probes);
        self
    }

    /// The runtime.
    pub fn runtime(&self) -> &Arc<dyn Runtime> {
        &self.runtime
    }

    /// Reads a pod's containers from the runtime: one filtered list, then an inspect of
    /// each (containers removed in between are skipped). Exited containers carry their
    /// termination message after the runtime's own (upstream
    /// `convertToKubeContainerStatus`).
    pub fn get_pod_status(&self, uid: &str) -> Result<RuntimePod, RuntimeError> {
        let mut rp = RuntimePod::default();
        for s in self.runtime.list_containers(&self.pod_filter(uid))? {
            let mut d = match self.runtime.inspect_container(&s.id) {
                Ok(d) => d,
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(e),
            };
            if d.labels.get(labels::DOCKER_TYPE).map(String::as_str) == Some(labels::TYPE_SANDBOX) {
                rp.sandboxes.push(d);
            } else {
                if d.state == ContainerState::Exited {
                    let msg = self.termination_message(uid, &d);
                    if !msg.is_empty() {
                        if !d.error.is_empty() {
                            d.error.push_str(": ");
                        }
                        d.error.push_str(&msg);
                    }
                }
                rp.containers.push(d);
            }
        }
        rp.sort();
        Ok(rp)
    }

    /// The runtime's filter for one pod's containers (its sandboxes included).
    fn pod_filter(&self, uid: &str) -> Vec<String> {
        vec![
            format!("{}={}", labels::MANAGED_BY_NODE, self.cfg.node_name),
            format!("{}={}", labels::POD_UID, uid),
        ]
    }

    /// The pod's containers for a sync: the last read while the PLEG vouches that none
    /// changed since (same generation, within [`POD_CACHE_MAX_AGE`]; past it, while the
    /// runtime's list of the pod still agrees), else read now.
    fn sync_pod_status(&self, uid: &str) -> Result<RuntimePod, RuntimeError> {
        self.sync_pod_status_at(uid, Instant::now())
    }

    /// [`Self::sync_pod_status`] at `now` (the tests' later time).
    pub(crate) fn sync_pod_status_at(
        &self,
        uid: &str,
        now: Instant,
    ) -> Result<RuntimePod, RuntimeError> {
        if let Some(g) = self.pod_generation(uid, now) {
            if let Some(pod) = self.pod_cache.get(uid, g, now, POD_CACHE_MAX_AGE) {
                return Ok(pod);
            }
            if let Some(pod) = self.pod_cache.get(uid, g, now, Duration::MAX) {
                let listed = self.runtime.list_containers(&self.pod_filter(uid))?;
                if lists_the_same(&pod, &listed) {
                    self.pod_cache.renew(uid, g, now);
                    return Ok(pod);
                }
                log::debug!("pod {uid}: the runtime lists other containers than the kept ones; reading them again");
            }
        }
        self.read_pod_status(uid)
    }

    /// The PLEG's generation of the pod, when there is a PLEG that vouches for it.
    fn pod_generation(&self, uid: &str, now: Instant) -> Option<u64> {
        self.pleg.as_ref().and_then(|p| p.pod_generation(uid, now))
    }

    /// Reads the pod's containers and keeps them for the next sync when the PLEG's
    /// generation of the pod, taken before the read, vouches for them.
    fn read_pod_status(&self, uid: &str) -> Result<RuntimePod, RuntimeError> {
        let now = Instant::now();
        let generation = self.pod_generation(uid, now);
        let rp = self.get_pod_status(uid);
        match (&rp, generation) {
            (Ok(pod), Some(generation)) => self.pod_cache.set(uid, generation, now, pod),
            _ => self.pod_cache.remove(uid),
        }
        rp
    }

    /// Removes one dead container instance with what the kubelet keeps beside it: its
    /// log links, its termination message (cached and on disk). Container GC and the
    /// pruning before a restart both remove through here. Gone is not an error.
    pub fn remove_dead_container(
        &self,
        id: &str,
        container_labels: &BTreeMap<String, String>,
    ) -> Result<(), RuntimeError> {
        self.runtime.remove_container(id)?;
        logs::remove_links(&self.cfg.logs, container_labels, id);
        lock(&self.messages).remove(id);
        let uid = container_labels
            .get(labels::POD_UID)
            .map(String::as_str)
            .unwrap_or_default();
        let name = container_labels
            .get(labels::CONTAINER_NAME)
            .map(String::as_str)
            .unwrap_or_default();
        if !uid.is_empty() && !name.is_empty() {
            let rc = labels::restart_count(container_labels);
            if let Some(f) = self.message_file(uid, name, rc) {
                let _ = std::fs::remove_file(f);
            }
        }
        Ok(())
    }

    /// Makes the log links of the containers a sync started (dockershim's
    /// `createContainerLogSymlink`) from Docker's log paths in the status read at the
    /// end of the sync. A failure is logged; the container runs anyway.
    fn link_logs(
        &self,
        started: &[(String, BTreeMap<String, String>)],
        status: Option<&RuntimePod>,
    ) {
        if !self.cfg.logs.enabled() {
            return;
        }
        for (id, container_labels) in started {
            // The status read after the sync has each started container's log path;
            // one it missed (removed since, or the read failed) is inspected alone.
            let listed = status.and_then(|rp| rp.containers.iter().find(|d| d.id == *id));
            let log_path = match listed {
                Some(d) => Ok(d.log_path.clone()),
                None => self
                    .runtime
                    .inspect_container(id)
                    .map(|d| d.log_path)
                    .map_err(|e| base::loops::error_chain(&e)),
            };
            let made = log_path.and_then(|p| {
                logs::make_links(&self.cfg.logs, container_labels, id, &p)
                    .map_err(|e| e.to_string())
            });
            if let Err(e) = made {
                log::warn!("cannot make the log links of container {}: {e}", short(id));
            }
        }
    }

    /// The log settings (container GC sweeps the links).
    pub fn log_settings(&self) -> &logs::LogSettings {
        &self.cfg.logs
    }

    /// The termination-message file of one container instance.
    fn message_file(&self, uid: &str, name: &str, restart_count: u32) -> Option<PathBuf> {
        pod_container_dir(&self.cfg.node.root_dir, uid, name)
            .map(|d| d.join(restart_count.to_string()))
            .ok()
    }

    /// Upstream `getTerminationMessage` + `readLastStringFromContainerLogs`: the last
    /// 4096 bytes of the termination-message file; with `FallbackToLogsOnError`, a
    /// failed container (that ran) with an empty file gives the end of its log instead.
    fn termination_message(&self, uid: &str, d: &ContainerDetails) -> String {
        if let Some(m) = lock(&self.messages).get(&d.id) {
            return m.clone();
        }
        let policy = d
            .labels
            .get(labels::TERMINATION_MESSAGE_POLICY)
            .map(String::as_str);
        let cannot_run = d.finished_at.is_none() && d.exit_code != 0;
        let fallback = policy == Some("FallbackToLogsOnError") && d.exit_code != 0 && !cannot_run;
        let has_path = d
            .labels
            .get(labels::TERMINATION_MESSAGE_PATH)
            .is_some_and(|p| !p.is_empty());
        let name = d
            .labels
            .get(labels::CONTAINER_NAME)
            .map(String::as_str)
            .unwrap_or_default();
        let file = self.message_file(uid, name, labels::restart_count(&d.labels));
        let (mut msg, check_logs) = match (has_path, file) {
            (true, Some(path)) => match read_tail(&path, MAX_TERMINATION_MESSAGE) {
                Ok(data) => {
                    let empty = data.is_empty();
                    (
                        String::from_utf8_lossy(&data).into_owned(),
                        fallback && empty,
                    )
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => (String::new(), fallback),
                Err(e) => (
                    format!("Error on reading termination log {}: {e}", path.display()),
                    false,
                ),
            },
            _ => (String::new(), fallback),
        };
        if check_logs {
            msg = match self
                .runtime
                .logs(&d.id, Some(TERMINATION_MESSAGE_LOG_LINES))
            {
                Ok(raw) => {
                    let start = raw.len().saturating_sub(TERMINATION_MESSAGE_LOG_BYTES);
                    String::from_utf8_lossy(&raw[start..]).into_owned()
                }
                Err(e) => format!(
                    "Error on reading termination message from logs: {}",
                    base::loops::error_chain(&e)
                ),
            };
        }
        let mut cache = lock(&self.messages);
        if cache.len() >= MESSAGE_CACHE_ENTRIES {
            cache.clear();
        }
        cache.insert(d.id.clone(), msg.clone());
        msg
    }

    /// One sync of a pod that should run (upstream `SyncPod`): compute the actions and
    /// carry them out, except a whole-pod kill while something runs, which is returned
    /// for the pod killer.
    pub fn sync_pod(&self, pod: &Pod, inp: &SyncInputs) -> Result<SyncResult, SyncError> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let fmt_pod = format_pod(pod);
        let rt_err = |what: &'static str| {
            let pod = fmt_pod.clone();
            move |source| SyncError::Runtime { pod, what, source }
        };
        if inp.cgroup_parent.is_empty() {
            lock(&self.cgroup_parents).remove(&uid);
        } else {
            lock(&self.cgroup_parents).insert(uid.clone(), inp.cgroup_parent.clone());
        }
        let rp = self
            .sync_pod_status(&uid)
            .map_err(rt_err("reading pod status"))?;
        // Upstream's remount on every sync: configMap, secret, downwardAPI and
        // projected volumes follow their objects, the pod's labels and token refreshes
        // (failures are logged and recorded as FailedMount events by the set-up).
        if !inp.terminal {
            // A pod seen for the first time reads its objects afresh (volumes, env,
            // pull secrets), whatever another pod left in the cache.
            self.cfg.node.volumes.objects().register_pod(pod);
        }
        if !inp.terminal && rp.running_sandbox().is_some() {
            let spec = pod.spec.as_ref();
            if spec
                .and_then(|s| s.volumes.as_ref())
                .is_some_and(|vs| vs.iter().any(crate::volume::is_api_volume))
            {
                self.cfg.node.volumes.setup_pod(pod);
            }
        } else {
            // Not running: the `object-refresh` loop leaves its volumes alone.
            self.cfg.node.volumes.stop_refreshing(&uid);
        }
        let acts = {
            let b = lock(&self.backoff);
            let inputs = ActionInputs {
                backoff: &b,
                now: SystemTime::now(),
                terminal: inp.terminal,
            };
            let mut acts = actions::compute_pod_actions(pod, &rp, &inputs);
            if let Some(p) = &self.probes {
                let failed = |id: &str| p.failed_probe(id);
                actions::kill_unhealthy(&mut acts, pod, &rp, &failed, &inputs);
            }
            acts
        };
        for (name, w) in &acts.waiting {
            if w.reason == "CrashLoopBackOff" {
                record::event(
                    pod,
                    Some(name),
                    true,
                    "BackOff",
                    &format!("Back-off restarting failed container {name} in pod {fmt_pod}"),
                );
            }
        }
        let mut result = SyncResult {
            waiting: acts.waiting.clone(),
            requeue_after: acts.requeue_after,
            runtime_pod: RuntimePod::default(),
            kill_pod: false,
            kill_containers: Vec::new(),
            post_start: None,
            started: Vec::new(),
        };
        if acts.kill_pod && rp.any_running() {
            log::info!("pod {fmt_pod}: all containers and the sandbox must stop");
            result.kill_pod = true;
            result.runtime_pod = rp;
            return Ok(result);
        }
        // Upstream `SyncPod` kills these first, blocking on each grace period; here they
        // are the pod killer's, and the starts wait for the sync after them.
        for k in &acts.kill {
            if let Some(d) = rp.containers.iter().find(|d| d.id == k.id) {
                log::info!("pod {fmt_pod}: killing container {}: {}", k.name, k.message);
                let stop = self.plan_container_stop(Some(pod), d, k.clone());
                result.kill_containers.push(stop);
            }
        }
        if !result.kill_containers.is_empty() {
            result.runtime_pod = rp;
            return Ok(result);
        }
        if !has_work(&acts) {
            result.runtime_pod = rp;
            return Ok(result);
        }
        let executed = self.execute(pod, &rp, &acts, &mut result);
        let status = self.read_pod_status(&uid);
        self.link_logs(&result.started, status.as_ref().ok());
        executed.map_err(rt_err("syncing"))?;
        result.runtime_pod = status.map_err(rt_err("reading pod status after sync"))?;
        Ok(result)
    }

    fn execute(
        &self,
        pod: &Pod,
        rp: &RuntimePod,
        acts: &PodActions,
        result: &mut SyncResult,
    ) -> Result<(), RuntimeError> {
        let sandbox_id = match acts.create_sandbox {
            Some(attempt) => {
                if !rp.sandboxes.is_empty() {
                    // Upstream `SyncPod`, when the pod had a sandbox before.
                    record::event(
                        pod,
                        None,
                        false,
                        "SandboxChanged",
                        "Pod sandbox changed, it will be killed and re-created.",
                    );
                }
                // A new sandbox runs the init containers again: their old records would
                // say they are done (upstream `purgeInitContainers`).
                for d in &rp.containers {
                    if runtime::container::kind_of(d) == ContainerKind::Init
                        && d.state != ContainerState::Running
                    {
                        let _ = self.runtime.remove_container(&d.id);
                    }
                }
                let id = self.create_sandbox(pod, attempt)?;
                // Old sandboxes are dead weight once a new one runs.
                for s in &rp.sandboxes {
                    if s.state != ContainerState::Running {
                        let _ = self.runtime.remove_container(&s.id);
                    }
                }
                Some(id)
            }
            None => acts.sandbox_id.clone(),
        };
        let Some(sandbox_id) = sandbox_id else {
            return Ok(());
        };
        // The sandbox's IP, read once for all the containers this sync starts (their
        // environment) and their hooks.
        let host_network = pod.spec.as_ref().and_then(|s| s.host_network) == Some(true);
        let node_ipv6 = self
            .cfg
            .node
            .host_ips
            .first()
            .is_some_and(|ip| ip.contains(':'));
        let sandbox_ips: Result<Vec<String>, String> = if host_network {
            Ok(Vec::new())
        } else {
            match acts.create_sandbox {
                Some(_) => match self.runtime.inspect_container(&sandbox_id) {
                    Ok(d) => Ok(d.pod_ips(node_ipv6)),
                    Err(e) if e.is_unavailable() => return Err(e),
                    Err(e) => Err(base::loops::error_chain(&e)),
                },
                None => Ok(rp
                    .running_sandbox()
                    .map(|s| s.pod_ips(node_ipv6))
                    .unwrap_or_default()),
            }
        };
        let attempt = match acts.create_sandbox {
            Some(attempt) => attempt,
            None => rp
                .sandboxes
                .first()
                .and_then(|s| labels::parse_name(&s.name))
                .map_or(0, |p| p.attempt),
        };
        let sandbox_config = self.sandbox_config(pod, attempt)?;
        let sandbox = SandboxFacts {
            id: &sandbox_id,
            config: &sandbox_config,
            ips: sandbox_ips.as_deref().map_err(String::as_str),
            // Host-network containers listen on the node: loopback reaches them.
            hook_ip: if host_network {
                "127.0.0.1"
            } else {
                sandbox_ips
                    .as_ref()
                    .ok()
                    .and_then(|ips| ips.first())
                    .map_or("", String::as_str)
            },
        };
        let spec = pod.spec.clone().unwrap_or_default();
        let inits = spec.init_containers.clone().unwrap_or_default();
        for s in &acts.start_init {
            let Some(c) = inits.get(s.index) else {
                continue;
            };
            let failed = self.start_one(pod, c, s, &sandbox, rp, result)?;
            if failed && !labels::is_sidecar(c) {
                // A regular init container that did not start stops the rest.
                return Ok(());
            }
            if result.post_start.is_some() {
                // The rest start once its hook has returned.
                return Ok(());
            }
        }
        for s in &acts.start {
            let Some(c) = spec.containers.get(s.index) else {
                continue;
            };
            self.start_one(pod, c, s, &sandbox, rp, result)?;
            if result.post_start.is_some() {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Starts one container and records why it did not start; true when it did not.
    #[allow(clippy::too_many_arguments)]
    fn start_one(
        &self,
        pod: &Pod,
        c: &Container,
        s: &StartAction,
        sandbox: &SandboxFacts<'_>,
        rp: &RuntimePod,
        result: &mut SyncResult,
    ) -> Result<bool, RuntimeError> {
        let started = self.start_container(pod, c, s, sandbox, rp, result);
        self.count_start(s.kind, &started);
        let Some(w) = started? else {
            return Ok(false);
        };
        // Repeats every sync of every waiting container: rate limited per pod and
        // reason, as events are. A pull in progress is no warning (its events say it).
        if w.reason != crate::images::PULLING_REASON {
            crate::record::warn_limited(pod, &w.reason, || {
                format!(
                    "pod {}: container {}: {}: {}",
                    format_pod(pod),
                    c.name,
                    w.reason,
                    w.message
                )
            });
        }
        result.waiting.insert(c.name.clone(), w);
        let again = backoff::INITIAL;
        result.requeue_after = Some(result.requeue_after.map_or(again, |r| r.min(again)));
        Ok(true)
    }

    /// Counts a container start (upstream `SyncPod`'s `start`): an attempt, and its
    /// failure with the waiting reason as the `code`. A container still waiting for
    /// its image is no attempt yet (upstream pulls inside the attempt; here the pull
    /// runs on a puller and the attempt comes with the sync after it). A runtime that
    /// could not be reached fails the sync, not the container: counted as an attempt
    /// only.
    fn count_start(&self, kind: ContainerKind, started: &Result<Option<Waiting>, RuntimeError>) {
        let kind = match kind {
            ContainerKind::Init => INIT_CONTAINER,
            ContainerKind::App => CONTAINER,
        };
        match started {
            Ok(Some(w)) if w.reason == crate::images::PULLING_REASON => {}
            Ok(Some(w)) => {
                self.metrics.started_containers.inc([kind]);
                // Reasons are a fixed set (ErrImagePull, CreateContainerError, …).
                self.metrics
                    .started_containers_errors
                    .inc([w.reason.as_str(), kind]);
            }
            Ok(None) | Err(_) => self.metrics.started_containers.inc([kind]),
        }
    }

    /// The grace period of one container kill (upstream `setTerminationGracePeriod`):
    /// the override, else the pod's deletion grace, else a probe's own grace for a probe
    /// kill, else the pod's (or, for an orphan, the label's) termination grace.
    fn grace_of(
        pod: Option<&Pod>,
        spec: Option<&Container>,
        d: &ContainerDetails,
        reason: KillReason,
        grace_override: Option<Duration>,
    ) -> Duration {
        if let Some(g) = grace_override {
            return g;
        }
        let secs = match pod {
            Some(p) => {
                let probe = spec.and_then(|c| match reason {
                    KillReason::LivenessProbe => c.liveness_probe.as_ref(),
                    KillReason::StartupProbe => c.startup_probe.as_ref(),
                    _ => None,
                });
                p.metadata
                    .deletion_grace_period_seconds
                    .or_else(|| probe.and_then(|p| p.termination_grace_period_seconds))
                    .unwrap_or_else(|| labels::grace_period_seconds(p))
            }
            None => labels::grace_label(&d.labels),
        };
        // Any non-negative int64 is a valid grace period: capped, never overflowing.
        base::time::secs(secs)
    }

    /// Stops one container on this thread (upstream `killContainer`): the `Killing`
    /// event, the preStop hook within the grace period (its time taken off the grace),
    /// the wait for the containers this one must outlive (sidecars), then the stop
    /// signal and SIGKILL after what is left of the grace, at least [`MIN_GRACE`], in
    /// one blocking runtime stop. Used only by the pod killer's inline fallback (its
    /// queue full); the pod killer itself carries stops out in steps, and a sync hands
    /// its container kills to it.
    fn kill_container(
        &self,
        pod: Option<&Pod>,
        d: &ContainerDetails,
        k: &KillAction,
        grace_override: Option<Duration>,
        outlive: &[Receiver<Never>],
    ) -> Result<(), RuntimeError> {
        let spec = pod.and_then(|p| find_container(p, &k.name, k.kind));
        let grace = Self::grace_of(pod, spec, d, k.reason, grace_override);
        let mut grace = self.pre_stop(pod, d, k, grace);
        if !outlive.is_empty() && !grace.is_zero() {
            let began = Instant::now();
            let deadline = base::time::saturating_deadline(began, grace);
            for rx in outlive {
                // Disconnected: that container is down. Timeout: the grace is used up.
                if let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
                    rx.recv_deadline(deadline)
                {
                    break;
                }
            }
            grace = grace.saturating_sub(Duration::from_secs(began.elapsed().as_secs()));
        }
        let grace = grace.max(MIN_GRACE);
        log::info!(
            "Killing container with a grace period: container {} ({}) grace {}s",
            k.name,
            short(&d.id),
            grace.as_secs()
        );
        self.runtime.stop_container(&d.id, grace)
    }

    /// The first part of a container stop (upstream `killContainer` up to
    /// `waitForTurn`): the `Killing` event and the preStop hook, run within `grace`
    /// and its whole seconds taken off. Returns the grace left. Blocks for the hook.
    fn pre_stop(
        &self,
        pod: Option<&Pod>,
        d: &ContainerDetails,
        k: &KillAction,
        mut grace: Duration,
    ) -> Duration {
        let spec = pod.and_then(|p| find_container(p, &k.name, k.kind));
        let message = if k.message.is_empty() {
            format!("Stopping container {}", k.name)
        } else {
            k.message.clone()
        };
        let fallback_pod;
        let event_pod = match pod {
            Some(p) => p,
            None => {
                fallback_pod = labels_pod(d);
                &fallback_pod
            }
        };
        record::event(event_pod, Some(&k.name), false, "Killing", &message);
        let pre_stop: Option<LifecycleHandler> = match spec {
            Some(c) => c.lifecycle.as_ref().and_then(|l| l.pre_stop.clone()),
            None => labels::pre_stop_label(&d.labels),
        };
        if let Some(h) = pre_stop.filter(|_| !grace.is_zero()) {
            let began = Instant::now();
            let c = spec.cloned().unwrap_or_else(|| Container {
                name: k.name.clone(),
                ..Default::default()
            });
            let pod_ip = self.pod_ip_of(d);
            let target = hooks::HookTarget {
                container_id: &d.id,
                pod_ip: &pod_ip,
            };
            if let Err(msg) = hooks::run(self.runtime.as_ref(), event_pod, &c, &h, &target, grace) {
                log::warn!("PreStop hook failed: {msg}");
                // Upstream keeps the hook's message out of the event (secrets).
                record::event(
                    event_pod,
                    Some(&k.name),
                    true,
                    "FailedPreStopHook",
                    "PreStopHook failed",
                );
            }
            // Upstream counts whole seconds taken (rounding down).
            grace = grace.saturating_sub(Duration::from_secs(began.elapsed().as_secs()));
        }
        grace
    }

    /// The IP of the pod a container belongs to, for an `httpGet` preStop hook.
    fn pod_ip_of(&self, d: &ContainerDetails) -> String {
        let Some(sb) = d.labels.get(labels::SANDBOX_ID) else {
            return String::new();
        };
        match self.runtime.inspect_container(sb) {
            Ok(s) if s.host_network => "127.0.0.1".into(),
            Ok(s) => s.ip_address,
            Err(_) => String::new(),
        }
    }

    /// Kills a pod on this thread (upstream `KillPod`), one container after another in
    /// the plan's order: the pod killer's fallback when it cannot take the kill.
    pub fn kill_pod(&self, req: &KillPodRequest) -> Result<(), RuntimeError> {
        let (stops, runtime_pod) = self.plan_kill(req)?.into_parts();
        for s in stops {
            self.stop_in_kill(req, s);
        }
        self.finish_kill(req, &runtime_pod)
    }

    /// Reads the pod's containers and plans the stops of the running ones: each stops
    /// with its preStop hook and grace; a sidecar waits (within its grace) until the
    /// app containers and the sidecars after it have stopped, so sidecars stop last,
    /// in reverse order. Carry the stops out with [`RuntimeManager::stop_in_kill`],
    /// then call [`RuntimeManager::finish_kill`].
    pub fn plan_kill(&self, req: &KillPodRequest) -> Result<KillPlan, RuntimeError> {
        let rp = self.get_pod_status(&req.uid)?;
        let running: Vec<&ContainerDetails> = rp
            .containers
            .iter()
            .filter(|c| c.state == ContainerState::Running)
            .collect();
        let pod = req.pod.as_deref();
        let mut stops: Vec<ContainerStop> = termination_order(pod, &running)
            .into_iter()
            .map(|(c, outlive, done)| {
                let name = c
                    .labels
                    .get(labels::CONTAINER_NAME)
                    .cloned()
                    .unwrap_or_default();
                let kill = KillAction {
                    id: c.id.clone(),
                    name,
                    kind: runtime::container::kind_of(c),
                    message: String::new(),
                    reason: KillReason::Other,
                };
                let spec = pod.and_then(|p| find_container(p, &kill.name, kill.kind));
                let grace = Self::grace_of(pod, spec, c, kill.reason, req.grace_override);
                ContainerStop {
                    container: c.clone(),
                    kill,
                    grace,
                    waiting_since: None,
                    outlive,
                    done,
                }
            })
            .collect();
        // A sidecar outlives every stop with fewer waits than its own (the apps, the
        // later sidecars): ordering by that count puts every stop after the ones it
        // waits for, so a pool taking them in order never waits on one it has not
        // started.
        base::sort::sort_by_key(&mut stops, |s| s.outlive.len());
        Ok(KillPlan {
            stops,
            runtime_pod: rp,
        })
    }

    /// Plans the stop of one container of a sync (a failed probe, a changed spec, a
    /// failed postStart hook): its preStop hook and its grace (upstream
    /// `killContainer` without an override); it waits for no other container.
    pub fn plan_container_stop(
        &self,
        pod: Option<&Pod>,
        d: &ContainerDetails,
        kill: KillAction,
    ) -> ContainerStop {
        let spec = pod.and_then(|p| find_container(p, &kill.name, kill.kind));
        let grace = Self::grace_of(pod, spec, d, kill.reason, None);
        let (done, _) = crossbeam_channel::bounded::<Never>(0);
        ContainerStop {
            container: d.clone(),
            kill,
            grace,
            waiting_since: None,
            outlive: Vec::new(),
            done,
        }
    }

    /// Carries out one stop of a planned kill on this thread, blocking for its hook,
    /// its turn and its grace (upstream `killContainer`); its failure is logged (the
    /// pod's other stops go on, as upstream's). The pod killer's inline fallback.
    pub fn stop_in_kill(&self, req: &KillPodRequest, s: ContainerStop) {
        let ContainerStop {
            container,
            kill,
            outlive,
            done,
            ..
        } = s;
        let pod = req.pod.as_deref();
        if let Err(e) = self.kill_container(pod, &container, &kill, req.grace_override, &outlive) {
            log::warn!(
                "stopping container {}: {}",
                kill.name,
                base::loops::error_chain(&e)
            );
        }
        drop(done);
    }

    /// The first step of a planned stop, which blocks for the preStop hook (bounded
    /// by the grace period; most containers have none): the `Killing` event and the
    /// hook, whose whole seconds are taken off the stop's grace.
    pub fn pre_stop_in_kill(&self, req: &KillPodRequest, s: &mut ContainerStop) {
        s.grace = self.pre_stop(req.pod.as_deref(), &s.container, &s.kill, s.grace);
    }

    /// Sends a planned stop's stop signal once it is its turn
    /// ([`ContainerStop::is_turn`]) and returns at once with the grace period after
    /// which SIGKILL is due ([`RuntimeManager::sigkill`]): what is left after the hook
    /// and the wait for its turn (whole seconds), at least [`MIN_GRACE`].
    pub fn signal_in_kill(
        &self,
        s: &ContainerStop,
        now: Instant,
    ) -> Result<Duration, RuntimeError> {
        let waited = s
            .waiting_since
            .map_or(Duration::ZERO, |w| now.saturating_duration_since(w));
        let grace = s
            .grace
            .saturating_sub(Duration::from_secs(waited.as_secs()))
            .max(MIN_GRACE);
        log::info!(
            "Killing container with a grace period: container {} ({}) grace {}s",
            s.kill.name,
            short(&s.container.id),
            grace.as_secs()
        );
        self.runtime
            .kill_container(&s.container.id, s.container.stop_signal())
            .map(|()| grace)
    }

    /// Ends a stop whose grace period has passed without an exit.
    pub fn sigkill(&self, id: &str, name: &str) -> Result<(), RuntimeError> {
        log::info!(
            "container {name} ({}) outlived its grace period: SIGKILL",
            short(id)
        );
        self.runtime.kill_container(id, runtime::SIGKILL)
    }

    /// The second step of a planned kill, once every container stop is done: sends
    /// each running sandbox its stop signal. Returns the sandboxes signalled, each with
    /// the grace after which SIGKILL is due; a failure is logged and that sandbox left
    /// to the removal.
    pub fn signal_sandboxes(&self, plan_pod: &RuntimePod) -> Vec<(String, Duration)> {
        plan_pod
            .sandboxes
            .iter()
            .filter(|s| s.state == ContainerState::Running)
            .filter_map(
                |s| match self.runtime.kill_container(&s.id, s.stop_signal()) {
                    Ok(()) => Some((s.id.clone(), SANDBOX_STOP_GRACE)),
                    Err(e) => {
                        log::warn!(
                            "stopping sandbox {}: {}",
                            s.name,
                            base::loops::error_chain(&e)
                        );
                        None
                    }
                },
            )
            .collect()
    }

    /// The IDs of this node's running containers, from one filtered list: how the pod
    /// killer tells which signalled containers have exited.
    pub fn running_container_ids(&self) -> Result<HashSet<String>, RuntimeError> {
        let filter = [format!(
            "{}={}",
            labels::MANAGED_BY_NODE,
            self.cfg.node_name
        )];
        Ok(self
            .runtime
            .list_containers(&filter)?
            .into_iter()
            .filter(|c| c.state == ContainerState::Running)
            .map(|c| c.id)
            .collect())
    }

    /// Ends a planned kill on this thread once its stops are done: stops the
    /// sandboxes (blocking for their grace), then [`RuntimeManager::remove_killed`].
    pub fn finish_kill(
        &self,
        req: &KillPodRequest,
        plan_pod: &RuntimePod,
    ) -> Result<(), RuntimeError> {
        for s in plan_pod
            .sandboxes
            .iter()
            .filter(|s| s.state == ContainerState::Running)
        {
            if let Err(e) = self.runtime.stop_container(&s.id, SANDBOX_STOP_GRACE) {
                log::warn!(
                    "stopping sandbox {}: {}",
                    s.name,
                    base::loops::error_chain(&e)
                );
            }
        }
        self.remove_killed(req, plan_pod)
    }

    /// The last step of a planned kill, once its containers and sandboxes are down:
    /// with `remove`, removes them.
    pub fn remove_killed(
        &self,
        req: &KillPodRequest,
        plan_pod: &RuntimePod,
    ) -> Result<(), RuntimeError> {
        if req.remove {
            for c in &plan_pod.containers {
                self.runtime.remove_container(&c.id)?;
                // Its log links (and on CRI its log files) go with it, as container
                // GC's removals take them.
                logs::remove_links(&self.cfg.logs, &c.labels, &c.id);
            }
            for s in &plan_pod.sandboxes {
                self.runtime.remove_container(&s.id)?;
            }
            lock(&self.cgroup_parents).remove(&req.uid);
            self.pod_cache.remove(&req.uid);
            // The pod's directory (volumes, termination messages) is the volume
            // manager's to remove: it unmounts tmpfs volumes first, and waits until
            // Docker lists no container of the pod.
        }
        Ok(())
    }

    /// The pod's cgroup parent its last sync was given ("" for the runtime's default).
    fn cgroup_parent(&self, pod: &Pod) -> String {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        lock(&self.cgroup_parents)
            .get(uid)
            .cloned()
            .unwrap_or_default()
    }

    /// Creates and starts a pod's sandbox; returns its ID. Counted as a started pod,
    /// and as an error when it fails (upstream `StartedPodsTotal`,
    /// `StartedPodsErrorsTotal`).
    fn create_sandbox(&self, pod: &Pod, attempt: u32) -> Result<String, RuntimeError> {
        self.metrics.started_pods.inc([]);
        let r = self.create_sandbox_inner(pod, attempt);
        if let Err(e) = &r {
            self.metrics.started_pods_errors.inc([]);
            // Upstream `SyncPod`: the pod waits in ContainerCreating and is retried.
            if !e.is_unavailable() {
                record::event(
                    pod,
                    None,
                    true,
                    "FailedCreatePodSandBox",
                    &format!(
                        "Failed to create pod sandbox: {}",
                        base::loops::error_chain(e)
                    ),
                );
            }
        }
        r
    }

    fn create_sandbox_inner(&self, pod: &Pod, attempt: u32) -> Result<String, RuntimeError> {
        if let Some(image) = &self.cfg.pod_infra_image {
            if let Some(w) = self.images.ensure_sandbox_image(pod, image)? {
                return Err(RuntimeError::Api {
                    op: format!("pull sandbox image {image}"),
                    status: 0,
                    message: w.message,
                });
            }
        }
        let cfg = self.sandbox_config(pod, attempt)?;
        let id = self.runtime.run_pod_sandbox(&cfg)?;
        log::info!(
            "pod {}: started sandbox {} (attempt {attempt})",
            format_pod(pod),
            short(&id)
        );
        Ok(id)
    }

    /// The pod's sandbox config for `attempt`, in the pod's cgroup.
    fn sandbox_config(&self, pod: &Pod, attempt: u32) -> Result<PodSandboxConfig, RuntimeError> {
        container::sandbox_config(&self.cfg, pod, attempt, self.cgroup_parent(pod)).map_err(
            |message| RuntimeError::Api {
                op: "generate pod sandbox config".into(),
                status: 0,
                message,
            },
        )
    }

    /// Creates the termination-message file of a container instance (mode 0666, as
    /// upstream, whatever the umask) and returns the bind mount for it.
    fn termination_message_mount(
        &self,
        pod: &Pod,
        c: &Container,
        restart_count: u32,
    ) -> Result<Option<Mount>, std::io::Error> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let path = c
            .termination_message_path
            .clone()
            .unwrap_or_else(|| "/dev/termination-log".into());
        if path.is_empty() {
            return Ok(None);
        }
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let Some(file) = self.message_file(uid, &c.name, restart_count) else {
            return Ok(None);
        };
        if let Some(dir) = file.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o750)
                .create(dir)?;
        }
        // Truncates a leftover of an instance created before a crash of the kubelet.
        std::fs::File::create(&file)?;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666))?;
        Ok(Some(Mount {
            host_path: file.display().to_string(),
            container_path: path,
            read_only: false,
        }))
    }

    /// Starts one container (upstream `startContainer`): image, create (with the
    /// termination-message file), start, postStart hook. Ok(Some(waiting)) when it could
    /// not be started for a reason that shows in its status.
    fn start_container(
        &self,
        pod: &Pod,
        c: &Container,
        s: &StartAction,
        sandbox: &SandboxFacts<'_>,
        rp: &RuntimePod,
        result: &mut SyncResult,
    ) -> Result<Option<Waiting>, RuntimeError> {
        let image = c.image.clone().unwrap_or_default();
        if let Some(w) = self
            .images
            .ensure_image(pod, &image, c.image_pull_policy.as_deref())?
        {
            // Upstream `startContainer`: an image that is not there (yet) for a reason
            // other than a pull in progress is also the container's `Failed` event.
            if w.reason != crate::images::PULLING_REASON {
                record::event(
                    pod,
                    Some(&c.name),
                    true,
                    "Failed",
                    &format!("Error: {}", w.reason),
                );
            }
            return Ok(Some(w));
        }
        // Keep one dead instance for lastState and logs; older ones go now, with their
        // termination-message files. Instances that never ran (a kubelet killed between
        // create and start) hold no logs nor state: they all go, before the create of
        // the instance that takes their place (and may take their name and count).
        let mut kept = false;
        for old in rp.instances(&c.name, s.kind) {
            let gone = if helpers::never_ran(old) {
                true
            } else if !kept {
                kept = true;
                false
            } else {
                old.state != ContainerState::Running
            };
            if gone {
                if let Err(e) = self.remove_dead_container(&old.id, &old.labels) {
                    log::debug!(
                        "pod {}: removing old instance {} of {}: {}",
                        format_pod(pod),
                        short(&old.id),
                        c.name,
                        base::loops::error_chain(&e)
                    );
                }
            }
        }
        if let Some((key, finished)) = &s.backoff {
            lock(&self.backoff).next_at_mono(key, *finished, SystemTime::now(), Instant::now());
        }
        let mut cfg = match container::container_config(
            &self.runtime,
            &self.cfg,
            pod,
            c,
            s,
            sandbox.id,
            sandbox.ips,
        )? {
            Ok(cfg) => cfg,
            Err(w) => {
                // Upstream `startContainer`: a config that cannot be made is the
                // container's `Failed` event too.
                let message = format!("Error: {}", w.message);
                record::event(pod, Some(&c.name), true, "Failed", &message);
                return Ok(Some(w));
            }
        };
        match self.termination_message_mount(pod, c, s.restart_count) {
            Ok(Some(m)) => cfg.mounts.push(m),
            Ok(None) => {}
            Err(e) => {
                return Ok(Some(Waiting {
                    reason: "CreateContainerConfigError".into(),
                    message: format!("cannot create the termination-log file: {e}"),
                }))
            }
        }
        let fmt_pod = format_pod(pod);
        // A create or start the runtime refused: a Warning `Failed` event and the
        // waiting reason upstream gives it.
        let refused = |reason: &str, e: &RuntimeError| {
            let message = base::loops::error_chain(e);
            record::event(
                pod,
                Some(&c.name),
                true,
                "Failed",
                &format!("Error: {message}"),
            );
            Some(Waiting {
                reason: reason.into(),
                message,
            })
        };
        let id = match self
            .runtime
            .create_container(sandbox.id, &cfg, sandbox.config)
        {
            Ok(id) => id,
            Err(e) if e.is_unavailable() => return Err(e),
            Err(e) => return Ok(refused("CreateContainerError", &e)),
        };
        record::event(
            pod,
            Some(&c.name),
            false,
            "Created",
            &format!("Created container: {}", c.name),
        );
        if let Err(e) = self.runtime.start_container(&id) {
            if e.is_unavailable() {
                return Err(e);
            }
            // Count the failed start like a crash so it is retried with backoff.
            if s.backoff.is_none() {
                lock(&self.backoff).next(&actions::backoff_key(pod, c), SystemTime::now());
            }
            return Ok(refused("RunContainerError", &e));
        }
        // Its log links are made from the inspect that ends this sync.
        result.started.push((id.clone(), cfg.labels.clone()));
        log::info!(
            "pod {fmt_pod}: started container {} ({}, restart {})",
            c.name,
            short(&id),
            s.restart_count
        );
        record::event(
            pod,
            Some(&c.name),
            false,
            "Started",
            &format!("Started container {}", c.name),
        );
        if let Some(h) = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) {
            // Run by the caller where its wait (up to POST_START_TIMEOUT) holds only
            // this pod: see `post_start`.
            result.post_start = Some(PostStart {
                container: c.clone(),
                id,
                kind: s.kind,
                handler: h.clone(),
                hook_ip: sandbox.hook_ip.to_string(),
            });
        }
        Ok(None)
    }

    /// Runs a started container's postStart hook (the end of upstream
    /// `startContainer`), blocking for it, within [`hooks::POST_START_TIMEOUT`]. When it
    /// fails: the `FailedPostStartHook` event, the `PostStartHookError` line, and the
    /// container's stop to carry out (upstream kills the container). Called by the pod
    /// killer's `post-start-N` threads, never by a pod worker.
    pub fn post_start(&self, req: &KillPodRequest, h: &PostStart) -> Option<ContainerStop> {
        let fallback;
        let pod = match req.pod.as_deref() {
            Some(p) => p,
            None => {
                fallback = Pod::default();
                &fallback
            }
        };
        let c = &h.container;
        let target = hooks::HookTarget {
            container_id: &h.id,
            pod_ip: &h.hook_ip,
        };
        let timeout = hooks::POST_START_TIMEOUT;
        let Err(msg) = hooks::run(self.runtime.as_ref(), pod, c, &h.handler, &target, timeout)
        else {
            return None;
        };
        log::warn!("Failed to execute PostStartHook: {msg}");
        // Upstream keeps the hook's message out of the event (secrets).
        record::event(
            pod,
            Some(&c.name),
            true,
            "FailedPostStartHook",
            "PostStartHook failed",
        );
        crate::record::warn_limited(pod, "PostStartHookError", || {
            format!(
                "pod {}: container {}: PostStartHookError: {msg}",
                format_pod(pod),
                c.name
            )
        });
        let d = match self.runtime.inspect_container(&h.id) {
            Ok(d) => d,
            Err(e) => {
                log::warn!(
                    "killing container {}: {}",
                    c.name,
                    base::loops::error_chain(&e)
                );
                return None;
            }
        };
        let k = KillAction {
            id: h.id.clone(),
            name: c.name.clone(),
            kind: h.kind,
            message: "FailedPostStartHook".into(),
            reason: KillReason::FailedPostStartHook,
        };
        Some(self.plan_container_stop(Some(pod), &d, k))
    }

    /// Forgets what the last sync read of a pod's containers, so that the next sync
    /// reads them afresh: after a kill or a hook the PLEG may not have seen yet.
    pub fn forget_pod_status(&self, uid: &str) {
        self.pod_cache.remove(uid);
    }

    /// The image manager (its pullers are started by the kubelet's wiring).
    pub fn images(&self) -> &ImageManager {
        &self.images
    }

    /// What housekeeping needs to expire backoff entries, and nothing more.
    pub fn backoff_gc(&self) -> BackoffGc {
        BackoffGc {
            restart: self.backoff.clone(),
            images: self.images.clone(),
        }
    }
}

/// The restart and pull backoff tables, for the sync loop's housekeeping: it expires
/// their entries without holding the runtime manager (which it must never call).
#[derive(Clone, Debug)]
pub struct BackoffGc {
    restart: Arc<Mutex<Backoff<SystemTime>>>,
    images: ImageManager,
}

impl BackoffGc {
    /// Forgets backoff entries that expired. Microseconds: two small tables.
    pub fn gc(&self) {
        lock(&self.restart).gc(SystemTime::now());
        self.images.gc();
    }
}

/// Whether the runtime's list of a pod shows the containers `kept` holds, each in the
/// state it was kept in (the order aside).
fn lists_the_same(kept: &RuntimePod, listed: &[runtime::ContainerSummary]) -> bool {
    let mut kept: Vec<(&str, ContainerState)> = kept
        .sandboxes
        .iter()
        .chain(&kept.containers)
        .map(|d| (d.id.as_str(), d.state))
        .collect();
    let mut listed: Vec<(&str, ContainerState)> =
        listed.iter().map(|c| (c.id.as_str(), c.state)).collect();
    base::sort::sort_by(&mut kept, |a, b| a.0.cmp(b.0));
    base::sort::sort_by(&mut listed, |a, b| a.0.cmp(b.0));
    kept == listed
}

fn has_work(a: &PodActions) -> bool {
    a.kill_pod
        || a.create_sandbox.is_some()
        || !a.kill.is_empty()
        || !a.start.is_empty()
        || !a.start_init.is_empty()
}

/// The spec of a container by name and kind.
fn find_container<'a>(pod: &'a Pod, name: &str, kind: ContainerKind) -> Option<&'a Container> {
    let spec = pod.spec.as_ref()?;
    match kind {
        ContainerKind::App => spec.containers.iter().find(|c| c.name == name),
        ContainerKind::Init => spec
            .init_containers
            .iter()
            .flatten()
            .find(|c| c.name == name),
    }
}

/// A pod with only the identity a container's labels carry (for an orphan's events).
fn labels_pod(d: &ContainerDetails) -> Pod {
    let mut p = Pod::default();
    p.metadata.name = d.labels.get(labels::POD_NAME).cloned();
    p.metadata.namespace = d.labels.get(labels::POD_NAMESPACE).cloned();
    p.metadata.uid = d.labels.get(labels::POD_UID).cloned();
    p
}

/// Reads at most `max` bytes from the end of a file (upstream `tail.ReadAtMost`).
fn read_tail(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    if len > max {
        f.seek(SeekFrom::Start(len - max))?;
    }
    let mut buf = Vec::new();
    f.take(max).read_to_end(&mut buf)?;
    Ok(buf)
}

/// The order of a pod kill (upstream `newTerminationOrdering`): for each running
/// container, the stops it must outlive and the handle whose drop tells that it is down.
/// A sidecar outlives every app container and every later sidecar; everything else
/// stops at once.
#[allow(clippy::type_complexity)]
fn termination_order<'a>(
    pod: Option<&Pod>,
    running: &[&'a ContainerDetails],
) -> Vec<(
    &'a ContainerDetails,
    Vec<Receiver<Never>>,
    crossbeam_channel::Sender<Never>,
)> {
    let sidecars = pod.map(actions::sidecar_names).unwrap_or_default();
    let name_of = |c: &ContainerDetails| {
        c.labels
            .get(labels::CONTAINER_NAME)
            .cloned()
            .unwrap_or_default()
    };
    let sidecar_rank = |c: &ContainerDetails| {
        (runtime::container::kind_of(c) == ContainerKind::Init)
            .then(|| sidecars.iter().position(|s| *s == name_of(c)))
            .flatten()
    };
    let channels: Vec<_> = running
        .iter()
        .map(|_| crossbeam_channel::bounded::<Never>(0))
        .collect();
    running
        .iter()
        .zip(channels.iter())
        .map(|(c, (tx, _))| {
            let outlive = match sidecar_rank(c) {
                None => Vec::new(),
                Some(rank) => running
                    .iter()
                    .zip(channels.iter())
                    .filter(|(o, _)| match sidecar_rank(o) {
                        None => true,
                        Some(r) => r > rank,
                    })
                    .map(|(_, (_, rx))| rx.clone())
                    .collect(),
            };
            (*c, outlive, tx.clone())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn details(name: &str, kind: &str) -> ContainerDetails {
        let mut l = BTreeMap::new();
        l.insert(labels::CONTAINER_NAME.to_string(), name.to_string());
        l.insert(labels::CONTAINER_TYPE.to_string(), kind.to_string());
        ContainerDetails {
            id: name.into(),
            name: name.into(),
            labels: l,
            state: ContainerState::Running,
            image: String::new(),
            image_id: String::new(),
            created: SystemTime::UNIX_EPOCH,
            started_at: None,
            finished_at: None,
            exit_code: 0,
            oom_killed: false,
            error: String::new(),
            pid: 0,
            ip_address: String::new(),
            additional_ips: Vec::new(),
            host_network: false,
            stop_signal: String::new(),
            rootfs_dir: String::new(),
            log_path: String::new(),
        }
    }

    #[test]
    fn sidecars_stop_after_apps_and_in_reverse_order() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "spec": {
                "initContainers": [
                    {"name": "s1", "restartPolicy": "Always"},
                    {"name": "init"},
                    {"name": "s2", "restartPolicy": "Always"}
                ],
                "containers": [{"name": "a"}, {"name": "b"}]
            }
        }))
        .expect("pod");
        let cs = [
            details("a", "container"),
            details("b", "container"),
            details("s1", "init"),
            details("s2", "init"),
        ];
        let refs: Vec<&ContainerDetails> = cs.iter().collect();
        let plan = termination_order(Some(&pod), &refs);
        let waits: Vec<(&str, usize)> = plan
            .iter()
            .map(|(c, outlive, _)| (c.name.as_str(), outlive.len()))
            .collect();
        // Apps wait for nobody; s2 for both apps; s1 for both apps and s2.
        assert_eq!(waits, [("a", 0), ("b", 0), ("s1", 3), ("s2", 2)]);
        // Dropping the apps' and s2's handles releases s1.
        let mut plan = plan;
        let (_, s1_waits, _) = plan.remove(2);
        drop(plan);
        for rx in s1_waits {
            assert!(matches!(
                rx.recv_timeout(Duration::from_millis(10)),
                Err(crossbeam_channel::RecvTimeoutError::Disconnected)
            ));
        }
    }

    #[test]
    fn a_pod_without_sidecars_stops_everything_at_once() {
        let cs = [details("a", "container"), details("b", "container")];
        let refs: Vec<&ContainerDetails> = cs.iter().collect();
        assert!(termination_order(None, &refs)
            .iter()
            .all(|(_, w, _)| w.is_empty()));
    }

    #[test]
    fn read_tail_keeps_the_end() {
        let dir = std::env::temp_dir().join(format!("rkubelet-tail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let f = dir.join("m");
        std::fs::write(&f, b"0123456789").expect("write");
        assert_eq!(read_tail(&f, 4).expect("read"), b"6789");
        assert_eq!(read_tail(&f, 100).expect("read"), b"0123456789");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn path_components_are_checked() {
        let root = Path::new("/r");
        assert_eq!(
            pod_container_dir(root, "abc-1", "c"),
            Ok(PathBuf::from("/r/pods/abc-1/containers/c"))
        );
        for bad in ["", ".", "..", "a/b", "../../etc"] {
            assert!(pod_container_dir(root, bad, "c").is_err(), "{bad}");
            assert!(pod_container_dir(root, "u", bad).is_err(), "{bad}");
        }
    }
}
