//! Pod workers (upstream `pkg/kubelet/pod_workers.go`): a bounded pool of
//! `pod-worker-N` threads that carry out pod syncs and kills, one pod at a time per
//! worker, never two workers on the same pod, and only the newest update of a pod kept.
//!
//! The sync loop calls [`PodWorkers::update_pod`] and returns at once; a slow pod (a long
//! pull, a 30 s grace period) occupies one worker and never blocks the others or the
//! sync loop. A kill is never dropped: a sync that arrives after a pending kill runs after
//! it (the pod is stopped, then started again), a kill that arrives after a pending sync
//! replaces it.
//!
//! A worker may hand a pod's work on (a whole-pod kill, a sync's container stops or a
//! postStart hook go to the pod killer, so a long grace period or a hung hook does not
//! hold one of the few workers): it answers [`Outcome::Continues`], the pod's slot
//! stays busy (the pod is parked), and whoever finishes the work calls
//! [`PodWorkers::finish`] (or [`PodWorkers::resume`], which syncs the pod again), after
//! which the pod's pending work runs. So a worker is held only by runtime calls, each
//! with a timeout: one held longer than [`crate::health::POD_WORKER_STALL`] fails the
//! healthz check named after it.
//!
//! A worker that panics (caught and restarted by `loops`) releases the pod it held: the
//! slot is no longer busy, the work it was doing is pending again (unless newer work of
//! the same kind replaced it) and the pod is queued, so the pod is not stuck forever.
//!
//! Over 800 lines: 300 of them are its unit tests (ordering, parking, panics, idle
//! exits); the pool's state machine itself is one struct and does not split cleanly.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, TrySendError};
use k8s_openapi::api::core::v1::Pod;

use crate::metrics::KubeletMetrics;
use base::loops::{lock, LoopHandle, Loops, Pool, PoolSpec, SpawnError};

/// Size of the worker pool. Pod work is mostly waiting on dockerd; four in flight keep
/// a 2-core board busy without piling up runtime calls.
pub const DEFAULT_WORKERS: usize = 4;

/// A worker with no pod to work on for this long exits. Longer than the 1 min resync
/// of every pod, so a node with pods keeps the workers its resyncs need (one, usually:
/// a worker starts only when the queue outgrows the free ones) and churns no thread; a
/// node without pods keeps none.
pub const WORKER_IDLE: Duration = Duration::from_secs(90);

/// Capacity of the ready queue. Each pod is queued at most once, so this bounds the
/// number of pods with work waiting; beyond it, updates stay pending and the next sync
/// tick re-queues them.
pub(crate) const QUEUE_CAPACITY: usize = 1024;

/// A pod to stop for good.
#[derive(Clone, Debug, Default)]
pub struct Kill {
    /// Its spec, when known (hooks, grace periods, sidecar order); None for an orphan.
    pub pod: Option<Arc<Pod>>,
    /// Replaces every container's grace period (a deletion's, an orphan's).
    pub grace: Option<Duration>,
    /// Remove its containers afterwards (it is gone from its source), rather than keep
    /// them for status and logs (it was deleted and is kept until the source forgets it).
    pub remove: bool,
}

/// One unit of pod work.
#[derive(Clone, Debug)]
pub enum Work {
    /// Bring the pod to its desired state.
    Sync(Arc<Pod>),
    /// Stop everything of the pod.
    Kill(Kill),
}

/// Whether a worker is done with a pod's work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Done: the pod's next work may run.
    Done,
    /// Handed on; the slot stays busy until [`PodWorkers::finish`] is called.
    Continues,
}

/// What a worker runs. The kubelet's implementation calls the runtime manager and
/// publishes status; tests use a recording fake.
pub trait PodSyncer: Send + Sync + 'static {
    /// Syncs one pod.
    fn sync_pod(&self, pod: &Arc<Pod>) -> Outcome;
    /// Kills one pod by UID.
    fn kill_pod(&self, uid: &str, kill: &Kill) -> Outcome;
}

