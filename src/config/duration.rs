//! Durations in Go notation (`20s`, `1m30s`, `500ms`, `1.5h`), as the upstream kubelet's
//! flags and `KubeletConfiguration` fields spell them.
//!
//! Mirrors Go's `time.ParseDuration`: a sequence of decimal numbers, each with an
//! optional fraction and a required unit (`ns`, `us`/`µs`/`μs`, `ms`, `s`, `m`, `h`);
//! a bare `0` is allowed. Unlike Go, negative durations are refused: every duration the
//! kubelet reads is a period or a timeout.

use std::time::Duration;

/// Why a string is not a duration.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DurationError {
    /// The string is empty.
    #[error("empty")]
    Empty,
    /// A number has no unit after it (`10`).
    #[error("missing unit (use e.g. 20s, 1m30s, 500ms)")]
    MissingUnit,
    /// A unit is not one of Go's.
    #[error("unknown unit {0:?} (use ns, us, ms, s, m or h)")]
    UnknownUnit(String),
    /// Something other than a number stands where a number should.
    #[error("expected a number")]
    ExpectedNumber,
    /// The duration is below zero.
    #[error("must not be negative")]
    Negative,
    /// The duration exceeds Go's limit (about 292 years).
    #[error("too large")]
    Overflow,
}

/// Nanoseconds per unit, by Go's unit names.
fn unit_nanos(unit: &str) -> Option<u128> {
    Some(match unit {
        "ns" => 1,
        "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    })
}

/// Go caps durations at `int64` nanoseconds; a value past that is a typo, not a period.
const MAX_NANOS: u128 = i64::MAX as u128;

/// Parses a Go duration string: `20s`, `1m30s`, `500ms`, `1h`, `1.5s`, `0`.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    let (negative, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        Some(_) => (false, s),
        None => return Err(DurationError::Empty),
    };
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(DurationError::ExpectedNumber);
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        // The integer part.
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let int_digits = &rest[..int_len];
        rest = &rest[int_len..];
        // The fraction, if any.
        let mut frac_digits = "";
        if let Some(after_dot) = rest.strip_prefix('.') {
            let frac_len = after_dot.bytes().take_while(u8::is_ascii_digit).count();
            frac_digits = &after_dot[..frac_len];
            rest = &after_dot[frac_len..];
        }
        if int_digits.is_empty() && frac_digits.is_empty() {
            return Err(DurationError::ExpectedNumber);
        }
        // The unit runs to the next digit or dot.
        let unit_len = rest
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit() || *c == '.')
            .map_or(rest.len(), |(i, _)| i);
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        if unit.is_empty() {
            return Err(DurationError::MissingUnit);
        }
        let per_unit = unit_nanos(unit).ok_or_else(|| DurationError::UnknownUnit(unit.into()))?;

        let mut int: u128 = 0;
        for d in int_digits.bytes() {
            int = int
                .checked_mul(10)
                .and_then(|v| v.checked_add(u128::from(d - b'0')))
                .filter(|v| *v <= MAX_NANOS)
                .ok_or(DurationError::Overflow)?;
        }
        // Digits past nanosecond precision of an hour cannot matter; Go drops them too.
        let mut frac: u128 = 0;
        let mut scale: u128 = 1;
        for d in frac_digits.bytes().take(20) {
            frac = frac * 10 + u128::from(d - b'0');
            scale *= 10;
        }
        let part = int
            .checked_mul(per_unit)
            .ok_or(DurationError::Overflow)?
            .checked_add(frac * per_unit / scale)
            .ok_or(DurationError::Overflow)?;
        total = total.checked_add(part).ok_or(DurationError::Overflow)?;
        if total > MAX_NANOS {
            return Err(DurationError::Overflow);
        }
    }
    if negative && total != 0 {
        return Err(DurationError::Negative);
    }
    let secs = u64::try_from(total / 1_000_000_000).map_err(|_| DurationError::Overflow)?;
    // The remainder is below 10^9, so it fits a u32.
    let nanos = (total % 1_000_000_000) as u32;
    Ok(Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn parses_go_durations() {
        let cases: &[(&str, Duration)] = &[
            ("0", Duration::ZERO),
            ("+0", Duration::ZERO),
            ("-0", Duration::ZERO),
            ("0s", Duration::ZERO),
            ("20s", Duration::from_secs(20)),
            ("1m30s", Duration::from_secs(90)),
            ("500ms", Duration::from_millis(500)),
            ("1h", Duration::from_secs(3600)),
            ("1.5s", Duration::from_millis(1500)),
            (".5s", Duration::from_millis(500)),
            ("1.s", Duration::from_secs(1)),
            ("2h45m", Duration::from_secs(2 * 3600 + 45 * 60)),
            (
                "1h1m1s1ms1us1ns",
                Duration::new(3661, (MS + 1_000 + 1) as u32),
            ),
            ("3\u{b5}s", Duration::from_micros(3)),
            ("3\u{3bc}s", Duration::from_micros(3)),
            ("7ns", Duration::from_nanos(7)),
            ("0.000000001s", Duration::from_nanos(1)),
            ("1.0000000001s", Duration::from_secs(1)),
            ("100ms", Duration::from_millis(100)),
            ("2562047h", Duration::from_secs(2_562_047 * 3600)),
        ];
        for (input, want) in cases {
            assert_eq!(parse_duration(input), Ok(*want), "input {input:?}");
        }
    }

    #[test]
    fn refuses_what_go_refuses_and_negatives() {
        let cases: &[(&str, DurationError)] = &[
            ("", DurationError::Empty),
            ("-", DurationError::ExpectedNumber),
            ("s", DurationError::ExpectedNumber),
            (".s", DurationError::ExpectedNumber),
            ("10", DurationError::MissingUnit),
            ("1m30", DurationError::MissingUnit),
            ("1x", DurationError::UnknownUnit("x".into())),
            ("1 s", DurationError::UnknownUnit(" s".into())),
            ("1sec", DurationError::UnknownUnit("sec".into())),
            ("1S", DurationError::UnknownUnit("S".into())),
            ("abc", DurationError::ExpectedNumber),
            ("-5s", DurationError::Negative),
            ("2562048h", DurationError::Overflow),
            ("99999999999999999999999s", DurationError::Overflow),
        ];
        for (input, want) in cases {
            assert_eq!(parse_duration(input).as_ref(), Err(want), "input {input:?}");
        }
    }

    #[test]
    fn go_printed_durations_parse_back() {
        let cases: &[(Duration, &str)] = &[
            (Duration::ZERO, "0s"),
            (Duration::from_secs(20), "20s"),
            (Duration::from_secs(60), "1m0s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(3600), "1h0m0s"),
            (Duration::from_millis(500), "500ms"),
            (Duration::from_millis(1500), "1.5s"),
        ];
        for (d, want) in cases {
            assert_eq!(base::time::go_duration(*d), *want);
            assert_eq!(parse_duration(want), Ok(*d), "round trip of {want}");
        }
    }
}
