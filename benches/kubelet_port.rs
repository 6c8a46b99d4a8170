//! `make bench`: the authenticated kubelet port over TLS. A real rkubelet (30 static pods,
//! self-signed pair, anonymous + AlwaysAllow) is asked `/pods` in a keep-alive loop
//! over one TLS connection (requests/s, handshake excluded), then holds 100 idle TLS
//! connections (handshake done, no request) while its RSS and threads are read.
//! Then a second one (token webhook, Webhook authorization, against the test API
//! server stand-in) is asked `/pods` the same way with a bearer token whose user and
//! decision are cached after the first request.
#![allow(clippy::disallowed_methods)] // clippy.toml's sort ban is for shipped code

#[path = "common/mod.rs"]
#[allow(dead_code)] // this bench needs only the process helpers
mod common;

#[path = "../tests/it/apiserver.rs"]
mod apiserver;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::proc_status;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

type Tls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

fn main() {
    let dir = std::env::temp_dir().join(format!("rkubelet-bench-kport-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("port")
    };
    let (hz, port) = (free(), free());
    // 30 static pods, as the figure asks: `/pods` lists them all.
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).expect("manifests");
    for i in 0..PODS {
        common::write_manifest(&manifests, &format!("p{i}.yaml"), &pod_yaml(i));
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_rkubelet"))
        .arg(format!("--hostname-override={NODE}"))
        .arg(format!("--root-dir={}", dir.join("root").display()))
        .arg(format!("--pod-manifest-path={}", manifests.display()))
        .arg(format!("--pod-infra-container-image={PAUSE}"))
        .arg(format!("--healthz-port={hz}"))
        .args(["--read-only-port=0", "--address=127.0.0.1"])
        .arg(format!("--port={port}"))
        .args(["--anonymous-auth", "--authorization-mode=AlwaysAllow"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn rkubelet");
    let deadline = Instant::now() + Duration::from_secs(30);
    let crt = dir.join("root/pki/kubelet.crt");
    while (TcpStream::connect(("127.0.0.1", port)).is_err() || !crt.exists())
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    let config = client_config(&crt);

    println!("rkubelet kubelet port over TLS ({PODS} pods, anonymous + AlwaysAllow)\n");
    let mut conn = connect(&config, port);
    let listed = |body: &str| body.matches("\"name\":\"kport-bench-").count();
    while listed(&get(&mut conn, "/pods", "")) < PODS && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    let body = get(&mut conn, "/pods", "");
    println!("/pods lists {} pods, {} bytes", listed(&body), body.len());
    // Measure once the pods run (sandbox + one container each), not while Docker
    // starts them.
    let running = Instant::now() + Duration::from_secs(120);
    while running_containers(NODE) < 2 * PODS && Instant::now() < running {
        std::thread::sleep(Duration::from_millis(500));
    }
    let n = 2000;
    let began = Instant::now();
    for _ in 0..n {
        get(&mut conn, "/pods", "");
    }
    let secs = began.elapsed().as_secs_f64();
    println!(
        "/pods over one keep-alive TLS connection: {n} requests in {secs:.2} s = {:.0} requests/s",
        f64::from(n) / secs
    );

    let pid = child.id();
    let (rss0, threads0) = proc_status(pid);
    let idle: Vec<Tls> = (0..100).map(|_| connect(&config, port)).collect();
    std::thread::sleep(Duration::from_millis(500));
    let (rss, threads) = proc_status(pid);
    println!(
        "100 idle TLS connections: RSS {:.1} -> {:.1} MiB, threads {threads0} -> {threads}",
        rss0 as f64 / 1024.0,
        rss as f64 / 1024.0
    );
    drop(idle);
    let _ = child.kill();
    let _ = child.wait();
    remove_containers(NODE);

    cached_token(&dir, free(), free());
    let _ = std::fs::remove_dir_all(&dir);
}

const NODE: &str = "bench-kport";
const PODS: usize = 30;
const PAUSE: &str = "rkubelet/pause:3.10";

fn pod_yaml(i: usize) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: kport-bench-{i}\nspec:\n  \
         terminationGracePeriodSeconds: 1\n  containers:\n  - name: a\n    \
         image: rkubelet/busybox:1.35\n    command: [\"sleep\", \"3600\"]\n"
    )
}

/// How many of `node`'s containers Docker reports running.
fn running_containers(node: &str) -> usize {
    Command::new("docker")
        .args(["ps", "-q", "--filter", "status=running", "--filter"])
        .arg(format!("label=io.rkubelet.node={node}"))
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .count()
        })
        .unwrap_or(0)
}

