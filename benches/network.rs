//! `make bench`: pod start with `--network-plugin=cni` (Debian's bridge, host-local and
//! loopback plugins, on a bridge and subnet of the bench's own) next to Docker's own
//! bridge (the default), for 1 pod and for 30 at once, the two modes taking turns; and
//! the time of one CNI `ADD` and one `DEL` as rkubelet logs them. A program
//! (harness = false), not a timed test.
//!
//! Start: the manifests are written at t0; the figure is the time until every pod's
//! sandbox and app container run (Docker's list, polled). With CNI the app container
//! starts only after the sandbox's `ADD`, so the figure includes it.
//!
//! Target (issue 29): CNI costs ≤ 15 % more than the bridge.
#![allow(clippy::disallowed_methods)] // clippy.toml's sort ban is for shipped code

use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

#[path = "common/mod.rs"]
#[allow(dead_code)] // this bench needs only some of the helpers
mod common;

use common::{poll, verdict, wait_running, write_manifest};

const BUSYBOX: &str = "rkubelet/busybox:1.35";
const PAUSE: &str = "rkubelet/pause:3.10";
const SLEEPER: &str = "trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done";
const TURNS_ONE_POD: usize = 5;
const MANY: usize = 30;

fn main() {
    let docker = common::docker_with_images();
    if !Path::new("/usr/lib/cni/bridge").is_file() {
        eprintln!("/usr/lib/cni/bridge missing: apt-get install -y containernetworking-plugins");
        std::process::exit(1);
    }
    let mut rows = Vec::new();
    let mut adds = Vec::new();
    let mut dels = Vec::new();
    for (n, turns) in [(1, TURNS_ONE_POD), (MANY, 1)] {
        let mut times: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
        for turn in 0..turns {
            for (m, cni) in [false, true].into_iter().enumerate() {
                let run = start(&docker, n, cni, turn);
                times[m].push(run.took);
                adds.extend(run.adds);
                dels.extend(run.dels);
            }
        }
        let med = |v: &mut Vec<Duration>| {
            v.sort();
            v[v.len() / 2]
        };
        let (bridge, cni) = (med(&mut times[0]), med(&mut times[1]));
        rows.push((n, bridge, cni));
    }
    println!("pod start (sandbox + 1 container), median of turns, CNI vs Docker's bridge:");
    println!(
        "{:>5} {:>12} {:>12} {:>7}",
        "pods", "bridge", "cni", "ratio"
    );
    for (n, bridge, cni) in &rows {
        let ratio = cni.as_secs_f64() / bridge.as_secs_f64();
        println!(
            "{n:>5} {:>10.0}ms {:>10.0}ms {ratio:>7.2} {}",
            bridge.as_secs_f64() * 1000.0,
            cni.as_secs_f64() * 1000.0,
            verdict(ratio <= 1.15)
        );
    }
    let median_ms = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    println!(
        "CNI ADD median {:.1} ms over {} sandboxes; DEL median {:.1} ms over {}",
        median_ms(&mut adds.clone()),
        adds.len(),
        median_ms(&mut dels.clone()),
        dels.len()
    );
}

/// One measured start: its time, and the ADD and DEL times rkubelet logged (ms).
struct Run {
    took: Duration,
    adds: Vec<f64>,
    dels: Vec<f64>,
}

