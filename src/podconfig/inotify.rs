//! The file source's inotify(7) watch, on the `inotify` crate (without its `stream`
//! feature, so no tokio): one non-blocking instance, watches, a bounded wait with
//! `poll(2)` on its descriptor, and the kernel's event records turned into plain values.
//!
//! The file source uses it to hear about manifest changes at once instead of at the
//! next full re-list. The wait is bounded so the watching thread can notice shutdown;
//! the instance's descriptor is closed when the value is dropped (which also removes
//! every watch).

use std::ffi::OsString;
use std::io;
use std::os::fd::BorrowedFd;
use std::path::Path;
use std::time::Duration;

use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;

/// What the file source watches: anything that can add, change or remove a manifest,
/// and the watched directory itself going away.
pub(crate) const WATCH_MASK: u32 = libc::IN_CREATE
    | libc::IN_CLOSE_WRITE
    | libc::IN_MODIFY
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_ATTRIB
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF;

/// Room for many events per read; the kernel needs at least one header plus
/// NAME_MAX + 1 bytes or `read` fails with EINVAL.
const READ_BUFFER: usize = 16 * 1024;

/// Reads per drain, so a storm of events cannot keep the thread from its shutdown check.
const MAX_READS_PER_DRAIN: usize = 64;

/// One watch of an [`Inotify`] instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WatchDescriptor(i32);

/// One event record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Event {
    /// The watch it belongs to (-1 for `IN_Q_OVERFLOW`).
    pub wd: WatchDescriptor,
    /// `IN_*` bits.
    pub mask: u32,
    /// Pairs `IN_MOVED_FROM` with `IN_MOVED_TO`.
    pub cookie: u32,
    /// The entry's name inside a watched directory; None for events on the watched
    /// object itself.
    pub name: Option<OsString>,
}

impl Event {
    /// True when any of `bits` is set.
    pub(crate) fn has(&self, bits: u32) -> bool {
        self.mask & bits != 0
    }
}

/// What [`Inotify::wait_or_stop`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waited {
    /// Events can be read.
    Events,
    /// Shutdown has begun.
    Stop,
    /// Neither, before the timeout.
    Timeout,
}

/// An inotify instance.
#[derive(Debug)]
pub(crate) struct Inotify {
    inner: inotify::Inotify,
    /// Room for many events per read, kept between reads.
    buf: Vec<u8>,
}

impl Inotify {
    /// A new non-blocking, close-on-exec instance.
    pub(crate) fn new() -> io::Result<Self> {
        Ok(Inotify {
            inner: inotify::Inotify::init()?,
            buf: vec![0u8; READ_BUFFER],
        })
    }

    /// Watches `path` for the events in `mask` (`IN_*` bits).
    pub(crate) fn add_watch(&self, path: &Path, mask: u32) -> io::Result<WatchDescriptor> {
        let wd = self
            .inner
            .watches()
            .add(path, inotify::WatchMask::from_bits_retain(mask))?;
        Ok(WatchDescriptor(wd.get_watch_descriptor_id()))
    }

    /// Waits up to `timeout` for events. True when some can be read.
    pub(crate) fn wait(&self, timeout: Duration) -> io::Result<bool> {
        let mut pfd = [PollFd::new(&self.inner, PollFlags::IN)];
        match rustix::event::poll(&mut pfd, Some(&base::time::poll_timeout(timeout))) {
            Ok(n) => Ok(n > 0 && pfd[0].revents().contains(PollFlags::IN)),
            // A signal cut the wait short: the caller loops anyway.
            Err(Errno::INTR) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Waits up to `timeout` for events or for `stop` to become readable (shutdown).
    pub(crate) fn wait_or_stop(
        &self,
        timeout: Duration,
        stop: BorrowedFd<'_>,
    ) -> io::Result<Waited> {
        let mut pfds = [
            PollFd::new(&self.inner, PollFlags::IN),
            PollFd::from_borrowed_fd(stop, PollFlags::IN),
        ];
        match rustix::event::poll(&mut pfds, Some(&base::time::poll_timeout(timeout))) {
            Ok(_) => {}
            // A signal cut the wait short: the caller loops anyway.
            Err(Errno::INTR) => return Ok(Waited::Timeout),
            Err(e) => return Err(e.into()),
        }
        if !pfds[1].revents().is_empty() {
            return Ok(Waited::Stop);
        }
        if pfds[0].revents().contains(PollFlags::IN) {
            return Ok(Waited::Events);
        }
        Ok(Waited::Timeout)
    }

    /// Reads every event available now, without blocking.
    pub(crate) fn read_events(&mut self) -> io::Result<Vec<Event>> {
        let mut events = Vec::new();
        for _ in 0..MAX_READS_PER_DRAIN {
            match self.inner.read_events(&mut self.buf) {
                Ok(batch) => events.extend(batch.map(|e| Event {
                    wd: WatchDescriptor(e.wd.get_watch_descriptor_id()),
                    mask: e.mask.bits(),
                    cookie: e.cookie,
                    name: e.name.map(|n| n.to_os_string()),
                })),
                Err(e) => match e.kind() {
                    io::ErrorKind::WouldBlock => break,
                    io::ErrorKind::Interrupted => continue,
                    _ => return Err(e),
                },
            }
        }
        Ok(events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_real_watch_reports_a_created_file() {
        let dir = std::env::temp_dir().join(format!("rkubelet-inotify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let mut ino = Inotify::new().expect("inotify");
        let wd = ino.add_watch(&dir, WATCH_MASK).expect("watch");
        assert!(
            !ino.wait(Duration::from_millis(1)).expect("poll"),
            "no events yet"
        );
        std::fs::write(dir.join("x.yaml"), "x").expect("write");
        assert!(ino.wait(Duration::from_secs(10)).expect("poll"));
        let ev = ino.read_events().expect("read");
        assert!(ev.iter().any(|e| e.wd == wd
            && e.has(libc::IN_CREATE)
            && e.name.as_deref() == Some("x.yaml".as_ref())));
        std::fs::remove_dir_all(&dir).expect("cleanup");
        assert!(ino.wait(Duration::from_secs(10)).expect("poll"));
        let ev = ino.read_events().expect("read");
        assert!(ev.iter().any(|e| e.has(libc::IN_DELETE_SELF)), "{ev:?}");
    }
}
