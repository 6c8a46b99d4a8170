//! rkubelet: a Kubernetes node agent (a kubelet) that runs pods through Docker, built
//! as a synchronous, thread-per-loop daemon. No async runtime: every loop is a named OS
//! thread, events travel over channels into one sync loop.
//!
//! The modules, in reading order (ARCHITECTURE.md has the threads and invariants):
// What main, the tests and the benches use is `pub`, the rest `pub(crate)` or private.
#![warn(unreachable_pub)]
// The sort ban of clippy.toml is for shipped code (one copy of the sort code).
#![cfg_attr(test, allow(clippy::disallowed_methods))]

// `rkubelet pause`: a sandbox's init, run before any of the kubelet starts.
pub mod pause;

// Foundations above the base crate: logging, the event recorder, systemd.
pub mod logging;
pub mod record;
// Pod sysctls: namespaces, the safe set, the allowlist (config, validation, admission
// and the sandbox all read it).
mod sysctl;
pub mod systemd;
// The kubelet's `/metrics` families, on base's registry.
pub mod metrics;

// Configuration: flags and the KubeletConfiguration file.
pub mod config;

// The runtime seam (the `runtime` crate) counted and timed into `/metrics`, and the
// CNI network beside Docker (`--network-plugin=cni`).
mod instrumented;
mod network;

// Where pods come from: sources, pod validation before admission, and their merge.
mod validation;
pub mod podconfig;

// The objects this node's pods reference through the API server client (the
// `apiclient` crate), and the Events written through it.
mod objects;
mod events;
// TLS bootstrap and rotation of the client certificate the API client uses.
mod certificate;

// The kubelet core: the sync loop and what it drives.
pub mod kubelet;
pub mod pod_workers;
pub mod pod_killer;
pub mod kuberuntime;
mod cm;
mod admission;
mod images;
pub mod volume;
mod pleg;
pub mod status;
pub mod prober;
mod health;
mod nodelease;
mod eviction;
mod oom_watcher;
mod nodestatus;
// Resource usage: cgroupfs and /proc readers, the resource analyzer.
mod stats;
pub mod gc;
// The CRI container log manager: rotation, `ReopenContainerLog`.
mod container_log_manager;

// The HTTP ports.
mod server;

// Fuzzing: the parsers of outside input, for fuzz/ and tests/fuzz_corpus.rs.
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
