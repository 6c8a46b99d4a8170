//! The containerd of a test's own, shared by the CRI tests (`containerd.rs`, the
//! client; `runtime.rs`, the `Runtime` trait): root, state, socket, CNI configuration
//! and bridge under a temp dir of its own, the repo's offline images imported into it,
//! and everything torn down afterwards, even when the test fails ([`Containerd`]'s
//! `Drop`).
//!
//! Needs root, `containerd` and `ctr` (apt: containerd), the CNI plugins in
//! `/usr/lib/cni` (apt: containernetworking-plugins), Docker with the images of
//! `make images`; without them the tests fail and say what is missing. The machine's
//! containerd is Debian 12's 1.6; [`Containerd::start_1_7`] runs Debian 13's 1.7,
//! unpacked beside it by `hack/containerd-1.7.sh`, for what only 1.7 has.
// Each test binary uses its own part of the harness.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use base::loops::{shutdown_channel, Loops, Shutdown};
use rkubelet_cri::client::CriClient;
use rkubelet_cri::v1;

pub const PAUSE: &str = "rkubelet/pause:3.10";
pub const BUSYBOX: &str = "rkubelet/busybox:1.35";
pub const T: Duration = Duration::from_secs(60);

/// Where the machine's containerd, ctr and shim are (Debian's package).
const BIN: &str = "/usr/bin";
/// Where `hack/containerd-1.7.sh` unpacks Debian 13's containerd 1.7.
pub const BIN_1_7: &str = "/opt/rkubelet-test/containerd-1.7/usr/bin";

/// One containerd at a time: each is a few hundred MB of work to start on a small
/// machine, and the tests share Docker for the image export.
static BUSY: Mutex<bool> = Mutex::new(false);
static FREED: Condvar = Condvar::new();

/// A test's turn at a containerd of its own, given back on drop (unlike a
/// `MutexGuard`, it may be dropped on another thread).
struct Turn;

impl Drop for Turn {
    fn drop(&mut self) {
        *BUSY.lock().unwrap_or_else(|p| p.into_inner()) = false;
        FREED.notify_one();
    }
}

fn one_at_a_time() -> Turn {
    let mut busy = BUSY.lock().unwrap_or_else(|p| p.into_inner());
    while *busy {
        busy = FREED.wait(busy).unwrap_or_else(|p| p.into_inner());
    }
    *busy = true;
    Turn
}

