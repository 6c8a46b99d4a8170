//! The image pullers (upstream `serialImagePuller` / `parallelImagePuller` in
//! `pkg/kubelet/images/puller.go`): the loops that run image pulls, so that a pull —
//! minutes for a big image on a slow link — never holds a pod worker.
//!
//! A pod worker that needs an absent image queues a pull request
//! ([`Inner::request_pull`], never blocking) and its container waits in
//! `ContainerCreating`, as upstream's does while `EnsureImageExists` runs. Requests
//! for one image are one pull with a list of waiting pods. A pool of puller threads,
//! `image-puller-0` (or, with `serializeImagePulls: false`, up to
//! `maxParallelImagePulls` threads `image-puller-N`), started when a pull is queued
//! and gone after [`PULLER_IDLE`] without one, takes requests in order, records the `Pulling`/`Pulled`/`Failed`
//! events and the backoff exactly as the pod worker did before, keeps each waiting
//! pod's outcome for its next sync, and names the waiting pods on the notify channel so
//! the sync loop syncs them at once.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crossbeam_channel::TrySendError;
use k8s_openapi::api::core::v1::Pod;

use super::{event, Inner};
use base::loops::{error_chain, lock};
use base::time::go_duration;
use runtime::container::Waiting;
use runtime::RegistryAuth;

/// The puller threads' names: `image-puller-N`.
pub(crate) const PULLER_PREFIX: &str = "image-puller";
/// A puller thread with no pull for this long exits: a node whose images are all
/// present keeps no thread for pulls.
pub(crate) const PULLER_IDLE: Duration = Duration::from_secs(60);

/// Pull requests (distinct images) waiting for a puller. Upstream's serial puller
/// buffers 10 and then blocks the asking goroutine; ours refuses instead (the
/// container waits and asks again), so the queue is larger to keep that rare. Each
/// entry is an image name.
pub(crate) const QUEUE_CAPACITY: usize = 64;
/// The most puller threads `serializeImagePulls: false` starts. Upstream runs every
/// pull at once when `maxParallelImagePulls` is unset; a thread per pull is what this
/// design avoids, and dockerd limits each pull's layer downloads (3) anyway.
pub(crate) const MAX_PULLERS: usize = 10;
/// The waiting reason while a pull is queued or running (upstream shows the default
/// `ContainerCreating` while `EnsureImageExists` runs).
pub(crate) const PULLING_REASON: &str = "ContainerCreating";
/// A finished pull's outcome that no pod came back for (the pod went away) is
/// forgotten after this long.
const OUTCOME_TTL: Duration = Duration::from_secs(300);

/// `serializeImagePulls` and `maxParallelImagePulls`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PullSettings {
    /// One pull at a time (upstream default `true`).
    pub serialize: bool,
    /// With `serialize: false`, how many pulls at once (upstream: unset means no
    /// limit; here [`MAX_PULLERS`]).
    pub max_parallel: Option<u32>,
}

impl Default for PullSettings {
    fn default() -> Self {
        PullSettings {
            serialize: true,
            max_parallel: None,
        }
    }
}

impl PullSettings {
    /// How many pulls may run at once: one, or with `serialize: false` the
    /// `maxParallelImagePulls` (at most [`MAX_PULLERS`]).
    pub fn pullers(&self) -> usize {
        if self.serialize {
            return 1;
        }
        self.max_parallel
            .map_or(MAX_PULLERS, |n| usize::try_from(n).unwrap_or(MAX_PULLERS))
            .clamp(1, MAX_PULLERS)
    }
}

/// What became of a pull a pod asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// The image is there.
    Pulled,
    /// The pull failed with this error (the backoff has started).
    Failed(String),
    /// Still queued or running.
    Waiting,
}

/// A pod waiting for a pull.
#[derive(Debug)]
struct Waiter {
    /// `<podUID>_<image>`: the backoff and outcome key.
    key: String,
    /// The image as the pod wrote it (for messages).
    image: String,
    /// The pod's identity (name, namespace, UID) for its events.
    pod: Pod,
}

