//! The gRPC probe: one `grpc.health.v1.Health/Check` call over plaintext HTTP/2 (upstream
//! `pkg/probe/grpc/grpc.go`), on a plain blocking `TcpStream`.
//!
//! The Rust HTTP/2 and gRPC clients all run on an async runtime, which rkubelet does
//! not have, and a health check needs very little of HTTP/2: the connection preface, a
//! SETTINGS frame, one HEADERS frame (HPACK literals, no Huffman, no dynamic table),
//! one DATA frame, then reading frames until the stream ends — answering the server's
//! SETTINGS and PINGs on the way. The answer is in the DATA frame
//! (`HealthCheckResponse.status`); the response's headers and trailers (HPACK with
//! Huffman strings and a dynamic table, decoded by `loona-hpack`) carry `grpc-status`
//! and `grpc-message`, so a call the server refuses reads as upstream words it:
//! `rpc error: code = NotFound desc = unknown service`.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::{Outcome, USER_AGENT};
use base::netutil::join_host_port;
use runtime::container::ProbeResult;

/// HTTP/2's connection preface.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// The method's path.
const PATH: &str = "/grpc.health.v1.Health/Check";
/// Frames larger than this are refused (HTTP/2's default maximum frame size is 16 KiB;
/// a health answer is a few bytes).
const MAX_FRAME: usize = 1 << 20;

/// The most header-block bytes (headers and trailers, all frames) a reply may send.
const MAX_HEADER_BYTES: usize = 64 * 1024;
/// HPACK's dynamic table size: HTTP/2's default `SETTINGS_HEADER_TABLE_SIZE`, which
/// our SETTINGS leave as it is, so a server may not ask for more.
const HEADER_TABLE_SIZE: usize = 4096;

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const CONTINUATION: u8 = 0x9;

const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

/// gRPC's `Unimplemented`, which upstream words on its own.
const UNIMPLEMENTED: u32 = 12;
/// gRPC's `DeadlineExceeded`, which upstream reports as a timeout.
const DEADLINE_EXCEEDED: u32 = 4;
/// gRPC's `Internal`.
const INTERNAL: u32 = 13;

/// Runs one health check against `host:port` for `service`, within `timeout`.
pub(crate) fn check(host: &str, port: u16, service: &str, timeout: Duration) -> Outcome {
    let addr = join_host_port(host, port);
    let deadline = base::time::saturating_deadline(Instant::now(), timeout);
    let connect_failed = |e: &dyn std::fmt::Display| Outcome {
        result: ProbeResult::Failure,
        message: format!("timeout: failed to connect service {addr:?} within {timeout:?}: {e}"),
        warning: false,
    };
    let sock = match (host, port).to_socket_addrs().map(|mut a| a.next()) {
        Ok(Some(a)) => a,
        Ok(None) => return connect_failed(&"no address"),
        Err(e) => return connect_failed(&e),
    };
    let mut s = match TcpStream::connect_timeout(&sock, timeout) {
        Ok(s) => s,
        Err(e) => return connect_failed(&e),
    };
    let _ = s.set_nodelay(true);
    match call(&mut s, &addr, service, deadline, timeout) {
        Ok(reply) => judge(&reply, timeout),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            failure(format!(
                "timeout: health rpc did not complete within {}",
                base::time::go_duration(timeout)
            ))
        }
        Err(e) => failure(format!("error: health rpc probe failed: {e}")),
    }
}

/// What came back on the call's stream.
#[derive(Debug, Default, PartialEq)]
struct Reply {
    /// `HealthCheckResponse.status`, if a message came.
    status: Option<u64>,
    /// The response's `:status`.
    http_status: Option<u16>,
    /// `grpc-status`, from the trailers (or a trailers-only response).
    grpc_status: Option<u32>,
    /// `grpc-message`, percent-decoded.
    grpc_message: String,
}

