//! Docker's answers mapped to the runtime-neutral types of [`runtime`]: container
//! summaries and details, images and events; and a container's create settings as
//! Docker reports them ([`crate::settings`]). Pure functions: no I/O here. What is sent
//! is built in [`crate::translate`].
//!
//! Events use `bollard-stubs` (the Engine API's own generated types). The answers are decoded into the few fields read: containers
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

use crate::settings::{ContainerSettings, PortBinding, Resources};
use crate::wire::{docker_time, unix_nanos, unix_secs};
use runtime::{
    ContainerDetails, ContainerEventType, ContainerState, ContainerSummary, ImageDetails,
    RuntimeEvent,
};

pub(super) fn labels_from(labels: Option<HashMap<String, String>>) -> BTreeMap<String, String> {
    base::sort::map(labels.unwrap_or_default())
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
    base::sort::sort(&mut names);
    names.into_iter().find_map(|n| ip(n)).unwrap_or_default()
}

pub(super) fn details_from(c: Inspect) -> ContainerDetails {
    let state = c.state.unwrap_or_default();
    let config = c.config.unwrap_or_default();
    ContainerDetails {
        id: c.id.unwrap_or_default(),
        name: bare_name(c.name.as_deref().unwrap_or_default()),
        state: state_from(state.status.as_deref()),
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
        additional_ips: Vec::new(),
        host_network: c
            .host_config
            .as_ref()
            .and_then(|h| h.network_mode.as_deref())
            == Some("host"),
        stop_signal: config.stop_signal.clone().unwrap_or_default(),
        rootfs_dir: c
            .graph_driver
            .as_ref()
            .and_then(|g| g.data.as_ref()?.get("UpperDir").cloned())
            .unwrap_or_default(),
        labels: labels_from(config.labels),
        image: config.image.unwrap_or_default(),
        log_path: c.log_path.unwrap_or_default(),
    }
}

/// What Docker reports a container was created with (for checks and debugging).
pub(super) fn settings_of(c: Inspect) -> ContainerSettings {
    settings_from(&c.config.unwrap_or_default(), c.host_config.as_ref())
}

/// What a container was created with, from its inspect answer.
fn settings_from(config: &InspectConfig, host: Option<&InspectHostConfig>) -> ContainerSettings {
    let empty = InspectHostConfig::default();
    let h = host.unwrap_or(&empty);
    let mut ports: Vec<PortBinding> = Vec::new();
    let mut keys: Vec<&String> = h.port_bindings.iter().flatten().map(|(k, _)| k).collect();
    base::sort::sort(&mut keys);
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
            ports.push(PortBinding {
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
    ContainerSettings {
        entrypoint: config.entrypoint.clone().unwrap_or_default(),
        cmd: config.cmd.clone().unwrap_or_default(),
        env: config.env.clone().unwrap_or_default(),
        working_dir: config.working_dir.clone().unwrap_or_default(),
        user: config.user.clone().unwrap_or_default(),
        hostname: config.hostname.clone().unwrap_or_default(),
        resources: Resources {
            cpu_shares: h.cpu_shares.unwrap_or(0),
            cpu_quota: h.cpu_quota.unwrap_or(0),
            cpu_period: h.cpu_period.unwrap_or(0),
            memory_limit: h.memory.unwrap_or(0),
        },
        cgroup_parent: h.cgroup_parent.clone().unwrap_or_default(),
        binds: h.binds.clone().unwrap_or_default(),
        ports,
        network_mode: h.network_mode.clone().unwrap_or_default(),
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

/// Docker's action for each kind of container event (`docker events`).
pub(super) fn docker_action(kind: ContainerEventType) -> &'static str {
    match kind {
        ContainerEventType::Created => "create",
        ContainerEventType::Started => "start",
        ContainerEventType::Stopped => "die",
        ContainerEventType::Deleted => "destroy",
        ContainerEventType::OomKilled => "oom",
    }
}

/// A container event from Docker's event message; None for an action that is none of
/// the kinds (`attach`, `exec_start`, `kill`, …) or one without a container.
pub(super) fn event_from(m: api::EventMessage) -> Option<RuntimeEvent> {
    let kind = match m.action.as_deref()? {
        "create" => ContainerEventType::Created,
        "start" => ContainerEventType::Started,
        "die" => ContainerEventType::Stopped,
        "destroy" => ContainerEventType::Deleted,
        "oom" => ContainerEventType::OomKilled,
        _ => return None,
    };
    let actor = m.actor?;
    let id = actor.id.filter(|id| !id.is_empty())?;
    let labels = base::sort::map(
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
        kind,
        labels,
        time,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
        assert!(!d.host_network);
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
        let d = details_from(serde_json::from_value(inspect.clone()).expect("decodes"));
        assert_eq!((d.state, d.pid), (ContainerState::Running, 42));
        assert!(d.labels.is_empty());
        assert_eq!(d.stop_signal, "SIGINT");
        assert_eq!(d.rootfs_dir, "/var/lib/docker/x/diff");
        assert_eq!(d.ip_address, "");
        assert_eq!(d.log_path, "/var/lib/docker/containers/abc/abc-json.log");
        let s = settings_of(serde_json::from_value(inspect).expect("decodes"));
        assert!(s.entrypoint.is_empty());
        assert_eq!(s.cmd, ["sh", "-c", "true"]);
        assert_eq!(s.env, ["A=1"]);
        assert!(s.tty && s.stdin && s.read_only_rootfs);
        assert_eq!(s.stop_signal, "SIGINT");
        assert_eq!(s.ports.len(), 1);
        assert_eq!(s.ports[0].container_port, 80);
        assert_eq!(s.ports[0].host_port, 8080);
        assert_eq!(s.ports[0].host_ip, "127.0.0.1");
        assert_eq!(s.resources.cpu_shares, 512);
        assert_eq!(s.resources.memory_limit, 1_048_576);
        assert_eq!(s.cap_add, ["NET_ADMIN"]);
        assert_eq!(s.cgroup_parent, "/kubepods");
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
        assert_eq!(e.kind, ContainerEventType::Stopped);
        assert_eq!(e.labels.len(), 1);
        assert_eq!(e.labels.get("rkubelet.test").map(String::as_str), Some("1"));
        assert_eq!(e.time, UNIX_EPOCH + Duration::from_millis(1500));
        let other: api::EventMessage = serde_json::from_value(serde_json::json!({
            "Type": "container", "Action": "exec_start: sh", "Actor": {"ID": "abc"}
        }))
        .expect("decodes");
        assert_eq!(event_from(other), None, "not a lifecycle event");
    }
}
