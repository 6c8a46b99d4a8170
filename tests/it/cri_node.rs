//! rkubelet on a CRI runtime: one `--container-runtime-endpoint` flag for Docker and
//! CRI, told apart by what answers (the log names it), and a static pod on a containerd
//! of the test's own (the CRI crate's harness, `crates/cri/tests/common`): its sandbox
//! and container run in containerd, `/pods` shows it Running and Ready with an address
//! from the CNI bridge, and deleting the manifest removes both; image preload is
//! refused with one line. Logs on containerd: `kubectl logs -f` across the container
//! log manager's rotations, `/containerLogs`'s options, the `/var/log/containers`
//! links (made again when missing), all gone with the pod.
//! Exec, attach and port-forward through kubectl reach
//! containerd's own streaming server through the kubelet port's proxy, WebSocket and
//! SPDY clients alike, and a client the port refuses never reaches the runtime.

use std::io::Read;
use std::process::{Command, Stdio};

use serde_json::json;

use crate::containerd::{client, Containerd};
use crate::logs::Cluster as LogsCluster;
use crate::registry::pod_item;
use crate::streams::{
    channel, http_get, read_channels, stream_threads, text, websocket, Cluster, Proto,
};
use crate::util::{free_port, wait_for, Node, BUSYBOX, LONG, SLEEPER};
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
    let c = Containerd::start();
    let mut node = Node::new("cri-logs");
    node.endpoint = c.endpoint();
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
    let text = std::fs::read_to_string(&current).expect("the current log");
    let newest_first = text
        .lines()
        .filter_map(|l| l.rsplit(' ').next().and_then(line_number))
        .next()
        .expect("a numbered line in the current file");
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
    drop(c);
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

