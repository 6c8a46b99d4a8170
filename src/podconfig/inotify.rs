//! A minimal inotify(7) binding over `libc`: one non-blocking instance, watches, a
//! bounded wait with `poll(2)`, and the parsing of the kernel's event records.
//!
//! The file source uses it to hear about manifest changes at once instead of at the
//! next full re-list. The wait is bounded so the watching thread can notice shutdown;
//! the instance's descriptor is closed when the value is dropped (which also removes
//! every watch).

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;
use std::time::Duration;

/// What the file source watches: anything that can add, change or remove a manifest,
/// and the watched directory itself going away.
pub const WATCH_MASK: u32 = libc::IN_CREATE
    | libc::IN_CLOSE_WRITE
    | libc::IN_MODIFY
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_ATTRIB
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF;

/// The fixed part of a `struct inotify_event`; the name (NUL-padded) follows it.
const EVENT_HEADER: usize = std::mem::size_of::<libc::inotify_event>();

/// Room for many events per read; the kernel needs at least one header plus
/// NAME_MAX + 1 bytes or `read` fails with EINVAL.
const READ_BUFFER: usize = 16 * 1024;

/// Reads per drain, so a storm of events cannot keep the thread from its shutdown check.
const MAX_READS_PER_DRAIN: usize = 64;

/// One watch of an [`Inotify`] instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WatchDescriptor(i32);

/// One event record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
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
    pub fn has(&self, bits: u32) -> bool {
        self.mask & bits != 0
    }
}

/// An inotify instance.
#[derive(Debug)]
pub struct Inotify {
    fd: OwnedFd,
}

impl Inotify {
    /// A new non-blocking, close-on-exec instance.
    pub fn new() -> io::Result<Self> {
        // SAFETY: inotify_init1 takes only flags and returns a new descriptor or -1.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by inotify_init1, is open, and nothing else
        // owns it; OwnedFd closes it exactly once.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Inotify { fd })
    }

    /// Watches `path` for the events in `mask`.
    pub fn add_watch(&self, path: &Path, mask: u32) -> io::Result<WatchDescriptor> {
        let c_path = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
        // SAFETY: the descriptor is open for the life of `self`; `c_path` is a valid
        // NUL-terminated string that outlives the call.
        let wd = unsafe { libc::inotify_add_watch(self.fd.as_raw_fd(), c_path.as_ptr(), mask) };
        if wd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(WatchDescriptor(wd))
    }

    /// Waits up to `timeout` for events. True when some can be read.
    pub fn wait(&self, timeout: Duration) -> io::Result<bool> {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: `pfd` is one valid, writable pollfd and the count says 1.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            // A signal cut the wait short: the caller loops anyway.
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(e)
            };
        }
        Ok(n > 0 && pfd.revents & libc::POLLIN != 0)
    }

    /// Reads every event available now, without blocking.
    pub fn read_events(&self) -> io::Result<Vec<Event>> {
        let mut buf = vec![0u8; READ_BUFFER];
        let mut events = Vec::new();
        for _ in 0..MAX_READS_PER_DRAIN {
            // SAFETY: `buf` is valid, writable memory of `buf.len()` bytes, and the
            // descriptor is open for the life of `self`.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::WouldBlock => break,
                    io::ErrorKind::Interrupted => continue,
                    _ => return Err(e),
                }
            }
            let n = usize::try_from(n).unwrap_or(0);
            if n == 0 {
                break;
            }
            events.extend(parse_events(&buf[..n]));
        }
        Ok(events)
    }
}

/// Parses the records the kernel wrote: each a `struct inotify_event` header
/// (wd, mask, cookie, len) followed by `len` bytes of NUL-padded name. A truncated
/// record at the end is dropped.
pub fn parse_events(buf: &[u8]) -> Vec<Event> {
    let word = |at: usize| -> [u8; 4] {
        let mut w = [0u8; 4];
        w.copy_from_slice(&buf[at..at + 4]);
        w
    };
    let mut events = Vec::new();
    let mut off = 0;
    while off + EVENT_HEADER <= buf.len() {
        let wd = i32::from_ne_bytes(word(off));
        let mask = u32::from_ne_bytes(word(off + 4));
        let cookie = u32::from_ne_bytes(word(off + 8));
        let len = u32::from_ne_bytes(word(off + 12)) as usize;
        let name_start = off + EVENT_HEADER;
        let Some(raw) = buf.get(name_start..name_start + len) else {
            break;
        };
        let name_len = raw.iter().position(|b| *b == 0).unwrap_or(raw.len());
        let name = (name_len > 0).then(|| OsString::from_vec(raw[..name_len].to_vec()));
        events.push(Event {
            wd: WatchDescriptor(wd),
            mask,
            cookie,
            name,
        });
        off = name_start + len;
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(wd: i32, mask: u32, cookie: u32, name: &str, padded: usize) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&wd.to_ne_bytes());
        v.extend_from_slice(&mask.to_ne_bytes());
        v.extend_from_slice(&cookie.to_ne_bytes());
        v.extend_from_slice(&(padded as u32).to_ne_bytes());
        let mut n = name.as_bytes().to_vec();
        n.resize(padded, 0);
        v.extend_from_slice(&n);
        v
    }

    #[test]
    fn parses_records_with_and_without_names() {
        let mut buf = record(1, libc::IN_CREATE, 0, "web.yaml", 16);
        buf.extend(record(1, libc::IN_DELETE_SELF, 0, "", 0));
        buf.extend(record(2, libc::IN_MOVED_TO, 7, "a", 4));
        // A truncated trailing record is ignored.
        buf.extend(&record(3, libc::IN_CREATE, 0, "cut", 16)[..20]);
        let ev = parse_events(&buf);
        assert_eq!(
            ev,
            vec![
                Event {
                    wd: WatchDescriptor(1),
                    mask: libc::IN_CREATE,
                    cookie: 0,
                    name: Some("web.yaml".into())
                },
                Event {
                    wd: WatchDescriptor(1),
                    mask: libc::IN_DELETE_SELF,
                    cookie: 0,
                    name: None
                },
                Event {
                    wd: WatchDescriptor(2),
                    mask: libc::IN_MOVED_TO,
                    cookie: 7,
                    name: Some("a".into())
                },
            ]
        );
    }

    #[test]
    fn a_real_watch_reports_a_created_file() {
        let dir = std::env::temp_dir().join(format!("rkubelet-inotify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let ino = Inotify::new().expect("inotify");
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
