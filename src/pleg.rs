//! The pod lifecycle event generator (upstream `GenericPLEG`, `pkg/kubelet/pleg/generic.go`):
//! every second it lists this node's containers with ONE runtime call, compares the
//! states with the previous list, and sends ContainerStarted / ContainerDied /
//! ContainerRemoved events to the sync loop, which syncs the pods concerned.
//!
//! It also publishes what it saw (which pod UIDs have containers, and their grace
//! periods) for housekeeping to find orphans, and the time of its last successful
//! relist for the health check (unhealthy after 3 minutes without one).
//!
//! [`evented`] adds upstream's evented PLEG on top: Docker's event stream wakes this
//! PLEG to relist one pod at once ([`Pleg::update_pods`]), and while the stream is
//! live the full relist runs only every 5 minutes. Either way every event the sync loop
//! gets comes out of the one diff, [`compute_events`], against the one record of what
//! was seen, so events and relists can never disagree.

pub(crate) mod evented;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{Sender, TrySendError};

use base::chan::BoundedSender;

use crate::metrics::KubeletMetrics;
use base::loops::lock;
use runtime::container::labels;
use runtime::{ContainerState, ContainerSummary, Runtime, RuntimeError};

/// Upstream `genericPlegRelistPeriod`.
pub(crate) const RELIST_PERIOD: Duration = Duration::from_secs(1);
/// Upstream `genericPlegRelistThreshold`: the PLEG is unhealthy past this.
pub(crate) const RELIST_THRESHOLD: Duration = Duration::from_secs(180);
/// Without the event stream, a relist this recent vouches for what it saw: three
/// relist periods, so one slow list does not count.
pub(crate) const FRESH_RELIST: Duration = Duration::from_secs(3);
/// Upstream `plegChannelCapacity`: events beyond it are dropped (the next relist or
/// resync catches up).
pub(crate) const CHANNEL_CAPACITY: usize = 1000;

/// What happened to a container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(clippy::enum_variant_names)] // upstream's names (`ContainerStarted`, …)
pub(crate) enum PlegEventType {
    /// It is running now.
    ContainerStarted,
    /// It stopped running.
    ContainerDied,
    /// It is gone from the runtime.
    ContainerRemoved,
    /// It went to an unknown or created state.
    ContainerChanged,
}

/// One lifecycle event of one container of one pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PlegEvent {
    /// The pod's UID.
    pub pod_uid: String,
    /// What happened.
    pub kind: PlegEventType,
    /// The container's runtime ID.
    pub container_id: String,
}

/// One container as one relist saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Seen {
    /// The pod's UID.
    pub pod_uid: String,
    /// Its state.
    pub state: ContainerState,
}

/// The PLEG's view of a state: running, exited, or (created/unknown) unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PlegState {
    Running,
    Exited,
    Unknown,
    NonExistent,
}

fn pleg_state(s: Option<&Seen>) -> PlegState {
    match s.map(|s| s.state) {
        None => PlegState::NonExistent,
        Some(ContainerState::Running) => PlegState::Running,
        Some(ContainerState::Exited) => PlegState::Exited,
        Some(_) => PlegState::Unknown,
    }
}

/// The events between two relists (upstream `generateEvents`), sorted by pod then
/// container for determinism.
pub(crate) fn compute_events(
    old: &HashMap<String, Seen>,
    new: &HashMap<String, Seen>,
) -> Vec<PlegEvent> {
    let mut ids: Vec<&String> = old.keys().chain(new.keys()).collect();
    base::sort::sort(&mut ids);
    ids.dedup();
    let mut out = Vec::new();
    for id in ids {
        let (o, n) = (old.get(id), new.get(id));
        let (os, ns) = (pleg_state(o), pleg_state(n));
        if os == ns {
            continue;
        }
        let pod_uid = n.or(o).map(|s| s.pod_uid.clone()).unwrap_or_default();
        let ev = |kind| PlegEvent {
            pod_uid: pod_uid.clone(),
            kind,
            container_id: id.clone(),
        };
        match ns {
            PlegState::Running => out.push(ev(PlegEventType::ContainerStarted)),
            PlegState::Exited => out.push(ev(PlegEventType::ContainerDied)),
            PlegState::Unknown => out.push(ev(PlegEventType::ContainerChanged)),
            PlegState::NonExistent => {
                if os != PlegState::Exited {
                    out.push(ev(PlegEventType::ContainerDied));
                }
                out.push(ev(PlegEventType::ContainerRemoved));
            }
        }
    }
    base::sort::sort_by(&mut out, |a, b| {
        (&a.pod_uid, &a.container_id).cmp(&(&b.pod_uid, &b.container_id))
    });
    out
}

