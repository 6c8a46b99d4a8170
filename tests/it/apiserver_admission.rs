//! What the stand-in API server does to a pod a client creates, besides storing it:
//! minimal validation, the v1 defaults a kubelet reads (`pkg/apis/core/v1/defaults.go`)
//! and, when switched on ([`super::TestApiServer::set_service_account_admission`]),
//! the ServiceAccount admission plugin (`plugin/pkg/admission/serviceaccount`): the
//! pod runs as `default` unless it names an account, and unless
//! `automountServiceAccountToken` is false it gets the projected `kube-api-access-*`
//! volume (a 3607 s token, `kube-root-ca.crt`'s `ca.crt`, the namespace) mounted
//! read-only at `/var/run/secrets/kubernetes.io/serviceaccount` in every container.
//! With the switch on, every namespace also gets what the controllers make: the
//! `default` ServiceAccount and the `kube-root-ca.crt` ConfigMap (the test CA).
//!
//! Where it is not faithful: validation checks only that there are containers with a
//! name and an image; defaulting covers the fields below (not probes' thresholds,
//! ports' protocol, volumes' default modes …); the admission plugin does not refuse a
//! pod whose service account does not exist, nor check its secrets and
//! `imagePullSecrets`; no other admission plugin runs (no LimitRanger, no
//! PodSecurity, no DefaultTolerationSeconds).

use serde_json::{json, Value};

/// Where the service account volume is mounted.
pub const SA_MOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Checks a pod a client creates: the 422 message, if refused.
pub fn validate_pod(pod: &Value) -> Result<(), String> {
    let containers = pod["spec"]["containers"].as_array();
    if containers.is_none_or(|c| c.is_empty()) {
        return Err("spec.containers: Required value".into());
    }
    for (i, c) in containers.into_iter().flatten().enumerate() {
        if c["name"].as_str().unwrap_or_default().is_empty() {
            return Err(format!("spec.containers[{i}].name: Required value"));
        }
        if c["image"].as_str().unwrap_or_default().is_empty() {
            return Err(format!("spec.containers[{i}].image: Required value"));
        }
    }
    Ok(())
}

fn default(v: &mut Value, key: &str, value: Value) {
    if v[key].is_null() {
        v[key] = value;
    }
}

/// The v1 defaults of a pod's spec and containers.
pub fn default_pod(pod: &mut Value) {
    let spec = &mut pod["spec"];
    default(spec, "restartPolicy", json!("Always"));
    default(spec, "dnsPolicy", json!("ClusterFirst"));
    default(spec, "terminationGracePeriodSeconds", json!(30));
    default(spec, "schedulerName", json!("default-scheduler"));
    default(spec, "securityContext", json!({}));
    default(spec, "enableServiceLinks", json!(true));
    default(spec, "priority", json!(0));
    for list in ["initContainers", "containers"] {
        if let Some(cs) = spec[list].as_array_mut() {
            for c in cs {
                default(c, "terminationMessagePath", json!("/dev/termination-log"));
                default(c, "terminationMessagePolicy", json!("File"));
                default(c, "resources", json!({}));
                let image = c["image"].as_str().unwrap_or_default();
                // A tag is what follows the last ':' after the last '/'.
                let tag = image
                    .rsplit('/')
                    .next()
                    .and_then(|last| last.split_once(':'))
                    .map(|(_, t)| t.split('@').next().unwrap_or_default().to_string());
                let policy = if image.contains('@') {
                    "IfNotPresent"
                } else {
                    match tag.as_deref() {
                        None | Some("latest") => "Always",
                        Some(_) => "IfNotPresent",
                    }
                };
                default(c, "imagePullPolicy", json!(policy));
            }
        }
    }
}

/// The ServiceAccount admission plugin; `suffix` names the volume
/// (`kube-api-access-<suffix>`).
pub fn service_account(pod: &mut Value, suffix: &str) {
    let spec = &mut pod["spec"];
    if spec["serviceAccountName"]
        .as_str()
        .unwrap_or_default()
        .is_empty()
    {
        spec["serviceAccountName"] = json!("default");
    }
    if spec["automountServiceAccountToken"] == false {
        return;
    }
    let mounted = ["initContainers", "containers"].iter().any(|l| {
        spec[*l].as_array().into_iter().flatten().any(|c| {
            c["volumeMounts"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|m| m["mountPath"] == SA_MOUNT)
        })
    });
    if mounted {
        return;
    }
    let name = format!("kube-api-access-{suffix}");
    let volume = json!({"name": name, "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace",
            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}});
    match spec["volumes"].as_array_mut() {
        Some(v) => v.push(volume),
        None => spec["volumes"] = json!([volume]),
    }
    let mount = json!({"name": name, "readOnly": true, "mountPath": SA_MOUNT});
    for list in ["initContainers", "containers"] {
        if let Some(cs) = spec[list].as_array_mut() {
            for c in cs {
                match c["volumeMounts"].as_array_mut() {
                    Some(m) => m.push(mount.clone()),
                    None => c["volumeMounts"] = json!([mount.clone()]),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    // The benches that include this file compile it without its #[test] functions.
    #[allow(unused_imports)]
    use super::*;

    #[test]
    fn defaults_and_the_service_account_volume() {
        let mut pod = json!({"spec": {"containers": [
            {"name": "a", "image": "busybox"},
            {"name": "b", "image": "reg:5000/x/y:1.0"},
            {"name": "c", "image": "x@sha256:00"}]}});
        assert!(validate_pod(&pod).is_ok());
        default_pod(&mut pod);
        let policies: Vec<&str> = pod["spec"]["containers"]
            .as_array()
            .expect("containers")
            .iter()
            .map(|c| c["imagePullPolicy"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(policies, ["Always", "IfNotPresent", "IfNotPresent"]);
        assert_eq!(pod["spec"]["restartPolicy"], "Always");
        assert_eq!(pod["spec"]["terminationGracePeriodSeconds"], 30);
        service_account(&mut pod, "abcde");
        assert_eq!(pod["spec"]["serviceAccountName"], "default");
        assert_eq!(pod["spec"]["volumes"][0]["name"], "kube-api-access-abcde");
        assert_eq!(
            pod["spec"]["containers"][2]["volumeMounts"][0]["mountPath"],
            SA_MOUNT
        );
        let mut off = json!({"spec": {"automountServiceAccountToken": false,
            "serviceAccountName": "app", "containers": [{"name": "a", "image": "i:1"}]}});
        service_account(&mut off, "x");
        assert!(off["spec"]["volumes"].is_null());
        assert_eq!(off["spec"]["serviceAccountName"], "app");
        assert!(validate_pod(&json!({"spec": {"containers": []}})).is_err());
        assert!(validate_pod(&json!({"spec": {"containers": [{"name": "a"}]}})).is_err());
    }
}
