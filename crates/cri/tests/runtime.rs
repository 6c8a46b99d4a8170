//! `CriRuntime` (the `Runtime` trait on CRI) against a real containerd of each test's
//! own (the harness in `common/`): pods with the kubelet's labels and dockershim names,
//! exit codes, OOM kills, exec, kills, leftovers, logs (tailed, filtered, followed
//! across a `ReopenContainerLog` rotation), images through a registry of
//! the test's own, and the errors of missing objects.
//!
//! Needs what `containerd.rs` needs, and for the pull test Debian's `docker-registry`
//! and `htpasswd` (apt: docker-registry apache2-utils).

mod common;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base::loops::Shutdown;
use common::{loops, run, wait_for, Containerd, BUSYBOX, T};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use rkubelet_cri::runtime::CriRuntime;
use runtime::config::{
    ContainerConfig, ContainerMetadata, NamespaceMode, PodSandboxConfig, PodSandboxMetadata,
    Resources,
};
use runtime::container::labels::{self, ContainerKind};
use runtime::{ContainerState, EventFilter, LogOptions, RegistryAuth, Runtime, RuntimeError};

const NODE: &str = "cri-test-node";

fn runtime(c: &Containerd) -> (CriRuntime, Shutdown) {
    let (shutdown, loops) = loops();
    let rt = CriRuntime::new(&c.endpoint(), T, &loops).expect("a unix endpoint");
    (rt, shutdown)
}

/// A pod of the test's own (its name is its UID too, so names never meet).
fn pod(name: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(format!("{name}-uid")),
            labels: Some([("app".to_string(), name.to_string())].into()),
            ..Default::default()
        },
        spec: Some(PodSpec::default()),
        ..Default::default()
    }
}

/// The sandbox config the kubelet would make for `pod`, logs under the test's dir.
fn sandbox(c: &Containerd, pod: &Pod) -> PodSandboxConfig {
    let m = &pod.metadata;
    let name = m.name.clone().unwrap_or_default();
    let mut cfg = PodSandboxConfig {
        metadata: PodSandboxMetadata {
            name: name.clone(),
            uid: m.uid.clone().unwrap_or_default(),
            namespace: m.namespace.clone().unwrap_or_default(),
            attempt: 0,
        },
        hostname: name.clone(),
        log_directory: c
            .dir
            .join("pods")
            .join(&name)
            .to_string_lossy()
            .into_owned(),
        labels: labels::sandbox_labels(pod, NODE),
        ..Default::default()
    };
    cfg.annotations.insert("test".into(), name);
    cfg
}

/// A busybox container running `sh -c script`, with the kubelet's labels.
fn container(pod: &Pod, name: &str, script: &str, sandbox_id: &str) -> ContainerConfig {
    let spec = Container {
        name: name.into(),
        ..Default::default()
    };
    ContainerConfig {
        metadata: ContainerMetadata {
            name: name.into(),
            attempt: 0,
        },
        image: format!("docker.io/{BUSYBOX}"),
        command: Some(vec!["sh".into(), "-c".into(), script.into()]),
        labels: labels::container_labels(pod, NODE, &spec, ContainerKind::App, 0, sandbox_id),
        log_path: format!("{name}/0.log"),
        ..Default::default()
    }
}

/// Creates and starts a container; its ID.
fn start(
    rt: &CriRuntime,
    sandbox_id: &str,
    cfg: &ContainerConfig,
    pod: &PodSandboxConfig,
) -> String {
    let id = rt
        .create_container(sandbox_id, cfg, pod)
        .expect("create container");
    rt.start_container(&id).expect("start container");
    id
}

fn wait_exited(rt: &CriRuntime, id: &str) -> runtime::ContainerDetails {
    wait_for(T, &format!("container {id} to exit"), || {
        let d = rt.inspect_container(id).expect("inspect");
        (d.state == ContainerState::Exited).then_some(d)
    })
}

/// How many threads of this process have the name `name`.
fn threads_named(name: &str) -> usize {
    // A thread names itself once running: until then it shows its parent's name (this
    // test's thread), so the count is read once no thread shows that name but the
    // test's own.
    let names = || -> Vec<String> {
        std::fs::read_dir("/proc/self/task")
            .expect("/proc/self/task")
            .flatten()
            .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
            .map(|c| c.trim().to_string())
            .collect()
    };
    let me = std::fs::read_to_string("/proc/thread-self/comm")
        .expect("/proc/thread-self/comm")
        .trim()
        .to_string();
    let settled = wait_for(T, "new threads to name themselves", || {
        let all = names();
        (all.iter().filter(|n| **n == me).count() == 1).then_some(all)
    });
    settled.iter().filter(|n| *n == name).count()
}

