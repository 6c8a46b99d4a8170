//! Volumes end to end: emptyDir on disk and in memory, hostPath with every type,
//! subPath and subPathExpr (and CVE-2021-25741's swap attack on them), unsupported
//! types, and the removal of pod directories by the `volume-mgr` loop once a pod is
//! gone (never while one of its containers exists). Each runs on both runtimes
//! (`on_both_runtimes!`: Docker, and containerd over CRI): the volumes are the
//! kubelet's, the bind mounts the runtime's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::registry::{exec, pod_uid, wait_log, wait_running_id, wait_waiting};
use crate::util::{self, wait_for, Node, Rt, BUSYBOX, LONG, SLEEPER};

fn root(node: &Node) -> PathBuf {
    node.dir.join("root")
}

fn pod_dir(node: &Node, uid: &str) -> PathBuf {
    root(node).join("pods").join(uid)
}

fn empty_dir(node: &Node, uid: &str, name: &str) -> PathBuf {
    pod_dir(node, uid)
        .join("volumes")
        .join("kubernetes.io~empty-dir")
        .join(name)
}

fn mounted_fs(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    rkubelet::volume::mount::parse_mountinfo(&text)
        .into_iter()
        .rfind(|m| m.mount_point == path)
        .map(|m| m.fs_type)
}

fn empty_dir_is_shared_between_containers_and_removed_after_the_pod(rt: Rt) {
    let mut node = Node::on(rt, "vol-empty");
    node.write_manifest(
        "share.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: share}}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: shared
    emptyDir: {{}}
  containers:
  - name: writer
    image: {BUSYBOX}
    command: ["sh", "-c", "echo from-writer > /data/note; {SLEEPER}"]
    volumeMounts: [{{name: shared, mountPath: /data}}]
  - name: reader
    image: {BUSYBOX}
    command: ["sh", "-c", "until [ -f /in/note ]; do sleep 0.2; done; echo READ $(cat /in/note); {SLEEPER}"]
    volumeMounts: [{{name: shared, mountPath: /in, readOnly: true}}]
"#
        ),
    );
    node.start(&[]);
    let reader = wait_running_id(&node, "share", "reader");
    wait_log(&node, &reader, "READ from-writer");
    let uid = pod_uid(&node, "share");
    let dir = empty_dir(&node, &uid, "shared");
    assert_eq!(
        std::fs::read_to_string(dir.join("note")).expect("on the node's disk"),
        "from-writer\n"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&dir).expect("dir").permissions().mode() & 0o777;
    assert_eq!(mode, 0o777, "emptyDir is world-writable");
    // readOnly mounts are read-only.
    let r = node
        .runtime
        .exec(
            &reader,
            &["touch".to_string(), "/in/x".to_string()],
            std::time::Duration::from_secs(30),
        )
        .expect("exec");
    assert_ne!(r.exit_code, 0, "writing a readOnly mount must fail");

    // The pod goes: its directory follows once its containers are gone.
    std::fs::remove_file(node.manifests().join("share.yaml")).expect("remove manifest");
    wait_for("the pod directory to be removed", LONG, || {
        (!pod_dir(&node, &uid).exists()).then_some(())
    });
    assert!(node.containers().is_empty());
    wait_for("the cleanup to be logged", LONG, || {
        node.log()
            .contains("Cleaned up orphaned pod directory")
            .then_some(())
    });
}

fn memory_empty_dir_is_a_sized_tmpfs_unmounted_after_the_pod(rt: Rt) {
    let mut node = Node::on(rt, "vol-mem");
    node.write_manifest(
        "mem.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: mem}}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: cache
    emptyDir: {{medium: Memory, sizeLimit: 8Mi}}
  - name: unsized
    emptyDir: {{medium: Memory}}
  containers:
  - name: c
    image: {BUSYBOX}
    command: ["sh", "-c", {SLEEPER:?}]
    resources: {{limits: {{memory: 32Mi}}}}
    volumeMounts:
    - {{name: cache, mountPath: /cache}}
    - {{name: unsized, mountPath: /unsized}}
"#
        ),
    );
    node.start(&[]);
    let id = wait_running_id(&node, "mem", "c");
    let mounts = exec(&node, &id, &["cat", "/proc/mounts"]);
    let line = |p: &str| {
        mounts
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(p))
            .unwrap_or_default()
            .to_string()
    };
    assert!(line("/cache").starts_with("tmpfs /cache tmpfs"), "{mounts}");
    assert!(line("/cache").contains("size=8192k"), "{mounts}");
    // Without a sizeLimit the pod's memory limit bounds it.
    assert!(line("/unsized").contains("size=32768k"), "{mounts}");
    let uid = pod_uid(&node, "mem");
    let host = empty_dir(&node, &uid, "cache");
    assert_eq!(mounted_fs(&host).as_deref(), Some("tmpfs"));
    exec(&node, &id, &["sh", "-c", "echo x > /cache/f"]);
    assert!(host.join("f").exists());

    std::fs::remove_file(node.manifests().join("mem.yaml")).expect("remove manifest");
    wait_for("the pod directory to be removed", LONG, || {
        (!pod_dir(&node, &uid).exists()).then_some(())
    });
    assert_eq!(mounted_fs(&host), None, "the tmpfs is unmounted");
}

