//! `make bench`: pod start latency of rkubelet next to the raw Docker Engine API, and
//! rkubelet's idle cost with 30 pods. A program (harness = false), not a timed test.
//!
//! - Start latency: a manifest is written (atomically) into the watched directory at
//!   t0; the figure is the time until Docker's event stream has reported the `start`
//!   of every container of the pod(s) (sandbox + 2 app containers per pod). The
//!   baseline, measured in the same run, creates and starts the same containers (pause
//!   sandbox with a shareable IPC namespace, two busybox containers joined to it)
//!   directly through the Engine API, sequentially, timed by the same event stream,
//!   taking turns with rkubelet's runs. The ratio is the figure. The stream is opened
//!   before t0 and pushes each start, so neither side is timed by polling the engine
//!   while it works (a `list` every 5 ms competes with the creates it times).
//! - Idle: with 1, 30 and 110 pods running, RSS and thread count from /proc, and CPU%
//!   of one core over 60 s from utime+stime; at 110 pods also the CPU of each thread
//!   over the window, each thread's resident stack, and RSS by mapping kind (smaps).
//! - `/metrics` with 30 pods: 200 scrapes of the read-only port, one connection each
//!   (median and p99 time, body size, rkubelet's RSS before and after); and the
//!   registry's own memory, measured in this process: the RSS growth of building 200
//!   registries filled as a 30-pod node fills one, divided by 200.
//!
//! Targets (issue 13 item 6): ratio ≤ 1.0 for one pod; idle RSS ≤ 6 MiB with one pod,
//! ≤ 14 MiB with 110; idle CPU ≤ 0.2 % of a core with 110; ≤ 24 threads at any count.
#![allow(clippy::disallowed_methods)] // clippy.toml's sort ban is for shipped code

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

#[path = "common/mod.rs"]
mod common;

use common::{cpu_ticks, poll, proc_status, verdict, wait_running, write_manifest};
use docker::Docker;
use rkubelet::metrics::KubeletMetrics;
use runtime::config::{PodSandboxConfig, PodSandboxMetadata};
use runtime::Runtime;

const BUSYBOX: &str = "rkubelet/busybox:1.35";
const PAUSE: &str = "rkubelet/pause:3.10";
const RUNS_ONE_POD: usize = 7;
const MANY: usize = 30;
const IDLE_WINDOW: Duration = Duration::from_secs(60);
/// Upstream's default maxPods: the idle figures' largest node.
const MAX_PODS: usize = 110;
const SLEEPER: &str = "trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done";

