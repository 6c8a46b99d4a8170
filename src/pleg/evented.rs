//! The evented PLEG (upstream `EventedPLEG`, `pkg/kubelet/pleg/evented.go`, on Docker's
//! `/events` instead of CRI's `GetContainerEvents`): the `pleg-events` thread reads one
//! long-lived event stream of this node's containers and wakes the `pleg` thread, which
//! relists the pod concerned at once; while the stream is open the full relist runs every
//! 5 minutes as a safety net, and every second again while it is broken.
//!
//! The shape, and why: an event never becomes a [`PlegEvent`] by itself. It names a pod
//! ([`hint_of`], pure), and the `pleg` thread lists that pod's containers and diffs them
//! against what it saw ([`Pleg::update_pods`]), with the same [`compute_events`] as a
//! relist. So the sync loop sees exactly the event sequence a relist would have given
//! (ContainerDied before ContainerRemoved, no ContainerStarted for a created container,
//! nothing twice when Docker replays an event after a reconnect), the PLEG's record can
//! never disagree with a relist, and only the `pleg` thread touches that record: the
//! event thread holds no PLEG state, let alone a lock, across its blocking read. The cost
//! is one filtered list call (a few milliseconds) per burst of events of a pod.
//!
//! The stream is resumed with `since=` the last event's `timeNano`, so nothing Docker
//! still buffers is missed, and every (re)connect is followed by one full relist at once,
//! for whatever it no longer buffers. A burst cannot grow memory: the wake channel holds
//! [`CHANNEL_CAPACITY`](super::CHANNEL_CAPACITY) wakes, and one that does not fit asks for a full relist instead.
//!
//! Upstream falls back to the generic PLEG for good after 5 failed connections; rkubelet
//! keeps reconnecting (backoff up to [`BACKOFF_MAX`]) and relists every second until it
//! has, because a Docker restart is the usual cause and ends.
//!
//! [`PlegEvent`]: super::PlegEvent
//! [`compute_events`]: super::compute_events

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{Receiver, TrySendError};

use super::{Pleg, PlegEventType, PlegShared};
use crate::container::labels;
use crate::loops::{error_chain, LoopHandle, Stop};
use crate::metrics::kubelet::KubeletMetrics;
use crate::runtime::{EventFilter, EventItem, Runtime, RuntimeError, RuntimeEvent};

/// Upstream `eventedPlegRelistPeriod`: the full relist while events flow.
pub const RELIST_PERIOD: Duration = Duration::from_secs(300);
/// Upstream `eventedPlegRelistThreshold`: the PLEG is unhealthy past this without a
/// relist while events flow.
pub const RELIST_THRESHOLD: Duration = Duration::from_secs(600);
/// The Docker actions the PLEG reacts to: the ones that change what a relist sees
/// (`create`: a created container; `start`/`die`: running or not; `destroy`: gone) and
/// `oom` (the `die` that follows carries the news; `oom` may come first).
pub const ACTIONS: [&str; 5] = ["create", "start", "die", "destroy", "oom"];
/// The first wait before reconnecting a broken stream: short, since a relist every
/// second covers the gap anyway and most breaks (a proxy, a timeout) heal at once.
pub const BACKOFF_INITIAL: Duration = Duration::from_millis(100);
/// The longest wait between reconnections: a restarting Docker takes seconds, and the
/// 1 s relists run meanwhile, so a slower retry only delays the return to 5 min relists.
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// What an event says about a pod: which one, which container, and the PLEG event it
/// implies, if any (`create` and `oom` imply none by themselves).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventHint {
    /// The pod's UID, from the container's labels in the event's `Actor.Attributes`.
    pub pod_uid: String,
    /// The container's ID.
    pub container_id: String,
    /// The lifecycle event it implies.
    pub kind: Option<PlegEventType>,
}

/// The event → PLEG mapping (upstream `processCRIEvent`): `start` → ContainerStarted,
/// `die` → ContainerDied, `destroy` → ContainerRemoved, `create` and `oom` → a look at
/// the pod without an event of their own. None for a container without a pod UID (not
/// the kubelet's) and for other actions.
pub fn hint_of(ev: &RuntimeEvent) -> Option<EventHint> {
    let kind = match ev.action.as_str() {
        "start" => Some(PlegEventType::ContainerStarted),
        "die" => Some(PlegEventType::ContainerDied),
        "destroy" => Some(PlegEventType::ContainerRemoved),
        "create" | "oom" => None,
        _ => return None,
    };
    let pod_uid = ev.labels.get(labels::POD_UID).filter(|u| !u.is_empty())?;
    Some(EventHint {
        pod_uid: pod_uid.clone(),
        container_id: ev.id.clone(),
        kind,
    })
}

