//! The x509 client-certificate authenticator (upstream's `x509.NewDynamic` with
//! `CommonNameUserConversion`): what a request's certificate is worth
//! ([`ClientCert`], which the transport makes by verifying the chain against
//! `--client-ca-file` in [`crate::client_cert`]), and the user of a verified
//! leaf: its subject's CN, with the O values as groups. Only the subject's names are
//! read here, from the DER (and written out for logs, [`subject_text`]); and, for the
//! client certificate manager ([`crate::certificate`]), a certificate's validity window
//! ([`validity`]).

use std::time::{Duration, SystemTime};

/// Who made a request (upstream's `user.Info`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct User {
    /// The user name.
    pub name: String,
    /// A UID, when the authenticator gave one (a TokenReview may).
    pub uid: String,
    /// Its groups.
    pub groups: Vec<String>,
    /// Extra attributes a TokenReview may give (passed on to the SubjectAccessReview).
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
}

/// What a request's TLS client certificate is worth: the authenticator's input, made
/// by the transport ([`crate::client_cert::ClientCa::verify`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ClientCert {
    /// None was presented (plain TCP, no client CA, or a client that sent none).
    #[default]
    Absent,
    /// The chain (DER, leaf first), verified against the client CA for this request.
    Verified(Vec<Vec<u8>>),
    /// A chain that did not verify: a failed credential.
    Unverified {
        /// The leaf's subject (`CN=…, O=…`), for the log.
        subject: String,
        /// Why it did not verify.
        reason: String,
    },
}

/// The user of a verified leaf certificate (DER): CN, and O as groups. A certificate
/// without a CN authenticates no one (upstream: "not ok", no error).
pub fn user_of(der: &[u8]) -> Option<User> {
    let subject = subject(der)?;
    let name = subject
        .iter()
        .find(|(oid, _)| *oid == OID_COMMON_NAME)
        .map(|(_, v)| v.clone())
        .filter(|n| !n.is_empty())?;
    let groups: Vec<String> = subject
        .iter()
        .filter(|(oid, _)| *oid == OID_ORGANIZATION)
        .map(|(_, v)| v.clone())
        .collect();
    Some(User {
        name,
        groups,
        ..User::default()
    })
}

/// A DER certificate's subject as text, for logs: `CN=alice, O=ops`, in the
/// certificate's order; attributes other than CN, O, OU, C, ST and L by their dotted
/// OID. `None`: not a certificate.
pub(crate) fn subject_text(der: &[u8]) -> Option<String> {
    let parts: Vec<String> = subject(der)?
        .into_iter()
        .map(|(oid, value)| {
            let name = match oid {
                OID_COMMON_NAME => "CN".to_string(),
                OID_ORGANIZATION => "O".to_string(),
                [0x55, 0x04, 0x0b] => "OU".to_string(),
                [0x55, 0x04, 0x06] => "C".to_string(),
                [0x55, 0x04, 0x08] => "ST".to_string(),
                [0x55, 0x04, 0x07] => "L".to_string(),
                _ => dotted_oid(oid),
            };
            format!("{name}={value}")
        })
        .collect();
    Some(parts.join(", "))
}

/// An OID's DER content bytes as `1.2.840…`.
fn dotted_oid(oid: &[u8]) -> String {
    let mut arcs: Vec<u64> = Vec::new();
    let mut arc = 0u64;
    for &b in oid {
        arc = arc.saturating_mul(128).saturating_add(u64::from(b & 0x7f));
        if b & 0x80 == 0 {
            if arcs.is_empty() {
                let first = arc.min(80) / 40;
                arcs.push(first);
                arcs.push(arc - first * 40);
            } else {
                arcs.push(arc);
            }
            arc = 0;
        }
    }
    let text: Vec<String> = arcs.iter().map(u64::to_string).collect();
    text.join(".")
}

/// `2.5.4.3`, id-at-commonName, as DER content bytes.
const OID_COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
/// `2.5.4.10`, id-at-organizationName.
const OID_ORGANIZATION: &[u8] = &[0x55, 0x04, 0x0a];

