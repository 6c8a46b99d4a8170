//! The kubelet ports' HTTP/1.1 transport: a small server on `httparse`, bounded in
//! every dimension a client controls. It is the only code that reads or writes the
//! wire of the kubelet's ports; handlers see a parsed [`Req`] and return a [`Reply`].
//!
//! Why not tiny_http: it starts a thread per connection with no cap, reads request
//! bodies of any announced size, has no header or idle timeout, and its accept thread
//! ends on the first `EMFILE`, after which the port refuses everyone for good. None of
//! that can be fixed from outside it, because it owns its accept loop.
//!
//! The shape, per port:
//! - one **poller** thread (`srv-readonly`, `srv-healthz`) owns the listening socket and
//!   every connection that is not inside a handler. It waits in `poll(2)` on all of them
//!   at once, accepts, reads request heads without blocking, and enforces the header
//!   timeout, the idle keep-alive timeout, the header size cap and the connection cap.
//!   A slow or silent client therefore costs one file descriptor and a small buffer,
//!   never a thread.
//! - a bounded pool of **worker** threads (`srv-readonly-0` …) runs the handler for one
//!   complete request head and writes the answer (with a write timeout), then hands a
//!   keep-alive connection back to the poller. Workers start when a head is queued and
//!   none is free ([`base::loops::Pool`]), and exit after [`WORKER_IDLE`] without a
//!   request; the queue and its 503 when full are as with a fixed pool.
//!
//! Limits: at most [`Limits::max_connections`] connections are open at once; when one
//! more arrives, the connection that has waited longest without a request in a handler
//! (idle keep-alive ones first) is closed to make room, so a flood of silent
//! connections cannot lock a new client out. Request bodies are never read: the
//! kubelet's read-only and healthz handlers need none, so a request that announces one
//! is answered and its connection closed. `accept` errors (`EMFILE` included) are
//! logged and the connection that has waited longest is given up so the next accept
//! has a descriptor (accepting pauses briefly only when there is none to give up); the
//! accept loop never ends on an error. If the poller itself fails, the loop helper runs
//! it again ([`Loops::spawn_supervised`]).
//!
//! TLS (the kubelet port): the poller owns the handshake too. It feeds what the socket
//! has into the connection's `rustls::ServerConnection` and reads the head from its
//! plaintext ([`crate::tls::Stream`]), so a handshake that never finishes is a head
//! that never completes and is closed at the header timeout; the worker writes the
//! answer through the same connection. The client certificate chain, verified against
//! the client CA on the worker for each request, reaches the handler in
//! [`Req::client_cert`], which only the transport sets.
//!
//! Streams: a handler may answer with [`Reply::takeover`] instead of a body (logs
//! followed, exec, attach, port-forward). The worker then hands the connection,
//! still non-blocking, to a thread of its own (`stream-N`, at most
//! [`Limits::max_streams`] at once, 503 beyond) as a [`Hijacked`], which writes its own
//! status line and headers, may read what the client sends, and closes the connection
//! when it is dropped. The connection leaves the poller's count; the workers are free
//! at once, so a stream that lasts hours holds no worker.
//!
//! Over 800 lines: the poller is one state machine (accept, heads, caps, timeouts,
//! linger) whose bounds are easier to check in one file; its unit tests follow it.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use rustix::event::{PollFd, PollFlags};

use crate::server::{Reply, Req};
use crate::tls::{Stream, TlsServer};
use base::loops::{lock, LoopHandle, Loops, Pool, PoolSpec, SpawnError, Stop};

/// The bounds of one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Open connections at most (reading, idle, or inside a handler).
    pub max_connections: usize,
    /// Handler threads.
    pub workers: usize,
    /// From accept (or from the first byte of a keep-alive connection's next request)
    /// to a complete request head.
    pub header_timeout: Duration,
    /// How long a keep-alive connection may wait for its next request.
    pub idle_timeout: Duration,
    /// How long writing one answer may block.
    pub write_timeout: Duration,
    /// The largest request head (request line and headers) read.
    pub max_header_bytes: usize,
    /// Connections taken over by a streaming answer at most ([`Hijacked`]), each on a
    /// thread of its own; 0 refuses every takeover with 503.
    pub max_streams: usize,
    /// How long a stream's write may wait for the client to take bytes (upstream's 4 h
    /// `WriteTimeout`/`streamingConnectionIdleTimeout` applies to its streams).
    pub stream_write_timeout: Duration,
}

impl Limits {
    /// The plain ports (healthz, read-only). 256 connections keep the three ports
    /// together well inside the default 1024 descriptors; 16 KiB heads hold any path
    /// these ports serve (upstream allows 1 MiB, which times 256 is no budget for a
    /// small board); 10 s for a head as the slowloris finding asks.
    pub const PLAIN: Limits = Limits {
        max_connections: 256,
        workers: 4,
        header_timeout: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(60),
        write_timeout: Duration::from_secs(10),
        max_header_bytes: 16 * 1024,
        max_streams: 0,
        stream_write_timeout: Duration::from_secs(10),
    };

    /// The authenticated kubelet port: the plain ports' caps, but heads up to 1 MiB as
    /// upstream's `MaxHeaderBytes` (clients send long bearer tokens and client-go
    /// headers). A head buffer grows only as bytes arrive, and each is bounded by the
    /// header timeout, so the worst case is every one of the 256 connections holding an
    /// almost-full head at once: 256 × (1 MiB + rustls's ~34 KiB of record buffers) ≈
    /// 265 MiB for at most 10 s; an idle or normal connection costs a few KiB.
    ///
    /// Streams (logs followed, exec, attach, port-forward) leave the connection count
    /// and get a thread each, at most 128 at once (upstream: a goroutine each, no cap);
    /// their writes may wait 4 h for a slow client, as upstream's.
    pub const KUBELET: Limits = Limits {
        max_header_bytes: 1024 * 1024,
        max_streams: 128,
        stream_write_timeout: Duration::from_secs(4 * 3600),
        ..Limits::PLAIN
    };

    /// These limits with the connection cap lowered, if need be, so that `servers`
    /// servers together stay inside the process's descriptor limit with
    /// [`RESERVED_FDS`] to spare: a flood on one port must not take the descriptors
    /// the other ports (and Docker) need.
    pub fn fit_to_descriptors(self, servers: usize) -> Limits {
        // getrlimit cannot fail for RLIMIT_NOFILE; `None` is RLIM_INFINITY.
        let cur = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(u64::MAX);
        self.fit_to(cur, servers)
    }

    fn fit_to(self, nofile: u64, servers: usize) -> Limits {
        let servers = u64::try_from(servers.max(1)).unwrap_or(u64::MAX);
        let share = nofile.saturating_sub(RESERVED_FDS) / servers;
        let share = usize::try_from(share).unwrap_or(usize::MAX);
        Limits {
            max_connections: self.max_connections.min(share.max(MIN_CONNECTIONS)),
            ..self
        }
    }
}

/// Descriptors left to the rest of the process (Docker connections, sources, files,
/// exec probes) when the servers' caps are fitted to the descriptor limit.
const RESERVED_FDS: u64 = 128;
/// No server is cut below this many connections, however low the limit.
const MIN_CONNECTIONS: usize = 8;

