//! Asking the API server for a client certificate and waiting for it (client-go's
//! `util/certificate/csr`: `RequestCertificate`, `WaitForCertificate`): the CSR is
//! created, then read back by name every [`POLL`] until it is approved and issued,
//! denied, failed, or the wait is over. Each call is bounded by [`API_TIMEOUT`] and
//! the stop channel is the sleep, so the caller's thread never hangs on the network.

use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

use super::csr::{self, Outcome};
use super::CertError;
use apiclient::ApiClient;
use base::loops::{error_chain, Stop};

/// Each call about a CSR must finish within this.
pub(crate) const API_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a waiting CSR is read back (upstream watches it; a read every 2 s is as
/// prompt for a person approving it, and one small GET).
pub(crate) const POLL: Duration = Duration::from_secs(2);

/// Asks for a client certificate for `key`: creates the CSR (`name`, or
/// `generateName: csr-`; an existing one of that name is waited for instead, as
/// client-go's `RequestCertificate` does), then reads it back every [`POLL`] until it is
/// issued (the certificate, PEM, checked to be for `key`), denied or failed, deleted,
/// or `wait` has passed. Transient read errors are waited through.
pub(crate) fn request_certificate(
    client: &ApiClient,
    key: &rcgen::KeyPair,
    node_name: &str,
    name: Option<&str>,
    wait: Duration,
    stop: &Stop,
) -> Result<Vec<u8>, CertError> {
    let label = name.unwrap_or(csr::GENERATE_NAME).to_string();
    let request = csr::request_pem(key, node_name).map_err(CertError::Key)?;
    let api = |csr: &str| {
        let csr = csr.to_string();
        move |source| CertError::Api {
            csr,
            source: Box::new(source),
        }
    };
    let mut current = match client.create_csr(&csr::csr_object(name, &request), API_TIMEOUT) {
        Ok(created) => created,
        Err(e) if e.is_already_exists() && name.is_some() => {
            log::info!("certificate signing request {label} already exists; waiting for it");
            client.get_csr(&label, API_TIMEOUT).map_err(api(&label))?
        }
        Err(e) => return Err(api(&label)(e)),
    };
    let csr_name = current.metadata.name.clone().unwrap_or(label);
    let uid = current.metadata.uid.clone();
    log::info!(
        "waiting for CSR {csr_name} to be approved and issued (signer {}, user {}, up to {}s)",
        csr::KUBELET_CLIENT_SIGNER,
        csr::common_name(node_name),
        wait.as_secs()
    );
    let until = base::time::saturating_deadline(Instant::now(), wait);
    let mut said_approved = false;
    loop {
        match csr::outcome(&current) {
            Outcome::Issued(cert) => {
                check_issued(&cert, key, &csr_name)?;
                log::info!("CSR {csr_name} is issued");
                return Ok(cert);
            }
            Outcome::Denied { reason, message } => {
                return Err(CertError::Denied {
                    csr: csr_name,
                    reason,
                    message,
                })
            }
            Outcome::Failed { reason, message } => {
                return Err(CertError::Failed {
                    csr: csr_name,
                    reason,
                    message,
                })
            }
            Outcome::Approved if !said_approved => {
                said_approved = true;
                log::info!("CSR {csr_name} is approved, waiting for its certificate");
            }
            Outcome::Approved | Outcome::Pending => {}
        }
        if Instant::now() >= until {
            return Err(CertError::Timeout {
                csr: csr_name,
                waited: wait,
            });
        }
        if stop.sleep(POLL) {
            return Err(CertError::Stopped);
        }
        match client.get_csr(&csr_name, API_TIMEOUT) {
            Ok(read) if uid.is_some() && read.metadata.uid != uid => {
                return Err(CertError::Unusable {
                    csr: csr_name,
                    why: "it was replaced by another request of the same name",
                })
            }
            Ok(read) => current = read,
            Err(e) if e.is_not_found() => {
                return Err(CertError::Unusable {
                    csr: csr_name,
                    why: "it was deleted",
                })
            }
            Err(e) => log::debug!("reading CSR {csr_name}: {}; still waiting", error_chain(&e)),
        }
    }
}

/// The issued certificate must be a readable certificate for our key.
fn check_issued(cert_pem: &[u8], key: &rcgen::KeyPair, csr: &str) -> Result<(), CertError> {
    let unusable = |why| CertError::Unusable {
        csr: csr.to_string(),
        why,
    };
    let der = CertificateDer::pem_slice_iter(cert_pem)
        .next()
        .and_then(Result::ok)
        .ok_or_else(|| unusable("the issued certificate is not PEM"))?;
    match wire::x509::subject_public_key_info(&der) {
        Some(spki) if spki == key.public_key_der().as_slice() => Ok(()),
        Some(_) => Err(unusable("the issued certificate is for another key")),
        None => Err(unusable("the issued certificate cannot be read")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_issued_certificate_must_be_for_our_key() {
        let key = csr::generate_key().expect("key");
        let other = csr::generate_key().expect("key");
        let params = rcgen::CertificateParams::new(vec!["n".to_string()]).expect("params");
        let cert = params.self_signed(&key).expect("cert").pem();
        assert!(check_issued(cert.as_bytes(), &key, "x").is_ok());
        let e = check_issued(cert.as_bytes(), &other, "x").expect_err("other key");
        assert_eq!(
            e.to_string(),
            "certificate signing request x: the issued certificate is for another key"
        );
        assert!(check_issued(b"junk", &key, "x").is_err());
    }
}
