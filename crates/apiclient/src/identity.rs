//! The client certificate of an [`ApiClient`] that changes while the client is in use
//! (TLS bootstrap and rotation, the daemon's `certificate` module): a new pair makes a new agent,
//! so requests from then on connect with it, while requests already sent and watches
//! already open go on over their connections. A client made before its first
//! certificate is issued fails every request at once with [`ApiError::NoIdentity`],
//! which callers treat as a server not reached yet.

use crate::kubeconfig::RestConfig;
use crate::{http, ApiClient, ApiError, REQUEST_TIMEOUT};
use base::httpclient::servers::TlsSettings;
use base::loops::lock;

impl ApiClient {
    /// A client for the server of `config` whose client certificate is still to come
    /// (TLS bootstrap): every request fails at once with [`ApiError::NoIdentity`]
    /// until [`ApiClient::set_client_identity`] gives it one.
    pub fn awaiting_identity(config: RestConfig) -> Result<ApiClient, ApiError> {
        let client = ApiClient::new(config)?;
        lock(&client.state).awaiting_identity = true;
        Ok(client)
    }

    /// Makes every request from now on authenticate with this client certificate
    /// chain and key (PEM); requests already sent, and watches already open, go on over
    /// their connections. The new agent is built before the lock is taken.
    pub fn set_client_identity(&self, cert_pem: Vec<u8>, key_pem: Vec<u8>) -> Result<(), ApiError> {
        let settings = TlsSettings {
            cert_pem: Some(cert_pem),
            key_pem: Some(key_pem),
            ..lock(&self.state).tls.clone()
        };
        let tls = http::tls_config(&settings)
            .map_err(|r| ApiError::Tls(format!("new client certificate: {r}")))?;
        let agent = http::agent(tls, REQUEST_TIMEOUT);
        let mut st = lock(&self.state);
        st.agent = agent;
        st.tls = settings;
        st.awaiting_identity = false;
        Ok(())
    }

    /// The client certificate (PEM) requests are sent with, if any.
    pub fn client_certificate(&self) -> Option<Vec<u8>> {
        lock(&self.state).tls.cert_pem.clone()
    }
}