/// A pod the runtime holds, as the last relist saw it (for housekeeping and
/// `/runningpods/`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimePodInfo {
    /// `name_namespace` from the labels.
    pub full_name: String,
    /// The pod's name, from the labels.
    pub name: String,
    /// The pod's namespace, from the labels.
    pub namespace: String,
    /// Whether any of its containers (or sandbox) runs.
    pub running: bool,
    /// Its running app and init containers (not the sandbox), as `(name, image)`,
    /// sorted by name: what upstream's `/runningpods/` lists of a pod.
    pub running_containers: Vec<(String, String)>,
    /// Its termination grace period from the labels.
    pub grace_seconds: i64,
}

/// The states `kubelet_running_containers` is set for at every relist.
const CONTAINER_STATE_ORDER: [ContainerState; 4] = [
    ContainerState::Created,
    ContainerState::Running,
    ContainerState::Exited,
    ContainerState::Unknown,
];

/// The `container_state` label of a runtime state (upstream's `kubecontainer.State`).
fn state_label(s: ContainerState) -> &'static str {
    match s {
        ContainerState::Created => "created",
        ContainerState::Running => "running",
        ContainerState::Exited => "exited",
        ContainerState::Unknown => "unknown",
    }
}

/// What the PLEG publishes for others: health and the runtime's pods.
#[derive(Debug, Default)]
pub struct PlegShared {
    last_relist: Mutex<Option<Instant>>,
    pods: Mutex<Arc<BTreeMap<String, RuntimePodInfo>>>,
    /// Set once an event watcher runs for this PLEG (upstream's EventedPLEG gate).
    evented: AtomicBool,
    /// Whether the runtime's event stream is open now: the relist period and the
    /// health threshold follow it.
    stream_open: AtomicBool,
    /// The last send to the sync loop found its channel full (upstream's evented
    /// health check: "pleg event channel capacity is full"); the next send that fits
    /// clears it.
    channel_full: AtomicBool,
    /// Counts the relists and events that found a container created, started, died
    /// or removed: a reader that lists the runtime for itself (`stats`) lists again
    /// only when it moved.
    generation: AtomicU64,
    /// Per pod UID the runtime holds: `generation` as it was made by the last change
    /// of one of its containers, so a reader that keeps what it read of a pod (the
    /// runtime manager's pod cache) knows whether it still holds.
    pod_generations: Mutex<HashMap<String, u64>>,
}

impl PlegShared {
    /// A number that changes whenever the PLEG has seen the node's containers change
    /// (equal numbers: no container appeared, changed state or went in between).
    pub fn containers_generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// A number that changes whenever the PLEG has seen one of `uid`'s containers
    /// change (upstream's pod cache timestamps: equal numbers, no container of the pod
    /// appeared, changed state or went in between), or None while the PLEG cannot
    /// vouch for it: no relist yet, or neither an open event stream nor a relist within
    /// the last [`FRESH_RELIST`].
    pub fn pod_generation(&self, uid: &str, now: Instant) -> Option<u64> {
        let last = self.last_relist()?;
        if !self.stream_open() && now.saturating_duration_since(last) > FRESH_RELIST {
            return None;
        }
        // A pod the runtime holds nothing of has the node's generation: it moves with
        // any change, so it never repeats a number the pod had while it had containers.
        let gens = lock(&self.pod_generations);
        Some(
            gens.get(uid)
                .copied()
                .unwrap_or_else(|| self.containers_generation()),
        )
    }

    /// When the last successful relist started.
    pub fn last_relist(&self) -> Option<Instant> {
        *lock(&self.last_relist)
    }

    /// The pods the runtime held at the last relist, by UID.
    pub fn runtime_pods(&self) -> Arc<BTreeMap<String, RuntimePodInfo>> {
        lock(&self.pods).clone()
    }

