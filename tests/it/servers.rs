//! The plain ports (healthz, read-only) against hostile clients, on a real rkubelet
//! process with `ulimit -n 1024`, as they were broken in adversarial testing: one
//! request announcing a 100 GB body aborted the process; ~640 idle connections ran it
//! out of descriptors and aborted it; an accept error ended the accept loop for good.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::util::{http_get, split_threads, thread_names, wait_for, Node, LONG};

/// The descriptor limit the flood tests give rkubelet: the default soft limit.
const NOFILE: u64 = 1024;

/// Sends `request` raw and reads the answer until the server closes.
fn raw(port: u16, request: &[u8]) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    s.write_all(request).expect("write");
    let mut answer = String::new();
    s.read_to_string(&mut answer)
        .expect("the answer, then a clean close");
    answer
}

/// Opens up to `n` connections to `port` that never send anything.
pub(crate) fn silent_connections(port: u16, n: usize) -> Vec<TcpStream> {
    raise_own_nofile();
    (0..n)
        .filter_map(|_| {
            TcpStream::connect_timeout(
                &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
                Duration::from_secs(2),
            )
            .ok()
        })
        .collect()
}

/// Starts rkubelet with `nofile` descriptors and waits until `/healthz` passes (the
/// runtime check needs one tick), so that a failure later is the flood's doing.
fn start_healthy(node: &mut Node, nofile: u64) {
    node.start_with_nofile(&[], nofile);
    let port = node.healthz_port;
    wait_for("/healthz to pass", LONG, || {
        http_get(port, "/healthz")
            .ok()
            .filter(|(code, _)| *code == 200)
    });
}

/// The test process itself needs descriptors for the flood: soft limit up to hard.
fn raise_own_nofile() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid rlimit struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

#[test]
fn a_huge_announced_body_is_answered_without_reading_it() {
    let mut node = Node::new("srv-body");
    start_healthy(&mut node, NOFILE);
    for port in [node.ro_port, node.healthz_port] {
        for (method, want) in [("POST", "405"), ("GET", "200")] {
            let req = format!(
                "{method} /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\nabc"
            );
            let answer = raw(port, req.as_bytes());
            assert!(
                answer.starts_with(&format!("HTTP/1.1 {want} ")),
                "{method} on {port}: {answer}"
            );
            assert!(answer.contains("Connection: close\r\n"), "{answer}");
        }
    }
    assert!(node.alive(), "rkubelet died: {}", node.log());
    assert_eq!(node.healthz_get("/healthz").0, 200, "{}", node.log());
}

#[test]
fn idle_connections_are_capped_and_healthz_still_answers() {
    let mut node = Node::new("srv-idle");
    start_healthy(&mut node, NOFILE);
    let (_, threads_before) = split_threads(&thread_names(node.pid()));
    let fds_before = node.open_fds();
    // More silent connections than the process has descriptors.
    let flood = silent_connections(node.ro_port, 1200);
    assert!(flood.len() > 1000, "only {} connections made", flood.len());
    for port in [node.ro_port, node.healthz_port] {
        let (code, body) = wait_for("/healthz during the flood", LONG, || {
            http_get(port, "/healthz").ok()
        });
        assert_eq!(code, 200, "{body}");
    }
    assert!(node.alive(), "rkubelet died: {}", node.log());
    // The server holds at most its cap (256) of them, on no extra thread.
    let held = node.open_fds().saturating_sub(fds_before);
    assert!(held <= 256 + 8, "{held} descriptors held for connections");
    // No thread per connection: the loops are as before, and the ports' workers
    // (started on demand for the /healthz requests) within their pools' bound.
    let (pools, loops) = split_threads(&thread_names(node.pid()));
    assert_eq!(loops, threads_before, "no thread per connection");
    for port in ["srv-healthz", "srv-readonly"] {
        let workers = pools.get(port).copied().unwrap_or(0);
        let most = wire::server::http::Limits::PLAIN.workers;
        assert!(workers <= most, "{workers} {port} workers: {pools:?}");
    }
    drop(flood);
    wait_for("the connections to be released", LONG, || {
        (node.open_fds() <= fds_before + 8).then_some(())
    });
    assert_eq!(node.ro_get("/healthz").0, 200);
}

#[test]
fn slow_request_heads_are_cut_off_after_the_header_timeout() {
    let mut node = Node::new("srv-slow");
    start_healthy(&mut node, NOFILE);
    let mut slow: Vec<TcpStream> = silent_connections(node.ro_port, 50);
    for s in &mut slow {
        s.write_all(b"GET /pods HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            .expect("write");
        s.set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
    }
    // Meanwhile everyone else is served.
    assert_eq!(node.ro_get("/healthz").0, 200);
    for s in &mut slow {
        let mut answer = String::new();
        s.read_to_string(&mut answer)
            .expect("an answer, then a clean close");
        assert!(
            answer.starts_with("HTTP/1.1 408 Request Timeout\r\n"),
            "{answer}"
        );
    }
    assert!(node.alive(), "rkubelet died: {}", node.log());
}

#[test]
fn the_accept_loop_survives_running_out_of_descriptors() {
    let mut node = Node::new("srv-emfile");
    start_healthy(&mut node, NOFILE);
    // Fewer descriptors than the ports' connection caps were sized for (as if
    // something else had taken them): accept must meet EMFILE.
    node.set_nofile(160);
    let flood = silent_connections(node.ro_port, 300);
    wait_for("the accept error to be logged", LONG, || {
        node.log().contains("accept failed").then_some(())
    });
    assert!(node.log().contains("Too many open files"), "{}", node.log());
    // Even now a new client of the flooded port is answered: the oldest silent
    // connection made room.
    let (code, _) = wait_for("/healthz while out of descriptors", LONG, || {
        http_get(node.ro_port, "/healthz").ok()
    });
    assert_eq!(code, 200);
    drop(flood);
    // And after the flood, the port serves as before.
    let (code, body) = wait_for("/healthz after the flood", LONG, || {
        http_get(node.ro_port, "/healthz").ok()
    });
    assert_eq!(code, 200, "{body}");
    assert_eq!(node.healthz_get("/healthz").0, 200);
    assert!(node.alive(), "rkubelet died: {}", node.log());
}
