//! The prober (upstream `pkg/kubelet/prober`: `prober_manager.go`, `worker.go`,
//! `prober.go`): liveness, readiness and startup probes of every container, with
//! bounded threads.
//!
//! Upstream runs one goroutine per probe. rkubelet runs one `prober` thread that keeps a
//! deadline heap of every probe's next due time ([`scheduler`]) and the per-probe
//! counting state ([`worker`]), and hands each due probe run to a small bounded pool of
//! `probe-worker-N` threads ([`handlers`]; started when runs are queued, gone after
//! [`POOL_IDLE`] without one), so the thread count does not grow with the number of
//! probes and a slow probe occupies one pool thread for at most its timeout
//! while the others go on. Exec probes go through dockerd, which runs about nine execs
//! a second on a 2-core machine however many are asked in parallel, and takes
//! 120–340 ms for each: they have their own two `probe-exec-N` threads and queue, so a
//! pile of exec probes never takes the threads HTTP and TCP probes need.
//!
//! Data flow: after every pod sync the pod worker calls [`ProbeManager::update_pod`]
//! with the pod's newest container instances (IDs, running, start times) and pod IP;
//! the `prober` thread diffs that against its probes (new container → state reset, the
//! first probe `initialDelaySeconds` after its start; container gone → probe removed).
//! Published results land in the [`ResultsCache`] (read by status generation
//! for `ready`/`started`, and by the runtime manager to kill a container whose liveness
//! or startup probe failed), and a changed result is sent to the sync loop as a
//! [`ProbeEvent`] over a bounded channel, which syncs the pod at once.
//!
//! Over 800 lines: the prober loop's unit tests sit at its bottom, beside what they drive.

pub(crate) mod grpc;
pub mod handlers;
pub(crate) mod metrics;
pub(crate) mod scheduler;
pub mod spec;
pub(crate) mod worker;

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use k8s_openapi::api::core::v1::Pod;

use base::chan::BoundedSender;
use base::loops::{lock, LoopHandle, Loops, Pool, PoolSpec, SpawnError, Stop};
use handlers::Prober;
use metrics::{Lane, ProbeLabels, ProbeMetrics};
use runtime::container::labels::ContainerKind;
use runtime::container::results::ResultsCache;
use runtime::container::RuntimePod;
use runtime::container::{ProbeResult, ProbeType};
use runtime::{ContainerState, Runtime};
use scheduler::DeadlineHeap;
use spec::{ProbeError, ProbeSpec};
use worker::{ContainerView, Gate, ProbeState};

/// Upstream's `User-Agent`: `kube-probe/<major>.<minor>` of the API rkubelet speaks.
pub(crate) const USER_AGENT: &str = "kube-probe/1.33";

/// The result of one probe run and its message (output, body, or error).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Success, Failure, or Unknown when the probe could not be run.
    pub result: ProbeResult,
    /// Output or reason, for logs.
    pub message: String,
    /// Success that upstream reports as a warning (a redirect to another host).
    pub warning: bool,
}

impl Outcome {
    fn new(result: ProbeResult, message: impl Into<String>) -> Self {
        Outcome {
            result,
            message: message.into(),
            warning: false,
        }
    }
}

/// Threads for HTTP and TCP probes (`probe-worker-N`). A probe takes a few ms against
/// a healthy container and holds its thread for at most its timeout; four keep 200
/// probes/s on time on a 2-core board even while dockerd saturates the CPU with execs.
pub const PROBE_WORKERS: usize = 4;
/// Threads for exec probes (`probe-exec-N`). Measured here: dockerd does ~9 execs/s
/// whether one or four are asked in parallel, so two keep the engine busy and more
/// would only wait on it.
pub const EXEC_WORKERS: usize = 2;
/// A pool thread with no run for this long exits: over a probe period (10 s by
/// default), so a node with probes keeps its threads and one without has none.
const POOL_IDLE: Duration = Duration::from_secs(30);
/// Capacity of the channel of changed results to the sync loop (upstream buffers 20
/// per result manager). When full, the prober keeps the newest event per pod and
/// retries, so nothing is lost and the prober never blocks on the sync loop.
pub(crate) const EVENT_CAPACITY: usize = 64;
/// Probe runs waiting for a pool thread, per pool. Beyond it a due run is skipped
/// (a missed period) rather than piling up.
const JOB_CAPACITY: usize = 1024;
/// The prober thread wakes at least this often even with nothing due, to record a tick
/// for the loop registry (`/debug/loops` shows its last tick). Every change it must act
/// on comes as a message (a wake, a result) or is in its deadline heap, so this is no
/// polling period: the default probe period, not the 1 s it was (an idle node's
/// prober woke 86 400 times a day for nothing).
const IDLE_WAKE: Duration = Duration::from_secs(10);
/// Retry delay for results the sync loop's channel had no room for.
const RETRY_WAKE: Duration = Duration::from_millis(50);

