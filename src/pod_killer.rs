//! The pod killer (upstream `podKiller`, `pkg/kubelet/pod_workers.go` before 1.22):
//! whole-pod kills — a pod removed from its source, deleted, orphaned, finished, or
//! whose sandbox must be replaced — are taken off a bounded channel by a fixed pool of
//! `pod-kill-N` threads, so a 30 s grace period never holds a pod worker (of which
//! there are only a few) or the sync loop.
//!
//! The thread count is fixed whatever the number of pods and containers:
//! [`KILL_WORKERS`] kill workers, each with [`STOPS_PER_KILL`] container-stop threads
//! (`pod-stop-N-M`) of its own. A kill worker plans its pod's stops
//! ([`RuntimeManager::plan_kill`]) and hands them, in order, to its stop threads:
//! the app containers of a pod stop in parallel (their grace periods overlap, as
//! upstream's goroutines do), then the sidecars in reverse order. A pod with more
//! running containers than [`STOPS_PER_KILL`] stops in waves; the order still holds,
//! because a stop only ever waits for stops handed out before it.
//!
//! Ordering stays per pod: the pod worker that hands a kill over keeps the pod's slot
//! busy until the kill's completion callback runs (which calls
//! [`crate::pod_workers::PodWorkers::finish`]), so nothing else of that pod runs while
//! it is being stopped, and at most one kill per pod is in flight.

use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender, TrySendError};

use crate::kuberuntime::{ContainerStop, KillPodRequest, RuntimeManager};
use crate::loops::{LoopHandle, Loops, SpawnError, Stop};
use crate::runtime::RuntimeError;

/// Kills carried out at once. Each mostly waits out grace periods in `docker stop`;
/// four keep a mass removal moving without hundreds of threads against dockerd.
pub const KILL_WORKERS: usize = 4;
/// Container stops of one pod carried out at once: most pods have fewer running
/// containers, so their grace periods all overlap.
pub const STOPS_PER_KILL: usize = 4;
/// Every thread the pod killer runs, whatever it is asked.
pub const THREADS: usize = KILL_WORKERS * (1 + STOPS_PER_KILL);
/// Kill requests waiting for a kill worker. A request is small; the queue holds a
/// mass removal of every pod a node can run, so a pod worker hands kills over rather
/// than carry them out itself (which it does only when the queue is full).
pub const CHANNEL_CAPACITY: usize = 1024;

/// What runs when a kill has finished (on a kill worker's thread).
pub type Done = Box<dyn FnOnce(Result<(), RuntimeError>) + Send + 'static>;

struct Job {
    req: KillPodRequest,
    done: Done,
}

/// One container stop, handed by a kill worker to its stop threads.
struct StopTask {
    req: KillPodRequest,
    stop: ContainerStop,
    /// Dropped when the stop has ended: the kill worker counts these.
    finished: Sender<()>,
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
    /// Starts the kill workers `pod-kill-0..` and their stop threads `pod-stop-N-M`.
    pub fn start(loops: &Loops, manager: Arc<RuntimeManager>) -> Result<PodKiller, SpawnError> {
        let (tx, rx) = crossbeam_channel::bounded(CHANNEL_CAPACITY);
        for k in 0..KILL_WORKERS {
            // Each stop is taken by the first free stop thread; the kill worker never
            // hands out more than it waits for, so the channel needs no more room.
            let (stop_tx, stop_rx) = crossbeam_channel::bounded::<StopTask>(STOPS_PER_KILL);
            for m in 0..STOPS_PER_KILL {
                let m_rx = stop_rx.clone();
                let m_manager = manager.clone();
                loops.spawn(&format!("pod-stop-{k}-{m}"), move |stop, handle| {
                    run_stops(&m_manager, &m_rx, &stop, &handle);
                })?;
            }
            let rx: Receiver<Job> = rx.clone();
            let k_manager = manager.clone();
            loops.spawn(&format!("pod-kill-{k}"), move |stop, handle| {
                run_kills(&k_manager, &rx, &stop_tx, &stop, &handle);
            })?;
        }
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
                let result = self.manager.kill_pod(&job.req);
                (job.done)(result);
            }
        }
    }
}

/// A kill worker: one pod at a time, its stops on its own stop threads.
fn run_kills(
    manager: &RuntimeManager,
    rx: &Receiver<Job>,
    stops: &Sender<StopTask>,
    stop: &Stop,
    handle: &LoopHandle,
) {
    loop {
        crossbeam_channel::select! {
            recv(stop.receiver()) -> _ => return,
            recv(rx) -> job => {
                let Ok(job) = job else { return };
                let began = handle.begin_tick();
                log::info!("{}: killing pod {}", handle.name(), job.req.uid);
                let Some(result) = kill(manager, &job.req, stops, stop) else {
                    // Shutdown: the kill is left where it stands (containers are never
                    // stopped by a kubelet exit anyway).
                    handle.end_tick(began, None);
                    return;
                };
                (job.done)(result);
                handle.end_tick(began, None);
            }
        }
    }
}

