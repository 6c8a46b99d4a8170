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

pub mod field;
pub mod names;

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{
    Container, LifecycleHandler, Pod, PodSpec, Probe, ResourceRequirements, SecurityContext, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

pub use field::{ErrorList, FieldError, Path};
use names::{
    inclusive_range_error, is_dns1123_label, is_dns1123_subdomain, is_qualified_name,
    is_relaxed_env_var_name, is_valid_id, is_valid_label_value, is_valid_port_name,
    is_valid_port_num,
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
pub fn validate_pod_create(pod: &Pod) -> Result<(), ErrorList> {
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
pub fn validate_object_meta(meta: &ObjectMeta, path: &Path) -> ErrorList {
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
pub fn validate_pod_spec(spec: &PodSpec, path: &Path) -> ErrorList {
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
        match serde_json::to_value(ec).and_then(serde_json::from_value::<Container>) {
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
        } else if dp == "None" && spec.dns_config.is_none() {
            errs.push(FieldError::required(
                &path.child("dnsConfig"),
                "must provide `dnsConfig` when `dnsPolicy` is None",
            ));
        }
    }
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
    let set: BTreeSet<String> = match serde_json::to_value(vol) {
        Ok(serde_json::Value::Object(m)) => m
            .into_iter()
            .filter(|(k, v)| k != "name" && !v.is_null())
            .map(|(k, _)| k)
            .collect(),
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
            if crate::quantity::parse_milli(&limit.0).is_none_or(|v| v < 0) {
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
pub fn validate_local_descending_path(target: &str, path: &Path) -> ErrorList {
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

/// `validateContainerCommon` and its parts, for one container of any kind.
fn validate_container(
    c: &Container,
    path: &Path,
    volumes: &BTreeSet<String>,
    names: &mut BTreeSet<String>,
    grace: i64,
) -> ErrorList {
    let mut errs = ErrorList::default();
    let name_path = path.child("name");
    if c.name.is_empty() {
        errs.push(FieldError::required(&name_path, ""));
    } else {
        let msgs = is_dns1123_label(&c.name);
        for msg in &msgs {
            errs.push(FieldError::invalid(&name_path, &c.name, msg));
        }
        if msgs.is_empty() && !names.insert(c.name.clone()) {
            errs.push(FieldError::duplicate(&name_path, &c.name));
        }
    }
    let image = c.image.as_deref().unwrap_or("");
    if image.is_empty() {
        errs.push(FieldError::required(&path.child("image"), ""));
    } else if image.trim() != image {
        errs.push(FieldError::invalid(
            &path.child("image"),
            image,
            "must not have leading or trailing whitespace",
        ));
    }
    if let Some(p) = c.termination_message_policy.as_deref() {
        let valid = ["File", "FallbackToLogsOnError"];
        if !valid.contains(&p) {
            errs.push(FieldError::not_supported(
                &path.child("terminationMessagePolicy"),
                p,
                &valid,
            ));
        }
    }
    if let Some(p) = c.image_pull_policy.as_deref() {
        let valid = ["Always", "IfNotPresent", "Never"];
        if !valid.contains(&p) {
            errs.push(FieldError::not_supported(
                &path.child("imagePullPolicy"),
                p,
                &valid,
            ));
        }
    }
    errs.extend(validate_container_ports(c, &path.child("ports")));
    errs.extend(validate_env(c, &path.child("env")));
    errs.extend(validate_volume_mounts(
        c,
        volumes,
        &path.child("volumeMounts"),
    ));
    if let Some(r) = &c.resources {
        errs.extend(validate_resource_requirements(r, &path.child("resources")));
    }
    if let Some(sc) = &c.security_context {
        errs.extend(validate_security_context(
            sc,
            &path.child("securityContext"),
        ));
    }
    if let Some(lc) = &c.lifecycle {
        let p = path.child("lifecycle");
        if let Some(h) = &lc.post_start {
            errs.extend(validate_handler(h, grace, &p.child("postStart")));
        }
        if let Some(h) = &lc.pre_stop {
            errs.extend(validate_handler(h, grace, &p.child("preStop")));
        }
    }
    errs
}

/// `validateContainerPorts`: names are unique IANA service names, ports in range,
/// protocols known.
fn validate_container_ports(c: &Container, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    let mut names = BTreeSet::new();
    for (i, port) in c.ports.iter().flatten().enumerate() {
        let p = path.index(i);
        if let Some(name) = port.name.as_deref().filter(|n| !n.is_empty()) {
            let msgs = is_valid_port_name(name);
            for msg in &msgs {
                errs.push(FieldError::invalid(&p.child("name"), name, msg));
            }
            if msgs.is_empty() && !names.insert(name.to_string()) {
                errs.push(FieldError::duplicate(&p.child("name"), name));
            }
        }
        if port.container_port == 0 {
            errs.push(FieldError::required(&p.child("containerPort"), ""));
        } else {
            for msg in is_valid_port_num(i64::from(port.container_port)) {
                errs.push(FieldError::invalid(
                    &p.child("containerPort"),
                    port.container_port,
                    &msg,
                ));
            }
        }
        if let Some(hp) = port.host_port.filter(|hp| *hp != 0) {
            for msg in is_valid_port_num(i64::from(hp)) {
                errs.push(FieldError::invalid(&p.child("hostPort"), hp, &msg));
            }
        }
        if let Some(proto) = port.protocol.as_deref() {
            let valid = ["SCTP", "TCP", "UDP"];
            if !valid.contains(&proto) {
                errs.push(FieldError::not_supported(
                    &p.child("protocol"),
                    proto,
                    &valid,
                ));
            }
        }
    }
    errs
}

/// `AccumulateUniqueHostPorts`: one host port and protocol once per pod.
fn accumulate_unique_host_ports(
    c: &Container,
    path: &Path,
    seen: &mut BTreeSet<String>,
) -> ErrorList {
    let mut errs = ErrorList::default();
    for (i, port) in c.ports.iter().flatten().enumerate() {
        let Some(hp) = port.host_port.filter(|hp| *hp != 0) else {
            continue;
        };
        let key = format!("{hp}/{}", port.protocol.as_deref().unwrap_or("TCP"));
        if !seen.insert(key.clone()) {
            errs.push(FieldError::duplicate(
                &path.child("ports").index(i).child("hostPort"),
                &key,
            ));
        }
    }
    errs
}

/// `ValidateEnv` (names under the relaxed rule, upstream's current one).
fn validate_env(c: &Container, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    for (i, ev) in c.env.iter().flatten().enumerate() {
        let p = path.index(i).child("name");
        if ev.name.is_empty() {
            errs.push(FieldError::required(&p, ""));
        } else {
            for msg in is_relaxed_env_var_name(&ev.name) {
                errs.push(FieldError::invalid(&p, &ev.name, &msg));
            }
        }
    }
    errs
}

/// `ValidateVolumeMounts`: a mount names a volume of the pod, has a unique mount path,
/// and its subPath / subPathExpr stays inside the volume.
fn validate_volume_mounts(c: &Container, volumes: &BTreeSet<String>, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    let mut mount_points = BTreeSet::new();
    for (i, m) in c.volume_mounts.iter().flatten().enumerate() {
        let p = path.index(i);
        if m.name.is_empty() {
            errs.push(FieldError::required(&p.child("name"), ""));
        }
        if !volumes.contains(&m.name) {
            errs.push(FieldError::not_found(&p.child("name"), &m.name));
        }
        if m.mount_path.is_empty() {
            errs.push(FieldError::required(&p.child("mountPath"), ""));
        }
        if !mount_points.insert(m.mount_path.clone()) {
            errs.push(FieldError::invalid(
                &p.child("mountPath"),
                &m.mount_path,
                "must be unique",
            ));
        }
        let sub_path = m.sub_path.as_deref().unwrap_or("");
        // Upstream's paths for these two lack the mount's index (`volumeMounts.subPath`);
        // kept so that messages match.
        if !sub_path.is_empty() {
            errs.extend(validate_local_descending_path(
                sub_path,
                &path.child("subPath"),
            ));
        }
        if let Some(expr) = m.sub_path_expr.as_deref().filter(|e| !e.is_empty()) {
            if !sub_path.is_empty() {
                errs.push(FieldError::invalid(
                    &p.child("subPathExpr"),
                    expr,
                    "subPathExpr and subPath are mutually exclusive",
                ));
            }
            errs.extend(validate_local_descending_path(
                expr,
                &path.child("subPathExpr"),
            ));
        }
    }
    errs
}

/// `ValidateResourceRequirements`, for the quantities: each parses, none is negative,
/// and no request exceeds its limit.
fn validate_resource_requirements(r: &ResourceRequirements, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    let parse = |q: &str, p: &Path, errs: &mut ErrorList| -> Option<i128> {
        match crate::quantity::parse_milli(q) {
            None => {
                errs.push(FieldError::invalid(p, q, QUANTITY_FORMAT));
                None
            }
            Some(v) if v < 0 => {
                errs.push(FieldError::invalid(p, q, IS_NEGATIVE));
                None
            }
            Some(v) => Some(v),
        }
    };
    let lim_path = path.child("limits");
    let req_path = path.child("requests");
    let mut limits = std::collections::BTreeMap::new();
    for (name, q) in r.limits.iter().flatten() {
        if let Some(v) = parse(&q.0, &lim_path.key(name), &mut errs) {
            limits.insert(name.clone(), (v, q.0.clone()));
        }
    }
    for (name, q) in r.requests.iter().flatten() {
        let Some(v) = parse(&q.0, &req_path.key(name), &mut errs) else {
            continue;
        };
        if let Some((limit, text)) = limits.get(name) {
            if v > *limit {
                errs.push(FieldError::invalid(
                    &req_path,
                    &q.0,
                    &format!("must be less than or equal to {name} limit of {text}"),
                ));
            }
        }
    }
    errs
}

/// The user and group IDs and the seccomp profile of a container's `securityContext`.
fn validate_security_context(sc: &SecurityContext, path: &Path) -> ErrorList {
    let mut errs = validate_id(sc.run_as_user, &path.child("runAsUser"));
    errs.extend(validate_id(sc.run_as_group, &path.child("runAsGroup")));
    errs.extend(validate_seccomp_profile(
        sc.seccomp_profile.as_ref(),
        &path.child("seccompProfile"),
    ));
    errs
}

/// `validateSeccompProfileField`: a known type, and a `Localhost` profile is a file
/// below the kubelet's seccomp directory (relative, no `..`).
fn validate_seccomp_profile(
    sp: Option<&k8s_openapi::api::core::v1::SeccompProfile>,
    path: &Path,
) -> ErrorList {
    let mut errs = ErrorList::default();
    let Some(sp) = sp else { return errs };
    let valid = ["Localhost", "RuntimeDefault", "Unconfined"];
    if sp.type_.is_empty() {
        errs.push(FieldError::required(
            &path.child("type"),
            "type is required when seccompProfile is set",
        ));
    } else if !valid.contains(&sp.type_.as_str()) {
        errs.push(FieldError::not_supported(
            &path.child("type"),
            &sp.type_,
            &valid,
        ));
    }
    let lp = path.child("localhostProfile");
    match sp.localhost_profile.as_deref() {
        Some(file) if sp.type_ == "Localhost" => {
            if file.is_empty() {
                errs.push(FieldError::required(
                    &lp,
                    "must be set when seccomp type is Localhost",
                ));
            }
            errs.extend(validate_local_descending_path(file, &lp));
        }
        None if sp.type_ == "Localhost" => errs.push(FieldError::required(
            &lp,
            "must be set when seccomp type is Localhost",
        )),
        Some(file) => errs.push(FieldError::invalid(
            &lp,
            file,
            "can only be set when seccomp type is Localhost",
        )),
        None => {}
    }
    errs
}

/// The probes of an app container or sidecar (`validateLivenessProbe`,
/// `validateReadinessProbe`, `validateStartupProbe`).
fn validate_probes(c: &Container, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    for (probe, field, one_success) in [
        (&c.liveness_probe, "livenessProbe", true),
        (&c.readiness_probe, "readinessProbe", false),
        (&c.startup_probe, "startupProbe", true),
    ] {
        let Some(probe) = probe else { continue };
        let p = path.child(field);
        errs.extend(validate_probe(probe, &p));
        let success = probe.success_threshold.unwrap_or(0);
        // 0 is "unset": upstream defaults it to 1 before validating.
        if one_success && success != 0 && success != 1 {
            errs.push(FieldError::invalid(
                &p.child("successThreshold"),
                success,
                "must be 1",
            ));
        }
    }
    errs
}

/// `validateProbe`: one handler, non-negative numbers, a positive grace override.
pub fn validate_probe(probe: &Probe, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    let mut handlers = 0;
    for (set, field) in [
        (probe.exec.is_some(), "exec"),
        (probe.http_get.is_some(), "httpGet"),
        (probe.tcp_socket.is_some(), "tcpSocket"),
        (probe.grpc.is_some(), "grpc"),
    ] {
        if set {
            handlers += 1;
            if handlers > 1 {
                errs.push(FieldError::forbidden(
                    &path.child(field),
                    "may not specify more than 1 handler type",
                ));
            }
        }
    }
    if handlers == 0 {
        errs.push(FieldError::required(path, "must specify a handler type"));
    }
    if let Some(e) = &probe.exec {
        if e.command.as_ref().is_none_or(Vec::is_empty) {
            errs.push(FieldError::required(
                &path.child("exec").child("command"),
                "",
            ));
        }
    }
    if let Some(h) = &probe.http_get {
        let p = path.child("httpGet");
        errs.extend(validate_port_num_or_name(&h.port, &p.child("port")));
        errs.extend(validate_scheme(h.scheme.as_deref(), &p.child("scheme")));
    }
    if let Some(t) = &probe.tcp_socket {
        errs.extend(validate_port_num_or_name(
            &t.port,
            &path.child("tcpSocket").child("port"),
        ));
    }
    if let Some(g) = &probe.grpc {
        for msg in is_valid_port_num(i64::from(g.port)) {
            errs.push(FieldError::invalid(
                &path.child("grpc").child("port"),
                g.port,
                &msg,
            ));
        }
    }
    for (value, field) in [
        (probe.initial_delay_seconds, "initialDelaySeconds"),
        (probe.timeout_seconds, "timeoutSeconds"),
        (probe.period_seconds, "periodSeconds"),
        (probe.success_threshold, "successThreshold"),
        (probe.failure_threshold, "failureThreshold"),
    ] {
        if let Some(v) = value.filter(|v| *v < 0) {
            errs.push(FieldError::invalid(&path.child(field), v, IS_NEGATIVE));
        }
    }
    if let Some(g) = probe.termination_grace_period_seconds.filter(|g| *g <= 0) {
        errs.push(FieldError::invalid(
            &path.child("terminationGracePeriodSeconds"),
            g,
            "must be greater than 0",
        ));
    }
    errs
}

/// `validateHandler` for lifecycle hooks: one handler type, valid ports, a sleep that
/// fits in the grace period.
fn validate_handler(h: &LifecycleHandler, grace: i64, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    let mut handlers = 0;
    for (set, field) in [
        (h.exec.is_some(), "exec"),
        (h.http_get.is_some(), "httpGet"),
        (h.tcp_socket.is_some(), "tcpSocket"),
        (h.sleep.is_some(), "sleep"),
    ] {
        if set {
            handlers += 1;
            if handlers > 1 {
                errs.push(FieldError::forbidden(
                    &path.child(field),
                    "may not specify more than 1 handler type",
                ));
            }
        }
    }
    if handlers == 0 {
        errs.push(FieldError::required(path, "must specify a handler type"));
    }
    if let Some(e) = &h.exec {
        if e.command.as_ref().is_none_or(Vec::is_empty) {
            errs.push(FieldError::required(
                &path.child("exec").child("command"),
                "",
            ));
        }
    }
    if let Some(g) = &h.http_get {
        let p = path.child("httpGet");
        errs.extend(validate_port_num_or_name(&g.port, &p.child("port")));
        errs.extend(validate_scheme(g.scheme.as_deref(), &p.child("scheme")));
    }
    if let Some(t) = &h.tcp_socket {
        errs.extend(validate_port_num_or_name(
            &t.port,
            &path.child("tcpSocket").child("port"),
        ));
    }
    if let Some(s) = &h.sleep {
        if s.seconds < 0 || s.seconds > grace {
            errs.push(FieldError::invalid(
                &path.child("sleep"),
                s.seconds,
                &format!(
                    "must be non-negative and less than terminationGracePeriodSeconds ({grace})"
                ),
            ));
        }
    }
    errs
}

fn validate_scheme(scheme: Option<&str>, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    if let Some(s) = scheme {
        let valid = ["HTTP", "HTTPS"];
        if !valid.contains(&s) {
            errs.push(FieldError::not_supported(path, s, &valid));
        }
    }
    errs
}

/// `ValidatePortNumOrName`.
fn validate_port_num_or_name(port: &IntOrString, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    match port {
        IntOrString::Int(n) => {
            for msg in is_valid_port_num(i64::from(*n)) {
                errs.push(FieldError::invalid(path, *n, &msg));
            }
        }
        IntOrString::String(s) => {
            for msg in is_valid_port_name(s) {
                errs.push(FieldError::invalid(path, s, &msg));
            }
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pod from YAML (the pods of these tests are easier to read that way).
    fn pod(yaml: &str) -> Pod {
        serde_yaml::from_str(yaml).expect("test pod decodes")
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
