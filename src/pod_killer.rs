//! The pod killer (upstream `podKiller`, `pkg/kubelet/pod_workers.go` before 1.22):
//! whole-pod kills — a pod removed from its source, deleted, orphaned, finished, or
//! whose sandbox must be replaced — are taken off a bounded channel and carried out
//! by a fixed set of threads, so a 30 s grace period never holds a pod worker (of
//! which there are only a few) or the sync loop, nor the kills of other pods.
//!
//! (Over 800 lines: more than half is tests, each driving a whole killer on the fake.)
//!
//! A container stop is a state, not a blocked thread. One `pod-killer` thread (the
//! supervisor) owns every kill in flight; a pool of at most [`STEP_THREADS`]
//! `pod-kill-N` threads (started when steps are queued, gone after [`STEP_IDLE`]
//! without one, so an idle node has none) runs the steps that block on the runtime: planning a kill
//! ([`RuntimeManager::plan_kill`]: one list, an inspect per container), a stop's
//! `Killing` event and preStop hook ([`RuntimeManager::pre_stop_in_kill`], bounded by
//! the grace period; most containers have no hook) followed, when it is already its
//! turn, by its stop signal ([`RuntimeManager::signal_in_kill`], which returns at
//! once), a sidecar's or a sandbox's signal and SIGKILL, and the removal at the end
//! ([`RuntimeManager::remove_killed`]). The supervisor itself makes one runtime call,
//! the poll, so a slow engine never serializes the kills behind it. After its signal
//! a container is "terminating until its deadline": the supervisor polls the node's
//! containers with one filtered list per tick and, for each terminating one, either
//! sees it exited (its stop is done) or reaches its deadline and has SIGKILL sent.
//! A sidecar waits for its turn (upstream `waitForTurn`: the app containers and the
//! later sidecars have exited, or its grace is used up) as state in the supervisor
//! too. When a pod's container stops are done its sandboxes are signalled and
//! watched the same way, then its containers removed and its completion callback
//! run. So 100 pods that ignore SIGTERM are all stopped in about one grace period,
//! with [`THREADS`] threads whatever the number of pods and containers.
//!
//! It also carries out what would hold a pod worker inside one pod's sync (upstream
//! blocks that pod's goroutine, which here would be one of the few workers shared by
//! all pods): the stops of single containers a sync decided (a failed liveness or
//! startup probe, a changed spec), each a stop as above without the sandboxes, and a
//! started container's postStart hook, run on a `post-start-N` thread (a pool of at
//! most [`HOOK_THREADS`], so hooks that hang never take the kill steps' threads) and
//! followed by the container's stop when it fails. The pod's sync is parked
//! meanwhile (its slot busy, no worker held) and resumes when the job completes.
//!
//! Ordering stays per pod: the pod worker that hands a kill over keeps the pod's slot
//! busy until the kill's completion callback runs (which calls
//! [`crate::pod_workers::PodWorkers::finish`]), so nothing else of that pod runs while
//! it is being stopped, and at most one kill per pod is in flight. That also bounds
//! the kills the supervisor holds: at most one per pod the kubelet knows.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError};

use crate::kuberuntime::{ContainerStop, KillPlan, KillPodRequest, PostStart, RuntimeManager};
use base::chan::BoundedSender;
use base::loops::{LoopHandle, Loops, Pool, PoolSpec, SpawnError, Stop};
use runtime::container::{short, RuntimePod};
use runtime::RuntimeError;

/// Threads that run the blocking steps of kills. Only a preStop hook is long (it is
/// bounded by the grace period, and few containers have one); the other steps are
/// short runtime calls, which this many at once already keep dockerd busy.
pub const STEP_THREADS: usize = 16;
/// A step thread with no step for this long exits: kills come in bursts (a manifest
/// directory emptied, a pod deleted) whose steps follow each other within
/// milliseconds; a step after a grace period (SIGKILL at the deadline) starts a thread
/// again (~0.1 ms). At 60 s a node counted 26 threads for a minute after one removal
/// (bench `startup`, 30 pods), over the 24 of issue 13.
pub(crate) const STEP_IDLE: Duration = Duration::from_secs(10);
/// Every thread the pod killer runs for kills, whatever it is asked: the supervisor
/// and the step threads.
#[cfg(test)]
pub(crate) const THREADS: usize = 1 + STEP_THREADS;
/// Threads that run postStart hooks (`post-start-N`, started on demand, gone after
/// [`STEP_IDLE`] without one). A hook may block up to two minutes: its own pool keeps
/// hung hooks from taking the kill steps' threads. Beyond this many hooks at once the
/// others wait in the queue, their pods parked, holding no pod worker.
pub(crate) const HOOK_THREADS: usize = 8;
/// Kill requests waiting for the supervisor. A request is small; the queue holds a
/// mass removal of every pod a node can run, so a pod worker hands kills over rather
/// than carry them out itself (which it does only when the queue is full).
pub(crate) const CHANNEL_CAPACITY: usize = 1024;
/// How often the terminating containers are polled while none was signalled
/// recently: a container still running a second after its signal is using its grace
/// period (seconds), so noticing its exit a little late costs nothing, and one list
/// per tick serves every terminating container of the node.
const POLL: Duration = Duration::from_millis(200);
/// How often they are polled within [`FAST_WINDOW`] of a signal: a container that
/// honours its stop signal exits within milliseconds, and the sidecars and the
/// sandbox that wait for it (and the pod's end) should not wait a whole tick more.
const POLL_FAST: Duration = Duration::from_millis(20);
/// See [`POLL_FAST`].
const FAST_WINDOW: Duration = Duration::from_secs(1);
/// How long a container may take to exit after SIGKILL before its stop is given up
/// (logged) so that its pod's kill can end: the engine still has to reap the process
/// and tear down its network, which on a loaded board takes seconds.
const KILL_WAIT: Duration = Duration::from_secs(30);
/// How long the supervisor sleeps when nothing is due: it is woken by every job and
/// every step's outcome anyway.
const IDLE: Duration = Duration::from_secs(60);

/// What runs when a kill has finished (on the supervisor's thread: keep it short).
pub type Done = Box<dyn FnOnce(Result<(), RuntimeError>) + Send + 'static>;

