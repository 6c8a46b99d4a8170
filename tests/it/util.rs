//! Helpers for the integration tests: a real rkubelet process per test (its own node
//! name, root dir, manifest dir and ports), the real Docker engine to check what it did,
//! polling with deadlines, and cleanup that runs even when an assertion fails.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base::loops::Shutdown;
use docker::Docker;
use runtime::{ContainerState, ContainerSummary, Runtime};

use crate::containerd::{self, Containerd};

/// The images `make images` (hack/build-images.sh) builds.
pub const BUSYBOX: &str = "rkubelet/busybox:1.35";
/// The sandbox image.
pub const PAUSE: &str = "rkubelet/pause:3.10";
/// The Docker socket the tests use.
pub const DOCKER_SOCK: &str = "/var/run/docker.sock";

/// Generous: the tests run in parallel on a loaded 2-core machine.
pub const LONG: Duration = Duration::from_secs(90);

/// Polls `cond` until it returns Some or `timeout` passes; panics with `what` then.
pub fn wait_for<T>(what: &str, timeout: Duration, mut cond: impl FnMut() -> Option<T>) -> T {
    let until = Instant::now() + timeout;
    loop {
        if let Some(v) = cond() {
            return v;
        }
        assert!(
            Instant::now() < until,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A Docker client for checking, after making sure the engine and images are there.
pub fn docker() -> Docker {
    let d = Docker::connect(&format!("unix://{DOCKER_SOCK}")).expect("docker endpoint");
    if let Err(e) = d.version() {
        panic!(
            "cannot reach the Docker engine at {DOCKER_SOCK} ({e}); start it \
             (systemctl start docker, or: setsid dockerd >/var/log/dockerd.log 2>&1 &)"
        );
    }
    for img in [BUSYBOX, PAUSE] {
        let present = d.inspect_image(img).expect("inspect image").is_some();
        assert!(
            present,
            "image {img} is missing: run `make images` (hack/build-images.sh)"
        );
    }
    d
}

/// The runtime a behaviour test runs on: each of them runs once on each (see
/// [`on_both_runtimes`](crate::on_both_runtimes)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rt {
    /// The machine's Docker engine.
    Docker,
    /// The test binary's own containerd over CRI v1 ([`shared_containerd`]).
    Containerd,
}

/// The containerd the test binary's CRI nodes share (as they all share Docker), with a
/// client of it for the tests' checks; started on first use, torn down when the
/// binary exits.
pub struct SharedContainerd {
    pub containerd: Containerd,
    pub runtime: Arc<dyn Runtime>,
    _shutdown: Shutdown,
}

static SHARED: Mutex<Option<Arc<SharedContainerd>>> = Mutex::new(None);
static SHARED_1_7: Mutex<Option<Arc<SharedContainerd>>> = Mutex::new(None);

extern "C" fn stop_shared_containerd() {
    // Every test has ended: this is the last reference, and dropping it stops the
    // daemon and removes its sandboxes, bridge and directories.
    for slot in [&SHARED, &SHARED_1_7] {
        let shared = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
        drop(shared);
    }
}

/// The shared containerd (the machine's, 1.6 on Debian 12), started on first use.
pub fn shared_containerd() -> Arc<SharedContainerd> {
    shared_in(&SHARED, Containerd::start_unserialised)
}

/// A shared containerd 1.7 (`hack/containerd-1.7.sh`), for what only 1.7 has: the
/// container events the PLEG follows instead of relisting.
pub fn shared_containerd_1_7() -> Arc<SharedContainerd> {
    shared_in(&SHARED_1_7, Containerd::start_unserialised_1_7)
}

fn shared_in(
    slot: &Mutex<Option<Arc<SharedContainerd>>>,
    start: fn() -> Containerd,
) -> Arc<SharedContainerd> {
    let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(s) = slot.as_ref() {
        return s.clone();
    }
    let c = start();
    let (shutdown, loops) = containerd::loops();
    let runtime = rkubelet_cri::runtime::CriRuntime::new(&c.endpoint(), LONG, &loops)
        .expect("a unix endpoint");
    // SAFETY: registers a plain function with no arguments to run at exit (once per
    // slot; a second run finds both slots empty).
    let rc = unsafe { libc::atexit(stop_shared_containerd) };
    assert_eq!(rc, 0, "atexit");
    let s = Arc::new(SharedContainerd {
        containerd: c,
        runtime: Arc::new(runtime),
        _shutdown: shutdown,
    });
    *slot = Some(s.clone());
    s
}

/// Runs each named `fn name(rt: Rt)` as two tests, `name::docker` and
/// `name::containerd`: one set of behaviour tests for both runtimes.
#[macro_export]
macro_rules! on_both_runtimes {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn docker() {
                super::$name($crate::util::Rt::Docker)
            }
            #[test]
            fn containerd() {
                super::$name($crate::util::Rt::Containerd)
            }
        }
    )*};
}

