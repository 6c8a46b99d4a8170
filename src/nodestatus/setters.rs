//! The node status, computed (pure) as upstream's setters compute it
//! (`pkg/kubelet/nodestatus/setters.go`, in `defaultNodeStatusFuncs`' order): addresses,
//! machine info (capacity and allocatable), version info, daemon endpoints, images, then
//! the MemoryPressure, DiskPressure, PIDPressure and Ready conditions. Like upstream's,
//! the setters update a Node in place (the one last read from the API server), so a
//! condition keeps its `lastTransitionTime` until its status flips, and they return the
//! node events a flip records (`NodeReady`, `NodeHasSufficientMemory` …).
//!
//! Also here: the quantities' canonical text (`8025760Ki`), the initial Node of a
//! registration (`initialNode`: labels, taints, the attach/detach annotation), and
//! `nodeStatusHasChanged` (heartbeat times aside). Over 800 lines only with its table
//! tests: the setters are one upstream file, kept together so they read as one.

use std::collections::BTreeMap;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::{
    ContainerImage, DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints,
    NodeSpec, NodeStatus, NodeSystemInfo, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::machine::MachineInfo;
use runtime::ImageDetails;

/// Upstream's hard eviction default `memory.available<100Mi`, taken from allocatable.
pub(crate) const EVICTION_HARD_MEMORY: u64 = 100 * 1024 * 1024;
/// Upstream's hard eviction default `nodefs.available<10%`, taken from allocatable.
pub(crate) const EVICTION_HARD_NODEFS_PERCENT: f64 = 0.10;
/// Upstream `MaxNamesPerImageInNodeStatus`.
pub(crate) const MAX_NAMES_PER_IMAGE: usize = 5;
/// The annotation telling the attach/detach controller it manages this node's volumes
/// (upstream's default `enableControllerAttachDetach: true`).
pub(crate) const CONTROLLER_MANAGED_ATTACH: &str =
    "volumes.kubernetes.io/controller-managed-attach-detach";
/// The kubelet's version as the API sees it (and `--version` prints).
use crate::config::flags::KUBELET_VERSION;
/// The labels upstream's `updateDefaultLabels` reconciles on an existing Node.
pub(crate) const DEFAULT_LABELS: &[&str] = &[
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "node.kubernetes.io/instance-type",
    "beta.kubernetes.io/instance-type",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "node.kubernetes.io/windows-build",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
];

/// The node's settings the setters need.
#[derive(Clone, Debug, Default)]
pub(crate) struct NodeSettings {
    /// The node's name (also its host name: the override or the kernel's).
    pub node_name: String,
    /// The InternalIP.
    pub node_ip: String,
    /// The kubelet port.
    pub port: u16,
    /// `--max-pods`.
    pub max_pods: u32,
    /// `--node-status-max-images` (-1: all).
    pub max_images: i32,
    /// `--node-labels`.
    pub labels: Vec<(String, String)>,
    /// `--register-with-taints`.
    pub taints: Vec<crate::config::values::Taint>,
    /// `--kube-reserved` and `--system-reserved` added up: resource → milli-units.
    pub reserved: BTreeMap<String, i128>,
    /// The eviction manager's pressure conditions (None: never under pressure).
    pub pressure: Option<std::sync::Arc<crate::eviction::PressureState>>,
}

impl NodeSettings {
    /// Adds `--kube-reserved` or `--system-reserved` (already checked quantities).
    pub(crate) fn reserve(&mut self, list: &[(String, String)]) {
        for (name, q) in list {
            let milli = base::quantity::parse_milli(q).unwrap_or(0).max(0);
            let slot = self.reserved.entry(name.clone()).or_insert(0);
            *slot = slot.saturating_add(milli);
        }
    }
}

/// What one status computation reads besides the node.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Inputs<'a> {
    /// The settings.
    pub settings: &'a NodeSettings,
    /// The machine's facts.
    pub machine: &'a MachineInfo,
    /// The runtime's name and version as the Node shows them (`docker://20.10.24`,
    /// `containerd://1.6.20`); None: it did not answer: `<name>://Unknown`, the name
    /// the Node showed before (`docker` if none), as upstream's `VersionInfo`.
    pub runtime_version: Option<&'a str>,
    /// The runtime's images (None: it did not answer; the last list stays).
    pub images: Option<&'a [ImageDetails]>,
    /// Why the node is not ready (runtime down, PLEG not healthy); empty: ready.
    pub not_ready: &'a [String],
}

