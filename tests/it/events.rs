//! The kubelet's events on the API server (the stand-in), with the real Docker engine
//! and the real kubectl: an API pod's lifecycle (`Pulled` "already present",
//! `Created`, `Started`) with the pod's reference, a crash loop's `BackOff` whose count
//! grows by PATCH on one object, the node's `Starting`, `kubectl get events` and
//! `kubectl describe pod`; and an API server that is away: pods still start, nothing
//! waits, and what was recorded meanwhile arrives once it is back.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::apiserver::{Options, TestApiServer};
use crate::util::{pod_yaml, wait_for, Node, BUSYBOX, LONG, SLEEPER};

fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--request-timeout=20s")
        .args(args)
        .output()
        .expect("kubectl is installed");
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// An API pod bound to `node`.
fn api_pod(name: &str, node: &str, command: &str) -> Value {
    json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": BUSYBOX, "imagePullPolicy": "IfNotPresent",
                            "command": ["sh", "-c", command]}]
        }
    })
}

/// The Events about the object named `name` (of kind `kind`).
fn events_of(api: &TestApiServer, kind: &str, name: &str) -> Vec<Value> {
    api.list("events", None)
        .into_iter()
        .filter(|e| e["involvedObject"]["kind"] == kind && e["involvedObject"]["name"] == name)
        .collect()
}

fn with_reason<'a>(events: &'a [Value], reason: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["reason"] == reason).collect()
}

#[test]
fn api_pod_events_reach_the_api_server_and_kubectl_shows_them() {
    let api = TestApiServer::start(Options::default());
    let mut node = Node::new("events");
    let kc = api.kubeconfig(&node.dir, "kubeconfig", "token: good-token");
    let mut web = api_pod("ev-web", &node.name, SLEEPER);
    // Never ready: every run is an `Unhealthy` event.
    web["spec"]["containers"][0]["readinessProbe"] =
        json!({"exec": {"command": ["sh", "-c", "exit 3"]}, "periodSeconds": 1});
    let pod = api.create("pods", "default", web).expect("pod");
    let uid = pod["metadata"]["uid"].as_str().expect("uid").to_string();
    api.create("pods", "default", api_pod("ev-crash", &node.name, "exit 1"))
        .expect("pod");
    node.start(&[&format!("--kubeconfig={}", kc.display())]);

    // The node's Starting, in default, about the node.
    let starting = wait_for("the node's Starting event", LONG, || {
        with_reason(&events_of(&api, "Node", &node.name), "Starting")
            .first()
            .map(|e| (*e).clone())
    });
    assert_eq!(starting["metadata"]["namespace"], "default");
    assert_eq!(starting["involvedObject"]["uid"], node.name.as_str());
    assert_eq!(starting["message"], "Starting kubelet.");
    assert_eq!(starting["source"]["component"], "kubelet");

    // The pod's lifecycle, each with the pod's reference and the container's path.
    let events = wait_for(
        "Pulled, Created, Started and Unhealthy of ev-web",
        LONG,
        || {
            let ev = events_of(&api, "Pod", "ev-web");
            ["Pulled", "Created", "Started", "Unhealthy"]
                .iter()
                .all(|r| !with_reason(&ev, r).is_empty())
                .then_some(ev)
        },
    );
    let message = |reason: &str| with_reason(&events, reason)[0]["message"].clone();
    assert_eq!(
        message("Pulled"),
        format!("Container image \"{BUSYBOX}\" already present on machine")
    );
    assert_eq!(message("Created"), "Created container: c");
    assert_eq!(message("Started"), "Started container c");
    assert!(
        message("Unhealthy")
            .as_str()
            .is_some_and(|m| m.starts_with("Readiness probe failed:")),
        "{events:?}"
    );
    for e in &events {
        let o = &e["involvedObject"];
        assert_eq!(o["apiVersion"], "v1", "{e}");
        assert_eq!(o["namespace"], "default", "{e}");
        assert_eq!(o["uid"], uid.as_str(), "{e}");
        if e["reason"] != "Pulled" {
            // (Image events name the pod only: a difference from upstream.)
            assert_eq!(o["fieldPath"], "spec.containers{c}", "{e}");
        }
        if e["reason"] != "Unhealthy" {
            // (The prober holds the pod's identity, not its resourceVersion.)
            assert!(o["resourceVersion"].is_string(), "{e}");
        }
        assert_eq!(e["metadata"]["namespace"], "default");
        assert!(
            e["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("ev-web.")),
            "{e}"
        );
        let warning = e["reason"] == "Unhealthy";
        assert_eq!(e["type"], if warning { "Warning" } else { "Normal" });
        assert_eq!(e["source"]["host"], node.name.as_str());
        assert_eq!(e["reportingComponent"], "kubelet");
        assert_eq!(e["reportingInstance"], node.name.as_str());
        assert!(e["count"].as_i64().is_some_and(|c| c >= 1), "{e}");
        assert!(e["firstTimestamp"].is_string() && e["lastTimestamp"].is_string());
    }

    // A crash loop: one BackOff object whose count grows by PATCH.
    let patches = || {
        api.calls()
            .iter()
            .filter(|c| c.verb == "PATCH" && c.kind == "events")
            .count()
    };
    // The stand-in records a call after answering it: the count can be in its store a
    // moment before the PATCH that raised it is in its calls.
    let backoff = wait_for("ev-crash's BackOff counted twice", LONG * 2, || {
        let ev = events_of(&api, "Pod", "ev-crash");
        let b = with_reason(&ev, "BackOff");
        b.iter()
            .find(|e| e["count"].as_i64().is_some_and(|c| c >= 2))
            .filter(|_| patches() >= 1)
            .map(|e| ((*e).clone(), b.len()))
    });
    let (backoff, objects) = backoff;
    assert_eq!(objects, 1, "one BackOff object, not one per repeat");
    assert_eq!(backoff["type"], "Warning");
    assert!(
        backoff["message"].as_str().is_some_and(
            |m| m.starts_with("Back-off restarting failed container c in pod ev-crash")
        ),
        "{backoff}"
    );
    assert_ne!(backoff["firstTimestamp"], Value::Null);
    let patches = patches();
    assert!(patches >= 1, "repeats are patches");
    let creates = api
        .calls()
        .iter()
        .filter(|c| c.verb == "POST" && c.kind == "events")
        .count();
    eprintln!(
        "events: {creates} creates and {patches} patches for {} Event objects",
        api.list("events", None).len()
    );

    // `describe` shows ev-web's repeated readiness failure as "(xN over …)" once the
    // API server holds it counted twice.
    wait_for("ev-web's Unhealthy counted twice", LONG * 2, || {
        let ev = events_of(&api, "Pod", "ev-web");
        with_reason(&ev, "Unhealthy")
            .iter()
            .any(|e| e["count"].as_i64().is_some_and(|c| c >= 2))
            .then_some(())
    });

    // The real client: `get events` and `describe pod`.
    let out = kubectl(&kc, &["get", "events", "-n", "default"]);
    assert!(out.starts_with("LAST SEEN"), "{out}");
    assert!(
        out.lines().any(|l| l.contains("Started")
            && l.contains("pod/ev-web")
            && l.contains("Started container c")),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.contains("Warning") && l.contains("BackOff") && l.contains("pod/ev-crash")),
        "{out}"
    );
    let out = kubectl(&kc, &["describe", "pod", "ev-web", "-n", "default"]);
    let section = out.split("Events:").nth(1).unwrap_or_default();
    for want in [
        ["Normal", "Pulled", "already present on machine"],
        ["Normal", "Created", "Created container: c"],
        ["Normal", "Started", "Started container c"],
        ["Warning", "Unhealthy", "Readiness probe failed:"],
    ] {
        assert!(
            section
                .lines()
                .any(|l| want.iter().all(|w| l.contains(w)) && l.contains("kubelet")),
            "{want:?} in:\n{out}"
        );
    }
    // Repeats are counted on one object: kubectl says "(xN over …)".
    assert!(section.contains("(x"), "{out}");
}