/// Upstream's verdict (`pkg/probe/grpc` `Probe`) on a finished call.
fn judge(r: &Reply, timeout: Duration) -> Outcome {
    let (code, desc) = match (r.grpc_status, r.http_status) {
        (Some(0), _) => match r.status {
            Some(status) => return verdict(status),
            None => (
                INTERNAL,
                "cardinality violation: received no response message from non-streaming RPC"
                    .to_string(),
            ),
        },
        (Some(code), _) => (code, r.grpc_message.clone()),
        // No gRPC status: grpc-go judges by the HTTP status (`HTTPStatusConvTab`).
        (None, Some(http)) if http != 200 => (
            code_of_http_status(http),
            format!("unexpected HTTP status code received from server: {http}"),
        ),
        (None, _) => (
            INTERNAL,
            "server closed the stream without sending trailers".to_string(),
        ),
    };
    match code {
        UNIMPLEMENTED => failure(format!(
            "error: this server does not implement the grpc health protocol \
             (grpc.health.v1.Health): {desc}"
        )),
        DEADLINE_EXCEEDED => failure(format!(
            "timeout: health rpc did not complete within {}",
            base::time::go_duration(timeout)
        )),
        _ => failure(format!(
            "error: health rpc probe failed: rpc error: code = {} desc = {desc}",
            code_name(code)
        )),
    }
}

/// grpc-go's `codes.Code.String()`.
fn code_name(code: u32) -> String {
    const NAMES: [&str; 17] = [
        "OK",
        "Canceled",
        "Unknown",
        "InvalidArgument",
        "DeadlineExceeded",
        "NotFound",
        "AlreadyExists",
        "PermissionDenied",
        "ResourceExhausted",
        "FailedPrecondition",
        "Aborted",
        "OutOfRange",
        "Unimplemented",
        "Internal",
        "Unavailable",
        "DataLoss",
        "Unauthenticated",
    ];
    usize::try_from(code)
        .ok()
        .and_then(|i| NAMES.get(i))
        .map_or_else(|| format!("Code({code})"), |n| (*n).to_string())
}

/// grpc-go's code for a reply without `grpc-status` (`HTTPStatusConvTab`).
fn code_of_http_status(http: u16) -> u32 {
    match http {
        400 => INTERNAL,
        401 => 16, // Unauthenticated
        403 => 7,  // PermissionDenied
        404 => UNIMPLEMENTED,
        429 | 502..=504 => 14, // Unavailable
        _ => 2,                // Unknown
    }
}

fn failure(message: String) -> Outcome {
    Outcome {
        result: ProbeResult::Failure,
        message,
        warning: false,
    }
}

/// Upstream's verdict on a `HealthCheckResponse.status`.
fn verdict(status: u64) -> Outcome {
    if status == 1 {
        return Outcome {
            result: ProbeResult::Success,
            message: "service is serving".into(),
            warning: false,
        };
    }
    let name = match status {
        0 => "UNKNOWN",
        2 => "NOT_SERVING",
        3 => "SERVICE_UNKNOWN",
        _ => "UNRECOGNIZED",
    };
    failure(format!("service unhealthy (responded with {name:?})"))
}

/// Sends the call and reads frames until stream 1 ends; the response's status, if a
/// message came.
fn call(
    s: &mut TcpStream,
    authority: &str,
    service: &str,
    deadline: Instant,
    timeout: Duration,
) -> std::io::Result<Reply> {
    let mut out = PREFACE.to_vec();
    frame(&mut out, SETTINGS, 0, 0, &[]);
    frame(
        &mut out,
        HEADERS,
        END_HEADERS,
        1,
        &request_headers(authority, timeout),
    );
    frame(
        &mut out,
        DATA,
        END_STREAM,
        1,
        &grpc_message(&health_request(service)),
    );
    write(s, &out, deadline)?;
    read_reply(s, deadline)
}

/// The call's connection as the frame loop uses it: the probe's socket, each read and
/// write bounded by the call's deadline, or (fuzzing) a server's bytes in memory.
trait Wire {
    /// Fills `b`, or fails (the server closed, the deadline passed).
    fn read_exact(&mut self, b: &mut [u8], deadline: Instant) -> std::io::Result<()>;
    /// Sends all of `b`.
    fn write(&mut self, b: &[u8], deadline: Instant) -> std::io::Result<()>;
}