#[test]
fn a_pod_runs_is_listed_by_label_and_its_container_execs() {
    let c = Containerd::start();
    let (rt, _s) = runtime(&c);
    let p = pod("listed");
    let sb = sandbox(&c, &p);
    let sandbox_id = rt.run_pod_sandbox(&sb).expect("run sandbox");
    let s = rt.inspect_container(&sandbox_id).expect("inspect sandbox");
    assert_eq!(s.state, ContainerState::Running);
    assert!(s.ip_address.starts_with("10."), "a pod address: {s:?}");
    assert!(!s.host_network);
    assert!(s.pid > 0, "the pause process: {s:?}");
    assert_eq!(s.name, "k8s_POD_listed_default_listed-uid_0");
    assert_eq!(s.image, format!("docker.io/{}", common::PAUSE));

    let cfg = container(&p, "app", "sleep 3600", &sandbox_id);
    let id = start(&rt, &sandbox_id, &cfg, &sb);
    let d = rt.inspect_container(&id).expect("inspect container");
    assert_eq!(d.state, ContainerState::Running);
    assert!(d.pid > 0 && d.started_at.is_some(), "{d:?}");
    assert_eq!(d.name, "k8s_app_listed_default_listed-uid_0");
    assert!(
        d.log_path.ends_with("pods/listed/app/0.log"),
        "{}",
        d.log_path
    );
    assert_eq!(d.image, format!("docker.io/{BUSYBOX}"));

    // Both, by the pod's UID, with the kubelet's labels and the states the PLEG reads.
    let uid = format!("{}=listed-uid", labels::POD_UID);
    let mut all = rt
        .list_containers(std::slice::from_ref(&uid))
        .expect("list");
    base::sort::sort_by_key(&mut all, |s| s.name.clone());
    let names: Vec<&str> = all.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "k8s_POD_listed_default_listed-uid_0",
            "k8s_app_listed_default_listed-uid_0"
        ]
    );
    let type_of = |l: &BTreeMap<String, String>| l.get(labels::DOCKER_TYPE).cloned();
    assert_eq!(
        type_of(&all[0].labels).as_deref(),
        Some(labels::TYPE_SANDBOX)
    );
    assert_eq!(all[0].id, sandbox_id);
    assert_eq!(all[0].state, ContainerState::Running);
    assert_eq!(all[0].labels.get("app").map(String::as_str), Some("listed"));
    assert_eq!(
        type_of(&all[1].labels).as_deref(),
        Some(labels::TYPE_CONTAINER)
    );
    assert_eq!(all[1].id, id);
    assert_eq!(all[1].state, ContainerState::Running);
    assert_eq!(all[1].labels.get(labels::SANDBOX_ID), Some(&sandbox_id));
    // A bare key is matched here; a type filter picks one kind.
    let by_key = rt
        .list_containers(&[uid.clone(), labels::MANAGED_BY_NODE.to_string()])
        .expect("list by key");
    assert_eq!(by_key.len(), 2);
    assert!(rt
        .list_containers(&[uid.clone(), "no-such-label".to_string()])
        .expect("list by a missing key")
        .is_empty());
    let only = rt
        .list_containers(&[
            uid.clone(),
            format!("{}={}", labels::DOCKER_TYPE, labels::TYPE_CONTAINER),
        ])
        .expect("list containers only");
    assert_eq!(
        only.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
        [id.as_str()]
    );
    assert!(rt
        .list_containers(&[format!("{}=someone-else", labels::POD_UID)])
        .expect("list another pod")
        .is_empty());

    let hi = rt
        .exec(&id, &["echo".into(), "hi".into()], T)
        .expect("exec");
    assert_eq!((hi.stdout.as_slice(), hi.exit_code), (&b"hi\n"[..], 0));
    let err = rt
        .exec(
            &id,
            &["sh".into(), "-c".into(), "echo oops >&2; exit 7".into()],
            T,
        )
        .expect("exec that fails");
    assert_eq!((err.stderr.as_slice(), err.exit_code), (&b"oops\n"[..], 7));
    // A command past its own timeout times out after that timeout (an exec probe's
    // failure says so), not after the request timeout.
    match rt.exec(&id, &["sleep".into(), "30".into()], Duration::from_secs(1)) {
        Err(RuntimeError::Timeout { after, .. }) => assert_eq!(after, Duration::from_secs(1)),
        other => panic!("not a timeout after 1s: {other:?}"),
    }

    // Stop and remove, the sandbox through the same calls as a container.
    rt.stop_container(&id, Duration::from_secs(1))
        .expect("stop");
    assert_eq!(wait_exited(&rt, &id).state, ContainerState::Exited);
    rt.remove_container(&id).expect("remove");
    rt.stop_container(&sandbox_id, Duration::from_secs(1))
        .expect("stop sandbox");
    assert_eq!(
        rt.inspect_container(&sandbox_id)
            .expect("stopped sandbox")
            .state,
        ContainerState::Exited
    );
    rt.remove_container(&sandbox_id).expect("remove sandbox");
    assert!(rt.list_containers(&[uid]).expect("list").is_empty());
}

