//! The event recorder: what upstream records as a Kubernetes Event (`Pulling`,
//! `Failed`, `BackOff`, `Killing` …) is a log line here, `event: <Type> <reason>
//! pod/<ns>/<name>[ container <c>]: <message>`, and every such line goes through one
//! rate limiter, upstream's `EventSourceObjectSpamFilter`
//! (client-go `tools/record/events_cache.go`). With an API server (`--kubeconfig`),
//! each event the limiter lets through is also offered, as a [`Recorded`] with its
//! object reference, to the `events` loop (`src/events.rs`), which writes it as a
//! core/v1 Event; this module only holds the sending side ([`set_sink`]), so it stays
//! below everything that records.
//!
//! Why the limiter: a pod whose 1000 containers wait for an absent image logged two
//! lines per container per sync (34,004 lines, 6.4 MB in under three minutes).
//! Upstream bounds the events of one object with a token bucket (burst 25, one more
//! every 5 minutes) and folds similar events into one. Here the bucket is per pod UID,
//! type and reason (not per message: the messages of a flood differ by container and
//! image, and one bucket per message would let 1000 containers through 25 times each;
//! upstream gets the same bound by aggregating similar messages first). When a bucket
//! runs dry the recorder says so once; the next line it lets through says how many it
//! held back. Decisions are pure ([`SpamFilter::observe`], `now` passed in) and
//! table-tested; the process-wide recorder ([`event`]) wraps one filter in a mutex
//! held for microseconds, never across I/O. Offering an event never blocks: a full
//! queue drops it and counts the drop ([`dropped`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::TrySendError;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};

use base::chan::BoundedSender;
use base::loops::lock;

/// Upstream's `defaultSpamBurst`: events of one kind an object may log at once.
pub const SPAM_BURST: u32 = 25;
/// Upstream's `defaultSpamQPS` (1/300): one more event every 5 minutes after the burst.
pub(crate) const SPAM_REFILL: Duration = Duration::from_secs(300);
/// Upstream's `maxLruCacheEntries`: the most buckets kept; a full bucket carries no
/// state, so the idlest ones are dropped first.
pub(crate) const MAX_BUCKETS: usize = 4096;

/// What the recorder does with one event.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Log it; `suppressed` events of the same key were held back before it.
    Log {
        /// Held back since the last line of this key.
        suppressed: u64,
    },
    /// Drop it, and say once that this key is now being suppressed.
    StartSuppressing,
    /// Drop it silently (counted).
    Suppress,
}

/// One token bucket and its suppressed count.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last_refill: Instant,
    last_seen: Instant,
    suppressed: u64,
}

impl Bucket {
    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last_refill);
        let added = elapsed.as_secs_f64() / SPAM_REFILL.as_secs_f64();
        self.tokens = (self.tokens + added).min(f64::from(SPAM_BURST));
        self.last_refill = now;
    }

    /// Full and owing no "suppressed" note: the same as no bucket at all.
    fn idle(&self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last_refill);
        let tokens = self.tokens + elapsed.as_secs_f64() / SPAM_REFILL.as_secs_f64();
        self.suppressed == 0 && tokens >= f64::from(SPAM_BURST)
    }
}

/// Token buckets per event key (pod UID, type, reason): upstream's
/// `EventSourceObjectSpamFilter` with the same burst and refill.
#[derive(Debug, Default)]
pub(crate) struct SpamFilter {
    buckets: BTreeMap<String, Bucket>,
}

impl SpamFilter {
    /// An empty correlator.
    pub(crate) const fn new() -> Self {
        SpamFilter {
            buckets: BTreeMap::new(),
        }
    }

    /// Decides whether an event with this key, seen at `now`, is logged.
    pub(crate) fn observe(&mut self, key: &str, now: Instant) -> Decision {
        if !self.buckets.contains_key(key) {
            self.make_room(now);
        }
        let b = self
            .buckets
            .entry(key.to_string())
            .or_insert_with(|| Bucket {
                tokens: f64::from(SPAM_BURST),
                last_refill: now,
                last_seen: now,
                suppressed: 0,
            });
        b.last_seen = now;
        b.refill(now);
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            let suppressed = std::mem::take(&mut b.suppressed);
            return Decision::Log { suppressed };
        }
        b.suppressed = b.suppressed.saturating_add(1);
        if b.suppressed == 1 {
            Decision::StartSuppressing
        } else {
            Decision::Suppress
        }
    }

    /// Keeps the map under [`MAX_BUCKETS`]: drops idle buckets, then the least
    /// recently seen one (its pending count is lost, as in upstream's LRU).
    fn make_room(&mut self, now: Instant) {
        if self.buckets.len() < MAX_BUCKETS {
            return;
        }
        self.buckets.retain(|_, b| !b.idle(now));
        if self.buckets.len() < MAX_BUCKETS {
            return;
        }
        let oldest = self
            .buckets
            .iter()
            .min_by_key(|(_, b)| b.last_seen)
            .map(|(k, _)| k.clone());
        if let Some(k) = oldest {
            self.buckets.remove(&k);
        }
    }

    #[cfg(test)]
    /// Buckets held (for tests).
    pub(crate) fn len(&self) -> usize {
        self.buckets.len()
    }
}

