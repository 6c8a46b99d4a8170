//! The Docker implementation of [`Runtime`]: the Engine API over the Unix socket,
//! spoken with blocking `ureq` and Docker's generated models from `bollard-stubs`.
//!
//! This is the only module of rkubelet that knows Docker's API (DESIGN.md rule 9). It
//! plays the role of the Go kubelet's dockershim (`pkg/kubelet/dockershim`): the
//! runtime-neutral calls of [`Runtime`] become Engine API requests, and Docker's
//! answers become the neutral types of [`runtime`].
//!
//! The parts:
//! - `transport`: ureq's transport API aimed at the Unix socket, no DNS.
//! - `client`: the agent, lazy API version negotiation, timeouts, error mapping.
//! - `stream`: multiplexed stdout/stderr frames and JSON-lines decoding.
//! - `logs`: a container's log as a stream (`/containerLogs`).
//! - `hijack`: exec and attach connections taken over after `101 UPGRADED`, the
//!   process's streams both ways.
//! - `reference`: a pull's `fromImage` and `tag` from an image reference.
//! - `translate`: sandbox and container configs as create requests (dockershim's
//!   translation); `model`: Docker's answers as the neutral types; `settings`: what
//!   Docker reports a container was created with, for checks.
//! - `wire`: timestamps, query escaping, base64 of registry credentials.
//!
//! Every call is bounded by a timeout, and a socket that is absent or refuses
//! connections is [`RuntimeError::Unavailable`], never a panic or a hang: the kubelet
//! starts with Docker down and keeps retrying.
//!
//! The event stream is read with ureq's ordinary body reader. It sets a 1 s per-read
//! timeout; ureq's body reader survives a read timeout (the unread state stays in the
//! connection and the next read continues), so the thread wakes every second to check
//! for shutdown without ending the stream or losing a partial line.
//!
//! Over 800 lines: one `impl Runtime` block, each method one or two Engine API calls;
//! the parts with a life of their own (transport, client, streams, hijacked exec and
//! attach, models) are already in their own files.
// What another crate uses is `pub`, the rest `pub(crate)` or private
// (tests/tidy.rs checks that each `pub` item is named outside the crate).
#![warn(unreachable_pub)]

mod client;
mod logs;
mod hijack;
mod model;
mod reference;
pub mod settings;
mod stream;
pub mod translate;
mod transport;
mod wire;

use std::io::{self, Read};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bollard_stubs::models as api;
use serde::Deserialize;

use self::client::{is_read_timeout, Client, Req};
use self::model::{
    details_from, docker_action, event_from, image_from_inspect, image_from_summary, settings_of,
    summary_from,
};
use self::reference::pull_params;
use self::settings::ContainerSettings;
use self::stream::{append_capped, demux_interleaved, FrameDecoder, StreamKind};
use self::translate::{container_body, container_name, sandbox_body, sandbox_name, LogRotation};
use self::wire::REGISTRY_AUTH_BASE64;
use base::lines::LineReader;
use base::netutil::query_escape as percent_encode;
use runtime::config::{ContainerConfig, PodSandboxConfig, SecurityProfile};
use runtime::{
    ContainerDetails, ContainerSummary, EventFilter, EventItem, ExecResult, ExecSession,
    ImageDetails, LogOptions, LogStream, NetworkStatus, ProcessIo, RegistryAuth, Runtime,
    RuntimeError, RuntimeInfo, RuntimeVersion, StreamOptions, StreamRequest, TermSize,
};

/// Reads (list, inspect, version): the PLEG relists every second, so a hung engine
/// must surface quickly as an error rather than stall it.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Create, start and remove: these wait on the engine's storage and runc, which on a
/// loaded two-core board takes seconds; the upstream kubelet's
/// `--runtime-request-timeout` default is 2 min.
const LIFECYCLE_TIMEOUT: Duration = Duration::from_secs(120);

/// Added to the grace period of a stop: after the grace period the engine sends
/// SIGKILL and still has to reap the process and tear down its network.
const STOP_EXTRA: Duration = Duration::from_secs(30);

/// A whole pull: big images over a slow link take minutes.
const PULL_TIMEOUT: Duration = Duration::from_secs(600);

/// A whole import of the kubelet's own binary as the pause image: tens of MiB over
/// the local socket, then the engine writes one layer; a slow SD card takes a while.
const IMPORT_TIMEOUT: Duration = Duration::from_secs(300);

/// A pull whose progress stream is silent this long is stuck (the upstream kubelet's
/// `--image-pull-progress-deadline` default is 1 min).
const PULL_PROGRESS_DEADLINE: Duration = Duration::from_secs(60);

/// While a pull runs, its latest progress is logged this often (dockershim's
/// `defaultImagePullingProgressReportInterval`), so a slow pull is visible.
const PULL_PROGRESS_REPORT: Duration = Duration::from_secs(10);

/// Fetching logs reads files the engine may have to decode line by line.
const LOGS_TIMEOUT: Duration = Duration::from_secs(30);

/// The most log bytes one call returns: a log fetched whole must not exhaust a small
/// board's memory. Use `tail` for recent lines.
const MAX_LOG_BYTES: u64 = 16 * 1024 * 1024;

/// Each of an exec's stdout and stderr is kept up to this size (probes and `kubectl
/// exec` without a TTY need far less); the rest is read and dropped.
const MAX_EXEC_OUTPUT: usize = 1024 * 1024;

/// How often the event stream wakes up to check `should_stop` when no event arrives.
const EVENTS_WAKEUP: Duration = Duration::from_secs(1);

/// The longest JSON line accepted from the events or pull streams.
const MAX_STREAM_LINE: usize = 1024 * 1024;

