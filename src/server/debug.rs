//! The kubelet port's smaller debugging handlers and the request-path rules of Go's
//! `ServeMux` that upstream's port inherits:
//!
//! - [`mux_redirect`]: a path with `//`, `.` or `..` segments is answered 301 with
//!   the cleaned path (`cleanPath`, on the path as sent, so `%2e%2e` is not a `..`),
//!   and a subtree root asked without its slash (`/logs`) 301 to it (`/logs/`) — both
//!   before authentication, as the mux runs before go-restful's filters;
//! - `--enable-debugging-handlers=false` ([`disabled`]): `/run/`, `/exec/`,
//!   `/attach/`, `/portForward/`, `/containerLogs/`, `/runningpods/`,
//!   `/debug/pprof/` and `/logs/` answer 405 `Debug endpoints are disabled.`
//!   (upstream's `InstallDebuggingDisabledHandlers`; `/configz` and
//!   `/debug/flags/v` are then not served at all);
//! - `POST /run/{ns}/{pod}/{container}` (and `/run/{ns}/{pod}/{uid}/{container}`):
//!   `cmd=` split on spaces, run in the pod's running container by the runtime's
//!   exec, stdout then stderr as the body (upstream's `getRun` and
//!   `RunInContainer`: 404 `pod does not exist`, 500 with the error, a non-zero exit
//!   included as `command '…' exited with N: <stderr>`), on a thread of its own,
//!   bounded by [`RUN_TIMEOUT`] and the runtime's output cap;
//! - `PUT /debug/flags/v`: the body (at most [`MAX_FLAG_BODY`] bytes, read on a
//!   thread of its own within [`BODY_TIMEOUT`]: the transport itself never reads
//!   bodies) is klog's new verbosity; the answers are upstream's
//!   `StringFlagPutHandler` + `GlogSetter` texts.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base::goquote::go_quote;
use rustix::event::{PollFd, PollFlags};

use super::logs::percent_decode;
use super::readonly::PodsView;
use runtime::container::labels;
use runtime::{ContainerState, Runtime};
use wire::server::http::Hijacked;
use wire::server::{Reply, Req};

/// How long `/run` lets a command run (upstream passes no timeout; the runtime's
/// request timeout, 2 min, is its practical bound).
pub(crate) const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// The largest `PUT /debug/flags/v` body read: a verbosity is a few digits.
pub(crate) const MAX_FLAG_BODY: usize = 64;

/// How long the client gets to send that body.
pub(crate) const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// The subtrees upstream registers with a trailing slash when debugging handlers are
/// disabled.
const DISABLED_ROOTS: [&str; 7] = [
    "run",
    "exec",
    "attach",
    "portForward",
    "containerLogs",
    "runningpods",
    "logs",
];

/// Go's `cleanPath`: `path.Clean` of a rooted path, its trailing slash kept.
pub(crate) fn clean_path(p: &str) -> String {
    if p.is_empty() {
        return "/".into();
    }
    let mut parts: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    let mut out = format!("/{}", parts.join("/"));
    if p.ends_with('/') && out != "/" {
        out.push('/');
    }
    out
}

/// Go's `http.Redirect` with 301 (the body a GET gets).
fn redirect(location: &str, query: &str, method: &str) -> Reply {
    let mut loc = location.to_string();
    if !query.is_empty() {
        loc.push('?');
        loc.push_str(query);
    }
    let reply = if method == "GET" || method == "HEAD" {
        let body = format!(
            "<a href=\"{}\">Moved Permanently</a>.\n\n",
            html_escape(&loc)
        );
        Reply {
            content_type: "text/html; charset=utf-8",
            ..Reply::text(301, if method == "GET" { body } else { String::new() })
        }
    } else {
        Reply {
            content_type: "",
            ..Reply::text(301, "")
        }
    };
    reply.with_header("Location", loc)
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&#34;")
        .replace('\'', "&#39;")
}

