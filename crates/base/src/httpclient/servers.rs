//! The client plumbing for the servers rkubelet reads pods from: the API server client
//! ([`crate::apiclient::ApiClient`]), the etcd source and the manifest-URL source.
//!
//! One place builds a ureq `Agent` (blocking, no async runtime) with rustls from PEM
//! bytes (a CA bundle, a client certificate and key, or "skip verification"), with a
//! User-Agent naming rkubelet and its version; one place reads a streamed body line by
//! line (a watch is one JSON object per line) and tells a per-read timeout — the
//! stream's wake-up to check for shutdown — from a real failure. Mirrors client-go's
//! `rest.TLSClientConfig` / `transport.TLSConfigFor` and `watch.NewStreamWatcher`'s
//! framing.

use std::fmt;
use std::io;
use std::time::{Duration, SystemTime};

use ureq::tls::{Certificate, ClientCert, PemItem, PrivateKey, RootCerts, TlsConfig};
use ureq::Agent;

/// Upstream's `kubelet/<version> (<os>/<arch>) kubernetes/<commit>`, for rkubelet: the
/// API server's audit log and the etcd log name who called.
pub(crate) fn user_agent() -> String {
    format!(
        "rkubelet/{} ({}/{})",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        std::env::consts::ARCH
    )
}

/// A watch line longer than this is a broken peer, not a pod: 10 MB, upstream's
/// largest manifest, and far above etcd's 1.5 MB request limit.
pub const MAX_LINE: usize = 10 * 1024 * 1024 + 4096;

/// The TLS side of a client, as PEM bytes (already read from files or decoded from
/// kubeconfig `-data` fields).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TlsSettings {
    /// CA bundle to trust instead of the host's CAs ([`super::roots`]).
    pub ca_pem: Option<Vec<u8>>,
    /// Client certificate chain.
    pub cert_pem: Option<Vec<u8>>,
    /// The client certificate's private key.
    pub key_pem: Option<Vec<u8>>,
    /// Trust any server certificate (kubeconfig `insecure-skip-tls-verify`).
    pub insecure: bool,
}

impl fmt::Debug for TlsSettings {
    // The key is a secret: never print it, only whether it is there.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsSettings")
            .field("ca", &self.ca_pem.is_some())
            .field("cert", &self.cert_pem.is_some())
            .field("key", &self.key_pem.is_some())
            .field("insecure", &self.insecure)
            .finish()
    }
}

/// Turns PEM settings into ureq's TLS configuration. Without a CA bundle the server is
/// verified against the host's CAs, as upstream's clients do. The error is the reason
/// only.
pub fn tls_config(s: &TlsSettings) -> Result<TlsConfig, String> {
    build(s, host_roots)
}

/// [`tls_config`] for a client of `urls`: without a CA bundle, the CAs of
/// [`default_roots`].
pub fn tls_config_for<'a>(
    s: &TlsSettings,
    urls: impl IntoIterator<Item = &'a str>,
) -> Result<TlsConfig, String> {
    build(s, || default_roots(urls))
}

fn build(s: &TlsSettings, without_ca: impl FnOnce() -> RootCerts) -> Result<TlsConfig, String> {
    let mut b = TlsConfig::builder().disable_verification(s.insecure);
    if let Some(ca) = &s.ca_pem {
        let certs = certificates(ca).map_err(|e| format!("CA bundle: {e}"))?;
        if certs.is_empty() {
            return Err("CA bundle: no certificate in it".into());
        }
        b = b.root_certs(RootCerts::new_with_certs(&certs));
    } else if !s.insecure {
        b = b.root_certs(without_ca());
    }
    match (&s.cert_pem, &s.key_pem) {
        (Some(cert), Some(key)) => {
            let chain = certificates(cert).map_err(|e| format!("client certificate: {e}"))?;
            if chain.is_empty() {
                return Err("client certificate: no certificate in it".into());
            }
            let key = PrivateKey::from_pem(key)
                .map_err(|e| format!("client key: not a PEM private key: {e}"))?;
            b = b.client_cert(Some(ClientCert::new_with_certs(&chain, key)));
        }
        (Some(_), None) => return Err("a client certificate is given without its key".into()),
        (None, Some(_)) => return Err("a client key is given without its certificate".into()),
        (None, None) => {}
    }
    Ok(b.build())
}

