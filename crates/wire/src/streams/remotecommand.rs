//! Exec and attach sessions (upstream's `ServeExec`/`ServeAttach`): the process's
//! streams on one side, the client's on the other, one thread, one `poll(2)` loop.
//!
//! The session does not know the client's protocol: a [`Frontend`] turns what the
//! client sends into [`Input`]s (stdin bytes, stdin's end, terminal sizes) and carries
//! output and the final status back. WebSocket channels are [`WsFrontend`]; SPDY
//! streams plug in the same way.
//!
//! Flow control: the client is not read while more than [`HIGH_WATER`] of its stdin
//! waits for the process, and the process is not read while more than [`HIGH_WATER`]
//! waits for the client. When the output ends (the process exited, or the runtime
//! closed the stream) the exit code is fetched and sent as the status; when the
//! client goes away first, the process's connection is dropped (its stdin ends; a
//! command that ignores that runs on, as upstream's does).

use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use tungstenite::protocol::frame::coding::CloseCode;

use super::websocket::{self, ChannelProtocol, WsConn, WsEnd};
use super::{pollfd, Outcome, Verb, HIGH_WATER, IDLE_TIMEOUT, POLL_TICK, READ_BUDGET};
use runtime::{OutputKind, ProcessIo, Runtime, StreamOptions, TermSize};

/// Channel numbers of the remote command protocols.
pub(crate) const STDIN: u8 = 0;
/// Standard output.
pub(crate) const STDOUT: u8 = 1;
/// Standard error.
pub(crate) const STDERR: u8 = 2;
/// The error (status) channel.
pub(crate) const ERROR: u8 = 3;
/// Terminal sizes from the client.
pub(crate) const RESIZE: u8 = 4;
/// v5's close signal: `[CLOSE, channel]`.
pub(crate) const CLOSE: u8 = 255;

/// How long the exit code of a finished exec is waited for (the engine records it a
/// moment after closing the stream).
const EXIT_CODE_WAIT: Duration = Duration::from_secs(10);

/// How long a finished session waits for the client to take the rest and close.
const LINGER: Duration = Duration::from_secs(10);

/// The most pending resize bytes kept while a JSON object is incomplete; a client
/// sending more without a complete size is ignored.
const MAX_RESIZE_BUFFER: usize = 4096;

/// What the session runs.
#[derive(Debug, Clone)]
pub struct Target {
    /// Exec or attach.
    pub verb: Verb,
    /// The running container.
    pub container_id: String,
    /// The command (exec).
    pub cmd: Vec<String>,
    /// The streams asked for.
    pub opts: StreamOptions,
}

/// Something the client sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Input {
    /// Bytes for the process's stdin.
    Stdin(Vec<u8>),
    /// The client closed stdin.
    StdinEnd,
    /// A new terminal size.
    Resize(TermSize),
}

/// Why a session's client can be used no more.
#[derive(Debug)]
pub(crate) enum ClientGone {
    /// It closed.
    Closed,
    /// It broke the protocol or the connection broke.
    Broken(String),
}

impl ClientGone {
    /// Why the client is gone, for the session's last log line.
    fn reason(&self) -> &str {
        match self {
            ClientGone::Closed => "it closed the connection",
            ClientGone::Broken(why) => why,
        }
    }
}

/// The client's side of a session, whatever its protocol.
pub(crate) trait Frontend {
    /// The client socket, for `poll(2)`.
    fn fd(&mut self) -> RawFd;
    /// Bytes read ahead that `poll(2)` cannot see.
    fn has_buffered(&mut self) -> bool;
    /// Whether something waits for the socket to be writable.
    fn wants_write(&mut self) -> bool;
    /// Bytes queued for the client.
    fn pending(&mut self) -> usize;
    /// Reads what the client sent, without waiting, into `inputs`.
    fn read(&mut self, inputs: &mut Vec<Input>) -> Result<(), ClientGone>;
    /// Queues process output.
    fn output(&mut self, kind: OutputKind, data: &[u8]) -> Result<(), ClientGone>;
    /// Queues the final status.
    fn status(&mut self, outcome: &Outcome) -> Result<(), ClientGone>;
    /// Sends what the socket takes now.
    fn flush(&mut self) -> Result<(), ClientGone>;
    /// Ends the session: everything queued is sent, the protocol's goodbye said, the
    /// client's awaited (bounded).
    fn finish(&mut self);
    /// True once shutdown has begun.
    fn is_stopped(&mut self) -> bool;
}

