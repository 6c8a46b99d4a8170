//! TLS for the authenticated kubelet port: the connection the bounded transport
//! ([`super::http`]) reads and writes, plain TCP or TLS through a
//! `rustls::ServerConnection`; the rustls server configuration built from the TLS
//! settings (versions, `--tls-cipher-suites` mapped from upstream's names, the serving
//! pair and client CA through the resolvers [`super::tls_reload`] swaps when the files
//! change); and the self-signed serving pair made when no certificate is given
//! (upstream's `InitializeTLS` with `GenerateSelfSignedCertKey`).
//!
//! Cipher suites: as in Go, only TLS 1.2's are configurable; TLS 1.3 names are taken
//! and change nothing. rustls (ring) has the six ECDHE AEAD suites of TLS 1.2; a name
//! upstream knows that rustls lacks is left out with a warning, and a list with none
//! of the six turns TLS 1.2 off (upstream would negotiate those suites).
//!
//! The poller never blocks on a connection: it feeds what `poll(2)` says is readable
//! into rustls (`read_tls`, `process_new_packets`) and takes out what plaintext there
//! is, so a handshake is just more bytes of a request head and counts against the
//! same header timeout. The workers write answers through the same connection with
//! the socket blocking and a write timeout. The client certificate chain comes from
//! rustls after the handshake (which checked that the client holds its key), never
//! from anything the client sends in the HTTP request, and is verified against the
//! client CA for each request ([`Stream::client_cert`], [`super::client_cert`]).

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::ResolvesServerCert;
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig, ServerConnection};

use super::auth::x509::ClientCert;
use super::client_cert::{self, ClientCa};
use crate::config::values::TlsVersion;

/// The largest certificate, key or CA bundle file read: real ones are a few KiB.
const MAX_PEM_BYTES: u64 = 1024 * 1024;
/// The self-signed certificate's lifetime: upstream's one year.
const SELF_SIGNED_DAYS: i64 = 365;

/// One open connection of a server: plain TCP (healthz, read-only) or TLS (kubelet).
#[derive(Debug)]
pub enum Stream {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS over TCP.
    Tls(Box<TlsStream>),
}

/// A TLS connection: the socket, rustls's state for it, and the client CA its
/// certificate is verified against.
#[derive(Debug)]
pub struct TlsStream {
    tcp: TcpStream,
    tls: ServerConnection,
    client_ca: Option<Arc<ClientCa>>,
}

/// The kubelet port's TLS: the rustls configuration, and the client CA (`None`:
/// client certificates are not asked for) whose verification each request's chain
/// gets.
#[derive(Debug, Clone)]
pub struct TlsServer {
    /// The rustls configuration.
    pub config: Arc<ServerConfig>,
    /// With `--client-ca-file`: the CA in use (the handshake verifier in `config`).
    pub client_ca: Option<Arc<ClientCa>>,
}

impl Stream {
    /// A TLS connection on `tcp` served with `server`.
    pub fn tls(tcp: TcpStream, server: &TlsServer) -> io::Result<Stream> {
        let tls = ServerConnection::new(server.config.clone()).map_err(io::Error::other)?;
        // A handshake is several small flights, and rustls may hand an answer to the
        // socket in more than one write: without this, Nagle and the client's delayed
        // ACK add ~40 ms to each (Go's net/http sets it on every connection too).
        tcp.set_nodelay(true)?;
        Ok(Stream::Tls(Box::new(TlsStream {
            tcp,
            tls,
            client_ca: server.client_ca.clone(),
        })))
    }

    fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(t) => &t.tcp,
        }
    }

    /// The socket's descriptor, for `poll(2)`.
    pub fn fd(&self) -> RawFd {
        self.tcp().as_raw_fd()
    }

    /// Whether TLS records wait to be sent (a handshake reply the socket could not take
    /// at once): the poller then also waits for the socket to be writable.
    pub fn wants_write(&self) -> bool {
        matches!(self, Stream::Tls(t) if t.tls.wants_write())
    }

    /// Whether decrypted bytes wait inside rustls, which `poll(2)` cannot see.
    pub fn has_buffered(&mut self) -> bool {
        match self {
            Stream::Plain(_) => false,
            Stream::Tls(t) => t
                .tls
                .process_new_packets()
                .is_ok_and(|s| s.plaintext_bytes_to_read() > 0),
        }
    }

    /// Sets the socket's blocking mode.
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.tcp().set_nonblocking(on)
    }

    /// Sets the socket's write timeout.
    pub fn set_write_timeout(&self, t: Duration) -> io::Result<()> {
        self.tcp().set_write_timeout(Some(t))
    }

    /// Reads request bytes without blocking, as `Read::read` on a non-blocking socket
    /// does: `Ok(0)` when the peer has closed, `WouldBlock` when nothing is there yet
    /// (for TLS also while the handshake is still going on).
    pub fn read_nonblocking(&mut self, out: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(out),
            Stream::Tls(t) => t.read_nonblocking(out),
        }
    }

    /// Reads and drops raw bytes (a lingering connection: nothing it sends is used).
    pub fn discard(&mut self, chunk: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(chunk),
            Stream::Tls(t) => t.tcp.read(chunk),
        }
    }

    /// Writes a short answer without blocking (it fits any socket buffer). A TLS
    /// connection whose handshake has not finished cannot carry one: an error, so
    /// the caller closes it.
    pub fn write_short(&mut self, data: &[u8]) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.write_all(data),
            Stream::Tls(t) if t.tls.is_handshaking() => Err(io::Error::other(
                "the TLS handshake did not finish: no answer can be sent",
            )),
            Stream::Tls(t) => {
                t.tls.writer().write_all(data)?;
                t.flush_nonblocking()
            }
        }
    }

    /// Writes a whole answer on a blocking socket (the worker sets the write timeout).
    pub fn write_blocking(&mut self, data: &[u8]) -> io::Result<()> {
        match self {
            Stream::Plain(s) => {
                s.write_all(data)?;
                s.flush()
            }
            Stream::Tls(t) => t.write_blocking(data),
        }
    }

    /// Writes what the socket (or rustls's send buffer) takes now, never waiting:
    /// `WouldBlock` when it takes nothing. For TLS, records rustls could not send
    /// yet stay queued ([`Stream::wants_write`]) and go out with the next call or
    /// [`Stream::flush_nonblocking`].
    pub fn write_nonblocking(&mut self, data: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(data),
            Stream::Tls(t) => {
                t.flush_nonblocking()?;
                let n = t.tls.writer().write(data)?;
                t.flush_nonblocking()?;
                if n == 0 && !data.is_empty() {
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                Ok(n)
            }
        }
    }

    /// Sends queued TLS records until the socket would block (nothing for plain TCP).
    pub fn flush_nonblocking(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(_) => Ok(()),
            Stream::Tls(t) => t.flush_nonblocking(),
        }
    }

    /// Writes all of `data` on a non-blocking socket (a stream handed over by the
    /// transport), waiting in `poll(2)` whenever the socket is full; `TimedOut` when
    /// no byte could be sent for `timeout`. The socket stays non-blocking, so the same
    /// thread can go on polling it for reads.
    pub fn write_all_waiting(&mut self, mut data: &[u8], timeout: Duration) -> io::Result<()> {
        loop {
            let progress = match self {
                Stream::Plain(s) => match s.write(data) {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(n) => {
                        data = &data[n..];
                        true
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => false,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => true,
                    Err(e) => return Err(e),
                },
                Stream::Tls(t) => {
                    let mut progress = false;
                    if !data.is_empty() {
                        // rustls takes as much plaintext as its send buffer holds.
                        let n = t.tls.writer().write(data)?;
                        data = &data[n..];
                        progress = n > 0;
                    }
                    let pending = t.tls.wants_write();
                    t.flush_nonblocking()?;
                    progress || (pending && !t.tls.wants_write())
                }
            };
            if data.is_empty() && !self.wants_write() {
                return Ok(());
            }
            if !progress && !wait_writable(self.fd(), timeout)? {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the client took nothing for {timeout:?}"),
                ));
            }
        }
    }

    /// Ends the sending side: a TLS `close_notify`, then the TCP half-close.
    pub fn shutdown_write(&mut self) -> io::Result<()> {
        if let Stream::Tls(t) = self {
            t.tls.send_close_notify();
            let _ = t.flush_nonblocking();
        }
        self.tcp().shutdown(std::net::Shutdown::Write)
    }

    /// The client's certificate chain as the handshake took it, verified now against
    /// the client CA in use; [`ClientCert::Absent`] for plain TCP or a client that
    /// sent none.
    pub fn client_cert(&self) -> ClientCert {
        let Stream::Tls(t) = self else {
            return ClientCert::Absent;
        };
        match (t.tls.peer_certificates(), &t.client_ca) {
            (None, _) => ClientCert::Absent,
            (Some(chain), Some(ca)) => ca.verify(chain, std::time::SystemTime::now()),
            // Not asked for without a CA, so rustls never has one; never trusted.
            (Some(_), None) => ClientCert::Unverified {
                subject: String::new(),
                reason: "no client CA is configured".into(),
            },
        }
    }
}

