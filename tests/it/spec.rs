//! The container spec as each runtime runs it: environment and the downward API, command
//! and args over the image's entrypoint, host ports, resources, the security context,
//! host namespaces, the managed hosts and resolver files. Each test runs a real rkubelet
//! on Docker and on containerd and looks from inside the container (`env`, `id`, `cat`)
//! and at what the runtime was asked ([`Asked`]: `docker inspect`, or containerd's
//! verbose status with the CRI config and the OCI spec it made of it).

use crate::registry::{
    commit_image, container_status, exec, pod_item, remove_image, wait_log, wait_running_id,
    wait_waiting,
};
use crate::util::{self, free_port, unique, wait_for, Node, Rt, BUSYBOX, LONG, SLEEPER};
use rkubelet::kuberuntime::container::dns::{parse_resolv_conf, render_resolv_conf};

fn lines(log: &str) -> Vec<&str> {
    log.lines().map(str::trim_end).collect()
}

/// What the runtime was asked to run, read back from the runtime.
#[derive(Debug, Default)]
struct Asked {
    stdin: bool,
    tty: bool,
    /// `uid:gid`.
    user: String,
    read_only_rootfs: bool,
    no_new_privileges: bool,
    seccomp_unconfined: bool,
    privileged: bool,
    cap_add: Vec<String>,
    cap_drop: Vec<String>,
    cpu_shares: i64,
    cpu_quota: i64,
    cpu_period: i64,
    memory_limit: i64,
    /// (container port, host port) published.
    ports: Vec<(i64, i64)>,
}

/// containerd's verbose status `info` of a container or sandbox.
fn cri_info(node: &Node, id: &str) -> serde_json::Value {
    let shared = node.containerd.as_ref().expect("a node on containerd");
    let (client, _shutdown) = crate::containerd::client(&shared.containerd);
    let info = match client.container_status(&rkubelet_cri::v1::ContainerStatusRequest {
        container_id: id.to_string(),
        verbose: true,
    }) {
        Ok(r) => r.info,
        Err(_) => {
            client
                .pod_sandbox_status(&rkubelet_cri::v1::PodSandboxStatusRequest {
                    pod_sandbox_id: id.to_string(),
                    verbose: true,
                })
                .expect("the status of a container or sandbox")
                .info
        }
    };
    serde_json::from_str(info.get("info").expect("a verbose info")).expect("JSON")
}

fn asked(node: &Node, id: &str) -> Asked {
    match node.rt {
        Rt::Docker => {
            let s = node.docker.inspect_settings(id).expect("inspect");
            Asked {
                stdin: s.stdin,
                tty: s.tty,
                user: s.user.clone(),
                read_only_rootfs: s.read_only_rootfs,
                no_new_privileges: s.security_opt.contains(&"no-new-privileges".to_string()),
                seccomp_unconfined: s.security_opt.contains(&"seccomp=unconfined".to_string()),
                privileged: s.privileged,
                cap_add: s.cap_add.clone(),
                cap_drop: s.cap_drop.clone(),
                cpu_shares: s.resources.cpu_shares,
                cpu_quota: s.resources.cpu_quota,
                cpu_period: s.resources.cpu_period,
                memory_limit: s.resources.memory_limit,
                ports: s
                    .ports
                    .iter()
                    .map(|p| (i64::from(p.container_port), i64::from(p.host_port)))
                    .collect(),
            }
        }
        Rt::Containerd => {
            // The CRI config rkubelet sent (what was asked, as Docker's HostConfig is)
            // and the OCI spec containerd made of it (what runs).
            let info = cri_info(node, id);
            let config = &info["config"];
            let spec = &info["runtimeSpec"];
            let sc = &config["linux"]["security_context"];
            let strings = |v: &serde_json::Value| -> Vec<String> {
                v.as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            };
            let i = |v: &serde_json::Value| v.as_i64().unwrap_or(0);
            let user = &spec["process"]["user"];
            Asked {
                stdin: config["stdin"] == true,
                tty: config["tty"] == true,
                user: format!("{}:{}", i(&user["uid"]), i(&user["gid"])),
                read_only_rootfs: spec["root"]["readonly"] == true,
                no_new_privileges: spec["process"]["noNewPrivileges"] == true,
                seccomp_unconfined: spec["linux"]["seccomp"].is_null(),
                privileged: sc["privileged"] == true,
                cap_add: strings(&sc["capabilities"]["add_capabilities"]),
                cap_drop: strings(&sc["capabilities"]["drop_capabilities"]),
                cpu_shares: i(&spec["linux"]["resources"]["cpu"]["shares"]),
                cpu_quota: i(&spec["linux"]["resources"]["cpu"]["quota"]),
                cpu_period: i(&spec["linux"]["resources"]["cpu"]["period"]),
                memory_limit: i(&spec["linux"]["resources"]["memory"]["limit"]),
                ports: config["port_mappings"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|p| (i(&p["container_port"]), i(&p["host_port"])))
                    .collect(),
            }
        }
    }
}

