//! rkubelet on a CRI runtime: one `--container-runtime-endpoint` flag for Docker and
//! CRI, told apart by what answers (the log names it), and a static pod on a containerd
//! of the test's own (the CRI crate's harness, `crates/cri/tests/common`): its sandbox
//! and container run in containerd, `/pods` shows it Running and Ready with an address
//! from the CNI bridge, and deleting the manifest removes both; image preload is
//! refused with one line. Logs on containerd: `kubectl logs -f` across the container
//! log manager's rotations, `/containerLogs`'s options, the `/var/log/containers`
//! links (made again when missing), all gone with the pod.
//! The proxy to containerd's own streaming server refuses what the kubelet port
//! refuses, before the runtime is asked (exec, attach and port-forward themselves are
//! `streams.rs`'s tests, run on both runtimes).

use std::process::Command;

use serde_json::json;

use crate::containerd::{client, Containerd};
use crate::logs::Cluster as LogsCluster;
use crate::registry::pod_item;
use crate::streams::{text, Cluster, Proto};
use crate::util::{wait_for, Node, Rt, BUSYBOX, LONG, SLEEPER};
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

/// Container `c` of pod `rot`: two lines, then a numbered line every 20 ms (about
/// 2 KiB/s of CRI log); container `r`: its first run exits 1, the next stays up.
fn rotating_pod(node: &str) -> serde_json::Value {
    let talk = "echo first-out; echo first-err >&2; i=0; \
                while true; do i=$((i+1)); echo line-$i; usleep 20000; done";
    let restarts = "n=$(cat /d/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /d/n; \
                    echo run-$n; if [ $n = 1 ]; then exit 1; fi; ";
    serde_json::json!({
        "metadata": {"name": "rot"},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "volumes": [{"name": "d", "emptyDir": {}}],
            "containers": [
                {"name": "c", "image": BUSYBOX, "command": ["sh", "-c", talk]},
                {"name": "r", "image": BUSYBOX,
                 "command": ["sh", "-c", format!("{restarts}{SLEEPER}")],
                 "volumeMounts": [{"name": "d", "mountPath": "/d"}]}
            ]
        }
    })
}

/// The number of a `line-N` line.
fn line_number(line: &str) -> Option<u64> {
    line.strip_prefix("line-")?.parse().ok()
}

