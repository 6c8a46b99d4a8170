//! The runtime at `--container-runtime-endpoint`: which kind answers on the socket, and
//! the client for it. One flag takes a Docker engine or a CRI v1 runtime (containerd,
//! CRI-O), told apart by asking: first Docker's `GET /version` (the Engine API), then
//! CRI's `Version` over gRPC. A CRI runtime that speaks another CRI version than `v1`
//! is refused with one line.
//!
//! When nothing answers (the runtime is not up yet, or not installed), the kind is
//! taken from the socket's name — a file named `docker*.sock` is Docker, any other is
//! CRI — and the kubelet starts anyway, reporting the runtime down and retrying as it
//! always did for Docker. Waiting for an answer instead would block the ports and
//! healthz at boot; the name is the evidence left (`/var/run/docker.sock`,
//! `/run/containerd/containerd.sock`, `/var/run/crio/crio.sock`). The guess is logged.
//!
//! Upstream has no such question: its kubelet speaks CRI only (Docker through
//! cri-dockerd); rkubelet drives Docker directly and CRI beside it.

use std::sync::Arc;
use std::time::Duration;

use base::loops::{error_chain, Loops};
use runtime::{Runtime, RuntimeError};

use crate::config::KubeletConfig;

/// Each detection call's deadline: a runtime that answers, answers in milliseconds;
/// one that hangs must not hold the start for the whole `--runtime-request-timeout`.
const DETECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Which API the runtime at the endpoint speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RuntimeKind {
    /// The Docker Engine API.
    Docker,
    /// CRI v1 (containerd, CRI-O).
    Cri,
}

/// The runtime the kubelet drives, and its kind.
#[derive(Debug)]
pub(super) struct Connected {
    /// The client (with `--network-plugin`'s network around Docker).
    pub(super) runtime: Arc<dyn Runtime>,
    /// What answered (or what the socket's name says, when nothing did).
    pub(super) kind: RuntimeKind,
}

/// What [`detect`] found on the endpoint.
#[derive(Debug, PartialEq, Eq)]
enum Detected {
    /// Docker answered `/version`: its version and Engine API version.
    Docker { version: String, api: String },
    /// A CRI runtime answered `Version`: its name, version and CRI version.
    Cri {
        name: String,
        version: String,
        api: String,
    },
    /// Neither answered: each one's error.
    Nothing { docker: String, cri: String },
}

/// Checks the endpoint's form (`unix:///path` or an absolute path) without dialling,
/// so a bad flag is one line before anything starts.
pub fn check_endpoint(endpoint: &str) -> Result<(), RuntimeError> {
    docker::Docker::connect(endpoint).map(drop)
}

/// The kind a socket's name suggests, when nothing answers on it: `docker*.sock` (e.g.
/// `/var/run/docker.sock`) is Docker, any other CRI. Pure.
fn kind_from_name(endpoint: &str) -> RuntimeKind {
    let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    let file = path.rsplit('/').next().unwrap_or(path);
    if file.starts_with("docker") && file.ends_with(".sock") {
        RuntimeKind::Docker
    } else {
        RuntimeKind::Cri
    }
}

/// Asks the endpoint: Docker's `/version` first, then CRI's `Version`.
fn detect(endpoint: &str, loops: &Loops) -> Result<Detected, RuntimeError> {
    let docker_err = match docker::Docker::connect(endpoint)?.version() {
        Ok(v) => {
            return Ok(Detected::Docker {
                version: v.runtime_version,
                api: v.api_version,
            })
        }
        Err(e) => error_chain(&e),
    };
    let client = cri::client::CriClient::new(endpoint, DETECT_TIMEOUT, loops).map_err(|e| {
        RuntimeError::BadEndpoint {
            endpoint: endpoint.to_string(),
            reason: e.to_string(),
        }
    })?;
    let request = cri::v1::VersionRequest {
        version: "v1".into(),
    };
    match client.version(&request) {
        Ok(v) => Ok(Detected::Cri {
            name: v.runtime_name,
            version: v.runtime_version,
            api: v.runtime_api_version,
        }),
        Err(e) => Ok(Detected::Nothing {
            docker: docker_err,
            cri: error_chain(&e),
        }),
    }
}

/// The kind to build a client for, from what answered; a CRI runtime not on v1 is
/// refused. Logs what answered (or the guess). Pure but for the log line.
fn decide(endpoint: &str, found: Detected) -> Result<RuntimeKind, RuntimeError> {
    match found {
        Detected::Docker { version, api } => {
            log::info!("container runtime at {endpoint}: Docker {version} (Engine API {api})");
            Ok(RuntimeKind::Docker)
        }
        Detected::Cri { name, version, api } if api == "v1" => {
            log::info!("container runtime at {endpoint}: {name} {version} (CRI {api})");
            Ok(RuntimeKind::Cri)
        }
        Detected::Cri { name, version, api } => Err(RuntimeError::BadEndpoint {
            endpoint: endpoint.to_string(),
            reason: format!("{name} {version} speaks CRI {api:?}; rkubelet needs CRI v1"),
        }),
        Detected::Nothing { docker, cri } => {
            let kind = kind_from_name(endpoint);
            log::warn!(
                "nothing answers on {endpoint} yet (Docker: {docker}; CRI: {cri}); taking it \
                 for {} from the socket's name and retrying until it answers",
                match kind {
                    RuntimeKind::Docker => "Docker",
                    RuntimeKind::Cri => "a CRI runtime",
                }
            );
            Ok(kind)
        }
    }
}

