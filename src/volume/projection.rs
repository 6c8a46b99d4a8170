//! The files of the volumes whose content comes from the API server or the pod itself
//! (upstream `pkg/volume/{configmap,secret,downwardapi,projected}`'s `MakePayload` and
//! `CollectData`): which keys become which files, with which modes, and what is an
//! error. [`make_payload`] gives a volume's whole payload; the atomic writer writes it.
//!
//! Rules as upstream: without `items` every key is a file named after it; with
//! `items` only those keys, at their `path`, a missing key failing the volume unless
//! it is `optional`; a missing object fails it unless `optional` (then it is empty);
//! modes are the item's `mode`, else `defaultMode`, else 0644. A projected volume
//! gathers its sources into one payload and reports all their errors at once.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ConfigMap, Container, DownwardAPIVolumeFile, KeyToPath, Pod, Secret,
    ServiceAccountTokenProjection, Volume,
};

use super::atomic_writer::{FileProjection, Payload};
use crate::objects::ObjectManager;
use runtime::container::downward::{field_ref_value, resource_field_value, NodeFacts};

/// The API's default mode of these volumes' files (`SetDefaults_*VolumeSource`).
pub(crate) const DEFAULT_MODE: i32 = 0o644;
/// The audience-less token lifetime the API defaults a projected token to.
pub(crate) const DEFAULT_TOKEN_SECONDS: i64 = 3600;

fn mode_of(item: Option<i32>, default_mode: Option<i32>) -> u32 {
    let m = item.or(default_mode).unwrap_or(DEFAULT_MODE);
    u32::try_from(m).unwrap_or(0o644) & 0o7777
}

/// A ConfigMap's files (upstream `configmap.MakePayload`).
pub(crate) fn config_map_payload(
    items: Option<&[KeyToPath]>,
    cm: &ConfigMap,
    default_mode: Option<i32>,
    optional: bool,
) -> Result<Payload, String> {
    let mut data: BTreeMap<&str, &[u8]> = BTreeMap::new();
    for (k, v) in cm.data.iter().flatten() {
        data.insert(k, v.as_bytes());
    }
    for (k, v) in cm.binary_data.iter().flatten() {
        data.entry(k).or_insert(&v.0);
    }
    keys_payload(
        items,
        &data,
        default_mode,
        optional,
        "configmap references non-existent config key",
    )
}

/// A Secret's files (upstream `secret.MakePayload`).
pub(crate) fn secret_payload(
    items: Option<&[KeyToPath]>,
    secret: &Secret,
    default_mode: Option<i32>,
    optional: bool,
) -> Result<Payload, String> {
    let data: BTreeMap<&str, &[u8]> = base::sort::map(
        secret
            .data
            .iter()
            .flatten()
            .map(|(k, v)| (k.as_str(), v.0.as_slice())),
    );
    keys_payload(
        items,
        &data,
        default_mode,
        optional,
        "references non-existent secret key",
    )
}

fn keys_payload(
    items: Option<&[KeyToPath]>,
    data: &BTreeMap<&str, &[u8]>,
    default_mode: Option<i32>,
    optional: bool,
    missing: &str,
) -> Result<Payload, String> {
    let mut out = Payload::new();
    match items.filter(|i| !i.is_empty()) {
        None => {
            for (k, v) in data {
                out.insert(
                    k.to_string(),
                    FileProjection {
                        data: v.to_vec(),
                        mode: mode_of(None, default_mode),
                    },
                );
            }
        }
        Some(items) => {
            for it in items {
                let Some(v) = data.get(it.key.as_str()) else {
                    if optional {
                        continue;
                    }
                    return Err(format!("{missing}: {}", it.key));
                };
                out.insert(
                    it.path.clone(),
                    FileProjection {
                        data: v.to_vec(),
                        mode: mode_of(it.mode, default_mode),
                    },
                );
            }
        }
    }
    Ok(out)
}

