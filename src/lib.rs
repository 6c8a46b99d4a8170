//! rkubelet: a Kubernetes node agent (a kubelet) that runs pods through Docker, built
//! as a synchronous, thread-per-loop daemon. No async runtime: every loop is a named OS
//! thread, events travel over channels into one sync loop.
//!
//! The modules, in reading order (ARCHITECTURE.md has the threads and invariants):
// The sort ban of clippy.toml is for shipped code (one copy of the sort code).
#![cfg_attr(test, allow(clippy::disallowed_methods))]

// `rkubelet pause`: a sandbox's init, run before any of the kubelet starts.
pub mod pause;

// Foundations: the loop helper every thread goes through, logging, time.
pub mod panics;
pub mod loops;
pub mod logging;
pub mod time;
pub mod safepath;
pub mod goquote;
pub mod quantity;
pub mod lines;
pub mod chan;
pub mod json;
pub mod sort;
pub mod fsutil;
pub mod malloc;
pub mod record;
pub mod netutil;
// Pod sysctls: namespaces, the safe set, the allowlist (config, validation, admission
// and the sandbox all read it).
pub mod sysctl;
// Outgoing HTTP: agents for the servers pods come from, and for requests to pods.
pub mod httpclient;
pub mod wait;
pub mod reference;
pub mod systemd;
// The Prometheus registry every component records into (`/metrics`).
pub mod metrics;

// Configuration: flags and the KubeletConfiguration file.
pub mod config;

// The runtime seam and its Docker implementation, and the runtime-neutral kubelet
// types every part of the kubelet core builds on.
pub mod runtime;
pub mod container;

// Where pods come from: sources, pod validation before admission, and their merge.
pub mod validation;
pub mod podconfig;

// The API server client, and the objects this node's pods reference through it.
pub mod apiclient;
pub mod objects;
pub mod events;
// TLS bootstrap and rotation of the client certificate the API client uses.
pub mod certificate;

// The kubelet core: the sync loop and what it drives.
pub mod kubelet;
pub mod pod_workers;
pub mod pod_killer;
pub mod kuberuntime;
pub mod cm;
pub mod admission;
pub mod images;
pub mod volume;
pub mod pleg;
pub mod status;
pub mod prober;
pub mod health;
pub mod nodelease;
pub mod eviction;
pub mod oom_watcher;
pub mod nodestatus;
// Resource usage: cgroupfs and /proc readers, the resource analyzer.
pub mod stats;
pub mod gc;

// The HTTP ports.
pub mod server;

// Test helpers shared by unit tests.
#[cfg(test)]
mod testutil;

// Fuzzing: the parsers of outside input, for fuzz/ and tests/fuzz_corpus.rs.
#[doc(hidden)]
pub mod fuzzing;