/// The mux's redirects (see the module docs), if `req` gets one.
pub(crate) fn mux_redirect(req: &Req, debugging_handlers: bool) -> Option<Reply> {
    // CONNECT is not canonicalized; an absolute-form or `*` target is not a path.
    if req.method == "CONNECT" || !req.raw_path.starts_with('/') {
        return None;
    }
    let cleaned = clean_path(&req.raw_path);
    if cleaned != req.raw_path {
        return Some(redirect(&cleaned, &req.query, &req.method));
    }
    let root = req.raw_path.strip_prefix('/')?;
    let subtree = if debugging_handlers {
        root == "logs"
    } else {
        DISABLED_ROOTS.contains(&root) || root == "debug/pprof"
    };
    subtree.then(|| redirect(&format!("/{root}/"), &req.query, &req.method))
}

/// Whether `req` is one of the debugging paths upstream answers 405 when they are
/// disabled.
pub(crate) fn is_disabled_path(req: &Req) -> bool {
    let p = &req.raw_path;
    DISABLED_ROOTS
        .iter()
        .any(|r| p.starts_with(&format!("/{r}/")))
        || p.starts_with("/debug/pprof/")
}

/// The answer of a disabled debugging path (Go's `http.Error`).
pub(crate) fn disabled() -> Reply {
    Reply::text(405, "Debug endpoints are disabled.\n")
}

/// `POST /run/…`: `parts` are the raw segments after `run`.
pub(crate) fn run(pods: &PodsView, runtime: &Arc<dyn Runtime>, req: &Req, parts: &[&str]) -> Reply {
    let (namespace, pod_name, container) = match parts {
        [ns, pod, container] | [ns, pod, _, container] => (*ns, *pod, *container),
        _ => return Reply::not_found(),
    };
    if req.method != "POST" {
        return Reply::method_not_allowed("POST");
    }
    let (Some(namespace), Some(pod_name), Some(container)) = (
        percent_decode(namespace),
        percent_decode(pod_name),
        percent_decode(container),
    ) else {
        return Reply::text(400, "400 Bad Request");
    };
    let pods_now = pods.pods();
    let Some(pod) = pods_now.iter().find(|p| {
        p.metadata.namespace.as_deref() == Some(namespace.as_str())
            && p.metadata.name.as_deref() == Some(pod_name.as_str())
    }) else {
        return Reply::text(404, "pod does not exist");
    };
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    // Legacy: `cmd`, split on single spaces (empty words kept, as strings.Split).
    let cmd: Vec<String> = super::logs::query_pairs(&req.query)
        .into_iter()
        .find(|(k, _)| k == "cmd")
        .map(|(_, v)| v)
        .unwrap_or_default()
        .split(' ')
        .map(str::to_string)
        .collect();
    let runtime = runtime.clone();
    Reply::takeover(move |conn| {
        let result = run_in_container(runtime.as_ref(), &uid, &container, &cmd);
        let (status, ctype, body) = match result {
            Ok(out) => (200, "application/json", out),
            Err(message) => (500, "text/plain; charset=utf-8", message.into_bytes()),
        };
        write_whole(conn, status, ctype, &body);
    })
}

/// Upstream's `RunInContainer`: the pod's running container by name, its command's
/// stdout then stderr; a non-zero exit is an error with the CRI client's wording.
fn run_in_container(
    runtime: &dyn Runtime,
    uid: &str,
    container: &str,
    cmd: &[String],
) -> Result<Vec<u8>, String> {
    let filter = [
        format!("{}={uid}", labels::POD_UID),
        format!("{}={container}", labels::CONTAINER_NAME),
    ];
    let found = runtime
        .list_containers(&filter)
        .map_err(|e| base::loops::error_chain(&e))?;
    let Some(c) = found
        .iter()
        .filter(|c| c.state == ContainerState::Running)
        .max_by_key(|c| c.created)
    else {
        return Err(format!("container not found ({container:?})"));
    };
    let r = runtime
        .exec(&c.id, cmd, RUN_TIMEOUT)
        .map_err(|e| base::loops::error_chain(&e))?;
    if r.exit_code != 0 {
        return Err(format!(
            "command '{}' exited with {}: {}",
            cmd.join(" "),
            r.exit_code,
            String::from_utf8_lossy(&r.stderr)
        ));
    }
    let mut out = r.stdout;
    out.extend_from_slice(&r.stderr);
    Ok(out)
}

