//! WebSocket for exec, attach and port-forward: the upgrade (written here, on the
//! taken-over connection), tungstenite's framing on top of [`Wire`] (never blocking:
//! reads answer `WouldBlock`, writes are queued), and Kubernetes's channel protocols
//! (`apimachinery/pkg/util/httpstream/wsstream`):
//!
//! - `channel.k8s.io` (and no protocol at all): each binary message starts with its
//!   channel byte (0 stdin, 1 stdout, 2 stderr, 3 error, 4 resize);
//! - `base64.channel.k8s.io`: text messages, the channel as an ASCII digit, the
//!   payload base64;
//! - `v4.channel.k8s.io`, `v4.base64.channel.k8s.io`: the same framing, and the
//!   error channel carries a `metav1.Status` JSON (with the exit code);
//! - `v5.channel.k8s.io`: v4, plus the client's CLOSE message `[255, channel]`, which
//!   ends that channel (stdin's end reaches the process as end-of-file);
//! - port-forward: `v4.channel.k8s.io`/`v4.base64.channel.k8s.io` (two channels per
//!   port, data `2i` and error `2i+1`, whose first message from the server is the
//!   port, 2 bytes little-endian), and `SPDY/3.1+portforward.k8s.io`, SPDY carried in
//!   binary messages (kubectl ≥ 1.31).
//!
//! Messages and frames are capped at [`MAX_MESSAGE`]: a bigger frame is refused from
//! its header, before anything is allocated for it, and the session ends.

use std::io;

use base64::Engine as _;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::frame::CloseFrame;
use tungstenite::protocol::{Role, WebSocketConfig};
use tungstenite::{Message, WebSocket};

use super::wire::Wire;
use crate::server::{Reply, Req};

/// The largest message (and frame) a client may send. kubectl sends stdin in 32 KiB
/// pieces and SPDY frames of that order; a few MiB leaves room and still bounds what
/// 128 sessions can make the kubelet hold.
pub(crate) const MAX_MESSAGE: usize = 2 * 1024 * 1024;

/// The subprotocol of the port-forward SPDY tunnel.
pub const SPDY_TUNNEL_PROTOCOL: &str = "SPDY/3.1+portforward.k8s.io";

/// A Kubernetes channel protocol, as negotiated in `Sec-WebSocket-Protocol`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChannelProtocol {
    /// `v5.channel.k8s.io`.
    V5,
    /// `v4.channel.k8s.io`.
    V4,
    /// `v4.base64.channel.k8s.io`.
    V4Base64,
    /// `channel.k8s.io`, or no protocol named.
    V1,
    /// `base64.channel.k8s.io`.
    V1Base64,
}

impl ChannelProtocol {
    /// The protocols exec and attach accept, most preferred first.
    pub const REMOTE_COMMAND: [ChannelProtocol; 5] = [
        ChannelProtocol::V5,
        ChannelProtocol::V4,
        ChannelProtocol::V4Base64,
        ChannelProtocol::V1,
        ChannelProtocol::V1Base64,
    ];

    /// The protocols a WebSocket port-forward accepts.
    pub const PORT_FORWARD: [ChannelProtocol; 2] = [ChannelProtocol::V4, ChannelProtocol::V4Base64];

    /// The protocol's name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            ChannelProtocol::V5 => "v5.channel.k8s.io",
            ChannelProtocol::V4 => "v4.channel.k8s.io",
            ChannelProtocol::V4Base64 => "v4.base64.channel.k8s.io",
            ChannelProtocol::V1 => "channel.k8s.io",
            ChannelProtocol::V1Base64 => "base64.channel.k8s.io",
        }
    }

    /// Payloads are base64 text.
    pub(crate) fn base64(self) -> bool {
        matches!(self, ChannelProtocol::V4Base64 | ChannelProtocol::V1Base64)
    }

    /// The error channel carries `metav1.Status` JSON (v4 and later).
    pub(crate) fn status_json(self) -> bool {
        !matches!(self, ChannelProtocol::V1 | ChannelProtocol::V1Base64)
    }

    /// The client may close a channel with `[255, channel]`.
    pub(crate) fn close_signal(self) -> bool {
        self == ChannelProtocol::V5
    }

    /// A message carrying `data` on channel `ch`.
    pub(crate) fn encode(self, ch: u8, data: &[u8]) -> Message {
        if self.base64() {
            let mut text = String::with_capacity(1 + data.len() * 4 / 3 + 4);
            text.push(char::from(b'0'.wrapping_add(ch)));
            base64::engine::general_purpose::STANDARD.encode_string(data, &mut text);
            Message::text(text)
        } else {
            let mut frame = Vec::with_capacity(1 + data.len());
            frame.push(ch);
            frame.extend_from_slice(data);
            Message::binary(frame)
        }
    }

    /// The channel and payload of a client's data message (text or binary, as
    /// upstream reads either); None for an empty message, which carries nothing.
    pub(crate) fn decode(self, payload: &[u8]) -> Result<Option<(u8, Vec<u8>)>, String> {
        let Some((&first, rest)) = payload.split_first() else {
            return Ok(None);
        };
        if !self.base64() {
            return Ok(Some((first, rest.to_vec())));
        }
        let data = base64::engine::general_purpose::STANDARD
            .decode(rest)
            .map_err(|e| format!("bad base64 on channel {}: {e}", first.wrapping_sub(b'0')))?;
        Ok(Some((first.wrapping_sub(b'0'), data)))
    }
}

