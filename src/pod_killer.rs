//! The pod killer (upstream `podKiller`, `pkg/kubelet/pod_workers.go` before 1.22):
//! whole-pod kills — a pod removed from its source, deleted, orphaned, finished, or
//! whose sandbox must be replaced — are taken off a bounded channel by the
//! `pod-killer` thread and each carried out on a short-lived `pod-kill` thread, so a
//! 30 s grace period never holds a pod worker (of which there are only a few) or the
//! sync loop.
//!
//! Ordering stays per pod: the pod worker that hands a kill over keeps the pod's slot
//! busy until the kill's completion callback runs (which calls
//! [`crate::pod_workers::PodWorkers::finish`]), so nothing else of that pod runs while
//! it is being stopped, and at most one kill per pod is in flight.

use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender, TrySendError};

use crate::kuberuntime::{KillPodRequest, RuntimeManager};
use crate::loops::{Loops, SpawnError};
use crate::runtime::RuntimeError;

/// Kill requests waiting for the `pod-killer` thread. It only hands each to a new
/// thread, so the queue drains in microseconds; a full queue makes the caller kill
/// inline rather than drop the kill.
pub const CHANNEL_CAPACITY: usize = 64;

/// What runs when a kill has finished (on the kill's thread).
pub type Done = Box<dyn FnOnce(Result<(), RuntimeError>) + Send + 'static>;

struct Job {
    req: KillPodRequest,
    done: Done,
}

/// The sending side: pod workers submit kills through it.
#[derive(Clone)]
pub struct PodKiller {
    tx: Sender<Job>,
    manager: Arc<RuntimeManager>,
}

impl std::fmt::Debug for PodKiller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodKiller")
            .field("queued", &self.tx.len())
            .finish()
    }
}

impl PodKiller {
    /// Starts the `pod-killer` thread.
    pub fn start(loops: &Loops, manager: Arc<RuntimeManager>) -> Result<PodKiller, SpawnError> {
        let (tx, rx) = crossbeam_channel::bounded(CHANNEL_CAPACITY);
        let m = manager.clone();
        loops.spawn("pod-killer", move |stop, handle| {
            run(&m, &rx, &stop, &handle);
        })?;
        Ok(PodKiller { tx, manager })
    }

    /// Hands a kill over; `done` runs when it has finished. Never drops a kill: when
    /// the queue is full, or the killer has stopped, the kill runs here and now.
    pub fn submit(&self, req: KillPodRequest, done: Done) {
        match self.tx.try_send(Job { req, done }) {
            Ok(()) => {}
            Err(TrySendError::Full(job)) | Err(TrySendError::Disconnected(job)) => {
                log::warn!(
                    "pod killer is busy or stopped; killing pod {} inline",
                    job.req.uid
                );
                execute(&self.manager, job);
            }
        }
    }
}

fn execute(manager: &RuntimeManager, job: Job) {
    let result = manager.kill_pod(&job.req);
    (job.done)(result);
}

fn run(
    manager: &Arc<RuntimeManager>,
    rx: &Receiver<Job>,
    stop: &crate::loops::Stop,
    handle: &crate::loops::LoopHandle,
) {
    loop {
        crossbeam_channel::select! {
            recv(stop.receiver()) -> _ => return,
            recv(rx) -> job => {
                let Ok(job) = job else { return };
                let began = handle.begin_tick();
                let uid = job.req.uid.clone();
                log::info!("pod-killer: killing pod {uid}");
                let m = manager.clone();
                // The job moves into the thread; if no thread can be made, the closure
                // (and the job) comes back in the error and runs here instead.
                let slot = Arc::new(std::sync::Mutex::new(Some(job)));
                let theirs = slot.clone();
                let spawned = std::thread::Builder::new()
                    .name("pod-kill".into())
                    .spawn(move || {
                        let job = crate::loops::lock(&theirs).take();
                        if let Some(job) = job {
                            execute(&m, job);
                        }
                    });
                if let Err(e) = spawned {
                    log::warn!("cannot spawn a kill thread ({e}); killing pod {uid} here");
                    let job = crate::loops::lock(&slot).take();
                    if let Some(job) = job {
                        execute(manager, job);
                    }
                }
                handle.end_tick(began, None);
            }
        }
    }
}
