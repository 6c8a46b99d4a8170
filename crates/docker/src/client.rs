//! HTTP to the Docker engine: the ureq agent on the Unix socket, lazy API version
//! negotiation, per-call timeouts, and the mapping of every failure onto
//! [`RuntimeError`].
//!
//! The agent keeps a small pool of idle keep-alive connections, so the PLEG's relist
//! every second reuses one socket instead of reconnecting. Nothing here is
//! Docker-resource specific; `mod.rs` builds the paths and bodies.

use std::io::{self, Read};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use bollard_stubs::models::ErrorResponse;
use serde::de::DeserializeOwned;
use ureq::http::{self, Response};
use ureq::{Agent, Body};

use crate::model::Version;
use crate::transport::{NoDnsResolver, UnixConnector};
use crate::wire::ApiVersion;
use base::loops::lock;
use runtime::RuntimeError;

/// The oldest Engine API we speak: Docker 20.10 (Debian 12's docker.io).
pub(crate) const MIN_API: ApiVersion = ApiVersion(1, 41);

/// The newest Engine API we speak. 1.44 rather than older because Docker 29 refuses
/// anything below 1.44; every field we read or write means the same from 1.41 to 1.44.
pub(crate) const MAX_API: ApiVersion = ApiVersion(1, 44);

/// Idle connections kept to the engine: Go's `DefaultMaxIdleConnsPerHost`, which the
/// upstream kubelet's Docker client ran with. The PLEG's relist each second keeps one
/// warm; a burst of concurrent calls (pod workers, probers) opens more and closes
/// them after. Each idle one holds its two buffers (`CONNECTION_BUFFER` each, in
/// and out), so eight kept after a start's burst held ~0.2 MiB of heap at idle, to
/// save a connect over a local socket (tens of microseconds) in the next burst.
const MAX_IDLE_CONNECTIONS: usize = 2;

/// Docker closes idle keep-alive connections itself after a while; retiring ours
/// sooner avoids handing a just-closed socket to a call.
const MAX_IDLE_AGE: Duration = Duration::from_secs(30);

/// Error bodies are short JSON (`{"message": …}`); anything past this is not read.
const MAX_ERROR_BODY: u64 = 64 * 1024;

/// JSON answers (lists of containers, images) are read whole; this bounds a broken
/// engine's answer, far above a node's few hundred containers.
const MAX_JSON_BODY: u64 = 32 * 1024 * 1024;

/// The URL host. It is never resolved (see [`NoDnsResolver`]); it only makes the URL
/// valid and names the peer in logs.
const BASE: &str = "http://docker";

/// The HTTP methods the Engine API uses here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Method {
    /// GET.
    Get,
    /// POST.
    Post,
    /// DELETE.
    Delete,
}

/// One call to the engine: where, what, and how long it may take.
#[derive(Debug)]
pub(crate) struct Req {
    method: Method,
    /// Path and query after the version prefix, e.g. `/containers/json?all=1`.
    path: String,
    json: Option<Vec<u8>>,
    timeout: Option<Duration>,
    per_read: Option<Duration>,
    registry_auth: Option<String>,
}

impl Req {
    /// A call with no body and the default timeout.
    pub(crate) fn new(method: Method, path: String) -> Req {
        Req {
            method,
            path,
            json: None,
            timeout: Some(crate::CALL_TIMEOUT),
            per_read: None,
            registry_auth: None,
        }
    }

    /// A GET.
    pub(crate) fn get(path: String) -> Req {
        Req::new(Method::Get, path)
    }

    /// A POST without a body.
    pub(crate) fn post(path: String) -> Req {
        Req::new(Method::Post, path)
    }

    /// A DELETE.
    pub(crate) fn delete(path: String) -> Req {
        Req::new(Method::Delete, path)
    }

    /// Sends `body` as JSON.
    pub(crate) fn json(mut self, body: Vec<u8>) -> Req {
        self.json = Some(body);
        self
    }

    /// The whole call (connect, send, answer, body) must finish within `d`; None for
    /// endless streams.
    pub(crate) fn timeout(mut self, d: Option<Duration>) -> Req {
        self.timeout = d;
        self
    }