/// A whole answer on a taken-over connection, which then closes.
pub(crate) fn write_whole(mut conn: Hijacked, status: u16, content_type: &str, body: &[u8]) {
    let len = body.len().to_string();
    let mut headers = vec![
        ("Content-Type", content_type),
        ("Content-Length", len.as_str()),
        ("Connection", "close"),
    ];
    if status < 400 && content_type == "text/plain" {
        // writePlainText sets it on every answer (the transport adds it to errors).
        headers.push(("X-Content-Type-Options", "nosniff"));
    }
    let _ = conn
        .write_head(status, &headers)
        .and_then(|()| conn.write_all(body));
}

/// `/debug/flags/v`.
pub(crate) fn flags_v(req: &Req) -> Reply {
    if req.method != "PUT" {
        return plain(406, "unsupported http method");
    }
    let chunked = req
        .header("transfer-encoding")
        .is_some_and(|v| !v.eq_ignore_ascii_case("identity"));
    let length = req.header("content-length").map(str::trim);
    let length: Result<usize, String> = match (chunked, length) {
        (true, _) => Err("chunked bodies are not read here".into()),
        (false, None) => Ok(0),
        (false, Some(v)) => v
            .parse::<usize>()
            .map_err(|_| format!("bad Content-Length {v:?}")),
    };
    let length = match length {
        Ok(n) if n > MAX_FLAG_BODY => Err(format!("body larger than {MAX_FLAG_BODY} bytes")),
        other => other,
    };
    let expect_continue = req
        .header("expect")
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"));
    Reply::takeover(move |mut conn| {
        let body = length.and_then(|n| {
            if expect_continue && n > 0 {
                conn.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                    .map_err(|e| e.to_string())?;
            }
            read_body(&mut conn, n, BODY_TIMEOUT).map_err(|e| e.to_string())
        });
        let (status, text) = match body {
            Err(e) => (400, format!("error reading request body: {e}")),
            Ok(body) => match set_verbosity(&String::from_utf8_lossy(&body)) {
                Ok(text) => (200, text),
                Err(text) => (400, text),
            },
        };
        write_whole(conn, status, "text/plain", format!("{text}\n").as_bytes());
    })
}

/// Upstream's `writePlainText`.
fn plain(status: u16, text: &str) -> Reply {
    let reply = Reply {
        content_type: "text/plain",
        ..Reply::text(status, format!("{text}\n"))
    };
    if status < 400 {
        reply.with_header("X-Content-Type-Options", "nosniff")
    } else {
        reply
    }
}

/// Reads exactly `n` body bytes within `timeout`.
pub(crate) fn read_body(conn: &mut Hijacked, n: usize, timeout: Duration) -> io::Result<Vec<u8>> {
    let deadline = Instant::now() + timeout;
    let mut body = vec![0u8; n];
    let mut got = 0;
    while got < n {
        if conn.stop().is_stopped() {
            return Err(io::Error::other("the kubelet is shutting down"));
        }
        match conn.read_nonblocking(&mut body[got..]) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
            Ok(k) => got += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(io::Error::from(io::ErrorKind::TimedOut));
                }
                let mut fd = [PollFd::new(&*conn, PollFlags::IN)];
                let wait = base::time::poll_timeout(left.min(Duration::from_secs(1)));
                let _ = rustix::event::poll(&mut fd, Some(&wait));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(body)
}

/// Upstream's `GlogSetter`: `val` parsed as klog's `Level` (a 32-bit integer, as
/// `strconv.ParseInt(val, 10, 32)`), then the log verbosity set.
pub(crate) fn set_verbosity(val: &str) -> Result<String, String> {
    match parse_level(val) {
        Ok(v) => {
            crate::logging::set_verbosity(i64::from(v));
            log::info!("klog verbosity set to {v} (PUT /debug/flags/v)");
            Ok(format!("successfully set klog.logging.verbosity to {val}"))
        }
        Err(e) => Err(format!("failed set klog.logging.verbosity {val}: {e}")),
    }
}

