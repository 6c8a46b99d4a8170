//! Upstream's rules for the volumes whose files come from the API or the pod
//! (`validateConfigMapVolumeSource`, `validateSecretVolumeSource`,
//! `validateDownwardAPIVolumeSource`, `validateProjectedVolumeSource` and what they
//! call): object names given, modes within 0–0777, item keys given, item paths
//! relative, without `..` and not starting with `..`, downward API fields from the
//! set a volume may read, a projected token lasting 10 minutes to 2^32 seconds, no
//! path twice in one projected volume. Field paths and messages are upstream's,
//! its quirks included (downward API items are not indexed). Also the rules of
//! env's references to the same objects (`validateEnvVarValueFrom`'s source count,
//! `validateConfigMapKeySelector` / `validateSecretKeySelector`, `ValidateEnvFrom`).

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Container, DownwardAPIVolumeFile, KeyToPath, Volume};

use super::field::{ErrorList, FieldError, Path};
use super::names::{is_dns1123_subdomain, is_relaxed_env_var_name, max_len_error, regex_error};
use super::validate_local_descending_path;

/// Upstream `IsConfigMapKey` (Secret keys too).
pub(super) fn is_config_map_key(key: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if key.len() > 253 {
        errs.push(max_len_error(253));
    }
    let valid = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
    if !valid {
        errs.push(regex_error(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
            "[-._a-zA-Z0-9]+",
            &["key.name", "KEY_NAME", "key-name"],
        ));
    }
    match key {
        "." => errs.push("must not be '.'".into()),
        ".." => errs.push("must not be '..'".into()),
        k if k.starts_with("..") => errs.push("must not start with '..'".into()),
        _ => {}
    }
    errs
}

/// A ConfigMap or Secret key selector: a DNS subdomain name and a valid key.
fn key_selector(name: &str, key: &str, path: &Path, errs: &mut ErrorList) {
    for msg in is_dns1123_subdomain(name) {
        errs.push(FieldError::invalid(&path.child("name"), name, &msg));
    }
    if key.is_empty() {
        errs.push(FieldError::required(&path.child("key"), ""));
    } else {
        for msg in is_config_map_key(key) {
            errs.push(FieldError::invalid(&path.child("key"), key, &msg));
        }
    }
}

/// The object references of a container's env (`path` is the container's): each
/// `valueFrom` has exactly one source and none beside a `value`; key selectors and
/// `envFrom` name their objects and keys properly.
pub(super) fn validate_env_sources(c: &Container, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    for (i, e) in c.env.iter().flatten().enumerate() {
        let Some(from) = &e.value_from else { continue };
        let p = path.child("env").index(i).child("valueFrom");
        let mut sources = 0;
        sources += usize::from(from.field_ref.is_some());
        sources += usize::from(from.resource_field_ref.is_some());
        if let Some(r) = &from.config_map_key_ref {
            sources += 1;
            key_selector(&r.name, &r.key, &p.child("configMapKeyRef"), &mut errs);
        }
        if let Some(r) = &from.secret_key_ref {
            sources += 1;
            key_selector(&r.name, &r.key, &p.child("secretKeyRef"), &mut errs);
        }
        if sources == 0 {
            errs.push(FieldError::invalid(
                &p,
                "",
                "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`",
            ));
        } else if !e.value.as_deref().unwrap_or_default().is_empty() {
            errs.push(FieldError::invalid(
                &p,
                "",
                "may not be specified when `value` is not empty",
            ));
        } else if sources > 1 {
            errs.push(FieldError::invalid(
                &p,
                "",
                "may not have more than one field specified at a time",
            ));
        }
    }
    for (i, f) in c.env_from.iter().flatten().enumerate() {
        let p = path.child("envFrom").index(i);
        if let Some(prefix) = f.prefix.as_deref().filter(|x| !x.is_empty()) {
            for msg in is_relaxed_env_var_name(prefix) {
                errs.push(FieldError::invalid(&p.child("prefix"), prefix, &msg));
            }
        }
        let mut sources = 0;
        if let Some(r) = &f.config_map_ref {
            sources += 1;
            for msg in is_dns1123_subdomain(&r.name) {
                errs.push(FieldError::invalid(
                    &p.child("configMapRef").child("name"),
                    &r.name,
                    &msg,
                ));
            }
        }
        if let Some(r) = &f.secret_ref {
            sources += 1;
            for msg in is_dns1123_subdomain(&r.name) {
                errs.push(FieldError::invalid(
                    &p.child("secretRef").child("name"),
                    &r.name,
                    &msg,
                ));
            }
        }
        if sources == 0 {
            errs.push(FieldError::invalid(
                &p,
                "",
                "must specify one of: `configMapRef` or `secretRef`",
            ));
        } else if sources > 1 {
            errs.push(FieldError::invalid(
                &p,
                "",
                "may not have more than one field specified at a time",
            ));
        }
    }
    errs
}

