//! The `node-status` loop: registers the Node with the API server and keeps its status
//! (upstream `kubelet_node_status.go`: `registerWithAPIServer`,
//! `tryRegisterWithAPIServer`, `syncNodeStatus`, `updateNodeStatus`,
//! `tryUpdateNodeStatus`). Only started with `--kubeconfig`.
//!
//! Registration runs on this loop's thread, never in the way of pods: `POST` the
//! initial Node (labels, taints, the attach/detach annotation, a full status); on 409
//! `AlreadyExists` read it and reconcile the default labels and annotation (patched
//! with the status); retried 100 ms doubling to 7 s until it works.
//!
//! Then every `nodeStatusUpdateFrequency` (10 s) the status is computed with the
//! setters ([`setters`]) from the machine's facts (read once, [`machine`]), the
//! runtime's version and images, and the health checks (runtime down, PLEG not
//! healthy → NotReady). It is sent only when it changed (heartbeat times aside) or
//! `nodeStatusReportFrequency` (5 m) passed: then the Node is read (first from the API
//! server's cache, `resourceVersion=0`), the setters run on it, and the two-way
//! strategic merge patch from it ([`patch`]) is PATCHed to `nodes/<name>/status`, up to
//! [`NODE_STATUS_UPDATE_RETRY`] times. Unlike upstream, a tick with nothing to send
//! reads nothing: the change check runs on the Node the last write returned, so a
//! steady node costs one GET and one PATCH per 5 minutes; after a failed write (here
//! or of the lease) the next tick reads the Node again, so what others wrote while the
//! API server was away (the node controller's `Unknown`) is corrected at once.
//! Condition flips record upstream's node events (`Node <n> status is now: NodeReady`).

pub(crate) mod machine;
pub(crate) mod patch;
pub(crate) mod setters;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::{Node, NodeStatus};

use self::machine::MachineInfo;
use self::setters::{Inputs, NodeSettings};
use crate::nodelease::Heartbeat;
use apiclient::{ApiClient, ApiError};
use base::loops::{run_jittered, Loops, SpawnError, Stop};
use runtime::Runtime;

/// Upstream `nodeStatusUpdateRetry`.
pub(crate) const NODE_STATUS_UPDATE_RETRY: u32 = 5;
/// Registration's first wait (upstream: 100 ms, doubling).
pub(crate) const REGISTER_INITIAL_BACKOFF: Duration = Duration::from_millis(100);
/// Registration's longest wait (upstream: 7 s).
pub(crate) const REGISTER_MAX_BACKOFF: Duration = Duration::from_secs(7);
/// Upstream's jitter of the status period (`wait.JitterUntil` 0.04).
pub(crate) const STATUS_JITTER: f64 = 0.04;

/// The Node calls, a seam for the unit tests.
pub(crate) trait NodeApi: Send {
    /// GET the Node (`from_cache`: `resourceVersion=0`).
    fn get(&self, from_cache: bool) -> Result<Node, ApiError>;
    /// POST it.
    fn create(&self, node: &Node) -> Result<Node, ApiError>;
    /// PATCH its status (strategic merge).
    fn patch_status(&self, patch: &serde_json::Value) -> Result<Node, ApiError>;
}

/// The Node calls over the API client, each with the heartbeat timeout.
#[derive(Debug)]
pub(crate) struct ApiNodes {
    client: Arc<ApiClient>,
    name: String,
    timeout: Duration,
}

impl NodeApi for ApiNodes {
    fn get(&self, from_cache: bool) -> Result<Node, ApiError> {
        self.client.get_node(&self.name, from_cache, self.timeout)
    }
    fn create(&self, node: &Node) -> Result<Node, ApiError> {
        self.client.create_node(node, self.timeout)
    }
    fn patch_status(&self, patch: &serde_json::Value) -> Result<Node, ApiError> {
        self.client
            .patch_node_status(&self.name, patch, self.timeout)
    }
}

/// Why registering or updating the Node failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NodeStatusError {
    /// Every attempt of this tick to update the status failed; the last error.
    #[error("update node status exceeds retry count ({NODE_STATUS_UPDATE_RETRY}) for node {node}")]
    Update {
        /// The node.
        node: String,
        /// The last failure.
        source: Box<ApiError>,
    },
}

/// Where the Ready condition's reasons come from: the errors that make the node not
/// ready now (empty: ready).
pub(crate) type ReadinessCheck = Box<dyn Fn() -> Vec<String> + Send>;

