//! The kubelet's runtime manager (upstream `pkg/kubelet/kuberuntime`): reads a pod's
//! containers from the runtime, decides what to start and stop
//! ([`actions::compute_pod_actions`]), and does it through the [`Runtime`] trait.
//!
//! It is called only from pod workers, one pod at a time per worker, so it blocks
//! freely. The sync loop never calls it.

pub mod actions;
pub mod backoff;
pub mod container;
pub mod labels;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::images::ImageManager;
use crate::loops::lock;
use crate::runtime::{ContainerConfig, ContainerDetails, ContainerState, Runtime, RuntimeError};
use crate::status::Waiting;
use actions::{PodActions, StartAction};
use backoff::Backoff;
use labels::ContainerKind;

/// A pod as the runtime holds it: its sandboxes and containers, newest first.
#[derive(Clone, Debug, Default)]
pub struct RuntimePod {
    /// Sandbox containers, newest first.
    pub sandboxes: Vec<ContainerDetails>,
    /// App and init containers, newest first.
    pub containers: Vec<ContainerDetails>,
}

impl RuntimePod {
    /// The newest sandbox, if it is running.
    pub fn running_sandbox(&self) -> Option<&ContainerDetails> {
        self.sandboxes
            .first()
            .filter(|s| s.state == ContainerState::Running)
    }

    /// Every instance of one container, newest first.
    pub fn instances(&self, name: &str, kind: ContainerKind) -> Vec<&ContainerDetails> {
        self.containers
            .iter()
            .filter(|c| {
                c.labels.get(labels::CONTAINER_NAME).map(String::as_str) == Some(name)
                    && crate::status::kind_of(c) == kind
            })
            .collect()
    }

    /// The newest instance of one container.
    pub fn newest(&self, name: &str, kind: ContainerKind) -> Option<&ContainerDetails> {
        self.instances(name, kind).into_iter().next()
    }

    /// True if anything of the pod is running.
    pub fn any_running(&self) -> bool {
        self.sandboxes
            .iter()
            .chain(&self.containers)
            .any(|c| c.state == ContainerState::Running)
    }

    fn sort(&mut self) {
        let key = |c: &ContainerDetails| (c.created, labels::restart_count(&c.labels));
        self.sandboxes.sort_by_key(|c| std::cmp::Reverse(key(c)));
        self.containers.sort_by_key(|c| std::cmp::Reverse(key(c)));
    }
}

/// Errors of one pod sync, with the pod (and container) they concern.
#[derive(Debug)]
pub enum SyncError {
    /// The runtime failed a call needed for the whole pod.
    Runtime {
        /// `name_namespace(uid)`.
        pod: String,
        /// What the kubelet was doing.
        what: &'static str,
        /// The runtime's error.
        source: RuntimeError,
    },
}

impl fmt::Display for SyncError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SyncError::Runtime { pod, what, .. } => write!(f, "pod {pod}: {what}"),
        }
    }
}

impl std::error::Error for SyncError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SyncError::Runtime { source, .. } => Some(source),
        }
    }
}

impl SyncError {
    /// True when the sync failed because the runtime is down.
    pub fn runtime_unavailable(&self) -> bool {
        match self {
            SyncError::Runtime { source, .. } => source.is_unavailable(),
        }
    }
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
}

/// Settings of the runtime manager.
#[derive(Clone, Debug)]
pub struct ManagerConfig {
    /// The node's name (the `io.rkubelet.node` label).
    pub node_name: String,
    /// `--pod-infra-container-image`.
    pub pod_infra_image: String,
}

/// Syncs and kills pods through the runtime. Shared by all pod workers.
#[derive(Debug)]
pub struct RuntimeManager {
    runtime: Arc<dyn Runtime>,
    cfg: ManagerConfig,
    backoff: Mutex<Backoff>,
    images: ImageManager,
    /// Liveness and startup results (upstream's `livenessManager`/`startupManager`).
    probes: Option<Arc<crate::prober::results::ResultsCache>>,
}

impl RuntimeManager {
    /// A manager over `runtime`.
    pub fn new(runtime: Arc<dyn Runtime>, cfg: ManagerConfig) -> Self {
        RuntimeManager {
            images: ImageManager::new(runtime.clone()),
            runtime,
            cfg,
            backoff: Mutex::new(Backoff::default()),
            probes: None,
        }
    }

    /// Kills (and restarts) containers whose liveness or startup probe failed, by the
    /// results in `probes`.
    pub fn with_probe_results(mut self, probes: Arc<crate::prober::results::ResultsCache>) -> Self {
        self.probes = Some(probes);
        self
    }

    /// The runtime.
    pub fn runtime(&self) -> &Arc<dyn Runtime> {
        &self.runtime
    }

