//! The host's trusted certificate authorities, for a server whose CA is not configured
//! (an https manifest URL; an etcd or API server given without a CA file). Found as
//! Go's `crypto/x509` finds them on Linux, so rkubelet trusts what upstream's kubelet
//! on the same host trusts, a private CA added to the system store included, rather
//! than a bundle compiled into the binary: `$SSL_CERT_FILE`, else the first of the
//! distributions' bundle files that can be read; then every file of the directories
//! in `$SSL_CERT_DIR` (colon-separated), else of `/etc/ssl/certs` and
//! `/etc/pki/tls/certs`, skipping links to a file of the same directory (the hashed
//! names `c_rehash` makes). A certificate found twice is kept once.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use ureq::tls::{Certificate, PemItem};

/// Go's `certFiles` for Linux, in its order.
const BUNDLE_FILES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt", // Debian, Ubuntu, Gentoo, Arch
    "/etc/pki/tls/certs/ca-bundle.crt",   // Fedora, RHEL 6
    "/etc/ssl/ca-bundle.pem",             // openSUSE
    "/etc/pki/tls/cacert.pem",            // OpenELEC
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", // CentOS, RHEL 7
    "/etc/ssl/cert.pem",                  // Alpine
];

/// Go's `certDirectories` for Linux.
const CERT_DIRS: &[&str] = &["/etc/ssl/certs", "/etc/pki/tls/certs"];

/// Where the CAs are looked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Locations {
    /// Bundle files: the first one read is used.
    pub files: Vec<PathBuf>,
    /// Directories: every file of each is read.
    pub dirs: Vec<PathBuf>,
}

impl Locations {
    /// This host's, as the environment says (`SSL_CERT_FILE`, `SSL_CERT_DIR`).
    pub(crate) fn from_env() -> Locations {
        Locations::from_vars(
            std::env::var_os("SSL_CERT_FILE").map(PathBuf::from),
            std::env::var("SSL_CERT_DIR").ok(),
        )
    }

    fn from_vars(file: Option<PathBuf>, dirs: Option<String>) -> Locations {
        let files = match file.filter(|f| !f.as_os_str().is_empty()) {
            Some(f) => vec![f],
            None => BUNDLE_FILES.iter().map(PathBuf::from).collect(),
        };
        let dirs = match dirs.filter(|d| !d.is_empty()) {
            Some(d) => d
                .split(':')
                .filter(|d| !d.is_empty())
                .map(PathBuf::from)
                .collect(),
            None => CERT_DIRS.iter().map(PathBuf::from).collect(),
        };
        Locations { files, dirs }
    }

    /// The certificates found; empty when there are none (a host without its CA
    /// package: every server then needs its CA configured).
    pub(crate) fn load(&self) -> Vec<Certificate<'static>> {
        let mut found = Found::default();
        for file in &self.files {
            if let Ok(pem) = std::fs::read(file) {
                found.add(&pem);
                break;
            }
        }
        for dir in &self.dirs {
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if links_within(&path) {
                    continue;
                }
                if let Ok(pem) = std::fs::read(&path) {
                    found.add(&pem);
                }
            }
        }
        log::debug!(
            "{} trusted CA certificate(s) from the host ({:?}, {:?})",
            found.certs.len(),
            self.files,
            self.dirs
        );
        if found.certs.is_empty() {
            log::warn!(
                "no trusted CA certificate found on this host (looked in {:?} and {:?}; \
                 SSL_CERT_FILE and SSL_CERT_DIR choose others): a server whose CA is \
                 not configured cannot be verified",
                self.files,
                self.dirs
            );
        }
        found.certs
    }
}

#[derive(Default)]
struct Found {
    certs: Vec<Certificate<'static>>,
    seen: HashSet<Vec<u8>>,
}

