//! Pod validation before admission, as upstream's `pkg/apis/core/validation`
//! (`ValidatePodCreate`, `ValidateObjectMeta`, `ValidatePodSpec` and the functions
//! they call): every pod from every source passes here before the kubelet acts on it,
//! and every problem is reported at once, with upstream's field paths and messages.
//!
//! The kubelet runs what pods say on the host: a volume name becomes a directory, a
//! grace period a timer, a port a published socket. Without this gate a name such as
//! `../../x` walks out of the pod directory and a number such as `i64::MAX` overflows
//! a deadline. The API server validates its pods too, but static pods (file, URL,
//! etcd) reach the kubelet unvalidated, and a kubelet should not trust any source.
//!
//! Deliberate differences: fields upstream defaults before it validates (protocol,
//! pull policy, restart and DNS policy, termination message policy, probe path and
//! scheme) may be empty here, as rkubelet applies those defaults where it uses them.
//! Upstream rules about objects rkubelet does not run (claims, device volumes, Windows,
//! resize, pod-level resources) are not checked.

mod container;
pub(crate) mod dns;
pub(crate) mod field;
pub(crate) mod names;
mod volumes;

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use container::{
    accumulate_unique_host_ports, validate_container, validate_probes, validate_seccomp_profile,
};
pub(crate) use field::{ErrorList, FieldError, Path};
use names::{
    inclusive_range_error, is_dns1123_label, is_dns1123_subdomain, is_qualified_name, is_valid_id,
    is_valid_label_value,
};

/// Upstream `isNegativeErrorMsg`.
const IS_NEGATIVE: &str = "must be greater than or equal to 0";
/// Upstream `TotalAnnotationSizeLimitB`: all annotation keys and values together.
const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;
/// The grace period upstream defaults to when a pod gives none.
const DEFAULT_GRACE_SECONDS: i64 = 30;
/// Upstream's quantity parse error (`resource.ErrFormatWrong`): upstream meets it while
/// decoding, rkubelet (which keeps quantities as strings) here.
const QUANTITY_FORMAT: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

/// The volume types in upstream's `validateVolumeSource` order (JSON names), so that
/// "more than 1 volume type" names the same field upstream names.
const VOLUME_TYPES: &[&str] = &[
    "hostPath",
    "emptyDir",
    "gitRepo",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "secret",
    "nfs",
    "iscsi",
    "glusterfs",
    "flexVolume",
    "cephfs",
    "cinder",
    "persistentVolumeClaim",
    "rbd",
    "quobyte",
    "downwardAPI",
    "fc",
    "azureFile",
    "vsphereVolume",
    "photonPersistentDisk",
    "projected",
    "portworxVolume",
    "azureDisk",
    "storageos",
    "scaleIO",
    "configMap",
    "csi",
    "ephemeral",
    "image",
];

/// `ValidatePodCreate`: the pod's metadata and spec. Err holds every problem.
pub(crate) fn validate_pod_create(pod: &Pod) -> Result<(), ErrorList> {
    let mut errs = validate_object_meta(&pod.metadata, &Path::new("metadata"));
    let spec_path = Path::new("spec");
    match &pod.spec {
        Some(spec) => errs.extend(validate_pod_spec(spec, &spec_path)),
        None => errs.push(FieldError::required(&spec_path.child("containers"), "")),
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs)
    }
}