/// A port nobody listens on right now, below the kernel's ephemeral range. A port from
/// `bind(…:0)` is an ephemeral one, and between its release and the kubelet's (or a
/// server's) bind, any outgoing connection on the machine may be given it (CI once:
/// "cannot listen on 127.0.0.1:36483 for the read-only server: Address already in
/// use"). These come from 10000 up to the ephemeral range's start, each once per test
/// process, from a start that differs between processes, and free on every address.
pub fn free_port() -> u16 {
    const LOW: u32 = 10_000;
    /// The ephemeral range's start (read once), and the next port to try.
    static RANGE: std::sync::OnceLock<(u32, AtomicU32)> = std::sync::OnceLock::new();
    let (high, next) = RANGE.get_or_init(|| {
        let high = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|r| r.split_whitespace().next()?.parse::<u32>().ok())
            .unwrap_or(32_768)
            .min(65_536);
        let start = std::process::id().wrapping_mul(7919) % high.saturating_sub(LOW).max(1);
        (high, AtomicU32::new(start))
    });
    let high = *high;
    if high <= LOW + 1000 {
        // No room below the ephemeral range: the kernel's pick.
        return TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("free port");
    }
    let span = high - LOW;
    for _ in 0..span {
        let p = u16::try_from(LOW + next.fetch_add(1, Ordering::SeqCst) % span).expect("a port");
        if TcpListener::bind(("0.0.0.0", p)).is_ok() {
            return p;
        }
    }
    panic!("no free port between {LOW} and {high}");
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A unique, DNS-safe name for this test process and call.
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::SeqCst)
    )
}

/// One test's world: a node name, a root dir, a manifest dir, ports; and the rkubelet
/// process while it runs. Dropping it kills the process and removes every container
/// of the node and the directories.
pub struct Node {
    /// The node name (`--hostname-override`), unique per test.
    pub name: String,
    /// Scratch directory holding `root/` and `manifests/`.
    pub dir: PathBuf,
    /// `--healthz-port`.
    pub healthz_port: u16,
    /// `--read-only-port`; 0: the flag is not given (a `--config` file's value, or the
    /// flag default, holds).
    pub ro_port: u16,
    /// The runtime endpoint rkubelet is given.
    pub endpoint: String,
    /// The running process.
    pub child: Option<Child>,
    /// Docker, for checks.
    pub docker: Docker,
    /// The runtime this node runs on.
    pub rt: Rt,
    /// That runtime, for checks (Docker, or the shared containerd through CRI).
    pub runtime: Arc<dyn Runtime>,
    /// The shared containerd, on [`Rt::Containerd`].
    pub containerd: Option<Arc<SharedContainerd>>,
    /// Extra environment of the rkubelet process (e.g. `HOME`).
    pub env: Vec<(String, String)>,
    /// The binary to run (the tests' build unless a test gives a static one).
    pub bin: PathBuf,
    /// `--pod-infra-container-image`.
    pub pause: String,
}

impl Node {
    /// A new world on Docker (nothing started yet).
    pub fn new(prefix: &str) -> Node {
        Node::on(Rt::Docker, prefix)
    }

    /// A new world on `rt` (nothing started yet).
    pub fn on(rt: Rt, prefix: &str) -> Node {
        match rt {
            Rt::Docker => Node::with(prefix, None),
            Rt::Containerd => Node::with(prefix, Some(shared_containerd())),
        }
    }

