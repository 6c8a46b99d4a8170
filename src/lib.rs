//! rkubelet: a Kubernetes node agent (a kubelet) that runs pods through Docker, built
//! as a synchronous, thread-per-loop daemon. No async runtime: every loop is a named OS
//! thread, events travel over channels into one sync loop.
//!
//! The modules, in reading order (see ARCHITECTURE.md for the threads and invariants):

pub mod config;
pub mod health;
pub mod kubelet;
pub mod kuberuntime;
pub mod logging;
pub mod loops;
pub mod netutil;
pub mod pleg;
pub mod pod_workers;
pub mod podconfig;
pub mod quantity;
pub mod runtime;
pub mod server;
pub mod status;
pub mod systemd;
pub mod time;