/// A node event a setter records: (reason, warning). Its message is upstream's
/// `Node <name> status is now: <reason>`.
pub(crate) type NodeEvent = (&'static str, bool);

/// A quantity in canonical binary-SI text, as `resource.NewQuantity(n, BinarySI)`
/// prints: the largest power-of-1024 suffix that keeps it whole (`8025760Ki`, `2Mi`,
/// `94630179190`); below 1024 plain (decimal SI: `1k` for 1000).
pub(crate) fn binary_si(n: u64) -> String {
    if n < 1024 {
        return decimal_si(n);
    }
    const SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    let mut v = n;
    let mut i = 0;
    while i + 1 < SUFFIXES.len() && v % 1024 == 0 {
        v /= 1024;
        i += 1;
    }
    format!("{v}{}", SUFFIXES[i])
}

/// A count in canonical decimal-SI text (`110`, `2`, `1k`).
pub(crate) fn decimal_si(n: u64) -> String {
    const SUFFIXES: [&str; 7] = ["", "k", "M", "G", "T", "P", "E"];
    let mut v = n;
    let mut i = 0;
    while v != 0 && i + 1 < SUFFIXES.len() && v % 1000 == 0 {
        v /= 1000;
        i += 1;
    }
    format!("{v}{}", SUFFIXES[i])
}

/// CPU milli-units as a quantity: whole cores plain (`2`), else in `m` (`1900m`).
fn cpu_quantity(milli: u64) -> String {
    if milli % 1000 == 0 {
        decimal_si(milli / 1000)
    } else {
        format!("{milli}m")
    }
}

/// A node's amounts of its resources: cpu in milli-units, memory and storage in
/// bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Amounts {
    /// CPU, milli-units.
    pub cpu_milli: u64,
    /// Memory, bytes.
    pub memory: u64,
    /// Pods.
    pub pods: u64,
    /// Ephemeral storage, bytes (None: unknown).
    pub ephemeral_storage: Option<u64>,
}

/// Capacity less `reserved` (kube and system reserved, milli-units), never below
/// zero: what `--enforce-node-allocatable=pods` limits the `kubepods` cgroup to
/// (upstream `GetNodeAllocatableAbsolute`; eviction thresholds stay out of it).
pub(crate) fn reserved_allocatable(
    machine: &MachineInfo,
    max_pods: u32,
    reserved: &BTreeMap<String, i128>,
) -> Amounts {
    // A reserved resource in whole units (bytes), or milli-units for cpu.
    let r = |name: &str, milli: bool| -> u64 {
        let m = reserved.get(name).copied().unwrap_or(0).max(0);
        u64::try_from(if milli { m } else { m / 1000 }).unwrap_or(u64::MAX)
    };
    Amounts {
        cpu_milli: machine
            .cpus
            .saturating_mul(1000)
            .saturating_sub(r("cpu", true)),
        memory: machine.memory_bytes.saturating_sub(r("memory", false)),
        pods: u64::from(max_pods),
        ephemeral_storage: machine
            .ephemeral_storage_bytes
            .map(|fs| fs.saturating_sub(r("ephemeral-storage", false))),
    }
}

/// The node's allocatable (what the status reports and admission checks against):
/// capacity less `reserved` and the hard eviction thresholds; hugepages also come out
/// of memory; never below zero.
pub(crate) fn allocatable(
    machine: &MachineInfo,
    max_pods: u32,
    reserved: &BTreeMap<String, i128>,
) -> Amounts {
    let mut a = reserved_allocatable(machine, max_pods, reserved);
    let hugepage_bytes: u64 = machine
        .hugepages
        .iter()
        .map(|(size, pages)| size.saturating_mul(*pages))
        .fold(0, u64::saturating_add);
    a.memory = a
        .memory
        .saturating_sub(EVICTION_HARD_MEMORY)
        .saturating_sub(hugepage_bytes);
    if let (Some(left), Some(fs)) = (a.ephemeral_storage, machine.ephemeral_storage_bytes) {
        // Upstream: int64(float64(capacity) * percentage).
        let eviction = (fs as f64 * EVICTION_HARD_NODEFS_PERCENT) as u64;
        a.ephemeral_storage = Some(left.saturating_sub(eviction));
    }
    a
}

