//! A gRPC channel: one HTTP/2 connection to an endpoint (a Unix socket, or TCP for the
//! probe), made on the first call and made again on the call after it broke or the
//! server sent GOAWAY; many threads call on it at once. Unary calls, and one
//! server-streaming call ([`Streaming`]).
//!
//! Every call has a deadline: sent to the server as `grpc-timeout` and kept here, so a
//! server that never answers costs the caller its timeout and nothing more (the
//! stream is reset). A streaming call may have none; it ends with its trailers, when
//! cancelled ([`Cancel`]) or dropped, or when the connection breaks.

use std::collections::VecDeque;
use std::fmt;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use base::loops::{lock, Loops};

use crate::conn::{Conn, Event, Socket, Stream, Why};
use crate::hpack;
use crate::message::{frame_message, Bad, Messages};
use crate::status::{self, Code, GrpcError};

/// The largest message sent or received unless the caller says otherwise: grpc-go's
/// client default for received messages is 4 MiB; the kubelet raises its CRI client's
/// to 16 MiB (`maxMsgSize`), for `ListContainers` on a busy node.
pub(crate) const DEFAULT_MAX_MESSAGE: usize = 16 << 20;

/// Where a channel connects.
#[derive(Clone, Debug, PartialEq)]
pub enum Endpoint {
    /// A Unix socket (a CRI runtime's `unix:///run/containerd/containerd.sock`).
    Unix(PathBuf),
    /// A TCP address, and the `:authority` the calls name (`host:port`).
    Tcp { addr: SocketAddr, authority: String },
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Unix(p) => write!(f, "unix://{}", p.display()),
            Endpoint::Tcp { authority, .. } => f.write_str(authority),
        }
    }
}

/// How a channel calls.
#[derive(Clone, Debug)]
pub struct Options {
    /// The name of each connection's reader thread (at most 15 bytes).
    pub thread_name: String,
    /// The `user-agent` of every call.
    pub user_agent: String,
    /// The largest message sent or received.
    pub max_message: usize,
}

impl Options {
    /// Options with the default message limit.
    pub fn new(thread_name: &str, user_agent: &str) -> Options {
        Options {
            thread_name: thread_name.to_string(),
            user_agent: user_agent.to_string(),
            max_message: DEFAULT_MAX_MESSAGE,
        }
    }
}

/// A connection as the channel and its calls hold it; the last holder shuts its socket
/// down, which ends its reader thread.
#[derive(Debug)]
struct Live(Arc<Conn>);

impl Drop for Live {
    fn drop(&mut self) {
        self.0.shutdown();
    }
}

/// A gRPC channel to one endpoint.
#[derive(Debug)]
pub struct Channel {
    endpoint: Endpoint,
    name: String,
    options: Options,
    loops: Loops,
    /// The current connection; the lock is held to read or swap it, never to connect.
    live: Mutex<Slot>,
    /// Signalled when a connection attempt ends.
    connected: Condvar,
}

/// The channel's connection, and whether a caller is making a new one.
#[derive(Debug, Default)]
struct Slot {
    live: Option<Arc<Live>>,
    connecting: bool,
}

impl Channel {
    /// A channel to `endpoint`; it connects on the first call. Reader threads are
    /// spawned through `loops`.
    pub fn new(endpoint: Endpoint, options: Options, loops: &Loops) -> Channel {
        Channel {
            name: endpoint.to_string(),
            endpoint,
            options,
            loops: loops.clone(),
            live: Mutex::new(Slot::default()),
            connected: Condvar::new(),
        }
    }

    /// The endpoint, as the errors name it.
    pub fn endpoint(&self) -> &str {
        &self.name
    }

    /// Calls `method` (`/package.Service/Method`) with one message and returns the one
    /// message of the reply, within `timeout`.
    pub fn unary(
        &self,
        method: &str,
        request: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>, GrpcError> {
        let deadline = base::time::saturating_deadline(Instant::now(), timeout);
        let call = self.start(method, request, Some(timeout), Some(deadline))?;
        let mut messages = Messages::new(self.options.max_message);
        let mut reply: Option<Vec<u8>> = None;
        let mut extra = false;
        while let Event::Data(bytes) = call.next(Some(deadline))? {
            for m in messages.push(&bytes).map_err(|b| call.bad(b))? {
                extra |= reply.is_some();
                reply.get_or_insert(m);
            }
        }
        call.status()?;
        let internal = |message: &str| call.error_status(Code::Internal, message.to_string());
        if extra {
            return Err(internal(
                "cardinality violation: expected <EOF> for non server-streaming RPCs, but received another message",
            ));
        }
        if messages.partial() {
            return Err(internal(
                "server closed the stream in the middle of a message",
            ));
        }
        reply.ok_or_else(|| {
            internal("cardinality violation: received no response message from non-streaming RPC")
        })
    }

    /// Calls server-streaming `method` with one message; the replies come from the
    /// returned iterator, until the trailers, `timeout` (none: until the server ends
    /// it), a [`Cancel`] or the iterator's drop.
    pub fn server_streaming(
        &self,
        method: &str,
        request: &[u8],
        timeout: Option<Duration>,
    ) -> Result<Streaming<'_>, GrpcError> {
        let deadline = timeout.map(|t| base::time::saturating_deadline(Instant::now(), t));
        let call = self.start(method, request, timeout, deadline)?;
        Ok(Streaming {
            messages: Messages::new(self.options.max_message),
            call,
            deadline,
            pending: VecDeque::new(),
            done: false,
        })
    }

