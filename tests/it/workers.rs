//! The pod workers are shared by every pod: what one pod waits for (a postStart hook
//! that hangs, a container using a long grace period after a failed liveness probe)
//! must park that pod, never a worker (issue 27). Four such pods, as many as there
//! are workers, and another pod must still start within 10 s of being seen and have
//! its crashed container restarted within its backoff.

use std::time::{Duration, SystemTime};

use crate::util::{wait_for, Node, BUSYBOX, LONG, SLEEPER};
use runtime::ContainerState;
use serde_json::Value;

/// As many as the kubelet's pod workers (`pod_workers::DEFAULT_WORKERS`).
const WORKERS: usize = 4;
/// The bound from a pod being seen by the kubelet to its container running.
const START_BOUND: Duration = Duration::from_secs(10);
/// Overall waits: generous, so that a failure is the bound, not a timeout.
const GENEROUS: Duration = Duration::from_secs(240);

fn manifest(v: &Value) -> String {
    serde_json::to_string(v).expect("json")
}

/// The pod named `pod` (without the node suffix) from `/pods`.
fn pod(node: &Node, pod: &str) -> Option<Value> {
    let full = format!("{pod}-{}", node.name);
    node.pods()["items"]
        .as_array()?
        .iter()
        .find(|p| p["metadata"]["name"] == full.as_str())
        .cloned()
}

fn container_status(p: &Value, c: &str) -> Option<Value> {
    p["status"]["containerStatuses"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == c)
        .cloned()
}

fn time(v: &Value) -> SystemTime {
    let s = v.as_str().unwrap_or_else(|| panic!("not a time: {v}"));
    base::time::parse_rfc3339(s).unwrap_or_else(|| panic!("not a time: {s}"))
}

/// `later - earlier` in seconds (negative when `later` is before).
fn secs(earlier: SystemTime, later: SystemTime) -> f64 {
    match later.duration_since(earlier) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

/// Adds a pod of one container running `command` and waits until it runs; asserts
/// that it ran within [`START_BOUND`] of the kubelet seeing it (its `config.seen`).
/// Returns the pod.
fn add_and_expect_a_quick_start(node: &Node, name: &str, command: &str) -> Value {
    node.write_manifest(
        &format!("{name}.yaml"),
        &manifest(&serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [
                {"name": name, "image": BUSYBOX, "command": ["sh", "-c", command]}
            ]}
        })),
    );
    let (p, st) = wait_for(&format!("{name} to run"), GENEROUS, || {
        let p = pod(node, name)?;
        let st = container_status(&p, name)?;
        let started = st["state"]["running"]["startedAt"]
            .as_str()
            .or(st["lastState"]["terminated"]["startedAt"].as_str())?
            .to_string();
        Some((p, Value::String(started)))
    });
    let seen = time(&p["metadata"]["annotations"]["kubernetes.io/config.seen"]);
    let took = secs(seen, time(&st));
    assert!(
        took <= START_BOUND.as_secs_f64(),
        "{name} started {took} s after the kubelet saw it, over {START_BOUND:?}: the \
         workers were held by the other pods\n{}",
        node.log()
    );
    p
}

#[test]
fn four_hung_post_start_hooks_leave_another_pod_starting_at_once() {
    let mut node = Node::new("wk-hook");
    for i in 0..WORKERS {
        let name = format!("hook{i}");
        node.write_manifest(
            &format!("{name}.yaml"),
            &manifest(&serde_json::json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name},
                "spec": {"terminationGracePeriodSeconds": 1, "containers": [
                    {"name": "hooked", "image": BUSYBOX, "command": ["sh", "-c", SLEEPER],
                     "lifecycle": {"postStart": {"exec": {"command": ["sleep", "100000"]}}}}
                ]}
            })),
        );
    }
    node.start(&[]);
    // Every hooked container runs, and its hook with it (for two minutes).
    wait_for("the four hooked containers to run", LONG, || {
        let running = node
            .containers_named("hooked")
            .into_iter()
            .filter(|c| c.state == ContainerState::Running)
            .count();
        (running == WORKERS).then_some(())
    });
    add_and_expect_a_quick_start(&node, "plain", SLEEPER);
    let (code, body) = node.healthz_get("/healthz?verbose");
    assert_eq!(code, 200, "{body}");
}

#[test]
fn four_stubborn_liveness_kills_leave_another_pods_crash_restarted_within_its_backoff() {
    let mut node = Node::new("wk-live");
    for i in 0..WORKERS {
        let name = format!("stub{i}");
        node.write_manifest(
            &format!("{name}.yaml"),
            &manifest(&serde_json::json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name},
                "spec": {"terminationGracePeriodSeconds": 300, "containers": [
                    {"name": "stubborn", "image": BUSYBOX,
                     "command": ["sh", "-c", "trap '' TERM; while true; do sleep 1; done"],
                     "livenessProbe": {"exec": {"command": ["false"]},
                                       "periodSeconds": 1, "failureThreshold": 1}}
                ]}
            })),
        );
    }
    node.start(&[]);
    // Each stubborn container failed its probe and was told to stop: it ignores
    // SIGTERM, so its stop lasts its 300 s grace.
    wait_for("the four liveness kills", LONG, || {
        let log = node.log();
        let killed = (0..WORKERS)
            .filter(|i| {
                log.lines().any(|l| {
                    l.contains(&format!("stub{i}-"))
                        && l.contains(
                            "killing container stubborn: Container stubborn failed liveness probe",
                        )
                })
            })
            .count();
        (killed == WORKERS).then_some(())
    });
    // Another pod starts at once, and its container, which crashes, is restarted
    // within its backoff (none for the first restart, 10 s for the second).
    add_and_expect_a_quick_start(&node, "crasher", "sleep 2; exit 1");
    let st = wait_for("the crasher restarted twice", GENEROUS, || {
        let p = pod(&node, "crasher")?;
        let st = container_status(&p, "crasher")?;
        (st["restartCount"].as_i64() >= Some(2) && st["state"]["running"].is_object()).then_some(st)
    });
    let finished = time(&st["lastState"]["terminated"]["finishedAt"]);
    let restarted = time(&st["state"]["running"]["startedAt"]);
    let gap = secs(finished, restarted);
    assert!(
        gap <= 20.0,
        "restarted {gap} s after it crashed, over its 10 s backoff (+10 s): {st}\n{}",
        node.log()
    );
    let (code, body) = node.healthz_get("/healthz?verbose");
    assert_eq!(code, 200, "{body}");
}