    /// Each single socket read must return within `d` (a no-progress watchdog, and
    /// the wake-up tick of the events stream).
    pub(crate) fn per_read(mut self, d: Duration) -> Req {
        self.per_read = Some(d);
        self
    }

    /// The `X-Registry-Auth` header value (already encoded). Never logged.
    pub(crate) fn registry_auth(mut self, value: String) -> Req {
        self.registry_auth = Some(value);
        self
    }

    /// The timeout that a Timeout error of this call reports.
    fn reported_timeout(&self, reason: ureq::Timeout) -> Duration {
        match (reason, self.per_read, self.timeout) {
            (ureq::Timeout::PerRead, Some(d), _) => d,
            (_, _, Some(d)) => d,
            (_, Some(d), None) => d,
            (_, None, None) => Duration::ZERO,
        }
    }
}

/// The HTTP client for one engine endpoint. Cheap to share between threads.
#[derive(Debug)]
pub(crate) struct Client {
    endpoint: String,
    /// The socket path, for the calls written by hand (`hijack`).
    socket: PathBuf,
    agent: Agent,
    /// The negotiated API version; None until the first call, and again after the
    /// engine was unreachable (it may have been upgraded meanwhile).
    api: Mutex<Option<ApiVersion>>,
}

impl Client {
    /// A client for the socket at `path`; `endpoint` is how errors name it. Does not
    /// connect.
    pub(crate) fn new(endpoint: String, path: PathBuf) -> Client {
        let config = Agent::config_builder()
            // Non-2xx answers carry Docker's message in the body; we want to read it.
            .http_status_as_error(false)
            // A proxy from the environment must never capture calls to a local socket.
            .proxy(None)
            .max_redirects(0)
            .max_idle_connections(MAX_IDLE_CONNECTIONS)
            .max_idle_connections_per_host(MAX_IDLE_CONNECTIONS)
            .max_idle_age(MAX_IDLE_AGE)
            .user_agent(concat!("rkubelet/", env!("CARGO_PKG_VERSION")))
            .timeout_global(Some(crate::CALL_TIMEOUT))
            .input_buffer_size(base::httpclient::CONNECTION_BUFFER)
            .output_buffer_size(base::httpclient::CONNECTION_BUFFER)
            .max_response_header_size(base::httpclient::CONNECTION_BUFFER)
            .build();
        let agent = Agent::with_parts(config, UnixConnector::new(path.clone()), NoDnsResolver);
        Client {
            endpoint,
            socket: path,
            agent,
            api: Mutex::new(None),
        }
    }

    /// The engine's socket.
    pub(crate) fn socket(&self) -> &std::path::Path {
        &self.socket
    }

    /// Asks the engine for its version and negotiates the API version to use, caching
    /// it. Also the liveness check.
    pub(crate) fn negotiate(&self) -> Result<(Version, ApiVersion), RuntimeError> {
        let op = "get docker version";
        let req = Req::get(String::new());
        let resp = self.run(op, &format!("{BASE}/version"), &req)?;
        let resp = self.check(op, resp)?;
        let version: Version = self.read_json(op, &req, resp)?;
        let server = version.api_version.as_deref().and_then(ApiVersion::parse);
        let server_min = version
            .min_api_version
            .as_deref()
            .and_then(ApiVersion::parse);
        let api = choose_api_version(server, server_min).map_err(|message| RuntimeError::Api {
            op: op.to_string(),
            status: 200,
            message,
        })?;
        *lock(&self.api) = Some(api);
        Ok((version, api))
    }

    /// The API version to use, negotiating it first if needed. The lock is not held
    /// across the call: two threads may both negotiate at start-up, which is harmless.
    pub(crate) fn api_version(&self) -> Result<ApiVersion, RuntimeError> {
        if let Some(api) = *lock(&self.api) {
            return Ok(api);
        }
        self.negotiate().map(|(_, api)| api)
    }

