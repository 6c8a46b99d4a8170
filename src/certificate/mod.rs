//! The kubelet's client certificate: TLS bootstrap and rotation (upstream
//! `pkg/kubelet/certificate` and its `bootstrap` package, over client-go's
//! `util/certificate` manager and `util/certificate/csr`).
//!
//! [`prepare`] decides at start-up which client the kubelet talks to the API server
//! with. With `--bootstrap-kubeconfig` and a `--kubeconfig` that is missing or whose
//! client certificate is expired or unusable, the client is made for the bootstrap
//! kubeconfig's cluster without an identity ([`apiclient::ApiClient::awaiting_identity`])
//! and the `client-cert` thread ([`manager`]) obtains one: a new ECDSA key, a
//! `certificates.k8s.io/v1` CSR posted with the bootstrap credentials, its approval and
//! certificate waited for, the pair written to `--cert-dir` ([`store`]) and the
//! kubeconfig to `--kubeconfig`; then the client uses it. Everything else starts at
//! once: static pods never wait for the cluster (upstream blocks start-up until the
//! certificate is issued). A denied or failed CSR ends the process with that error, as
//! upstream's start-up does.
//!
//! With `--rotate-certificates` the same thread then rotates the certificate at 70–90 %
//! of its lifetime, asking with the current one, and hands each new pair to the running
//! client; a failed rotation keeps the current certificate and tries again with backoff.

pub(crate) mod bootstrap;
pub(crate) mod csr;
pub(crate) mod manager;
pub(crate) mod request;
pub(crate) mod store;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use apiclient::kubeconfig::{self, KubeconfigError};
use apiclient::{ApiClient, ApiError};

pub(crate) use manager::ClientCertManager;
pub(crate) use store::{CertStore, Pair};

/// Why a client certificate could not be had.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CertError {
    /// `--bootstrap-kubeconfig` is given without `--kubeconfig`.
    #[error(
        "--bootstrap-kubeconfig needs --kubeconfig (where the kubeconfig with the \
             issued client certificate is written)"
    )]
    NoKubeconfig,
    /// A kubeconfig cannot be used. Its message is the error's own: it names the file.
    #[error(transparent)]
    Kubeconfig(KubeconfigError),
    /// The API client cannot be built (boxed: ureq's errors are large). Its message is
    /// the error's own: it names the server.
    #[error(transparent)]
    Client(Box<ApiError>),
    /// A key or request could not be made.
    #[error("cannot make the client key or request")]
    Key(#[source] rcgen::Error),
    /// A file of the store could not be read or written.
    #[error("{path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A pair file does not hold a certificate and a key.
    #[error("{path}: not a PEM certificate followed by its private key")]
    BadPair {
        /// The file.
        path: PathBuf,
    },
    /// A call about a CSR failed.
    #[error("certificate signing request {csr}")]
    Api {
        /// The CSR's name (or `generateName` prefix).
        csr: String,
        /// The cause (boxed: ureq's errors are large).
        source: Box<ApiError>,
    },
    /// An approver denied the CSR.
    #[error("certificate signing request {csr} is denied, reason: {reason}, message: {message}")]
    Denied {
        /// The CSR.
        csr: String,
        /// The Denied condition's reason.
        reason: String,
        /// Its message.
        message: String,
    },
    /// The signer failed to issue the certificate.
    #[error("certificate signing request {csr} failed, reason: {reason}, message: {message}")]
    Failed {
        /// The CSR.
        csr: String,
        /// The Failed condition's reason.
        reason: String,
        /// Its message.
        message: String,
    },
    /// The CSR was not issued within the wait.
    #[error("certificate signing request {csr} was not approved and issued within {}s", .waited.as_secs())]
    Timeout {
        /// The CSR.
        csr: String,
        /// How long was waited.
        waited: Duration,
    },
    /// The CSR or its certificate is not what was asked for.
    #[error("certificate signing request {csr}: {why}")]
    Unusable {
        /// The CSR.
        csr: String,
        /// What is wrong.
        why: &'static str,
    },
    /// Shutdown began while waiting.
    #[error("stopped while waiting for a client certificate")]
    Stopped,
}