/// Terminal sizes from the resize stream: back-to-back JSON objects
/// `{"Width":80,"Height":24}` (upstream's `handleResizeEvents` decodes them with a
/// `json.Decoder`), arriving in any pieces.
#[derive(Debug, Default)]
pub(crate) struct ResizeDecoder {
    buf: Vec<u8>,
}

#[derive(serde::Deserialize)]
struct WireSize {
    #[serde(rename = "Width", default)]
    width: u16,
    #[serde(rename = "Height", default)]
    height: u16,
}

impl ResizeDecoder {
    /// Feeds bytes; returns every complete size.
    pub(crate) fn feed(&mut self, data: &[u8]) -> Vec<TermSize> {
        self.buf.extend_from_slice(data);
        let mut sizes = Vec::new();
        let mut used = 0;
        {
            let mut it = serde_json::Deserializer::from_slice(&self.buf).into_iter::<WireSize>();
            loop {
                match it.next() {
                    Some(Ok(s)) => {
                        used = it.byte_offset();
                        sizes.push(TermSize {
                            width: s.width,
                            height: s.height,
                        });
                    }
                    Some(Err(e)) if e.is_eof() => break,
                    Some(Err(_)) => {
                        // Not a size: upstream stops reading sizes; so do we.
                        used = self.buf.len();
                        break;
                    }
                    None => {
                        used = self.buf.len();
                        break;
                    }
                }
            }
        }
        self.buf.drain(..used);
        if self.buf.len() > MAX_RESIZE_BUFFER {
            self.buf.clear();
        }
        sizes
    }
}

/// Runs an exec or attach session until the process's output ends or the client
/// goes away.
pub(crate) fn run(front: &mut dyn Frontend, runtime: &dyn Runtime, t: &Target) {
    let (exec_id, mut io) = match start(runtime, t) {
        Ok(started) => started,
        Err(outcome) => {
            log::info!("{:?} in container {}: {outcome:?}", t.verb, t.container_id);
            if front.status(&outcome).is_ok() {
                front.finish();
            }
            return;
        }
    };
    match pump(front, runtime, t, exec_id.as_deref(), io.as_mut()) {
        Ok(()) => {}
        Err(gone) => {
            log::debug!(
                "{:?} in container {}: the client left: {}",
                t.verb,
                t.container_id,
                gone.reason()
            );
            return;
        }
    }
    let outcome = match &exec_id {
        Some(id) => exit_outcome(runtime, id, &t.cmd, front),
        None => Outcome::Success,
    };
    if front.status(&outcome).is_ok() {
        front.finish();
    }
}

/// Starts the exec or attaches; a failure is the status to report.
fn start(
    runtime: &dyn Runtime,
    t: &Target,
) -> Result<(Option<String>, Box<dyn ProcessIo>), Outcome> {
    match t.verb {
        Verb::Exec => runtime
            .exec_interactive(&t.container_id, &t.cmd, t.opts)
            .map(|s| (Some(s.exec_id), s.io))
            .map_err(|e| Outcome::Internal(format!("error executing command in container: {e}"))),
        Verb::Attach => runtime
            .attach(&t.container_id, t.opts)
            .map(|io| (None, io))
            .map_err(|e| Outcome::Internal(format!("error attaching to container: {e}"))),
    }
}

