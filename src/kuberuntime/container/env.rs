//! A container's environment (upstream `makeEnvironmentVariables` and
//! `ExpandContainerCommandAndArgs`), from the pod, the container, what the node
//! knows (pod and host IPs, allocatable resources) and the ConfigMaps and Secrets the
//! container references.
//!
//! `envFrom` comes first (each ConfigMap or Secret's keys, with the prefix; keys that
//! are not variable names are skipped with upstream's `InvalidEnvironmentVariableNames`
//! event), then `env` in declaration order: a `value` may reference (`$(NAME)`) the
//! variables declared before it; `valueFrom` resolves the downward API (`fieldRef`,
//! `resourceFieldRef`, in `container::downward`) and `configMapKeyRef` /
//! `secretKeyRef` (with `optional`). A missing object or key fails the container with
//! upstream's message. Objects come from the [`ObjectManager`], which reads each
//! at most once per sync through its cache.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Container, EnvVar, Pod, Secret};

use crate::objects::{ObjectError, ObjectManager};
use runtime::container::expansion::{expand, mapping_for};

use runtime::container::downward::{field_ref_value, resource_field_value, NodeFacts};

/// The objects one environment read, so each is asked for once.
struct Objects<'a> {
    manager: &'a ObjectManager,
    namespace: &'a str,
    config_maps: HashMap<String, Arc<ConfigMap>>,
    secrets: HashMap<String, Arc<Secret>>,
}

impl Objects<'_> {
    fn config_map(&mut self, name: &str) -> Result<Arc<ConfigMap>, ObjectError> {
        if let Some(c) = self.config_maps.get(name) {
            return Ok(c.clone());
        }
        let c = self.manager.config_map(self.namespace, name)?;
        self.config_maps.insert(name.to_string(), c.clone());
        Ok(c)
    }

    fn secret(&mut self, name: &str) -> Result<Arc<Secret>, ObjectError> {
        if let Some(s) = self.secrets.get(name) {
            return Ok(s.clone());
        }
        let s = self.manager.secret(self.namespace, name)?;
        self.secrets.insert(name.to_string(), s.clone());
        Ok(s)
    }
}

/// A lookup's error as the container's waiting message; a missing object that is
/// `optional` is no error (None).
fn missing<T>(r: Result<T, ObjectError>, optional: bool) -> Result<Option<T>, String> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.is_not_found() && optional => Ok(None),
        // Upstream's words for a kubelet without an API client.
        Err(ObjectError::NoClient { kind, object }) => Err(format!(
            "couldn't get {} {object}, no kubeClient defined",
            match kind {
                crate::objects::Kind::ConfigMap => "configMap",
                _ => "secret",
            }
        )),
        Err(e) => Err(e.message()),
    }
}

