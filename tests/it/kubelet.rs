//! The standalone kubelet end to end: a real rkubelet process per test driving the real
//! Docker engine from a manifest directory; a pod's shape, edits, removal and kill -9
//! adoption on containerd (CRI) too.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::util::{self, label, pod_yaml, wait_for, Node, Rt, LONG, SLEEPER};
use runtime::ContainerState;

/// Waits until every listed `pod/container` of the node runs (pod names without the
/// node suffix), and returns the running map.
fn wait_running(node: &Node, want: &[&str]) -> std::collections::BTreeMap<String, Vec<String>> {
    let want: Vec<String> = want
        .iter()
        .map(|w| {
            let (p, c) = w.split_once('/').expect("pod/container");
            format!("{p}-{}/{c}", node.name)
        })
        .collect();
    wait_for(&format!("{want:?} running"), LONG, || {
        let r = node.running();
        want.iter().all(|w| r.contains_key(w)).then_some(r)
    })
}

fn pod_phase(node: &Node, pod: &str) -> Option<String> {
    let full = format!("{pod}-{}", node.name);
    node.pods()["items"]
        .as_array()?
        .iter()
        .find(|p| p["metadata"]["name"] == full.as_str())
        .and_then(|p| p["status"]["phase"].as_str().map(str::to_string))
}

fn two_container_pod_runs_and_shares_one_network_namespace(rt: Rt) {
    let mut node = Node::on(rt, "kb-share");
    node.write_manifest(
        "web.yaml",
        &pod_yaml("web", 2, &[("a", SLEEPER), ("b", SLEEPER)]),
    );
    node.start(&[]);
    let running = wait_running(&node, &["web/a", "web/b", "web/POD"]);
    let pid = |key: &str| {
        let id = &running[&format!("web-{}/{key}", node.name)][0];
        node.runtime.inspect_container(id).expect("inspect").pid
    };
    let sandbox_ns = util::netns(pid("POD"));
    assert!(!sandbox_ns.is_empty());
    assert_eq!(
        util::netns(pid("a")),
        sandbox_ns,
        "container a joins the sandbox's netns"
    );
    assert_eq!(
        util::netns(pid("b")),
        sandbox_ns,
        "container b joins the sandbox's netns"
    );

    // Names and labels as the upstream Docker integration wrote them (on CRI, the
    // runtime's list is given the same shape).
    let a = node.containers_named("a").remove(0);
    assert!(
        a.name
            .starts_with(&format!("k8s_a_web-{}_default_", node.name)),
        "{}",
        a.name
    );
    assert!(a.name.ends_with("_0"));
    assert_eq!(label(&a, "io.kubernetes.pod.namespace"), "default");
    assert!(!label(&a, "annotation.io.kubernetes.container.hash").is_empty());

    // /pods shows the pod Running with both containers ready and a pod IP.
    let pods = wait_for("the pod Running in /pods", LONG, || {
        (pod_phase(&node, "web").as_deref() == Some("Running")).then(|| node.pods())
    });
    let pod = &pods["items"][0];
    assert_eq!(
        pod["metadata"]["annotations"]["kubernetes.io/config.source"],
        "file"
    );
    assert!(pod["status"]["podIP"]
        .as_str()
        .is_some_and(|ip| !ip.is_empty()));
    let statuses = pod["status"]["containerStatuses"]
        .as_array()
        .expect("statuses");
    assert_eq!(statuses.len(), 2);
    assert!(statuses.iter().all(|s| s["ready"] == true), "{statuses:?}");
    let scheme = match rt {
        Rt::Docker => "docker://",
        Rt::Containerd => "containerd://",
    };
    assert!(
        statuses.iter().all(|s| s["containerID"]
            .as_str()
            .is_some_and(|c| c.starts_with(scheme))),
        "{statuses:?}"
    );

    // healthz tells the truth and every loop is a named thread.
    let (code, body) = node.healthz_get("/healthz");
    assert_eq!((code, body.as_str()), (200, "ok"), "{}", node.log());
    let names = util::thread_names(node.pid());
    for want in [
        "sync-loop",
        "pleg",
        "src-file",
        "runtime-up",
        "pod-worker-0",
        "srv-healthz",
        "srv-readonly",
    ] {
        assert!(
            names.iter().any(|n| n == want),
            "thread {want} missing from {names:?}"
        );
    }
}