    /// A new world on the shared containerd 1.7 ([`shared_containerd_1_7`]); a CRI
    /// node as any [`Rt::Containerd`] one.
    pub fn on_containerd_1_7(prefix: &str) -> Node {
        Node::with(prefix, Some(shared_containerd_1_7()))
    }

    /// A new world on `containerd`, or on Docker without one.
    fn with(prefix: &str, containerd: Option<Arc<SharedContainerd>>) -> Node {
        let docker = docker();
        let (rt, endpoint, runtime): (Rt, String, Arc<dyn Runtime>) = match &containerd {
            None => (
                Rt::Docker,
                format!("unix://{DOCKER_SOCK}"),
                Arc::new(
                    Docker::connect(&format!("unix://{DOCKER_SOCK}")).expect("docker endpoint"),
                ),
            ),
            Some(shared) => (
                Rt::Containerd,
                shared.containerd.endpoint(),
                shared.runtime.clone(),
            ),
        };
        let name = unique(prefix);
        let dir = std::env::temp_dir().join(format!("rkubelet-it-{name}"));
        std::fs::create_dir_all(dir.join("manifests")).expect("manifest dir");
        Node {
            name,
            dir,
            healthz_port: free_port(),
            ro_port: free_port(),
            endpoint,
            child: None,
            docker,
            rt,
            runtime,
            containerd,
            env: Vec::new(),
            bin: PathBuf::from(env!("CARGO_BIN_EXE_rkubelet")),
            pause: PAUSE.to_string(),
        }
    }

    /// The node's `--cgroup-root`: `/rkubelet-it/<name>`.
    pub fn cgroup_root(&self) -> String {
        format!("/rkubelet-it/{}", self.name)
    }

    /// The manifest directory.
    pub fn manifests(&self) -> PathBuf {
        self.dir.join("manifests")
    }

    /// Writes a manifest atomically (write to a dot-file, then rename), as editors and
    /// config management do.
    pub fn write_manifest(&self, file: &str, body: &str) {
        let tmp = self.manifests().join(format!(".{file}.tmp"));
        std::fs::write(&tmp, body).expect("write manifest");
        std::fs::rename(&tmp, self.manifests().join(file)).expect("rename manifest");
    }

