//! The eviction manager on the real Docker engine and the API server stand-in: the
//! kubelet's root directory on a small tmpfs of the test's own, filled by a file until
//! `nodefs.available` is met; BestEffort API pods evicted first (Failed, `Evicted`,
//! upstream's message), the static pod never; the Node's DiskPressure condition set and
//! cleared after the (shortened) transition period; a new pod refused while it holds.
//! Also the OOM kill of a container over its memory limit (`OOMKilled`),
//! `allocatableMemory.available` and `pid.available` pressure, and on a containerd of
//! the test's own the image filesystem's pressure relieved by image GC through CRI
//! (an unused image removed; the image in use and the sandbox image kept).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::apiserver::{Options, TestApiServer};
use crate::util::{unique, wait_for, Node, BUSYBOX, LONG, SLEEPER};

const KUBELET_TOKEN: &str = "good-token";

/// A tmpfs mounted for one test, unmounted and removed when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let dir = std::env::temp_dir().join(format!("rkubelet-it-{}", unique("evroot")));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .status()
            .expect("mount");
        assert!(
            ok.success(),
            "mounting a tmpfs at {} (root needed)",
            dir.display()
        );
        Tmpfs(dir)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// The API server stand-in with the kubelet's token, a node of `name` with its
/// kubeconfig, and a static pod (critical: never evicted) running `command`.
fn api_node_with_static_pod(name: &str, command: &str) -> (TestApiServer, Node, PathBuf) {
    let api = TestApiServer::start(Options {
        tokens: vec![KUBELET_TOKEN.into()],
        ..Options::default()
    });
    let node = Node::new(name);
    api.set_token_user(
        KUBELET_TOKEN,
        &format!("system:node:{}", node.name),
        &["system:nodes"],
    );
    let kc = api.kubeconfig(&node.dir, "kubelet.kubeconfig", "token: good-token");
    node.write_manifest(
        "static.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: static, namespace: default}}\n\
             spec:\n  containers:\n  - {{name: c, image: {BUSYBOX}, command: [sh, -c, \"{command}\"]}}\n"
        ),
    );
    (api, node, kc)
}

fn condition(node: &Value, kind: &str) -> Option<String> {
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .and_then(|c| c["status"].as_str().map(String::from))
}

