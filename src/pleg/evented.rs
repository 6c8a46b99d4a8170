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
//! has, because a Docker restart is the usual cause and ends. A runtime that has no
//! event stream at all (containerd 1.6: Unimplemented) is not asked again: the PLEG
//! relists every second, with one log line saying why.
//!
//! [`PlegEvent`]: super::PlegEvent
//! [`compute_events`]: super::compute_events

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{Receiver, TrySendError};

use super::{Pleg, PlegEventType, PlegShared};
use crate::metrics::KubeletMetrics;
use base::loops::{error_chain, LoopHandle, Stop};
use runtime::container::labels;
use runtime::{ContainerEventType, EventFilter, EventItem, Runtime, RuntimeError, RuntimeEvent};

/// Upstream `eventedPlegRelistPeriod`: the full relist while events flow.
pub(crate) const RELIST_PERIOD: Duration = Duration::from_secs(300);
/// Upstream `eventedPlegRelistThreshold`: the PLEG is unhealthy past this without a
/// relist while events flow.
pub(crate) const RELIST_THRESHOLD: Duration = Duration::from_secs(600);
/// The container events the PLEG reacts to: the ones that change what a relist sees
/// (created; started or stopped: running or not; deleted: gone) and an OOM kill (the
/// stop that follows carries the news; the OOM kill may come first).
pub(crate) const KINDS: [ContainerEventType; 5] = [
    ContainerEventType::Created,
    ContainerEventType::Started,
    ContainerEventType::Stopped,
    ContainerEventType::Deleted,
    ContainerEventType::OomKilled,
];
/// The status of a [`RuntimeError::Api`] for a call the runtime does not have (gRPC's
/// Unimplemented: containerd 1.6's `GetContainerEvents`).
const UNIMPLEMENTED: u16 = 12;
/// The first wait before reconnecting a broken stream: short, since a relist every
/// second covers the gap anyway and most breaks (a proxy, a timeout) heal at once.
pub(crate) const BACKOFF_INITIAL: Duration = Duration::from_millis(100);
/// The longest wait between reconnections: a restarting Docker takes seconds, and the
/// 1 s relists run meanwhile, so a slower retry only delays the return to 5 min relists.
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// What an event says about a pod: which one, which container, and the PLEG event it
/// implies, if any (`create` and `oom` imply none by themselves).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EventHint {
    /// The pod's UID, from the container's labels in the event's `Actor.Attributes`.
    pub pod_uid: String,
    /// The container's ID.
    pub container_id: String,
    /// The lifecycle event it implies.
    pub kind: Option<PlegEventType>,
}

