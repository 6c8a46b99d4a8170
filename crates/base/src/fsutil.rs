//! Reading files that come from outside (static pod manifests, the config file) without
//! ever blocking or reading without limit.
//!
//! Why: `open(2)` on a FIFO blocks until a writer comes, and `read(2)` on `/dev/zero`
//! never ends. A manifest directory or a `--config` path is written by people and
//! tools, so a FIFO, a device or a huge file there must be refused with a message, not
//! hang a loop for good or eat the node's memory. [`read_regular`] only reads regular
//! files: it `stat`s the path first (links are followed on purpose: a manifest may be
//! a link into a versioned directory), opens it with `O_NONBLOCK` (so a FIFO swapped in
//! after the `stat` cannot block the open), and `fstat`s the opened descriptor, which
//! is the authority on what was opened, before reading at most `max` bytes.
//! `O_NOFOLLOW` is not used: following links is wanted here, and the `fstat` of the
//! opened descriptor already rules out whatever a link could be swapped to.
//!
//! And writing the kubelet's own state files so that a crash or a power cut leaves
//! either the old file or the new one, never a torn one ([`write_atomic`]).

use std::fs::{File, Metadata};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, SystemTime};

/// Why a file was not read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// `stat`, `open` or `read` failed.
    #[error("{0}")]
    Io(#[source] io::Error),
    /// The path is not a regular file (after following links); the kind it is.
    #[error("is {0}, not a regular file")]
    NotRegular(&'static str),
    /// The file is larger than the cap (its size, or at least cap + 1).
    #[error("is {size} bytes, more than the {max} bytes allowed")]
    TooLarge {
        /// The size seen.
        size: u64,
        /// The cap.
        max: u64,
    },
}

impl ReadError {
    /// True when the file does not exist (e.g. deleted between a listing and the read).
    pub fn is_not_found(&self) -> bool {
        matches!(self, ReadError::Io(e) if e.kind() == io::ErrorKind::NotFound)
    }
}

/// What a file looked like when it was read: enough to tell, without reading it again,
/// that it has not changed (the same inode, size, modification and change times).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fingerprint {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

/// Timestamps can be as coarse as a kernel tick (ext4 without nanosecond stamps,
/// tmpfs on some kernels): a file written again within the same tick keeps its
/// modification time. A fingerprint taken less than this after the file's last change
/// is "racy" (git's term) and is not trusted to mean "unchanged" later.
const RACY_WINDOW: Duration = Duration::from_secs(1);

impl Fingerprint {
    /// The fingerprint of a file's metadata.
    pub fn of(meta: &Metadata) -> Fingerprint {
        Fingerprint {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// Whether a match of this fingerprint can be trusted to mean "same bytes": false
    /// when it was taken (at `now`) within [`RACY_WINDOW`] of the file's last change.
    pub fn settled(&self, now: SystemTime) -> bool {
        let newest = self.mtime.max(self.ctime);
        let changed = match u64::try_from(newest.0) {
            Ok(s) => {
                SystemTime::UNIX_EPOCH
                    + Duration::from_secs(s)
                    + Duration::from_nanos(u64::try_from(newest.1).unwrap_or(0))
            }
            // Before 1970: long settled.
            Err(_) => return true,
        };
        // A change time in the future (clock set back) is never settled.
        now.duration_since(changed)
            .is_ok_and(|age| age >= RACY_WINDOW)
    }
}

/// What `stat` says a path is, for messages.
fn kind_of(meta: &Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else {
        "not a regular file"
    }
}

/// `stat` of `path` (following links), refusing anything but a regular file. Never
/// blocks on a FIFO.
pub fn stat_regular(path: &Path) -> Result<Metadata, ReadError> {
    let meta = std::fs::metadata(path).map_err(ReadError::Io)?;
    if !meta.is_file() {
        return Err(ReadError::NotRegular(kind_of(&meta)));
    }
    Ok(meta)
}

/// Reads the regular file at `path`, at most `max` bytes, without blocking on a FIFO
/// or a device. Returns the bytes and the fingerprint of what was read.
pub fn read_regular(path: &Path, max: u64) -> Result<(Vec<u8>, Fingerprint), ReadError> {
    let before = stat_regular(path)?;
    if before.len() > max {
        return Err(ReadError::TooLarge {
            size: before.len(),
            max,
        });
    }
    // O_NONBLOCK: if the path became a FIFO since the stat, open returns at once
    // instead of waiting for a writer. It changes nothing for a regular file.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(ReadError::Io)?;
    let meta = file.metadata().map_err(ReadError::Io)?;
    if !meta.is_file() {
        return Err(ReadError::NotRegular(kind_of(&meta)));
    }
    if meta.len() > max {
        return Err(ReadError::TooLarge {
            size: meta.len(),
            max,
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    // The file may grow while it is read: never read past the cap.
    read_capped(file, max, &mut bytes)?;
    Ok((bytes, Fingerprint::of(&meta)))
}

fn read_capped(file: File, max: u64, bytes: &mut Vec<u8>) -> Result<(), ReadError> {
    file.take(max.saturating_add(1))
        .read_to_end(bytes)
        .map_err(ReadError::Io)?;
    let len = bytes.len() as u64;
    if len > max {
        return Err(ReadError::TooLarge { size: len, max });
    }
    Ok(())
}

/// Replaces the file at `path` with `bytes` (mode `mode`) so that every reader, and
/// the disk after a crash or a power cut, sees the old content or the new, never a
/// mix: written to `.<name>.tmp` beside it, `fsync`ed, renamed over `path`, then the
/// directory `fsync`ed so that the rename itself is on disk. A temporary file left by
/// an earlier crash is overwritten. On error `path` is untouched (and the temporary
/// file removed).
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    use std::io::Write;
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a file path",
        ));
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(".tmp");
    let tmp = dir.join(tmp_name);
    // A leftover of a crash (or anything planted there) goes first: the temporary
    // file is made afresh, with our mode, and never through a link.
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;

    #[test]
    fn write_atomic_replaces_the_file_and_leaves_no_temporary() {
        let dir = TempDir::new("fsutil-atomic");
        let p = dir.0.join("state.json");
        write_atomic(&p, b"one", 0o600).expect("first write");
        assert_eq!(std::fs::read(&p).expect("read"), b"one");
        // A temporary file left by a crash is overwritten, not appended to.
        std::fs::write(dir.0.join(".state.json.tmp"), "torn garbage").expect("leftover");
        write_atomic(&p, b"two", 0o600).expect("second write");
        assert_eq!(std::fs::read(&p).expect("read"), b"two");
        let names: Vec<String> = std::fs::read_dir(&dir.0)
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["state.json"]);
        // The mode is ours even where the leftover had another.
        let mode = std::fs::metadata(&p).expect("stat").mode() & 0o777;
        assert_eq!(mode, 0o600);
        // A directory that is not there: an error, and nothing written.
        let missing = dir.0.join("no/such/dir/f");
        assert!(write_atomic(&missing, b"x", 0o600).is_err());
        // A link planted as the temporary file is not written through.
        let target = dir.write("target", "keep");
        std::os::unix::fs::symlink(&target, dir.0.join(".other.tmp")).expect("symlink");
        write_atomic(&dir.0.join("other"), b"x", 0o600).expect("write beside the link");
        assert_eq!(std::fs::read(&target).expect("read"), b"keep");
        assert_eq!(std::fs::read(dir.0.join("other")).expect("read"), b"x");
    }

    fn mkfifo(path: &Path) {
        use rustix::fs::{mkfifoat, Mode, CWD};
        // glibc's mkfifo is this same mknodat(AT_FDCWD, path, S_IFIFO | mode).
        mkfifoat(CWD, path, Mode::from_raw_mode(0o644)).expect("mkfifo");
    }

    #[test]
    fn reads_a_regular_file_and_a_link_to_one() {
        let dir = TempDir::new("fsutil-read");
        let p = dir.write("a.yaml", "hello");
        let (bytes, fp) = read_regular(&p, 5).expect("read");
        assert_eq!(bytes, b"hello");
        let link = dir.0.join("link.yaml");
        std::os::unix::fs::symlink(&p, &link).expect("symlink");
        let (bytes, fp2) = read_regular(&link, 5).expect("read the link");
        assert_eq!(bytes, b"hello");
        assert_eq!(fp, fp2, "the link's target is what is fingerprinted");
    }

    #[test]
    fn refuses_fifos_devices_directories_and_big_files_without_blocking() {
        let dir = TempDir::new("fsutil-refuse");
        let fifo = dir.0.join("zz.yaml");
        mkfifo(&fifo);
        let e = read_regular(&fifo, 10).expect_err("a FIFO");
        assert_eq!(e.to_string(), "is a FIFO, not a regular file");
        let link = dir.0.join("to-fifo.yaml");
        std::os::unix::fs::symlink(&fifo, &link).expect("symlink");
        assert!(matches!(
            read_regular(&link, 10),
            Err(ReadError::NotRegular("a FIFO"))
        ));
        assert!(matches!(
            read_regular(Path::new("/dev/zero"), 10),
            Err(ReadError::NotRegular("a character device"))
        ));
        assert!(matches!(
            read_regular(&dir.0, 10),
            Err(ReadError::NotRegular("a directory"))
        ));
        let big = dir.write("big.yaml", "0123456789a");
        let e = read_regular(&big, 10).expect_err("too big");
        assert_eq!(e.to_string(), "is 11 bytes, more than the 10 bytes allowed");
        assert!(read_regular(&dir.0.join("gone"), 10)
            .expect_err("missing")
            .is_not_found());
    }

    #[test]
    fn a_fingerprint_is_settled_only_a_while_after_the_change() {
        let dir = TempDir::new("fsutil-racy");
        let p = dir.write("a.yaml", "x");
        let fp = Fingerprint::of(&std::fs::metadata(&p).expect("stat"));
        let now = SystemTime::now();
        assert!(!fp.settled(now), "just written: racy");
        assert!(fp.settled(now + RACY_WINDOW + Duration::from_millis(10)));
        assert!(!fp.settled(now - Duration::from_secs(60)), "clock set back");
    }
}
