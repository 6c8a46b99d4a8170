//! Docker's hijacked connections: `POST /exec/{id}/start` and
//! `POST /containers/{id}/attach` with `Connection: Upgrade`, `Upgrade: tcp`. The
//! engine answers `101 UPGRADED` and from then on the socket carries the process's
//! standard streams both ways: the client's bytes are its stdin, the engine's are its
//! output (multiplexed 8-byte-header frames without a TTY, raw with one).
//!
//! ureq cannot hand over its socket after an answer, so this is the one place that
//! writes HTTP by hand (DESIGN.md rule 9): one request on a fresh `UnixStream`, the
//! answer's head read with a deadline, then the socket (non-blocking) and whatever
//! output came behind the head become a [`DockerIo`]. The exec's companions (its
//! exit code, TTY resizes) live here too.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use bollard_stubs::models as api;

use crate::client::{status_error, Client, Req};
use crate::stream::{FrameDecoder, StreamKind};
use crate::CALL_TIMEOUT;
use base::netutil::query_escape as percent_encode;
use runtime::{ExecSession, OutputKind, ProcessIo, RuntimeError, StreamOptions, TermSize};

/// The longest answer head accepted from the engine (its 101 is ~150 bytes).
const MAX_HEAD: usize = 16 * 1024;

/// The longest error body read from a refused upgrade (`{"message": …}`).
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Output is read from the engine in pieces of this size.
const READ_CHUNK: usize = 32 * 1024;

/// Creates an exec of `cmd` in container `id` and starts it hijacked
/// ([`runtime::Runtime::exec_interactive`]).
pub(crate) fn exec_interactive(
    client: &Client,
    id: &str,
    cmd: &[String],
    opts: StreamOptions,
) -> Result<ExecSession, RuntimeError> {
    let op = format!("exec {:?} in container {id}", cmd.join(" "));
    let create = api::ExecConfig {
        attach_stdin: Some(opts.stdin),
        attach_stdout: Some(opts.stdout),
        attach_stderr: Some(opts.stderr && !opts.tty),
        tty: Some(opts.tty),
        cmd: Some(cmd.to_vec()),
        ..Default::default()
    };
    let decode = |source| RuntimeError::Decode {
        op: op.clone(),
        source,
    };
    let body = serde_json::to_vec(&create).map_err(decode)?;
    let path = format!("/containers/{}/exec", percent_encode(id));
    let exec: api::IdResponse = client.call_json(&op, Req::post(path).json(body))?;
    let start = api::ExecStartConfig {
        detach: Some(false),
        tty: Some(opts.tty),
        ..Default::default()
    };
    let body = serde_json::to_vec(&start).map_err(decode)?;
    let path = format!("/exec/{}/start", percent_encode(&exec.id));
    let (sock, ahead) = upgrade(client, &op, &path, &body, CALL_TIMEOUT)?;
    Ok(ExecSession {
        exec_id: exec.id,
        io: Box::new(DockerIo::new(sock, ahead, !opts.tty)),
    })
}

/// An exec's exit code once it has finished (`GET /exec/{id}/json`).
pub(crate) fn exec_status(client: &Client, exec_id: &str) -> Result<Option<i64>, RuntimeError> {
    let op = format!("inspect exec {exec_id}");
    let path = format!("/exec/{}/json", percent_encode(exec_id));
    let info: api::ExecInspectResponse = client.call_json(&op, Req::get(path))?;
    Ok(match (info.running, info.exit_code) {
        (Some(false), Some(code)) => Some(code),
        _ => None,
    })
}

/// Resizes the TTY of an exec (`kind` `exec`) or a container (`containers`).
pub(crate) fn resize(
    client: &Client,
    kind: &str,
    id: &str,
    size: TermSize,
) -> Result<(), RuntimeError> {
    let op = format!("resize {kind} {id}");
    let path = format!(
        "/{kind}/{}/resize?h={}&w={}",
        percent_encode(id),
        size.height,
        size.width
    );
    client.call(&op, Req::post(path)).map(drop)
}

