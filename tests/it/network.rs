//! `--network-plugin=cni` against Debian's real CNI plugins (bridge, host-local,
//! loopback in `/usr/lib/cni`): the network is not ready without a configuration (the
//! Node NotReady with upstream's message, in the API server stand-in) and pods on the
//! pod network wait while host-network pods run; a configuration written
//! later makes it ready and the waiting pod gets an address of the test's own subnet,
//! which the host reaches; when the pod goes, its address and interface go too. A
//! plugin that fails or hangs for one pod holds back that pod alone.
//! Each test has its own bridge, subnet, configuration, cache and IPAM directories,
//! but for the one `kubenet` test (kubenet's bridge is always `cbr0`): it takes the
//! pod CIDR from the Node in the API server stand-in, serves a hostPort through
//! portmap and follows a change of the CIDR.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::apiserver::{Options, TestApiServer};
use crate::util::{wait_for, Node, BUSYBOX, LONG};
use runtime::Runtime;

/// A bridge, subnet and CNI directories of the test's own; the bridge is deleted on drop.
struct TestNetwork {
    bridge: String,
    subnet_prefix: String,
}

impl TestNetwork {
    fn new(node: &Node, third_octet: u8) -> TestNetwork {
        assert!(
            Path::new("/usr/lib/cni/bridge").is_file(),
            "/usr/lib/cni/bridge is missing: install the CNI plugins for the tests with \
             `apt-get install -y containernetworking-plugins` (.ci/run does)"
        );
        std::fs::create_dir_all(node.dir.join("net.d")).expect("conf dir");
        TestNetwork {
            bridge: format!("rkt{}x{third_octet}", std::process::id() % 100_000),
            subnet_prefix: format!("10.252.{third_octet}."),
        }
    }

    /// The flags of a node on this network (its own plugin directory first).
    fn flags(node: &Node) -> Vec<String> {
        vec![
            "--network-plugin=cni".into(),
            format!(
                "--cni-bin-dir={},/usr/lib/cni",
                node.dir.join("cni-bin").display()
            ),
            format!("--cni-conf-dir={}", node.dir.join("net.d").display()),
            format!("--cni-cache-dir={}", node.dir.join("cni-cache").display()),
        ]
    }

    /// Writes the network's configuration into the node's configuration directory.
    fn configure(&self, node: &Node) {
        self.configure_with(node, "bridge", "");
    }

    /// The same, with the bridge plugin's type `bridge_type` (a wrapper of it) and
    /// more plugins after the loopback one (`extra`: `,{…}` objects).
    fn configure_with(&self, node: &Node, bridge_type: &str, extra: &str) {
        let conf = format!(
            r#"{{"cniVersion":"1.0.0","name":"rkt-it","plugins":[
                {{"type":"{bridge_type}","bridge":"{bridge}","isGateway":true,"ipMasq":false,
                  "ipam":{{"type":"host-local","dataDir":"{ipam}",
                           "ranges":[[{{"subnet":"{prefix}0/24"}}]],
                           "routes":[{{"dst":"0.0.0.0/0"}}]}}}},
                {{"type":"loopback"}}{extra}]}}"#,
            bridge = self.bridge,
            ipam = node.dir.join("ipam").display(),
            prefix = self.subnet_prefix,
        );
        let tmp = node.dir.join("net.d").join(".10-rkt.tmp");
        std::fs::write(&tmp, conf).expect("write conf");
        std::fs::rename(&tmp, node.dir.join("net.d").join("10-rkt.conflist")).expect("rename");
    }

    /// The addresses host-local has handed out.
    fn allocated(&self, node: &Node) -> Vec<String> {
        std::fs::read_dir(node.dir.join("ipam").join("rkt-it"))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with(&self.subnet_prefix))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The veth ends attached to the bridge.
    fn ports(&self) -> String {
        let out = Command::new("ip")
            .args(["-o", "link", "show", "master", &self.bridge])
            .output()
            .expect("ip link");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for TestNetwork {
    /// Deletes the bridge, and the firewall plugin's rules for the subnet's addresses
    /// (a node torn down by the test removes its containers without a DEL).
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge])
            .output();
        let Ok(out) = Command::new("iptables")
            .args(["-S", "CNI-FORWARD"])
            .output()
        else {
            return;
        };
        for rule in String::from_utf8_lossy(&out.stdout).lines() {
            let ours = rule.contains(&format!("-d {}", self.subnet_prefix))
                || rule.contains(&format!("-s {}", self.subnet_prefix));
            if let Some(spec) = rule.strip_prefix("-A CNI-FORWARD ").filter(|_| ours) {
                let _ = Command::new("sh")
                    .args(["-c", &format!("iptables -D CNI-FORWARD {spec}")])
                    .output();
            }
        }
    }
}

