//! ureq's pluggable transport, aimed at Docker's Unix socket instead of TCP.
//!
//! ureq (blocking, no async runtime) speaks HTTP/1.1 over any [`Transport`]. These three
//! pieces plug a Unix socket into it: [`UnixConnector`] opens a
//! [`UnixStream`] to the configured path whatever the URL's host says,
//! [`UnixTransport`] moves bytes with the per-read/per-write timeouts ureq asks for, and
//! [`NoDnsResolver`] answers every host with a dummy address so no DNS lookup (and no
//! resolver thread) ever happens for `http://docker/...`.
//!
//! This is modelled on ureq 3.5.2's own `TcpTransport`; the API lives under
//! `ureq::unversioned`, which may change in minor releases, hence the exact pin in
//! Cargo.toml.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Instant;
use std::{fmt, time};

use ureq::config::Config;
use ureq::http::Uri;
use ureq::unversioned::resolver::{ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, LazyBuffers, NextTimeout, ShutdownHandle, Transport,
};
use ureq::Error;

/// Opens a connection to the Docker socket at a fixed path for every request.
#[derive(Debug)]
pub(crate) struct UnixConnector {
    path: PathBuf,
}

impl UnixConnector {
    /// A connector for the socket at `path`.
    pub(crate) fn new(path: PathBuf) -> UnixConnector {
        UnixConnector { path }
    }
}

impl Connector<()> for UnixConnector {
    type Out = UnixTransport;

    fn connect(
        &self,
        details: &ConnectionDetails,
        _chained: Option<()>,
    ) -> Result<Option<UnixTransport>, Error> {
        // A Unix connect either succeeds or fails at once (ENOENT when the socket file
        // is absent, ECONNREFUSED when nobody listens); both surface as Error::Io and
        // are mapped to "runtime unavailable" by the client.
        let stream = UnixStream::connect(&self.path)?;
        let config = details.config;
        let buffers = LazyBuffers::new(config.input_buffer_size(), config.output_buffer_size());
        let transport = UnixTransport::new(stream, buffers);
        // Lets Agent::shutdown() interrupt I/O blocked on this socket.
        (details.register_shutdown)(transport.shutdown_handle())?;
        Ok(Some(transport))
    }
}

/// The socket, shared weakly with ureq's shutdown registry.
#[derive(Debug)]
struct SharedStream(UnixStream);

impl ShutdownHandle for SharedStream {
    fn shutdown(&self) {
        // An error only means the socket is already closed.
        let _ = self.0.shutdown(Shutdown::Both);
    }
}

/// One HTTP/1.1 connection over a Unix socket.
pub(crate) struct UnixTransport {
    stream: Arc<SharedStream>,
    buffers: LazyBuffers,
    // The timeouts last set on the socket, so that a syscall is made only on change.
    timeout_read: Option<time::Duration>,
    timeout_write: Option<time::Duration>,
}

impl UnixTransport {
    fn new(stream: UnixStream, buffers: LazyBuffers) -> UnixTransport {
        UnixTransport {
            stream: Arc::new(SharedStream(stream)),
            buffers,
            timeout_read: None,
            timeout_write: None,
        }
    }

    fn shutdown_handle(&self) -> Weak<dyn ShutdownHandle> {
        let weak: Weak<SharedStream> = Arc::downgrade(&self.stream);
        weak
    }
}

/// The socket timeout for a ureq timeout: None means block without limit.
fn socket_timeout(timeout: &NextTimeout) -> Option<time::Duration> {
    // not_zero() turns an exhausted budget into 1 s rather than 0, which the socket
    // API would reject; check() has already refused exhausted budgets.
    timeout.not_zero().map(|d| *d)
}

/// True for the errors a socket with SO_RCVTIMEO/SO_SNDTIMEO returns on expiry (Linux
/// says EAGAIN, i.e. WouldBlock).
fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

impl Transport for UnixTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), Error> {
        let timeout = timeout.for_write();
        if timeout.after.is_zero() {
            return Err(Error::Timeout(timeout.reason));
        }
        let wanted = socket_timeout(&timeout);
        if wanted != self.timeout_write {
            self.stream.0.set_write_timeout(wanted)?;
            self.timeout_write = wanted;
        }
        let output = &self.buffers.output()[..amount];
        match (&self.stream.0).write_all(output) {
            Ok(()) => Ok(()),
            Err(e) if is_timeout(&e) => Err(Error::Timeout(timeout.reason)),
            Err(e) => Err(Error::Io(e)),
        }
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, Error> {
        let timeout = timeout.for_read();
        if timeout.after.is_zero() {
            return Err(Error::Timeout(timeout.reason));
        }
        let wanted = socket_timeout(&timeout);
        let started = Instant::now();
        loop {
            if wanted != self.timeout_read {
                self.stream.0.set_read_timeout(wanted)?;
                self.timeout_read = wanted;
            }
            let input = self.buffers.input_append_buf();
            match (&self.stream.0).read(input) {
                Ok(amount) => {
                    self.buffers.input_appended(amount);
                    return Ok(amount > 0);
                }
                // Linux does not restart socket reads that have a timeout after a
                // signal; retry with what is left of the budget.
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                    if let Some(limit) = wanted {
                        let left = limit.saturating_sub(started.elapsed());
                        if left.is_zero() {
                            return Err(Error::Timeout(timeout.reason));
                        }
                        self.stream.0.set_read_timeout(Some(left))?;
                        self.timeout_read = Some(left);
                    }
                }
                Err(e) if is_timeout(&e) => return Err(Error::Timeout(timeout.reason)),
                Err(e) => return Err(Error::Io(e)),
            }
        }
    }

    fn is_open(&mut self) -> bool {
        // Docker closes idle keep-alive connections; a pooled connection must be probed
        // before reuse or the next request fails with a broken pipe.
        probe_open(&self.stream.0).unwrap_or(false)
    }
}

/// A non-blocking one-byte peek: "would block" means open and idle.
fn probe_open(stream: &UnixStream) -> io::Result<bool> {
    stream.set_nonblocking(true)?;
    let mut buf = [0u8; 1];
    let open = match (&*stream).read(&mut buf) {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => true,
        // EOF, an error, or bytes nobody asked for: not reusable.
        _ => false,
    };
    stream.set_nonblocking(false)?;
    Ok(open)
}

impl fmt::Debug for UnixTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UnixTransport")
            .field("peer", &self.stream.0.peer_addr().ok())
            .finish()
    }
}

/// Answers every host with a dummy address: the connector ignores it, and the URL's
/// host (`docker`) must never reach DNS.
#[derive(Debug)]
pub(crate) struct NoDnsResolver;

impl Resolver for NoDnsResolver {
    fn resolve(
        &self,
        _uri: &Uri,
        _config: &Config,
        _timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, Error> {
        let mut addrs = self.empty();
        addrs.push(SocketAddr::from(([127, 0, 0, 1], 80)));
        Ok(addrs)
    }
}
