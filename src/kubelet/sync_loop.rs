//! The `sync-loop` thread (upstream `syncLoop` / `syncLoopIteration`, the `Handle*`
//! functions and `HandlePodCleanups`): one closed [`Event`] enum, one `next_event()`
//! over a `select!`, one `handle_event()`. It owns the pod manager and the PodConfig
//! merge and never calls the runtime itself: every pod's work goes to the pod workers.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use crossbeam_channel::Receiver;
use k8s_openapi::api::core::v1::Pod;

use crate::health::RuntimeHealth;
use crate::kuberuntime::BackoffGc;
use crate::metrics::KubeletMetrics;
use crate::pleg::{PlegEvent, PlegEventType, PlegShared};
use crate::pod_workers::{Kill, PodWorkers, Work, WorkQueue};
use crate::podconfig::{PodConfig, PodOp, PodUpdate, SourceUpdate};
use crate::prober::{ProbeEvent, ProbeManager};
use crate::server::readonly::PodsView;
use crate::status::manager::{PodManagerView, PodSnapshot};
use crate::status::{self, StatusCache};
use crate::volume::VolumeManager;
use base::loops::{LoopHandle, Stop};
use runtime::container::{ProbeResult, ProbeType};

use super::{HOUSEKEEPING_PERIOD, HOUSEKEEPING_WARNING, SYNC_TICK};

/// What woke the sync loop (upstream `syncLoopIteration`'s channels).
#[derive(Debug)]
pub(super) enum Event {
    Config(SourceUpdate),
    Pleg(PlegEvent),
    Probe(ProbeEvent),
    /// A pull the pod waited for has ended (the image puller names the pod).
    ImagePulled(String),
    RuntimeUp,
    SyncTick,
    Housekeeping,
    Shutdown,
}

pub(super) struct SyncLoop {
    pub(super) pod_config: PodConfig,
    /// The pod manager: desired pods by UID. Owned here only.
    pub(super) pods: HashMap<String, Arc<Pod>>,
    pub(super) view: Arc<PodsView>,
    /// The pod manager as the status manager reads it (pods with the API's copies,
    /// mirror pods).
    pub(super) manager_view: Arc<PodManagerView>,
    pub(super) workers: Arc<PodWorkers>,
    pub(super) queue: Arc<WorkQueue>,
    pub(super) pleg: Arc<PlegShared>,
    pub(super) runtime_health: Arc<RuntimeHealth>,
    pub(super) statuses: Arc<StatusCache>,
    /// Only the backoff tables: housekeeping expires their entries.
    pub(super) backoff: BackoffGc,
    pub(super) volumes: Arc<VolumeManager>,
    pub(super) sources_rx: Receiver<SourceUpdate>,
    pub(super) pleg_rx: Receiver<PlegEvent>,
    pub(super) probe_rx: Receiver<ProbeEvent>,
    pub(super) pulled_rx: Receiver<String>,
    pub(super) probes: Arc<ProbeManager>,
    pub(super) up_rx: Receiver<()>,
    pub(super) last_status_line: String,
    pub(super) metrics: Arc<KubeletMetrics>,
    /// Admission: the node's allocatable, extra checks, the pods it rejected.
    pub(super) admission: super::admit::Admission,
    /// PLEG `ContainerDied` events for container GC's per-pod pruning (pod UID,
    /// container ID); never waited for: a full channel leaves it to the next pass.
    pub(super) container_died: Option<crossbeam_channel::Sender<(String, String)>>,
}

impl SyncLoop {
    pub(super) fn run(&mut self, stop: &Stop, handle: &LoopHandle) {
        let sync_tick = crossbeam_channel::tick(SYNC_TICK);
        let housekeeping = crossbeam_channel::tick(HOUSEKEEPING_PERIOD);
        log::info!("Starting kubelet main sync loop");
        loop {
            let event = self.next_event(stop, &sync_tick, &housekeeping);
            let began = handle.begin_tick();
            if matches!(event, Event::Shutdown) {
                handle.end_tick(began, None);
                return;
            }
            self.handle_event(event);
            // Pods held back by a name conflict between sources or refused as invalid
            // stay visible (as this loop's warning on /healthz?verbose and
            // /debug/loops) while it lasts.
            let conflicts = self.pod_config.held_back();
            handle.end_tick(began, (!conflicts.is_empty()).then(|| conflicts.join("\n")));
        }
    }