/// Moves bytes both ways until the process's output ends (`Ok`) or the client goes.
fn pump(
    front: &mut dyn Frontend,
    runtime: &dyn Runtime,
    t: &Target,
    exec_id: Option<&str>,
    io: &mut dyn ProcessIo,
) -> Result<(), ClientGone> {
    let mut stdin: Vec<u8> = Vec::new();
    let mut stdin_end = false;
    let mut stdin_closed = false;
    let mut inputs = Vec::new();
    let mut last_activity = Instant::now();
    loop {
        if front.is_stopped() {
            return Err(ClientGone::Broken("the kubelet is shutting down".into()));
        }
        if last_activity.elapsed() >= IDLE_TIMEOUT {
            return Err(ClientGone::Broken("idle timeout".into()));
        }
        let read_client = stdin.len() < HIGH_WATER;
        let read_process = front.pending() < HIGH_WATER;
        let mut client_events = libc::POLLRDHUP;
        if read_client {
            client_events |= libc::POLLIN;
        }
        if front.wants_write() {
            client_events |= libc::POLLOUT;
        }
        let mut process_events = 0;
        if read_process {
            process_events |= libc::POLLIN;
        }
        if !stdin.is_empty() {
            process_events |= libc::POLLOUT;
        }
        let mut fds = [
            pollfd(front.fd(), client_events),
            pollfd(io.fd(), process_events),
        ];
        let ready_now =
            (read_client && front.has_buffered()) || (read_process && io.has_buffered());
        let wait = if ready_now { Duration::ZERO } else { POLL_TICK };
        super::poll(&mut fds, wait).map_err(|e| ClientGone::Broken(e.to_string()))?;
        if !read_client && fds[0].revents & super::HUNG_UP != 0 {
            // Not reading (its stdin waits for the process), yet it has gone.
            return Err(ClientGone::Closed);
        }

        if read_client {
            inputs.clear();
            front.read(&mut inputs)?;
            if !inputs.is_empty() {
                last_activity = Instant::now();
            }
            for input in inputs.drain(..) {
                match input {
                    Input::Stdin(data) if t.opts.stdin && !stdin_end => {
                        stdin.extend_from_slice(&data)
                    }
                    Input::Stdin(_) => {}
                    Input::StdinEnd => stdin_end = true,
                    Input::Resize(size) if t.opts.tty => resize(runtime, t, exec_id, size),
                    Input::Resize(_) => {}
                }
            }
        }

        while !stdin.is_empty() {
            match io.write_input(&stdin) {
                Ok(0) => break,
                Ok(n) => {
                    stdin.drain(..n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // The process's stdin is gone (it closed it or exited): what the
                    // client still sends has nowhere to go.
                    log::debug!("stdin of container {}: {e}", t.container_id);
                    stdin.clear();
                    stdin_end = true;
                }
            }
        }
        if stdin_end && stdin.is_empty() && !stdin_closed {
            stdin_closed = true;
            if let Err(e) = io.close_input() {
                log::debug!("closing stdin of container {}: {e}", t.container_id);
            }
        }

        if read_process {
            let mut ended = false;
            // A few reads per round, so a fast process cannot starve the client.
            for _ in 0..8 {
                if front.pending() >= HIGH_WATER {
                    break;
                }
                let mut sent: Result<(), ClientGone> = Ok(());
                let read = io.read_output(&mut |kind, data| {
                    if sent.is_ok() {
                        sent = front.output(kind, data);
                    }
                });
                sent?;
                match read {
                    Ok(0) => {
                        ended = true;
                        break;
                    }
                    Ok(_) => last_activity = Instant::now(),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        log::debug!("output of container {}: {e}", t.container_id);
                        ended = true;
                        break;
                    }
                }
            }
            front.flush()?;
            if ended {
                return Ok(());
            }
        } else {
            front.flush()?;
        }
    }
}

/// Resizes the exec's or the container's terminal; a failure is only logged (a
/// process that has just exited has no terminal to resize).
fn resize(runtime: &dyn Runtime, t: &Target, exec_id: Option<&str>, size: TermSize) {
    let result = match exec_id {
        Some(id) => runtime.resize_exec(id, size),
        None => runtime.resize_container(&t.container_id, size),
    };
    if let Err(e) = result {
        log::debug!("resize to {}x{}: {e}", size.width, size.height);
    }
}

