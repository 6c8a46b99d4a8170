//! Image management (upstream `pkg/kubelet/images`: `EnsureImageExists`, the serial
//! puller, the pull backoff; and `kuberuntime_image.go`'s `PullImage` with the
//! credential keyring). Called by pod workers before a container is created.
//!
//! - The reference is checked first: one Docker cannot parse is `InvalidImageName`.
//! - The pull policy decides (`Always`; `IfNotPresent`; `Never`, which gives
//!   `ErrImageNeverPull` for an absent image; the API's default is `Always` for
//!   `:latest` or untagged images, else `IfNotPresent`).
//! - A failed pull is `ErrImagePull` and starts a backoff per pod and image (10 s
//!   doubling to 300 s); while it lasts the container waits in `ImagePullBackOff`.
//! - Credentials come from a Docker config file (see [`credentials`]) and go to the
//!   engine as `X-Registry-Auth`; each matching entry is tried in turn.
//! - Pulls are serialized (upstream `serializeImagePulls: true`); a pull that waited
//!   for another pull of the same image finds it present and does not pull again
//!   (unless the policy is `Always`).
//!
//! Upstream records its messages as pod events; without an API server they are log
//! lines with the event's type and reason.

pub mod credentials;
use crate::reference;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;

use crate::container::backoff::Backoff;
use crate::container::Waiting;
use crate::loops::lock;
use crate::record;
use crate::runtime::{Runtime, RuntimeError};

/// Pulls images as pods need them. Shared by all pod workers.
#[derive(Debug)]
pub struct ImageManager {
    runtime: Arc<dyn Runtime>,
    /// Pull backoff by `<podUID>_<image>` (upstream: 10 s doubling to 300 s), with the
    /// message of the failure that started it.
    backoff: Mutex<Backoff>,
    last_error: Mutex<std::collections::HashMap<String, String>>,
    /// Pulls are serialized (upstream `serializeImagePulls: true`). Held across the
    /// pull on purpose.
    pull_lock: Mutex<()>,
    /// Where registry credentials are looked for, in order.
    credential_paths: Vec<(PathBuf, bool)>,
}

/// Records what upstream records as a pod event, through the one rate-limited
/// recorder (a pull failure repeats every sync of every container of the pod).
fn event(pod: &Pod, warning: bool, reason: &str, message: &str) {
    record::event(pod, None, warning, reason, message);
}

fn waiting(reason: &str, message: String) -> Option<Waiting> {
    Some(Waiting {
        reason: reason.to_string(),
        message,
    })
}

impl ImageManager {
    /// A manager pulling through `runtime`, with credentials searched from `root_dir`
    /// (`--root-dir`) on, as upstream.
    pub fn new(runtime: Arc<dyn Runtime>, root_dir: &Path) -> Self {
        Self::with_credential_paths(runtime, credentials::search_paths(root_dir))
    }

    /// A manager reading credentials from exactly these files (`true`: legacy
    /// `.dockercfg` format).
    pub fn with_credential_paths(runtime: Arc<dyn Runtime>, paths: Vec<(PathBuf, bool)>) -> Self {
        ImageManager {
            runtime,
            backoff: Mutex::new(Backoff::default()),
            last_error: Mutex::new(Default::default()),
            pull_lock: Mutex::new(()),
            credential_paths: paths,
        }
    }

