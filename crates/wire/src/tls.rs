//! TLS for the authenticated kubelet port: the connection the bounded transport
//! ([`crate::server::http`]) reads and writes, plain TCP or TLS through a
//! `rustls::ServerConnection`; the rustls server configuration built from the TLS
//! settings (versions, `--tls-cipher-suites` mapped from upstream's names, the serving
//! pair and client CA through the resolvers [`crate::tls_reload`] swaps when the files
//! change). The self-signed pair made when no certificate is given is
//! [`crate::selfsigned`].
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
//! client CA for each request ([`Stream::client_cert`], [`crate::client_cert`]).

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::ResolvesServerCert;
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig, ServerConnection};

use crate::client_cert::{self, ClientCa};
use crate::x509::ClientCert;

/// The lowest TLS version the kubelet port accepts (`--tls-min-version`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsVersion {
    /// `VersionTLS12`.
    Tls12,
    /// `VersionTLS13`.
    Tls13,
}

impl TlsVersion {
    /// Upstream's spelling.
    pub fn name(self) -> &'static str {
        match self {
            TlsVersion::Tls12 => "VersionTLS12",
            TlsVersion::Tls13 => "VersionTLS13",
        }
    }
}

/// Upstream's cipher suite names (`--tls-cipher-suites`, `tlsCipherSuites`): Go's
/// `tls.CipherSuites()` and `tls.InsecureCipherSuites()` and the two legacy ChaCha20
/// spellings component-base keeps (`ciphersuites_flag.go`). Which of them the port can
/// use is the TLS code's business; here a name is only known or not.
pub const TLS_CIPHER_SUITE_NAMES: &[&str] = &[
    // TLS 1.3: accepted, not configurable.
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
    // TLS 1.2, ECDHE with AEAD.
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
    // TLS 1.2, the rest Go knows.
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_RSA_WITH_AES_128_CBC_SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_RSA_WITH_RC4_128_SHA",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
];

/// The largest certificate, key or CA bundle file read: real ones are a few KiB.
const MAX_PEM_BYTES: u64 = 1024 * 1024;

/// One open connection of a server: plain TCP (healthz, read-only) or TLS (kubelet).
#[derive(Debug)]
pub(crate) enum Stream {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS over TCP.
    Tls(Box<TlsStream>),
}

/// A TLS connection: the socket, rustls's state for it, and the client CA its
/// certificate is verified against.
#[derive(Debug)]
pub(crate) struct TlsStream {
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
    pub(crate) fn tls(tcp: TcpStream, server: &TlsServer) -> io::Result<Stream> {
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
    pub(crate) fn fd(&self) -> RawFd {
        self.tcp().as_raw_fd()
    }

    /// The socket's descriptor, borrowed, for rustix's `poll(2)`.
    pub(crate) fn as_fd(&self) -> BorrowedFd<'_> {
        self.tcp().as_fd()
    }

    /// Whether TLS records wait to be sent (a handshake reply the socket could not take
    /// at once): the poller then also waits for the socket to be writable.
    pub(crate) fn wants_write(&self) -> bool {
        matches!(self, Stream::Tls(t) if t.tls.wants_write())
    }

    /// Whether decrypted bytes wait inside rustls, which `poll(2)` cannot see.
    pub(crate) fn has_buffered(&mut self) -> bool {
        match self {
            Stream::Plain(_) => false,
            Stream::Tls(t) => t
                .tls
                .process_new_packets()
                .is_ok_and(|s| s.plaintext_bytes_to_read() > 0),
        }
    }