#[test]
fn a_container_runs_as_its_config_says() {
    let c = Containerd::start();
    let (rt, _s) = runtime(&c);
    let p = pod("spec");
    let mut sb = sandbox(&c, &p);
    sb.linux
        .sysctls
        .insert("net.ipv4.ip_unprivileged_port_start".into(), "80".into());
    let sandbox_id = rt.run_pod_sandbox(&sb).expect("run sandbox");
    let shared = c.dir.join("shared");
    std::fs::create_dir_all(&shared).expect("host dir");
    std::fs::write(shared.join("file"), "from the host").expect("host file");

    let mut cfg = container(&p, "spec", "sleep 3600", &sandbox_id);
    cfg.envs = vec![("GREETING".into(), "hello there".into())];
    cfg.working_dir = "/tmp".into();
    cfg.mounts = vec![runtime::config::Mount {
        host_path: shared.to_string_lossy().into_owned(),
        container_path: "/shared".into(),
        read_only: true,
    }];
    let sc = &mut cfg.linux.security_context;
    sc.run_as_user = Some(1234);
    sc.run_as_group = Some(2345);
    sc.supplemental_groups = vec![3456];
    sc.readonly_rootfs = true;
    sc.no_new_privs = true;
    sc.drop_capabilities = vec!["ALL".into()];
    let id = start(&rt, &sandbox_id, &cfg, &sb);
    let sh = |script: &str| {
        let r = rt
            .exec(&id, &["sh".into(), "-c".into(), script.into()], T)
            .expect("exec");
        (
            r.exit_code,
            String::from_utf8_lossy(&r.stdout).trim().to_string(),
        )
    };
    assert_eq!(sh("id -u; id -g"), (0, "1234\n2345".into()));
    assert!(
        sh("id -G").1.split(' ').any(|g| g == "3456"),
        "{:?}",
        sh("id -G")
    );
    assert_eq!(sh("pwd"), (0, "/tmp".into()));
    assert_eq!(sh("hostname"), (0, "spec".into()));
    assert_eq!(
        sh("cat /proc/sys/net/ipv4/ip_unprivileged_port_start"),
        (0, "80".into()),
        "the pod's sysctl"
    );
    assert_eq!(sh("echo $GREETING"), (0, "hello there".into()));
    assert_eq!(sh("cat /shared/file"), (0, "from the host".into()));
    assert_ne!(
        sh("touch /shared/new 2>/dev/null").0,
        0,
        "a read-only mount"
    );
    assert_ne!(sh("touch /new 2>/dev/null").0, 0, "a read-only rootfs");
    assert_eq!(
        sh("grep CapEff /proc/self/status"),
        (0, "CapEff:\t0000000000000000".into())
    );
    assert_eq!(
        sh("grep NoNewPrivs /proc/self/status"),
        (0, "NoNewPrivs:\t1".into())
    );

    // A privileged container is admitted into the pod's sandbox (containerd checks
    // the sandbox config sent with it) and has the capabilities of the node.
    let mut root = container(&p, "root", "sleep 3600", &sandbox_id);
    root.linux.security_context.privileged = true;
    let root = start(&rt, &sandbox_id, &root, &sb);
    let caps = rt
        .exec(
            &root,
            &["grep".into(), "CapEff".into(), "/proc/self/status".into()],
            T,
        )
        .expect("exec");
    let caps = String::from_utf8_lossy(&caps.stdout).to_string();
    let bits = caps
        .split_whitespace()
        .nth(1)
        .and_then(|h| u64::from_str_radix(h, 16).ok())
        .expect("CapEff in hex");
    // CAP_SYS_ADMIN (21), which no unprivileged container has.
    assert_ne!(bits & (1 << 21), 0, "{caps}");
}

#[test]
fn a_sandbox_on_the_nodes_network_has_no_pod_address() {
    let c = Containerd::start();
    let (rt, _s) = runtime(&c);
    let p = pod("hostnet");
    let mut sb = sandbox(&c, &p);
    // As the kubelet makes it: no hostname of its own.
    sb.hostname = String::new();
    sb.linux.security_context.namespace_options.network = NamespaceMode::Node;
    let id = rt.run_pod_sandbox(&sb).expect("run sandbox");
    let d = rt.inspect_container(&id).expect("inspect");
    assert!(d.host_network, "{d:?}");
    assert_eq!(d.ip_address, "");
    assert_eq!(d.state, ContainerState::Running);
}