/// The CAs a client of `urls` trusts when none is configured: the host's when one of
/// them is https; none when all are plain http (no redirect is followed, so such a
/// client never speaks TLS, and the host's are not read for nothing).
pub fn default_roots<'a>(urls: impl IntoIterator<Item = &'a str>) -> RootCerts {
    if any_https(urls) {
        host_roots()
    } else {
        RootCerts::new_with_certs(&[])
    }
}

/// The host's CAs ([`super::roots`]), read on first use and kept (~200 KiB with
/// Debian's bundle, so only a client of an https server without a configured CA pays
/// for it).
fn host_roots() -> RootCerts {
    static ROOTS: std::sync::OnceLock<RootCerts> = std::sync::OnceLock::new();
    ROOTS
        .get_or_init(|| RootCerts::new_with_certs(&super::roots::Locations::from_env().load()))
        .clone()
}

/// Whether any of `urls` is https (case-insensitive scheme).
fn any_https<'a>(urls: impl IntoIterator<Item = &'a str>) -> bool {
    urls.into_iter().any(|u| {
        u.get(..8)
            .is_some_and(|s| s.eq_ignore_ascii_case("https://"))
    })
}

fn certificates(pem: &[u8]) -> Result<Vec<Certificate<'static>>, String> {
    let mut out = Vec::new();
    for item in ureq::tls::parse_pem(pem) {
        match item.map_err(|e| format!("not valid PEM: {e}"))? {
            PemItem::Certificate(c) => out.push(c),
            // A bundle may carry keys or other blocks beside the certificates.
            _ => continue,
        }
    }
    Ok(out)
}

/// A blocking agent: non-2xx answers are returned (their bodies carry the reason), no
/// redirects (a kubelet follows none), no proxy from the environment (every server is
/// named explicitly), `timeout` for each whole call unless the call says otherwise.
pub fn agent(tls: TlsConfig, timeout: Duration) -> Agent {
    let config = Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .max_redirects(0)
        .user_agent(user_agent())
        .tls_config(tls)
        .timeout_global(Some(crate::time::clamp_timeout(timeout)))
        .timeout_connect(Some(CONNECT_TIMEOUT))
        .input_buffer_size(super::CONNECTION_BUFFER)
        .output_buffer_size(super::CONNECTION_BUFFER)
        .max_response_header_size(super::CONNECTION_BUFFER)
        .build();
    Agent::new_with_config(config)
}

/// How long a TCP (and TLS) connect may take: a server that is down answers at once
/// (refused); one that does not answer in 5 s is treated as down.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// True when a body read stopped because its per-read timeout expired: nothing
/// arrived for a while, the stream is still good (the caller checks for shutdown and
/// reads on). Any other error, a global timeout included, ends the stream.
pub fn is_read_timeout(e: &io::Error) -> bool {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<ureq::Error>())
    {
        Some(ureq::Error::Timeout(t)) => *t == ureq::Timeout::PerRead,
        Some(_) => false,
        None => matches!(
            e.kind(),
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
        ),
    }
}

