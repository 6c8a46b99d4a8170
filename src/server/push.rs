//! The server pod source's endpoints on the kubelet port (never the read-only one),
//! after [`super::auth::filter`] let the request in: writes on `/pods` authorize as
//! `nodes/proxy` only (pushing a pod is running code on the node, as `/run` and
//! `/exec` are), with the HTTP method's verb.
//!
//! - `PUT /pods`: the body (a Pod, a PodList, or several YAML/JSON documents) is the
//!   whole pushed set; 200 with the set as it runs (a `PodList`).
//! - `POST /pods`: one pod, added or replacing the pushed pod of its namespace and
//!   name; 201 (new) or 200, with the pod as it runs.
//! - `DELETE /pods/{namespace}/{name}`: the pushed pod of that name (as it runs,
//!   `<name>-<node>`, or as pushed); 200 with it, 404 if there is none.
//! - `GET /pods?source=server`: the pushed set as it runs (`GET /pods` is every pod, as
//!   before).
//!
//! Bodies: a `Content-Length` of at most 3 MiB (a manifest's bound), else 413 at once,
//! before a byte of the body is read (a chunked body: 411). The body is read on the
//! connection's stream thread within [`BODY_TIMEOUT`] (the transport never reads
//! bodies), after a `100 Continue` if the client waits for one, then handed to
//! [`ServerSource`], which decodes and validates it as every source's pods are. A bad
//! document refuses the whole request (400 with upstream's field paths) and the set
//! stays as it was. Errors are `metav1.Status` JSON, as an API server's; their codes
//! come from [`status_of`]. With the source off (the default) the writes and
//! `?source=server` answer 404.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::debug::{read_body, write_whole};
use super::logs::{percent_decode, query_pairs};
use super::readonly::encode_pod_list;
use crate::podconfig::manifest::MAX_MANIFEST_BYTES;
use crate::podconfig::server::{ServerSource, ServerSourceError};
use base::loops::error_chain;
use wire::server::{Reply, Req};

/// How long a client has to send a push's body (3 MiB at most).
pub(crate) const BODY_TIMEOUT: Duration = Duration::from_secs(60);

/// Whether a `GET /pods` asks for the pushed set (`?source=…`): it is answered here.
pub(crate) fn asks_for_source(req: &Req) -> bool {
    query_pairs(&req.query).iter().any(|(k, _)| k == "source")
}

/// `/pods…` other than a plain `GET /pods`; `rest` are the raw segments after `pods`.
pub(crate) fn handle(source: Option<&Arc<ServerSource>>, req: &Req, rest: &[&str]) -> Reply {
    let method = req.method.as_str();
    let Some(source) = source else {
        return match (method, rest) {
            ("GET", []) => failure(
                404,
                "the server pod source is not enabled (--enable-server-source)",
            ),
            ("PUT" | "POST", []) | ("DELETE", [_, _]) => failure(
                404,
                "pods cannot be pushed here: the server pod source is not enabled \
                 (--enable-server-source)",
            ),
            (_, []) => Reply::method_not_allowed("GET"),
            _ => Reply::not_found(),
        };
    };
    match (method, rest) {
        ("GET", []) => {
            let wanted = query_pairs(&req.query)
                .into_iter()
                .find(|(k, _)| k == "source")
                .map(|(_, v)| v);
            match wanted.as_deref() {
                Some("server") => Reply::json(200, list(&source.pods())),
                other => failure(
                    400,
                    &format!(
                        "source {:?} is not listed here: GET /pods?source=server lists the \
                         pushed pods, GET /pods every pod",
                        other.unwrap_or_default()
                    ),
                ),
            }
        }
        ("PUT", []) => with_body(req, source, |source, body| {
            source.replace(&body).map(|pods| (200, list(&pods)))
        }),
        ("POST", []) => with_body(req, source, |source, body| {
            source.add(&body).map(|added| {
                let code = if added.created { 201 } else { 200 };
                (code, serde_json::to_vec(&*added.pod).unwrap_or_default())
            })
        }),
        (_, []) => Reply::method_not_allowed("GET, POST, PUT"),
        ("DELETE", [namespace, name]) => {
            let (Some(namespace), Some(name)) = (percent_decode(namespace), percent_decode(name))
            else {
                return failure(400, "the namespace or name is not percent-encoded text");
            };
            match source.remove(&namespace, &name) {
                Ok(pod) => {
                    log::info!("srv-kubelet: pushed pod {namespace}/{name} deleted");
                    Reply::json(200, serde_json::to_vec(&*pod).unwrap_or_default())
                }
                Err(e) => refused(&e),
            }
        }
        (_, [_, _]) => Reply::method_not_allowed("DELETE"),
        _ => Reply::not_found(),
    }
}

