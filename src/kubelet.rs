//! The kubelet: wires the components together and owns the sync loop (upstream
//! `pkg/kubelet/kubelet.go`: `Run`, `syncLoop`, `syncLoopIteration`, the `Handle*`
//! functions and `HandlePodCleanups`).
//!
//! The `sync-loop` thread owns the pod manager (the desired pods by UID) and the
//! PodConfig merge. It waits on one `select!` over: source snapshots, PLEG events,
//! probe results, runtime-up notices, the 1 s sync ticker, the 2 s housekeeping ticker
//! and shutdown, and hands every pod's work to the pod workers. It never calls the
//! runtime itself.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::Receiver;
use k8s_openapi::api::core::v1::Pod;

use crate::config::KubeletConfig;
use crate::health::{HealthChecks, RuntimeHealth, RUNTIME_UP_PERIOD};
use crate::kuberuntime::{labels, ManagerConfig, RuntimeManager};
use crate::loops::{shutdown_channel, LoopHandle, Loops, Periodic, Shutdown, SpawnError, Stop};
use crate::pleg::{Pleg, PlegEvent, PlegEventType, PlegShared, CHANNEL_CAPACITY, RELIST_PERIOD};
use crate::pod_workers::{PodSyncer, PodWorkers, Work, WorkQueue, DEFAULT_WORKERS};
use crate::podconfig::{PodConfig, PodOp, PodUpdate, Source, SourceUpdate};
use crate::prober::{ProbeEvent, ProbeManager, ProbeResult, ProbeType};
use crate::runtime::Runtime;
use crate::server::readonly::{PodsView, ReadOnly};
use crate::server::{self, ServerError, Unblockers};
use crate::status::{self, StatusCache, StatusInputs};

/// Upstream's sync ticker: pods whose work-queue time is due are synced.
pub const SYNC_TICK: Duration = Duration::from_secs(1);
/// Upstream `housekeepingPeriod`.
pub const HOUSEKEEPING_PERIOD: Duration = Duration::from_secs(2);
/// Upstream's buffer of the merged updates channel.
pub const SOURCE_CHANNEL_CAPACITY: usize = 50;
/// Requeue after a failed sync (upstream `backOffPeriod` 10 s).
pub const SYNC_ERROR_REQUEUE: Duration = Duration::from_secs(10);
/// A housekeeping run slower than this is worth a warning (upstream value).
pub const HOUSEKEEPING_WARNING: Duration = Duration::from_secs(1);

/// Errors that stop the kubelet from starting.
#[derive(Debug)]
pub enum StartError {
    /// A port could not be bound.
    Server(ServerError),
    /// A thread could not be spawned.
    Spawn(SpawnError),
    /// The root directory could not be created.
    RootDir {
        /// The directory.
        path: std::path::PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::Server(e) => e.fmt(f),
            StartError::Spawn(e) => e.fmt(f),
            StartError::RootDir { path, .. } => {
                write!(f, "cannot create root directory {}", path.display())
            }
        }
    }
}

impl std::error::Error for StartError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StartError::Server(e) => e.source(),
            StartError::Spawn(e) => e.source(),
            StartError::RootDir { source, .. } => Some(source),
        }
    }
}

impl From<ServerError> for StartError {
    fn from(e: ServerError) -> Self {
        StartError::Server(e)
    }
}

impl From<SpawnError> for StartError {
    fn from(e: SpawnError) -> Self {
        StartError::Spawn(e)
    }
}