    /// The rkubelet command line for this node.
    pub fn command(&self, extra: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.arg(format!("--hostname-override={}", self.name))
            .arg(format!(
                "--pod-manifest-path={}",
                self.manifests().display()
            ))
            .arg(format!("--root-dir={}", self.dir.join("root").display()))
            // Container log links stay in the test's own directory.
            .arg(format!(
                "--pod-logs-dir={}",
                self.dir.join("pod-logs").display()
            ))
            .arg(format!(
                "--container-logs-dir={}",
                self.dir.join("container-logs").display()
            ))
            .arg(format!("--container-runtime-endpoint={}", self.endpoint))
            .arg(format!("--pod-infra-container-image={}", self.pause))
            .arg(format!("--healthz-port={}", self.healthz_port))
            .args((self.ro_port != 0).then(|| format!("--read-only-port={}", self.ro_port)))
            .arg("--address=127.0.0.1")
            .arg("--port=0")
            .arg("--v=2")
            // The host's disk is shared by every test and close to upstream's default
            // thresholds (imagefs.available<15%): a test node must not start evicting
            // or refusing pods because of it. Eviction tests pass their own.
            .arg("--eviction-hard=memory.available<1Ki")
            // Each node's pod cgroups under its own root, never the host's kubepods.
            .arg(format!("--cgroup-root={}", self.cgroup_root()))
            // Image GC off: it acts on the whole Docker engine, which every test and
            // the host share (tests/it/gc.rs turns it on over its own images only).
            .arg("--image-gc-high-threshold=100")
            .args(extra)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(self.dir.join("rkubelet.log"))
                    .expect("log file"),
            ));
        c
    }

    /// Starts rkubelet and waits until its healthz port answers.
    pub fn start(&mut self, extra: &[&str]) {
        let child = self.command(extra).spawn().expect("spawn rkubelet");
        self.child = Some(child);
        let port = self.healthz_port;
        let until = Instant::now() + LONG;
        while http_get(port, "/healthz/ping").is_err() {
            // A kubelet that exited, or never answered: say so, with its log's end,
            // so that a start that failed under load is explained.
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || Instant::now() >= until {
                let log = self.log();
                let tail: Vec<&str> = log.lines().rev().take(40).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                panic!(
                    "the healthz port {port} did not answer within {LONG:?} (kubelet exited: \
                     {exited:?}); the log's end:\n{}",
                    tail.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Starts rkubelet with at most `nofile` open descriptors (soft and hard, as
    /// `ulimit -n` sets them) and waits until its healthz port answers.
    pub fn start_with_nofile(&mut self, extra: &[&str], nofile: u64) {
        use std::os::unix::process::CommandExt;
        let mut cmd = self.command(extra);
        // SAFETY: setrlimit is async-signal-safe; the closure touches no other state.
        unsafe {
            cmd.pre_exec(move || {
                let lim = libc::rlimit {
                    rlim_cur: nofile,
                    rlim_max: nofile,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        self.child = Some(cmd.spawn().expect("spawn rkubelet"));
        let port = self.healthz_port;
        wait_for("the healthz port to answer", LONG, || {
            http_get(port, "/healthz/ping").ok().map(|_| ())
        });
    }

    /// Sets the running rkubelet's descriptor limit (soft and hard), as `prlimit`
    /// would: below what its servers were sized for, it stands for descriptors that
    /// something else took.
    pub fn set_nofile(&self, nofile: u64) {
        let lim = libc::rlimit {
            rlim_cur: nofile,
            rlim_max: nofile,
        };
        let pid = libc::pid_t::try_from(self.pid()).expect("pid");
        // SAFETY: prlimit on our own child with a valid rlimit struct.
        let rc = unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, &lim, std::ptr::null_mut()) };
        assert_eq!(rc, 0, "prlimit({pid}, {nofile})");
    }

    /// Whether the rkubelet process is still running.
    pub fn alive(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// How many descriptors the rkubelet process holds open.
    pub fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .map(|rd| rd.count())
            .unwrap_or(0)
    }

    /// The PID of the running rkubelet.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).expect("running")
    }

    /// Sends a signal to rkubelet.
    pub fn signal(&self, sig: i32) {
        let pid = i32::try_from(self.pid()).expect("pid");
        // SAFETY: kill(2) on a PID we spawned and have not reaped.
        let rc = unsafe { libc::kill(pid, sig) };
        assert_eq!(rc, 0, "kill({pid}, {sig})");
    }

    /// Waits for the process to exit; returns its exit code and how long it took.
    pub fn wait_exit(&mut self, timeout: Duration) -> (Option<i32>, Duration) {
        let started = Instant::now();
        let mut child = self.child.take().expect("running");
        let status = wait_for("rkubelet to exit", timeout, || {
            child.try_wait().ok().flatten()
        });
        (status.code(), started.elapsed())
    }

    /// Kills rkubelet with SIGKILL and reaps it.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// This node's containers (sandboxes included), as its runtime lists them.
    pub fn containers(&self) -> Vec<ContainerSummary> {
        self.runtime
            .list_containers(&[format!("io.rkubelet.node={}", self.name)])
            .expect("list containers")
    }

    /// This node's containers with the given `io.kubernetes.container.name`.
    pub fn containers_named(&self, container: &str) -> Vec<ContainerSummary> {
        self.containers()
            .into_iter()
            .filter(|c| label(c, "io.kubernetes.container.name") == container)
            .collect()
    }

    /// Running containers by `pod/container` name → IDs.
    pub fn running(&self) -> BTreeMap<String, Vec<String>> {
        let mut m: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for c in self.containers() {
            if c.state == ContainerState::Running {
                let key = format!(
                    "{}/{}",
                    label(&c, "io.kubernetes.pod.name"),
                    label(&c, "io.kubernetes.container.name")
                );
                m.entry(key).or_default().push(c.id.clone());
            }
        }
        m
    }

    /// GET on the read-only port.
    pub fn ro_get(&self, path: &str) -> (u16, String) {
        http_get(self.ro_port, path).expect("read-only port answers")
    }

    /// GET on the healthz port.
    pub fn healthz_get(&self, path: &str) -> (u16, String) {
        http_get(self.healthz_port, path).expect("healthz port answers")
    }

    /// `/pods` parsed.
    pub fn pods(&self) -> serde_json::Value {
        let (code, body) = self.ro_get("/pods");
        assert_eq!(code, 200, "/pods: {body}");
        serde_json::from_str(&body).expect("/pods is JSON")
    }

    /// Runs the real kubectl with `config` (its cache in the node's directory) and
    /// returns its output; a failure fails the test with kubectl's error.
    pub fn kubectl(&self, config: &std::path::Path, args: &[&str]) -> String {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(config)
            .arg("--cache-dir")
            .arg(self.dir.join("kubectl-cache"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run kubectl");
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// rkubelet's log so far (for assertion messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("rkubelet.log")).unwrap_or_default()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill9();
        // A create that the runtime was still processing when rkubelet died lands
        // after the first sweep: sweep until the node has stayed empty for a second.
        let filter = [format!("io.rkubelet.node={}", self.name)];
        let until = Instant::now() + Duration::from_secs(15);
        let mut empty_since: Option<Instant> = None;
        while Instant::now() < until {
            let found = self.runtime.list_containers(&filter).unwrap_or_default();
            for c in &found {
                let _ = self.runtime.remove_container(&c.id);
            }
            if !found.is_empty() {
                empty_since = None;
            } else if empty_since.get_or_insert_with(Instant::now).elapsed()
                >= Duration::from_secs(1)
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // The mounts a killed kubelet left (tmpfs volumes, subPath binds): unmounted
        // deepest first; while one stays, nothing is deleted through it.
        use rkubelet::volume::mount::{mounts_under, unmount};
        for m in mounts_under(&self.dir).unwrap_or_default() {
            let _ = unmount(&m.mount_point);
        }
        match mounts_under(&self.dir) {
            Ok(left) if left.is_empty() => {
                let _ = std::fs::remove_dir_all(&self.dir);
            }
            left => eprintln!("keeping {}: mounts left {left:?}", self.dir.display()),
        }
        remove_cgroups(&self.cgroup_root());
    }
}

/// Removes a cgroup tree (deepest first) in every v1 hierarchy, or the v2 one, once
/// no process is left in it; the shared `/rkubelet-it` parent too when empty.
pub fn remove_cgroups(root: &str) {
    fn rmdir_tree(dir: &std::path::Path) {
        if let Ok(rd) = std::fs::read_dir(dir) {
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    rmdir_tree(&e.path());
                }
            }
        }
        let _ = std::fs::remove_dir(dir);
    }
    let mount = std::path::Path::new("/sys/fs/cgroup");
    let rel = root.trim_start_matches('/');
    let parent = rel.split('/').next().unwrap_or_default();
    let mut bases = vec![mount.to_path_buf()];
    if let Ok(rd) = std::fs::read_dir(mount) {
        bases.extend(rd.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
    }
    for base in bases {
        rmdir_tree(&base.join(rel));
        if !parent.is_empty() && parent != rel {
            let _ = std::fs::remove_dir(base.join(parent));
        }
    }
}

/// A label's value ("" if absent).
pub fn label<'a>(c: &'a ContainerSummary, key: &str) -> &'a str {
    c.labels.get(key).map(String::as_str).unwrap_or_default()
}

/// A minimal HTTP/1.0 GET on 127.0.0.1 (tests only): (status, body).
pub fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((raw.as_str(), ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((code, body.to_string()))
}

/// The network namespace of a process (`net:[4026…]`).
pub fn netns(pid: u32) -> String {
    std::fs::read_link(format!("/proc/{pid}/ns/net"))
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

/// The names of a process's threads, from /proc. Every thread of rkubelet is named,
/// and no two share a name, but a thread names itself once running: a read just
/// after a clone shows the new thread under its parent's name (the main thread's, or
/// a poller's that starts a worker), so a read with a name twice is taken again.
pub fn thread_names(pid: u32) -> Vec<String> {
    let read = || -> Vec<String> {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|rd| {
                rd.filter_map(Result::ok)
                    .filter_map(|e| {
                        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
                        Some(comm.trim().to_string())
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut tasks = read();
    for _ in 0..100 {
        let mut seen = std::collections::BTreeSet::new();
        if tasks.iter().all(|n| seen.insert(n)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        tasks = read();
    }
    let mut names = tasks;
    base::sort::sort(&mut names);
    names
}

/// Threads that are workers of a pool (`<prefix>-<n>`: they start on demand and exit
/// when idle, up to their pool's bound) by prefix, and the other threads (loops), as
/// (workers per prefix, loop names).
pub fn split_threads(names: &[String]) -> (BTreeMap<String, usize>, Vec<String>) {
    let mut pools = BTreeMap::new();
    let mut loops = Vec::new();
    for n in names {
        match n.rsplit_once('-') {
            Some((prefix, i)) if i.parse::<u32>().is_ok() => {
                *pools.entry(prefix.to_string()).or_insert(0) += 1;
            }
            _ => loops.push(n.clone()),
        }
    }
    (pools, loops)
}

/// A simple pod manifest with busybox containers running `cmds` (name, shell command).
pub fn pod_yaml(name: &str, grace: u32, containers: &[(&str, &str)]) -> String {
    let mut y = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: {grace}\n  containers:\n"
    );
    for (c, cmd) in containers {
        y.push_str(&format!(
            "  - name: {c}\n    image: {BUSYBOX}\n    command: [\"sh\", \"-c\", {cmd:?}]\n"
        ));
    }
    y
}

/// A shell loop that exits at once on SIGTERM (a busybox shell as PID 1 ignores it).
pub const SLEEPER: &str = "trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done";

/// A real TLS server (`openssl s_server -www`) on 127.0.0.1 with a self-signed
/// certificate that no root vouches for. Killed, and its directory removed, on drop.
pub struct TlsServer {
    child: Child,
    dir: PathBuf,
    /// The port it listens on.
    pub port: u16,
}

impl TlsServer {
    /// Makes a certificate with the openssl CLI and starts the server; waits until it
    /// listens.
    pub fn start() -> TlsServer {
        let dir = std::env::temp_dir().join(unique("rkubelet-it-tls"));
        std::fs::create_dir_all(&dir).expect("dir");
        let ok = Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            ])
            .args([
                "-subj",
                "/CN=rkubelet-test",
                "-keyout",
                "key.pem",
                "-out",
                "cert.pem",
            ])
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("openssl must be installed (apt-get install -y openssl)");
        assert!(ok.success(), "openssl req failed");
        let port = free_port();
        let child = Command::new("openssl")
            .args([
                "s_server", "-quiet", "-www", "-cert", "cert.pem", "-key", "key.pem",
            ])
            .args(["-accept", &format!("127.0.0.1:{port}")])
            .current_dir(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn openssl s_server");
        let server = TlsServer { child, dir, port };
        wait_for("the TLS server to listen", LONG, || {
            TcpStream::connect(("127.0.0.1", port)).ok()
        });
        server
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `promtool check metrics` on `text`: it must exit 0 (no parse error, no lint
/// warning).
pub fn promtool(text: &str, what: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool is needed (apt-get install -y prometheus; .ci/run does)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("promtool");
    assert!(
        out.status.success(),
        "promtool check metrics on {what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Running `c` containers by pod name → the first container ID.
pub fn running_c(node: &Node) -> BTreeMap<String, String> {
    node.running()
        .into_iter()
        .filter_map(|(k, ids)| {
            let pod = k.strip_suffix("/c")?;
            Some((pod.to_string(), ids.first()?.clone()))
        })
        .collect()
}

/// Every container of the node (sandboxes included): its ID → its restart count label.
pub fn restart_counts(node: &Node) -> BTreeMap<String, String> {
    node.containers()
        .iter()
        .map(|c| {
            let restarts = label(c, "io.kubernetes.container.restartCount");
            (c.id.clone(), restarts.to_string())
        })
        .collect()
}
