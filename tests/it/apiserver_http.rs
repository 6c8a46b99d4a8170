//! Tests of the stand-in API server itself over HTTPS, with curl as the client: the
//! object store's semantics as a client sees them (codes, Status bodies, watch
//! streams), the scripted faults and the request counts.

// The benches that include the stand-in compile this file without its #[test] functions.
#![allow(unused_imports)]

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{Options, Pki, TestApiServer};

/// One curl request with the accepted token (or the test client certificate when
/// `cert`): the HTTP code and the body (JSON, or a string for anything else; a
/// watch's lines as a list).
fn curl_as(
    api: &TestApiServer,
    cert: bool,
    method: &str,
    path: &str,
    content_type: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let pki = Pki::get();
    let mut cmd = Command::new("curl");
    cmd.args([
        "-sS",
        "--max-time",
        "20",
        "-w",
        "\n%{http_code}",
        "-X",
        method,
    ])
    .arg("--cacert")
    .arg(&pki.ca);
    if cert {
        cmd.arg("--cert")
            .arg(&pki.client_cert)
            .arg("--key")
            .arg(&pki.client_key);
    } else {
        cmd.args(["-H", "Authorization: Bearer good-token"]);
    }
    if let Some(b) = body {
        cmd.args([
            "-H",
            &format!("Content-Type: {content_type}"),
            "--data-binary",
        ])
        .arg(b.to_string());
    }
    let out = cmd
        .arg(format!("{}{path}", api.url()))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", text.as_str()));
    let code: u16 = code.trim().parse().unwrap_or(0);
    if path.contains("watch=true") {
        let lines: Vec<Value> = body
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        return (code, json!(lines));
    }
    let value = serde_json::from_str(body).unwrap_or_else(|_| {
        let lines: Vec<Value> = body
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        if lines.is_empty() {
            json!(body)
        } else {
            json!(lines)
        }
    });
    (code, value)
}

fn curl(api: &TestApiServer, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    curl_as(api, false, method, path, "application/json", body)
}

fn patch(api: &TestApiServer, path: &str, ct: &str, body: &Value) -> (u16, Value) {
    curl_as(api, false, "PATCH", path, ct, Some(body))
}

const SMP: &str = "application/strategic-merge-patch+json";