#[test]
fn disk_pressure_evicts_besteffort_pods_first_never_static_ones_and_clears() {
    let root = Tmpfs::mount("64m");
    let (api, mut node, kc) = api_node_with_static_pod("evict", &format!("echo hi; {SLEEPER}"));
    // A static pod: critical, never evicted.
    node.start(&[
        &format!("--kubeconfig={}", kc.display()),
        &format!("--root-dir={}", root.0.display()),
        "--eviction-hard=nodefs.available<50%",
        "--eviction-pressure-transition-period=20s",
        "--node-status-update-frequency=2s",
    ]);
    let pod = |name: &str, resources: Value| {
        json!({"metadata": {"name": name}, "spec": {"nodeName": node.name,
            "terminationGracePeriodSeconds": 30,
            "containers": [{"name": "c", "image": BUSYBOX, "resources": resources,
                "command": ["sh", "-c", format!("echo started; {SLEEPER}")]}]}})
    };
    api.create_pod(pod("be-1", json!({})));
    api.create_pod(pod("be-2", json!({})));
    api.create_pod(pod(
        "burstable",
        // Under its request (so ranked after the BestEffort pods), and within the
        // 64 MiB node's allocatable (admission refuses a request beyond it).
        json!({"requests": {"ephemeral-storage": "8Mi", "memory": "10Mi"}}),
    ));
    for name in ["be-1", "be-2", "burstable"] {
        wait_for(&format!("{name} Running"), LONG, || {
            let p = api.get("pods", "default", name)?;
            (p["status"]["phase"] == "Running").then_some(())
        });
    }
    let node_obj = wait_for("the Node registered", LONG, || {
        api.get("nodes", "", &node.name)
    });
    assert_eq!(
        condition(&node_obj, "DiskPressure").as_deref(),
        Some("False")
    );

    // Fill the root filesystem past the threshold (40 of 64 MiB).
    let filler = root.0.join("filler");
    std::fs::write(&filler, vec![0u8; 40 << 20]).expect("fill");

    wait_for("DiskPressure on the Node", LONG, || {
        let n = api.get("nodes", "", &node.name)?;
        (condition(&n, "DiskPressure").as_deref() == Some("True")).then_some(())
    });
    let evicted = |name: &str| -> Option<Value> {
        let p = api.get("pods", "default", name)?;
        (p["status"]["reason"] == "Evicted").then_some(p)
    };
    // Both BestEffort pods go before the Burstable one (under its request).
    let first = wait_for("a BestEffort pod evicted", LONG, || {
        evicted("be-1").or_else(|| evicted("be-2"))
    });
    assert_eq!(first["status"]["phase"], "Failed");
    let msg = first["status"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        msg.starts_with("The node was low on resource: ephemeral-storage. Threshold quantity: 32Mi, available: "),
        "{msg}"
    );
    wait_for("both BestEffort pods evicted", LONG, || {
        evicted("be-1").and(evicted("be-2"))
    });
    let log = node.log();
    let order: Vec<&str> = log
        .lines()
        .filter_map(|l| l.split("evicting pod default/").nth(1))
        .filter_map(|rest| rest.split(' ').next())
        .collect();
    assert!(order.len() >= 2, "{order:?}");
    assert!(
        order[..2].iter().all(|n| n.starts_with("be-")),
        "BestEffort pods first: {order:?}"
    );
    // A new pod is refused while the pressure holds.
    api.create_pod(pod("late", json!({})));
    let late = wait_for("the late pod rejected", LONG, || {
        let p = api.get("pods", "default", "late")?;
        (p["status"]["phase"] == "Failed").then_some(p)
    });
    assert_eq!(late["status"]["reason"], "Evicted");
    assert_eq!(
        late["status"]["message"],
        "Pod was rejected: The node had condition: [DiskPressure]. "
    );

    // Pressure gone: the condition clears after the transition period.
    std::fs::remove_file(&filler).expect("unfill");
    wait_for("DiskPressure cleared", LONG, || {
        let n = api.get("nodes", "", &node.name)?;
        (condition(&n, "DiskPressure").as_deref() == Some("False")).then_some(())
    });
    // The static pod was never evicted and still runs.
    let statics = node.pods();
    let st = statics["items"]
        .as_array()
        .and_then(|a| {
            a.iter()
                .find(|p| {
                    p["metadata"]["name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with("static"))
                })
                .cloned()
        })
        .expect("the static pod");
    assert_eq!(st["status"]["phase"], "Running", "{}", node.log());
    assert!(!log.contains("evicting pod default/static"));
    drop(node);
}

#[test]
fn a_container_over_its_ephemeral_storage_limit_is_evicted_while_nobody_reads_the_stats() {
    // Nobody reads /stats/summary here: the stats loop measures the disks of the pods
    // with an ephemeral-storage limit only, and that is enough for the limit.
    let (api, mut node, kc) = api_node_with_static_pod("evlimit", SLEEPER);
    node.start(&[&format!("--kubeconfig={}", kc.display())]);
    let pod = |name: &str, resources: Value, command: String| {
        json!({"metadata": {"name": name}, "spec": {"nodeName": node.name,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": BUSYBOX, "resources": resources,
                "command": ["sh", "-c", command]}]}})
    };
    api.create_pod(pod(
        "writer",
        json!({"limits": {"ephemeral-storage": "4Mi"}}),
        format!("dd if=/dev/zero of=/big bs=1048576 count=8 2>/dev/null; sync; {SLEEPER}"),
    ));
    api.create_pod(pod("quiet", json!({}), SLEEPER.to_string()));
    // The first measurement may come before the write: the next is a minute later.
    let evicted = wait_for("the writer evicted", LONG * 2, || {
        let p = api.get("pods", "default", "writer")?;
        (p["status"]["reason"] == "Evicted").then_some(p)
    });
    assert_eq!(evicted["status"]["phase"], "Failed");
    assert_eq!(
        evicted["status"]["message"],
        "Container c exceeded its local ephemeral storage limit \"4Mi\". "
    );
    let quiet = api.get("pods", "default", "quiet").expect("quiet");
    assert_eq!(quiet["status"]["phase"], "Running", "{}", node.log());
    drop(node);
}

#[test]
fn a_container_over_its_memory_limit_is_oom_killed() {
    let mut node = Node::new("oom");
    // The shell keeps 100 MiB in a variable: its cgroup's 20 MiB limit kills it.
    let manifest = r#"apiVersion: v1
kind: Pod
metadata: {name: oom, namespace: default}
spec:
  restartPolicy: Never
  containers:
  - name: hog
    image: IMAGE
    resources: {limits: {memory: 20Mi}}
    command: [sh, -c, "x=$(head -c 104857600 /dev/zero | tr '\\0' x); echo ${#x}"]
"#;
    node.write_manifest("oom.yaml", &manifest.replace("IMAGE", BUSYBOX));
    node.start(&[]);
    let status = wait_for("the hog OOMKilled", Duration::from_secs(120), || {
        let pods = node.pods();
        let p = pods["items"].as_array()?.first()?.clone();
        let cs = p["status"]["containerStatuses"]
            .as_array()?
            .first()?
            .clone();
        (cs["state"]["terminated"]["reason"] == "OOMKilled").then_some(cs)
    });
    assert_eq!(status["name"], "hog");
}

