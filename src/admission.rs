//! Pod admission (upstream `pkg/kubelet/lifecycle/predicate.go`, `canAdmitPod` with
//! the scheduler's `AdmissionCheck`): whether a new pod fits beside the pods already
//! admitted. Pure arithmetic over the node's allocatable, labels and taints; the sync
//! loop calls it for each added pod, oldest first. The reasons and messages are
//! upstream's: `OutOfcpu`/`OutOfmemory`/`OutOfephemeral-storage`/`OutOfpods` ("Node
//! didn't have enough resource: …"), `NodeAffinity` (nodeSelector and required node
//! affinity), `NodeName`, `NodePorts`, `TaintToleration` (NoExecute only),
//! `PodOSSelectorNodeLabelDoesNotMatch`, `PodOSNotSupported`. Critical pods (static and
//! mirror pods, system priorities) are admitted whatever their resources (upstream
//! preempts other pods for them; nothing is preempted here).
//!
//! Other checks run first through [`AdmitHandler`]s (upstream's admit handler list:
//! the eviction manager's admission under pressure goes there).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, Pod, Toleration};

use crate::cm::resources::pod_requests;

/// Upstream `SystemCriticalPriority`: pods at or above it are critical.
pub(crate) const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;
/// The node's OS (upstream `runtime.GOOS`).
pub(crate) const NODE_OS: &str = "linux";

/// Why a pod was not admitted: the status's reason, and its message (the status says
/// `Pod was rejected: <message>`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Rejection {
    /// `OutOfcpu`, `NodePorts` …
    pub reason: String,
    /// Upstream's message.
    pub message: String,
}

impl Rejection {
    fn predicate(name: &str, desc: &str) -> Rejection {
        Rejection {
            reason: name.into(),
            message: format!("Predicate {name} failed: {desc}"),
        }
    }
}

/// One more admission check, run before the resource fit (upstream's
/// `PodAdmitHandler`; the eviction manager's admission under pressure is one).
pub(crate) trait AdmitHandler: Send + Sync {
    /// None admits; `others` are the pods admitted before.
    fn admit(&self, pod: &Pod, others: &[&Pod]) -> Option<Rejection>;
}

/// A node taint (the `--register-with-taints` ones).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct NodeTaint {
    /// Key.
    pub key: String,
    /// Value.
    pub value: String,
    /// Effect.
    pub effect: String,
}

/// What admission knows of the node.
#[derive(Clone, Debug, Default)]
pub(crate) struct NodeInfo {
    /// The node's name.
    pub name: String,
    /// Its labels (`kubernetes.io/hostname`, `kubernetes.io/os`, `--node-labels` …).
    pub labels: BTreeMap<String, String>,
    /// Its taints.
    pub taints: Vec<NodeTaint>,
    /// Allocatable cpu in milli-units.
    pub cpu_milli: i128,
    /// Allocatable memory in bytes.
    pub memory: i128,
    /// Allocatable ephemeral storage in bytes (None: unknown, not checked).
    pub ephemeral_storage: Option<i128>,
    /// `--max-pods`.
    pub pods: i128,
}

/// Is the pod critical (upstream `IsCriticalPod`): static, mirror, or a system
/// priority.
pub(crate) fn is_critical(pod: &Pod) -> bool {
    runtime::container::is_static_pod(pod)
        || pod
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"))
        || pod
            .spec
            .as_ref()
            .and_then(|s| s.priority)
            .is_some_and(|p| p >= SYSTEM_CRITICAL_PRIORITY)
}

/// Upstream `canAdmitPod`: the extra handlers, then the general predicates, then the
/// OS checks. `others` are the admitted, non-terminal pods.
pub(crate) fn can_admit(
    pod: &Pod,
    others: &[&Pod],
    node: &NodeInfo,
    handlers: &[Box<dyn AdmitHandler>],
) -> Result<(), Rejection> {
    for h in handlers {
        if let Some(r) = h.admit(pod, others) {
            return Err(r);
        }
    }
    let mut reasons = Vec::new();
    let mut insufficient = fits(pod, others, node);
    // Critical pods are admitted whatever they need (upstream preempts for them).
    if is_critical(pod) {
        insufficient.clear();
    }
    reasons.extend(insufficient);
    if !matches_node_selector(pod, node) {
        reasons.push(Rejection::predicate(
            "NodeAffinity",
            "node(s) didn't match Pod's node affinity/selector",
        ));
    }
    let node_name = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
    if node_name.is_some_and(|n| !n.is_empty() && n != node.name) {
        reasons.push(Rejection::predicate(
            "NodeName",
            "node(s) didn't match the requested node name",
        ));
    }
    if !ports_fit(pod, others) {
        reasons.push(Rejection::predicate(
            "NodePorts",
            "node(s) didn't have free ports for the requested pod ports",
        ));
    }
    if !runtime::container::is_static_pod(pod) && untolerated_no_execute(pod, node) {
        reasons.push(Rejection::predicate(
            "TaintToleration",
            "node(s) had taints that the pod didn't tolerate",
        ));
    }
    // Upstream returns the first reason only.
    if let Some(r) = reasons.into_iter().next() {
        return Err(r);
    }
    let node_os = node
        .labels
        .get("kubernetes.io/os")
        .map_or(NODE_OS, String::as_str);
    if pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("kubernetes.io/os"))
        .is_some_and(|os| os != node_os)
    {
        return Err(Rejection {
            reason: "PodOSSelectorNodeLabelDoesNotMatch".into(),
            message: "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"
                .into(),
        });
    }
    if pod
        .spec
        .as_ref()
        .and_then(|s| s.os.as_ref())
        .is_some_and(|os| os.name != NODE_OS)
    {
        return Err(Rejection {
            reason: "PodOSNotSupported".into(),
            message: "Failed to admit pod as the OS field doesn't match node OS".into(),
        });
    }
    Ok(())
}

