//! The chaos scenarios (issue 14): a real rkubelet on the real Docker engine through
//! its own crash, the runtime's restart, the API server's and etcd's outage, a full
//! root-dir filesystem, exhausted descriptors and a stepped wall clock; the crash and
//! the runtime's restart on containerd (CRI) too (issue 30). Each scenario is one
//! function taking a [`Scale`]: `benches/chaos.rs` (`make chaos`) runs them at full
//! size and prints the table; `tests/it/chaos.rs` runs the short forms in `make test`.
//! Every scenario ends with one [`Row`]: duplicates, lost pods, strays, unnecessary
//! restarts, time to converge, panics, RSS and threads. The checks go through the
//! node's runtime (`Node::runtime`), so one audit serves Docker and CRI.
//!
//! Long (over 800 lines) because it is one suite: the shared audit, the churn driver,
//! the private Docker engine and eight scenarios read best side by side, and the bench
//! includes it with `#[path]` as one file.
//!
//! What counts:
//! - a duplicate: two running containers for one pod container (or two running
//!   sandboxes for one pod) at the end, or during the run the same two (by pod UID)
//!   still both running three seconds later;
//! - lost: a wanted pod container (or sandbox) not running at the end;
//! - stray: a running container of a pod nobody wants any more at the end;
//! - unnecessary restarts: restart counts (the runtime's labels) above what the
//!   scenario's own edits (and a dockerd restart, which kills every container; a
//!   containerd restart kills none) account for, plus the
//!   containers that a scenario requires to keep running and that were replaced;
//! - panics: `thread … panicked:` lines (`logging::panic_line`) in the kubelet's log,
//!   plus exits nobody asked for.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use docker::Docker;
use runtime::{ContainerState, ContainerSummary, Runtime};
use serde_json::json;

use crate::apiserver::{Options, TestApiServer};
use crate::etcd::Etcd;
use crate::util::{http_get, label, pod_yaml, Node, Rt, BUSYBOX, LONG, PAUSE, SLEEPER};

/// How big a run is.
#[derive(Debug, Clone)]
pub struct Scale {
    /// Static pods under churn (kill -9 scenario).
    pub churn_pods: usize,
    /// kill -9s of rkubelet.
    pub kills: usize,
    /// Pods under churn against the private dockerd.
    pub dockerd_pods: usize,
    /// How long the private dockerd stays down.
    pub dockerd_down: Duration,
    /// How long the scenario's own containerd stays down: past upstream's 30 s
    /// `maxWaitForContainerRuntime`, so that healthz reports the runtime down.
    pub containerd_down: Duration,
    /// (file, API, etcd) pods of the outage scenario.
    pub sources_pods: (usize, usize, usize),
    /// How long the API server and etcd are away.
    pub outage: Duration,
    /// (running, new) pods of the full-disk scenario.
    pub disk_pods: (usize, usize),
    /// How long the disk stays full.
    pub disk_full_for: Duration,
    /// Pods of the descriptor scenario.
    pub fd_pods: usize,
    /// How long the descriptor load lasts.
    pub fd_load_for: Duration,
    /// Steady probed pods of the clock scenario.
    pub clock_pods: usize,
    /// How long each clock phase lasts.
    pub clock_phase: Duration,
    /// The longest a convergence may take before the row says "not converged".
    pub deadline: Duration,
}

impl Scale {
    /// `make chaos`: the sizes.
    pub fn full() -> Scale {
        Scale {
            churn_pods: 110,
            kills: 20,
            dockerd_pods: 40,
            dockerd_down: Duration::from_secs(15),
            containerd_down: Duration::from_secs(45),
            sources_pods: (10, 20, 10),
            outage: Duration::from_secs(120),
            disk_pods: (10, 5),
            disk_full_for: Duration::from_secs(45),
            fd_pods: 20,
            fd_load_for: Duration::from_secs(60),
            clock_pods: 10,
            clock_phase: Duration::from_secs(45),
            deadline: Duration::from_secs(300),
        }
    }

    /// The short forms in `make test` (small counts, 15 s outages, generous deadlines).
    pub fn short() -> Scale {
        Scale {
            churn_pods: 6,
            kills: 4,
            dockerd_pods: 4,
            dockerd_down: Duration::from_secs(5),
            containerd_down: Duration::from_secs(35),
            sources_pods: (2, 3, 2),
            outage: Duration::from_secs(15),
            disk_pods: (2, 1),
            disk_full_for: Duration::from_secs(15),
            fd_pods: 4,
            fd_load_for: Duration::from_secs(15),
            clock_pods: 2,
            clock_phase: Duration::from_secs(25),
            deadline: Duration::from_secs(180),
        }
    }
}

// ---------------------------------------------------------------------------------
// The row.

/// One scenario's outcome.
#[derive(Debug, Clone, Default)]
pub struct Row {
    /// The scenario.
    pub name: String,
    /// Duplicated pod containers or sandboxes.
    pub duplicates: usize,
    /// Wanted pod containers not running at the end.
    pub lost: usize,
    /// Running containers of pods nobody wants.
    pub stray: usize,
    /// Restarts nothing accounts for.
    pub unnecessary: u32,
    /// From the end of the disturbance to the wanted state (None: not within the
    /// deadline).
    pub converge: Option<Duration>,
    /// Panic lines and unrequested exits.
    pub panics: usize,
    /// VmRSS at the end, KiB.
    pub rss_kib: u64,
    /// Threads at the end.
    pub threads: u64,
    /// Scenario-specific checks that failed (empty when all held).
    pub failures: Vec<String>,
    /// Scenario-specific figures.
    pub note: String,
}

impl Row {
    /// Whether every count is 0, it converged and no scenario check failed.
    pub fn ok(&self) -> bool {
        self.duplicates == 0
            && self.lost == 0
            && self.stray == 0
            && self.unnecessary == 0
            && self.panics == 0
            && self.converge.is_some()
            && self.failures.is_empty()
    }

    /// The table's header.
    pub fn header() -> String {
        format!(
            "{:<22} {:>4} {:>4} {:>5} {:>6} {:>10} {:>6} {:>8} {:>7}  {}",
            "scenario",
            "dup",
            "lost",
            "stray",
            "unnec",
            "converge",
            "panic",
            "RSS",
            "threads",
            "result"
        )
    }

    /// One line of the table (the note and failures on the lines after it).
    pub fn line(&self) -> String {
        let conv = self
            .converge
            .map_or("NOT".to_string(), |d| format!("{:.1} s", d.as_secs_f64()));
        let mut s = format!(
            "{:<22} {:>4} {:>4} {:>5} {:>6} {:>10} {:>6} {:>5.1} MiB {:>7}  {}",
            self.name,
            self.duplicates,
            self.lost,
            self.stray,
            self.unnecessary,
            conv,
            self.panics,
            self.rss_kib as f64 / 1024.0,
            self.threads,
            if self.ok() { "ok" } else { "FAILED" }
        );
        if !self.note.is_empty() {
            s.push_str(&format!("\n    {}", self.note));
        }
        for f in &self.failures {
            s.push_str(&format!("\n    FAILED: {f}"));
        }
        s
    }
}

// ---------------------------------------------------------------------------------
// Audit: what runs in Docker against what should.

/// What should run: `pod name/container` keys (`POD` for the sandbox).
pub type Wanted = BTreeSet<String>;

/// The keys of a pod with the given containers.
pub fn wanted_pod(w: &mut Wanted, pod: &str, containers: &[&str]) {
    w.insert(format!("{pod}/POD"));
    for c in containers {
        w.insert(format!("{pod}/{c}"));
    }
}

/// The runtime's view of a node against the wanted set.
#[derive(Debug, Clone, Default)]
pub struct Audit {
    /// Keys with more than one running container.
    pub dups: Vec<String>,
    /// Wanted keys with none running.
    pub lost: Vec<String>,
    /// Running keys nobody wants.
    pub stray: Vec<String>,
    /// Key → (container ID, restart count) of each running container.
    pub running: BTreeMap<String, (String, u32)>,
}

impl Audit {
    /// Nothing duplicated, lost or stray.
    pub fn converged(&self) -> bool {
        self.dups.is_empty() && self.lost.is_empty() && self.stray.is_empty()
    }
}

fn key_of(c: &ContainerSummary) -> String {
    let cname = if label(c, "io.kubernetes.docker.type") == "podsandbox" {
        "POD"
    } else {
        label(c, "io.kubernetes.container.name")
    };
    format!("{}/{cname}", label(c, "io.kubernetes.pod.name"))
}

/// This node's containers (sandboxes included); None when the runtime does not answer.
pub fn node_containers(rt: &dyn Runtime, node: &str) -> Option<Vec<ContainerSummary>> {
    rt.list_containers(&[format!("io.rkubelet.node={node}")])
        .ok()
}