/// The downward API's files (upstream `downwardapi.CollectData`): each item's field
/// or resource value. Errors of all items are reported together.
pub(crate) fn downward_payload(
    items: &[DownwardAPIVolumeFile],
    pod: &Pod,
    default_mode: Option<i32>,
    facts: &NodeFacts,
) -> Result<Payload, String> {
    let mut out = Payload::new();
    let mut errs = Vec::new();
    let none = Container::default();
    for it in items {
        let value = if let Some(f) = &it.field_ref {
            field_ref_value(pod, f, facts)
        } else if let Some(r) = &it.resource_field_ref {
            resource_field_value(pod, &none, r, facts)
        } else {
            continue;
        };
        match value {
            Ok(v) => {
                out.insert(
                    it.path.clone(),
                    FileProjection {
                        data: v.into_bytes(),
                        mode: mode_of(it.mode, default_mode),
                    },
                );
            }
            Err(e) => errs.push(e),
        }
    }
    if errs.is_empty() {
        Ok(out)
    } else {
        Err(aggregate(errs))
    }
}

/// Go's `utilerrors.NewAggregate(...).Error()`: one error as itself, more in brackets.
fn aggregate(errs: Vec<String>) -> String {
    if errs.len() == 1 {
        errs.into_iter().next().unwrap_or_default()
    } else {
        format!("[{}]", errs.join(", "))
    }
}

/// What a projected `serviceAccountToken` source asks a token for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TokenSource {
    /// The pod's service account (`default` when unset).
    pub service_account: String,
    /// The audience (None: the API server's).
    pub audience: Option<String>,
    /// The lifetime asked for.
    pub expiration_seconds: i64,
}

fn token_source(pod: &Pod, t: &ServiceAccountTokenProjection) -> TokenSource {
    TokenSource {
        service_account: pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "default".into()),
        audience: t.audience.clone().filter(|a| !a.is_empty()),
        expiration_seconds: t.expiration_seconds.unwrap_or(DEFAULT_TOKEN_SECONDS),
    }
}

/// The tokens `pod`'s projected volumes ask for.
pub(crate) fn token_sources(pod: &Pod) -> Vec<TokenSource> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .flat_map(|v| v.projected.iter().flat_map(|p| p.sources.iter().flatten()))
        .filter_map(|src| src.service_account_token.as_ref())
        .map(|t| token_source(pod, t))
        .collect()
}

