//! A node in a cluster end to end, as a user sees it with a real `kubectl`, against the
//! API server stand-in and the real Docker engine: the node Ready in `kubectl get
//! nodes`, API pods (with the `kube-api-access` volume the ServiceAccount admission
//! injects) and a static pod's mirror Running in `kubectl get pods`, the kubelet's
//! events in `kubectl describe pod`, then two minutes without the API server: no
//! container touched, the lease renewed and every status corrected on its return, and
//! `kubectl delete pod` stopping a pod for good.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use runtime::Runtime;
use serde_json::{json, Value};

use crate::apiserver::{Options, PatchType, TestApiServer};
use crate::util::{pod_yaml, wait_for, Node, BUSYBOX, LONG, SLEEPER};

const KUBELET_TOKEN: &str = "good-token";
const KUBECTL_TOKEN: &str = "kubectl-token";
/// The API pods running through the outage.
const PODS: usize = 10;
/// How long the API server is away (the figure).
const OUTAGE: Duration = Duration::from_secs(120);

/// The pod's phase and whether its Ready condition is True, as the API holds them.
fn phase_ready(pod: &Value) -> (String, bool) {
    let st = &pod["status"];
    let ready = st["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    });
    (st["phase"].as_str().unwrap_or_default().to_string(), ready)
}

/// Every container of the node: ID → start time.
fn started(node: &Node) -> BTreeMap<String, Option<SystemTime>> {
    node.containers()
        .into_iter()
        .map(|c| {
            let d = node.docker.inspect_container(&c.id).expect("inspect");
            (c.id, d.started_at)
        })
        .collect()
}

/// The API pods that are not (yet) as the kubelet should report them: Running and
/// Ready, or Succeeded for `done`.
fn wrong_statuses(api: &TestApiServer, done: &str, all: &[String]) -> Vec<String> {
    all.iter()
        .filter(|name| {
            let Some(pod) = api.get("pods", "default", name) else {
                return true;
            };
            let (phase, ready) = phase_ready(&pod);
            if name.as_str() == done {
                phase != "Succeeded"
            } else {
                !(phase == "Running" && ready && pod["status"]["podIP"].is_string())
            }
        })
        .cloned()
        .collect()
}

#[test]
fn a_node_with_api_and_static_pods_rides_out_two_minutes_without_its_api_server() {
    let api = TestApiServer::start(Options {
        tokens: vec![KUBELET_TOKEN.into(), KUBECTL_TOKEN.into()],
        ..Options::default()
    });
    let mut node = Node::new("cluster");
    api.set_token_user(
        KUBELET_TOKEN,
        &format!("system:node:{}", node.name),
        &["system:nodes"],
    );
    api.set_token_user(KUBECTL_TOKEN, "admin", &["system:masters"]);
    api.set_service_account_admission(true);
    let kc = api.kubeconfig(&node.dir, "kubelet.kubeconfig", "token: good-token");
    let user = api.kubeconfig(&node.dir, "user.kubeconfig", "token: kubectl-token");
    node.write_manifest("static.yaml", &pod_yaml("st", 1, &[("c", SLEEPER)]));
    node.start(&[&format!("--kubeconfig={}", kc.display())]);

    // Ten API pods; the last one ends by itself while the API server is away.
    let mut names = Vec::new();
    for i in 0..PODS {
        let name = format!("p{i}");
        let (cmd, restart) = if i == PODS - 1 {
            ("sleep 30; exit 0", "Never")
        } else {
            (SLEEPER, "Always")
        };
        api.create(
            "pods",
            "default",
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                   "spec": {"nodeName": node.name, "terminationGracePeriodSeconds": 1,
                            "restartPolicy": restart,
                            "containers": [{"name": "c", "image": BUSYBOX,
                                            "command": ["sh", "-c", cmd]}]}}),
        )
        .expect("create pod");
        names.push(name);
    }
    let done = names[PODS - 1].clone();
    let mirror = format!("st-{}", node.name);
    wait_for(
        "every API pod and the mirror Running and Ready",
        LONG,
        || {
            let waiting: Vec<&String> = names
                .iter()
                .chain(std::iter::once(&mirror))
                .filter(|n| {
                    api.get("pods", "default", n)
                        .is_none_or(|p| phase_ready(&p) != ("Running".into(), true))
                })
                .collect();
            waiting.is_empty().then_some(())
        },
    );
    // Each API pod got (and mounted) the kube-api-access volume.
    let p0 = api.get("pods", "default", "p0").expect("p0");
    assert!(
        p0["spec"]["volumes"][0]["name"]
            .as_str()
            .is_some_and(|v| v.starts_with("kube-api-access-")),
        "{p0}"
    );

    // What the user sees.
    let nodes = node.kubectl(&user, &["get", "nodes", "-o", "wide"]);
    let row = nodes
        .lines()
        .find(|l| l.starts_with(&node.name))
        .unwrap_or_else(|| panic!("no row for the node:\n{nodes}"));
    assert!(row.contains(" Ready "), "{row}");
    assert!(row.contains("docker://"), "{row}");
    let pods = node.kubectl(&user, &["get", "pods", "-o", "wide"]);
    for name in names.iter().chain(std::iter::once(&mirror)) {
        let row = pods
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name.as_str()))
            .unwrap_or_else(|| panic!("no row for {name}:\n{pods}"));
        assert!(row.contains("1/1") && row.contains("Running"), "{row}");
        assert!(row.contains(&node.name), "{row}");
    }
    let described = node.kubectl(&user, &["describe", "pod", "p0"]);
    for reason in ["Created", "Started"] {
        assert!(described.contains(reason), "{reason} in:\n{described}");
    }

    // Two minutes without the API server. Meanwhile someone (the node controller, a
    // stale writer) leaves a wrong status on p1, and `done` ends on the node.
    let before = started(&node);
    api.down_for(OUTAGE);
    api.patch(
        "pods",
        "default",
        "p1",
        true,
        PatchType::Merge,
        &json!({"status": {"phase": "Pending", "conditions": [
            {"type": "Ready", "status": "False", "reason": "NodeLost"}]}}),
    )
    .expect("patch p1 on the store");
    wait_for(
        "the API server to come back",
        OUTAGE + Duration::from_secs(60),
        || (!api.is_down()).then_some(()),
    );
    let back = Instant::now();
    assert!(node.alive(), "rkubelet survived the outage");

    let user_name = format!("system:node:{}", node.name);
    let renewed = wait_for("a lease renewal after the return", LONG, || {
        api.calls()
            .into_iter()
            .find(|c| {
                c.at >= back
                    && c.user == user_name
                    && c.kind == "leases"
                    && c.verb == "PUT"
                    && c.code == 200
            })
            .map(|c| c.at)
    });
    let corrected = wait_for("every status corrected after the return", LONG, || {
        wrong_statuses(&api, &done, &names)
            .is_empty()
            .then(Instant::now)
    });
    eprintln!(
        "after the API server's return: lease renewed in {:?}, every status corrected in {:?}",
        renewed.saturating_duration_since(back),
        corrected.saturating_duration_since(back),
    );
    assert_eq!(started(&node), before, "no container restarted or replaced");
    for name in &names {
        let pod = api.get("pods", "default", name).expect("pod");
        let restarts = pod["status"]["containerStatuses"][0]["restartCount"].as_i64();
        assert_eq!(restarts, Some(0), "{name}: {pod}");
    }

    // `kubectl delete pod` returns once the pod is gone, its container stopped.
    node.kubectl(&user, &["delete", "pod", "p0", "--grace-period=1"]);
    assert!(api.get("pods", "default", "p0").is_none());
    wait_for("p0's container to stop", LONG, || {
        (!node.running().contains_key("p0/c")).then_some(())
    });
    assert!(
        node.running().contains_key("p2/c"),
        "other pods keep running"
    );
}