/// The exec's exit code as the outcome, polled briefly (the engine records it just
/// after the output ends).
fn exit_outcome(
    runtime: &dyn Runtime,
    exec_id: &str,
    cmd: &[String],
    front: &mut dyn Frontend,
) -> Outcome {
    let until = Instant::now() + EXIT_CODE_WAIT;
    loop {
        match runtime.exec_status(exec_id) {
            Ok(Some(0)) => return Outcome::Success,
            Ok(Some(code)) => return Outcome::ExitCode(code, cmd.to_vec()),
            Ok(None) if Instant::now() < until && !front.is_stopped() => {
                // The engine closed the stream and is about to record the code.
                std::thread::sleep(Duration::from_millis(10));
            }
            Ok(None) => {
                return Outcome::Internal(
                    "error executing command in container: the exit code was not recorded".into(),
                )
            }
            Err(e) => {
                return Outcome::Internal(format!("error executing command in container: {e}"))
            }
        }
    }
}

/// An exec or attach session over a WebSocket: the channel protocol chosen at the
/// upgrade.
pub fn run_websocket(ws: WsConn, protocol: ChannelProtocol, runtime: &dyn Runtime, t: &Target) {
    let mut front = WsFrontend::new(ws, protocol, t.opts);
    run(&mut front, runtime, t);
}

/// The WebSocket channel protocols as a [`Frontend`].
#[derive(Debug)]
pub(crate) struct WsFrontend {
    ws: WsConn,
    protocol: ChannelProtocol,
    resize: ResizeDecoder,
    /// The session ended because a message was too big.
    too_big: bool,
}

impl WsFrontend {
    /// A frontend on an upgraded connection. Like upstream, an empty message on the
    /// lowest channel the client reads tells it the streams are ready.
    pub(crate) fn new(
        mut ws: WsConn,
        protocol: ChannelProtocol,
        opts: StreamOptions,
    ) -> WsFrontend {
        let first = if opts.stdout {
            STDOUT
        } else if opts.stderr {
            STDERR
        } else {
            ERROR
        };
        // A failure shows again at the first read or flush.
        let _ = ws.send(protocol.encode(first, &[]));
        WsFrontend {
            ws,
            protocol,
            resize: ResizeDecoder::default(),
            too_big: false,
        }
    }

    fn gone(&mut self, e: WsEnd) -> ClientGone {
        match e {
            WsEnd::Closed => ClientGone::Closed,
            WsEnd::TooBig(m) => {
                self.too_big = true;
                self.ws.close(CloseCode::Size, "message too big");
                let _ = self.ws.flush();
                ClientGone::Broken(m)
            }
            WsEnd::Broken(m) => ClientGone::Broken(m),
        }
    }
}

impl Frontend for WsFrontend {
    fn fd(&mut self) -> RawFd {
        self.ws.wire().fd()
    }

    fn has_buffered(&mut self) -> bool {
        self.ws.wire().has_buffered()
    }

    fn wants_write(&mut self) -> bool {
        self.ws.wire().wants_write()
    }

    fn pending(&mut self) -> usize {
        self.ws.pending()
    }

    fn read(&mut self, inputs: &mut Vec<Input>) -> Result<(), ClientGone> {
        // A bounded amount per round: the process gets its turn, and what waits for
        // it stays bounded.
        let mut taken = 0;
        while taken < READ_BUDGET {
            let msg = match self.ws.read() {
                Ok(Some(m)) => m,
                Ok(None) => return Ok(()),
                Err(e) => return Err(self.gone(e)),
            };
            taken += msg.len();
            let (ch, data) = match self.protocol.decode(&msg) {
                Ok(Some(x)) => x,
                Ok(None) => continue,
                Err(e) => return Err(ClientGone::Broken(e)),
            };
            match ch {
                STDIN => inputs.push(Input::Stdin(data)),
                RESIZE => inputs.extend(self.resize.feed(&data).into_iter().map(Input::Resize)),
                CLOSE if self.protocol.close_signal() && data.first() == Some(&STDIN) => {
                    inputs.push(Input::StdinEnd);
                }
                // Upstream ignores frames for channels it does not read.
                _ => {}
            }
        }
        Ok(())
    }

