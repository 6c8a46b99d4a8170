//! The evented PLEG against the real Docker engine: a container killed behind the
//! kubelet's back is restarted on its `die` event, with no relist in between (read from
//! the kubelet's own relist counter), and the event stream comes back after being cut.
//!
//! Docker cannot be restarted here (the engine is shared), so the cut is made by a
//! Unix-socket proxy in front of `/var/run/docker.sock` that the kubelet is pointed at:
//! it forwards every connection byte for byte and can shut the ones carrying `/events`
//! (or hide every `die` from them: tests/it/status_manager.rs).

use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::util::{http_get, pod_yaml, thread_names, wait_for, Node, DOCKER_SOCK, LONG, SLEEPER};
use runtime::container::labels;
use runtime::ContainerState;

/// One proxied connection: its two sockets and whether it carried an events request.
struct Conn {
    client: UnixStream,
    upstream: UnixStream,
    events: Arc<AtomicBool>,
}

/// A byte-for-byte proxy from a socket of its own to Docker's, which can cut the event
/// streams going through it (a Docker restart, as far as the kubelet can tell).
pub struct DockerProxy {
    path: PathBuf,
    conns: Arc<Mutex<Vec<Conn>>>,
    stop: Arc<AtomicBool>,
}

/// The `die` action in an events request's filter, and what it is rewritten to when
/// deaths are hidden: an action Docker never sends, of the same length, so the request
/// stays well-formed.
const DIE_FILTER: &[u8] = b"%22die%22";
const NO_DIE_FILTER: &[u8] = b"%22xxx%22";

fn copy(
    mut from: UnixStream,
    mut to: UnixStream,
    events: Option<Arc<AtomicBool>>,
    hide_deaths: bool,
) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(flag) = &events {
            if buf[..n].windows(8).any(|w| w == b"/events?") {
                flag.store(true, Ordering::SeqCst);
                if hide_deaths {
                    while let Some(i) = buf[..n]
                        .windows(DIE_FILTER.len())
                        .position(|w| w == DIE_FILTER)
                    {
                        buf[i..i + NO_DIE_FILTER.len()].copy_from_slice(NO_DIE_FILTER);
                    }
                }
            }
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

impl DockerProxy {
    /// A proxy listening on `dir/docker-proxy.sock`.
    pub fn start(dir: &std::path::Path) -> DockerProxy {
        Self::start_with(dir, false)
    }

    /// A proxy whose event streams never carry a `die`: the `die` action is taken out
    /// of every events request's filter on its way to Docker, so the kubelet misses
    /// every container death it does not find for itself (issue 27).
    pub fn start_hiding_deaths(dir: &std::path::Path) -> DockerProxy {
        Self::start_with(dir, true)
    }

    fn start_with(dir: &std::path::Path, hide_deaths: bool) -> DockerProxy {
        let path = dir.join("docker-proxy.sock");
        let listener = UnixListener::bind(&path).expect("bind the proxy socket");
        let conns: Arc<Mutex<Vec<Conn>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (c, s) = (conns.clone(), stop.clone());
        std::thread::Builder::new()
            .name("it-dproxy".into())
            .spawn(move || {
                for client in listener.incoming() {
                    if s.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(client) = client else { continue };
                    let Ok(upstream) = UnixStream::connect(DOCKER_SOCK) else {
                        continue;
                    };
                    let events = Arc::new(AtomicBool::new(false));
                    let clones = (
                        client.try_clone(),
                        upstream.try_clone(),
                        client.try_clone(),
                        upstream.try_clone(),
                    );
                    let (Ok(c1), Ok(u1), Ok(c2), Ok(u2)) = clones else {
                        continue;
                    };
                    let flag = events.clone();
                    let _ = std::thread::Builder::new()
                        .name("it-dproxy-up".into())
                        .spawn(move || copy(c1, u1, Some(flag), hide_deaths));
                    let _ = std::thread::Builder::new()
                        .name("it-dproxy-down".into())
                        .spawn(move || copy(u2, c2, None, false));
                    c.lock().expect("conns").push(Conn {
                        client,
                        upstream,
                        events,
                    });
                }
            })
            .expect("spawn the proxy");
        DockerProxy { path, conns, stop }
    }

    /// Its `--container-runtime-endpoint`.
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.path.display())
    }

    /// Shuts every connection that carried an events request, as a Docker restart
    /// would; returns how many.
    pub fn cut_events(&self) -> usize {
        let mut conns = self.conns.lock().expect("conns");
        let mut cut = 0;
        conns.retain(|c| {
            if c.events.load(Ordering::SeqCst) {
                let _ = c.client.shutdown(Shutdown::Both);
                let _ = c.upstream.shutdown(Shutdown::Both);
                cut += 1;
                false
            } else {
                true
            }
        });
        cut
    }
}

