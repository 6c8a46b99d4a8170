//! `make bench`: `kubectl logs` of a 100 MB container log through the API server
//! stand-in (kubectl → stand-in → rkubelet's `/containerLogs` → Docker's logs API)
//! against `docker logs` of the same container, the target being a ratio of at
//! most 1.2. Each is run five times, alternating; the medians are compared. Also the RSS of
//! rkubelet while it streams.
//!
//! The container writes 100 MB in 1 KiB lines. What Docker keeps of it depends on the
//! daemon's log options (`max-size`/`max-file` rotate it away): both clients read
//! what is kept, and the table says how much that was. kubectl's own start (the pod
//! GET before the log) is in its time, as a user sees it; `curl` straight to the
//! kubelet port shows rkubelet's part alone.
#![allow(clippy::disallowed_methods)] // clippy.toml's sort ban is for shipped code

#[path = "common/mod.rs"]
#[allow(dead_code)] // this bench needs only the process helpers
mod common;

#[path = "../tests/it/apiserver.rs"]
mod apiserver;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use apiserver::{Options, Pki, TestApiServer};
use common::{proc_status, verdict};
use serde_json::json;

/// The log's size.
const LOG_BYTES: u64 = 100 * 1024 * 1024;
/// Runs of each client, alternating; medians compared (the machine may be loaded).
const RUNS: usize = 5;