/// Removes the containers the bench's kubelet started (the kubelet leaves them).
fn remove_containers(node: &str) {
    let out = Command::new("docker")
        .args(["ps", "-aq", "--filter"])
        .arg(format!("label=io.rkubelet.node={node}"))
        .output()
        .expect("docker ps");
    let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect();
    if !ids.is_empty() {
        let _ = Command::new("docker")
            .args(["rm", "-f"])
            .args(&ids)
            .stdout(Stdio::null())
            .status();
    }
}

/// `/pods` with a bearer token, Webhook authorization: after the first request the
/// token's user and the decision come from the caches.
fn cached_token(dir: &Path, hz: u16, port: u16) {
    let pki = apiserver::Pki::get();
    let api = apiserver::TestApiServer::start(apiserver::Options::default());
    api.set_token_user("tok-bench", "bench", &[]);
    api.allow("bench", "pods");
    let kc = api.kubeconfig(dir, "kubelet.kubeconfig", "token: good-token");
    let mut child = Command::new(env!("CARGO_BIN_EXE_rkubelet"))
        .arg("--hostname-override=bench-kport-token")
        .arg(format!("--root-dir={}", dir.join("root2").display()))
        .arg(format!("--healthz-port={hz}"))
        .args(["--read-only-port=0", "--address=127.0.0.1"])
        .arg(format!("--port={port}"))
        .arg(format!("--tls-cert-file={}", pki.server_cert.display()))
        .arg(format!(
            "--tls-private-key-file={}",
            pki.server_key.display()
        ))
        .arg(format!("--kubeconfig={}", kc.display()))
        .args(["--anonymous-auth=false", "--authorization-mode=Webhook"])
        .arg("--authentication-token-webhook")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn rkubelet");
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let config = client_config(&pki.ca);
    let mut conn = connect(&config, port);
    let auth = "Authorization: Bearer tok-bench\r\n";
    get(&mut conn, "/pods", auth);
    let n = 2000;
    let began = Instant::now();
    for _ in 0..n {
        get(&mut conn, "/pods", auth);
    }
    let secs = began.elapsed().as_secs_f64();
    println!(
        "/pods with a cached bearer token, Webhook authorization: {n} requests in {secs:.2} s \
         = {:.0} requests/s ({} TokenReview, {} SubjectAccessReview)",
        f64::from(n) / secs,
        api.token_reviews().len(),
        api.access_reviews().len()
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// Trusts the certificates in `crt` (the kubelet's self-signed one, or a CA), and only
/// them.
fn client_config(crt: &Path) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(crt).expect("kubelet.crt") {
        roots.add(c.expect("certificate")).expect("root");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

/// A TLS connection with the handshake done.
fn connect(config: &Arc<rustls::ClientConfig>, port: u16) -> Tls {
    let name = ServerName::try_from("localhost").expect("name");
    let conn = rustls::ClientConnection::new(config.clone(), name).expect("client");
    let tcp = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    tcp.set_nodelay(true).expect("nodelay");
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock).expect("TLS handshake");
    }
    tls
}

/// One keep-alive GET with `headers` (each ending in CRLF); reads the whole answer by
/// its Content-Length.
fn get(tls: &mut Tls, path: &str, headers: &str) -> String {
    // One write, one TLS record: `write!` would send pieces that Nagle holds back.
    let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{headers}\r\n");
    tls.write_all(req.as_bytes()).expect("write");
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let n = tls.read(&mut chunk).expect("read");
        assert!(n > 0, "connection closed");
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf);
        if let Some(end) = text.find("\r\n\r\n") {
            let len: usize = text[..end]
                .lines()
                .find_map(|l| l.strip_prefix("Content-Length: "))
                .and_then(|v| v.trim().parse().ok())
                .expect("Content-Length");
            if buf.len() >= end + 4 + len {
                assert!(text.starts_with("HTTP/1.1 200"), "{text}");
                return text[end + 4..].to_string();
            }
        }
    }
}