/// Carries out one pod kill with the stop threads. None when shutdown began first.
fn kill(
    manager: &RuntimeManager,
    req: &KillPodRequest,
    stops: &Sender<StopTask>,
    stop: &Stop,
) -> Option<Result<(), RuntimeError>> {
    let plan = match manager.plan_kill(req) {
        Ok(p) => p,
        Err(e) => return Some(Err(e)),
    };
    let (finished_tx, finished_rx) = crossbeam_channel::bounded::<()>(0);
    let (planned, runtime_pod) = plan.into_parts();
    for s in planned {
        let task = StopTask {
            req: req.clone(),
            stop: s,
            finished: finished_tx.clone(),
        };
        // Blocks while every stop thread is busy: a wave ends, the next begins.
        crossbeam_channel::select! {
            send(stops, task) -> sent => {
                if let Err(crossbeam_channel::SendError(task)) = sent {
                    // The stop threads are gone: stop it here.
                    manager.stop_in_kill(&task.req, task.stop);
                }
            }
            recv(stop.receiver()) -> _ => return None,
        }
    }
    drop(finished_tx);
    // Every task drops its `finished` sender when its stop ends (nothing is ever
    // sent): the channel closes when the last one has.
    crossbeam_channel::select! {
        recv(finished_rx) -> _ => {},
        recv(stop.receiver()) -> _ => return None,
    }
    Some(manager.finish_kill(req, &runtime_pod))
}

/// A container-stop thread of one kill worker.
fn run_stops(manager: &RuntimeManager, rx: &Receiver<StopTask>, stop: &Stop, handle: &LoopHandle) {
    loop {
        crossbeam_channel::select! {
            recv(stop.receiver()) -> _ => return,
            recv(rx) -> task => {
                let Ok(task) = task else { return };
                let began = handle.begin_tick();
                let StopTask { req, stop: s, finished } = task;
                manager.stop_in_kill(&req, s);
                drop(finished);
                handle.end_tick(began, None);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::container::labels;
    use crate::kuberuntime::container::dns::DnsSettings;
    use crate::kuberuntime::container::NodeContext;
    use crate::kuberuntime::ManagerConfig;
    use crate::loops::shutdown_channel;
    use crate::runtime::fake::{FakeClock, FakeRuntime, Op};
    use crate::runtime::{ContainerConfig, ContainerState, Runtime};
    use crate::testutil::TempDir;
    use crate::volume::VolumeManager;
    use k8s_openapi::api::core::v1::Pod;
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
                pod_infra_image: IMAGE.into(),
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
            .create_container(&ContainerConfig {
                name: format!("k8s_{name}_{uid}"),
                image: IMAGE.into(),
                labels: l,
                ..ContainerConfig::default()
            })
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
        let _turn = crate::loops::lock(&ONE_KILLER);
        let root = TempDir::new("killer-100");
        let rt = Arc::new(FakeRuntime::new(FakeClock::default()).with_image(IMAGE));
        let uids: Vec<String> = (0..100).map(|i| format!("pod-{i}")).collect();
        for u in &uids {
            run(&rt, u, "POD", "");
            run(&rt, u, "a", "container");
            run(&rt, u, "b", "container");
        }
        rt.delay(Op::Stop, Duration::from_millis(5));
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop);
        let killer = PodKiller::start(&loops, manager(&rt, &root)).expect("start");
        let (done_tx, done_rx) = crossbeam_channel::unbounded();
        for req in kill_all(&uids, true) {
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
        while done < uids.len() {
            assert!(Instant::now() < until, "only {done} kills ended");
            most = most.max(threads_named(&loops, &["pod-kill", "pod-stop"]));
            if let Ok(ok) = done_rx.recv_timeout(Duration::from_millis(1)) {
                assert!(ok, "a kill failed");
                done += 1;
            }
        }
        assert!(most <= THREADS, "{most} kill threads, more than {THREADS}");
        assert!(rt.containers().is_empty(), "every container was removed");
        shutdown.trigger();
        assert!(loops.join_all(Duration::from_secs(10)).is_empty());
    }

    #[test]
    fn app_containers_of_one_pod_stop_together_then_sidecars_in_reverse() {
        let _turn = crate::loops::lock(&ONE_KILLER);
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
        apps.sort();
        assert_eq!(apps, ["a", "b", "c"]);
        assert_eq!(order[3..], ["s2", "s1", "POD"]);
        assert!(rt
            .containers()
            .iter()
            .all(|c| c.state == ContainerState::Exited));
        shutdown.trigger();
        assert!(loops.join_all(Duration::from_secs(10)).is_empty());
    }
}