#[test]
fn exit_codes_oom_kills_and_kills_are_reported() {
    let c = Containerd::start();
    let (rt, _s) = runtime(&c);
    let p = pod("exits");
    let sb = sandbox(&c, &p);
    let sandbox_id = rt.run_pod_sandbox(&sb).expect("run sandbox");

    let three = start(
        &rt,
        &sandbox_id,
        &container(&p, "three", "exit 3", &sandbox_id),
        &sb,
    );
    let d = wait_exited(&rt, &three);
    assert_eq!(d.exit_code, 3);
    assert!(!d.oom_killed);
    assert!(d.finished_at.is_some() && d.pid == 0, "{d:?}");

    // 64 MiB of buffer under a 16 MiB limit (no swap on these machines), allocated
    // only once the test says so: containerd's shim watches the cgroup for OOM kills
    // from the end of the start on, and misses one that comes before.
    let mut hog = container(
        &p,
        "hog",
        "while [ ! -e /tmp/go ]; do sleep 0.1; done; exec dd if=/dev/zero of=/dev/null bs=64M count=1",
        &sandbox_id,
    );
    hog.linux.resources = Resources {
        memory_limit: 16 << 20,
        ..Resources::default()
    };
    let hog = start(&rt, &sandbox_id, &hog, &sb);
    let go = rt
        .exec(&hog, &["touch".into(), "/tmp/go".into()], T)
        .expect("exec");
    assert_eq!(go.exit_code, 0);
    wait_exited(&rt, &hog);
    // containerd handles the task's OOM event apart from its exit, sometimes after it:
    // the reason may come a moment after the state.
    let d = wait_for(T, "the OOMKilled reason", || {
        let d = rt.inspect_container(&hog).expect("inspect");
        d.oom_killed.then_some(d)
    });
    assert_eq!(d.exit_code, 137);

    // SIGTERM returns while a container that ignores it still runs; SIGKILL ends it.
    let stubborn = start(
        &rt,
        &sandbox_id,
        &container(
            &p,
            "stubborn",
            "trap '' TERM; while :; do sleep 1; done",
            &sandbox_id,
        ),
        &sb,
    );
    rt.kill_container(&stubborn, "SIGTERM").expect("SIGTERM");
    assert_eq!(
        rt.inspect_container(&stubborn).expect("inspect").state,
        ContainerState::Running,
        "kill_container waited for the exit"
    );
    // Twice: a stop already under way is not started again.
    rt.kill_container(&stubborn, "SIGTERM")
        .expect("SIGTERM again");
    assert_eq!(threads_named("cri-stop"), 1);
    rt.kill_container(&stubborn, "SIGKILL").expect("SIGKILL");
    let d = rt.inspect_container(&stubborn).expect("inspect");
    assert_eq!((d.state, d.exit_code), (ContainerState::Exited, 137));
    // The stop that SIGTERM began ends with the container.
    wait_for(T, "the cri-stop thread to end", || {
        (threads_named("cri-stop") == 0).then_some(())
    });

    // A container that exits on SIGTERM does, after the call returned.
    let polite = start(
        &rt,
        &sandbox_id,
        &container(
            &p,
            "polite",
            "trap 'exit 0' TERM; while :; do sleep 1; done",
            &sandbox_id,
        ),
        &sb,
    );
    rt.kill_container(&polite, "SIGTERM").expect("SIGTERM");
    assert_eq!(wait_exited(&rt, &polite).exit_code, 0);
    // Signals to what has stopped are no error.
    rt.kill_container(&polite, "SIGTERM")
        .expect("SIGTERM to an exited container");
    rt.kill_container(&polite, "SIGKILL")
        .expect("SIGKILL to an exited container");
}

#[test]
fn a_leftover_of_the_same_attempt_is_replaced() {
    let c = Containerd::start();
    let (rt, _s) = runtime(&c);
    let p = pod("leftover");
    let sb = sandbox(&c, &p);
    let first = rt.run_pod_sandbox(&sb).expect("run sandbox");
    let second = rt.run_pod_sandbox(&sb).expect("run the same sandbox again");
    assert_ne!(first, second);
    assert!(matches!(
        rt.inspect_container(&first),
        Err(RuntimeError::NotFound { .. })
    ));
    assert_eq!(
        rt.inspect_container(&second).expect("the new one").state,
        ContainerState::Running
    );

    let cfg = container(&p, "app", "sleep 3600", &second);
    let one = start(&rt, &second, &cfg, &sb);
    let two = rt
        .create_container(&second, &cfg, &sb)
        .expect("create the same container again");
    assert_ne!(one, two);
    assert!(rt.inspect_container(&one).is_err_and(|e| e.is_not_found()));
    assert_eq!(
        rt.inspect_container(&two).expect("the new one").state,
        ContainerState::Created
    );
}

