//! The node's own objects in the API server (issue 11, items 1–3), against the test
//! API server stand-in, real Docker and real kubectl: registration (labels, taints,
//! addresses, nodeInfo, capacity; an existing Node reconciled), the Ready status, the
//! lease (renewed, held, owned by the Node; a 409 handled), the API server away for
//! 40 s (no container touched, the lease renewed promptly on its return), the API
//! server restored with new resourceVersions, and the requests a steady node makes.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};

use crate::apiserver::{Options, TestApiServer};
use crate::util::{pod_yaml, wait_for, Node, LONG};

use runtime::Runtime;

/// Starts a node against `server` with these extra flags.
fn start(server: &TestApiServer, node: &mut Node, extra: &[&str]) {
    let kc = server.kubeconfig(&node.dir, "kubeconfig", "token: good-token");
    let mut args = vec![format!("--kubeconfig={}", kc.display())];
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    node.start(&args);
}

/// The Node once it reports Ready=True.
fn wait_ready(server: &TestApiServer, node: &Node) -> Value {
    wait_for("the Node to be Ready", LONG, || {
        let n = server.get("nodes", "", &node.name)?;
        (condition(&n, "Ready")?["status"] == "True").then_some(n)
    })
}

fn condition<'a>(node: &'a Value, kind: &str) -> Option<&'a Value> {
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

fn lease(server: &TestApiServer, node: &Node) -> Option<Value> {
    server.get("leases", "kube-node-lease", &node.name)
}