/// A Docker image of the test's own, in the node's runtime too (containerd: imported
/// into the shared one), removed from both on drop.
struct TestImage {
    name: String,
    containerd: Option<std::sync::Arc<util::SharedContainerd>>,
}

impl TestImage {
    fn on(node: &Node, name: String) -> TestImage {
        let containerd = node.containerd.clone();
        if let Some(c) = &containerd {
            let mut save = std::process::Command::new("docker")
                .args(["save", &name])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("docker save");
            let import = std::process::Command::new("ctr")
                .arg("-a")
                .arg(&c.containerd.sock)
                .args(["-n", "k8s.io", "images", "import", "-"])
                .stdin(save.stdout.take().expect("docker save's stdout"))
                .output()
                .expect("ctr images import");
            assert!(
                save.wait().expect("docker save").success(),
                "docker save {name}"
            );
            assert!(
                import.status.success(),
                "ctr images import {name}: {}",
                String::from_utf8_lossy(&import.stderr)
            );
        }
        TestImage { name, containerd }
    }
}

impl Drop for TestImage {
    fn drop(&mut self) {
        remove_image(&self.name);
        if let Some(c) = &self.containerd {
            c.containerd
                .ctr(&["images", "rm", &format!("docker.io/{}", self.name)]);
        }
    }
}

fn env_expansion_and_downward_api_reach_the_container(rt: Rt) {
    let mut node = Node::on(rt, "spec-env");
    node.write_manifest(
        "env.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: env
  labels: {{app: web, tier: front}}
  annotations: {{note: hello}}
spec:
  terminationGracePeriodSeconds: 1
  serviceAccountName: robot
  containers:
  - name: c
    image: {BUSYBOX}
    workingDir: /tmp
    stdin: true
    tty: false
    command: ["sh", "-c", "env; echo ARGS $0 $1 $2; pwd; {SLEEPER}"]
    args: ["$(A)", "$$(A)", "$(NOPE)"]
    resources:
      requests: {{cpu: 250m}}
      limits: {{cpu: 500m, memory: 64Mi}}
    env:
    - {{name: A, value: alpha}}
    - {{name: B, value: "$(A)-beta-$(C)"}}
    - {{name: C, value: gamma}}
    - {{name: ESCAPED, value: "$$(A)"}}
    - {{name: UNKNOWN, value: "$(NOPE)"}}
    - {{name: POD_NAME, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}
    - {{name: POD_NAMESPACE, valueFrom: {{fieldRef: {{fieldPath: metadata.namespace}}}}}}
    - {{name: POD_UID, valueFrom: {{fieldRef: {{fieldPath: metadata.uid}}}}}}
    - {{name: APP, valueFrom: {{fieldRef: {{fieldPath: "metadata.labels['app']"}}}}}}
    - {{name: NOTE, valueFrom: {{fieldRef: {{fieldPath: "metadata.annotations['note']"}}}}}}
    - {{name: NODE, valueFrom: {{fieldRef: {{fieldPath: spec.nodeName}}}}}}
    - {{name: SA, valueFrom: {{fieldRef: {{fieldPath: spec.serviceAccountName}}}}}}
    - {{name: POD_IP, valueFrom: {{fieldRef: {{fieldPath: status.podIP}}}}}}
    - {{name: POD_IPS, valueFrom: {{fieldRef: {{fieldPath: status.podIPs}}}}}}
    - {{name: HOST_IP, valueFrom: {{fieldRef: {{fieldPath: status.hostIP}}}}}}
    - {{name: HOST_IPS, valueFrom: {{fieldRef: {{fieldPath: status.hostIPs}}}}}}
    - {{name: MEM_MI, valueFrom: {{resourceFieldRef: {{resource: limits.memory, divisor: 1Mi}}}}}}
    - {{name: CPU_M, valueFrom: {{resourceFieldRef: {{resource: requests.cpu, divisor: 1m}}}}}}
    - {{name: CPU_LIMIT, valueFrom: {{resourceFieldRef: {{resource: limits.cpu}}}}}}
    - {{name: FROM_POD, value: "pod=$(POD_NAME)"}}
"#
        ),
    );
    node.start(&[]);
    let id = wait_running_id(&node, "env", "c");
    // `pwd` prints last.
    let log = wait_log(&node, &id, "\n/tmp\n");
    let got = lines(&log);
    let pod = pod_item(&node, "env").expect("pod listed");
    let full = format!("env-{}", node.name);
    let uid = pod["metadata"]["uid"].as_str().expect("uid").to_string();
    // The status publishes after the sync that started the container: wait for it.
    let (pod_ip, host_ip) = wait_for("the pod and host IPs", LONG, || {
        let st = pod_item(&node, "env")?["status"].clone();
        Some((
            st["podIP"].as_str()?.to_string(),
            st["hostIP"].as_str()?.to_string(),
        ))
    });
    let want = [
        "A=alpha".to_string(),
        "B=alpha-beta-$(C)".into(),
        "C=gamma".into(),
        "ESCAPED=$(A)".into(),
        "UNKNOWN=$(NOPE)".into(),
        format!("POD_NAME={full}"),
        "POD_NAMESPACE=default".into(),
        format!("POD_UID={uid}"),
        "APP=web".into(),
        "NOTE=hello".into(),
        format!("NODE={}", node.name),
        "SA=robot".into(),
        format!("POD_IP={pod_ip}"),
        format!("POD_IPS={pod_ip}"),
        format!("HOST_IP={host_ip}"),
        format!("HOST_IPS={host_ip}"),
        "MEM_MI=64".into(),
        "CPU_M=250".into(),
        "CPU_LIMIT=1".into(),
        format!("FROM_POD=pod={full}"),
        "ARGS alpha $(A) $(NOPE)".into(),
        "/tmp".into(),
    ];
    for w in &want {
        assert!(got.contains(&w.as_str()), "{w:?} missing from:\n{log}");
    }
    let d = asked(&node, &id);
    assert!(d.stdin && !d.tty, "{d:?}");
}