impl TlsStream {
    fn read_nonblocking(&mut self, out: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.tls.reader().read(out) {
                // Ok(0) is the peer's close_notify.
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            self.flush_nonblocking()?;
            // WouldBlock here is "nothing more yet", which the caller expects.
            if self.tls.read_tls(&mut self.tcp)? == 0 {
                return Ok(0);
            }
            if let Err(e) = self.tls.process_new_packets() {
                // Send the alert rustls queued (bad certificate, protocol version …) so
                // the client learns why, then give up the connection.
                let _ = self.flush_nonblocking();
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
            self.flush_nonblocking()?;
        }
    }

    /// Sends queued TLS records until the socket would block (the rest waits for
    /// `POLLOUT`).
    fn flush_nonblocking(&mut self) -> io::Result<()> {
        while self.tls.wants_write() {
            match self.tls.write_tls(&mut self.tcp) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn write_blocking(&mut self, mut data: &[u8]) -> io::Result<()> {
        loop {
            while self.tls.wants_write() {
                self.tls.write_tls(&mut self.tcp)?;
            }
            if data.is_empty() {
                return Ok(());
            }
            // rustls takes as much plaintext as its send buffer holds.
            let n = self.tls.writer().write(data)?;
            if n == 0 && !self.tls.wants_write() {
                return Err(io::ErrorKind::WriteZero.into());
            }
            data = &data[n..];
        }
    }
}

/// Waits until `fd` can take more bytes; false after `timeout` without.
fn wait_writable(fd: RawFd, timeout: Duration) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    loop {
        // SAFETY: `p` is one valid, writable pollfd.
        let n = unsafe { libc::poll(&mut p, 1, ms) };
        if n >= 0 {
            return Ok(n > 0);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Why the kubelet port's TLS cannot be set up. Start-up fails with it.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A certificate, key or CA file cannot be read.
    #[error("cannot read {path}: {reason}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        reason: String,
    },
    /// A file has no usable PEM block of the kind needed.
    #[error("{path}: {reason}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What was looked for or what is wrong.
        reason: String,
    },
    /// rustls refused the configuration (a key that does not match the certificate …).
    #[error("unusable TLS serving pair: {0}")]
    Config(rustls::Error),
    /// The client CA bundle cannot verify anything.
    #[error("client CA file {path}: {reason}")]
    ClientCa {
        /// The file.
        path: PathBuf,
        /// The cause.
        reason: String,
    },
    /// Only one of `--tls-cert-file` and `--tls-private-key-file` is given.
    #[error("--tls-cert-file and --tls-private-key-file must be given together")]
    HalfPair,
    /// The self-signed pair cannot be made or written.
    #[error("cannot make the self-signed serving pair in {dir}: {reason}")]
    SelfSigned {
        /// The directory.
        dir: PathBuf,
        /// The cause.
        reason: String,
    },
    /// A changed certificate, key or CA file cannot be used (the `tls-reload` loop's
    /// error; the files in use stay).
    #[error("{0}")]
    Reload(String),
}

/// What the kubelet port's TLS is built from (the TLS settings, the self-signed pair's
/// names resolved).
#[derive(Debug, Clone)]
pub struct TlsSettings {
    /// The serving certificate chain (PEM).
    pub cert_file: PathBuf,
    /// Its key (PEM).
    pub key_file: PathBuf,
    /// `--client-ca-file`.
    pub client_ca_file: Option<PathBuf>,
    /// `--tls-min-version`.
    pub min_version: TlsVersion,
    /// `--tls-cipher-suites` (upstream's names; empty: rustls's defaults).
    pub cipher_suites: Vec<String>,
}

fn read_pem_file(path: &Path) -> Result<Vec<u8>, TlsError> {
    crate::fsutil::read_regular(path, MAX_PEM_BYTES)
        .map(|(bytes, _)| bytes)
        .map_err(|e| TlsError::Read {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read_pem_file(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            path: path.to_path_buf(),
            reason: "no CERTIFICATE block".into(),
        });
    }
    Ok(certs)
}

fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read_pem_file(path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| TlsError::Pem {
        path: path.to_path_buf(),
        reason: format!("no usable private key: {e}"),
    })
}

/// The crypto provider of the kubelet port: rustls's ring provider.
pub fn provider() -> rustls::crypto::CryptoProvider {
    rustls::crypto::ring::default_provider()
}

/// The serving pair read from its files, the key checked against the certificate.
pub fn certified_key(cert: &Path, key: &Path) -> Result<Arc<CertifiedKey>, TlsError> {
    CertifiedKey::from_der(certificates(cert)?, private_key(key)?, &provider())
        .map(Arc::new)
        .map_err(TlsError::Config)
}

/// A verifier of client certificate chains against the CA bundle `ca`, for
/// [`ClientCa`] (which decides what the handshake asks for and lets through).
pub fn client_verifier(ca: &Path) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(ca)? {
        roots.add(cert).map_err(|e| TlsError::ClientCa {
            path: ca.to_path_buf(),
            reason: e.to_string(),
        })?;
    }
    client_cert::webpki_verifier(roots, provider()).map_err(|reason| TlsError::ClientCa {
        path: ca.to_path_buf(),
        reason,
    })
}