    /// Sends a call under the negotiated version prefix and returns the answer,
    /// whatever its status.
    pub(crate) fn send(&self, op: &str, req: &Req) -> Result<Response<Body>, RuntimeError> {
        let api = self.api_version()?;
        self.run(op, &format!("{BASE}/v{api}{}", req.path), req)
    }

    /// [`Self::send`], then any status but 2xx and 304 becomes an error.
    pub(crate) fn send_ok(&self, op: &str, req: &Req) -> Result<Response<Body>, RuntimeError> {
        let resp = self.send(op, req)?;
        self.check(op, resp)
    }

    /// Sends a call and decodes its JSON answer.
    pub(crate) fn call_json<T: DeserializeOwned>(
        &self,
        op: &str,
        req: Req,
    ) -> Result<T, RuntimeError> {
        let resp = self.send_ok(op, &req)?;
        self.read_json(op, &req, resp)
    }

    /// Sends a call whose answer has no interesting body; returns the status. The body
    /// is drained so that the connection goes back to the pool.
    pub(crate) fn call(&self, op: &str, req: Req) -> Result<u16, RuntimeError> {
        let resp = self.send_ok(op, &req)?;
        let status = resp.status().as_u16();
        self.drain(op, &req, resp)?;
        Ok(status)
    }

    /// Like [`Self::call`] but the statuses in `also_ok` (e.g. 404 for a removal) are
    /// success too.
    pub(crate) fn call_allowing(
        &self,
        op: &str,
        req: Req,
        also_ok: &[u16],
    ) -> Result<u16, RuntimeError> {
        let resp = self.send(op, &req)?;
        let status = resp.status().as_u16();
        if also_ok.contains(&status) {
            self.drain(op, &req, resp)?;
            return Ok(status);
        }
        let resp = self.check(op, resp)?;
        self.drain(op, &req, resp)?;
        Ok(status)
    }

    /// Sends a call whose body is read from `body` as it goes (a tar of tens of MiB is
    /// never held in memory) under the negotiated version prefix, with `Content-Type`
    /// `content_type` and, since the length is known, `Content-Length` (Docker reads an
    /// import's body to its end either way); returns the answer, whatever its status.
    pub(crate) fn send_reader(
        &self,
        op: &str,
        req: &Req,
        content_type: &str,
        (body, len): (&mut dyn Read, u64),
    ) -> Result<Response<Body>, RuntimeError> {
        let api = self.api_version()?;
        let builder = Self::builder(&format!("{BASE}/v{api}{}", req.path), req)
            .header("Content-Type", content_type)
            .header("Content-Length", len.to_string());
        self.send_with(op, req, builder, ureq::SendBody::from_reader(body))?
            .map_err(|e| self.transport_error(op, req, e))
    }

    /// The request line and the headers every call carries.
    fn builder(url: &str, req: &Req) -> http::request::Builder {
        let method = match req.method {
            Method::Get => http::Method::GET,
            Method::Post => http::Method::POST,
            Method::Delete => http::Method::DELETE,
        };
        let mut builder = http::Request::builder().method(method).uri(url);
        if let Some(auth) = &req.registry_auth {
            builder = builder.header("X-Registry-Auth", auth);
        }
        builder
    }

    fn run(&self, op: &str, url: &str, req: &Req) -> Result<Response<Body>, RuntimeError> {
        let builder = Self::builder(url, req);
        let result = match (&req.json, req.method) {
            (Some(body), _) => self.send_with(
                op,
                req,
                builder.header("Content-Type", "application/json"),
                body.as_slice(),
            )?,
            // A POST without a body must still say `Content-Length: 0`: with `()` ureq
            // sends a chunked body, and Docker refuses a start with a request body.
            (None, Method::Post) => self.send_with(op, req, builder, &b""[..])?,
            (None, Method::Get | Method::Delete) => self.send_with(op, req, builder, ())?,
        };
        result.map_err(|e| self.transport_error(op, req, e))
    }