/// The status loop's state.
pub(crate) struct NodeStatusManager {
    api: Box<dyn NodeApi>,
    settings: NodeSettings,
    machine: MachineInfo,
    runtime: Arc<dyn Runtime>,
    readiness: ReadinessCheck,
    heartbeat: Arc<Heartbeat>,
    register_node: bool,
    /// The runtime's network is made of the pod CIDR (kubenet): the Node is read at
    /// every update, so a pod CIDR given or changed is taken within one period.
    reads_pod_cidr: bool,
    registered: bool,
    report_frequency: Duration,
    /// The Node as the last read or write returned it.
    last_node: Option<Node>,
    /// The status last sent (or found already there).
    last_reported: Option<NodeStatus>,
    /// When it was last sent.
    last_report: Option<Instant>,
    /// Read the Node again before deciding (after a failure).
    resync: bool,
    /// The pod CIDRs the runtime last took from the Node's spec.
    pod_cidrs: Vec<String>,
    /// Without `--node-ip`: the address detected again each tick.
    follow_ip: Option<FollowIp>,
}

/// The node's address as pods' `hostIP` give it, shared by the `node-status` loop (which
/// detects it again each tick without `--node-ip`) and the pod workers (which read it
/// at each sync).
#[derive(Debug)]
pub(crate) struct HostIp(std::sync::Mutex<String>);

impl HostIp {
    /// The address `ip`, until it changes.
    pub(crate) fn new(ip: String) -> Self {
        HostIp(std::sync::Mutex::new(ip))
    }

    /// The address now.
    pub(crate) fn get(&self) -> String {
        base::loops::lock(&self.0).clone()
    }

    fn set(&self, ip: &str) {
        *base::loops::lock(&self.0) = ip.to_string();
    }
}

/// How the `node-status` loop follows a node address that changes (a DHCP lease, a
/// board moved to another network): detected again each tick; a change goes into the
/// Node's InternalIP at once and into every pod's `hostIP` through a resync of all pods.
#[allow(missing_debug_implementations)] // A boxed closure.
pub(crate) struct FollowIp {
    /// Detects the address ([`detect_node_ip`] of the node's name).
    pub detect: Box<dyn Fn() -> String + Send>,
    /// The pods' address.
    pub shared: Arc<HostIp>,
    /// Wakes the sync loop to sync every pod (a full wake is dropped: one is pending).
    pub resync_pods: crossbeam_channel::Sender<()>,
}

impl fmt::Debug for NodeStatusManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeStatusManager")
            .field("node", &self.settings.node_name)
            .field("registered", &self.registered)
            .finish()
    }
}

/// What the manager is built from.
#[allow(missing_debug_implementations)] // Boxed closures and trait objects.
pub(crate) struct Setup {
    /// The Node calls.
    pub api: Box<dyn NodeApi>,
    /// The node's settings.
    pub settings: NodeSettings,
    /// The machine's facts.
    pub machine: MachineInfo,
    /// The runtime (version, images).
    pub runtime: Arc<dyn Runtime>,
    /// The Ready condition's source.
    pub readiness: ReadinessCheck,
    /// Shared with the lease loop.
    pub heartbeat: Arc<Heartbeat>,
    /// `--register-node`.
    pub register_node: bool,
    /// The runtime's network is made of the pod CIDR.
    pub reads_pod_cidr: bool,
    /// `nodeStatusReportFrequency`.
    pub report_frequency: Duration,
    /// Without `--node-ip`: the address to follow.
    pub follow_ip: Option<FollowIp>,
}

impl NodeStatusManager {
    /// A manager; nothing is read or sent yet.
    pub(crate) fn new(s: Setup) -> Self {
        NodeStatusManager {
            api: s.api,
            settings: s.settings,
            machine: s.machine,
            runtime: s.runtime,
            readiness: s.readiness,
            heartbeat: s.heartbeat,
            register_node: s.register_node,
            reads_pod_cidr: s.reads_pod_cidr,
            registered: false,
            report_frequency: s.report_frequency,
            last_node: None,
            last_reported: None,
            last_report: None,
            resync: true,
            pod_cidrs: Vec::new(),
            follow_ip: s.follow_ip,
        }
    }

    /// Detects the node's address again; a change is the Node's InternalIP from this
    /// tick on, and every pod's `hostIP` after the resync it asks for.
    fn follow_node_ip(&mut self) {
        let Some(f) = &self.follow_ip else { return };
        let ip = (f.detect)();
        if !ip.is_empty() && ip != f.shared.get() {
            log::info!(
                "node {}: InternalIP {} → {ip}; every pod's hostIP follows",
                self.settings.node_name,
                f.shared.get()
            );
            f.shared.set(&ip);
            let _ = f.resync_pods.try_send(());
        }
        if !ip.is_empty() {
            self.settings.node_ip = ip;
        }
    }

