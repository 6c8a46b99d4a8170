//! `make bench`: rkubelet on containerd (issue 30). A program (harness = false), not a
//! timed test.
//!
//! - Pod start, 1, 10 and 30 pods (a sandbox and one busybox container each, static
//!   pods written into the manifest directory at t0), until every sandbox is ready and
//!   every container runs, seen by a poller listing the runtime every 25 ms from t0:
//!   (a) rkubelet on a containerd of the bench's own (the CRI tests' harness), (b) the
//!   raw CRI calls for the same pods on that containerd: one `CriClient` issuing
//!   RunPodSandbox, CreateContainer, StartContainer for each pod in turn, sequentially,
//!   as one client would, with the sandbox and container configs rkubelet sent for a
//!   warm-up pod (read back from containerd's verbose status; names, UID, node label,
//!   log directory and cgroup parent made the raw pod's own), (c) rkubelet on a private
//!   dockerd (tests/it/chaos_suite.rs's `PrivateDocker`). The three take turns within
//!   each turn. Ratios (a)/(b) (target ≤ 1.0 at 10 pods and more) and (a)/(c).
//! - Idle memory of the whole node with 10 pods: PSS (and RSS, USS) from
//!   `/proc/<pid>/smaps_rollup`, summed over rkubelet, the runtime's daemons and every
//!   shim of that runtime, containerd against Docker (dockerd, its containerd, its
//!   shims). Both nodes run at once, each on its own runtime.
//! - rkubelet's own idle CPU over a 120 s window starting 60 s after 30 pods run, and
//!   its RssAnon, on each runtime.
#![allow(clippy::disallowed_methods)] // clippy.toml's sort ban is for shipped code

// The CRI crate's containerd of a test's own, under the names tests/it/util.rs uses.
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

#[path = "common/mod.rs"]
#[allow(dead_code)]
mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rkubelet_cri::client::CriClient;
use rkubelet_cri::v1;
use runtime::{ContainerState, Runtime};
use serde_json::Value;
use util::{Node, Rt};

/// (pods, turns) of the start figures.
const STARTS: [(usize, usize); 3] = [(1, 5), (10, 3), (30, 2)];
const POLL: Duration = Duration::from_millis(25);
const DEADLINE: Duration = Duration::from_secs(300);
const MEMORY_PODS: usize = 10;
const CPU_PODS: usize = 30;
const SETTLE: Duration = Duration::from_secs(60);
const CPU_WINDOW: Duration = Duration::from_secs(120);

