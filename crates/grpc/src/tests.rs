//! The channel's tests against a fake HTTP/2 server on a Unix socket of the test's own
//! (written with this crate's framing and HPACK): calls from many threads multiplexed
//! on one connection, a call that never gets an answer failing at its deadline while
//! the others go on, error statuses, server streaming and its cancel, GOAWAY and a
//! closed connection followed by a reconnect.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base::loops::{shutdown_channel, Loops, Shutdown};
use base::testutil::{spawn_named, TempDir};

use super::*;

/// How the fake server answers a method.
fn answer(path: &str, request: &[u8], stream: u32, out: &mut Vec<u8>) -> Option<&'static str> {
    let mut ok_headers = vec![0x88]; // :status: 200
    hpack::encode_literal(&mut ok_headers, 31, "", "application/grpc");
    let trailers = |code: u32, message: &str| {
        let mut t = Vec::new();
        hpack::encode_literal(&mut t, 0, "grpc-status", &code.to_string());
        if !message.is_empty() {
            hpack::encode_literal(&mut t, 0, "grpc-message", message);
        }
        t
    };
    let body = |out: &mut Vec<u8>, msg: &[u8]| {
        frame::encode(out, frame::DATA, 0, stream, &message::frame_message(msg));
    };
    match path {
        "/t.S/Echo" => {
            frame::encode(out, frame::HEADERS, frame::END_HEADERS, stream, &ok_headers);
            // The request's message back, its length prefix included.
            frame::encode(out, frame::DATA, 0, stream, request);
            let t = trailers(0, "");
            frame::encode(
                out,
                frame::HEADERS,
                frame::END_HEADERS | frame::END_STREAM,
                stream,
                &t,
            );
        }
        "/t.S/Missing" => {
            let mut only = ok_headers.clone();
            only.extend(trailers(12, "unknown%20method%20%22Missing%22"));
            frame::encode(
                out,
                frame::HEADERS,
                frame::END_HEADERS | frame::END_STREAM,
                stream,
                &only,
            );
        }
        // Sent by `serve` itself: it must wait for window.
        "/t.S/Big" => return Some("big"),
        "/t.S/Watch" => {
            frame::encode(out, frame::HEADERS, frame::END_HEADERS, stream, &ok_headers);
            for m in [&b"one"[..], b"two", b"three"] {
                body(out, m);
            }
            let t = trailers(0, "");
            frame::encode(
                out,
                frame::HEADERS,
                frame::END_HEADERS | frame::END_STREAM,
                stream,
                &t,
            );
        }
        "/t.S/Forever" => {
            frame::encode(out, frame::HEADERS, frame::END_HEADERS, stream, &ok_headers);
            body(out, b"first");
        }
        // No answer at all.
        "/t.S/Slow" => {}
        "/t.S/Bye" => return Some("goaway"),
        "/t.S/Hangup" => return Some("close"),
        _ => {}
    }
    None
}

/// Serves one connection: reads frames, answers each request when it ends, and keeps
/// the server side of flow control simple (windows large enough, WINDOW_UPDATEs
/// ignored). Returns when the client goes or the script says so.
fn serve(mut s: UnixStream, connections: Arc<AtomicUsize>) {
    connections.fetch_add(1, Ordering::SeqCst);
    let mut preface = [0u8; 24];
    if s.read_exact(&mut preface).is_err() {
        return;
    }
    assert_eq!(&preface[..], frame::PREFACE);
    let mut out = Vec::new();
    frame::encode(&mut out, frame::SETTINGS, 0, 0, &[]);
    // Room for the client to send: its requests are small, but say so anyway.
    frame::encode(
        &mut out,
        frame::WINDOW_UPDATE,
        0,
        0,
        &(1u32 << 24).to_be_bytes(),
    );
    let _ = s.write_all(&out);
    let mut decoder = hpack::Decoder::new();
    let mut requests: HashMap<u32, (String, Vec<u8>)> = HashMap::new();
    let mut reader = s.try_clone().expect("clone");
    loop {
        let Ok((h, p)) = frame::read(&mut reader) else {
            return;
        };
        let mut out = Vec::new();
        let ends = h.flags & frame::END_STREAM != 0;
        match h.kind {
            frame::HEADERS => {
                let fields = decoder
                    .decode(frame::header_fragment(&p, h.flags))
                    .expect("request headers");
                let path = fields
                    .iter()
                    .find(|(n, _)| n == b":path")
                    .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
                    .unwrap_or_default();
                assert!(fields.iter().any(|(n, v)| n == b"te" && v == b"trailers"));
                requests.insert(h.stream, (path, Vec::new()));
            }
            frame::DATA => {
                if let Some((_, body)) = requests.get_mut(&h.stream) {
                    body.extend_from_slice(&p);
                }
            }
            frame::SETTINGS if h.flags & frame::ACK == 0 => {
                frame::encode(&mut out, frame::SETTINGS, frame::ACK, 0, &[]);
            }
            _ => {}
        }
        if ends {
            if let Some((path, body)) = requests.remove(&h.stream) {
                match answer(&path, &body, h.stream, &mut out) {
                    Some("goaway") => {
                        // Refuse this stream and every later one, then close.
                        let last = h.stream.saturating_sub(2);
                        frame::encode(
                            &mut out,
                            frame::GOAWAY,
                            0,
                            0,
                            &frame::goaway_payload(last, 0),
                        );
                        let _ = s.write_all(&out);
                        return;
                    }
                    Some("big") if send_big(&mut s, &mut reader, h.stream, &mut out).is_ok() => {}
                    Some(_) => return,
                    None => {}
                }
            }
        }
        if !out.is_empty() && s.write_all(&out).is_err() {
            return;
        }
    }
}

