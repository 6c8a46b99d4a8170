//! A container's environment (upstream `makeEnvironmentVariables`,
//! `podFieldSelectorRuntimeValue`, `containerResourceRuntimeValue` and
//! `ExpandContainerCommandAndArgs`), as pure functions of the pod, the container and
//! what the node knows (pod and host IPs, allocatable resources).
//!
//! Values are resolved in declaration order; a `value` may reference (`$(NAME)`) the
//! variables declared before it. `valueFrom` resolves the downward API (`fieldRef`,
//! `resourceFieldRef`). References to ConfigMaps and Secrets fail as they do on an
//! upstream kubelet without an API server: static pods may not use API objects.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{
    Container, EnvVar, ObjectFieldSelector, Pod, ResourceFieldSelector,
};

use crate::container::expansion::{expand, mapping_for};
use crate::quantity::parse_milli;

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

/// The environment of `c`, in declaration order (a name declared twice keeps its
/// first position and its last value). Err is the message of a
/// `CreateContainerConfigError`, worded as upstream.
pub fn make_environment(
    pod: &Pod,
    c: &Container,
    node: &NodeFacts,
) -> Result<Vec<(String, String)>, String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    // envFrom: every source is a ConfigMap or a Secret, which needs an API server.
    for from in c.env_from.iter().flatten() {
        if let Some(r) = &from.config_map_ref {
            return Err(format!(
                "couldn't get configMap {ns}/{}, no kubeClient defined",
                r.name
            ));
        }
        if let Some(r) = &from.secret_ref {
            return Err(format!(
                "couldn't get secret {ns}/{}, no kubeClient defined",
                r.name
            ));
        }
    }
    let mut order: Vec<String> = Vec::new();
    let mut values: HashMap<String, String> = HashMap::new();
    for e in c.env.iter().flatten() {
        let value = env_value(pod, c, e, &values, node)?;
        if !values.contains_key(&e.name) {
            order.push(e.name.clone());
        }
        values.insert(e.name.clone(), value);
    }
    Ok(order
        .into_iter()
        .map(|k| {
            let v = values.remove(&k).unwrap_or_default();
            (k, v)
        })
        .collect())
}

fn env_value(
    pod: &Pod,
    c: &Container,
    e: &EnvVar,
    defined: &HashMap<String, String>,
    node: &NodeFacts,
) -> Result<String, String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    if let Some(v) = e.value.as_deref().filter(|v| !v.is_empty()) {
        let maps = [defined];
        return Ok(expand(v, &mut mapping_for(&maps)));
    }
    let Some(from) = &e.value_from else {
        return Ok(String::new());
    };
    if let Some(f) = &from.field_ref {
        return field_ref_value(pod, f, node);
    }
    if let Some(r) = &from.resource_field_ref {
        return resource_field_value(pod, c, r, node);
    }
    if let Some(r) = &from.config_map_key_ref {
        return Err(format!(
            "couldn't get configMap {ns}/{}, no kubeClient defined",
            r.name
        ));
    }
    if let Some(r) = &from.secret_key_ref {
        return Err(format!(
            "couldn't get secret {ns}/{}, no kubeClient defined",
            r.name
        ));
    }
    Ok(String::new())
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
        .map(|(k, v)| format!("{k}={}", crate::validation::field::go_quote(v)))
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
    m.into_iter()
        .flatten()
        .filter_map(|(k, q)| parse_milli(&q.0).map(|v| (k.clone(), v)))
        .collect()
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

