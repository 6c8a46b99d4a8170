//! `make bench`: the resource analyzer at 110 pods (`--max-pods`' default). A real
//! rkubelet runs 110 pause-only pods (a sandbox and one `pause` container each) on the
//! real Docker engine; once `/stats/summary` lists them all, it is fetched 100 times
//! (a new connection each, as metrics-server does) and timed, and the CPU time of the
//! `stats`, `runtime-up`, `eviction` and GC threads is read from `/proc/<pid>/task` over a
//! minute in which `/metrics/resource` is scraped every 15 s (with no reader, the loop
//! reads no pod cgroup: `make bench`'s startup figures).
//! Targets: `/stats/summary` p99 ≤ 20 ms; `stats` ≤ 0.2 % of a core (with eviction and
//! GC, issue 12's budget: this loop alone must leave them room).
#![allow(clippy::disallowed_methods)] // clippy.toml's sort ban is for shipped code

#[path = "common/mod.rs"]
#[allow(dead_code)]
mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{spawn_kubelet, verdict, write_manifest};
use docker::Docker;
use runtime::Runtime;

const PAUSE: &str = "rkubelet/pause:3.10";
const PODS: usize = 110;
const MEASURE: Duration = Duration::from_secs(60);
/// metrics-server's default scrape interval.
const SCRAPE: Duration = Duration::from_secs(15);

fn pod_yaml(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  \
         terminationGracePeriodSeconds: 0\n  containers:\n  - name: c\n    image: {PAUSE}\n"
    )
}

/// One GET with a fresh connection: (status line ok, body length, time).
fn get(port: u16, path: &str) -> Option<(usize, Duration)> {
    let t0 = Instant::now();
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).ok()?;
    let took = t0.elapsed();
    buf.starts_with(b"HTTP/1.1 200")
        .then_some((buf.len(), took))
}

fn body(port: u16, path: &str) -> String {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let _ = write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    );
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default()
}

/// utime + stime (clock ticks) of the thread of `pid` named `name`.
fn thread_ticks(pid: u32, name: &str) -> Option<u64> {
    for e in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if comm.trim() == name {
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let rest = stat.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            let get = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            return Some(get(11) + get(12));
        }
    }
    None
}

fn main() {
    let docker = Docker::connect("unix:///var/run/docker.sock").expect("endpoint");
    if let Err(e) = docker.version() {
        eprintln!("Docker is needed: {e}");
        std::process::exit(1);
    }
    let node = format!("bench-stats-{}", std::process::id());
    let dir = std::env::temp_dir().join(format!("rkubelet-{node}"));
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).expect("dir");
    for i in 0..PODS {
        write_manifest(
            &manifests,
            &format!("p{i}.yaml"),
            &pod_yaml(&format!("p{i}")),
        );
    }
    let (mut child, _hz, ro) = spawn_kubelet(&dir, &node, PAUSE);
    let pid = child.id();
    println!("rkubelet's resource analyzer at {PODS} pause-only pods\n");

    // Every pod listed with its container's figures.
    let t0 = Instant::now();
    let mut listed = 0;
    while t0.elapsed() < Duration::from_secs(1200) {
        let b = body(ro, "/stats/summary");
        let v: serde_json::Value = serde_json::from_str(&b).unwrap_or_default();
        listed = v["pods"]
            .as_array()
            .map(|p| {
                p.iter()
                    .filter(|p| p["containers"][0]["memory"]["workingSetBytes"].is_u64())
                    .count()
            })
            .unwrap_or(0);
        if listed >= PODS {
            break;
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    println!(
        "pods listed with figures: {listed} after {:.0} s",
        t0.elapsed().as_secs_f64()
    );
    // Two more ticks: every container inspected, every directory measured once.
    std::thread::sleep(Duration::from_secs(25));

    let mut times: Vec<Duration> = Vec::new();
    let mut size = 0;
    for _ in 0..100 {
        if let Some((n, d)) = get(ro, "/stats/summary") {
            size = n;
            times.push(d);
        }
    }
    base::sort::sort(&mut times);
    let pct = |p: usize| times.get((times.len() * p / 100).min(times.len().saturating_sub(1)));
    let ms = |d: Option<&Duration>| d.map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0);
    let (p50, p99, max) = (ms(pct(50)), ms(pct(99)), ms(times.last()));

    let others = |pid| {
        ["eviction", "container-gc", "image-gc"]
            .iter()
            .map(|n| thread_ticks(pid, n).unwrap_or(0))
            .sum::<u64>()
    };
    let (s0, n0, o0, all0) = (
        thread_ticks(pid, "stats").unwrap_or(0),
        thread_ticks(pid, "runtime-up").unwrap_or(0),
        others(pid),
        common::cpu_ticks(pid),
    );
    // A reader over the window, as metrics-server's 15 s scrape: the pods' cgroups are
    // sampled only while somebody reads them, so without one this would measure the
    // disk figures alone.
    let began = Instant::now();
    while began.elapsed() < MEASURE {
        let _ = get(ro, "/metrics/resource");
        std::thread::sleep(SCRAPE.min(MEASURE.saturating_sub(began.elapsed())));
    }
    let (s1, n1, o1, all1) = (
        thread_ticks(pid, "stats").unwrap_or(0),
        thread_ticks(pid, "runtime-up").unwrap_or(0),
        others(pid),
        common::cpu_ticks(pid),
    );
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let core_pct = |ticks: u64| ticks as f64 / hz / MEASURE.as_secs_f64() * 100.0;
    let stats_pct = core_pct(s1.saturating_sub(s0));
    let net_pct = core_pct(n1.saturating_sub(n0));
    let all_pct = core_pct(all1.saturating_sub(all0));
    let others_pct = core_pct(o1.saturating_sub(o0));
    let together = stats_pct + others_pct;

    let _ = child.kill();
    let _ = child.wait();
    for c in docker
        .list_containers(&[format!("io.rkubelet.node={node}")])
        .unwrap_or_default()
    {
        let _ = docker.remove_container(&c.id);
    }
    let _ = std::fs::remove_dir_all(&dir);

    println!();
    println!("| figure | value | target |");
    println!("|---|---|---|");
    println!(
        "| `/stats/summary` p50 / p99 / max ({} requests, {} KiB) | {p50:.1} / {p99:.1} / {max:.1} ms | p99 ≤ 20 ms {} |",
        times.len(),
        size / 1024,
        verdict(p99 <= 20.0)
    );
    println!(
        "| `stats` thread CPU over {} s | {stats_pct:.3} % of a core | ≤ 0.2 % {} |",
        MEASURE.as_secs(),
        verdict(stats_pct <= 0.2)
    );
    println!(
        "| `runtime-up` thread CPU (runtime and network checks) | {net_pct:.3} % of a core | — |"
    );
    println!(
        "| `stats` + `eviction` + `container-gc` + `image-gc` | {together:.3} % of a core | ≤ 0.2 % {} |",
        verdict(together <= 0.2)
    );
    println!("| whole rkubelet CPU | {all_pct:.2} % of a core | — |");
}
