//! What the kubelet asks a runtime to create, in CRI v1's vocabulary
//! (`k8s.io/cri-api`'s `PodSandboxConfig` and `ContainerConfig`, the fields rkubelet
//! fills): a pod sandbox with its namespaces, hostname, ports, sysctls and cgroup
//! parent; a container in it with its command, environment, mounts, resources and
//! security context. Each runtime translates these into its own wire format (Docker:
//! `crates/docker/src/model.rs`, as dockershim did); nothing here is any runtime's
//! spelling.

use std::collections::BTreeMap;

/// Which namespace a sandbox or container gets (CRI `NamespaceMode`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum NamespaceMode {
    /// The pod's: a sandbox makes it, its containers join it.
    #[default]
    Pod,
    /// The container's own (only for PID: a container that shares no process
    /// namespace with the rest of its pod).
    Container,
    /// The node's (`hostNetwork`, `hostPID`, `hostIPC`).
    Node,
}

/// The namespaces of a sandbox or container (CRI `NamespaceOption`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceOption {
    /// Network namespace.
    pub network: NamespaceMode,
    /// PID namespace.
    pub pid: NamespaceMode,
    /// IPC namespace.
    pub ipc: NamespaceMode,
}

/// A host port forwarded to a port of the sandbox (CRI `PortMapping`; only for
/// `hostPort != 0`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortMapping {
    /// `tcp`, `udp` or `sctp`, lowercase.
    pub protocol: String,
    /// Port in the pod.
    pub container_port: u16,
    /// Port on the node.
    pub host_port: u16,
    /// Node address to bind ("" for all).
    pub host_ip: String,
}

/// Who the sandbox is for (CRI `PodSandboxMetadata`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodSandboxMetadata {
    /// Pod name.
    pub name: String,
    /// Pod UID.
    pub uid: String,
    /// Pod namespace.
    pub namespace: String,
    /// How many sandboxes this pod had before this one.
    pub attempt: u32,
}

/// The security side of a sandbox (CRI `LinuxSandboxSecurityContext`, the fields
/// rkubelet sets).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinuxSandboxSecurityContext {
    /// The pod's namespaces: the node's for `hostNetwork`/`hostPID`/`hostIPC`.
    pub namespace_options: NamespaceOption,
}

/// A sandbox's Linux settings (CRI `LinuxPodSandboxConfig`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinuxPodSandboxConfig {
    /// The pod's cgroup (from the container manager, in the runtime's cgroup driver's
    /// spelling); "" for the runtime's default. Every container of the pod goes under
    /// it.
    pub cgroup_parent: String,
    /// Namespaces and security.
    pub security_context: LinuxSandboxSecurityContext,
    /// Namespaced kernel parameters, dotted names: the pod's sysctls, admitted (safe
    /// or allowed).
    pub sysctls: BTreeMap<String, String>,
}

/// Everything a runtime needs to run a pod's sandbox (CRI `PodSandboxConfig`, upstream
/// `generatePodSandboxConfig`). The sandbox's image is the runtime's own
/// (`--pod-infra-container-image` for Docker, `sandbox_image` for containerd).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodSandboxConfig {
    /// Whose sandbox.
    pub metadata: PodSandboxMetadata,
    /// The pod's hostname ("" with the node's network).
    pub hostname: String,
    /// The pod's log directory (`/var/log/pods/<ns>_<name>_<uid>`); container log
    /// paths are relative to it. "" when the kubelet keeps no pod logs.
    pub log_directory: String,
    /// Host ports (none with the node's network).
    pub port_mappings: Vec<PortMapping>,
    /// Labels the runtime keeps and lists the sandbox with.
    pub labels: BTreeMap<String, String>,
    /// The pod's annotations (the network reads `kubernetes.io/ingress-bandwidth` and
    /// `kubernetes.io/egress-bandwidth` from them).
    pub annotations: BTreeMap<String, String>,
    /// Linux settings.
    pub linux: LinuxPodSandboxConfig,
}

/// A bind mount into a container (CRI `Mount`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    /// Path on the host.
    pub host_path: String,
    /// Path in the container.
    pub container_path: String,
    /// Mounted read-only.
    pub read_only: bool,
}