/// Capacity and allocatable (upstream `MachineInfo` setter), as quantities: see
/// [`allocatable`].
pub(crate) fn capacity(
    machine: &MachineInfo,
    max_pods: u32,
    reserved: &BTreeMap<String, i128>,
) -> (BTreeMap<String, Quantity>, BTreeMap<String, Quantity>) {
    let a = allocatable(machine, max_pods, reserved);
    let mut cap = BTreeMap::new();
    let mut alloc = BTreeMap::new();
    let cpu_milli = machine.cpus.saturating_mul(1000);
    cap.insert("cpu".to_string(), Quantity(cpu_quantity(cpu_milli)));
    alloc.insert("cpu".to_string(), Quantity(cpu_quantity(a.cpu_milli)));
    cap.insert(
        "memory".to_string(),
        Quantity(binary_si(machine.memory_bytes)),
    );
    alloc.insert("memory".to_string(), Quantity(binary_si(a.memory)));
    let pods = Quantity(decimal_si(a.pods));
    cap.insert("pods".to_string(), pods.clone());
    alloc.insert("pods".to_string(), pods);
    if let (Some(fs), Some(left)) = (machine.ephemeral_storage_bytes, a.ephemeral_storage) {
        cap.insert("ephemeral-storage".to_string(), Quantity(binary_si(fs)));
        alloc.insert("ephemeral-storage".to_string(), Quantity(binary_si(left)));
    }
    for (size, pages) in &machine.hugepages {
        let name = format!("hugepages-{}", binary_si(*size));
        let q = Quantity(binary_si(size.saturating_mul(*pages)));
        cap.insert(name.clone(), q.clone());
        alloc.insert(name, q);
    }
    (cap, alloc)
}

/// The images of the status: the largest `max` (-1: all) first, each with its
/// digests then its tags, at most five names (upstream `Images` setter).
pub(crate) fn images(list: &[ImageDetails], max: i32) -> Vec<ContainerImage> {
    let mut sorted: Vec<&ImageDetails> = list.iter().collect();
    base::sort::sort_by(&mut sorted, |a, b| {
        b.size.cmp(&a.size).then_with(|| a.id.cmp(&b.id))
    });
    if let Ok(max) = usize::try_from(max) {
        sorted.truncate(max);
    }
    sorted
        .into_iter()
        .filter_map(|i| {
            let names: Vec<String> = i
                .repo_digests
                .iter()
                .chain(&i.repo_tags)
                .filter(|n| !n.starts_with("<none>"))
                .take(MAX_NAMES_PER_IMAGE)
                .cloned()
                .collect();
            // An image without a name (a dangling layer) is nothing a scheduler can use.
            (!names.is_empty()).then_some(ContainerImage {
                names: Some(names),
                size_bytes: Some(i.size),
            })
        })
        .collect()
}