#[test]
fn stand_in_nodes_leases_and_pod_status_with_the_api_servers_semantics() {
    let api = TestApiServer::start(Options::default());
    let t0 = Instant::now();

    // A Node: created, its status patched by strategic merge, conditions merged.
    let node = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
        "status": {"conditions": [
            {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
            {"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]}});
    let (code, created) = curl(&api, "POST", "/api/v1/nodes", Some(&node));
    assert_eq!(code, 201, "{created}");
    let uid = created["metadata"]["uid"]
        .as_str()
        .expect("uid")
        .to_string();
    let (code, again) = curl(&api, "POST", "/api/v1/nodes", Some(&node));
    assert_eq!(
        (code, again["reason"].as_str()),
        (409, Some("AlreadyExists"))
    );
    let status_patch = json!({"metadata": {"uid": uid},
        "status": {"$setElementOrder/conditions": [{"type": "MemoryPressure"}, {"type": "Ready"}],
                   "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                   "addresses": [{"type": "InternalIP", "address": "10.1.2.3"}]}});
    let (code, n) = patch(&api, "/api/v1/nodes/n1/status", SMP, &status_patch);
    assert_eq!(code, 200, "{n}");
    assert_eq!(n["status"]["conditions"][1]["reason"], "KubeletReady");
    assert_eq!(
        n["status"]["conditions"][0]["reason"],
        "KubeletHasSufficientMemory"
    );
    assert_eq!(n["status"]["addresses"][0]["address"], "10.1.2.3");
    let (code, e) = patch(
        &api,
        "/api/v1/nodes/n1/status",
        SMP,
        &json!({"metadata": {"uid": "not-it"}, "status": {"phase": "x"}}),
    );
    assert_eq!((code, e["reason"].as_str()), (409, Some("Conflict")), "{e}");
    assert!(e["message"].as_str().expect("message").contains(&format!(
        "Precondition failed: UID in precondition: not-it, UID in object meta: {uid}"
    )));
    assert_eq!(
        api.get("nodes", "", "n1").expect("node")["status"]["conditions"][1]["status"],
        "True"
    );
    let (code, _) = curl(&api, "GET", "/api/v1/nodes/nope", None);
    assert_eq!(code, 404);
    let (code, list) = curl(
        &api,
        "GET",
        "/api/v1/nodes?labelSelector=kubernetes.io%2Fhostname%3Dn1",
        None,
    );
    assert_eq!(
        (code, list["items"].as_array().map(Vec::len)),
        (200, Some(1))
    );

    // A Lease: optimistic concurrency on update.
    let lease_path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
    let lease = json!({"metadata": {"name": "n1"},
        "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40}});
    let (code, l) = curl(&api, "POST", lease_path, Some(&lease));
    assert_eq!(code, 201, "{l}");
    let mut renewed = l.clone();
    renewed["spec"]["renewTime"] = json!("2026-01-01T00:00:00.000000Z");
    let (code, l2) = curl(&api, "PUT", &format!("{lease_path}/n1"), Some(&renewed));
    assert_eq!(code, 200, "{l2}");
    let (code, e) = curl(&api, "PUT", &format!("{lease_path}/n1"), Some(&renewed));
    assert_eq!(code, 409);
    assert_eq!(
        e["message"],
        "Operation cannot be fulfilled on leases.coordination.k8s.io \"n1\": the object has been modified; please apply your changes to the latest version and try again"
    );
    let (code, _) = curl(&api, "PUT", &format!("{lease_path}/nope"), Some(&renewed));
    assert_eq!(code, 404);

    // A pod: its status written through /status with a uid precondition, and a
    // graceful delete that only marks it.
    let pod = json!({"metadata": {"name": "p1", "namespace": "default"},
        "spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 30,
                 "containers": [{"name": "c", "image": "busybox"}]}});
    let (code, p) = curl(&api, "POST", "/api/v1/namespaces/default/pods", Some(&pod));
    assert_eq!(
        (code, p["status"]["phase"].as_str()),
        (201, Some("Pending"))
    );
    let puid = p["metadata"]["uid"].as_str().expect("uid").to_string();
    let (code, p) = patch(
        &api,
        "/api/v1/namespaces/default/pods/p1/status",
        SMP,
        &json!({"metadata": {"uid": puid}, "status": {"phase": "Running",
            "podIPs": [{"ip": "172.17.0.9"}], "conditions": [{"type": "Ready", "status": "True"}]}}),
    );
    assert_eq!(
        (code, p["status"]["phase"].as_str()),
        (200, Some("Running")),
        "{p}"
    );
    let (code, p) = patch(
        &api,
        "/api/v1/namespaces/default/pods/p1",
        "application/merge-patch+json",
        &json!({"metadata": {"labels": {"app": "x"}}, "status": {"phase": "Failed"}}),
    );
    assert_eq!(
        (code, p["status"]["phase"].as_str()),
        (200, Some("Running"))
    );
    let (code, p) = patch(
        &api,
        "/api/v1/namespaces/default/pods/p1",
        "application/json-patch+json",
        &json!([{"op": "add", "path": "/metadata/labels/tier", "value": "web"}]),
    );
    assert_eq!(
        (code, p["metadata"]["labels"]["tier"].as_str()),
        (200, Some("web"))
    );
    let (code, _) = patch(
        &api,
        "/api/v1/namespaces/default/pods/p1",
        "text/plain",
        &json!({}),
    );
    assert_eq!(code, 415);
    let (code, p) = curl(
        &api,
        "DELETE",
        "/api/v1/namespaces/default/pods/p1",
        Some(&json!({})),
    );
    assert_eq!(code, 200);
    assert_eq!(p["metadata"]["deletionGracePeriodSeconds"], 30);
    assert!(api.get_pod("default", "p1").is_some(), "only marked");
    let (code, e) = curl(
        &api,
        "DELETE",
        "/api/v1/namespaces/default/pods/p1",
        Some(&json!({"gracePeriodSeconds": 0, "preconditions": {"uid": "other"}})),
    );
    assert_eq!(code, 409, "{e}");
    let (code, _) = curl(
        &api,
        "DELETE",
        "/api/v1/namespaces/default/pods/p1",
        Some(&json!({"gracePeriodSeconds": 0, "preconditions": {"uid": puid}})),
    );
    assert_eq!(code, 200);
    assert!(api.get_pod("default", "p1").is_none());

    // Who asked: a CSR created with the client certificate names its subject.
    let csr = json!({"metadata": {"name": "csr-1"},
        "spec": {"request": "", "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                 "usages": ["client auth"]}});
    let (code, c) = curl_as(
        &api,
        true,
        "POST",
        "/apis/certificates.k8s.io/v1/certificatesigningrequests",
        "application/json",
        Some(&csr),
    );
    assert_eq!(code, 201, "{c}");
    assert_eq!(c["spec"]["username"], "system:node:test");

    let counts = api.call_counts(t0);
    assert_eq!(
        counts.get(&("PATCH".into(), "nodes/status".into())),
        Some(&2)
    );
    assert_eq!(counts.get(&("PUT".into(), "leases".into())), Some(&3));
    assert_eq!(counts.get(&("LIST".into(), "nodes".into())), Some(&1));
}

#[test]
fn stand_in_watches_any_kind_and_fails_goes_down_and_renumbers_on_demand() {
    let api = TestApiServer::start(Options::default());
    let cm = |v: &str| json!({"metadata": {"name": "cm1"}, "data": {"k": v}});
    let (code, first) = curl(
        &api,
        "POST",
        "/api/v1/namespaces/d/configmaps",
        Some(&cm("1")),
    );
    assert_eq!(code, 201);
    let rv = first["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .to_string();
    api.create("configmaps", "d", json!({"metadata": {"name": "other"}}))
        .expect("other");
    let mut update = first.clone();
    update["data"]["k"] = json!("2");
    api.update("configmaps", "d", update, false)
        .expect("updated");
    api.delete("configmaps", "d", "cm1", &json!({}))
        .expect("deleted");
    let (code, events) = curl(
        &api,
        "GET",
        &format!(
            "/api/v1/namespaces/d/configmaps?watch=true&fieldSelector=metadata.name%3Dcm1&resourceVersion={rv}&timeoutSeconds=1"
        ),
        None,
    );
    assert_eq!(code, 200);
    let kinds: Vec<&str> = events
        .as_array()
        .expect("lines")
        .iter()
        .map(|e| e["type"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(kinds, ["MODIFIED", "DELETED"], "{events}");

    // Scripted failures: one kind, then all.
    api.fail_requests(503, Some("configmaps"), None);
    let (code, body) = curl(&api, "GET", "/api/v1/namespaces/d/configmaps/other", None);
    assert_eq!(
        (code, body["reason"].as_str()),
        (503, Some("ServiceUnavailable"))
    );
    assert_eq!(curl(&api, "GET", "/api/v1/nodes", None).0, 200);
    api.fail_requests(500, None, Some(Duration::from_secs(600)));
    assert_eq!(curl(&api, "GET", "/api/v1/nodes", None).0, 500);
    api.clear_fault();
    assert_eq!(curl(&api, "GET", "/api/v1/nodes", None).0, 200);

    // Down: connections refused, then served again with the same store.
    api.down_for(Duration::from_secs(3));
    let deadline = Instant::now() + Duration::from_secs(30);
    while curl(&api, "GET", "/api/v1/nodes", None).0 != 0 {
        assert!(Instant::now() < deadline, "never went down");
        std::thread::sleep(Duration::from_millis(100));
    }
    while curl(&api, "GET", "/api/v1/namespaces/d/configmaps/other", None).0 != 200 {
        assert!(Instant::now() < deadline, "never came back");
        std::thread::sleep(Duration::from_millis(200));
    }

    // Restored from a backup: the objects stay, their old versions are gone.
    let before = api.get("configmaps", "d", "other").expect("kept");
    api.restart_with_new_versions();
    let after = api.get("configmaps", "d", "other").expect("kept");
    assert_ne!(
        before["metadata"]["resourceVersion"],
        after["metadata"]["resourceVersion"]
    );
    let old = before["metadata"]["resourceVersion"].as_str().expect("rv");
    let (_, events) = curl(
        &api,
        "GET",
        &format!(
            "/api/v1/namespaces/d/configmaps?watch=true&resourceVersion={old}&timeoutSeconds=1"
        ),
        None,
    );
    assert_eq!(events[0]["type"], "ERROR", "{events}");
    assert_eq!(events[0]["object"]["code"], 410);
}
