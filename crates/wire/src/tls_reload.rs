//! The kubelet port's certificate files, re-read when they change on disk, as
//! upstream's `dynamiccertificates` controllers do for `--tls-cert-file` /
//! `--tls-private-key-file` (`DynamicCertKeyPairContent`) and `--client-ca-file`
//! (`DynamicFileCAContent`): rotation without a restart.
//!
//! The rustls configuration holds a [`ServingPair`] (its `ResolvesServerCert`) and a
//! [`ClientCa`] (its `ClientCertVerifier`, which also verifies each request's chain);
//! each hands every new handshake the current pair or CA, an `Arc` cloned under a lock
//! held for nanoseconds. The
//! `tls-reload` loop ([`Reloader::tick`], every [`RELOAD_PERIOD`]) stats the files and,
//! when a fingerprint (inode, size, times) changed, reads and checks them off the
//! handshake path and swaps them in. A file that does not read, parse or match (a key
//! written before its certificate, say) leaves the old pair or CA in use and makes the
//! tick fail with the reason (logged once per change); the next change is tried again.
//! Connections already open keep the serving pair they were set up with; their
//! requests' client certificates are verified against the CA in use when each request
//! is read (as upstream's x509 authenticator does).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::client_cert::ClientCa;
use crate::tls::{self, TlsError, TlsServer, TlsSettings};
use base::fsutil::Fingerprint;
use base::loops::lock;

/// How often the files are looked at: a rotated pair is served within this; each look
/// is a `stat` per file.
pub const RELOAD_PERIOD: Duration = Duration::from_secs(2);

/// Said after every reload error: nothing changes for clients.
const KEPT_PAIR: &str = "the previous serving pair stays in use";
const KEPT_CA: &str = "the previous client CA bundle stays in use";

/// The serving pair new handshakes get.
#[derive(Debug)]
pub(crate) struct ServingPair(Mutex<Arc<CertifiedKey>>);

impl ResolvesServerCert for ServingPair {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(lock(&self.0).clone())
    }
}

/// What one set of files looked like when last read, and what reading it gave.
#[derive(Debug, Default)]
struct Seen {
    /// The files' fingerprints; `None` forces a read on the next tick (never read, or
    /// read too soon after a change to trust the fingerprint).
    fingerprints: Option<Vec<Fingerprint>>,
    /// Why that version could not be used, if it could not.
    error: Option<String>,
}

impl Seen {
    /// Whether `now`'s fingerprints differ from the last read's.
    fn changed(&self, now: &[Fingerprint]) -> bool {
        self.fingerprints.as_deref() != Some(now)
    }

    /// Records a read of files with these fingerprints, taken before reading.
    fn read(&mut self, fingerprints: Vec<Fingerprint>, at: SystemTime, error: Option<String>) {
        let settled = fingerprints.iter().all(|f| f.settled(at));
        self.fingerprints = settled.then_some(fingerprints);
        self.error = error;
    }
}

/// The `tls-reload` loop's state: which files, what was last read, where to swap.
#[derive(Debug)]
pub struct Reloader {
    cert_file: PathBuf,
    key_file: PathBuf,
    pair: Arc<ServingPair>,
    pair_seen: Seen,
    ca_file: Option<PathBuf>,
    ca: Option<Arc<ClientCa>>,
    ca_seen: Seen,
}

/// The fingerprints of `paths` now (an unreadable file stands as an error).
fn fingerprints(paths: &[&Path]) -> Result<Vec<Fingerprint>, TlsError> {
    paths
        .iter()
        .map(|p| {
            base::fsutil::stat_regular(p)
                .map(|m| Fingerprint::of(&m))
                .map_err(|e| TlsError::Read {
                    path: p.to_path_buf(),
                    reason: e.to_string(),
                })
        })
        .collect()
}

/// The kubelet port's TLS from `s`, with the serving pair and the client CA read now
/// (an error here fails start-up) and re-read later by the returned [`Reloader`].
pub fn reloading_server_config(s: &TlsSettings) -> Result<(TlsServer, Reloader), TlsError> {
    let now = SystemTime::now();
    let mut pair_seen = Seen::default();
    let pair_prints = fingerprints(&[&s.cert_file, &s.key_file])?;
    let pair = Arc::new(ServingPair(Mutex::new(tls::certified_key(
        &s.cert_file,
        &s.key_file,
    )?)));
    pair_seen.read(pair_prints, now, None);
    let mut ca_seen = Seen::default();
    let ca = match &s.client_ca_file {
        None => None,
        Some(path) => {
            let prints = fingerprints(&[path])?;
            let verifier = tls::client_verifier(path)?;
            ca_seen.read(prints, now, None);
            Some(Arc::new(ClientCa::new(verifier)))
        }
    };
    let config = tls::server_config(s, pair.clone(), ca.clone())?;
    Ok((
        config,
        Reloader {
            cert_file: s.cert_file.clone(),
            key_file: s.key_file.clone(),
            pair,
            pair_seen,
            ca_file: s.client_ca_file.clone(),
            ca,
            ca_seen,
        },
    ))
}