/// A published result that changed, for the sync loop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeEvent {
    /// The pod.
    pub pod_uid: String,
    /// The container.
    pub container: String,
    /// Which probe.
    pub probe_type: ProbeType,
    /// The new result.
    pub result: ProbeResult,
}

/// One container's probes as the last pod sync saw them.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ContainerTargets {
    name: String,
    view: Option<ContainerView>,
    probes: Vec<(ProbeType, Result<Arc<ProbeSpec>, ProbeError>)>,
}

/// One pod's probes as the last pod sync saw them.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PodTargets {
    uid: String,
    name: String,
    namespace: String,
    pod_ip: Option<String>,
    containers: Vec<ContainerTargets>,
}

/// The probe manager: what pod workers and the sync loop call, and the results they
/// read. The probes themselves live on the `prober` thread.
#[derive(Debug)]
pub struct ProbeManager {
    /// Desired probes by pod UID, written by pod workers, read by the prober thread.
    desired: Mutex<HashMap<String, Arc<PodTargets>>>,
    /// Wakes the prober thread after `desired` changed (one pending wake is enough).
    wake: Sender<()>,
    results: Arc<ResultsCache>,
    metrics: Arc<ProbeMetrics>,
}

impl ProbeManager {
    /// Starts the `prober` thread, `workers` `probe-worker-N` threads (HTTP, TCP) and
    /// [`EXEC_WORKERS`] `probe-exec-N` threads; changed results go to `events`.
    pub fn start(
        loops: &Loops,
        runtime: Arc<dyn Runtime>,
        workers: usize,
        events: Sender<ProbeEvent>,
    ) -> Result<Arc<ProbeManager>, SpawnError> {
        let (wake_tx, wake_rx) = crossbeam_channel::bounded(1);
        let (job_tx, job_rx) = base::chan::bounded::<Job>(JOB_CAPACITY);
        let (exec_tx, exec_rx) = base::chan::bounded::<Job>(JOB_CAPACITY);
        // Unbounded: every run came from one of the two bounded queues above, so at
        // most 2 × JOB_CAPACITY results can wait (and no worker ever waits to post one).
        let (done_tx, done_rx) = crossbeam_channel::unbounded::<Done>();
        let mgr = Arc::new(ProbeManager::new(wake_tx));
        // A run decodes an HTTP answer or a Docker exec's JSON: the big stack.
        let big = loops.with_stack_size(base::loops::BIG_STACK);
        let pool = |prefix: &str, max: usize, rx: Receiver<Job>| {
            let prober = Prober::new(runtime.clone()).with_loops(loops);
            let done_tx = done_tx.clone();
            let metrics = mgr.metrics.clone();
            let spec = PoolSpec {
                prefix: prefix.into(),
                max,
                idle: POOL_IDLE,
            };
            Pool::new(&big, spec, rx, move |job, _| {
                run_job(&prober, job, &done_tx, &metrics)
            })
        };
        let network = pool("probe-worker", workers, job_rx);
        let exec = pool("probe-exec", EXEC_WORKERS, exec_rx);
        let mut prober_loop = ProberLoop::new(
            mgr.clone(),
            Lanes {
                network: LaneTx::new(job_tx, Some(network)),
                exec: LaneTx::new(exec_tx, Some(exec)),
            },
            done_rx,
            wake_rx,
            events,
            Instant::now(),
        );
        loops.spawn("prober", move |stop, handle| {
            prober_loop.run(&stop, &handle)
        })?;
        Ok(mgr)
    }

    /// A manager with no probes; `wake` tells the prober thread that they changed.
    fn new(wake: Sender<()>) -> ProbeManager {
        ProbeManager {
            desired: Mutex::new(HashMap::new()),
            wake,
            results: Arc::new(ResultsCache::default()),
            metrics: Arc::new(ProbeMetrics::default()),
        }
    }

    /// The published results (status generation and pod actions read them).
    pub fn results(&self) -> &Arc<ResultsCache> {
        &self.results
    }

    /// The probe metrics.
    pub fn metrics(&self) -> &Arc<ProbeMetrics> {
        &self.metrics
    }

