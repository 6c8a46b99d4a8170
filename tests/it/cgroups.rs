//! The container manager and admission against the real Docker engine and the real
//! cgroupfs (v1 here): Guaranteed, Burstable and BestEffort pods in their QoS cgroups
//! with their limits (read back from cgroupfs and `docker inspect`), node allocatable
//! on `kubepods`, the burstable shares following its pods, pod cgroups removed with
//! their pods; and API pods that do not fit (memory, max pods, a host port) rejected
//! `Failed` with upstream's reasons, never starting a container. Every node builds
//! under its own `--cgroup-root` and removes it.

use std::path::PathBuf;
use std::time::Duration;

use runtime::Runtime;
use serde_json::{json, Value};

use crate::apiserver::{Options, TestApiServer};
use crate::util::{free_port, label, wait_for, Node, BUSYBOX, LONG, SLEEPER};

const V1: &str = "/sys/fs/cgroup";

/// A cgroupfs file of a v1 controller, trimmed ("" if missing).
fn cg(controller: &str, cgroup: &str, file: &str) -> String {
    let p = PathBuf::from(V1)
        .join(controller)
        .join(cgroup.trim_start_matches('/'))
        .join(file);
    std::fs::read_to_string(p)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn cgroup_exists(controller: &str, cgroup: &str) -> bool {
    PathBuf::from(V1)
        .join(controller)
        .join(cgroup.trim_start_matches('/'))
        .is_dir()
}

/// Skips (true) where the host has no writable cgroup v1 memory hierarchy.
fn no_cgroup_v1() -> bool {
    let ok = PathBuf::from(V1)
        .join("memory/memory.limit_in_bytes")
        .exists()
        && !PathBuf::from(V1).join("cgroup.controllers").exists();
    if !ok {
        eprintln!("skipped: no cgroup v1 memory hierarchy at {V1}");
    }
    !ok
}

fn static_pod(name: &str, resources: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: {BUSYBOX}\n    command: [\"sh\", \"-c\", \"{SLEEPER}\"]\n    resources: {resources}\n"
    )
}

/// The pod's UID and the app container's ID once it runs.
fn running_pod(node: &Node, pod: &str) -> (String, String) {
    wait_for(&format!("{pod} running"), LONG, || {
        node.containers_named("c")
            .into_iter()
            .find(|c| {
                label(c, "io.kubernetes.pod.name").starts_with(pod)
                    && c.state == runtime::ContainerState::Running
            })
            .map(|c| (label(&c, "io.kubernetes.pod.uid").to_string(), c.id))
    })
}

fn meminfo_total() -> u64 {
    let t = std::fs::read_to_string("/proc/meminfo").expect("meminfo");
    t.lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("MemTotal")
        * 1024
}

#[test]
fn qos_pods_land_in_their_cgroups_with_their_limits_and_leave_with_them() {
    if no_cgroup_v1() {
        return;
    }
    let mut node = Node::new("cg-qos");
    node.write_manifest(
        "g.yaml",
        &static_pod(
            "guaranteed",
            "{limits: {cpu: 200m, memory: 64Mi}, requests: {cpu: 200m, memory: 64Mi}}",
        ),
    );
    node.write_manifest(
        "b.yaml",
        &static_pod(
            "burstable",
            "{requests: {cpu: 100m, memory: 16Mi}, limits: {memory: 32Mi}}",
        ),
    );
    node.write_manifest("e.yaml", &static_pod("besteffort", "{}"));
    node.start(&[
        "--kube-reserved=memory=100Mi",
        "--system-reserved=cpu=100m",
        "--enforce-node-allocatable=pods",
    ]);
    let root = node.cgroup_root();
    let kubepods = format!("{root}/kubepods");
    let (g_uid, g_id) = running_pod(&node, "guaranteed");
    let (b_uid, b_id) = running_pod(&node, "burstable");
    let (e_uid, e_id) = running_pod(&node, "besteffort");

    // Node allocatable on kubepods: capacity less reserved (page-rounded by the kernel).
    let mem = meminfo_total() - (100 << 20);
    assert_eq!(
        cg("memory", &kubepods, "memory.limit_in_bytes"),
        (mem / 4096 * 4096).to_string()
    );
    // SAFETY: sysconf has no memory effects.
    let cpus =
        u64::try_from(unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }).expect("sysconf");
    assert_eq!(
        cg("cpu", &kubepods, "cpu.shares"),
        ((cpus * 1000 - 100) * 1024 / 1000).to_string()
    );
    assert!(
        node.log().contains("NodeAllocatableEnforced"),
        "the node event is recorded"
    );

    // Guaranteed: directly under kubepods, every limit.
    let g = format!("{kubepods}/pod{g_uid}");
    assert_eq!(
        cg("memory", &g, "memory.limit_in_bytes"),
        (64u64 << 20).to_string()
    );
    assert_eq!(cg("cpu", &g, "cpu.shares"), "204");
    assert_eq!(cg("cpu", &g, "cpu.cfs_quota_us"), "20000");
    assert_eq!(cg("cpu", &g, "cpu.cfs_period_us"), "100000");
    // Burstable: the memory limit every container set, no cpu quota.
    let b = format!("{kubepods}/burstable/pod{b_uid}");
    assert_eq!(
        cg("memory", &b, "memory.limit_in_bytes"),
        (32u64 << 20).to_string()
    );
    assert_eq!(cg("cpu", &b, "cpu.shares"), "102");
    assert_eq!(cg("cpu", &b, "cpu.cfs_quota_us"), "-1");
    // BestEffort: the minimum shares.
    let e = format!("{kubepods}/besteffort/pod{e_uid}");
    assert_eq!(cg("cpu", &e, "cpu.shares"), "2");
    // The QoS cgroups: burstable's shares are its pods' requests.
    assert_eq!(
        cg("cpu", &format!("{kubepods}/burstable"), "cpu.shares"),
        "102"
    );
    assert_eq!(
        cg("cpu", &format!("{kubepods}/besteffort"), "cpu.shares"),
        "2"
    );

    // Docker was given the pod's cgroup for the app container and the sandbox.
    for (id, parent) in [(&g_id, &g), (&b_id, &b), (&e_id, &e)] {
        let d = node.docker.inspect_settings(id).expect("inspect");
        assert_eq!(&d.cgroup_parent, parent);
        let uid = label_of(&node, id, "io.kubernetes.pod.uid");
        let sandbox = node
            .containers()
            .into_iter()
            .find(|c| {
                label(c, "io.kubernetes.pod.uid") == uid
                    && label(c, "io.kubernetes.docker.type") == "podsandbox"
            })
            .expect("sandbox");
        let s = node.docker.inspect_settings(&sandbox.id).expect("inspect");
        assert_eq!(&s.cgroup_parent, parent);
        // The container's process is in it.
        let procs = cg("memory", &format!("{parent}/{id}"), "cgroup.procs");
        assert!(!procs.is_empty(), "a process in {parent}/{id}");
    }

    // The burstable pod goes: its cgroup goes after its containers, and the burstable
    // shares drop back.
    std::fs::remove_file(node.manifests().join("b.yaml")).expect("remove manifest");
    wait_for("the burstable pod's cgroup removed", LONG, || {
        (!cgroup_exists("memory", &b) && !cgroup_exists("cpu", &b)).then_some(())
    });
    assert!(
        node.docker.inspect_container(&b_id).is_err(),
        "its container is gone first"
    );
    assert_eq!(
        cg("cpu", &format!("{kubepods}/burstable"), "cpu.shares"),
        "2"
    );
    assert!(cgroup_exists("memory", &g), "the others stay");
    drop(node);
    assert!(
        !cgroup_exists("memory", &root) && !cgroup_exists("cpu", &root),
        "the test's cgroup root is removed"
    );
}

