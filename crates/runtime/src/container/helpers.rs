//! Decisions about a pod's sandbox and containers that both the runtime manager and
//! the status code make (upstream `pkg/kubelet/container/helpers.go`'s
//! `ShouldContainerBeRestarted`, kuberuntime's `PodSandboxChanged`), so that neither
//! depends on the other for them.

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};

use crate::container::labels::{self, ContainerKind};
use crate::container::RuntimePod;
use crate::{ContainerDetails, ContainerState};

/// Whether a new sandbox is needed (upstream `PodSandboxChanged`), and its attempt:
/// none yet; more than one ready; the newest not ready; the network mode changed
/// (hostNetwork toggled on an API pod, whose UID stays); or a pod-network sandbox
/// without an IP.
pub fn sandbox_changed(pod: &Pod, rt: &RuntimePod) -> (bool, u32) {
    let host_network = pod
        .spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false);
    let Some(newest) = rt.sandboxes.first() else {
        return (true, 0);
    };
    let attempt = labels::parse_name(&newest.name).map_or(0, |p| p.attempt);
    let running = rt
        .sandboxes
        .iter()
        .filter(|s| s.state == ContainerState::Running)
        .count();
    let changed = running > 1
        || newest.state != ContainerState::Running
        || newest.host_network != host_network
        || (!host_network && newest.ip_address.is_empty());
    (changed, attempt.saturating_add(1))
}

/// The pod's restart policy (`Always` when unset).
pub fn policy(spec: &PodSpec) -> &str {
    spec.restart_policy.as_deref().unwrap_or("Always")
}

/// Upstream `ShouldContainerBeRestarted` for a regular container: a deleted pod never
/// restarts; a container never started, created or in an unknown state starts; a dead
/// one starts by restart policy.
pub fn should_restart(pod: &Pod, c: &Container, kind: ContainerKind, rt: &RuntimePod) -> bool {
    if pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let Some(d) = rt.newest(&c.name, kind) else {
        return true;
    };
    match d.state {
        ContainerState::Running => false,
        ContainerState::Created | ContainerState::Unknown => true,
        ContainerState::Exited => match pod.spec.as_ref().map_or("Always", policy) {
            "Never" => false,
            "OnFailure" => d.exit_code != 0,
            _ => true,
        },
    }
}

/// An instance the runtime created and never started, nor tried to: `Created`, no start
/// or finish time, no exit code, no error. What a kubelet killed between its create and
/// its start leaves behind (the engine finishes a create whose client died). It never
/// ran, so replacing it is no restart. A start the runtime refused leaves `Created` too,
/// but with an exit code or an error: that one counts as a failed run, as upstream.
pub fn never_ran(d: &ContainerDetails) -> bool {
    d.state == ContainerState::Created
        && d.started_at.is_none()
        && d.finished_at.is_none()
        && d.exit_code == 0
        && d.error.is_empty()
}
