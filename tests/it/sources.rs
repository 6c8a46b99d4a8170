//! The pod sources beyond the directory: a manifest URL (a real HTTP server in the
//! test), an etcd prefix (a real etcd), and the API server (the test stand-in in
//! `apiserver.rs`), first each source on its own against its server, then end to end
//! with a real rkubelet driving Docker, with the sources merged.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Value};

use crate::apiserver::{Options, Pki, TestApiServer};
use crate::etcd::Etcd;
use crate::util::{self, label, pod_yaml, wait_for, Node, BUSYBOX, LONG, SLEEPER};
use apiclient::{kubeconfig, ApiClient};
use base::loops::{shutdown_channel, Loops, Shutdown};
use rkubelet::podconfig::apiserver::ApiSource;
use rkubelet::podconfig::etcd::{EtcdConfig, EtcdSource, WatchEnd};
use rkubelet::podconfig::http::HttpSource;
use rkubelet::podconfig::SourceUpdate;

// ---------------------------------------------------------------------------------
// Helpers.

/// A scratch directory removed on drop.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let p = std::env::temp_dir().join(format!("rkubelet-src-{}", util::unique(tag)));
        std::fs::create_dir_all(&p).expect("scratch dir");
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn names<P: std::borrow::Borrow<Pod>>(pods: &[P]) -> Vec<String> {
    let mut n: Vec<String> = pods
        .iter()
        .map(|p| p.borrow().metadata.name.clone().unwrap_or_default())
        .collect();
    base::sort::sort(&mut n);
    n
}

/// Waits for a snapshot whose sorted pod names are `want`; returns its pods.
fn wait_names(rx: &Receiver<SourceUpdate>, want: &[&str]) -> Vec<Arc<Pod>> {
    let until = Instant::now() + LONG;
    let mut last = Vec::new();
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(u) => {
                if names(&u.pods) == want {
                    return u.pods;
                }
                last = names(&u.pods);
            }
            Err(_) => panic!("no snapshot with {want:?} within {LONG:?}; last {last:?}"),
        }
    }
}

/// An API pod bound to `node`, running a busybox sleeper.
fn api_pod(name: &str, node: &str) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": BUSYBOX, "command": ["sh", "-c", SLEEPER]}]
        }
    })
}

/// The running loops of a source under test; stopped on drop.
struct Running {
    shutdown: Shutdown,
    loops: Loops,
}

impl Running {
    fn new() -> Running {
        let (shutdown, stop) = shutdown_channel();
        Running {
            shutdown,
            loops: Loops::new(stop),
        }
    }

    fn last_error(&self, name: &str) -> Option<String> {
        self.loops.registry().get(name).and_then(|s| s.last_error)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.shutdown.trigger();
        let left = self.loops.join_all(Duration::from_secs(10));
        assert!(
            left.is_empty() || std::thread::panicking(),
            "still running: {left:?}"
        );
    }
}

fn client_for(server: &TestApiServer, dir: &Scratch, user: &str) -> Arc<ApiClient> {
    let kc = server.kubeconfig(&dir.0, "kubeconfig", user);
    let rest = kubeconfig::load(&kc).expect("kubeconfig");
    Arc::new(ApiClient::new(rest).expect("client"))
}

fn start_api_source(run: &Running, client: Arc<ApiClient>, node: &str) -> Receiver<SourceUpdate> {
    let (tx, rx) = crossbeam_channel::bounded(50);
    let source = ApiSource::new(client, node.into(), tx);
    rkubelet::podconfig::apiserver::start(&run.loops, source).expect("start");
    rx
}

fn count(requests: &[String], needle: &str) -> usize {
    requests.iter().filter(|r| r.contains(needle)).count()
}

// ---------------------------------------------------------------------------------
// The API source against the test API server (no Docker).

