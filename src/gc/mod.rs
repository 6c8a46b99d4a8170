//! Garbage collection (upstream `kuberuntime_gc.go`, `container_gc.go`,
//! `image_gc_manager.go`; reference §8): the `container-gc` loop (every minute, and a
//! pod's own pruning whenever the PLEG saw one of its containers die) and the
//! `image-gc` loop (every 5 minutes), and [`Gc`], the handle that runs either now (the
//! eviction manager's node-level reclaim).
//!
//! Decisions are pure ([`container`], [`image`]); this file lists, measures and
//! removes, every call on the GC's own threads (or the caller's, through [`Gc`]),
//! never on the sync loop and never under a lock. Failures are node events
//! (`ContainerGCFailed`, `ImageGCFailed`, `FreeDiskSpaceFailed`) and log lines; the
//! loops go on.

pub mod container;
pub mod image;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{Receiver, Sender};

use crate::kuberuntime::{logs, RuntimeManager};
use crate::pod_workers::PodWorkers;
use crate::status::manager::PodManagerView;
use base::loops::{lock, LoopHandle, Loops, Periodic, SpawnError, Stop};
use runtime::container::{labels, short};
use runtime::{ContainerState, ContainerSummary, Runtime, RuntimeError};

pub use container::GcPolicy;
pub use image::ImagePolicy;

/// Pods whose container just died, waiting for the `container-gc` loop's pruning. A
/// burst beyond this is left to the next full pass.
pub(crate) const DIED_CHANNEL_CAPACITY: usize = 256;
/// Upstream's `minimumGracePeriodInSeconds`: a container in an unknown state is
/// stopped with this grace before it is removed.
const UNKNOWN_STOP_GRACE: Duration = Duration::from_secs(2);

/// The errors of a GC pass: each step that failed, with what it was about.
#[derive(Debug, thiserror::Error)]
pub enum GcError {
    /// A runtime call failed (listing, stopping, removing; which is in `op`).
    #[error("{op}: {}", base::loops::error_chain(.source))]
    Runtime {
        /// What was being done, e.g. `remove container 1a2b3c`.
        op: String,
        /// The runtime's error.
        source: RuntimeError,
    },
    /// The image filesystem could not be measured.
    #[error("cannot measure the image filesystem at {path}: {reason}")]
    ImageFs {
        /// The runtime's root directory.
        path: String,
        /// Why.
        reason: String,
    },
    /// Several steps failed.
    #[error("[{}]", comma_list(.0))]
    Many(Vec<GcError>),
    /// Image GC could not free as much as the disk usage asked (upstream's message).
    #[error(
        "Failed to garbage collect required amount of images. Attempted to free \
         {wanted} bytes, but only found {found} bytes eligible to free."
    )]
    Shortfall {
        /// Bytes asked.
        wanted: u64,
        /// Bytes that eligible images held.
        found: u64,
    },
    /// Log link clean-up failed.
    #[error("{}", .0.join(", "))]
    Logs(Vec<String>),
}

/// [`GcError::Many`]'s steps, `, ` between them.
fn comma_list(errors: &[GcError]) -> String {
    let parts: Vec<String> = errors.iter().map(ToString::to_string).collect();
    parts.join(", ")
}

fn rt_err(op: impl Into<String>) -> impl FnOnce(RuntimeError) -> GcError {
    let op = op.into();
    move |source| GcError::Runtime { op, source }
}

/// `Ok` when nothing failed, else the one error or all of them.
fn collect_errors(mut errors: Vec<GcError>) -> Result<(), GcError> {
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.remove(0)),
        _ => Err(GcError::Many(errors)),
    }
}

/// Who may answer "is everything of this pod to go": the pod manager's snapshot (its
/// pods, whether every source is ready) and the pod workers (a pod still being
/// synced or killed is not gone).
#[derive(Clone, Debug)]
pub struct PodState {
    /// The sync loop's published pod manager.
    pub pods: Arc<PodManagerView>,
    /// The pod workers.
    pub workers: Arc<PodWorkers>,
}

impl PodState {
    /// A predicate over pod UIDs, `false` for every pod until every source is ready
    /// (upstream's `ShouldPodContentBeRemoved` before the pods are synced).
    fn gone(&self) -> (bool, impl Fn(&str) -> bool + '_) {
        let snap = self.pods.get();
        let ready = snap.sources_ready;
        let desired: HashSet<String> = snap
            .pods
            .iter()
            .filter_map(|p| p.metadata.uid.clone())
            .collect();
        (ready, move |uid: &str| {
            ready && !desired.contains(uid) && !self.workers.is_active(uid)
        })
    }
}

