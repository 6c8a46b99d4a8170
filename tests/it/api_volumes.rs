//! Volumes and env from the API server (issue 11): the projected `kube-api-access`
//! volume every API pod gets, configMap and secret volumes (the secret on tmpfs), a
//! ConfigMap update reaching a running container, a short-lived projected token
//! refreshed before it expires, env from a ConfigMap and a Secret, and a pod that
//! waits for a missing ConfigMap and starts once it appears. Against real Docker and
//! the stand-in API server.

use std::time::Duration;

use serde_json::{json, Value};

use crate::apiserver::{Options, TestApiServer};
use crate::registry::{base64, exec};
use crate::util::{wait_for, Node, BUSYBOX, SLEEPER};

/// Where a real API server's ServiceAccount admission mounts `kube-api-access-*`.
const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// A ConfigMap update or a token refresh reaches a running container within a sync
/// (10 s here) plus the object cache's TTL (60 s): this leaves room on a loaded host.
const UPDATE_DEADLINE: Duration = Duration::from_secs(200);

/// The projected volume kube-apiserver injects into every pod, verbatim.
fn kube_api_access(expiration: u64) -> Value {
    json!({
        "name": "kube-api-access-x7k2p",
        "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": expiration, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt",
                    "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace",
                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
            ]
        }
    })
}

/// An API pod bound to `node` running a sleeper with `volumes` mounted as `mounts`.
fn pod(name: &str, node: &str, volumes: Value, mounts: Value, extra: Value) -> Value {
    let mut c = json!({"name": "c", "image": BUSYBOX, "command": ["sh", "-c", SLEEPER],
        "volumeMounts": mounts});
    if let Value::Object(m) = extra {
        for (k, v) in m {
            c[k] = v;
        }
    }
    json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "serviceAccountName": "default",
            "terminationGracePeriodSeconds": 1,
            "volumes": volumes,
            "containers": [c]
        }
    })
}

/// The running container `c` of API pod `pod`: its Docker ID.
fn running_id(node: &Node, pod: &str) -> String {
    wait_for(&format!("{pod}/c running"), crate::util::LONG, || {
        node.running()
            .get(&format!("{pod}/c"))
            .and_then(|ids| ids.first().cloned())
    })
}

/// The status of container `c` of API pod `pod` in `/pods`.
fn status_of(node: &Node, pod: &str) -> Option<Value> {
    node.pods()["items"]
        .as_array()?
        .iter()
        .find(|p| p["metadata"]["name"] == pod)?["status"]["containerStatuses"]
        .as_array()?
        .first()
        .cloned()
}

fn start(server: &TestApiServer, prefix: &str) -> Node {
    let mut node = Node::new(prefix);
    let kc = server.kubeconfig(&node.dir, "kubeconfig", "token: good-token");
    node.start(&[
        &format!("--kubeconfig={}", kc.display()),
        "--sync-frequency=10s",
    ]);
    node
}

fn cat(node: &Node, id: &str, path: &str) -> String {
    exec(node, id, &["cat", path])
}

