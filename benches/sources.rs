//! `make bench`: how long a change at each pod source takes to become a running
//! container, for the four sources side by side in one run against one rkubelet.
//! A program (harness = false), not a timed test.
//!
//! One rkubelet is started with all four sources: the manifest directory (`file`), a
//! URL served by a small HTTP server in this program (`http`), a real etcd (`etcd`)
//! and the test API server stand-in (`api`, tests/it/apiserver.rs). In each round,
//! for each source in turn, a new pod (sandbox + one busybox container) is added at
//! the source at t0 — a manifest written, the URL's body changed, a key put, a pod
//! created (a watch event) — and the figure is the time until Docker reports its
//! container running, polled every 5 ms; then the pod is removed at the source and
//! its containers are waited away before the next one. Rounds interleave the sources,
//! so each one is measured next to the file source under the same load.
//!
//! The HTTP source is polled, not watched: its figure includes the wait for the next
//! poll. It is measured with `--http-check-frequency=1s` (override with
//! `RKUBELET_BENCH_HTTP_PERIOD`, a Go duration); at the 20 s default a change waits
//! 10 s longer on average (uniform in [0, 20 s)).
#![allow(clippy::disallowed_methods)] // clippy.toml's sort ban is for shipped code

// The harness's containerd, which tests/it/util.rs can start (as the tests name it).
extern crate cri as rkubelet_cri;
#[path = "../crates/cri/tests/common/mod.rs"]
mod containerd;

#[allow(dead_code)]
#[path = "../tests/it/util.rs"]
mod util;

#[path = "../tests/it/etcd.rs"]
mod etcd;

#[path = "../tests/it/apiserver.rs"]
mod apiserver;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use runtime::{ContainerState, Runtime};
use serde_json::json;

const ROUNDS: usize = 7;
const SOURCES: [&str; 4] = ["file", "http", "etcd", "api"];
const DEADLINE: Duration = Duration::from_secs(120);
const POLL: Duration = Duration::from_millis(5);

fn main() {
    let http_period = std::env::var("RKUBELET_BENCH_HTTP_PERIOD").unwrap_or_else(|_| "1s".into());
    let etcd = etcd::Etcd::start();
    let api = apiserver::TestApiServer::start(apiserver::Options::default());

    // The URL's body, swapped per run.
    let body = Arc::new(Mutex::new(String::new()));
    let site = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("bind"));
    let port = site.server_addr().to_ip().expect("ip").port();
    {
        let (site, body) = (site.clone(), body.clone());
        std::thread::Builder::new()
            .name("bench-http".into())
            .spawn(move || {
                for req in site.incoming_requests() {
                    let b = body.lock().expect("body").clone();
                    let _ = req.respond(tiny_http::Response::from_string(b));
                }
            })
            .expect("spawn");
    }

    let mut node = util::Node::new("bench-src");
    let kc = api.kubeconfig(&node.dir, "kubeconfig", "token: good-token");
    let args = [
        format!("--manifest-url=http://127.0.0.1:{port}/pods"),
        format!("--http-check-frequency={http_period}"),
        format!("--etcd-servers={}", etcd.url),
        format!("--kubeconfig={}", kc.display()),
    ];
    node.start(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let prefix = format!("/registry/hosts/{}/", node.name);
    let n = node.name.clone();

    let mut results: Vec<Vec<Duration>> = vec![Vec::new(); SOURCES.len()];
    for round in 0..ROUNDS {
        for (i, source) in SOURCES.iter().enumerate() {
            let name = format!("{source}{round}");
            let manifest = util::pod_yaml(&name, 1, &[("c", util::SLEEPER)]);
            // The full pod name: static pods get the node suffix, API pods do not.
            let full = if *source == "api" {
                name.clone()
            } else {
                format!("{name}-{n}")
            };
            let t0 = Instant::now();
            match *source {
                "file" => node.write_manifest(&format!("{name}.yaml"), &manifest),
                "http" => *body.lock().expect("body") = manifest.clone(),
                "etcd" => {
                    etcd.put(&format!("{prefix}{name}"), &manifest);
                }
                _ => {
                    api.create_pod(json!({"metadata": {"name": name}, "spec": {
                        "nodeName": n, "terminationGracePeriodSeconds": 1,
                        "containers": [{"name": "c", "image": util::BUSYBOX,
                                        "command": ["sh", "-c", util::SLEEPER]}]}}));
                }
            }
            wait(&node, &full, true);
            results[i].push(t0.elapsed());
            match *source {
                "file" => {
                    std::fs::remove_file(node.manifests().join(format!("{name}.yaml"))).expect("rm")
                }
                "http" => body.lock().expect("body").clear(),
                "etcd" => etcd.delete(&format!("{prefix}{name}")),
                _ => api.delete_pod("default", &name),
            }
            wait(&node, &full, false);
        }
    }
    site.unblock();
    drop(node);

    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let med = |v: &[Duration]| {
        let mut v = v.to_vec();
        base::sort::sort(&mut v);
        v[v.len() / 2]
    };
    let file_med = med(&results[0]);
    println!();
    println!(
        "rkubelet pod sources: change at the source → container running \
         ({ROUNDS} rounds, median; sandbox + 1 container per pod)"
    );
    println!("| source | change at the source | median | min | max | median − file |");
    println!("|---|---|---|---|---|---|");
    for (i, source) in SOURCES.iter().enumerate() {
        let v = &results[i];
        let change = match *source {
            "file" => "manifest written (inotify)".to_string(),
            "http" => format!("URL body changed (polled every {http_period})"),
            "etcd" => "key put (watch)".to_string(),
            _ => "pod created (watch event)".to_string(),
        };
        println!(
            "| {source} | {change} | {:.0} ms | {:.0} ms | {:.0} ms | {:+.0} ms |",
            ms(med(v)),
            ms(*v.iter().min().expect("runs")),
            ms(*v.iter().max().expect("runs")),
            ms(med(v)) - ms(file_med)
        );
    }
    println!(
        "http is polled: its figure includes the wait for the next poll (on average half \
         the period); at the 20 s default add about 10 s."
    );
    for (i, source) in SOURCES.iter().enumerate() {
        println!(
            "{source} runs, ms: {:?}",
            results[i]
                .iter()
                .map(|d| ms(*d).round())
                .collect::<Vec<_>>()
        );
    }
}

/// Waits until the pod's container runs (`running`), or until every container of
/// the pod is gone.
fn wait(node: &util::Node, full: &str, running: bool) {
    let until = Instant::now() + DEADLINE;
    loop {
        let containers = node
            .docker
            .list_containers(&[
                format!("io.rkubelet.node={}", node.name),
                format!("io.kubernetes.pod.name={full}"),
            ])
            .unwrap_or_default();
        let done = if running {
            containers.iter().any(|c| {
                c.state == ContainerState::Running
                    && util::label(c, "io.kubernetes.container.name") == "c"
            })
        } else {
            containers.is_empty()
        };
        if done {
            return;
        }
        assert!(
            Instant::now() < until,
            "{full}: not {} within {DEADLINE:?}; log:\n{}",
            if running { "running" } else { "gone" },
            node.log()
        );
        std::thread::sleep(POLL);
    }
}