/// Runs every setter over `node` at `now`; returns the events the condition flips
/// record.
pub(crate) fn set_node_status(
    node: &mut Node,
    inputs: &Inputs<'_>,
    now: SystemTime,
) -> Vec<NodeEvent> {
    let s = inputs.settings;
    let status = node.status.get_or_insert_with(NodeStatus::default);
    status.addresses = Some(vec![
        NodeAddress {
            type_: "InternalIP".into(),
            address: s.node_ip.clone(),
        },
        NodeAddress {
            type_: "Hostname".into(),
            address: s.node_name.clone(),
        },
    ]);
    let (cap, alloc) = capacity(inputs.machine, s.max_pods, &s.reserved);
    // Keep what others put there (extended resources), ours overwritten.
    status
        .capacity
        .get_or_insert_with(BTreeMap::new)
        .extend(cap);
    status
        .allocatable
        .get_or_insert_with(BTreeMap::new)
        .extend(alloc);
    let m = inputs.machine;
    let runtime_version = match inputs.runtime_version {
        Some(v) => v.to_string(),
        None => {
            let known = status.node_info.as_ref().and_then(|i| {
                let (name, _) = i.container_runtime_version.split_once("://")?;
                (!name.is_empty()).then(|| name.to_string())
            });
            format!("{}://Unknown", known.as_deref().unwrap_or("docker"))
        }
    };
    status.node_info = Some(NodeSystemInfo {
        machine_id: m.machine_id.clone(),
        system_uuid: m.system_uuid.clone(),
        boot_id: m.boot_id.clone(),
        kernel_version: m.kernel_version.clone(),
        os_image: m.os_image.clone(),
        container_runtime_version: runtime_version,
        kubelet_version: KUBELET_VERSION.into(),
        // Deprecated; upstream 1.31+ leaves it empty (DisableNodeKubeProxyVersion).
        kube_proxy_version: String::new(),
        operating_system: "linux".into(),
        architecture: super::machine::go_arch().into(),
        ..Default::default()
    });
    status.daemon_endpoints = Some(NodeDaemonEndpoints {
        kubelet_endpoint: Some(DaemonEndpoint {
            port: i32::from(s.port),
        }),
    });
    if let Some(list) = inputs.images {
        status.images = Some(images(list, s.max_images));
    }
    let time = base::time::k8s_time(now);
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let mut events = Vec::new();
    // The eviction manager's conditions (upstream's MemoryPressureCondition … read
    // `kl.evictionManager.IsUnderMemoryPressure` and the like).
    let pressure: Vec<&str> = s
        .pressure
        .as_ref()
        .map(|p| p.conditions().iter().map(|c| c.name()).collect())
        .unwrap_or_default();
    for (kind, (true_reason, true_msg, true_event), (false_reason, false_msg, false_event)) in
        PRESSURE
    {
        let c = match conditions.iter().position(|c| c.type_ == kind) {
            Some(i) => &mut conditions[i],
            None => {
                conditions.push(NodeCondition {
                    type_: kind.into(),
                    status: "Unknown".into(),
                    ..Default::default()
                });
                let last = conditions.len() - 1;
                &mut conditions[last]
            }
        };
        c.last_heartbeat_time = Some(time.clone());
        let (want, reason, msg, event) = if pressure.contains(&kind) {
            ("True", true_reason, true_msg, true_event)
        } else {
            ("False", false_reason, false_msg, false_event)
        };
        if c.status != want {
            c.status = want.into();
            c.reason = Some(reason.into());
            c.message = Some(msg.into());
            c.last_transition_time = Some(time.clone());
            events.push((event, false));
        }
    }
    // Ready (upstream `ReadyCondition`).
    let mut ready = if inputs.not_ready.is_empty() {
        NodeCondition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: Some("KubeletReady".into()),
            message: Some("kubelet is posting ready status".into()),
            last_heartbeat_time: Some(time.clone()),
            ..Default::default()
        }
    } else {
        NodeCondition {
            type_: "Ready".into(),
            status: "False".into(),
            reason: Some("KubeletNotReady".into()),
            message: Some(aggregate(inputs.not_ready)),
            last_heartbeat_time: Some(time.clone()),
            ..Default::default()
        }
    };
    match conditions.iter_mut().find(|c| c.type_ == "Ready") {
        Some(old) => {
            if old.status == ready.status {
                ready.last_transition_time = old.last_transition_time.clone();
            } else {
                ready.last_transition_time = Some(time);
                events.push(if ready.status == "True" {
                    ("NodeReady", false)
                } else {
                    ("NodeNotReady", false)
                });
            }
            *old = ready;
        }
        None => {
            ready.last_transition_time = Some(time);
            conditions.push(ready);
        }
    }
    events
}