    fn output(&mut self, kind: OutputKind, data: &[u8]) -> Result<(), ClientGone> {
        if data.is_empty() {
            return Ok(());
        }
        let ch = match kind {
            OutputKind::Stdout => STDOUT,
            OutputKind::Stderr => STDERR,
        };
        let msg = self.protocol.encode(ch, data);
        self.ws.send(msg).map_err(|e| self.gone(e))
    }

    fn status(&mut self, outcome: &Outcome) -> Result<(), ClientGone> {
        let body = if self.protocol.status_json() {
            outcome.status_json()
        } else {
            outcome.status_text()
        };
        if body.is_empty() {
            return Ok(());
        }
        let msg = self.protocol.encode(ERROR, &body);
        self.ws.send(msg).map_err(|e| self.gone(e))
    }

    fn flush(&mut self) -> Result<(), ClientGone> {
        self.ws.flush().map_err(|e| self.gone(e))
    }

    fn finish(&mut self) {
        if !self.too_big {
            websocket::finish(&mut self.ws, CloseCode::Normal, "", LINGER);
        }
    }

    fn is_stopped(&mut self) -> bool {
        self.ws.wire().is_stopped()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::streams::websocket::Upgrade;
    use crate::streams::wire::{TestConn, Wire};
    use runtime::fake::FakeRuntime;
    use runtime::ExecResult;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    use std::sync::Arc;
    use tungstenite::Message;

    fn running() -> (Arc<FakeRuntime>, String) {
        FakeRuntime::with_running_container("k8s_c_p_ns_uid_0")
    }

    /// Runs a session on its own thread; returns the client's WebSocket.
    fn session(
        rt: &Arc<FakeRuntime>,
        target: Target,
        protocol: ChannelProtocol,
    ) -> (
        tungstenite::WebSocket<UnixStream>,
        std::thread::JoinHandle<()>,
    ) {
        let (server, mut client) = UnixStream::pair().expect("pair");
        let rt = rt.clone();
        let handle = base::testutil::spawn_named("test-session", move || {
            let up = Upgrade::new("dGhlIHNhbXBsZSBub25jZQ==", protocol.name());
            let ws = WsConn::accept(Wire::new(TestConn(server)), &up).expect("accept");
            run_websocket(ws, protocol, rt.as_ref(), &target);
        });
        // The 101 head, byte by byte up to its blank line.
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            client.read_exact(&mut b).expect("head");
            head.push(b[0]);
        }
        let head = String::from_utf8(head).expect("utf8");
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        assert!(head.contains("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo="));
        let ws = tungstenite::WebSocket::from_raw_socket(
            client,
            tungstenite::protocol::Role::Client,
            None,
        );
        (ws, handle)
    }

    /// Every data message until the server closes: (channel, payload).
    fn read_all(ws: &mut tungstenite::WebSocket<UnixStream>) -> Vec<(u8, Vec<u8>)> {
        let mut got = Vec::new();
        loop {
            match ws.read() {
                Ok(Message::Binary(b)) => got.push((b[0], b[1..].to_vec())),
                Ok(Message::Close(_)) => {}
                Ok(_) => {}
                Err(_) => return got,
            }
        }
    }

    fn target(id: &str, opts: StreamOptions) -> Target {
        Target {
            verb: Verb::Exec,
            container_id: id.to_string(),
            cmd: vec!["sh".into(), "-c".into(), "exit 42".into()],
            opts,
        }
    }

