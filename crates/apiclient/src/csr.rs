//! The `certificates.k8s.io/v1` CertificateSigningRequest calls of the client
//! certificate manager (the daemon's `certificate` module): create one, and read one back by
//! name while waiting for its approval and certificate (client-go's
//! `util/certificate/csr.RequestCertificate` and the reads of `WaitForCertificate`).

use std::time::Duration;

use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::{ApiClient, ApiError};

/// A CSR as the server answers it, as far as it is read: its metadata and status. The
/// spec echoes our request and is skipped unread (its decoder stays out of the binary).
#[derive(serde::Deserialize)]
struct Answer {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    status: Option<CertificateSigningRequestStatus>,
}

impl From<Answer> for CertificateSigningRequest {
    fn from(a: Answer) -> Self {
        CertificateSigningRequest {
            metadata: a.metadata,
            status: a.status,
            ..CertificateSigningRequest::default()
        }
    }
}

/// The collection's path.
const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";

impl ApiClient {
    /// Creates `csr` (409 `AlreadyExists` when its name is taken); returns its metadata
    /// (the name from `generateName`, the UID) and status as stored, with an empty spec.
    pub fn create_csr(
        &self,
        csr: &CertificateSigningRequest,
        timeout: Duration,
    ) -> Result<CertificateSigningRequest, ApiError> {
        self.create_object::<_, Answer>("create certificatesigningrequest", CSRS, csr, timeout)
            .map(Into::into)
    }

    /// Reads the CSR called `name` (a name this node made or the server gave: URL-safe
    /// base64 and dashes, nothing to escape): its metadata and status, with an empty spec.
    pub fn get_csr(
        &self,
        name: &str,
        timeout: Duration,
    ) -> Result<CertificateSigningRequest, ApiError> {
        let path = format!("{CSRS}/{name}");
        self.get_object::<Answer>("get certificatesigningrequest", &path, timeout)
            .map(Into::into)
    }
}
