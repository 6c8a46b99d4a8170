//! Container GC, image GC and container log files against the real Docker engine: a
//! crash loop keeps one dead instance, `--maximum-dead-containers` holds across pods, a
//! deleted pod leaves no container and no log link, Docker rotates a chatty
//! container's log, and image GC frees the test's own images least recently used
//! first (over a view of the engine that shows it only those, so that nothing else on
//! the host is ever a candidate).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use docker::Docker;
use rkubelet::gc::{ImageGc, ImagePolicy};
use runtime::config::{ContainerConfig, PodSandboxConfig};
use runtime::{
    ContainerDetails, ContainerState, ContainerSummary, ExecResult, ExecSession, ImageDetails,
    LogOptions, LogStream, ProcessIo, RegistryAuth, Runtime, RuntimeError, RuntimeEvent,
    RuntimeInfo, RuntimeVersion, StreamOptions, StreamRequest, TermSize,
};

use crate::util::{label, pod_yaml, wait_for, Node, BUSYBOX, LONG, PAUSE, SLEEPER};

const UID: &str = "io.kubernetes.pod.uid";
const NAME: &str = "io.kubernetes.container.name";
const RESTARTS: &str = "annotation.io.kubernetes.container.restartCount";

/// The app containers (no sandboxes) of this node that are not running.
fn dead(node: &Node) -> Vec<ContainerSummary> {
    node.containers()
        .into_iter()
        .filter(|c| label(c, NAME) != "POD" && c.state != ContainerState::Running)
        .collect()
}

/// The highest restart count among the instances of container `name`.
fn max_restarts(node: &Node, name: &str) -> Option<u32> {
    node.containers()
        .iter()
        .filter(|c| label(c, NAME) == name)
        .filter_map(|c| label(c, RESTARTS).parse().ok())
        .max()
}