fn renew_time(lease: &Value) -> String {
    lease["spec"]["renewTime"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// kubectl against the stand-in.
fn kubectl(node: &Node, server: &TestApiServer, args: &[&str]) -> String {
    let kc = server.kubeconfig(&node.dir, "kubectl-config", "token: good-token");
    node.kubectl(&kc, args)
}

#[test]
fn the_node_registers_with_its_labels_taints_and_status() {
    let server = TestApiServer::start(Options::default());
    let mut node = Node::new("node-reg");
    start(
        &server,
        &mut node,
        &[
            "--node-labels=example.com/role=edge,node.kubernetes.io/pool=a",
            "--register-with-taints=dedicated=edge:NoSchedule",
            "--node-ip=192.0.2.10",
            "--max-pods=42",
            "--kube-reserved=cpu=100m",
            "--system-reserved=memory=1Mi",
        ],
    );
    let n = wait_ready(&server, &node);
    let labels = &n["metadata"]["labels"];
    assert_eq!(labels["kubernetes.io/hostname"], node.name.as_str());
    assert_eq!(labels["kubernetes.io/os"], "linux");
    assert_eq!(labels["beta.kubernetes.io/os"], "linux");
    assert!(labels["kubernetes.io/arch"].is_string());
    assert_eq!(labels["example.com/role"], "edge");
    assert_eq!(labels["node.kubernetes.io/pool"], "a");
    assert_eq!(
        n["metadata"]["annotations"]["volumes.kubernetes.io/controller-managed-attach-detach"],
        "true"
    );
    assert_eq!(
        n["spec"]["taints"],
        json!([{"key": "dedicated", "value": "edge", "effect": "NoSchedule"}])
    );
    let st = &n["status"];
    assert_eq!(
        st["addresses"],
        json!([{"type": "InternalIP", "address": "192.0.2.10"},
               {"type": "Hostname", "address": node.name}])
    );
    assert_eq!(st["daemonEndpoints"]["kubeletEndpoint"]["Port"], 0);
    let version = node
        .docker
        .version()
        .expect("docker version")
        .runtime_version;
    let info = &st["nodeInfo"];
    assert_eq!(
        info["containerRuntimeVersion"],
        format!("docker://{version}")
    );
    assert_eq!(info["operatingSystem"], "linux");
    assert!(info["kubeletVersion"]
        .as_str()
        .expect("present")
        .starts_with("v1.32.0-rkubelet."));
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").expect("present");
    assert_eq!(info["bootID"], boot_id.trim());
    assert!(!info["kernelVersion"].as_str().expect("present").is_empty());
    assert!(!info["osImage"].as_str().expect("present").is_empty());
    // SAFETY: sysconf has no memory effects.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    assert_eq!(st["capacity"]["cpu"], cpus.to_string());
    assert_eq!(st["capacity"]["pods"], "42");
    assert_eq!(st["allocatable"]["cpu"], format!("{}m", cpus * 1000 - 100));
    assert!(st["capacity"]["memory"]
        .as_str()
        .expect("present")
        .ends_with("Ki"));
    assert!(st["allocatable"]["ephemeral-storage"].is_string());
    // The busybox image is listed under some of its names: upstream keeps 5 names per
    // image (digests first), and the registry tests give the same image more tags.
    let out = Command::new("docker")
        .args([
            "image",
            "inspect",
            "--format",
            "{{json .RepoDigests}}{{json .RepoTags}}",
            crate::util::BUSYBOX,
        ])
        .output()
        .expect("docker image inspect");
    let busybox_names = String::from_utf8_lossy(&out.stdout).to_string();
    let images = st["images"].as_array().expect("images");
    assert!(
        images
            .iter()
            .any(|i| i["names"].as_array().is_some_and(|n| n.iter().any(|n| n
                .as_str()
                .is_some_and(|n| busybox_names.contains(&format!("\"{n}\"")))))),
        "busybox ({busybox_names}) among {images:?}"
    );
    let kinds: Vec<&str> = st["conditions"]
        .as_array()
        .expect("present")
        .iter()
        .map(|c| c["type"].as_str().expect("present"))
        .collect();
    assert_eq!(
        kinds,
        ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
    );
    let ready = condition(&n, "Ready").expect("present");
    assert_eq!(ready["reason"], "KubeletReady");
    assert_eq!(ready["message"], "kubelet is posting ready status");
    let mem = condition(&n, "MemoryPressure").expect("present");
    assert_eq!(mem["reason"], "KubeletHasSufficientMemory");
    assert_eq!(mem["status"], "False");

    // kubectl, a real client, reads the node.
    let wide = kubectl(&node, &server, &["get", "nodes", "-o", "wide"]);
    let header = wide.lines().next().expect("a header");
    for col in [
        "STATUS",
        "INTERNAL-IP",
        "OS-IMAGE",
        "KERNEL-VERSION",
        "CONTAINER-RUNTIME",
    ] {
        assert!(header.contains(col), "{wide}");
    }
    let row = wide
        .lines()
        .find(|l| l.starts_with(&format!("{} ", node.name)))
        .unwrap_or_else(|| panic!("no row for the node: {wide}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[1], "Ready", "{wide}");
    for want in [
        "192.0.2.10",
        info["osImage"].as_str().expect("os image"),
        info["kernelVersion"].as_str().expect("kernel"),
        &format!("docker://{version}"),
        info["kubeletVersion"].as_str().expect("version"),
    ] {
        assert!(row.contains(want), "{want}: {wide}");
    }
    let cols = kubectl(
        &node,
        &server,
        &[
            "get",
            "node",
            &node.name,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status} \
             {.status.addresses[?(@.type==\"InternalIP\")].address} \
             {.status.nodeInfo.containerRuntimeVersion}",
        ],
    );
    assert_eq!(cols, format!("True 192.0.2.10 docker://{version}"));

    let log = node.log();
    for line in [
        format!("event: Normal Starting node/{}: Starting kubelet.", node.name),
        format!(
            "event: Normal NodeHasSufficientMemory node/{0}: Node {0} status is now: NodeHasSufficientMemory",
            node.name
        ),
        format!("Successfully registered node {}", node.name),
    ] {
        assert!(log.contains(&line), "{line}\n{log}");
    }
}

#[test]
fn the_lease_is_renewed_and_a_steady_node_makes_few_requests() {
    let server = TestApiServer::start(Options::default());
    let mut node = Node::new("node-lease");
    node.write_manifest(
        "static.yaml",
        &pod_yaml("steady", 1, &[("c", crate::util::SLEEPER)]),
    );
    start(&server, &mut node, &[]);
    let n = wait_ready(&server, &node);
    let uid = n["metadata"]["uid"].as_str().expect("present").to_string();
    let first = wait_for("the lease with its owner", LONG, || {
        lease(&server, &node).filter(|l| !l["metadata"]["ownerReferences"].is_null())
    });
    let spec = &first["spec"];
    assert_eq!(spec["holderIdentity"], node.name.as_str());
    assert_eq!(spec["leaseDurationSeconds"], 40);
    // MicroTime: six fraction digits.
    let t = renew_time(&first);
    assert_eq!(t.len(), "2026-01-01T00:00:00.000000Z".len(), "{t}");
    assert_eq!(
        first["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Node", "name": node.name, "uid": uid}])
    );
    wait_for("the lease to be renewed", LONG, || {
        let l = lease(&server, &node)?;
        (renew_time(&l) > t).then_some(())
    });

    // Steady: count a minute of requests, pods running.
    wait_for("the static pod to run", LONG, || {
        node.running()
            .contains_key(&format!("steady-{}/c", node.name))
            .then_some(())
    });
    let since = Instant::now();
    std::thread::sleep(Duration::from_secs(60));
    let counts = server.call_counts(since);
    let heartbeat: BTreeMap<_, _> = counts
        .iter()
        .filter(|((_, kind), _)| kind.starts_with("nodes") || kind.starts_with("leases"))
        .collect();
    let total: usize = heartbeat.values().copied().sum();
    eprintln!(
        "node and lease requests in 60 s of a steady node: {total} {heartbeat:?}; all: {counts:?}"
    );
    let puts = counts
        .get(&("PUT".to_string(), "leases".to_string()))
        .copied()
        .unwrap_or(0);
    // Every 10 s (jitter 4 %): at most 7 in a minute; a loaded machine may do fewer.
    assert!((1..=7).contains(&puts), "{counts:?}");
    // At most one status report (every 5 minutes) in a minute: a GET and a PATCH. A
    // report is also due when the status changes: the engine is shared with the other
    // tests, so an image pulled or removed beside this one changes `status.images`; such
    // a report (a GET and a PATCH that carries the images) is allowed on top.
    let image_reports = server
        .calls()
        .iter()
        .filter(|c| c.at >= since && c.verb == "PATCH" && c.kind.starts_with("nodes"))
        .filter(|c| {
            c.patch
                .as_ref()
                .is_some_and(|p| !p["status"]["images"].is_null())
        })
        .count();
    assert!(
        total <= puts + 2 + 2 * image_reports,
        "{image_reports} reports for image changes; {counts:?}"
    );
}

#[test]
fn an_existing_node_is_reconciled_and_its_status_corrected() {
    let server = TestApiServer::start(Options::default());
    let mut node = Node::new("node-exist");
    server
        .create(
            "nodes",
            "",
            json!({
                "metadata": {"name": node.name, "labels": {
                    "kubernetes.io/hostname": "someone-else", "team": "a"}},
                "status": {"conditions": [{"type": "Ready", "status": "Unknown",
                    "reason": "NodeStatusUnknown", "message": "Kubelet stopped posting node status."}]}
            }),
        )
        .expect("create node");
    start(&server, &mut node, &["--node-labels=example.com/new=1"]);
    let n = wait_ready(&server, &node);
    let labels = &n["metadata"]["labels"];
    assert_eq!(labels["kubernetes.io/hostname"], node.name.as_str());
    assert_eq!(labels["kubernetes.io/os"], "linux");
    assert_eq!(labels["team"], "a");
    // As upstream: --node-labels are for registration only.
    assert!(labels["example.com/new"].is_null());
    assert_eq!(
        n["metadata"]["annotations"]["volumes.kubernetes.io/controller-managed-attach-detach"],
        "true"
    );
    assert!(node
        .log()
        .contains(&format!("Node {} was previously registered", node.name)));
}

#[test]
fn a_lease_written_by_someone_else_is_reread_and_renewed() {
    let server = TestApiServer::start(Options::default());
    let mut node = Node::new("node-409");
    start(&server, &mut node, &[]);
    let l = wait_for("the lease", LONG, || lease(&server, &node));
    // Another writer changes it: the kubelet's cached resourceVersion is stale.
    let mut other = l.clone();
    other["spec"]["holderIdentity"] = json!("intruder");
    let written = server
        .update("leases", "kube-node-lease", other, false)
        .expect("update lease");
    let rv = written["metadata"]["resourceVersion"]
        .as_str()
        .expect("present")
        .to_string();
    let since = Instant::now();
    let lease_calls = || -> Vec<(String, u16)> {
        server
            .calls()
            .into_iter()
            .filter(|c| c.at >= since && c.kind == "leases")
            .map(|c| (c.verb, c.code))
            .collect()
    };
    // The stand-in records a call after it has answered it, so the renewed lease can
    // be seen in its store a moment before the PUT that wrote it is in its calls.
    let calls = wait_for("the kubelet to hold its lease again", LONG, || {
        let l = lease(&server, &node)?;
        let calls = lease_calls();
        (l["spec"]["holderIdentity"] == node.name.as_str()
            && l["metadata"]["resourceVersion"] != rv.as_str()
            && calls.contains(&("PUT".to_string(), 200)))
        .then_some(calls)
    });
    let conflict = calls
        .iter()
        .position(|c| *c == ("PUT".to_string(), 409))
        .unwrap_or_else(|| panic!("a 409: {calls:?}"));
    assert_eq!(calls[conflict + 1], ("GET".to_string(), 200), "{calls:?}");
    assert_eq!(calls[conflict + 2], ("PUT".to_string(), 200), "{calls:?}");
}

/// Every container of the node: ID → start time.
fn started(node: &Node) -> BTreeMap<String, Option<SystemTime>> {
    node.containers()
        .into_iter()
        .map(|c| {
            let d = node.docker.inspect_container(&c.id).expect("inspect");
            (c.id, d.started_at)
        })
        .collect()
}

#[test]
fn the_api_server_away_for_40s_touches_no_container_and_the_lease_comes_back_at_once() {
    let server = TestApiServer::start(Options::default());
    let mut node = Node::new("node-away");
    node.write_manifest(
        "static.yaml",
        &pod_yaml("st", 1, &[("c", crate::util::SLEEPER)]),
    );
    server.create_pod(json!({
        "metadata": {"name": "api-pod"},
        "spec": {"nodeName": node.name, "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "c", "image": crate::util::BUSYBOX,
                                 "command": ["sh", "-c", crate::util::SLEEPER]}]}
    }));
    start(&server, &mut node, &[]);
    wait_ready(&server, &node);
    wait_for("both pods to run", LONG, || {
        let r = node.running();
        (r.contains_key(&format!("st-{}/c", node.name)) && r.contains_key("api-pod/c"))
            .then_some(())
    });
    wait_for("the lease", LONG, || lease(&server, &node));
    let before = started(&node);

    server.down_for(Duration::from_secs(40));
    wait_for(
        "the API server to come back",
        Duration::from_secs(120),
        || (!server.is_down()).then_some(()),
    );
    let back = Instant::now();
    let renewed = wait_for("a lease renewal after the return", LONG, || {
        server
            .calls()
            .into_iter()
            .find(|c| c.at >= back && c.kind == "leases" && c.verb == "PUT" && c.code == 200)
            .map(|c| c.at)
    });
    let after = renewed.saturating_duration_since(back);
    eprintln!("lease renewed {after:?} after the API server's return");
    // The backoff while away is capped at 7 s, under one renew period (10 s); leave
    // room for a loaded machine.
    assert!(after < Duration::from_secs(20), "{after:?}");
    assert_eq!(started(&node), before, "no container restarted or replaced");
    let n = wait_ready(&server, &node);
    assert!(condition(&n, "Ready").is_some());
    assert!(node.alive());
}

#[test]
fn a_restored_api_server_with_new_versions_converges() {
    let server = TestApiServer::start(Options::default());
    let mut node = Node::new("node-rv");
    start(&server, &mut node, &[]);
    wait_ready(&server, &node);
    let l = wait_for("the lease", LONG, || lease(&server, &node));
    server.restart_with_new_versions();
    let renumbered = lease(&server, &node).expect("lease kept");
    let rv = renumbered["metadata"]["resourceVersion"]
        .as_str()
        .expect("present")
        .to_string();
    assert_ne!(
        rv,
        l["metadata"]["resourceVersion"].as_str().expect("present")
    );
    wait_for("the lease renewed over the new version", LONG, || {
        let now = lease(&server, &node)?;
        (now["metadata"]["resourceVersion"] != rv.as_str()
            && renew_time(&now) > renew_time(&renumbered))
        .then_some(())
    });
    // A status someone else wrote meanwhile (the node controller) is corrected by the
    // next write, which the lease's conflict sends through a fresh read.
    server
        .patch(
            "nodes",
            "",
            &node.name,
            true,
            crate::apiserver::PatchType::StrategicMerge,
            &json!({"status": {"conditions": [{"type": "Ready", "status": "Unknown",
                "reason": "NodeStatusUnknown"}]}}),
        )
        .expect("patch node status");
    server.restart_with_new_versions();
    wait_ready(&server, &node);
}

#[test]
fn bad_node_labels_and_taints_are_refused_at_start_naming_the_flag() {
    for (flag, want) in [
        (
            "--node-labels=node-role.kubernetes.io/master=",
            "--node-labels: unknown 'kubernetes.io' or 'k8s.io' labels",
        ),
        ("--node-labels=novalue", "--node-labels"),
        (
            "--register-with-taints=a=b:Sometimes",
            "--register-with-taints: invalid taint effect: Sometimes",
        ),
        ("--register-with-taints=a=b", "invalid taint spec: a=b"),
        ("--kube-reserved=gpu=1", "cannot reserve \"gpu\" resource"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_rkubelet"))
            .args(["--hostname-override=bad-flags", flag])
            .output()
            .expect("run rkubelet");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{flag}: {stderr}");
        assert!(stderr.contains(want), "{flag}: {stderr}");
    }
}

/// The node's name resolving, through /etc/hosts, to an address on an interface of
/// the test's own (a bridge with no ports: this kernel has no dummy links): how the node's address is found without `--node-ip` (the name's
/// address on one of the host's interfaces), and how a DHCP renewal's new address is
/// played. Both go when dropped.
struct NodeAddress {
    iface: String,
    name: String,
}

/// What marks the test's line in /etc/hosts.
const HOSTS_MARK: &str = "# rkubelet-it node address";

impl NodeAddress {
    /// `addrs` on a new interface; `name` resolving to the first.
    fn new(name: &str, addrs: &[&str]) -> NodeAddress {
        let iface = format!("rkip{}", std::process::id() % 100_000);
        let ip = |args: &[&str]| {
            let out = Command::new("ip").args(args).output().expect("ip");
            assert!(out.status.success(), "ip {args:?}: {out:?}");
        };
        let _ = Command::new("ip").args(["link", "del", &iface]).output();
        ip(&["link", "add", &iface, "type", "bridge"]);
        ip(&["link", "set", &iface, "up"]);
        for a in addrs {
            ip(&["addr", "add", &format!("{a}/32"), "dev", &iface]);
        }
        let me = NodeAddress {
            iface,
            name: name.to_string(),
        };
        me.resolve_to(addrs[0]);
        me
    }

    /// /etc/hosts, written in place (it may be a bind mount), with the node's line
    /// naming `addr`, or without it.
    fn write_hosts(&self, addr: Option<&str>) {
        let hosts = std::fs::read_to_string("/etc/hosts").expect("read /etc/hosts");
        let mut kept: Vec<String> = hosts
            .lines()
            .filter(|l| !(l.ends_with(HOSTS_MARK) && l.contains(&self.name)))
            .map(str::to_string)
            .collect();
        if let Some(a) = addr {
            kept.push(format!("{a} {} {HOSTS_MARK}", self.name));
        }
        std::fs::write("/etc/hosts", kept.join("\n") + "\n").expect("write /etc/hosts");
    }

    fn resolve_to(&self, addr: &str) {
        self.write_hosts(Some(addr));
    }
}

impl Drop for NodeAddress {
    fn drop(&mut self) {
        self.write_hosts(None);
        let _ = Command::new("ip")
            .args(["link", "del", &self.iface])
            .output();
    }
}

fn internal_ip(n: &Value) -> Option<String> {
    n["status"]["addresses"]
        .as_array()?
        .iter()
        .find(|a| a["type"] == "InternalIP")
        .and_then(|a| a["address"].as_str())
        .map(str::to_string)
}

#[test]
fn a_changed_node_address_reaches_the_node_and_the_pods_host_ip() {
    let server = TestApiServer::start(Options::default());
    let mut node = Node::new("node-ip");
    let (first, second) = ("198.51.100.21", "198.51.100.22");
    let address = NodeAddress::new(&node.name, &[first, second]);
    server.create_pod(json!({
        "metadata": {"name": "ip-pod"},
        "spec": {"nodeName": node.name, "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "c", "image": crate::util::BUSYBOX,
                                 "command": ["sh", "-c", crate::util::SLEEPER]}]}
    }));
    // No --node-ip: the address is detected, and detected again each status tick.
    start(&server, &mut node, &["--node-status-update-frequency=2s"]);
    let n = wait_ready(&server, &node);
    assert_eq!(internal_ip(&n).as_deref(), Some(first), "{n}");
    let host_ip = |want: &str| {
        let pod = server.get_pod("default", "ip-pod")?;
        let st = &pod["status"];
        (st["hostIP"] == want && st["hostIPs"][0]["ip"] == want).then_some(pod)
    };
    wait_for("the pod's hostIP to be the first address", LONG, || {
        host_ip(first)
    });

    // The lease renews to the second address (a DHCP renewal, a board moved).
    address.resolve_to(second);
    let moved = Instant::now();
    wait_for("the Node's InternalIP to follow", LONG, || {
        let n = server.get("nodes", "", &node.name)?;
        (internal_ip(&n).as_deref() == Some(second)).then_some(())
    });
    eprintln!("InternalIP followed in {:?}", moved.elapsed());
    wait_for("the pod's hostIP to follow", LONG, || host_ip(second));
    eprintln!("hostIP followed in {:?}", moved.elapsed());
    assert!(
        node.log().contains(second),
        "the change is logged: {}",
        node.log()
    );
    assert!(node.alive());
}
