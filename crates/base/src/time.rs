//! Time helpers: RFC 3339 stamps for annotations and API times (printed and parsed,
//! through `jiff` as k8s-openapi re-exports it, so there is one calendar in the tree),
//! Go's duration format, the conversion
//! between `SystemTime` and the Kubernetes `Time` type, and saturating conversions
//! from the numbers pods carry (seconds as `i64`/`i32`) to durations and deadlines.
//!
//! Pods may say `terminationGracePeriodSeconds: 9223372036854775807` (upstream accepts
//! any non-negative int64), and `Instant + Duration` panics when it overflows, in our
//! code and inside ureq alike; with `panic = "abort"` that ends the kubelet. So every
//! duration from outside goes through [`secs`] / [`clamp_timeout`] (capped at
//! [`MAX_TIMEOUT`]) and every deadline through [`saturating_deadline`].

use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// A Kubernetes `Time` (serialized as RFC 3339, seconds) from a `SystemTime`, truncated
/// to whole seconds as upstream normalises status times.
pub fn k8s_time(t: SystemTime) -> Time {
    Time(Timestamp::from_second(unix_secs(t)).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// `SystemTime` of a Kubernetes `Time`.
pub fn system_time(t: &Time) -> SystemTime {
    let secs = t.0.as_second();
    if secs >= 0 {
        SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs.unsigned_abs())
    } else {
        SystemTime::UNIX_EPOCH - std::time::Duration::from_secs(secs.unsigned_abs())
    }
}

/// RFC 3339 with nanoseconds, as Go's `time.RFC3339Nano` (used for `config.seen`).
pub fn rfc3339_nano(t: SystemTime) -> String {
    let nanos = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| i128::try_from(d.as_nanos()).unwrap_or(0))
        .unwrap_or(0);
    Timestamp::from_nanosecond(nanos)
        .unwrap_or(Timestamp::UNIX_EPOCH)
        .to_string()
}

/// UTC RFC 3339 with exactly nine fraction digits, as Go's `RFC3339NanoFixed`
/// (`2006-01-02T15:04:05.000000000Z07:00`): the prefix `timestamps=true` gives each
/// container log line, so columns line up.
pub fn rfc3339_nano_fixed(t: SystemTime) -> String {
    let (whole, nanos) = utc_parts(t);
    format!("{}.{nanos:09}Z", whole.strftime("%Y-%m-%dT%H:%M:%S"))
}

/// UTC as `20060102-150405` (Go's layout): the suffix upstream's container log
/// manager gives a rotated log file, which sorts by time as text.
pub fn compact_utc(t: SystemTime) -> String {
    utc_parts(t).0.strftime("%Y%m%d-%H%M%S").to_string()
}

/// The whole seconds of `t` as a timestamp and its nanoseconds (times before the
/// epoch are the epoch).
fn utc_parts(t: SystemTime) -> (Timestamp, u32) {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let secs = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
    let whole = Timestamp::from_second(secs).unwrap_or(Timestamp::MAX);
    (whole, d.subsec_nanos())
}

/// Parses an RFC 3339 timestamp (`2024-05-01T12:34:56.123456789Z`, or with a `+02:00`
/// offset), as Docker and the API write them, into a [`SystemTime`]. None for anything
/// else.
///
/// RFC 3339's grammar is checked here, since jiff's parser takes all of ISO 8601 (it
/// would take `+0200`); and fractions finer than nanoseconds, which Go's parser accepts,
/// are cut to nine digits first, as Go does. jiff does the calendar.
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    // `date "T" hh:mm:ss`: fixed positions before any fraction and the offset.
    if b.len() < 20 || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let offset_len = match b[b.len() - 1] {
        b'Z' | b'z' => 1,
        _ if b.len() >= 25 && matches!(b[b.len() - 6], b'+' | b'-') && b[b.len() - 3] == b':' => 6,
        _ => return None,
    };
    let (head, offset) = s.split_at(s.len() - offset_len);
    let (whole, fraction) = match head.get(19..)? {
        "" => (head, ""),
        f => (&head[..19], f.strip_prefix('.')?),
    };
    if fraction.is_empty() != (head.len() == 19) || !fraction.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let fraction = &fraction[..fraction.len().min(9)];
    let dot = if fraction.is_empty() { "" } else { "." };
    let ts: Timestamp = format!("{whole}{dot}{fraction}{offset}").parse().ok()?;
    let nanos = ts.as_nanosecond();
    let abs = nanos.unsigned_abs();
    let since = Duration::new(
        u64::try_from(abs / 1_000_000_000).ok()?,
        u32::try_from(abs % 1_000_000_000).ok()?,
    );
    if nanos >= 0 {
        SystemTime::UNIX_EPOCH.checked_add(since)
    } else {
        SystemTime::UNIX_EPOCH.checked_sub(since)
    }
}

