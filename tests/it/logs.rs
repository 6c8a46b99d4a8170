//! Logs and the other debugging handlers of the kubelet port, against real clients:
//! the test API server stand-in's pod subresource proxy with kubectl, then
//! `/containerLogs`, `/logs/`, `/run`, `PUT /debug/flags/v` and the debugging-handlers
//! switch against a real rkubelet and Docker, with curl and kubectl. `/containerLogs`'
//! options and following run on both runtimes (Docker's json-file logs; containerd's
//! CRI-format files under the pod log directory).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{json, Value};

use crate::apiserver::{proxy, Options, Pki, TestApiServer};

fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).output().expect("run client")
}

/// `kubectl --kubeconfig kc <args>` with its own discovery cache: (success, stdout,
/// stderr).
fn kubectl(kc: &Path, cache: &Path, args: &[&str]) -> (bool, String, String) {
    let out = run(Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kc)
        .arg("--cache-dir")
        .arg(cache)
        .args(args));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(crate::util::unique(&format!("rkubelet-it-{name}")));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A pod bound to `node` with one busybox container `c` running `cmd`.
pub fn api_pod(name: &str, node: &str, cmd: &str) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": crate::util::BUSYBOX,
                            "command": ["sh", "-c", cmd]}]
        }
    })
}

/// A stand-in kubelet for the proxy's own test: TLS with the test PKI's server pair,
/// client certificates required; records each request head; answers `/containerLogs`
/// with a chunked body and an upgrade with 101 and an echo of what follows.
struct FakeKubelet {
    port: u16,
    seen: Arc<Mutex<Vec<(String, bool)>>>,
}

impl FakeKubelet {
    fn start() -> FakeKubelet {
        let pki = Pki::get();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(&pki.ca).expect("ca") {
            roots.add(c.expect("ca cert")).expect("add");
        }
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .build()
        .expect("verifier");
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&pki.server_cert)
            .expect("cert")
            .map(|c| c.expect("cert"))
            .collect();
        let key = PrivateKeyDer::from_pem_file(&pki.server_key).expect("key");
        let config = Arc::new(
            rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .expect("versions")
                .with_client_cert_verifier(verifier)
                .with_single_cert(certs, key)
                .expect("config"),
        );
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        std::thread::Builder::new()
            .name("fake-kubelet".into())
            .spawn(move || {
                for conn in listener.incoming().take(3) {
                    let Ok(tcp) = conn else { continue };
                    let _ = tcp.set_read_timeout(Some(Duration::from_secs(20)));
                    let Ok(c) = rustls::ServerConnection::new(config.clone()) else {
                        continue;
                    };
                    let mut s = rustls::StreamOwned::new(c, tcp);
                    let Some((text, _)) = proxy::read_head(&mut s) else {
                        continue;
                    };
                    let has_cert = s.conn.peer_certificates().is_some_and(|c| !c.is_empty());
                    record
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((text.clone(), has_cert));
                    if text.contains("Upgrade:") {
                        let _ = s.write_all(
                            b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n",
                        );
                        let _ = s.flush();
                        let mut buf = [0u8; 1024];
                        while let Ok(n) = s.read(&mut buf) {
                            if n == 0 || s.write_all(&buf[..n]).and_then(|()| s.flush()).is_err() {
                                break;
                            }
                        }
                    } else if text.contains("limitBytes=") {
                        // A large body: 2 MB in 64 KiB chunks.
                        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
                        let piece = vec![b'x'; 64 * 1024];
                        for _ in 0..32 {
                            let _ = write!(s, "{:x}\r\n", piece.len());
                            let _ = s.write_all(&piece);
                            let _ = s.write_all(b"\r\n");
                        }
                        let _ = s.write_all(b"0\r\n\r\n");
                        let _ = s.flush();
                        s.conn.send_close_notify();
                        let _ = s.conn.complete_io(&mut s.sock);
                    } else {
                        let _ = s.write_all(
                            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nline1\n\r\n6\r\nline2\n\r\n0\r\n\r\n",
                        );
                        let _ = s.flush();
                        s.conn.send_close_notify();
                        let _ = s.conn.complete_io(&mut s.sock);
                    }
                }
            })
            .expect("spawn");
        FakeKubelet { port, seen }
    }

    fn seen(&self) -> Vec<(String, bool)> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// A TLS client of the stand-in with the test client certificate.
