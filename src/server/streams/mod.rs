//! Exec, attach and port-forward on the kubelet port (upstream's `getExec`,
//! `getAttach`, `getPortForward` in `pkg/kubelet/server/server.go` and the CRI
//! streaming server they lead to, `pkg/kubelet/cri/streaming/{remotecommand,
//! portforward}`).
//!
//! A request is checked on the port's worker: its options, the pod (among the pods
//! this kubelet runs), the container (running, from the runtime); a refusal is an
//! ordinary HTTP answer with upstream's status and text. Then the connection is taken
//! over ([`Reply::takeover`]) and ONE stream thread (`stream-N`) runs the whole
//! session: the protocol upgrade (WebSocket here, SPDY/3.1 in [`spdy`]), the
//! process or the pod sockets, and the client, all in one `poll(2)` loop, both ways
//! non-blocking, each direction's buffer bounded (a side is not read while the other
//! side's outgoing buffer is over [`HIGH_WATER`]). Nothing blocks longer than a
//! second without looking at shutdown, and the session ends within about a second of
//! its client going away.
//!
//! The parts: [`wire`] (the client connection with its bounded outgoing buffer),
//! [`websocket`] (the upgrade and the channel protocols), [`remotecommand`] (exec and
//! attach sessions), [`portforward`] (port-forward sessions), [`netns`] (dialing a
//! port inside the pod's network namespace).

pub mod httpstream;
pub mod netns;
pub mod portforward;
pub mod remotecommand;
pub mod websocket;
pub mod wire;

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use super::readonly::PodsView;
use super::{Reply, Req};
use crate::container::labels;
use crate::loops::Loops;
use crate::runtime::{ContainerState, Runtime, StreamOptions};

/// A side is not read while the other side's outgoing buffer holds more than this:
/// the bound on what a session keeps per direction.
pub const HIGH_WATER: usize = 1024 * 1024;

/// The most client bytes a session takes in one round of its loop: what is read
/// beyond [`HIGH_WATER`] before the session stops reading is at most this (plus one
/// message).
pub const READ_BUDGET: usize = 256 * 1024;

/// Ports one WebSocket port-forward may name: each takes two channel numbers of one
/// byte.
pub const MAX_PORTS: usize = 127;

/// How long one `poll(2)` of a session waits at most, so shutdown is seen promptly.
pub const POLL_TICK: Duration = Duration::from_secs(1);

/// A session with no traffic either way for this long is closed (upstream's
/// `streamingConnectionIdleTimeout` default).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(4 * 3600);

/// The longest a client may take to open its streams after the upgrade (upstream's
/// `DefaultStreamCreationTimeout`).
pub const STREAM_CREATION_TIMEOUT: Duration = Duration::from_secs(30);

/// What the streaming handlers need: the pods, the runtime, and the loop helper for
/// the port-forward dial threads.
#[derive(Debug, Clone)]
pub struct StreamServer {
    /// The pods this kubelet runs.
    pub pods: Arc<PodsView>,
    /// The container runtime.
    pub runtime: Arc<dyn Runtime>,
    /// Spawns the short-lived netns dial threads.
    pub loops: Loops,
    /// This node's name: only containers with its `io.rkubelet.node` label are its
    /// own (several kubelets may share one Docker engine).
    pub node_name: String,
}

/// Which container-side session a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    /// `/exec`: run a command.
    Exec,
    /// `/attach`: the main process's streams.
    Attach,
}

/// The pod a streaming request names: namespace, name and (optional) UID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRef<'a> {
    /// Namespace.
    pub namespace: &'a str,
    /// Name.
    pub name: &'a str,
    /// UID from the `/{uid}/` form of the path.
    pub uid: Option<&'a str>,
}

