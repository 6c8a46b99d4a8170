//! SPDY/3.1 for exec, attach and port-forward (upstream's `httpstream.Handshake`,
//! `spdy.NewResponseUpgrader` and the `httpstream` halves of
//! `cri/streaming/{remotecommand,portforward}`), on the sans-IO session of
//! [`crate::spdy::conn`].
//!
//! The upgrade: `Connection: Upgrade`, `Upgrade: SPDY/3.1`, and the protocol from
//! `X-Stream-Protocol-Version` (the client's first that the server knows; none named
//! falls back to the oldest). The answer is `101` with the chosen version, then SPDY
//! frames both ways. The client opens the streams (SYN_STREAM with `streamtype`); each
//! gets its SYN_REPLY at once.
//!
//! SPDY runs over a [`ByteLink`]: the raw connection after the `101`, or the binary
//! messages of a WebSocket (`SPDY/3.1+portforward.k8s.io`, the tunnel kubectl ≥ 1.31
//! uses for port-forward).
//!
//! Over 800 lines: the upgrade, the two links, the exec/attach frontend, and the
//! blocking SPDY client the sessions' tests drive them with.

use std::io::{self, Read};
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::Message;

use super::remotecommand::{ClientGone, Frontend, Input, ResizeDecoder};
use super::websocket::{self, WsConn, WsEnd};
use super::wire::Wire;
use super::{pollfd, Outcome, POLL_TICK, READ_BUDGET, STREAM_CREATION_TIMEOUT};
use crate::server::{Reply, Req};
use crate::spdy::conn::{Config, Event, Session};
use crate::spdy::RstStatus;
use runtime::OutputKind;

/// The remote command protocols over SPDY, most preferred first (v5 is v4 over
/// SPDY: its close signal is WebSocket's).
pub const REMOTE_COMMAND_PROTOCOLS: [&str; 5] = [
    "v5.channel.k8s.io",
    "v4.channel.k8s.io",
    "v3.channel.k8s.io",
    "v2.channel.k8s.io",
    "channel.k8s.io",
];

/// The port-forward protocol.
pub const PORT_FORWARD_PROTOCOL: &str = "portforward.k8s.io";

/// How long a finished session waits for the client to take the rest and go.
const LINGER: Duration = Duration::from_secs(10);

/// Streams a session keeps open at once: exec opens 5, a port-forward 2 per
/// connection (kubectl keeps ~100 connections busy in our tests).
const MAX_STREAMS: usize = 512;

/// Whether a request asks for a SPDY upgrade (upstream's `IsUpgradeRequest` with
/// `SPDY/3.1`).
pub(crate) fn is_upgrade_request(req: &Req) -> bool {
    let connection = req
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("Connection"))
        .flat_map(|(_, v)| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
    let upgrade = req
        .header("Upgrade")
        .is_some_and(|u| u.to_ascii_lowercase().contains("spdy/3.1"));
    connection && upgrade
}

/// The client's protocols (`X-Stream-Protocol-Version`, every header, commas split).
pub(crate) fn client_protocols(req: &Req) -> Vec<String> {
    req.headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("X-Stream-Protocol-Version"))
        .flat_map(|(_, v)| v.split(','))
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

