//! The Docker runtime against the real engine at `unix:///var/run/docker.sock`.
//!
//! Every test labels what it creates with `rkubelet.test=<unique id>` and a
//! [`Fixture`] removes everything carrying that label when the test ends, passed or
//! failed. Tests run in parallel on a loaded two-core machine, so every wait is a poll
//! against a generous deadline. The images come from `hack/build-images.sh`, which the
//! first test runs if they are missing.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use docker::Docker;
use runtime::config::{ContainerConfig, PodSandboxConfig, PodSandboxMetadata};
use runtime::{ContainerEventType, ContainerState, Runtime, RuntimeError, RuntimeEvent};

const ENDPOINT: &str = "unix:///var/run/docker.sock";
const BUSYBOX: &str = "rkubelet/busybox:1.35";
const PAUSE: &str = "rkubelet/pause:3.10";
const TEST_LABEL: &str = "rkubelet.test";

/// Generous: a loaded two-core machine starts about eight containers a second in all.
const DEADLINE: Duration = Duration::from_secs(60);

/// Polls `f` until it returns Some, failing the test after `timeout`.
fn poll<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "gave up after {timeout:?} waiting for {what}"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// A connected runtime, or a failure that says how to start Docker.
fn docker() -> Docker {
    let docker = Docker::connect(ENDPOINT).expect("the endpoint is valid");
    if let Err(e) = docker.version() {
        panic!(
            "cannot reach the Docker engine at {ENDPOINT}: {e}\n\
             start it with `systemctl start docker`, or without systemd: \
             `setsid dockerd >/var/log/dockerd.log 2>&1 &` \
             (install it with `apt-get install -y docker.io`)"
        );
    }
    docker
}

/// Builds the test images once per test run if they are missing.
fn ensure_images(docker: &Docker) {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let present = |image| matches!(docker.inspect_image(image), Ok(Some(_)));
        if present(BUSYBOX) && present(PAUSE) {
            return;
        }
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/hack/build-images.sh");
        let status = Command::new("bash")
            .arg(script)
            .status()
            .expect("run build-images.sh");
        assert!(status.success(), "{script} failed: {status}");
    });
}

/// One test's containers: unique names and label, removed on drop.
struct Fixture {
    docker: Arc<Docker>,
    uid: String,
}

impl Fixture {
    fn new(test: &str) -> Fixture {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let docker = docker();
        ensure_images(&docker);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let uid = format!(
            "{test}-{}-{}-{nanos:x}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        Fixture {
            docker: Arc::new(docker),
            uid,
        }
    }

    /// The label filter matching exactly this test's containers.
    fn label(&self) -> String {
        format!("{TEST_LABEL}={}", self.uid)
    }

    fn name(&self, role: &str) -> String {
        format!("rkt_{}_{role}", self.uid)
    }

    fn config(&self, role: &str, image: &str, cmd: &[&str]) -> ContainerConfig {
        let mut labels = BTreeMap::new();
        labels.insert(TEST_LABEL.to_string(), self.uid.clone());
        labels.insert("rkubelet.test.role".to_string(), role.to_string());
        ContainerConfig {
            args: (!cmd.is_empty()).then(|| cmd.iter().map(|s| s.to_string()).collect()),
            labels,
            ..ContainerConfig::named(self.name(role), image)
        }
    }

    /// Creates a container outside any pod.
    fn create(&self, config: &ContainerConfig) -> String {
        self.docker
            .create_container("", config, &PodSandboxConfig::default())
            .unwrap_or_else(|e| panic!("create {}: {e}", config.metadata.name))
    }

    fn run(&self, config: &ContainerConfig) -> String {
        let id = self.create(config);
        self.docker
            .start_container(&id)
            .unwrap_or_else(|e| panic!("start {}: {e}", config.metadata.name));
        id
    }

    fn wait_exited(&self, id: &str) -> runtime::ContainerDetails {
        poll("the container to exit", DEADLINE, || {
            let d = self.docker.inspect_container(id).expect("inspect");
            (d.state == ContainerState::Exited).then_some(d)
        })
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        // Runs on failure too (unwinding), so a failed test leaves nothing behind.
        match self.docker.list_containers(&[self.label()]) {
            Ok(list) => {
                for c in list {
                    if let Err(e) = self.docker.remove_container(&c.id) {
                        eprintln!("cleanup: remove {}: {e}", c.name);
                    }
                }
            }
            Err(e) => eprintln!("cleanup: list {}: {e}", self.label()),
        }
    }
}

