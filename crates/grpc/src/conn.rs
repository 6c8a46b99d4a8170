//! One HTTP/2 client connection (RFC 9113) carrying many streams at once: the
//! preface and SETTINGS, one reader thread that demultiplexes the server's frames to
//! the streams, writers that take a short mutex for each write, and flow control both
//! ways.
//!
//! Locks: `writer` (held for one write, never across a read), then `state` (the
//! streams and the connection's windows), then one stream's `inbox`; always in that
//! order, each for microseconds. Callers wait on condition variables: a stream's
//! `ready` for its answer, the connection's `changed` for send window or a stream
//! slot. Memory is bounded by flow control: what a stream's inbox holds is at most its
//! receive window ([`STREAM_WINDOW`]), and the connection's window
//! ([`CONN_WINDOW`]) bounds them all; a server that sends more breaks the connection.
//! Windows are given back (WINDOW_UPDATE) as callers consume the data.
//!
//! The reader ends when the socket closes (the last handle shuts it down), when the
//! server breaks the protocol, or at shutdown (it polls the shutdown descriptor too);
//! it then fails every open stream, so no caller waits on a dead connection.
//!
//! Over 800 lines: nearly half are its unit tests, which drive the reader and the
//! callers frame by frame (windows, slots, GOAWAY, resets, header blocks).

use std::collections::HashMap;
use std::io::{BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use base::loops::{lock, Loops, Stop};
use rustix::event::{PollFd, PollFlags};

use crate::frame::{self, Head, ReadError};
use crate::hpack::{self, Fields};

/// The receive window we give each stream (our `SETTINGS_INITIAL_WINDOW_SIZE`): a CRI
/// list of a few hundred containers arrives without waiting for window updates.
pub(crate) const STREAM_WINDOW: i64 = 1 << 20;
/// The receive window of the whole connection: several streams' worth, so one caller
/// slow to read its answer does not hold up the others.
pub(crate) const CONN_WINDOW: i64 = 8 << 20;
/// HTTP/2's initial windows before SETTINGS say otherwise (RFC 9113 §6.9.2).
const DEFAULT_WINDOW: i64 = 65_535;
/// How long one write may block on a full socket before the connection is given up:
/// a server that reads nothing for this long is not coming back.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest frame we send even if the server allows more.
const MAX_SEND_FRAME: usize = 1 << 20;

/// The socket under a connection.
#[derive(Debug)]
pub(crate) enum Socket {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Socket {
    fn try_clone(&self) -> std::io::Result<Socket> {
        Ok(match self {
            Socket::Unix(s) => Socket::Unix(s.try_clone()?),
            Socket::Tcp(s) => Socket::Tcp(s.try_clone()?),
        })
    }

    fn shutdown(&self) {
        // Already closed is fine: this only wakes the reader.
        let _ = match self {
            Socket::Unix(s) => s.shutdown(Shutdown::Both),
            Socket::Tcp(s) => s.shutdown(Shutdown::Both),
        };
    }

    fn set_write_timeout(&self, d: Duration) -> std::io::Result<()> {
        match self {
            Socket::Unix(s) => s.set_write_timeout(Some(d)),
            Socket::Tcp(s) => s.set_write_timeout(Some(d)),
        }
    }
}

impl AsFd for Socket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Socket::Unix(s) => s.as_fd(),
            Socket::Tcp(s) => s.as_fd(),
        }
    }
}

impl Read for Socket {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Socket::Unix(s) => s.read(b),
            Socket::Tcp(s) => s.read(b),
        }
    }
}

impl Write for Socket {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            Socket::Unix(s) => s.write(b),
            Socket::Tcp(s) => s.write(b),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Why a stream or a wait ended without an answer.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Why {
    /// The caller's deadline passed.
    Deadline,
    /// The server reset the stream with this HTTP/2 error code.
    Reset(u32),
    /// The connection broke, or went away before this stream (GOAWAY).
    Gone(String),
    /// The caller cancelled it.
    Cancelled,
}

/// What a stream's reader gets next.
#[derive(Debug, PartialEq)]
pub(crate) enum Event {
    /// DATA bytes (unpadded).
    Data(Vec<u8>),
    /// The server ended the stream; its headers and trailers are in.
    End,
}

/// One stream's side of the connection: what the reader thread delivered and the
/// stream's windows.
#[derive(Debug)]
pub(crate) struct Stream {
    pub(crate) id: u32,
    inbox: Mutex<Inbox>,
    ready: Condvar,
}

#[derive(Debug, Default)]
struct Inbox {
    headers: Option<Fields>,
    trailers: Option<Fields>,
    /// DATA not yet taken by the caller; at most the stream's receive window.
    data: Vec<u8>,
    /// The server sent END_STREAM.
    ended: bool,
    /// We sent END_STREAM.
    sent_end: bool,
    failed: Option<Why>,
    cancelled: bool,
    /// What we may still send, and what the server may still send.
    send_window: i64,
    recv_window: i64,
    /// Consumed (or padding) bytes not yet given back in a WINDOW_UPDATE.
    unacked: i64,
}

#[derive(Debug)]
struct State {
    streams: HashMap<u32, Arc<Stream>>,
    next_id: u32,
    send_window: i64,
    recv_window: i64,
    unacked: i64,
    peer_initial_window: i64,
    peer_max_frame: usize,
    peer_max_streams: usize,
    /// Why no new stream may start (GOAWAY, or the connection broke).
    closed: Option<String>,
    /// Why the connection broke: nothing more can be sent or read.
    broken: Option<String>,
}

/// One HTTP/2 connection.
pub(crate) struct Conn {
    writer: Mutex<Box<dyn Write + Send>>,
    /// The socket, to shut down (None under test and fuzzing, over bytes in memory).
    socket: Option<Socket>,
    state: Mutex<State>,
    changed: Condvar,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("socket", &self.socket)
            .finish()
    }
}