/// Reads the request's body (bounded, see the module docs) on the stream thread, then
/// answers with what `apply` makes of it.
fn with_body(
    req: &Req,
    source: &Arc<ServerSource>,
    apply: impl FnOnce(&ServerSource, Vec<u8>) -> Result<(u16, Vec<u8>), ServerSourceError>
        + Send
        + 'static,
) -> Reply {
    let chunked = req
        .header("transfer-encoding")
        .is_some_and(|v| !v.eq_ignore_ascii_case("identity"));
    if chunked {
        return failure(
            411,
            "a pushed body needs a Content-Length; chunked bodies are not read",
        );
    }
    let length = match req.header("content-length").map(str::trim) {
        None => return failure(411, "a pushed body needs a Content-Length"),
        Some(v) => match v.parse::<u64>() {
            Ok(n) => n,
            Err(_) => return failure(400, &format!("bad Content-Length {v:?}")),
        },
    };
    if length > MAX_MANIFEST_BYTES {
        // Answered before the body is read; the transport closes the connection.
        return failure(
            413,
            &format!(
                "the body is {length} bytes, more than the {} MiB a manifest may be",
                MAX_MANIFEST_BYTES >> 20
            ),
        );
    }
    let Ok(length) = usize::try_from(length) else {
        return failure(413, "the body is too large");
    };
    let expect_continue = req
        .header("expect")
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"));
    let what = format!("{} /{}", req.method, req.segments.join("/"));
    let source = source.clone();
    Reply::takeover(move |mut conn| {
        let read = (|| {
            if expect_continue && length > 0 {
                conn.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
            }
            read_body(&mut conn, length, BODY_TIMEOUT)
        })();
        let (status, body) = match read {
            Err(e) => {
                let msg = format!("error reading the request body: {e}");
                (400, status_json(400, &msg))
            }
            Ok(body) => match apply(&source, body) {
                Ok(done) => done,
                Err(e) => {
                    log::info!("srv-kubelet: {what} refused: {}", error_chain(&e));
                    let code = status_of(&e);
                    (code, status_json(code, &error_chain(&e)))
                }
            },
        };
        write_whole(conn, status, "application/json", &body);
    })
}

/// The status code of a refused change: the one place they are chosen.
pub(crate) fn status_of(e: &ServerSourceError) -> u16 {
    match e {
        ServerSourceError::Manifest(_)
        | ServerSourceError::Duplicate { .. }
        | ServerSourceError::DuplicateUid { .. }
        | ServerSourceError::NotOne(_) => 400,
        ServerSourceError::NotFound { .. } => 404,
        ServerSourceError::TooLarge(_) => 413,
        ServerSourceError::Busy | ServerSourceError::NotTaken(_) => 503,
        ServerSourceError::Encode(_)
        | ServerSourceError::Store { .. }
        | ServerSourceError::Read { .. } => 500,
    }
}

fn refused(e: &ServerSourceError) -> Reply {
    failure(status_of(e), &error_chain(e))
}

/// A `metav1.Status` failure answer.
fn failure(code: u16, message: &str) -> Reply {
    Reply::json(code, status_json(code, message))
}

/// A `metav1.Status` of a failure, as an API server writes it.
fn status_json(code: u16, message: &str) -> Vec<u8> {
    let reason = match code {
        400 => "BadRequest",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        411 => "LengthRequired",
        413 => "RequestEntityTooLarge",
        503 => "ServiceUnavailable",
        _ => "InternalError",
    };
    let status = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    });
    serde_json::to_vec(&status).unwrap_or_default()
}

/// A `v1` `PodList` of `pods`.
fn list(pods: &[Arc<Pod>]) -> Vec<u8> {
    let items: Vec<&Pod> = pods.iter().map(|p| &**p).collect();
    encode_pod_list(&items)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::podconfig::server::ServerSource;
    use base::testutil::TempDir;

    fn body_of(r: &Reply) -> serde_json::Value {
        serde_json::from_slice(&r.body).expect("JSON")
    }

    #[test]
    fn without_the_source_writes_are_404_and_other_methods_keep_their_405() {
        for (method, path, rest, want) in [
            ("PUT", "/pods", &[][..], 404),
            ("POST", "/pods", &[][..], 404),
            ("DELETE", "/pods/default/web", &["default", "web"][..], 404),
            ("GET", "/pods?source=server", &[][..], 404),
            ("PATCH", "/pods", &[][..], 405),
            ("GET", "/pods/x", &["x"][..], 404),
        ] {
            let r = handle(None, &Req::new(method, path), rest);
            assert_eq!(r.status, want, "{method} {path}");
        }
    }

    #[test]
    fn bodies_are_bounded_before_they_are_read() {
        let dir = TempDir::new("push-bounds");
        let (tx, _rx) = crossbeam_channel::bounded(4);
        let source = ServerSource::open(&dir.0, "n", tx);
        let mut req = Req::new("PUT", "/pods");
        req.headers
            .push(("Content-Length".into(), (4u64 << 20).to_string()));
        let r = handle(Some(&source), &req, &[]);
        assert_eq!(r.status, 413);
        assert!(r.takeover.is_none(), "answered without reading the body");
        assert_eq!(body_of(&r)["reason"], "RequestEntityTooLarge");
        let mut req = Req::new("POST", "/pods");
        req.headers
            .push(("Transfer-Encoding".into(), "chunked".into()));
        assert_eq!(handle(Some(&source), &req, &[]).status, 411);
        assert_eq!(
            handle(Some(&source), &Req::new("POST", "/pods"), &[]).status,
            411
        );
        let mut req = Req::new("PUT", "/pods");
        req.headers.push(("Content-Length".into(), "12".into()));
        assert!(handle(Some(&source), &req, &[]).takeover.is_some());
        // Other methods and paths.
        assert_eq!(
            handle(Some(&source), &Req::new("PATCH", "/pods"), &[]).status,
            405
        );
        assert_eq!(
            handle(Some(&source), &Req::new("GET", "/pods/a/b"), &["a", "b"]).status,
            405
        );
        let r = handle(Some(&source), &Req::new("GET", "/pods?source=file"), &[]);
        assert_eq!(r.status, 400);
        let r = handle(Some(&source), &Req::new("GET", "/pods?source=server"), &[]);
        assert_eq!(
            (r.status, body_of(&r)["kind"].clone()),
            (200, "PodList".into())
        );
        let r = handle(
            Some(&source),
            &Req::new("DELETE", "/pods/default/web"),
            &["default", "web"],
        );
        assert_eq!(r.status, 404);
        assert_eq!(body_of(&r)["message"], "no pushed pod default/web");
    }
}