fn stand_in_client(addr: SocketAddr) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    let config = Pki::get().client_config();
    let tcp = TcpStream::connect(addr).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let conn = rustls::ClientConnection::new(config, name).expect("conn");
    rustls::StreamOwned::new(conn, tcp)
}

#[test]
fn the_stand_in_proxies_pod_subresources_to_the_kubelet() {
    let api = TestApiServer::start(Options::default());
    let kubelet = FakeKubelet::start();
    api.set_kubelet("fake-node", kubelet.port);
    api.create_pod(api_pod("p1", "fake-node", "true"));
    let dir = Scratch::new("proxy");
    let kc = api.kubeconfig(&dir.0, "kc", "token: good-token");
    let cache = dir.0.join("cache");

    // kubectl logs: the pod, then its log, rewritten to the kubelet's path.
    let (ok, out, err) = kubectl(&kc, &cache, &["logs", "p1", "--tail=3", "--timestamps"]);
    assert!(ok, "kubectl logs: {err}");
    assert_eq!(out, "line1\nline2\n");
    let (head, has_cert) = kubelet.seen()[0].clone();
    assert!(
        head.starts_with(
            "GET /containerLogs/default/p1/c?tailLines=3&timestamps=true HTTP/1.1\r\n"
        ),
        "{head}"
    );
    assert!(
        has_cert,
        "the stand-in presents its kubelet-client certificate"
    );
    assert!(
        !head.contains("good-token"),
        "the client's token is not passed on"
    );

    // A large body passes intact (the pipe keeps up with TLS's bounded buffers).
    let (ok, out, err) = kubectl(&kc, &cache, &["logs", "p1", "--limit-bytes=2097152"]);
    assert!(ok, "kubectl logs: {err}");
    assert!(out.len() == 2 * 1024 * 1024 && out.bytes().all(|b| b == b'x'));

    // Errors the API server answers itself.
    let (ok, _, err) = kubectl(&kc, &cache, &["logs", "p1", "-c", "nope"]);
    assert!(
        !ok && err.contains("container nope is not valid for pod p1"),
        "{err}"
    );
    let (ok, _, err) = kubectl(&kc, &cache, &["logs", "missing"]);
    assert!(!ok && err.contains("pods \"missing\" not found"), "{err}");

    // An upgrade: the rewritten head with the client's headers, then bytes both ways.
    let mut c = stand_in_client(api.addr);
    write!(
        c,
        "POST /api/v1/namespaces/default/pods/p1/exec?command=cat&container=c&stdin=true&stdout=true HTTP/1.1\r\n\
         Host: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\
         X-Stream-Protocol-Version: v4.channel.k8s.io\r\nContent-Length: 0\r\n\r\n"
    )
    .expect("write");
    c.flush().expect("flush");
    let (answer, rest) = proxy::read_head(&mut c).expect("answer");
    assert!(answer.starts_with("HTTP/1.1 101 "), "{answer}");
    assert!(rest.is_empty());
    c.write_all(b"ping").expect("write");
    c.flush().expect("flush");
    let mut got = [0u8; 4];
    c.read_exact(&mut got).expect("echo");
    assert_eq!(&got, b"ping");
    drop(c);
    let (head, _) = kubelet.seen()[2].clone();
    assert!(
        head.starts_with("POST /exec/default/p1/c?command=cat&stdin=1&stdout=1 HTTP/1.1\r\n"),
        "{head}"
    );
    for h in [
        "Upgrade: SPDY/3.1",
        "X-Stream-Protocol-Version: v4.channel.k8s.io",
        "X-Forwarded-For: 127.0.0.1",
    ] {
        assert!(head.contains(h), "{h} in {head}");
    }
}

// ---------------------------------------------------------------------------------
// Against a real rkubelet.

use std::io::BufRead;
use std::process::Child;
use std::time::Instant;

use crate::util::{free_port, thread_names, unique, wait_for, Node, Rt, LONG, SLEEPER};

/// A node with the kubelet port (test PKI, client CA) and the API source on a fresh
/// stand-in, which proxies pod subresources to it; a kubeconfig for kubectl.
pub(crate) struct Cluster {
    pub(crate) node: Node,
    pub(crate) api: TestApiServer,
    pub(crate) port: u16,
    kubeconfig: PathBuf,
    cache: PathBuf,
}

impl Cluster {
    fn start(prefix: &str, extra: &[&str]) -> Cluster {
        Cluster::start_node(Node::new(prefix), extra)
    }

