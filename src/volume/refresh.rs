//! The `object-refresh` loop: ConfigMap, Secret and token updates reach running
//! pods' configMap, secret and projected volumes within a minute, without a thread or
//! a watch per object, and without waiting for the pods' syncs.
//!
//! Every [`REFRESH_PERIOD`] it refetches the objects that running pods' volumes read
//! and whose cached copy is at least [`REFRESH_AFTER`] old (one GET per object however
//! many pods read it, never-fetched and oldest first, at most `max_fetches` per tick
//! and none after one finds the API server unreachable), then rewrites, through the
//! pod's own lock and the atomic writer's `..data` swap, the volumes of every pod one
//! of whose objects changed since its volumes were written (whichever thread fetched
//! the new copy: see `objects::refresh`) or whose projected token is due for a
//! refresh. A pod whose lock is busy (its worker is setting it up) is left for the
//! next tick. A failed rewrite keeps the files as they were (the set-up's rule).
//!
//! Bound on an update's delay: a copy is refetched at the first tick after it is
//! [`REFRESH_AFTER`] old, so an update is fetched at most `REFRESH_AFTER` +
//! `REFRESH_PERIOD` (45 s) after it was made, plus the tick's own work; a copy a pod
//! worker fetched moments ago is not fetched twice. Pods register here when their
//! worker sets their volumes up (a running sandbox) and leave when their sync finds
//! them terminal or without a sandbox, or when their directory is removed.