#[test]
fn logs_give_the_last_lines_of_the_cri_log_file() {
    let c = Containerd::start();
    let (rt, _s) = runtime(&c);
    let p = pod("logs");
    let sb = sandbox(&c, &p);
    let sandbox_id = rt.run_pod_sandbox(&sb).expect("run sandbox");
    let id = start(
        &rt,
        &sandbox_id,
        &container(
            &p,
            "talker",
            "for i in 1 2 3 4 5; do echo line$i; done",
            &sandbox_id,
        ),
        &sb,
    );
    wait_exited(&rt, &id);
    assert_eq!(rt.logs(&id, Some(2)).expect("tail 2"), b"line4\nline5\n");
    assert_eq!(
        rt.logs(&id, None).expect("all"),
        b"line1\nline2\nline3\nline4\nline5\n"
    );
    assert_eq!(rt.logs(&id, Some(0)).expect("tail 0"), b"");

    let err = start(
        &rt,
        &sandbox_id,
        &container(&p, "err", "echo to-stderr >&2", &sandbox_id),
        &sb,
    );
    wait_exited(&rt, &err);
    assert_eq!(rt.logs(&err, Some(10)).expect("stderr"), b"to-stderr\n");

    // The stream of an exited container: the chosen stream, tail, timestamps, since.
    let both = start(
        &rt,
        &sandbox_id,
        &container(
            &p,
            "both",
            // Apart in time: stdout and stderr are two pipes.
            "echo o1; usleep 100000; echo e1 >&2; usleep 100000; echo o2; usleep 100000; \
             echo e2 >&2",
            &sandbox_id,
        ),
        &sb,
    );
    wait_exited(&rt, &both);
    let read = |opts: &LogOptions| -> String {
        let mut s = String::new();
        rt.log_stream(&both, opts, Duration::from_millis(200))
            .expect("log stream")
            .read_to_string(&mut s)
            .expect("read the log");
        s
    };
    let all = LogOptions::default();
    assert_eq!(read(&all), "o1\ne1\no2\ne2\n");
    let stderr_tail = LogOptions {
        stdout: false,
        tail: Some(3),
        ..LogOptions::default()
    };
    assert_eq!(read(&stderr_tail), "e1\ne2\n");
    let stamped = read(&LogOptions {
        timestamps: true,
        tail: Some(1),
        ..LogOptions::default()
    });
    let (stamp, line) = stamped.split_once(' ').expect("a stamp");
    assert_eq!(line, "e2\n");
    assert!(
        stamp.len() == 30 && stamp.ends_with('Z'),
        "RFC3339NanoFixed: {stamped:?}"
    );
    let at = base::time::parse_rfc3339(stamp).expect("a time");
    let later = at + Duration::from_nanos(1);
    assert_eq!(
        read(&LogOptions {
            since: Some(later),
            ..LogOptions::default()
        }),
        ""
    );
    assert!(read(&LogOptions {
        since: Some(at),
        ..LogOptions::default()
    })
    .ends_with("e2\n"));

    // Followed across a rotation: the file renamed and reopened by the runtime (what
    // the container log manager does), every line read once, in order; a line of
    // 20 480 bytes, which containerd writes as partial pieces, read whole; the stream
    // ends when the container does.
    let script = "i=0; while [ $i -lt 50 ]; do i=$((i+1)); echo n$i; sleep 0.1; done; \
                  s=yyyyyyyyyy; for k in 1 2 3 4 5 6 7 8 9 10 11; do s=$s$s; done; \
                  echo $s; echo done";
    let talker = start(
        &rt,
        &sandbox_id,
        &container(&p, "follow", script, &sandbox_id),
        &sb,
    );
    let path = rt.inspect_container(&talker).expect("inspect").log_path;
    let follow = LogOptions {
        follow: true,
        ..LogOptions::default()
    };
    let mut stream = rt
        .log_stream(&talker, &follow, Duration::from_millis(200))
        .expect("follow");
    let mut got = String::new();
    let mut rotated = false;
    let mut buf = [0u8; 4096];
    let until = std::time::Instant::now() + T;
    loop {
        assert!(
            std::time::Instant::now() < until,
            "the log did not end: {got:?}"
        );
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.push_str(std::str::from_utf8(&buf[..n]).expect("utf-8")),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("reading the followed log: {e}"),
        }
        if !rotated && got.contains("n10\n") {
            std::fs::rename(&path, format!("{path}.20240101-000000")).expect("rename");
            rt.reopen_container_log(&talker)
                .expect("ReopenContainerLog");
            rotated = true;
        }
    }
    let expected: String = (1..=50)
        .map(|i| format!("n{i}\n"))
        .chain([format!("{}\n", "y".repeat(20_480)), "done\n".to_string()])
        .collect();
    assert!(got == expected, "followed log differs: {got:?}");
    let old = std::fs::read_to_string(format!("{path}.20240101-000000")).expect("rotated file");
    let new = std::fs::read_to_string(&path).expect("the reopened file");
    assert!(old.contains(" stdout F n10\n"), "{old}");
    assert!(
        new.contains(" stdout P yyyy") && new.ends_with(" stdout F done\n"),
        "{new}"
    );
    wait_exited(&rt, &talker);
    // Docker's json-file rotation has no reopen: a reopen of a missing container is
    // NotFound here.
    let missing = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    assert!(rt
        .reopen_container_log(missing)
        .is_err_and(|e| e.is_not_found()));
}