    fn start_on(rt: Rt, prefix: &str, extra: &[&str]) -> Cluster {
        Cluster::start_node(Node::on(rt, prefix), extra)
    }

    /// A cluster around `node` (a node on another runtime endpoint, for one).
    pub(crate) fn start_node(mut node: Node, extra: &[&str]) -> Cluster {
        let pki = Pki::get();
        let api = TestApiServer::start(Options::default());
        let port = free_port();
        api.set_kubelet(&node.name, port);
        let node_kc = api.kubeconfig(&node.dir, "node.kubeconfig", "token: good-token");
        let kubeconfig = api.kubeconfig(&node.dir, "kubectl.kubeconfig", "token: good-token");
        let mut args = vec![
            format!("--port={port}"),
            format!("--tls-cert-file={}", pki.server_cert.display()),
            format!("--tls-private-key-file={}", pki.server_key.display()),
            format!("--client-ca-file={}", pki.ca.display()),
            "--anonymous-auth=false".to_string(),
            format!("--kubeconfig={}", node_kc.display()),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        node.start(&args);
        wait_for("the kubelet port to listen", LONG, || {
            TcpStream::connect(("127.0.0.1", port)).ok()
        });
        let cache = node.dir.join("kubectl-cache");
        Cluster {
            node,
            api,
            port,
            kubeconfig,
            cache,
        }
    }

    /// `curl` against the kubelet port with the client certificate: (status, head,
    /// body). `args` go before the URL (`-X POST`, `--path-as-is` …).
    pub(crate) fn curl(&self, args: &[&str], path: &str) -> (u16, String, String) {
        curl_port(self.port, args, path)
    }

    pub(crate) fn kubectl(&self, args: &[&str]) -> (bool, String, String) {
        kubectl(&self.kubeconfig, &self.cache, args)
    }

    /// `kubectl logs -f <args>` through the stand-in, its lines collected.
    pub(crate) fn kubectl_follow(&self, args: &[&str]) -> Follower {
        Follower::start(
            Command::new("kubectl")
                .arg("--kubeconfig")
                .arg(&self.kubeconfig)
                .arg("--cache-dir")
                .arg(&self.cache)
                .args(["logs", "-f"])
                .args(args),
        )
    }

    /// Names of rkubelet's `stream-N` threads.
    fn streams(&self) -> usize {
        thread_names(self.node.pid())
            .iter()
            .filter(|t| t.starts_with("stream-"))
            .count()
    }
}

/// `curl -sk -i` with the test client certificate: (status, head, body).
fn curl_port(port: u16, args: &[&str], path: &str) -> (u16, String, String) {
    let pki = Pki::get();
    let out = run(Command::new("curl")
        .args(["-sk", "-i", "--max-time", "30", "--cert"])
        .arg(&pki.client_cert)
        .arg("--key")
        .arg(&pki.client_key)
        .args(args)
        .arg(format!("https://127.0.0.1:{port}{path}")));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((text.as_str(), ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, head.to_string(), body.to_string())
}

/// A header's value in a head printed by curl.
fn header_of(head: &str, name: &str) -> Option<String> {
    head.lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim().to_string())
}

/// A `curl -N` following a log, its lines collected with their arrival times.
pub(crate) struct Follower {
    child: Child,
    lines: Arc<Mutex<Vec<(String, Instant)>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Follower {
    fn start(cmd: &mut Command) -> Follower {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn follower");
        let stdout = child.stdout.take().expect("stdout");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let reader = std::thread::Builder::new()
            .name("log-follower".into())
            .spawn(move || {
                for line in std::io::BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    sink.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((line, Instant::now()));
                }
            })
            .expect("spawn reader");
        Follower {
            child,
            lines,
            reader: Some(reader),
        }
    }

    fn curl(port: u16, path: &str) -> Follower {
        let pki = Pki::get();
        Follower::start(
            Command::new("curl")
                .args(["-skN", "--cert"])
                .arg(&pki.client_cert)
                .arg("--key")
                .arg(&pki.client_key)
                .arg(format!("https://127.0.0.1:{port}{path}")),
        )
    }

    pub(crate) fn lines(&self) -> Vec<String> {
        self.lines
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(l, _)| l.clone())
            .collect()
    }

