//! The `events` loop: with an API server (`--kubeconfig`), every event the recorder
//! (`src/record.rs`) lets through is written as a core/v1 Event, as the kubelet's
//! legacy recorder does (client-go `tools/record`: `event.go` `recordToSink`,
//! `events_cache.go` `EventCorrelator`).
//!
//! - [`make_event`] builds the Event: `<object>.<hex unix nanos>` in the object's
//!   namespace (`default` for the node), source `kubelet`/node, reporting component
//!   and instance, count 1, first and last timestamps, no `eventTime`.
//! - [`Correlator`] (`correlator.rs`) is client-go's aggregator and logger (the spam filter is the
//!   recorder's, one filter for log lines and Events): more than 10 similar events
//!   (same source, object, type and reason; other messages) within 10 minutes become
//!   one event whose message starts `(combined from similar events): `; the same
//!   event again is a strategic-merge PATCH of `count`, `lastTimestamp` and `message`
//!   of the Event already written. Both caches are LRUs of 4096 entries. Pure, `now`
//!   passed in.
//! - [`Writer`] makes the writes through an [`EventSink`] (the API client; a fake in
//!   the tests): a PATCH answered 404 creates the event again; an unreachable API
//!   server puts the write on a retry list (10 s apart, at most 12 tries, bounded) and
//!   pauses the loop, so the recorder's queue fills and drops (counted) while nothing
//!   that records ever waits; a refusal (4xx) is dropped, as client-go does.
//!
//! The loop reads the queue (bounded, [`record::QUEUE_CAPACITY`]), the due retries,
//! and every second copies the drop counts to `/metrics`
//! (`rkubelet_events_dropped_total`) and logs them at most once a minute.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver};
use k8s_openapi::api::core::v1::{Event, EventSource};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::metrics::KubeletMetrics;
use crate::record::{self, Recorded};
use apiclient::{ApiClient, ApiError};
use base::loops::{error_chain, LoopHandle, Loops, SpawnError, Stop};
use base::time::k8s_time;
use correlator::{s, time_nanos};
pub(crate) use correlator::{Correlator, Write};

mod correlator;

/// Upstream's `maxTriesPerEvent`.
pub(crate) const MAX_TRIES: u32 = 12;
/// Upstream's `sleepDuration` between tries; also how long the loop pauses after the
/// API server could not be reached.
pub(crate) const RETRY_SLEEP: Duration = Duration::from_secs(10);
/// Each create or patch is one request within this.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// A write not made this long after its first try is dropped (upstream: 12 tries
/// 10 s apart).
pub(crate) const MAX_AGE: Duration = Duration::from_secs(RETRY_SLEEP.as_secs() * MAX_TRIES as u64);
/// Writes waiting for another try; more drop the oldest (upstream keeps one, blocking
/// the whole stream while it sleeps).
pub(crate) const MAX_PENDING: usize = 1000;
/// Drops are logged at most this often.
pub(crate) const DROP_LOG_PERIOD: Duration = Duration::from_secs(60);
/// The component events are from.
pub(crate) const COMPONENT: &str = "kubelet";

/// The Event for `r` from the kubelet on `node` (client-go `recorder.makeEvent`).
pub(crate) fn make_event(r: &Recorded, node: &str) -> Event {
    let nanos = time_nanos(r.at);
    let object = r.object.name.as_deref().unwrap_or_default();
    let namespace = r
        .object
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".into());
    let at = k8s_time(r.at);
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{object}.{nanos:x}")),
            namespace: Some(namespace),
            ..ObjectMeta::default()
        },
        involved_object: r.object.clone(),
        reason: Some(r.reason.clone()),
        message: Some(r.message.clone()),
        first_timestamp: Some(at.clone()),
        last_timestamp: Some(at),
        count: Some(1),
        type_: Some(if r.warning { "Warning" } else { "Normal" }.into()),
        source: Some(EventSource {
            component: Some(COMPONENT.into()),
            host: Some(node.into()),
        }),
        reporting_component: Some(COMPONENT.into()),
        reporting_instance: Some(node.into()),
        ..Event::default()
    }
}

