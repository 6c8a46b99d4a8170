//! Probes end to end: a real rkubelet process per test, probing real containers on
//! each runtime (`on_both_runtimes!`: Docker, and containerd over CRI): exec through
//! the runtime (the Engine API, CRI's `ExecSync`), HTTP, TCP and gRPC against the pod
//! IP (the docker0 bridge, or the shared containerd's CNI bridge; the node's own
//! address for a hostNetwork pod); liveness restarts, readiness both ways, startup
//! probes and timeouts.
//!
//! Docker-only, because no runtime takes part: `https_probe_skips_certificate_verification`
//! and the two `grpc_probe_*` tests drive the prober's handlers directly against
//! servers on the host (the runtime they are given is never called: there is no
//! container), so a second run would test the same code path twice.

use std::time::Duration;

use crate::util::{wait_for, Node, Rt, BUSYBOX, LONG};
use runtime::ContainerState;
use serde_json::Value;

/// The pod named `pod` (without the node suffix) from `/pods`.
fn pod(node: &Node, pod: &str) -> Option<Value> {
    let full = format!("{pod}-{}", node.name);
    node.pods()["items"]
        .as_array()?
        .iter()
        .find(|p| p["metadata"]["name"] == full.as_str())
        .cloned()
}

/// One container's status in `/pods`.
fn ctr_status(node: &Node, p: &str, c: &str) -> Option<Value> {
    pod(node, p)?["status"]["containerStatuses"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == c)
        .cloned()
}

/// The status of the pod condition `ty` ("True"/"False").
fn condition(node: &Node, p: &str, ty: &str) -> Option<Value> {
    pod(node, p)?["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == ty)
        .cloned()
}

fn ready(node: &Node, p: &str) -> Option<String> {
    condition(node, p, "Ready").and_then(|c| c["status"].as_str().map(str::to_string))
}

/// A count from `/metrics/probes` on the read-only port (0 if the series is absent).
fn probe_count(node: &Node, container: &str, probe_type: &str, result: &str) -> u64 {
    let (code, body) = node.ro_get("/metrics/probes");
    assert_eq!(code, 200, "{body}");
    let needle = format!("container=\"{container}\",");
    let tail = format!("probe_type=\"{probe_type}\",result=\"{result}\"}} ");
    body.lines()
        .filter(|l| l.starts_with("prober_probe_total{") && l.contains(&needle))
        .find_map(|l| l.split_once(&tail).and_then(|(_, n)| n.parse().ok()))
        .unwrap_or(0)
}

/// The running instance of a container of this node, by container name.
fn running_id(node: &Node, c: &str) -> Option<String> {
    node.containers_named(c)
        .into_iter()
        .find(|s| s.state == ContainerState::Running)
        .map(|s| s.id)
}

/// The scheme of a container ID in the pod status (upstream's runtime type).
fn id_scheme(node: &Node) -> &'static str {
    match node.rt {
        Rt::Docker => "docker",
        Rt::Containerd => "containerd",
    }
}

fn pod_header(name: &str, grace: u32) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: {grace}\n  containers:\n"
    )
}

fn exec_liveness_failure_restarts_the_container_with_the_probe_grace(rt: Rt) {
    let mut node = Node::on(rt, "pr-live");
    // The container deletes its health file after 3 s and ignores SIGTERM (a shell as
    // PID 1 with no handler). The pod's grace is 300 s; the probe's own 2 s grace is
    // what lets the kill finish within the test's deadline.
    let script = "touch /tmp/healthy; (sleep 3; rm -f /tmp/healthy) & while true; do sleep 1; done";
    let yaml = format!(
        "{}  - name: app\n    image: {BUSYBOX}\n    command: [\"sh\", \"-c\", {script:?}]\n    livenessProbe:\n      exec:\n        command: [\"cat\", \"/tmp/healthy\"]\n      periodSeconds: 1\n      failureThreshold: 2\n      terminationGracePeriodSeconds: 2\n",
        pod_header("live", 300)
    );
    node.write_manifest("live.yaml", &yaml);
    node.start(&[]);
    let first = wait_for("the first instance running", LONG, || {
        running_id(&node, "app")
    });

    let st = wait_for("restartCount 1 with a lastState", LONG, || {
        let s = ctr_status(&node, "live", "app")?;
        (s["restartCount"].as_i64() >= Some(1) && s["lastState"]["terminated"].is_object())
            .then_some(s)
    });
    let last = &st["lastState"]["terminated"];
    assert_eq!(
        last["containerID"],
        format!("{}://{first}", id_scheme(&node)),
        "lastState is the killed instance: {st}"
    );
    assert_eq!(
        last["exitCode"], 137,
        "SIGKILL after the probe's grace: {st}"
    );

    // The runtime shows a new instance (restart count 1 in its name) running, the old
    // one dead.
    let second = wait_for("a new instance running", LONG, || {
        running_id(&node, "app").filter(|id| *id != first)
    });
    let insp = node.runtime.inspect_container(&second).expect("inspect");
    assert!(insp.name.ends_with("_1"), "{}", insp.name);
    let old = node.runtime.inspect_container(&first).expect("inspect old");
    assert_eq!(old.state, ContainerState::Exited);
    let log = node.log();
    assert!(
        log.contains("Container app failed liveness probe, will be restarted"),
        "{log}"
    );
}