    /// Whether the runtime's event stream is open (the evented PLEG is in use).
    pub fn stream_open(&self) -> bool {
        self.stream_open.load(Ordering::SeqCst)
    }

    /// The full relist's period and health threshold now: upstream's evented values
    /// while the event stream is open, the generic ones otherwise.
    pub fn relist_timing(&self) -> (Duration, Duration) {
        if self.stream_open() {
            (evented::RELIST_PERIOD, evented::RELIST_THRESHOLD)
        } else {
            (RELIST_PERIOD, RELIST_THRESHOLD)
        }
    }

    pub(crate) fn set_evented(&self) {
        self.evented.store(true, Ordering::SeqCst);
    }

    pub(crate) fn set_stream_open(&self, open: bool) {
        self.stream_open.store(open, Ordering::SeqCst);
    }

    /// The health check: Err with upstream's wording when the PLEG is stale. With the
    /// event watcher running, upstream's two checks: the generic one with the threshold
    /// of the current mode (10 min while events flow, 3 min while they do not), and
    /// the evented one (the sync loop's event channel is not full).
    pub fn healthy(&self, now: Instant) -> Result<(), String> {
        let (_, threshold) = self.relist_timing();
        match self.last_relist() {
            None => return Err("pleg has yet to be successful".into()),
            Some(t) if now.saturating_duration_since(t) > threshold => {
                return Err(format!(
                    "pleg was last seen active {:?} ago; threshold is {:?}",
                    now.saturating_duration_since(t),
                    threshold
                ))
            }
            Some(_) => {}
        }
        if self.evented.load(Ordering::SeqCst) && self.channel_full.load(Ordering::SeqCst) {
            return Err(format!(
                "EventedPLEG: pleg event channel capacity is full with {CHANNEL_CAPACITY} events"
            ));
        }
        Ok(())
    }
}

/// The relisting component. Its [`Pleg::relist`] is the `pleg` loop's tick, and its
/// [`Pleg::update_pods`] the evented PLEG's targeted relist.
#[derive(Debug)]
pub(crate) struct Pleg {
    runtime: Arc<dyn Runtime>,
    filter: Vec<String>,
    /// Every container of this node's pods the PLEG has seen, by ID, as last listed:
    /// the `old` side of the next diff, and what it publishes.
    seen: HashMap<String, Kept>,
    events: BoundedSender<PlegEvent>,
    shared: Arc<PlegShared>,
    first_done: Option<Sender<()>>,
    metrics: Arc<KubeletMetrics>,
    /// Start of the last successful relist, for the relist interval.
    last_success: Option<Instant>,
    /// What was seen has been published once (afterwards only when it changes).
    published: bool,
}

/// What the PLEG keeps of a listed container of a pod: what the next diff compares
/// and what it publishes, read from the labels once (a container carries a dozen
/// labels; a map of even the six read here cost ~1 kB a container).
#[derive(Debug, PartialEq, Eq)]
struct Kept {
    pod_uid: String,
    pod_name: String,
    namespace: String,
    /// The container's name (`POD` for a sandbox).
    name: String,
    sandbox: bool,
    /// The pod's termination grace period, from the labels (30 s when absent).
    grace_seconds: i64,
    state: ContainerState,
    image: String,
}

impl Kept {
    /// The container's ID and what is kept of it; None for a container with no pod
    /// UID: not a pod's, not the PLEG's.
    fn of(c: ContainerSummary) -> Option<(String, Kept)> {
        let mut labels = c.labels;
        let mut take = |k: &str| labels.remove(k).unwrap_or_default();
        let pod_uid = take(labels::POD_UID);
        if pod_uid.is_empty() {
            return None;
        }
        let kept = Kept {
            pod_uid,
            pod_name: take(labels::POD_NAME),
            namespace: take(labels::POD_NAMESPACE),
            name: take(labels::CONTAINER_NAME),
            sandbox: take(labels::DOCKER_TYPE) == labels::TYPE_SANDBOX,
            grace_seconds: take(labels::TERMINATION_GRACE).parse().unwrap_or(30),
            state: c.state,
            image: c.image,
        };
        Some((c.id, kept))
    }
}

