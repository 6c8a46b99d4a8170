//! rkubelet: a Kubernetes node agent (a kubelet) that runs pods through Docker, built
//! as a synchronous, thread-per-loop daemon. No async runtime: every loop is a named OS
//! thread, events travel over channels into one sync loop.
//!
//! The modules, in reading order (see ARCHITECTURE.md for the threads and invariants):

pub mod config;
pub mod loops;
pub mod podconfig;
pub mod runtime;