impl Found {
    /// The certificates of a PEM file; other blocks (keys, CRLs) and broken ones are
    /// skipped, as Go's `AppendCertsFromPEM` skips them.
    fn add(&mut self, pem: &[u8]) {
        for item in ureq::tls::parse_pem(pem) {
            if let Ok(PemItem::Certificate(c)) = item {
                if self.seen.insert(c.der().to_vec()) {
                    self.certs.push(c);
                }
            }
        }
    }
}

/// A symbolic link to a file of its own directory (a target without a `/`), as Go's
/// `isSameDirSymlink`.
fn links_within(path: &Path) -> bool {
    std::fs::read_link(path)
        .is_ok_and(|target| !target.as_os_str().as_encoded_bytes().contains(&b'/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ca(name: &str) -> String {
        let mut params = rcgen::CertificateParams::new(Vec::new()).expect("params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let key = rcgen::KeyPair::generate().expect("key");
        params.self_signed(&key).expect("cert").pem()
    }

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rkubelet-roots-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("dir");
        d
    }

    #[test]
    fn the_environment_chooses_the_places() {
        let host = Locations::from_vars(None, None);
        assert_eq!(
            host.files[0],
            PathBuf::from("/etc/ssl/certs/ca-certificates.crt")
        );
        assert_eq!(host.files.len(), 6);
        assert_eq!(
            host.dirs,
            [
                PathBuf::from("/etc/ssl/certs"),
                PathBuf::from("/etc/pki/tls/certs")
            ]
        );
        let set = Locations::from_vars(Some("/tmp/ca.pem".into()), Some("/a::/b".into()));
        assert_eq!(set.files, [PathBuf::from("/tmp/ca.pem")]);
        assert_eq!(set.dirs, [PathBuf::from("/a"), PathBuf::from("/b")]);
        // Set but empty is unset, as in Go.
        assert_eq!(Locations::from_vars(Some("".into()), Some("".into())), host);
    }

    #[test]
    fn first_readable_bundle_then_every_directory_file_once() {
        let d = dir("load");
        let (a, b, c, unused) = (ca("a"), ca("b"), ca("c"), ca("unused"));
        std::fs::write(d.join("bundle.pem"), format!("{a}{b}")).expect("write");
        std::fs::write(d.join("second-bundle.pem"), &unused).expect("write");
        let certs = d.join("certs");
        std::fs::create_dir_all(&certs).expect("dir");
        // A file repeating a bundle certificate, one new, a hashed link to the new one
        // (skipped), a key and junk (no certificate in them).
        std::fs::write(certs.join("a.pem"), &a).expect("write");
        std::fs::write(certs.join("c.pem"), &c).expect("write");
        std::os::unix::fs::symlink("c.pem", certs.join("5ad8a5d6.0")).expect("link");
        std::fs::write(
            certs.join("key.pem"),
            rcgen::KeyPair::generate().expect("key").serialize_pem(),
        )
        .expect("write");
        std::fs::write(certs.join("README"), "not a certificate").expect("write");
        let loc = Locations {
            files: vec![
                d.join("missing.pem"),
                d.join("bundle.pem"),
                d.join("second-bundle.pem"),
            ],
            dirs: vec![certs, d.join("no-such-dir")],
        };
        let mut got: Vec<Vec<u8>> = loc.load().iter().map(|c| c.der().to_vec()).collect();
        let der = |pem: &str| match ureq::tls::parse_pem(pem.as_bytes()).next() {
            Some(Ok(PemItem::Certificate(c))) => c.der().to_vec(),
            _ => panic!("a certificate"),
        };
        let mut want = vec![der(&a), der(&b), der(&c)];
        crate::sort::sort(&mut got);
        crate::sort::sort(&mut want);
        assert_eq!(got, want);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn nothing_found_is_an_empty_store() {
        let d = dir("none");
        let loc = Locations {
            files: vec![d.join("missing.pem")],
            dirs: vec![d.clone()],
        };
        assert!(loc.load().is_empty());
        let _ = std::fs::remove_dir_all(&d);
    }
}