    /// One tick (upstream `syncNodeStatus`): register if needed (waiting with
    /// `sleep`, which returns true when stopping), then update the status.
    pub(crate) fn sync(&mut self, sleep: &dyn Fn(Duration) -> bool) -> Result<(), NodeStatusError> {
        self.follow_node_ip();
        if self.register_node && !self.registered && !self.register(sleep) {
            return Ok(());
        }
        self.update_node_status(Instant::now(), SystemTime::now())
    }

    /// The inputs of one computation: the runtime's version and images now.
    fn gather(
        &self,
    ) -> (
        Option<String>,
        Option<Vec<runtime::ImageDetails>>,
        Vec<String>,
    ) {
        let version = match self.runtime.version() {
            // Upstream's `<runtime name>://<version>`: `docker://…`, `containerd://…`.
            Ok(v) => Some(format!("{}://{}", v.runtime_name, v.runtime_version)),
            Err(e) => {
                log::debug!("node status: runtime version: {e}");
                None
            }
        };
        let images = match self.runtime.list_images() {
            Ok(i) => Some(i),
            Err(e) => {
                log::debug!("node status: image list: {e}");
                None
            }
        };
        (version, images, (self.readiness)())
    }

    fn record(&self, events: &[setters::NodeEvent]) {
        let node = &self.settings.node_name;
        for (reason, warning) in events {
            crate::record::node_event(
                node,
                *warning,
                reason,
                &format!("Node {node} status is now: {reason}"),
            );
        }
    }

    /// Upstream `registerWithAPIServer`: tries until registered (true) or stopping.
    fn register(&mut self, sleep: &dyn Fn(Duration) -> bool) -> bool {
        let mut wait = REGISTER_INITIAL_BACKOFF;
        let mut failures = 0u32;
        loop {
            if sleep(wait) {
                return false;
            }
            wait = wait.saturating_mul(2).min(REGISTER_MAX_BACKOFF);
            let name = self.settings.node_name.clone();
            if failures == 0 {
                log::info!("Attempting to register node {name}");
            }
            match self.try_register(SystemTime::now()) {
                Ok(()) => {
                    log::info!("Successfully registered node {name}");
                    self.registered = true;
                    return true;
                }
                Err(e) => {
                    self.heartbeat.note_trouble();
                    let line = format!(
                        "Unable to register node {name} with API server: {}",
                        base::loops::error_chain(&e)
                    );
                    if failures == 0 {
                        log::warn!("{line}");
                    } else {
                        log::debug!("{line}");
                    }
                    failures = failures.saturating_add(1);
                }
            }
        }
    }

    /// Upstream `tryRegisterWithAPIServer`.
    fn try_register(&mut self, now: SystemTime) -> Result<(), ApiError> {
        let (version, images, not_ready) = self.gather();
        let inputs = Inputs {
            settings: &self.settings,
            machine: &self.machine,
            runtime_version: version.as_deref(),
            images: images.as_deref(),
            not_ready: &not_ready,
        };
        let mut node = setters::initial_node(&self.settings);
        let events = setters::set_node_status(&mut node, &inputs, now);
        match self.api.create(&node) {
            Ok(created) => {
                self.record(&events);
                self.adopt(created, node.status, true);
                return Ok(());
            }
            Err(e) if e.is_already_exists() => {}
            Err(e) => return Err(e),
        }
        let existing = self.api.get(false)?;
        log::info!("Node {} was previously registered", self.settings.node_name);
        let mut reconciled = existing.clone();
        if setters::reconcile_existing(&node, &mut reconciled) {
            let patch = patch::node_status_patch(&to_json(&existing), &to_json(&reconciled));
            let answer = self.api.patch_status(&patch)?;
            self.heartbeat.set_node_uid(answer.metadata.uid.clone());
            self.last_node = Some(answer);
        } else {
            self.heartbeat.set_node_uid(existing.metadata.uid.clone());
            self.last_node = Some(existing);
        }
        // Its status is whatever the last kubelet left: the next update reads and
        // corrects it.
        self.resync = true;
        Ok(())
    }

    /// Takes `node` (an API answer) as the last known Node, `sent` as what was sent.
    fn adopt(&mut self, node: Node, sent: Option<NodeStatus>, reported: bool) {
        self.heartbeat.set_node_uid(node.metadata.uid.clone());
        self.last_node = Some(node);
        self.last_reported = sent;
        if reported {
            self.last_report = Some(Instant::now());
        }
        self.resync = false;
    }

