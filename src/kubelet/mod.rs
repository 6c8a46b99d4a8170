//! The kubelet: wires the components together and owns the sync loop (upstream
//! `pkg/kubelet/kubelet.go`: `Run`, `syncLoop`, `syncLoopIteration`, the `Handle*`
//! functions and `HandlePodCleanups`).
//!
//! The `sync-loop` thread owns the pod manager (the desired pods by UID) and the
//! PodConfig merge. It waits on one `select!` over: source snapshots, PLEG events,
//! probe results, runtime-up notices, the 1 s sync ticker, the 2 s housekeeping ticker
//! and shutdown, and hands every pod's work to the pod workers. It never calls the
//! runtime itself.
//!
//! Over 800 lines: the wiring (`start`, `Components`) and, at the end, the test kubelet
//! the sync loop's and the syncer's tests share (as a sibling file it would be an
//! import cycle).

mod admit;
#[cfg(test)]
mod cgroup2_guest;
mod connect;
mod eviction;
mod node;
mod port;
mod sources;
mod sync_loop;
mod syncer;

pub use connect::check_endpoint;
use connect::RuntimeKind;
use port::PreparedPort;
use sources::PreparedSources;
use sync_loop::SyncLoop;
use syncer::SyncHandler;

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use crate::config::KubeletConfig;
use crate::health::{HealthChecks, RuntimeHealth, RUNTIME_UP_PERIOD};
use crate::instrumented::InstrumentedRuntime;
use crate::kuberuntime::container::dns::DnsSettings;
use crate::kuberuntime::container::NodeContext;
use crate::kuberuntime::{ManagerConfig, RuntimeManager};
use crate::metrics::KubeletMetrics;
use crate::pleg::{evented, Pleg, PlegEvent, PlegShared, CHANNEL_CAPACITY};
use crate::pod_killer::PodKiller;
use crate::pod_workers::{PodWorkers, WorkQueue, DEFAULT_WORKERS};
use crate::podconfig::server::ServerSource;
use crate::podconfig::{PodConfig, SourceUpdate};
use crate::prober::{ProbeEvent, ProbeManager};
use crate::server;
use crate::server::http_metrics::ServerType;
use crate::server::kubelet::KubeletServer;
use crate::server::readonly::{PodsView, ReadOnly};
use crate::stats::{StatsConfig, StatsProvider};
use crate::status::manager::PodManagerView;
use crate::status::StatusCache;
use crate::volume::{VolumeManager, VOLUME_MGR_PERIOD};
use base::loops::{shutdown_channel, Loops, Periodic, Shutdown, SpawnError};
use runtime::Runtime;
use wire::server::{ServerError, Unblockers};

/// Upstream's sync ticker: pods whose work-queue time is due are synced.
pub(crate) const SYNC_TICK: Duration = Duration::from_secs(1);
/// Upstream `housekeepingPeriod`.
pub(crate) const HOUSEKEEPING_PERIOD: Duration = Duration::from_secs(2);
/// Upstream's buffer of the merged updates channel.
pub(crate) const SOURCE_CHANNEL_CAPACITY: usize = 50;
/// Requeue after a failed sync (upstream `backOffPeriod` 10 s).
pub(crate) const SYNC_ERROR_REQUEUE: Duration = Duration::from_secs(10);
/// Pods named by finished image pulls, waiting for the sync loop. A burst beyond this
/// is synced by each pod's own requeue instead.
pub(crate) const PULLED_CHANNEL_CAPACITY: usize = 256;
/// A housekeeping run slower than this is worth a warning (upstream value).
pub(crate) const HOUSEKEEPING_WARNING: Duration = Duration::from_secs(1);

