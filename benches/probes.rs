//! `make bench`: the prober under load. 100 pods under a real rkubelet, each one busybox
//! `httpd` container with an httpGet readiness probe and a tcpSocket liveness probe at
//! `periodSeconds: 1` — 200 probes per second against real containers over the docker0
//! bridge. A program (harness = false), not a timed test.
//!
//! Figures: rkubelet's thread count with no pods and with the 100 pods (it must not grow
//! with the number of probes), the scheduling lateness of probe runs (start of the run
//! minus its due time; p50/p99 over the last 4096 runs, read from
//! `rkubelet_prober_lateness_seconds` on the read-only port's `/metrics/probes`) at
//! steady state, probe throughput, rkubelet CPU and RSS while probing.
//!
//! Then pods whose liveness probe is an `exec` (Docker's exec API: 120–340 ms each, and
//! about 9 per second at most on this machine) are added, 6 and then 20 of them, and
//! the lateness of network and exec probes is read apart: exec probes beyond the
//! engine's rate run late, network probes must not.
//!
//! Targets (issue 4, 2-core machine): lateness p50 < 50 ms, p99 < 200 ms; threads bounded.
#![allow(clippy::disallowed_methods)] // clippy.toml's sort ban is for shipped code

use std::io::{Read, Write};
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

#[path = "common/mod.rs"]
#[allow(dead_code)] // helpers other benches use
mod common;

use common::{cpu_ticks, proc_status, verdict, write_manifest};
use runtime::Runtime;

const BUSYBOX: &str = "rkubelet/busybox:1.35";
const PAUSE: &str = "rkubelet/pause:3.10";
const PODS: usize = 100;
/// Exec pods added in phases 2 and 3 (cumulative), and what the load means: the engine
/// here runs about 9 execs/s (measured with parallel clients), so 6/s fits and 20/s
/// does not.
const EXEC_PHASES: [(usize, &str); 2] = [
    (6, "6 exec/s, within the engine's ~9/s"),
    (20, "20 exec/s, beyond it"),
];
/// Long enough for the 4096-run lateness window to hold only steady-state runs
/// (4096 / 200 per second ≈ 20 s).
const STEADY_WINDOW: Duration = Duration::from_secs(25);

fn main() {
    let docker = common::docker_with_images();
    let tag = format!("bench-probes-{}", std::process::id());
    let dir = std::env::temp_dir().join(format!("rkubelet-{tag}"));
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).expect("dir");
    let node = format!("{tag}-node");
    let mut kubelet = Kubelet::start(&dir, &node);
    let pid = kubelet.child.id();
    // Every loop of an idle kubelet is up (its pools start workers only for work).
    poll(Duration::from_secs(60), || {
        let names = thread_names(pid);
        ["sync-loop", "prober", "pleg"]
            .iter()
            .all(|w| names.iter().any(|n| n == w))
    });
    let threads_empty = proc_status(pid).1;

    let t0 = Instant::now();
    for i in 0..PODS {
        let name = format!("p{i}");
        write_manifest(&manifests, &format!("{name}.yaml"), &pod_yaml(&name, false));
    }
    poll(Duration::from_secs(600), || kubelet.ready_pods() >= PODS);
    let all_ready = t0.elapsed();
    let starting = kubelet.lateness("network");

    // Phase 1: every probe due each second, none of them exec.
    let mut rows = vec![(
        format!("{PODS} pods, httpGet + tcpSocket"),
        2 * PODS,
        0,
        kubelet.steady(pid),
    )];
    let (rss_kib, threads) = proc_status(pid);
    let names = thread_names(pid);
    let failed = kubelet.metric_sum("result=\"failed\"");

    // Phases 2 and 3: pods whose liveness probe is an exec, within and beyond the
    // engine's exec rate.
    let mut exec_pods = 0;
    for (upto, what) in EXEC_PHASES {
        for i in exec_pods..upto {
            let name = format!("e{i}");
            write_manifest(&manifests, &format!("{name}.yaml"), &pod_yaml(&name, true));
        }
        exec_pods = upto;
        poll(Duration::from_secs(600), || {
            kubelet.ready_pods() >= PODS + exec_pods
        });
        rows.push((
            format!("+ {exec_pods} pods with exec liveness ({what})"),
            2 * (PODS + exec_pods),
            exec_pods,
            kubelet.steady(pid),
        ));
    }
    let threads_end = proc_status(pid).1;

    kubelet.stop();
    for c in docker
        .list_containers(&[format!("io.rkubelet.node={node}")])
        .unwrap_or_default()
    {
        let _ = docker.remove_container(&c.id);
    }
    let _ = std::fs::remove_dir_all(&dir);

    let ms = |d: f64| format!("{:.1}", d * 1000.0);
    println!();
    println!(
        "rkubelet prober benchmark: {PODS} pods (sandbox + 1 busybox httpd container each), \
         httpGet readiness + tcpSocket liveness at periodSeconds 1, then pods with exec \
         liveness; lateness = run start − due time, p50/p99 over the last 4096 runs of \
         each kind, after {}s of steady state",
        STEADY_WINDOW.as_secs()
    );
    println!(
        "| load | probes/s due | probes/s run | network lateness p50 / p99 (ms) | exec lateness p50 / p99 (ms) | rkubelet CPU | target (network) |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (what, due, execs, st) in &rows {
        let ok = st.net.0 * 1000.0 < 50.0 && st.net.1 * 1000.0 < 200.0;
        let exec = if *execs == 0 {
            "—".to_string()
        } else {
            format!("{} / {}", ms(st.exec.0), ms(st.exec.1))
        };
        println!(
            "| {what} | {due} | {:.0} | {} / {} | {exec} | {:.1} % | p50 < 50, p99 < 200 {} |",
            st.rate,
            ms(st.net.0),
            ms(st.net.1),
            st.cpu_pct,
            verdict(ok)
        );
    }
    println!();
    println!("| figure | value |");
    println!("|---|---|");
    println!(
        "| all {PODS} pods Ready after their manifests were written | {:.1} s |",
        all_ready.as_secs_f64()
    );
    println!(
        "| network lateness p50 / p99 while those pods were starting | {} / {} ms |",
        ms(starting.0),
        ms(starting.1)
    );
    println!("| probes failed while starting (httpd not listening yet) | {failed} |");
    println!(
        "| rkubelet threads: idle → {PODS} pods × 2 probes → + {exec_pods} exec pods | {threads_empty} → {threads} → {threads_end} |"
    );
    println!(
        "| rkubelet RSS with {PODS} pods probing | {:.1} MiB |",
        rss_kib as f64 / 1024.0
    );
    let mut counts = std::collections::BTreeMap::new();
    for n in names {
        let base = n.trim_end_matches(|c: char| c.is_ascii_digit()).to_string();
        *counts.entry(base).or_insert(0) += 1;
    }
    println!("threads by name: {counts:?}");
}