/// Told each pod (by UID) whose kill has ended, before the kill's own callback: the
/// kubelet has the PLEG look at the pod again, so what the kill stopped is seen
/// whether or not the runtime's events about it arrive (never blocks).
pub type Killed = Arc<dyn Fn(&str) + Send + Sync>;

struct Job {
    req: KillPodRequest,
    what: Request,
    done: Done,
}

/// What a job asks of the killer.
enum Request {
    /// Every container and sandbox of the pod.
    Pod,
    /// These containers of the pod (planned by its sync), each stopped as in a
    /// whole-pod kill; the sandbox stays.
    Containers(Vec<ContainerStop>),
    /// A started container's postStart hook; a failed one stops the container.
    PostStart(Box<PostStart>),
}

/// Blocking work handed by the supervisor to the step threads.
enum Step {
    Plan {
        kill: u64,
        req: KillPodRequest,
    },
    PreStop {
        kill: u64,
        req: KillPodRequest,
        /// Boxed: a stop is large beside the other steps.
        stop: Box<ContainerStop>,
    },
    /// A stop whose turn came while it waited (a sidecar): its signal.
    Signal {
        kill: u64,
        stop: Box<ContainerStop>,
    },
    /// The kill's containers are down: the sandboxes' signals.
    SignalSandboxes {
        kill: u64,
        pod: RuntimePod,
    },
    /// A postStart hook (on the hook pool).
    PostStart {
        kill: u64,
        req: KillPodRequest,
        hook: Box<PostStart>,
    },
    /// A grace period has passed.
    Sigkill {
        id: String,
        name: String,
    },
    Remove {
        kill: u64,
        req: KillPodRequest,
        pod: RuntimePod,
    },
}

/// What a step thread hands back.
enum Outcome {
    Planned {
        kill: u64,
        result: Result<KillPlan, RuntimeError>,
    },
    /// The hook has run; when it was already the stop's turn, its signal was sent
    /// too (by `at`), with this outcome.
    PreStopped {
        kill: u64,
        stop: Box<ContainerStop>,
        signalled: Option<Result<Duration, RuntimeError>>,
        at: Instant,
    },
    SandboxesSignalled {
        kill: u64,
        pod: RuntimePod,
        signalled: Vec<(String, Duration)>,
        at: Instant,
    },
    /// The hook has returned; its container's stop when it failed.
    PostStarted {
        kill: u64,
        stop: Option<Box<ContainerStop>>,
    },
    Sigkilled,
    Removed {
        kill: u64,
        result: Result<(), RuntimeError>,
    },
}

/// The sending side: pod workers submit kills through it.
#[derive(Clone)]
pub struct PodKiller {
    tx: BoundedSender<Job>,
    manager: Arc<RuntimeManager>,
    killed: Option<Killed>,
}

impl std::fmt::Debug for PodKiller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodKiller")
            .field("queued", &self.tx.len())
            .finish()
    }
}

impl PodKiller {
    /// Starts the supervisor `pod-killer`; its step threads `pod-kill-N` start on
    /// demand.
    pub fn start(loops: &Loops, manager: Arc<RuntimeManager>) -> Result<PodKiller, SpawnError> {
        let (tx, rx) = base::chan::bounded(CHANNEL_CAPACITY);
        // Unbounded both ways, so that neither side ever blocks on the other: what is
        // in them is bounded by the kills in flight (one per pod) and their containers.
        let (step_tx, step_rx) = crossbeam_channel::unbounded::<Step>();
        let (out_tx, out_rx) = crossbeam_channel::unbounded::<Outcome>();
        // Hooks: at most one per pod (its sync is parked until it returns).
        let (hook_tx, hook_rx) = crossbeam_channel::unbounded::<Step>();
        let pool_of = |prefix: &str, max: usize, rx: Receiver<Step>| {
            let m = manager.clone();
            let out_tx = out_tx.clone();
            Pool::new(
                loops,
                PoolSpec {
                    prefix: prefix.into(),
                    max,
                    idle: STEP_IDLE,
                },
                rx,
                move |step, _| {
                    // The supervisor gone means shutdown: the outcome has no reader.
                    let _ = out_tx.send(run_step(&m, step));
                },
            )
        };
        let pool = pool_of("pod-kill", STEP_THREADS, step_rx);
        let hook_pool = pool_of("post-start", HOOK_THREADS, hook_rx);
        let m = manager.clone();
        loops.spawn("pod-killer", move |stop, handle| {
            let steps = Steps {
                tx: step_tx.clone(),
                pool: pool.clone(),
            };
            let hooks = Steps {
                tx: hook_tx.clone(),
                pool: hook_pool.clone(),
            };
            let mut sup = Supervisor::new(&m, steps, hooks);
            sup.run(rx.clone(), &out_rx, &stop, &handle);
        })?;
        Ok(PodKiller {
            tx,
            manager,
            killed: None,
        })
    }

    /// Tells `killed` of every kill that ends, before its callback runs.
    pub fn on_killed(mut self, killed: Killed) -> Self {
        self.killed = Some(killed);
        self
    }

    /// Hands a kill over; `done` runs when it has finished. Never drops a kill: when
    /// the queue is full, or the killer has stopped, the kill runs here and now.
    pub fn submit(&self, req: KillPodRequest, done: Done) {
        self.send(Job {
            req,
            what: Request::Pod,
            done,
        });
    }

    /// Hands over the stops of some of a pod's containers (planned by its sync; `req`
    /// names the pod); `done` runs when every one has exited or been SIGKILLed.
    pub fn submit_containers(&self, req: KillPodRequest, stops: Vec<ContainerStop>, done: Done) {
        self.send(Job {
            req,
            what: Request::Containers(stops),
            done,
        });
    }

    /// Hands over a started container's postStart hook (`req` names the pod); `done`
    /// runs when it has returned, or when it failed and the container was stopped.
    pub fn submit_post_start(&self, req: KillPodRequest, hook: PostStart, done: Done) {
        self.send(Job {
            req,
            what: Request::PostStart(Box::new(hook)),
            done,
        });
    }