fn main() {
    // `cargo bench` passes --bench; nothing to parse.
    let docker = common::docker_with_images();
    let tag = format!("bench-{}", std::process::id());

    let dir = std::env::temp_dir().join(format!("rkubelet-{tag}"));
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).expect("dir");
    let node = format!("{tag}-node");
    let mut kubelet = Kubelet::start(&dir, &node);
    let pid = kubelet.child.id();
    let (rss0_kib, threads0) = proc_status(pid);

    // One pod: the raw Engine API sequence and rkubelet take turns, so that a drift
    // of the engine or the machine over the run (its state, other load) weighs on both
    // alike rather than on whichever went second.
    let mut raw_one = Vec::new();
    let mut rk_one = Vec::new();
    for i in 0..RUNS_ONE_POD {
        raw_one.push(raw_pods(&docker, &format!("{tag}-raw{i}"), 1));
        let name = format!("one{i}");
        let starts = Starts::watch(format!("io.rkubelet.node={node}"));
        let t0 = Instant::now();
        write_manifest(&manifests, &format!("{name}.yaml"), &pod_yaml(&name));
        rk_one.push(starts.wait(3) - t0);
        std::fs::remove_file(manifests.join(format!("{name}.yaml"))).expect("rm");
        wait_gone(&docker, &node);
    }
    let raw_many = raw_pods(&docker, &format!("{tag}-rawmany"), MANY);

    // Idle with one pod (it is removed again before the many-pod start).
    write_manifest(&manifests, "idle1.yaml", &pod_yaml("idle1"));
    wait_running(&docker, &node, 3);
    let idle1 = idle(pid);
    std::fs::remove_file(manifests.join("idle1.yaml")).expect("rm");
    wait_gone(&docker, &node);

    let starts = Starts::watch(format!("io.rkubelet.node={node}"));
    let t0 = Instant::now();
    for i in 0..MANY {
        let name = format!("many{i}");
        write_manifest(&manifests, &format!("{name}.yaml"), &pod_yaml(&name));
    }
    let rk_many = starts.wait(3 * MANY) - t0;
    drop(starts);
    wait_running(&docker, &node, 3 * MANY);
    if std::env::var_os("STARTUP_ONLY").is_some() {
        // `STARTUP_ONLY=1 cargo bench --bench startup`: the start figures alone.
        kubelet.stop();
        cleanup(&docker, &node, &dir);
        print_starts(&mut raw_one, &mut rk_one, raw_many, rk_many);
        return;
    }

    let idle_many = idle(pid);
    let (rss_kib, threads) = (idle_many.rss_kib, idle_many.threads);
    let (rss_after_kib, cpu_pct) = (idle_many.rss_after_kib, idle_many.cpu_pct);
    let scrape = scrape_metrics(kubelet.ro, pid);

    // Up to the kubelet's default maxPods.
    for i in MANY..MAX_PODS {
        let name = format!("many{i}");
        write_manifest(&manifests, &format!("{name}.yaml"), &pod_yaml(&name));
    }
    wait_running(&docker, &node, 3 * MAX_PODS);
    let idle_max = idle(pid);
    let registry_bytes = registry_cost();

    kubelet.stop();
    cleanup(&docker, &node, &dir);
    print_starts(&mut raw_one, &mut rk_one, raw_many, rk_many);
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "| RSS idle, {MANY} pods | {:.1} MiB (after 60 s: {:.1} MiB) | | | ≤ 15 MiB {} |",
        rss_kib as f64 / 1024.0,
        rss_after_kib as f64 / 1024.0,
        verdict(rss_after_kib as f64 / 1024.0 <= 15.0)
    );
    println!(
        "| threads, {MANY} pods | {threads} | | | ≤ 24 {} |",
        verdict(threads <= 24)
    );
    println!(
        "| CPU idle over {}s, {MANY} pods | {:.2} % of a core | | | ≤ 1 % {} |",
        IDLE_WINDOW.as_secs(),
        cpu_pct,
        verdict(cpu_pct <= 1.0)
    );
    println!(
        "| no pods, just started: RSS, threads | {:.1} MiB, {threads0} | | | ≤ 24 threads {} |",
        rss0_kib as f64 / 1024.0,
        verdict(threads0 <= 24)
    );
    for (pods, f, rss_target, cpu_target) in [
        (1, &idle1, Some(6.0), None),
        (MANY, &idle_many, None, None),
        (MAX_PODS, &idle_max, Some(14.0), Some(0.2)),
    ] {
        let rss = f.rss_after_kib as f64 / 1024.0;
        println!(
            "| idle, {pods} pods: RSS (after {}s) | {:.1} MiB ({:.1} MiB) | | | {} |",
            IDLE_WINDOW.as_secs(),
            f.rss_kib as f64 / 1024.0,
            rss,
            rss_target.map_or("—".to_string(), |t| format!(
                "≤ {t} MiB {}",
                verdict(rss <= t)
            ))
        );
        println!(
            "| idle, {pods} pods: threads (before, after) | {}, {} | | | ≤ 24 {} |",
            f.threads,
            f.threads_after,
            verdict(f.threads.max(f.threads_after) <= 24)
        );
        println!(
            "| idle, {pods} pods: CPU over {}s | {:.3} % of a core | | | {} |",
            IDLE_WINDOW.as_secs(),
            f.cpu_pct,
            cpu_target.map_or("—".to_string(), |t| format!(
                "≤ {t} % {}",
                verdict(f.cpu_pct <= t)
            ))
        );
    }
    println!();
    println!(
        "idle CPU by thread, {MAX_PODS} pods, over {}s (ms of CPU):",
        IDLE_WINDOW.as_secs()
    );
    for (name, ms) in &idle_max.by_thread {
        println!("  {name:<16} {ms:>8.1}");
    }
    println!("stack pages resident by thread, {MAX_PODS} pods (KiB):");
    for (name, kib) in &idle_max.stacks {
        println!("  {name:<16} {kib:>6}");
    }
    println!(
        "RSS by mapping, {MAX_PODS} pods (KiB): {:?}",
        idle_max.rss_by_kind
    );
    println!(
        "| /metrics scrape, {MANY} pods ({} scrapes) | median {:.2} ms, p99 {:.2} ms, {:.1} KiB | | | |",
        SCRAPES,
        ms(scrape.median),
        ms(scrape.p99),
        scrape.bytes as f64 / 1024.0
    );
    println!(
        "| RSS around the scrapes | {:.1} -> {:.1} MiB | | | |",
        scrape.rss_before_kib as f64 / 1024.0,
        scrape.rss_after_kib as f64 / 1024.0
    );
    println!(
        "| metrics registry (30-pod series), in-process | {:.1} KiB | | | |",
        registry_bytes as f64 / 1024.0
    );
}