/// Polls `f` until it gives a value or `within` passes.
pub fn wait_for<T>(within: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let until = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn run(cmd: &mut Command) -> std::process::Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

/// What the tests need, checked first so a missing piece is one clear message.
fn require_host() {
    let uid = run(Command::new("id").arg("-u"));
    assert_eq!(
        String::from_utf8_lossy(&uid.stdout).trim(),
        "0",
        "the containerd tests need root (containerd, runc and the CNI plugins do)"
    );
    for (path, package) in [
        ("/usr/bin/containerd", "containerd"),
        ("/usr/bin/ctr", "containerd"),
        ("/usr/lib/cni/bridge", "containernetworking-plugins"),
        ("/usr/lib/cni/host-local", "containernetworking-plugins"),
        ("/usr/lib/cni/loopback", "containernetworking-plugins"),
    ] {
        assert!(
            Path::new(path).exists(),
            "{path} is missing: apt-get install -y {package}"
        );
    }
    for image in [PAUSE, BUSYBOX] {
        let out =
            run(Command::new("docker").args(["image", "inspect", "--format", "{{.Id}}", image]));
        assert!(
            out.status.success(),
            "Docker has no {image}: run `make images` (hack/build-images.sh); docker said: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
}

/// A containerd of the test's own, stopped and cleaned up on drop.
pub struct Containerd {
    pub dir: PathBuf,
    pub sock: PathBuf,
    /// The directory of its containerd, ctr and shim binaries.
    bin: PathBuf,
    config: PathBuf,
    bridge: String,
    daemon: Option<Child>,
    _serial: Option<Turn>,
}

impl Containerd {
    pub fn start() -> Containerd {
        Containerd::start_with("")
    }

    /// A containerd whose config.toml ends with `extra` (e.g. a registry mirror).
    pub fn start_with(extra: &str) -> Containerd {
        Containerd::start_serial(BIN, extra, Some(one_at_a_time()))
    }

    /// A containerd 1.7 (Debian 13's, beside the machine's 1.6): what has
    /// `GetContainerEvents`.
    pub fn start_1_7() -> Containerd {
        Containerd::start_serial(BIN_1_7, "", Some(one_at_a_time()))
    }

    /// A containerd that is not one test's but a whole test binary's (the integration
    /// tests' shared one, as they share Docker): it does not take the one-at-a-time
    /// turn, which it would hold until the binary ends.
    pub fn start_unserialised() -> Containerd {
        Containerd::start_serial(BIN, "", None)
    }

    /// [`Containerd::start_unserialised`] of containerd 1.7.
    pub fn start_unserialised_1_7() -> Containerd {
        Containerd::start_serial(BIN_1_7, "", None)
    }

    /// A second containerd beside this one (its own dirs, socket and bridge), for a
    /// test that needs two: the first one's turn covers both.
    pub fn start_beside(&self) -> Containerd {
        Containerd::start_serial(BIN, "", None)
    }

    fn start_serial(bin: &str, extra: &str, serial: Option<Turn>) -> Containerd {
        require_host();
        if bin == BIN_1_7 {
            assert!(
                Path::new(BIN_1_7).join("containerd").exists(),
                "containerd 1.7 is missing from {BIN_1_7}: run hack/containerd-1.7.sh (.ci/run does)"
            );
        }
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        // Short: a Unix socket path has 108 bytes.
        let dir = PathBuf::from(format!("/tmp/rkcri-{pid}-{n}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("cni")).expect("temp dir");
        let bridge = format!("rkcri{}", (pid as usize * 8 + n) % 100_000);
        let subnet = format!("10.{}.{}", 180 + n % 60, pid % 250);
        let sock = dir.join("c.sock");
        let config = dir.join("config.toml");
        std::fs::write(
            dir.join("cni/10-rkcri.conflist"),
            format!(
                r#"{{"cniVersion": "0.4.0", "name": "{bridge}", "plugins": [
  {{"type": "bridge", "bridge": "{bridge}", "isGateway": true, "ipMasq": false,
    "ipam": {{"type": "host-local", "dataDir": "{ipam}", "ranges": [[{{"subnet": "{subnet}.0/24"}}]],
              "routes": [{{"dst": "0.0.0.0/0"}}]}}}},
  {{"type": "portmap", "capabilities": {{"portMappings": true}}}},
  {{"type": "loopback"}}
]}}"#,
                ipam = dir.join("ipam").display()
            ),
        )
        .expect("cni config");
        std::fs::write(
            &config,
            format!(
                r#"version = 2
root = "{d}/root"
state = "{d}/state"
[grpc]
  address = "{d}/c.sock"
[ttrpc]
  address = "{d}/c.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "docker.io/{PAUSE}"
  restrict_oom_score_adj = true
  # The streaming server exec, attach and port-forward are proxied to: plain HTTP on
  # loopback, a port of its own choosing.
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_tls_streaming = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{d}/cni"
{extra}
"#,
                d = dir.display()
            ),
        )
        .expect("config.toml");
        let mut c = Containerd {
            dir,
            sock,
            bin: PathBuf::from(bin),
            config,
            bridge,
            daemon: None,
            _serial: serial,
        };
        c.run_daemon();
        // The images, without a registry.
        let mut save = Command::new("docker")
            .args(["save", PAUSE, BUSYBOX])
            .stdout(Stdio::piped())
            .spawn()
            .expect("docker save");
        let import = run(Command::new(c.bin.join("ctr"))
            .args([
                "-a",
                &c.sock.to_string_lossy(),
                "-n",
                "k8s.io",
                "images",
                "import",
                "-",
            ])
            .stdin(save.stdout.take().expect("docker save's stdout")));
        let saved = save.wait().expect("docker save ends");
        assert!(saved.success(), "docker save {PAUSE} {BUSYBOX}: {saved}");
        assert!(
            import.status.success(),
            "ctr images import: {}",
            String::from_utf8_lossy(&import.stderr)
        );
        c
    }

    /// Starts the daemon and waits for its socket.
    pub fn run_daemon(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("containerd.log"))
            .expect("log file");
        // Its shim is found on PATH: the one beside it.
        let path = format!(
            "{}:{}",
            self.bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let child = Command::new(self.bin.join("containerd"))
            .env("PATH", path)
            .arg("--config")
            .arg(&self.config)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start containerd");
        self.daemon = Some(child);
        let log = self.dir.join("containerd.log");
        // Up is when a client of its own gets an answer to `Version`: the socket is
        // served before the CRI plugin has finished starting, and until then every CRI
        // call is answered `Unknown: server is not initialized yet`.
        let (_shutdown, loops) = loops();
        let cri = CriClient::new(&self.endpoint(), Duration::from_secs(5), &loops)
            .expect("a unix endpoint");
        let request = v1::VersionRequest {
            version: "v1".into(),
        };
        wait_for(Duration::from_secs(30), "containerd's CRI service", || {
            if let Some(Ok(Some(status))) = self.daemon.as_mut().map(|c| c.try_wait()) {
                panic!(
                    "containerd exited ({status}): {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            cri.version(&request).ok().map(drop)
        });
    }

    /// Stops the daemon (SIGTERM, then SIGKILL after 10 s).
    pub fn stop_daemon(&mut self, signal: &str) {
        let Some(mut child) = self.daemon.take() else {
            return;
        };
        let _ = run(Command::new("kill").args([signal, &child.id().to_string()]));
        let until = Instant::now() + Duration::from_secs(10);
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.sock.display())
    }

    pub fn ctr(&self, args: &[&str]) -> String {
        let mut all = vec!["-a", self.sock.to_str().unwrap_or_default(), "-n", "k8s.io"];
        all.extend_from_slice(args);
        let out = run(Command::new(self.bin.join("ctr")).args(&all));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        if self.daemon.is_some() {
            // Sandboxes through CRI first, so their network namespaces and CNI
            // addresses go; then whatever tasks and containers are left.
            let (_shutdown, loops) = loops();
            if let Ok(c) = CriClient::new(&self.endpoint(), Duration::from_secs(20), &loops) {
                if let Ok(list) = c.list_pod_sandbox(&v1::ListPodSandboxRequest::default()) {
                    for s in list.items {
                        let id = s.id;
                        let _ = c.stop_pod_sandbox(&v1::StopPodSandboxRequest {
                            pod_sandbox_id: id.clone(),
                        });
                        let _ = c.remove_pod_sandbox(&v1::RemovePodSandboxRequest {
                            pod_sandbox_id: id,
                        });
                    }
                }
            }
            for task in self.ctr(&["tasks", "ls", "-q"]).lines() {
                self.ctr(&["tasks", "kill", "-s", "SIGKILL", task]);
                self.ctr(&["tasks", "delete", "-f", task]);
            }
            for container in self.ctr(&["containers", "ls", "-q"]).lines() {
                self.ctr(&["containers", "delete", container]);
            }
            self.stop_daemon("-TERM");
        }
        // Shims of this daemon that outlived it.
        let sock = self.sock.to_string_lossy().into_owned();
        if let Ok(procs) = std::fs::read_dir("/proc") {
            for p in procs.flatten() {
                let cmdline = std::fs::read(p.path().join("cmdline")).unwrap_or_default();
                let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
                if cmdline.contains("containerd-shim") && cmdline.contains(&sock) {
                    let _ =
                        run(Command::new("kill").args(["-9", &p.file_name().to_string_lossy()]));
                }
            }
        }
        // Mounts under the root and state, deepest first.
        let dir = self.dir.to_string_lossy().into_owned();
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut mounts: Vec<&str> = mountinfo
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .filter(|m| m.starts_with(&dir))
            .collect();
        base::sort::sort_by_key(&mut mounts, |m| std::cmp::Reverse(m.len()));
        for m in mounts {
            let _ = run(Command::new("umount").args(["-l", m]));
        }
        let _ = run(Command::new("ip").args(["link", "del", &self.bridge]));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn loops() -> (Shutdown, Loops) {
    let (shutdown, stop) = shutdown_channel();
    (shutdown, Loops::new(stop))
}

pub fn client(c: &Containerd) -> (CriClient, Shutdown) {
    let (shutdown, loops) = loops();
    let client = CriClient::new(&c.endpoint(), T, &loops).expect("a unix endpoint");
    (client, shutdown)
}