#[test]
fn memory_pressure_refuses_besteffort_pods_and_evicts_but_never_static_ones() {
    let (api, mut node, kc) = api_node_with_static_pod("evmem", SLEEPER);
    // A threshold of the whole memory: available is always below it, whatever the
    // machine's other load does, so the node is under memory pressure from the start.
    let meminfo = std::fs::read_to_string("/proc/meminfo").expect("meminfo");
    let total_kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("MemTotal");
    node.start(&[
        &format!("--kubeconfig={}", kc.display()),
        &format!("--eviction-hard=memory.available<{total_kib}Ki"),
        "--node-status-update-frequency=2s",
    ]);
    wait_for("MemoryPressure on the Node", LONG, || {
        let n = api.get("nodes", "", &node.name)?;
        (condition(&n, "MemoryPressure").as_deref() == Some("True")).then_some(())
    });
    let pod = |name: &str, resources: Value| {
        json!({"metadata": {"name": name}, "spec": {"nodeName": node.name,
            "containers": [{"name": "c", "image": BUSYBOX, "resources": resources,
                "command": ["sh", "-c", SLEEPER]}]}})
    };
    // BestEffort: refused under memory pressure.
    api.create_pod(pod("be", json!({})));
    let be = wait_for("the BestEffort pod rejected", LONG, || {
        let p = api.get("pods", "default", "be")?;
        (p["status"]["phase"] == "Failed").then_some(p)
    });
    assert_eq!(
        be["status"]["message"],
        "Pod was rejected: The node had condition: [MemoryPressure]. "
    );
    // Burstable: admitted, then evicted (the only pod that may be).
    api.create_pod(pod("burstable", json!({"requests": {"memory": "10Mi"}})));
    let b = wait_for("the Burstable pod evicted", LONG, || {
        let p = api.get("pods", "default", "burstable")?;
        (p["status"]["reason"] == "Evicted").then_some(p)
    });
    let msg = b["status"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.starts_with("The node was low on resource: memory. Threshold quantity: "),
        "{msg}"
    );
    // The static pod keeps running: the passes after the Burstable pod's eviction find
    // only it, and say they cannot evict it.
    wait_for("a pass to find only the critical static pod", LONG, || {
        node.log()
            .contains("cannot evict a critical pod default/static")
            .then_some(())
    });
    let log = node.log();
    assert!(!log.contains("evicting pod default/static"), "{log}");
}

#[test]
fn allocatable_memory_pressure_is_measured_on_the_kubepods_cgroup() {
    let (api, mut node, kc) = api_node_with_static_pod("evalloc", SLEEPER);
    // A threshold above the node's allocatable memory: met as soon as the `kubepods`
    // cgroup exists (the static pod builds it) whatever the machine's load, and only
    // on that signal (`memory.available` is the harness's 1Ki).
    node.start(&[
        &format!("--kubeconfig={}", kc.display()),
        "--eviction-hard=memory.available<1Ki,allocatableMemory.available<1Pi",
        "--node-status-update-frequency=2s",
    ]);
    wait_for("MemoryPressure on the Node", LONG, || {
        let n = api.get("nodes", "", &node.name)?;
        (condition(&n, "MemoryPressure").as_deref() == Some("True")).then_some(())
    });
    api.create_pod(
        json!({"metadata": {"name": "burstable"}, "spec": {"nodeName": node.name,
        "containers": [{"name": "c", "image": BUSYBOX,
            "resources": {"requests": {"memory": "10Mi"}},
            "command": ["sh", "-c", SLEEPER]}]}}),
    );
    let b = wait_for("the Burstable pod evicted", LONG, || {
        let p = api.get("pods", "default", "burstable")?;
        (p["status"]["reason"] == "Evicted").then_some(p)
    });
    let msg = b["status"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.starts_with(
            "The node was low on resource: memory. Threshold quantity: 1Pi, available: "
        ),
        "{msg}"
    );
    let log = node.log();
    assert!(
        log.contains("evicting pod default/burstable for allocatableMemory.available"),
        "{log}"
    );
    assert!(!log.contains("evicting pod default/static"), "{log}");
}

