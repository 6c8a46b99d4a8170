//! Exec, attach and port-forward on the kubelet port against real clients: kubectl
//! 1.32 through the test API server stand-in's byte-for-byte proxy (WebSocket with
//! `KUBECTL_REMOTE_COMMAND_WEBSOCKETS=true` / `KUBECTL_PORT_FORWARD_WEBSOCKETS=true`,
//! SPDY/3.1 with `=false`), a tungstenite client straight to the port for what kubectl
//! cannot send (the channel protocols it does not speak, a 100 MB frame), and the
//! Docker side of interactive exec and attach against the real engine. Exec, attach,
//! port-forward and the channel protocols run on both runtimes: on containerd the
//! kubelet port proxies them to containerd's own streaming server.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use runtime::{OutputKind, Runtime, StreamOptions, TermSize};
use rustls::pki_types::ServerName;
use serde_json::{json, Value};
use tungstenite::Message;

use crate::apiserver::{Options, Pki, TestApiServer};
use crate::util::{free_port, unique, wait_for, Node, Rt, BUSYBOX, LONG, SLEEPER};

/// Which protocol kubectl is made to speak.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Proto {
    /// WebSocket (`v5.channel.k8s.io`; port-forward: the SPDY tunnel).
    WebSocket,
    /// SPDY/3.1.
    Spdy,
}

impl Proto {
    /// A pod name unique to this protocol's test: stand-ins number pods alike, so
    /// the same name in two tests would be the same UID, the same Docker names, and
    /// each node would take the other's containers for stale ones.
    pub(crate) fn pod(self, name: &str) -> String {
        match self {
            Proto::WebSocket => format!("{name}-ws"),
            Proto::Spdy => format!("{name}-spdy"),
        }
    }

    fn env(self) -> &'static str {
        match self {
            Proto::WebSocket => "true",
            Proto::Spdy => "false",
        }
    }
}

/// A kubelet with its authenticated port, an API server stand-in that runs its pods
/// and proxies their subresources to it, and a kubeconfig for kubectl.
pub(crate) struct Cluster {
    pub(crate) api: TestApiServer,
    pub(crate) node: Node,
    kubectl_config: PathBuf,
    pub(crate) port: u16,
}

impl Cluster {
    /// Starts the kubelet on Docker with the pods `pods` (API objects, bound to this
    /// node) and waits until every container named in `running` runs (`pod/container`).
    fn start(prefix: &str, pods: &[Value], running: &[&str]) -> Cluster {
        Cluster::start_on(Rt::Docker, prefix, pods, running, &[])
    }

    /// [`Cluster::start`] on the runtime `rt`, with more kubelet flags.
    pub(crate) fn start_on(
        rt: Rt,
        prefix: &str,
        pods: &[Value],
        running: &[&str],
        extra: &[String],
    ) -> Cluster {
        let pki = Pki::get();
        let api = TestApiServer::start(Options::default());
        let mut node = Node::on(rt, prefix);
        for p in pods {
            let mut p = p.clone();
            p["spec"]["nodeName"] = json!(node.name);
            api.create_pod(p);
        }
        let kc = api.kubeconfig(&node.dir, "kubelet.kubeconfig", "token: good-token");
        let port = free_port();
        let args = [
            format!("--kubeconfig={}", kc.display()),
            format!("--port={port}"),
            format!("--tls-cert-file={}", pki.server_cert.display()),
            format!("--tls-private-key-file={}", pki.server_key.display()),
            format!("--client-ca-file={}", pki.ca.display()),
            "--anonymous-auth=false".to_string(),
        ];
        let args: Vec<&str> = args.iter().chain(extra).map(String::as_str).collect();
        node.start(&args);
        wait_for("the kubelet port to listen", LONG, || {
            TcpStream::connect(("127.0.0.1", port)).ok()
        });
        api.set_kubelet(&node.name, port);
        for r in running {
            wait_for(&format!("{r} to run"), LONG, || {
                node.running().contains_key(*r).then_some(())
            });
        }
        // kubectl port-forward wants the phase Running: the kubelet's status manager
        // writes it.
        for p in pods {
            let name = p["metadata"]["name"].as_str().unwrap_or_default();
            wait_for(&format!("{name} Running in the API"), LONG, || {
                let obj = api.get_pod("default", name)?;
                (obj["status"]["phase"] == "Running").then_some(())
            });
        }
        let kubectl_config = api.kubeconfig(&node.dir, "user.kubeconfig", "token: good-token");
        Cluster {
            api,
            node,
            kubectl_config,
            port,
        }
    }