fn main() {
    let load0 = loadavg();
    let pd = chaos_suite::PrivateDocker::start();
    let mut a = Node::on(Rt::Containerd, "bench-cri");
    a.start(&["--v=0"]);
    let mut c = Node::on(Rt::Docker, "bench-crid");
    c.endpoint = pd.endpoint();
    c.docker = docker::Docker::connect(&c.endpoint).expect("endpoint");
    c.runtime = Arc::new(docker::Docker::connect(&c.endpoint).expect("endpoint"));
    c.start(&["--v=0"]);
    let shared = a.containerd.clone().expect("the node's containerd");
    let (_shutdown, loops) = containerd::loops();
    let client = CriClient::new(
        &shared.containerd.endpoint(),
        Duration::from_secs(60),
        &loops,
    )
    .expect("a unix endpoint");
    let raw = Raw {
        node: format!("{}-raw", a.name),
        dir: a.dir.join("raw"),
        runtime: shared.runtime.clone(),
    };

    // Warm-up on each (not counted); rkubelet's configs read back from containerd.
    let warm = names("warm", 1);
    rkubelet_start(&a, &warm);
    let template = Template::capture(&a, &client, &raw);
    rkubelet_clear(&a, &warm);
    rkubelet_start(&c, &warm);
    rkubelet_clear(&c, &warm);

    // (pods, [a, b, c] times)
    let mut rows: Vec<(usize, [Vec<Duration>; 3])> = Vec::new();
    for (n, turns) in STARTS {
        let mut t: [Vec<Duration>; 3] = Default::default();
        for turn in 0..turns {
            let pods = names(&format!("s{n}t{turn}-"), n);
            t[0].push(rkubelet_start(&a, &pods));
            rkubelet_clear(&a, &pods);
            t[1].push(raw.start(&client, &template, &pods));
            raw.clear(&client);
            t[2].push(rkubelet_start(&c, &pods));
            rkubelet_clear(&c, &pods);
        }
        rows.push((n, t));
    }
    let load1 = loadavg();

    // Idle: both nodes at once, each with its own runtime.
    let idle = names("idle", CPU_PODS);
    let a_dir = format!("{}/", shared.containerd.dir.display());
    let c_dir = format!("{}/", pd.dir().display());
    for node in [&a, &c] {
        write_pods(node, &idle[..MEMORY_PODS]);
    }
    for node in [&a, &c] {
        wait_running(&*node.runtime, &node_label(node), 2 * MEMORY_PODS);
    }
    std::thread::sleep(SETTLE);
    let mem_a = node_memory(a.pid(), &a_dir);
    let mem_c = node_memory(c.pid(), &c_dir);
    for node in [&a, &c] {
        write_pods(node, &idle[MEMORY_PODS..]);
    }
    for node in [&a, &c] {
        wait_running(&*node.runtime, &node_label(node), 2 * CPU_PODS);
    }
    std::thread::sleep(SETTLE);
    let (cpu0_a, cpu0_c) = (common::cpu_ticks(a.pid()), common::cpu_ticks(c.pid()));
    let (threads0_a, threads0_c) = (thread_ticks(a.pid()), thread_ticks(c.pid()));
    let w0 = Instant::now();
    std::thread::sleep(CPU_WINDOW);
    let (cpu1_a, cpu1_c) = (common::cpu_ticks(a.pid()), common::cpu_ticks(c.pid()));
    let (threads1_a, threads1_c) = (thread_ticks(a.pid()), thread_ticks(c.pid()));
    let secs = w0.elapsed().as_secs_f64();
    let (anon_a, anon_c) = (rss_anon_kib(a.pid()), rss_anon_kib(c.pid()));
    let load2 = loadavg();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let pct = |t0: u64, t1: u64| (t1.saturating_sub(t0)) as f64 / hz / secs * 100.0;
    let (cpu_a, cpu_c) = (pct(cpu0_a, cpu1_a), pct(cpu0_c, cpu1_c));

    drop(a);
    drop(c);
    drop(pd);

    print_starts(&mut rows);
    println!();
    print_memory(&mem_a, &mem_c);
    println!();
    println!(
        "rkubelet idle, {CPU_PODS} pods, window {:.0} s starting {} s after all ran:",
        secs,
        SETTLE.as_secs()
    );
    println!("| runtime | CPU (% of a core) | RssAnon |");
    println!("|---|---:|---:|");
    println!(
        "| containerd | {cpu_a:.3} % | {:.1} MiB |",
        anon_a as f64 / 1024.0
    );
    println!(
        "| Docker | {cpu_c:.3} % | {:.1} MiB |",
        anon_c as f64 / 1024.0
    );
    for (rt, t0, t1) in [
        ("containerd", &threads0_a, &threads1_a),
        ("Docker", &threads0_c, &threads1_c),
    ] {
        let by: Vec<String> = t1
            .iter()
            .map(|(name, t)| (name, t.saturating_sub(t0.get(name).copied().unwrap_or(0))))
            .filter(|(_, d)| *d > 0)
            .map(|(name, d)| format!("{name} {:.0}", d as f64 / hz * 1000.0))
            .collect();
        println!(
            "rkubelet's CPU by thread on {rt}, ms over the window: {}",
            by.join(", ")
        );
    }
    println!();
    println!("load average (1, 5, 15 min): at the start {load0}; after the starts {load1}; at the end {load2}");
}

/// `prefix0` … `prefix<n-1>`.
fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

fn node_label(node: &Node) -> String {
    format!("io.rkubelet.node={}", node.name)
}

