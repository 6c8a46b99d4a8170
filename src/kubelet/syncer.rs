//! The pod workers' syncer (upstream `Kubelet.SyncPod` / `SyncTerminatingPod` as the
//! pod workers call them): runs the runtime manager for one pod, publishes the status
//! it computes, keeps the prober's view of the pod current, and hands whole-pod kills,
//! a sync's container stops and postStart hooks to the pod killer, so no worker waits
//! out a grace period or a hook (the pod is parked, and synced again after).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Pod;

use crate::cm::ContainerManager;
use crate::kuberuntime::{ContainerStop, KillPodRequest, PostStart, RuntimeManager, SyncInputs};
use crate::metrics::KubeletMetrics;
use crate::pod_killer::PodKiller;
use crate::pod_workers::{Kill, Outcome, PodSyncer, PodWorkers, WorkQueue};
use crate::prober::ProbeManager;
use crate::status::{self, StatusCache, StatusInputs};

use super::SYNC_ERROR_REQUEUE;

/// The pod workers' syncer: runs the runtime manager, publishes the status, and hands
/// whole-pod kills to the pod killer.
pub(super) struct SyncHandler {
    pub(super) manager: Arc<RuntimeManager>,
    pub(super) statuses: Arc<StatusCache>,
    pub(super) queue: Arc<WorkQueue>,
    pub(super) probes: Arc<ProbeManager>,
    pub(super) host_ip: Arc<crate::nodestatus::HostIp>,
    pub(super) resync: Duration,
    pub(super) killer: PodKiller,
    pub(super) workers: Arc<PodWorkers>,
    pub(super) metrics: Arc<KubeletMetrics>,
    /// The pod cgroups (created before a sync, removed after the containers).
    pub(super) cm: Arc<ContainerManager>,
}

impl SyncHandler {
    /// Hands a kill to the pod killer; when it ends, `after` runs and the pod's slot is
    /// released.
    pub(super) fn hand_over(
        &self,
        req: KillPodRequest,
        was_kill: bool,
        after: impl FnOnce(Result<(), runtime::RuntimeError>) + Send + 'static,
    ) -> Outcome {
        let workers = self.workers.clone();
        let uid = req.uid.clone();
        self.killer.submit(
            req,
            Box::new(move |r| {
                after(r);
                workers.finish(&uid, was_kill);
            }),
        );
        Outcome::Continues
    }
}

/// Work of a sync that would hold a pod worker: handed to the pod killer while the
/// pod is parked.
enum Parked {
    /// Containers to stop (a failed probe, a changed spec).
    Stops(Vec<ContainerStop>),
    /// A started container's postStart hook.
    PostStart(Box<PostStart>),
}

impl SyncHandler {
    /// Parks the pod's sync: the pod killer carries out `parked`, this worker is free
    /// meanwhile (the pod's slot stays busy), and the pod is synced again when it is
    /// done, reading its containers afresh.
    fn park(&self, pod: &Arc<Pod>, parked: Parked) -> Outcome {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let req = KillPodRequest {
            uid: uid.clone(),
            pod: Some(pod.clone()),
            grace_override: None,
            remove: false,
        };
        let (workers, manager, pod) = (self.workers.clone(), self.manager.clone(), pod.clone());
        let queue = self.queue.clone();
        let done: crate::pod_killer::Done = Box::new(move |res| {
            manager.forget_pod_status(&uid);
            match res {
                Ok(()) => workers.resume(&uid, pod),
                Err(e) => {
                    // As a failed sync: tried again after the error period.
                    log::warn!("pod {uid}: {}", base::loops::error_chain(&e));
                    queue.enqueue(&uid, SYNC_ERROR_REQUEUE);
                    workers.finish(&uid, false);
                }
            }
        });
        match parked {
            Parked::Stops(stops) => self.killer.submit_containers(req, stops, done),
            Parked::PostStart(hook) => self.killer.submit_post_start(req, *hook, done),
        }
        Outcome::Continues
    }
}

impl SyncHandler {
    /// `kubelet_pod_start_duration_seconds`: from the pod's `config.seen` (when a
    /// source first gave it to this kubelet) to the sync that first finds it Running.
    /// Upstream's check also fires on a pod's very first sync (before any status);
    /// here each pod is observed once, when it starts running.
    fn observe_start(&self, pod: &Pod, now: SystemTime) {
        let seen = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(crate::podconfig::CONFIG_SEEN_ANNOTATION))
            .and_then(|t| base::time::parse_rfc3339(t));
        if let Some(seen) = seen {
            let took = now.duration_since(seen).unwrap_or_default();
            self.metrics
                .pod_start_duration
                .observe([], took.as_secs_f64());
        }
    }
}

