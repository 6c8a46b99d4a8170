//! rkubelet's foundations, below every other crate of the workspace: the loop helper
//! every thread goes through (and its pools, panics and shutdown), bounded channels,
//! time and retry back-off, sorting, quantities, line reading, file and network
//! helpers, the outgoing HTTP agents and the Prometheus registry. It knows nothing of
//! pods, runtimes or the API server.
// What another crate uses is `pub`, the rest `pub(crate)` or private
// (tests/tidy.rs checks that each `pub` item is named outside the crate).
#![warn(unreachable_pub)]
// The sort ban of clippy.toml is for shipped code (one copy of the sort code).
#![cfg_attr(test, allow(clippy::disallowed_methods))]

// The loop helper, its pools and the panics it catches.
pub mod loops;
pub mod panics;
pub mod wait;
pub mod chan;

// Values: time (and a clock behind its certificates), quantities, Go's quoting, JSON conversions, the one sort.
pub mod time;
pub mod clock;
pub mod quantity;
pub mod goquote;
pub mod json;
pub mod sort;

// The host: files, paths from pod input, the network, malloc.
pub mod fsutil;
pub mod safepath;
pub mod netutil;
pub mod lines;
pub mod malloc;
pub mod process;

// Outgoing HTTP, and the `/metrics` registry every component records into.
pub mod httpclient;
pub mod metrics;

// Helpers for the unit tests of this crate and the crates above it.
#[cfg(any(test, feature = "testing"))]
pub mod testutil;