    /// Sets the socket's blocking mode.
    pub(crate) fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.tcp().set_nonblocking(on)
    }

    /// Sets the socket's write timeout.
    pub(crate) fn set_write_timeout(&self, t: Duration) -> io::Result<()> {
        self.tcp().set_write_timeout(Some(t))
    }

    /// Reads request bytes without blocking, as `Read::read` on a non-blocking socket
    /// does: `Ok(0)` when the peer has closed, `WouldBlock` when nothing is there yet
    /// (for TLS also while the handshake is still going on).
    pub(crate) fn read_nonblocking(&mut self, out: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(out),
            Stream::Tls(t) => t.read_nonblocking(out),
        }
    }

    /// Reads and drops raw bytes (a lingering connection: nothing it sends is used).
    pub(crate) fn discard(&mut self, chunk: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(chunk),
            Stream::Tls(t) => t.tcp.read(chunk),
        }
    }

    /// Writes a short answer without blocking (it fits any socket buffer). A TLS
    /// connection whose handshake has not finished cannot carry one: an error, so
    /// the caller closes it.
    pub(crate) fn write_short(&mut self, data: &[u8]) -> io::Result<()> {
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
    pub(crate) fn write_blocking(&mut self, data: &[u8]) -> io::Result<()> {
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
    pub(crate) fn write_nonblocking(&mut self, data: &[u8]) -> io::Result<usize> {
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
    pub(crate) fn flush_nonblocking(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(_) => Ok(()),
            Stream::Tls(t) => t.flush_nonblocking(),
        }
    }

    /// Writes all of `data` on a non-blocking socket (a stream handed over by the
    /// transport), waiting in `poll(2)` whenever the socket is full; `TimedOut` when
    /// no byte could be sent for `timeout`. The socket stays non-blocking, so the same
    /// thread can go on polling it for reads.
    pub(crate) fn write_all_waiting(
        &mut self,
        mut data: &[u8],
        timeout: Duration,
    ) -> io::Result<()> {
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
            if !progress && !wait_writable(self.as_fd(), timeout)? {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the client took nothing for {timeout:?}"),
                ));
            }
        }
    }

    /// Ends the sending side: a TLS `close_notify`, then the TCP half-close.
    pub(crate) fn shutdown_write(&mut self) -> io::Result<()> {
        if let Stream::Tls(t) = self {
            t.tls.send_close_notify();
            let _ = t.flush_nonblocking();
        }
        self.tcp().shutdown(std::net::Shutdown::Write)
    }

    /// The client's certificate chain as the handshake took it, verified now against
    /// the client CA in use; [`ClientCert::Absent`] for plain TCP or a client that
    /// sent none.
    pub(crate) fn client_cert(&self) -> ClientCert {
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
fn wait_writable(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    let mut p = [PollFd::from_borrowed_fd(fd, PollFlags::OUT)];
    let timeout = base::time::poll_timeout(timeout);
    loop {
        match rustix::event::poll(&mut p, Some(&timeout)) {
            Ok(n) => return Ok(n > 0),
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
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
    base::fsutil::read_regular(path, MAX_PEM_BYTES)
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
pub(crate) fn provider() -> rustls::crypto::CryptoProvider {
    rustls::crypto::ring::default_provider()
}

/// The serving pair read from its files, the key checked against the certificate.
pub(crate) fn certified_key(cert: &Path, key: &Path) -> Result<Arc<CertifiedKey>, TlsError> {
    CertifiedKey::from_der(certificates(cert)?, private_key(key)?, &provider())
        .map(Arc::new)
        .map_err(TlsError::Config)
}

/// A verifier of client certificate chains against the CA bundle `ca`, for
/// [`ClientCa`] (which decides what the handshake asks for and lets through).
pub(crate) fn client_verifier(ca: &Path) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
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
pub(crate) fn server_config(
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

#[cfg(test)]
mod tests {
    use super::*;

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
        for name in TLS_CIPHER_SUITE_NAMES {
            let (_, lacking) = cipher_suites(&all, &names(&[name]));
            let mapped = tls12_suite(name).is_some() || TLS13_NAMES.contains(name);
            assert_eq!(lacking.is_empty(), mapped, "{name}");
            if let Some(suite) = tls12_suite(name) {
                assert!(all.iter().any(|s| s.suite() == suite), "{name} in ring");
            }
        }
    }
}
