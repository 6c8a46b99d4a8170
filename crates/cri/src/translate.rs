//! The runtime-neutral types of [`runtime`] as CRI v1 messages and back, for
//! [`crate::runtime`]: sandbox and container configs as `RunPodSandbox` and
//! `CreateContainer` configs (upstream's `generatePodSandboxConfig` and
//! `generateContainerConfig` output, field for field), `key=value` label filters as
//! CRI label selectors, sandboxes and containers as summaries and details (with the
//! dockershim names and the `io.kubernetes.docker.type` label the layers above read),
//! images and events. Pure functions: no I/O.
//!
//! Over 800 lines: half of it is the unit tests, one per translation, that spell out
//! every field of the messages.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use runtime::config::{
    ContainerConfig, LinuxContainerSecurityContext, NamespaceMode, NamespaceOption,
    PodSandboxConfig, SecurityProfile,
};
use runtime::container::labels;
use runtime::{
    ContainerDetails, ContainerEventType, ContainerState, ContainerSummary, ImageDetails,
    RegistryAuth,
};

use crate::v1;

/// The label filters of a list call (`key=value` or a bare `key`) as a CRI label
/// selector (`key=value` only: CRI matches exact values) and the bare keys, which the
/// caller checks itself ([`has_labels`]).
pub(crate) fn label_selector(filters: &[String]) -> (HashMap<String, String>, Vec<String>) {
    let mut selector = HashMap::new();
    let mut bare = Vec::new();
    for f in filters {
        match f.split_once('=') {
            Some((k, v)) => {
                selector.insert(k.to_string(), v.to_string());
            }
            None => bare.push(f.clone()),
        }
    }
    (selector, bare)
}

/// Whether `labels` satisfy every filter (`key` present, or `key=value`).
pub(crate) fn has_labels(labels: &BTreeMap<String, String>, filters: &[String]) -> bool {
    filters.iter().all(|f| match f.split_once('=') {
        Some((k, v)) => labels.get(k).is_some_and(|l| l == v),
        None => labels.contains_key(f.as_str()),
    })
}

fn namespace_mode(m: &NamespaceMode) -> i32 {
    match m {
        NamespaceMode::Pod => v1::NamespaceMode::Pod as i32,
        NamespaceMode::Container => v1::NamespaceMode::Container as i32,
        NamespaceMode::Node => v1::NamespaceMode::Node as i32,
    }
}

fn namespace_options(o: &NamespaceOption) -> v1::NamespaceOption {
    v1::NamespaceOption {
        network: namespace_mode(&o.network),
        pid: namespace_mode(&o.pid),
        ipc: namespace_mode(&o.ipc),
        ..Default::default()
    }
}