/// Whole seconds since the Unix epoch (negative before it).
pub fn unix_secs(t: SystemTime) -> i64 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
    }
}

/// An HTTP `Date` header value (RFC 9110 IMF-fixdate), as Go's net/http sends.
pub fn http_date(t: SystemTime) -> String {
    let ts = Timestamp::from_second(unix_secs(t)).unwrap_or(Timestamp::UNIX_EPOCH);
    k8s_openapi::jiff::fmt::rfc2822::DateTimePrinter::new()
        .timestamp_to_rfc9110_string(&ts)
        .unwrap_or_default()
}

/// A duration as Go's `time.Duration.String` prints it (`20s`, `1m0s`, `5m0s`, `1.5s`,
/// `500ms`, `1h0m0s`), for messages users compare with upstream's and for help text.
pub fn go_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0s".into();
    }
    if d < Duration::from_secs(1) {
        let n = d.as_nanos();
        return if n % 1_000_000 == 0 {
            format!("{}ms", n / 1_000_000)
        } else if n % 1_000 == 0 {
            format!("{}\u{b5}s", n / 1_000)
        } else {
            format!("{n}ns")
        };
    }
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut sec = s.to_string();
    if d.subsec_nanos() != 0 {
        let f = format!("{:09}", d.subsec_nanos());
        sec.push('.');
        sec.push_str(f.trim_end_matches('0'));
    }
    if h > 0 {
        format!("{h}h{m}m{sec}s")
    } else if m > 0 {
        format!("{m}m{sec}s")
    } else {
        format!("{sec}s")
    }
}

/// The longest wait the kubelet arms (about 68 years, `i32::MAX` seconds): longer
/// than any node runs, so capping at it changes no behaviour, and small enough that
/// every clock (`Instant`, `SystemTime`, ureq's timers, Docker's `int` seconds
/// multiplied into nanoseconds) represents it without overflow.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(i32::MAX as u64);

/// A duration of `n` seconds from a pod field: negative is zero, huge is
/// [`MAX_TIMEOUT`].
pub fn secs(n: i64) -> Duration {
    clamp_timeout(Duration::from_secs(n.max(0).unsigned_abs()))
}

/// `d`, at most [`MAX_TIMEOUT`]: what every timeout handed to ureq or Docker goes
/// through.
pub fn clamp_timeout(d: Duration) -> Duration {
    d.min(MAX_TIMEOUT)
}

/// `now + d` that never panics: capped at [`MAX_TIMEOUT`] from now (and, should even
/// that not fit the clock, `now` itself, i.e. "already due", the safe side for a wait).
pub fn saturating_deadline(now: Instant, d: Duration) -> Instant {
    now.checked_add(clamp_timeout(d)).unwrap_or(now)
}

/// `t + d` for wall-clock times that never panics (saturating at `t`, see above).
pub fn saturating_system_add(t: SystemTime, d: Duration) -> SystemTime {
    t.checked_add(clamp_timeout(d)).unwrap_or(t)
}