/// How often an exec's state is polled when the engine has closed its output stream
/// but not yet recorded its exit code.
const EXEC_EXIT_POLL: Duration = Duration::from_millis(10);

/// The Docker runtime. Cheap to share (`Arc<Docker>`): calls from many threads run
/// concurrently over a small pool of connections.
#[derive(Debug)]
pub struct Docker {
    client: Client,
    /// The image sandboxes run (`--pod-infra-container-image`).
    sandbox_image: String,
    /// Rotation of the containers' json-file logs; None: the engine's default.
    log_rotation: Option<LogRotation>,
    /// A network plugin (`cni`, `kubenet`) gives pods their network, not Docker's bridge.
    plugin_network: bool,
}

impl Docker {
    /// A runtime for the engine at `endpoint` (`unix:///var/run/docker.sock`, or a bare
    /// socket path). Does not connect: the engine may be down now and come up later;
    /// the API version is negotiated on the first call.
    pub fn connect(endpoint: &str) -> Result<Docker, RuntimeError> {
        let path = parse_endpoint(endpoint).map_err(|reason| RuntimeError::BadEndpoint {
            endpoint: endpoint.to_string(),
            reason,
        })?;
        Ok(Docker {
            client: Client::new(endpoint.to_string(), path),
            sandbox_image: String::new(),
            log_rotation: None,
            plugin_network: false,
        })
    }

    /// A network plugin (`cni`, `kubenet`) gives pods their network: a sandbox on the
    /// pod network is made with Docker's `none` network, and its host ports are the
    /// plugin's to map (dockershim with `--network-plugin`).
    pub fn with_plugin_network(mut self) -> Docker {
        self.plugin_network = true;
        self
    }

    /// Sandboxes run `image` (`--pod-infra-container-image`; the kubelet makes sure
    /// it is present before it runs one).
    pub fn with_sandbox_image(mut self, image: &str) -> Docker {
        self.sandbox_image = image.to_string();
        self
    }

    /// Containers' json-file logs are rotated so (`containerLogMaxSize`,
    /// `containerLogMaxFiles`).
    pub fn with_log_rotation(mut self, rotation: LogRotation) -> Docker {
        self.log_rotation = Some(rotation);
        self
    }

    /// What Docker reports a container was created with, in its own spelling (binds,
    /// namespace modes, security options): for checks and debugging; the kubelet
    /// reads [`Runtime::inspect_container`].
    pub fn inspect_settings(&self, id: &str) -> Result<ContainerSettings, RuntimeError> {
        Ok(settings_of(self.inspect(id)?))
    }

    fn inspect(&self, id: &str) -> Result<model::Inspect, RuntimeError> {
        let op = format!("inspect container {id}");
        let path = format!("/containers/{}/json", percent_encode(id));
        self.client.call_json(&op, Req::get(path))
    }

    /// Creates a container named `name` from `body`; a leftover of that name (made
    /// just before a crash of the kubelet, whose instance numbering then gives the same
    /// name again) is removed and the create tried once more, as dockershim's
    /// `recoverFromCreationConflictIfNeeded`.
    fn create_named(
        &self,
        name: &str,
        body: &api::ContainerCreateBody,
    ) -> Result<String, RuntimeError> {
        match self.create_once(name, body) {
            Err(RuntimeError::Conflict { .. }) => {
                log::info!("container name {name} is in use; removing the old one");
                self.remove_container(name)?;
                self.create_once(name, body)
            }
            other => other,
        }
    }

    fn create_once(
        &self,
        name: &str,
        body: &api::ContainerCreateBody,
    ) -> Result<String, RuntimeError> {
        let op = format!("create container {name}");
        let body = serde_json::to_vec(body).map_err(|source| RuntimeError::Decode {
            op: op.clone(),
            source,
        })?;
        let path = format!("/containers/create?name={}", percent_encode(name));
        let req = Req::post(path).json(body).timeout(Some(LIFECYCLE_TIMEOUT));
        let created: api::ContainerCreateResponse = self.client.call_json(&op, req)?;
        for warning in &created.warnings {
            log::warn!("{op}: docker warns: {warning}");
        }
        Ok(created.id)
    }

    /// Reads a pull's or an import's progress stream to its end. A 200 answer only
    /// means the work began: failures arrive as a line of the stream, so every line is
    /// checked. While it runs, the latest line is logged every
    /// [`PULL_PROGRESS_REPORT`] after `what`.
    fn read_progress(
        &self,
        op: &str,
        req: &Req,
        resp: ureq::http::Response<ureq::Body>,
        what: &str,
        on_line: &mut dyn FnMut(&PullProgress),
    ) -> Result<(), RuntimeError> {
        let body = resp.into_body().into_with_config().limit(u64::MAX).reader();
        let mut lines = LineReader::new(body, MAX_STREAM_LINE);
        let mut next_report = Instant::now() + PULL_PROGRESS_REPORT;
        let mut latest = String::new();
        loop {
            if Instant::now() >= next_report {
                log::info!("{what}: {latest:?}");
                next_report = Instant::now() + PULL_PROGRESS_REPORT;
            }
            let line = match lines.next_line() {
                Ok(Some(line)) => line,
                Ok(None) => return Ok(()),
                Err(e) => return Err(self.client.body_error(op, req, e)),
            };
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let progress: PullProgress =
                serde_json::from_slice(&line).map_err(|source| RuntimeError::Decode {
                    op: op.to_string(),
                    source,
                })?;
            if let Some(message) = progress.error_message() {
                return Err(pull_error(op.to_string(), message));
            }
            on_line(&progress);
            latest = progress.text();
        }
    }
}

/// The socket path of an endpoint, or why it cannot be used.
/// The largest seccomp profile read: real ones are a few KiB.
const MAX_SECCOMP_PROFILE: u64 = 1024 * 1024;

