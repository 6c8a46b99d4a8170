//! A container's CRI log file read as upstream's kubelet reads it
//! (`pkg/kubelet/kuberuntime/logs`, `ReadLogs`): lines `<RFC 3339 time> <stdout|stderr>
//! <F|P> <content>`, a `P` (partial) line continued by the next piece of its stream;
//! `tail` counted back from the file's end, `since` and the chosen streams filtering,
//! `timestamps` printing each line's time (`RFC3339NanoFixed`, UTC).
//!
//! [`LogReader`] is the trait's [`runtime::LogStream`]: a plain `Read` over the file
//! with no thread of its own. Followed, a read at the file's end waits on an inotify
//! watch of the log's directory (or sleeps, when no inotify instance is left) at most
//! the caller's `wake`, then answers `WouldBlock`; once a second at most it asks the
//! runtime whether the container still runs, and once it does not, reads to the end
//! and ends. When the container log manager rotates the file (renames `0.log`, then
//! `ReopenContainerLog` makes a new one), the reader finishes the old file and goes
//! on with the new one at its start once the runtime writes there (or a second
//! passed); upstream switches on the rename and may lose the old file's last lines.
//!
//! Unlike upstream, partial pieces are joined as they stream (one timestamp per line,
//! `since` judged by its first piece, `tail` counting whole lines), and a line with
//! no end is cut at [`MAX_LINE`]. Like upstream, `tail` reads the current file only,
//! not the rotated ones.
//!
//! Over 800 lines: 260 of them are its unit tests (line parsing, the tail search, the
//! printer's options, reads with and without follow across a rotation).

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;

use runtime::LogOptions;

/// How often a follower asks the runtime whether the container still runs (upstream's
/// `logForceCheckPeriod`).
const RUNNING_CHECK: Duration = Duration::from_secs(1);
/// What one file read takes.
const READ_CHUNK: usize = 64 * 1024;
/// The longest line kept whole: containerd cuts its lines at 16 KiB (`P` pieces), so
/// only a file that is no CRI log has longer ones; such a line is handled in pieces.
const MAX_LINE: usize = 1024 * 1024;
/// How long a follower keeps reading a rotated file while the new one stays empty:
/// the runtime may still write to the old one until its reopen has swapped files.
const SWITCH_AFTER: Duration = Duration::from_secs(1);
/// The wait between looks at the file when no inotify instance could be had.
const POLL_WITHOUT_INOTIFY: Duration = Duration::from_millis(250);
/// How much of a line's start the tail scan keeps to read its tag.
const TAG_PREFIX: usize = 128;

/// A CRI log line's stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

/// One line of a CRI container log file (`<RFC 3339 time> <stream> <tags> <content>`;
/// the first `:`-separated tag `P` marks a partial line, continued by the next, `F` a
/// full one).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct LogLine<'a> {
    pub(crate) time: &'a [u8],
    pub(crate) stream: Stream,
    pub(crate) partial: bool,
    pub(crate) content: &'a [u8],
}

/// One line without its newline; None for what is no CRI log line.
pub(crate) fn parse_log_line(line: &[u8]) -> Option<LogLine<'_>> {
    let mut parts = line.splitn(4, |b| *b == b' ');
    let time = parts.next().filter(|t| !t.is_empty())?;
    let stream = match parts.next()? {
        b"stdout" => Stream::Stdout,
        b"stderr" => Stream::Stderr,
        _ => return None,
    };
    let tags = parts.next()?;
    // Tags are `:`-separated; the first says full or partial.
    let partial = tags.split(|b| *b == b':').next() == Some(b"P");
    Some(LogLine {
        time,
        stream,
        partial,
        content: parts.next().unwrap_or_default(),
    })
}

