//! gRPC's status codes, the call error, and how a finished call's status is read
//! from its trailers (PROTOCOL-HTTP2.md: `grpc-status`, `grpc-message`
//! percent-encoded; no `grpc-status` → judged by the HTTP status as grpc-go's
//! `HTTPStatusConvTab`).

use std::fmt;
use std::time::Duration;

use crate::hpack::Fields;

/// A gRPC status code (`google.golang.org/grpc/codes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    Ok,
    Cancelled,
    Unknown,
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Aborted,
    OutOfRange,
    Unimplemented,
    Internal,
    Unavailable,
    DataLoss,
    Unauthenticated,
    /// A code gRPC does not define.
    Other(u32),
}

/// The codes in number order.
const CODES: [Code; 17] = [
    Code::Ok,
    Code::Cancelled,
    Code::Unknown,
    Code::InvalidArgument,
    Code::DeadlineExceeded,
    Code::NotFound,
    Code::AlreadyExists,
    Code::PermissionDenied,
    Code::ResourceExhausted,
    Code::FailedPrecondition,
    Code::Aborted,
    Code::OutOfRange,
    Code::Unimplemented,
    Code::Internal,
    Code::Unavailable,
    Code::DataLoss,
    Code::Unauthenticated,
];

impl Code {
    /// The code numbered `n`.
    pub fn from_u32(n: u32) -> Code {
        usize::try_from(n)
            .ok()
            .and_then(|i| CODES.get(i))
            .copied()
            .unwrap_or(Code::Other(n))
    }

    /// Its number.
    pub fn as_u32(self) -> u32 {
        match self {
            Code::Other(n) => n,
            c => CODES.iter().position(|k| *k == c).unwrap_or(2) as u32,
        }
    }
}

/// grpc-go's `codes.Code.String()` (`Canceled` with one L, `Code(n)` for others).
impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Code::Cancelled => f.write_str("Canceled"),
            Code::Other(n) => write!(f, "Code({n})"),
            c => fmt::Debug::fmt(c, f),
        }
    }
}

/// A call that did not return a message. Each variant names the method and the
/// endpoint; [`GrpcError::code`] is the gRPC code a caller branches on.
#[derive(Debug, thiserror::Error)]
pub enum GrpcError {
    /// The connection could not be made.
    #[error("cannot connect to {endpoint}")]
    Connect {
        endpoint: String,
        #[source]
        source: std::io::Error,
    },
    /// The server answered with a status other than OK.
    #[error("{method} on {endpoint}: rpc error: code = {code} desc = {message}")]
    Status {
        method: String,
        endpoint: String,
        code: Code,
        message: String,
    },
    /// The call's deadline passed before its answer came.
    #[error("{method} on {endpoint}: no answer within {timeout:?}")]
    DeadlineExceeded {
        method: String,
        endpoint: String,
        timeout: Duration,
    },
    /// The connection broke or went away (GOAWAY) before the call finished; the next
    /// call makes a new one.
    #[error("{method} on {endpoint}: {reason}")]
    Unavailable {
        method: String,
        endpoint: String,
        reason: String,
    },
    /// The server reset the call's stream (RST_STREAM with an HTTP/2 error code).
    #[error("{method} on {endpoint}: stream reset by the server (code {code})")]
    Reset {
        method: String,
        endpoint: String,
        code: u32,
    },
    /// A message over the size limit, either way.
    #[error("{method} on {endpoint}: a message of {size} bytes, over the {max}-byte limit")]
    TooLarge {
        method: String,
        endpoint: String,
        size: usize,
        max: usize,
    },
    /// A streaming call was cancelled by its caller.
    #[error("{method} on {endpoint}: cancelled")]
    Cancelled { method: String, endpoint: String },
}

impl GrpcError {
    /// The gRPC code of the failure, as grpc-go reports each kind to its caller.
    pub fn code(&self) -> Code {
        match self {
            GrpcError::Status { code, .. } => *code,
            GrpcError::DeadlineExceeded { .. } => Code::DeadlineExceeded,
            GrpcError::Connect { .. } | GrpcError::Unavailable { .. } => Code::Unavailable,
            // grpc-go's mapping of HTTP/2 error codes (`http2ErrConvTab`).
            GrpcError::Reset { code, .. } => match code {
                0x7 => Code::Unavailable,       // REFUSED_STREAM
                0x8 => Code::Cancelled,         // CANCEL
                0xb => Code::ResourceExhausted, // ENHANCE_YOUR_CALM
                0xc => Code::PermissionDenied,  // INADEQUATE_SECURITY
                _ => Code::Internal,
            },
            GrpcError::TooLarge { .. } => Code::ResourceExhausted,
            GrpcError::Cancelled { .. } => Code::Cancelled,
        }
    }
}