fn write_pods(node: &Node, pods: &[String]) {
    for p in pods {
        node.write_manifest(
            &format!("{p}.yaml"),
            &util::pod_yaml(p, 1, &[("c", util::SLEEPER)]),
        );
    }
}

/// Writes the pods' manifests at t0; the time until their sandboxes and containers run.
fn rkubelet_start(node: &Node, pods: &[String]) -> Duration {
    timed(&*node.runtime, &node_label(node), 2 * pods.len(), || {
        write_pods(node, pods)
    })
}

/// Removes the pods' manifests, waits until nothing of the node runs, then removes
/// what is left of its sandboxes and containers, so each turn starts from nothing.
fn rkubelet_clear(node: &Node, pods: &[String]) {
    for p in pods {
        let _ = std::fs::remove_file(node.manifests().join(format!("{p}.yaml")));
    }
    let filter = [node_label(node)];
    util::wait_for("the pods stopped", DEADLINE, || {
        let l = node.runtime.list_containers(&filter).ok()?;
        (!l.iter().any(|c| c.state == ContainerState::Running)).then_some(())
    });
    util::wait_for("the pods removed", DEADLINE, || {
        let l = node.runtime.list_containers(&filter).ok()?;
        for c in &l {
            let _ = node.runtime.remove_container(&c.id);
        }
        l.is_empty().then_some(())
    });
}

/// Runs `work` while a poller lists the runtime every [`POLL`] from t0 (before `work`)
/// until `want` of the containers labelled `label` (sandboxes included) run.
fn timed(rt: &dyn Runtime, label: &str, want: usize, work: impl FnOnce()) -> Duration {
    let filter = [label.to_string()];
    let t0 = Instant::now();
    let seen = std::thread::scope(|s| {
        let poller = s.spawn(|| wait_running_at(rt, &filter, want));
        work();
        poller.join().expect("the poller")
    });
    seen - t0
}

fn wait_running(rt: &dyn Runtime, label: &str, want: usize) {
    wait_running_at(rt, &[label.to_string()], want);
}

/// The moment at least `want` of the filtered containers were seen running.
fn wait_running_at(rt: &dyn Runtime, filter: &[String], want: usize) -> Instant {
    let until = Instant::now() + DEADLINE;
    loop {
        let running = rt
            .list_containers(filter)
            .map(|l| {
                l.iter()
                    .filter(|c| c.state == ContainerState::Running)
                    .count()
            })
            .unwrap_or(0);
        if running >= want {
            return Instant::now();
        }
        assert!(
            Instant::now() < until,
            "{want} running not seen in {DEADLINE:?} ({running} run)"
        );
        std::thread::sleep(POLL);
    }
}

/// The raw CRI client's pods: their own node label (rkubelet leaves them alone), log
/// directories and copies of the warm-up pod's mounted files under `dir`.
struct Raw {
    node: String,
    dir: PathBuf,
    runtime: Arc<dyn Runtime>,
}

impl Raw {
    /// The configs are made and the log directories created before t0; from t0, the
    /// three calls for each pod in turn.
    fn start(&self, client: &CriClient, template: &Template, pods: &[String]) -> Duration {
        let configs: Vec<(v1::PodSandboxConfig, v1::ContainerConfig)> = pods
            .iter()
            .map(|p| template.for_pod(p, &format!("raw-{}-{p}", std::process::id()), self))
            .collect();
        for (sb, _) in &configs {
            std::fs::create_dir_all(&sb.log_directory).expect("log directory");
        }
        let label = format!("io.rkubelet.node={}", self.node);
        timed(&*self.runtime, &label, 2 * pods.len(), || {
            for (sb, ct) in configs {
                let sandbox = client
                    .run_pod_sandbox(&v1::RunPodSandboxRequest {
                        config: Some(sb.clone()),
                        runtime_handler: String::new(),
                    })
                    .expect("RunPodSandbox")
                    .pod_sandbox_id;
                let id = client
                    .create_container(&v1::CreateContainerRequest {
                        pod_sandbox_id: sandbox,
                        config: Some(ct),
                        sandbox_config: Some(sb),
                    })
                    .expect("CreateContainer")
                    .container_id;
                client
                    .start_container(&v1::StartContainerRequest { container_id: id })
                    .expect("StartContainer");
            }
        })
    }