fn api_object_references_fail_only_their_container(rt: Rt) {
    let mut node = Node::on(rt, "spec-cm");
    node.write_manifest(
        "cm.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: cm}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: uses-cm
    image: {BUSYBOX}
    command: ["sleep", "3600"]
    env:
    - name: X
      valueFrom: {{configMapKeyRef: {{name: settings, key: x}}}}
  - name: uses-secret
    image: {BUSYBOX}
    command: ["sleep", "3600"]
    envFrom:
    - secretRef: {{name: creds}}
  - name: plain
    image: {BUSYBOX}
    command: ["sh", "-c", {SLEEPER:?}]
"#
        ),
    );
    node.start(&[]);
    wait_running_id(&node, "cm", "plain");
    let msg = wait_waiting(&node, "cm", "uses-cm", "CreateContainerConfigError");
    assert_eq!(
        msg,
        "couldn't get configMap default/settings, no kubeClient defined"
    );
    let msg = wait_waiting(&node, "cm", "uses-secret", "CreateContainerConfigError");
    assert_eq!(
        msg,
        "couldn't get secret default/creds, no kubeClient defined"
    );
    assert!(node.containers_named("uses-cm").is_empty());
}

fn command_and_args_follow_the_image_entrypoint_rules(rt: Rt) {
    let mut node = Node::on(rt, "spec-ep");
    let image = commit_image(
        BUSYBOX,
        &format!("rkubelet/entrypoint-{}", unique("ep")),
        &[
            r#"ENTRYPOINT ["/bin/echo", "from-entrypoint"]"#,
            r#"CMD ["from-cmd"]"#,
        ],
    );
    let _image = TestImage::on(&node, image.clone());
    node.write_manifest(
        "ep.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: ep}}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: image-defaults
    image: {image}
  - name: args-only
    image: {image}
    args: ["my-args"]
  - name: command-only
    image: {image}
    command: ["/bin/echo", "my-command"]
  - name: both
    image: {image}
    command: ["/bin/echo", "my-command"]
    args: ["my-args"]
"#
        ),
    );
    node.start(&[]);
    for (c, want) in [
        ("image-defaults", "from-entrypoint from-cmd"),
        ("args-only", "from-entrypoint my-args"),
        ("command-only", "my-command"),
        ("both", "my-command my-args"),
    ] {
        let id = wait_for(&format!("container {c}"), LONG, || {
            node.containers_named(c).first().map(|s| s.id.clone())
        });
        let log = wait_log(&node, &id, "\n");
        assert_eq!(log.trim(), want, "container {c}");
    }
}