impl PodSyncer for SyncHandler {
    fn sync_pod(&self, pod: &Arc<Pod>) -> Outcome {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let previous = self.statuses.get(&uid);
        let now = SystemTime::now();
        // A pod that is done only stops: its phase is terminal, its active deadline
        // passed (upstream's activeDeadlineHandler), or it is being deleted.
        let terminal = previous
            .as_deref()
            .is_some_and(|p| status::is_terminal_phase(p.phase.as_deref()))
            || status::past_active_deadline(
                pod,
                previous.as_deref().and_then(status::start_time),
                now,
            )
            || pod.metadata.deletion_timestamp.is_some();
        // Upstream `SyncPod`: the pod's cgroup (and the QoS cgroups' shares) before its
        // containers; a pod whose cgroup cannot be made waits and is tried again.
        let cgroup_parent = if terminal {
            String::new()
        } else {
            match self.cm.ensure_pod(pod) {
                Ok(p) => p,
                Err(e) => {
                    log::warn!("{}", base::loops::error_chain(&e));
                    self.queue.enqueue(&uid, SYNC_ERROR_REQUEUE);
                    return Outcome::Done;
                }
            }
        };
        let inputs = SyncInputs {
            terminal,
            cgroup_parent,
        };
        match self.manager.sync_pod(pod, &inputs) {
            Ok(mut r) => {
                let st = status::generate(
                    pod,
                    &r.runtime_pod,
                    &StatusInputs {
                        waiting: &r.waiting,
                        previous: previous.as_deref(),
                        host_ip: &self.host_ip.get(),
                        now,
                        pod_is_terminal: pod.metadata.deletion_timestamp.is_some(),
                        probes: Some(self.probes.results()),
                        runtime_type: &self.manager.runtime_type(),
                    },
                );
                // The prober follows the containers this sync left running.
                self.probes
                    .update_pod(pod, &r.runtime_pod, st.pod_ip.as_deref());
                let was = previous.as_deref().and_then(|p| p.phase.as_deref());
                if st.phase.as_deref() == Some("Running") && matches!(was, None | Some("Pending")) {
                    self.observe_start(pod, SystemTime::now());
                }
                if st.phase != previous.as_deref().and_then(|p| p.phase.clone()) {
                    log::info!(
                        "pod {}: phase {}{}",
                        runtime::container::format_pod(pod),
                        st.phase.as_deref().unwrap_or_default(),
                        st.reason
                            .as_deref()
                            .map(|r| format!(" ({r})"))
                            .unwrap_or_default()
                    );
                }
                self.statuses.set(&uid, st);
                let parked = if !r.kill_containers.is_empty() {
                    Some(Parked::Stops(std::mem::take(&mut r.kill_containers)))
                } else {
                    r.post_start.take().map(|h| Parked::PostStart(Box::new(h)))
                };
                if let Some(parked) = parked {
                    return self.park(pod, parked);
                }
                if r.kill_pod {
                    // Sync again once it is down: a new sandbox, or the final status.
                    let queue = self.queue.clone();
                    let u = uid.clone();
                    let req = KillPodRequest {
                        uid,
                        pod: Some(pod.clone()),
                        grace_override: None,
                        remove: false,
                    };
                    return self.hand_over(req, false, move |res| {
                        if let Err(e) = res {
                            log::warn!("killing pod {u}: {}", base::loops::error_chain(&e));
                        }
                        queue.enqueue(&u, Duration::ZERO);
                    });
                }
                let after = r.requeue_after.map_or(self.resync, |d| d.min(self.resync));
                self.queue.enqueue(&uid, after);
            }
            Err(e) => {
                if e.runtime_unavailable() {
                    log::debug!("{}", base::loops::error_chain(&e));
                } else {
                    log::warn!("{}", base::loops::error_chain(&e));
                }
                self.queue.enqueue(&uid, SYNC_ERROR_REQUEUE);
            }
        }
        Outcome::Done
    }

