//! The container runtime seam: a trait of blocking calls and the runtime-neutral types
//! they take and return.
//!
//! The kubelet core (pod sync, PLEG, status) speaks only these types. The one
//! implementation, `docker::Docker` (the `rkubelet-docker` crate), maps them onto the Docker
//! Engine API; it is the only crate that knows Docker's wire format. Tests of sync logic may use a fake
//! beside them; the Docker client itself is tested against the real engine.
//!
//! Every call blocks the calling thread and is bounded by a timeout. A runtime that
//! cannot be reached answers [`RuntimeError::Unavailable`], which callers treat as
//! "runtime down": report, leave pods alone, retry later.
// What another crate uses is `pub`, the rest `pub(crate)` or private
// (tests/tidy.rs checks that each `pub` item is named outside the crate).
#![warn(unreachable_pub)]

// What a sandbox or container is created from, in CRI's vocabulary.
pub mod config;
// The runtime-neutral kubelet types built on the seam (upstream `pkg/kubelet/container`).
pub mod container;
// The one image reference parser (Docker's grammar, which every runtime reads).
pub mod reference;
// An in-memory runtime for the unit tests of the crates above and for the fuzz targets;
// never in a release binary.
#[cfg(any(test, feature = "testing"))]
pub mod fake;

use std::collections::BTreeMap;

use config::{ContainerConfig, PodSandboxConfig};
use std::fmt;
use std::io;
use std::time::{Duration, SystemTime};

/// The errors of the runtime boundary. Messages describe this layer only.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The runtime's socket is absent, refuses connections, or the connection broke:
    /// the runtime is down.
    #[error("container runtime is down (cannot reach {endpoint})")]
    Unavailable {
        /// The endpoint we tried, e.g. `unix:///var/run/docker.sock`.
        endpoint: String,
        /// What happened.
        source: std::io::Error,
    },
    /// A call did not finish within its timeout.
    #[error("{op}: timed out after {after:?}")]
    Timeout {
        /// The operation, e.g. `create container k8s_app_…`.
        op: String,
        /// The timeout that expired.
        after: Duration,
    },
    /// The object (container, image, exec) does not exist.
    #[error("{op}: not found: {message}")]
    NotFound {
        /// The operation.
        op: String,
        /// The runtime's message.
        message: String,
    },
    /// A name is already in use (create), or the object is in a state that forbids the call.
    #[error("{op}: conflict: {message}")]
    Conflict {
        /// The operation.
        op: String,
        /// The runtime's message.
        message: String,
    },
    /// Any other error answer from the runtime.
    #[error("{op}: runtime answered {status}: {message}")]
    Api {
        /// The operation.
        op: String,
        /// HTTP status of the answer.
        status: u16,
        /// The runtime's message.
        message: String,
    },
    /// The runtime's answer could not be understood.
    #[error("{op}: cannot decode the runtime's answer")]
    Decode {
        /// The operation.
        op: String,
        /// What did not parse.
        source: serde_json::Error,
    },
    /// The endpoint string itself is not usable.
    #[error("bad container runtime endpoint {endpoint:?}: {reason}")]
    BadEndpoint {
        /// The endpoint as given.
        endpoint: String,
        /// Why it is refused.
        reason: String,
    },
}

impl RuntimeError {
    /// True when the runtime could not be reached at all (as opposed to answering with
    /// an error).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, RuntimeError::Unavailable { .. })
    }

    /// True when the object does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, RuntimeError::NotFound { .. })
    }
}

/// The runtime's identity, from its version endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeVersion {
    /// Runtime name, `docker`.
    pub runtime_name: String,
    /// Runtime version, e.g. `20.10.24+dfsg1`.
    pub runtime_version: String,
    /// The API version in use after negotiation, e.g. `1.41`.
    pub api_version: String,
}

/// The runtime's system facts (Docker's `/info`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuntimeInfo {
    /// How the runtime names cgroups: `cgroupfs` or `systemd` ("" when it does not say).
    pub cgroup_driver: String,
    /// The cgroup version the runtime sees: `1` or `2` ("" when it does not say).
    pub cgroup_version: String,
    /// The runtime's data directory (`/var/lib/docker`; containerd's root).
    pub root_dir: String,
    /// The sandbox image the runtime runs pods on by its own configuration
    /// (containerd's `sandbox_image`), which image GC must never remove; "" when the
    /// runtime takes the kubelet's (Docker: `--pod-infra-container-image`).
    pub sandbox_image: String,
}

