//! Pod networking beside Docker with `--network-plugin=cni` or `kubenet`
//! (dockershim's network plugins): a pod's sandbox is made with Docker's `none`
//! network, and CNI plugins give its network namespace an interface and addresses
//! (`ADD`) right after it starts; the addresses are the pod's IPs. With `cni` the
//! network is the first valid configuration in `--cni-conf-dir`; with `kubenet` it is
//! made from the node's pod CIDR ([`kubenet`]). The sandbox's network is taken down (`DEL`) before it is stopped,
//! killed or removed, and for sandboxes that went while rkubelet was away (found in
//! the CNI cache), so no address or interface leaks.
//!
//! [`PluginNetwork`] wraps the Docker runtime: every call goes through; sandboxes on
//! the pod network get the CNI steps around them, and their inspect answers the
//! addresses the plugins gave. Without a valid configuration (or, for kubenet, a pod
//! CIDR) the network is not ready (upstream's `cni config uninitialized`): the Node is
//! NotReady, and a sandbox on the pod network is refused with that reason (the pod
//! waits; host-network pods run).
//! A plugin runs on the calling pod worker with a deadline; a failing or hung one
//! holds back only its own pod.

pub(crate) mod kubenet;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use base::loops::lock;
use cni::cache::{self, CachedResult};
use cni::conf::NetworkConfigList;
use cni::{Cni, RuntimeConf};
use runtime::config::{ContainerConfig, NamespaceMode, PodSandboxConfig};
use runtime::container::labels;
use runtime::{
    ContainerDetails, ContainerState, ContainerSummary, EventFilter, EventItem, ExecResult,
    ExecSession, ImageDetails, LogOptions, LogStream, NetworkStatus, ProcessIo, RegistryAuth,
    Runtime, RuntimeError, RuntimeInfo, RuntimeVersion, StreamOptions, StreamRequest, TermSize,
};

/// The longest one CNI plugin may run: bridge, host-local and portmap take
/// milliseconds; a plugin that talks to a network controller may take seconds.
pub(crate) const PLUGIN_TIMEOUT: Duration = Duration::from_secs(60);

/// The interface a pod's network is given (upstream's `eth0`).
const IFNAME: &str = "eth0";

/// How often sandboxes that went without a `DEL` are looked for in the CNI cache (and
/// kubenet's masquerade rules are checked).
const ORPHAN_SCAN_PERIOD: Duration = Duration::from_secs(60);

/// The annotations that limit a pod's bandwidth (upstream's
/// `ExtractPodBandwidthResources`).
const INGRESS_BANDWIDTH: &str = "kubernetes.io/ingress-bandwidth";
const EGRESS_BANDWIDTH: &str = "kubernetes.io/egress-bandwidth";

/// Where the network comes from.
#[derive(Debug)]
pub(crate) enum Mode {
    /// `cni`: the first valid configuration of the directory.
    Cni {
        /// `--cni-conf-dir`.
        conf_dir: PathBuf,
    },
    /// `kubenet`: made from the node's pod CIDR.
    Kubenet(kubenet::Kubenet),
}

impl Mode {
    /// The plugin's name, as upstream's messages give it.
    fn name(&self) -> &'static str {
        match self {
            Mode::Cni { .. } => "cni",
            Mode::Kubenet(_) => "kubenet",
        }
    }
}

/// The network configuration as last read, and what it was read from.
#[derive(Debug, Default)]
struct Loaded {
    /// Each configuration file with its size and modification time.
    seen: Vec<(PathBuf, u64, Option<SystemTime>)>,
    /// The network, or why there is none.
    network: Option<Result<NetworkConfigList, String>>,
}