/// How many connections one `poll` wake accepts before serving the others, so a flood
/// of new connections cannot starve the ones already open.
const ACCEPT_BURST: usize = 64;
/// How long accepting pauses after an `accept` error (`EMFILE`, `ENFILE`, `ENOMEM` …):
/// the pending connection stays in the backlog and would wake `poll` at once again.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);
/// At most one log line per this per server for repeated accept errors.
const ACCEPT_ERROR_LOG_EVERY: Duration = Duration::from_secs(10);
/// The poller's longest wait with nothing to time out: it records a tick for the
/// registry (`/debug/loops`) at least this often. Shutdown and new work wake it through
/// descriptors (the waker, [`Stop::fd`]), so an idle port needs no shorter wake-up.
const MAX_POLL_WAIT: Duration = Duration::from_secs(60);
/// Requests handed to the workers but not yet taken, per worker.
const QUEUE_PER_WORKER: usize = 4;
/// A worker with no request for this long exits; the next request starts one again
/// (a thread spawn, ~0.1 ms). A scraper every 10–60 s keeps one worker; a port nobody
/// asks keeps none.
const WORKER_IDLE: Duration = Duration::from_secs(60);
/// How many headers a request may have.
const MAX_HEADERS: usize = 64;
/// The buffer read at a time.
const READ_CHUNK: usize = 4096;
/// How long a half-closed connection is drained before it is closed (Go's
/// `rstAvoidanceDelay`), and how much of an unread body is discarded at most.
const LINGER: Duration = Duration::from_millis(500);
const LINGER_MAX_BYTES: usize = 256 * 1024;

/// Wakes a poller from another thread (a worker handing a connection back, shutdown).
#[derive(Debug, Clone)]
pub(crate) struct Waker(Arc<UnixStream>);

impl Waker {
    /// Wakes the poller. Never blocks: a full pipe already means "awake".
    pub(crate) fn wake(&self) {
        let _ = (&*self.0).write(&[1]);
    }
}

/// Serves `listener` with `handler` on a poller thread called `name` and
/// `limits.workers` worker threads called `name-N`, until shutdown. Returns the waker
/// that shutdown uses to end the poller at once.
pub(crate) fn serve<H>(
    loops: &Loops,
    name: &str,
    listener: TcpListener,
    limits: Limits,
    handler: H,
) -> Result<Waker, SpawnError>
where
    H: Fn(&Req) -> Reply + Send + Sync + 'static,
{
    serve_with(loops, name, listener, limits, None, handler)
}

/// [`serve`] over TLS with `tls`: every accepted connection does a handshake first.
pub(crate) fn serve_tls<H>(
    loops: &Loops,
    name: &str,
    listener: TcpListener,
    limits: Limits,
    tls: TlsServer,
    handler: H,
) -> Result<Waker, SpawnError>
where
    H: Fn(&Req) -> Reply + Send + Sync + 'static,
{
    serve_with(loops, name, listener, limits, Some(tls), handler)
}

fn serve_with<H>(
    loops: &Loops,
    name: &str,
    listener: TcpListener,
    limits: Limits,
    tls: Option<TlsServer>,
    handler: H,
) -> Result<Waker, SpawnError>
where
    H: Fn(&Req) -> Reply + Send + Sync + 'static,
{
    let (wake_rx, wake_tx) = UnixStream::pair().map_err(|e| SpawnError::new(name, e))?;
    for s in [&wake_rx, &wake_tx] {
        s.set_nonblocking(true)
            .map_err(|e| SpawnError::new(name, e))?;
    }
    listener
        .set_nonblocking(true)
        .map_err(|e| SpawnError::new(name, e))?;
    let waker = Waker(Arc::new(wake_tx));
    let workers = limits.workers.max(1);
    let (job_tx, job_rx) = crossbeam_channel::bounded::<Job>(workers * QUEUE_PER_WORKER);
    // Bounded by what is sent on it, not by its type: a worker hands back only a
    // connection the poller handed it, and the poller holds at most `max_connections`.
    // Its blocks are made as connections come back; `bounded(max_connections)` made and
    // stamped every slot at start (30 KiB a port, resident however idle the port).
    let (back_tx, back_rx) = crossbeam_channel::unbounded::<Back>();
    let handler = Arc::new(handler);
    let streams = Streams {
        loops: loops.clone(),
        slots: Arc::new(Mutex::new(vec![false; limits.max_streams])),
    };
    // Handlers decode request bodies and answers (JSON, YAML): the big stack.
    let pool = {
        let back = back_tx.clone();
        let waker = waker.clone();
        let streams = streams.clone();
        let spec = PoolSpec {
            prefix: name.to_string(),
            max: workers,
            idle: WORKER_IDLE,
        };
        let big = loops.with_stack_size(base::loops::BIG_STACK);
        Pool::new(&big, spec, job_rx, move |job, handle: &LoopHandle| {
            let ends = WorkerEnds {
                back: &back,
                waker: &waker,
                streams: &streams,
            };
            serve_job(job, handle, &ends, limits, &*handler)
        })
    };
    let mut poller = Poller {
        name: name.to_string(),
        listener,
        tls,
        wake: wake_rx,
        limits,
        jobs: job_tx,
        pool,
        back: back_rx,
        conns: Vec::new(),
        in_handlers: 0,
        accept_paused_until: None,
        last_accept_error_log: None,
    };
    loops.spawn_supervised(name, Duration::from_secs(1), move |stop, handle| {
        poller.run(stop, handle)
    })?;
    Ok(waker)
}

/// A complete request head, handed from the poller to a worker with its connection.
#[derive(Debug)]
struct Job {
    conn: Conn,
    head: Head,
}

/// What a worker hands back: a connection to keep alive or to linger, or word that it
/// closed one.
#[derive(Debug)]
enum Back {
    KeepAlive(Conn),
    Linger(Conn),
    Closed,
}

/// An open connection outside a handler.
#[derive(Debug)]
struct Conn {
    stream: Stream,
    peer: Option<SocketAddr>,
    /// Bytes read and not yet consumed (a partial head, or a pipelined next request).
    buf: Vec<u8>,
    /// When the current phase began.
    since: Instant,
    phase: Phase,
    /// Bytes dropped while lingering.
    discarded: usize,
}

/// What a connection outside a handler is waiting for. The order is the eviction
/// order: a lingering connection is given up first, one reading a head last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    /// Answered and half-closed: reading and discarding what the client still sends
    /// (an unread body), so that closing does not reset the connection before the
    /// client has read the answer (Go's `closeWriteAndWait`).
    Linger,
    /// A keep-alive connection waiting for the first byte of its next request.
    Idle,
    /// Reading a request head.
    Head,
}

impl Conn {
    fn new(stream: Stream, peer: Option<SocketAddr>, now: Instant) -> Conn {
        Conn {
            stream,
            peer,
            buf: Vec::new(),
            since: now,
            phase: Phase::Head,
            discarded: 0,
        }
    }

    fn deadline(&self, limits: &Limits) -> Instant {
        let wait = match self.phase {
            Phase::Linger => LINGER,
            Phase::Idle => limits.idle_timeout,
            Phase::Head => limits.header_timeout,
        };
        // The limits are constants of ours, far from overflowing an Instant.
        self.since + wait
    }
}