/// The state of a container as the runtime reports it (CRI's four states).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ContainerState {
    /// Created but never started.
    Created,
    /// Running (or paused, or restarting inside Docker: the process exists).
    Running,
    /// Exited (or dead).
    Exited,
    /// Anything else the runtime says.
    Unknown,
}

/// One container from a list call: enough for the PLEG to diff states.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerSummary {
    /// Full 64-hex ID.
    pub id: String,
    /// Name without Docker's leading `/`.
    pub name: String,
    /// All labels.
    pub labels: BTreeMap<String, String>,
    /// Current state.
    pub state: ContainerState,
    /// Image as given at create time.
    pub image: String,
    /// Image ID (`sha256:…`).
    pub image_id: String,
    /// Creation time.
    pub created: SystemTime,
}

/// One container in detail, from an inspect call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerDetails {
    /// Full 64-hex ID.
    pub id: String,
    /// Name without Docker's leading `/`.
    pub name: String,
    /// All labels.
    pub labels: BTreeMap<String, String>,
    /// Current state.
    pub state: ContainerState,
    /// Image as given at create time.
    pub image: String,
    /// Image ID (`sha256:…`).
    pub image_id: String,
    /// Creation time.
    pub created: SystemTime,
    /// Start time of the last run (None if never started).
    pub started_at: Option<SystemTime>,
    /// Finish time of the last run (None if it never finished).
    pub finished_at: Option<SystemTime>,
    /// Exit code of the last run.
    pub exit_code: i64,
    /// The runtime killed it for memory.
    pub oom_killed: bool,
    /// The runtime's error text for the last start (e.g. exec format error).
    pub error: String,
    /// Host PID of the main process while running (0 otherwise).
    pub pid: u32,
    /// A sandbox's address in the pod network ("" if none: an app container, or a
    /// sandbox on the node's network); CRI's `PodSandboxNetworkStatus.ip`.
    pub ip_address: String,
    /// A sandbox's other addresses (the other family's, dual-stack); CRI's
    /// `additional_ips`.
    pub additional_ips: Vec<String>,
    /// A sandbox on the node's network (`hostNetwork`).
    pub host_network: bool,
    /// The signal a stop begins with, as configured (`lifecycle.stopSignal` at create,
    /// else the image's STOPSIGNAL); "" when neither set one. Read it through
    /// [`ContainerDetails::stop_signal`], which supplies the default.
    pub stop_signal: String,
    /// The host directory of the container's writable layer ("" when the runtime's
    /// storage has none): its size is the rootfs usage.
    pub rootfs_dir: String,
    /// The runtime's log file of this container ("" when it has none): what the
    /// `/var/log/pods` and `/var/log/containers` links point at.
    pub log_path: String,
}

/// The signal that kills a process outright: what a stop ends with when the grace
/// period runs out.
pub const SIGKILL: &str = "SIGKILL";

/// The stop signal of a container that configures none (Docker's and CRI's default).
pub(crate) const DEFAULT_STOP_SIGNAL: &str = "SIGTERM";

impl ContainerDetails {
    /// A sandbox's pod IPs as the kubelet reports them (upstream `sortPodIPs`): at
    /// most one of each family, the node's family (`node_ipv6`) first.
    pub fn pod_ips(&self, node_ipv6: bool) -> Vec<String> {
        let all = std::iter::once(&self.ip_address).chain(&self.additional_ips);
        let first_of = |v6: bool| {
            all.clone()
                .find(|ip| !ip.is_empty() && ip.contains(':') == v6)
                .cloned()
        };
        [first_of(node_ipv6), first_of(!node_ipv6)]
            .into_iter()
            .flatten()
            .collect()
    }

    /// The signal that begins this container's stop: its configured stop signal, else
    /// SIGTERM, as the runtime's own stop would send.
    pub fn stop_signal(&self) -> &str {
        match self.stop_signal.as_str() {
            "" => DEFAULT_STOP_SIGNAL,
            s => s,
        }
    }
}

/// The runtime's network readiness (CRI's `NetworkReady` condition).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetworkStatus {
    /// Pods can get a network.
    pub ready: bool,
    /// Why not (upstream's `NetworkPluginNotReady`); "" when ready.
    pub reason: String,
    /// What is wrong, for the Ready condition's message; "" when ready.
    pub message: String,
}

