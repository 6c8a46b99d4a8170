//! The status manager (upstream `pkg/kubelet/status/status_manager.go`): the
//! `status-mgr` loop that writes the statuses the pod workers compute to the API
//! server, creates and deletes mirror pods, and deletes gracefully deleted pods once
//! they are down.
//!
//! Inputs: [`StatusCache`] (every status with a version; a change pokes the loop over
//! a bounded channel of one, as upstream's `podStatusChannel`) and the pod manager's
//! snapshot ([`PodManagerView`], published by the sync loop: the desired pods with
//! the API's copy of each, status included, from the API source's watch, and the
//! mirror pods). A tick writes each pod whose status has a version newer than the one
//! written, and each pod whose API copy changed (a new resourceVersion from the watch:
//! another writer, a relist); every [`RESYNC_PERIOD`] it compares every pod with the
//! API's copy (upstream `needsReconcile`). Either way a write is a strategic merge PATCH of
//! `pods/<name>/status` ([`super::patch`]), sent only when it is not empty: a pod
//! whose status did not change costs no request. A 404 or a UID conflict (the pod was
//! deleted, or recreated under its name) drops the pod: nothing is written for it
//! again. An unreachable API server ends the tick and backs off (1 s doubling to
//! [`MAX_BACKOFF`]); the next tick that reaches it resyncs every pod.
//!
//! Mirror pods are done here too, off the pod workers: upstream creates them in
//! `SyncPod`, where a slow API server would hold the worker and, here, the few
//! workers every pod shares. Deciding needs only the snapshot ([`super::mirror`]).
//!
//! Over 800 lines: half of it is the tests, over a fake API server that applies the
//! patches it is sent.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod, PodStatus};

use super::mirror::{self, MirrorAction};
use super::patch::{check_container_state_transition, merge_pod_status, status_patch};
use super::StatusCache;
use crate::metrics::KubeletMetrics;
use apiclient::{ApiClient, ApiError};
use base::loops::lock;

/// Upstream `syncPeriod`: every pod is compared with the API's copy this often.
pub(crate) const RESYNC_PERIOD: Duration = Duration::from_secs(10);
/// The loop's period when nothing pokes it: the back-off and the mirror pods' retries
/// are counted in these.
pub(crate) const TICK: Duration = Duration::from_secs(1);
/// The longest wait after an unreachable API server: short enough that every status
/// is right within a resync period of its return.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(4);
/// While the Node is not registered, it is looked for this often (mirror pods wait
/// for it).
const NODE_RETRY: Duration = Duration::from_secs(5);
/// The most one tick works (a slow but reachable API server, many pods): the rest is
/// done by the next ticks, so the loop stays well inside its health check.
const MAX_TICK_WORK: Duration = Duration::from_secs(30);
/// A mirror just created is not created again for this long while the watch has not
/// shown it yet (the API source's copy lags the create by a watch event).
const MIRROR_CREATE_WAIT: Duration = Duration::from_secs(5);
/// How often a pod being deleted that can still have running containers has the
/// runtime looked at again ([`PodRecheck`]): its final delete then waits at most this
/// long (and a relist) past its containers' end, whatever event was missed.
pub(crate) const RECHECK_PERIOD: Duration = Duration::from_secs(2);
/// A pod that waits this long on the runtime after its kill ended is worth a warning:
/// Docker still says a container of it runs.
const RECHECK_WARN: Duration = Duration::from_secs(30);

/// What the sync loop publishes for the status manager: its pod manager.
#[derive(Debug, Default)]
pub struct PodSnapshot {
    /// Every desired pod (API pods as the API's copy, status included; static pods).
    pub pods: Vec<Arc<Pod>>,
    /// The mirror pods on the API server (never run).
    pub mirrors: Vec<Arc<Pod>>,
    /// Every configured source has sent its first snapshot.
    pub sources_ready: bool,
}

/// The pod manager's snapshot, swapped whole by the sync loop under a short lock.
#[derive(Debug, Default)]
pub struct PodManagerView {
    inner: Mutex<Arc<PodSnapshot>>,
}

impl PodManagerView {
    /// Replaces the snapshot (sync loop only).
    pub fn publish(&self, snapshot: PodSnapshot) {
        *lock(&self.inner) = Arc::new(snapshot);
    }

    /// The current snapshot.
    pub fn get(&self) -> Arc<PodSnapshot> {
        lock(&self.inner).clone()
    }
}