/// `/exec/…` and `/attach/…` (GET and POST).
pub fn remote_command(
    s: &StreamServer,
    req: &Req,
    verb: Verb,
    pod: PodRef<'_>,
    container: &str,
) -> Reply {
    // The pod first (upstream checks the options first): an unknown pod is unknown
    // whatever the options say.
    let Some(found) = find_pod(&s.pods, &pod) else {
        return Reply::text(404, "pod does not exist");
    };
    let opts = match parse_options(&req.query) {
        Ok(opts) => opts,
        Err(e) => return Reply::text(400, e),
    };
    let uid = found.metadata.uid.clone().unwrap_or_default();
    if pod.uid.is_some_and(|u| u != uid) {
        return runtime_not_found(container);
    }
    let id = match find_container(s, &uid, container) {
        Ok(Some(id)) => id,
        Ok(None) => return runtime_not_found(container),
        Err(e) => return Reply::text(500, e.to_string()),
    };
    let cmd = query_values(&req.query, "command");
    if verb == Verb::Exec && cmd.is_empty() {
        // Docker refuses an empty command; say so before upgrading.
        return Reply::text(400, "you must specify a command to run");
    }
    let target = remotecommand::Target {
        verb,
        container_id: id,
        cmd,
        opts,
    };
    if websocket::is_websocket_request(req) {
        return websocket_remote_command(s, req, target);
    }
    let protocol = match httpstream::check_upgrade(req, &httpstream::REMOTE_COMMAND_PROTOCOLS) {
        Ok(p) => p,
        Err(reply) => return reply,
    };
    let runtime = s.runtime.clone();
    Reply::takeover(move |conn| {
        let mut wire = wire::Wire::new(conn);
        match httpstream::accept(&mut wire, protocol) {
            Ok(()) => httpstream::serve_remote_command(wire, protocol, runtime.as_ref(), &target),
            Err(e) => log::debug!("spdy upgrade: the client went away: {e}"),
        }
    })
}

/// `/portForward/…` (GET and POST).
pub fn port_forward(s: &StreamServer, req: &Req, pod: PodRef<'_>) -> Reply {
    let ws = websocket::is_websocket_request(req);
    let tunnel = ws && websocket::wants_spdy_tunnel(req);
    // Upstream reads ports from the query only for WebSocket (SPDY names them per
    // stream, and the SPDY tunnel too).
    let ports = if ws && !tunnel {
        match parse_ports(&req.query) {
            Ok(p) => p,
            Err(e) => return Reply::text(400, e),
        }
    } else {
        Vec::new()
    };
    let Some(found) = find_pod(&s.pods, &pod) else {
        return Reply::text(404, "pod does not exist");
    };
    let uid = found.metadata.uid.clone().unwrap_or_default();
    if pod.uid.is_some_and(|u| u != uid) {
        return Reply::text(404, "pod not found");
    }
    let sandbox_pid = match sandbox_pid(s, &uid) {
        Ok(Some(pid)) => pid,
        Ok(None) => {
            return Reply::text(
                500,
                format!("failed to find sandbox for pod {:?}", pod.name),
            )
        }
        Err(e) => return Reply::text(500, e.to_string()),
    };
    let target = portforward::Target {
        pod: format!("{}_{}", pod.name, pod.namespace),
        uid,
        sandbox_pid,
        ports,
    };
    if ws {
        return websocket_port_forward(s, req, target, tunnel);
    }
    let protocol = match httpstream::check_upgrade(req, &[httpstream::PORT_FORWARD_PROTOCOL]) {
        Ok(p) => p,
        Err(reply) => return reply,
    };
    let loops = s.loops.clone();
    Reply::takeover(move |conn| {
        let mut wire = wire::Wire::new(conn);
        match httpstream::accept(&mut wire, protocol) {
            Ok(()) => portforward::run_spdy(wire, &target, &loops),
            Err(e) => log::debug!("spdy upgrade: the client went away: {e}"),
        }
    })
}

/// `/exec` and `/attach` over a WebSocket: checks the upgrade on the worker, then
/// takes the connection over for the session.
fn websocket_remote_command(s: &StreamServer, req: &Req, target: remotecommand::Target) -> Reply {
    let names: Vec<&'static str> = websocket::ChannelProtocol::REMOTE_COMMAND
        .iter()
        .map(|p| p.name())
        .collect();
    let up = match websocket::check_upgrade(req, &names, true) {
        Ok(up) => up,
        Err(reply) => return reply,
    };
    let protocol = websocket::ChannelProtocol::REMOTE_COMMAND
        .into_iter()
        .find(|p| p.name() == up.protocol)
        .unwrap_or(websocket::ChannelProtocol::V1);
    let runtime = s.runtime.clone();
    Reply::takeover(move |conn| {
        serve(conn, &up, |ws| {
            remotecommand::run_websocket(ws, protocol, runtime.as_ref(), &target);
        })
    })
}