/// A wait for `poll(2)` (rustix's, which takes a `timespec`) of `d` in whole
/// milliseconds, at most `i32::MAX` of them: the same wait as the millisecond `int`
/// every poll call site passed before, so a sub-millisecond remainder still means "do
/// not wait" and a huge one does not overflow.
pub fn poll_timeout(d: Duration) -> rustix::event::Timespec {
    let ms = u64::try_from(d.as_millis()).map_or(i32::MAX as u64, |ms| ms.min(i32::MAX as u64));
    rustix::event::Timespec {
        // At most 2_147_483 seconds and 999_000_000 nanoseconds: both fit.
        tv_sec: (ms / 1000) as rustix::event::Secs,
        tv_nsec: ((ms % 1000) * 1_000_000) as rustix::event::Nsecs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_timeouts_are_whole_milliseconds_capped_at_an_int() {
        let t = poll_timeout(Duration::from_micros(1_500_900));
        assert_eq!((t.tv_sec, t.tv_nsec), (1, 500_000_000));
        let t = poll_timeout(Duration::from_micros(900));
        assert_eq!((t.tv_sec, t.tv_nsec), (0, 0));
        let t = poll_timeout(Duration::MAX);
        assert_eq!((t.tv_sec, t.tv_nsec), (2_147_483, 647_000_000));
    }

    #[test]
    fn fixed_nano_stamps_and_compact_suffixes_are_utc() {
        let t = SystemTime::UNIX_EPOCH + Duration::new(1_475_713_029, 669_794);
        assert_eq!(rfc3339_nano_fixed(t), "2016-10-06T00:17:09.000669794Z");
        assert_eq!(parse_rfc3339(&rfc3339_nano_fixed(t)), Some(t));
        assert_eq!(compact_utc(t), "20161006-001709");
    }

    #[test]
    fn seconds_from_pods_saturate() {
        assert_eq!(secs(-5), Duration::ZERO);
        assert_eq!(secs(30), Duration::from_secs(30));
        assert_eq!(secs(i64::MAX), MAX_TIMEOUT);
        assert_eq!(clamp_timeout(Duration::MAX), MAX_TIMEOUT);
    }

    #[test]
    fn deadlines_never_overflow() {
        let now = Instant::now();
        assert_eq!(
            saturating_deadline(now, Duration::from_secs(1)),
            now + Duration::from_secs(1)
        );
        // Duration::MAX would panic with `+`.
        assert_eq!(saturating_deadline(now, Duration::MAX), now + MAX_TIMEOUT);
        let t = SystemTime::UNIX_EPOCH;
        assert_eq!(saturating_system_add(t, Duration::MAX), t + MAX_TIMEOUT);
    }

    #[test]
    fn k8s_time_truncates_to_seconds() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_500);
        assert_eq!(
            system_time(&k8s_time(t)),
            SystemTime::UNIX_EPOCH + Duration::from_secs(1)
        );
    }

    #[test]
    fn rfc3339_is_utc() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(86_400);
        assert_eq!(rfc3339_nano(t), "1970-01-02T00:00:00Z");
    }

    #[test]
    fn rfc3339_keeps_fractions_before_the_epoch() {
        assert_eq!(
            parse_rfc3339("1969-12-31T23:59:59.5Z"),
            SystemTime::UNIX_EPOCH.checked_sub(Duration::from_millis(500))
        );
    }

    #[test]
    fn durations_print_as_go_prints_them() {
        for (d, want) in [
            (Duration::ZERO, "0s"),
            (Duration::from_secs(10), "10s"),
            (Duration::from_secs(80), "1m20s"),
            (Duration::from_secs(300), "5m0s"),
            (Duration::from_secs(3600), "1h0m0s"),
            (Duration::from_secs(3661), "1h1m1s"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_millis(500), "500ms"),
            (Duration::from_micros(3), "3\u{b5}s"),
            (Duration::from_nanos(7), "7ns"),
        ] {
            assert_eq!(go_duration(d), want);
        }
    }

    #[test]
    fn http_date_is_imf_fixdate() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(http_date(t), "Sun, 06 Nov 1994 08:49:37 GMT");
    }
}