/// `ValidateObjectMeta` with `ValidatePodName` and a required namespace.
pub(crate) fn validate_object_meta(meta: &ObjectMeta, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    let name = meta.name.as_deref().unwrap_or("");
    let name_path = path.child("name");
    if name.is_empty() {
        errs.push(FieldError::required(
            &name_path,
            "name or generateName is required",
        ));
    } else {
        for msg in is_dns1123_subdomain(name) {
            errs.push(FieldError::invalid(&name_path, name, &msg));
        }
    }
    let ns = meta.namespace.as_deref().unwrap_or("");
    let ns_path = path.child("namespace");
    if ns.is_empty() {
        errs.push(FieldError::required(&ns_path, ""));
    } else {
        for msg in is_dns1123_label(ns) {
            errs.push(FieldError::invalid(&ns_path, ns, &msg));
        }
    }
    let labels_path = path.child("labels");
    for (k, v) in meta.labels.iter().flatten() {
        for msg in is_qualified_name(k) {
            errs.push(FieldError::invalid(&labels_path, k, &msg));
        }
        for msg in is_valid_label_value(v) {
            errs.push(FieldError::invalid(&labels_path, v, &msg));
        }
    }
    let annotations_path = path.child("annotations");
    let mut total = 0usize;
    for (k, v) in meta.annotations.iter().flatten() {
        for msg in is_qualified_name(&k.to_lowercase()) {
            errs.push(FieldError::invalid(&annotations_path, k, &msg));
        }
        total = total.saturating_add(k.len()).saturating_add(v.len());
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        errs.push(FieldError::too_long(
            &annotations_path,
            TOTAL_ANNOTATION_SIZE_LIMIT,
        ));
    }
    errs
}

/// `ValidatePodSpec`.
pub(crate) fn validate_pod_spec(spec: &PodSpec, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    let (volumes, volume_errs) = validate_volumes(spec.volumes.as_deref().unwrap_or(&[]), path);
    errs.extend(volume_errs);
    let grace = spec
        .termination_grace_period_seconds
        .unwrap_or(DEFAULT_GRACE_SECONDS);

    // Container names are unique across app, init and ephemeral containers; upstream
    // checks app containers first, so a clash is reported on the init container.
    let mut names = BTreeSet::new();
    let mut host_ports = BTreeSet::new();
    let containers_path = path.child("containers");
    if spec.containers.is_empty() {
        errs.push(FieldError::required(&containers_path, ""));
    }
    for (i, c) in spec.containers.iter().enumerate() {
        let p = containers_path.index(i);
        errs.extend(validate_container(c, &p, &volumes, &mut names, grace));
        errs.extend(validate_probes(c, &p));
        errs.extend(accumulate_unique_host_ports(c, &p, &mut host_ports));
    }
    let init_path = path.child("initContainers");
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let p = init_path.index(i);
        errs.extend(validate_container(c, &p, &volumes, &mut names, grace));
        let sidecar = c.restart_policy.as_deref() == Some("Always");
        if let Some(rp) = c.restart_policy.as_deref().filter(|rp| *rp != "Always") {
            errs.push(FieldError::not_supported(
                &p.child("restartPolicy"),
                rp,
                &["Always"],
            ));
        }
        if sidecar {
            errs.extend(validate_probes(c, &p));
        } else {
            for (probe, field) in [
                (&c.liveness_probe, "livenessProbe"),
                (&c.readiness_probe, "readinessProbe"),
                (&c.startup_probe, "startupProbe"),
            ] {
                if probe.is_some() {
                    errs.push(FieldError::forbidden(
                        &p.child(field),
                        "may not be set for init containers without restartPolicy=Always",
                    ));
                }
            }
        }
        errs.extend(accumulate_unique_host_ports(c, &p, &mut host_ports));
    }
    let eph_path = path.child("ephemeralContainers");
    for (i, ec) in spec.ephemeral_containers.iter().flatten().enumerate() {
        let p = eph_path.index(i);
        // Same fields under another type: checked as a container, whose rules they share.
        match base::json::to_value(ec).and_then(|v| base::json::from_value::<Container>(&v)) {
            Ok(c) => errs.extend(validate_container(&c, &p, &volumes, &mut names, grace)),
            Err(e) => errs.push(FieldError::invalid(&p, "", &e.to_string())),
        }
    }

    if let Some(rp) = spec.restart_policy.as_deref() {
        let valid = ["Always", "OnFailure", "Never"];
        if !valid.contains(&rp) {
            errs.push(FieldError::not_supported(
                &path.child("restartPolicy"),
                rp,
                &valid,
            ));
        }
    }
    if let Some(dp) = spec.dns_policy.as_deref() {
        let valid = ["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"];
        if !valid.contains(&dp) {
            errs.push(FieldError::not_supported(
                &path.child("dnsPolicy"),
                dp,
                &valid,
            ));
        }
    }
    errs.extend(dns::validate_pod_dns_config(
        spec.dns_config.as_ref(),
        spec.dns_policy.as_deref(),
        &path.child("dnsConfig"),
    ));
    if let Some(g) = spec.termination_grace_period_seconds {
        if g < 0 {
            errs.push(FieldError::invalid(
                &path.child("terminationGracePeriodSeconds"),
                g,
                IS_NEGATIVE,
            ));
        }
    }
    if let Some(d) = spec.active_deadline_seconds {
        if !(1..=i64::from(i32::MAX)).contains(&d) {
            errs.push(FieldError::invalid(
                &path.child("activeDeadlineSeconds"),
                d,
                &inclusive_range_error(1, i64::from(i32::MAX)),
            ));
        }
    }
    for (value, field) in [(&spec.hostname, "hostname"), (&spec.subdomain, "subdomain")] {
        if let Some(v) = value.as_deref().filter(|v| !v.is_empty()) {
            for msg in is_dns1123_label(v) {
                errs.push(FieldError::invalid(&path.child(field), v, &msg));
            }
        }
    }
    errs.extend(dns::validate_host_aliases(
        spec.host_aliases.as_deref().unwrap_or_default(),
        &path.child("hostAliases"),
    ));
    if let Some(sc) = &spec.security_context {
        let p = path.child("securityContext");
        for (value, field) in [
            (sc.run_as_user, "runAsUser"),
            (sc.run_as_group, "runAsGroup"),
            (sc.fs_group, "fsGroup"),
        ] {
            errs.extend(validate_id(value, &p.child(field)));
        }
        for (i, g) in sc.supplemental_groups.iter().flatten().enumerate() {
            errs.extend(validate_id(
                Some(*g),
                &p.child("supplementalGroups").index(i),
            ));
        }
        errs.extend(validate_seccomp_profile(
            sc.seccomp_profile.as_ref(),
            &p.child("seccompProfile"),
        ));
        errs.extend(validate_sysctls(
            sc.sysctls.as_deref().unwrap_or_default(),
            &p.child("sysctls"),
        ));
    }
    errs
}