/// The container half: passes over this node's containers.
#[derive(Debug)]
pub struct ContainerGc {
    runtime: Arc<dyn Runtime>,
    manager: Arc<RuntimeManager>,
    node_name: String,
    policy: GcPolicy,
    pods: PodState,
}

impl ContainerGc {
    /// A container GC for `node_name`'s containers.
    pub fn new(
        runtime: Arc<dyn Runtime>,
        manager: Arc<RuntimeManager>,
        node_name: &str,
        policy: GcPolicy,
        pods: PodState,
    ) -> ContainerGc {
        ContainerGc {
            runtime,
            manager,
            node_name: node_name.to_string(),
            policy,
            pods,
        }
    }

    fn node_filter(&self) -> String {
        format!("{}={}", labels::MANAGED_BY_NODE, self.node_name)
    }

    fn list(&self, extra: Option<String>) -> Result<Vec<ContainerSummary>, GcError> {
        let mut filter = vec![self.node_filter()];
        filter.extend(extra);
        self.runtime
            .list_containers(&filter)
            .map_err(rt_err("list containers"))
    }

    /// Removes one container: an unknown-state one is stopped first.
    fn remove(&self, c: &ContainerSummary) -> Result<(), GcError> {
        if c.state == ContainerState::Unknown {
            self.runtime
                .stop_container(&c.id, UNKNOWN_STOP_GRACE)
                .map_err(rt_err(format!("stop container {}", short(&c.id))))?;
        }
        self.manager
            .remove_dead_container(&c.id, &c.labels)
            .map_err(rt_err(format!("remove container {}", short(&c.id))))
    }

    /// One full pass (upstream `GarbageCollect`): dead containers beyond the policy,
    /// inactive sandboxes, the log links and directories left behind. Returns how
    /// many containers and sandboxes it removed.
    pub fn collect(&self) -> Result<usize, GcError> {
        let mut errors = Vec::new();
        let mut removed = 0;
        let all = self.list(None)?;
        let (ready, gone) = self.pods.gone();
        let plan = container::plan_containers(&all, &self.policy, SystemTime::now(), &gone);
        for c in &plan.containers {
            match self.remove(c) {
                Ok(()) => removed += 1,
                Err(e) => errors.push(e),
            }
        }
        // Sandboxes against the list as it is now (their containers may just have gone):
        // listed again only when this pass removed a container.
        let current = if plan.containers.is_empty() {
            Ok(all)
        } else {
            self.list(None)
        };
        match current {
            Ok(all) => {
                for s in container::plan_sandboxes(&all, &gone) {
                    match self.remove(&s) {
                        Ok(()) => removed += 1,
                        Err(e) => errors.push(e),
                    }
                }
            }
            Err(e) => errors.push(e),
        }
        let keep = |uid: &str| !gone(uid);
        let (_, log_errors) = logs::sweep(
            self.manager.log_settings(),
            ready.then_some(&keep as &dyn Fn(&str) -> bool),
        );
        if !log_errors.is_empty() {
            errors.push(GcError::Logs(log_errors));
        }
        if removed > 0 {
            log::info!("container GC removed {removed} dead containers and sandboxes");
        }
        collect_errors(errors).map(|()| removed)
    }

    /// Upstream `podContainerDeletor`: after container `died_id` of pod `uid` died,
    /// its older dead instances beyond the policy go.
    pub fn prune_died(&self, uid: &str, died_id: &str) -> Result<usize, GcError> {
        let pod = self.list(Some(format!("{}={uid}", labels::POD_UID)))?;
        let doomed = container::plan_died(&pod, died_id, self.policy.max_per_pod_container);
        let mut errors = Vec::new();
        for c in &doomed {
            if let Err(e) = self.remove(c) {
                errors.push(e);
            }
        }
        collect_errors(errors).map(|()| doomed.len())
    }
}

/// The image half: tracking and freeing.
#[derive(Debug)]
pub struct ImageGc {
    runtime: Arc<dyn Runtime>,
    policy: ImagePolicy,
    /// The pause image's reference: never removed.
    pause_image: String,
    records: Mutex<image::ImageRecords>,
    /// The runtime's facts (root directory, own sandbox image), read once.
    info: Mutex<Option<runtime::RuntimeInfo>>,
    /// The last pass failed (upstream records `ImageGCFailed` only on a repeat).
    prev_failed: AtomicBool,
    node_name: String,
    /// The images of the preload directory's archives, never removed.
    preloaded: Option<Arc<crate::images::preload::Protected>>,
}