/// The whole payload of a configMap, secret, downwardAPI or projected volume.
pub(crate) fn make_payload(
    v: &Volume,
    pod: &Pod,
    objects: &ObjectManager,
    facts: &NodeFacts,
) -> Result<Payload, String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    if let Some(c) = &v.config_map {
        let optional = c.optional == Some(true);
        let cm = match objects.config_map(ns, &c.name) {
            Ok(cm) => cm,
            Err(e) if e.is_not_found() && optional => Default::default(),
            Err(e) => return Err(e.message()),
        };
        return config_map_payload(c.items.as_deref(), &cm, c.default_mode, optional);
    }
    if let Some(s) = &v.secret {
        let optional = s.optional == Some(true);
        let name = s.secret_name.as_deref().unwrap_or_default();
        let secret = match objects.secret(ns, name) {
            Ok(s) => s,
            Err(e) if e.is_not_found() && optional => Default::default(),
            Err(e) => return Err(e.message()),
        };
        return secret_payload(s.items.as_deref(), &secret, s.default_mode, optional);
    }
    if let Some(d) = &v.downward_api {
        return downward_payload(
            d.items.as_deref().unwrap_or_default(),
            pod,
            d.default_mode,
            facts,
        );
    }
    let Some(p) = &v.projected else {
        return Err("not a configMap, secret, downwardAPI or projected volume".into());
    };
    let mut out = Payload::new();
    let mut errs = Vec::new();
    fn add(out: &mut Payload, errs: &mut Vec<String>, r: Result<Payload, String>) {
        match r {
            Ok(files) => out.extend(files),
            Err(e) => errs.push(e),
        }
    }
    for src in p.sources.iter().flatten() {
        if let Some(c) = &src.config_map {
            let optional = c.optional == Some(true);
            let cm = match objects.config_map(ns, &c.name) {
                Ok(cm) => cm,
                Err(e) if e.is_not_found() && optional => Default::default(),
                Err(e) => {
                    errs.push(e.message());
                    continue;
                }
            };
            add(
                &mut out,
                &mut errs,
                config_map_payload(c.items.as_deref(), &cm, p.default_mode, optional),
            );
        } else if let Some(s) = &src.secret {
            let optional = s.optional == Some(true);
            let secret = match objects.secret(ns, &s.name) {
                Ok(s) => s,
                Err(e) if e.is_not_found() && optional => Default::default(),
                Err(e) => {
                    errs.push(e.message());
                    continue;
                }
            };
            add(
                &mut out,
                &mut errs,
                secret_payload(s.items.as_deref(), &secret, p.default_mode, optional),
            );
        } else if let Some(d) = &src.downward_api {
            add(
                &mut out,
                &mut errs,
                downward_payload(
                    d.items.as_deref().unwrap_or_default(),
                    pod,
                    p.default_mode,
                    facts,
                ),
            );
        } else if let Some(t) = &src.service_account_token {
            let TokenSource {
                service_account: sa,
                audience,
                expiration_seconds: seconds,
            } = token_source(pod, t);
            let audience = audience.as_deref();
            // Upstream: with an fsGroup the token is 0600, which the group's read
            // bit (added by the writer) makes 0640.
            let fs_group = pod
                .spec
                .as_ref()
                .and_then(|s| s.security_context.as_ref())
                .and_then(|sc| sc.fs_group)
                .is_some();
            let mode = if fs_group {
                0o600
            } else {
                mode_of(None, p.default_mode)
            };
            match objects.service_account_token(pod, &sa, audience, seconds) {
                Ok(token) => {
                    out.insert(
                        t.path.clone(),
                        FileProjection {
                            data: token.into_bytes(),
                            mode,
                        },
                    );
                }
                Err(e) => errs.push(e.message()),
            }
        } else if src.cluster_trust_bundle.is_some() {
            errs.push("clusterTrustBundle projections are not supported by rkubelet".into());
        }
    }
    if errs.is_empty() {
        Ok(out)
    } else {
        Err(aggregate(errs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::fake::{config_map, secret, FakeFetcher};
    use base::loops::lock;
    use std::sync::Arc;

    fn pod(yaml_volumes: &str) -> Pod {
        serde_norway::from_str(&format!(
            "metadata: {{name: web, namespace: prod, uid: u-1, labels: {{app: web}}, annotations: {{a: b}}}}\n\
             spec:\n  containers: [{{name: c, resources: {{limits: {{memory: 64Mi}}}}}}]\n  volumes:\n{yaml_volumes}"
        ))
        .expect("pod")
    }

    fn objects() -> (Arc<FakeFetcher>, ObjectManager) {
        let f = Arc::new(FakeFetcher::default());
        lock(&f.config_maps).insert(
            "prod/kube-root-ca.crt".into(),
            config_map(&[("ca.crt", "CERT")]),
        );
        lock(&f.config_maps).insert("prod/cm".into(), config_map(&[("a", "1"), ("b", "2")]));
        lock(&f.secrets).insert("prod/s".into(), secret(&[("pass", "pw")]));
        let m = ObjectManager::new(Some(f.clone() as Arc<dyn crate::objects::Fetcher>));
        (f, m)
    }

    fn payload_of(yaml: &str) -> Result<Payload, String> {
        let p = pod(yaml);
        let (_, m) = objects();
        let v = &p
            .spec
            .as_ref()
            .expect("spec")
            .volumes
            .as_ref()
            .expect("volumes")[0];
        make_payload(v, &p, &m, &NodeFacts::default())
    }

    fn summary(p: &Payload) -> Vec<(String, String, u32)> {
        p.iter()
            .map(|(k, f)| {
                (
                    k.clone(),
                    String::from_utf8_lossy(&f.data).into_owned(),
                    f.mode,
                )
            })
            .collect()
    }

    /// The volume a real API server's ServiceAccount admission injects.
    pub(super) const KUBE_API_ACCESS: &str = "  - name: kube-api-access-x7k2p
    projected:
      defaultMode: 420
      sources:
      - serviceAccountToken: {expirationSeconds: 3607, path: token}
      - configMap:
          name: kube-root-ca.crt
          items: [{key: ca.crt, path: ca.crt}]
      - downwardAPI:
          items:
          - path: namespace
            fieldRef: {apiVersion: v1, fieldPath: metadata.namespace}
";

    #[test]
    fn the_kube_api_access_volume_gives_token_ca_and_namespace() {
        let p = pod(KUBE_API_ACCESS);
        let (f, m) = objects();
        let v = &p
            .spec
            .as_ref()
            .expect("spec")
            .volumes
            .as_ref()
            .expect("volumes")[0];
        let got = make_payload(v, &p, &m, &NodeFacts::default()).expect("payload");
        assert_eq!(
            summary(&got),
            vec![
                ("ca.crt".into(), "CERT".into(), 0o644),
                ("namespace".into(), "prod".into(), 0o644),
                ("token".into(), "token-1".into(), 0o644),
            ]
        );
        assert_eq!(
            *lock(&f.calls),
            vec![
                "token prod/default".to_string(),
                "configmap prod/kube-root-ca.crt".into()
            ]
        );
        // Again: the token and the ConfigMap come from the caches.
        make_payload(v, &p, &m, &NodeFacts::default()).expect("again");
        assert_eq!(lock(&f.calls).len(), 2);
    }

    #[test]
    fn items_modes_and_optional_keys() {
        let got = payload_of(
            "  - name: v\n    configMap: {name: cm, defaultMode: 256, items: [{key: a, path: dir/a.txt}, {key: b, path: b, mode: 384}]}\n",
        )
        .expect("payload");
        assert_eq!(
            summary(&got),
            vec![
                ("b".into(), "2".into(), 0o600),
                ("dir/a.txt".into(), "1".into(), 0o400)
            ]
        );
        assert_eq!(
            payload_of("  - name: v\n    configMap: {name: cm, items: [{key: zz, path: z}]}\n"),
            Err("configmap references non-existent config key: zz".into())
        );
        assert_eq!(
            payload_of("  - name: v\n    configMap: {name: cm, optional: true, items: [{key: zz, path: z}]}\n"),
            Ok(Payload::new())
        );
        assert_eq!(
            payload_of("  - name: v\n    secret: {secretName: s, items: [{key: zz, path: z}]}\n"),
            Err("references non-existent secret key: zz".into())
        );
        assert_eq!(
            summary(&payload_of("  - name: v\n    secret: {secretName: s}\n").expect("secret")),
            vec![("pass".into(), "pw".into(), 0o644)]
        );
    }

    #[test]
    fn missing_objects_fail_unless_optional() {
        assert_eq!(
            payload_of("  - name: v\n    configMap: {name: nope}\n"),
            Err("configmap \"nope\" not found".into())
        );
        assert_eq!(
            payload_of("  - name: v\n    secret: {secretName: nope, optional: true}\n"),
            Ok(Payload::new())
        );
        assert_eq!(
            payload_of(
                "  - name: v\n    projected: {sources: [{configMap: {name: nope}}, {secret: {name: gone}}, {configMap: {name: cm, items: [{key: a, path: a}]}}]}\n"
            ),
            Err("[configmap \"nope\" not found, secret \"gone\" not found]".into())
        );
    }

    #[test]
    fn downward_api_files_hold_fields_and_resources() {
        let got = payload_of(
            "  - name: v\n    downwardAPI:\n      items:\n\
             \x20     - {path: labels, fieldRef: {fieldPath: metadata.labels}}\n\
             \x20     - {path: name, fieldRef: {fieldPath: metadata.name}, mode: 256}\n\
             \x20     - {path: mem, resourceFieldRef: {containerName: c, resource: limits.memory, divisor: 1Mi}}\n",
        )
        .expect("payload");
        assert_eq!(
            summary(&got),
            vec![
                ("labels".into(), "app=\"web\"".into(), 0o644),
                ("mem".into(), "64".into(), 0o644),
                ("name".into(), "web".into(), 0o400),
            ]
        );
    }
}