    /// Queues a job; when the queue is full, or the killer has stopped, carries it
    /// out here and now.
    /// `killed` is told first, whatever the job was.
    fn send(&self, mut job: Job) {
        if let Some(killed) = &self.killed {
            let (killed, uid, done) = (killed.clone(), job.req.uid.clone(), job.done);
            job.done = Box::new(move |r| {
                killed(&uid);
                done(r);
            });
        }
        match self.tx.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(job)) | Err(TrySendError::Disconnected(job)) => {
                log::warn!(
                    "pod killer is busy or stopped; carrying out pod {}'s work inline",
                    job.req.uid
                );
                let m = &self.manager;
                let result = match job.what {
                    Request::Pod => m.kill_pod(&job.req),
                    Request::Containers(stops) => {
                        for s in stops {
                            m.stop_in_kill(&job.req, s);
                        }
                        Ok(())
                    }
                    Request::PostStart(hook) => {
                        if let Some(s) = m.post_start(&job.req, &hook) {
                            m.stop_in_kill(&job.req, s);
                        }
                        Ok(())
                    }
                };
                (job.done)(result);
            }
        }
    }
}

fn run_step(manager: &RuntimeManager, step: Step) -> Outcome {
    match step {
        Step::Plan { kill, req } => Outcome::Planned {
            kill,
            result: manager.plan_kill(&req),
        },
        Step::PreStop {
            kill,
            req,
            mut stop,
        } => {
            manager.pre_stop_in_kill(&req, &mut stop);
            let now = Instant::now();
            let signalled = stop
                .is_turn(now)
                .then(|| manager.signal_in_kill(&stop, now));
            // The grace runs from when the signal has surely been delivered.
            let at = Instant::now();
            Outcome::PreStopped {
                kill,
                stop,
                signalled,
                at,
            }
        }
        Step::Signal { kill, stop } => {
            let result = manager.signal_in_kill(&stop, Instant::now());
            Outcome::PreStopped {
                kill,
                stop,
                signalled: Some(result),
                at: Instant::now(),
            }
        }
        Step::SignalSandboxes { kill, pod } => {
            let signalled = manager.signal_sandboxes(&pod);
            Outcome::SandboxesSignalled {
                kill,
                pod,
                signalled,
                at: Instant::now(),
            }
        }
        Step::PostStart { kill, req, hook } => Outcome::PostStarted {
            kill,
            stop: manager.post_start(&req, &hook).map(Box::new),
        },
        Step::Sigkill { id, name } => {
            if let Err(e) = manager.sigkill(&id, &name) {
                log::warn!("killing container {name}: {}", base::loops::error_chain(&e));
            }
            Outcome::Sigkilled
        }
        Step::Remove { kill, req, pod } => Outcome::Removed {
            kill,
            result: manager.remove_killed(&req, &pod),
        },
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// A step thread reads the pod's containers.
    Planning,
    /// A postStart hook runs on a `post-start-N` thread.
    Hook,
    /// The containers are stopping.
    Containers,
    /// The containers are down; the sandboxes are stopping.
    Sandboxes,
    /// Everything is down; a step thread removes it (with `remove`).
    Removing,
}

/// One pod kill in flight.
struct Kill {
    req: KillPodRequest,
    /// The whole pod (its sandboxes next, then the removal), or only some of its
    /// containers (done once they are down).
    whole: bool,
    done: Option<Done>,
    /// The pod's containers as planned (for the sandboxes and the removal).
    pod: RuntimePod,
    phase: Phase,
    /// Stops of the current phase not yet done.
    pending: usize,
    /// The first stop signal that failed, for a kill of some containers: its end is
    /// an error, so that the pod's sync waits as after a failed sync, rather than
    /// ask for the same stop again at once.
    error: Option<RuntimeError>,
}

/// A container (or sandbox) that was sent its stop signal and has not been seen
/// exited yet.
struct Terminating {
    kill: u64,
    id: String,
    name: String,
    /// Held (never read) until the container has exited: dropping it lets the
    /// sidecars waiting on this container take their turn. None for a sandbox.
    _stop: Option<ContainerStop>,
    /// SIGKILL is due then; after SIGKILL, the stop is given up then.
    deadline: Instant,
    sigkilled: bool,
}

/// Where the supervisor queues steps: the channel and the pool that drains it.
struct Steps {
    tx: Sender<Step>,
    pool: Pool<Step>,
}

/// The supervisor's state: every kill in flight, the stops waiting for their turn,
/// the terminating containers. Owned by the `pod-killer` thread alone.
struct Supervisor<'a> {
    manager: &'a RuntimeManager,
    steps: Steps,
    hooks: Steps,
    kills: HashMap<u64, Kill>,
    /// Stops whose hook has run, waiting for their turn (sidecars).
    waiting: Vec<(u64, ContainerStop)>,
    terminating: Vec<Terminating>,
    next_kill: u64,
    last_poll: Option<Instant>,
    last_signal: Option<Instant>,
}

impl<'a> Supervisor<'a> {
    fn new(manager: &'a RuntimeManager, steps: Steps, hooks: Steps) -> Self {
        Supervisor {
            manager,
            steps,
            hooks,
            kills: HashMap::new(),
            waiting: Vec::new(),
            terminating: Vec::new(),
            next_kill: 0,
            last_poll: None,
            last_signal: None,
        }
    }

    /// Takes jobs and step outcomes, and in between polls the terminating containers
    /// and keeps their deadlines, until shutdown (kills in flight are left where they
    /// stand: a kubelet exit never stops containers) or until every `PodKiller` is
    /// gone and no kill is left.
    fn run(
        &mut self,
        jobs: Receiver<Job>,
        outcomes: &Receiver<Outcome>,
        stop: &Stop,
        handle: &LoopHandle,
    ) {
        let mut jobs = jobs;
        let mut closed = false;
        loop {
            let now = Instant::now();
            let wait = self
                .next_wake(now)
                .map_or(IDLE, |t| t.saturating_duration_since(now));
            crossbeam_channel::select! {
                recv(stop.receiver()) -> _ => return,
                recv(jobs) -> job => {
                    let began = handle.begin_tick();
                    match job {
                        Ok(job) => self.accept(job),
                        Err(_) => {
                            // Every sender is gone: finish what is in flight, then return.
                            jobs = crossbeam_channel::never();
                            closed = true;
                        }
                    }
                    let error = self.tick(Instant::now());
                    handle.end_tick(began, error);
                }
                recv(outcomes) -> outcome => {
                    let began = handle.begin_tick();
                    if let Ok(outcome) = outcome {
                        self.outcome(outcome);
                    }
                    let error = self.tick(Instant::now());
                    handle.end_tick(began, error);
                }
                default(wait) => {
                    let began = handle.begin_tick();
                    let error = self.tick(Instant::now());
                    handle.end_tick(began, error);
                }
            }
            if closed && self.kills.is_empty() {
                return;
            }
        }
    }