    /// Runs one request with the call's timeouts. The outer error is a request that could
    /// not be built; the inner one is ureq's outcome, mapped by the caller.
    fn send_with(
        &self,
        op: &str,
        req: &Req,
        builder: http::request::Builder,
        body: impl ureq::AsSendBody,
    ) -> Result<Result<Response<Body>, ureq::Error>, RuntimeError> {
        let request = builder
            .body(body)
            .map_err(|e| self.transport_error(op, req, ureq::Error::Http(e)))?;
        let request = self
            .agent
            .configure_request(request)
            // ureq adds the timeout to an Instant: an unbounded one would panic there.
            .timeout_global(req.timeout.map(base::time::clamp_timeout))
            .timeout_per_read(req.per_read)
            .build();
        Ok(self.agent.run(request))
    }

    /// Maps an answer that is not 2xx (or 304, "nothing to do") to an error carrying
    /// Docker's message.
    pub(crate) fn check(
        &self,
        op: &str,
        resp: Response<Body>,
    ) -> Result<Response<Body>, RuntimeError> {
        let status = resp.status().as_u16();
        if (200..300).contains(&status) || status == 304 {
            return Ok(resp);
        }
        let mut text = Vec::new();
        // A body that cannot be read still leaves the status to report.
        let _ = resp
            .into_body()
            .into_with_config()
            .limit(u64::MAX)
            .reader()
            .take(MAX_ERROR_BODY)
            .read_to_end(&mut text);
        Err(status_error(op, status, &text))
    }

    /// Reads and decodes a JSON answer.
    pub(crate) fn read_json<T: DeserializeOwned>(
        &self,
        op: &str,
        req: &Req,
        resp: Response<Body>,
    ) -> Result<T, RuntimeError> {
        let bytes = self.read_body(op, req, resp)?;
        serde_json::from_slice(&bytes).map_err(|source| RuntimeError::Decode {
            op: op.to_string(),
            source,
        })
    }

    /// The whole body of a JSON answer (at most [`MAX_JSON_BODY`]); apart from
    /// [`Self::read_json`] so that each answer type's instance holds only its decoding.
    fn read_body(
        &self,
        op: &str,
        req: &Req,
        resp: Response<Body>,
    ) -> Result<Vec<u8>, RuntimeError> {
        resp.into_body()
            .into_with_config()
            .limit(MAX_JSON_BODY)
            .read_to_vec()
            .map_err(|e| self.transport_error(op, req, e))
    }

    fn drain(&self, op: &str, req: &Req, resp: Response<Body>) -> Result<(), RuntimeError> {
        let mut reader = resp.into_body().into_with_config().limit(u64::MAX).reader();
        io::copy(&mut reader, &mut io::sink())
            .map(|_| ())
            .map_err(|e| self.body_error(op, req, e))
    }

    /// Maps a failure of ureq itself (no answer, or a broken one).
    pub(crate) fn transport_error(&self, op: &str, req: &Req, e: ureq::Error) -> RuntimeError {
        match e {
            ureq::Error::Timeout(reason) => RuntimeError::Timeout {
                op: op.to_string(),
                after: req.reported_timeout(reason),
            },
            ureq::Error::BodyExceedsLimit(limit) => RuntimeError::Api {
                op: op.to_string(),
                status: 200,
                message: format!("answer larger than {limit} bytes"),
            },
            ureq::Error::Io(source) => self.unavailable(source),
            // Anything else (a protocol violation, a connection that failed to set up)
            // means we cannot talk to the engine right now.
            other => self.unavailable(other.into_io()),
        }
    }

    /// Maps an error from reading a body (ureq wraps its own errors in io::Error).
    pub(crate) fn body_error(&self, op: &str, req: &Req, e: io::Error) -> RuntimeError {
        if e.get_ref().is_some_and(|inner| inner.is::<ureq::Error>()) {
            return self.transport_error(op, req, ureq::Error::from(e));
        }
        self.unavailable(e)
    }

    /// The engine could not be reached. Forgets the negotiated version: the engine
    /// that comes back may be another one.
    pub(crate) fn unavailable(&self, source: io::Error) -> RuntimeError {
        *lock(&self.api) = None;
        RuntimeError::Unavailable {
            endpoint: self.endpoint.clone(),
            source,
        }
    }
}