/// `strconv.ParseInt(s, 10, 32)` with Go's error texts.
fn parse_level(s: &str) -> Result<i32, String> {
    use std::num::IntErrorKind;
    s.parse::<i32>().map_err(|e| {
        let why = match e.kind() {
            IntErrorKind::PosOverflow | IntErrorKind::NegOverflow => "value out of range",
            _ => "invalid syntax",
        };
        format!("strconv.ParseInt: parsing {}: {why}", go_quote(s))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_clean_as_the_mux_does() {
        assert_eq!(clean_path("/a//b/./c/../d/"), "/a/b/d/");
        assert_eq!(clean_path("/logs/../etc/passwd"), "/etc/passwd");
        assert_eq!(clean_path("/logs/%2e%2e/x"), "/logs/%2e%2e/x");
        assert_eq!(clean_path("/.."), "/");
        assert_eq!(clean_path("/pods"), "/pods");
    }

    #[test]
    fn the_mux_redirects_unclean_paths_and_subtree_roots() {
        let r = mux_redirect(&Req::new("GET", "/logs/../etc/passwd?x=1"), true).expect("301");
        assert_eq!(r.status, 301);
        assert_eq!(r.header("Location"), Some("/etc/passwd?x=1"));
        assert_eq!(
            String::from_utf8_lossy(&r.body),
            "<a href=\"/etc/passwd?x=1\">Moved Permanently</a>.\n\n"
        );
        let r = mux_redirect(&Req::new("GET", "/logs"), true).expect("301");
        assert_eq!(r.header("Location"), Some("/logs/"));
        assert!(mux_redirect(&Req::new("GET", "/logs/"), true).is_none());
        assert!(mux_redirect(&Req::new("GET", "/run"), true).is_none());
        let r = mux_redirect(&Req::new("POST", "/run"), false).expect("301");
        assert_eq!((r.status, r.body.len()), (301, 0));
        assert!(mux_redirect(&Req::new("GET", "/pods"), false).is_none());
        assert!(mux_redirect(&Req::new("OPTIONS", "*"), true).is_none());
    }

    #[test]
    fn disabled_paths_are_upstreams_list() {
        for p in [
            "/run/a/b/c",
            "/exec/x",
            "/containerLogs/",
            "/logs/",
            "/debug/pprof/heap",
            "/runningpods/",
        ] {
            assert!(is_disabled_path(&Req::new("GET", p)), "{p}");
        }
        for p in [
            "/pods",
            "/configz",
            "/debug/flags/v",
            "/healthz",
            "/running",
        ] {
            assert!(!is_disabled_path(&Req::new("GET", p)), "{p}");
        }
        let r = disabled();
        assert_eq!(
            (r.status, r.body.as_slice()),
            (405, &b"Debug endpoints are disabled.\n"[..])
        );
    }

    #[test]
    fn verbosity_values_parse_as_klog_levels() {
        assert_eq!(parse_level("4"), Ok(4));
        assert_eq!(parse_level("+2"), Ok(2));
        assert_eq!(parse_level("-1"), Ok(-1));
        assert_eq!(
            parse_level("x"),
            Err("strconv.ParseInt: parsing \"x\": invalid syntax".into())
        );
        assert_eq!(
            parse_level("4\n"),
            Err("strconv.ParseInt: parsing \"4\\n\": invalid syntax".into())
        );
        assert_eq!(
            parse_level("99999999999"),
            Err("strconv.ParseInt: parsing \"99999999999\": value out of range".into())
        );
        assert_eq!(
            parse_level(""),
            Err("strconv.ParseInt: parsing \"\": invalid syntax".into())
        );
        let r = flags_v(&Req::new("GET", "/debug/flags/v"));
        assert_eq!(
            (r.status, r.body.as_slice()),
            (406, &b"unsupported http method\n"[..])
        );
        assert_eq!(r.content_type, "text/plain");
    }
}