/// The image filesystem as the runtime accounts for it (CRI's `ImageFsInfo`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageFsUsage {
    /// The filesystem's mount point as the runtime names it ("" when it names none).
    pub mountpoint: String,
    /// What the images take there (the snapshotter's unpacked layers on containerd).
    pub used_bytes: u64,
    /// The inodes they take, when the runtime says.
    pub inodes_used: Option<u64>,
}

/// An image present on the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageDetails {
    /// `sha256:…`.
    pub id: String,
    /// `repo:tag` references.
    pub repo_tags: Vec<String>,
    /// `repo@sha256:…` references.
    pub repo_digests: Vec<String>,
    /// Size in bytes.
    pub size: i64,
    /// The image's configured entrypoint.
    pub entrypoint: Vec<String>,
    /// The image's configured cmd.
    pub cmd: Vec<String>,
    /// The image's configured user.
    pub user: String,
    /// The image's STOPSIGNAL.
    pub stop_signal: String,
}

/// Credentials for one registry, sent with a pull.
#[derive(Clone, PartialEq, Eq)]
pub struct RegistryAuth {
    /// User name.
    pub username: String,
    /// Password or token. Never logged.
    pub password: String,
    /// Registry host, e.g. `127.0.0.1:5000`.
    pub server_address: String,
}

impl fmt::Debug for RegistryAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegistryAuth")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .field("server_address", &self.server_address)
            .finish()
    }
}

/// What happened to a container (CRI's `ContainerEventType`, and the OOM kill a
/// runtime reports beside the stop).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ContainerEventType {
    /// Created.
    Created,
    /// Started.
    Started,
    /// Its process ended.
    Stopped,
    /// Removed.
    Deleted,
    /// The kernel killed a process of it for memory.
    OomKilled,
}

/// A container lifecycle event from the runtime's event stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeEvent {
    /// Container ID.
    pub id: String,
    /// What happened.
    pub kind: ContainerEventType,
    /// The container's labels at the time of the event.
    pub labels: BTreeMap<String, String>,
    /// When it happened.
    pub time: SystemTime,
}

/// What [`Runtime::watch_events`] asks the runtime's event stream for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventFilter {
    /// Only containers carrying every one of these labels (`key=value`).
    pub labels: Vec<String>,
    /// Only these kinds of event; empty: every kind.
    pub kinds: Vec<ContainerEventType>,
    /// Replay the events from this time on (inclusive, as far as the runtime still
    /// holds them) before the live ones: how a reconnecting reader misses nothing.
    pub since: Option<SystemTime>,
}

/// One item of an event stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventItem {
    /// The runtime accepted the watch: from here on, every event arrives.
    Opened,
    /// One container event.
    Event(RuntimeEvent),
}

/// The result of running a command in a container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecResult {
    /// Exit code of the command.
    pub exit_code: i64,
    /// Standard output, capped.
    pub stdout: Vec<u8>,
    /// Standard error, capped.
    pub stderr: Vec<u8>,
}

/// Which part of a container's log to read ([`Runtime::log_stream`]): upstream's
/// `PodLogOptions` as the runtime sees them, after the kubelet port checked them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogOptions {
    /// Keep reading what the container writes until it stops.
    pub follow: bool,
    /// Only lines written at or after this time.
    pub since: Option<SystemTime>,
    /// Prefix every line with the time it was written (RFC 3339, nine fraction digits,
    /// then a space: upstream's `RFC3339NanoFixed`).
    pub timestamps: bool,
    /// Only the last N lines (then, when following, what comes after them).
    pub tail: Option<u64>,
    /// Standard output.
    pub stdout: bool,
    /// Standard error.
    pub stderr: bool,
}

impl Default for LogOptions {
    /// All of both streams, once.
    fn default() -> Self {
        LogOptions {
            follow: false,
            since: None,
            timestamps: false,
            tail: None,
            stdout: true,
            stderr: true,
        }
    }
}

/// A container's log being read: the chosen streams' bytes in the order they were
/// written (no framing), `Ok(0)` at the end (a followed log ends when the container
/// stops). A read that waited `wake` for nothing returns an error of kind
/// `WouldBlock`, and reading may go on; `TimedOut` means the runtime stopped sending
/// without ending the log (a read that is not followed made no progress for long).
pub type LogStream = Box<dyn std::io::Read + Send>;