/// The process-wide filter every event goes through.
static RECORDER: Mutex<SpamFilter> = Mutex::new(SpamFilter::new());

/// Upstream's broadcaster queue (`maxQueuedEvents`): events waiting for the `events`
/// loop; more are dropped, never waited for.
pub(crate) const QUEUE_CAPACITY: usize = 1000;

/// One event on its way to the API server: what the `events` loop needs to write a
/// core/v1 Event (it adds the source, the node and the name).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Recorded {
    /// The object the event is about (a pod, with a container's `fieldPath`, or the
    /// node).
    pub object: ObjectReference,
    /// `Warning` rather than `Normal`.
    pub warning: bool,
    /// The reason (`Pulled`, `BackOff` …).
    pub reason: String,
    /// The message.
    pub message: String,
    /// When it was recorded.
    pub at: SystemTime,
}

/// The sending side of the events queue, and the count of events it dropped.
#[derive(Debug)]
pub(crate) struct Sink {
    tx: BoundedSender<Recorded>,
    dropped: AtomicU64,
}

impl Sink {
    /// A sink offering to `tx` (bounded: [`QUEUE_CAPACITY`]).
    pub(crate) fn new(tx: BoundedSender<Recorded>) -> Self {
        Sink {
            tx,
            dropped: AtomicU64::new(0),
        }
    }

    /// Queues `r` if there is room; otherwise drops and counts it. Never blocks.
    pub(crate) fn offer(&self, r: Recorded) -> bool {
        match self.tx.try_send(r) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// Events dropped so far because the queue was full (or its loop gone).
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// Where recorded events go besides the log: set once, by the wiring, when there is
/// an API server to write them to.
static SINK: OnceLock<Sink> = OnceLock::new();

/// Sends every event recorded from now on to `tx` as well (the `events` loop's
/// queue). Only the first call takes effect; false for a later one.
pub(crate) fn set_sink(tx: BoundedSender<Recorded>) -> bool {
    SINK.set(Sink::new(tx)).is_ok()
}

/// Events dropped because the `events` queue was full (0 without an API server).
pub fn dropped() -> u64 {
    SINK.get().map_or(0, Sink::dropped)
}

/// The reference to `pod` that its events carry (upstream `ref.GetReference`, and
/// `GenerateContainerRef` with a container: its `fieldPath`,
/// `spec.containers{c}`, `spec.initContainers{c}` or `spec.ephemeralContainers{c}`
/// from where the spec has it; none when the spec has no such container).
pub(crate) fn pod_reference(pod: &Pod, container: Option<&str>) -> ObjectReference {
    let field_path = container.and_then(|c| {
        let spec = pod.spec.as_ref()?;
        let has = |list: &[k8s_openapi::api::core::v1::Container]| list.iter().any(|x| x.name == c);
        if has(&spec.containers) {
            Some(format!("spec.containers{{{c}}}"))
        } else if spec.init_containers.as_deref().is_some_and(has) {
            Some(format!("spec.initContainers{{{c}}}"))
        } else if spec
            .ephemeral_containers
            .as_deref()
            .is_some_and(|l| l.iter().any(|x| x.name == c))
        {
            Some(format!("spec.ephemeralContainers{{{c}}}"))
        } else {
            None
        }
    });
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: pod.metadata.namespace.clone(),
        name: pod.metadata.name.clone(),
        uid: pod.metadata.uid.clone(),
        resource_version: pod.metadata.resource_version.clone(),
        field_path,
    }
}

/// The node's reference (upstream's `nodeRef`: kind `Node`, the name as its UID, no
/// namespace, so its events go to `default`).
pub(crate) fn node_reference(node: &str) -> ObjectReference {
    ObjectReference {
        kind: Some("Node".into()),
        name: Some(node.into()),
        uid: Some(node.into()),
        ..ObjectReference::default()
    }
}

/// Records an event about `pod` (and one of its containers): logs it as upstream
/// would record it, unless its pod has logged too many of this type and reason, and
/// offers it to the API server's queue when there is one.
pub fn event(pod: &Pod, container: Option<&str>, warning: bool, reason: &str, message: &str) {
    let (ns, name) = pod_names(pod);
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let object = || pod_reference(pod, container);
    pod_event(ns, name, uid, container, warning, reason, message, object);
}

/// Records an event about an app container of the pod `namespace/name` (`uid`) for a
/// caller that holds the pod's identity but not its object (the prober): as
/// [`event`], the reference's `fieldPath` `spec.containers{container}`.
pub(crate) fn container_event(
    namespace: &str,
    name: &str,
    uid: &str,
    container: &str,
    warning: bool,
    reason: &str,
    message: &str,
) {
    let object = || ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(namespace.into()),
        name: Some(name.into()),
        uid: Some(uid.into()).filter(|u: &String| !u.is_empty()),
        field_path: Some(format!("spec.containers{{{container}}}")),
        ..ObjectReference::default()
    };
    pod_event(
        namespace,
        name,
        uid,
        Some(container),
        warning,
        reason,
        message,
        object,
    );
}

