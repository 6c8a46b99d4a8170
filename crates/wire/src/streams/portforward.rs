//! Port-forward sessions (upstream's `ServePortForward`): connections to ports of
//! the pod, dialed inside its network namespace ([`super::netns`]), carried over the
//! client's one connection, all on the session's one thread.
//!
//! Over WebSocket (`v4.channel.k8s.io`) the ports are fixed by the request: one pod
//! connection per port, data on channel `2i`, errors on `2i+1`, each channel's first
//! message the port (2 bytes little-endian); the session ends when every connection
//! has. Over SPDY the client opens a data and an error stream per connection, as many
//! as it likes.
//!
//! Flow control: a pod socket is not read while more than [`HIGH_WATER`] waits for
//! the client; the client is not read while more than [`HIGH_WATER`] waits for the
//! pods.
//!
//! Over 800 lines: both wire forms of a session (WebSocket channels, SPDY stream
//! pairs) share the pod connections and their bounds, and a third of the file is
//! their tests.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use tungstenite::protocol::frame::coding::CloseCode;

use super::httpstream::{header, ByteLink, SpdyConn};
use super::netns::Dialer;
use super::websocket::{self, ChannelProtocol, WsConn, WsEnd};
use super::{pollfd, HIGH_WATER, IDLE_TIMEOUT, POLL_TICK, READ_BUDGET, STREAM_CREATION_TIMEOUT};
use crate::spdy::conn::Event;
use crate::spdy::RstStatus;
use base::loops::Loops;

/// Bytes read from a pod socket at once.
const READ_CHUNK: usize = 32 * 1024;

/// How long a finished session waits for the client to take the rest.
const LINGER: Duration = Duration::from_secs(10);

/// The pod a port-forward reaches.
#[derive(Debug, Clone)]
pub struct Target {
    /// `<name>_<namespace>`, as upstream's messages name the pod.
    pub pod: String,
    /// The pod's UID.
    pub uid: String,
    /// The host PID of the pod's sandbox (its network namespace is the pod's).
    pub sandbox_pid: u32,
    /// The ports of a WebSocket request.
    pub ports: Vec<u16>,
}

impl Target {
    /// Upstream's message for a forwarding that failed.
    pub(crate) fn error_message(&self, port: u16, e: &dyn std::fmt::Display) -> String {
        format!(
            "error forwarding port {port} to pod {}, uid {}: {e}",
            self.pod, self.uid
        )
    }
}

/// One forwarded connection: the pod socket (once dialed) and what waits for it.
#[derive(Debug)]
pub(crate) struct PodConn {
    /// The pod port.
    pub port: u16,
    /// The socket inside the pod's namespace; None while dialing or when done.
    pub sock: Option<TcpStream>,
    /// Client bytes not yet taken by the pod.
    pub to_pod: Vec<u8>,
    /// The client will send no more: the pod's side is shut for writing once
    /// `to_pod` is sent.
    pub client_done: bool,
    write_shut: bool,
    /// Over: the pod closed, the dial failed, or the socket broke.
    pub done: bool,
}

impl PodConn {
    /// A connection to `port`, dialing.
    pub(crate) fn new(port: u16) -> PodConn {
        PodConn {
            port,
            sock: None,
            to_pod: Vec::new(),
            client_done: false,
            write_shut: false,
            done: false,
        }
    }

    /// The poll events this connection waits for: input when the client can take
    /// more, output when something waits for the pod.
    pub(crate) fn events(&self, client_has_room: bool) -> libc::c_short {
        let mut ev = 0;
        if self.sock.is_some() && !self.done {
            if client_has_room {
                ev |= libc::POLLIN;
            }
            if !self.to_pod.is_empty() {
                ev |= libc::POLLOUT;
            }
        }
        ev
    }

