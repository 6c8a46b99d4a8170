//! Pod lifecycle end to end against the real Docker engine: CrashLoopBackOff timing,
//! init containers, sidecars, hooks, graceful termination, activeDeadlineSeconds,
//! termination messages, and restart counts across a kubelet restart.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::util::{label, split_threads, thread_names, wait_for, Node, BUSYBOX, LONG, SLEEPER};
use runtime::{ContainerState, Runtime};
use serde_json::Value;

/// A shell loop that ignores SIGTERM (a shell as PID 1 without a handler does).
const STUBBORN: &str = "while true; do sleep 1; done";

/// The status of `pod` (name without the node suffix) in `/pods`.
fn pod_status(node: &Node, pod: &str) -> Option<Value> {
    let full = format!("{pod}-{}", node.name);
    node.pods()["items"]
        .as_array()?
        .iter()
        .find(|p| p["metadata"]["name"] == full.as_str())
        .map(|p| p["status"].clone())
}

/// One container's status (app or init) of `pod`.
fn container_status(node: &Node, pod: &str, container: &str) -> Option<Value> {
    let st = pod_status(node, pod)?;
    ["containerStatuses", "initContainerStatuses"]
        .iter()
        .filter_map(|k| st[*k].as_array())
        .flatten()
        .find(|c| c["name"] == container)
        .cloned()
}