/// The rustls suite of an upstream TLS 1.2 cipher suite name; `None` for TLS 1.3 names
/// (not configurable) and for the suites rustls does not implement.
fn tls12_suite(name: &str) -> Option<rustls::CipherSuite> {
    use rustls::CipherSuite as C;
    Some(match name {
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256" => C::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384" => C::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256" => C::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384" => C::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256" | "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305" => {
            C::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256
        }
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"
        | "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305" => {
            C::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
        }
        _ => return None,
    })
}

/// The TLS 1.3 suite names (accepted, not configurable, as in Go).
const TLS13_NAMES: &[&str] = &[
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
];

/// The provider's cipher suites narrowed to `names` (upstream's, checked by the config)
/// for TLS 1.2, every TLS 1.3 one kept, and the names that have no rustls suite. No
/// names: the provider's own list.
fn cipher_suites(
    all: &[rustls::SupportedCipherSuite],
    names: &[String],
) -> (Vec<rustls::SupportedCipherSuite>, Vec<String>) {
    if names.is_empty() {
        return (all.to_vec(), Vec::new());
    }
    let wanted: Vec<rustls::CipherSuite> = names.iter().filter_map(|n| tls12_suite(n)).collect();
    let kept = all
        .iter()
        .filter(|s| s.tls13().is_some() || wanted.contains(&s.suite()))
        .copied()
        .collect();
    let lacking = names
        .iter()
        .filter(|n| tls12_suite(n).is_none() && !TLS13_NAMES.contains(&n.as_str()))
        .cloned()
        .collect();
    (kept, lacking)
}