/// Starts rkubelet (with or without CNI), writes `n` manifests, times them to
/// running, then lets rkubelet remove them (with their networks) and stops it.
fn start(docker: &docker::Docker, n: usize, cni: bool, turn: usize) -> Run {
    let pid = std::process::id();
    let node = format!(
        "bench-net-{pid}-{n}-{turn}-{}",
        if cni { "cni" } else { "br" }
    );
    let dir = std::env::temp_dir().join(format!("rkubelet-{node}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("manifests")).expect("manifests");
    let bridge = format!("rkbn{}", pid % 100_000);
    let mut flags: Vec<String> = Vec::new();
    if cni {
        std::fs::create_dir_all(dir.join("net.d")).expect("net.d");
        std::fs::write(
            dir.join("net.d").join("10-bench.conflist"),
            format!(
                r#"{{"cniVersion":"1.0.0","name":"bench","plugins":[
                    {{"type":"bridge","bridge":"{bridge}","isGateway":true,"ipMasq":false,
                      "ipam":{{"type":"host-local","dataDir":"{ipam}",
                               "ranges":[[{{"subnet":"10.250.{octet}.0/24"}}]]}}}},
                    {{"type":"loopback"}}]}}"#,
                ipam = dir.join("ipam").display(),
                octet = pid % 200 + 20,
            ),
        )
        .expect("conflist");
        flags = vec![
            "--network-plugin=cni".into(),
            "--cni-bin-dir=/usr/lib/cni".into(),
            format!("--cni-conf-dir={}", dir.join("net.d").display()),
            format!("--cni-cache-dir={}", dir.join("cni-cache").display()),
        ];
    }
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let (mut child, hz, _) = common::spawn_kubelet_with(&dir, &node, PAUSE, &flags);
    // Ready (its network too) before t0.
    poll(|| get(hz, "/healthz") == Some(200));
    let t0 = Instant::now();
    for i in 0..n {
        write_manifest(&dir.join("manifests"), &format!("p{i}.yaml"), &pod_yaml(i));
    }
    wait_running(docker, &node, 2 * n);
    let took = t0.elapsed();
    for i in 0..n {
        let _ = std::fs::remove_file(dir.join("manifests").join(format!("p{i}.yaml")));
    }
    poll(|| running(docker, &node) == 0);
    // The sandboxes' DELs run as they are killed; give the last ones a moment.
    std::thread::sleep(Duration::from_secs(2));
    let _ = child.kill();
    let _ = child.wait();
    let log = std::fs::read_to_string(dir.join("rkubelet.log")).unwrap_or_default();
    let run = Run {
        took,
        adds: logged_ms(&log, "cni: pod "),
        dels: logged_ms(&log, "cni: took down the network"),
    };
    remove_all(docker, &node);
    let _ = Command::new("ip").args(["link", "del", &bridge]).output();
    let _ = std::fs::remove_dir_all(&dir);
    run
}

fn pod_yaml(i: usize) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: p{i}}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: {BUSYBOX}
    command: ["sh", "-c", "{SLEEPER}"]
"#
    )
}

fn running(docker: &docker::Docker, node: &str) -> usize {
    use runtime::{ContainerState, Runtime};
    docker
        .list_containers(&[format!("io.rkubelet.node={node}")])
        .map(|l| {
            l.iter()
                .filter(|c| c.state == ContainerState::Running)
                .count()
        })
        .unwrap_or(usize::MAX)
}

fn remove_all(docker: &docker::Docker, node: &str) {
    use runtime::Runtime;
    for c in docker
        .list_containers(&[format!("io.rkubelet.node={node}")])
        .unwrap_or_default()
    {
        let _ = docker.remove_container(&c.id);
    }
}

/// The durations (`… in 15.2ms`) of the log lines that contain `what`, in ms.
fn logged_ms(log: &str, what: &str) -> Vec<f64> {
    log.lines()
        .filter(|l| l.contains(what))
        .filter_map(|l| l.rsplit(" in ").next())
        .filter_map(|d| {
            let d = d.trim();
            let (num, scale) = if let Some(v) = d.strip_suffix("ms") {
                (v, 1.0)
            } else if let Some(v) = d.strip_suffix("µs") {
                (v, 0.001)
            } else if let Some(v) = d.strip_suffix('s') {
                (v, 1000.0)
            } else {
                return None;
            };
            num.parse::<f64>().ok().map(|v| v * scale)
        })
        .collect()
}

/// A GET on 127.0.0.1:`port`: its status code.
fn get(port: u16, path: &str) -> Option<u16> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.split_whitespace().nth(1)?.parse().ok()
}