    /// Upstream `updateNodeStatus`: decides whether to write, then up to
    /// [`NODE_STATUS_UPDATE_RETRY`] attempts.
    pub(crate) fn update_node_status(
        &mut self,
        now: Instant,
        wall: SystemTime,
    ) -> Result<(), NodeStatusError> {
        let (version, images, not_ready) = self.gather();
        // Copies (a few strings): the attempts below update `self`.
        let (settings, machine) = (self.settings.clone(), self.machine.clone());
        let inputs = Inputs {
            settings: &settings,
            machine: &machine,
            runtime_version: version.as_deref(),
            images: images.as_deref(),
            not_ready: &not_ready,
        };
        let report_due = self
            .last_report
            .is_none_or(|t| now.saturating_duration_since(t) >= self.report_frequency);
        let trouble = self.heartbeat.take_trouble();
        let shortcut = !trouble && !self.resync && !self.reads_pod_cidr;
        if let (Some(last), true) = (&self.last_node, shortcut) {
            let mut candidate = last.clone();
            // Events are recorded by the write that sends a flip, not here.
            let _ = setters::set_node_status(&mut candidate, &inputs, wall);
            let changed =
                setters::status_changed(self.last_reported.as_ref(), candidate.status.as_ref());
            if !changed && !report_due {
                return Ok(());
            }
        }
        let mut last_err = None;
        for attempt in 0..NODE_STATUS_UPDATE_RETRY {
            match self.try_update(attempt == 0, &inputs, report_due, wall) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    log::debug!(
                        "Error updating node status, will retry: {}",
                        base::loops::error_chain(&e)
                    );
                    let not_found = e.is_not_found();
                    last_err = Some(e);
                    if not_found {
                        break;
                    }
                }
            }
        }
        self.resync = true;
        Err(NodeStatusError::Update {
            node: self.settings.node_name.clone(),
            source: Box::new(last_err.unwrap_or_else(|| ApiError::Tls("no attempt".into()))),
        })
    }

    /// Hands the Node's `spec.podCIDRs` (else `spec.podCIDR`) to the runtime when they
    /// changed (upstream `updatePodCIDR`); one it refuses is said, and tried again
    /// with the next read.
    fn update_pod_cidrs(&mut self, node: &Node) {
        let spec = node.spec.as_ref();
        let cidrs: Vec<String> = spec
            .and_then(|s| s.pod_cidrs.clone())
            .filter(|c| !c.is_empty())
            .or_else(|| spec.and_then(|s| s.pod_cidr.clone()).map(|c| vec![c]))
            .unwrap_or_default();
        if cidrs.is_empty() || cidrs == self.pod_cidrs {
            return;
        }
        match self.runtime.update_runtime_config(&cidrs) {
            Ok(()) => {
                log::info!(
                    "node {}: pod CIDR {}",
                    self.settings.node_name,
                    cidrs.join(",")
                );
                self.pod_cidrs = cidrs;
            }
            Err(e) => log::warn!(
                "node {}: the runtime refused the pod CIDR {}: {}",
                self.settings.node_name,
                cidrs.join(","),
                base::loops::error_chain(&e)
            ),
        }
    }

    /// Upstream `tryUpdateNodeStatus` (its `inputs` gathered by the caller).
    fn try_update(
        &mut self,
        from_cache: bool,
        inputs: &Inputs<'_>,
        report_due: bool,
        wall: SystemTime,
    ) -> Result<(), ApiError> {
        let fetched = self.api.get(from_cache)?;
        self.update_pod_cidrs(&fetched);
        let mut node = fetched.clone();
        let events = setters::set_node_status(&mut node, inputs, wall);
        let changed = setters::status_changed(fetched.status.as_ref(), node.status.as_ref());
        if !changed && !report_due {
            // The API server already has it (heartbeat times aside).
            self.adopt(fetched, node.status, false);
            return Ok(());
        }
        let patch = patch::node_status_patch(&to_json(&fetched), &to_json(&node));
        let answer = self.api.patch_status(&patch)?;
        self.record(&events);
        self.adopt(answer, node.status, true);
        Ok(())
    }
}

fn to_json(node: &Node) -> serde_json::Value {
    base::json::to_value(node).unwrap_or_default()
}