/// Scrapes in the `/metrics` figures.
const SCRAPES: usize = 200;

struct Scrape {
    median: Duration,
    p99: Duration,
    bytes: usize,
    rss_before_kib: u64,
    rss_after_kib: u64,
}

/// `SCRAPES` sequential GETs of the read-only port's `/metrics`, one connection each,
/// as a scraper without keep-alive makes them.
fn scrape_metrics(port: u16, pid: u32) -> Scrape {
    use std::io::{Read, Write};
    let (rss_before_kib, _) = proc_status(pid);
    let mut times = Vec::with_capacity(SCRAPES);
    let mut bytes = 0;
    for _ in 0..SCRAPES {
        let t0 = Instant::now();
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
            .expect("write");
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).expect("read");
        times.push(t0.elapsed());
        let body_at = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map_or(0, |i| i + 4);
        assert!(raw.starts_with(b"HTTP/1.1 200"), "scrape failed");
        bytes = raw.len() - body_at;
    }
    let (rss_after_kib, _) = proc_status(pid);
    base::sort::sort(&mut times);
    Scrape {
        median: times[SCRAPES / 2],
        p99: times[SCRAPES * 99 / 100],
        bytes,
        rss_before_kib,
        rss_after_kib,
    }
}

/// The memory one registry holds with a 30-pod node's series: the RSS growth of 200
/// of them, divided by 200.
fn registry_cost() -> u64 {
    const N: u64 = 200;
    let pid = std::process::id();
    let (before, _) = proc_status(pid);
    let all: Vec<KubeletMetrics> = (0..N).map(|_| filled_registry()).collect();
    let (after, _) = proc_status(pid);
    drop(all);
    after.saturating_sub(before) * 1024 / N
}

/// A registry with the series a node running 30 pods has: every runtime operation,
/// both servers' request series, each worker operation type, every counter touched.
fn filled_registry() -> KubeletMetrics {
    let m = KubeletMetrics::default();
    m.node_name.set(["node"], 1.0);
    for s in ["created", "exited", "running", "unknown"] {
        m.running_containers.set([s], 60.0);
    }
    for s in ["true", "false"] {
        m.desired_pods.set([s], 30.0);
    }
    for op in [
        "version",
        "list_containers",
        "container_status",
        "run_podsandbox",
        "create_container",
        "start_container",
        "stop_container",
        "kill_container",
        "remove_container",
        "image_status",
        "pull_image",
        "list_images",
        "exec_sync",
    ] {
        m.runtime_operations.inc([op]);
        m.runtime_operations_duration.observe([op], 0.01);
        m.runtime_operations_errors.inc([op]);
    }
    for op in ["create", "update", "sync", "kill"] {
        m.pod_worker_duration.observe([op], 0.1);
    }
    for server in ["readonly", "readwrite"] {
        for path in ["pods", "metrics", "healthz", "metrics/probes", "other"] {
            let l = ["false", "GET", path, server];
            m.http_requests.inc(l);
            m.http_requests_duration.observe(l, 0.001);
            m.http_inflight.set(l, 0.0);
        }
    }
    m.started_containers.inc(["container"]);
    m.started_containers_errors
        .inc(["CreateContainerError", "container"]);
    m
}

