//! The sync loop's admission of added pods (upstream `HandlePodAdditions` with
//! `canAdmitPod` and `rejectPod`): each new pod is checked against the pods admitted
//! before it (pure arithmetic, no I/O); a rejected pod stays in the pod manager, never
//! reaches a pod worker, and gets a `Failed` status with the reason (written by the
//! status manager) and a `Warning` event. Its handlers are the eviction manager's
//! (under pressure) and the sysctl allowlist's ([`SysctlAdmit`]).

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

/// Upstream's sysctl admit handler (`patternAllowlist.Admit`): a sysctl neither safe
/// nor allowed, or a namespaced one the pod shares with the host, refuses the pod with
/// `SysctlForbidden`.
pub(super) struct SysctlAdmit(pub(super) crate::sysctl::Allowlist);

impl AdmitHandler for SysctlAdmit {
    fn admit(&self, pod: &Pod, _others: &[&Pod]) -> Option<Rejection> {
        self.0.admit(pod).map(|message| Rejection {
            reason: crate::sysctl::FORBIDDEN_REASON.into(),
            message,
        })
    }
}

/// The reason of a pod refused because its memory limit cannot be enforced.
pub(super) const MEMORY_CGROUP_MISSING: &str = "MemoryCgroupMissing";

/// What to do about a kernel without the memory controller.
pub(super) const MEMORY_CGROUP_FIX: &str = "enable it with cgroup_memory=1 cgroup_enable=memory \
     on the kernel command line (Raspberry Pi OS: /boot/firmware/cmdline.txt) and reboot";

/// rkubelet's own handler for a kernel without the memory cgroup controller (upstream's
/// kubelet refuses to start there): a pod with a memory limit is refused, since nothing
/// would enforce it; pods without one run.
pub(super) struct MemoryCgroupAdmit;