/// A finished call's status: the code and the decoded message.
pub(crate) fn from_fields(headers: Option<&Fields>, trailers: Option<&Fields>) -> (Code, String) {
    let find = |fields: Option<&Fields>, name: &[u8]| {
        fields.and_then(|f| {
            f.iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| String::from_utf8_lossy(v).trim().to_string())
        })
    };
    // Trailers, or the headers of a trailers-only reply.
    let source = if find(trailers, b"grpc-status").is_some() {
        trailers
    } else {
        headers
    };
    if let Some(code) = find(source, b"grpc-status") {
        let code = match code.parse::<u32>() {
            Ok(n) => Code::from_u32(n),
            Err(_) => {
                return (
                    Code::Internal,
                    format!("transport: malformed grpc-status: {code:?}"),
                )
            }
        };
        let message = find(source, b"grpc-message").unwrap_or_default();
        return (code, percent_decode(&message));
    }
    match find(headers, b":status").and_then(|s| s.parse::<u16>().ok()) {
        Some(http) if http != 200 => (
            code_of_http_status(http),
            format!("unexpected HTTP status code received from server: {http}"),
        ),
        _ => (
            Code::Internal,
            "server closed the stream without sending trailers".to_string(),
        ),
    }
}

/// grpc-go's code for a reply without `grpc-status` (`HTTPStatusConvTab`).
fn code_of_http_status(http: u16) -> Code {
    match http {
        400 => Code::Internal,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::Unimplemented,
        429 | 502..=504 => Code::Unavailable,
        _ => Code::Unknown,
    }
}

/// gRPC's percent-decoding of `grpc-message` (PROTOCOL-HTTP2.md): `%XX` is a byte,
/// anything else itself; invalid UTF-8 is replaced.
pub(crate) fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let hex = |c: u8| char::from(c).to_digit(16).map(|d| d as u8);
    let mut i = 0;
    while i < b.len() {
        let byte = match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(hi), Some(lo)) => {
                i += 2;
                hi << 4 | lo
            }
            (c, _, _) => c,
        };
        out.push(byte);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A `grpc-timeout` value: the most precise unit that fits gRPC's 8 digits.
pub(crate) fn encode_timeout(d: Duration) -> String {
    let units: [(u128, char); 5] = [
        (d.as_nanos(), 'n'),
        (d.as_micros(), 'u'),
        (d.as_millis().max(1), 'm'),
        (u128::from(d.as_secs()), 'S'),
        (u128::from(d.as_secs() / 60), 'M'),
    ];
    for (v, unit) in units {
        if v > 0 && v < 100_000_000 {
            return format!("{v}{unit}");
        }
    }
    format!("{}H", (d.as_secs() / 3600).min(99_999_999))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> Fields {
        pairs
            .iter()
            .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn codes_name_as_grpc_go_does() {
        assert_eq!(Code::from_u32(12), Code::Unimplemented);
        assert_eq!(Code::Unimplemented.as_u32(), 12);
        assert_eq!(Code::from_u32(99), Code::Other(99));
        assert_eq!(Code::Other(99).as_u32(), 99);
        assert_eq!(Code::Cancelled.to_string(), "Canceled");
        assert_eq!(Code::NotFound.to_string(), "NotFound");
        assert_eq!(Code::Other(99).to_string(), "Code(99)");
    }

    #[test]
    fn status_comes_from_trailers_or_a_trailers_only_reply() {
        let headers = fields(&[(":status", "200"), ("content-type", "application/grpc")]);
        let trailers = fields(&[
            ("grpc-status", "5"),
            ("grpc-message", "no%20such%20pod%3A%20%E2%9C%93"),
        ]);
        assert_eq!(
            from_fields(Some(&headers), Some(&trailers)),
            (Code::NotFound, "no such pod: ✓".to_string())
        );
        let only = fields(&[
            (":status", "200"),
            ("grpc-status", "12"),
            ("grpc-message", "unknown service"),
        ]);
        assert_eq!(
            from_fields(Some(&only), None),
            (Code::Unimplemented, "unknown service".into())
        );
        assert_eq!(
            from_fields(Some(&fields(&[(":status", "404")])), None),
            (
                Code::Unimplemented,
                "unexpected HTTP status code received from server: 404".into()
            )
        );
        assert_eq!(from_fields(Some(&headers), None).0, Code::Internal);
        assert_eq!(
            from_fields(None, Some(&fields(&[("grpc-status", "x")]))).0,
            Code::Internal
        );
    }

    #[test]
    fn percent_decoding_keeps_what_is_not_an_escape() {
        assert_eq!(percent_decode("100%25 sure"), "100% sure");
        assert_eq!(percent_decode("50% off %zz %4"), "50% off %zz %4");
        assert_eq!(percent_decode("%ff"), "\u{fffd}");
    }

    #[test]
    fn timeouts_take_the_most_precise_unit_that_fits() {
        assert_eq!(encode_timeout(Duration::from_millis(1)), "1000000n");
        assert_eq!(encode_timeout(Duration::from_secs(2)), "2000000u");
        assert_eq!(encode_timeout(Duration::from_secs(120)), "120000m");
        assert_eq!(encode_timeout(Duration::from_secs(200_000)), "200000S");
        assert_eq!(encode_timeout(Duration::ZERO), "1m");
    }
}
