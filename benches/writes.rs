//! `make bench`: what an idle node writes to its disk (issue 31's write budget, for
//! boards on SD cards and eMMC). A program (harness = false), not a timed test.
//!
//! A node as a cluster runs one: rkubelet with `--kubeconfig` (the API server
//! stand-in, tests/it/apiserver.rs, with its ServiceAccount admission on, so each pod
//! has the projected token volume of a real cluster) and `--log-file`, and 10 API pods,
//! each with a configMap and a secret volume and three probes every 10 s: an exec
//! liveness probe, an HTTP readiness probe and a TCP liveness probe. After the pods
//! have settled, `write_bytes` less `cancelled_write_bytes` of `/proc/<pid>/io` (what
//! reaches the disk: tmpfs writes never count, nor a file deleted before its writeback)
//! is read at both ends of a window (`RKUBELET_BENCH_WINDOW`,
//! seconds, default 300) for each writer: rkubelet, dockerd, Docker's containerd and
//! its shims (found by Docker's containerd socket in their command line). Then each probe kind alone, 10 pods probed every second for
//! 60 s (`RKUBELET_BENCH_PROBE_WINDOW`), gives the runtime's writes per probe.
//!
//! Both runs are made twice: on the machine's Docker as it is set up (on these VMs
//! `/run` is a directory of the root filesystem), and on a private dockerd and
//! containerd laid out as on a board: their data roots on the disk, their state
//! (sockets, dockerd's exec root, containerd's state, the shims' pid and log files;
//! what lives in `/run`) on a tmpfs, as every systemd system mounts `/run`.
//!
//! Targets: the node's total ≤ 10 MiB an hour, rkubelet's own ≤ 1 MiB an hour.
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

#[path = "../tests/it/etcd.rs"]
mod etcd;

#[path = "../tests/it/chaos_suite.rs"]
mod chaos_suite;

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;

const PODS: usize = 10;
const DEADLINE: Duration = Duration::from_secs(180);
/// Serves a page and answers on 8080 (HTTP and TCP probes).
const WEB: &str =
    "mkdir -p /tmp/w && echo ok > /tmp/w/index.html && exec httpd -f -p 8080 -h /tmp/w";

fn secs(var: &str, default: u64) -> Duration {
    Duration::from_secs(
        std::env::var(var)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default),
    )
}

/// The node measured: its rkubelet (by its directory, which the command line names)
/// and its runtime.
struct Measured {
    node_dir: String,
    engine: Engine,
}

/// Whose dockerd, containerd and shims are the node's runtime.
enum Engine {
    /// The machine's Docker: dockerd without `--containerd=`, its containerd and shims
    /// (their command lines name `/var/run/docker/containerd/`).
    Machine,
    /// A private engine: every process whose command line names its directory.
    Private(String),
}

/// `write_bytes` of the node's processes, by writer.
fn writes(m: &Measured) -> BTreeMap<&'static str, i64> {
    let mut out = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        // The node's own runtime only: a containerd of someone else's (a CRI test's) on
        // this machine is not this node's runtime, nor another test's rkubelet its kubelet.
        let args = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args = String::from_utf8_lossy(&args);
        let comm = comm.trim();
        let runtimes = match &m.engine {
            Engine::Machine => {
                args.contains("/var/run/docker/containerd/")
                    || (comm == "dockerd" && !args.contains("--containerd="))
            }
            Engine::Private(dir) => args.contains(dir.as_str()),
        };
        let writer = match comm {
            "rkubelet" if args.contains(m.node_dir.as_str()) => "rkubelet",
            "dockerd" if runtimes => "dockerd",
            "containerd" if runtimes => "containerd",
            c if c.starts_with("containerd-shim") && runtimes => "containerd shims",
            _ => continue,
        };
        let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
        let field = |name: &str| {
            io.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse::<i64>().ok())
                .unwrap_or(0)
        };
        // What reaches the disk: pages dirtied, less those truncated before their
        // writeback (a file written, then deleted: runc's process spec in /tmp for each
        // exec). The kernel counts a cancellation to whoever truncated, so a writer's
        // own figure is close, and the node's total exact.
        *out.entry(writer).or_insert(0) +=
            field("write_bytes: ") - field("cancelled_write_bytes: ");
    }
    out
}

/// Bytes written to the machine's disks (`/sys/block/*/stat`, sectors written; not
/// loop, ram or zram devices): everything, every process of the machine and the
/// short-lived ones (`runc`) whose own counters die with them, and the filesystem's
/// journal. On a quiet machine, the truth the per-process figures approach.
fn disk_writes() -> i64 {
    let Ok(dir) = std::fs::read_dir("/sys/block") else {
        return 0;
    };
    dir.flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            !["loop", "ram", "zram"].iter().any(|p| n.starts_with(p))
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter_map(|stat| stat.split_whitespace().nth(6)?.parse::<i64>().ok())
        .sum::<i64>()
        * 512
}