/// What one detection found.
struct Detected {
    in_use: HashSet<String>,
    pinned: HashSet<String>,
}

impl ImageGc {
    /// An image GC that never removes `pause_image`.
    pub fn new(
        runtime: Arc<dyn Runtime>,
        policy: ImagePolicy,
        pause_image: &str,
        node_name: &str,
    ) -> ImageGc {
        ImageGc {
            runtime,
            policy,
            pause_image: pause_image.to_string(),
            records: Mutex::new(image::ImageRecords::default()),
            info: Mutex::new(None),
            prev_failed: AtomicBool::new(false),
            node_name: node_name.to_string(),
            preloaded: None,
        }
    }

    /// Also never removes the images `preloaded` names (`imagePreloadDir`'s archives).
    pub(crate) fn with_preloaded(
        mut self,
        preloaded: Arc<crate::images::preload::Protected>,
    ) -> Self {
        self.preloaded = Some(preloaded);
        self
    }

    /// Upstream `detectImages`: every image, every container's image (any container,
    /// any state: Docker refuses to remove those anyway), the pause image's ID.
    fn detect(&self, now: SystemTime) -> Result<Detected, GcError> {
        let images = self.runtime.list_images().map_err(rt_err("list images"))?;
        let containers = self
            .runtime
            .list_containers(&[])
            .map_err(rt_err("list containers"))?;
        let mut in_use: HashSet<String> = containers.iter().map(|c| c.image_id.clone()).collect();
        // A container's image as it was named, for runtimes that list no image ID.
        for i in &images {
            let named = containers
                .iter()
                .any(|c| i.repo_tags.contains(&c.image) || i.repo_digests.contains(&c.image));
            if named {
                in_use.insert(i.id.clone());
            }
        }
        let mut pinned = HashSet::new();
        for i in &images {
            if i.repo_tags.iter().any(|t| same_ref(t, &self.pause_image)) {
                pinned.insert(i.id.clone());
            }
        }
        if let Ok(Some(p)) = self.runtime.inspect_image(&self.pause_image) {
            pinned.insert(p.id);
        }
        // The runtime's own sandbox image (containerd's `sandbox_image`), which may not
        // be `--pod-infra-container-image`: upstream pins it through the CRI image's
        // `pinned`, which containerd sets only from 1.7.
        let sandbox_image = self.runtime_info()?.sandbox_image;
        if !sandbox_image.is_empty() {
            for i in &images {
                if i.repo_tags.iter().any(|t| same_ref(t, &sandbox_image)) {
                    pinned.insert(i.id.clone());
                }
            }
        }
        if let Some(p) = &self.preloaded {
            pinned.extend(p.ids());
        }
        lock(&self.records).detect(&images, &in_use, now);
        Ok(Detected { in_use, pinned })
    }

    /// The runtime's facts, asked once (never under the lock).
    fn runtime_info(&self) -> Result<runtime::RuntimeInfo, GcError> {
        if let Some(i) = lock(&self.info).clone() {
            return Ok(i);
        }
        let info = self.runtime.info().map_err(rt_err("runtime info"))?;
        *lock(&self.info) = Some(info.clone());
        Ok(info)
    }

    /// Capacity and available bytes of the runtime's root filesystem.
    fn fs_stats(&self) -> Result<(u64, u64), GcError> {
        let info = self.runtime_info()?;
        let root = if info.root_dir.is_empty() {
            "/var/lib/docker".to_string()
        } else {
            info.root_dir
        };
        statvfs(&root).map_err(|reason| GcError::ImageFs { path: root, reason })
    }

    /// Removes candidates in order until `bytes` are freed; returns the bytes freed.
    fn remove_images(&self, chosen: &[(String, image::ImageRecord)]) -> (u64, Vec<GcError>) {
        let mut freed = 0u64;
        let mut errors = Vec::new();
        for (id, r) in chosen {
            log::info!(
                "image GC removing image {} ({}, {} bytes, last used {})",
                short(id.trim_start_matches("sha256:")),
                r.tags.join(" "),
                r.size,
                base::time::rfc3339_nano(r.last_used)
            );
            match self.runtime.remove_image(id) {
                Ok(()) => {
                    freed = freed.saturating_add(r.size);
                    lock(&self.records).forget(id);
                }
                Err(e) => errors.push(GcError::Runtime {
                    op: format!("remove image {id}"),
                    source: e,
                }),
            }
        }
        (freed, errors)
    }