    /// Makes sure an image is present per the pull policy (upstream
    /// `EnsureImageExists`). Ok(Some(waiting)) when the container must wait;
    /// Err only when the runtime is unreachable.
    pub fn ensure_image(
        &self,
        pod: &Pod,
        image: &str,
        policy: Option<&str>,
    ) -> Result<Option<Waiting>, RuntimeError> {
        let parsed = match reference::parse(image) {
            Ok(r) => r,
            Err(e) => {
                let msg = format!(
                    "Failed to apply default image tag {image:?}: couldn't parse image reference {image:?}: {e}"
                );
                event(pod, true, "InspectFailed", &msg);
                return Ok(waiting("InvalidImageName", msg));
            }
        };
        let tagged = normalize_image(image);
        let policy = policy
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| default_pull_policy(&tagged));
        let present = match self.runtime.inspect_image(&tagged) {
            Ok(i) => i.is_some(),
            Err(e) if e.is_unavailable() => return Err(e),
            Err(e) => {
                let msg = format!("Failed to inspect image {image:?}: {e}");
                event(pod, true, "InspectFailed", &msg);
                return Ok(waiting("ImageInspectError", msg));
            }
        };
        if !should_pull(policy, present) {
            if present {
                event(
                    pod,
                    false,
                    "Pulled",
                    &format!("Container image {image:?} already present on machine"),
                );
                return Ok(None);
            }
            let msg = format!("Container image {image:?} is not present with pull policy of Never");
            event(pod, true, "ErrImageNeverPull", &msg);
            return Ok(waiting("ErrImageNeverPull", msg));
        }
        let key = format!(
            "{}_{}",
            pod.metadata.uid.as_deref().unwrap_or_default(),
            image
        );
        if lock(&self.backoff).is_in_backoff_since_update(&key, Instant::now()) {
            let mut msg = format!("Back-off pulling image {image:?}");
            event(pod, false, "BackOff", &msg);
            if let Some(last) = lock(&self.last_error).get(&key) {
                msg.push_str(": ErrImagePull: ");
                msg.push_str(last);
            }
            return Ok(waiting("ImagePullBackOff", msg));
        }

        let _serial = lock(&self.pull_lock);
        // Another worker may have pulled it while this one waited for the lock.
        if policy == "IfNotPresent"
            && self
                .runtime
                .inspect_image(&tagged)
                .is_ok_and(|i| i.is_some())
        {
            return Ok(None);
        }
        event(pod, false, "Pulling", &format!("Pulling image {image:?}"));
        let started = Instant::now();
        match self.pull(&tagged, &parsed.repository()) {
            Ok(()) => {
                event(
                    pod,
                    false,
                    "Pulled",
                    &format!(
                        "Successfully pulled image {image:?} in {:?}",
                        started.elapsed()
                    ),
                );
                lock(&self.last_error).remove(&key);
                Ok(None)
            }
            Err(e) if e.is_unavailable() => Err(e),
            Err(e) => {
                let err = crate::loops::error_chain(&e);
                event(
                    pod,
                    true,
                    "Failed",
                    &format!("Failed to pull image {image:?}: {err}"),
                );
                lock(&self.backoff).next(&key, Instant::now());
                lock(&self.last_error).insert(key, err.clone());
                Ok(waiting(
                    "ErrImagePull",
                    format!("Failed to pull image {image:?}: {err}"),
                ))
            }
        }
    }

    /// Pulls with each matching credential in turn, or anonymously when none matches
    /// (upstream `PullImage`). The last error is returned if every attempt fails.
    fn pull(&self, image: &str, repository: &str) -> Result<(), RuntimeError> {
        let creds = credentials::read_first(&self.credential_paths)
            .map(|f| {
                let auths = f.keyring.lookup(repository);
                if !auths.is_empty() {
                    log::debug!("pulling {image} with credentials from {}", f.path.display());
                }
                auths
            })
            .unwrap_or_default();
        if creds.is_empty() {
            return self.runtime.pull_image(image, None);
        }
        let mut last = None;
        for auth in &creds {
            match self.runtime.pull_image(image, Some(auth)) {
                Ok(()) => return Ok(()),
                Err(e) if e.is_unavailable() => return Err(e),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| RuntimeError::Api {
            op: format!("pull image {image}"),
            status: 0,
            message: "no credentials tried".into(),
        }))
    }

    /// Forgets expired backoff entries (housekeeping).
    pub fn gc(&self) {
        let now = Instant::now();
        let mut b = lock(&self.backoff);
        b.gc(now);
        lock(&self.last_error).retain(|k, _| b.get(k, now).is_some());
    }
}

/// Upstream `shouldPullImage`.
pub fn should_pull(policy: &str, present: bool) -> bool {
    match policy {
        "Never" => false,
        "IfNotPresent" => !present,
        // Always, and anything else the API would have refused.
        _ => true,
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

    #[test]
    fn pull_decision_per_policy() {
        let cases = [
            ("Always", true, true),
            ("Always", false, true),
            ("IfNotPresent", true, false),
            ("IfNotPresent", false, true),
            ("Never", true, false),
            ("Never", false, false),
        ];
        for (policy, present, pull) in cases {
            assert_eq!(
                should_pull(policy, present),
                pull,
                "{policy} present={present}"
            );
        }
    }
}