fn condition(st: &Value, ty: &str) -> Value {
    st["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == ty).cloned())
        .unwrap_or(Value::Null)
}

/// Waits until the pod's phase is `phase`; returns its status.
fn wait_phase(node: &Node, pod: &str, phase: &str) -> Value {
    wait_for(&format!("pod {pod} {phase}"), LONG, || {
        pod_status(node, pod).filter(|s| s["phase"] == phase)
    })
}

/// One Docker event of a node's container, as `docker events` reports it: Docker's
/// own action names (`kill` for each signal among them), the container's labels.
struct DockerEvent {
    action: String,
    labels: BTreeMap<String, String>,
    time: SystemTime,
}

/// Records the Docker events of one node's containers (`docker events`, read by a
/// named thread) until dropped.
struct Events {
    seen: Arc<Mutex<Vec<DockerEvent>>>,
    child: std::process::Child,
}

impl Events {
    fn watch(node: &Node) -> Events {
        use std::io::BufRead;
        let seen: Arc<Mutex<Vec<DockerEvent>>> = Arc::default();
        let mut child = std::process::Command::new("docker")
            .args([
                "events",
                "--format",
                "{{json .}}",
                "--filter",
                "type=container",
            ])
            .arg("--filter")
            .arg(format!("label=io.rkubelet.node={}", node.name))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("docker events");
        let out = child.stdout.take().expect("its output");
        let s = seen.clone();
        std::thread::Builder::new()
            .name("it-events".into())
            .spawn(move || {
                for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                    let Ok(v) = serde_json::from_str::<Value>(&line) else {
                        continue;
                    };
                    let labels = v["Actor"]["Attributes"]
                        .as_object()
                        .into_iter()
                        .flatten()
                        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                        .collect();
                    s.lock().expect("events").push(DockerEvent {
                        action: v["Action"].as_str().unwrap_or_default().to_string(),
                        labels,
                        time: UNIX_EPOCH
                            + Duration::from_nanos(v["timeNano"].as_u64().unwrap_or(0)),
                    });
                }
            })
            .expect("spawn event reader");
        Events { seen, child }
    }

    /// (action, time, restart count) of one container's events, in order.
    fn of(&self, container: &str) -> Vec<(String, SystemTime, u32)> {
        self.seen
            .lock()
            .expect("events")
            .iter()
            .filter(|e| {
                e.labels
                    .get("io.kubernetes.container.name")
                    .map(String::as_str)
                    == Some(container)
            })
            .map(|e| {
                let rc = e
                    .labels
                    .get("annotation.io.kubernetes.container.restartCount")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                (e.action.clone(), e.time, rc)
            })
            .collect()
    }

    /// The time of the first `action` event of `container` (with restart count `rc`).
    fn time(&self, container: &str, action: &str, rc: u32) -> Option<SystemTime> {
        self.of(container)
            .into_iter()
            .find(|(a, _, r)| a == action && *r == rc)
            .map(|(_, t, _)| t)
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn secs(a: SystemTime, b: SystemTime) -> f64 {
    b.duration_since(a)
        .map_or_else(|e| -e.duration().as_secs_f64(), |d| d.as_secs_f64())
}

/// A manifest from a JSON value (JSON is YAML).
fn manifest(v: &Value) -> String {
    serde_json::to_string_pretty(v).expect("json")
}

fn sh(cmd: &str) -> Value {
    serde_json::json!(["sh", "-c", cmd])
}

#[test]
fn crash_loop_backs_off_10_20_40_and_keeps_restart_count_across_a_restart() {
    let mut node = Node::new("lc-crash");
    let events = Events::watch(&node);
    node.write_manifest(
        "crash.yaml",
        &manifest(&serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "crash"},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [
                {"name": "c", "image": BUSYBOX, "command": sh("echo dying; exit 1")}
            ]}
        })),
    );
    node.start(&[]);
    // Deaths 0..3 and the starts after them: restart 1 at once, then 10 s, 20 s, 40 s.
    let long = Duration::from_secs(180);
    wait_for("restart 4 to start", long, || {
        events.time("c", "start", 4).map(|_| ())
    });
    let gaps: Vec<f64> = (1..=4)
        .map(|rc| {
            let died = events.time("c", "die", rc - 1).expect("die event");
            let started = events.time("c", "start", rc).expect("start event");
            secs(died, started)
        })
        .collect();
    let log = node.log();
    assert!(gaps[0] < 5.0, "first restart at once: {gaps:?}");
    for (gap, backoff) in gaps[1..].iter().zip([10.0, 20.0, 40.0]) {
        // Never before the backoff; after it within a sync tick or two (loaded machine).
        assert!(
            *gap >= backoff - 0.5 && *gap <= backoff + 6.0,
            "backoff {backoff}: gaps {gaps:?}\n{log}"
        );
    }

    // While it waits, the status says why, and the dead instance is the last state.
    let st = wait_for(
        "CrashLoopBackOff after restart 4 in the status",
        LONG,
        || {
            container_status(&node, "crash", "c").filter(|c| {
                c["state"]["waiting"]["reason"] == "CrashLoopBackOff" && c["restartCount"] == 4
            })
        },
    );
    let msg = st["state"]["waiting"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        msg.starts_with("back-off 1m20s restarting failed container=c pod=crash-"),
        "{st}"
    );
    assert_eq!(st["lastState"]["terminated"]["reason"], "Error", "{st}");
    assert_eq!(st["lastState"]["terminated"]["exitCode"], 1, "{st}");
    assert_eq!(
        pod_status(&node, "crash").expect("status")["phase"],
        "Running",
        "a crash-looping Always pod is Running"
    );
    assert!(
        node.log().contains("Warning BackOff pod/default/crash-"),
        "the BackOff event is logged"
    );
    assert!(node.log().contains(&format!(
        "Back-off restarting failed container c in pod crash-{}",
        node.name
    )));

    // A kubelet restart keeps the restart count (it lives in the container labels).
    node.kill9();
    node.start(&[]);
    let st = wait_for("the status after the restart", LONG, || {
        container_status(&node, "crash", "c")
    });
    assert!(st["restartCount"].as_i64().is_some_and(|r| r >= 4), "{st}");
}