    pub(super) fn next_event(
        &self,
        stop: &Stop,
        sync_tick: &Receiver<Instant>,
        housekeeping: &Receiver<Instant>,
    ) -> Event {
        // select! picks among ready arms at random; nothing here depends on the order.
        crossbeam_channel::select! {
            recv(stop.receiver()) -> _ => Event::Shutdown,
            recv(self.sources_rx) -> u => match u {
                Ok(u) => Event::Config(u),
                // Every source has stopped: only shutdown does that.
                Err(_) => Event::Shutdown,
            },
            recv(self.pleg_rx) -> e => match e {
                Ok(e) => Event::Pleg(e),
                Err(_) => Event::Shutdown,
            },
            recv(self.probe_rx) -> e => match e {
                Ok(e) => Event::Probe(e),
                Err(_) => Event::Shutdown,
            },
            recv(self.pulled_rx) -> uid => match uid {
                Ok(uid) => Event::ImagePulled(uid),
                Err(_) => Event::Shutdown,
            },
            recv(self.up_rx) -> _ => Event::RuntimeUp,
            recv(sync_tick) -> _ => Event::SyncTick,
            recv(housekeeping) -> _ => Event::Housekeeping,
        }
    }

    pub(super) fn handle_event(&mut self, event: Event) {
        match event {
            Event::Config(u) => {
                let now = base::time::rfc3339_nano(SystemTime::now());
                let mut updates = self.pod_config.merge(u, &now);
                // Drain a burst of snapshots in one iteration.
                while let Ok(u) = self.sources_rx.try_recv() {
                    updates.extend(self.pod_config.merge(u, &now));
                }
                for u in updates {
                    self.handle_update(u);
                }
                self.publish();
            }
            Event::Pleg(e) => {
                let mut events = vec![e];
                events.extend(self.pleg_rx.try_iter());
                for e in events {
                    if e.kind == PlegEventType::ContainerRemoved {
                        continue;
                    }
                    if e.kind == PlegEventType::ContainerDied {
                        if let Some(tx) = &self.container_died {
                            let _ = tx.try_send((e.pod_uid.clone(), e.container_id.clone()));
                        }
                    }
                    if let Some(pod) = self.pods.get(&e.pod_uid) {
                        self.workers.update_pod(&e.pod_uid, Work::Sync(pod.clone()));
                    }
                }
            }
            Event::Probe(e) => {
                // A changed result syncs its pod at once (upstream: liveness failures,
                // readiness and startup changes; the prober sends only those).
                let mut uids = std::collections::BTreeSet::new();
                for e in std::iter::once(e).chain(self.probe_rx.try_iter()) {
                    if e.probe_type == ProbeType::Liveness && e.result == ProbeResult::Failure {
                        log::info!(
                            "SyncLoop (probe) probe=liveness status=unhealthy pod={} container={}",
                            e.pod_uid,
                            e.container
                        );
                    }
                    uids.insert(e.pod_uid);
                }
                for uid in uids {
                    if let Some(pod) = self.pods.get(&uid) {
                        self.workers.update_pod(&uid, Work::Sync(pod.clone()));
                    }
                }
            }
            Event::ImagePulled(uid) => {
                // Synced with the pod's current spec; a worker busy with the pod runs
                // it next, so an outcome is never missed.
                let uids: std::collections::BTreeSet<String> = std::iter::once(uid)
                    .chain(self.pulled_rx.try_iter())
                    .collect();
                for uid in uids {
                    if let Some(pod) = self.pods.get(&uid) {
                        self.workers.update_pod(&uid, Work::Sync(pod.clone()));
                    }
                }
            }
            Event::RuntimeUp => {
                for (uid, pod) in &self.pods {
                    if self.admission.is_rejected(uid) {
                        continue;
                    }
                    self.workers.update_pod(uid, Work::Sync(pod.clone()));
                }
            }
            Event::SyncTick => {
                if self.runtime_health.healthy(Instant::now()).is_err() {
                    log::debug!("Skipping pod synchronization: container runtime is not up");
                    return;
                }
                let mut due = self.queue.take_due(Instant::now());
                due.extend(self.past_deadline(SystemTime::now()));
                base::sort::sort(&mut due);
                due.dedup();
                for uid in due {
                    if let Some(pod) = self.pods.get(&uid) {
                        self.workers.update_pod(&uid, Work::Sync(pod.clone()));
                    }
                }
                self.workers.requeue_stranded();
            }
            Event::Housekeeping => self.housekeeping(),
            Event::Shutdown => {}
        }
    }

