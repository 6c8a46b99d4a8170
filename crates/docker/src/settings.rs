//! What Docker reports of a container's create settings (`docker inspect`'s `Config`
//! and `HostConfig`, the fields rkubelet sets), in Docker's own spelling: bind
//! strings, namespace mode strings, security options. Not part of the runtime seam:
//! the kubelet never reads them; they are for checking, in tests and when debugging,
//! what a config was translated into ([`crate::Docker::inspect_settings`]).

/// cgroup knobs as Docker reports them. Zero means unset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    /// `CpuShares`.
    pub cpu_shares: i64,
    /// `CpuQuota` (µs per period).
    pub cpu_quota: i64,
    /// `CpuPeriod` (µs).
    pub cpu_period: i64,
    /// `Memory` (bytes).
    pub memory_limit: i64,
}

/// One published port (`HostConfig.PortBindings`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortBinding {
    /// Container port.
    pub container_port: u16,
    /// Host port.
    pub host_port: u16,
    /// Host IP bound ("" for all).
    pub host_ip: String,
    /// `tcp`, `udp` or `sctp`.
    pub protocol: String,
}

/// A container's create settings as Docker reports them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerSettings {
    /// Entrypoint in effect.
    pub entrypoint: Vec<String>,
    /// Cmd in effect.
    pub cmd: Vec<String>,
    /// Environment as `NAME=value` (the image's and the container's).
    pub env: Vec<String>,
    /// Working directory.
    pub working_dir: String,
    /// User (`uid`, `uid:gid`, a name, or "").
    pub user: String,
    /// Hostname.
    pub hostname: String,
    /// cgroup knobs.
    pub resources: Resources,
    /// The parent cgroup ("" for Docker's default).
    pub cgroup_parent: String,
    /// Bind mounts as `host:container[:ro]`.
    pub binds: Vec<String>,
    /// Published ports.
    pub ports: Vec<PortBinding>,
    /// `NetworkMode` (`default`, `host`, `container:<id>`).
    pub network_mode: String,
    /// `IpcMode` (`shareable`, `container:<id>`, `host`).
    pub ipc_mode: String,
    /// `PidMode` (`""`, `container:<id>`, `host`).
    pub pid_mode: String,
    /// Extra groups.
    pub group_add: Vec<String>,
    /// Privileged.
    pub privileged: bool,
    /// Capabilities added.
    pub cap_add: Vec<String>,
    /// Capabilities dropped.
    pub cap_drop: Vec<String>,
    /// Read-only root filesystem.
    pub read_only_rootfs: bool,
    /// Security options (`no-new-privileges`, `seccomp=…`).
    pub security_opt: Vec<String>,
    /// Stdin kept open.
    pub stdin: bool,
    /// A TTY allocated.
    pub tty: bool,
    /// `StopSignal` ("" when neither the create nor the image set one).
    pub stop_signal: String,
}
