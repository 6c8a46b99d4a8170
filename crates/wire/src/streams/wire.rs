//! The client's side of a streaming session: the taken-over connection with an
//! outgoing buffer of its own, so a session never waits on a slow client. Writes are
//! queued ([`Wire::queue`]) and sent as far as the socket takes them
//! ([`Wire::flush`]); the session polls for `POLLOUT` while something is queued and
//! stops reading its backend while more than [`super::HIGH_WATER`] is.
//!
//! It also implements `Read` (non-blocking) and `Write` (queues, never fails), which
//! is what tungstenite runs on.

use std::fmt;
use std::io::{self, Read, Write};
use std::os::fd::RawFd;

use crate::server::http::Hijacked;

/// What a session needs of its client's connection: non-blocking reads and writes,
/// a descriptor to poll, the response head, and the shutdown broadcast. The kubelet
/// port's [`Hijacked`] connection is the real one; tests drive sessions over a
/// socket pair.
pub trait ClientIo: Send + fmt::Debug {
    /// The socket, for `poll(2)`.
    fn fd(&self) -> RawFd;
    /// Whether bytes can be read without waiting for the socket.
    fn has_buffered(&mut self) -> bool;
    /// Reads without blocking (`WouldBlock`: nothing yet; `Ok(0)`: closed).
    fn read_nonblocking(&mut self, buf: &mut [u8]) -> io::Result<usize>;
    /// Writes what the socket takes now (`WouldBlock`: nothing).
    fn write_nonblocking(&mut self, data: &[u8]) -> io::Result<usize>;
    /// Whether encrypted records still wait to be sent.
    fn wants_write(&self) -> bool;
    /// Sends waiting records without blocking.
    fn flush_nonblocking(&mut self) -> io::Result<()>;
    /// Writes a status line and headers (waiting for the client, bounded).
    fn write_head(&mut self, status: u16, headers: &[(&str, &str)]) -> io::Result<()>;
    /// Writes all of `data` (waiting for the client, bounded).
    fn write_all(&mut self, data: &[u8]) -> io::Result<()>;
    /// True once shutdown has begun.
    fn is_stopped(&self) -> bool;
}

impl ClientIo for Hijacked {
    fn fd(&self) -> RawFd {
        Hijacked::fd(self)
    }
    fn has_buffered(&mut self) -> bool {
        Hijacked::has_buffered(self)
    }
    fn read_nonblocking(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        Hijacked::read_nonblocking(self, buf)
    }
    fn write_nonblocking(&mut self, data: &[u8]) -> io::Result<usize> {
        Hijacked::write_nonblocking(self, data)
    }
    fn wants_write(&self) -> bool {
        Hijacked::wants_write(self)
    }
    fn flush_nonblocking(&mut self) -> io::Result<()> {
        Hijacked::flush_nonblocking(self)
    }
    fn write_head(&mut self, status: u16, headers: &[(&str, &str)]) -> io::Result<()> {
        Hijacked::write_head(self, status, headers)
    }
    fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        Hijacked::write_all(self, data)
    }
    fn is_stopped(&self) -> bool {
        self.stop().is_stopped()
    }
}

/// Queued bytes are compacted once this much of the buffer's front has been sent.
const COMPACT_AT: usize = 64 * 1024;

/// The client connection and what waits to be sent to it.
#[derive(Debug)]
pub struct Wire {
    conn: Box<dyn ClientIo>,
    out: Vec<u8>,
    /// How much of `out` has been sent.
    sent: usize,
    /// The client closed its side (a read returned 0).
    eof: bool,
}

impl Wire {
    /// A wire on a taken-over connection.
    pub fn new(conn: impl ClientIo + 'static) -> Wire {
        Wire {
            conn: Box::new(conn),
            out: Vec::new(),
            sent: 0,
            eof: false,
        }
    }

    /// The socket, for `poll(2)`.
    pub(crate) fn fd(&self) -> RawFd {
        self.conn.fd()
    }

    /// Whether bytes can be read without waiting for the socket.
    pub(crate) fn has_buffered(&mut self) -> bool {
        self.conn.has_buffered()
    }

