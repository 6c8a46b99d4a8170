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
//! The sessions themselves are the `wire` crate's (`wire::streams`): this module
//! checks a request and hands the connection to them. On a runtime with a streaming
//! server of its own (CRI), the checked request is the runtime's: its `Exec`, `Attach`
//! or `PortForward` answers a URL, and the client is proxied there
//! (`wire::streams::proxy`, upstream's `proxyStream`), after the same authentication,
//! authorization and checks, on the same bounded stream threads.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::readonly::PodsView;
use base::loops::Loops;
use runtime::container::labels;
use runtime::{ContainerState, Runtime, RuntimeError, StreamOptions, StreamRequest};
use wire::server::{Reply, Req};
use wire::streams::Verb;

/// Ports one WebSocket port-forward may name: each takes two channel numbers of one
/// byte.
pub(crate) const MAX_PORTS: usize = 127;

/// What the streaming handlers need: the pods, the runtime, and the loop helper for
/// the port-forward dial threads.
#[derive(Debug, Clone)]
pub(crate) struct StreamServer {
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

/// The pod a streaming request names: namespace, name and (optional) UID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PodRef<'a> {
    /// Namespace.
    pub namespace: &'a str,
    /// Name.
    pub name: &'a str,
    /// UID from the `/{uid}/` form of the path.
    pub uid: Option<&'a str>,
}

/// `/exec/…` and `/attach/…` (GET and POST).
pub(crate) fn remote_command(
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
    let request = match verb {
        Verb::Exec => StreamRequest::Exec {
            container_id: id.clone(),
            cmd: cmd.clone(),
            opts,
        },
        Verb::Attach => StreamRequest::Attach {
            container_id: id.clone(),
            opts,
        },
    };
    match s.runtime.stream_url(&request) {
        Ok(Some(url)) => return proxy_stream(req, &url),
        Ok(None) => {}
        Err(e) => return stream_error(&e),
    }
    let target = wire::streams::remotecommand::Target {
        verb,
        container_id: id,
        cmd,
        opts,
    };
    if wire::streams::websocket::is_websocket_request(req) {
        return websocket_remote_command(s, req, target);
    }
    let protocol = match wire::streams::httpstream::check_upgrade(
        req,
        &wire::streams::httpstream::REMOTE_COMMAND_PROTOCOLS,
    ) {
        Ok(p) => p,
        Err(reply) => return reply,
    };
    let runtime = s.runtime.clone();
    Reply::takeover(move |conn| {
        let mut wire = wire::streams::wire::Wire::new(conn);
        match wire::streams::httpstream::accept(&mut wire, protocol) {
            Ok(()) => wire::streams::httpstream::serve_remote_command(
                wire,
                protocol,
                runtime.as_ref(),
                &target,
            ),
            Err(e) => log::debug!("spdy upgrade: the client went away: {e}"),
        }
    })
}

/// `/portForward/…` (GET and POST).
pub(crate) fn port_forward(s: &StreamServer, req: &Req, pod: PodRef<'_>) -> Reply {
    let ws = wire::streams::websocket::is_websocket_request(req);
    let tunnel = ws && wire::streams::websocket::wants_spdy_tunnel(req);
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
    let no_sandbox = || {
        Reply::text(
            500,
            format!("failed to find sandbox for pod {:?}", pod.name),
        )
    };
    let sandbox = match find_sandbox(s, &uid) {
        Ok(Some(id)) => id,
        Ok(None) => return no_sandbox(),
        Err(e) => return Reply::text(500, e.to_string()),
    };
    let request = StreamRequest::PortForward {
        sandbox_id: sandbox.clone(),
        ports: ports.clone(),
    };
    match s.runtime.stream_url(&request) {
        Ok(Some(url)) if tunnel => return proxy_tunnel(req, &url),
        Ok(Some(url)) => return proxy_stream(req, &url),
        Ok(None) => {}
        Err(e) => return stream_error(&e),
    }
    let sandbox_pid = match s.runtime.inspect_container(&sandbox) {
        Ok(details) if details.pid != 0 => details.pid,
        Ok(_) => return no_sandbox(),
        Err(e) => return Reply::text(500, e.to_string()),
    };
    let target = wire::streams::portforward::Target {
        pod: format!("{}_{}", pod.name, pod.namespace),
        uid,
        sandbox_pid,
        ports,
    };
    if ws {
        return websocket_port_forward(s, req, target, tunnel);
    }
    let protocol = match wire::streams::httpstream::check_upgrade(
        req,
        &[wire::streams::httpstream::PORT_FORWARD_PROTOCOL],
    ) {
        Ok(p) => p,
        Err(reply) => return reply,
    };
    let loops = s.loops.clone();
    Reply::takeover(move |conn| {
        let mut wire = wire::streams::wire::Wire::new(conn);
        match wire::streams::httpstream::accept(&mut wire, protocol) {
            Ok(()) => wire::streams::portforward::run_spdy(wire, &target, &loops),
            Err(e) => log::debug!("spdy upgrade: the client went away: {e}"),
        }
    })
}

/// `/exec` and `/attach` over a WebSocket: checks the upgrade on the worker, then
/// takes the connection over for the session.
fn websocket_remote_command(
    s: &StreamServer,
    req: &Req,
    target: wire::streams::remotecommand::Target,
) -> Reply {
    let names: Vec<&'static str> = wire::streams::websocket::ChannelProtocol::REMOTE_COMMAND
        .iter()
        .map(|p| p.name())
        .collect();
    let up = match wire::streams::websocket::check_upgrade(req, &names, true) {
        Ok(up) => up,
        Err(reply) => return reply,
    };
    let protocol = wire::streams::websocket::ChannelProtocol::REMOTE_COMMAND
        .into_iter()
        .find(|p| p.name() == up.protocol)
        .unwrap_or(wire::streams::websocket::ChannelProtocol::V1);
    let runtime = s.runtime.clone();
    Reply::takeover(move |conn| {
        serve(conn, &up, |ws| {
            wire::streams::remotecommand::run_websocket(ws, protocol, runtime.as_ref(), &target);
        })
    })
}