/// The time left until `deadline`, None when it passed.
fn left(deadline: Instant) -> Option<Duration> {
    let d = deadline.saturating_duration_since(Instant::now());
    (!d.is_zero()).then_some(d)
}

/// Waits on `cv` until notified or `deadline` (forever without one); Err when the
/// deadline passed.
fn wait<'a, T>(
    cv: &Condvar,
    guard: MutexGuard<'a, T>,
    deadline: Option<Instant>,
) -> Result<MutexGuard<'a, T>, Why> {
    let g = match deadline {
        None => cv.wait(guard),
        Some(d) => {
            let Some(t) = left(d) else {
                return Err(Why::Deadline);
            };
            cv.wait_timeout(guard, t)
                .map(|(g, _)| g)
                .map_err(|p| std::sync::PoisonError::new(p.into_inner().0))
        }
    };
    // A poisoned lock: its data is counters and buffers, still consistent enough to
    // fail the call on.
    Ok(g.unwrap_or_else(|p| p.into_inner()))
}

impl Conn {
    /// A connection writing to `writer`, before any byte is sent.
    pub(crate) fn new(writer: Box<dyn Write + Send>, socket: Option<Socket>) -> Conn {
        Conn {
            writer: Mutex::new(writer),
            socket,
            state: Mutex::new(State {
                streams: HashMap::new(),
                next_id: 1,
                send_window: DEFAULT_WINDOW,
                recv_window: CONN_WINDOW,
                unacked: 0,
                peer_initial_window: DEFAULT_WINDOW,
                peer_max_frame: frame::MAX_FRAME_SIZE,
                peer_max_streams: usize::MAX,
                closed: None,
                broken: None,
            }),
            changed: Condvar::new(),
        }
    }

    /// Starts HTTP/2 on `socket`: sends the preface, our SETTINGS and the connection
    /// window, and spawns the reader thread `name`.
    pub(crate) fn start(socket: Socket, loops: &Loops, name: &str) -> std::io::Result<Arc<Conn>> {
        socket.set_write_timeout(WRITE_TIMEOUT)?;
        let read_half = socket.try_clone()?;
        let conn = Arc::new(Conn::new(Box::new(socket.try_clone()?), Some(socket)));
        conn.write(&hello())?;
        let reader = Reader::new(conn.clone());
        loops
            .spawn_transient(name, move |stop| {
                let r = BufReader::with_capacity(
                    frame::MAX_FRAME_SIZE + 9,
                    StopRead {
                        socket: read_half,
                        stop,
                    },
                );
                reader.run(r)
            })
            .map_err(std::io::Error::other)?;
        Ok(conn)
    }

    /// Whether a new stream may start on it.
    pub(crate) fn usable(&self) -> bool {
        lock(&self.state).closed.is_none()
    }

    /// Shuts the socket down: the reader ends and fails what is still open.
    pub(crate) fn shutdown(&self) {
        if let Some(s) = &self.socket {
            s.shutdown();
        }
    }

    /// Writes `bytes` whole under the writer lock. A failed write breaks the
    /// connection: a frame may be cut in half.
    fn write(&self, bytes: &[u8]) -> std::io::Result<()> {
        let r = lock(&self.writer).write_all(bytes);
        if let Err(e) = &r {
            self.fail(format!("cannot write to the connection: {e}"));
            self.shutdown();
        }
        r
    }