/// `/portForward` over a WebSocket: the channel protocol, or the SPDY tunnel.
fn websocket_port_forward(
    s: &StreamServer,
    req: &Req,
    target: portforward::Target,
    tunnel: bool,
) -> Reply {
    if tunnel {
        // SPDY inside binary messages: the tunnel upstream's API server (and, with
        // ExtendWebSocketsToKubelet, its kubelet) unwraps; served here directly.
        let up = match websocket::check_upgrade(req, &[websocket::SPDY_TUNNEL_PROTOCOL], false) {
            Ok(up) => up,
            Err(reply) => return reply,
        };
        let loops = s.loops.clone();
        return Reply::takeover(move |conn| {
            serve(conn, &up, |ws| portforward::run_spdy(ws, &target, &loops))
        });
    }
    let names: Vec<&'static str> = websocket::ChannelProtocol::PORT_FORWARD
        .iter()
        .map(|p| p.name())
        .collect();
    let up = match websocket::check_upgrade(req, &names, true) {
        Ok(up) => up,
        Err(reply) => return reply,
    };
    let protocol = if up.protocol == websocket::ChannelProtocol::V4Base64.name() {
        websocket::ChannelProtocol::V4Base64
    } else {
        websocket::ChannelProtocol::V4
    };
    let loops = s.loops.clone();
    Reply::takeover(move |conn| {
        serve(conn, &up, |ws| {
            portforward::run_websocket(ws, protocol, &target, &loops);
        })
    })
}

/// Answers the upgrade on a taken-over connection and runs `session` on it.
fn serve(
    conn: impl wire::ClientIo + 'static,
    up: &websocket::Upgrade,
    session: impl FnOnce(websocket::WsConn),
) {
    match websocket::WsConn::accept(wire::Wire::new(conn), up) {
        Ok(ws) => session(ws),
        Err(e) => log::debug!("websocket upgrade: the client went away: {e}"),
    }
}

/// Upstream's answer when the runtime has no such running container
/// (`streaming.WriteError` of `container not found`).
fn runtime_not_found(container: &str) -> Reply {
    Reply::text(500, format!("container not found ({container:?})"))
}

/// The pod named `r` among the pods this kubelet runs.
fn find_pod(pods: &PodsView, r: &PodRef<'_>) -> Option<Arc<Pod>> {
    pods.pods()
        .iter()
        .find(|p| {
            p.metadata.namespace.as_deref().unwrap_or("default") == r.namespace
                && p.metadata.name.as_deref() == Some(r.name)
        })
        .cloned()
}

/// The running container `name` of pod `uid` (the newest if several run).
fn find_container(
    s: &StreamServer,
    uid: &str,
    name: &str,
) -> Result<Option<String>, crate::runtime::RuntimeError> {
    let filter = [
        format!("{}={}", labels::MANAGED_BY_NODE, s.node_name),
        format!("{}={uid}", labels::POD_UID),
        format!("{}={name}", labels::CONTAINER_NAME),
        format!("{}={}", labels::DOCKER_TYPE, labels::TYPE_CONTAINER),
    ];
    let mut running: Vec<_> = s
        .runtime
        .list_containers(&filter)?
        .into_iter()
        .filter(|c| c.state == ContainerState::Running)
        .collect();
    crate::sort::sort_by_key(&mut running, |c| c.created);
    Ok(running.pop().map(|c| c.id))
}

/// The host PID of the pod's running sandbox, whose network namespace is the pod's.
fn sandbox_pid(s: &StreamServer, uid: &str) -> Result<Option<u32>, crate::runtime::RuntimeError> {
    let runtime = s.runtime.as_ref();
    let filter = [
        format!("{}={}", labels::MANAGED_BY_NODE, s.node_name),
        format!("{}={uid}", labels::POD_UID),
        format!("{}={}", labels::DOCKER_TYPE, labels::TYPE_SANDBOX),
    ];
    let mut running: Vec<_> = runtime
        .list_containers(&filter)?
        .into_iter()
        .filter(|c| c.state == ContainerState::Running)
        .collect();
    crate::sort::sort_by_key(&mut running, |c| c.created);
    let Some(sandbox) = running.pop() else {
        return Ok(None);
    };
    let details = runtime.inspect_container(&sandbox.id)?;
    Ok((details.pid != 0).then_some(details.pid))
}

/// Every value of `key` in a raw query, decoded as Go's `url.ParseQuery` does (`+` is
/// a space, `%XX` a byte).
pub fn query_values(query: &str, key: &str) -> Vec<String> {
    query
        .split('&')
        .filter(|kv| !kv.is_empty())
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (unescape(k) == key).then(|| unescape(v))
        })
        .collect()
}

fn unescape(s: &str) -> String {
    let plus = s.replace('+', " ");
    percent_encoding::percent_decode_str(&plus)
        .decode_utf8_lossy()
        .into_owned()
}

/// The first value of `key` ("" if absent), as Go's `FormValue`.
fn first_value(query: &str, key: &str) -> String {
    query_values(query, key)
        .into_iter()
        .next()
        .unwrap_or_default()
}

