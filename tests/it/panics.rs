//! A panic in a loop of a running kubelet is caught: logged once with the loop's name,
//! counted on `/debug/loops` and `/metrics`, and the loop restarted, while pods keep
//! running. The panics are injected through `RKUBELET_TEST_PANIC`, which only debug
//! builds (the binary `cargo test` builds) read.

use crate::util::{pod_yaml, wait_for, Node, LONG, SLEEPER};

/// The `PANICS` column of one loop's row of `/debug/loops`.
fn panics_of(table: &str, name: &str) -> Option<u64> {
    let header: Vec<&str> = table.lines().next()?.split_whitespace().collect();
    let col = header.iter().position(|h| *h == "PANICS")?;
    let row = table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))?;
    row.split_whitespace().nth(col)?.parse().ok()
}

#[test]
fn panics_in_loops_are_caught_counted_and_the_loops_restarted_while_pods_run() {
    let mut node = Node::new("panics");
    // The sync loop and the PLEG panic at their first iteration; every pod worker at
    // its first pod (the pod is handed from worker to worker until one is through its
    // back-off and runs it).
    node.env.push((
        "RKUBELET_TEST_PANIC".into(),
        "sync-loop:1,pleg:1,pod-worker-0:1,pod-worker-1:1,pod-worker-2:1,pod-worker-3:1".into(),
    ));
    node.write_manifest("web.yaml", &pod_yaml("web", 2, &[("a", SLEEPER)]));
    node.start(&[]);
    let key = format!("web-{}/a", node.name);
    wait_for("the pod to run despite the panics", LONG, || {
        node.running().contains_key(&key).then_some(())
    });
    let table = wait_for("both panics on /debug/loops", LONG, || {
        let (code, body) = node.ro_get("/debug/loops");
        (code == 200
            && panics_of(&body, "sync-loop") == Some(1)
            && panics_of(&body, "pleg") == Some(1))
        .then_some(body)
    });
    let workers: u64 = (0..4)
        .filter_map(|i| panics_of(&table, &format!("pod-worker-{i}")))
        .sum();
    assert!(
        workers >= 1,
        "a pod worker panicked and was counted:\n{table}"
    );
    let (_, metrics) = node.ro_get("/metrics");
    assert!(
        metrics.contains("rkubelet_loop_panics_total{loop=\"pleg\"} 1\n"),
        "{metrics}"
    );
    // Still alive, still serving, and the pod is still there.
    assert!(node.alive(), "rkubelet died: {}", node.log());
    assert!(node.running().contains_key(&key));
    // One log line per panic, with the loop's name and where it panicked.
    let log = node.log();
    let pleg_lines = log
        .lines()
        .filter(|l| {
            l.contains("pleg: thread pleg panicked: panicked at crates/base/src/panics.rs:")
                && l.contains("RKUBELET_TEST_PANIC: injected panic in pleg")
        })
        .count();
    assert_eq!(pleg_lines, 1, "{log}");
    assert!(
        log.lines()
            .any(|l| l.contains("sync-loop: thread sync-loop panicked")
                && l.contains("restarting the loop in 1s")),
        "{log}"
    );
    // Changes still flow through the restarted sync loop and workers.
    node.write_manifest("two.yaml", &pod_yaml("two", 2, &[("b", SLEEPER)]));
    let key2 = format!("two-{}/b", node.name);
    wait_for("a second pod after the panics", LONG, || {
        node.running().contains_key(&key2).then_some(())
    });
}