/// The Docker runtime with a CNI network for its pods.
#[derive(Debug)]
pub(crate) struct PluginNetwork {
    inner: Arc<dyn Runtime>,
    cni: Cni,
    mode: Mode,
    /// `cni`: the configuration as last read.
    loaded: Mutex<Loaded>,
    /// The node's pod CIDRs as last told (`UpdateRuntimeConfig`), and for kubenet the
    /// network made from them.
    pod_cidrs: Mutex<(Vec<kubenet::Cidr>, Option<NetworkConfigList>)>,
    /// Each sandbox's pod IPs, as its `ADD` gave them (or the cache told).
    ips: Mutex<BTreeMap<String, Vec<String>>>,
    /// When the cache was last searched for sandboxes that went without a `DEL`.
    last_scan: Mutex<Option<Instant>>,
}

impl PluginNetwork {
    /// Wraps `inner` (a Docker runtime made with its plugin network); the network is
    /// `mode`'s.
    pub(crate) fn new(inner: Arc<dyn Runtime>, cni: Cni, mode: Mode) -> PluginNetwork {
        PluginNetwork {
            inner,
            cni,
            mode,
            loaded: Mutex::default(),
            pod_cidrs: Mutex::default(),
            ips: Mutex::default(),
            last_scan: Mutex::default(),
        }
    }

    /// The network: kubenet's for the pod CIDR, or the configuration directory's.
    fn network(&self) -> Result<NetworkConfigList, String> {
        match &self.mode {
            Mode::Cni { conf_dir } => self.conf_dir_network(conf_dir),
            Mode::Kubenet(_) => {
                let missing = kubenet::missing_plugins(&self.cni.bin_dirs);
                if !missing.is_empty() {
                    return Err(format!(
                        "could not locate kubenet required CNI plugins {missing:?} at {:?}",
                        self.cni.bin_dirs
                    ));
                }
                lock(&self.pod_cidrs)
                    .1
                    .clone()
                    .ok_or_else(|| kubenet::NO_POD_CIDR.to_string())
            }
        }
    }

    /// The network of the configuration directory, read again when its files
    /// changed (a `stat` of each while nothing did).
    fn conf_dir_network(&self, conf_dir: &Path) -> Result<NetworkConfigList, String> {
        let seen: Vec<(PathBuf, u64, Option<SystemTime>)> = cni::conf::files(conf_dir)
            .unwrap_or_default()
            .into_iter()
            .map(|p| {
                let m = std::fs::metadata(&p).ok();
                let len = m.as_ref().map_or(0, |m| m.len());
                let modified = m.and_then(|m| m.modified().ok());
                (p, len, modified)
            })
            .collect();
        {
            let loaded = lock(&self.loaded);
            if loaded.seen == seen {
                if let Some(network) = &loaded.network {
                    return network.clone();
                }
            }
        }
        // Read without the lock held: a slow disk holds back no other caller.
        let network = cni::conf::load(conf_dir);
        match &network {
            Ok(n) => log::info!(
                "cni: network {} from {} ({} plugins)",
                n.name,
                n.path.display(),
                n.plugins.len()
            ),
            Err(e) => log::warn!("cni: no network: {e}"),
        }
        let mut loaded = lock(&self.loaded);
        loaded.network = Some(network.clone());
        loaded.seen = seen;
        network
    }

    /// The name of the network as last read, if it was valid.
    fn network_name(&self) -> Option<String> {
        match &self.mode {
            Mode::Cni { .. } => lock(&self.loaded)
                .network
                .as_ref()
                .and_then(|n| n.as_ref().ok())
                .map(|n| n.name.clone()),
            Mode::Kubenet(_) => lock(&self.pod_cidrs).1.as_ref().map(|n| n.name.clone()),
        }
    }

