//! Log set-up: `log` macros printed in the kubelet's klog layout, so lines read like
//! the upstream kubelet's in `journalctl`: `I1130 06:27:48.123456 sync-loop] message`
//! (severity, month-day, UTC time with microseconds, the thread name where klog has
//! the PID — so every line says which loop wrote it).
//!
//! Verbosity: `--v N` maps klog levels onto `log` levels (0–1 info, 2–4 debug, 5+
//! trace). Without `--v`, `RUST_LOG` is honoured, else info. The verbosity can change
//! while the kubelet runs ([`set_verbosity`], the kubelet port's `PUT
//! /debug/flags/v`): the logger itself lets every level through and `log`'s global
//! maximum does the filtering, so a change takes effect on the next line, at no cost
//! for the lines filtered out. Under a `RUST_LOG` filter the filter stays the ceiling.

use std::io::Write;
use std::time::SystemTime;

/// The `log` level filter for a klog verbosity.
pub fn level_for_verbosity(v: u8) -> log::LevelFilter {
    match v {
        0 | 1 => log::LevelFilter::Info,
        2..=4 => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    }
}

/// Sets the klog verbosity from now on (negative counts as 0, as klog logs nothing
/// more below 0).
pub fn set_verbosity(v: i64) {
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
        writeln!(
            buf,
            "{}{} {}] {}",
            severity(record.level()),
            klog_time(SystemTime::now()),
            thread.name().unwrap_or("main"),
            record.args()
        )
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

/// The panic hook's line: the thread's name first, so the loop that died is known
/// (every thread is named by the loop helper; "<unnamed>" would be a bug).
pub fn panic_line(thread: Option<&str>, info: &dyn std::fmt::Display) -> String {
    format!("thread {} panicked: {info}", thread.unwrap_or("<unnamed>"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn panic_line_names_the_thread_first() {
        let line = std::thread::Builder::new()
            .name("pod-kill-0".into())
            .spawn(|| panic_line(std::thread::current().name(), &"boom at src/x.rs:1:1"))
            .expect("spawn")
            .join()
            .expect("join");
        assert_eq!(line, "thread pod-kill-0 panicked: boom at src/x.rs:1:1");
        assert_eq!(panic_line(None, &"x"), "thread <unnamed> panicked: x");
    }

    #[test]
    fn klog_time_layout() {
        // 2026-11-30T06:27:48.123456Z
        let t = SystemTime::UNIX_EPOCH + Duration::from_micros(1_796_020_068_123_456);
        assert_eq!(klog_time(t), "1130 06:27:48.123456");
    }

    #[test]
    fn verbosity_levels() {
        assert_eq!(level_for_verbosity(0), log::LevelFilter::Info);
        assert_eq!(level_for_verbosity(4), log::LevelFilter::Debug);
        assert_eq!(level_for_verbosity(10), log::LevelFilter::Trace);
    }
}