fn label_of(node: &Node, id: &str, key: &str) -> String {
    node.containers()
        .into_iter()
        .find(|c| c.id == id)
        .map(|c| label(&c, key).to_string())
        .unwrap_or_default()
}

const KUBELET_TOKEN: &str = "good-token";
const KUBECTL_TOKEN: &str = "kubectl-token";

/// An API pod bound to the node.
fn api_pod(api: &TestApiServer, node: &Node, name: &str, resources: Value, host_port: u16) {
    let mut c = json!({
        "name": "c",
        "image": BUSYBOX,
        "command": ["sh", "-c", SLEEPER],
        "resources": resources,
    });
    if host_port != 0 {
        c["ports"] = json!([{"containerPort": 80, "hostPort": host_port}]);
    }
    api.create(
        "pods",
        "default",
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "nodeName": node.name,
                "terminationGracePeriodSeconds": 1,
                "containers": [c],
            },
        }),
    )
    .expect("create pod");
}

/// The pod's status once the kubelet wrote a phase.
fn phase(api: &TestApiServer, name: &str, want: &str) -> Value {
    wait_for(&format!("{name} {want} in the API"), LONG, || {
        let p = api.get("pods", "default", name)?;
        (p["status"]["phase"] == want).then(|| p["status"].clone())
    })
}