    /// Sets up the network of a sandbox that just started.
    fn set_up(
        &self,
        net: &NetworkConfigList,
        id: &str,
        cfg: &PodSandboxConfig,
    ) -> Result<Vec<String>, String> {
        let pid = self
            .inner
            .inspect_container(id)
            .map_err(|e| format!("cannot inspect it: {e}"))?
            .pid;
        if pid == 0 {
            return Err("it is not running".into());
        }
        let m = &cfg.metadata;
        let rt = RuntimeConf {
            container_id: id.to_string(),
            netns: format!("/proc/{pid}/ns/net"),
            ifname: IFNAME.into(),
            args: vec![
                ("IgnoreUnknown".into(), "1".into()),
                ("K8S_POD_NAMESPACE".into(), m.namespace.clone()),
                ("K8S_POD_NAME".into(), m.name.clone()),
                ("K8S_POD_INFRA_CONTAINER_ID".into(), id.to_string()),
                ("K8S_POD_UID".into(), m.uid.clone()),
            ],
            capability_args: capability_args(cfg, &lock(&self.pod_cidrs).0)?,
        };
        let t = Instant::now();
        let result = self.cni.add(net, &rt).map_err(|e| e.to_string())?;
        let ips = cni::result_ips(&result);
        log::info!(
            "{}: pod {}_{} sandbox {} got {} on {} in {:?}",
            self.mode.name(),
            m.name,
            m.namespace,
            runtime::container::short(id),
            ips.join(", "),
            net.name,
            t.elapsed()
        );
        if ips.is_empty() {
            return Err(format!("the plugins of {} gave no address", net.name));
        }
        lock(&self.ips).insert(id.to_string(), ips.clone());
        Ok(ips)
    }

    /// The cached `ADD` of a sandbox, if it has one: under the network now configured,
    /// else under any.
    fn cached(&self, id: &str) -> Option<CachedResult> {
        self.cached_under_current(id).or_else(|| {
            cache::all(&self.cni.cache_dir)
                .into_iter()
                .find(|c| c.container_id == id)
        })
    }

    /// The cached `ADD` of a sandbox under the network now configured (one file read,
    /// nothing when there is none: what every stop and removal checks).
    fn cached_under_current(&self, id: &str) -> Option<CachedResult> {
        let name = self.network_name()?;
        cache::read(&self.cni.cache_dir, &name, id, IFNAME)
    }

    /// Takes down a sandbox's network if the plugins gave it one: `DEL` with the
    /// cached result, on its namespace while its process lives.
    fn tear_down(&self, id: &str) {
        // A sandbox known to have an address is looked for under any network; any
        // other ID (most are app containers) only where it would be now.
        let c = if lock(&self.ips).contains_key(id) {
            self.cached(id)
        } else {
            self.cached_under_current(id)
        };
        let Some(c) = c else {
            return;
        };
        self.del(&c);
        lock(&self.ips).remove(id);
    }

    fn del(&self, c: &CachedResult) {
        let netns = match self.inner.inspect_container(&c.container_id) {
            Ok(d) if d.pid > 0 => format!("/proc/{}/ns/net", d.pid),
            _ => String::new(),
        };
        let Some(net) = c.network() else {
            log::warn!(
                "cni: the cached network of {} does not parse; its address stays",
                c.container_id
            );
            return;
        };
        let t = Instant::now();
        match self.cni.del(&net, &c.runtime_conf(&netns)) {
            Ok(()) => log::info!(
                "cni: took down the network of sandbox {} in {:?}",
                runtime::container::short(&c.container_id),
                t.elapsed()
            ),
            Err(e) => log::warn!(
                "cni: cannot take down the network of sandbox {}: {e}",
                runtime::container::short(&c.container_id)
            ),
        }
    }

    /// Why a pod's network cannot be made now (upstream's words first).
    fn not_ready(&self, reason: &str) -> String {
        match self.mode {
            Mode::Cni { .. } => {
                format!("network plugin is not ready: cni config uninitialized ({reason})")
            }
            Mode::Kubenet(_) => format!("network plugin is not ready: {reason}"),
        }
    }