    pub(crate) fn wait_line(&self, line: &str) -> Instant {
        wait_for(&format!("{line:?} from the follower"), LONG, || {
            self.lines
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .find(|(l, _)| l == line)
                .map(|(_, t)| *t)
        })
    }

    /// Waits for the client to exit on its own: whether it succeeded.
    pub(crate) fn wait_exit(&mut self, timeout: Duration) -> bool {
        let status = wait_for("the follower to exit", timeout, || {
            self.child.try_wait().ok().flatten()
        });
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        status.success()
    }

    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Container `c` of pod `lg`: three lines at once (stdout, stderr, stdout), a fourth
/// five seconds later, then quiet.
const LINES: &str = "echo out-1; usleep 300000; echo err-1 >&2; usleep 300000; echo out-2; \
                     sleep 5; echo late-1; ";
/// Container `r`: counts its runs in an emptyDir; the first run exits 1, the next ones
/// stay up.
const RESTARTS: &str = "n=$(cat /d/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /d/n; \
                        echo run-$n; if [ $n = 1 ]; then exit 1; fi; ";

fn lines_pod(node: &str) -> Value {
    json!({
        "metadata": {"name": "lg"},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "volumes": [{"name": "d", "emptyDir": {}}],
            "containers": [
                {"name": "c", "image": crate::util::BUSYBOX,
                 "command": ["sh", "-c", format!("{LINES}{SLEEPER}")]},
                {"name": "r", "image": crate::util::BUSYBOX,
                 "command": ["sh", "-c", format!("{RESTARTS}{SLEEPER}")],
                 "volumeMounts": [{"name": "d", "mountPath": "/d"}]}
            ]
        }
    })
}

/// The time a `timestamps=true` line carries, and the line without it.
fn stamped(line: &str) -> (SystemTimeStamp, &str) {
    let (ts, rest) = line
        .split_once(' ')
        .expect("a timestamp, a space, the line");
    assert_eq!(ts.len(), 30, "RFC 3339 with nine fraction digits: {ts}");
    assert!(
        ts.ends_with('Z') && ts.as_bytes()[10] == b'T' && ts.as_bytes()[19] == b'.',
        "{ts}"
    );
    let t = base::time::parse_rfc3339(ts).expect("RFC 3339");
    (SystemTimeStamp(t, ts.to_string()), rest)
}

/// A log line's time and its text as printed.
#[derive(Debug, Clone)]
struct SystemTimeStamp(std::time::SystemTime, String);

