//! Hostile inputs found by adversarial testing: FIFOs where manifests or the config
//! file should be, bad flags, a pod whose image is absent in every one of its many
//! containers (a log flood), a host alias that would add a line to `/etc/hosts`, two
//! manifests with one UID, and manifests of millions of tiny nodes or aliases. Each
//! runs the real binary; the ones with pods run it against the real Docker engine.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::util::{label, pod_yaml, wait_for, Node, LONG, SLEEPER};
use rkubelet::record::SPAM_BURST;

fn mkfifo(path: &Path) {
    let c = CString::new(path.as_os_str().as_bytes()).expect("no NUL");
    // SAFETY: `c` is a valid NUL-terminated path that lives across the call.
    let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o644) };
    assert_eq!(rc, 0, "mkfifo: {}", std::io::Error::last_os_error());
}

/// Runs rkubelet with `args` and no Docker; fails (and kills it) if it does not exit
/// within 10 s: every one of these must be refused at once.
fn run_cli(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rkubelet"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rkubelet");
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        match child.try_wait().expect("wait") {
            Some(_) => return child.wait_with_output().expect("output"),
            None if Instant::now() >= until => {
                let _ = child.kill();
                let out = child.wait_with_output().expect("output");
                panic!(
                    "rkubelet {args:?} still running after 10 s; stderr: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Asserts a usage error: exit 2 and exactly one line on stderr, which contains `want`.
fn assert_usage_error(args: &[&str], want: &str) {
    let out = run_cli(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{args:?}: one line: {stderr}");
    assert!(stderr.contains(want), "{args:?}: {stderr}");
}

#[test]
fn a_fifo_in_the_manifest_dir_is_reported_and_never_stalls_the_file_source() {
    let mut node = Node::new("in-fifo");
    node.write_manifest("a.yaml", &pod_yaml("a", 1, &[("c", SLEEPER)]));
    let fifo = node.manifests().join("zz.yaml");
    mkfifo(&fifo);
    node.start(&[]);
    let a = format!("a-{}/c", node.name);
    wait_for("pod a to run", LONG, || node.running().get(&a).map(|_| ()));
    let body = wait_for("healthz to name the FIFO", LONG, || {
        let (code, body) = node.ro_get("/healthz?verbose");
        body.contains("zz.yaml: cannot read: is a FIFO, not a regular file")
            .then_some((code, body))
    });
    assert_eq!(body.0, 200, "a bad manifest is a warning: {}", body.1);
    assert!(body.1.contains("[+]src-file ok"), "{}", body.1);

    // The source still works: a new manifest starts, a removed one stops.
    node.write_manifest("b.yaml", &pod_yaml("b", 1, &[("c", SLEEPER)]));
    let b = format!("b-{}/c", node.name);
    wait_for("pod b to run", LONG, || node.running().get(&b).map(|_| ()));
    std::fs::remove_file(node.manifests().join("a.yaml")).expect("rm a.yaml");
    wait_for("pod a to stop", LONG, || {
        (!node.running().contains_key(&a)).then_some(())
    });
    std::fs::remove_file(&fifo).expect("rm fifo");
    wait_for("the FIFO warning to clear", LONG, || {
        (!node.ro_get("/healthz?verbose").1.contains("zz.yaml")).then_some(())
    });
    assert_eq!(node.healthz_get("/healthz").0, 200);
}

#[test]
fn a_fifo_as_the_manifest_path_does_not_block() {
    let mut node = Node::new("in-fifo-path");
    let fifo = node.dir.join("pod.yaml");
    mkfifo(&fifo);
    // A later --pod-manifest-path wins over the one Node gives.
    let flag = format!("--pod-manifest-path={}", fifo.display());
    node.start(&[&flag]);
    wait_for("healthz to name the FIFO", LONG, || {
        let body = node.ro_get("/healthz?verbose").1;
        body.contains("pod.yaml: cannot read: is a FIFO, not a regular file")
            .then_some(())
    });
    // The loop is between ticks, not stuck inside one.
    assert_eq!(node.healthz_get("/healthz/src-file"), (200, "ok".into()));
}

#[test]
fn a_config_file_that_is_a_fifo_a_device_or_too_big_is_refused_at_once() {
    let dir = std::env::temp_dir().join(crate::util::unique("rkubelet-it-cfg"));
    std::fs::create_dir_all(&dir).expect("dir");
    let fifo = dir.join("config.yaml");
    mkfifo(&fifo);
    let huge = dir.join("huge.yaml");
    std::fs::write(&huge, vec![b'#'; 2 << 20]).expect("write");
    let flag = |p: &Path| format!("--config={}", p.display());
    assert_usage_error(
        &[&flag(&fifo), "--hostname-override=n"],
        &format!(
            "config file {}: cannot read it: is a FIFO, not a regular file",
            fifo.display()
        ),
    );
    assert_usage_error(
        &["--config=/dev/zero", "--hostname-override=n"],
        "config file /dev/zero: cannot read it: is a character device, not a regular file",
    );
    assert_usage_error(
        &[&flag(&huge), "--hostname-override=n"],
        "more than the 1048576 bytes allowed",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bad_endpoint_or_node_name_is_one_line_and_exit_2() {
    assert_usage_error(
        &[
            "--container-runtime-endpoint=ftp://x",
            "--hostname-override=n",
        ],
        "rkubelet: bad container runtime endpoint \"ftp://x\": only unix://",
    );
    assert_usage_error(
        &["--hostname-override", "Bad Name!/x"],
        "invalid value \"Bad Name!/x\" for flag --hostname-override: a lowercase RFC 1123 subdomain",
    );
}

#[test]
fn help_separates_every_flag_from_its_description() {
    let out = run_cli(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    let flag_lines: Vec<&str> = help
        .lines()
        .filter(|l| l.trim_start().starts_with('-'))
        .collect();
    assert!(flag_lines.len() > 20, "{help}");
    let lines: Vec<&str> = help.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        if !l.trim_start().starts_with('-') {
            continue;
        }
        // "--name type   Description", or the name alone and the description below.
        let t = l.trim_start();
        let t = t.strip_prefix("-v, ").unwrap_or(t);
        let mut words = t.splitn(2, ' ');
        let _name = words.next();
        let rest = words.next().unwrap_or("");
        if rest.contains("  ") {
            continue;
        }
        let next = lines.get(i + 1).copied().unwrap_or("");
        assert!(
            next.starts_with("        ") && !next.trim_start().starts_with('-'),
            "flag without a separated description: {l:?}\n{help}"
        );
    }
    assert!(
        help.contains("--container-runtime-endpoint endpoint\n"),
        "the longest flag gets its own line: {help}"
    );
    assert!(help.contains("(default unix:///var/run/docker.sock)"));
}

#[test]
fn many_containers_with_an_absent_image_log_a_bounded_number_of_lines() {
    const CONTAINERS: usize = 50;
    const WATCH: Duration = Duration::from_secs(20);
    let mut node = Node::new("in-flood");
    // Nothing listens on port 1: every pull fails at once.
    let image = "127.0.0.1:1/rk/absent:v1";
    let mut y = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: flood\nspec:\n  \
                 terminationGracePeriodSeconds: 1\n  containers:\n"
        .to_string();
    for i in 0..CONTAINERS {
        y.push_str(&format!(
            "  - name: c{i}\n    image: {image}\n    imagePullPolicy: IfNotPresent\n"
        ));
    }
    node.write_manifest("flood.yaml", &y);
    node.start(&[]);
    let started = Instant::now();
    // Watch the log for WATCH, long enough for every container to fail its pull and
    // go through a 10 s pull backoff at least once.
    wait_for("the watch period, with pulls failing", LONG, || {
        let log = node.log();
        (started.elapsed() >= WATCH && log.contains("Warning Failed")).then_some(())
    });
    let log = node.log();
    // Every line about the pod is an event ("event: <Type> <reason> pod/…"), a
    // waiting container ("pod <name>_default(<uid>): container cN: <reason>: …"), a
    // note that a key is being suppressed, or one of a few lifecycle lines.
    let names = [
        format!("pod/default/flood-{}", node.name),
        format!("flood-{}_default(", node.name),
    ];
    let about: Vec<&str> = log
        .lines()
        .filter(|l| names.iter().any(|n| l.contains(n.as_str())))
        .collect();
    let mut per_key = std::collections::BTreeMap::<String, usize>::new();
    let (mut notes, mut other) = (0, Vec::new());
    for l in &about {
        let key = if l.contains("] too many ") {
            notes += 1;
            continue;
        } else if let Some((_, rest)) = l.split_once("] event: ") {
            rest.split(' ').take(2).collect::<Vec<_>>().join(" ")
        } else if let Some((_, rest)) = l.split_once("): container c") {
            rest.split(": ").nth(1).unwrap_or_default().to_string()
        } else {
            other.push(*l);
            continue;
        };
        *per_key.entry(key).or_default() += 1;
    }
    // Within the first 5 minutes no bucket refills: at most the burst per key, and
    // one "suppressing" note per key.
    for (key, n) in &per_key {
        assert!(
            *n <= SPAM_BURST as usize,
            "{n} lines of {key} (burst {SPAM_BURST}):\n{log}"
        );
    }
    assert!(notes <= per_key.len(), "{notes} notes for {per_key:?}");
    assert!(notes >= 1, "the flood was limited, and it said so:\n{log}");
    assert!(
        other.len() <= 5,
        "unlimited lines about the pod: {other:#?}"
    );
    let bound = per_key.len() * (SPAM_BURST as usize + 1) + 5;
    assert!(
        about.len() <= bound,
        "{} lines about the pod, more than {bound}",
        about.len()
    );
    eprintln!(
        "flood: {} log lines in total, {} about the pod, by key {per_key:?}, {notes} notes, {} others",
        log.lines().count(),
        about.len(),
        other.len()
    );
}

/// `name`'s manifest with `metadata.uid` set.
fn pod_with_uid(name: &str, uid: &str) -> String {
    pod_yaml(name, 1, &[("c", SLEEPER)]).replace(
        &format!("  name: {name}\n"),
        &format!("  name: {name}\n  uid: {uid}\n"),
    )
}

/// The running containers of a pod (full name), sandbox included.
fn running_ids(node: &Node, pod: &str) -> Vec<String> {
    let mut ids: Vec<String> = node
        .containers()
        .into_iter()
        .filter(|c| {
            label(c, "io.kubernetes.pod.name") == pod && c.state == runtime::ContainerState::Running
        })
        .map(|c| c.id)
        .collect();
    base::sort::sort(&mut ids);
    ids
}

#[test]
fn a_host_alias_that_would_add_a_hosts_line_is_refused() {
    let mut node = Node::new("in-alias");
    let evil = pod_yaml("evil", 1, &[("c", SLEEPER)]).replace(
        "spec:\n",
        "spec:\n  hostAliases: [{ip: 10.0.0.1, hostnames: [\"a\\nevil 6.6.6.6\"]}]\n",
    );
    node.write_manifest("evil.yaml", &evil);
    node.write_manifest("good.yaml", &pod_yaml("good", 1, &[("c", SLEEPER)]));
    node.start(&[]);
    // Both are in the file source's first snapshot: once the good one runs, the evil
    // one was refused or started.
    wait_for("the good pod to run", LONG, || {
        node.running()
            .get(&format!("good-{}/c", node.name))
            .cloned()
    });
    let want = "evil.yaml: document 0: invalid pod: spec.hostAliases[0].hostnames[0]: Invalid value: \"a\\nevil 6.6.6.6\": a lowercase RFC 1123 subdomain";
    wait_for("the refusal in the log", LONG, || {
        node.log().contains(want).then_some(())
    });
    let evil_pod = format!("evil-{}", node.name);
    assert!(
        node.containers()
            .iter()
            .all(|c| label(c, "io.kubernetes.pod.name") != evil_pod),
        "no container of the refused pod"
    );
    let pods = node.pods().to_string();
    assert!(!pods.contains(&evil_pod), "not in /pods: {pods}");
}

#[test]
fn a_second_manifest_with_a_uid_in_use_is_refused_and_the_first_keeps_running() {
    let mut node = Node::new("in-uid");
    node.start(&[]);
    let (first, second) = (
        format!("first-{}", node.name),
        format!("second-{}", node.name),
    );
    // `b.yaml` comes after `a.yaml` by name, and after it in time.
    node.write_manifest("a.yaml", &pod_with_uid("first", "same-uid"));
    wait_for("the first pod to run", LONG, || {
        node.running().get(&format!("{first}/c")).cloned()
    });
    let ids = running_ids(&node, &first);
    assert_eq!(ids.len(), 2, "sandbox and c: {ids:?}");
    node.write_manifest("b.yaml", &pod_with_uid("second", "same-uid"));
    let a = node.manifests().join("a.yaml");
    let want = format!(
        "b.yaml: pod {second}_default has uid \"same-uid\", already the uid of pod {first}_default from {}; ignoring it",
        a.display()
    );
    wait_for("the refusal naming both files", LONG, || {
        node.log().contains(&want).then_some(())
    });
    let pod_names = || -> Vec<String> {
        node.pods()["items"]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .map(|p| {
                        p["metadata"]["name"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string()
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(pod_names(), std::slice::from_ref(&first));
    assert_eq!(
        running_ids(&node, &first),
        ids,
        "the first pod is untouched"
    );
    assert!(running_ids(&node, &second).is_empty());
    // Deleting the refused manifest touches nothing: the error clears, the first runs on.
    std::fs::remove_file(node.manifests().join("b.yaml")).expect("rm b.yaml");
    wait_for("the file source to recover", LONG, || {
        node.log()
            .split(&want)
            .nth(1)
            .is_some_and(|after| after.contains("src-file: recovered"))
            .then_some(())
    });
    assert_eq!(pod_names(), std::slice::from_ref(&first));
    assert_eq!(running_ids(&node, &first), ids, "still the same containers");
    // Deleting the first stops it.
    std::fs::remove_file(&a).expect("rm a.yaml");
    wait_for("the first pod's containers to stop", LONG, || {
        running_ids(&node, &first).is_empty().then_some(())
    });
}

/// VmHWM (peak resident set) of a process, KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

#[test]
fn manifests_of_millions_of_tiny_nodes_or_aliases_are_refused_within_64_mib() {
    use rkubelet::podconfig::manifest::MAX_MANIFEST_BYTES;
    use rkubelet::podconfig::nodecount::MAX_MANIFEST_NODES;
    const PEAK_MAX_KIB: u64 = 64 * 1024;
    let cap = usize::try_from(MAX_MANIFEST_BYTES).expect("cap");
    let head = "kind: Pod\nmetadata: {name: big}\nspec: {containers: [{name: c, image: i}]}\n";
    let fill = |open: &str, item: &str, close: &str, room: usize| {
        let n = room / (item.len() + 1);
        format!("{open}{}{close}", vec![item; n].join(","))
    };
    // 1.5 M nodes; an alias to 10 000 nodes a million times; 1.5 M JSON values; and,
    // decoded to the end, a manifest at the cap just under the node limit (refused
    // by validation only after, for its container name).
    let nodes = format!("{head}{}", fill("x: [", "0", "]\n", cap - head.len() - 8));
    let anchor = format!("a: &a [{}]\n", vec!["0"; 10_000].join(","));
    let aliases = format!(
        "{head}{anchor}{}",
        fill("b: [", "*a", "]\n", cap - head.len() - anchor.len() - 8)
    );
    let json_head = r#"{"kind":"Pod","metadata":{"name":"big"},"spec":{"containers":[{"name":"c","image":"i"}]},"#;
    let json = format!(
        "{json_head}{}",
        fill("\"x\":[", "0", "]}", cap - json_head.len() - 8)
    );
    let under_head = head.replace("name: c,", "name: C_,");
    let n = usize::try_from(MAX_MANIFEST_NODES).expect("limit") - 1_000;
    let item = "v".repeat((cap - under_head.len() - 16) / n - 1);
    let under = format!("{under_head}x: [{}]\n", vec![item.as_str(); n].join(","));
    for (what, text) in [
        ("nodes", &nodes),
        ("aliases", &aliases),
        ("json", &json),
        ("under", &under),
    ] {
        assert!(
            text.len() <= cap && text.len() > cap / 100 * 97,
            "{what}: {}",
            text.len()
        );
    }

    let mut node = Node::new("in-nodes");
    node.start(&[]);
    // Should the bound regress, the alias manifest asks for hundreds of GB: a limit on
    // the address space makes that an abort of this one process, not the host's OOM.
    let lim = libc::rlimit {
        rlim_cur: 4 << 30,
        rlim_max: 4 << 30,
    };
    let pid = libc::pid_t::try_from(node.pid()).expect("pid");
    // SAFETY: prlimit on our own child with a valid rlimit struct.
    let rc = unsafe { libc::prlimit(pid, libc::RLIMIT_AS, &lim, std::ptr::null_mut()) };
    assert_eq!(rc, 0, "prlimit({pid})");
    let before = peak_rss_kib(node.pid());
    node.write_manifest("nodes.yaml", &nodes);
    node.write_manifest("aliases.yaml", &aliases);
    node.write_manifest("nodes.json", &json);
    node.write_manifest("under.yaml", &under);
    let dir = node.manifests();
    let refused = |file: &str| {
        format!(
            "{}: decodes to more than {MAX_MANIFEST_NODES} nodes (aliases count as what they repeat), not decoded",
            dir.join(file).display()
        )
    };
    let want = [
        refused("aliases.yaml"),
        refused("nodes.json"),
        refused("nodes.yaml"),
        format!(
            "{}: document 0: invalid pod: spec.containers[0].name: Invalid value: \"C_\"",
            dir.join("under.yaml").display()
        ),
    ];
    wait_for("every manifest to be reported", LONG, || {
        assert!(node.alive(), "rkubelet died: {}", node.log());
        let log = node.log();
        want.iter().all(|w| log.contains(w.as_str())).then_some(())
    });
    assert!(node.alive(), "rkubelet died: {}", node.log());
    let peak = peak_rss_kib(node.pid());
    eprintln!("peak RSS {peak} KiB after the manifests, {before} KiB before them");
    assert!(
        peak < PEAK_MAX_KIB,
        "peak RSS {peak} KiB decoding the manifests (was {before} KiB before), over {PEAK_MAX_KIB} KiB"
    );
}