impl Wire for TcpStream {
    fn read_exact(&mut self, b: &mut [u8], deadline: Instant) -> std::io::Result<()> {
        read_exact(self, b, deadline)
    }

    fn write(&mut self, b: &[u8], deadline: Instant) -> std::io::Result<()> {
        write(self, b, deadline)
    }
}

/// Reads the server's frames until stream 1 ends, answering its SETTINGS and PINGs,
/// then says GOAWAY.
fn read_reply(s: &mut impl Wire, deadline: Instant) -> std::io::Result<Reply> {
    let mut data = Vec::new();
    let mut reply = Reply::default();
    let mut hpack = loona_hpack::Decoder::new();
    hpack.set_max_allowed_table_size(HEADER_TABLE_SIZE);
    // A header block being gathered (HEADERS then CONTINUATION frames), and whether
    // it ends the stream.
    let mut block: Option<(Vec<u8>, bool)> = None;
    let mut header_bytes = 0usize;
    loop {
        let mut head = [0u8; 9];
        s.read_exact(&mut head, deadline)?;
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let (ty, flags) = (head[3], head[4]);
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        if len > MAX_FRAME {
            return Err(std::io::Error::other(format!("frame of {len} bytes")));
        }
        let mut payload = vec![0u8; len];
        s.read_exact(&mut payload, deadline)?;
        if block.is_some() && ty != CONTINUATION {
            return Err(std::io::Error::other("a header block was cut off"));
        }
        let fragment = match ty {
            SETTINGS if flags & ACK == 0 => {
                s.write(&frame_bytes(SETTINGS, ACK, 0, &[]), deadline)?;
                None
            }
            PING if flags & ACK == 0 => {
                s.write(&frame_bytes(PING, ACK, 0, &payload), deadline)?;
                None
            }
            GOAWAY if data.is_empty() && reply.grpc_status.is_none() => {
                return Err(std::io::Error::other(
                    "the server closed the connection (GOAWAY)",
                ))
            }
            RST_STREAM if stream == 1 => {
                let code = payload
                    .get(..4)
                    .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
                return Err(std::io::Error::other(format!(
                    "stream reset by the server (code {code})"
                )));
            }
            DATA if stream == 1 => {
                data.extend_from_slice(unpad(&payload, flags));
                if flags & END_STREAM != 0 {
                    break;
                }
                None
            }
            HEADERS => {
                let end_stream = stream == 1 && flags & END_STREAM != 0;
                let fragment = header_fragment(&payload, flags).to_vec();
                block = Some((Vec::new(), end_stream));
                Some((fragment, flags & END_HEADERS != 0))
            }
            CONTINUATION => Some((payload, flags & END_HEADERS != 0)),
            _ => None,
        };
        // Every header block on the connection goes through the decoder, in order:
        // HPACK's dynamic table is per connection.
        let Some((fragment, end_headers)) = fragment else {
            continue;
        };
        let Some((mut bytes, end_stream)) = block.take() else {
            return Err(std::io::Error::other("a CONTINUATION without HEADERS"));
        };
        header_bytes = header_bytes.saturating_add(fragment.len());
        if header_bytes > MAX_HEADER_BYTES {
            return Err(std::io::Error::other("response headers too large"));
        }
        bytes.extend_from_slice(&fragment);
        if !end_headers {
            block = Some((bytes, end_stream));
            continue;
        }
        let headers = hpack
            .decode(&bytes)
            .map_err(|e| std::io::Error::other(format!("undecodable response headers: {e}")))?;
        if stream == 1 || end_stream {
            read_headers(&mut reply, &headers);
        }
        if end_stream {
            break;
        }
    }
    // Tell the server we are done; it may close first, so errors do not matter.
    let mut goaway = Vec::new();
    goaway.extend_from_slice(&1u32.to_be_bytes());
    goaway.extend_from_slice(&0u32.to_be_bytes());
    let _ = s.write(&frame_bytes(GOAWAY, 0, 0, &goaway), deadline);
    reply.status = response_status(&data);
    Ok(reply)
}

