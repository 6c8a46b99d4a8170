//! PodConfig: pod sources and the merge of their snapshots into per-pod operations.
//!
//! Each source (`file`, `http`, `etcd`, `api`) sends full snapshots of its pods
//! ([`SourceUpdate`]); the merge turns them into ADD / UPDATE / DELETE / REMOVE /
//! RECONCILE operations and knows when every configured source has sent its first
//! snapshot ("all sources ready"). Mirrors `pkg/kubelet/config/config.go`.

pub mod file;
#[cfg(target_os = "linux")]
pub mod inotify;
pub mod manifest;

use k8s_openapi::api::core::v1::Pod;

/// A pod source, by the name upstream gives it (also the `config.source` annotation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    /// Static pods from a directory or file (`staticPodPath`).
    File,
    /// Static pods from a URL (`staticPodURL`).
    Http,
    /// Pods from an etcd prefix.
    Etcd,
    /// Pods bound to this node on the API server.
    Api,
}

impl Source {
    /// The source's name: `file`, `http`, `etcd`, `api`.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::File => "file",
            Source::Http => "http",
            Source::Etcd => "etcd",
            Source::Api => "api",
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A full snapshot of one source's pods (upstream's `SET`). Pods are already defaulted
/// by the source (name suffix, namespace, UID, `config.hash`).
#[derive(Clone, Debug)]
pub struct SourceUpdate {
    /// Which source.
    pub source: Source,
    /// Every pod the source holds now.
    pub pods: Vec<Pod>,
}