/// The content of a CRI log file's last `tail` lines (all if None), both streams as
/// written, partial lines joined, each ending in a newline. `text` may begin in the
/// middle of a line (the caller read only the file's end): that first piece is
/// skipped when `cut` says so. Unreadable lines are skipped.
pub(crate) fn log_tail(text: &[u8], tail: Option<u64>, cut: bool) -> Vec<u8> {
    let mut lines = text.split(|b| *b == b'\n');
    if cut {
        lines.next();
    }
    let mut full: Vec<Vec<u8>> = Vec::new();
    let mut pending: Vec<u8> = Vec::new();
    for line in lines {
        let Some(l) = parse_log_line(line) else {
            continue;
        };
        pending.extend_from_slice(l.content);
        if !l.partial {
            pending.push(b'\n');
            full.push(std::mem::take(&mut pending));
        }
    }
    let keep = tail.map_or(full.len(), |n| {
        usize::try_from(n).unwrap_or(usize::MAX).min(full.len())
    });
    let start = full.len() - keep;
    let mut out: Vec<u8> = full.drain(start..).flatten().collect();
    // A partial line at the very end (the container is still writing it) counts as the
    // last line's continuation, as upstream's reader shows it.
    out.extend_from_slice(&pending);
    out
}

/// Whether a raw line ends a whole log line: a readable `F` line.
fn ends_line(line_start: &[u8]) -> bool {
    parse_log_line(line_start).is_some_and(|l| !l.partial)
}

/// Where the last `n` whole lines of the file's first `len` bytes begin (upstream
/// `tail.FindTailLineStartIndex`, counting whole lines): just after the (n+1)-th last
/// `F` line, or the start. Reads the file backwards in blocks, keeping only the start
/// of the line in hand.
pub(crate) fn tail_start(file: &mut File, n: u64, len: u64) -> io::Result<u64> {
    let mut block = vec![0u8; READ_CHUNK];
    // The start (at most TAG_PREFIX bytes) of the line that ends at `line_end`.
    let mut head: Vec<u8> = Vec::new();
    // The end (exclusive, its newline's position) of the line being assembled; None
    // while in the unterminated piece after the file's last newline.
    let mut line_end: Option<u64> = None;
    let mut seen = 0u64;
    let mut pos = len;
    while pos > 0 {
        let size = usize::try_from(pos.min(READ_CHUNK as u64)).unwrap_or(READ_CHUNK);
        pos -= size as u64;
        file.seek(SeekFrom::Start(pos))?;
        file.read_exact(&mut block[..size])?;
        let mut upto = size;
        while let Some(i) = block[..upto].iter().rposition(|b| *b == b'\n') {
            // Whatever lies between this newline and `upto` begins the line in hand.
            prepend(&mut head, &block[i + 1..upto]);
            if line_end.is_some() && ends_line(&head) {
                seen += 1;
                if seen > n {
                    return Ok(line_end.map_or(len, |e| e + 1));
                }
            }
            line_end = Some(pos + i as u64);
            head.clear();
            upto = i;
        }
        prepend(&mut head, &block[..upto]);
    }
    // The file's first line has no newline before it.
    if line_end.is_some() && ends_line(&head) && seen + 1 > n {
        return Ok(line_end.map_or(len, |e| e + 1));
    }
    Ok(0)
}

/// `head` = `piece` + `head`, kept to its first [`TAG_PREFIX`] bytes.
fn prepend(head: &mut Vec<u8>, piece: &[u8]) {
    let mut joined = piece[..piece.len().min(TAG_PREFIX)].to_vec();
    if joined.len() < TAG_PREFIX {
        joined.extend_from_slice(&head[..head.len().min(TAG_PREFIX - joined.len())]);
    }
    *head = joined;
}

/// What the options keep of each line and how it is printed (upstream `logWriter`,
/// with partial pieces joined). Pure.
#[derive(Debug)]
pub(crate) struct Printer {
    since: Option<SystemTime>,
    timestamps: bool,
    stdout: bool,
    stderr: bool,
    /// Per stream (stdout, stderr): a partial line is under way, and whether it is
    /// shown (judged by its first piece).
    open: [Option<bool>; 2],
}

impl Printer {
    pub(crate) fn new(opts: &LogOptions) -> Printer {
        Printer {
            since: opts.since,
            timestamps: opts.timestamps,
            stdout: opts.stdout,
            stderr: opts.stderr,
            open: [None, None],
        }
    }

