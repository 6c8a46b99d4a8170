//! Docker's models (`bollard-stubs`, the Engine API's own generated types) mapped to and
//! from the runtime-neutral types of [`crate::runtime`]: container summaries and
//! details, the create body (host config, namespaces, mounts, ports, resources,
//! security options), images and events. Pure functions: no I/O here.

use std::collections::{BTreeMap, HashMap};
use std::time::UNIX_EPOCH;

use bollard_stubs::models as api;

use super::wire::{docker_time, unix_nanos, unix_secs};
use crate::runtime::{
    ContainerConfig, ContainerDetails, ContainerState, ContainerSummary, ImageDetails,
    NamespaceMode, RuntimeEvent,
};

pub(super) fn labels_from(labels: Option<HashMap<String, String>>) -> BTreeMap<String, String> {
    labels.unwrap_or_default().into_iter().collect()
}

/// Docker's container states folded into CRI's four (as dockershim's
/// `toRuntimeAPIContainerState`): a paused or restarting container still has its
/// process.
pub(super) fn state_from(status: Option<api::ContainerStateStatusEnum>) -> ContainerState {
    use api::ContainerStateStatusEnum as S;
    match status {
        Some(S::RUNNING | S::PAUSED | S::RESTARTING | S::STOPPING) => ContainerState::Running,
        Some(S::EXITED | S::DEAD) => ContainerState::Exited,
        Some(S::CREATED) => ContainerState::Created,
        Some(S::REMOVING | S::EMPTY) | None => ContainerState::Unknown,
    }
}

pub(super) fn summary_state(status: Option<api::ContainerSummaryStateEnum>) -> ContainerState {
    use api::ContainerSummaryStateEnum as S;
    match status {
        Some(S::RUNNING | S::PAUSED | S::RESTARTING | S::STOPPING) => ContainerState::Running,
        Some(S::EXITED | S::DEAD) => ContainerState::Exited,
        Some(S::CREATED) => ContainerState::Created,
        Some(S::REMOVING | S::EMPTY) | None => ContainerState::Unknown,
    }
}

/// Docker names carry a leading `/`.
pub(super) fn bare_name(name: &str) -> String {
    name.strip_prefix('/').unwrap_or(name).to_string()
}

pub(super) fn summary_from(c: api::ContainerSummary) -> ContainerSummary {
    ContainerSummary {
        id: c.id.unwrap_or_default(),
        name: c
            .names
            .and_then(|names| names.into_iter().next())
            .map(|n| bare_name(&n))
            .unwrap_or_default(),
        labels: labels_from(c.labels),
        state: summary_state(c.state),
        image: c.image.unwrap_or_default(),
        image_id: c.image_id.unwrap_or_default(),
        created: unix_secs(c.created.unwrap_or(0)),
    }
}

/// The container's IPv4 address: on the default bridge if attached, else on the
/// first network (by name) that gave it one. Empty for host or joined networks.
pub(super) fn ip_address(settings: Option<&api::NetworkSettings>) -> String {
    let Some(networks) = settings.and_then(|s| s.networks.as_ref()) else {
        return String::new();
    };
    let ip = |name: &str| {
        networks
            .get(name)
            .and_then(|n| n.ip_address.clone())
            .filter(|ip| !ip.is_empty())
    };
    if let Some(ip) = ip("bridge") {
        return ip;
    }
    let mut names: Vec<&String> = networks.keys().collect();
    names.sort();
    names.into_iter().find_map(|n| ip(n)).unwrap_or_default()
}