/// A running kubelet: the handles main needs to wait for readiness and shut it down.
#[derive(Debug)]
pub struct Running {
    loops: Loops,
    shutdown: Shutdown,
    unblockers: Unblockers,
    /// Receives one message after the first successful relist (systemd readiness).
    pub first_relist: Receiver<()>,
    /// The addresses actually bound (healthz, read-only), for logs and tests.
    pub bound: Vec<(&'static str, SocketAddr)>,
    /// Pods and statuses, for the status line.
    pub pods: Arc<PodsView>,
}

impl Running {
    /// Stops every loop and waits for them at most `deadline`; returns the names of the
    /// threads that did not finish in time. Containers keep running.
    pub fn stop(self, deadline: Duration) -> Vec<String> {
        self.shutdown.trigger();
        self.unblockers.unblock_all();
        self.loops.join_all(deadline)
    }
}

/// Creates the root directory layout (`<root>/pods`), mode 0750 as upstream.
fn make_root_dir(root: &std::path::Path) -> Result<(), StartError> {
    use std::os::unix::fs::DirBuilderExt;
    for dir in [root.to_path_buf(), root.join("pods")] {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(&dir)
            .map_err(|source| StartError::RootDir { path: dir, source })?;
    }
    Ok(())
}

/// Starts every loop of the kubelet. Ports are bound before any thread starts, so a
/// port in use fails here with nothing left running.
pub fn start(cfg: KubeletConfig, runtime: Arc<dyn Runtime>) -> Result<Running, StartError> {
    make_root_dir(&cfg.root_dir)?;
    let mut listeners = Vec::new();
    if cfg.healthz_port != 0 {
        let addr = SocketAddr::new(cfg.healthz_bind_address, cfg.healthz_port);
        listeners.push(("healthz", server::bind("healthz", addr)?));
    }
    if cfg.read_only_port != 0 {
        let addr = SocketAddr::new(cfg.address, cfg.read_only_port);
        listeners.push(("read-only", server::bind("read-only", addr)?));
    }
    let bound: Vec<(&'static str, SocketAddr)> = listeners
        .iter()
        .filter_map(|(n, l)| l.local_addr().ok().map(|a| (*n, a)))
        .collect();

    let (shutdown, stop) = shutdown_channel();
    let loops = Loops::new(stop.clone());
    // The prober: changed results reach the sync loop over a bounded channel.
    let (probe_tx, probe_rx) = crossbeam_channel::bounded(crate::prober::EVENT_CAPACITY);
    let probes = ProbeManager::start(
        &loops,
        runtime.clone(),
        crate::prober::PROBE_WORKERS,
        probe_tx,
    )?;
    let statuses = Arc::new(StatusCache::default());
    let pods_view = Arc::new(PodsView::new(statuses.clone()));
    let pleg_shared = Arc::new(PlegShared::default());
    let runtime_health = Arc::new(RuntimeHealth::default());
    let work_queue = Arc::new(WorkQueue::default());
    let workers = Arc::new(PodWorkers::default());
    let manager = Arc::new(
        RuntimeManager::new(
            runtime.clone(),
            ManagerConfig {
                node_name: cfg.node_name.clone(),
                pod_infra_image: cfg.pod_infra_container_image.clone(),
            },
        )
        .with_probe_results(probes.results().clone()),
    );
    let checks = HealthChecks {
        registry: loops.registry(),
        pleg: pleg_shared.clone(),
        runtime: runtime_health.clone(),
        sync_frequency: cfg.sync_frequency,
    };
    let unblockers = Unblockers::default();

    // Servers first: they answer health questions while everything else starts.
    for (name, listener) in listeners {
        match name {
            "healthz" => {
                let checks = checks.clone();
                server::serve(&loops, "srv-healthz", listener, &unblockers, move |r| {
                    server::healthz::handle(&checks, r)
                })?;
            }
            _ => {
                let ro = ReadOnly {
                    checks: checks.clone(),
                    pods: pods_view.clone(),
                    registry: loops.registry(),
                    probe_metrics: probes.metrics().clone(),
                };
                server::serve(&loops, "srv-readonly", listener, &unblockers, move |r| {
                    server::readonly::handle(&ro, r)
                })?;
            }
        }
    }

    // Sources.
    let (source_tx, source_rx) = crossbeam_channel::bounded(SOURCE_CHANNEL_CAPACITY);
    let mut sources = Vec::new();
    if let Some(path) = &cfg.static_pod_path {
        crate::podconfig::file::start(
            &loops,
            path.clone(),
            cfg.node_name.clone(),
            cfg.file_check_frequency,
            source_tx.clone(),
        )?;
        sources.push(Source::File);
    }
    drop(source_tx);
    log::info!("Kubelet is running in standalone mode, will skip API server sync");

    // Runtime liveness.
    let (up_tx, up_rx) = crossbeam_channel::bounded(1);
    {
        let health = runtime_health.clone();
        let runtime = runtime.clone();
        loops.spawn_periodic(
            Periodic {
                name: "runtime-up".into(),
                period: RUNTIME_UP_PERIOD,
                wake: None,
            },
            move || health.tick(runtime.as_ref(), &up_tx),
        )?;
    }

    // PLEG.
    let (pleg_tx, pleg_rx) = crossbeam_channel::bounded(CHANNEL_CAPACITY);
    let (first_tx, first_relist) = crossbeam_channel::bounded(1);
    let mut pleg = Pleg::new(
        runtime.clone(),
        &cfg.node_name,
        pleg_tx,
        pleg_shared.clone(),
        Some(first_tx),
    );
    loops.spawn_periodic(
        Periodic {
            name: "pleg".into(),
            period: RELIST_PERIOD,
            wake: None,
        },
        move || pleg.relist(),
    )?;

    // Pod workers.
    let handler = Arc::new(SyncHandler {
        manager: manager.clone(),
        statuses: statuses.clone(),
        queue: work_queue.clone(),
        probes: probes.clone(),
        host_ip: crate::netutil::node_ip(),
        resync: cfg.sync_frequency,
    });
    workers.start(&loops, DEFAULT_WORKERS, handler)?;

    // The sync loop.
    let sync_loop = SyncLoop {
        pod_config: PodConfig::new(&sources),
        pods: HashMap::new(),
        view: pods_view.clone(),
        workers,
        queue: work_queue,
        pleg: pleg_shared,
        runtime_health,
        statuses,
        manager,
        sources_rx: source_rx,
        pleg_rx,
        probe_rx,
        probes,
        up_rx,
        last_status_line: String::new(),
    };
    loops.spawn("sync-loop", move |stop, handle| {
        sync_loop.run(&stop, &handle)
    })?;

    Ok(Running {
        loops,
        shutdown,
        unblockers,
        first_relist,
        bound,
        pods: pods_view,
    })
}

/// The pod workers' syncer: runs the runtime manager and publishes the status.
struct SyncHandler {
    manager: Arc<RuntimeManager>,
    statuses: Arc<StatusCache>,
    queue: Arc<WorkQueue>,
    probes: Arc<ProbeManager>,
    host_ip: String,
    resync: Duration,
}

impl PodSyncer for SyncHandler {
    fn sync_pod(&self, pod: &Pod) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        match self.manager.sync_pod(pod) {
            Ok(r) => {
                let previous = self.statuses.get(&uid);
                let st = status::generate(
                    pod,
                    &r.runtime_pod,
                    &StatusInputs {
                        waiting: &r.waiting,
                        previous: previous.as_deref(),
                        host_ip: &self.host_ip,
                        now: SystemTime::now(),
                        probes: Some(self.probes.results()),
                    },
                );
                // The prober follows the containers this sync left running.
                self.probes
                    .update_pod(pod, &r.runtime_pod, st.pod_ip.as_deref());
                self.statuses.set(&uid, st);
                let after = r.requeue_after.map_or(self.resync, |d| d.min(self.resync));
                self.queue.enqueue(&uid, after);
            }
            Err(e) => {
                if e.runtime_unavailable() {
                    log::debug!("{}", crate::loops::error_chain(&e));
                } else {
                    log::warn!("{}", crate::loops::error_chain(&e));
                }
                self.queue.enqueue(&uid, SYNC_ERROR_REQUEUE);
            }
        }
    }

    fn kill_pod(&self, uid: &str, grace: Duration) {
        // Nothing probes a pod that is going away.
        self.probes.remove_pod(uid);
        match self.manager.kill_pod(uid, grace) {
            Ok(()) => {
                self.statuses.remove(uid);
                self.queue.remove(uid);
            }
            Err(e) => log::warn!(
                "killing pod {uid}: {} (housekeeping retries)",
                crate::loops::error_chain(&e)
            ),
        }
    }
}

/// What woke the sync loop (upstream `syncLoopIteration`'s channels).
#[derive(Debug)]
enum Event {
    Config(SourceUpdate),
    Pleg(PlegEvent),
    Probe(ProbeEvent),
    RuntimeUp,
    SyncTick,
    Housekeeping,
    Shutdown,
}

struct SyncLoop {
    pod_config: PodConfig,
    /// The pod manager: desired pods by UID. Owned here only.
    pods: HashMap<String, Arc<Pod>>,
    view: Arc<PodsView>,
    workers: Arc<PodWorkers>,
    queue: Arc<WorkQueue>,
    pleg: Arc<PlegShared>,
    runtime_health: Arc<RuntimeHealth>,
    statuses: Arc<StatusCache>,
    manager: Arc<RuntimeManager>,
    sources_rx: Receiver<SourceUpdate>,
    pleg_rx: Receiver<PlegEvent>,
    probe_rx: Receiver<ProbeEvent>,
    probes: Arc<ProbeManager>,
    up_rx: Receiver<()>,
    last_status_line: String,
}

impl SyncLoop {
    fn run(mut self, stop: &Stop, handle: &LoopHandle) {
        let sync_tick = crossbeam_channel::tick(SYNC_TICK);
        let housekeeping = crossbeam_channel::tick(HOUSEKEEPING_PERIOD);
        log::info!("Starting kubelet main sync loop");
        loop {
            let event = self.next_event(stop, &sync_tick, &housekeeping);
            let began = handle.begin_tick();
            if matches!(event, Event::Shutdown) {
                handle.end_tick(began, None);
                return;
            }
            self.handle_event(event);
            handle.end_tick(began, None);
        }
    }