fn http_readiness_probe_flips_ready_both_ways(rt: Rt) {
    let mut node = Node::on(rt, "pr-http");
    let script = "mkdir -p /www && echo ok > /www/index.html && exec httpd -f -p 8080 -h /www";
    let yaml = format!(
        "{}  - name: web\n    image: {BUSYBOX}\n    command: [\"sh\", \"-c\", {script:?}]\n    ports:\n    - name: http\n      containerPort: 8080\n    readinessProbe:\n      httpGet:\n        path: /index.html\n        port: http\n        httpHeaders:\n        - name: X-Probe\n          value: rkubelet\n      periodSeconds: 1\n      failureThreshold: 1\n",
        pod_header("web", 1)
    );
    node.write_manifest("web.yaml", &yaml);
    node.start(&[]);
    wait_for("the pod Ready", LONG, || {
        (ready(&node, "web").as_deref() == Some("True")).then_some(())
    });
    let s = ctr_status(&node, "web", "web").expect("status");
    assert_eq!(
        (s["ready"].as_bool(), s["started"].as_bool()),
        (Some(true), Some(true))
    );

    let id = running_id(&node, "web").expect("running");
    let sh = |cmd: &str| {
        let r = node
            .runtime
            .exec(
                &id,
                &["sh".into(), "-c".into(), cmd.into()],
                Duration::from_secs(20),
            )
            .expect("exec");
        assert_eq!(r.exit_code, 0, "{cmd}: {r:?}");
    };
    sh("rm /www/index.html");
    let c = wait_for("the pod not Ready after the page went", LONG, || {
        condition(&node, "web", "Ready").filter(|c| c["status"] == "False")
    });
    assert_eq!(c["reason"], "ContainersNotReady", "{c}");
    assert_eq!(c["message"], "containers with unready status: [web]", "{c}");
    assert_eq!(
        ctr_status(&node, "web", "web").expect("status")["ready"],
        false
    );
    sh("echo back > /www/index.html");
    wait_for("the pod Ready again", LONG, || {
        (ready(&node, "web").as_deref() == Some("True")).then_some(())
    });
    assert!(probe_count(&node, "web", "Readiness", "failed") >= 1);
    assert!(probe_count(&node, "web", "Readiness", "successful") >= 2);
    assert_eq!(
        ctr_status(&node, "web", "web").expect("status")["restartCount"],
        0,
        "readiness never restarts"
    );
}

