//! The API server client: the only module that speaks to a Kubernetes API server.
//!
//! [`ApiClient`] is built from a kubeconfig ([`kubeconfig::load`]) and does what the
//! kubelet's pod source needs, over blocking ureq with rustls: list the pods bound to a
//! node (`GET /api/v1/pods?fieldSelector=spec.nodeName=<node>`, paged by `limit`/
//! `continue`) and watch them from a resourceVersion with bookmarks
//! (`watch=true&allowWatchBookmarks=true&timeoutSeconds=N`), the chunked answer read
//! line by line on the caller's thread ([`WatchStream`]). These are client-go's
//! `Reflector.list` / `watch` requests as the kubelet's `NewSourceApiserver` issues them.
//! For the kubelet port it also creates the `TokenReview`s and `SubjectAccessReview`s
//! that authenticate bearer tokens and authorize requests ([`review`]). The node's own
//! writes (Node, Lease, pod status, mirror pods, events, CSRs, reads of the objects its
//! pods reference) go through the generic verbs: [`ApiClient::get_object`],
//! [`ApiClient::create_object`], [`ApiClient::update_object`],
//! [`ApiClient::patch_object`] (strategic-merge, merge or JSON patch) and
//! [`ApiClient::delete_object`] (grace period and UID precondition), each one request
//! within the caller's timeout, 409/404 told apart by [`ApiError`]'s predicates.
//!
//! Authentication: a client certificate (kubeconfig or exec plugin) in the TLS
//! handshake, and/or a bearer token in `Authorization` — from an exec plugin (cached
//! until it expires or the server answers 401), else `tokenFile` (re-read on every
//! request, so a rotated token is picked up), else `token`. Every request has a timeout
//! and a User-Agent naming rkubelet and its version. [`http`] holds the TLS and
//! line-stream plumbing that the etcd and URL sources share.
//!
//! The client certificate can change while the client is in use ([`identity`]: TLS
//! bootstrap and rotation).
//!
//! Over 800 lines: the one client, its error type and the request plumbing every verb
//! shares; the typed calls of each part of the node live in their own files.
// What another crate uses is `pub`, the rest `pub(crate)` or private
// (tests/tidy.rs checks that each `pub` item is named outside the crate).
#![warn(unreachable_pub)]

pub mod csr;
pub mod events;
pub mod exec;
pub mod identity;
pub mod kubeconfig;
pub mod leases;
pub mod nodes;
pub mod objects;
pub mod pods;
pub mod review;

use std::fmt;
use std::io;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Pod;
use serde::Deserialize;
use ureq::http::Response;
use ureq::{Agent, Body};

use self::exec::{Credential, ExecError};
use self::kubeconfig::RestConfig;
use base::httpclient::servers::{self as http, TlsSettings};
use base::lines::LineReader;
use base::loops::lock;
use base::netutil::query_escape;

/// One list call (all its pages) and the setup of a watch must finish within this.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a quiet watch stream wakes its reader (to check for shutdown).
pub(crate) const WATCH_WAKEUP: Duration = Duration::from_secs(1);
/// The watch's own end beyond its server-side `timeoutSeconds`: a server that does not
/// close the stream when it said it would (or a dead connection) is given up then.
pub(crate) const WATCH_GRACE: Duration = Duration::from_secs(30);
/// Upstream's list page size.
pub(crate) const LIST_PAGE: u32 = 500;
/// The most of an error answer's body read (a Status object is small), and of a
/// review's answer (a TokenReview or SubjectAccessReview is as small).
const MAX_ERROR_BODY: u64 = 64 * 1024;
/// The most of a list answer read (500 pods of a few KB each, with room).
const MAX_LIST_BODY: u64 = 64 * 1024 * 1024;
/// The most of one object's answer read: a ConfigMap or Secret holds at most 1 MiB of
/// data (etcd's limit is 1.5 MiB for the whole object); a Node with 50 images is tens
/// of KB.
pub(crate) const MAX_OBJECT_BODY: u64 = 4 * 1024 * 1024;

/// How a PATCH body is to be read (its `Content-Type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PatchType {
    /// `application/strategic-merge-patch+json`: lists with a merge key are merged by it
    /// (a node's conditions and addresses by `type`, a pod's conditions by `type`).
    StrategicMerge,
}

