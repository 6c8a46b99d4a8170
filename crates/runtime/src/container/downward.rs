//! The downward API's values (upstream `pkg/fieldpath` and the kubelet's
//! `podFieldSelectorRuntimeValue` / `containerResourceRuntimeValue`): a pod's fields
//! and a container's resources as strings, for env (`kuberuntime`) and for
//! `downwardAPI` volume files (`volume`), as pure functions of the pod and what the
//! node knows.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, ObjectFieldSelector, Pod, ResourceFieldSelector};

use base::quantity::parse_milli;

/// What the node contributes to the downward API.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeFacts {
    /// The pod's IPs (the node's for host-network pods), first is `status.podIP`.
    pub pod_ips: Vec<String>,
    /// The node's IPs, first is `status.hostIP`.
    pub host_ips: Vec<String>,
    /// Node allocatable CPU in millicores: the limit a container without one reports.
    pub allocatable_cpu_milli: i128,
    /// Node allocatable memory in bytes.
    pub allocatable_memory: i128,
    /// Node allocatable ephemeral storage in bytes.
    pub allocatable_ephemeral_storage: i128,
}

/// The value of a downward API `fieldRef` (upstream `ConvertDownwardAPIFieldLabel`,
/// then `podFieldSelectorRuntimeValue`, then `fieldpath.ExtractFieldPathAsString`).
pub fn field_ref_value(
    pod: &Pod,
    f: &ObjectFieldSelector,
    node: &NodeFacts,
) -> Result<String, String> {
    let version = f.api_version.as_deref().unwrap_or("v1");
    if !version.is_empty() && version != "v1" {
        return Err(format!("unsupported pod version: {version}"));
    }
    let path = f.field_path.as_str();
    let meta = &pod.metadata;
    if let Some((base, key)) = split_subscript(path) {
        return match base {
            "metadata.annotations" => Ok(meta
                .annotations
                .as_ref()
                .and_then(|m| m.get(key))
                .cloned()
                .unwrap_or_default()),
            "metadata.labels" => Ok(meta
                .labels
                .as_ref()
                .and_then(|m| m.get(key))
                .cloned()
                .unwrap_or_default()),
            _ => Err(format!("field label does not support subscript: {path}")),
        };
    }
    let spec = pod.spec.as_ref();
    match path {
        "spec.nodeName" | "spec.host" => {
            Ok(spec.and_then(|s| s.node_name.clone()).unwrap_or_default())
        }
        "spec.serviceAccountName" => Ok(spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default()),
        "status.hostIP" => Ok(node.host_ips.first().cloned().unwrap_or_default()),
        "status.hostIPs" => Ok(node.host_ips.join(",")),
        "status.podIP" => Ok(node.pod_ips.first().cloned().unwrap_or_default()),
        "status.podIPs" => Ok(node.pod_ips.join(",")),
        "metadata.annotations" => Ok(format_map(meta.annotations.as_ref())),
        "metadata.labels" => Ok(format_map(meta.labels.as_ref())),
        "metadata.name" => Ok(meta.name.clone().unwrap_or_default()),
        "metadata.namespace" => Ok(meta.namespace.clone().unwrap_or_default()),
        "metadata.uid" => Ok(meta.uid.clone().unwrap_or_default()),
        // Valid field labels the kubelet cannot resolve from a container's start.
        "spec.restartPolicy" | "spec.schedulerName" | "status.phase" => {
            Err(format!("unsupported fieldPath: {path}"))
        }
        _ => Err(format!("field label not supported: {path}")),
    }
}

/// `metadata.labels['key']` → (`metadata.labels`, `key`) (upstream
/// `SplitMaybeSubscriptedPath`).
fn split_subscript(path: &str) -> Option<(&str, &str)> {
    let inner = path.strip_suffix("']")?;
    let (base, key) = inner.split_once("['")?;
    (!base.is_empty()).then_some((base, key))
}