#[test]
fn the_kube_api_access_volume_runs_and_a_short_token_is_refreshed() {
    let server = TestApiServer::start(Options::default());
    server.put_object(
        "configmaps",
        "default",
        "kube-root-ca.crt",
        json!({"data": {"ca.crt": "-----BEGIN CERTIFICATE-----\nTEST\n-----END CERTIFICATE-----\n"}}),
    );
    let node = start(&server, "apivol-sa");
    let mount = json!([{"name": "kube-api-access-x7k2p", "mountPath": SA_DIR, "readOnly": true}]);
    server.create_pod(pod(
        "sa",
        &node.name,
        json!([kube_api_access(3607)]),
        mount.clone(),
        json!({}),
    ));
    let id = running_id(&node, "sa");

    assert_eq!(cat(&node, &id, &format!("{SA_DIR}/namespace")), "default");
    assert!(cat(&node, &id, &format!("{SA_DIR}/ca.crt")).contains("TEST"));
    let token = cat(&node, &id, &format!("{SA_DIR}/token"));
    assert!(token.starts_with("test-token-"), "{token}");
    // Upstream's layout: user-visible names are symlinks through ..data.
    let listing = exec(&node, &id, &["ls", "-la", SA_DIR]);
    assert!(listing.contains("..data -> ..20"), "{listing}");
    assert!(listing.contains("token -> ..data/token"), "{listing}");
    // Read-only, and on a tmpfs.
    let mounts = exec(&node, &id, &["cat", "/proc/mounts"]);
    let line = mounts
        .lines()
        .find(|l| l.contains(SA_DIR))
        .unwrap_or_else(|| panic!("{SA_DIR} not mounted: {mounts}"));
    assert!(line.contains("tmpfs") && line.contains(" ro"), "{line}");
    // The TokenRequest is bound to the pod, with the lifetime asked.
    let reqs = server.token_requests();
    assert_eq!(reqs.len(), 1, "{reqs:?}");
    assert_eq!(reqs[0]["path"], "default/default");
    assert_eq!(reqs[0]["spec"]["expirationSeconds"], 3607);
    assert_eq!(reqs[0]["spec"]["boundObjectRef"]["kind"], "Pod");
    assert_eq!(reqs[0]["spec"]["boundObjectRef"]["name"], "sa");
    assert!(reqs[0]["spec"]["boundObjectRef"]["uid"]
        .as_str()
        .is_some_and(|u| u.starts_with("uid-sa")));
    // Never logged.
    assert!(!node.log().contains(&token), "the token is in the log");

    // A 600 s token whose expiry the server sets 130 s out is within the last fifth of
    // its lifetime (120 s, less up to 10 s of jitter) within seconds: the next syncs
    // refresh it, and the container sees the new token without a restart.
    server.set_token_lifetime(Some(130));
    let mut short = kube_api_access(600);
    short["name"] = json!("kube-api-access-x7k2p");
    server.create_pod(pod("short", &node.name, json!([short]), mount, json!({})));
    let short_id = running_id(&node, "short");
    let first = cat(&node, &short_id, &format!("{SA_DIR}/token"));
    let refreshed = wait_for("the short token to be refreshed", UPDATE_DEADLINE, || {
        let now = cat(&node, &short_id, &format!("{SA_DIR}/token"));
        (now != first).then_some(now)
    });
    assert!(refreshed.starts_with("test-token-"), "{refreshed}");
    let for_short: Vec<Value> = server
        .token_requests()
        .into_iter()
        .filter(|r| r["spec"]["boundObjectRef"]["name"] == "short")
        .collect();
    assert!(for_short.len() >= 2, "{for_short:?}");
    assert!(for_short
        .iter()
        .all(|r| r["spec"]["expirationSeconds"] == 600));
    // The long-lived token of the first pod was not asked for again.
    let for_sa = server
        .token_requests()
        .iter()
        .filter(|r| r["spec"]["boundObjectRef"]["name"] == "sa")
        .count();
    assert_eq!(for_sa, 1);
    assert_eq!(node.running().get("short/c").map(Vec::len), Some(1));
}

#[test]
fn configmap_and_secret_volumes_and_env_follow_their_objects() {
    let server = TestApiServer::start(Options::default());
    server.put_object(
        "configmaps",
        "default",
        "cfg",
        json!({"data": {"key": "v1", "bad=name": "x"}}),
    );
    server.put_object(
        "secrets",
        "default",
        "sec",
        json!({"type": "Opaque", "data": {"password": base64(b"hunter2", false)}}),
    );
    let node = start(&server, "apivol-cm");
    let volumes = json!([
        {"name": "config", "configMap": {"name": "cfg"}},
        {"name": "sec", "secret": {"secretName": "sec", "defaultMode": 256,
            "items": [{"key": "password", "path": "pw"}]}}
    ]);
    let mounts = json!([
        {"name": "config", "mountPath": "/etc/config"},
        {"name": "sec", "mountPath": "/etc/sec"}
    ]);
    let env = json!({
        "envFrom": [{"configMapRef": {"name": "cfg"}, "prefix": "CFG_"}],
        "env": [{"name": "PASS", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "password"}}},
                {"name": "OPT", "valueFrom": {"configMapKeyRef": {"name": "nope", "key": "k", "optional": true}}}]
    });
    server.create_pod(pod("cm", &node.name, volumes, mounts, env));
    let id = running_id(&node, "cm");

    assert_eq!(cat(&node, &id, "/etc/config/key"), "v1");
    assert_eq!(cat(&node, &id, "/etc/sec/pw"), "hunter2");
    let mode = exec(&node, &id, &["stat", "-L", "-c", "%a", "/etc/sec/pw"]);
    assert_eq!(mode.trim(), "400");
    let envs = exec(&node, &id, &["env"]);
    assert!(envs.lines().any(|l| l == "CFG_key=v1"), "{envs}");
    assert!(envs.lines().any(|l| l == "PASS=hunter2"), "{envs}");
    assert!(!envs.contains("OPT="), "{envs}");
    assert!(
        node.log().contains("InvalidEnvironmentVariableNames"),
        "the skipped key is reported: {}",
        node.log()
    );

    // The secret is on a tmpfs on the host too, never on the node's disk; the
    // ConfigMap is on disk, as upstream.
    let host_mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let root = node.dir.join("root");
    let ours: Vec<&str> = host_mounts
        .lines()
        .filter(|l| l.contains(&*root.to_string_lossy()))
        .collect();
    assert!(
        ours.iter()
            .any(|l| l.contains("kubernetes.io~secret/sec ") && l.contains(" - tmpfs ")),
        "{ours:?}"
    );
    assert!(
        !ours.iter().any(|l| l.contains("kubernetes.io~configmap")),
        "{ours:?}"
    );

    // An update reaches the running container (the next syncs after the cache's TTL).
    server.put_object(
        "configmaps",
        "default",
        "cfg",
        json!({"data": {"key": "v2", "new": "n"}}),
    );
    wait_for(
        "the ConfigMap update in the container",
        UPDATE_DEADLINE,
        || (cat(&node, &id, "/etc/config/key") == "v2").then_some(()),
    );
    assert_eq!(cat(&node, &id, "/etc/config/new"), "n");
    let listing = exec(&node, &id, &["ls", "-a", "/etc/config"]);
    assert!(!listing.lines().any(|l| l == "bad=name"), "{listing}");
    assert_eq!(node.running().get("cm/c").map(Vec::len), Some(1));
}