fn tcp_and_grpc_probes_gate_readiness(rt: Rt) {
    let mut node = Node::on(rt, "pr-tcp");
    // `web` listens after 3 s; nothing in the pod listens on 9999 (TCP) nor on 9090
    // (`grpc`'s gRPC probe).
    let web = "sleep 3; mkdir -p /www; exec httpd -f -p 8080 -h /www";
    let idle = crate::util::SLEEPER;
    let yaml = format!(
        "{h}  - name: web\n    image: {BUSYBOX}\n    command: [\"sh\", \"-c\", {web:?}]\n    ports:\n    - name: tcp\n      containerPort: 8080\n    readinessProbe:\n      tcpSocket:\n        port: tcp\n      periodSeconds: 1\n  - name: closed\n    image: {BUSYBOX}\n    command: [\"sh\", \"-c\", {idle:?}]\n    readinessProbe:\n      tcpSocket:\n        port: 9999\n      periodSeconds: 1\n  - name: grpc\n    image: {BUSYBOX}\n    command: [\"sh\", \"-c\", {idle:?}]\n    readinessProbe:\n      grpc:\n        port: 9090\n      periodSeconds: 1\n",
        h = pod_header("tcp", 1)
    );
    node.write_manifest("tcp.yaml", &yaml);
    node.start(&[]);
    wait_for("web ready through its TCP probe", LONG, || {
        ctr_status(&node, "tcp", "web").filter(|s| s["ready"] == true)
    });
    wait_for("the closed port probed and failing", LONG, || {
        (probe_count(&node, "closed", "Readiness", "failed") >= 2).then_some(())
    });
    wait_for("the gRPC probe failing", LONG, || {
        (probe_count(&node, "grpc", "Readiness", "failed") >= 2).then_some(())
    });
    let c = condition(&node, "tcp", "ContainersReady").expect("condition");
    assert_eq!(c["status"], "False");
    assert_eq!(
        c["message"], "containers with unready status: [closed grpc]",
        "{c}"
    );
    for name in ["closed", "grpc"] {
        let s = ctr_status(&node, "tcp", name).expect("status");
        assert_eq!(s["ready"], false, "{s}");
        assert_eq!(s["restartCount"], 0, "{s}");
    }
    let log = node.log();
    assert!(log.contains("timeout: failed to connect service"), "{log}");
}

fn startup_probe_holds_liveness_until_it_succeeds(rt: Rt) {
    let mut node = Node::on(rt, "pr-start");
    // Ready after 6 s. Without the startup probe's gate, the liveness probe (one
    // failure kills) would restart it long before.
    let script =
        "sleep 6; touch /tmp/started; trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done";
    let check = "[\"cat\", \"/tmp/started\"]";
    let yaml = format!(
        "{}  - name: slow\n    image: {BUSYBOX}\n    command: [\"sh\", \"-c\", {script:?}]\n    startupProbe:\n      exec:\n        command: {check}\n      periodSeconds: 1\n      failureThreshold: 60\n    livenessProbe:\n      exec:\n        command: {check}\n      periodSeconds: 1\n      failureThreshold: 1\n",
        pod_header("slow", 1)
    );
    node.write_manifest("slow.yaml", &yaml);
    node.start(&[]);
    let s = wait_for("the container running but not started", LONG, || {
        ctr_status(&node, "slow", "slow").filter(|s| s["state"]["running"].is_object())
    });
    assert_eq!(s["started"], false, "{s}");
    assert_eq!(s["ready"], false, "{s}");
    let id = running_id(&node, "slow").expect("running");
    wait_for("started and ready", LONG, || {
        ctr_status(&node, "slow", "slow").filter(|s| s["started"] == true && s["ready"] == true)
    });
    wait_for("the liveness probe running after start-up", LONG, || {
        (probe_count(&node, "slow", "Liveness", "successful") >= 2).then_some(())
    });
    assert!(
        probe_count(&node, "slow", "Startup", "failed") >= 1,
        "start-up was probed while waiting"
    );
    assert_eq!(probe_count(&node, "slow", "Liveness", "failed"), 0);
    let s = ctr_status(&node, "slow", "slow").expect("status");
    assert_eq!(s["restartCount"], 0, "{s}");
    assert_eq!(running_id(&node, "slow"), Some(id), "the same instance");
}

fn a_probe_that_times_out_fails(rt: Rt) {
    let mut node = Node::on(rt, "pr-timeout");
    let idle = crate::util::SLEEPER;
    let yaml = format!(
        "{}  - name: stuck\n    image: {BUSYBOX}\n    command: [\"sh\", \"-c\", {idle:?}]\n    readinessProbe:\n      exec:\n        command: [\"sleep\", \"30\"]\n      timeoutSeconds: 1\n      periodSeconds: 2\n      failureThreshold: 1\n",
        pod_header("stuck", 1)
    );
    node.write_manifest("stuck.yaml", &yaml);
    node.start(&[]);
    wait_for("two timed-out readiness probes", LONG, || {
        (probe_count(&node, "stuck", "Readiness", "failed") >= 2).then_some(())
    });
    let log = node.log();
    assert!(log.contains("timed out after 1s"), "{log}");
    let s = ctr_status(&node, "stuck", "stuck").expect("status");
    assert_eq!(s["ready"], false, "{s}");
    assert!(s["state"]["running"].is_object(), "{s}");

    // One scheduler thread and bounded pools, whatever the number of probes; the
    // exec pool has threads while its (exec) probes run: they start on demand.
    let names = crate::util::thread_names(node.pid());
    assert_eq!(
        names.iter().filter(|n| *n == "prober").count(),
        1,
        "{names:?}"
    );
    assert!(
        names
            .iter()
            .filter(|n| n.starts_with("probe-worker-"))
            .count()
            <= rkubelet::prober::PROBE_WORKERS,
        "{names:?}"
    );
    let exec = names
        .iter()
        .filter(|n| n.starts_with("probe-exec-"))
        .count();
    assert!(
        (1..=rkubelet::prober::EXEC_WORKERS).contains(&exec),
        "{names:?}"
    );
}