    /// Frees at least `bytes` by removing unused images, least recently used first
    /// (upstream `freeSpace`); returns the bytes freed. Less than asked is
    /// [`GcError::Shortfall`].
    pub fn free_space(&self, bytes: u64) -> Result<u64, GcError> {
        let now = SystemTime::now();
        let d = self.detect(now)?;
        let candidates =
            lock(&self.records).candidates(&d.in_use, &d.pinned, self.policy.min_age, now);
        let chosen = image::choose(&candidates, bytes);
        let (freed, mut errors) = self.remove_images(&chosen);
        if freed < bytes {
            errors.push(GcError::Shortfall {
                wanted: bytes,
                found: freed,
            });
        }
        collect_errors(errors).map(|()| freed)
    }

    /// Removes every unused image old enough (upstream `DeleteUnusedImages`, the
    /// eviction manager's call under disk pressure); returns the bytes freed.
    pub fn delete_unused(&self) -> Result<u64, GcError> {
        self.free_space(u64::MAX).or_else(|e| match e {
            GcError::Shortfall { found, .. } => Ok(found),
            GcError::Many(v) => {
                let v: Vec<GcError> = v
                    .into_iter()
                    .filter(|e| !matches!(e, GcError::Shortfall { .. }))
                    .collect();
                collect_errors(v).map(|()| 0)
            }
            e => Err(e),
        })
    }

    /// One pass (upstream `GarbageCollect`): images unused past the maximum age, then
    /// as many as the usage above the high threshold asks. A shortfall is the
    /// `FreeDiskSpaceFailed` event.
    pub fn collect(&self) -> Result<u64, GcError> {
        let now = SystemTime::now();
        let d = self.detect(now)?;
        let mut freed = 0;
        let mut errors = Vec::new();
        if !self.policy.max_age.is_zero() {
            let candidates =
                lock(&self.records).candidates(&d.in_use, &d.pinned, Duration::ZERO, now);
            let old = image::too_old(&candidates, self.policy.max_age, now);
            let (f, e) = self.remove_images(&old);
            freed += f;
            errors.extend(e);
        }
        let (capacity, available) = self.fs_stats()?;
        match image::bytes_to_free(&self.policy, capacity, available) {
            None => {
                crate::record::node_event(
                    &self.node_name,
                    true,
                    "InvalidDiskCapacity",
                    "invalid capacity 0 on image filesystem",
                );
            }
            Some(0) => {}
            Some(bytes) => {
                let used = 100 - available.saturating_mul(100) / capacity.max(1);
                log::info!(
                    "image filesystem {used}% used (high threshold {}%): freeing {bytes} bytes",
                    self.policy.high_percent
                );
                let candidates =
                    lock(&self.records).candidates(&d.in_use, &d.pinned, self.policy.min_age, now);
                let chosen = image::choose(&candidates, bytes);
                let (f, e) = self.remove_images(&chosen);
                freed += f;
                errors.extend(e);
                if f < bytes {
                    let short = GcError::Shortfall {
                        wanted: bytes,
                        found: f,
                    };
                    crate::record::node_event(
                        &self.node_name,
                        true,
                        "FreeDiskSpaceFailed",
                        &short.to_string(),
                    );
                    errors.push(short);
                }
            }
        }
        collect_errors(errors).map(|()| freed)
    }