/// A parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// `GET`, `HEAD` …
    pub method: String,
    /// The request target as sent.
    pub target: String,
    /// Headers in order, names as sent, values lossily decoded.
    pub headers: Vec<(String, String)>,
    /// Whether the connection may serve another request after this one.
    pub keep_alive: bool,
    /// Whether a body follows the head (which is never read).
    pub has_body: bool,
    /// Length of the head in bytes.
    pub len: usize,
}

/// The outcome of parsing the bytes read so far.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// More bytes are needed.
    Partial,
    /// A complete head.
    Complete(Head),
    /// The head is unusable: answer with this status and close.
    Invalid(u16),
}

/// Parses a request head from `buf` (pure, no I/O).
pub fn parse_head(buf: &[u8], max_header_bytes: usize) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) if len > max_header_bytes => Parsed::Invalid(431),
        Ok(httparse::Status::Complete(len)) => {
            let version = req.version.unwrap_or(1);
            let mut keep_alive = version >= 1;
            let mut has_body = false;
            let mut out = Vec::with_capacity(req.headers.len());
            for h in req.headers.iter() {
                let value = String::from_utf8_lossy(h.value).trim().to_string();
                if h.name.eq_ignore_ascii_case("connection") {
                    for token in value.split(',').map(str::trim) {
                        if token.eq_ignore_ascii_case("close") {
                            keep_alive = false;
                        } else if token.eq_ignore_ascii_case("keep-alive") {
                            keep_alive = true;
                        }
                    }
                } else if h.name.eq_ignore_ascii_case("content-length") {
                    match value.parse::<u64>() {
                        Ok(0) => {}
                        Ok(_) => has_body = true,
                        Err(_) => return Parsed::Invalid(400),
                    }
                } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                    has_body = true;
                }
                out.push((h.name.to_string(), value));
            }
            Parsed::Complete(Head {
                method: req.method.unwrap_or("").to_string(),
                target: req.path.unwrap_or("/").to_string(),
                headers: out,
                keep_alive,
                has_body,
                len,
            })
        }
        Ok(httparse::Status::Partial) if buf.len() >= max_header_bytes => Parsed::Invalid(431),
        Ok(httparse::Status::Partial) => Parsed::Partial,
        Err(httparse::Error::TooManyHeaders) => Parsed::Invalid(431),
        Err(_) => Parsed::Invalid(400),
    }
}

/// What one [`Poller::wait`] found ready (readable, or hung up).
#[derive(Debug)]
struct Ready {
    waker: bool,
    listener: bool,
    /// One per connection, in `Poller::conns` order.
    conns: Vec<bool>,
}

/// The poller's state: the listener, the connections outside handlers, and the count
/// of those inside.
#[derive(Debug)]
struct Poller {
    name: String,
    listener: TcpListener,
    /// TLS for every connection (the kubelet port); `None` for the plain ports.
    tls: Option<TlsServer>,
    wake: UnixStream,
    limits: Limits,
    jobs: Sender<Job>,
    /// The workers that drain `jobs`, started on demand.
    pool: Pool<Job>,
    back: Receiver<Back>,
    conns: Vec<Conn>,
    /// Connections handed to workers and not yet handed back.
    in_handlers: usize,
    accept_paused_until: Option<Instant>,
    last_accept_error_log: Option<Instant>,
}