    fn next_event(
        &self,
        stop: &Stop,
        sync_tick: &Receiver<Instant>,
        housekeeping: &Receiver<Instant>,
    ) -> Event {
        // select! picks among ready arms at random; nothing here depends on the order.
        crossbeam_channel::select! {
            recv(stop.receiver()) -> _ => Event::Shutdown,
            recv(self.sources_rx) -> u => match u {
                Ok(u) => Event::Config(u),
                // Every source has stopped: only shutdown does that.
                Err(_) => Event::Shutdown,
            },
            recv(self.pleg_rx) -> e => match e {
                Ok(e) => Event::Pleg(e),
                Err(_) => Event::Shutdown,
            },
            recv(self.probe_rx) -> e => match e {
                Ok(e) => Event::Probe(e),
                Err(_) => Event::Shutdown,
            },
            recv(self.up_rx) -> _ => Event::RuntimeUp,
            recv(sync_tick) -> _ => Event::SyncTick,
            recv(housekeeping) -> _ => Event::Housekeeping,
        }
    }

    fn handle_event(&mut self, event: Event) {
        match event {
            Event::Config(u) => {
                let now = crate::time::rfc3339_nano(SystemTime::now());
                let mut updates = self.pod_config.merge(u, &now);
                // Drain a burst of snapshots in one iteration.
                while let Ok(u) = self.sources_rx.try_recv() {
                    updates.extend(self.pod_config.merge(u, &now));
                }
                for u in updates {
                    self.handle_update(u);
                }
                self.publish();
            }
            Event::Pleg(e) => {
                let mut events = vec![e];
                events.extend(self.pleg_rx.try_iter());
                for e in events {
                    if e.kind == PlegEventType::ContainerRemoved {
                        continue;
                    }
                    if let Some(pod) = self.pods.get(&e.pod_uid) {
                        self.workers.update_pod(&e.pod_uid, Work::Sync(pod.clone()));
                    }
                }
            }
            Event::Probe(e) => {
                // A changed result syncs its pod at once (upstream: liveness failures,
                // readiness and startup changes; the prober sends only those).
                let mut uids = std::collections::BTreeSet::new();
                for e in std::iter::once(e).chain(self.probe_rx.try_iter()) {
                    if e.probe_type == ProbeType::Liveness && e.result == ProbeResult::Failure {
                        log::info!(
                            "SyncLoop (probe) probe=liveness status=unhealthy pod={} container={}",
                            e.pod_uid,
                            e.container
                        );
                    }
                    uids.insert(e.pod_uid);
                }
                for uid in uids {
                    if let Some(pod) = self.pods.get(&uid) {
                        self.workers.update_pod(&uid, Work::Sync(pod.clone()));
                    }
                }
            }
            Event::RuntimeUp => {
                for (uid, pod) in &self.pods {
                    self.workers.update_pod(uid, Work::Sync(pod.clone()));
                }
            }
            Event::SyncTick => {
                if self.runtime_health.healthy(Instant::now()).is_err() {
                    log::debug!("Skipping pod synchronization: container runtime is not up");
                    return;
                }
                for uid in self.queue.take_due(Instant::now()) {
                    if let Some(pod) = self.pods.get(&uid) {
                        self.workers.update_pod(&uid, Work::Sync(pod.clone()));
                    }
                }
                self.workers.requeue_stranded();
            }
            Event::Housekeeping => self.housekeeping(),
            Event::Shutdown => {}
        }
    }