    fn kill_pod(&self, uid: &str, kill: &Kill) -> Outcome {
        // Nothing probes a pod that is going away.
        self.probes.remove_pod(uid);
        let req = KillPodRequest {
            uid: uid.to_string(),
            pod: kill.pod.clone(),
            grace_override: kill.grace,
            remove: kill.remove,
        };
        let statuses = self.statuses.clone();
        let queue = self.queue.clone();
        let u = uid.to_string();
        let remove = kill.remove;
        let cm = self.cm.clone();
        // Upstream `TerminatePod`: a deleted pod that is not static ends terminal; one
        // killed before any sync of this kubelet (deleted while it was down, or before
        // it ran) starts from the API's copy of its status.
        let force_terminal = kill
            .pod
            .as_deref()
            .is_some_and(|p| !runtime::container::is_static_pod(p));
        let api_status = kill.pod.as_deref().and_then(|p| p.status.clone());
        self.hand_over(req, true, move |res| match res {
            Ok(()) if remove => {
                statuses.remove(&u);
                queue.remove(&u);
                // Its containers are gone: its cgroup can go.
                cm.remove_pod(&u);
            }
            Ok(()) => {
                // Upstream `TerminatePod`: what did not end visibly ended unknown.
                let prev = statuses
                    .get(&u)
                    .map(|p| (*p).clone())
                    .or_else(|| force_terminal.then(|| api_status.unwrap_or_default()));
                if let Some(prev) = prev {
                    statuses.set(&u, status::terminate(&prev, force_terminal));
                }
            }
            Err(e) => log::warn!(
                "killing pod {u}: {} (housekeeping retries)",
                base::loops::error_chain(&e)
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::super::testing::{self, pod, Node};
    use super::*;
    use crate::pod_workers::Work;
    use crate::podconfig::Source;
    use runtime::fake::{Fault, Op};
    use runtime::ContainerState;

    const PROBED: &str = "{containers: [{name: a, image: 'busybox:1', \
                          readinessProbe: {exec: {command: [check]}}}]}";

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn sync_pod_publishes_the_status_and_probes_and_requeues_at_the_resync_period() {
        let rt = testing::runtime(&testing::clock());
        let n = Node::new(&rt, &[Source::File]);
        let p = Arc::new(pod("web", "u1", PROBED));
        assert_eq!(n.handler.sync_pod(&p), Outcome::Done);
        assert_eq!(n.phase("u1").as_deref(), Some("Running"));
        assert_eq!(n.sl.probes.pods(), ["u1"], "the prober follows the pod");
        let resync = n.cfg.sync_frequency;
        let now = Instant::now();
        assert!(n.sl.queue.take_due(now + resync - s(1)).is_empty());
        assert_eq!(n.sl.queue.take_due(now + resync + s(1)), ["u1"]);
    }

    #[test]
    fn a_failed_sync_requeues_after_the_error_period() {
        for fault in [Fault::Unavailable, Fault::Api(500, "boom".into())] {
            let rt = testing::runtime(&testing::clock());
            let n = Node::new(&rt, &[Source::File]);
            rt.fail(Op::List, 1, fault.clone());
            let p = Arc::new(pod("web", "u1", PROBED));
            assert_eq!(n.handler.sync_pod(&p), Outcome::Done, "{fault:?}");
            assert_eq!(rt.count(Op::Create), 0, "{fault:?}");
            assert_eq!(
                n.phase("u1"),
                None,
                "{fault:?}: no status from a failed sync"
            );
            let now = Instant::now();
            assert!(
                n.sl.queue
                    .take_due(now + SYNC_ERROR_REQUEUE - s(1))
                    .is_empty(),
                "{fault:?}"
            );
            assert_eq!(
                n.sl.queue.take_due(now + SYNC_ERROR_REQUEUE + s(1)),
                ["u1"],
                "{fault:?}"
            );
        }
    }

    #[test]
    fn a_deleted_api_pod_killed_before_any_sync_ends_failed() {
        let rt = testing::runtime(&testing::clock());
        let n = Node::new(&rt, &[Source::Api]);
        let mut p = pod("web", "u1", PROBED);
        let ann = p.metadata.annotations.get_or_insert_with(Default::default);
        ann.insert(
            crate::podconfig::CONFIG_SOURCE_ANNOTATION.into(),
            "api".into(),
        );
        p.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Pending".into()),
            ..Default::default()
        });
        n.sl.workers.update_pod(
            "u1",
            Work::Kill(Kill {
                pod: Some(Arc::new(p)),
                grace: None,
                remove: false,
            }),
        );
        n.settle();
        assert_eq!(n.phase("u1").as_deref(), Some("Failed"));
    }

    #[test]
    fn kill_pod_hands_over_to_the_pod_killer_and_releases_the_slot_when_done() {
        let rt = testing::runtime(&testing::clock());
        let mut n = Node::new(&rt, &[Source::File]);
        n.snapshot(Source::File, vec![pod("web", "u1", PROBED)]);
        assert_eq!(n.sl.probes.pods(), ["u1"]);
        // Each stop takes 2 s: the kill is still under way when the worker returns.
        rt.delay(Op::Stop, s(2));
        n.sl.workers.update_pod(
            "u1",
            Work::Kill(Kill {
                pod: None,
                grace: None,
                remove: true,
            }),
        );
        n.sl.workers.run_queued(n.handler.as_ref());
        assert!(
            n.sl.workers.is_active("u1"),
            "the slot is held while it dies"
        );
        assert!(
            n.running("u1", "a").is_some(),
            "the worker did not wait for it"
        );
        assert!(n.sl.probes.pods().is_empty(), "nothing probes a dying pod");
        n.settle();
        assert!(!n.sl.workers.is_active("u1"), "the slot is released");
        assert!(n.containers_of("u1").is_empty());
        assert_eq!(n.phase("u1"), None);
    }

    #[test]
    fn a_post_start_hook_parks_the_pod_not_the_worker_and_a_failed_one_stops_its_container() {
        let rt = testing::runtime(&testing::clock());
        let n = Node::new(&rt, &[Source::File]);
        let spec = "{terminationGracePeriodSeconds: 1, containers: [\
                    {name: a, image: 'busybox:1', lifecycle: {postStart: {exec: {command: [hook]}}}}, \
                    {name: b, image: 'busybox:1'}]}";
        // The hook takes a while, then fails (once).
        let hook = s(3);
        rt.delay(Op::Exec, hook);
        rt.fail(Op::Exec, 1, Fault::Api(500, "boom".into()));
        let began = Instant::now();
        n.sl.workers
            .update_pod("u1", Work::Sync(Arc::new(pod("web", "u1", spec))));
        n.sl.workers.run_queued(n.handler.as_ref());
        assert!(
            began.elapsed() < hook,
            "the worker did not wait for the hook"
        );
        assert!(n.sl.workers.is_active("u1"), "the pod is parked");
        let first = n.running("u1", "a").expect("a started");
        assert!(n.running("u1", "b").is_none(), "b starts after a's hook");
        n.settle();
        // The failed hook stopped `a`; the syncs after it started it again (its hook
        // succeeded) and then `b`.
        let old = rt.containers().into_iter().find(|c| c.id == first.id);
        assert_eq!(old.map(|c| c.state), Some(ContainerState::Exited));
        assert!(n.running("u1", "a").is_some_and(|a| a.id != first.id));
        assert!(n.running("u1", "b").is_some());
        assert!(!n.sl.workers.is_active("u1"));
    }

    #[test]
    fn past_the_cache_age_a_sync_lists_the_pod_and_reads_it_only_when_the_list_differs() {
        let rt = testing::runtime(&testing::clock());
        let mut n = Node::new(&rt, &[Source::File]);
        n.snapshot(
            Source::File,
            vec![pod(
                "web",
                "u1",
                "{containers: [{name: a, image: 'busybox:1'}]}",
            )],
        );
        n.relist();
        let first = n.running("u1", "a").expect("running");
        // An open event stream vouches for the PLEG's generations at any time.
        n.sl.pleg.set_stream_open(true);
        let later = Instant::now() + crate::kuberuntime::POD_CACHE_MAX_AGE;
        let m = &n.handler.manager;
        let (lists, inspects) = (rt.count(Op::List), rt.count(Op::Inspect));
        let kept = m.sync_pod_status_at("u1", later).expect("status");
        assert_eq!(rt.count(Op::List), lists + 1, "one list of the pod");
        assert_eq!(rt.count(Op::Inspect), inspects, "it agreed: nothing read");
        m.sync_pod_status_at("u1", later).expect("status");
        assert_eq!(rt.count(Op::List), lists + 1, "renewed: fresh again");
        // The container died and the PLEG missed it: the list shows it.
        rt.exit(&first.id, 1);
        let much_later = later + crate::kuberuntime::POD_CACHE_MAX_AGE;
        let read = m.sync_pod_status_at("u1", much_later).expect("status");
        assert!(rt.count(Op::Inspect) > inspects, "read again");
        let state = |p: &runtime::container::RuntimePod| {
            p.containers
                .iter()
                .find(|c| c.id == first.id)
                .map(|c| c.state)
        };
        assert_eq!(state(&kept), Some(ContainerState::Running));
        assert_eq!(state(&read), Some(ContainerState::Exited));
    }
}