/// Upstream `fileModeErrorMsg`.
const FILE_MODE: &str = "must be a number between 0 and 0777 (octal), both inclusive";
/// The fields a downwardAPI volume file may hold (`validVolumeDownwardAPIFieldPathExpressions`).
const VOLUME_FIELDS: [&str; 5] = [
    "metadata.annotations",
    "metadata.labels",
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
];
/// The resources a downwardAPI file may report (`validContainerResourceFieldPathExpressions`).
const RESOURCES: [&str; 6] = [
    "limits.cpu",
    "limits.ephemeral-storage",
    "limits.memory",
    "requests.cpu",
    "requests.ephemeral-storage",
    "requests.memory",
];

fn mode(m: Option<i32>, path: &Path, errs: &mut ErrorList) {
    if let Some(m) = m.filter(|m| !(0..=0o777).contains(m)) {
        errs.push(FieldError::invalid(path, m, FILE_MODE));
    }
}

/// `ValidateLocalNonReservedPath`.
fn local_non_reserved(target: &str, path: &Path) -> ErrorList {
    let mut errs = validate_local_descending_path(target, path);
    if target.starts_with("..") && !target.starts_with("../") {
        errs.push(FieldError::invalid(
            path,
            target,
            "must not start with '..'",
        ));
    }
    errs
}

/// `validateKeyToPath`.
fn key_to_path(kp: &KeyToPath, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    if kp.key.is_empty() {
        errs.push(FieldError::required(&path.child("key"), ""));
    }
    if kp.path.is_empty() {
        errs.push(FieldError::required(&path.child("path"), ""));
    }
    errs.extend(local_non_reserved(&kp.path, &path.child("path")));
    mode(kp.mode, &path.child("mode"), &mut errs);
    errs
}

/// `validateDownwardAPIVolumeFile` (`path` is the volume's or source's, unindexed as
/// upstream's).
fn downward_file(file: &DownwardAPIVolumeFile, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    if file.path.is_empty() {
        errs.push(FieldError::required(&path.child("path"), ""));
    }
    errs.extend(local_non_reserved(&file.path, &path.child("path")));
    match (&file.field_ref, &file.resource_field_ref) {
        (Some(f), r) => {
            let p = path.child("fieldRef");
            let version = f.api_version.as_deref().unwrap_or("v1");
            if version.is_empty() {
                errs.push(FieldError::required(&p.child("apiVersion"), ""));
            } else if f.field_path.is_empty() {
                errs.push(FieldError::required(&p.child("fieldPath"), ""));
            } else {
                let base = f
                    .field_path
                    .split_once("['")
                    .map_or(f.field_path.as_str(), |(b, _)| b);
                let subscript_ok = base == f.field_path
                    || (f.field_path.ends_with("']")
                        && matches!(base, "metadata.labels" | "metadata.annotations"));
                if version != "v1" {
                    errs.push(FieldError::invalid(
                        &p.child("fieldPath"),
                        &f.field_path,
                        &format!(
                            "error converting fieldPath: no conversion for apiVersion {version}"
                        ),
                    ));
                } else if !VOLUME_FIELDS.contains(&base) || !subscript_ok {
                    errs.push(FieldError::not_supported(
                        &p.child("fieldPath"),
                        &f.field_path,
                        &VOLUME_FIELDS,
                    ));
                }
            }
            if r.is_some() {
                errs.push(FieldError::invalid(
                    path,
                    "resource",
                    "fieldRef and resourceFieldRef can not be specified simultaneously",
                ));
            }
        }
        (None, Some(r)) => {
            let p = path.child("resourceFieldRef");
            if r.container_name.as_deref().unwrap_or_default().is_empty() {
                errs.push(FieldError::required(&p.child("containerName"), ""));
            }
            if r.resource.is_empty() {
                errs.push(FieldError::required(&p.child("resource"), ""));
            } else if !RESOURCES.contains(&r.resource.as_str())
                && !r.resource.starts_with("limits.hugepages-")
                && !r.resource.starts_with("requests.hugepages-")
            {
                errs.push(FieldError::not_supported(
                    &p.child("resource"),
                    &r.resource,
                    &RESOURCES,
                ));
            }
        }
        (None, None) => errs.push(FieldError::required(
            path,
            "one of fieldRef and resourceFieldRef is required",
        )),
    }
    mode(file.mode, &path.child("mode"), &mut errs);
    errs
}

