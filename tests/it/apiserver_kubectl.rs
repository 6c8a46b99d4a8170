//! The real kubectl against the stand-in API server, with objects created from the
//! test side (no rkubelet): `get nodes -o wide`, `get pods -o wide`, `describe pod`,
//! `get events`, `delete pod` (waiting for the kubelet's final delete) and a few other
//! kinds, checked in kubectl's own output.

// The benches that include the stand-in compile this file without its #[test] functions.
#![allow(unused_imports)]

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{Options, TestApiServer};

fn kubectl(kubeconfig: &PathBuf, args: &[&str]) -> Output {
    Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--request-timeout=20s")
        .args(args)
        .output()
        .expect("kubectl is installed")
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "kubectl failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The whitespace-separated fields of the line starting with `first`.
fn row(text: &str, first: &str) -> Vec<String> {
    text.lines()
        .find(|l| l.split_whitespace().next() == Some(first))
        .unwrap_or_else(|| panic!("no row {first} in:\n{text}"))
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

#[test]
fn kubectl_gets_describes_and_deletes_against_the_stand_in() {
    let api = TestApiServer::start(Options::default());
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("stand-in-kubectl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let kc = api.kubeconfig(&dir, "kubeconfig", "token: good-token");

    api.create(
        "nodes",
        "",
        json!({"metadata": {"name": "node-a", "labels": {"node-role.kubernetes.io/worker": ""}},
            "status": {
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                "message": "kubelet is posting ready status"}],
                "addresses": [{"type": "InternalIP", "address": "10.9.8.7"},
                              {"type": "Hostname", "address": "node-a"}],
                "nodeInfo": {"kubeletVersion": "v1.32.0-rkubelet", "osImage": "Debian GNU/Linux 12 (bookworm)",
                             "kernelVersion": "6.1.0-test", "containerRuntimeVersion": "docker://20.10.24",
                             "operatingSystem": "linux", "architecture": "amd64"}}}),
    )
    .expect("node");
    api.create("nodes", "", json!({"metadata": {"name": "node-b"}}))
        .expect("node");
    let out = ok(&kubectl(&kc, &["get", "nodes", "-o", "wide"]));
    assert!(out.starts_with("NAME"), "{out}");
    let a = row(&out, "node-a");
    assert_eq!(&a[1..3], ["Ready", "worker"], "{out}");
    assert_eq!(a[4], "v1.32.0-rkubelet");
    assert_eq!(&a[5..7], ["10.9.8.7", "<none>"]);
    assert!(
        out.contains("Debian GNU/Linux 12 (bookworm)")
            && out.contains("6.1.0-test")
            && out.contains("docker://20.10.24"),
        "{out}"
    );
    assert_eq!(row(&out, "node-b")[1], "Unknown");

    // A pod: created through the API (status reset to Pending), then given a status.
    let pod = api
        .create(
            "pods",
            "default",
            json!({"metadata": {"name": "web"},
                "spec": {"nodeName": "node-a", "terminationGracePeriodSeconds": 30,
                         "containers": [{"name": "c", "image": "busybox"}]}}),
        )
        .expect("pod");
    let uid = pod["metadata"]["uid"].as_str().expect("uid").to_string();
    api.patch(
        "pods",
        "default",
        "web",
        true,
        super::PatchType::StrategicMerge,
        &json!({"metadata": {"uid": uid}, "status": {"phase": "Running",
            "podIP": "172.17.0.4", "podIPs": [{"ip": "172.17.0.4"}],
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "c", "ready": true, "restartCount": 1,
                "image": "busybox", "imageID": "", "started": true,
                "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                    "finishedAt": "2026-01-01T00:00:00Z"}}}]}}),
    )
    .expect("status");
    let out = ok(&kubectl(&kc, &["get", "pods", "-o", "wide"]));
    let w = row(&out, "web");
    assert_eq!(&w[1..3], ["1/1", "Running"], "{out}");
    assert_eq!(w[3], "1");
    assert!(
        w.contains(&"172.17.0.4".to_string()) && w.contains(&"node-a".to_string()),
        "{out}"
    );

    // Events about it, as a kubelet writes them, in describe and get events.
    for (reason, message, count) in [
        (
            "Pulled",
            "Container image \"busybox\" already present on machine",
            1,
        ),
        ("Started", "Started container c", 2),
    ] {
        api.create(
            "events",
            "default",
            json!({"metadata": {"name": format!("web.{}", reason.to_lowercase())},
                "involvedObject": {"kind": "Pod", "namespace": "default", "name": "web",
                                   "uid": uid, "apiVersion": "v1", "fieldPath": "spec.containers{c}"},
                "reason": reason, "message": message, "type": "Normal", "count": count,
                "source": {"component": "kubelet", "host": "node-a"},
                "firstTimestamp": super::store::now(), "lastTimestamp": super::store::now()}),
        )
        .expect("event");
    }
    api.create(
        "events",
        "default",
        json!({"metadata": {"name": "other.x"},
            "involvedObject": {"kind": "Pod", "namespace": "default", "name": "other", "uid": "u2"},
            "reason": "Killing", "message": "not about web", "type": "Normal",
            "source": {"component": "kubelet"}}),
    )
    .expect("event");
    let out = ok(&kubectl(&kc, &["describe", "pod", "web"]));
    assert!(out.contains("Name:") && out.contains("web"), "{out}");
    assert!(out.contains("Node:         node-a/"), "{out}");
    assert!(out.contains("Status:") && out.contains("Running"), "{out}");
    assert!(
        out.contains("Pulled") && out.contains("Started container c"),
        "{out}"
    );
    assert!(!out.contains("not about web"), "{out}");
    let out = ok(&kubectl(&kc, &["get", "events"]));
    assert!(out.starts_with("LAST SEEN"), "{out}");
    let started = out
        .lines()
        .find(|l| l.contains("Started"))
        .expect("Started row");
    assert!(
        started.contains("pod/web") && started.contains("Started container c"),
        "{out}"
    );

    // describe node: the node, its lease, its pods (a field selector with !=) and events.
    api.create(
        "leases",
        "kube-node-lease",
        json!({"metadata": {"name": "node-a"}, "spec": {"holderIdentity": "node-a",
            "renewTime": "2026-01-01T00:00:00.000000Z", "leaseDurationSeconds": 40}}),
    )
    .expect("lease");
    let out = ok(&kubectl(&kc, &["describe", "node", "node-a"]));
    assert!(out.contains("HolderIdentity:  node-a"), "{out}");
    assert!(out.contains("InternalIP:  10.9.8.7"), "{out}");
    assert!(
        out.contains("KubeletReady") && out.contains("kubelet is posting ready status"),
        "{out}"
    );
    assert!(
        out.contains("Non-terminated Pods:") && out.contains("web"),
        "{out}"
    );
    let out = ok(&kubectl(&kc, &["get", "pods", "-A"]));
    assert_eq!(
        &row(&out, "default")[1..4],
        ["web", "1/1", "Running"],
        "{out}"
    );

    // Other kinds print through their own columns.
    api.create(
        "configmaps",
        "default",
        json!({"metadata": {"name": "cfg"}, "data": {"a": "1", "b": "2"}}),
    )
    .expect("cm");
    let out = ok(&kubectl(&kc, &["get", "configmaps"]));
    assert_eq!(&row(&out, "cfg")[1..2], ["2"], "{out}");
    let out = ok(&kubectl(&kc, &["get", "leases", "-n", "kube-node-lease"]));
    assert_eq!(row(&out, "node-a")[1], "node-a", "{out}");

    // Delete: the API server only marks the bound pod; kubectl waits for it to go,
    // which is the kubelet's final delete (grace 0, uid precondition).
    let kc2 = kc.clone();
    let deleting =
        std::thread::spawn(move || kubectl(&kc2, &["delete", "pod", "web", "--timeout=60s"]));
    let deadline = Instant::now() + Duration::from_secs(30);
    while api.get_pod("default", "web").expect("still there")["metadata"]["deletionTimestamp"]
        .is_null()
    {
        assert!(Instant::now() < deadline, "never marked for deletion");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = ok(&kubectl(&kc, &["get", "pods"]));
    assert_eq!(row(&out, "web")[2], "Terminating", "{out}");
    api.delete(
        "pods",
        "default",
        "web",
        &json!({"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}),
    )
    .expect("final delete");
    let out = ok(&deleting.join().expect("kubectl delete"));
    assert!(out.contains("pod \"web\" deleted"), "{out}");
    assert!(api.get_pod("default", "web").is_none());
    let _ = std::fs::remove_dir_all(&dir);
}