    /// Opens a stream: sends the request's header block (HEADERS, CONTINUATION when
    /// longer than a frame), waiting for a stream slot until `deadline`.
    pub(crate) fn open(&self, block: &[u8], deadline: Instant) -> Result<Arc<Stream>, Why> {
        loop {
            let mut w = lock(&self.writer);
            let mut st = lock(&self.state);
            if let Some(why) = &st.closed {
                return Err(Why::Gone(why.clone()));
            }
            if st.streams.len() < st.peer_max_streams {
                let id = st.next_id;
                if id > 0x7fff_ffff {
                    st.closed = Some("the connection used up its stream ids".into());
                    continue;
                }
                st.next_id += 2;
                let stream = Arc::new(Stream {
                    id,
                    inbox: Mutex::new(Inbox {
                        send_window: st.peer_initial_window,
                        recv_window: STREAM_WINDOW,
                        ..Inbox::default()
                    }),
                    ready: Condvar::new(),
                });
                st.streams.insert(id, stream.clone());
                let max = st.peer_max_frame;
                drop(st);
                let mut out = Vec::with_capacity(block.len() + 9);
                let mut chunks = block.chunks(max).peekable();
                let mut kind = frame::HEADERS;
                if chunks.peek().is_none() {
                    frame::encode(&mut out, kind, frame::END_HEADERS, id, &[]);
                }
                while let Some(chunk) = chunks.next() {
                    let flags = if chunks.peek().is_none() {
                        frame::END_HEADERS
                    } else {
                        0
                    };
                    frame::encode(&mut out, kind, flags, id, chunk);
                    kind = frame::CONTINUATION;
                }
                let r = w.write_all(&out);
                drop(w);
                if let Err(e) = r {
                    let why = format!("cannot write to the connection: {e}");
                    self.fail(why.clone());
                    self.shutdown();
                    return Err(Why::Gone(why));
                }
                return Ok(stream);
            }
            drop(w);
            drop(wait(&self.changed, st, Some(deadline))?);
        }
    }

    /// Sends `data` on `s` as DATA frames within the windows, the last with
    /// END_STREAM, waiting for window until `deadline`.
    pub(crate) fn send(&self, s: &Stream, data: &[u8], deadline: Instant) -> Result<(), Why> {
        let mut rest = data;
        loop {
            let n = {
                let mut st = lock(&self.state);
                loop {
                    if let Some(why) = &st.broken {
                        return Err(Why::Gone(why.clone()));
                    }
                    let mut ib = lock(&s.inbox);
                    if let Some(why) = &ib.failed {
                        return Err(why.clone());
                    }
                    let room = st
                        .send_window
                        .min(ib.send_window)
                        .min(st.peer_max_frame.min(MAX_SEND_FRAME) as i64)
                        .min(rest.len() as i64);
                    if room > 0 || rest.is_empty() {
                        let room = room.max(0);
                        st.send_window -= room;
                        ib.send_window -= room;
                        if room as usize == rest.len() {
                            ib.sent_end = true;
                        }
                        break room as usize;
                    }
                    drop(ib);
                    st = wait(&self.changed, st, Some(deadline))?;
                }
            };
            let (chunk, r) = rest.split_at(n);
            rest = r;
            let flags = if rest.is_empty() {
                frame::END_STREAM
            } else {
                0
            };
            let mut out = Vec::with_capacity(chunk.len() + 9);
            frame::encode(&mut out, frame::DATA, flags, s.id, chunk);
            self.write(&out)
                .map_err(|e| Why::Gone(format!("cannot write to the connection: {e}")))?;
            if rest.is_empty() {
                return Ok(());
            }
        }
    }

    /// The next thing the server sent on `s`, waiting until `deadline` (forever
    /// without one). Taking DATA gives its window back.
    pub(crate) fn next(&self, s: &Stream, deadline: Option<Instant>) -> Result<Event, Why> {
        let (data, stream_credit) = {
            let mut ib = lock(&s.inbox);
            loop {
                if ib.cancelled {
                    return Err(Why::Cancelled);
                }
                if !ib.data.is_empty() {
                    break;
                }
                if ib.ended {
                    return Ok(Event::End);
                }
                if let Some(why) = &ib.failed {
                    return Err(why.clone());
                }
                ib = wait(&s.ready, ib, deadline)?;
            }
            let data = std::mem::take(&mut ib.data);
            ib.unacked += data.len() as i64;
            let credit = if !ib.ended && ib.unacked >= STREAM_WINDOW / 4 {
                ib.recv_window += ib.unacked;
                std::mem::take(&mut ib.unacked)
            } else {
                0
            };
            (data, credit)
        };
        let conn_credit = self.consumed(data.len() as i64);
        self.window_updates(s.id, stream_credit, conn_credit);
        Ok(Event::Data(data))
    }

    /// Counts `n` bytes as consumed on the connection; the credit to give back, when it
    /// is time.
    fn consumed(&self, n: i64) -> i64 {
        let mut st = lock(&self.state);
        st.unacked += n;
        if st.unacked >= CONN_WINDOW / 4 {
            st.recv_window += st.unacked;
            std::mem::take(&mut st.unacked)
        } else {
            0
        }
    }

    fn window_updates(&self, stream: u32, stream_credit: i64, conn_credit: i64) {
        let mut out = Vec::new();
        for (id, credit) in [(stream, stream_credit), (0, conn_credit)] {
            if credit > 0 {
                let inc = u32::try_from(credit).unwrap_or(u32::MAX);
                frame::encode(&mut out, frame::WINDOW_UPDATE, 0, id, &inc.to_be_bytes());
            }
        }
        if !out.is_empty() {
            // A failed write has already failed the connection.
            let _ = self.write(&out);
        }
    }

