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

/// A fresh scratch directory for one test.
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("stand-in-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// A new EC key and a PEM CSR for `subject` in `dir`: the CSR as a CSR object's
/// `spec.request` (base64).
fn csr_request(dir: &std::path::Path, subject: &str) -> String {
    use base64::Engine as _;
    let out = Command::new("openssl")
        .current_dir(dir)
        .args([
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "k.pem",
            "-out",
            "r.csr",
            "-subj",
            subject,
        ])
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pem = std::fs::read(dir.join("r.csr")).expect("csr");
    base64::engine::general_purpose::STANDARD.encode(pem)
}

fn bearer(
    api: &TestApiServer,
    token: &str,
    method: &str,
    path: &str,
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
    .arg(&pki.ca)
    .args(["-H", &format!("Authorization: Bearer {token}")]);
    if let Some(b) = body {
        cmd.args(["-H", "Content-Type: application/json", "--data-binary"])
            .arg(b.to_string());
    }
    let out = cmd
        .arg(format!("{}{path}", api.url()))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", text.as_str()));
    (
        code.trim().parse().unwrap_or(0),
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

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
    // NamespaceLifecycle: a client creates only in a namespace that exists.
    let (code, e) = curl(
        &api,
        "POST",
        "/api/v1/namespaces/nope/configmaps",
        Some(&json!({"metadata": {"name": "x"}})),
    );
    assert_eq!(
        (code, e["message"].as_str()),
        (404, Some("namespaces \"nope\" not found"))
    );

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

    // An event as client-go's EventSink writes it: created, then its count and
    // lastTimestamp patched; found by its involved object.
    let ev = json!({"metadata": {"name": "p1.abc", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "namespace": "default", "name": "p1", "uid": puid},
        "reason": "Started", "message": "Started container c", "type": "Normal", "count": 1,
        "source": {"component": "kubelet", "host": "n1"},
        "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z"});
    assert_eq!(
        curl(&api, "POST", "/api/v1/namespaces/default/events", Some(&ev)).0,
        201
    );
    let (code, e) = patch(
        &api,
        "/api/v1/namespaces/default/events/p1.abc",
        SMP,
        &json!({"count": 2, "lastTimestamp": "2026-01-01T00:01:00Z", "message": "Started container c"}),
    );
    assert_eq!((code, e["count"].as_i64()), (200, Some(2)), "{e}");
    assert_eq!(e["firstTimestamp"], "2026-01-01T00:00:00Z");
    let (code, list) = curl(
        &api,
        "GET",
        &format!("/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Dp1%2CinvolvedObject.namespace%3Ddefault%2CinvolvedObject.uid%3D{puid}"),
        None,
    );
    assert_eq!(
        (code, list["items"].as_array().map(Vec::len)),
        (200, Some(1)),
        "{list}"
    );

    // Who asked: a CSR created with the client certificate names its subject.
    let dir = scratch("identity");
    let csr = json!({"metadata": {"name": "csr-1"},
        "spec": {"request": csr_request(&dir, "/O=system:nodes/CN=system:node:n1"),
                 "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                 "usages": ["digital signature", "client auth"]}});
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
    let _ = std::fs::remove_dir_all(&dir);

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
    let (code, _) = curl(
        &api,
        "POST",
        "/api/v1/namespaces",
        Some(&json!({"metadata": {"name": "d"}})),
    );
    assert_eq!(code, 201);
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

#[test]
fn stand_in_bootstrap_tokens_submit_csrs_that_the_test_approves_and_the_ca_signs() {
    use base64::Engine as _;
    let api = TestApiServer::start(Options::default());
    let dir = scratch("csr");
    let pki = Pki::get();
    api.add_bootstrap_token("abcdef", "0123456789abcdef");
    let boot = "abcdef.0123456789abcdef";
    let csrs = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
    let csr = |name: &str, subject: &str| {
        json!({"metadata": {"name": name},
            "spec": {"request": csr_request(&dir, subject),
                     "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                     "usages": ["digital signature", "client auth"]}})
    };
    let (code, c) = bearer(
        &api,
        boot,
        "POST",
        csrs,
        Some(&csr("node-csr-1", "/O=system:nodes/CN=system:node:n1")),
    );
    assert_eq!(code, 201, "{c}");
    assert_eq!(c["spec"]["username"], "system:bootstrap:abcdef");
    assert_eq!(c["spec"]["groups"][0], "system:bootstrappers");
    let (code, e) = bearer(&api, boot, "GET", "/api/v1/nodes", None);
    assert_eq!(
        (code, e["reason"].as_str()),
        (403, Some("Forbidden")),
        "{e}"
    );
    assert_eq!(
        bearer(&api, "abcdef.wrongwrongwrong0", "GET", csrs, None).0,
        401
    );
    let bad = json!({"metadata": {"name": "bad"}, "spec": {"request": "bm90IGEgY3Ny",
        "signerName": "kubernetes.io/kube-apiserver-client-kubelet", "usages": ["client auth"]}});
    assert_eq!(bearer(&api, boot, "POST", csrs, Some(&bad)).0, 422);

    // Approved by the test, signed by the test CA for the configured lifetime.
    api.set_csr_lifetime(Duration::from_secs(120));
    assert!(api.approve_csr("node-csr-1"));
    let (code, c) = bearer(&api, boot, "GET", &format!("{csrs}/node-csr-1"), None);
    assert_eq!(code, 200);
    assert_eq!(c["status"]["conditions"][0]["type"], "Approved");
    let cert = base64::engine::general_purpose::STANDARD
        .decode(c["status"]["certificate"].as_str().expect("issued"))
        .expect("base64");
    std::fs::write(dir.join("issued.crt"), &cert).expect("write");
    let openssl = |args: &[&str]| {
        Command::new("openssl")
            .current_dir(&dir)
            .args(args)
            .output()
            .expect("openssl")
    };
    let verify = openssl(&[
        "verify",
        "-CAfile",
        &pki.ca.display().to_string(),
        "issued.crt",
    ]);
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
    let subject = openssl(&[
        "x509",
        "-in",
        "issued.crt",
        "-noout",
        "-subject",
        "-nameopt",
        "RFC2253",
    ]);
    assert_eq!(
        String::from_utf8_lossy(&subject.stdout).trim(),
        "subject=CN=system:node:n1,O=system:nodes"
    );
    assert!(
        openssl(&["x509", "-in", "issued.crt", "-noout", "-checkend", "60"])
            .status
            .success()
    );
    assert!(
        !openssl(&["x509", "-in", "issued.crt", "-noout", "-checkend", "180"])
            .status
            .success()
    );
    let eku = openssl(&[
        "x509",
        "-in",
        "issued.crt",
        "-noout",
        "-ext",
        "extendedKeyUsage",
    ]);
    assert!(String::from_utf8_lossy(&eku.stdout).contains("TLS Web Client Authentication"));

    // Not a kubelet's subject: Failed. Denied: never issued.
    bearer(&api, boot, "POST", csrs, Some(&csr("wrong", "/CN=someone")));
    api.approve_csr("wrong");
    let c = api
        .get("certificatesigningrequests", "", "wrong")
        .expect("csr");
    assert_eq!(c["status"]["conditions"][1]["type"], "Failed", "{c}");
    assert!(c["status"]["certificate"].is_null());
    bearer(
        &api,
        boot,
        "POST",
        csrs,
        Some(&csr("denied", "/O=system:nodes/CN=system:node:n1")),
    );
    assert!(api.deny_csr("denied"));
    assert!(!api.approve_csr("nope"));
    let c = api
        .get("certificatesigningrequests", "", "denied")
        .expect("csr");
    assert_eq!(c["status"]["conditions"][0]["type"], "Denied");
    api.approve_csr("denied");
    assert!(api
        .get("certificatesigningrequests", "", "denied")
        .expect("csr")["status"]["certificate"]
        .is_null());

    // Auto-approval, watched by name as a kubelet waits for its certificate.
    api.set_csr_auto_approve(true);
    let (code, c) = bearer(
        &api,
        boot,
        "POST",
        csrs,
        Some(&csr("auto", "/O=system:nodes/CN=system:node:n2")),
    );
    assert_eq!(code, 201);
    let rv = c["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .to_string();
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20", "--cacert"])
        .arg(&pki.ca)
        .args(["-H", &format!("Authorization: Bearer {boot}")])
        .arg(format!(
            "{}{csrs}?watch=true&fieldSelector=metadata.name%3Dauto&resourceVersion={rv}&timeoutSeconds=2",
            api.url()
        ))
        .output()
        .expect("curl");
    let issued = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .any(|e| e["type"] == "MODIFIED" && e["object"]["status"]["certificate"].is_string());
    assert!(issued, "{}", String::from_utf8_lossy(&out.stdout));

    // A client approves through the approval subresource (as `kubectl certificate
    // approve` does, though kubectl's typed client sends protobuf, which the stand-in
    // does not speak); the signer follows.
    api.set_csr_auto_approve(false);
    bearer(
        &api,
        boot,
        "POST",
        csrs,
        Some(&csr("by-client", "/O=system:nodes/CN=system:node:n3")),
    );
    let mut c = api
        .get("certificatesigningrequests", "", "by-client")
        .expect("csr");
    c["status"]["conditions"] = json!([{"type": "Approved", "status": "True",
        "reason": "KubectlApprove", "message": "approved by a client"}]);
    let (code, _) = curl(&api, "PUT", &format!("{csrs}/by-client/approval"), Some(&c));
    assert_eq!(code, 200);
    // The signer acts after the answer, as upstream's controller does.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let c = api
            .get("certificatesigningrequests", "", "by-client")
            .expect("csr");
        assert_eq!(
            c["status"]["conditions"][0]["reason"], "KubectlApprove",
            "{c}"
        );
        if c["status"]["certificate"].is_string() {
            break;
        }
        assert!(Instant::now() < deadline, "never issued: {c}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn stand_in_token_requests_are_validated_bound_and_recorded() {
    let api = TestApiServer::start(Options::default());
    api.create("nodes", "", json!({"metadata": {"name": "n1"}}))
        .expect("node");
    let pod = api
        .create("pods", "ns1", json!({"metadata": {"name": "p"},
            "spec": {"nodeName": "n1", "serviceAccountName": "app", "containers": [{"name": "c", "image": "i:1"}]}}))
        .expect("pod");
    let uid = pod["metadata"]["uid"].as_str().expect("uid").to_string();
    let path = "/api/v1/namespaces/ns1/serviceaccounts/app/token";
    let req = |exp: i64, pod_uid: &str| {
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"audiences": ["api", "vault"], "expirationSeconds": exp,
                     "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p", "uid": pod_uid}}})
    };
    let (code, t) = curl(&api, "POST", path, Some(&req(3600, &uid)));
    assert_eq!(code, 201, "{t}");
    let token = t["status"]["token"].as_str().expect("token");
    assert!(t["status"]["expirationTimestamp"].is_string());
    let claims = super::credentials::token_claims(token).expect("JWT-shaped");
    assert_eq!(claims["sub"], "system:serviceaccount:ns1:app");
    assert_eq!(claims["aud"], json!(["api", "vault"]));
    assert_eq!(
        claims["exp"].as_i64().expect("exp") - claims["iat"].as_i64().expect("iat"),
        3600
    );
    assert_eq!(
        claims["kubernetes.io"]["pod"],
        json!({"name": "p", "uid": uid})
    );
    assert_eq!(claims["kubernetes.io"]["node"]["name"], "n1");

    let (code, e) = curl(&api, "POST", path, Some(&req(599, &uid)));
    assert_eq!(code, 422);
    assert!(
        e["message"]
            .as_str()
            .expect("message")
            .ends_with("may not specify a duration less than 10 minutes"),
        "{e}"
    );
    assert_eq!(curl(&api, "POST", path, Some(&req(3600, "old-uid"))).0, 409);
    let other = "/api/v1/namespaces/ns1/serviceaccounts/default/token";
    assert_eq!(curl(&api, "POST", other, Some(&req(3600, &uid))).0, 400);
    let missing_pod =
        json!({"spec": {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "gone"}}});
    assert_eq!(curl(&api, "POST", path, Some(&missing_pod)).0, 404);
    let (code, t) = curl(&api, "POST", other, Some(&json!({"spec": {}})));
    assert_eq!(code, 201, "{t}");
    assert_eq!(t["spec"]["expirationSeconds"], 3600);
    assert_eq!(t["spec"]["audiences"][0], super::credentials::API_AUDIENCE);

    api.require_service_accounts(true);
    assert_eq!(curl(&api, "POST", path, Some(&req(3600, &uid))).0, 404);
    api.create(
        "serviceaccounts",
        "ns1",
        json!({"metadata": {"name": "app"}}),
    )
    .expect("sa");
    assert_eq!(curl(&api, "POST", path, Some(&req(3600, &uid))).0, 201);
    // ServiceAccount admission: a client's pod gets the projected token volume, and
    // the namespace the objects it refers to.
    api.set_service_account_admission(true);
    let (code, p) = curl(
        &api,
        "POST",
        "/api/v1/namespaces/default/pods",
        Some(
            &json!({"metadata": {"name": "q"}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}}),
        ),
    );
    assert_eq!(code, 201, "{p}");
    assert_eq!(p["spec"]["serviceAccountName"], "default");
    let vol = &p["spec"]["volumes"][0];
    assert!(vol["name"]
        .as_str()
        .expect("name")
        .starts_with("kube-api-access-"));
    assert_eq!(
        vol["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"],
        3607
    );
    assert_eq!(
        p["spec"]["containers"][0]["volumeMounts"][0]["mountPath"],
        super::admission::SA_MOUNT
    );
    assert_eq!(
        p["spec"]["containers"][0]["imagePullPolicy"],
        "IfNotPresent"
    );
    let ca = api
        .get("configmaps", "default", "kube-root-ca.crt")
        .expect("published");
    assert!(ca["data"]["ca.crt"]
        .as_str()
        .expect("pem")
        .contains("BEGIN CERTIFICATE"));
    assert!(api.get("serviceaccounts", "default", "default").is_some());
    let (code, e) = curl(
        &api,
        "POST",
        "/api/v1/namespaces/default/pods",
        Some(&json!({"metadata": {"name": "r"}, "spec": {"containers": []}})),
    );
    assert_eq!((code, e["reason"].as_str()), (422, Some("Invalid")));

    let recorded = api.token_requests();
    assert_eq!(recorded.len(), 3);
    assert_eq!(
        (recorded[0].0.as_str(), recorded[0].1.as_str()),
        ("ns1", "app")
    );
}