    /// A kubectl command speaking `proto`, with its own discovery cache.
    pub(crate) fn kubectl(&self, proto: Proto, args: &[&str]) -> Command {
        let mut c = Command::new("kubectl");
        c.env("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", proto.env())
            .env("KUBECTL_PORT_FORWARD_WEBSOCKETS", proto.env())
            .arg("--kubeconfig")
            .arg(&self.kubectl_config)
            .arg("--cache-dir")
            .arg(self.node.dir.join("kubectl-cache"))
            .args(args);
        c
    }

    /// Runs kubectl with `input` on its stdin; its output.
    pub(crate) fn run(&self, proto: Proto, args: &[&str], input: &[u8]) -> Output {
        let mut child = self
            .kubectl(proto, args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn kubectl");
        let mut stdin = child.stdin.take().expect("stdin");
        let input = input.to_vec();
        let feeder = std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
        let out = wait_output(child, LONG);
        let _ = feeder.join();
        out
    }
}

/// Waits for `child` at most `timeout` (killing it then), collecting its output.
pub(crate) fn wait_output(mut child: Child, timeout: Duration) -> Output {
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = stdout.read_to_end(&mut b);
        b
    });
    let err = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = stderr.read_to_end(&mut b);
        b
    });
    let until = Instant::now() + timeout;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() >= until {
            let _ = child.kill();
            break child.wait().expect("wait");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

pub(crate) fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A pod `name` with busybox containers (name, shell command).
fn pod(name: &str, containers: &[(&str, &str)]) -> Value {
    let containers: Vec<Value> = containers
        .iter()
        .map(|(c, cmd)| json!({"name": c, "image": BUSYBOX, "command": ["sh", "-c", cmd]}))
        .collect();
    json!({
        "metadata": {"name": name},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": containers}
    })
}

fn sha256(data: &[u8]) -> String {
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("sha256sum");
    let mut stdin = child.stdin.take().expect("stdin");
    let data = data.to_vec();
    let feeder = std::thread::spawn(move || stdin.write_all(&data));
    let out = child.wait_with_output().expect("sha256sum");
    let _ = feeder.join();
    text(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

fn exec_tests(rt: Rt, proto: Proto) {
    let name = proto.pod("sh");
    let sh = name.as_str();
    let c = Cluster::start_on(
        rt,
        "exec",
        &[pod(sh, &[("c", SLEEPER)])],
        &[&format!("{sh}/c")],
        &[],
    );

    // The plainest exec; kubectl says which protocol it got.
    let out = c.run(
        proto,
        &["-v=4", "exec", sh, "--", "cat", "/etc/hostname"],
        b"",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), format!("{sh}\n"));
    match (proto, rt) {
        (Proto::WebSocket, Rt::Docker) => assert!(
            text(&out.stderr).contains("The subprotocol is v5.channel.k8s.io"),
            "{}",
            text(&out.stderr)
        ),
        // The kubelet carries the upgrade through to containerd's streaming server,
        // and containerd 1.6's does not speak v5.channel.k8s.io (kubectl 1.32's only
        // WebSocket protocol): kubectl falls back to SPDY, as with upstream's kubelet
        // on that containerd.
        (Proto::WebSocket, Rt::Containerd) => assert!(
            text(&out.stderr).contains("falling back to SPDY")
                || text(&out.stderr).contains("fallback"),
            "{}",
            text(&out.stderr)
        ),
        (Proto::Spdy, _) => {}
    }

    // Exit codes: kubectl's own exit code is the command's.
    for code in [0, 1, 42] {
        let script = format!("echo out; echo err >&2; exit {code}");
        let out = c.run(proto, &["exec", sh, "--", "sh", "-c", &script], b"");
        assert_eq!(out.status.code(), Some(code), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "out\n");
        assert!(
            text(&out.stderr).starts_with("err\n"),
            "{}",
            text(&out.stderr)
        );
        if code != 0 {
            assert!(
                text(&out.stderr).contains(&format!("command terminated with exit code {code}")),
                "{}",
                text(&out.stderr)
            );
        }
    }

    // 10 MB of output, intact.
    let out = c.run(
        proto,
        &[
            "exec",
            sh,
            "--",
            "sh",
            "-c",
            "head -c 10485760 /dev/urandom > /tmp/big && sha256sum /tmp/big",
        ],
        b"",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let want = text(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string();
    let out = c.run(proto, &["exec", sh, "--", "cat", "/tmp/big"], b"");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(out.stdout.len(), 10 * 1024 * 1024);
    assert_eq!(sha256(&out.stdout), want);

    // Stdin piped through, and 4 MB of it back intact (its end reaches `cat`).
    let out = c.run(proto, &["exec", "-i", sh, "--", "cat"], b"hi\n");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "hi\n");
    let big: Vec<u8> = (0..4 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let out = c.run(proto, &["exec", "-i", sh, "--", "cat"], &big);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(out.stdout == big, "{} bytes back", out.stdout.len());

    // An interactive shell with a terminal, driven through a pty (`script`).
    let mut child = Command::new("script")
        .args(["-qec"])
        .arg(format!(
            // The pty's size is what kubectl sends on the resize stream.
            "stty cols 77 rows 22; kubectl --kubeconfig {} --cache-dir {} exec -it {sh} -- sh",
            c.kubectl_config.display(),
            c.node.dir.join("kubectl-cache").display()
        ))
        .arg("/dev/null")
        .env("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", proto.env())
        .env("TERM", "dumb")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script");
    let mut stdin = child.stdin.take().expect("stdin");
    let feeder = std::thread::spawn(move || {
        // The shell starts before reading; give the session a moment per line.
        for line in [
            "stty size; echo tty=$(tty)\n",
            "echo $((6*7))x\n",
            "exit 3\n",
        ] {
            std::thread::sleep(Duration::from_millis(500));
            if stdin.write_all(line.as_bytes()).is_err() {
                return;
            }
        }
        std::thread::sleep(Duration::from_secs(2));
    });
    let out = wait_output(child, LONG);
    let _ = feeder.join();
    let shown = text(&out.stdout);
    assert!(shown.contains("42x"), "{shown}\n{}", text(&out.stderr));
    assert!(shown.contains("tty=/dev/pts/"), "{shown}");
    assert!(
        shown.contains("22 77"),
        "the terminal's size reached the exec: {shown}"
    );
    assert_eq!(
        out.status.code(),
        Some(3),
        "{shown}\n{}\nrkubelet: {}",
        text(&out.stderr),
        c.node
            .log()
            .lines()
            .filter(|l| l.starts_with('I') || l.starts_with('W') || l.starts_with('E'))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

fn kubectl_exec_over_websocket(rt: Rt) {
    exec_tests(rt, Proto::WebSocket);
}

fn kubectl_exec_over_spdy(rt: Rt) {
    exec_tests(rt, Proto::Spdy);
}

fn attach_tests(rt: Rt, proto: Proto) {
    let name = proto.pod("att");
    let att = name.as_str();
    let mut cat = pod(
        att,
        &[("talker", "while true; do echo tick; sleep 0.2; done")],
    );
    cat["spec"]["containers"]
        .as_array_mut()
        .expect("containers")
        .push(json!({
            "name": "cat", "image": BUSYBOX, "command": ["cat"],
            "stdin": true, "stdinOnce": true,
        }));
    let c = Cluster::start_on(
        rt,
        "attach",
        &[cat],
        &[&format!("{att}/talker"), &format!("{att}/cat")],
        &[],
    );

    // Output of a running main process, until a line has come.
    let mut child = c
        .kubectl(proto, &["attach", att, "-c", "talker"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl attach");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut seen = Vec::new();
    let mut b = [0u8; 256];
    while !text(&seen).contains("tick\n") {
        let n = stdout.read(&mut b).expect("kubectl attach output");
        if n == 0 {
            let _ = child.wait();
            panic!("kubectl attach ended: {}", text(&seen));
        }
        seen.extend_from_slice(&b[..n]);
    }
    let _ = child.kill();
    let _ = child.wait();

    // Stdin to a process that reads it; its end closes the container's stdin (stdinOnce).
    let out = c.run(proto, &["attach", "-i", att, "-c", "cat"], b"hello\n");
    assert!(
        text(&out.stdout).contains("hello\n"),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// The stream threads (`stream-N`) of the kubelet process.
pub(crate) fn stream_threads(pid: u32) -> usize {
    crate::util::thread_names(pid)
        .iter()
        .filter(|t| t.starts_with("stream-"))
        .count()
}

fn client_leaves_tests(rt: Rt, proto: Proto) {
    let name = proto.pod("leave");
    let c = Cluster::start_on(
        rt,
        "leave",
        &[pod(&name, &[("c", SLEEPER)])],
        &[&format!("{name}/c")],
        &[],
    );
    let pid = c.node.pid();
    for args in [
        vec!["exec", "-i", name.as_str(), "--", "sleep", "1000"],
        vec!["exec", name.as_str(), "--", "sleep", "1000"],
    ] {
        let mut child = c
            .kubectl(proto, &args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("kubectl exec");
        wait_for("the session's stream thread", LONG, || {
            (stream_threads(pid) == 1).then_some(())
        });
        // The process runs; the client goes away mid-session.
        let _ = child.kill();
        let _ = child.wait();
        let gone = Instant::now();
        wait_for("the stream thread to end", LONG, || {
            (stream_threads(pid) == 0).then_some(())
        });
        // The stand-in notices within its 200 ms poll, the session within its 1 s tick.
        assert!(
            gone.elapsed() < Duration::from_secs(3),
            "{args:?}: the session outlived its client by {:?}",
            gone.elapsed()
        );
    }
}

fn a_session_ends_with_its_client_over_websocket(rt: Rt) {
    client_leaves_tests(rt, Proto::WebSocket);
}

fn a_session_ends_with_its_client_over_spdy(rt: Rt) {
    client_leaves_tests(rt, Proto::Spdy);
}

fn kubectl_attach_over_websocket(rt: Rt) {
    attach_tests(rt, Proto::WebSocket);
}

fn kubectl_attach_over_spdy(rt: Rt) {
    attach_tests(rt, Proto::Spdy);
}

/// One HTTP/1.0 GET of `path` on 127.0.0.1:`port`: the whole answer.
pub(crate) fn http_get(port: u16, path: &str) -> std::io::Result<Vec<u8>> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n")?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer)?;
    Ok(answer)
}

fn port_forward_tests(rt: Rt, proto: Proto) {
    let name = proto.pod("web");
    let web_name = name.as_str();
    let web = pod(
        web_name,
        &[(
            "httpd",
            // httpd binds before it goes to the background; /tmp/sum says it is up.
            "mkdir -p /tmp/www && echo hello-from-pod > /tmp/www/index.html && \
             head -c 4194304 /dev/urandom > /tmp/www/big && httpd -p 80 -h /tmp/www && \
             sha256sum /tmp/www/big > /tmp/sum && \
             trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done",
        )],
    );
    let c = Cluster::start_on(rt, "pf", &[web], &[&format!("{web_name}/httpd")], &[]);
    let want = wait_for("httpd in the pod", LONG, || {
        let out = c.run(proto, &["exec", web_name, "--", "cat", "/tmp/sum"], b"");
        let sum = text(&out.stdout).split_whitespace().next()?.to_string();
        out.status.success().then_some(sum)
    });
    let local = free_port();
    let mut child = c
        .kubectl(
            proto,
            &[
                "-v=4",
                "port-forward",
                "--address",
                "127.0.0.1",
                &format!("pod/{web_name}"),
                &format!("{local}:80"),
            ],
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl port-forward");
    let mut stdout = child.stdout.take().expect("stdout");
    let stderr = child.stderr.take().expect("stderr");
    let log = std::thread::spawn(move || {
        let mut b = Vec::new();
        let mut stderr = stderr;
        let _ = stderr.read_to_end(&mut b);
        b
    });
    let mut seen = Vec::new();
    let mut b = [0u8; 256];
    while !text(&seen).contains("Forwarding from") {
        let n = stdout.read(&mut b).expect("kubectl output");
        if n == 0 {
            let _ = child.wait();
            panic!(
                "kubectl port-forward ended: {}{}",
                text(&seen),
                text(&log.join().unwrap_or_default())
            );
        }
        seen.extend_from_slice(&b[..n]);
    }

    // 100 connections at once, each a whole HTTP exchange with the pod.
    let clients: Vec<_> = (0..100)
        .map(|_| std::thread::spawn(move || http_get(local, "/index.html")))
        .collect();
    let mut failures = Vec::new();
    for (i, h) in clients.into_iter().enumerate() {
        match h.join().expect("client thread") {
            Ok(a) if text(&a).contains("200 OK") && text(&a).ends_with("hello-from-pod\n") => {}
            other => failures.push(format!("{i}: {other:?}")),
        }
    }
    if !failures.is_empty() {
        let _ = child.kill();
        let _ = child.wait();
        let log = text(&log.join().unwrap_or_default());
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        panic!(
            "{} failed: {:?}\nkubectl: {}\nrkubelet: {}",
            failures.len(),
            &failures[..failures.len().min(3)],
            tail.join("\n"),
            c.node
                .log()
                .lines()
                .filter(|l| l.contains("stream-") && !l.contains("Call<") && !l.contains("pool"))
                .rev()
                .take(30)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }

    // 4 MB intact.
    let answer = http_get(local, "/big").expect("big");
    let body_at = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("head")
        + 4;
    assert_eq!(answer.len() - body_at, 4 * 1024 * 1024);
    assert_eq!(sha256(&answer[body_at..]), want);

    let _ = child.kill();
    let _ = child.wait();
    let log = text(&log.join().unwrap_or_default());
    if proto == Proto::WebSocket {
        // The WebSocket tunnel (tunneling_dialer.go), not the SPDY fallback.
        assert!(
            log.contains("tunneling_dialer.go")
                && log.contains("negotiated protocol: portforward.k8s.io"),
            "kubectl used the tunnel: {log}"
        );
    }
}

fn kubectl_port_forward_over_websocket(rt: Rt) {
    port_forward_tests(rt, Proto::WebSocket);
}

fn kubectl_port_forward_over_spdy(rt: Rt) {
    port_forward_tests(rt, Proto::Spdy);
}

crate::on_both_runtimes!(
    kubectl_exec_over_websocket,
    kubectl_exec_over_spdy,
    kubectl_attach_over_websocket,
    kubectl_attach_over_spdy,
    a_session_ends_with_its_client_over_websocket,
    a_session_ends_with_its_client_over_spdy,
    kubectl_port_forward_over_websocket,
    kubectl_port_forward_over_spdy,
    websocket_channel_protocols_and_port_forward_straight_to_the_port,
);

// ---------------------------------------------------------------------------------
// A WebSocket client straight to the kubelet port.

pub(crate) type Tls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// A TLS connection to the kubelet port with the test client certificate.
fn tls_connect(port: u16) -> Tls {
    let config = Pki::get().client_config();
    let tcp = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let name = ServerName::try_from("127.0.0.1").expect("name");
    let conn = rustls::ClientConnection::new(config, name).expect("conn");
    rustls::StreamOwned::new(conn, tcp)
}

/// A WebSocket to `path` on the kubelet port offering `protocols`.
pub(crate) fn websocket(port: u16, path: &str, protocols: &str) -> tungstenite::WebSocket<Tls> {
    let req = tungstenite::http::Request::builder()
        .uri(format!("wss://127.0.0.1:{port}{path}"))
        .header("Host", format!("127.0.0.1:{port}"))
        .header("Connection", "Upgrade")
        .header("Upgrade", "websocket")
        .header("Sec-WebSocket-Version", "13")
        .header(
            "Sec-WebSocket-Key",
            tungstenite::handshake::client::generate_key(),
        )
        .header("Sec-WebSocket-Protocol", protocols)
        .body(())
        .expect("request");
    let (ws, resp) = tungstenite::client::client(req, tls_connect(port)).expect("upgrade");
    assert_eq!(resp.status().as_u16(), 101);
    ws
}

/// Every data message until the server closes: (channel, payload).
pub(crate) fn read_channels(ws: &mut tungstenite::WebSocket<Tls>) -> Vec<(u8, Vec<u8>)> {
    let mut got = Vec::new();
    loop {
        match ws.read() {
            Ok(Message::Binary(b)) if !b.is_empty() => got.push((b[0], b[1..].to_vec())),
            Ok(Message::Text(t)) if !t.is_empty() => {
                got.push((t.as_bytes()[0], t.as_bytes()[1..].to_vec()))
            }
            Ok(_) => {}
            Err(_) => return got,
        }
    }
}

/// The payload of `ch` across messages.
pub(crate) fn channel(got: &[(u8, Vec<u8>)], ch: u8) -> Vec<u8> {
    got.iter()
        .filter(|(c, _)| *c == ch)
        .flat_map(|(_, d)| d.clone())
        .collect()
}

fn websocket_channel_protocols_and_port_forward_straight_to_the_port(rt: Rt) {
    let web = pod(
        "wsweb",
        &[(
            "httpd",
            "mkdir -p /tmp/www && echo hello-from-pod > /tmp/www/index.html && \
             exec httpd -f -p 8080 -h /tmp/www",
        )],
    );
    let c = Cluster::start_on(rt, "wsdirect", &[web], &["wsweb/httpd"], &[]);
    let uid = c
        .api
        .get_pod("default", "wsweb")
        .and_then(|p| p["metadata"]["uid"].as_str().map(str::to_string))
        .expect("uid");

    // v4 binary: the status is JSON with the exit code.
    let mut ws = websocket(
        c.port,
        "/exec/default/wsweb/httpd?command=sh&command=-c&command=echo+a%3Bexit+7&stdout=1&stderr=1",
        "v4.channel.k8s.io",
    );
    let got = read_channels(&mut ws);
    assert_eq!(channel(&got, 1), b"a\n");
    let status: Value = serde_json::from_slice(&channel(&got, 3)).expect("status");
    assert_eq!(status["details"]["causes"][0]["message"], "7");

    // base64, with the uid form of the path: text messages, the channel as a digit.
    let mut ws = websocket(
        c.port,
        &format!("/exec/default/wsweb/{uid}/httpd?command=echo&command=hi&stdout=1"),
        "base64.channel.k8s.io",
    );
    let got = read_channels(&mut ws);
    let out = channel(&got, b'1');
    assert_eq!(out, b"aGkK", "base64 of \"hi\\n\"");

    // A wrong uid is not the pod's container.
    let mut s = tls_connect(c.port);
    write!(
        s,
        "GET /exec/default/wsweb/not-the-uid/httpd?command=true&stdout=1 HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    .expect("write");
    s.flush().expect("flush");
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 500 "), "{answer}");
    assert!(
        answer.contains("container not found (\"httpd\")"),
        "{answer}"
    );

    // Port-forward over v4.channel.k8s.io: the port first on both channels, then the
    // pod's answer on the data channel.
    let mut ws = websocket(
        c.port,
        "/portForward/default/wsweb?port=8080",
        "v4.channel.k8s.io",
    );
    let mut request = vec![0u8];
    request.extend_from_slice(b"GET / HTTP/1.0\r\n\r\n");
    ws.send(Message::binary(request)).expect("send");
    let got = read_channels(&mut ws);
    let data = channel(&got, 0);
    assert_eq!(&data[..2], &8080u16.to_le_bytes());
    let body = text(&data[2..]);
    assert!(
        body.contains("200 OK") && body.ends_with("hello-from-pod\n"),
        "{body}"
    );
    assert_eq!(channel(&got, 1), 8080u16.to_le_bytes());

    // A port nobody listens on: the error channel says so.
    let mut ws = websocket(
        c.port,
        "/portForward/default/wsweb?port=9",
        "v4.channel.k8s.io",
    );
    let got = read_channels(&mut ws);
    let err = text(&channel(&got, 1)[2..]);
    // The message is the runtime's: Docker's side (the kubelet's own forwarder) names
    // the pod, containerd's streaming server its sandbox ID, as with upstream's
    // kubelet on each.
    let pod_named = match rt {
        Rt::Docker => "wsweb_default, uid ",
        Rt::Containerd => "",
    };
    assert!(
        err.starts_with(&format!("error forwarding port 9 to pod {pod_named}"))
            && err.contains("refused"),
        "{err}"
    );
}

#[test]
fn a_100_mb_websocket_frame_is_refused_and_healthz_stays_fast() {
    let c = Cluster::start("wsbig", &[pod("wsbig", &[("c", SLEEPER)])], &["wsbig/c"]);
    let rss = |pid: u32| -> u64 {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    let before = rss(c.node.pid());
    let mut ws = websocket(
        c.port,
        "/exec/default/wsbig/c?command=cat&stdin=1&stdout=1",
        "v5.channel.k8s.io",
    );
    // A binary frame announcing 100 MB (masked, as a client's must be), then a
    // little of its payload.
    let len: u64 = 100 * 1024 * 1024;
    let mut frame = vec![0x82, 0xFF];
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(&[1, 2, 3, 4]);
    frame.extend_from_slice(&[0u8; 64 * 1024]);
    let started = Instant::now();
    let sock = ws.get_mut();
    let _ = sock.write_all(&frame);
    let _ = sock.flush();
    // Meanwhile the node answers its health checks at once.
    for _ in 0..5 {
        let t = Instant::now();
        let (code, _) = c.node.healthz_get("/healthz");
        assert_eq!(code, 200);
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    }
    // The session ends: a close frame (1009) or the connection closed.
    let mut closed_with = None;
    loop {
        match ws.read() {
            Ok(Message::Close(f)) => closed_with = f.map(|f| u16::from(f.code)),
            Ok(_) => {}
            Err(_) => break,
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert!(matches!(closed_with, None | Some(1009)), "{closed_with:?}");
    let after = rss(c.node.pid());
    assert!(
        after < before + 50 * 1024,
        "RSS grew from {before} kB to {after} kB"
    );
    // The port still serves.
    let mut ws = websocket(
        c.port,
        "/exec/default/wsbig/c?command=echo&command=ok&stdout=1",
        "v5.channel.k8s.io",
    );
    assert_eq!(channel(&read_channels(&mut ws), 1), b"ok\n");
}

/// A `/proc/<pid>/status` figure in kB (`VmRSS`, `VmHWM`), 0 if unreadable.
fn proc_status_kb(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// An exec over SPDY/3.1 straight to the kubelet port: the upgrade, the error, stdin
/// and stdout streams opened and replied to. Returns the connection and a decoder
/// holding what came after the `101`.
fn spdy_exec(port: u16, path: &str) -> (Tls, wire::spdy::Decoder) {
    use wire::spdy::{Decoder, Encoder, Frame};
    let mut s = tls_connect(port);
    s.sock
        .set_write_timeout(Some(Duration::from_secs(60)))
        .expect("write timeout");
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\
         X-Stream-Protocol-Version: v4.channel.k8s.io\r\nContent-Length: 0\r\n\r\n"
    )
    .expect("upgrade request");
    s.flush().expect("flush");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte).expect("the upgrade's answer");
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 101 "), "{}", text(&head));
    let (mut enc, mut dec) = (Encoder::new(), Decoder::default());
    let mut out = Vec::new();
    for (id, kind) in [(1, "error"), (3, "stdin"), (5, "stdout")] {
        let syn = Frame::SynStream {
            stream_id: id,
            associated_to: 0,
            priority: 0,
            slot: 0,
            flags: 0,
            headers: vec![("streamtype".into(), kind.into())],
        };
        enc.encode(&syn, &mut out).expect("encode");
    }
    s.write_all(&out).expect("streams");
    let mut replies = 0;
    while replies < 3 {
        match dec.next_frame().expect("frame") {
            Some(Frame::SynReply { .. }) => replies += 1,
            Some(other) => panic!("before the replies: {other:?}"),
            None => {
                let mut buf = [0u8; 4096];
                let n = s.read(&mut buf).expect("the replies");
                assert!(n > 0, "closed before the replies");
                dec.feed(&buf[..n]);
            }
        }
    }
    (s, dec)
}

#[test]
fn spdy_data_frames_announcing_16_mib_end_their_sessions_and_rss_stays_bounded() {
    // 32 exec sessions, each announcing a 16 MiB DATA frame on stdin and sending all
    // of it but the last byte: a kubelet that buffers frames whole holds ~512 MiB.
    const SESSIONS: usize = 32;
    const ANNOUNCED: usize = 0xFF_FFFF;
    let c = Cluster::start(
        "spdybig",
        &[pod("spdybig", &[("c", SLEEPER)])],
        &["spdybig/c"],
    );
    let pid = c.node.pid();
    let (tx, rx) = std::sync::mpsc::channel();
    for _ in 0..SESSIONS {
        let (tx, port) = (tx.clone(), c.port);
        std::thread::spawn(move || {
            let (mut s, _) =
                spdy_exec(port, "/exec/default/spdybig/c?command=cat&stdin=1&stdout=1");
            let mut frame = 3u32.to_be_bytes().to_vec();
            frame.extend_from_slice(&(ANNOUNCED as u32).to_be_bytes());
            let chunk = vec![0u8; 64 * 1024];
            let mut sent = 0;
            let mut wrote = s.write_all(&frame).and_then(|_| s.flush());
            while wrote.is_ok() && sent < ANNOUNCED - 1 {
                let n = chunk.len().min(ANNOUNCED - 1 - sent);
                wrote = s.write_all(&chunk[..n]).and_then(|_| s.flush());
                sent += n;
            }
            // The connection stays open: a kubelet that buffers keeps holding.
            let _ = tx.send((s, wrote.is_ok()));
        });
    }
    drop(tx);
    let mut sessions = Vec::new();
    let mut peak_rss = 0;
    wait_for("every session to send its frame", LONG, || {
        peak_rss = peak_rss.max(proc_status_kb(pid, "VmRSS"));
        while let Ok(s) = rx.try_recv() {
            sessions.push(s);
        }
        (sessions.len() == SESSIONS).then_some(())
    });
    let hwm = proc_status_kb(pid, "VmHWM");
    let limit = 300 * 1024;
    assert!(
        peak_rss < limit && hwm < limit,
        "RSS must stay under 300 MiB: VmRSS peaked at {peak_rss} kB seen, VmHWM {hwm} kB"
    );
    // Each session was ended by the kubelet at the frame's header: its connection is
    // closed (after a GOAWAY at most), not held open with the bytes buffered.
    let whole = sessions.iter().filter(|(_, wrote)| *wrote).count();
    assert_eq!(whole, 0, "sessions that took all 16 MiB");
    for (mut s, _) in sessions {
        let mut buf = [0u8; 4096];
        let closed = loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break true,
                Ok(_) => {}
            }
        };
        assert!(closed);
    }
    wait_for("the log line of a refused frame", LONG, || {
        c.node
            .log()
            .contains(
                "spdy: closing the session: spdy session failed: spdy DATA on stream 3: \
                 16777215 bytes, over the limit of 1048576",
            )
            .then_some(())
    });
    // The port still serves SPDY exec, with a 32 KiB frame as kubectl writes them.
    let (mut s, mut dec) = spdy_exec(
        c.port,
        "/exec/default/spdybig/c?command=wc&command=-c&stdin=1&stdout=1",
    );
    let mut frames = Vec::new();
    let mut enc = wire::spdy::Encoder::new();
    for (flags, data) in [(0, vec![b'x'; 32 * 1024]), (wire::spdy::FLAG_FIN, vec![])] {
        let f = wire::spdy::Frame::Data {
            stream_id: 3,
            flags,
            data,
        };
        enc.encode(&f, &mut frames).expect("encode");
    }
    s.write_all(&frames).expect("stdin");
    let mut stdout = Vec::new();
    loop {
        match dec.next_frame().expect("frame") {
            Some(wire::spdy::Frame::Data {
                stream_id: 5, data, ..
            }) => stdout.extend_from_slice(&data),
            Some(wire::spdy::Frame::GoAway { .. }) => break,
            Some(_) => {}
            None => {
                let mut buf = [0u8; 4096];
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => dec.feed(&buf[..n]),
                }
            }
        }
    }
    assert_eq!(text(&stdout).trim(), "32768");
}

// ---------------------------------------------------------------------------------
// The Docker side, against the real engine.

/// A running busybox container of our own; removed on drop.
struct Scratch {
    docker: docker::Docker,
    id: String,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = self.docker.remove_container(&self.id);
    }
}

fn scratch_container(tty: bool, stdin: bool, cmd: &[&str]) -> Scratch {
    let docker = crate::util::docker();
    let config = runtime::config::ContainerConfig {
        command: Some(cmd.iter().map(|s| s.to_string()).collect()),
        tty,
        stdin,
        stdin_once: stdin,
        ..runtime::config::ContainerConfig::named(unique("rkubelet-it-streams"), BUSYBOX)
    };
    let id = docker
        .create_container("", &config, &runtime::config::PodSandboxConfig::default())
        .expect("create");
    docker.start_container(&id).expect("start");
    Scratch { docker, id }
}

/// Reads a process's output until its end (or the deadline): (stdout, stderr).
fn drain(io: &mut dyn runtime::ProcessIo, until: Instant) -> (Vec<u8>, Vec<u8>) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    loop {
        assert!(Instant::now() < until, "the output did not end");
        let mut fds = [libc::pollfd {
            fd: io.fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(fds.as_mut_ptr(), 1, 200) };
        match io.read_output(&mut |k, d| match k {
            OutputKind::Stdout => out.extend_from_slice(d),
            OutputKind::Stderr => err.extend_from_slice(d),
        }) {
            Ok(0) => return (out, err),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("{e}"),
        }
    }
}

#[test]
fn docker_interactive_exec_splits_streams_takes_stdin_and_reports_the_code() {
    let s = scratch_container(false, false, &["sleep", "300"]);
    let opts = StreamOptions {
        stdin: true,
        stdout: true,
        stderr: true,
        tty: false,
    };
    let cmd: Vec<String> = ["sh", "-c", "cat; echo err >&2; exit 5"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut session = s.docker.exec_interactive(&s.id, &cmd, opts).expect("exec");
    let mut input: &[u8] = b"piped\n";
    while !input.is_empty() {
        match session.io.write_input(input) {
            Ok(n) => input = &input[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(e) => panic!("{e}"),
        }
    }
    session.io.close_input().expect("close stdin");
    let (out, err) = drain(session.io.as_mut(), Instant::now() + LONG);
    assert_eq!(out, b"piped\n");
    assert_eq!(err, b"err\n");
    let code = wait_for("the exit code", LONG, || {
        s.docker.exec_status(&session.exec_id).expect("status")
    });
    assert_eq!(code, 5);

    // A terminal: output raw, resizable.
    let tty = StreamOptions {
        stdin: true,
        stdout: true,
        stderr: false,
        tty: true,
    };
    let cmd: Vec<String> = ["sh", "-c", "sleep 1; stty size"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut session = s.docker.exec_interactive(&s.id, &cmd, tty).expect("exec");
    s.docker
        .resize_exec(
            &session.exec_id,
            TermSize {
                width: 99,
                height: 33,
            },
        )
        .expect("resize");
    let (out, _) = drain(session.io.as_mut(), Instant::now() + LONG);
    assert_eq!(text(&out).trim(), "33 99");

    // A container that is not running refuses an exec.
    let missing = s.docker.exec_interactive("no-such-container", &cmd, opts);
    assert!(missing.is_err());
}

#[test]
fn docker_attach_reaches_the_main_process() {
    let s = scratch_container(
        false,
        true,
        &["sh", "-c", "read line; echo got:$line; echo e >&2"],
    );
    let opts = StreamOptions {
        stdin: true,
        stdout: true,
        stderr: true,
        tty: false,
    };
    let mut io = s.docker.attach(&s.id, opts).expect("attach");
    let mut input: &[u8] = b"x\n";
    while !input.is_empty() {
        match io.write_input(input) {
            Ok(n) => input = &input[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(e) => panic!("{e}"),
        }
    }
    let (out, err) = drain(io.as_mut(), Instant::now() + LONG);
    assert_eq!(out, b"got:x\n");
    assert_eq!(err, b"e\n");
    let tty = scratch_container(true, false, &["sleep", "300"]);
    tty.docker
        .resize_container(
            &tty.id,
            TermSize {
                width: 10,
                height: 5,
            },
        )
        .expect("resize a tty container");
}
