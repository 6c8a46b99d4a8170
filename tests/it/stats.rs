//! The resource analyzer end to end, on Docker and on containerd: `/stats/summary`
//! from a real rkubelet running pods, decoded into test-side copies of upstream's
//! `stats/v1alpha1` Go types (unknown fields refused), its figures compared with the
//! runtime's own (Docker: `docker stats --no-stream` for the working set and `du` of
//! the container's `UpperDir`; containerd: CRI `ContainerStats`' working set and
//! writable layer) and with `du` of an emptyDir; the image filesystem is the runtime's
//! root; `/metrics/resource` and `/metrics/cadvisor` through `promtool check metrics`;
//! the kubelet port's `nodes/stats` and `nodes/metrics` authorization through the API
//! server stand-in's SubjectAccessReview; the `network` healthz check.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::Deserialize;

use crate::apiserver::{Options, Pki, TestApiServer};
use crate::kubelet_port::{pki_flags, run, start};
use crate::util::{wait_for, Node, Rt, BUSYBOX, LONG, SLEEPER};
use rkubelet_cri::v1;

// Test-side copies of k8s.io/kubelet/pkg/apis/stats/v1alpha1 (field names and JSON
// tags from types.go), refusing any field upstream's types do not have.

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Summary {
    node: NodeStats,
    pods: Vec<PodStats>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct NodeStats {
    node_name: String,
    #[serde(default)]
    system_containers: Vec<ContainerStats>,
    start_time: Option<String>,
    cpu: Option<CpuStats>,
    memory: Option<MemoryStats>,
    network: Option<NetworkStats>,
    fs: Option<FsStats>,
    runtime: Option<RuntimeStats>,
    rlimit: Option<RlimitStats>,
    swap: Option<serde_json::Value>,
    io: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct RuntimeStats {
    image_fs: Option<FsStats>,
    container_fs: Option<FsStats>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct RlimitStats {
    time: String,
    maxpid: Option<i64>,
    curproc: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct PodReference {
    name: String,
    namespace: String,
    uid: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct PodStats {
    pod_ref: PodReference,
    start_time: Option<String>,
    containers: Option<Vec<ContainerStats>>,
    cpu: Option<CpuStats>,
    memory: Option<MemoryStats>,
    network: Option<NetworkStats>,
    #[serde(default)]
    volume: Vec<VolumeStats>,
    #[serde(rename = "ephemeral-storage")]
    ephemeral_storage: Option<FsStats>,
    #[serde(rename = "process_stats")]
    process_stats: Option<ProcessStats>,
    swap: Option<serde_json::Value>,
    io: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct ProcessStats {
    process_count: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct ContainerStats {
    name: String,
    start_time: Option<String>,
    cpu: Option<CpuStats>,
    memory: Option<MemoryStats>,
    #[serde(default)]
    accelerators: Vec<serde_json::Value>,
    rootfs: Option<FsStats>,
    logs: Option<FsStats>,
    #[serde(default)]
    user_defined_metrics: Vec<serde_json::Value>,
    swap: Option<serde_json::Value>,
    io: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct CpuStats {
    time: String,
    usage_nano_cores: Option<u64>,
    usage_core_nano_seconds: Option<u64>,
    psi: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct MemoryStats {
    time: String,
    available_bytes: Option<u64>,
    usage_bytes: Option<u64>,
    working_set_bytes: Option<u64>,
    rss_bytes: Option<u64>,
    page_faults: Option<u64>,
    major_page_faults: Option<u64>,
    psi: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct NetworkStats {
    time: String,
    // InterfaceStats inline.
    name: String,
    rx_bytes: Option<u64>,
    rx_errors: Option<u64>,
    tx_bytes: Option<u64>,
    tx_errors: Option<u64>,
    #[serde(default)]
    interfaces: Vec<InterfaceStats>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct InterfaceStats {
    name: String,
    rx_bytes: Option<u64>,
    rx_errors: Option<u64>,
    tx_bytes: Option<u64>,
    tx_errors: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct FsStats {
    time: String,
    available_bytes: Option<u64>,
    capacity_bytes: Option<u64>,
    used_bytes: Option<u64>,
    inodes_free: Option<u64>,
    inodes: Option<u64>,
    inodes_used: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct VolumeStats {
    // FsStats inline.
    time: String,
    available_bytes: Option<u64>,
    capacity_bytes: Option<u64>,
    used_bytes: Option<u64>,
    inodes_free: Option<u64>,
    inodes: Option<u64>,
    inodes_used: Option<u64>,
    name: String,
    pvc_ref: Option<serde_json::Value>,
    volume_health_stats: Option<serde_json::Value>,
}

fn summary(node: &Node, query: &str) -> Summary {
    let (code, body) = node.ro_get(&format!("/stats/summary{query}"));
    assert_eq!(code, 200, "/stats/summary: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("decode /stats/summary: {e}\n{body}"))
}

/// Within 10 % of each other.
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 0.1 * a.max(b)
}

/// `docker stats --no-stream` memory of one container, in bytes (the CLI's usage is
/// usage − inactive file pages on cgroup v1 and v2: the working set).
fn docker_stats_memory(id: &str) -> f64 {
    let out =
        run(Command::new("docker").args(["stats", "--no-stream", "--format", "{{.MemUsage}}", id]));
    let text = String::from_utf8_lossy(&out.stdout);
    let used = text.split('/').next().unwrap_or("").trim().to_string();
    let (num, unit) = used.split_at(
        used.find(|c: char| c.is_ascii_alphabetic())
            .unwrap_or(used.len()),
    );
    let n: f64 = num
        .parse()
        .unwrap_or_else(|_| panic!("docker stats said {text:?}"));
    let mult = match unit {
        "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        u => panic!("unit {u:?} in {text:?}"),
    };
    n * mult
}

/// `du -sk` of a path, in bytes.
fn du(path: &Path) -> f64 {
    let out = run(Command::new("du").arg("-skx").arg(path));
    let text = String::from_utf8_lossy(&out.stdout);
    let kb: f64 = text
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("du said {text:?}"));
    kb * 1024.0
}

/// containerd's own figures of a container (CRI `ContainerStats`): its working set
/// and its writable layer's bytes (the snapshotter's usage, refreshed every 10 s).
fn cri_stats(node: &Node, id: &str) -> (Option<u64>, Option<u64>) {
    let shared = node.containerd.as_ref().expect("a containerd node");
    let (client, _shutdown) = crate::containerd::client(&shared.containerd);
    let r = client
        .container_stats(&v1::ContainerStatsRequest {
            container_id: id.to_string(),
        })
        .expect("ContainerStats");
    let s = r.stats.unwrap_or_default();
    (
        s.memory.and_then(|m| m.working_set_bytes).map(|v| v.value),
        s.writable_layer.and_then(|w| w.used_bytes).map(|v| v.value),
    )
}

/// The writable layer directory of a Docker container.
fn upper_dir(id: &str) -> PathBuf {
    let out = run(Command::new("docker").args([
        "inspect",
        "--format",
        "{{index .GraphDriver.Data \"UpperDir\"}}",
        id,
    ]));
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

const MEM_BYTES: u64 = 40 * 1024 * 1024;
const VOLUME_BYTES: u64 = 20 * 1024 * 1024;
const ROOTFS_BYTES: u64 = 10 * 1024 * 1024;

fn hog_pod() -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: hog\nspec:\n  terminationGracePeriodSeconds: 1\n  \
         volumes:\n  - name: data\n    emptyDir: {{}}\n  containers:\n  \
         - name: mem\n    image: {BUSYBOX}\n    command: [\"sh\", \"-c\", {mem:?}]\n  \
         - name: disk\n    image: {BUSYBOX}\n    command: [\"sh\", \"-c\", {disk:?}]\n    \
         volumeMounts:\n    - name: data\n      mountPath: /data\n",
        mem = format!(
            "dd if=/dev/zero of=/dev/shm/hold bs=1048576 count={} 2>/dev/null; {SLEEPER}",
            MEM_BYTES / 1048576
        ),
        disk = format!(
            "dd if=/dev/zero of=/data/f bs=1048576 count={} 2>/dev/null; \
             dd if=/dev/zero of=/big bs=1048576 count={} 2>/dev/null; sync; {SLEEPER}",
            VOLUME_BYTES / 1048576,
            ROOTFS_BYTES / 1048576
        ),
    )
}

fn stats_summary_decodes_as_upstreams_types_and_agrees_with_the_runtime_and_du(rt: Rt) {
    let mut node = Node::on(rt, "stats");
    node.write_manifest("hog.yaml", &hog_pod());
    node.start(&[]);
    let pod_name = format!("hog-{}", node.name);

    // Wait until the figures are there: memory held, files written and measured (the
    // disk scan runs once a minute per directory).
    let s = wait_for(
        "the hog pod's figures in /stats/summary",
        Duration::from_secs(200),
        || {
            let s = summary(&node, "");
            let pod = s.pods.iter().find(|p| p.pod_ref.name == pod_name)?;
            let cs = pod.containers.as_ref()?;
            let mem = cs.iter().find(|c| c.name == "mem")?;
            let disk = cs.iter().find(|c| c.name == "disk")?;
            let ws = mem.memory.as_ref()?.working_set_bytes?;
            let vol = pod.volume.iter().find(|v| v.name == "data")?.used_bytes?;
            let rootfs = disk.rootfs.as_ref()?.used_bytes?;
            (ws >= MEM_BYTES
                && vol >= VOLUME_BYTES
                && rootfs >= ROOTFS_BYTES
                && pod.cpu.as_ref()?.usage_nano_cores.is_some())
            .then_some(s)
        },
    );

    // Node figures.
    assert_eq!(s.node.node_name, node.name);
    let nm = s.node.memory.as_ref().expect("node memory");
    assert!(nm.working_set_bytes.expect("ws") > 0 && nm.available_bytes.is_some());
    let ncpu = s.node.cpu.as_ref().expect("node cpu");
    assert!(ncpu.usage_core_nano_seconds.expect("cpu") > 0);
    assert!(ncpu.usage_nano_cores.is_some(), "a rate after two samples");
    let nfs = s.node.fs.as_ref().expect("nodefs");
    assert!(nfs.capacity_bytes.expect("capacity") >= nfs.available_bytes.expect("available"));
    let imagefs = s
        .node
        .runtime
        .as_ref()
        .and_then(|r| r.image_fs.as_ref())
        .expect("imagefs");
    assert!(imagefs.used_bytes.expect("images") > 0);
    // On CRI the figures are the runtime's ImageFsInfo (upstream's CRI stats
    // provider), which counts inodes too; Docker's are the image list's sizes.
    assert_eq!(
        imagefs.inodes_used.is_some_and(|i| i > 0),
        rt == Rt::Containerd,
        "{imagefs:?}"
    );
    // The runtime's root's filesystem (Docker's `DockerRootDir`, containerd's root).
    let root = match rt {
        Rt::Docker => PathBuf::from("/var/lib/docker"),
        Rt::Containerd => node
            .containerd
            .as_ref()
            .expect("containerd")
            .containerd
            .dir
            .join("root"),
    };
    let df = rustix::fs::statvfs(&root).expect("statvfs of the runtime's root");
    assert_eq!(
        imagefs.capacity_bytes,
        Some(df.f_blocks * df.f_frsize),
        "imagefs is {root:?}'s filesystem"
    );
    let rl = s.node.rlimit.as_ref().expect("rlimit");
    assert!(rl.maxpid.expect("maxpid") > rl.curproc.expect("curproc"));
    assert!(s.node.start_time.is_some());

    // The pod.
    let pod = s
        .pods
        .iter()
        .find(|p| p.pod_ref.name == pod_name)
        .expect("pod");
    assert_eq!(pod.pod_ref.namespace, "default");
    assert!(pod.start_time.is_some());
    let net = pod.network.as_ref().expect("pod network");
    assert_eq!(net.name, "eth0");
    assert!(net.interfaces.iter().any(|i| i.name == "eth0"));
    assert!(
        pod.process_stats
            .as_ref()
            .and_then(|p| p.process_count)
            .expect("tasks")
            >= 2
    );
    let eph = pod.ephemeral_storage.as_ref().expect("ephemeral storage");
    assert!(eph.used_bytes.expect("used") >= VOLUME_BYTES + ROOTFS_BYTES);
    let cs = pod.containers.as_ref().expect("containers");
    let names: Vec<&str> = cs.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["disk", "mem"], "sandboxes are not containers");
    let pod_ws = pod
        .memory
        .as_ref()
        .and_then(|m| m.working_set_bytes)
        .expect("pod ws");
    assert!(pod_ws >= MEM_BYTES, "the pod holds its containers' memory");
    for c in cs {
        assert!(
            c.logs.as_ref().and_then(|l| l.used_bytes).is_some(),
            "{} logs",
            c.name
        );
        assert!(c.start_time.is_some());
    }

    // Against the runtime's own figures and du, measured now.
    let running = node.running();
    let mem_id = &running[&format!("{pod_name}/mem")][0];
    let disk_id = &running[&format!("{pod_name}/disk")][0];
    let ours = summary(&node, "");
    let pod = ours
        .pods
        .iter()
        .find(|p| p.pod_ref.name == pod_name)
        .expect("pod");
    let cs = pod.containers.as_ref().expect("containers");
    let mem = cs.iter().find(|c| c.name == "mem").expect("mem");
    let ws = mem
        .memory
        .as_ref()
        .and_then(|m| m.working_set_bytes)
        .expect("ws") as f64;
    let theirs = match rt {
        Rt::Docker => docker_stats_memory(mem_id),
        Rt::Containerd => cri_stats(&node, mem_id).0.expect("CRI working set") as f64,
    };
    assert!(
        close(ws, theirs),
        "working set {ws} vs the runtime's {theirs} ({rt:?})"
    );
    let uid = &pod.pod_ref.uid;
    let vol_dir = node
        .dir
        .join("root/pods")
        .join(uid)
        .join("volumes/kubernetes.io~empty-dir/data");
    let vol = pod
        .volume
        .iter()
        .find(|v| v.name == "data")
        .expect("data volume");
    let (vol_used, vol_du) = (vol.used_bytes.expect("used") as f64, du(&vol_dir));
    assert!(
        close(vol_used, vol_du),
        "emptyDir {vol_used} vs du {vol_du}"
    );
    let disk = cs.iter().find(|c| c.name == "disk").expect("disk");
    let rootfs = disk
        .rootfs
        .as_ref()
        .and_then(|r| r.used_bytes)
        .expect("rootfs") as f64;
    match rt {
        Rt::Docker => {
            let upper = upper_dir(disk_id);
            let rootfs_du = du(&upper);
            assert!(
                close(rootfs, rootfs_du),
                "rootfs {rootfs} vs du {rootfs_du} of {upper:?}"
            );
        }
        Rt::Containerd => {
            // containerd measures its snapshots every 10 s: wait for the file in it.
            let layer = wait_for("containerd's writable layer figure", LONG, || {
                cri_stats(&node, disk_id).1.filter(|&b| b >= ROOTFS_BYTES)
            }) as f64;
            assert!(
                close(rootfs, layer),
                "rootfs {rootfs} vs containerd's writable layer {layer}"
            );
        }
    }

    // The reduced form metrics-server asked for before /metrics/resource.
    let small = summary(&node, "?only_cpu_and_memory=true");
    assert!(small.node.fs.is_none() && small.node.cpu.is_some());
    let p = small
        .pods
        .iter()
        .find(|p| p.pod_ref.name == pod_name)
        .expect("pod");
    assert!(p.volume.is_empty() && p.network.is_none() && p.memory.is_some());
    assert!(p
        .containers
        .as_ref()
        .expect("containers")
        .iter()
        .all(|c| c.rootfs.is_none()));
}

/// Sample lines of a text, by `name{labels}` without the timestamp.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (key, rest) = match l.rfind('}') {
                Some(i) => (&l[..=i], &l[i + 1..]),
                None => l.split_once(' ')?,
            };
            let v = rest.split_whitespace().next()?.parse().ok()?;
            Some((key.to_string(), v))
        })
        .collect()
}

/// `curl -sk` with a bearer token: (status, body).
fn get_token(port: u16, path: &str, token: &str) -> (u16, String) {
    let out = run(Command::new("curl").args([
        "-sk",
        "--max-time",
        "30",
        "-w",
        "\n%{http_code}",
        "-H",
        &format!("Authorization: Bearer {token}"),
        &format!("https://127.0.0.1:{port}{path}"),
    ]));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

fn stats_metrics_pass_promtool_and_the_kubelet_port_authorizes_nodes_stats_and_metrics(rt: Rt) {
    let api = TestApiServer::start(Options::default());
    api.set_token_user("tok-stats", "stats-reader", &[]);
    api.set_token_user("tok-metrics", "metrics-reader", &[]);
    api.allow("stats-reader", "stats");
    api.allow("metrics-reader", "metrics");
    let mut node = Node::on(rt, "statsm");
    node.write_manifest(
        "web.yaml",
        &crate::util::pod_yaml("web", 1, &[("app", SLEEPER)]),
    );
    let kc = api.kubeconfig(&node.dir, "kubelet.kubeconfig", "token: good-token");
    let mut flags = pki_flags(&Pki::get());
    flags.push(format!("--kubeconfig={}", kc.display()));
    flags.push("--authentication-token-webhook".into());
    flags.push("--authorization-mode=Webhook".into());
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let port = start(&mut node, &flags);
    let pod = format!("web-{}", node.name);

    // The pod's container in /metrics/resource (read-only port).
    let resource = wait_for("the pod in /metrics/resource", LONG, || {
        let (code, body) = node.ro_get("/metrics/resource");
        let s = samples(&body);
        let key = format!(
            "container_memory_working_set_bytes{{container=\"app\",namespace=\"default\",pod=\"{pod}\"}}"
        );
        (code == 200 && s.contains_key(&key)).then_some(body)
    });
    crate::util::promtool(&resource, "/metrics/resource");
    let s = samples(&resource);
    assert_eq!(s["resource_scrape_error"], 0.0);
    assert!(s["node_cpu_usage_seconds_total"] > 0.0);
    assert!(s["node_memory_working_set_bytes"] > 0.0);
    assert!(
        s[&format!("pod_memory_working_set_bytes{{namespace=\"default\",pod=\"{pod}\"}}")] > 0.0
    );
    assert!(s.contains_key(&format!(
        "container_start_time_seconds{{container=\"app\",namespace=\"default\",pod=\"{pod}\"}}"
    )));

    let (code, cadvisor) = node.ro_get("/metrics/cadvisor");
    assert_eq!(code, 200);
    crate::util::promtool(&cadvisor, "/metrics/cadvisor");
    let app = cadvisor
        .lines()
        .find(|l| {
            l.starts_with("container_memory_working_set_bytes{container=\"app\"")
                && l.contains(&format!("pod=\"{pod}\""))
        })
        .unwrap_or_else(|| panic!("no app working set in /metrics/cadvisor:\n{cadvisor}"));
    assert!(
        app.contains("namespace=\"default\"") && app.contains("image=\"") && app.contains("id=\"/")
    );
    assert!(
        cadvisor.lines().any(|l| l
            .starts_with("container_network_receive_bytes_total{container=\"POD\"")
            && l.contains("interface=\"eth0\"")
            && l.contains(&format!("pod=\"{pod}\""))),
        "the sandbox's network in /metrics/cadvisor"
    );

    // nodes/stats and nodes/metrics on the kubelet port.
    let (code, body) = get_token(port, "/stats/summary", "tok-stats");
    assert_eq!(code, 200, "{body}");
    let _: Summary = serde_json::from_str(&body).expect("summary over the kubelet port");
    let (code, body) = get_token(port, "/stats/summary", "tok-metrics");
    assert_eq!(
        (code, body.as_str()),
        (
            403,
            "Forbidden (user=metrics-reader, verb=get, resource=nodes, subresource(s)=[stats])\n"
        )
    );
    for path in ["/metrics/resource", "/metrics/cadvisor"] {
        let (code, body) = get_token(port, path, "tok-metrics");
        assert_eq!(code, 200, "{path}: {body}");
        let (code, body) = get_token(port, path, "tok-stats");
        assert_eq!(
            (code, body.as_str()),
            (
                403,
                "Forbidden (user=stats-reader, verb=get, resource=nodes, subresource(s)=[metrics])\n"
            ),
            "{path}"
        );
    }

    // net-status: the runtime's network is up (Docker's bridge, containerd's CNI).
    let (code, body) = node.healthz_get("/healthz/network");
    assert_eq!((code, body.as_str()), (200, "ok"));
    // The Ready condition counts the network in: ready here.
    wait_for("the Node Ready", LONG, || {
        let n = api.get("nodes", "", &node.name)?;
        let conds = n["status"]["conditions"].as_array()?.clone();
        conds
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
            .then_some(())
    });
}

crate::on_both_runtimes!(
    stats_summary_decodes_as_upstreams_types_and_agrees_with_the_runtime_and_du,
    stats_metrics_pass_promtool_and_the_kubelet_port_authorizes_nodes_stats_and_metrics,
);
