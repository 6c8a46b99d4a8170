//! The gRPC probe: one `grpc.health.v1.Health/Check` call over plaintext HTTP/2 (upstream
//! `pkg/probe/grpc/grpc.go`), on a plain blocking `TcpStream`.
//!
//! The Rust HTTP/2 and gRPC clients all run on an async runtime, which rkubelet does
//! not have, and a health check needs very little of HTTP/2: the connection preface, a
//! SETTINGS frame, one HEADERS frame (HPACK literals, no Huffman, no dynamic table),
//! one DATA frame, then reading frames until the stream ends — answering the server's
//! SETTINGS and PINGs on the way. The answer is in the DATA frame
//! (`HealthCheckResponse.status`); response headers and trailers are not decoded (that
//! would need HPACK's Huffman table), so a call the server refuses (unknown service,
//! not a health server) reads as "ended without a response".

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::{Outcome, ProbeResult, USER_AGENT};
use crate::netutil::join_host_port;

/// HTTP/2's connection preface.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// The method's path.
const PATH: &str = "/grpc.health.v1.Health/Check";
/// Frames larger than this are refused (HTTP/2's default maximum frame size is 16 KiB;
/// a health answer is a few bytes).
const MAX_FRAME: usize = 1 << 20;

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;

const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;

/// Runs one health check against `host:port` for `service`, within `timeout`.
pub fn check(host: &str, port: u16, service: &str, timeout: Duration) -> Outcome {
    let addr = join_host_port(host, port);
    let deadline = crate::time::saturating_deadline(Instant::now(), timeout);
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
        Ok(Some(status)) => verdict(status),
        Ok(None) => failure(
            "error: health rpc probe failed: the call ended without a response \
             (an unknown service, or not a grpc.health.v1 server)"
                .into(),
        ),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            failure(format!(
                "timeout: health rpc did not complete within {timeout:?}"
            ))
        }
        Err(e) => failure(format!("error: health rpc probe failed: {e}")),
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
) -> std::io::Result<Option<u64>> {
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

    let mut data = Vec::new();
    loop {
        let mut head = [0u8; 9];
        read_exact(s, &mut head, deadline)?;
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let (ty, flags) = (head[3], head[4]);
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        if len > MAX_FRAME {
            return Err(std::io::Error::other(format!("frame of {len} bytes")));
        }
        let mut payload = vec![0u8; len];
        read_exact(s, &mut payload, deadline)?;
        match ty {
            SETTINGS if flags & ACK == 0 => {
                write(s, &frame_bytes(SETTINGS, ACK, 0, &[]), deadline)?
            }
            PING if flags & ACK == 0 => write(s, &frame_bytes(PING, ACK, 0, &payload), deadline)?,
            GOAWAY if data.is_empty() => {
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
            }
            HEADERS if stream == 1 && flags & END_STREAM != 0 => break,
            _ => {}
        }
    }
    // Tell the server we are done; it may close first, so errors do not matter.
    let mut goaway = Vec::new();
    goaway.extend_from_slice(&1u32.to_be_bytes());
    goaway.extend_from_slice(&0u32.to_be_bytes());
    let _ = s.write_all(&frame_bytes(GOAWAY, 0, 0, &goaway));
    Ok(response_status(&data))
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
    fn padded_frames_are_unpadded() {
        assert_eq!(unpad(&[2, 7, 8, 0, 0], PADDED), [7, 8]);
        assert_eq!(unpad(&[7, 8], 0), [7, 8]);
    }
}
