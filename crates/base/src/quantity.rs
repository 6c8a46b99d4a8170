//! Kubernetes resource quantities (`100m`, `64Mi`, `1.5`, `2e3`), parsed into
//! milli-units. Used for the QoS class and for mapping resources onto cgroup knobs.

/// Parses a quantity into milli-units (so `100m` CPU is 100, `1` is 1000, `1Ki` is
/// 1_024_000). None if it does not parse.
pub fn parse_milli(q: &str) -> Option<i128> {
    let q = q.trim();
    if q.is_empty() {
        return None;
    }
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    // Scale as a numerator/denominator pair so that `m` and `n` stay exact.
    let (mul, div): (i128, i128) = match suffix {
        "" => (1, 1),
        "n" => (1, 1_000_000_000),
        "u" => (1, 1_000_000),
        "m" => (1, 1_000),
        "k" => (1_000, 1),
        "M" => (1_000_000, 1),
        "G" => (1_000_000_000, 1),
        "T" => (1_000_000_000_000, 1),
        "P" => (1_000_000_000_000_000, 1),
        "E" => (1_000_000_000_000_000_000, 1),
        "Ki" => (1 << 10, 1),
        "Mi" => (1 << 20, 1),
        "Gi" => (1 << 30, 1),
        "Ti" => (1 << 40, 1),
        "Pi" => (1 << 50, 1),
        "Ei" => (1 << 60, 1),
        s if s.starts_with(['e', 'E']) => {
            let exp: u32 = s[1..].parse().ok()?;
            (10i128.checked_pow(exp)?, 1)
        }
        _ => return None,
    };
    let (int_part, frac_part) = match num.split_once('.') {
        Some((i, f)) => (i, f),
        None => (num, ""),
    };
    let negative = int_part.starts_with('-');
    let int_digits = int_part.trim_start_matches(['+', '-']);
    if int_digits.is_empty() && frac_part.is_empty() {
        return None;
    }
    let int: i128 = if int_digits.is_empty() {
        0
    } else {
        int_digits.parse().ok()?
    };
    // Value in milli-units: (int + frac) * mul * 1000 / div, rounded up as upstream does
    // for sub-milli precision.
    let frac_len = u32::try_from(frac_part.len()).ok()?;
    let frac: i128 = if frac_part.is_empty() {
        0
    } else {
        frac_part.parse().ok()?
    };
    let scale = 10i128.checked_pow(frac_len)?;
    let numer = (int.checked_mul(scale)?.checked_add(frac)?)
        .checked_mul(mul)?
        .checked_mul(1000)?;
    let denom = scale.checked_mul(div)?;
    let v = numer.checked_add(denom - 1)? / denom;
    Some(if negative { -v } else { v })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_usual_forms() {
        for (q, milli) in [
            ("1", 1000),
            ("100m", 100),
            ("0.5", 500),
            ("1.5", 1500),
            ("64Mi", 64 * 1024 * 1024 * 1000),
            ("1Ki", 1_024_000),
            ("2k", 2_000_000),
            ("1G", 1_000_000_000_000),
            ("2e3", 2_000_000),
            ("1n", 1),
        ] {
            assert_eq!(parse_milli(q), Some(milli), "{q}");
        }
    }

    #[test]
    fn rejects_garbage() {
        for q in ["", "abc", "1x", "Mi", "."] {
            assert_eq!(parse_milli(q), None, "{q}");
        }
    }
}