fn seen_states<'a>(
    containers: impl Iterator<Item = (&'a String, &'a Kept)>,
) -> HashMap<String, Seen> {
    containers
        .map(|(id, c)| {
            (
                id.clone(),
                Seen {
                    pod_uid: c.pod_uid.clone(),
                    state: c.state,
                },
            )
        })
        .collect()
}

impl Pleg {
    /// A PLEG for the containers of `node_name`. `first_done` is signalled once after the
    /// first successful relist (readiness for systemd).
    pub(crate) fn new(
        runtime: Arc<dyn Runtime>,
        node_name: &str,
        events: BoundedSender<PlegEvent>,
        shared: Arc<PlegShared>,
        first_done: Option<Sender<()>>,
    ) -> Self {
        Pleg {
            runtime,
            filter: vec![format!("{}={}", labels::MANAGED_BY_NODE, node_name)],
            seen: HashMap::new(),
            events,
            shared,
            first_done,
            metrics: Arc::default(),
            last_success: None,
            published: false,
        }
    }

    /// Records into `metrics` (relist duration and interval, last seen, running pods
    /// and containers, discarded events) instead of a registry of its own.
    pub(crate) fn with_metrics(mut self, metrics: Arc<KubeletMetrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// The label filter of this node's containers (the event watcher's too).
    pub(crate) fn node_filter(&self) -> &[String] {
        &self.filter
    }

    /// What this PLEG publishes.
    pub(crate) fn shared(&self) -> &Arc<PlegShared> {
        &self.shared
    }

    /// One relist: list, diff, send events, publish. A failed list changes nothing and
    /// leaves the relist time alone (that is what trips the health check). Upstream's
    /// `Relist` metrics: the interval since the last successful relist is observed
    /// before listing, the duration (failed relists included) after.
    pub(crate) fn relist(&mut self) -> Result<(), RuntimeError> {
        let started = Instant::now();
        if let Some(last) = self.last_success {
            self.metrics
                .pleg_relist_interval
                .observe([], started.saturating_duration_since(last).as_secs_f64());
        }
        let r = self.relist_inner(started);
        self.metrics
            .pleg_relist_duration
            .observe([], started.elapsed().as_secs_f64());
        r
    }

    fn relist_inner(&mut self, started: Instant) -> Result<(), RuntimeError> {
        let list = self.runtime.list_containers(&self.filter)?;
        self.last_success = Some(started);
        self.metrics
            .pleg_last_seen
            .set([], base::time::unix_secs(SystemTime::now()) as f64);
        self.apply(list, None);
        *lock(&self.shared.last_relist) = Some(started);
        if let Some(tx) = self.first_done.take() {
            let _ = tx.try_send(());
        }
        Ok(())
    }

    /// The evented PLEG's targeted relist: for each pod of `pods`, lists its containers
    /// (one filtered list call), inspects the containers its events named, diffs them
    /// against what was seen of that pod, and sends the events, exactly as a full relist
    /// would have for that pod. Docker writes a `die` event before its list shows the
    /// container exited (the list reads a view updated after the event; inspect waits on
    /// the container's own lock), so the states of the named containers are taken from
    /// inspect. It is not a relist: the relist metrics and time stay as they are (the
    /// health check and the full relist's schedule count full relists only, as
    /// upstream's).
    ///
    /// One change no state diff shows: Docker may learn of an OOM kill after it wrote
    /// the container's exit (containerd's `TaskOOM` after its `TaskExit`), and then sets
    /// `OOMKilled` and sends `oom` after `die`. A named container that was already seen
    /// exited and now says OOM-killed moves its pod's generation and is sent as
    /// `ContainerChanged`, so the pod's status is read again and says `OOMKilled`
    /// rather than keeping the `Error` of the first read.
    ///
    /// A pod with no container named (a re-check, [`evented::Wake::Pod`]) has each of
    /// its containers the list shows running inspected: nothing it may have missed is
    /// left to the list.
    pub(crate) fn update_pods(
        &mut self,
        pods: &BTreeMap<String, BTreeSet<String>>,
    ) -> Result<(), RuntimeError> {
        for (uid, ids) in pods {
            let mut filter = self.filter.clone();
            filter.push(format!("{}={uid}", labels::POD_UID));
            let mut list = self.runtime.list_containers(&filter)?;
            let mut gone = BTreeSet::new();
            let mut late_oom = Vec::new();
            let recheck = ids.is_empty();
            let named = |c: &ContainerSummary| {
                ids.contains(&c.id) || (recheck && c.state == ContainerState::Running)
            };
            for c in list.iter_mut().filter(|c| named(c)) {
                match self.runtime.inspect_container(&c.id) {
                    Ok(d) => {
                        let exited = |s: ContainerState| s == ContainerState::Exited;
                        if d.oom_killed
                            && exited(d.state)
                            && self.seen.get(&c.id).is_some_and(|s| exited(s.state))
                        {
                            late_oom.push(c.id.clone());
                        }
                        c.state = d.state;
                    }
                    Err(e) if e.is_not_found() => {
                        gone.insert(c.id.clone());
                    }
                    Err(e) => return Err(e),
                }
            }
            list.retain(|c| !gone.contains(&c.id));
            self.apply(list, Some(uid));
            if !late_oom.is_empty() {
                self.move_generations([uid.as_str()]);
                for id in late_oom {
                    log::debug!(
                        "pleg: {} of pod {uid} was OOM-killed (Docker said so after its exit)",
                        runtime::container::short(&id)
                    );
                    self.forward(PlegEvent {
                        pod_uid: uid.clone(),
                        kind: PlegEventType::ContainerChanged,
                        container_id: id,
                    });
                }
            }
        }
        self.metrics
            .pleg_last_seen
            .set([], base::time::unix_secs(SystemTime::now()) as f64);
        Ok(())
    }

    /// Diffs `list` against what was seen (of pod `scope` only, or of every pod),
    /// sends the events, records `list` as seen, and publishes.
    fn apply(&mut self, list: Vec<ContainerSummary>, scope: Option<&str>) {
        let in_scope = |c: &Kept| scope.is_none_or(|s| c.pod_uid == s);
        let new: HashMap<String, Kept> = list
            .into_iter()
            .filter_map(Kept::of)
            .filter(|(_, c)| in_scope(c))
            .collect();
        let old = seen_states(self.seen.iter().filter(|(_, c)| in_scope(c)));
        let events = compute_events(&old, &seen_states(new.iter()));
        // Before the events go out: the sync an event starts must find the pod's
        // generation moved.
        self.move_generations(events.iter().map(|ev| ev.pod_uid.as_str()));
        for ev in events {
            self.send(ev);
        }
        // An unchanged container keeps its record (and the pod map published from the
        // records stays as it is): the new one's strings were allocated amid the
        // list's decode, and a record kept for the container's life from there pins
        // a page of the freed decode. Every 5 minutes a full relist would otherwise
        // move every record at once (at 110 pods RssAnon rose ~0.3 MiB and stayed).
        let before = self.seen.len();
        self.seen
            .retain(|id, c| !in_scope(c) || new.get(id).is_some_and(|n| n == c));
        let mut changed = self.seen.len() != before;
        for (id, c) in new {
            if let std::collections::hash_map::Entry::Vacant(e) = self.seen.entry(id) {
                e.insert(c);
                changed = true;
            }
        }
        if changed || !self.published {
            self.publish();
            self.published = true;
        }
    }

    /// Marks what the runtime holds of these pods as changed: one new generation for
    /// all of them (none when there are none).
    fn move_generations<'a>(&self, uids: impl IntoIterator<Item = &'a str>) {
        let mut uids = uids.into_iter().peekable();
        if uids.peek().is_none() {
            return;
        }
        let g = self.shared.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let mut gens = lock(&self.shared.pod_generations);
        for uid in uids {
            gens.insert(uid.to_string(), g);
        }
    }