/// Each writer's bytes written between two readings (a process that ended between
/// them is left out: its counter went with it).
fn delta(
    before: &BTreeMap<&'static str, i64>,
    after: &BTreeMap<&'static str, i64>,
) -> BTreeMap<&'static str, u64> {
    after
        .iter()
        .map(|(k, v)| {
            let d = v - before.get(k).copied().unwrap_or(0);
            (*k, u64::try_from(d).unwrap_or(0))
        })
        .collect()
}

/// A pod with the volumes and probes of a real workload; `period` seconds between
/// probes; `kinds` the probes it has ("exec", "http", "tcp").
fn pod(name: &str, node: &str, period: u32, kinds: &[&str]) -> serde_json::Value {
    let probe = |kind: &str| match kind {
        "exec" => json!({"exec": {"command": ["true"]}, "periodSeconds": period}),
        "http" => {
            json!({"httpGet": {"path": "/index.html", "port": 8080}, "periodSeconds": period})
        }
        _ => json!({"tcpSocket": {"port": 8080}, "periodSeconds": period}),
    };
    let mut web = json!({"name": "web", "image": util::BUSYBOX, "command": ["sh", "-c", WEB],
        "volumeMounts": [{"name": "conf", "mountPath": "/conf"}, {"name": "creds", "mountPath": "/creds"}]});
    if kinds.contains(&"exec") {
        web["livenessProbe"] = probe("exec");
    }
    if kinds.contains(&"http") {
        web["readinessProbe"] = probe("http");
    }
    let mut containers = vec![web];
    if kinds.contains(&"tcp") {
        // A second liveness probe: on a container of its own, at the web server's port.
        containers.push(json!({"name": "tcp", "image": util::BUSYBOX,
            "command": ["sh", "-c", util::SLEEPER], "livenessProbe": probe("tcp")}));
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
           "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                    "containers": containers,
                    "volumes": [{"name": "conf", "configMap": {"name": "bench-conf"}},
                                {"name": "creds", "secret": {"secretName": "bench-creds"}}]}})
}

fn fmt_rows(d: &BTreeMap<&'static str, u64>, window: Duration) -> (u64, String) {
    let per_hour = |b: u64| b as f64 * 3600.0 / window.as_secs_f64() / (1 << 20) as f64;
    let mut total = 0;
    let mut s = String::new();
    for (k, v) in d {
        total += v;
        s.push_str(&format!(
            "  {k:<18} {:>10} bytes  {:>8.2} MiB/h\n",
            v,
            per_hour(*v)
        ));
    }
    s.push_str(&format!(
        "  {:<18} {:>10} bytes  {:>8.2} MiB/h\n",
        "node total",
        total,
        per_hour(total)
    ));
    (total, s)
}

/// Creates `names` as API pods and waits until every one runs all its containers.
fn run_pods(api: &apiserver::TestApiServer, node: &util::Node, pods: &[serde_json::Value]) {
    for p in pods {
        api.create("pods", "default", p.clone())
            .expect("create pod");
    }
    let want: usize = pods
        .iter()
        .map(|p| p["spec"]["containers"].as_array().map_or(0, Vec::len))
        .sum();
    util::wait_for("every container running", DEADLINE, || {
        let n: usize = node.running().values().map(Vec::len).sum();
        (n >= want).then_some(())
    });
}

fn delete_all(api: &apiserver::TestApiServer, node: &util::Node, pods: &[serde_json::Value]) {
    for p in pods {
        api.delete_pod(
            "default",
            p["metadata"]["name"].as_str().unwrap_or_default(),
        );
    }
    util::wait_for("the pods gone", DEADLINE, || {
        node.running().is_empty().then_some(())
    });
}

