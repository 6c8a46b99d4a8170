//! Typed calls for the node's heartbeat `Lease` (`coordination.k8s.io/v1`, namespace
//! `kube-node-lease`, §12.5): get, create, and the update (PUT with the cached
//! object's resourceVersion, 409 `Conflict` when another writer got there first).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;

use crate::{query_escape, ApiClient, ApiError};

/// The namespace of every node's lease.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// The collection of leases in `namespace`.
fn leases_path(namespace: &str) -> String {
    format!(
        "/apis/coordination.k8s.io/v1/namespaces/{}/leases",
        query_escape(namespace)
    )
}

impl ApiClient {
    /// `GET …/leases/<name>`.
    pub fn get_lease(
        &self,
        namespace: &str,
        name: &str,
        timeout: Duration,
    ) -> Result<Lease, ApiError> {
        let path = format!("{}/{}", leases_path(namespace), query_escape(name));
        self.get_object("get lease", &path, timeout)
    }

    /// `POST …/leases`.
    pub fn create_lease(&self, lease: &Lease, timeout: Duration) -> Result<Lease, ApiError> {
        let ns = lease
            .metadata
            .namespace
            .as_deref()
            .unwrap_or(NODE_LEASE_NAMESPACE);
        self.create_object("create lease", &leases_path(ns), lease, timeout)
    }

    /// `PUT …/leases/<name>` with the lease's resourceVersion (409 if it is stale).
    pub fn update_lease(&self, lease: &Lease, timeout: Duration) -> Result<Lease, ApiError> {
        let ns = lease
            .metadata
            .namespace
            .as_deref()
            .unwrap_or(NODE_LEASE_NAMESPACE);
        let name = lease.metadata.name.as_deref().unwrap_or_default();
        let path = format!("{}/{}", leases_path(ns), query_escape(name));
        self.update_object("update lease", &path, lease, timeout)
    }
}