fn netns(pid: u32, ns: &str) -> String {
    std::fs::read_link(format!("/proc/{pid}/ns/{ns}"))
        .unwrap_or_else(|e| panic!("readlink /proc/{pid}/ns/{ns}: {e}"))
        .to_string_lossy()
        .into_owned()
}

#[test]
fn version_negotiates_an_api_we_speak() {
    let v = docker().version().expect("version");
    assert_eq!(v.runtime_name, "docker");
    assert!(!v.runtime_version.is_empty());
    let (major, minor) = v.api_version.split_once('.').expect("major.minor");
    let minor: u32 = minor.parse().expect("numeric minor");
    assert_eq!(major, "1");
    assert!((41..=44).contains(&minor), "negotiated {}", v.api_version);
}

#[test]
fn sandbox_and_app_container_share_network_and_ipc() {
    let f = Fixture::new("netns");
    let docker = docker().with_sandbox_image(PAUSE);
    let sandbox = PodSandboxConfig {
        metadata: PodSandboxMetadata {
            name: "pod".into(),
            uid: f.uid.clone(),
            namespace: "test".into(),
            attempt: 0,
        },
        hostname: "pod-host".into(),
        labels: [(TEST_LABEL.to_string(), f.uid.clone())].into(),
        ..Default::default()
    };
    let sandbox_id = docker.run_pod_sandbox(&sandbox).expect("run sandbox");

    let app = f.config("app", BUSYBOX, &["sleep", "3600"]);
    let app_id = docker
        .create_container(&sandbox_id, &app, &sandbox)
        .expect("create in the sandbox");
    docker.start_container(&app_id).expect("start");

    let s = f
        .docker
        .inspect_container(&sandbox_id)
        .expect("inspect sandbox");
    let a = f.docker.inspect_container(&app_id).expect("inspect app");
    assert_eq!(s.state, ContainerState::Running);
    assert_eq!(a.state, ContainerState::Running);
    assert!(s.pid > 0 && a.pid > 0);
    assert_ne!(s.pid, a.pid);
    assert_eq!(netns(s.pid, "net"), netns(a.pid, "net"));
    assert_eq!(netns(s.pid, "ipc"), netns(a.pid, "ipc"));
    assert_ne!(netns(a.pid, "net"), netns(std::process::id(), "net"));
    assert!(
        s.ip_address.starts_with("172.") || !s.ip_address.is_empty(),
        "{s:?}"
    );
    assert_eq!(
        a.ip_address, "",
        "a joined container has no address of its own"
    );
    assert!(!s.host_network && !a.host_network);
    let settings = docker.inspect_settings(&app_id).expect("inspect");
    assert_eq!(settings.network_mode, format!("container:{sandbox_id}"));
    assert_eq!(settings.ipc_mode, format!("container:{sandbox_id}"));
    assert_eq!(
        docker
            .inspect_settings(&sandbox_id)
            .expect("inspect")
            .hostname,
        "pod-host"
    );
    assert_eq!(s.name, format!("k8s_POD_pod_test_{}_0", f.uid));
    assert_eq!(
        a.name,
        format!("k8s_{}_pod_test_{}_0", f.name("app"), f.uid)
    );
    assert_eq!(a.image, BUSYBOX);
    assert!(a.image_id.starts_with("sha256:"), "{}", a.image_id);
    assert_eq!(a.labels.get(TEST_LABEL), Some(&f.uid));
}

#[test]
fn list_returns_exactly_the_labelled_containers() {
    let f = Fixture::new("list");
    let other = Fixture::new("list-other");
    let mut mine = Vec::new();
    for i in 0..3 {
        mine.push(f.create(&f.config(&format!("c{i}"), BUSYBOX, &["true"])));
    }
    let theirs = other.create(&other.config("x", BUSYBOX, &["true"]));
    base::sort::sort(&mut mine);

    let mut listed: Vec<String> = f
        .docker
        .list_containers(&[f.label()])
        .expect("list")
        .into_iter()
        .map(|c| {
            assert_eq!(c.state, ContainerState::Created);
            assert!(c.name.starts_with("rkt_"), "{}", c.name);
            assert_eq!(c.image, BUSYBOX);
            c.id
        })
        .collect();
    base::sort::sort(&mut listed);
    assert_eq!(listed, mine);
    assert!(!listed.contains(&theirs));

    // Two filters must both match; a key alone matches any value.
    let one = f
        .docker
        .list_containers(&[f.label(), "rkubelet.test.role=c1".to_string()])
        .expect("list by two labels");
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].name, f.name("c1"));
    let all = f
        .docker
        .list_containers(&[TEST_LABEL.to_string()])
        .expect("list by key");
    assert!(all.iter().any(|c| c.id == theirs));
}