#[test]
fn logs_on_containerd_are_followed_across_rotations_with_their_links() {
    let node = Node::on(Rt::Containerd, "cri-logs");
    // Small files, checked every 3 s (upstream's smallest interval), 3 files at most.
    let config = node.dir.join("config.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         containerLogMaxSize: 4Ki\ncontainerLogMaxFiles: 3\ncontainerLogMonitorInterval: 3s\n",
    )
    .expect("config file");
    let k = LogsCluster::start_node(
        node,
        &[
            &format!("--config={}", config.display()),
            "--authorization-mode=AlwaysAllow",
        ],
    );
    let pod = k.api.create_pod(rotating_pod(&k.node.name));
    let uid = pod["metadata"]["uid"].as_str().expect("uid").to_string();
    let base = "/containerLogs/default/rot/c";
    wait_for("c's lines", LONG, || {
        let (code, _, body) = k.curl(&[], &format!("{base}?tailLines=1"));
        (code == 200 && body.starts_with("line-")).then_some(())
    });
    let mut follower = k.kubectl_follow(&["rot", "-c", "c"]);
    let log_dir = k
        .node
        .dir
        .join("pod-logs")
        .join(format!("default_rot_{uid}"))
        .join("c");
    let current = log_dir.join("0.log");

    // Two rotations: the first rotated file is compressed by the second.
    let began = std::time::Instant::now();
    wait_for("a compressed rotated log", LONG, || {
        std::fs::read_dir(&log_dir)
            .ok()?
            .flatten()
            .any(|e| e.file_name().to_string_lossy().ends_with(".gz"))
            .then_some(())
    });
    println!("two rotations took {:?}", began.elapsed());
    let names: Vec<String> = std::fs::read_dir(&log_dir)
        .expect("log dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".tmp"))
        .collect();
    assert!(names.len() <= 3, "containerLogMaxFiles 3: {names:?}");
    for n in &names {
        let suffix = n.strip_prefix("0.log").expect("0.log and its rotations");
        let stamp = suffix.trim_start_matches('.').trim_end_matches(".gz");
        assert!(
            suffix.is_empty() || (stamp.len() == 15 && stamp.as_bytes()[8] == b'-'),
            "rotated names are 0.log.YYYYMMDD-hhmmss[.gz]: {names:?}"
        );
    }

    // kubectl logs -f went on into the newest file: every line once, in order.
    // (Just after a rotation the current file may be empty: the next line is 20 ms off.)
    let newest_first = wait_for("a numbered line in the current file", LONG, || {
        std::fs::read_to_string(&current)
            .ok()?
            .lines()
            .filter_map(|l| l.rsplit(' ').next().and_then(line_number))
            .next()
    });
    follower.wait_line(&format!("line-{}", newest_first + 5));
    let numbers: Vec<u64> = follower
        .lines()
        .iter()
        .filter_map(|l| line_number(l))
        .collect();
    assert!(
        numbers.windows(2).all(|w| w[1] == w[0] + 1),
        "kubectl logs -f lost or repeated lines across rotations: {numbers:?}"
    );
    follower.kill();

    // The other options, on the current file.
    let body = |q: &str| {
        let (code, _, body) = k.curl(&[], &format!("{base}?{q}"));
        assert_eq!(code, 200, "{q}: {body}");
        body
    };
    let two = body("tailLines=2&timestamps=true");
    let lines: Vec<&str> = two.lines().collect();
    assert_eq!(lines.len(), 2, "{two}");
    for l in &lines {
        let (stamp, rest) = l.split_once(' ').expect("stamped");
        assert!(stamp.len() == 30 && stamp.ends_with('Z'), "{l}");
        assert!(line_number(rest).is_some(), "{l}");
    }
    assert_eq!(body("limitBytes=5"), "line-");
    let recent = body("sinceSeconds=2");
    assert!(
        !recent.is_empty() && recent.lines().all(|l| line_number(l).is_some()),
        "{recent}"
    );
    assert_eq!(body("stream=Stderr"), "", "first-err was rotated away");
    let (ok, out, err) = k.kubectl(&["logs", "rot", "-c", "c", "--tail=1"]);
    assert!(ok && out.lines().count() == 1, "{out}{err}");

    // The previous instance of a restarted container: its own file, 0.log.
    wait_for("r's first run to be the previous instance", LONG, || {
        let (code, _, body) = k.curl(&[], "/containerLogs/default/rot/r?previous=true");
        (code == 200 && body == "run-1\n").then_some(())
    });
    assert_eq!(
        k.curl(&[], "/containerLogs/default/rot/r").2,
        "run-2\n",
        "r's current instance, 1.log"
    );

    // The log shippers' link of each running container, to its CRI log file.
    let links = k.node.dir.join("container-logs");
    let id = wait_for("c's container ID in the pod's status", LONG, || {
        let pod = k.api.get_pod("default", "rot")?;
        pod["status"]["containerStatuses"]
            .as_array()?
            .iter()
            .find(|s| s["name"] == "c")?["containerID"]
            .as_str()?
            // The scheme is the runtime's name, as upstream's.
            .strip_prefix("containerd://")
            .map(str::to_string)
    });
    let link = links.join(format!("rot_default_c-{id}.log"));
    assert_eq!(std::fs::read_link(&link).expect("c's link"), current);
    // The Node names the runtime as the container IDs do.
    let version = wait_for("the Node's runtime version", LONG, || {
        let node = k.api.get("nodes", "", &k.node.name)?;
        node["status"]["nodeInfo"]["containerRuntimeVersion"]
            .as_str()
            .map(str::to_string)
    });
    assert!(version.starts_with("containerd://1."), "{version}");
    assert!(std::fs::read_to_string(&link)
        .expect("through the link")
        .contains(" stdout F line-"));
    // A link that went missing (a kubelet killed before making it) is made again by
    // the log manager's next pass.
    std::fs::remove_file(&link).expect("remove the link");
    wait_for("log-rotate to make the link again", LONG, || {
        std::fs::read_link(&link).ok().filter(|t| *t == current)
    });

    // The pod goes: its links and log files go with its containers.
    k.api.delete_pod("default", "rot");
    wait_for("the pod's links and log files gone", LONG, || {
        let links_left = std::fs::read_dir(&links)
            .map(|d| {
                d.flatten()
                    .any(|e| e.file_name().to_string_lossy().starts_with("rot_"))
            })
            .unwrap_or(false);
        let files_left = std::fs::read_dir(&log_dir)
            .map(|d| d.flatten().next().is_some())
            .unwrap_or(false);
        (!links_left && !files_left).then_some(())
    });
    drop(k);
}

/// `kubelet_runtime_operations_total{operation_type="<op>"}` on the read-only port.
fn runtime_operations(node: &Node, op: &str) -> u64 {
    let (_, metrics) = node.ro_get("/metrics");
    let want = format!("kubelet_runtime_operations_total{{operation_type=\"{op}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&want))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn the_proxy_to_containerds_streaming_server_refuses_what_the_port_refuses() {
    let tools = json!({
        "metadata": {"name": "cri-tools"},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [
            {"name": "web", "image": BUSYBOX, "command": ["sh", "-c", SLEEPER]}
        ]}
    });
    let flags = [
        "--authorization-mode=Webhook".to_string(),
        "--authentication-token-webhook".to_string(),
    ];
    let cluster = Cluster::start_on(Rt::Containerd, "cri-streams", &[tools], &[], &flags);
    // The stand-in (the test PKI's certificate) may proxy; mallory may not.
    cluster.api.allow("system:node:test", "proxy");
    cluster.api.set_token_user("tok-mallory", "mallory", &[]);
    // One exec through the proxy, so that the runtime's exec count has moved.
    let out = wait_for("an exec in the pod", LONG, || {
        let out = cluster.run(Proto::Spdy, &["exec", "cri-tools", "--", "true"], b"");
        out.status.success().then_some(out)
    });
    assert!(out.status.success());

    // A request without an upgrade: upstream's proxy refuses it (500).
    let pki = crate::apiserver::Pki::get();
    let out = Command::new("curl")
        .args(["-sk", "--max-time", "30", "-w", "\n%{http_code}"])
        .arg("--cert")
        .arg(&pki.client_cert)
        .arg("--key")
        .arg(&pki.client_key)
        .arg(format!(
            "https://127.0.0.1:{}/exec/default/cri-tools/web?command=true&stdout=1",
            cluster.port
        ))
        .output()
        .expect("curl");
    let answer = text(&out.stdout);
    assert_eq!(answer, "Upgrade request required\n\n500");

    // A client the port refuses: 403, and no exec asked of the runtime.
    let before = runtime_operations(&cluster.node, "exec");
    assert!(
        before >= 1,
        "the exec above went through the runtime: {before}"
    );
    let out = Command::new("curl")
        .args([
            "-sk",
            "--max-time",
            "30",
            "-w",
            "\n%{http_code}",
            "-X",
            "POST",
        ])
        .args(["-H", "Authorization: Bearer tok-mallory"])
        .args(["-H", "Connection: Upgrade", "-H", "Upgrade: SPDY/3.1"])
        .args(["-H", "X-Stream-Protocol-Version: v4.channel.k8s.io"])
        .arg(format!(
            "https://127.0.0.1:{}/exec/default/cri-tools/web?command=true&stdout=1",
            cluster.port
        ))
        .output()
        .expect("curl");
    let answer = text(&out.stdout);
    assert!(answer.ends_with("\n403"), "{answer}");
    assert!(answer.contains("user=mallory"), "{answer}");
    assert_eq!(runtime_operations(&cluster.node, "exec"), before);
}