/// A `Localhost` seccomp profile's JSON, at most [`MAX_SECCOMP_PROFILE`] bytes.
fn read_seccomp_profile(path: &str) -> io::Result<String> {
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(MAX_SECCOMP_PROFILE + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > MAX_SECCOMP_PROFILE {
        return Err(io::Error::other(format!(
            "larger than {MAX_SECCOMP_PROFILE} bytes"
        )));
    }
    Ok(text)
}

fn parse_endpoint(endpoint: &str) -> Result<PathBuf, String> {
    let path = match endpoint.strip_prefix("unix://") {
        Some(path) => path,
        None if endpoint.starts_with('/') => endpoint,
        None => {
            return Err("only unix:// endpoints (or an absolute socket path) are supported".into())
        }
    };
    if !path.starts_with('/') {
        return Err("the socket path must be absolute, e.g. unix:///var/run/docker.sock".into());
    }
    Ok(PathBuf::from(path))
}

impl Runtime for Docker {
    fn version(&self) -> Result<RuntimeVersion, RuntimeError> {
        let (version, api) = self.client.negotiate()?;
        Ok(RuntimeVersion {
            runtime_name: "docker".to_string(),
            runtime_version: version.version.unwrap_or_default(),
            api_version: api.to_string(),
        })
    }

    fn info(&self) -> Result<RuntimeInfo, RuntimeError> {
        /// The fields of `/info` the kubelet reads.
        #[derive(serde::Deserialize)]
        struct Info {
            #[serde(rename = "CgroupDriver", default)]
            cgroup_driver: String,
            #[serde(rename = "CgroupVersion", default)]
            cgroup_version: String,
            #[serde(rename = "DockerRootDir", default)]
            docker_root_dir: String,
        }
        let i: Info = self
            .client
            .call_json("info", Req::get("/info".to_string()))?;
        Ok(RuntimeInfo {
            cgroup_driver: i.cgroup_driver,
            cgroup_version: i.cgroup_version,
            root_dir: i.docker_root_dir,
            sandbox_image: String::new(),
        })
    }

    fn list_containers(
        &self,
        label_filter: &[String],
    ) -> Result<Vec<ContainerSummary>, RuntimeError> {
        let mut path = "/containers/json?all=1".to_string();
        if !label_filter.is_empty() {
            let filters = serde_json::json!({ "label": label_filter });
            path.push_str("&filters=");
            path.push_str(&percent_encode(&filters.to_string()));
        }
        let list: Vec<model::ListedContainer> =
            self.client.call_json("list containers", Req::get(path))?;
        Ok(list.into_iter().map(summary_from).collect())
    }

    fn inspect_container(&self, id: &str) -> Result<ContainerDetails, RuntimeError> {
        Ok(details_from(self.inspect(id)?))
    }

    fn run_pod_sandbox(&self, config: &PodSandboxConfig) -> Result<String, RuntimeError> {
        let id = self.create_named(
            &sandbox_name(config),
            &sandbox_body(config, &self.sandbox_image, self.plugin_network),
        )?;
        self.start_container(&id)?;
        Ok(id)
    }

    fn create_container(
        &self,
        pod_sandbox_id: &str,
        config: &ContainerConfig,
        sandbox_config: &PodSandboxConfig,
    ) -> Result<String, RuntimeError> {
        let name = container_name(config, sandbox_config);
        let sc = &config.linux.security_context;
        // Docker takes a profile's content, not its path (dockershim
        // `getSeccompDockerOpts`).
        let seccomp = match &sc.seccomp {
            SecurityProfile::Localhost(path) if !sc.privileged => {
                Some(read_seccomp_profile(path).map_err(|e| RuntimeError::Api {
                    op: format!("create container {name}"),
                    status: 0,
                    message: format!("failed to read seccomp profile {path}: {e}"),
                })?)
            }
            _ => None,
        };
        let body = container_body(
            pod_sandbox_id,
            config,
            sandbox_config,
            self.log_rotation,
            seccomp.as_deref(),
        );
        self.create_named(&name, &body)
    }

    fn start_container(&self, id: &str) -> Result<(), RuntimeError> {
        let op = format!("start container {id}");
        let path = format!("/containers/{}/start", percent_encode(id));
        // 304: already running, which is what the caller wants.
        self.client
            .call(&op, Req::post(path).timeout(Some(LIFECYCLE_TIMEOUT)))
            .map(|_| ())
    }

    fn stop_container(&self, id: &str, grace: Duration) -> Result<(), RuntimeError> {
        let op = format!("stop container {id}");
        // Docker takes whole seconds, as an int it multiplies into nanoseconds: round
        // up so a grace period is never cut short, and cap it so that never overflows.
        let grace = base::time::clamp_timeout(grace);
        let secs = grace.as_millis().div_ceil(1000);
        let path = format!("/containers/{}/stop?t={secs}", percent_encode(id));
        let req = Req::post(path).timeout(Some(grace.saturating_add(STOP_EXTRA)));
        // 304: already stopped; 404: already gone. Both are the state the caller wants.
        self.client.call_allowing(&op, req, &[304, 404]).map(|_| ())
    }

    fn kill_container(&self, id: &str, signal: &str) -> Result<(), RuntimeError> {
        let op = format!("signal container {id} with {signal}");
        let path = format!(
            "/containers/{}/kill?signal={}",
            percent_encode(id),
            percent_encode(signal)
        );
        // A signal is delivered at once: the short calls' timeout, so that a hung
        // engine shows as an error rather than holding the pod killer.
        match self
            .client
            .call_allowing(&op, Req::post(path).timeout(Some(CALL_TIMEOUT)), &[404])
        {
            Ok(_) => Ok(()),
            // 409 "Container … is not running": it already stopped, as wanted.
            Err(RuntimeError::Conflict { message, .. }) if message.contains("is not running") => {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    fn remove_container(&self, id: &str) -> Result<(), RuntimeError> {
        let op = format!("remove container {id}");
        let path = format!("/containers/{}?force=1&v=1", percent_encode(id));
        let req = Req::delete(path).timeout(Some(LIFECYCLE_TIMEOUT));
        self.client.call_allowing(&op, req, &[404]).map(|_| ())
    }

    fn inspect_image(&self, image: &str) -> Result<Option<ImageDetails>, RuntimeError> {
        let op = format!("inspect image {image}");
        let req = Req::get(format!("/images/{}/json", percent_encode(image)));
        match self.client.call_json::<model::InspectedImage>(&op, req) {
            Ok(i) => Ok(Some(image_from_inspect(i))),
            Err(RuntimeError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn pull_image(&self, image: &str, auth: Option<&RegistryAuth>) -> Result<(), RuntimeError> {
        let reference = runtime::reference::split(image.trim());
        let op = format!("pull image {reference}");
        let (repo, tag) = pull_params(&reference);
        let path = format!(
            "/images/create?fromImage={}&tag={}",
            percent_encode(&repo),
            percent_encode(tag)
        );
        let mut req = Req::post(path)
            .timeout(Some(PULL_TIMEOUT))
            .per_read(PULL_PROGRESS_DEADLINE);
        if let Some(auth) = auth {
            req = req.registry_auth(registry_auth_header(auth));
        }
        let resp = self.client.send_ok(&op, &req)?;
        self.read_progress(
            &op,
            &req,
            resp,
            &format!("Pulling image {:?}", reference.to_string()),
            &mut |_| {},
        )
    }

    fn import_image(
        &self,
        image: &str,
        changes: &[String],
        (tar, len): (&mut dyn std::io::Read, u64),
    ) -> Result<(), RuntimeError> {
        let reference = runtime::reference::split(image.trim());
        let op = format!("import image {reference}");
        let (repo, tag) = pull_params(&reference);
        let mut path = format!(
            "/images/create?fromSrc=-&repo={}&tag={}",
            percent_encode(&repo),
            percent_encode(tag)
        );
        for c in changes {
            path.push_str("&changes=");
            path.push_str(&percent_encode(c));
        }
        let req = Req::post(path)
            .timeout(Some(IMPORT_TIMEOUT))
            .per_read(PULL_PROGRESS_DEADLINE);
        let resp = self
            .client
            .send_reader(&op, &req, "application/x-tar", (tar, len))?;
        let resp = self.client.check(&op, resp)?;
        self.read_progress(
            &op,
            &req,
            resp,
            &format!("Importing image {:?}", reference.to_string()),
            &mut |_| {},
        )
    }

    fn load_image(
        &self,
        (tar, len): (&mut dyn std::io::Read, u64),
    ) -> Result<Vec<String>, RuntimeError> {
        let op = "load image archive";
        let req = Req::post("/images/load?quiet=1".to_string())
            .timeout(Some(IMPORT_TIMEOUT))
            .per_read(PULL_PROGRESS_DEADLINE);
        let resp = self
            .client
            .send_reader(op, &req, "application/x-tar", (tar, len))?;
        let resp = self.client.check(op, resp)?;
        let mut loaded = Vec::new();
        self.read_progress(op, &req, resp, "Loading an image archive", &mut |p| {
            if let Some(name) = p.stream.as_deref().and_then(loaded_name) {
                loaded.push(name.to_string());
            }
        })?;
        Ok(loaded)
    }

    fn image_fs_usage(&self) -> Result<Option<runtime::ImageFsUsage>, RuntimeError> {
        Ok(None)
    }

    fn list_images(&self) -> Result<Vec<ImageDetails>, RuntimeError> {
        let list: Vec<model::ListedImage> = self
            .client
            .call_json("list images", Req::get("/images/json".to_string()))?;
        Ok(list.into_iter().map(image_from_summary).collect())
    }

    fn remove_image(&self, image: &str) -> Result<(), RuntimeError> {
        let op = format!("remove image {image}");
        let Some(details) = self.inspect_image(image)? else {
            return Ok(());
        };
        // Like dockershim's RemoveImage: an image named by ID that has several tags
        // cannot be deleted by ID without force; untagging each removes it once the last
        // tag goes, and never forces an image that a container uses.
        let by_id = details.id == image || details.id.strip_prefix("sha256:") == Some(image);
        let names = if by_id && details.repo_tags.len() > 1 {
            details.repo_tags
        } else {
            vec![image.to_string()]
        };
        for name in names {
            let req = Req::delete(format!("/images/{}", percent_encode(&name)))
                .timeout(Some(LIFECYCLE_TIMEOUT));
            self.client.call_allowing(&op, req, &[404])?;
        }
        Ok(())
    }

    fn logs(&self, id: &str, tail: Option<u64>) -> Result<Vec<u8>, RuntimeError> {
        // Only a container without a TTY has its log multiplexed into frames; the
        // answer's content type cannot tell on API 1.41, so ask the container.
        let tty = self.inspect_tty(id)?;
        let op = format!("read logs of container {id}");
        let tail = tail.map_or_else(|| "all".to_string(), |n| n.to_string());
        let path = format!(
            "/containers/{}/logs?stdout=1&stderr=1&tail={tail}",
            percent_encode(id)
        );
        let req = Req::get(path).timeout(Some(LOGS_TIMEOUT));
        let resp = self.client.send_ok(&op, &req)?;
        let mut raw = Vec::new();
        resp.into_body()
            .into_with_config()
            .limit(u64::MAX)
            .reader()
            .take(MAX_LOG_BYTES)
            .read_to_end(&mut raw)
            .map_err(|e| self.client.body_error(&op, &req, e))?;
        Ok(if tty { raw } else { demux_interleaved(&raw) })
    }

    fn log_stream(
        &self,
        id: &str,
        opts: &LogOptions,
        wake: Duration,
    ) -> Result<LogStream, RuntimeError> {
        let tty = self.inspect_tty(id)?;
        logs::open(&self.client, id, tty, opts, wake, CALL_TIMEOUT)
    }

    /// Docker rotates its json-file logs itself (`max-size`, `max-file`): there is
    /// nothing to reopen.
    fn reopen_container_log(&self, id: &str) -> Result<(), RuntimeError> {
        Err(RuntimeError::Api {
            op: format!("reopen the log of container {id}"),
            status: 501,
            message: "Docker rotates its own container logs".into(),
        })
    }

    fn exec(
        &self,
        id: &str,
        cmd: &[String],
        timeout: Duration,
    ) -> Result<ExecResult, RuntimeError> {
        let op = format!("exec {:?} in container {id}", cmd.join(" "));
        let timed_out = || RuntimeError::Timeout {
            op: op.clone(),
            after: timeout,
        };

        // Setting the exec up is an ordinary call of the engine's: a slow engine makes
        // it an error (a probe's Unknown), never the command's timeout. The timeout
        // counts from the start, as upstream's dockershim (`ExecInContainer`) counts it
        // from after `CreateExec` and containerd's `ExecSync` from the process start.
        let create = api::ExecConfig {
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(false),
            cmd: Some(cmd.to_vec()),
            ..Default::default()
        };
        let body = serde_json::to_vec(&create).map_err(|source| RuntimeError::Decode {
            op: op.clone(),
            source,
        })?;
        let path = format!("/containers/{}/exec", percent_encode(id));
        let req = Req::post(path).json(body).timeout(Some(CALL_TIMEOUT));
        let exec: api::IdResponse = self.client.call_json(&op, req)?;
        let deadline = base::time::saturating_deadline(Instant::now(), timeout);
        let left = || deadline.saturating_duration_since(Instant::now());

        // Without an Upgrade header the engine answers 200 and streams the
        // multiplexed output until the process ends, then closes the connection.
        let start = api::ExecStartConfig {
            detach: Some(false),
            tty: Some(false),
            ..Default::default()
        };
        let body = serde_json::to_vec(&start).map_err(|source| RuntimeError::Decode {
            op: op.clone(),
            source,
        })?;
        let req = Req::post(format!("/exec/{}/start", percent_encode(&exec.id)))
            .json(body)
            .timeout(Some(left()));
        let resp = self.client.send_ok(&op, &req).map_err(|e| match e {
            RuntimeError::Timeout { .. } => timed_out(),
            e => e,
        })?;
        let mut output = resp.into_body().into_with_config().limit(u64::MAX).reader();
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        let mut decoder = FrameDecoder::default();
        let mut chunk = vec![0u8; 16 * 1024];
        loop {
            // The command keeps running inside the container after a timeout: the
            // engine has no call to kill an exec (the upstream kubelet has the same
            // limit). Dropping the connection stops our reading.
            let n = match output.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(match self.client.body_error(&op, &req, e) {
                        RuntimeError::Timeout { .. } => timed_out(),
                        e => e,
                    })
                }
            };
            decoder.push(&chunk[..n], &mut |kind, payload| match kind {
                StreamKind::Stdout => append_capped(&mut stdout, payload, MAX_EXEC_OUTPUT),
                StreamKind::Stderr | StreamKind::System => {
                    append_capped(&mut stderr, payload, MAX_EXEC_OUTPUT)
                }
                StreamKind::Stdin => {}
            });
        }

        if !decoder.is_at_boundary() {
            log::warn!("{op}: the output stream ended inside a frame");
        }
        let exit_code = self.exec_exit_code(&op, &exec.id, deadline, &timed_out)?;
        Ok(ExecResult {
            exit_code,
            stdout,
            stderr,
        })
    }

    fn exec_interactive(
        &self,
        id: &str,
        cmd: &[String],
        opts: StreamOptions,
    ) -> Result<ExecSession, RuntimeError> {
        hijack::exec_interactive(&self.client, id, cmd, opts)
    }

    fn exec_status(&self, exec_id: &str) -> Result<Option<i64>, RuntimeError> {
        hijack::exec_status(&self.client, exec_id)
    }

    fn resize_exec(&self, exec_id: &str, size: TermSize) -> Result<(), RuntimeError> {
        hijack::resize(&self.client, "exec", exec_id, size)
    }

    fn attach(&self, id: &str, opts: StreamOptions) -> Result<Box<dyn ProcessIo>, RuntimeError> {
        // The framing follows the container's TTY, whatever the client asked for.
        let tty = self.inspect_tty(id)?;
        hijack::attach(&self.client, id, opts, tty)
    }

    fn resize_container(&self, id: &str, size: TermSize) -> Result<(), RuntimeError> {
        hijack::resize(&self.client, "containers", id, size)
    }

    fn stream_url(&self, _request: &StreamRequest) -> Result<Option<String>, RuntimeError> {
        // Docker has no streaming server: the kubelet serves exec and attach on the
        // hijacked connections, port-forward in the pod's network namespace.
        Ok(None)
    }

    fn watch_events(
        &self,
        filter: &EventFilter,
        on_item: &mut dyn FnMut(EventItem) -> bool,
        should_stop: &dyn Fn() -> bool,
    ) -> Result<(), RuntimeError> {
        let op = "watch container events";
        let path = events_path(filter);
        // No total timeout: the stream is endless. The per-read timeout is the wake-up.
        let req = Req::get(path).timeout(None).per_read(EVENTS_WAKEUP);

        // The engine sends the answer's headers at once, but a loaded engine may take
        // longer than one wake-up period: retry (checking for shutdown) for a while.
        let open_deadline = Instant::now() + CALL_TIMEOUT;
        let resp = loop {
            if should_stop() {
                return Ok(());
            }
            match self.client.send_ok(op, &req) {
                Ok(resp) => break resp,
                Err(RuntimeError::Timeout { .. }) if Instant::now() < open_deadline => continue,
                Err(e) => return Err(e),
            }
        };

        if !on_item(EventItem::Opened) {
            return Ok(());
        }
        let body = resp.into_body().into_with_config().limit(u64::MAX).reader();
        let mut lines = LineReader::new(body, MAX_STREAM_LINE);
        loop {
            if should_stop() {
                return Ok(());
            }
            let line = match lines.next_line() {
                Ok(Some(line)) => line,
                Ok(None) => {
                    return Err(self.client.unavailable(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the engine closed the event stream",
                    )))
                }
                Err(e) if is_read_timeout(&e) => continue,
                Err(e) => return Err(self.client.body_error(op, &req, e)),
            };
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            // One event we cannot read (a newer engine's new field value) must not end
            // the stream that all the others arrive on.
            let message: api::EventMessage = match serde_json::from_slice(&line) {
                Ok(m) => m,
                Err(e) => {
                    log::warn!("{op}: skipping an event that does not decode: {e}");
                    continue;
                }
            };
            if let Some(event) = event_from(message) {
                if !on_item(EventItem::Event(event)) {
                    return Ok(());
                }
            }
        }
    }

    /// Docker's own bridge gives addresses of its own subnet: the pod CIDR is for a
    /// network plugin (rkubelet's `PluginNetwork` wraps this runtime for one).
    fn update_runtime_config(&self, _pod_cidrs: &[String]) -> Result<(), RuntimeError> {
        Ok(())
    }

    fn network_status(&self) -> Result<NetworkStatus, RuntimeError> {
        // dockershim's network was Docker's own bridge (no CNI): ready when the
        // `bridge` network exists and its interface is up.
        #[derive(Deserialize)]
        struct Network {
            #[serde(rename = "Options", default)]
            options: std::collections::HashMap<String, String>,
        }
        let not_ready = |message: String| NetworkStatus {
            ready: false,
            reason: "NetworkPluginNotReady".into(),
            message,
        };
        let net: Network = match self.client.call_json(
            "inspect network bridge",
            Req::get("/networks/bridge".into()),
        ) {
            Ok(n) => n,
            Err(RuntimeError::NotFound { .. }) => {
                return Ok(not_ready(
                    "docker: network plugin is not ready: the bridge network does not exist".into(),
                ))
            }
            Err(e) => return Err(e),
        };
        let iface = net
            .options
            .get("com.docker.network.bridge.name")
            .cloned()
            .unwrap_or_else(|| "docker0".into());
        Ok(match bridge_is_up(&iface) {
            Some(true) => NetworkStatus {
                ready: true,
                ..NetworkStatus::default()
            },
            Some(false) => not_ready(format!(
                "docker: network plugin is not ready: bridge interface {iface} is down"
            )),
            // Docker runs in another network namespace than ours (or /sys is not
            // mounted): the network's presence is all that can be known.
            None => NetworkStatus {
                ready: true,
                ..NetworkStatus::default()
            },
        })
    }
}

impl Docker {
    /// Whether a container has a TTY (then its log and attach streams are raw).
    fn inspect_tty(&self, id: &str) -> Result<bool, RuntimeError> {
        let op = format!("inspect container {id}");
        let path = format!("/containers/{}/json", percent_encode(id));
        let c: model::Inspect = self.client.call_json(&op, Req::get(path))?;
        Ok(c.config.and_then(|c| c.tty).unwrap_or(false))
    }

    /// The exit code of a finished exec. The engine closes the output stream when the
    /// process ends but may record the exit code a moment later, so poll briefly.
    fn exec_exit_code(
        &self,
        op: &str,
        exec_id: &str,
        deadline: Instant,
        timed_out: &dyn Fn() -> RuntimeError,
    ) -> Result<i64, RuntimeError> {
        let path = format!("/exec/{}/json", percent_encode(exec_id));
        // Reading the result gets a little time past the caller's deadline: the command
        // has finished, and failing it now would misreport a success.
        let hard_deadline = deadline.max(Instant::now()) + CALL_TIMEOUT;
        loop {
            let info: api::ExecInspectResponse =
                self.client.call_json(op, Req::get(path.clone()))?;
            match (info.running, info.exit_code) {
                (Some(false), Some(code)) => return Ok(code),
                _ if Instant::now() >= hard_deadline => return Err(timed_out()),
                _ => std::thread::sleep(EXEC_EXIT_POLL),
            }
        }
    }
}

/// One line of a pull's progress stream. Engines write a failure as `errorDetail`
/// and, for old clients, the same text as `error`, which the generated model lacks.
#[derive(Debug, Deserialize)]
struct PullProgress {
    #[serde(flatten)]
    info: api::CreateImageInfo,
    #[serde(default)]
    error: Option<String>,
    /// The progress bar text (`[==>   ] 1.2MB/3MB`), which the model lacks.
    #[serde(default)]
    progress: Option<String>,
    /// A load's report (`Loaded image: busybox:latest`), which the model lacks.
    #[serde(default)]
    stream: Option<String>,
}

/// What a line of `docker load`'s output names: `Loaded image: <ref>` or `Loaded image
/// ID: <id>`.
fn loaded_name(line: &str) -> Option<&str> {
    let line = line.trim();
    line.strip_prefix("Loaded image ID: ")
        .or_else(|| line.strip_prefix("Loaded image: "))
        .map(str::trim)
        .filter(|n| !n.is_empty())
}

impl PullProgress {
    /// One line for the progress log: status, layer, bar.
    fn text(&self) -> String {
        [
            self.info.status.as_deref(),
            self.info.id.as_deref(),
            self.progress.as_deref(),
        ]
        .into_iter()
        .flatten()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
    }

    fn error_message(&self) -> Option<String> {
        let detail = self
            .info
            .error_detail
            .as_ref()
            .and_then(|d| d.message.clone());
        detail
            .or_else(|| self.error.clone())
            .filter(|m| !m.is_empty())
    }
}

/// The `/events` path of a filter: `type=container` always, the labels and actions
/// asked for, and `since` as `seconds.nanoseconds` (the engine's own timestamp form,
/// the precision of its `timeNano`), so a reconnect replays from the very event it
/// last delivered.
fn events_path(filter: &EventFilter) -> String {
    let mut filters = serde_json::json!({ "type": ["container"] });
    if !filter.labels.is_empty() {
        filters["label"] = serde_json::json!(filter.labels);
    }
    if !filter.kinds.is_empty() {
        let actions: Vec<&str> = filter.kinds.iter().map(|k| docker_action(*k)).collect();
        filters["event"] = serde_json::json!(actions);
    }
    let mut path = format!("/events?filters={}", percent_encode(&filters.to_string()));
    if let Some(since) = filter.since {
        let d = since
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        path.push_str(&format!("&since={}.{:09}", d.as_secs(), d.subsec_nanos()));
    }
    path
}

/// Fuzzing (the daemon's `fuzzing` module): the engine's answers decoded and mapped as
/// the client does. `what` picks the answer: 0 list, 1 inspect, 2 event line, 3 image
/// list, 4 image inspect, 5 multiplexed stream, 6 error body, else a time.
#[cfg(feature = "fuzzing")]
pub fn fuzz_answer(what: u8, data: &[u8]) {
    match what % 8 {
        0 => {
            if let Ok(v) = serde_json::from_slice::<Vec<model::ListedContainer>>(data) {
                v.into_iter().for_each(|c| drop(model::summary_from(c)));
            }
        }
        1 => {
            if let Ok(c) = serde_json::from_slice::<model::Inspect>(data) {
                drop(model::details_from(c));
            }
        }
        2 => {
            if let Ok(m) = serde_json::from_slice::<api::EventMessage>(data) {
                drop(model::event_from(m));
            }
        }
        3 => {
            if let Ok(v) = serde_json::from_slice::<Vec<model::ListedImage>>(data) {
                v.into_iter()
                    .for_each(|i| drop(model::image_from_summary(i)));
            }
        }
        4 => {
            if let Ok(i) = serde_json::from_slice::<model::InspectedImage>(data) {
                drop(model::image_from_inspect(i));
            }
        }
        5 => {
            let mut d = stream::FrameDecoder::default();
            let mut n = 0usize;
            // Fed in two pieces: a frame cut anywhere must decode the same.
            let cut = data.len() / 2;
            d.push(&data[..cut], &mut |_, b| n += b.len());
            d.push(&data[cut..], &mut |_, b| n += b.len());
            let _ = d.is_at_boundary();
            drop(stream::demux_interleaved(data));
        }
        6 => drop(client::status_error("fuzz", 500, data)),
        _ => drop(wire::docker_time(&String::from_utf8_lossy(data))),
    }
}

/// Whether network interface `name` is up (`IFF_UP` in `/sys/class/net/<name>/flags`);
/// None when it cannot be seen from here.
fn bridge_is_up(name: &str) -> Option<bool> {
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        return None;
    }
    let text = std::fs::read_to_string(format!("/sys/class/net/{name}/flags")).ok()?;
    let flags = u32::from_str_radix(text.trim().trim_start_matches("0x"), 16).ok()?;
    Some(flags & 1 == 1)
}

fn pull_error(op: String, message: String) -> RuntimeError {
    let lower = message.to_ascii_lowercase();
    if lower.contains("not found") || lower.contains("manifest unknown") {
        RuntimeError::NotFound { op, message }
    } else {
        RuntimeError::Api {
            op,
            status: 200,
            message,
        }
    }
}

/// The `X-Registry-Auth` header: URL-safe base64 of the JSON credentials.
fn registry_auth_header(auth: &RegistryAuth) -> String {
    let json = serde_json::json!({
        "username": auth.username,
        "password": auth.password,
        "serveraddress": auth.server_address,
    });
    base64::Engine::encode(&REGISTRY_AUTH_BASE64, json.to_string().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use runtime::ContainerEventType;

    #[test]
    fn events_path_filters_labels_actions_and_replays_since_to_the_nanosecond() {
        let path = events_path(&EventFilter {
            labels: vec!["io.rkubelet.node=n1".into()],
            kinds: vec![ContainerEventType::Started, ContainerEventType::Stopped],
            since: Some(std::time::UNIX_EPOCH + Duration::new(1_700_000_000, 5)),
        });
        let want = serde_json::json!({
            "type": ["container"],
            "label": ["io.rkubelet.node=n1"],
            "event": ["start", "die"],
        });
        assert_eq!(
            path,
            format!(
                "/events?filters={}&since=1700000000.000000005",
                percent_encode(&want.to_string())
            )
        );
        assert!(!events_path(&EventFilter::default()).contains("since"));
    }

    #[test]
    fn endpoints_must_be_unix_sockets() {
        assert_eq!(
            parse_endpoint("unix:///var/run/docker.sock"),
            Ok(PathBuf::from("/var/run/docker.sock"))
        );
        assert_eq!(
            parse_endpoint("/run/d.sock"),
            Ok(PathBuf::from("/run/d.sock"))
        );
        for bad in [
            "tcp://127.0.0.1:2375",
            "unix://relative.sock",
            "docker.sock",
            "",
        ] {
            assert!(parse_endpoint(bad).is_err(), "{bad}");
        }
        assert!(matches!(
            Docker::connect("tcp://1.2.3.4:2375"),
            Err(RuntimeError::BadEndpoint { .. })
        ));
    }

    #[test]
    fn connect_does_not_need_the_socket() {
        assert!(Docker::connect("unix:///nonexistent/docker.sock").is_ok());
    }

    /// A stand-in engine on a Unix socket: answers `connections` requests (one per
    /// connection, `Connection: close`) and records their request lines.
    fn fake_engine(
        path: &std::path::Path,
        api: &'static str,
        connections: usize,
    ) -> std::thread::JoinHandle<Vec<String>> {
        use std::io::{BufRead, BufReader, Write};
        let listener = std::os::unix::net::UnixListener::bind(path).expect("bind");
        std::thread::Builder::new()
            .name("fake-engine".into())
            .spawn(move || {
            let mut seen = Vec::new();
            for _ in 0..connections {
                let Ok((stream, _)) = listener.accept() else {
                    break;
                };
                let mut reader = BufReader::new(&stream);
                let mut request_line = String::new();
                let _ = reader.read_line(&mut request_line);
                let mut header = String::new();
                while reader.read_line(&mut header).is_ok_and(|n| n > 2) {
                    header.clear();
                }
                let path = request_line
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or("")
                    .to_string();
                let body = if path == "/version" {
                    format!(r#"{{"Version":"fake","ApiVersion":"{api}","MinAPIVersion":"1.12"}}"#)
                } else {
                    "[]".to_string()
                };
                seen.push(path);
                let _ = write!(
                    &stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
            seen
        })
        .expect("spawn fake engine")
    }

    #[test]
    fn negotiates_lazily_and_again_after_the_engine_was_down() {
        let dir = std::env::temp_dir().join(format!("rkubelet-fake-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let sock = dir.join("docker.sock");
        let _ = std::fs::remove_file(&sock);
        let docker = Docker::connect(&format!("unix://{}", sock.display())).expect("connect");

        // Down at start: unavailable, not a panic.
        let err = docker.list_containers(&[]).expect_err("nobody listens");
        assert!(err.is_unavailable(), "{err:?}");

        // Up: the first call negotiates, the next reuses the version.
        let engine = fake_engine(&sock, "1.43", 3);
        assert_eq!(docker.list_containers(&[]).expect("list"), vec![]);
        assert_eq!(docker.list_containers(&[]).expect("list"), vec![]);
        let seen = engine.join().expect("engine");
        assert_eq!(seen[0], "/version");
        assert!(
            seen[1].starts_with("/v1.43/containers/json?all=1"),
            "{seen:?}"
        );
        assert!(
            seen[2].starts_with("/v1.43/containers/json?all=1"),
            "{seen:?}"
        );

        // Down again, then back as an older engine: the version is negotiated anew.
        std::fs::remove_file(&sock).expect("remove socket");
        assert!(docker
            .list_containers(&[])
            .expect_err("down")
            .is_unavailable());
        let engine = fake_engine(&sock, "1.41", 2);
        docker.list_containers(&["a=b".to_string()]).expect("list");
        let seen = engine.join().expect("engine");
        assert_eq!(seen[0], "/version");
        assert!(
            seen[1].starts_with("/v1.41/containers/json?all=1&filters=%7B%22label%22"),
            "{seen:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn pull_stream_errors_are_found_in_either_field() {
        let line = br#"{"errorDetail":{"message":"manifest unknown"},"error":"manifest unknown"}"#;
        let p: PullProgress = serde_json::from_slice(line).expect("decodes");
        assert_eq!(p.error_message().as_deref(), Some("manifest unknown"));
        let p: PullProgress = serde_json::from_slice(br#"{"error":"boom"}"#).expect("decodes");
        assert_eq!(p.error_message().as_deref(), Some("boom"));
        let p: PullProgress =
            serde_json::from_slice(br#"{"status":"Downloading","id":"x","progress":"[=> ] 1MB/2MB","progressDetail":{"current":1,"total":2}}"#).expect("decodes");
        assert_eq!(p.error_message(), None);
        assert_eq!(p.text(), "Downloading x [=> ] 1MB/2MB");
        assert!(matches!(
            pull_error("pull image x".into(), "manifest unknown".into()),
            RuntimeError::NotFound { .. }
        ));
        assert!(matches!(
            pull_error("pull image x".into(), "unauthorized".into()),
            RuntimeError::Api { .. }
        ));
    }

    #[test]
    fn registry_auth_header_is_url_safe_base64_json() {
        let header = registry_auth_header(&RegistryAuth {
            username: "u".into(),
            password: "p?>".into(),
            server_address: "127.0.0.1:5000".into(),
        });
        assert!(!header.contains('+') && !header.contains('/'), "{header}");
        // Decode it back with the standard alphabet to check the payload.
        let std_alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut bits = Vec::new();
        for c in header.bytes().filter(|&c| c != b'=') {
            let v = std_alphabet.iter().position(|&a| a == c).expect("alphabet") as u8;
            for i in (0..6).rev() {
                bits.push((v >> i) & 1);
            }
        }
        let bytes: Vec<u8> = bits
            .chunks(8)
            .filter(|c| c.len() == 8)
            .map(|c| c.iter().fold(0u8, |acc, b| acc << 1 | b))
            .collect();
        let v: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
        assert_eq!(v["username"], "u");
        assert_eq!(v["password"], "p?>");
        assert_eq!(v["serveraddress"], "127.0.0.1:5000");
    }
}