/// One HTTP GET to `ip:port` (the pod's address, straight through the bridge).
fn get(ip: &str, port: u16, path: &str) -> Option<String> {
    let addr = format!("{ip}:{port}").parse().ok()?;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {ip}\r\n\r\n").ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    body.starts_with("HTTP/1.").then_some(body)
}

/// The pod's status from the read-only port, once it has one.
fn pod_status(node: &Node, name: &str) -> Option<serde_json::Value> {
    let full = format!("{name}-{}", node.name);
    node.pods()["items"]
        .as_array()?
        .iter()
        .find(|p| p["metadata"]["name"] == full.as_str())
        .map(|p| p["status"].clone())
}

/// The Node's Ready condition in the API server stand-in, once its status is `want`.
fn ready_condition(api: &TestApiServer, node: &str, want: &str) -> Option<serde_json::Value> {
    let n = api.get("nodes", "", node)?;
    let c = n["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")?
        .clone();
    (c["status"] == want).then_some(c)
}

/// The Node's NotReady condition once it is the network's (before the first runtime
/// status check it is NotReady for that check instead, "… may not have completed yet"
/// or "network state unknown").
fn network_not_ready(api: &TestApiServer, node: &str) -> serde_json::Value {
    wait_for("the Node NotReady for its network", LONG, || {
        ready_condition(api, node, "False").filter(|c| {
            c["message"]
                .as_str()
                .is_some_and(|m| m.contains("network not ready"))
        })
    })
}

/// The pod's IP once it is Running.
fn running_ip(node: &Node, pod: &str) -> String {
    wait_for(&format!("{pod}'s pod IP"), LONG, || {
        let st = pod_status(node, pod)?;
        let ip = st["podIP"].as_str()?.to_string();
        (st["phase"] == "Running").then_some(ip)
    })
}

#[test]
fn cni_pods_wait_for_a_configuration_then_get_an_address_that_goes_with_them() {
    let mut node = Node::new("net-cni");
    let net = TestNetwork::new(&node, (std::process::id() % 200 + 20) as u8);
    node.write_manifest(
        "web.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: web}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: httpd
    image: {BUSYBOX}
    command: ["sh", "-c", "mkdir -p /tmp/www && echo hello-over-cni > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www"]
"#
        ),
    );
    node.write_manifest(
        "hn.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: hn}}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - name: sleeper
    image: {BUSYBOX}
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done"]
"#
        ),
    );
    // With an API server, so the Node's Ready condition can be read.
    let api = TestApiServer::start(Options::default());
    let kc = api.kubeconfig(&node.dir, "kubelet.kubeconfig", "token: good-token");
    let mut flags = TestNetwork::flags(&node);
    flags.push(format!("--kubeconfig={}", kc.display()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    node.start(&flags);
    let ready = |want: &str| ready_condition(&api, &node.name, want);

    // No configuration: the network is not ready, with upstream's words, and only the
    // host-network pod runs.
    let c = network_not_ready(&api, &node.name);
    assert!(
        c["message"].as_str().is_some_and(|m| m.contains(
            "container runtime network not ready: NetworkReady=false \
             reason:NetworkPluginNotReady message:docker: network plugin is not ready: \
             cni config uninitialized"
        )),
        "{c}"
    );
    let (code, body) = node.healthz_get("/healthz/network");
    assert_eq!(code, 500, "{body}");
    wait_for("the host-network pod to run", LONG, || {
        (!node.containers_named("sleeper").is_empty()).then_some(())
    });
    let (_, verbose) = node.healthz_get("/healthz?verbose");
    assert!(
        verbose.contains("cni config uninitialized"),
        "the network check says why: {verbose}"
    );
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        node.containers_named("httpd").is_empty(),
        "a pod-network pod waits for the network"
    );
    assert!(
        node.log().contains("FailedCreatePodSandBox")
            || node.log().contains("network is not ready"),
        "the wait is said: {}",
        node.log()
    );

    // A configuration written later: ready, and the waiting pod starts on it.
    net.configure(&node);
    wait_for("the network to be ready", LONG, || {
        (node.healthz_get("/healthz/network").0 == 200).then_some(())
    });
    wait_for("the Node Ready", LONG, || ready("True"));
    let ip = running_ip(&node, "web");
    assert!(
        ip.starts_with(&net.subnet_prefix),
        "{ip} from the node's subnet"
    );
    assert_eq!(
        net.allocated(&node),
        vec![ip.clone()],
        "one address handed out"
    );
    let body = wait_for("the pod to answer on its IP", LONG, || {
        get(&ip, 8080, "/index.html")
    });
    assert!(body.contains("hello-over-cni"), "{body}");
    assert!(!net.ports().is_empty(), "the pod's veth is on the bridge");

    // The pod goes: its address and veth go with it.
    std::fs::remove_file(node.manifests().join("web.yaml")).expect("rm manifest");
    wait_for("web's containers to go", LONG, || {
        node.containers_named("httpd").is_empty().then_some(())
    });
    wait_for("the address and the veth to be released", LONG, || {
        (net.allocated(&node).is_empty() && net.ports().trim().is_empty()).then_some(())
    });
}

