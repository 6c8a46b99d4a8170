//! SPDY/3.1 against the real client: kubectl, with its WebSocket protocols turned off,
//! talks to a stand-in API server whose exec and port-forward upgrades are served by
//! rkubelet's codec and `Session` (`crates/wire/src/spdy.rs`, `crates/wire/src/spdy/conn.rs`).
//! kubectl going on after our SYN_REPLYs, printing our stdout, reporting the exit code
//! we send on the error stream and relaying our port-forward bytes proves our frames
//! are ones a reference decoder (spdystream) accepts; 256 KiB each way proves neither
//! side waits on SPDY/3.1 windows. No Docker here.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use wire::spdy::conn::{Config, Event, Session};

use crate::util::{free_port, unique, wait_for};

/// Legacy discovery and a running pod `p`: what kubectl reads before it upgrades.
fn discovery(route: &str) -> Option<&'static str> {
    Some(match route {
        "/version" => r#"{"major":"1","minor":"32","gitVersion":"v1.32.0"}"#,
        "/api" => {
            r#"{"kind":"APIVersions","versions":["v1"],"serverAddressByClientCIDRs":[{"clientCIDR":"0.0.0.0/0","serverAddress":"127.0.0.1"}]}"#
        }
        "/apis" => r#"{"kind":"APIGroupList","apiVersion":"v1","groups":[]}"#,
        "/api/v1" => {
            r#"{"kind":"APIResourceList","groupVersion":"v1","resources":[{"name":"pods","singularName":"pod","namespaced":true,"kind":"Pod","verbs":["get"]},{"name":"pods/exec","singularName":"","namespaced":true,"kind":"PodExecOptions","verbs":["create","get"]},{"name":"pods/portforward","singularName":"","namespaced":true,"kind":"PodPortForwardOptions","verbs":["create","get"]}]}"#
        }
        "/api/v1/namespaces/default/pods/p" => {
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"default","uid":"u"},"spec":{"containers":[{"name":"c","image":"busybox"}]},"status":{"phase":"Running"}}"#
        }
        _ => return None,
    })
}

/// What the stand-in does with an upgraded connection: it gets each event and the
/// session, and returns false when the connection is done.
type Handler = fn(&mut Session, Event, &mut Streams) -> bool;

/// Stream ids by `streamtype` (and `requestid` for port-forward).
type Streams = BTreeMap<String, u32>;

/// The log line of an upgraded connection whose serving thread is done with it.
const ENDED: &str = "ended";

/// The stand-in API server: an accept loop on its own thread, a thread per connection.
struct StandIn {
    port: u16,
    dir: PathBuf,
    stop: Arc<AtomicBool>,
    /// One line per upgraded connection's event, for the assertions.
    log: Arc<Mutex<Vec<String>>>,
}