/// One pull, queued or running.
#[derive(Debug)]
struct Job {
    /// The repository, for the credential lookup.
    repository: String,
    /// Credentials from the waiting pods' image pull secrets, tried first.
    secret_auths: Vec<RegistryAuth>,
    /// Some waiter's policy is `Always`: pull even if the image is present.
    always: bool,
    /// In the order they asked; the first one's events say `Pulling`/`Pulled`.
    waiters: Vec<Waiter>,
    /// When it was queued (the `Pulled` message's "including waiting").
    queued: Instant,
}

/// Pulls queued or running, by normalized image, and finished outcomes by waiter key.
#[derive(Debug, Default)]
pub(super) struct PullTable {
    jobs: HashMap<String, Job>,
    done: HashMap<String, (Instant, Outcome)>,
}

impl PullTable {
    /// Forgets outcomes older than [`OUTCOME_TTL`].
    pub(super) fn gc(&mut self, now: Instant) {
        self.done
            .retain(|_, (at, _)| now.saturating_duration_since(*at) < OUTCOME_TTL);
    }
}

/// Upstream's (1.30+) `Pulled` message: the pull's time, the time since the pull was
/// asked for, both cut to milliseconds as Go prints durations, and the image's size.
fn pulled_message(image: &str, pull: Duration, total: Duration, size: i64) -> String {
    let ms = |d: Duration| {
        go_duration(Duration::from_millis(
            d.as_millis().try_into().unwrap_or(u64::MAX),
        ))
    };
    format!(
        "Successfully pulled image {image:?} in {} ({} including waiting). Image size: {size} bytes.",
        ms(pull),
        ms(total)
    )
}

/// The waiting state of a container whose image is being pulled.
pub(super) fn pulling(image: &str) -> Option<Waiting> {
    Some(Waiting {
        reason: PULLING_REASON.to_string(),
        message: format!("Pulling image {image:?}"),
    })
}

/// Only what an event names: a copy of the whole pod would keep its spec alive.
fn identity(pod: &Pod) -> Pod {
    let mut p = Pod::default();
    p.metadata.name = pod.metadata.name.clone();
    p.metadata.namespace = pod.metadata.namespace.clone();
    p.metadata.uid = pod.metadata.uid.clone();
    p
}

impl Inner {
    /// The outcome of a pull the pod waited for (taken: a later sync decides afresh),
    /// or `Waiting` while it is still queued or running.
    pub(super) fn take_outcome(&self, key: &str, tagged: &str) -> Option<Outcome> {
        let mut t = lock(&self.pulls);
        if let Some((_, o)) = t.done.remove(key) {
            return Some(o);
        }
        t.jobs
            .get(tagged)
            .is_some_and(|j| j.waiters.iter().any(|w| w.key == key))
            .then_some(Outcome::Waiting)
    }

    /// Queues a pull for a pod, or joins the one of the same image already queued or
    /// running, with its repository and the credentials of the pod's pull secrets for
    /// it. Never blocks: a full queue is a waiting message.
    pub(super) fn request_pull(
        &self,
        pod: &Pod,
        image: &str,
        tagged: &str,
        (repository, secret_auths): (String, Vec<RegistryAuth>),
        key: String,
        always: bool,
    ) -> Option<Waiting> {
        let waiter = Waiter {
            key,
            image: image.to_string(),
            pod: identity(pod),
        };
        let mut t = lock(&self.pulls);
        if let Some(job) = t.jobs.get_mut(tagged) {
            job.always |= always;
            for a in secret_auths {
                if !job.secret_auths.contains(&a) {
                    job.secret_auths.push(a);
                }
            }
            if !job.waiters.iter().any(|w| w.key == waiter.key) {
                job.waiters.push(waiter);
            }
            return pulling(image);
        }
        match self.queue_tx.try_send(tagged.to_string()) {
            Ok(()) => {
                if let Some(pullers) = self.pullers.get() {
                    pullers.kick();
                }
                t.jobs.insert(
                    tagged.to_string(),
                    Job {
                        repository,
                        secret_auths,
                        always,
                        waiters: vec![waiter],
                        queued: Instant::now(),
                    },
                );
                pulling(image)
            }
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => Some(Waiting {
                reason: PULLING_REASON.to_string(),
                message: format!(
                    "Too many image pulls are queued ({QUEUE_CAPACITY}); image {image:?} is pulled later"
                ),
            }),
        }
    }

