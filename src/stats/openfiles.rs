//! The `stats` loop's kernel files kept open between samples and read again from
//! offset 0 (`pread(2)`), as cAdvisor's readers cannot but a kernel seq file allows:
//! each read at offset 0 renders the file afresh.
//!
//! Why: at 110 pods the loop read ~150 cgroups every 10 s, three files each, and
//! opening a cgroup file is a walk of ten path components, an allocation of the
//! kernel's open-file state, a read to find the end and a close: four syscalls for
//! one. Kept open, it is one `pread`.
//!
//! Bounds: only descriptors past the first 1024 of the process's limit are used
//! (the servers' connection caps are fitted inside 1024, `server::http`), and at
//! most [`MAX_OPEN`]; past that a file is opened for each read as before. A file
//! not read for [`FORGET_AFTER`] is closed: a container gone, a sandbox whose
//! `/proc/<pid>/net/dev` would otherwise keep its network namespace alive. A read
//! that fails on a kept descriptor (a cgroup removed answers `ENODEV`) closes it and
//! tries a fresh open, which tells "gone" as the one-off readers do.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::cgroupfs::{KernelFiles, SampleError, MAX_FILE, READ_AHEAD};

/// The most files kept open.
pub(crate) const MAX_OPEN: usize = 2048;

/// Descriptors of the limit left to everything else.
const LEFT_TO_OTHERS: u64 = 1024;

/// A kept file not read for this long is closed (three sampling periods).
pub(crate) const FORGET_AFTER: Duration = Duration::from_secs(30);

/// Files kept open, by path.
#[derive(Debug)]
pub(crate) struct OpenFiles {
    files: HashMap<PathBuf, (File, Instant)>,
    cap: usize,
}

impl OpenFiles {
    /// A cache sized from the process's open-descriptor limit (read now: `main` has
    /// raised it to the hard limit before any loop starts).
    pub(crate) fn for_this_process() -> OpenFiles {
        let limit = base::metrics::process::rlimit_soft(rustix::process::Resource::Nofile);
        OpenFiles::with_cap(cap_for(limit))
    }

    /// A cache keeping at most `cap` files.
    pub(crate) fn with_cap(cap: usize) -> OpenFiles {
        OpenFiles {
            files: HashMap::new(),
            cap,
        }
    }

    /// How many files are open.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether no file is open.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Closes the files not read since `now - FORGET_AFTER`.
    pub(crate) fn forget_unread(&mut self, now: Instant) {
        self.files
            .retain(|_, (_, at)| now.saturating_duration_since(*at) < FORGET_AFTER);
    }
}

/// The cap for a descriptor limit of `limit`.
fn cap_for(limit: u64) -> usize {
    let spare = limit.saturating_sub(LEFT_TO_OTHERS);
    usize::try_from(spare).unwrap_or(usize::MAX).min(MAX_OPEN)
}

impl KernelFiles for OpenFiles {
    fn read(&mut self, path: &Path) -> Result<String, SampleError> {
        let now = Instant::now();
        if let Some((file, at)) = self.files.get_mut(path) {
            match read_from_start(file, path) {
                Ok(text) => {
                    *at = now;
                    return Ok(text);
                }
                Err(_) => {
                    self.files.remove(path);
                }
            }
        }
        let io_err = |source| SampleError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io_err)?;
        let text = read_from_start(&file, path)?;
        if self.files.len() < self.cap {
            self.files.insert(path.to_path_buf(), (file, now));
        }
        Ok(text)
    }
}

