//! The sync loop's admission of added pods (upstream `HandlePodAdditions` with
//! `canAdmitPod` and `rejectPod`): each new pod is checked against the pods admitted
//! before it (pure arithmetic, no I/O); a rejected pod stays in the pod manager, never
//! reaches a pod worker, and gets a `Failed` status with the reason (written by the
//! status manager) and a `Warning` event.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, PodStatus};

use crate::admission::{self, AdmitHandler, NodeInfo, Rejection};
use crate::status::{self, StatusCache};

/// The sync loop's admission state.
pub(super) struct Admission {
    node: NodeInfo,
    /// Checks run before the resource fit (the eviction manager's goes here).
    handlers: Vec<Box<dyn AdmitHandler>>,
    /// Pods that never run, by UID, until their source removes them: those rejected,
    /// and those already terminal in the API when added.
    rejected: HashSet<String>,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("node", &self.node)
            .field("handlers", &self.handlers.len())
            .field("rejected", &self.rejected)
            .finish()
    }
}

impl Admission {
    /// Admission against `node`, with no extra checks.
    pub(super) fn new(node: NodeInfo) -> Self {
        Admission {
            node,
            handlers: Vec::new(),
            rejected: HashSet::new(),
        }
    }

    /// Adds a check run before the resource fit (upstream `AddPodAdmitHandler`).
    #[allow(dead_code)] // The eviction manager's hook.
    pub(super) fn add_handler(&mut self, h: Box<dyn AdmitHandler>) {
        self.handlers.push(h);
    }

    /// Was the pod rejected?
    pub(super) fn is_rejected(&self, uid: &str) -> bool {
        self.rejected.contains(uid)
    }

    /// The pod's source removed it.
    pub(super) fn forget(&mut self, uid: &str) {
        self.rejected.remove(uid);
    }
}

/// The status of a rejected pod (upstream `rejectPod`).
pub(super) fn rejected_status(pod: &Pod, r: &Rejection) -> PodStatus {
    PodStatus {
        phase: Some("Failed".into()),
        reason: Some(r.reason.clone()),
        message: Some(format!("Pod was rejected: {}", r.message)),
        qos_class: Some(status::qos_class(pod).into()),
        ..Default::default()
    }
}

impl Admission {
    /// Admits a newly added pod or rejects it (status, event; the caller never runs
    /// it). `pods` are the pod manager's pods. A pod the API already says is terminal
    /// (rejected before a restart, or finished) is not checked and never runs again
    /// (upstream's pod workers only terminate a terminal pod); one being deleted is
    /// not checked.
    pub(super) fn admit(
        &mut self,
        uid: &str,
        pod: &Pod,
        pods: &HashMap<String, Arc<Pod>>,
        statuses: &StatusCache,
    ) {
        let api_phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if status::is_terminal_phase(api_phase) {
            self.rejected.insert(uid.to_string());
            return;
        }
        if pod.metadata.deletion_timestamp.is_some() {
            return;
        }
        // Upstream `filterOutInactivePods`: admitted pods that are not terminal.
        let others: Vec<&Pod> = pods
            .iter()
            .filter(|(u, _)| u.as_str() != uid && !self.is_rejected(u))
            .filter(|(u, p)| {
                let phase = statuses
                    .get(u)
                    .and_then(|s| s.phase.clone())
                    .or_else(|| p.status.as_ref().and_then(|s| s.phase.clone()));
                !status::is_terminal_phase(phase.as_deref())
            })
            .map(|(_, p)| p.as_ref())
            .collect();
        let Err(r) = admission::can_admit(pod, &others, &self.node, &self.handlers) else {
            return;
        };
        log::info!(
            "pod {} rejected: {}: {}",
            crate::container::format_pod(pod),
            r.reason,
            r.message
        );
        crate::record::event(pod, None, true, &r.reason, &r.message);
        statuses.set(uid, rejected_status(pod, &r));
        self.rejected.insert(uid.to_string());
    }
}