/// Makes one path of each kind under `dir`: directory, file, socket, char and block
/// devices (device nodes made with mknod; nothing opens them).
fn make_kinds(dir: &Path) -> BTreeMap<&'static str, PathBuf> {
    let mut m = BTreeMap::new();
    let d = dir.join("a-dir");
    std::fs::create_dir_all(&d).expect("dir");
    m.insert("Directory", d);
    let f = dir.join("a-file");
    std::fs::write(&f, "content\n").expect("file");
    m.insert("File", f);
    let s = dir.join("a.sock");
    let listener = std::os::unix::net::UnixListener::bind(&s).expect("socket");
    std::mem::forget(listener);
    m.insert("Socket", s);
    for (kind, name, mode, major, minor) in [
        ("CharDevice", "a-chr", libc::S_IFCHR, 1, 3),
        ("BlockDevice", "a-blk", libc::S_IFBLK, 7, 200),
    ] {
        let p = dir.join(name);
        let c = std::ffi::CString::new(p.display().to_string()).expect("path");
        // SAFETY: mknod on a path we own, with a valid mode and device number.
        let rc = unsafe { libc::mknod(c.as_ptr(), mode | 0o600, libc::makedev(major, minor)) };
        assert_eq!(
            rc,
            0,
            "mknod {}: {}",
            p.display(),
            std::io::Error::last_os_error()
        );
        m.insert(kind, p);
    }
    m
}