#[test]
fn a_bad_manifest_beside_good_ones_runs_the_good_ones_and_names_the_bad_file() {
    let mut node = Node::new("kb-bad");
    node.write_manifest("good.yaml", &pod_yaml("good", 1, &[("c", SLEEPER)]));
    node.write_manifest(
        "bad.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {}\nspec:\n  containers: []\n",
    );
    node.write_manifest(
        "broken.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: [unclosed\n",
    );
    node.start(&[]);
    wait_running(&node, &["good/c"]);
    let (code, body) = wait_for("healthz to name the bad files", LONG, || {
        let (code, body) = node.ro_get("/healthz?verbose");
        (body.contains("bad.yaml") && body.contains("broken.yaml")).then_some((code, body))
    });
    assert_eq!(
        code, 200,
        "a bad manifest is a warning, not a kubelet failure: {body}"
    );
    assert!(body.contains("document 0"), "{body}");

    // Fixing the bad file starts its pod; the good pod is untouched.
    let good_ids = node.running();
    node.write_manifest("bad.yaml", &pod_yaml("fixed", 1, &[("c", SLEEPER)]));
    wait_running(&node, &["fixed/c"]);
    let key = format!("good-{}/c", node.name);
    assert_eq!(node.running()[&key], good_ids[&key]);
}

#[test]
fn a_manifest_that_stops_parsing_keeps_its_last_good_pods() {
    let mut node = Node::new("kb-keep");
    node.write_manifest("p.yaml", &pod_yaml("keep", 1, &[("c", SLEEPER)]));
    node.start(&[]);
    let before = wait_running(&node, &["keep/c"]);
    node.write_manifest("p.yaml", "kind: Pod\napiVersion: v1\nmetadata: {name: [\n");
    wait_for("the parse error to be reported", LONG, || {
        node.ro_get("/healthz?verbose")
            .1
            .contains("p.yaml")
            .then_some(())
    });
    let key = format!("keep-{}/c", node.name);
    assert_eq!(
        node.running().get(&key),
        before.get(&key),
        "the pod keeps running"
    );
}

fn editing_a_manifest_replaces_only_the_changed_container(rt: Rt) {
    let mut node = Node::on(rt, "kb-edit");
    let v1 = pod_yaml("edit", 1, &[("keep", SLEEPER), ("change", SLEEPER)]);
    node.write_manifest("edit.yaml", &v1);
    node.start(&[]);
    let before = wait_running(&node, &["edit/keep", "edit/change", "edit/POD"]);
    let changed_cmd = format!("echo v2; {SLEEPER}");
    let v2 = pod_yaml("edit", 1, &[("keep", SLEEPER), ("change", &changed_cmd)]);
    node.write_manifest("edit.yaml", &v2);
    let n = node.name.clone();
    let after = wait_for("the changed container to be replaced", LONG, || {
        let r = node.running();
        let ch = r.get(&format!("edit-{n}/change"))?;
        (ch != &before[&format!("edit-{n}/change")]).then_some(r)
    });
    assert_eq!(
        after[&format!("edit-{n}/keep")],
        before[&format!("edit-{n}/keep")],
        "unchanged container kept"
    );
    assert_eq!(
        after[&format!("edit-{n}/POD")],
        before[&format!("edit-{n}/POD")],
        "sandbox kept"
    );
    let new = node
        .containers_named("change")
        .into_iter()
        .find(|c| c.state == ContainerState::Running)
        .expect("new instance");
    assert_eq!(
        label(&new, "annotation.io.kubernetes.container.restartCount"),
        "1"
    );
}

