//! The kubelet port's client certificates, checked as upstream checks them: Go's
//! `tls.RequestClientCert` during the handshake, then the x509 authenticator's chain
//! verification for each request.
//!
//! During the handshake [`ClientCa`] (the `ClientCertVerifier` rustls holds) asks for a
//! certificate, names the client CA's subjects as hints, and accepts whatever chain is
//! presented; it still checks the handshake's signature with the webpki verifier, so a
//! client proves it holds the leaf's key. A certificate from another CA therefore no
//! longer fails the handshake: the request is read, and [`ClientCa::verify`] (the
//! transport calls it for every request, with the time then and the CA in use then)
//! sorts the chain into a [`ClientCert`]. Only [`ClientCert::Verified`] chains name a
//! user ([`crate::auth`]); an unverified one is a failed credential, 401 even with
//! anonymous requests allowed (upstream's `union.NewFailOnError`).
//!
//! The CA can change (the `tls-reload` loop calls [`ClientCa::set`]): new handshakes
//! get the new hints, and every request from then on is verified against it, on
//! connections already open too. rustls borrows the hints from the verifier for as long
//! as it lives, so each distinct list of CA subjects is kept for the process's life
//! (some hundred bytes per CA rotation; a list seen before is reused).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};

use crate::x509::{self, ClientCert};
use base::clock::RateLimited;
use base::loops::lock;

/// The line naming the clock, for a client certificate refused only because this
/// node's clock has not reached its notBefore, is logged at most this often: every
/// request of every client would repeat it.
const CLOCK_LINE_EVERY: Duration = Duration::from_secs(60);

/// The client CA in use: what a chain is verified against, and its hints.
struct Current {
    /// The webpki verifier of the CA bundle.
    verifier: Arc<dyn ClientCertVerifier>,
    /// Its subjects, sent in the CertificateRequest.
    hints: &'static [DistinguishedName],
}

/// The client CA of the kubelet port: the handshake's verifier (see the module docs)
/// and the per-request verification of the chains it let through.
pub struct ClientCa {
    current: Mutex<Current>,
    /// Every hint list handed out so far (rustls borrows them; see the module docs).
    hint_lists: Mutex<Vec<&'static [DistinguishedName]>>,
    /// When the clock's line was last logged ([`CLOCK_LINE_EVERY`]).
    clock_line: RateLimited,
}

impl std::fmt::Debug for ClientCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCa")
            .field("hints", &lock(&self.current).hints.len())
            .finish()
    }
}

/// A webpki verifier of the CA bundle `roots` with `provider`'s algorithms, for
/// [`ClientCa`]. `Err`: rustls's reason (an empty bundle …).
pub(crate) fn webpki_verifier(
    roots: RootCertStore,
    provider: CryptoProvider,
) -> Result<Arc<dyn ClientCertVerifier>, String> {
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::new(provider))
        // Only the anonymous policy of the handshake, which ClientCa decides itself.
        .allow_unauthenticated()
        .build()
        .map(|v| v as Arc<dyn ClientCertVerifier>)
        .map_err(|e| e.to_string())
}

impl ClientCa {
    /// A client CA verifying against `verifier` (from [`webpki_verifier`]).
    pub(crate) fn new(verifier: Arc<dyn ClientCertVerifier>) -> ClientCa {
        let ca = ClientCa {
            current: Mutex::new(Current {
                verifier: verifier.clone(),
                hints: &[],
            }),
            hint_lists: Mutex::new(Vec::new()),
            clock_line: RateLimited::new(CLOCK_LINE_EVERY),
        };
        ca.set(verifier);
        ca
    }

    /// Swaps in a new CA: new handshakes and every request from now on use it.
    pub(crate) fn set(&self, verifier: Arc<dyn ClientCertVerifier>) {
        let hints = self.intern(verifier.root_hint_subjects());
        *lock(&self.current) = Current { verifier, hints };
    }