#[test]
fn init_containers_run_one_at_a_time_before_the_app() {
    let mut node = Node::new("lc-init");
    node.write_manifest(
        "init.yaml",
        &manifest(&serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "init"},
            "spec": {"terminationGracePeriodSeconds": 1,
                "initContainers": [
                    {"name": "i1", "image": BUSYBOX, "command": sh("sleep 2")},
                    {"name": "i2", "image": BUSYBOX, "command": sh("sleep 3")}
                ],
                "containers": [{"name": "app", "image": BUSYBOX, "command": sh(SLEEPER)}]}
        })),
    );
    node.write_manifest(
        "fail.yaml",
        &manifest(&serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "fail"},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                "initContainers": [{"name": "bad", "image": BUSYBOX, "command": sh("exit 3")}],
                "containers": [{"name": "never", "image": BUSYBOX, "command": sh(SLEEPER)}]}
        })),
    );
    node.start(&[]);

    // While i2 runs: i1 done, the app waits with PodInitializing, not initialized.
    let st = wait_for("i2 running", LONG, || {
        pod_status(&node, "init")
            .filter(|s| s["initContainerStatuses"][1]["state"]["running"].is_object())
    });
    assert_eq!(st["phase"], "Pending", "{st}");
    assert_eq!(
        st["initContainerStatuses"][0]["state"]["terminated"]["reason"], "Completed",
        "{st}"
    );
    assert_eq!(
        st["containerStatuses"][0]["state"]["waiting"]["reason"], "PodInitializing",
        "{st}"
    );
    let init = condition(&st, "Initialized");
    assert_eq!(init["status"], "False", "{st}");
    assert_eq!(init["reason"], "ContainersNotInitialized");
    assert_eq!(init["message"], "containers with incomplete status: [i2]");
    assert!(
        node.containers_named("app").is_empty(),
        "app not created yet"
    );

    let st = wait_phase(&node, "init", "Running");
    assert_eq!(condition(&st, "Initialized")["status"], "True", "{st}");
    assert_eq!(condition(&st, "Ready")["status"], "True", "{st}");
    assert_eq!(
        condition(&st, "PodReadyToStartContainers")["status"],
        "True"
    );
    // Strictly one after the other, from the runtime's own times.
    let times = |name: &str| {
        let c = node.containers_named(name).remove(0);
        let d = node.docker.inspect_container(&c.id).expect("inspect");
        (d.started_at.expect("started"), d.finished_at)
    };
    let (i1_start, i1_end) = times("i1");
    let (i2_start, i2_end) = times("i2");
    let (app_start, _) = times("app");
    let (i1_end, i2_end) = (i1_end.expect("i1 ended"), i2_end.expect("i2 ended"));
    assert!(i1_start < i1_end && i1_end <= i2_start && i2_end <= app_start);

    // A failed init container under restartPolicy Never fails the pod; the app never runs.
    let st = wait_phase(&node, "fail", "Failed");
    assert_eq!(
        st["initContainerStatuses"][0]["state"]["terminated"]["exitCode"], 3,
        "{st}"
    );
    assert!(node.containers_named("never").is_empty());
    assert_eq!(condition(&st, "Ready")["reason"], "PodFailed", "{st}");
}

#[test]
fn sidecars_start_in_order_run_beside_the_app_and_stop_after_it() {
    let mut node = Node::new("lc-side");
    let events = Events::watch(&node);
    node.write_manifest(
        "side.yaml",
        &manifest(&serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "side"},
            "spec": {"terminationGracePeriodSeconds": 20,
                "initContainers": [
                    {"name": "s1", "image": BUSYBOX, "restartPolicy": "Always", "command": sh(SLEEPER)},
                    {"name": "s2", "image": BUSYBOX, "restartPolicy": "Always", "command": sh(SLEEPER)}
                ],
                "containers": [{"name": "app", "image": BUSYBOX,
                    // The app takes 2 s to stop: the sidecars must wait for it.
                    "command": sh("trap 'sleep 2; exit 0' TERM; while true; do sleep 1 & wait $!; done")}]}
        })),
    );
    // A job with a sidecar: when the job ends the pod ends, sidecar included.
    node.write_manifest(
        "job.yaml",
        &manifest(&serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "job"},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 5,
                "initContainers": [
                    {"name": "helper", "image": BUSYBOX, "restartPolicy": "Always", "command": sh(SLEEPER)}
                ],
                "containers": [{"name": "work", "image": BUSYBOX, "command": sh("sleep 2; exit 0")}]}
        })),
    );
    // A sidecar that dies is restarted beside the app, even under restartPolicy Never.
    node.write_manifest(
        "flaky.yaml",
        &manifest(&serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "flaky"},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                "initContainers": [
                    {"name": "dies", "image": BUSYBOX, "restartPolicy": "Always", "command": sh("sleep 2; exit 1")}
                ],
                "containers": [{"name": "main", "image": BUSYBOX, "command": sh(SLEEPER)}]}
        })),
    );
    node.start(&[]);
    let st = wait_phase(&node, "side", "Running");
    assert_eq!(condition(&st, "Initialized")["status"], "True", "{st}");
    assert_eq!(condition(&st, "ContainersReady")["status"], "True", "{st}");
    let s1 = events.time("s1", "start", 0).expect("s1 started");
    let s2 = events.time("s2", "start", 0).expect("s2 started");
    let app = events.time("app", "start", 0).expect("app started");
    assert!(s1 < s2 && s2 < app, "start order s1, s2, app");
    for s in ["s1", "s2"] {
        let c = container_status(&node, "side", s).expect("sidecar status");
        assert!(c["state"]["running"].is_object(), "{c}");
        assert_eq!(c["ready"], true, "{c}");
    }

    // The job: Succeeded once its work is done; its sidecar is stopped.
    let st = wait_phase(&node, "job", "Succeeded");
    assert_eq!(
        st["containerStatuses"][0]["state"]["terminated"]["reason"], "Completed",
        "{st}"
    );
    wait_for("the job's sidecar to stop", LONG, || {
        (!node
            .running()
            .contains_key(&format!("job-{}/helper", node.name)))
        .then_some(())
    });

    let dies = wait_for("the dead sidecar to be restarted", LONG, || {
        container_status(&node, "flaky", "dies")
            .filter(|c| c["restartCount"].as_i64().is_some_and(|r| r >= 1))
    });
    assert_eq!(dies["lastState"]["terminated"]["exitCode"], 1, "{dies}");
    let st = pod_status(&node, "flaky").expect("status");
    assert_eq!(st["phase"], "Running", "{st}");
    assert_eq!(
        st["containerStatuses"][0]["restartCount"], 0,
        "the app is untouched: {st}"
    );

    // Removing the pod stops the app first, then s2, then s1.
    std::fs::remove_file(node.manifests().join("side.yaml")).expect("remove manifest");
    wait_for("s1 to die", LONG, || {
        events.time("s1", "die", 0).map(|_| ())
    });
    let app_died = events.time("app", "die", 0).expect("app died");
    let s2_died = events.time("s2", "die", 0).expect("s2 died");
    let s1_died = events.time("s1", "die", 0).expect("s1 died");
    assert!(
        app_died <= s2_died && s2_died <= s1_died,
        "stop order app, s2, s1: {:?}",
        events.of("s1")
    );
    assert!(
        secs(app_died, s2_died) < 10.0,
        "the sidecars stop right after the app"
    );
}

