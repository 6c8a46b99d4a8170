//! Runtime-neutral kubelet types, below everything that syncs, probes, reports or
//! mounts (upstream `pkg/kubelet/container`): a pod as the runtime holds it, the
//! container names and labels that carry a pod's identity through a restart, the
//! restart and pull backoff, waiting reasons, probe kinds and the probe results cache,
//! the pod cache, the restart and sandbox-change decisions, `$(VAR)` expansion and how
//! pods are named in messages. `kuberuntime`, `prober`, `status`, `images`, `volume`
//! and `pleg` depend on this module; it depends on none of them.

pub mod backoff;
pub mod cache;
pub mod downward;
pub mod expansion;
pub mod helpers;
pub mod labels;
pub mod results;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::{ContainerDetails, ContainerState};
use labels::ContainerKind;

/// A pod as the runtime holds it: its sandboxes and containers, newest first.
#[derive(Clone, Debug, Default)]
pub struct RuntimePod {
    /// Sandbox containers, newest first.
    pub sandboxes: Vec<ContainerDetails>,
    /// App and init containers, newest first.
    pub containers: Vec<ContainerDetails>,
}

impl RuntimePod {
    /// The newest sandbox, if it is running.
    pub fn running_sandbox(&self) -> Option<&ContainerDetails> {
        self.sandboxes
            .first()
            .filter(|s| s.state == ContainerState::Running)
    }

    /// Every instance of one container, newest first.
    pub fn instances(&self, name: &str, kind: ContainerKind) -> Vec<&ContainerDetails> {
        self.containers
            .iter()
            .filter(|c| {
                c.labels.get(labels::CONTAINER_NAME).map(String::as_str) == Some(name)
                    && crate::container::kind_of(c) == kind
            })
            .collect()
    }

    /// The newest instance of one container.
    pub fn newest(&self, name: &str, kind: ContainerKind) -> Option<&ContainerDetails> {
        self.instances(name, kind).into_iter().next()
    }

    /// True if anything of the pod is running.
    pub fn any_running(&self) -> bool {
        self.sandboxes
            .iter()
            .chain(&self.containers)
            .any(|c| c.state == ContainerState::Running)
    }

    /// Orders sandboxes and containers newest first (creation time, restart count).
    pub fn sort(&mut self) {
        let key = |c: &ContainerDetails| (c.created, labels::restart_count(&c.labels));
        base::sort::sort_by_key(&mut self.sandboxes, |c| std::cmp::Reverse(key(c)));
        base::sort::sort_by_key(&mut self.containers, |c| std::cmp::Reverse(key(c)));
    }
}

/// The first 12 characters of an ID, as `docker ps` shows it.
pub fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

/// `name_namespace(uid)`, upstream's `format.Pod`.
pub fn format_pod(pod: &Pod) -> String {
    format!(
        "{}_{}({})",
        pod.metadata.name.as_deref().unwrap_or_default(),
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.uid.as_deref().unwrap_or_default()
    )
}

/// A probe's or hook's port (upstream `probe.ResolveContainerPort`): a number, or the
/// name of one of the container's ports (and, as a last resort, a number written as a
/// string). Err is the reason, worded as a field error's detail.
pub fn resolve_port(port: &IntOrString, c: &Container) -> Result<u16, String> {
    let n = match port {
        IntOrString::Int(n) => *n,
        IntOrString::String(name) => c
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .map(|p| p.container_port)
            .or_else(|| name.parse().ok())
            .ok_or_else(|| format!("{name:?}: no container port with this name"))?,
    };
    u16::try_from(n)
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("{n}: must be between 1 and 65535, inclusive"))
}

/// Why a container was not started in the last sync, shown as its waiting state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiting {
    /// Upstream's reason: `CrashLoopBackOff`, `ErrImagePull`, `ImagePullBackOff`, …
    pub reason: String,
    /// Human-readable detail.
    pub message: String,
}

/// A static pod: one that came from a file, a URL or etcd rather than the API server
/// (its `kubernetes.io/config.source` annotation is not `api`); upstream's
/// `IsStaticPod`, the `static` label of the pod metrics.
pub fn is_static_pod(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("kubernetes.io/config.source"))
        .is_some_and(|s| s != "api")
}

/// Whether a runtime container is an init or app container (by its label).
pub fn kind_of(c: &ContainerDetails) -> ContainerKind {
    match c.labels.get(labels::CONTAINER_TYPE).map(String::as_str) {
        Some("init") => ContainerKind::Init,
        _ => ContainerKind::App,
    }
}

/// The three probe kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProbeType {
    /// Kills and restarts a container that fails it.
    Liveness,
    /// Gates the container's `ready`.
    Readiness,
    /// Gates liveness and readiness until it succeeds; kills like liveness.
    Startup,
}

impl ProbeType {
    /// All three, in upstream's order.
    pub const ALL: [ProbeType; 3] = [
        ProbeType::Liveness,
        ProbeType::Readiness,
        ProbeType::Startup,
    ];

    /// The container field (`livenessProbe`), for error messages.
    pub fn field(self) -> &'static str {
        match self {
            ProbeType::Liveness => "livenessProbe",
            ProbeType::Readiness => "readinessProbe",
            ProbeType::Startup => "startupProbe",
        }
    }

    /// Upstream's `probe_type` label value.
    pub fn metric_label(self) -> &'static str {
        match self {
            ProbeType::Liveness => "Liveness",
            ProbeType::Readiness => "Readiness",
            ProbeType::Startup => "Startup",
        }
    }

    /// The lowercase word of upstream's messages (`failed liveness probe`).
    pub fn word(self) -> &'static str {
        match self {
            ProbeType::Liveness => "liveness",
            ProbeType::Readiness => "readiness",
            ProbeType::Startup => "startup",
        }
    }

    /// The result a new container instance starts with (upstream: readiness Failure,
    /// liveness Success, startup none, i.e. Unknown).
    pub fn initial(self) -> Option<ProbeResult> {
        match self {
            ProbeType::Liveness => Some(ProbeResult::Success),
            ProbeType::Readiness => Some(ProbeResult::Failure),
            ProbeType::Startup => None,
        }
    }
}

impl std::fmt::Display for ProbeType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.metric_label())
    }
}

/// The result of a probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProbeResult {
    /// Passed.
    Success,
    /// Failed.
    Failure,
    /// Could not be run (not counted, not published).
    Unknown,
}

impl ProbeResult {
    /// Upstream's `result` label value.
    pub fn metric_label(self) -> &'static str {
        match self {
            ProbeResult::Success => "successful",
            ProbeResult::Failure => "failed",
            ProbeResult::Unknown => "unknown",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ContainerPort;

    #[test]
    fn ports_resolve_by_name_then_number_and_zero_is_refused() {
        let c = Container {
            name: "c".into(),
            ports: Some(vec![ContainerPort {
                name: Some("http".into()),
                container_port: 8080,
                ..Default::default()
            }]),
            ..Default::default()
        };
        let s = |v: &str| IntOrString::String(v.into());
        assert_eq!(resolve_port(&s("http"), &c), Ok(8080));
        assert_eq!(resolve_port(&s("81"), &c), Ok(81));
        assert_eq!(resolve_port(&IntOrString::Int(82), &c), Ok(82));
        assert_eq!(
            resolve_port(&IntOrString::Int(0), &c),
            Err("0: must be between 1 and 65535, inclusive".into())
        );
        assert_eq!(
            resolve_port(&s("web"), &c),
            Err("\"web\": no container port with this name".into())
        );
    }
}
