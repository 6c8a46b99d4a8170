//! Restart policies on both runtimes: `Always` restarts a container that exited 0,
//! `OnFailure` only one that failed, `Never` neither; the pod phases that follow
//! (Succeeded, Failed, Running), the terminated states' reasons and exit codes, and
//! the restart counts, from `/pods` and from the runtime's own container list.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::registry::{container_status, pod_item};
use crate::util::{wait_for, Node, Rt, BUSYBOX, LONG, SLEEPER};

/// A static pod with `policy` and busybox containers (name, shell command); an emptyDir
/// at `/d` for counting runs.
fn pod(name: &str, policy: &str, containers: &[(&str, &str)]) -> String {
    let containers: Vec<Value> = containers
        .iter()
        .map(|(c, cmd)| {
            json!({"name": c, "image": BUSYBOX, "command": ["sh", "-c", cmd],
                   "volumeMounts": [{"name": "d", "mountPath": "/d"}]})
        })
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"restartPolicy": policy, "terminationGracePeriodSeconds": 1,
                 "volumes": [{"name": "d", "emptyDir": {}}],
                 "containers": containers}
    })
    .to_string()
}

/// The first run exits 1; later runs stay up.
const FAILS_ONCE: &str = "n=$(cat /d/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /d/n; \
                          if [ $n = 1 ]; then exit 1; fi; ";

fn phase(node: &Node, pod: &str) -> Option<String> {
    pod_item(node, pod)?["status"]["phase"]
        .as_str()
        .map(str::to_string)
}

fn restarts(node: &Node, pod: &str, container: &str) -> Option<i64> {
    container_status(node, pod, container)?["restartCount"].as_i64()
}

/// How many instances of `container` of `pod` the runtime holds (dead ones too).
fn instances(node: &Node, pod: &str, container: &str) -> usize {
    let full = format!("{pod}-{}", node.name);
    node.containers_named(container)
        .iter()
        .filter(|c| crate::util::label(c, "io.kubernetes.pod.name") == full)
        .count()
}

fn restart_policies_decide_which_exits_restart_and_the_phase(rt: Rt) {
    let mut node = Node::on(rt, "rp");
    node.write_manifest(
        "never-ok.yaml",
        &pod("never-ok", "Never", &[("c", "echo done; exit 0")]),
    );
    node.write_manifest(
        "never-bad.yaml",
        &pod("never-bad", "Never", &[("c", "echo failing; exit 3")]),
    );
    node.write_manifest(
        "onfail.yaml",
        &pod(
            "onfail",
            "OnFailure",
            &[
                ("ok", "echo done; exit 0"),
                ("bad", &format!("{FAILS_ONCE}{SLEEPER}")),
            ],
        ),
    );
    node.write_manifest(
        "always.yaml",
        &pod(
            "always",
            "Always",
            &[(
                "ok",
                &format!("if [ -e /d/ran ]; then {SLEEPER}; fi; touch /d/ran; exit 0"),
            )],
        ),
    );
    node.start(&[]);

    // Never: one run each; exit 0 is Succeeded, anything else Failed.
    wait_for("never-ok Succeeded", LONG, || {
        (phase(&node, "never-ok")? == "Succeeded").then_some(())
    });
    let st = container_status(&node, "never-ok", "c").expect("status");
    assert_eq!(st["state"]["terminated"]["reason"], "Completed", "{st}");
    assert_eq!(st["state"]["terminated"]["exitCode"], 0, "{st}");
    wait_for("never-bad Failed", LONG, || {
        (phase(&node, "never-bad")? == "Failed").then_some(())
    });
    let st = container_status(&node, "never-bad", "c").expect("status");
    assert_eq!(st["state"]["terminated"]["reason"], "Error", "{st}");
    assert_eq!(st["state"]["terminated"]["exitCode"], 3, "{st}");

    // OnFailure: the failed container runs again, the one that exited 0 does not.
    wait_for("onfail's bad container running again", LONG, || {
        let st = container_status(&node, "onfail", "bad")?;
        (st["state"]["running"].is_object() && st["restartCount"] == 1).then_some(())
    });
    let st = container_status(&node, "onfail", "bad").expect("status");
    assert_eq!(st["lastState"]["terminated"]["exitCode"], 1, "{st}");
    assert_eq!(phase(&node, "onfail").as_deref(), Some("Running"));

    // Always: a container that exited 0 runs again.
    wait_for("always's container running again", LONG, || {
        let st = container_status(&node, "always", "ok")?;
        (st["state"]["running"].is_object() && st["restartCount"] == 1).then_some(())
    });
    let st = container_status(&node, "always", "ok").expect("status");
    assert_eq!(st["lastState"]["terminated"]["reason"], "Completed", "{st}");
    assert_eq!(phase(&node, "always").as_deref(), Some("Running"));

    // A few sync periods later nothing else has run: the exits that must stay exited
    // did, in the status and in the runtime.
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(500));
    }
    for (pod, c) in [("never-ok", "c"), ("never-bad", "c"), ("onfail", "ok")] {
        assert_eq!(restarts(&node, pod, c), Some(0), "{pod}/{c}");
        assert_eq!(instances(&node, pod, c), 1, "{pod}/{c} ran once");
    }
    assert_eq!(restarts(&node, "onfail", "bad"), Some(1));
    assert_eq!(restarts(&node, "always", "ok"), Some(1));
    let st = container_status(&node, "onfail", "ok").expect("status");
    assert_eq!(st["state"]["terminated"]["reason"], "Completed", "{st}");
    assert_eq!(phase(&node, "never-ok").as_deref(), Some("Succeeded"));
    assert_eq!(phase(&node, "never-bad").as_deref(), Some("Failed"));
}

crate::on_both_runtimes!(restart_policies_decide_which_exits_restart_and_the_phase);
