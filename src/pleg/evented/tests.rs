//! The evented PLEG's tests: the schedule, the wake channel, the event watcher over a
//! fake event stream, and the targeted relist they drive, on one fake runtime.

use super::*;
use crate::pleg::{PlegEvent, CHANNEL_CAPACITY, FRESH_RELIST};
use runtime::config::{ContainerConfig, PodSandboxConfig};
use runtime::fake::{FakeClock, FakeRuntime, Op};
use std::time::UNIX_EPOCH;

const NODE: &str = "n1";

fn event(kind: ContainerEventType, id: &str, uid: &str, secs: u64) -> RuntimeEvent {
    let mut labels = BTreeMap::new();
    if !uid.is_empty() {
        labels.insert(labels::POD_UID.to_string(), uid.to_string());
    }
    RuntimeEvent {
        id: id.into(),
        kind,
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
fn container_events_map_to_pleg_events_of_the_pod_in_the_labels() {
    use ContainerEventType as E;
    use PlegEventType::*;
    for (ev, kind) in [
        (E::Started, Some(ContainerStarted)),
        (E::Stopped, Some(ContainerDied)),
        (E::Deleted, Some(ContainerRemoved)),
        (E::Created, None),
        (E::OomKilled, None),
    ] {
        assert_eq!(
            hint_of(&event(ev, "c1", "uid-1", 1)),
            Some(EventHint {
                pod_uid: "uid-1".into(),
                container_id: "c1".into(),
                kind,
            }),
            "{ev:?}"
        );
    }
    assert_eq!(
        hint_of(&event(E::Stopped, "c1", "", 1)),
        None,
        "not a pod's"
    );
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
        .create_container(
            "",
            &ContainerConfig {
                labels: [
                    (labels::MANAGED_BY_NODE.to_string(), NODE.to_string()),
                    (labels::POD_UID.to_string(), "uid-1".to_string()),
                    (labels::CONTAINER_NAME.to_string(), "app".to_string()),
                ]
                .into(),
                ..ContainerConfig::named("k8s_app_p_ns_uid-1_0", "busybox")
            },
            &PodSandboxConfig::default(),
        )
        .expect("create");
    rt.start_container(&id).expect("start");
    let (tx, rx) = base::chan::bounded(CHANNEL_CAPACITY);
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
/// One PLEG event of pod `uid-1`, the pod of [`world`].
fn pod1_event(kind: PlegEventType, id: &str) -> PlegEvent {
    PlegEvent {
        pod_uid: "uid-1".into(),
        kind,
        container_id: id.to_string(),
    }
}

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
    rt.push_event(event(ContainerEventType::Stopped, &id, "uid-1", 10));
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
    assert_eq!(got, vec![pod1_event(PlegEventType::ContainerDied, &id)]);
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
    let h = hint_of(&event(ContainerEventType::Stopped, &id, "uid-1", 10)).expect("a hint");
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
    assert_eq!(got, vec![pod1_event(PlegEventType::ContainerDied, &id)]);
    // The same event again (a replay after a reconnect): no second ContainerDied.
    wake.send(wake_of("uid-1", &id));
    run_until_idle(&mut pleg, &wakes, &mut s);
    assert_eq!(rx.try_iter().count(), 0);
    assert!(!pleg.shared().runtime_pods()["uid-1"].running);
}

#[test]
fn an_oom_after_the_die_moves_the_pods_generation_and_syncs_it_once() {
    let (rt, id, mut pleg, rx) = world();
    let (wake, wakes) = wake_channel(CHANNEL_CAPACITY);
    let mut s = Schedule::new();
    s.next(Instant::now(), RELIST_PERIOD);
    let shared = pleg.shared().clone();
    shared.set_stream_open(true);

    rt.exit(&id, 137);
    wake.send(wake_of("uid-1", &id));
    run_until_idle(&mut pleg, &wakes, &mut s);
    let died: Vec<PlegEventType> = rx.try_iter().map(|e| e.kind).collect();
    assert_eq!(died, vec![PlegEventType::ContainerDied]);
    let g1 = shared.pod_generation("uid-1", Instant::now()).expect("g1");

    // Docker's `oom` after its `die`: the state is the same, what inspect says is not.
    rt.mark_oom_killed(&id);
    let h = hint_of(&event(ContainerEventType::OomKilled, &id, "uid-1", 11)).expect("a hint");
    wake.send(wake_of(&h.pod_uid, &h.container_id));
    run_until_idle(&mut pleg, &wakes, &mut s);
    let got: Vec<PlegEvent> = rx.try_iter().collect();
    assert_eq!(got, vec![pod1_event(PlegEventType::ContainerChanged, &id)]);
    let g2 = shared.pod_generation("uid-1", Instant::now()).expect("g2");
    assert!(g2 > g1, "{g2} > {g1}");

    // An OOM seen with the exit (the usual order) is the one ContainerDied.
    let (rt, id, mut pleg, rx) = world();
    let mut s = Schedule::new();
    s.next(Instant::now(), RELIST_PERIOD);
    let (wake, wakes) = wake_channel(CHANNEL_CAPACITY);
    pleg.shared().set_stream_open(true);
    rt.exit(&id, 137);
    rt.mark_oom_killed(&id);
    wake.send(wake_of("uid-1", &id));
    wake.send(wake_of("uid-1", &id));
    run_until_idle(&mut pleg, &wakes, &mut s);
    let kinds: Vec<PlegEventType> = rx.try_iter().map(|e| e.kind).collect();
    assert_eq!(kinds, vec![PlegEventType::ContainerDied]);
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
    *base::loops::lock(&s.last_relist) = Some(now);
    assert!(s.healthy(now + Duration::from_secs(590)).is_ok());
    assert!(s.healthy(now + Duration::from_secs(610)).is_err());
    s.set_stream_open(false);
    assert!(s.healthy(now + Duration::from_secs(190)).is_err());
}

#[test]
fn a_full_event_channel_is_unhealthy_when_evented() {
    let s = PlegShared::default();
    let now = Instant::now();
    *base::loops::lock(&s.last_relist) = Some(now);
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
    rt.push_event(event(ContainerEventType::Stopped, &id, "uid-1", 10));
    rt.push_event(event(ContainerEventType::Deleted, &id, "uid-1", 12));
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
    assert_eq!(filters[1].kinds, KINDS.to_vec());
}

#[test]
fn a_burst_beyond_the_channel_becomes_one_full_relist() {
    let (rt, id, pleg, _rx) = world();
    let (wake, wakes) = wake_channel(4);
    let mut w = watcher(&rt, &pleg, wake);
    rt.script_event_stream(true);
    for i in 0..50 {
        rt.push_event(event(
            ContainerEventType::Stopped,
            &id,
            &format!("uid-{i}"),
            10,
        ));
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

#[test]
fn a_pod_woken_without_an_event_is_relisted_with_its_running_containers_inspected() {
    let (rt, id, mut pleg, rx) = world();
    let (wake, wakes) = wake_channel(CHANNEL_CAPACITY);
    let mut s = Schedule::new();
    s.next(Instant::now(), RELIST_PERIOD);
    pleg.shared().set_stream_open(true);
    let wake_pod = || Wake::Pod {
        pod_uid: "uid-1".into(),
    };

    // Still running: listed, and inspected although no event named it.
    wake.send(wake_pod());
    let before = rt.calls().len();
    assert_eq!(
        run_until_idle(&mut pleg, &wakes, &mut s),
        vec![Action::UpdatePods(
            [("uid-1".to_string(), BTreeSet::new())].into()
        )]
    );
    let ops: Vec<Op> = rt.calls()[before..].iter().map(|c| c.op).collect();
    assert_eq!(ops, vec![Op::List, Op::Inspect]);
    assert_eq!(rx.try_iter().count(), 0, "nothing changed");

    // Its death's event never came (issue 27): the wake alone finds it dead.
    rt.exit(&id, 137);
    wake.send(wake_pod());
    run_until_idle(&mut pleg, &wakes, &mut s);
    let got: Vec<PlegEvent> = rx.try_iter().collect();
    assert_eq!(got, vec![pod1_event(PlegEventType::ContainerDied, &id)]);
    assert!(!pleg.shared().runtime_pods()["uid-1"].running);
}

#[test]
fn an_unchanged_relist_keeps_the_records_and_the_published_pods() {
    let (rt, id, mut pleg, rx) = world();
    let shared = pleg.shared().clone();
    let published = shared.runtime_pods();
    let record = |pleg: &Pleg| pleg.seen.get(&id).map(|k| k.pod_uid.as_ptr());
    let kept = record(&pleg);
    pleg.relist().expect("relist");
    pleg.update_pods(&[("uid-1".to_string(), BTreeSet::new())].into())
        .expect("update");
    assert!(rx.try_iter().next().is_none(), "no change, no event");
    assert!(
        Arc::ptr_eq(&published, &shared.runtime_pods()),
        "not published again"
    );
    assert_eq!(record(&pleg), kept, "the record kept, not made anew");
    // A change is published, with the pod's new state.
    rt.exit(&id, 1);
    pleg.relist().expect("relist");
    let now = shared.runtime_pods();
    assert!(!Arc::ptr_eq(&published, &now));
    assert!(!now["uid-1"].running, "{now:?}");
}