#[test]
fn https_post_start_hook_skips_certificate_verification() {
    // A TLS server with a certificate no root vouches for: upstream's hook client does
    // not verify, so the hook succeeds and the container keeps running.
    let tls = crate::util::TlsServer::start();
    let mut node = Node::new("lc-https");
    node.write_manifest(
        "tls.yaml",
        &manifest(&serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "tls"},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [
                {"name": "app", "image": BUSYBOX, "command": sh(SLEEPER),
                 "lifecycle": {"postStart": {"httpGet": {
                     "scheme": "HTTPS", "host": "127.0.0.1", "port": tls.port, "path": "/"}}}}
            ]}
        })),
    );
    node.start(&[]);
    let st = wait_for("the app to run after its HTTPS hook", LONG, || {
        container_status(&node, "tls", "app").filter(|c| c["state"]["running"].is_object())
    });
    assert_eq!(st["restartCount"].as_i64(), Some(0), "{st}");
    assert!(
        !node.log().contains("FailedPostStartHook"),
        "{}",
        node.log()
    );
}

#[test]
fn post_start_runs_before_the_app_relies_on_it_and_a_failing_one_kills_the_container() {
    let mut node = Node::new("lc-hook");
    node.write_manifest(
        "hook.yaml",
        &manifest(&serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "hook"},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [
                {"name": "app", "image": BUSYBOX,
                 "command": sh(&format!("while [ ! -f /tmp/ready ]; do sleep 1; done; echo saw $(cat /tmp/ready); {SLEEPER}")),
                 "lifecycle": {"postStart": {"exec": {"command": sh("echo hook-wrote > /tmp/ready")}}}}
            ]}
        })),
    );
    node.write_manifest(
        "badhook.yaml",
        &manifest(&serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "badhook"},
            "spec": {"terminationGracePeriodSeconds": 2, "containers": [
                {"name": "victim", "image": BUSYBOX, "command": sh(SLEEPER),
                 "lifecycle": {"postStart": {"exec": {"command": sh("echo nope; exit 7")}}}}
            ]}
        })),
    );
    // httpGet hooks go to the pod's IP: a sidecar web server answers (404 is still an
    // answer: upstream ignores the status code); a closed port fails the hook.
    node.write_manifest(
        "web.yaml",
        &manifest(&serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web"},
            "spec": {"terminationGracePeriodSeconds": 1,
                "initContainers": [{"name": "httpd", "image": BUSYBOX, "restartPolicy": "Always",
                    "command": sh("httpd -f -vv -p 8080 -h /")}],
                "containers": [
                    {"name": "client", "image": BUSYBOX, "command": sh(SLEEPER),
                     "ports": [{"name": "www", "containerPort": 8080}],
                     "lifecycle": {"postStart": {"httpGet": {"path": "/hello", "port": "www"}}}},
                    {"name": "closed", "image": BUSYBOX, "command": sh(SLEEPER),
                     "lifecycle": {"postStart": {"httpGet": {"path": "/nothing", "port": 1}}}}
                ]}
        })),
    );
    node.start(&[]);
    let id = wait_for("the app to see the hook's file", LONG, || {
        let c = node.containers_named("app").into_iter().next()?;
        let logs = node.docker.logs(&c.id, None).ok()?;
        String::from_utf8_lossy(&logs)
            .contains("saw hook-wrote")
            .then_some(c.id)
    });
    assert_eq!(
        node.docker.inspect_container(&id).expect("inspect").state,
        ContainerState::Running
    );

    // The failing hook: event, the container killed, restarted with backoff.
    wait_for("the victim to be restarted", LONG, || {
        container_status(&node, "badhook", "victim")
            .filter(|c| c["restartCount"].as_i64().is_some_and(|r| r >= 1))
    });
    let log = node.log();
    assert!(
        log.contains("Warning FailedPostStartHook pod/default/badhook-")
            && log.contains("PostStartHook failed"),
        "{log}"
    );
    assert!(log.contains("container victim: PostStartHookError: Exec lifecycle hook ([sh -c echo nope; exit 7]) for Container \"victim\""), "{log}");
    assert!(log.contains("exited with 7"), "{log}");

    let httpd = node.containers_named("httpd").remove(0);
    wait_for("the sidecar to log the hook's request", LONG, || {
        let logs = node.docker.logs(&httpd.id, None).ok()?;
        String::from_utf8_lossy(&logs)
            .contains("url:/hello")
            .then_some(())
    });
    wait_for("the closed port to fail its hook", LONG, || {
        node.log()
            .contains("HTTP lifecycle hook (/nothing) for Container \"closed\"")
            .then_some(())
    });
    // The status is published when the sync that ran both hooks ends, which may be
    // after the hook's log line on a loaded machine.
    let client = wait_for("the client's status to say running", LONG, || {
        container_status(&node, "web", "client").filter(|c| c["state"]["running"].is_object())
    });
    assert_eq!(client["restartCount"], 0, "{client}");
    assert!(node
        .containers_named("victim")
        .iter()
        .any(|c| c.state == ContainerState::Exited));
}

