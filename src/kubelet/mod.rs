//! The kubelet: wires the components together and owns the sync loop (upstream
//! `pkg/kubelet/kubelet.go`: `Run`, `syncLoop`, `syncLoopIteration`, the `Handle*`
//! functions and `HandlePodCleanups`).
//!
//! The `sync-loop` thread owns the pod manager (the desired pods by UID) and the
//! PodConfig merge. It waits on one `select!` over: source snapshots, PLEG events,
//! probe results, runtime-up notices, the 1 s sync ticker, the 2 s housekeeping ticker
//! and shutdown, and hands every pod's work to the pod workers. It never calls the
//! runtime itself.

mod sources;
mod sync_loop;
mod syncer;
#[cfg(test)]
mod testing;

use sources::PreparedSources;
use sync_loop::SyncLoop;
use syncer::SyncHandler;

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use crate::config::KubeletConfig;
use crate::health::{HealthChecks, RuntimeHealth, RUNTIME_UP_PERIOD};
use crate::kuberuntime::container::dns::DnsSettings;
use crate::kuberuntime::container::NodeContext;
use crate::kuberuntime::{ManagerConfig, RuntimeManager};
use crate::loops::{shutdown_channel, Loops, Periodic, Shutdown, SpawnError};
use crate::pleg::{Pleg, PlegEvent, PlegShared, CHANNEL_CAPACITY, RELIST_PERIOD};
use crate::pod_killer::PodKiller;
use crate::pod_workers::{PodWorkers, WorkQueue, DEFAULT_WORKERS};
use crate::podconfig::{PodConfig, SourceUpdate};
use crate::prober::{ProbeEvent, ProbeManager};
use crate::runtime::Runtime;
use crate::server::readonly::{PodsView, ReadOnly};
use crate::server::{self, ServerError, Unblockers};
use crate::status::StatusCache;
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
    let parts = Components::new(&cfg, &runtime, &loops, probe_tx)?;
    let pods_view = parts.pods_view.clone();
    let checks = HealthChecks {
        registry: loops.registry(),
        pleg: parts.pleg_shared.clone(),
        runtime: parts.runtime_health.clone(),
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
                    probe_metrics: parts.probes.metrics().clone(),
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
        let health = parts.runtime_health.clone();
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
        parts.pleg_shared.clone(),
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
    let handler = parts.syncer(&loops, &cfg)?;
    // Volume manager: removes the directories of pods that are gone.
    {
        let volumes = parts.volumes.clone();
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
    parts.workers.start(&loops, DEFAULT_WORKERS, handler)?;

    // The sync loop.
    let sync_loop = parts.sync_loop(
        PodConfig::new(&sources),
        LoopInputs {
            sources: source_rx,
            pleg: pleg_rx,
            probes: probe_rx,
            runtime_up: up_rx,
        },
    );
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

/// What the sync loop receives from the loops around it.
#[derive(Debug)]
struct LoopInputs {
    sources: Receiver<SourceUpdate>,
    pleg: Receiver<PlegEvent>,
    probes: Receiver<ProbeEvent>,
    runtime_up: Receiver<()>,
}

/// The components the sync loop, the pod workers and the servers share. [`start`]
/// builds them; so do the sync loop's and the syncer's unit tests, over a
/// `FakeRuntime` and without ports or source threads, so that the tests drive the
/// same graph the daemon runs.
#[derive(Debug)]
struct Components {
    probes: Arc<ProbeManager>,
    statuses: Arc<StatusCache>,
    pods_view: Arc<PodsView>,
    pleg_shared: Arc<PlegShared>,
    runtime_health: Arc<RuntimeHealth>,
    work_queue: Arc<WorkQueue>,
    workers: Arc<PodWorkers>,
    volumes: Arc<VolumeManager>,
    manager: Arc<RuntimeManager>,
    host_ip: String,
}

impl Components {
    /// Builds the shared state and starts the prober's threads; changed probe results
    /// go to `probe_tx`.
    fn new(
        cfg: &KubeletConfig,
        runtime: &Arc<dyn Runtime>,
        loops: &Loops,
        probe_tx: Sender<ProbeEvent>,
    ) -> Result<Components, SpawnError> {
        let probes = ProbeManager::start(
            loops,
            runtime.clone(),
            crate::prober::PROBE_WORKERS,
            probe_tx,
        )?;
        let statuses = Arc::new(StatusCache::default());
        let pods_view = Arc::new(PodsView::new(statuses.clone()));
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
        Ok(Components {
            probes,
            statuses,
            pods_view,
            pleg_shared: Arc::new(PlegShared::default()),
            runtime_health: Arc::new(RuntimeHealth::default()),
            work_queue: Arc::new(WorkQueue::default()),
            workers: Arc::new(PodWorkers::default()),
            volumes,
            manager,
            host_ip,
        })
    }

    /// Starts the pod killer and returns the pod workers' syncer.
    fn syncer(&self, loops: &Loops, cfg: &KubeletConfig) -> Result<Arc<SyncHandler>, SpawnError> {
        let killer = PodKiller::start(loops, self.manager.clone())?;
        Ok(Arc::new(SyncHandler {
            manager: self.manager.clone(),
            statuses: self.statuses.clone(),
            queue: self.work_queue.clone(),
            probes: self.probes.clone(),
            host_ip: self.host_ip.clone(),
            resync: cfg.sync_frequency,
            killer,
            workers: self.workers.clone(),
        }))
    }

    /// The sync loop over these components, fed by `inputs`.
    fn sync_loop(self, pod_config: PodConfig, inputs: LoopInputs) -> SyncLoop {
        SyncLoop {
            pod_config,
            pods: HashMap::new(),
            view: self.pods_view,
            workers: self.workers,
            queue: self.work_queue,
            pleg: self.pleg_shared,
            runtime_health: self.runtime_health,
            statuses: self.statuses,
            manager: self.manager,
            volumes: self.volumes,
            sources_rx: inputs.sources,
            pleg_rx: inputs.pleg,
            probe_rx: inputs.probes,
            probes: self.probes,
            up_rx: inputs.runtime_up,
            last_status_line: String::new(),
        }
    }
}