/// Compares the running containers of `node` with `wanted`.
pub fn audit(rt: &dyn Runtime, node: &str, wanted: &Wanted) -> Audit {
    let Some(all) = node_containers(rt, node) else {
        return Audit {
            lost: wanted.iter().cloned().collect(),
            ..Audit::default()
        };
    };
    let mut by_key: BTreeMap<String, Vec<&ContainerSummary>> = BTreeMap::new();
    for c in all.iter().filter(|c| c.state == ContainerState::Running) {
        by_key.entry(key_of(c)).or_default().push(c);
    }
    let mut a = Audit::default();
    for (k, cs) in &by_key {
        if cs.len() > 1 {
            a.dups.push(k.clone());
        }
        if !wanted.contains(k) {
            a.stray.push(k.clone());
        }
        let rc = label(cs[0], "annotation.io.kubernetes.container.restartCount")
            .parse()
            .unwrap_or(0);
        a.running.insert(k.clone(), (cs[0].id.clone(), rc));
    }
    a.lost = wanted
        .iter()
        .filter(|k| !by_key.contains_key(*k))
        .cloned()
        .collect();
    a
}

/// Restart counts above `allowed` (by pod name; 0 if absent), pods in `exempt` left
/// out (they die of their own).
pub fn unnecessary(a: &Audit, allowed: &BTreeMap<String, u32>, exempt: &BTreeSet<String>) -> u32 {
    let mut n = 0;
    for (k, (_, rc)) in &a.running {
        let pod = k.rsplit_once('/').map_or(k.as_str(), |(p, _)| p);
        if exempt.contains(pod) || k.ends_with("/POD") {
            continue;
        }
        n += rc.saturating_sub(allowed.get(pod).copied().unwrap_or(0));
    }
    n
}

/// Writes [`restart_evidence`] and the whole kubelet log beside it in the temporary
/// directory, prints the evidence, and names both files in the row's failures.
fn save_restart_evidence(
    row: &mut Row,
    node: &Node,
    a: &Audit,
    allowed: &BTreeMap<String, u32>,
    moments: &[(SystemTime, String)],
) {
    let evidence = restart_evidence(&*node.runtime, &node.name, a, allowed, &node.log(), moments);
    eprintln!("{evidence}");
    let file = std::env::temp_dir().join(format!("rkubelet-chaos-{}-restarts.txt", node.name));
    let saved = std::fs::write(&file, &evidence).is_ok()
        && std::fs::copy(node.dir.join("rkubelet.log"), file.with_extension("log")).is_ok();
    if saved {
        row.failures.push(format!(
            "unnecessary restarts: the pods' containers and log lines in {} (whole log: {})",
            file.display(),
            file.with_extension("log").display()
        ));
    }
}

/// The evidence behind an unnecessary-restart count: for each pod with a running app
/// container restarted more often than `allowed` explains, every container of that pod
/// in Docker (inspected: created, started and finished times, exit code, state, the
/// restart-count and hash labels), the kubelet's log lines naming the pod, and the
/// scenario's own `moments` (kills, starts) in the same UTC clock as the log. Empty
/// when nothing is unexplained.
pub fn restart_evidence(
    rt: &dyn Runtime,
    node: &str,
    a: &Audit,
    allowed: &BTreeMap<String, u32>,
    log: &str,
    moments: &[(SystemTime, String)],
) -> String {
    use rkubelet::logging::klog_time;
    let t = |s: Option<SystemTime>| s.map_or_else(|| "-".to_string(), klog_time);
    let mut out = String::new();
    for (k, (_, rc)) in &a.running {
        let pod = k.rsplit_once('/').map_or(k.as_str(), |(p, _)| p);
        let explained = allowed.get(pod).copied().unwrap_or(0);
        if k.ends_with("/POD") || *rc <= explained {
            continue;
        }
        out.push_str(&format!(
            "== {k}: restart count {rc}, {explained} explained by edits\n"
        ));
        let filter = [
            format!("io.rkubelet.node={node}"),
            format!("io.kubernetes.pod.name={pod}"),
        ];
        let mut all = rt.list_containers(&filter).unwrap_or_default();
        base::sort::sort_by_key(&mut all, |c| c.created);
        for c in &all {
            let Ok(d) = rt.inspect_container(&c.id) else {
                out.push_str(&format!("  {} {} (gone)\n", &c.id[..12], c.name));
                continue;
            };
            out.push_str(&format!(
                "  {} {} state={:?} exit={} created={} started={} finished={} \
                 restartCount={} hash={} error={:?}\n",
                &d.id[..12],
                d.name,
                d.state,
                d.exit_code,
                klog_time(d.created),
                t(d.started_at),
                t(d.finished_at),
                d.labels
                    .get("annotation.io.kubernetes.container.restartCount")
                    .map_or("-", String::as_str),
                d.labels
                    .get("annotation.io.kubernetes.container.hash")
                    .map_or("-", String::as_str),
                d.error,
            ));
        }
        // The kubelet's lines about the pod, with the scenario's moments merged in by
        // their klog time (both are `MMDD HH:MM:SS.uuuuuu` in UTC).
        let mut lines: Vec<(String, String)> = log
            .lines()
            .filter(|l| l.contains(pod))
            .map(|l| (l.get(1..21).unwrap_or_default().to_string(), l.to_string()))
            .collect();
        lines.extend(
            moments
                .iter()
                .map(|(at, what)| (klog_time(*at), format!("--- {} {what}", klog_time(*at)))),
        );
        base::sort::sort(&mut lines);
        for (_, l) in lines {
            out.push_str(&format!("  {l}\n"));
        }
    }
    out
}