/// What wakes the `pleg` thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wake {
    /// An event of this container of this pod: relist the pod, inspect the container.
    Container {
        /// The pod's UID.
        pod_uid: String,
        /// The container's ID.
        id: String,
    },
    /// The stream (re)opened: relist everything now, for what it may have missed.
    StreamOpened,
    /// The stream broke: the relist period is 1 s again.
    StreamBroken,
}

/// The event thread's side of the wake channel.
#[derive(Clone, Debug)]
pub struct WakeSender {
    tx: crate::chan::BoundedSender<Wake>,
    overflow: Arc<AtomicBool>,
}

/// The `pleg` thread's side of the wake channel.
#[derive(Debug)]
pub struct WakeReceiver {
    rx: Receiver<Wake>,
    overflow: Arc<AtomicBool>,
}

/// A wake channel holding `capacity` wakes (the PLEG's channel capacity in the kubelet).
pub fn wake_channel(capacity: usize) -> (WakeSender, WakeReceiver) {
    let (tx, rx) = crate::chan::bounded(capacity);
    let overflow = Arc::new(AtomicBool::new(false));
    (
        WakeSender {
            tx,
            overflow: overflow.clone(),
        },
        WakeReceiver { rx, overflow },
    )
}

impl WakeSender {
    /// Sends without blocking. A full channel turns into a request for a full relist,
    /// which covers whatever the dropped wake was about.
    pub fn send(&self, w: Wake) {
        match self.tx.try_send(w) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => {}
            Err(TrySendError::Full(_)) => {
                if !self.overflow.swap(true, Ordering::SeqCst) {
                    log::warn!("pleg: wake channel full; a full relist will follow");
                }
            }
        }
    }
}

impl WakeReceiver {
    /// Moves every queued wake (and an overflow) into `schedule` without blocking.
    pub fn drain_into(&self, schedule: &mut Schedule) {
        for w in self.rx.try_iter() {
            schedule.absorb(w);
        }
        if self.overflow.swap(false, Ordering::SeqCst) {
            schedule.relist_now = true;
        }
    }
}

/// What the `pleg` thread does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// A full relist.
    Relist,
    /// A targeted relist of these pods, inspecting these containers of theirs.
    UpdatePods(BTreeMap<String, BTreeSet<String>>),
    /// Nothing until a wake, or for this long.
    Wait(Duration),
}

/// When the `pleg` thread relists what: the pure part of its loop, with `now` and the
/// period passed in.
#[derive(Debug)]
pub struct Schedule {
    last_attempt: Option<Instant>,
    relist_now: bool,
    pods: BTreeMap<String, BTreeSet<String>>,
}

impl Default for Schedule {
    fn default() -> Self {
        Self::new()
    }
}

impl Schedule {
    /// A schedule whose first action is a relist.
    pub fn new() -> Self {
        Schedule {
            last_attempt: None,
            relist_now: true,
            pods: BTreeMap::new(),
        }
    }

    /// Takes one wake into account.
    pub fn absorb(&mut self, w: Wake) {
        match w {
            Wake::Container { pod_uid, id } => {
                self.pods.entry(pod_uid).or_default().insert(id);
            }
            Wake::StreamOpened => self.relist_now = true,
            // The period the caller passes shrinks to 1 s; nothing else to do.
            Wake::StreamBroken => {}
        }
    }

    /// A targeted relist failed: a full one follows at once (if Docker is down it fails
    /// too, and then the period paces the retries).
    pub fn update_failed(&mut self) {
        self.relist_now = true;
    }

    /// The next action at `now` with the full relist's current `period`. A full relist
    /// covers every pod waiting for a targeted one.
    pub fn next(&mut self, now: Instant, period: Duration) -> Action {
        let due = match self.last_attempt {
            None => true,
            Some(t) => now >= t + period,
        };
        if self.relist_now || due {
            self.relist_now = false;
            self.pods.clear();
            self.last_attempt = Some(now);
            return Action::Relist;
        }
        if !self.pods.is_empty() {
            return Action::UpdatePods(std::mem::take(&mut self.pods));
        }
        let next = self.last_attempt.map_or(now, |t| t + period);
        Action::Wait(next.saturating_duration_since(now))
    }
}