impl CertError {
    /// [`CertError::Client`] of `e`.
    pub(crate) fn client(e: ApiError) -> CertError {
        CertError::Client(Box::new(e))
    }
}

/// The API client the kubelet starts with, and the `client-cert` thread to start when
/// there is a certificate to obtain or rotate.
#[derive(Debug)]
pub(crate) struct Prepared {
    /// The client every part of the kubelet shares.
    pub client: Arc<ApiClient>,
    /// Bootstrap and/or rotation, to start once the loops exist.
    pub manager: Option<ClientCertManager>,
}

/// The flags this module reads.
#[derive(Debug, Clone)]
pub(crate) struct Settings<'a> {
    /// `--kubeconfig`.
    pub kubeconfig: &'a Path,
    /// `--bootstrap-kubeconfig`.
    pub bootstrap_kubeconfig: Option<&'a Path>,
    /// `--cert-dir`.
    pub cert_dir: &'a Path,
    /// The node's name.
    pub node_name: &'a str,
    /// `--rotate-certificates`.
    pub rotate: bool,
}

/// Decides how the kubelet authenticates to the API server (upstream
/// `bootstrap.LoadClientCert`, then `buildKubeletClientConfig`): no bootstrap kubeconfig,
/// or a `--kubeconfig` still valid → its client (with rotation: the store's newer
/// certificate if there is one); else a client waiting for the certificate TLS
/// bootstrap will obtain. Only files are read here; nothing is sent.
pub(crate) fn prepare(s: &Settings<'_>) -> Result<Prepared, CertError> {
    let store = CertStore::new(s.cert_dir);
    let now = SystemTime::now();
    if let Some(bootstrap_path) = s.bootstrap_kubeconfig {
        if !bootstrap::kubeconfig_still_valid(s.kubeconfig, now) {
            log::info!(
                "using the bootstrap kubeconfig {} to obtain a client certificate and write {}",
                bootstrap_path.display(),
                s.kubeconfig.display()
            );
            let rest = kubeconfig::load(bootstrap_path).map_err(CertError::Kubeconfig)?;
            let plan = bootstrap::Bootstrap::new(rest, s.kubeconfig);
            let client =
                ApiClient::awaiting_identity(plan.cluster().clone()).map_err(CertError::client)?;
            let client = Arc::new(client);
            let manager = ClientCertManager::new(client.clone(), store, s.node_name, s.rotate)
                .with_bootstrap(plan);
            return Ok(Prepared {
                client,
                manager: Some(manager),
            });
        }
        log::debug!(
            "kubeconfig {} exists and is valid, skipping bootstrap",
            s.kubeconfig.display()
        );
    }
    let rest = kubeconfig::load(s.kubeconfig).map_err(CertError::Kubeconfig)?;
    let kubeconfig_pair = match (&rest.tls.cert_pem, &rest.tls.key_pem) {
        (Some(c), Some(k)) => Some(Pair {
            cert_pem: c.clone(),
            key_pem: k.clone(),
        }),
        _ => None,
    };
    let client = Arc::new(ApiClient::new(rest).map_err(CertError::client)?);
    if !s.rotate {
        return Ok(Prepared {
            client,
            manager: None,
        });
    }
    // Rotation: the store's current pair is the newest this node had (the kubeconfig
    // may name an older file), as upstream's file store prefers it.
    let mut current = kubeconfig_pair;
    match store.current() {
        Ok(Some(pair)) if store::not_expired(&pair, now) => {
            let same = current
                .as_ref()
                .is_some_and(|c| store::same_certificate(&c.cert_pem, &pair.cert_pem));
            if !same {
                log::info!(
                    "using the client certificate of {}",
                    store.current_path().display()
                );
                client
                    .set_client_identity(pair.cert_pem.clone(), pair.key_pem.clone())
                    .map_err(CertError::client)?;
            }
            current = Some(pair);
        }
        Ok(_) => {}
        Err(e) => log::warn!("{}", base::loops::error_chain(&e)),
    }
    let manager =
        ClientCertManager::new(client.clone(), store, s.node_name, true).with_current(current);
    Ok(Prepared {
        client,
        manager: Some(manager),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use base::testutil::TempDir;

    /// A kubeconfig for an unreachable server with a client pair valid for a year.
    fn kubeconfig_with_cert(dir: &TempDir, name: &str) -> PathBuf {
        let (cert, key) = wire::selfsigned::self_signed("n", "127.0.0.1").expect("pair");
        dir.kubeconfig_with_pair(name, &cert, &key)
    }

    fn bootstrap_kubeconfig(dir: &TempDir) -> PathBuf {
        dir.write(
            "bootstrap",
            "clusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}\n\
             users:\n- name: u\n  user: {token: abcdef.0123456789abcdef}\n\
             contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n",
        )
    }

    fn settings<'a>(
        kubeconfig: &'a Path,
        bootstrap: Option<&'a Path>,
        cert_dir: &'a Path,
        rotate: bool,
    ) -> Settings<'a> {
        Settings {
            kubeconfig,
            bootstrap_kubeconfig: bootstrap,
            cert_dir,
            node_name: "n1",
            rotate,
        }
    }

    #[test]
    fn a_missing_kubeconfig_with_a_bootstrap_kubeconfig_waits_for_a_certificate() {
        let dir = TempDir::new("certprepare");
        let boot = bootstrap_kubeconfig(&dir);
        let missing = dir.0.join("kubelet.conf");
        let pki = dir.0.join("pki");
        let p = prepare(&settings(&missing, Some(&boot), &pki, false)).expect("prepared");
        assert!(p.manager.is_some(), "the bootstrap runs");
        // No request leaves before the certificate is there.
        let e = p
            .client
            .get_object::<serde_json::Value>("get node", "/api/v1/nodes/n1", Duration::from_secs(1))
            .expect_err("no identity");
        assert!(matches!(e, ApiError::NoIdentity { .. }), "{e}");
        assert!(e.is_unreachable(), "retried as a server not reached yet");
        assert_eq!(
            e.to_string(),
            "get node from https://127.0.0.1:1/api/v1/nodes/n1: no client certificate yet \
             (TLS bootstrap in progress)"
        );
    }

    #[test]
    fn a_valid_kubeconfig_is_used_as_it_is() {
        let dir = TempDir::new("certprepare");
        let boot = bootstrap_kubeconfig(&dir);
        let kc = kubeconfig_with_cert(&dir, "kubelet.conf");
        let pki = dir.0.join("pki");
        let p = prepare(&settings(&kc, Some(&boot), &pki, false)).expect("prepared");
        assert!(p.manager.is_none(), "no bootstrap, no rotation");
        let p = prepare(&settings(&kc, None, &pki, true)).expect("prepared");
        assert!(p.manager.is_some(), "rotation");
        assert!(
            p.client.client_certificate().is_some(),
            "the kubeconfig's pair"
        );
    }

    #[test]
    fn rotation_starts_from_the_stores_newer_pair() {
        let dir = TempDir::new("certprepare");
        let kc = kubeconfig_with_cert(&dir, "kubelet.conf");
        let pki = dir.0.join("pki");
        let (cert, key) = wire::selfsigned::self_signed("newer", "127.0.0.1").expect("pair");
        let pair = Pair {
            cert_pem: cert.into_bytes(),
            key_pem: key.into_bytes(),
        };
        CertStore::new(&pki)
            .update(&pair, SystemTime::now())
            .expect("store");
        let p = prepare(&settings(&kc, None, &pki, true)).expect("prepared");
        assert_eq!(p.client.client_certificate(), Some(pair.cert_pem));
    }

    #[test]
    fn bootstrap_errors_name_the_file() {
        let dir = TempDir::new("certprepare");
        let missing = dir.0.join("kubelet.conf");
        let no_boot = dir.0.join("no-bootstrap");
        let e = prepare(&settings(&missing, Some(&no_boot), &dir.0, false)).expect_err("no file");
        assert_eq!(
            base::loops::error_chain(&e),
            format!(
                "kubeconfig {}: cannot read it: No such file or directory (os error 2)",
                no_boot.display()
            )
        );
        assert_eq!(
            CertError::NoKubeconfig.to_string(),
            "--bootstrap-kubeconfig needs --kubeconfig (where the kubeconfig with the issued \
             client certificate is written)"
        );
    }
}