#[test]
fn pre_stop_hooks_delay_the_stop_within_the_grace_period() {
    let mut node = Node::new("lc-prestop");
    let events = Events::watch(&node);
    node.write_manifest(
        "pre.yaml",
        &manifest(&serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "pre"},
            "spec": {"terminationGracePeriodSeconds": 20, "containers": [
                {"name": "exechook", "image": BUSYBOX, "command": sh(SLEEPER),
                 "lifecycle": {"preStop": {"exec": {"command": sh("sleep 3")}}}},
                {"name": "sleephook", "image": BUSYBOX, "command": sh(SLEEPER),
                 "lifecycle": {"preStop": {"sleep": {"seconds": 3}}}},
                {"name": "plain", "image": BUSYBOX, "command": sh(SLEEPER)}
            ]}
        })),
    );
    node.start(&[]);
    wait_phase(&node, "pre", "Running");
    let removed = SystemTime::now();
    std::fs::remove_file(node.manifests().join("pre.yaml")).expect("remove manifest");
    wait_for("every container to die", LONG, || {
        ["exechook", "sleephook", "plain"]
            .iter()
            .all(|c| events.time(c, "die", 0).is_some())
            .then_some(())
    });
    let after = |c: &str| secs(removed, events.time(c, "die", 0).expect("die"));
    assert!(
        after("plain") < 3.0,
        "no hook: stops at once ({})",
        after("plain")
    );
    for c in ["exechook", "sleephook"] {
        // The hook's 3 s come first; the TERM trap then exits at once.
        assert!(
            after(c) >= 3.0 && after(c) < 12.0,
            "{c} died {}s after the removal",
            after(c)
        );
    }
}