    /// Whether the client has closed its sending side.
    #[cfg(test)]
    pub(crate) fn eof(&self) -> bool {
        self.eof
    }

    /// True once shutdown has begun: the session must end.
    pub(crate) fn is_stopped(&self) -> bool {
        self.conn.is_stopped()
    }

    /// Queues bytes for the client.
    pub(crate) fn queue(&mut self, data: &[u8]) {
        self.out.extend_from_slice(data);
    }

    /// Bytes queued and not yet taken by the socket.
    pub(crate) fn pending(&self) -> usize {
        self.out.len() - self.sent
    }

    /// Whether the session must wait for the socket to be writable.
    pub(crate) fn wants_write(&self) -> bool {
        self.pending() > 0 || self.conn.wants_write()
    }

    /// Sends what the socket takes now; never waits. Errors are the client's
    /// connection breaking.
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        while self.sent < self.out.len() {
            match self.conn.write_nonblocking(&self.out[self.sent..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.sent == self.out.len() {
            self.out.clear();
            self.sent = 0;
        } else if self.sent >= COMPACT_AT {
            self.out.drain(..self.sent);
            self.sent = 0;
        }
        if self.conn.wants_write() {
            self.conn.flush_nonblocking()?;
        }
        Ok(())
    }

    /// Writes the response head (the `101` of an upgrade, or an error) straight away;
    /// nothing is queued before it.
    pub(crate) fn write_head(&mut self, status: u16, headers: &[(&str, &str)]) -> io::Result<()> {
        self.conn.write_head(status, headers)
    }
}

impl Read for Wire {
    /// Non-blocking: `WouldBlock` when nothing is there, `Ok(0)` once the client
    /// closed.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.conn.read_nonblocking(buf)?;
        if n == 0 && !buf.is_empty() {
            self.eof = true;
        }
        Ok(n)
    }
}

impl Write for Wire {
    /// Queues everything (the session bounds how much it queues).
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.queue(data);
        Ok(data.len())
    }

    /// Sends what the socket takes now.
    fn flush(&mut self) -> io::Result<()> {
        Wire::flush(self)
    }
}

/// A plain socket as a client connection, for tests of the sessions.
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct TestConn(pub std::os::unix::net::UnixStream);

#[cfg(test)]
impl ClientIo for TestConn {
    fn fd(&self) -> RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.0)
    }
    fn has_buffered(&mut self) -> bool {
        false
    }
    fn read_nonblocking(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.set_nonblocking(true)?;
        self.0.read(buf)
    }
    fn write_nonblocking(&mut self, data: &[u8]) -> io::Result<usize> {
        self.0.set_nonblocking(true)?;
        self.0.write(data)
    }
    fn wants_write(&self) -> bool {
        false
    }
    fn flush_nonblocking(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn write_head(&mut self, status: u16, headers: &[(&str, &str)]) -> io::Result<()> {
        let mut h = format!("HTTP/1.1 {status} X\r\n");
        for (n, v) in headers {
            h.push_str(&format!("{n}: {v}\r\n"));
        }
        h.push_str("\r\n");
        self.write_all(h.as_bytes())
    }
    fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        self.0.set_nonblocking(false)?;
        Write::write_all(&mut self.0, data)
    }
    fn is_stopped(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    #[test]
    fn queued_bytes_go_out_as_the_socket_takes_them() {
        let (a, mut b) = UnixStream::pair().expect("pair");
        let mut w = Wire::new(TestConn(a));
        // More than a socket buffer holds: the rest stays queued, nothing blocks.
        let big = vec![7u8; 4 * 1024 * 1024];
        w.queue(&big);
        w.flush().expect("flush");
        assert!(
            w.pending() > 0 && w.pending() < big.len(),
            "{}",
            w.pending()
        );
        let mut got = Vec::new();
        let mut buf = vec![0u8; 256 * 1024];
        while got.len() < big.len() {
            w.flush().expect("flush");
            let n = b.read(&mut buf).expect("read");
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got, big);
        assert_eq!(w.pending(), 0);
        drop(b);
        let mut one = [0u8; 1];
        assert_eq!(w.read(&mut one).expect("eof"), 0);
        assert!(w.eof());
    }
}