    /// Stops and removes the raw sandboxes (their containers with them) and their cgroups.
    fn clear(&self, client: &CriClient) {
        let mut selector = HashMap::new();
        selector.insert("io.rkubelet.node".to_string(), self.node.clone());
        let list = client
            .list_pod_sandbox(&v1::ListPodSandboxRequest {
                filter: Some(v1::PodSandboxFilter {
                    label_selector: selector,
                    ..Default::default()
                }),
            })
            .expect("ListPodSandbox");
        for s in list.items {
            let id = s.id;
            client
                .stop_pod_sandbox(&v1::StopPodSandboxRequest {
                    pod_sandbox_id: id.clone(),
                })
                .expect("StopPodSandbox");
            client
                .remove_pod_sandbox(&v1::RemovePodSandboxRequest { pod_sandbox_id: id })
                .expect("RemovePodSandbox");
        }
        util::remove_cgroups(&format!("/rkubelet-it/{}", self.node));
        let _ = std::fs::remove_dir_all(self.dir.join("logs"));
    }
}

/// The sandbox and container configs rkubelet sent for the warm-up pod, as containerd
/// keeps them (`config` of the verbose status's `info`), and what made them that pod's.
struct Template {
    sandbox: Value,
    container: Value,
    pod: String,
    uid: String,
    node: String,
}