#[test]
fn grace_period_is_honoured_then_sigkill_and_the_stop_signal_is_used() {
    let mut node = Node::new("lc-grace");
    let events = Events::watch(&node);
    node.write_manifest(
        "grace.yaml",
        &manifest(&serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "grace"},
            "spec": {"terminationGracePeriodSeconds": 5, "containers": [
                {"name": "polite", "image": BUSYBOX, "command": sh(SLEEPER)},
                {"name": "stubborn", "image": BUSYBOX, "command": sh(STUBBORN)},
                {"name": "usr1", "image": BUSYBOX,
                 "command": sh("trap 'exit 0' USR1; while true; do sleep 1 & wait $!; done"),
                 "lifecycle": {"stopSignal": "SIGUSR1"}}
            ]}
        })),
    );
    node.start(&[]);
    wait_phase(&node, "grace", "Running");
    let removed = SystemTime::now();
    std::fs::remove_file(node.manifests().join("grace.yaml")).expect("remove manifest");
    wait_for("every container to die", LONG, || {
        ["polite", "stubborn", "usr1"]
            .iter()
            .all(|c| events.time(c, "die", 0).is_some())
            .then_some(())
    });
    let after = |c: &str| secs(removed, events.time(c, "die", 0).expect("die"));
    assert!(after("polite") < 3.0, "TERM handled: {}", after("polite"));
    assert!(
        after("usr1") < 3.0,
        "its stop signal USR1 handled: {}",
        after("usr1")
    );
    assert!(
        after("stubborn") >= 5.0 && after("stubborn") < 15.0,
        "ignored TERM: SIGKILL after the 5 s grace, not before: {}",
        after("stubborn")
    );
    // Docker reports each signal as a `kill` event: the stop signal for every one, and
    // SIGKILL after it for the stubborn one only.
    let kills: BTreeMap<&str, usize> = ["polite", "stubborn", "usr1"]
        .iter()
        .map(|c| {
            (
                *c,
                events.of(c).iter().filter(|(a, _, _)| a == "kill").count(),
            )
        })
        .collect();
    assert_eq!(kills["polite"], 1, "{kills:?}");
    assert_eq!(kills["usr1"], 1, "{kills:?}");
    assert_eq!(kills["stubborn"], 2, "{kills:?}");
}

#[test]
fn pods_ignoring_sigterm_are_stopped_together_in_about_one_grace_period() {
    const PODS: usize = 11;
    const GRACE: u64 = 3;
    let mut node = Node::new("lc-many");
    for i in 0..PODS {
        node.write_manifest(
            &format!("deaf-{i}.yaml"),
            &manifest(&serde_json::json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("deaf-{i}")},
                "spec": {"terminationGracePeriodSeconds": GRACE, "containers": [
                    // Traps SIGTERM and goes on: only SIGKILL ends it.
                    {"name": "app", "image": BUSYBOX,
                     "command": sh("trap 'echo ignored' TERM; while true; do sleep 1 & wait $!; done")}
                ]}
            })),
        );
    }
    node.start(&[]);
    wait_for("every pod running", LONG, || {
        (node
            .running()
            .keys()
            .filter(|k| k.ends_with("/app"))
            .count()
            == PODS)
            .then_some(())
    });
    let (_, threads_before) = split_threads(&thread_names(node.pid()));
    let removed = std::time::Instant::now();
    for i in 0..PODS {
        std::fs::remove_file(node.manifests().join(format!("deaf-{i}.yaml")))
            .expect("remove manifest");
    }
    // Loops never grow; pool workers (started for the kills) stay within their pools'
    // fixed bounds, whatever the number of pods.
    let mut most = threads_before.len();
    let mut most_kill = 0;
    let mut most_workers = 0;
    wait_for("every container to be gone", LONG, || {
        let (pools, loops) = split_threads(&thread_names(node.pid()));
        most = most.max(loops.len());
        most_kill = most_kill.max(pools.get("pod-kill").copied().unwrap_or(0));
        most_workers = most_workers.max(pools.get("pod-worker").copied().unwrap_or(0));
        node.containers().is_empty().then_some(())
    });
    assert!(
        most_kill <= rkubelet::pod_killer::STEP_THREADS
            && most_workers <= rkubelet::pod_workers::DEFAULT_WORKERS,
        "{most_kill} pod-kill and {most_workers} pod-worker threads"
    );
    let took = removed.elapsed();
    // Every pod's grace runs at once: about one grace period plus the engine's work
    // (4.5 s measured here), not PODS x GRACE (33 s) as when each grace held a
    // thread, nor the 9 s at least of a pool of four threads waiting out graces.
    assert!(
        took >= Duration::from_secs(GRACE) && took < Duration::from_secs(8),
        "{PODS} pods ignoring SIGTERM with a {GRACE} s grace took {took:?}"
    );
    assert!(
        most <= threads_before.len(),
        "loop threads grew from {} ({threads_before:?}) to {most}: {:?}",
        threads_before.len(),
        thread_names(node.pid())
    );
}