    /// The `'static` copy of `hints`: one seen before, or a new one kept for good.
    fn intern(&self, hints: &[DistinguishedName]) -> &'static [DistinguishedName] {
        let same = |a: &[DistinguishedName]| {
            a.len() == hints.len() && a.iter().zip(hints).all(|(x, y)| x.as_ref() == y.as_ref())
        };
        let mut lists = lock(&self.hint_lists);
        if let Some(list) = lists.iter().find(|l| same(l)) {
            return list;
        }
        let list: &'static [DistinguishedName] = Box::leak(hints.to_vec().into_boxed_slice());
        lists.push(list);
        list
    }

    fn verifier(&self) -> Arc<dyn ClientCertVerifier> {
        lock(&self.current).verifier.clone()
    }

    /// Verifies a presented chain (DER, leaf first) against the CA in use at `now`:
    /// the `ClientCert` a request carries. An empty chain is [`ClientCert::Absent`].
    pub(crate) fn verify(&self, chain: &[CertificateDer<'_>], now: SystemTime) -> ClientCert {
        let Some((leaf, intermediates)) = chain.split_first() else {
            return ClientCert::Absent;
        };
        let secs = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        match self.verifier().verify_client_cert(
            leaf,
            intermediates,
            UnixTime::since_unix_epoch(secs),
        ) {
            Ok(_) => ClientCert::Verified(chain.iter().map(|c| c.to_vec()).collect()),
            Err(e) => {
                let subject =
                    x509::subject_text(leaf).unwrap_or_else(|| "(unreadable subject)".to_string());
                if let Some(line) = self.clock_line(&e, &subject, now, Instant::now()) {
                    log::warn!("{line}");
                }
                ClientCert::Unverified {
                    subject,
                    reason: e.to_string(),
                }
            }
        }
    }

    /// The line to log when `e` refused a client certificate only because this node's
    /// clock (`now`) has not reached its notBefore: the clock is most likely behind (a
    /// board without an RTC). None for any other reason, and within
    /// [`CLOCK_LINE_EVERY`] (monotonic `mono`) of the last one. The request is 401 all
    /// the same: the chain is not verified.
    fn clock_line(
        &self,
        e: &rustls::Error,
        subject: &str,
        now: SystemTime,
        mono: Instant,
    ) -> Option<String> {
        let not_before = base::clock::not_valid_yet(e)?;
        self.clock_line.allow(mono).then(|| {
            format!(
                "{} (client {subject}, answered 401; logged once a minute at most)",
                base::clock::behind_line("a client's", not_before, now)
            )
        })
    }
}

