//! Log set-up: `log` macros printed in the kubelet's klog layout, so lines read like
//! the upstream kubelet's in `journalctl`: `I1130 06:27:48.123456 sync-loop] message`
//! (severity, month-day, UTC time with microseconds, the thread name where klog has
//! the PID — so every line says which loop wrote it).
//!
//! Verbosity: `--v N` maps klog levels onto `log` levels (0–1 info, 2–4 debug, 5+
//! trace). Without `--v`, `RUST_LOG` is honoured, else info.

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
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (_, month, day) = civil_from_days(i64::try_from(secs / 86_400).unwrap_or(0));
    let rem = secs % 86_400;
    format!(
        "{month:02}{day:02} {:02}:{:02}:{:02}.{:06}",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60,
        d.subsec_micros()
    )
}

/// Days since 1970-01-01 to (year, month, day), Howard Hinnant's algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let month = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Installs the logger. `verbosity` from `--v`, if given.
pub fn init(verbosity: Option<u8>) {
    let mut b = env_logger::Builder::new();
    match verbosity {
        Some(v) => {
            b.filter_level(level_for_verbosity(v));
        }
        None => {
            b.filter_level(log::LevelFilter::Info);
            if let Ok(spec) = std::env::var("RUST_LOG") {
                b.parse_filters(&spec);
            }
        }
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
