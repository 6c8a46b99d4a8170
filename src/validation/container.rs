//! Container validation, as upstream's `validateContainers`, `validateInitContainers`
//! and the functions they call: names, images, ports, env, volume mounts, resources,
//! security context, probes and lifecycle hooks. Split from the pod-level rules in
//! [`super`] only for size; the messages and field paths are upstream's.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{
    Container, ExecAction, HTTPGetAction, LifecycleHandler, Probe, ResourceRequirements,
    SecurityContext, TCPSocketAction,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::field::{ErrorList, FieldError, Path};
use super::names::{
    is_dns1123_label, is_relaxed_env_var_name, is_valid_port_name, is_valid_port_num,
};
use super::{validate_id, validate_local_descending_path, IS_NEGATIVE, QUANTITY_FORMAT};

/// `validateContainerCommon` and its parts, for one container of any kind.
pub(super) fn validate_container(
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
    errs.extend(super::volumes::validate_env_sources(c, path));
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
pub(super) fn validate_container_ports(c: &Container, path: &Path) -> ErrorList {
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
pub(super) fn accumulate_unique_host_ports(
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
pub(super) fn validate_env(c: &Container, path: &Path) -> ErrorList {
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
pub(super) fn validate_volume_mounts(
    c: &Container,
    volumes: &BTreeSet<String>,
    path: &Path,
) -> ErrorList {
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
pub(super) fn validate_resource_requirements(r: &ResourceRequirements, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    let parse = |q: &str, p: &Path, errs: &mut ErrorList| -> Option<i128> {
        match base::quantity::parse_milli(q) {
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
pub(super) fn validate_security_context(sc: &SecurityContext, path: &Path) -> ErrorList {
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
pub(super) fn validate_seccomp_profile(
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
pub(super) fn validate_probes(c: &Container, path: &Path) -> ErrorList {
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

/// What probes and hooks share (upstream `validateHandler`): exactly one of the four
/// handler types in `kinds`, an exec command, valid ports and schemes.
fn validate_handler_types(
    kinds: [(bool, &str); 4],
    exec: Option<&ExecAction>,
    http_get: Option<&HTTPGetAction>,
    tcp_socket: Option<&TCPSocketAction>,
    path: &Path,
) -> ErrorList {
    let mut errs = ErrorList::default();
    let mut handlers = 0;
    for (set, field) in kinds {
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
    if exec.is_some_and(|e| e.command.as_ref().is_none_or(Vec::is_empty)) {
        errs.push(FieldError::required(
            &path.child("exec").child("command"),
            "",
        ));
    }
    if let Some(h) = http_get {
        let p = path.child("httpGet");
        errs.extend(validate_port_num_or_name(&h.port, &p.child("port")));
        errs.extend(validate_scheme(h.scheme.as_deref(), &p.child("scheme")));
    }
    if let Some(t) = tcp_socket {
        errs.extend(validate_port_num_or_name(
            &t.port,
            &path.child("tcpSocket").child("port"),
        ));
    }
    errs
}

/// `validateProbe`: one handler, non-negative numbers, a positive grace override.
pub(crate) fn validate_probe(probe: &Probe, path: &Path) -> ErrorList {
    let mut errs = validate_handler_types(
        [
            (probe.exec.is_some(), "exec"),
            (probe.http_get.is_some(), "httpGet"),
            (probe.tcp_socket.is_some(), "tcpSocket"),
            (probe.grpc.is_some(), "grpc"),
        ],
        probe.exec.as_ref(),
        probe.http_get.as_ref(),
        probe.tcp_socket.as_ref(),
        path,
    );
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
pub(super) fn validate_handler(h: &LifecycleHandler, grace: i64, path: &Path) -> ErrorList {
    let mut errs = validate_handler_types(
        [
            (h.exec.is_some(), "exec"),
            (h.http_get.is_some(), "httpGet"),
            (h.tcp_socket.is_some(), "tcpSocket"),
            (h.sleep.is_some(), "sleep"),
        ],
        h.exec.as_ref(),
        h.http_get.as_ref(),
        h.tcp_socket.as_ref(),
        path,
    );
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

pub(super) fn validate_scheme(scheme: Option<&str>, path: &Path) -> ErrorList {
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
pub(super) fn validate_port_num_or_name(port: &IntOrString, path: &Path) -> ErrorList {
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
