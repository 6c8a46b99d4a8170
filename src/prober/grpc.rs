//! The gRPC probe: one `grpc.health.v1.Health/Check` call over plaintext HTTP/2 (upstream
//! `pkg/probe/grpc/grpc.go`), on a fresh connection per probe as upstream dials one.
//!
//! The HTTP/2 framing, HPACK and gRPC's status are `crates/grpc`'s (the CRI client's
//! too); this module has the health protocol's two messages (protobuf by hand: one
//! string field out, one enum field back) and upstream's verdicts, so a call the
//! server refuses reads as upstream words it:
//! `rpc error: code = NotFound desc = unknown service`.

use std::net::ToSocketAddrs;
use std::time::Duration;

use super::{Outcome, USER_AGENT};
use base::loops::Loops;
use base::netutil::join_host_port;
use grpc::{Channel, Endpoint, GrpcError, Options};
use runtime::container::ProbeResult;

#[cfg(any(test, feature = "fuzzing"))]
use grpc::frame::unpad;
#[cfg(test)]
use grpc::{
    frame::PADDED,
    hpack::{encode_int as hpack_int, encode_str as hpack_str},
    message::frame_message as grpc_message,
};

/// The method's path.
const PATH: &str = "/grpc.health.v1.Health/Check";

/// gRPC's `Unimplemented`, which upstream words on its own.
const UNIMPLEMENTED: u32 = 12;
/// gRPC's `DeadlineExceeded`, which upstream reports as a timeout.
const DEADLINE_EXCEEDED: u32 = 4;
/// gRPC's `Internal`.
const INTERNAL: u32 = 13;

/// Runs one health check against `host:port` for `service`, within `timeout`; the
/// connection's reader thread (`grpc-probe`) is spawned through `loops`.
pub(crate) fn check(
    host: &str,
    port: u16,
    service: &str,
    timeout: Duration,
    loops: &Loops,
) -> Outcome {
    let addr = join_host_port(host, port);
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
    let endpoint = Endpoint::Tcp {
        addr: sock,
        authority: addr.clone(),
    };
    let channel = Channel::new(endpoint, Options::new("grpc-probe", USER_AGENT), loops);
    let reply = match channel.unary(PATH, &health_request(service), timeout) {
        Ok(msg) => Reply {
            status: message_status(&msg),
            http_status: Some(200),
            grpc_status: Some(0),
            grpc_message: String::new(),
        },
        Err(GrpcError::Status { code, message, .. }) => Reply {
            http_status: Some(200),
            grpc_status: Some(code.as_u32()),
            grpc_message: message,
            status: None,
        },
        Err(GrpcError::Connect { source, .. }) => return connect_failed(&source),
        Err(GrpcError::DeadlineExceeded { .. }) => {
            return failure(format!(
                "timeout: health rpc did not complete within {}",
                base::time::go_duration(timeout)
            ))
        }
        Err(e) => return failure(format!("error: health rpc probe failed: {e}")),
    };
    judge(&reply, timeout)
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

/// Fuzzing (`crate::fuzzing`): a response's header blocks (HPACK, one decoder as per
/// connection) and its DATA, read as a reply is read, then judged.
#[cfg(feature = "fuzzing")]
pub(crate) fn fuzz_response(blocks: &[&[u8]], data: &[u8]) {
    let mut reply = Reply::default();
    let mut hpack = loona_hpack::Decoder::new();
    hpack.set_max_allowed_table_size(4096);
    for block in blocks {
        let fragment = grpc::frame::header_fragment(block, block.first().copied().unwrap_or(0));
        if let Ok(headers) = hpack.decode(fragment) {
            read_headers(&mut reply, &headers);
        }
    }
    reply.status = response_status(unpad(data, data.first().copied().unwrap_or(0)));
    let _ = judge(&reply, Duration::from_secs(1));
}

/// Takes `:status`, `grpc-status` and `grpc-message` from decoded headers or trailers
/// (the fuzz entry's and the tests' reading of a reply; calls get them from
/// `crates/grpc`).
#[cfg(any(test, feature = "fuzzing"))]
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

/// `HealthCheckResponse.status` from a response's DATA bytes (one length-prefixed
/// message).
#[cfg(any(test, feature = "fuzzing"))]
fn response_status(data: &[u8]) -> Option<u64> {
    if data.len() < 5 || data[0] != 0 {
        return None; // no message, or a compressed one (never asked for)
    }
    let len = u32::from_be_bytes([data[1], data[2], data[3], data[4]]) as usize;
    message_status(data.get(5..5 + len)?)
}

/// `HealthCheckResponse.status` (field 1, varint) from the message; a message without
/// the field has status 0 (UNKNOWN), as protobuf defaults.
fn message_status(msg: &[u8]) -> Option<u64> {
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
                i = i.saturating_add(n);
            }
            (_, 1) => i = i.saturating_add(8),
            (_, 5) => i = i.saturating_add(4),
            _ => return None,
        }
    }
    Some(status)
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