/// Attaches to container `id`'s main process, hijacked; `tty` says how its output
/// is framed.
pub(crate) fn attach(
    client: &Client,
    id: &str,
    opts: StreamOptions,
    tty: bool,
) -> Result<Box<dyn ProcessIo>, RuntimeError> {
    let op = format!("attach to container {id}");
    let path = format!(
        "/containers/{}/attach?stream=1&stdin={}&stdout={}&stderr={}",
        percent_encode(id),
        u8::from(opts.stdin),
        u8::from(opts.stdout),
        u8::from(opts.stderr)
    );
    let (sock, ahead) = upgrade(client, &op, &path, b"", CALL_TIMEOUT)?;
    Ok(Box::new(DockerIo::new(sock, ahead, !tty)))
}

/// Sends `POST path` with the JSON `body` (may be empty) asking for an upgrade, and
/// returns the upgraded socket with the bytes read past the answer's head. The whole
/// exchange (connect, send, head) must finish within `timeout`; a refusal is the
/// engine's error (`404` no such exec or container, `409` not running …).
pub(crate) fn upgrade(
    client: &Client,
    op: &str,
    path: &str,
    body: &[u8],
    timeout: Duration,
) -> Result<(UnixStream, Vec<u8>), RuntimeError> {
    let api = client.api_version()?;
    let deadline = Instant::now() + timeout;
    let timed_out = || RuntimeError::Timeout {
        op: op.to_string(),
        after: timeout,
    };
    let mut sock = UnixStream::connect(client.socket()).map_err(|e| client.unavailable(e))?;
    sock.set_write_timeout(Some(timeout))
        .map_err(|e| client.unavailable(e))?;
    let mut request = format!(
        "POST /v{api}{path} HTTP/1.1\r\nHost: docker\r\nUser-Agent: rkubelet/{}\r\n\
         Connection: Upgrade\r\nUpgrade: tcp\r\n",
        env!("CARGO_PKG_VERSION")
    );
    if body.is_empty() {
        request.push_str("Content-Length: 0\r\n\r\n");
    } else {
        request.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        ));
    }
    let mut out = request.into_bytes();
    out.extend_from_slice(body);
    sock.write_all(&out).map_err(|e| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => timed_out(),
        _ => client.unavailable(e),
    })?;

    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let (status, head_len, content_length) = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(timed_out());
        }
        sock.set_read_timeout(Some(left))
            .map_err(|e| client.unavailable(e))?;
        let n = match sock.read(&mut chunk) {
            Ok(0) => {
                return Err(client.unavailable(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the engine closed the connection before answering",
                )))
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(timed_out())
            }
            Err(e) => return Err(client.unavailable(e)),
        };
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut resp = httparse::Response::new(&mut headers);
        match resp.parse(&buf) {
            Ok(httparse::Status::Complete(len)) => {
                let content_length = resp
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                    .and_then(|h| std::str::from_utf8(h.value).ok())
                    .and_then(|v| v.trim().parse::<usize>().ok());
                break (resp.code.unwrap_or(0), len, content_length);
            }
            Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => {}
            Ok(httparse::Status::Partial) => {
                return Err(api_error(op, "answer head too long"));
            }
            Err(e) => return Err(api_error(op, &format!("bad answer head: {e}"))),
        }
    };
    let rest = buf.split_off(head_len);
    // Old engines answer 200 and hijack without the upgrade handshake.
    if status == 101 || status == 200 {
        sock.set_nonblocking(true)
            .map_err(|e| client.unavailable(e))?;
        return Ok((sock, rest));
    }
    let want = content_length.unwrap_or(MAX_ERROR_BODY).min(MAX_ERROR_BODY);
    let mut text = rest;
    while text.len() < want && Instant::now() < deadline {
        match sock.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => text.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    text.truncate(want);
    Err(status_error(op, status, &text))
}

fn api_error(op: &str, message: &str) -> RuntimeError {
    RuntimeError::Api {
        op: op.to_string(),
        status: 0,
        message: message.to_string(),
    }
}

/// A process's streams on a hijacked engine connection: non-blocking, output split
/// out of Docker's frames (or taken raw with a TTY), input written straight through,
/// end of input as a half-close (the engine then closes the process's stdin).
#[derive(Debug)]
pub(crate) struct DockerIo {
    sock: UnixStream,
    /// Output that arrived with the answer's head.
    ahead: Vec<u8>,
    /// Docker's frame splitter; None with a TTY (raw output, all stdout).
    demux: Option<FrameDecoder>,
    chunk: Vec<u8>,
}

