//! Image management (upstream `pkg/kubelet/images`: `EnsureImageExists`, the
//! serial and parallel pullers, the pull backoff; and `kuberuntime_image.go`'s
//! `PullImage` with the credential keyring). Called by pod workers before a container
//! is created.
//!
//! - The reference is checked first: one Docker cannot parse is `InvalidImageName`.
//! - The pull policy decides (`Always`; `IfNotPresent`; `Never`, which gives
//!   `ErrImageNeverPull` for an absent image; the API's default is `Always` for
//!   `:latest` or untagged images, else `IfNotPresent`).
//! - A pod worker never waits for a pull: it hands the pull to the `image-puller-N`
//!   loop(s) ([`puller`]) and the container waits in `ContainerCreating`; when the
//!   pull ends, the puller names the waiting pods on a channel the sync loop selects
//!   on, and their next sync picks up the outcome. Pulls of one image are one pull,
//!   whoever asks (credentials are the node's, so the image decides them).
//! - A failed pull is `ErrImagePull` and starts a backoff per pod and image (10 s
//!   doubling to 300 s); while it lasts the container waits in `ImagePullBackOff`.
//! - Credentials come from a Docker config file (see [`credentials`]) and go to the
//!   engine as `X-Registry-Auth`; each matching entry is tried in turn.
//! - Pulls are serialized by default (upstream `serializeImagePulls: true`); a pull
//!   queued behind another of the same image finds it present and does not pull again
//!   (unless a waiter's policy is `Always`).
//!
//! Upstream records its messages as pod events; without an API server they are log
//! lines with the event's type and reason.

pub(crate) mod credentials;
pub(crate) mod preload;
pub(crate) mod puller;
pub(crate) mod selfimport;
use runtime::reference;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};
use k8s_openapi::api::core::v1::Pod;

use crate::record;
use base::loops::lock;
use puller::{Outcome, PullTable};
use runtime::container::backoff::Backoff;
use runtime::container::Waiting;
use runtime::{RegistryAuth, Runtime, RuntimeError};

pub(crate) use puller::{PullSettings, PULLING_REASON, QUEUE_CAPACITY};

/// Pulls images as pods need them. Shared (cloned) by all pod workers, the pullers
/// and housekeeping; every lock inside is held for microseconds, never across a
/// runtime call.
#[derive(Clone, Debug)]
pub struct ImageManager {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    runtime: Arc<dyn Runtime>,
    /// Pull backoff by `<podUID>_<image>` (upstream: 10 s doubling to 300 s), with the
    /// message of the failure that started it.
    backoff: Mutex<Backoff>,
    last_error: Mutex<HashMap<String, String>>,
    /// Pulls queued or running (by image), and finished outcomes waiting for their
    /// pod's next sync.
    pulls: Mutex<PullTable>,
    /// Images to pull, in order; bounded ([`QUEUE_CAPACITY`]): a full queue is a
    /// waiting message, never a block.
    queue_tx: Sender<String>,
    queue_rx: Receiver<String>,
    /// The puller threads that take `queue_rx` (set once at start).
    pullers: std::sync::OnceLock<base::loops::Pool<String>>,
    /// Where a finished pull names the pods waiting for it (the sync loop syncs them).
    notify: Mutex<Option<Sender<String>>>,
    /// Where registry credentials are looked for, in order.
    credential_paths: Vec<(PathBuf, bool)>,
    /// Where pods' `imagePullSecrets` are read (set once at wiring).
    objects: std::sync::OnceLock<Arc<crate::objects::ObjectManager>>,
    /// The sandbox image (normalized) that rkubelet imports itself as when its pull
    /// fails ([`selfimport`]); set once at wiring.
    self_import: std::sync::OnceLock<String>,
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

/// The pull backoff's key: per pod and image, as upstream.
fn backoff_key(pod: &Pod, image: &str) -> String {
    format!(
        "{}_{}",
        pod.metadata.uid.as_deref().unwrap_or_default(),
        image
    )
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
        let (queue_tx, queue_rx) = crossbeam_channel::bounded(QUEUE_CAPACITY);
        ImageManager {
            inner: Arc::new(Inner {
                runtime,
                backoff: Mutex::new(Backoff::default()),
                last_error: Mutex::new(HashMap::new()),
                pulls: Mutex::new(PullTable::default()),
                queue_tx,
                queue_rx,
                pullers: std::sync::OnceLock::new(),
                notify: Mutex::new(None),
                credential_paths: paths,
                objects: std::sync::OnceLock::new(),
                self_import: std::sync::OnceLock::new(),
            }),
        }
    }