#[test]
fn api_pods_that_do_not_fit_are_rejected_and_never_start() {
    let api = TestApiServer::start(Options {
        tokens: vec![KUBELET_TOKEN.into(), KUBECTL_TOKEN.into()],
        ..Options::default()
    });
    let mut node = Node::new("cg-admit");
    api.set_token_user(
        KUBELET_TOKEN,
        &format!("system:node:{}", node.name),
        &["system:nodes"],
    );
    api.set_token_user(KUBECTL_TOKEN, "admin", &["system:masters"]);
    let kc = api.kubeconfig(&node.dir, "kubelet.kubeconfig", "token: good-token");
    let user_kc = api.kubeconfig(&node.dir, "user.kubeconfig", "token: kubectl-token");
    node.start(&[&format!("--kubeconfig={}", kc.display()), "--max-pods=2"]);

    // More memory than the node has.
    api_pod(
        &api,
        &node,
        "big",
        json!({"requests": {"memory": "100000Gi"}}),
        0,
    );
    let st = phase(&api, "big", "Failed");
    assert_eq!(st["reason"], "OutOfmemory", "{st}");
    let msg = st["message"].as_str().unwrap_or_default().to_string();
    assert!(
        msg.starts_with(&format!(
            "Pod was rejected: Node didn't have enough resource: memory, requested: {}, used: 0, capacity: ",
            100_000u128 << 30
        )),
        "{msg}"
    );

    // What a user sees: kubectl's STATUS column is the reason.
    let out = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&user_kc)
        .arg("--cache-dir")
        .arg(node.dir.join("kubectl-cache"))
        .args(["get", "pod", "big", "--no-headers"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("kubectl");
    let table = String::from_utf8_lossy(&out.stdout).to_string();
    let cells: Vec<&str> = table.split_whitespace().collect();
    assert_eq!(
        cells.get(1..3),
        Some(&["0/1", "OutOfmemory"][..]),
        "{table} {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A host port taken by an admitted pod.
    let port = free_port();
    api_pod(&api, &node, "first", json!({}), port);
    phase(&api, "first", "Running");
    api_pod(&api, &node, "second", json!({}), port);
    let st = phase(&api, "second", "Failed");
    assert_eq!(st["reason"], "NodePorts", "{st}");
    assert_eq!(
        st["message"],
        "Pod was rejected: Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
    );

    // --max-pods=2: the rejected ones do not count; the third admitted one does not fit.
    api_pod(&api, &node, "third", json!({}), 0);
    phase(&api, "third", "Running");
    api_pod(&api, &node, "fourth", json!({}), 0);
    let st = phase(&api, "fourth", "Failed");
    assert_eq!(st["reason"], "OutOfpods", "{st}");
    assert_eq!(
        st["message"],
        "Pod was rejected: Node didn't have enough resource: pods, requested: 1, used: 2, capacity: 2"
    );

    // Rejected pods never started a container, and each has its Warning event.
    std::thread::sleep(Duration::from_secs(2));
    for rejected in ["big", "second", "fourth"] {
        assert!(
            !node
                .containers()
                .iter()
                .any(|c| label(c, "io.kubernetes.pod.name") == rejected),
            "{rejected} never started a container"
        );
    }
    let log = node.log();
    for reason in ["OutOfmemory", "NodePorts", "OutOfpods"] {
        assert!(
            log.contains(&format!("event: Warning {reason} pod/default/")),
            "a {reason} event in the log"
        );
    }
}