/// Upstream `validateSysctls`: each name given, valid (`.` or `/` separated segments,
/// at most 253 characters) and not repeated. Upstream's API server also refuses a
/// namespaced sysctl shared with the host (`ValidateHostSysctl`); here that is
/// admission's `SysctlForbidden`, as for a pod the API server let through.
fn validate_sysctls(sysctls: &[k8s_openapi::api::core::v1::Sysctl], path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    let mut names = std::collections::HashSet::new();
    for (i, s) in sysctls.iter().enumerate() {
        let p = path.index(i).child("name");
        if s.name.is_empty() {
            errs.push(FieldError::required(&p, ""));
        } else if !crate::sysctl::is_valid_name(&s.name) {
            errs.push(FieldError::invalid(
                &p,
                s.name.as_str(),
                &format!(
                    "must have at most {} characters and match regex {}",
                    crate::sysctl::MAX_LENGTH,
                    crate::sysctl::NAME_REGEX
                ),
            ));
        } else if names.contains(s.name.as_str()) {
            errs.push(FieldError::duplicate(&p, s.name.as_str()));
        }
        names.insert(s.name.as_str());
    }
    errs
}

fn validate_id(value: Option<i64>, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    if let Some(id) = value {
        for msg in is_valid_id(id) {
            errs.push(FieldError::invalid(path, id, &msg));
        }
    }
    errs
}

