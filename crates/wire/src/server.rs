//! A port as its handlers see it: [`Req`] and [`Reply`], binding a listener
//! ([`bind`]), and serving it ([`serve`], [`serve_tls`]) on the bounded transport
//! ([`crate::server::http`]), the only code that knows the wire. Each port is served by its
//! own named poller thread and a fixed pool of workers; at shutdown
//! [`Unblockers::unblock_all`] wakes every poller.

use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};

use base::loops::{lock, Loops, SpawnError};

pub mod http;

use self::http::Limits;
use crate::tls;
use crate::x509::ClientCert;

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
    pub client_cert: ClientCert,
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
            client_cert: ClientCert::Absent,
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
