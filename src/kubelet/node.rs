//! The wiring of what the node writes to the API server, with `--kubeconfig`: the
//! `node-status` loop (registration and status) and the `node-lease` loop (the
//! heartbeat), sharing the API client, the Node's UID and the heartbeat trouble flag;
//! and the `status-mgr` loop (pod statuses, mirror pods, final deletes).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::KubeletConfig;
use crate::health::{HealthChecks, NetworkHealth, RuntimeHealth};
use crate::nodelease::{self, Heartbeat};
use crate::nodestatus::{self, setters::NodeSettings, ReadinessCheck};
use crate::pleg::evented::{Wake, WakeSender};
use crate::pleg::PlegShared;
use crate::status::manager::{PodFinished, PodRecheck, StatusManager, TICK};
use apiclient::ApiClient;
use base::loops::{Loops, Periodic, SpawnError};
use runtime::Runtime;

use super::Components;

/// The Ready condition's reasons from the kubelet's own checks, in upstream's order
/// (`runtimeState.runtimeErrors`): the runtime, then the PLEG; then the runtime's
/// network (`networkErrors`).
fn readiness(
    runtime: Arc<RuntimeHealth>,
    pleg: Arc<PlegShared>,
    network: Arc<NetworkHealth>,
) -> ReadinessCheck {
    Box::new(move || {
        let now = Instant::now();
        let mut errs = Vec::new();
        if let Err(e) = runtime.healthy(now) {
            errs.push(e);
        }
        if let Err(e) = pleg.healthy(now) {
            errs.push(format!("PLEG is not healthy: {e}"));
        }
        // Upstream's `networkErrors` follow the runtime's.
        if let Err(e) = network.healthy() {
            errs.push(e);
        }
        errs
    })
}

/// The node's settings from the configuration (the node status's and admission's).
pub(super) fn node_settings(cfg: &KubeletConfig) -> NodeSettings {
    let mut settings = NodeSettings {
        node_name: cfg.node_name.clone(),
        node_ip: cfg.node_ip.clone().unwrap_or_default(),
        port: cfg.port,
        max_pods: cfg.max_pods,
        max_images: cfg.node_status_max_images,
        labels: cfg.node_labels.clone(),
        taints: cfg.register_with_taints.clone(),
        reserved: Default::default(),
        pressure: None,
    };
    settings.reserve(&cfg.kube_reserved);
    settings.reserve(&cfg.system_reserved);
    settings
}

/// What admission knows of the node: its allocatable (the status's arithmetic), the
/// labels and taints it registers with.
pub(super) fn admission_node(
    settings: &NodeSettings,
    machine: &nodestatus::machine::MachineInfo,
) -> crate::admission::NodeInfo {
    let a = nodestatus::setters::allocatable(machine, settings.max_pods, &settings.reserved);
    let node = nodestatus::setters::initial_node(settings);
    crate::admission::NodeInfo {
        name: settings.node_name.clone(),
        labels: node.metadata.labels.unwrap_or_default(),
        taints: settings
            .taints
            .iter()
            .map(|t| crate::admission::NodeTaint {
                key: t.key.clone(),
                value: t.value.clone(),
                effect: t.effect.clone(),
            })
            .collect(),
        cpu_milli: i128::from(a.cpu_milli),
        memory: i128::from(a.memory),
        ephemeral_storage: a.ephemeral_storage.map(i128::from),
        pods: i128::from(a.pods),
    }
}

/// The container manager's settings: capacity, and capacity less reserved.
pub(super) fn cm_settings(
    cfg: &KubeletConfig,
    settings: &NodeSettings,
    machine: &nodestatus::machine::MachineInfo,
) -> crate::cm::CmSettings {
    let a =
        nodestatus::setters::reserved_allocatable(machine, settings.max_pods, &settings.reserved);
    let bytes = |b: u64| i64::try_from(b).unwrap_or(i64::MAX);
    crate::cm::CmSettings {
        node_name: cfg.node_name.clone(),
        cgroups_per_qos: cfg.cgroups_per_qos,
        cgroup_root: cfg.cgroup_root.clone(),
        enforce_pods: cfg.enforce_node_allocatable.iter().any(|l| l == "pods"),
        mount: crate::cm::CGROUP_MOUNT.into(),
        capacity_cpu_milli: i128::from(machine.cpus.saturating_mul(1000)),
        capacity_memory: bytes(machine.memory_bytes),
        allocatable_cpu_milli: i128::from(a.cpu_milli),
        allocatable_memory: bytes(a.memory),
    }
}