    /// `DEL` for every cached sandbox that no longer runs (it went while rkubelet was
    /// away, or its `DEL` failed), at most once a [`ORPHAN_SCAN_PERIOD`].
    fn tear_down_orphans(&self) {
        let now = Instant::now();
        {
            let mut last = lock(&self.last_scan);
            if last.is_some_and(|t| now.saturating_duration_since(t) < ORPHAN_SCAN_PERIOD) {
                return;
            }
            *last = Some(now);
        }
        if let Mode::Kubenet(k) = &self.mode {
            let cidrs = lock(&self.pod_cidrs).0.clone();
            if let Err(e) = k.ensure_masquerade(&cidrs) {
                log::warn!("kubenet: {e}");
            }
        }
        let cached = cache::all(&self.cni.cache_dir);
        if cached.is_empty() {
            return;
        }
        // One list for all of them; an engine that does not answer now: next time.
        let Ok(listed) = self.inner.list_containers(&[]) else {
            return;
        };
        let running: std::collections::BTreeSet<&str> = listed
            .iter()
            .filter(|c| c.state == ContainerState::Running)
            .map(|c| c.id.as_str())
            .collect();
        for c in cached {
            if !running.contains(c.container_id.as_str()) {
                log::info!(
                    "cni: sandbox {} went without a DEL",
                    runtime::container::short(&c.container_id)
                );
                self.del(&c);
                lock(&self.ips).remove(&c.container_id);
            }
        }
    }
}

/// The capability arguments of a sandbox (dockershim's cni plugin): `portMappings`
/// for its host ports (lowercase protocols, the host IP when one is given),
/// `bandwidth` from the pod's bandwidth annotations, and `ipRanges` with the node's
/// pod CIDRs when it has them. Each reaches only the plugins that declare it.
fn capability_args(
    cfg: &PodSandboxConfig,
    pod_cidrs: &[kubenet::Cidr],
) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    let mut args = serde_json::Map::new();
    let ports: Vec<serde_json::Value> = cfg
        .port_mappings
        .iter()
        .map(|p| {
            let mut m = serde_json::json!({
                "hostPort": p.host_port,
                "containerPort": p.container_port,
                "protocol": p.protocol.to_ascii_lowercase(),
            });
            if !p.host_ip.is_empty() {
                m["hostIP"] = serde_json::Value::String(p.host_ip.clone());
            }
            m
        })
        .collect();
    if !ports.is_empty() {
        args.insert("portMappings".into(), serde_json::Value::Array(ports));
    }
    let ingress = bandwidth(cfg, INGRESS_BANDWIDTH)?;
    let egress = bandwidth(cfg, EGRESS_BANDWIDTH)?;
    if ingress.is_some() || egress.is_some() {
        // Upstream gives no burst limit: the largest 32-bit one.
        let mut b = serde_json::Map::new();
        if let Some(rate) = ingress {
            b.insert("ingressRate".into(), rate.into());
            b.insert("ingressBurst".into(), i32::MAX.into());
        }
        if let Some(rate) = egress {
            b.insert("egressRate".into(), rate.into());
            b.insert("egressBurst".into(), i32::MAX.into());
        }
        args.insert("bandwidth".into(), serde_json::Value::Object(b));
    }
    if !pod_cidrs.is_empty() {
        let ranges: Vec<serde_json::Value> = pod_cidrs
            .iter()
            .map(|c| serde_json::json!([{"subnet": c.to_string()}]))
            .collect();
        args.insert("ipRanges".into(), serde_json::Value::Array(ranges));
    }
    Ok(args)
}

/// One bandwidth annotation in bits per second, checked as upstream checks it
/// (between 1k and 1P).
fn bandwidth(cfg: &PodSandboxConfig, key: &str) -> Result<Option<u64>, String> {
    let Some(v) = cfg.annotations.get(key) else {
        return Ok(None);
    };
    let fail =
        |why: &str| format!("failed to get pod bandwidth from annotations: {key}={v:?}: {why}");
    let milli = base::quantity::parse_milli(v).ok_or_else(|| fail("not a quantity"))?;
    // A quantity's value is rounded up to a whole unit.
    let bits = (milli + 999).div_euclid(1000);
    if bits < 1_000 {
        return Err(fail("resource is unreasonably small (< 1kbit)"));
    }
    if bits > 1_000_000_000_000_000 {
        return Err(fail("resource is unreasonably large (> 1Pbit)"));
    }
    u64::try_from(bits)
        .map(Some)
        .map_err(|_| fail("out of range"))
}