#[test]
fn a_pod_waits_for_a_missing_configmap_and_starts_when_it_appears() {
    let server = TestApiServer::start(Options::default());
    let node = start(&server, "apivol-late");
    server.create_pod(pod(
        "late",
        &node.name,
        json!([{"name": "v", "configMap": {"name": "late-cm"}}]),
        json!([{"name": "v", "mountPath": "/etc/late"}]),
        json!({"env": [{"name": "K", "valueFrom": {"configMapKeyRef": {"name": "late-env", "key": "k"}}}]}),
    ));
    let msg = wait_for(
        "the pod to wait for its ConfigMaps",
        crate::util::LONG,
        || {
            let s = status_of(&node, "late")?;
            (s["state"]["waiting"]["reason"] == "CreateContainerConfigError").then(|| {
                s["state"]["waiting"]["message"]
                    .as_str()
                    .unwrap_or("")
                    .to_string()
            })
        },
    );
    assert!(
        msg == "configmap \"late-env\" not found"
            || msg.contains(
                "MountVolume.SetUp failed for volume \"v\" : configmap \"late-cm\" not found"
            ),
        "{msg}"
    );
    wait_for("the FailedMount event", crate::util::LONG, || {
        node.log()
            .contains("FailedMount pod/default/late: MountVolume.SetUp failed for volume \"v\" : configmap \"late-cm\" not found")
            .then_some(())
    });
    assert!(!node.running().contains_key("late/c"));
    server.put_object(
        "configmaps",
        "default",
        "late-cm",
        json!({"data": {"a": "1"}}),
    );
    server.put_object(
        "configmaps",
        "default",
        "late-env",
        json!({"data": {"k": "kv"}}),
    );
    let id = running_id(&node, "late");
    assert_eq!(cat(&node, &id, "/etc/late/a"), "1");
    assert!(exec(&node, &id, &["env"]).lines().any(|l| l == "K=kv"));
}

#[test]
fn image_pull_secrets_give_the_pull_its_credentials() {
    use crate::registry::{Registry, PASSWORD, USER};
    let reg = Registry::start();
    let image = reg.push(
        BUSYBOX,
        &format!("rk/{}", crate::util::unique("pullsecret")),
        "v1",
        true,
    );
    let server = TestApiServer::start(Options::default());
    let config = json!({"auths": {reg.host.clone(): {
        "auth": base64(format!("{USER}:{PASSWORD}").as_bytes(), false)}}});
    server.put_object(
        "secrets",
        "default",
        "regcred",
        json!({"type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": base64(config.to_string().as_bytes(), false)}}),
    );
    // The node's HOME has no Docker config: only the pod's secret can open the registry.
    let mut node = Node::new("apivol-pull");
    node.env
        .push(("HOME".into(), node.dir.join("home").display().to_string()));
    let kc = server.kubeconfig(&node.dir, "kubeconfig", "token: good-token");
    node.start(&[
        &format!("--kubeconfig={}", kc.display()),
        "--sync-frequency=10s",
    ]);
    let mut p = pod(
        "pull",
        &node.name,
        json!([]),
        json!([]),
        json!({"image": image}),
    );
    p["spec"]["imagePullSecrets"] = json!([{"name": "missing"}, {"name": "regcred"}]);
    server.create_pod(p);
    running_id(&node, "pull");
    let log = node.log();
    assert!(
        log.contains("FailedToRetrieveImagePullSecret") && log.contains("(missing)"),
        "{log}"
    );
    assert!(!log.contains(PASSWORD), "the password is in the log");
}