    /// Tells the prober what a pod sync found: the pod's containers (newest instance
    /// of each) and its IP (upstream `AddPod` plus the status updates its workers read).
    /// Cheap when nothing changed.
    pub fn update_pod(&self, pod: &Pod, rt: &RuntimePod, pod_ip: Option<&str>) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let containers: Vec<ContainerTargets> = pod
            .spec
            .iter()
            .flat_map(|s| s.containers.iter())
            .filter_map(|c| {
                let probes: Vec<_> = ProbeType::ALL
                    .into_iter()
                    .filter_map(|ty| {
                        spec::probe_of(c, ty).map(|p| (ty, spec::resolve(p, ty, c).map(Arc::new)))
                    })
                    .collect();
                if probes.is_empty() {
                    return None;
                }
                let view = rt
                    .newest(&c.name, ContainerKind::App)
                    .map(|d| ContainerView {
                        id: d.id.clone(),
                        running: d.state == ContainerState::Running,
                        started_at: d.started_at,
                    });
                Some(ContainerTargets {
                    name: c.name.clone(),
                    view,
                    probes,
                })
            })
            .collect();
        {
            let mut desired = lock(&self.desired);
            if containers.is_empty() {
                if desired.remove(&uid).is_none() {
                    return;
                }
            } else {
                let t = PodTargets {
                    uid: uid.clone(),
                    name: pod.metadata.name.clone().unwrap_or_default(),
                    namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                    pod_ip: pod_ip.filter(|ip| !ip.is_empty()).map(str::to_string),
                    containers,
                };
                if desired.get(&uid).is_some_and(|old| **old == t) {
                    return;
                }
                desired.insert(uid, Arc::new(t));
            }
        }
        let _ = self.wake.try_send(());
    }

    /// Stops every probe of a pod (it is being killed: upstream stops liveness and
    /// startup workers as soon as a pod terminates, and nothing probes a dead pod).
    pub fn remove_pod(&self, uid: &str) {
        if lock(&self.desired).remove(uid).is_some() {
            let _ = self.wake.try_send(());
        }
    }

    /// Stops the probes of every pod `keep` rejects (upstream `CleanupPods`, from
    /// housekeeping).
    pub fn cleanup_pods(&self, keep: &dyn Fn(&str) -> bool) {
        let removed = {
            let mut desired = lock(&self.desired);
            let before = desired.len();
            desired.retain(|uid, _| keep(uid));
            before != desired.len()
        };
        if removed {
            let _ = self.wake.try_send(());
        }
    }

    /// UIDs of the pods with probes (for tests and debugging).
    pub fn pods(&self) -> Vec<String> {
        lock(&self.desired).keys().cloned().collect()
    }
}

/// One probe run handed to the pool.
#[derive(Debug)]
struct Job {
    worker: u64,
    container_id: String,
    spec: Arc<ProbeSpec>,
    pod_ip: Option<String>,
    due: Instant,
    lane: Lane,
}

/// A finished probe run.
#[derive(Debug)]
struct Done {
    worker: u64,
    container_id: String,
    outcome: Outcome,
}

/// A `probe-worker-N` thread: runs probes from the queue until shutdown.
fn run_job(prober: &Prober, job: Job, done: &Sender<Done>, metrics: &ProbeMetrics) {
    metrics.observe_lateness(job.lane, Instant::now().saturating_duration_since(job.due));
    let outcome = prober.run(
        &job.spec.handler,
        &job.container_id,
        job.pod_ip.as_deref(),
        job.spec.timeout,
    );
    let d = Done {
        worker: job.worker,
        container_id: job.container_id,
        outcome,
    };
    // The prober thread gone means shutdown: nobody wants the result.
    let _ = done.send(d);
}

/// (pod UID, container name, probe type): one probe.
type Key = (String, String, ProbeType);

/// The prober thread's state of one probe.
#[derive(Debug)]
struct ProbeWorker {
    key: Key,
    spec: Arc<ProbeSpec>,
    pod: Arc<PodTargets>,
    container: Option<ContainerView>,
    has_startup: bool,
    state: ProbeState,
    in_flight: bool,
    due: Instant,
    /// Since when (monotonic) the prober has known this instance running.
    running_since: Option<Instant>,
    labels: ProbeLabels,
    warned_unknown: bool,
}

impl ProbeWorker {
    fn ty(&self) -> ProbeType {
        self.key.2
    }
}

struct ProberLoop {
    mgr: Arc<ProbeManager>,
    workers: HashMap<u64, ProbeWorker>,
    by_key: HashMap<Key, u64>,
    heap: DeadlineHeap<u64>,
    next_id: u64,
    started: Instant,
    job_tx: LaneTx,
    exec_tx: LaneTx,
    done_rx: Receiver<Done>,
    wake_rx: Receiver<()>,
    events: Sender<ProbeEvent>,
    /// Newest undelivered event per pod (the sync loop's channel was full).
    pending: BTreeMap<String, ProbeEvent>,
    /// Invalid probes already reported.
    invalid: HashSet<Key>,
}