/// The API calls the status manager makes; [`ApiClient`] in the daemon, a recording
/// fake in the tests.
pub(crate) trait PodStatusApi: Send + Sync {
    /// PATCH `pods/<name>/status`; the pod as patched.
    fn patch_status(
        &self,
        ns: &str,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<Pod, ApiError>;
    /// POST a pod.
    fn create(&self, pod: &Pod) -> Result<Pod, ApiError>;
    /// DELETE a pod with grace 0 and a UID precondition.
    fn delete(&self, ns: &str, name: &str, uid: &str) -> Result<(), ApiError>;
    /// GET the node.
    fn node(&self, name: &str) -> Result<Node, ApiError>;
}

impl PodStatusApi for ApiClient {
    fn patch_status(
        &self,
        ns: &str,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<Pod, ApiError> {
        self.patch_pod_status(ns, name, patch)
    }
    fn create(&self, pod: &Pod) -> Result<Pod, ApiError> {
        self.create_pod(pod)
    }
    fn delete(&self, ns: &str, name: &str, uid: &str) -> Result<(), ApiError> {
        self.delete_pod(ns, name, uid, 0)
    }
    fn node(&self, name: &str) -> Result<Node, ApiError> {
        self.get_node(name, false, apiclient::pods::WRITE_TIMEOUT)
    }
}

/// True when a pod (by the kubelet's UID) can have no running container: no kill of
/// it is under way and the last relist saw none running (upstream
/// `podDeletionSafety.PodCouldHaveRunningContainers`, negated).
pub(crate) type PodFinished = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// Asks for another look at the runtime for a pod being deleted that can still have
/// running containers (by the kubelet's UID); true when it asked (the pod's kill has
/// ended, yet the last look saw a container running), false when there is nothing to
/// look at again (a kill is under way).
pub(crate) type PodRecheck = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// What the status manager remembers of a pod whose final delete waits on the runtime.
#[derive(Debug)]
struct Recheck {
    /// The last call of the hook.
    last: Instant,
    /// The first call that asked (the pod's kill had ended).
    asked_since: Option<Instant>,
    warned: bool,
}

/// Why a tick stopped early.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StatusError {
    /// The API server could not be reached; the tick backs off.
    #[error("status manager: API server unreachable")]
    Unreachable(#[source] ApiError),
    /// Waiting out the back-off after [`StatusError::Unreachable`]: the same failure
    /// (its whole chain), so the loop logs it once, not "recovered" between tries.
    #[error("{0}")]
    BackingOff(String),
}

/// The `status-mgr` loop's state. [`StatusManager::tick`] is one iteration.
pub(crate) struct StatusManager {
    api: Arc<dyn PodStatusApi>,
    statuses: Arc<StatusCache>,
    view: Arc<PodManagerView>,
    finished: PodFinished,
    recheck: PodRecheck,
    node_name: String,
    metrics: Option<Arc<KubeletMetrics>>,
    /// By API UID (a static pod's: its mirror's): the version of the kubelet's status
    /// last written (or found equal to the API's).
    synced: HashMap<String, u64>,
    /// By API UID: when a version newer than the one written was first seen.
    pending_since: HashMap<String, Instant>,
    /// By API UID: the status the last PATCH answered, and the resourceVersion of the
    /// snapshot's copy it replaces (used while the watch has not caught up).
    patched: HashMap<String, (Option<String>, PodStatus)>,
    /// By API UID: the resourceVersion of the snapshot's copy last compared; a copy
    /// that changed (someone wrote the pod, a relist) is compared at once, not at the
    /// next resync.
    seen_rv: HashMap<String, Option<String>>,
    /// API UIDs never to write again: the API has no such pod (404) or another pod
    /// of that name (409), or it was deleted for good.
    dropped: HashSet<String>,
    /// By API UID: pods being deleted whose containers may still run.
    rechecks: HashMap<String, Recheck>,
    /// Mirrors created and not yet seen in the snapshot: full name → (UID, when).
    created: HashMap<String, (String, Instant)>,
    node_uid: Option<String>,
    /// No GET of the Node before this (it was not there).
    node_retry_at: Option<Instant>,
    last_resync: Option<Instant>,
    backoff: Duration,
    retry_at: Option<Instant>,
    /// The failure that started the back-off, as the loop logged it.
    unreachable: Option<String>,
}

impl std::fmt::Debug for StatusManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatusManager")
            .field("node_name", &self.node_name)
            .field("synced", &self.synced.len())
            .field("dropped", &self.dropped.len())
            .finish_non_exhaustive()
    }
}

fn uid_of(p: &Pod) -> &str {
    p.metadata.uid.as_deref().unwrap_or_default()
}

impl StatusManager {
    /// A status manager writing through `api`.
    pub(crate) fn new(
        api: Arc<dyn PodStatusApi>,
        statuses: Arc<StatusCache>,
        view: Arc<PodManagerView>,
        finished: PodFinished,
        node_name: &str,
    ) -> Self {
        StatusManager {
            api,
            statuses,
            view,
            finished,
            recheck: Arc::new(|_: &str| false),
            node_name: node_name.to_string(),
            metrics: None,
            synced: HashMap::new(),
            pending_since: HashMap::new(),
            patched: HashMap::new(),
            dropped: HashSet::new(),
            seen_rv: HashMap::new(),
            rechecks: HashMap::new(),
            created: HashMap::new(),
            node_uid: None,
            node_retry_at: None,
            last_resync: None,
            backoff: Duration::ZERO,
            retry_at: None,
            unreachable: None,
        }
    }

    /// Calls `recheck` for a pod being deleted that can still have running
    /// containers, every [`RECHECK_PERIOD`]: the final delete must not hang on one
    /// runtime event (a missed `die` left the PLEG seeing a container running, and the
    /// pod in the API, until its next full relist 5 min later; issue 27).
    pub(crate) fn with_recheck(mut self, recheck: PodRecheck) -> Self {
        self.recheck = recheck;
        self
    }