fn is_pod_network_sandbox(d: &ContainerDetails) -> bool {
    d.labels.get(labels::DOCKER_TYPE).map(String::as_str) == Some(labels::TYPE_SANDBOX)
        && !d.host_network
}

impl Runtime for PluginNetwork {
    fn version(&self) -> Result<RuntimeVersion, RuntimeError> {
        self.inner.version()
    }

    fn info(&self) -> Result<RuntimeInfo, RuntimeError> {
        self.inner.info()
    }

    fn list_containers(
        &self,
        label_filter: &[String],
    ) -> Result<Vec<ContainerSummary>, RuntimeError> {
        self.inner.list_containers(label_filter)
    }

    fn inspect_container(&self, id: &str) -> Result<ContainerDetails, RuntimeError> {
        let mut d = self.inner.inspect_container(id)?;
        if is_pod_network_sandbox(&d) && d.ip_address.is_empty() {
            let known = lock(&self.ips).get(id).cloned();
            let ips = known.or_else(|| {
                let ips = self.cached(id).map(|c| cni::result_ips(&c.result))?;
                lock(&self.ips).insert(id.to_string(), ips.clone());
                Some(ips)
            });
            let mut ips = ips.unwrap_or_default().into_iter();
            if let Some(ip) = ips.next() {
                d.ip_address = ip;
                d.additional_ips = ips.collect();
            }
        }
        Ok(d)
    }

    fn run_pod_sandbox(&self, config: &PodSandboxConfig) -> Result<String, RuntimeError> {
        let ns = &config.linux.security_context.namespace_options;
        if ns.network == NamespaceMode::Node {
            return self.inner.run_pod_sandbox(config);
        }
        let m = &config.metadata;
        let op = format!("run pod sandbox for {}_{}", m.name, m.namespace);
        let net = self.network().map_err(|e| RuntimeError::Api {
            op: op.clone(),
            status: 0,
            message: format!("network is not ready: {}", self.not_ready(&e)),
        })?;
        let id = self.inner.run_pod_sandbox(config)?;
        match self.set_up(&net, &id, config) {
            Ok(_) => Ok(id),
            Err(e) => {
                // The sandbox is of no use without its network (dockershim removed it).
                self.tear_down(&id);
                let _ = self.inner.remove_container(&id);
                Err(RuntimeError::Api {
                    op,
                    status: 0,
                    message: format!(
                        "failed to set up sandbox container {id:?} network for pod {:?}: \
                         networkPlugin {} failed to set up pod \"{}_{}\" network: {e}",
                        m.name,
                        self.mode.name(),
                        m.name,
                        m.namespace
                    ),
                })
            }
        }
    }

    fn create_container(
        &self,
        pod_sandbox_id: &str,
        config: &ContainerConfig,
        sandbox_config: &PodSandboxConfig,
    ) -> Result<String, RuntimeError> {
        self.inner
            .create_container(pod_sandbox_id, config, sandbox_config)
    }

    fn start_container(&self, id: &str) -> Result<(), RuntimeError> {
        self.inner.start_container(id)
    }

    fn stop_container(&self, id: &str, grace: Duration) -> Result<(), RuntimeError> {
        self.tear_down(id);
        self.inner.stop_container(id, grace)
    }

    fn kill_container(&self, id: &str, signal: &str) -> Result<(), RuntimeError> {
        self.tear_down(id);
        self.inner.kill_container(id, signal)
    }

    fn remove_container(&self, id: &str) -> Result<(), RuntimeError> {
        self.tear_down(id);
        self.inner.remove_container(id)
    }

    fn inspect_image(&self, image: &str) -> Result<Option<ImageDetails>, RuntimeError> {
        self.inner.inspect_image(image)
    }

    fn pull_image(&self, image: &str, auth: Option<&RegistryAuth>) -> Result<(), RuntimeError> {
        self.inner.pull_image(image, auth)
    }