impl AdmitHandler for MemoryCgroupAdmit {
    fn admit(&self, pod: &Pod, _others: &[&Pod]) -> Option<Rejection> {
        let spec = pod.spec.as_ref()?;
        let limited = spec
            .init_containers
            .iter()
            .flatten()
            .chain(&spec.containers)
            .find_map(|c| {
                let q = c.resources.as_ref()?.limits.as_ref()?.get("memory")?;
                Some((c.name.clone(), q.0.clone()))
            })?;
        Some(Rejection {
            reason: MEMORY_CGROUP_MISSING.into(),
            message: format!(
                "the node's kernel has no memory cgroup controller, so container {:?}'s memory \
                 limit ({}) cannot be enforced; {MEMORY_CGROUP_FIX}",
                limited.0, limited.1
            ),
        })
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
            runtime::container::format_pod(pod),
            r.reason,
            r.message
        );
        crate::record::event(pod, None, true, &r.reason, &r.message);
        statuses.set(uid, rejected_status(pod, &r));
        self.rejected.insert(uid.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{self, pod, Node};
    use super::*;
    use crate::podconfig::Source;
    use k8s_openapi::api::core::v1::PodStatus;
    use runtime::fake::Op;

    const HUGE: &str = "{containers: [{name: a, image: 'busybox:1', \
                        resources: {requests: {cpu: '100000'}}}]}";
    const SMALL: &str = "{containers: [{name: a, image: 'busybox:1', \
                         resources: {requests: {cpu: 10m}}}]}";

    fn api_pod(name: &str, uid: &str, spec: &str) -> Pod {
        let mut p = pod(name, uid, spec);
        let mut ann = p.metadata.annotations.clone().unwrap_or_default();
        ann.insert(
            crate::podconfig::CONFIG_SOURCE_ANNOTATION.into(),
            "api".into(),
        );
        p.metadata.annotations = Some(ann);
        p
    }

    #[test]
    fn a_pod_that_does_not_fit_is_failed_and_never_run() {
        let rt = testing::runtime(&testing::clock());
        let mut n = Node::new(&rt, &[Source::Api]);
        n.snapshot(
            Source::Api,
            vec![api_pod("big", "u-big", HUGE), api_pod("ok", "u-ok", SMALL)],
        );
        assert!(n.containers_of("u-big").is_empty(), "never started");
        assert!(n.running("u-ok", "a").is_some(), "the one that fits runs");
        let st = n.sl.statuses.get("u-big").expect("a status");
        assert_eq!(st.phase.as_deref(), Some("Failed"));
        assert_eq!(st.reason.as_deref(), Some("OutOfcpu"));
        assert!(st
            .message
            .as_deref()
            .unwrap_or_default()
            .starts_with("Pod was rejected: Node didn't have enough resource: cpu, requested: 100000000, used: 0,"));
        // Later syncs leave it alone; its removal forgets it.
        n.snapshot(
            Source::Api,
            vec![api_pod("big", "u-big", HUGE), api_pod("ok", "u-ok", SMALL)],
        );
        assert!(n.containers_of("u-big").is_empty());
        assert!(n.sl.admission.is_rejected("u-big"));
        n.snapshot(Source::Api, vec![api_pod("ok", "u-ok", SMALL)]);
        assert!(!n.sl.admission.is_rejected("u-big"));
    }

    #[test]
    fn a_pod_the_api_says_failed_is_not_run_again_after_a_restart() {
        let rt = testing::runtime(&testing::clock());
        let mut n = Node::new(&rt, &[Source::Api]);
        let mut p = api_pod("big", "u-big", SMALL);
        p.status = Some(PodStatus {
            phase: Some("Failed".into()),
            reason: Some("OutOfmemory".into()),
            ..Default::default()
        });
        n.snapshot(Source::Api, vec![p]);
        assert!(n.containers_of("u-big").is_empty());
        assert_eq!(rt.count(Op::Create), 0);
    }

    #[test]
    fn without_the_memory_controller_only_pods_with_memory_limits_are_refused() {
        let spec = |y: &str| pod("p", "u-p", y);
        let h = MemoryCgroupAdmit;
        let plain =
            spec("{containers: [{name: a, image: 'busybox:1', resources: {limits: {cpu: 100m}}}]}");
        assert!(h.admit(&plain, &[]).is_none());
        let limited = spec(
            "{initContainers: [{name: init, image: 'busybox:1'}], \
             containers: [{name: a, image: 'busybox:1', resources: {limits: {memory: 64Mi}}}]}",
        );
        let r = h.admit(&limited, &[]).expect("refused");
        assert_eq!(r.reason, MEMORY_CGROUP_MISSING);
        assert!(
            r.message
                .contains("container \"a\"'s memory limit (64Mi) cannot be enforced")
                && r.message.contains("cgroup_enable=memory"),
            "{}",
            r.message
        );
        let init = spec(
            "{initContainers: [{name: init, image: 'busybox:1', resources: {limits: {memory: 1Gi}}}], \
             containers: [{name: a, image: 'busybox:1'}]}",
        );
        assert!(h
            .admit(&init, &[])
            .expect("refused")
            .message
            .contains("\"init\""));
    }

    #[test]
    fn start_up_reports_a_missing_memory_controller_once_with_its_fix() {
        let tmp = base::testutil::TempDir::new("memcg-start");
        tmp.write("cgroup.controllers", "cpuset cpu io memory pids\n");
        assert_eq!(super::super::memory_cgroup_missing(&tmp.0, None), None);
        tmp.write("cgroup.controllers", "cpuset cpu io pids\n");
        let why = super::super::memory_cgroup_missing(&tmp.0, None).expect("missing");
        assert!(
            why.contains(MEMORY_CGROUP_MISSING) && why.contains(MEMORY_CGROUP_FIX),
            "{why}"
        );
    }

    #[test]
    fn without_the_memory_controller_the_sync_loop_refuses_only_memory_limited_pods() {
        let rt = testing::runtime(&testing::clock());
        let mut n = Node::with_memory_cgroup(&rt, &[Source::File], false);
        n.snapshot(
            Source::File,
            vec![
                pod(
                    "limited",
                    "u-limited",
                    "{containers: [{name: a, image: 'busybox:1', \
                     resources: {limits: {memory: 32Mi}}}]}",
                ),
                pod("plain", "u-plain", SMALL),
            ],
        );
        assert!(n.containers_of("u-limited").is_empty(), "never started");
        let st = n.sl.statuses.get("u-limited").expect("a status");
        assert_eq!(st.phase.as_deref(), Some("Failed"));
        assert_eq!(st.reason.as_deref(), Some(MEMORY_CGROUP_MISSING));
        assert!(n.running("u-plain", "a").is_some());
    }

    #[test]
    fn a_forbidden_sysctl_fails_the_pod_with_sysctl_forbidden_even_a_static_one() {
        let rt = testing::runtime(&testing::clock());
        let mut n = Node::new(&rt, &[Source::File]);
        let with = |sysctl: &str| {
            format!(
                "{{securityContext: {{sysctls: [{sysctl}]}}, \
                 containers: [{{name: a, image: 'busybox:1'}}]}}"
            )
        };
        n.snapshot(
            Source::File,
            vec![
                pod(
                    "unsafe",
                    "u-unsafe",
                    &with("{name: kernel.msgmax, value: '9000'}"),
                ),
                pod(
                    "safe",
                    "u-safe",
                    &with("{name: kernel/shm_rmid_forced, value: '1'}"),
                ),
            ],
        );
        assert!(n.containers_of("u-unsafe").is_empty(), "never started");
        assert!(n.running("u-safe", "a").is_some(), "a safe sysctl runs");
        let st = n.sl.statuses.get("u-unsafe").expect("a status");
        assert_eq!(st.phase.as_deref(), Some("Failed"));
        assert_eq!(st.reason.as_deref(), Some("SysctlForbidden"));
        assert_eq!(
            st.message.as_deref(),
            Some("Pod was rejected: forbidden sysctl: \"kernel.msgmax\" not allowlisted")
        );
    }

    #[test]
    fn static_pods_are_critical_and_admitted_whatever_they_ask() {
        let rt = testing::runtime(&testing::clock());
        let mut n = Node::new(&rt, &[Source::File]);
        n.snapshot(Source::File, vec![pod("big", "u-big", HUGE)]);
        assert!(n.running("u-big", "a").is_some());
        assert_eq!(rt.count(Op::Create), 2);
    }

    #[test]
    fn a_host_port_taken_by_an_admitted_pod_rejects_the_newer_one() {
        let rt = testing::runtime(&testing::clock());
        let mut n = Node::new(&rt, &[Source::File]);
        let port = "{containers: [{name: a, image: 'busybox:1', \
                    ports: [{containerPort: 80, hostPort: 18080}]}]}";
        let mut older = pod("older", "u-1", port);
        older.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2020-01-01T00:00:00Z".parse().expect("time"),
            ));
        let mut newer = pod("newer", "u-2", port);
        newer.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2021-01-01T00:00:00Z".parse().expect("time"),
            ));
        // Listed newest first: admission still goes oldest first.
        n.snapshot(Source::File, vec![newer, older]);
        assert!(n.running("u-1", "a").is_some());
        assert!(n.containers_of("u-2").is_empty());
        let st = n.sl.statuses.get("u-2").expect("a status");
        assert_eq!(st.reason.as_deref(), Some("NodePorts"));
    }
}
