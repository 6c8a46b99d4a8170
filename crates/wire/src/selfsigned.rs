//! The kubelet port's serving pair when none is given: a self-signed certificate and
//! key made once under `--cert-dir` and reused while they parse and match (upstream's
//! `InitializeTLS` with `GenerateSelfSignedCertKey`).

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::tls::{certified_key, TlsError};

/// The self-signed certificate's lifetime: upstream's one year.
const SELF_SIGNED_DAYS: i64 = 365;

/// The serving pair's files: the given ones, or the self-signed pair in `cert_dir`
/// (made if it is missing or unusable, reused otherwise). Returns (cert, key).
pub fn serving_pair(
    cert_file: Option<&Path>,
    key_file: Option<&Path>,
    cert_dir: &Path,
    node_name: &str,
    node_ip: &str,
) -> Result<(PathBuf, PathBuf), TlsError> {
    match (cert_file, key_file) {
        (Some(c), Some(k)) => Ok((c.to_path_buf(), k.to_path_buf())),
        (None, None) => {
            let cert = cert_dir.join("kubelet.crt");
            let key = cert_dir.join("kubelet.key");
            if usable_pair(&cert, &key) {
                log::info!("using the self-signed serving pair {}", cert.display());
                return Ok((cert, key));
            }
            write_self_signed(cert_dir, &cert, &key, node_name, node_ip)?;
            log::info!("made a self-signed serving pair {}", cert.display());
            Ok((cert, key))
        }
        _ => Err(TlsError::HalfPair),
    }
}

/// Whether the pair parses and its key matches its certificate. Expiry is not
/// checked (upstream's `canReadCertAndKey` checks less: that the files exist).
fn usable_pair(cert: &Path, key: &Path) -> bool {
    certified_key(cert, key).is_ok()
}