/// The queues of the two pools a probe run goes to.
#[derive(Debug)]
struct Lanes {
    network: LaneTx,
    exec: LaneTx,
}

/// One pool's queue, and the pool to start a thread in when a run is queued (none in
/// tests that drain the queue themselves).
#[derive(Debug)]
struct LaneTx {
    tx: BoundedSender<Job>,
    pool: Option<Pool<Job>>,
}

impl LaneTx {
    fn new(tx: BoundedSender<Job>, pool: Option<Pool<Job>>) -> LaneTx {
        LaneTx { tx, pool }
    }

    fn try_send(&self, job: Job) -> Result<(), TrySendError<Job>> {
        self.tx.try_send(job)?;
        if let Some(pool) = &self.pool {
            pool.kick();
        }
        Ok(())
    }
}

impl ProberLoop {
    /// The prober thread's state: no probes yet; `started` is when the prober started
    /// (probes of old containers are spread over one period after it).
    fn new(
        mgr: Arc<ProbeManager>,
        lanes: Lanes,
        done_rx: Receiver<Done>,
        wake_rx: Receiver<()>,
        events: Sender<ProbeEvent>,
        started: Instant,
    ) -> ProberLoop {
        ProberLoop {
            mgr,
            workers: HashMap::new(),
            by_key: HashMap::new(),
            heap: DeadlineHeap::default(),
            next_id: 0,
            started,
            job_tx: lanes.network,
            exec_tx: lanes.exec,
            done_rx,
            wake_rx,
            events,
            pending: BTreeMap::new(),
            invalid: HashSet::new(),
        }
    }

    fn run(&mut self, stop: &Stop, handle: &LoopHandle) {
        loop {
            let now = Instant::now();
            let wait = if self.pending.is_empty() {
                self.heap
                    .next_due()
                    .map_or(IDLE_WAKE, |d| d.saturating_duration_since(now))
                    .min(IDLE_WAKE)
            } else {
                RETRY_WAKE
            };
            let mut reconcile = false;
            let mut done = Vec::new();
            crossbeam_channel::select! {
                recv(stop.receiver()) -> _ => return,
                recv(self.wake_rx) -> _ => reconcile = true,
                recv(self.done_rx) -> d => done.extend(d.ok()),
                default(wait) => {}
            }
            let began = handle.begin_tick();
            done.extend(self.done_rx.try_iter());
            for d in done {
                self.finish(d);
            }
            if reconcile {
                self.reconcile(Instant::now(), SystemTime::now());
            }
            self.run_due(Instant::now(), SystemTime::now());
            self.flush_pending();
            handle.end_tick(began, None);
        }
    }

    /// Brings the probes in line with what the pod workers last reported; `now` and
    /// `wall` are the same moment on both clocks.
    fn reconcile(&mut self, now: Instant, wall: SystemTime) {
        let desired: Vec<Arc<PodTargets>> = lock(&self.mgr.desired).values().cloned().collect();
        let mut want: HashSet<Key> = HashSet::new();
        for pod in &desired {
            for c in &pod.containers {
                let has_startup = c
                    .probes
                    .iter()
                    .any(|(ty, s)| *ty == ProbeType::Startup && s.is_ok());
                for (ty, spec) in &c.probes {
                    let key: Key = (pod.uid.clone(), c.name.clone(), *ty);
                    let spec = match spec {
                        Ok(s) => s.clone(),
                        Err(e) => {
                            if self.invalid.insert(key) {
                                log::warn!(
                                    "pod {}/{}: container {}: invalid probe, not run: {e}",
                                    pod.namespace,
                                    pod.name,
                                    c.name
                                );
                            }
                            continue;
                        }
                    };
                    want.insert(key.clone());
                    let id = match self.by_key.get(&key) {
                        Some(id) if self.workers.get(id).is_some_and(|w| w.spec == spec) => *id,
                        existing => {
                            if let Some(old) = existing.copied() {
                                self.remove_worker(old);
                            }
                            self.add_worker(key, spec, pod)
                        }
                    };
                    if let Some(w) = self.workers.get_mut(&id) {
                        w.pod = pod.clone();
                        w.has_startup = has_startup;
                    }
                    self.set_container(id, c.view.clone(), now, wall);
                }
            }
        }
        let gone: Vec<u64> = self
            .by_key
            .iter()
            .filter(|(k, _)| !want.contains(*k))
            .map(|(_, id)| *id)
            .collect();
        for id in gone {
            self.remove_worker(id);
        }
        let uids: HashSet<&str> = desired.iter().map(|p| p.uid.as_str()).collect();
        self.invalid.retain(|k| uids.contains(k.0.as_str()));
    }

