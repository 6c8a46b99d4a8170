//! Unit tests of the `node-status` loop over a fake Node API and `FakeRuntime`:
//! registration (created, or found and reconciled), when a status is written and what
//! the patch holds, retries and the read after a failure.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::Node;

use super::setters::NodeSettings;
use super::*;
use base::loops::lock;
use runtime::fake::{FakeClock, FakeRuntime};

/// A Node store of one object: records calls, applies patches crudely (the whole new
/// status), fails the next calls while `down` is above zero.
#[derive(Default)]
struct Store {
    node: Mutex<Option<Node>>,
    calls: Mutex<Vec<String>>,
    patches: Mutex<Vec<serde_json::Value>>,
    down: Mutex<u32>,
    errors: Mutex<VecDeque<ApiError>>,
}

fn status(code: u16, reason: &str) -> ApiError {
    ApiError::Status {
        what: "node",
        url: "u".into(),
        code,
        reason: reason.into(),
        message: String::new(),
    }
}

impl Store {
    fn fail(&self) -> Result<(), ApiError> {
        if let Some(e) = lock(&self.errors).pop_front() {
            return Err(e);
        }
        let mut d = lock(&self.down);
        if *d > 0 {
            *d -= 1;
            return Err(status(503, "ServiceUnavailable"));
        }
        Ok(())
    }
}

struct Api(Arc<Store>);

impl NodeApi for Api {
    fn get(&self, from_cache: bool) -> Result<Node, ApiError> {
        lock(&self.0.calls).push(format!("get cache={from_cache}"));
        self.0.fail()?;
        lock(&self.0.node)
            .clone()
            .ok_or_else(|| status(404, "NotFound"))
    }
    fn create(&self, node: &Node) -> Result<Node, ApiError> {
        lock(&self.0.calls).push("create".into());
        self.0.fail()?;
        let mut stored = lock(&self.0.node);
        if stored.is_some() {
            return Err(status(409, "AlreadyExists"));
        }
        let mut n = node.clone();
        n.metadata.uid = Some("uid-1".into());
        *stored = Some(n.clone());
        Ok(n)
    }
    fn patch_status(&self, patch: &serde_json::Value) -> Result<Node, ApiError> {
        lock(&self.0.calls).push("patch".into());
        self.0.fail()?;
        lock(&self.0.patches).push(patch.clone());
        let mut stored = lock(&self.0.node);
        let Some(n) = stored.as_mut() else {
            return Err(status(404, "NotFound"));
        };
        // Crude apply: metadata labels/annotations merged, status taken from the
        // patched fields' full values is beyond this fake; tests read the patch.
        if let Some(labels) = patch
            .pointer("/metadata/labels")
            .and_then(|l| l.as_object())
        {
            let l = n.metadata.labels.get_or_insert_with(Default::default);
            for (k, v) in labels {
                l.insert(k.clone(), v.as_str().unwrap_or_default().to_string());
            }
        }
        Ok(n.clone())
    }
}

struct Fixture {
    store: Arc<Store>,
    runtime: Arc<FakeRuntime>,
    manager: NodeStatusManager,
    ready: Arc<Mutex<Vec<String>>>,
    heartbeat: Arc<Heartbeat>,
}

fn fixture(existing: Option<Node>) -> Fixture {
    fixture_with(existing, false)
}

fn fixture_with(existing: Option<Node>, reads_pod_cidr: bool) -> Fixture {
    let runtime = Arc::new(FakeRuntime::new(FakeClock::default()).with_image("busybox:1"));
    let store = Arc::new(Store::default());
    *lock(&store.node) = existing;
    let ready = Arc::new(Mutex::new(Vec::new()));
    let r = ready.clone();
    let heartbeat = Arc::new(Heartbeat::default());
    let manager = NodeStatusManager::new(Setup {
        api: Box::new(Api(store.clone())),
        settings: NodeSettings {
            node_name: "n1".into(),
            node_ip: "10.0.0.5".into(),
            port: 10250,
            max_pods: 110,
            max_images: 50,
            labels: vec![("example.com/a".into(), "b".into())],
            taints: vec![],
            reserved: Default::default(),
            pressure: None,
        },
        machine: super::machine::MachineInfo {
            cpus: 2,
            memory_bytes: 1 << 33,
            ..Default::default()
        },
        runtime: runtime.clone(),
        readiness: Box::new(move || lock(&r).clone()),
        heartbeat: heartbeat.clone(),
        register_node: true,
        reads_pod_cidr,
        report_frequency: Duration::from_secs(300),
        follow_ip: None,
    });
    Fixture {
        store,
        runtime,
        manager,
        ready,
        heartbeat,
    }
}

fn calls(f: &Fixture) -> Vec<String> {
    std::mem::take(&mut *lock(&f.store.calls))
}

fn no_sleep(_: Duration) -> bool {
    false
}

