//! Helpers shared by the benchmark programs: manifests written the way editors write
//! them, and a process's RSS, thread count and CPU time from /proc.

use std::path::Path;
use std::process::{Child, Command, Stdio};

/// The local Docker engine, once it answers and holds the offline images the benches
/// run (`make images`); otherwise the program says which is missing and exits 1.
pub fn docker_with_images() -> docker::Docker {
    use runtime::Runtime;
    // Sandboxes run the pause image, as rkubelet's do.
    let docker = docker::Docker::connect("unix:///var/run/docker.sock")
        .expect("endpoint")
        .with_sandbox_image("rkubelet/pause:3.10");
    if let Err(e) = docker.version() {
        eprintln!("cannot reach Docker: {e}; start it first");
        std::process::exit(1);
    }
    for img in ["rkubelet/busybox:1.35", "rkubelet/pause:3.10"] {
        if docker.inspect_image(img).ok().flatten().is_none() {
            eprintln!("image {img} missing: run `make images`");
            std::process::exit(1);
        }
    }
    docker
}

/// The raw Engine API's app container of a pod: busybox sleeping (and exiting 0 on
/// TERM), in `sandbox`'s network and IPC namespaces, created and started; its ID.
pub fn raw_app_container(
    docker: &docker::Docker,
    name: String,
    sandbox: &str,
    labels: &std::collections::BTreeMap<String, String>,
) -> String {
    use runtime::config::{
        ContainerConfig, LinuxContainerConfig, LinuxContainerSecurityContext, NamespaceMode,
        NamespaceOption, PodSandboxConfig,
    };
    use runtime::Runtime;
    const SLEEPER: &str = "trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done";
    let id = docker
        .create_container(
            sandbox,
            &ContainerConfig {
                command: Some(vec!["sh".into(), "-c".into()]),
                args: Some(vec![SLEEPER.into()]),
                labels: labels.clone(),
                linux: LinuxContainerConfig {
                    security_context: LinuxContainerSecurityContext {
                        namespace_options: NamespaceOption {
                            pid: NamespaceMode::Container,
                            ..Default::default()
                        },
                        ..Default::default()
                    },
                    ..Default::default()
                },
                ..runtime::config::ContainerConfig::named(name, "rkubelet/busybox:1.35")
            },
            &PodSandboxConfig::default(),
        )
        .expect("create container");
    docker.start_container(&id).expect("start container");
    id
}

/// "(met)" or "(MISSED)", for the tables.
pub fn verdict(ok: bool) -> &'static str {
    if ok {
        "(met)"
    } else {
        "(MISSED)"
    }
}

/// Writes a manifest atomically (a dot-file, then a rename), as editors do.
pub fn write_manifest(dir: &Path, file: &str, body: &str) {
    let tmp = dir.join(format!(".{file}.tmp"));
    std::fs::write(&tmp, body).expect("write");
    std::fs::rename(&tmp, dir.join(file)).expect("rename");
}

/// (VmRSS in KiB, Threads) from /proc/<pid>/status.
pub fn proc_status(pid: u32) -> (u64, u64) {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |k: &str| {
        s.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("Threads:"))
}

/// utime + stime of a process, in clock ticks.
pub fn cpu_ticks(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat_ticks(&s).1
}

/// tid -> (thread name, utime + stime ticks) of every thread of `pid`.
pub fn task_ticks(pid: u32) -> std::collections::BTreeMap<u32, (String, u64)> {
    let mut out = std::collections::BTreeMap::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for e in dir.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|t| t.parse::<u32>().ok()) else {
            continue;
        };
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        out.insert(tid, stat_ticks(&stat));
    }
    out
}

/// The command name and utime + stime (clock ticks) of one `/proc/…/stat` text.
fn stat_ticks(stat: &str) -> (String, u64) {
    let name = stat
        .split_once('(')
        .and_then(|(_, r)| r.rsplit_once(')'))
        .map_or(String::new(), |(n, _)| n.to_string());
    // Fields after the command (which may contain spaces) start after the last ')';
    // utime and stime are fields 14 and 15 of the line: 11 and 12 after it.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let get = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    (name, get(11) + get(12))
}

/// A standalone rkubelet on `dir/manifests` with its root in `dir/root`, its log in
/// `dir/rkubelet.log`, and healthz and read-only ports picked free on 127.0.0.1.
/// Returns the process and the (healthz, read-only) ports; the caller waits for it.
pub fn spawn_kubelet(dir: &Path, node: &str, pause: &str) -> (Child, u16, u16) {
    spawn_kubelet_with(dir, node, pause, &[])
}

/// [`spawn_kubelet`] with extra flags. Container log links go under `dir`; image GC
/// is off (it would act on the whole engine the host shares).
pub fn spawn_kubelet_with(
    dir: &Path,
    node: &str,
    pause: &str,
    extra: &[&str],
) -> (Child, u16, u16) {
    let port = |l: std::net::TcpListener| l.local_addr().map(|a| a.port()).unwrap_or(0);
    let hz = port(std::net::TcpListener::bind("127.0.0.1:0").expect("port"));
    let ro = port(std::net::TcpListener::bind("127.0.0.1:0").expect("port"));
    let log = dir.join("rkubelet.log");
    let child = Command::new(env!("CARGO_BIN_EXE_rkubelet"))
        .arg(format!("--hostname-override={node}"))
        .arg(format!(
            "--pod-manifest-path={}",
            dir.join("manifests").display()
        ))
        .arg(format!("--root-dir={}", dir.join("root").display()))
        .arg(format!("--pod-infra-container-image={pause}"))
        .arg(format!("--healthz-port={hz}"))
        .arg(format!("--read-only-port={ro}"))
        .arg("--address=127.0.0.1")
        // The kubelet port now listens by default; benches measure the plain ports and
        // must not collide on 10250.
        .arg("--port=0")
        .arg(format!("--pod-logs-dir={}", dir.join("pod-logs").display()))
        .arg(format!(
            "--container-logs-dir={}",
            dir.join("container-logs").display()
        ))
        .arg("--image-gc-high-threshold=100")
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&log).expect("log")))
        .spawn()
        .expect("spawn rkubelet");
    (child, hz, ro)
}

/// Calls `done` every 5 ms until it holds; panics after 300 s.
pub fn poll(mut done: impl FnMut() -> bool) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(300);
    while !done() {
        assert!(
            std::time::Instant::now() < until,
            "benchmark condition not met in 300 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Waits until at least `n` of `node`'s containers run.
pub fn wait_running(docker: &docker::Docker, node: &str, n: usize) {
    use runtime::{ContainerState, Runtime};
    let filter = [format!("io.rkubelet.node={node}")];
    poll(|| {
        docker
            .list_containers(&filter)
            .map(|l| {
                l.iter()
                    .filter(|c| c.state == ContainerState::Running)
                    .count()
                    >= n
            })
            .unwrap_or(false)
    });
}

/// Each duration in whole milliseconds, space-separated (a bench's "every turn" line).
pub fn every_ms(v: &[std::time::Duration]) -> String {
    v.iter()
        .map(|d| format!("{:.0}", d.as_secs_f64() * 1000.0))
        .collect::<Vec<_>>()
        .join(" ")
}