/// The rules of a configMap, secret, downwardAPI or projected volume (none for
/// other types).
pub(super) fn validate_api_volume(vol: &Volume, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    if let Some(c) = &vol.config_map {
        let p = path.child("configMap");
        if c.name.is_empty() {
            errs.push(FieldError::required(&p.child("name"), ""));
        }
        mode(c.default_mode, &p.child("defaultMode"), &mut errs);
        for (i, kp) in c.items.iter().flatten().enumerate() {
            errs.extend(key_to_path(kp, &p.child("items").index(i)));
        }
    }
    if let Some(s) = &vol.secret {
        let p = path.child("secret");
        if s.secret_name.as_deref().unwrap_or_default().is_empty() {
            errs.push(FieldError::required(&p.child("secretName"), ""));
        }
        mode(s.default_mode, &p.child("defaultMode"), &mut errs);
        for (i, kp) in s.items.iter().flatten().enumerate() {
            errs.extend(key_to_path(kp, &p.child("items").index(i)));
        }
    }
    if let Some(d) = &vol.downward_api {
        let p = path.child("downwardAPI");
        mode(d.default_mode, &p.child("defaultMode"), &mut errs);
        for f in d.items.iter().flatten() {
            errs.extend(downward_file(f, &p));
        }
    }
    if let Some(proj) = &vol.projected {
        let p = path.child("projected");
        mode(proj.default_mode, &p.child("defaultMode"), &mut errs);
        let mut paths: BTreeSet<&str> = BTreeSet::new();
        for (i, src) in proj.sources.iter().flatten().enumerate() {
            let sp = p.child("sources").index(i);
            let mut kinds = 0;
            if let Some(s) = &src.secret {
                kinds += 1;
                let pp = sp.child("secret");
                if s.name.is_empty() {
                    errs.push(FieldError::required(&pp.child("name"), ""));
                }
                for (j, kp) in s.items.iter().flatten().enumerate() {
                    errs.extend(key_to_path(kp, &pp.child("items").index(j)));
                    if !kp.path.is_empty() && !paths.insert(&kp.path) {
                        errs.push(FieldError::invalid(
                            &p,
                            &s.name,
                            "conflicting duplicate paths",
                        ));
                    }
                }
            }
            if let Some(c) = &src.config_map {
                kinds += 1;
                let pp = sp.child("configMap");
                if c.name.is_empty() {
                    errs.push(FieldError::required(&pp.child("name"), ""));
                }
                for (j, kp) in c.items.iter().flatten().enumerate() {
                    errs.extend(key_to_path(kp, &pp.child("items").index(j)));
                    if !kp.path.is_empty() && !paths.insert(&kp.path) {
                        errs.push(FieldError::invalid(
                            &p,
                            &c.name,
                            "conflicting duplicate paths",
                        ));
                    }
                }
            }
            if let Some(d) = &src.downward_api {
                kinds += 1;
                let pp = sp.child("downwardAPI");
                for f in d.items.iter().flatten() {
                    errs.extend(downward_file(f, &pp));
                    if !f.path.is_empty() && !paths.insert(&f.path) {
                        errs.push(FieldError::invalid(
                            &p,
                            &f.path,
                            "conflicting duplicate paths",
                        ));
                    }
                }
            }
            if let Some(t) = &src.service_account_token {
                kinds += 1;
                let pp = sp.child("serviceAccountToken");
                let secs = t.expiration_seconds.unwrap_or(3600);
                if secs < 600 {
                    errs.push(FieldError::invalid(
                        &pp.child("expirationSeconds"),
                        secs,
                        "may not specify a duration less than 10 minutes",
                    ));
                }
                if secs > 1 << 32 {
                    errs.push(FieldError::invalid(
                        &pp.child("expirationSeconds"),
                        secs,
                        "may not specify a duration larger than 2^32 seconds",
                    ));
                }
                if t.path.is_empty() {
                    errs.push(FieldError::required(&p.child("path"), ""));
                }
            }
            if src.cluster_trust_bundle.is_some() {
                kinds += 1;
            }
            if kinds > 1 {
                errs.push(FieldError::forbidden(
                    &sp,
                    "may not specify more than 1 volume type per source",
                ));
            }
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(yaml: &str) -> Vec<String> {
        let vol: Volume = serde_norway::from_str(yaml).expect("volume");
        let p = Path::new("spec").child("volumes").index(0);
        validate_api_volume(&vol, &p)
            .0
            .into_iter()
            .map(|e| e.to_string())
            .collect()
    }

    #[test]
    fn the_kube_api_access_volume_is_valid() {
        let v = "name: kube-api-access-x\nprojected:\n  defaultMode: 420\n  sources:\n\
                 \x20 - serviceAccountToken: {expirationSeconds: 3607, path: token}\n\
                 \x20 - configMap: {name: kube-root-ca.crt, items: [{key: ca.crt, path: ca.crt}]}\n\
                 \x20 - downwardAPI: {items: [{path: namespace, fieldRef: {apiVersion: v1, fieldPath: metadata.namespace}}]}\n";
        assert_eq!(errors(v), Vec::<String>::new());
    }

    #[test]
    fn items_need_keys_and_paths_that_stay_inside() {
        assert_eq!(
            errors("name: v\nconfigMap: {name: c, defaultMode: 1000, items: [{key: '', path: ../x}, {key: k, path: ..a, mode: -1}, {key: k, path: /abs}]}"),
            vec![
                "spec.volumes[0].configMap.defaultMode: Invalid value: 1000: must be a number between 0 and 0777 (octal), both inclusive",
                "spec.volumes[0].configMap.items[0].key: Required value",
                "spec.volumes[0].configMap.items[0].path: Invalid value: \"../x\": must not contain '..'",
                "spec.volumes[0].configMap.items[1].path: Invalid value: \"..a\": must not start with '..'",
                "spec.volumes[0].configMap.items[1].mode: Invalid value: -1: must be a number between 0 and 0777 (octal), both inclusive",
                "spec.volumes[0].configMap.items[2].path: Invalid value: \"/abs\": must be a relative path",
            ]
        );
        assert_eq!(
            errors("name: v\nsecret: {}"),
            vec!["spec.volumes[0].secret.secretName: Required value"]
        );
    }

    #[test]
    fn downward_and_projected_rules() {
        assert_eq!(
            errors("name: v\ndownwardAPI: {items: [{path: a, fieldRef: {fieldPath: spec.nodeName}}, {path: b}]}"),
            vec![
                "spec.volumes[0].downwardAPI.fieldRef.fieldPath: Unsupported value: \"spec.nodeName\": supported values: \"metadata.annotations\", \"metadata.labels\", \"metadata.name\", \"metadata.namespace\", \"metadata.uid\"",
                "spec.volumes[0].downwardAPI: Required value: one of fieldRef and resourceFieldRef is required",
            ]
        );
        assert_eq!(
            errors("name: v\nprojected: {sources: [{serviceAccountToken: {expirationSeconds: 60, path: t}}, {configMap: {name: c, items: [{key: k, path: t}]}}]}"),
            vec![
                "spec.volumes[0].projected.sources[0].serviceAccountToken.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes",
            ]
        );
        assert_eq!(
            errors("name: v\nprojected: {sources: [{configMap: {name: a, items: [{key: k, path: p}]}}, {secret: {name: b, items: [{key: k, path: p}]}}]}"),
            vec!["spec.volumes[0].projected: Invalid value: \"b\": conflicting duplicate paths"]
        );
    }

    #[test]
    fn env_references_need_one_source_and_valid_keys() {
        let c: Container = serde_norway::from_str(
            "name: c\nenv:\n\
             - {name: A, valueFrom: {configMapKeyRef: {name: cm, key: 'bad key'}}}\n\
             - {name: B, value: x, valueFrom: {secretKeyRef: {name: s, key: k}}}\n\
             - {name: C, valueFrom: {}}\n\
             - {name: D, valueFrom: {secretKeyRef: {name: Bad_Name, key: ..k}}}\n\
             envFrom: [{prefix: '1=', configMapRef: {name: cm}}, {}]",
        )
        .expect("container");
        let p = Path::new("spec").child("containers").index(0);
        let got: Vec<String> = validate_env_sources(&c, &p)
            .0
            .into_iter()
            .map(|e| e.to_string())
            .collect();
        assert_eq!(got.len(), 7, "{got:#?}");
        assert!(got[0].starts_with("spec.containers[0].env[0].valueFrom.configMapKeyRef.key: Invalid value: \"bad key\": a valid config key must consist of alphanumeric characters"), "{}", got[0]);
        assert_eq!(got[1], "spec.containers[0].env[1].valueFrom: Invalid value: \"\": may not be specified when `value` is not empty");
        assert_eq!(got[2], "spec.containers[0].env[2].valueFrom: Invalid value: \"\": must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`");
        assert!(got[3].starts_with("spec.containers[0].env[3].valueFrom.secretKeyRef.name: Invalid value: \"Bad_Name\""), "{}", got[3]);
        assert_eq!(got[4], "spec.containers[0].env[3].valueFrom.secretKeyRef.key: Invalid value: \"..k\": must not start with '..'");
        assert!(
            got[5].starts_with("spec.containers[0].envFrom[0].prefix: Invalid value: \"1=\""),
            "{}",
            got[5]
        );
        assert_eq!(got[6], "spec.containers[0].envFrom[1]: Invalid value: \"\": must specify one of: `configMapRef` or `secretRef`");
    }
}
