//! The CRI client against a real containerd (Debian's, with its CRI plugin): each test
//! starts a containerd of its own (root, state, socket, CNI configuration and bridge
//! under a temp dir of its own), imports the repo's offline images into it, and
//! tears everything down afterwards, even when it fails ([`Containerd`]'s `Drop`).
//!
//! Needs root, `containerd` and `ctr` (apt: containerd), the CNI plugins in
//! `/usr/lib/cni` (apt: containernetworking-plugins), Docker with the images of
//! `make images`; without them the tests fail and say what is missing.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use base::loops::{shutdown_channel, Loops, Shutdown};
use grpc::Code;
use rkubelet_cri::client::CriClient;
use rkubelet_cri::v1;

const PAUSE: &str = "rkubelet/pause:3.10";
const BUSYBOX: &str = "rkubelet/busybox:1.35";
const T: Duration = Duration::from_secs(60);

/// One containerd at a time: each is a few hundred MB of work to start on a small
/// machine, and the tests share Docker for the image export.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// Polls `f` until it gives a value or `within` passes.
fn wait_for<T>(within: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let until = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn run(cmd: &mut Command) -> std::process::Output {
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
struct Containerd {
    dir: PathBuf,
    sock: PathBuf,
    config: PathBuf,
    bridge: String,
    daemon: Option<Child>,
    _serial: MutexGuard<'static, ()>,
}

impl Containerd {
    fn start() -> Containerd {
        let serial = one_at_a_time();
        require_host();
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
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{d}/cni"
"#,
                d = dir.display()
            ),
        )
        .expect("config.toml");
        let mut c = Containerd {
            dir,
            sock,
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
        let import = run(Command::new("ctr")
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
    fn run_daemon(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("containerd.log"))
            .expect("log file");
        let child = Command::new("containerd")
            .arg("--config")
            .arg(&self.config)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start containerd");
        self.daemon = Some(child);
        let sock = self.sock.clone();
        let log = self.dir.join("containerd.log");
        wait_for(Duration::from_secs(30), "containerd's socket", || {
            if let Some(Ok(Some(status))) = self.daemon.as_mut().map(|c| c.try_wait()) {
                panic!(
                    "containerd exited ({status}): {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            std::os::unix::net::UnixStream::connect(&sock)
                .ok()
                .map(drop)
        });
    }

    /// Stops the daemon (SIGTERM, then SIGKILL after 10 s).
    fn stop_daemon(&mut self, signal: &str) {
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

    fn endpoint(&self) -> String {
        format!("unix://{}", self.sock.display())
    }

    fn ctr(&self, args: &[&str]) -> String {
        let mut all = vec!["-a", self.sock.to_str().unwrap_or_default(), "-n", "k8s.io"];
        all.extend_from_slice(args);
        let out = run(Command::new("ctr").args(&all));
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

fn loops() -> (Shutdown, Loops) {
    let (shutdown, stop) = shutdown_channel();
    (shutdown, Loops::new(stop))
}

fn client(c: &Containerd) -> (CriClient, Shutdown) {
    let (shutdown, loops) = loops();
    let client = CriClient::new(&c.endpoint(), T, &loops).expect("a unix endpoint");
    (client, shutdown)
}

#[test]
fn version_names_containerd_and_cri_v1() {
    let c = Containerd::start();
    let (cri, _s) = client(&c);
    let v = cri
        .version(&v1::VersionRequest {
            version: "v1".into(),
        })
        .expect("Version");
    assert_eq!(v.runtime_name, "containerd");
    assert_eq!(v.runtime_api_version, "v1");
    assert!(v.runtime_version.starts_with("1.6"), "{v:?}");
}

#[test]
fn status_reports_runtime_and_network_ready() {
    let c = Containerd::start();
    let (cri, _s) = client(&c);
    let status = cri
        .status(&v1::StatusRequest { verbose: false })
        .expect("Status")
        .status
        .expect("a RuntimeStatus");
    let ready = |t: &str| status.conditions.iter().any(|c| c.r#type == t && c.status);
    assert!(ready("RuntimeReady"), "{status:?}");
    // The CNI configuration is read shortly after start.
    let network_ready = ready("NetworkReady")
        || wait_for(Duration::from_secs(20), "NetworkReady", || {
            let s = cri
                .status(&v1::StatusRequest { verbose: false })
                .ok()?
                .status?;
            s.conditions
                .iter()
                .any(|c| c.r#type == "NetworkReady" && c.status)
                .then_some(true)
        });
    assert!(network_ready);
}

fn sandbox_config(name: &str, dir: &Path) -> v1::PodSandboxConfig {
    v1::PodSandboxConfig {
        metadata: Some(v1::PodSandboxMetadata {
            name: name.into(),
            uid: format!("{name}-uid"),
            namespace: "default".into(),
            attempt: 0,
        }),
        hostname: name.into(),
        log_directory: dir.join("logs").to_string_lossy().into_owned(),
        labels: [("app".to_string(), name.to_string())].into(),
        linux: Some(v1::LinuxPodSandboxConfig::default()),
        ..Default::default()
    }
}

#[test]
fn a_sandbox_and_its_container_live_and_go() {
    let c = Containerd::start();
    let (cri, _s) = client(&c);
    let config = sandbox_config("life", &c.dir);
    let sandbox = cri
        .run_pod_sandbox(&v1::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        })
        .expect("RunPodSandbox")
        .pod_sandbox_id;
    let status = cri
        .pod_sandbox_status(&v1::PodSandboxStatusRequest {
            pod_sandbox_id: sandbox.clone(),
            verbose: false,
        })
        .expect("PodSandboxStatus")
        .status
        .expect("a status");
    assert_eq!(status.state, v1::PodSandboxState::SandboxReady as i32);
    assert_eq!(status.labels.get("app").map(String::as_str), Some("life"));
    let ip = status.network.map(|n| n.ip).unwrap_or_default();
    assert!(
        ip.starts_with("10."),
        "a pod address from the test's bridge: {ip:?}"
    );

    let container = cri
        .create_container(&v1::CreateContainerRequest {
            pod_sandbox_id: sandbox.clone(),
            config: Some(v1::ContainerConfig {
                metadata: Some(v1::ContainerMetadata {
                    name: "sleeper".into(),
                    attempt: 0,
                }),
                image: Some(v1::ImageSpec {
                    image: format!("docker.io/{BUSYBOX}"),
                    ..Default::default()
                }),
                command: vec!["sleep".into(), "3600".into()],
                log_path: "sleeper/0.log".into(),
                linux: Some(v1::LinuxContainerConfig::default()),
                ..Default::default()
            }),
            sandbox_config: Some(config),
        })
        .expect("CreateContainer")
        .container_id;
    cri.start_container(&v1::StartContainerRequest {
        container_id: container.clone(),
    })
    .expect("StartContainer");
    let state = cri
        .container_status(&v1::ContainerStatusRequest {
            container_id: container.clone(),
            verbose: false,
        })
        .expect("ContainerStatus")
        .status
        .expect("a status")
        .state;
    assert_eq!(state, v1::ContainerState::ContainerRunning as i32);
    let exec = cri
        .exec_sync(&v1::ExecSyncRequest {
            container_id: container.clone(),
            cmd: vec!["echo".into(), "hi".into()],
            timeout: 10,
        })
        .expect("ExecSync");
    assert_eq!((exec.stdout.as_slice(), exec.exit_code), (&b"hi\n"[..], 0));
    assert!(
        c.dir.join("logs/sleeper/0.log").exists(),
        "the container's CRI log file"
    );

    cri.stop_container(&v1::StopContainerRequest {
        container_id: container.clone(),
        timeout: 1,
    })
    .expect("StopContainer");
    cri.remove_container(&v1::RemoveContainerRequest {
        container_id: container,
    })
    .expect("RemoveContainer");
    cri.stop_pod_sandbox(&v1::StopPodSandboxRequest {
        pod_sandbox_id: sandbox.clone(),
    })
    .expect("StopPodSandbox");
    cri.remove_pod_sandbox(&v1::RemovePodSandboxRequest {
        pod_sandbox_id: sandbox,
    })
    .expect("RemovePodSandbox");
    let left = cri
        .list_containers(&v1::ListContainersRequest::default())
        .expect("ListContainers");
    assert!(left.containers.is_empty(), "{left:?}");
    let sandboxes = cri
        .list_pod_sandbox(&v1::ListPodSandboxRequest::default())
        .expect("ListPodSandbox");
    assert!(sandboxes.items.is_empty(), "{sandboxes:?}");
}

#[test]
fn images_are_listed_and_inspected() {
    let c = Containerd::start();
    let (cri, _s) = client(&c);
    let images = cri
        .list_images(&v1::ListImagesRequest::default())
        .expect("ListImages");
    let busybox = format!("docker.io/{BUSYBOX}");
    assert!(
        images.images.iter().any(|i| i.repo_tags.contains(&busybox)),
        "{images:?}"
    );
    let status = cri
        .image_status(&v1::ImageStatusRequest {
            image: Some(v1::ImageSpec {
                image: busybox,
                ..Default::default()
            }),
            verbose: false,
        })
        .expect("ImageStatus");
    assert!(status.image.is_some_and(|i| i.size > 0));
    let fs = cri
        .image_fs_info(&v1::ImageFsInfoRequest {})
        .expect("ImageFsInfo");
    assert!(!fs.image_filesystems.is_empty());
    cri.update_runtime_config(&v1::UpdateRuntimeConfigRequest {
        runtime_config: Some(v1::RuntimeConfig {
            network_config: Some(v1::NetworkConfig {
                pod_cidr: "10.250.0.0/24".into(),
            }),
        }),
    })
    .expect("UpdateRuntimeConfig");
}

#[test]
fn sixteen_threads_call_on_one_channel() {
    let c = Containerd::start();
    let (cri, _s) = client(&c);
    let cri = Arc::new(cri);
    let threads: Vec<_> = (0..16)
        .map(|i| {
            let cri = cri.clone();
            base::testutil::spawn_named("caller", move || {
                for _ in 0..25 {
                    if i % 2 == 0 {
                        let v = cri
                            .version(&v1::VersionRequest {
                                version: "v1".into(),
                            })
                            .expect("Version");
                        assert_eq!(v.runtime_name, "containerd");
                    } else {
                        cri.list_images(&v1::ListImagesRequest::default())
                            .expect("ListImages");
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a caller failed");
    }
    // All on one connection: the daemon's socket has one connected peer besides
    // its listener (/proc/net/unix names the path on the daemon's side).
    let table = std::fs::read_to_string("/proc/net/unix").expect("/proc/net/unix");
    let sock = c.sock.to_string_lossy().into_owned();
    let connected = table
        .lines()
        .filter(|l| l.ends_with(&format!(" {sock}")))
        .filter(|l| l.split_whitespace().nth(5) == Some("03"))
        .count();
    assert_eq!(connected, 1, "connections to {sock}:\n{table}");
}

#[test]
fn a_one_millisecond_deadline_is_exceeded() {
    let c = Containerd::start();
    let (_shutdown, loops) = loops();
    let cri = CriClient::new(&c.endpoint(), Duration::from_millis(1), &loops).expect("client");
    // A sandbox takes the runtime far longer than 1 ms (a shim, a namespace, CNI).
    let e = cri
        .run_pod_sandbox(&v1::RunPodSandboxRequest {
            config: Some(sandbox_config("late", &c.dir)),
            runtime_handler: String::new(),
        })
        .expect_err("1 ms is too short");
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e}");
}

#[test]
fn a_restarted_containerd_is_reconnected_to() {
    let mut c = Containerd::start();
    let (cri, _s) = client(&c);
    let version = v1::VersionRequest {
        version: "v1".into(),
    };
    cri.version(&version).expect("before");
    c.stop_daemon("-KILL");
    let e = cri.version(&version).expect_err("no daemon");
    assert_eq!(e.code(), Code::Unavailable, "{e}");
    c.run_daemon();
    let v = cri
        .version(&version)
        .expect("the same client, after the restart");
    assert_eq!(v.runtime_name, "containerd");
}

#[test]
fn container_events_are_unimplemented_on_1_6() {
    let c = Containerd::start();
    let (cri, _s) = client(&c);
    let mut events = cri.get_container_events().expect("the call starts");
    let first = events.next().expect("an item");
    let e = first.expect_err("containerd 1.6 has no GetContainerEvents");
    assert_eq!(e.code(), Code::Unimplemented, "{e}");
    assert!(events.next().is_none());
}