/// Where events are written: the API server, or a fake in the tests.
pub(crate) trait EventSink {
    /// Creates `event`; returns what was stored.
    fn create(&self, event: &Event) -> Result<Event, ApiError>;
    /// Patches the Event `namespace/name`; returns what was stored.
    fn patch(
        &self,
        namespace: &str,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<Event, ApiError>;
}

impl<T: EventSink + ?Sized> EventSink for Arc<T> {
    fn create(&self, event: &Event) -> Result<Event, ApiError> {
        (**self).create(event)
    }

    fn patch(
        &self,
        namespace: &str,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<Event, ApiError> {
        (**self).patch(namespace, name, patch)
    }
}

impl EventSink for ApiClient {
    fn create(&self, event: &Event) -> Result<Event, ApiError> {
        self.create_event(event, REQUEST_TIMEOUT)
    }

    fn patch(
        &self,
        namespace: &str,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<Event, ApiError> {
        self.patch_event(namespace, name, patch, REQUEST_TIMEOUT)
    }
}

/// A write waiting for its next try.
#[derive(Debug)]
struct Pending {
    key: String,
    write: Write,
    tries: u32,
    due: Instant,
    first: Instant,
}

/// What one write came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Stored.
    Written,
    /// The server could not be reached: tried again later (or dropped after
    /// [`MAX_TRIES`]); the loop pauses.
    Retry,
    /// Already there (a retried create that had landed): nothing to do.
    Exists,
    /// Refused by the server: dropped. The HTTP status, for the loop's state.
    Refused(Option<u16>),
}

/// Events not written, by why (the `reason` label of `rkubelet_events_dropped_total`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Dropped {
    /// The recorder's queue was full.
    pub queue_full: u64,
    /// [`MAX_TRIES`] tries failed, or the retry list was full.
    pub retries_exhausted: u64,
    /// The server refused it.
    pub refused: u64,
}

impl Dropped {
    fn total(&self) -> u64 {
        self.queue_full + self.retries_exhausted + self.refused
    }
}

/// The correlator and the writes through one sink, with the retry list: everything
/// the loop does but waiting.
#[derive(Debug)]
pub(crate) struct Writer<S> {
    sink: S,
    node: String,
    correlator: Correlator,
    retries: VecDeque<Pending>,
    /// The loop reads nothing before this (the API server was unreachable).
    pub paused_until: Option<Instant>,
    /// Writes given up here (the queue's drops are the recorder's).
    pub dropped: Dropped,
    /// Events written.
    pub written: u64,
}

impl<S: EventSink> Writer<S> {
    /// A writer for the kubelet on `node`.
    pub(crate) fn new(sink: S, node: &str) -> Self {
        Writer {
            sink,
            node: node.to_string(),
            correlator: Correlator::default(),
            retries: VecDeque::new(),
            paused_until: None,
            dropped: Dropped::default(),
            written: 0,
        }
    }

    #[cfg(test)]
    /// Writes waiting for another try.
    pub(crate) fn pending(&self) -> usize {
        self.retries.len()
    }

    /// When the next retry is due.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.retries.front().map(|p| p.due)
    }

    /// Correlates and writes one recorded event.
    pub(crate) fn handle(&mut self, r: &Recorded, now: Instant) -> Outcome {
        let event = make_event(r, &self.node);
        let c = self.correlator.correlate(event, r.at);
        // A newer write of the same event carries all the older one would have.
        self.retries.retain(|p| p.key != c.key);
        self.attempt(
            Pending {
                key: c.key,
                write: c.write,
                tries: 0,
                due: now,
                first: now,
            },
            now,
        )
    }

    /// Tries again every write that is due (stopping when the server is found
    /// unreachable again).
    pub(crate) fn retry_due(&mut self, now: Instant) {
        while self.retries.front().is_some_and(|p| p.due <= now) {
            let Some(p) = self.retries.pop_front() else {
                break;
            };
            if now.saturating_duration_since(p.first) >= MAX_AGE {
                self.give_up(&p, "too old");
                continue;
            }
            if self.attempt(p, now) == Outcome::Retry {
                return;
            }
        }
    }