/// The stream options of an exec or attach request (upstream's `NewOptions`):
/// `stdin`, `stdout`, `stderr`, `tty` are on when `1`; stderr is dropped with a tty;
/// at least one stream is needed.
pub fn parse_options(query: &str) -> Result<StreamOptions, String> {
    let on = |k: &str| first_value(query, k) == "1";
    let tty = on("tty");
    let opts = StreamOptions {
        stdin: on("stdin"),
        stdout: on("stdout"),
        stderr: on("stderr") && !tty,
        tty,
    };
    if !opts.stdin && !opts.stdout && !opts.stderr {
        return Err("you must specify at least 1 of stdin, stdout, stderr".into());
    }
    Ok(opts)
}

/// The ports of a WebSocket port-forward (upstream's `NewV4Options`): `port=` once or
/// more, each a comma-separated list of 1–65535.
pub fn parse_ports(query: &str) -> Result<Vec<u16>, String> {
    let values = query_values(query, "port");
    if values.is_empty() {
        return Err("query parameter \"port\" is required".into());
    }
    let mut ports = Vec::new();
    for v in values {
        if v.is_empty() {
            return Err("query parameter \"port\" cannot be empty".into());
        }
        for p in v.split(',') {
            let port: u16 = p
                .parse()
                .map_err(|e| format!("unable to parse {v:?} as a port: {e}"))?;
            if port < 1 {
                return Err(format!("port {v:?} must be > 0"));
            }
            ports.push(port);
        }
    }
    if ports.len() > MAX_PORTS {
        return Err(format!(
            "at most {MAX_PORTS} ports may be forwarded at once"
        ));
    }
    Ok(ports)
}

/// How an exec ended, for the error stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Exit code 0 (or an attach that ended).
    Success,
    /// The command (second field) exited with this non-zero code.
    ExitCode(i64, Vec<String>),
    /// The runtime failed (`error executing command in container: …`).
    Internal(String),
}

/// `metav1.Status` as Go's `json.Marshal` writes it: fields in the struct's order,
/// `metadata` always (an empty struct is not omitted), empty fields left out.
#[derive(serde::Serialize)]
struct Status<'a> {
    metadata: serde_json::Map<String, serde_json::Value>,
    status: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<Details>,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<u16>,
}

#[derive(serde::Serialize)]
struct Details {
    causes: Vec<Cause>,
}

#[derive(serde::Serialize)]
struct Cause {
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'static str>,
    message: String,
}

impl Outcome {
    /// The failure's message (what kubectl prints before v4), "" for a success.
    fn message(&self) -> String {
        match self {
            Outcome::Success => String::new(),
            // Upstream wraps the runtime's exit error (containerd's wording).
            Outcome::ExitCode(code, cmd) => format!(
                "command terminated with non-zero exit code: error executing command \
                 [{}], exit code {code}",
                cmd.join(" ")
            ),
            Outcome::Internal(e) => format!("Internal error occurred: {e}"),
        }
    }

    /// The `metav1.Status` JSON the v4 and v5 protocols send on the error stream
    /// (upstream's `v4WriteStatusFunc`): `Success`, or `Failure` with reason
    /// `NonZeroExitCode` and the code as an `ExitCode` cause, or `InternalError`.
    pub fn status_json(&self) -> Vec<u8> {
        let status = match self {
            Outcome::Success => Status {
                metadata: serde_json::Map::new(),
                status: "Success",
                message: None,
                reason: None,
                details: None,
                code: None,
            },
            Outcome::ExitCode(code, _) => Status {
                metadata: serde_json::Map::new(),
                status: "Failure",
                message: Some(self.message()),
                reason: Some("NonZeroExitCode"),
                details: Some(Details {
                    causes: vec![Cause {
                        reason: Some("ExitCode"),
                        message: code.to_string(),
                    }],
                }),
                code: None,
            },
            Outcome::Internal(e) => Status {
                metadata: serde_json::Map::new(),
                status: "Failure",
                message: Some(self.message()),
                reason: Some("InternalError"),
                details: Some(Details {
                    causes: vec![Cause {
                        reason: None,
                        message: e.clone(),
                    }],
                }),
                code: Some(500),
            },
        };
        serde_json::to_vec(&status).unwrap_or_default()
    }

    /// What the protocols before v4 send on the error stream (upstream's
    /// `v1WriteStatusFunc`): the message of a failure, nothing for a success.
    pub fn status_text(&self) -> Vec<u8> {
        self.message().into_bytes()
    }
}