impl Poller {
    /// Serves until shutdown. Returns an error only if `poll(2)` itself fails; the loop
    /// helper then runs it again (the connections it held are closed).
    fn run(&mut self, stop: &Stop, handle: &LoopHandle) -> io::Result<()> {
        self.conns.clear();
        loop {
            if stop.is_stopped() {
                return Ok(());
            }
            let now = Instant::now();
            if self.accept_paused_until.is_some_and(|t| now >= t) {
                self.accept_paused_until = None;
            }
            let timeout = self.poll_timeout(now);
            let ready = match self.wait(stop, timeout) {
                Ok(ready) => ready,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            let began = handle.begin_tick();
            let now = Instant::now();
            if ready.waker {
                self.drain_waker();
            }
            self.take_back(now);
            self.serve_readable(&ready.conns, now);
            if ready.listener {
                self.accept(now);
            }
            self.expire(now);
            handle.end_tick(began, None);
        }
    }

    /// One `poll(2)` on the waker, the listener (left out while accepting is paused),
    /// one descriptor per connection and, last, `stop` (readable at shutdown, so the
    /// wait needs no timeout to see it), at most `timeout`.
    fn wait(&self, stop: &Stop, timeout: Duration) -> io::Result<Ready> {
        let accepting = self.accept_paused_until.is_none();
        let mut fds = Vec::with_capacity(self.conns.len() + 3);
        fds.push(PollFd::new(&self.wake, PollFlags::IN));
        if accepting {
            fds.push(PollFd::new(&self.listener, PollFlags::IN));
        }
        let first_conn = fds.len();
        fds.extend(self.conns.iter().map(|c| {
            let mut events = PollFlags::IN;
            if c.stream.wants_write() {
                // A TLS handshake reply the socket could not take at once.
                events |= PollFlags::OUT;
            }
            PollFd::from_borrowed_fd(c.stream.as_fd(), events)
        }));
        fds.push(PollFd::from_borrowed_fd(stop.fd(), PollFlags::IN));
        rustix::event::poll(&mut fds, Some(&base::time::poll_timeout(timeout)))?;
        let ready = |p: &PollFd<'_>| !p.revents().is_empty();
        Ok(Ready {
            waker: ready(&fds[0]),
            listener: accepting && ready(&fds[1]),
            conns: fds[first_conn..fds.len() - 1].iter().map(ready).collect(),
        })
    }

    /// Until the nearest connection deadline or the end of an accept pause.
    fn poll_timeout(&self, now: Instant) -> Duration {
        self.conns
            .iter()
            .map(|c| c.deadline(&self.limits))
            .chain(self.accept_paused_until)
            .map(|t| t.saturating_duration_since(now))
            .fold(MAX_POLL_WAIT, Duration::min)
    }

    fn drain_waker(&mut self) {
        let mut sink = [0u8; 64];
        while matches!((&self.wake).read(&mut sink), Ok(n) if n > 0) {}
    }

    /// Connections the workers are done with.
    fn take_back(&mut self, now: Instant) {
        while let Ok(back) = self.back.try_recv() {
            self.in_handlers = self.in_handlers.saturating_sub(1);
            match back {
                Back::KeepAlive(mut conn) => {
                    conn.since = now;
                    // TLS may hold decrypted bytes of a pipelined request that
                    // `poll(2)` will never report: take them now.
                    if conn.stream.has_buffered() {
                        if let ReadOutcome::Closed =
                            read_some(&mut conn, self.limits.max_header_bytes)
                        {
                            continue;
                        }
                    }
                    if conn.buf.is_empty() {
                        conn.phase = Phase::Idle;
                        self.conns.push(conn);
                    } else {
                        // A pipelined request is already in the buffer.
                        conn.phase = Phase::Head;
                        self.advance(conn, now);
                    }
                }
                Back::Linger(conn) => self.linger(conn, now),
                Back::Closed => {}
            }
        }
    }

    fn serve_readable(&mut self, readable: &[bool], now: Instant) {
        // Take the readable connections out first (from the back, so indices hold).
        let mut ready = Vec::new();
        for i in (0..readable.len().min(self.conns.len())).rev() {
            if readable[i] {
                ready.push(self.conns.swap_remove(i));
            }
        }
        for mut conn in ready {
            if conn.phase == Phase::Linger {
                if discard_some(&mut conn) {
                    self.conns.push(conn);
                }
                continue;
            }
            match read_some(&mut conn, self.limits.max_header_bytes) {
                ReadOutcome::Closed => continue,
                ReadOutcome::Data => {
                    if conn.phase == Phase::Idle {
                        // The next request has begun: the header timeout starts now.
                        conn.phase = Phase::Head;
                        conn.since = now;
                    }
                    self.advance(conn, now);
                }
                ReadOutcome::Nothing => self.conns.push(conn),
            }
        }
    }

    /// Sends `status` and lingers (or closes at once if the answer cannot be sent).
    fn answer_and_linger(&mut self, mut conn: Conn, status: u16, now: Instant) {
        if answer(&mut conn.stream, status).is_ok() {
            self.linger(conn, now);
        }
    }

    /// Half-closes an answered connection and drains it for a moment before closing.
    fn linger(&mut self, mut conn: Conn, now: Instant) {
        if conn.stream.shutdown_write().is_err() {
            return;
        }
        conn.buf = Vec::new();
        conn.phase = Phase::Linger;
        conn.since = now;
        self.conns.push(conn);
    }

    /// Parses what `conn` has read: hands a complete head to a worker, answers and
    /// closes an invalid one, or keeps waiting for more.
    fn advance(&mut self, mut conn: Conn, now: Instant) {
        match parse_head(&conn.buf, self.limits.max_header_bytes) {
            Parsed::Partial => self.conns.push(conn),
            Parsed::Invalid(status) => {
                log::debug!("{}: bad request from {:?}: {status}", self.name, conn.peer);
                self.answer_and_linger(conn, status, now);
            }
            Parsed::Complete(head) => {
                conn.buf.drain(..head.len);
                match self.jobs.try_send(Job { conn, head }) {
                    Ok(()) => {
                        self.in_handlers += 1;
                        self.pool.kick();
                    }
                    Err(TrySendError::Full(job) | TrySendError::Disconnected(job)) => {
                        log::debug!("{}: every worker is busy; 503", self.name);
                        self.answer_and_linger(job.conn, 503, now);
                    }
                }
            }
        }
    }

    fn accept(&mut self, now: Instant) {
        for _ in 0..ACCEPT_BURST {
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    if self.conns.len() + self.in_handlers >= self.limits.max_connections
                        && !self.evict_one()
                    {
                        // Every slot is inside a handler: nobody to make room for it.
                        // Plain only: a TLS client cannot read an answer before its
                        // handshake, so it is just closed.
                        if self.tls.is_none() {
                            let _ = answer(&mut Stream::Plain(stream), 503);
                        }
                        continue;
                    }
                    if stream.set_nonblocking(true).is_err() {
                        continue;
                    }
                    let stream = match &self.tls {
                        None => Stream::Plain(stream),
                        Some(server) => match Stream::tls(stream, server) {
                            Ok(s) => s,
                            Err(e) => {
                                log::debug!("{}: no TLS state for {peer}: {e}", self.name);
                                continue;
                            }
                        },
                    };
                    self.conns.push(Conn::new(stream, Some(peer), now));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                    ) =>
                {
                    continue
                }
                Err(e) => {
                    // EMFILE, ENFILE, ENOBUFS, ENOMEM …: give up the connection that has
                    // waited longest and try again with the descriptor that frees; with
                    // none to give up, pause (the pending connection stays in the
                    // backlog and would wake `poll` at once again).
                    let due = self
                        .last_accept_error_log
                        .is_none_or(|t| now.duration_since(t) >= ACCEPT_ERROR_LOG_EVERY);
                    if due {
                        log::warn!(
                            "{}: accept failed: {e}; closing the oldest waiting connections \
                             to make room",
                            self.name
                        );
                        self.last_accept_error_log = Some(now);
                    }
                    if !self.evict_one() {
                        self.accept_paused_until = Some(now + ACCEPT_ERROR_PAUSE);
                        return;
                    }
                }
            }
        }
    }

    /// Closes the connection that has waited longest, lingering and idle keep-alive
    /// ones first. False if there is none outside the handlers.
    fn evict_one(&mut self) -> bool {
        let victim = self
            .conns
            .iter()
            .enumerate()
            .min_by_key(|(_, c)| (c.phase, c.since))
            .map(|(i, _)| i);
        match victim {
            Some(i) => {
                let c = self.conns.swap_remove(i);
                log::debug!(
                    "{}: connection cap reached; closed {:?} ({:?})",
                    self.name,
                    c.peer,
                    c.phase
                );
                true
            }
            None => false,
        }
    }

    /// Closes connections past their header or idle deadline.
    fn expire(&mut self, now: Instant) {
        let limits = self.limits;
        let (expired, open): (Vec<Conn>, Vec<Conn>) = std::mem::take(&mut self.conns)
            .into_iter()
            .partition(|c| now >= c.deadline(&limits));
        self.conns = open;
        for c in expired {
            if c.phase == Phase::Head {
                log::debug!(
                    "{}: no complete request from {:?} in time",
                    self.name,
                    c.peer
                );
                self.answer_and_linger(c, 408, now);
            }
        }
    }
}

enum ReadOutcome {
    /// Bytes were added to the buffer.
    Data,
    /// Nothing to read after all (a spurious wake).
    Nothing,
    /// The peer closed, or the socket failed.
    Closed,
}