    fn add_worker(&mut self, key: Key, spec: Arc<ProbeSpec>, pod: &Arc<PodTargets>) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        let labels = ProbeLabels {
            container: key.1.clone(),
            pod: pod.name.clone(),
            namespace: pod.namespace.clone(),
            pod_uid: pod.uid.clone(),
        };
        self.by_key.insert(key.clone(), id);
        self.workers.insert(
            id,
            ProbeWorker {
                key,
                spec,
                pod: pod.clone(),
                container: None,
                has_startup: false,
                state: ProbeState::default(),
                in_flight: false,
                due: Instant::now(),
                running_since: None,
                labels,
                warned_unknown: false,
            },
        );
        id
    }

    fn remove_worker(&mut self, id: u64) {
        let Some(w) = self.workers.remove(&id) else {
            return;
        };
        self.by_key.remove(&w.key);
        if let Some(c) = &w.container {
            self.mgr.results.remove(&c.id, w.ty());
        }
        self.mgr.metrics.forget(w.ty(), &w.labels);
    }

    /// Records the probe's newest container instance. A new instance starts from
    /// scratch: initial result, counters reset, first run `initialDelaySeconds` after
    /// it started.
    fn set_container(
        &mut self,
        id: u64,
        view: Option<ContainerView>,
        now: Instant,
        wall: SystemTime,
    ) {
        let Some(w) = self.workers.get_mut(&id) else {
            return;
        };
        let old = w.container.as_ref().map(|c| c.id.clone());
        let new = view.as_ref().map(|c| c.id.clone());
        if old != new {
            let ty = w.ty();
            if let Some(old) = &old {
                self.mgr.results.remove(old, ty);
            }
            w.state = ProbeState::default();
            w.in_flight = false;
            w.warned_unknown = false;
            if let Some(v) = &view {
                if let Some(init) = ty.initial() {
                    self.mgr.results.set(&v.id, ty, init);
                }
                // Right after the prober starts (a kubelet restart), spread the probes
                // of containers that started long ago over one period.
                let spread = if now.duration_since(self.started) < w.spec.period {
                    spread(&w.key, w.spec.period)
                } else {
                    Duration::ZERO
                };
                let started = v.started_at.filter(|_| v.running);
                w.due = scheduler::first_due(now, wall, started, w.spec.initial_delay, spread);
                self.heap.push(w.due, id);
            }
        }
        let was_running = old == new && w.container.as_ref().is_some_and(|c| c.running);
        match &view {
            Some(v) if v.running => {
                if !was_running || w.running_since.is_none() {
                    w.running_since = Some(now);
                }
            }
            _ => w.running_since = None,
        }
        w.container = view;
    }

    /// Runs (or skips) every probe that is due at `now` (`wall` on the wall clock).
    fn run_due(&mut self, now: Instant, wall: SystemTime) {
        while let Some((due, id)) = self.heap.pop_due(now) {
            let Some(w) = self.workers.get_mut(&id) else {
                continue;
            };
            if w.due != due {
                continue; // rescheduled since: a stale entry
            }
            w.due = scheduler::next_due(due, w.spec.period, now);
            self.heap.push(w.due, id);
            if w.in_flight {
                // The last run has not finished: this period is skipped, as upstream's
                // goroutine would skip it.
                continue;
            }
            let Some(c) = w.container.clone() else {
                continue;
            };
            let startup_pending = w.has_startup
                && self.mgr.results.get(&c.id, ProbeType::Startup) != Some(ProbeResult::Success);
            match worker::gate(
                w.ty(),
                &c,
                &w.state,
                startup_pending,
                w.spec.initial_delay,
                wall,
                w.running_since.map(|t| now.saturating_duration_since(t)),
            ) {
                Gate::Skip => {}
                Gate::NotRunning => self.publish(id, ProbeResult::Failure),
                Gate::Run => {
                    let lane = match w.spec.handler {
                        spec::Handler::Exec { .. } => Lane::Exec,
                        _ => Lane::Network,
                    };
                    let job = Job {
                        worker: id,
                        container_id: c.id.clone(),
                        spec: w.spec.clone(),
                        pod_ip: w.pod.pod_ip.clone(),
                        due,
                        lane,
                    };
                    w.in_flight = true;
                    self.send(job);
                }
            }
        }
    }

    /// Hands a run to its pool; a full queue skips the run's period.
    fn send(&mut self, job: Job) {
        let id = job.worker;
        let tx = match job.lane {
            Lane::Exec => &self.exec_tx,
            Lane::Network => &self.job_tx,
        };
        match tx.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                if let Some(w) = self.workers.get_mut(&id) {
                    w.in_flight = false;
                    log::debug!(
                        "probe queue full: {} probe of {}/{} skips this period",
                        w.ty(),
                        w.pod.name,
                        w.key.1
                    );
                }
            }
        }
    }

    /// Takes a finished probe run through the thresholds.
    fn finish(&mut self, d: Done) {
        let Some(w) = self.workers.get_mut(&d.worker) else {
            return;
        };
        if w.container.as_ref().map(|c| c.id.as_str()) != Some(d.container_id.as_str()) {
            return; // a run against an instance that has been replaced
        }
        w.in_flight = false;
        let ty = w.ty();
        let o = d.outcome;
        self.mgr.metrics.count(ty, o.result, &w.labels);
        let who = format!(
            "pod {}/{} container {}",
            w.pod.namespace, w.pod.name, w.key.1
        );
        // Upstream's `prober.probe` records every failed or errored run as a Warning
        // `Unhealthy` event and a warning as `ProbeWarning` (the recorder logs them,
        // limited per pod and reason).
        let (pod, container) = (&w.pod, &w.key.1);
        let record = |reason: &str, message: String| {
            crate::record::container_event(
                &pod.namespace,
                &pod.name,
                &pod.uid,
                container,
                true,
                reason,
                &message,
            );
        };
        match o.result {
            ProbeResult::Unknown => {
                if w.warned_unknown {
                    log::debug!("{ty} probe of {who} errored: {}", o.message);
                } else {
                    log::warn!("{ty} probe of {who} errored: {}", o.message);
                    w.warned_unknown = true;
                }
                record("Unhealthy", format!("{ty} probe errored: {}", o.message));
            }
            ProbeResult::Failure => {
                record("Unhealthy", format!("{ty} probe failed: {}", o.message));
            }
            ProbeResult::Success if o.warning => {
                record("ProbeWarning", format!("{ty} probe warning: {}", o.message));
            }
            ProbeResult::Success => {}
        }
        let (s, f) = (w.spec.success_threshold, w.spec.failure_threshold);
        if let Some(r) = w.state.record(ty, o.result, s, f) {
            self.publish(d.worker, r);
        }
    }

    /// Publishes a result; a change goes to the sync loop (liveness successes do not:
    /// upstream acts only on liveness failures).
    fn publish(&mut self, id: u64, r: ProbeResult) {
        let Some(w) = self.workers.get(&id) else {
            return;
        };
        let Some(c) = &w.container else {
            return;
        };
        let ty = w.ty();
        if !self.mgr.results.set(&c.id, ty, r) {
            return;
        }
        log::info!(
            "{ty} probe of pod {}/{} container {}: {}",
            w.pod.namespace,
            w.pod.name,
            w.key.1,
            r.metric_label()
        );
        if ty == ProbeType::Liveness && r == ProbeResult::Success {
            return;
        }
        let ev = ProbeEvent {
            pod_uid: w.key.0.clone(),
            container: w.key.1.clone(),
            probe_type: ty,
            result: r,
        };
        match self.events.try_send(ev) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => {}
            Err(TrySendError::Full(ev)) => {
                self.pending.insert(ev.pod_uid.clone(), ev);
            }
        }
    }

    /// Retries events the sync loop had no room for.
    fn flush_pending(&mut self) {
        while let Some((uid, ev)) = self.pending.pop_first() {
            match self.events.try_send(ev) {
                Ok(()) | Err(TrySendError::Disconnected(_)) => {}
                Err(TrySendError::Full(ev)) => {
                    self.pending.insert(uid, ev);
                    return;
                }
            }
        }
    }
}