fn host_port_is_published_on_the_sandbox(rt: Rt) {
    let mut node = Node::on(rt, "spec-port");
    let port = free_port();
    node.write_manifest(
        "web.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: web}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: httpd
    image: {BUSYBOX}
    command: ["sh", "-c", "mkdir -p /tmp/www && echo hello-from-pod > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www"]
    ports:
    - {{containerPort: 8080, hostPort: {port}}}
    - {{containerPort: 9090}}
"#
        ),
    );
    node.start(&[]);
    wait_running_id(&node, "web", "httpd");
    let body = wait_for("the host port to serve the pod", LONG, || {
        util::http_get(port, "/index.html")
            .ok()
            .filter(|(code, _)| *code == 200)
            .map(|(_, b)| b)
    });
    assert_eq!(body.trim(), "hello-from-pod");
    let sandbox = node.containers_named("POD").remove(0);
    let d = asked(&node, &sandbox.id);
    assert_eq!(d.ports, [(8080, i64::from(port))], "{d:?}");
}

fn resources_become_cgroup_settings_and_oom_kills_are_reported(rt: Rt) {
    let mut node = Node::on(rt, "spec-res");
    node.write_manifest(
        "res.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: res}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: limited
    image: {BUSYBOX}
    command: ["sh", "-c", {SLEEPER:?}]
    resources:
      requests: {{cpu: 250m, memory: 32Mi}}
      limits: {{cpu: 500m, memory: 64Mi}}
  - name: besteffort
    image: {BUSYBOX}
    command: ["sh", "-c", {SLEEPER:?}]
  - name: limit-only
    image: {BUSYBOX}
    command: ["sh", "-c", {SLEEPER:?}]
    resources:
      limits: {{cpu: "2"}}
"#
        ),
    );
    node.write_manifest(
        "oom.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: oom}}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: hog
    image: {BUSYBOX}
    command: ["sh", "-c", "tail /dev/zero"]
    resources:
      limits: {{memory: 16Mi}}
"#
        ),
    );
    node.start(&[]);
    let r = |c: &str| {
        let id = wait_running_id(&node, "res", c);
        asked(&node, &id)
    };
    let limited = r("limited");
    assert_eq!(
        (
            limited.cpu_shares,
            limited.cpu_quota,
            limited.cpu_period,
            limited.memory_limit
        ),
        (256, 50_000, 100_000, 64 << 20)
    );
    let be = r("besteffort");
    assert_eq!((be.cpu_shares, be.cpu_quota, be.memory_limit), (2, 0, 0));
    let lo = r("limit-only");
    assert_eq!((lo.cpu_shares, lo.cpu_quota), (2048, 200_000));

    let term = wait_for("the hog OOM-killed", LONG, || {
        let s = container_status(&node, "oom", "hog")?;
        s["state"]["terminated"]
            .is_object()
            .then(|| s["state"]["terminated"].clone())
    });
    assert_eq!(term["reason"], "OOMKilled", "{term}");
    assert_eq!(term["exitCode"], 137, "{term}");
}

