//! `CriRuntime`: [`runtime::Runtime`] on a CRI v1 runtime (containerd, CRI-O) through
//! [`CriClient`], as upstream's `kuberuntime` sits on `remoteRuntimeService`. The
//! translation of configs and answers is [`crate::translate`]; this file makes the
//! calls and keeps the trait's promises where CRI words them differently:
//!
//! - Sandboxes and containers are listed together (`ListPodSandbox` and
//!   `ListContainers` with the same label selector), each named as dockershim named
//!   it and labelled with `io.kubernetes.docker.type`, and an ID given to
//!   inspect, stop or remove may be either: a sandbox is "running" while it is ready.
//! - `kill_container` must return at once, but CRI has no signal call, only
//!   `StopContainer` with a timeout: SIGKILL is `StopContainer` with timeout 0; any
//!   other signal starts `StopContainer` with a long timeout on a `cri-stop` thread (at
//!   most one per container), so the runtime sends the container's own stop signal
//!   (the image's STOPSIGNAL, else SIGTERM: CRI cannot send another) while the caller
//!   watches for the exit and kills with SIGKILL after the grace period.
//! - A leftover of the same pod or container and attempt (a name the runtime still
//!   holds) is removed and the create tried once more.
//! - `logs` and `log_stream` read the container's CRI log file (`crate::logs`: tail,
//!   since, timestamps, streams, follow across rotations); `reopen_container_log` is
//!   CRI's call for the container log manager. Image import is not here yet and
//!   answers an error that says so.
//! - Exec, attach and port-forward sessions are the runtime's own streaming server's:
//!   `stream_url` asks for the URL (`Exec`, `Attach`, `PortForward`), which the kubelet
//!   port proxies its client to; the trait's in-process streams (`exec_interactive`,
//!   `attach`, the resizes) answer an error.
//! - `info` reads containerd's verbose `Status` (its config as JSON): the cgroup
//!   driver from the default runtime's `SystemdCgroup` option, the root from
//!   `containerdRootDir`, the cgroup version from `/sys/fs/cgroup` (CRI does not say).
//!
//! Every gRPC failure becomes a [`RuntimeError`] naming the operation and its object:
//! Unavailable is the runtime down, DeadlineExceeded a timeout, NotFound, and
//! AlreadyExists or FailedPrecondition (and containerd's "name is reserved") a
//! conflict; any other code is [`RuntimeError::Api`] with the code's number as status.
//!
//! Over 800 lines: one `impl Runtime` block of thirty methods, each one or two CRI
//! calls and its error mapping; the pure half (configs, answers, log lines) is already
//! `translate`.

use std::collections::{HashMap, HashSet};
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base::loops::{lock, Loops};
use grpc::{Cancel, Code, GrpcError};

use crate::client::{CriClient, CriError};
use crate::logs;
use crate::translate;
use crate::v1;
use runtime::config::{ContainerConfig, PodSandboxConfig};
use runtime::{
    ContainerDetails, ContainerSummary, EventFilter, EventItem, ExecResult, ExecSession,
    ImageDetails, LogOptions, LogStream, NetworkStatus, ProcessIo, RegistryAuth, Runtime,
    RuntimeError, RuntimeEvent, RuntimeInfo, RuntimeVersion, StreamOptions, StreamRequest,
    TermSize,
};

/// The thread that waits on a stop begun by a signal other than SIGKILL.
const STOP_THREAD: &str = "cri-stop";
/// The thread that reads `GetContainerEvents` for [`Runtime::watch_events`].
const EVENTS_THREAD: &str = "cri-events";
/// The runtime's own grace period for a stop begun by `kill_container`: long, because
/// the caller owns the grace period and ends it with SIGKILL (a `StopContainer` with
/// timeout 0); this only bounds the `cri-stop` thread if no SIGKILL ever comes.
const SIGNAL_STOP_TIMEOUT: Duration = Duration::from_secs(3600);
/// How often a watch checks `should_stop` while no event arrives (the trait's promise).
const EVENTS_WAKEUP: Duration = Duration::from_secs(1);
/// Events read ahead of the caller before the reading thread waits.
const EVENTS_BUFFER: usize = 64;
/// The most of a log file `logs` reads (its end): a log fetched whole must not exhaust
/// a small board's memory, as the Docker runtime's cap.
const MAX_LOG_BYTES: u64 = 16 * 1024 * 1024;
/// How long a follower's question "does the container still run?" may take: each
/// read of a followed log returns within its wake-up period plus this at most.
const FOLLOW_STATUS_TIMEOUT: Duration = Duration::from_secs(5);
/// The gRPC code of a method the runtime does not have: the status of the errors of
/// the calls this runtime does not offer (yet), so a caller can tell them apart.
const UNIMPLEMENTED: u16 = 12;