/// Creates and starts `n` pods' containers through the Engine API, sequentially; returns
/// the time until Docker reports them all running. Removes them afterwards.
/// Removes the node's containers and the bench's directory.
fn cleanup(docker: &Docker, node: &str, dir: &Path) {
    for c in docker
        .list_containers(&[format!("io.rkubelet.node={node}")])
        .unwrap_or_default()
    {
        let _ = docker.remove_container(&c.id);
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// The start figures' table head and rows.
fn print_starts(
    raw_one: &mut [Duration],
    rk_one: &mut [Duration],
    raw_many: Duration,
    rk_many: Duration,
) {
    let med = |v: &mut [Duration]| {
        base::sort::sort(v);
        v[v.len() / 2]
    };
    let raw1 = med(raw_one);
    let rk1 = med(rk_one);
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let ratio1 = ms(rk1) / ms(raw1);
    let ratio_many = ms(rk_many) / ms(raw_many);
    println!();
    println!(
        "rkubelet start-up benchmark ({RUNS_ONE_POD} runs for one pod, median; {MANY} pods once)"
    );
    println!("| figure | rkubelet | raw Docker API | ratio | target |");
    println!("|---|---|---|---|---|");
    println!(
        "| 1 pod (sandbox + 2 containers) running | {:.0} ms | {:.0} ms | {:.2} | ≤ 1.0 {} |",
        ms(rk1),
        ms(raw1),
        ratio1,
        verdict(ratio1 <= 1.0)
    );
    println!(
        "| {MANY} pods ({} containers) running | {:.0} ms | {:.0} ms | {:.2} | — |",
        3 * MANY,
        ms(rk_many),
        ms(raw_many),
        ratio_many
    );
    let all = common::every_ms;
    println!(
        "(1 pod, every run in ms: rkubelet {}; raw {})",
        all(rk_one),
        all(raw_one)
    );
}

fn raw_pods(docker: &Docker, tag: &str, n: usize) -> Duration {
    let mut labels = BTreeMap::new();
    labels.insert("rkubelet.bench".to_string(), tag.to_string());
    let starts = Starts::watch(format!("rkubelet.bench={tag}"));
    let t0 = Instant::now();
    for p in 0..n {
        let sandbox = docker
            .run_pod_sandbox(&PodSandboxConfig {
                metadata: PodSandboxMetadata {
                    name: format!("{tag}-p{p}"),
                    uid: format!("{tag}-p{p}"),
                    namespace: "bench".into(),
                    attempt: 0,
                },
                hostname: format!("p{p}"),
                labels: labels.clone(),
                ..Default::default()
            })
            .expect("run sandbox");
        for c in 0..2 {
            common::raw_app_container(docker, format!("{tag}-p{p}-c{c}"), &sandbox, &labels);
        }
    }
    let took = starts.wait(3 * n) - t0;
    let filter = [format!("rkubelet.bench={tag}")];
    for c in docker.list_containers(&filter).unwrap_or_default() {
        let _ = docker.stop_container(&c.id, Duration::from_secs(2));
        let _ = docker.remove_container(&c.id);
    }
    took
}

/// A Docker event stream of the `start`s of containers carrying one label, opened
/// before a measured sequence: [`Starts::wait`] gives the moment the n-th start
/// arrived. The reading thread ends at the stream's next second after the drop.
struct Starts {
    rx: crossbeam_channel::Receiver<Instant>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Starts {
    fn watch(label: String) -> Starts {
        use std::sync::atomic::{AtomicBool, Ordering};
        let (tx, rx) = crossbeam_channel::unbounded();
        let (opened_tx, opened_rx) = crossbeam_channel::bounded(1);
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        std::thread::spawn(move || {
            let docker = Docker::connect("unix:///var/run/docker.sock").expect("endpoint");
            let filter = runtime::EventFilter {
                labels: vec![label],
                kinds: vec![runtime::ContainerEventType::Started],
                since: None,
            };
            let r = docker.watch_events(
                &filter,
                &mut |item| {
                    match item {
                        runtime::EventItem::Opened => {
                            let _ = opened_tx.send(());
                        }
                        runtime::EventItem::Event(_) => {
                            let _ = tx.send(Instant::now());
                        }
                    }
                    true
                },
                &|| stopped.load(Ordering::Relaxed),
            );
            if let Err(e) = r {
                if !stopped.load(Ordering::Relaxed) {
                    eprintln!("the event stream broke: {e}");
                }
            }
        });
        opened_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("Docker's event stream opens");
        Starts { rx, stop }
    }

    /// The moment the `n`-th start (counted from the watch) arrived.
    fn wait(&self, n: usize) -> Instant {
        let mut last = Instant::now();
        for i in 0..n {
            last = self
                .rx
                .recv_timeout(Duration::from_secs(300))
                .unwrap_or_else(|_| panic!("start {} of {n} not seen in 300 s", i + 1));
        }
        last
    }
}

impl Drop for Starts {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

fn wait_gone(docker: &Docker, node: &str) {
    let filter = [format!("io.rkubelet.node={node}")];
    poll(|| {
        docker
            .list_containers(&filter)
            .map(|l| l.is_empty())
            .unwrap_or(false)
    });
}

fn pod_yaml(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 2\n  containers:\n  - name: a\n    image: {BUSYBOX}\n    command: [\"sh\", \"-c\", {SLEEPER:?}]\n  - name: b\n    image: {BUSYBOX}\n    command: [\"sh\", \"-c\", {SLEEPER:?}]\n"
    )
}

struct Kubelet {
    child: Child,
    /// The read-only port (`/metrics`).
    ro: u16,
}

impl Kubelet {
    fn start(dir: &Path, node: &str) -> Kubelet {
        let (child, hz, ro) = common::spawn_kubelet(dir, node, PAUSE);
        poll(|| std::net::TcpStream::connect(("127.0.0.1", hz)).is_ok());
        // Let the first relist and the empty first snapshot happen.
        std::thread::sleep(Duration::from_secs(2));
        Kubelet { child, ro }
    }

    fn stop(&mut self) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// A kubelet's idle figures over [`IDLE_WINDOW`].
struct Idle {
    rss_kib: u64,
    rss_after_kib: u64,
    threads: u64,
    threads_after: u64,
    cpu_pct: f64,
    /// CPU ms per thread name over the window, most first (threads that came and went
    /// during it are missed).
    by_thread: Vec<(String, f64)>,
    /// Resident KiB of each thread's stack mapping, most first.
    stacks: Vec<(String, u64)>,
    /// Resident KiB by mapping kind: the binary, heap, stacks, other anonymous.
    rss_by_kind: BTreeMap<&'static str, u64>,
}

/// Waits 5 s for the start to settle, then measures `pid` idle for [`IDLE_WINDOW`].
fn idle(pid: u32) -> Idle {
    std::thread::sleep(Duration::from_secs(5));
    let (rss_kib, threads) = proc_status(pid);
    let tasks0 = common::task_ticks(pid);
    let cpu0 = cpu_ticks(pid);
    let w0 = Instant::now();
    std::thread::sleep(IDLE_WINDOW);
    let cpu1 = cpu_ticks(pid);
    let tasks1 = common::task_ticks(pid);
    let secs = w0.elapsed().as_secs_f64();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let cpu_pct = (cpu1 - cpu0) as f64 / hz / secs * 100.0;
    let (rss_after_kib, threads_after) = proc_status(pid);
    let mut by: BTreeMap<String, f64> = BTreeMap::new();
    for (tid, (name, t1)) in &tasks1 {
        let t0 = tasks0.get(tid).map_or(0, |(_, t)| *t);
        *by.entry(name.clone()).or_default() += (t1 - t0.min(*t1)) as f64 / hz * 1000.0;
    }
    let mut by_thread: Vec<(String, f64)> = by.into_iter().collect();
    base::sort::sort_by(&mut by_thread, |a, b| b.1.total_cmp(&a.1));
    let (stacks, rss_by_kind) = memory_map(pid);
    Idle {
        rss_kib,
        rss_after_kib,
        threads,
        threads_after,
        cpu_pct,
        by_thread,
        stacks,
        rss_by_kind,
    }
}

/// Each thread's resident stack (the mapping holding its stack pointer, from
/// `/proc/<pid>/task/<tid>/syscall`), and the process's RSS by mapping kind.
fn memory_map(pid: u32) -> (Vec<(String, u64)>, BTreeMap<&'static str, u64>) {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    // (start, end, name, rss KiB)
    let mut maps: Vec<(u64, u64, String, u64)> = Vec::new();
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((a, b)) = first.split_once('-') {
            if let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) {
                let name = line.split_whitespace().nth(5).unwrap_or("").to_string();
                maps.push((a, b, name, 0));
                continue;
            }
        }
        if let Some(v) = line.strip_prefix("Rss:") {
            if let Some(m) = maps.last_mut() {
                m.3 = v.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
            }
        }
    }
    let mut stacks = Vec::new();
    let mut stack_maps = std::collections::BTreeSet::new();
    if let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for e in dir.flatten() {
            let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
            let sc = std::fs::read_to_string(e.path().join("syscall")).unwrap_or_default();
            let f: Vec<&str> = sc.split_whitespace().collect();
            let Some(sp) = f
                .len()
                .checked_sub(2)
                .and_then(|i| f[i].strip_prefix("0x"))
                .and_then(|v| u64::from_str_radix(v, 16).ok())
            else {
                continue;
            };
            if let Some(i) = maps.iter().position(|m| m.0 <= sp && sp < m.1) {
                stack_maps.insert(i);
                stacks.push((comm.trim().to_string(), maps[i].3));
            }
        }
    }
    base::sort::sort_by_key(&mut stacks, |s| std::cmp::Reverse(s.1));
    let mut kinds = BTreeMap::new();
    for (i, m) in maps.iter().enumerate() {
        let kind = if stack_maps.contains(&i) {
            "thread stacks"
        } else if m.2.contains("rkubelet") {
            "binary"
        } else if m.2 == "[heap]" {
            "heap"
        } else if m.2.starts_with('/') {
            "libraries"
        } else {
            "other anonymous"
        };
        *kinds.entry(kind).or_insert(0) += m.3;
    }
    (stacks, kinds)
}
