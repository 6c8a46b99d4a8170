//! The server pod source (`--enable-server-source`): pods pushed to the kubelet port
//! with curl (real TLS, the test PKI's CA verified, client certificates), run by the
//! real Docker engine. A set is pushed, replaced, added to and deleted from; a broken
//! document changes nothing; the set survives a restart and its containers are adopted;
//! the endpoints need a certificate and `nodes/proxy` (the API server stand-in's
//! SubjectAccessReviews); bodies are bounded; the source off answers 404.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::apiserver::{Options, Pki, TestApiServer};
use crate::kubelet_port::{client_cert, pki_flags, run, start};
use crate::util::{label, pod_yaml, restart_counts, running_c, wait_for, Node, LONG, SLEEPER};

/// A client's certificate and key.
type Cert<'a> = Option<(&'a Path, &'a Path)>;

/// curl on the kubelet port, verifying it against the test CA: (status, body); status
/// 0 when no HTTP answer came. `body`: a file sent as is (`--data-binary @file`).
fn curl(port: u16, method: &str, path: &str, body: Option<&Path>, cert: Cert<'_>) -> (u16, String) {
    let pki = Pki::get();
    let mut c = Command::new("curl");
    c.args([
        "-s",
        "--max-time",
        "60",
        "-w",
        "\n%{http_code}",
        "-X",
        method,
    ])
    .arg("--cacert")
    .arg(&pki.ca);
    if let Some((crt, key)) = cert {
        c.arg("--cert").arg(crt).arg("--key").arg(key);
    }
    if let Some(file) = body {
        c.args(["-H", "Content-Type: application/yaml", "--data-binary"])
            .arg(format!("@{}", file.display()));
    }
    c.arg(format!("https://127.0.0.1:{port}{path}"));
    let out = run(&mut c);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// A node with the server source on, the test PKI on its kubelet port and client
/// certificates of its CA allowed everything (AlwaysAllow, no anonymous requests).
fn start_pushable(node: &mut Node) -> u16 {
    let mut flags = pki_flags(&Pki::get());
    flags.extend([
        "--enable-server-source".to_string(),
        "--anonymous-auth=false".to_string(),
        "--authorization-mode=AlwaysAllow".to_string(),
    ]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    start(node, &flags)
}

/// The test PKI's client certificate.
fn admin() -> (PathBuf, PathBuf) {
    let pki = Pki::get();
    (pki.client_cert.clone(), pki.client_key.clone())
}

/// Writes `text` to a file of the node's directory, for curl to send.
fn body_file(node: &Node, name: &str, text: &str) -> PathBuf {
    let p = node.dir.join(name);
    std::fs::write(&p, text).expect("body file");
    p
}

/// Several pods as one multi-document YAML body.
fn pods(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| pod_yaml(n, 1, &[("c", SLEEPER)]))
        .collect::<Vec<_>>()
        .join("---\n")
}

/// Waits until exactly the pods `names` (as pushed) run their container `c`; returns
/// their container IDs by running name.
fn wait_running(node: &Node, names: &[&str]) -> BTreeMap<String, String> {
    let want: Vec<String> = names.iter().map(|n| format!("{n}-{}", node.name)).collect();
    wait_for(&format!("exactly {want:?} running"), LONG, || {
        let running = running_c(node);
        let got: Vec<&String> = running.keys().collect();
        let mut sorted: Vec<&String> = want.iter().collect();
        sorted.sort();
        (got == sorted).then_some(running)
    })
}

/// The names of the pods in a `PodList` JSON body.
fn list_names(body: &str) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_str(body).expect("a PodList");
    assert_eq!(v["kind"], "PodList", "{body}");
    v["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|p| {
            p["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

#[test]
fn a_pushed_set_runs_and_is_replaced_added_to_and_deleted_from() {
    let mut node = Node::new("push");
    // A file pod beside the pushed ones: a pushed pod of its name is held back.
    node.write_manifest("f.yaml", &pod_yaml("f", 1, &[("c", SLEEPER)]));
    let port = start_pushable(&mut node);
    let (crt, key) = admin();
    let cert = Some((crt.as_path(), key.as_path()));
    let n = node.name.clone();
    wait_running(&node, &["f"]);

    // PUT a set.
    let set = body_file(&node, "ab.yaml", &pods(&["a", "b"]));
    let (code, body) = curl(port, "PUT", "/pods", Some(&set), cert);
    assert_eq!(code, 200, "{body}");
    assert_eq!(list_names(&body), [format!("a-{n}"), format!("b-{n}")]);
    let first = wait_running(&node, &["a", "b", "f"]);

    // Replace it: a stops, c runs, b and f are untouched.
    let set = body_file(&node, "bc.yaml", &pods(&["b", "c"]));
    let (code, body) = curl(port, "PUT", "/pods", Some(&set), cert);
    assert_eq!(code, 200, "{body}");
    let second = wait_running(&node, &["b", "c", "f"]);
    for kept in [format!("b-{n}"), format!("f-{n}")] {
        assert_eq!(first[&kept], second[&kept], "{kept} kept its container");
    }
    wait_for("a's containers to be removed", LONG, || {
        let left = node
            .containers()
            .iter()
            .any(|c| label(c, "io.kubernetes.pod.name") == format!("a-{n}"));
        (!left).then_some(())
    });

    // POST adds one (201), and again replaces it (200: nothing changes).
    let d = body_file(&node, "d.yaml", &pod_yaml("d", 1, &[("c", SLEEPER)]));
    let (code, body) = curl(port, "POST", "/pods", Some(&d), cert);
    assert_eq!(code, 201, "{body}");
    let pod: serde_json::Value = serde_json::from_str(&body).expect("the pod");
    assert_eq!(pod["metadata"]["name"], format!("d-{n}"));
    assert_eq!(
        pod["metadata"]["annotations"]["kubernetes.io/config.source"],
        "server"
    );
    let third = wait_running(&node, &["b", "c", "d", "f"]);
    let (code, body) = curl(port, "POST", "/pods", Some(&d), cert);
    assert_eq!(code, 200, "{body}");

    // The pushed set, and every pod.
    let (code, body) = curl(port, "GET", "/pods?source=server", None, cert);
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        list_names(&body),
        [format!("b-{n}"), format!("c-{n}"), format!("d-{n}")]
    );
    let (code, body) = curl(port, "GET", "/pods", None, cert);
    assert_eq!(code, 200, "{body}");
    assert_eq!(list_names(&body).len(), 4, "{body}");

    // A pushed pod named as the file's: accepted, held back by the merge; the file's
    // pod keeps running.
    let f = body_file(
        &node,
        "f-pushed.yaml",
        &pod_yaml("f", 1, &[("c", "sleep 9")]),
    );
    let (code, body) = curl(port, "POST", "/pods", Some(&f), cert);
    assert_eq!(code, 201, "{body}");
    wait_for("the conflict to be reported", LONG, || {
        let (_, health) = node.healthz_get("/healthz?verbose");
        health
            .contains(&format!(
                "pod f-{n}_default from source server conflicts with the pod of the same name \
                 from source file"
            ))
            .then_some(())
    });
    let (code, body) = curl(port, "DELETE", &format!("/pods/default/f-{n}"), None, cert);
    assert_eq!(code, 200, "{body}");

    // DELETE removes one, by the name it was pushed with; twice is 404.
    let (code, body) = curl(port, "DELETE", "/pods/default/d", None, cert);
    assert_eq!(code, 200, "{body}");
    let last = wait_running(&node, &["b", "c", "f"]);
    for kept in ["b", "c", "f"] {
        let k = format!("{kept}-{n}");
        assert_eq!(third[&k], last[&k], "{k} kept its container");
    }
    let (code, body) = curl(port, "DELETE", "/pods/default/d", None, cert);
    assert_eq!(code, 404, "{body}");
    assert!(body.contains("no pushed pod default/d"), "{body}");
    let (code, body) = curl(port, "GET", "/configz", None, cert);
    assert_eq!(code, 200, "{body}");
    let configz: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(configz["kubeletconfig"]["enableServerSource"], true);
}

#[test]
fn a_broken_push_is_refused_whole_and_nothing_running_is_touched() {
    let mut node = Node::new("pushbad");
    let port = start_pushable(&mut node);
    let (crt, key) = admin();
    let cert = Some((crt.as_path(), key.as_path()));
    let set = body_file(&node, "ab.yaml", &pods(&["a", "b"]));
    let (code, body) = curl(port, "PUT", "/pods", Some(&set), cert);
    assert_eq!(code, 200, "{body}");
    let before = wait_running(&node, &["a", "b"]);
    let stored = node.dir.join("root/pods-pushed/pods.json");
    let stored_before = std::fs::read(&stored).expect("the pushed set is kept");

    // The second document's container has no image: 400 with upstream's field path,
    // and the whole request is refused (a's new image is not taken either).
    let broken = format!(
        "{}---\napiVersion: v1\nkind: Pod\nmetadata: {{name: b}}\nspec:\n  containers:\n  - name: c\n",
        pod_yaml("a", 1, &[("c", "sleep 1000")])
    );
    let file = body_file(&node, "broken.yaml", &broken);
    let (code, body) = curl(port, "PUT", "/pods", Some(&file), cert);
    assert_eq!(code, 400, "{body}");
    let status: serde_json::Value = serde_json::from_str(&body).expect("a Status");
    assert_eq!(status["kind"], "Status");
    assert_eq!(
        status["message"],
        "request body: document 1: invalid pod: spec.containers[0].image: Required value"
    );
    // A document that is not a pod, and a POST of a broken pod.
    let file = body_file(&node, "svc.yaml", "apiVersion: v1\nkind: Service\n");
    let (code, body) = curl(port, "PUT", "/pods", Some(&file), cert);
    assert_eq!(code, 400, "{body}");
    let bad_volume = format!(
        "{}  volumes: [{{name: '../x', emptyDir: {{}}}}]\n",
        pod_yaml("e", 1, &[("c", SLEEPER)])
    );
    let file = body_file(&node, "e.yaml", &bad_volume);
    let (code, body) = curl(port, "POST", "/pods", Some(&file), cert);
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains("spec.volumes[0].name: Invalid value: \\\"../x\\\""),
        "{body}"
    );

    // 4 MiB: 413 before the body is read.
    let big = format!(
        "{}# {}\n",
        pod_yaml("big", 1, &[("c", SLEEPER)]),
        "x".repeat(4 << 20)
    );
    let file = body_file(&node, "big.yaml", &big);
    let (code, body) = curl(port, "PUT", "/pods", Some(&file), cert);
    assert_eq!(code, 413, "{body}");

    // Nothing changed: the same containers run, the stored set is the same.
    assert_eq!(running_c(&node), before);
    assert_eq!(std::fs::read(&stored).expect("stored"), stored_before);
    let (code, body) = curl(port, "GET", "/pods?source=server", None, cert);
    assert_eq!(code, 200, "{body}");
    assert_eq!(list_names(&body).len(), 2);
    assert_eq!(running_c(&node), before, "still the same containers");
}

#[test]
fn pushed_pods_survive_a_restart_and_are_adopted_not_recreated() {
    let mut node = Node::new("pushrst");
    let port = start_pushable(&mut node);
    let (crt, key) = admin();
    let cert = Some((crt.as_path(), key.as_path()));
    let set = body_file(&node, "ab.yaml", &pods(&["a", "b"]));
    let (code, body) = curl(port, "PUT", "/pods", Some(&set), cert);
    assert_eq!(code, 200, "{body}");
    let before = wait_running(&node, &["a", "b"]);
    let containers_before = restart_counts(&node);

    // Killed, as a crash or a reboot of the kubelet would; started again.
    node.kill9();
    let port = start_pushable(&mut node);
    let n = node.name.clone();
    wait_for("both pods reported running again", LONG, || {
        let pods = node.pods();
        let running = pods["items"]
            .as_array()?
            .iter()
            .filter(|p| {
                p["status"]["containerStatuses"][0]["state"]["running"].is_object()
                    && p["metadata"]["annotations"]["kubernetes.io/config.source"] == "server"
            })
            .count();
        (running == 2).then_some(())
    });
    assert_eq!(running_c(&node), before, "the same containers run");
    assert_eq!(
        restart_counts(&node),
        containers_before,
        "no container created or restarted"
    );
    let (code, body) = curl(port, "GET", "/pods?source=server", None, cert);
    assert_eq!(code, 200, "{body}");
    assert_eq!(list_names(&body), [format!("a-{n}"), format!("b-{n}")]);
    assert!(
        node.log()
            .contains("adding pod source server: 2 pushed pods from"),
        "{}",
        node.log()
    );
}

#[test]
fn pushing_needs_a_certificate_and_nodes_proxy() {
    let pki = Pki::get();
    let api = TestApiServer::start(Options::default());
    // The test PKI's certificate (system:node:test) may read pods, not proxy; alice may
    // proxy.
    api.allow("system:node:test", "pods");
    api.allow("alice", "proxy");
    let mut node = Node::new("pushauth");
    let kc = api.kubeconfig(&node.dir, "kubelet.kubeconfig", "token: good-token");
    let mut flags = pki_flags(&pki);
    flags.extend([
        format!("--kubeconfig={}", kc.display()),
        "--enable-server-source".into(),
        "--anonymous-auth=false".into(),
        "--authorization-mode=Webhook".into(),
    ]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let port = start(&mut node, &flags);
    let empty = body_file(
        &node,
        "empty.json",
        r#"{"kind":"PodList","apiVersion":"v1","items":[]}"#,
    );

    // No certificate: 401.
    assert_eq!(
        curl(port, "PUT", "/pods", Some(&empty), None),
        (401, "Unauthorized".to_string())
    );
    // A certificate, not authorized for nodes/proxy: 403, though it may read pods.
    let node_cert = Some((pki.client_cert.as_path(), pki.client_key.as_path()));
    for (method, path, verb) in [
        ("PUT", "/pods", "update"),
        ("POST", "/pods", "create"),
        ("DELETE", "/pods/default/a", "delete"),
    ] {
        let body = (method != "DELETE").then_some(empty.as_path());
        assert_eq!(
            curl(port, method, path, body, node_cert),
            (
                403,
                format!(
                    "Forbidden (user=system:node:test, verb={verb}, resource=nodes, \
                     subresource(s)=[proxy])\n"
                )
            ),
            "{method} {path}"
        );
    }
    let (code, body) = curl(port, "GET", "/pods?source=server", None, node_cert);
    assert_eq!(code, 200, "{body}");
    // alice may: 200, and the review the stand-in got says what was asked.
    let (crt, key) = client_cert(&pki, &node.dir, "alice", "/CN=alice/O=ops");
    let (code, body) = curl(port, "PUT", "/pods", Some(&empty), Some((&crt, &key)));
    assert_eq!(code, 200, "{body}");
    assert!(list_names(&body).is_empty());
    let review = api
        .access_reviews()
        .into_iter()
        .find(|s| s["user"] == "alice")
        .expect("a review of alice");
    assert_eq!(
        review["resourceAttributes"],
        serde_json::json!({
            "verb": "update",
            "version": "v1",
            "resource": "nodes",
            "subresource": "proxy",
            "name": node.name,
        })
    );
    assert_eq!(
        review["groups"],
        serde_json::json!(["ops", "system:authenticated"])
    );
}

#[test]
fn with_the_source_off_pushing_is_404_and_get_pods_is_as_before() {
    let mut node = Node::new("pushoff");
    let mut flags = pki_flags(&Pki::get());
    flags.extend([
        "--anonymous-auth=false".to_string(),
        "--authorization-mode=AlwaysAllow".to_string(),
    ]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let port = start(&mut node, &flags);
    let (crt, key) = admin();
    let cert = Some((crt.as_path(), key.as_path()));
    let a = body_file(&node, "a.yaml", &pods(&["a"]));
    for (method, path, body) in [
        ("PUT", "/pods", Some(a.as_path())),
        ("POST", "/pods", Some(a.as_path())),
        ("DELETE", "/pods/default/a", None),
    ] {
        let (code, text) = curl(port, method, path, body, cert);
        assert_eq!(code, 404, "{method} {path}: {text}");
        assert!(text.contains("--enable-server-source"), "{text}");
    }
    let (code, body) = curl(port, "GET", "/pods", None, cert);
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&body).expect("JSON"),
        node.pods()
    );
    assert!(!node.dir.join("root/pods-pushed").exists());
    assert!(node.containers().is_empty());
}