/// cgroup settings of a container (CRI `LinuxContainerResources`). Zero means unset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    /// CPU shares (relative weight).
    pub cpu_shares: i64,
    /// CFS quota in microseconds per period.
    pub cpu_quota: i64,
    /// CFS period in microseconds.
    pub cpu_period: i64,
    /// Memory limit in bytes.
    pub memory_limit: i64,
}

/// A seccomp profile (CRI `SecurityProfile`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum SecurityProfile {
    /// No filter (the kubelet's default while `seccompDefault` is off).
    #[default]
    Unconfined,
    /// The runtime's default profile.
    RuntimeDefault,
    /// A profile file on the node, by absolute path.
    Localhost(String),
}

/// A container's security settings (CRI `LinuxContainerSecurityContext`, the fields
/// rkubelet sets), the pod's and container's security contexts merged.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinuxContainerSecurityContext {
    /// Capabilities added (`NET_ADMIN`, without `CAP_`).
    pub add_capabilities: Vec<String>,
    /// Capabilities dropped.
    pub drop_capabilities: Vec<String>,
    /// Privileged container.
    pub privileged: bool,
    /// The container's namespaces.
    pub namespace_options: NamespaceOption,
    /// Run as this uid (None: the image's user).
    pub run_as_user: Option<i64>,
    /// Run as this user name, when no uid is given ("" for none).
    pub run_as_username: String,
    /// Run with this primary gid (None: the user's).
    pub run_as_group: Option<i64>,
    /// Supplemental groups (the pod's, with its fsGroup).
    pub supplemental_groups: Vec<i64>,
    /// Read-only root filesystem.
    pub readonly_rootfs: bool,
    /// `no_new_privs` (`allowPrivilegeEscalation: false`).
    pub no_new_privs: bool,
    /// The seccomp profile (ignored for privileged containers, as runtimes do).
    pub seccomp: SecurityProfile,
}

/// A container's Linux settings (CRI `LinuxContainerConfig`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinuxContainerConfig {
    /// cgroup settings.
    pub resources: Resources,
    /// Security settings.
    pub security_context: LinuxContainerSecurityContext,
}

/// Which container of its pod this is (CRI `ContainerMetadata`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerMetadata {
    /// The container's name in the pod spec.
    pub name: String,
    /// Its restart count: how many instances ran before this one.
    pub attempt: u32,
}

/// Everything a runtime needs to create a container in a sandbox (CRI
/// `ContainerConfig`, upstream `generateContainerConfig`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerConfig {
    /// Which container.
    pub metadata: ContainerMetadata,
    /// Image reference.
    pub image: String,
    /// Entrypoint override (Kubernetes `command`); None keeps the image's.
    pub command: Option<Vec<String>>,
    /// Arguments override (Kubernetes `args`); None keeps the image's.
    pub args: Option<Vec<String>>,
    /// Working directory ("" keeps the image's).
    pub working_dir: String,
    /// Environment, in order.
    pub envs: Vec<(String, String)>,
    /// Bind mounts.
    pub mounts: Vec<Mount>,
    /// Labels the runtime keeps and lists the container with.
    pub labels: BTreeMap<String, String>,
    /// The log file, relative to the sandbox's `log_directory`
    /// (`<container>/<attempt>.log`).
    pub log_path: String,
    /// Keep stdin open.
    pub stdin: bool,
    /// Close stdin after the first attach detaches.
    pub stdin_once: bool,
    /// Allocate a TTY.
    pub tty: bool,
    /// Linux settings.
    pub linux: LinuxContainerConfig,
    /// The signal a stop begins with (`lifecycle.stopSignal`); "" for the image's
    /// STOPSIGNAL or SIGTERM.
    pub stop_signal: String,
}

impl ContainerConfig {
    /// A config for a container made outside any pod (created with a default
    /// [`PodSandboxConfig`], the runtime names it `name`): for tests and benchmarks.
    pub fn named(name: impl Into<String>, image: impl Into<String>) -> ContainerConfig {
        ContainerConfig {
            metadata: ContainerMetadata {
                name: name.into(),
                attempt: 0,
            },
            image: image.into(),
            ..ContainerConfig::default()
        }
    }
}
