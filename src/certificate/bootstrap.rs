//! TLS bootstrap's decisions and its one run (upstream
//! `pkg/kubelet/certificate/bootstrap/bootstrap.go`): whether `--kubeconfig` is still
//! good ([`kubeconfig_still_valid`]), and getting the first client certificate with the
//! bootstrap kubeconfig's credentials ([`Bootstrap::run`]), then writing it and the
//! kubeconfig that names it.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

use super::request::request_certificate;
use super::store::{self, CertStore, Pair};
use super::{csr, CertError};
use apiclient::kubeconfig::{self, RestConfig};
use apiclient::ApiClient;
use base::httpclient::servers::TlsSettings;
use base::loops::Stop;

/// How long one bootstrap request waits for approval and issue (upstream: 3600 s).
/// Then the same request (same key, same name) is looked up again.
pub(crate) const BOOTSTRAP_WAIT: Duration = Duration::from_secs(3600);

/// Whether the kubeconfig at `path` can be used as it is (upstream
/// `isClientConfigStillValid`): it exists, loads, carries a client certificate, and no
/// certificate of that chain has expired. Each "no" is logged with its reason. A
/// certificate not valid yet by this node's clock is still valid (the clock is behind).
pub(crate) fn kubeconfig_still_valid(path: &Path, now: SystemTime) -> bool {
    if !path.exists() {
        return false;
    }
    let rest = match kubeconfig::load(path) {
        Ok(r) => r,
        Err(e) => {
            log::warn!(
                "existing kubeconfig cannot be used: {}",
                base::loops::error_chain(&e)
            );
            return false;
        }
    };
    let Some(cert_pem) = rest.tls.cert_pem else {
        log::info!("kubeconfig {} has no client certificate", path.display());
        return false;
    };
    let certs: Vec<CertificateDer<'_>> = CertificateDer::pem_slice_iter(&cert_pem)
        .filter_map(Result::ok)
        .collect();
    if certs.is_empty() {
        log::warn!(
            "kubeconfig {}: no client certificate can be read",
            path.display()
        );
        return false;
    }
    for c in &certs {
        match wire::x509::validity(c) {
            Some((not_before, not_after)) if now <= not_after => {
                // Not valid yet by this clock: the clock is behind (a board without an
                // RTC), not the certificate wrong. It is kept, as upstream keeps it
                // (`isClientConfigStillValid` reads only notAfter): bootstrapping again
                // would get a certificate just as "not yet valid".
                if now < not_before {
                    log::warn!(
                        "{} Kubeconfig {} is kept.",
                        base::clock::behind_line("the client", Some(not_before), now),
                        path.display()
                    );
                }
            }
            Some((_, not_after)) => {
                log::info!(
                    "part of the client certificate of kubeconfig {} expired at {}",
                    path.display(),
                    store::stamp(not_after)
                );
                return false;
            }
            None => {
                log::warn!(
                    "kubeconfig {}: the client certificate's validity cannot be read",
                    path.display()
                );
                return false;
            }
        }
    }
    true
}

/// A TLS bootstrap to run: the bootstrap kubeconfig and where to write the new one.
#[derive(Debug, Clone)]
pub(crate) struct Bootstrap {
    /// The bootstrap kubeconfig, with its credentials.
    rest: RestConfig,
    /// Its cluster alone (server and CA), what the kubelet's client and the written
    /// kubeconfig use.
    cluster: RestConfig,
    /// `--kubeconfig`, to write.
    kubeconfig: PathBuf,
}

impl Bootstrap {
    /// A bootstrap with the credentials of `rest`, writing `kubeconfig`.
    pub(crate) fn new(rest: RestConfig, kubeconfig: &Path) -> Bootstrap {
        let cluster = RestConfig {
            server: rest.server.clone(),
            tls: TlsSettings {
                ca_pem: rest.tls.ca_pem.clone(),
                insecure: rest.tls.insecure,
                cert_pem: None,
                key_pem: None,
            },
            auth: Default::default(),
        };
        Bootstrap {
            rest,
            cluster,
            kubeconfig: kubeconfig.to_path_buf(),
        }
    }

    /// The bootstrap kubeconfig's cluster, without credentials.
    pub(crate) fn cluster(&self) -> &RestConfig {
        &self.cluster
    }

