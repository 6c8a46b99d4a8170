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
//! that authenticate bearer tokens and authorize requests ([`review`]).
//!
//! Authentication: a client certificate (kubeconfig or exec plugin) in the TLS
//! handshake, and/or a bearer token in `Authorization` — from an exec plugin (cached
//! until it expires or the server answers 401), else `tokenFile` (re-read on every
//! request, so a rotated token is picked up), else `token`. Every request has a timeout
//! and a User-Agent naming rkubelet and its version. [`http`] holds the TLS and
//! line-stream plumbing that the etcd and URL sources share.

pub mod exec;
pub mod kubeconfig;
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
use crate::httpclient::servers::{self as http, query_escape, LineReader, TlsSettings};
use crate::loops::lock;

/// One list call (all its pages) and the setup of a watch must finish within this.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a quiet watch stream wakes its reader (to check for shutdown).
pub const WATCH_WAKEUP: Duration = Duration::from_secs(1);
/// The watch's own end beyond its server-side `timeoutSeconds`: a server that does not
/// close the stream when it said it would (or a dead connection) is given up then.
pub const WATCH_GRACE: Duration = Duration::from_secs(30);
/// Upstream's list page size.
pub const LIST_PAGE: u32 = 500;
/// The most of an error answer's body read (a Status object is small), and of a
/// review's answer (a TokenReview or SubjectAccessReview is as small).
const MAX_ERROR_BODY: u64 = 64 * 1024;
/// The most of a list answer read (500 pods of a few KB each, with room).
const MAX_LIST_BODY: u64 = 64 * 1024 * 1024;

/// Why a call to the API server failed. Each message names the call and the URL.
#[derive(Debug)]
pub enum ApiError {
    /// The server could not be reached, or the call timed out.
    Transport {
        /// The call, e.g. `list pods`.
        what: &'static str,
        /// The URL (without credentials: none are ever in it).
        url: String,
        /// The cause.
        source: ureq::Error,
    },
    /// The server answered with an error status.
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
    Decode {
        /// The call.
        what: &'static str,
        /// The URL.
        url: String,
        /// The cause.
        source: serde_json::Error,
    },
    /// A streamed body broke off.
    Stream {
        /// The call.
        what: &'static str,
        /// The URL.
        url: String,
        /// The cause.
        source: io::Error,
    },
    /// The exec credential plugin gave no credential.
    Credential(ExecError),
    /// The TLS settings cannot be used.
    Tls(String),
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiError::Transport { what, url, .. } => write!(f, "{what} from {url}"),
            ApiError::Status {
                what,
                url,
                code,
                reason,
                message,
            } => {
                write!(f, "{what} from {url}: the API server answered {code}")?;
                if !reason.is_empty() {
                    write!(f, " {reason}")?;
                }
                if !message.is_empty() {
                    write!(f, ": {message}")?;
                }
                Ok(())
            }
            ApiError::Decode { what, url, .. } => {
                write!(f, "{what} from {url}: the answer does not decode")
            }
            ApiError::Stream { what, url, .. } => write!(f, "{what} from {url}: stream broken"),
            ApiError::Credential(e) => e.fmt(f),
            ApiError::Tls(r) => write!(f, "TLS settings: {r}"),
        }
    }
}

impl std::error::Error for ApiError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ApiError::Transport { source, .. } => Some(source),
            ApiError::Decode { source, .. } => Some(source),
            ApiError::Stream { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl ApiError {
    /// The resourceVersion asked for is too old (410 Gone / `Expired`): list again.
    pub fn is_gone(&self) -> bool {
        matches!(self, ApiError::Status { code: 410, .. })
            || matches!(self, ApiError::Status { reason, .. } if reason == "Expired" || reason == "Gone")
    }

    /// The server refused our credentials (401).
    pub fn is_unauthorized(&self) -> bool {
        matches!(self, ApiError::Status { code: 401, .. })
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
        let decode = |source| ApiError::Decode {
            what,
            url: self.url.clone(),
            source,
        };
        let raw: RawEvent = serde_json::from_slice(&line).map_err(decode)?;
        let event = match raw.kind.as_str() {
            "ADDED" => WatchEvent::Added(serde_json::from_value(raw.object).map_err(decode)?),
            "MODIFIED" => WatchEvent::Modified(serde_json::from_value(raw.object).map_err(decode)?),
            "DELETED" => WatchEvent::Deleted(serde_json::from_value(raw.object).map_err(decode)?),
            "BOOKMARK" => {
                let rv = raw.object["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                WatchEvent::Bookmark(rv)
            }
            "ERROR" => WatchEvent::Error(serde_json::from_value(raw.object).map_err(decode)?),
            other => {
                // An event type this client does not know: a newer server. Skip it
                // rather than end the watch.
                log::warn!("{what}: skipping an event of unknown type {other:?}");
                return Ok(StreamItem::Idle);
            }
        };
        Ok(StreamItem::Event(event))
    }
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
            config,
            state: Mutex::new(ClientState {
                agent,
                agent_cert: None,
                exec_cred: None,
                refreshing: false,
            }),
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
        let total = crate::time::clamp_timeout(Duration::from_secs(timeout_seconds))
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
        let (agent, bearer) = self.prepare()?;
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
            .timeout_global(Some(crate::time::clamp_timeout(timeout)))
            // The answer's head must come within the request timeout even for a watch.
            .timeout_recv_response(Some(REQUEST_TIMEOUT))
            .timeout_per_read(per_read)
            .build();
        let resp = agent.run(request).map_err(|source| ApiError::Transport {
            what,
            url: url.clone(),
            source,
        })?;
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
        let url = format!("{}{path}", self.config.server);
        let (agent, bearer) = self.prepare()?;
        let mut builder = ureq::http::Request::builder()
            .method("POST")
            .uri(&url)
            .header("Accept", "application/json")
            .header("Content-Type", "application/json");
        if let Some(token) = &bearer {
            builder = builder.header("Authorization", format!("Bearer {token}"));
        }
        let request = builder.body(body).map_err(|e| ApiError::Transport {
            what,
            url: url.clone(),
            source: ureq::Error::Http(e),
        })?;
        let request = agent
            .configure_request(request)
            .timeout_global(Some(crate::time::clamp_timeout(timeout)))
            .build();
        let resp = agent.run(request).map_err(|source| ApiError::Transport {
            what,
            url: url.clone(),
            source,
        })?;
        let (url, resp) = self.check(what, url, resp)?;
        let body = read_body(what, &url, resp, MAX_ERROR_BODY)?;
        serde_json::from_slice(&body).map_err(|source| ApiError::Decode { what, url, source })
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
    fn prepare(&self) -> Result<(Agent, Option<String>), ApiError> {
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
        assert_eq!(
            status(401, "Unauthorized").to_string(),
            "watch pods from https://s/api: the API server answered 401 Unauthorized: m"
        );
    }
}
