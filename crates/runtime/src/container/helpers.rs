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
///
/// A kubelet killed *during* its start leaves, on containerd, an instance `Exited`
/// (128, `StartError`) with no start time: containerd runs the start under the call's
/// context and ends it when the client goes, with one of `START_CUT_SHORT` in its
/// message (seen in the chaos suite's kill -9 on containerd). That start was cut
/// short, not refused: it never ran either.
pub fn never_ran(d: &ContainerDetails) -> bool {
    if d.started_at.is_some() {
        return false;
    }
    match d.state {
        ContainerState::Created => {
            d.finished_at.is_none() && d.exit_code == 0 && d.error.is_empty()
        }
        ContainerState::Exited => START_CUT_SHORT.iter().any(|m| d.error.contains(m)),
        _ => false,
    }
}

/// How containerd's start ends when its client goes away mid-call: the call's context
/// cancelled (Go's `context.Canceled`), or the shim it was starting killed with it.
const START_CUT_SHORT: [&str; 2] = [
    "context canceled",
    "failed to start shim: start failed: : signal: killed",
];

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    fn details(state: ContainerState, exit_code: i64, error: &str) -> ContainerDetails {
        ContainerDetails {
            name: "k8s_c_p_ns_u_1".into(),
            id: "c1".into(),
            labels: Default::default(),
            state,
            image: String::new(),
            image_id: String::new(),
            created: SystemTime::UNIX_EPOCH,
            started_at: None,
            finished_at: (state == ContainerState::Exited)
                .then(|| SystemTime::UNIX_EPOCH + Duration::from_secs(5)),
            exit_code,
            oom_killed: false,
            error: error.into(),
            pid: 0,
            ip_address: String::new(),
            additional_ips: Vec::new(),
            host_network: false,
            stop_signal: String::new(),
            rootfs_dir: String::new(),
            log_path: String::new(),
        }
    }

    #[test]
    fn never_ran_is_a_create_left_alone_or_a_start_its_kubelet_was_killed_in() {
        assert!(never_ran(&details(ContainerState::Created, 0, "")));
        // containerd 1.6's ends of a start whose kubelet was killed during the call,
        // as the chaos suite's kill -9 on containerd met them.
        for cut in [
            "failed to create containerd task: failed to create shim task: context canceled: unknown",
            "failed to start containerd task \"e0fa\": context canceled: unknown",
            "failed to create containerd task: failed to start shim: start failed: : signal: killed: unknown",
        ] {
            assert!(never_ran(&details(ContainerState::Exited, 128, cut)), "{cut}");
        }
        // A start the runtime refused is a failed run.
        assert!(!never_ran(&details(
            ContainerState::Created,
            128,
            "no such file"
        )));
        let refused = "failed to create containerd task: failed to create shim task: OCI \
                       runtime create failed: exec: \"nope\": executable file not found in $PATH";
        assert!(!never_ran(&details(ContainerState::Exited, 128, refused)));
        // Anything that started ran, whatever its error says.
        let mut ran = details(ContainerState::Exited, 137, "context canceled");
        ran.started_at = Some(SystemTime::UNIX_EPOCH);
        assert!(!never_ran(&ran));
        assert!(!never_ran(&details(ContainerState::Running, 0, "")));
    }
}
