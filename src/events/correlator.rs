//! client-go's `EventCorrelator` less its spam filter (`tools/record/events_cache.go`;
//! the filter is the recorder's, one for log lines and Events): the aggregator, which
//! turns more than 10 similar events (same source, object, type and reason; other
//! messages) within 10 minutes into one event whose message starts
//! `(combined from similar events): `, and the logger, which turns the same event seen
//! again into a strategic-merge PATCH of `count`, `lastTimestamp` and `message` of the
//! Event written first. Both caches are LRUs of 4096 entries. Pure: `now` is passed in.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use base::time::k8s_time;

/// Upstream's `maxLruCacheEntries`: the most aggregation and logger records kept.
pub(crate) const MAX_LRU_ENTRIES: usize = 4096;
/// Upstream's `defaultAggregateMaxEvents`: similar events (other messages) before
/// they are combined.
pub(crate) const AGGREGATE_MAX_EVENTS: usize = 10;
/// Upstream's `defaultAggregateIntervalInSeconds`: a quiet spell this long starts the
/// similar-events count again.
pub(crate) const AGGREGATE_INTERVAL: Duration = Duration::from_secs(600);
/// The message prefix of a combined event (upstream `EventAggregatorByReasonMessageFunc`).
pub(crate) const AGGREGATE_PREFIX: &str = "(combined from similar events): ";
pub(super) fn s(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or_default()
}

/// The parts every key starts with: the source and the object (without its field path).
fn object_parts(e: &Event) -> [&str; 7] {
    let src = e.source.as_ref();
    let o = &e.involved_object;
    [
        src.and_then(|x| x.component.as_deref()).unwrap_or_default(),
        src.and_then(|x| x.host.as_deref()).unwrap_or_default(),
        s(&o.kind),
        s(&o.namespace),
        s(&o.name),
        s(&o.uid),
        s(&o.api_version),
    ]
}

/// Upstream `getEventKey`: the same event, message and field path included.
fn event_key(e: &Event) -> String {
    let [c, h, k, ns, n, uid, api] = object_parts(e);
    let o = &e.involved_object;
    [
        c,
        h,
        k,
        ns,
        n,
        s(&o.field_path),
        uid,
        api,
        s(&e.type_),
        s(&e.reason),
        s(&e.message),
    ]
    .join("\u{0}")
}

/// Upstream `EventAggregatorByReasonFunc`'s aggregate key: similar events, any message.
fn aggregate_key(e: &Event) -> String {
    let mut parts = object_parts(e).to_vec();
    parts.extend([
        s(&e.type_),
        s(&e.reason),
        s(&e.reporting_component),
        s(&e.reporting_instance),
    ]);
    parts.join("\u{0}")
}

/// A map of at most `cap` entries that forgets the least recently used first
/// (upstream's `lru.Cache`).
#[derive(Debug)]
struct Lru<V> {
    cap: usize,
    map: HashMap<String, (V, u64)>,
    order: BTreeMap<u64, String>,
    clock: u64,
}

impl<V> Lru<V> {
    fn new(cap: usize) -> Self {
        Lru {
            cap: cap.max(1),
            map: HashMap::new(),
            order: BTreeMap::new(),
            clock: 0,
        }
    }

    fn touch(&mut self, key: &str) -> Option<&mut V> {
        self.clock += 1;
        let clock = self.clock;
        let (v, used) = self.map.get_mut(key)?;
        self.order.remove(used);
        *used = clock;
        self.order.insert(clock, key.to_string());
        Some(v)
    }

    fn put(&mut self, key: String, v: V) {
        if let Some(old) = self.touch(&key) {
            *old = v;
            return;
        }
        while self.map.len() >= self.cap {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            self.map.remove(&oldest);
        }
        self.clock += 1;
        self.order.insert(self.clock, key.clone());
        self.map.insert(key, (v, self.clock));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.len()
    }
}

/// Similar events seen lately (upstream `aggregateRecord`).
#[derive(Debug)]
struct AggregateRecord {
    messages: BTreeSet<String>,
    last: SystemTime,
}

/// What was last written for an event key (upstream `eventLog`).
#[derive(Debug, Clone)]
struct EventLog {
    count: i32,
    first: Option<Time>,
    name: Option<String>,
    resource_version: Option<String>,
}

/// One write to make.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Write {
    /// A new Event.
    Create(Event),
    /// The Event `event` names exists: bump it with `patch` (strategic merge); `event`
    /// is what to create if it is gone.
    Patch {
        /// The whole event, as it should now stand.
        event: Event,
        /// `count`, `lastTimestamp`, `message`.
        patch: serde_json::Value,
    },
}

impl Write {
    /// The event written.
    pub(crate) fn event(&self) -> &Event {
        match self {
            Write::Create(e) | Write::Patch { event: e, .. } => e,
        }
    }
}

