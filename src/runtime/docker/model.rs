//! Docker's models mapped to and from the runtime-neutral types of [`crate::runtime`]:
//! container summaries and details, the create body (host config, namespaces, mounts,
//! ports, resources, security options), images and events. Pure functions: no I/O here.
//!
//! What is sent, and events, use `bollard-stubs` (the Engine API's own generated
//! types). The answers are decoded into the few fields read: containers
//! ([`ListedContainer`], [`Inspect`]; every relist, resync and stats refresh), images
//! ([`ListedImage`], [`InspectedImage`]) and the version ([`Version`]). serde skips the
//! rest without building it (an inspect is ~8 KiB of JSON, mostly host config and
//! network endpoints), and the generated decoders of bollard's whole models (an image's
//! manifests, signatures and build identities among them: ~90 KiB of code) stay out
//! of the binary.

use std::collections::{BTreeMap, HashMap};
use std::time::UNIX_EPOCH;

use bollard_stubs::models as api;
use serde::Deserialize;

use super::wire::{docker_time, unix_nanos, unix_secs};
use crate::runtime::{
    ContainerConfig, ContainerDetails, ContainerState, ContainerSummary, ImageDetails,
    NamespaceMode, RuntimeEvent,
};

pub(super) fn labels_from(labels: Option<HashMap<String, String>>) -> BTreeMap<String, String> {
    crate::sort::map(labels.unwrap_or_default())
}

/// One container of `GET /containers/json`, as far as it is read.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(super) struct ListedContainer {
    id: Option<String>,
    names: Option<Vec<String>>,
    labels: Option<HashMap<String, String>>,
    state: Option<String>,
    image: Option<String>,
    #[serde(rename = "ImageID")]
    image_id: Option<String>,
    created: Option<i64>,
}

/// `GET /containers/{id}/json`, as far as it is read.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(super) struct Inspect {
    id: Option<String>,
    name: Option<String>,
    created: Option<String>,
    image: Option<String>,
    state: Option<InspectState>,
    pub(super) config: Option<InspectConfig>,
    host_config: Option<InspectHostConfig>,
    graph_driver: Option<InspectGraphDriver>,
    network_settings: Option<InspectNetworkSettings>,
    log_path: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct InspectState {
    status: Option<String>,
    started_at: Option<String>,
    finished_at: Option<String>,
    exit_code: Option<i64>,
    #[serde(rename = "OOMKilled")]
    oom_killed: Option<bool>,
    error: Option<String>,
    pid: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(super) struct InspectConfig {
    labels: Option<HashMap<String, String>>,
    image: Option<String>,
    entrypoint: Option<Vec<String>>,
    cmd: Option<Vec<String>>,
    env: Option<Vec<String>>,
    working_dir: Option<String>,
    user: Option<String>,
    hostname: Option<String>,
    open_stdin: Option<bool>,
    pub(super) tty: Option<bool>,
    stop_signal: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct InspectHostConfig {
    cpu_shares: Option<i64>,
    cpu_quota: Option<i64>,
    cpu_period: Option<i64>,
    memory: Option<i64>,
    cgroup_parent: Option<String>,
    binds: Option<Vec<String>>,
    port_bindings: Option<HashMap<String, Option<Vec<InspectPortBinding>>>>,
    ipc_mode: Option<String>,
    pid_mode: Option<String>,
    group_add: Option<Vec<String>>,
    privileged: Option<bool>,
    cap_add: Option<Vec<String>>,
    cap_drop: Option<Vec<String>>,
    readonly_rootfs: Option<bool>,
    security_opt: Option<Vec<String>>,
    network_mode: Option<String>,
}

/// One image of `GET /images/json`, as far as it is read.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(super) struct ListedImage {
    id: String,
    repo_tags: Option<Vec<String>>,
    repo_digests: Option<Vec<String>>,
    size: i64,
}

/// `GET /images/{name}/json`, as far as it is read.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(super) struct InspectedImage {
    id: Option<String>,
    repo_tags: Option<Vec<String>>,
    repo_digests: Option<Vec<String>>,
    size: Option<i64>,
    /// The image's config: the same fields as a container's (`Entrypoint`, `Cmd`,
    /// `User`, `StopSignal`).
    config: Option<InspectConfig>,
}