impl PatchType {
    fn content_type(self) -> &'static str {
        match self {
            PatchType::StrategicMerge => "application/strategic-merge-patch+json",
        }
    }
}

/// The body of a DELETE (`metav1.DeleteOptions`): the grace period, and a UID
/// precondition so a delete never removes a newer object of the same name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct DeleteOptions {
    /// `gracePeriodSeconds`: None leaves the object's default; Some(0) deletes at once.
    pub grace_period_seconds: Option<i64>,
    /// `preconditions.uid`: the server answers 409 when the object's UID differs.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
}

impl DeleteOptions {
    fn to_json(&self) -> serde_json::Value {
        let mut body = serde_json::json!({"kind": "DeleteOptions", "apiVersion": "v1"});
        if let Some(g) = self.grace_period_seconds {
            body["gracePeriodSeconds"] = g.into();
        }
        if self.uid.is_some() || self.resource_version.is_some() {
            let mut pre = serde_json::Map::new();
            if let Some(uid) = &self.uid {
                pre.insert("uid".into(), uid.clone().into());
            }
            if let Some(rv) = &self.resource_version {
                pre.insert("resourceVersion".into(), rv.clone().into());
            }
            body["preconditions"] = pre.into();
        }
        body
    }
}

/// Why a call to the API server failed. Each message names the call and the URL.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The server could not be reached, or the call timed out.
    #[error("{what} from {url}")]
    Transport {
        /// The call, e.g. `list pods`.
        what: &'static str,
        /// The URL (without credentials: none are ever in it).
        url: String,
        /// The cause.
        source: ureq::Error,
    },
    /// The server's certificate is not valid yet by this node's clock: the clock is
    /// most likely behind (a board without an RTC before NTP syncs). Retried as an
    /// unreachable server is; the message holds no current time, so a loop repeating
    /// it logs it once (the clock's own line, with the time, is logged once by the
    /// client: [`base::clock`]). rustls's error is not kept as the cause: its text
    /// carries the verification time, new at every retry.
    #[error("{what} from {url}: {}", base::clock::not_yet_valid_words(*.not_before))]
    ClockBehind {
        /// The call.
        what: &'static str,
        /// The URL.
        url: String,
        /// The certificate's `notBefore`, when rustls told it.
        not_before: Option<SystemTime>,
    },
    /// The server answered with an error status.
    #[error("{what} from {url}: the API server answered {code}{}", status_tail(.reason, .message))]
    Status {
        /// The call.
        what: &'static str,
        /// The URL.
        url: String,
        /// The HTTP status.
        code: u16,
        /// The Status object's `reason` (e.g. `Expired`, `Unauthorized`), if any.
        reason: String,
        /// The Status object's `message`, or the body.
        message: String,
    },
    /// The answer is not what the API promises.
    #[error("{what} from {url}: the answer does not decode")]
    Decode {
        /// The call.
        what: &'static str,
        /// The URL.
        url: String,
        /// The cause.
        source: serde_json::Error,
    },
    /// A streamed body broke off.
    #[error("{what} from {url}: stream broken")]
    Stream {
        /// The call.
        what: &'static str,
        /// The URL.
        url: String,
        /// The cause.
        source: io::Error,
    },
    /// The exec credential plugin gave no credential.
    #[error(transparent)]
    Credential(ExecError),
    /// The TLS settings cannot be used.
    #[error("TLS settings: {0}")]
    Tls(String),
    /// No request was sent: the client certificate is not issued yet (TLS bootstrap).
    #[error("{what} from {url}: no client certificate yet (TLS bootstrap in progress)")]
    NoIdentity {
        /// The call.
        what: &'static str,
        /// The URL.
        url: String,
    },
}

/// The API server's certificate is not valid yet by this node's clock: raised (and its
/// line logged) by the first call that finds it so, cleared by the next call that gets
/// an answer. One for the process, not per client: TLS bootstrap makes a client per
/// attempt, and every client of the node talks to the one API server.
static SERVER_CLOCK: base::clock::Notice = base::clock::Notice::new();