    fn send(&self, ev: PlegEvent) {
        log::debug!(
            "pleg: {:?} {} in pod {}",
            ev.kind,
            runtime::container::short(&ev.container_id),
            ev.pod_uid
        );
        if ev.kind == PlegEventType::ContainerChanged {
            // Generated by a diff but not forwarded, as upstream.
            return;
        }
        self.forward(ev);
    }

    /// Puts one event on the sync loop's channel, or counts it dropped.
    fn forward(&self, ev: PlegEvent) {
        match self.events.try_send(ev) {
            Ok(()) => self.shared.channel_full.store(false, Ordering::SeqCst),
            Err(TrySendError::Full(_)) => {
                self.shared.channel_full.store(true, Ordering::SeqCst);
                self.metrics.pleg_discard_events.inc([]);
                log::warn!("Event channel is full, discard this relist() cycle event");
            }
            Err(TrySendError::Disconnected(_)) => {}
        }
    }

    /// Publishes the pods and the running-pod and container metrics from what was seen.
    fn publish(&self) {
        let mut pods: BTreeMap<String, RuntimePodInfo> = BTreeMap::new();
        let mut by_state = [0u32; 4];
        let mut sandboxes_running = BTreeSet::new();
        for c in self.seen.values() {
            let uid = c.pod_uid.clone();
            let info = pods.entry(uid.clone()).or_insert_with(|| RuntimePodInfo {
                full_name: format!("{}_{}", c.pod_name, c.namespace),
                name: c.pod_name.clone(),
                namespace: c.namespace.clone(),
                running: false,
                running_containers: Vec::new(),
                grace_seconds: c.grace_seconds,
            });
            let running = c.state == ContainerState::Running;
            info.running |= running;
            if c.sandbox {
                if running {
                    sandboxes_running.insert(uid);
                }
            } else {
                if let Some(i) = CONTAINER_STATE_ORDER.iter().position(|s| *s == c.state) {
                    by_state[i] += 1;
                }
                if running {
                    info.running_containers
                        .push((c.name.clone(), c.image.clone()));
                }
            }
        }
        // Upstream `updateRunningPodAndContainerMetrics`; every state is set, so one
        // that no container is in any more reads 0 rather than its last count.
        self.metrics
            .running_pods
            .set([], sandboxes_running.len() as f64);
        for (state, n) in CONTAINER_STATE_ORDER.iter().zip(by_state) {
            self.metrics
                .running_containers
                .set([state_label(*state)], f64::from(n));
        }
        for info in pods.values_mut() {
            base::sort::sort(&mut info.running_containers);
        }
        lock(&self.shared.pod_generations).retain(|uid, _| pods.contains_key(uid));
        *lock(&self.shared.pods) = Arc::new(pods);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(uid: &str, state: ContainerState) -> Seen {
        Seen {
            pod_uid: uid.into(),
            state,
        }
    }

    fn map(items: &[(&str, Seen)]) -> HashMap<String, Seen> {
        items
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    fn kinds(evs: &[PlegEvent]) -> Vec<(String, PlegEventType)> {
        evs.iter()
            .map(|e| (e.container_id.clone(), e.kind))
            .collect()
    }

    #[test]
    fn relist_reports_started_died_and_removed() {
        use ContainerState::*;
        use PlegEventType::*;
        let old = map(&[
            ("a", seen("p", Running)),
            ("b", seen("p", Running)),
            ("c", seen("p", Exited)),
            ("d", seen("p", Running)),
        ]);
        let new = map(&[
            ("a", seen("p", Running)),
            ("b", seen("p", Exited)),
            ("e", seen("p", Running)),
        ]);
        assert_eq!(
            kinds(&compute_events(&old, &new)),
            vec![
                ("b".to_string(), ContainerDied),
                ("c".to_string(), ContainerRemoved),
                ("d".to_string(), ContainerDied),
                ("d".to_string(), ContainerRemoved),
                ("e".to_string(), ContainerStarted),
            ]
        );
    }

    #[test]
    fn no_change_no_events() {
        let m = map(&[("a", seen("p", ContainerState::Running))]);
        assert!(compute_events(&m, &m).is_empty());
    }

    #[test]
    fn created_is_a_change_not_a_start() {
        let old = HashMap::new();
        let new = map(&[("a", seen("p", ContainerState::Created))]);
        assert_eq!(
            kinds(&compute_events(&old, &new)),
            vec![("a".to_string(), PlegEventType::ContainerChanged)]
        );
    }

    #[test]
    fn health_thresholds() {
        let s = PlegShared::default();
        let now = Instant::now();
        assert_eq!(s.healthy(now), Err("pleg has yet to be successful".into()));
        *lock(&s.last_relist) = Some(now);
        assert!(s.healthy(now + Duration::from_secs(179)).is_ok());
        assert!(s.healthy(now + Duration::from_secs(181)).is_err());
    }
}
