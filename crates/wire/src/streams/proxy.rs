//! Sessions a runtime serves itself: the kubelet port proxies its client to the URL a
//! CRI runtime's `Exec`, `Attach` or `PortForward` answered (upstream's `proxyStream`,
//! an `UpgradeAwareHandler` with `upgradeRequired`), so the remote-command and
//! port-forward protocols are the runtime's streaming server's, WebSocket and SPDY
//! alike.
//!
//! The whole session runs on the stream thread that took the connection over: the
//! dial (plain HTTP, [`CONNECT_TIMEOUT`]), the client's request head sent on with its
//! upgrade headers, the runtime's answer head read within [`HEAD_TIMEOUT`] and relayed,
//! then on `101` both connections spliced in one `poll(2)` loop, each direction's
//! buffer bounded as the kubelet's own sessions ([`HIGH_WATER`]), until either side
//! closes (the other is closed then), the session is idle for [`IDLE_TIMEOUT`], or
//! shutdown. An answer other than `101` ends the session: an error (4xx, 5xx) is
//! relayed with its body (at most [`MAX_ERROR_BODY`], within [`HEAD_TIMEOUT`]), any
//! other is upstream's `500 invalid upgrade response`.
//!
//! One form is not carried byte for byte: kubectl's port-forward WebSocket tunnel
//! (`SPDY/3.1+portforward.k8s.io`, which runtimes do not serve). The kubelet answers
//! that WebSocket itself and speaks SPDY to the runtime, each binary message's payload
//! being the SPDY bytes ([`relay_tunnel`]), as upstream's API server unwraps the tunnel
//! before its kubelet.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use super::httpstream::ByteLink;
use super::websocket::{Upgrade, WsConn};
use super::wire::{ClientIo, Wire};
use super::{pollfd, HIGH_WATER, HUNG_UP, IDLE_TIMEOUT, POLL_TICK, READ_BUDGET};
use crate::server::Req;

/// How long the dial of the runtime's streaming server may take (it is local).
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the runtime may take to answer the request head (and to send an error's
/// body): its streaming server answers at once, the session's own waiting comes after.
pub(crate) const HEAD_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest answer head taken from the runtime (upstream's server reads 1 MiB
/// heads; a streaming server's are a few hundred bytes).
const MAX_HEAD: usize = 64 * 1024;

/// The longest error body relayed; the rest is cut.
pub(crate) const MAX_ERROR_BODY: usize = 1024 * 1024;

/// How long a session whose one side has closed may take to hand the other what is
/// still buffered for it.
const DRAIN: Duration = Duration::from_secs(10);

/// One read from the runtime's connection.
const READ_CHUNK: usize = 32 * 1024;

/// Request headers not sent on: the client's credentials were for the kubelet, and
/// the host is the runtime's.
const DROPPED: [&str; 4] = [
    "Host",
    "Authorization",
    "Proxy-Authorization",
    "X-Forwarded-For",
];

/// A runtime's streaming server, as its URL names it: plain HTTP to an IP address (or
/// `localhost`), and the path with its query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backend {
    addr: SocketAddr,
    /// The URL's host and port, for the `Host` header.
    host: String,
    /// The path and query.
    target: String,
}

impl Backend {
    /// The server a streaming URL names (`http://127.0.0.1:PORT/exec/TOKEN`). Refused:
    /// `https` (containerd's `enable_tls_streaming`, a self-signed certificate no one
    /// could verify) and host names (resolving one could block without a bound).
    pub fn parse(url: &str) -> Result<Backend, String> {
        let rest = match url.split_once("://") {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
            Some((scheme, _)) if scheme.eq_ignore_ascii_case("https") => {
                return Err(format!(
                    "streaming URL {url:?}: TLS streaming is not supported (containerd: \
                     enable_tls_streaming = false)"
                ))
            }
            _ => return Err(format!("streaming URL {url:?} is not an http:// URL")),
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(at) => rest.split_at(at),
            None => (rest, "/"),
        };
        let target = if path.starts_with('?') {
            format!("/{path}")
        } else {
            path.to_string()
        };
        let (host, port) = split_host_port(authority)
            .ok_or_else(|| format!("streaming URL {url:?}: bad host or port"))?;
        let ip = if host.eq_ignore_ascii_case("localhost") {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        } else {
            host.parse::<IpAddr>()
                .map_err(|_| format!("streaming URL {url:?}: the host must be an IP address"))?
        };
        if target.bytes().any(|b| b.is_ascii_control() || b == b' ') {
            return Err(format!("streaming URL {url:?}: bad path"));
        }
        Ok(Backend {
            addr: SocketAddr::new(ip, port),
            host: authority.to_string(),
            target,
        })
    }
}

/// `host:port`, `[v6]:port`, or a host alone (port 80).
fn split_host_port(authority: &str) -> Option<(&str, u16)> {
    if authority.is_empty() || authority.contains('@') {
        return None;
    }
    if let Some(v6) = authority.strip_prefix('[') {
        let (host, rest) = v6.split_once(']')?;
        return match rest.strip_prefix(':') {
            Some(port) => Some((host, port.parse().ok()?)),
            None if rest.is_empty() => Some((host, 80)),
            None => None,
        };
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => Some((host, port.parse().ok()?)),
        Some(_) => None,
        None => Some((authority, 80)),
    }
}

/// Whether the request asks for a protocol upgrade (`Connection` names `upgrade`), as
/// upstream's `httpstream.IsUpgradeRequest`; a proxied stream needs one.
pub fn is_upgrade_request(req: &Req) -> bool {
    req.headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("Connection"))
        .any(|(_, v)| v.to_ascii_lowercase().contains("upgrade"))
}