/// A plugin of the test's own in front of the real bridge plugin: for a pod named
/// `bad-…` it fails as a CNI plugin fails, for `hang-…` it hangs; for any other it is
/// the bridge plugin (the same stdin and environment).
fn flaky_bridge(node: &Node, hang_secs: u32) {
    use std::os::unix::fs::PermissionsExt;
    let dir = node.dir.join("cni-bin");
    std::fs::create_dir_all(&dir).expect("plugin dir");
    let path = dir.join("rkt-flaky");
    std::fs::write(
        &path,
        r#"#!/bin/sh
HANG=HANG_SECS
case "$CNI_COMMAND:$CNI_ARGS" in
ADD:*K8S_POD_NAME=bad-*)
  printf '{"cniVersion":"1.0.0","code":11,"msg":"no address for this pod","details":"the test refuses it"}'
  exit 1 ;;
ADD:*K8S_POD_NAME=hang-*)
  [ -e "$(dirname "$0")/no-hang" ] || exec sleep $HANG ;;
esac
exec /usr/lib/cni/bridge
"#
        .replace("HANG_SECS", &hang_secs.to_string()),
    )
    .expect("write plugin");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

#[test]
fn a_failing_and_a_hung_plugin_hold_back_only_their_pods() {
    let _hung = HungPlugins(1001);
    let mut node = Node::new("net-flaky");
    let net = TestNetwork::new(&node, (std::process::id() % 200 + 21) as u8);
    flaky_bridge(&node, 1001);
    net.configure_with(&node, "rkt-flaky", "");
    node.write_manifest("bad.yaml", &web_pod("bad-one"));
    node.write_manifest("hang.yaml", &web_pod("hang-one"));
    node.write_manifest("good.yaml", &web_pod("good"));
    let flags = TestNetwork::flags(&node);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    node.start(&flags);

    // The good pod runs on its address.
    let ip = running_ip(&node, "good");
    assert!(ip.starts_with(&net.subnet_prefix), "{ip}");
    let body = wait_for("the pod to answer on its IP", LONG, || {
        get(&ip, 8080, "/index.html")
    });
    assert!(body.contains("hello-good"), "{body}");

    // The refused pod waits, with upstream's words and the plugin's.
    let said = wait_for("the refused pod's sandbox error", LONG, || {
        let log = node.log();
        log.lines()
            .find(|l| l.contains("FailedCreatePodSandBox") && l.contains("bad-one"))
            .map(str::to_string)
    });
    for part in [
        "failed to set up sandbox container",
        "networkPlugin cni failed to set up pod \"bad-one-",
        "no address for this pod; the test refuses it",
    ] {
        assert!(said.contains(part), "{part:?} in {said}");
    }
    // The hung one is killed at the plugin's deadline and waits too.
    let said = wait_for("the hung plugin's deadline", LONG * 2, || {
        let log = node.log();
        log.lines()
            .find(|l| l.contains("FailedCreatePodSandBox") && l.contains("hang-one"))
            .map(str::to_string)
    });
    assert!(said.contains("did not finish within"), "{said}");
    assert_eq!(
        node.containers_named("httpd").len(),
        1,
        "only the good pod's container runs"
    );
    assert_eq!(
        net.allocated(&node),
        vec![ip.clone()],
        "no address kept for the others"
    );

    // The good pod goes: its address goes with it.
    std::fs::remove_file(node.manifests().join("good.yaml")).expect("rm manifest");
    wait_for("the address to be released", LONG, || {
        net.allocated(&node).is_empty().then_some(())
    });
}