impl Reloader {
    /// One look at the files: what changed is read, checked and swapped in. Fails while
    /// the files on disk cannot be used (the ones in use stay).
    pub fn tick(&mut self) -> Result<(), TlsError> {
        let pair = self.reload_pair();
        let ca = self.reload_ca();
        pair.and(ca)
    }

    fn reload_pair(&mut self) -> Result<(), TlsError> {
        let now = SystemTime::now();
        let prints = fingerprints(&[&self.cert_file, &self.key_file])
            .map_err(|e| TlsError::Reload(format!("{e}; {KEPT_PAIR}")))?;
        if self.pair_seen.changed(&prints) {
            match tls::certified_key(&self.cert_file, &self.key_file) {
                Ok(key) => {
                    *lock(&self.pair.0) = key;
                    if self.pair_seen.fingerprints.is_some() {
                        log::info!(
                            "serving certificate reloaded from {}",
                            self.cert_file.display()
                        );
                    }
                    self.pair_seen.read(prints, now, None);
                }
                Err(e) => self
                    .pair_seen
                    .read(prints, now, Some(format!("{e}; {KEPT_PAIR}"))),
            }
        }
        match &self.pair_seen.error {
            Some(e) => Err(TlsError::Reload(e.clone())),
            None => Ok(()),
        }
    }

    fn reload_ca(&mut self) -> Result<(), TlsError> {
        let (Some(path), Some(ca)) = (&self.ca_file, &self.ca) else {
            return Ok(());
        };
        let now = SystemTime::now();
        let prints =
            fingerprints(&[path]).map_err(|e| TlsError::Reload(format!("{e}; {KEPT_CA}")))?;
        if self.ca_seen.changed(&prints) {
            match tls::client_verifier(path) {
                Ok(verifier) => {
                    ca.set(verifier);
                    if self.ca_seen.fingerprints.is_some() {
                        log::info!("client CA bundle reloaded from {}", path.display());
                    }
                    self.ca_seen.read(prints, now, None);
                }
                Err(e) => self
                    .ca_seen
                    .read(prints, now, Some(format!("{e}; {KEPT_CA}"))),
            }
        }
        match &self.ca_seen.error {
            Some(e) => Err(TlsError::Reload(e.clone())),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::TlsVersion;
    use base::testutil::TempDir;

    fn pair_pem(name: &str) -> (String, String) {
        crate::selfsigned::self_signed(name, "10.0.0.1").expect("pair")
    }

    /// The leaf certificate the resolver hands out now.
    fn served(pair: &ServingPair) -> Vec<u8> {
        lock(&pair.0).cert[0].to_vec()
    }

    #[test]
    fn a_changed_pair_is_swapped_in_and_a_bad_one_leaves_the_old() {
        let dir = TempDir::new("reload");
        let (c1, k1) = pair_pem("one");
        let cert = dir.write("tls.crt", &c1);
        let key = dir.write("tls.key", &k1);
        let settings = TlsSettings {
            cert_file: cert.clone(),
            key_file: key.clone(),
            client_ca_file: None,
            min_version: TlsVersion::Tls12,
            cipher_suites: vec![],
        };
        let (_, mut r) = reloading_server_config(&settings).expect("config");
        let first = served(&r.pair);
        r.tick().expect("unchanged");
        assert_eq!(served(&r.pair), first);

        // A new certificate without its key: refused, the old pair stays.
        let (c2, k2) = pair_pem("two");
        std::fs::write(&cert, &c2).expect("write");
        let err = r.tick().expect_err("mismatched key");
        assert!(err.to_string().contains("stays in use"), "{err}");
        assert_eq!(served(&r.pair), first);
        // The key follows: the new pair is served.
        std::fs::write(&key, &k2).expect("write");
        r.tick().expect("new pair");
        assert_ne!(served(&r.pair), first);
        let second = served(&r.pair);
        // Garbage: the second pair stays; a missing file too.
        std::fs::write(&cert, "garbage").expect("write");
        assert!(r.tick().is_err());
        assert_eq!(served(&r.pair), second);
        std::fs::remove_file(&cert).expect("rm");
        let err = r.tick().expect_err("missing");
        assert!(err.to_string().contains(KEPT_PAIR), "{err}");
        assert_eq!(served(&r.pair), second);
    }
}