/// The request head sent to the runtime: the client's method, the URL's path, the
/// client's headers (its upgrade headers, `Sec-WebSocket-*`,
/// `X-Stream-Protocol-Version` …) but for [`DROPPED`], `Host` the runtime's, and
/// `X-Forwarded-For` with the client's address appended (as upstream's proxy).
pub fn forwarded_head(req: &Req, backend: &Backend) -> Vec<u8> {
    let mut h = format!(
        "{} {} HTTP/1.1\r\nHost: {}\r\n",
        req.method, backend.target, backend.host
    );
    for (name, value) in &req.headers {
        if !DROPPED.iter().any(|d| name.eq_ignore_ascii_case(d)) {
            h.push_str(&format!("{name}: {value}\r\n"));
        }
    }
    let prior: Vec<&str> = req
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("X-Forwarded-For"))
        .map(|(_, v)| v.as_str())
        .collect();
    let mut forwarded = prior.join(", ");
    if let Some(peer) = req.peer {
        if !forwarded.is_empty() {
            forwarded.push_str(", ");
        }
        forwarded.push_str(&peer.ip().to_string());
    }
    if !forwarded.is_empty() {
        h.push_str(&format!("X-Forwarded-For: {forwarded}\r\n"));
    }
    h.push_str("\r\n");
    h.into_bytes()
}

/// The request head of a SPDY upgrade to the runtime for the port-forward tunnel:
/// the client's method and address, SPDY/3.1 with `protocol`.
pub fn spdy_head(req: &Req, backend: &Backend, protocol: &str) -> Vec<u8> {
    let mut h = format!(
        "{} {} HTTP/1.1\r\nHost: {}\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\
         X-Stream-Protocol-Version: {protocol}\r\n",
        req.method, backend.target, backend.host
    );
    if let Some(peer) = req.peer {
        h.push_str(&format!("X-Forwarded-For: {}\r\n", peer.ip()));
    }
    h.push_str("\r\n");
    h.into_bytes()
}

/// The runtime's answer head.
#[derive(Debug)]
struct Answer {
    status: u16,
    /// The head as sent, blank line included.
    head: Vec<u8>,
    /// What came after the head in the same reads.
    rest: Vec<u8>,
    /// The body's length, when the head gives it.
    content_length: Option<usize>,
}

/// Dials the runtime, sends `head` and reads the answer head, each within its bound.
fn open(backend: &Backend, head: &[u8]) -> Result<(TcpStream, Answer), String> {
    let mut sock = TcpStream::connect_timeout(&backend.addr, CONNECT_TIMEOUT)
        .map_err(|e| format!("error dialing backend: {e}"))?;
    let deadline = Instant::now() + HEAD_TIMEOUT;
    sock.set_write_timeout(Some(HEAD_TIMEOUT))
        .and_then(|()| sock.write_all(head))
        .map_err(|e| format!("error sending request: {e}"))?;
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err("error reading the runtime's answer: timed out".into());
        }
        sock.set_read_timeout(Some(left))
            .map_err(|e| format!("error reading the runtime's answer: {e}"))?;
        let n = match sock.read(&mut chunk) {
            Ok(0) => return Err("error reading the runtime's answer: connection closed".into()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("error reading the runtime's answer: {e}")),
        };
        got.extend_from_slice(&chunk[..n]);
        if let Some(answer) = parse_answer(&got)? {
            return Ok((sock, answer));
        }
        if got.len() > MAX_HEAD {
            return Err(format!(
                "error reading the runtime's answer: its head is over {MAX_HEAD} bytes"
            ));
        }
    }
}