/// True when a body read failed because a read timeout expired (the events stream uses
/// that to wake up and check for shutdown).
pub(crate) fn is_read_timeout(e: &io::Error) -> bool {
    matches!(
        e.get_ref()
            .and_then(|inner| inner.downcast_ref::<ureq::Error>()),
        Some(ureq::Error::Timeout(_))
    ) || e.kind() == io::ErrorKind::TimedOut
}

/// Picks the API version: the engine's own, capped at the newest we speak, refused if
/// it is older than the oldest we speak or than the oldest the engine accepts.
pub(crate) fn choose_api_version(
    server: Option<ApiVersion>,
    server_min: Option<ApiVersion>,
) -> Result<ApiVersion, String> {
    // An engine too old to say its API version is too old for us.
    let server = server.ok_or_else(|| "the engine did not report an API version".to_string())?;
    let chosen = server.min(MAX_API);
    if chosen < MIN_API {
        return Err(format!(
            "the engine speaks API {server}, older than {MIN_API}, the oldest rkubelet supports"
        ));
    }
    if let Some(min) = server_min {
        if chosen < min {
            return Err(format!(
                "the engine requires API {min} or newer, but rkubelet supports at most {MAX_API}"
            ));
        }
    }
    Ok(chosen)
}

/// Maps an error status to the runtime error, with Docker's `message` (or the raw
/// text when the body is not Docker's JSON).
pub(crate) fn status_error(op: &str, status: u16, body: &[u8]) -> RuntimeError {
    let message = match serde_json::from_slice::<ErrorResponse>(body) {
        Ok(e) => e.message,
        Err(_) => String::from_utf8_lossy(body).trim().to_string(),
    };
    let op = op.to_string();
    match status {
        404 => RuntimeError::NotFound { op, message },
        409 => RuntimeError::Conflict { op, message },
        _ => RuntimeError::Api {
            op,
            status,
            message,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_caps_at_our_newest_version() {
        let v = |s| ApiVersion::parse(s);
        assert_eq!(
            choose_api_version(v("1.41"), v("1.12")),
            Ok(ApiVersion(1, 41))
        );
        assert_eq!(
            choose_api_version(v("1.43"), v("1.12")),
            Ok(ApiVersion(1, 43))
        );
        assert_eq!(choose_api_version(v("1.52"), v("1.44")), Ok(MAX_API));
        assert_eq!(choose_api_version(v("1.47"), None), Ok(MAX_API));
    }

    #[test]
    fn negotiation_refuses_engines_we_cannot_speak_to() {
        let v = |s| ApiVersion::parse(s);
        let too_old = choose_api_version(v("1.40"), v("1.12")).expect_err("too old");
        assert!(too_old.contains("1.40"), "{too_old}");
        let too_new = choose_api_version(v("1.60"), v("1.50")).expect_err("too new");
        assert!(too_new.contains("1.50"), "{too_new}");
        assert!(choose_api_version(None, None).is_err());
    }

    #[test]
    fn status_errors_map_to_kinds_with_dockers_message() {
        let body = br#"{"message":"No such container: abc"}"#;
        match status_error("inspect container abc", 404, body) {
            RuntimeError::NotFound { op, message } => {
                assert_eq!(op, "inspect container abc");
                assert_eq!(message, "No such container: abc");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            status_error("create container x", 409, br#"{"message":"name in use"}"#),
            RuntimeError::Conflict { message, .. } if message == "name in use"
        ));
        assert!(matches!(
            status_error("start container x", 500, b"plain text\n"),
            RuntimeError::Api { status: 500, message, .. } if message == "plain text"
        ));
    }

    #[test]
    fn read_timeouts_are_recognised_through_io_wrapping() {
        let wrapped = ureq::Error::Timeout(ureq::Timeout::PerRead).into_io();
        assert!(is_read_timeout(&wrapped));
        assert!(!is_read_timeout(&io::Error::from(
            io::ErrorKind::BrokenPipe
        )));
        assert!(!is_read_timeout(&ureq::Error::ConnectionFailed.into_io()));
    }
}