impl fmt::Debug for ProberLoop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProberLoop")
            .field("probes", &self.workers.len())
            .field("scheduled", &self.heap.len())
            .field("pending", &self.pending.len())
            .finish()
    }
}

/// A stable fraction of `period` for one probe, to spread probes after a restart
/// without a random number generator.
fn spread(key: &Key, period: Duration) -> Duration {
    let mut h = DefaultHasher::new();
    key.hash(&mut h);
    period.mul_f64((h.finish() % 1000) as f64 / 1000.0)
}

#[cfg(test)]
mod tests {
    //! The prober loop driven by hand: no threads, time passed in, probe runs carried
    //! out through a `FakeRuntime`'s scripted exec results.

    use super::*;
    use runtime::config::{ContainerConfig, PodSandboxConfig};
    use runtime::container::labels;
    use runtime::fake::{FakeClock, FakeRuntime, Op};
    use runtime::ExecResult;

    const UID: &str = "uid-1";

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    /// A prober loop and what surrounds it, on two clocks that move together: `t0`
    /// (monotonic) and the fake runtime's wall clock.
    struct Bench {
        clock: FakeClock,
        rt: Arc<FakeRuntime>,
        prober: Prober,
        mgr: Arc<ProbeManager>,
        pl: ProberLoop,
        net_rx: Receiver<Job>,
        exec_rx: Receiver<Job>,
        events: Receiver<ProbeEvent>,
        t0: Instant,
        wall0: SystemTime,
    }