#[test]
fn pid_pressure_sets_the_condition_refuses_pods_and_spares_static_ones() {
    let (api, mut node, kc) = api_node_with_static_pod("evpid", SLEEPER);
    // A threshold above pid_max: `pid.available` is always below it.
    let pid_max: u64 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .expect("pid_max")
        .trim()
        .parse()
        .expect("pid_max");
    node.start(&[
        &format!("--kubeconfig={}", kc.display()),
        &format!(
            "--eviction-hard=memory.available<1Ki,pid.available<{}",
            pid_max + 1
        ),
        "--node-status-update-frequency=2s",
    ]);
    wait_for("PIDPressure on the Node", LONG, || {
        let n = api.get("nodes", "", &node.name)?;
        (condition(&n, "PIDPressure").as_deref() == Some("True")).then_some(())
    });
    // Under PID pressure every pod but a critical one is refused (upstream's
    // admission: only MemoryPressure lets non-BestEffort pods in).
    api.create_pod(
        json!({"metadata": {"name": "burstable"}, "spec": {"nodeName": node.name,
        "containers": [{"name": "c", "image": BUSYBOX,
            "resources": {"requests": {"memory": "10Mi"}},
            "command": ["sh", "-c", SLEEPER]}]}}),
    );
    let p = wait_for("the pod refused", LONG, || {
        let p = api.get("pods", "default", "burstable")?;
        (p["status"]["phase"] == "Failed").then_some(p)
    });
    assert_eq!(
        p["status"]["message"],
        "Pod was rejected: The node had condition: [PIDPressure]. "
    );
    // The static pod runs, and the passes say they cannot evict it.
    wait_for("a pass to find only the critical static pod", LONG, || {
        node.log()
            .contains("cannot evict a critical pod default/static")
            .then_some(())
    });
    let mirror = wait_for("the static pod Running", LONG, || {
        let p = api.get("pods", "default", &format!("static-{}", node.name))?;
        (p["status"]["phase"] == "Running").then_some(p)
    });
    assert_eq!(mirror["status"]["phase"], "Running");
    let log = node.log();
    assert!(!log.contains("evicting pod default/static"), "{log}");
}

/// imagefs pressure on a CRI runtime: the node-level reclaim removes the unused
/// images through CRI, never the image a container uses nor the sandbox image. Image
/// GC acts on the whole runtime: a containerd of the test's own, so the shared one's
/// images are never candidates. The pressure is a threshold the disk always meets
/// (`imagefs.available<99%`), as the other tests fake theirs.
#[test]
fn imagefs_pressure_on_containerd_removes_unused_images_through_cri_never_one_in_use() {
    let c = crate::containerd::Containerd::start();
    let docker = crate::util::docker();
    let junk = format!("rkubelet-evimg-{}/junk:1", std::process::id());
    crate::gc::tiny_image(&docker, &junk);
    crate::gc::import_into(&c, std::slice::from_ref(&junk));
    let _ = Command::new("docker").args(["rmi", &junk]).output();
    let (_shutdown, loops) = crate::containerd::loops();
    let cri = rkubelet_cri::runtime::CriRuntime::new(&c.endpoint(), LONG, &loops)
        .expect("a unix endpoint");
    let mut node = Node::on(crate::util::Rt::Containerd, "evict-img");
    node.endpoint = c.endpoint();
    node.runtime = std::sync::Arc::new(cri);
    node.containerd = None;
    let runtime = node.runtime.clone();
    let present = |image: &str| {
        runtime
            .inspect_image(image)
            .expect("inspect image")
            .is_some()
    };
    assert!(present(&format!("docker.io/{junk}")));
    node.write_manifest(
        "static.yaml",
        &crate::util::pod_yaml("static", 1, &[("c", SLEEPER)]),
    );
    // The pod runs first (its image in use), then the kubelet comes back under
    // pressure: the reclaim must not race the pod's first container.
    node.start(&[]);
    wait_for("the static pod's container running", LONG, || {
        node.running()
            .keys()
            .any(|k| k.ends_with("/c"))
            .then_some(())
    });
    node.kill9();
    node.start(&[
        "--eviction-hard=imagefs.available<99%",
        // Image GC on (the reclaim's image step needs it), its own pass idle: the
        // disk is far from 99 % used.
        "--image-gc-high-threshold=99",
        "--image-gc-low-threshold=98",
    ]);
    wait_for("the unused image removed", LONG, || {
        (!present(&format!("docker.io/{junk}"))).then_some(())
    });
    let log = node.log();
    assert!(
        log.contains("image GC removing image") && log.contains(&junk),
        "the reclaim removed it: {log}"
    );
    // The static pod runs on busybox: in use, kept; the sandbox image too.
    assert!(present(&format!("docker.io/{BUSYBOX}")));
    assert!(present(&format!("docker.io/{}", crate::util::PAUSE)));
    assert!(!node.log().contains("evicting pod default/static"));
}