/// Reads what is available without blocking, up to one byte past the head cap (so
/// that an oversized head is seen as such).
fn read_some(conn: &mut Conn, max_header_bytes: usize) -> ReadOutcome {
    let mut got = false;
    loop {
        let room = (max_header_bytes + 1).saturating_sub(conn.buf.len());
        if room == 0 {
            return ReadOutcome::Data;
        }
        let mut chunk = [0u8; READ_CHUNK];
        let want = room.min(READ_CHUNK);
        match conn.stream.read_nonblocking(&mut chunk[..want]) {
            Ok(0) => return ReadOutcome::Closed,
            Ok(n) => {
                conn.buf.extend_from_slice(&chunk[..n]);
                got = true;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return if got {
                    ReadOutcome::Data
                } else {
                    ReadOutcome::Nothing
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return ReadOutcome::Closed,
        }
    }
}

/// Reads and drops what a lingering connection still sends. False when it is done
/// (closed by the peer, failed, or sent more than we drain).
fn discard_some(conn: &mut Conn) -> bool {
    let mut chunk = [0u8; READ_CHUNK];
    loop {
        match conn.stream.discard(&mut chunk) {
            Ok(0) => return false,
            Ok(n) => {
                conn.discarded = conn.discarded.saturating_add(n);
                if conn.discarded > LINGER_MAX_BYTES {
                    return false;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
}

/// A short error answer, written without blocking (it fits any socket buffer).
fn answer(stream: &mut Stream, status: u16) -> io::Result<()> {
    let body = format!("{}\n", reason(status));
    let mut out = response_head(status, "text/plain; charset=utf-8", body.len(), None, false);
    out.push_str(&body);
    stream.write_short(out.as_bytes())
}

/// A streaming answer's body: runs on a stream thread with the connection.
pub struct Takeover(pub(super) Box<dyn FnOnce(Hijacked) + Send>);

impl std::fmt::Debug for Takeover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Takeover")
    }
}

/// A connection taken over by a streaming answer, on its own stream thread. The
/// socket is non-blocking: reads return `WouldBlock` when nothing is there (wait with
/// `poll(2)` on [`Hijacked::fd`], after checking [`Hijacked::has_buffered`]); writes
/// wait for the client up to the port's stream write timeout. Dropping it closes the
/// connection (TLS `close_notify`, then the socket).
#[derive(Debug)]
pub struct Hijacked {
    stream: Stream,
    /// Bytes the client sent after the request head, read before the takeover.
    early: Vec<u8>,
    write_timeout: Duration,
    stop: Stop,
}

impl Hijacked {
    /// The socket's descriptor, for `poll(2)` (readable: the client sent something or
    /// closed).
    pub fn fd(&self) -> std::os::fd::RawFd {
        self.stream.fd()
    }

    /// Whether bytes can be read without waiting for the socket: early bytes, or
    /// plaintext rustls already decrypted (which `poll(2)` cannot see).
    pub fn has_buffered(&mut self) -> bool {
        !self.early.is_empty() || self.stream.has_buffered()
    }

    /// Reads without blocking: `Ok(0)` when the client has closed, `WouldBlock` when
    /// nothing is there yet.
    pub fn read_nonblocking(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if !self.early.is_empty() {
            let n = out.len().min(self.early.len());
            out[..n].copy_from_slice(&self.early[..n]);
            self.early.drain(..n);
            return Ok(n);
        }
        self.stream.read_nonblocking(out)
    }

    /// Writes all of `data`, waiting for the client at most the stream write timeout
    /// without progress.
    pub fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        self.stream.write_all_waiting(data, self.write_timeout)
    }

    /// Writes what the connection takes now without waiting (`WouldBlock` when it
    /// takes nothing): for a stream that polls the client beside a backend and keeps
    /// its own bounded buffer. Call [`Hijacked::flush_nonblocking`] when
    /// [`Hijacked::wants_write`] says TLS records are still queued.
    pub(crate) fn write_nonblocking(&mut self, data: &[u8]) -> io::Result<usize> {
        self.stream.write_nonblocking(data)
    }

    /// Whether TLS records wait to be sent (poll for `POLLOUT` then).
    pub(crate) fn wants_write(&self) -> bool {
        self.stream.wants_write()
    }

    /// Sends queued TLS records until the socket would block.
    pub(crate) fn flush_nonblocking(&mut self) -> io::Result<()> {
        self.stream.flush_nonblocking()
    }

    /// Writes a status line and headers as Go's net/http does (`Date`, and `nosniff`
    /// on errors), then the blank line. Give `Content-Type`, `Transfer-Encoding`,
    /// `Upgrade` … in `headers`.
    pub fn write_head(&mut self, status: u16, headers: &[(&str, &str)]) -> io::Result<()> {
        let mut h = format!(
            "HTTP/1.1 {status} {}\r\n",
            if status == 101 {
                "Switching Protocols"
            } else {
                reason(status)
            }
        );
        for (name, value) in headers {
            h.push_str(&format!("{name}: {value}\r\n"));
        }
        h.push_str(&format!(
            "Date: {}\r\n",
            base::time::http_date(SystemTime::now())
        ));
        if status >= 400 {
            h.push_str("X-Content-Type-Options: nosniff\r\n");
        }
        h.push_str("\r\n");
        self.write_all(h.as_bytes())
    }

    /// Writes one chunk of a `Transfer-Encoding: chunked` body (nothing for an empty
    /// `data`, which would end the body).
    pub fn write_chunk(&mut self, data: &[u8]) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let mut out = format!("{:x}\r\n", data.len()).into_bytes();
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
        self.write_all(&out)
    }

    /// Ends a chunked body.
    pub fn finish_chunks(&mut self) -> io::Result<()> {
        self.write_all(b"0\r\n\r\n")
    }

    /// The shutdown broadcast: a stream ends when it closes.
    pub fn stop(&self) -> &Stop {
        &self.stop
    }
}

impl Drop for Hijacked {
    fn drop(&mut self) {
        let _ = self.stream.shutdown_write();
    }
}

impl AsFd for Hijacked {
    /// The socket, for `poll(2)` (see [`Hijacked::fd`]).
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.stream.as_fd()
    }
}

impl Read for Hijacked {
    /// [`Hijacked::read_nonblocking`], for protocol crates over `Read`.
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        self.read_nonblocking(out)
    }
}

impl Write for Hijacked {
    /// All of `data` ([`Hijacked::write_all`]), for protocol crates over `Write`.
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        Hijacked::write_all(self, data)?;
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The stream threads of one port: `stream-N`, N a free slot below
/// [`Limits::max_streams`].
#[derive(Clone, Debug)]
struct Streams {
    loops: Loops,
    slots: Arc<Mutex<Vec<bool>>>,
}

impl Streams {
    /// Runs `takeover` with `conn` on a stream thread. Gives the connection back when
    /// every slot is taken (or the thread cannot be made).
    fn start(&self, conn: Conn, takeover: Takeover, limits: Limits) -> Result<(), Conn> {
        let slot = {
            let mut slots = lock(&self.slots);
            match slots.iter().position(|used| !used) {
                Some(i) => {
                    slots[i] = true;
                    i
                }
                None => return Err(conn),
            }
        };
        let name = format!("stream-{slot}");
        let slots = self.slots.clone();
        let Conn { stream, buf, .. } = conn;
        // Dropped when the stream ends, however it ends (a panic included).
        let release = StreamSlot { slots, slot };
        // The connection moves into the thread; if it cannot start, it is closed.
        let cell = Arc::new(Mutex::new(Some((stream, buf, takeover, release))));
        let taken = cell.clone();
        let spawned = self.loops.spawn_transient(&name, move |stop| {
            let Some((stream, early, takeover, release)) = lock(&taken).take() else {
                return;
            };
            let hijacked = Hijacked {
                stream,
                early,
                write_timeout: limits.stream_write_timeout,
                stop,
            };
            (takeover.0)(hijacked);
            drop(release);
        });
        if let Err(e) = spawned {
            log::warn!("{e}: a stream was refused");
            drop(lock(&cell).take());
        }
        Ok(())
    }
}

/// A stream thread's slot, freed when dropped: at the stream's end, when its thread
/// could not start, or when it panicked (which ends that stream only).
#[derive(Debug)]
struct StreamSlot {
    slots: Arc<Mutex<Vec<bool>>>,
    slot: usize,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        if let Some(s) = lock(&self.slots).get_mut(self.slot) {
            *s = false;
        }
    }
}

/// Held by a worker while it has a connection from the poller: if the handler
/// panics, the connection is dropped (closed) and the poller is told, so its count of
/// connections in handlers does not keep the lost one forever.
struct ClosedOnPanic<'a> {
    back: &'a Sender<Back>,
    waker: &'a Waker,
}

impl Drop for ClosedOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() && self.back.try_send(Back::Closed).is_ok() {
            self.waker.wake();
        }
    }
}

/// What each worker holds of its port.
struct WorkerEnds<'a> {
    back: &'a Sender<Back>,
    waker: &'a Waker,
    streams: &'a Streams,
}