/// Reads `child`'s stdout until it holds `want` (or it ends: a panic with `what`), then
/// kills it.
fn read_until(mut child: std::process::Child, want: &str, what: &str) {
    let mut stdout = child.stdout.take().expect("stdout");
    let mut seen = Vec::new();
    let mut b = [0u8; 256];
    while !text(&seen).contains(want) {
        let n = stdout.read(&mut b).expect("kubectl output");
        if n == 0 {
            let _ = child.wait();
            panic!("{what} ended before {want:?}: {}", text(&seen));
        }
        seen.extend_from_slice(&b[..n]);
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn kubectl_exec_attach_and_port_forward_reach_containerds_streaming_server() {
    let c = Containerd::start();
    let tools = json!({
        "metadata": {"name": "cri-tools"},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [
            {"name": "web", "image": BUSYBOX, "command": ["sh", "-c",
                "mkdir -p /tmp/www && echo hello-from-containerd > /tmp/www/index.html && \
                 httpd -p 80 -h /tmp/www && trap 'exit 0' TERM; \
                 while true; do sleep 1 & wait $!; done"]},
            {"name": "echo", "image": BUSYBOX, "stdin": true, "command": ["sh", "-c",
                "while read l; do echo \"got $l\"; done"]}
        ]}
    });
    let flags = [
        "--authorization-mode=Webhook".to_string(),
        "--authentication-token-webhook".to_string(),
    ];
    let cluster = Cluster::start_on("cri-streams", &[tools], &[], Some(c.endpoint()), &flags);
    // The stand-in (the test PKI's certificate) may proxy; mallory may not.
    cluster.api.allow("system:node:test", "proxy");
    cluster.api.set_token_user("tok-mallory", "mallory", &[]);

    for proto in [Proto::Spdy, Proto::WebSocket] {
        // Exec: stdin in, stdout back, the command's exit code kubectl's own.
        let out = wait_for("an exec in the pod", LONG, || {
            let out = cluster.run(
                proto,
                &[
                    "-v=4",
                    "exec",
                    "-i",
                    "cri-tools",
                    "-c",
                    "web",
                    "--",
                    "sh",
                    "-c",
                    "cat; exit 3",
                ],
                b"ping\n",
            );
            (out.status.code() == Some(3)).then_some(out)
        });
        assert_eq!(
            text(&out.stdout),
            "ping\n",
            "{proto:?}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains("command terminated with exit code 3"),
            "{proto:?}: {}",
            text(&out.stderr)
        );

        if proto == Proto::Spdy {
            // 10 MiB out and 4 MiB in and back, intact through the proxy's bounded
            // buffers.
            let out = cluster.run(
                proto,
                &[
                    "exec",
                    "cri-tools",
                    "-c",
                    "web",
                    "--",
                    "head",
                    "-c",
                    "10485760",
                    "/dev/zero",
                ],
                b"",
            );
            assert!(out.status.success(), "{}", text(&out.stderr));
            assert!(
                out.stdout.len() == 10 * 1024 * 1024 && out.stdout.iter().all(|b| *b == 0),
                "{} bytes",
                out.stdout.len()
            );
            let big: Vec<u8> = (0..4 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
            let out = cluster.run(
                proto,
                &["exec", "-i", "cri-tools", "-c", "web", "--", "cat"],
                &big,
            );
            assert!(out.status.success(), "{}", text(&out.stderr));
            assert!(out.stdout == big, "{} bytes back", out.stdout.len());
        }

        // Attach: a line in, its answer out.
        let mut child = cluster
            .kubectl(proto, &["attach", "-i", "cri-tools", "-c", "echo"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("kubectl attach");
        let mut stdin = child.stdin.take().expect("stdin");
        let feeder = std::thread::spawn(move || {
            use std::io::Write;
            // Until the session is up, lines may go nowhere: send a few.
            for i in 0..20 {
                if writeln!(stdin, "hello {i}").is_err() {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(300));
            }
        });
        read_until(child, "got hello", &format!("{proto:?} kubectl attach"));
        let _ = feeder.join();

        // Port-forward: a page from the pod's port 80.
        let local = free_port();
        let mut child = cluster
            .kubectl(
                proto,
                &[
                    "-v=4",
                    "port-forward",
                    "--address",
                    "127.0.0.1",
                    "pod/cri-tools",
                    &format!("{local}:80"),
                ],
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl port-forward");
        let stderr = child.stderr.take().expect("stderr");
        let log = std::thread::spawn(move || {
            let mut b = Vec::new();
            let mut stderr = stderr;
            let _ = stderr.read_to_end(&mut b);
            b
        });
        let mut stdout = child.stdout.take().expect("stdout");
        let mut seen = Vec::new();
        let mut b = [0u8; 256];
        while !text(&seen).contains("Forwarding from") {
            let n = stdout.read(&mut b).expect("kubectl output");
            assert!(
                n > 0,
                "{proto:?} kubectl port-forward ended: {}",
                text(&seen)
            );
            seen.extend_from_slice(&b[..n]);
        }
        let page = wait_for("a page through the forward", LONG, || {
            let a = http_get(local, "/index.html").ok()?;
            text(&a).contains("200 OK").then(|| text(&a))
        });
        let _ = child.kill();
        let _ = child.wait();
        let log = text(&log.join().unwrap_or_default());
        assert!(
            page.ends_with("hello-from-containerd\n"),
            "{proto:?}: {page}\n{log}"
        );
        if proto == Proto::WebSocket {
            // The tunnel (unwrapped by the kubelet into SPDY to containerd), not the
            // SPDY fallback.
            assert!(
                log.contains("tunneling_dialer.go")
                    && log.contains("negotiated protocol: portforward.k8s.io"),
                "kubectl used the tunnel: {log}"
            );
        }
    }

    // kubectl 1.32 offers WebSocket exec only as v5.channel.k8s.io, which containerd
    // 1.6's streaming server does not speak (kubectl fell back to SPDY above): the
    // older channel protocols through the proxy, straight to the port.
    let mut ws = websocket(
        cluster.port,
        "/exec/default/cri-tools/web?command=sh&command=-c&command=echo+a%3Bexit+7&stdout=1&stderr=1",
        "v4.channel.k8s.io",
    );
    let got = read_channels(&mut ws);
    assert_eq!(channel(&got, 1), b"a\n", "{got:?}");
    let status: serde_json::Value = serde_json::from_slice(&channel(&got, 3)).expect("status");
    assert_eq!(status["details"]["causes"][0]["message"], "7", "{status}");
    let mut ws = websocket(
        cluster.port,
        "/portForward/default/cri-tools?port=80",
        "v4.channel.k8s.io",
    );
    let mut request = vec![0u8];
    request.extend_from_slice(b"GET /index.html HTTP/1.0\r\n\r\n");
    ws.send(tungstenite::Message::binary(request))
        .expect("send");
    let mut data = Vec::new();
    while !text(&data).contains("hello-from-containerd") {
        match ws.read() {
            Ok(tungstenite::Message::Binary(b)) if b.first() == Some(&0) => {
                data.extend_from_slice(&b[1..])
            }
            Ok(_) => {}
            Err(e) => panic!("port-forward over v4.channel.k8s.io: {e}: {}", text(&data)),
        }
    }
    assert_eq!(&data[..2], &80u16.to_le_bytes());
    assert!(text(&data[2..]).contains("200 OK"), "{}", text(&data));
    drop(ws);

    // A client that goes away mid-session ends the proxied session (its stream thread)
    // within the session's 1 s tick.
    let pid = cluster.node.pid();
    let mut child = cluster
        .kubectl(
            Proto::Spdy,
            &[
                "exec",
                "-i",
                "cri-tools",
                "-c",
                "web",
                "--",
                "sleep",
                "1000",
            ],
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl exec");
    wait_for("the session's stream thread", LONG, || {
        (stream_threads(pid) == 1).then_some(())
    });
    let _ = child.kill();
    let _ = child.wait();
    let gone = std::time::Instant::now();
    wait_for("the stream thread to end", LONG, || {
        (stream_threads(pid) == 0).then_some(())
    });
    assert!(
        gone.elapsed() < std::time::Duration::from_secs(3),
        "the session outlived its client by {:?}",
        gone.elapsed()
    );

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
        before >= 2,
        "the execs above went through the runtime: {before}"
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
