//! Small pure codecs of Docker's wire format: RFC 3339 timestamps, query-string
//! escaping, the URL-safe base64 of `X-Registry-Auth`, and API version numbers.
//!
//! Each is a few lines, so they are written here rather than pulled in as crates
//! (chrono, percent-encoding, base64): the dependency tree stays small, and every one is
//! unit-tested below.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Parses an RFC 3339 timestamp as Docker writes it (`2024-05-01T12:34:56.123456789Z`,
/// or with a `+02:00` offset) into a [`SystemTime`]. Fractions finer than nanoseconds
/// are cut. Returns None for anything else.
pub(crate) fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let year = digits(&b[0..4])?;
    let month = digits(&b[5..7])?;
    let day = digits(&b[8..10])?;
    let hour = digits(&b[11..13])?;
    let minute = digits(&b[14..16])?;
    let second = digits(&b[17..19])?;
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    // 60 is a leap second; SystemTime has none, so it folds into the next second.
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }

    let mut rest = &b[19..];
    let mut nanos: u32 = 0;
    if let Some(frac) = rest.strip_prefix(b".") {
        let len = frac.iter().take_while(|c| c.is_ascii_digit()).count();
        if len == 0 {
            return None;
        }
        for (i, c) in frac[..len].iter().enumerate() {
            if i < 9 {
                nanos = nanos * 10 + u32::from(c - b'0');
            }
        }
        for _ in len..9 {
            nanos *= 10;
        }
        rest = &frac[len..];
    }

    let offset_secs: i64 = match rest {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let h = digits(&[*h1, *h2])?;
            let m = digits(&[*m1, *m2])?;
            if h > 23 || m > 59 {
                return None;
            }
            let off = i64::from(h * 3600 + m * 60);
            if *sign == b'-' {
                -off
            } else {
                off
            }
        }
        _ => return None,
    };

    let days = days_from_civil(i64::from(year), month, day);
    let secs = days * 86_400 + i64::from(hour * 3600 + minute * 60 + second) - offset_secs;
    let since = Duration::new(secs.unsigned_abs(), 0);
    let whole = if secs >= 0 {
        UNIX_EPOCH.checked_add(since)?
    } else {
        UNIX_EPOCH.checked_sub(since)?
    };
    whole.checked_add(Duration::from_nanos(u64::from(nanos)))
}

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

fn digits(b: &[u8]) -> Option<u32> {
    b.iter().try_fold(0u32, |acc, c| {
        c.is_ascii_digit().then(|| acc * 10 + u32::from(c - b'0'))
    })
}

fn is_leap(year: u32) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Percent-encodes a query value or path segment: everything but RFC 3986's
/// unreserved characters is escaped, so JSON filters and image names survive intact.
pub(crate) fn percent_encode(s: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(s.len());
    for &c in s.as_bytes() {
        if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(c));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(c >> 4)]));
            out.push(char::from(HEX[usize::from(c & 0xf)]));
        }
    }
    out
}

/// URL-safe base64 with padding (RFC 4648 §5), as Docker decodes `X-Registry-Auth`.
pub(crate) fn base64_url(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b0 = chunk[0];
        let b1 = chunk.get(1).copied().unwrap_or(0);
        let b2 = chunk.get(2).copied().unwrap_or(0);
        let n = (u32::from(b0) << 16) | (u32::from(b1) << 8) | u32::from(b2);
        let sextet = |shift: u32| char::from(ALPHABET[((n >> shift) & 0x3f) as usize]);
        out.push(sextet(18));
        out.push(sextet(12));
        out.push(if chunk.len() > 1 { sextet(6) } else { '=' });
        out.push(if chunk.len() > 2 { sextet(0) } else { '=' });
    }
    out
}

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
    fn percent_encode_escapes_json_filters() {
        assert_eq!(
            percent_encode(r#"{"label":["a=b"]}"#),
            "%7B%22label%22%3A%5B%22a%3Db%22%5D%7D"
        );
        assert_eq!(percent_encode("k8s_app-1.x~y"), "k8s_app-1.x~y");
        assert_eq!(percent_encode("127.0.0.1:5000/x"), "127.0.0.1%3A5000%2Fx");
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
            assert_eq!(base64_url(plain.as_bytes()), encoded);
        }
        // The URL-safe alphabet uses - and _ where the standard one has + and /.
        assert_eq!(base64_url(&[0xfb, 0xff]), "-_8=");
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