    /// Runs one queued pull to its end and tells its waiters.
    pub(super) fn pull_job(&self, tagged: &str) {
        let (repository, secret_auths, always, first, queued) = {
            let t = lock(&self.pulls);
            let Some(job) = t.jobs.get(tagged) else {
                return;
            };
            let first = job
                .waiters
                .first()
                .map(|w| (w.pod.clone(), w.image.clone()));
            (
                job.repository.clone(),
                job.secret_auths.clone(),
                job.always,
                first,
                job.queued,
            )
        };
        // None: the runtime is down; the waiters' next sync says so and asks again.
        let outcome = if !always
            && self
                .runtime
                .inspect_image(tagged)
                .is_ok_and(|i| i.is_some())
        {
            // A pull queued before this one brought it (upstream: the second
            // `EnsureImageExists` finds it present).
            Some(Outcome::Pulled)
        } else {
            if let Some((pod, image)) = &first {
                event(pod, false, "Pulling", &format!("Pulling image {image:?}"));
            }
            let started = Instant::now();
            match self.pull(tagged, &repository, &secret_auths) {
                Ok(()) => {
                    if let Some((pod, image)) = &first {
                        let size = self
                            .runtime
                            .inspect_image(tagged)
                            .ok()
                            .flatten()
                            .map_or(0, |i| i.size);
                        event(
                            pod,
                            false,
                            "Pulled",
                            &pulled_message(image, started.elapsed(), queued.elapsed(), size),
                        );
                    }
                    Some(Outcome::Pulled)
                }
                Err(e) if e.is_unavailable() => {
                    log::debug!("pulling {tagged}: {}", error_chain(&e));
                    None
                }
                Err(e) => Some(self.pull_failed(tagged, &e)),
            }
        };
        let now = Instant::now();
        let waiters = {
            let mut t = lock(&self.pulls);
            let waiters = t.jobs.remove(tagged).map(|j| j.waiters).unwrap_or_default();
            if let Some(o) = &outcome {
                for w in &waiters {
                    t.done.insert(w.key.clone(), (now, o.clone()));
                }
            }
            waiters
        };
        if let Some(Outcome::Failed(err)) = &outcome {
            for w in &waiters {
                event(
                    &w.pod,
                    true,
                    "Failed",
                    &format!("Failed to pull image {:?}: {err}", w.image),
                );
                lock(&self.backoff).next(&w.key, now);
                lock(&self.last_error).insert(w.key.clone(), err.clone());
            }
        }
        let notify = lock(&self.notify).clone();
        if let Some(tx) = notify {
            for w in &waiters {
                let uid = w.pod.metadata.uid.clone().unwrap_or_default();
                if let Err(TrySendError::Full(uid)) = tx.try_send(uid) {
                    // Its sync's own requeue (10 s) brings it back.
                    log::debug!("pull of {tagged} done; pod {uid} is synced at its requeue");
                }
            }
        }
    }
}