pub(super) fn details_from(c: api::ContainerInspectResponse) -> ContainerDetails {
    let state = c.state.unwrap_or_default();
    let config = c.config.unwrap_or_default();
    let mut settings = settings_from(&config, c.host_config.as_ref());
    settings.rootfs_dir = c
        .graph_driver
        .as_ref()
        .and_then(|g| g.data.get("UpperDir").cloned())
        .unwrap_or_default();
    ContainerDetails {
        id: c.id.unwrap_or_default(),
        name: bare_name(c.name.as_deref().unwrap_or_default()),
        labels: labels_from(config.labels),
        state: state_from(state.status),
        image: config.image.unwrap_or_default(),
        image_id: c.image.unwrap_or_default(),
        created: c
            .created
            .as_deref()
            .and_then(docker_time)
            .unwrap_or(UNIX_EPOCH),
        started_at: state.started_at.as_deref().and_then(docker_time),
        finished_at: state.finished_at.as_deref().and_then(docker_time),
        exit_code: state.exit_code.unwrap_or(0),
        oom_killed: state.oom_killed.unwrap_or(false),
        error: state.error.unwrap_or_default(),
        pid: state.pid.and_then(|p| u32::try_from(p).ok()).unwrap_or(0),
        ip_address: ip_address(c.network_settings.as_ref()),
        network_mode: c
            .host_config
            .and_then(|h| h.network_mode)
            .unwrap_or_default(),
        settings,
        log_path: c.log_path.unwrap_or_default(),
    }
}

/// What a container was created with, from its inspect answer.
pub(super) fn settings_from(
    config: &api::ContainerConfig,
    host: Option<&api::HostConfig>,
) -> crate::runtime::ContainerSettings {
    let h = host.cloned().unwrap_or_default();
    let mut ports: Vec<crate::runtime::PortBinding> = Vec::new();
    let mut keys: Vec<&String> = h.port_bindings.iter().flatten().map(|(k, _)| k).collect();
    keys.sort();
    for key in keys {
        let (port, proto) = key.split_once('/').unwrap_or((key.as_str(), "tcp"));
        let Ok(container_port) = port.parse::<u16>() else {
            continue;
        };
        let bindings = h
            .port_bindings
            .as_ref()
            .and_then(|m| m.get(key).cloned())
            .flatten()
            .unwrap_or_default();
        for b in bindings {
            ports.push(crate::runtime::PortBinding {
                container_port,
                host_port: b
                    .host_port
                    .as_deref()
                    .and_then(|p| p.parse().ok())
                    .unwrap_or(0),
                host_ip: b.host_ip.unwrap_or_default(),
                protocol: proto.to_string(),
            });
        }
    }
    crate::runtime::ContainerSettings {
        entrypoint: config.entrypoint.clone().unwrap_or_default(),
        cmd: config.cmd.clone().unwrap_or_default(),
        env: config.env.clone().unwrap_or_default(),
        working_dir: config.working_dir.clone().unwrap_or_default(),
        user: config.user.clone().unwrap_or_default(),
        hostname: config.hostname.clone().unwrap_or_default(),
        resources: crate::runtime::Resources {
            cpu_shares: h.cpu_shares.unwrap_or(0),
            cpu_quota: h.cpu_quota.unwrap_or(0),
            cpu_period: h.cpu_period.unwrap_or(0),
            memory_limit: h.memory.unwrap_or(0),
        },
        cgroup_parent: h.cgroup_parent.clone().unwrap_or_default(),
        binds: h.binds.unwrap_or_default(),
        ports,
        ipc_mode: h.ipc_mode.unwrap_or_default(),
        pid_mode: h.pid_mode.unwrap_or_default(),
        group_add: h.group_add.unwrap_or_default(),
        privileged: h.privileged.unwrap_or(false),
        cap_add: h.cap_add.unwrap_or_default(),
        cap_drop: h.cap_drop.unwrap_or_default(),
        read_only_rootfs: h.readonly_rootfs.unwrap_or(false),
        security_opt: h.security_opt.unwrap_or_default(),
        stdin: config.open_stdin.unwrap_or(false),
        tty: config.tty.unwrap_or(false),
        stop_signal: config.stop_signal.clone().unwrap_or_default(),
        rootfs_dir: String::new(),
    }
}