fn host_path_types_are_checked_before_any_container_starts(rt: Rt) {
    let mut node = Node::on(rt, "vol-hostpath");
    let host = node.dir.join("host");
    std::fs::create_dir_all(&host).expect("host dir");
    let kinds = make_kinds(&host);
    let created_dir = host.join("made/by/kubelet");
    let created_file = host.join("made-file");
    let unset_missing = host.join("runtime-makes-this");

    let mut ok = String::from(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: ok}\nspec:\n  terminationGracePeriodSeconds: 1\n  volumes:\n",
    );
    let mut bad = String::from(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: bad}\nspec:\n  terminationGracePeriodSeconds: 1\n  volumes:\n",
    );
    // (volume, path, type) that must pass, and that must fail.
    let pass: Vec<(String, PathBuf, &str)> = vec![
        ("dir".into(), kinds["Directory"].clone(), "Directory"),
        ("file".into(), kinds["File"].clone(), "File"),
        ("sock".into(), kinds["Socket"].clone(), "Socket"),
        ("chr".into(), kinds["CharDevice"].clone(), "CharDevice"),
        ("blk".into(), kinds["BlockDevice"].clone(), "BlockDevice"),
        (
            "dir-or-create".into(),
            created_dir.clone(),
            "DirectoryOrCreate",
        ),
        (
            "file-or-create".into(),
            created_file.clone(),
            "FileOrCreate",
        ),
        ("unset".into(), unset_missing.clone(), ""),
    ];
    let fail: Vec<(String, PathBuf, &str, String)> = vec![
        (
            "not-dir".into(),
            kinds["File"].clone(),
            "Directory",
            format!(
                "hostPath type check failed: {} is not a directory, it's a File",
                kinds["File"].display()
            ),
        ),
        (
            "not-file".into(),
            kinds["Directory"].clone(),
            "FileOrCreate",
            format!(
                "hostPath type check failed: {} is not a file, it's a Directory",
                kinds["Directory"].display()
            ),
        ),
        (
            "not-sock".into(),
            kinds["File"].clone(),
            "Socket",
            format!(
                "hostPath type check failed: {} is not a socket file, it's a File",
                kinds["File"].display()
            ),
        ),
        (
            "not-chr".into(),
            kinds["BlockDevice"].clone(),
            "CharDevice",
            format!(
                "hostPath type check failed: {} is not a character device, it's a BlockDevice",
                kinds["BlockDevice"].display()
            ),
        ),
        (
            "not-blk".into(),
            kinds["CharDevice"].clone(),
            "BlockDevice",
            format!(
                "hostPath type check failed: {} is not a block device, it's a CharDevice",
                kinds["CharDevice"].display()
            ),
        ),
        (
            "missing".into(),
            host.join("nothing-here"),
            "Directory",
            format!(
                "hostPath {} doesn't exist",
                host.join("nothing-here").display()
            ),
        ),
        (
            "no-parent".into(),
            host.join("no/such/parent/file"),
            "FileOrCreate",
            format!(
                "cannot create file {}",
                host.join("no/such/parent/file").display()
            ),
        ),
    ];
    let vol = |y: &mut String, name: &str, path: &Path, ty: &str| {
        y.push_str(&format!(
            "  - name: {name}\n    hostPath: {{path: {:?}, type: {ty:?}}}\n",
            path.display().to_string()
        ));
    };
    for (n, p, t) in &pass {
        vol(&mut ok, n, p, t);
    }
    for (n, p, t, _) in &fail {
        vol(&mut bad, n, p, t);
    }
    ok.push_str("  containers:\n");
    bad.push_str("  containers:\n");
    let container = |y: &mut String, name: &str| {
        y.push_str(&format!(
            "  - name: c-{name}\n    image: {BUSYBOX}\n    command: [\"sh\", \"-c\", {SLEEPER:?}]\n    volumeMounts: [{{name: {name}, mountPath: /mnt/v}}]\n"
        ));
    };
    for (n, _, _) in &pass {
        container(&mut ok, n);
    }
    for (n, _, _, _) in &fail {
        container(&mut bad, n);
    }
    node.write_manifest("ok.yaml", &ok);
    node.write_manifest("bad.yaml", &bad);
    node.start(&[]);

    for (n, _, _, want) in &fail {
        let msg = wait_waiting(
            &node,
            "bad",
            &format!("c-{n}"),
            "CreateContainerConfigError",
        );
        let prefix = format!("MountVolume.SetUp failed for volume \"{n}\" : ");
        assert!(msg.starts_with(&prefix), "{msg}");
        assert!(
            msg[prefix.len()..].starts_with(want.as_str()),
            "{msg} / want {want}"
        );
    }
    for (n, _, _) in &pass {
        wait_running_id(&node, "ok", &format!("c-{n}"));
    }
    assert!(created_dir.is_dir(), "DirectoryOrCreate made the directory");
    assert!(created_file.is_file(), "FileOrCreate made the file");
    assert!(
        unset_missing.is_dir(),
        "an unset type leaves the path to the runtime, which makes a directory"
    );
    let id = wait_running_id(&node, "ok", "c-file");
    assert_eq!(exec(&node, &id, &["cat", "/mnt/v"]), "content\n");
    let id = wait_running_id(&node, "ok", "c-chr");
    exec(&node, &id, &["test", "-c", "/mnt/v"]);
    assert!(
        node.containers()
            .iter()
            .all(
                |c| util::label(c, "io.kubernetes.pod.name") != format!("bad-{}", node.name)
                    || util::label(c, "io.kubernetes.container.name") == "POD"
            ),
        "no container of the bad pod was created"
    );
    let log = node.log();
    assert!(
        log.contains("MountVolume.SetUp failed for volume \"not-dir\""),
        "{log}"
    );
}

