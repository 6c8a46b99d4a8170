//! `make bench`: the round trip of `kubectl exec pod -- true` through the test API
//! server stand-in to rkubelet's kubelet port, over WebSocket and over SPDY/3.1, next
//! to `docker exec <container> true` on the same container. A program (harness =
//! false), not a timed test.
//!
//! One rkubelet (API source, kubelet port with the test PKI) runs one busybox pod. Each
//! round runs every command once, interleaved, so they share the machine's load; the
//! table gives medians and 90th percentiles of wall time per command, and the ratio of
//! kubectl's median to docker's (target ≤ 1.2). Two rows explain the rest: `kubectl
//! get pod` (kubectl's own start and one API call through the stand-in: the floor of
//! any kubectl command) and the same exec from a Rust WebSocket client straight to the
//! kubelet port (rkubelet's own share: TLS, the checks, Docker's exec, the status).
#![allow(clippy::disallowed_methods)] // clippy.toml's sort ban is for shipped code

// The harness's containerd, which tests/it/util.rs can start (as the tests name it).
extern crate cri as rkubelet_cri;
#[path = "../crates/cri/tests/common/mod.rs"]
mod containerd;

#[allow(dead_code)]
#[path = "../tests/it/util.rs"]
mod util;

#[path = "../tests/it/apiserver.rs"]
mod apiserver;

use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use serde_json::json;

/// Rounds of the three commands.
const ROUNDS: usize = 30;
/// Rounds run first and not counted (discovery cache, page cache, first TLS).
const WARMUP: usize = 3;

fn main() {
    let pki = apiserver::Pki::get();
    let api = apiserver::TestApiServer::start(apiserver::Options::default());
    let mut node = util::Node::new("bench-exec");
    api.create_pod(json!({
        "metadata": {"name": "bench"},
        "spec": {
            "nodeName": node.name,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": util::BUSYBOX,
                            "command": ["sh", "-c", util::SLEEPER]}]
        }
    }));
    let kc = api.kubeconfig(&node.dir, "kubelet.kubeconfig", "token: good-token");
    let port = util::free_port();
    let args = [
        format!("--kubeconfig={}", kc.display()),
        format!("--port={port}"),
        format!("--tls-cert-file={}", pki.server_cert.display()),
        format!("--tls-private-key-file={}", pki.server_key.display()),
        format!("--client-ca-file={}", pki.ca.display()),
        "--anonymous-auth=false".to_string(),
        "--v=0".to_string(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    node.start(&args);
    util::wait_for("the kubelet port", util::LONG, || {
        TcpStream::connect(("127.0.0.1", port)).ok()
    });
    api.set_kubelet(&node.name, port);
    let id = util::wait_for("the pod's container", util::LONG, || {
        node.running()
            .get("bench/c")
            .and_then(|ids| ids.first().cloned())
    });
    let user = api.kubeconfig(&node.dir, "user.kubeconfig", "token: good-token");
    let cache = node.dir.join("kubectl-cache");

    let kubectl = |websocket: bool| {
        let mut c = Command::new("kubectl");
        let flag = if websocket { "true" } else { "false" };
        c.env("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", flag)
            .arg("--kubeconfig")
            .arg(&user)
            .arg("--cache-dir")
            .arg(&cache)
            .args(["exec", "bench", "--", "true"]);
        c
    };
    let docker = || {
        let mut c = Command::new("docker");
        c.args(["exec", &id, "true"]);
        c
    };
    let get_pod = || {
        let mut c = Command::new("kubectl");
        c.arg("--kubeconfig")
            .arg(&user)
            .arg("--cache-dir")
            .arg(&cache)
            .args(["get", "pod", "bench"]);
        c
    };
    let tls = pki.client_config();
    let mut runs: [(&str, Vec<Duration>, usize); 5] = [
        ("kubectl exec (WebSocket)", Vec::new(), 0),
        ("kubectl exec (SPDY/3.1)", Vec::new(), 0),
        ("docker exec", Vec::new(), 0),
        ("kubectl get pod", Vec::new(), 0),
        ("WebSocket client, no kubectl", Vec::new(), 0),
    ];
    for round in 0..WARMUP + ROUNDS {
        for (i, run) in runs.iter_mut().enumerate() {
            let t = Instant::now();
            let ok = if i == 4 {
                direct_exec(&tls, port)
            } else {
                let mut cmd = match i {
                    0 => kubectl(true),
                    1 => kubectl(false),
                    2 => docker(),
                    _ => get_pod(),
                };
                cmd.stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            };
            let took = t.elapsed();
            if round >= WARMUP {
                if ok {
                    run.1.push(took);
                } else {
                    run.2 += 1;
                }
            }
        }
    }

    println!("exec round trip, {ROUNDS} rounds after {WARMUP} warm-up (kubectl 1.32 through the");
    println!("API server stand-in to rkubelet; docker CLI straight to the engine)\n");
    println!(
        "{:<28} {:>10} {:>10} {:>8}",
        "command", "median", "p90", "failed"
    );
    let docker_median = median(&runs[2].1);
    for (name, times, failed) in &runs {
        println!(
            "{name:<28} {:>8.1}ms {:>8.1}ms {failed:>8}",
            ms(median(times)),
            ms(percentile(times, 0.9))
        );
    }
    println!();
    for (name, times, _) in &runs[..2] {
        if times.is_empty() {
            println!("{name}: no successful run");
            continue;
        }
        let ratio = ms(median(times)) / ms(docker_median).max(0.001);
        println!(
            "{name} / docker exec: {ratio:.2} (target <= 1.2) {}",
            if ratio <= 1.2 { "(met)" } else { "(MISSED)" }
        );
    }
}

/// `true` in the pod over `v5.channel.k8s.io` straight to the kubelet port, until the
/// status: whether it said Success.
fn direct_exec(config: &Arc<rustls::ClientConfig>, port: u16) -> bool {
    let Ok(tcp) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = tcp.set_nodelay(true);
    let _ = tcp.set_read_timeout(Some(Duration::from_secs(30)));
    let name = ServerName::try_from("127.0.0.1").expect("name");
    let Ok(conn) = rustls::ClientConnection::new(config.clone(), name) else {
        return false;
    };
    let req = tungstenite::http::Request::builder()
        .uri(format!(
            "wss://127.0.0.1:{port}/exec/default/bench/c?command=true&stdout=1&stderr=1"
        ))
        .header("Host", format!("127.0.0.1:{port}"))
        .header("Connection", "Upgrade")
        .header("Upgrade", "websocket")
        .header("Sec-WebSocket-Version", "13")
        .header(
            "Sec-WebSocket-Key",
            tungstenite::handshake::client::generate_key(),
        )
        .header("Sec-WebSocket-Protocol", "v5.channel.k8s.io")
        .body(())
        .expect("request");
    let Ok((mut ws, _)) = tungstenite::client::client(req, rustls::StreamOwned::new(conn, tcp))
    else {
        return false;
    };
    loop {
        match ws.read() {
            Ok(tungstenite::Message::Binary(b)) if b.first() == Some(&3) => {
                return b.ends_with(br#""status":"Success"}"#)
            }
            Ok(_) => {}
            Err(_) => return false,
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(v: &[Duration]) -> Duration {
    percentile(v, 0.5)
}

fn percentile(v: &[Duration], p: f64) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    let mut s = v.to_vec();
    base::sort::sort(&mut s);
    let i = ((s.len() - 1) as f64 * p).round() as usize;
    s[i.min(s.len() - 1)]
}