/// The answer head in `got`, once it is all there.
fn parse_answer(got: &[u8]) -> Result<Option<Answer>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut headers);
    let len = match resp.parse(got) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("error reading the runtime's answer: {e}")),
    };
    let content_length = resp
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("Content-Length"))
        .and_then(|h| std::str::from_utf8(h.value).ok())
        .and_then(|v| v.trim().parse().ok());
    Ok(Some(Answer {
        status: resp.code.unwrap_or(0),
        head: got[..len].to_vec(),
        rest: got[len..].to_vec(),
        content_length,
    }))
}

/// A plain-text error on a connection whose head has not been written yet
/// (upstream's proxy responder: `http.Error` with 500).
fn refuse(conn: &mut dyn ClientIo, status: u16, message: &str) {
    log::info!("proxied stream: {message}");
    let body = format!("{message}\n");
    let len = body.len().to_string();
    let _ = conn
        .write_head(
            status,
            &[
                ("Content-Type", "text/plain; charset=utf-8"),
                ("Content-Length", &len),
            ],
        )
        .and_then(|()| conn.write_all(body.as_bytes()));
}

/// Proxies a taken-over connection to the runtime: `head` (from [`forwarded_head`])
/// sent, the answer relayed, and on `101` the two connections spliced until either
/// closes.
pub fn relay(conn: impl ClientIo + 'static, backend: &Backend, head: &[u8]) {
    relay_with(conn, backend, head, |mut conn, head| {
        conn.write_all(head)
            .map(|()| Wire::new(conn))
            .map_err(|e| e.to_string())
    });
}

/// The port-forward WebSocket tunnel: a SPDY upgrade to the runtime (`head`, from
/// [`spdy_head`]) first, then the client's WebSocket answered with `up` and the SPDY
/// bytes carried between the runtime's connection and the client's binary messages.
pub fn relay_tunnel(conn: impl ClientIo + 'static, up: &Upgrade, backend: &Backend, head: &[u8]) {
    relay_with(conn, backend, head, |conn, _| {
        WsConn::accept(Wire::new(conn), up).map_err(|e| e.to_string())
    });
}

/// Sends `head` to the runtime and relays its answer: on 101, `link` makes the
/// client's side of the session (the runtime's answer head in hand) and the two are
/// spliced; an error status is relayed; anything else is upstream's 500.
fn relay_with<C: ClientIo + 'static, L: ByteLink>(
    mut conn: C,
    backend: &Backend,
    head: &[u8],
    link: impl FnOnce(C, &[u8]) -> Result<L, String>,
) {
    let (sock, answer) = match open(backend, head) {
        Ok(x) => x,
        Err(e) => return refuse(&mut conn, 500, &e),
    };
    match answer.status {
        101 => {
            let mut link = match link(conn, &answer.head) {
                Ok(link) => link,
                Err(e) => {
                    log::debug!("proxied stream: the client went away: {e}");
                    return;
                }
            };
            if let Err(e) = splice(&mut link, sock, answer.rest) {
                log::debug!("proxied stream: {e}");
            }
        }
        400.. => relay_error(&mut conn, sock, &answer),
        other => refuse(
            &mut conn,
            500,
            &format!("invalid upgrade response: status code {other}"),
        ),
    }
}