fn hash_map(m: &BTreeMap<String, String>) -> HashMap<String, String> {
    m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn protocol(p: &str) -> i32 {
    match p {
        "udp" => v1::Protocol::Udp as i32,
        "sctp" => v1::Protocol::Sctp as i32,
        _ => v1::Protocol::Tcp as i32,
    }
}

/// A sandbox config as CRI's (upstream `generatePodSandboxConfig`). The neutral config
/// carries no DNS settings (the kubelet writes the pod's resolv.conf itself), so none
/// are sent and the runtime gives the sandbox the node's.
pub(crate) fn sandbox_config(cfg: &PodSandboxConfig) -> v1::PodSandboxConfig {
    let m = &cfg.metadata;
    v1::PodSandboxConfig {
        metadata: Some(v1::PodSandboxMetadata {
            name: m.name.clone(),
            uid: m.uid.clone(),
            namespace: m.namespace.clone(),
            attempt: m.attempt,
        }),
        hostname: cfg.hostname.clone(),
        log_directory: cfg.log_directory.clone(),
        dns_config: None,
        port_mappings: cfg
            .port_mappings
            .iter()
            .map(|p| v1::PortMapping {
                protocol: protocol(&p.protocol),
                container_port: i32::from(p.container_port),
                host_port: i32::from(p.host_port),
                host_ip: p.host_ip.clone(),
            })
            .collect(),
        labels: hash_map(&cfg.labels),
        annotations: hash_map(&cfg.annotations),
        linux: Some(v1::LinuxPodSandboxConfig {
            cgroup_parent: cfg.linux.cgroup_parent.clone(),
            security_context: Some(v1::LinuxSandboxSecurityContext {
                namespace_options: Some(namespace_options(
                    &cfg.linux.security_context.namespace_options,
                )),
                ..Default::default()
            }),
            sysctls: hash_map(&cfg.linux.sysctls),
            ..Default::default()
        }),
        windows: None,
    }
}

/// A seccomp profile as CRI's field and as its deprecated path form
/// (`runtime/default`, `unconfined`, `localhost/<path>`), which runtimes that predate
/// the field (containerd before 1.7 reads both) still read.
fn seccomp(p: &SecurityProfile) -> (v1::SecurityProfile, String) {
    use v1::security_profile::ProfileType;
    let (profile_type, localhost_ref, path) = match p {
        SecurityProfile::Unconfined => {
            (ProfileType::Unconfined, String::new(), "unconfined".into())
        }
        SecurityProfile::RuntimeDefault => (
            ProfileType::RuntimeDefault,
            String::new(),
            "runtime/default".into(),
        ),
        SecurityProfile::Localhost(path) => (
            ProfileType::Localhost,
            path.clone(),
            format!("localhost/{path}"),
        ),
    };
    (
        v1::SecurityProfile {
            profile_type: profile_type as i32,
            localhost_ref,
        },
        path,
    )
}

// The deprecated `seccomp_profile_path` is set beside `seccomp` on purpose (see `seccomp`).
#[allow(deprecated)]
fn container_security(sc: &LinuxContainerSecurityContext) -> v1::LinuxContainerSecurityContext {
    let (profile, path) = seccomp(&sc.seccomp);
    v1::LinuxContainerSecurityContext {
        capabilities: Some(v1::Capability {
            add_capabilities: sc.add_capabilities.clone(),
            drop_capabilities: sc.drop_capabilities.clone(),
            add_ambient_capabilities: Vec::new(),
        }),
        privileged: sc.privileged,
        namespace_options: Some(namespace_options(&sc.namespace_options)),
        run_as_user: sc.run_as_user.map(|value| v1::Int64Value { value }),
        run_as_group: sc.run_as_group.map(|value| v1::Int64Value { value }),
        run_as_username: sc.run_as_username.clone(),
        readonly_rootfs: sc.readonly_rootfs,
        supplemental_groups: sc.supplemental_groups.clone(),
        no_new_privs: sc.no_new_privs,
        seccomp: Some(profile),
        seccomp_profile_path: path,
        ..Default::default()
    }
}

/// A container config as CRI's (upstream `generateContainerConfig`). Mounts are
/// private (the neutral mount has no propagation); the stop signal has no CRI v1
/// field, so a CRI runtime stops with the image's STOPSIGNAL or SIGTERM.
pub(crate) fn container_config(cfg: &ContainerConfig) -> v1::ContainerConfig {
    let r = &cfg.linux.resources;
    v1::ContainerConfig {
        metadata: Some(v1::ContainerMetadata {
            name: cfg.metadata.name.clone(),
            attempt: cfg.metadata.attempt,
        }),
        image: Some(v1::ImageSpec {
            image: cfg.image.clone(),
            ..Default::default()
        }),
        command: cfg.command.clone().unwrap_or_default(),
        args: cfg.args.clone().unwrap_or_default(),
        working_dir: cfg.working_dir.clone(),
        envs: cfg
            .envs
            .iter()
            .map(|(key, value)| v1::KeyValue {
                key: key.clone(),
                value: value.clone(),
            })
            .collect(),
        mounts: cfg
            .mounts
            .iter()
            .map(|m| v1::Mount {
                container_path: m.container_path.clone(),
                host_path: m.host_path.clone(),
                readonly: m.read_only,
                propagation: v1::MountPropagation::PropagationPrivate as i32,
                ..Default::default()
            })
            .collect(),
        labels: hash_map(&cfg.labels),
        log_path: cfg.log_path.clone(),
        stdin: cfg.stdin,
        stdin_once: cfg.stdin_once,
        tty: cfg.tty,
        linux: Some(v1::LinuxContainerConfig {
            resources: Some(v1::LinuxContainerResources {
                cpu_period: r.cpu_period,
                cpu_quota: r.cpu_quota,
                cpu_shares: r.cpu_shares,
                memory_limit_in_bytes: r.memory_limit,
                ..Default::default()
            }),
            security_context: Some(container_security(&cfg.linux.security_context)),
        }),
        ..Default::default()
    }
}

/// A CRI time (nanoseconds since the epoch) as a `SystemTime`; 0 (unset) and
/// negatives are the epoch.
fn time(nanos: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(u64::try_from(nanos).unwrap_or(0))
}

/// A CRI time that is 0 when unset.
fn time_if_set(nanos: i64) -> Option<SystemTime> {
    (nanos > 0).then(|| time(nanos))
}

fn container_state(state: i32) -> ContainerState {
    match v1::ContainerState::try_from(state) {
        Ok(v1::ContainerState::ContainerCreated) => ContainerState::Created,
        Ok(v1::ContainerState::ContainerRunning) => ContainerState::Running,
        Ok(v1::ContainerState::ContainerExited) => ContainerState::Exited,
        _ => ContainerState::Unknown,
    }
}

/// A sandbox is "running" while it is ready, as Docker's pause container is.
fn sandbox_state(state: i32) -> ContainerState {
    match v1::PodSandboxState::try_from(state) {
        Ok(v1::PodSandboxState::SandboxReady) => ContainerState::Running,
        Ok(v1::PodSandboxState::SandboxNotready) => ContainerState::Exited,
        Err(_) => ContainerState::Unknown,
    }
}

/// A sandbox's labels as the layers above read them: its own, with the
/// `io.kubernetes.docker.type` label that tells it from a container.
fn sandbox_labels(l: HashMap<String, String>) -> BTreeMap<String, String> {
    let mut l: BTreeMap<String, String> = l.into_iter().collect();
    l.entry(labels::DOCKER_TYPE.into())
        .or_insert_with(|| labels::TYPE_SANDBOX.into());
    l
}

fn container_labels(l: HashMap<String, String>) -> BTreeMap<String, String> {
    let mut l: BTreeMap<String, String> = l.into_iter().collect();
    l.entry(labels::DOCKER_TYPE.into())
        .or_insert_with(|| labels::TYPE_CONTAINER.into());
    l
}

/// The dockershim name of a sandbox (`k8s_POD_<pod>_<ns>_<uid>_<attempt>`), from
/// its metadata.
fn sandbox_name(m: Option<&v1::PodSandboxMetadata>) -> String {
    m.map(|m| labels::sandbox_name(&m.name, &m.namespace, &m.uid, m.attempt))
        .unwrap_or_default()
}

/// The dockershim name of a container, from its metadata and the pod labels the
/// kubelet put on it; a container made outside any pod keeps its metadata's name.
fn container_name(m: Option<&v1::ContainerMetadata>, l: &BTreeMap<String, String>) -> String {
    let Some(m) = m else {
        return String::new();
    };
    match (
        l.get(labels::POD_NAME),
        l.get(labels::POD_NAMESPACE),
        l.get(labels::POD_UID),
    ) {
        (Some(pod), Some(ns), Some(uid)) => {
            labels::container_name(&m.name, pod, ns, uid, m.attempt)
        }
        _ => m.name.clone(),
    }
}

pub(crate) fn sandbox_summary(s: v1::PodSandbox) -> ContainerSummary {
    ContainerSummary {
        name: sandbox_name(s.metadata.as_ref()),
        id: s.id,
        labels: sandbox_labels(s.labels),
        state: sandbox_state(s.state),
        image: String::new(),
        image_id: String::new(),
        created: time(s.created_at),
    }
}

fn image_id(image_id: String, image_ref: String) -> String {
    if image_id.is_empty() {
        image_ref
    } else {
        image_id
    }
}

pub(crate) fn container_summary(c: v1::Container) -> ContainerSummary {
    let labels = container_labels(c.labels);
    ContainerSummary {
        name: container_name(c.metadata.as_ref(), &labels),
        id: c.id,
        labels,
        state: container_state(c.state),
        image: c.image.map(|i| i.image).unwrap_or_default(),
        image_id: image_id(c.image_id, c.image_ref),
        created: time(c.created_at),
    }
}

/// A verbose answer's `info` JSON (containerd's), Null when absent.
fn info_json(info: &HashMap<String, String>) -> serde_json::Value {
    info.get("info")
        .and_then(|j| serde_json::from_str(j).ok())
        .unwrap_or_default()
}

/// The `pid` in a verbose answer's `info`, 0 when absent.
fn info_pid(info: &HashMap<String, String>) -> u32 {
    info_json(info)
        .get("pid")
        .and_then(|p| p.as_u64())
        .and_then(|p| u32::try_from(p).ok())
        .unwrap_or(0)
}

/// A container's status (verbose: its `info` gives the pid) as details.
pub(crate) fn container_details(
    s: v1::ContainerStatus,
    info: &HashMap<String, String>,
) -> ContainerDetails {
    let labels = container_labels(s.labels);
    let state = container_state(s.state);
    ContainerDetails {
        name: container_name(s.metadata.as_ref(), &labels),
        id: s.id,
        labels,
        state,
        image: s.image.map(|i| i.image).unwrap_or_default(),
        image_id: image_id(s.image_id, s.image_ref),
        created: time(s.created_at),
        started_at: time_if_set(s.started_at),
        finished_at: time_if_set(s.finished_at),
        exit_code: i64::from(s.exit_code),
        oom_killed: s.reason == "OOMKilled",
        error: s.message,
        pid: if state == ContainerState::Running {
            info_pid(info)
        } else {
            0
        },
        ip_address: String::new(),
        additional_ips: Vec::new(),
        host_network: false,
        stop_signal: String::new(),
        rootfs_dir: String::new(),
        log_path: s.log_path,
    }
}

/// A sandbox's status (verbose: its `info` gives the pause process's pid) as the
/// details of its "container": its address, whether it is on the node's network.
pub(crate) fn sandbox_details(
    s: v1::PodSandboxStatus,
    info: &HashMap<String, String>,
) -> ContainerDetails {
    let state = sandbox_state(s.state);
    let network = s.network.unwrap_or_default();
    let host_network = s
        .linux
        .and_then(|l| l.namespaces?.options)
        .is_some_and(|o| o.network == v1::NamespaceMode::Node as i32);
    ContainerDetails {
        name: sandbox_name(s.metadata.as_ref()),
        id: s.id,
        labels: sandbox_labels(s.labels),
        state,
        // The runtime's sandbox image, as containerd's verbose info names it.
        image: info_json(info)
            .get("image")
            .and_then(|i| i.as_str())
            .unwrap_or_default()
            .to_string(),
        image_id: String::new(),
        created: time(s.created_at),
        // A sandbox starts as it is made.
        started_at: time_if_set(s.created_at),
        finished_at: None,
        exit_code: 0,
        oom_killed: false,
        error: String::new(),
        pid: if state == ContainerState::Running {
            info_pid(info)
        } else {
            0
        },
        ip_address: network.ip,
        additional_ips: network.additional_ips.into_iter().map(|p| p.ip).collect(),
        host_network,
        stop_signal: String::new(),
        rootfs_dir: String::new(),
        log_path: String::new(),
    }
}

/// An image as details; a verbose `info` (containerd's `imageSpec.config`) gives its
/// entrypoint, cmd, user and stop signal.
pub(crate) fn image_details(i: v1::Image, info: &HashMap<String, String>) -> ImageDetails {
    let config = info_json(info)
        .get("imageSpec")
        .and_then(|s| s.get("config").cloned())
        .unwrap_or_default();
    let strings = |key: &str| -> Vec<String> {
        config
            .get(key)
            .and_then(|v| v.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let string = |key: &str| {
        config
            .get(key)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string()
    };
    let user = match (string("User"), i.uid) {
        (u, _) if !u.is_empty() => u,
        (_, Some(uid)) => uid.value.to_string(),
        _ => i.username.clone(),
    };
    ImageDetails {
        entrypoint: strings("Entrypoint"),
        cmd: strings("Cmd"),
        stop_signal: string("StopSignal"),
        user,
        id: i.id,
        repo_tags: i.repo_tags,
        repo_digests: i.repo_digests,
        size: i64::try_from(i.size).unwrap_or(i64::MAX),
    }
}

/// The cgroup driver of containerd's CRI config (verbose `Status`, `info["config"]`):
/// `systemd` when its default runtime's options say `SystemdCgroup` (runc v2) or the
/// legacy `systemdCgroup` is set, else `cgroupfs` ("" when there is no config).
pub(crate) fn cgroup_driver(config: &serde_json::Value) -> String {
    let Some(containerd) = config.get("containerd") else {
        return String::new();
    };
    let default = containerd
        .get("defaultRuntimeName")
        .and_then(|n| n.as_str())
        .unwrap_or("runc");
    let options = containerd
        .get("runtimes")
        .and_then(|r| r.get(default)?.get("options"));
    let systemd = options
        .and_then(|o| o.get("SystemdCgroup"))
        .and_then(|v| v.as_bool())
        .unwrap_or(false)
        || config.get("systemdCgroup").and_then(|v| v.as_bool()) == Some(true);
    if systemd { "systemd" } else { "cgroupfs" }.to_string()
}

/// Registry credentials as CRI's. A server address without a scheme gets `https://`:
/// containerd (1.6) parses it as a URL and refuses a bare `host:port` ("first path
/// segment in URL cannot contain colon"), and reads `host[:port]` back from the URL
/// as it would have for a bare host.
pub(crate) fn auth_config(a: &RegistryAuth) -> v1::AuthConfig {
    let server_address = if a.server_address.is_empty() || a.server_address.contains("://") {
        a.server_address.clone()
    } else {
        format!("https://{}", a.server_address)
    };
    v1::AuthConfig {
        username: a.username.clone(),
        password: a.password.clone(),
        server_address,
        ..Default::default()
    }
}

/// A CRI container event's kind.
pub(crate) fn event_kind(kind: i32) -> Option<ContainerEventType> {
    match v1::ContainerEventType::try_from(kind).ok()? {
        v1::ContainerEventType::ContainerCreatedEvent => Some(ContainerEventType::Created),
        v1::ContainerEventType::ContainerStartedEvent => Some(ContainerEventType::Started),
        v1::ContainerEventType::ContainerStoppedEvent => Some(ContainerEventType::Stopped),
        v1::ContainerEventType::ContainerDeletedEvent => Some(ContainerEventType::Deleted),
    }
}

/// The labels of the container an event is about, from the statuses it carries.
pub(crate) fn event_labels(e: &v1::ContainerEventResponse) -> BTreeMap<String, String> {
    match e
        .containers_statuses
        .iter()
        .find(|s| s.id == e.container_id)
    {
        Some(s) => container_labels(s.labels.clone()),
        None => match &e.pod_sandbox_status {
            Some(s) if s.id == e.container_id => sandbox_labels(s.labels.clone()),
            _ => BTreeMap::new(),
        },
    }
}

pub(crate) fn event_time(nanos: i64) -> SystemTime {
    time(nanos)
}

#[cfg(test)]
mod tests {
    use super::*;
    use runtime::config::{
        ContainerMetadata, LinuxContainerConfig, LinuxPodSandboxConfig,
        LinuxSandboxSecurityContext, Mount, PodSandboxMetadata, PortMapping, Resources,
    };

    #[test]
    fn label_filters_become_a_selector_and_bare_keys() {
        let filters = ["a=1".to_string(), "b".to_string(), "c=x=y".to_string()];
        let (selector, bare) = label_selector(&filters);
        assert_eq!(
            selector,
            HashMap::from([("a".into(), "1".into()), ("c".into(), "x=y".into())])
        );
        assert_eq!(bare, ["b"]);
        let labels: BTreeMap<String, String> = [("a", "1"), ("b", ""), ("c", "x=y")]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into();
        assert!(has_labels(&labels, &filters));
        let mut without_b = labels.clone();
        without_b.remove("b");
        assert!(!has_labels(&without_b, &filters));
        assert!(!has_labels(&labels, &["a=2".to_string()]));
    }

    #[test]
    fn a_sandbox_config_keeps_every_field() {
        let cfg = PodSandboxConfig {
            metadata: PodSandboxMetadata {
                name: "web".into(),
                uid: "u1".into(),
                namespace: "ns".into(),
                attempt: 2,
            },
            hostname: "web".into(),
            log_directory: "/var/log/pods/ns_web_u1".into(),
            port_mappings: vec![PortMapping {
                protocol: "udp".into(),
                container_port: 53,
                host_port: 5353,
                host_ip: "127.0.0.1".into(),
            }],
            labels: [("app".to_string(), "web".to_string())].into(),
            annotations: [(
                "kubernetes.io/ingress-bandwidth".to_string(),
                "1M".to_string(),
            )]
            .into(),
            linux: LinuxPodSandboxConfig {
                cgroup_parent: "/kubepods/podu1".into(),
                security_context: LinuxSandboxSecurityContext {
                    namespace_options: NamespaceOption {
                        network: NamespaceMode::Node,
                        pid: NamespaceMode::Container,
                        ipc: NamespaceMode::Pod,
                    },
                },
                sysctls: [("net.core.somaxconn".to_string(), "1024".to_string())].into(),
            },
        };
        let c = sandbox_config(&cfg);
        let m = c.metadata.clone().expect("metadata");
        assert_eq!(
            (
                m.name.as_str(),
                m.uid.as_str(),
                m.namespace.as_str(),
                m.attempt
            ),
            ("web", "u1", "ns", 2)
        );
        assert_eq!(c.hostname, "web");
        assert_eq!(c.log_directory, "/var/log/pods/ns_web_u1");
        assert_eq!(
            c.port_mappings,
            [v1::PortMapping {
                protocol: v1::Protocol::Udp as i32,
                container_port: 53,
                host_port: 5353,
                host_ip: "127.0.0.1".into()
            }]
        );
        assert_eq!(c.labels.get("app").map(String::as_str), Some("web"));
        assert_eq!(c.annotations.len(), 1);
        let linux = c.linux.expect("linux");
        assert_eq!(linux.cgroup_parent, "/kubepods/podu1");
        assert_eq!(
            linux.sysctls.get("net.core.somaxconn").map(String::as_str),
            Some("1024")
        );
        let ns = linux
            .security_context
            .and_then(|s| s.namespace_options)
            .expect("namespaces");
        assert_eq!(
            (ns.network, ns.pid, ns.ipc),
            (
                v1::NamespaceMode::Node as i32,
                v1::NamespaceMode::Container as i32,
                v1::NamespaceMode::Pod as i32
            )
        );
    }

    #[test]
    #[allow(deprecated)]
    fn a_container_config_keeps_every_field() {
        let cfg = ContainerConfig {
            metadata: ContainerMetadata {
                name: "app".into(),
                attempt: 3,
            },
            image: "busybox:1.35".into(),
            command: Some(vec!["sh".into()]),
            args: Some(vec!["-c".into(), "true".into()]),
            working_dir: "/w".into(),
            envs: vec![("A".into(), "1".into())],
            mounts: vec![Mount {
                host_path: "/h".into(),
                container_path: "/c".into(),
                read_only: true,
            }],
            labels: [("l".to_string(), "v".to_string())].into(),
            log_path: "app/3.log".into(),
            stdin: true,
            stdin_once: true,
            tty: true,
            linux: LinuxContainerConfig {
                resources: Resources {
                    cpu_shares: 512,
                    cpu_quota: 50_000,
                    cpu_period: 100_000,
                    memory_limit: 1 << 26,
                },
                security_context: LinuxContainerSecurityContext {
                    add_capabilities: vec!["NET_ADMIN".into()],
                    drop_capabilities: vec!["ALL".into()],
                    privileged: false,
                    namespace_options: NamespaceOption {
                        pid: NamespaceMode::Container,
                        ..NamespaceOption::default()
                    },
                    run_as_user: Some(1000),
                    run_as_username: String::new(),
                    run_as_group: Some(2000),
                    supplemental_groups: vec![3000],
                    readonly_rootfs: true,
                    no_new_privs: true,
                    seccomp: SecurityProfile::Localhost("/p.json".into()),
                },
            },
            stop_signal: String::new(),
        };
        let c = container_config(&cfg);
        assert_eq!(
            c.metadata,
            Some(v1::ContainerMetadata {
                name: "app".into(),
                attempt: 3
            })
        );
        assert_eq!(c.image.map(|i| i.image).as_deref(), Some("busybox:1.35"));
        assert_eq!(
            (c.command, c.args),
            (
                vec!["sh".to_string()],
                vec!["-c".to_string(), "true".to_string()]
            )
        );
        assert_eq!(c.working_dir, "/w");
        assert_eq!(
            c.envs,
            [v1::KeyValue {
                key: "A".into(),
                value: "1".into()
            }]
        );
        assert_eq!(c.mounts.len(), 1);
        assert_eq!(
            (
                c.mounts[0].host_path.as_str(),
                c.mounts[0].container_path.as_str(),
                c.mounts[0].readonly
            ),
            ("/h", "/c", true)
        );
        assert_eq!(c.labels.get("l").map(String::as_str), Some("v"));
        assert_eq!(c.log_path, "app/3.log");
        assert!(c.stdin && c.stdin_once && c.tty);
        let linux = c.linux.expect("linux");
        let r = linux.resources.expect("resources");
        assert_eq!(
            (
                r.cpu_shares,
                r.cpu_quota,
                r.cpu_period,
                r.memory_limit_in_bytes
            ),
            (512, 50_000, 100_000, 1 << 26)
        );
        let sc = linux.security_context.expect("security context");
        let caps = sc.capabilities.expect("capabilities");
        assert_eq!(
            (caps.add_capabilities, caps.drop_capabilities),
            (vec!["NET_ADMIN".to_string()], vec!["ALL".to_string()])
        );
        assert_eq!(sc.run_as_user, Some(v1::Int64Value { value: 1000 }));
        assert_eq!(sc.run_as_group, Some(v1::Int64Value { value: 2000 }));
        assert_eq!(sc.supplemental_groups, [3000]);
        assert!(sc.readonly_rootfs && sc.no_new_privs && !sc.privileged);
        assert_eq!(
            sc.namespace_options.map(|n| n.pid),
            Some(v1::NamespaceMode::Container as i32)
        );
        assert_eq!(
            sc.seccomp,
            Some(v1::SecurityProfile {
                profile_type: v1::security_profile::ProfileType::Localhost as i32,
                localhost_ref: "/p.json".into()
            })
        );
        assert_eq!(sc.seccomp_profile_path, "localhost//p.json");
    }

    #[test]
    fn an_image_default_command_stays_unset() {
        let c = container_config(&ContainerConfig::named("x", "busybox"));
        assert!(c.command.is_empty() && c.args.is_empty());
        let sc = c
            .linux
            .and_then(|l| l.security_context)
            .expect("security context");
        assert_eq!(
            sc.seccomp.map(|s| s.profile_type),
            Some(v1::security_profile::ProfileType::Unconfined as i32)
        );
    }

    #[test]
    fn summaries_carry_dockershim_names_and_the_type_label() {
        let s = sandbox_summary(v1::PodSandbox {
            id: "s1".into(),
            metadata: Some(v1::PodSandboxMetadata {
                name: "web".into(),
                uid: "u1".into(),
                namespace: "ns".into(),
                attempt: 1,
            }),
            state: v1::PodSandboxState::SandboxNotready as i32,
            created_at: 1_500_000_000,
            ..Default::default()
        });
        assert_eq!(s.name, "k8s_POD_web_ns_u1_1");
        assert_eq!(labels::parse_name(&s.name).map(|p| p.attempt), Some(1));
        assert_eq!(s.state, ContainerState::Exited);
        assert_eq!(
            s.labels.get(labels::DOCKER_TYPE).map(String::as_str),
            Some(labels::TYPE_SANDBOX)
        );
        assert_eq!(s.created, UNIX_EPOCH + Duration::from_millis(1500));

        let c = container_summary(v1::Container {
            id: "c1".into(),
            metadata: Some(v1::ContainerMetadata {
                name: "app".into(),
                attempt: 4,
            }),
            labels: [
                (labels::POD_NAME, "web"),
                (labels::POD_NAMESPACE, "ns"),
                (labels::POD_UID, "u1"),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into(),
            state: v1::ContainerState::ContainerRunning as i32,
            image_ref: "sha256:abc".into(),
            ..Default::default()
        });
        assert_eq!(c.name, "k8s_app_web_ns_u1_4");
        assert_eq!(c.state, ContainerState::Running);
        assert_eq!(c.image_id, "sha256:abc");
        assert_eq!(
            c.labels.get(labels::DOCKER_TYPE).map(String::as_str),
            Some(labels::TYPE_CONTAINER)
        );
    }

    #[test]
    fn details_read_oom_kills_pids_and_sandbox_networks() {
        let info = HashMap::from([("info".to_string(), r#"{"pid": 4242, "x": 1}"#.to_string())]);
        let d = container_details(
            v1::ContainerStatus {
                id: "c".into(),
                state: v1::ContainerState::ContainerExited as i32,
                exit_code: 137,
                reason: "OOMKilled".into(),
                started_at: 5,
                log_path: "/l/0.log".into(),
                ..Default::default()
            },
            &info,
        );
        assert!(d.oom_killed);
        assert_eq!((d.exit_code, d.pid, d.finished_at), (137, 0, None));
        assert_eq!(d.started_at, Some(UNIX_EPOCH + Duration::from_nanos(5)));
        assert_eq!(d.log_path, "/l/0.log");

        let s = sandbox_details(
            v1::PodSandboxStatus {
                id: "s".into(),
                state: v1::PodSandboxState::SandboxReady as i32,
                network: Some(v1::PodSandboxNetworkStatus {
                    ip: "10.1.2.3".into(),
                    additional_ips: vec![v1::PodIp {
                        ip: "fd00::3".into(),
                    }],
                }),
                linux: Some(v1::LinuxPodSandboxStatus {
                    namespaces: Some(v1::Namespace {
                        options: Some(v1::NamespaceOption {
                            network: v1::NamespaceMode::Node as i32,
                            ..Default::default()
                        }),
                    }),
                }),
                ..Default::default()
            },
            &info,
        );
        assert_eq!(s.state, ContainerState::Running);
        assert_eq!((s.ip_address.as_str(), s.pid), ("10.1.2.3", 4242));
        assert_eq!(s.additional_ips, ["fd00::3"]);
        assert!(s.host_network);
    }

    #[test]
    fn image_details_read_the_verbose_image_config() {
        let info = HashMap::from([(
            "info".to_string(),
            r#"{"imageSpec":{"config":{"Entrypoint":["/pause"],"Cmd":["a"],"User":"65535","StopSignal":"SIGINT"}}}"#
                .to_string(),
        )]);
        let i = image_details(
            v1::Image {
                id: "sha256:1".into(),
                repo_tags: vec!["docker.io/x:1".into()],
                size: 10,
                ..Default::default()
            },
            &info,
        );
        assert_eq!(i.entrypoint, ["/pause"]);
        assert_eq!(i.cmd, ["a"]);
        assert_eq!(
            (i.user.as_str(), i.stop_signal.as_str(), i.size),
            ("65535", "SIGINT", 10)
        );
    }

    #[test]
    fn the_cgroup_driver_is_read_from_containerds_config() {
        let systemd: serde_json::Value = serde_json::from_str(
            r#"{"containerd":{"defaultRuntimeName":"runc","runtimes":{"runc":{"options":{"SystemdCgroup":true}}}}}"#,
        )
        .expect("json");
        assert_eq!(cgroup_driver(&systemd), "systemd");
        let plain: serde_json::Value = serde_json::from_str(
            r#"{"containerd":{"defaultRuntimeName":"runc","runtimes":{"runc":{"options":null}}}}"#,
        )
        .expect("json");
        assert_eq!(cgroup_driver(&plain), "cgroupfs");
        assert_eq!(cgroup_driver(&serde_json::Value::Null), "");
    }

    #[test]
    fn registry_addresses_are_sent_as_urls() {
        let auth = |server: &str| RegistryAuth {
            username: "u".into(),
            password: "p".into(),
            server_address: server.into(),
        };
        let a = auth_config(&auth("127.0.0.1:5000"));
        assert_eq!(
            (
                a.username.as_str(),
                a.password.as_str(),
                a.server_address.as_str()
            ),
            ("u", "p", "https://127.0.0.1:5000")
        );
        assert_eq!(
            auth_config(&auth("https://index.docker.io/v1/")).server_address,
            "https://index.docker.io/v1/"
        );
        assert_eq!(auth_config(&auth("")).server_address, "");
    }

    #[test]
    fn event_kinds_map_to_the_neutral_ones() {
        assert_eq!(
            event_kind(v1::ContainerEventType::ContainerStoppedEvent as i32),
            Some(ContainerEventType::Stopped)
        );
        assert_eq!(event_kind(99), None);
    }
}