fn security_context_users_groups_read_only_root_and_non_root_refusal(rt: Rt) {
    let mut node = Node::on(rt, "spec-sec");
    node.write_manifest(
        "sec.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: sec}}
spec:
  terminationGracePeriodSeconds: 1
  securityContext:
    runAsUser: 1000
    runAsGroup: 1500
    fsGroup: 2000
    supplementalGroups: [3000]
  volumes: [{{name: data, emptyDir: {{}}}}]
  containers:
  - name: user
    image: {BUSYBOX}
    command: ["sh", "-c", "echo UID $(id -u) GID $(id -g) GROUPS $(id -G); touch /tmp/made-here 2>/dev/null && echo ROOTFS-WRITABLE || echo ROOTFS-READONLY; touch /data/f; echo DATA $(stat -c '%g %A' /data) FILE $(stat -c %g /data/f); {SLEEPER}"]
    volumeMounts: [{{name: data, mountPath: /data}}]
    securityContext:
      runAsNonRoot: true
      readOnlyRootFilesystem: true
      allowPrivilegeEscalation: false
      capabilities: {{drop: [ALL]}}
  - name: explicit-root
    image: {BUSYBOX}
    command: ["sleep", "3600"]
    securityContext: {{runAsNonRoot: true, runAsUser: 0}}
  - name: privileged
    image: {BUSYBOX}
    command: ["sh", "-c", {SLEEPER:?}]
    securityContext:
      privileged: true
      runAsUser: 0
      capabilities: {{add: [NET_ADMIN]}}
"#
        ),
    );
    node.start(&[]);
    let id = wait_running_id(&node, "sec", "user");
    let log = wait_log(&node, &id, "ROOTFS-");
    assert!(log.contains("UID 1000 GID 1500"), "{log}");
    let groups = log
        .lines()
        .find(|l| l.starts_with("UID"))
        .and_then(|l| l.split("GROUPS").nth(1))
        .unwrap_or_default()
        .to_string();
    for g in ["1500", "2000", "3000"] {
        assert!(
            groups.split_whitespace().any(|x| x == g),
            "group {g} in {groups:?}"
        );
    }
    assert!(log.contains("ROOTFS-READONLY"), "{log}");
    // The emptyDir belongs to the fsGroup, setgid, so new files do too.
    let log = wait_log(&node, &id, "FILE ");
    assert!(log.contains("DATA 2000 drwxrwsrwx FILE 2000"), "{log}");
    let s = asked(&node, &id);
    assert!(s.read_only_rootfs, "{s:?}");
    assert_eq!(s.user, "1000:1500");
    assert!(s.no_new_privileges, "{s:?}");
    assert!(s.seccomp_unconfined, "{s:?}");
    assert_eq!(s.cap_drop, ["ALL"]);

    // runAsNonRoot with an explicit uid 0 is refused before the container exists.
    let msg = wait_waiting(&node, "sec", "explicit-root", "CreateContainerConfigError");
    assert!(
        msg.starts_with("container's runAsUser breaks non-root policy (pod: \"sec-"),
        "{msg}"
    );
    // This machine's engine cannot start privileged containers at all (its own
    // bounding set lacks CAP_SYS_RESOURCE, so runc fails to apply every capability):
    // check the container is created as asked, whether or not it then runs. Where it
    // fails to start, the restart makes a new one and the container GC may remove the
    // one just listed before it is inspected: inspect whichever is there.
    let p = wait_for("the privileged container to be created", LONG, || {
        node.containers_named("privileged").iter().find_map(|c| {
            // Inspect whichever instance is there (one may go between list and
            // inspect).
            let present = match node.rt {
                Rt::Docker => node.docker.inspect_settings(&c.id).is_ok(),
                Rt::Containerd => node.runtime.inspect_container(&c.id).is_ok(),
            };
            present.then(|| asked(&node, &c.id))
        })
    });
    assert!(p.privileged);
    assert_eq!(p.cap_add, ["NET_ADMIN"]);
    assert_eq!(p.user, "0:1500");
    assert!(node.containers_named("explicit-root").is_empty());
}

fn run_as_non_root_refuses_an_image_that_runs_as_root(rt: Rt) {
    let mut node = Node::on(rt, "spec-nonroot");
    node.write_manifest(
        "nr.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: nr}}
spec:
  terminationGracePeriodSeconds: 1
  securityContext: {{runAsNonRoot: true}}
  containers:
  - name: image-user
    image: {BUSYBOX}
    command: ["sleep", "3600"]
  - name: numeric-user
    image: {BUSYBOX}
    command: ["sh", "-c", {SLEEPER:?}]
    securityContext: {{runAsUser: 4242}}
"#
        ),
    );
    node.start(&[]);
    let msg = wait_waiting(&node, "nr", "image-user", "CreateContainerConfigError");
    assert!(
        msg.starts_with("container has runAsNonRoot and image will run as root (pod: \"nr-"),
        "{msg}"
    );
    assert!(msg.ends_with("container: image-user)"), "{msg}");
    let id = wait_running_id(&node, "nr", "numeric-user");
    assert_eq!(exec(&node, &id, &["id", "-u"]).trim(), "4242");
    assert!(node.containers_named("image-user").is_empty());
}