/// One worker's job: runs the handler for one request head and writes the answer (or
/// hands the connection to a stream thread).
fn serve_job<H>(job: Job, handle: &LoopHandle, ends: &WorkerEnds<'_>, limits: Limits, handler: &H)
where
    H: Fn(&Req) -> Reply + ?Sized,
{
    let WorkerEnds {
        back,
        waker,
        streams,
    } = *ends;
    // A handler's panic is caught by the pool; the connection is closed and counted.
    let _closed = ClosedOnPanic { back, waker };
    let Job { mut conn, head } = job;
    let req = Req {
        client_cert: conn.stream.client_cert(),
        ..Req::from_head(&head, conn.peer)
    };
    let mut reply = handler(&req);
    log::debug!(
        "{} {} {} -> {}",
        handle.name(),
        head.method,
        head.target,
        if reply.takeover.is_some() {
            "stream".to_string()
        } else {
            reply.status.to_string()
        }
    );
    if let Some(takeover) = reply.takeover.take() {
        match streams.start(conn, takeover, limits) {
            Ok(()) => {
                // The connection left the poller's count with the stream.
                if back.send(Back::Closed).is_ok() {
                    waker.wake();
                }
                return;
            }
            Err(c) => {
                log::debug!("{}: every stream is in use; 503", handle.name());
                conn = c;
                reply = Reply::text(503, "too many streams\n");
            }
        }
    }
    // A body we did not read would be taken for the next request: close instead.
    let keep_alive = head.keep_alive && !head.has_body;
    let written = write_reply(&mut conn.stream, &head, &reply, keep_alive, limits);
    let outcome = match written.and_then(|()| conn.stream.set_nonblocking(true)) {
        Ok(()) if keep_alive => Back::KeepAlive(conn),
        Ok(()) => Back::Linger(conn),
        Err(_) => Back::Closed,
    };
    // The channel is unbounded (its messages are bounded by the connection cap): this
    // never blocks.
    if back.send(outcome).is_ok() {
        waker.wake();
    }
}

fn write_reply(
    stream: &mut Stream,
    head: &Head,
    reply: &Reply,
    keep_alive: bool,
    limits: Limits,
) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_write_timeout(limits.write_timeout)?;
    stream.write_blocking(&encode_reply(head, reply, keep_alive))
}

/// An answer's bytes as they go on the wire: the status line, the headers, and the
/// body unless the request was a `HEAD`.
fn encode_reply(head: &Head, reply: &Reply, keep_alive: bool) -> Vec<u8> {
    let mut out = response_head(
        reply.status,
        reply.content_type,
        reply.body.len(),
        reply.allow,
        keep_alive,
    );
    for (name, value) in &reply.headers {
        out.insert_str(out.len() - 2, &format!("{name}: {value}\r\n"));
    }
    let mut out = out.into_bytes();
    if head.method != "HEAD" {
        out.extend_from_slice(&reply.body);
    }
    out
}

/// Fuzzing (the daemon's `fuzzing` module): the bytes a client sent on one connection, taken as
/// the poller and a worker take them, on the calling thread: each request head parsed
/// in turn ([`parse_head`], pipelined ones included), made the [`Req`] a worker makes
/// (with `client_cert` as the transport would have verified it), answered
/// by `handler` and encoded as [`write_reply`] writes it, until a head is partial or
/// invalid, the connection is not kept alive, or an answer takes it over. A takeover
/// runs here as on a stream thread, over the socket `connect` gives (the client's end
/// is the caller's), with the bytes after its head as the bytes read early, as
/// [`Streams::start`] hands them over; `limits` gives the header cap and the stream
/// write timeout. Returns the answers' statuses (`0` for a takeover) and the bytes of
/// the answers that were not takeovers.
#[cfg(feature = "fuzzing")]
pub fn fuzz_connection(
    bytes: &[u8],
    client_cert: &crate::x509::ClientCert,
    limits: Limits,
    handler: &dyn Fn(&Req) -> Reply,
    connect: &mut dyn FnMut() -> Option<(std::net::TcpStream, Stop)>,
) -> (Vec<u16>, Vec<u8>) {
    let mut statuses = Vec::new();
    let mut wire = Vec::new();
    let mut buf = bytes;
    loop {
        let head = match parse_head(buf, limits.max_header_bytes) {
            Parsed::Partial => return (statuses, wire),
            Parsed::Invalid(status) => {
                statuses.push(status);
                return (statuses, wire);
            }
            Parsed::Complete(head) => head,
        };
        buf = buf.get(head.len..).unwrap_or_default();
        let req = Req {
            client_cert: client_cert.clone(),
            ..Req::from_head(&head, None)
        };
        let mut reply = handler(&req);
        if let Some(takeover) = reply.takeover.take() {
            statuses.push(0);
            if let Some((tcp, stop)) = connect() {
                // A worker hands the connection over non-blocking.
                if tcp.set_nonblocking(true).is_err() {
                    return (statuses, wire);
                }
                let hijacked = Hijacked {
                    stream: Stream::Plain(tcp),
                    early: buf.to_vec(),
                    write_timeout: limits.stream_write_timeout,
                    stop,
                };
                (takeover.0)(hijacked);
            }
            return (statuses, wire);
        }
        statuses.push(reply.status);
        let keep_alive = head.keep_alive && !head.has_body;
        wire.extend_from_slice(&encode_reply(&head, &reply, keep_alive));
        // A head is never empty, so the loop ends.
        if !keep_alive || head.len == 0 {
            return (statuses, wire);
        }
    }
}

/// The status line and headers of an answer, as Go's net/http writes them.
fn response_head(
    status: u16,
    content_type: &str,
    len: usize,
    allow: Option<&str>,
    keep_alive: bool,
) -> String {
    let mut h = format!("HTTP/1.1 {status} {}\r\n", reason(status));
    // An answer without a body type (a redirect) says none, as Go's server.
    if !content_type.is_empty() {
        h.push_str(&format!("Content-Type: {content_type}\r\n"));
    }
    h.push_str(&format!(
        "Content-Length: {len}\r\nDate: {}\r\n",
        base::time::http_date(SystemTime::now())
    ));
    if status >= 400 {
        h.push_str("X-Content-Type-Options: nosniff\r\n");
    }
    if let Some(allow) = allow {
        h.push_str(&format!("Allow: {allow}\r\n"));
    }
    if !keep_alive {
        h.push_str("Connection: close\r\n");
    }
    h.push_str("\r\n");
    h
}