/// Which namespace a mode string is for: the same neutral mode is spelled differently
/// per namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Namespace {
    Network,
    Ipc,
    Pid,
}

/// Docker's mode string for a namespace, or None to leave Docker's default.
pub(super) fn namespace_mode(ns: Namespace, mode: &NamespaceMode) -> Option<String> {
    match (ns, mode) {
        (_, NamespaceMode::Host) => Some("host".to_string()),
        (_, NamespaceMode::Container(id)) => Some(format!("container:{id}")),
        // Every network namespace can be joined; "default" is the bridge.
        (Namespace::Network, NamespaceMode::Private | NamespaceMode::Shareable) => {
            Some("default".to_string())
        }
        // Docker 20.10's default IPC mode is private, which others cannot join.
        (Namespace::Ipc, NamespaceMode::Private) => Some("private".to_string()),
        (Namespace::Ipc, NamespaceMode::Shareable) => Some("shareable".to_string()),
        // A private PID namespace is Docker's default and has no name.
        (Namespace::Pid, NamespaceMode::Private | NamespaceMode::Shareable) => None,
    }
}

pub(super) fn non_empty<T>(v: &[T]) -> Option<Vec<T>>
where
    T: Clone,
{
    (!v.is_empty()).then(|| v.to_vec())
}