/// An HTTP server pod named `name` answering `hello-<name>`.
fn web_pod(name: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: httpd
    image: {BUSYBOX}
    command: ["sh", "-c", "mkdir -p /tmp/www && echo hello-{name} > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www"]
"#
    )
}

#[test]
fn pods_on_two_nodes_get_their_own_nodes_addresses_and_reach_each_other() {
    // Subnets apart from the other tests' (which use 20 to 220).
    let mut a = Node::new("net-two-a");
    let mut b = Node::new("net-two-b");
    let (na, nb) = (TestNetwork::new(&a, 230), TestNetwork::new(&b, 231));
    // The firewall plugin lets the pods' traffic through the host's FORWARD chain,
    // whose policy Docker sets to DROP.
    let firewall = r#",{"type":"firewall"}"#;
    na.configure_with(&a, "bridge", firewall);
    nb.configure_with(&b, "bridge", firewall);
    a.write_manifest("web.yaml", &web_pod("web-a"));
    b.write_manifest("web.yaml", &web_pod("web-b"));
    for node in [&mut a, &mut b] {
        let flags = TestNetwork::flags(node);
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        node.start(&flags);
    }
    let (ip_a, ip_b) = (running_ip(&a, "web-a"), running_ip(&b, "web-b"));
    assert!(
        ip_a.starts_with(&na.subnet_prefix),
        "{ip_a} from node a's subnet"
    );
    assert!(
        ip_b.starts_with(&nb.subnet_prefix),
        "{ip_b} from node b's subnet"
    );
    // A pod on node a fetches the page of the pod on node b by its IP (busybox nc).
    let client = a.containers_named("httpd").remove(0).id;
    let fetch = format!("printf 'GET /index.html HTTP/1.0\\r\\n\\r\\n' | nc -w 5 {ip_b} 8080");
    let body = wait_for("a's pod to reach b's pod", LONG, || {
        let out = a
            .docker
            .exec(
                &client,
                &["sh".into(), "-c".into(), fetch.clone()],
                Duration::from_secs(20),
            )
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.contains("hello-web-b").then_some(text)
    });
    assert!(body.starts_with("HTTP/1."), "{body}");
}

/// Kills what a hanging plugin left behind (its `sleep <secs>`, which outlives a
/// rkubelet killed with SIGKILL).
fn kill_hung_plugins(secs: u32) {
    let _ = Command::new("pkill")
        .args(["-f", &format!("^sleep {secs}$")])
        .output();
}

/// Kills a test's hanging plugins when the test ends, passed or failed (declared
/// before the node, so dropped after it: the node's rkubelet goes first).
struct HungPlugins(u32);

impl Drop for HungPlugins {
    fn drop(&mut self) {
        kill_hung_plugins(self.0);
    }
}