    fn handle_update(&mut self, u: PodUpdate) {
        match u.op {
            PodOp::Add | PodOp::Update | PodOp::Delete => {
                for pod in u.pods {
                    let uid = pod.metadata.uid.clone().unwrap_or_default();
                    let pod = Arc::new(pod);
                    if u.op == PodOp::Add {
                        log::info!(
                            "SyncLoop ADD source={} pod={}",
                            u.source,
                            crate::kuberuntime::actions::format_pod(&pod)
                        );
                    } else {
                        log::info!(
                            "SyncLoop UPDATE source={} pod={}",
                            u.source,
                            crate::kuberuntime::actions::format_pod(&pod)
                        );
                    }
                    self.pods.insert(uid.clone(), pod.clone());
                    if pod.metadata.deletion_timestamp.is_some() {
                        // Gracefully deleted at its source: stop it with its grace.
                        let grace = pod
                            .metadata
                            .deletion_grace_period_seconds
                            .unwrap_or_else(|| labels::grace_period_seconds(&pod));
                        self.workers.update_pod(
                            &uid,
                            Work::Kill(Duration::from_secs(grace.unsigned_abs())),
                        );
                    } else {
                        self.workers.update_pod(&uid, Work::Sync(pod));
                    }
                }
            }
            PodOp::Remove => {
                for pod in u.pods {
                    let uid = pod.metadata.uid.clone().unwrap_or_default();
                    log::info!(
                        "SyncLoop REMOVE source={} pod={}",
                        u.source,
                        crate::kuberuntime::actions::format_pod(&pod)
                    );
                    self.pods.remove(&uid);
                    self.queue.remove(&uid);
                    if self.pod_config.seen_all_sources() {
                        let grace = labels::grace_period_seconds(&pod);
                        self.workers.update_pod(
                            &uid,
                            Work::Kill(Duration::from_secs(grace.unsigned_abs())),
                        );
                    } else {
                        // Upstream refuses deletes until every source is ready;
                        // housekeeping kills the pod as an orphan once they are.
                        log::info!("skipping delete of {uid}: sources are not ready yet");
                    }
                }
            }
            PodOp::Reconcile => {
                for pod in u.pods {
                    let uid = pod.metadata.uid.clone().unwrap_or_default();
                    self.pods.insert(uid, Arc::new(pod));
                }
            }
        }
    }