/// `command` and `args` with `$(VAR)` expanded from the container's environment
/// (upstream `ExpandContainerCommandAndArgs`). An empty list is "not set".
pub fn expand_command_and_args(
    c: &Container,
    env: &[(String, String)],
) -> (Option<Vec<String>>, Option<Vec<String>>) {
    let map: HashMap<String, String> = env.iter().cloned().collect();
    let maps = [&map];
    let mut mapping = mapping_for(&maps);
    let mut ex = |v: &Option<Vec<String>>| {
        v.as_ref()
            .filter(|v| !v.is_empty())
            .map(|v| v.iter().map(|s| expand(s, &mut mapping)).collect())
    };
    (ex(&c.command), ex(&c.args))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ConfigMapKeySelector, EnvFromSource, EnvVarSource, PodSpec, SecretEnvSource,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn pod() -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some("web-node1".into());
        p.metadata.namespace = Some("prod".into());
        p.metadata.uid = Some("u-1".into());
        p.metadata.labels = Some(
            [("app", "web"), ("tier", "front")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        p.metadata.annotations = Some(
            [("note", "say \"hi\"\n")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        p.spec = Some(PodSpec {
            node_name: Some("node1".into()),
            service_account_name: Some("sa".into()),
            ..Default::default()
        });
        p
    }

    fn node() -> NodeFacts {
        NodeFacts {
            pod_ips: vec!["172.17.0.5".into()],
            host_ips: vec!["10.0.0.2".into()],
            allocatable_cpu_milli: 2000,
            allocatable_memory: 1 << 30,
            allocatable_ephemeral_storage: 10 << 30,
        }
    }

    fn field(path: &str) -> Result<String, String> {
        field_ref_value(
            &pod(),
            &ObjectFieldSelector {
                api_version: None,
                field_path: path.into(),
            },
            &node(),
        )
    }

    #[test]
    fn field_refs_resolve_like_upstream() {
        let ok = [
            ("metadata.name", "web-node1"),
            ("metadata.namespace", "prod"),
            ("metadata.uid", "u-1"),
            ("metadata.labels['app']", "web"),
            ("metadata.labels['missing']", ""),
            ("metadata.annotations['note']", "say \"hi\"\n"),
            ("metadata.labels", "app=\"web\"\ntier=\"front\""),
            ("metadata.annotations", "note=\"say \\\"hi\\\"\\n\""),
            ("spec.nodeName", "node1"),
            ("spec.serviceAccountName", "sa"),
            ("status.podIP", "172.17.0.5"),
            ("status.podIPs", "172.17.0.5"),
            ("status.hostIP", "10.0.0.2"),
            ("status.hostIPs", "10.0.0.2"),
        ];
        for (path, want) in ok {
            assert_eq!(field(path).as_deref(), Ok(want), "{path}");
        }
        assert_eq!(
            field("spec.restartPolicy"),
            Err("unsupported fieldPath: spec.restartPolicy".into())
        );
        assert_eq!(
            field("metadata.generation"),
            Err("field label not supported: metadata.generation".into())
        );
        assert_eq!(
            field("metadata.name['x']"),
            Err("field label does not support subscript: metadata.name['x']".into())
        );
        let v2 = field_ref_value(
            &pod(),
            &ObjectFieldSelector {
                api_version: Some("v2".into()),
                field_path: "metadata.name".into(),
            },
            &node(),
        );
        assert_eq!(v2, Err("unsupported pod version: v2".into()));
    }

    use super::super::tests::res as with_resources;

    fn res(c: &Container, resource: &str, divisor: Option<&str>) -> Result<String, String> {
        resource_field_value(
            &pod(),
            c,
            &ResourceFieldSelector {
                container_name: None,
                divisor: divisor.map(|d| Quantity(d.into())),
                resource: resource.into(),
            },
            &node(),
        )
    }

    #[test]
    fn resource_refs_round_up_and_default_to_allocatable() {
        let c = with_resources(&[("cpu", "500m"), ("memory", "64Mi")], &[("cpu", "250m")]);
        let cases = [
            ("limits.cpu", None, "1"),
            ("limits.cpu", Some("1m"), "500"),
            ("requests.cpu", None, "1"),
            ("requests.cpu", Some("1m"), "250"),
            ("limits.memory", None, "67108864"),
            ("limits.memory", Some("1Mi"), "64"),
            ("limits.memory", Some("1M"), "68"),
            // requests default to limits
            ("requests.memory", Some("1Mi"), "64"),
        ];
        for (r, d, want) in cases {
            assert_eq!(res(&c, r, d).as_deref(), Ok(want), "{r} / {d:?}");
        }
        let bare = Container::default();
        assert_eq!(res(&bare, "limits.cpu", None).as_deref(), Ok("2"));
        assert_eq!(res(&bare, "limits.cpu", Some("1m")).as_deref(), Ok("2000"));
        assert_eq!(
            res(&bare, "limits.memory", Some("1Mi")).as_deref(),
            Ok("1024")
        );
        assert_eq!(res(&bare, "requests.cpu", None).as_deref(), Ok("0"));
        assert_eq!(
            res(&bare, "limits.nvidia.com/gpu", None),
            Err("unsupported container resource : limits.nvidia.com/gpu".into())
        );
    }

    fn env(name: &str, value: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: Some(value.into()),
            value_from: None,
        }
    }

    #[test]
    fn env_values_expand_earlier_variables_only() {
        let c = Container {
            name: "c".into(),
            env: Some(vec![
                env("A", "a"),
                env("B", "$(A)-b-$(C)"),
                env("C", "c"),
                env("D", "$$(A) $(A)"),
                env("A", "again"),
                EnvVar {
                    name: "POD".into(),
                    value: None,
                    value_from: Some(EnvVarSource {
                        field_ref: Some(ObjectFieldSelector {
                            api_version: Some("v1".into()),
                            field_path: "metadata.name".into(),
                        }),
                        ..Default::default()
                    }),
                },
                env("E", "$(POD)"),
            ]),
            command: Some(vec!["echo".into(), "$(A)".into(), "$(NOPE)".into()]),
            args: Some(vec!["$(E)".into(), "$$(E)".into()]),
            ..Default::default()
        };
        let e = make_environment(&pod(), &c, &node()).expect("env");
        assert_eq!(
            e,
            vec![
                ("A".to_string(), "again".to_string()),
                ("B".to_string(), "a-b-$(C)".to_string()),
                ("C".to_string(), "c".to_string()),
                ("D".to_string(), "$(A) a".to_string()),
                ("POD".to_string(), "web-node1".to_string()),
                ("E".to_string(), "web-node1".to_string()),
            ]
        );
        let (cmd, args) = expand_command_and_args(&c, &e);
        assert_eq!(
            cmd,
            Some(vec!["echo".into(), "again".into(), "$(NOPE)".into()])
        );
        assert_eq!(args, Some(vec!["web-node1".into(), "$(E)".into()]));
        let none = Container::default();
        assert_eq!(expand_command_and_args(&none, &e), (None, None));
    }

    #[test]
    fn api_object_references_are_config_errors() {
        let mut c = Container {
            name: "c".into(),
            env: Some(vec![EnvVar {
                name: "X".into(),
                value: None,
                value_from: Some(EnvVarSource {
                    config_map_key_ref: Some(ConfigMapKeySelector {
                        name: "cm".into(),
                        key: "k".into(),
                        optional: Some(true),
                    }),
                    ..Default::default()
                }),
            }]),
            ..Default::default()
        };
        assert_eq!(
            make_environment(&pod(), &c, &node()),
            Err("couldn't get configMap prod/cm, no kubeClient defined".into())
        );
        c.env = None;
        c.env_from = Some(vec![EnvFromSource {
            secret_ref: Some(SecretEnvSource {
                name: "s".into(),
                optional: None,
            }),
            ..Default::default()
        }]);
        assert_eq!(
            make_environment(&pod(), &c, &node()),
            Err("couldn't get secret prod/s, no kubeClient defined".into())
        );
    }
}