/// Starts `node-status` and `node-lease`.
pub(super) fn start(
    loops: &Loops,
    cfg: &KubeletConfig,
    client: Arc<ApiClient>,
    runtime: Arc<dyn Runtime>,
    checks: &HealthChecks,
    pressure: Arc<crate::eviction::PressureState>,
    host_ip: Option<(Arc<nodestatus::HostIp>, crossbeam_channel::Sender<()>)>,
) -> Result<(), SpawnError> {
    // Decodes the API server's JSON (serde recursion): the big stack.
    let loops = &loops.with_stack_size(base::loops::BIG_STACK);
    let heartbeat = Arc::new(Heartbeat::default());
    let lease_duration = Duration::from_secs(u64::from(cfg.node_lease_duration_seconds));
    let timeout = nodelease::heartbeat_timeout(lease_duration, cfg.node_status_update_frequency);
    let mut settings = node_settings(cfg);
    settings.pressure = Some(pressure);
    nodestatus::start(
        loops,
        nodestatus::Start {
            client: client.clone(),
            settings,
            runtime,
            readiness: readiness(
                checks.runtime.clone(),
                checks.pleg.clone(),
                checks.network.clone(),
            ),
            heartbeat: heartbeat.clone(),
            register_node: cfg.register_node,
            reads_pod_cidr: cfg.network_plugin == "kubenet",
            update_frequency: cfg.node_status_update_frequency,
            report_frequency: cfg.node_status_report_frequency,
            timeout,
            root_dir: cfg.root_dir.clone(),
            host_ip,
        },
    )?;
    nodelease::start(
        loops,
        client,
        &cfg.node_name,
        cfg.node_lease_duration_seconds,
        timeout,
        heartbeat,
    )
}

impl Components {
    /// Starts the `status-mgr` loop: woken by status changes, ticking every second.
    /// A pod is finished (may be reported terminal, may be deleted) when no kill of it
    /// is under way and the last relist saw none of its containers running. A deleted
    /// pod whose kill has ended while the PLEG still sees a container of it running has
    /// the PLEG relist it (`wake`): its final delete never waits on one missed event.
    pub(super) fn start_status_manager(
        &self,
        loops: &Loops,
        api: Arc<ApiClient>,
        node_name: &str,
        wake: WakeSender,
    ) -> Result<(), SpawnError> {
        // Decodes the API server's JSON (serde recursion): the big stack.
        let loops = &loops.with_stack_size(base::loops::BIG_STACK);
        let workers = self.workers.clone();
        let pleg = self.pleg_shared.clone();
        let finished: PodFinished = Arc::new(move |uid: &str| {
            !workers.is_active(uid) && pleg.runtime_pods().get(uid).is_none_or(|p| !p.running)
        });
        let workers = self.workers.clone();
        let pleg = self.pleg_shared.clone();
        let recheck: PodRecheck = Arc::new(move |uid: &str| {
            let stale =
                !workers.is_active(uid) && pleg.runtime_pods().get(uid).is_some_and(|p| p.running);
            if stale {
                wake.send(Wake::Pod {
                    pod_uid: uid.to_string(),
                });
            }
            stale
        });
        let mut manager = StatusManager::new(
            api,
            self.statuses.clone(),
            self.manager_view.clone(),
            finished,
            node_name,
        )
        .with_recheck(recheck)
        .with_metrics(self.metrics.clone());
        loops.spawn_periodic(
            Periodic {
                name: "status-mgr".into(),
                period: TICK,
                wake: Some(self.status_wake.clone()),
            },
            move || manager.tick(Instant::now()),
        )
    }
}