    fn give_up(&mut self, p: &Pending, why: &str) {
        self.dropped.retries_exhausted += 1;
        log::debug!(
            "event {}: dropped after {} tries: {why}",
            s(&p.write.event().metadata.name),
            p.tries
        );
    }

    fn attempt(&mut self, mut p: Pending, now: Instant) -> Outcome {
        let result = match &p.write {
            Write::Create(e) => self.sink.create(e),
            Write::Patch { event, patch } => {
                let ns = s(&event.metadata.namespace);
                let name = s(&event.metadata.name);
                match self.sink.patch(ns, name, patch) {
                    // Removed since (an hour's TTL, or by hand): create it again.
                    Err(e) if e.is_not_found() => {
                        let mut again = event.clone();
                        again.metadata.resource_version = None;
                        self.sink.create(&again)
                    }
                    other => other,
                }
            }
        };
        match result {
            Ok(saved) => {
                self.correlator.update_state(&p.key, &saved);
                self.written += 1;
                Outcome::Written
            }
            Err(e) if e.is_unreachable() => {
                p.tries += 1;
                self.paused_until = Some(now + RETRY_SLEEP);
                if p.tries >= MAX_TRIES || now.saturating_duration_since(p.first) >= MAX_AGE {
                    self.give_up(&p, &error_chain(&e));
                } else {
                    if self.retries.len() >= MAX_PENDING {
                        self.retries.pop_front();
                        self.dropped.retries_exhausted += 1;
                    }
                    p.due = now + RETRY_SLEEP;
                    self.retries.push_back(p);
                }
                Outcome::Retry
            }
            Err(e) if e.is_already_exists() => {
                log::debug!("event already written: {}", error_chain(&e));
                Outcome::Exists
            }
            Err(e) => {
                self.dropped.refused += 1;
                log::debug!("event refused: {}", error_chain(&e));
                Outcome::Refused(e.code())
            }
        }
    }
}

/// Starts the `events` loop writing through `api` for `node`, and points the recorder
/// at its queue. Records the node's `Starting` event once the loop is there.
pub(crate) fn start(
    loops: &Loops,
    api: Arc<ApiClient>,
    node: &str,
    metrics: Arc<KubeletMetrics>,
) -> Result<(), SpawnError> {
    let (tx, rx) = base::chan::bounded(record::QUEUE_CAPACITY);
    if !record::set_sink(tx) {
        log::warn!("events: the recorder already sends its events elsewhere");
        return Ok(());
    }
    // Every reason at 0 from the start, so a scrape shows the family before a drop.
    for reason in ["queue_full", "retries_exhausted", "refused"] {
        metrics.events_dropped.add([reason], 0);
    }
    let mut writer = Writer::new(api, node);
    loops.spawn("events", move |stop, handle| {
        run(&mut writer, &rx, &stop, &handle, &metrics);
    })
}

/// The loop: pause while the server is away, retries when due, then the queue.
fn run<S: EventSink>(
    w: &mut Writer<S>,
    rx: &Receiver<Recorded>,
    stop: &Stop,
    handle: &LoopHandle,
    metrics: &KubeletMetrics,
) {
    let mut drops = DropReport::new(Instant::now());
    loop {
        let now = Instant::now();
        drops.update(&w.dropped, record::dropped(), metrics, now);
        if let Some(until) = w.paused_until {
            if now < until {
                if stop.sleep((until - now).min(Duration::from_secs(1))) {
                    return;
                }
                continue;
            }
            w.paused_until = None;
        }
        if w.next_due().is_some_and(|d| d <= now) {
            let began = handle.begin_tick();
            w.retry_due(now);
            handle.end_tick(began, w.paused_until.map(|_| unreachable_note()));
            continue;
        }
        let wait = w
            .next_due()
            .map_or(Duration::from_secs(1), |d| d.saturating_duration_since(now))
            .min(Duration::from_secs(1));
        select! {
            recv(rx) -> r => {
                let Ok(r) = r else { return };
                let began = handle.begin_tick();
                let out = w.handle(&r, Instant::now());
                let err = match out {
                    Outcome::Written | Outcome::Exists => None,
                    Outcome::Retry => Some(unreachable_note()),
                    // One line per kind of refusal; each event's at debug.
                    Outcome::Refused(code) => Some(format!(
                        "the API server refused an event ({}); dropped",
                        code.map_or("no status".into(), |c| format!("HTTP {c}"))
                    )),
                };
                handle.end_tick(began, err);
            }
            recv(stop.receiver()) -> _ => return,
            default(wait) => {}
        }
    }
}