/// Kills a helper process when the test ends, however it ends.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn https_probe_skips_certificate_verification() {
    use rkubelet::prober::handlers::Prober;
    use rkubelet::prober::spec::Handler;
    use runtime::container::ProbeResult;

    // A real TLS server with a self-signed certificate that no root vouches for.
    let server = crate::util::TlsServer::start();
    let port = server.port;

    let prober = Prober::new(std::sync::Arc::new(crate::util::docker()));
    let probe = |https| Handler::Http {
        https,
        host: Some("127.0.0.1".into()),
        port,
        path: "/".into(),
        headers: vec![],
    };
    let out = prober.run(&probe(true), "unused", None, Duration::from_secs(10));
    assert_eq!(out.result, ProbeResult::Success, "{out:?}");
    // Plain HTTP to a TLS port is no HTTP answer at all.
    let out = prober.run(&probe(false), "unused", None, Duration::from_secs(10));
    assert_eq!(out.result, ProbeResult::Failure, "{out:?}");
}

/// A gRPC health server (Python's grpcio, the reference C-core implementation), with
/// the health service written by hand over raw bytes so that only `grpcio` is needed:
/// "" and "up" serve, "down" does not, "slow" answers after 3 s, anything else is
/// NOT_FOUND. Arguments: bind address, port, and optionally `nohealth` to serve some
/// other service instead (every health call is then Unimplemented).
const GRPC_HEALTH_SERVER: &str = r#"
import sys, time
from concurrent import futures
import grpc

def check(req, ctx):
    service = req[2:2 + req[1]].decode() if len(req) >= 2 and req[0] == 0x0a else ""
    if service in ("", "up"):
        return b"\x08\x01"
    if service == "down":
        return b"\x08\x02"
    if service == "slow":
        time.sleep(3)
        return b"\x08\x01"
    ctx.abort(grpc.StatusCode.NOT_FOUND, "unknown service")

name = "other.v1.Other" if sys.argv[3:] == ["nohealth"] else "grpc.health.v1.Health"
handler = grpc.method_handlers_generic_handler(
    name, {"Check": grpc.unary_unary_rpc_method_handler(check)})
server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
server.add_generic_rpc_handlers((handler,))
server.add_insecure_port(sys.argv[1] + ":" + sys.argv[2])
server.start()
server.wait_for_termination()
"#;

/// Starts [`GRPC_HEALTH_SERVER`] on `bind` and a free port; stops it when dropped.
fn grpc_health_server(bind: &str) -> (KillOnDrop, u16) {
    grpc_server(bind, &[])
}

