//! Admission against the real Docker engine: a pod that fails upstream's validation
//! is refused from every source before anything touches the host (the volume name
//! that walked out of the pod directory), the source's other pods run; and a valid
//! but extreme number (a grace period of `i64::MAX` seconds) neither panics nor stops
//! the kubelet when the pod is deleted.

use std::sync::Arc;

use crate::util::{pod_yaml, wait_for, Node, BUSYBOX, LONG, SLEEPER};

/// A pod whose emptyDir volume name climbs out of `<root>/pods/<uid>/volumes/
/// kubernetes.io~empty-dir/` to land as `<node dir>/<target>`, mounted read-write.
fn escaping_pod(name: &str, target: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 1\n  volumes:\n  - name: '../../../../../{target}'\n    emptyDir: {{}}\n  containers:\n  - name: c\n    image: {BUSYBOX}\n    command: [\"sh\", \"-c\", \"echo owned > /v/owned; {SLEEPER}\"]\n    volumeMounts:\n    - name: '../../../../../{target}'\n      mountPath: /v\n"
    )
}

/// A one-body HTTP server for `--manifest-url`, unblocked when dropped.
struct OneBody {
    server: Arc<tiny_http::Server>,
    port: u16,
}

impl OneBody {
    fn start(body: String) -> OneBody {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("bind"));
        let port = server.server_addr().to_ip().expect("ip").port();
        let s = server.clone();
        std::thread::Builder::new()
            .name("test-url".into())
            .spawn(move || {
                for req in s.incoming_requests() {
                    let _ = req.respond(tiny_http::Response::from_string(body.clone()));
                }
            })
            .expect("spawn");
        OneBody { server, port }
    }
}

impl Drop for OneBody {
    fn drop(&mut self) {
        self.server.unblock();
    }
}

/// How many containers of the node belong to the pod named `pod`.
fn containers_of(node: &Node, pod: &str) -> usize {
    node.containers()
        .iter()
        .filter(|c| crate::util::label(c, "io.kubernetes.pod.name") == pod)
        .count()
}

#[test]
fn a_volume_name_escaping_the_pod_dir_is_refused_from_file_and_url_and_good_pods_run() {
    let mut node = Node::new("adm-esc");
    let url_site = OneBody::start(escaping_pod("badurl", "urlsecret"));
    node.write_manifest("bad.yaml", &escaping_pod("bad", "hostsecret"));
    node.write_manifest("good.yaml", &pod_yaml("good", 1, &[("c", SLEEPER)]));
    let url = format!("http://127.0.0.1:{}/pods", url_site.port);
    node.start(&[&format!("--manifest-url={url}")]);
    let n = node.name.clone();

    // The other manifest of the same directory runs.
    wait_for("the good pod to run", LONG, || {
        node.running()
            .contains_key(&format!("good-{n}/c"))
            .then_some(())
    });
    // Each refusal is logged with its origin and the field.
    let bad_file = node.manifests().join("bad.yaml").display().to_string();
    wait_for("the refusals to be logged", LONG, || {
        let log = node.log();
        let refused = |origin: &str| {
            log.lines().any(|l| {
                l.contains(origin)
                    && l.contains("invalid pod: [spec.volumes[0].name: Invalid value:")
            })
        };
        (refused(&bad_file) && refused(&url)).then_some(())
    });
    // The good pod ran from the same snapshot the bad file pod was refused from, so
    // the sync loop has had its chance to (wrongly) act on it.
    assert_eq!(
        containers_of(&node, &format!("bad-{n}")),
        0,
        "{}",
        node.log()
    );
    assert_eq!(
        containers_of(&node, &format!("badurl-{n}")),
        0,
        "{}",
        node.log()
    );
    // Nothing was created outside the root dir: the node dir holds only what the test
    // and rkubelet's own files put there (the log link directories it was given).
    let mut entries: Vec<String> = std::fs::read_dir(&node.dir)
        .expect("node dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|e| e != "pod-logs" && e != "container-logs")
        .collect();
    base::sort::sort(&mut entries);
    assert_eq!(entries, ["manifests", "rkubelet.log", "root"]);
    assert!(!node.dir.join("hostsecret").exists());
    assert!(!node.dir.join("urlsecret").exists());
    // The refused pods are never admitted, so the kubelet stays healthy.
    let (code, _) = node.healthz_get("/healthz");
    assert_eq!(code, 200);
}

#[test]
fn a_grace_period_of_i64_max_is_valid_and_deleting_its_pod_keeps_the_kubelet_alive() {
    let mut node = Node::new("adm-grace");
    node.write_manifest(
        "huge.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: huge\nspec:\n  terminationGracePeriodSeconds: 9223372036854775807\n  containers:\n  - name: c\n    image: {BUSYBOX}\n    command: [\"sh\", \"-c\", {SLEEPER:?}]\n"
        ),
    );
    node.start(&[]);
    let n = node.name.clone();
    let key = format!("huge-{n}/c");
    wait_for("the pod to run", LONG, || {
        node.running().contains_key(&key).then_some(())
    });

    std::fs::remove_file(node.manifests().join("huge.yaml")).expect("delete manifest");
    // The container exits on SIGTERM, so the stop returns at once whatever the
    // (clamped) timeout Docker was given.
    wait_for("the container to be stopped", LONG, || {
        (!node.running().contains_key(&key)).then_some(())
    });
    // Still alive and answering: no thread panicked on the deadline arithmetic.
    let child = node.child.as_mut().expect("started");
    assert!(
        child.try_wait().expect("try_wait").is_none(),
        "rkubelet exited:\n{}",
        node.log()
    );
    let (code, body) = node.healthz_get("/healthz");
    assert_eq!(code, 200, "{body}");
    assert!(!node.log().contains("panicked"), "{}", node.log());
    // And the stop went all the way: the container is removed, as for any deleted pod.
    wait_for("the container to be removed", LONG, || {
        (node.containers_named("c").is_empty()).then_some(())
    });
}