fn container_logs_options_errors_and_kubectl_through_the_api_server(rt: Rt) {
    let k = Cluster::start_on(rt, "logs", &[]);
    k.api.create_pod(lines_pod(&k.node.name));
    let base = "/containerLogs/default/lg/c";
    let all = wait_for("all of c's lines", LONG, || {
        let (code, _, body) = k.curl(&[], base);
        (code == 200 && body.contains("late-1")).then_some(body)
    });
    assert_eq!(all, "out-1\nerr-1\nout-2\nlate-1\n");
    let (code, head, _) = k.curl(&[], base);
    assert_eq!(code, 200);
    assert_eq!(
        header_of(&head, "Transfer-Encoding").as_deref(),
        Some("chunked")
    );

    // Streams, tails, limits.
    let body = |q: &str| {
        let (code, _, body) = k.curl(&[], &format!("{base}?{q}"));
        assert_eq!(code, 200, "{q}: {body}");
        body
    };
    assert_eq!(body("stream=Stdout"), "out-1\nout-2\nlate-1\n");
    assert_eq!(body("stream=Stderr"), "err-1\n");
    assert_eq!(body("stream=All&tailLines=2"), "out-2\nlate-1\n");
    assert_eq!(body("tailLines=1"), "late-1\n");
    assert_eq!(body("tailLines=3&tail=1"), "late-1\n", "legacy tail wins");
    assert_eq!(body("tailLines=1&tail=all"), all);
    assert_eq!(body("tailLines=0"), "");
    assert_eq!(body("limitBytes=8"), "out-1\ner");
    assert_eq!(body("limitBytes=1000"), all);

    // Timestamps as upstream prints them, and since by time or by seconds.
    let stamped_body = body("timestamps=true");
    let lines: Vec<(SystemTimeStamp, &str)> = stamped_body.lines().map(stamped).collect();
    let texts: Vec<&str> = lines.iter().map(|(_, l)| *l).collect();
    assert_eq!(texts, ["out-1", "err-1", "out-2", "late-1"]);
    let late = lines[3].0.clone();
    let out2 = lines[2].0.clone();
    assert!(late.0.duration_since(out2.0).expect("later") >= Duration::from_secs(4));
    assert_eq!(
        body(&format!("sinceTime={}", late.1.replace(':', "%3A"))),
        "late-1\n"
    );
    assert_eq!(body("sinceTime=2000-01-01T00:00:00Z"), all);
    // sinceSeconds reaching back past late-1 but not to out-2.
    let since_late = || {
        let ago = std::time::SystemTime::now()
            .duration_since(late.0)
            .expect("past");
        ago.as_secs() + 2
    };
    assert_eq!(body(&format!("sinceSeconds={}", since_late())), "late-1\n");

    // Upstream's errors, codes and bodies.
    let err = |path: &str| {
        let (code, _, body) = k.curl(&[], path);
        (code, body)
    };
    let cases: &[(&str, u16, &str)] = &[
        (
            "/containerLogs/default/nope/c",
            404,
            "pod \"nope\" does not exist",
        ),
        (
            "/containerLogs/other/lg/c",
            404,
            "pod \"lg\" does not exist",
        ),
        (
            "/containerLogs/default/lg/x",
            404,
            "container \"x\" not found in pod \"lg\"",
        ),
        (
            "/containerLogs/default/lg/",
            400,
            r#"{"message": "Missing container name."}"#,
        ),
        (
            "/containerLogs/default/lg/c?tailLines=x",
            400,
            r#"{"message": "Unable to decode query."}"#,
        ),
        (
            "/containerLogs/default/lg/c?sinceTime=noon",
            400,
            r#"{"message": "Unable to decode query."}"#,
        ),
        (
            "/containerLogs/default/lg/c?tailLines=-1",
            422,
            r#"{"message": "Invalid request."}"#,
        ),
        (
            "/containerLogs/default/lg/c?limitBytes=0",
            422,
            r#"{"message": "Invalid request."}"#,
        ),
        (
            "/containerLogs/default/lg/c?sinceSeconds=0",
            422,
            r#"{"message": "Invalid request."}"#,
        ),
        (
            "/containerLogs/default/lg/c?stream=Both",
            422,
            r#"{"message": "Invalid request."}"#,
        ),
        (
            "/containerLogs/default/lg/c?stream=Stdout&tailLines=1",
            422,
            r#"{"message": "Invalid request."}"#,
        ),
        (
            "/containerLogs/default/lg/c?sinceSeconds=5&sinceTime=2000-01-01T00:00:00Z",
            422,
            r#"{"message": "Invalid request."}"#,
        ),
        (
            "/containerLogs/default/lg/c?previous=true",
            400,
            "previous terminated container \"c\" in pod \"lg\" not found",
        ),
    ];
    for (path, code, text) in cases {
        assert_eq!(err(path), (*code, text.to_string()), "{path}");
    }
    let (code, head, _) = k.curl(&["-X", "POST"], base);
    assert_eq!(code, 405);
    assert_eq!(header_of(&head, "Allow").as_deref(), Some("GET"));

    // The previous instance of a container that restarted.
    let previous = "/containerLogs/default/lg/r?previous=true";
    wait_for("r's first run to be the previous instance", LONG, || {
        let (code, _, body) = k.curl(&[], previous);
        (code == 200 && body == "run-1\n").then_some(())
    });
    assert_eq!(body_of(&k, "/containerLogs/default/lg/r"), "run-2\n");

    // kubectl through the API server stand-in.
    let (ok, out, err) = k.kubectl(&["logs", "lg", "-c", "c"]);
    assert!(ok, "{err}");
    assert_eq!(out, all);
    let (ok, out, err) = k.kubectl(&["logs", "lg", "-c", "c", "--tail=2"]);
    assert!(ok && out == "out-2\nlate-1\n", "{out}{err}");
    let since = format!("--since={}s", since_late());
    let (ok, out, err) = k.kubectl(&["logs", "lg", "-c", "c", &since]);
    assert!(ok && out == "late-1\n", "{since}: {out}{err}");
    let (ok, out, err) = k.kubectl(&["logs", "lg", "-c", "r", "--previous"]);
    assert!(ok && out == "run-1\n", "{out}{err}");
    let (ok, out, err) = k.kubectl(&["logs", "lg", "-c", "c", "--limit-bytes=3", "--timestamps"]);
    assert!(ok && out.len() == 3 && out.starts_with("20"), "{out}{err}");
    let (ok, _, err) = k.kubectl(&["logs", "lg", "-c", "c", "--previous"]);
    assert!(
        !ok && err.contains("previous terminated container \"c\" in pod \"lg\" not found"),
        "{err}"
    );
}