#[allow(clippy::too_many_arguments)]
fn pod_event(
    ns: &str,
    name: &str,
    uid: &str,
    container: Option<&str>,
    warning: bool,
    reason: &str,
    message: &str,
    object: impl FnOnce() -> ObjectReference,
) {
    let subject = match container {
        Some(c) => format!("pod/{ns}/{name} container {c}"),
        None => format!("pod/{ns}/{name}"),
    };
    let kind = if warning { "Warning" } else { "Normal" };
    let passed = emit(uid, ns, name, warning, &format!("{kind} {reason}"), || {
        format!("event: {kind} {reason} {subject}: {message}")
    });
    if passed {
        offer(object, warning, reason, message);
    }
}

/// Records an event about the node `node` (`Starting`, `NodeReady`,
/// `NodeHasSufficientMemory` …): logged as `event: <Type> <reason> node/<node>: <message>`
/// through the same limiter, keyed by the node, and offered to the API server's queue.
pub(crate) fn node_event(node: &str, warning: bool, reason: &str, message: &str) {
    let kind = if warning { "Warning" } else { "Normal" };
    let key = format!("node\u{0}{node}\u{0}{kind} {reason}");
    let decision = lock(&RECORDER).observe(&key, Instant::now());
    let line = match decision {
        Decision::Log { .. } => format!("event: {kind} {reason} node/{node}: {message}"),
        Decision::StartSuppressing => format!(
            "too many {kind} {reason} lines for node/{node}; suppressing them \
             (at most {SPAM_BURST} at once, then 1 every {}s)",
            SPAM_REFILL.as_secs()
        ),
        Decision::Suppress => return,
    };
    if warning {
        log::warn!("{line}");
    } else {
        log::info!("{line}");
    }
    if matches!(decision, Decision::Log { .. }) {
        offer(|| node_reference(node), warning, reason, message);
    }
}

/// Offers an event to the API server's queue, if there is one (the reference is only
/// built then).
fn offer(object: impl FnOnce() -> ObjectReference, warning: bool, reason: &str, message: &str) {
    if let Some(sink) = SINK.get() {
        sink.offer(Recorded {
            object: object(),
            warning,
            reason: reason.into(),
            message: message.into(),
            at: SystemTime::now(),
        });
    }
}

/// Logs a warning about `pod` that repeats every sync while a condition lasts (a
/// container waiting in `ImagePullBackOff`, say), through the same limiter as events,
/// keyed by the pod and `reason`. `line` is only formatted when it is logged. It is a
/// log line only, never an API event.
pub(crate) fn warn_limited(pod: &Pod, reason: &str, line: impl FnOnce() -> String) {
    let (ns, name) = pod_names(pod);
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    emit(uid, ns, name, true, reason, line);
}