    /// A new job: a whole-pod kill is planned on a step thread; a sync's container
    /// stops begin with their preStop steps; a hook goes to the hook threads.
    fn accept(&mut self, job: Job) {
        let kill = self.next_kill;
        self.next_kill = self.next_kill.wrapping_add(1);
        let req = job.req.clone();
        let (phase, whole) = match &job.what {
            Request::Pod => (Phase::Planning, true),
            Request::Containers(_) => (Phase::Containers, false),
            Request::PostStart(_) => (Phase::Hook, false),
        };
        self.kills.insert(
            kill,
            Kill {
                req: job.req,
                whole,
                done: Some(job.done),
                pod: RuntimePod::default(),
                phase,
                pending: 0,
                error: None,
            },
        );
        match job.what {
            Request::Pod => {
                log::info!("pod-killer: killing pod {}", req.uid);
                self.step(Step::Plan { kill, req });
            }
            Request::Containers(stops) => self.stop_containers(kill, stops),
            Request::PostStart(hook) => self.step(Step::PostStart { kill, req, hook }),
        }
    }

    /// The stops of a kill's containers begin (their preStop steps); with none, the
    /// kill goes on to its next phase.
    fn stop_containers(&mut self, kill: u64, stops: Vec<ContainerStop>) {
        let Some(k) = self.kills.get_mut(&kill) else {
            return;
        };
        k.phase = Phase::Containers;
        k.pending = stops.len();
        let req = k.req.clone();
        if stops.is_empty() {
            self.advance(kill);
        }
        for stop in stops {
            let req = req.clone();
            let stop = Box::new(stop);
            self.step(Step::PreStop { kill, req, stop });
        }
    }

    /// Hands a step to its threads (starting one if none is free): hooks to the hook
    /// pool, the rest to the step pool.
    fn step(&mut self, step: Step) {
        let threads = match step {
            Step::PostStart { .. } => &self.hooks,
            _ => &self.steps,
        };
        if let Err(crossbeam_channel::SendError(step)) = threads.tx.send(step) {
            // Unreachable while the pool holds the receiver; run it here regardless.
            let outcome = run_step(self.manager, step);
            self.outcome(outcome);
            return;
        }
        threads.pool.kick();
    }

