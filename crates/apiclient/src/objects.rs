//! The typed calls for the objects a node's pods reference: `GET` of one ConfigMap or
//! Secret (`/api/v1/namespaces/{ns}/configmaps|secrets/{name}`, what the Node
//! authorizer lets a kubelet read for its own pods; a refresh of one read before asks
//! with `resourceVersion=0`, served from the API server's cache, as upstream's
//! `FromApiserverCache`) and the TokenRequest that issues a
//! service account token bound to a pod (`POST /api/v1/namespaces/{ns}/
//! serviceaccounts/{name}/token`). Each is one request within the caller's timeout;
//! caching is `objects::`'s. A token is never put in an error or a log line.

use std::time::Duration;

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};

use crate::{ApiClient, ApiError};
use base::netutil::query_escape;

impl ApiClient {
    /// Reads one ConfigMap (`from_cache`: any recent version will do).
    pub fn get_config_map(
        &self,
        namespace: &str,
        name: &str,
        from_cache: bool,
        timeout: Duration,
    ) -> Result<ConfigMap, ApiError> {
        let path = format!(
            "/api/v1/namespaces/{}/configmaps/{}{}",
            query_escape(namespace),
            query_escape(name),
            if from_cache { "?resourceVersion=0" } else { "" }
        );
        self.get_object("get configmap", &path, timeout)
    }

    /// Reads one Secret (`from_cache`: any recent version will do). Its data is never
    /// logged.
    pub fn get_secret(
        &self,
        namespace: &str,
        name: &str,
        from_cache: bool,
        timeout: Duration,
    ) -> Result<Secret, ApiError> {
        let path = format!(
            "/api/v1/namespaces/{}/secrets/{}{}",
            query_escape(namespace),
            query_escape(name),
            if from_cache { "?resourceVersion=0" } else { "" }
        );
        self.get_object("get secret", &path, timeout)
    }

    /// Asks for a token of service account `namespace/name` (the answer's
    /// `status.token` and `status.expirationTimestamp`; the server may change
    /// `spec.expirationSeconds`).
    pub fn request_token(
        &self,
        namespace: &str,
        service_account: &str,
        request: &TokenRequest,
        timeout: Duration,
    ) -> Result<TokenRequest, ApiError> {
        let path = format!(
            "/api/v1/namespaces/{}/serviceaccounts/{}/token",
            query_escape(namespace),
            query_escape(service_account)
        );
        self.create_object("create token", &path, request, timeout)
    }
}
