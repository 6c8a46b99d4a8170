//! Wall-clock helpers: RFC 3339 stamps for annotations and API times, and the
//! conversion between `SystemTime` and the Kubernetes `Time` type.

use std::time::SystemTime;

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
    fn http_date_is_imf_fixdate() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(http_date(t), "Sun, 06 Nov 1994 08:49:37 GMT");
    }
}