fn removing_a_manifest_removes_its_containers(rt: Rt) {
    let mut node = Node::on(rt, "kb-rm");
    node.write_manifest("stay.yaml", &pod_yaml("stay", 1, &[("c", SLEEPER)]));
    node.write_manifest("go.yaml", &pod_yaml("go", 1, &[("c", SLEEPER)]));
    node.start(&[]);
    wait_running(&node, &["stay/c", "go/c"]);
    std::fs::remove_file(node.manifests().join("go.yaml")).expect("remove manifest");
    let n = node.name.clone();
    wait_for("the removed pod's containers to be gone", LONG, || {
        let gone = node
            .containers()
            .iter()
            .all(|c| label(c, "io.kubernetes.pod.name") != format!("go-{n}"));
        gone.then_some(())
    });
    assert!(node.running().contains_key(&format!("stay-{n}/c")));
    wait_for("/pods to drop the removed pod", LONG, || {
        let names: Vec<String> = node.pods()["items"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        (!names.contains(&format!("go-{n}"))).then_some(())
    });
}

crate::on_both_runtimes!(
    two_container_pod_runs_and_shares_one_network_namespace,
    editing_a_manifest_replaces_only_the_changed_container,
    removing_a_manifest_removes_its_containers,
);

/// kill -9 and a new kubelet: the sandbox and the running container are adopted (same
/// IDs), and the crashing one's restart count goes on from where it was, in the
/// runtime's summary labels (on CRI, the labels the kubelet set beside the metadata's
/// `attempt`) and in the status on `/pods`.
fn sigkill_and_restart_adopts_every_container(rt: Rt) {
    let mut node = Node::on(rt, "kb-adopt");
    // One container keeps crashing, so there is a restart count to keep.
    node.write_manifest(
        "adopt.yaml",
        &pod_yaml(
            "adopt",
            1,
            &[("steady", SLEEPER), ("flaky", "sleep 1; exit 1")],
        ),
    );
    node.start(&[]);
    let n = node.name.clone();
    // Restarted and started: one killed between create and start would be replaced
    // under its own count (a restart that never ran is none; see ARCHITECTURE.md).
    wait_for("flaky to have restarted once", LONG, || {
        node.containers_named("flaky")
            .iter()
            .any(|c| {
                label(c, "annotation.io.kubernetes.container.restartCount") == "1"
                    && c.state != ContainerState::Created
            })
            .then_some(())
    });
    node.kill9();
    let ids_before: BTreeSet<String> = node.containers().into_iter().map(|c| c.id).collect();
    let steady_before = node.running()[&format!("adopt-{n}/steady")].clone();
    node.start(&[]);
    // Give the new kubelet time to sync (its first sync adopts; a duplicate would appear now).
    wait_for("the pod's status in /pods", LONG, || {
        pod_phase(&node, "adopt")
    });
    let settle = Instant::now() + Duration::from_secs(3);
    while Instant::now() < settle {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        node.running()[&format!("adopt-{n}/steady")],
        steady_before,
        "steady not restarted"
    );
    let sandboxes = node.containers_named("POD");
    assert_eq!(sandboxes.len(), 1, "no second sandbox: {sandboxes:?}");
    // Every container present now either existed before or is a flaky restart with a
    // restart count above the one before the kill.
    for c in node.containers() {
        if !ids_before.contains(&c.id) {
            assert_eq!(
                label(&c, "io.kubernetes.container.name"),
                "flaky",
                "unexpected new container {}",
                c.name
            );
            let rc: u32 = label(&c, "annotation.io.kubernetes.container.restartCount")
                .parse()
                .expect("rc");
            assert!(rc >= 2, "restart count continues after adoption, got {rc}");
        }
    }
    let pods = node.pods();
    let st = pods["items"][0]["status"]["containerStatuses"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == "flaky").cloned())
        .expect("flaky status");
    assert!(st["restartCount"].as_i64().is_some_and(|r| r >= 1), "{st}");
}
crate::on_both_runtimes!(sigkill_and_restart_adopts_every_container);

#[test]
fn sigterm_stops_the_kubelet_quickly_and_leaves_pods_running() {
    let mut node = Node::new("kb-term");
    node.write_manifest("t.yaml", &pod_yaml("term", 30, &[("c", SLEEPER)]));
    node.start(&[]);
    let before = wait_running(&node, &["term/c", "term/POD"]);
    node.signal(libc::SIGTERM);
    let (code, took) = node.wait_exit(Duration::from_secs(10));
    assert_eq!(code, Some(0), "{}", node.log());
    assert!(took < Duration::from_secs(2), "exit took {took:?}");
    assert_eq!(
        node.running(),
        before,
        "pods untouched by the kubelet's exit"
    );
}

#[test]
fn runtime_socket_absent_at_start_then_present() {
    let mut node = Node::new("kb-late");
    let sock_dir = node.dir.join("run");
    std::fs::create_dir_all(&sock_dir).expect("dir");
    let sock = sock_dir.join("docker.sock");
    node.endpoint = format!("unix://{}", sock.display());
    node.write_manifest("late.yaml", &pod_yaml("late", 1, &[("c", SLEEPER)]));
    node.start(&[]);
    let (code, body) = wait_for("healthz to report the runtime", LONG, || {
        let (code, body) = node.healthz_get("/healthz");
        body.contains("runtime").then_some((code, body))
    });
    assert_eq!(code, 500, "{body}");
    assert!(node.running().is_empty());
    // The socket appears (a link to the real engine's): pods start without a restart.
    std::os::unix::fs::symlink(util::DOCKER_SOCK, &sock).expect("symlink");
    wait_running(&node, &["late/c"]);
    wait_for("healthz to turn ok", LONG, || {
        (node.healthz_get("/healthz") == (200, "ok".to_string())).then_some(())
    });
    assert!(
        node.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none()),
        "still running"
    );
}