/// `ValidateVolumes`: names are unique DNS labels, each volume has exactly one source.
/// Returns the names, for `volumeMounts` to refer to.
fn validate_volumes(volumes: &[Volume], spec_path: &Path) -> (BTreeSet<String>, ErrorList) {
    let mut errs = ErrorList::default();
    let mut names = BTreeSet::new();
    for (i, vol) in volumes.iter().enumerate() {
        let p = spec_path.child("volumes").index(i);
        let name_path = p.child("name");
        // Upstream's order: the source, the name, then uniqueness.
        let mut el = validate_volume_source(vol, &p);
        if vol.name.is_empty() {
            el.push(FieldError::required(&name_path, ""));
        } else {
            for msg in is_dns1123_label(&vol.name) {
                el.push(FieldError::invalid(&name_path, &vol.name, &msg));
            }
        }
        if names.contains(&vol.name) {
            el.push(FieldError::duplicate(&name_path, &vol.name));
        }
        if el.is_empty() {
            names.insert(vol.name.clone());
        } else {
            // As upstream: an invalid volume is no volume, so its mounts are "not found".
            errs.extend(el);
        }
    }
    (names, errs)
}

/// `validateVolumeSource`: exactly one type, and the rules of the types rkubelet runs.
fn validate_volume_source(vol: &Volume, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    let set: BTreeSet<String> = match base::json::to_value(vol) {
        Ok(serde_json::Value::Object(m)) => base::sort::set(
            m.into_iter()
                .filter(|(k, v)| k != "name" && !v.is_null())
                .map(|(k, _)| k),
        ),
        _ => BTreeSet::new(),
    };
    let mut count = 0;
    for ty in VOLUME_TYPES.iter().filter(|t| set.contains(**t)) {
        count += 1;
        if count > 1 {
            errs.push(FieldError::forbidden(
                &path.child(ty),
                "may not specify more than 1 volume type",
            ));
        }
    }
    // No type at all is an emptyDir: upstream's decoding defaults it
    // (`SetDefaults_Volume`) before validation sees it, so "must specify a volume
    // type" cannot happen for a decoded pod.
    if let Some(hp) = &vol.host_path {
        let p = path.child("hostPath");
        if hp.path.is_empty() {
            errs.push(FieldError::required(&p.child("path"), ""));
        } else {
            errs.extend(validate_path_no_backsteps(&hp.path, &p.child("path")));
        }
        if let Some(ty) = hp.type_.as_deref() {
            let valid = [
                "",
                "BlockDevice",
                "CharDevice",
                "Directory",
                "DirectoryOrCreate",
                "File",
                "FileOrCreate",
                "Socket",
            ];
            if !valid.contains(&ty) {
                errs.push(FieldError::not_supported(&p.child("type"), ty, &valid));
            }
        }
    }
    errs.extend(volumes::validate_api_volume(vol, path));
    if let Some(ed) = &vol.empty_dir {
        let p = path.child("emptyDir");
        if let Some(m) = ed.medium.as_deref() {
            // rkubelet backs "" (disk) and Memory (tmpfs); HugePages is upstream's too.
            let valid = ["", "HugePages", "Memory"];
            if !valid.contains(&m) && !m.starts_with("HugePages-") {
                errs.push(FieldError::not_supported(&p.child("medium"), m, &valid));
            }
        }
        if let Some(limit) = &ed.size_limit {
            if base::quantity::parse_milli(&limit.0).is_none_or(|v| v < 0) {
                errs.push(FieldError::forbidden(
                    &p.child("sizeLimit"),
                    "SizeLimit field must be a valid resource quantity",
                ));
            }
        }
    }
    errs
}

/// `validateLocalDescendingPath`: relative, and no `..` element.
pub(crate) fn validate_local_descending_path(target: &str, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    if target.starts_with('/') {
        errs.push(FieldError::invalid(path, target, "must be a relative path"));
    }
    errs.extend(validate_path_no_backsteps(target, path));
    errs
}