impl Template {
    fn capture(node: &Node, client: &CriClient, raw: &Raw) -> Template {
        let mut selector = HashMap::new();
        selector.insert("io.rkubelet.node".to_string(), node.name.clone());
        let sandboxes = client
            .list_pod_sandbox(&v1::ListPodSandboxRequest {
                filter: Some(v1::PodSandboxFilter {
                    label_selector: selector.clone(),
                    ..Default::default()
                }),
            })
            .expect("ListPodSandbox")
            .items;
        let containers = client
            .list_containers(&v1::ListContainersRequest {
                filter: Some(v1::ContainerFilter {
                    label_selector: selector,
                    ..Default::default()
                }),
            })
            .expect("ListContainers")
            .containers;
        assert_eq!(
            (sandboxes.len(), containers.len()),
            (1, 1),
            "the warm-up pod's sandbox and container, by their node label"
        );
        let info = |m: &HashMap<String, String>| -> Value {
            let text = m.get("info").expect("verbose status has `info`");
            let v: Value = serde_json::from_str(text).expect("`info` is JSON");
            v["config"].clone()
        };
        let sandbox = info(
            &client
                .pod_sandbox_status(&v1::PodSandboxStatusRequest {
                    pod_sandbox_id: sandboxes[0].id.clone(),
                    verbose: true,
                })
                .expect("PodSandboxStatus")
                .info,
        );
        let container = info(
            &client
                .container_status(&v1::ContainerStatusRequest {
                    container_id: containers[0].id.clone(),
                    verbose: true,
                })
                .expect("ContainerStatus")
                .info,
        );
        std::fs::create_dir_all(&raw.dir).expect("raw dir");
        std::fs::write(
            raw.dir.join("template.json"),
            serde_json::to_string_pretty(
                &serde_json::json!({"sandbox": sandbox, "container": container}),
            )
            .unwrap_or_default(),
        )
        .expect("template.json");
        let mut t = Template {
            pod: sandbox["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .into(),
            uid: sandbox["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .into(),
            node: node.name.clone(),
            sandbox,
            container,
        };
        assert_eq!(
            t.sandbox["labels"]["io.rkubelet.node"].as_str(),
            Some(node.name.as_str()),
            "rkubelet's sandbox carries its node label"
        );
        assert_eq!(
            t.container["labels"]["io.rkubelet.node"].as_str(),
            Some(node.name.as_str()),
            "rkubelet's container carries its node label"
        );
        // The mounted files (hosts, resolv.conf, termination log) live in the pod's
        // directory, which goes with the pod: the raw pods get copies.
        let prefix = node.dir.display().to_string();
        if let Some(mounts) = t.container["mounts"].as_array_mut() {
            for (i, m) in mounts.iter_mut().enumerate() {
                let host = m["host_path"].as_str().unwrap_or_default().to_string();
                if !host.starts_with(&prefix) {
                    continue;
                }
                let copy = raw.dir.join(format!("mount{i}"));
                if Path::new(&host).is_dir() {
                    std::fs::create_dir_all(&copy).expect("mount dir");
                } else {
                    std::fs::copy(&host, &copy).expect("copy a mounted file");
                }
                m["host_path"] = Value::String(copy.display().to_string());
            }
        }
        t
    }

    /// A value of the warm-up pod's made the raw pod's.
    fn rename(&self, v: &str, pod: &str, uid: &str, raw: &Raw) -> String {
        if v == self.pod {
            pod.to_string()
        } else if v == self.uid {
            uid.to_string()
        } else if v == self.node {
            raw.node.clone()
        } else {
            v.to_string()
        }
    }

    fn renamed_map(&self, v: &Value, pod: &str, uid: &str, raw: &Raw) -> HashMap<String, String> {
        v.as_object()
            .into_iter()
            .flatten()
            .map(|(k, x)| {
                (
                    k.clone(),
                    self.rename(x.as_str().unwrap_or_default(), pod, uid, raw),
                )
            })
            .collect()
    }

    /// The configs for raw pod `pod` with `uid`.
    fn for_pod(
        &self,
        pod: &str,
        uid: &str,
        raw: &Raw,
    ) -> (v1::PodSandboxConfig, v1::ContainerConfig) {
        let s = &self.sandbox;
        let linux = &s["linux"];
        let cgroup_parent = text(linux, "cgroup_parent")
            .replace(&self.uid, uid)
            .replace(&self.uid.replace('-', "_"), &uid.replace('-', "_"))
            .replace(&self.node, &raw.node);
        let log_directory = raw
            .dir
            .join("logs")
            .join(format!("bench_{pod}_{uid}"))
            .display()
            .to_string();
        let sandbox = v1::PodSandboxConfig {
            metadata: Some(v1::PodSandboxMetadata {
                name: pod.to_string(),
                uid: uid.to_string(),
                namespace: text(&s["metadata"], "namespace"),
                attempt: s["metadata"]["attempt"].as_u64().unwrap_or(0) as u32,
            }),
            hostname: self.rename(&text(s, "hostname"), pod, uid, raw),
            log_directory,
            dns_config: None,
            port_mappings: Vec::new(),
            labels: self.renamed_map(&s["labels"], pod, uid, raw),
            annotations: self.renamed_map(&s["annotations"], pod, uid, raw),
            linux: Some(v1::LinuxPodSandboxConfig {
                cgroup_parent,
                security_context: Some(v1::LinuxSandboxSecurityContext {
                    namespace_options: Some(namespaces(
                        &linux["security_context"]["namespace_options"],
                    )),
                    ..Default::default()
                }),
                sysctls: self.renamed_map(&linux["sysctls"], pod, uid, raw),
                ..Default::default()
            }),
            windows: None,
        };
        assert!(
            s["port_mappings"].as_array().is_none_or(Vec::is_empty) && s["dns_config"].is_null(),
            "the warm-up pod has no host ports and no DNS config"
        );
        (sandbox, self.container_for(pod, uid, raw))
    }

    // The deprecated `seccomp_profile_path` is sent as rkubelet sends it.
    #[allow(deprecated)]
    fn container_for(&self, pod: &str, uid: &str, raw: &Raw) -> v1::ContainerConfig {
        let c = &self.container;
        let r = &c["linux"]["resources"];
        let sc = &c["linux"]["security_context"];
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .into_iter()
                .flatten()
                .map(|x| x.as_str().unwrap_or_default().to_string())
                .collect()
        };
        let int64 = |v: &Value| v["value"].as_i64().map(|value| v1::Int64Value { value });
        v1::ContainerConfig {
            metadata: Some(v1::ContainerMetadata {
                name: text(&c["metadata"], "name"),
                attempt: c["metadata"]["attempt"].as_u64().unwrap_or(0) as u32,
            }),
            image: Some(v1::ImageSpec {
                image: text(&c["image"], "image"),
                ..Default::default()
            }),
            command: strings(&c["command"]),
            args: strings(&c["args"]),
            working_dir: text(c, "working_dir"),
            envs: c["envs"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|e| v1::KeyValue {
                    key: text(e, "key"),
                    value: self.rename(&text(e, "value"), pod, uid, raw),
                })
                .collect(),
            mounts: c["mounts"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|m| v1::Mount {
                    container_path: text(m, "container_path"),
                    host_path: text(m, "host_path"),
                    readonly: m["readonly"].as_bool().unwrap_or(false),
                    propagation: int(m, "propagation"),
                    ..Default::default()
                })
                .collect(),
            labels: self.renamed_map(&c["labels"], pod, uid, raw),
            annotations: self.renamed_map(&c["annotations"], pod, uid, raw),
            log_path: text(c, "log_path"),
            stdin: c["stdin"].as_bool().unwrap_or(false),
            stdin_once: c["stdin_once"].as_bool().unwrap_or(false),
            tty: c["tty"].as_bool().unwrap_or(false),
            linux: Some(v1::LinuxContainerConfig {
                resources: Some(v1::LinuxContainerResources {
                    cpu_period: r["cpu_period"].as_i64().unwrap_or(0),
                    cpu_quota: r["cpu_quota"].as_i64().unwrap_or(0),
                    cpu_shares: r["cpu_shares"].as_i64().unwrap_or(0),
                    memory_limit_in_bytes: r["memory_limit_in_bytes"].as_i64().unwrap_or(0),
                    oom_score_adj: r["oom_score_adj"].as_i64().unwrap_or(0),
                    ..Default::default()
                }),
                security_context: Some(v1::LinuxContainerSecurityContext {
                    capabilities: Some(v1::Capability {
                        add_capabilities: strings(&sc["capabilities"]["add_capabilities"]),
                        drop_capabilities: strings(&sc["capabilities"]["drop_capabilities"]),
                        add_ambient_capabilities: Vec::new(),
                    }),
                    privileged: sc["privileged"].as_bool().unwrap_or(false),
                    namespace_options: Some(namespaces(&sc["namespace_options"])),
                    run_as_user: int64(&sc["run_as_user"]),
                    run_as_group: int64(&sc["run_as_group"]),
                    run_as_username: text(sc, "run_as_username"),
                    readonly_rootfs: sc["readonly_rootfs"].as_bool().unwrap_or(false),
                    supplemental_groups: sc["supplemental_groups"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_i64)
                        .collect(),
                    no_new_privs: sc["no_new_privs"].as_bool().unwrap_or(false),
                    seccomp: Some(v1::SecurityProfile {
                        profile_type: int(&sc["seccomp"], "profile_type"),
                        localhost_ref: text(&sc["seccomp"], "localhost_ref"),
                    }),
                    seccomp_profile_path: text(sc, "seccomp_profile_path"),
                    ..Default::default()
                }),
            }),
            ..Default::default()
        }
    }
}

fn text(v: &Value, k: &str) -> String {
    v[k].as_str().unwrap_or_default().to_string()
}

/// An enum field (Go's encoding/json writes CRI's enums as numbers).
fn int(v: &Value, k: &str) -> i32 {
    assert!(
        !v[k].is_string(),
        "{k} is a string ({}): the template reader expects numbers",
        v[k]
    );
    v[k].as_i64().unwrap_or(0) as i32
}

fn namespaces(v: &Value) -> v1::NamespaceOption {
    v1::NamespaceOption {
        network: int(v, "network"),
        pid: int(v, "pid"),
        ipc: int(v, "ipc"),
        target_id: text(v, "target_id"),
        ..Default::default()
    }
}

/// The node's memory by process kind: (processes, RSS, PSS, USS) in KiB.
type Memory = BTreeMap<&'static str, (usize, u64, u64, u64)>;

/// rkubelet `pid` and every daemon and shim whose command line names `dir`.
fn node_memory(pid: u32, dir: &str) -> Memory {
    let mut out = Memory::new();
    let mut add = |kind: &'static str, p: u32| {
        let (rss, pss, uss) = smaps_rollup(p);
        let e = out.entry(kind).or_insert((0, 0, 0, 0));
        *e = (e.0 + 1, e.1 + rss, e.2 + pss, e.3 + uss);
    };
    add("rkubelet", pid);
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
        let args = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
        if !String::from_utf8_lossy(&args).contains(dir) {
            continue;
        }
        match comm.trim() {
            "dockerd" => add("dockerd", p),
            "containerd" => add("containerd", p),
            c if c.starts_with("containerd-shim") => add("shims", p),
            _ => {}
        }
    }
    out
}