/// The `pleg` thread: relists on its schedule, relists pods it is woken for, until
/// shutdown. Each relist or targeted relist is one tick in the loop registry. Borrows
/// the PLEG, so a run again after a panic goes on with what it had seen (and relists
/// at once, as a new schedule does).
pub fn run_pleg(pleg: &mut Pleg, wakes: &WakeReceiver, stop: &Stop, handle: &LoopHandle) {
    let mut schedule = Schedule::new();
    let mut rx = wakes.rx.clone();
    loop {
        wakes.drain_into(&mut schedule);
        let (period, _) = pleg.shared().relist_timing();
        match schedule.next(Instant::now(), period) {
            Action::Relist => {
                let began = handle.begin_tick();
                let err = pleg.relist().err().map(|e| error_chain(&e));
                handle.end_tick(began, err);
            }
            Action::UpdatePods(uids) => {
                let began = handle.begin_tick();
                let r = pleg.update_pods(&uids);
                if r.is_err() {
                    schedule.update_failed();
                }
                handle.end_tick(began, r.err().map(|e| error_chain(&e)));
            }
            Action::Wait(d) => {
                crossbeam_channel::select! {
                    recv(stop.receiver()) -> _ => return,
                    recv(rx) -> w => match w {
                        Ok(w) => schedule.absorb(w),
                        // The event thread is gone (shutdown): the period alone paces.
                        Err(_) => rx = crossbeam_channel::never(),
                    },
                    default(d) => {}
                }
            }
        }
        if stop.is_stopped() {
            return;
        }
    }
}

/// The `pleg-events` component: one event stream at a time, and what it learnt.
#[derive(Debug)]
pub struct EventWatcher {
    runtime: Arc<dyn Runtime>,
    filter: EventFilter,
    shared: Arc<PlegShared>,
    wake: WakeSender,
    metrics: Arc<KubeletMetrics>,
}

impl EventWatcher {
    /// A watcher of the containers matching `node_filter` (the PLEG's own label
    /// filter), waking the PLEG through `wake`. Marks the PLEG evented.
    pub fn new(
        runtime: Arc<dyn Runtime>,
        node_filter: &[String],
        shared: Arc<PlegShared>,
        wake: WakeSender,
        metrics: Arc<KubeletMetrics>,
    ) -> Self {
        shared.set_evented();
        EventWatcher {
            runtime,
            filter: EventFilter {
                labels: node_filter.to_vec(),
                actions: ACTIONS.iter().map(|a| a.to_string()).collect(),
                since: None,
            },
            shared,
            wake,
            metrics,
        }
    }

    /// When the next connection resumes from: the last event's time.
    pub fn since(&self) -> Option<SystemTime> {
        self.filter.since
    }

    /// One connection: opens the stream (from the last event's time), wakes the PLEG
    /// for each event, until the stream ends (an error, or Ok at shutdown). Returns
    /// whether the stream opened, beside the outcome. `on_activity` is called once per
    /// item (the loop registry's tick).
    pub fn watch_once(
        &mut self,
        should_stop: &dyn Fn() -> bool,
        on_activity: &mut dyn FnMut(),
    ) -> (bool, Result<(), RuntimeError>) {
        let mut opened = false;
        let filter = self.filter.clone();
        let (shared, wake, metrics) = (&self.shared, &self.wake, &self.metrics);
        let mut since = self.filter.since;
        let r = self.runtime.watch_events(
            &filter,
            &mut |item| {
                on_activity();
                match item {
                    EventItem::Opened => {
                        opened = true;
                        shared.set_stream_open(true);
                        metrics.evented_pleg_conn.inc([]);
                        log::info!(
                            "pleg: runtime event stream open (relist every {RELIST_PERIOD:?})"
                        );
                        wake.send(Wake::StreamOpened);
                    }
                    EventItem::Event(ev) => {
                        since = Some(since.map_or(ev.time, |s| s.max(ev.time)));
                        if let Ok(late) = SystemTime::now().duration_since(ev.time) {
                            metrics
                                .evented_pleg_conn_latency
                                .observe([], late.as_secs_f64());
                        }
                        if let Some(h) = hint_of(&ev) {
                            log::debug!(
                                "pleg: event {} of {} in pod {}",
                                ev.action,
                                crate::container::short(&h.container_id),
                                h.pod_uid
                            );
                            wake.send(Wake::Container {
                                pod_uid: h.pod_uid,
                                id: h.container_id,
                            });
                        }
                    }
                }
                true
            },
            should_stop,
        );
        self.filter.since = since;
        if !should_stop() {
            self.shared.set_stream_open(false);
            self.metrics.evented_pleg_conn_err.inc([]);
            self.wake.send(Wake::StreamBroken);
        }
        (opened, r)
    }

