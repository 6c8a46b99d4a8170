//! The Docker implementation of [`Runtime`]: the Engine API over the Unix socket,
//! spoken with blocking `ureq` and Docker's generated models from `bollard-stubs`.
//!
//! This is the only module of rkubelet that knows Docker's API (DESIGN.md rule 9). It
//! plays the role of the Go kubelet's dockershim (`pkg/kubelet/dockershim`): the
//! runtime-neutral calls of [`Runtime`] become Engine API requests, and Docker's
//! answers become the neutral types of [`crate::runtime`].
//!
//! The parts:
//! - `transport`: ureq's transport API aimed at the Unix socket, no DNS.
//! - `client`: the agent, lazy API version negotiation, timeouts, error mapping.
//! - `stream`: multiplexed stdout/stderr frames and JSON-lines decoding.
//! - `reference`: a pull's `fromImage` and `tag` from an image reference.
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

mod client;
mod reference;
mod stream;
mod transport;
mod wire;

use std::collections::{BTreeMap, HashMap};
use std::io::{self, Read};
use std::path::PathBuf;
use std::time::{Duration, Instant, UNIX_EPOCH};

use bollard_stubs::models as api;
use serde::Deserialize;

use self::client::{is_read_timeout, Client, Req};
use self::reference::pull_params;
use self::stream::{append_capped, demux_interleaved, FrameDecoder, StreamKind};
use self::wire::{docker_time, unix_nanos, unix_secs, REGISTRY_AUTH_BASE64};
use super::{
    ContainerConfig, ContainerDetails, ContainerState, ContainerSummary, ExecResult, ImageDetails,
    NamespaceMode, RegistryAuth, Runtime, RuntimeError, RuntimeEvent, RuntimeVersion,
};
use crate::lines::LineReader;
use crate::netutil::query_escape as percent_encode;

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
        })
    }

    /// The endpoint as given to [`Docker::connect`].
    pub fn endpoint(&self) -> &str {
        self.client.endpoint()
    }
}