#[test]
fn inspect_reports_exit_code_and_times() {
    let f = Fixture::new("inspect");
    let before = SystemTime::now() - Duration::from_secs(5);

    let created = f.create(&f.config("created", BUSYBOX, &["true"]));
    let c = f
        .docker
        .inspect_container(&created)
        .expect("inspect created");
    assert_eq!(c.state, ContainerState::Created);
    assert_eq!((c.started_at, c.finished_at), (None, None));
    assert!(c.created >= before, "{:?}", c.created);

    let id = f.run(&f.config("exit3", BUSYBOX, &["sh", "-c", "exit 3"]));
    let d = f.wait_exited(&id);
    assert_eq!(d.exit_code, 3);
    assert!(!d.oom_killed);
    assert_eq!(d.pid, 0);
    let started = d.started_at.expect("started_at");
    let finished = d.finished_at.expect("finished_at");
    assert!(started >= before, "{started:?}");
    // Docker stamps StartedAt after runc returns, so a process that exits at once can
    // show a FinishedAt a few milliseconds before its StartedAt.
    assert!(
        finished + Duration::from_secs(1) >= started,
        "{started:?} {finished:?}"
    );
    assert!(finished <= SystemTime::now() + Duration::from_secs(5));
}

#[test]
fn a_leftover_with_the_name_in_use_is_replaced() {
    let f = Fixture::new("conflict");
    let config = f.config("dup", BUSYBOX, &["true"]);
    let leftover = f.create(&config);
    let id = f.create(&config);
    assert_ne!(id, leftover);
    assert!(f
        .docker
        .inspect_container(&leftover)
        .is_err_and(|e| e.is_not_found()));
    assert_eq!(
        f.docker.inspect_container(&id).expect("inspect").name,
        f.name("dup")
    );
}

#[test]
fn stop_lets_a_process_that_handles_sigterm_exit_cleanly() {
    let f = Fixture::new("stop");
    let script = "trap 'echo bye; exit 0' TERM; echo ready; while true; do sleep 0.1; done";
    let id = f.run(&f.config("term", BUSYBOX, &["sh", "-c", script]));
    // Stop only once the trap is installed, or SIGTERM would hit a shell without it.
    poll("the trap to be installed", DEADLINE, || {
        let logs = f.docker.logs(&id, None).expect("logs");
        String::from_utf8_lossy(&logs)
            .contains("ready")
            .then_some(())
    });
    let t = Instant::now();
    f.docker
        .stop_container(&id, Duration::from_secs(30))
        .expect("stop");
    // SIGKILL would only come after the 30 s grace period.
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "stop took {:?}",
        t.elapsed()
    );
    let d = f.docker.inspect_container(&id).expect("inspect");
    assert_eq!(d.state, ContainerState::Exited);
    assert_eq!(d.exit_code, 0, "exited by its trap, not by SIGKILL (137)");
    // Stopping a stopped container is not an error.
    f.docker
        .stop_container(&id, Duration::from_secs(1))
        .expect("second stop");
}

#[test]
fn kill_sends_the_signal_and_returns_at_once() {
    let f = Fixture::new("kill");
    // Ignores SIGTERM (traps it and goes on); USR1 is its configured stop signal.
    let script =
        "trap 'echo term' TERM; trap 'exit 3' USR1; echo ready; while true; do sleep 0.1; done";
    let mut cfg = f.config("kill", BUSYBOX, &["sh", "-c", script]);
    cfg.stop_signal = "SIGUSR1".into();
    let id = f.run(&cfg);
    poll("the traps to be installed", DEADLINE, || {
        let logs = f.docker.logs(&id, None).expect("logs");
        String::from_utf8_lossy(&logs)
            .contains("ready")
            .then_some(())
    });
    let d = f.docker.inspect_container(&id).expect("inspect");
    assert_eq!(d.stop_signal(), "SIGUSR1", "the configured stop signal");
    let t = Instant::now();
    f.docker.kill_container(&id, "SIGTERM").expect("signal");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    poll("the trap to run", DEADLINE, || {
        let logs = f.docker.logs(&id, None).expect("logs");
        String::from_utf8_lossy(&logs)
            .contains("term")
            .then_some(())
    });
    let d = f.docker.inspect_container(&id).expect("inspect");
    assert_eq!(d.state, ContainerState::Running, "SIGTERM is ignored");
    f.docker
        .kill_container(&id, d.stop_signal())
        .expect("stop signal");
    let d = poll("the stop signal to end it", DEADLINE, || {
        let d = f.docker.inspect_container(&id).expect("inspect");
        (d.state == ContainerState::Exited).then_some(d)
    });
    assert_eq!(d.exit_code, 3, "exited by its USR1 trap");
    // A stopped container (409 "is not running") and a gone one (404) are no errors.
    f.docker
        .kill_container(&id, "SIGKILL")
        .expect("signalling a stopped container");
    f.docker
        .kill_container("rkubelet-no-such-container-4c1d", "SIGKILL")
        .expect("signalling a missing container");
    // An image without STOPSIGNAL and no stop_signal: SIGTERM, as Docker's own stop.
    let plain = f.run(&f.config("plain", BUSYBOX, &["sleep", "60"]));
    let d = f.docker.inspect_container(&plain).expect("inspect");
    assert_eq!(d.stop_signal(), "SIGTERM");
}