impl Drop for DockerProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so it sees the flag.
        let _ = UnixStream::connect(&self.path);
        for c in self.conns.lock().expect("conns").drain(..) {
            let _ = c.client.shutdown(Shutdown::Both);
            let _ = c.upstream.shutdown(Shutdown::Both);
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// One sample of the read-only port's `/metrics` (0 when absent).
fn metric(node: &Node, name: &str) -> f64 {
    let (code, body) = http_get(node.ro_port, "/metrics").unwrap_or((0, String::new()));
    assert!(code == 200 || code == 0, "/metrics: {code}");
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

const RELISTS: &str = "kubelet_pleg_relist_duration_seconds_count";
const OPENED: &str = "rkubelet_evented_pleg_connection_success_total";
const BROKEN: &str = "rkubelet_evented_pleg_connection_error_total";

/// The running container of `container` and its restart count label.
fn running_app(node: &Node, container: &str) -> Option<(String, u32)> {
    node.containers_named(container)
        .into_iter()
        .find(|c| c.state == ContainerState::Running)
        .map(|c| (c.id, labels::restart_count(&c.labels)))
}

/// Kills the app container with SIGKILL behind the kubelet's back and waits for its
/// replacement; asserts no full relist ran in between (the event alone drove it).
fn kill_and_see_restart_without_relist(node: &Node, expect_restart_count: u32) {
    let (id, _) = wait_for("the app running", LONG, || running_app(node, "app"));
    let relists = settled_relists(node);
    assert!(relists >= 1.0, "a first relist ran");
    node.runtime
        .kill_container(&id, "SIGKILL")
        .expect("kill the app");
    let (new_id, rc) = wait_for("the app restarted", LONG, || {
        running_app(node, "app").filter(|(n, _)| *n != id)
    });
    assert_ne!(new_id, id);
    assert_eq!(rc, expect_restart_count);
    assert_eq!(
        metric(node, RELISTS),
        relists,
        "no relist between the kill and the restart:\n{}",
        node.log()
    );
}

/// The relist counter once two reads in a row agree: a relist the stream's opening
/// asked for has run (it follows the opening within milliseconds).
fn settled_relists(node: &Node) -> f64 {
    let mut last = metric(node, RELISTS);
    wait_for("the relist counter to settle", LONG, || {
        let now = metric(node, RELISTS);
        let same = now == last;
        last = now;
        same.then_some(now)
    })
}

#[test]
fn pleg_restarts_a_killed_container_on_its_event_without_a_relist() {
    restarts_on_its_event(Node::new("pleg-ev"));
}

/// The same on containerd 1.7, whose CRI `GetContainerEvents` the PLEG follows as it
/// follows Docker's event stream (1.6 has none; there it relists every second).
#[test]
fn pleg_on_containerd_1_7_restarts_a_killed_container_on_its_event_without_a_relist() {
    let node = Node::on_containerd_1_7("pleg-ev17");
    restarts_on_its_event(node);
}

fn restarts_on_its_event(mut node: Node) {
    node.write_manifest("p.yaml", &pod_yaml("p", 1, &[("app", SLEEPER)]));
    node.start(&[]);
    wait_for("the event stream open", LONG, || {
        (metric(&node, OPENED) >= 1.0).then_some(())
    });
    // Both PLEG threads are named threads of the process.
    let names = thread_names(node.pid());
    for want in ["pleg", "pleg-events"] {
        assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
    }
    let (code, loops) = node.ro_get("/debug/loops");
    assert_eq!(code, 200);
    for want in ["pleg", "pleg-events"] {
        assert!(
            loops
                .lines()
                .any(|l| l.split_whitespace().next() == Some(want)),
            "{want} in /debug/loops:\n{loops}"
        );
    }

    kill_and_see_restart_without_relist(&node, 1);
    assert_eq!(metric(&node, BROKEN), 0.0, "the stream never broke");
    let (code, body) = node.healthz_get("/healthz");
    assert_eq!((code, body.as_str()), (200, "ok"));
}

#[test]
fn pleg_reopens_a_cut_event_stream_relists_at_once_and_goes_on_with_events() {
    let mut node = Node::new("pleg-cut");
    let proxy = DockerProxy::start(&node.dir);
    node.endpoint = proxy.endpoint();
    node.write_manifest("p.yaml", &pod_yaml("p", 1, &[("app", SLEEPER)]));
    node.start(&[]);
    wait_for("the app running", LONG, || running_app(&node, "app"));
    wait_for("the event stream open", LONG, || {
        (metric(&node, OPENED) >= 1.0).then_some(())
    });
    let relists = settled_relists(&node);

    assert_eq!(proxy.cut_events(), 1, "one event stream through the proxy");
    // Reconnected (with since=), and a relist at once for what the gap may hide.
    wait_for("the event stream reopened", LONG, || {
        (metric(&node, OPENED) >= 2.0).then_some(())
    });
    assert!(metric(&node, BROKEN) >= 1.0);
    wait_for("a relist after the reconnect", LONG, || {
        (metric(&node, RELISTS) > relists).then_some(())
    });
    settled_relists(&node);
    assert!(
        node.log().contains("reconnecting in"),
        "the break is logged:\n{}",
        node.log()
    );

    // The new stream drives restarts as the first did.
    kill_and_see_restart_without_relist(&node, 1);
    let (code, body) = node.healthz_get("/healthz");
    assert_eq!((code, body.as_str()), (200, "ok"));
}
