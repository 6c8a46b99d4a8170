//! Log set-up: `log` macros printed in the kubelet's klog layout, so lines read like
//! the upstream kubelet's in `journalctl`: `I1130 06:27:48.123456 sync-loop] message`
//! (severity, month-day, UTC time with microseconds, the thread name where klog has
//! the PID — so every line says which loop wrote it).
//!
//! Verbosity: `--v N` maps klog levels onto `log` levels (0–1 info, 2–4 debug, 5+
//! trace; release builds have no trace lines, see Cargo.toml). Without `--v`,
//! `RUST_LOG` is honoured, else info. The verbosity can change
//! while the kubelet runs ([`set_verbosity`], the kubelet port's `PUT
//! /debug/flags/v`): the logger itself lets every level through and `log`'s global
//! maximum does the filtering, so a change takes effect on the next line, at no cost
//! for the lines filtered out. Under a `RUST_LOG` filter the filter stays the ceiling.
//!
//! `--log-file` (klog's): every line also goes to a file, through an in-memory buffer
//! that the `log-flush` loop writes out every `--log-flush-frequency` (5 s), sooner when
//! 256 KiB are waiting, and once more at exit ([`flush`]). A log call only appends to
//! the buffer under a short lock, never waits on the disk; past 8 MiB waiting (a stuck
//! disk) lines are dropped and counted. stderr stays unbuffered. When the file passes
//! `--log-file-max-size` MB (1800, klog's; 0: no limit) it is renamed to `<file>.1`
//! (replacing the previous one) and a new file is opened: klog instead starts writing
//! the same path over, so one older file kept here is the difference.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use crossbeam_channel::{Receiver, Sender};

use base::loops::{lock, Loops, SpawnError};

/// The `log` level filter for a klog verbosity.
pub(crate) fn level_for_verbosity(v: u8) -> log::LevelFilter {
    match v {
        0 | 1 => log::LevelFilter::Info,
        2..=4 => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    }
}

/// Sets the klog verbosity from now on (negative counts as 0, as klog logs nothing
/// more below 0).
pub(crate) fn set_verbosity(v: i64) {
    let level = level_for_verbosity(u8::try_from(v.clamp(0, 255)).unwrap_or(u8::MAX));
    log::set_max_level(level);
}

/// klog's severity letter.
fn severity(l: log::Level) -> char {
    match l {
        log::Level::Error => 'E',
        log::Level::Warn => 'W',
        log::Level::Info => 'I',
        log::Level::Debug | log::Level::Trace => 'D',
    }
}

/// `MMDD HH:MM:SS.uuuuuu` in UTC.
pub fn klog_time(t: SystemTime) -> String {
    use k8s_openapi::jiff::{tz::Offset, Timestamp};
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let secs = i64::try_from(d.as_secs()).unwrap_or(0);
    let ts = Timestamp::from_second(secs).unwrap_or(Timestamp::UNIX_EPOCH);
    let dt = Offset::UTC.to_datetime(ts);
    format!(
        "{:02}{:02} {:02}:{:02}:{:02}.{:06}",
        dt.month(),
        dt.day(),
        dt.hour(),
        dt.minute(),
        dt.second(),
        d.subsec_micros()
    )
}

/// Installs the logger. `verbosity` from `--v`, if given.
pub fn init(verbosity: Option<u8>) {
    let mut b = env_logger::Builder::new();
    // Everything passes the logger; `log::max_level` (set below) filters.
    b.filter_level(log::LevelFilter::Trace);
    let rust_log = std::env::var("RUST_LOG")
        .ok()
        .filter(|_| verbosity.is_none());
    if let Some(spec) = &rust_log {
        b.parse_filters(spec);
    }
    b.format(|buf, record| {
        let thread = std::thread::current();
        let line = format!(
            "{}{} {}] {}\n",
            severity(record.level()),
            klog_time(SystemTime::now()),
            thread.name().unwrap_or("main"),
            record.args()
        );
        if let Some(f) = LOG_FILE.get() {
            f.append(line.as_bytes());
        }
        buf.write_all(line.as_bytes())
    });
    // A second init (tests) is harmless.
    let _ = b.try_init();
    match (verbosity, rust_log) {
        (Some(v), _) => set_verbosity(i64::from(v)),
        // RUST_LOG alone decides (try_init set the maximum from its filter).
        (None, Some(_)) => {}
        (None, None) => set_verbosity(0),
    }
}

/// Buffered lines past which the flush loop is woken early.
const FLUSH_SOON: usize = 256 << 10;
/// Buffered lines past which new ones are dropped (the disk is not keeping up).
const PENDING_MAX: usize = 8 << 20;
/// The `log-flush` loop's name.
pub(crate) const FLUSH_THREAD: &str = "log-flush";

/// The `--log-file` target.
static LOG_FILE: OnceLock<LogFile> = OnceLock::new();

/// A log file written through a buffer.
#[derive(Debug)]
pub struct LogFile {
    path: PathBuf,
    /// Rotate past this many bytes; 0: never.
    max_bytes: u64,
    /// Lines not yet written (the only lock a log call takes).
    pending: Mutex<Vec<u8>>,
    /// The open file and its size: the writer's token. A flush (the loop, or exit)
    /// holds it across its own write and rename; nothing ever waits for it (a log call
    /// never takes it, and a second flush finding it held leaves its lines pending for
    /// the next one), so a hung write holds back no other thread.
    out: Mutex<Option<(File, u64)>>,
    /// Lines dropped because the buffer was full.
    dropped: AtomicU64,
    wake: (Sender<()>, Receiver<()>),
}