/// Fuzzing (`crate::fuzzing`): a response's header blocks (HPACK, one decoder as per
/// connection) and its DATA, read as [`call`] reads them, then judged.
#[cfg(feature = "fuzzing")]
pub(crate) fn fuzz_response(blocks: &[&[u8]], data: &[u8]) {
    let mut reply = Reply::default();
    let mut hpack = loona_hpack::Decoder::new();
    hpack.set_max_allowed_table_size(HEADER_TABLE_SIZE);
    for block in blocks {
        let fragment = header_fragment(block, block.first().copied().unwrap_or(0));
        if let Ok(headers) = hpack.decode(fragment) {
            read_headers(&mut reply, &headers);
        }
    }
    reply.status = response_status(unpad(data, data.first().copied().unwrap_or(0)));
    let _ = judge(&reply, Duration::from_secs(1));
}

/// Fuzzing (`crate::fuzzing`): a server's bytes after the call was sent, through the
/// frame loop of [`call`] (frame heads, padding, header blocks across CONTINUATION
/// frames, SETTINGS and PING answered, GOAWAY, RST_STREAM, the caps), then judged.
#[cfg(feature = "fuzzing")]
pub(crate) fn fuzz_frames(server: &[u8]) {
    /// The server's bytes; what the probe sends is dropped.
    struct Bytes<'a>(&'a [u8]);
    impl Wire for Bytes<'_> {
        fn read_exact(&mut self, b: &mut [u8], _deadline: Instant) -> std::io::Result<()> {
            Read::read_exact(&mut self.0, b)
        }

        fn write(&mut self, _b: &[u8], _deadline: Instant) -> std::io::Result<()> {
            Ok(())
        }
    }
    let deadline = base::time::saturating_deadline(Instant::now(), Duration::from_secs(1));
    if let Ok(reply) = read_reply(&mut Bytes(server), deadline) {
        let _ = judge(&reply, Duration::from_secs(1));
    }
}

/// Takes `:status`, `grpc-status` and `grpc-message` from decoded headers or trailers.
fn read_headers(reply: &mut Reply, headers: &[(Vec<u8>, Vec<u8>)]) {
    for (name, value) in headers {
        let value = String::from_utf8_lossy(value);
        match name.as_slice() {
            b":status" => reply.http_status = value.trim().parse().ok(),
            b"grpc-status" => reply.grpc_status = value.trim().parse().ok(),
            // gRPC percent-encodes the message (PROTOCOL-HTTP2.md).
            b"grpc-message" => {
                reply.grpc_message = percent_encoding::percent_decode_str(&value)
                    .decode_utf8_lossy()
                    .into_owned()
            }
            _ => {}
        }
    }
}

/// A HEADERS frame's header block fragment: without padding and priority fields.
fn header_fragment(p: &[u8], flags: u8) -> &[u8] {
    let p = unpad(p, flags);
    if flags & PRIORITY != 0 {
        p.get(5..).unwrap_or_default()
    } else {
        p
    }
}

/// A DATA frame's payload without its padding.
fn unpad(p: &[u8], flags: u8) -> &[u8] {
    let (start, pad) = if flags & PADDED != 0 {
        (1, usize::from(p.first().copied().unwrap_or(0)))
    } else {
        (0, 0)
    };
    p.get(start..p.len().saturating_sub(pad))
        .unwrap_or_default()
}

fn frame(out: &mut Vec<u8>, ty: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = payload.len();
    out.extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, ty, flags]);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(payload);
}

fn frame_bytes(ty: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(9 + payload.len());
    frame(&mut v, ty, flags, stream, payload);
    v
}

