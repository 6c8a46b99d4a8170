//! `rkubelet pause` and the kubelet as its own pause image: the subcommand behaves as
//! upstream's pause.c (version flag, warning, clean exit on SIGTERM); a static
//! rkubelet with no registry imports itself as the configured pod-infra image and runs
//! pods with it (PID 1 of the sandbox, reaping the orphans of a shared PID namespace,
//! stopping with exit 0); a dynamic one refuses with a clear error.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use docker::Docker;
use runtime::Runtime;

use crate::util::{self, wait_for, Node, BUSYBOX, DOCKER_SOCK, LONG};

/// The static target the tests build rkubelet for: the host's, as
/// `hack/build-images.sh` builds the pause image.
const STATIC_TARGET: &str = if cfg!(target_arch = "aarch64") {
    "aarch64-unknown-linux-musl"
} else if cfg!(target_arch = "arm") {
    "armv7-unknown-linux-gnueabihf"
} else {
    "x86_64-unknown-linux-musl"
};

/// A static (musl) build of this source tree, built once per test run with the same
/// cargo (dev profile: a fat-LTO release build takes minutes more). Panics with the
/// one command that sets the target up when it is missing.
fn static_rkubelet() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        let target_dir = std::env::var_os("CARGO_TARGET_DIR")
            .map_or_else(|| manifest.join("target"), PathBuf::from);
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let out = Command::new(cargo)
            .current_dir(manifest)
            .args(["build", "--bin", "rkubelet", "--target", STATIC_TARGET])
            .stdin(Stdio::null())
            .output()
            .expect("run cargo");
        assert!(
            out.status.success(),
            "cannot build a static rkubelet (`rustup target add {STATIC_TARGET}` and \
             `apt-get install -y musl-tools` set it up; `make test` does): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        target_dir
            .join(STATIC_TARGET)
            .join("debug")
            .join("rkubelet")
    })
}

/// A GET on the Engine API: (status, body).
fn engine_get(path: &str) -> (u16, String) {
    engine("GET", path)
}

fn engine(method: &str, path: &str) -> (u16, String) {
    let mut s = UnixStream::connect(DOCKER_SOCK).expect("docker socket");
    s.set_read_timeout(Some(Duration::from_secs(120)))
        .expect("timeout");
    let req =
        format!("{method} /v1.41{path} HTTP/1.0\r\nHost: docker\r\nContent-Length: 0\r\n\r\n");
    s.write_all(req.as_bytes()).expect("write request");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read answer");
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((raw.as_str(), ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, body.to_string())
}

/// Removes an image the test made, when the test ends (after its node's containers:
/// declare it before the node).
struct ImageGuard(String);

impl Drop for ImageGuard {
    fn drop(&mut self) {
        if let Ok(d) = Docker::connect(&format!("unix://{DOCKER_SOCK}")) {
            let _ = d.remove_image(&self.0);
        }
    }
}

/// A field of `/proc/<pid>/status` (`NSpid`, `VmRSS`, `PPid`).
fn status_field(pid: u32, field: &str) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim().to_string())
}

/// The processes in the PID namespace `ns` (a `/proc/<pid>/ns/pid` link), with their
/// state letter, parent and command name.
fn processes_in(ns: &str) -> Vec<(u32, char, u32, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let same = std::fs::read_link(format!("/proc/{pid}/ns/pid"))
            .is_ok_and(|l| l.to_string_lossy() == ns);
        if !same {
            continue;
        }
        let state = status_field(pid, "State")
            .and_then(|s| s.chars().next())
            .unwrap_or('?');
        let ppid = status_field(pid, "PPid")
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let name = status_field(pid, "Name").unwrap_or_default();
        out.push((pid, state, ppid, name));
    }
    out
}