/// Whether a request asks for a WebSocket (upstream's `IsWebSocketRequest`):
/// `Upgrade: websocket` and `upgrade` among the `Connection` tokens.
pub fn is_websocket_request(req: &Req) -> bool {
    let upgrade = req
        .header("Upgrade")
        .is_some_and(|u| u.trim().eq_ignore_ascii_case("websocket"));
    upgrade && has_token(req, "Connection", "upgrade")
}

/// Whether a port-forward WebSocket asks for the SPDY tunnel.
pub fn wants_spdy_tunnel(req: &Req) -> bool {
    offered_protocols(req)
        .iter()
        .any(|p| p.starts_with("SPDY/3.1+") && p.ends_with(".k8s.io"))
}

fn has_token(req: &Req, header: &str, token: &str) -> bool {
    req.headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(header))
        .flat_map(|(_, v)| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// The subprotocols the client offers, in its order (every `Sec-WebSocket-Protocol`
/// header, comma-separated).
pub(crate) fn offered_protocols(req: &Req) -> Vec<String> {
    req.headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("Sec-WebSocket-Protocol"))
        .flat_map(|(_, v)| v.split(','))
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

/// The first offered protocol the server accepts (upstream's `handshake`); with none
/// offered, the unnamed protocol (`Some("")`) if `unnamed` is accepted.
pub(crate) fn choose_protocol<'a>(
    offered: &[String],
    accepted: &[&'a str],
    unnamed: bool,
) -> Option<&'a str> {
    if offered.is_empty() {
        return unnamed.then_some("");
    }
    offered
        .iter()
        .find_map(|o| accepted.iter().find(|a| **a == o.as_str()).copied())
}

/// A checked upgrade request: the key to answer and the chosen protocol.
#[derive(Debug, Clone)]
pub struct Upgrade {
    key: String,
    /// The protocol chosen ("" when the client named none).
    pub protocol: &'static str,
}

impl Upgrade {
    /// An upgrade answering `key` with `protocol` (tests build sessions with it).
    #[cfg(test)]
    pub(crate) fn new(key: &str, protocol: &'static str) -> Upgrade {
        Upgrade {
            key: key.to_string(),
            protocol,
        }
    }
}

/// Checks the WebSocket headers and picks a protocol among `accepted`; the refusal
/// is an HTTP answer (400 for a broken upgrade, 403 for no common protocol, as
/// x/net/websocket answers a failed handshake).
pub fn check_upgrade(
    req: &Req,
    accepted: &[&'static str],
    unnamed: bool,
) -> Result<Upgrade, Reply> {
    if req.header("Sec-WebSocket-Version").map(str::trim) != Some("13") {
        return Err(Reply::text(400, "unsupported WebSocket version (13 is)"));
    }
    let Some(key) = req.header("Sec-WebSocket-Key").map(str::trim) else {
        return Err(Reply::text(400, "missing Sec-WebSocket-Key"));
    };
    let offered = offered_protocols(req);
    let Some(protocol) = choose_protocol(&offered, accepted, unnamed) else {
        return Err(Reply::text(
            403,
            format!("requested protocol(s) are not supported: {offered:?}; supports {accepted:?}"),
        ));
    };
    Ok(Upgrade {
        key: key.to_string(),
        protocol,
    })
}

/// A WebSocket session's connection: tungstenite's framing over the [`Wire`].
#[derive(Debug)]
pub struct WsConn {
    ws: WebSocket<Wire>,
}

/// Why a WebSocket can be used no more.
#[derive(Debug)]
pub(crate) enum WsEnd {
    /// The client closed (close frame or connection).
    Closed,
    /// A frame or message over [`MAX_MESSAGE`].
    TooBig(String),
    /// Anything else: a protocol violation, a broken connection.
    Broken(String),
}

impl std::fmt::Display for WsEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WsEnd::Closed => f.write_str("the client closed the connection"),
            WsEnd::TooBig(e) => write!(f, "a message too big: {e}"),
            WsEnd::Broken(e) => write!(f, "{e}"),
        }
    }
}