/// The environment of `c`, in declaration order (a name declared twice keeps its
/// first position and its last value). Err is the message of a
/// `CreateContainerConfigError`, worded as upstream.
pub(crate) fn make_environment(
    pod: &Pod,
    c: &Container,
    node: &NodeFacts,
    objects: &ObjectManager,
) -> Result<Vec<(String, String)>, String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    let mut objs = Objects {
        manager: objects,
        namespace: ns,
        config_maps: HashMap::new(),
        secrets: HashMap::new(),
    };
    let mut order: Vec<String> = Vec::new();
    let mut values: HashMap<String, String> = HashMap::new();
    fn set(order: &mut Vec<String>, values: &mut HashMap<String, String>, k: String, v: String) {
        if !values.contains_key(&k) {
            order.push(k.clone());
        }
        values.insert(k, v);
    }
    for from in c.env_from.iter().flatten() {
        let prefix = from.prefix.as_deref().unwrap_or_default();
        let (kind, name, pairs) = if let Some(r) = &from.config_map_ref {
            let Some(cm) = missing(objs.config_map(&r.name), r.optional == Some(true))? else {
                continue;
            };
            let pairs: Vec<(String, String)> = cm
                .data
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            ("configMap", &r.name, pairs)
        } else if let Some(r) = &from.secret_ref {
            let Some(s) = missing(objs.secret(&r.name), r.optional == Some(true))? else {
                continue;
            };
            let pairs: Vec<(String, String)> = s
                .data
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned()))
                .collect();
            ("secret", &r.name, pairs)
        } else {
            continue;
        };
        let mut invalid = Vec::new();
        for (k, v) in pairs {
            let k = format!("{prefix}{k}");
            if !crate::validation::names::is_relaxed_env_var_name(&k).is_empty() {
                invalid.push(k);
                continue;
            }
            set(&mut order, &mut values, k, v);
        }
        if !invalid.is_empty() {
            base::sort::sort(&mut invalid);
            crate::record::event(
                pod,
                None,
                true,
                "InvalidEnvironmentVariableNames",
                &format!(
                    "Keys [{}] from the EnvFrom {kind} {ns}/{name} were skipped since they are considered invalid environment variable names.",
                    invalid.join(", ")
                ),
            );
        }
    }
    for e in c.env.iter().flatten() {
        let Some(value) = env_value(pod, c, e, &values, node, &mut objs)? else {
            continue;
        };
        set(&mut order, &mut values, e.name.clone(), value);
    }
    Ok(order
        .into_iter()
        .map(|k| {
            let v = values.remove(&k).unwrap_or_default();
            (k, v)
        })
        .collect())
}

/// One variable's value; None when it is skipped (an optional reference to a missing
/// object or key).
fn env_value(
    pod: &Pod,
    c: &Container,
    e: &EnvVar,
    defined: &HashMap<String, String>,
    node: &NodeFacts,
    objs: &mut Objects<'_>,
) -> Result<Option<String>, String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    if let Some(v) = e.value.as_deref().filter(|v| !v.is_empty()) {
        let maps = [defined];
        return Ok(Some(expand(v, &mut mapping_for(&maps))));
    }
    let Some(from) = &e.value_from else {
        return Ok(Some(String::new()));
    };
    if let Some(f) = &from.field_ref {
        return field_ref_value(pod, f, node).map(Some);
    }
    if let Some(r) = &from.resource_field_ref {
        return resource_field_value(pod, c, r, node).map(Some);
    }
    if let Some(r) = &from.config_map_key_ref {
        let optional = r.optional == Some(true);
        let Some(cm) = missing(objs.config_map(&r.name), optional)? else {
            return Ok(None);
        };
        return match cm.data.as_ref().and_then(|d| d.get(&r.key)) {
            Some(v) => Ok(Some(v.clone())),
            None if optional => Ok(None),
            None => Err(format!(
                "couldn't find key {} in ConfigMap {ns}/{}",
                r.key, r.name
            )),
        };
    }
    if let Some(r) = &from.secret_key_ref {
        let optional = r.optional == Some(true);
        let Some(s) = missing(objs.secret(&r.name), optional)? else {
            return Ok(None);
        };
        return match s.data.as_ref().and_then(|d| d.get(&r.key)) {
            Some(v) => Ok(Some(String::from_utf8_lossy(&v.0).into_owned())),
            None if optional => Ok(None),
            None => Err(format!(
                "couldn't find key {} in Secret {ns}/{}",
                r.key, r.name
            )),
        };
    }
    Ok(Some(String::new()))
}