fn sub_path_and_sub_path_expr(rt: Rt) {
    let mut node = Node::on(rt, "vol-subpath");
    let host = node.dir.join("host");
    std::fs::create_dir_all(host.join("existing")).expect("host dir");
    std::fs::write(host.join("existing/data"), "from-host\n").expect("file");
    node.write_manifest(
        "sub.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: sub}}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - {{name: scratch, emptyDir: {{}}}}
  - {{name: hp, hostPath: {{path: {host:?}, type: Directory}}}}
  containers:
  - name: plain
    image: {BUSYBOX}
    command: ["sh", "-c", "echo one > /sub/file; cat /host/data; {SLEEPER}"]
    volumeMounts:
    - {{name: scratch, mountPath: /sub, subPath: a/b}}
    - {{name: hp, mountPath: /host, subPath: existing, readOnly: true}}
  - name: expr
    image: {BUSYBOX}
    command: ["sh", "-c", "echo two > /mine/file; {SLEEPER}"]
    env:
    - {{name: POD_NAME, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}
    volumeMounts:
    - {{name: scratch, mountPath: /mine, subPathExpr: "logs/$(POD_NAME)"}}
  - name: missing-var
    image: {BUSYBOX}
    command: ["sleep", "3600"]
    volumeMounts:
    - {{name: scratch, mountPath: /x, subPathExpr: "$(NOT_SET)"}}
"#,
            host = host.display().to_string()
        ),
    );
    // A subPath climbing out of its volume is refused at admission now (upstream's
    // validateLocalDescendingPath): the whole pod, so it lives in its own manifest.
    node.write_manifest(
        "escape.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: escape}}
spec:
  volumes:
  - {{name: scratch, emptyDir: {{}}}}
  containers:
  - name: escape
    image: {BUSYBOX}
    command: ["sleep", "3600"]
    volumeMounts:
    - {{name: scratch, mountPath: /x, subPath: "../../etc"}}
"#
        ),
    );
    node.start(&[]);
    let id = wait_running_id(&node, "sub", "plain");
    wait_log(&node, &id, "from-host");
    wait_running_id(&node, "sub", "expr");
    let uid = pod_uid(&node, "sub");
    let scratch = empty_dir(&node, &uid, "scratch");
    wait_for("files written through sub paths", LONG, || {
        let one = std::fs::read_to_string(scratch.join("a/b/file")).ok()?;
        let two =
            std::fs::read_to_string(scratch.join(format!("logs/sub-{}/file", node.name))).ok()?;
        (one == "one\n" && two == "two\n").then_some(())
    });
    let msg = wait_waiting(&node, "sub", "missing-var", "CreateContainerConfigError");
    assert_eq!(msg, "missing value for NOT_SET");
    let escape = node.manifests().join("escape.yaml").display().to_string();
    wait_for("the escaping subPath to be refused", LONG, || {
        node.log()
            .lines()
            .any(|l| {
                l.contains(&format!("{escape}: document 0: invalid pod: spec.containers[0].volumeMounts.subPath: Invalid value: \"../../etc\": must not contain '..'"))
            })
            .then_some(())
    });
    assert!(node.containers_named("escape").is_empty());
}

fn unsupported_volume_types_fail_only_the_containers_that_mount_them(rt: Rt) {
    let mut node = Node::on(rt, "vol-unsup");
    node.write_manifest(
        "u.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: u}}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - {{name: cfg, configMap: {{name: settings}}}}
  - {{name: claim, persistentVolumeClaim: {{claimName: data}}}}
  containers:
  - name: uses-cfg
    image: {BUSYBOX}
    command: ["sleep", "3600"]
    volumeMounts: [{{name: cfg, mountPath: /cfg}}]
  - name: fine
    image: {BUSYBOX}
    command: ["sh", "-c", {SLEEPER:?}]
"#
        ),
    );
    // A mount of a volume the pod does not declare is refused at admission now
    // (upstream's ValidateVolumeMounts): the whole pod, so it has its own manifest.
    node.write_manifest(
        "m.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: m}}
spec:
  containers:
  - name: uses-missing
    image: {BUSYBOX}
    command: ["sleep", "3600"]
    volumeMounts: [{{name: not-declared, mountPath: /x}}]
"#
        ),
    );
    node.start(&[]);
    wait_running_id(&node, "u", "fine");
    let msg = wait_waiting(&node, "u", "uses-cfg", "CreateContainerConfigError");
    assert_eq!(
        msg,
        "MountVolume.SetUp failed for volume \"cfg\" : cannot get configmap default/settings: no API server is configured (--kubeconfig)"
    );
    let refused = format!(
        "{}: document 0: invalid pod: spec.containers[0].volumeMounts[0].name: Not found: \"not-declared\"",
        node.manifests().join("m.yaml").display()
    );
    wait_for("the undeclared volume to be refused", LONG, || {
        node.log().contains(&refused).then_some(())
    });
    assert!(node.containers_named("uses-missing").is_empty());
    let log = node.log();
    assert!(
        log.contains("unsupported volume type persistentVolumeClaim"),
        "{log}"
    );
    let (code, body) = node.healthz_get("/healthz");
    assert_eq!((code, body.as_str()), (200, "ok"));
}