impl StandIn {
    fn start(handler: Handler) -> StandIn {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let dir = std::env::temp_dir().join(unique("rkubelet-spdy"));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(
            dir.join("kubeconfig"),
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: \
                 \"http://127.0.0.1:{port}\"}}\nusers:\n- name: u\n  user: {{}}\ncontexts:\n- \
                 name: x\n  context: {{cluster: c, user: u, namespace: default}}\n\
                 current-context: x\n"
            ),
        )
        .expect("kubeconfig");
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(Vec::new()));
        let (stop2, log2) = (stop.clone(), log.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let log = log2.clone();
                std::thread::spawn(move || serve(conn, handler, &log));
            }
        });
        StandIn {
            port,
            dir,
            stop,
            log,
        }
    }

    /// kubectl against the stand-in, SPDY only; with `timeout` ending it after 60 s
    /// when `bounded` (a command that ends by itself), else the caller kills it.
    fn kubectl(&self, bounded: bool, args: &[&str]) -> Command {
        let mut c = if bounded {
            let mut c = Command::new("timeout");
            c.args(["60", "kubectl"]);
            c
        } else {
            Command::new("kubectl")
        };
        c.arg("--kubeconfig")
            .arg(self.dir.join("kubeconfig"))
            .args(args)
            .env("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false")
            .env("KUBECTL_PORT_FORWARD_WEBSOCKETS", "false")
            .env("HOME", &self.dir);
        c
    }

    /// The log once `upgrades` upgraded connections have ended: kubectl exits as soon
    /// as it has written its last frames, before this side may have read them.
    fn log(&self, upgrades: usize) -> Vec<String> {
        wait_for(
            "the upgraded connections to end",
            Duration::from_secs(30),
            || {
                let log = self.log.lock().expect("log");
                let ended = log.iter().filter(|l| l.as_str() == ENDED).count();
                (ended >= upgrades).then(|| log.clone())
            },
        )
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One connection: a discovery GET, or an upgrade served by `handler` over a Session.
fn serve(mut conn: TcpStream, handler: Handler, log: &Mutex<Vec<String>>) {
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    conn.set_write_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match conn.read(&mut b) {
            Ok(1) => head.push(b[0]),
            _ => return,
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let path = head.split(' ').nth(1).unwrap_or("");
    let route = path.split('?').next().unwrap_or("");
    if !head.contains("\r\nUpgrade: SPDY/3.1\r\n") {
        let reply = match discovery(route) {
            Some(body) => format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: \
                 {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            ),
            None => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                .to_string(),
        };
        let _ = conn.write_all(reply.as_bytes());
        return;
    }
    // The first protocol kubectl offers that upstream's kubelet speaks over SPDY.
    let proto = if route.ends_with("/portforward") {
        "portforward.k8s.io"
    } else {
        "v4.channel.k8s.io"
    };
    let reply = format!(
        "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\
         X-Stream-Protocol-Version: {proto}\r\n\r\n"
    );
    if conn.write_all(reply.as_bytes()).is_err() {
        return;
    }
    let mut session = Session::new(Config::default());
    let mut streams = Streams::new();
    let mut buf = vec![0u8; 64 * 1024];
    // kubectl writes its GOAWAY and exits: a reply of ours that meets its closed
    // socket fails, but what it sent before it closed is still ours to read, so a
    // failed write ends the writing, never the reading.
    let mut writable = true;
    loop {
        let n = match conn.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        session.feed(&buf[..n]);
        let mut going = true;
        loop {
            match session.poll_event() {
                Ok(Some(ev)) => {
                    log.lock()
                        .expect("log")
                        .push(format!("{ev:?}").chars().take(120).collect());
                    going &= handler(&mut session, ev, &mut streams);
                }
                Ok(None) => break,
                Err(e) => {
                    log.lock().expect("log").push(format!("error: {e}"));
                    going = false;
                    break;
                }
            }
        }
        let out = session.take_output();
        if writable && conn.write_all(&out).is_err() {
            writable = false;
        }
        if !going {
            break;
        }
    }
    let _ = conn.shutdown(Shutdown::Both);
    log.lock().expect("log").push(ENDED.to_string());
}

/// Replies to every stream, with its own headers echoed (kubectl ignores them, but
/// spdystream's framer must inflate our header block to read the frame); remembers
/// the stream under its `streamtype` (and `requestid`).
fn open(s: &mut Session, stream_id: u32, headers: &[(String, String)], streams: &mut Streams) {
    let get = |n: &str| {
        headers
            .iter()
            .find(|(k, _)| k == n)
            .map_or("", |(_, v)| v.as_str())
    };
    let key = format!("{}{}", get("streamtype"), get("requestid"));
    streams.insert(key, stream_id);
    let mut echoed = headers.to_vec();
    echoed.push(("x-rkubelet".into(), "spdy".into()));
    s.reply(stream_id, echoed, false).expect("reply");
}

/// exec: stdin echoed to stdout as it comes; at stdin's end, stdout and stderr close
/// and the error stream carries a v4 `Status` with exit code 3.
fn exec_echo(s: &mut Session, ev: Event, streams: &mut Streams) -> bool {
    match ev {
        Event::Opened {
            stream_id, headers, ..
        } => open(s, stream_id, &headers, streams),
        Event::Data {
            stream_id,
            data,
            fin,
        } if Some(&stream_id) == streams.get("stdin") => {
            let out = streams["stdout"];
            s.send_data(out, &data, false).expect("stdout");
            s.consumed(stream_id, data.len());
            if fin {
                s.close(out).expect("close stdout");
                s.close(streams["stderr"]).expect("close stderr");
                let status = r#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: exit code 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#;
                s.send_data(streams["error"], status.as_bytes(), true)
                    .expect("error stream");
            }
        }
        Event::GoAway { .. } => return false,
        _ => {}
    }
    true
}

/// port-forward: each data stream's bytes come back inverted (XOR 0xff); a data
/// stream the client closes is closed with its error stream.
fn forward_echo(s: &mut Session, ev: Event, streams: &mut Streams) -> bool {
    match ev {
        Event::Opened {
            stream_id, headers, ..
        } => open(s, stream_id, &headers, streams),
        Event::Data {
            stream_id,
            data,
            fin,
        } => {
            let Some((key, _)) = streams.iter().find(|(_, id)| **id == stream_id) else {
                return true;
            };
            if !key.starts_with("data") {
                return true; // the client's half-close of an error stream
            }
            let error_key = key.replacen("data", "error", 1);
            let inverted: Vec<u8> = data.iter().map(|b| b ^ 0xff).collect();
            s.send_data(stream_id, &inverted, false).expect("data");
            s.consumed(stream_id, data.len());
            if fin {
                s.close(stream_id).expect("close data");
                if let Some(e) = streams.get(&error_key) {
                    let _ = s.close(*e);
                }
            }
        }
        Event::GoAway { .. } => return false,
        _ => {}
    }
    true
}

/// kubectl port-forward runs until killed: killed (and reaped) when the test ends,
/// whatever way it ends.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn kubectl_exec_over_spdy_takes_our_replies_data_and_exit_code() {
    let standin = StandIn::start(exec_echo);
    let input: Vec<u8> = (0..256 * 1024u32).map(|i| (i % 251) as u8).collect();
    let mut child = standin
        .kubectl(true, &["exec", "-i", "p", "--", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl");
    let mut stdin = child.stdin.take().expect("stdin");
    let feed = input.clone();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&feed);
    });
    let out = child.wait_with_output().expect("kubectl");
    writer.join().expect("writer");
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("command terminated with exit code 3"),
        "{}",
        text(&out)
    );
    assert_eq!(out.stdout.len(), input.len(), "{}", text(&out));
    assert!(out.stdout == input, "stdout differs from stdin");
    let log = standin.log(1);
    let opened: Vec<&String> = log.iter().filter(|l| l.starts_with("Opened")).collect();
    assert_eq!(opened.len(), 4, "{log:#?}");
    assert!(log.iter().any(|l| l.starts_with("GoAway")), "{log:#?}");
    assert!(!log.iter().any(|l| l.starts_with("error")), "{log:#?}");
}