#[test]
fn a_sandbox_left_without_its_network_by_a_kill_is_made_again() {
    let _hung = HungPlugins(1002);
    let mut node = Node::new("net-kill9");
    let net = TestNetwork::new(&node, (std::process::id() % 200 + 19) as u8);
    flaky_bridge(&node, 1002);
    net.configure_with(&node, "rkt-flaky", "");
    node.write_manifest("hang.yaml", &web_pod("hang-then-fine"));
    let flags = TestNetwork::flags(&node);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    node.start(&flags);
    // The sandbox runs, its ADD hangs: rkubelet is killed there.
    let first = wait_for("the sandbox to run while its ADD hangs", LONG, || {
        node.containers()
            .into_iter()
            .find(|c| {
                crate::util::label(c, "io.kubernetes.container.name") == "POD"
                    && c.state == runtime::ContainerState::Running
            })
            .map(|c| c.id)
    });
    std::thread::sleep(Duration::from_secs(2));
    node.kill9();
    kill_hung_plugins(1002);
    std::fs::write(node.dir.join("cni-bin").join("no-hang"), "").expect("no-hang");

    // Started again, it sees a sandbox without a network: it makes a new one.
    node.start(&flags);
    let ip = running_ip(&node, "hang-then-fine");
    assert!(ip.starts_with(&net.subnet_prefix), "{ip}");
    let body = wait_for("the pod to answer on its IP", LONG, || {
        get(&ip, 8080, "/index.html")
    });
    assert!(body.contains("hello-hang-then-fine"), "{body}");
    wait_for("one running sandbox, not the first", LONG, || {
        let running: Vec<String> = node
            .containers()
            .into_iter()
            .filter(|c| {
                crate::util::label(c, "io.kubernetes.container.name") == "POD"
                    && c.state == runtime::ContainerState::Running
            })
            .map(|c| c.id)
            .collect();
        (running.len() == 1 && running[0] != first).then_some(())
    });
    assert_eq!(
        net.allocated(&node),
        vec![ip.clone()],
        "one address, no leak"
    );
}

#[test]
fn a_hundred_pods_come_and_go_and_leave_no_address_veth_or_rule_behind() {
    let mut node = Node::new("net-cycles");
    let net = TestNetwork::new(&node, (std::process::id() % 200 + 18) as u8);
    net.configure_with(&node, "bridge", r#",{"type":"firewall"}"#);
    let flags = TestNetwork::flags(&node);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    node.start(&flags);
    let rules = || {
        let out = Command::new("iptables")
            .args(["-S", "CNI-FORWARD"])
            .output()
            .expect("iptables");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains(&net.subnet_prefix))
            .count()
    };
    // Ten rounds of ten pods: each round's pods all run, then all go.
    for round in 0..10 {
        for i in 0..10 {
            node.write_manifest(&format!("p{i}.yaml"), &web_pod(&format!("c{round}-{i}")));
        }
        wait_for(
            &format!("round {round}'s ten pods to have addresses"),
            LONG,
            || {
                (net.allocated(&node).len() == 10
                    && (0..10).all(|i| {
                        pod_status(&node, &format!("c{round}-{i}"))
                            .is_some_and(|st| st["podIP"].is_string())
                    }))
                .then_some(())
            },
        );
        for i in 0..10 {
            std::fs::remove_file(node.manifests().join(format!("p{i}.yaml"))).expect("rm");
        }
        wait_for(&format!("round {round}'s pods to go"), LONG, || {
            node.containers_named("httpd").is_empty().then_some(())
        });
    }
    wait_for("every address, veth and rule to be released", LONG, || {
        (net.allocated(&node).is_empty() && net.ports().trim().is_empty() && rules() == 0)
            .then_some(())
    });
}

/// Deletes what kubenet leaves on the host on purpose when rkubelet goes (as
/// upstream's does): `cbr0`, the masquerade rules of the test's CIDRs, the firewall
/// plugin's rules and host-local's addresses of them.
struct KubenetHost(Vec<String>);

impl Drop for KubenetHost {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", "cbr0"]).output();
        for (table, chain) in [("nat", "POSTROUTING"), ("filter", "CNI-FORWARD")] {
            let Ok(out) = Command::new("iptables")
                .args(["-t", table, "-S", chain])
                .output()
            else {
                continue;
            };
            for rule in String::from_utf8_lossy(&out.stdout).lines() {
                let ours = self.0.iter().any(|prefix| rule.contains(prefix.as_str()));
                if let Some(spec) = rule.strip_prefix("-A ").filter(|_| ours) {
                    let _ = Command::new("sh")
                        .args(["-c", &format!("iptables -t {table} -D {spec}")])
                        .output();
                }
            }
        }
        for prefix in &self.0 {
            if let Ok(d) = std::fs::read_dir("/var/lib/cni/networks/kubenet") {
                for e in d.flatten() {
                    if e.file_name().to_string_lossy().starts_with(prefix.as_str()) {
                        let _ = std::fs::remove_file(e.path());
                    }
                }
            }
        }
    }
}