#[test]
fn api_source_lists_then_follows_every_watch_event_of_its_node_only() {
    let server = TestApiServer::start(Options::default());
    server.create_pod(api_pod("before", "n1"));
    server.create_pod(api_pod("elsewhere", "n2"));
    let dir = Scratch::new("api-events");
    let run = Running::new();
    let rx = start_api_source(&run, client_for(&server, &dir, "token: good-token"), "n1");
    wait_names(&rx, &["before"]);
    server.create_pod(api_pod("added", "n1"));
    server.create_pod(api_pod("other-node", "n2"));
    wait_names(&rx, &["added", "before"]);
    let mut changed = server.get_pod("default", "added").expect("pod");
    changed["metadata"]["labels"] = json!({"v": "2"});
    server.update_pod(changed);
    let pods = wait_for("the MODIFIED pod", LONG, || {
        let u = rx.recv_timeout(LONG).ok()?;
        let p = u
            .pods
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some("added"))?
            .clone();
        p.metadata.labels.is_some().then_some(u.pods)
    });
    assert_eq!(names(&pods), ["added", "before"]);
    server.delete_pod("default", "before");
    wait_names(&rx, &["added"]);

    let reqs = server.requests();
    let list = reqs
        .iter()
        .find(|r| !r.contains("watch=true"))
        .expect("a list");
    assert!(list.contains("fieldSelector=spec.nodeName%3Dn1"), "{list}");
    assert!(list.contains("resourceVersion=0"), "{list}");
    let watch = reqs
        .iter()
        .find(|r| r.contains("watch=true"))
        .expect("a watch");
    assert!(watch.contains("allowWatchBookmarks=true"), "{watch}");
    assert!(watch.contains("timeoutSeconds="), "{watch}");
    assert!(
        reqs.iter()
            .all(|r| r.contains(&format!("ua=rkubelet/{}", env!("CARGO_PKG_VERSION")))),
        "{reqs:?}"
    );
    assert!(reqs.iter().all(|r| r.ends_with("auth=token")), "{reqs:?}");
    assert_eq!(run.last_error("src-api"), None);
}