/// `/portForward` over a WebSocket: the channel protocol, or the SPDY tunnel.
fn websocket_port_forward(
    s: &StreamServer,
    req: &Req,
    target: wire::streams::portforward::Target,
    tunnel: bool,
) -> Reply {
    if tunnel {
        // SPDY inside binary messages: the tunnel upstream's API server (and, with
        // ExtendWebSocketsToKubelet, its kubelet) unwraps; served here directly.
        let up = match wire::streams::websocket::check_upgrade(
            req,
            &[wire::streams::websocket::SPDY_TUNNEL_PROTOCOL],
            false,
        ) {
            Ok(up) => up,
            Err(reply) => return reply,
        };
        let loops = s.loops.clone();
        return Reply::takeover(move |conn| {
            serve(conn, &up, |ws| {
                wire::streams::portforward::run_spdy(ws, &target, &loops)
            })
        });
    }
    let names: Vec<&'static str> = wire::streams::websocket::ChannelProtocol::PORT_FORWARD
        .iter()
        .map(|p| p.name())
        .collect();
    let up = match wire::streams::websocket::check_upgrade(req, &names, true) {
        Ok(up) => up,
        Err(reply) => return reply,
    };
    let protocol = if up.protocol == wire::streams::websocket::ChannelProtocol::V4Base64.name() {
        wire::streams::websocket::ChannelProtocol::V4Base64
    } else {
        wire::streams::websocket::ChannelProtocol::V4
    };
    let loops = s.loops.clone();
    Reply::takeover(move |conn| {
        serve(conn, &up, |ws| {
            wire::streams::portforward::run_websocket(ws, protocol, &target, &loops);
        })
    })
}

/// Answers the upgrade on a taken-over connection and runs `session` on it.
fn serve(
    conn: impl wire::streams::wire::ClientIo + 'static,
    up: &wire::streams::websocket::Upgrade,
    session: impl FnOnce(wire::streams::websocket::WsConn),
) {
    match wire::streams::websocket::WsConn::accept(wire::streams::wire::Wire::new(conn), up) {
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
fn find_container(s: &StreamServer, uid: &str, name: &str) -> Result<Option<String>, RuntimeError> {
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
    base::sort::sort_by_key(&mut running, |c| c.created);
    Ok(running.pop().map(|c| c.id))
}

/// The pod's running sandbox (the newest if several run), whose network namespace is
/// the pod's.
fn find_sandbox(s: &StreamServer, uid: &str) -> Result<Option<String>, RuntimeError> {
    let filter = [
        format!("{}={}", labels::MANAGED_BY_NODE, s.node_name),
        format!("{}={uid}", labels::POD_UID),
        format!("{}={}", labels::DOCKER_TYPE, labels::TYPE_SANDBOX),
    ];
    let mut running: Vec<_> = s
        .runtime
        .list_containers(&filter)?
        .into_iter()
        .filter(|c| c.state == ContainerState::Running)
        .collect();
    base::sort::sort_by_key(&mut running, |c| c.created);
    Ok(running.pop().map(|c| c.id))
}

/// A session the runtime serves itself: the client proxied to the streaming server at
/// `url` (upstream's `proxyStream`), the upgrade carried through.
fn proxy_stream(req: &Req, url: &str) -> Reply {
    if !wire::streams::proxy::is_upgrade_request(req) {
        // Upstream's proxy (`upgradeRequired`) through its responder's `http.Error`.
        return Reply::text(500, "Upgrade request required\n");
    }
    let backend = match wire::streams::proxy::Backend::parse(url) {
        Ok(b) => b,
        Err(e) => return Reply::text(500, e),
    };
    let head = wire::streams::proxy::forwarded_head(req, &backend);
    Reply::takeover(move |conn| wire::streams::proxy::relay(conn, &backend, &head))
}

/// kubectl's port-forward WebSocket tunnel to a runtime's streaming server, which
/// speaks SPDY only: the WebSocket answered here, SPDY to the runtime.
fn proxy_tunnel(req: &Req, url: &str) -> Reply {
    let up = match wire::streams::websocket::check_upgrade(
        req,
        &[wire::streams::websocket::SPDY_TUNNEL_PROTOCOL],
        false,
    ) {
        Ok(up) => up,
        Err(reply) => return reply,
    };
    let backend = match wire::streams::proxy::Backend::parse(url) {
        Ok(b) => b,
        Err(e) => return Reply::text(500, e),
    };
    let head = wire::streams::proxy::spdy_head(
        req,
        &backend,
        wire::streams::httpstream::PORT_FORWARD_PROTOCOL,
    );
    Reply::takeover(move |conn| {
        wire::streams::proxy::relay_tunnel(conn, &up, &backend, &head);
    })
}

/// A runtime's refusal of a streaming request (upstream's `streaming.WriteError`):
/// 404 for NotFound, else 500, with the error's text.
fn stream_error(e: &RuntimeError) -> Reply {
    let status = if e.is_not_found() { 404 } else { 500 };
    Reply::text(status, e.to_string())
}

/// Every value of `key` in a raw query, decoded as Go's `url.ParseQuery` does (`+` is
/// a space, `%XX` a byte).
pub(crate) fn query_values(query: &str, key: &str) -> Vec<String> {
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
pub(crate) fn parse_options(query: &str) -> Result<StreamOptions, String> {
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
pub(crate) fn parse_ports(query: &str) -> Result<Vec<u16>, String> {
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
}