fn body_of(k: &Cluster, path: &str) -> String {
    let (code, _, body) = k.curl(&[], path);
    assert_eq!(code, 200, "{path}: {body}");
    body
}

/// Pod `fw`: container `f` writes `f-1`, then `f-2` once `/tmp/go` exists, then `f-3`
/// once `/tmp/stop` exists, and exits (the pod does not restart it); container `s`
/// stays up, silent.
fn follow_pod(node: &str) -> Value {
    let wait = |file: &str| format!("while [ ! -e {file} ]; do usleep 100000; done; ");
    let f = format!(
        "echo f-1; {}echo f-2; {}echo f-3; exit 0",
        wait("/tmp/go"),
        wait("/tmp/stop")
    );
    json!({
        "metadata": {"name": "fw"},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {"name": "f", "image": crate::util::BUSYBOX, "command": ["sh", "-c", f]},
                {"name": "s", "image": crate::util::BUSYBOX, "command": ["sh", "-c", SLEEPER]}
            ]
        }
    })
}

fn follow_streams_new_lines_ends_with_the_container_and_its_thread_ends_with_the_client(rt: Rt) {
    let k = Cluster::start_on(rt, "logsf", &[]);
    k.api.create_pod(follow_pod(&k.node.name));
    wait_for("f's first line", LONG, || {
        let (code, _, body) = k.curl(&[], "/containerLogs/default/fw/f");
        (code == 200 && body == "f-1\n").then_some(())
    });
    let mut curl = Follower::curl(k.port, "/containerLogs/default/fw/f?follow=true");
    let mut kubectl = Follower::start(
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&k.kubeconfig)
            .arg("--cache-dir")
            .arg(&k.cache)
            .args(["logs", "-f", "fw", "-c", "f"]),
    );
    curl.wait_line("f-1");
    kubectl.wait_line("f-1");
    assert_eq!(k.streams(), 2, "a stream thread for each follower");

    // A line written while following arrives at once; the stream stays open.
    let touched = Instant::now();
    let (code, _, out) = k.curl(&["-X", "POST"], "/run/default/fw/f?cmd=touch+/tmp/go");
    assert_eq!((code, out.as_str()), (200, ""));
    let arrived = curl.wait_line("f-2");
    kubectl.wait_line("f-2");
    assert!(
        arrived.duration_since(touched) < Duration::from_secs(5),
        "f-2 took {:?}",
        arrived.duration_since(touched)
    );
    assert!(
        curl.running() && kubectl.running(),
        "the streams are still open"
    );

    // The container exits: both streams end cleanly, with every line.
    k.curl(&["-X", "POST"], "/run/default/fw/f?cmd=touch+/tmp/stop");
    assert!(curl.wait_exit(LONG), "curl sees a complete chunked answer");
    assert!(
        kubectl.wait_exit(LONG),
        "kubectl logs -f ends with the container"
    );
    assert_eq!(curl.lines(), ["f-1", "f-2", "f-3"]);
    assert_eq!(kubectl.lines(), ["f-1", "f-2", "f-3"]);
    wait_for("the stream threads to end", LONG, || {
        (k.streams() == 0).then_some(())
    });

    // A client that goes away from a quiet stream: its thread ends within a second
    // or two (the stream looks at its client every 0.5 s).
    let mut quiet = Follower::curl(k.port, "/containerLogs/default/fw/s?follow=true");
    wait_for("the quiet stream's thread", LONG, || {
        (k.streams() == 1).then_some(())
    });
    std::thread::sleep(Duration::from_millis(700));
    let gone = Instant::now();
    quiet.kill();
    wait_for("the stream thread to end after its client", LONG, || {
        (k.streams() == 0).then_some(())
    });
    let took = gone.elapsed();
    println!("stream thread ended {took:?} after its client");
    assert!(took < Duration::from_secs(3), "took {took:?}");

    // kubectl logs -f through the stand-in, interrupted: the kubelet's thread ends too.
    let mut kf = Follower::start(
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&k.kubeconfig)
            .arg("--cache-dir")
            .arg(&k.cache)
            .args(["logs", "-f", "fw", "-c", "s"]),
    );
    wait_for("kubectl's stream thread", LONG, || {
        (k.streams() == 1).then_some(())
    });
    kf.kill();
    wait_for("the stream thread to end after kubectl", LONG, || {
        (k.streams() == 0).then_some(())
    });
}