#[test]
fn missing_containers_are_gone_not_errors() {
    let d = docker();
    let ghost = "rkubelet-no-such-container-4c1d";
    d.remove_container(ghost)
        .expect("removing a missing container is ok");
    d.stop_container(ghost, Duration::from_secs(1))
        .expect("stopping a missing container is ok");
    match d.inspect_container(ghost) {
        Err(e @ RuntimeError::NotFound { .. }) => {
            assert!(e.to_string().contains(ghost), "{e}");
        }
        other => panic!("expected NotFound, got {other:?}"),
    }
    assert!(matches!(
        d.start_container(ghost),
        Err(RuntimeError::NotFound { .. })
    ));
}

#[test]
fn inspect_image_tells_present_from_absent() {
    let d = docker();
    ensure_images(&d);
    let image = d.inspect_image(BUSYBOX).expect("inspect").expect("present");
    assert!(image.id.starts_with("sha256:"), "{}", image.id);
    assert!(
        image.repo_tags.iter().any(|t| t == BUSYBOX),
        "{:?}",
        image.repo_tags
    );
    assert_eq!(image.cmd, vec!["/bin/sh".to_string()]);
    assert!(image.size > 0);
    let pause = d.inspect_image(PAUSE).expect("inspect").expect("present");
    // hack/build-images.sh: the pause image is the static rkubelet itself.
    assert_eq!(pause.entrypoint, ["/rkubelet", "pause"]);
    assert_eq!(
        d.inspect_image("rkubelet/no-such-image:0")
            .expect("inspect"),
        None
    );

    let all = d.list_images().expect("list images");
    assert!(all
        .iter()
        .any(|i| i.id == image.id && i.repo_tags.contains(&BUSYBOX.to_string())));
}

#[test]
fn pull_from_an_unreachable_registry_is_an_error() {
    let d = docker();
    // Port 1 on loopback refuses at once: no registry, and no internet needed.
    match d.pull_image("127.0.0.1:1/rkubelet/nothing", None) {
        Err(RuntimeError::Api { op, .. } | RuntimeError::NotFound { op, .. }) => {
            assert!(op.contains("127.0.0.1:1/rkubelet/nothing:latest"), "{op}");
        }
        other => panic!("expected an API error, got {other:?}"),
    }
    // Removing an image that does not exist is not an error (as in dockershim).
    d.remove_image("rkubelet/no-such-image:0")
        .expect("remove missing image");
}

#[test]
fn logs_are_demultiplexed_and_tailed() {
    let f = Fixture::new("logs");
    let script = "echo out1; echo err1 >&2; echo out2";
    let id = f.run(&f.config("plain", BUSYBOX, &["sh", "-c", script]));
    f.wait_exited(&id);
    let logs = f.docker.logs(&id, None).expect("logs");
    let text = String::from_utf8(logs).expect("utf-8: no frame headers left");
    // stdout and stderr are separate pipes: their relative order is not guaranteed.
    let mut lines: Vec<&str> = text.lines().collect();
    base::sort::sort(&mut lines);
    assert_eq!(lines, ["err1", "out1", "out2"], "{text:?}");
    let tail = f.docker.logs(&id, Some(1)).expect("tail");
    assert_eq!(tail.iter().filter(|&&b| b == b'\n').count(), 1, "{tail:?}");

    let mut tty = f.config("tty", BUSYBOX, &["sh", "-c", "echo on-a-tty"]);
    tty.tty = true;
    let id = f.run(&tty);
    f.wait_exited(&id);
    let logs = f.docker.logs(&id, None).expect("tty logs");
    assert_eq!(String::from_utf8_lossy(&logs).trim_end(), "on-a-tty");
}

