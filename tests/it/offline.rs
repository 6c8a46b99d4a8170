//! A node that restarts while its API server is out of reach (`checkpointApiPods`):
//! its API pods run again from their checkpoints, and when the API server is back a
//! pod deleted meanwhile is stopped while the others keep their containers.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::apiserver::{Options, TestApiServer};
use crate::util::{restart_counts, running_c, wait_for, Node, BUSYBOX, LONG};

/// The pods' names, as the API server holds them.
const PODS: [&str; 3] = ["off-a", "off-b", "off-c"];

/// Waits until exactly `names` run their container `c`; returns their IDs.
fn wait_running(node: &Node, names: &[&str], timeout: Duration) -> BTreeMap<String, String> {
    wait_for(&format!("exactly {names:?} running"), timeout, || {
        let running = running_c(node);
        let got: Vec<&str> = running.keys().map(String::as_str).collect();
        (got == names).then_some(running)
    })
}

/// The checkpoint files under the node's root dir.
fn checkpoint_files(node: &Node) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(node.dir.join("root/pod-checkpoints"))
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".json"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn api_pods_run_again_after_a_reboot_without_the_api_server_and_reconcile_after() {
    let mut api = TestApiServer::start(Options::default());
    let mut node = Node::new("offline");
    let kc = api.kubeconfig(&node.dir, "kubeconfig", "token: good-token");
    let kubeconfig = format!("--kubeconfig={}", kc.display());
    let args = [kubeconfig.as_str(), "--checkpoint-api-pods=true"];
    node.start(&args);
    for name in PODS {
        api.create(
            "pods",
            "default",
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
                "nodeName": node.name,
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "c", "image": BUSYBOX, "command": ["sleep", "3600"]}],
            }}),
        )
        .expect("create pod");
    }
    wait_running(&node, &PODS, LONG);
    // One checkpoint per pod, by UID; status updates since have not rewritten them.
    let uids: Vec<String> = PODS
        .iter()
        .map(|n| {
            let pod = api.get("pods", "default", n).expect("pod");
            format!("{}.json", pod["metadata"]["uid"].as_str().expect("uid"))
        })
        .collect();
    let mut want = uids.clone();
    want.sort();
    wait_for("a checkpoint per pod", LONG, || {
        (checkpoint_files(&node) == want).then_some(())
    });

    // A reboot with the API server out of reach: rkubelet stops, the containers are
    // stopped, the API server refuses connections.
    node.signal(libc::SIGTERM);
    node.wait_exit(LONG);
    let ids: Vec<String> = node.containers().into_iter().map(|c| c.id).collect();
    let out = std::process::Command::new("docker")
        .args(["stop", "-t", "1"])
        .args(&ids)
        .output()
        .expect("docker stop");
    assert!(out.status.success(), "{out:?}");
    assert!(running_c(&node).is_empty());
    api.stop();

    let began = Instant::now();
    node.start(&args);
    let offline = wait_running(&node, &PODS, LONG);
    let took = began.elapsed();
    eprintln!("offline: the pods ran again {took:?} after the start");
    assert!(
        node.log()
            .contains("running 3 pods from their checkpoints until it answers"),
        "{}",
        node.log()
    );
    let (_, verbose) = node.healthz_get("/healthz?verbose");
    assert!(
        verbose.contains("running 3 pods from their checkpoints"),
        "{verbose}"
    );

    // While the node was offline, off-b was deleted; the API server comes back.
    api.delete_pod("default", "off-b");
    let before = restart_counts(&node);
    api.restart();
    let kept = wait_running(&node, &["off-a", "off-c"], LONG);
    for name in ["off-a", "off-c"] {
        assert_eq!(kept[name], offline[name], "{name} keeps its container");
    }
    // Nothing kept was created again or restarted: every container still there has
    // the restart count it had offline.
    let after = restart_counts(&node);
    for (id, n) in &after {
        assert_eq!(
            before.get(id),
            Some(n),
            "container {id}: {before:?} → {after:?}"
        );
    }
    wait_for("off-b's checkpoint to go", LONG, || {
        let files = checkpoint_files(&node);
        (files.len() == 2 && !files.contains(&uids[1])).then_some(())
    });
    wait_for("the API source to be ready again", LONG, || {
        let (_, verbose) = node.healthz_get("/healthz?verbose");
        (!verbose.contains("checkpoints")).then_some(())
    });
    assert!(
        node.log().contains("the API server answers"),
        "{}",
        node.log()
    );
}
