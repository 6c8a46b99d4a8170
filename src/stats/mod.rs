//! Resource usage statistics (upstream `pkg/kubelet/stats` and `pkg/kubelet/server/stats`):
//! the raw readers of cgroupfs and `/proc` ([`cgroupfs`]), shared with the eviction
//! manager.

pub mod cgroupfs;
