//! The wiring of what the node writes to the API server, with `--kubeconfig`: the
//! `node-status` loop (registration and status) and the `node-lease` loop (the
//! heartbeat), sharing the API client, the Node's UID and the heartbeat trouble flag;
//! and the `status-mgr` loop (pod statuses, mirror pods, final deletes).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::apiclient::ApiClient;
use crate::config::KubeletConfig;
use crate::health::{NetworkHealth, RuntimeHealth};
use crate::loops::{Loops, Periodic, SpawnError};
use crate::nodelease::{self, Heartbeat};
use crate::nodestatus::{self, setters::NodeSettings, ReadinessCheck};
use crate::pleg::PlegShared;
use crate::runtime::Runtime;
use crate::status::manager::{PodFinished, StatusManager, TICK};

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

/// Starts `node-status` and `node-lease`.
pub(super) fn start(
    loops: &Loops,
    cfg: &KubeletConfig,
    client: Arc<ApiClient>,
    runtime: Arc<dyn Runtime>,
    runtime_health: Arc<RuntimeHealth>,
    pleg: Arc<PlegShared>,
    network: Arc<NetworkHealth>,
) -> Result<(), SpawnError> {
    let heartbeat = Arc::new(Heartbeat::default());
    let lease_duration = Duration::from_secs(u64::from(cfg.node_lease_duration_seconds));
    let timeout = nodelease::heartbeat_timeout(lease_duration, cfg.node_status_update_frequency);
    let mut settings = NodeSettings {
        node_name: cfg.node_name.clone(),
        node_ip: cfg.node_ip.clone().unwrap_or_default(),
        port: cfg.port,
        max_pods: cfg.max_pods,
        max_images: cfg.node_status_max_images,
        labels: cfg.node_labels.clone(),
        taints: cfg.register_with_taints.clone(),
        reserved: Default::default(),
    };
    settings.reserve(&cfg.kube_reserved);
    settings.reserve(&cfg.system_reserved);
    nodestatus::start(
        loops,
        nodestatus::Start {
            client: client.clone(),
            settings,
            runtime,
            readiness: readiness(runtime_health, pleg, network),
            heartbeat: heartbeat.clone(),
            register_node: cfg.register_node,
            update_frequency: cfg.node_status_update_frequency,
            report_frequency: cfg.node_status_report_frequency,
            timeout,
            root_dir: cfg.root_dir.clone(),
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
    /// is under way and the last relist saw none of its containers running.
    pub(super) fn start_status_manager(
        &self,
        loops: &Loops,
        api: Arc<ApiClient>,
        node_name: &str,
    ) -> Result<(), SpawnError> {
        let workers = self.workers.clone();
        let pleg = self.pleg_shared.clone();
        let finished: PodFinished = Arc::new(move |uid: &str| {
            !workers.is_active(uid) && pleg.runtime_pods().get(uid).is_none_or(|p| !p.running)
        });
        let mut manager = StatusManager::new(
            api,
            self.statuses.clone(),
            self.manager_view.clone(),
            finished,
            node_name,
        )
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
