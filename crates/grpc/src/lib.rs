//! rkubelet's gRPC client: HTTP/2 (RFC 9113) with prior knowledge over a Unix socket
//! or TCP, synchronous, with no async runtime. A [`Channel`] holds one connection on
//! which many threads make calls at once (streams multiplexed, flow control both
//! ways, a deadline per call); it reconnects on the call after the connection broke
//! or the server said GOAWAY.
//!
//! Messages are bytes here: the caller encodes and decodes them (the CRI client with
//! `prost`, the gRPC probe by hand). The framing ([`frame`]), HPACK ([`hpack`]) and
//! the status codes ([`Code`]) are shared with the gRPC probe.
// What another crate uses is `pub`, the rest `pub(crate)` or private
// (tests/tidy.rs checks that each `pub` item is named outside the crate).
#![warn(unreachable_pub)]

mod channel;
mod conn;
pub mod frame;
pub mod hpack;
pub mod message;
mod status;
#[cfg(test)]
mod tests;

pub use channel::{Cancel, Channel, Endpoint, Options, Streaming};
pub use status::{Code, GrpcError};

/// Fuzzing: a server's bytes after one call was sent, through the connection's frame
/// reader, then the call's status read from what arrived.
#[cfg(feature = "fuzzing")]
pub fn fuzz_frames(server: &[u8]) {
    conn::fuzz_frames(server)
}