fn orphaned_pod_directories_go_only_when_no_container_of_the_pod_exists(rt: Rt) {
    let mut node = Node::on(rt, "vol-orphan");
    // A leftover directory of a pod long gone, with a volume in it.
    let gone = root(&node).join("pods").join("0000-gone");
    std::fs::create_dir_all(gone.join("volumes/kubernetes.io~empty-dir/v")).expect("dir");
    std::fs::write(gone.join("volumes/kubernetes.io~empty-dir/v/f"), "x").expect("file");
    // A pod whose container ignores SIGTERM: after its manifest goes, it lives on for
    // its grace period, and its directory must stay as long as it exists.
    node.write_manifest(
        "slow.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: slow}}
spec:
  terminationGracePeriodSeconds: 6
  volumes: [{{name: v, emptyDir: {{}}}}]
  containers:
  - name: c
    image: {BUSYBOX}
    command: ["sh", "-c", "trap '' TERM; while true; do sleep 1; done"]
    volumeMounts: [{{name: v, mountPath: /v}}]
"#
        ),
    );
    node.start(&[]);
    wait_for("the orphan's directory to be removed", LONG, || {
        (!gone.exists()).then_some(())
    });
    let id = wait_running_id(&node, "slow", "c");
    let uid = pod_uid(&node, "slow");
    let dir = pod_dir(&node, &uid);
    assert!(dir.exists());
    std::fs::remove_file(node.manifests().join("slow.yaml")).expect("remove manifest");
    let mut seen_kept = false;
    wait_for("the slow pod's directory to be removed", LONG, || {
        // Directory first, then the container: a directory gone while the container
        // still exists afterwards is a removal under a live container.
        let dir_gone = !dir.exists();
        let container = node.runtime.inspect_container(&id).is_ok();
        if dir_gone {
            assert!(
                !container,
                "pod directory removed while its container exists"
            );
            return Some(());
        }
        seen_kept |= container;
        None
    });
    assert!(
        seen_kept,
        "the directory was kept while the container was stopping"
    );
}

/// The swapping half of CVE-2021-25741's exploit: exchanges its two arguments with
/// `renameat2(RENAME_EXCHANGE)` in a tight loop, so each name is a directory one
/// instant and a symlink to the host the next. Built static, it runs in any image.
const SWAP_C: &str = r#"
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
#include <sys/syscall.h>
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif
int main(int argc, char **argv) {
    unsigned long n = 0;
    if (argc != 3) { fprintf(stderr, "usage: swap A B\n"); return 2; }
    for (;;) {
        if (syscall(SYS_renameat2, AT_FDCWD, argv[1], AT_FDCWD, argv[2], RENAME_EXCHANGE) != 0) {
            perror("renameat2");
            return 1;
        }
        if (++n == 1000) { printf("swapping\n"); fflush(stdout); }
    }
}
"#;

/// How long the attack runs at least, and how many victim starts it must have made
/// (each start is one race: thirty at first, then each victim again after its
/// back-off). About half the attempts are refused (the swapper had `d` as the symlink
/// at that instant: the refusal under test), and a refused attempt moves the victim's
/// back-off on as a crash does (10, 20, 40 s …): with ten victims, 25 starts took
/// anywhere from one to more than six minutes, as the swapper's luck went. Thirty
/// victims make 25 starts within the first rounds.
const ATTACK_FOR: std::time::Duration = std::time::Duration::from_secs(30);
const ATTACK_STARTS: usize = 25;
const VICTIMS: usize = 30;