    /// Opens the call's stream and sends its request; a stream that could not even be
    /// opened (the connection had just broken or gone away) is tried once more on a
    /// new connection.
    fn start(
        &self,
        method: &str,
        request: &[u8],
        timeout: Option<Duration>,
        deadline: Option<Instant>,
    ) -> Result<Call<'_>, GrpcError> {
        let error = |why: Why| self.error(method, why, timeout);
        if request.len() > self.options.max_message {
            return Err(GrpcError::TooLarge {
                method: method.to_string(),
                endpoint: self.name.clone(),
                size: request.len(),
                max: self.options.max_message,
            });
        }
        let block = self.request_headers(method, timeout);
        // Opening a stream waits at most this long for a slot when the call has no
        // deadline (a streaming call).
        let open_by = deadline.unwrap_or_else(|| Instant::now() + Duration::from_secs(60));
        let mut retried = false;
        let (live, stream) = loop {
            let live = self.connection(open_by)?;
            match live.0.open(&block, open_by) {
                Ok(stream) => break (live, stream),
                Err(Why::Gone(_)) if !retried => retried = true,
                Err(why) => return Err(error(why)),
            }
        };
        let call = Call {
            channel: self,
            method: method.to_string(),
            timeout,
            live,
            stream,
        };
        call.live
            .0
            .send(&call.stream, &frame_message(request), open_by)
            .map_err(error)?;
        Ok(call)
    }

    /// The channel's connection, made when there is none or the last one can take no
    /// new stream. One caller connects at a time, without the lock; the others wait
    /// for it (until their deadline) rather than each dialling a connection of its own.
    fn connection(&self, deadline: Instant) -> Result<Arc<Live>, GrpcError> {
        let mut slot = lock(&self.live);
        loop {
            if let Some(live) = slot.live.as_ref().filter(|l| l.0.usable()) {
                return Ok(live.clone());
            }
            if !slot.connecting {
                break;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(GrpcError::Connect {
                    endpoint: self.name.clone(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "another call's connection attempt outlasted this call's deadline",
                    ),
                });
            }
            slot = self
                .connected
                .wait_timeout(slot, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        slot.connecting = true;
        drop(slot);
        /// Clears `connecting` and wakes the waiters however the attempt ends.
        struct Attempt<'a>(&'a Channel);
        impl Drop for Attempt<'_> {
            fn drop(&mut self) {
                lock(&self.0.live).connecting = false;
                self.0.connected.notify_all();
            }
        }
        let attempt = Attempt(self);
        let live = Arc::new(Live(self.connect(deadline)?));
        lock(&self.live).live = Some(live.clone());
        drop(attempt);
        Ok(live)
    }

    /// Dials the endpoint and starts HTTP/2 on it.
    fn connect(&self, deadline: Instant) -> Result<Arc<Conn>, GrpcError> {
        let connect_error = |source| GrpcError::Connect {
            endpoint: self.name.clone(),
            source,
        };
        let socket = match &self.endpoint {
            // A Unix socket connects at once or not at all.
            Endpoint::Unix(path) => UnixStream::connect(path).map(Socket::Unix),
            Endpoint::Tcp { addr, .. } => {
                let t = deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(1));
                TcpStream::connect_timeout(addr, t).map(|s| {
                    let _ = s.set_nodelay(true);
                    Socket::Tcp(s)
                })
            }
        }
        .map_err(connect_error)?;
        Conn::start(socket, &self.loops, &self.options.thread_name).map_err(connect_error)
    }

    /// The request's header block: static-table indexes where HPACK has them, literals
    /// without indexing otherwise.
    fn request_headers(&self, method: &str, timeout: Option<Duration>) -> Vec<u8> {
        let authority = match &self.endpoint {
            // grpc-go's authority for a Unix socket.
            Endpoint::Unix(_) => "localhost",
            Endpoint::Tcp { authority, .. } => authority.as_str(),
        };
        let mut b = vec![0x80 | 3, 0x80 | 6]; // :method: POST, :scheme: http
        hpack::encode_literal(&mut b, 4, "", method); // :path
        hpack::encode_literal(&mut b, 1, "", authority); // :authority
        hpack::encode_literal(&mut b, 31, "", "application/grpc"); // content-type
        hpack::encode_literal(&mut b, 58, "", &self.options.user_agent); // user-agent
        hpack::encode_literal(&mut b, 0, "te", "trailers");
        if let Some(t) = timeout {
            hpack::encode_literal(&mut b, 0, "grpc-timeout", &status::encode_timeout(t));
        }
        b
    }

    fn error(&self, method: &str, why: Why, timeout: Option<Duration>) -> GrpcError {
        let (method, endpoint) = (method.to_string(), self.name.clone());
        match why {
            Why::Deadline => GrpcError::DeadlineExceeded {
                method,
                endpoint,
                timeout: timeout.unwrap_or_default(),
            },
            Why::Reset(code) => GrpcError::Reset {
                method,
                endpoint,
                code,
            },
            Why::Gone(reason) => GrpcError::Unavailable {
                method,
                endpoint,
                reason,
            },
            Why::Cancelled => GrpcError::Cancelled { method, endpoint },
        }
    }
}