fn pod_names(pod: &Pod) -> (&str, &str) {
    (
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// The one path every limited line takes: the pod's bucket for `what`, then the line.
/// True when the line was logged (the event passed the limiter).
fn emit(
    uid: &str,
    ns: &str,
    name: &str,
    warning: bool,
    what: &str,
    line: impl FnOnce() -> String,
) -> bool {
    // The UID names the pod across renames; ns/name for a pod without one.
    let key = format!("{uid}\u{0}{ns}/{name}\u{0}{what}");
    let decision = lock(&RECORDER).observe(&key, Instant::now());
    let text = match decision {
        Decision::Log { suppressed: 0 } => line(),
        Decision::Log { suppressed } => format!(
            "{} ({suppressed} more {what} lines of pod/{ns}/{name} were suppressed before this one)",
            line()
        ),
        Decision::StartSuppressing => format!(
            "too many {what} lines for pod/{ns}/{name}; suppressing them \
             (at most {SPAM_BURST} at once, then 1 every {}s)",
            SPAM_REFILL.as_secs()
        ),
        Decision::Suppress => return false,
    };
    if warning {
        log::warn!("{text}");
    } else {
        log::info!("{text}");
    }
    matches!(decision, Decision::Log { .. })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_passes_then_one_per_refill_and_the_next_line_counts_the_rest() {
        let mut c = SpamFilter::new();
        let t0 = Instant::now();
        for i in 0..SPAM_BURST {
            assert_eq!(
                c.observe("pod-a/BackOff", t0),
                Decision::Log { suppressed: 0 },
                "event {i} of the burst"
            );
        }
        assert_eq!(c.observe("pod-a/BackOff", t0), Decision::StartSuppressing);
        for _ in 0..99 {
            assert_eq!(
                c.observe("pod-a/BackOff", t0 + Duration::from_secs(10)),
                Decision::Suppress
            );
        }
        // Another pod, or another reason of the same pod, has its own bucket.
        assert_eq!(
            c.observe("pod-b/BackOff", t0),
            Decision::Log { suppressed: 0 }
        );
        assert_eq!(
            c.observe("pod-a/Failed", t0),
            Decision::Log { suppressed: 0 }
        );
        // Not quite a refill period later: still dry.
        assert_eq!(
            c.observe("pod-a/BackOff", t0 + SPAM_REFILL - Duration::from_secs(1)),
            Decision::Suppress
        );
        // One token back: one line, which says how many were held back.
        assert_eq!(
            c.observe("pod-a/BackOff", t0 + SPAM_REFILL),
            Decision::Log { suppressed: 101 }
        );
        assert_eq!(
            c.observe("pod-a/BackOff", t0 + SPAM_REFILL),
            Decision::StartSuppressing
        );
        // Long quiet: the whole burst is back, capped.
        let later = t0 + SPAM_REFILL * 1000;
        for _ in 0..SPAM_BURST {
            assert!(matches!(
                c.observe("pod-a/BackOff", later),
                Decision::Log { .. }
            ));
        }
        assert_eq!(
            c.observe("pod-a/BackOff", later),
            Decision::StartSuppressing
        );
    }

    #[test]
    fn lines_per_key_are_bounded_by_burst_plus_elapsed_refills() {
        // 1000 events a second for 20 minutes: at most burst + 4 refills logged, plus
        // one "suppressing" note per dry spell.
        let mut c = SpamFilter::new();
        let t0 = Instant::now();
        let (mut logged, mut notes) = (0u64, 0u64);
        for ms in 0..1_200_000u64 {
            match c.observe("k", t0 + Duration::from_millis(ms)) {
                Decision::Log { .. } => logged += 1,
                Decision::StartSuppressing => notes += 1,
                Decision::Suppress => {}
            }
        }
        assert_eq!(
            logged,
            u64::from(SPAM_BURST) + 3,
            "refills at 300, 600, 900 s"
        );
        assert_eq!(notes, 4);
    }

    #[test]
    fn the_map_is_bounded_and_drops_idle_buckets_first() {
        let mut c = SpamFilter::new();
        let t0 = Instant::now();
        for i in 0..MAX_BUCKETS {
            c.observe(&format!("k{i}"), t0);
        }
        assert_eq!(c.len(), MAX_BUCKETS);
        // Long after, every bucket is full again: all dropped to make room.
        c.observe("new", t0 + SPAM_REFILL * 2);
        assert_eq!(c.len(), 1);
        for i in 0..MAX_BUCKETS + 10 {
            c.observe(&format!("j{i}"), t0 + SPAM_REFILL * 2);
        }
        assert_eq!(
            c.len(),
            MAX_BUCKETS,
            "busy buckets: the least recently seen go"
        );
    }

    #[test]
    fn a_full_queue_drops_and_counts_without_waiting() {
        let (tx, rx) = base::chan::bounded(2);
        let sink = Sink::new(tx);
        let r = Recorded {
            object: node_reference("n"),
            warning: false,
            reason: "Starting".into(),
            message: "Starting kubelet.".into(),
            at: SystemTime::now(),
        };
        assert!(sink.offer(r.clone()));
        assert!(sink.offer(r.clone()));
        assert!(!sink.offer(r.clone()), "full: dropped at once");
        assert_eq!(sink.dropped(), 1);
        assert_eq!(rx.try_recv().ok(), Some(r.clone()));
        assert!(sink.offer(r.clone()));
        drop(rx);
        assert!(!sink.offer(r), "no loop: dropped too");
        assert_eq!(sink.dropped(), 2);
    }
}