/// A CRI v1 runtime behind the [`Runtime`] trait. Cheap to share (`Arc`): calls from
/// many threads go concurrently over the client's one connection.
#[derive(Debug)]
pub struct CriRuntime {
    client: Arc<CriClient>,
    /// The image service's client: `client` unless `--image-service-endpoint` names
    /// another socket ([`CriRuntime::with_image_endpoint`]).
    images: Arc<CriClient>,
    /// That socket, for errors.
    image_endpoint: String,
    endpoint: String,
    timeout: Duration,
    loops: Loops,
    /// Containers with a stop from `kill_container` in flight on a `cri-stop` thread.
    stopping: Arc<Mutex<HashSet<String>>>,
}

/// Takes a container off the in-flight stops when its `cri-stop` thread ends (or was
/// never started).
struct Stopping {
    set: Arc<Mutex<HashSet<String>>>,
    id: String,
}

impl Drop for Stopping {
    fn drop(&mut self) {
        lock(&self.set).remove(&self.id);
    }
}

/// Cancels a watch's stream when the watch returns, so its reading thread ends.
struct CancelOnDrop(Option<Cancel>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(c) = &self.0 {
            c.cancel();
        }
    }
}

/// What the `cri-events` thread hands the watching thread.
enum EventMsg {
    Opened(Cancel),
    Event(Box<v1::ContainerEventResponse>),
    Failed(CriError),
    Ended,
}

fn not_supported(op: String, what: &str) -> RuntimeError {
    RuntimeError::Api {
        op,
        status: UNIMPLEMENTED,
        message: format!("{what} is not yet supported on a CRI runtime"),
    }
}

fn is_sigkill(signal: &str) -> bool {
    matches!(signal, "SIGKILL" | "KILL" | "9")
}

/// Whole seconds, rounded up so a grace period or timeout is never cut short.
fn ceil_secs(d: Duration) -> i64 {
    i64::try_from(d.as_millis().div_ceil(1000)).unwrap_or(i64::MAX)
}

impl CriRuntime {
    /// A runtime at `endpoint` (`unix:///run/containerd/containerd.sock`), each call
    /// within `timeout` (`--runtime-request-timeout`; a stop adds its grace period, an
    /// exec its own timeout, a pull is longer). Does not connect: the runtime may come
    /// up later. Its threads (the connection's reader, stops, event watches) are
    /// spawned through `loops`.
    pub fn new(
        endpoint: &str,
        timeout: Duration,
        loops: &Loops,
    ) -> Result<CriRuntime, RuntimeError> {
        let client =
            CriClient::new(endpoint, timeout, loops).map_err(|e| RuntimeError::BadEndpoint {
                endpoint: endpoint.to_string(),
                reason: e.to_string(),
            })?;
        let client = Arc::new(client);
        Ok(CriRuntime {
            images: client.clone(),
            image_endpoint: endpoint.to_string(),
            client,
            endpoint: endpoint.to_string(),
            timeout,
            loops: loops.clone(),
            stopping: Arc::new(Mutex::new(HashSet::new())),
        })
    }

    /// The image service at `endpoint` instead of the runtime's own socket (upstream's
    /// `--image-service-endpoint`: an image service apart from the runtime). Images are
    /// inspected, pulled, listed and removed there; containers still name them as the
    /// runtime sees them. Does not connect.
    pub fn with_image_endpoint(mut self, endpoint: &str) -> Result<CriRuntime, RuntimeError> {
        let client = CriClient::new(endpoint, self.timeout, &self.loops).map_err(|e| {
            RuntimeError::BadEndpoint {
                endpoint: endpoint.to_string(),
                reason: e.to_string(),
            }
        })?;
        self.images = Arc::new(client);
        self.image_endpoint = endpoint.to_string();
        Ok(self)
    }

    /// An image service's failure as the runtime boundary's error: as [`Self::error`],
    /// naming the image service's socket when it is down.
    fn image_error(&self, op: impl Into<String>, e: CriError) -> RuntimeError {
        self.error_at(&self.image_endpoint, op, e)
    }

    /// A CRI failure as the runtime boundary's error, for operation `op`.
    fn error(&self, op: impl Into<String>, e: CriError) -> RuntimeError {
        self.error_at(&self.endpoint, op, e)
    }

    /// A failure of a call to `endpoint` as the runtime boundary's error.
    fn error_at(&self, endpoint: &str, op: impl Into<String>, e: CriError) -> RuntimeError {
        let op = op.into();
        let message = match &e {
            CriError::Grpc(GrpcError::Status { message, .. }) => message.clone(),
            other => other.to_string(),
        };
        match e {
            CriError::Endpoint(endpoint) => RuntimeError::BadEndpoint {
                endpoint,
                reason: message,
            },
            CriError::Grpc(GrpcError::Connect { source, .. }) => RuntimeError::Unavailable {
                endpoint: endpoint.to_string(),
                source,
            },
            CriError::Grpc(GrpcError::DeadlineExceeded { timeout, .. }) => {
                RuntimeError::Timeout { op, after: timeout }
            }
            e => match e.code() {
                Code::Unavailable => RuntimeError::Unavailable {
                    endpoint: endpoint.to_string(),
                    source: io::Error::new(io::ErrorKind::ConnectionAborted, e.to_string()),
                },
                Code::DeadlineExceeded => RuntimeError::Timeout {
                    op,
                    after: self.timeout,
                },
                Code::NotFound => RuntimeError::NotFound { op, message },
                Code::AlreadyExists | Code::FailedPrecondition => {
                    RuntimeError::Conflict { op, message }
                }
                // containerd (1.6, 1.7) answers a name still held by another sandbox or
                // container with Unknown and this text.
                Code::Unknown if message.contains("is reserved for") => {
                    RuntimeError::Conflict { op, message }
                }
                code => RuntimeError::Api {
                    op,
                    status: u16::try_from(code.as_u32()).unwrap_or(u16::MAX),
                    message,
                },
            },
        }
    }