/// `GET /version`, as far as it is read.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(super) struct Version {
    pub(super) version: Option<String>,
    pub(super) api_version: Option<String>,
    #[serde(rename = "MinAPIVersion")]
    pub(super) min_api_version: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct InspectPortBinding {
    host_ip: Option<String>,
    host_port: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct InspectGraphDriver {
    data: Option<HashMap<String, String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct InspectNetworkSettings {
    networks: Option<HashMap<String, InspectEndpoint>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InspectEndpoint {
    #[serde(rename = "IPAddress")]
    ip_address: Option<String>,
}

/// Docker's container states (`created`, `running`, `paused`, `restarting`,
/// `removing`, `exited`, `dead`) folded into CRI's four (as dockershim's
/// `toRuntimeAPIContainerState`): a paused or restarting container still has its
/// process.
pub(super) fn state_from(status: Option<&str>) -> ContainerState {
    match status {
        Some("running" | "paused" | "restarting" | "stopping") => ContainerState::Running,
        Some("exited" | "dead") => ContainerState::Exited,
        Some("created") => ContainerState::Created,
        _ => ContainerState::Unknown,
    }
}

/// Docker names carry a leading `/`.
pub(super) fn bare_name(name: &str) -> String {
    name.strip_prefix('/').unwrap_or(name).to_string()
}

pub(super) fn summary_from(c: ListedContainer) -> ContainerSummary {
    ContainerSummary {
        id: c.id.unwrap_or_default(),
        name: c
            .names
            .and_then(|names| names.into_iter().next())
            .map(|n| bare_name(&n))
            .unwrap_or_default(),
        labels: labels_from(c.labels),
        state: state_from(c.state.as_deref()),
        image: c.image.unwrap_or_default(),
        image_id: c.image_id.unwrap_or_default(),
        created: unix_secs(c.created.unwrap_or(0)),
    }
}

/// The container's IPv4 address: on the default bridge if attached, else on the
/// first network (by name) that gave it one. Empty for host or joined networks.
fn ip_address(settings: Option<&InspectNetworkSettings>) -> String {
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
    crate::sort::sort(&mut names);
    names.into_iter().find_map(|n| ip(n)).unwrap_or_default()
}

pub(super) fn details_from(c: Inspect) -> ContainerDetails {
    let state = c.state.unwrap_or_default();
    let config = c.config.unwrap_or_default();
    let mut settings = settings_from(&config, c.host_config.as_ref());
    settings.rootfs_dir = c
        .graph_driver
        .as_ref()
        .and_then(|g| g.data.as_ref()?.get("UpperDir").cloned())
        .unwrap_or_default();
    ContainerDetails {
        id: c.id.unwrap_or_default(),
        name: bare_name(c.name.as_deref().unwrap_or_default()),
        labels: labels_from(config.labels),
        state: state_from(state.status.as_deref()),
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
fn settings_from(
    config: &InspectConfig,
    host: Option<&InspectHostConfig>,
) -> crate::runtime::ContainerSettings {
    let empty = InspectHostConfig::default();
    let h = host.unwrap_or(&empty);
    let mut ports: Vec<crate::runtime::PortBinding> = Vec::new();
    let mut keys: Vec<&String> = h.port_bindings.iter().flatten().map(|(k, _)| k).collect();
    crate::sort::sort(&mut keys);
    for key in keys {
        let (port, proto) = key.split_once('/').unwrap_or((key.as_str(), "tcp"));
        let Ok(container_port) = port.parse::<u16>() else {
            continue;
        };
        let bindings = h
            .port_bindings
            .as_ref()
            .and_then(|m| m.get(key))
            .and_then(Option::as_ref);
        for b in bindings.into_iter().flatten() {
            ports.push(crate::runtime::PortBinding {
                container_port,
                host_port: b
                    .host_port
                    .as_deref()
                    .and_then(|p| p.parse().ok())
                    .unwrap_or(0),
                host_ip: b.host_ip.clone().unwrap_or_default(),
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
        binds: h.binds.clone().unwrap_or_default(),
        ports,
        ipc_mode: h.ipc_mode.clone().unwrap_or_default(),
        pid_mode: h.pid_mode.clone().unwrap_or_default(),
        group_add: h.group_add.clone().unwrap_or_default(),
        privileged: h.privileged.unwrap_or(false),
        cap_add: h.cap_add.clone().unwrap_or_default(),
        cap_drop: h.cap_drop.clone().unwrap_or_default(),
        read_only_rootfs: h.readonly_rootfs.unwrap_or(false),
        security_opt: h.security_opt.clone().unwrap_or_default(),
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
        sysctls: (!cfg.sysctls.is_empty()).then(|| cfg.sysctls.clone().into_iter().collect()),
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

pub(super) fn image_from_inspect(i: InspectedImage) -> ImageDetails {
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
pub(super) fn image_from_summary(i: ListedImage) -> ImageDetails {
    ImageDetails {
        id: i.id,
        // Untagged images are listed as `<none>:<none>`, which is not a reference.
        repo_tags: i
            .repo_tags
            .unwrap_or_default()
            .into_iter()
            .filter(|t| !t.starts_with("<none>"))
            .collect(),
        repo_digests: i
            .repo_digests
            .unwrap_or_default()
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
    let labels = crate::sort::map(
        actor
            .attributes
            .unwrap_or_default()
            .into_iter()
            .filter(|(k, _)| !EVENT_ATTRIBUTES.contains(&k.as_str())),
    );
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
            "Sysctls",
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
    fn create_body_maps_namespaces_mounts_ports_resources_and_sysctls() {
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
            sysctls: [("kernel.shm_rmid_forced".into(), "1".into())].into(),
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
        assert_eq!(hc["Sysctls"]["kernel.shm_rmid_forced"], "1");
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
        let c: Inspect = serde_json::from_value(json).expect("decodes");
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
    fn list_and_inspect_decode_the_fields_read_and_take_nulls_as_absent() {
        let list = serde_json::json!([{
            "Id": "abc", "Names": ["/k8s_app_web"], "Image": "busybox",
            "ImageID": "sha256:img", "Command": "sh", "Created": 1_714_566_896i64,
            "Ports": [], "Labels": {"a": "b"}, "State": "running", "Status": "Up 1 second",
            "HostConfig": {"NetworkMode": "default"}, "NetworkSettings": {"Networks": {}},
            "Mounts": []
        }, {"Id": "def", "Names": null, "Labels": null, "State": "created"}]);
        let v: Vec<ListedContainer> = serde_json::from_value(list).expect("decodes");
        let v: Vec<ContainerSummary> = v.into_iter().map(summary_from).collect();
        assert_eq!(v[0].id, "abc");
        assert_eq!(v[0].name, "k8s_app_web");
        assert_eq!(v[0].image_id, "sha256:img");
        assert_eq!(v[0].state, ContainerState::Running);
        assert_eq!(v[0].labels.get("a").map(String::as_str), Some("b"));
        assert_eq!(
            v[0].created,
            UNIX_EPOCH + Duration::from_secs(1_714_566_896)
        );
        assert_eq!((v[1].name.as_str(), v[1].labels.len()), ("", 0));
        assert_eq!(v[1].state, ContainerState::Created);
        let inspect = serde_json::json!({
            "Id": "abc", "Name": "/k8s_app", "State": {"Status": "running", "Pid": 42},
            "Config": {"Labels": null, "Entrypoint": null, "Cmd": ["sh", "-c", "true"],
                       "Env": ["A=1"], "Tty": true, "OpenStdin": true, "StopSignal": "SIGINT"},
            "HostConfig": {"Binds": null, "PortBindings": {
                "80/tcp": [{"HostIp": "127.0.0.1", "HostPort": "8080"}],
                "53/udp": null, "bad": [{"HostPort": "1"}]
            }, "CpuShares": 512, "Memory": 1048576, "CapAdd": ["NET_ADMIN"],
               "ReadonlyRootfs": true, "CgroupParent": "/kubepods"},
            "GraphDriver": {"Name": "overlay2", "Data": {"UpperDir": "/var/lib/docker/x/diff"}},
            "NetworkSettings": {"Networks": null},
            "LogPath": "/var/lib/docker/containers/abc/abc-json.log"
        });
        let d = details_from(serde_json::from_value(inspect).expect("decodes"));
        assert_eq!((d.state, d.pid), (ContainerState::Running, 42));
        assert!(d.labels.is_empty());
        assert!(d.settings.entrypoint.is_empty());
        assert_eq!(d.settings.cmd, ["sh", "-c", "true"]);
        assert_eq!(d.settings.env, ["A=1"]);
        assert!(d.settings.tty && d.settings.stdin && d.settings.read_only_rootfs);
        assert_eq!(d.settings.stop_signal, "SIGINT");
        assert_eq!(d.settings.ports.len(), 1);
        assert_eq!(d.settings.ports[0].container_port, 80);
        assert_eq!(d.settings.ports[0].host_port, 8080);
        assert_eq!(d.settings.ports[0].host_ip, "127.0.0.1");
        assert_eq!(d.settings.resources.cpu_shares, 512);
        assert_eq!(d.settings.resources.memory_limit, 1_048_576);
        assert_eq!(d.settings.cap_add, ["NET_ADMIN"]);
        assert_eq!(d.settings.cgroup_parent, "/kubepods");
        assert_eq!(d.settings.rootfs_dir, "/var/lib/docker/x/diff");
        assert_eq!(d.ip_address, "");
        assert_eq!(d.log_path, "/var/lib/docker/containers/abc/abc-json.log");
    }

    #[test]
    fn docker_states_fold_into_four() {
        assert_eq!(state_from(Some("running")), ContainerState::Running);
        assert_eq!(state_from(Some("paused")), ContainerState::Running);
        assert_eq!(state_from(Some("restarting")), ContainerState::Running);
        assert_eq!(state_from(Some("exited")), ContainerState::Exited);
        assert_eq!(state_from(Some("dead")), ContainerState::Exited);
        assert_eq!(state_from(Some("created")), ContainerState::Created);
        assert_eq!(state_from(Some("removing")), ContainerState::Unknown);
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