/// The pressure conditions: (type, (reason, message, event) when True, … when False).
type Wording = (&'static str, &'static str, &'static str);
const PRESSURE: [(&str, Wording, Wording); 3] = [
    (
        "MemoryPressure",
        (
            "KubeletHasInsufficientMemory",
            "kubelet has insufficient memory available",
            "NodeHasInsufficientMemory",
        ),
        (
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
            "NodeHasSufficientMemory",
        ),
    ),
    (
        "DiskPressure",
        (
            "KubeletHasDiskPressure",
            "kubelet has disk pressure",
            "NodeHasDiskPressure",
        ),
        (
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure",
            "NodeHasNoDiskPressure",
        ),
    ),
    (
        "PIDPressure",
        (
            "KubeletHasInsufficientPID",
            "kubelet has insufficient PID available",
            "NodeHasInsufficientPID",
        ),
        (
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
            "NodeHasSufficientPID",
        ),
    ),
];

/// Go's `errors.NewAggregate(errs).Error()`: one message alone, several in brackets.
fn aggregate(errs: &[String]) -> String {
    match errs {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// The Node a registration creates (upstream `initialNode`, no cloud provider): the
/// default labels, `--node-labels`, the attach/detach annotation, the taints; its
/// status is then set by [`set_node_status`].
pub(crate) fn initial_node(s: &NodeSettings) -> Node {
    let arch = super::machine::go_arch();
    let mut labels = BTreeMap::new();
    labels.insert("kubernetes.io/hostname".to_string(), s.node_name.clone());
    labels.insert("kubernetes.io/os".to_string(), "linux".to_string());
    labels.insert("kubernetes.io/arch".to_string(), arch.to_string());
    labels.insert("beta.kubernetes.io/os".to_string(), "linux".to_string());
    labels.insert("beta.kubernetes.io/arch".to_string(), arch.to_string());
    for (k, v) in &s.labels {
        if let Some(old) = labels.get(k).filter(|old| *old != v) {
            log::warn!("--node-labels overrides the kubelet's label {k}={old} with {v}");
        }
        labels.insert(k.clone(), v.clone());
    }
    let mut annotations = BTreeMap::new();
    annotations.insert(CONTROLLER_MANAGED_ATTACH.to_string(), "true".to_string());
    let taints: Vec<Taint> = s
        .taints
        .iter()
        .map(|t| Taint {
            key: t.key.clone(),
            value: (!t.value.is_empty()).then(|| t.value.clone()),
            effect: t.effect.clone(),
            time_added: None,
        })
        .collect();
    Node {
        metadata: ObjectMeta {
            name: Some(s.node_name.clone()),
            labels: Some(labels),
            annotations: Some(annotations),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints: (!taints.is_empty()).then_some(taints),
            ..Default::default()
        }),
        status: None,
    }
}

/// Upstream `reconcileCMADAnnotationWithExistingNode` and `updateDefaultLabels`: makes
/// `existing`'s attach/detach annotation and default labels those of `initial`;
/// returns whether anything changed. `--node-labels` are not reconciled (as upstream).
pub(crate) fn reconcile_existing(initial: &Node, existing: &mut Node) -> bool {
    let mut changed = false;
    let want = initial
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CONTROLLER_MANAGED_ATTACH));
    let annotations = existing
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new);
    if annotations.get(CONTROLLER_MANAGED_ATTACH) != want {
        match want {
            Some(v) => annotations.insert(CONTROLLER_MANAGED_ATTACH.into(), v.clone()),
            None => annotations.remove(CONTROLLER_MANAGED_ATTACH),
        };
        changed = true;
    }
    let initial_labels = initial.metadata.labels.clone().unwrap_or_default();
    let labels = existing.metadata.labels.get_or_insert_with(BTreeMap::new);
    for key in DEFAULT_LABELS {
        let Some(want) = initial_labels.get(*key) else {
            continue;
        };
        if labels.get(*key) != Some(want) {
            labels.insert((*key).to_string(), want.clone());
            changed = true;
        }
        if labels.get(*key).is_some_and(String::is_empty) {
            labels.remove(*key);
        }
    }
    changed
}