    /// The stream's status once it ended: its headers and trailers.
    pub(crate) fn fields(&self, s: &Stream) -> (Option<Fields>, Option<Fields>) {
        let mut ib = lock(&s.inbox);
        (ib.headers.take(), ib.trailers.take())
    }

    /// Cancels `s`: its reader gets [`Why::Cancelled`]; the stream is reset when its
    /// call is finished.
    pub(crate) fn cancel(s: &Stream) {
        lock(&s.inbox).cancelled = true;
        s.ready.notify_all();
    }

    /// The call on `s` is over: forgets the stream, gives back the window of what it
    /// left unread, and resets it if either side had not ended it.
    pub(crate) fn finish(&self, s: &Stream) {
        let (unread, reset) = {
            let ib = lock(&s.inbox);
            let done = (ib.ended && ib.sent_end)
                || matches!(ib.failed, Some(Why::Reset(_) | Why::Gone(_)));
            (ib.data.len() as i64, !done)
        };
        let broken = {
            let mut st = lock(&self.state);
            st.streams.remove(&s.id);
            st.broken.is_some()
        };
        self.changed.notify_all();
        let conn_credit = self.consumed(unread);
        if broken {
            return;
        }
        if reset {
            let mut out = Vec::new();
            frame::encode(
                &mut out,
                frame::RST_STREAM,
                0,
                s.id,
                &frame::CANCEL.to_be_bytes(),
            );
            let _ = self.write(&out);
        }
        self.window_updates(s.id, 0, conn_credit);
    }

    /// The connection broke: no stream may start, every open one fails.
    fn fail(&self, why: String) {
        let streams: Vec<Arc<Stream>> = {
            let mut st = lock(&self.state);
            if st.broken.is_some() {
                return;
            }
            log::debug!("HTTP/2 connection failed: {why}");
            st.broken = Some(why.clone());
            st.closed.get_or_insert_with(|| why.clone());
            st.streams.values().cloned().collect()
        };
        for s in streams {
            lock(&s.inbox)
                .failed
                .get_or_insert_with(|| Why::Gone(why.clone()));
            s.ready.notify_all();
        }
        self.changed.notify_all();
    }
}

/// The preface, our SETTINGS (no push, the stream window, the header list bound) and
/// the connection window raised to [`CONN_WINDOW`].
fn hello() -> Vec<u8> {
    let mut out = frame::PREFACE.to_vec();
    let settings = frame::settings_payload(&[
        (frame::SETTINGS_ENABLE_PUSH, 0),
        (frame::SETTINGS_INITIAL_WINDOW_SIZE, STREAM_WINDOW as u32),
        (
            frame::SETTINGS_MAX_HEADER_LIST_SIZE,
            hpack::MAX_HEADER_LIST as u32,
        ),
    ]);
    frame::encode(&mut out, frame::SETTINGS, 0, 0, &settings);
    let inc = (CONN_WINDOW - DEFAULT_WINDOW) as u32;
    frame::encode(&mut out, frame::WINDOW_UPDATE, 0, 0, &inc.to_be_bytes());
    out
}

/// The read half of the socket, ending at shutdown: before each read it polls the
/// socket and the shutdown descriptor together.
struct StopRead {
    socket: Socket,
    stop: Stop,
}

impl Read for StopRead {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let mut fds = [
                PollFd::new(&self.socket, PollFlags::IN),
                PollFd::from_borrowed_fd(self.stop.fd(), PollFlags::IN),
            ];
            match rustix::event::poll(&mut fds, None) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
            if !fds[1].revents().is_empty() {
                return Err(std::io::Error::other("rkubelet is shutting down"));
            }
            return self.socket.read(b);
        }
    }
}

/// A header block being gathered (HEADERS, then CONTINUATION frames).
#[derive(Debug)]
struct Block {
    stream: u32,
    bytes: Vec<u8>,
    end_stream: bool,
}

/// The reader thread's side: the HPACK decoder (one per connection, every block in
/// order) and the header block being gathered.
#[derive(Debug)]
pub(crate) struct Reader {
    conn: Arc<Conn>,
    hpack: hpack::Decoder,
    block: Option<Block>,
}

impl Reader {
    pub(crate) fn new(conn: Arc<Conn>) -> Self {
        Reader {
            conn,
            hpack: hpack::Decoder::new(),
            block: None,
        }
    }

    /// Reads frames until the connection ends, then fails what is still open.
    pub(crate) fn run(mut self, mut r: impl Read) {
        let why = loop {
            match frame::read(&mut r) {
                Ok((head, payload)) => {
                    if let Err(why) = self.frame(head, &payload) {
                        let mut out = Vec::new();
                        let goaway = frame::goaway_payload(0, frame::PROTOCOL_ERROR);
                        frame::encode(&mut out, frame::GOAWAY, 0, 0, &goaway);
                        let _ = self.conn.write(&out);
                        break format!("the server broke HTTP/2: {why}");
                    }
                }
                Err(ReadError::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    break "the server closed the connection".to_string()
                }
                Err(ReadError::Io(e)) => break format!("the connection failed: {e}"),
                Err(ReadError::TooLarge(n)) => {
                    break format!("the server sent a frame of {n} bytes")
                }
            }
        };
        self.conn.fail(why);
        self.conn.shutdown();
    }