fn main() {
    let dir = std::env::temp_dir().join(format!("rkubelet-bench-logs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let node = format!("bench-logs-{}", std::process::id());
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("port")
    };
    let (hz, port) = (free(), free());
    let pki = Pki::get();
    let api = TestApiServer::start(Options::default());
    api.set_kubelet(&node, port);
    let node_kc = api.kubeconfig(&dir, "node.kubeconfig", "token: good-token");
    let kubectl_kc = api.kubeconfig(&dir, "kubectl.kubeconfig", "token: good-token");
    let child = Command::new(env!("CARGO_BIN_EXE_rkubelet"))
        .arg(format!("--hostname-override={node}"))
        .arg(format!("--root-dir={}", dir.join("root").display()))
        .arg("--pod-infra-container-image=rkubelet/pause:3.10")
        .arg(format!("--healthz-port={hz}"))
        .args(["--read-only-port=0", "--address=127.0.0.1"])
        .arg(format!("--port={port}"))
        .arg(format!("--tls-cert-file={}", pki.server_cert.display()))
        .arg(format!(
            "--tls-private-key-file={}",
            pki.server_key.display()
        ))
        .arg(format!("--client-ca-file={}", pki.ca.display()))
        .arg(format!("--kubeconfig={}", node_kc.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn rkubelet");
    let guard = Guard {
        child,
        node: node.clone(),
        dir: dir.clone(),
    };

    // 100 MB of 1 KiB lines, then a marker, then quiet.
    let script = format!(
        "yes \"$(printf '%01023d' 0)\" | head -c {LOG_BYTES}; \
         echo done; trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done"
    );
    api.create_pod(json!({
        "metadata": {"name": "big"},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "c", "image": "rkubelet/busybox:1.35",
                                 "command": ["sh", "-c", script]}]}
    }));
    let kubectl = |args: &[&str]| {
        let mut c = Command::new("kubectl");
        c.arg("--kubeconfig")
            .arg(&kubectl_kc)
            .arg("--cache-dir")
            .arg(dir.join("cache"))
            .args(args);
        c
    };
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let out = kubectl(&["logs", "big", "--tail=1"])
            .output()
            .expect("kubectl");
        if out.stdout.ends_with(b"done\n") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the 100 MB log was not written in time"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let id = docker_id(&node);

    println!(
        "kubectl logs of a {} MB log through the API server stand-in, vs docker logs\n",
        LOG_BYTES >> 20
    );
    let pid = guard.child.id();
    let (rss0, _) = proc_status(pid);
    let mut peak_rss = rss0;
    let time = |mut cmd: Command, peak: &mut u64| {
        let began = Instant::now();
        let mut c = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn client");
        let mut out = c.stdout.take().expect("stdout");
        let mut err = c.stderr.take().expect("stderr");
        let errs = std::thread::Builder::new()
            .name("stderr".into())
            .spawn(move || {
                let mut text = Vec::new();
                let _ = err.read_to_end(&mut text);
                text
            })
            .expect("spawn");
        let mut n = 0u64;
        let mut buf = vec![0u8; 1 << 16];
        let mut reads = 0u32;
        while let Ok(k) = out.read(&mut buf) {
            if k == 0 {
                break;
            }
            n += k as u64;
            reads += 1;
            if reads % 256 == 0 {
                *peak = (*peak).max(proc_status(pid).0);
            }
        }
        let status = c.wait().expect("wait");
        let errs = errs.join().unwrap_or_default();
        n += errs.len() as u64;
        assert!(
            status.success(),
            "{cmd:?} failed after {n} bytes: {}",
            String::from_utf8_lossy(&errs)
        );
        (began.elapsed().as_secs_f64(), n)
    };
    let mut k_times = Vec::new();
    let mut d_times = Vec::new();
    let mut c_times = Vec::new();
    let mut sizes = (0, 0);
    for _ in 0..RUNS {
        let (t, n) = time(kubectl(&["logs", "big"]), &mut peak_rss);
        k_times.push(t);
        sizes.0 = n;
        // The kubelet alone: curl straight to its port, no API server, no kubectl.
        let mut c = Command::new("curl");
        c.args(["-sk", "--cert"])
            .arg(&pki.client_cert)
            .arg("--key")
            .arg(&pki.client_key)
            .arg(format!(
                "https://127.0.0.1:{port}/containerLogs/default/big/c"
            ));
        let (t, n) = time(c, &mut peak_rss);
        c_times.push(t);
        assert_eq!(n, sizes.0, "curl reads what kubectl reads");
        let mut d = Command::new("docker");
        d.args(["logs", &id]);
        let (t, n) = time(d, &mut peak_rss);
        d_times.push(t);
        sizes.1 = n;
    }
    let median = |v: &mut Vec<f64>| {
        base::sort::sort_by(v, |a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let (k, d, c) = (
        median(&mut k_times),
        median(&mut d_times),
        median(&mut c_times),
    );
    let mb = |n: u64| n as f64 / (1024.0 * 1024.0);
    println!(
        "{:.0} MB written, {:.1} MB kept by the daemon and read by each",
        mb(LOG_BYTES),
        mb(sizes.1)
    );
    println!(
        "kubectl logs: {k:.2} s ({:.0} MB/s)   docker logs: {d:.2} s ({:.0} MB/s)",
        mb(sizes.0) / k,
        mb(sizes.1) / d,
    );
    assert_eq!(sizes.0, sizes.1, "both read the same log");
    println!(
        "curl straight to the kubelet port: {c:.2} s ({:.0} MB/s), {:.2} x docker logs",
        mb(sizes.0) / c,
        c / d
    );
    let ratio = k / d;
    println!(
        "ratio kubectl/docker: {ratio:.2} (target <= 1.2) {}",
        verdict(ratio <= 1.2)
    );
    println!(
        "rkubelet RSS: {:.1} MiB before, {:.1} MiB at most while streaming",
        rss0 as f64 / 1024.0,
        peak_rss as f64 / 1024.0
    );
    drop(guard);
}

/// Stops rkubelet and removes its containers and directory, also after a panic.
struct Guard {
    child: std::process::Child,
    node: String,
    dir: std::path::PathBuf,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for c in docker_ids(&self.node) {
            let _ = Command::new("docker")
                .args(["rm", "-f", &c])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The IDs of the node's containers.
fn docker_ids(node: &str) -> Vec<String> {
    let out = Command::new("docker")
        .args(["ps", "-aq", "--no-trunc", "--filter"])
        .arg(format!("label=io.rkubelet.node={node}"))
        .output()
        .expect("docker ps");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// The ID of container `c` of pod `big`.
fn docker_id(node: &str) -> String {
    let out = Command::new("docker")
        .args(["ps", "-q", "--no-trunc", "--filter"])
        .arg(format!("label=io.rkubelet.node={node}"))
        .args(["--filter", "label=io.kubernetes.container.name=c"])
        .output()
        .expect("docker ps");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .expect("the container")
        .to_string()
}