/// Upstream `nodeStatusHasChanged`: anything but the conditions' heartbeat times.
pub(crate) fn status_changed(old: Option<&NodeStatus>, new: Option<&NodeStatus>) -> bool {
    let strip = |s: Option<&NodeStatus>| {
        let mut v = base::json::to_value(&s).unwrap_or_default();
        if let Some(cs) = v.get_mut("conditions").and_then(|c| c.as_array_mut()) {
            for c in cs {
                if let Some(m) = c.as_object_mut() {
                    m.remove("lastHeartbeatTime");
                }
            }
        }
        v
    };
    strip(old) != strip(new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn machine() -> MachineInfo {
        MachineInfo {
            cpus: 2,
            memory_bytes: 8025760 * 1024,
            ephemeral_storage_bytes: Some(100 * 1024 * 1024 * 1024 + 1),
            hugepages: vec![(2 * 1024 * 1024, 4), (1024 * 1024 * 1024, 0)],
            machine_id: "m".into(),
            system_uuid: String::new(),
            boot_id: "b".into(),
            kernel_version: "6.1.0".into(),
            os_image: "Debian GNU/Linux 12 (bookworm)".into(),
        }
    }

    fn settings() -> NodeSettings {
        NodeSettings {
            node_name: "n1".into(),
            node_ip: "10.0.0.5".into(),
            port: 10250,
            max_pods: 110,
            max_images: 50,
            ..Default::default()
        }
    }

    fn cond<'a>(n: &'a Node, t: &str) -> &'a NodeCondition {
        n.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == t))
            .expect("condition")
    }

    #[test]
    fn quantities_are_canonical() {
        for (n, want) in [
            (0, "0"),
            (512, "512"),
            (1000, "1k"),
            (1024, "1Ki"),
            (8025760 * 1024, "8025760Ki"),
            (2 * 1024 * 1024, "2Mi"),
            (1 << 30, "1Gi"),
            (94630179190, "94630179190"),
        ] {
            assert_eq!(binary_si(n), want, "{n}");
        }
        assert_eq!(decimal_si(110), "110");
        assert_eq!(decimal_si(2), "2");
    }

    #[test]
    fn allocatable_is_capacity_less_eviction_and_hugepages() {
        let none = BTreeMap::new();
        let (cap, alloc) = capacity(&machine(), 110, &none);
        let q = |m: &BTreeMap<String, Quantity>, k: &str| m[k].0.clone();
        assert_eq!(q(&cap, "cpu"), "2");
        assert_eq!(q(&alloc, "cpu"), "2");
        assert_eq!(q(&cap, "memory"), "8025760Ki");
        // 8025760Ki - 100Mi - 4 × 2Mi hugepages.
        assert_eq!(
            q(&alloc, "memory"),
            format!("{}Ki", 8025760 - 102400 - 8192)
        );
        assert_eq!(q(&cap, "pods"), "110");
        assert_eq!(q(&cap, "hugepages-2Mi"), "8Mi");
        assert_eq!(q(&cap, "hugepages-1Gi"), "0");
        let fs = 100u64 * 1024 * 1024 * 1024 + 1;
        assert_eq!(q(&cap, "ephemeral-storage"), fs.to_string());
        let reserved = (fs as f64 * 0.1) as u64;
        assert_eq!(q(&alloc, "ephemeral-storage"), (fs - reserved).to_string());
        // Never below zero.
        let tiny = MachineInfo {
            memory_bytes: 1024,
            ..machine()
        };
        assert_eq!(capacity(&tiny, 1, &none).1["memory"].0, "0");

        // Kube and system reserved come out too.
        let mut s = settings();
        s.reserve(&[
            ("cpu".into(), "100m".into()),
            ("memory".into(), "1Gi".into()),
        ]);
        s.reserve(&[
            ("cpu".into(), "0.2".into()),
            ("ephemeral-storage".into(), "1Gi".into()),
        ]);
        let (cap, alloc) = capacity(&machine(), 110, &s.reserved);
        assert_eq!(q(&cap, "cpu"), "2");
        assert_eq!(q(&alloc, "cpu"), "1700m");
        assert_eq!(
            q(&alloc, "memory"),
            format!("{}Ki", 8025760 - 1024 * 1024 - 102400 - 8192)
        );
        assert_eq!(
            q(&alloc, "ephemeral-storage"),
            (fs - (1 << 30) - reserved).to_string()
        );
        // More reserved than there is: zero.
        s.reserve(&[("cpu".into(), "5".into())]);
        assert_eq!(capacity(&machine(), 110, &s.reserved).1["cpu"].0, "0");
    }

    #[test]
    fn conditions_start_sufficient_and_ready_flips_with_its_transition_time() {
        let s = settings();
        let m = machine();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let inputs = |not_ready: &'static [String]| Inputs {
            settings: &s,
            machine: &m,
            runtime_version: Some("docker://20.10.24"),
            images: Some(&[]),
            not_ready,
        };
        let mut node = initial_node(&s);
        let ev = set_node_status(&mut node, &inputs(&[]), t0);
        assert_eq!(
            ev,
            [
                ("NodeHasSufficientMemory", false),
                ("NodeHasNoDiskPressure", false),
                ("NodeHasSufficientPID", false)
            ]
        );
        let types: Vec<&str> = node
            .status
            .as_ref()
            .expect("ok")
            .conditions
            .as_ref()
            .expect("ok")
            .iter()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(
            types,
            ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
        );
        let r = cond(&node, "Ready");
        assert_eq!(
            (r.status.as_str(), r.reason.as_deref()),
            ("True", Some("KubeletReady"))
        );
        assert_eq!(
            r.message.as_deref(),
            Some("kubelet is posting ready status")
        );
        let mp = cond(&node, "MemoryPressure");
        assert_eq!(mp.reason.as_deref(), Some("KubeletHasSufficientMemory"));
        assert_eq!(
            mp.message.as_deref(),
            Some("kubelet has sufficient memory available")
        );

        // Same status later: heartbeats move, transitions stay, no events.
        let t1 = t0 + Duration::from_secs(10);
        let before = node.status.clone();
        assert!(set_node_status(&mut node, &inputs(&[]), t1).is_empty());
        assert_eq!(
            cond(&node, "Ready").last_transition_time,
            Some(base::time::k8s_time(t0))
        );
        assert_eq!(
            cond(&node, "Ready").last_heartbeat_time,
            Some(base::time::k8s_time(t1))
        );
        assert!(!status_changed(before.as_ref(), node.status.as_ref()));

        // Runtime down and PLEG unhealthy: NotReady with both reasons, one event.
        let t2 = t1 + Duration::from_secs(10);
        let errs = vec![
            "container runtime is down".to_string(),
            "PLEG is not healthy: pleg was last seen active 3m0s ago; threshold is 3m0s".into(),
        ];
        let i = Inputs {
            not_ready: &errs,
            runtime_version: None,
            ..inputs(&[])
        };
        let before = node.status.clone();
        assert_eq!(
            set_node_status(&mut node, &i, t2),
            [("NodeNotReady", false)]
        );
        let r = cond(&node, "Ready");
        assert_eq!(
            (r.status.as_str(), r.reason.as_deref()),
            ("False", Some("KubeletNotReady"))
        );
        assert_eq!(
            r.message.as_deref(),
            Some("[container runtime is down, PLEG is not healthy: pleg was last seen active 3m0s ago; threshold is 3m0s]")
        );
        assert_eq!(r.last_transition_time, Some(base::time::k8s_time(t2)));
        assert!(status_changed(before.as_ref(), node.status.as_ref()));
        assert_eq!(
            node.status
                .as_ref()
                .expect("ok")
                .node_info
                .as_ref()
                .expect("ok")
                .container_runtime_version,
            "docker://Unknown"
        );
        let one = vec!["container runtime is down".to_string()];
        let i = Inputs {
            not_ready: &one,
            ..inputs(&[])
        };
        assert!(set_node_status(&mut node, &i, t2).is_empty());
        assert_eq!(
            cond(&node, "Ready").message.as_deref(),
            Some("container runtime is down")
        );
        // Back: NodeReady.
        assert_eq!(
            set_node_status(&mut node, &inputs(&[]), t2),
            [("NodeReady", false)]
        );
    }

    #[test]
    fn pressure_conditions_follow_the_eviction_manager() {
        use crate::eviction::{api::Condition, PressureState};
        let mut s = settings();
        let state = std::sync::Arc::new(PressureState::default());
        s.pressure = Some(std::sync::Arc::clone(&state));
        let m = machine();
        let inputs = Inputs {
            settings: &s,
            machine: &m,
            runtime_version: None,
            images: None,
            not_ready: &[],
        };
        let mut node = initial_node(&s);
        set_node_status(&mut node, &inputs, SystemTime::UNIX_EPOCH);
        state.set(vec![Condition::DiskPressure]);
        let events = set_node_status(&mut node, &inputs, SystemTime::UNIX_EPOCH);
        assert_eq!(events, [("NodeHasDiskPressure", false)]);
        let conds = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .expect("conditions");
        let disk = conds
            .iter()
            .find(|c| c.type_ == "DiskPressure")
            .expect("disk");
        assert_eq!(disk.status, "True");
        assert_eq!(disk.reason.as_deref(), Some("KubeletHasDiskPressure"));
        assert_eq!(disk.message.as_deref(), Some("kubelet has disk pressure"));
        let mem = conds
            .iter()
            .find(|c| c.type_ == "MemoryPressure")
            .expect("mem");
        assert_eq!(mem.status, "False");
        state.set(vec![]);
        let events = set_node_status(&mut node, &inputs, SystemTime::UNIX_EPOCH);
        assert_eq!(events, [("NodeHasNoDiskPressure", false)]);
    }

    #[test]
    fn the_runtime_version_names_the_runtime_and_keeps_its_name_while_it_is_down() {
        let (s, m) = (settings(), machine());
        let mut node = initial_node(&s);
        let version = |node: &Node| {
            node.status
                .as_ref()
                .and_then(|st| st.node_info.as_ref())
                .map(|i| i.container_runtime_version.clone())
        };
        let inputs = |v| Inputs {
            settings: &s,
            machine: &m,
            runtime_version: v,
            images: None,
            not_ready: &[],
        };
        set_node_status(&mut node, &inputs(None), SystemTime::UNIX_EPOCH);
        assert_eq!(version(&node).as_deref(), Some("docker://Unknown"));
        set_node_status(
            &mut node,
            &inputs(Some("containerd://1.6.20")),
            SystemTime::UNIX_EPOCH,
        );
        assert_eq!(version(&node).as_deref(), Some("containerd://1.6.20"));
        set_node_status(&mut node, &inputs(None), SystemTime::UNIX_EPOCH);
        assert_eq!(version(&node).as_deref(), Some("containerd://Unknown"));
    }

    #[test]
    fn node_info_addresses_and_endpoint() {
        let s = settings();
        let m = machine();
        let mut node = initial_node(&s);
        let inputs = Inputs {
            settings: &s,
            machine: &m,
            runtime_version: Some("docker://20.10.24+dfsg1"),
            images: None,
            not_ready: &[],
        };
        set_node_status(&mut node, &inputs, SystemTime::UNIX_EPOCH);
        let st = node.status.expect("ok");
        let info = st.node_info.expect("ok");
        assert_eq!(info.container_runtime_version, "docker://20.10.24+dfsg1");
        assert_eq!(info.kubelet_version, KUBELET_VERSION);
        assert!(KUBELET_VERSION.starts_with("v1.32.0-rkubelet."));
        assert_eq!(info.operating_system, "linux");
        assert_eq!(info.os_image, "Debian GNU/Linux 12 (bookworm)");
        let addrs: Vec<(String, String)> = st
            .addresses
            .expect("ok")
            .into_iter()
            .map(|a| (a.type_, a.address))
            .collect();
        assert_eq!(
            addrs,
            [
                ("InternalIP".into(), "10.0.0.5".into()),
                ("Hostname".into(), "n1".into())
            ]
        );
        assert_eq!(
            st.daemon_endpoints
                .expect("ok")
                .kubelet_endpoint
                .expect("ok")
                .port,
            10250
        );
        assert_eq!(st.images, None);
    }

    #[test]
    fn images_are_largest_first_with_digests_then_tags() {
        let img = |id: &str, size: i64, tags: &[&str], digests: &[&str]| ImageDetails {
            id: id.into(),
            size,
            repo_tags: tags.iter().map(|s| s.to_string()).collect(),
            repo_digests: digests.iter().map(|s| s.to_string()).collect(),
            entrypoint: vec![],
            cmd: vec![],
            user: String::new(),
            stop_signal: String::new(),
        };
        let list = vec![
            img("a", 10, &["small:1"], &[]),
            img("b", 30, &["big:1", "big:latest"], &["big@sha256:x"]),
            img("c", 20, &["<none>:<none>"], &[]),
            img("d", 25, &["t1", "t2", "t3", "t4", "t5", "t6"], &[]),
        ];
        let out = images(&list, 2);
        assert_eq!(out.len(), 2);
        assert_eq!(
            out[0].names.as_deref().expect("ok"),
            ["big@sha256:x", "big:1", "big:latest"]
        );
        assert_eq!(out[0].size_bytes, Some(30));
        assert_eq!(out[1].names.as_ref().expect("ok").len(), 5);
        // -1: all with a name.
        assert_eq!(images(&list, -1).len(), 3);
        assert!(images(&list, 0).is_empty());
    }

    #[test]
    fn registration_labels_taints_and_reconcile() {
        let mut s = settings();
        s.labels = vec![("example.com/role".into(), "edge".into())];
        s.taints = vec![crate::config::values::Taint {
            key: "dedicated".into(),
            value: "x".into(),
            effect: "NoSchedule".into(),
        }];
        let n = initial_node(&s);
        let labels = n.metadata.labels.clone().expect("ok");
        assert_eq!(labels["kubernetes.io/hostname"], "n1");
        assert_eq!(labels["kubernetes.io/os"], "linux");
        assert_eq!(
            labels["beta.kubernetes.io/arch"],
            super::super::machine::go_arch()
        );
        assert_eq!(labels["example.com/role"], "edge");
        let taints = n.spec.as_ref().expect("ok").taints.clone().expect("ok");
        assert_eq!(
            (taints[0].key.as_str(), taints[0].effect.as_str()),
            ("dedicated", "NoSchedule")
        );
        assert_eq!(
            n.metadata.annotations.as_ref().expect("ok")[CONTROLLER_MANAGED_ATTACH],
            "true"
        );

        // An existing node with an old hostname label and no annotation is reconciled;
        // its other labels stay.
        let mut existing = Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                labels: Some(BTreeMap::from([
                    ("kubernetes.io/hostname".to_string(), "old".to_string()),
                    ("team".to_string(), "a".to_string()),
                ])),
                ..Default::default()
            },
            ..Default::default()
        };
        assert!(reconcile_existing(&n, &mut existing));
        let l = existing.metadata.labels.clone().expect("ok");
        assert_eq!(l["kubernetes.io/hostname"], "n1");
        assert_eq!(l["kubernetes.io/arch"], super::super::machine::go_arch());
        assert_eq!(l["team"], "a");
        assert!(!l.contains_key("example.com/role"));
        assert!(!reconcile_existing(&n, &mut existing));
    }
}