pub(super) fn non_empty_str(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

pub(super) fn non_zero(n: i64) -> Option<i64> {
    (n != 0).then_some(n)
}

/// The create request for a neutral container config.
pub(super) fn create_body(cfg: &ContainerConfig) -> api::ContainerCreateBody {
    let mut port_bindings: HashMap<String, Option<Vec<api::PortBinding>>> = HashMap::new();
    let mut exposed: Vec<String> = Vec::new();
    for p in &cfg.ports {
        let key = format!("{}/{}", p.container_port, p.protocol.to_ascii_lowercase());
        if !exposed.contains(&key) {
            exposed.push(key.clone());
        }
        port_bindings
            .entry(key)
            .or_default()
            .get_or_insert_with(Vec::new)
            .push(api::PortBinding {
                host_ip: Some(cfg_host_ip(&p.host_ip)),
                host_port: Some(p.host_port.to_string()),
            });
    }
    let binds: Vec<String> = cfg
        .mounts
        .iter()
        .map(|m| {
            let mut b = format!("{}:{}", m.host_path, m.container_path);
            if m.read_only {
                b.push_str(":ro");
            }
            b
        })
        .collect();
    let r = &cfg.resources;
    let host_config = api::HostConfig {
        network_mode: cfg
            .network
            .as_ref()
            .and_then(|m| namespace_mode(Namespace::Network, m)),
        ipc_mode: cfg
            .ipc
            .as_ref()
            .and_then(|m| namespace_mode(Namespace::Ipc, m)),
        pid_mode: cfg
            .pid
            .as_ref()
            .and_then(|m| namespace_mode(Namespace::Pid, m)),
        binds: non_empty(&binds),
        port_bindings: (!port_bindings.is_empty()).then_some(port_bindings),
        cpu_shares: non_zero(r.cpu_shares),
        cpu_quota: non_zero(r.cpu_quota),
        cpu_period: non_zero(r.cpu_period),
        memory: non_zero(r.memory_limit),
        cgroup_parent: non_empty_str(&cfg.cgroup_parent),
        group_add: non_empty(&cfg.group_add),
        privileged: Some(cfg.privileged),
        cap_add: non_empty(&cfg.cap_add),
        cap_drop: non_empty(&cfg.cap_drop),
        readonly_rootfs: Some(cfg.read_only_rootfs),
        security_opt: non_empty(&cfg.security_opt),
        dns: non_empty(&cfg.dns),
        dns_search: non_empty(&cfg.dns_search),
        dns_options: non_empty(&cfg.dns_options),
        extra_hosts: non_empty(&cfg.extra_hosts),
        log_config: cfg.log_rotation.map(|r| api::HostConfigLogConfig {
            typ: Some("json-file".into()),
            config: Some(HashMap::from([
                ("max-size".to_string(), r.max_size.to_string()),
                ("max-file".to_string(), r.max_files.to_string()),
            ])),
        }),
        ..Default::default()
    };
    api::ContainerCreateBody {
        image: Some(cfg.image.clone()),
        // None keeps the image's; Some(vec![]) is sent as [] and clears it.
        entrypoint: cfg.entrypoint.clone(),
        cmd: cfg.cmd.clone(),
        env: non_empty(&cfg.env),
        working_dir: non_empty_str(&cfg.working_dir),
        labels: Some(cfg.labels.clone().into_iter().collect()),
        hostname: non_empty_str(&cfg.hostname),
        user: non_empty_str(&cfg.user),
        exposed_ports: non_empty(&exposed),
        open_stdin: Some(cfg.stdin),
        stdin_once: Some(cfg.stdin_once),
        tty: Some(cfg.tty),
        stop_signal: non_empty_str(&cfg.stop_signal),
        host_config: Some(host_config),
        ..Default::default()
    }
}

/// "" (all addresses) is what Docker expects for "any"; 0.0.0.0 means the same.
pub(super) fn cfg_host_ip(ip: &str) -> String {
    if ip == "0.0.0.0" {
        String::new()
    } else {
        ip.to_string()
    }
}

pub(super) fn image_from_inspect(i: api::ImageInspect) -> ImageDetails {
    let config = i.config.unwrap_or_default();
    ImageDetails {
        id: i.id.unwrap_or_default(),
        repo_tags: i.repo_tags.unwrap_or_default(),
        repo_digests: i.repo_digests.unwrap_or_default(),
        size: i.size.unwrap_or(0),
        entrypoint: config.entrypoint.unwrap_or_default(),
        cmd: config.cmd.unwrap_or_default(),
        user: config.user.unwrap_or_default(),
        stop_signal: config.stop_signal.unwrap_or_default(),
    }
}

/// An image from the list call, which carries no image config: `entrypoint`, `cmd`,
/// `user` and `stop_signal` are empty (use [`Runtime::inspect_image`] for them).
pub(super) fn image_from_summary(i: api::ImageSummary) -> ImageDetails {
    ImageDetails {
        id: i.id,
        // Untagged images are listed as `<none>:<none>`, which is not a reference.
        repo_tags: i
            .repo_tags
            .into_iter()
            .filter(|t| !t.starts_with("<none>"))
            .collect(),
        repo_digests: i
            .repo_digests
            .into_iter()
            .filter(|d| !d.starts_with("<none>"))
            .collect(),
        size: i.size,
        entrypoint: Vec::new(),
        cmd: Vec::new(),
        user: String::new(),
        stop_signal: String::new(),
    }
}

/// Attributes that Docker adds to a container event beside the container's labels.
pub(super) const EVENT_ATTRIBUTES: &[&str] = &["name", "image", "exitCode", "signal", "execID"];

pub(super) fn event_from(m: api::EventMessage) -> Option<RuntimeEvent> {
    let actor = m.actor?;
    let id = actor.id.filter(|id| !id.is_empty())?;
    let labels = actor
        .attributes
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| !EVENT_ATTRIBUTES.contains(&k.as_str()))
        .collect();
    let time = match (m.time_nano, m.time) {
        (Some(nanos), _) => unix_nanos(nanos),
        (None, Some(secs)) => unix_secs(secs),
        (None, None) => UNIX_EPOCH,
    };
    Some(RuntimeEvent {
        id,
        action: m.action.unwrap_or_default(),
        labels,
        time,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{Mount, PortBinding, Resources};
    use std::time::Duration;

    fn to_json(cfg: &ContainerConfig) -> serde_json::Value {
        serde_json::to_value(create_body(cfg)).expect("serializes")
    }

    #[test]
    fn create_body_leaves_image_defaults_unset() {
        let cfg = ContainerConfig {
            name: "k8s_app".into(),
            image: "rkubelet/busybox:1.35".into(),
            ..Default::default()
        };
        let v = to_json(&cfg);
        assert_eq!(v["Image"], "rkubelet/busybox:1.35");
        for absent in [
            "Entrypoint",
            "Cmd",
            "Env",
            "WorkingDir",
            "User",
            "Hostname",
            "ExposedPorts",
        ] {
            assert!(v.get(absent).is_none(), "{absent} should be unset: {v}");
        }
        let hc = &v["HostConfig"];
        for absent in [
            "NetworkMode",
            "IpcMode",
            "PidMode",
            "Binds",
            "PortBindings",
            "Memory",
        ] {
            assert!(hc.get(absent).is_none(), "{absent} should be unset: {hc}");
        }
    }

    #[test]
    fn create_body_sends_an_explicitly_empty_entrypoint() {
        let cfg = ContainerConfig {
            entrypoint: Some(vec![]),
            cmd: Some(vec!["sh".into(), "-c".into(), "true".into()]),
            ..Default::default()
        };
        let v = to_json(&cfg);
        assert_eq!(v["Entrypoint"], serde_json::json!([]));
        assert_eq!(v["Cmd"], serde_json::json!(["sh", "-c", "true"]));
    }

    #[test]
    fn create_body_maps_namespaces_mounts_ports_and_resources() {
        let cfg = ContainerConfig {
            network: Some(NamespaceMode::Container("abc".into())),
            ipc: Some(NamespaceMode::Shareable),
            pid: Some(NamespaceMode::Host),
            mounts: vec![
                Mount {
                    host_path: "/h".into(),
                    container_path: "/c".into(),
                    read_only: true,
                },
                Mount {
                    host_path: "/h2".into(),
                    container_path: "/c2".into(),
                    read_only: false,
                },
            ],
            ports: vec![
                PortBinding {
                    container_port: 80,
                    host_port: 8080,
                    host_ip: "".into(),
                    protocol: "TCP".into(),
                },
                PortBinding {
                    container_port: 80,
                    host_port: 8081,
                    host_ip: "127.0.0.1".into(),
                    protocol: "tcp".into(),
                },
            ],
            resources: Resources {
                cpu_shares: 512,
                cpu_quota: 50_000,
                cpu_period: 100_000,
                memory_limit: 64 << 20,
            },
            cap_add: vec!["NET_ADMIN".into()],
            stop_signal: "SIGINT".into(),
            ..Default::default()
        };
        let v = to_json(&cfg);
        let hc = &v["HostConfig"];
        assert_eq!(hc["NetworkMode"], "container:abc");
        assert_eq!(hc["IpcMode"], "shareable");
        assert_eq!(hc["PidMode"], "host");
        assert_eq!(hc["Binds"], serde_json::json!(["/h:/c:ro", "/h2:/c2"]));
        assert_eq!(
            hc["PortBindings"]["80/tcp"],
            serde_json::json!([
                {"HostIp": "", "HostPort": "8080"},
                {"HostIp": "127.0.0.1", "HostPort": "8081"}
            ])
        );
        assert_eq!(v["ExposedPorts"], serde_json::json!({"80/tcp": {}}));
        assert_eq!(hc["CpuShares"], 512);
        assert_eq!(hc["CpuQuota"], 50_000);
        assert_eq!(hc["CpuPeriod"], 100_000);
        assert_eq!(hc["Memory"], 64 << 20);
        assert_eq!(hc["CapAdd"], serde_json::json!(["NET_ADMIN"]));
        assert_eq!(v["StopSignal"], "SIGINT");
    }

    #[test]
    fn namespace_modes_are_spelled_per_namespace() {
        use Namespace::*;
        use NamespaceMode as M;
        assert_eq!(
            namespace_mode(Network, &M::Private).as_deref(),
            Some("default")
        );
        assert_eq!(namespace_mode(Ipc, &M::Private).as_deref(), Some("private"));
        assert_eq!(
            namespace_mode(Ipc, &M::Shareable).as_deref(),
            Some("shareable")
        );
        assert_eq!(namespace_mode(Pid, &M::Private), None);
        assert_eq!(namespace_mode(Ipc, &M::Host).as_deref(), Some("host"));
        assert_eq!(
            namespace_mode(Network, &M::Container("x".into())).as_deref(),
            Some("container:x")
        );
    }

    #[test]
    fn inspect_maps_states_times_and_addresses() {
        let json = serde_json::json!({
            "Id": "abc",
            "Name": "/k8s_app",
            "Created": "2024-05-01T12:34:56.5Z",
            "Image": "sha256:img",
            "State": {
                "Status": "exited", "Running": false, "Paused": false, "Restarting": false,
                "OOMKilled": true, "Dead": false, "Pid": 0, "ExitCode": 3, "Error": "",
                "StartedAt": "2024-05-01T12:34:57Z", "FinishedAt": "0001-01-01T00:00:00Z"
            },
            "Config": {"Image": "busybox", "Labels": {"a": "b"}},
            "HostConfig": {"NetworkMode": "default"},
            "NetworkSettings": {"Networks": {
                "zeta": {"IPAddress": "10.0.0.9"},
                "bridge": {"IPAddress": "172.17.0.2"}
            }}
        });
        let c: api::ContainerInspectResponse = serde_json::from_value(json).expect("decodes");
        let d = details_from(c);
        assert_eq!(d.name, "k8s_app");
        assert_eq!(d.state, ContainerState::Exited);
        assert_eq!(d.exit_code, 3);
        assert!(d.oom_killed);
        assert_eq!(d.image, "busybox");
        assert_eq!(d.image_id, "sha256:img");
        assert_eq!(d.labels.get("a").map(String::as_str), Some("b"));
        assert_eq!(
            d.started_at,
            Some(UNIX_EPOCH + Duration::from_secs(1_714_566_897))
        );
        assert_eq!(d.finished_at, None);
        assert_eq!(
            d.created,
            UNIX_EPOCH + Duration::from_millis(1_714_566_896_500)
        );
        assert_eq!(d.ip_address, "172.17.0.2");
        assert_eq!(d.network_mode, "default");
    }

    #[test]
    fn docker_states_fold_into_four() {
        use api::ContainerStateStatusEnum as S;
        assert_eq!(state_from(Some(S::PAUSED)), ContainerState::Running);
        assert_eq!(state_from(Some(S::RESTARTING)), ContainerState::Running);
        assert_eq!(state_from(Some(S::DEAD)), ContainerState::Exited);
        assert_eq!(state_from(Some(S::CREATED)), ContainerState::Created);
        assert_eq!(state_from(None), ContainerState::Unknown);
    }

    #[test]
    fn events_keep_labels_but_not_dockers_own_attributes() {
        let json = serde_json::json!({
            "Type": "container", "Action": "die", "scope": "local",
            "Actor": {"ID": "abc", "Attributes": {
                "name": "k8s_x", "image": "busybox", "exitCode": "3", "rkubelet.test": "1"
            }},
            "time": 1, "timeNano": 1_500_000_000i64
        });
        let m: api::EventMessage = serde_json::from_value(json).expect("decodes");
        let e = event_from(m).expect("an event");
        assert_eq!(e.id, "abc");
        assert_eq!(e.action, "die");
        assert_eq!(e.labels.len(), 1);
        assert_eq!(e.labels.get("rkubelet.test").map(String::as_str), Some("1"));
        assert_eq!(e.time, UNIX_EPOCH + Duration::from_millis(1500));
    }
}