    fn import_image(
        &self,
        image: &str,
        changes: &[String],
        tar: (&mut dyn std::io::Read, u64),
    ) -> Result<(), RuntimeError> {
        self.inner.import_image(image, changes, tar)
    }

    fn load_image(&self, tar: (&mut dyn std::io::Read, u64)) -> Result<Vec<String>, RuntimeError> {
        self.inner.load_image(tar)
    }

    fn list_images(&self) -> Result<Vec<ImageDetails>, RuntimeError> {
        self.inner.list_images()
    }

    fn image_fs_usage(&self) -> Result<Option<runtime::ImageFsUsage>, RuntimeError> {
        self.inner.image_fs_usage()
    }

    fn remove_image(&self, image: &str) -> Result<(), RuntimeError> {
        self.inner.remove_image(image)
    }

    fn logs(&self, id: &str, tail: Option<u64>) -> Result<Vec<u8>, RuntimeError> {
        self.inner.logs(id, tail)
    }

    fn log_stream(
        &self,
        id: &str,
        opts: &LogOptions,
        wake: Duration,
    ) -> Result<LogStream, RuntimeError> {
        self.inner.log_stream(id, opts, wake)
    }

    fn reopen_container_log(&self, id: &str) -> Result<(), RuntimeError> {
        self.inner.reopen_container_log(id)
    }

    fn exec(
        &self,
        id: &str,
        cmd: &[String],
        timeout: Duration,
    ) -> Result<ExecResult, RuntimeError> {
        self.inner.exec(id, cmd, timeout)
    }

    fn exec_interactive(
        &self,
        id: &str,
        cmd: &[String],
        opts: StreamOptions,
    ) -> Result<ExecSession, RuntimeError> {
        self.inner.exec_interactive(id, cmd, opts)
    }

    fn exec_status(&self, exec_id: &str) -> Result<Option<i64>, RuntimeError> {
        self.inner.exec_status(exec_id)
    }

    fn resize_exec(&self, exec_id: &str, size: TermSize) -> Result<(), RuntimeError> {
        self.inner.resize_exec(exec_id, size)
    }

    fn attach(&self, id: &str, opts: StreamOptions) -> Result<Box<dyn ProcessIo>, RuntimeError> {
        self.inner.attach(id, opts)
    }

    fn resize_container(&self, id: &str, size: TermSize) -> Result<(), RuntimeError> {
        self.inner.resize_container(id, size)
    }

    fn stream_url(&self, request: &StreamRequest) -> Result<Option<String>, RuntimeError> {
        self.inner.stream_url(request)
    }

    fn watch_events(
        &self,
        filter: &EventFilter,
        on_item: &mut dyn FnMut(EventItem) -> bool,
        should_stop: &dyn Fn() -> bool,
    ) -> Result<(), RuntimeError> {
        self.inner.watch_events(filter, on_item, should_stop)
    }

    /// Ready when the configuration directory holds a valid network (the Docker engine
    /// itself answering); also the tick that finds sandboxes that went without a DEL.
    fn network_status(&self) -> Result<NetworkStatus, RuntimeError> {
        self.inner.version()?;
        self.tear_down_orphans();
        Ok(match (self.network(), &self.mode) {
            (Ok(_), _) => NetworkStatus {
                ready: true,
                ..NetworkStatus::default()
            },
            (Err(_), Mode::Cni { .. }) => NetworkStatus {
                ready: false,
                reason: "NetworkPluginNotReady".into(),
                message: "docker: network plugin is not ready: cni config uninitialized".into(),
            },
            (Err(e), Mode::Kubenet(_)) => NetworkStatus {
                ready: false,
                reason: "NetworkPluginNotReady".into(),
                message: format!("docker: network plugin is not ready: {e}"),
            },
        })
    }