fn a_sub_path_swapped_for_a_symlink_never_mounts_the_host(rt: Rt) {
    use std::os::unix::fs::PermissionsExt;
    let mut node = Node::on(rt, "vol-swap");
    let tools = node.dir.join("tools");
    std::fs::create_dir_all(&tools).expect("tools dir");
    std::fs::write(tools.join("swap.c"), SWAP_C).expect("swap.c");
    let out = std::process::Command::new("cc")
        .args(["-static", "-O2", "-o"])
        .arg(tools.join("swap"))
        .arg(tools.join("swap.c"))
        .output()
        .expect("run cc (apt-get install -y gcc libc6-dev)");
    assert!(
        out.status.success(),
        "cc -static swap.c: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The host directory the attacker aims at, and where victims report.
    let secret = node.dir.join("host-secret");
    std::fs::create_dir_all(&secret).expect("secret dir");
    std::fs::write(secret.join("marker"), "host\n").expect("marker");
    let report = node.dir.join("report");
    std::fs::create_dir_all(&report).expect("report dir");
    std::fs::set_permissions(&report, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let mut victims = String::new();
    for i in 0..VICTIMS {
        victims.push_str(&format!(
            r#"  - name: victim-{i}
    image: {BUSYBOX}
    command: ["sh", "-c", "echo start >> /report/starts; if [ -e /m/marker ]; then echo victim-{i} >> /report/saw-host; fi; echo x > /m/victim-{i}-$$; exit 1"]
    volumeMounts:
    - {{name: scratch, mountPath: /m, subPath: d}}
    - {{name: report, mountPath: /report}}
"#
        ));
    }
    node.write_manifest(
        "swap.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: swap}}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - {{name: scratch, emptyDir: {{}}}}
  - {{name: tools, hostPath: {{path: {tools:?}, type: Directory}}}}
  - {{name: report, hostPath: {{path: {report:?}, type: Directory}}}}
  containers:
  - name: swapper
    image: {BUSYBOX}
    command: ["sh", "-c", "mkdir -p /v/d && ln -sfn {secret} /v/x && exec /tools/swap /v/d /v/x"]
    volumeMounts:
    - {{name: scratch, mountPath: /v}}
    - {{name: tools, mountPath: /tools, readOnly: true}}
{victims}"#,
            tools = tools.display().to_string(),
            report = report.display().to_string(),
            secret = secret.display(),
        ),
    );
    node.start(&[]);
    let swapper = wait_running_id(&node, "swap", "swapper");
    wait_log(&node, &swapper, "swapping");
    let uid = pod_uid(&node, "swap");
    let started = std::time::Instant::now();
    let starts = || {
        std::fs::read_to_string(report.join("starts"))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    };
    let host_entries = || {
        let mut names: Vec<String> = std::fs::read_dir(&secret)
            .expect("read the host directory")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        base::sort::sort(&mut names);
        names
    };
    wait_for(
        &format!("{ATTACK_STARTS} victim starts over at least {ATTACK_FOR:?}"),
        LONG * 4,
        || {
            let saw = std::fs::read_to_string(report.join("saw-host")).unwrap_or_default();
            assert!(
                saw.is_empty(),
                "victims saw the host directory through subPath d: {saw}"
            );
            assert_eq!(
                host_entries(),
                ["marker"],
                "a victim wrote into the host directory"
            );
            (started.elapsed() >= ATTACK_FOR && starts() >= ATTACK_STARTS).then_some(())
        },
    );
    assert_eq!(
        node.running().get(&format!("swap-{}/swapper", node.name)),
        Some(&vec![swapper]),
        "the swapper kept swapping all along"
    );
    // The victims wrote into the volume's own directory, wherever it was renamed to.
    // The swapper still exchanges `d` and `x` as this reads them, so one reading can
    // open the symlink under both names (each open is a coin flip): the directory is
    // looked for under both names up to 200 times.
    let scratch = empty_dir(&node, &uid, "scratch");
    let count_written = || {
        ["d", "x"]
            .iter()
            .filter_map(|n| std::fs::read_dir(scratch.join(n)).ok())
            .flat_map(|rd| rd.flatten())
            .filter(|e| e.file_name().to_string_lossy().starts_with("victim-"))
            .count()
    };
    let written = (0..200)
        .map(|_| count_written())
        .find(|n| *n > 0)
        .unwrap_or(0);
    assert!(written > 0, "no victim wrote into the emptyDir");

    // The pod goes while the kubelet is down: the next one unmounts the subPath mounts
    // the last one left and removes the directory; the host directory is untouched.
    let subpaths = pod_dir(&node, &uid).join("volume-subpaths");
    assert!(
        !rkubelet::volume::mount::mounts_under(&subpaths)
            .expect("mountinfo")
            .is_empty(),
        "the victims ran on the kubelet's subPath mounts"
    );
    node.kill9();
    std::fs::remove_file(node.manifests().join("swap.yaml")).expect("remove manifest");
    node.start(&[]);
    wait_for("the pod directory to be removed", LONG * 2, || {
        (!pod_dir(&node, &uid).exists()).then_some(())
    });
    assert!(rkubelet::volume::mount::mounts_under(&root(&node))
        .expect("mountinfo")
        .is_empty());
    assert_eq!(host_entries(), ["marker"]);
}

crate::on_both_runtimes!(
    empty_dir_is_shared_between_containers_and_removed_after_the_pod,
    memory_empty_dir_is_a_sized_tmpfs_unmounted_after_the_pod,
    host_path_types_are_checked_before_any_container_starts,
    sub_path_and_sub_path_expr,
    unsupported_volume_types_fail_only_the_containers_that_mount_them,
    orphaned_pod_directories_go_only_when_no_container_of_the_pod_exists,
    a_sub_path_swapped_for_a_symlink_never_mounts_the_host,
);
