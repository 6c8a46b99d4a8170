//! The kubelet's effective configuration: flags (spelled as the upstream kubelet's)
//! layered over a `KubeletConfiguration` file (`kubelet.config.k8s.io/v1beta1`).
//!
//! Raw inputs are validated once, here, into [`KubeletConfig`]; nothing else in the
//! kubelet parses flags or the config file. Precedence, as upstream: defaults, then the
//! file given by `--config`, then flags given on the command line.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Defaults, each with its reason. Upstream's flag defaults unless said otherwise.
pub mod defaults {
    use std::time::Duration;
    /// Our own state directory; upstream's is /var/lib/kubelet, and both may run on one host.
    pub const ROOT_DIR: &str = "/var/lib/rkubelet";
    /// Docker's default socket: rkubelet drives Docker directly (the dockershim era's default).
    pub const CONTAINER_RUNTIME_ENDPOINT: &str = "unix:///var/run/docker.sock";
    /// Upstream's current sandbox image.
    pub const POD_INFRA_CONTAINER_IMAGE: &str = "registry.k8s.io/pause:3.10";
    /// `pkg/cluster/ports`: KubeletHealthzPort.
    pub const HEALTHZ_PORT: u16 = 10248;
    /// Health is a local concern; upstream binds it to loopback.
    pub const HEALTHZ_BIND_ADDRESS: &str = "127.0.0.1";
    /// `pkg/cluster/ports`: KubeletReadOnlyPort (the flag default; a config file's default is 0).
    pub const READ_ONLY_PORT: u16 = 10255;
    /// `pkg/cluster/ports`: KubeletPort.
    pub const PORT: u16 = 10250;
    /// Upstream's `address` default.
    pub const ADDRESS: &str = "0.0.0.0";
    /// Pod resync period (`syncFrequency`): each pod is re-synced this often without events.
    pub const SYNC_FREQUENCY: Duration = Duration::from_secs(60);
    /// Full re-list of the static pod path (`fileCheckFrequency`), beside inotify.
    pub const FILE_CHECK_FREQUENCY: Duration = Duration::from_secs(20);
    /// Poll period of the manifest URL (`httpCheckFrequency`).
    pub const HTTP_CHECK_FREQUENCY: Duration = Duration::from_secs(20);
}

/// The validated, effective configuration of one kubelet process.
#[derive(Clone, Debug, PartialEq)]
pub struct KubeletConfig {
    /// The node's name: `--hostname-override`, else the host name, lowercased.
    pub node_name: String,
    /// `--pod-manifest-path` / `staticPodPath`: a directory or one file. None: no file source.
    pub static_pod_path: Option<PathBuf>,
    /// `--root-dir`.
    pub root_dir: PathBuf,
    /// `--container-runtime-endpoint`, e.g. `unix:///var/run/docker.sock`.
    pub container_runtime_endpoint: String,
    /// `--pod-infra-container-image`.
    pub pod_infra_container_image: String,
    /// `--healthz-port` / `healthzPort`; 0 disables.
    pub healthz_port: u16,
    /// `--healthz-bind-address` / `healthzBindAddress`.
    pub healthz_bind_address: IpAddr,
    /// `--read-only-port` / `readOnlyPort`; 0 disables.
    pub read_only_port: u16,
    /// `--address` / `address`: where the read-only and authenticated ports listen.
    pub address: IpAddr,
    /// `--port` / `port`; 0 disables.
    pub port: u16,
    /// `--sync-frequency` / `syncFrequency`.
    pub sync_frequency: Duration,
    /// `--file-check-frequency` / `fileCheckFrequency`.
    pub file_check_frequency: Duration,
    /// `--v` / `-v` (0..10); None leaves RUST_LOG (or the default info level) in charge.
    pub verbosity: Option<u8>,
    /// `--config`: the file that was read, if any.
    pub config_file: Option<PathBuf>,
}
