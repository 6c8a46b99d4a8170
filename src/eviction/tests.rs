//! The manager's passes over fake inputs, a fake evictor and fake reclaimers.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::api::{parse_threshold_config, Condition, Signal};
use super::helpers::{ContainerUsage, Observation, Observations, PodUsage};
use super::{Config, Evictor, Inputs, Manager, Outcome};

#[derive(Default)]
struct World {
    /// (signal, available, capacity); the time advances on every observe.
    signals: Vec<(Signal, i128, i128)>,
    pods: Vec<Arc<Pod>>,
    usage: BTreeMap<String, PodUsage>,
    evicted: Vec<(String, Duration, String)>,
    observed: u32,
    base: Option<Instant>,
}

#[derive(Clone, Default)]
struct Fake(Arc<Mutex<World>>);

impl Inputs for Fake {
    fn observe(&mut self) -> Observations {
        let mut w = self.0.lock().expect("lock");
        w.observed += 1;
        let base = *w.base.get_or_insert_with(Instant::now);
        let time = base + Duration::from_secs(u64::from(w.observed));
        w.signals
            .iter()
            .map(|(s, a, c)| {
                (
                    *s,
                    Observation {
                        available: *a,
                        capacity: *c,
                        time,
                    },
                )
            })
            .collect()
    }
    fn active_pods(&mut self) -> Vec<Arc<Pod>> {
        let w = self.0.lock().expect("lock");
        let gone: Vec<&String> = w.evicted.iter().map(|(u, _, _)| u).collect();
        w.pods
            .iter()
            .filter(|p| !gone.contains(&p.metadata.uid.as_ref().expect("uid")))
            .cloned()
            .collect()
    }
    fn pod_usage(&mut self, _: &[Arc<Pod>], _: bool) -> BTreeMap<String, PodUsage> {
        self.0.lock().expect("lock").usage.clone()
    }
}

impl Evictor for Fake {
    fn evict(&mut self, pod: &Pod, grace: Duration, message: &str) -> bool {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        self.0
            .lock()
            .expect("lock")
            .evicted
            .push((uid, grace, message.to_string()));
        true
    }
}

fn pod(uid: &str, spec: serde_json::Value) -> Arc<Pod> {
    Arc::new(
        serde_json::from_value(
            json!({"metadata": {"name": uid, "namespace": "ns", "uid": uid},
            "spec": spec}),
        )
        .expect("pod"),
    )
}

fn besteffort(uid: &str) -> Arc<Pod> {
    pod(uid, json!({"containers": [{"name": "c", "image": "i"}]}))
}