    /// Records `kubelet_pod_status_sync_duration_seconds` into `metrics`.
    pub(crate) fn with_metrics(mut self, metrics: Arc<KubeletMetrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// One iteration: the statuses that changed (all of them on a resync), graceful
    /// deletions that are done, mirror pods. Err only when the API server could not be
    /// reached (the loop logs it; the next tick after the back-off resyncs all).
    pub(crate) fn tick(&mut self, now: Instant) -> Result<(), StatusError> {
        if self.retry_at.is_some_and(|t| now < t) {
            return match &self.unreachable {
                Some(failure) => Err(StatusError::BackingOff(failure.clone())),
                None => Ok(()),
            };
        }
        match self.run(now) {
            Ok(()) => {
                self.backoff = Duration::ZERO;
                self.retry_at = None;
                self.unreachable = None;
                Ok(())
            }
            Err(e) => {
                self.backoff = (self.backoff * 2).clamp(TICK, MAX_BACKOFF);
                self.retry_at = Some(now + self.backoff);
                // Whatever was not written is written by the resync after the back-off.
                self.last_resync = None;
                let e = StatusError::Unreachable(e);
                self.unreachable = Some(base::loops::error_chain(&e));
                Err(e)
            }
        }
    }

    fn run(&mut self, now: Instant) -> Result<(), ApiError> {
        let snap = self.view.get();
        self.forget_gone(&snap);
        let resync = self
            .last_resync
            .is_none_or(|t| now.duration_since(t) >= RESYNC_PERIOD);
        let began = Instant::now();
        for pod in &snap.pods {
            if began.elapsed() > MAX_TICK_WORK {
                log::warn!("status manager: tick cut after {MAX_TICK_WORK:?}, the rest next tick");
                return Ok(());
            }
            if runtime::container::is_static_pod(pod) {
                if let Some(m) = mirror::current_mirror(pod, &snap.mirrors) {
                    self.sync_status(uid_of(pod), m, resync, now)?;
                }
            } else {
                self.sync_status(uid_of(pod), pod, resync, now)?;
                self.delete_if_done(pod, now)?;
            }
        }
        self.sync_mirrors(&snap, now)?;
        if resync {
            self.last_resync = Some(now);
        }
        Ok(())
    }

    /// Writes the kubelet's status of pod `kuid` to `target` (the pod itself, or the
    /// static pod's mirror) when it is newer than the one written or, on a resync,
    /// when it differs from the API's.
    fn sync_status(
        &mut self,
        kuid: &str,
        target: &Pod,
        resync: bool,
        now: Instant,
    ) -> Result<(), ApiError> {
        let api_uid = uid_of(target).to_string();
        if self.dropped.contains(&api_uid) {
            return Ok(());
        }
        let Some((version, status)) = self.statuses.get_versioned(kuid) else {
            return Ok(());
        };
        let newer = self.synced.get(&api_uid).is_none_or(|v| *v < version);
        if newer {
            self.pending_since.entry(api_uid.clone()).or_insert(now);
        }
        let copy_changed = self.seen_rv.get(&api_uid) != Some(&target.metadata.resource_version);
        if !newer && !resync && !copy_changed {
            return Ok(());
        }
        self.seen_rv
            .insert(api_uid.clone(), target.metadata.resource_version.clone());
        let api_status = self.api_status(target);
        let spec = target.spec.clone().unwrap_or_default();
        if let Err(e) = check_container_state_transition(&api_status, &status, &spec) {
            log::warn!(
                "Status update on pod aborted: pod {}: {e}",
                runtime::container::format_pod(target)
            );
            // Looked at again with the next status or the next resync, not every tick.
            self.synced.insert(api_uid, version);
            return Ok(());
        }
        let merged = merge_pod_status(&api_status, &status, !(self.finished)(kuid));
        // A terminal phase held back until the containers are down is looked at again
        // every tick, not only at the next resync: the pod's being down changes no
        // status version.
        let held_back = super::is_terminal_phase(status.phase.as_deref())
            && !super::is_terminal_phase(merged.phase.as_deref());
        let Some(patch) = status_patch(&api_uid, &api_status, &merged) else {
            if !held_back {
                self.written(&api_uid, version, now);
            }
            return Ok(());
        };
        let ns = target.metadata.namespace.as_deref().unwrap_or_default();
        let name = target.metadata.name.as_deref().unwrap_or_default();
        match self.api.patch_status(ns, name, &patch) {
            Ok(pod) => {
                log::debug!(
                    "Status for pod updated successfully pod={ns}/{name} phase={}",
                    merged.phase.as_deref().unwrap_or_default()
                );
                if !held_back {
                    self.written(&api_uid, version, now);
                }
                self.patched.insert(
                    api_uid,
                    (
                        target.metadata.resource_version.clone(),
                        pod.status.unwrap_or_default(),
                    ),
                );
                Ok(())
            }
            Err(e) if e.is_not_found() || e.is_conflict() => {
                log::info!(
                    "Pod {ns}/{name} ({api_uid}) was deleted or recreated on the API server: \
                     its status is not written ({e})"
                );
                self.dropped.insert(api_uid);
                Ok(())
            }
            Err(e) if e.is_unreachable() => Err(e),
            Err(e) => {
                // Tried again at the next resync.
                log::warn!(
                    "Failed to update status for pod {ns}/{name}: {}",
                    base::loops::error_chain(&e)
                );
                Ok(())
            }
        }
    }

    fn written(&mut self, api_uid: &str, version: u64, now: Instant) {
        self.synced.insert(api_uid.to_string(), version);
        if let Some(since) = self.pending_since.remove(api_uid) {
            if let Some(m) = &self.metrics {
                m.pod_status_sync_duration
                    .observe([], now.duration_since(since).as_secs_f64());
            }
        }
    }

    /// The API's status of `target`: the last PATCH's answer while the snapshot's copy
    /// is the one that PATCH replaced, else the snapshot's copy.
    fn api_status(&self, target: &Pod) -> PodStatus {
        match self.patched.get(uid_of(target)) {
            Some((rv, st)) if *rv == target.metadata.resource_version => st.clone(),
            _ => target.status.clone().unwrap_or_default(),
        }
    }

    /// Upstream `canBeDeleted` + the final `DELETE`: a pod being deleted whose
    /// containers are all stopped and whose API status is terminal is deleted with
    /// grace 0 and its UID as precondition. Mirror pods never come here. One whose
    /// containers may still run has the runtime looked at again ([`Self::recheck`]).
    fn delete_if_done(&mut self, pod: &Pod, now: Instant) -> Result<(), ApiError> {
        let uid = uid_of(pod).to_string();
        if pod.metadata.deletion_timestamp.is_none() || self.dropped.contains(&uid) {
            return Ok(());
        }
        if !(self.finished)(&uid) {
            self.recheck(pod, now);
            return Ok(());
        }
        self.rechecks.remove(&uid);
        let terminal = super::is_terminal_phase(self.api_status(pod).phase.as_deref());
        if !terminal {
            return Ok(());
        }
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        match self.api.delete(ns, name, &uid) {
            Ok(()) => {
                log::info!("Pod fully terminated and removed from etcd pod={ns}/{name}");
                self.dropped.insert(uid);
                Ok(())
            }
            Err(e) if e.is_not_found() || e.is_conflict() => {
                self.dropped.insert(uid);
                Ok(())
            }
            Err(e) if e.is_unreachable() => Err(e),
            Err(e) => {
                log::warn!(
                    "Failed to delete pod {ns}/{name}: {}",
                    base::loops::error_chain(&e)
                );
                Ok(())
            }
        }
    }

    /// A pod being deleted whose containers may still run: every [`RECHECK_PERIOD`]
    /// the hook has the runtime looked at again, so a container death the PLEG missed
    /// is found without waiting for its next full relist. Said once when it first
    /// asks, warned once when the runtime keeps a container running [`RECHECK_WARN`]
    /// after the pod's kill ended.
    fn recheck(&mut self, pod: &Pod, now: Instant) {
        let uid = uid_of(pod);
        let due = self
            .rechecks
            .get(uid)
            .is_none_or(|r| now.duration_since(r.last) >= RECHECK_PERIOD);
        if !due {
            return;
        }
        let asked = (self.recheck)(uid);
        let r = self.rechecks.entry(uid.to_string()).or_insert(Recheck {
            last: now,
            asked_since: None,
            warned: false,
        });
        r.last = now;
        if !asked {
            r.asked_since = None;
            return;
        }
        let pod = runtime::container::format_pod(pod);
        match r.asked_since {
            None => {
                r.asked_since = Some(now);
                log::info!(
                    "pod {pod}: being deleted and its kill has ended, but a container \
                     of it was last seen running: looking at the runtime again"
                );
            }
            Some(since) if !r.warned && now.duration_since(since) >= RECHECK_WARN => {
                r.warned = true;
                log::warn!(
                    "pod {pod}: being deleted, its kill ended {:?} ago, and the runtime \
                     still lists a container of it running: its final delete waits",
                    now.duration_since(since)
                );
            }
            Some(_) => {}
        }
    }

    /// Creates and deletes mirror pods as [`mirror::mirror_actions`] says.
    fn sync_mirrors(&mut self, snap: &PodSnapshot, now: Instant) -> Result<(), ApiError> {
        self.created.retain(|_, (uid, at)| {
            let seen = snap.mirrors.iter().any(|m| uid_of(m) == uid.as_str());
            !seen && now.duration_since(*at) < MIRROR_CREATE_WAIT
        });
        for action in mirror::mirror_actions(&snap.pods, &snap.mirrors, snap.sources_ready) {
            match action {
                MirrorAction::Delete {
                    namespace,
                    name,
                    uid,
                } => match self.api.delete(&namespace, &name, &uid) {
                    Ok(()) => log::info!("Deleted mirror pod {namespace}/{name} ({uid})"),
                    Err(e) if e.is_not_found() || e.is_conflict() => {}
                    Err(e) if e.is_unreachable() => return Err(e),
                    Err(e) => log::warn!(
                        "Failed deleting mirror pod {namespace}/{name}: {}",
                        base::loops::error_chain(&e)
                    ),
                },
                MirrorAction::Create(pod) => {
                    let full = crate::podconfig::full_name(&pod);
                    if self.created.contains_key(&full) {
                        continue;
                    }
                    let Some(node_uid) = self.node_uid(now)? else {
                        continue;
                    };
                    let m = mirror::mirror_pod(&pod, &self.node_name, &node_uid);
                    match self.api.create(&m) {
                        Ok(created) => {
                            log::info!(
                                "Created mirror pod {}",
                                runtime::container::format_pod(&created)
                            );
                            self.created
                                .insert(full, (uid_of(&created).to_string(), now));
                        }
                        // Already there: the watch shows it soon.
                        Err(e) if e.is_already_exists() => {}
                        Err(e) if e.is_unreachable() => return Err(e),
                        Err(e) => {
                            // Perhaps the Node was recreated: fetched again next time.
                            self.node_uid = None;
                            log::warn!(
                                "Failed creating a mirror pod for {full}: {}",
                                base::loops::error_chain(&e)
                            );
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The Node's UID, fetched once (upstream refuses mirror pods while the node object
    /// cannot be read). None while the Node is not registered.
    fn node_uid(&mut self, now: Instant) -> Result<Option<String>, ApiError> {
        if let Some(uid) = &self.node_uid {
            return Ok(Some(uid.clone()));
        }
        if self.node_retry_at.is_some_and(|t| now < t) {
            return Ok(None);
        }
        self.node_retry_at = Some(now + NODE_RETRY);
        match self.api.node(&self.node_name) {
            Ok(node) if node.metadata.deletion_timestamp.is_none() => {
                self.node_uid = node.metadata.uid;
                Ok(self.node_uid.clone())
            }
            Ok(_) => Ok(None),
            Err(e) if e.is_unreachable() => Err(e),
            Err(e) => {
                log::debug!(
                    "No mirror pods yet: node {} not readable: {e}",
                    self.node_name
                );
                Ok(None)
            }
        }
    }

    /// Forgets what belongs to pods no longer in the snapshot.
    fn forget_gone(&mut self, snap: &PodSnapshot) {
        let api_uids: HashSet<&str> = snap
            .pods
            .iter()
            .chain(&snap.mirrors)
            .map(|p| uid_of(p))
            .collect();
        self.synced.retain(|u, _| api_uids.contains(u.as_str()));
        self.pending_since
            .retain(|u, _| api_uids.contains(u.as_str()));
        self.patched.retain(|u, _| api_uids.contains(u.as_str()));
        self.seen_rv.retain(|u, _| api_uids.contains(u.as_str()));
        self.rechecks.retain(|u, _| api_uids.contains(u.as_str()));
        self.dropped.retain(|u| api_uids.contains(u.as_str()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// One call the fake API saw.
    #[derive(Clone, Debug, PartialEq)]
    enum Call {
        Patch(String, Value),
        Create(Value),
        Delete(String, String),
        Node,
    }

    /// An API server holding pod statuses as JSON (a patch's fields replace, its
    /// conditions merge by type): enough to answer a PATCH as the real one would.
    #[derive(Default)]
    struct FakeApi {
        calls: Mutex<Vec<Call>>,
        statuses: Mutex<HashMap<String, Value>>,
        /// The next answers' error code (e.g. 404, 409, 503), for every call.
        fail: Mutex<Option<(u16, &'static str)>>,
        node: Mutex<Option<String>>,
    }

    fn err(code: u16, reason: &str) -> ApiError {
        ApiError::Status {
            what: "fake",
            url: "fake".into(),
            code,
            reason: reason.into(),
            message: String::new(),
        }
    }

    impl FakeApi {
        fn calls(&self) -> Vec<Call> {
            std::mem::take(&mut *lock(&self.calls))
        }
        fn failing(&self) -> Result<(), ApiError> {
            match *lock(&self.fail) {
                Some((code, reason)) => Err(err(code, reason)),
                None => Ok(()),
            }
        }
    }

    fn apply(status: &mut Value, patch: &Value) {
        let (Some(s), Some(p)) = (status.as_object_mut(), patch.as_object()) else {
            return;
        };
        for (k, v) in p {
            if k.starts_with('$') {
                continue;
            }
            if k == "conditions" {
                let list = s.entry(k.clone()).or_insert(json!([]));
                for c in v.as_array().into_iter().flatten() {
                    let items = list.as_array_mut().expect("a list");
                    let pos = items.iter().position(|i| i["type"] == c["type"]);
                    match (pos, c.get("$patch")) {
                        (Some(i), Some(_)) => drop(items.remove(i)),
                        (Some(i), None) => apply(&mut items[i], c),
                        (None, _) => items.push(c.clone()),
                    }
                }
            } else if v.is_null() {
                s.remove(k);
            } else {
                s.insert(k.clone(), v.clone());
            }
        }
    }

    impl PodStatusApi for FakeApi {
        fn patch_status(&self, _: &str, name: &str, patch: &Value) -> Result<Pod, ApiError> {
            lock(&self.calls).push(Call::Patch(name.into(), patch.clone()));
            self.failing()?;
            let mut all = lock(&self.statuses);
            let st = all.entry(name.to_string()).or_insert(json!({}));
            apply(st, &patch["status"]);
            Ok(Pod {
                status: serde_json::from_value(st.clone()).ok(),
                ..Default::default()
            })
        }
        fn create(&self, pod: &Pod) -> Result<Pod, ApiError> {
            lock(&self.calls).push(Call::Create(serde_json::to_value(pod).expect("json")));
            self.failing()?;
            let mut p = pod.clone();
            p.metadata.uid = Some("mirror-uid".into());
            Ok(p)
        }
        fn delete(&self, _: &str, name: &str, uid: &str) -> Result<(), ApiError> {
            lock(&self.calls).push(Call::Delete(name.into(), uid.into()));
            self.failing()
        }
        fn node(&self, name: &str) -> Result<Node, ApiError> {
            lock(&self.calls).push(Call::Node);
            self.failing()?;
            match lock(&self.node).clone() {
                Some(uid) => Ok(serde_json::from_value(
                    json!({"metadata": {"name": name, "uid": uid}}),
                )
                .expect("node")),
                None => Err(err(404, "NotFound")),
            }
        }
    }

    struct Harness {
        api: Arc<FakeApi>,
        statuses: Arc<StatusCache>,
        view: Arc<PodManagerView>,
        finished: Arc<Mutex<bool>>,
        m: StatusManager,
        now: Instant,
    }

    fn harness() -> Harness {
        let api = Arc::new(FakeApi::default());
        let statuses = Arc::new(StatusCache::default());
        let view = Arc::new(PodManagerView::default());
        let finished = Arc::new(Mutex::new(false));
        let f = finished.clone();
        let m = StatusManager::new(
            api.clone(),
            statuses.clone(),
            view.clone(),
            Arc::new(move |_: &str| *lock(&f)),
            "node1",
        )
        .with_metrics(Arc::new(KubeletMetrics::new(Arc::default())));
        Harness {
            api,
            statuses,
            view,
            finished,
            m,
            now: Instant::now(),
        }
    }

    impl Harness {
        fn tick_after(&mut self, secs: u64) -> Result<(), StatusError> {
            self.now += Duration::from_secs(secs);
            self.m.tick(self.now)
        }
        /// Publishes pods with the API's statuses the fake holds (as the watch would).
        fn publish(&self, pods: Vec<Pod>, mirrors: Vec<Pod>) {
            let with_status = |mut p: Pod| {
                let name = p.metadata.name.clone().unwrap_or_default();
                if let Some(st) = lock(&self.api.statuses).get(&name) {
                    p.status = serde_json::from_value(st.clone()).ok();
                    p.metadata.resource_version = Some(format!("rv-{st}"));
                }
                Arc::new(p)
            };
            self.view.publish(PodSnapshot {
                pods: pods.into_iter().map(with_status).collect(),
                mirrors: mirrors.into_iter().map(with_status).collect(),
                sources_ready: true,
            });
        }
    }

    fn api_pod(name: &str, uid: &str) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "default",
            "uid": uid, "resourceVersion": "1",
            "annotations": {"kubernetes.io/config.source": "api"}}}))
        .expect("pod")
    }

    fn status(phase: &str, ready: &str) -> PodStatus {
        serde_json::from_value(json!({"phase": phase, "conditions": [
            {"type": "Ready", "status": ready}, {"type": "PodScheduled", "status": "True"}]}))
        .expect("status")
    }

    fn patches(calls: &[Call]) -> Vec<&Value> {
        calls
            .iter()
            .filter_map(|c| match c {
                Call::Patch(_, p) => Some(p),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_changed_status_is_patched_once_and_an_unchanged_one_costs_nothing() {
        let mut h = harness();
        h.publish(vec![api_pod("web", "u1")], vec![]);
        h.statuses.set("u1", status("Running", "False"));
        h.tick_after(0).expect("tick");
        let calls = h.api.calls();
        let p = patches(&calls);
        assert_eq!(p.len(), 1, "{calls:?}");
        assert_eq!(
            p[0]["metadata"],
            json!({"uid": "u1"}),
            "the UID precondition"
        );
        assert_eq!(p[0]["status"]["phase"], "Running");
        let synced =
            h.m.metrics
                .as_ref()
                .map(|m| m.pod_status_sync_duration.count([]));
        assert_eq!(synced, Some(1), "kubelet_pod_status_sync_duration_seconds");
        // Nothing changed: no call, not even at the resync while the watch lags...
        h.tick_after(1).expect("tick");
        h.tick_after(11).expect("resync");
        // ...nor once it caught up.
        h.publish(vec![api_pod("web", "u1")], vec![]);
        h.tick_after(11).expect("resync");
        assert_eq!(h.api.calls(), []);
        // A change: only the difference.
        h.statuses.set("u1", status("Running", "True"));
        h.tick_after(1).expect("tick");
        let calls = h.api.calls();
        assert_eq!(
            patches(&calls)[0]["status"]["conditions"],
            json!([{"type": "Ready", "status": "True"}])
        );
    }

    #[test]
    fn a_changed_api_copy_is_compared_at_once_not_at_the_resync() {
        let mut h = harness();
        h.publish(vec![api_pod("web", "u1")], vec![]);
        h.statuses.set("u1", status("Running", "True"));
        h.tick_after(0).expect("tick");
        assert_eq!(patches(&h.api.calls()).len(), 1);
        // Someone else overwrites the status (a new resourceVersion in the watch).
        let mut p = api_pod("web", "u1");
        p.status = Some(status("Pending", "False"));
        p.metadata.resource_version = Some("99".into());
        h.view.publish(PodSnapshot {
            pods: vec![Arc::new(p)],
            mirrors: vec![],
            sources_ready: true,
        });
        h.tick_after(1).expect("tick");
        let calls = h.api.calls();
        assert_eq!(patches(&calls).len(), 1, "{calls:?}");
        assert_eq!(patches(&calls)[0]["status"]["phase"], "Running");
        // The copy is unchanged since: nothing more.
        h.tick_after(1).expect("tick");
        assert_eq!(h.api.calls(), []);
    }

    #[test]
    fn the_newest_version_is_what_is_written() {
        let mut h = harness();
        h.publish(vec![api_pod("web", "u1")], vec![]);
        h.statuses.set("u1", status("Pending", "False"));
        h.statuses.set("u1", status("Running", "True"));
        h.tick_after(0).expect("tick");
        let calls = h.api.calls();
        assert_eq!(patches(&calls).len(), 1);
        assert_eq!(patches(&calls)[0]["status"]["phase"], "Running");
        // The watch brings an older copy of the pod (its status as the API had it
        // before): the resync writes the kubelet's newest again.
        let mut stale = api_pod("web", "u1");
        stale.status = Some(status("Pending", "False"));
        stale.metadata.resource_version = Some("0".into());
        h.view.publish(PodSnapshot {
            pods: vec![Arc::new(stale)],
            mirrors: vec![],
            sources_ready: true,
        });
        h.tick_after(11).expect("resync");
        let calls = h.api.calls();
        assert_eq!(patches(&calls)[0]["status"]["phase"], "Running");
    }

    #[test]
    fn a_pod_gone_or_recreated_on_the_api_server_is_dropped() {
        for code in [404, 409] {
            let mut h = harness();
            h.publish(vec![api_pod("web", "u1")], vec![]);
            h.statuses.set("u1", status("Running", "True"));
            *lock(&h.api.fail) = Some((code, "x"));
            h.tick_after(0).expect("tick");
            assert_eq!(h.api.calls().len(), 1);
            h.statuses.set("u1", status("Running", "False"));
            h.tick_after(1).expect("tick");
            h.tick_after(11).expect("resync");
            assert_eq!(h.api.calls(), [], "{code}: not retried");
        }
    }

    #[test]
    fn a_terminal_phase_on_the_api_server_is_never_undone() {
        let mut h = harness();
        lock(&h.api.statuses).insert("web".into(), json!({"phase": "Succeeded"}));
        h.publish(vec![api_pod("web", "u1")], vec![]);
        h.statuses.set("u1", status("Running", "True"));
        h.tick_after(0).expect("tick");
        let calls = h.api.calls();
        let p = patches(&calls);
        assert_eq!(p[0]["status"].get("phase"), None, "{p:?}");
        let ready = &lock(&h.api.statuses)["web"]["conditions"][0];
        assert_eq!(ready["status"], "False", "terminal: never ready");
    }

    #[test]
    fn an_unreachable_api_server_backs_off_then_everything_is_written() {
        let mut h = harness();
        h.publish(vec![api_pod("a", "u1"), api_pod("b", "u2")], vec![]);
        h.statuses.set("u1", status("Running", "True"));
        h.statuses.set("u2", status("Running", "True"));
        *lock(&h.api.fail) = Some((503, "ServiceUnavailable"));
        let first = base::loops::error_chain(&h.tick_after(0).expect_err("unreachable"));
        assert_eq!(h.api.calls().len(), 1, "the tick ends at the first failure");
        // Backing off: nothing is tried before the back-off ends.
        *lock(&h.api.fail) = None;
        h.now += Duration::from_millis(500);
        // Still failing while it waits, in the same words (one warning, no "recovered").
        let waiting = h.m.tick(h.now).expect_err("backing off");
        assert_eq!(base::loops::error_chain(&waiting), first);
        assert_eq!(h.api.calls(), []);
        h.tick_after(4).expect("back");
        assert_eq!(patches(&h.api.calls()).len(), 2, "both written on return");
    }

    #[test]
    fn a_deleted_pod_is_deleted_for_good_once_down_and_terminal() {
        let mut h = harness();
        let mut p = api_pod("web", "u1");
        p.metadata.deletion_timestamp = Some(base::time::k8s_time(std::time::SystemTime::now()));
        h.publish(vec![p.clone()], vec![]);
        lock(&h.api.statuses).insert("web".into(), json!({"phase": "Running"}));
        h.publish(vec![p.clone()], vec![]);
        // Computed terminal, but a container may still run: not yet terminal, not deleted.
        h.statuses.set("u1", status("Failed", "False"));
        h.tick_after(0).expect("tick");
        let calls = h.api.calls();
        assert!(
            !calls.iter().any(|c| matches!(c, Call::Delete(..))),
            "{calls:?}"
        );
        assert_eq!(lock(&h.api.statuses)["web"]["phase"], "Running");
        // Everything stopped (no new status version): the next tick writes the final
        // status, then deletes it with its UID.
        *lock(&h.finished) = true;
        h.tick_after(1).expect("tick");
        let calls = h.api.calls();
        assert_eq!(lock(&h.api.statuses)["web"]["phase"], "Failed");
        assert_eq!(
            calls.last(),
            Some(&Call::Delete("web".into(), "u1".into())),
            "{calls:?}"
        );
        assert!(
            matches!(calls[0], Call::Patch(..)),
            "status first: {calls:?}"
        );
        h.tick_after(11).expect("resync");
        assert_eq!(h.api.calls(), [], "deleted once");
    }

    #[test]
    fn a_deleted_pod_seen_running_after_its_kill_has_the_runtime_looked_at_again() {
        let mut h = harness();
        let asked = Arc::new(Mutex::new(Vec::<String>::new()));
        let (a, f, f2) = (asked.clone(), h.finished.clone(), h.finished.clone());
        // As the kubelet's hook: asks while the pod is not finished.
        h.m = StatusManager::new(
            h.api.clone(),
            h.statuses.clone(),
            h.view.clone(),
            Arc::new(move |_: &str| *lock(&f2)),
            "node1",
        )
        .with_recheck(Arc::new(move |uid: &str| {
            lock(&a).push(uid.to_string());
            !*lock(&f)
        }));
        let mut p = api_pod("web", "u1");
        p.metadata.deletion_timestamp = Some(base::time::k8s_time(std::time::SystemTime::now()));
        lock(&h.api.statuses).insert("web".into(), json!({"phase": "Running"}));
        h.publish(vec![p.clone()], vec![]);
        h.statuses.set("u1", status("Failed", "False"));
        // Its containers may still run: asked at once, then every RECHECK_PERIOD.
        h.tick_after(0).expect("tick");
        assert_eq!(*lock(&asked), ["u1"]);
        h.tick_after(1).expect("tick");
        assert_eq!(lock(&asked).len(), 1, "not again within the period");
        h.tick_after(RECHECK_PERIOD.as_secs()).expect("tick");
        assert_eq!(lock(&asked).len(), 2);
        assert!(!h.api.calls().iter().any(|c| matches!(c, Call::Delete(..))));
        // The look found it down: final status, delete, no more asking.
        *lock(&h.finished) = true;
        h.tick_after(1).expect("tick");
        let calls = h.api.calls();
        assert_eq!(
            calls.last(),
            Some(&Call::Delete("web".into(), "u1".into())),
            "{calls:?}"
        );
        h.tick_after(RECHECK_PERIOD.as_secs() + 1).expect("tick");
        assert_eq!(lock(&asked).len(), 2);
    }

    #[test]
    fn a_pod_not_being_deleted_is_never_looked_at_again() {
        let mut h = harness();
        let asked = Arc::new(Mutex::new(0));
        let a = asked.clone();
        h.m = StatusManager::new(
            h.api.clone(),
            h.statuses.clone(),
            h.view.clone(),
            Arc::new(|_: &str| false),
            "node1",
        )
        .with_recheck(Arc::new(move |_: &str| {
            *lock(&a) += 1;
            true
        }));
        h.publish(vec![api_pod("web", "u1")], vec![]);
        h.statuses.set("u1", status("Running", "True"));
        h.tick_after(0).expect("tick");
        h.tick_after(RECHECK_PERIOD.as_secs()).expect("tick");
        assert_eq!(*lock(&asked), 0);
    }

    fn static_pod() -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "web-node1", "namespace": "default",
            "uid": "s1", "annotations": {"kubernetes.io/config.source": "file",
            "kubernetes.io/config.hash": "s1"}}, "spec": {"containers": []}}),
        )
        .expect("pod")
    }

    #[test]
    fn a_static_pod_gets_a_mirror_owned_by_the_node_and_its_status() {
        let mut h = harness();
        h.publish(vec![static_pod()], vec![]);
        h.statuses.set("s1", status("Running", "True"));
        // No Node yet: asked, nothing created, asked again later.
        h.tick_after(0).expect("tick");
        assert_eq!(h.api.calls(), [Call::Node]);
        *lock(&h.api.node) = Some("node-uid".into());
        h.tick_after(1).expect("tick");
        assert_eq!(h.api.calls(), [], "not looked for again at once");
        h.tick_after(5).expect("tick");
        let calls = h.api.calls();
        assert_eq!(calls.len(), 2, "{calls:?}");
        let Call::Create(m) = &calls[1] else {
            panic!("{calls:?}")
        };
        assert_eq!(
            m["metadata"]["annotations"]["kubernetes.io/config.mirror"],
            "s1"
        );
        assert_eq!(m["metadata"]["ownerReferences"][0]["uid"], "node-uid");
        assert_eq!(m["spec"]["nodeName"], "node1");
        // Not created twice while the watch has not shown it.
        h.tick_after(1).expect("tick");
        assert_eq!(h.api.calls(), []);
        // The mirror shows up: the static pod's status goes to it, under its UID.
        let mut mirror: Pod = serde_json::from_value(m.clone()).expect("mirror");
        mirror.metadata.uid = Some("mirror-uid".into());
        h.publish(vec![static_pod()], vec![mirror.clone()]);
        h.tick_after(1).expect("tick");
        let calls = h.api.calls();
        assert_eq!(calls.len(), 1, "{calls:?}");
        assert!(
            matches!(&calls[0], Call::Patch(n, p) if n == "web-node1" && p["metadata"]["uid"] == "mirror-uid")
        );
        // The static pod goes: its mirror is deleted.
        h.publish(vec![], vec![mirror]);
        h.tick_after(1).expect("tick");
        assert_eq!(
            h.api.calls(),
            [Call::Delete("web-node1".into(), "mirror-uid".into())]
        );
    }
}
