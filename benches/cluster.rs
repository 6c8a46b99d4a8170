//! `make bench`: rkubelet as a member of a cluster, against the API server stand-in
//! (tests/it/apiserver.rs, with its ServiceAccount admission on, so every API pod has
//! the `kube-api-access` volume of a real cluster) and the real Docker engine. A
//! program (harness = false), not a timed test. Figures:
//!
//! - create → Running as `kubectl get` sees it: `kubectl create -f` of an API pod, and
//!   a manifest written into the static pod directory (its mirror pod), each polled
//!   with `kubectl get pod … -o jsonpath={.status.phase}` until `Running`; rounds
//!   interleave the two, so both are measured under the same load and the same
//!   polling cost (one kubectl run, ~80 ms);
//! - the kubelet's requests per minute to the API server with 30 steady API pods,
//!   by verb and kind, over a window (`RKUBELET_BENCH_WINDOW`, seconds, default 330:
//!   one node status report every 5 minutes falls in it) — the pod watch counts once,
//!   when it is opened;
//! - rkubelet's RSS and threads with the API source, the node's loops and 30 pods.
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

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

const ROUNDS: usize = 5;
const STEADY_PODS: usize = 30;
const DEADLINE: Duration = Duration::from_secs(120);

/// Runs kubectl; (success, stdout, stderr).
fn kubectl(config: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(config)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run kubectl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Polls `kubectl get pod` until it says Running; the time since `t0`.
fn until_running(config: &Path, name: &str, t0: Instant) -> Duration {
    loop {
        // NotFound until the mirror pod exists: polled like any other answer.
        let (_, phase, _) = kubectl(
            config,
            &["get", "pod", name, "-o", "jsonpath={.status.phase}"],
        );
        if phase.trim() == "Running" {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < DEADLINE,
            "{name} not Running in {DEADLINE:?}"
        );
    }
}

fn pod_json(name: &str, node: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
           "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "c", "image": util::BUSYBOX,
                                    "command": ["sh", "-c", util::SLEEPER]}]}})
}

fn median(v: &mut [Duration]) -> Duration {
    base::sort::sort(v);
    v[v.len() / 2]
}

fn status_kb(pid: u32, key: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn main() {
    let window = Duration::from_secs(
        std::env::var("RKUBELET_BENCH_WINDOW")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(330),
    );
    let api = apiserver::TestApiServer::start(apiserver::Options {
        tokens: vec!["good-token".into(), "kubectl-token".into()],
        ..apiserver::Options::default()
    });
    let mut node = util::Node::new("bench-cluster");
    api.set_token_user(
        "good-token",
        &format!("system:node:{}", node.name),
        &["system:nodes"],
    );
    api.set_token_user("kubectl-token", "admin", &["system:masters"]);
    api.set_service_account_admission(true);
    let kc = api.kubeconfig(&node.dir, "kubelet.kubeconfig", "token: good-token");
    let user = api.kubeconfig(&node.dir, "user.kubeconfig", "token: kubectl-token");
    node.start(&[&format!("--kubeconfig={}", kc.display())]);
    util::wait_for("the Node", DEADLINE, || {
        api.get("nodes", "", &node.name).map(|_| ())
    });

    // create → Running, API pod and static pod side by side.
    let (mut api_times, mut file_times) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let name = format!("a{round}");
        let file = node.dir.join(format!("{name}.json"));
        std::fs::write(&file, pod_json(&name, &node.name).to_string()).expect("pod file");
        let t0 = Instant::now();
        // The stand-in serves no OpenAPI schema for kubectl's client-side validation.
        let (ok, _, err) = kubectl(
            &user,
            &[
                "create",
                "--validate=false",
                "-f",
                &file.display().to_string(),
            ],
        );
        assert!(ok, "kubectl create: {err}");
        api_times.push(until_running(&user, &name, t0));

        let st = format!("s{round}");
        let t0 = Instant::now();
        node.write_manifest(
            &format!("{st}.yaml"),
            &util::pod_yaml(&st, 1, &[("c", util::SLEEPER)]),
        );
        file_times.push(until_running(&user, &format!("{st}-{}", node.name), t0));

        // Out of the way before the next round.
        kubectl(&user, &["delete", "pod", &name, "--grace-period=1"]);
        std::fs::remove_file(node.manifests().join(format!("{st}.yaml"))).expect("rm");
        util::wait_for("the round's pods gone", DEADLINE, || {
            let r = node.running();
            (!r.contains_key(&format!("{name}/c"))
                && !r.contains_key(&format!("{st}-{}/c", node.name)))
            .then_some(())
        });
    }
    let api_median = median(&mut api_times);
    let file_median = median(&mut file_times);

    // 30 steady API pods.
    for i in 0..STEADY_PODS {
        api.create(
            "pods",
            "default",
            pod_json(&format!("steady{i}"), &node.name),
        )
        .expect("create");
    }
    util::wait_for(
        "30 pods Running in the API",
        Duration::from_secs(300),
        || {
            let running = (0..STEADY_PODS)
                .filter(|i| {
                    api.get("pods", "default", &format!("steady{i}"))
                        .is_some_and(|p| p["status"]["phase"] == "Running")
                })
                .count();
            (running == STEADY_PODS).then_some(())
        },
    );
    std::thread::sleep(Duration::from_secs(20));
    let since = Instant::now();
    std::thread::sleep(window);
    let who = format!("system:node:{}", node.name);
    let mut by_kind: BTreeMap<(String, String), usize> = BTreeMap::new();
    for c in api.calls() {
        if c.at >= since && c.user == who {
            *by_kind.entry((c.verb.clone(), c.kind.clone())).or_default() += 1;
        }
    }
    let total: usize = by_kind.values().sum();
    let per_min = total as f64 * 60.0 / window.as_secs_f64();
    let pid = node.pid();
    let rss = status_kb(pid, "VmRSS:");
    let threads = status_kb(pid, "Threads:");

    println!("rkubelet in a cluster (API server stand-in, kube-api-access volumes)");
    println!(
        "create → Running seen by kubectl get, median of {ROUNDS}: API pod {:.0} ms, \
         static pod (mirror) {:.0} ms, ratio {:.2} (target ≤ 1.1)",
        api_median.as_secs_f64() * 1e3,
        file_median.as_secs_f64() * 1e3,
        api_median.as_secs_f64() / file_median.as_secs_f64(),
    );
    println!(
        "requests to the API server with {STEADY_PODS} steady pods: {total} in {}s = {per_min:.1}/min (target ≈ 6/min)",
        window.as_secs()
    );
    for ((verb, kind), n) in &by_kind {
        println!("  {verb:6} {kind:30} {n}");
    }
    println!(
        "RSS with the API source and {STEADY_PODS} pods: {:.1} MiB, {threads} threads",
        rss as f64 / 1024.0
    );
}
