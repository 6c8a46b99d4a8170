//! The client certificates on disk, as client-go's `util/certificate` file store keeps
//! them in `--cert-dir`: each issued pair (certificate, then key) in its own
//! `kubelet-client-<YYYY-MM-DD-HH-MM-SS>.pem` (mode 0600), and the symlink
//! `kubelet-client-current.pem` naming the one in use, swapped with a rename so a reader
//! never finds it missing. Also the kubeconfig TLS bootstrap writes (upstream
//! `writeKubeconfigFromBootstrapping`): the bootstrap kubeconfig's cluster, and
//! `kubelet-client-current.pem` as both client certificate and key, so the kubeconfig
//! stays right across rotations.

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use base64::Engine as _;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

use super::CertError;
use apiclient::kubeconfig::RestConfig;

/// The store's file name prefix (upstream's pair name `kubelet-client`).
pub(crate) const PAIR_NAME: &str = "kubelet-client";
/// The bootstrap key, kept until its certificate is issued, so a kubelet restarted
/// while it waits asks again with the same key (and finds its own CSR by name).
pub(crate) const BOOTSTRAP_KEY_FILE: &str = "kubelet-client.key.tmp";

/// A certificate chain and its key, PEM.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Pair {
    /// The certificate, then any intermediates.
    pub cert_pem: Vec<u8>,
    /// The private key.
    pub key_pem: Vec<u8>,
}

impl std::fmt::Debug for Pair {
    // The key is a secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pair({} bytes of certificate)", self.cert_pem.len())
    }
}

/// The client certificate files of one `--cert-dir`.
#[derive(Debug, Clone)]
pub(crate) struct CertStore {
    dir: PathBuf,
}

impl CertStore {
    /// The store in `dir` (created on the first write).
    pub(crate) fn new(dir: &Path) -> CertStore {
        CertStore {
            dir: dir.to_path_buf(),
        }
    }

    /// `<dir>/kubelet-client-current.pem`.
    pub(crate) fn current_path(&self) -> PathBuf {
        self.dir.join(format!("{PAIR_NAME}-current.pem"))
    }

    /// `<dir>/kubelet-client.key.tmp`.
    pub(crate) fn bootstrap_key_path(&self) -> PathBuf {
        self.dir.join(BOOTSTRAP_KEY_FILE)
    }

    /// The file name of a pair written at `now`: `kubelet-client-2026-11-30-23-59-01.pem`
    /// (UTC).
    pub(crate) fn file_name(now: SystemTime) -> String {
        // By hand rather than jiff's strftime, whose format interpreter this was the
        // binary's only use of.
        let t = k8s_openapi::jiff::tz::Offset::UTC.to_datetime(base::time::k8s_time(now).0);
        format!(
            "{PAIR_NAME}-{:04}-{:02}-{:02}-{:02}-{:02}-{:02}.pem",
            t.year(),
            t.month(),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        )
    }

    /// The pair `kubelet-client-current.pem` holds, None when there is none.
    pub(crate) fn current(&self) -> Result<Option<Pair>, CertError> {
        let path = self.current_path();
        match fs::read(&path) {
            Ok(bytes) => split_pair(&bytes)
                .map(Some)
                .ok_or(CertError::BadPair { path }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(CertError::Io { path, source }),
        }
    }

    /// Writes `pair` to a new timestamped file (0600) and points
    /// `kubelet-client-current.pem` at it; returns the new file.
    pub(crate) fn update(&self, pair: &Pair, now: SystemTime) -> Result<PathBuf, CertError> {
        make_dir(&self.dir)?;
        let name = Self::file_name(now);
        let path = self.dir.join(&name);
        let mut bytes = pair.cert_pem.clone();
        if !bytes.ends_with(b"\n") {
            bytes.push(b'\n');
        }
        bytes.extend_from_slice(&pair.key_pem);
        write_private(&path, &bytes)?;
        // A new link beside the old one, renamed over it: the swap is atomic. The target
        // is the bare file name, so the link stays right if the directory moves.
        let current = self.current_path();
        let tmp = self.dir.join(format!("{PAIR_NAME}-current.pem.tmp"));
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| CertError::Io { path, source }
        };
        match fs::remove_file(&tmp) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&tmp)(e)),
            _ => {}
        }
        std::os::unix::fs::symlink(&name, &tmp).map_err(io(&tmp))?;
        fs::rename(&tmp, &current).map_err(io(&current))?;
        Ok(path)
    }

    /// The cached bootstrap key (PEM), or a new one written there (0600).
    pub(crate) fn load_or_generate_bootstrap_key(&self) -> Result<rcgen::KeyPair, CertError> {
        let path = self.bootstrap_key_path();
        match fs::read_to_string(&path) {
            Ok(pem) => match rcgen::KeyPair::from_pem(&pem) {
                Ok(key) => return Ok(key),
                Err(e) => log::warn!(
                    "bootstrap key {} cannot be used ({e}); making a new one",
                    path.display()
                ),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(CertError::Io { path, source }),
        }
        let key = super::csr::generate_key().map_err(CertError::Key)?;
        make_dir(&self.dir)?;
        write_private(&path, key.serialize_pem().as_bytes())?;
        Ok(key)
    }

    /// Removes the cached bootstrap key (its certificate is issued).
    pub(crate) fn remove_bootstrap_key(&self) {
        let path = self.bootstrap_key_path();
        if let Err(e) = fs::remove_file(&path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                log::warn!("cannot remove {}: {e}", path.display());
            }
        }
    }
}