/// One `poll(2)` over `fds`, at most `timeout`; interrupted calls count as "nothing".
pub fn poll(fds: &mut [libc::pollfd], timeout: Duration) -> io::Result<()> {
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    let n = libc::nfds_t::try_from(fds.len()).unwrap_or(libc::nfds_t::MAX);
    // SAFETY: `fds` is a valid, writable slice of `n` pollfd structs.
    let rc = unsafe { libc::poll(fds.as_mut_ptr(), n, ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(())
}

/// The poll events that say a client is gone even when the session is not reading
/// it (WebSocket and SPDY have no half-close: a client that shut its side left).
pub const HUNG_UP: libc::c_short = libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR;

/// A `pollfd` for `fd` asking for `events`.
pub fn pollfd(fd: RawFd, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_follow_upstreams_new_options() {
        let o = parse_options("command=ls&stdin=1&stdout=1&stderr=1").expect("ok");
        assert_eq!(
            o,
            StreamOptions {
                stdin: true,
                stdout: true,
                stderr: true,
                tty: false
            }
        );
        // A tty drops stderr.
        let o = parse_options("stdout=1&stderr=1&tty=1").expect("ok");
        assert!(o.tty && o.stdout && !o.stderr);
        // Only "1" is on (the API server sends 1, not true).
        assert_eq!(
            parse_options("stdout=true&stdin=0"),
            Err("you must specify at least 1 of stdin, stdout, stderr".to_string())
        );
        assert!(
            parse_options("tty=1&stderr=1").is_err(),
            "stderr alone with a tty"
        );
        // The first value counts, as FormValue's.
        assert!(parse_options("stdout=0&stdout=1").is_err());
    }

    #[test]
    fn commands_are_every_value_decoded() {
        assert_eq!(
            query_values(
                "command=sh&command=-c&command=echo+a%20b%26c&stdout=1",
                "command"
            ),
            ["sh", "-c", "echo a b&c"]
        );
        assert!(query_values("stdout=1", "command").is_empty());
    }

    #[test]
    fn ports_follow_upstreams_v4_options() {
        assert_eq!(
            parse_ports("port=80&port=8080,9090"),
            Ok(vec![80, 8080, 9090])
        );
        assert!(parse_ports("")
            .expect_err("refused")
            .contains("is required"));
        assert!(parse_ports("port=")
            .expect_err("refused")
            .contains("cannot be empty"));
        assert!(parse_ports("port=0")
            .expect_err("refused")
            .contains("must be > 0"));
        assert!(parse_ports("port=70000")
            .expect_err("refused")
            .contains("unable to parse \"70000\""));
        assert!(parse_ports("port=x").is_err());
        let many = (1..=128)
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(",");
        assert!(parse_ports(&format!("port={many}"))
            .expect_err("refused")
            .contains("at most 127"));
    }

    #[test]
    fn status_bodies_are_upstreams_json() {
        assert_eq!(
            String::from_utf8(Outcome::Success.status_json()).expect("utf8"),
            r#"{"metadata":{},"status":"Success"}"#
        );
        let cmd = vec!["sh".to_string(), "-c".to_string(), "exit 42".to_string()];
        assert_eq!(
            String::from_utf8(Outcome::ExitCode(42, cmd.clone()).status_json()).expect("utf8"),
            "{\"metadata\":{},\"status\":\"Failure\",\"message\":\"command terminated with \
             non-zero exit code: error executing command [sh -c exit 42], exit code 42\",\
             \"reason\":\"NonZeroExitCode\",\"details\":{\"causes\":[{\"reason\":\"ExitCode\",\
             \"message\":\"42\"}]}}"
        );
        let v: serde_json::Value =
            serde_json::from_slice(&Outcome::ExitCode(42, cmd).status_json()).expect("json");
        assert_eq!(v["status"], "Failure");
        assert_eq!(v["reason"], "NonZeroExitCode");
        assert_eq!(v["details"]["causes"][0]["reason"], "ExitCode");
        assert_eq!(v["details"]["causes"][0]["message"], "42");
        assert!(v["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("command terminated with non-zero exit code")));
        let v: serde_json::Value =
            serde_json::from_slice(&Outcome::Internal("boom".into()).status_json()).expect("json");
        assert_eq!(v["reason"], "InternalError");
        assert_eq!(v["code"], 500);
        assert_eq!(v["message"], "Internal error occurred: boom");
        assert!(Outcome::Success.status_text().is_empty());
        assert!(
            String::from_utf8_lossy(&Outcome::ExitCode(1, Vec::new()).status_text())
                .contains("exit code 1")
        );
    }
}