fn insufficient(resource: &str, requested: i128, used: i128, capacity: i128) -> Rejection {
    Rejection {
        reason: format!("OutOf{resource}"),
        message: format!(
            "Node didn't have enough resource: {resource}, requested: {requested}, used: {used}, capacity: {capacity}"
        ),
    }
}

/// Upstream `noderesources.Fits`: pods, then cpu, memory and ephemeral storage
/// requested against allocatable less what the other pods request.
fn fits(pod: &Pod, others: &[&Pod], node: &NodeInfo) -> Vec<Rejection> {
    let mut out = Vec::new();
    let count = i128::try_from(others.len()).unwrap_or(i128::MAX);
    if count + 1 > node.pods {
        out.push(insufficient("pods", 1, count, node.pods));
    }
    let want = pod_requests(pod);
    let mut used: BTreeMap<String, i128> = BTreeMap::new();
    for p in others {
        for (k, v) in pod_requests(p) {
            let e = used.entry(k).or_insert(0);
            *e = e.saturating_add(v);
        }
    }
    // (resource, divisor from milli-units, allocatable)
    let mut checks = vec![("cpu", 1, node.cpu_milli), ("memory", 1000, node.memory)];
    if let Some(e) = node.ephemeral_storage {
        checks.push(("ephemeral-storage", 1000, e));
    }
    for (name, div, alloc) in checks {
        let req = want.get(name).copied().unwrap_or(0);
        if req <= 0 {
            continue;
        }
        let round = |v: i128| (v + div - 1) / div;
        let (req, used) = (round(req), round(used.get(name).copied().unwrap_or(0)));
        if req > alloc - used {
            out.push(insufficient(name, req, used, alloc));
        }
    }
    out
}

/// The pod's host ports: (host IP, protocol, port).
fn host_ports(pod: &Pod) -> Vec<(String, String, i32)> {
    let Some(spec) = &pod.spec else {
        return Vec::new();
    };
    spec.containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let port = p.host_port.filter(|h| *h > 0).or_else(|| {
                // With the host's network the container port is the host port.
                (spec.host_network == Some(true)).then_some(p.container_port)
            })?;
            let ip = p
                .host_ip
                .clone()
                .filter(|i| !i.is_empty())
                .unwrap_or_else(|| "0.0.0.0".into());
            let proto = p.protocol.clone().unwrap_or_else(|| "TCP".into());
            Some((ip, proto, port))
        })
        .collect()
}

/// Upstream `nodeports.Fits`: no host port of the pod is taken by another pod (the
/// same protocol and port, and the same IP or either one the wildcard).
fn ports_fit(pod: &Pod, others: &[&Pod]) -> bool {
    let want = host_ports(pod);
    if want.is_empty() {
        return true;
    }
    let taken: Vec<_> = others.iter().flat_map(|p| host_ports(p)).collect();
    !want.iter().any(|(ip, proto, port)| {
        taken.iter().any(|(tip, tproto, tport)| {
            tport == port && tproto == proto && (ip == tip || ip == "0.0.0.0" || tip == "0.0.0.0")
        })
    })
}

/// `nodeSelector` and required node affinity against the node's labels and name.
fn matches_node_selector(pod: &Pod, node: &NodeInfo) -> bool {
    let Some(spec) = &pod.spec else {
        return true;
    };
    if let Some(sel) = &spec.node_selector {
        if !sel.iter().all(|(k, v)| node.labels.get(k) == Some(v)) {
            return false;
        }
    }
    let Some(required) = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
    else {
        return true;
    };
    // Terms are ORed; an empty term matches nothing.
    required.node_selector_terms.iter().any(|t| {
        let exprs = t.match_expressions.as_deref().unwrap_or_default();
        let fields = t.match_fields.as_deref().unwrap_or_default();
        if exprs.is_empty() && fields.is_empty() {
            return false;
        }
        exprs
            .iter()
            .all(|r| requirement_matches(r, node.labels.get(&r.key).map(String::as_str)))
            && fields.iter().all(|r| {
                r.key == "metadata.name" && requirement_matches(r, Some(node.name.as_str()))
            })
    })
}

