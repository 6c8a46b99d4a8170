//! The two calls the `events` loop makes (client-go's `EventSinkImpl` for core/v1
//! Events, as the kubelet's legacy recorder uses): create an Event in its namespace
//! (`POST /api/v1/namespaces/<ns>/events`) and bump an existing one with a strategic
//! merge patch of its `count`, `lastTimestamp` and `message`
//! (`PATCH /api/v1/namespaces/<ns>/events/<name>`). Each is one request with the
//! caller's timeout; retrying is the caller's.

use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use crate::{ApiClient, ApiError, PatchType};
use base::netutil::query_escape as escape_path_segment;

/// An Event as the server answers a write, as far as the recorder reads it (its
/// correlator keeps the name, resourceVersion, count and first timestamp). The rest
/// echoes what was sent and is skipped unread (its decoders stay out of the binary).
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Answer {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    count: Option<i32>,
    #[serde(default)]
    first_timestamp: Option<Time>,
}

impl From<Answer> for Event {
    fn from(a: Answer) -> Self {
        Event {
            metadata: a.metadata,
            count: a.count,
            first_timestamp: a.first_timestamp,
            ..Event::default()
        }
    }
}

impl ApiClient {
    /// Creates `event` in its namespace (`default` when it has none) and returns what
    /// the server stored, as far as it is read (name, resourceVersion, count, first
    /// timestamp; 409 `AlreadyExists` when its name is taken).
    pub fn create_event(&self, event: &Event, timeout: Duration) -> Result<Event, ApiError> {
        let ns = event.metadata.namespace.as_deref().unwrap_or("default");
        let path = format!("/api/v1/namespaces/{}/events", escape_path_segment(ns));
        self.create_object::<_, Answer>("create event", &path, event, timeout)
            .map(Into::into)
    }

    /// Patches the Event `namespace/name` with `patch` (strategic merge) and returns
    /// the patched object as far as it is read (404 when it is gone: the caller
    /// creates it again).
    pub fn patch_event(
        &self,
        namespace: &str,
        name: &str,
        patch: &serde_json::Value,
        timeout: Duration,
    ) -> Result<Event, ApiError> {
        let path = format!(
            "/api/v1/namespaces/{}/events/{}",
            escape_path_segment(namespace),
            escape_path_segment(name)
        );
        self.patch_object::<Answer>(
            "patch event",
            &path,
            PatchType::StrategicMerge,
            patch,
            timeout,
        )
        .map(Into::into)
    }
}