/// What a call's transport gave: the answer (which ends a clock-behind condition), or
/// its error, [`ApiError::ClockBehind`] when the server's certificate is not valid yet
/// by this node's clock (then the clock's line is logged, once per condition).
fn transported(
    what: &'static str,
    url: &str,
    result: Result<Response<Body>, ureq::Error>,
) -> Result<Response<Body>, ApiError> {
    match result {
        Ok(resp) => {
            if SERVER_CLOCK.clear() {
                log::info!("the API server's certificate is valid by this node's clock now");
            }
            Ok(resp)
        }
        Err(source) => Err(transport_error(what, url, source, &SERVER_CLOCK)),
    }
}

/// The error of a failed call (see [`transported`]); `notice` says whether the clock's
/// line is still to be logged.
fn transport_error(
    what: &'static str,
    url: &str,
    source: ureq::Error,
    notice: &base::clock::Notice,
) -> ApiError {
    match http::not_valid_yet(&source) {
        Some(not_before) => {
            if notice.raise() {
                // The server alone (scheme and authority): the path is one call's.
                let server = url.splitn(4, '/').take(3).collect::<Vec<_>>().join("/");
                log::warn!(
                    "{} Calls to {server} are retried until it is set.",
                    base::clock::behind_line("the API server's", not_before, SystemTime::now())
                );
            }
            ApiError::ClockBehind {
                what,
                url: url.to_string(),
                not_before,
            }
        }
        None => ApiError::Transport {
            what,
            url: url.to_string(),
            source,
        },
    }
}

/// [`ApiError::Status`]'s message after the code: ` <reason>` and `: <message>`, each
/// when the answer had one.
fn status_tail(reason: &str, message: &str) -> String {
    let mut tail = String::new();
    if !reason.is_empty() {
        tail.push(' ');
        tail.push_str(reason);
    }
    if !message.is_empty() {
        tail.push_str(": ");
        tail.push_str(message);
    }
    tail
}

impl ApiError {
    /// The resourceVersion asked for is too old (410 Gone / `Expired`): list again.
    pub fn is_gone(&self) -> bool {
        matches!(self, ApiError::Status { code: 410, .. })
            || matches!(self, ApiError::Status { reason, .. } if reason == "Expired" || reason == "Gone")
    }

    /// The server refused our credentials (401).
    #[cfg(test)]
    pub(crate) fn is_unauthorized(&self) -> bool {
        matches!(self, ApiError::Status { code: 401, .. })
    }

    /// The HTTP status the server answered, if it answered one.
    pub fn code(&self) -> Option<u16> {
        match self {
            ApiError::Status { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// The object does not exist (404).
    pub fn is_not_found(&self) -> bool {
        self.code() == Some(404)
    }

    /// 409: a resourceVersion or UID precondition failed (`Conflict`), or the object
    /// to create already exists (see [`ApiError::is_already_exists`]).
    pub fn is_conflict(&self) -> bool {
        self.code() == Some(409)
    }

    /// 409 `AlreadyExists`: a create found the name taken.
    pub fn is_already_exists(&self) -> bool {
        matches!(self, ApiError::Status { code: 409, reason, .. } if reason == "AlreadyExists")
    }

    /// The server was not reached or did not answer in time: worth retrying later,
    /// and no sign that the object or our credentials are wrong.
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            ApiError::Transport { .. }
                | ApiError::ClockBehind { .. }
                | ApiError::Stream { .. }
                | ApiError::NoIdentity { .. }
        ) || matches!(self.code(), Some(429 | 500 | 502 | 503 | 504))
    }
}

/// A `metav1.Status`, as error answers and watch `ERROR` events carry it.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Status {
    /// The HTTP code it stands for.
    #[serde(default)]
    pub code: u16,
    /// A machine-readable reason (`Expired`, `Unauthorized`, …).
    #[serde(default)]
    pub reason: String,
    /// A human-readable message.
    #[serde(default)]
    pub message: String,
}

/// One event of a watch stream.
#[derive(Clone, Debug, PartialEq)]
pub enum WatchEvent {
    /// A pod appeared.
    Added(Box<Pod>),
    /// A pod changed.
    Modified(Box<Pod>),
    /// A pod is gone (the object is its last state).
    Deleted(Box<Pod>),
    /// Progress: every event up to this resourceVersion has been sent.
    Bookmark(String),
    /// The server ends the watch with this status (410 `Expired`: list again).
    Error(Status),
}