#[test]
fn api_source_resumes_a_dropped_watch_and_a_timed_out_one_from_the_last_version() {
    let server = TestApiServer::start(Options {
        max_watch: Duration::from_secs(2),
        ..Options::default()
    });
    server.create_pod(api_pod("a", "n"));
    let dir = Scratch::new("api-drop");
    let run = Running::new();
    let rx = start_api_source(&run, client_for(&server, &dir, "token: good-token"), "n");
    wait_names(&rx, &["a"]);
    // A change this node does not see: only a bookmark tells rkubelet the version
    // moved. The server ends each watch after 2 s; rkubelet watches again from the
    // newest version it knows, without a new list.
    wait_for("the first watch", LONG, || {
        (count(&server.requests(), "watch=true") >= 1).then_some(())
    });
    let moved_to = server.create_pod(api_pod("elsewhere", "other"))["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse::<u64>().ok())
        .expect("rv");
    wait_for("a watch from the bookmarked version", LONG, || {
        server
            .requests()
            .iter()
            .any(|r| r.contains(&format!("resourceVersion={moved_to}&")))
            .then_some(())
    });
    // Broken off mid-stream: resumed, no relist, and nothing missed.
    server.drop_watches();
    server.create_pod(api_pod("b", "n"));
    wait_names(&rx, &["a", "b"]);
    let reqs = server.requests();
    assert_eq!(
        count(&reqs, "watch=true") + 1,
        reqs.len(),
        "one list only: {reqs:?}"
    );
    let versions: Vec<u64> = reqs
        .iter()
        .filter(|r| r.contains("watch=true"))
        .filter_map(|r| {
            r.split("resourceVersion=")
                .nth(1)?
                .split('&')
                .next()?
                .parse()
                .ok()
        })
        .collect();
    assert!(
        versions.windows(2).all(|w| w[0] <= w[1]) && versions.last() >= Some(&moved_to),
        "watches resume from the newest version seen (bookmarks included): {versions:?}"
    );
}

#[test]
fn api_source_lists_again_after_410_gone_as_event_and_as_status() {
    for gone_as_status in [false, true] {
        let server = TestApiServer::start(Options {
            gone_as_status,
            ..Options::default()
        });
        server.create_pod(api_pod("a", "n"));
        let dir = Scratch::new("api-gone");
        let run = Running::new();
        let rx = start_api_source(&run, client_for(&server, &dir, "token: good-token"), "n");
        wait_names(&rx, &["a"]);
        wait_for("the watch to be open", LONG, || {
            (count(&server.requests(), "watch=true") >= 1).then_some(())
        });
        // While rkubelet is disconnected, pods change and the history is compacted:
        // its version is gone, so only a new list can tell it about `b`.
        let mut paused = server;
        paused.stop();
        paused.delete_pod("default", "a");
        paused.create_pod(api_pod("b", "n"));
        paused.compact();
        paused.restart();
        wait_names(&rx, &["b"]);
        let reqs = paused.requests();
        let lists: Vec<&String> = reqs.iter().filter(|r| !r.contains("watch=true")).collect();
        assert_eq!(
            lists.len(),
            2,
            "listed again (gone_as_status={gone_as_status}): {reqs:?}"
        );
        assert!(
            !lists[1].contains("resourceVersion="),
            "the relist asks for the newest state: {}",
            lists[1]
        );
    }
}

#[test]
fn api_client_authenticates_with_token_file_client_certificate_and_exec_plugin() {
    let server = TestApiServer::start(Options::default());
    server.create_pod(api_pod("p", "n"));
    let dir = Scratch::new("api-auth");
    let pki = Pki::get();
    let token_file = dir.0.join("token");
    std::fs::write(&token_file, "good-token\n").expect("token file");
    let plugin = dir.0.join("cred.sh");
    std::fs::write(
        &plugin,
        "#!/bin/sh\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"good-token\"}}'\n",
    )
    .expect("plugin");
    std::fs::set_permissions(&plugin, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let rows: Vec<(String, Result<&str, &str>)> = vec![
        ("token: good-token".into(), Ok("auth=token")),
        (
            format!("tokenFile: {}", token_file.display()),
            Ok("auth=token"),
        ),
        (
            format!(
                "client-certificate: {}\nclient-key: {}",
                pki.client_cert.display(),
                pki.client_key.display()
            ),
            Ok("auth=cert"),
        ),
        (
            format!(
                "exec:\n  apiVersion: client.authentication.k8s.io/v1\n  command: {}",
                plugin.display()
            ),
            Ok("auth=token"),
        ),
        (
            "token: wrong".into(),
            Err("the API server answered 401 Unauthorized: Unauthorized"),
        ),
        ("{}".into(), Err("the API server answered 401 Unauthorized")),
        (
            format!(
                "client-certificate: {}\nclient-key: {}",
                pki.rogue_cert.display(),
                pki.rogue_key.display()
            ),
            Err("list pods from https://127.0.0.1:"),
        ),
    ];
    for (user, want) in rows {
        let client = client_for(&server, &dir, &user);
        let before = server.requests().len();
        let got = client.list_pods("n", Some("0"));
        match want {
            Ok(auth) => {
                let list =
                    got.unwrap_or_else(|e| panic!("{user}: {}", base::loops::error_chain(&e)));
                assert_eq!(names(&list.items), ["p"], "{user}");
                let reqs = server.requests();
                assert!(
                    reqs[before..].iter().all(|r| r.ends_with(auth)),
                    "{user}: {reqs:?}"
                );
            }
            Err(msg) => {
                let e = base::loops::error_chain(&got.expect_err(&user));
                assert!(e.contains(msg), "{user}: {e}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------
// The etcd source against a real etcd (no Docker).

const ETCD_POD: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"NAME"},"spec":{"containers":[{"name":"c","image":"IMAGE","command":["sh","-c","CMD"]}],"terminationGracePeriodSeconds":1}}"#;

fn etcd_pod(name: &str) -> String {
    ETCD_POD
        .replace("NAME", name)
        .replace("IMAGE", BUSYBOX)
        .replace("CMD", SLEEPER)
}

#[test]
fn etcd_source_reads_watches_and_reads_again_after_compaction() {
    let etcd = Etcd::start();
    let prefix = "/registry/hosts/n/";
    etcd.put(&format!("{prefix}a"), &etcd_pod("a"));
    etcd.put("/registry/hosts/other/x", &etcd_pod("x"));
    let (tx, rx) = crossbeam_channel::unbounded();
    let cfg = EtcdConfig {
        servers: vec![etcd.url.clone()],
        prefix: prefix.into(),
        tls: Default::default(),
    };
    let mut src = EtcdSource::new(cfg, "n".into(), tx).expect("source");
    src.list().expect("list");
    assert_eq!(names(&rx.try_recv().expect("snapshot").pods), ["a-n"]);
    // Changes while not watching; then compaction removes the history the watch
    // would resume from: it must say "read again", and the new read has them.
    etcd.put(
        &format!("{prefix}b"),
        "kind: Pod\nmetadata: {name: b}\nspec:\n  containers: [{name: c, image: i}]\n",
    );
    etcd.delete(&format!("{prefix}a"));
    etcd.compact();
    let (_shutdown, stop) = shutdown_channel();
    let end = src.watch(&stop, &mut |_| {}).expect("watch");
    assert!(
        matches!(end, WatchEnd::Relist(ref why) if why.contains("compacted")),
        "{end:?}"
    );
    src.list().expect("list again");
    assert_eq!(names(&rx.try_recv().expect("snapshot").pods), ["b-n"]);
    // A key that does not decode is reported by key and keeps no pods.
    etcd.put(&format!("{prefix}bad"), "kind: Pod\nmetadata: [\n");
    src.list().expect("list");
    assert_eq!(names(&rx.try_recv().expect("snapshot").pods), ["b-n"]);
    let errors = src.key_errors().expect("an error");
    assert!(
        errors.starts_with(&format!("etcd:{prefix}bad: document 0: invalid YAML")),
        "{errors}"
    );
}

#[test]
fn etcd_source_fails_over_and_resumes_across_an_etcd_restart() {
    let mut etcd = Etcd::start();
    let prefix = "/registry/hosts/n/";
    etcd.put(&format!("{prefix}a"), &etcd_pod("a"));
    let (tx, rx) = crossbeam_channel::bounded(50);
    // The first server listed is down: the source fails over to the second.
    let dead = format!("http://127.0.0.1:{}", util::free_port());
    let cfg = EtcdConfig {
        servers: vec![dead, etcd.url.clone()],
        prefix: prefix.into(),
        tls: Default::default(),
    };
    let run = Running::new();
    let src = EtcdSource::new(cfg, "n".into(), tx).expect("source");
    rkubelet::podconfig::etcd::start(&run.loops, src).expect("start");
    wait_names(&rx, &["a-n"]);
    etcd.put(&format!("{prefix}b"), &etcd_pod("b"));
    wait_names(&rx, &["a-n", "b-n"]);

    etcd.stop();
    wait_for("the source to notice etcd is gone", LONG, || {
        run.last_error("src-etcd")
            .filter(|e| e.contains("etcd http://127.0.0.1:"))
    });
    etcd.restart();
    etcd.put(&format!("{prefix}c"), &etcd_pod("c"));
    etcd.delete(&format!("{prefix}a"));
    wait_names(&rx, &["b-n", "c-n"]);
    wait_for("the error to clear", LONG, || {
        run.last_error("src-etcd").is_none().then_some(())
    });
}

// ---------------------------------------------------------------------------------
// The URL source against a real HTTP server (no Docker).

#[test]
fn url_source_sends_only_changes_and_keeps_its_pods_through_failures() {
    let site = StaticServer::start(("Authorization", "Bearer t"));
    let url = format!("http://127.0.0.1:{}/m", site.port);
    let (tx, rx) = crossbeam_channel::unbounded();
    let mut src = HttpSource::new(
        url.clone(),
        vec![("Authorization".into(), "Bearer t".into())],
        "n".into(),
        tx,
    );
    site.set(200, &pod_yaml("a", 1, &[("c", SLEEPER)]));
    src.tick().expect("first fetch");
    assert_eq!(names(&rx.try_recv().expect("snapshot").pods), ["a-n"]);
    src.tick().expect("same body");
    assert!(rx.try_recv().is_err(), "an unchanged body sends nothing");

    let rows: Vec<(u16, &str, String)> = vec![
        (503, "down", format!("{url}: the server answered 503")),
        (
            200,
            "kind: Pod\nmetadata: [\n",
            format!("{url}: document 0: invalid YAML"),
        ),
        (
            200,
            "kind: Pod\nspec: {}\n",
            format!("{url}: document 0: invalid pod: name is needed"),
        ),
    ];
    for (code, body, want) in rows {
        site.set(code, body);
        let e = base::loops::error_chain(&src.tick().expect_err(body));
        assert!(e.starts_with(&want), "{e}");
        assert!(
            rx.try_recv().is_err(),
            "a failure sends nothing: the last pods stay"
        );
    }
    site.set(
        200,
        &format!(
            "{}---\n{}",
            pod_yaml("a", 1, &[("c", SLEEPER)]),
            pod_yaml("b", 1, &[("c", SLEEPER)])
        ),
    );
    src.tick().expect("recovered");
    assert_eq!(
        names(&rx.try_recv().expect("snapshot").pods),
        ["a-n", "b-n"]
    );
    site.set(200, "");
    let e = src.tick().expect_err("empty");
    assert_eq!(
        e.to_string(),
        format!("zero-length data received from {url}")
    );
    assert!(rx
        .try_recv()
        .expect("an empty snapshot, as upstream")
        .pods
        .is_empty());

    let mut without_header = HttpSource::new(
        url.clone(),
        vec![],
        "n".into(),
        crossbeam_channel::unbounded().0,
    );
    assert_eq!(
        without_header.tick().expect_err("403").to_string(),
        format!("{url}: the server answered 403")
    );
    let unreachable = format!("http://127.0.0.1:{}/m", util::free_port());
    let mut down = HttpSource::new(
        unreachable.clone(),
        vec![],
        "n".into(),
        crossbeam_channel::unbounded().0,
    );
    let e = base::loops::error_chain(&down.tick().expect_err("refused"));
    assert!(
        e.starts_with(&format!("cannot fetch {unreachable}: ")),
        "{e}"
    );
}

#[test]
fn etcd_source_speaks_tls_with_a_client_certificate() {
    let pki = Pki::get();
    let etcd = Etcd::start_tls(&pki);
    let prefix = "/registry/hosts/n/";
    etcd.put(&format!("{prefix}a"), &etcd_pod("a"));
    let read = |p: &std::path::Path| Some(std::fs::read(p).expect("pem"));
    let tls = base::httpclient::servers::TlsSettings {
        ca_pem: read(&pki.ca),
        cert_pem: read(&pki.client_cert),
        key_pem: read(&pki.client_key),
        insecure: false,
    };
    let (tx, rx) = crossbeam_channel::bounded(50);
    let cfg = EtcdConfig {
        servers: vec![etcd.url.clone()],
        prefix: prefix.into(),
        tls: tls.clone(),
    };
    let run = Running::new();
    rkubelet::podconfig::etcd::start(
        &run.loops,
        EtcdSource::new(cfg, "n".into(), tx).expect("source"),
    )
    .expect("start");
    wait_names(&rx, &["a-n"]);
    etcd.put(&format!("{prefix}b"), &etcd_pod("b"));
    wait_names(&rx, &["a-n", "b-n"]);

    // Without the client certificate, etcd refuses the handshake: a clear error.
    let (tx2, _rx2) = crossbeam_channel::bounded(50);
    let cfg = EtcdConfig {
        servers: vec![etcd.url.clone()],
        prefix: prefix.into(),
        tls: base::httpclient::servers::TlsSettings {
            cert_pem: None,
            key_pem: None,
            ..tls
        },
    };
    let mut src = EtcdSource::new(cfg, "n".into(), tx2).expect("source");
    let e = base::loops::error_chain(&src.list().expect_err("refused"));
    assert!(
        e.starts_with(&format!("etcd {}: read {prefix}", etcd.url)),
        "{e}"
    );
}

// ---------------------------------------------------------------------------------
// End to end: rkubelet with Docker.

/// Waits until `pod/container` (a full pod name) runs; returns its container IDs.
fn wait_running(node: &Node, full: &str) -> Vec<String> {
    wait_for(&format!("{full} running"), LONG, || {
        node.running().get(full).cloned()
    })
}

fn wait_gone(node: &Node, pod: &str) {
    wait_for(&format!("{pod}'s containers to be gone"), LONG, || {
        node.containers()
            .iter()
            .all(|c| label(c, "io.kubernetes.pod.name") != pod)
            .then_some(())
    });
}

/// The `/pods` entry of a pod, by full name.
fn pod_entry(node: &Node, full: &str) -> Option<Value> {
    node.pods()["items"]
        .as_array()?
        .iter()
        .find(|p| p["metadata"]["name"] == full)
        .cloned()
}

/// A tiny static HTTP server: answers every GET with the current (status, body),
/// or 403 without the expected header.
struct StaticServer {
    server: Arc<tiny_http::Server>,
    reply: Arc<Mutex<(u16, String)>>,
    port: u16,
}

impl StaticServer {
    fn start(header: (&'static str, &'static str)) -> StaticServer {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("bind"));
        let port = server.server_addr().to_ip().expect("ip").port();
        let reply = Arc::new(Mutex::new((200u16, String::new())));
        let (s, r) = (server.clone(), reply.clone());
        std::thread::Builder::new()
            .name("test-static".into())
            .spawn(move || {
                for req in s.incoming_requests() {
                    let ok = req
                        .headers()
                        .iter()
                        .any(|h| h.field.equiv(header.0) && h.value.as_str() == header.1);
                    let (code, body) = if ok {
                        r.lock().expect("reply").clone()
                    } else {
                        (403, "forbidden".to_string())
                    };
                    let _ =
                        req.respond(tiny_http::Response::from_string(body).with_status_code(code));
                }
            })
            .expect("spawn");
        StaticServer {
            server,
            reply,
            port,
        }
    }

    fn set(&self, code: u16, body: &str) {
        *self.reply.lock().expect("reply") = (code, body.to_string());
    }
}

impl Drop for StaticServer {
    fn drop(&mut self) {
        self.server.unblock();
    }
}

#[test]
fn pods_from_a_url_run_follow_its_content_and_survive_its_failures() {
    let site = StaticServer::start(("X-Token", "s3cret"));
    site.set(200, &pod_yaml("web", 1, &[("c", SLEEPER)]));
    let mut node = Node::new("src-http");
    let url = format!("http://127.0.0.1:{}/pods", site.port);
    node.start(&[
        &format!("--manifest-url={url}"),
        "--manifest-url-header=X-Token:s3cret,X-Other:1",
        "--http-check-frequency=1s",
    ]);
    let n = node.name.clone();
    let web = wait_running(&node, &format!("web-{n}/c"));
    let entry = pod_entry(&node, &format!("web-{n}")).expect("in /pods");
    assert_eq!(
        entry["metadata"]["annotations"]["kubernetes.io/config.source"],
        "http"
    );
    assert!(util::thread_names(node.pid())
        .iter()
        .any(|t| t == "src-http"));

    // A failing server and a body that does not parse keep the pod, and say why.
    site.set(500, "oops");
    wait_for("healthz to name the URL and the status", LONG, || {
        let (code, body) = node.ro_get("/healthz?verbose");
        (body.contains(&url) && body.contains("answered 500")).then_some(code)
    });
    site.set(200, "kind: Pod\nmetadata: [\n");
    wait_for("healthz to name the URL and the parse error", LONG, || {
        let (_, body) = node.ro_get("/healthz?verbose");
        body.contains(&format!("{url}: document 0: invalid YAML"))
            .then_some(())
    });
    assert_eq!(
        node.running()[&format!("web-{n}/c")],
        web,
        "the pod kept running"
    );

    // New content: a multi-document body replaces the pod set.
    site.set(
        200,
        &format!(
            "{}---\n{}",
            pod_yaml("web", 1, &[("c", SLEEPER)]),
            pod_yaml("db", 1, &[("c", SLEEPER)])
        ),
    );
    wait_running(&node, &format!("db-{n}/c"));
    assert_eq!(
        node.running()[&format!("web-{n}/c")],
        web,
        "unchanged pod untouched"
    );
    wait_for("the error to clear", LONG, || {
        let (_, body) = node.ro_get("/healthz?verbose");
        (!body.contains(&url)).then_some(())
    });
    site.set(200, &pod_yaml("db", 1, &[("c", SLEEPER)]));
    wait_gone(&node, &format!("web-{n}"));
}

#[test]
fn pods_from_etcd_run_and_follow_keys_across_an_etcd_restart() {
    let mut etcd = Etcd::start();
    let mut node = Node::new("src-etcd");
    let prefix = format!("/registry/hosts/{}/", node.name);
    etcd.put(&format!("{prefix}a"), &etcd_pod("a"));
    node.start(&[&format!("--etcd-servers={}", etcd.url)]);
    let n = node.name.clone();
    wait_running(&node, &format!("a-{n}/c"));
    let entry = pod_entry(&node, &format!("a-{n}")).expect("in /pods");
    assert_eq!(
        entry["metadata"]["annotations"]["kubernetes.io/config.source"],
        "etcd"
    );
    assert!(util::thread_names(node.pid())
        .iter()
        .any(|t| t == "src-etcd"));

    // etcd restarts under a running kubelet: the watch resumes, no pod restarts.
    let a = node.running()[&format!("a-{n}/c")].clone();
    etcd.restart();
    etcd.put(&format!("{prefix}b"), &etcd_pod("b"));
    wait_running(&node, &format!("b-{n}/c"));
    assert_eq!(node.running()[&format!("a-{n}/c")], a, "a kept running");
    etcd.delete(&format!("{prefix}a"));
    wait_gone(&node, &format!("a-{n}"));
    assert_eq!(
        node.running().get(&format!("b-{n}/c")).map(Vec::len),
        Some(1),
        "b runs once"
    );
    assert!(!a.is_empty());
    node.signal(libc::SIGTERM);
    let (code, took) = node.wait_exit(Duration::from_secs(10));
    assert_eq!(code, Some(0), "{}", node.log());
    assert!(took < Duration::from_secs(2), "exit took {took:?}");
}

/// With no `--etcd-cafile`, an https etcd is verified against the host's CAs as Go's
/// clients find them (`SSL_CERT_FILE`, `SSL_CERT_DIR`), not a bundle compiled in: a node
/// whose store lacks the CA refuses the server and says why; one whose store holds it
/// runs the pods.
#[test]
fn etcd_over_tls_without_a_ca_flag_trusts_the_host_store() {
    let pki = Pki::get();
    let etcd = Etcd::start_tls(&pki);
    let empty = std::env::temp_dir().join(util::unique("rkubelet-no-cas"));
    std::fs::create_dir_all(&empty).expect("dir");
    let client = [
        format!("--etcd-servers={}", etcd.url),
        format!("--etcd-certfile={}", pki.client_cert.display()),
        format!("--etcd-keyfile={}", pki.client_key.display()),
    ];
    let args: Vec<&str> = client.iter().map(String::as_str).collect();

    // A store without the test CA: refused, with the reason on /healthz.
    let mut untrusting = Node::new("src-etcd-noca");
    untrusting.env = vec![
        (
            "SSL_CERT_FILE".into(),
            empty.join("none.pem").display().to_string(),
        ),
        ("SSL_CERT_DIR".into(), empty.display().to_string()),
    ];
    etcd.put(
        &format!("/registry/hosts/{}/a", untrusting.name),
        &etcd_pod("a"),
    );
    untrusting.start(&args);
    wait_for("healthz to name the unknown issuer", LONG, || {
        let (_, body) = untrusting.ro_get("/healthz?verbose");
        (body.contains(&etcd.url) && body.contains("UnknownIssuer")).then_some(())
    });
    assert!(
        untrusting
            .log()
            .contains("no trusted CA certificate found on this host"),
        "{}",
        untrusting.log()
    );
    drop(untrusting);

    // The CA in the host's store: the pod runs.
    let mut node = Node::new("src-etcd-hostca");
    node.env = vec![
        ("SSL_CERT_FILE".into(), pki.ca.display().to_string()),
        ("SSL_CERT_DIR".into(), empty.display().to_string()),
    ];
    etcd.put(&format!("/registry/hosts/{}/a", node.name), &etcd_pod("a"));
    node.start(&args);
    let n = node.name.clone();
    wait_running(&node, &format!("a-{n}/c"));
    let _ = std::fs::remove_dir_all(&empty);
}

#[test]
fn api_pods_run_and_a_graceful_delete_kills_them() {
    let server = TestApiServer::start(Options::default());
    let mut node = Node::new("src-api");
    let kc = server.kubeconfig(&node.dir, "kubeconfig", "token: good-token");
    server.create_pod(api_pod("api-a", &node.name));
    node.start(&[&format!("--kubeconfig={}", kc.display())]);
    wait_running(&node, "api-a/c");
    let entry = pod_entry(&node, "api-a").expect("in /pods");
    assert_eq!(
        entry["metadata"]["annotations"]["kubernetes.io/config.source"],
        "api"
    );
    assert!(util::thread_names(node.pid())
        .iter()
        .any(|t| t == "src-api"));
    assert!(node.log().contains("Watching apiserver"), "{}", node.log());

    server.create_pod(api_pod("api-b", &node.name));
    wait_running(&node, "api-b/c");
    server.mark_deleted("default", "api-a", 1);
    wait_for("api-a's containers to stop", LONG, || {
        (!node.running().contains_key("api-a/c")).then_some(())
    });
    assert!(node.running().contains_key("api-b/c"));
    server.delete_pod("default", "api-b");
    wait_gone(&node, "api-b");

    // A watch blocked on a quiet stream does not hold up shutdown.
    node.signal(libc::SIGTERM);
    let (code, took) = node.wait_exit(Duration::from_secs(10));
    assert_eq!(code, Some(0), "{}", node.log());
    assert!(took < Duration::from_secs(2), "exit took {took:?}");
    assert!(
        !node.log().contains("threads still busy at exit"),
        "{}",
        node.log()
    );
}

#[test]
fn a_rejected_token_is_reported_and_other_sources_run() {
    let server = TestApiServer::start(Options::default());
    let mut node = Node::new("src-401");
    let kc = server.kubeconfig(&node.dir, "kubeconfig", "token: revoked");
    server.create_pod(api_pod("api-x", &node.name));
    node.write_manifest("f.yaml", &pod_yaml("file", 1, &[("c", SLEEPER)]));
    node.start(&[&format!("--kubeconfig={}", kc.display())]);
    let n = node.name.clone();
    wait_running(&node, &format!("file-{n}/c"));
    let (code, body) = wait_for("healthz to report the refused token", LONG, || {
        let (code, body) = node.ro_get("/healthz?verbose");
        body.contains("401 Unauthorized").then_some((code, body))
    });
    assert_eq!(
        code, 200,
        "a refused token is a warning, not a kubelet failure: {body}"
    );
    assert!(
        body.contains("src-api") && body.contains(&server.url()),
        "{body}"
    );
    assert!(!node.running().contains_key("api-x/c"));
    // The token is accepted from now on: the API pod runs too, without a restart.
    server.set_tokens(&["revoked"]);
    wait_running(&node, "api-x/c");
    assert!(node.running().contains_key(&format!("file-{n}/c")));
}

#[test]
fn the_api_server_down_at_start_then_up() {
    let port = util::free_port();
    let mut node = Node::new("src-late");
    let url = format!("https://127.0.0.1:{port}");
    let kc = TestApiServer::kubeconfig_for(&url, &node.dir, "kubeconfig", "token: good-token");
    node.write_manifest("f.yaml", &pod_yaml("file", 1, &[("c", SLEEPER)]));
    node.start(&[&format!("--kubeconfig={}", kc.display())]);
    let n = node.name.clone();
    wait_running(&node, &format!("file-{n}/c"));
    wait_for(
        "healthz to say the API server cannot be reached",
        LONG,
        || {
            let (_, body) = node.ro_get("/healthz?verbose");
            body.contains(&format!("list pods from {url}"))
                .then_some(())
        },
    );
    let server = TestApiServer::start_on(port, Options::default());
    server.create_pod(api_pod("late", &node.name));
    wait_running(&node, "late/c");
}

#[test]
fn a_restart_with_the_api_server_unreachable_kills_no_api_pod() {
    let mut server = TestApiServer::start(Options::default());
    let mut node = Node::new("src-ready");
    let kc = server.kubeconfig(&node.dir, "kubeconfig", "token: good-token");
    server.create_pod(api_pod("keep", &node.name));
    node.write_manifest("f.yaml", &pod_yaml("file", 1, &[("c", SLEEPER)]));
    let args = [format!("--kubeconfig={}", kc.display())];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    node.start(&args);
    let keep = wait_running(&node, "keep/c");
    let n = node.name.clone();
    wait_running(&node, &format!("file-{n}/c"));

    node.kill9();
    server.stop();
    let log_before = node.log().len();
    node.start(&args);
    // Housekeeping runs every 2 s and skips while the API source has not listed:
    // wait for several skips naming it, then look: the API pod was not touched.
    wait_for(
        "housekeeping to skip several times for the api source",
        LONG,
        || {
            let log = node.log();
            (log[log_before..]
                .matches("housekeeping skipped: sources not ready: [Api]")
                .count()
                >= 3)
                .then_some(())
        },
    );
    assert_eq!(node.running().get("keep/c"), Some(&keep), "{}", node.log());
    // Back up: the pod is adopted, not restarted.
    server.restart();
    wait_for("the API pod to be added again", LONG, || {
        node.log()[log_before..]
            .contains("SyncLoop ADD source=api")
            .then_some(())
    });
    wait_for("the adopted pod Running in /pods", LONG, || {
        let e = pod_entry(&node, "keep")?;
        (e["status"]["phase"] == "Running").then_some(())
    });
    assert_eq!(node.running().get("keep/c"), Some(&keep), "{}", node.log());
}

#[test]
fn a_pod_moved_between_sources_is_reported_as_a_conflict_and_runs_once() {
    let server = TestApiServer::start(Options::default());
    let mut node = Node::new("src-move");
    let n = node.name.clone();
    let kc = server.kubeconfig(&node.dir, "kubeconfig", "token: good-token");
    node.write_manifest("mv.yaml", &pod_yaml("mv", 1, &[("c", SLEEPER)]));
    node.start(&[&format!("--kubeconfig={}", kc.display())]);
    let full = format!("mv-{n}");
    wait_running(&node, &format!("{full}/c"));
    // The same pod name appears on the API server: a conflict, reported, run once.
    server.create_pod(api_pod(&full, &n));
    let body = wait_for("the conflict on healthz", LONG, || {
        let (_, body) = node.ro_get("/healthz?verbose");
        body.contains("conflicts with the pod of the same name")
            .then_some(body)
    });
    assert!(
        body.contains(&format!("pod {full}_default from source api")),
        "{body}"
    );
    let sandboxes = |node: &Node| {
        node.containers_named("POD")
            .iter()
            .filter(|c| c.state == runtime::ContainerState::Running)
            .count()
    };
    assert_eq!(sandboxes(&node), 1);
    let entry = pod_entry(&node, &full).expect("in /pods");
    assert_eq!(
        entry["metadata"]["annotations"]["kubernetes.io/config.source"],
        "file"
    );
    // The manifest goes: the API's pod takes the name over and runs.
    std::fs::remove_file(node.manifests().join("mv.yaml")).expect("rm");
    wait_for("the pod to come from the API", LONG, || {
        let e = pod_entry(&node, &full)?;
        (e["metadata"]["annotations"]["kubernetes.io/config.source"] == "api").then_some(())
    });
    wait_for("one sandbox running, the API pod's", LONG, || {
        let ok = node.running().contains_key(&format!("{full}/c")) && sandboxes(&node) == 1;
        ok.then_some(())
    });
    wait_for("the conflict warning to clear", LONG, || {
        let (_, body) = node.ro_get("/healthz?verbose");
        (!body.contains("conflicts with")).then_some(())
    });
}