#[test]
fn a_missing_manifest_dir_is_an_empty_source_picked_up_when_it_appears() {
    let mut node = Node::new("kb-later");
    std::fs::remove_dir_all(node.manifests()).expect("remove dir");
    node.start(&[]);
    wait_for("healthz ok with no manifest dir", LONG, || {
        (node.healthz_get("/healthz").0 == 200).then_some(())
    });
    std::fs::create_dir_all(node.manifests()).expect("create dir");
    node.write_manifest("x.yaml", &pod_yaml("appeared", 1, &[("c", SLEEPER)]));
    wait_running(&node, &["appeared/c"]);
}

#[test]
fn bad_flags_and_config_exit_2_with_one_line() {
    let node = Node::new("kb-flags");
    for (args, needle) in [
        (vec!["--healthz-port=notaport"], "--healthz-port"),
        (vec!["--no-such-flag"], "--no-such-flag"),
    ] {
        let out = node
            .command(&args)
            .stderr(std::process::Stdio::piped())
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    }
    let cfg = node.dir.join("config.yaml");
    std::fs::write(
        &cfg,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nnoSuchField: 1\n",
    )
    .expect("write config");
    let out = node
        .command(&[&format!("--config={}", cfg.display())])
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("noSuchField"), "{err}");
    assert!(node.running().is_empty(), "nothing started");
}

#[test]
fn tells_systemd_ready_after_the_first_relist() {
    let mut node = Node::new("kb-notify");
    let sock_path = node.dir.join("notify.sock");
    let sock = std::os::unix::net::UnixDatagram::bind(&sock_path).expect("bind notify socket");
    sock.set_read_timeout(Some(LONG)).expect("timeout");
    node.write_manifest("n.yaml", &pod_yaml("notify", 1, &[("c", SLEEPER)]));
    let child = node
        .command(&[])
        .env("NOTIFY_SOCKET", &sock_path)
        .spawn()
        .expect("spawn");
    node.child = Some(child);
    let mut got = Vec::new();
    let mut buf = [0u8; 512];
    while !got.iter().any(|m: &String| m.contains("READY=1")) {
        let n = sock
            .recv(&mut buf)
            .expect("a notification before the deadline");
        got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    // Ready means the ports answer.
    assert_eq!(node.healthz_get("/healthz/ping"), (200, "ok".to_string()));
    // A STATUS= line follows once the pod runs.
    wait_running(&node, &["notify/c"]);
    let status = wait_for("a STATUS line with a running pod", LONG, || {
        let n = sock.recv(&mut buf).ok()?;
        let m = String::from_utf8_lossy(&buf[..n]).into_owned();
        (m.starts_with("STATUS=") && m.contains("1 running")).then_some(m)
    });
    assert_eq!(status, "STATUS=1 pods, 1 running");
    node.signal(libc::SIGTERM);
    let (code, _) = node.wait_exit(Duration::from_secs(10));
    assert_eq!(code, Some(0));
}

/// `GLIBC_TUNABLES` in the environment of the process with that PID.
fn tunables_of(pid: u32) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).expect("environ");
    env.split(|b| *b == 0)
        .filter_map(|kv| std::str::from_utf8(kv).ok())
        .find_map(|kv| kv.strip_prefix("GLIBC_TUNABLES=").map(str::to_string))
}

#[test]
fn the_binary_runs_as_started_with_the_environment_it_was_given() {
    // No re-exec: malloc is tuned with mallopt, so the process the test spawned runs
    // with the environment it was given (which exec credential plugins inherit).
    let mut node = Node::new("malloc-env");
    node.start(&[]);
    assert_eq!(tunables_of(node.pid()), None, "{}", node.log());
    let comm = std::fs::read_to_string(format!("/proc/{}/comm", node.pid())).expect("comm");
    assert_eq!(comm.trim(), "rkubelet");
    drop(node);
    let mut node = Node::new("malloc-user");
    node.env
        .push(("GLIBC_TUNABLES".into(), "glibc.malloc.arena_max=2".into()));
    node.start(&[]);
    assert_eq!(
        tunables_of(node.pid()).as_deref(),
        Some("glibc.malloc.arena_max=2")
    );
}
