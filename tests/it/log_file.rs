//! `--log-file`: rkubelet's lines reach the file through its buffer while it runs, and
//! the last ones at exit; stderr keeps getting every line.

use std::time::Duration;

use crate::util::{wait_for, Node, LONG};

#[test]
fn log_file_gets_every_line_and_the_last_ones_at_exit() {
    let mut node = Node::new("logfile");
    let file = node.dir.join("kubelet-file.log");
    node.start(&[
        &format!("--log-file={}", file.display()),
        "--log-flush-frequency=1s",
    ]);
    wait_for("the start-up lines in the log file", LONG, || {
        let text = std::fs::read_to_string(&file).ok()?;
        text.contains("starting: node").then_some(())
    });
    node.signal(libc::SIGTERM);
    let (code, _) = node.wait_exit(Duration::from_secs(30));
    assert_eq!(code, Some(0), "{}", node.log());
    let text = std::fs::read_to_string(&file).expect("log file");
    assert!(
        text.contains("] rkubelet stopped"),
        "flushed at exit:\n{text}"
    );
    // stderr has the same lines, unbuffered.
    assert!(node.log().contains("] rkubelet stopped"));
    // klog's layout: severity, date, time, the thread's name.
    let first = text.lines().next().expect("a line");
    assert!(first.starts_with('I') && first.contains("] "), "{first}");
}