    fn publish(&self) {
        let mut pods: Vec<Arc<Pod>> = self.pods.values().cloned().collect();
        pods.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name)
                .cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        self.view.publish(pods);
    }

    /// Upstream `HandlePodCleanups`: kill runtime pods that no source wants (orphans),
    /// forget statuses of pods that are gone, expire backoff entries. Skipped until
    /// every source has sent its first snapshot, so a restart never kills pods whose
    /// source has not spoken yet.
    fn housekeeping(&mut self) {
        if !self.pod_config.seen_all_sources() {
            log::debug!(
                "housekeeping skipped: sources not ready: {:?}",
                self.pod_config.sources_not_ready()
            );
            return;
        }
        let began = Instant::now();
        for (uid, info) in self.pleg.runtime_pods().iter() {
            if self.pods.contains_key(uid) || self.workers.is_active(uid) {
                continue;
            }
            log::info!("killing orphaned pod {} ({uid})", info.full_name);
            self.workers.update_pod(
                uid,
                Work::Kill(Duration::from_secs(info.grace_seconds.unsigned_abs())),
            );
        }
        self.probes
            .cleanup_pods(&|uid| self.pods.contains_key(uid) || self.workers.is_active(uid));
        for uid in self.statuses.uids() {
            if !self.pods.contains_key(&uid) && !self.workers.is_active(&uid) {
                self.statuses.remove(&uid);
            }
        }
        self.manager.gc_backoff();
        self.status_line();
        if began.elapsed() > HOUSEKEEPING_WARNING {
            log::warn!(
                "Housekeeping took longer than expected: {:?}",
                began.elapsed()
            );
        }
    }

    /// Tells systemd (if it is listening) how many pods run, when that changes.
    fn status_line(&mut self) {
        let running = self
            .pods
            .keys()
            .filter_map(|u| self.statuses.get(u))
            .filter(|s| s.phase.as_deref() == Some("Running"))
            .count();
        let line = format!("{} pods, {} running", self.pods.len(), running);
        if line != self.last_status_line {
            crate::systemd::notify(&format!("STATUS={line}"));
            self.last_status_line = line;
        }
    }
}