#[test]
fn a_crash_loop_keeps_at_most_one_dead_instance_and_never_lowers_its_restart_count() {
    let mut node = Node::new("gc-crash");
    node.write_manifest("crash.yaml", &pod_yaml("crash", 0, &[("c", "exit 1")]));
    node.start(&["--container-gc-period=5s"]);
    let began = Instant::now();
    let mut last = 0;
    let mut over = None::<Instant>;
    // About three minutes of restarts (back-off 10, 20, 40, 80 s).
    while began.elapsed() < Duration::from_secs(170) {
        let n = dead(&node).len();
        // A second dead instance lives only between a death and its pruning (the
        // PLEG's next relist, then the GC loop).
        assert!(n <= 2, "{n} dead instances: {:?}", dead(&node));
        if n > 1 {
            let since = *over.get_or_insert_with(Instant::now);
            assert!(
                since.elapsed() < Duration::from_secs(20),
                "two dead instances for 20 s"
            );
        } else {
            over = None;
        }
        if let Some(r) = max_restarts(&node, "c") {
            assert!(r >= last, "restart count went from {last} to {r}");
            last = r;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    assert!(last >= 3, "only {last} restarts in three minutes");
    wait_for("one dead instance at most", LONG, || {
        (dead(&node).len() <= 1).then_some(())
    });
    // The sandbox of the pod is the only one (no dead sandboxes piled up).
    let sandboxes = node
        .containers()
        .into_iter()
        .filter(|c| label(c, NAME) == "POD")
        .count();
    assert_eq!(sandboxes, 1);
}

/// A container that fails its first run and then runs: one dead instance, one
/// running, per pod (its marker survives the restart in an emptyDir).
fn once_failing_pod(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  \
         terminationGracePeriodSeconds: 0\n  volumes:\n  - name: m\n    emptyDir: {{}}\n  \
         containers:\n  - name: c\n    image: {BUSYBOX}\n    volumeMounts:\n    \
         - {{name: m, mountPath: /m}}\n    command: [\"sh\", \"-c\", \
         \"if [ -f /m/ran ]; then {SLEEPER}; else touch /m/ran; exit 1; fi\"]\n"
    )
}

#[test]
fn maximum_dead_containers_holds_across_pods() {
    let mut node = Node::new("gc-max");
    for p in ["a", "b", "c"] {
        node.write_manifest(&format!("{p}.yaml"), &once_failing_pod(p));
    }
    node.start(&["--container-gc-period=2s", "--maximum-dead-containers=1"]);
    // Each pod's container restarts once and then runs.
    wait_for("three containers running after one restart", LONG, || {
        let running = node
            .containers()
            .into_iter()
            .filter(|c| label(c, NAME) == "c" && c.state == ContainerState::Running)
            .filter(|c| label(c, RESTARTS) == "1")
            .count();
        (running == 3).then_some(())
    });
    // Three dead instances, one allowed on the node: the oldest two go. On a timeout
    // the message holds what was still there and the kubelet's log, to tell a slow
    // engine from a plan that kept too many.
    let until = Instant::now() + LONG;
    loop {
        let left = dead(&node);
        if left.len() == 1 {
            break;
        }
        if Instant::now() >= until {
            let seen: Vec<String> = left
                .iter()
                .map(|c| {
                    format!(
                        "{} {} restarts={} {:?} created={:?}",
                        label(c, "io.kubernetes.pod.name"),
                        label(c, NAME),
                        label(c, RESTARTS),
                        c.state,
                        c.created
                    )
                })
                .collect();
            let log = node.log();
            let tail: Vec<&str> = log.lines().rev().take(200).collect();
            panic!(
                "timed out after {LONG:?} waiting for one dead container on the node; \
                 dead: {seen:#?}\nthe kubelet log's last 200 lines:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for p in ["a", "b", "c"] {
        let uid = node
            .containers()
            .into_iter()
            .find(|c| label(c, "io.kubernetes.pod.name").starts_with(&format!("{p}-")))
            .map(|c| label(&c, UID).to_string())
            .expect("pod's containers");
        let running = node
            .containers()
            .into_iter()
            .filter(|c| label(c, UID) == uid && c.state == ContainerState::Running)
            .count();
        assert_eq!(running, 2, "pod {p}: sandbox and container still run");
    }
}

/// Docker's log files of a container: the one written and the rotated ones.
fn log_files(log_path: &str) -> Vec<(PathBuf, u64)> {
    let path = Path::new(log_path);
    let dir = path.parent().expect("log dir");
    let base = path
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    let mut v: Vec<(PathBuf, u64)> = std::fs::read_dir(dir)
        .expect("read log dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&base))
        .map(|e| (e.path(), e.metadata().map(|m| m.len()).unwrap_or(0)))
        .collect();
    base::sort::sort(&mut v);
    v
}

#[test]
fn a_chatty_container_keeps_five_rotated_files_its_links_resolve_and_go_with_the_pod() {
    let mut node = Node::new("gc-logs");
    // 50 MB of 100-byte lines, then quiet.
    let line = "0123456789".repeat(10);
    let cmd = format!("yes {line} | head -c 52428800; echo done-writing; {SLEEPER}");
    node.write_manifest("chatty.yaml", &pod_yaml("chatty", 0, &[("talk", &cmd)]));
    node.start(&[
        "--container-gc-period=2s",
        "--container-log-max-size=1Mi",
        "--container-log-max-files=5",
    ]);
    let c = wait_for("the container to run", LONG, || {
        node.containers()
            .into_iter()
            .find(|c| label(c, NAME) == "talk" && c.state == ContainerState::Running)
    });
    let details = node.docker.inspect_container(&c.id).expect("inspect");
    assert!(!details.log_path.is_empty(), "json-file log");
    let uid = label(&c, UID).to_string();
    let pod_name = label(&c, "io.kubernetes.pod.name").to_string();
    let pod_dir = node
        .dir
        .join("pod-logs")
        .join(format!("default_{pod_name}_{uid}"));
    let link = pod_dir.join("talk").join("0.log");
    let legacy = node
        .dir
        .join("container-logs")
        .join(format!("{pod_name}_default_talk-{}.log", c.id));
    // Written through: the end of the log shows through both links.
    wait_for("everything written", LONG, || {
        std::fs::read(&legacy)
            .ok()
            .filter(|b| b.windows(12).any(|w| w == b"done-writing"))
    });
    assert_eq!(
        std::fs::canonicalize(&link).expect("link resolves"),
        std::fs::canonicalize(&details.log_path).expect("log file")
    );
    let files = log_files(&details.log_path);
    assert!(files.len() <= 5, "{files:?}");
    assert!(files.len() >= 2, "rotated: {files:?}");
    for (f, size) in &files {
        // Docker rotates once a write has passed the limit: a file may hold one
        // record (at most 16 KiB of text, Docker's line cut) beyond it.
        assert!(
            *size <= (1 << 20) + (32 << 10),
            "{} is {size} bytes",
            f.display()
        );
    }

    // The pod goes: its containers, its links and its log directory with it.
    std::fs::remove_file(node.manifests().join("chatty.yaml")).expect("remove manifest");
    wait_for("the pod's containers removed", LONG, || {
        node.containers()
            .iter()
            .all(|c| label(c, UID) != uid)
            .then_some(())
    });
    wait_for("the links and the pod's log directory gone", LONG, || {
        (std::fs::symlink_metadata(&legacy).is_err() && !pod_dir.exists()).then_some(())
    });
    assert!(std::fs::symlink_metadata(&link).is_err());
}

/// The engine as image GC sees it here: only the images whose tags start with the
/// test's prefix, and the pause image. Everything else passes through.
#[derive(Debug)]
struct OnlyTestImages {
    inner: Docker,
    prefix: String,
}

impl Runtime for OnlyTestImages {
    fn version(&self) -> Result<RuntimeVersion, RuntimeError> {
        self.inner.version()
    }
    fn info(&self) -> Result<RuntimeInfo, RuntimeError> {
        self.inner.info()
    }
    fn network_status(&self) -> Result<runtime::NetworkStatus, RuntimeError> {
        self.inner.network_status()
    }
    fn update_runtime_config(&self, pod_cidrs: &[String]) -> Result<(), RuntimeError> {
        self.inner.update_runtime_config(pod_cidrs)
    }
    fn list_containers(&self, f: &[String]) -> Result<Vec<ContainerSummary>, RuntimeError> {
        self.inner.list_containers(f)
    }
    fn inspect_container(&self, id: &str) -> Result<ContainerDetails, RuntimeError> {
        self.inner.inspect_container(id)
    }
    fn run_pod_sandbox(&self, c: &PodSandboxConfig) -> Result<String, RuntimeError> {
        self.inner.run_pod_sandbox(c)
    }
    fn create_container(
        &self,
        sandbox: &str,
        c: &ContainerConfig,
        s: &PodSandboxConfig,
    ) -> Result<String, RuntimeError> {
        self.inner.create_container(sandbox, c, s)
    }
    fn start_container(&self, id: &str) -> Result<(), RuntimeError> {
        self.inner.start_container(id)
    }
    fn stop_container(&self, id: &str, grace: Duration) -> Result<(), RuntimeError> {
        self.inner.stop_container(id, grace)
    }
    fn kill_container(&self, id: &str, signal: &str) -> Result<(), RuntimeError> {
        self.inner.kill_container(id, signal)
    }
    fn remove_container(&self, id: &str) -> Result<(), RuntimeError> {
        self.inner.remove_container(id)
    }
    fn inspect_image(&self, image: &str) -> Result<Option<ImageDetails>, RuntimeError> {
        self.inner.inspect_image(image)
    }
    fn pull_image(&self, image: &str, auth: Option<&RegistryAuth>) -> Result<(), RuntimeError> {
        self.inner.pull_image(image, auth)
    }
    fn import_image(
        &self,
        image: &str,
        changes: &[String],
        tar: (&mut dyn std::io::Read, u64),
    ) -> Result<(), RuntimeError> {
        self.inner.import_image(image, changes, tar)
    }
    fn load_image(&self, tar: (&mut dyn std::io::Read, u64)) -> Result<Vec<String>, RuntimeError> {
        self.inner.load_image(tar)
    }
    fn list_images(&self) -> Result<Vec<ImageDetails>, RuntimeError> {
        Ok(self
            .inner
            .list_images()?
            .into_iter()
            .filter(|i| {
                i.repo_tags
                    .iter()
                    .all(|t| t.starts_with(&self.prefix) || t == PAUSE)
                    && !i.repo_tags.is_empty()
            })
            .collect())
    }
    fn remove_image(&self, image: &str) -> Result<(), RuntimeError> {
        self.inner.remove_image(image)
    }
    fn logs(&self, id: &str, tail: Option<u64>) -> Result<Vec<u8>, RuntimeError> {
        self.inner.logs(id, tail)
    }
    fn log_stream(
        &self,
        id: &str,
        o: &LogOptions,
        wake: Duration,
    ) -> Result<LogStream, RuntimeError> {
        self.inner.log_stream(id, o, wake)
    }
    fn reopen_container_log(&self, id: &str) -> Result<(), RuntimeError> {
        self.inner.reopen_container_log(id)
    }
    fn exec(&self, id: &str, cmd: &[String], t: Duration) -> Result<ExecResult, RuntimeError> {
        self.inner.exec(id, cmd, t)
    }
    fn exec_interactive(
        &self,
        id: &str,
        cmd: &[String],
        o: StreamOptions,
    ) -> Result<ExecSession, RuntimeError> {
        self.inner.exec_interactive(id, cmd, o)
    }
    fn exec_status(&self, exec_id: &str) -> Result<Option<i64>, RuntimeError> {
        self.inner.exec_status(exec_id)
    }
    fn resize_exec(&self, exec_id: &str, s: TermSize) -> Result<(), RuntimeError> {
        self.inner.resize_exec(exec_id, s)
    }
    fn attach(&self, id: &str, o: StreamOptions) -> Result<Box<dyn ProcessIo>, RuntimeError> {
        self.inner.attach(id, o)
    }
    fn resize_container(&self, id: &str, s: TermSize) -> Result<(), RuntimeError> {
        self.inner.resize_container(id, s)
    }
    fn stream_url(&self, r: &StreamRequest) -> Result<Option<String>, RuntimeError> {
        self.inner.stream_url(r)
    }
    fn events(
        &self,
        f: &[String],
        on_event: &mut dyn FnMut(RuntimeEvent) -> bool,
        should_stop: &dyn Fn() -> bool,
    ) -> Result<(), RuntimeError> {
        self.inner.events(f, on_event, should_stop)
    }
    fn watch_events(
        &self,
        f: &runtime::EventFilter,
        on_item: &mut dyn FnMut(runtime::EventItem) -> bool,
        should_stop: &dyn Fn() -> bool,
    ) -> Result<(), RuntimeError> {
        self.inner.watch_events(f, on_item, should_stop)
    }
}

/// Makes a tiny image of its own (a distinct ID over busybox's layers): `docker
/// commit` of a created container with a label, no network needed.
fn tiny_image(docker: &Docker, tag: &str) {
    let name = tag.replace([':', '/'], "-");
    let out = std::process::Command::new("docker")
        .args(["create", "--name", &name, BUSYBOX, "true"])
        .output()
        .expect("docker create");
    assert!(out.status.success(), "{out:?}");
    let out = std::process::Command::new("docker")
        .args(["commit", "--change", &format!("LABEL gc={tag}"), &name, tag])
        .output()
        .expect("docker commit");
    assert!(out.status.success(), "{out:?}");
    let _ = std::process::Command::new("docker")
        .args(["rm", "-f", &name])
        .output();
    assert!(docker.inspect_image(tag).expect("inspect").is_some());
}

/// Removes the test's images and containers, even after a failed assertion.
struct Cleanup {
    tags: Vec<String>,
    containers: Vec<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for c in &self.containers {
            let _ = std::process::Command::new("docker")
                .args(["rm", "-f", c])
                .output();
        }
        for t in &self.tags {
            let _ = std::process::Command::new("docker")
                .args(["rmi", t])
                .output();
        }
    }
}

#[test]
fn image_gc_frees_the_least_recently_used_first_and_never_an_image_in_use_or_pause() {
    let docker = crate::util::docker();
    let prefix = format!("rkubelet-gc-{}", std::process::id());
    let tag = |n: &str| format!("{prefix}/{n}:1");
    let mut cleanup = Cleanup {
        tags: ["never", "early", "late", "held"]
            .iter()
            .map(|n| tag(n))
            .collect(),
        containers: Vec::new(),
    };
    for t in &cleanup.tags {
        tiny_image(&docker, t);
    }
    let runtime: Arc<dyn Runtime> = Arc::new(OnlyTestImages {
        inner: Docker::connect(&format!("unix://{}", crate::util::DOCKER_SOCK)).expect("docker"),
        prefix: prefix.clone(),
    });
    let gc = ImageGc::new(
        runtime.clone(),
        ImagePolicy {
            min_age: Duration::ZERO,
            ..ImagePolicy::default()
        },
        PAUSE,
        "gc-images",
    );
    // A container that exists (never started) holds "held" for the whole test.
    let held = docker
        .create_container(
            "",
            &ContainerConfig {
                labels: BTreeMap::new(),
                ..ContainerConfig::named(format!("{prefix}-held"), tag("held"))
            },
            &PodSandboxConfig::default(),
        )
        .expect("create");
    cleanup.containers.push(held);
    // Detections (a free of 0 bytes only looks): first everything is found, then
    // "early" is used, then "late".
    gc.free_space(0).expect("detect");
    for n in ["early", "late"] {
        std::thread::sleep(Duration::from_millis(1100));
        let id = docker
            .create_container(
                "",
                &ContainerConfig {
                    ..ContainerConfig::named(format!("{prefix}-{n}"), tag(n))
                },
                &PodSandboxConfig::default(),
            )
            .expect("create");
        gc.free_space(0).expect("detect");
        docker.remove_container(&id).expect("remove");
    }
    let present = |n: &str| docker.inspect_image(&tag(n)).expect("inspect").is_some();
    // One byte: the never-used image goes first.
    gc.free_space(1).expect("free");
    assert!(!present("never") && present("early") && present("late"));
    gc.free_space(1).expect("free");
    assert!(
        !present("early") && present("late"),
        "early was used before late"
    );
    gc.free_space(1).expect("free");
    assert!(!present("late"));
    // Nothing left but the image in use and the pause image: a shortfall, no removal.
    let e = gc.free_space(1).expect_err("nothing eligible");
    assert!(e.to_string().contains("only found 0 bytes"), "{e}");
    assert!(present("held"));
    assert!(docker.inspect_image(PAUSE).expect("inspect").is_some());
    assert!(docker.inspect_image(BUSYBOX).expect("inspect").is_some());
}