    /// Handles one frame; Err is a connection error.
    pub(crate) fn frame(&mut self, h: Head, p: &[u8]) -> Result<(), String> {
        if let Some(b) = &self.block {
            if h.kind != frame::CONTINUATION || h.stream != b.stream {
                return Err("a header block was cut off".into());
            }
        }
        let conn = &*self.conn;
        match h.kind {
            frame::DATA => {
                if h.stream == 0 || !frame::padding_ok(p, h.flags) {
                    return Err("a malformed DATA frame".into());
                }
                conn.data(h, p)?;
            }
            frame::HEADERS => {
                if h.stream == 0 || !frame::padding_ok(p, h.flags) {
                    return Err("a malformed HEADERS frame".into());
                }
                self.block = Some(Block {
                    stream: h.stream,
                    bytes: frame::header_fragment(p, h.flags).to_vec(),
                    end_stream: h.flags & frame::END_STREAM != 0,
                });
                if h.flags & frame::END_HEADERS != 0 {
                    self.end_block()?;
                }
            }
            frame::CONTINUATION => {
                let Some(b) = self.block.as_mut() else {
                    return Err("a CONTINUATION without HEADERS".into());
                };
                if b.bytes.len().saturating_add(p.len()) > hpack::MAX_HEADER_LIST {
                    return Err("response headers too large".into());
                }
                b.bytes.extend_from_slice(p);
                if h.flags & frame::END_HEADERS != 0 {
                    self.end_block()?;
                }
            }
            frame::RST_STREAM => {
                let code = frame::u32_at(p, 0, false).filter(|_| p.len() == 4 && h.stream != 0);
                let Some(code) = code else {
                    return Err("a malformed RST_STREAM frame".into());
                };
                conn.stream_failed(h.stream, Why::Reset(code));
            }
            frame::SETTINGS => {
                if h.stream != 0 {
                    return Err("SETTINGS on a stream".into());
                }
                if h.flags & frame::ACK == 0 {
                    let entries = frame::settings(p).ok_or("a malformed SETTINGS frame")?;
                    conn.apply_settings(&entries)?;
                    let mut out = Vec::new();
                    frame::encode(&mut out, frame::SETTINGS, frame::ACK, 0, &[]);
                    let _ = conn.write(&out);
                }
            }
            frame::PUSH_PROMISE => return Err("PUSH_PROMISE, though push is disabled".into()),
            frame::PING => {
                if h.stream != 0 || p.len() != 8 {
                    return Err("a malformed PING frame".into());
                }
                if h.flags & frame::ACK == 0 {
                    let mut out = Vec::new();
                    frame::encode(&mut out, frame::PING, frame::ACK, 0, p);
                    let _ = conn.write(&out);
                }
            }
            frame::GOAWAY => {
                let (Some(last), Some(code)) =
                    (frame::u32_at(p, 0, true), frame::u32_at(p, 4, false))
                else {
                    return Err("a malformed GOAWAY frame".into());
                };
                let debug = String::from_utf8_lossy(p.get(8..).unwrap_or_default());
                conn.goaway(last, code, debug.trim());
            }
            frame::WINDOW_UPDATE => {
                let inc = frame::u32_at(p, 0, true).filter(|i| p.len() == 4 && *i > 0);
                let Some(inc) = inc else {
                    return Err("a malformed WINDOW_UPDATE frame".into());
                };
                conn.window_update(h.stream, inc)?;
            }
            // PRIORITY, and frame types this client does not know: ignored (§5.5).
            _ => {}
        }
        Ok(())
    }

    fn end_block(&mut self) -> Result<(), String> {
        let Some(b) = self.block.take() else {
            return Ok(());
        };
        let fields = self.hpack.decode(&b.bytes)?;
        self.conn.headers(b.stream, fields, b.end_stream);
        Ok(())
    }
}