    /// The container's CRI log file and whether the container runs; an error for a
    /// container without one (its sandbox had no log directory).
    fn log_path(&self, id: &str, op: &str) -> Result<(String, bool), RuntimeError> {
        let status = self.container_status(id)?.status.unwrap_or_default();
        if status.log_path.is_empty() {
            return Err(RuntimeError::Api {
                op: op.to_string(),
                status: 0,
                message: "the container has no log file (its sandbox has no log directory)".into(),
            });
        }
        let running = status.state == v1::ContainerState::ContainerRunning as i32;
        Ok((status.log_path, running))
    }

    fn sandbox_status(&self, id: &str) -> Result<v1::PodSandboxStatusResponse, RuntimeError> {
        self.client
            .pod_sandbox_status(&v1::PodSandboxStatusRequest {
                pod_sandbox_id: id.to_string(),
                verbose: true,
            })
            .map_err(|e| self.error(format!("inspect sandbox {id}"), e))
    }

    fn container_status(&self, id: &str) -> Result<v1::ContainerStatusResponse, RuntimeError> {
        self.client
            .container_status(&v1::ContainerStatusRequest {
                container_id: id.to_string(),
                verbose: true,
            })
            .map_err(|e| self.error(format!("inspect container {id}"), e))
    }

    /// Whether `id` names a sandbox (rather than a container, or nothing).
    fn is_sandbox(&self, id: &str) -> Result<bool, RuntimeError> {
        match self
            .client
            .pod_sandbox_status(&v1::PodSandboxStatusRequest {
                pod_sandbox_id: id.to_string(),
                verbose: false,
            }) {
            Ok(_) => Ok(true),
            Err(e) if e.code() == Code::NotFound => Ok(false),
            Err(e) => Err(self.error(format!("inspect sandbox {id}"), e)),
        }
    }

    /// Stops a sandbox (its containers with it); one already gone is not an error.
    fn stop_sandbox(&self, id: &str) -> Result<(), RuntimeError> {
        match self.client.stop_pod_sandbox(&v1::StopPodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        }) {
            Ok(_) => Ok(()),
            Err(e) if e.code() == Code::NotFound => Ok(()),
            Err(e) => Err(self.error(format!("stop sandbox {id}"), e)),
        }
    }

    /// Stops and removes a sandbox; one already gone is not an error.
    fn remove_sandbox(&self, id: &str) -> Result<(), RuntimeError> {
        self.stop_sandbox(id)?;
        match self
            .client
            .remove_pod_sandbox(&v1::RemovePodSandboxRequest {
                pod_sandbox_id: id.to_string(),
            }) {
            Ok(_) => Ok(()),
            Err(e) if e.code() == Code::NotFound => Ok(()),
            Err(e) => Err(self.error(format!("remove sandbox {id}"), e)),
        }
    }

    /// `StopContainer` with `timeout` seconds; a container already gone is not an
    /// error. Returns false when `id` is no container (it may be a sandbox).
    fn stop_container_for(&self, id: &str, timeout: i64) -> Result<bool, RuntimeError> {
        match self.client.stop_container(&v1::StopContainerRequest {
            container_id: id.to_string(),
            timeout,
        }) {
            Ok(_) => Ok(true),
            Err(e) if e.code() == Code::NotFound => Ok(false),
            Err(e) => Err(self.error(format!("stop container {id}"), e)),
        }
    }

    fn list_sandboxes(
        &self,
        filter: Option<v1::PodSandboxFilter>,
    ) -> Result<Vec<v1::PodSandbox>, RuntimeError> {
        self.client
            .list_pod_sandbox(&v1::ListPodSandboxRequest { filter })
            .map(|r| r.items)
            .map_err(|e| self.error("list sandboxes", e))
    }

    fn list_cri_containers(
        &self,
        filter: Option<v1::ContainerFilter>,
    ) -> Result<Vec<v1::Container>, RuntimeError> {
        self.client
            .list_containers(&v1::ListContainersRequest { filter })
            .map(|r| r.containers)
            .map_err(|e| self.error("list containers", e))
    }

    /// The sandboxes of the pod `cfg` is for, any attempt; with `attempt`, only that one.
    fn pod_sandboxes(
        &self,
        cfg: &PodSandboxConfig,
        attempt: Option<u32>,
    ) -> Result<Vec<String>, RuntimeError> {
        let m = &cfg.metadata;
        Ok(self
            .list_sandboxes(None)?
            .into_iter()
            .filter(|s| {
                s.metadata.as_ref().is_some_and(|sm| {
                    sm.name == m.name
                        && sm.namespace == m.namespace
                        && sm.uid == m.uid
                        && attempt.is_none_or(|a| a == sm.attempt)
                })
            })
            .map(|s| s.id)
            .collect())
    }

    /// Starts a stop of a running container on a `cri-stop` thread, unless one runs.
    fn stop_in_background(&self, id: &str) -> Result<(), RuntimeError> {
        if !lock(&self.stopping).insert(id.to_string()) {
            log::debug!("container {id}: a stop is already under way");
            return Ok(());
        }
        let guard = Stopping {
            set: self.stopping.clone(),
            id: id.to_string(),
        };
        let client = self.client.clone();
        let request = v1::StopContainerRequest {
            container_id: id.to_string(),
            timeout: ceil_secs(SIGNAL_STOP_TIMEOUT),
        };
        self.loops
            .spawn_transient(STOP_THREAD, move |_stop| {
                let _guard = guard;
                if let Err(e) = client.stop_container(&request) {
                    if e.code() != Code::NotFound {
                        log::warn!("stop container {}: {e}", request.container_id);
                    }
                }
            })
            .map_err(|e| RuntimeError::Api {
                op: format!("signal container {id}"),
                status: 0,
                message: e.to_string(),
            })
    }
}