/// The rules of an iptables chain, as `-S` lists them.
fn rules(table: &str, chain: &str) -> String {
    let out = Command::new("iptables")
        .args(["-t", table, "-S", chain])
        .output()
        .expect("iptables");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// host-local's addresses of the kubenet network that start with `prefix`.
fn kubenet_allocated(prefix: &str) -> Vec<String> {
    std::fs::read_dir("/var/lib/cni/networks/kubenet")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(prefix))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn kubenet_takes_the_nodes_pod_cidr_from_the_api_server_and_follows_its_change() {
    assert!(
        Path::new("/usr/lib/cni/portmap").is_file(),
        "/usr/lib/cni/portmap is missing: `apt-get install -y containernetworking-plugins`"
    );
    // The only test on cbr0 (kubenet's bridge has one name); CIDRs apart from the
    // other tests' 10.252.x.
    let (first, second) = ("10.251.31.", "10.251.32.");
    let _host = KubenetHost(vec![first.into(), second.into()]);
    let mut node = Node::new("net-kubenet");
    let host_port = crate::util::free_port();
    node.write_manifest(
        "web.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: web}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: httpd
    image: {BUSYBOX}
    command: ["sh", "-c", "mkdir -p /tmp/www && echo hello-kubenet > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www"]
    ports: [{{containerPort: 8080, hostPort: {host_port}}}]
"#
        ),
    );
    let api = TestApiServer::start(Options::default());
    let kc = api.kubeconfig(&node.dir, "kubelet.kubeconfig", "token: good-token");
    let flags = [
        "--network-plugin=kubenet".to_string(),
        "--cni-bin-dir=/usr/lib/cni".into(),
        format!("--cni-cache-dir={}", node.dir.join("cni-cache").display()),
        "--non-masquerade-cidr=10.0.0.0/8".into(),
        format!("--kubeconfig={}", kc.display()),
    ];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    node.start(&flags);
    let ready = |want: &str| ready_condition(&api, &node.name, want);

    // No pod CIDR yet: not ready, in upstream's words; the pod waits.
    let c = network_not_ready(&api, &node.name);
    assert!(
        c["message"].as_str().is_some_and(|m| m.contains(
            "NetworkReady=false reason:NetworkPluginNotReady message:docker: network plugin \
             is not ready: kubenet does not have netConfig. This is most likely due to lack \
             of PodCIDR"
        )),
        "{c}"
    );
    assert!(node.containers_named("httpd").is_empty());

    // The Node gets its pod CIDR: ready, and the pod gets an address of it.
    let set_cidr = |prefix: &str| {
        let cidr = format!("{prefix}0/24");
        api.patch(
            "nodes",
            "",
            &node.name,
            false,
            crate::apiserver::PatchType::Merge,
            &serde_json::json!({"spec": {"podCIDR": cidr, "podCIDRs": [cidr]}}),
        )
        .expect("patch the Node's pod CIDR");
    };
    set_cidr(first);
    let deadline = std::time::Instant::now() + LONG;
    while ready("True").is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "the Node is not Ready with a pod CIDR: {}",
            node.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let ip = running_ip(&node, "web");
    assert!(ip.starts_with(first), "{ip} from the Node's pod CIDR");
    let st = pod_status(&node, "web").expect("status");
    assert_eq!(st["podIPs"], serde_json::json!([{"ip": ip}]), "{st}");
    assert_eq!(kubenet_allocated(first), vec![ip.clone()]);
    let body = wait_for("the pod to answer on its IP", LONG, || {
        get(&ip, 8080, "/index.html")
    });
    assert!(body.contains("hello-kubenet"), "{body}");
    // Its hostPort, through portmap: on the loopback and on the node's address.
    let body = wait_for("the hostPort to answer", LONG, || {
        get("127.0.0.1", host_port, "/index.html")
    });
    assert!(body.contains("hello-kubenet"), "{body}");
    // cbr0 is promiscuous (the default hairpin mode), and the pod CIDR's traffic
    // leaving 10.0.0.0/8 is masqueraded.
    let link = Command::new("ip")
        .args(["-d", "link", "show", "cbr0"])
        .output()
        .expect("ip link");
    let link = String::from_utf8_lossy(&link.stdout);
    assert!(link.contains("PROMISC"), "{link}");
    let nat = rules("nat", "POSTROUTING");
    assert!(
        nat.lines().any(|r| r.contains(&format!("-s {first}0/24"))
            && r.contains("! -d 10.0.0.0/8")
            && r.contains("MASQUERADE")),
        "{nat}"
    );

    // A second pod on the same bridge, its bandwidth limited by annotations (the
    // bandwidth plugin: a tbf qdisc on its host veth for ingress, an ifb device for
    // egress), reaches the first by its IP.
    let limited = web_pod("web2").replace(
        "metadata: {name: web2}",
        "metadata:\n  name: web2\n  annotations:\n    kubernetes.io/ingress-bandwidth: 10M\n    \
         kubernetes.io/egress-bandwidth: 10M",
    );
    assert!(limited.contains("egress-bandwidth"), "{limited}");
    node.write_manifest("web2.yaml", &limited);
    running_ip(&node, "web2");
    let ifbs = || {
        let out = Command::new("ip")
            .args(["-o", "link", "show", "type", "ifb"])
            .output()
            .expect("ip link");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains("bwp"))
            .count()
    };
    let qdiscs = Command::new("tc")
        .args(["qdisc", "show"])
        .output()
        .expect("tc");
    let qdiscs = String::from_utf8_lossy(&qdiscs.stdout).into_owned();
    assert!(
        qdiscs
            .lines()
            .any(|l| l.contains("tbf") && l.contains("rate 10Mbit")),
        "{qdiscs}"
    );
    assert!(ifbs() >= 1, "an ifb device for the egress limit");
    let client = node
        .containers_named("httpd")
        .into_iter()
        .find(|c| c.name.contains("web2"))
        .expect("web2's container")
        .id;
    let fetch = format!("printf 'GET /index.html HTTP/1.0\\r\\n\\r\\n' | nc -w 5 {ip} 8080");
    wait_for("one pod to reach the other", LONG, || {
        let out = node
            .docker
            .exec(
                &client,
                &["sh".into(), "-c".into(), fetch.clone()],
                Duration::from_secs(20),
            )
            .ok()?;
        String::from_utf8_lossy(&out.stdout)
            .contains("hello-kubenet")
            .then_some(())
    });

    // The pod CIDR changes: taken without a restart; new pods get addresses of the
    // new one, the old masquerade rule goes.
    set_cidr(second);
    wait_for("the new masquerade rule", LONG, || {
        let nat = rules("nat", "POSTROUTING");
        (nat.contains(&format!("-s {second}0/24")) && !nat.contains(&format!("-s {first}0/24")))
            .then_some(())
    });
    node.write_manifest("web3.yaml", &web_pod("web3"));
    let deadline = std::time::Instant::now() + LONG;
    let ip3 = loop {
        let st = pod_status(&node, "web3").unwrap_or_default();
        if let (Some(ip), "Running") = (st["podIP"].as_str(), st["phase"].as_str().unwrap_or("")) {
            break ip.to_string();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "web3 does not run on the new pod CIDR: {}",
            node.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(ip3.starts_with(second), "{ip3} from the new pod CIDR");

    // Every pod goes: no address, veth or hostPort rule is left.
    for m in ["web.yaml", "web2.yaml", "web3.yaml"] {
        std::fs::remove_file(node.manifests().join(m)).expect("rm manifest");
    }
    wait_for("the containers to go", LONG, || {
        node.containers_named("httpd").is_empty().then_some(())
    });
    wait_for("addresses, veths and the hostPort rule to go", LONG, || {
        let veths = Command::new("ip")
            .args(["-o", "link", "show", "master", "cbr0"])
            .output()
            .ok()?;
        let dnat = rules("nat", "CNI-HOSTPORT-DNAT");
        (kubenet_allocated(first).is_empty()
            && kubenet_allocated(second).is_empty()
            && String::from_utf8_lossy(&veths.stdout).trim().is_empty()
            && ifbs() == 0
            && !dnat.contains(&format!("--dports {host_port}")))
        .then_some(())
    });
    assert!(node.alive(), "{}", node.log());
}