/// The validity window of a pair's (first) certificate.
pub(crate) fn validity(pair: &Pair) -> Option<(SystemTime, SystemTime)> {
    let der = CertificateDer::pem_slice_iter(&pair.cert_pem)
        .next()?
        .ok()?;
    wire::x509::validity(&der)
}

/// Whether two PEM texts start with the same certificate (a kubeconfig's client
/// certificate file may hold the key too).
pub(crate) fn same_certificate(a: &[u8], b: &[u8]) -> bool {
    let first = |pem: &[u8]| {
        CertificateDer::pem_slice_iter(pem)
            .next()
            .and_then(Result::ok)
            .map(|c| c.as_ref().to_vec())
    };
    matches!((first(a), first(b)), (Some(x), Some(y)) if x == y)
}

/// Whether a pair's certificate has not expired at `now`. Only notAfter counts: a
/// certificate not valid yet at `now` means the clock is behind, and is kept.
pub(crate) fn not_expired(pair: &Pair, now: SystemTime) -> bool {
    validity(pair).is_some_and(|(_, not_after)| now <= not_after)
}

/// RFC 3339 (seconds) of a time, for log lines.
pub(crate) fn stamp(t: SystemTime) -> String {
    base::time::k8s_time(t).0.to_string()
}

/// A pair's validity for a log line.
pub(crate) fn describe(pair: &Pair) -> String {
    match validity(pair) {
        Some((from, to)) => format!("valid {} to {}", stamp(from), stamp(to)),
        None => "validity unreadable".into(),
    }
}

/// Splits a PEM file into its certificates and its (one) private key.
pub(crate) fn split_pair(bytes: &[u8]) -> Option<Pair> {
    let text = std::str::from_utf8(bytes).ok()?;
    let (mut certs, mut key) = (String::new(), None::<String>);
    let mut block: Option<(String, String)> = None;
    for line in text.lines() {
        let line = line.trim_end();
        if let Some(label) = line
            .strip_prefix("-----BEGIN ")
            .and_then(|l| l.strip_suffix("-----"))
        {
            block = Some((label.to_string(), format!("{line}\n")));
            continue;
        }
        let Some((label, body)) = block.as_mut() else {
            continue;
        };
        body.push_str(line);
        body.push('\n');
        if line.starts_with("-----END ") {
            if label == "CERTIFICATE" {
                certs.push_str(body);
            } else if label.ends_with("PRIVATE KEY") && key.is_none() {
                key = Some(body.clone());
            }
            block = None;
        }
    }
    Some(Pair {
        cert_pem: Some(certs).filter(|c| !c.is_empty())?.into_bytes(),
        key_pem: key?.into_bytes(),
    })
}