/// One DER element: (tag, content, what follows). Single-byte tags only (all the
/// certificate fields walked here have one); lengths up to 4 bytes.
fn tlv(buf: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = buf.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

const SEQUENCE: u8 = 0x30;

/// The fields of a DER certificate's `tbsCertificate` from its signature algorithm on
/// (issuer, validity, subject, …): the version and serial skipped.
fn tbs_after_serial(der: &[u8]) -> Option<&[u8]> {
    let (SEQUENCE, cert, _) = tlv(der)? else {
        return None;
    };
    let (SEQUENCE, tbs, _) = tlv(cert)? else {
        return None;
    };
    // [0] version (optional), serial, signature algorithm, issuer, validity, subject.
    let (tag, _, mut rest) = tlv(tbs)?;
    if tag == 0xa0 {
        rest = tlv(rest)?.2; // the serial
    }
    Some(rest)
}

/// The validity window of a DER certificate: (notBefore, notAfter). Only read, not
/// verified: the caller holds a certificate it trusts for other reasons (its own, just
/// issued by the API server).
pub fn validity(der: &[u8]) -> Option<(SystemTime, SystemTime)> {
    let mut rest = tbs_after_serial(der)?;
    for _ in 0..2 {
        rest = tlv(rest)?.2; // signature algorithm, issuer
    }
    let (SEQUENCE, window, _) = tlv(rest)? else {
        return None;
    };
    let (t1, v1, after) = tlv(window)?;
    let (t2, v2, _) = tlv(after)?;
    Some((asn1_time(t1, v1)?, asn1_time(t2, v2)?))
}

/// The `subjectPublicKeyInfo` of a DER certificate, the whole element (what
/// `rcgen::KeyPair::public_key_der` gives for its key): whether a certificate is for a
/// key.
pub fn subject_public_key_info(der: &[u8]) -> Option<&[u8]> {
    let mut rest = tbs_after_serial(der)?;
    for _ in 0..4 {
        rest = tlv(rest)?.2; // signature algorithm, issuer, validity, subject
    }
    let (SEQUENCE, _, after) = tlv(rest)? else {
        return None;
    };
    Some(&rest[..rest.len() - after.len()])
}

/// A UTCTime (`YYMMDDHHMMSSZ`, tag 0x17; years 50-99 are 19xx, as RFC 5280 says) or
/// GeneralizedTime (`YYYYMMDDHHMMSSZ`, tag 0x18) as a time.
fn asn1_time(tag: u8, value: &[u8]) -> Option<SystemTime> {
    let text = std::str::from_utf8(value).ok()?;
    let digits = text.strip_suffix('Z')?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (year, rest) = match (tag, digits.len()) {
        (0x17, 12) => {
            let yy: i64 = digits[..2].parse().ok()?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, &digits[2..])
        }
        (0x18, 14) => (digits[..4].parse().ok()?, &digits[4..]),
        _ => return None,
    };
    let num = |i: usize| -> Option<i64> { rest.get(i..i + 2)?.parse().ok() };
    let (month, day, hour, min, sec) = (num(0)?, num(2)?, num(4)?, num(6)?, num(8)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || min > 59 || sec > 60 {
        return None;
    }
    let secs = days_from_civil(year, month, day) * 86_400 + hour * 3600 + min * 60 + sec;
    let secs = u64::try_from(secs).ok()?;
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

/// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The subject of a DER certificate as (attribute OID, value) pairs, in order. This
/// only reads its names; whether the certificate is to be trusted is decided elsewhere.
fn subject(der: &[u8]) -> Option<Vec<(&[u8], String)>> {
    const SET: u8 = 0x31;
    const OID: u8 = 0x06;
    let mut rest = tbs_after_serial(der)?;
    for _ in 0..3 {
        rest = tlv(rest)?.2; // signature algorithm, issuer, validity
    }
    let (SEQUENCE, mut rdns, _) = tlv(rest)? else {
        return None;
    };
    let mut out = Vec::new();
    while !rdns.is_empty() {
        let (SET, mut set, after) = tlv(rdns)? else {
            return None;
        };
        rdns = after;
        while !set.is_empty() {
            let (SEQUENCE, atv, after) = tlv(set)? else {
                return None;
            };
            set = after;
            let (OID, oid, value) = tlv(atv)? else {
                return None;
            };
            let (_, value, _) = tlv(value)?;
            out.push((oid, String::from_utf8_lossy(value).into_owned()));
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validity_reads_both_time_forms() {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(vec!["x".to_string()]).expect("params");
        // rcgen writes UTCTime before 2050 and GeneralizedTime from then on.
        params.not_before = rcgen::date_time_ymd(2024, 2, 29);
        params.not_after = rcgen::date_time_ymd(2051, 1, 1);
        let cert = params.self_signed(&key).expect("cert");
        let (from, to) = validity(cert.der()).expect("validity");
        let secs = |t: SystemTime| {
            t.duration_since(SystemTime::UNIX_EPOCH)
                .expect("after 1970")
                .as_secs()
        };
        assert_eq!(secs(from), 1_709_164_800, "2024-02-29T00:00:00Z");
        assert_eq!(secs(to), 2_556_144_000, "2051-01-01T00:00:00Z");
        assert_eq!(validity(b"not a certificate"), None);
        assert_eq!(
            subject_public_key_info(cert.der()),
            Some(key.public_key_der().as_slice())
        );
    }

    #[test]
    fn subjects_are_written_out_for_logs() {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(vec!["x".to_string()]).expect("params");
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "alice");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "ops");
        params.distinguished_name.push(
            rcgen::DnType::CustomDnType(vec![0, 9, 2342, 19200300, 100, 1, 1]),
            "uid-1",
        );
        let cert = params.self_signed(&key).expect("cert");
        assert_eq!(
            subject_text(cert.der()).as_deref(),
            Some("CN=alice, O=ops, 0.9.2342.19200300.100.1.1=uid-1")
        );
        assert_eq!(subject_text(b"not a certificate"), None);
        assert_eq!(
            dotted_oid(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d]),
            "1.2.840.113549"
        );
    }

    #[test]
    fn asn1_times_are_checked() {
        assert_eq!(
            asn1_time(0x17, b"700101000000Z"),
            Some(SystemTime::UNIX_EPOCH)
        );
        assert_eq!(asn1_time(0x17, b"700101000000"), None, "no Z");
        assert_eq!(asn1_time(0x17, b"701301000000Z"), None, "month 13");
        assert_eq!(asn1_time(0x18, b"700101000000Z"), None, "too short");
    }
}
