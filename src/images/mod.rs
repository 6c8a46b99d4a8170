//! Image management (upstream `pkg/kubelet/images`): pull policies, pull backoff,
//! serialized pulls. Called by pod workers before a container is created.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;

use crate::kuberuntime::backoff::Backoff;
use crate::loops::lock;
use crate::runtime::{Runtime, RuntimeError};
use crate::status::Waiting;

/// Pulls images as pods need them. Shared by all pod workers.
#[derive(Debug)]
pub struct ImageManager {
    runtime: Arc<dyn Runtime>,
    /// Pull backoff by `<podUID>_<image>` (upstream: 10 s doubling to 300 s).
    backoff: Mutex<Backoff>,
    /// Pulls are serialized (upstream `serializeImagePulls: true`).
    pull_lock: Mutex<()>,
}

impl ImageManager {
    /// A manager pulling through `runtime`.
    pub fn new(runtime: Arc<dyn Runtime>) -> Self {
        ImageManager {
            runtime,
            backoff: Mutex::new(Backoff::default()),
            pull_lock: Mutex::new(()),
        }
    }

    /// Makes sure an image is present per the pull policy. Ok(Some(waiting)) when the
    /// container must wait (pull failed, in pull backoff, or Never and absent).
    pub fn ensure_image(
        &self,
        pod: &Pod,
        image: &str,
        policy: Option<&str>,
    ) -> Result<Option<Waiting>, RuntimeError> {
        let image = normalize_image(image);
        let policy = policy.unwrap_or_else(|| default_pull_policy(&image));
        let present = self.runtime.inspect_image(&image)?.is_some();
        match policy {
            "Never" if !present => {
                return Ok(Some(Waiting {
                    reason: "ErrImageNeverPull".into(),
                    message: format!(
                        "Container image \"{image}\" is not present with pull policy of Never"
                    ),
                }))
            }
            "Never" => return Ok(None),
            "IfNotPresent" if present => return Ok(None),
            _ => {}
        }
        let key = format!(
            "{}_{}",
            pod.metadata.uid.as_deref().unwrap_or_default(),
            image
        );
        if lock(&self.backoff).is_in_backoff_since_update(&key, Instant::now()) {
            // The previous pull failed less than one backoff period ago.
            return Ok(Some(Waiting {
                reason: "ImagePullBackOff".into(),
                message: format!("Back-off pulling image \"{image}\""),
            }));
        }
        let _serial = lock(&self.pull_lock);
        log::info!("Pulling image \"{image}\"");
        let started = Instant::now();
        match self.runtime.pull_image(&image, None) {
            Ok(()) => {
                log::info!(
                    "Successfully pulled image \"{image}\" in {:?}",
                    started.elapsed()
                );
                Ok(None)
            }
            Err(e) if e.is_unavailable() => Err(e),
            Err(e) => {
                lock(&self.backoff).next(&key, Instant::now());
                Ok(Some(Waiting {
                    reason: "ErrImagePull".into(),
                    message: format!(
                        "Failed to pull image \"{image}\": {}",
                        crate::loops::error_chain(&e)
                    ),
                }))
            }
        }
    }

    /// Forgets expired backoff entries (housekeeping).
    pub fn gc(&self) {
        lock(&self.backoff).gc(Instant::now());
    }
}

/// `busybox` → `busybox:latest`; references with a tag or digest are unchanged.
pub fn normalize_image(image: &str) -> String {
    if image.contains('@') {
        return image.to_string();
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    if last.contains(':') {
        image.to_string()
    } else {
        format!("{image}:latest")
    }
}

/// Upstream's defaulting: `Always` for `:latest` (and untagged, already normalised to
/// `:latest`), `IfNotPresent` otherwise.
pub fn default_pull_policy(normalized: &str) -> &'static str {
    if !normalized.contains('@') && normalized.ends_with(":latest") {
        "Always"
    } else {
        "IfNotPresent"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_normalisation_and_default_policy() {
        assert_eq!(normalize_image("busybox"), "busybox:latest");
        assert_eq!(normalize_image("busybox:1.35"), "busybox:1.35");
        assert_eq!(
            normalize_image("127.0.0.1:5000/x/y"),
            "127.0.0.1:5000/x/y:latest"
        );
        assert_eq!(
            normalize_image("127.0.0.1:5000/x/y:2"),
            "127.0.0.1:5000/x/y:2"
        );
        assert_eq!(normalize_image("x@sha256:abc"), "x@sha256:abc");
        assert_eq!(default_pull_policy("busybox:latest"), "Always");
        assert_eq!(default_pull_policy("busybox:1.35"), "IfNotPresent");
        assert_eq!(default_pull_policy("x@sha256:abc"), "IfNotPresent");
    }
}
