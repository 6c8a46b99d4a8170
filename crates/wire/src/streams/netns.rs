//! Dialing a port inside a pod's network namespace, for port-forward: a short-lived
//! thread (`netns-dial`) enters the namespace of the pod's sandbox process with
//! `setns(2)` (`/proc/<pid>/ns/net`), connects to `127.0.0.1:<port>` (then `[::1]`),
//! hands the socket back over a channel and exits. The socket keeps the namespace it
//! was made in, so the session thread uses it like any other. No `nsenter`, no
//! `socat` (dockershim's way), no thread left in a pod's namespace.
//!
//! The session never waits for a dial: results arrive on a channel and a byte on a
//! socket pair wakes its `poll(2)` ([`Dialer::fd`]).

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use base::loops::Loops;

/// How long a connect inside the pod may take (loopback answers at once unless the
/// listener's backlog is full).
pub(crate) const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// Dials in flight at once per session; more wait their turn.
const MAX_IN_FLIGHT: usize = 16;

/// The thread name of a dial.
const THREAD_NAME: &str = "netns-dial";

/// A finished dial: the caller's token and the socket (non-blocking) or the error.
pub(crate) type Dialed = (u64, io::Result<TcpStream>);

/// Connects to `port` on the loopback of the network namespace of process `pid`.
/// Runs on the calling thread, which stays in that namespace: call it only on a
/// thread that ends right after.
pub(crate) fn dial_in_namespace(pid: u32, port: u16, timeout: Duration) -> io::Result<TcpStream> {
    let ns = File::open(format!("/proc/{pid}/ns/net"))?;
    // setns(fd, CLONE_NEWNET): moves only this thread, which exits after the dial.
    rustix::thread::move_into_link_name_space(
        ns.as_fd(),
        Some(rustix::thread::LinkNameSpaceType::Network),
    )?;
    let v4 = SocketAddr::from(([127, 0, 0, 1], port));
    let stream = match TcpStream::connect_timeout(&v4, timeout) {
        Ok(s) => s,
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            // A server on IPv6 only; upstream dials "localhost", which is both.
            let v6 = SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port));
            TcpStream::connect_timeout(&v6, timeout).map_err(|_| e)?
        }
        Err(e) => return Err(e),
    };
    stream.set_nonblocking(true)?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// The dials of one session: started on their own threads, finished ones collected
/// without waiting.
#[derive(Debug)]
pub(crate) struct Dialer {
    loops: Loops,
    pid: u32,
    tx: Sender<Dialed>,
    rx: Receiver<Dialed>,
    wake_rx: UnixStream,
    wake_tx: Arc<UnixStream>,
    in_flight: usize,
    queued: VecDeque<(u64, u16)>,
}

impl Dialer {
    /// Dials into the namespace of process `pid`.
    pub(crate) fn new(loops: Loops, pid: u32) -> io::Result<Dialer> {
        let (wake_rx, wake_tx) = UnixStream::pair()?;
        wake_rx.set_nonblocking(true)?;
        wake_tx.set_nonblocking(true)?;
        // Results never outnumber the dials in flight.
        let (tx, rx) = crossbeam_channel::bounded(MAX_IN_FLIGHT);
        Ok(Dialer {
            loops,
            pid,
            tx,
            rx,
            wake_rx,
            wake_tx: Arc::new(wake_tx),
            in_flight: 0,
            queued: VecDeque::new(),
        })
    }

    /// Readable when a dial has finished.
    pub(crate) fn fd(&self) -> RawFd {
        self.wake_rx.as_raw_fd()
    }

    /// Dials still running or waiting.
    pub(crate) fn busy(&self) -> usize {
        self.in_flight + self.queued.len()
    }

    /// Starts dialing `port`; its result comes back with `token`.
    pub(crate) fn dial(&mut self, token: u64, port: u16) {
        self.queued.push_back((token, port));
        self.start_queued();
    }

    fn start_queued(&mut self) {
        while self.in_flight < MAX_IN_FLIGHT {
            let Some((token, port)) = self.queued.pop_front() else {
                return;
            };
            let (tx, wake, pid) = (self.tx.clone(), self.wake_tx.clone(), self.pid);
            let spawned = self.loops.spawn_transient(THREAD_NAME, move |_stop| {
                let result = dial_in_namespace(pid, port, DIAL_TIMEOUT);
                // The session may have ended meanwhile; then nobody wants the socket.
                let _ = tx.send((token, result));
                let _ = (&*wake).write(&[1]);
            });
            match spawned {
                Ok(()) => self.in_flight += 1,
                Err(e) => {
                    // No thread: the dial fails now, through the same channel.
                    let err = io::Error::other(e.to_string());
                    if self.tx.try_send((token, Err(err))).is_ok() {
                        self.in_flight += 1;
                        let _ = (&*self.wake_tx).write(&[1]);
                    }
                }
            }
        }
    }

    /// The dials finished so far (never waits).
    pub(crate) fn finished(&mut self) -> Vec<Dialed> {
        let mut sink = [0u8; 64];
        while matches!(self.wake_rx.read(&mut sink), Ok(n) if n > 0) {}
        let done: Vec<Dialed> = self.rx.try_iter().collect();
        self.in_flight = self.in_flight.saturating_sub(done.len());
        self.start_queued();
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base::loops::shutdown_channel;
    use std::net::TcpListener;
    use std::time::Instant;

    #[test]
    fn dials_in_our_own_namespace_come_back_through_the_channel() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("listen");
        let port = listener.local_addr().expect("addr").port();
        let (_shutdown, stop) = shutdown_channel();
        let mut d = Dialer::new(Loops::new(stop), std::process::id()).expect("dialer");
        for token in 0..20 {
            d.dial(token, port);
        }
        let closed = {
            let l = TcpListener::bind("127.0.0.1:0").expect("listen");
            l.local_addr().expect("addr").port()
        };
        d.dial(99, closed);
        let mut got = Vec::new();
        let until = Instant::now() + Duration::from_secs(30);
        while got.len() < 21 && Instant::now() < until {
            let mut fds = [super::super::pollfd(d.fd(), libc::POLLIN)];
            super::super::poll(&mut fds, Duration::from_millis(200)).expect("poll");
            got.extend(d.finished());
        }
        assert_eq!(got.len(), 21);
        assert_eq!(d.busy(), 0);
        for (token, r) in got {
            if token == 99 {
                assert!(r.is_err(), "nobody listens there");
            } else {
                assert!(r.is_ok(), "{token}: {r:?}");
            }
        }
    }
}