/// 3 MiB in 16 KiB frames, three times the client's stream window: sent as the
/// client gives window back (its WINDOW_UPDATEs read in between), so a client that
/// does not would stall here and fail its deadline. Stops when the client resets the
/// stream.
fn send_big(
    s: &mut UnixStream,
    reader: &mut UnixStream,
    stream: u32,
    out: &mut Vec<u8>,
) -> std::io::Result<()> {
    let mut ok_headers = vec![0x88];
    hpack::encode_literal(&mut ok_headers, 31, "", "application/grpc");
    frame::encode(out, frame::HEADERS, frame::END_HEADERS, stream, &ok_headers);
    s.write_all(&std::mem::take(out))?;
    let mut window = conn::STREAM_WINDOW;
    let msg = message::frame_message(&vec![9u8; 3 << 20]);
    for chunk in msg.chunks(frame::MAX_FRAME_SIZE) {
        while window < chunk.len() as i64 {
            let (h, p) = frame::read(reader).map_err(|_| std::io::ErrorKind::UnexpectedEof)?;
            if h.kind == frame::WINDOW_UPDATE && h.stream == stream {
                window += i64::from(frame::u32_at(&p, 0, true).unwrap_or(0));
            }
            if h.kind == frame::RST_STREAM && h.stream == stream {
                // The client gave up on it (a message over its limit).
                return Ok(());
            }
        }
        window -= chunk.len() as i64;
        let mut f = Vec::new();
        frame::encode(&mut f, frame::DATA, 0, stream, chunk);
        s.write_all(&f)?;
    }
    let mut t = Vec::new();
    hpack::encode_literal(&mut t, 0, "grpc-status", "0");
    frame::encode(
        out,
        frame::HEADERS,
        frame::END_HEADERS | frame::END_STREAM,
        stream,
        &t,
    );
    Ok(())
}

/// A fake server on `dir/grpc.sock`: one thread per connection; counts connections.
fn server(dir: &Path) -> (std::path::PathBuf, Arc<AtomicUsize>) {
    let path = dir.join("grpc.sock");
    let listener = UnixListener::bind(&path).expect("bind");
    let connections = Arc::new(AtomicUsize::new(0));
    let count = connections.clone();
    spawn_named("fake-h2", move || {
        for s in listener.incoming().flatten() {
            let count = count.clone();
            spawn_named("fake-h2-conn", move || serve(s, count));
        }
    });
    (path, connections)
}

fn channel(path: &Path) -> (Channel, Shutdown) {
    let (shutdown, stop) = shutdown_channel();
    let ch = Channel::new(
        Endpoint::Unix(path.to_path_buf()),
        Options::new("grpc-test", "rkubelet-test"),
        &Loops::new(stop),
    );
    (ch, shutdown)
}

const T: Duration = Duration::from_secs(10);