impl DockerIo {
    /// The streams on `sock` (non-blocking), `ahead` the bytes read past the head.
    pub(crate) fn new(sock: UnixStream, ahead: Vec<u8>, multiplexed: bool) -> DockerIo {
        DockerIo {
            sock,
            ahead,
            demux: multiplexed.then(FrameDecoder::default),
            chunk: vec![0; READ_CHUNK],
        }
    }

    fn split(&mut self, data: &[u8], emit: &mut dyn FnMut(OutputKind, &[u8])) {
        match &mut self.demux {
            None => emit(OutputKind::Stdout, data),
            Some(d) => d.push(data, &mut |kind, payload| match kind {
                StreamKind::Stdout => emit(OutputKind::Stdout, payload),
                // Kind 3 is the engine's own error text about the exec.
                StreamKind::Stderr | StreamKind::System => emit(OutputKind::Stderr, payload),
                StreamKind::Stdin => {}
            }),
        }
    }
}

impl ProcessIo for DockerIo {
    fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    fn has_buffered(&self) -> bool {
        !self.ahead.is_empty()
    }

    fn read_output(&mut self, emit: &mut dyn FnMut(OutputKind, &[u8])) -> io::Result<usize> {
        if !self.ahead.is_empty() {
            let data = std::mem::take(&mut self.ahead);
            self.split(&data, emit);
            return Ok(data.len());
        }
        let mut chunk = std::mem::take(&mut self.chunk);
        let read = loop {
            match self.sock.read(&mut chunk) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => break other,
            }
        };
        if let Ok(n) = read {
            self.split(&chunk[..n], emit);
        }
        self.chunk = chunk;
        read
    }

    fn write_input(&mut self, data: &[u8]) -> io::Result<usize> {
        self.sock.write(data)
    }

    fn close_input(&mut self) -> io::Result<()> {
        self.sock.shutdown(std::net::Shutdown::Write)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_split_from_frames_and_taken_raw_with_a_tty() {
        let (a, mut b) = UnixStream::pair().expect("pair");
        a.set_nonblocking(true).expect("nonblocking");
        let mut framed = vec![1, 0, 0, 0, 0, 0, 0, 3];
        framed.extend_from_slice(b"out");
        framed.extend_from_slice(&[2, 0, 0, 0, 0, 0, 0, 3]);
        framed.extend_from_slice(b"err");
        // The first frame's header came with the answer's head.
        let mut io = DockerIo::new(a, framed[..4].to_vec(), true);
        b.write_all(&framed[4..]).expect("write");
        let mut got = Vec::new();
        while got.len() < 2 {
            io.read_output(&mut |k, d| got.push((k, d.to_vec())))
                .expect("read");
        }
        assert_eq!(
            got,
            [
                (OutputKind::Stdout, b"out".to_vec()),
                (OutputKind::Stderr, b"err".to_vec())
            ]
        );
        drop(b);
        assert_eq!(io.read_output(&mut |_, _| {}).expect("eof"), 0);

        let (a, mut b) = UnixStream::pair().expect("pair");
        let mut io = DockerIo::new(a, Vec::new(), false);
        b.write_all(&[1, 0, 0, 0]).expect("write");
        let mut got = Vec::new();
        io.read_output(&mut |k, d| got.push((k, d.to_vec())))
            .expect("read");
        assert_eq!(got, [(OutputKind::Stdout, vec![1, 0, 0, 0])]);
    }

    #[test]
    fn input_goes_through_and_closing_it_half_closes() {
        let (a, mut b) = UnixStream::pair().expect("pair");
        let mut io = DockerIo::new(a, Vec::new(), true);
        assert_eq!(io.write_input(b"hi").expect("write"), 2);
        io.close_input().expect("close");
        let mut got = Vec::new();
        b.read_to_end(&mut got).expect("read to the end");
        assert_eq!(got, b"hi");
        // Output still flows the other way.
        b.write_all(&[1, 0, 0, 0, 0, 0, 0, 1, b'x']).expect("write");
        let mut out = Vec::new();
        while out.is_empty() {
            io.read_output(&mut |_, d| out.extend_from_slice(d))
                .expect("read");
        }
        assert_eq!(out, b"x");
    }
}