#[derive(Debug, Default)]
struct Slot {
    busy: bool,
    queued: bool,
    pending_kill: Option<Kill>,
    pending_sync: Option<Arc<Pod>>,
    /// When the newest pending work was handed in: the start of its
    /// `kubelet_pod_worker_duration_seconds` (upstream's `UpdatePodOptions.StartTime`).
    pending_since: Option<Instant>,
    /// The work a worker (or the pod killer) is doing: its operation type and start.
    in_flight: Option<(&'static str, Instant)>,
    /// The work in flight is a kill of a pod gone from its source (`Kill::remove`).
    removing: bool,
    /// The work a worker is running, kept so that a worker's panic can put it back.
    running: Option<Work>,
    /// The pod spec of the last sync: a sync with another `Arc` is an `update` (the
    /// sync loop makes a new `Arc` only when a source changed the pod; PLEG events,
    /// probes and ticks hand the one it holds). None until the pod is first synced,
    /// and again after a kill, so the next sync is a `create`.
    last_synced: Option<Arc<Pod>>,
}

impl Slot {
    fn has_pending(&self) -> bool {
        self.pending_kill.is_some() || self.pending_sync.is_some()
    }
}

/// The pool's shared state: per-pod slots and the queue of pods ready to be worked on.
#[derive(Debug)]
pub struct PodWorkers {
    slots: Mutex<HashMap<String, Slot>>,
    ready_tx: base::chan::BoundedSender<String>,
    ready_rx: Receiver<String>,
    /// The workers, once started; None in tests that drive [`PodWorkers`] by hand.
    pool: OnceLock<Pool<String>>,
    metrics: Arc<KubeletMetrics>,
}

impl Default for PodWorkers {
    fn default() -> Self {
        let (ready_tx, ready_rx) = base::chan::bounded(QUEUE_CAPACITY);
        PodWorkers {
            slots: Mutex::new(HashMap::new()),
            ready_tx,
            ready_rx,
            pool: OnceLock::new(),
            metrics: Arc::default(),
        }
    }
}

impl PodWorkers {
    /// Records into `metrics` (worker durations, restarted pods, containers per pod).
    pub fn with_metrics(mut self, metrics: Arc<KubeletMetrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Starts the pool of at most `n` worker threads named `pod-worker-0` … running
    /// `syncer`: a worker starts when a pod is queued and none is free, and exits after
    /// [`WORKER_IDLE`] without a pod.
    pub fn start(
        self: &Arc<Self>,
        loops: &Loops,
        n: usize,
        syncer: Arc<dyn PodSyncer>,
    ) -> Result<(), SpawnError> {
        let me = self.clone();
        let spec = PoolSpec {
            prefix: "pod-worker".into(),
            max: n,
            idle: WORKER_IDLE,
        };
        // A sync decodes Docker's JSON answers and builds pods: the big stack.
        let big = loops.with_stack_size(base::loops::BIG_STACK);
        let pool = Pool::new(
            &big,
            spec,
            self.ready_rx.clone(),
            move |uid: String, handle: &LoopHandle| {
                // From here on the pod is this worker's: a panic (caught by the pool)
                // releases it and queues its work again.
                let _release = ReleaseOnPanic {
                    workers: &me,
                    uid: &uid,
                };
                handle.injected_panic();
                me.work_on(&uid, syncer.as_ref());
            },
        );
        if self.pool.set(pool).is_err() {
            log::warn!("pod workers started twice; the second start is ignored");
        }
        // Pods queued before the start.
        if let Some(pool) = self.pool.get() {
            pool.kick();
        }
        Ok(())
    }

    /// Hands a pod's newest desired work to the pool. Never blocks.
    pub fn update_pod(&self, uid: &str, work: Work) {
        let mut slots = lock(&self.slots);
        let slot = slots.entry(uid.to_string()).or_default();
        slot.pending_since = Some(Instant::now());
        match work {
            Work::Kill(kill) => {
                // A kill supersedes any sync that has not started yet.
                slot.pending_sync = None;
                slot.pending_kill = Some(kill);
            }
            Work::Sync(pod) => {
                // Wanted again while the kill that follows its removal from its source
                // is pending or running: removed and created again with the same UID
                // (upstream counts it in `UpdatePod`). A sync of a pod that is only
                // being deleted (a PLEG event during its grace period) is not one.
                let removing =
                    slot.removing || slot.pending_kill.as_ref().is_some_and(|k| k.remove);
                if removing {
                    let is_static = runtime::container::is_static_pod(&pod);
                    self.metrics
                        .restarted_pods
                        .inc([if is_static { "true" } else { "false" }]);
                }
                slot.pending_sync = Some(pod);
            }
        }
        let full = !slot.busy && !slot.queued && !self.enqueue(uid, slot);
        drop(slots);
        if full {
            queue_full(uid);
        }
    }

    /// True while the pool has work for, or is working on, this pod.
    pub fn is_active(&self, uid: &str) -> bool {
        lock(&self.slots)
            .get(uid)
            .is_some_and(|s| s.busy || s.queued || s.has_pending())
    }

    /// Pods with work waiting that could not be queued (the queue was full); the sync
    /// loop's tick calls this to queue them again.
    pub fn requeue_stranded(&self) {
        let mut stranded = Vec::new();
        let mut slots = lock(&self.slots);
        for (uid, slot) in slots.iter_mut() {
            if !slot.busy && !slot.queued && slot.has_pending() {
                let uid = uid.clone();
                if !self.enqueue(&uid, slot) {
                    stranded.push(uid);
                }
            }
        }
        drop(slots);
        for uid in stranded {
            queue_full(&uid);
        }
    }

    /// Queues the pod for a worker; false when the queue is full (the caller logs it
    /// once its lock is released, and the next sync tick tries again).
    #[must_use]
    fn enqueue(&self, uid: &str, slot: &mut Slot) -> bool {
        match self.ready_tx.try_send(uid.to_string()) {
            Ok(()) => {
                slot.queued = true;
                if let Some(pool) = self.pool.get() {
                    pool.kick();
                }
                true
            }
            Err(TrySendError::Full(_)) => false,
            Err(TrySendError::Disconnected(_)) => true,
        }
    }

    fn work_on(&self, uid: &str, syncer: &dyn PodSyncer) {
        loop {
            let work = {
                let mut slots = lock(&self.slots);
                let Some(slot) = slots.get_mut(uid) else {
                    return;
                };
                slot.queued = false;
                let work = if let Some(kill) = slot.pending_kill.take() {
                    Some(Work::Kill(kill))
                } else {
                    slot.pending_sync.take().map(Work::Sync)
                };
                match work {
                    Some(w) => {
                        slot.busy = true;
                        let since = slot.pending_since.take().unwrap_or_else(Instant::now);
                        slot.removing = matches!(&w, Work::Kill(k) if k.remove);
                        let op = self.operation_type(slot, &w);
                        slot.in_flight = Some((op, since));
                        slot.running = Some(w.clone());
                        w
                    }
                    None => {
                        slot.busy = false;
                        return;
                    }
                }
            };
            let outcome = match &work {
                Work::Sync(pod) => syncer.sync_pod(pod),
                Work::Kill(kill) => syncer.kill_pod(uid, kill),
            };
            if outcome == Outcome::Continues {
                // Someone else finishes this work and calls `finish`.
                return;
            }
            let mut slots = lock(&self.slots);
            if let Some(slot) = slots.get_mut(uid) {
                self.work_done(slot);
                slot.busy = false;
                if !slot.has_pending() {
                    if matches!(work, Work::Kill(_)) {
                        // The pod is gone: forget its slot.
                        slots.remove(uid);
                    }
                    return;
                }
                // More work arrived meanwhile: keep going on this thread, which keeps
                // the pod's work in order.
                slot.busy = true;
            }
        }
    }
}

impl PodWorkers {
    /// Ends work that a worker handed on ([`Outcome::Continues`]): the pod's pending
    /// work, if any, is queued; a finished kill with nothing pending forgets the pod.
    pub fn finish(&self, uid: &str, was_kill: bool) {
        let mut slots = lock(&self.slots);
        let Some(slot) = slots.get_mut(uid) else {
            return;
        };
        self.work_done(slot);
        slot.busy = false;
        let mut full = false;
        if slot.has_pending() {
            if !slot.queued {
                full = !self.enqueue(uid, slot);
            }
        } else if was_kill {
            slots.remove(uid);
        }
        drop(slots);
        if full {
            queue_full(uid);
        }
    }
}

impl PodWorkers {
    /// Ends a sync that a worker parked ([`Outcome::Continues`]: its containers'
    /// stops, a postStart hook) and resumes it: `pod` is synced again on a free worker
    /// unless newer work of the pod is pending (a newer sync replaces it; a pending
    /// kill runs instead).
    pub fn resume(&self, uid: &str, pod: Arc<Pod>) {
        let mut slots = lock(&self.slots);
        let Some(slot) = slots.get_mut(uid) else {
            return;
        };
        self.work_done(slot);
        slot.busy = false;
        if !slot.has_pending() {
            slot.pending_sync = Some(pod);
            slot.pending_since = Some(Instant::now());
        }
        let full = !slot.queued && !self.enqueue(uid, slot);
        drop(slots);
        if full {
            queue_full(uid);
        }
    }
}

impl PodWorkers {
    /// The `operation_type` of work about to run on `slot` (upstream's
    /// `SyncPodType`): `kill`; `create` for the first sync of a pod (and the first after
    /// a kill); `update` when a source changed the pod since its last sync; else `sync`.
    /// A create also records the pod's container count.
    fn operation_type(&self, slot: &mut Slot, work: &Work) -> &'static str {
        match work {
            Work::Kill(_) => {
                slot.last_synced = None;
                "kill"
            }
            Work::Sync(pod) => {
                let op = match &slot.last_synced {
                    None => {
                        let n = pod.spec.as_ref().map_or(0, |s| s.containers.len());
                        self.metrics.containers_per_pod.observe([], n as f64);
                        "create"
                    }
                    Some(last) if !Arc::ptr_eq(last, pod) => "update",
                    Some(_) => "sync",
                };
                slot.last_synced = Some(pod.clone());
                op
            }
        }
    }