impl From<tungstenite::Error> for WsEnd {
    fn from(e: tungstenite::Error) -> WsEnd {
        match e {
            tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed => {
                WsEnd::Closed
            }
            tungstenite::Error::Capacity(c) => WsEnd::TooBig(c.to_string()),
            tungstenite::Error::Protocol(
                tungstenite::error::ProtocolError::ResetWithoutClosingHandshake,
            ) => WsEnd::Closed,
            other => WsEnd::Broken(other.to_string()),
        }
    }
}

/// The framing's bounds: no message or frame over [`MAX_MESSAGE`].
fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(32 * 1024)
        .write_buffer_size(0)
        .max_message_size(Some(MAX_MESSAGE))
        .max_frame_size(Some(MAX_MESSAGE))
}

/// Fuzzing (the daemon's `fuzzing` module): a client's bytes after the upgrade, framed with the
/// server's bounds, and every data message decoded as each channel protocol would.
#[cfg(feature = "fuzzing")]
pub fn fuzz_frames(data: &[u8]) {
    /// The client's bytes to read; what the server writes (pongs, closes) is dropped.
    struct Mem<'a>(&'a [u8]);
    impl io::Read for Mem<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.0.is_empty() {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            io::Read::read(&mut self.0, buf)
        }
    }
    impl io::Write for Mem<'_> {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut ws = WebSocket::from_raw_socket(Mem(data), Role::Server, Some(ws_config()));
    loop {
        let payload = match ws.read() {
            Ok(Message::Binary(b)) => b.to_vec(),
            Ok(Message::Text(t)) => t.as_bytes().to_vec(),
            Ok(_) => continue,
            Err(_) => return,
        };
        for p in ChannelProtocol::REMOTE_COMMAND {
            let _ = p.decode(&payload);
        }
    }
}

impl WsConn {
    /// Answers the upgrade (`101`, the accept key, the protocol) and starts framing.
    pub fn accept(mut wire: Wire, up: &Upgrade) -> io::Result<WsConn> {
        let accept = tungstenite::handshake::derive_accept_key(up.key.as_bytes());
        let mut headers = vec![
            ("Upgrade", "websocket"),
            ("Connection", "Upgrade"),
            ("Sec-WebSocket-Accept", accept.as_str()),
        ];
        if !up.protocol.is_empty() {
            headers.push(("Sec-WebSocket-Protocol", up.protocol));
        }
        wire.write_head(101, &headers)?;
        Ok(WsConn {
            ws: WebSocket::from_raw_socket(wire, Role::Server, Some(ws_config())),
        })
    }

    /// The connection under the framing.
    pub(crate) fn wire(&mut self) -> &mut Wire {
        self.ws.get_mut()
    }

    /// Bytes queued for the client.
    pub(crate) fn pending(&self) -> usize {
        self.ws.get_ref().pending()
    }

