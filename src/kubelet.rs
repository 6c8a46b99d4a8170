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
use crate::kuberuntime::container::dns::DnsSettings;
use crate::kuberuntime::container::NodeContext;
use crate::kuberuntime::{KillPodRequest, ManagerConfig, RuntimeManager, SyncInputs};
use crate::loops::{shutdown_channel, LoopHandle, Loops, Periodic, Shutdown, SpawnError, Stop};
use crate::pleg::{Pleg, PlegEvent, PlegEventType, PlegShared, CHANNEL_CAPACITY, RELIST_PERIOD};
use crate::pod_killer::PodKiller;
use crate::pod_workers::{Kill, Outcome, PodSyncer, PodWorkers, Work, WorkQueue, DEFAULT_WORKERS};
use crate::podconfig::{PodConfig, PodOp, PodUpdate, Source, SourceUpdate};
use crate::prober::{ProbeEvent, ProbeManager, ProbeResult, ProbeType};
use crate::runtime::Runtime;
use crate::server::readonly::{PodsView, ReadOnly};
use crate::server::{self, ServerError, Unblockers};
use crate::status::{self, StatusCache, StatusInputs};
use crate::volume::{VolumeManager, VOLUME_MGR_PERIOD};

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
    /// A pod source's settings cannot be used (kubeconfig, etcd TLS files).
    Source(Box<dyn std::error::Error + Send + Sync>),
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
            StartError::Source(e) => e.fmt(f),
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
            StartError::Source(e) => e.source(),
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
    // Source settings are checked before anything starts, like the ports.
    let prepared = PreparedSources::prepare(&cfg)?;
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
    let host_ip = crate::netutil::node_ip();
    let allocatable = crate::kuberuntime::container::node_allocatable(&cfg.root_dir);
    let volumes = Arc::new(VolumeManager::new(
        cfg.root_dir.clone(),
        runtime.clone(),
        cfg.node_name.clone(),
        u64::try_from(allocatable.memory).unwrap_or(0),
    ));
    let manager = Arc::new(
        RuntimeManager::new(
            runtime.clone(),
            ManagerConfig {
                node_name: cfg.node_name.clone(),
                pod_infra_image: cfg.pod_infra_container_image.clone(),
                node: NodeContext {
                    root_dir: cfg.root_dir.clone(),
                    host_ips: vec![host_ip.clone()],
                    dns: DnsSettings {
                        cluster_dns: cfg.cluster_dns.clone(),
                        cluster_domain: cfg.cluster_domain.clone(),
                        resolv_conf: cfg.resolv_conf.clone(),
                    },
                    allocatable,
                    volumes: volumes.clone(),
                },
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
    let limits = server::Limits::PLAIN.fit_to_descriptors(listeners.len());
    for (name, listener) in listeners {
        match name {
            "healthz" => {
                let checks = checks.clone();
                server::serve(
                    &loops,
                    "srv-healthz",
                    listener,
                    limits,
                    &unblockers,
                    move |r| server::healthz::handle(&checks, r),
                )?;
            }
            _ => {
                let ro = ReadOnly {
                    checks: checks.clone(),
                    pods: pods_view.clone(),
                    registry: loops.registry(),
                    probe_metrics: probes.metrics().clone(),
                };
                server::serve(
                    &loops,
                    "srv-readonly",
                    listener,
                    limits,
                    &unblockers,
                    move |r| server::readonly::handle(&ro, r),
                )?;
            }
        }
    }

    // Sources: each configured one is registered with the merge, so nothing
    // destructive happens until every one of them has sent its first snapshot.
    let (source_tx, source_rx) = crossbeam_channel::bounded(SOURCE_CHANNEL_CAPACITY);
    let sources = prepared.start(&loops, &cfg, &source_tx)?;
    drop(source_tx);

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

    // Pod killer and pod workers.
    let killer = PodKiller::start(&loops, manager.clone())?;
    // Volume manager: removes the directories of pods that are gone.
    {
        let volumes = volumes.clone();
        loops.spawn_periodic(
            Periodic {
                name: "volume-mgr".into(),
                period: VOLUME_MGR_PERIOD,
                wake: None,
            },
            move || volumes.cleanup_orphans(),
        )?;
    }

    // Pod workers.
    let handler = Arc::new(SyncHandler {
        manager: manager.clone(),
        statuses: statuses.clone(),
        queue: work_queue.clone(),
        probes: probes.clone(),
        host_ip,
        resync: cfg.sync_frequency,
        killer,
        workers: workers.clone(),
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
        volumes,
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

/// The sources beyond the directory, with their settings checked and their files
/// read, ready to start.
struct PreparedSources {
    etcd: Option<crate::podconfig::etcd::EtcdConfig>,
    api: Option<Arc<crate::apiclient::ApiClient>>,
}

impl PreparedSources {
    fn prepare(cfg: &KubeletConfig) -> Result<PreparedSources, StartError> {
        let boxed = |e: Box<dyn std::error::Error + Send + Sync>| StartError::Source(e);
        let api = match &cfg.kubeconfig {
            Some(path) => {
                let rest =
                    crate::apiclient::kubeconfig::load(path).map_err(|e| boxed(Box::new(e)))?;
                let client =
                    crate::apiclient::ApiClient::new(rest).map_err(|e| boxed(Box::new(e)))?;
                Some(Arc::new(client))
            }
            None => None,
        };
        let mut prepared = PreparedSources { etcd: None, api };
        if !cfg.etcd_servers.is_empty() {
            let read = |flag: &str,
                        p: &Option<std::path::PathBuf>|
             -> Result<Option<Vec<u8>>, StartError> {
                p.as_ref()
                    .map(|p| {
                        std::fs::read(p).map_err(|e| {
                            boxed(format!("{flag} {}: cannot read it: {e}", p.display()).into())
                        })
                    })
                    .transpose()
            };
            let tls = crate::apiclient::http::TlsSettings {
                ca_pem: read("--etcd-cafile", &cfg.etcd_cafile)?,
                cert_pem: read("--etcd-certfile", &cfg.etcd_certfile)?,
                key_pem: read("--etcd-keyfile", &cfg.etcd_keyfile)?,
                insecure: false,
            };
            crate::apiclient::http::tls_config(&tls)
                .map_err(|r| boxed(format!("etcd TLS files: {r}").into()))?;
            prepared.etcd = Some(crate::podconfig::etcd::EtcdConfig {
                servers: cfg.etcd_servers.clone(),
                prefix: cfg.etcd_prefix.clone(),
                tls,
            });
        }
        Ok(prepared)
    }

    /// Starts every configured source; returns them, for the merge to wait for.
    fn start(
        self,
        loops: &Loops,
        cfg: &KubeletConfig,
        tx: &crossbeam_channel::Sender<SourceUpdate>,
    ) -> Result<Vec<Source>, StartError> {
        let mut sources = Vec::new();
        if let Some(path) = &cfg.static_pod_path {
            crate::podconfig::file::start(
                loops,
                path.clone(),
                cfg.node_name.clone(),
                cfg.file_check_frequency,
                tx.clone(),
            )?;
            sources.push(Source::File);
        }
        if let Some(url) = &cfg.manifest_url {
            crate::podconfig::http::start(
                loops,
                url.clone(),
                cfg.manifest_url_headers.clone(),
                cfg.node_name.clone(),
                cfg.http_check_frequency,
                tx.clone(),
            )?;
            sources.push(Source::Http);
        }
        if let Some(etcd_cfg) = self.etcd {
            let etcd = crate::podconfig::etcd::EtcdSource::new(
                etcd_cfg,
                cfg.node_name.clone(),
                tx.clone(),
            )
            .map_err(|e| StartError::Source(Box::new(e)))?;
            crate::podconfig::etcd::start(loops, etcd)?;
            sources.push(Source::Etcd);
        }
        match self.api {
            Some(client) => {
                let source = crate::podconfig::apiserver::ApiSource::new(
                    client,
                    cfg.node_name.clone(),
                    tx.clone(),
                );
                crate::podconfig::apiserver::start(loops, source)?;
                sources.push(Source::Api);
            }
            None => log::info!("Kubelet is running in standalone mode, will skip API server sync"),
        }
        log::info!(
            "pod sources: {}",
            sources
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        Ok(sources)
    }
}

/// The pod workers' syncer: runs the runtime manager, publishes the status, and hands
/// whole-pod kills to the pod killer.
struct SyncHandler {
    manager: Arc<RuntimeManager>,
    statuses: Arc<StatusCache>,
    queue: Arc<WorkQueue>,
    probes: Arc<ProbeManager>,
    host_ip: String,
    resync: Duration,
    killer: PodKiller,
    workers: Arc<PodWorkers>,
}

impl SyncHandler {
    /// Hands a kill to the pod killer; when it ends, `after` runs and the pod's slot is
    /// released.
    fn hand_over(
        &self,
        req: KillPodRequest,
        was_kill: bool,
        after: impl FnOnce(Result<(), crate::runtime::RuntimeError>) + Send + 'static,
    ) -> Outcome {
        let workers = self.workers.clone();
        let uid = req.uid.clone();
        self.killer.submit(
            req,
            Box::new(move |r| {
                after(r);
                workers.finish(&uid, was_kill);
            }),
        );
        Outcome::Continues
    }
}

impl PodSyncer for SyncHandler {
    fn sync_pod(&self, pod: &Arc<Pod>) -> Outcome {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let previous = self.statuses.get(&uid);
        let now = SystemTime::now();
        // A pod that is done only stops: its phase is terminal, its active deadline
        // passed (upstream's activeDeadlineHandler), or it is being deleted.
        let terminal = previous
            .as_deref()
            .is_some_and(|p| status::is_terminal_phase(p.phase.as_deref()))
            || status::past_active_deadline(
                pod,
                previous.as_deref().and_then(status::start_time),
                now,
            )
            || pod.metadata.deletion_timestamp.is_some();
        match self.manager.sync_pod(pod, &SyncInputs { terminal }) {
            Ok(r) => {
                let st = status::generate(
                    pod,
                    &r.runtime_pod,
                    &StatusInputs {
                        waiting: &r.waiting,
                        previous: previous.as_deref(),
                        host_ip: &self.host_ip,
                        now,
                        pod_is_terminal: pod.metadata.deletion_timestamp.is_some(),
                        probes: Some(self.probes.results()),
                    },
                );
                // The prober follows the containers this sync left running.
                self.probes
                    .update_pod(pod, &r.runtime_pod, st.pod_ip.as_deref());
                if st.phase != previous.as_deref().and_then(|p| p.phase.clone()) {
                    log::info!(
                        "pod {}: phase {}{}",
                        crate::kuberuntime::actions::format_pod(pod),
                        st.phase.as_deref().unwrap_or_default(),
                        st.reason
                            .as_deref()
                            .map(|r| format!(" ({r})"))
                            .unwrap_or_default()
                    );
                }
                self.statuses.set(&uid, st);
                if r.kill_pod {
                    // Sync again once it is down: a new sandbox, or the final status.
                    let queue = self.queue.clone();
                    let u = uid.clone();
                    let req = KillPodRequest {
                        uid,
                        pod: Some(pod.clone()),
                        grace_override: None,
                        remove: false,
                    };
                    return self.hand_over(req, false, move |res| {
                        if let Err(e) = res {
                            log::warn!("killing pod {u}: {}", crate::loops::error_chain(&e));
                        }
                        queue.enqueue(&u, Duration::ZERO);
                    });
                }
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
        Outcome::Done
    }

    fn kill_pod(&self, uid: &str, kill: &Kill) -> Outcome {
        // Nothing probes a pod that is going away.
        self.probes.remove_pod(uid);
        let req = KillPodRequest {
            uid: uid.to_string(),
            pod: kill.pod.clone(),
            grace_override: kill.grace,
            remove: kill.remove,
        };
        let statuses = self.statuses.clone();
        let queue = self.queue.clone();
        let u = uid.to_string();
        let remove = kill.remove;
        self.hand_over(req, true, move |res| match res {
            Ok(()) if remove => {
                statuses.remove(&u);
                queue.remove(&u);
            }
            Ok(()) => {
                // Upstream `TerminatePod`: what did not end visibly ended unknown.
                if let Some(prev) = statuses.get(&u) {
                    statuses.set(&u, status::terminate(&prev));
                }
            }
            Err(e) => log::warn!(
                "killing pod {u}: {} (housekeeping retries)",
                crate::loops::error_chain(&e)
            ),
        })
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
    volumes: Arc<VolumeManager>,
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
            // Pods held back by a name conflict between sources or refused as invalid
            // stay visible (as this loop's warning on /healthz?verbose and
            // /debug/loops) while it lasts.
            let conflicts = self.pod_config.held_back();
            handle.end_tick(began, (!conflicts.is_empty()).then(|| conflicts.join("\n")));
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
                let mut due = self.queue.take_due(Instant::now());
                due.extend(self.past_deadline(SystemTime::now()));
                due.sort();
                due.dedup();
                for uid in due {
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
                        // Gracefully deleted at its source: stop it with its grace
                        // (each container's: the deletion grace, else its spec's).
                        self.workers.update_pod(
                            &uid,
                            Work::Kill(Kill {
                                pod: Some(pod),
                                grace: None,
                                remove: false,
                            }),
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
                        self.workers.update_pod(
                            &uid,
                            Work::Kill(Kill {
                                pod: Some(Arc::new(pod)),
                                grace: None,
                                remove: true,
                            }),
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

    /// Pods whose `activeDeadlineSeconds` has passed and that are not failed yet: the
    /// sync tick syncs them, which fails and stops them (upstream: the
    /// `activeDeadlineHandler`'s `ShouldSync` in `getPodsToSync`).
    fn past_deadline(&self, now: SystemTime) -> Vec<String> {
        self.pods
            .iter()
            .filter(|(uid, pod)| {
                let Some(st) = self.statuses.get(uid) else {
                    return false;
                };
                !status::is_terminal_phase(st.phase.as_deref())
                    && status::past_active_deadline(pod, status::start_time(&st), now)
            })
            .map(|(uid, _)| uid.clone())
            .collect()
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
                Work::Kill(Kill {
                    pod: None,
                    // From a Docker label: any i64, negative or huge.
                    grace: Some(crate::time::secs(info.grace_seconds)),
                    remove: true,
                }),
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
        // Only now (every source seen) may pod directories of other pods go.
        self.volumes.set_desired_pods(self.pods.keys().cloned());
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