    /// The `image-gc` loop's tick: a pass; a failure after a failure is the
    /// `ImageGCFailed` event.
    pub fn tick(&self) -> Result<(), GcError> {
        match self.collect() {
            Ok(_) => {
                self.prev_failed.store(false, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => {
                if self.prev_failed.swap(true, Ordering::Relaxed) {
                    log::error!("Image garbage collection failed multiple times in a row: {e}");
                    crate::record::node_event(
                        &self.node_name,
                        true,
                        "ImageGCFailed",
                        &e.to_string(),
                    );
                } else {
                    log::warn!("Image garbage collection failed once: {e}");
                }
                Err(e)
            }
        }
    }
}

/// `docker.io/library/x:t`, `library/x:t` and `x:t` are one reference.
fn same_ref(a: &str, b: &str) -> bool {
    let norm = |s: &str| {
        let s = s.strip_prefix("docker.io/").unwrap_or(s);
        let s = s.strip_prefix("library/").unwrap_or(s);
        if s.rsplit('/').next().is_some_and(|last| last.contains(':')) || s.contains('@') {
            s.to_string()
        } else {
            format!("{s}:latest")
        }
    };
    norm(a) == norm(b)
}

/// Capacity and available bytes (to unprivileged users) of the filesystem at `path`.
fn statvfs(path: &str) -> Result<(u64, u64), String> {
    let p = std::ffi::CString::new(path).map_err(|e| e.to_string())?;
    let s = rustix::fs::statvfs(p.as_c_str()).map_err(|e| std::io::Error::from(e).to_string())?;
    Ok((
        s.f_blocks.saturating_mul(s.f_frsize),
        s.f_bavail.saturating_mul(s.f_frsize),
    ))
}

/// Container GC then image GC, now, on the caller's thread (the eviction manager's
/// node-level reclaim). Cloning shares the same collectors.
#[derive(Clone, Debug)]
pub struct Gc {
    /// The container half.
    pub containers: Arc<ContainerGc>,
    /// The image half.
    pub images: Arc<ImageGc>,
}

impl Gc {
    /// One container GC pass; returns how many containers and sandboxes went.
    pub fn collect_containers(&self) -> Result<usize, GcError> {
        self.containers.collect()
    }

    /// Frees at least `bytes` of images, least recently used first; returns the bytes
    /// freed (less than asked is an error that says how much was found).
    pub fn free_image_space(&self, bytes: u64) -> Result<u64, GcError> {
        self.images.free_space(bytes)
    }

    /// Removes every unused image old enough; returns the bytes freed.
    pub fn delete_unused_images(&self) -> Result<u64, GcError> {
        self.images.delete_unused()
    }
}

/// The loops' periods.
#[derive(Clone, Copy, Debug)]
pub struct GcPeriods {
    /// Between two container GC passes (upstream 1 m).
    pub containers: Duration,
    /// Between two image GC passes (upstream 5 m).
    pub images: Duration,
}

/// Starts `container-gc` (full passes every `periods.containers`, a pod's pruning when
/// `died` names one of its containers) and `image-gc`. Returns the handle that runs
/// either now.
pub fn start(
    loops: &Loops,
    gc: Gc,
    periods: GcPeriods,
    died: Receiver<(String, String)>,
) -> Result<Gc, SpawnError> {
    let containers = gc.containers.clone();
    loops.spawn("container-gc", move |stop, handle| {
        container_loop(&containers, periods.containers, &died, &stop, &handle)
    })?;
    let images = gc.images.clone();
    // Image tracking starts with what is there (first detected at the epoch).
    loops.spawn_periodic(
        Periodic {
            name: "image-gc".into(),
            period: periods.images,
            wake: None,
        },
        move || images.tick(),
    )?;
    Ok(gc)
}

/// A PLEG `ContainerDied`: the pod's UID and the container's ID.
pub(crate) type Died = (String, String);

/// The sender the sync loop hands PLEG `ContainerDied` events to (pod UID,
/// container ID), and its receiver.
pub(crate) fn died_channel() -> (Sender<Died>, Receiver<Died>) {
    crossbeam_channel::bounded(DIED_CHANNEL_CAPACITY)
}

fn container_loop(
    gc: &ContainerGc,
    period: Duration,
    died: &Receiver<(String, String)>,
    stop: &Stop,
    handle: &LoopHandle,
) {
    let mut next = Instant::now() + period;
    loop {
        // The full pass first when it is due, so a stream of deaths cannot starve it.
        if Instant::now() >= next {
            let began = handle.begin_tick();
            let error = gc.collect().err().map(|e| {
                let text = e.to_string();
                log::error!("Container garbage collection failed: {text}");
                crate::record::node_event(&gc.node_name, true, "ContainerGCFailed", &text);
                text
            });
            handle.end_tick(began, error);
            next = Instant::now() + period;
        }
        let wait = next.saturating_duration_since(Instant::now());
        crossbeam_channel::select! {
            recv(stop.receiver()) -> _ => return,
            recv(died) -> d => {
                let Ok((uid, id)) = d else { return };
                let began = handle.begin_tick();
                let mut errors = Vec::new();
                let mut seen = HashSet::new();
                for (uid, id) in std::iter::once((uid, id)).chain(died.try_iter()) {
                    if !seen.insert(id.clone()) {
                        continue;
                    }
                    if let Err(e) = gc.prune_died(&uid, &id) {
                        errors.push(format!("pod {uid}: {e}"));
                    }
                }
                let error = (!errors.is_empty()).then(|| errors.join("; "));
                if let Some(e) = &error {
                    log::warn!("pruning dead containers failed: {e}");
                }
                handle.end_tick(began, error);
            }
            default(wait) => {}
        }
    }
}

#[cfg(test)]
mod tests;