/// An HPACK integer with an `n`-bit prefix whose high bits are `first`.
fn hpack_int(out: &mut Vec<u8>, n: u8, first: u8, mut v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(first | v as u8);
        return;
    }
    out.push(first | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

/// An HPACK string literal, not Huffman-coded.
fn hpack_str(out: &mut Vec<u8>, s: &str) {
    hpack_int(out, 7, 0, s.len());
    out.extend_from_slice(s.as_bytes());
}

/// The request's header block: static-table indexes where HPACK has them, literals
/// without indexing otherwise (so no dynamic table state is needed).
fn request_headers(authority: &str, timeout: Duration) -> Vec<u8> {
    let mut b = Vec::new();
    b.push(0x80 | 3); // :method: POST
    b.push(0x80 | 6); // :scheme: http
    let literal = |b: &mut Vec<u8>, name_index: usize, value: &str| {
        hpack_int(b, 4, 0, name_index);
        hpack_str(b, value);
    };
    literal(&mut b, 4, PATH); // :path
    literal(&mut b, 1, authority); // :authority
    literal(&mut b, 31, "application/grpc"); // content-type
    literal(&mut b, 58, USER_AGENT); // user-agent
    for (name, value) in [
        ("te", "trailers".to_string()),
        ("grpc-timeout", format!("{}m", timeout.as_millis().max(1))),
    ] {
        b.push(0);
        hpack_str(&mut b, name);
        hpack_str(&mut b, &value);
    }
    b
}

/// `HealthCheckRequest{service}` in protobuf: field 1, a string (absent when empty).
fn health_request(service: &str) -> Vec<u8> {
    let mut m = Vec::new();
    if !service.is_empty() {
        m.push(0x0a);
        varint(&mut m, service.len() as u64);
        m.extend_from_slice(service.as_bytes());
    }
    m
}

/// A gRPC length-prefixed message (not compressed).
fn grpc_message(msg: &[u8]) -> Vec<u8> {
    let mut v = vec![0u8];
    v.extend_from_slice(&u32::try_from(msg.len()).unwrap_or(u32::MAX).to_be_bytes());
    v.extend_from_slice(msg);
    v
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn read_varint(b: &[u8], i: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*i)?;
        *i += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// `HealthCheckResponse.status` (field 1, varint) from the response's DATA bytes; a
/// message without the field has status 0 (UNKNOWN), as protobuf defaults.
fn response_status(data: &[u8]) -> Option<u64> {
    if data.len() < 5 || data[0] != 0 {
        return None; // no message, or a compressed one (never asked for)
    }
    let len = u32::from_be_bytes([data[1], data[2], data[3], data[4]]) as usize;
    let msg = data.get(5..5 + len)?;
    let mut i = 0;
    let mut status = 0;
    while i < msg.len() {
        let key = read_varint(msg, &mut i)?;
        match (key >> 3, key & 7) {
            (1, 0) => status = read_varint(msg, &mut i)?,
            (_, 0) => {
                read_varint(msg, &mut i)?;
            }
            (_, 2) => {
                let n = read_varint(msg, &mut i)? as usize;
                i += n;
            }
            (_, 1) => i += 8,
            (_, 5) => i += 4,
            _ => return None,
        }
    }
    Some(status)
}

fn left(deadline: Instant) -> std::io::Result<Duration> {
    let d = deadline.saturating_duration_since(Instant::now());
    if d.is_zero() {
        return Err(std::io::ErrorKind::TimedOut.into());
    }
    Ok(d)
}

fn write(s: &mut TcpStream, b: &[u8], deadline: Instant) -> std::io::Result<()> {
    s.set_write_timeout(Some(left(deadline)?))?;
    s.write_all(b)
}

fn read_exact(s: &mut TcpStream, b: &mut [u8], deadline: Instant) -> std::io::Result<()> {
    let mut got = 0;
    while got < b.len() {
        s.set_read_timeout(Some(left(deadline)?))?;
        match s.read(&mut b[got..]) {
            Ok(0) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the server closed the connection",
                ))
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hpack_integers_follow_rfc7541() {
        // RFC 7541 C.1.1-C.1.3: 10 with a 5-bit prefix, 1337 with a 5-bit prefix, 42 with 8.
        let mut v = Vec::new();
        hpack_int(&mut v, 5, 0, 10);
        assert_eq!(v, [10]);
        let mut v = Vec::new();
        hpack_int(&mut v, 5, 0, 1337);
        assert_eq!(v, [31, 154, 10]);
        let mut v = Vec::new();
        hpack_int(&mut v, 4, 0, 31);
        assert_eq!(v, [0x0f, 0x10]);
    }

    #[test]
    fn requests_and_responses_encode_as_protobuf() {
        assert_eq!(health_request(""), Vec::<u8>::new());
        assert_eq!(health_request("db"), [0x0a, 2, b'd', b'b']);
        assert_eq!(grpc_message(&[0x08, 0x01]), [0, 0, 0, 0, 2, 0x08, 0x01]);
        assert_eq!(response_status(&[0, 0, 0, 0, 2, 0x08, 0x01]), Some(1));
        assert_eq!(response_status(&[0, 0, 0, 0, 2, 0x08, 0x02]), Some(2));
        assert_eq!(
            response_status(&[0, 0, 0, 0, 0]),
            Some(0),
            "empty message: UNKNOWN"
        );
        assert_eq!(response_status(&[]), None);
        assert_eq!(verdict(1).result, ProbeResult::Success);
        assert_eq!(
            verdict(2).message,
            "service unhealthy (responded with \"NOT_SERVING\")"
        );
    }

    #[test]
    fn refused_calls_read_as_upstream_words_them() {
        let t = Duration::from_secs(1);
        let refused = |code: u32, message: &str| Reply {
            http_status: Some(200),
            grpc_status: Some(code),
            grpc_message: message.into(),
            ..Reply::default()
        };
        assert_eq!(
            judge(&refused(5, "unknown service"), t).message,
            "error: health rpc probe failed: rpc error: code = NotFound desc = unknown service"
        );
        assert_eq!(
            judge(&refused(UNIMPLEMENTED, "Method not found!"), t).message,
            "error: this server does not implement the grpc health protocol \
             (grpc.health.v1.Health): Method not found!"
        );
        assert_eq!(
            judge(&refused(DEADLINE_EXCEEDED, "Deadline Exceeded"), t).message,
            "timeout: health rpc did not complete within 1s"
        );
        assert_eq!(
            judge(&refused(99, "x"), t).message,
            "error: health rpc probe failed: rpc error: code = Code(99) desc = x"
        );
        let served = Reply {
            status: Some(1),
            ..refused(0, "")
        };
        assert_eq!(judge(&served, t).result, ProbeResult::Success);
        let not_grpc = Reply {
            http_status: Some(404),
            ..Reply::default()
        };
        assert!(judge(&not_grpc, t)
            .message
            .starts_with("error: this server does not implement the grpc health protocol"));
    }

    #[test]
    fn trailers_decode_with_huffman_and_percent_encoding() {
        // RFC 7541 C.4.1's Huffman-coded ":authority: www.example.com" first, then a
        // literal grpc-status and a percent-encoded grpc-message.
        let mut block = vec![0x82, 0x86, 0x84, 0x41, 0x8c];
        block.extend_from_slice(&[
            0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
        ]);
        for (name, value) in [
            ("grpc-status", "5"),
            ("grpc-message", "no%20such%20service"),
        ] {
            block.push(0);
            hpack_str(&mut block, name);
            hpack_str(&mut block, value);
        }
        let headers = loona_hpack::Decoder::new().decode(&block).expect("decodes");
        let mut reply = Reply::default();
        read_headers(&mut reply, &headers);
        assert_eq!(reply.grpc_status, Some(5));
        assert_eq!(reply.grpc_message, "no such service");
        assert!(headers
            .iter()
            .any(|(n, v)| n == b":authority" && v == b"www.example.com"));
    }

    #[test]
    fn padded_frames_are_unpadded() {
        assert_eq!(unpad(&[2, 7, 8, 0, 0], PADDED), [7, 8]);
        assert_eq!(unpad(&[7, 8], 0), [7, 8]);
    }
}