/// The whole text of `file` from offset 0, at most [`MAX_FILE`] bytes. A seq file
/// fills the buffer it is given unless the text ends first, so a short read is the
/// end; a full one is followed by another read.
fn read_from_start(file: &File, path: &Path) -> Result<String, SampleError> {
    let mut buf = vec![0u8; READ_AHEAD];
    let mut len = 0usize;
    loop {
        let offset = u64::try_from(len).unwrap_or(u64::MAX);
        let n = file
            .read_at(&mut buf[len..], offset)
            .map_err(|source| SampleError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        len += n;
        if n == 0 || len < buf.len() {
            break;
        }
        if u64::try_from(len).unwrap_or(u64::MAX) >= MAX_FILE {
            return Err(SampleError::Parse {
                path: path.to_path_buf(),
                detail: format!("longer than {MAX_FILE} bytes"),
            });
        }
        buf.resize(buf.len() * 2, 0);
    }
    buf.truncate(len);
    String::from_utf8(buf).map_err(|e| SampleError::Parse {
        path: path.to_path_buf(),
        detail: format!("not text: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use base::testutil::TempDir;
    use std::fs;

    #[test]
    fn the_cap_leaves_the_first_1024_descriptors_and_stops_at_the_most() {
        assert_eq!(cap_for(0), 0);
        assert_eq!(cap_for(1024), 0);
        assert_eq!(cap_for(1500), 476);
        assert_eq!(cap_for(65536), MAX_OPEN);
        assert_eq!(cap_for(u64::MAX), MAX_OPEN);
    }

    #[test]
    fn a_kept_file_is_read_again_from_the_start() {
        let t = TempDir::new("openfiles-reread");
        let p = t.0.join("memory.current");
        fs::write(&p, "100\n").expect("write");
        let mut files = OpenFiles::with_cap(4);
        assert_eq!(files.read(&p).expect("read"), "100\n");
        assert_eq!(files.len(), 1);
        // Rewritten in place (a cgroup file renders anew at each read).
        fs::write(&p, "20\n").expect("write");
        assert_eq!(files.read(&p).expect("read"), "20\n");
        assert_eq!(files.len(), 1);
    }

    #[test]
    fn a_text_longer_than_the_first_read_is_read_whole() {
        let t = TempDir::new("openfiles-long");
        let p = t.0.join("memory.stat");
        let text: String = (0..1000).map(|i| format!("key{i} {i}\n")).collect();
        assert!(text.len() > READ_AHEAD * 2);
        fs::write(&p, &text).expect("write");
        let mut files = OpenFiles::with_cap(4);
        assert_eq!(files.read(&p).expect("read"), text);
        assert_eq!(files.read(&p).expect("read"), text);
    }

    #[test]
    fn past_the_cap_files_are_read_but_not_kept() {
        let t = TempDir::new("openfiles-cap");
        let mut files = OpenFiles::with_cap(1);
        for n in ["a", "b"] {
            fs::write(t.0.join(n), n).expect("write");
            assert_eq!(files.read(&t.0.join(n)).expect("read"), n);
        }
        assert_eq!(files.len(), 1);
        let mut none = OpenFiles::with_cap(0);
        assert_eq!(none.read(&t.0.join("a")).expect("read"), "a");
        assert!(none.is_empty());
    }

    #[test]
    fn a_missing_file_is_not_found_and_unread_files_are_closed() {
        let t = TempDir::new("openfiles-gone");
        let mut files = OpenFiles::with_cap(4);
        let gone = files.read(&t.0.join("nope")).expect_err("missing");
        assert!(gone.is_not_found(), "{gone}");
        fs::write(t.0.join("a"), "1").expect("write");
        files.read(&t.0.join("a")).expect("read");
        files.forget_unread(Instant::now());
        assert_eq!(files.len(), 1);
        files.forget_unread(Instant::now() + FORGET_AFTER);
        assert!(files.is_empty());
    }

    /// A real cgroup file: a kept descriptor renders the figures afresh at each
    /// read (the host's root `cpuacct.usage` or `cpu.stat` moves as this test runs).
    #[test]
    fn a_kept_cgroup_file_renders_anew() {
        let v1 = Path::new("/sys/fs/cgroup/cpuacct/cpuacct.usage");
        let v2 = Path::new("/sys/fs/cgroup/cpu.stat");
        let Some(p) = [v1, v2].into_iter().find(|p| p.exists()) else {
            eprintln!("no cgroup CPU file on this host");
            return;
        };
        let mut files = OpenFiles::with_cap(4);
        let first = files.read(p).expect("read");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            // Burn a little CPU so the node's counter moves.
            let mut x = 0u64;
            for i in 0..2_000_000u64 {
                x = x.wrapping_add(i * i);
            }
            std::hint::black_box(x);
            let again = files.read(p).expect("read");
            assert_eq!(files.len(), 1);
            if again != first {
                break;
            }
            assert!(Instant::now() < deadline, "{} never changed", p.display());
        }
    }
}