/// `Some` when a call failed because the server's certificate is not valid yet by this
/// node's clock (rustls's `NotValidYet`, found as ureq hands it over: its own variant, or
/// inside the I/O error of the handshake), with the certificate's `notBefore` when
/// rustls gave it. See [`crate::clock`].
pub fn not_valid_yet(e: &ureq::Error) -> Option<Option<SystemTime>> {
    match e {
        ureq::Error::Rustls(e) => crate::clock::not_valid_yet(e),
        ureq::Error::Io(e) => {
            let inner = e.get_ref()?;
            if let Some(tls) = inner.downcast_ref::<rustls::Error>() {
                return crate::clock::not_valid_yet(tls);
            }
            inner.downcast_ref::<ureq::Error>().and_then(not_valid_yet)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lines::LineReader;
    use crate::netutil::query_escape;
    use crate::testutil::spawn_named;
    use std::sync::Arc;

    /// Hands out its data in fixed pieces, with a timeout error between pieces.
    struct Pieces {
        pieces: Vec<Vec<u8>>,
        timeout_next: bool,
    }

    impl io::Read for Pieces {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            if self.timeout_next {
                self.timeout_next = false;
                return Err(io::Error::new(io::ErrorKind::TimedOut, "idle"));
            }
            if self.pieces.is_empty() {
                return Ok(0);
            }
            let p = self.pieces.remove(0);
            out[..p.len()].copy_from_slice(&p);
            self.timeout_next = true;
            Ok(p.len())
        }
    }

    #[test]
    fn lines_survive_timeouts_in_the_middle() {
        let mut r = LineReader::new(
            Pieces {
                pieces: vec![
                    b"{\"a\"".to_vec(),
                    b":1}\r\n{\"b\":2}\n".to_vec(),
                    b"tail".to_vec(),
                ],
                timeout_next: false,
            },
            100,
        );
        let mut got = Vec::new();
        let mut timeouts = 0;
        loop {
            match r.next_line() {
                Ok(Some(l)) => got.push(String::from_utf8(l).expect("utf-8")),
                Ok(None) => break,
                Err(e) if is_read_timeout(&e) => timeouts += 1,
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(got, ["{\"a\":1}", "{\"b\":2}", "tail"]);
        assert!(timeouts >= 2);
    }

    #[test]
    fn an_endless_line_is_refused() {
        let mut r = LineReader::new(io::repeat(b'x'), 1000);
        let e = r.next_line().expect_err("too long");
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn query_values_are_escaped() {
        assert_eq!(query_escape("spec.nodeName=n-1"), "spec.nodeName%3Dn-1");
        assert_eq!(query_escape("a b/c"), "a%20b%2Fc");
    }

    #[test]
    fn tls_settings_errors_say_which_part() {
        let bad = TlsSettings {
            ca_pem: Some(b"not pem".to_vec()),
            ..Default::default()
        };
        assert_eq!(
            tls_config(&bad).err().as_deref(),
            Some("CA bundle: no certificate in it")
        );
        let half = TlsSettings {
            cert_pem: Some(b"x".to_vec()),
            ..Default::default()
        };
        assert_eq!(
            tls_config(&half).err().as_deref(),
            Some("a client certificate is given without its key")
        );
        assert!(tls_config(&TlsSettings::default()).is_ok());
        let shown = format!(
            "{:?}",
            TlsSettings {
                key_pem: Some(b"SECRET".to_vec()),
                ..Default::default()
            }
        );
        assert!(!shown.contains("SECRET"), "{shown}");
    }

    /// Serves one TLS handshake on 127.0.0.1 with a certificate valid from `from` to
    /// `to` (years); returns the port and the certificate (PEM, the client's CA).
    fn tls_server(from: i32, to: i32) -> (u16, String, std::thread::JoinHandle<()>) {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params =
            rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).expect("params");
        params.not_before = rcgen::date_time_ymd(from, 1, 1);
        params.not_after = rcgen::date_time_ymd(to, 1, 1);
        let cert = params.self_signed(&key).expect("cert");
        let pem = cert.pem();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .expect("config");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let server = spawn_named("tls-server", move || {
            if let Ok((mut sock, _)) = listener.accept() {
                let mut conn = rustls::ServerConnection::new(Arc::new(config)).expect("conn");
                // The client gives up in the handshake: the error is what is tested.
                let _ = conn.complete_io(&mut sock);
            }
        });
        (port, pem, server)
    }

    #[test]
    fn a_server_certificate_not_yet_valid_is_told_apart() {
        // The clock behind, as a board without an RTC sees it: the server's
        // certificate starts in 2099 and this clock says today. Before, the error was
        // one more transport error (`io: invalid peer certificate: certificate not
        // valid yet: …`), and nothing named the clock.
        let (port, ca, server) = tls_server(2099, 2100);
        let tls = tls_config(&TlsSettings {
            ca_pem: Some(ca.into_bytes()),
            ..Default::default()
        })
        .expect("tls");
        let err = agent(tls, Duration::from_secs(10))
            .get(&format!("https://127.0.0.1:{port}/"))
            .call()
            .expect_err("not valid yet");
        server.join().expect("server");
        let not_before = not_valid_yet(&err).expect("NotValidYet recognised");
        assert_eq!(
            not_before.map(|t| crate::time::k8s_time(t).0.to_string()),
            Some("2099-01-01T00:00:00Z".to_string()),
            "{err}"
        );
        // Another certificate error is not the clock's.
        let (port, ca, server) = tls_server(2000, 2001);
        let tls = tls_config(&TlsSettings {
            ca_pem: Some(ca.into_bytes()),
            ..Default::default()
        })
        .expect("tls");
        let err = agent(tls, Duration::from_secs(10))
            .get(&format!("https://127.0.0.1:{port}/"))
            .call()
            .expect_err("expired");
        server.join().expect("server");
        assert_eq!(not_valid_yet(&err), None, "{err}");
    }
}