/// The reader's updates to the shared state, one per kind of frame.
impl Conn {
    fn data(&self, h: Head, p: &[u8]) -> Result<(), String> {
        let len = p.len() as i64;
        let credit = {
            let mut st = lock(&self.state);
            if len > st.recv_window {
                return Err("the server overran the connection's flow-control window".into());
            }
            st.recv_window -= len;
            let stream = st.streams.get(&h.stream).cloned();
            let mut orphan = len;
            if let Some(s) = stream {
                let mut ib = lock(&s.inbox);
                if !ib.ended && ib.failed.is_none() && !ib.cancelled {
                    if len > ib.recv_window {
                        return Err(format!(
                            "the server overran stream {}'s flow-control window",
                            h.stream
                        ));
                    }
                    ib.recv_window -= len;
                    let data = frame::unpad(p, h.flags);
                    ib.data.extend_from_slice(data);
                    let padding = len - data.len() as i64;
                    ib.unacked += padding;
                    orphan = padding;
                    if h.flags & frame::END_STREAM != 0 {
                        ib.ended = true;
                    }
                    drop(ib);
                    s.ready.notify_all();
                }
            }
            // Padding, and DATA for a stream already finished: nobody consumes it.
            st.unacked += orphan;
            if st.unacked >= CONN_WINDOW / 4 {
                st.recv_window += st.unacked;
                std::mem::take(&mut st.unacked)
            } else {
                0
            }
        };
        self.window_updates(0, 0, credit);
        Ok(())
    }

    fn headers(&self, stream: u32, fields: Fields, end_stream: bool) {
        let Some(s) = lock(&self.state).streams.get(&stream).cloned() else {
            return;
        };
        let mut ib = lock(&s.inbox);
        if ib.headers.is_none() {
            ib.headers = Some(fields);
        } else if ib.trailers.is_none() {
            ib.trailers = Some(fields);
        }
        if end_stream {
            ib.ended = true;
        }
        drop(ib);
        s.ready.notify_all();
    }

    fn stream_failed(&self, stream: u32, why: Why) {
        let Some(s) = lock(&self.state).streams.get(&stream).cloned() else {
            return;
        };
        lock(&s.inbox).failed.get_or_insert(why);
        s.ready.notify_all();
        self.changed.notify_all();
    }

    fn apply_settings(&self, entries: &[(u16, u32)]) -> Result<(), String> {
        let mut st = lock(&self.state);
        for &(id, value) in entries {
            match id {
                frame::SETTINGS_MAX_CONCURRENT_STREAMS => {
                    st.peer_max_streams = usize::try_from(value).unwrap_or(usize::MAX)
                }
                frame::SETTINGS_INITIAL_WINDOW_SIZE => {
                    let value = i64::from(value);
                    if value > frame::MAX_WINDOW {
                        return Err("an initial window over 2^31-1".into());
                    }
                    let delta = value - st.peer_initial_window;
                    st.peer_initial_window = value;
                    for s in st.streams.values() {
                        lock(&s.inbox).send_window += delta;
                    }
                }
                frame::SETTINGS_MAX_FRAME_SIZE => {
                    if !(16_384..=16_777_215).contains(&value) {
                        return Err(format!("a maximum frame size of {value}"));
                    }
                    st.peer_max_frame = value as usize;
                }
                _ => {}
            }
        }
        drop(st);
        self.changed.notify_all();
        Ok(())
    }

    fn goaway(&self, last: u32, code: u32, debug: &str) {
        let why = if debug.is_empty() {
            format!("the server sent GOAWAY (code {code})")
        } else {
            format!("the server sent GOAWAY (code {code}: {debug})")
        };
        let refused: Vec<Arc<Stream>> = {
            let mut st = lock(&self.state);
            st.closed.get_or_insert_with(|| why.clone());
            st.streams
                .values()
                .filter(|s| s.id > last)
                .cloned()
                .collect()
        };
        for s in refused {
            lock(&s.inbox)
                .failed
                .get_or_insert_with(|| Why::Gone(why.clone()));
            s.ready.notify_all();
        }
        self.changed.notify_all();
    }

    fn window_update(&self, stream: u32, inc: u32) -> Result<(), String> {
        let mut st = lock(&self.state);
        let inc = i64::from(inc);
        if stream == 0 {
            st.send_window += inc;
            if st.send_window > frame::MAX_WINDOW {
                return Err("the connection's send window over 2^31-1".into());
            }
        } else if let Some(s) = st.streams.get(&stream) {
            let mut ib = lock(&s.inbox);
            ib.send_window += inc;
            if ib.send_window > frame::MAX_WINDOW {
                return Err(format!("stream {stream}'s send window over 2^31-1"));
            }
        }
        drop(st);
        self.changed.notify_all();
        Ok(())
    }
}

