//! Typed calls for the node's own `Node` object (upstream `kubelet_node_status.go`'s
//! requests, §12.4): create at registration, get (from the API server's cache with
//! `resourceVersion=0`, or from the store), and the strategic-merge PATCH of
//! `nodes/<name>/status` that carries the status (and any metadata riding along).

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;

use crate::{query_escape, ApiClient, ApiError, PatchType};

/// The path of one Node.
fn node_path(name: &str) -> String {
    format!("/api/v1/nodes/{}", query_escape(name))
}

impl ApiClient {
    /// `POST /api/v1/nodes`: registers `node`; 409 `AlreadyExists` when its name is taken.
    pub fn create_node(&self, node: &Node, timeout: Duration) -> Result<Node, ApiError> {
        self.create_object("create node", "/api/v1/nodes", node, timeout)
    }

    /// `GET /api/v1/nodes/<name>`; `from_cache` adds `resourceVersion=0`, served from
    /// the API server's watch cache (upstream's first try of `tryUpdateNodeStatus`).
    pub fn get_node(
        &self,
        name: &str,
        from_cache: bool,
        timeout: Duration,
    ) -> Result<Node, ApiError> {
        let mut path = node_path(name);
        if from_cache {
            path.push_str("?resourceVersion=0");
        }
        self.get_object("get node", &path, timeout)
    }

    /// `PATCH /api/v1/nodes/<name>/status` with a strategic-merge patch; returns the
    /// patched Node.
    pub fn patch_node_status(
        &self,
        name: &str,
        patch: &serde_json::Value,
        timeout: Duration,
    ) -> Result<Node, ApiError> {
        let path = format!("{}/status", node_path(name));
        self.patch_object(
            "patch node status",
            &path,
            PatchType::StrategicMerge,
            patch,
            timeout,
        )
    }
}
