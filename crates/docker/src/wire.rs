//! Small pure codecs of Docker's wire format: its timestamps (Go's zero time means
//! "never"), epoch seconds and nanoseconds, the base64 flavour of `X-Registry-Auth`, and
//! API version numbers. The codecs themselves are crates (`jiff` through
//! [`base::time::parse_rfc3339`], `base64`); what is Docker's is which one, and the
//! special values.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub(crate) use base::time::parse_rfc3339;

/// A Docker timestamp, with Docker's "never" (`0001-01-01T00:00:00Z`, Go's zero time) and
/// the empty string mapped to None.
pub(crate) fn docker_time(s: &str) -> Option<SystemTime> {
    if s.is_empty() || s.starts_with("0001-01-01T00:00:00") {
        return None;
    }
    parse_rfc3339(s)
}

/// Seconds since the epoch (Docker's `Created` in lists) as a [`SystemTime`].
pub(crate) fn unix_secs(secs: i64) -> SystemTime {
    let d = Duration::from_secs(secs.unsigned_abs());
    if secs >= 0 {
        UNIX_EPOCH.checked_add(d).unwrap_or(UNIX_EPOCH)
    } else {
        UNIX_EPOCH.checked_sub(d).unwrap_or(UNIX_EPOCH)
    }
}

/// Nanoseconds since the epoch (`timeNano` in events) as a [`SystemTime`].
pub(crate) fn unix_nanos(nanos: i64) -> SystemTime {
    let d = Duration::from_nanos(nanos.unsigned_abs());
    if nanos >= 0 {
        UNIX_EPOCH.checked_add(d).unwrap_or(UNIX_EPOCH)
    } else {
        UNIX_EPOCH.checked_sub(d).unwrap_or(UNIX_EPOCH)
    }
}

/// `X-Registry-Auth` is URL-safe base64 with padding (RFC 4648 §5): Docker decodes it
/// with Go's `base64.URLEncoding`.
pub(crate) use base64::engine::general_purpose::URL_SAFE as REGISTRY_AUTH_BASE64;

/// A Docker API version, `major.minor` (e.g. `1.41`), ordered numerically so that 1.9 <
/// 1.10.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct ApiVersion(pub u32, pub u32);

impl ApiVersion {
    /// Parses `1.41`; None for anything else.
    pub(crate) fn parse(s: &str) -> Option<ApiVersion> {
        let (major, minor) = s.trim().split_once('.')?;
        Some(ApiVersion(major.parse().ok()?, minor.parse().ok()?))
    }
}

impl std::fmt::Display for ApiVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.0, self.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    fn at(secs: u64, nanos: u32) -> SystemTime {
        UNIX_EPOCH + Duration::new(secs, nanos)
    }

    #[test]
    fn rfc3339_parses_docker_nanosecond_utc_times() {
        assert_eq!(
            parse_rfc3339("2024-05-01T12:34:56.123456789Z"),
            Some(at(1_714_566_896, 123_456_789))
        );
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(UNIX_EPOCH));
        assert_eq!(
            parse_rfc3339("2000-02-29T00:00:00Z"),
            Some(at(951_782_400, 0))
        );
    }

    #[test]
    fn rfc3339_pads_short_fractions_and_cuts_long_ones() {
        assert_eq!(
            parse_rfc3339("1970-01-01T00:00:01.5Z"),
            Some(at(1, 500_000_000))
        );
        assert_eq!(
            parse_rfc3339("1970-01-01T00:00:01.1234567891234Z"),
            Some(at(1, 123_456_789))
        );
    }

    #[test]
    fn rfc3339_applies_offsets() {
        // BuildTime in /version is written with an offset.
        assert_eq!(
            parse_rfc3339("2026-05-07T21:09:36.000000000+00:00"),
            parse_rfc3339("2026-05-07T21:09:36Z")
        );
        assert_eq!(parse_rfc3339("1970-01-01T02:00:00+02:00"), Some(UNIX_EPOCH));
        assert_eq!(parse_rfc3339("1969-12-31T23:00:00-01:00"), Some(UNIX_EPOCH));
    }

    #[test]
    fn rfc3339_handles_times_before_the_epoch() {
        assert_eq!(
            parse_rfc3339("1969-12-31T23:59:59Z"),
            UNIX_EPOCH.checked_sub(Duration::from_secs(1))
        );
    }

    #[test]
    fn rfc3339_rejects_malformed_input() {
        for bad in [
            "",
            "2024-05-01",
            "2024-05-01T12:34:56",
            "2024-13-01T12:34:56Z",
            "2023-02-29T12:34:56Z",
            "2024-05-01T24:00:00Z",
            "2024-05-01T12:34:56.Z",
            "2024-05-01T12:34:56+0200",
            "2024-05-01T12:34:56Zjunk",
            "20x4-05-01T12:34:56Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn docker_zero_time_means_never() {
        assert_eq!(docker_time("0001-01-01T00:00:00Z"), None);
        assert_eq!(docker_time(""), None);
        assert_eq!(docker_time("1970-01-01T00:00:00Z"), Some(UNIX_EPOCH));
    }

    #[test]
    fn base64_url_matches_rfc4648_vectors() {
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(REGISTRY_AUTH_BASE64.encode(plain.as_bytes()), encoded);
        }
        // The URL-safe alphabet uses - and _ where the standard one has + and /.
        assert_eq!(REGISTRY_AUTH_BASE64.encode([0xfb, 0xff]), "-_8=");
    }

    #[test]
    fn api_versions_compare_numerically() {
        assert!(ApiVersion::parse("1.9") < ApiVersion::parse("1.10"));
        assert_eq!(ApiVersion::parse("1.41"), Some(ApiVersion(1, 41)));
        assert_eq!(ApiVersion::parse("1"), None);
        assert_eq!(ApiVersion::parse("x.y"), None);
        assert_eq!(ApiVersion(1, 41).to_string(), "1.41");
    }
}