/// What reading a watch gave.
#[derive(Debug)]
pub enum StreamItem {
    /// An event.
    Event(WatchEvent),
    /// Nothing arrived for [`WATCH_WAKEUP`]; the stream is still open.
    Idle,
    /// The server closed the stream (its `timeoutSeconds` passed): watch again.
    End,
}

/// The pods of one list, and the resourceVersion to watch from.
#[derive(Debug)]
pub struct PodList {
    /// The pods.
    pub items: Vec<Pod>,
    /// The list's resourceVersion.
    pub resource_version: String,
}

/// An open watch: the chunked answer, read line by line.
pub struct WatchStream {
    lines: LineReader<ureq::BodyReader<'static>>,
    url: String,
}

impl fmt::Debug for WatchStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WatchStream({})", self.url)
    }
}

#[derive(Deserialize)]
struct RawEvent {
    #[serde(rename = "type")]
    kind: String,
    object: serde_json::Value,
}

impl WatchStream {
    /// Reads the next event. Blocks at most about [`WATCH_WAKEUP`].
    pub fn next_item(&mut self) -> Result<StreamItem, ApiError> {
        let what = "watch pods";
        let line = match self.lines.next_line() {
            Ok(Some(line)) => line,
            Ok(None) => return Ok(StreamItem::End),
            Err(e) if http::is_read_timeout(&e) => return Ok(StreamItem::Idle),
            Err(source) => {
                return Err(ApiError::Stream {
                    what,
                    url: self.url.clone(),
                    source,
                })
            }
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(StreamItem::Idle);
        }
        let decoded = decode_watch_line(&line).map_err(|source| ApiError::Decode {
            what,
            url: self.url.clone(),
            source,
        })?;
        match decoded {
            Ok(event) => Ok(StreamItem::Event(event)),
            Err(other) => {
                // An event type this client does not know: a newer server. Skip it
                // rather than end the watch.
                log::warn!("{what}: skipping an event of unknown type {other:?}");
                Ok(StreamItem::Idle)
            }
        }
    }
}

/// Decodes one line of a pod watch (pure): the event, or the type of an event this
/// client does not know.
#[doc(hidden)]
pub fn decode_watch_line(line: &[u8]) -> Result<Result<WatchEvent, String>, serde_json::Error> {
    let raw: RawEvent = serde_json::from_slice(line)?;
    Ok(Ok(match raw.kind.as_str() {
        "ADDED" => WatchEvent::Added(base::json::from_value(&raw.object)?),
        "MODIFIED" => WatchEvent::Modified(base::json::from_value(&raw.object)?),
        "DELETED" => WatchEvent::Deleted(base::json::from_value(&raw.object)?),
        "BOOKMARK" => {
            let rv = raw.object["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            WatchEvent::Bookmark(rv)
        }
        "ERROR" => WatchEvent::Error(base::json::from_value(&raw.object)?),
        other => return Ok(Err(other.to_string())),
    }))
}

/// A client of one API server, shared by the threads that call it.
pub struct ApiClient {
    config: RestConfig,
    /// Held for microseconds, never across a plugin run, a file read or a request.
    state: Mutex<ClientState>,
    /// Signalled when a plugin run ends (`refreshing` went false).
    refreshed: Condvar,
}

struct ClientState {
    /// The agent and the exec plugin's client certificate it was built with.
    agent: Agent,
    agent_cert: Option<Vec<u8>>,
    /// The TLS settings the agent was built with: the kubeconfig's, with the client
    /// certificate and key last given to [`ApiClient::set_client_identity`].
    tls: TlsSettings,
    /// No client certificate yet: requests fail at once ([`ApiError::NoIdentity`]).
    awaiting_identity: bool,
    /// The exec plugin's last credential.
    exec_cred: Option<Credential>,
    /// A caller is running the plugin: others that need a new credential wait for
    /// its answer rather than run it again; callers with a fresh one never wait.
    refreshing: bool,
}

impl fmt::Debug for ApiClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiClient")
            .field("server", &self.config.server)
            .field("tls", &self.config.tls)
            .field("auth", &self.config.auth)
            .finish()
    }
}