impl Runtime for CriRuntime {
    fn version(&self) -> Result<RuntimeVersion, RuntimeError> {
        let v = self
            .client
            .version(&v1::VersionRequest {
                version: "v1".into(),
            })
            .map_err(|e| self.error("version", e))?;
        if v.runtime_api_version != "v1" {
            return Err(RuntimeError::Api {
                op: "version".into(),
                status: UNIMPLEMENTED,
                message: format!(
                    "{} {} speaks CRI {:?}; rkubelet needs v1",
                    v.runtime_name, v.runtime_version, v.runtime_api_version
                ),
            });
        }
        Ok(RuntimeVersion {
            runtime_name: v.runtime_name,
            runtime_version: v.runtime_version,
            api_version: v.runtime_api_version,
        })
    }

    fn info(&self) -> Result<RuntimeInfo, RuntimeError> {
        let status = self
            .client
            .status(&v1::StatusRequest { verbose: true })
            .map_err(|e| self.error("runtime status", e))?;
        let config: serde_json::Value = status
            .info
            .get("config")
            .and_then(|c| serde_json::from_str(c).ok())
            .unwrap_or_default();
        Ok(RuntimeInfo {
            cgroup_driver: translate::cgroup_driver(&config),
            cgroup_version: if std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
                "2".into()
            } else {
                "1".into()
            },
            root_dir: config
                .get("containerdRootDir")
                .and_then(|r| r.as_str())
                .unwrap_or_default()
                .to_string(),
            sandbox_image: config
                .get("sandboxImage")
                .and_then(|r| r.as_str())
                .unwrap_or_default()
                .to_string(),
        })
    }

    fn list_containers(
        &self,
        label_filter: &[String],
    ) -> Result<Vec<ContainerSummary>, RuntimeError> {
        let (selector, _bare) = translate::label_selector(label_filter);
        let sandboxes = self.list_sandboxes(Some(v1::PodSandboxFilter {
            label_selector: selector.clone(),
            ..Default::default()
        }))?;
        let containers = self.list_cri_containers(Some(v1::ContainerFilter {
            label_selector: selector,
            ..Default::default()
        }))?;
        Ok(sandboxes
            .into_iter()
            .map(translate::sandbox_summary)
            .chain(containers.into_iter().map(translate::container_summary))
            .filter(|s| translate::has_labels(&s.labels, label_filter))
            .collect())
    }

    fn inspect_container(&self, id: &str) -> Result<ContainerDetails, RuntimeError> {
        match self.container_status(id) {
            Ok(r) => match r.status {
                Some(s) => Ok(translate::container_details(s, &r.info)),
                None => Err(RuntimeError::NotFound {
                    op: format!("inspect container {id}"),
                    message: "the runtime answered no status".into(),
                }),
            },
            Err(RuntimeError::NotFound { .. }) => {
                let r = self.sandbox_status(id).map_err(|e| match e {
                    RuntimeError::NotFound { message, .. } => RuntimeError::NotFound {
                        op: format!("inspect container {id}"),
                        message,
                    },
                    e => e,
                })?;
                match r.status {
                    Some(s) => Ok(translate::sandbox_details(s, &r.info)),
                    None => Err(RuntimeError::NotFound {
                        op: format!("inspect container {id}"),
                        message: "the runtime answered no status".into(),
                    }),
                }
            }
            Err(e) => Err(e),
        }
    }

    fn run_pod_sandbox(&self, config: &PodSandboxConfig) -> Result<String, RuntimeError> {
        let m = &config.metadata;
        let op = format!(
            "run sandbox of pod {}/{} attempt {}",
            m.namespace, m.name, m.attempt
        );
        let request = v1::RunPodSandboxRequest {
            config: Some(translate::sandbox_config(config)),
            runtime_handler: String::new(),
        };
        let run = || {
            self.client
                .run_pod_sandbox(&request)
                .map(|r| r.pod_sandbox_id)
                .map_err(|e| self.error(op.clone(), e))
        };
        match run() {
            Err(RuntimeError::Conflict { message, .. }) => {
                let leftovers = self.pod_sandboxes(config, Some(m.attempt))?;
                log::info!("{op}: {message}; removing the leftover {leftovers:?}");
                for id in &leftovers {
                    self.remove_sandbox(id)?;
                }
                run()
            }
            other => other,
        }
    }

    fn create_container(
        &self,
        pod_sandbox_id: &str,
        config: &ContainerConfig,
        sandbox_config: &PodSandboxConfig,
    ) -> Result<String, RuntimeError> {
        let op = format!(
            "create container {} attempt {} in sandbox {pod_sandbox_id}",
            config.metadata.name, config.metadata.attempt
        );
        let mut sandbox = translate::sandbox_config(sandbox_config);
        // A runtime admits a privileged container only into a sandbox whose config
        // says privileged (containerd checks the config sent here); the neutral
        // sandbox config has no such flag, so it is the container's.
        if config.linux.security_context.privileged {
            if let Some(sc) = sandbox
                .linux
                .as_mut()
                .and_then(|l| l.security_context.as_mut())
            {
                sc.privileged = true;
            }
        }
        let request = v1::CreateContainerRequest {
            pod_sandbox_id: pod_sandbox_id.to_string(),
            config: Some(translate::container_config(config)),
            sandbox_config: Some(sandbox),
        };
        let create = || {
            self.client
                .create_container(&request)
                .map(|r| r.container_id)
                .map_err(|e| self.error(op.clone(), e))
        };
        match create() {
            Err(RuntimeError::Conflict { message, .. }) => {
                // The runtime names a container by its pod and attempt, not by its
                // sandbox: the leftover may sit in any sandbox of the pod.
                let sandboxes = self.pod_sandboxes(sandbox_config, None)?;
                let leftovers: Vec<String> = self
                    .list_cri_containers(None)?
                    .into_iter()
                    .filter(|c| {
                        (c.pod_sandbox_id == pod_sandbox_id
                            || sandboxes.contains(&c.pod_sandbox_id))
                            && c.metadata.as_ref().is_some_and(|m| {
                                m.name == config.metadata.name
                                    && m.attempt == config.metadata.attempt
                            })
                    })
                    .map(|c| c.id)
                    .collect();
                log::info!("{op}: {message}; removing the leftover {leftovers:?}");
                for id in &leftovers {
                    self.remove_container(id)?;
                }
                create()
            }
            other => other,
        }
    }

    fn start_container(&self, id: &str) -> Result<(), RuntimeError> {
        self.client
            .start_container(&v1::StartContainerRequest {
                container_id: id.to_string(),
            })
            .map(drop)
            .map_err(|e| self.error(format!("start container {id}"), e))
    }

    fn stop_container(&self, id: &str, grace: Duration) -> Result<(), RuntimeError> {
        if !self.stop_container_for(id, ceil_secs(base::time::clamp_timeout(grace)))? {
            self.stop_sandbox(id)?;
        }
        Ok(())
    }

    fn kill_container(&self, id: &str, signal: &str) -> Result<(), RuntimeError> {
        if is_sigkill(signal) {
            if !self.stop_container_for(id, 0)? {
                self.stop_sandbox(id)?;
            }
            return Ok(());
        }
        let status = match self.container_status(id) {
            Ok(r) => r.status,
            // A sandbox's pause process ends at its first signal: stopping it is that.
            Err(RuntimeError::NotFound { .. }) => return self.stop_sandbox(id),
            Err(e) => return Err(e),
        };
        if status.is_some_and(|s| s.state == v1::ContainerState::ContainerRunning as i32) {
            if signal != "SIGTERM" {
                log::debug!(
                    "container {id}: CRI stops with the container's stop signal, not {signal}"
                );
            }
            self.stop_in_background(id)?;
        }
        Ok(())
    }

    fn remove_container(&self, id: &str) -> Result<(), RuntimeError> {
        if self.is_sandbox(id)? {
            return self.remove_sandbox(id);
        }
        match self.client.remove_container(&v1::RemoveContainerRequest {
            container_id: id.to_string(),
        }) {
            Ok(_) => Ok(()),
            Err(e) if e.code() == Code::NotFound => Ok(()),
            Err(e) => Err(self.error(format!("remove container {id}"), e)),
        }
    }

    fn inspect_image(&self, image: &str) -> Result<Option<ImageDetails>, RuntimeError> {
        match self.images.image_status(&v1::ImageStatusRequest {
            image: Some(v1::ImageSpec {
                image: image.to_string(),
                ..Default::default()
            }),
            verbose: true,
        }) {
            Ok(r) => Ok(r.image.map(|i| translate::image_details(i, &r.info))),
            Err(e) if e.code() == Code::NotFound => Ok(None),
            Err(e) => Err(self.image_error(format!("inspect image {image}"), e)),
        }
    }

    fn pull_image(&self, image: &str, auth: Option<&RegistryAuth>) -> Result<(), RuntimeError> {
        let image = image.trim();
        self.images
            .pull_image(&v1::PullImageRequest {
                image: Some(v1::ImageSpec {
                    image: image.to_string(),
                    ..Default::default()
                }),
                auth: auth.map(translate::auth_config),
                sandbox_config: None,
            })
            .map(drop)
            .map_err(|e| self.image_error(format!("pull image {image}"), e))
    }

    fn import_image(
        &self,
        image: &str,
        _changes: &[String],
        _tar: (&mut dyn std::io::Read, u64),
    ) -> Result<(), RuntimeError> {
        Err(RuntimeError::Api {
            op: format!("import image {image}"),
            status: UNIMPLEMENTED,
            message: "a CRI runtime has no image import".into(),
        })
    }

    fn load_image(&self, _tar: (&mut dyn std::io::Read, u64)) -> Result<Vec<String>, RuntimeError> {
        Err(RuntimeError::Api {
            op: "load image".into(),
            status: UNIMPLEMENTED,
            message: "a CRI runtime has no image import".into(),
        })
    }

    /// The first image filesystem of `ImageFsInfo`, as upstream's CRI stats provider
    /// reads it.
    fn image_fs_usage(&self) -> Result<Option<runtime::ImageFsUsage>, RuntimeError> {
        let r = self
            .images
            .image_fs_info(&v1::ImageFsInfoRequest {})
            .map_err(|e| self.image_error("image fs info", e))?;
        Ok(r.image_filesystems
            .into_iter()
            .next()
            .map(|fs| runtime::ImageFsUsage {
                mountpoint: fs.fs_id.map(|id| id.mountpoint).unwrap_or_default(),
                used_bytes: fs.used_bytes.map_or(0, |u| u.value),
                inodes_used: fs.inodes_used.map(|u| u.value),
            }))
    }

    fn list_images(&self) -> Result<Vec<ImageDetails>, RuntimeError> {
        let r = self
            .images
            .list_images(&v1::ListImagesRequest { filter: None })
            .map_err(|e| self.image_error("list images", e))?;
        let none = HashMap::new();
        Ok(r.images
            .into_iter()
            .map(|i| translate::image_details(i, &none))
            .collect())
    }

    fn remove_image(&self, image: &str) -> Result<(), RuntimeError> {
        match self.images.remove_image(&v1::RemoveImageRequest {
            image: Some(v1::ImageSpec {
                image: image.to_string(),
                ..Default::default()
            }),
        }) {
            Ok(_) => Ok(()),
            Err(e) if e.code() == Code::NotFound => Ok(()),
            Err(e) => Err(self.image_error(format!("remove image {image}"), e)),
        }
    }

    fn logs(&self, id: &str, tail: Option<u64>) -> Result<Vec<u8>, RuntimeError> {
        let op = format!("read logs of container {id}");
        let path = self.log_path(id, &op)?.0;
        let read = || -> io::Result<(Vec<u8>, bool)> {
            let mut file = std::fs::File::open(&path)?;
            let len = file.metadata()?.len();
            let start = len.saturating_sub(MAX_LOG_BYTES);
            file.seek(SeekFrom::Start(start))?;
            let mut text = Vec::new();
            file.take(MAX_LOG_BYTES).read_to_end(&mut text)?;
            Ok((text, start > 0))
        };
        let (text, cut) = read().map_err(|e| RuntimeError::Api {
            op,
            status: 0,
            message: format!("cannot read {path}: {e}"),
        })?;
        Ok(logs::log_tail(&text, tail, cut))
    }

    /// Upstream's `ReadLogs` over the container's CRI log file (`crate::logs`); a
    /// follower asks `ContainerStatus` whether the container still runs.
    fn log_stream(
        &self,
        id: &str,
        opts: &LogOptions,
        wake: Duration,
    ) -> Result<LogStream, RuntimeError> {
        let op = format!("stream logs of container {id}");
        let (path, running) = self.log_path(id, &op)?;
        let client = self.client.clone();
        let cid = id.to_string();
        let check: logs::RunningCheck = Box::new(move || {
            let status = client.container_status_within(
                &v1::ContainerStatusRequest {
                    container_id: cid.clone(),
                    verbose: false,
                },
                FOLLOW_STATUS_TIMEOUT,
            );
            match status {
                Ok(r) => Ok(r
                    .status
                    .is_some_and(|s| s.state == v1::ContainerState::ContainerRunning as i32)),
                Err(e) if e.code() == Code::NotFound => Ok(false),
                Err(e) => Err(io::Error::other(format!(
                    "cannot tell whether container {cid} runs: {e}"
                ))),
            }
        });
        // A container that is not running has written all it will: no need to wait.
        let opts = LogOptions {
            follow: opts.follow && running,
            ..opts.clone()
        };
        let reader = logs::LogReader::open(Path::new(&path), &opts, wake, check).map_err(|e| {
            RuntimeError::Api {
                op,
                status: 0,
                message: format!("cannot read {path}: {e}"),
            }
        })?;
        Ok(Box::new(reader))
    }

    fn reopen_container_log(&self, id: &str) -> Result<(), RuntimeError> {
        self.client
            .reopen_container_log(&v1::ReopenContainerLogRequest {
                container_id: id.to_string(),
            })
            .map(drop)
            .map_err(|e| self.error(format!("reopen the log of container {id}"), e))
    }

    fn exec(
        &self,
        id: &str,
        cmd: &[String],
        timeout: Duration,
    ) -> Result<ExecResult, RuntimeError> {
        let r = self
            .client
            .exec_sync(&v1::ExecSyncRequest {
                container_id: id.to_string(),
                cmd: cmd.to_vec(),
                // CRI's 0 is "no timeout": at least a second.
                timeout: ceil_secs(base::time::clamp_timeout(timeout)).max(1),
            })
            .map_err(|e| {
                let op = format!("exec {:?} in container {id}", cmd.join(" "));
                command_timed_out(self.error(op, e), timeout)
            })?;
        Ok(ExecResult {
            exit_code: i64::from(r.exit_code),
            stdout: r.stdout,
            stderr: r.stderr,
        })
    }

    fn exec_interactive(
        &self,
        id: &str,
        _cmd: &[String],
        _opts: StreamOptions,
    ) -> Result<ExecSession, RuntimeError> {
        Err(not_supported(
            format!("exec in container {id}"),
            "interactive exec",
        ))
    }

    fn exec_status(&self, exec_id: &str) -> Result<Option<i64>, RuntimeError> {
        Err(not_supported(
            format!("inspect exec {exec_id}"),
            "interactive exec",
        ))
    }

    fn resize_exec(&self, exec_id: &str, _size: TermSize) -> Result<(), RuntimeError> {
        Err(not_supported(
            format!("resize exec {exec_id}"),
            "interactive exec",
        ))
    }

    fn attach(&self, id: &str, _opts: StreamOptions) -> Result<Box<dyn ProcessIo>, RuntimeError> {
        Err(not_supported(format!("attach to container {id}"), "attach"))
    }

    fn resize_container(&self, id: &str, _size: TermSize) -> Result<(), RuntimeError> {
        Err(not_supported(format!("resize container {id}"), "attach"))
    }

    /// CRI's `Exec`, `Attach` or `PortForward` (upstream's `GetExec`, `GetAttach`,
    /// `GetPortForward` in kuberuntime): the runtime's streaming server's URL for
    /// this one session.
    fn stream_url(&self, request: &StreamRequest) -> Result<Option<String>, RuntimeError> {
        let (op, answer) = match request {
            StreamRequest::Exec {
                container_id,
                cmd,
                opts,
            } => (
                format!("exec {:?} in container {container_id}", cmd.join(" ")),
                self.client
                    .exec(&v1::ExecRequest {
                        container_id: container_id.clone(),
                        cmd: cmd.clone(),
                        tty: opts.tty,
                        stdin: opts.stdin,
                        stdout: opts.stdout,
                        stderr: opts.stderr,
                    })
                    .map(|r| r.url),
            ),
            StreamRequest::Attach { container_id, opts } => (
                format!("attach to container {container_id}"),
                self.client
                    .attach(&v1::AttachRequest {
                        container_id: container_id.clone(),
                        stdin: opts.stdin,
                        tty: opts.tty,
                        stdout: opts.stdout,
                        stderr: opts.stderr,
                    })
                    .map(|r| r.url),
            ),
            StreamRequest::PortForward { sandbox_id, ports } => (
                format!("port-forward to sandbox {sandbox_id}"),
                self.client
                    .port_forward(&v1::PortForwardRequest {
                        pod_sandbox_id: sandbox_id.clone(),
                        port: ports.iter().map(|p| i32::from(*p)).collect(),
                    })
                    .map(|r| r.url),
            ),
        };
        let url = answer.map_err(|e| self.error(op.clone(), e))?;
        if url.is_empty() {
            // Upstream's remote runtime client refuses an empty URL too.
            return Err(RuntimeError::Api {
                op,
                status: 0,
                message: "the runtime answered no streaming URL".into(),
            });
        }
        Ok(Some(url))
    }

    /// CRI's `GetContainerEvents`, read on a `cri-events` thread so this one can check
    /// `should_stop` every second. It replays nothing (`filter.since` is not honoured)
    /// and containerd 1.6 has none: there the watch fails with
    /// [`RuntimeError::Api`] of status 12 (Unimplemented) after [`EventItem::Opened`],
    /// and the caller relists instead. Labels and kinds are filtered here.
    fn watch_events(
        &self,
        filter: &EventFilter,
        on_item: &mut dyn FnMut(EventItem) -> bool,
        should_stop: &dyn Fn() -> bool,
    ) -> Result<(), RuntimeError> {
        const OP: &str = "watch container events";
        let (tx, rx) = mpsc::sync_channel(EVENTS_BUFFER);
        let client = self.client.clone();
        self.loops
            .spawn_transient(EVENTS_THREAD, move |_stop| {
                let events = match client.get_container_events() {
                    Ok(events) => events,
                    Err(e) => {
                        let _ = tx.send(EventMsg::Failed(e));
                        return;
                    }
                };
                if tx.send(EventMsg::Opened(events.canceller())).is_err() {
                    return;
                }
                for item in events {
                    let msg = match item {
                        Ok(e) => EventMsg::Event(Box::new(e)),
                        Err(e) => EventMsg::Failed(e),
                    };
                    if tx.send(msg).is_err() {
                        return;
                    }
                }
                let _ = tx.send(EventMsg::Ended);
            })
            .map_err(|e| RuntimeError::Api {
                op: OP.into(),
                status: 0,
                message: e.to_string(),
            })?;
        let mut cancel = CancelOnDrop(None);
        loop {
            if should_stop() {
                return Ok(());
            }
            let msg = match rx.recv_timeout(EVENTS_WAKEUP) {
                Ok(msg) => msg,
                Err(mpsc::RecvTimeoutError::Timeout) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => EventMsg::Ended,
            };
            match msg {
                EventMsg::Opened(c) => {
                    cancel.0 = Some(c);
                    if !on_item(EventItem::Opened) {
                        return Ok(());
                    }
                }
                EventMsg::Event(e) => {
                    let Some(kind) = translate::event_kind(e.container_event_type) else {
                        continue;
                    };
                    let labels = translate::event_labels(&e);
                    if !(filter.kinds.is_empty() || filter.kinds.contains(&kind))
                        || !translate::has_labels(&labels, &filter.labels)
                    {
                        continue;
                    }
                    let event = RuntimeEvent {
                        id: e.container_id,
                        kind,
                        labels,
                        time: translate::event_time(e.created_at),
                    };
                    if !on_item(EventItem::Event(event)) {
                        return Ok(());
                    }
                }
                EventMsg::Failed(e) => return Err(self.error(OP, e)),
                EventMsg::Ended => {
                    return Err(RuntimeError::Unavailable {
                        endpoint: self.endpoint.clone(),
                        source: io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the runtime ended the event stream",
                        ),
                    })
                }
            }
        }
    }

    fn network_status(&self) -> Result<NetworkStatus, RuntimeError> {
        let status = self
            .client
            .status(&v1::StatusRequest { verbose: false })
            .map_err(|e| self.error("runtime status", e))?;
        let condition = status
            .status
            .into_iter()
            .flat_map(|s| s.conditions)
            .find(|c| c.r#type == "NetworkReady");
        Ok(match condition {
            Some(c) if c.status => NetworkStatus {
                ready: true,
                reason: String::new(),
                message: String::new(),
            },
            Some(c) => NetworkStatus {
                ready: false,
                reason: c.reason,
                message: c.message,
            },
            None => NetworkStatus {
                ready: false,
                reason: "NetworkPluginNotReady".into(),
                message: "the runtime reports no NetworkReady condition".into(),
            },
        })
    }

    fn update_runtime_config(&self, pod_cidrs: &[String]) -> Result<(), RuntimeError> {
        let Some(cidr) = pod_cidrs.iter().find(|c| !c.is_empty()) else {
            return Ok(());
        };
        self.client
            .update_runtime_config(&v1::UpdateRuntimeConfigRequest {
                runtime_config: Some(v1::RuntimeConfig {
                    network_config: Some(v1::NetworkConfig {
                        pod_cidr: cidr.clone(),
                    }),
                }),
            })
            .map(drop)
            .map_err(|e| self.error(format!("update runtime config (pod CIDR {cidr})"), e))
    }
}