    /// Takes the node's pod CIDRs: `cni` passes them to the plugins (`ipRanges`);
    /// `kubenet` makes its network of them, so pods made from now on get addresses of
    /// the new CIDRs (running ones keep theirs until their sandbox goes).
    fn update_runtime_config(&self, pod_cidrs: &[String]) -> Result<(), RuntimeError> {
        let fail = |message: String| RuntimeError::Api {
            op: "update runtime config".into(),
            status: 0,
            message,
        };
        let cidrs = kubenet::parse_pod_cidrs(pod_cidrs).map_err(fail)?;
        let old = lock(&self.pod_cidrs).0.clone();
        if old == cidrs {
            return Ok(());
        }
        let shown: Vec<String> = cidrs.iter().map(ToString::to_string).collect();
        let Mode::Kubenet(k) = &self.mode else {
            log::info!("cni: the node's pod CIDRs are {}", shown.join(","));
            lock(&self.pod_cidrs).0 = cidrs;
            return Ok(());
        };
        let network = if cidrs.is_empty() {
            None
        } else {
            let mtu = k.bridge_mtu(Path::new("/sys/class/net"));
            let installed = |p: &str| kubenet::installed(&self.cni.bin_dirs, p);
            Some(k.network(&cidrs, mtu, &installed).map_err(fail)?)
        };
        // Sandboxes made from now on take the new network; the host's rules follow.
        *lock(&self.pod_cidrs) = (cidrs.clone(), network);
        log::info!(
            "kubenet: the pod CIDRs are {} (bridge {})",
            shown.join(","),
            kubenet::BRIDGE
        );
        kubenet::bridge_nf_call_iptables();
        if let Err(e) = k.ensure_masquerade(&cidrs) {
            log::warn!("kubenet: {e}");
        }
        let gone: Vec<kubenet::Cidr> = old.into_iter().filter(|c| !cidrs.contains(c)).collect();
        k.remove_masquerade(&gone);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use runtime::config::PortMapping;

    fn sandbox(annotations: &[(&str, &str)]) -> PodSandboxConfig {
        PodSandboxConfig {
            port_mappings: vec![PortMapping {
                protocol: "TCP".into(),
                container_port: 8080,
                host_port: 18080,
                host_ip: String::new(),
            }],
            annotations: annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..PodSandboxConfig::default()
        }
    }

    #[test]
    fn capability_args_carry_host_ports_bandwidth_and_the_pod_cidrs() {
        let cidrs = kubenet::parse_pod_cidrs(&["10.88.1.0/24,fd00:1::/64".into()]).expect("ok");
        let args = capability_args(
            &sandbox(&[(INGRESS_BANDWIDTH, "10M"), (EGRESS_BANDWIDTH, "1.5Gi")]),
            &cidrs,
        )
        .expect("ok");
        assert_eq!(
            serde_json::Value::Object(args),
            serde_json::json!({
                "portMappings": [{"hostPort": 18080, "containerPort": 8080, "protocol": "tcp"}],
                "bandwidth": {
                    "ingressRate": 10_000_000, "ingressBurst": i32::MAX,
                    "egressRate": 1_610_612_736_u64, "egressBurst": i32::MAX,
                },
                "ipRanges": [[{"subnet": "10.88.1.0/24"}], [{"subnet": "fd00:1::/64"}]],
            })
        );
        let plain = capability_args(&sandbox(&[]), &[]).expect("ok");
        assert_eq!(plain.keys().collect::<Vec<_>>(), ["portMappings"]);
    }

    #[test]
    fn unreasonable_bandwidth_annotations_are_refused_with_upstreams_words() {
        for (v, why) in [
            ("999", "unreasonably small (< 1kbit)"),
            ("2P", "unreasonably large (> 1Pbit)"),
            ("fast", "not a quantity"),
        ] {
            let e =
                capability_args(&sandbox(&[(INGRESS_BANDWIDTH, v)]), &[]).expect_err("an error");
            assert!(
                e.contains(why) && e.contains(INGRESS_BANDWIDTH) && e.contains(v),
                "{e}"
            );
        }
    }
}
