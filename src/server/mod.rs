//! The kubelet's HTTP ports. One file per port, one `match` on (method, path
//! segments) per port; [`http`] is the bounded transport under all of them and the
//! only code that knows the wire.
//!
//! Ports are bound by [`bind`] during start-up, so a port in use is a start-up error
//! with the address in it. Each port is then served by its own named poller thread
//! (`srv-healthz`, `srv-readonly`) and a fixed pool of workers (`srv-readonly-0` …).
//! At shutdown [`Unblockers::unblock_all`] wakes every poller.

pub mod auth;
pub mod client_cert;
pub mod debug;
pub mod healthz;
pub mod http;
pub mod http_metrics;
pub mod kubelet;
pub mod logfiles;
pub mod logs;
pub mod readonly;
pub mod spdy;
pub mod streams;
pub mod tls;
pub mod tls_reload;

use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::Instant;

pub use http::Limits;

use crate::health::HealthChecks;
use crate::loops::{lock, Loops, SpawnError};

/// Errors of the servers' start-up.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A port could not be bound.
    #[error("cannot listen on {addr} for the {server} server")]
    Bind {
        /// Which server (`healthz`, `read-only`).
        server: &'static str,
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Binds a listening socket for one server.
pub fn bind(server: &'static str, addr: SocketAddr) -> Result<TcpListener, ServerError> {
    TcpListener::bind(addr).map_err(|source| ServerError::Bind {
        server,
        addr,
        source,
    })
}

/// The servers to wake at shutdown.
#[derive(Clone, Debug, Default)]
pub struct Unblockers(Arc<Mutex<Vec<http::Waker>>>);

impl Unblockers {
    /// Wakes every server's poller, so it sees shutdown and returns.
    pub fn unblock_all(&self) {
        for w in lock(&self.0).iter() {
            w.wake();
        }
    }
}

/// A request as the handlers see it: method, path segments, query and headers.
#[derive(Debug, PartialEq, Eq)]
pub struct Req {
    /// `GET`, `POST`, …
    pub method: String,
    /// The path split on `/`, without empty segments.
    pub segments: Vec<String>,
    /// The path as sent, still percent-encoded (`/logs/a%20b/`): for handlers that
    /// care about a trailing slash or decode the path themselves.
    pub raw_path: String,
    /// The raw query string (without `?`).
    pub query: String,
    /// The request headers, in order.
    pub headers: Vec<(String, String)>,
    /// The client's address.
    pub peer: Option<SocketAddr>,
    /// The client certificate chain the TLS handshake took, verified against the
    /// client CA when the request was read; `Absent` without TLS or without a
    /// certificate. Set by the transport only, never from anything in the request.
    pub client_cert: auth::x509::ClientCert,
}

impl Req {
    /// Parses a request line's method and URL.
    pub fn new(method: &str, url: &str) -> Req {
        let (path, query) = url.split_once('?').unwrap_or((url, ""));
        Req {
            method: method.to_string(),
            segments: path
                .split('/')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
            raw_path: path.to_string(),
            query: query.to_string(),
            headers: Vec::new(),
            peer: None,
            client_cert: auth::x509::ClientCert::Absent,
        }
    }

    /// The request of a parsed head.
    pub fn from_head(head: &http::Head, peer: Option<SocketAddr>) -> Req {
        Req {
            headers: head.headers.clone(),
            peer,
            ..Req::new(&head.method, &head.target)
        }
    }

    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The path segments as `&str`s, for matching.
    pub fn path(&self) -> Vec<&str> {
        self.segments.iter().map(String::as_str).collect()
    }

    /// True if the query has `key` (with or without a value).
    pub fn has_query(&self, key: &str) -> bool {
        self.query
            .split('&')
            .any(|kv| kv == key || kv.starts_with(&format!("{key}=")))
    }
}

/// A handler's answer: a whole body, or (with [`Reply::takeover`]) the connection
/// itself, for an answer that streams (logs followed, exec, attach, port-forward).
#[derive(Debug)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Content type.
    pub content_type: &'static str,
    /// Body.
    pub body: Vec<u8>,
    /// An `Allow` header, for 405 answers.
    pub allow: Option<&'static str>,
    /// Other headers (`Location`, `Last-Modified` …).
    pub headers: Vec<(&'static str, String)>,
    /// Set: nothing above is sent; the transport hands the connection to this on a
    /// stream thread of its own ([`http::Hijacked`]).
    pub takeover: Option<http::Takeover>,
}

impl Reply {
    /// A plain-text answer.
    pub fn text(status: u16, body: impl Into<String>) -> Reply {
        Reply {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into().into_bytes(),
            allow: None,
            headers: Vec::new(),
            takeover: None,
        }
    }

    /// A JSON answer.
    pub fn json(status: u16, body: Vec<u8>) -> Reply {
        Reply {
            status,
            content_type: "application/json",
            body,
            allow: None,
            headers: Vec::new(),
            takeover: None,
        }
    }

    /// An answer that takes the connection over: `f` runs on a stream thread of its
    /// own (not one of the port's workers) with the connection, writes the status line
    /// and headers itself ([`http::Hijacked::write_head`]) and whatever follows; the
    /// connection is closed when `f` returns. When the port's streams are all in use,
    /// the client gets 503 instead.
    pub fn takeover(f: impl FnOnce(http::Hijacked) + Send + 'static) -> Reply {
        Reply {
            takeover: Some(http::Takeover(Box::new(f))),
            ..Reply::text(200, "")
        }
    }

    /// This answer with one more header.
    pub fn with_header(mut self, name: &'static str, value: impl Into<String>) -> Reply {
        self.headers.push((name, value.into()));
        self
    }

    /// The first value of header `name` among [`Reply::headers`] (exact name).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// 404, as Go's mux words it.
    pub fn not_found() -> Reply {
        Reply::text(404, "404 page not found\n")
    }

    /// 405 with the allowed methods.
    pub fn method_not_allowed(allow: &'static str) -> Reply {
        Reply {
            allow: Some(allow),
            ..Reply::text(405, "Method Not Allowed\n")
        }
    }
}

/// Serves one port until shutdown: a poller thread called `name` and a fixed pool of
/// workers, bounded by `limits` ([`http`]).
pub fn serve<H>(
    loops: &Loops,
    name: &str,
    listener: TcpListener,
    limits: Limits,
    unblockers: &Unblockers,
    handler: H,
) -> Result<(), SpawnError>
where
    H: Fn(&Req) -> Reply + Send + Sync + 'static,
{
    let waker = http::serve(loops, name, listener, limits, handler)?;
    lock(&unblockers.0).push(waker);
    Ok(())
}

/// [`serve`] over TLS (the kubelet port).
pub fn serve_tls<H>(
    loops: &Loops,
    name: &str,
    listener: TcpListener,
    limits: Limits,
    tls: tls::TlsServer,
    unblockers: &Unblockers,
    handler: H,
) -> Result<(), SpawnError>
where
    H: Fn(&Req) -> Reply + Send + Sync + 'static,
{
    let waker = http::serve_tls(loops, name, listener, limits, tls, handler)?;
    lock(&unblockers.0).push(waker);
    Ok(())
}

/// `/healthz` and `/healthz/<check>`, shared by the healthz and read-only ports.
/// Upstream's format: `ok`, or one `[+]name ok` / `[-]name failed: reason` line per check
/// and `healthz check failed`; `?verbose` lists every check (and loop warnings) even
/// when all pass. Unlike upstream, failing reasons are shown, not withheld.
pub fn healthz(checks: &HealthChecks, req: &Req, sub: Option<&str>) -> Reply {
    let now = Instant::now();
    if req.method != "GET" && req.method != "HEAD" {
        return Reply::method_not_allowed("GET, HEAD");
    }
    if let Some(name) = sub {
        return match checks.check(name, now) {
            None => Reply::not_found(),
            Some(Ok(())) => Reply::text(200, "ok"),
            Some(Err(e)) => Reply::text(500, format!("internal server error: {e}\n")),
        };
    }
    let results = checks.all(now);
    let failed = results.iter().any(|(_, r)| r.is_err());
    let verbose = req.has_query("verbose");
    if !failed && !verbose {
        return Reply::text(200, "ok");
    }
    let mut body = String::new();
    for (name, r) in &results {
        match r {
            Ok(()) => body.push_str(&format!("[+]{name} ok\n")),
            Err(e) => body.push_str(&format!("[-]{name} failed: {e}\n")),
        }
    }
    if verbose {
        for (name, e) in checks.warnings() {
            body.push_str(&format!("warning: {name}: {e}\n"));
        }
    }
    if failed {
        body.push_str("healthz check failed\n");
        Reply::text(500, body)
    } else {
        body.push_str("healthz check passed\n");
        Reply::text(200, body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_parsing() {
        let r = Req::new("GET", "/healthz/pleg?verbose");
        assert_eq!(r.path(), ["healthz", "pleg"]);
        assert!(r.has_query("verbose"));
        assert!(!r.has_query("verb"));
        assert_eq!(Req::new("GET", "//pods/").path(), ["pods"]);
    }
}