    /// One bootstrap attempt: the cached key (or a new one), its CSR under its digested
    /// name (found again if it already exists), waited for up to [`BOOTSTRAP_WAIT`];
    /// then the pair is written to the store and the kubeconfig to `--kubeconfig`.
    pub(crate) fn run(
        &self,
        store: &CertStore,
        node_name: &str,
        stop: &Stop,
    ) -> Result<Pair, CertError> {
        let client = ApiClient::new(self.rest.clone()).map_err(CertError::client)?;
        let key = store.load_or_generate_bootstrap_key()?;
        let name = csr::digested_name(&key.public_key_der(), node_name, &csr::USAGES);
        let cert_pem =
            request_certificate(&client, &key, node_name, Some(&name), BOOTSTRAP_WAIT, stop)?;
        let pair = Pair {
            cert_pem,
            key_pem: key.serialize_pem().into_bytes(),
        };
        let written = store.update(&pair, SystemTime::now())?;
        store.remove_bootstrap_key();
        store::write_kubeconfig(&self.kubeconfig, &self.cluster, &store.current_path())?;
        log::info!(
            "TLS bootstrap done: client certificate {} ({}), kubeconfig {} written",
            written.display(),
            store::describe(&pair),
            self.kubeconfig.display()
        );
        Ok(pair)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base::testutil::TempDir;

    /// A kubeconfig with a client certificate valid from the start of one year to the
    /// start of another.
    fn kubeconfig_with_cert(dir: &TempDir, name: &str, from: i32, to: i32) -> PathBuf {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(vec!["n".to_string()]).expect("params");
        params.not_before = rcgen::date_time_ymd(from, 1, 1);
        params.not_after = rcgen::date_time_ymd(to, 1, 1);
        let cert = params.self_signed(&key).expect("cert");
        dir.kubeconfig_with_pair(name, &cert.pem(), &key.serialize_pem())
    }

    #[test]
    fn only_a_kubeconfig_with_an_unexpired_certificate_skips_bootstrap() {
        let dir = TempDir::new("bootstrapvalid");
        let now = SystemTime::now();
        assert!(!kubeconfig_still_valid(&dir.0.join("missing"), now));
        let good = kubeconfig_with_cert(&dir, "good", 2000, 2099);
        assert!(kubeconfig_still_valid(&good, now));
        let expired = kubeconfig_with_cert(&dir, "expired", 2000, 2001);
        assert!(!kubeconfig_still_valid(&expired, now));
        let token_only = dir.write(
            "token",
            "clusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:1'}\n\
             users:\n- name: u\n  user: {token: abc}\n\
             contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n",
        );
        assert!(!kubeconfig_still_valid(&token_only, now), "no certificate");
        let broken = dir.write("broken", "not: [a kubeconfig");
        assert!(!kubeconfig_still_valid(&broken, now));
    }

    #[test]
    fn a_certificate_not_yet_valid_by_a_clock_behind_skips_bootstrap() {
        // The clock a year behind the one that issued the certificate: it is kept, not
        // bootstrapped again (which would give a certificate just as "not yet valid").
        let dir = TempDir::new("bootstrapclock");
        let issued_in_2027 = kubeconfig_with_cert(&dir, "future", 2027, 2028);
        let clock_behind = SystemTime::UNIX_EPOCH + Duration::from_secs(1_764_547_200);
        assert!(kubeconfig_still_valid(&issued_in_2027, clock_behind));
        let in_1970 = SystemTime::UNIX_EPOCH;
        assert!(kubeconfig_still_valid(&issued_in_2027, in_1970));
    }

    #[test]
    fn the_bootstrap_client_keeps_the_cluster_and_drops_the_credentials() {
        let rest = RestConfig {
            server: "https://s:6443".into(),
            tls: TlsSettings {
                ca_pem: Some(b"CA".to_vec()),
                cert_pem: Some(b"C".to_vec()),
                key_pem: Some(b"K".to_vec()),
                insecure: false,
            },
            auth: apiclient::kubeconfig::Auth {
                token: Some("abcdef.0123456789abcdef".into()),
                ..Default::default()
            },
        };
        let b = Bootstrap::new(rest, Path::new("/etc/kubelet.conf"));
        assert_eq!(b.cluster().server, "https://s:6443");
        assert_eq!(b.cluster().tls.ca_pem.as_deref(), Some(&b"CA"[..]));
        assert_eq!(b.cluster().tls.cert_pem, None);
        assert_eq!(b.cluster().auth.token, None);
    }
}