/// An event after correlation: the write, and the key its outcome is recorded under.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Correlated {
    /// The logger's key (the event's own, or the aggregate's).
    pub key: String,
    /// What to send.
    pub write: Write,
}

/// client-go's `EventAggregator` and `eventLogger`, without the spam filter (the
/// recorder's).
#[derive(Debug)]
pub(crate) struct Correlator {
    aggregates: Lru<AggregateRecord>,
    logs: Lru<EventLog>,
}

impl Default for Correlator {
    fn default() -> Self {
        Correlator::with_capacity(MAX_LRU_ENTRIES)
    }
}

impl Correlator {
    /// A correlator whose two caches hold at most `cap` entries each.
    pub(crate) fn with_capacity(cap: usize) -> Self {
        Correlator {
            aggregates: Lru::new(cap),
            logs: Lru::new(cap),
        }
    }

    #[cfg(test)]
    /// Entries in the (aggregation, logger) caches.
    pub(crate) fn cache_sizes(&self) -> (usize, usize) {
        (self.aggregates.len(), self.logs.len())
    }

    /// Aggregates `event` with similar ones and counts repeats (upstream
    /// `EventCorrelate` less the filter), at `now`.
    pub(crate) fn correlate(&mut self, event: Event, now: SystemTime) -> Correlated {
        let (event, key) = self.aggregate(event, now);
        self.observe(event, key)
    }

    /// Upstream `EventAggregate`.
    fn aggregate(&mut self, event: Event, now: SystemTime) -> (Event, String) {
        let agg_key = aggregate_key(&event);
        let message = s(&event.message).to_string();
        let fresh = || AggregateRecord {
            messages: BTreeSet::new(),
            last: now,
        };
        let mut record = match self.aggregates.touch(&agg_key) {
            Some(r) => std::mem::replace(r, fresh()),
            None => fresh(),
        };
        if now.duration_since(record.last).unwrap_or_default() > AGGREGATE_INTERVAL {
            record = fresh();
        }
        record.messages.insert(message);
        record.last = now;
        let similar = record.messages.len();
        if similar >= AGGREGATE_MAX_EVENTS {
            // Upstream pops one so the set never grows past the maximum.
            record.messages.pop_first();
        }
        self.aggregates.put(agg_key.clone(), record);
        if similar < AGGREGATE_MAX_EVENTS {
            let key = event_key(&event);
            return (event, key);
        }
        let nanos = time_nanos(now);
        let at = k8s_time(now);
        let combined = Event {
            metadata: ObjectMeta {
                name: Some(format!("{}.{nanos:x}", s(&event.involved_object.name))),
                namespace: event.metadata.namespace.clone(),
                ..ObjectMeta::default()
            },
            count: Some(1),
            first_timestamp: Some(at.clone()),
            last_timestamp: Some(at),
            message: Some(format!("{AGGREGATE_PREFIX}{}", s(&event.message))),
            involved_object: event.involved_object,
            type_: event.type_,
            reason: event.reason,
            source: event.source,
            ..Event::default()
        };
        (combined, agg_key)
    }

    /// Upstream `eventLogger.eventObserve`: a key seen before is a patch of the Event
    /// written then.
    fn observe(&mut self, mut event: Event, key: String) -> Correlated {
        let last = self.logs.touch(&key).cloned();
        let write = match last.filter(|l| l.count > 0) {
            Some(l) => {
                event.metadata.name = l.name;
                event.metadata.resource_version = l.resource_version;
                event.first_timestamp = l.first;
                event.count = Some(l.count.saturating_add(1));
                let patch = serde_json::json!({
                    "count": event.count,
                    "lastTimestamp": event.last_timestamp,
                    "message": event.message,
                });
                Write::Patch { event, patch }
            }
            None => Write::Create(event),
        };
        let e = write.event();
        self.logs.put(
            key.clone(),
            EventLog {
                count: e.count.unwrap_or(1),
                first: e.first_timestamp.clone(),
                name: e.metadata.name.clone(),
                resource_version: e.metadata.resource_version.clone(),
            },
        );
        Correlated { key, write }
    }

    /// Records what the server stored for `key` (upstream `UpdateState`; kept under
    /// the key the write was correlated with, so combined events find it too).
    pub(crate) fn update_state(&mut self, key: &str, saved: &Event) {
        self.logs.put(
            key.to_string(),
            EventLog {
                count: saved.count.unwrap_or(1),
                first: saved.first_timestamp.clone(),
                name: saved.metadata.name.clone(),
                resource_version: saved.metadata.resource_version.clone(),
            },
        );
    }
}