    /// Records the end of the slot's work in flight (upstream observes
    /// `PodWorkerDuration` when a pod's work completes).
    fn work_done(&self, slot: &mut Slot) {
        slot.removing = false;
        slot.running = None;
        if let Some((op, since)) = slot.in_flight.take() {
            self.metrics
                .pod_worker_duration
                .observe([op], since.elapsed().as_secs_f64());
        }
    }
}

impl PodWorkers {
    /// After a worker panicked while it held `uid`: frees the slot, makes the work it
    /// was running pending again (a newer pending kill or sync of the same kind wins; a
    /// kill still runs before a sync), and queues the pod.
    fn release_after_panic(&self, uid: &str) {
        let mut slots = lock(&self.slots);
        let Some(slot) = slots.get_mut(uid) else {
            return;
        };
        let running = slot.running.take();
        self.work_done(slot);
        slot.busy = false;
        slot.queued = false;
        match running {
            Some(Work::Kill(kill)) if slot.pending_kill.is_none() => {
                slot.pending_kill = Some(kill);
            }
            Some(Work::Sync(pod)) if slot.pending_kill.is_none() && slot.pending_sync.is_none() => {
                slot.pending_sync = Some(pod);
            }
            _ => {}
        }
        if !slot.has_pending() {
            return;
        }
        slot.pending_since.get_or_insert_with(Instant::now);
        let full = !self.enqueue(uid, slot);
        drop(slots);
        log::warn!("pod {uid}: its worker panicked; the pod's work is queued again");
        if full {
            queue_full(uid);
        }
    }
}

/// Held by a worker while a pod is its own; releases the pod if the worker unwinds.
struct ReleaseOnPanic<'a> {
    workers: &'a PodWorkers,
    uid: &'a str,
}