/// The node's InternalIP when `--node-ip` is not given (upstream, no cloud provider):
/// the host name if it is an IP; else its first resolved IPv4 address that is on one
/// of this host's interfaces and not loopback; else the address of the default
/// route's interface; else the first interface's.
pub(crate) fn detect_node_ip(hostname: &str) -> String {
    use std::net::{IpAddr, ToSocketAddrs};
    if let Ok(ip) = hostname.parse::<IpAddr>() {
        return ip.to_string();
    }
    let local = base::netutil::host_interfaces();
    let resolved: Vec<IpAddr> = (hostname, 0)
        .to_socket_addrs()
        .map(|a| a.map(|s| s.ip()).collect())
        .unwrap_or_default();
    let on_host = resolved.iter().find_map(|ip| match ip {
        IpAddr::V4(v4) if !v4.is_loopback() && local.iter().any(|(_, l)| l == v4) => {
            Some(v4.to_string())
        }
        _ => None,
    });
    let routes = std::fs::read_to_string("/proc/net/route").unwrap_or_default();
    on_host
        .or_else(|| {
            let iface = default_route_interface(&routes)?;
            local
                .iter()
                .find(|(name, _)| *name == iface)
                .map(|(_, ip)| ip.to_string())
        })
        .unwrap_or_else(base::netutil::node_ip)
}

/// The interface of the IPv4 default route in `/proc/net/route` (destination and
/// mask 0, the lowest metric).
fn default_route_interface(routes: &str) -> Option<String> {
    routes
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (iface, dest, metric, mask) = (f.first()?, f.get(1)?, f.get(6)?, f.get(7)?);
            (*dest == "00000000" && *mask == "00000000")
                .then(|| (metric.parse::<u64>().unwrap_or(u64::MAX), iface.to_string()))
        })
        .min()
        .map(|(_, iface)| iface)
}

/// What [`start`] needs.
#[allow(missing_debug_implementations)] // A boxed closure.
pub(crate) struct Start {
    /// The client of `--kubeconfig`.
    pub client: Arc<ApiClient>,
    /// The node's settings (`node_ip` empty: detected on the loop's thread).
    pub settings: NodeSettings,
    /// The runtime.
    pub runtime: Arc<dyn Runtime>,
    /// The Ready condition's source.
    pub readiness: ReadinessCheck,
    /// Shared with the lease loop.
    pub heartbeat: Arc<Heartbeat>,
    /// `--register-node`.
    pub register_node: bool,
    /// The runtime's network is made of the pod CIDR (`--network-plugin=kubenet`).
    pub reads_pod_cidr: bool,
    /// `nodeStatusUpdateFrequency`.
    pub update_frequency: Duration,
    /// `nodeStatusReportFrequency`.
    pub report_frequency: Duration,
    /// The heartbeat timeout of each call.
    pub timeout: Duration,
    /// `--root-dir` (its filesystem is the ephemeral storage).
    pub root_dir: std::path::PathBuf,
    /// The pods' address, and the wake that resyncs every pod: followed when
    /// `--node-ip` is not given.
    pub host_ip: Option<(Arc<HostIp>, crossbeam_channel::Sender<()>)>,
}

/// Starts the `node-status` loop.
pub(crate) fn start(loops: &Loops, s: Start) -> Result<(), SpawnError> {
    let period = s.update_frequency;
    // Set up once on the loop's own thread; kept across a restart after a panic.
    let mut start = Some(s);
    let mut made: Option<NodeStatusManager> = None;
    loops.spawn("node-status", move |stop: Stop, handle| {
        let manager = match (made.as_mut(), start.take()) {
            (Some(m), _) => m,
            (None, Some(s)) => made.insert(new_manager(s)),
            (None, None) => return,
        };
        run_jittered(&stop, &handle, period, STATUS_JITTER, |stop| {
            manager.sync(&|d| stop.sleep(d))
        });
    })
}

/// The `node-status` loop's manager, made on its own thread (the node IP detection
/// may resolve the node's name).
fn new_manager(s: Start) -> NodeStatusManager {
    let node = s.settings.node_name.clone();
    let mut settings = s.settings;
    if settings.node_ip.is_empty() {
        settings.node_ip = detect_node_ip(&settings.node_name);
    }
    log::info!("node {node}: InternalIP {}", settings.node_ip);
    let follow_ip = s.host_ip.map(|(shared, resync_pods)| {
        let name = node.clone();
        FollowIp {
            detect: Box::new(move || detect_node_ip(&name)),
            shared,
            resync_pods,
        }
    });
    NodeStatusManager::new(Setup {
        api: Box::new(ApiNodes {
            client: s.client,
            name: node.clone(),
            timeout: s.timeout,
        }),
        settings,
        machine: machine::read(&s.root_dir),
        runtime: s.runtime,
        readiness: s.readiness,
        heartbeat: s.heartbeat,
        register_node: s.register_node,
        reads_pod_cidr: s.reads_pod_cidr,
        report_frequency: s.report_frequency,
        follow_ip,
    })
}

#[cfg(test)]
mod tests;