use std::cmp::Ordering;
use std::collections::HashSet;
use std::sync::{Arc, TryLockError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;

use super::projection::{token_sources, TokenSource};
use super::{is_api_volume, PodState, VolumeError, VolumeManager};
use crate::objects::refresh::{volume_references, ObjectRef, Refreshed};
use crate::objects::ObjectError;
use base::loops::lock;

/// The loop's period: with [`REFRESH_AFTER`], an update is fetched within 45 s, under
/// upstream's promise of about a minute (its watch-based default: the pod's sync
/// period), for one GET per referenced object every 30 s.
pub(crate) const REFRESH_PERIOD: Duration = Duration::from_secs(30);
/// A copy at least this old is fetched again: half the period, so that the tick after
/// the one that fetched it always does, and a copy a new pod's worker fetched less
/// than this ago is not fetched twice.
pub(crate) const REFRESH_AFTER: Duration = Duration::from_secs(15);
/// At most this many fetches (GETs and TokenRequests) per tick: with the 5 s timeout,
/// a slow API server holds the loop for minutes at worst, never for ever; the rest
/// waits for the next tick, oldest first.
pub(crate) const MAX_FETCHES_PER_TICK: usize = 64;
/// No further fetch starts once a tick has run this long.
const TICK_BUDGET: Duration = Duration::from_secs(20);

/// A pod whose API-backed volumes are kept current.
#[derive(Debug, Clone)]
pub(super) struct Tracked {
    /// The ConfigMaps and Secrets its volumes read.
    refs: Vec<ObjectRef>,
    /// The tokens its projected volumes hold.
    tokens: Vec<TokenSource>,
    /// The pod as last set up.
    pod: Arc<Pod>,
    /// The object manager's generation when its volumes were last written.
    written_at: u64,
}

/// What one tick did.
#[derive(Debug, Default)]
pub struct TickReport {
    /// Objects fetched (answered, found or not).
    pub fetched: usize,
    /// Of which changed.
    pub changed: usize,
    /// Objects due but left for a later tick (the fetch bound, the tick's budget, or
    /// an unreachable API server).
    pub deferred: usize,
    /// Pods whose volumes were rewritten, by UID.
    pub rewritten: Vec<String>,
    /// Pods left for the next tick: their lock was busy.
    pub busy: usize,
    /// The first failed fetch.
    pub error: Option<ObjectError>,
}

enum Rewrite {
    Done,
    Busy,
    Gone,
}

impl VolumeManager {
    /// Notes the volumes of `pod` as written at `generation` (called under the pod's
    /// lock after a set-up): a pod with API-backed volumes is kept current by the
    /// `object-refresh` loop from now on.
    pub(super) fn track(&self, uid: &str, pod: &Pod, st: &mut PodState, generation: u64) {
        let api = pod
            .spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .any(is_api_volume);
        if !api {
            st.pod = None;
            lock(&self.refreshed).remove(uid);
            return;
        }
        let stored = match &st.pod {
            Some(p) if std::ptr::eq(p.as_ref(), pod) => p.clone(),
            _ => {
                let p = Arc::new(pod.clone());
                st.pod = Some(p.clone());
                p
            }
        };
        let t = Tracked {
            refs: volume_references(pod),
            tokens: token_sources(pod),
            pod: stored,
            written_at: generation,
        };
        lock(&self.refreshed).insert(uid.to_string(), t);
    }

    /// Stops keeping a pod's volumes current (it is terminal, has no sandbox, or is
    /// gone); its next set-up starts again.
    pub fn stop_refreshing(&self, uid: &str) {
        lock(&self.refreshed).remove(uid);
    }

    /// The loop's tick: see the module docs.
    pub fn refresh_objects(&self) -> Result<(), VolumeError> {
        let r = self.refresh_tick(MAX_FETCHES_PER_TICK);
        if r.changed > 0 || !r.rewritten.is_empty() || r.deferred > 0 {
            log::debug!(
                "object refresh: {} fetched, {} changed, {} deferred, {} pod(s) rewritten, {} busy",
                r.fetched,
                r.changed,
                r.deferred,
                r.rewritten.len(),
                r.busy
            );
        }
        match r.error {
            Some(source) => Err(VolumeError::Refresh { source }),
            None => Ok(()),
        }
    }

    /// One tick with at most `max_fetches` fetches.
    pub fn refresh_tick(&self, max_fetches: usize) -> TickReport {
        let began = Instant::now();
        let objects = self.objects.clone();
        let now = objects.clock().now();
        let pods: Vec<(String, Tracked)> = lock(&self.refreshed)
            .iter()
            .map(|(u, t)| (u.clone(), t.clone()))
            .collect();
        let referenced: HashSet<ObjectRef> = pods
            .iter()
            .flat_map(|(_, t)| t.refs.iter().cloned())
            .collect();
        objects.retain_changes(&referenced);
        let mut due: Vec<(Option<Duration>, ObjectRef)> = referenced
            .into_iter()
            .filter_map(|r| {
                let age = objects
                    .fetched_at(&r)
                    .map(|t| now.saturating_duration_since(t));
                match age {
                    Some(a) if a < REFRESH_AFTER => None,
                    _ => Some((age, r)),
                }
            })
            .collect();
        // Never fetched (or gone) first, then the oldest copies.
        base::sort::sort_by(&mut due, |a, b| match (a.0, b.0) {
            (None, None) => a.1.cmp(&b.1),
            (None, Some(_)) => Ordering::Less,
            (Some(_), None) => Ordering::Greater,
            (Some(x), Some(y)) => y.cmp(&x).then_with(|| a.1.cmp(&b.1)),
        });
        let mut report = TickReport::default();
        let mut budget = max_fetches;
        let mut reachable = true;
        for (_, r) in &due {
            if budget == 0 || !reachable || began.elapsed() > TICK_BUDGET {
                report.deferred += 1;
                continue;
            }
            budget -= 1;
            match objects.refresh(r) {
                Ok(Refreshed::Changed) => {
                    report.fetched += 1;
                    report.changed += 1;
                    let readers = pods.iter().filter(|(_, t)| t.refs.contains(r)).count();
                    log::info!("{r} changed: rewriting the volumes of {readers} pod(s)");
                }
                Ok(Refreshed::Unchanged) => report.fetched += 1,
                Err(e) => {
                    reachable = !match &e {
                        ObjectError::Unavailable { .. } => true,
                        ObjectError::Api { source, .. } => source.is_unreachable(),
                        _ => false,
                    };
                    log::debug!("refreshing {r}: {}", e.message());
                    report.error.get_or_insert(e);
                }
            }
        }
        for (uid, t) in &pods {
            let stale = t.refs.iter().any(|r| objects.changed_at(r) > t.written_at);
            // A token refresh is a TokenRequest: it counts against the bound.
            let token_due = !stale
                && reachable
                && budget > 0
                && t.tokens.iter().any(|s| {
                    objects.token_due(
                        &t.pod,
                        &s.service_account,
                        s.audience.as_deref(),
                        s.expiration_seconds,
                    )
                });
            if token_due {
                budget -= 1;
            }
            if !stale && !token_due {
                continue;
            }
            match self.rewrite(uid) {
                Rewrite::Done => report.rewritten.push(uid.clone()),
                Rewrite::Busy => report.busy += 1,
                Rewrite::Gone => {}
            }
        }
        base::sort::sort(&mut report.rewritten);
        report
    }

    /// Rewrites a tracked pod's volumes from the pod last set up, unless its lock is
    /// held (its worker is setting it up: left for the next tick) or it is gone.
    fn rewrite(&self, uid: &str) -> Rewrite {
        let Some(cell) = lock(&self.pods).get(uid).cloned() else {
            return Rewrite::Gone;
        };
        // The pod as its last set-up saw it, under a glance at its lock; the objects
        // are then read (and fetched where needed) with no lock held.
        let pod = match cell.try_lock() {
            Ok(g) => g.pod.clone(),
            Err(TryLockError::Poisoned(p)) => p.into_inner().pod.clone(),
            Err(TryLockError::WouldBlock) => return Rewrite::Busy,
        };
        let Some(pod) = pod else {
            return Rewrite::Gone;
        };
        let generation = self.objects.generation();
        let payloads = self.api_payloads(&pod);
        let mut st = match cell.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return Rewrite::Busy,
        };
        // Removed meanwhile (the cleanup drops the entry under this lock)?
        let current = lock(&self.pods)
            .get(uid)
            .is_some_and(|c| Arc::ptr_eq(c, &cell));
        if !current || !self.is_kept(uid) || !lock(&self.refreshed).contains_key(uid) {
            return Rewrite::Gone;
        }
        // Set up again meanwhile with another spec: the next tick rewrites that one.
        if !st.pod.as_ref().is_some_and(|p| Arc::ptr_eq(p, &pod)) {
            return Rewrite::Busy;
        }
        self.setup_locked(&pod, uid, &mut st, &payloads);
        if let Some(t) = lock(&self.refreshed).get_mut(uid) {
            t.written_at = generation;
        }
        log::debug!(
            "pod {}: API-backed volumes rewritten",
            runtime::container::format_pod(&pod)
        );
        Rewrite::Done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::fake::{config_map, FakeFetcher};
    use crate::objects::refresh::Clock;
    use crate::objects::{Fetcher, ObjectManager};
    use base::testutil::TempDir;
    use runtime::container::downward::NodeFacts;
    use runtime::fake::{FakeClock, FakeRuntime};

    struct Fixture {
        root: TempDir,
        f: Arc<FakeFetcher>,
        clock: Clock,
        vm: VolumeManager,
    }

    fn fixture(name: &str) -> Fixture {
        let root = TempDir::new(name);
        let f = Arc::new(FakeFetcher::default());
        let clock = Clock::manual();
        let objects = Arc::new(
            ObjectManager::new(Some(f.clone() as Arc<dyn Fetcher>)).with_clock(clock.clone()),
        );
        let vm = VolumeManager::new(
            root.0.clone(),
            Arc::new(FakeRuntime::new(FakeClock::default())),
            "node".into(),
            0,
        )
        .with_objects(objects, NodeFacts::default());
        Fixture { root, f, clock, vm }
    }

    impl Fixture {
        fn set(&self, name: &str, value: &str) {
            lock(&self.f.config_maps).insert(format!("ns/{name}"), config_map(&[("k", value)]));
        }

        /// A pod `uid` with one configMap volume per name, set up.
        fn pod(&self, uid: &str, cms: &[&str]) -> Pod {
            let vols: Vec<String> = cms
                .iter()
                .map(|c| format!("{{name: {c}, configMap: {{name: {c}}}}}"))
                .collect();
            let p: Pod = serde_norway::from_str(&format!(
                "metadata: {{name: {uid}, namespace: ns, uid: {uid}}}\n\
                 spec: {{volumes: [{}], containers: [{{name: c}}]}}",
                vols.join(", ")
            ))
            .expect("pod");
            let v = self.vm.setup_pod(&p);
            assert_eq!(
                v.volumes.values().filter(|r| r.is_err()).count(),
                0,
                "{v:?}"
            );
            p
        }

        fn file(&self, uid: &str, cm: &str) -> String {
            let path = self
                .root
                .0
                .join(format!("pods/{uid}/volumes/kubernetes.io~configmap/{cm}/k"));
            std::fs::read_to_string(path).unwrap_or_default()
        }

        fn calls(&self) -> usize {
            lock(&self.f.calls).len()
        }

        /// A tick without fetches (the copies are fresh): pods set up with an object
        /// seen for the first time are rewritten once (a no-op write).
        fn settle(&self) {
            let calls = self.calls();
            self.vm.refresh_tick(MAX_FETCHES_PER_TICK);
            assert_eq!(self.calls(), calls);
            let r = self.vm.refresh_tick(MAX_FETCHES_PER_TICK);
            assert!(r.rewritten.is_empty(), "{:?}", r.rewritten);
        }
    }

    #[test]
    fn an_object_change_rewrites_exactly_its_pods() {
        let x = fixture("refresh-change");
        x.set("a", "1");
        x.set("c", "1");
        x.pod("pa", &["a"]);
        x.pod("pb", &["a", "c"]);
        x.pod("pc", &["c"]);
        x.set("a", "2");
        // Copies younger than REFRESH_AFTER are not fetched again.
        let calls = x.calls();
        x.settle();
        assert_eq!(x.file("pa", "a"), "1");
        x.clock.advance(REFRESH_AFTER);
        let r = x.vm.refresh_tick(MAX_FETCHES_PER_TICK);
        assert!(r.error.is_none(), "{:?}", r.error);
        // One GET per object, however many pods read it.
        assert_eq!((r.fetched, r.changed), (2, 1));
        assert_eq!(x.calls(), calls + 2);
        assert_eq!(r.rewritten, vec!["pa".to_string(), "pb".to_string()]);
        assert_eq!(x.file("pa", "a"), "2");
        assert_eq!(x.file("pb", "a"), "2");
        assert_eq!(x.file("pb", "c"), "1");
        assert_eq!(x.file("pc", "c"), "1");
    }

    #[test]
    fn an_unchanged_object_rewrites_nothing_and_a_gone_pod_is_not_fetched_for() {
        let x = fixture("refresh-same");
        x.set("a", "1");
        x.set("b", "1");
        x.pod("pa", &["a"]);
        x.pod("pb", &["b"]);
        x.settle();
        x.clock.advance(REFRESH_AFTER);
        let r = x.vm.refresh_tick(MAX_FETCHES_PER_TICK);
        assert_eq!((r.fetched, r.changed), (2, 0));
        assert!(r.rewritten.is_empty(), "{:?}", r.rewritten);
        // A pod that stopped running: its objects are not fetched any more.
        x.vm.stop_refreshing("pb");
        x.clock.advance(REFRESH_AFTER);
        let calls = x.calls();
        let r = x.vm.refresh_tick(MAX_FETCHES_PER_TICK);
        assert_eq!(r.fetched, 1);
        assert_eq!(lock(&x.f.calls)[calls..], ["configmap ns/a".to_string()]);
        // No pod: nothing at all.
        x.vm.stop_refreshing("pa");
        x.clock.advance(REFRESH_AFTER);
        let calls = x.calls();
        x.vm.refresh_tick(MAX_FETCHES_PER_TICK);
        assert_eq!(x.calls(), calls);
    }

    #[test]
    fn a_change_a_worker_fetched_reaches_the_other_pods_without_a_fetch() {
        let x = fixture("refresh-worker");
        x.set("a", "1");
        x.pod("pa", &["a"]);
        x.settle();
        x.set("a", "2");
        // A new pod invalidates and refetches the shared object on its worker.
        x.pod("pb", &["a"]);
        assert_eq!(x.file("pb", "a"), "2");
        let calls = x.calls();
        let r = x.vm.refresh_tick(MAX_FETCHES_PER_TICK);
        assert_eq!(x.calls(), calls, "the copy is fresh");
        assert!(r.rewritten.contains(&"pa".to_string()), "{:?}", r.rewritten);
        assert_eq!(x.file("pa", "a"), "2");
    }

    #[test]
    fn an_unreachable_api_server_keeps_the_files_and_stops_the_tick() {
        let x = fixture("refresh-down");
        x.set("a", "1");
        x.set("b", "1");
        x.pod("pa", &["a", "b"]);
        x.settle();
        *lock(&x.f.unreachable) = true;
        x.clock.advance(REFRESH_AFTER);
        let calls = x.calls();
        let r = x.vm.refresh_tick(MAX_FETCHES_PER_TICK);
        assert!(r.error.is_some());
        assert_eq!(
            (x.calls(), r.deferred),
            (calls + 1, 1),
            "one try, then none"
        );
        assert!(r.rewritten.is_empty());
        assert_eq!(x.file("pa", "a"), "1");
        // Within the fail-fast window, no request at all.
        x.vm.refresh_tick(MAX_FETCHES_PER_TICK);
        assert_eq!(x.calls(), calls + 1);
        // Back, with a change: the next tick after the window brings it.
        *lock(&x.f.unreachable) = false;
        x.set("a", "2");
        x.clock.advance(crate::objects::UNAVAILABLE_FOR);
        let r = x.vm.refresh_tick(MAX_FETCHES_PER_TICK);
        assert!(r.error.is_none(), "{:?}", r.error);
        assert_eq!(r.rewritten, vec!["pa".to_string()]);
        assert_eq!(x.file("pa", "a"), "2");
        assert_eq!(x.file("pa", "b"), "1");
    }

    #[test]
    fn fetches_per_tick_are_bounded_and_every_object_gets_its_turn() {
        let x = fixture("refresh-bound");
        let names = ["a", "b", "c", "d", "e"];
        for n in names {
            x.set(n, "1");
        }
        x.pod("p", &names);
        x.settle();
        x.clock.advance(REFRESH_AFTER);
        let calls = x.calls();
        let mut seen = Vec::new();
        for (fetched, deferred) in [(2, 3), (2, 1), (1, 0), (0, 0)] {
            let r = x.vm.refresh_tick(2);
            assert_eq!((r.fetched, r.deferred), (fetched, deferred));
            let from = calls + seen.len();
            seen.extend(lock(&x.f.calls)[from..].to_vec());
        }
        base::sort::sort(&mut seen);
        let want: Vec<String> = names.iter().map(|n| format!("configmap ns/{n}")).collect();
        assert_eq!(seen, want, "each once");
    }

    #[test]
    fn a_busy_pod_is_rewritten_at_the_next_tick() {
        let x = fixture("refresh-busy");
        x.set("a", "1");
        x.pod("pa", &["a"]);
        x.settle();
        x.set("a", "2");
        x.clock.advance(REFRESH_AFTER);
        let r =
            x.vm.with_pod("pa", |_| x.vm.refresh_tick(MAX_FETCHES_PER_TICK));
        assert_eq!((r.changed, r.busy), (1, 1));
        assert_eq!(x.file("pa", "a"), "1");
        let r = x.vm.refresh_tick(MAX_FETCHES_PER_TICK);
        assert_eq!(r.rewritten, vec!["pa".to_string()]);
        assert_eq!(x.file("pa", "a"), "2");
    }
}
