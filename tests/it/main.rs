//! rkubelet's integration tests against the real Docker engine. One binary; each test
//! is isolated (its own node name, root dir, manifest dir, ports and containers) and
//! cleans up after itself, so they run in parallel.
#![allow(clippy::disallowed_methods)] // clippy.toml's sort ban is for shipped code

// The CRI crate's containerd of a test's own, under the crate name it uses there.
extern crate cri as rkubelet_cri;
#[path = "../../crates/cri/tests/common/mod.rs"]
mod containerd;

mod util;
mod docker;
mod kubelet;
mod apiserver;
mod etcd;
mod sources;
mod lifecycle;
mod registry;
mod images;
mod spec;
mod volumes;
mod api_volumes;
mod probes;
mod servers;
mod admission;
mod inputs;
mod kubelet_port;
mod kubelet_auth;
mod logs;
mod metrics;
mod spdy;
mod streams;
mod events;
mod bootstrap;
mod node;
mod status_manager;
mod cluster;
mod eviction;
mod log_file;
mod cgroups;
mod gc;
mod stats;
mod pause;
mod watchdog;
mod pleg;
mod chaos_suite;
mod chaos;
mod panics;
mod workers;
mod sysctl;
mod network;
mod push;
mod offline;
mod cri_node;
mod restart_policy;