/// Upstream `fieldpath.FormatMap`: `key="value"` lines sorted by key, values quoted
/// as Go's `%q` does.
fn format_map(m: Option<&BTreeMap<String, String>>) -> String {
    m.into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", base::goquote::go_quote(v)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A container's requests with the API's defaulting applied: a resource with a limit
/// and no request requests its limit (`SetDefaults_Pod`). Values in milli-units.
pub fn effective_requests(c: &Container) -> BTreeMap<String, i128> {
    let res = c.resources.as_ref();
    let mut out: BTreeMap<String, i128> = quantities(res.and_then(|r| r.limits.as_ref()));
    out.extend(quantities(res.and_then(|r| r.requests.as_ref())));
    out
}

/// A container's limits, in milli-units.
pub fn limits(c: &Container) -> BTreeMap<String, i128> {
    quantities(c.resources.as_ref().and_then(|r| r.limits.as_ref()))
}

fn quantities(
    m: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> BTreeMap<String, i128> {
    base::sort::map(
        m.into_iter()
            .flatten()
            .filter_map(|(k, q)| parse_milli(&q.0).map(|v| (k.clone(), v))),
    )
}

/// The value of a downward API `resourceFieldRef` (upstream
/// `containerResourceRuntimeValue` after `defaultPodLimitsForDownwardAPI`): an unset
/// limit reports the node's allocatable amount; values are rounded up to whole
/// divisors.
pub fn resource_field_value(
    pod: &Pod,
    current: &Container,
    r: &ResourceFieldSelector,
    node: &NodeFacts,
) -> Result<String, String> {
    let c = match r.container_name.as_deref().filter(|n| !n.is_empty()) {
        None => current,
        Some(name) => pod
            .spec
            .iter()
            .flat_map(|s| {
                s.containers
                    .iter()
                    .chain(s.init_containers.iter().flatten())
            })
            .find(|c| c.name == name)
            .ok_or_else(|| format!("container {name} not found"))?,
    };
    let divisor = r
        .divisor
        .as_ref()
        .and_then(|d| parse_milli(&d.0))
        .filter(|d| *d != 0)
        .unwrap_or(1000);
    let lim = limits(c);
    let req = effective_requests(c);
    let (kind, value) = match r.resource.as_str() {
        "limits.cpu" => (
            Unit::Cpu,
            lim.get("cpu")
                .copied()
                .unwrap_or(node.allocatable_cpu_milli),
        ),
        "limits.memory" => (
            Unit::Bytes,
            lim.get("memory")
                .copied()
                .unwrap_or(node.allocatable_memory * 1000),
        ),
        "limits.ephemeral-storage" => (
            Unit::Bytes,
            lim.get("ephemeral-storage")
                .copied()
                .unwrap_or(node.allocatable_ephemeral_storage * 1000),
        ),
        "requests.cpu" => (Unit::Cpu, req.get("cpu").copied().unwrap_or(0)),
        "requests.memory" => (Unit::Bytes, req.get("memory").copied().unwrap_or(0)),
        "requests.ephemeral-storage" => (
            Unit::Bytes,
            req.get("ephemeral-storage").copied().unwrap_or(0),
        ),
        other => return Err(format!("unsupported container resource : {other}")),
    };
    Ok(divide_up(kind, value, divisor).to_string())
}

#[derive(Clone, Copy)]
enum Unit {
    /// Compared in millicores (`MilliValue`).
    Cpu,
    /// Compared in whole units (`Value`, rounded up).
    Bytes,
}

/// `ceil(value / divisor)`, both in milli-units, at the unit's precision.
fn divide_up(unit: Unit, value_milli: i128, divisor_milli: i128) -> i128 {
    let (v, d) = match unit {
        Unit::Cpu => (value_milli, divisor_milli),
        Unit::Bytes => (
            ceil_div(value_milli, 1000),
            ceil_div(divisor_milli, 1000).max(1),
        ),
    };
    ceil_div(v, d.max(1))
}

fn ceil_div(a: i128, b: i128) -> i128 {
    if a >= 0 {
        (a + b - 1) / b
    } else {
        a / b
    }
}