    /// Reads a pod's containers from the runtime: one filtered list, then an inspect of
    /// each (containers removed in between are skipped).
    pub fn get_pod_status(&self, uid: &str) -> Result<RuntimePod, RuntimeError> {
        let filter = vec![
            format!("{}={}", labels::MANAGED_BY_NODE, self.cfg.node_name),
            format!("{}={}", labels::POD_UID, uid),
        ];
        let mut rp = RuntimePod::default();
        for s in self.runtime.list_containers(&filter)? {
            let d = match self.runtime.inspect_container(&s.id) {
                Ok(d) => d,
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(e),
            };
            if d.labels.get(labels::DOCKER_TYPE).map(String::as_str) == Some(labels::TYPE_SANDBOX) {
                rp.sandboxes.push(d);
            } else {
                rp.containers.push(d);
            }
        }
        rp.sort();
        Ok(rp)
    }

    /// One sync of a pod that should run: compute the actions and carry them out.
    pub fn sync_pod(&self, pod: &Pod) -> Result<SyncResult, SyncError> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let fmt_pod = actions::format_pod(pod);
        let rt_err = |what: &'static str| {
            let pod = fmt_pod.clone();
            move |source| SyncError::Runtime { pod, what, source }
        };
        let rp = self
            .get_pod_status(&uid)
            .map_err(rt_err("reading pod status"))?;
        let acts = {
            let b = lock(&self.backoff);
            let (now, wall) = (Instant::now(), SystemTime::now());
            let mut acts = actions::compute_pod_actions(pod, &rp, &b, now, wall);
            if let Some(p) = &self.probes {
                let failed = |id: &str| p.failed_probe(id);
                actions::kill_unhealthy(&mut acts, pod, &rp, &failed, &b, now, wall);
            }
            acts
        };
        let mut result = SyncResult {
            waiting: acts.waiting.clone(),
            requeue_after: acts.requeue_after,
            runtime_pod: RuntimePod::default(),
        };
        if !self.has_work(&acts) {
            result.runtime_pod = rp;
            return Ok(result);
        }
        self.execute(pod, &rp, &acts, &mut result)
            .map_err(rt_err("syncing"))?;
        result.runtime_pod = self
            .get_pod_status(&uid)
            .map_err(rt_err("reading pod status after sync"))?;
        Ok(result)
    }

    fn has_work(&self, a: &PodActions) -> bool {
        a.kill_pod || a.create_sandbox.is_some() || !a.kill.is_empty() || !a.start.is_empty()
    }

    fn execute(
        &self,
        pod: &Pod,
        rp: &RuntimePod,
        acts: &PodActions,
        result: &mut SyncResult,
    ) -> Result<(), RuntimeError> {
        let name = actions::format_pod(pod);
        let grace = Duration::from_secs(labels::grace_period_seconds(pod).unsigned_abs());
        if acts.kill_pod {
            log::info!("pod {name}: stopping all containers and the sandbox");
            self.stop_all(rp, grace);
        }
        for k in &acts.kill {
            log::info!("pod {name}: killing container {}: {}", k.name, k.reason);
            self.runtime
                .stop_container(&k.id, k.grace.unwrap_or(grace))?;
        }
        let sandbox_id = match acts.create_sandbox {
            Some(attempt) => {
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
        let spec = pod.spec.clone().unwrap_or_default();
        for s in &acts.start {
            let list = match s.kind {
                ContainerKind::Init => spec.init_containers.as_deref().unwrap_or_default(),
                ContainerKind::App => &spec.containers,
            };
            let Some(c) = list.get(s.index) else { continue };
            if let Some(w) = self.start_container(pod, c, s, &sandbox_id, rp)? {
                log::warn!(
                    "pod {name}: container {}: {}: {}",
                    c.name,
                    w.reason,
                    w.message
                );
                result.waiting.insert(c.name.clone(), w);
                let again = backoff::INITIAL;
                result.requeue_after = Some(result.requeue_after.map_or(again, |r| r.min(again)));
            }
            if s.kind == ContainerKind::Init {
                // Init containers run one at a time; the next sync starts the next.
                break;
            }
        }
        Ok(())
    }

    /// Stops every running container of a pod (in parallel, each with the grace
    /// period), then its sandboxes. Errors are logged: a kill is best effort and is
    /// retried by the next sync or housekeeping.
    fn stop_all(&self, rp: &RuntimePod, grace: Duration) {
        let running: Vec<&ContainerDetails> = rp
            .containers
            .iter()
            .filter(|c| c.state == ContainerState::Running)
            .collect();
        std::thread::scope(|scope| {
            for c in running {
                let rt = &self.runtime;
                let spawned = std::thread::Builder::new()
                    .name("pod-stop".into())
                    .spawn_scoped(scope, move || {
                        if let Err(e) = rt.stop_container(&c.id, grace) {
                            log::warn!(
                                "stopping container {}: {}",
                                c.name,
                                crate::loops::error_chain(&e)
                            );
                        }
                    });
                if let Err(e) = spawned {
                    log::warn!(
                        "cannot spawn a stop thread ({e}); stopping {} inline",
                        c.name
                    );
                    let _ = self.runtime.stop_container(&c.id, grace);
                }
            }
        });
        for s in rp
            .sandboxes
            .iter()
            .filter(|s| s.state == ContainerState::Running)
        {
            // The sandbox holds only namespaces: no grace needed beyond a moment.
            if let Err(e) = self.runtime.stop_container(&s.id, Duration::from_secs(2)) {
                log::warn!(
                    "stopping sandbox {}: {}",
                    s.name,
                    crate::loops::error_chain(&e)
                );
            }
        }
    }

    /// Kills a pod that must not run any more (removed from its source, or an orphan
    /// found in the runtime): stops everything with `grace`, then removes its containers
    /// and sandboxes.
    pub fn kill_pod(&self, uid: &str, grace: Duration) -> Result<(), RuntimeError> {
        let rp = self.get_pod_status(uid)?;
        self.stop_all(&rp, grace);
        for c in rp.containers.iter().chain(&rp.sandboxes) {
            self.runtime.remove_container(&c.id)?;
        }
        Ok(())
    }

    /// Creates and starts a pod's sandbox; returns its ID.
    fn create_sandbox(&self, pod: &Pod, attempt: u32) -> Result<String, RuntimeError> {
        if let Some(w) = self
            .images
            .ensure_image(pod, &self.cfg.pod_infra_image, None)?
        {
            return Err(RuntimeError::Api {
                op: format!("pull sandbox image {}", self.cfg.pod_infra_image),
                status: 0,
                message: w.message,
            });
        }
        let cfg =
            container::sandbox_config(pod, attempt, &self.cfg.pod_infra_image, &self.cfg.node_name);
        let id = self.create_replacing(&cfg)?;
        self.runtime.start_container(&id)?;
        log::info!(
            "pod {}: started sandbox {} (attempt {attempt})",
            actions::format_pod(pod),
            short(&id)
        );
        Ok(id)
    }

    /// Creates a container; a name conflict with a leftover container (e.g. one created
    /// just before a crash) removes the leftover and tries once more, as upstream.
    fn create_replacing(&self, cfg: &ContainerConfig) -> Result<String, RuntimeError> {
        match self.runtime.create_container(cfg) {
            Err(RuntimeError::Conflict { .. }) => {
                log::info!(
                    "container name {} is in use; removing the old one",
                    cfg.name
                );
                self.runtime.remove_container(&cfg.name)?;
                self.runtime.create_container(cfg)
            }
            other => other,
        }
    }

    /// Starts one container; Ok(Some(waiting)) when it could not be started for a
    /// reason that shows in its status (image, config, runtime refusal).
    fn start_container(
        &self,
        pod: &Pod,
        c: &Container,
        s: &StartAction,
        sandbox_id: &str,
        rp: &RuntimePod,
    ) -> Result<Option<Waiting>, RuntimeError> {
        let image = c.image.clone().unwrap_or_default();
        if let Some(w) = self
            .images
            .ensure_image(pod, &image, c.image_pull_policy.as_deref())?
        {
            return Ok(Some(w));
        }
        // Keep one dead instance for lastState and logs; older ones go now.
        for old in rp.instances(&c.name, s.kind).into_iter().skip(1) {
            if old.state != ContainerState::Running {
                let _ = self.runtime.remove_container(&old.id);
            }
        }
        if let Some(key) = &s.backoff_key {
            lock(&self.backoff).next(key, Instant::now());
        }
        let cfg = container::container_config(pod, c, s, sandbox_id, &self.cfg.node_name);
        let fmt_pod = actions::format_pod(pod);
        let id = match self.create_replacing(&cfg) {
            Ok(id) => id,
            Err(e) if e.is_unavailable() => return Err(e),
            Err(e) => {
                return Ok(Some(Waiting {
                    reason: "CreateContainerError".into(),
                    message: crate::loops::error_chain(&e),
                }))
            }
        };
        match self.runtime.start_container(&id) {
            Ok(()) => {
                log::info!(
                    "pod {fmt_pod}: started container {} ({}, restart {})",
                    c.name,
                    short(&id),
                    s.restart_count
                );
                Ok(None)
            }
            Err(e) if e.is_unavailable() => Err(e),
            Err(e) => {
                // Count the failed start like a crash so it is retried with backoff.
                if s.backoff_key.is_none() {
                    lock(&self.backoff).next(&actions::backoff_key(pod, c), Instant::now());
                }
                Ok(Some(Waiting {
                    reason: "RunContainerError".into(),
                    message: crate::loops::error_chain(&e),
                }))
            }
        }
    }

    /// Forgets backoff entries that expired (housekeeping).
    pub fn gc_backoff(&self) {
        lock(&self.backoff).gc(Instant::now());
        self.images.gc();
    }
}

/// The first 12 characters of an ID, as `docker ps` shows it.
pub fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}