#[test]
fn pause_subcommand_behaves_as_upstreams_pause_c() {
    let bin = env!("CARGO_BIN_EXE_rkubelet");
    let out = Command::new(bin)
        .args(["pause", "-v"])
        .output()
        .expect("run pause -v");
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("pause (rkubelet) "),
        "{out:?}"
    );

    let dir = std::env::temp_dir().join(util::unique("rkubelet-it-pause"));
    std::fs::create_dir_all(&dir).expect("dir");
    let err_path = dir.join("stderr");
    let mut child = Command::new(bin)
        .arg("pause")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_path).expect("stderr file"))
        .spawn()
        .expect("spawn pause");
    let pid = child.id();
    // It is waiting in sigsuspend with one thread: none of the kubelet started.
    wait_for("pause to block in sigsuspend", LONG, || {
        status_field(pid, "State")
            .filter(|s| s.starts_with('S'))
            .and_then(|_| std::fs::read_to_string(&err_path).ok())
            .filter(|e| e.contains("Warning: pause should be the first process"))
    });
    assert_eq!(status_field(pid, "Threads").as_deref(), Some("1"));
    let rss = status_field(pid, "VmRSS").unwrap_or_default();
    let anon = status_field(pid, "RssAnon").unwrap_or_default();
    eprintln!("rkubelet pause (the tests' dynamic build, outside a container): VmRSS {rss}, RssAnon {anon}");
    let raw_pid = i32::try_from(pid).expect("pid");
    // SAFETY: kill(2) on the child we spawned and have not reaped.
    let rc = unsafe { libc::kill(raw_pid, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let status = wait_for("pause to exit", LONG, || child.try_wait().ok().flatten());
    assert_eq!(status.code(), Some(0), "SIGTERM is a clean exit");
    let err = std::fs::read_to_string(&err_path).unwrap_or_default();
    assert!(
        err.contains("Shutting down, got signal: Terminated"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A pod whose container orphans three `sleep 10`s into the shared PID namespace (the
/// subshell that started them exits at once), then stays.
fn orphaning_pod(name: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  terminationGracePeriodSeconds: 1
  shareProcessNamespace: true
  containers:
  - name: orphans
    image: {BUSYBOX}
    command: ["sh", "-c", "for i in 1 2 3; do (sleep 10 &); done; exec sleep 100000"]
"#
    )
}

#[test]
fn a_static_kubelet_with_no_registry_imports_itself_as_the_pause_image() {
    let bin = static_rkubelet();
    let image = format!("rkubelet-it/{}:1", util::unique("pause"));
    let _image = ImageGuard(image.clone());
    let mut node = Node::new("pause-self");
    // A stripped copy: what a board would install (and a smaller image).
    let copy = node.dir.join("rkubelet");
    let stripped = Command::new("strip")
        .arg("-o")
        .arg(&copy)
        .arg(bin)
        .status()
        .is_ok_and(|s| s.success());
    if !stripped {
        std::fs::copy(bin, &copy).expect("copy the static binary");
    }
    node.bin = copy.clone();
    node.pause = image.clone();
    assert!(
        node.docker
            .inspect_image(&image)
            .expect("inspect")
            .is_none(),
        "{image} exists nowhere"
    );
    node.write_manifest("orphans.yaml", &orphaning_pod("orphans"));
    node.start(&[]);

    // The pod runs, its sandbox from the imported image.
    let key = format!("orphans-{}/orphans", node.name);
    wait_for("the pod to run", LONG, || {
        node.running().contains_key(&key).then_some(())
    });
    let log = node.log();
    assert!(
        log.contains("imported rkubelet itself") && log.contains(&image),
        "{log}"
    );
    let (code, body) = engine_get(&format!("/images/{image}/json"));
    assert_eq!(code, 200, "{body}");
    let inspect: serde_json::Value = serde_json::from_str(&body).expect("image JSON");
    assert_eq!(
        inspect["Config"]["Entrypoint"],
        serde_json::json!(["/rkubelet", "pause"]),
        "{body}"
    );
    let image_size = inspect["Size"].as_u64().unwrap_or(0);
    let file_size = std::fs::metadata(&copy).map_or(0, |m| m.len());
    eprintln!("imported image {image}: {image_size} bytes (the binary: {file_size} bytes)");

    let sandbox = node.containers_named("POD").remove(0);
    let d = node.docker.inspect_container(&sandbox.id).expect("inspect");
    assert_eq!(d.image, image);
    let pid = d.pid;
    assert!(pid > 0);
    // PID 1 of its namespace, running `/rkubelet pause`.
    let nspid = status_field(pid, "NSpid").unwrap_or_default();
    assert_eq!(nspid.split_whitespace().last(), Some("1"), "NSpid {nspid}");
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    assert_eq!(cmdline, b"/rkubelet\0pause\0");
    // VmRSS counts the binary's pages shared with the page cache (how many depends
    // on what the cache holds); RssAnon is what this pause costs on its own.
    let rss = status_field(pid, "VmRSS").unwrap_or_default();
    let anon = status_field(pid, "RssAnon").unwrap_or_default();
    eprintln!("rkubelet pause as a sandbox's PID 1: VmRSS {rss}, RssAnon {anon}");
    let anon_kib: u64 = anon
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(u64::MAX);
    // A static-pie binary's relocated data is most of it (~0.9 MiB in a debug build);
    // the kubelet's start-up (threads, logging, config) would be several MiB more.
    assert!(anon_kib < 2048, "pause's private memory is {anon}");

    // Reaping: the orphaned sleeps are pause's children, and none stays a zombie.
    let ns = std::fs::read_link(format!("/proc/{pid}/ns/pid"))
        .expect("pid ns")
        .to_string_lossy()
        .into_owned();
    let orphans = wait_for("the orphans to be reparented to pause", LONG, || {
        let ps = processes_in(&ns);
        let adopted = ps
            .iter()
            .filter(|(_, _, ppid, name)| *ppid == pid && name == "sleep")
            .count();
        (adopted > 0).then_some(adopted)
    });
    eprintln!("{orphans} orphan(s) adopted by pause");
    wait_for("the orphans to end and be reaped", LONG, || {
        let ps = processes_in(&ns);
        let zombies = ps.iter().filter(|(_, st, _, _)| *st == 'Z').count();
        let adopted = ps.iter().filter(|(_, _, ppid, _)| *ppid == pid).count();
        (zombies == 0 && adopted == 0).then_some(())
    });

    // `docker stop` of the sandbox: SIGTERM ends pause with 0 (not the SIGKILL a
    // process ignoring it would get after the timeout).
    node.kill9();
    let began = Instant::now();
    let (code, body) = engine("POST", &format!("/containers/{}/stop?t=30", sandbox.id));
    let took = began.elapsed();
    assert!(code == 204 || code == 304, "stop: {code} {body}");
    let d = node.docker.inspect_container(&sandbox.id).expect("inspect");
    assert_eq!(d.exit_code, 0, "pause exits 0 on SIGTERM");
    eprintln!("docker stop of the sandbox took {took:?}");
    assert!(took < Duration::from_secs(25), "stop waited for SIGKILL");
}

#[test]
fn a_dynamic_kubelet_does_not_import_itself() {
    let image = format!("rkubelet-it/{}:1", util::unique("pause-dyn"));
    let _image = ImageGuard(image.clone());
    let mut node = Node::new("pause-dyn");
    node.pause = image.clone();
    node.write_manifest("p.yaml", &orphaning_pod("p"));
    node.start(&[]);
    let log = wait_for("the import to be refused", LONG, || {
        let log = node.log();
        log.contains("could not import itself as sandbox image")
            .then_some(log)
    });
    assert!(log.contains("dynamically linked"), "{log}");
    assert!(log.contains(&image), "{log}");
    assert!(
        node.docker
            .inspect_image(&image)
            .expect("inspect")
            .is_none(),
        "nothing was imported"
    );
    assert!(node.running().is_empty());
}