/// The socket path of an endpoint, or why it cannot be used.
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
        let list: Vec<api::ContainerSummary> =
            self.client.call_json("list containers", Req::get(path))?;
        Ok(list.into_iter().map(summary_from).collect())
    }

    fn inspect_container(&self, id: &str) -> Result<ContainerDetails, RuntimeError> {
        let op = format!("inspect container {id}");
        let path = format!("/containers/{}/json", percent_encode(id));
        let c: api::ContainerInspectResponse = self.client.call_json(&op, Req::get(path))?;
        Ok(details_from(c))
    }

    fn create_container(&self, config: &ContainerConfig) -> Result<String, RuntimeError> {
        let op = format!("create container {}", config.name);
        let body =
            serde_json::to_vec(&create_body(config)).map_err(|source| RuntimeError::Decode {
                op: op.clone(),
                source,
            })?;
        let path = format!("/containers/create?name={}", percent_encode(&config.name));
        let req = Req::post(path).json(body).timeout(Some(LIFECYCLE_TIMEOUT));
        let created: api::ContainerCreateResponse = self.client.call_json(&op, req)?;
        for warning in &created.warnings {
            log::warn!("{op}: docker warns: {warning}");
        }
        Ok(created.id)
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
        let grace = crate::time::clamp_timeout(grace);
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
        match self.client.call_json::<api::ImageInspect>(&op, req) {
            Ok(i) => Ok(Some(image_from_inspect(i))),
            Err(RuntimeError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn pull_image(&self, image: &str, auth: Option<&RegistryAuth>) -> Result<(), RuntimeError> {
        let reference = crate::reference::split(image.trim());
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
        let body = resp.into_body().into_with_config().limit(u64::MAX).reader();
        let mut lines = LineReader::new(body, MAX_STREAM_LINE);
        let mut next_report = Instant::now() + PULL_PROGRESS_REPORT;
        let mut latest = String::new();
        // A 200 answer only means the pull began: failures arrive as a line of the
        // progress stream, so every line is checked until the stream ends.
        loop {
            if Instant::now() >= next_report {
                log::info!("Pulling image {:?}: {latest:?}", reference.to_string());
                next_report = Instant::now() + PULL_PROGRESS_REPORT;
            }
            let line = match lines.next_line() {
                Ok(Some(line)) => line,
                Ok(None) => return Ok(()),
                Err(e) => return Err(self.client.body_error(&op, &req, e)),
            };
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let progress: PullProgress =
                serde_json::from_slice(&line).map_err(|source| RuntimeError::Decode {
                    op: op.clone(),
                    source,
                })?;
            if let Some(message) = progress.error_message() {
                return Err(pull_error(op, message));
            }
            latest = progress.text();
        }
    }

    fn list_images(&self) -> Result<Vec<ImageDetails>, RuntimeError> {
        let list: Vec<api::ImageSummary> = self
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

    fn exec(
        &self,
        id: &str,
        cmd: &[String],
        timeout: Duration,
    ) -> Result<ExecResult, RuntimeError> {
        let op = format!("exec {:?} in container {id}", cmd.join(" "));
        let deadline = crate::time::saturating_deadline(Instant::now(), timeout);
        let timed_out = || RuntimeError::Timeout {
            op: op.clone(),
            after: timeout,
        };
        let left = || deadline.saturating_duration_since(Instant::now());

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
        let req = Req::post(path)
            .json(body)
            .timeout(Some(left().min(CALL_TIMEOUT)));
        let exec: api::IdResponse = self.client.call_json(&op, req).map_err(|e| match e {
            RuntimeError::Timeout { .. } => timed_out(),
            e => e,
        })?;

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
        if left().is_zero() {
            return Err(timed_out());
        }
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

    fn events(
        &self,
        label_filter: &[String],
        on_event: &mut dyn FnMut(RuntimeEvent) -> bool,
        should_stop: &dyn Fn() -> bool,
    ) -> Result<(), RuntimeError> {
        let op = "watch container events";
        let mut filters = serde_json::json!({ "type": ["container"] });
        if !label_filter.is_empty() {
            filters["label"] = serde_json::json!(label_filter);
        }
        let path = format!("/events?filters={}", percent_encode(&filters.to_string()));
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
                if !on_event(event) {
                    return Ok(());
                }
            }
        }
    }
}

impl Docker {
    /// Whether a container has a TTY (then its log and attach streams are raw).
    fn inspect_tty(&self, id: &str) -> Result<bool, RuntimeError> {
        let op = format!("inspect container {id}");
        let path = format!("/containers/{}/json", percent_encode(id));
        let c: api::ContainerInspectResponse = self.client.call_json(&op, Req::get(path))?;
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

/// An error from the pull stream. The engine reports a missing image or tag in
/// words only; those become NotFound so callers can tell "no such image" from
/// "registry broken".
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

fn labels_from(labels: Option<HashMap<String, String>>) -> BTreeMap<String, String> {
    labels.unwrap_or_default().into_iter().collect()
}

/// Docker's container states folded into CRI's four (as dockershim's
/// `toRuntimeAPIContainerState`): a paused or restarting container still has its
/// process.
fn state_from(status: Option<api::ContainerStateStatusEnum>) -> ContainerState {
    use api::ContainerStateStatusEnum as S;
    match status {
        Some(S::RUNNING | S::PAUSED | S::RESTARTING | S::STOPPING) => ContainerState::Running,
        Some(S::EXITED | S::DEAD) => ContainerState::Exited,
        Some(S::CREATED) => ContainerState::Created,
        Some(S::REMOVING | S::EMPTY) | None => ContainerState::Unknown,
    }
}

fn summary_state(status: Option<api::ContainerSummaryStateEnum>) -> ContainerState {
    use api::ContainerSummaryStateEnum as S;
    match status {
        Some(S::RUNNING | S::PAUSED | S::RESTARTING | S::STOPPING) => ContainerState::Running,
        Some(S::EXITED | S::DEAD) => ContainerState::Exited,
        Some(S::CREATED) => ContainerState::Created,
        Some(S::REMOVING | S::EMPTY) | None => ContainerState::Unknown,
    }
}

/// Docker names carry a leading `/`.
fn bare_name(name: &str) -> String {
    name.strip_prefix('/').unwrap_or(name).to_string()
}

fn summary_from(c: api::ContainerSummary) -> ContainerSummary {
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
fn ip_address(settings: Option<&api::NetworkSettings>) -> String {
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

fn details_from(c: api::ContainerInspectResponse) -> ContainerDetails {
    let state = c.state.unwrap_or_default();
    let config = c.config.unwrap_or_default();
    let settings = settings_from(&config, c.host_config.as_ref());
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
    }
}

/// What a container was created with, from its inspect answer.
fn settings_from(
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
    }
}

/// Which namespace a mode string is for: the same neutral mode is spelled differently
/// per namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Namespace {
    Network,
    Ipc,
    Pid,
}

/// Docker's mode string for a namespace, or None to leave Docker's default.
fn namespace_mode(ns: Namespace, mode: &NamespaceMode) -> Option<String> {
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

fn non_empty<T>(v: &[T]) -> Option<Vec<T>>
where
    T: Clone,
{
    (!v.is_empty()).then(|| v.to_vec())
}

fn non_empty_str(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

fn non_zero(n: i64) -> Option<i64> {
    (n != 0).then_some(n)
}

/// The create request for a neutral container config.
fn create_body(cfg: &ContainerConfig) -> api::ContainerCreateBody {
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
fn cfg_host_ip(ip: &str) -> String {
    if ip == "0.0.0.0" {
        String::new()
    } else {
        ip.to_string()
    }
}

fn image_from_inspect(i: api::ImageInspect) -> ImageDetails {
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
fn image_from_summary(i: api::ImageSummary) -> ImageDetails {
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
const EVENT_ATTRIBUTES: &[&str] = &["name", "image", "exitCode", "signal", "execID"];

fn event_from(m: api::EventMessage) -> Option<RuntimeEvent> {
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