/// Relays an error answer: its head, and its body up to its length or the runtime's
/// close, at most [`MAX_ERROR_BODY`] within [`HEAD_TIMEOUT`].
fn relay_error(conn: &mut dyn ClientIo, mut sock: TcpStream, answer: &Answer) {
    let mut body = answer.rest.clone();
    let want = answer
        .content_length
        .unwrap_or(MAX_ERROR_BODY)
        .min(MAX_ERROR_BODY);
    let deadline = Instant::now() + HEAD_TIMEOUT;
    let mut chunk = [0u8; 4096];
    while body.len() < want {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || sock.set_read_timeout(Some(left)).is_err() {
            break;
        }
        match sock.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    body.truncate(want);
    log::debug!(
        "proxied stream: the runtime answered {}: {}",
        answer.status,
        String::from_utf8_lossy(&body).trim()
    );
    let _ = conn
        .write_all(&answer.head)
        .and_then(|()| conn.write_all(&body));
}

/// Carries bytes both ways between the client's link and the runtime's connection
/// until one side closes (then what is buffered for the other is handed over, within
/// [`DRAIN`]), the session is idle for [`IDLE_TIMEOUT`], or shutdown. `first`: what
/// the runtime sent right after its answer head.
fn splice<L: ByteLink>(link: &mut L, mut sock: TcpStream, first: Vec<u8>) -> Result<(), String> {
    sock.set_nonblocking(true).map_err(|e| e.to_string())?;
    if !first.is_empty() {
        link.send(first)?;
    }
    // The client's bytes on their way to the runtime.
    let mut up: Vec<u8> = Vec::new();
    let mut up_sent = 0;
    let mut chunk = vec![0u8; READ_CHUNK];
    let mut last_activity = Instant::now();
    let mut client_open = true;
    let mut runtime_open = true;
    let mut drain_until: Option<Instant> = None;
    loop {
        if link.is_stopped() {
            return Err("shutdown".into());
        }
        link.flush()?;
        if !runtime_open {
            // Nothing more reaches a runtime that has closed: what the client still
            // sends is dropped while its last output drains.
            up.clear();
            up_sent = 0;
        }
        while up_sent < up.len() {
            match sock.write(&up[up_sent..]) {
                Ok(0) => return Err("the runtime's connection took nothing".into()),
                Ok(n) => up_sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("to the runtime: {e}")),
            }
        }
        if up_sent == up.len() {
            up.clear();
            up_sent = 0;
        }
        // One side closed: the other closes once it has what was buffered for it.
        if !client_open && up.is_empty() {
            return Ok(());
        }
        if !runtime_open && link.pending() == 0 && !link.wants_write() {
            link.finish(Duration::ZERO);
            return Ok(());
        }
        let now = Instant::now();
        if drain_until.is_some_and(|d| now >= d) {
            return Err("the other side did not take what was left within 10 s".into());
        }
        if now.duration_since(last_activity) >= IDLE_TIMEOUT {
            return Err("idle".into());
        }

        let read_client = client_open && up.len() < HIGH_WATER;
        let read_runtime = runtime_open && link.pending() < HIGH_WATER;
        let mut client_events = libc::POLLRDHUP;
        if read_client {
            client_events |= libc::POLLIN;
        }
        if link.wants_write() {
            client_events |= libc::POLLOUT;
        }
        let mut runtime_events = 0;
        if read_runtime {
            runtime_events |= libc::POLLIN;
        }
        if !up.is_empty() {
            runtime_events |= libc::POLLOUT;
        }
        // A runtime side that is neither read nor written is not polled: its hang-up
        // would wake every poll while the client drains.
        let runtime_fd = if runtime_events == 0 {
            -1
        } else {
            sock.as_raw_fd()
        };
        let mut fds = [
            pollfd(link.fd(), client_events),
            pollfd(runtime_fd, runtime_events),
        ];
        let wait = if read_client && link.has_buffered() {
            Duration::ZERO
        } else {
            POLL_TICK
        };
        super::poll(&mut fds, wait).map_err(|e| e.to_string())?;
        if !read_client && fds[0].revents & HUNG_UP != 0 {
            return Err("the client went away".into());
        }

        if read_client {
            let before = up.len();
            if !link.read_into(&mut up, READ_BUDGET)? {
                client_open = false;
                drain_until.get_or_insert(Instant::now() + DRAIN);
            }
            if up.len() > before {
                last_activity = Instant::now();
            }
        }
        if read_runtime {
            let mut taken = 0;
            while taken < READ_BUDGET && link.pending() < HIGH_WATER {
                match sock.read(&mut chunk) {
                    Ok(0) => {
                        runtime_open = false;
                        drain_until.get_or_insert(Instant::now() + DRAIN);
                        break;
                    }
                    Ok(n) => {
                        taken += n;
                        last_activity = Instant::now();
                        link.send(chunk[..n].to_vec())?;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(format!("from the runtime: {e}")),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::streams::wire::TestConn;
    use std::net::TcpListener;
    use std::os::unix::net::UnixStream;

    #[test]
    fn streaming_urls_name_a_local_http_server() {
        let b = Backend::parse("http://127.0.0.1:39441/exec/aBcD").expect("ok");
        assert_eq!(b.addr, "127.0.0.1:39441".parse().expect("addr"));
        assert_eq!(b.host, "127.0.0.1:39441");
        assert_eq!(b.target, "/exec/aBcD");
        let b = Backend::parse("http://[::1]:10010/portforward/x?a=b").expect("ok");
        assert_eq!(b.addr, "[::1]:10010".parse().expect("addr"));
        assert_eq!(b.target, "/portforward/x?a=b");
        let b = Backend::parse("HTTP://localhost").expect("ok");
        assert_eq!(b.addr, "127.0.0.1:80".parse().expect("addr"));
        assert_eq!(b.target, "/");
        for bad in [
            "https://127.0.0.1:1/exec/x",
            "127.0.0.1:1/exec/x",
            "/exec/x",
            "http://node.example:1/exec/x",
            "http://127.0.0.1:99999/exec/x",
            "http://u@127.0.0.1:1/exec/x",
            "http://127.0.0.1:1/exec/a b",
            "http://::1:5/x",
        ] {
            assert!(Backend::parse(bad).is_err(), "{bad}");
        }
        assert!(Backend::parse("https://127.0.0.1:1/x")
            .expect_err("refused")
            .contains("enable_tls_streaming"));
    }

    fn req(headers: &[(&str, &str)]) -> Req {
        let mut r = Req::new("POST", "/exec/default/p/c?command=sh&stdin=1");
        r.headers = headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        r.peer = Some("10.1.2.3:5555".parse().expect("addr"));
        r
    }

    #[test]
    fn the_head_goes_on_with_its_upgrade_and_without_credentials() {
        let b = Backend::parse("http://127.0.0.1:4000/exec/tok").expect("ok");
        let r = req(&[
            ("Host", "node:10250"),
            ("Connection", "Upgrade"),
            ("Upgrade", "SPDY/3.1"),
            ("X-Stream-Protocol-Version", "v4.channel.k8s.io"),
            ("X-Stream-Protocol-Version", "channel.k8s.io"),
            ("Authorization", "Bearer secret"),
            ("X-Forwarded-For", "192.0.2.1"),
        ]);
        assert!(is_upgrade_request(&r));
        let head = String::from_utf8(forwarded_head(&r, &b)).expect("utf8");
        assert_eq!(
            head,
            "POST /exec/tok HTTP/1.1\r\nHost: 127.0.0.1:4000\r\nConnection: Upgrade\r\n\
             Upgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\
             X-Stream-Protocol-Version: channel.k8s.io\r\n\
             X-Forwarded-For: 192.0.2.1, 10.1.2.3\r\n\r\n"
        );
        assert!(!is_upgrade_request(&req(&[("Upgrade", "websocket")])));
        assert!(is_upgrade_request(&req(&[(
            "connection",
            "keep-alive, Upgrade"
        )])));
        let head = String::from_utf8(spdy_head(&r, &b, "portforward.k8s.io")).expect("utf8");
        assert!(head.starts_with("POST /exec/tok HTTP/1.1\r\nHost: 127.0.0.1:4000\r\n"));
        assert!(
            head.contains("Upgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: portforward.k8s.io\r\n")
        );
        assert!(!head.contains("secret"));
    }

    /// A one-connection streaming server: reads the head, answers `answer`, then
    /// echoes what it gets (upper-cased) until the client closes.
    fn server(answer: &'static [u8]) -> (Backend, std::thread::JoinHandle<Vec<u8>>) {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        let h = std::thread::spawn(move || {
            let (mut s, _) = l.accept().expect("accept");
            let mut head = Vec::new();
            let mut b = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                if s.read(&mut b).expect("read head") == 0 {
                    return head;
                }
                head.push(b[0]);
            }
            s.write_all(answer).expect("answer");
            let mut chunk = [0u8; 4096];
            loop {
                match s.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let up = chunk[..n].to_ascii_uppercase();
                        if s.write_all(&up).is_err() {
                            break;
                        }
                    }
                }
            }
            head
        });
        let b = Backend::parse(&format!("http://127.0.0.1:{port}/exec/tok")).expect("ok");
        (b, h)
    }

    #[test]
    fn an_upgrade_is_spliced_both_ways_until_the_client_closes() {
        let (b, srv) =
            server(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: SPDY/3.1\r\n\r\nhello");
        let (ours, mut client) = UnixStream::pair().expect("pair");
        let r = req(&[("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1")]);
        let head = forwarded_head(&r, &b);
        let session = std::thread::spawn(move || relay(TestConn(ours), &b, &head));
        client
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut got = Vec::new();
        let mut chunk = [0u8; 4096];
        while !got.ends_with(b"hello") {
            let n = client.read(&mut chunk).expect("answer");
            assert!(n > 0, "{}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&chunk[..n]);
        }
        assert!(got.starts_with(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: SPDY/3.1\r\n\r\n"));
        // 3 MB through, more than either direction's buffer.
        let big: Vec<u8> = (0..3 * 1024 * 1024u32)
            .map(|i| b'a' + (i % 26) as u8)
            .collect();
        let mut writer = client.try_clone().expect("clone");
        let sent = big.clone();
        let w = std::thread::spawn(move || writer.write_all(&sent));
        let mut back = Vec::new();
        while back.len() < big.len() {
            let n = client.read(&mut chunk).expect("echo");
            assert!(n > 0);
            back.extend_from_slice(&chunk[..n]);
        }
        w.join().expect("writer").expect("written");
        assert!(back == big.to_ascii_uppercase());
        // The client leaves: the session ends and closes the runtime's side.
        drop(client);
        session.join().expect("session");
        let head = String::from_utf8(srv.join().expect("server")).expect("utf8");
        assert!(head.starts_with("POST /exec/tok HTTP/1.1\r\n"), "{head}");
    }

    #[test]
    fn what_the_runtime_sent_before_closing_reaches_the_client() {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        let payload: Vec<u8> = (0..3 * 1024 * 1024u32).map(|i| (i % 253) as u8).collect();
        let sent = payload.clone();
        let srv = std::thread::spawn(move || {
            let (mut s, _) = l.accept().expect("accept");
            let mut b = [0u8; 4096];
            let _ = s.read(&mut b).expect("head");
            s.write_all(b"HTTP/1.1 101 Switching Protocols\r\n\r\n")
                .expect("answer");
            s.write_all(&sent).expect("payload");
            // Closes with the client still reading.
        });
        let b = Backend::parse(&format!("http://127.0.0.1:{port}/attach/t")).expect("ok");
        let (ours, mut client) = UnixStream::pair().expect("pair");
        let head = forwarded_head(&req(&[("Connection", "Upgrade")]), &b);
        let session = std::thread::spawn(move || relay(TestConn(ours), &b, &head));
        // The runtime closes with most of it still buffered on the way.
        let mut got = Vec::new();
        client
            .set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        client
            .read_to_end(&mut got)
            .expect("until the session closes");
        srv.join().expect("server");
        session.join().expect("session");
        let head = b"HTTP/1.1 101 Switching Protocols\r\n\r\n";
        assert!(got.starts_with(head));
        assert!(got[head.len()..] == payload, "{} bytes", got.len());
    }

    #[test]
    fn an_error_is_relayed_and_a_success_is_not_an_upgrade() {
        let (b, srv) =
            server(b"HTTP/1.1 404 Not Found\r\nContent-Length: 19\r\n\r\n404 page not found\n");
        let (ours, mut client) = UnixStream::pair().expect("pair");
        let head = forwarded_head(&req(&[]), &b);
        relay(TestConn(ours), &b, &head);
        let mut got = String::new();
        client.read_to_string(&mut got).expect("answer");
        assert_eq!(
            got,
            "HTTP/1.1 404 Not Found\r\nContent-Length: 19\r\n\r\n404 page not found\n"
        );
        drop(client);
        let _ = srv.join();

        let (b, srv) = server(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        let (ours, mut client) = UnixStream::pair().expect("pair");
        relay(TestConn(ours), &b, &forwarded_head(&req(&[]), &b));
        let mut got = String::new();
        client.read_to_string(&mut got).expect("answer");
        assert!(got.starts_with("HTTP/1.1 500 "), "{got}");
        assert!(
            got.ends_with("invalid upgrade response: status code 200\n"),
            "{got}"
        );
        drop(client);
        let _ = srv.join();

        // Nothing listening: 500 with the dial's error.
        let port = TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("addr")
            .port();
        let b = Backend::parse(&format!("http://127.0.0.1:{port}/x")).expect("ok");
        let (ours, mut client) = UnixStream::pair().expect("pair");
        relay(TestConn(ours), &b, &forwarded_head(&req(&[]), &b));
        let mut got = String::new();
        client.read_to_string(&mut got).expect("answer");
        assert!(got.starts_with("HTTP/1.1 500 "), "{got}");
        assert!(got.contains("error dialing backend"), "{got}");
    }
}