    impl Bench {
        fn new() -> Bench {
            let clock = FakeClock::default();
            let rt = Arc::new(FakeRuntime::new(clock.clone()).with_image("busybox:1"));
            let (wake_tx, wake_rx) = crossbeam_channel::bounded(1);
            let (net_tx, net_rx) = base::chan::bounded(JOB_CAPACITY);
            let (exec_tx, exec_rx) = base::chan::bounded(JOB_CAPACITY);
            let (_done_tx, done_rx) = crossbeam_channel::bounded(1);
            let (ev_tx, events) = crossbeam_channel::bounded(EVENT_CAPACITY);
            let mgr = Arc::new(ProbeManager::new(wake_tx));
            let started = Instant::now();
            let pl = ProberLoop::new(
                mgr.clone(),
                Lanes {
                    network: LaneTx::new(net_tx, None),
                    exec: LaneTx::new(exec_tx, None),
                },
                done_rx,
                wake_rx,
                ev_tx,
                started,
            );
            Bench {
                wall0: clock.now(),
                clock,
                prober: Prober::new(rt.clone()),
                rt,
                mgr,
                pl,
                net_rx,
                exec_rx,
                events,
                // Long after the prober started: no start-up spread.
                t0: started + s(3600),
            }
        }

        /// Creates and starts container `app` of the pod in the fake runtime.
        fn start_container(&self) -> String {
            let cfg = ContainerConfig {
                labels: [
                    (labels::POD_UID.to_string(), UID.to_string()),
                    (labels::CONTAINER_NAME.to_string(), "app".to_string()),
                ]
                .into(),
                ..ContainerConfig::named(
                    format!("k8s_app_{}", self.rt.count(Op::Create)),
                    "busybox:1",
                )
            };
            let id = self
                .rt
                .create_container("", &cfg, &PodSandboxConfig::default())
                .expect("create");
            self.rt.start_container(&id).expect("start");
            id
        }

        /// What a pod sync tells the manager, then the prober thread's reaction to the
        /// wake, at `at` after the start.
        fn sync(&mut self, pod: &Pod, at: Duration) {
            let mut rp = RuntimePod {
                sandboxes: Vec::new(),
                containers: self.rt.containers(),
            };
            rp.sort();
            self.mgr.update_pod(pod, &rp, Some("10.88.0.2"));
            if self.pl.wake_rx.try_recv().is_ok() {
                self.pl.reconcile(self.t0 + at, self.wall0 + at);
            }
        }

        /// Wakes the prober loop at `at` after the start: runs what is due (through the
        /// fake runtime, as a pool thread would) and returns the events delivered.
        fn tick(&mut self, at: Duration) -> Vec<ProbeEvent> {
            if self.pl.wake_rx.try_recv().is_ok() {
                self.pl.reconcile(self.t0 + at, self.wall0 + at);
            }
            self.pl.run_due(self.t0 + at, self.wall0 + at);
            let jobs: Vec<Job> = self
                .exec_rx
                .try_iter()
                .chain(self.net_rx.try_iter())
                .collect();
            for job in jobs {
                let outcome = self.prober.run(
                    &job.spec.handler,
                    &job.container_id,
                    job.pod_ip.as_deref(),
                    job.spec.timeout,
                );
                self.pl.finish(Done {
                    worker: job.worker,
                    container_id: job.container_id,
                    outcome,
                });
            }
            self.pl.flush_pending();
            self.events.try_iter().collect()
        }

        fn exit_code(&self, id: &str, code: i64) {
            self.rt.set_exec_result(
                id,
                ExecResult {
                    exit_code: code,
                    stdout: Vec::new(),
                    stderr: Vec::new(),
                },
            );
        }
    }

    /// A pod whose container `app` has one exec probe in `probe_field`
    /// (`livenessProbe` …) with the given settings (`periodSeconds: 10, …`).
    fn pod(probe_field: &str, fields: &str) -> Pod {
        let yaml = format!(
            "{{metadata: {{name: p, namespace: default, uid: {UID}}}, spec: {{containers: [\
             {{name: app, image: 'busybox:1', {probe_field}: {{exec: {{command: [check]}}, {fields}}}}}]}}}}"
        );
        serde_norway::from_str(&yaml).expect("pod yaml")
    }