    /// The `pleg-events` thread: connects, reads, and reconnects with backoff (reset by
    /// every connection that opened) until shutdown.
    pub fn run(&mut self, stop: &Stop, handle: &LoopHandle) {
        let mut backoff = BACKOFF_INITIAL;
        loop {
            let (opened, r) = self.watch_once(&|| stop.is_stopped(), &mut || {
                let began = handle.begin_tick();
                handle.end_tick(began, None);
            });
            if stop.is_stopped() {
                self.shared.set_stream_open(false);
                return;
            }
            if opened {
                backoff = BACKOFF_INITIAL;
            }
            let why = match r {
                Ok(()) => "the runtime ended the event stream".to_string(),
                Err(e) => error_chain(&e),
            };
            let began = handle.begin_tick();
            handle.end_tick(
                began,
                Some(format!(
                    "{why}; relisting every {:?}, reconnecting in {backoff:?}",
                    super::RELIST_PERIOD
                )),
            );
            if stop.sleep(backoff) {
                return;
            }
            if !opened {
                backoff = backoff.saturating_mul(2).min(BACKOFF_MAX);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pleg::{PlegEvent, CHANNEL_CAPACITY, FRESH_RELIST};
    use crate::runtime::fake::{FakeClock, FakeRuntime, Op};
    use crate::runtime::ContainerConfig;
    use std::time::UNIX_EPOCH;

    const NODE: &str = "n1";

    fn event(action: &str, id: &str, uid: &str, secs: u64) -> RuntimeEvent {
        let mut labels = BTreeMap::new();
        if !uid.is_empty() {
            labels.insert(labels::POD_UID.to_string(), uid.to_string());
        }
        RuntimeEvent {
            id: id.into(),
            action: action.into(),
            labels,
            time: UNIX_EPOCH + Duration::new(secs, 123_456_789),
        }
    }

    fn wake_of(uid: &str, id: &str) -> Wake {
        Wake::Container {
            pod_uid: uid.into(),
            id: id.into(),
        }
    }

    #[test]
    fn docker_actions_map_to_pleg_events_of_the_pod_in_the_labels() {
        use PlegEventType::*;
        for (action, kind) in [
            ("start", Some(ContainerStarted)),
            ("die", Some(ContainerDied)),
            ("destroy", Some(ContainerRemoved)),
            ("create", None),
            ("oom", None),
        ] {
            assert_eq!(
                hint_of(&event(action, "c1", "uid-1", 1)),
                Some(EventHint {
                    pod_uid: "uid-1".into(),
                    container_id: "c1".into(),
                    kind,
                }),
                "{action}"
            );
        }
        assert_eq!(hint_of(&event("exec_start: sh", "c1", "uid-1", 1)), None);
        assert_eq!(hint_of(&event("die", "c1", "", 1)), None, "not a pod's");
    }

    #[test]
    fn schedule_relists_first_then_pods_then_on_the_period() {
        let t0 = Instant::now();
        let p = Duration::from_secs(300);
        let mut s = Schedule::new();
        assert_eq!(s.next(t0, p), Action::Relist);
        assert_eq!(s.next(t0, p), Action::Wait(p));
        s.absorb(wake_of("b", "c2"));
        s.absorb(wake_of("a", "c1"));
        s.absorb(wake_of("a", "c3"));
        assert_eq!(
            s.next(t0 + Duration::from_secs(1), p),
            Action::UpdatePods(
                [
                    ("a".to_string(), ["c1".to_string(), "c3".to_string()].into()),
                    ("b".to_string(), ["c2".to_string()].into())
                ]
                .into()
            )
        );
        assert_eq!(
            s.next(t0 + Duration::from_secs(1), p),
            Action::Wait(Duration::from_secs(299))
        );
        // A full relist due covers the pods waiting.
        s.absorb(wake_of("c", "c4"));
        assert_eq!(s.next(t0 + p, p), Action::Relist);
        assert_eq!(s.next(t0 + p, p), Action::Wait(p));
        // The stream reopened: a relist now, whatever the period.
        s.absorb(Wake::StreamOpened);
        assert_eq!(s.next(t0 + p, p), Action::Relist);
        // A failed targeted relist: a full one next.
        s.update_failed();
        assert_eq!(s.next(t0 + p, p), Action::Relist);
    }

    #[test]
    fn a_broken_stream_shrinks_the_period_to_a_second() {
        let t0 = Instant::now();
        let mut s = Schedule::new();
        assert_eq!(s.next(t0, RELIST_PERIOD), Action::Relist);
        let t1 = t0 + Duration::from_secs(2);
        assert!(matches!(s.next(t1, RELIST_PERIOD), Action::Wait(_)));
        s.absorb(Wake::StreamBroken);
        assert_eq!(s.next(t1, super::super::RELIST_PERIOD), Action::Relist);
    }

    /// A fake runtime with one running container of pod `uid-1` on node `n1`, and a
    /// PLEG over it that has relisted once.
    fn world() -> (Arc<FakeRuntime>, String, Pleg, Receiver<PlegEvent>) {
        let rt = Arc::new(FakeRuntime::new(FakeClock::default()).with_image("busybox"));
        let id = rt
            .create_container(&ContainerConfig {
                name: "k8s_app_p_ns_uid-1_0".into(),
                image: "busybox".into(),
                labels: [
                    (labels::MANAGED_BY_NODE.to_string(), NODE.to_string()),
                    (labels::POD_UID.to_string(), "uid-1".to_string()),
                    (labels::CONTAINER_NAME.to_string(), "app".to_string()),
                ]
                .into(),
                ..ContainerConfig::default()
            })
            .expect("create");
        rt.start_container(&id).expect("start");
        let (tx, rx) = crate::chan::bounded(CHANNEL_CAPACITY);
        let runtime: Arc<dyn Runtime> = rt.clone();
        let mut pleg = Pleg::new(runtime, NODE, tx, Arc::default(), None);
        pleg.relist().expect("relist");
        let first: Vec<PlegEvent> = rx.try_iter().collect();
        assert_eq!(first.len(), 1, "{first:?}");
        (rt, id, pleg, rx)
    }

    fn watcher(rt: &Arc<FakeRuntime>, pleg: &Pleg, wake: WakeSender) -> EventWatcher {
        let runtime: Arc<dyn Runtime> = rt.clone();
        EventWatcher::new(
            runtime,
            pleg.node_filter(),
            pleg.shared().clone(),
            wake,
            Arc::default(),
        )
    }

    /// Runs the `pleg` thread's actions until it would wait.
    fn run_until_idle(pleg: &mut Pleg, wakes: &WakeReceiver, s: &mut Schedule) -> Vec<Action> {
        let mut done = Vec::new();
        loop {
            wakes.drain_into(s);
            let (period, _) = pleg.shared().relist_timing();
            let a = s.next(Instant::now(), period);
            match &a {
                Action::Relist => pleg.relist().expect("relist"),
                Action::UpdatePods(uids) => pleg.update_pods(uids).expect("update"),
                Action::Wait(_) => return done,
            }
            done.push(a);
        }
    }

    #[test]
    fn a_pods_generation_moves_with_its_own_changes_only_and_is_vouched_for_while_fresh() {
        let (rt, id, mut pleg, _rx) = world();
        let shared = pleg.shared().clone();
        let now = Instant::now();
        let g1 = shared.pod_generation("uid-1", now).expect("just relisted");
        let other = shared.pod_generation("uid-2", now).expect("just relisted");
        pleg.relist().expect("relist");
        assert_eq!(shared.pod_generation("uid-1", Instant::now()), Some(g1));
        assert_eq!(shared.pod_generation("uid-2", Instant::now()), Some(other));
        // A pod the runtime holds nothing of moves with any change, a pod with
        // containers only with its own.
        rt.exit(&id, 1);
        pleg.relist().expect("relist");
        let g2 = shared
            .pod_generation("uid-1", Instant::now())
            .expect("fresh");
        assert_ne!(g2, g1);
        assert_ne!(shared.pod_generation("uid-2", Instant::now()), Some(other));
        // Removed: the pod's number leaves the map and never comes back as g1 or g2.
        rt.remove_container(&id).expect("remove");
        pleg.relist().expect("relist");
        let g3 = shared
            .pod_generation("uid-1", Instant::now())
            .expect("fresh");
        assert!(g3 > g2, "{g3} > {g2}");
        // No stream and no relist for longer than FRESH_RELIST: nothing is vouched for;
        // an open stream vouches.
        let later = Instant::now() + FRESH_RELIST + Duration::from_secs(1);
        assert_eq!(shared.pod_generation("uid-1", later), None);
        shared.set_stream_open(true);
        assert_eq!(shared.pod_generation("uid-1", later), Some(g3));
    }

    #[test]
    fn a_reopened_stream_relists_once_and_that_covers_its_events() {
        let (rt, id, mut pleg, rx) = world();
        let metrics = Arc::new(KubeletMetrics::default());
        pleg = pleg.with_metrics(metrics.clone());
        let (wake, wakes) = wake_channel(CHANNEL_CAPACITY);
        let mut w = watcher(&rt, &pleg, wake);
        let mut s = Schedule::new();
        s.next(Instant::now(), RELIST_PERIOD); // the first relist, done in world()

        rt.script_event_stream(true);
        rt.exit(&id, 137);
        rt.push_event(event("die", &id, "uid-1", 10));
        rt.cut_event_stream();
        let (opened, r) = w.watch_once(&|| false, &mut || {});
        assert!(opened && r.is_err());

        // Opened → one full relist, which also covers the die's pod.
        assert_eq!(
            run_until_idle(&mut pleg, &wakes, &mut s),
            vec![Action::Relist]
        );
        assert_eq!(metrics.pleg_relist_duration.count([]), 1);
        let got: Vec<PlegEvent> = rx.try_iter().collect();
        assert_eq!(
            got,
            vec![PlegEvent {
                pod_uid: "uid-1".into(),
                kind: PlegEventType::ContainerDied,
                container_id: id.clone(),
            }]
        );
    }

    #[test]
    fn an_event_on_an_open_stream_relists_only_its_pod() {
        let (rt, id, mut pleg, rx) = world();
        let metrics = Arc::new(KubeletMetrics::default());
        pleg = pleg.with_metrics(metrics.clone());
        let (wake, wakes) = wake_channel(CHANNEL_CAPACITY);
        let mut s = Schedule::new();
        s.next(Instant::now(), RELIST_PERIOD);
        pleg.shared().set_stream_open(true);

        // What the event thread sends for one die event on an open stream.
        rt.exit(&id, 1);
        let h = hint_of(&event("die", &id, "uid-1", 10)).expect("a hint");
        wake.send(wake_of(&h.pod_uid, &h.container_id));
        let before = rt.calls().len();
        assert_eq!(
            run_until_idle(&mut pleg, &wakes, &mut s),
            vec![Action::UpdatePods(
                [("uid-1".to_string(), [id.clone()].into())].into()
            )]
        );
        assert_eq!(metrics.pleg_relist_duration.count([]), 0, "no relist");
        let calls = &rt.calls()[before..];
        let ops: Vec<Op> = calls.iter().map(|c| c.op).collect();
        assert_eq!(ops, vec![Op::List, Op::Inspect], "one list, one inspect");
        let got: Vec<PlegEvent> = rx.try_iter().collect();
        assert_eq!(
            got,
            vec![PlegEvent {
                pod_uid: "uid-1".into(),
                kind: PlegEventType::ContainerDied,
                container_id: id.clone(),
            }]
        );
        // The same event again (a replay after a reconnect): no second ContainerDied.
        wake.send(wake_of("uid-1", &id));
        run_until_idle(&mut pleg, &wakes, &mut s);
        assert_eq!(rx.try_iter().count(), 0);
        assert!(!pleg.shared().runtime_pods()["uid-1"].running);
    }

    #[test]
    fn a_broken_stream_means_relists_every_second_until_it_reopens() {
        let (rt, _id, pleg, _rx) = world();
        let (wake, wakes) = wake_channel(CHANNEL_CAPACITY);
        let mut w = watcher(&rt, &pleg, wake);
        let shared = pleg.shared().clone();
        assert_eq!(shared.relist_timing().0, super::super::RELIST_PERIOD);

        rt.script_event_stream(true);
        let mut seen_open = None;
        rt.cut_event_stream();
        let (opened, r) = w.watch_once(&|| false, &mut || {
            seen_open.get_or_insert(shared.stream_open());
        });
        assert!(opened);
        assert!(r.is_err(), "cut");
        assert_eq!(seen_open, Some(false), "not open before Opened arrives");
        assert!(!shared.stream_open());
        assert_eq!(shared.relist_timing().0, super::super::RELIST_PERIOD);
        assert_eq!(
            wakes.rx.try_iter().collect::<Vec<_>>(),
            vec![Wake::StreamOpened, Wake::StreamBroken]
        );

        // Refused: still broken, still 1 s.
        rt.script_event_stream(false);
        let (opened, r) = w.watch_once(&|| false, &mut || {});
        assert!(!opened && r.is_err());
        assert_eq!(shared.relist_timing().0, super::super::RELIST_PERIOD);
    }

    #[test]
    fn the_open_stream_relists_every_five_minutes_and_raises_the_threshold() {
        let s = PlegShared::default();
        s.set_stream_open(true);
        assert_eq!(s.relist_timing(), (RELIST_PERIOD, RELIST_THRESHOLD));
        let now = Instant::now();
        *crate::loops::lock(&s.last_relist) = Some(now);
        assert!(s.healthy(now + Duration::from_secs(590)).is_ok());
        assert!(s.healthy(now + Duration::from_secs(610)).is_err());
        s.set_stream_open(false);
        assert!(s.healthy(now + Duration::from_secs(190)).is_err());
    }

    #[test]
    fn a_full_event_channel_is_unhealthy_when_evented() {
        let s = PlegShared::default();
        let now = Instant::now();
        *crate::loops::lock(&s.last_relist) = Some(now);
        s.channel_full.store(true, Ordering::SeqCst);
        assert!(
            s.healthy(now).is_ok(),
            "not evented: the generic check only"
        );
        s.set_evented();
        assert_eq!(
            s.healthy(now),
            Err("EventedPLEG: pleg event channel capacity is full with 1000 events".into())
        );
    }

    #[test]
    fn reconnects_from_the_last_events_time_to_the_nanosecond() {
        let (rt, id, pleg, _rx) = world();
        let (wake, _wakes) = wake_channel(CHANNEL_CAPACITY);
        let mut w = watcher(&rt, &pleg, wake);
        rt.script_event_stream(true);
        rt.push_event(event("die", &id, "uid-1", 10));
        rt.push_event(event("destroy", &id, "uid-1", 12));
        rt.cut_event_stream();
        let _ = w.watch_once(&|| false, &mut || {});
        rt.script_event_stream(true);
        rt.cut_event_stream();
        let _ = w.watch_once(&|| false, &mut || {});
        let filters = rt.event_filters();
        assert_eq!(filters.len(), 2);
        assert_eq!(
            filters[0].since, None,
            "the first connection replays nothing"
        );
        assert_eq!(
            filters[1].since,
            Some(UNIX_EPOCH + Duration::new(12, 123_456_789))
        );
        assert_eq!(
            filters[1].labels,
            vec![format!("{}={NODE}", labels::MANAGED_BY_NODE)]
        );
        assert_eq!(filters[1].actions, ACTIONS.map(String::from).to_vec());
    }

    #[test]
    fn a_burst_beyond_the_channel_becomes_one_full_relist() {
        let (rt, id, pleg, _rx) = world();
        let (wake, wakes) = wake_channel(4);
        let mut w = watcher(&rt, &pleg, wake);
        rt.script_event_stream(true);
        for i in 0..50 {
            rt.push_event(event("die", &id, &format!("uid-{i}"), 10));
        }
        rt.cut_event_stream();
        let _ = w.watch_once(&|| false, &mut || {});
        assert_eq!(wakes.rx.len(), 4, "bounded");
        let mut s = Schedule::new();
        let t0 = Instant::now();
        assert_eq!(s.next(t0, RELIST_PERIOD), Action::Relist);
        wakes.drain_into(&mut s);
        assert_eq!(s.next(t0, RELIST_PERIOD), Action::Relist, "overflow");
        assert_eq!(s.next(t0, RELIST_PERIOD), Action::Wait(RELIST_PERIOD));
    }
}