    fn outcome(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Planned { kill, result } => match result {
                Err(e) => self.complete(kill, Err(e)),
                Ok(plan) => {
                    let (stops, pod) = plan.into_parts();
                    let Some(k) = self.kills.get_mut(&kill) else {
                        return;
                    };
                    k.pod = pod;
                    self.stop_containers(kill, stops);
                }
            },
            Outcome::PostStarted { kill, stop } => match stop {
                None => self.complete(kill, Ok(())),
                Some(stop) => {
                    if let Some(k) = self.kills.get(&kill) {
                        log::info!(
                            "pod-killer: stopping container {} of pod {}: its postStart hook failed",
                            stop.name(),
                            k.req.uid
                        );
                    }
                    self.stop_containers(kill, vec![*stop]);
                }
            },
            Outcome::PreStopped {
                kill,
                stop,
                signalled,
                at,
            } => match signalled {
                None => self.waiting.push((kill, *stop)),
                Some(result) => self.signalled(kill, *stop, result, at),
            },
            Outcome::SandboxesSignalled {
                kill,
                pod,
                signalled,
                at,
            } => self.sandboxes_signalled(kill, pod, signalled, at),
            // Exits after SIGKILL come at once: poll fast.
            Outcome::Sigkilled => self.last_signal = Some(Instant::now()),
            Outcome::Removed { kill, result } => self.complete(kill, result),
        }
    }

    /// A container stop's signal was sent by `at` (or failed): it is terminating
    /// until its grace has passed, or done.
    fn signalled(
        &mut self,
        kill: u64,
        stop: ContainerStop,
        result: Result<Duration, RuntimeError>,
        at: Instant,
    ) {
        match result {
            Ok(grace) => {
                self.last_signal = Some(at);
                self.terminating.push(Terminating {
                    kill,
                    id: stop.id().to_string(),
                    name: stop.name().to_string(),
                    deadline: base::time::saturating_deadline(at, grace),
                    _stop: Some(stop),
                    sigkilled: false,
                });
            }
            Err(e) => {
                // As upstream: a failed stop is logged, and the pod's other stops go on.
                log::warn!(
                    "stopping container {}: {}",
                    stop.name(),
                    base::loops::error_chain(&e)
                );
                drop(stop);
                if let Some(k) = self.kills.get_mut(&kill) {
                    k.error.get_or_insert(e);
                }
                self.stop_done(kill);
            }
        }
    }

    /// One stop of the kill's current phase is done.
    fn stop_done(&mut self, kill: u64) {
        let Some(k) = self.kills.get_mut(&kill) else {
            return;
        };
        k.pending = k.pending.saturating_sub(1);
        if k.pending == 0 {
            self.advance(kill);
        }
    }

    /// Every stop of the kill's current phase is done: the next phase.
    fn advance(&mut self, kill: u64) {
        let Some(k) = self.kills.get_mut(&kill) else {
            return;
        };
        match k.phase {
            Phase::Planning | Phase::Hook | Phase::Removing => {}
            Phase::Containers if !k.whole => {
                let result = k.error.take().map_or(Ok(()), Err);
                self.complete(kill, result);
            }
            Phase::Containers => {
                k.phase = Phase::Sandboxes;
                let pod = std::mem::take(&mut k.pod);
                self.step(Step::SignalSandboxes { kill, pod });
            }
            Phase::Sandboxes => {
                k.phase = Phase::Removing;
                let (req, pod) = (k.req.clone(), std::mem::take(&mut k.pod));
                self.step(Step::Remove { kill, req, pod });
            }
        }
    }

    /// The kill's sandboxes were signalled by `at`: they are terminating.
    fn sandboxes_signalled(
        &mut self,
        kill: u64,
        pod: RuntimePod,
        signalled: Vec<(String, Duration)>,
        at: Instant,
    ) {
        let Some(k) = self.kills.get_mut(&kill) else {
            return;
        };
        k.pod = pod;
        k.pending = signalled.len();
        if !signalled.is_empty() {
            self.last_signal = Some(at);
        }
        for (id, grace) in signalled {
            self.terminating.push(Terminating {
                kill,
                name: format!("sandbox {}", short(&id)),
                id,
                _stop: None,
                deadline: base::time::saturating_deadline(at, grace),
                sigkilled: false,
            });
        }
        if k.pending == 0 {
            self.advance(kill);
        }
    }

    /// The kill has ended: its callback runs.
    fn complete(&mut self, kill: u64, result: Result<(), RuntimeError>) {
        if let Some(done) = self.kills.remove(&kill).and_then(|k| k.done) {
            done(result);
        }
    }

    /// Polls the terminating containers when due, ends the stops whose containers
    /// exited, signals the stops whose turn came, and keeps the deadlines. Returns the
    /// poll's error, for the loop registry.
    fn tick(&mut self, now: Instant) -> Option<String> {
        let mut error = None;
        if self.poll_due(now) {
            self.last_poll = Some(now);
            match self.manager.running_container_ids() {
                Ok(running) => {
                    let (exited, still): (Vec<_>, Vec<_>) = std::mem::take(&mut self.terminating)
                        .into_iter()
                        .partition(|t| !running.contains(&t.id));
                    self.terminating = still;
                    for t in exited {
                        // Dropping its stop lets the sidecars waiting on it go on.
                        let kill = t.kill;
                        drop(t);
                        self.stop_done(kill);
                    }
                }
                Err(e) => {
                    error = Some(format!(
                        "listing containers: {}",
                        base::loops::error_chain(&e)
                    ))
                }
            }
        }
        // Turns: a sidecar whose containers to outlive are down (perhaps just now).
        let now = Instant::now();
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiting)
            .into_iter()
            .map(|(kill, mut stop)| (stop.is_turn(now), (kill, stop)))
            .partition(|(turn, _)| *turn);
        self.waiting = waiting.into_iter().map(|(_, w)| w).collect();
        for (_, (kill, stop)) in ready {
            let stop = Box::new(stop);
            self.step(Step::Signal { kill, stop });
        }
        // Deadlines: SIGKILL after the grace; after SIGKILL, give up in the end.
        let now = Instant::now();
        let mut given_up = Vec::new();
        let mut sigkills = Vec::new();
        for t in self.terminating.iter_mut().filter(|t| now >= t.deadline) {
            if t.sigkilled {
                log::warn!(
                    "container {} ({}) has not exited {KILL_WAIT:?} after SIGKILL; going on",
                    t.name,
                    short(&t.id)
                );
                given_up.push(t.id.clone());
                continue;
            }
            t.sigkilled = true;
            t.deadline = base::time::saturating_deadline(now, KILL_WAIT);
            sigkills.push(Step::Sigkill {
                id: t.id.clone(),
                name: t.name.clone(),
            });
        }
        for step in sigkills {
            self.step(step);
        }
        for id in given_up {
            if let Some(i) = self.terminating.iter().position(|t| t.id == id) {
                let t = self.terminating.swap_remove(i);
                let kill = t.kill;
                drop(t);
                self.stop_done(kill);
            }
        }
        error
    }

    fn poll_interval(&self, now: Instant) -> Duration {
        match self.last_signal {
            Some(s) if now.saturating_duration_since(s) < FAST_WINDOW => POLL_FAST,
            _ => POLL,
        }
    }

    fn poll_due(&self, now: Instant) -> bool {
        !self.terminating.is_empty()
            && self
                .last_poll
                .is_none_or(|p| now >= p + self.poll_interval(now))
    }

    /// When something is next due: a poll, a SIGKILL, a sidecar's turn by its grace.
    fn next_wake(&self, now: Instant) -> Option<Instant> {
        let poll = (!self.terminating.is_empty())
            .then(|| self.last_poll.map_or(now, |p| p + self.poll_interval(now)));
        let deadlines = self.terminating.iter().map(|t| t.deadline);
        let turns = self.waiting.iter().filter_map(|(_, s)| s.turn_deadline());
        poll.into_iter().chain(deadlines).chain(turns).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kuberuntime::container::dns::DnsSettings;
    use crate::kuberuntime::container::NodeContext;
    use crate::kuberuntime::ManagerConfig;
    use crate::volume::VolumeManager;
    use base::loops::shutdown_channel;
    use base::testutil::TempDir;
    use k8s_openapi::api::core::v1::Pod;
    use runtime::config::{ContainerConfig, PodSandboxConfig};
    use runtime::container::labels;
    use runtime::fake::{FakeClock, FakeRuntime, Op};
    use runtime::{ContainerState, Runtime};
    use std::time::{Duration, Instant};

    const IMAGE: &str = "app:1";
    const NODE: &str = "node";

    /// The threads are counted by name across the process: the tests that start a
    /// pod killer take turns.
    static ONE_KILLER: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn manager(rt: &Arc<FakeRuntime>, root: &TempDir) -> Arc<RuntimeManager> {
        let runtime: Arc<dyn Runtime> = rt.clone();
        Arc::new(RuntimeManager::new(
            runtime.clone(),
            ManagerConfig {
                node_name: NODE.into(),
                pod_infra_image: Some(IMAGE.into()),
                node: NodeContext {
                    root_dir: root.0.clone(),
                    host_ips: vec![],
                    dns: DnsSettings {
                        cluster_dns: vec![],
                        cluster_domain: String::new(),
                        resolv_conf: String::new(),
                    },
                    allocatable: Default::default(),
                    volumes: Arc::new(VolumeManager::new(root.0.clone(), runtime, NODE.into(), 0)),
                },
                logs: Default::default(),
            },
        ))
    }

    /// A running container of pod `uid` as the kubelet labels it.
    fn run(rt: &FakeRuntime, uid: &str, name: &str, kind: &str) {
        let mut l = std::collections::BTreeMap::new();
        l.insert(labels::MANAGED_BY_NODE.to_string(), NODE.to_string());
        l.insert(labels::POD_UID.to_string(), uid.to_string());
        l.insert(labels::CONTAINER_NAME.to_string(), name.to_string());
        let docker_type = if name == "POD" {
            labels::TYPE_SANDBOX
        } else {
            labels::TYPE_CONTAINER
        };
        l.insert(labels::DOCKER_TYPE.to_string(), docker_type.to_string());
        l.insert(labels::CONTAINER_TYPE.to_string(), kind.to_string());
        let id = rt
            .create_container(
                "",
                &ContainerConfig {
                    labels: l,
                    ..ContainerConfig::named(format!("k8s_{name}_{uid}"), IMAGE)
                },
                &PodSandboxConfig::default(),
            )
            .expect("create");
        rt.start_container(&id).expect("start");
    }

    /// Running threads of `loops` whose name starts with one of `prefixes`. Every
    /// thread goes through the loop helper (tests/tidy.rs), so its registry is the
    /// count; /proc would also count the killers other tests run at the same time.
    fn threads_named(loops: &Loops, prefixes: &[&str]) -> usize {
        loops
            .registry()
            .snapshot()
            .iter()
            .filter(|(n, st)| !st.finished && prefixes.iter().any(|p| n.starts_with(p)))
            .count()
    }

    fn kill_all(uids: &[String], remove: bool) -> Vec<KillPodRequest> {
        uids.iter()
            .map(|u| KillPodRequest {
                uid: u.clone(),
                pod: None,
                grace_override: Some(Duration::from_secs(1)),
                remove,
            })
            .collect()
    }

    #[test]
    fn killing_100_pods_never_exceeds_the_fixed_thread_count() {
        let _turn = base::loops::lock(&ONE_KILLER);
        let root = TempDir::new("killer-100");
        let rt = Arc::new(FakeRuntime::new(FakeClock::default()).with_image(IMAGE));
        let uids: Vec<String> = (0..100).map(|i| format!("pod-{i}")).collect();
        for u in &uids {
            run(&rt, u, "POD", "");
            run(&rt, u, "a", "container");
            run(&rt, u, "b", "container");
        }
        rt.delay(Op::Stop, Duration::from_millis(5));
        let (_, most) = kill_and_wait(&rt, &root, kill_all(&uids, true), || {});
        assert!(most <= THREADS, "{most} kill threads, more than {THREADS}");
        assert!(rt.containers().is_empty(), "every container was removed");
    }

    #[test]
    fn a_pod_whose_kill_ended_is_told_before_the_kills_callback() {
        let _turn = base::loops::lock(&ONE_KILLER);
        let root = TempDir::new("killer-told");
        let rt = Arc::new(FakeRuntime::new(FakeClock::default()).with_image(IMAGE));
        run(&rt, "p", "POD", "");
        run(&rt, "p", "a", "container");
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop);
        let told = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let t = told.clone();
        let killer = PodKiller::start(&loops, manager(&rt, &root))
            .expect("start")
            .on_killed(Arc::new(move |uid: &str| {
                base::loops::lock(&t).push(uid.to_string())
            }));
        let (done_tx, done_rx) = crossbeam_channel::bounded(1);
        let t = told.clone();
        killer.submit(
            KillPodRequest {
                uid: "p".into(),
                pod: None,
                grace_override: Some(Duration::from_secs(30)),
                remove: false,
            },
            Box::new(move |r| {
                let _ = done_tx.send((r.is_ok(), base::loops::lock(&t).clone()));
            }),
        );
        let got = done_rx.recv_timeout(Duration::from_secs(30));
        assert_eq!(got, Ok((true, vec!["p".to_string()])), "told first, once");
        shutdown.trigger();
        assert!(loops.join_all(Duration::from_secs(10)).is_empty());
    }

    #[test]
    fn app_containers_of_one_pod_stop_together_then_sidecars_in_reverse() {
        let _turn = base::loops::lock(&ONE_KILLER);
        let root = TempDir::new("killer-order");
        let rt = Arc::new(FakeRuntime::new(FakeClock::default()).with_image(IMAGE));
        run(&rt, "p", "POD", "");
        for c in ["a", "b", "c"] {
            run(&rt, "p", c, "container");
        }
        run(&rt, "p", "s1", "init");
        run(&rt, "p", "s2", "init");
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"uid": "p", "name": "p", "namespace": "default"},
            "spec": {
                "initContainers": [
                    {"name": "s1", "restartPolicy": "Always"},
                    {"name": "s2", "restartPolicy": "Always"}
                ],
                "containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}]
            }
        }))
        .expect("pod");
        // Every stop takes a while, as a container using its grace period does.
        let each = Duration::from_millis(300);
        rt.delay(Op::Stop, each);
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop);
        let killer = PodKiller::start(&loops, manager(&rt, &root)).expect("start");
        let (done_tx, done_rx) = crossbeam_channel::bounded(1);
        let began = Instant::now();
        killer.submit(
            KillPodRequest {
                uid: "p".into(),
                pod: Some(Arc::new(pod)),
                grace_override: Some(Duration::from_secs(30)),
                remove: false,
            },
            Box::new(move |r| {
                let _ = done_tx.send(r.is_ok());
            }),
        );
        assert_eq!(done_rx.recv_timeout(Duration::from_secs(30)), Ok(true));
        let took = began.elapsed();
        // The three apps stopped at once; then s2, then s1, then the sandbox: four
        // stop times, not six.
        assert_eq!(rt.max_in_flight(Op::Stop), 3, "app stops overlap");
        assert!(took < each * 5, "{took:?}");
        let order: Vec<String> = rt
            .calls()
            .into_iter()
            .filter(|c| c.op == Op::Stop)
            .filter_map(|c| {
                rt.containers()
                    .into_iter()
                    .find(|d| d.id == c.target)
                    .and_then(|d| d.labels.get(labels::CONTAINER_NAME).cloned())
            })
            .collect();
        assert_eq!(order.len(), 6);
        let mut apps = order[..3].to_vec();
        base::sort::sort(&mut apps);
        assert_eq!(apps, ["a", "b", "c"]);
        assert_eq!(order[3..], ["s2", "s1", "POD"]);
        assert!(rt
            .containers()
            .iter()
            .all(|c| c.state == ContainerState::Exited));
        shutdown.trigger();
        assert!(loops.join_all(Duration::from_secs(10)).is_empty());
    }

    /// A running container as [`run`] makes it, with its configured stop signal.
    fn run_with_signal(rt: &FakeRuntime, uid: &str, name: &str, kind: &str, signal: &str) {
        run(rt, uid, name, kind);
        let id = rt
            .containers()
            .into_iter()
            .find(|c| c.name == format!("k8s_{name}_{uid}"))
            .map(|c| c.id)
            .expect("created");
        rt.set_stop_signal(&id, signal);
    }

    /// Runs `reqs` through a fresh pod killer; returns how long until every kill
    /// ended and the most killer threads seen meanwhile.
    fn kill_and_wait(
        rt: &Arc<FakeRuntime>,
        root: &TempDir,
        reqs: Vec<KillPodRequest>,
        mut during: impl FnMut(),
    ) -> (Duration, usize) {
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop);
        let killer = PodKiller::start(&loops, manager(rt, root)).expect("start");
        let (done_tx, done_rx) = crossbeam_channel::unbounded();
        let n = reqs.len();
        let began = Instant::now();
        for req in reqs {
            let tx = done_tx.clone();
            killer.submit(
                req,
                Box::new(move |r| {
                    let _ = tx.send(r.is_ok());
                }),
            );
        }
        let mut most = 0;
        let mut done = 0;
        let until = Instant::now() + Duration::from_secs(60);
        while done < n {
            assert!(Instant::now() < until, "only {done} kills ended");
            most = most.max(threads_named(&loops, &["pod-kill", "pod-stop"]));
            during();
            if let Ok(ok) = done_rx.recv_timeout(Duration::from_millis(1)) {
                assert!(ok, "a kill failed");
                done += 1;
            }
        }
        let took = began.elapsed();
        shutdown.trigger();
        assert!(loops.join_all(Duration::from_secs(10)).is_empty());
        (took, most)
    }

    #[test]
    fn pods_ignoring_their_stop_signal_are_all_killed_in_about_one_grace_period() {
        let _turn = base::loops::lock(&ONE_KILLER);
        let root = TempDir::new("killer-grace");
        let rt = Arc::new(FakeRuntime::new(FakeClock::default()).with_image(IMAGE));
        let uids: Vec<String> = (0..100).map(|i| format!("pod-{i}")).collect();
        for u in &uids {
            run(&rt, u, "POD", "");
            run(&rt, u, "a", "container");
            run(&rt, u, "b", "container");
        }
        // Neither app container reacts to SIGTERM: each stop lasts its whole grace.
        rt.ignore_stop_signal("a");
        rt.ignore_stop_signal("b");
        let grace = Duration::from_secs(2);
        let reqs = uids
            .iter()
            .map(|u| KillPodRequest {
                uid: u.clone(),
                pod: None,
                grace_override: Some(grace),
                remove: true,
            })
            .collect();
        let began = Instant::now();
        let (took, most) = kill_and_wait(&rt, &root, reqs, || {});
        // Grace periods overlap across pods (as upstream's goroutines): a fixed pool
        // waiting them out in turn would take 100 x 2 s / its size.
        assert!(took < grace * 3, "100 pods took {took:?}");
        assert!(most <= THREADS, "{most} kill threads, more than {THREADS}");
        let signals = rt.signals();
        let first = |id: &str, sig: &str| {
            signals
                .iter()
                .find(|s| s.id == id && s.signal == sig)
                .map(|s| s.at)
        };
        let mut sigkills = 0;
        for s in signals.iter().filter(|s| s.signal == runtime::SIGKILL) {
            sigkills += 1;
            let term = first(&s.id, "SIGTERM").expect("SIGTERM before SIGKILL");
            let after = s.at.duration_since(term);
            assert!(
                after >= grace,
                "SIGKILL {after:?} after SIGTERM, before the grace"
            );
            assert!(
                s.at.duration_since(began) < grace * 2,
                "every SIGKILL is sent about one grace period after the removal"
            );
        }
        assert_eq!(sigkills, 200, "each app container was SIGKILLed once");
        assert!(rt.containers().is_empty(), "every container was removed");
    }

    #[test]
    fn a_sidecar_is_signalled_only_after_the_app_containers_exited() {
        let _turn = base::loops::lock(&ONE_KILLER);
        let root = TempDir::new("killer-sidecar");
        let rt = Arc::new(FakeRuntime::new(FakeClock::default()).with_image(IMAGE));
        run(&rt, "p", "POD", "");
        run(&rt, "p", "slow", "container");
        run(&rt, "p", "quick", "container");
        run(&rt, "p", "side", "init");
        rt.ignore_stop_signal("slow");
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"uid": "p", "name": "p", "namespace": "default"},
            "spec": {
                "initContainers": [{"name": "side", "restartPolicy": "Always"}],
                "containers": [{"name": "slow"}, {"name": "quick"}]
            }
        }))
        .expect("pod");
        // A long grace: nothing ends by its grace period in this test.
        let grace = Duration::from_secs(30);
        let req = KillPodRequest {
            uid: "p".into(),
            pod: Some(Arc::new(pod)),
            grace_override: Some(grace),
            remove: false,
        };
        let id_of = |name: &str| {
            rt.containers()
                .into_iter()
                .find(|c| c.labels.get(labels::CONTAINER_NAME).map(String::as_str) == Some(name))
                .map(|c| c.id)
                .expect("container")
        };
        let (slow, side) = (id_of("slow"), id_of("side"));
        // `slow` ignores its SIGTERM; once it has it, the test makes it exit (as a
        // process finishing its shutdown would), and notes when.
        let mut slow_exited: Option<Instant> = None;
        kill_and_wait(&rt, &root, vec![req], || {
            if slow_exited.is_none() && rt.signals().iter().any(|s| s.id == slow) {
                slow_exited = Some(Instant::now());
                rt.exit(&slow, 0);
            }
        });
        let slow_exited = slow_exited.expect("slow was signalled");
        let signals = rt.signals();
        let side_signal = signals
            .iter()
            .find(|s| s.id == side)
            .unwrap_or_else(|| panic!("side got no signal: {signals:?}"));
        assert!(
            side_signal.at >= slow_exited,
            "the sidecar is signalled after the app exited: {signals:?}"
        );
        assert_eq!(side_signal.signal, "SIGTERM");
        assert!(
            signals.iter().all(|s| s.signal != runtime::SIGKILL),
            "every container exited within its grace: {signals:?}"
        );
        assert!(rt
            .containers()
            .iter()
            .all(|c| c.state == ContainerState::Exited));
    }

    #[test]
    fn each_container_is_sent_its_own_stop_signal() {
        let _turn = base::loops::lock(&ONE_KILLER);
        let root = TempDir::new("killer-signal");
        let rt = Arc::new(FakeRuntime::new(FakeClock::default()).with_image(IMAGE));
        run(&rt, "p", "POD", "");
        run(&rt, "p", "plain", "container");
        run_with_signal(&rt, "p", "usr1", "container", "SIGUSR1");
        kill_and_wait(&rt, &root, kill_all(&["p".to_string()], false), || {});
        let mut sent: Vec<(String, String)> = rt
            .signals()
            .into_iter()
            .filter_map(|s| {
                let c = rt.containers().into_iter().find(|c| c.id == s.id)?;
                Some((c.labels.get(labels::CONTAINER_NAME)?.clone(), s.signal))
            })
            .collect();
        base::sort::sort(&mut sent);
        assert_eq!(
            sent,
            [
                ("POD".to_string(), "SIGTERM".to_string()),
                ("plain".to_string(), "SIGTERM".to_string()),
                ("usr1".to_string(), "SIGUSR1".to_string())
            ]
        );
    }

    #[test]
    fn a_syncs_container_stop_is_a_signal_then_sigkill_at_its_deadline_and_the_rest_stays() {
        let _turn = base::loops::lock(&ONE_KILLER);
        let root = TempDir::new("killer-one");
        let rt = Arc::new(FakeRuntime::new(FakeClock::default()).with_image(IMAGE));
        run(&rt, "p", "POD", "");
        run(&rt, "p", "stubborn", "container");
        run(&rt, "p", "other", "container");
        rt.ignore_stop_signal("stubborn");
        let pod: Arc<Pod> = Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"uid": "p", "name": "p", "namespace": "default"},
                "spec": {"terminationGracePeriodSeconds": 2,
                         "containers": [{"name": "stubborn"}, {"name": "other"}]}
            }))
            .expect("pod"),
        );
        let d = rt
            .containers()
            .into_iter()
            .find(|c| c.name == "k8s_stubborn_p")
            .expect("stubborn");
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop);
        let m = manager(&rt, &root);
        let killer = PodKiller::start(&loops, m.clone()).expect("start");
        let k = crate::kuberuntime::actions::KillAction {
            id: d.id.clone(),
            name: "stubborn".into(),
            kind: runtime::container::labels::ContainerKind::App,
            message: "Container stubborn failed liveness probe, will be restarted".into(),
            reason: crate::kuberuntime::actions::KillReason::LivenessProbe,
        };
        let stops = vec![m.plan_container_stop(Some(&pod), &d, k)];
        let (done_tx, done_rx) = crossbeam_channel::bounded(1);
        let req = KillPodRequest {
            uid: "p".into(),
            pod: Some(pod),
            grace_override: None,
            remove: false,
        };
        // Submitting never blocks on the grace period: the caller gets on at once.
        killer.submit_containers(
            req,
            stops,
            Box::new(move |r| {
                let _ = done_tx.send(r.is_ok());
            }),
        );
        assert_eq!(done_rx.recv_timeout(Duration::from_secs(30)), Ok(true));
        let signals: Vec<String> = rt
            .signals()
            .into_iter()
            .filter(|s| s.id == d.id)
            .map(|s| s.signal)
            .collect();
        assert_eq!(signals, ["SIGTERM", runtime::SIGKILL]);
        let state = |name: &str| {
            rt.containers()
                .into_iter()
                .find(|c| c.name == format!("k8s_{name}_p"))
                .map(|c| c.state)
        };
        assert_eq!(state("stubborn"), Some(ContainerState::Exited));
        assert_eq!(
            state("other"),
            Some(ContainerState::Running),
            "only that one"
        );
        assert_eq!(
            state("POD"),
            Some(ContainerState::Running),
            "the sandbox stays"
        );
        shutdown.trigger();
        assert!(loops.join_all(Duration::from_secs(10)).is_empty());
    }

    #[test]
    fn a_syncs_container_stop_whose_signal_fails_ends_in_an_error() {
        let _turn = base::loops::lock(&ONE_KILLER);
        let root = TempDir::new("killer-one-fails");
        let rt = Arc::new(FakeRuntime::new(FakeClock::default()).with_image(IMAGE));
        run(&rt, "p", "POD", "");
        run(&rt, "p", "a", "container");
        let d = rt
            .containers()
            .into_iter()
            .find(|c| c.name == "k8s_a_p")
            .expect("a");
        rt.fail(Op::Stop, 1, runtime::fake::Fault::Api(500, "boom".into()));
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop);
        let m = manager(&rt, &root);
        let killer = PodKiller::start(&loops, m.clone()).expect("start");
        let k = crate::kuberuntime::actions::KillAction {
            id: d.id.clone(),
            name: "a".into(),
            kind: runtime::container::labels::ContainerKind::App,
            message: String::new(),
            reason: crate::kuberuntime::actions::KillReason::Other,
        };
        let stops = vec![m.plan_container_stop(None, &d, k)];
        let (done_tx, done_rx) = crossbeam_channel::bounded(1);
        let req = KillPodRequest {
            uid: "p".into(),
            pod: None,
            grace_override: None,
            remove: false,
        };
        killer.submit_containers(
            req,
            stops,
            Box::new(move |r| {
                let _ = done_tx.send(r.is_ok());
            }),
        );
        // The pod's sync is then tried again after the error period, not at once.
        assert_eq!(done_rx.recv_timeout(Duration::from_secs(30)), Ok(false));
        shutdown.trigger();
        assert!(loops.join_all(Duration::from_secs(10)).is_empty());
    }
}
