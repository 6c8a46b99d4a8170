//! Pod sysctls on the real engine: a safe one is set on the sandbox and seen by the
//! app container; an unsafe one the node does not allow, or a namespaced one in a
//! namespace the pod shares with the host, fails the pod with `SysctlForbidden`
//! before anything is created; `--allowed-unsafe-sysctls` lets the unsafe one run;
//! a pattern that is not namespaced stops the kubelet at start, naming it.

use crate::registry::{pod_item, wait_log, wait_running_id};
use crate::util::{wait_for, Node, BUSYBOX, LONG, SLEEPER};

/// A pod with these sysctls whose container prints `/proc/sys/<path>` as
/// `<path>=<value>`, then sleeps.
fn sysctl_pod(name: &str, extra: &str, sysctls: &[(&str, &str)], path: &str) -> String {
    let list: Vec<String> = sysctls
        .iter()
        .map(|(n, v)| format!("{{name: {n:?}, value: {v:?}}}"))
        .collect();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 1\n{extra}  securityContext:\n    sysctls: [{}]\n  containers:\n  - name: c\n    image: {BUSYBOX}\n    command: [\"sh\", \"-c\", {:?}]\n",
        list.join(", "),
        format!("echo {path}=$(cat /proc/sys/{path}); {SLEEPER}")
    )
}

/// Waits until `/pods` reports the pod `Failed`; returns its status.
fn wait_failed(node: &Node, pod: &str) -> serde_json::Value {
    wait_for(&format!("{pod} Failed in /pods"), LONG, || {
        let p = pod_item(node, pod)?;
        (p["status"]["phase"] == "Failed").then(|| p["status"].clone())
    })
}

#[test]
fn safe_sysctls_reach_the_pod_and_forbidden_ones_fail_it() {
    let mut node = Node::new("sysctl-safe");
    node.write_manifest(
        "safe.yaml",
        &sysctl_pod(
            "safe",
            "",
            &[("kernel.shm_rmid_forced", "1")],
            "kernel/shm_rmid_forced",
        ),
    );
    node.write_manifest(
        "unsafe.yaml",
        &sysctl_pod("unsafe", "", &[("kernel.msgmax", "9000")], "kernel/msgmax"),
    );
    node.write_manifest(
        "hostnet.yaml",
        &sysctl_pod(
            "hostnet",
            "  hostNetwork: true\n",
            &[("net.ipv4.tcp_syncookies", "1")],
            "net/ipv4/tcp_syncookies",
        ),
    );
    node.start(&[]);
    let n = node.name.clone();

    let id = wait_running_id(&node, "safe", "c");
    let log = wait_log(&node, &id, "kernel/shm_rmid_forced=");
    assert!(
        log.contains("kernel/shm_rmid_forced=1"),
        "the safe sysctl is set: {log}\n{}",
        node.log()
    );

    let st = wait_failed(&node, "unsafe");
    assert_eq!(st["reason"], "SysctlForbidden", "{st}");
    assert_eq!(
        st["message"], "Pod was rejected: forbidden sysctl: \"kernel.msgmax\" not allowlisted",
        "{st}"
    );
    let st = wait_failed(&node, "hostnet");
    assert_eq!(st["reason"], "SysctlForbidden", "{st}");
    assert_eq!(
        st["message"],
        "Pod was rejected: forbidden sysctl: \"net.ipv4.tcp_syncookies\" not allowed with host \
         Net enabled",
        "{st}"
    );
    // Refused pods never reach Docker.
    let running = node.running();
    assert!(
        !running.contains_key(&format!("unsafe-{n}/c")),
        "{running:?}"
    );
    assert!(
        !running.contains_key(&format!("hostnet-{n}/c")),
        "{running:?}"
    );
    for c in node.containers() {
        let pod = crate::util::label(&c, "io.kubernetes.pod.name");
        assert_eq!(pod, format!("safe-{n}"), "only the safe pod has containers");
    }
}

#[test]
fn allowed_unsafe_sysctls_run_and_unnamespaced_patterns_stop_the_start() {
    let mut node = Node::new("sysctl-unsafe");
    // A pattern that is not namespaced: exit 2, one line naming it, nothing started.
    for flag in [
        "--allowed-unsafe-sysctls=vm.swappiness",
        "--allowed-unsafe-sysctls=kernel.msg*,kernel.*",
    ] {
        let out = node
            .command(&[flag])
            .stderr(std::process::Stdio::piped())
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag}: {err}");
        let pattern = if flag.ends_with("vm.swappiness") {
            "\"vm.swappiness\""
        } else {
            "\"kernel.\""
        };
        assert!(
            err.contains(&format!(
                "the sysctls {pattern} are not known to be namespaced"
            )),
            "{flag}: {err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    }
    assert!(node.running().is_empty(), "nothing started");

    node.write_manifest(
        "unsafe.yaml",
        &sysctl_pod("unsafe", "", &[("kernel/msgmax", "9000")], "kernel/msgmax"),
    );
    node.start(&["--allowed-unsafe-sysctls=kernel.msg*"]);
    let id = wait_running_id(&node, "unsafe", "c");
    let log = wait_log(&node, &id, "kernel/msgmax=");
    assert!(
        log.contains("kernel/msgmax=9000"),
        "the allowed sysctl is set: {log}\n{}",
        node.log()
    );
}