impl LogFile {
    /// A log file at `path`, rotated past `max_mb` MB (0: never), opened for append.
    pub fn open(path: &Path, max_mb: u64) -> std::io::Result<LogFile> {
        let f = open_append(path)?;
        let size = f.metadata().map(|m| m.len()).unwrap_or(0);
        Ok(LogFile {
            path: path.to_path_buf(),
            max_bytes: max_mb.saturating_mul(1024 * 1024),
            pending: Mutex::new(Vec::new()),
            out: Mutex::new(Some((f, size))),
            dropped: AtomicU64::new(0),
            wake: crossbeam_channel::bounded(1),
        })
    }

    /// Buffers one line.
    pub fn append(&self, line: &[u8]) {
        let len = {
            let mut p = lock(&self.pending);
            if p.len() + line.len() > PENDING_MAX {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                return;
            }
            p.extend_from_slice(line);
            p.len()
        };
        if len >= FLUSH_SOON {
            let _ = self.wake.0.try_send(());
        }
    }

    /// Writes out what is buffered, rotating first when the file is full. A flush
    /// already under way (on another thread) is not waited for: this one returns and
    /// the lines stay buffered for the next.
    pub fn flush(&self) -> std::io::Result<()> {
        let mut out = match self.out.try_lock() {
            Ok(out) => out,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return Ok(()),
        };
        let data = std::mem::take(&mut *lock(&self.pending));
        let dropped = self.dropped.swap(0, Ordering::Relaxed);
        if data.is_empty() && dropped == 0 {
            return Ok(());
        }
        if out.is_none() {
            *out = Some((open_append(&self.path)?, 0));
        }
        if let Some((_, size)) = out.as_ref() {
            if self.max_bytes > 0 && *size > 0 && size + data.len() as u64 > self.max_bytes {
                *out = None;
                let mut old = self.path.clone().into_os_string();
                old.push(".1");
                std::fs::rename(&self.path, &old)?;
                *out = Some((open_append(&self.path)?, 0));
            }
        }
        let Some((f, size)) = out.as_mut() else {
            return Ok(());
        };
        if dropped > 0 {
            let note = format!(
                "W{} {FLUSH_THREAD}] {dropped} log lines dropped: the log file was not \
                 keeping up\n",
                klog_time(SystemTime::now())
            );
            f.write_all(note.as_bytes())?;
            *size += note.len() as u64;
        }
        f.write_all(&data)?;
        *size += data.len() as u64;
        Ok(())
    }
}

fn open_append(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// Sends every later line also to `path` (`--log-file`), rotated past `max_mb` MB.
/// Call once, after [`init`]; a second call is refused.
pub fn set_log_file(path: &Path, max_mb: u64) -> std::io::Result<()> {
    let f = LogFile::open(path, max_mb)?;
    LOG_FILE
        .set(f)
        .map_err(|_| std::io::Error::other("the log file is already set"))
}

/// Starts the `log-flush` loop (with a `--log-file`): writes the buffer out every
/// `period`, or sooner when it fills, and once more at shutdown.
pub(crate) fn start_flush(loops: &Loops, period: Duration) -> Result<(), SpawnError> {
    let Some(f) = LOG_FILE.get() else {
        return Ok(());
    };
    loops.spawn(FLUSH_THREAD, move |stop, handle| loop {
        let stopped = crossbeam_channel::select! {
            recv(stop.receiver()) -> _ => true,
            recv(f.wake.1) -> _ => false,
            default(period) => false,
        };
        let began = handle.begin_tick();
        let err = f.flush().err().map(|e| {
            let msg = format!("writing {}: {e}", f.path.display());
            eprintln!("rkubelet: {msg}");
            msg
        });
        handle.end_tick(began, err);
        if stopped {
            return;
        }
    })
}

/// Writes out the log file's buffer now (at exit).
pub fn flush() {
    if let Some(f) = LOG_FILE.get() {
        if let Err(e) = f.flush() {
            eprintln!("rkubelet: writing {}: {e}", f.path.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn klog_time_layout() {
        // 2026-11-30T06:27:48.123456Z
        let t = SystemTime::UNIX_EPOCH + Duration::from_micros(1_796_020_068_123_456);
        assert_eq!(klog_time(t), "1130 06:27:48.123456");
    }

    #[test]
    fn log_file_is_buffered_until_flushed_and_rotated_when_full() {
        let dir = std::env::temp_dir().join(format!("rkubelet-logfile-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
        let path = dir.join("kubelet.log");
        let f = LogFile::open(&path, 1).expect("open");
        f.append(b"first\n");
        assert_eq!(std::fs::read(&path).expect("read"), b"", "buffered");
        f.flush().expect("flush");
        assert_eq!(std::fs::read(&path).expect("read"), b"first\n");
        // Past 1 MB: the full file becomes kubelet.log.1, a new one is started.
        let big = vec![b'x'; 700 << 10];
        f.append(&big);
        f.flush().expect("flush");
        f.append(&big);
        f.flush().expect("flush");
        let old = std::fs::read(dir.join("kubelet.log.1")).expect("rotated");
        assert_eq!(old.len(), 6 + (700 << 10));
        assert_eq!(std::fs::read(&path).expect("read").len(), 700 << 10);
        // A full buffer drops lines and says so at the next flush.
        let chunk = vec![b'y'; 1 << 20];
        for _ in 0..9 {
            f.append(&chunk);
        }
        f.flush().expect("flush");
        let text = String::from_utf8_lossy(&std::fs::read(&path).expect("read")).into_owned();
        assert!(text.contains("1 log lines dropped"), "{}", &text[..80]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn verbosity_levels() {
        assert_eq!(level_for_verbosity(0), log::LevelFilter::Info);
        assert_eq!(level_for_verbosity(4), log::LevelFilter::Debug);
        assert_eq!(level_for_verbosity(10), log::LevelFilter::Trace);
    }
}