/// Writes the kubeconfig TLS bootstrap leaves behind at `path` (0600, through a
/// rename): `cluster`'s server and CA (inline) or `insecure-skip-tls-verify`, and
/// `pem_path` as both client certificate and key.
pub(crate) fn write_kubeconfig(
    path: &Path,
    cluster: &RestConfig,
    pem_path: &Path,
) -> Result<(), CertError> {
    let text = kubeconfig_text(cluster, pem_path);
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        make_dir(parent)?;
    }
    let tmp = path.with_extension("tmp");
    write_private(&tmp, text.as_bytes())?;
    fs::rename(&tmp, path).map_err(|source| CertError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// The kubeconfig's text: upstream's names (`default-cluster`, `default-auth`,
/// `default-context`, namespace `default`). Written by hand: the shape is fixed and
/// every value is a [`yaml_quoted`] scalar, so nothing depends on YAML's rules for plain
/// scalars, and the binary carries no YAML emitter (this was its only use outside
/// tests; serde_norway's serializer and libyaml's emitter cost ~40 KiB).
fn kubeconfig_text(cluster: &RestConfig, pem_path: &Path) -> String {
    let mut c = String::new();
    if let Some(ca) = &cluster.tls.ca_pem {
        let data = base64::engine::general_purpose::STANDARD.encode(ca);
        c += &format!("    certificate-authority-data: {}\n", yaml_quoted(&data));
    }
    if cluster.tls.insecure {
        c += "    insecure-skip-tls-verify: true\n";
    }
    c += &format!("    server: {}\n", yaml_quoted(&cluster.server));
    let pem = yaml_quoted(&pem_path.display().to_string());
    // The lines sit at the left margin: their indentation is YAML's.
    format!(
        "\
apiVersion: v1
clusters:
- cluster:
{c}  name: default-cluster
contexts:
- context:
    cluster: default-cluster
    namespace: default
    user: default-auth
  name: default-context
current-context: default-context
kind: Config
users:
- name: default-auth
  user:
    client-certificate: {pem}
    client-key: {pem}
"
    )
}

/// `s` as a YAML double-quoted scalar: `"` and `\` escaped, and every character YAML
/// does not allow unescaped (controls, DEL, C1, U+FEFF, U+FFFE, U+FFFF) as `\uXXXX`;
/// the separators U+2028/U+2029 too, which YAML 1.1 readers take as line breaks.
fn yaml_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control()
                || matches!(
                    c,
                    '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}'
                ) =>
            {
                out.push_str(&format!("\\u{:04x}", u32::from(c)));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn make_dir(dir: &Path) -> Result<(), CertError> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| CertError::Io {
            path: dir.to_path_buf(),
            source,
        })
}