/// Which standard streams an interactive exec or attach connects, and whether the
/// process has a terminal (upstream's remotecommand `Options`). With a terminal the
/// process has no separate stderr: everything it writes is stdout.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamOptions {
    /// The client sends input.
    pub stdin: bool,
    /// The client reads standard output.
    pub stdout: bool,
    /// The client reads standard error (never with `tty`).
    pub stderr: bool,
    /// A terminal is allocated (exec) or the container has one (attach).
    pub tty: bool,
}

/// A terminal size in character cells, as a client's resize message gives it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TermSize {
    /// Columns.
    pub width: u16,
    /// Rows.
    pub height: u16,
}

/// Which stream a piece of a process's output came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputKind {
    /// Standard output (everything, with a terminal).
    Stdout,
    /// Standard error.
    Stderr,
}

/// The live standard streams of a process in a container (an interactive exec, or an
/// attach to the main process): a non-blocking duplex connection to the runtime that
/// the caller polls ([`ProcessIo::fd`]) beside its own client. The runtime's framing
/// of stdout and stderr stays behind this seam: output arrives already split.
pub trait ProcessIo: Send + fmt::Debug {
    /// The descriptor to `poll(2)`: readable when output (or the end) is there,
    /// writable when input can be sent.
    fn fd(&self) -> std::os::fd::RawFd;

    /// Whether output was read ahead (with the runtime's answer) and waits to be
    /// taken, which `poll(2)` cannot see.
    fn has_buffered(&self) -> bool;

    /// Reads what the process wrote without blocking and hands each piece to `emit`.
    /// `Ok(0)`: the output has ended (the process exited or the runtime closed the
    /// stream); `WouldBlock`: nothing yet. A positive count may have emitted nothing
    /// (only framing arrived).
    fn read_output(&mut self, emit: &mut dyn FnMut(OutputKind, &[u8])) -> io::Result<usize>;

    /// Sends input without blocking; `WouldBlock` when the runtime takes no more now.
    fn write_input(&mut self, data: &[u8]) -> io::Result<usize>;

    /// Ends the input: the process reads end-of-file on its stdin. Output goes on.
    fn close_input(&mut self) -> io::Result<()>;
}

/// A streaming session a runtime with a streaming server of its own serves itself
/// (CRI's `Exec`, `Attach` and `PortForward` requests): what the kubelet asks
/// [`Runtime::stream_url`] for, once it has checked the client's request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamRequest {
    /// `kubectl exec`: `cmd` in the running container `container_id`.
    Exec {
        /// The container.
        container_id: String,
        /// The command and its arguments.
        cmd: Vec<String>,
        /// Which streams, and a terminal or not.
        opts: StreamOptions,
    },
    /// `kubectl attach`: the main process of the running container `container_id`.
    Attach {
        /// The container.
        container_id: String,
        /// Which streams, and whether the container has a terminal.
        opts: StreamOptions,
    },
    /// `kubectl port-forward` into the network namespace of sandbox `sandbox_id`.
    PortForward {
        /// The pod's sandbox.
        sandbox_id: String,
        /// The ports a WebSocket client named in its query; empty for SPDY, whose
        /// client names a port per stream.
        ports: Vec<u16>,
    },
}

/// An interactive exec that has started.
#[derive(Debug)]
pub struct ExecSession {
    /// The runtime's ID of this exec, for [`Runtime::exec_status`] and
    /// [`Runtime::resize_exec`].
    pub exec_id: String,
    /// The process's standard streams.
    pub io: Box<dyn ProcessIo>,
}

/// The blocking container runtime interface. One implementation talks to Docker.
pub trait Runtime: Send + Sync + fmt::Debug {
    /// Version and API version of the runtime; also the liveness check.
    fn version(&self) -> Result<RuntimeVersion, RuntimeError>;

    /// The runtime's system facts: its cgroup driver and version, its data directory.
    fn info(&self) -> Result<RuntimeInfo, RuntimeError>;

    /// All containers (running or not) that carry every label in `label_filter`
    /// (`key` or `key=value`). One call, filtered by the runtime.
    fn list_containers(
        &self,
        label_filter: &[String],
    ) -> Result<Vec<ContainerSummary>, RuntimeError>;