    #[test]
    fn v5_exec_carries_stdin_its_close_and_the_exit_code() {
        let (rt, id) = running();
        rt.set_exec_result(
            &id,
            ExecResult {
                exit_code: 42,
                stdout: Vec::new(),
                stderr: Vec::new(),
            },
        );
        let opts = StreamOptions {
            stdin: true,
            stdout: true,
            stderr: true,
            tty: false,
        };
        let (mut ws, handle) = session(&rt, target(&id, opts), ChannelProtocol::V5);
        ws.send(Message::binary(vec![STDIN, b'h', b'i']))
            .expect("stdin");
        ws.send(Message::binary(vec![CLOSE, STDIN]))
            .expect("close stdin");
        // The fake process: reads stdin to its end, answers, exits.
        let until = Instant::now() + Duration::from_secs(10);
        let mut process = loop {
            if let Some(p) = rt.take_process(&id) {
                break p;
            }
            assert!(Instant::now() < until, "no exec started");
            std::thread::sleep(Duration::from_millis(5));
        };
        let mut input = Vec::new();
        process.read_to_end(&mut input).expect("stdin to its end");
        assert_eq!(input, b"hi");
        process.write_all(b"out").expect("stdout");
        drop(process);
        let got = read_all(&mut ws);
        handle.join().expect("session");
        // The ready message, the output, then the status with the exit code.
        assert_eq!(got[0], (STDOUT, Vec::new()));
        assert_eq!(got[1], (STDOUT, b"out".to_vec()));
        let (ch, status) = &got[2];
        assert_eq!(*ch, ERROR);
        let v: serde_json::Value = serde_json::from_slice(status).expect("status json");
        assert_eq!(v["reason"], "NonZeroExitCode");
        assert_eq!(v["details"]["causes"][0]["message"], "42");
        assert_eq!(got.len(), 3);
    }

    #[test]
    fn tty_resizes_reach_the_runtime_and_a_client_leaving_ends_the_session() {
        let (rt, id) = running();
        let opts = StreamOptions {
            stdin: true,
            stdout: true,
            stderr: false,
            tty: true,
        };
        let (mut ws, handle) = session(&rt, target(&id, opts), ChannelProtocol::V4);
        let mut resize = vec![RESIZE];
        resize.extend_from_slice(br#"{"Width":120,"Height":40}"#);
        ws.send(Message::binary(resize)).expect("resize");
        let until = Instant::now() + Duration::from_secs(10);
        while rt.resizes().is_empty() {
            assert!(Instant::now() < until, "no resize");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(
            rt.resizes()[0].1,
            TermSize {
                width: 120,
                height: 40
            }
        );
        // The client goes away: the session ends and drops the process.
        drop(ws);
        handle.join().expect("session");
        let mut process = rt.take_process(&id).expect("process");
        let mut rest = Vec::new();
        process
            .read_to_end(&mut rest)
            .expect("the process's stdin ends");
    }

    #[test]
    fn a_runtime_failure_is_an_internal_error_status() {
        let (rt, _) = running();
        let opts = StreamOptions {
            stdout: true,
            ..StreamOptions::default()
        };
        let (mut ws, handle) = session(&rt, target("gone", opts), ChannelProtocol::V1);
        let got = read_all(&mut ws);
        handle.join().expect("session");
        // channel.k8s.io: the failure's text, not JSON.
        let text = String::from_utf8_lossy(&got[1].1).into_owned();
        assert_eq!(got[1].0, ERROR);
        assert!(
            text.starts_with("Internal error occurred: error executing command in container"),
            "{text}"
        );
    }

    #[test]
    fn resize_messages_decode_across_pieces() {
        let mut d = ResizeDecoder::default();
        assert_eq!(d.feed(br#"{"Width":80,"#), []);
        assert_eq!(
            d.feed(br#""Height":24}{"Width":100,"Height":30}"#),
            [
                TermSize {
                    width: 80,
                    height: 24
                },
                TermSize {
                    width: 100,
                    height: 30
                }
            ]
        );
        assert_eq!(d.feed(b"\n"), []);
        // Garbage is dropped, later sizes still decode.
        assert_eq!(d.feed(b"]"), []);
        assert_eq!(
            d.feed(br#"{"Width":1,"Height":2}"#),
            [TermSize {
                width: 1,
                height: 2
            }]
        );
        // An endless object is not kept.
        let mut d = ResizeDecoder::default();
        d.feed(b"{\"Width\":");
        d.feed(&vec![b' '; 10_000]);
        assert!(d.buf.is_empty());
    }
}