    pub(super) fn handle_update(&mut self, u: PodUpdate) {
        match u.op {
            PodOp::Add | PodOp::Update | PodOp::Delete => {
                let mut pods = u.pods;
                if u.op == PodOp::Add {
                    // Upstream `HandlePodAdditions`: oldest first, each admitted against
                    // the pods admitted before it.
                    base::sort::sort_by(&mut pods, |a, b| {
                        a.metadata
                            .creation_timestamp
                            .as_ref()
                            .map(|t| t.0)
                            .cmp(&b.metadata.creation_timestamp.as_ref().map(|t| t.0))
                    });
                }
                for pod in pods {
                    let uid = pod.metadata.uid.clone().unwrap_or_default();
                    if u.op == PodOp::Add {
                        log::info!(
                            "SyncLoop ADD source={} pod={}",
                            u.source,
                            runtime::container::format_pod(&pod)
                        );
                    } else {
                        log::info!(
                            "SyncLoop UPDATE source={} pod={}",
                            u.source,
                            runtime::container::format_pod(&pod)
                        );
                    }
                    if u.op == PodOp::Add {
                        self.admission.admit(&uid, &pod, &self.pods, &self.statuses);
                    }
                    self.pods.insert(uid.clone(), pod.clone());
                    if self.admission.is_rejected(&uid) {
                        // A rejected pod never runs; its status stays Failed.
                        continue;
                    }
                    if pod.metadata.deletion_timestamp.is_some() {
                        // Gracefully deleted at its source: stop it with its grace
                        // (each container's: the deletion grace, else its spec's).
                        self.workers.update_pod(
                            &uid,
                            Work::Kill(Kill {
                                pod: Some(pod),
                                grace: None,
                                remove: false,
                            }),
                        );
                    } else {
                        self.workers.update_pod(&uid, Work::Sync(pod));
                    }
                }
            }
            PodOp::Remove => {
                for pod in u.pods {
                    let uid = pod.metadata.uid.clone().unwrap_or_default();
                    log::info!(
                        "SyncLoop REMOVE source={} pod={}",
                        u.source,
                        runtime::container::format_pod(&pod)
                    );
                    self.pods.remove(&uid);
                    self.queue.remove(&uid);
                    self.admission.forget(&uid);
                    if self.pod_config.seen_all_sources() {
                        self.workers.update_pod(
                            &uid,
                            Work::Kill(Kill {
                                pod: Some(pod),
                                grace: None,
                                remove: true,
                            }),
                        );
                    } else {
                        // Upstream refuses deletes until every source is ready;
                        // housekeeping kills the pod as an orphan once they are.
                        log::info!("skipping delete of {uid}: sources are not ready yet");
                    }
                }
            }
            PodOp::Reconcile => {
                for pod in u.pods {
                    let uid = pod.metadata.uid.clone().unwrap_or_default();
                    self.pods.insert(uid, pod);
                }
            }
        }
    }

    /// Pods whose `activeDeadlineSeconds` has passed and that are not failed yet: the
    /// sync tick syncs them, which fails and stops them (upstream: the
    /// `activeDeadlineHandler`'s `ShouldSync` in `getPodsToSync`).
    pub(super) fn past_deadline(&self, now: SystemTime) -> Vec<String> {
        self.pods
            .iter()
            // Most pods have no deadline: no status lookup for them, every second.
            .filter(|(_, pod)| {
                pod.spec
                    .as_ref()
                    .and_then(|s| s.active_deadline_seconds)
                    .is_some()
            })
            .filter(|(uid, pod)| {
                let Some(st) = self.statuses.get(uid) else {
                    return false;
                };
                !status::is_terminal_phase(st.phase.as_deref())
                    && status::past_active_deadline(pod, status::start_time(&st), now)
            })
            .map(|(uid, _)| uid.clone())
            .collect()
    }