/// The reason phrases of the statuses these ports send.
fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        301 => "Moved Permanently",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        408 => "Request Timeout",
        422 => "Unprocessable Entity",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpStream;

    use super::*;
    use base::loops::{shutdown_channel, Shutdown};

    /// A server on a free loopback port whose handler answers `ok`, or for `/wait`
    /// waits (at most 10 s) for a message on the returned sender first.
    fn start(limits: Limits) -> (Shutdown, Loops, u16, Sender<()>) {
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop);
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let (gate_tx, gate_rx) = crossbeam_channel::unbounded::<()>();
        serve(&loops, "srv-test", listener, limits, move |req: &Req| {
            if req.path() == ["wait"] {
                let _ = gate_rx.recv_timeout(Duration::from_secs(10));
            }
            match req.method.as_str() {
                "GET" | "HEAD" => Reply::text(200, "ok"),
                _ => Reply::method_not_allowed("GET"),
            }
        })
        .expect("serve");
        (shutdown, loops, port, gate_tx)
    }

    fn connect(port: u16) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        s
    }

    /// Reads until `n` answers have arrived (or EOF / timeout); returns the text.
    fn read_answers(s: &mut TcpStream, n: usize) -> String {
        let mut got = Vec::new();
        let mut chunk = [0u8; 4096];
        while String::from_utf8_lossy(&got).matches("HTTP/1.1 ").count() < n
            || !String::from_utf8_lossy(&got).ends_with("ok")
                && !String::from_utf8_lossy(&got).ends_with('\n')
        {
            match s.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(k) => got.extend_from_slice(&chunk[..k]),
            }
        }
        String::from_utf8_lossy(&got).into_owned()
    }

    /// True if the peer closed the connection (EOF or reset) before `timeout`.
    fn closed_by_server(s: &mut TcpStream) -> bool {
        let mut chunk = [0u8; 4096];
        loop {
            match s.read(&mut chunk) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e) => return e.kind() == io::ErrorKind::ConnectionReset,
            }
        }
    }

    fn stop(shutdown: Shutdown, loops: Loops) {
        shutdown.trigger();
        assert!(loops.join_all(Duration::from_secs(10)).is_empty());
    }

    /// A server whose `/echo` answer takes the connection over: a chunked body that
    /// first names its thread, then echoes each line the client sends (`bye` ends it).
    fn start_streaming(limits: Limits) -> (Shutdown, Loops, u16) {
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop);
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        serve(&loops, "srv-test", listener, limits, |req: &Req| {
            if req.path() != ["echo"] {
                return Reply::text(200, "ok");
            }
            Reply::takeover(|mut conn: Hijacked| {
                let _ = conn.write_head(200, &[("Transfer-Encoding", "chunked")]);
                let name = std::thread::current().name().unwrap_or("").to_string();
                let _ = conn.write_chunk(format!("{name}\n").as_bytes());
                let mut line = Vec::new();
                loop {
                    let mut b = [0u8; 1];
                    match conn.read_nonblocking(&mut b) {
                        Ok(0) => return,
                        Ok(_) if b[0] == b'\n' => {
                            if line == b"bye" {
                                let _ = conn.finish_chunks();
                                return;
                            }
                            line.push(b'\n');
                            let _ = conn.write_chunk(&line);
                            line.clear();
                        }
                        Ok(_) => line.push(b[0]),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            if !conn.has_buffered() {
                                let mut fds = [PollFd::new(&conn, PollFlags::IN)];
                                let wait = base::time::poll_timeout(Duration::from_millis(100));
                                let _ = rustix::event::poll(&mut fds, Some(&wait));
                            }
                        }
                        Err(_) => return,
                    }
                }
            })
        })
        .expect("serve");
        (shutdown, loops, port)
    }

    #[test]
    fn a_takeover_streams_on_its_own_thread_and_frees_its_slot() {
        let limits = Limits {
            max_streams: 1,
            ..Limits::KUBELET
        };
        let (shutdown, loops, port) = start_streaming(limits);
        for _ in 0..2 {
            // The slot is free once the previous stream's thread has returned (the
            // second round): a new stream gets it within 10 s, 503 until then.
            let until = Instant::now() + Duration::from_secs(10);
            let (mut s, mut got) = loop {
                let mut s = connect(port);
                // Bytes right behind the head reach the stream too.
                s.write_all(b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\nearly\n")
                    .expect("write");
                let mut got = Vec::new();
                let mut chunk = [0u8; 4096];
                while !String::from_utf8_lossy(&got).contains("early\n") {
                    let n = s.read(&mut chunk).expect("read");
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&chunk[..n]);
                }
                if String::from_utf8_lossy(&got).contains("early\n") {
                    break (s, got);
                }
                let text = String::from_utf8_lossy(&got).into_owned();
                assert!(
                    text.starts_with("HTTP/1.1 503") && Instant::now() < until,
                    "closed early: {text}"
                );
                std::thread::sleep(Duration::from_millis(20));
            };
            // While the only stream slot is taken, another stream gets 503 and plain
            // requests are still served by the workers.
            let mut other = connect(port);
            other
                .write_all(b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
                .expect("write");
            let busy = read_answers(&mut other, 1);
            assert!(busy.starts_with("HTTP/1.1 503"), "{busy}");
            let mut plain = connect(port);
            plain
                .write_all(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
                .expect("write");
            assert!(read_answers(&mut plain, 1).starts_with("HTTP/1.1 200"));
            s.write_all(b"later\nbye\n").expect("write");
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest);
            got.extend_from_slice(&rest);
            let text = String::from_utf8_lossy(&got);
            assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
            assert!(text.contains("Transfer-Encoding: chunked\r\n"), "{text}");
            assert!(text.contains("\r\n9\r\nstream-0\n\r\n"), "{text}");
            assert!(text.contains("6\r\nlater\n\r\n"), "{text}");
            assert!(text.ends_with("0\r\n\r\n"), "{text}");
        }
        stop(shutdown, loops);
    }

    #[test]
    fn a_port_without_streams_answers_a_takeover_with_503() {
        let (shutdown, loops, port) = start_streaming(Limits::PLAIN);
        let mut s = connect(port);
        s.write_all(b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
            .expect("write");
        let got = read_answers(&mut s, 1);
        assert!(got.starts_with("HTTP/1.1 503"), "{got}");
        stop(shutdown, loops);
    }

    #[test]
    fn keep_alive_and_pipelined_requests_share_one_connection() {
        let (shutdown, loops, port, _gate) = start(Limits::PLAIN);
        let mut s = connect(port);
        s.write_all(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n")
            .expect("write");
        let two = read_answers(&mut s, 2);
        assert_eq!(two.matches("HTTP/1.1 200 OK\r\n").count(), 2, "{two}");
        s.write_all(b"HEAD /c HTTP/1.1\r\nHost: x\r\n\r\n")
            .expect("write");
        let mut chunk = [0u8; 1024];
        let n = s
            .read(&mut chunk)
            .expect("third answer on the same connection");
        let third = String::from_utf8_lossy(&chunk[..n]);
        assert!(third.starts_with("HTTP/1.1 200 OK\r\n"), "{third}");
        assert!(third.ends_with("\r\n\r\n"), "HEAD has no body: {third}");
        stop(shutdown, loops);
    }

    #[test]
    fn an_announced_body_is_not_read_and_the_answer_arrives_whole() {
        let (shutdown, loops, port, _gate) = start(Limits::PLAIN);
        for method in ["POST", "GET"] {
            let mut s = connect(port);
            let req = format!(
                "{method} /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\nabc"
            );
            s.write_all(req.as_bytes()).expect("write");
            let mut all = String::new();
            s.read_to_string(&mut all)
                .expect("answer, then a clean close");
            let want = if method == "GET" {
                "200 OK"
            } else {
                "405 Method Not Allowed"
            };
            assert!(all.starts_with(&format!("HTTP/1.1 {want}\r\n")), "{all}");
            assert!(all.contains("Connection: close\r\n"), "{all}");
        }
        stop(shutdown, loops);
    }

    #[test]
    fn a_full_server_gives_up_its_oldest_waiting_connection() {
        let limits = Limits {
            max_connections: 4,
            ..Limits::PLAIN
        };
        let (shutdown, loops, port, _gate) = start(limits);
        let mut silent: Vec<TcpStream> = (0..4).map(|_| connect(port)).collect();
        // Each new client still gets its answer, however many sit silent.
        for _ in 0..3 {
            let mut s = connect(port);
            s.write_all(b"GET / HTTP/1.0\r\n\r\n").expect("write");
            let mut all = String::new();
            s.read_to_string(&mut all).expect("read");
            assert!(all.starts_with("HTTP/1.1 200 OK\r\n"), "{all}");
        }
        assert!(
            closed_by_server(&mut silent[0]),
            "the oldest silent connection is closed to make room"
        );
        stop(shutdown, loops);
    }

    #[test]
    fn slow_heads_get_408_and_idle_connections_are_closed() {
        let limits = Limits {
            header_timeout: Duration::from_millis(200),
            idle_timeout: Duration::from_millis(200),
            ..Limits::PLAIN
        };
        let (shutdown, loops, port, _gate) = start(limits);
        let mut slow = connect(port);
        slow.write_all(b"GET /pods HTTP/1.1\r\nHost:")
            .expect("write");
        let mut all = String::new();
        slow.read_to_string(&mut all).expect("read");
        assert!(all.starts_with("HTTP/1.1 408 Request Timeout\r\n"), "{all}");

        let mut idle = connect(port);
        idle.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .expect("write");
        let first = read_answers(&mut idle, 1);
        assert!(first.starts_with("HTTP/1.1 200 OK"), "{first}");
        assert!(
            closed_by_server(&mut idle),
            "idle keep-alive connection closed"
        );
        stop(shutdown, loops);
    }

    #[test]
    fn busy_workers_answer_503_instead_of_queueing_without_bound() {
        let limits = Limits {
            workers: 1,
            ..Limits::PLAIN
        };
        let (shutdown, loops, port, gate) = start(limits);
        // One request in the handler and QUEUE_PER_WORKER waiting fill the queue: of
        // two more than the queue holds, at least one is refused at once (two, if the
        // worker had not taken the first yet), the others wait and are served.
        let mut conns: Vec<TcpStream> = Vec::new();
        for _ in 0..QUEUE_PER_WORKER + 2 {
            let mut s = connect(port);
            s.write_all(b"GET /wait HTTP/1.0\r\n\r\n").expect("write");
            conns.push(s);
        }
        let mut answers = vec![String::new(); conns.len()];
        let until = Instant::now() + Duration::from_secs(20);
        while answers.iter().all(String::is_empty) && Instant::now() < until {
            for (s, answer) in conns.iter_mut().zip(answers.iter_mut()) {
                s.set_nonblocking(true).expect("nonblocking");
                let mut chunk = [0u8; 512];
                if let Ok(n) = s.read(&mut chunk) {
                    answer.push_str(&String::from_utf8_lossy(&chunk[..n]));
                }
                s.set_nonblocking(false).expect("blocking");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            answers
                .iter()
                .any(|a| a.starts_with("HTTP/1.1 503 Service Unavailable\r\n")),
            "a refusal arrives while the handler still blocks: {answers:?}"
        );
        for _ in 0..conns.len() {
            let _ = gate.send(());
        }
        for (s, answer) in conns.iter_mut().zip(answers.iter_mut()) {
            s.read_to_string(answer).expect("read");
        }
        let refused = answers
            .iter()
            .filter(|a| a.starts_with("HTTP/1.1 503 Service Unavailable\r\n"))
            .count();
        let served = answers
            .iter()
            .filter(|a| a.starts_with("HTTP/1.1 200 OK\r\n"))
            .count();
        assert!((1..=2).contains(&refused), "{answers:?}");
        assert_eq!(refused + served, answers.len(), "{answers:?}");
        stop(shutdown, loops);
    }

    fn complete(raw: &str) -> Head {
        match parse_head(raw.as_bytes(), 16 * 1024) {
            Parsed::Complete(h) => h,
            other => panic!("{raw:?}: {other:?}"),
        }
    }

    #[test]
    fn heads_are_parsed_with_keep_alive_and_body_flags() {
        let h = complete("GET /healthz?verbose HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(h.method, "GET");
        assert_eq!(h.target, "/healthz?verbose");
        assert!(h.keep_alive);
        assert!(!h.has_body);
        assert_eq!(h.headers, vec![("Host".to_string(), "x".to_string())]);

        assert!(!complete("GET / HTTP/1.0\r\n\r\n").keep_alive);
        assert!(complete("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").keep_alive);
        assert!(!complete("GET / HTTP/1.1\r\nConnection: close\r\n\r\n").keep_alive);

        let h = complete("POST /healthz HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\nabc");
        assert!(h.has_body, "a huge announced body is noted, never read");
        assert_eq!(
            h.len,
            "POST /healthz HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n".len()
        );
        assert!(complete("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n").has_body);
        assert!(!complete("POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n").has_body);
    }

    #[test]
    fn partial_oversized_and_malformed_heads() {
        assert_eq!(
            parse_head(b"GET /pods HTTP/1.1\r\nHo", 1024),
            Parsed::Partial
        );
        let long = format!("GET /{} HTTP/1.1\r\n", "a".repeat(2000));
        assert_eq!(parse_head(long.as_bytes(), 1024), Parsed::Invalid(431));
        let complete_but_big = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(2000));
        assert_eq!(
            parse_head(complete_but_big.as_bytes(), 1024),
            Parsed::Invalid(431)
        );
        assert_eq!(
            parse_head(b"\x00\x01\x02 nonsense\r\n\r\n", 1024),
            Parsed::Invalid(400)
        );
        assert_eq!(
            parse_head(b"GET / HTTP/1.1\r\nContent-Length: lots\r\n\r\n", 1024),
            Parsed::Invalid(400)
        );
        let many: String = (0..100).map(|i| format!("X-{i}: y\r\n")).collect();
        let req = format!("GET / HTTP/1.1\r\n{many}\r\n");
        assert_eq!(parse_head(req.as_bytes(), 16 * 1024), Parsed::Invalid(431));
    }

    #[test]
    fn caps_fit_inside_the_descriptor_limit() {
        let plain = Limits::PLAIN;
        assert_eq!(plain.fit_to(1024, 2).max_connections, 256);
        assert_eq!(plain.fit_to(1024, 3).max_connections, 256);
        assert_eq!(plain.fit_to(512, 3).max_connections, 128);
        assert_eq!(plain.fit_to(160, 2).max_connections, 16);
        assert_eq!(plain.fit_to(64, 2).max_connections, MIN_CONNECTIONS);
    }

    #[test]
    fn answers_say_close_when_the_connection_ends() {
        let h = response_head(405, "text/plain", 3, Some("GET"), false);
        assert!(h.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"));
        assert!(h.contains("Content-Length: 3\r\n"));
        assert!(h.contains("Allow: GET\r\n"));
        assert!(h.contains("Connection: close\r\n"));
        assert!(h.ends_with("\r\n\r\n"));
        assert!(!response_head(200, "text/plain", 2, None, true).contains("Connection"));
    }
}