impl ApiClient {
    /// A client for the server a kubeconfig names. Does not connect.
    pub fn new(config: RestConfig) -> Result<ApiClient, ApiError> {
        let tls = http::tls_config(&config.tls).map_err(ApiError::Tls)?;
        let agent = http::agent(tls, REQUEST_TIMEOUT);
        Ok(ApiClient {
            state: Mutex::new(ClientState {
                agent,
                agent_cert: None,
                tls: config.tls.clone(),
                awaiting_identity: false,
                exec_cred: None,
                refreshing: false,
            }),
            config,
            refreshed: Condvar::new(),
        })
    }

    /// The server's base URL.
    pub fn server(&self) -> &str {
        &self.config.server
    }

    /// Lists the pods bound to `node` (every page). `resource_version`: `Some("0")` lets
    /// the server answer from its cache (upstream's first list); None asks for the
    /// newest state (after a 410).
    pub fn list_pods(
        &self,
        node: &str,
        resource_version: Option<&str>,
    ) -> Result<PodList, ApiError> {
        let what = "list pods";
        let mut items = Vec::new();
        let mut continue_token: Option<String> = None;
        loop {
            let mut path = format!(
                "/api/v1/pods?fieldSelector={}&limit={LIST_PAGE}",
                query_escape(&format!("spec.nodeName={node}"))
            );
            match &continue_token {
                Some(c) => path.push_str(&format!("&continue={}", query_escape(c))),
                None => {
                    if let Some(rv) = resource_version {
                        path.push_str(&format!("&resourceVersion={}", query_escape(rv)));
                    }
                }
            }
            let (url, resp) = self.get(what, &path, REQUEST_TIMEOUT, None)?;
            let body = read_body(what, &url, resp, MAX_LIST_BODY)?;
            let list: k8s_openapi::List<Pod> =
                serde_json::from_slice(&body).map_err(|source| ApiError::Decode {
                    what,
                    url: url.clone(),
                    source,
                })?;
            items.extend(list.items);
            let rv = list.metadata.resource_version.unwrap_or_default();
            match list.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(c) => continue_token = Some(c),
                None => {
                    return Ok(PodList {
                        items,
                        resource_version: rv,
                    })
                }
            }
        }
    }

    /// Opens a watch of the pods bound to `node` from `resource_version`, with
    /// bookmarks; the server ends it after `timeout_seconds`.
    pub fn watch_pods(
        &self,
        node: &str,
        resource_version: &str,
        timeout_seconds: u64,
    ) -> Result<WatchStream, ApiError> {
        let what = "watch pods";
        let path = format!(
            "/api/v1/pods?fieldSelector={}&resourceVersion={}&allowWatchBookmarks=true&timeoutSeconds={timeout_seconds}&watch=true",
            query_escape(&format!("spec.nodeName={node}")),
            query_escape(resource_version),
        );
        let total = base::time::clamp_timeout(Duration::from_secs(timeout_seconds))
            .saturating_add(WATCH_GRACE);
        let (url, resp) = self.get(what, &path, total, Some(WATCH_WAKEUP))?;
        let reader = resp.into_body().into_with_config().limit(u64::MAX).reader();
        Ok(WatchStream {
            lines: LineReader::new(reader, http::MAX_LINE),
            url,
        })
    }

    /// A GET that succeeded (2xx), or the error it met.
    fn get(
        &self,
        what: &'static str,
        path: &str,
        timeout: Duration,
        per_read: Option<Duration>,
    ) -> Result<(String, Response<Body>), ApiError> {
        let url = format!("{}{path}", self.config.server);
        let (agent, bearer) = self.prepare(what, &url)?;
        let mut builder = ureq::http::Request::builder()
            .method("GET")
            .uri(&url)
            .header("Accept", "application/json");
        if let Some(token) = &bearer {
            builder = builder.header("Authorization", format!("Bearer {token}"));
        }
        let request = builder.body(()).map_err(|e| ApiError::Transport {
            what,
            url: url.clone(),
            source: ureq::Error::Http(e),
        })?;
        let request = agent
            .configure_request(request)
            .timeout_global(Some(base::time::clamp_timeout(timeout)))
            // The answer's head must come within the request timeout even for a watch.
            .timeout_recv_response(Some(REQUEST_TIMEOUT))
            .timeout_per_read(per_read)
            .build();
        let resp = transported(what, &url, agent.run(request))?;
        self.check(what, url, resp)
    }

    /// POSTs `body` (JSON) to `path` and decodes the answer (2xx), all within `timeout`:
    /// the create calls whose answer is the object itself (TokenReview,
    /// SubjectAccessReview). The body is never logged nor put in an error.
    fn post_json<T: serde::de::DeserializeOwned>(
        &self,
        what: &'static str,
        path: &str,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<T, ApiError> {
        let (url, resp) = self.send(
            what,
            "POST",
            path,
            Some(("application/json", body)),
            timeout,
        )?;
        let body = read_body(what, &url, resp, MAX_ERROR_BODY)?;
        serde_json::from_slice(&body).map_err(|source| ApiError::Decode { what, url, source })
    }

    /// GETs one object (`path` is its full API path, e.g.
    /// `/api/v1/nodes/<name>`) within `timeout`.
    pub fn get_object<T: serde::de::DeserializeOwned>(
        &self,
        what: &'static str,
        path: &str,
        timeout: Duration,
    ) -> Result<T, ApiError> {
        let (url, resp) = self.get(what, path, timeout, None)?;
        let body = read_body(what, &url, resp, MAX_OBJECT_BODY)?;
        serde_json::from_slice(&body).map_err(|source| ApiError::Decode { what, url, source })
    }

    /// POSTs `object` to the collection at `path` (a create, 409 `AlreadyExists` when
    /// the name is taken) and returns what the server stored.
    pub(crate) fn create_object<B: serde::Serialize, T: serde::de::DeserializeOwned>(
        &self,
        what: &'static str,
        path: &str,
        object: &B,
        timeout: Duration,
    ) -> Result<T, ApiError> {
        let body = encode(what, object)?;
        self.call_json(
            what,
            "POST",
            path,
            Some(("application/json", body)),
            timeout,
        )
    }

    /// PUTs `object` to `path` (an update; with `metadata.resourceVersion` set, the
    /// server answers 409 `Conflict` when the object changed since).
    pub(crate) fn update_object<B: serde::Serialize, T: serde::de::DeserializeOwned>(
        &self,
        what: &'static str,
        path: &str,
        object: &B,
        timeout: Duration,
    ) -> Result<T, ApiError> {
        let body = encode(what, object)?;
        self.call_json(what, "PUT", path, Some(("application/json", body)), timeout)
    }

    /// PATCHes `path` (an object or its `/status`) with `patch` read as `kind`, and
    /// returns the patched object.
    pub(crate) fn patch_object<T: serde::de::DeserializeOwned>(
        &self,
        what: &'static str,
        path: &str,
        kind: PatchType,
        patch: &serde_json::Value,
        timeout: Duration,
    ) -> Result<T, ApiError> {
        let body = encode(what, patch)?;
        self.call_json(
            what,
            "PATCH",
            path,
            Some((kind.content_type(), body)),
            timeout,
        )
    }

    /// DELETEs the object at `path` with `options`. The answer (the object while a
    /// graceful deletion runs, or a Status) is not decoded.
    pub(crate) fn delete_object(
        &self,
        what: &'static str,
        path: &str,
        options: &DeleteOptions,
        timeout: Duration,
    ) -> Result<(), ApiError> {
        let body = encode(what, &options.to_json())?;
        let (url, resp) = self.send(
            what,
            "DELETE",
            path,
            Some(("application/json", body)),
            timeout,
        )?;
        read_body(what, &url, resp, MAX_OBJECT_BODY).map(drop)
    }

    /// One request whose 2xx answer is a JSON object of at most [`MAX_OBJECT_BODY`].
    fn call_json<T: serde::de::DeserializeOwned>(
        &self,
        what: &'static str,
        method: &'static str,
        path: &str,
        body: Option<(&'static str, Vec<u8>)>,
        timeout: Duration,
    ) -> Result<T, ApiError> {
        let (url, resp) = self.send(what, method, path, body, timeout)?;
        let body = read_body(what, &url, resp, MAX_OBJECT_BODY)?;
        serde_json::from_slice(&body).map_err(|source| ApiError::Decode { what, url, source })
    }

    /// Sends one request with a body of the given content type (a DELETE's too: ureq
    /// sends any body given through the `http` API, as client-go sends DeleteOptions),
    /// all of it within `timeout`, and returns the answer if it is 2xx. The body is never
    /// logged nor put in an error (it may hold a secret or a token).
    fn send(
        &self,
        what: &'static str,
        method: &'static str,
        path: &str,
        body: Option<(&'static str, Vec<u8>)>,
        timeout: Duration,
    ) -> Result<(String, Response<Body>), ApiError> {
        let url = format!("{}{path}", self.config.server);
        let (agent, bearer) = self.prepare(what, &url)?;
        let mut builder = ureq::http::Request::builder()
            .method(method)
            .uri(&url)
            .header("Accept", "application/json");
        if let Some((content_type, _)) = &body {
            builder = builder.header("Content-Type", *content_type);
        }
        if let Some(token) = &bearer {
            builder = builder.header("Authorization", format!("Bearer {token}"));
        }
        let payload = body.map(|(_, b)| b).unwrap_or_default();
        let request = builder.body(payload).map_err(|e| ApiError::Transport {
            what,
            url: url.clone(),
            source: ureq::Error::Http(e),
        })?;
        let request = agent
            .configure_request(request)
            .timeout_global(Some(base::time::clamp_timeout(timeout)))
            .build();
        let resp = transported(what, &url, agent.run(request))?;
        self.check(what, url, resp)
    }

    /// The answer if its status is 2xx, else the error it carries (a `Status` body's
    /// reason and message when there is one).
    fn check(
        &self,
        what: &'static str,
        url: String,
        resp: Response<Body>,
    ) -> Result<(String, Response<Body>), ApiError> {
        let code = resp.status().as_u16();
        if (200..300).contains(&code) {
            return Ok((url, resp));
        }
        let body = resp
            .into_body()
            .into_with_config()
            .limit(MAX_ERROR_BODY)
            .read_to_vec()
            .unwrap_or_default();
        let status: Status = serde_json::from_slice(&body).unwrap_or_else(|_| Status {
            code,
            reason: String::new(),
            message: String::from_utf8_lossy(&body).trim().to_string(),
        });
        if code == 401 {
            // A refused exec credential is dropped, so the next call runs the plugin.
            lock(&self.state).exec_cred = None;
        }
        Err(ApiError::Status {
            what,
            url,
            code,
            reason: status.reason,
            message: status.message,
        })
    }

    /// The agent to use and the bearer token to send, refreshing an exec credential
    /// when it has expired. No lock is held while the plugin runs or the token file is
    /// read.
    fn prepare(&self, what: &'static str, url: &str) -> Result<(Agent, Option<String>), ApiError> {
        if lock(&self.state).awaiting_identity {
            return Err(ApiError::NoIdentity {
                what,
                url: url.to_string(),
            });
        }
        let auth = &self.config.auth;
        if let Some(e) = &auth.exec {
            let (agent, token) = self.exec_credential(e)?;
            if token.is_some() {
                return Ok((agent, token));
            }
        }
        let from_file = auth
            .token_file
            .as_ref()
            .and_then(|f| match std::fs::read_to_string(f) {
                Ok(t) if !t.trim().is_empty() => Some(t.trim().to_string()),
                Ok(_) => None,
                Err(e) => {
                    log::warn!("cannot read tokenFile {}: {e}", f.display());
                    None
                }
            });
        let agent = lock(&self.state).agent.clone();
        Ok((agent, from_file.or_else(|| auth.token.clone())))
    }

    /// The exec plugin's credential (its token, and the agent carrying its client
    /// certificate), running the plugin once at a time when it has expired: a caller
    /// that finds another one running it waits for that answer (the run is bounded by
    /// the plugin's deadline).
    fn exec_credential(&self, e: &exec::ExecConfig) -> Result<(Agent, Option<String>), ApiError> {
        let mut st = lock(&self.state);
        loop {
            if let Some(c) = st.exec_cred.as_ref().filter(|c| c.fresh(SystemTime::now())) {
                return Ok((st.agent.clone(), c.token.clone()));
            }
            if !st.refreshing {
                break;
            }
            st = self
                .refreshed
                .wait_timeout(st, exec::EXEC_TIMEOUT)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        st.refreshing = true;
        let agent_cert = st.agent_cert.clone();
        drop(st);
        let fetched = exec::run(e).map_err(ApiError::Credential).and_then(|cred| {
            // A new client certificate needs a new agent (built outside the lock).
            let agent = if cred.cert_pem != agent_cert {
                let tls = TlsSettings {
                    cert_pem: cred.cert_pem.clone(),
                    key_pem: cred.key_pem.clone(),
                    ..self.config.tls.clone()
                };
                let tls = http::tls_config(&tls)
                    .map_err(|r| ApiError::Tls(format!("exec plugin credential: {r}")))?;
                Some(http::agent(tls, REQUEST_TIMEOUT))
            } else {
                None
            };
            Ok((cred, agent))
        });
        let mut st = lock(&self.state);
        st.refreshing = false;
        self.refreshed.notify_all();
        let (cred, agent) = fetched?;
        if let Some(agent) = agent {
            st.agent = agent;
            st.agent_cert = cred.cert_pem.clone();
        }
        let token = cred.token.clone();
        st.exec_cred = Some(cred);
        Ok((st.agent.clone(), token))
    }
}

/// `value` as a JSON request body.
fn encode<B: serde::Serialize>(what: &'static str, value: &B) -> Result<Vec<u8>, ApiError> {
    serde_json::to_vec(value).map_err(|source| ApiError::Decode {
        what,
        url: String::new(),
        source,
    })
}

/// A response's body, at most `limit` bytes (more is a transport error).
fn read_body(
    what: &'static str,
    url: &str,
    resp: Response<Body>,
    limit: u64,
) -> Result<Vec<u8>, ApiError> {
    resp.into_body()
        .into_with_config()
        .limit(limit)
        .read_to_vec()
        .map_err(|source| ApiError::Transport {
            what,
            url: url.to_string(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gone_and_unauthorized_are_recognised() {
        let status = |code: u16, reason: &str| ApiError::Status {
            what: "watch pods",
            url: "https://s/api".into(),
            code,
            reason: reason.into(),
            message: "m".into(),
        };
        assert!(status(410, "").is_gone());
        assert!(status(500, "Expired").is_gone());
        assert!(!status(500, "InternalError").is_gone());
        assert!(status(401, "Unauthorized").is_unauthorized());
        assert!(status(409, "Conflict").is_conflict());
        assert!(!status(409, "Conflict").is_already_exists());
        assert!(status(409, "AlreadyExists").is_already_exists());
        assert!(status(404, "NotFound").is_not_found());
        assert!(status(503, "").is_unreachable());
        assert!(!status(404, "NotFound").is_unreachable());
        assert_eq!(
            status(401, "Unauthorized").to_string(),
            "watch pods from https://s/api: the API server answered 401 Unauthorized: m"
        );
    }

    #[test]
    fn a_server_certificate_not_yet_valid_names_the_clock_and_is_retried() {
        let notice = base::clock::Notice::new();
        let e = transport_error(
            "list pods",
            "https://s/api",
            base::testutil::not_valid_yet_error(1_796_083_200),
            &notice,
        );
        assert!(matches!(e, ApiError::ClockBehind { .. }), "{e:?}");
        assert!(e.is_unreachable(), "retried with the normal backoff");
        assert_eq!(
            e.to_string(),
            "list pods from https://s/api: the server's certificate is not valid until \
             2026-12-01T00:00:00Z by this node's clock: is the clock behind (no RTC, NTP not \
             yet synced)?"
        );
        assert!(std::error::Error::source(&e).is_none(), "no changing cause");
        // The clock's line was logged by this call; the retries stay quiet.
        assert!(!notice.raise());
        // Any other transport error stays one.
        let e = transport_error(
            "list pods",
            "https://s/api",
            ureq::Error::ConnectionFailed,
            &notice,
        );
        assert!(matches!(e, ApiError::Transport { .. }), "{e:?}");
    }

    #[test]
    fn delete_options_carry_grace_and_preconditions() {
        assert_eq!(
            DeleteOptions::default().to_json(),
            serde_json::json!({"kind": "DeleteOptions", "apiVersion": "v1"})
        );
        let opts = DeleteOptions {
            grace_period_seconds: Some(0),
            uid: Some("u-1".into()),
            resource_version: None,
        };
        assert_eq!(
            opts.to_json(),
            serde_json::json!({"kind": "DeleteOptions", "apiVersion": "v1",
                "gracePeriodSeconds": 0, "preconditions": {"uid": "u-1"}})
        );
    }
}