#[test]
fn registers_then_writes_only_changes_and_every_report_period() {
    let mut f = fixture(None);
    f.manager.sync(&no_sleep).expect("ok");
    assert_eq!(calls(&f), ["create"]);
    assert_eq!(f.heartbeat.node_uid().as_deref(), Some("uid-1"));
    let created = lock(&f.store.node).clone().expect("ok");
    let labels = created.metadata.labels.clone().expect("ok");
    assert_eq!(labels["kubernetes.io/hostname"], "n1");
    assert_eq!(labels["example.com/a"], "b");
    let st = created.status.expect("ok");
    assert_eq!(st.conditions.expect("ok").len(), 4);
    assert_eq!(st.capacity.expect("ok")["memory"].0, "8Gi");
    assert_eq!(
        st.images.expect("ok")[0].names.as_deref().expect("ok"),
        ["busybox:1"]
    );

    // Nothing changed: no request at all.
    let t0 = Instant::now();
    f.manager
        .update_node_status(t0, SystemTime::now())
        .expect("ok");
    f.manager
        .update_node_status(t0 + Duration::from_secs(10), SystemTime::now())
        .expect("ok");
    assert!(calls(&f).is_empty());

    // Not ready: read the Node, patch the Ready condition.
    *lock(&f.ready) = vec!["container runtime is down".into()];
    f.manager
        .update_node_status(t0 + Duration::from_secs(20), SystemTime::now())
        .expect("ok");
    assert_eq!(calls(&f), ["get cache=true", "patch"]);
    let patch = lock(&f.store.patches).pop().expect("ok");
    let order = &patch["status"]["$setElementOrder/conditions"];
    assert_eq!(order.as_array().expect("ok").len(), 4);
    let ready = patch["status"]["conditions"]
        .as_array()
        .expect("ok")
        .iter()
        .find(|c| c["type"] == "Ready")
        .cloned()
        .expect("ok");
    assert_eq!(ready["status"], "False");
    assert_eq!(ready["message"], "container runtime is down");

    // Five minutes after the last report: written again even unchanged.
    *lock(&f.ready) = vec!["container runtime is down".into()];
    f.manager
        .update_node_status(t0 + Duration::from_secs(30), SystemTime::now())
        .expect("ok");
    assert!(calls(&f).is_empty());
    f.manager
        .update_node_status(t0 + Duration::from_secs(330), SystemTime::now())
        .expect("ok");
    assert_eq!(calls(&f), ["get cache=true", "patch"]);
}

#[test]
fn the_nodes_pod_cidrs_reach_the_runtime_when_they_appear_and_change() {
    let mut f = fixture_with(None, true);
    f.manager.sync(&no_sleep).expect("ok");
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    f.manager
        .update_node_status(at(0), SystemTime::now())
        .expect("ok");
    assert!(f.runtime.pod_cidr_updates().is_empty(), "none yet");
    let set = |cidrs: &[&str]| {
        let mut stored = lock(&f.store.node);
        let spec = stored
            .as_mut()
            .expect("node")
            .spec
            .get_or_insert_with(Default::default);
        spec.pod_cidr = cidrs.first().map(|c| c.to_string());
        spec.pod_cidrs = Some(cidrs.iter().map(|c| c.to_string()).collect());
    };
    // With kubenet the Node is read at every update, so a CIDR is taken at once...
    set(&["10.88.1.0/24"]);
    f.manager
        .update_node_status(at(10), SystemTime::now())
        .expect("ok");
    f.manager
        .update_node_status(at(20), SystemTime::now())
        .expect("ok");
    assert_eq!(
        f.runtime.pod_cidr_updates(),
        [vec!["10.88.1.0/24".to_string()]]
    );
    // ...and so is a change (two of them: dual-stack).
    set(&["10.88.2.0/24", "fd00:2::/64"]);
    f.manager
        .update_node_status(at(30), SystemTime::now())
        .expect("ok");
    assert_eq!(
        f.runtime.pod_cidr_updates().last().expect("an update"),
        &["10.88.2.0/24".to_string(), "fd00:2::/64".to_string()]
    );
    assert_eq!(f.runtime.pod_cidr_updates().len(), 2);
}

#[test]
fn an_existing_node_is_reconciled() {
    let mut existing = Node::default();
    existing.metadata.name = Some("n1".into());
    existing.metadata.uid = Some("uid-old".into());
    existing.metadata.labels =
        Some([("kubernetes.io/hostname".to_string(), "old".to_string())].into());
    let mut f = fixture(Some(existing));
    f.manager.sync(&no_sleep).expect("ok");
    // Create refused, read, labels and annotation patched, then (resync) the status
    // read and written.
    assert_eq!(
        calls(&f),
        [
            "create",
            "get cache=false",
            "patch",
            "get cache=true",
            "patch"
        ]
    );
    let patches = lock(&f.store.patches).clone();
    assert_eq!(
        patches[0]["metadata"]["labels"]["kubernetes.io/hostname"],
        "n1"
    );
    assert_eq!(
        patches[0]["metadata"]["annotations"][super::setters::CONTROLLER_MANAGED_ATTACH],
        "true"
    );
    assert!(patches[0].get("status").is_none());
    assert!(patches[1]["status"]["nodeInfo"].is_object());
    assert_eq!(f.heartbeat.node_uid().as_deref(), Some("uid-old"));
}

