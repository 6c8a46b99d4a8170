//! The `certificates.k8s.io/v1` CertificateSigningRequest calls of the client
//! certificate manager ([`crate::certificate`]): create one, and read one back by
//! name while waiting for its approval and certificate (client-go's
//! `util/certificate/csr.RequestCertificate` and the reads of `WaitForCertificate`).

use std::time::Duration;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;

use super::{ApiClient, ApiError};

/// The collection's path.
const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";

impl ApiClient {
    /// Creates `csr` (409 `AlreadyExists` when its name is taken); returns it as stored,
    /// with its name (from `generateName`) and UID.
    pub fn create_csr(
        &self,
        csr: &CertificateSigningRequest,
        timeout: Duration,
    ) -> Result<CertificateSigningRequest, ApiError> {
        self.create_object("create certificatesigningrequest", CSRS, csr, timeout)
    }

    /// Reads the CSR called `name` (a name this node made or the server gave: URL-safe
    /// base64 and dashes, nothing to escape).
    pub fn get_csr(
        &self,
        name: &str,
        timeout: Duration,
    ) -> Result<CertificateSigningRequest, ApiError> {
        let path = format!("{CSRS}/{name}");
        self.get_object("get certificatesigningrequest", &path, timeout)
    }
}