    /// One container in detail.
    fn inspect_container(&self, id: &str) -> Result<ContainerDetails, RuntimeError>;

    /// Creates and starts a pod's sandbox (CRI `RunPodSandbox`): it holds the pod's
    /// network and IPC namespaces. Returns its ID. A leftover of the same pod and
    /// attempt (made just before a crash of the kubelet) is replaced.
    fn run_pod_sandbox(&self, config: &PodSandboxConfig) -> Result<String, RuntimeError>;

    /// Creates a container in the sandbox `pod_sandbox_id` (CRI `CreateContainer`),
    /// which was run with `sandbox_config`; returns its ID. A leftover of the same
    /// container and attempt is replaced.
    fn create_container(
        &self,
        pod_sandbox_id: &str,
        config: &ContainerConfig,
        sandbox_config: &PodSandboxConfig,
    ) -> Result<String, RuntimeError>;

    /// Starts a created container.
    fn start_container(&self, id: &str) -> Result<(), RuntimeError>;

    /// Stops a container: its stop signal, then SIGKILL after `grace`. A container that
    /// is already stopped or gone is not an error.
    fn stop_container(&self, id: &str, grace: Duration) -> Result<(), RuntimeError>;

    /// Sends `signal` (a name such as `SIGTERM`, or a number) to a container's main
    /// process and returns at once: the caller watches for the exit itself, so that
    /// a grace period holds no thread. A container that is already stopped or gone
    /// is not an error.
    fn kill_container(&self, id: &str, signal: &str) -> Result<(), RuntimeError>;

    /// Removes a container (forcibly, with its anonymous volumes). Gone is not an error.
    fn remove_container(&self, id: &str) -> Result<(), RuntimeError>;

    /// The image if present on the node, None if absent.
    fn inspect_image(&self, image: &str) -> Result<Option<ImageDetails>, RuntimeError>;

    /// Pulls an image, blocking until done; errors in the progress stream are errors.
    fn pull_image(&self, image: &str, auth: Option<&RegistryAuth>) -> Result<(), RuntimeError>;

    /// Makes a new image named `image` (`name:tag`) from a root filesystem tar of
    /// `len` bytes read from `tar`, with Dockerfile `changes` applied (e.g.
    /// `ENTRYPOINT ["/rkubelet","pause"]`): `docker import`. Errors in the progress
    /// stream are errors.
    fn import_image(
        &self,
        image: &str,
        changes: &[String],
        tar: (&mut dyn std::io::Read, u64),
    ) -> Result<(), RuntimeError>;

    /// Loads the images of an image archive of `len` bytes read from `tar` (`docker
    /// save` or an OCI layout tarball, optionally compressed): `docker load`. Returns
    /// what the runtime says it loaded, each a reference (`name:tag`) or an image ID.
    fn load_image(&self, tar: (&mut dyn std::io::Read, u64)) -> Result<Vec<String>, RuntimeError>;

    /// All images on the node.
    fn list_images(&self) -> Result<Vec<ImageDetails>, RuntimeError>;

    /// The image filesystem's usage as the runtime accounts for it (CRI's
    /// `ImageFsInfo`, which upstream's CRI stats provider reports); None from a runtime
    /// that has no such call (Docker: the images' sizes from the list stand in).
    fn image_fs_usage(&self) -> Result<Option<ImageFsUsage>, RuntimeError>;

    /// Removes an image.
    fn remove_image(&self, image: &str) -> Result<(), RuntimeError>;

    /// The last `tail` lines (all if None) of a container's log, stdout and stderr
    /// interleaved, as raw bytes.
    fn logs(&self, id: &str, tail: Option<u64>) -> Result<Vec<u8>, RuntimeError>;

    /// A container's log as a stream ([`LogStream`]) with `opts`: what the kubelet
    /// port's `/containerLogs` serves. Opening it is bounded by the call timeout; the
    /// stream itself is not (a followed log lasts as long as the container runs), but
    /// each read returns within `wake` (`WouldBlock` when nothing came), so the
    /// reader can check its client and shutdown between reads.
    fn log_stream(
        &self,
        id: &str,
        opts: &LogOptions,
        wake: Duration,
    ) -> Result<LogStream, RuntimeError>;