fn poll(limit: Duration, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + limit;
    while !done() {
        assert!(
            Instant::now() < until,
            "benchmark condition not met in {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn pod_yaml(name: &str, exec_liveness: bool) -> String {
    let script = "mkdir -p /www && echo ok > /www/index.html && exec httpd -f -p 8080 -h /www";
    let liveness = if exec_liveness {
        "      exec:\n        command: [\"cat\", \"/www/index.html\"]\n"
    } else {
        "      tcpSocket:\n        port: 8080\n"
    };
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 2\n  containers:\n  - name: web\n    image: {BUSYBOX}\n    command: [\"sh\", \"-c\", {script:?}]\n    readinessProbe:\n      httpGet:\n        path: /index.html\n        port: 8080\n      periodSeconds: 1\n    livenessProbe:\n{liveness}      periodSeconds: 1\n"
    )
}

/// Figures over one steady-state window.
struct Steady {
    /// Network probes' lateness (p50, p99), seconds.
    net: (f64, f64),
    /// Exec probes' lateness (p50, p99), seconds.
    exec: (f64, f64),
    /// Probe runs per second.
    rate: f64,
    /// rkubelet CPU, % of one core.
    cpu_pct: f64,
}

struct Kubelet {
    child: Child,
    ro: u16,
}

impl Kubelet {
    fn start(dir: &Path, node: &str) -> Kubelet {
        let (child, hz, ro) = common::spawn_kubelet(dir, node, PAUSE);
        poll(Duration::from_secs(60), || {
            std::net::TcpStream::connect(("127.0.0.1", hz)).is_ok()
        });
        Kubelet { child, ro }
    }

    fn get(&self, path: &str) -> String {
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.ro)) else {
            return String::new();
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(20)));
        let _ = write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n");
        let mut raw = String::new();
        let _ = s.read_to_string(&mut raw);
        raw.split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default()
    }

    fn ready_pods(&self) -> usize {
        let body = self.get("/pods");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        v["items"]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter(|p| {
                        p["status"]["conditions"].as_array().is_some_and(|cs| {
                            cs.iter()
                                .any(|c| c["type"] == "Ready" && c["status"] == "True")
                        })
                    })
                    .count()
            })
            .unwrap_or(0)
    }

    /// Sum of every `prober_probe_total` series whose labels contain `filter`.
    fn metric_sum(&self, filter: &str) -> u64 {
        self.get("/metrics/probes")
            .lines()
            .filter(|l| l.starts_with("prober_probe_total{") && l.contains(filter))
            .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<u64>().ok()))
            .sum()
    }

    fn probe_total(&self) -> u64 {
        self.metric_sum("")
    }

    /// Probes for `STEADY_WINDOW`, then reads lateness, throughput and CPU.
    fn steady(&self, pid: u32) -> Steady {
        let before = self.probe_total();
        let cpu0 = cpu_ticks(pid);
        let w0 = Instant::now();
        std::thread::sleep(STEADY_WINDOW);
        let secs = w0.elapsed().as_secs_f64();
        let cpu1 = cpu_ticks(pid);
        let after = self.probe_total();
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        Steady {
            net: self.lateness("network"),
            exec: self.lateness("exec"),
            rate: (after - before) as f64 / secs,
            cpu_pct: (cpu1 - cpu0) as f64 / hz / secs * 100.0,
        }
    }

    /// (p50, p99) lateness of one kind of probe, in seconds.
    fn lateness(&self, kind: &str) -> (f64, f64) {
        let text = self.get("/metrics/probes");
        let q = |q: &str| {
            let prefix =
                format!("rkubelet_prober_lateness_seconds{{kind=\"{kind}\",quantile=\"{q}\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .and_then(|v| v.parse().ok())
                .unwrap_or(f64::NAN)
        };
        (q("0.5"), q("0.99"))
    }

    fn stop(&mut self) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

fn thread_names(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter_map(|e| std::fs::read_to_string(e.path().join("comm")).ok())
                .map(|s| s.trim().to_string())
                .collect()
        })
        .unwrap_or_default()
}