/// Nanoseconds since the epoch, the hex suffix of an Event's name.
pub(super) fn time_nanos(t: SystemTime) -> u128 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{EventSource, ObjectReference};

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
    }

    /// An event as the kubelet on `n` makes it about pod `web` (container `app` or
    /// `setup`, or none), at `t`.
    fn ev(container: Option<&str>, reason: &str, message: &str, t: SystemTime) -> Event {
        Event {
            metadata: ObjectMeta {
                name: Some(format!("web.{}", time_nanos(t))),
                namespace: Some("ns1".into()),
                ..ObjectMeta::default()
            },
            involved_object: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                namespace: Some("ns1".into()),
                name: Some("web".into()),
                uid: Some("u-1".into()),
                field_path: container.map(|c| format!("spec.containers{{{c}}}")),
                ..ObjectReference::default()
            },
            reason: Some(reason.into()),
            message: Some(message.into()),
            first_timestamp: Some(k8s_time(t)),
            last_timestamp: Some(k8s_time(t)),
            count: Some(1),
            type_: Some("Normal".into()),
            source: Some(EventSource {
                component: Some("kubelet".into()),
                host: Some("n".into()),
            }),
            reporting_component: Some("kubelet".into()),
            reporting_instance: Some("n".into()),
            ..Event::default()
        }
    }

    fn correlate(c: &mut Correlator, e: Event) -> Correlated {
        let t = base::time::system_time(e.last_timestamp.as_ref().expect("stamped"));
        c.correlate(e, t)
    }

    #[test]
    fn a_repeat_is_a_patch_of_count_last_timestamp_and_message() {
        let mut c = Correlator::default();
        let first = correlate(&mut c, ev(Some("app"), "BackOff", "Back-off", at(0)));
        let Write::Create(created) = &first.write else {
            panic!("first is a create: {first:?}")
        };
        let name = created.metadata.name.clone();
        for n in 2..=4 {
            let again = correlate(&mut c, ev(Some("app"), "BackOff", "Back-off", at(n * 10)));
            assert_eq!(again.key, first.key);
            let Write::Patch { event, patch } = &again.write else {
                panic!("a repeat is a patch: {again:?}")
            };
            assert_eq!(event.metadata.name, name, "the same object");
            assert_eq!(event.count, Some(i32::try_from(n).expect("small")));
            assert_eq!(event.first_timestamp, created.first_timestamp);
            assert_eq!(
                *patch,
                serde_json::json!({"count": n, "lastTimestamp": k8s_time(at(n * 10)),
                    "message": "Back-off"})
            );
        }
        // Another container (field path) or message is another event.
        let other = correlate(&mut c, ev(Some("setup"), "BackOff", "Back-off", at(50)));
        assert!(matches!(other.write, Write::Create(_)));
        assert_ne!(other.key, first.key);
    }

    #[test]
    fn more_than_ten_similar_events_are_combined() {
        let mut c = Correlator::default();
        let mut writes = Vec::new();
        for i in 0..14 {
            let msg = format!("Failed to pull image \"img{i}\"");
            writes.push(correlate(&mut c, ev(None, "Failed", &msg, at(i))));
        }
        // Nine distinct messages pass as they are; the tenth on are combined.
        for (i, w) in writes.iter().enumerate().take(9) {
            assert!(matches!(w.write, Write::Create(_)), "event {i}");
            assert!(!s(&w.write.event().message).starts_with(AGGREGATE_PREFIX));
        }
        let Write::Create(combined) = &writes[9].write else {
            panic!("the first combined event is created: {:?}", writes[9])
        };
        assert_eq!(
            combined.message.as_deref(),
            Some("(combined from similar events): Failed to pull image \"img9\"")
        );
        assert_eq!(combined.count, Some(1));
        // Later similar events bump that one object.
        for (n, w) in writes[10..].iter().enumerate() {
            let Write::Patch { event, patch } = &w.write else {
                panic!("combined again: {w:?}")
            };
            assert_eq!(event.metadata.name, combined.metadata.name);
            assert_eq!(patch["count"], n + 2);
            assert_eq!(
                patch["message"],
                format!(
                    "(combined from similar events): Failed to pull image \"img{}\"",
                    n + 10
                )
            );
        }
        // After ten quiet minutes the count of similar events starts again.
        let later = correlate(&mut c, ev(None, "Failed", "new", at(13 + 601)));
        assert_eq!(later.write.event().message.as_deref(), Some("new"));
    }

    #[test]
    fn the_caches_are_bounded_least_recently_used_out() {
        let mut c = Correlator::with_capacity(8);
        let keep = ev(None, "Pulled", "kept", at(0));
        correlate(&mut c, keep.clone());
        for i in 0..20 {
            let mut e = ev(None, "Pulled", "x", at(i));
            e.involved_object.name = Some(format!("pod{i}"));
            correlate(&mut c, e);
            // Touching `keep` keeps it among the recent.
            let again = correlate(&mut c, keep.clone());
            assert!(matches!(again.write, Write::Patch { .. }), "round {i}");
        }
        assert_eq!(c.cache_sizes(), (8, 8));
        let full = Correlator::default();
        assert_eq!(full.logs.cap, MAX_LRU_ENTRIES);
    }
}