#[test]
fn exec_returns_exit_code_and_both_outputs() {
    let f = Fixture::new("exec");
    let id = f.run(&f.config("sleeper", BUSYBOX, &["sleep", "3600"]));
    let cmd: Vec<String> = ["sh", "-c", "echo out; echo err >&2; exit 7"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let r = f
        .docker
        .exec(&id, &cmd, Duration::from_secs(30))
        .expect("exec");
    assert_eq!(r.exit_code, 7);
    assert_eq!(r.stdout, b"out\n");
    assert_eq!(r.stderr, b"err\n");

    let r = f
        .docker
        .exec(&id, &["true".to_string()], Duration::from_secs(30))
        .expect("exec true");
    assert_eq!((r.exit_code, r.stdout.len(), r.stderr.len()), (0, 0, 0));
}

#[test]
fn exec_past_its_timeout_is_a_timeout() {
    let f = Fixture::new("exectimeout");
    let id = f.run(&f.config("sleeper", BUSYBOX, &["sleep", "3600"]));
    let cmd = ["sleep".to_string(), "5".to_string()];
    let t = Instant::now();
    match f.docker.exec(&id, &cmd, Duration::from_secs(1)) {
        Err(RuntimeError::Timeout { after, .. }) => assert_eq!(after, Duration::from_secs(1)),
        other => panic!("expected a timeout, got {other:?}"),
    }
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(900),
        "returned early: {took:?}"
    );
    assert!(took < Duration::from_secs(4), "returned late: {took:?}");
}

#[test]
fn events_deliver_start_and_die_and_end_on_stop() {
    let f = Fixture::new("events");
    let (tx, rx) = crossbeam_channel::unbounded::<RuntimeEvent>();
    let stop = Arc::new(AtomicBool::new(false));
    let (done_tx, done_rx) = crossbeam_channel::bounded(1);
    let watcher = {
        let docker = Arc::clone(&f.docker);
        let stop = Arc::clone(&stop);
        let filter = vec![f.label()];
        thread::spawn(move || {
            let result = docker.events(&filter, &mut |event| tx.send(event).is_ok(), &|| {
                stop.load(Ordering::SeqCst)
            });
            let _ = done_tx.send(result);
        })
    };

    // The stream is open once it delivers something: create throwaway containers until
    // one's `create` event arrives.
    poll("the event stream to open", DEADLINE, || {
        let probe = f.create(&f.config(&format!("probe{}", rx.len()), BUSYBOX, &["true"]));
        let deadline = Instant::now() + Duration::from_secs(2);
        while let Ok(e) = rx.recv_deadline(deadline) {
            if e.id == probe && e.kind == ContainerEventType::Created {
                return Some(());
            }
        }
        None
    });
    // Stay idle past a few 1 s read timeouts: the stream must survive them.
    while rx.recv_timeout(Duration::from_millis(2500)).is_ok() {}

    let id = f.run(&f.config("main", BUSYBOX, &["sh", "-c", "exit 0"]));
    let mut seen = Vec::new();
    poll("start and die events", DEADLINE, || {
        if let Ok(e) = rx.recv_timeout(Duration::from_millis(200)) {
            if e.id == id {
                assert_eq!(e.labels.get(TEST_LABEL), Some(&f.uid), "{e:?}");
                assert!(e.time > UNIX_EPOCH);
                seen.push(e.kind);
            }
        }
        (seen.contains(&ContainerEventType::Started) && seen.contains(&ContainerEventType::Stopped))
            .then_some(())
    });

    stop.store(true, Ordering::SeqCst);
    let t = Instant::now();
    let result = done_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("events() returns within a few seconds of should_stop");
    assert!(result.is_ok(), "{result:?}");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t.elapsed()
    );
    watcher.join().expect("watcher thread");
}

#[test]
fn an_absent_socket_is_unavailable_not_a_hang() {
    let d = Docker::connect("unix:///nonexistent/rkubelet-test/docker.sock").expect("connect");
    let t = Instant::now();
    assert!(matches!(d.version(), Err(RuntimeError::Unavailable { .. })));
    match d.list_containers(&[]) {
        Err(e) => assert!(e.is_unavailable(), "{e:?}"),
        Ok(l) => panic!("listed {l:?} from nowhere"),
    }
    let events = d.events(&[], &mut |_| true, &|| false);
    assert!(
        matches!(events, Err(RuntimeError::Unavailable { .. })),
        "{events:?}"
    );
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "took {:?}",
        t.elapsed()
    );
}
