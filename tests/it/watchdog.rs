//! The systemd watchdog with the real binary: a datagram socket of the test's own
//! stands for systemd (`NOTIFY_SOCKET`), `WATCHDOG_USEC` asks for pings; they come
//! after `READY=1`, from a thread named `watchdog`, and not at all when
//! `WATCHDOG_PID` names another process.

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use crate::util::{thread_names, Node, LONG};

/// Binds the fake systemd socket in the node's directory and points rkubelet at it.
fn fake_systemd(node: &mut Node, usec: &str, pid: Option<&str>) -> UnixDatagram {
    let path = node.dir.join("notify.sock");
    let sock = UnixDatagram::bind(&path).expect("bind the notify socket");
    node.env
        .push(("NOTIFY_SOCKET".into(), path.to_string_lossy().into_owned()));
    node.env.push(("WATCHDOG_USEC".into(), usec.into()));
    if let Some(pid) = pid {
        node.env.push(("WATCHDOG_PID".into(), pid.into()));
    }
    sock
}

/// The next datagram, or None after `timeout`.
fn next(sock: &UnixDatagram, timeout: Duration) -> Option<String> {
    sock.set_read_timeout(Some(timeout)).expect("timeout");
    let mut buf = [0u8; 512];
    let n = sock.recv(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// Reads datagrams until one contains `READY=1`.
fn wait_ready(sock: &UnixDatagram, node: &Node) {
    let until = Instant::now() + LONG;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        let msg = next(sock, left.max(Duration::from_millis(1)));
        match msg {
            Some(m) if m.contains("READY=1") => return,
            Some(_) => {}
            None => panic!("no READY=1 from rkubelet: {}", node.log()),
        }
    }
}

#[test]
fn the_real_binary_pings_the_watchdog_at_half_the_period_once_ready() {
    let mut node = Node::new("wd-ping");
    let sock = fake_systemd(&mut node, "1000000", None);
    node.start(&[]);
    wait_ready(&sock, &node);
    let mut pings = 0;
    while pings < 4 {
        match next(&sock, LONG) {
            Some(m) if m == "WATCHDOG=1" => pings += 1,
            Some(_) => {}
            None => panic!("no WATCHDOG=1 after {pings} pings: {}", node.log()),
        }
    }
    let threads = thread_names(node.pid());
    assert!(threads.iter().any(|t| t == "watchdog"), "{threads:?}");
    let log = node.log();
    assert!(
        log.contains("systemd watchdog: WATCHDOG=1 every 500ms (timeout 1s) while healthy"),
        "{log}"
    );
    // /healthz lists it as a periodic loop of its own.
    let (code, body) = node.healthz_get("/healthz?verbose");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("[+]watchdog ok"), "{body}");
}

#[test]
fn no_watchdog_thread_when_the_watchdog_is_meant_for_another_process() {
    let mut node = Node::new("wd-other");
    let sock = fake_systemd(&mut node, "1000000", Some("1"));
    node.start(&[]);
    wait_ready(&sock, &node);
    // Four periods' worth of silence: a ping would have come by now.
    let until = Instant::now() + Duration::from_secs(2);
    while let Some(m) = next(
        &sock,
        until
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1)),
    ) {
        assert_ne!(m, "WATCHDOG=1", "a ping for a watchdog meant for PID 1");
        if Instant::now() >= until {
            break;
        }
    }
    let threads = thread_names(node.pid());
    assert!(!threads.iter().any(|t| t == "watchdog"), "{threads:?}");
}