fn unreachable_note() -> String {
    format!(
        "the API server is unreachable: events wait {}s; the queue drops when full",
        RETRY_SLEEP.as_secs()
    )
}

/// Copies the drop counts to `/metrics` and logs them at most once a minute.
#[derive(Debug)]
struct DropReport {
    seen: Dropped,
    logged: Dropped,
    last_log: Instant,
}

impl DropReport {
    fn new(now: Instant) -> Self {
        DropReport {
            seen: Dropped::default(),
            logged: Dropped::default(),
            last_log: now.checked_sub(DROP_LOG_PERIOD).unwrap_or(now),
        }
    }

    fn update(&mut self, w: &Dropped, queue_full: u64, m: &KubeletMetrics, now: Instant) {
        let cur = Dropped { queue_full, ..*w };
        for (reason, new, old) in [
            ("queue_full", cur.queue_full, self.seen.queue_full),
            (
                "retries_exhausted",
                cur.retries_exhausted,
                self.seen.retries_exhausted,
            ),
            ("refused", cur.refused, self.seen.refused),
        ] {
            if new > old {
                m.events_dropped.add([reason], new - old);
            }
        }
        self.seen = cur;
        if cur.total() > self.logged.total()
            && now.saturating_duration_since(self.last_log) >= DROP_LOG_PERIOD
        {
            log::warn!(
                "events: {} not written to the API server since the last note ({} with the \
                 queue full, {} after {MAX_TRIES} tries, {} refused)",
                cur.total() - self.logged.total(),
                cur.queue_full - self.logged.queue_full,
                cur.retries_exhausted - self.logged.retries_exhausted,
                cur.refused - self.logged.refused,
            );
            self.logged = cur;
            self.last_log = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, ObjectReference, Pod, PodSpec};
    use std::cell::RefCell;
    use std::time::SystemTime;

    fn pod() -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("ns1".into()),
                uid: Some("u-1".into()),
                resource_version: Some("42".into()),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "app".into(),
                    ..Container::default()
                }],
                init_containers: Some(vec![Container {
                    name: "setup".into(),
                    ..Container::default()
                }]),
                ..PodSpec::default()
            }),
            ..Pod::default()
        }
    }

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
    }

    fn rec(container: Option<&str>, reason: &str, message: &str, t: SystemTime) -> Recorded {
        Recorded {
            object: record::pod_reference(&pod(), container),
            warning: reason == "BackOff",
            reason: reason.into(),
            message: message.into(),
            at: t,
        }
    }

    #[test]
    fn the_event_is_the_legacy_recorders() {
        let r = rec(Some("app"), "Started", "Started container app", at(0));
        let e = make_event(&r, "node-1");
        let v = serde_json::to_value(&e).expect("encodes");
        assert_eq!(
            v["metadata"],
            serde_json::json!({"name": format!("web.{:x}", 1_700_000_000u128 * 1_000_000_000), "namespace": "ns1"})
        );
        assert_eq!(
            v["involvedObject"],
            serde_json::json!({"apiVersion": "v1", "kind": "Pod", "namespace": "ns1",
                "name": "web", "uid": "u-1", "resourceVersion": "42",
                "fieldPath": "spec.containers{app}"})
        );
        assert_eq!(
            v["source"],
            serde_json::json!({"component": "kubelet", "host": "node-1"})
        );
        assert_eq!(v["reportingComponent"], "kubelet");
        assert_eq!(v["reportingInstance"], "node-1");
        assert_eq!(v["type"], "Normal");
        assert_eq!(v["count"], 1);
        assert_eq!(v["firstTimestamp"], "2023-11-14T22:13:20Z");
        assert_eq!(v["lastTimestamp"], v["firstTimestamp"]);
        assert!(v.get("eventTime").is_none_or(|t| t.is_null()));

        // An init container's path; the pod itself has none; the node's in default.
        let init = record::pod_reference(&pod(), Some("setup"));
        assert_eq!(
            init.field_path.as_deref(),
            Some("spec.initContainers{setup}")
        );
        assert_eq!(record::pod_reference(&pod(), None).field_path, None);
        assert_eq!(record::pod_reference(&pod(), Some("nope")).field_path, None);
        let node = Recorded {
            object: record::node_reference("node-1"),
            warning: false,
            reason: "Starting".into(),
            message: "Starting kubelet.".into(),
            at: at(0),
        };
        let e = make_event(&node, "node-1");
        assert_eq!(e.metadata.namespace.as_deref(), Some("default"));
        assert!(e
            .metadata
            .name
            .as_deref()
            .expect("named")
            .starts_with("node-1."));
        assert_eq!(
            e.involved_object,
            ObjectReference {
                kind: Some("Node".into()),
                name: Some("node-1".into()),
                uid: Some("node-1".into()),
                ..ObjectReference::default()
            }
        );
    }

    /// A sink that answers from a script and records the calls.
    #[derive(Default)]
    struct FakeSink {
        calls: RefCell<Vec<String>>,
        answers: RefCell<VecDeque<Result<(), u16>>>,
    }

    fn status(code: u16, reason: &str) -> ApiError {
        ApiError::Status {
            what: "t",
            url: String::new(),
            code,
            reason: reason.into(),
            message: String::new(),
        }
    }

    impl FakeSink {
        fn answer(&self, e: &Event) -> Result<Event, ApiError> {
            match self.answers.borrow_mut().pop_front().unwrap_or(Ok(())) {
                Ok(()) => {
                    let mut saved = e.clone();
                    saved.metadata.resource_version = Some("7".into());
                    Ok(saved)
                }
                Err(0) => Err(ApiError::Stream {
                    what: "t",
                    url: String::new(),
                    source: std::io::Error::other("connection refused"),
                }),
                Err(409) => Err(status(409, "AlreadyExists")),
                Err(code) => Err(status(code, "")),
            }
        }
    }

    impl EventSink for &FakeSink {
        fn create(&self, e: &Event) -> Result<Event, ApiError> {
            self.calls
                .borrow_mut()
                .push(format!("create {}", s(&e.message)));
            self.answer(e)
        }

        fn patch(&self, _: &str, _: &str, p: &serde_json::Value) -> Result<Event, ApiError> {
            self.calls
                .borrow_mut()
                .push(format!("patch {}", p["count"]));
            let e = Event {
                count: p["count"].as_i64().and_then(|c| i32::try_from(c).ok()),
                ..Event::default()
            };
            self.answer(&e)
        }
    }

    #[test]
    fn a_patch_of_a_removed_event_creates_it_again() {
        let fake = FakeSink::default();
        let mut w = Writer::new(&fake, "n");
        let t = Instant::now();
        let r = rec(Some("app"), "BackOff", "Back-off", at(0));
        assert_eq!(w.handle(&r, t), Outcome::Written);
        fake.answers.borrow_mut().push_back(Err(404));
        assert_eq!(w.handle(&r, t), Outcome::Written);
        assert_eq!(
            *fake.calls.borrow(),
            ["create Back-off", "patch 2", "create Back-off"]
        );
        assert_eq!(w.written, 2);
        // Refusals are dropped and counted; an existing name is no loss.
        fake.answers.borrow_mut().extend([Err(403), Err(409)]);
        let other = rec(None, "Pulled", "x", at(1));
        assert_eq!(w.handle(&other, t), Outcome::Refused(Some(403)));
        let third = rec(None, "Pulled", "y", at(1));
        assert_eq!(w.handle(&third, t), Outcome::Exists);
        assert_eq!(w.dropped.refused, 1);
        assert_eq!(w.pending(), 0);
    }

    #[test]
    fn an_unreachable_server_pauses_and_retries_12_times_10s_apart() {
        let fake = FakeSink::default();
        let mut w = Writer::new(&fake, "n");
        let t0 = Instant::now();
        fake.answers.borrow_mut().extend((0..20).map(|_| Err(0)));
        let r = rec(None, "Pulled", "x", at(0));
        assert_eq!(w.handle(&r, t0), Outcome::Retry);
        assert_eq!(w.paused_until, Some(t0 + RETRY_SLEEP));
        assert_eq!(w.pending(), 1);
        // Not due yet: nothing sent.
        w.retry_due(t0 + RETRY_SLEEP - Duration::from_millis(1));
        assert_eq!(fake.calls.borrow().len(), 1);
        let mut now = t0;
        for _ in 1..MAX_TRIES {
            now += RETRY_SLEEP;
            w.retry_due(now);
        }
        assert_eq!(fake.calls.borrow().len(), MAX_TRIES as usize);
        assert_eq!(w.pending(), 0, "given up");
        assert_eq!(w.dropped.retries_exhausted, 1);
        // Back: the next one is written.
        fake.answers.borrow_mut().clear();
        assert_eq!(
            w.handle(&rec(None, "Pulled", "y", at(200)), now),
            Outcome::Written
        );
    }

    #[test]
    fn a_write_older_than_12_tries_is_dropped_without_another_try() {
        let fake = FakeSink::default();
        let mut w = Writer::new(&fake, "n");
        let t0 = Instant::now();
        fake.answers.borrow_mut().push_back(Err(0));
        assert_eq!(
            w.handle(&rec(None, "Pulled", "x", at(0)), t0),
            Outcome::Retry
        );
        // The loop was paused far longer (other writes kept failing first).
        w.retry_due(t0 + MAX_AGE);
        assert_eq!(fake.calls.borrow().len(), 1, "no try after its time");
        assert_eq!(w.pending(), 0);
        assert_eq!(w.dropped.retries_exhausted, 1);
    }

    #[test]
    fn a_newer_write_of_the_same_event_replaces_its_pending_retry() {
        let fake = FakeSink::default();
        let mut w = Writer::new(&fake, "n");
        let t0 = Instant::now();
        fake.answers.borrow_mut().push_back(Err(0));
        let r = rec(Some("app"), "BackOff", "Back-off", at(0));
        assert_eq!(w.handle(&r, t0), Outcome::Retry);
        assert_eq!(w.pending(), 1);
        // The next repeat: a patch (count 2), 404 since the create never landed, so
        // created with count 2; the stale create is no longer pending.
        fake.answers.borrow_mut().push_back(Err(404));
        assert_eq!(w.handle(&r, t0 + RETRY_SLEEP), Outcome::Written);
        assert_eq!(w.pending(), 0);
        assert_eq!(
            *fake.calls.borrow(),
            ["create Back-off", "patch 2", "create Back-off"]
        );
    }

    #[test]
    fn the_retry_list_is_bounded() {
        let fake = FakeSink::default();
        let mut w = Writer::new(&fake, "n");
        let t0 = Instant::now();
        fake.answers
            .borrow_mut()
            .extend((0..MAX_PENDING + 5).map(|_| Err(0)));
        for i in 0..MAX_PENDING + 5 {
            let mut r = rec(None, "Pulled", "m", at(0));
            r.object.name = Some(format!("pod{i}"));
            w.handle(&r, t0);
        }
        assert_eq!(w.pending(), MAX_PENDING);
        assert_eq!(w.dropped.retries_exhausted, 5);
    }

    #[test]
    fn drops_reach_the_metrics_and_are_logged_at_most_once_a_minute() {
        let m = KubeletMetrics::new(Arc::new(base::loops::LoopRegistry::default()));
        let t0 = Instant::now();
        let mut d = DropReport::new(t0);
        let w = Dropped {
            refused: 2,
            ..Dropped::default()
        };
        d.update(&w, 5, &m, t0);
        assert_eq!(d.logged.total(), 7, "the first drops are logged at once");
        d.update(&w, 9, &m, t0 + Duration::from_secs(1));
        assert_eq!(d.logged.total(), 7, "then not within a minute");
        d.update(&w, 9, &m, t0 + DROP_LOG_PERIOD);
        assert_eq!(d.logged.total(), 11);
        let text = m.render();
        assert!(
            text.contains("rkubelet_events_dropped_total{reason=\"queue_full\"} 9"),
            "{text}"
        );
        assert!(text.contains("rkubelet_events_dropped_total{reason=\"refused\"} 2"));
    }
}