/// Errors that stop the kubelet from starting.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A port could not be bound.
    #[error(transparent)]
    Server(#[from] ServerError),
    /// A thread could not be spawned.
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    /// A pod source's settings cannot be used (kubeconfig, etcd TLS files).
    #[error(transparent)]
    Source(Box<dyn std::error::Error + Send + Sync>),
    /// The kubelet port's TLS cannot be set up (files, self-signed pair).
    #[error("kubelet port: {0}")]
    Tls(#[source] wire::tls::TlsError),
    /// The eviction flags are refused.
    #[error("eviction thresholds: {0}")]
    Eviction(#[source] crate::eviction::api::ThresholdError),
    /// `--allowed-unsafe-sysctls` names a sysctl that is not namespaced.
    #[error("allowed unsafe sysctls: {0}")]
    Sysctl(#[source] crate::sysctl::SysctlError),
    /// The runtime endpoint cannot be used (a CRI runtime not on v1).
    #[error("container runtime: {0}")]
    Runtime(#[source] runtime::RuntimeError),
    /// The root directory could not be created.
    #[error("cannot create root directory {path}")]
    RootDir {
        /// The directory.
        path: std::path::PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// A running kubelet: the handles main needs to wait for readiness and shut it down.
#[derive(Debug)]
pub struct Running {
    loops: Loops,
    shutdown: Shutdown,
    unblockers: Unblockers,
    /// Receives one message after the first successful relist (systemd readiness).
    pub first_relist: Receiver<()>,
    /// Receives the error that must end the process (a TLS bootstrap whose CSR was
    /// denied); disconnected when nothing can send one.
    pub fatal: Receiver<String>,
    /// The addresses actually bound (healthz, read-only), for logs and tests.
    pub bound: Vec<(&'static str, SocketAddr)>,
    /// Pods and statuses, for the status line.
    pub pods: Arc<PodsView>,
    /// The healthz checks, for the systemd watchdog.
    checks: HealthChecks,
}

impl Running {
    /// The loop helper, for threads main starts beside the kubelet's (`signals`).
    pub fn loops(&self) -> &Loops {
        &self.loops
    }

    /// Starts the `watchdog` loop if systemd asked for one (`$WATCHDOG_USEC`): main
    /// calls it once the kubelet is ready, when systemd's watchdog begins to count.
    /// It pings while the sync loop and the PLEG are healthy.
    pub fn start_watchdog(&self) -> Result<(), SpawnError> {
        let Some(wd) = crate::systemd::Watchdog::from_env() else {
            return Ok(());
        };
        let checks = self.checks.clone();
        crate::systemd::start_watchdog(&self.loops, wd, move || {
            checks.watchdog(std::time::Instant::now())
        })
    }

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

/// The name of the node warning `/healthz?verbose` shows for a kernel without the
/// memory cgroup controller.
const MEMORY_CGROUP_WARNING: &str = "memory-cgroup";

/// Start-up's check of the memory cgroup controller under `mount` (`proc_cgroups`:
/// `/proc/cgroups`' text): None when the kernel has it, else the one message that says
/// what follows and how to fix it (logged once; `/healthz?verbose`'s
/// [`MEMORY_CGROUP_WARNING`]).
fn memory_cgroup_missing(mount: &std::path::Path, proc_cgroups: Option<&str>) -> Option<String> {
    if crate::cm::cgroups::memory_controller(mount, proc_cgroups) {
        return None;
    }
    Some(format!(
        "the kernel has no memory cgroup controller: memory limits cannot be enforced, \
         so pods with one are refused ({}); pods without one run. To fix it, {}",
        admit::MEMORY_CGROUP_MISSING,
        admit::MEMORY_CGROUP_FIX
    ))
}

/// Starts every loop of the kubelet. Ports are bound before any thread starts, so a
/// port in use fails here with nothing left running.
pub fn start(cfg: KubeletConfig) -> Result<Running, StartError> {
    make_root_dir(&cfg.root_dir)?;
    let eviction_config = eviction::config(&cfg).map_err(StartError::Eviction)?;
    // Source settings are checked before anything starts, like the ports.
    let mut prepared = PreparedSources::prepare(&cfg)?;
    let ports = bind_ports(&cfg, &prepared)?;
    let bound = ports.bound();

    let (shutdown, stop) = shutdown_channel();
    let loops = Loops::new(stop.clone());
    // The runtime's client spawns its threads through the loops, so it is made here.
    let connect::Connected { runtime, kind } =
        connect::connect_runtime(&cfg, &loops).map_err(StartError::Runtime)?;
    // The prober: changed results reach the sync loop over a bounded channel.
    let (probe_tx, probe_rx) = crossbeam_channel::bounded(crate::prober::EVENT_CAPACITY);
    let mut parts = Components::new(
        &cfg,
        &runtime,
        kind,
        &loops,
        probe_tx,
        prepared.api().cloned(),
    )?;
    let missing = memory_cgroup_missing(
        std::path::Path::new(crate::cm::CGROUP_MOUNT),
        std::fs::read_to_string("/proc/cgroups").ok().as_deref(),
    );
    parts.memory_cgroup = missing.is_none();
    if let Some(why) = &missing {
        log::error!("{why}");
    }
    let node_warnings: Vec<(String, String)> = missing
        .map(|why| (MEMORY_CGROUP_WARNING.to_string(), why))
        .into_iter()
        .collect();
    // Events reach the API server once its loop is there; the node's `Starting` first
    // (upstream records it in `Run`).
    if let Some(api) = prepared.api() {
        // The API server's JSON answers: the big stack, as every loop that reads them.
        let big = loops.with_stack_size(base::loops::BIG_STACK);
        crate::events::start(&big, api.clone(), &cfg.node_name, parts.metrics.clone())?;
    }
    crate::record::node_event(&cfg.node_name, false, "Starting", "Starting kubelet.");
    let pods_view = parts.pods_view.clone();
    // The resource analyzer (`stats`); the runtime's network readiness, which
    // `runtime-up` keeps.
    let stats_cfg = StatsConfig::new(&cfg).with_pleg(parts.pleg_shared.clone());
    let stats = crate::stats::start(&loops, stats_cfg, parts.runtime.clone())?;
    let network = Arc::new(crate::health::NetworkHealth::default());
    let checks = HealthChecks {
        registry: loops.registry(),
        pleg: parts.pleg_shared.clone(),
        runtime: parts.runtime_health.clone(),
        network: network.clone(),
        sync_frequency: cfg.sync_frequency,
        node_warnings,
    };
    let unblockers = Unblockers::default();

    // The merge's channel: every source sends on it. The server source (pods pushed
    // over the kubelet port) sends its stored set now, before the port serves and the
    // sync loop runs, as its first snapshot.
    let (source_tx, source_rx) = crossbeam_channel::bounded(SOURCE_CHANNEL_CAPACITY);
    let push = cfg
        .enable_server_source
        .then(|| ServerSource::open(&cfg.root_dir, &cfg.node_name, source_tx.clone()));
    if push.is_some() && ports.kubelet.is_none() {
        log::warn!(
            "the server pod source is enabled but the kubelet port is not served: its \
             stored pods run, and nothing can be pushed"
        );
    }

    // Servers first: they answer health questions while everything else starts.
    let served = Served {
        // Counted as every component's calls: the ports' container lookups, logs,
        // `/run`, exec and attach (a CRI runtime's `Exec`, `Attach`, `PortForward`),
        // as upstream's instrumented runtime service counts its server's.
        runtime: &parts.runtime,
        parts: &parts,
        checks: &checks,
        stats: &stats,
        unblockers: &unblockers,
        push: push.as_ref(),
    };
    start_servers(&loops, &cfg, ports, &served)?;

    // The client certificate: TLS bootstrap (the API client waits for it; static pods
    // do not) and rotation. A refused bootstrap reaches main through `fatal`.
    let (fatal_tx, fatal) = crossbeam_channel::bounded(1);
    if let Some(manager) = prepared.take_cert_manager() {
        manager.start(&loops.with_stack_size(base::loops::BIG_STACK), fatal_tx)?;
    }

    // Image archives before the sources: pods that need their images find them.
    let preloaded = start_image_preload(&loops, &cfg, &parts)?;

    // Sources: each configured one is registered with the merge, so nothing
    // destructive happens until every one of them has sent its first snapshot.
    let api = prepared.api().cloned();
    let sources = prepared.start(&loops, &cfg, &source_tx, push.is_some())?;
    drop(source_tx);

    let (up_tx, up_rx) = start_runtime_up(&loops, &parts, &network)?;
    let pleg = start_pleg(&loops, &cfg, &parts)?;
    let pulled_rx = start_image_pullers(&loops, &cfg, &parts)?;

    // Pod killer and pod workers.
    let handler = parts.syncer(&loops, &cfg, pleg.recheck_wake.clone())?;
    start_volume_loops(&loops, &parts)?;
    start_log_manager(&loops, &cfg, &parts)?;
    // Pod cgroups of pods that are gone (removed while the kubelet was down, or a
    // removal that failed).
    parts.start_pod_cgroup_gc(&loops)?;
    // Pod workers.
    parts.workers.start(&loops, DEFAULT_WORKERS, handler)?;

    let died_tx = start_reclaim(&loops, &cfg, &parts, eviction_config, &stats, preloaded)?;
    crate::oom_watcher::start(&loops, &cfg.node_name, std::path::Path::new("/dev/kmsg"))?;
    crate::logging::start_flush(&loops, cfg.log_flush_frequency)?;

    // With an API server: the Node and its lease; the status manager (statuses, mirror
    // pods and final deletes).
    if let Some(client) = api {
        node::start(
            &loops,
            &cfg,
            client.clone(),
            parts.runtime.clone(),
            &checks,
            parts.pressure.clone(),
            // Without --node-ip the address is followed; a change resyncs every pod
            // as the runtime coming up does.
            cfg.node_ip
                .is_none()
                .then(|| (parts.host_ip.clone(), up_tx)),
        )?;
        parts.start_status_manager(&loops, client, &cfg.node_name, pleg.recheck_wake)?;
    }

    // The sync loop.
    let mut sync_loop = parts.sync_loop(
        PodConfig::new(&sources),
        LoopInputs {
            sources: source_rx,
            pleg: pleg.events,
            probes: probe_rx,
            runtime_up: up_rx,
            pulled: pulled_rx,
        },
    );
    sync_loop.container_died = Some(died_tx);
    loops.spawn("sync-loop", move |stop, handle| {
        sync_loop.run(&stop, &handle)
    })?;

    Ok(Running {
        loops,
        shutdown,
        unblockers,
        first_relist: pleg.first_relist,
        fatal,
        bound,
        pods: pods_view,
        checks,
    })
}

/// The ports' listeners, bound before any thread starts, so a port in use is a
/// start-up error with the address in it.
struct Ports {
    listeners: Vec<(&'static str, TcpListener)>,
    /// The kubelet port's TLS and authentication, when it is served.
    kubelet: Option<PreparedPort>,
}

impl Ports {
    /// Each port's name and the address it is bound to (port 0 resolved).
    fn bound(&self) -> Vec<(&'static str, SocketAddr)> {
        self.listeners
            .iter()
            .filter_map(|(n, l)| l.local_addr().ok().map(|a| (*n, a)))
            .collect()
    }
}

fn bind_ports(cfg: &KubeletConfig, prepared: &PreparedSources) -> Result<Ports, StartError> {
    let mut listeners = Vec::new();
    if cfg.healthz_port != 0 {
        let addr = SocketAddr::new(cfg.healthz_bind_address, cfg.healthz_port);
        listeners.push(("healthz", wire::server::bind("healthz", addr)?));
    }
    if cfg.read_only_port != 0 {
        let addr = SocketAddr::new(cfg.address, cfg.read_only_port);
        listeners.push(("read-only", wire::server::bind("read-only", addr)?));
    }
    let mut kubelet = None;
    if cfg.port != 0 {
        // None: a webhook without an API server; the port stays unserved (logged).
        if let Some(port) = PreparedPort::prepare(cfg, prepared.api())? {
            let addr = SocketAddr::new(cfg.address, cfg.port);
            listeners.push(("kubelet", wire::server::bind("kubelet", addr)?));
            kubelet = Some(port);
        }
    }
    Ok(Ports { listeners, kubelet })
}

/// What the ports' handlers read.
struct Served<'a> {
    runtime: &'a Arc<dyn Runtime>,
    parts: &'a Components,
    checks: &'a HealthChecks,
    stats: &'a Arc<StatsProvider>,
    unblockers: &'a Unblockers,
    /// The server pod source, with `--enable-server-source`.
    push: Option<&'a Arc<ServerSource>>,
}

/// Serves each bound port: `srv-healthz`, `srv-readonly`, `srv-kubelet` (with its
/// `tls-reload` loop).
fn start_servers(
    loops: &Loops,
    cfg: &KubeletConfig,
    mut ports: Ports,
    s: &Served<'_>,
) -> Result<(), StartError> {
    let parts = s.parts;
    let pods_view = &parts.pods_view;
    let servers = ports.listeners.len();
    let limits = wire::server::http::Limits::PLAIN.fit_to_descriptors(servers);
    for (name, listener) in ports.listeners {
        match name {
            "kubelet" => {
                let Some(mut port) = ports.kubelet.take() else {
                    continue;
                };
                port.start_reload(loops)?;
                let tls = port.tls.clone();
                let k = KubeletServer {
                    auth: port.auth.clone(),
                    checks: s.checks.clone(),
                    pods: pods_view.clone(),
                    configz: port.configz.clone(),
                    metrics: parts.metrics.clone(),
                    probe_metrics: parts.probes.metrics().clone(),
                    runtime_pods: parts.pleg_shared.clone(),
                    runtime: s.runtime.clone(),
                    debugging_handlers: cfg.enable_debugging_handlers,
                    log_dir: server::kubelet::NODE_LOG_DIR.into(),
                    streams: server::streams::StreamServer {
                        pods: pods_view.clone(),
                        runtime: s.runtime.clone(),
                        loops: loops.clone(),
                        node_name: cfg.node_name.clone(),
                    },
                    stats: s.stats.clone(),
                    push: s.push.cloned(),
                };
                log::info!("Starting to listen on {}:{} (TLS)", cfg.address, cfg.port);
                // Its stream threads read and decode pushed pods: the big stack.
                wire::server::serve_tls(
                    &loops.with_stack_size(base::loops::BIG_STACK),
                    "srv-kubelet",
                    listener,
                    wire::server::http::Limits::KUBELET.fit_to_descriptors(servers),
                    tls,
                    s.unblockers,
                    server::http_metrics::instrument(
                        parts.metrics.clone(),
                        ServerType::ReadWrite,
                        move |r| server::kubelet::handle(&k, r),
                    ),
                )?;
            }
            "healthz" => {
                let checks = s.checks.clone();
                wire::server::serve(
                    loops,
                    "srv-healthz",
                    listener,
                    limits,
                    s.unblockers,
                    move |r| server::healthz::handle(&checks, r),
                )?;
            }
            _ => {
                let ro = ReadOnly {
                    checks: s.checks.clone(),
                    pods: pods_view.clone(),
                    registry: loops.registry(),
                    probe_metrics: parts.probes.metrics().clone(),
                    metrics: parts.metrics.clone(),
                    stats: s.stats.clone(),
                };
                wire::server::serve(
                    loops,
                    "srv-readonly",
                    listener,
                    limits,
                    s.unblockers,
                    server::http_metrics::instrument(
                        parts.metrics.clone(),
                        ServerType::ReadOnly,
                        move |r| server::readonly::handle(&ro, r),
                    ),
                )?;
            }
        }
    }
    Ok(())
}

/// The image preload directory (`imagePreloadDir`): a first pass now, then the
/// `image-preload` loop. Returns the images image GC must keep.
fn start_image_preload(
    loops: &Loops,
    cfg: &KubeletConfig,
    parts: &Components,
) -> Result<Option<Arc<crate::images::preload::Protected>>, SpawnError> {
    let Some(dir) = &cfg.image_preload_dir else {
        return Ok(None);
    };
    if parts.kind == RuntimeKind::Cri {
        log::error!(
            "imagePreloadDir {}: not loaded: image preload is not supported on a CRI runtime \
             yet (CRI has no call that loads an image archive)",
            dir.display()
        );
        return Ok(None);
    }
    let mut preloader = crate::images::preload::Preloader::new(dir.clone(), parts.runtime.clone());
    if let Err(e) = preloader.scan(std::time::SystemTime::now()) {
        log::warn!("{e}");
    }
    let protected = preloader.protected();
    loops.spawn_periodic(
        Periodic {
            name: "image-preload".into(),
            period: crate::images::preload::PRELOAD_PERIOD,
            wake: None,
        },
        move || preloader.scan(std::time::SystemTime::now()),
    )?;
    Ok(Some(protected))
}

/// `runtime-up`: the runtime's liveness, then its network's readiness (upstream's
/// `updateRuntimeUp` reads both from one runtime status), in one loop. Its receiver
/// hears when the runtime came up.
fn start_runtime_up(
    loops: &Loops,
    parts: &Components,
    network: &Arc<crate::health::NetworkHealth>,
) -> Result<(Sender<()>, Receiver<()>), SpawnError> {
    let (up_tx, up_rx) = crossbeam_channel::bounded(1);
    let wake = up_tx.clone();
    let health = parts.runtime_health.clone();
    let runtime = parts.runtime.clone();
    let network = network.clone();
    loops.spawn_periodic(
        Periodic {
            name: "runtime-up".into(),
            period: RUNTIME_UP_PERIOD,
            wake: None,
        },
        move || {
            health.tick(runtime.as_ref(), &up_tx)?;
            network.tick(runtime.as_ref())
        },
    )?;
    Ok((wake, up_rx))
}

/// What the PLEG gives the rest: its events, the first relist's notice, and a wake
/// that relists one pod at once.
struct PlegOutputs {
    events: Receiver<PlegEvent>,
    first_relist: Receiver<()>,
    /// The pod killer's and the status manager's: a pod whose kill ended, and a
    /// deleted pod whose final delete waits on a container seen running, are relisted.
    recheck_wake: evented::WakeSender,
}

/// `pleg` and the evented PLEG's `pleg-events`, which reads the runtime's event
/// stream and wakes `pleg` to relist the pod at once (and everything every 5 min,
/// 1 s while the stream is down).
fn start_pleg(
    loops: &Loops,
    cfg: &KubeletConfig,
    parts: &Components,
) -> Result<PlegOutputs, SpawnError> {
    let (pleg_tx, events) = base::chan::bounded(CHANNEL_CAPACITY);
    let (first_tx, first_relist) = crossbeam_channel::bounded(1);
    let mut pleg = Pleg::new(
        parts.runtime.clone(),
        &cfg.node_name,
        pleg_tx,
        parts.pleg_shared.clone(),
        Some(first_tx),
    )
    .with_metrics(parts.metrics.clone());
    let (wake_tx, wake_rx) = evented::wake_channel(CHANNEL_CAPACITY);
    let recheck_wake = wake_tx.clone();
    let mut watcher = evented::EventWatcher::new(
        parts.runtime.clone(),
        pleg.node_filter(),
        parts.pleg_shared.clone(),
        wake_tx,
        parts.metrics.clone(),
    );
    loops.spawn("pleg", move |stop, handle| {
        evented::run_pleg(&mut pleg, &wake_rx, &stop, &handle)
    })?;
    loops.spawn("pleg-events", move |stop, handle| {
        watcher.run(&stop, &handle)
    })?;
    Ok(PlegOutputs {
        events,
        first_relist,
        recheck_wake,
    })
}

/// The image pullers: pulls never run on a pod worker; a finished pull names its
/// waiting pods to the sync loop over the returned receiver.
fn start_image_pullers(
    loops: &Loops,
    cfg: &KubeletConfig,
    parts: &Components,
) -> Result<Receiver<String>, SpawnError> {
    let (pulled_tx, pulled_rx) = crossbeam_channel::bounded(PULLED_CHANNEL_CAPACITY);
    // With no registry, a static rkubelet is its own pause image (on Docker: a CRI
    // runtime runs its own sandbox image, and CRI cannot import one).
    if parts.kind == RuntimeKind::Docker {
        parts
            .manager
            .images()
            .set_self_import(&cfg.pod_infra_container_image);
    }
    parts.manager.images().start(
        loops,
        crate::images::PullSettings {
            serialize: cfg.serialize_image_pulls,
            max_parallel: cfg.max_parallel_image_pulls,
        },
        pulled_tx,
    )?;
    Ok(pulled_rx)
}

/// `log-rotate`: the container log manager, on a CRI runtime only (Docker rotates its
/// own json-file logs, as dockershim left it to).
fn start_log_manager(
    loops: &Loops,
    cfg: &KubeletConfig,
    parts: &Components,
) -> Result<(), SpawnError> {
    use crate::container_log_manager::{ContainerLogManager, RotatePolicy, THREAD};
    if parts.kind == RuntimeKind::Docker {
        return Ok(());
    }
    let manager = ContainerLogManager::new(
        parts.runtime.clone(),
        &cfg.node_name,
        RotatePolicy {
            max_size: cfg.container_log_max_size,
            max_files: cfg.container_log_max_files,
        },
        parts.manager.log_settings().clone(),
    );
    loops.spawn_periodic(
        Periodic {
            name: THREAD.into(),
            period: cfg.container_log_monitor_interval,
            wake: None,
        },
        move || manager.tick(std::time::SystemTime::now()),
    )
}

/// `volume-mgr` (removes the directories of pods that are gone) and, with an API
/// server to read them from, `object-refresh` (ConfigMap, Secret and token updates
/// reach running pods' volumes between their syncs).
fn start_volume_loops(loops: &Loops, parts: &Components) -> Result<(), SpawnError> {
    let volumes = parts.volumes.clone();
    loops.spawn_periodic(
        Periodic {
            name: "volume-mgr".into(),
            period: VOLUME_MGR_PERIOD,
            wake: None,
        },
        move || volumes.cleanup_orphans(),
    )?;
    if parts.volumes.objects().has_client() {
        let volumes = parts.volumes.clone();
        // Decodes ConfigMaps and Secrets from the API server: the big stack.
        loops
            .with_stack_size(base::loops::BIG_STACK)
            .spawn_periodic(
                Periodic {
                    name: "object-refresh".into(),
                    period: crate::volume::refresh::REFRESH_PERIOD,
                    wake: None,
                },
                move || volumes.refresh_objects(),
            )?;
    }
    Ok(())
}

/// Garbage collection (dead containers, and a pod's own pruning after a PLEG
/// `ContainerDied` sent on the returned sender; images) and the eviction manager (its
/// conditions reach admission and the node status; its node-level reclaim is
/// container GC, then image GC).
fn start_reclaim(
    loops: &Loops,
    cfg: &KubeletConfig,
    parts: &Components,
    eviction_config: crate::eviction::Config,
    stats: &Arc<StatsProvider>,
    preloaded: Option<Arc<crate::images::preload::Protected>>,
) -> Result<Sender<crate::gc::Died>, StartError> {
    let (died_tx, died_rx) = crate::gc::died_channel();
    let gc = parts.start_gc(loops, cfg, died_rx, preloaded)?;
    let info = parts
        .runtime
        .info()
        .inspect_err(|e| log::warn!("eviction manager: the runtime's root directory: {e}"))
        .ok();
    let image_dir = eviction::image_dir(info, parts.kind == RuntimeKind::Docker);
    eviction::start(
        loops,
        cfg,
        eviction_config,
        eviction::Parts {
            view: parts.manager_view.clone(),
            statuses: parts.statuses.clone(),
            workers: parts.workers.clone(),
            stats: stats.clone(),
            metrics: parts.metrics.clone(),
            state: parts.pressure.clone(),
            gc: Some(gc),
            cm: parts.cm.clone(),
            allocatable_memory: parts.admission_node.memory,
        },
        image_dir,
    )?;
    Ok(died_tx)
}

/// What the sync loop receives from the loops around it.
#[derive(Debug)]
struct LoopInputs {
    sources: Receiver<SourceUpdate>,
    pleg: Receiver<PlegEvent>,
    probes: Receiver<ProbeEvent>,
    runtime_up: Receiver<()>,
    /// Pods whose image pull ended, from the image pullers.
    pulled: Receiver<String>,
}

/// The components the sync loop, the pod workers and the servers share. [`start`]
/// builds them; so do the sync loop's and the syncer's unit tests, over a
/// `FakeRuntime` and without ports or source threads, so that the tests drive the
/// same graph the daemon runs.
#[derive(Debug)]
struct Components {
    /// Which API the runtime speaks (what the kubelet does itself differs).
    kind: RuntimeKind,
    probes: Arc<ProbeManager>,
    statuses: Arc<StatusCache>,
    /// Pokes the status manager when a status changes (bounded 1).
    status_wake: Receiver<()>,
    pods_view: Arc<PodsView>,
    manager_view: Arc<PodManagerView>,
    pleg_shared: Arc<PlegShared>,
    runtime_health: Arc<RuntimeHealth>,
    work_queue: Arc<WorkQueue>,
    workers: Arc<PodWorkers>,
    volumes: Arc<VolumeManager>,
    manager: Arc<RuntimeManager>,
    /// The node's address as pods' `hostIP` (followed by `node-status`).
    host_ip: Arc<crate::nodestatus::HostIp>,
    /// The registry every component records into (`/metrics`).
    metrics: Arc<KubeletMetrics>,
    /// The runtime everyone calls: the one given, counted and timed into `metrics`.
    runtime: Arc<dyn Runtime>,
    /// The eviction manager's pressure conditions (admission, the node status).
    pressure: Arc<crate::eviction::PressureState>,
    /// The pod and QoS cgroups.
    cm: Arc<crate::cm::ContainerManager>,
    /// What admission checks new pods against.
    admission_node: crate::admission::NodeInfo,
    /// The sysctls pods may set: the safe set on this kernel and the allowed unsafe ones.
    sysctls: crate::sysctl::Allowlist,
    /// The kernel has the memory cgroup controller (else pods with memory limits are
    /// refused: [`admit::MemoryCgroupAdmit`]). Read by `start`; true in unit tests.
    memory_cgroup: bool,
}

impl Components {
    /// Builds the shared state and starts the prober's threads; changed probe results
    /// go to `probe_tx`. Every component gets `runtime` wrapped by the instrumented
    /// runtime, so its calls are counted.
    fn new(
        cfg: &KubeletConfig,
        runtime: &Arc<dyn Runtime>,
        kind: RuntimeKind,
        loops: &Loops,
        probe_tx: Sender<ProbeEvent>,
        api: Option<Arc<apiclient::ApiClient>>,
    ) -> Result<Components, StartError> {
        // Upstream `NewMainKubelet`: the safe set, then the allowed unsafe sysctls.
        let sysctls = crate::sysctl::Allowlist::for_node(
            crate::sysctl::kernel_version(),
            &cfg.allowed_unsafe_sysctls,
        )
        .map_err(StartError::Sysctl)?;
        let metrics = Arc::new(KubeletMetrics::new(loops.registry()));
        metrics.node_name.set([&cfg.node_name], 1.0);
        let instrumented: Arc<dyn Runtime> =
            Arc::new(InstrumentedRuntime::new(runtime.clone(), metrics.clone()));
        let runtime = &instrumented;
        let probes = ProbeManager::start(
            loops,
            runtime.clone(),
            crate::prober::PROBE_WORKERS,
            probe_tx,
        )?;
        let (status_tx, status_wake) = crossbeam_channel::bounded(1);
        let statuses = Arc::new(StatusCache::with_notify(status_tx));
        let pods_view = Arc::new(PodsView::new(statuses.clone()));
        let host_ip = cfg.node_ip.clone().unwrap_or_else(base::netutil::node_ip);
        // The machine's facts, once: the downward API's and admission's allocatable
        // is the node status's.
        let machine = crate::nodestatus::machine::read(&cfg.root_dir);
        let node_settings = node::node_settings(cfg);
        let a = crate::nodestatus::setters::allocatable(
            &machine,
            node_settings.max_pods,
            &node_settings.reserved,
        );
        let allocatable = crate::kuberuntime::container::Allocatable {
            cpu_milli: i128::from(a.cpu_milli),
            memory: i128::from(a.memory),
            ephemeral_storage: i128::from(a.ephemeral_storage.unwrap_or(0)),
        };
        let admission_node = node::admission_node(&node_settings, &machine);
        let cm = Arc::new(crate::cm::ContainerManager::new(
            node::cm_settings(cfg, &node_settings, &machine),
            runtime.clone(),
        ));
        // The ConfigMaps, Secrets and tokens of API pods' volumes, env and pulls.
        let objects = Arc::new(crate::objects::ObjectManager::new(
            api.map(|c| c as Arc<dyn crate::objects::Fetcher>),
        ));
        let facts = runtime::container::downward::NodeFacts {
            allocatable_cpu_milli: allocatable.cpu_milli,
            allocatable_memory: allocatable.memory,
            allocatable_ephemeral_storage: allocatable.ephemeral_storage,
            ..Default::default()
        };
        let volumes = Arc::new(
            VolumeManager::new(
                cfg.root_dir.clone(),
                runtime.clone(),
                cfg.node_name.clone(),
                u64::try_from(allocatable.memory).unwrap_or(0),
            )
            .with_objects(objects, facts),
        );
        let pleg_shared = Arc::new(PlegShared::default());
        let (resolv_conf, swapped) =
            crate::kuberuntime::container::dns::node_resolv_conf(&cfg.resolv_conf, &|p| {
                std::fs::read_to_string(p).ok()
            });
        if let Some(why) = swapped {
            log::info!("{why}");
        }
        let manager = Arc::new(
            RuntimeManager::new(
                runtime.clone(),
                ManagerConfig {
                    node_name: cfg.node_name.clone(),
                    // A CRI runtime runs its own sandbox image (its `sandbox_image`).
                    pod_infra_image: (kind == RuntimeKind::Docker)
                        .then(|| cfg.pod_infra_container_image.clone()),
                    node: NodeContext {
                        root_dir: cfg.root_dir.clone(),
                        host_ips: vec![host_ip.clone()],
                        dns: DnsSettings {
                            cluster_dns: cfg.cluster_dns.clone(),
                            cluster_domain: cfg.cluster_domain.clone(),
                            resolv_conf,
                        },
                        allocatable,
                        volumes: volumes.clone(),
                    },
                    logs: crate::kuberuntime::logs::LogSettings {
                        pods_dir: cfg.pod_logs_dir.clone(),
                        containers_dir: cfg.container_logs_dir.clone(),
                        runtime_writes_files: kind != RuntimeKind::Docker,
                    },
                },
            )
            .with_probe_results(probes.results().clone())
            .with_metrics(metrics.clone())
            .with_pleg(pleg_shared.clone()),
        );
        Ok(Components {
            kind,
            probes,
            statuses,
            status_wake,
            pods_view,
            manager_view: Arc::new(PodManagerView::default()),
            pleg_shared,
            runtime_health: Arc::new(RuntimeHealth::default()),
            work_queue: Arc::new(WorkQueue::default()),
            workers: Arc::new(PodWorkers::default().with_metrics(metrics.clone())),
            volumes,
            manager,
            host_ip: Arc::new(crate::nodestatus::HostIp::new(host_ip)),
            metrics,
            runtime: runtime.clone(),
            pressure: Arc::default(),
            cm,
            admission_node,
            sysctls,
            memory_cgroup: true,
        })
    }

    /// Starts `pod-cgroup-gc`: once every source has spoken, removes the pod cgroups
    /// of pods no source wants, no worker holds and Docker no longer lists (upstream
    /// `cleanupOrphanedPodCgroups` in housekeeping; here off the sync loop).
    fn start_pod_cgroup_gc(&self, loops: &Loops) -> Result<(), SpawnError> {
        let cm = self.cm.clone();
        let view = self.manager_view.clone();
        let workers = self.workers.clone();
        let pleg = self.pleg_shared.clone();
        loops.spawn_periodic(
            Periodic {
                name: "pod-cgroup-gc".into(),
                period: crate::cm::POD_CGROUP_GC_PERIOD,
                wake: None,
            },
            move || {
                let snap = view.get();
                if !snap.sources_ready {
                    return Ok(());
                }
                let running = pleg.runtime_pods();
                cm.remove_orphans(&|uid: &str| {
                    snap.pods
                        .iter()
                        .any(|p| p.metadata.uid.as_deref() == Some(uid))
                        || workers.is_active(uid)
                        || running.contains_key(uid)
                })
            },
        )
    }

    /// Starts the pod killer and returns the pod workers' syncer. Each pod whose kill
    /// ends is relisted by the PLEG (`wake`): its stopped containers are seen even if
    /// the runtime's events about them are not.
    fn syncer(
        &self,
        loops: &Loops,
        cfg: &KubeletConfig,
        wake: evented::WakeSender,
    ) -> Result<Arc<SyncHandler>, SpawnError> {
        let killer =
            PodKiller::start(loops, self.manager.clone())?.on_killed(Arc::new(move |uid: &str| {
                wake.send(evented::Wake::Pod {
                    pod_uid: uid.to_string(),
                })
            }));
        Ok(Arc::new(SyncHandler {
            manager: self.manager.clone(),
            statuses: self.statuses.clone(),
            queue: self.work_queue.clone(),
            probes: self.probes.clone(),
            host_ip: self.host_ip.clone(),
            resync: cfg.sync_frequency,
            killer,
            workers: self.workers.clone(),
            metrics: self.metrics.clone(),
            cm: self.cm.clone(),
        }))
    }

    /// Starts `container-gc` and `image-gc` over these components.
    fn start_gc(
        &self,
        loops: &Loops,
        cfg: &KubeletConfig,
        died: Receiver<(String, String)>,
        preloaded: Option<Arc<crate::images::preload::Protected>>,
    ) -> Result<crate::gc::Gc, SpawnError> {
        let containers = crate::gc::ContainerGc::new(
            self.runtime.clone(),
            self.manager.clone(),
            &cfg.node_name,
            crate::gc::GcPolicy {
                min_age: cfg.minimum_container_ttl_duration,
                max_per_pod_container: cfg.maximum_dead_containers_per_container,
                max_containers: cfg.maximum_dead_containers,
            },
            crate::gc::PodState {
                pods: self.manager_view.clone(),
                workers: self.workers.clone(),
            },
        );
        let mut images = crate::gc::ImageGc::new(
            self.runtime.clone(),
            crate::gc::ImagePolicy {
                high_percent: cfg.image_gc_high_threshold_percent,
                low_percent: cfg.image_gc_low_threshold_percent,
                min_age: cfg.image_minimum_gc_age,
                max_age: cfg.image_maximum_gc_age,
            },
            &cfg.pod_infra_container_image,
            &cfg.node_name,
        );
        if let Some(p) = preloaded {
            images = images.with_preloaded(p);
        }
        crate::gc::start(
            loops,
            crate::gc::Gc {
                containers: Arc::new(containers),
                images: Arc::new(images),
            },
            crate::gc::GcPeriods {
                containers: cfg.container_gc_period,
                images: cfg.image_gc_period,
            },
            died,
        )
    }

    /// The sync loop over these components, fed by `inputs`.
    fn sync_loop(self, pod_config: PodConfig, inputs: LoopInputs) -> SyncLoop {
        SyncLoop {
            pod_config,
            pods: HashMap::new(),
            view: self.pods_view,
            manager_view: self.manager_view,
            workers: self.workers,
            queue: self.work_queue,
            pleg: self.pleg_shared,
            runtime_health: self.runtime_health,
            statuses: self.statuses,
            backoff: self.manager.backoff_gc(),
            volumes: self.volumes,
            sources_rx: inputs.sources,
            pleg_rx: inputs.pleg,
            probe_rx: inputs.probes,
            pulled_rx: inputs.pulled,
            probes: self.probes,
            up_rx: inputs.runtime_up,
            last_status_line: String::new(),
            metrics: self.metrics,
            admission: {
                let mut admission = admit::Admission::new(self.admission_node);
                // Admission under pressure first (upstream registers the eviction
                // manager's admit handler before the predicates).
                admission.add_handler(Box::new(eviction::PressureAdmit(self.pressure)));
                admission.add_handler(Box::new(admit::SysctlAdmit(self.sysctls)));
                if !self.memory_cgroup {
                    admission.add_handler(Box::new(admit::MemoryCgroupAdmit));
                }
                admission
            },
            container_died: None,
        }
    }
}

// The test kubelet lives here, in the parent of `sync_loop` and `syncer`, because it
// uses both and both tests use it: as a sibling file it would be an import cycle.
#[cfg(test)]
mod testing {
    //! A kubelet over a `FakeRuntime`, for the sync loop's and the syncer's unit tests:
    //! the same [`Components`] `start` wires, without ports, source threads or the
    //! `pleg`, `runtime-up` and `pod-worker-N` threads. The test steps each of those by
    //! hand: it hands events to [`SyncLoop::handle_event`], relists the PLEG itself, and
    //! runs the pod workers' queue on its own thread ([`Node::settle`]), so "nothing was
    //! done" can be asserted without waiting. The prober's threads and the `pod-killer` run
    //! as in the daemon (a kill is handed over and finishes on its own thread).

    use std::path::Path;
    use std::sync::Arc;
    use std::time::{Duration, Instant, SystemTime};

    use crossbeam_channel::Sender;
    use k8s_openapi::api::core::v1::Pod;

    use super::sync_loop::{Event, SyncLoop};
    use super::syncer::SyncHandler;
    use super::{Components, LoopInputs};
    use crate::config::{KubeletConfig, Loaded};
    use crate::pleg::Pleg;
    use crate::podconfig::manifest::{prepare, Origin};
    use crate::podconfig::{PodConfig, Source, SourceUpdate};
    use base::loops::{shutdown_channel, Loops, Shutdown};
    use base::testutil::TempDir;
    use runtime::container::labels;
    use runtime::fake::{FakeClock, FakeRuntime};
    use runtime::{ContainerDetails, ContainerState, Runtime};

    /// The node's name.
    pub(super) const NODE: &str = "node1";
    /// The one app image the fake runtime holds.
    pub(super) const IMAGE: &str = "busybox:1";
    /// How long a test waits for work handed to another thread (the pod killer, the
    /// prober) before it fails.
    const DEADLINE: Duration = Duration::from_secs(10);

    /// A clock 60 s behind the real one: the runtime manager's backoff reads the real
    /// clock, so container times must be near it (see [`FakeClock::starting_at`]).
    pub(super) fn clock() -> FakeClock {
        FakeClock::starting_at(SystemTime::now() - Duration::from_secs(60))
    }

    /// A runtime holding the app and pause images.
    pub(super) fn runtime(clock: &FakeClock) -> Arc<FakeRuntime> {
        Arc::new(
            FakeRuntime::new(clock.clone())
                .with_image(IMAGE)
                .with_image(crate::config::defaults::POD_INFRA_CONTAINER_IMAGE),
        )
    }

    /// A static pod (defaulted and validated as the file source does) from a YAML flow
    /// mapping of its spec, with a fixed UID.
    pub(super) fn pod(name: &str, uid: &str, spec: &str) -> Pod {
        let yaml = format!("{{metadata: {{name: {name}, uid: {uid}}}, spec: {spec}}}");
        let pod: Pod = serde_norway::from_str(&yaml).expect("pod yaml");
        prepare(
            pod,
            NODE,
            Origin::File(Path::new("/etc/kubernetes/manifests/p.yaml")),
        )
        .expect("valid pod")
    }

    /// A kubelet over a fake runtime.
    pub(super) struct Node {
        pub(super) rt: Arc<FakeRuntime>,
        pub(super) sl: SyncLoop,
        pub(super) handler: Arc<SyncHandler>,
        pub(super) pleg: Pleg,
        pub(super) cfg: KubeletConfig,
        _up_tx: Sender<()>,
        shutdown: Option<(Shutdown, Loops)>,
        _dir: TempDir,
    }

    impl Node {
        /// A kubelet expecting snapshots from `sources`, over `rt`, with the runtime known
        /// to be up.
        pub(super) fn new(rt: &Arc<FakeRuntime>, sources: &[Source]) -> Node {
            Node::with_memory_cgroup(rt, sources, true)
        }

        /// [`Node::new`] on a kernel with (`memory_cgroup`) or without the memory cgroup
        /// controller, as `start` found it.
        pub(super) fn with_memory_cgroup(
            rt: &Arc<FakeRuntime>,
            sources: &[Source],
            memory_cgroup: bool,
        ) -> Node {
            let dir = TempDir::new("kubelet");
            let args = [
                "rkubelet".to_string(),
                format!("--hostname-override={NODE}"),
                format!("--root-dir={}", dir.0.display()),
            ];
            let cfg = match crate::config::load(args.to_vec()) {
                Ok(Loaded::Run(cfg)) => cfg,
                other => panic!("config: {other:?}"),
            };
            let (shutdown, stop) = shutdown_channel();
            let loops = Loops::new(stop);
            let runtime: Arc<dyn Runtime> = rt.clone();
            let (probe_tx, probe_rx) = crossbeam_channel::bounded(crate::prober::EVENT_CAPACITY);
            let mut parts = Components::new(
                &cfg,
                &runtime,
                super::RuntimeKind::Docker,
                &loops,
                probe_tx,
                None,
            )
            .expect("components");
            parts.memory_cgroup = memory_cgroup;
            // No evented PLEG here: the pod killer's wakes go nowhere.
            let (wake, _) = crate::pleg::evented::wake_channel(1);
            let handler = parts.syncer(&loops, &cfg, wake).expect("syncer");
            let (pleg_tx, pleg_rx) = base::chan::bounded(crate::pleg::CHANNEL_CAPACITY);
            let pleg = Pleg::new(
                parts.runtime.clone(),
                NODE,
                pleg_tx,
                parts.pleg_shared.clone(),
                None,
            )
            .with_metrics(parts.metrics.clone());
            let (up_tx, up_rx) = crossbeam_channel::bounded(1);
            parts
                .runtime_health
                .tick(runtime.as_ref(), &up_tx)
                .expect("runtime up");
            let (_source_tx, source_rx) = crossbeam_channel::bounded::<SourceUpdate>(1);
            // No image pullers: the tests' images are present.
            let (_pulled_tx, pulled_rx) = crossbeam_channel::bounded::<String>(1);
            let sl = parts.sync_loop(
                PodConfig::new(sources),
                LoopInputs {
                    sources: source_rx,
                    pleg: pleg_rx,
                    probes: probe_rx,
                    runtime_up: up_rx,
                    pulled: pulled_rx,
                },
            );
            Node {
                rt: rt.clone(),
                sl,
                handler,
                pleg,
                cfg,
                _up_tx: up_tx,
                shutdown: Some((shutdown, loops)),
                _dir: dir,
            }
        }

        /// Hands the sync loop one event, then lets the pod workers finish.
        pub(super) fn handle(&mut self, e: Event) {
            self.sl.handle_event(e);
            self.settle();
        }

        /// A source's full snapshot.
        pub(super) fn snapshot(&mut self, source: Source, pods: Vec<Pod>) {
            self.handle(Event::Config(SourceUpdate {
                source,
                pods: pods.into_iter().map(Arc::new).collect(),
                checkpoint: false,
            }));
        }

        /// One PLEG relist; its events go to the sync loop.
        pub(super) fn relist(&mut self) {
            self.pleg.relist().expect("relist");
            if let Ok(e) = self.sl.pleg_rx.try_recv() {
                self.handle(Event::Pleg(e));
            }
        }

        /// Runs the pod workers' queue on this thread until no pod has work left (kills
        /// handed to the pod killer finish on its thread; polled with a deadline).
        pub(super) fn settle(&self) {
            let until = Instant::now() + DEADLINE;
            loop {
                self.sl.workers.run_queued(self.handler.as_ref());
                if self.sl.workers.idle() {
                    return;
                }
                assert!(Instant::now() < until, "pod work not done in {DEADLINE:?}");
                std::thread::sleep(Duration::from_millis(2));
            }
        }

        /// The instances of container `name` of pod `uid`, newest first (the sandbox is
        /// `POD`).
        pub(super) fn instances(&self, uid: &str, name: &str) -> Vec<ContainerDetails> {
            let mut v: Vec<ContainerDetails> = self
                .rt
                .containers()
                .into_iter()
                .filter(|c| {
                    c.labels.get(labels::POD_UID).map(String::as_str) == Some(uid)
                        && c.labels.get(labels::CONTAINER_NAME).map(String::as_str) == Some(name)
                })
                .collect();
            base::sort::sort_by_key(&mut v, |c| {
                std::cmp::Reverse((c.created, labels::restart_count(&c.labels)))
            });
            v
        }

        /// The running instance of container `name` of pod `uid`.
        pub(super) fn running(&self, uid: &str, name: &str) -> Option<ContainerDetails> {
            self.instances(uid, name)
                .into_iter()
                .find(|c| c.state == ContainerState::Running)
        }

        /// Every container of pod `uid`, any state.
        pub(super) fn containers_of(&self, uid: &str) -> Vec<ContainerDetails> {
            self.rt
                .containers()
                .into_iter()
                .filter(|c| c.labels.get(labels::POD_UID).map(String::as_str) == Some(uid))
                .collect()
        }

        /// The pod's phase in the status cache.
        pub(super) fn phase(&self, uid: &str) -> Option<String> {
            self.sl.statuses.get(uid).and_then(|s| s.phase.clone())
        }
    }

    impl Drop for Node {
        fn drop(&mut self) {
            if let Some((shutdown, loops)) = self.shutdown.take() {
                shutdown.trigger();
                let left = loops.join_all(DEADLINE);
                if !std::thread::panicking() {
                    assert!(left.is_empty(), "threads still running: {left:?}");
                }
            }
        }
    }
}