    /// Appends what `raw` (one line, no newline) prints to `out`.
    pub(crate) fn line(&mut self, raw: &[u8], out: &mut Vec<u8>) {
        let Some(l) = parse_log_line(raw) else {
            log::debug!(
                "skipping a line that is no CRI log line: {:?}",
                String::from_utf8_lossy(&raw[..raw.len().min(80)])
            );
            return;
        };
        let slot = match l.stream {
            Stream::Stdout => 0,
            Stream::Stderr => 1,
        };
        let shown = match self.open[slot] {
            // A continuation: as its line's first piece was judged.
            Some(shown) => shown,
            None => {
                let wanted = match l.stream {
                    Stream::Stdout => self.stdout,
                    Stream::Stderr => self.stderr,
                };
                let time = std::str::from_utf8(l.time)
                    .ok()
                    .and_then(base::time::parse_rfc3339);
                // A line whose time cannot be read is kept (it cannot be placed).
                let recent = match (self.since, time) {
                    (Some(since), Some(t)) => t >= since,
                    _ => true,
                };
                let shown = wanted && recent;
                if shown && self.timestamps {
                    let stamp = time.map_or_else(
                        || String::from_utf8_lossy(l.time).into_owned(),
                        base::time::rfc3339_nano_fixed,
                    );
                    out.extend_from_slice(stamp.as_bytes());
                    out.push(b' ');
                }
                shown
            }
        };
        if shown {
            out.extend_from_slice(l.content);
            if !l.partial {
                out.push(b'\n');
            }
        }
        self.open[slot] = l.partial.then_some(shown);
    }
}

/// Whether the container still runs (the runtime's answer), for a follower.
pub(crate) type RunningCheck = Box<dyn FnMut() -> io::Result<bool> + Send>;

/// The wait of a follower at the file's end.
enum Waiter {
    /// An inotify instance watching the log's directory.
    Inotify(inotify::Inotify),
    /// No instance could be had (the user's limit): sleep and look again.
    Sleep,
}

impl Waiter {
    fn new(dir: &Path) -> Waiter {
        let made = inotify::Inotify::init().and_then(|ino| {
            ino.watches().add(
                dir,
                inotify::WatchMask::MODIFY
                    | inotify::WatchMask::CREATE
                    | inotify::WatchMask::MOVED_FROM
                    | inotify::WatchMask::MOVED_TO
                    | inotify::WatchMask::DELETE
                    | inotify::WatchMask::CLOSE_WRITE
                    | inotify::WatchMask::DELETE_SELF,
            )?;
            Ok(ino)
        });
        match made {
            Ok(ino) => Waiter::Inotify(ino),
            Err(e) => {
                log::debug!(
                    "no inotify watch of {}: {e}; looking every {POLL_WITHOUT_INOTIFY:?}",
                    dir.display()
                );
                Waiter::Sleep
            }
        }
    }