fn guaranteed(uid: &str) -> Arc<Pod> {
    pod(
        uid,
        json!({"containers": [{"name": "c", "image": "i", "resources": {
            "requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}}]}),
    )
}

fn static_pod(uid: &str) -> Arc<Pod> {
    let mut p = (*besteffort(uid)).clone();
    p.metadata.annotations = Some(
        [(
            "kubernetes.io/config.source".to_string(),
            "file".to_string(),
        )]
        .into(),
    );
    Arc::new(p)
}

fn usage(ws: u64) -> PodUsage {
    PodUsage {
        containers: vec![ContainerUsage {
            name: "c".into(),
            working_set: Some(ws),
            ephemeral: Some(0),
        }],
        ..Default::default()
    }
}

fn manager(fake: &Fake, hard: &str, transition: Duration) -> Manager {
    Manager::new(
        Config {
            thresholds: parse_threshold_config(Some(hard), "", "", "").expect("thresholds"),
            pressure_transition_period: transition,
            max_pod_grace_period: Duration::ZERO,
            local_storage_capacity_isolation: true,
        },
        "node-1",
        Box::new(fake.clone()),
        Box::new(fake.clone()),
    )
}

#[test]
fn memory_pressure_evicts_one_besteffort_pod_per_pass_never_a_static_one() {
    let fake = Fake::default();
    {
        let mut w = fake.0.lock().expect("lock");
        w.signals = vec![(Signal::MemoryAvailable, 50 << 20, 8 << 30)];
        w.pods = vec![
            guaranteed("g"),
            static_pod("s"),
            besteffort("be1"),
            besteffort("be2"),
        ];
        w.usage = [
            ("g".to_string(), usage(100 << 20)),
            ("s".to_string(), usage(2 << 30)),
            ("be1".to_string(), usage(200 << 20)),
            ("be2".to_string(), usage(300 << 20)),
        ]
        .into();
    }
    let mut m = manager(&fake, "memory.available<100Mi", Duration::from_secs(300));
    let state = m.state();
    let t0 = Instant::now();
    assert_eq!(m.tick(t0), Outcome::Evicted("be2".into()));
    assert_eq!(state.conditions(), [Condition::MemoryPressure]);
    assert_eq!(
        m.tick(t0 + Duration::from_secs(10)),
        Outcome::Evicted("be1".into())
    );
    // Only the Guaranteed pod (under its request) and the static one are left: the
    // Guaranteed one goes, the static one never.
    assert_eq!(
        m.tick(t0 + Duration::from_secs(20)),
        Outcome::Evicted("g".into())
    );
    assert_eq!(m.tick(t0 + Duration::from_secs(30)), Outcome::NoneEvicted);
    let w = fake.0.lock().expect("lock");
    assert_eq!(w.evicted[0].1, super::IMMEDIATE_GRACE);
    assert_eq!(
        w.evicted[1].2,
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. \
         Container c was using 200Mi, request is 0, has larger consumption of memory. "
    );
}

#[test]
fn conditions_clear_after_the_transition_period() {
    let fake = Fake::default();
    fake.0.lock().expect("lock").signals = vec![(Signal::NodeFsAvailable, 1, 100)];
    let mut m = manager(&fake, "nodefs.available<10%", Duration::from_secs(60));
    let state = m.state();
    let t0 = Instant::now();
    assert_eq!(m.tick(t0), Outcome::NoneEvicted);
    assert!(state.has(Condition::DiskPressure));
    fake.0.lock().expect("lock").signals = vec![(Signal::NodeFsAvailable, 50, 100)];
    assert_eq!(m.tick(t0 + Duration::from_secs(30)), Outcome::Nothing);
    assert!(state.has(Condition::DiskPressure), "kept for the period");
    assert_eq!(m.tick(t0 + Duration::from_secs(61)), Outcome::Nothing);
    assert!(state.conditions().is_empty());
}

#[test]
fn node_level_reclaim_comes_first_for_disk() {
    let fake = Fake::default();
    {
        let mut w = fake.0.lock().expect("lock");
        w.signals = vec![(Signal::ImageFsAvailable, 1, 100)];
        w.pods = vec![besteffort("be")];
    }
    let order = Arc::new(Mutex::new(Vec::new()));
    let (o1, o2, f2) = (Arc::clone(&order), Arc::clone(&order), fake.clone());
    let mut m = manager(&fake, "imagefs.available<15%", Duration::from_secs(60))
        .with_reclaimer(
            "container GC",
            Box::new(move || {
                o1.lock().expect("lock").push("containers");
                Ok(())
            }),
        )
        .with_reclaimer(
            "image GC",
            Box::new(move || {
                o2.lock().expect("lock").push("images");
                f2.0.lock().expect("lock").signals = vec![(Signal::ImageFsAvailable, 50, 100)];
                Ok(())
            }),
        );
    assert_eq!(m.tick(Instant::now()), Outcome::Reclaimed);
    assert_eq!(*order.lock().expect("lock"), ["containers", "images"]);
    assert!(fake.0.lock().expect("lock").evicted.is_empty());
}

#[test]
fn soft_thresholds_wait_and_use_the_max_pod_grace_period() {
    let fake = Fake::default();
    {
        let mut w = fake.0.lock().expect("lock");
        w.signals = vec![(Signal::MemoryAvailable, 50 << 20, 8 << 30)];
        w.pods = vec![pod(
            "p",
            json!({"terminationGracePeriodSeconds": 30, "containers": [{"name": "c", "image": "i"}]}),
        )];
        w.usage = [("p".to_string(), usage(1 << 20))].into();
    }
    let mut m = Manager::new(
        Config {
            thresholds: parse_threshold_config(
                Some(""),
                "memory.available<1Gi",
                "memory.available=30s",
                "",
            )
            .expect("thresholds"),
            pressure_transition_period: Duration::from_secs(300),
            max_pod_grace_period: Duration::from_secs(10),
            local_storage_capacity_isolation: false,
        },
        "node-1",
        Box::new(fake.clone()),
        Box::new(fake.clone()),
    );
    let t0 = Instant::now();
    assert_eq!(m.tick(t0), Outcome::Nothing, "grace period not over");
    assert!(m.state().has(Condition::MemoryPressure));
    assert_eq!(
        m.tick(t0 + Duration::from_secs(31)),
        Outcome::Evicted("p".into())
    );
    assert_eq!(
        fake.0.lock().expect("lock").evicted[0].1,
        Duration::from_secs(10)
    );
}

#[test]
fn an_empty_dir_over_its_size_limit_is_evicted_at_once() {
    let fake = Fake::default();
    {
        let mut w = fake.0.lock().expect("lock");
        w.pods = vec![pod(
            "p",
            json!({"containers": [{"name": "c", "image": "i"}],
                "volumes": [{"name": "v", "emptyDir": {"sizeLimit": "1Mi"}}]}),
        )];
        let mut u = usage(0);
        u.volumes.insert("v".into(), 2 << 20);
        w.usage = [("p".to_string(), u)].into();
    }
    let mut m = manager(&fake, "", Duration::from_secs(300));
    assert_eq!(m.tick(Instant::now()), Outcome::Evicted("p".into()));
    let w = fake.0.lock().expect("lock");
    assert_eq!(w.evicted[0].1, Duration::ZERO);
    assert_eq!(
        w.evicted[0].2,
        "Usage of EmptyDir volume \"v\" exceeds the limit \"1Mi\". "
    );
}
