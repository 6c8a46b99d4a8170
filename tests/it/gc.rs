//! Container GC, image GC and container log files, each on Docker and on containerd:
//! a crash loop keeps one dead instance, `--maximum-dead-containers` holds across pods,
//! a deleted pod leaves no container and no log link, a chatty container's log is
//! rotated (by Docker; on CRI by the kubelet), and image GC frees the test's own images
//! least recently used first, never one in use nor the sandbox image (over a view of
//! the runtime that shows it only those, on containerd one of the test's own, so that
//! nothing else on the host is ever a candidate).

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

use crate::containerd::Containerd;
use crate::util::{label, pod_yaml, wait_for, Node, Rt, BUSYBOX, LONG, PAUSE, SLEEPER};

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

fn a_crash_loop_keeps_at_most_one_dead_instance_and_never_lowers_its_restart_count(rt: Rt) {
    let mut node = Node::on(rt, "gc-crash");
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

fn maximum_dead_containers_holds_across_pods(rt: Rt) {
    let mut node = Node::on(rt, "gc-max");
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

/// A container's log files: the one written and the rotated ones (Docker's
/// `-json.log.N`; on CRI the kubelet's `<n>.log.<time>[.gz]`).
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

/// CRI: the bytes written between two looks of the kubelet's log manager.
const CRI_CHUNK: u64 = 1_258_291;

fn a_chatty_container_keeps_five_rotated_files_its_links_resolve_and_go_with_the_pod(rt: Rt) {
    let mut node = Node::on(rt, "gc-logs");
    let line = "0123456789".repeat(10);
    let cmd = match node.rt {
        // 50 MB of 100-byte lines, then quiet: Docker rotates as it writes.
        Rt::Docker => format!("yes {line} | head -c 52428800; echo done-writing; {SLEEPER}"),
        // On a CRI runtime the kubelet rotates, when it looks (every
        // `containerLogMonitorInterval`, 3 s at least), as upstream's container log
        // manager: 1.2 MB every 4 s, so that looks find the file past its limit again
        // and again.
        Rt::Containerd => format!(
            "for i in 1 2 3 4 5 6 7 8 9 10 11 12; do yes {line} | head -c {CRI_CHUNK}; \
             sleep 4; done; echo done-writing; {SLEEPER}"
        ),
    };
    node.write_manifest("chatty.yaml", &pod_yaml("chatty", 0, &[("talk", &cmd)]));
    let config = node.dir.join("config.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         containerLogMonitorInterval: 3s\n",
    )
    .expect("config file");
    node.start(&[
        &format!("--config={}", config.display()),
        "--container-gc-period=2s",
        "--container-log-max-size=1Mi",
        "--container-log-max-files=5",
    ]);
    let c = wait_for("the container to run", LONG, || {
        node.containers()
            .into_iter()
            .find(|c| label(c, NAME) == "talk" && c.state == ContainerState::Running)
    });
    let details = node.runtime.inspect_container(&c.id).expect("inspect");
    assert!(!details.log_path.is_empty(), "a log file");
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
    wait_for("everything written", 2 * LONG, || {
        std::fs::read(&legacy)
            .ok()
            .filter(|b| b.windows(12).any(|w| w == b"done-writing"))
    });
    assert_eq!(
        std::fs::canonicalize(&link).expect("link resolves"),
        std::fs::canonicalize(&details.log_path).expect("log file")
    );
    // A look of the kubelet's may still be compressing a rotated file (into
    // `<file>.tmp`, renamed to `.gz` when done, as upstream): the files once it is not.
    let files = wait_for("no compression in progress", LONG, || {
        let files = log_files(&details.log_path);
        (!files
            .iter()
            .any(|(f, _)| f.to_string_lossy().ends_with(".tmp")))
        .then_some(files)
    });
    assert!(files.len() <= 5, "{files:?}");
    assert!(files.len() >= 2, "rotated: {files:?}");
    match rt {
        Rt::Docker => {
            // Docker rotates once a write has passed the limit: a file may hold one
            // record (at most 16 KiB of text, Docker's line cut) beyond it.
            for (f, size) in &files {
                assert!(
                    *size <= (1 << 20) + (32 << 10),
                    "{} is {size} bytes",
                    f.display()
                );
            }
        }
        Rt::Containerd => {
            // The kubelet rotates a CRI file when it looks, as upstream's: a file holds
            // whatever was written since the look before (no bound on a loaded
            // machine), but none is rotated short of the limit; rotated files are
            // compressed but the newest, the oldest removed: five at most (above).
            let gz: Vec<&(PathBuf, u64)> = files
                .iter()
                .filter(|(f, _)| f.to_string_lossy().ends_with(".gz"))
                .collect();
            assert!(gz.len() >= 2, "three rotations at least: {files:?}");
            let current = Path::new(&details.log_path);
            for (f, size) in files.iter().filter(|(f, _)| f != current) {
                if !f.to_string_lossy().ends_with(".gz") {
                    assert!(*size >= 1 << 20, "{} rotated at {size} bytes", f.display());
                }
            }
        }
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

/// The runtime as image GC sees it here: only the images whose tags start with the
/// test's prefix, and the pause image. Everything else passes through.
#[derive(Debug)]
struct OnlyTestImages {
    inner: Arc<dyn Runtime>,
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
    fn image_fs_usage(&self) -> Result<Option<runtime::ImageFsUsage>, RuntimeError> {
        self.inner.image_fs_usage()
    }

    fn list_images(&self) -> Result<Vec<ImageDetails>, RuntimeError> {
        Ok(self
            .inner
            .list_images()?
            .into_iter()
            .filter(|i| {
                // containerd names an imported image `docker.io/<name>`.
                let mine = |t: &String| {
                    let t = t.strip_prefix("docker.io/").unwrap_or(t);
                    t.starts_with(&self.prefix) || t == PAUSE
                };
                i.repo_tags.iter().all(mine) && !i.repo_tags.is_empty()
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

/// Makes a tiny image of its own in Docker (a distinct ID over busybox's layers):
/// `docker commit` of a created container with a label, no network needed.
pub(crate) fn tiny_image(docker: &Docker, tag: &str) {
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

/// Copies Docker's images `tags` into a containerd (`docker save | ctr images
/// import`), where they are named `docker.io/<tag>`.
pub(crate) fn import_into(c: &Containerd, tags: &[String]) {
    let tar = c.dir.join("gc-images.tar");
    let out = std::process::Command::new("docker")
        .arg("save")
        .arg("-o")
        .arg(&tar)
        .args(tags)
        .output()
        .expect("docker save");
    assert!(out.status.success(), "docker save: {out:?}");
    let sock = c.sock.to_string_lossy().into_owned();
    let out = std::process::Command::new("ctr")
        .args(["-a", &sock, "-n", "k8s.io", "images", "import"])
        .arg(&tar)
        .output()
        .expect("ctr images import");
    assert!(out.status.success(), "ctr images import: {out:?}");
    let _ = std::fs::remove_file(&tar);
}

/// Removes the test's Docker images and containers, even after a failed assertion
/// (a test containerd goes with its own `Drop`).
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

/// Where image GC runs in [`image_gc_frees_the_least_recently_used_first_and_never_an_image_in_use_or_pause`]:
/// Docker, or a containerd of the test's own (image GC acts on the whole runtime:
/// the shared one's images must never be candidates), with a sandbox its containers
/// are made in (CRI makes no container outside one).
struct GcWorld {
    runtime: Arc<dyn Runtime>,
    sandbox: Option<(String, PodSandboxConfig)>,
    /// The test's containerd, kept alive to the end.
    containerd: Option<(Containerd, base::loops::Shutdown)>,
}

impl GcWorld {
    fn on(rt: Rt) -> GcWorld {
        match rt {
            Rt::Docker => GcWorld {
                runtime: Arc::new(
                    Docker::connect(&format!("unix://{}", crate::util::DOCKER_SOCK))
                        .expect("docker"),
                ),
                sandbox: None,
                containerd: None,
            },
            Rt::Containerd => {
                let c = Containerd::start();
                let (shutdown, loops) = crate::containerd::loops();
                let cri = rkubelet_cri::runtime::CriRuntime::new(&c.endpoint(), LONG, &loops)
                    .expect("a unix endpoint");
                let config = PodSandboxConfig {
                    metadata: runtime::config::PodSandboxMetadata {
                        name: "gc".into(),
                        uid: "gc-uid".into(),
                        namespace: "default".into(),
                        attempt: 0,
                    },
                    hostname: "gc".into(),
                    log_directory: c.dir.join("pods/gc").to_string_lossy().into_owned(),
                    ..Default::default()
                };
                let id = cri.run_pod_sandbox(&config).expect("run sandbox");
                GcWorld {
                    runtime: Arc::new(cri),
                    sandbox: Some((id, config)),
                    containerd: Some((c, shutdown)),
                }
            }
        }
    }

    /// Creates (never starts) a container of `image`; its ID.
    fn create(&self, name: &str, image: &str) -> String {
        let (sandbox, config) = match &self.sandbox {
            Some((id, c)) => (id.as_str(), c.clone()),
            None => ("", PodSandboxConfig::default()),
        };
        let mut c = ContainerConfig::named(name, image);
        if self.sandbox.is_some() {
            c.log_path = format!("{name}/0.log");
        }
        self.runtime
            .create_container(sandbox, &c, &config)
            .expect("create")
    }

    fn present(&self, image: &str) -> bool {
        self.runtime
            .inspect_image(image)
            .expect("inspect")
            .is_some()
    }
}

fn image_gc_frees_the_least_recently_used_first_and_never_an_image_in_use_or_pause(rt: Rt) {
    let docker = crate::util::docker();
    // Both runtimes' runs share this process: a prefix of each's own.
    let prefix = format!("rkubelet-gc-{}-{rt:?}", std::process::id()).to_lowercase();
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
    let world = GcWorld::on(rt);
    // The sandbox image that must stay. On containerd the kubelet's flag names
    // another image than containerd's own `sandbox_image`: it stays all the same
    // (its sandbox lists no image, so only that pin keeps it).
    let pause_flag = match rt {
        Rt::Docker => PAUSE,
        Rt::Containerd => "rkubelet/not-the-sandbox-image:1",
    };
    if let Some((c, _)) = &world.containerd {
        import_into(c, &cleanup.tags);
        // The images live in the test's containerd only.
        for t in std::mem::take(&mut cleanup.tags) {
            let _ = std::process::Command::new("docker")
                .args(["rmi", &t])
                .output();
        }
    }
    let runtime: Arc<dyn Runtime> = Arc::new(OnlyTestImages {
        inner: world.runtime.clone(),
        prefix: prefix.clone(),
    });
    let gc = ImageGc::new(
        runtime.clone(),
        ImagePolicy {
            min_age: Duration::ZERO,
            ..ImagePolicy::default()
        },
        pause_flag,
        "gc-images",
    );
    // A container that exists (never started) holds "held" for the whole test.
    let held = world.create(&format!("{prefix}-held"), &tag("held"));
    if rt == Rt::Docker {
        cleanup.containers.push(held);
    }
    // Detections (a free of 0 bytes only looks): first everything is found, then
    // "early" is used, then "late".
    gc.free_space(0).expect("detect");
    for n in ["early", "late"] {
        std::thread::sleep(Duration::from_millis(1100));
        let id = world.create(&format!("{prefix}-{n}"), &tag(n));
        gc.free_space(0).expect("detect");
        world.runtime.remove_container(&id).expect("remove");
    }
    let present = |n: &str| world.present(&tag(n));
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
    assert!(world.present(PAUSE));
    assert!(world.present(BUSYBOX));
}

crate::on_both_runtimes!(
    a_crash_loop_keeps_at_most_one_dead_instance_and_never_lowers_its_restart_count,
    maximum_dead_containers_holds_across_pods,
    a_chatty_container_keeps_five_rotated_files_its_links_resolve_and_go_with_the_pod,
    image_gc_frees_the_least_recently_used_first_and_never_an_image_in_use_or_pause,
);