    fn event(ty: ProbeType, result: ProbeResult) -> ProbeEvent {
        ProbeEvent {
            pod_uid: UID.into(),
            container: "app".into(),
            probe_type: ty,
            result,
        }
    }

    #[test]
    fn first_probe_runs_initial_delay_after_start_then_every_period() {
        let mut b = Bench::new();
        b.start_container();
        let pod = pod("livenessProbe", "initialDelaySeconds: 5, periodSeconds: 10");
        b.sync(&pod, s(0));
        let mut runs = Vec::new();
        for at in [1, 4, 5, 6, 14, 15, 16, 24, 25] {
            let before = b.rt.count(Op::Exec);
            b.tick(s(at));
            if b.rt.count(Op::Exec) > before {
                runs.push(at);
            }
        }
        assert_eq!(runs, [5, 15, 25], "runs at startedAt+5 s, then every 10 s");
    }

    #[test]
    fn the_initial_delay_counts_from_the_container_start_not_the_sync() {
        let mut b = Bench::new();
        b.start_container();
        // The prober first hears of the container 3 s after it started.
        b.clock.advance(s(3));
        let pod = pod("livenessProbe", "initialDelaySeconds: 5, periodSeconds: 10");
        b.sync(&pod, s(3));
        assert!(b.tick(s(4)).is_empty());
        assert_eq!(b.rt.count(Op::Exec), 0);
        b.tick(s(5));
        assert_eq!(b.rt.count(Op::Exec), 1, "due at startedAt + 5 s");
    }

    #[test]
    fn failure_threshold_publishes_one_liveness_failure_then_holds() {
        let mut b = Bench::new();
        let id = b.start_container();
        b.exit_code(&id, 1);
        let pod = pod(
            "livenessProbe",
            "initialDelaySeconds: 5, periodSeconds: 10, failureThreshold: 3",
        );
        b.sync(&pod, s(0));
        assert_eq!(
            b.mgr.results().get(&id, ProbeType::Liveness),
            Some(ProbeResult::Success),
            "liveness starts out successful"
        );
        assert!(b.tick(s(5)).is_empty(), "1 failure of 3");
        assert!(b.tick(s(15)).is_empty(), "2 failures of 3");
        assert_eq!(
            b.tick(s(25)),
            [event(ProbeType::Liveness, ProbeResult::Failure)]
        );
        assert_eq!(
            b.mgr.results().get(&id, ProbeType::Liveness),
            Some(ProbeResult::Failure)
        );
        // On hold until a new instance: no more runs, nothing more delivered.
        assert!(b.tick(s(35)).is_empty());
        assert!(b.tick(s(45)).is_empty());
        assert_eq!(b.rt.count(Op::Exec), 3);
    }

    #[test]
    fn a_changed_result_is_delivered_once_and_an_unchanged_one_never() {
        let mut b = Bench::new();
        let id = b.start_container();
        let pod = pod(
            "readinessProbe",
            "initialDelaySeconds: 5, periodSeconds: 10, successThreshold: 2, failureThreshold: 1",
        );
        b.sync(&pod, s(0));
        assert!(b.tick(s(5)).is_empty(), "1 success of 2");
        assert_eq!(
            b.tick(s(15)),
            [event(ProbeType::Readiness, ProbeResult::Success)]
        );
        assert!(b.tick(s(25)).is_empty(), "still ready: nothing to deliver");
        b.exit_code(&id, 1);
        assert_eq!(
            b.tick(s(35)),
            [event(ProbeType::Readiness, ProbeResult::Failure)]
        );
        assert!(b.tick(s(45)).is_empty(), "still not ready");
        assert_eq!(b.rt.count(Op::Exec), 5, "readiness keeps probing");
        assert_eq!(
            b.mgr.results().get(&id, ProbeType::Readiness),
            Some(ProbeResult::Failure)
        );
    }

    #[test]
    fn a_removed_pod_is_no_longer_probed() {
        let mut b = Bench::new();
        let id = b.start_container();
        let pod = pod(
            "readinessProbe",
            "initialDelaySeconds: 5, periodSeconds: 10",
        );
        b.sync(&pod, s(0));
        assert_eq!(
            b.tick(s(5)),
            [event(ProbeType::Readiness, ProbeResult::Success)]
        );
        b.mgr.remove_pod(UID);
        for at in [15, 25, 35] {
            assert!(b.tick(s(at)).is_empty());
        }
        assert_eq!(b.rt.count(Op::Exec), 1);
        assert_eq!(b.mgr.results().get(&id, ProbeType::Readiness), None);
        assert!(b.mgr.pods().is_empty());
    }
}