#[test]
fn active_deadline_fails_and_stops_the_pod() {
    let mut node = Node::new("lc-deadline");
    node.write_manifest(
        "dl.yaml",
        &manifest(&serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "dl"},
            "spec": {"activeDeadlineSeconds": 4, "terminationGracePeriodSeconds": 2,
                "containers": [{"name": "c", "image": BUSYBOX, "command": sh(SLEEPER)}]}
        })),
    );
    node.start(&[]);
    wait_phase(&node, "dl", "Running");
    let st = wait_phase(&node, "dl", "Failed");
    assert_eq!(st["reason"], "DeadlineExceeded", "{st}");
    assert_eq!(
        st["message"],
        "Pod was active on the node longer than the specified deadline"
    );
    wait_for("the pod's containers to stop", LONG, || {
        node.running().is_empty().then_some(())
    });
    // Stopped, not removed: the final state stays readable; it is never restarted.
    let st = wait_for("the final container state", LONG, || {
        container_status(&node, "dl", "c").filter(|c| c["state"]["terminated"].is_object())
    });
    assert_eq!(st["restartCount"], 0, "{st}");
    assert_eq!(pod_status(&node, "dl").expect("status")["phase"], "Failed");
    assert!(node.containers_named("c").len() == 1);
}

#[test]
fn termination_messages_come_from_the_file_or_the_log() {
    let mut node = Node::new("lc-msg");
    node.write_manifest(
        "msg.yaml",
        &manifest(&serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "msg"},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "containers": [
                {"name": "file", "image": BUSYBOX,
                 "command": sh("printf custom-message > /dev/termination-log; exit 0")},
                {"name": "path", "image": BUSYBOX, "terminationMessagePath": "/tmp/why",
                 "command": sh("printf custom-path > /tmp/why; exit 4")},
                {"name": "logs", "image": BUSYBOX, "terminationMessagePolicy": "FallbackToLogsOnError",
                 "command": sh("echo line1; echo last-words; exit 2")},
                {"name": "both", "image": BUSYBOX, "terminationMessagePolicy": "FallbackToLogsOnError",
                 "command": sh("printf from-file > /dev/termination-log; echo noise; exit 3")},
                {"name": "quiet", "image": BUSYBOX, "terminationMessagePolicy": "FallbackToLogsOnError",
                 "command": sh("echo fine; exit 0")}
            ]}
        })),
    );
    node.start(&[]);
    let st = wait_phase(&node, "msg", "Failed");
    let message = |c: &str| {
        st["containerStatuses"]
            .as_array()
            .and_then(|a| a.iter().find(|s| s["name"] == c))
            .map(|s| s["state"]["terminated"]["message"].clone())
            .unwrap_or(Value::Null)
    };
    assert_eq!(message("file"), "custom-message", "{st}");
    assert_eq!(message("path"), "custom-path", "{st}");
    assert_eq!(message("logs"), "line1\nlast-words\n", "{st}");
    assert_eq!(message("both"), "from-file", "{st}");
    assert_eq!(
        message("quiet"),
        Value::Null,
        "exit 0: no log fallback: {st}"
    );

    // The file behind /dev/termination-log: per instance under the root dir, mode 0666.
    use std::os::unix::fs::PermissionsExt;
    let c = node.containers_named("file").remove(0);
    let uid = label(&c, "io.kubernetes.pod.uid").to_string();
    let f = node
        .dir
        .join("root/pods")
        .join(uid)
        .join("containers/file/0");
    let meta = std::fs::metadata(&f).expect("termination-log file");
    assert_eq!(meta.permissions().mode() & 0o777, 0o666);
}