fn requirement_matches(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(v), [x]) = (value.and_then(|v| v.parse::<i64>().ok()), values) else {
                return false;
            };
            let Ok(x) = x.parse::<i64>() else {
                return false;
            };
            if r.operator == "Gt" {
                v > x
            } else {
                v < x
            }
        }
        _ => false,
    }
}

fn tolerates(t: &Toleration, taint: &NodeTaint) -> bool {
    if t.effect
        .as_deref()
        .is_some_and(|e| !e.is_empty() && e != taint.effect)
    {
        return false;
    }
    let key = t.key.as_deref().unwrap_or_default();
    match t.operator.as_deref().unwrap_or("Equal") {
        "Exists" => key.is_empty() || key == taint.key,
        _ => key == taint.key && t.value.as_deref().unwrap_or_default() == taint.value,
    }
}

/// A NoExecute taint the pod does not tolerate (the kubelet looks at no other).
fn untolerated_no_execute(pod: &Pod, node: &NodeInfo) -> bool {
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default();
    node.taints
        .iter()
        .filter(|t| t.effect == "NoExecute")
        .any(|taint| !tolerations.iter().any(|t| tolerates(t, taint)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Affinity, Container, ContainerPort, NodeAffinity, NodeSelector, NodeSelectorTerm, PodOS,
        PodSpec, ResourceRequirements,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn node() -> NodeInfo {
        NodeInfo {
            name: "n1".into(),
            labels: [
                ("kubernetes.io/hostname".to_string(), "n1".to_string()),
                ("kubernetes.io/os".to_string(), "linux".to_string()),
                ("disk".to_string(), "ssd".to_string()),
            ]
            .into(),
            taints: Vec::new(),
            cpu_milli: 2000,
            memory: 1 << 30,
            ephemeral_storage: None,
            pods: 3,
        }
    }

    fn pod(name: &str, cpu: &str, memory: &str) -> Pod {
        let mut req = BTreeMap::new();
        if !cpu.is_empty() {
            req.insert("cpu".to_string(), Quantity(cpu.into()));
        }
        if !memory.is_empty() {
            req.insert("memory".to_string(), Quantity(memory.into()));
        }
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    resources: Some(ResourceRequirements {
                        requests: Some(req),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn with_port(mut p: Pod, port: i32, ip: &str) -> Pod {
        p.spec.as_mut().expect("test pod").containers[0].ports = Some(vec![ContainerPort {
            container_port: 80,
            host_port: Some(port),
            host_ip: (!ip.is_empty()).then(|| ip.to_string()),
            ..Default::default()
        }]);
        p
    }

    fn static_pod(mut p: Pod) -> Pod {
        p.metadata.annotations = Some(
            [(
                "kubernetes.io/config.source".to_string(),
                "file".to_string(),
            )]
            .into(),
        );
        p
    }

    #[test]
    fn resources_are_checked_against_allocatable_less_the_admitted() {
        let n = node();
        let a = pod("a", "1500m", "512Mi");
        assert_eq!(can_admit(&a, &[], &n, &[]), Ok(()));
        let b = pod("b", "600m", "");
        assert_eq!(
            can_admit(&b, &[&a], &n, &[]),
            Err(Rejection {
                reason: "OutOfcpu".into(),
                message: "Node didn't have enough resource: cpu, requested: 600, used: 1500, capacity: 2000".into(),
            })
        );
        let c = pod("c", "", "600Mi");
        let r = can_admit(&c, &[&a], &n, &[]).expect_err("rejected");
        assert_eq!(r.reason, "OutOfmemory");
        assert_eq!(
            r.message,
            format!(
                "Node didn't have enough resource: memory, requested: {}, used: {}, capacity: {}",
                600 << 20,
                512 << 20,
                1 << 30
            )
        );
        // A static pod is critical: admitted anyway.
        assert_eq!(can_admit(&static_pod(c), &[&a], &n, &[]), Ok(()));
        // BestEffort pods only count.
        let e = pod("e", "", "");
        assert_eq!(can_admit(&e, &[&a, &a], &n, &[]), Ok(()));
        let r = can_admit(&e, &[&a, &a, &a], &n, &[]).expect_err("rejected");
        assert_eq!(r.reason, "OutOfpods");
        assert_eq!(
            r.message,
            "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3"
        );
    }

    #[test]
    fn host_ports_conflict_by_protocol_port_and_ip() {
        let n = node();
        let a = with_port(pod("a", "", ""), 8080, "");
        let b = with_port(pod("b", "", ""), 8080, "127.0.0.1");
        let r = can_admit(&b, &[&a], &n, &[]).expect_err("rejected");
        assert_eq!(r.reason, "NodePorts");
        assert_eq!(
            r.message,
            "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
        );
        let c = with_port(pod("c", "", ""), 8081, "");
        assert_eq!(can_admit(&c, &[&a], &n, &[]), Ok(()));
        let d = with_port(pod("d", "", ""), 8082, "10.0.0.1");
        let e = with_port(pod("e", "", ""), 8082, "10.0.0.2");
        assert_eq!(can_admit(&e, &[&d], &n, &[]), Ok(()));
    }

    #[test]
    fn selectors_affinity_node_name_taints_and_os() {
        let n = node();
        let mut p = pod("p", "", "");
        p.spec.as_mut().expect("test pod").node_selector =
            Some([("disk".to_string(), "hdd".to_string())].into());
        assert_eq!(
            can_admit(&p, &[], &n, &[]).expect_err("rejected").reason,
            "NodeAffinity"
        );
        p.spec.as_mut().expect("test pod").node_selector =
            Some([("disk".to_string(), "ssd".to_string())].into());
        assert_eq!(can_admit(&p, &[], &n, &[]), Ok(()));
        let term = |op: &str, vals: &[&str]| NodeSelectorTerm {
            match_expressions: Some(vec![NodeSelectorRequirement {
                key: "disk".into(),
                operator: op.into(),
                values: Some(vals.iter().map(|v| v.to_string()).collect()),
            }]),
            ..Default::default()
        };
        p.spec.as_mut().expect("test pod").affinity = Some(Affinity {
            node_affinity: Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                    node_selector_terms: vec![term("In", &["nvme"]), term("NotIn", &["ssd"])],
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        let r = can_admit(&p, &[], &n, &[]).expect_err("rejected");
        assert_eq!(
            r.message,
            "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"
        );
        p.spec
            .as_mut()
            .expect("test pod")
            .affinity
            .as_mut()
            .expect("test pod")
            .node_affinity
            .as_mut()
            .expect("test pod")
            .required_during_scheduling_ignored_during_execution
            .as_mut()
            .expect("test pod")
            .node_selector_terms
            .push(term("Exists", &[]));
        assert_eq!(can_admit(&p, &[], &n, &[]), Ok(()));

        let mut q = pod("q", "", "");
        q.spec.as_mut().expect("test pod").node_name = Some("other".into());
        assert_eq!(
            can_admit(&q, &[], &n, &[]).expect_err("rejected").reason,
            "NodeName"
        );

        let mut tainted = node();
        tainted.taints.push(NodeTaint {
            key: "k".into(),
            value: "v".into(),
            effect: "NoExecute".into(),
        });
        let t = pod("t", "", "");
        assert_eq!(
            can_admit(&t, &[], &tainted, &[])
                .expect_err("rejected")
                .reason,
            "TaintToleration"
        );
        assert_eq!(
            can_admit(&static_pod(t.clone()), &[], &tainted, &[]),
            Ok(())
        );
        let mut tol = t.clone();
        tol.spec.as_mut().expect("test pod").tolerations = Some(vec![Toleration {
            key: Some("k".into()),
            operator: Some("Exists".into()),
            ..Default::default()
        }]);
        assert_eq!(can_admit(&tol, &[], &tainted, &[]), Ok(()));

        let mut w = pod("w", "", "");
        w.spec.as_mut().expect("test pod").os = Some(PodOS {
            name: "windows".into(),
        });
        assert_eq!(
            can_admit(&w, &[], &n, &[]).expect_err("rejected").reason,
            "PodOSNotSupported"
        );
        let mut l = pod("l", "", "");
        l.metadata.labels = Some([("kubernetes.io/os".to_string(), "windows".to_string())].into());
        assert_eq!(
            can_admit(&l, &[], &n, &[]).expect_err("rejected").reason,
            "PodOSSelectorNodeLabelDoesNotMatch"
        );
    }

    struct Pressure;
    impl AdmitHandler for Pressure {
        fn admit(&self, _: &Pod, _: &[&Pod]) -> Option<Rejection> {
            Some(Rejection {
                reason: "Evicted".into(),
                message: "The node had condition: [DiskPressure]. ".into(),
            })
        }
    }

    #[test]
    fn extra_handlers_run_first() {
        let handlers: Vec<Box<dyn AdmitHandler>> = vec![Box::new(Pressure)];
        let r = can_admit(&pod("p", "", ""), &[], &node(), &handlers).expect_err("rejected");
        assert_eq!(r.reason, "Evicted");
    }
}