crate::on_both_runtimes!(
    container_logs_options_errors_and_kubectl_through_the_api_server,
    follow_streams_new_lines_ends_with_the_container_and_its_thread_ends_with_the_client,
);

/// A directory of its own under the node's real `/var/log`, removed on drop.
struct VarLogDir(PathBuf);

impl Drop for VarLogDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn node_log_files_run_and_runtime_verbosity() {
    let k = Cluster::start("logsn", &["--v=0"]);
    let name = unique("rkubelet-it");
    let dir = VarLogDir(PathBuf::from("/var/log").join(&name));
    std::fs::create_dir_all(dir.0.join("sub dir")).expect("dir under /var/log");
    std::fs::write(dir.0.join("a.log"), "line a\n").expect("file");
    // Large enough to be streamed rather than read whole.
    let big: Vec<u8> = (0..3_000_000u32)
        .map(|i| b"0123456789abcdef\n"[(i % 17) as usize])
        .collect();
    std::fs::write(dir.0.join("big.log"), &big).expect("big file");
    std::os::unix::fs::symlink("/etc/hostname", dir.0.join("out")).expect("symlink out");
    std::os::unix::fs::symlink("a.log", dir.0.join("in")).expect("symlink in");

    // The listing, as Go's FileServer prints it.
    let (code, head, body) = k.curl(&[], &format!("/logs/{name}/"));
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        header_of(&head, "Content-Type").as_deref(),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(
        body,
        "<!doctype html>\n<meta name=\"viewport\" content=\"width=device-width\">\n<pre>\n\
         <a href=\"a.log\">a.log</a>\n<a href=\"big.log\">big.log</a>\n\
         <a href=\"in\">in</a>\n<a href=\"out\">out</a>\n\
         <a href=\"sub%20dir/\">sub dir/</a>\n</pre>\n"
    );
    let (code, _, root) = k.curl(&[], "/logs/");
    assert!(code == 200 && root.contains(&format!("<a href=\"{name}/\">{name}/</a>")));
    // Go's redirects.
    let (code, head, _) = k.curl(&[], "/logs");
    assert_eq!(
        (code, header_of(&head, "Location")),
        (301, Some("/logs/".into()))
    );
    let (code, head, _) = k.curl(&[], &format!("/logs/{name}"));
    assert_eq!(
        (code, header_of(&head, "Location")),
        (301, Some(format!("{name}/")))
    );
    // Files, small and streamed.
    let (code, head, body) = k.curl(&[], &format!("/logs/{name}/a.log"));
    assert_eq!((code, body.as_str()), (200, "line a\n"));
    assert_eq!(
        header_of(&head, "Content-Type").as_deref(),
        Some("text/plain; charset=utf-8")
    );
    assert!(header_of(&head, "Last-Modified").is_some());
    assert_eq!(body_of(&k, &format!("/logs/{name}/in")), "line a\n");
    let (code, head, body) = k.curl(&[], &format!("/logs/{name}/big.log"));
    assert_eq!(code, 200);
    assert_eq!(
        header_of(&head, "Content-Length"),
        Some(big.len().to_string())
    );
    assert!(body.as_bytes() == big.as_slice(), "the big file intact");
    // No way out: `..` is redirected by the mux to the cleaned path (as Go's), an
    // encoded `..` is cleaned inside the root, a symlink out is not followed.
    let (code, head, _) = k.curl(&["--path-as-is"], "/logs/../etc/passwd");
    assert_eq!(
        (code, header_of(&head, "Location")),
        (301, Some("/etc/passwd".into()))
    );
    let (code, _, body) = k.curl(&[], "/etc/passwd");
    assert_eq!((code, body.as_str()), (404, "404 page not found\n"));
    for path in [
        "/logs/%2e%2e/etc/passwd".to_string(),
        "/logs/%2e%2e/%2e%2e/%2e%2e/etc/hostname".to_string(),
        format!("/logs/{name}/out"),
        format!("/logs/{name}/missing"),
    ] {
        let (code, _, body) = k.curl(&["--path-as-is"], &path);
        assert_eq!(
            (code, body.as_str()),
            (404, "404 page not found\n"),
            "{path}"
        );
    }
    let (code, _, _) = k.curl(&["--path-as-is"], "/logs/%zz");
    assert_eq!(code, 400);
    let (code, head, _) = k.curl(&["-X", "POST"], "/logs/");
    assert_eq!((code, header_of(&head, "Allow")), (405, Some("GET".into())));