/// Upstream's `ExecSync` (remote_runtime.go): a DeadlineExceeded, the runtime's
/// (the command ran past its own timeout) or ours (that timeout plus the request's),
/// is the command timing out after *its* timeout, not after the request timeout that
/// `error` puts in a runtime's DeadlineExceeded.
fn command_timed_out(e: RuntimeError, timeout: Duration) -> RuntimeError {
    match e {
        RuntimeError::Timeout { op, .. } => RuntimeError::Timeout { op, after: timeout },
        e => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exec_times_out_after_the_commands_own_timeout() {
        let runtime_said = RuntimeError::Timeout {
            op: "exec".into(),
            after: Duration::from_secs(120),
        };
        match command_timed_out(runtime_said, Duration::from_secs(1)) {
            RuntimeError::Timeout { op, after } => {
                assert_eq!((op.as_str(), after), ("exec", Duration::from_secs(1)));
            }
            e => panic!("not a timeout: {e}"),
        }
        let other = RuntimeError::NotFound {
            op: "exec".into(),
            message: "gone".into(),
        };
        assert!(command_timed_out(other, Duration::from_secs(1)).is_not_found());
    }

    #[test]
    fn seconds_round_up() {
        assert_eq!(ceil_secs(Duration::from_millis(1)), 1);
        assert_eq!(ceil_secs(Duration::from_secs(30)), 30);
        assert_eq!(ceil_secs(Duration::ZERO), 0);
        assert_eq!(ceil_secs(Duration::MAX), i64::MAX);
    }

    #[test]
    fn only_sigkill_kills_at_once() {
        assert!(is_sigkill("SIGKILL") && is_sigkill("9") && is_sigkill("KILL"));
        assert!(!is_sigkill("SIGTERM") && !is_sigkill("15"));
    }
}