/// (Rss, Pss, Private_Clean + Private_Dirty) of `/proc/<pid>/smaps_rollup`, KiB.
fn smaps_rollup(pid: u32) -> (u64, u64, u64) {
    let s = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    let field = |k: &str| -> u64 {
        s.lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (
        field("Rss:"),
        field("Pss:"),
        field("Private_Clean:") + field("Private_Dirty:"),
    )
}

fn rss_anon_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// utime + stime by thread name (threads of one name summed), in clock ticks.
fn thread_ticks(pid: u32) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (name, ticks) in common::task_ticks(pid).into_values() {
        *out.entry(name).or_insert(0) += ticks;
    }
    out
}

fn loadavg() -> String {
    let s = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    s.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

fn print_starts(rows: &mut [(usize, [Vec<Duration>; 3])]) {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "pod start (sandbox + 1 busybox container per pod) until all run, median of the turns; \
         (b) is one client's calls, sequential"
    );
    println!(
        "| pods | turns | (a) rkubelet, containerd | (b) raw CRI calls | (c) rkubelet, Docker | (a)/(b) | (a)/(c) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for (n, t) in rows.iter_mut() {
        let med: Vec<f64> = t
            .iter_mut()
            .map(|v| {
                v.sort();
                ms(v[v.len() / 2])
            })
            .collect();
        let ab = med[0] / med[1];
        let target = if *n >= 10 {
            format!(
                " (target ≤ 1.0: {})",
                if ab <= 1.0 { "met" } else { "MISSED" }
            )
        } else {
            String::new()
        };
        println!(
            "| {n} | {} | {:.0} ms | {:.0} ms | {:.0} ms | {ab:.2}{target} | {:.2} |",
            t[0].len(),
            med[0],
            med[1],
            med[2],
            med[0] / med[2]
        );
    }
    for (n, t) in rows.iter() {
        let all = common::every_ms;
        println!(
            "({n} pods, every turn in ms: a {}; b {}; c {})",
            all(&t[0]),
            all(&t[1]),
            all(&t[2])
        );
    }
}

fn print_memory(a: &Memory, c: &Memory) {
    println!("node memory idle with {MEMORY_PODS} pods (KiB; processes; smaps_rollup):");
    println!("| runtime | process | n | RSS | PSS | USS |");
    println!("|---|---|---:|---:|---:|---:|");
    for (rt, m) in [("containerd", a), ("Docker", c)] {
        let mut total = (0, 0, 0, 0);
        for (k, (n, rss, pss, uss)) in m {
            println!("| {rt} | {k} | {n} | {rss} | {pss} | {uss} |");
            total = (total.0 + n, total.1 + rss, total.2 + pss, total.3 + uss);
        }
        println!(
            "| {rt} | **node total** | {} | {} | **{}** ({:.1} MiB) | {} |",
            total.0,
            total.1,
            total.2,
            total.2 as f64 / 1024.0,
            total.3
        );
    }
}