#[test]
fn missing_objects_are_not_found_and_unsupported_calls_say_so() {
    let c = Containerd::start();
    let (rt, _s) = runtime(&c);
    let missing = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let e = rt.inspect_container(missing).expect_err("missing");
    assert!(e.is_not_found(), "{e}");
    assert!(e.to_string().contains(missing), "names the container: {e}");
    assert!(rt.start_container(missing).is_err_and(|e| e.is_not_found()));
    assert!(rt.logs(missing, None).is_err_and(|e| e.is_not_found()));
    assert!(rt
        .exec(missing, &["true".into()], T)
        .is_err_and(|e| e.is_not_found()));
    // Gone is what stop, kill and remove want.
    rt.stop_container(missing, Duration::from_secs(1))
        .expect("stop a missing container");
    rt.kill_container(missing, "SIGKILL").expect("SIGKILL");
    rt.kill_container(missing, "SIGTERM").expect("SIGTERM");
    rt.remove_container(missing).expect("remove");
    assert_eq!(
        rt.inspect_image("docker.io/rkubelet/nothing:here")
            .expect("inspect a missing image"),
        None
    );

    let mut tar: &[u8] = b"";
    let e = rt
        .import_image("x:y", &[], (&mut tar, 0))
        .expect_err("CRI has no import");
    assert!(
        matches!(&e, RuntimeError::Api { status: 12, message, .. } if message.contains("no image import")),
        "{e}"
    );
    // containerd 1.6 has no GetContainerEvents (1.7's: below): an error the PLEG tells from a
    // broken stream (status 12, Unimplemented), after which it relists.
    let mut opened = false;
    let e = rt
        .watch_events(
            &EventFilter::default(),
            &mut |item| {
                opened |= item == runtime::EventItem::Opened;
                true
            },
            &|| false,
        )
        .expect_err("containerd 1.6 has no events");
    assert!(matches!(e, RuntimeError::Api { status: 12, .. }), "{e}");
    assert!(opened);
}

/// containerd 1.7's `GetContainerEvents` through `watch_events`: the stream opens, a
/// pod's sandbox and container come as created, started and stopped with their labels
/// (what the PLEG reads), another pod's are filtered out by label, and the watch ends
/// when asked.
#[test]
fn containerd_1_7_sends_container_events_with_labels_and_the_filter_holds() {
    use runtime::{ContainerEventType as Kind, EventItem, RuntimeEvent};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;

    let c = Containerd::start_1_7();
    let (rt, _s) = runtime(&c);
    let v = rt.version().expect("version");
    assert!(v.runtime_version.starts_with("1.7"), "{v:?}");
    let p = pod("watched");
    let other = pod("unwatched");
    let filter = EventFilter {
        labels: vec![format!("{}=watched-uid", labels::POD_UID)],
        ..EventFilter::default()
    };
    let stop = AtomicBool::new(false);
    let (tx, rx) = mpsc::channel::<EventItem>();
    std::thread::scope(|s| {
        let watch = s.spawn(|| {
            rt.watch_events(&filter, &mut |item| tx.send(item).is_ok(), &|| {
                stop.load(Ordering::SeqCst)
            })
        });
        assert_eq!(
            rx.recv_timeout(T).expect("the stream opens"),
            EventItem::Opened
        );
        // The unwatched pod first: nothing of it may come through.
        let osb = sandbox(&c, &other);
        let other_id = rt.run_pod_sandbox(&osb).expect("run the other sandbox");
        start(
            &rt,
            &other_id,
            &container(&other, "o", "exit 0", &other_id),
            &osb,
        );
        let sb = sandbox(&c, &p);
        let sandbox_id = rt.run_pod_sandbox(&sb).expect("run sandbox");
        let id = start(
            &rt,
            &sandbox_id,
            &container(&p, "app", "sleep 1; exit 2", &sandbox_id),
            &sb,
        );
        let mut seen: Vec<RuntimeEvent> = Vec::new();
        let want = [
            (sandbox_id.as_str(), Kind::Created),
            (sandbox_id.as_str(), Kind::Started),
            (id.as_str(), Kind::Created),
            (id.as_str(), Kind::Started),
            (id.as_str(), Kind::Stopped),
        ];
        let all_seen = |seen: &[RuntimeEvent]| {
            want.iter()
                .all(|(i, k)| seen.iter().any(|e| e.id == *i && e.kind == *k))
        };
        while !all_seen(&seen) {
            match rx.recv_timeout(T) {
                Ok(EventItem::Event(e)) => seen.push(e),
                Ok(EventItem::Opened) => panic!("opened twice"),
                Err(e) => panic!("events {want:?} did not all come ({e}); came: {seen:#?}"),
            }
        }
        for e in &seen {
            assert_eq!(
                e.labels.get(labels::POD_UID).map(String::as_str),
                Some("watched-uid"),
                "only the watched pod's events, with its labels: {e:?}"
            );
            let name = if e.id == sandbox_id { "POD" } else { "app" };
            assert_eq!(
                e.labels.get(labels::CONTAINER_NAME).map(String::as_str),
                Some(name),
                "{e:?}"
            );
        }
        assert_eq!(
            seen.iter()
                .find(|e| e.id == sandbox_id)
                .and_then(|e| e.labels.get(labels::DOCKER_TYPE))
                .map(String::as_str),
            Some(labels::TYPE_SANDBOX)
        );
        stop.store(true, Ordering::SeqCst);
        let ended = watch.join().expect("the watch thread");
        assert!(ended.is_ok(), "a watch asked to stop ends well: {ended:?}");
    });
}

