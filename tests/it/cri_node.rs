//! rkubelet on a CRI runtime: one `--container-runtime-endpoint` flag for Docker and
//! CRI, told apart by what answers (the log names it), and a static pod on a containerd
//! of the test's own (the CRI crate's harness, `crates/cri/tests/common`): its sandbox
//! and container run in containerd, `/pods` shows it Running and Ready with an address
//! from the CNI bridge, and deleting the manifest removes both; image preload is
//! refused with one line.

use crate::containerd::{client, Containerd};
use crate::registry::pod_item;
use crate::util::{wait_for, Node, BUSYBOX, LONG, SLEEPER};
use rkubelet_cri::v1;

/// The harness's CNI bridge subnet ("10.x.y."), read from its conflist.
fn bridge_prefix(c: &Containerd) -> String {
    let conf = std::fs::read_to_string(c.dir.join("cni/10-rkcri.conflist")).expect("conflist");
    let at = conf.find("\"subnet\": \"").expect("a subnet") + "\"subnet\": \"".len();
    let subnet = &conf[at..];
    let end = subnet.find(".0/24").expect("a /24");
    format!("{}.", &subnet[..end])
}

#[test]
fn a_static_pod_runs_on_containerd_and_goes_with_its_manifest() {
    let c = Containerd::start();
    let (cri, _shutdown) = client(&c);
    let mut node = Node::new("cri-pod");
    node.endpoint = c.endpoint();
    node.write_manifest(
        "web.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  namespace: default\nspec:\n  \
             terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: {BUSYBOX}\n    \
             command: [\"sh\", \"-c\", {SLEEPER:?}]\n    readinessProbe:\n      exec:\n        \
             command: [\"sh\", \"-c\", \"test -d /proc/1\"]\n      periodSeconds: 1\n"
        ),
    );
    // Image preload is not on CRI yet: one line, and the pods start anyway.
    let preload = node.dir.join("images");
    std::fs::create_dir_all(&preload).expect("preload dir");
    node.start(&[&format!("--image-preload-dir={}", preload.display())]);
    let prefix = bridge_prefix(&c);
    let status = wait_for("the pod Running and Ready on containerd", LONG, || {
        let p = pod_item(&node, "web")?;
        let ready = p["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        (p["status"]["phase"] == "Running" && ready).then(|| p["status"].clone())
    });
    let ip = status["podIP"].as_str().unwrap_or_default();
    assert!(
        ip.starts_with(&prefix),
        "pod IP {ip} not in {prefix}0/24: {status}"
    );

    // In containerd: the sandbox ready, the container running.
    let full = format!("web-{}", node.name);
    let sandboxes = cri
        .list_pod_sandbox(&v1::ListPodSandboxRequest::default())
        .expect("list sandboxes")
        .items;
    let sandbox = sandboxes
        .iter()
        .find(|s| s.metadata.as_ref().is_some_and(|m| m.name == full))
        .unwrap_or_else(|| panic!("no sandbox {full} in {sandboxes:?}"));
    assert_eq!(sandbox.state, v1::PodSandboxState::SandboxReady as i32);
    let containers = cri
        .list_containers(&v1::ListContainersRequest::default())
        .expect("list containers")
        .containers;
    let running: Vec<_> = containers
        .iter()
        .filter(|k| k.pod_sandbox_id == sandbox.id)
        .filter(|k| k.state == v1::ContainerState::ContainerRunning as i32)
        .filter_map(|k| k.metadata.as_ref().map(|m| m.name.clone()))
        .collect();
    assert_eq!(running, ["c"], "{containers:?}");

    // The log names the runtime, and the missing event stream is one line, not a
    // line a second.
    let log = node.log();
    assert!(
        log.lines().any(|l| l.contains("container runtime at")
            && l.contains("containerd")
            && l.contains("(CRI v1)")),
        "{log}"
    );
    let preload_lines: Vec<_> = log
        .lines()
        .filter(|l| l.contains("image preload is not supported on a CRI runtime"))
        .collect();
    assert_eq!(preload_lines.len(), 1, "{log}");
    let stream_lines = log.lines().filter(|l| l.contains("event stream")).count();
    assert!(
        stream_lines <= 2,
        "{stream_lines} event stream lines:\n{log}"
    );

    // The manifest goes: so do the sandbox and the container.
    std::fs::remove_file(node.manifests().join("web.yaml")).expect("remove manifest");
    wait_for(
        "the sandbox and container gone from containerd",
        LONG,
        || {
            let s = cri
                .list_pod_sandbox(&v1::ListPodSandboxRequest::default())
                .ok()?
                .items;
            let k = cri
                .list_containers(&v1::ListContainersRequest::default())
                .ok()?
                .containers;
            (s.is_empty() && k.is_empty()).then_some(())
        },
    );
}

#[test]
fn the_endpoint_kind_is_told_by_what_answers() {
    // Docker's socket: Docker.
    let mut docker = Node::new("cri-kind-d");
    docker.start(&[]);
    wait_for("the log to name Docker", LONG, || {
        docker
            .log()
            .lines()
            .any(|l| {
                l.contains("container runtime at")
                    && l.contains("Docker")
                    && l.contains("Engine API")
            })
            .then_some(())
    });

    // Nothing listening: the kind from the socket's name, logged once, and the
    // kubelet up, reporting the runtime down.
    let mut silent = Node::new("cri-kind-n");
    let sock = silent.dir.join("containerd.sock");
    silent.endpoint = format!("unix://{}", sock.display());
    silent.start(&[]);
    let (code, body) = wait_for("healthz to report the runtime", LONG, || {
        let (code, body) = silent.healthz_get("/healthz");
        body.contains("runtime").then_some((code, body))
    });
    assert_eq!(code, 500, "{body}");
    let log = silent.log();
    let guesses: Vec<_> = log
        .lines()
        .filter(|l| l.contains("nothing answers on"))
        .collect();
    assert_eq!(guesses.len(), 1, "{log}");
    assert!(
        guesses[0].contains("a CRI runtime from the socket's name"),
        "{log}"
    );
    assert!(silent.alive(), "{log}");
}