    /// The next data message (text or binary payload), without waiting: None when
    /// nothing complete has arrived. Pings are answered on the way.
    pub(crate) fn read(&mut self) -> Result<Option<Vec<u8>>, WsEnd> {
        loop {
            match self.ws.read() {
                Ok(Message::Binary(b)) => return Ok(Some(b.to_vec())),
                Ok(Message::Text(t)) => return Ok(Some(t.as_bytes().to_vec())),
                Ok(Message::Close(_)) => return Err(WsEnd::Closed),
                Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_)) => {}
                Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Ok(None)
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Queues a message.
    pub(crate) fn send(&mut self, msg: Message) -> Result<(), WsEnd> {
        match self.ws.write(msg) {
            Ok(()) => Ok(()),
            Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Sends what the socket takes now.
    pub(crate) fn flush(&mut self) -> Result<(), WsEnd> {
        match self.ws.flush() {
            Ok(()) => Ok(()),
            Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Starts the closing handshake with `code` (queued; flush to send).
    pub(crate) fn close(&mut self, code: CloseCode, reason: &str) {
        let frame = CloseFrame {
            code,
            reason: reason.to_string().into(),
        };
        // A connection already closing or closed has nothing more to say.
        let _ = self.ws.close(Some(frame));
    }
}

/// Ends a session's WebSocket politely: the close frame with `code`, what is queued
/// sent, and the client's own close (or its going away) awaited, at most `linger`.
pub(crate) fn finish(ws: &mut WsConn, code: CloseCode, reason: &str, linger: std::time::Duration) {
    ws.close(code, reason);
    let until = std::time::Instant::now() + linger;
    loop {
        if ws.flush().is_err() {
            return;
        }
        let done_reading = loop {
            match ws.read() {
                Ok(Some(_)) => {}
                Ok(None) => break false,
                Err(_) => break true,
            }
        };
        let now = std::time::Instant::now();
        if (done_reading && ws.pending() == 0) || now >= until || ws.wire().is_stopped() {
            return;
        }
        let wire = ws.wire();
        let mut events = libc::POLLIN;
        if wire.wants_write() {
            events |= libc::POLLOUT;
        }
        let mut fds = [super::pollfd(wire.fd(), events)];
        let wait = until.saturating_duration_since(now).min(super::POLL_TICK);
        if super::poll(&mut fds, wait).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(headers: &[(&str, &str)]) -> Req {
        let mut r = Req::new("GET", "/exec/ns/p/c?command=ls&stdout=1");
        r.headers = headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        r
    }

    #[test]
    fn websocket_requests_are_recognised_as_upstream_does() {
        assert!(is_websocket_request(&req(&[
            ("Upgrade", "websocket"),
            ("Connection", "keep-alive, Upgrade")
        ])));
        assert!(!is_websocket_request(&req(&[("Upgrade", "websocket")])));
        assert!(!is_websocket_request(&req(&[
            ("Upgrade", "SPDY/3.1"),
            ("Connection", "Upgrade")
        ])));
    }

    #[test]
    fn the_first_offered_protocol_the_server_knows_wins() {
        let accepted = ["v5.channel.k8s.io", "v4.channel.k8s.io", "channel.k8s.io"];
        let offered = |s: &[&str]| s.iter().map(|p| p.to_string()).collect::<Vec<_>>();
        assert_eq!(
            choose_protocol(
                &offered(&["v4.channel.k8s.io", "v5.channel.k8s.io"]),
                &accepted,
                true
            ),
            Some("v4.channel.k8s.io")
        );
        assert_eq!(
            choose_protocol(&offered(&["x", "channel.k8s.io"]), &accepted, true),
            Some("channel.k8s.io")
        );
        assert_eq!(choose_protocol(&offered(&["x"]), &accepted, true), None);
        assert_eq!(choose_protocol(&[], &accepted, true), Some(""));
        assert_eq!(choose_protocol(&[], &accepted, false), None);
        let r = req(&[
            (
                "Sec-WebSocket-Protocol",
                "v5.channel.k8s.io, v4.channel.k8s.io",
            ),
            ("Sec-WebSocket-Protocol", "SPDY/3.1+portforward.k8s.io"),
        ]);
        assert_eq!(
            offered_protocols(&r),
            [
                "v5.channel.k8s.io",
                "v4.channel.k8s.io",
                "SPDY/3.1+portforward.k8s.io"
            ]
        );
        assert!(wants_spdy_tunnel(&r));
    }

    #[test]
    fn an_upgrade_without_a_common_protocol_is_refused_with_403() {
        let r = req(&[
            ("Sec-WebSocket-Version", "13"),
            ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("Sec-WebSocket-Protocol", "v9.channel.k8s.io"),
        ]);
        let refused = check_upgrade(&r, &["v5.channel.k8s.io"], true).expect_err("refused");
        assert_eq!(refused.status, 403);
        let r = req(&[("Sec-WebSocket-Version", "8")]);
        assert_eq!(
            check_upgrade(&r, &["v5.channel.k8s.io"], true)
                .expect_err("refused")
                .status,
            400
        );
    }

    #[test]
    fn channel_framing_binary_and_base64() {
        let m = ChannelProtocol::V5.encode(1, b"hi");
        assert_eq!(m, Message::binary(vec![1, b'h', b'i']));
        assert_eq!(
            ChannelProtocol::V5.decode(&[0, b'a']),
            Ok(Some((0, b"a".to_vec())))
        );
        assert_eq!(ChannelProtocol::V5.decode(&[]), Ok(None));
        let m = ChannelProtocol::V1Base64.encode(2, b"\n");
        assert_eq!(m, Message::text("2Cg=="));
        // Upstream's example: "foo\n" on stdin is "0Zm9vCg==".
        assert_eq!(
            ChannelProtocol::V4Base64.decode(b"0Zm9vCg=="),
            Ok(Some((0, b"foo\n".to_vec())))
        );
        assert!(ChannelProtocol::V4Base64.decode(b"0!!").is_err());
        assert!(ChannelProtocol::V4.status_json() && !ChannelProtocol::V1.status_json());
        assert!(ChannelProtocol::V5.close_signal() && !ChannelProtocol::V4.close_signal());
    }
}