/// `command` and `args` with `$(VAR)` expanded from the container's environment
/// (upstream `ExpandContainerCommandAndArgs`). An empty list is "not set".
pub(crate) fn expand_command_and_args(
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
        ConfigMapKeySelector, EnvFromSource, EnvVarSource, ObjectFieldSelector, PodSpec,
        ResourceFieldSelector, SecretEnvSource,
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
        let e = make_environment(&pod(), &c, &node(), &ObjectManager::new(None)).expect("env");
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
            make_environment(&pod(), &c, &node(), &ObjectManager::new(None)),
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
            make_environment(&pod(), &c, &node(), &ObjectManager::new(None)),
            Err("couldn't get secret prod/s, no kubeClient defined".into())
        );
    }

    fn objects() -> ObjectManager {
        use crate::objects::fake::{config_map, secret, FakeFetcher};
        let f = FakeFetcher::default();
        base::loops::lock(&f.config_maps).insert(
            "prod/cm".into(),
            config_map(&[("A", "from-cm"), ("B", "b"), ("bad=key", "x")]),
        );
        base::loops::lock(&f.secrets).insert(
            "prod/s".into(),
            secret(&[("PASS", "hunter2"), ("A", "from-secret")]),
        );
        ObjectManager::new(Some(Arc::new(f)))
    }

    fn key_ref(cm: bool, name: &str, key: &str, optional: bool) -> EnvVarSource {
        let optional = Some(optional);
        if cm {
            EnvVarSource {
                config_map_key_ref: Some(ConfigMapKeySelector {
                    name: name.into(),
                    key: key.into(),
                    optional,
                }),
                ..Default::default()
            }
        } else {
            EnvVarSource {
                secret_key_ref: Some(k8s_openapi::api::core::v1::SecretKeySelector {
                    name: name.into(),
                    key: key.into(),
                    optional,
                }),
                ..Default::default()
            }
        }
    }

    #[test]
    fn env_from_and_key_refs_resolve_with_env_winning() {
        let from = |cm: bool, name: &str, prefix: Option<&str>, optional: bool| EnvFromSource {
            config_map_ref: cm.then(|| k8s_openapi::api::core::v1::ConfigMapEnvSource {
                name: name.into(),
                optional: Some(optional),
            }),
            secret_ref: (!cm).then(|| SecretEnvSource {
                name: name.into(),
                optional: Some(optional),
            }),
            prefix: prefix.map(str::to_string),
        };
        let var = |name: &str, src: EnvVarSource| EnvVar {
            name: name.into(),
            value: None,
            value_from: Some(src),
        };
        let c = Container {
            name: "c".into(),
            env_from: Some(vec![
                from(true, "cm", None, false),
                from(false, "s", Some("S_"), false),
                from(true, "gone", None, true),
            ]),
            env: Some(vec![
                var("B", key_ref(false, "s", "PASS", false)),
                var("OPT", key_ref(true, "cm", "nope", true)),
                var("OPT2", key_ref(true, "gone", "k", true)),
                env("C", "$(B)"),
            ]),
            ..Default::default()
        };
        let e = make_environment(&pod(), &c, &node(), &objects()).expect("env");
        let got: Vec<(&str, &str)> = e.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            got,
            vec![
                ("A", "from-cm"),
                ("B", "hunter2"),
                ("S_A", "from-secret"),
                ("S_PASS", "hunter2"),
                ("C", "hunter2"),
            ]
        );
    }

    #[test]
    fn missing_objects_and_keys_fail_with_upstreams_messages() {
        let one = |src: EnvVarSource| Container {
            name: "c".into(),
            env: Some(vec![EnvVar {
                name: "X".into(),
                value: None,
                value_from: Some(src),
            }]),
            ..Default::default()
        };
        let objs = objects();
        let run = |c: &Container| make_environment(&pod(), c, &node(), &objs);
        assert_eq!(
            run(&one(key_ref(true, "cm", "nope", false))),
            Err("couldn't find key nope in ConfigMap prod/cm".into())
        );
        assert_eq!(
            run(&one(key_ref(false, "s", "nope", false))),
            Err("couldn't find key nope in Secret prod/s".into())
        );
        assert_eq!(
            run(&one(key_ref(true, "gone", "k", false))),
            Err("configmap \"gone\" not found".into())
        );
        assert_eq!(
            run(&one(key_ref(false, "gone", "k", false))),
            Err("secret \"gone\" not found".into())
        );
    }
}