fn host_network_and_host_namespaces(rt: Rt) {
    let mut node = Node::on(rt, "spec-hostns");
    node.write_manifest(
        "hn.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: hn}}
spec:
  hostNetwork: true
  hostPID: true
  hostIPC: true
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: {BUSYBOX}
    command: ["sh", "-c", {SLEEPER:?}]
"#
        ),
    );
    node.write_manifest(
        "share.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: share}}
spec:
  shareProcessNamespace: true
  terminationGracePeriodSeconds: 1
  containers:
  - name: a
    image: {BUSYBOX}
    command: ["sh", "-c", "sleep 3601 & wait"]
  - name: b
    image: {BUSYBOX}
    command: ["sh", "-c", {SLEEPER:?}]
"#
        ),
    );
    node.start(&[]);
    let id = wait_running_id(&node, "hn", "c");
    let d = node.runtime.inspect_container(&id).expect("inspect");
    let own_netns = std::fs::read_link("/proc/self/ns/net").expect("netns");
    assert_eq!(
        util::netns(d.pid),
        own_netns.display().to_string(),
        "host network"
    );
    assert_eq!(ns(d.pid, "pid"), ns_self("pid"), "host PID namespace");
    let hosts = exec(&node, &id, &["cat", "/etc/hosts"]);
    let node_hosts = std::fs::read_to_string("/etc/hosts").expect("hosts");
    assert_eq!(
        hosts,
        format!("# Kubernetes-managed hosts file (host network).\n{node_hosts}")
    );
    let pod = wait_for("hn's pod IP", LONG, || {
        let p = pod_item(&node, "hn")?;
        p["status"]["podIP"].is_string().then_some(p)
    });
    assert_eq!(pod["status"]["podIP"], pod["status"]["hostIP"]);
    let sandbox = node
        .containers()
        .into_iter()
        .find(|c| {
            util::label(c, "io.kubernetes.container.name") == "POD"
                && util::label(c, "io.kubernetes.pod.name") == format!("hn-{}", node.name)
        })
        .expect("sandbox");
    let sb_pid = node
        .runtime
        .inspect_container(&sandbox.id)
        .expect("inspect")
        .pid;
    assert_eq!(ns(sb_pid, "ipc"), ns_self("ipc"), "host IPC namespace");

    // One process namespace: b sees a's sleep.
    let b = wait_running_id(&node, "share", "b");
    let a = wait_running_id(&node, "share", "a");
    let ps = exec(&node, &b, &["ps"]);
    assert!(ps.contains("sleep 3601"), "{ps}");
    let pid = |id: &str| node.runtime.inspect_container(id).expect("inspect").pid;
    assert_eq!(ns(pid(&b), "pid"), ns(pid(&a), "pid"), "one PID namespace");
    assert_ne!(
        ns(pid(&b), "pid"),
        ns_self("pid"),
        "the pod's, not the node's"
    );
}

/// The namespace `kind` of process `pid` (`pid:[4026531836]`).
fn ns(pid: u32, kind: &str) -> String {
    std::fs::read_link(format!("/proc/{pid}/ns/{kind}"))
        .map(|l| l.display().to_string())
        .unwrap_or_else(|e| panic!("/proc/{pid}/ns/{kind}: {e}"))
}

fn ns_self(kind: &str) -> String {
    ns(std::process::id(), kind)
}