/// Checks a SPDY upgrade and negotiates its protocol among `server` (upstream's
/// `Handshake`): "" when the client names none; 400 without the upgrade headers; 403
/// when nothing matches.
pub fn check_upgrade(req: &Req, server: &[&'static str]) -> Result<&'static str, Reply> {
    if !is_upgrade_request(req) {
        return Err(Reply::text(
            400,
            "unable to upgrade: missing upgrade headers in request",
        ));
    }
    let client = client_protocols(req);
    if client.is_empty() {
        return Ok("");
    }
    client
        .iter()
        .find_map(|c| server.iter().find(|s| **s == c.as_str()).copied())
        .ok_or_else(|| {
            // Go prints the lists with `%v` (`[a b]`), `http.Error` adds the newline,
            // and each protocol the server accepts is one header line.
            let refused = Reply::text(
                403,
                format!(
                    "unable to upgrade: unable to negotiate protocol: client supports [{}], \
                     server accepts [{}]\n",
                    client.join(" "),
                    server.join(" ")
                ),
            );
            server.iter().fold(refused, |r, p| {
                r.with_header("X-Accepted-Stream-Protocol-Versions", *p)
            })
        })
}

/// Writes the `101` of a SPDY upgrade.
pub fn accept(wire: &mut Wire, protocol: &str) -> io::Result<()> {
    let mut headers = vec![("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1")];
    if !protocol.is_empty() {
        headers.push(("X-Stream-Protocol-Version", protocol));
    }
    wire.write_head(101, &headers)
}

/// A byte stream SPDY runs on: the raw connection, or a WebSocket tunnel.
pub trait ByteLink {
    /// The socket to poll.
    fn fd(&mut self) -> RawFd;
    /// Bytes read ahead that `poll(2)` cannot see.
    fn has_buffered(&mut self) -> bool;
    /// Something waits for the socket to be writable.
    fn wants_write(&mut self) -> bool;
    /// Bytes queued for the client.
    fn pending(&mut self) -> usize;
    /// Appends what the client sent, without waiting, at most about `budget` bytes;
    /// false once the client has closed.
    fn read_into(&mut self, out: &mut Vec<u8>, budget: usize) -> Result<bool, String>;
    /// Queues bytes for the client.
    fn send(&mut self, data: Vec<u8>) -> Result<(), String>;
    /// Sends what the socket takes now.
    fn flush(&mut self) -> Result<(), String>;
    /// True once shutdown has begun.
    fn is_stopped(&mut self) -> bool;
    /// Sends what is queued and waits (at most `linger`) for the client to close.
    fn finish(&mut self, linger: Duration);
}

impl ByteLink for Wire {
    fn fd(&mut self) -> RawFd {
        Wire::fd(self)
    }
    fn has_buffered(&mut self) -> bool {
        Wire::has_buffered(self)
    }
    fn wants_write(&mut self) -> bool {
        Wire::wants_write(self)
    }
    fn pending(&mut self) -> usize {
        Wire::pending(self)
    }
    fn read_into(&mut self, out: &mut Vec<u8>, budget: usize) -> Result<bool, String> {
        let mut chunk = [0u8; 16 * 1024];
        let mut taken = 0;
        while taken < budget {
            match self.read(&mut chunk) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    out.extend_from_slice(&chunk[..n]);
                    taken += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(true)
    }
    fn send(&mut self, data: Vec<u8>) -> Result<(), String> {
        self.queue(&data);
        Ok(())
    }
    fn flush(&mut self) -> Result<(), String> {
        Wire::flush(self).map_err(|e| e.to_string())
    }
    fn is_stopped(&mut self) -> bool {
        Wire::is_stopped(self)
    }
    fn finish(&mut self, linger: Duration) {
        let until = Instant::now() + linger;
        let mut sink = [0u8; 16 * 1024];
        loop {
            if Wire::flush(self).is_err() || self.is_stopped() {
                return;
            }
            // Drain until the client closes: closing with unread bytes would reset
            // the connection and could cut what it has not read yet.
            let closed = loop {
                match self.read(&mut sink) {
                    Ok(0) => break true,
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break false,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => break true,
                }
            };
            let now = Instant::now();
            if (closed && !self.wants_write()) || now >= until {
                return;
            }
            let mut events = libc::POLLIN;
            if self.wants_write() {
                events |= libc::POLLOUT;
            }
            let mut fds = [pollfd(Wire::fd(self), events)];
            if super::poll(
                &mut fds,
                until.saturating_duration_since(now).min(POLL_TICK),
            )
            .is_err()
            {
                return;
            }
        }
    }
}

impl ByteLink for WsConn {
    fn fd(&mut self) -> RawFd {
        self.wire().fd()
    }
    fn has_buffered(&mut self) -> bool {
        self.wire().has_buffered()
    }
    fn wants_write(&mut self) -> bool {
        self.wire().wants_write()
    }
    fn pending(&mut self) -> usize {
        WsConn::pending(self)
    }
    fn read_into(&mut self, out: &mut Vec<u8>, budget: usize) -> Result<bool, String> {
        let start = out.len();
        while out.len() - start < budget {
            match self.read() {
                Ok(Some(data)) => out.extend_from_slice(&data),
                Ok(None) => break,
                Err(WsEnd::Closed) => return Ok(false),
                Err(WsEnd::TooBig(m)) => {
                    self.close(CloseCode::Size, "message too big");
                    let _ = WsConn::flush(self);
                    return Err(m);
                }
                Err(WsEnd::Broken(m)) => return Err(m),
            }
        }
        Ok(true)
    }
    fn send(&mut self, data: Vec<u8>) -> Result<(), String> {
        WsConn::send(self, Message::binary(data)).map_err(|e| e.to_string())
    }
    fn flush(&mut self) -> Result<(), String> {
        WsConn::flush(self).map_err(|e| e.to_string())
    }
    fn is_stopped(&mut self) -> bool {
        self.wire().is_stopped()
    }
    fn finish(&mut self, linger: Duration) {
        websocket::finish(self, CloseCode::Normal, "", linger);
    }
}

/// A SPDY session on a link: frames in, events out, frames queued on the link.
#[derive(Debug)]
pub(crate) struct SpdyConn<L: ByteLink> {
    /// The link.
    pub link: L,
    /// The session state.
    pub session: Session,
    inbuf: Vec<u8>,
    /// The client closed the link.
    pub eof: bool,
}

impl<L: ByteLink> SpdyConn<L> {
    /// A session on a link just upgraded.
    pub(crate) fn new(link: L) -> SpdyConn<L> {
        SpdyConn {
            link,
            session: Session::new(Config {
                max_streams: MAX_STREAMS,
                ..Config::default()
            }),
            inbuf: Vec::new(),
            eof: false,
        }
    }

    /// Reads what the client sent and decodes it into `events`. A broken session
    /// (bad frames) queues its GOAWAY and is an error.
    pub(crate) fn read_events(&mut self, events: &mut Vec<Event>) -> Result<(), String> {
        self.inbuf.clear();
        if !self.link.read_into(&mut self.inbuf, READ_BUDGET)? {
            self.eof = true;
        }
        if !self.inbuf.is_empty() {
            self.session.feed(&self.inbuf);
        }
        loop {
            match self.session.poll_event() {
                Ok(Some(ev)) => events.push(ev),
                Ok(None) => break,
                Err(e) => {
                    // A frame that breaks the protocol or its bounds (over 1 MiB): the
                    // GOAWAY is queued, the session ends here.
                    let why = base::loops::error_chain(&e);
                    log::warn!("spdy: closing the session: {why}");
                    self.push();
                    return Err(why);
                }
            }
        }
        self.push();
        Ok(())
    }

    /// Moves the session's queued frames onto the link.
    pub(crate) fn push(&mut self) {
        if self.session.pending_output() > 0 {
            let out = self.session.take_output();
            // A link that fails shows it at the next flush.
            let _ = self.link.send(out);
        }
    }

    /// Waits (at most `timeout`) until the link has something or can take more, or
    /// one of `extra` is ready (their `revents` are set). True when the client hung
    /// up (seen even while not reading it).
    pub(crate) fn wait(
        &mut self,
        read: bool,
        extra: &mut [libc::pollfd],
        timeout: Duration,
    ) -> bool {
        let mut events = libc::POLLRDHUP;
        if read {
            events |= libc::POLLIN;
        }
        if self.link.wants_write() {
            events |= libc::POLLOUT;
        }
        let mut fds = vec![pollfd(self.link.fd(), events)];
        fds.extend_from_slice(extra);
        let timeout = if read && self.link.has_buffered() {
            Duration::ZERO
        } else {
            timeout
        };
        // A failed poll shows up again as a failed read or write.
        let _ = super::poll(&mut fds, timeout);
        for (e, f) in extra.iter_mut().zip(&fds[1..]) {
            e.revents = f.revents;
        }
        fds[0].revents & super::HUNG_UP != 0
    }

    /// Says goodbye: GOAWAY (last: spdystream stops reading at it), then what is
    /// queued, and the client's close awaited.
    pub(crate) fn finish(&mut self) {
        let _ = self.session.go_away(0);
        self.push();
        self.link.finish(LINGER);
    }
}

/// The streams of an exec or attach, by type.
#[derive(Debug, Default, Clone, Copy)]
struct Streams {
    error: Option<u32>,
    stdin: Option<u32>,
    stdout: Option<u32>,
    stderr: Option<u32>,
    resize: Option<u32>,
}

/// An exec or attach over SPDY (after the `101`): waits for the client's streams
/// (upstream's `waitForStreams`, 30 s), then runs the session.
pub fn serve_remote_command<L: ByteLink>(
    link: L,
    protocol: &str,
    runtime: &dyn runtime::Runtime,
    t: &super::remotecommand::Target,
) {
    let mut conn = SpdyConn::new(link);
    // Version 1 is what a client that names no version speaks.
    let v3_or_later = matches!(
        protocol,
        "v5.channel.k8s.io" | "v4.channel.k8s.io" | "v3.channel.k8s.io"
    );
    let mut expected = 1;
    for on in [t.opts.stdin, t.opts.stdout, t.opts.stderr] {
        expected += usize::from(on);
    }
    if t.opts.tty && v3_or_later {
        expected += 1;
    }
    let mut early = Vec::new();
    let Some(streams) = wait_for_streams(&mut conn, expected, &mut early) else {
        conn.finish();
        return;
    };
    let mut front = SpdyFrontend {
        conn,
        streams,
        status_json: matches!(protocol, "v5.channel.k8s.io" | "v4.channel.k8s.io"),
        resize: ResizeDecoder::default(),
        early,
    };
    super::remotecommand::run(&mut front, runtime, t);
}

/// Replies to each stream the client opens until `expected` have come; None on a
/// timeout, the client leaving, or shutdown. Other events are kept in `early`.
fn wait_for_streams<L: ByteLink>(
    conn: &mut SpdyConn<L>,
    expected: usize,
    early: &mut Vec<Event>,
) -> Option<Streams> {
    let until = Instant::now() + STREAM_CREATION_TIMEOUT;
    let mut streams = Streams::default();
    let mut received = 0;
    let mut events = Vec::new();
    while received < expected {
        if Instant::now() >= until {
            log::info!("timed out waiting for the client to create streams");
            return None;
        }
        if conn.link.is_stopped() || conn.eof {
            return None;
        }
        events.clear();
        if let Err(e) = conn.read_events(&mut events) {
            log::debug!("spdy: {e}");
            return None;
        }
        for ev in events.drain(..) {
            let Event::Opened {
                stream_id, headers, ..
            } = ev
            else {
                early.push(ev);
                continue;
            };
            let kind = header(&headers, "streamtype").unwrap_or_default();
            let slot = match kind.as_str() {
                "error" => &mut streams.error,
                "stdin" => &mut streams.stdin,
                "stdout" => &mut streams.stdout,
                "stderr" => &mut streams.stderr,
                "resize" => &mut streams.resize,
                other => {
                    log::info!("spdy: unexpected stream type {other:?}");
                    let _ = conn.session.reply(stream_id, Vec::new(), false);
                    continue;
                }
            };
            *slot = Some(stream_id);
            received += 1;
            if let Err(e) = conn.session.reply(stream_id, Vec::new(), false) {
                log::info!("spdy: {e}");
            }
        }
        conn.push();
        if conn.link.flush().is_err() {
            return None;
        }
        if received < expected {
            conn.wait(true, &mut [], POLL_TICK);
        }
    }
    Some(streams)
}

/// The value of header `name` (names are lowercase in SPDY).
pub(crate) fn header(headers: &[(String, String)], name: &str) -> Option<String> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.clone())
}

/// SPDY streams as a remote command [`Frontend`].
#[derive(Debug)]
struct SpdyFrontend<L: ByteLink> {
    conn: SpdyConn<L>,
    streams: Streams,
    status_json: bool,
    resize: ResizeDecoder,
    /// Events that came while the streams were being opened.
    early: Vec<Event>,
}

impl<L: ByteLink> SpdyFrontend<L> {
    fn handle(&mut self, ev: Event, inputs: &mut Vec<Input>) -> Result<(), ClientGone> {
        match ev {
            Event::Data {
                stream_id,
                data,
                fin,
            } => {
                let n = data.len();
                if Some(stream_id) == self.streams.stdin {
                    if !data.is_empty() {
                        inputs.push(Input::Stdin(data));
                    }
                    if fin {
                        inputs.push(Input::StdinEnd);
                    }
                } else if Some(stream_id) == self.streams.resize {
                    inputs.extend(self.resize.feed(&data).into_iter().map(Input::Resize));
                }
                // spdystream ignores windows; giving bytes back costs nothing.
                self.conn.session.consumed(stream_id, n);
            }
            Event::Reset { stream_id, .. } if Some(stream_id) == self.streams.stdin => {
                inputs.push(Input::StdinEnd)
            }
            Event::Opened { stream_id, .. } => {
                let _ = self.conn.session.reset(stream_id, RstStatus::RefusedStream);
            }
            Event::GoAway { .. } => return Err(ClientGone::Closed),
            _ => {}
        }
        Ok(())
    }

    fn send(&mut self, stream: Option<u32>, data: &[u8]) -> Result<(), ClientGone> {
        let Some(id) = stream else {
            return Ok(());
        };
        match self.conn.session.send_data(id, data, false) {
            Ok(_) => {}
            // The client reset that stream: what it would carry is dropped.
            Err(e) => log::debug!("spdy: {e}"),
        }
        self.conn.push();
        Ok(())
    }
}

impl<L: ByteLink> Frontend for SpdyFrontend<L> {
    fn fd(&mut self) -> RawFd {
        self.conn.link.fd()
    }

    fn has_buffered(&mut self) -> bool {
        !self.early.is_empty() || self.conn.link.has_buffered()
    }

    fn wants_write(&mut self) -> bool {
        self.conn.link.wants_write()
    }

    fn pending(&mut self) -> usize {
        self.conn.link.pending()
    }

    fn read(&mut self, inputs: &mut Vec<Input>) -> Result<(), ClientGone> {
        let mut events = std::mem::take(&mut self.early);
        let read = self.conn.read_events(&mut events);
        for ev in events {
            self.handle(ev, inputs)?;
        }
        self.conn.push();
        read.map_err(ClientGone::Broken)?;
        if self.conn.eof {
            return Err(ClientGone::Closed);
        }
        Ok(())
    }

    fn output(&mut self, kind: OutputKind, data: &[u8]) -> Result<(), ClientGone> {
        let stream = match kind {
            OutputKind::Stdout => self.streams.stdout,
            OutputKind::Stderr => self.streams.stderr,
        };
        self.send(stream, data)
    }

    fn status(&mut self, outcome: &Outcome) -> Result<(), ClientGone> {
        let body = if self.status_json {
            outcome.status_json()
        } else {
            outcome.status_text()
        };
        if body.is_empty() {
            return Ok(());
        }
        self.send(self.streams.error, &body)
    }

    fn flush(&mut self) -> Result<(), ClientGone> {
        self.conn.push();
        self.conn.link.flush().map_err(ClientGone::Broken)
    }

    fn finish(&mut self) {
        let s = self.streams;
        for id in [s.stdout, s.stderr, s.error, s.stdin, s.resize]
            .into_iter()
            .flatten()
        {
            // A stream the client already reset or we closed is left alone.
            let _ = self.conn.session.close(id);
        }
        self.conn.finish();
    }

    fn is_stopped(&mut self) -> bool {
        self.conn.link.is_stopped()
    }
}

/// A blocking SPDY client for the sessions' unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    use std::time::Duration;

    use crate::spdy::{Decoder, Encoder, Frame, Limits, FLAG_FIN};

    /// A SPDY client on a socket: frames out, frames in (blocking, with a timeout).
    #[derive(Debug)]
    pub(crate) struct Client {
        sock: UnixStream,
        enc: Encoder,
        dec: Decoder,
    }

    impl Client {
        pub(crate) fn new(sock: UnixStream) -> Client {
            sock.set_read_timeout(Some(Duration::from_secs(20)))
                .expect("timeout");
            Client {
                sock,
                enc: Encoder::new(),
                dec: Decoder::new(Limits::default()),
            }
        }

        pub(crate) fn send(&mut self, f: &Frame) {
            let mut out = Vec::new();
            self.enc.encode(f, &mut out).expect("encode");
            self.sock.write_all(&out).expect("write");
        }

        pub(crate) fn open(&mut self, id: u32, headers: &[(&str, &str)]) {
            let headers = headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect();
            self.send(&Frame::SynStream {
                stream_id: id,
                associated_to: 0,
                priority: 0,
                slot: 0,
                flags: 0,
                headers,
            });
        }

        /// The next frame; None once the server closed.
        pub(crate) fn next_frame(&mut self) -> Option<Frame> {
            loop {
                if let Some(f) = self.dec.next_frame().expect("frame") {
                    return Some(f);
                }
                let mut buf = [0u8; 16 * 1024];
                let n = self.sock.read(&mut buf).expect("read");
                if n == 0 {
                    return None;
                }
                self.dec.feed(&buf[..n]);
            }
        }

        /// Frames until GOAWAY (or the end): data per stream, the streams FIN'd.
        pub(crate) fn until_go_away(&mut self) -> (Vec<(u32, Vec<u8>)>, Vec<u32>) {
            let (mut data, mut fins) = (Vec::new(), Vec::new());
            while let Some(f) = self.next_frame() {
                match f {
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
                    Frame::GoAway { .. } => break,
                    _ => {}
                }
            }
            (data, fins)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::Client;
    use super::*;
    use crate::spdy::{Frame, FLAG_FIN};
    use crate::streams::remotecommand::Target;
    use crate::streams::wire::TestConn;
    use crate::streams::Verb;
    use runtime::fake::FakeRuntime;
    use runtime::{ExecResult, StreamOptions};
    use std::io::Write;
    use std::os::unix::net::UnixStream;
    use std::sync::Arc;

    fn req(headers: &[(&str, &str)]) -> Req {
        let mut r = Req::new("POST", "/exec/ns/p/c?command=ls&stdout=1");
        r.headers = headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        r
    }

    fn running() -> (Arc<FakeRuntime>, String) {
        FakeRuntime::with_running_container("k8s_c_p_ns_uid_0")
    }

    #[test]
    fn spdy_exec_replies_each_stream_relays_stdin_and_ends_with_the_status() {
        let (rt, id) = running();
        rt.set_exec_result(
            &id,
            ExecResult {
                exit_code: 42,
                stdout: Vec::new(),
                stderr: Vec::new(),
            },
        );
        let (server, client) = UnixStream::pair().expect("pair");
        let target = Target {
            verb: Verb::Exec,
            container_id: id.clone(),
            cmd: vec!["cat".into()],
            opts: StreamOptions {
                stdin: true,
                stdout: true,
                stderr: false,
                tty: false,
            },
        };
        let session_rt = rt.clone();
        let session = base::testutil::spawn_named("test-session", move || {
            serve_remote_command(
                Wire::new(TestConn(server)),
                "v4.channel.k8s.io",
                session_rt.as_ref(),
                &target,
            );
        });
        let mut c = Client::new(client);
        for (sid, kind) in [(1, "error"), (3, "stdin"), (5, "stdout")] {
            c.open(sid, &[("streamtype", kind)]);
            match c.next_frame() {
                Some(Frame::SynReply { stream_id, .. }) => assert_eq!(stream_id, sid),
                other => panic!("{other:?}"),
            }
        }
        c.send(&Frame::Data {
            stream_id: 3,
            flags: FLAG_FIN,
            data: b"hi".to_vec(),
        });
        let until = Instant::now() + Duration::from_secs(10);
        let mut process = loop {
            if let Some(p) = rt.take_process(&id) {
                break p;
            }
            assert!(Instant::now() < until, "no exec");
            std::thread::sleep(Duration::from_millis(5));
        };
        let mut input = Vec::new();
        process.read_to_end(&mut input).expect("stdin");
        assert_eq!(input, b"hi", "stdin's FIN is the process's end of input");
        process.write_all(b"out").expect("stdout");
        drop(process);
        let (data, fins) = c.until_go_away();
        drop(c);
        session.join().expect("session");
        assert_eq!(data[0], (5, b"out".to_vec()));
        let status: serde_json::Value = serde_json::from_slice(&data[1].1).expect("status");
        assert_eq!(data[1].0, 1);
        assert_eq!(status["details"]["causes"][0]["message"], "42");
        assert!(fins.contains(&1) && fins.contains(&5), "{fins:?}");
    }

    #[test]
    fn the_handshake_negotiates_as_upstreams() {
        let up = [("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1")];
        let mut h = up.to_vec();
        h.push(("X-Stream-Protocol-Version", "v4.channel.k8s.io"));
        h.push(("X-Stream-Protocol-Version", "v3.channel.k8s.io"));
        assert_eq!(
            check_upgrade(&req(&h), &REMOTE_COMMAND_PROTOCOLS).expect("ok"),
            "v4.channel.k8s.io"
        );
        // No version named: no negotiation (the oldest protocol).
        assert_eq!(
            check_upgrade(&req(&up), &REMOTE_COMMAND_PROTOCOLS).expect("ok"),
            ""
        );
        let mut h = up.to_vec();
        h.push(("X-Stream-Protocol-Version", "v9.channel.k8s.io"));
        let refused = check_upgrade(&req(&h), &REMOTE_COMMAND_PROTOCOLS).expect_err("403");
        assert_eq!(refused.status, 403);
        assert!(String::from_utf8_lossy(&refused.body).contains("unable to negotiate protocol"));
        let accepted: Vec<&str> = refused
            .headers
            .iter()
            .filter(|(n, _)| *n == "X-Accepted-Stream-Protocol-Versions")
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(accepted, REMOTE_COMMAND_PROTOCOLS);
        let refused = check_upgrade(&req(&[]), &REMOTE_COMMAND_PROTOCOLS).expect_err("400");
        assert_eq!(refused.status, 400);
        assert!(String::from_utf8_lossy(&refused.body).contains("missing upgrade headers"));
    }
}