impl Drop for ReleaseOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.workers.release_after_panic(self.uid);
        }
    }
}

/// Said outside the slots' lock (a log write may block on a slow stderr).
fn queue_full(uid: &str) {
    log::warn!("pod worker queue is full; pod {uid} waits for the next sync tick");
}

#[cfg(test)]
impl PodWorkers {
    /// Runs the work of every queued pod on the calling thread, as a worker would: the
    /// sync loop's and the syncer's tests drive the pool this way, without its threads,
    /// so that "nothing was done" can be asserted without waiting.
    pub(crate) fn run_queued(&self, syncer: &dyn PodSyncer) {
        while let Ok(uid) = self.ready_rx.try_recv() {
            self.work_on(&uid, syncer);
        }
    }

    /// True when no pod has work queued, pending or in progress.
    pub(crate) fn idle(&self) -> bool {
        lock(&self.slots)
            .values()
            .all(|s| !s.busy && !s.queued && !s.has_pending())
    }
}

/// When each pod is next due for a sync without events (upstream's work queue): after
/// the resync period on success, sooner after an error or when a backoff expires. The
/// sync loop's 1 s tick takes the due pods.
#[derive(Debug, Default)]
pub(crate) struct WorkQueue {
    due: Mutex<HashMap<String, std::time::Instant>>,
}