/// Writes a file only its owner may read (it holds a private key).
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), CertError> {
    let io = |source| CertError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(io)?;
    f.write_all(bytes).map_err(io)?;
    f.sync_all().map_err(io)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::time::Duration;

    use super::*;
    use base::testutil::TempDir;

    const CERT: &str = "-----BEGIN CERTIFICATE-----\nQUJD\n-----END CERTIFICATE-----\n";
    const KEY: &str = "-----BEGIN PRIVATE KEY-----\nREVG\n-----END PRIVATE KEY-----\n";

    fn pair() -> Pair {
        Pair {
            cert_pem: CERT.into(),
            key_pem: KEY.into(),
        }
    }

    #[test]
    fn file_names_are_the_utc_time_of_the_write() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_083_141);
        assert_eq!(
            CertStore::file_name(t),
            "kubelet-client-2026-11-30-23-59-01.pem"
        );
    }

    #[test]
    fn update_writes_a_private_file_and_swaps_the_current_link() {
        let dir = TempDir::new("certstore");
        let store = CertStore::new(&dir.0.join("pki"));
        assert_eq!(store.current().expect("read"), None);
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_083_141);
        let first = store.update(&pair(), t0).expect("write");
        assert_eq!(
            first,
            dir.0.join("pki/kubelet-client-2026-11-30-23-59-01.pem")
        );
        let mode = fs::metadata(&first).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            fs::read_to_string(&first).expect("read"),
            format!("{CERT}{KEY}")
        );
        assert_eq!(store.current().expect("read"), Some(pair()));

        let second = Pair {
            cert_pem: CERT.replace("QUJD", "R0hJ").into(),
            key_pem: KEY.into(),
        };
        let new = store
            .update(&second, t0 + Duration::from_secs(60))
            .expect("write");
        assert_eq!(
            fs::read_link(store.current_path()).expect("link"),
            Path::new("kubelet-client-2026-12-01-00-00-01.pem")
        );
        assert_eq!(store.current().expect("read"), Some(second));
        assert!(first.exists() && new.exists(), "the old file is kept");
    }

    #[test]
    fn split_pair_takes_every_certificate_and_the_key() {
        let text = format!("{CERT}{}{KEY}", CERT.replace("QUJD", "WFla"));
        let p = split_pair(text.as_bytes()).expect("pair");
        assert_eq!(p.key_pem, KEY.as_bytes());
        assert_eq!(
            String::from_utf8(p.cert_pem)
                .expect("utf8")
                .matches("BEGIN CERTIFICATE")
                .count(),
            2
        );
        assert_eq!(split_pair(CERT.as_bytes()), None, "no key");
        assert_eq!(split_pair(KEY.as_bytes()), None, "no certificate");
    }

    #[test]
    fn quoted_scalars_read_back_as_the_same_string() {
        for s in [
            "plain",
            "https://[::1]:6443/x?y=z#w",
            "a: b # c",
            "\"q\" \\ back",
            "tab\tnew\nline\r\u{7f}\u{85}\u{2028}\u{feff}",
            "ünï 日本",
            "",
            "- x",
            "yes",
            "0755",
        ] {
            let q = yaml_quoted(s);
            let back: String = serde_norway::from_str(&q).expect("valid YAML");
            assert_eq!(back, s, "{q}");
        }
        assert_eq!(yaml_quoted("a\"b\\c\u{1}"), "\"a\\\"b\\\\c\\u0001\"");
    }

    #[test]
    fn the_kubeconfig_names_the_cluster_and_the_current_pair() {
        let dir = TempDir::new("kubeconfig");
        let ca = wire::selfsigned::self_signed("ca", "127.0.0.1")
            .expect("pair")
            .0;
        let cluster = RestConfig {
            server: "https://10.0.0.1:6443/a path: #x".into(),
            tls: base::httpclient::servers::TlsSettings {
                ca_pem: Some(ca.clone().into_bytes()),
                ..Default::default()
            },
            auth: Default::default(),
        };
        let store = CertStore::new(&dir.0);
        let pki = wire::selfsigned::self_signed("node", "127.0.0.1").expect("pair");
        store
            .update(
                &Pair {
                    cert_pem: pki.0.into_bytes(),
                    key_pem: pki.1.into_bytes(),
                },
                SystemTime::now(),
            )
            .expect("pair");
        let path = dir.0.join("etc/kubelet.conf");
        write_kubeconfig(&path, &cluster, &store.current_path()).expect("write");
        let mode = fs::metadata(&path).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let text = fs::read_to_string(&path).expect("read");
        assert!(text.contains("current-context: default-context"), "{text}");
        // It reads back as a kubeconfig with the CA and the pair from the store.
        let back = apiclient::kubeconfig::load(&path).expect("valid kubeconfig");
        assert_eq!(back.server, "https://10.0.0.1:6443/a path: #x");
        assert_eq!(back.tls.ca_pem, Some(ca.into_bytes()));
        // Both name the one file (which TLS reads for its certificates and its key).
        let current = fs::read(store.current_path()).expect("read");
        assert_eq!(back.tls.cert_pem, Some(current.clone()));
        assert_eq!(back.tls.key_pem, Some(current));
    }

    #[test]
    fn validity_and_expiry_of_a_pair() {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(vec!["n".to_string()]).expect("params");
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2030, 1, 1);
        let cert = params.self_signed(&key).expect("cert");
        let pair = Pair {
            cert_pem: cert.pem().into_bytes(),
            key_pem: key.serialize_pem().into_bytes(),
        };
        let (from, to) = validity(&pair).expect("validity");
        assert_eq!(stamp(from), "2020-01-01T00:00:00Z");
        assert_eq!(stamp(to), "2030-01-01T00:00:00Z");
        let with_key = [pair.cert_pem.clone(), pair.key_pem.clone()].concat();
        assert!(same_certificate(&with_key, &pair.cert_pem));
        assert!(!same_certificate(b"junk", b"junk"), "no certificate");
        assert!(not_expired(
            &pair,
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
        ));
        assert!(!not_expired(
            &pair,
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_900_000_000)
        ));
        // Before notBefore (the clock behind, 1970 on a board without an RTC) it is
        // not expired: kept, and used, never thrown away for a new one.
        assert!(not_expired(&pair, SystemTime::UNIX_EPOCH));
        assert_eq!(
            describe(&pair),
            "valid 2020-01-01T00:00:00Z to 2030-01-01T00:00:00Z"
        );
    }
}