fn write_self_signed(
    dir: &Path,
    cert: &Path,
    key: &Path,
    node_name: &str,
    node_ip: &str,
) -> Result<(), TlsError> {
    use std::os::unix::fs::OpenOptionsExt;
    let fail = |reason: String| TlsError::SelfSigned {
        dir: dir.to_path_buf(),
        reason,
    };
    let (cert_pem, key_pem) = self_signed(node_name, node_ip).map_err(|e| fail(e.to_string()))?;
    std::fs::create_dir_all(dir).map_err(|e| fail(e.to_string()))?;
    let write = |path: &Path, text: &str, mode: u32| -> io::Result<()> {
        // Written aside and renamed, so a crash never leaves half a key to be reused.
        let tmp = path.with_extension("tmp");
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write(key, &key_pem, 0o600).map_err(|e| fail(format!("{}: {e}", key.display())))?;
    write(cert, &cert_pem, 0o644).map_err(|e| fail(format!("{}: {e}", cert.display())))
}

/// A self-signed certificate and its key (PEM) for the node: CN `<node>@<unix time>`
/// as upstream's, SANs the node name, `localhost`, the node IP and 127.0.0.1, valid for
/// a year from now ([`self_signed_at`]).
pub fn self_signed(node_name: &str, node_ip: &str) -> Result<(String, String), rcgen::Error> {
    self_signed_at(node_name, node_ip, std::time::SystemTime::now())
}

/// [`self_signed`] made at `now` by this node's clock: valid from the start of `now`'s
/// day (so never "not yet valid" for a client whose clock is right while this one is
/// behind) to a year after `now` or after [`base::clock::clock_floor`], whichever is
/// later. A clock behind (a board without an RTC, in 1970 or a year late until NTP
/// syncs) would otherwise make a pair that has expired, or soon does, for clients with
/// correct clocks; and the pair is kept when the clock later jumps forward (expiry is
/// not checked: see [`serving_pair`]), so it must be right when made.
pub(crate) fn self_signed_at(
    node_name: &str,
    node_ip: &str,
    now: std::time::SystemTime,
) -> Result<(String, String), rcgen::Error> {
    let secs = base::time::unix_secs(now);
    let until = base::time::unix_secs(now.max(base::clock::clock_floor()));
    let mut names = vec![node_name.to_string(), "localhost".to_string()];
    for ip in [node_ip, "127.0.0.1"] {
        if !names.iter().any(|n| n == ip) {
            names.push(ip.to_string());
        }
    }
    // rcgen reads an IP text as an IP SAN, anything else as a DNS name.
    let mut params = rcgen::CertificateParams::new(names)?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("{node_name}@{secs}"));
    let (y, m, d) = civil_date(secs);
    params.not_before = rcgen::date_time_ymd(y, m, d);
    let (y, m, d) = civil_date(until.saturating_add(SELF_SIGNED_DAYS * 86_400));
    params.not_after = rcgen::date_time_ymd(y, m, d);
    let key = rcgen::KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// The UTC calendar date of a Unix time.
fn civil_date(secs: i64) -> (i32, u8, u8) {
    use k8s_openapi::jiff::{tz::TimeZone, Timestamp};
    let date = Timestamp::from_second(secs)
        .unwrap_or(Timestamp::UNIX_EPOCH)
        .to_zoned(TimeZone::UTC)
        .date();
    (
        i32::from(date.year()),
        u8::try_from(date.month()).unwrap_or(1),
        u8::try_from(date.day()).unwrap_or(1),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use base::testutil::TempDir;
    use rustls::pki_types::pem::PemObject;

    #[test]
    fn the_self_signed_pair_is_made_once_and_reused() {
        let dir = TempDir::new("selfsigned");
        let pki = dir.0.join("pki");
        let (cert, key) = serving_pair(None, None, &pki, "node-a", "10.1.2.3").expect("made");
        let first = std::fs::read(&cert).expect("cert");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key).expect("key").permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the key is private");
        serving_pair(None, None, &pki, "node-a", "10.1.2.3").expect("reused");
        assert_eq!(
            std::fs::read(&cert).expect("cert"),
            first,
            "reused, not remade"
        );
        // A broken pair is replaced.
        std::fs::write(&key, "garbage").expect("break");
        serving_pair(None, None, &pki, "node-a", "10.1.2.3").expect("remade");
        assert_ne!(std::fs::read(&cert).expect("cert"), first);
        assert!(matches!(
            serving_pair(Some(&cert), None, &pki, "n", "1.1.1.1"),
            Err(TlsError::HalfPair)
        ));
    }

    #[test]
    fn a_pair_made_with_the_clock_behind_is_valid_for_clients_with_correct_clocks() {
        use std::time::{Duration, SystemTime};
        let validity = |now: SystemTime| {
            let (cert, _) = self_signed_at("n", "10.0.0.1", now).expect("pair");
            let der =
                rustls::pki_types::CertificateDer::from_pem_slice(cert.as_bytes()).expect("pem");
            let (from, to) = crate::x509::validity(&der).expect("validity");
            (
                base::time::k8s_time(from).0.to_string(),
                base::time::k8s_time(to).0.to_string(),
            )
        };
        // Before, a year behind gave a pair valid until about today (expired for
        // every correct client within days, and kept after the clock's jump), and 1970
        // one valid in 1970 only. The floor ends it no earlier than a year after it.
        let floor_plus_a_year =
            base::time::k8s_time(base::clock::clock_floor() + Duration::from_secs(365 * 86_400))
                .0
                .to_string();
        let behind = SystemTime::UNIX_EPOCH + Duration::from_secs(1_764_590_400);
        assert_eq!(
            validity(behind),
            (
                "2025-12-01T00:00:00Z".to_string(),
                floor_plus_a_year.clone()
            )
        );
        assert_eq!(
            validity(SystemTime::UNIX_EPOCH),
            ("1970-01-01T00:00:00Z".to_string(), floor_plus_a_year)
        );
        // A clock after the floor: a year from today, as before.
        let later = base::clock::clock_floor() + Duration::from_secs(400 * 86_400 + 3600);
        let (from, to) = validity(later);
        assert!(from.ends_with("T00:00:00Z"), "{from}");
        let year_on = base::time::k8s_time(later + Duration::from_secs(365 * 86_400))
            .0
            .to_string();
        assert_eq!(to[..10], year_on[..10]);
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil_date(0), (1970, 1, 1));
        assert_eq!(civil_date(784_111_777), (1994, 11, 6));
    }
}