impl Inner {
    /// The outcome of a failed pull: a failure, unless the image is the sandbox image
    /// and rkubelet could import itself as it ([`super::selfimport`]), on this
    /// puller's thread as the pull was, so no pod waits longer than for a pull.
    fn pull_failed(&self, tagged: &str, e: &runtime::RuntimeError) -> Outcome {
        let pulled = error_chain(e);
        if self.self_import.get().map(String::as_str) != Some(tagged) {
            return Outcome::Failed(pulled);
        }
        match super::selfimport::import_self(self.runtime.as_ref(), tagged) {
            Ok(size) => {
                log::info!(
                    "sandbox image {tagged} could not be pulled ({pulled}); imported rkubelet \
                     itself ({size} bytes, entrypoint /rkubelet pause) as {tagged}"
                );
                Outcome::Pulled
            }
            Err(ie) => {
                let msg = format!(
                    "{pulled}; and rkubelet could not import itself as sandbox image {tagged}: {}",
                    error_chain(&ie)
                );
                log::warn!("{msg}");
                Outcome::Failed(msg)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::images::ImageManager;
    use base::loops::{shutdown_channel, Loops};
    use runtime::fake::{FakeClock, FakeRuntime, Op};
    use std::sync::Arc;

    fn pod(uid: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(format!("p-{uid}"));
        p.metadata.namespace = Some("default".into());
        p.metadata.uid = Some(uid.into());
        p
    }

    fn manager(rt: &Arc<FakeRuntime>) -> ImageManager {
        ImageManager::with_credential_paths(rt.clone(), Vec::new())
    }

    #[test]
    fn pullers_follow_the_settings() {
        assert_eq!(PullSettings::default().pullers(), 1);
        let parallel = |n| PullSettings {
            serialize: false,
            max_parallel: n,
        };
        assert_eq!(parallel(Some(2)).pullers(), 2);
        assert_eq!(parallel(None).pullers(), MAX_PULLERS);
        assert_eq!(parallel(Some(1000)).pullers(), MAX_PULLERS);
        let last = format!("{PULLER_PREFIX}-{}", MAX_PULLERS - 1);
        assert!(last.len() <= base::loops::MAX_THREAD_NAME, "{last}");
    }

    #[test]
    fn a_worker_never_waits_for_a_pull_and_is_told_when_it_ends() {
        let rt = Arc::new(FakeRuntime::new(FakeClock::default()).with_pullable("big:1"));
        // A slow registry: each pull takes a while.
        rt.delay(Op::Pull, Duration::from_millis(300));
        let images = manager(&rt);
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop);
        let (tx, rx) = crossbeam_channel::bounded(8);
        images
            .start(&loops, PullSettings::default(), tx)
            .expect("start");

        let began = Instant::now();
        let w = images
            .ensure_image(&pod("a"), "big:1", None)
            .expect("ensure")
            .expect("waits");
        assert!(
            began.elapsed() < Duration::from_millis(200),
            "the worker waited for the pull"
        );
        assert_eq!(w.reason, PULLING_REASON);
        // A second pod and a second sync of the first join the same pull.
        let w = images.ensure_image(&pod("b"), "big:1", None).expect("b");
        assert_eq!(w.map(|w| w.reason).as_deref(), Some(PULLING_REASON));
        let w = images.ensure_image(&pod("a"), "big:1", None).expect("a");
        assert_eq!(w.map(|w| w.reason).as_deref(), Some(PULLING_REASON));

        let mut told: Vec<String> = (0..2)
            .map(|_| rx.recv_timeout(Duration::from_secs(10)).expect("told"))
            .collect();
        base::sort::sort(&mut told);
        assert_eq!(told, ["a", "b"]);
        assert_eq!(rt.count(Op::Pull), 1, "one pull for both pods");
        for uid in ["a", "b"] {
            assert_eq!(
                images
                    .ensure_image(&pod(uid), "big:1", None)
                    .expect("ready"),
                None
            );
        }
        shutdown.trigger();
        assert!(loops.join_all(Duration::from_secs(10)).is_empty());
    }

    #[test]
    fn a_failed_pull_is_err_image_pull_then_back_off() {
        let rt = Arc::new(FakeRuntime::new(FakeClock::default()));
        let images = manager(&rt);
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop);
        let (tx, rx) = crossbeam_channel::bounded(8);
        images
            .start(&loops, PullSettings::default(), tx)
            .expect("start");
        let w = images.ensure_image(&pod("a"), "gone:1", None).expect("a");
        assert_eq!(w.map(|w| w.reason).as_deref(), Some(PULLING_REASON));
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)).expect("told"), "a");
        let w = images
            .ensure_image(&pod("a"), "gone:1", None)
            .expect("a")
            .expect("waits");
        assert_eq!(w.reason, "ErrImagePull");
        assert!(
            w.message.starts_with("Failed to pull image \"gone:1\": "),
            "{}",
            w.message
        );
        let w = images
            .ensure_image(&pod("a"), "gone:1", None)
            .expect("a")
            .expect("waits");
        assert_eq!(w.reason, "ImagePullBackOff");
        assert!(
            w.message
                .starts_with("Back-off pulling image \"gone:1\": ErrImagePull: "),
            "{}",
            w.message
        );
        assert_eq!(rt.count(Op::Pull), 1);
        shutdown.trigger();
        assert!(loops.join_all(Duration::from_secs(10)).is_empty());
    }

    #[test]
    fn a_failed_sandbox_pull_tries_the_self_import_and_names_why_it_failed() {
        let rt = Arc::new(FakeRuntime::new(FakeClock::default()));
        let images = manager(&rt);
        images.set_self_import("nowhere/pause:1");
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop);
        let (tx, rx) = crossbeam_channel::bounded(8);
        images
            .start(&loops, PullSettings::default(), tx)
            .expect("start");
        // The test binary is dynamic: the import is refused, with both reasons.
        let w = images
            .ensure_sandbox_image(&pod("a"), "nowhere/pause:1")
            .expect("a");
        assert_eq!(w.map(|w| w.reason).as_deref(), Some(PULLING_REASON));
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)).expect("told"), "a");
        let w = images
            .ensure_sandbox_image(&pod("a"), "nowhere/pause:1")
            .expect("a")
            .expect("waits");
        assert_eq!(w.reason, "ErrImagePull");
        assert!(
            w.message.contains("manifest for nowhere/pause:1 not found")
                && w.message
                    .contains("could not import itself as sandbox image nowhere/pause:1")
                && w.message.contains("dynamically linked"),
            "{}",
            w.message
        );
        assert!(rt.imports().is_empty());
        // Another image's failed pull is only a failed pull.
        let w = images.ensure_image(&pod("b"), "gone:1", None).expect("b");
        assert_eq!(w.map(|w| w.reason).as_deref(), Some(PULLING_REASON));
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)).expect("told"), "b");
        let w = images
            .ensure_image(&pod("b"), "gone:1", None)
            .expect("b")
            .expect("waits");
        assert!(!w.message.contains("import"), "{}", w.message);
        shutdown.trigger();
        assert!(loops.join_all(Duration::from_secs(10)).is_empty());
    }

    #[test]
    fn a_full_queue_is_a_waiting_message_not_a_block() {
        let rt = Arc::new(FakeRuntime::new(FakeClock::default()));
        // No puller runs: the queue only fills.
        let images = manager(&rt);
        for i in 0..QUEUE_CAPACITY {
            let w = images
                .ensure_image(&pod("a"), &format!("img{i}:1"), None)
                .expect("queued");
            assert_eq!(
                w.map(|w| w.message),
                Some(format!("Pulling image \"img{i}:1\""))
            );
        }
        let w = images
            .ensure_image(&pod("a"), "one-more:1", None)
            .expect("not an error")
            .expect("waits");
        assert_eq!(w.reason, PULLING_REASON);
        assert!(
            w.message.starts_with("Too many image pulls are queued"),
            "{}",
            w.message
        );
    }

    #[test]
    fn the_pulled_message_is_upstreams() {
        assert_eq!(
            pulled_message(
                "busybox:1.35",
                Duration::from_micros(1_234_567),
                Duration::from_micros(2_500_400),
                4_861_440
            ),
            "Successfully pulled image \"busybox:1.35\" in 1.234s (2.5s including waiting). \
             Image size: 4861440 bytes."
        );
        assert_eq!(
            pulled_message("x", Duration::from_micros(450_700), Duration::from_secs(61), 1),
            "Successfully pulled image \"x\" in 450ms (1m1s including waiting). Image size: 1 bytes."
        );
    }
}