/// Fuzzing: a server's bytes after one call was sent on stream 1, through the reader
/// (frame heads, padding, header blocks, SETTINGS, PING, GOAWAY, RST_STREAM, windows,
/// the bounds), then the call's answer taken as a caller takes it.
#[cfg(feature = "fuzzing")]
pub(crate) fn fuzz_frames(server: &[u8]) {
    let conn = Arc::new(Conn::new(Box::new(std::io::sink()), None));
    let deadline = Instant::now() + Duration::from_secs(1);
    let Ok(s) = conn.open(&[0x83], deadline) else {
        return;
    };
    let _ = conn.send(&s, &[0, 0, 0, 0, 0], deadline);
    Reader::new(conn.clone()).run(server);
    while let Ok(Event::Data(_)) = conn.next(&s, Some(Instant::now())) {}
    let (headers, trailers) = conn.fields(&s);
    let _ = crate::status::from_fields(headers.as_ref(), trailers.as_ref());
    conn.finish(&s);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the client wrote, shared with the test.
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            lock(&self.0).extend_from_slice(b);
            Ok(b.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Sink {
        /// The frames written since the last call.
        fn frames(&self) -> Vec<(Head, Vec<u8>)> {
            let bytes = std::mem::take(&mut *lock(&self.0));
            let mut r = bytes.as_slice();
            let mut out = Vec::new();
            while !r.is_empty() {
                out.push(frame::read(&mut r).expect("a whole frame"));
            }
            out
        }
    }

    fn conn() -> (Arc<Conn>, Reader, Sink) {
        let sink = Sink::default();
        let conn = Arc::new(Conn::new(Box::new(sink.clone()), None));
        (conn.clone(), Reader::new(conn), sink)
    }

    fn head(kind: u8, flags: u8, stream: u32, len: usize) -> Head {
        Head {
            len,
            kind,
            flags,
            stream,
        }
    }

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(5)
    }

    #[test]
    fn streams_get_odd_increasing_ids_and_their_own_frames() {
        let (conn, mut reader, _sink) = conn();
        let a = conn.open(&[0x83], soon()).expect("open");
        let b = conn.open(&[0x83], soon()).expect("open");
        assert_eq!((a.id, b.id), (1, 3));
        reader
            .frame(head(frame::DATA, 0, 3, 2), b"hi")
            .expect("data");
        reader
            .frame(head(frame::DATA, frame::END_STREAM, 1, 3), b"abc")
            .expect("data");
        assert_eq!(conn.next(&b, Some(soon())), Ok(Event::Data(b"hi".to_vec())));
        assert_eq!(
            conn.next(&a, Some(soon())),
            Ok(Event::Data(b"abc".to_vec()))
        );
        assert_eq!(conn.next(&a, Some(soon())), Ok(Event::End));
        assert_eq!(
            conn.next(&b, Some(Instant::now())),
            Err(Why::Deadline),
            "b has not ended"
        );
    }

    #[test]
    fn sending_waits_for_window_and_cuts_at_the_window() {
        let (conn, mut reader, sink) = conn();
        let s = conn.open(&[0x83], soon()).expect("open");
        sink.frames();
        // The server shrinks the stream window to 10 bytes.
        let settings = frame::settings_payload(&[(frame::SETTINGS_INITIAL_WINDOW_SIZE, 10)]);
        reader
            .frame(head(frame::SETTINGS, 0, 0, settings.len()), &settings)
            .expect("settings");
        let acked = sink.frames();
        assert_eq!(
            (acked[0].0.kind, acked[0].0.flags),
            (frame::SETTINGS, frame::ACK)
        );
        let c = conn.clone();
        let s2 = s.clone();
        let sender = std::thread::spawn(move || c.send(&s2, &[7; 25], soon()));
        // 10 bytes go out, then the sender waits; each update lets more through.
        let until = soon();
        while lock(&sink.0).len() < 19 {
            assert!(Instant::now() < until, "the first 10 bytes never went out");
            std::thread::yield_now();
        }
        reader
            .frame(head(frame::WINDOW_UPDATE, 0, 1, 4), &10u32.to_be_bytes())
            .expect("update");
        reader
            .frame(head(frame::WINDOW_UPDATE, 0, 1, 4), &100u32.to_be_bytes())
            .expect("update");
        sender.join().expect("joins").expect("sent");
        let sent: Vec<(usize, u8)> = sink
            .frames()
            .iter()
            .map(|(h, _)| (h.len, h.flags))
            .collect();
        assert_eq!(sent.iter().map(|(l, _)| l).sum::<usize>(), 25);
        assert_eq!(sent.last().map(|(_, f)| *f), Some(frame::END_STREAM));
        assert!(sent.iter().all(|(l, _)| *l <= 15));
    }

    #[test]
    fn consumed_data_gives_its_window_back() {
        let (conn, mut reader, sink) = conn();
        let s = conn.open(&[0x83], soon()).expect("open");
        sink.frames();
        let chunk = vec![1u8; frame::MAX_FRAME_SIZE];
        let n = (STREAM_WINDOW / 4) as usize / chunk.len();
        for _ in 0..n {
            reader
                .frame(head(frame::DATA, 0, 1, chunk.len()), &chunk)
                .expect("data");
        }
        assert!(
            sink.frames().is_empty(),
            "nothing consumed, nothing given back"
        );
        assert!(
            matches!(conn.next(&s, Some(soon())), Ok(Event::Data(d)) if d.len() == n * chunk.len())
        );
        let updates: Vec<(u32, u32)> = sink
            .frames()
            .iter()
            .filter(|(h, _)| h.kind == frame::WINDOW_UPDATE)
            .map(|(h, p)| (h.stream, frame::u32_at(p, 0, true).unwrap_or(0)))
            .collect();
        assert_eq!(updates, [(1, (STREAM_WINDOW / 4) as u32)]);
    }

    #[test]
    fn a_server_overrunning_a_window_breaks_the_connection() {
        let (conn, mut reader, _sink) = conn();
        let _s = conn.open(&[0x83], soon()).expect("open");
        let chunk = vec![1u8; frame::MAX_FRAME_SIZE];
        let fits = STREAM_WINDOW as usize / chunk.len();
        for _ in 0..fits {
            reader
                .frame(head(frame::DATA, 0, 1, chunk.len()), &chunk)
                .expect("within the window");
        }
        let e = reader
            .frame(head(frame::DATA, 0, 1, 1), b"x")
            .expect_err("over");
        assert!(e.contains("flow-control window"), "{e}");
    }

    #[test]
    fn goaway_fails_only_the_streams_after_the_last_one() {
        let (conn, mut reader, _sink) = conn();
        let a = conn.open(&[0x83], soon()).expect("open");
        let b = conn.open(&[0x83], soon()).expect("open");
        let mut p = frame::goaway_payload(1, 0);
        p.extend_from_slice(b"draining");
        reader
            .frame(head(frame::GOAWAY, 0, 0, p.len()), &p)
            .expect("goaway");
        assert!(!conn.usable());
        assert_eq!(
            conn.next(&b, Some(soon())),
            Err(Why::Gone(
                "the server sent GOAWAY (code 0: draining)".into()
            ))
        );
        assert!(matches!(conn.open(&[0x83], soon()), Err(Why::Gone(_))));
        reader
            .frame(head(frame::DATA, frame::END_STREAM, 1, 1), b"x")
            .expect("data");
        assert_eq!(conn.next(&a, Some(soon())), Ok(Event::Data(b"x".to_vec())));
        assert_eq!(conn.next(&a, Some(soon())), Ok(Event::End));
    }

    #[test]
    fn stream_slots_follow_max_concurrent_streams() {
        let (conn, mut reader, _sink) = conn();
        let p = frame::settings_payload(&[(frame::SETTINGS_MAX_CONCURRENT_STREAMS, 1)]);
        reader
            .frame(head(frame::SETTINGS, 0, 0, p.len()), &p)
            .expect("settings");
        let a = conn.open(&[0x83], soon()).expect("open");
        assert_eq!(
            conn.open(&[0x83], Instant::now() + Duration::from_millis(20))
                .map(|s| s.id),
            Err(Why::Deadline)
        );
        conn.finish(&a);
        assert_eq!(conn.open(&[0x83], soon()).map(|s| s.id), Ok(3));
    }

    #[test]
    fn header_blocks_span_continuations_and_a_cut_block_is_an_error() {
        let (conn, mut reader, _sink) = conn();
        let s = conn.open(&[0x83], soon()).expect("open");
        // `:status: 200` (static index 8), then a literal grpc-status in a CONTINUATION.
        reader
            .frame(head(frame::HEADERS, frame::END_STREAM, 1, 1), &[0x88])
            .expect("headers");
        let mut rest = Vec::new();
        hpack::encode_literal(&mut rest, 0, "grpc-status", "0");
        reader
            .frame(
                head(frame::CONTINUATION, frame::END_HEADERS, 1, rest.len()),
                &rest,
            )
            .expect("continuation");
        assert_eq!(conn.next(&s, Some(soon())), Ok(Event::End));
        let (headers, _) = conn.fields(&s);
        assert_eq!(headers.map(|h| h.len()), Some(2));
        reader
            .frame(head(frame::HEADERS, 0, 1, 1), &[0x88])
            .expect("headers");
        assert!(reader.frame(head(frame::PING, 0, 0, 8), &[0; 8]).is_err());
    }

    #[test]
    fn pings_are_answered_and_resets_fail_their_stream() {
        let (conn, mut reader, sink) = conn();
        let s = conn.open(&[0x83], soon()).expect("open");
        sink.frames();
        reader
            .frame(head(frame::PING, 0, 0, 8), b"12345678")
            .expect("ping");
        let pong = sink.frames();
        assert_eq!(
            (pong[0].0.flags, pong[0].1.as_slice()),
            (frame::ACK, &b"12345678"[..])
        );
        reader
            .frame(head(frame::RST_STREAM, 0, 1, 4), &7u32.to_be_bytes())
            .expect("reset");
        assert_eq!(conn.next(&s, Some(soon())), Err(Why::Reset(7)));
        conn.finish(&s);
        assert!(
            sink.frames().is_empty(),
            "a reset stream is not reset again"
        );
    }

    #[test]
    fn a_broken_connection_fails_every_waiting_stream() {
        let (conn, reader, _sink) = conn();
        let s = conn.open(&[0x83], soon()).expect("open");
        let c = conn.clone();
        let s2 = s.clone();
        let waiter = std::thread::spawn(move || c.next(&s2, None));
        reader.run(&[][..]);
        assert_eq!(
            waiter.join().expect("joins"),
            Err(Why::Gone("the server closed the connection".into()))
        );
        assert!(!conn.usable());
    }
}