#[test]
fn kubectl_port_forward_over_spdy_relays_our_bytes() {
    let standin = StandIn::start(forward_echo);
    let local = free_port();
    let child = standin
        .kubectl(false, &["port-forward", "p", &format!("{local}:80")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl");
    let _kill = KillOnDrop(child);
    let mut conn = wait_for("kubectl to listen", Duration::from_secs(30), || {
        TcpStream::connect(("127.0.0.1", local)).ok()
    });
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    // Two connections: two pairs of streams (requestid 0 and 1) on one session.
    for round in 0..2 {
        let big: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
        let want: Vec<u8> = big.iter().map(|b| b ^ 0xff).collect();
        let mut reader = conn.try_clone().expect("clone");
        let read = std::thread::spawn(move || {
            let mut got = Vec::new();
            let _ = reader.read_to_end(&mut got);
            got
        });
        conn.write_all(&big).expect("write");
        conn.shutdown(Shutdown::Write).expect("half-close");
        let got = read.join().expect("reader");
        assert_eq!(got.len(), want.len(), "round {round}");
        assert!(got == want, "round {round}: relayed bytes differ");
        if round == 0 {
            conn = TcpStream::connect(("127.0.0.1", local)).expect("second connection");
            conn.set_read_timeout(Some(Duration::from_secs(30)))
                .expect("timeout");
        }
    }
    // kubectl is still running: every stream it opened has carried bytes back.
    let log = standin.log(0);
    let opened = log.iter().filter(|l| l.starts_with("Opened")).count();
    assert_eq!(opened, 4, "{log:#?}");
    assert!(!log.iter().any(|l| l.starts_with("error")), "{log:#?}");
}