/// `validatePathNoBacksteps`: no `..` element (one error however many).
fn validate_path_no_backsteps(target: &str, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    if target.split('/').any(|part| part == "..") {
        errs.push(FieldError::invalid(path, target, "must not contain '..'"));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pod from YAML (the pods of these tests are easier to read that way).
    fn pod(yaml: &str) -> Pod {
        serde_norway::from_str(yaml).expect("test pod decodes")
    }

    const GOOD: &str = "
metadata: {name: web-node-1, namespace: default, labels: {app: web, example.com/tier: front}, annotations: {kubernetes.io/config.hash: abc}}
spec:
  hostname: web
  subdomain: svc
  restartPolicy: Always
  dnsPolicy: ClusterFirst
  terminationGracePeriodSeconds: 9223372036854775807
  activeDeadlineSeconds: 2147483647
  securityContext: {runAsUser: 4294967295, fsGroup: 0, supplementalGroups: [1, 2]}
  volumes:
  - {name: data, emptyDir: {medium: Memory, sizeLimit: 64Mi}}
  - {name: host, hostPath: {path: /var/log, type: Directory}}
  initContainers:
  - {name: init, image: busybox, command: [true]}
  - name: side
    image: busybox
    restartPolicy: Always
    readinessProbe: {exec: {command: [true]}}
  containers:
  - name: c
    image: busybox:1
    imagePullPolicy: IfNotPresent
    terminationMessagePolicy: FallbackToLogsOnError
    ports: [{name: http, containerPort: 80, hostPort: 8080, protocol: TCP}, {containerPort: 80, protocol: UDP}]
    env: [{name: '1.weird name-', value: x}]
    volumeMounts:
    - {name: data, mountPath: /data, subPath: a/b}
    - {name: host, mountPath: /host, subPathExpr: $(POD)/x}
    resources: {limits: {cpu: '1', memory: 64Mi}, requests: {cpu: 500m, memory: 64Mi}}
    securityContext: {runAsUser: 1000, runAsGroup: 1000}
    livenessProbe: {httpGet: {port: http, scheme: HTTPS}, periodSeconds: 1, successThreshold: 1}
    startupProbe: {tcpSocket: {port: 80}, failureThreshold: 30}
    lifecycle: {preStop: {sleep: {seconds: 5}}}
";

    #[test]
    fn a_good_pod_passes() {
        assert_eq!(validate_pod_create(&pod(GOOD)), Ok(()));
        let minimal =
            "metadata: {name: a, namespace: b}\nspec: {containers: [{name: c, image: i}]}\n";
        assert_eq!(validate_pod_create(&pod(minimal)), Ok(()));
    }

    const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
    const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

    /// Each case: the part of a minimal pod's YAML to replace, and every message.
    #[test]
    fn each_bad_field_gives_upstream_path_and_message() {
        let base =
            "metadata: {name: a, namespace: b}\nspec:\n  containers: [{name: c, image: i}]\n";
        let with_spec = |extra: &str| format!("{base}{extra}");
        let with_ctr = |fields: &str| {
            format!("metadata: {{name: a, namespace: b}}\nspec:\n  containers: [{{name: c, image: i, {fields}}}]\n")
        };
        let cases: Vec<(String, Vec<String>)> = vec![
            (
                with_spec("  volumes: [{name: '../../../../../hostsecret', emptyDir: {}}]\n"),
                vec![format!("spec.volumes[0].name: Invalid value: \"../../../../../hostsecret\": {LABEL_MSG}")],
            ),
            (
                "metadata: {name: A_b, namespace: 'x.y'}\nspec: {containers: [{name: c, image: i}]}\n".into(),
                vec![
                    format!("metadata.name: Invalid value: \"A_b\": {SUBDOMAIN_MSG}"),
                    "metadata.namespace: Invalid value: \"x.y\": must not contain dots".into(),
                ],
            ),
            (
                "metadata: {}\nspec: {containers: []}\n".into(),
                vec![
                    "metadata.name: Required value: name or generateName is required".into(),
                    "metadata.namespace: Required value".into(),
                    "spec.containers: Required value".into(),
                ],
            ),
            (
                "metadata: {name: a, namespace: b, labels: {'a/b/c': '-x'}}\nspec: {containers: [{name: c, image: i}]}\n".into(),
                vec![
                    "metadata.labels: Invalid value: \"a/b/c\": a valid label key must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')".into(),
                    "metadata.labels: Invalid value: \"-x\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')".into(),
                ],
            ),
            (
                format!("metadata: {{name: a, namespace: b, annotations: {{'/k': '{}'}}}}\nspec: {{containers: [{{name: c, image: i}}]}}\n", "v".repeat(262144)),
                vec![
                    "metadata.annotations: Invalid value: \"/k\": prefix part must be non-empty".into(),
                    "metadata.annotations: Too long: must have at most 262144 bytes".into(),
                ],
            ),
            (
                "metadata: {name: a, namespace: b}\nspec:\n  initContainers: [{name: c, image: i}, {name: Bad, image: ' i'}]\n  containers: [{name: c}]\n".into(),
                vec![
                    "spec.containers[0].image: Required value".into(),
                    "spec.initContainers[0].name: Duplicate value: \"c\"".into(),
                    format!("spec.initContainers[1].name: Invalid value: \"Bad\": {LABEL_MSG}"),
                    "spec.initContainers[1].image: Invalid value: \" i\": must not have leading or trailing whitespace".into(),
                ],
            ),
            (
                with_ctr("ports: [{name: http, containerPort: 0, hostPort: 70000, protocol: tcp}, {name: http, containerPort: 65536}, {name: Http_1, containerPort: 1, hostPort: 1}, {containerPort: 2, hostPort: 1, protocol: TCP}]"),
                vec![
                    "spec.containers[0].ports[0].containerPort: Required value".into(),
                    "spec.containers[0].ports[0].hostPort: Invalid value: 70000: must be between 1 and 65535, inclusive".into(),
                    "spec.containers[0].ports[0].protocol: Unsupported value: \"tcp\": supported values: \"SCTP\", \"TCP\", \"UDP\"".into(),
                    "spec.containers[0].ports[1].name: Duplicate value: \"http\"".into(),
                    "spec.containers[0].ports[1].containerPort: Invalid value: 65536: must be between 1 and 65535, inclusive".into(),
                    "spec.containers[0].ports[2].name: Invalid value: \"Http_1\": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".into(),
                    "spec.containers[0].ports[3].hostPort: Duplicate value: \"1/TCP\"".into(),
                ],
            ),
            (
                with_ctr("env: [{name: ''}, {name: 'A=B'}]"),
                vec![
                    "spec.containers[0].env[0].name: Required value".into(),
                    "spec.containers[0].env[1].name: Invalid value: \"A=B\": a valid environment variable name must consist only of printable ASCII characters other than '='".into(),
                ],
            ),
            (
                format!("{}  volumes: [{{name: v, emptyDir: {{}}}}, {{name: v, emptyDir: {{}}, hostPath: {{path: /x}}}}, {{name: w}}, {{name: w}}]\n",
                    with_ctr("volumeMounts: [{name: nope, mountPath: ''}, {name: v, mountPath: /a, subPath: ../x}, {name: v, mountPath: /a, subPath: x, subPathExpr: /y}]")),
                vec![
                    "spec.volumes[1].emptyDir: Forbidden: may not specify more than 1 volume type".into(),
                    "spec.volumes[1].name: Duplicate value: \"v\"".into(),
                    "spec.volumes[3].name: Duplicate value: \"w\"".into(),
                    "spec.containers[0].volumeMounts[0].name: Not found: \"nope\"".into(),
                    "spec.containers[0].volumeMounts[0].mountPath: Required value".into(),
                    "spec.containers[0].volumeMounts.subPath: Invalid value: \"../x\": must not contain '..'".into(),
                    "spec.containers[0].volumeMounts[2].mountPath: Invalid value: \"/a\": must be unique".into(),
                    "spec.containers[0].volumeMounts[2].subPathExpr: Invalid value: \"/y\": subPathExpr and subPath are mutually exclusive".into(),
                    "spec.containers[0].volumeMounts.subPathExpr: Invalid value: \"/y\": must be a relative path".into(),
                ],
            ),
            (
                with_spec("  volumes: [{name: h, hostPath: {path: /a/../etc, type: Dir}}, {name: e, emptyDir: {medium: Disk, sizeLimit: -1}}]\n"),
                vec![
                    "spec.volumes[0].hostPath.path: Invalid value: \"/a/../etc\": must not contain '..'".into(),
                    "spec.volumes[0].hostPath.type: Unsupported value: \"Dir\": supported values: \"\", \"BlockDevice\", \"CharDevice\", \"Directory\", \"DirectoryOrCreate\", \"File\", \"FileOrCreate\", \"Socket\"".into(),
                    "spec.volumes[1].emptyDir.medium: Unsupported value: \"Disk\": supported values: \"\", \"HugePages\", \"Memory\"".into(),
                    "spec.volumes[1].emptyDir.sizeLimit: Forbidden: SizeLimit field must be a valid resource quantity".into(),
                ],
            ),
            (
                with_spec("  restartPolicy: Sometimes\n  dnsPolicy: None\n  terminationGracePeriodSeconds: -1\n  activeDeadlineSeconds: 2147483648\n  hostname: a.b\n  subdomain: '-'\n  securityContext: {runAsUser: -1, supplementalGroups: [4294967296]}\n"),
                vec![
                    "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"".into(),
                    "spec.dnsConfig: Required value: must provide `dnsConfig` when `dnsPolicy` is None".into(),
                    "spec.terminationGracePeriodSeconds: Invalid value: -1: must be greater than or equal to 0".into(),
                    "spec.activeDeadlineSeconds: Invalid value: 2147483648: must be between 1 and 2147483647, inclusive".into(),
                    "spec.hostname: Invalid value: \"a.b\": must not contain dots".into(),
                    format!("spec.subdomain: Invalid value: \"-\": {LABEL_MSG}"),
                    "spec.securityContext.runAsUser: Invalid value: -1: must be between 0 and 4294967295, inclusive".into(),
                    "spec.securityContext.supplementalGroups[0]: Invalid value: 4294967296: must be between 0 and 4294967295, inclusive".into(),
                ],
            ),
            (
                with_spec("  dnsPolicy: Cluster\n  activeDeadlineSeconds: 0\n"),
                vec![
                    "spec.dnsPolicy: Unsupported value: \"Cluster\": supported values: \"ClusterFirst\", \"ClusterFirstWithHostNet\", \"Default\", \"None\"".into(),
                    "spec.activeDeadlineSeconds: Invalid value: 0: must be between 1 and 2147483647, inclusive".into(),
                ],
            ),
            (
                format!("{}  securityContext: {{seccompProfile: {{type: Localhost, localhostProfile: ../../etc/shadow}}}}\n", with_ctr("imagePullPolicy: Sometimes, terminationMessagePolicy: Log, securityContext: {runAsGroup: -5, seccompProfile: {type: Other, localhostProfile: /x}}")),
                vec![
                    "spec.containers[0].terminationMessagePolicy: Unsupported value: \"Log\": supported values: \"File\", \"FallbackToLogsOnError\"".into(),
                    "spec.containers[0].imagePullPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"IfNotPresent\", \"Never\"".into(),
                    "spec.containers[0].securityContext.runAsGroup: Invalid value: -5: must be between 0 and 4294967295, inclusive".into(),
                    "spec.containers[0].securityContext.seccompProfile.type: Unsupported value: \"Other\": supported values: \"Localhost\", \"RuntimeDefault\", \"Unconfined\"".into(),
                    "spec.containers[0].securityContext.seccompProfile.localhostProfile: Invalid value: \"/x\": can only be set when seccomp type is Localhost".into(),
                    "spec.securityContext.seccompProfile.localhostProfile: Invalid value: \"../../etc/shadow\": must not contain '..'".into(),
                ],
            ),
            (
                with_spec("  securityContext: {sysctls: [{name: kernel.shm_rmid_forced, value: '1'}, {name: '', value: '1'}, {name: Kernel.msgmax, value: '1'}, {name: kernel.shm_rmid_forced, value: '0'}, {name: net/ipv4/ip_local_port_range, value: '1 2'}, {name: 'kernel.msg*', value: '1'}]}\n"),
                vec![
                    "spec.securityContext.sysctls[1].name: Required value".into(),
                    "spec.securityContext.sysctls[2].name: Invalid value: \"Kernel.msgmax\": must have at most 253 characters and match regex ^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$".into(),
                    "spec.securityContext.sysctls[3].name: Duplicate value: \"kernel.shm_rmid_forced\"".into(),
                    "spec.securityContext.sysctls[5].name: Invalid value: \"kernel.msg*\": must have at most 253 characters and match regex ^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$".into(),
                ],
            ),
            (
                with_ctr("resources: {limits: {cpu: 500m, memory: -1}, requests: {cpu: '1', memory: lots}}"),
                vec![
                    "spec.containers[0].resources.limits[memory]: Invalid value: \"-1\": must be greater than or equal to 0".into(),
                    "spec.containers[0].resources.requests: Invalid value: \"1\": must be less than or equal to cpu limit of 500m".into(),
                    format!("spec.containers[0].resources.requests[memory]: Invalid value: \"lots\": {QUANTITY_FORMAT}"),
                ],
            ),
            (
                with_ctr("livenessProbe: {exec: {command: []}, tcpSocket: {port: 0}, periodSeconds: -1, successThreshold: 2, terminationGracePeriodSeconds: 0}, readinessProbe: {httpGet: {port: 'no_such', scheme: FTP}, timeoutSeconds: -2}, startupProbe: {grpc: {port: 70000}}"),
                vec![
                    "spec.containers[0].livenessProbe.tcpSocket: Forbidden: may not specify more than 1 handler type".into(),
                    "spec.containers[0].livenessProbe.exec.command: Required value".into(),
                    "spec.containers[0].livenessProbe.tcpSocket.port: Invalid value: 0: must be between 1 and 65535, inclusive".into(),
                    "spec.containers[0].livenessProbe.periodSeconds: Invalid value: -1: must be greater than or equal to 0".into(),
                    "spec.containers[0].livenessProbe.terminationGracePeriodSeconds: Invalid value: 0: must be greater than 0".into(),
                    "spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1".into(),
                    "spec.containers[0].readinessProbe.httpGet.port: Invalid value: \"no_such\": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".into(),
                    "spec.containers[0].readinessProbe.httpGet.scheme: Unsupported value: \"FTP\": supported values: \"HTTP\", \"HTTPS\"".into(),
                    "spec.containers[0].readinessProbe.timeoutSeconds: Invalid value: -2: must be greater than or equal to 0".into(),
                    "spec.containers[0].startupProbe.grpc.port: Invalid value: 70000: must be between 1 and 65535, inclusive".into(),
                ],
            ),
            (
                "metadata: {name: a, namespace: b}\nspec:\n  terminationGracePeriodSeconds: 10\n  initContainers: [{name: i, image: i, livenessProbe: {exec: {command: [x]}}}]\n  containers: [{name: c, image: i, lifecycle: {preStop: {sleep: {seconds: 11}}, postStart: {}}}]\n".into(),
                vec![
                    "spec.containers[0].lifecycle.postStart: Required value: must specify a handler type".into(),
                    "spec.containers[0].lifecycle.preStop.sleep: Invalid value: 11: must be non-negative and less than terminationGracePeriodSeconds (10)".into(),
                    "spec.initContainers[0].livenessProbe: Forbidden: may not be set for init containers without restartPolicy=Always".into(),
                ],
            ),
        ];
        for (yaml, want) in cases {
            let got = validate_pod_create(&pod(&yaml)).expect_err(&yaml);
            let got: Vec<String> = got.0.iter().map(ToString::to_string).collect();
            assert_eq!(got, want, "pod:\n{yaml}");
        }
    }

    #[test]
    fn the_list_prints_as_upstream_aggregate() {
        let errs = validate_pod_create(&pod(
            "metadata: {name: a}\nspec: {containers: [{name: c}]}\n",
        ))
        .expect_err("invalid");
        assert_eq!(
            errs.to_string(),
            "[metadata.namespace: Required value, spec.containers[0].image: Required value]"
        );
        assert_eq!(
            errs.fields(),
            ["metadata.namespace", "spec.containers[0].image"]
        );
    }
}