/// [`GRPC_HEALTH_SERVER`] with extra arguments.
fn grpc_server(bind: &str, extra: &[&str]) -> (KillOnDrop, u16) {
    use std::process::{Command, Stdio};
    let ok = Command::new("python3")
        .args(["-c", "import grpc"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "python3 with grpcio is needed for the gRPC probe tests: python3 -m pip install grpcio"
    );
    let script =
        std::env::temp_dir().join(format!("{}.py", crate::util::unique("rkubelet_it_grpc")));
    std::fs::write(&script, GRPC_HEALTH_SERVER).expect("script");
    let port = crate::util::free_port();
    let server = KillOnDrop(
        Command::new("python3")
            .arg(&script)
            .arg(bind)
            .arg(port.to_string())
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the gRPC server"),
    );
    wait_for("the gRPC server to listen", LONG, || {
        std::net::TcpStream::connect(("127.0.0.1", port)).ok()
    });
    // The interpreter has read the script once the port answers.
    let _ = std::fs::remove_file(&script);
    (server, port)
}

#[test]
fn grpc_probe_speaks_the_health_protocol_to_a_real_grpc_server() {
    use rkubelet::prober::handlers::Prober;
    use rkubelet::prober::spec::Handler;
    use runtime::container::ProbeResult;

    let (_server, port) = grpc_health_server("127.0.0.1");
    let prober = Prober::new(std::sync::Arc::new(crate::util::docker()));
    let run = |service: &str, timeout: u64| {
        let h = Handler::Grpc {
            port,
            service: service.into(),
        };
        prober.run(
            &h,
            "unused",
            Some("127.0.0.1"),
            Duration::from_secs(timeout),
        )
    };
    for service in ["", "up"] {
        let out = run(service, 10);
        assert_eq!(out.result, ProbeResult::Success, "{service:?}: {out:?}");
    }
    let out = run("down", 10);
    assert_eq!(out.result, ProbeResult::Failure);
    assert_eq!(
        out.message,
        "service unhealthy (responded with \"NOT_SERVING\")"
    );
    let out = run("nope", 10);
    assert_eq!(out.result, ProbeResult::Failure, "{out:?}");
    let out = run("slow", 1);
    assert_eq!(out.result, ProbeResult::Failure, "{out:?}");
    assert!(
        out.message
            .starts_with("timeout: health rpc did not complete within"),
        "{out:?}"
    );
}

#[test]
fn grpc_probe_reports_a_refused_call_in_upstreams_words() {
    use rkubelet::prober::handlers::Prober;
    use rkubelet::prober::spec::Handler;
    use runtime::container::ProbeResult;

    let prober = Prober::new(std::sync::Arc::new(crate::util::docker()));
    let run = |port: u16, service: &str| {
        let h = Handler::Grpc {
            port,
            service: service.into(),
        };
        prober.run(&h, "unused", Some("127.0.0.1"), Duration::from_secs(10))
    };
    // A health server that does not know the service: its status and message.
    let (_health, port) = grpc_health_server("127.0.0.1");
    let out = run(port, "nope");
    assert_eq!(out.result, ProbeResult::Failure, "{out:?}");
    assert_eq!(
        out.message,
        "error: health rpc probe failed: rpc error: code = NotFound desc = unknown service"
    );
    // A gRPC server without the health service at all: Unimplemented, which upstream
    // words on its own.
    let (_other, port) = grpc_server("127.0.0.1", &["nohealth"]);
    let out = run(port, "");
    assert_eq!(out.result, ProbeResult::Failure, "{out:?}");
    assert!(
        out.message.starts_with(
            "error: this server does not implement the grpc health protocol \
             (grpc.health.v1.Health): "
        ),
        "{out:?}"
    );
}

fn grpc_readiness_probe_of_a_host_network_pod_against_a_real_grpc_server(rt: Rt) {
    // A hostNetwork pod's IP is the node's, so a gRPC server on the host is what its
    // probe reaches: readiness follows the server's answer for the probe's service.
    let (_server, port) = grpc_health_server("0.0.0.0");
    let mut node = Node::on(rt, "pr-grpc");
    let idle = crate::util::SLEEPER;
    let mut yaml = pod_header("hg", 1).replace("spec:\n", "spec:\n  hostNetwork: true\n");
    for name in ["up", "down"] {
        yaml.push_str(&format!(
            "  - name: {name}\n    image: {BUSYBOX}\n    command: [\"sh\", \"-c\", {idle:?}]\n    readinessProbe:\n      grpc:\n        port: {port}\n        service: {name}\n      periodSeconds: 1\n"
        ));
    }
    node.write_manifest("hg.yaml", &yaml);
    node.start(&[]);
    wait_for("`up` ready through its gRPC probe", LONG, || {
        ctr_status(&node, "hg", "up").filter(|s| s["ready"] == true)
    });
    wait_for("`down` probed and failing", LONG, || {
        (probe_count(&node, "down", "Readiness", "failed") >= 2).then_some(())
    });
    let s = ctr_status(&node, "hg", "down").expect("status");
    assert_eq!(s["ready"], false, "{s}");
    let log = node.log();
    assert!(log.contains("NOT_SERVING"), "{log}");
}

crate::on_both_runtimes!(
    exec_liveness_failure_restarts_the_container_with_the_probe_grace,
    http_readiness_probe_flips_ready_both_ways,
    tcp_and_grpc_probes_gate_readiness,
    startup_probe_holds_liveness_until_it_succeeds,
    a_probe_that_times_out_fails,
    grpc_readiness_probe_of_a_host_network_pod_against_a_real_grpc_server,
);