#[test]
fn concurrent_calls_share_one_connection() {
    let dir = TempDir::new("grpc-mux");
    let (path, connections) = server(&dir.0);
    let (ch, _shutdown) = channel(&path);
    let ch = Arc::new(ch);
    // A call that is never answered holds its stream open all along.
    let slow = {
        let ch = ch.clone();
        spawn_named("slow", move || {
            ch.unary("/t.S/Slow", b"", Duration::from_secs(3))
        })
    };
    let threads: Vec<_> = (0..16)
        .map(|i| {
            let ch = ch.clone();
            spawn_named("caller", move || {
                for j in 0..20 {
                    let msg = format!("thread {i} call {j}");
                    let reply = ch.unary("/t.S/Echo", msg.as_bytes(), T).expect("echo");
                    assert_eq!(reply, msg.as_bytes());
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a caller panicked");
    }
    assert_eq!(connections.load(Ordering::SeqCst), 1);
    let e = slow.join().expect("joins").expect_err("never answered");
    assert_eq!(e.code(), Code::DeadlineExceeded);
}

#[test]
fn a_deadline_fails_the_call_and_resets_only_its_stream() {
    let dir = TempDir::new("grpc-deadline");
    let (path, connections) = server(&dir.0);
    let (ch, _shutdown) = channel(&path);
    let began = Instant::now();
    let e = ch
        .unary("/t.S/Slow", b"", Duration::from_millis(50))
        .expect_err("no answer");
    assert!(matches!(e, GrpcError::DeadlineExceeded { .. }), "{e}");
    assert!(began.elapsed() < Duration::from_secs(2));
    assert_eq!(ch.unary("/t.S/Echo", b"after", T).expect("echo"), b"after");
    assert_eq!(connections.load(Ordering::SeqCst), 1);
}

#[test]
fn statuses_come_back_as_errors_with_their_code() {
    let dir = TempDir::new("grpc-status");
    let (path, _) = server(&dir.0);
    let (ch, _shutdown) = channel(&path);
    let e = ch.unary("/t.S/Missing", b"", T).expect_err("unimplemented");
    assert_eq!(e.code(), Code::Unimplemented);
    assert_eq!(
        e.to_string(),
        format!(
            "/t.S/Missing on unix://{}: rpc error: code = Unimplemented desc = unknown method \"Missing\"",
            path.display()
        )
    );
    let e = ch.unary("/t.S/Watch", b"", T).expect_err("three messages");
    assert_eq!(e.code(), Code::Internal);
}

#[test]
fn a_reply_larger_than_the_windows_is_read_whole() {
    let dir = TempDir::new("grpc-big");
    let (path, _) = server(&dir.0);
    let (ch, _shutdown) = channel(&path);
    let reply = ch.unary("/t.S/Big", b"", T).expect("big");
    assert_eq!(reply.len(), 3 << 20);
    let (small, _shutdown2) = {
        let (shutdown, stop) = shutdown_channel();
        let mut o = Options::new("grpc-test", "rkubelet-test");
        o.max_message = 1 << 20;
        (
            Channel::new(Endpoint::Unix(path.clone()), o, &Loops::new(stop)),
            shutdown,
        )
    };
    let e = small.unary("/t.S/Big", b"", T).expect_err("over the limit");
    assert!(
        matches!(e, GrpcError::TooLarge { size, .. } if size == 3 << 20),
        "{e}"
    );
    assert_eq!(small.unary("/t.S/Echo", b"x", T).expect("echo after"), b"x");
}

#[test]
fn server_streaming_ends_on_trailers_or_cancel() {
    let dir = TempDir::new("grpc-stream");
    let (path, _) = server(&dir.0);
    let (ch, _shutdown) = channel(&path);
    let got: Vec<Vec<u8>> = ch
        .server_streaming("/t.S/Watch", b"", Some(T))
        .expect("starts")
        .collect::<Result<_, _>>()
        .expect("all messages");
    assert_eq!(got, [b"one".to_vec(), b"two".to_vec(), b"three".to_vec()]);
    let mut stream = ch
        .server_streaming("/t.S/Forever", b"", None)
        .expect("starts");
    assert_eq!(stream.next().map(|r| r.ok()), Some(Some(b"first".to_vec())));
    let cancel = stream.canceller();
    let canceller = spawn_named("cancel", move || cancel.cancel());
    canceller.join().expect("joins");
    let e = stream.next().expect("an item").expect_err("cancelled");
    assert_eq!(e.code(), Code::Cancelled);
    assert!(stream.next().is_none());
    drop(stream);
    let mut timed = ch
        .server_streaming("/t.S/Forever", b"", Some(Duration::from_millis(50)))
        .expect("starts");
    assert!(timed.next().is_some_and(|r| r.is_ok()));
    let e = timed.next().expect("an item").expect_err("deadline");
    assert_eq!(e.code(), Code::DeadlineExceeded);
}

#[test]
fn goaway_and_a_closed_connection_are_followed_by_a_new_connection() {
    let dir = TempDir::new("grpc-goaway");
    let (path, connections) = server(&dir.0);
    let (ch, _shutdown) = channel(&path);
    assert_eq!(ch.unary("/t.S/Echo", b"1", T).expect("first"), b"1");
    let e = ch.unary("/t.S/Bye", b"", T).expect_err("refused by GOAWAY");
    assert_eq!(e.code(), Code::Unavailable, "{e}");
    assert_eq!(ch.unary("/t.S/Echo", b"2", T).expect("after GOAWAY"), b"2");
    assert_eq!(connections.load(Ordering::SeqCst), 2);
    let e = ch.unary("/t.S/Hangup", b"", T).expect_err("hung up");
    assert_eq!(e.code(), Code::Unavailable, "{e}");
    assert_eq!(
        ch.unary("/t.S/Echo", b"3", T).expect("after the hangup"),
        b"3"
    );
    assert_eq!(connections.load(Ordering::SeqCst), 3);
}

#[test]
fn a_missing_socket_is_a_connect_error() {
    let dir = TempDir::new("grpc-none");
    let (ch, _shutdown) = channel(&dir.0.join("none.sock"));
    let e = ch.unary("/t.S/Echo", b"", T).expect_err("nothing listens");
    assert!(matches!(e, GrpcError::Connect { .. }), "{e}");
    assert_eq!(e.code(), Code::Unavailable);
}
