//! Typed calls for the kubelet's writes of pods (upstream `statusutil.PatchPodStatus`,
//! `mirror_client.go`, the status manager's final delete): thin wrappers over the
//! generic verbs, each within [`WRITE_TIMEOUT`]. The Node (a mirror pod's owner) is
//! read with `nodes.rs`'s `get_node`.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use crate::{query_escape, ApiClient, ApiError, DeleteOptions, PatchType};

/// Every pod write and the node read: one request, answered or given up within this
/// (upstream's client has no per-request timeout for these; a dead server must not
/// hold the status manager's loop for longer than a resync).
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// `/api/v1/namespaces/<ns>/pods`.
fn pods_path(namespace: &str) -> String {
    format!("/api/v1/namespaces/{}/pods", query_escape(namespace))
}

/// `/api/v1/namespaces/<ns>/pods/<name>`.
fn pod_path(namespace: &str, name: &str) -> String {
    format!("{}/{}", pods_path(namespace), query_escape(name))
}

impl ApiClient {
    /// `PATCH pods/<name>/status` with a strategic merge patch (its `metadata.uid` is
    /// the precondition: 409 when the pod of that name has another UID); the pod as
    /// patched.
    pub fn patch_pod_status(
        &self,
        namespace: &str,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<Pod, ApiError> {
        let path = format!("{}/status", pod_path(namespace, name));
        self.patch_object(
            "patch pod status",
            &path,
            PatchType::StrategicMerge,
            patch,
            WRITE_TIMEOUT,
        )
    }

    /// `POST pods`: a mirror pod (409 `AlreadyExists` when the name is taken).
    pub fn create_pod(&self, pod: &Pod) -> Result<Pod, ApiError> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        self.create_object("create pod", &pods_path(namespace), pod, WRITE_TIMEOUT)
    }

    /// `DELETE pods/<name>` with `gracePeriodSeconds` and a UID precondition (409 when
    /// the pod of that name is another one, 404 when none is).
    pub fn delete_pod(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        grace_period_seconds: i64,
    ) -> Result<(), ApiError> {
        let options = DeleteOptions {
            grace_period_seconds: Some(grace_period_seconds),
            uid: Some(uid.to_string()),
            resource_version: None,
        };
        self.delete_object(
            "delete pod",
            &pod_path(namespace, name),
            &options,
            WRITE_TIMEOUT,
        )
    }
}