#[test]
fn registration_backs_off_while_the_api_is_down() {
    let mut f = fixture(None);
    *lock(&f.store.down) = 8;
    let waits = Mutex::new(Vec::new());
    f.manager
        .sync(&|d| {
            lock(&waits).push(d.as_millis());
            false
        })
        .expect("ok");
    assert_eq!(
        *lock(&waits),
        [100, 200, 400, 800, 1600, 3200, 6400, 7000, 7000]
    );
    assert_eq!(calls(&f).iter().filter(|c| *c == "create").count(), 9);
    // Stopping ends the wait without registering.
    let mut g = fixture(None);
    g.manager.sync(&|_| true).expect("ok");
    assert!(calls(&g).is_empty());
}

#[test]
fn a_failed_write_is_retried_and_the_next_tick_reads_again() {
    let mut f = fixture(None);
    f.manager.sync(&no_sleep).expect("ok");
    calls(&f);
    *lock(&f.ready) = vec!["x".into()];
    // All five attempts fail: the error, and the next tick reads the Node first.
    *lock(&f.store.down) = 5;
    let t0 = Instant::now();
    let e = f
        .manager
        .update_node_status(t0, SystemTime::now())
        .expect_err("an error");
    assert!(e
        .to_string()
        .starts_with("update node status exceeds retry count"));
    let c = calls(&f);
    assert_eq!(c.len(), 5);
    assert_eq!(c[0], "get cache=true");
    assert!(c[1..].iter().all(|c| c == "get cache=false"));
    f.manager
        .update_node_status(t0, SystemTime::now())
        .expect("ok");
    assert_eq!(calls(&f), ["get cache=true", "patch"]);
    // A lease failure also makes the next tick read the Node, and what the store holds
    // (this fake keeps the registered status: as if someone else had written it) is
    // corrected although nothing changed here.
    f.heartbeat.note_trouble();
    f.manager
        .update_node_status(t0, SystemTime::now())
        .expect("ok");
    assert_eq!(calls(&f), ["get cache=true", "patch"]);
    f.manager
        .update_node_status(t0, SystemTime::now())
        .expect("ok");
    assert!(calls(&f).is_empty());
    // A failed read is retried from the store, then the change is written.
    *lock(&f.ready) = vec!["y".into()];
    lock(&f.store.errors).push_back(status(500, "InternalError"));
    f.manager
        .update_node_status(t0, SystemTime::now())
        .expect("ok");
    assert_eq!(calls(&f), ["get cache=true", "get cache=false", "patch"]);
}

#[test]
fn a_changed_node_address_is_written_at_the_next_tick_and_resyncs_every_pod() {
    let mut f = fixture(None);
    let detected = Arc::new(Mutex::new("10.0.0.5".to_string()));
    let shared = Arc::new(HostIp::new("10.0.0.5".into()));
    let (resync_tx, resync_rx) = crossbeam_channel::bounded(1);
    let d = detected.clone();
    f.manager.follow_ip = Some(FollowIp {
        detect: Box::new(move || lock(&d).clone()),
        shared: shared.clone(),
        resync_pods: resync_tx,
    });
    f.manager.sync(&no_sleep).expect("ok");
    assert_eq!(calls(&f), ["create"]);
    assert!(resync_rx.try_recv().is_err(), "nothing changed yet");

    // A new DHCP lease: the next tick writes the InternalIP, the pods' address
    // follows, and every pod is synced again.
    *lock(&detected) = "192.168.7.20".into();
    f.manager.sync(&no_sleep).expect("ok");
    assert_eq!(calls(&f), ["get cache=true", "patch"]);
    let patch = lock(&f.store.patches).pop().expect("ok");
    let addresses = patch["status"]["addresses"].to_string();
    assert!(addresses.contains("192.168.7.20"), "{patch}");
    assert_eq!(shared.get(), "192.168.7.20");
    assert!(resync_rx.try_recv().is_ok());

    // The same address again: nothing written, no resync.
    f.manager.sync(&no_sleep).expect("ok");
    assert!(calls(&f).is_empty());
    assert!(resync_rx.try_recv().is_err());

    // A tick that detects nothing keeps the address.
    *lock(&detected) = String::new();
    f.manager.sync(&no_sleep).expect("ok");
    assert_eq!(shared.get(), "192.168.7.20");
}

#[test]
fn node_ip_detection_takes_an_ip_host_name_as_it_is() {
    assert_eq!(detect_node_ip("10.1.2.3"), "10.1.2.3");
    assert!(!detect_node_ip("localhost").is_empty());
}

#[test]
fn the_default_route_interface_is_the_lowest_metric_zero_route() {
    let routes =
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
                  eth1\t00000000\t0102A8C0\t0003\t0\t0\t200\t00000000\t0\t0\t0\n\
                  eth0\t00000000\t010011AC\t0003\t0\t0\t100\t00000000\t0\t0\t0\n\
                  docker0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n";
    assert_eq!(default_route_interface(routes).as_deref(), Some("eth0"));
    assert_eq!(default_route_interface("Iface\tDestination\n"), None);
}