/// The runtime the kubelet drives, of the kind that answers at the endpoint: the
/// Docker engine with the sandbox image and log rotation of the configuration, and with
/// `--network-plugin` the CNI network around it ([`crate::network`]); or a CRI v1
/// runtime (its own sandbox image, logs and network: `--network-plugin` is not used).
/// Its threads are spawned through `loops`.
pub(super) fn connect_runtime(
    cfg: &KubeletConfig,
    loops: &Loops,
) -> Result<Connected, RuntimeError> {
    let endpoint = &cfg.container_runtime_endpoint;
    let kind = decide(endpoint, detect(endpoint, loops)?)?;
    let runtime = match kind {
        RuntimeKind::Docker => connect_docker(cfg)?,
        RuntimeKind::Cri => {
            if !cfg.network_plugin.is_empty() {
                log::warn!(
                    "--network-plugin={} is not used on a CRI runtime: the runtime runs the \
                     CNI plugins itself",
                    cfg.network_plugin
                );
            }
            let mut cri =
                cri::runtime::CriRuntime::new(endpoint, cfg.runtime_request_timeout, loops)?;
            if !cfg.image_service_endpoint.is_empty() {
                cri = cri.with_image_endpoint(&cfg.image_service_endpoint)?;
                log::info!("image service at {}", cfg.image_service_endpoint);
            }
            Arc::new(cri)
        }
    };
    if kind == RuntimeKind::Docker && !cfg.image_service_endpoint.is_empty() {
        log::warn!(
            "--image-service-endpoint={} is not used with Docker: the engine serves its own \
             images",
            cfg.image_service_endpoint
        );
    }
    Ok(Connected { runtime, kind })
}

/// The Docker engine at the configured endpoint. Does not connect: the engine may come
/// up later.
fn connect_docker(cfg: &KubeletConfig) -> Result<Arc<dyn Runtime>, RuntimeError> {
    let mut docker = docker::Docker::connect(&cfg.container_runtime_endpoint)?
        .with_sandbox_image(&cfg.pod_infra_container_image)
        .with_log_rotation(docker::translate::LogRotation {
            max_size: cfg.container_log_max_size,
            max_files: cfg.container_log_max_files,
        });
    let mode = match cfg.network_plugin.as_str() {
        "cni" => crate::network::Mode::Cni {
            conf_dir: cfg.cni_conf_dir.clone(),
        },
        "kubenet" => crate::network::Mode::Kubenet(crate::network::kubenet::Kubenet {
            mtu: cfg.network_plugin_mtu,
            hairpin_mode: cfg.hairpin_mode.clone(),
            non_masquerade_cidr: cfg.non_masquerade_cidr.clone(),
        }),
        _ => return Ok(Arc::new(docker)),
    };
    docker = docker.with_plugin_network();
    let network = crate::network::PluginNetwork::new(
        Arc::new(docker),
        cni::Cni {
            bin_dirs: cni::bin_dirs(&cfg.cni_bin_dir),
            cache_dir: cfg.cni_cache_dir.clone(),
            timeout: crate::network::PLUGIN_TIMEOUT,
        },
        mode,
    );
    // Standalone, the pod CIDR is the flag's (with an API server, the Node's).
    if cfg.kubeconfig.is_none() && cfg.bootstrap_kubeconfig.is_none() && !cfg.pod_cidr.is_empty() {
        network.update_runtime_config(std::slice::from_ref(&cfg.pod_cidr))?;
    }
    Ok(Arc::new(network))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_silent_socket_is_docker_by_a_docker_name_else_cri() {
        for (endpoint, kind) in [
            ("unix:///var/run/docker.sock", RuntimeKind::Docker),
            ("/run/docker.sock", RuntimeKind::Docker),
            ("unix:///tmp/x/docker-1.sock", RuntimeKind::Docker),
            ("unix:///run/containerd/containerd.sock", RuntimeKind::Cri),
            ("unix:///var/run/crio/crio.sock", RuntimeKind::Cri),
            ("unix:///run/cri-dockerd.sock", RuntimeKind::Cri),
            ("unix:///run/docker/x", RuntimeKind::Cri),
        ] {
            assert_eq!(kind_from_name(endpoint), kind, "{endpoint}");
        }
    }

    #[test]
    fn what_answers_decides_and_cri_must_be_v1() {
        let ep = "unix:///run/x.sock";
        let docker = Detected::Docker {
            version: "20.10.24".into(),
            api: "1.41".into(),
        };
        assert_eq!(decide(ep, docker).ok(), Some(RuntimeKind::Docker));
        let cri = |api: &str| Detected::Cri {
            name: "containerd".into(),
            version: "1.6.20".into(),
            api: api.into(),
        };
        assert_eq!(decide(ep, cri("v1")).ok(), Some(RuntimeKind::Cri));
        let err = decide(ep, cri("v1alpha2")).expect_err("not v1");
        assert!(
            err.to_string().contains("v1alpha2") || error_chain(&err).contains("v1alpha2"),
            "{}",
            error_chain(&err)
        );
        let nothing = Detected::Nothing {
            docker: "refused".into(),
            cri: "refused".into(),
        };
        assert_eq!(decide(ep, nothing).ok(), Some(RuntimeKind::Cri));
    }
}