    pub(super) fn publish(&self) {
        let mut pods: Vec<Arc<Pod>> = self.pods.values().cloned().collect();
        base::sort::sort_by(&mut pods, |a, b| {
            (&a.metadata.namespace, &a.metadata.name)
                .cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        // Upstream's pod manager sets `kubelet_desired_pods` when its pods change.
        let statics = pods
            .iter()
            .filter(|p| runtime::container::is_static_pod(p))
            .count();
        let m = &self.metrics.desired_pods;
        m.set(["true"], statics as f64);
        m.set(["false"], (pods.len() - statics) as f64);
        self.manager_view.publish(PodSnapshot {
            pods: pods.clone(),
            mirrors: self.pod_config.mirror_pods().to_vec(),
            sources_ready: self.pod_config.seen_all_sources(),
        });
        self.view.publish(pods);
    }

    /// Upstream `HandlePodCleanups`: kill runtime pods that no source wants (orphans),
    /// forget statuses of pods that are gone, expire backoff entries. Skipped until
    /// every source has sent its first snapshot, so a restart never kills pods whose
    /// source has not spoken yet.
    pub(super) fn housekeeping(&mut self) {
        if !self.pod_config.seen_all_sources() {
            log::debug!(
                "housekeeping skipped: sources not ready: {:?}",
                self.pod_config.sources_not_ready()
            );
            return;
        }
        let began = Instant::now();
        for (uid, info) in self.pleg.runtime_pods().iter() {
            if self.pods.contains_key(uid) || self.workers.is_active(uid) {
                continue;
            }
            log::info!("killing orphaned pod {} ({uid})", info.full_name);
            self.workers.update_pod(
                uid,
                Work::Kill(Kill {
                    pod: None,
                    // From a Docker label: any i64, negative or huge.
                    grace: Some(base::time::secs(info.grace_seconds)),
                    remove: true,
                }),
            );
        }
        self.probes
            .cleanup_pods(&|uid| self.pods.contains_key(uid) || self.workers.is_active(uid));
        for uid in self.statuses.uids() {
            if !self.pods.contains_key(&uid) && !self.workers.is_active(&uid) {
                self.statuses.remove(&uid);
            }
        }
        self.backoff.gc();
        // Only now (every source seen) may pod directories of other pods go.
        self.volumes
            .set_desired_pods(self.pods.keys().map(String::as_str));
        self.status_line();
        // What a burst of syncs freed (decodes, Docker answers), back to the kernel.
        base::malloc::release_freed_memory_every(base::malloc::TRIM_PERIOD);
        if began.elapsed() > HOUSEKEEPING_WARNING {
            log::warn!(
                "Housekeeping took longer than expected: {:?}",
                began.elapsed()
            );
        }
    }

    /// Tells systemd (if it is listening) how many pods run, when that changes.
    pub(super) fn status_line(&mut self) {
        let running = self
            .pods
            .keys()
            .filter_map(|u| self.statuses.get(u))
            .filter(|s| s.phase.as_deref() == Some("Running"))
            .count();
        let line = format!("{} pods, {} running", self.pods.len(), running);
        if line != self.last_status_line {
            crate::systemd::notify(&format!("STATUS={line}"));
            self.last_status_line = line;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::testing::{self, pod, Node};
    use super::*;
    use crate::podconfig::Source;
    use runtime::fake::{Fault, Op};
    use runtime::ContainerState;

    const TWO: &str =
        "{containers: [{name: a, image: 'busybox:1'}, {name: b, image: 'busybox:1'}]}";
    const ONE: &str = "{containers: [{name: a, image: 'busybox:1'}]}";

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn a_source_add_reaches_the_pod_workers_and_the_pod_runs() {
        let rt = testing::runtime(&testing::clock());
        let mut n = Node::new(&rt, &[Source::File]);
        n.snapshot(Source::File, vec![pod("web", "u1", TWO)]);
        for name in ["POD", "a", "b"] {
            assert!(n.running("u1", name).is_some(), "{name} runs");
        }
        assert_eq!(rt.count(Op::Create), 3);
        assert_eq!(n.phase("u1").as_deref(), Some("Running"));
    }

    #[test]
    fn a_started_pod_shows_in_the_metrics() {
        let rt = testing::runtime(&testing::clock());
        let mut n = Node::new(&rt, &[Source::File]);
        n.snapshot(Source::File, vec![pod("web", "u1", TWO)]);
        n.relist();
        let m = n.sl.metrics.clone();
        assert_eq!(m.desired_pods.get(["true"]), 1.0, "a file pod is static");
        assert_eq!(m.desired_pods.get(["false"]), 0.0);
        assert_eq!(m.started_pods.get([]), 1);
        assert_eq!(m.started_containers.get(["container"]), 2);
        assert_eq!(m.pod_start_duration.count([]), 1);
        assert_eq!(m.pod_worker_duration.count(["create"]), 1);
        assert_eq!(m.running_pods.get([]), 1.0);
        assert_eq!(m.running_containers.get(["running"]), 2.0);
        assert_eq!(m.running_containers.get(["exited"]), 0.0);
        assert_eq!(m.pleg_relist_duration.count([]), 1);
        assert!(m.pleg_last_seen.get([]) > 1e9, "a Unix time");
        assert!(m.runtime_operations.get(["run_podsandbox"]) >= 1);
        assert!(m.runtime_operations.get(["create_container"]) >= 2);
        assert_eq!(m.node_name.get([testing::NODE]), 1.0);
        let runtime_pods = n.sl.pleg.runtime_pods();
        let info = runtime_pods.get("u1").expect("the PLEG saw the pod");
        assert_eq!(
            (info.name.as_str(), info.namespace.as_str()),
            ("web-node1", "default")
        );
        assert_eq!(
            info.running_containers,
            [
                ("a".to_string(), testing::IMAGE.to_string()),
                ("b".to_string(), testing::IMAGE.to_string())
            ]
        );
    }

    #[test]
    fn a_container_that_cannot_start_counts_as_a_start_error_with_its_reason() {
        let rt = testing::runtime(&testing::clock());
        rt.exit_on_start("i", 0);
        let mut n = Node::new(&rt, &[Source::File]);
        let spec = "{initContainers: [{name: i, image: 'busybox:1'}], \
                    containers: [{name: a, image: 'absent:1', imagePullPolicy: Never}]}";
        n.snapshot(Source::File, vec![pod("web", "u1", spec)]);
        let m = n.sl.metrics.clone();
        assert_eq!(m.started_containers.get(["init_container"]), 1);
        // The init container has exited 0; its death syncs the pod, which tries the app.
        n.relist();
        assert!(m.started_containers.get(["container"]) >= 1);
        assert_eq!(
            m.started_containers_errors
                .get(["ErrImageNeverPull", "container"]),
            m.started_containers.get(["container"]),
            "every attempt failed with its waiting reason"
        );
    }

    #[test]
    fn a_dead_container_is_named_to_container_gc_without_waiting() {
        let rt = testing::runtime(&testing::clock());
        rt.exit_on_start("a", 1);
        let mut n = Node::new(&rt, &[Source::File]);
        let (tx, rx) = crossbeam_channel::bounded(1);
        n.sl.container_died = Some(tx);
        n.snapshot(Source::File, vec![pod("web", "u1", ONE)]);
        n.relist();
        let (uid, id) = rx.try_recv().expect("a ContainerDied for container GC");
        assert_eq!(uid, "u1");
        // The instance that died (its death synced the pod, which may have restarted it).
        assert!(n.instances("u1", "a").iter().any(|c| c.id == id));
        // A full channel is never waited for.
        n.relist();
    }

    #[test]
    fn an_update_of_one_container_replaces_only_that_container() {
        let rt = testing::runtime(&testing::clock());
        let mut n = Node::new(&rt, &[Source::File]);
        n.snapshot(Source::File, vec![pod("web", "u1", TWO)]);
        let before: Vec<_> = ["POD", "a", "b"]
            .map(|c| n.running("u1", c).expect("running").id)
            .into();
        let changed = "{containers: [{name: a, image: 'busybox:1'}, \
                       {name: b, image: 'busybox:1', command: [sleep, '3600']}]}";
        n.snapshot(Source::File, vec![pod("web", "u1", changed)]);
        n.relist();
        assert_eq!(
            n.running("u1", "POD").map(|c| c.id).as_ref(),
            Some(&before[0])
        );
        assert_eq!(
            n.running("u1", "a").map(|c| c.id).as_ref(),
            Some(&before[1])
        );
        let b = n.running("u1", "b").expect("b runs again");
        assert_ne!(b.id, before[2], "b was replaced");
        assert_eq!(rt.count(Op::Create), 4, "one new container, nothing else");
        assert_eq!(rt.count(Op::Stop), 1, "only the old b was stopped");
    }

    #[test]
    fn a_remove_kills_the_pod_and_forgets_it() {
        let rt = testing::runtime(&testing::clock());
        let mut n = Node::new(&rt, &[Source::File]);
        n.snapshot(
            Source::File,
            vec![pod("web", "u1", TWO), pod("db", "u2", ONE)],
        );
        assert_eq!(rt.containers().len(), 5);
        n.snapshot(Source::File, vec![pod("db", "u2", ONE)]);
        assert!(n.containers_of("u1").is_empty(), "u1's containers removed");
        assert_eq!(n.phase("u1"), None, "u1's status forgotten");
        assert!(n.running("u2", "a").is_some(), "u2 untouched");
    }

    #[test]
    fn a_dead_container_restarts_at_once_then_only_after_its_backoff() {
        // The first death restarts at once (no backoff yet) and starts a 10 s backoff.
        // The second is judged by its finishedAt on the fake clock: one 15 s before
        // now is out of it and restarts; one 5 s before now is not, and the pod is
        // requeued for when the backoff ends.
        for (second_death_ago, restarts) in [(15, true), (5, false)] {
            let clock = testing::clock(); // 60 s behind the real clock
            let rt = testing::runtime(&clock);
            let mut n = Node::new(&rt, &[Source::File]);
            n.snapshot(Source::File, vec![pod("web", "u1", ONE)]);
            n.relist();
            let first = n.running("u1", "a").expect("a runs");
            rt.exit(&first.id, 1);
            n.relist();
            let second = n.running("u1", "a").expect("restarted at once");
            assert_ne!(second.id, first.id);
            // Measured from the real clock at the death, so a slow machine cannot
            // eat the margin before the sync looks at it.
            let ago = SystemTime::now() - s(second_death_ago);
            clock.advance(ago.duration_since(clock.now()).unwrap_or_default());
            rt.exit(&second.id, 1);
            n.relist();
            let creates = rt.count(Op::Create);
            match n.running("u1", "a") {
                Some(third) => {
                    assert!(restarts, "restarted inside its backoff");
                    assert_ne!(third.id, second.id);
                    assert_eq!(creates, 4);
                }
                None => {
                    assert!(!restarts, "not restarted after its backoff");
                    assert_eq!(creates, 3);
                    let st = n.sl.statuses.get("u1").expect("status");
                    let waiting = st
                        .container_statuses
                        .as_ref()
                        .and_then(|cs| cs[0].state.as_ref()?.waiting.as_ref()?.reason.clone());
                    assert_eq!(waiting.as_deref(), Some("CrashLoopBackOff"));
                    // Requeued for when the backoff ends (~5 s), not the resync period.
                    let now = Instant::now();
                    assert!(n.sl.queue.take_due(now + s(3)).is_empty());
                    assert_eq!(n.sl.queue.take_due(now + s(7)), ["u1"]);
                }
            }
        }
    }

    #[test]
    fn a_kubelet_killed_between_create_and_start_leaves_no_extra_restart() {
        use runtime::container::labels;
        let rt = testing::runtime(&testing::clock());
        let mut n = Node::new(&rt, &[Source::File]);
        n.snapshot(Source::File, vec![pod("web", "u1", ONE)]);
        let first = n.running("u1", "a").expect("a runs");
        // An edit restarts `a` (restart 1); the kubelet dies after the create, before
        // the start: the runtime answers nothing more to it.
        let edited = "{containers: [{name: a, image: 'busybox:1', command: [sleep, '3600']}]}";
        rt.fail(Op::Start, 1, Fault::Unavailable);
        n.snapshot(Source::File, vec![pod("web", "u1", edited)]);
        let created = n.instances("u1", "a");
        assert_eq!(created.len(), 2, "{created:?}");
        assert_eq!(created[0].state, ContainerState::Created);
        assert_eq!(labels::restart_count(&created[0].labels), 1);
        drop(n);
        // The next kubelet: one edit, so one restart, and the instance that never ran
        // is gone; the one that ran stays for lastState and `logs --previous`.
        let mut n = Node::new(&rt, &[Source::File]);
        n.snapshot(Source::File, vec![pod("web", "u1", edited)]);
        let now = n.running("u1", "a").expect("a runs again");
        assert_eq!(
            labels::restart_count(&now.labels),
            1,
            "one edit, one restart"
        );
        let ids: Vec<String> = n.instances("u1", "a").into_iter().map(|c| c.id).collect();
        assert_eq!(ids, [now.id.clone(), first.id.clone()]);
        let st = n.sl.statuses.get("u1").expect("status");
        let cs = st.container_statuses.as_ref().expect("container statuses");
        assert_eq!(cs[0].restart_count, 1);
        assert!(cs[0]
            .last_state
            .as_ref()
            .is_some_and(|l| l.terminated.is_some()));
    }

    #[test]
    fn a_liveness_failure_from_the_prober_restarts_the_container() {
        let rt = testing::runtime(&testing::clock());
        let mut n = Node::new(&rt, &[Source::File]);
        let spec = "{containers: [{name: a, image: 'busybox:1', livenessProbe: \
                    {exec: {command: [check]}, periodSeconds: 1, failureThreshold: 1}}]}";
        n.snapshot(Source::File, vec![pod("web", "u1", spec)]);
        let first = n.running("u1", "a").expect("a runs");
        rt.set_exec_result(
            &first.id,
            runtime::ExecResult {
                exit_code: 1,
                stdout: Vec::new(),
                stderr: Vec::new(),
            },
        );
        // The prober thread probes, fails, and tells the sync loop.
        let e =
            n.sl.probe_rx
                .recv_timeout(s(10))
                .expect("a probe event within 10 s");
        assert_eq!(
            (e.probe_type, e.result),
            (ProbeType::Liveness, ProbeResult::Failure)
        );
        n.handle(Event::Probe(e));
        let old = rt.containers().into_iter().find(|c| c.id == first.id);
        assert_eq!(old.map(|c| c.state), Some(ContainerState::Exited));
        let second = n.running("u1", "a").expect("a restarted");
        assert_ne!(second.id, first.id);
    }

    #[test]
    fn a_pod_past_its_active_deadline_is_killed_and_fails() {
        let rt = testing::runtime(&testing::clock());
        let mut n = Node::new(&rt, &[Source::File]);
        let spec = "{activeDeadlineSeconds: 30, containers: [{name: a, image: 'busybox:1'}]}";
        n.snapshot(Source::File, vec![pod("job", "u1", spec)]);
        assert!(n.running("u1", "a").is_some());
        // It started an hour ago (as a kubelet restart would find it).
        let mut st = (*n.sl.statuses.get("u1").expect("status")).clone();
        st.start_time = Some(base::time::k8s_time(SystemTime::now() - s(3600)));
        n.sl.statuses.set("u1", st);
        n.handle(Event::SyncTick);
        assert!(n.running("u1", "a").is_none(), "a stopped");
        assert!(n.running("u1", "POD").is_none(), "sandbox stopped");
        // The pod killer requeued it: the next tick writes the final status.
        n.handle(Event::SyncTick);
        let st = n.sl.statuses.get("u1").expect("status");
        assert_eq!(st.phase.as_deref(), Some("Failed"));
        assert_eq!(st.reason.as_deref(), Some("DeadlineExceeded"));
        assert!(n.running("u1", "a").is_none(), "not started again");
    }

    #[test]
    fn housekeeping_kills_orphans_only_after_every_source_is_ready() {
        let rt = testing::runtime(&testing::clock());
        // A kubelet ran pod u-old from its file source, then stopped.
        {
            let mut first = Node::new(&rt, &[Source::File]);
            first.snapshot(Source::File, vec![pod("old", "u-old", ONE)]);
        }
        assert_eq!(rt.containers().len(), 2);
        // The new one has two sources; the file no longer holds the pod.
        let mut n = Node::new(&rt, &[Source::File, Source::Api]);
        n.relist();
        n.snapshot(Source::File, vec![]);
        n.handle(Event::Housekeeping);
        assert!(n.sl.workers.idle());
        assert_eq!(rt.count(Op::Stop), 0, "the api source has not spoken yet");
        assert!(n.running("u-old", "a").is_some());
        n.snapshot(Source::Api, vec![]);
        n.handle(Event::Housekeeping);
        assert!(n.containers_of("u-old").is_empty(), "the orphan is gone");
    }

    #[test]
    fn a_mirror_pod_from_the_api_is_never_run_and_is_published_apart() {
        let rt = testing::runtime(&testing::clock());
        let mut n = Node::new(&rt, &[Source::File, Source::Api]);
        let static_pod = pod("web", "u1", ONE);
        n.snapshot(Source::File, vec![static_pod.clone()]);
        let mut mirror = static_pod.clone();
        mirror.metadata.uid = Some("m1".into());
        let mut ann = mirror.metadata.annotations.clone().unwrap_or_default();
        ann.insert(
            crate::podconfig::CONFIG_MIRROR_ANNOTATION.into(),
            "u1".into(),
        );
        ann.insert(
            crate::podconfig::CONFIG_SOURCE_ANNOTATION.into(),
            "api".into(),
        );
        mirror.metadata.annotations = Some(ann);
        n.snapshot(Source::Api, vec![mirror]);
        assert!(n.containers_of("m1").is_empty(), "the mirror never runs");
        assert!(n.running("u1", "a").is_some(), "the static pod runs");
        let snap = n.sl.manager_view.get();
        assert!(snap.sources_ready);
        let uids = |pods: &[Arc<Pod>]| -> Vec<String> {
            pods.iter().filter_map(|p| p.metadata.uid.clone()).collect()
        };
        assert_eq!(uids(&snap.pods), ["u1"]);
        assert_eq!(uids(&snap.mirrors), ["m1"]);
        assert!(n.sl.pod_config.held_back().is_empty(), "no name conflict");
    }

    #[test]
    fn a_resync_reads_the_runtime_only_after_the_pleg_saw_the_pod_change() {
        use crate::pod_workers::PodSyncer;
        let rt = testing::runtime(&testing::clock());
        let mut n = Node::new(&rt, &[Source::File]);
        n.snapshot(Source::File, vec![pod("web", "u1", ONE)]);
        // The PLEG sees the new containers: the sync it starts reads them.
        n.relist();
        let first = n.running("u1", "a").expect("running");
        let pod = n.sl.manager_view.get().pods[0].clone();
        let reads = || rt.count(Op::List) + rt.count(Op::Inspect);
        let before = reads();
        n.handler.sync_pod(&pod);
        n.handler.sync_pod(&pod);
        assert_eq!(reads(), before, "resyncs of an unchanged pod read nothing");
        // The container dies; once the PLEG has seen it, the sync reads and restarts.
        rt.exit(&first.id, 1);
        n.relist();
        assert!(reads() > before);
        let second = n.running("u1", "a").expect("restarted");
        assert_ne!(second.id, first.id);
        assert_eq!(runtime::container::labels::restart_count(&second.labels), 1);
    }

    #[test]
    fn runtime_up_resyncs_every_pod() {
        let rt = testing::runtime(&testing::clock());
        let mut n = Node::new(&rt, &[Source::File]);
        // The runtime goes away just as two pods arrive: each sync fails.
        rt.fail(Op::List, 2, Fault::Unavailable);
        n.snapshot(
            Source::File,
            vec![pod("web", "u1", ONE), pod("db", "u2", ONE)],
        );
        assert_eq!(rt.count(Op::Create), 0);
        // It is back: both pods start now, not after the error requeue.
        n.handle(Event::RuntimeUp);
        assert!(n.running("u1", "a").is_some());
        assert!(n.running("u2", "a").is_some());
    }
}