    // /run: the command's output, or upstream's errors.
    k.api.create_pod(api_pod("runner", &k.node.name, SLEEPER));
    let hello = wait_for("/run to answer", LONG, || {
        let (code, _, body) = k.curl(
            &["-X", "POST"],
            "/run/default/runner/c?cmd=echo+hello+world",
        );
        (code == 200).then_some(body)
    });
    assert_eq!(hello, "hello world\n");
    let (code, _, body) = k.curl(
        &["-X", "POST"],
        "/run/default/runner/uid-x/c?cmd=sh+-c+echo%24%7BIFS%7Dboth%3Becho%24%7BIFS%7Derr%3E%262",
    );
    assert_eq!(
        (code, body.as_str()),
        (200, "both\nerr\n"),
        "stdout then stderr"
    );
    let (code, _, body) = k.curl(&["-X", "POST"], "/run/default/runner/c?cmd=ls+/nonexistent");
    assert_eq!(code, 500);
    assert!(
        body.starts_with("command 'ls /nonexistent' exited with 1: ls: /nonexistent"),
        "{body}"
    );
    let (code, _, body) = k.curl(&["-X", "POST"], "/run/default/ghost/c?cmd=true");
    assert_eq!((code, body.as_str()), (404, "pod does not exist"));
    let (code, _, _) = k.curl(&[], "/run/default/runner/c?cmd=true");
    assert_eq!(code, 405);

    // PUT /debug/flags/v: debug lines appear at once.
    let debug_line = "srv-kubelet: user=system:node:test";
    assert!(
        !k.node.log().contains(debug_line),
        "--v=0 logs no debug lines"
    );
    let (code, head, body) = k.curl(&["-X", "PUT", "-d", "4"], "/debug/flags/v");
    assert_eq!(
        (code, body.as_str()),
        (200, "successfully set klog.logging.verbosity to 4\n")
    );
    assert_eq!(
        header_of(&head, "Content-Type").as_deref(),
        Some("text/plain")
    );
    k.curl(&[], "/pods");
    wait_for("a debug line after PUT /debug/flags/v", LONG, || {
        k.node.log().contains(debug_line).then_some(())
    });
    let (code, _, body) = k.curl(&["-X", "PUT", "-d", "x"], "/debug/flags/v");
    assert_eq!(
        (code, body.as_str()),
        (400, "failed set klog.logging.verbosity x: strconv.ParseInt: parsing \"x\": invalid syntax\n")
    );
    let (code, _, body) = k.curl(&[], "/debug/flags/v");
    assert_eq!((code, body.as_str()), (406, "unsupported http method\n"));
}

#[test]
fn debugging_handlers_disabled_answer_405() {
    let k = Cluster::start("logsoff", &["--enable-debugging-handlers=false"]);
    for (method, path) in [
        ("GET", "/containerLogs/default/p/c"),
        ("GET", "/logs/"),
        ("GET", "/logs/syslog"),
        ("POST", "/run/default/p/c?cmd=true"),
        ("POST", "/exec/default/p/c?command=true"),
        ("GET", "/attach/default/p/c"),
        ("POST", "/portForward/default/p"),
        ("GET", "/runningpods/"),
        ("GET", "/debug/pprof/heap"),
    ] {
        let (code, _, body) = k.curl(&["-X", method], path);
        assert_eq!(
            (code, body.as_str()),
            (405, "Debug endpoints are disabled.\n"),
            "{path}"
        );
    }
    let (code, head, _) = k.curl(&[], "/logs");
    assert_eq!(
        (code, header_of(&head, "Location")),
        (301, Some("/logs/".into()))
    );
    for path in ["/configz", "/debug/flags/v"] {
        assert_eq!(k.curl(&[], path).0, 404, "{path} is not served");
    }
    assert_eq!(k.curl(&[], "/pods").0, 200);
    assert_eq!(k.curl(&[], "/healthz").0, 200);
}