/// Polls until the node matches `wanted` (then once more a few seconds later, so a
/// state that only passes by is not taken for the end); returns the last audit and
/// the time it took (None after `deadline`).
pub fn converge(
    rt: &dyn Runtime,
    node: &str,
    wanted: &Wanted,
    deadline: Duration,
) -> (Audit, Option<Duration>) {
    let t0 = Instant::now();
    loop {
        let a = audit(rt, node, wanted);
        if a.converged() {
            let took = t0.elapsed();
            std::thread::sleep(Duration::from_secs(3));
            let again = audit(rt, node, wanted);
            if again.converged() {
                return (again, Some(took));
            }
            continue;
        }
        if t0.elapsed() > deadline {
            return (a, None);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Watches a node's containers every second while a scenario runs: a pod container
/// (by pod UID) with the same two or more containers running three seconds apart is
/// a duplicate, whatever happens later.
pub struct DupMonitor {
    stop: Arc<AtomicBool>,
    found: Arc<Mutex<BTreeSet<String>>>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl DupMonitor {
    /// Starts watching `node` through its runtime.
    pub fn start(rt: Arc<dyn Runtime>, node: &str) -> DupMonitor {
        let stop = Arc::new(AtomicBool::new(false));
        let found = Arc::new(Mutex::new(BTreeSet::new()));
        let (st, fd, node) = (stop.clone(), found.clone(), node.to_string());
        let handle = std::thread::spawn(move || {
            let mut seen: BTreeMap<(String, Vec<String>), Instant> = BTreeMap::new();
            while !st.load(Ordering::SeqCst) {
                if let Some(all) = node_containers(&*rt, &node) {
                    let mut by: BTreeMap<String, Vec<String>> = BTreeMap::new();
                    for c in all.iter().filter(|c| c.state == ContainerState::Running) {
                        let k = format!("{}({})", key_of(c), label(c, "io.kubernetes.pod.uid"));
                        by.entry(k).or_default().push(c.id.clone());
                    }
                    let now = Instant::now();
                    let mut live = BTreeSet::new();
                    for (k, mut ids) in by.into_iter().filter(|(_, v)| v.len() > 1) {
                        base::sort::sort(&mut ids);
                        let first = *seen.entry((k.clone(), ids.clone())).or_insert(now);
                        if now.duration_since(first) >= Duration::from_secs(3) {
                            fd.lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .insert(k.clone());
                        }
                        live.insert((k, ids));
                    }
                    seen.retain(|k, _| live.contains(k));
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        });
        DupMonitor {
            stop,
            found,
            handle: Some(handle),
        }
    }

    /// Stops watching; the duplicates it saw.
    pub fn finish(mut self) -> BTreeSet<String> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        let found = self.found.lock().unwrap_or_else(|p| p.into_inner()).clone();
        found
    }
}

impl Drop for DupMonitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Polls `cond` every 500 ms until it returns Some or `timeout` passes (None then).
pub fn wait_opt<T>(timeout: Duration, mut cond: impl FnMut() -> Option<T>) -> Option<T> {
    let until = Instant::now() + timeout;
    loop {
        if let Some(v) = cond() {
            return Some(v);
        }
        if Instant::now() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// `thread … panicked:` lines in a log.
pub fn panic_lines(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains("thread ") && l.contains(" panicked: "))
        .map(str::to_string)
        .collect()
}

/// (VmRSS KiB, threads) of a process.
pub fn proc_status(pid: u32) -> (u64, u64) {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |k: &str| {
        s.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("Threads:"))
}

/// Fills in the counts every row has from the final audit and the node.
fn finish_row(row: &mut Row, node: &mut Node, a: &Audit, seen_dups: &BTreeSet<String>) {
    let mut dups: BTreeSet<String> = a.dups.iter().cloned().collect();
    dups.extend(seen_dups.iter().cloned());
    row.duplicates = dups.len();
    row.lost = a.lost.len();
    row.stray = a.stray.len();
    let panics = panic_lines(&node.log());
    row.panics += panics.len();
    if node.alive() {
        let (rss, threads) = proc_status(node.pid());
        row.rss_kib = rss;
        row.threads = threads;
    } else {
        row.panics += 1;
        row.failures
            .push("rkubelet is not running at the end".into());
    }
    let show = |what: &str, v: &[String]| -> String {
        if v.is_empty() {
            String::new()
        } else {
            format!(
                " {what}: {}",
                v.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
            )
        }
    };
    let detail = format!(
        "{}{}{}{}",
        show("dup", &dups.into_iter().collect::<Vec<_>>()),
        show("lost", &a.lost),
        show("stray", &a.stray),
        show("panic", &panics)
    );
    if !detail.is_empty() {
        row.failures.push(detail.trim().to_string());
    }
}

// ---------------------------------------------------------------------------------
// Churn: static pod manifests added, removed and changed while things break.

/// A tiny xorshift generator (the seed is printed, so a run can be repeated).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// Seeded from `RKUBELET_CHAOS_SEED` or the clock.
    pub fn new() -> Rng {
        let seed = std::env::var("RKUBELET_CHAOS_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        Rng(seed | 1)
    }

    /// The next number.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// A duration between `lo` and `hi` milliseconds.
    pub fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi.saturating_sub(lo).max(1)))
    }
}

/// The static pods the churn keeps: `c<i>` files with a generation in the command.
pub struct Churn {
    node: String,
    dir: PathBuf,
    target: usize,
    next: usize,
    /// Live pod index → generation of its container's command.
    live: BTreeMap<usize, u32>,
    /// Pod name → container edits since the pod was created (each may restart it once).
    pub edits: BTreeMap<String, u32>,
    /// Operations done: (added, removed, changed).
    pub ops: (usize, usize, usize),
}

impl Churn {
    /// A churn of about `target` pods in `node`'s manifest directory.
    pub fn new(node: &Node, target: usize) -> Churn {
        Churn {
            node: node.name.clone(),
            dir: node.manifests(),
            target,
            next: 0,
            live: BTreeMap::new(),
            edits: BTreeMap::new(),
            ops: (0, 0, 0),
        }
    }

    fn pod(&self, i: usize) -> String {
        format!("c{i}-{}", self.node)
    }

    fn write(&self, i: usize, gen: u32) {
        let body = pod_yaml(
            &format!("c{i}"),
            1,
            &[("c", &format!("{SLEEPER} # generation {gen}"))],
        );
        let file = format!("c{i}.yaml");
        let tmp = self.dir.join(format!(".{file}.tmp"));
        std::fs::write(&tmp, body).expect("write manifest");
        std::fs::rename(&tmp, self.dir.join(file)).expect("rename manifest");
    }

    /// Adds a pod.
    pub fn add(&mut self) {
        let i = self.next;
        self.next += 1;
        self.write(i, 0);
        self.live.insert(i, 0);
        self.edits.insert(self.pod(i), 0);
        self.ops.0 += 1;
    }

    /// Fills up to the target.
    pub fn fill(&mut self) {
        while self.live.len() < self.target {
            self.add();
        }
    }

    /// One random operation: add, remove or change a container's command.
    pub fn step(&mut self, rng: &mut Rng) {
        let r = rng.below(10);
        let n = self.live.len();
        if (r < 3 && n < self.target + 3) || n == 0 {
            self.add();
        } else if r < 6 && n + 3 > self.target {
            let i = *self
                .live
                .keys()
                .nth(rng.below(n as u64) as usize)
                .expect("a live pod");
            let _ = std::fs::remove_file(self.dir.join(format!("c{i}.yaml")));
            self.live.remove(&i);
            self.edits.remove(&self.pod(i));
            self.ops.1 += 1;
        } else {
            let i = *self
                .live
                .keys()
                .nth(rng.below(n as u64) as usize)
                .expect("a live pod");
            let gen = self.live[&i] + 1;
            self.write(i, gen);
            self.live.insert(i, gen);
            *self.edits.entry(self.pod(i)).or_default() += 1;
            self.ops.2 += 1;
        }
    }

    /// What should run now.
    pub fn wanted(&self) -> Wanted {
        let mut w = Wanted::new();
        for i in self.live.keys() {
            wanted_pod(&mut w, &self.pod(*i), &["c"]);
        }
        w
    }

    /// Steps every ~250 ms (jittered) for `d`.
    pub fn run_for(&mut self, rng: &mut Rng, d: Duration) {
        let until = Instant::now() + d;
        while Instant::now() < until {
            self.step(rng);
            std::thread::sleep(
                rng.millis(100, 400)
                    .min(until.saturating_duration_since(Instant::now())),
            );
        }
    }
}

// ---------------------------------------------------------------------------------
// Scenario 1: kill -9 under churn.

/// kill -9 of rkubelet at random moments while static pods are added, removed and
/// changed; then the churn stops and the node must settle on exactly the manifests.
/// On Docker.
pub fn kill9_under_churn(scale: &Scale) -> Row {
    kill9_under_churn_on(Rt::Docker, scale)
}

/// [`kill9_under_churn`] on the test binary's shared containerd (CRI): the sandboxes
/// and containers a killed kubelet leaves are found again through CRI's lists and
/// labels, the restart counts through its labels and the metadata's `attempt`.
pub fn kill9_under_churn_containerd(scale: &Scale) -> Row {
    kill9_under_churn_on(Rt::Containerd, scale)
}

/// [`kill9_under_churn`] on `rt`.
pub fn kill9_under_churn_on(rt: Rt, scale: &Scale) -> Row {
    let mut row = Row {
        name: match rt {
            Rt::Docker => "kill -9 under churn",
            Rt::Containerd => "kill -9 churn (CRI)",
        }
        .into(),
        ..Row::default()
    };
    let mut rng = Rng::new();
    let seed = rng.0;
    let mut node = Node::on(rt, "chaos-kill");
    let mut churn = Churn::new(&node, scale.churn_pods);
    churn.fill();
    node.start(&[]);
    let (a, first) = converge(
        &*node.runtime,
        &node.name,
        &churn.wanted(),
        scale.deadline * 2,
    );
    if first.is_none() {
        row.failures.push(format!(
            "the first {} pods never all ran: lost {:?}",
            scale.churn_pods,
            a.lost.len()
        ));
    }
    let monitor = DupMonitor::start(node.runtime.clone(), &node.name);
    let mut moments = Vec::new();
    for k in 0..scale.kills {
        let up = rng.millis(500, 6000);
        churn.run_for(&mut rng, up);
        if !node.alive() {
            row.panics += 1;
            row.failures.push("rkubelet exited by itself".into());
        }
        node.kill9();
        moments.push((SystemTime::now(), format!("kill -9 number {}", k + 1)));
        let down = rng.millis(0, 1500);
        churn.run_for(&mut rng, down);
        moments.push((SystemTime::now(), "rkubelet started".to_string()));
        node.start(&[]);
    }
    let last = rng.millis(500, 3000);
    churn.run_for(&mut rng, last);
    let wanted = churn.wanted();
    let (a, took) = converge(&*node.runtime, &node.name, &wanted, scale.deadline);
    let seen = monitor.finish();
    row.converge = took;
    row.unnecessary = unnecessary(&a, &churn.edits, &BTreeSet::new());
    if row.unnecessary > 0 {
        save_restart_evidence(&mut row, &node, &a, &churn.edits, &moments);
    }
    row.note = format!(
        "{} kills, churn +{} -{} ~{}, {} pods at the end, seed {seed}",
        scale.kills,
        churn.ops.0,
        churn.ops.1,
        churn.ops.2,
        wanted.len() / 2
    );
    finish_row(&mut row, &mut node, &a, &seen);
    row
}

// ---------------------------------------------------------------------------------
// Scenario 2: the runtime stopped and started under churn (a private dockerd).

/// A dockerd of the suite's own (its socket, data and exec roots, pidfile, bridge and
/// containerd), so that stopping it touches nothing else on the machine. The offline
/// images are loaded into it from the machine's engine.
pub struct PrivateDocker {
    dir: PathBuf,
    /// Where the runtime's state lives (sockets, dockerd's exec root, containerd's
    /// state, the shims' files): `dir` itself, or a tmpfs under it as a board's `/run`.
    run: PathBuf,
    bridge: String,
    containerd: Option<Child>,
    dockerd: Option<Child>,
}

impl PrivateDocker {
    /// The Engine API endpoint.
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.run.join("docker.sock").display())
    }

    /// The directory everything of this engine's is under (its processes' command
    /// lines name it).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn sh(cmd: &str) -> bool {
        Command::new("sh")
            .args(["-c", cmd])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Makes the bridge, starts containerd and dockerd, loads the images.
    pub fn start() -> PrivateDocker {
        Self::start_with(false)
    }

    /// As [`PrivateDocker::start`], with the runtime's state (what lives in `/run`:
    /// sockets, dockerd's exec root, containerd's state and its shims' files) on a
    /// tmpfs of its own, as on every systemd system, and its data roots on the disk.
    pub fn start_with_run_on_tmpfs() -> PrivateDocker {
        Self::start_with(true)
    }

    fn start_with(run_on_tmpfs: bool) -> PrivateDocker {
        let id = std::process::id() % 10_000;
        let dir = PathBuf::from(format!("/tmp/rkchaos-{id}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("private docker dir");
        let run = if run_on_tmpfs {
            let run = dir.join("run");
            std::fs::create_dir_all(&run).expect("private run dir");
            assert!(
                Self::sh(&format!(
                    "mount -t tmpfs -o mode=0755,size=256m rkchaos-run {}",
                    run.display()
                )),
                "cannot mount a tmpfs on {} (needs root)",
                run.display()
            );
            run
        } else {
            dir.clone()
        };
        let bridge = format!("rkchaos{id}");
        let net = 100 + (id % 150);
        assert!(
            Self::sh(&format!(
                "ip link add {bridge} type bridge && ip addr add 10.213.{net}.1/24 dev {bridge} \
                 && ip link set {bridge} up"
            )),
            "cannot make the bridge {bridge} (needs root and `ip`)"
        );
        let (d, r) = (dir.display(), run.display());
        std::fs::write(
            dir.join("containerd.toml"),
            format!(
                "version = 2\nroot = \"{d}/containerd-root\"\nstate = \"{r}/containerd-state\"\n\
                 [grpc]\n  address = \"{r}/containerd.sock\"\n[ttrpc]\n  address = \"{r}/containerd.sock.ttrpc\"\n\
                 [debug]\n  address = \"\"\n[metrics]\n  address = \"\"\n"
            ),
        )
        .expect("containerd config");
        std::fs::write(dir.join("daemon.json"), "{}").expect("daemon.json");
        let log = |n: &str| {
            Stdio::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(dir.join(n))
                    .expect("log"),
            )
        };
        let containerd = Command::new("containerd")
            .arg("--config")
            .arg(dir.join("containerd.toml"))
            .stdin(Stdio::null())
            .stdout(log("containerd.log"))
            .stderr(log("containerd.log"))
            .spawn()
            .expect("containerd must be installed (docker.io brings it)");
        let mut pd = PrivateDocker {
            dir,
            run,
            bridge,
            containerd: Some(containerd),
            dockerd: None,
        };
        crate::util::wait_for(
            "the private containerd's socket",
            Duration::from_secs(60),
            || pd.run.join("containerd.sock").exists().then_some(()),
        );
        pd.start_dockerd();
        let ep = pd.endpoint();
        let sock = ep.trim_start_matches("unix://");
        assert!(
            Self::sh(&format!(
                "docker save {BUSYBOX} {PAUSE} | docker -H unix://{sock} load"
            )),
            "cannot load the offline images into the private dockerd"
        );
        pd
    }

    /// Starts dockerd (again) and waits for `/_ping`.
    pub fn start_dockerd(&mut self) {
        let (d, r) = (&self.dir, &self.run);
        let log = Stdio::from(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(d.join("dockerd.log"))
                .expect("log"),
        );
        let child = Command::new("dockerd")
            .arg(format!("--host={}", self.endpoint()))
            .arg(format!("--data-root={}", d.join("data").display()))
            .arg(format!("--exec-root={}", r.join("exec").display()))
            .arg(format!("--pidfile={}", r.join("docker.pid").display()))
            .arg(format!("--config-file={}", d.join("daemon.json").display()))
            .arg(format!(
                "--containerd={}",
                r.join("containerd.sock").display()
            ))
            .arg(format!("--containerd-namespace={}", self.bridge))
            .arg(format!("--containerd-plugins-namespace={}-p", self.bridge))
            .arg(format!("--bridge={}", self.bridge))
            .args(["--iptables=false", "--ip6tables=false", "--ip-masq=false"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("dockerd must be installed");
        self.dockerd = Some(child);
        let docker = Docker::connect(&self.endpoint()).expect("endpoint");
        crate::util::wait_for(
            "the private dockerd to answer",
            Duration::from_secs(90),
            || docker.version().ok().map(|_| ()),
        );
    }

    /// Stops dockerd as its service manager would (SIGTERM, then wait); its
    /// containers stop with it (no live-restore).
    pub fn stop_dockerd(&mut self) {
        if let Some(mut c) = self.dockerd.take() {
            // SAFETY: kill(2) on a process this suite spawned and has not reaped.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let until = Instant::now() + Duration::from_secs(60);
            while Instant::now() < until {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for PrivateDocker {
    fn drop(&mut self) {
        if self.dockerd.is_some() {
            if let Ok(d) = Docker::connect(&self.endpoint()) {
                for c in d.list_containers(&[]).unwrap_or_default() {
                    let _ = d.remove_container(&c.id);
                }
            }
        }
        self.stop_dockerd();
        if let Some(mut c) = self.containerd.take() {
            // SAFETY: as above, our own child.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let until = Instant::now() + Duration::from_secs(20);
            while Instant::now() < until && matches!(c.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        // Shims of our containerd (they carry its socket path) that outlived it.
        let sock = self.run.join("containerd.sock").display().to_string();
        if let Ok(rd) = std::fs::read_dir("/proc") {
            for e in rd.flatten() {
                let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                    continue;
                };
                let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
                if String::from_utf8_lossy(&cmd).contains(&sock) {
                    // SAFETY: kill(2) on a shim our own containerd started.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
        }
        let d = self.dir.display().to_string();
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        let mut ours: Vec<&str> = mounts
            .lines()
            .filter_map(|l| l.split_whitespace().nth(1))
            .filter(|m| m.starts_with(&d))
            .collect();
        ours.reverse();
        for m in ours {
            Self::sh(&format!("umount -l {m}"));
        }
        Self::sh(&format!("ip link del {}", self.bridge));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Static pods under churn on a private dockerd that is stopped (its containers die
/// with it) and started again; the node must settle on the manifests.
pub fn dockerd_restart_under_churn(scale: &Scale) -> Row {
    let mut row = Row {
        name: "dockerd restart".into(),
        ..Row::default()
    };
    let mut rng = Rng::new();
    let seed = rng.0;
    let mut pd = PrivateDocker::start();
    let mut node = Node::new("chaos-dockerd");
    node.endpoint = pd.endpoint();
    node.docker = Docker::connect(&node.endpoint).expect("endpoint");
    node.runtime = Arc::new(Docker::connect(&node.endpoint).expect("endpoint"));
    let mut churn = Churn::new(&node, scale.dockerd_pods);
    churn.fill();
    node.start(&[]);
    let (_, first) = converge(
        &*node.runtime,
        &node.name,
        &churn.wanted(),
        scale.deadline * 2,
    );
    if first.is_none() {
        row.failures.push("the first pods never all ran".into());
    }
    churn.run_for(&mut rng, Duration::from_secs(5));
    // Every container alive now dies with dockerd: one restart each is expected.
    for v in churn.edits.values_mut() {
        *v += 1;
    }
    pd.stop_dockerd();
    churn.run_for(&mut rng, scale.dockerd_down);
    pd.start_dockerd();
    let back = Instant::now();
    let monitor = DupMonitor::start(node.runtime.clone(), &node.name);
    churn.run_for(&mut rng, Duration::from_secs(5));
    let wanted = churn.wanted();
    let (a, took) = converge(&*node.runtime, &node.name, &wanted, scale.deadline);
    row.converge = took.map(|_| back.elapsed().saturating_sub(Duration::from_secs(3)));
    let seen = monitor.finish();
    row.unnecessary = unnecessary(&a, &churn.edits, &BTreeSet::new());
    row.note = format!(
        "dockerd down {:?}, churn +{} -{} ~{}, {} pods; converge counted from dockerd's return, seed {seed}",
        scale.dockerd_down,
        churn.ops.0,
        churn.ops.1,
        churn.ops.2,
        wanted.len() / 2
    );
    finish_row(&mut row, &mut node, &a, &seen);
    drop(node);
    drop(pd);
    row
}

/// Static pods under churn on a containerd of the scenario's own, stopped (SIGTERM, as
/// its service manager does) and started again. Unlike dockerd without live-restore,
/// containerd's shims keep the containers running while it is away, as upstream
/// counts on: every sandbox and container that ran before and is still wanted unchanged
/// must be the same one after (a replaced one counts as an unnecessary restart). While
/// it is down, `/healthz` reports the runtime down once upstream's 30 s
/// (`maxWaitForContainerRuntime`) have passed, and the PLEG stays healthy (its threshold
/// is 3 min); it comes back to `ok` with no kubelet restart, and the node settles on the
/// manifests with no duplicate sandbox or container.
pub fn containerd_restart_under_churn(scale: &Scale) -> Row {
    let mut row = Row {
        name: "containerd restart".into(),
        ..Row::default()
    };
    let mut rng = Rng::new();
    let seed = rng.0;
    let mut ctrd = crate::containerd::Containerd::start();
    let (_cri_shutdown, cri_loops) = crate::containerd::loops();
    let mut node = Node::new("chaos-ctrd");
    node.rt = Rt::Containerd;
    node.endpoint = ctrd.endpoint();
    node.runtime = Arc::new(
        rkubelet_cri::runtime::CriRuntime::new(&node.endpoint, LONG, &cri_loops)
            .expect("a unix endpoint"),
    );
    let mut churn = Churn::new(&node, scale.dockerd_pods);
    churn.fill();
    // Beside the churn, pods nobody touches: at least these are kept across the
    // restart whatever the churn does meanwhile.
    let mut steady = Wanted::new();
    for i in 0..(scale.dockerd_pods / 2).max(2) {
        node.write_manifest(
            &format!("steady{i}.yaml"),
            &pod_yaml(&format!("steady{i}"), 1, &[("c", SLEEPER)]),
        );
        wanted_pod(&mut steady, &format!("steady{i}-{}", node.name), &["c"]);
    }
    let all = |churn: &Churn| -> Wanted { churn.wanted().union(&steady).cloned().collect() };
    node.start(&[]);
    let (_, first) = converge(&*node.runtime, &node.name, &all(&churn), scale.deadline * 2);
    if first.is_none() {
        row.failures.push("the first pods never all ran".into());
    }
    churn.run_for(&mut rng, Duration::from_secs(5));
    // What runs once the edits so far are done is what containerd's restart must keep:
    // the steady pods, and the churn's whose container carries as many restarts as
    // they had edits.
    let (before, _) = converge(&*node.runtime, &node.name, &all(&churn), scale.deadline);
    let edits_before = churn.edits.clone();
    let kept: BTreeMap<String, String> = before
        .running
        .iter()
        .filter(|(k, _)| {
            let pod = k.rsplit_once('/').map_or(k.as_str(), |(p, _)| p);
            let app = format!("{pod}/c");
            before
                .running
                .get(&app)
                .is_some_and(|(_, rc)| *rc >= edits_before.get(pod).copied().unwrap_or(0))
        })
        .map(|(k, (id, _))| (k.clone(), id.clone()))
        .collect();
    let monitor = DupMonitor::start(node.runtime.clone(), &node.name);
    let pid = node.pid();
    ctrd.stop_daemon("-TERM");
    let down = Instant::now();
    let (mut saw_down, mut pleg_failed) = (None, None);
    while down.elapsed() < scale.containerd_down {
        churn.step(&mut rng);
        std::thread::sleep(rng.millis(100, 400));
        if let Ok((code, body)) = http_get(node.healthz_port, "/healthz?verbose") {
            if code == 500 && body.contains("[-]runtime failed: container runtime is down") {
                saw_down.get_or_insert(down.elapsed());
            }
            if body.contains("[-]pleg") {
                pleg_failed.get_or_insert(body);
            }
        }
    }
    if saw_down.is_none() {
        row.failures.push(format!(
            "healthz never said `container runtime is down` in {:?} without containerd",
            scale.containerd_down
        ));
    }
    if let Some(body) = pleg_failed {
        row.failures.push(format!(
            "the PLEG was reported unhealthy within its 3 min threshold: {body}"
        ));
    }
    ctrd.run_daemon();
    let back = Instant::now();
    churn.run_for(&mut rng, Duration::from_secs(5));
    let wanted = all(&churn);
    let (a, took) = converge(&*node.runtime, &node.name, &wanted, scale.deadline);
    row.converge = took.map(|_| back.elapsed().saturating_sub(Duration::from_secs(3)));
    let healthy = wait_opt(scale.deadline, || {
        (http_get(node.healthz_port, "/healthz").ok()? == (200, "ok".to_string())).then_some(())
    });
    if healthy.is_none() {
        let (_, body) = http_get(node.healthz_port, "/healthz?verbose").unwrap_or_default();
        row.failures
            .push(format!("healthz did not come back to ok: {body}"));
    }
    if node.alive() && node.pid() != pid {
        row.failures.push("rkubelet was restarted".into());
    }
    let seen = monitor.finish();
    if let Some(k) = steady.iter().find(|k| !kept.contains_key(*k)) {
        row.failures
            .push(format!("{k} did not run before containerd's restart"));
    }
    // Still wanted, not edited since: the very same sandbox or container.
    let must_keep: Vec<(&String, &String)> = kept
        .iter()
        .filter(|(k, _)| {
            let pod = k.rsplit_once('/').map_or(k.as_str(), |(p, _)| p);
            steady.contains(*k)
                || (churn.edits.contains_key(pod) && churn.edits.get(pod) == edits_before.get(pod))
        })
        .collect();
    let replaced: Vec<String> = must_keep
        .iter()
        .filter(|(k, id)| a.running.get(*k).is_none_or(|(now, _)| now != *id))
        .map(|(k, _)| (*k).clone())
        .collect();
    row.unnecessary = unnecessary(&a, &churn.edits, &BTreeSet::new())
        + u32::try_from(replaced.iter().filter(|k| !k.ends_with("/POD")).count())
            .unwrap_or(u32::MAX);
    if !replaced.is_empty() {
        row.failures.push(format!(
            "replaced across containerd's restart (its shims kept them running): {replaced:?}"
        ));
    }
    row.note = format!(
        "containerd down {:?} (runtime reported down after {:?}), churn +{} -{} ~{}, {} pods, \
         {} sandboxes and containers kept; converge counted from containerd's return, seed {seed}",
        scale.containerd_down,
        saw_down.unwrap_or_default(),
        churn.ops.0,
        churn.ops.1,
        churn.ops.2,
        wanted.len() / 2,
        must_keep.len()
    );
    finish_row(&mut row, &mut node, &a, &seen);
    drop(node);
    drop(ctrd);
    row
}

// ---------------------------------------------------------------------------------
// Scenario 3: the API server and etcd away, back with new data.

fn api_pod(name: &str, node: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
           "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "c", "image": BUSYBOX,
                                    "command": ["sh", "-c", SLEEPER]}]}})
}

fn etcd_pod(name: &str) -> String {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "c", "image": BUSYBOX,
                                    "command": ["sh", "-c", SLEEPER]}]}})
    .to_string()
}

/// File, API and etcd pods; the API server stand-in and etcd go away for
/// `scale.outage` while pods are added and removed at both (etcd's history compacted
/// past the kubelet's watch); every pod that was running keeps running through the
/// outage (same containers), and afterwards exactly the new set runs.
pub fn sources_outage(scale: &Scale) -> Row {
    let mut row = Row {
        name: "API server+etcd away".into(),
        ..Row::default()
    };
    let (nf, na, ne) = scale.sources_pods;
    let mut api = TestApiServer::start(Options::default());
    let mut etcd = Etcd::start();
    let mut node = Node::new("chaos-src");
    let n = node.name.clone();
    let prefix = format!("/registry/hosts/{n}/");
    let kc = api.kubeconfig(&node.dir, "kubeconfig", "token: good-token");
    let mut wanted = Wanted::new();
    for i in 0..nf {
        node.write_manifest(
            &format!("f{i}.yaml"),
            &pod_yaml(&format!("f{i}"), 1, &[("c", SLEEPER)]),
        );
        wanted_pod(&mut wanted, &format!("f{i}-{n}"), &["c"]);
    }
    for i in 0..na {
        api.create_pod(api_pod(&format!("a{i}"), &n));
        wanted_pod(&mut wanted, &format!("a{i}"), &["c"]);
    }
    for i in 0..ne {
        etcd.put(&format!("{prefix}e{i}"), &etcd_pod(&format!("e{i}")));
        wanted_pod(&mut wanted, &format!("e{i}-{n}"), &["c"]);
    }
    node.start(&[
        &format!("--kubeconfig={}", kc.display()),
        &format!("--etcd-servers={}", etcd.url),
    ]);
    let (before, first) = converge(&*node.runtime, &node.name, &wanted, scale.deadline);
    if first.is_none() {
        row.failures
            .push(format!("the first pods never all ran: {:?}", before.lost));
    }
    let monitor = DupMonitor::start(node.runtime.clone(), &node.name);

    api.stop();
    let down = Instant::now();
    // Meanwhile at etcd: half the pods go, as many come, and the history is compacted
    // past the revision the kubelet's watch was at, so it must list afresh when etcd
    // is back (the data changes while the kubelet cannot see etcd).
    let egone = (ne / 2).max(1).min(ne);
    etcd.change_while_away(|aside| {
        for i in 0..egone {
            aside.delete(&format!("{prefix}e{i}"));
        }
        for i in ne..ne + egone {
            aside.put(&format!("{prefix}e{i}"), &etcd_pod(&format!("e{i}")));
        }
        aside.compact();
    });
    for i in 0..egone {
        wanted.remove(&format!("e{i}-{n}/POD"));
        wanted.remove(&format!("e{i}-{n}/c"));
    }
    for i in ne..ne + egone {
        wanted_pod(&mut wanted, &format!("e{i}-{n}"), &["c"]);
    }
    // Meanwhile at the API server: half the pods go (half gracefully, half at once),
    // as many come.
    let gone = (na / 2).max(1).min(na);
    for i in 0..gone {
        let name = format!("a{i}");
        if i % 2 == 0 {
            api.mark_deleted("default", &name, 1);
        } else {
            api.delete_pod("default", &name);
        }
        wanted.remove(&format!("{name}/POD"));
        wanted.remove(&format!("{name}/c"));
    }
    for i in na..na + gone {
        api.create_pod(api_pod(&format!("a{i}"), &n));
        wanted_pod(&mut wanted, &format!("a{i}"), &["c"]);
    }
    // Through the outage every pod that ran keeps its containers.
    let mut interrupted = BTreeSet::new();
    while down.elapsed() < scale.outage {
        let now = audit(&*node.runtime, &node.name, &Wanted::new());
        for (k, (id, _)) in &before.running {
            if now.running.get(k).map(|(i, _)| i) != Some(id) {
                interrupted.insert(k.clone());
            }
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    api.restart();
    etcd.restart();
    let back = Instant::now();
    let (a, took) = converge(&*node.runtime, &node.name, &wanted, scale.deadline);
    row.converge = took.map(|_| back.elapsed().saturating_sub(Duration::from_secs(3)));
    let seen = monitor.finish();
    // Pods that were kept must still be the same containers.
    for (k, (id, _)) in &before.running {
        if wanted.contains(k) && a.running.get(k).map(|(i, _)| i) != Some(id) {
            interrupted.insert(k.clone());
        }
    }
    row.unnecessary =
        unnecessary(&a, &BTreeMap::new(), &BTreeSet::new()) + interrupted.len() as u32;
    if !interrupted.is_empty() {
        row.failures.push(format!(
            "replaced or stopped during the outage: {:?}",
            interrupted.iter().take(5).collect::<Vec<_>>()
        ));
    }
    // The pods deleted at the API server are gone from it too (final delete).
    let left: Vec<String> = (0..gone)
        .filter(|i| i % 2 == 0)
        .map(|i| format!("a{i}"))
        .filter(|p| api.get_pod("default", p).is_some())
        .collect();
    let lingering = wait_opt(scale.deadline, || {
        left.iter()
            .all(|p| api.get_pod("default", p).is_none())
            .then_some(())
    });
    if lingering.is_none() {
        row.failures.push(format!(
            "gracefully deleted pods never finally deleted: {left:?}"
        ));
    }
    row.note = format!(
        "{nf} file + {na} API + {ne} etcd pods; away {:?}: API -{gone} +{gone}, etcd -{egone} +{egone}; \
         converge counted from their return",
        scale.outage
    );
    finish_row(&mut row, &mut node, &a, &seen);
    row
}

// ---------------------------------------------------------------------------------
// Scenario 4: the root dir's filesystem full.

/// A tmpfs mounted on a directory; unmounted (lazily: the kubelet may still hold a
/// file) and the directory removed on drop.
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `size` (e.g. `4m`) on `dir`.
    pub fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).expect("mount point");
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "rkchaos"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "cannot mount a tmpfs on {} (needs root)", dir.display());
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Fills the filesystem of `dir` with one file; returns it and the bytes written.
pub fn fill(dir: &Path) -> (PathBuf, u64) {
    let f = dir.join("chaos-fill");
    let mut file = std::fs::File::create(&f).expect("fill file");
    let chunk = vec![0u8; 16 * 1024];
    let mut n = 0u64;
    while file.write_all(&chunk).is_ok() {
        n += chunk.len() as u64;
    }
    // The last partial chunk.
    let small = [0u8; 512];
    while file.write_all(&small).is_ok() {
        n += 512;
    }
    let _ = file.sync_all();
    (f, n)
}

/// `--root-dir` on a 4 MiB tmpfs, filled while pods run: they keep running, new pods
/// are refused with an error that says why, no panic; once space is freed the new pods
/// run.
pub fn root_dir_full(scale: &Scale) -> Row {
    let mut row = Row {
        name: "root dir full".into(),
        ..Row::default()
    };
    let (old, new) = scale.disk_pods;
    let mut node = Node::new("chaos-disk");
    let root = node.dir.join("root");
    let _tmpfs = Tmpfs::mount(&root, "4m");
    let n = node.name.clone();
    let mut wanted = Wanted::new();
    for i in 0..old {
        node.write_manifest(
            &format!("o{i}.yaml"),
            &pod_yaml(&format!("o{i}"), 1, &[("c", SLEEPER)]),
        );
        wanted_pod(&mut wanted, &format!("o{i}-{n}"), &["c"]);
    }
    node.start(&[]);
    let (before, first) = converge(&*node.runtime, &n, &wanted, scale.deadline);
    if first.is_none() {
        row.failures
            .push(format!("the first pods never all ran: {:?}", before.lost));
    }
    let monitor = DupMonitor::start(node.runtime.clone(), &n);
    let log_before = node.log().len();
    let (filler, bytes) = fill(&root);
    for i in 0..new {
        node.write_manifest(
            &format!("n{i}.yaml"),
            &pod_yaml(&format!("n{i}"), 1, &[("c", SLEEPER)]),
        );
        wanted_pod(&mut wanted, &format!("n{i}-{n}"), &["c"]);
    }
    let full_since = Instant::now();
    let mut interrupted = BTreeSet::new();
    let mut new_running = BTreeSet::new();
    while full_since.elapsed() < scale.disk_full_for {
        let now = audit(&*node.runtime, &n, &Wanted::new());
        for (k, (id, _)) in &before.running {
            if now.running.get(k).map(|(i, _)| i) != Some(id) {
                interrupted.insert(k.clone());
            }
        }
        for i in 0..new {
            if now.running.contains_key(&format!("n{i}-{n}/c")) {
                new_running.insert(i);
            }
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let log_full = node.log().get(log_before..).unwrap_or_default().to_string();
    let said = log_full.to_lowercase().contains("no space left on device");
    let pods = node
        .alive()
        .then(|| http_get(node.ro_port, "/pods").ok())
        .flatten()
        .map(|(_, b)| b)
        .unwrap_or_default();
    let in_status = pods.to_lowercase().contains("no space left on device");
    if !said && !in_status {
        row.failures.push(
            "no error naming the full disk (`no space left on device`) in the log or /pods".into(),
        );
    }
    std::fs::remove_file(&filler).expect("free the space");
    let freed = Instant::now();
    let (a, took) = converge(&*node.runtime, &n, &wanted, scale.deadline);
    row.converge = took.map(|_| freed.elapsed().saturating_sub(Duration::from_secs(3)));
    let seen = monitor.finish();
    row.unnecessary =
        unnecessary(&a, &BTreeMap::new(), &BTreeSet::new()) + interrupted.len() as u32;
    if !interrupted.is_empty() {
        row.failures.push(format!(
            "running pods disturbed by the full disk: {interrupted:?}"
        ));
    }
    row.note = format!(
        "{old} pods running, {new} added with the tmpfs full ({} KiB filled) for {:?}: \
         {} of them ran anyway; error in log: {said}, in /pods: {in_status}; converge from the space freed",
        bytes / 1024,
        scale.disk_full_for,
        new_running.len()
    );
    finish_row(&mut row, &mut node, &a, &seen);
    // Dropped in reverse order: the tmpfs is unmounted (lazily) first, so that the
    // node's cleanup can then remove its whole directory.
    row
}

// ---------------------------------------------------------------------------------
// Scenario 5: descriptors exhausted.

fn raise_own_nofile() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid rlimit struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Sets another process's descriptor limits (prlimit(2); root may lower a soft limit
/// below what the process holds: its next open fails with EMFILE).
fn set_nofile(pid: u32, soft: u64, hard: u64) {
    let lim = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    let pid = i32::try_from(pid).expect("pid");
    // SAFETY: a valid rlimit for the call's duration; no old limit is read back.
    let rc = unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, &lim, std::ptr::null_mut()) };
    assert_eq!(rc, 0, "prlimit({pid}): {}", std::io::Error::last_os_error());
}

/// rkubelet with `ulimit -n 64`, pods arriving while clients hold connections open on
/// its ports and poll them. The servers cap their connections below the limit, so
/// the load alone does not exhaust it: for the load window the soft limit is also
/// squeezed below what rkubelet holds, so every new descriptor (an accept, a Docker
/// connection, a file) fails with EMFILE, and the log must show that it did. Then
/// the limit is 64 again: no panic, `/healthz` passes again, and the pods run.
pub fn fds_exhausted(scale: &Scale) -> Row {
    let mut row = Row {
        name: "fds exhausted (64)".into(),
        ..Row::default()
    };
    raise_own_nofile();
    let mut node = Node::new("chaos-fds");
    let n = node.name.clone();
    node.start_with_nofile(&[], 64);
    let monitor = DupMonitor::start(node.runtime.clone(), &n);
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(Mutex::new((0u32, 0u32)));
    let mut load = Vec::new();
    for port in [node.healthz_port, node.ro_port] {
        // Connections that never send anything, held until the load ends.
        let st = stop.clone();
        load.push(std::thread::spawn(move || {
            let mut held = Vec::new();
            while !st.load(Ordering::SeqCst) {
                if held.len() < 200 {
                    if let Ok(s) = std::net::TcpStream::connect_timeout(
                        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
                        Duration::from_secs(2),
                    ) {
                        held.push(s);
                    }
                } else {
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }));
        // Clients asking again and again.
        let (st, ans) = (stop.clone(), answered.clone());
        let path = if port == node.healthz_port {
            "/healthz"
        } else {
            "/pods"
        };
        load.push(std::thread::spawn(move || {
            while !st.load(Ordering::SeqCst) {
                let ok = http_get(port, path).is_ok_and(|(c, _)| c == 200);
                let mut a = ans.lock().unwrap_or_else(|p| p.into_inner());
                a.1 += 1;
                if ok {
                    a.0 += 1;
                }
                drop(a);
                std::thread::sleep(Duration::from_millis(50));
            }
        }));
    }
    std::thread::sleep(Duration::from_secs(2));
    let mut wanted = Wanted::new();
    for i in 0..scale.fd_pods {
        node.write_manifest(
            &format!("p{i}.yaml"),
            &pod_yaml(&format!("p{i}"), 1, &[("c", SLEEPER)]),
        );
        wanted_pod(&mut wanted, &format!("p{i}-{n}"), &["c"]);
    }
    let loaded = Instant::now();
    // Below what it holds: until descriptors are closed, every open fails (the pods
    // arriving need files and connections, the clients accepts).
    let squeezed_to = (node.open_fds() as u64).saturating_sub(4);
    set_nofile(node.pid(), squeezed_to, 64);
    let mut max_fds = 0;
    while loaded.elapsed() < scale.fd_load_for {
        if !node.alive() {
            break;
        }
        max_fds = max_fds.max(node.open_fds());
        std::thread::sleep(Duration::from_millis(500));
    }
    if node.alive() {
        set_nofile(node.pid(), 64, 64);
    }
    stop.store(true, Ordering::SeqCst);
    for h in load {
        let _ = h.join();
    }
    let dropped = Instant::now();
    let (ok, total) = *answered.lock().unwrap_or_else(|p| p.into_inner());
    let healthz = wait_opt(scale.deadline, || {
        http_get(node.healthz_port, "/healthz")
            .ok()
            .filter(|(c, _)| *c == 200)
            .map(|_| dropped.elapsed())
    });
    if healthz.is_none() {
        row.failures
            .push("/healthz did not pass after the load".into());
    }
    let (a, took) = converge(&*node.runtime, &n, &wanted, scale.deadline);
    row.converge = took;
    let seen = monitor.finish();
    row.unnecessary = unnecessary(&a, &BTreeMap::new(), &BTreeSet::new());
    let log = std::fs::read_to_string(node.dir.join("rkubelet.log")).unwrap_or_default();
    let emfile = log
        .lines()
        .filter(|l| l.contains("os error 24") || l.contains("Too many open files"))
        .count();
    if emfile == 0 {
        row.failures
            .push("rkubelet never ran out of descriptors (no EMFILE in its log)".into());
    }
    row.note = format!(
        "{} pods added under load for {:?}, the soft limit squeezed to {squeezed_to}, 4 below the fds held; \
         {emfile} EMFILE log lines; {ok}/{total} answers 200 under load; at most {max_fds} fds; \
         /healthz 200 {} after the load; converge from the load's end",
        scale.fd_pods,
        scale.fd_load_for,
        healthz.map_or("never".into(), |d| format!("{:.1} s", d.as_secs_f64())),
    );
    finish_row(&mut row, &mut node, &a, &seen);
    row
}

// ---------------------------------------------------------------------------------
// Scenario 6: the wall clock stepped back and forward (libfaketime).

/// libfaketime, from Debian's `faketime` package.
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

fn probed_pod(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: {BUSYBOX}\n    command: [\"sh\", \"-c\", {SLEEPER:?}]\n    readinessProbe:\n      exec: {{command: [\"true\"]}}\n      periodSeconds: 5\n    livenessProbe:\n      exec: {{command: [\"true\"]}}\n      periodSeconds: 5\n      failureThreshold: 1\n"
    )
}

fn probe_total(node: &Node) -> f64 {
    http_get(node.ro_port, "/metrics/probes")
        .map(|(_, b)| {
            b.lines()
                .filter(|l| l.starts_with("prober_probe_total{"))
                .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
                .sum()
        })
        .unwrap_or(0.0)
}

fn crash_restarts(node: &Node, pod: &str) -> u32 {
    node_containers(&*node.runtime, &node.name)
        .unwrap_or_default()
        .iter()
        .filter(|c| label(c, "io.kubernetes.pod.name") == pod)
        .filter_map(|c| {
            label(c, "annotation.io.kubernetes.container.restartCount")
                .parse()
                .ok()
        })
        .max()
        .unwrap_or(0)
}

/// A kubeconfig for the stand-in `api` with a bearer token, trusting the test CA.
fn token_kubeconfig(node: &Node, api: &TestApiServer, pki: &crate::apiserver::Pki) -> PathBuf {
    let kc = node.dir.join("kubeconfig");
    std::fs::write(
        &kc,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {}\n    \
             certificate-authority: {}\nusers:\n- name: u\n  user:\n    token: good-token\n\
             contexts:\n- name: ctx\n  context: {{cluster: test, user: u}}\ncurrent-context: ctx\n",
            api.url(),
            pki.ca.display()
        ),
    )
    .expect("kubeconfig");
    kc
}

/// The environment that makes rkubelet's wall clock (only: the monotonic clock is left
/// alone) the real one plus the offset written in `offset` (`+0`, `-3600`), re-read at
/// most once a second.
fn faketime_env(offset: &Path) -> Vec<(String, String)> {
    vec![
        ("LD_PRELOAD".into(), LIBFAKETIME.into()),
        (
            "FAKETIME_TIMESTAMP_FILE".into(),
            offset.display().to_string(),
        ),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
        // Re-read the file at most once a second (not on every clock read).
        ("FAKETIME_CACHE_DURATION".into(), "1".into()),
    ]
}

/// Probed pods, a crash-looping pod and the node lease, under a wall clock that only
/// rkubelet sees stepped (libfaketime with `FAKETIME_DONT_FAKE_MONOTONIC=1`: only
/// CLOCK_REALTIME moves): an hour back, back to now, an hour ahead. Per phase: lease
/// writes, probe runs and crash-loop restarts must neither stop nor storm; no pod is
/// restarted.
pub fn clock_steps(scale: &Scale) -> Row {
    let mut row = Row {
        name: "clock -1h/+1h".into(),
        ..Row::default()
    };
    assert!(
        Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} is missing: apt-get install -y faketime (make chaos and .ci/run do)"
    );
    let api = TestApiServer::start(Options::default());
    let mut node = Node::new("chaos-clock");
    let n = node.name.clone();
    // The test CA and the stand-in's certificate are backdated 2 h (openssl under
    // libfaketime, tests/it/apiserver.rs): an hour back the kubelet still verifies
    // them. Proved here before the clock moves: the chain verifies at now - 1 h 30 m.
    let pki = crate::apiserver::Pki::get();
    let at = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
        .saturating_sub(90 * 60);
    let verify = Command::new("openssl")
        .arg("verify")
        .arg("-attime")
        .arg(at.to_string())
        .arg("-CAfile")
        .arg(&pki.ca)
        .arg(&pki.server_cert)
        .output()
        .expect("openssl verify");
    assert!(
        verify.status.success(),
        "the test certificates are not valid 90 minutes ago (made without libfaketime?): {}",
        String::from_utf8_lossy(&verify.stderr)
    );
    let kc = token_kubeconfig(&node, &api, &pki);
    let offset = node.dir.join("faketime");
    std::fs::write(&offset, "+0\n").expect("faketime file");
    node.env = faketime_env(&offset);
    let mut wanted = Wanted::new();
    for i in 0..scale.clock_pods {
        node.write_manifest(&format!("p{i}.yaml"), &probed_pod(&format!("p{i}")));
        wanted_pod(&mut wanted, &format!("p{i}-{n}"), &["c"]);
    }
    node.write_manifest(
        "crash.yaml",
        &pod_yaml("crash", 1, &[("c", "sleep 1; exit 1")]),
    );
    wanted.insert(format!("crash-{n}/POD"));
    let crash = format!("crash-{n}");
    node.start(&[&format!("--kubeconfig={}", kc.display())]);
    let (_, first) = converge(&*node.runtime, &n, &wanted, scale.deadline);
    if first.is_none() {
        row.failures.push("the pods never all ran".into());
    }
    let monitor = DupMonitor::start(node.runtime.clone(), &n);
    let mut notes = Vec::new();
    let mut moments = Vec::new();
    let p = scale.clock_phase.as_secs_f64();
    // Probes: (readiness + liveness) every 5 s per pod.
    let probes_expected = scale.clock_pods as f64 * 2.0 * p / 5.0;
    let leases_expected = p / 10.0;
    for (phase, off) in [
        ("now", "+0"),
        ("-1h", "-3600"),
        ("back", "+0"),
        ("+1h", "+3600"),
    ] {
        std::fs::write(&offset, format!("{off}\n")).expect("faketime file");
        moments.push((
            SystemTime::now(),
            format!("phase {phase}: rkubelet's clock {off} s (its log's times too)"),
        ));
        let since = Instant::now();
        let probes0 = probe_total(&node);
        let crash0 = crash_restarts(&node, &crash);
        std::thread::sleep(scale.clock_phase);
        let probes = probe_total(&node) - probes0;
        let crashes = crash_restarts(&node, &crash).saturating_sub(crash0);
        let calls = api.call_counts(since);
        let count = |verb: &str, kind: &str| {
            calls
                .get(&(verb.to_string(), kind.to_string()))
                .copied()
                .unwrap_or(0)
        };
        let leases = count("PUT", "leases") + count("POST", "leases");
        let statuses = count("PATCH", "pods/status");
        notes.push(format!(
            "{phase}: {leases} lease writes, {probes:.0} probes, {crashes} crash restarts, {statuses} status patches"
        ));
        if (leases as f64) < (leases_expected / 2.0).floor()
            || leases as f64 > leases_expected * 3.0 + 3.0
        {
            row.failures.push(format!(
                "{phase}: {leases} lease writes (about {leases_expected:.0} expected)"
            ));
        }
        if probes < probes_expected * 0.4 || probes > probes_expected * 3.0 + 5.0 {
            row.failures.push(format!(
                "{phase}: {probes:.0} probe runs (about {probes_expected:.0} expected)"
            ));
        }
        // Back-off from 10 s doubling: a phase sees a handful at most.
        if crashes > 4 + (p / 10.0) as u32 / 2 {
            row.failures.push(format!(
                "{phase}: {crashes} crash-loop restarts: the back-off storms"
            ));
        }
    }
    std::fs::write(&offset, "+0\n").expect("faketime file");
    let (a, took) = converge(&*node.runtime, &n, &wanted, Duration::from_secs(30));
    row.converge = took;
    let seen = monitor.finish();
    let exempt: BTreeSet<String> = [crash.clone()].into();
    row.unnecessary = unnecessary(&a, &BTreeMap::new(), &exempt);
    if row.unnecessary > 0 {
        save_restart_evidence(&mut row, &node, &a, &BTreeMap::new(), &moments);
    }
    row.note = format!(
        "libfaketime; phases of {:?}: {}",
        scale.clock_phase,
        notes.join("; ")
    );
    // The crash-looping container is wanted dead or alive; the audit only counts its
    // sandbox, so take its container out of strays.
    let mut a = a;
    a.stray.retain(|k| k != &format!("{crash}/c"));
    finish_row(&mut row, &mut node, &a, &seen);
    row
}

/// The clock line the API client logs when the server's certificate is not valid yet
/// by rkubelet's clock (`base::clock::behind_line`).
const API_CLOCK_LINE: &str = "the API server's certificate is not valid until";

/// A board without an RTC: rkubelet starts with its wall clock a year behind, so the
/// stand-in's certificate (made 2 h ago) is "not yet valid" to it; then NTP steps the
/// clock to now. Meanwhile it must keep running (healthz answers, a static pod runs),
/// retry the API server (its loops' error counts grow) and name the clock in one line,
/// once; after the step it registers its Node without a restart.
pub fn clock_year_behind(scale: &Scale) -> Row {
    let mut row = Row {
        name: "clock -1y, then set".into(),
        ..Row::default()
    };
    assert!(
        Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} is missing: apt-get install -y faketime (make chaos and .ci/run do)"
    );
    let api = TestApiServer::start(Options::default());
    let mut node = Node::new("chaos-rtc");
    let n = node.name.clone();
    let pki = crate::apiserver::Pki::get();
    let kc = token_kubeconfig(&node, &api, &pki);
    let offset = node.dir.join("faketime");
    std::fs::write(&offset, "-31536000\n").expect("faketime file");
    node.env = faketime_env(&offset);
    node.write_manifest("p.yaml", &pod_yaml("p", 1, &[("c", SLEEPER)]));
    let mut wanted = Wanted::new();
    wanted_pod(&mut wanted, &format!("p-{n}"), &["c"]);
    node.start(&[&format!("--kubeconfig={}", kc.display())]);
    let pid = node.pid();
    let lines = |node: &Node| node.log().matches(API_CLOCK_LINE).count();
    let deadline = Instant::now() + scale.deadline;
    while lines(&node) == 0 && Instant::now() < deadline && node.alive() {
        std::thread::sleep(Duration::from_millis(200));
    }
    if lines(&node) == 0 {
        row.failures
            .push("no line names the clock while it is a year behind".into());
    }
    let (_, ran) = converge(&*node.runtime, &n, &wanted, scale.deadline);
    if ran.is_none() {
        row.failures
            .push("the static pod did not run with the clock behind".into());
    }
    // A while behind: retried, never registered, the line not repeated.
    let errors0 = loop_errors(&node);
    std::thread::sleep(scale.clock_phase);
    let errors = loop_errors(&node).saturating_sub(errors0);
    if errors == 0 {
        row.failures
            .push("no loop tried the API server again while the clock was behind".into());
    }
    if api.get("nodes", "", &n).is_some() {
        row.failures
            .push("the Node was registered through a certificate not valid yet".into());
    }
    match http_get(node.healthz_port, "/healthz") {
        Ok((200, _)) => {}
        other => row
            .failures
            .push(format!("healthz with the clock behind: {other:?}")),
    }
    let behind_lines = lines(&node);
    // NTP syncs: the clock steps a year forward.
    std::fs::write(&offset, "+0\n").expect("faketime file");
    let stepped = Instant::now();
    let deadline = stepped + scale.deadline;
    while api.get("nodes", "", &n).is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    if api.get("nodes", "", &n).is_some() {
        row.converge = Some(stepped.elapsed());
    }
    if !node.alive() || node.pid() != pid {
        row.failures.push("rkubelet did not keep running".into());
    }
    if behind_lines != 1 || lines(&node) != 1 {
        row.failures.push(format!(
            "the clock line was logged {behind_lines} times while behind, {} in all (once wanted)",
            lines(&node)
        ));
    }
    if !node
        .log()
        .contains("the API server's certificate is valid by this node's clock now")
    {
        row.failures
            .push("no line says the certificate is valid once the clock is set".into());
    }
    row.note = format!(
        "{errors} loop errors in {:?} behind; Node registered {:?} after the step",
        scale.clock_phase, row.converge
    );
    let (a, _) = converge(&*node.runtime, &n, &wanted, Duration::from_secs(30));
    row.unnecessary = unnecessary(&a, &BTreeMap::new(), &BTreeSet::new());
    finish_row(&mut row, &mut node, &a, &BTreeSet::new());
    row
}

/// The loops' errors so far (`rkubelet_loop_errors_total`, summed), from the
/// read-only port.
fn loop_errors(node: &Node) -> u64 {
    http_get(node.ro_port, "/metrics")
        .map(|(_, b)| {
            b.lines()
                .filter(|l| l.starts_with("rkubelet_loop_errors_total"))
                .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
                .sum::<f64>() as u64
        })
        .unwrap_or(0)
}

/// One scenario: its row at a scale.
pub type Scenario = fn(&Scale) -> Row;

/// A scenario by name (for `make chaos SCENARIOS=…`).
pub const SCENARIOS: &[(&str, Scenario)] = &[
    ("kill9", kill9_under_churn),
    ("kill9-containerd", kill9_under_churn_containerd),
    ("dockerd", dockerd_restart_under_churn),
    ("containerd", containerd_restart_under_churn),
    ("sources", sources_outage),
    ("disk", root_dir_full),
    ("fds", fds_exhausted),
    ("clock", clock_steps),
    ("clock-behind", clock_year_behind),
];