    /// Reads pods' `imagePullSecrets` through `objects` (a second call is ignored).
    pub fn set_objects(&self, objects: Arc<crate::objects::ObjectManager>) {
        let _ = self.inner.objects.set(objects);
    }

    /// When a pull of `image` (the pod-infra image) fails, rkubelet imports itself as
    /// it, if it is a static binary ([`selfimport`]); a second call is ignored.
    pub fn set_self_import(&self, image: &str) {
        let _ = self.inner.self_import.set(normalize_image(image));
    }

    /// The credentials the pod's `imagePullSecrets` give for `repository` (upstream
    /// `getPullSecretsForPod` + `MakeDockerKeyring`), tried before the node's own.
    /// Secrets that cannot be read are named in a `FailedToRetrieveImagePullSecret`
    /// event, and the pull goes on without them, as upstream.
    fn pull_secret_auths(&self, pod: &Pod, repository: &str) -> Vec<RegistryAuth> {
        let refs: Vec<&str> = pod
            .spec
            .iter()
            .flat_map(|s| s.image_pull_secrets.iter().flatten())
            .map(|r| r.name.as_str())
            .filter(|n| !n.is_empty())
            .collect();
        let Some(objects) = self.inner.objects.get().filter(|_| !refs.is_empty()) else {
            return Vec::new();
        };
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let mut keyring = credentials::Keyring::default();
        let mut failed = Vec::new();
        for name in refs {
            match objects.secret(ns, name) {
                Ok(secret) => match credentials::pull_secret_keyring(&secret) {
                    Some(Ok(k)) => keyring.extend(k),
                    Some(Err(e)) => {
                        log::warn!("pull secret {ns}/{name}: {e}");
                    }
                    None => {}
                },
                Err(e) => {
                    log::info!(
                        "Unable to retrieve pull secret {ns}/{name}, the image pull may not succeed: {}",
                        e.message()
                    );
                    failed.push(name);
                }
            }
        }
        if !failed.is_empty() {
            event(
                pod,
                true,
                "FailedToRetrieveImagePullSecret",
                &format!(
                    "Unable to retrieve some image pull secrets ({}); attempting to pull the image may not succeed.",
                    failed.join(", ")
                ),
            );
        }
        keyring.lookup(repository)
    }

    /// Makes sure an image is present per the pull policy (upstream
    /// `EnsureImageExists`), without waiting for a pull: Ok(Some(waiting)) when the
    /// container must wait (a pull is queued or running: [`PULLING_REASON`]); Err only
    /// when the runtime is unreachable.
    pub fn ensure_image(
        &self,
        pod: &Pod,
        image: &str,
        policy: Option<&str>,
    ) -> Result<Option<Waiting>, RuntimeError> {
        self.ensure(pod, image, policy, &|pod, warning, reason, message| {
            event(pod, warning, reason, message)
        })
    }

    /// [`Self::ensure_image`] for the sandbox (pause) image, which records no events
    /// about the pod here: upstream's runtime gets the sandbox image itself, and the
    /// kubelet records no `Pulled` for it (a pull the puller has to make still says
    /// `Pulling`/`Pulled`). Pulled only when absent, whatever its tag, as dockershim's
    /// `ensureSandboxImageExists`: a `:latest` pause image is not pulled (or, with no
    /// registry, imported) again for every pod.
    pub fn ensure_sandbox_image(
        &self,
        pod: &Pod,
        image: &str,
    ) -> Result<Option<Waiting>, RuntimeError> {
        self.ensure(pod, image, Some("IfNotPresent"), &|_, _, _, _| {})
    }