    /// Waits up to `d` for something to change in the directory.
    fn wait(&mut self, d: Duration) -> io::Result<()> {
        match self {
            Waiter::Sleep => {
                std::thread::sleep(d.min(POLL_WITHOUT_INOTIFY));
                Ok(())
            }
            Waiter::Inotify(ino) => {
                let mut pfd = [PollFd::new(&*ino, PollFlags::IN)];
                match rustix::event::poll(&mut pfd, Some(&base::time::poll_timeout(d))) {
                    Ok(_) | Err(Errno::INTR) => {}
                    Err(e) => return Err(e.into()),
                }
                // The events only say "look again": drop them.
                let mut buf = [0u8; 4096];
                loop {
                    match ino.read_events(&mut buf) {
                        Ok(mut events) => {
                            if events.next().is_none() {
                                return Ok(());
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
            }
        }
    }
}

/// The follower's state.
struct Follow {
    running: RunningCheck,
    wake: Duration,
    waiter: Waiter,
    last_check: Option<Instant>,
    /// The container was seen stopped: what is left is read, then the log ends.
    stopped: bool,
    /// When a new file was first seen at the path. The old one is left once the
    /// runtime writes to the new one (it has let go of the old) or [`SWITCH_AFTER`]
    /// passed, each time after reading the old one to its end.
    rotated: Option<Instant>,
}

/// A container's CRI log as a [`runtime::LogStream`].
pub(crate) struct LogReader {
    path: PathBuf,
    file: File,
    /// The open file's (device, inode), to tell a rotation.
    id: (u64, u64),
    /// Bytes read but not yet a whole line.
    raw: Vec<u8>,
    /// Printed bytes the caller has not taken yet, from `out_at`.
    out: Vec<u8>,
    out_at: usize,
    printer: Printer,
    follow: Option<Follow>,
    /// Without `follow`: the file's length when it was opened, where the read ends.
    end: Option<u64>,
    done: bool,
}

impl std::fmt::Debug for LogReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogReader")
            .field("path", &self.path)
            .field("following", &self.follow.is_some())
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

fn file_id(m: &std::fs::Metadata) -> (u64, u64) {
    (m.dev(), m.ino())
}

impl LogReader {
    /// Opens the log at `path` with `opts` (tail, since, timestamps, streams;
    /// `follow` with `running`, each read waiting at most `wake`).
    pub(crate) fn open(
        path: &Path,
        opts: &LogOptions,
        wake: Duration,
        running: RunningCheck,
    ) -> io::Result<LogReader> {
        let mut file = File::open(path)?;
        let meta = file.metadata()?;
        let id = file_id(&meta);
        // Without `follow`, the log as it is now: lines the container writes while it
        // is read are not counted in a tail, so they are not printed either.
        let len = meta.len();
        let start = match opts.tail {
            Some(n) => tail_start(&mut file, n, len)?,
            None => 0,
        };
        file.seek(SeekFrom::Start(start))?;
        let follow = opts.follow.then(|| Follow {
            running,
            wake,
            waiter: Waiter::new(path.parent().unwrap_or(Path::new("/"))),
            last_check: None,
            stopped: false,
            rotated: None,
        });
        Ok(LogReader {
            path: path.to_path_buf(),
            file,
            id,
            raw: Vec::new(),
            out: Vec::new(),
            out_at: 0,
            printer: Printer::new(opts),
            end: (!opts.follow).then_some(len),
            follow,
            done: false,
        })
    }

    /// Prints the whole lines in `raw` (and, with `all`, what is left too).
    fn print_lines(&mut self, all: bool) {
        let mut from = 0;
        while let Some(i) = self.raw[from..].iter().position(|b| *b == b'\n') {
            self.printer.line(&self.raw[from..from + i], &mut self.out);
            from += i + 1;
        }
        if all || self.raw.len() - from > MAX_LINE {
            if from < self.raw.len() {
                self.printer.line(&self.raw[from..], &mut self.out);
            }
            from = self.raw.len();
        }
        self.raw.drain(..from);
    }

    /// Reads the file once; false at its end.
    fn fill(&mut self) -> io::Result<bool> {
        let mut want = READ_CHUNK;
        if let Some(end) = self.end {
            let left = end.saturating_sub(self.file.stream_position()?);
            want = usize::try_from(left).unwrap_or(READ_CHUNK).min(READ_CHUNK);
            if want == 0 {
                return Ok(false);
            }
        }
        let at = self.raw.len();
        self.raw.resize(at + want, 0);
        let n = loop {
            match self.file.read(&mut self.raw[at..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.raw.truncate(at);
                    return Err(e);
                }
            }
        };
        self.raw.truncate(at + n);
        if n > 0 {
            self.print_lines(false);
        }
        Ok(n > 0)
    }

    /// At the file's end while following: switches to a rotated file's successor,
    /// ends the log of a stopped container, or waits. `Ok(true)`: read again;
    /// `Ok(false)`: waited `wake` for nothing.
    fn at_end(&mut self, began: Instant) -> io::Result<bool> {
        let Some(f) = self.follow.as_mut() else {
            return Ok(true);
        };
        if f.stopped {
            self.done = true;
            return Ok(true);
        }
        let now = std::fs::metadata(&self.path)
            .ok()
            .map(|m| (file_id(&m), m.len()));
        if let Some((_, len)) = now.filter(|(id, _)| *id != self.id) {
            let Some(seen) = f.rotated else {
                // Read the old file to its end once more first.
                f.rotated = Some(Instant::now());
                return Ok(true);
            };
            // The old file is read to its end: on with the new one from its start.
            if len > 0 || seen.elapsed() >= SWITCH_AFTER {
                if let Ok(file) = File::open(&self.path) {
                    f.rotated = None;
                    let id = file_id(&file.metadata()?);
                    // A line the old file left unfinished is printed as it is.
                    self.print_lines(true);
                    self.file = file;
                    self.id = id;
                    return Ok(true);
                }
            }
        }
        let due = f.last_check.is_none_or(|t| t.elapsed() >= RUNNING_CHECK);
        if due {
            f.last_check = Some(Instant::now());
            if !(f.running)()? {
                // Whatever it wrote before stopping is read, then the log ends.
                f.stopped = true;
                return Ok(true);
            }
        }
        let left = f.wake.saturating_sub(began.elapsed());
        if left.is_zero() {
            return Ok(false);
        }
        let until_check = f.last_check.map_or(Duration::ZERO, |t| {
            RUNNING_CHECK.saturating_sub(t.elapsed())
        });
        f.waiter
            .wait(left.min(until_check.max(Duration::from_millis(10))))?;
        Ok(true)
    }
}

impl Read for LogReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let began = Instant::now();
        loop {
            if self.out_at < self.out.len() {
                let n = buf.len().min(self.out.len() - self.out_at);
                buf[..n].copy_from_slice(&self.out[self.out_at..self.out_at + n]);
                self.out_at += n;
                if self.out_at == self.out.len() {
                    self.out.clear();
                    self.out_at = 0;
                }
                return Ok(n);
            }
            if self.done || buf.is_empty() {
                return Ok(0);
            }
            if self.fill()? {
                continue;
            }
            if self.follow.is_none() {
                // The end: an unfinished last line is printed as it is (upstream's
                // "Incomplete line in log file").
                self.print_lines(true);
                self.done = true;
                continue;
            }
            if !self.at_end(began)? {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    "nothing new in the log",
                ));
            }
            if self.done {
                self.print_lines(true);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base::testutil::TempDir;
    use std::io::Write;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[test]
    fn cri_log_lines_are_parsed_and_partials_joined() {
        assert_eq!(
            parse_log_line(b"2016-10-06T00:17:09.669794202Z stdout F hello world"),
            Some(LogLine {
                time: b"2016-10-06T00:17:09.669794202Z",
                stream: Stream::Stdout,
                partial: false,
                content: b"hello world"
            })
        );
        assert_eq!(
            parse_log_line(b"2016-10-06T00:17:09.669794202Z stderr P part"),
            Some(LogLine {
                time: b"2016-10-06T00:17:09.669794202Z",
                stream: Stream::Stderr,
                partial: true,
                content: b"part"
            })
        );
        assert_eq!(
            parse_log_line(b"2016-10-06T00:17:09.669794202Z stdout F")
                .map(|l| (l.partial, l.content)),
            Some((false, &b""[..]))
        );
        assert_eq!(parse_log_line(b"garbage"), None);
        assert_eq!(parse_log_line(b""), None);

        let file =
            b"T stdout F one\nT stderr F two\nT stdout P thr\nT stdout F ee\nT stdout F four\n";
        assert_eq!(log_tail(file, None, false), b"one\ntwo\nthree\nfour\n");
        assert_eq!(log_tail(file, Some(2), false), b"three\nfour\n");
        assert_eq!(log_tail(file, Some(0), false), b"");
        assert_eq!(log_tail(file, Some(99), false), b"one\ntwo\nthree\nfour\n");
        // Read from the middle of a line: the piece before the first newline goes.
        assert_eq!(log_tail(&file[5..], None, true), b"two\nthree\nfour\n");
    }

    const T1: &str = "2024-01-01T00:00:01.000000001Z";
    const T2: &str = "2024-01-01T00:00:02.5+00:00";
    const T3: &str = "2024-01-01T00:00:03Z";

    fn sample() -> String {
        format!(
            "{T1} stdout F one\n{T1} stderr F err\n{T2} stdout P tw\n{T2} stdout P o-\n\
             {T3} stdout F two\n{T3} stdout F three\n"
        )
    }

    fn print(text: &str, opts: &LogOptions) -> String {
        let mut p = Printer::new(opts);
        let mut out = Vec::new();
        for l in text.lines() {
            p.line(l.as_bytes(), &mut out);
        }
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn the_printer_filters_streams_and_since_and_stamps_whole_lines() {
        let all = LogOptions::default();
        assert_eq!(print(&sample(), &all), "one\nerr\ntwo-two\nthree\n");
        let stderr = LogOptions {
            stdout: false,
            ..LogOptions::default()
        };
        assert_eq!(print(&sample(), &stderr), "err\n");
        // `since` judges a joined line by its first piece (T2 < since ≤ T3).
        let since = LogOptions {
            since: base::time::parse_rfc3339("2024-01-01T00:00:02.6Z"),
            ..LogOptions::default()
        };
        assert_eq!(print(&sample(), &since), "three\n");
        let stamped = LogOptions {
            timestamps: true,
            stderr: false,
            ..LogOptions::default()
        };
        assert_eq!(
            print(&sample(), &stamped),
            "2024-01-01T00:00:01.000000001Z one\n\
             2024-01-01T00:00:02.500000000Z two-two\n\
             2024-01-01T00:00:03.000000000Z three\n"
        );
        assert_eq!(print("junk\n\nT x F y\n", &all), "");
    }

    fn write(path: &Path, text: &str) {
        std::fs::write(path, text).expect("write log");
    }

    #[test]
    fn the_tail_starts_after_the_whole_lines_it_skips() {
        let dir = TempDir::new("cri-tail");
        let path = dir.0.join("0.log");
        write(&path, &sample());
        let text = sample();
        let at = |n: u64| {
            let mut f = File::open(&path).expect("open");
            let len = f.metadata().expect("metadata").len();
            let start = usize::try_from(tail_start(&mut f, n, len).expect("tail")).expect("usize");
            text[start..].to_string()
        };
        assert_eq!(at(0), "");
        assert_eq!(at(1), format!("{T3} stdout F three\n"));
        // The partial pieces belong to the line the F ends.
        assert!(
            at(2).starts_with(&format!("{T2} stdout P tw\n")),
            "{}",
            at(2)
        );
        assert_eq!(at(4), text);
        assert_eq!(at(3), text[text.find('\n').expect("a line") + 1..]);
        assert_eq!(at(99), text);
        // An unfinished last line is not counted, and long files span blocks.
        let mut long = String::new();
        for i in 0..5000 {
            long.push_str(&format!("{T1} stdout F line {i:05} {}\n", "x".repeat(20)));
        }
        long.push_str(&format!("{T1} stdout P unfinished"));
        write(&path, &long);
        let mut f = File::open(&path).expect("open");
        let len = f.metadata().expect("metadata").len();
        let start = usize::try_from(tail_start(&mut f, 3, len).expect("tail")).expect("usize");
        assert!(long[start..].starts_with(&format!("{T1} stdout F line 04997")));
    }

    fn read_all(r: &mut LogReader) -> String {
        let mut s = String::new();
        r.read_to_string(&mut s).expect("read");
        s
    }

    fn never() -> RunningCheck {
        Box::new(|| -> io::Result<bool> { Ok(false) })
    }

    #[test]
    fn a_read_without_follow_prints_the_tail_and_ends() {
        let dir = TempDir::new("cri-read");
        let path = dir.0.join("0.log");
        write(&path, &format!("{}{T3} stderr P unfinished", sample()));
        let opts = LogOptions {
            tail: Some(2),
            ..LogOptions::default()
        };
        let mut r =
            LogReader::open(&path, &opts, Duration::from_millis(50), never()).expect("open");
        assert_eq!(read_all(&mut r), "two-two\nthree\nunfinished");
        assert!(LogReader::open(&dir.0.join("none.log"), &opts, Duration::ZERO, never()).is_err());
    }

    #[test]
    fn a_read_without_follow_ends_where_the_file_ended_when_it_was_opened() {
        let dir = TempDir::new("cri-snapshot");
        let path = dir.0.join("0.log");
        write(&path, &sample());
        let opts = LogOptions {
            tail: Some(1),
            ..LogOptions::default()
        };
        let mut r =
            LogReader::open(&path, &opts, Duration::from_millis(50), never()).expect("open");
        // The container goes on writing while the tail is read.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .expect("append");
        f.write_all(format!("{T3} stdout F four\n").as_bytes())
            .expect("write");
        assert_eq!(read_all(&mut r), "three\n");
    }

    /// Reads until `want` has been printed or 10 s pass; WouldBlock is waited through.
    fn read_until(r: &mut LogReader, got: &mut String, want: &str) {
        let until = Instant::now() + Duration::from_secs(10);
        let mut buf = [0u8; 7];
        while !got.contains(want) {
            assert!(Instant::now() < until, "no {want:?} in {got:?}");
            match r.read(&mut buf) {
                Ok(0) => panic!("the log ended before {want:?}: {got:?}"),
                Ok(n) => got.push_str(std::str::from_utf8(&buf[..n]).expect("ascii")),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("read: {e}"),
            }
        }
    }

    #[test]
    fn a_follower_waits_goes_on_after_a_rotation_and_ends_with_the_container() {
        let dir = TempDir::new("cri-follow");
        let path = dir.0.join("0.log");
        write(&path, &format!("{T1} stdout F first\n"));
        let running = Arc::new(AtomicBool::new(true));
        let r2 = running.clone();
        let opts = LogOptions {
            follow: true,
            tail: Some(1),
            ..LogOptions::default()
        };
        let wake = Duration::from_millis(100);
        let check: RunningCheck =
            Box::new(move || -> io::Result<bool> { Ok(r2.load(Ordering::SeqCst)) });
        let mut r = LogReader::open(&path, &opts, wake, check).expect("open");
        let mut got = String::new();
        read_until(&mut r, &mut got, "first\n");
        // Nothing new: a read answers WouldBlock within about `wake`.
        let t = Instant::now();
        let err = r.read(&mut [0u8; 16]).expect_err("nothing to read");
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        // A write is seen.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .expect("append");
        f.write_all(format!("{T2} stdout F second\n").as_bytes())
            .expect("write");
        read_until(&mut r, &mut got, "second\n");
        // Rotation: renamed, a new empty file at the path, written once more to the
        // old file (the runtime has not swapped files yet), then to the new one.
        std::fs::rename(&path, dir.0.join("0.log.20240101-000000")).expect("rename");
        File::create(&path).expect("the new file");
        let err = r.read(&mut [0u8; 16]).expect_err("nothing to read yet");
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        f.write_all(format!("{T2} stdout F late\n").as_bytes())
            .expect("write");
        read_until(&mut r, &mut got, "late\n");
        write(&path, &format!("{T3} stdout F after\n"));
        read_until(&mut r, &mut got, "after\n");
        assert_eq!(got, "first\nsecond\nlate\nafter\n");
        // The container stops: the rest is read and the log ends.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .expect("append");
        f.write_all(format!("{T3} stdout F last\n").as_bytes())
            .expect("write");
        running.store(false, Ordering::SeqCst);
        read_until(&mut r, &mut got, "last\n");
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            assert!(Instant::now() < until, "the log did not end");
            match r.read(&mut [0u8; 16]) {
                Ok(0) => break,
                Ok(n) => panic!("{n} more bytes"),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("read: {e}"),
            }
        }
    }
}