#[test]
fn version_info_and_network_come_from_cri() {
    let c = Containerd::start();
    let (rt, _s) = runtime(&c);
    let v = rt.version().expect("version");
    assert_eq!(
        (v.runtime_name.as_str(), v.api_version.as_str()),
        ("containerd", "v1")
    );
    let info = rt.info().expect("info");
    assert_eq!(info.cgroup_driver, "cgroupfs", "{info:?}");
    // ImageFsInfo: the snapshotter's filesystem under containerd's root, holding the
    // imported images' layers (containerd sums them every 10 s: 0 until its first look).
    let fs = wait_for(
        Duration::from_secs(30),
        "ImageFsInfo's first figure",
        || {
            rt.image_fs_usage()
                .expect("ImageFsInfo")
                .filter(|fs| fs.used_bytes > 0)
        },
    );
    assert!(
        Path::new(&fs.mountpoint).starts_with(c.dir.join("root")),
        "{fs:?}"
    );
    assert!(
        fs.used_bytes > 1 << 20 && fs.inodes_used.is_some_and(|i| i > 100),
        "busybox and pause unpacked: {fs:?}"
    );
    assert_eq!(Path::new(&info.root_dir), c.dir.join("root"), "{info:?}");
    let expected_version = if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        "2"
    } else {
        "1"
    };
    assert_eq!(info.cgroup_version, expected_version);
    wait_for(Duration::from_secs(20), "NetworkReady", || {
        rt.network_status()
            .expect("network status")
            .ready
            .then_some(())
    });
    rt.update_runtime_config(&["10.251.0.0/24".into()])
        .expect("pod CIDR");
    rt.update_runtime_config(&[]).expect("no pod CIDR");
}

#[test]
fn the_cgroup_driver_follows_containerds_systemd_cgroup_option() {
    let c = Containerd::start_with(
        r#"  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = true"#,
    );
    let (rt, _s) = runtime(&c);
    assert_eq!(rt.info().expect("info").cgroup_driver, "systemd");
}

#[test]
fn an_absent_runtime_is_unavailable() {
    let (_shutdown, loops) = loops();
    let dir = std::env::temp_dir().join(format!("rkcri-absent-{}", std::process::id()));
    let rt = CriRuntime::new(
        &format!("unix://{}", dir.join("none.sock").display()),
        Duration::from_secs(5),
        &loops,
    )
    .expect("a unix endpoint");
    let e = rt.version().expect_err("nothing listens");
    assert!(e.is_unavailable(), "{e}");
    assert!(matches!(
        CriRuntime::new("tcp://127.0.0.1:1", T, &loops),
        Err(RuntimeError::BadEndpoint { .. })
    ));
}