impl WorkQueue {
    /// Schedules `uid` to be synced `after` from now (replacing an earlier schedule).
    pub(crate) fn enqueue(&self, uid: &str, after: Duration) {
        let at = base::time::saturating_deadline(std::time::Instant::now(), after);
        lock(&self.due).insert(uid.to_string(), at);
    }

    /// Takes every pod whose time has come.
    pub(crate) fn take_due(&self, now: std::time::Instant) -> Vec<String> {
        let mut due = lock(&self.due);
        let ready: Vec<String> = due
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(u, _)| u.clone())
            .collect();
        for u in &ready {
            due.remove(u);
        }
        ready
    }

    /// Forgets a pod.
    pub(crate) fn remove(&self, uid: &str) {
        lock(&self.due).remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::KubeletMetrics;
    use base::loops::{shutdown_channel, Loops};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::time::Instant;

    /// Records calls; the first sync of each pod blocks until released, so tests can
    /// pile up updates behind it.
    #[derive(Default)]
    struct Recorder {
        calls: Mutex<Vec<String>>,
        in_flight: Mutex<HashMap<String, usize>>,
        overlap: Mutex<bool>,
        gate: Mutex<Option<Receiver<()>>>,
        hand_on: Mutex<bool>,
    }

    impl PodSyncer for Recorder {
        fn sync_pod(&self, pod: &Arc<Pod>) -> Outcome {
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            self.enter(&uid);
            let gate = lock(&self.gate).take();
            if let Some(g) = gate {
                let _ = g.recv_timeout(Duration::from_secs(10));
            }
            let img = pod.metadata.name.clone().unwrap_or_default();
            lock(&self.calls).push(format!("sync {uid} {img}"));
            self.leave(&uid);
            Outcome::Done
        }
        fn kill_pod(&self, uid: &str, _kill: &Kill) -> Outcome {
            self.enter(uid);
            lock(&self.calls).push(format!("kill {uid}"));
            self.leave(uid);
            if *lock(&self.hand_on) {
                Outcome::Continues
            } else {
                Outcome::Done
            }
        }
    }

    impl Recorder {
        fn enter(&self, uid: &str) {
            let mut f = lock(&self.in_flight);
            let n = f.entry(uid.to_string()).or_default();
            *n += 1;
            if *n > 1 {
                *lock(&self.overlap) = true;
            }
        }
        fn leave(&self, uid: &str) {
            if let Some(n) = lock(&self.in_flight).get_mut(uid) {
                *n -= 1;
            }
        }
    }

    fn pod(uid: &str, version: &str) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                uid: Some(uid.into()),
                name: Some(version.into()),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    fn wait_for(mut cond: impl FnMut() -> bool) {
        let until = Instant::now() + Duration::from_secs(10);
        while !cond() {
            assert!(Instant::now() < until, "condition not met in 10 s");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    #[test]
    fn newest_update_wins_and_a_pod_is_never_synced_twice_at_once() {
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop);
        let rec = Arc::new(Recorder::default());
        let (release, gate) = crossbeam_channel::bounded(1);
        *lock(&rec.gate) = Some(gate);
        let pw = Arc::new(PodWorkers::default());
        pw.start(&loops, 3, rec.clone()).expect("start");
        pw.update_pod("a", Work::Sync(pod("a", "v1")));
        wait_for(|| lock(&rec.in_flight).get("a") == Some(&1));
        // While v1 is in flight, v2..v4 arrive: only v4 must run.
        for v in ["v2", "v3", "v4"] {
            pw.update_pod("a", Work::Sync(pod("a", v)));
        }
        pw.update_pod("b", Work::Sync(pod("b", "v1")));
        wait_for(|| lock(&rec.calls).contains(&"sync b v1".to_string()));
        release.send(()).expect("release");
        // Once both pods are idle, exactly three syncs ran: v2 and v3 were dropped,
        // not run late, and v4 ran once.
        wait_for(|| !pw.is_active("a") && !pw.is_active("b"));
        assert_eq!(lock(&rec.calls).len(), 3, "{:?}", lock(&rec.calls));
        let calls = lock(&rec.calls).clone();
        let a: Vec<_> = calls
            .iter()
            .filter(|c| c.contains(" a "))
            .cloned()
            .collect();
        assert_eq!(a, ["sync a v1", "sync a v4"]);
        assert!(!*lock(&rec.overlap));
        shutdown.trigger();
        assert!(loops.join_all(Duration::from_secs(10)).is_empty());
    }

    /// Panics on the first sync of each pod, then records like [`Recorder`].
    #[derive(Default)]
    struct PanicsOnce {
        panicked: Mutex<Vec<String>>,
        rec: Recorder,
    }

    impl PodSyncer for PanicsOnce {
        fn sync_pod(&self, pod: &Arc<Pod>) -> Outcome {
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let first = {
                let mut p = lock(&self.panicked);
                let first = !p.contains(&uid);
                p.push(uid.clone());
                first
            };
            if first {
                panic!("sync of {uid} panics");
            }
            self.rec.sync_pod(pod)
        }
        fn kill_pod(&self, uid: &str, kill: &Kill) -> Outcome {
            self.rec.kill_pod(uid, kill)
        }
    }

    #[test]
    fn a_worker_that_panics_releases_its_pod_which_is_synced_again() {
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop);
        let syncer = Arc::new(PanicsOnce::default());
        let pw = Arc::new(PodWorkers::default());
        pw.start(&loops, 1, syncer.clone()).expect("start");
        pw.update_pod("a", Work::Sync(pod("a", "v1")));
        // The one worker panics, is restarted after 1 s, and syncs the pod it dropped.
        wait_for(|| *lock(&syncer.rec.calls) == ["sync a v1"]);
        wait_for(|| !pw.is_active("a"));
        let st = loops.registry().get("pod-worker-0").expect("listed");
        assert_eq!(st.panics, 1);
        shutdown.trigger();
        assert!(loops.join_all(Duration::from_secs(10)).is_empty());
    }

    #[test]
    fn a_panic_during_a_sync_requeues_it_and_a_newer_sync_wins() {
        let pw = PodWorkers::default();
        pw.update_pod("a", Work::Sync(pod("a", "v1")));
        // As a worker: take the pod's work, then panic while it runs.
        let uid = pw.ready_rx.try_recv().expect("queued");
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _release = ReleaseOnPanic {
                workers: &pw,
                uid: &uid,
            };
            struct Boom;
            impl PodSyncer for Boom {
                fn sync_pod(&self, pod: &Arc<Pod>) -> Outcome {
                    panic!("{:?}", pod.metadata.name)
                }
                fn kill_pod(&self, _: &str, _: &Kill) -> Outcome {
                    Outcome::Done
                }
            }
            pw.work_on(&uid, &Boom);
        }));
        assert!(caught.is_err());
        assert!(!pw.idle(), "the sync that panicked is pending again");
        // A newer sync arrives: it replaces the one that panicked, and runs once.
        pw.update_pod("a", Work::Sync(pod("a", "v2")));
        let rec = Recorder::default();
        pw.run_queued(&rec);
        assert_eq!(*lock(&rec.calls), ["sync a v2"]);
        assert!(pw.idle());
    }

    #[test]
    fn kill_is_never_dropped_and_a_later_sync_runs_after_it() {
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop);
        let rec = Arc::new(Recorder::default());
        let (release, gate) = crossbeam_channel::bounded(1);
        *lock(&rec.gate) = Some(gate);
        let pw = Arc::new(PodWorkers::default());
        pw.start(&loops, 2, rec.clone()).expect("start");
        pw.update_pod("a", Work::Sync(pod("a", "v1")));
        wait_for(|| lock(&rec.in_flight).get("a") == Some(&1));
        pw.update_pod("a", Work::Sync(pod("a", "v2")));
        pw.update_pod("a", Work::Kill(Kill::default()));
        pw.update_pod("a", Work::Sync(pod("a", "v3")));
        release.send(()).expect("release");
        wait_for(|| lock(&rec.calls).len() == 3);
        assert_eq!(*lock(&rec.calls), ["sync a v1", "kill a", "sync a v3"]);
        wait_for(|| !pw.is_active("a"));
        shutdown.trigger();
        assert!(loops.join_all(Duration::from_secs(10)).is_empty());
    }

    #[test]
    fn worker_durations_are_labelled_by_operation_and_a_readded_pod_counts_as_restarted() {
        let m = Arc::new(KubeletMetrics::default());
        let pw = PodWorkers::default().with_metrics(m.clone());
        let rec = Recorder::default();
        let v1 = pod("a", "v1");
        let step = |w: Work| {
            pw.update_pod("a", w);
            pw.run_queued(&rec);
        };
        step(Work::Sync(v1.clone()));
        step(Work::Sync(v1.clone()));
        step(Work::Sync(pod("a", "v2")));
        // Deleted (its kill keeps the pod) and synced during its grace: no restart.
        pw.update_pod("a", Work::Kill(Kill::default()));
        pw.update_pod("a", Work::Sync(pod("a", "v2")));
        assert_eq!(m.restarted_pods.get(["false"]), 0);
        pw.run_queued(&rec);
        // Removed from its source and added again before its kill ran: a restart.
        pw.update_pod(
            "a",
            Work::Kill(Kill {
                remove: true,
                ..Kill::default()
            }),
        );
        pw.update_pod("a", Work::Sync(pod("a", "v3")));
        pw.run_queued(&rec);
        let h = &m.pod_worker_duration;
        assert_eq!(
            ["create", "sync", "update", "kill"].map(|op| h.count([op])),
            [3, 1, 1, 2],
            "{:?}",
            lock(&rec.calls)
        );
        assert_eq!(m.restarted_pods.get(["false"]), 1);
        assert_eq!(m.containers_per_pod.count([]), 3, "one per create");
    }

    #[test]
    fn work_queue_hands_out_due_pods_once() {
        let q = WorkQueue::default();
        q.enqueue("a", Duration::ZERO);
        q.enqueue("b", Duration::from_secs(3600));
        let now = Instant::now();
        assert_eq!(q.take_due(now), ["a"]);
        assert!(q.take_due(now).is_empty());
        q.remove("b");
        assert!(q.take_due(now + Duration::from_secs(7200)).is_empty());
    }

    #[test]
    fn a_finished_kill_forgets_the_pod() {
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop);
        let rec = Arc::new(Recorder::default());
        let pw = Arc::new(PodWorkers::default());
        pw.start(&loops, 1, rec.clone()).expect("start");
        pw.update_pod("a", Work::Kill(Kill::default()));
        wait_for(|| lock(&rec.calls).len() == 1);
        wait_for(|| !pw.is_active("a"));
        assert!(lock(&pw.slots).is_empty());
        shutdown.trigger();
        assert!(loops.join_all(Duration::from_secs(10)).is_empty());
    }

    #[test]
    fn a_handed_on_kill_holds_the_pod_until_finished() {
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop);
        let rec = Arc::new(Recorder::default());
        *lock(&rec.hand_on) = true;
        let pw = Arc::new(PodWorkers::default());
        pw.start(&loops, 2, rec.clone()).expect("start");
        pw.update_pod("a", Work::Kill(Kill::default()));
        wait_for(|| lock(&rec.calls).len() == 1);
        pw.update_pod("a", Work::Sync(pod("a", "v2")));
        // The sync waits while the kill is still in the pod killer's hands.
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(*lock(&rec.calls), ["kill a"]);
        assert!(pw.is_active("a"));
        pw.finish("a", true);
        wait_for(|| lock(&rec.calls).len() == 2);
        assert_eq!(*lock(&rec.calls), ["kill a", "sync a v2"]);
        wait_for(|| !pw.is_active("a"));
        shutdown.trigger();
        assert!(loops.join_all(Duration::from_secs(10)).is_empty());
    }
}