impl ClientCertVerifier for ClientCa {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        lock(&self.current).hints
    }

    /// Any chain: it is verified per request ([`ClientCa::verify`]), and one that
    /// does not verify is answered 401, not refused here.
    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.verifier().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.verifier().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.verifier().supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};

    /// A CA: its certificate and key.
    struct Ca {
        cert: rcgen::Certificate,
        key: KeyPair,
    }

    fn ca(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::new()).expect("params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let key = KeyPair::generate().expect("key");
        let cert = params.self_signed(&key).expect("ca");
        Ca { cert, key }
    }

    /// A client certificate of `ca` for CN `cn`, valid from `from` to `to` (years).
    fn leaf(ca: &Ca, cn: &str, from: i32, to: i32) -> (CertificateDer<'static>, KeyPair) {
        let mut params = CertificateParams::new(Vec::new()).expect("params");
        params.distinguished_name.push(DnType::CommonName, cn);
        params
            .distinguished_name
            .push(DnType::OrganizationName, "ops");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.not_before = rcgen::date_time_ymd(from, 1, 1);
        params.not_after = rcgen::date_time_ymd(to, 1, 1);
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &ca.cert, &ca.key).expect("leaf");
        (cert.der().clone(), key)
    }

    fn client_ca(ca: &Ca) -> ClientCa {
        let mut roots = RootCertStore::empty();
        roots.add(ca.cert.der().clone()).expect("root");
        ClientCa::new(webpki_verifier(roots, provider()).expect("verifier"))
    }

    /// The kubelet port's provider (`crate::tls::provider`, not imported: tls imports
    /// this module).
    fn provider() -> CryptoProvider {
        rustls::crypto::ring::default_provider()
    }

    fn now() -> SystemTime {
        SystemTime::now()
    }

    #[test]
    fn only_a_chain_of_the_client_ca_in_its_validity_is_verified() {
        let (ours, theirs) = (ca("our-ca"), ca("their-ca"));
        let verifier = client_ca(&ours);
        let (good, _) = leaf(&ours, "alice", 2020, 2100);
        assert_eq!(
            verifier.verify(std::slice::from_ref(&good), now()),
            ClientCert::Verified(vec![good.to_vec()])
        );
        // No certificate.
        assert_eq!(verifier.verify(&[], now()), ClientCert::Absent);
        // Another CA: unverified, its subject named.
        let (rogue, _) = leaf(&theirs, "mallory", 2020, 2100);
        let ClientCert::Unverified { subject, reason } = verifier.verify(&[rogue], now()) else {
            panic!("another CA's certificate verified");
        };
        assert_eq!(subject, "CN=mallory, O=ops");
        assert!(reason.contains("UnknownIssuer"), "{reason}");
        // Expired, then not yet valid.
        let (old, _) = leaf(&ours, "old", 2000, 2001);
        let ClientCert::Unverified { subject, reason } = verifier.verify(&[old], now()) else {
            panic!("an expired certificate verified");
        };
        assert_eq!(subject, "CN=old, O=ops");
        assert!(reason.contains("expired"), "{reason}");
        let early = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
        assert!(matches!(
            verifier.verify(std::slice::from_ref(&good), early),
            ClientCert::Unverified { .. }
        ));
        // Garbage: unverified, no panic.
        let junk = CertificateDer::from(vec![0x30, 0x82, 0x01]);
        assert!(matches!(
            verifier.verify(&[junk], now()),
            ClientCert::Unverified { .. }
        ));
    }

    #[test]
    fn a_client_certificate_refused_by_a_clock_behind_names_the_clock_once_a_minute() {
        let ours = ca("our-ca");
        let verifier = client_ca(&ours);
        // Issued 2026-12-01 by a correct clock; this node's clock says 2025-12-01.
        let mut params = CertificateParams::new(Vec::new()).expect("params");
        params.distinguished_name.push(DnType::CommonName, "alice");
        params.not_before = rcgen::date_time_ymd(2026, 12, 1);
        params.not_after = rcgen::date_time_ymd(2027, 12, 1);
        let key = KeyPair::generate().expect("key");
        let cert = params
            .signed_by(&key, &ours.cert, &ours.key)
            .expect("leaf")
            .der()
            .clone();
        let behind = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_764_547_200);
        // Still unverified (401), as before.
        let ClientCert::Unverified { reason, .. } =
            verifier.verify(std::slice::from_ref(&cert), behind)
        else {
            panic!("a certificate not valid yet verified");
        };
        assert!(reason.contains("not valid yet"), "{reason}");
        // The clock's line: the verify above logged one; within a minute, none.
        let e = rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidYetContext {
            time: UnixTime::since_unix_epoch(std::time::Duration::from_secs(1_764_547_200)),
            not_before: UnixTime::since_unix_epoch(std::time::Duration::from_secs(1_796_083_200)),
        });
        let t0 = Instant::now();
        assert_eq!(verifier.clock_line(&e, "CN=alice", behind, t0), None);
        let later = t0 + CLOCK_LINE_EVERY;
        assert_eq!(
            verifier
                .clock_line(&e, "CN=alice", behind, later)
                .as_deref(),
            Some(
                "a client's certificate is not valid until 2026-12-01T00:00:00Z; this node's \
                 clock says 2025-12-01T00:00:00Z: is the clock behind (no RTC, NTP not yet \
                 synced)? (client CN=alice, answered 401; logged once a minute at most)"
            )
        );
        assert_eq!(verifier.clock_line(&e, "CN=alice", behind, later), None);
        // Another reason is no clock line.
        let other = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let much_later = later + CLOCK_LINE_EVERY * 2;
        assert_eq!(
            verifier.clock_line(&other, "CN=x", behind, much_later),
            None
        );
    }

    /// A client certificate resolver handing out one chain with `key` (not checked
    /// against the chain), recording the hints it was given.
    #[derive(Debug)]
    struct OneCert {
        key: Arc<rustls::sign::CertifiedKey>,
        hints: Mutex<Vec<Vec<u8>>>,
    }

    impl rustls::client::ResolvesClientCert for OneCert {
        fn resolve(
            &self,
            hints: &[&[u8]],
            _: &[SignatureScheme],
        ) -> Option<Arc<rustls::sign::CertifiedKey>> {
            *lock(&self.hints) = hints.iter().map(|h| h.to_vec()).collect();
            Some(self.key.clone())
        }

        fn has_certs(&self) -> bool {
            true
        }
    }

    /// A handshake in memory between a client presenting `cert` with `key` and a
    /// server whose client CA is `ca`, over `version`: the server's error, or the
    /// chain it got and the hints the client saw.
    fn handshake(
        ca: &Ca,
        verifier: Arc<ClientCa>,
        cert: CertificateDer<'static>,
        key: &KeyPair,
        version: &'static rustls::SupportedProtocolVersion,
    ) -> Result<(ClientCert, Vec<Vec<u8>>), rustls::Error> {
        use rustls::pki_types::PrivateKeyDer;
        let provider = Arc::new(provider());
        let (server_cert, server_key) = {
            let mut params = CertificateParams::new(vec!["localhost".into()]).expect("params");
            params.distinguished_name.push(DnType::CommonName, "node");
            let key = KeyPair::generate().expect("key");
            let cert = params.signed_by(&key, &ca.cert, &ca.key).expect("server");
            (cert.der().clone(), key)
        };
        let der = |k: &KeyPair| PrivateKeyDer::Pkcs8(k.serialize_der().into());
        let server_config = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[version])
            .expect("versions")
            .with_client_cert_verifier(verifier.clone())
            .with_single_cert(vec![server_cert], der(&server_key))
            .expect("server config");
        let signing = provider
            .key_provider
            .load_private_key(der(key))
            .expect("signing key");
        let resolver = Arc::new(OneCert {
            key: Arc::new(rustls::sign::CertifiedKey::new(vec![cert], signing)),
            hints: Mutex::new(Vec::new()),
        });
        let mut roots = RootCertStore::empty();
        roots.add(ca.cert.der().clone()).expect("root");
        let client_config = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[version])
            .expect("versions")
            .with_root_certificates(roots)
            .with_client_cert_resolver(resolver.clone());
        let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
        let mut client =
            rustls::ClientConnection::new(Arc::new(client_config), name).expect("client");
        let mut server = rustls::ServerConnection::new(Arc::new(server_config)).expect("server");
        for _ in 0..10 {
            let mut wire = Vec::new();
            while client.wants_write() {
                client.write_tls(&mut wire).expect("client write");
            }
            let mut rd = wire.as_slice();
            while !rd.is_empty() {
                server.read_tls(&mut rd).expect("server read");
                server.process_new_packets()?;
            }
            let mut wire = Vec::new();
            while server.wants_write() {
                server.write_tls(&mut wire).expect("server write");
            }
            let mut rd = wire.as_slice();
            while !rd.is_empty() {
                client.read_tls(&mut rd).expect("client read");
                // The client's view does not matter here, only the server's.
                let _ = client.process_new_packets();
            }
            if !server.is_handshaking() {
                let chain = server.peer_certificates().unwrap_or_default().to_vec();
                let hints = lock(&resolver.hints).clone();
                return Ok((verifier.verify(&chain, now()), hints));
            }
        }
        panic!("the handshake did not finish");
    }

    #[test]
    fn another_cas_certificate_passes_the_handshake_but_a_key_it_lacks_does_not() {
        let (ours, theirs) = (ca("our-ca"), ca("their-ca"));
        let verifier = Arc::new(client_ca(&ours));
        let (good, good_key) = leaf(&ours, "alice", 2020, 2100);
        let (rogue, rogue_key) = leaf(&theirs, "mallory", 2020, 2100);
        let our_subject = ours.cert.params().distinguished_name.clone();
        for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
            let (cert, hints) =
                handshake(&ours, verifier.clone(), good.clone(), &good_key, version)
                    .expect("our client's handshake");
            assert_eq!(
                cert,
                ClientCert::Verified(vec![good.to_vec()]),
                "{version:?}"
            );
            // The hint is our CA's subject (DER of the Name).
            assert_eq!(hints.len(), 1, "{version:?}");
            let hint = String::from_utf8_lossy(&hints[0]).into_owned();
            assert!(hint.contains("our-ca"), "{hint:?} {our_subject:?}");

            let (cert, _) = handshake(&ours, verifier.clone(), rogue.clone(), &rogue_key, version)
                .expect("another CA's client completes the handshake");
            assert!(
                matches!(&cert, ClientCert::Unverified { subject, .. } if subject == "CN=mallory, O=ops"),
                "{version:?}: {cert:?}"
            );

            // Our certificate with a key that is not its own: the handshake's
            // signature does not verify.
            let err = handshake(&ours, verifier.clone(), good.clone(), &rogue_key, version)
                .expect_err("a certificate without its key is refused");
            assert!(
                err.to_string().to_lowercase().contains("signature"),
                "{version:?}: {err}"
            );
        }
    }

    #[test]
    fn the_handshake_takes_any_chain_and_a_new_ca_changes_hints_and_verification() {
        let (ours, theirs) = (ca("our-ca"), ca("their-ca"));
        let verifier = client_ca(&ours);
        let (rogue, _) = leaf(&theirs, "mallory", 2020, 2100);
        let (good, _) = leaf(&ours, "alice", 2020, 2100);
        assert!(verifier
            .verify_client_cert(&rogue, &[], UnixTime::now())
            .is_ok());
        assert!(verifier.offer_client_auth() && !verifier.client_auth_mandatory());
        let hints = |v: &ClientCa| -> Vec<Vec<u8>> {
            v.root_hint_subjects()
                .iter()
                .map(|d| d.as_ref().to_vec())
                .collect()
        };
        let first = hints(&verifier);
        assert_eq!(first.len(), 1);
        assert!(!verifier.supported_verify_schemes().is_empty());

        // The other CA swapped in: its hints, its chains verified, ours no longer.
        let mut roots = RootCertStore::empty();
        roots.add(theirs.cert.der().clone()).expect("root");
        verifier.set(webpki_verifier(roots, provider()).expect("verifier"));
        assert_ne!(hints(&verifier), first);
        assert!(matches!(
            verifier.verify(std::slice::from_ref(&rogue), now()),
            ClientCert::Verified(_)
        ));
        assert!(matches!(
            verifier.verify(&[good], now()),
            ClientCert::Unverified { .. }
        ));
        // Back to the first CA: its hint list is reused, not kept twice.
        let mut roots = RootCertStore::empty();
        roots.add(ours.cert.der().clone()).expect("root");
        verifier.set(webpki_verifier(roots, provider()).expect("verifier"));
        assert_eq!(hints(&verifier), first);
        assert_eq!(lock(&verifier.hint_lists).len(), 2);
    }
}