    /// Sends what the pod takes of `to_pod`, and shuts its write side after the last
    /// byte once the client is done.
    pub(crate) fn write_pending(&mut self) -> io::Result<()> {
        let Some(sock) = self.sock.as_mut() else {
            return Ok(());
        };
        while !self.to_pod.is_empty() {
            match sock.write(&self.to_pod) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.to_pod.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.client_done && !self.write_shut {
            self.write_shut = true;
            // The pod may have closed already; then there is nothing to shut.
            let _ = sock.shutdown(std::net::Shutdown::Write);
        }
        Ok(())
    }

    /// Reads what the pod sent: `Ok(None)` when nothing is there, `Ok(Some(0))` at
    /// its end.
    pub(crate) fn read(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let Some(sock) = self.sock.as_mut() else {
            return Ok(None);
        };
        loop {
            match sock.read(buf) {
                Ok(n) => return Ok(Some(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Ends the connection (the socket is closed).
    pub(crate) fn close(&mut self) {
        self.done = true;
        self.sock = None;
        self.to_pod = Vec::new();
    }
}

/// A port-forward over the WebSocket channel protocol (`v4.channel.k8s.io`): one
/// connection per requested port, until all have ended or the client goes.
pub fn run_websocket(ws: WsConn, protocol: ChannelProtocol, t: &Target, loops: &Loops) {
    let mut s = WsSession {
        ws,
        protocol,
        conns: t.ports.iter().map(|p| PodConn::new(*p)).collect(),
    };
    let mut dialer = match Dialer::new(loops.clone(), t.sandbox_pid) {
        Ok(d) => d,
        Err(e) => {
            log::warn!("port-forward to pod {}: {e}", t.pod);
            return;
        }
    };
    for (i, port) in t.ports.iter().enumerate() {
        let prefix = port.to_le_bytes();
        let (data, error) = channels(i);
        if s.send(data, &prefix)
            .and_then(|()| s.send(error, &prefix))
            .is_err()
        {
            return;
        }
        dialer.dial(i as u64, *port);
    }
    match s.pump(&mut dialer, t) {
        Ok(()) => websocket::finish(&mut s.ws, CloseCode::Normal, "", LINGER),
        Err(WsEnd::TooBig(m)) => {
            log::info!("port-forward to pod {}: {m}", t.pod);
            s.ws.close(CloseCode::Size, "message too big");
            let _ = s.ws.flush();
        }
        Err(e) => log::debug!("port-forward to pod {}: {e}", t.pod),
    }
}

/// The data and error channel of the `i`th port (saturating: at most 127 ports fit
/// the channel byte).
fn channels(i: usize) -> (u8, u8) {
    let data = u8::try_from(i.saturating_mul(2)).unwrap_or(u8::MAX - 1);
    (data, data.saturating_add(1))
}

#[derive(Debug)]
struct WsSession {
    ws: WsConn,
    protocol: ChannelProtocol,
    conns: Vec<PodConn>,
}

impl WsSession {
    fn send(&mut self, ch: u8, data: &[u8]) -> Result<(), WsEnd> {
        let msg = self.protocol.encode(ch, data);
        self.ws.send(msg)
    }

    fn pump(&mut self, dialer: &mut Dialer, t: &Target) -> Result<(), WsEnd> {
        let mut buf = vec![0u8; READ_CHUNK];
        let mut last_activity = Instant::now();
        loop {
            if self.ws.wire().is_stopped() || last_activity.elapsed() >= IDLE_TIMEOUT {
                return Err(WsEnd::Broken("shutdown or idle".into()));
            }
            if self.conns.iter().all(|c| c.done) && dialer.busy() == 0 {
                return Ok(());
            }
            let to_pods: usize = self.conns.iter().map(|c| c.to_pod.len()).sum();
            let read_client = to_pods < HIGH_WATER;
            let client_has_room = self.ws.pending() < HIGH_WATER;
            let wire = self.ws.wire();
            let mut client_events = libc::POLLRDHUP;
            if read_client {
                client_events |= libc::POLLIN;
            }
            if wire.wants_write() {
                client_events |= libc::POLLOUT;
            }
            let mut fds = vec![
                pollfd(wire.fd(), client_events),
                pollfd(dialer.fd(), libc::POLLIN),
            ];
            for c in &self.conns {
                let fd = c.sock.as_ref().map_or(-1, |s| s.as_raw_fd());
                fds.push(pollfd(fd, c.events(client_has_room)));
            }
            let wait = if read_client && wire.has_buffered() {
                Duration::ZERO
            } else {
                POLL_TICK
            };
            super::poll(&mut fds, wait).map_err(|e| WsEnd::Broken(e.to_string()))?;
            if !read_client && fds[0].revents & super::HUNG_UP != 0 {
                return Err(WsEnd::Closed);
            }

            for (token, result) in dialer.finished() {
                let i = usize::try_from(token).unwrap_or(usize::MAX);
                let Some(c) = self.conns.get_mut(i) else {
                    continue;
                };
                match result {
                    Ok(sock) if !c.done => c.sock = Some(sock),
                    Ok(_) => {}
                    Err(e) => {
                        let msg = t.error_message(c.port, &e);
                        log::info!("{msg}");
                        c.close();
                        let (_, error) = channels(i);
                        self.send(error, msg.as_bytes())?;
                    }
                }
            }

            if read_client {
                let mut taken = 0;
                while taken < READ_BUDGET {
                    let Some(msg) = self.ws.read()? else {
                        break;
                    };
                    taken += msg.len();
                    last_activity = Instant::now();
                    let Some((ch, data)) = self.protocol.decode(&msg).map_err(WsEnd::Broken)?
                    else {
                        continue;
                    };
                    // Data channels are even; the error channels carry nothing inbound.
                    if ch % 2 == 0 {
                        if let Some(c) = self.conns.get_mut(usize::from(ch / 2)) {
                            if !c.done {
                                c.to_pod.extend_from_slice(&data);
                            }
                        }
                    }
                }
            }

            for i in 0..self.conns.len() {
                if let Err(e) = self.conns[i].write_pending() {
                    log::debug!(
                        "port-forward to pod {} port {}: {e}",
                        t.pod,
                        self.conns[i].port
                    );
                    self.conns[i].close();
                }
                let (data, _) = channels(i);
                // A few reads per round, so one busy connection cannot starve others.
                for _ in 0..4 {
                    if self.ws.pending() >= HIGH_WATER {
                        break;
                    }
                    match self.conns[i].read(&mut buf) {
                        Ok(None) => break,
                        Ok(Some(0)) => {
                            self.conns[i].close();
                            break;
                        }
                        Ok(Some(n)) => {
                            last_activity = Instant::now();
                            self.send(data, &buf[..n])?;
                        }
                        Err(e) => {
                            log::debug!(
                                "port-forward to pod {} port {}: {e}",
                                t.pod,
                                self.conns[i].port
                            );
                            self.conns[i].close();
                            break;
                        }
                    }
                }
            }
            self.ws.flush()?;
        }
    }
}

/// One port-forward request of a SPDY session: its two streams as they arrive
/// (upstream's `httpStreamPair`).
#[derive(Debug)]
struct Pair {
    data: Option<u32>,
    error: Option<u32>,
    port: u16,
    since: Instant,
}

/// A forwarding under way: the pod connection and its two streams.
#[derive(Debug)]
struct Forward {
    conn: PodConn,
    data: u32,
    error: u32,
}

/// Upstream's `portForwardErrResponse`, written on the error stream.
#[derive(serde::Serialize)]
struct ErrResponse<'a> {
    #[serde(rename = "closeConnection", skip_serializing_if = "std::ops::Not::not")]
    close_connection: bool,
    message: &'a str,
}

/// A port-forward over SPDY (after the `101`, or tunneled in WebSocket messages):
/// every data/error stream pair the client opens is a connection to its `port`,
/// until the client goes.
pub fn run_spdy<L: ByteLink>(link: L, t: &Target, loops: &Loops) {
    let mut conn = SpdyConn::new(link);
    let mut dialer = match Dialer::new(loops.clone(), t.sandbox_pid) {
        Ok(d) => d,
        Err(e) => {
            log::warn!("port-forward to pod {}: {e}", t.pod);
            conn.finish();
            return;
        }
    };
    let mut s = SpdySession {
        pairs: HashMap::new(),
        forwards: HashMap::new(),
        by_stream: HashMap::new(),
        next_token: 0,
    };
    match s.pump(&mut conn, &mut dialer, t) {
        Ok(()) => {}
        Err(e) => log::debug!("port-forward to pod {}: {e}", t.pod),
    }
    conn.finish();
}

#[derive(Debug)]
struct SpdySession {
    /// Requests whose two streams have not both come, by request id.
    pairs: HashMap<String, Pair>,
    /// Forwardings by token.
    forwards: HashMap<u64, Forward>,
    /// Data stream → token.
    by_stream: HashMap<u32, u64>,
    next_token: u64,
}

impl SpdySession {
    fn pump<L: ByteLink>(
        &mut self,
        conn: &mut SpdyConn<L>,
        dialer: &mut Dialer,
        t: &Target,
    ) -> Result<(), String> {
        let mut buf = vec![0u8; READ_CHUNK];
        let mut events = Vec::new();
        let mut last_activity = Instant::now();
        loop {
            if conn.link.is_stopped() {
                return Err("the kubelet is shutting down".into());
            }
            if conn.eof {
                return Ok(());
            }
            if last_activity.elapsed() >= IDLE_TIMEOUT {
                return Err("idle timeout".into());
            }
            let to_pods: usize = self.forwards.values().map(|f| f.conn.to_pod.len()).sum();
            let read_client = to_pods < HIGH_WATER;
            let client_has_room = conn.link.pending() < HIGH_WATER;
            let tokens: Vec<u64> = self.forwards.keys().copied().collect();
            let mut extra = vec![pollfd(dialer.fd(), libc::POLLIN)];
            for tok in &tokens {
                let f = &self.forwards[tok];
                let fd = f.conn.sock.as_ref().map_or(-1, |s| s.as_raw_fd());
                extra.push(pollfd(fd, f.conn.events(client_has_room)));
            }
            if conn.wait(read_client, &mut extra, POLL_TICK) && !read_client {
                return Err("the client went away".into());
            }

            for (token, result) in dialer.finished() {
                let Some(f) = self.forwards.get_mut(&token) else {
                    continue;
                };
                match result {
                    Ok(sock) => f.conn.sock = Some(sock),
                    Err(e) => {
                        let msg = t.error_message(f.conn.port, &e);
                        log::info!("{msg}");
                        self.fail(conn, token, &msg, true);
                    }
                }
            }

            if read_client {
                events.clear();
                let read = conn.read_events(&mut events);
                if !events.is_empty() {
                    last_activity = Instant::now();
                }
                for ev in events.drain(..) {
                    if self.handle(conn, dialer, ev, t) {
                        return Ok(());
                    }
                }
                read?;
            }
            self.expire(conn);

            for tok in tokens {
                self.move_bytes(conn, tok, &mut buf, t, &mut last_activity);
            }
            conn.push();
            conn.link.flush()?;
        }
    }

    /// One event from the client; true when the session is over.
    fn handle<L: ByteLink>(
        &mut self,
        conn: &mut SpdyConn<L>,
        dialer: &mut Dialer,
        ev: Event,
        t: &Target,
    ) -> bool {
        match ev {
            Event::Opened {
                stream_id, headers, ..
            } => self.opened(conn, dialer, stream_id, &headers),
            Event::Data {
                stream_id,
                data,
                fin,
            } => {
                conn.session.consumed(stream_id, data.len());
                if let Some(f) = self
                    .by_stream
                    .get(&stream_id)
                    .and_then(|tok| self.forwards.get_mut(tok))
                {
                    if !f.conn.done {
                        f.conn.to_pod.extend_from_slice(&data);
                    }
                    if fin {
                        f.conn.client_done = true;
                    }
                }
            }
            Event::Reset { stream_id, .. } => {
                if let Some(tok) = self.by_stream.get(&stream_id).copied() {
                    log::debug!("port-forward to pod {}: stream {stream_id} reset", t.pod);
                    self.remove(conn, tok);
                }
            }
            Event::GoAway { .. } => return true,
            _ => {}
        }
        false
    }

    /// A new stream: checked (upstream's `httpStreamReceived`), replied, paired.
    fn opened<L: ByteLink>(
        &mut self,
        conn: &mut SpdyConn<L>,
        dialer: &mut Dialer,
        stream_id: u32,
        headers: &[(String, String)],
    ) {
        let checked = check_stream(headers);
        let (port, kind) = match checked {
            Ok(x) => x,
            Err(e) => {
                log::info!("port-forward: stream {stream_id} refused: {e}");
                let _ = conn.session.reset(stream_id, RstStatus::Cancel);
                return;
            }
        };
        if let Err(e) = conn.session.reply(stream_id, Vec::new(), false) {
            log::debug!("spdy: {e}");
            return;
        }
        let request = header(headers, "requestid").unwrap_or_else(|| {
            // Old clients name no request: upstream pairs consecutive stream ids.
            let base = if kind == "error" {
                stream_id
            } else {
                stream_id.saturating_sub(2)
            };
            base.to_string()
        });
        let pair = self.pairs.entry(request.clone()).or_insert(Pair {
            data: None,
            error: None,
            port,
            since: Instant::now(),
        });
        let slot = if kind == "error" {
            &mut pair.error
        } else {
            &mut pair.data
        };
        if slot.is_some() {
            let msg = format!(
                "error processing stream for request {request}: {kind} stream already assigned"
            );
            if let Some(err) = pair.error {
                let _ = conn.session.send_data(err, msg.as_bytes(), false);
            }
            let _ = conn.session.reset(stream_id, RstStatus::Cancel);
            return;
        }
        *slot = Some(stream_id);
        if let (Some(data), Some(error)) = (pair.data, pair.error) {
            let port = pair.port;
            self.pairs.remove(&request);
            let token = self.next_token;
            self.next_token += 1;
            self.forwards.insert(
                token,
                Forward {
                    conn: PodConn::new(port),
                    data,
                    error,
                },
            );
            self.by_stream.insert(data, token);
            self.by_stream.insert(error, token);
            dialer.dial(token, port);
        }
    }

    /// Requests whose second stream did not come in time (upstream's
    /// `monitorStreamPair`).
    fn expire<L: ByteLink>(&mut self, conn: &mut SpdyConn<L>) {
        let late: Vec<String> = self
            .pairs
            .iter()
            .filter(|(_, p)| p.since.elapsed() >= STREAM_CREATION_TIMEOUT)
            .map(|(r, _)| r.clone())
            .collect();
        for r in late {
            if let Some(p) = self.pairs.remove(&r) {
                let msg = format!("(request={r}) timed out waiting for streams");
                log::info!("port-forward: {msg}");
                if let Some(err) = p.error {
                    let _ = conn.session.send_data(err, msg.as_bytes(), true);
                }
                if let Some(data) = p.data {
                    let _ = conn.session.close(data);
                }
            }
        }
    }

    /// Moves bytes between one forwarding's pod socket and its data stream.
    fn move_bytes<L: ByteLink>(
        &mut self,
        conn: &mut SpdyConn<L>,
        tok: u64,
        buf: &mut [u8],
        t: &Target,
        last_activity: &mut Instant,
    ) {
        let Some(f) = self.forwards.get_mut(&tok) else {
            return;
        };
        if let Err(e) = f.conn.write_pending() {
            let msg = t.error_message(f.conn.port, &e);
            // A pod that reset or stopped reading: only this connection ends.
            let fatal = !matches!(
                e.kind(),
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
            );
            self.fail(conn, tok, &msg, fatal);
            return;
        }
        for _ in 0..4 {
            if conn.link.pending() >= HIGH_WATER {
                return;
            }
            let Some(f) = self.forwards.get_mut(&tok) else {
                return;
            };
            match f.conn.read(buf) {
                Ok(None) => return,
                Ok(Some(0)) => {
                    self.remove(conn, tok);
                    return;
                }
                Ok(Some(n)) => {
                    *last_activity = Instant::now();
                    if let Err(e) = conn.session.send_data(f.data, &buf[..n], false) {
                        log::debug!("spdy: {e}");
                        self.remove(conn, tok);
                        return;
                    }
                    conn.push();
                }
                Err(e) => {
                    let msg = t.error_message(f.conn.port, &e);
                    let fatal = !matches!(
                        e.kind(),
                        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
                    );
                    self.fail(conn, tok, &msg, fatal);
                    return;
                }
            }
        }
    }

    /// Reports a forwarding's failure on its error stream and ends it.
    fn fail<L: ByteLink>(&mut self, conn: &mut SpdyConn<L>, tok: u64, msg: &str, fatal: bool) {
        if let Some(f) = self.forwards.get(&tok) {
            let body = serde_json::to_vec(&ErrResponse {
                close_connection: fatal,
                message: msg,
            })
            .unwrap_or_default();
            let mut line = body;
            line.push(b'\n');
            let _ = conn.session.send_data(f.error, &line, false);
        }
        self.remove(conn, tok);
    }

    /// Ends a forwarding: the pod socket closed, both streams closed.
    fn remove<L: ByteLink>(&mut self, conn: &mut SpdyConn<L>, tok: u64) {
        if let Some(mut f) = self.forwards.remove(&tok) {
            f.conn.close();
            self.by_stream.remove(&f.data);
            self.by_stream.remove(&f.error);
            // Streams the client already reset are gone: nothing to close.
            let _ = conn.session.close(f.data);
            let _ = conn.session.close(f.error);
        }
    }
}

/// A port-forward stream's `port` and `streamtype` headers, checked as upstream's
/// `httpStreamReceived` does.
fn check_stream(headers: &[(String, String)]) -> Result<(u16, String), String> {
    let port = header(headers, "port").unwrap_or_default();
    if port.is_empty() {
        return Err("\"port\" header is required".into());
    }
    let n: u16 = port
        .parse()
        .map_err(|e| format!("unable to parse {port:?} as a port: {e}"))?;
    if n < 1 {
        return Err(format!("port {port:?} must be > 0"));
    }
    let kind = header(headers, "streamtype").unwrap_or_default();
    if kind.is_empty() {
        return Err("\"streamType\" header is required".into());
    }
    if kind != "error" && kind != "data" {
        return Err(format!("invalid stream type {kind:?}"));
    }
    Ok((n, kind))
}

#[cfg(test)]
mod tests {
    use super::super::httpstream::testing::Client;
    use super::super::wire::{TestConn, Wire};
    use super::*;
    use crate::spdy::{Frame, FLAG_FIN};
    use base::loops::shutdown_channel;
    use std::net::TcpListener;
    use std::os::unix::net::UnixStream;

    #[test]
    fn streams_need_a_port_and_a_type() {
        let h = |p: &[(&str, &str)]| {
            p.iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            check_stream(&h(&[("port", "80"), ("streamtype", "data")])),
            Ok((80, "data".to_string()))
        );
        assert!(check_stream(&h(&[("streamtype", "data")]))
            .expect_err("no port")
            .contains("\"port\" header is required"));
        assert!(check_stream(&h(&[("port", "0"), ("streamtype", "data")]))
            .expect_err("zero")
            .contains("must be > 0"));
        assert!(check_stream(&h(&[("port", "99999"), ("streamtype", "data")])).is_err());
        assert!(check_stream(&h(&[("port", "80")]))
            .expect_err("no type")
            .contains("is required"));
        assert!(check_stream(&h(&[("port", "80"), ("streamtype", "stdin")]))
            .expect_err("bad type")
            .contains("invalid stream type"));
    }

    #[test]
    fn channels_pair_up_per_port() {
        assert_eq!(channels(0), (0, 1));
        assert_eq!(channels(3), (6, 7));
        assert_eq!(channels(1000), (254, 255));
    }

    #[test]
    fn a_pod_connection_sends_what_waits_and_shuts_after_the_client() {
        let l = TcpListener::bind("127.0.0.1:0").expect("listen");
        let sock = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        sock.set_nonblocking(true).expect("nonblocking");
        let (mut peer, _) = l.accept().expect("accept");
        let mut c = PodConn::new(80);
        c.sock = Some(sock);
        assert_eq!(c.events(true), libc::POLLIN);
        c.to_pod.extend_from_slice(b"GET / HTTP/1.0\r\n\r\n");
        assert_eq!(c.events(false), libc::POLLOUT);
        c.client_done = true;
        c.write_pending().expect("write");
        let mut got = String::new();
        peer.read_to_string(&mut got).expect("read to the end");
        assert_eq!(got, "GET / HTTP/1.0\r\n\r\n");
        peer.write_all(b"ok").expect("answer");
        drop(peer);
        let mut buf = [0u8; 16];
        let mut seen = Vec::new();
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            match c.read(&mut buf).expect("read") {
                Some(0) => break,
                Some(n) => seen.extend_from_slice(&buf[..n]),
                None => assert!(Instant::now() < until, "no end"),
            }
        }
        assert_eq!(seen, b"ok");
    }

    #[test]
    fn spdy_port_forward_pairs_streams_and_dials_each_request() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("listen");
        let port = listener.local_addr().expect("addr").port().to_string();
        let closed = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("addr")
            .port()
            .to_string();
        let pod = base::testutil::spawn_named("test-pod", move || {
            let (mut s, _) = listener.accept().expect("accept");
            let mut got = Vec::new();
            s.read_to_end(&mut got).expect("read");
            s.write_all(b"pong").expect("answer");
            got
        });
        let (server, client) = UnixStream::pair().expect("pair");
        let (_shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop);
        let target = Target {
            pod: "p_ns".into(),
            uid: "u".into(),
            // Our own namespace stands in for the pod's.
            sandbox_pid: std::process::id(),
            ports: Vec::new(),
        };
        let session = base::testutil::spawn_named("test-session", move || {
            run_spdy(Wire::new(TestConn(server)), &target, &loops);
        });
        let mut c = Client::new(client);
        let headers = |kind: &'static str, port: &str, req: &'static str| {
            [
                ("streamtype", kind.to_string()),
                ("port", port.to_string()),
                ("requestid", req.to_string()),
            ]
        };
        for (sid, kind, p, req) in [
            (1, "error", port.as_str(), "0"),
            (3, "data", port.as_str(), "0"),
            (5, "error", closed.as_str(), "1"),
            (7, "data", closed.as_str(), "1"),
        ] {
            let h = headers(kind, p, req);
            let h: Vec<(&str, &str)> = h.iter().map(|(n, v)| (*n, v.as_str())).collect();
            c.open(sid, &h);
            match c.next_frame() {
                Some(Frame::SynReply { stream_id, .. }) => assert_eq!(stream_id, sid),
                other => panic!("{other:?}"),
            }
        }
        // A stream without a port is refused.
        c.open(9, &[("streamtype", "data")]);
        c.send(&Frame::Data {
            stream_id: 3,
            flags: FLAG_FIN,
            data: b"ping".to_vec(),
        });
        let mut data: Vec<(u32, Vec<u8>)> = Vec::new();
        let mut fins = Vec::new();
        let mut reset = Vec::new();
        while !(fins.contains(&3) && fins.contains(&5)) {
            match c.next_frame().expect("frames") {
                Frame::Data {
                    stream_id,
                    flags,
                    data: d,
                } => {
                    if !d.is_empty() {
                        data.push((stream_id, d));
                    }
                    if flags & FLAG_FIN != 0 {
                        fins.push(stream_id);
                    }
                }
                Frame::RstStream { stream_id, .. } => reset.push(stream_id),
                _ => {}
            }
        }
        assert_eq!(pod.join().expect("pod"), b"ping");
        assert!(data.contains(&(3, b"pong".to_vec())), "{data:?}");
        let err = data
            .iter()
            .find(|(s, _)| *s == 5)
            .map(|(_, d)| String::from_utf8_lossy(d).into_owned())
            .expect("an error for the closed port");
        assert!(
            err.contains("\"closeConnection\":true") && err.contains("error forwarding port"),
            "{err}"
        );
        assert_eq!(reset, [9]);
        c.send(&Frame::GoAway {
            last_good_stream_id: 0,
            status: 0,
        });
        drop(c);
        session.join().expect("session");
    }
}