fn resolv_conf_hosts_and_hostnames_are_managed(rt: Rt) {
    let mut node = Node::on(rt, "spec-dns");
    let resolv = node.dir.join("node-resolv.conf");
    std::fs::write(
        &resolv,
        "nameserver 10.9.9.9\nsearch corp.example\noptions timeout:2\n",
    )
    .expect("resolv");
    node.write_manifest(
        "named.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: named}}
spec:
  hostname: web
  subdomain: sub
  setHostnameAsFQDN: true
  terminationGracePeriodSeconds: 1
  dnsPolicy: "None"
  dnsConfig:
    nameservers: [1.2.3.4]
    searches: [a.example]
    options: [{{name: ndots, value: "2"}}, {{name: edns0}}]
  hostAliases:
  - ip: 10.1.2.3
    hostnames: [foo.remote, bar.remote]
  containers:
  - name: c
    image: {BUSYBOX}
    command: ["sh", "-c", {SLEEPER:?}]
"#
        ),
    );
    node.write_manifest(
        "cluster.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: cluster}}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: {BUSYBOX}\n    command: [\"sh\", \"-c\", {SLEEPER:?}]\n"
        ),
    );
    node.write_manifest(
        "default.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: default}}\nspec:\n  dnsPolicy: Default\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: {BUSYBOX}\n    command: [\"sh\", \"-c\", {SLEEPER:?}]\n"
        ),
    );
    node.start(&[
        "--cluster-dns=10.96.0.10",
        "--cluster-domain=cluster.local",
        &format!("--resolv-conf={}", resolv.display()),
    ]);

    let id = wait_running_id(&node, "named", "c");
    assert_eq!(
        exec(&node, &id, &["cat", "/etc/resolv.conf"]),
        "nameserver 1.2.3.4\nsearch a.example\noptions ndots:2 edns0\n"
    );
    assert_eq!(
        exec(&node, &id, &["hostname"]).trim(),
        "web.sub.default.svc.cluster.local"
    );
    let ip = wait_for("the pod IP", LONG, || {
        pod_item(&node, "named")?["status"]["podIP"]
            .as_str()
            .map(str::to_string)
    });
    assert_eq!(
        exec(&node, &id, &["cat", "/etc/hosts"]),
        format!(
            "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n{ip}\tweb.sub.default.svc.cluster.local\tweb\n\n# Entries added by HostAliases.\n10.1.2.3\tfoo.remote\tbar.remote\n"
        )
    );

    let id = wait_running_id(&node, "cluster", "c");
    assert_eq!(
        exec(&node, &id, &["cat", "/etc/resolv.conf"]),
        "nameserver 10.96.0.10\nsearch default.svc.cluster.local svc.cluster.local cluster.local corp.example\noptions ndots:5\n"
    );
    assert_eq!(
        exec(&node, &id, &["hostname"]).trim(),
        format!("cluster-{}", node.name)
    );

    let id = wait_running_id(&node, "default", "c");
    let want = render_resolv_conf(&parse_resolv_conf(
        &std::fs::read_to_string(&resolv).expect("resolv"),
    ))
    .expect("content");
    assert_eq!(exec(&node, &id, &["cat", "/etc/resolv.conf"]), want);
}

fn a_pod_whose_resolver_is_a_loopback_address_gets_a_warning_event(rt: Rt) {
    let mut node = Node::on(rt, "dnsloop");
    // The resolver file of a host running a local caching resolver (dnsmasq,
    // systemd-resolved's stub): a loopback address, which a pod cannot reach.
    let resolv = node.dir.join("resolv.conf");
    std::fs::write(&resolv, "nameserver 127.0.0.53\nsearch lan\n").expect("resolv");
    for (name, host_network) in [("loop", false), ("hostnet", true)] {
        node.write_manifest(
            &format!("{name}.yaml"),
            &format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  hostNetwork: {host_network}\n  dnsPolicy: Default\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: {BUSYBOX}\n    command: [\"sh\", \"-c\", {SLEEPER:?}]\n"
            ),
        );
    }
    node.start(&[&format!("--resolv-conf={}", resolv.display())]);
    wait_running_id(&node, "loop", "c");
    wait_running_id(&node, "hostnet", "c");
    let warned = |pod: &str| {
        node.log().lines().any(|l| {
            l.contains("DNSConfigForming")
                && l.contains(&format!("{pod}-{}", node.name))
                && l.contains("nameserver 127.0.0.53 is a loopback address")
        })
    };
    wait_for("the DNSConfigForming warning", LONG, || {
        warned("loop").then_some(())
    });
    assert!(!warned("hostnet"), "{}", node.log());
}

crate::on_both_runtimes!(
    env_expansion_and_downward_api_reach_the_container,
    api_object_references_fail_only_their_container,
    command_and_args_follow_the_image_entrypoint_rules,
    host_port_is_published_on_the_sandbox,
    resources_become_cgroup_settings_and_oom_kills_are_reported,
    security_context_users_groups_read_only_root_and_non_root_refusal,
    run_as_non_root_refuses_an_image_that_runs_as_root,
    host_network_and_host_namespaces,
    resolv_conf_hosts_and_hostnames_are_managed,
    a_pod_whose_resolver_is_a_loopback_address_gets_a_warning_event,
);