    /// Makes the runtime reopen a running container's log file at its path (CRI
    /// `ReopenContainerLog`): the container log manager renamed the file to rotate it.
    /// A runtime that rotates its own logs (Docker's json-file) answers an error.
    fn reopen_container_log(&self, id: &str) -> Result<(), RuntimeError>;

    /// Runs a command inside a running container and waits for it, at most `timeout`
    /// from its start ([`RuntimeError::Timeout`] after that `timeout`). Setting it up
    /// is bounded by the runtime's own call timeout, as upstream's runtimes bound it.
    fn exec(&self, id: &str, cmd: &[String], timeout: Duration)
        -> Result<ExecResult, RuntimeError>;

    /// Starts `cmd` in a running container with the streams `opts` asks for and
    /// returns at once with them connected (`kubectl exec`). The process runs until
    /// it exits, whatever the caller does; its exit code is [`Runtime::exec_status`].
    /// The start is bounded by a timeout, the streams are not.
    fn exec_interactive(
        &self,
        id: &str,
        cmd: &[String],
        opts: StreamOptions,
    ) -> Result<ExecSession, RuntimeError>;

    /// The exit code of an exec from [`Runtime::exec_interactive`]; None while it runs.
    fn exec_status(&self, exec_id: &str) -> Result<Option<i64>, RuntimeError>;

    /// Resizes the terminal of an exec started with `tty`.
    fn resize_exec(&self, exec_id: &str, size: TermSize) -> Result<(), RuntimeError>;

    /// Connects to the standard streams of a running container's main process
    /// (`kubectl attach`). Input reaches it only if the container was created with
    /// stdin open.
    fn attach(&self, id: &str, opts: StreamOptions) -> Result<Box<dyn ProcessIo>, RuntimeError>;

    /// Resizes the terminal of a container created with a TTY.
    fn resize_container(&self, id: &str, size: TermSize) -> Result<(), RuntimeError>;

    /// Where the runtime serves `request` itself: the URL of its own streaming server
    /// (CRI's `Exec`, `Attach`, `PortForward`), which the kubelet port proxies the
    /// client to, as upstream's `proxyStream`. `None`: the runtime has no streaming
    /// server (Docker), and the kubelet serves the session itself through
    /// [`Runtime::exec_interactive`], [`Runtime::attach`] and the pod's network
    /// namespace. Bounded by the call timeout; the URL is good for one session, for a
    /// short while (containerd: one minute).
    fn stream_url(&self, request: &StreamRequest) -> Result<Option<String>, RuntimeError>;

    /// Blocks reading container events (filtered to containers with `label_filter`),
    /// calling `on_event` for each, until `on_event` returns false, the stream breaks
    /// (an error), or `should_stop` returns true (checked at least every second).
    fn events(
        &self,
        label_filter: &[String],
        on_event: &mut dyn FnMut(RuntimeEvent) -> bool,
        should_stop: &dyn Fn() -> bool,
    ) -> Result<(), RuntimeError> {
        let filter = EventFilter {
            labels: label_filter.to_vec(),
            ..EventFilter::default()
        };
        self.watch_events(
            &filter,
            &mut |item| match item {
                EventItem::Opened => true,
                EventItem::Event(e) => on_event(e),
            },
            should_stop,
        )
    }

    /// [`Runtime::events`] with the whole filter (actions, `since`), and an
    /// [`EventItem::Opened`] once the runtime has accepted the watch, so a reader can
    /// tell a live stream from one still connecting. Same ending rules.
    fn watch_events(
        &self,
        filter: &EventFilter,
        on_item: &mut dyn FnMut(EventItem) -> bool,
        should_stop: &dyn Fn() -> bool,
    ) -> Result<(), RuntimeError>;

    /// Whether pods can get a network (CRI `Status`'s `NetworkReady`): for Docker, its
    /// default bridge network exists and its interface is up.
    fn network_status(&self) -> Result<NetworkStatus, RuntimeError>;

    /// Tells the runtime the node's pod CIDRs (CRI `UpdateRuntimeConfig`), as the
    /// Node's `spec.podCIDRs` or `--pod-cidr` give them; a runtime whose network does
    /// not use them takes them and does nothing.
    fn update_runtime_config(&self, pod_cidrs: &[String]) -> Result<(), RuntimeError>;
}