    fn ensure(
        &self,
        pod: &Pod,
        image: &str,
        policy: Option<&str>,
        event: &dyn Fn(&Pod, bool, &str, &str),
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
        let key = backoff_key(pod, image);
        // A pull this pod waited for has ended: its outcome is this sync's answer (the
        // puller already recorded its events and, on failure, the backoff).
        match self.inner.take_outcome(&key, &tagged) {
            Some(Outcome::Pulled) => return Ok(None),
            Some(Outcome::Failed(err)) => {
                return Ok(waiting(
                    "ErrImagePull",
                    format!("Failed to pull image {image:?}: {err}"),
                ))
            }
            Some(Outcome::Waiting) => return Ok(puller::pulling(image)),
            None => {}
        }
        let present = match self.inner.runtime.inspect_image(&tagged) {
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
        if lock(&self.inner.backoff).is_in_backoff_since_update(&key, Instant::now()) {
            let mut msg = format!("Back-off pulling image {image:?}");
            event(pod, false, "BackOff", &msg);
            if let Some(last) = lock(&self.inner.last_error).get(&key) {
                msg.push_str(": ErrImagePull: ");
                msg.push_str(last);
            }
            return Ok(waiting("ImagePullBackOff", msg));
        }
        let auths = self.pull_secret_auths(pod, &parsed.repository());
        Ok(self.inner.request_pull(
            pod,
            image,
            &tagged,
            (parsed.repository(), auths),
            key,
            policy == "Always",
        ))
    }

    /// Starts the pullers: a pool of one `image-puller-0` thread, or with `serialize:
    /// false` up to `image-puller-0..N-1`, started when pulls are queued (none while
    /// every image is present). A finished pull sends the UIDs of the pods waiting for
    /// it on `notify` (never blocking: when that channel is full, the pod's own
    /// requeue syncs it a little later). A pull in progress at shutdown is left to end
    /// with the process.
    pub fn start(
        &self,
        loops: &base::loops::Loops,
        settings: PullSettings,
        notify: Sender<String>,
    ) -> Result<(), base::loops::SpawnError> {
        *lock(&self.inner.notify) = Some(notify);
        // Weak: the pool lives in `Inner`, which must not keep itself alive.
        let inner = Arc::downgrade(&self.inner);
        let pool = base::loops::Pool::new(
            loops,
            base::loops::PoolSpec {
                prefix: puller::PULLER_PREFIX.into(),
                max: settings.pullers(),
                idle: puller::PULLER_IDLE,
            },
            self.inner.queue_rx.clone(),
            move |image: String, _| {
                if let Some(inner) = inner.upgrade() {
                    inner.pull_job(&image);
                }
            },
        );
        // Pulls queued before the start are taken now.
        pool.kick();
        let _ = self.inner.pullers.set(pool);
        Ok(())
    }

    /// Forgets expired backoff entries and outcomes no pod came back for
    /// (housekeeping). Microseconds: only the manager's own tables.
    pub fn gc(&self) {
        let now = Instant::now();
        {
            let mut b = lock(&self.inner.backoff);
            b.gc(now);
            lock(&self.inner.last_error).retain(|k, _| b.get(k, now).is_some());
        }
        lock(&self.inner.pulls).gc(now);
    }
}

impl Inner {
    /// Pulls with each matching credential in turn (the pod's pull secrets' first,
    /// then the node's files', upstream's `UnionDockerKeyring`), or anonymously when
    /// none matches (upstream `PullImage`). The last error is returned if every
    /// attempt fails.
    fn pull(
        &self,
        image: &str,
        repository: &str,
        secret_auths: &[RegistryAuth],
    ) -> Result<(), RuntimeError> {
        let mut creds = secret_auths.to_vec();
        if !creds.is_empty() {
            log::debug!("pulling {image} with the pod's image pull secrets");
        }
        creds.extend(
            credentials::read_first(&self.credential_paths)
                .map(|f| {
                    let auths = f.keyring.lookup(repository);
                    if !auths.is_empty() {
                        log::debug!("pulling {image} with credentials from {}", f.path.display());
                    }
                    auths
                })
                .unwrap_or_default(),
        );
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
}

/// Upstream `shouldPullImage`.
pub(crate) fn should_pull(policy: &str, present: bool) -> bool {
    match policy {
        "Never" => false,
        "IfNotPresent" => !present,
        // Always, and anything else the API would have refused.
        _ => true,
    }
}

/// `busybox` → `busybox:latest`; references with a tag or digest are unchanged.
pub(crate) fn normalize_image(image: &str) -> String {
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
pub(crate) fn default_pull_policy(normalized: &str) -> &'static str {
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
