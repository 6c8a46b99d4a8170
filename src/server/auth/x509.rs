//! The x509 client-certificate authenticator (upstream's `x509.NewDynamic` with
//! `CommonNameUserConversion`): the user of a leaf certificate that rustls has already
//! verified against `--client-ca-file` during the handshake is its subject's CN, and its
//! groups are the O values. Only the subject's names are read here, from the DER.

use super::User;

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

/// The subject of a DER certificate as (attribute OID, value) pairs, in order. The
/// certificate was verified by rustls already; this only reads its names.
fn subject(der: &[u8]) -> Option<Vec<(&[u8], String)>> {
    const SEQUENCE: u8 = 0x30;
    const SET: u8 = 0x31;
    const OID: u8 = 0x06;
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
    for _ in 0..3 {
        rest = tlv(rest)?.2;
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