fn main() {
    let window = secs("RKUBELET_BENCH_WINDOW", 300);
    let probe_window = secs("RKUBELET_BENCH_PROBE_WINDOW", 60);
    let api = apiserver::TestApiServer::start(apiserver::Options::default());
    api.set_service_account_admission(true);
    for (kind, data) in [
        ("configmaps", json!({"data": {"app.conf": "level=info\n"}})),
        ("secrets", json!({"data": {"token": "c2VjcmV0"}})),
    ] {
        let name = if kind == "configmaps" {
            "bench-conf"
        } else {
            "bench-creds"
        };
        let mut obj = data;
        obj["apiVersion"] = json!("v1");
        obj["kind"] = json!(if kind == "configmaps" {
            "ConfigMap"
        } else {
            "Secret"
        });
        obj["metadata"] = json!({"name": name, "namespace": "default"});
        api.create(kind, "default", obj).expect("create object");
    }

    println!("== on this machine's Docker (its /run and /tmp are directories of the disk)");
    let node = util::Node::new("bench-writes");
    run(&api, node, Engine::Machine, "m", window, probe_window);

    println!(
        "\n== on a private dockerd and containerd laid out as on a board: data roots on the \
         disk, /run (sockets, exec root, containerd's state, the shims' files) a tmpfs"
    );
    let pd = chaos_suite::PrivateDocker::start_with_run_on_tmpfs();
    let mut node = util::Node::new("bench-writes-board");
    node.endpoint = pd.endpoint();
    node.docker = docker::Docker::connect(&node.endpoint).expect("endpoint");
    // The node's checks (`running`) and cleanup go through its runtime: the private
    // engine, not the machine's Docker Node::new gave it.
    node.runtime = std::sync::Arc::new(docker::Docker::connect(&node.endpoint).expect("endpoint"));
    let engine = Engine::Private(pd.dir().display().to_string());
    run(&api, node, engine, "b", window, probe_window);
    drop(pd);
}

/// One node's run: its 10 pods over the window, then each probe kind alone.
fn run(
    api: &apiserver::TestApiServer,
    mut node: util::Node,
    engine: Engine,
    prefix: &str,
    window: Duration,
    probe_window: Duration,
) {
    let kc = api.kubeconfig(&node.dir, "kubelet.kubeconfig", "token: good-token");
    let log = node.dir.join("kubelet.log");
    // The default verbosity (the test nodes' --v=2 logs every request): what a node
    // in the field writes to its log.
    node.start(&[
        &format!("--kubeconfig={}", kc.display()),
        &format!("--log-file={}", log.display()),
        "--v=0",
    ]);
    let m = Measured {
        node_dir: node.dir.display().to_string(),
        engine,
    };

    // A node of 10 such pods, settled for a minute, then the window.
    let pods: Vec<_> = (0..PODS)
        .map(|i| {
            pod(
                &format!("{prefix}w{i}"),
                &node.name,
                10,
                &["exec", "http", "tcp"],
            )
        })
        .collect();
    run_pods(api, &node, &pods);
    std::thread::sleep(Duration::from_secs(60));
    let (before, disk_before) = (writes(&m), disk_writes());
    std::thread::sleep(window);
    let d = delta(&before, &writes(&m));
    let disk = disk_writes() - disk_before;
    let restarts: u64 = util::restart_counts(&node)
        .values()
        .filter_map(|r| r.parse::<u64>().ok())
        .sum();
    println!("containers restarted during the run: {restarts}");
    let own = d.get("rkubelet").copied().unwrap_or(0);
    let (total, rows) = fmt_rows(&d, window);
    println!(
        "writes over {window:?}, {PODS} API pods (configMap + secret + token volumes; exec, HTTP, \
         TCP probes every 10 s), --log-file:\n{rows}"
    );
    let per_hour = |b: u64| b as f64 * 3600.0 / window.as_secs_f64() / (1 << 20) as f64;
    let disk = u64::try_from(disk).unwrap_or(0);
    println!(
        "  {:<18} {disk:>10} bytes  {:>8.2} MiB/h (every process on the machine, the journal)",
        "disks",
        per_hour(disk)
    );
    println!(
        "targets: node ≤ 10 MiB/h: {:.2} {}; rkubelet ≤ 1 MiB/h: {:.2} {}",
        per_hour(total),
        if per_hour(total) <= 10.0 {
            "met"
        } else {
            "MISSED"
        },
        per_hour(own),
        if per_hour(own) <= 1.0 {
            "met"
        } else {
            "MISSED"
        },
    );
    delete_all(api, &node, &pods);

    // Each probe kind alone, every second: the runtime's writes per probe.
    println!("\nper probe kind ({PODS} pods, one probe each, every 1 s, {probe_window:?}):");
    for kind in ["exec", "http", "tcp"] {
        let pods: Vec<_> = (0..PODS)
            .map(|i| pod(&format!("{prefix}{kind}{i}"), &node.name, 1, &[kind]))
            .collect();
        run_pods(api, &node, &pods);
        std::thread::sleep(Duration::from_secs(10));
        let before = writes(&m);
        std::thread::sleep(probe_window);
        let d = delta(&before, &writes(&m));
        let probes = PODS as f64 * probe_window.as_secs_f64();
        let runtime: u64 = d
            .iter()
            .filter(|(k, _)| **k != "rkubelet")
            .map(|(_, v)| v)
            .sum();
        println!(
            "  {kind:<5} runtime {:>8.0} bytes/probe, rkubelet {:>6.0} bytes/probe",
            runtime as f64 / probes,
            d.get("rkubelet").copied().unwrap_or(0) as f64 / probes
        );
        delete_all(api, &node, &pods);
    }
}