/// The TLS of the kubelet port: the serving pair from `cert` (which may change between
/// handshakes), the TLS versions from `min_version` up, the cipher suites, and, with
/// `client_ca`, client certificates asked for and verified against it.
pub fn server_config(
    s: &TlsSettings,
    cert: Arc<dyn ResolvesServerCert>,
    client_ca: Option<Arc<ClientCa>>,
) -> Result<TlsServer, TlsError> {
    let mut provider = provider();
    let (suites, lacking) = cipher_suites(&provider.cipher_suites, &s.cipher_suites);
    if !lacking.is_empty() {
        log::warn!(
            "--tls-cipher-suites: rustls has no {} (no CBC, RSA key exchange, RC4 or 3DES \
             suites); left out",
            lacking.join(", ")
        );
    }
    let tls12 = s.min_version == TlsVersion::Tls12 && suites.iter().any(|c| c.tls13().is_none());
    if s.min_version == TlsVersion::Tls12 && !tls12 {
        log::warn!(
            "--tls-cipher-suites leaves no TLS 1.2 cipher suite rustls has: TLS 1.2 is off, \
             the kubelet port speaks TLS 1.3 only"
        );
    }
    provider.cipher_suites = suites;
    let versions: &[&'static rustls::SupportedProtocolVersion] = if tls12 {
        &[&rustls::version::TLS13, &rustls::version::TLS12]
    } else {
        &[&rustls::version::TLS13]
    };
    let builder = ServerConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(versions)
        .map_err(TlsError::Config)?;
    let builder = match &client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => builder.with_client_cert_verifier(ca.clone()),
    };
    let mut config = builder.with_cert_resolver(cert);
    // HTTP/1.1 only: a client offering h2 must not think it was accepted.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsServer {
        config: Arc::new(config),
        client_ca,
    })
}

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
/// a year from now.
pub fn self_signed(node_name: &str, node_ip: &str) -> Result<(String, String), rcgen::Error> {
    let now = std::time::SystemTime::now();
    let secs = crate::time::unix_secs(now);
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
    let (y, m, d) = civil_date(secs.saturating_add(SELF_SIGNED_DAYS * 86_400));
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
    use crate::testutil::TempDir;

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
    fn cipher_suites_narrow_tls12_and_keep_every_tls13_suite() {
        let all = provider().cipher_suites;
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (kept, lacking) = cipher_suites(&all, &[]);
        assert_eq!((kept.len(), lacking.len()), (all.len(), 0), "none: all");
        let (kept, lacking) = cipher_suites(
            &all,
            &names(&[
                "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
                "TLS_AES_128_GCM_SHA256",
                "TLS_RSA_WITH_AES_128_GCM_SHA256",
            ]),
        );
        let tls12: Vec<_> = kept.iter().filter(|s| s.tls13().is_none()).collect();
        assert_eq!(tls12.len(), 1, "{kept:?}");
        assert_eq!(
            tls12[0].suite(),
            rustls::CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256
        );
        assert_eq!(
            kept.iter().filter(|s| s.tls13().is_some()).count(),
            all.iter().filter(|s| s.tls13().is_some()).count(),
            "TLS 1.3 suites are not configurable"
        );
        assert_eq!(lacking, ["TLS_RSA_WITH_AES_128_GCM_SHA256"]);
        // Every name the config takes is either a rustls suite, TLS 1.3, or reported.
        for name in crate::config::values::TLS_CIPHER_SUITE_NAMES {
            let (_, lacking) = cipher_suites(&all, &names(&[name]));
            let mapped = tls12_suite(name).is_some() || TLS13_NAMES.contains(name);
            assert_eq!(lacking.is_empty(), mapped, "{name}");
            if let Some(suite) = tls12_suite(name) {
                assert!(all.iter().any(|s| s.suite() == suite), "{name} in ring");
            }
        }
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil_date(0), (1970, 1, 1));
        assert_eq!(civil_date(784_111_777), (1994, 11, 6));
    }
}