/// The event → PLEG mapping (upstream `processCRIEvent`): started → ContainerStarted,
/// stopped → ContainerDied, deleted → ContainerRemoved, created and OOM-killed → a look
/// at the pod without an event of their own. None for a container without a pod UID
/// (not the kubelet's).
pub(crate) fn hint_of(ev: &RuntimeEvent) -> Option<EventHint> {
    let kind = match ev.kind {
        ContainerEventType::Started => Some(PlegEventType::ContainerStarted),
        ContainerEventType::Stopped => Some(PlegEventType::ContainerDied),
        ContainerEventType::Deleted => Some(PlegEventType::ContainerRemoved),
        ContainerEventType::Created | ContainerEventType::OomKilled => None,
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
pub(crate) enum Wake {
    /// An event of this container of this pod: relist the pod, inspect the container.
    Container {
        /// The pod's UID.
        pod_uid: String,
        /// The container's ID.
        id: String,
    },
    /// Look at this pod again whatever events came (or did not): its final delete
    /// waits on a container the PLEG still sees running. Relist the pod, inspecting
    /// each of its containers the list shows running, so no missed `die` keeps the
    /// PLEG's record wrong until the next full relist (5 min away while events flow).
    Pod {
        /// The pod's UID.
        pod_uid: String,
    },
    /// The stream (re)opened: relist everything now, for what it may have missed.
    StreamOpened,
    /// The stream broke: the relist period is 1 s again.
    StreamBroken,
}

/// The event thread's side of the wake channel.
#[derive(Clone, Debug)]
pub(crate) struct WakeSender {
    tx: base::chan::BoundedSender<Wake>,
    overflow: Arc<AtomicBool>,
}

/// The `pleg` thread's side of the wake channel.
#[derive(Debug)]
pub(crate) struct WakeReceiver {
    rx: Receiver<Wake>,
    overflow: Arc<AtomicBool>,
}

/// A wake channel holding `capacity` wakes (the PLEG's channel capacity in the kubelet).
pub(crate) fn wake_channel(capacity: usize) -> (WakeSender, WakeReceiver) {
    let (tx, rx) = base::chan::bounded(capacity);
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
    pub(crate) fn send(&self, w: Wake) {
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
    pub(crate) fn drain_into(&self, schedule: &mut Schedule) {
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
pub(crate) enum Action {
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
pub(crate) struct Schedule {
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
    pub(crate) fn new() -> Self {
        Schedule {
            last_attempt: None,
            relist_now: true,
            pods: BTreeMap::new(),
        }
    }

    /// Takes one wake into account.
    pub(crate) fn absorb(&mut self, w: Wake) {
        match w {
            Wake::Container { pod_uid, id } => {
                self.pods.entry(pod_uid).or_default().insert(id);
            }
            // No container named: the targeted relist inspects the running ones.
            Wake::Pod { pod_uid } => {
                self.pods.entry(pod_uid).or_default();
            }
            Wake::StreamOpened => self.relist_now = true,
            // The period the caller passes shrinks to 1 s; nothing else to do.
            Wake::StreamBroken => {}
        }
    }

    /// A targeted relist failed: a full one follows at once (if Docker is down it fails
    /// too, and then the period paces the retries).
    pub(crate) fn update_failed(&mut self) {
        self.relist_now = true;
    }

    /// The next action at `now` with the full relist's current `period`. A full relist
    /// covers every pod waiting for a targeted one.
    pub(crate) fn next(&mut self, now: Instant, period: Duration) -> Action {
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
pub(crate) fn run_pleg(pleg: &mut Pleg, wakes: &WakeReceiver, stop: &Stop, handle: &LoopHandle) {
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
pub(crate) struct EventWatcher {
    runtime: Arc<dyn Runtime>,
    filter: EventFilter,
    shared: Arc<PlegShared>,
    wake: WakeSender,
    metrics: Arc<KubeletMetrics>,
}

impl EventWatcher {
    /// A watcher of the containers matching `node_filter` (the PLEG's own label
    /// filter), waking the PLEG through `wake`. Marks the PLEG evented.
    pub(crate) fn new(
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
                kinds: KINDS.to_vec(),
                since: None,
            },
            shared,
            wake,
            metrics,
        }
    }

    /// One connection: opens the stream (from the last event's time), wakes the PLEG
    /// for each event, until the stream ends (an error, or Ok at shutdown). Returns
    /// whether the stream opened, beside the outcome. `on_activity` is called once per
    /// item (the loop registry's tick).
    pub(crate) fn watch_once(
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
                                "pleg: event {:?} of {} in pod {}",
                                ev.kind,
                                runtime::container::short(&h.container_id),
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
    pub(crate) fn run(&mut self, stop: &Stop, handle: &LoopHandle) {
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
            if let Err(
                e @ RuntimeError::Api {
                    status: UNIMPLEMENTED,
                    ..
                },
            ) = &r
            {
                // containerd 1.6 has no GetContainerEvents: asking again would only
                // fail again (and open, fail, reopen ten times a second). Relist
                // every second for good, as upstream's generic PLEG.
                log::info!(
                    "pleg: the runtime has no container event stream ({}); relisting every {:?}",
                    error_chain(e),
                    super::RELIST_PERIOD
                );
                while !stop.sleep(Duration::from_secs(3600)) {}
                return;
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
mod tests;