/// A registry on 127.0.0.1 with basic auth, storage under `dir`; killed on drop.
struct Registry {
    host: String,
    child: Child,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn start_registry(dir: &Path, port: u16) -> Registry {
    for bin in ["/usr/bin/docker-registry", "/usr/bin/htpasswd"] {
        assert!(
            Path::new(bin).exists(),
            "{bin} is missing: apt-get install -y docker-registry apache2-utils"
        );
    }
    let out = run(Command::new("htpasswd").args(["-Bbn", "cri", "pw"]));
    assert!(out.status.success(), "htpasswd: {out:?}");
    std::fs::create_dir_all(dir.join("data")).expect("registry dir");
    std::fs::write(dir.join("htpasswd"), &out.stdout).expect("htpasswd file");
    let config: PathBuf = dir.join("config.yml");
    std::fs::write(
        &config,
        format!(
            "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\nauth:\n  htpasswd:\n    realm: r\n    path: {}\n",
            dir.join("data").display(),
            dir.join("htpasswd").display()
        ),
    )
    .expect("registry config");
    let child = Command::new("docker-registry")
        .arg("serve")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start docker-registry");
    let reg = Registry {
        host: format!("127.0.0.1:{port}"),
        child,
    };
    wait_for(Duration::from_secs(30), "the registry", || {
        std::net::TcpStream::connect(("127.0.0.1", port))
            .ok()
            .map(drop)
    });
    reg
}

#[test]
fn images_are_pulled_with_credentials_inspected_and_removed() {
    let port = free_port();
    let c = Containerd::start_with(&format!(
        r#"  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."127.0.0.1:{port}"]
    endpoint = ["http://127.0.0.1:{port}"]"#
    ));
    let registry = start_registry(&c.dir.join("registry"), port);
    let (rt, _s) = runtime(&c);
    // Into the registry through containerd's own client: tag, push, untag.
    let image = format!("{}/cri/busybox:pulled", registry.host);
    let local = format!("docker.io/{BUSYBOX}");
    c.ctr(&["images", "tag", &local, &image]);
    let push = run(Command::new("ctr").args([
        "-a",
        &c.sock.to_string_lossy(),
        "-n",
        "k8s.io",
        "images",
        "push",
        "--plain-http",
        "--user",
        "cri:pw",
        &image,
    ]));
    assert!(
        push.status.success(),
        "ctr push: {}",
        String::from_utf8_lossy(&push.stderr)
    );
    assert!(rt.inspect_image(&image).expect("inspect").is_some());
    rt.remove_image(&image).expect("remove image");
    assert_eq!(
        rt.inspect_image(&image).expect("inspect after remove"),
        None
    );
    rt.remove_image(&image)
        .expect("removing a missing image is no error");

    let auth = |password: &str| RegistryAuth {
        username: "cri".into(),
        password: password.into(),
        server_address: registry.host.clone(),
    };
    let e = rt
        .pull_image(&image, Some(&auth("wrong")))
        .expect_err("a wrong password");
    assert!(
        e.to_string().contains(&image) && e.to_string().contains("401 Unauthorized"),
        "{e}"
    );
    rt.pull_image(&image, None)
        .expect_err("no credentials for a registry that needs them");
    rt.pull_image(&image, Some(&auth("pw"))).expect("pull");
    let details = rt
        .inspect_image(&image)
        .expect("inspect")
        .expect("the pulled image");
    assert!(details.repo_tags.contains(&image), "{details:?}");
    assert!(
        details.id.starts_with("sha256:") && details.size > 0,
        "{details:?}"
    );
    assert_eq!(details.cmd, ["/bin/sh"]);
    assert!(rt
        .list_images()
        .expect("list")
        .iter()
        .any(|i| i.id == details.id && i.repo_tags.contains(&image)));
    rt.remove_image(&image).expect("remove the pulled image");
    assert_eq!(rt.inspect_image(&image).expect("inspect"), None);
}

#[test]
fn images_go_to_the_image_service_endpoint_when_it_is_another_socket() {
    let a = Containerd::start();
    let b = a.start_beside();
    // An image only the image service (b) holds.
    let only_b = "docker.io/rkubelet/only-on-b:1";
    b.ctr(&["images", "tag", &format!("docker.io/{BUSYBOX}"), only_b]);
    let (on_a, _sa) = runtime(&a);
    assert!(on_a.inspect_image(only_b).expect("inspect").is_none());
    let (_sb, loops) = loops();
    let split = CriRuntime::new(&a.endpoint(), T, &loops)
        .expect("a unix endpoint")
        .with_image_endpoint(&b.endpoint())
        .expect("a unix endpoint");
    // Images are b's; the runtime calls still reach a.
    assert!(split.inspect_image(only_b).expect("inspect").is_some());
    let listed: Vec<String> = split
        .list_images()
        .expect("list")
        .into_iter()
        .flat_map(|i| i.repo_tags)
        .collect();
    assert!(listed.iter().any(|t| t == only_b), "{listed:?}");
    assert_eq!(
        split.version().expect("version").api_version,
        "v1",
        "the runtime service is a's"
    );
    split.remove_image(only_b).expect("remove");
    assert!(!b.ctr(&["images", "ls", "-q"]).contains(only_b));
    // An image service that is down is named as such.
    let b_endpoint = b.endpoint();
    drop(b);
    let e = split.inspect_image(only_b).expect_err("b is gone");
    assert!(e.is_unavailable(), "{e}");
    assert!(
        e.to_string().contains(&b_endpoint),
        "names the image service: {e}"
    );
    assert!(
        CriRuntime::new(&a.endpoint(), T, &loops)
            .expect("a unix endpoint")
            .with_image_endpoint("tcp://127.0.0.1:1")
            .is_err(),
        "not a unix endpoint"
    );
}