/// One call's stream; dropping it ends the call (resetting the stream if unfinished).
#[derive(Debug)]
struct Call<'a> {
    channel: &'a Channel,
    method: String,
    timeout: Option<Duration>,
    live: Arc<Live>,
    stream: Arc<Stream>,
}

impl Call<'_> {
    fn next(&self, deadline: Option<Instant>) -> Result<Event, GrpcError> {
        self.live
            .0
            .next(&self.stream, deadline)
            .map_err(|why| self.channel.error(&self.method, why, self.timeout))
    }

    /// The ended call's status: Ok, or the server's error.
    fn status(&self) -> Result<(), GrpcError> {
        let (headers, trailers) = self.live.0.fields(&self.stream);
        match status::from_fields(headers.as_ref(), trailers.as_ref()) {
            (Code::Ok, _) => Ok(()),
            (code, message) => Err(self.error_status(code, message)),
        }
    }

    fn error_status(&self, code: Code, message: String) -> GrpcError {
        GrpcError::Status {
            method: self.method.clone(),
            endpoint: self.channel.name.clone(),
            code,
            message,
        }
    }

    fn bad(&self, b: Bad) -> GrpcError {
        match b {
            Bad::TooLarge(size) => GrpcError::TooLarge {
                method: self.method.clone(),
                endpoint: self.channel.name.clone(),
                size,
                max: self.channel.options.max_message,
            },
            Bad::Compressed => self.error_status(
                Code::Internal,
                "a compressed message, though no compression was asked for".into(),
            ),
        }
    }
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        self.live.0.finish(&self.stream);
    }
}

/// A server-streaming call's replies, in order. It ends (None) after the trailers
/// of a call that succeeded; a failure is its last item.
#[derive(Debug)]
pub struct Streaming<'a> {
    call: Call<'a>,
    messages: Messages,
    deadline: Option<Instant>,
    pending: VecDeque<Vec<u8>>,
    done: bool,
}

impl Streaming<'_> {
    /// A handle that cancels this call from another thread.
    pub fn canceller(&self) -> Cancel {
        Cancel(self.call.stream.clone())
    }
}

impl Iterator for Streaming<'_> {
    type Item = Result<Vec<u8>, GrpcError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(m) = self.pending.pop_front() {
                return Some(Ok(m));
            }
            if self.done {
                return None;
            }
            let r = match self.call.next(self.deadline) {
                Ok(Event::Data(bytes)) => match self.messages.push(&bytes) {
                    Ok(ms) => {
                        self.pending.extend(ms);
                        continue;
                    }
                    Err(b) => Err(self.call.bad(b)),
                },
                Ok(Event::End) => self.call.status(),
                Err(e) => Err(e),
            };
            self.done = true;
            if let Err(e) = r {
                return Some(Err(e));
            }
        }
    }
}

/// Cancels a streaming call: its iterator's next item is a `Cancelled` error.
#[derive(Clone, Debug)]
pub struct Cancel(Arc<Stream>);

impl Cancel {
    pub fn cancel(&self) {
        Conn::cancel(&self.0);
    }
}