#[test]
fn an_unreachable_api_server_holds_up_no_pod_and_events_arrive_after() {
    let api = TestApiServer::start(Options::default());
    let mut node = Node::new("events-down");
    let kc = api.kubeconfig(&node.dir, "kubeconfig", "token: good-token");
    node.start(&[&format!("--kubeconfig={}", kc.display())]);
    wait_for("the node's Starting event", LONG, || {
        (!with_reason(&events_of(&api, "Node", &node.name), "Starting").is_empty()).then_some(())
    });

    // Away for longer than 12 tries 10 s apart: a static pod starts all the same.
    let away = Duration::from_secs(140);
    let began = Instant::now();
    api.down_for(away);
    node.write_manifest("static.yaml", &pod_yaml("ev-static", 1, &[("c", SLEEPER)]));
    let static_name = format!("ev-static-{}", node.name);
    wait_for("the static pod to run while the API is away", LONG, || {
        node.running()
            .contains_key(&format!("{static_name}/c"))
            .then_some(())
    });
    assert!(
        api.is_down(),
        "the pod ran only after the outage ({:?}); nothing proven",
        began.elapsed()
    );
    let (code, body) = node.healthz_get("/healthz");
    assert_eq!(code, 200, "{body}");
    assert!(events_of(&api, "Pod", &static_name).is_empty());

    // The first event tried is given up after its 12 tries, and counted.
    let dropped = wait_for("an event dropped after its tries", LONG * 2, || {
        let (_, metrics) = node.ro_get("/metrics");
        metrics
            .lines()
            .find_map(|l| {
                l.strip_prefix("rkubelet_events_dropped_total{reason=\"retries_exhausted\"} ")
            })
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|v| *v >= 1.0)
    });
    assert!(
        node.log().contains("not written to the API server"),
        "{}",
        node.log()
    );

    // Back: the events still waiting in the queue are written.
    let events = wait_for("the static pod's events after the outage", LONG * 2, || {
        let ev = events_of(&api, "Pod", &static_name);
        (!with_reason(&ev, "Started").is_empty()).then_some(ev)
    });
    assert!(!with_reason(&events, "Created").is_empty(), "{events:?}");
    assert!(node.alive());
    let running = node.running();
    assert!(
        running.contains_key(&format!("{static_name}/c")),
        "{running:?}"
    );
    eprintln!("events: {dropped} dropped after their tries during a {away:?} outage");
}
