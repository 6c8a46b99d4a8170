//! Logs and the other debugging handlers of the kubelet port, against real clients:
//! the test API server stand-in's pod subresource proxy with kubectl, then
//! `/containerLogs`, `/logs/`, `/run`, `PUT /debug/flags/v` and the debugging-handlers
//! switch against a real rkubelet and Docker, with curl and kubectl.

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
                for conn in listener.incoming().take(2) {
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
    let pki = Pki::get();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(&pki.ca).expect("ca") {
        roots.add(c.expect("ca cert")).expect("add");
    }
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&pki.client_cert)
        .expect("cert")
        .map(|c| c.expect("cert"))
        .collect();
    let key = PrivateKeyDer::from_pem_file(&pki.client_key).expect("key");
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_client_auth_cert(certs, key)
        .expect("config");
    let tcp = TcpStream::connect(addr).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let conn = rustls::ClientConnection::new(Arc::new(config), name).expect("conn");
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
    let (head, _) = kubelet.seen()[1].clone();
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
