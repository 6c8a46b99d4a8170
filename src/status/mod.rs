//! Pod status: computed from what the runtime reports (upstream
//! `generateAPIPodStatus`, `getPhase`, `convertToAPIContainerStatuses`,
//! `status/generate.go`, the status manager's `TerminatePod` and `normalizeStatus`,
//! and `qos.ComputePodQOS`), and the cache that publishes it to readers.
//!
//! The computation is pure: the pod, its containers as the runtime reports them, the
//! waiting reasons of the last sync (backoff, pull errors, hook failures: upstream's
//! reason cache), the previous status (for transition times, restart counts of vanished
//! containers and sticky terminal phases) and `now` go in; a `PodStatus` comes out. Pod
//! workers write the result into [`StatusCache`]; the HTTP servers read it.
//!
//! Over 800 lines: nearly half of it is the table tests of phases, conditions and
//! container statuses, beside the pure functions they pin down.

pub mod manager;
pub(crate) mod mirror;
pub(crate) mod patch;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use k8s_openapi::api::core::v1::{
    Container, ContainerState as ApiState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};

use base::loops::lock;
use base::time::k8s_time;
use runtime::container::helpers::{sandbox_changed, should_restart};
use runtime::container::labels::{self, ContainerKind};
use runtime::container::RuntimePod;
use runtime::container::{kind_of, Waiting};
use runtime::{ContainerDetails, ContainerState};

/// Upstream `ContainerReasonStatusUnknown`.
pub(crate) const REASON_STATUS_UNKNOWN: &str = "ContainerStatusUnknown";
/// Upstream's exit code for a container whose end was not seen (as if SIGKILLed).
pub(crate) const EXIT_CODE_UNKNOWN: i32 = 137;
/// Upstream `MaxPodTerminationMessageLogLength`: all termination messages of one pod
/// together, split evenly between its containers.
pub(crate) const MAX_POD_TERMINATION_MESSAGE: usize = 12 * 1024;
/// The reason of a pod failed by `activeDeadlineSeconds` (upstream `activeDeadlineHandler`).
pub(crate) const REASON_DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
/// Its message, as upstream words it.
pub(crate) const MESSAGE_DEADLINE_EXCEEDED: &str =
    "Pod was active on the node longer than the specified deadline";

/// The computed statuses of every pod the kubelet runs, by UID. Written by pod workers,
/// read by the servers and the status manager. One small lock. Every `set` takes a
/// new version (one counter for all pods), so the status manager knows which statuses
/// changed since it wrote them, and pokes it (a bounded channel of one: a poke that
/// finds it full is dropped, the pending one covers it).
#[derive(Debug, Default)]
pub struct StatusCache {
    inner: Mutex<CacheInner>,
    notify: Option<crossbeam_channel::Sender<()>>,
}

#[derive(Debug, Default)]
struct CacheInner {
    statuses: HashMap<String, (u64, Arc<PodStatus>)>,
    version: u64,
}

impl StatusCache {
    /// A cache that pokes `notify` on every change (the status manager's wake-up).
    pub fn with_notify(notify: crossbeam_channel::Sender<()>) -> Self {
        StatusCache {
            inner: Mutex::default(),
            notify: Some(notify),
        }
    }

    /// The last status computed for a pod.
    pub fn get(&self, uid: &str) -> Option<Arc<PodStatus>> {
        lock(&self.inner).statuses.get(uid).map(|(_, s)| s.clone())
    }

    /// The last status computed for a pod, with its version.
    pub fn get_versioned(&self, uid: &str) -> Option<(u64, Arc<PodStatus>)> {
        lock(&self.inner).statuses.get(uid).cloned()
    }

    /// Publishes a pod's status. An unchanged status keeps its version.
    pub fn set(&self, uid: &str, status: PodStatus) {
        {
            let mut inner = lock(&self.inner);
            if inner.statuses.get(uid).is_some_and(|(_, s)| **s == status) {
                return;
            }
            inner.version += 1;
            let v = inner.version;
            inner
                .statuses
                .insert(uid.to_string(), (v, Arc::new(status)));
        }
        if let Some(tx) = &self.notify {
            // Full: a poke is pending already; never block a pod worker.
            let _ = tx.try_send(());
        }
    }

    /// Forgets a pod (after it is gone).
    pub fn remove(&self, uid: &str) {
        lock(&self.inner).statuses.remove(uid);
    }

    /// The UIDs with a status.
    pub fn uids(&self) -> Vec<String> {
        lock(&self.inner).statuses.keys().cloned().collect()
    }
}

/// Everything the status computation needs besides the pod and its runtime view. A
/// struct, so that more inputs (probe results) are added without touching callers.
#[derive(Debug)]
pub struct StatusInputs<'a> {
    /// Containers the last sync decided not to start, by name, with the reason.
    pub waiting: &'a BTreeMap<String, Waiting>,
    /// The status computed before, if any.
    pub previous: Option<&'a PodStatus>,
    /// The node's IP address.
    pub host_ip: &'a str,
    /// Now.
    pub now: SystemTime,
    /// The pod is being torn down for good (deleted): a pod whose containers all
    /// stopped is then Succeeded or Failed whatever its restart policy (upstream
    /// `podIsTerminal`; never for static pods).
    pub pod_is_terminal: bool,
    /// Published probe results, for `ready` and `started` (None: probes ignored, a
    /// running container is ready and started).
    pub probes: Option<&'a runtime::container::results::ResultsCache>,
    /// The runtime's name, the scheme of container IDs (`docker://…`,
    /// `containerd://…`: upstream's `ContainerID`).
    pub runtime_type: &'a str,
}

/// True when the pod has run longer than its `activeDeadlineSeconds` since `start`
/// (upstream `pastActiveDeadline`; the sync loop's tick checks it).
pub(crate) fn past_active_deadline(pod: &Pod, start: Option<SystemTime>, now: SystemTime) -> bool {
    let Some(deadline) = pod.spec.as_ref().and_then(|s| s.active_deadline_seconds) else {
        return false;
    };
    let Some(start) = start else { return false };
    let deadline = base::time::secs(deadline);
    now.duration_since(start).is_ok_and(|ran| ran >= deadline)
}

/// True for `Succeeded` and `Failed`.
pub(crate) fn is_terminal_phase(phase: Option<&str>) -> bool {
    matches!(phase, Some("Succeeded" | "Failed"))
}

/// The start time a status carries.
pub fn start_time(status: &PodStatus) -> Option<SystemTime> {
    status.start_time.as_ref().map(base::time::system_time)
}

/// Computes a pod's status from its runtime view.
pub fn generate(pod: &Pod, rt: &RuntimePod, inp: &StatusInputs<'_>) -> PodStatus {
    let (containers, inits) = pod.spec.as_ref().map_or((&[][..], &[][..]), |s| {
        (
            &s.containers[..],
            s.init_containers.as_deref().unwrap_or_default(),
        )
    });
    let has_inits = !inits.is_empty();
    let prev = inp.previous;

    let init_statuses = container_statuses(
        pod,
        inits,
        ContainerKind::Init,
        rt,
        inp,
        prev.and_then(|p| p.init_container_statuses.as_deref()),
        has_inits,
    );
    let mut app_statuses = container_statuses(
        pod,
        containers,
        ContainerKind::App,
        rt,
        inp,
        prev.and_then(|p| p.container_statuses.as_deref()),
        has_inits,
    );
    base::sort::sort_by(&mut app_statuses, |a, b| a.name.cmp(&b.name));

    let start_time = prev
        .and_then(|p| p.start_time.clone())
        .unwrap_or_else(|| k8s_time(inp.now));
    let mut phase = get_phase(
        pod,
        &init_statuses,
        &app_statuses,
        inp.pod_is_terminal,
        has_active_regular_container(pod, rt),
    );
    // Terminal phases are sticky: a pod never leaves Succeeded or Failed.
    let prev_phase = prev.and_then(|p| p.phase.clone());
    if !is_terminal_phase(Some(&phase)) && is_terminal_phase(prev_phase.as_deref()) {
        phase = prev_phase.clone().unwrap_or_default();
    }
    let (mut reason, mut message) = (None, None);
    if prev_phase.as_deref() == Some(phase.as_str()) {
        // The reason and message belong to the phase: kept while it stays.
        reason = prev.and_then(|p| p.reason.clone());
        message = prev.and_then(|p| p.message.clone());
    }
    if past_active_deadline(pod, Some(base::time::system_time(&start_time)), inp.now)
        && phase != "Succeeded"
    {
        phase = "Failed".into();
        reason = Some(REASON_DEADLINE_EXCEEDED.into());
        message = Some(MESSAGE_DEADLINE_EXCEEDED.into());
    }

    let host_network = pod.spec.as_ref().and_then(|s| s.host_network) == Some(true);
    let pod_ips: Vec<String> = if host_network {
        vec![inp.host_ip.to_string()]
    } else {
        let node_ipv6 = inp.host_ip.contains(':');
        let ips = rt
            .running_sandbox()
            .map(|s| s.pod_ips(node_ipv6))
            .unwrap_or_default();
        if ips.is_empty() {
            // A stopped sandbox has no IP; keep the last ones known, as upstream does.
            prev.and_then(|p| p.pod_ips.clone())
                .map(|ips| ips.into_iter().map(|p| p.ip).collect())
                .or_else(|| prev.and_then(|p| p.pod_ip.clone()).map(|ip| vec![ip]))
                .unwrap_or_default()
        } else {
            ips
        }
    };
    let pod_ip = pod_ips.first().cloned();

    let all: Vec<&ContainerStatus> = init_statuses.iter().chain(&app_statuses).collect();
    let conditions = conditions(pod, rt, &all, &phase, prev, inp.now);

    let mut status = PodStatus {
        phase: Some(phase),
        reason,
        message,
        conditions: Some(conditions),
        host_ip: Some(inp.host_ip.to_string()),
        host_ips: Some(vec![HostIP {
            ip: inp.host_ip.to_string(),
        }]),
        pod_ip,
        pod_ips: (!pod_ips.is_empty())
            .then(|| pod_ips.into_iter().map(|ip| PodIP { ip }).collect()),
        start_time: Some(start_time),
        qos_class: Some(qos_class(pod).to_string()),
        init_container_statuses: has_inits.then_some(init_statuses),
        container_statuses: Some(app_statuses),
        ..Default::default()
    };
    truncate_termination_messages(pod, &mut status);
    status
}

/// The kubelet-owned conditions, in upstream's order: PodReadyToStartContainers,
/// Initialized, Ready, ContainersReady, PodScheduled. `lastTransitionTime` changes only
/// when a condition's status flips.
fn conditions(
    pod: &Pod,
    rt: &RuntimePod,
    all: &[&ContainerStatus],
    phase: &str,
    prev: Option<&PodStatus>,
    now: SystemTime,
) -> Vec<PodCondition> {
    let (containers, inits) = pod.spec.as_ref().map_or((&[][..], &[][..]), |s| {
        (
            &s.containers[..],
            s.init_containers.as_deref().unwrap_or_default(),
        )
    });
    let find = |name: &str| all.iter().find(|s| s.name == name).copied();
    let list = |names: &[String]| format!("[{}]", names.join(" "));
    // The five conditions, kept with the status for the pod's life: a vector grown by
    // pushes would hold room for eight.
    let mut out = Vec::with_capacity(5);
    let prev_conds = prev.and_then(|p| p.conditions.as_ref());
    let mut push = |ty: &str, ok: bool, reason: Option<&str>, message: Option<String>| {
        let status = if ok { "True" } else { "False" }.to_string();
        let last = prev_conds
            .and_then(|cs| cs.iter().find(|c| c.type_ == ty))
            .filter(|c| c.status == status)
            .and_then(|c| c.last_transition_time.clone())
            .unwrap_or_else(|| k8s_time(now));
        out.push(PodCondition {
            type_: ty.to_string(),
            status,
            reason: reason.map(str::to_string),
            message,
            last_transition_time: Some(last),
            last_probe_time: None,
            observed_generation: None,
        });
    };

    // PodReadyToStartContainers: the sandbox is there and needs no replacing.
    push(
        "PodReadyToStartContainers",
        !sandbox_changed(pod, rt).0,
        None,
        None,
    );

    // Initialized.
    let mut incomplete = Vec::new();
    for c in inits {
        let Some(s) = find(&c.name) else { continue };
        if labels::is_sidecar(c) {
            if s.started != Some(true) {
                incomplete.push(c.name.clone());
            }
        } else if s
            .state
            .as_ref()
            .and_then(|st| st.terminated.as_ref())
            .is_none_or(|t| t.exit_code != 0)
        {
            incomplete.push(c.name.clone());
        }
    }
    let regular_started = containers.iter().any(|c| {
        find(&c.name)
            .and_then(|s| s.state.as_ref())
            .is_some_and(|st| st.running.is_some() || st.terminated.is_some())
    });
    if phase == "Succeeded" {
        push("Initialized", true, Some("PodCompleted"), None);
    } else if regular_started || incomplete.is_empty() {
        push("Initialized", true, None, None);
    } else {
        push(
            "Initialized",
            false,
            Some("ContainersNotInitialized"),
            Some(format!(
                "containers with incomplete status: {}",
                list(&incomplete)
            )),
        );
    }

    // ContainersReady (sidecars and app containers), then Ready (no readiness gates
    // are evaluated by a standalone kubelet: none can be set without an API server).
    let mut unready = Vec::new();
    for c in inits.iter().filter(|c| labels::is_sidecar(c)) {
        if find(&c.name).is_some_and(|s| !s.ready) {
            unready.push(c.name.clone());
        }
    }
    for c in containers {
        if find(&c.name).is_some_and(|s| !s.ready) {
            unready.push(c.name.clone());
        }
    }
    let (ready, reason, message) = match phase {
        "Succeeded" => (false, Some("PodCompleted"), None),
        "Failed" => (false, Some("PodFailed"), None),
        _ if unready.is_empty() => (true, None, None),
        _ => (
            false,
            Some("ContainersNotReady"),
            Some(format!(
                "containers with unready status: {}",
                list(&unready)
            )),
        ),
    };
    push("Ready", ready, reason, message.clone());
    push("ContainersReady", ready, reason, message);
    push("PodScheduled", true, None, None);
    out
}

/// Upstream `HasAnyActiveRegularContainerStarted`: an app container of the current
/// sandbox exists, so the init containers ran in this sandbox.
fn has_active_regular_container(pod: &Pod, rt: &RuntimePod) -> bool {
    let Some(sandbox) = rt.sandboxes.first() else {
        return false;
    };
    let names: Vec<&str> = pod
        .spec
        .iter()
        .flat_map(|s| s.containers.iter().map(|c| c.name.as_str()))
        .collect();
    rt.containers.iter().any(|c| {
        kind_of(c) == ContainerKind::App
            && c.labels.get(labels::SANDBOX_ID) == Some(&sandbox.id)
            && c.labels
                .get(labels::CONTAINER_NAME)
                .is_some_and(|n| names.contains(&n.as_str()))
    })
}

fn waiting_state(reason: Option<&str>, message: Option<&str>) -> ApiState {
    ApiState {
        waiting: Some(ContainerStateWaiting {
            reason: reason.map(str::to_string),
            message: message.map(str::to_string),
        }),
        ..Default::default()
    }
}

fn unknown_terminated(message: &str) -> ApiState {
    ApiState {
        terminated: Some(ContainerStateTerminated {
            exit_code: EXIT_CODE_UNKNOWN,
            reason: Some(REASON_STATUS_UNKNOWN.into()),
            message: Some(message.into()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn is_running(s: Option<&ApiState>) -> bool {
    s.is_some_and(|s| s.running.is_some())
}

fn is_terminated(s: Option<&ApiState>) -> bool {
    s.is_some_and(|s| s.terminated.is_some())
}

/// Upstream `convertToAPIContainerStatuses` for one list (init or app containers).
fn container_statuses(
    pod: &Pod,
    containers: &[Container],
    kind: ContainerKind,
    rt: &RuntimePod,
    inp: &StatusInputs<'_>,
    previous: Option<&[ContainerStatus]>,
    has_inits: bool,
) -> Vec<ContainerStatus> {
    let default_reason = if has_inits {
        "PodInitializing"
    } else {
        "ContainerCreating"
    };
    let old = |name: &str| previous.and_then(|p| p.iter().find(|s| s.name == name));
    containers
        .iter()
        .map(|c| {
            let old = old(&c.name);
            // Default: waiting to be created, with what the old status knew.
            let mut st = ContainerStatus {
                name: c.name.clone(),
                image: c.image.clone().unwrap_or_default(),
                state: Some(waiting_state(Some(default_reason), None)),
                ..Default::default()
            };
            if let Some(o) = old {
                if is_terminated(o.state.as_ref()) {
                    st = o.clone();
                } else {
                    st.restart_count = o.restart_count;
                    st.last_state = o.last_state.clone();
                }
            }
            let instances = rt.instances(&c.name, kind);
            if instances.is_empty() {
                // It ran before and its record vanished: it ended, we do not know how.
                let default_waiting = st
                    .state
                    .as_ref()
                    .and_then(|s| s.waiting.as_ref())
                    .is_some_and(|w| w.reason.as_deref() == Some(default_reason));
                let had_last = st
                    .last_state
                    .as_ref()
                    .is_some_and(|l| l.terminated.is_some());
                if old.is_some_and(|o| is_running(o.state.as_ref())) && default_waiting && !had_last
                {
                    st.last_state = Some(unknown_terminated(
                        "The container could not be located when the pod was deleted.  \
                         The container used to be Running",
                    ));
                    if pod.metadata.deletion_timestamp.is_none() {
                        st.restart_count = st.restart_count.saturating_add(1);
                    }
                }
            }
            for (i, d) in instances.iter().take(2).enumerate() {
                let converted = convert(c, d, old, inp.runtime_type);
                if i == 0 {
                    st = converted;
                } else {
                    st.last_state = converted.state;
                }
            }
            // A container the last sync could not start shows why (upstream's reason
            // cache), unless it will not be restarted anyway.
            let newest = instances.first();
            let done_init = kind == ContainerKind::Init
                && newest.is_some_and(|d| d.state == ContainerState::Exited && d.exit_code == 0);
            if !done_init && should_restart(pod, c, kind, rt) {
                if let Some(w) = inp.waiting.get(&c.name) {
                    if is_terminated(st.state.as_ref()) {
                        st.last_state = st.state.clone();
                    }
                    st.state = Some(waiting_state(Some(&w.reason), Some(&w.message)));
                }
            }
            readiness(c, kind, &mut st, inp.probes);
            if st.last_state.is_none() {
                st.last_state = Some(ApiState::default());
            }
            st
        })
        .collect()
}

/// `started` and `ready` (upstream §5.4). With probes, for a running app container:
/// started = startup probe succeeded (or there is none); ready = started and readiness
/// probe succeeded (or there is none); a probe without a published result counts as
/// not passed. Without probes: started = running; ready = running (app containers and
/// sidecars), or exited 0 (regular init containers).
fn readiness(
    c: &Container,
    kind: ContainerKind,
    st: &mut ContainerStatus,
    probes: Option<&runtime::container::results::ResultsCache>,
) {
    use runtime::container::{ProbeResult, ProbeType};
    let running = is_running(st.state.as_ref());
    let id = st
        .container_id
        .as_deref()
        .and_then(|c| c.split_once("://"))
        .map(|(_, id)| id);
    if let (Some(p), Some(id), ContainerKind::App, true) = (probes, id, kind, running) {
        let passed = |has: bool, ty| !has || p.get(id, ty) == Some(ProbeResult::Success);
        let started = passed(c.startup_probe.is_some(), ProbeType::Startup);
        st.started = Some(started);
        st.ready = started && passed(c.readiness_probe.is_some(), ProbeType::Readiness);
        return;
    }
    st.started = Some(running);
    st.ready = if kind == ContainerKind::Init && !labels::is_sidecar(c) {
        st.state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .is_some_and(|t| t.exit_code == 0)
    } else {
        running
    };
}

/// One runtime instance as an API container status (upstream `convertContainerStatus`),
/// its IDs in `runtime_type`'s scheme.
fn convert(
    c: &Container,
    d: &ContainerDetails,
    old: Option<&ContainerStatus>,
    runtime_type: &str,
) -> ContainerStatus {
    let mut restart_count = i32::try_from(labels::restart_count(&d.labels)).unwrap_or(i32::MAX);
    let state = match d.state {
        ContainerState::Running => ApiState {
            running: Some(ContainerStateRunning {
                started_at: d.started_at.map(k8s_time),
            }),
            ..Default::default()
        },
        // Created but not running: waiting to be running, no reason.
        ContainerState::Created => waiting_state(None, None),
        ContainerState::Exited => terminated(d, runtime_type),
        ContainerState::Unknown if old.is_some_and(|o| is_running(o.state.as_ref())) => {
            restart_count = old.map_or(0, |o| o.restart_count).saturating_add(1);
            unknown_terminated("The container could not be located when the pod was terminated")
        }
        ContainerState::Unknown => waiting_state(None, None),
    };
    ContainerStatus {
        name: c.name.clone(),
        image: c.image.clone().unwrap_or_default(),
        image_id: image_id(&d.image_id, runtime_type),
        container_id: Some(format!("{runtime_type}://{}", d.id)),
        restart_count,
        state: Some(state),
        ..Default::default()
    }
}

/// A container status's `imageID`: dockershim's `docker://<image ID>` on Docker; on a
/// CRI runtime the image reference it reports, as upstream writes `ImageRef`
/// (`docker.io/library/busybox@sha256:…`, or `sha256:…` for an image without a
/// repository digest).
fn image_id(id: &str, runtime_type: &str) -> String {
    if runtime_type == "docker" {
        format!("docker://{id}")
    } else {
        id.to_string()
    }
}

/// The terminated state of an exited instance (dockershim's reason mapping): OOMKilled,
/// Completed or Error when it ran; ContainerCannotRun when it never started. The
/// message is the runtime's error, with the termination message (read by the runtime
/// manager into `error`) after it.
fn terminated(d: &ContainerDetails, runtime_type: &str) -> ApiState {
    let (reason, started, finished) = match d.finished_at {
        Some(f) if d.oom_killed => ("OOMKilled", d.started_at, Some(f)),
        Some(f) if d.exit_code == 0 => ("Completed", d.started_at, Some(f)),
        Some(f) => ("Error", d.started_at, Some(f)),
        // Never ran: Docker could not start it.
        None if d.exit_code != 0 => ("ContainerCannotRun", Some(d.created), Some(d.created)),
        None => ("Completed", d.started_at, None),
    };
    ApiState {
        terminated: Some(ContainerStateTerminated {
            exit_code: i32::try_from(d.exit_code).unwrap_or(-1),
            reason: Some(reason.into()),
            message: (!d.error.is_empty()).then(|| d.error.clone()),
            started_at: started.map(k8s_time),
            finished_at: finished.map(k8s_time),
            container_id: Some(format!("{runtime_type}://{}", d.id)),
            signal: None,
        }),
        ..Default::default()
    }
}

/// Upstream `normalizeStatus`: all termination messages of a pod together stay under
/// [`MAX_POD_TERMINATION_MESSAGE`], split evenly between the containers.
fn truncate_termination_messages(pod: &Pod, status: &mut PodStatus) {
    let n = pod.spec.as_ref().map_or(0, |s| {
        s.containers.len() + s.init_containers.as_ref().map_or(0, Vec::len)
    });
    let per = MAX_POD_TERMINATION_MESSAGE / n.max(1);
    let cut = |st: &mut Option<ApiState>| {
        if let Some(m) = st
            .as_mut()
            .and_then(|s| s.terminated.as_mut())
            .and_then(|t| t.message.as_mut())
        {
            if m.len() > per {
                let mut end = per;
                while !m.is_char_boundary(end) {
                    end -= 1;
                }
                m.truncate(end);
            }
        }
    };
    for s in status
        .init_container_statuses
        .iter_mut()
        .flatten()
        .chain(status.container_statuses.iter_mut().flatten())
    {
        cut(&mut s.state);
        cut(&mut s.last_state);
    }
}

/// Upstream `TerminatePod`: once a pod has been stopped for good, every container that
/// shows no terminated state gets one (`ContainerStatusUnknown`, exit code 137): it was
/// not seen ending; and a pod that is not static and not yet Succeeded or Failed is
/// Failed (`force_terminal`), so a deleted pod that never ran still ends terminal and
/// can be deleted for good. Run after a kill whose pod keeps a status.
pub(crate) fn terminate(status: &PodStatus, force_terminal: bool) -> PodStatus {
    let mut s = status.clone();
    if force_terminal && !is_terminal_phase(s.phase.as_deref()) {
        s.phase = Some("Failed".into());
    }
    for c in s
        .init_container_statuses
        .iter_mut()
        .flatten()
        .chain(s.container_statuses.iter_mut().flatten())
    {
        if !is_terminated(c.state.as_ref()) {
            c.state = Some(unknown_terminated(
                "The container could not be located when the pod was terminated",
            ));
            c.ready = false;
            c.started = Some(false);
        }
    }
    s
}

/// Upstream `getPhase`.
fn get_phase(
    pod: &Pod,
    inits: &[ContainerStatus],
    apps: &[ContainerStatus],
    pod_is_terminal: bool,
    pod_has_initialized: bool,
) -> String {
    let (app_specs, init_specs, policy) = pod.spec.as_ref().map_or((&[][..], &[][..], None), |s| {
        (
            &s.containers[..],
            s.init_containers.as_deref().unwrap_or_default(),
            s.restart_policy.as_deref(),
        )
    });
    let policy = policy.unwrap_or("Always");
    let state = |s: &ContainerStatus| s.state.clone().unwrap_or_default();
    let last_terminated =
        |s: &ContainerStatus| s.last_state.as_ref().and_then(|l| l.terminated.clone());
    let (mut pending_sidecars, mut pending_inits, mut failed_init) = (0, 0, 0);
    let (mut unknown, mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0, 0);
    for c in init_specs {
        let Some(s) = inits.iter().find(|s| s.name == c.name) else {
            if labels::is_sidecar(c) {
                unknown += 1;
            } else {
                pending_inits += 1;
            }
            continue;
        };
        let st = state(s);
        if labels::is_sidecar(c) {
            if st.running.is_some() {
                if s.started != Some(true) {
                    pending_sidecars += 1;
                }
                running += 1;
            } else if st.terminated.is_some() {
                // A stopped sidecar is ignored.
            } else if st.waiting.is_some() {
                if last_terminated(s).is_none() {
                    pending_sidecars += 1;
                }
            } else {
                pending_sidecars += 1;
                unknown += 1;
            }
        } else if st.running.is_some() {
            pending_inits += 1;
        } else if let Some(t) = &st.terminated {
            if t.exit_code != 0 {
                failed_init += 1;
            }
        } else if st.waiting.is_some() {
            match last_terminated(s) {
                Some(t) if t.exit_code != 0 => failed_init += 1,
                Some(_) => {}
                None => pending_inits += 1,
            }
        } else {
            pending_inits += 1;
        }
    }
    for c in app_specs {
        let Some(s) = apps.iter().find(|s| s.name == c.name) else {
            unknown += 1;
            continue;
        };
        let st = state(s);
        if st.running.is_some() {
            running += 1;
        } else if let Some(t) = &st.terminated {
            stopped += 1;
            if t.exit_code == 0 {
                succeeded += 1;
            }
        } else if st.waiting.is_some() {
            if last_terminated(s).is_some() {
                stopped += 1;
            } else {
                waiting += 1;
            }
        } else {
            unknown += 1;
        }
    }
    if failed_init > 0 && policy == "Never" {
        return "Failed".into();
    }
    if pending_inits > 0 || (pending_sidecars > 0 && !pod_has_initialized) || waiting > 0 {
        return "Pending".into();
    }
    if running > 0 && unknown == 0 {
        return "Running".into();
    }
    if running == 0 && stopped > 0 && unknown == 0 {
        if pod_is_terminal && !is_static(pod) {
            return if stopped == succeeded {
                "Succeeded"
            } else {
                "Failed"
            }
            .into();
        }
        return match policy {
            "Always" => "Running",
            _ if stopped == succeeded => "Succeeded",
            "Never" => "Failed",
            _ => "Running",
        }
        .into();
    }
    "Pending".into()
}

/// A static pod (from a file or URL): upstream keeps its phase out of `podIsTerminal`.
fn is_static(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("kubernetes.io/config.source"))
        .is_some_and(|s| s != "api")
}

/// The pod's QoS class (upstream `qos.ComputePodQOS`): requests and limits of CPU and
/// memory summed over app and init containers (a missing request defaults to its limit,
/// as API defaulting does); BestEffort when there are none; Guaranteed when every
/// container limits both and the sums of requests equal the sums of limits; Burstable
/// otherwise.
pub fn qos_class(pod: &Pod) -> &'static str {
    let Some(spec) = &pod.spec else {
        return "BestEffort";
    };
    let mut requests: BTreeMap<&str, i128> = BTreeMap::new();
    let mut limits: BTreeMap<&str, i128> = BTreeMap::new();
    let mut guaranteed = true;
    for c in spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
    {
        let res = c.resources.as_ref();
        let req = res.and_then(|r| r.requests.as_ref());
        let lim = res.and_then(|r| r.limits.as_ref());
        let get = |m: Option<
            &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
        >,
                   k: &str| {
            m.and_then(|m| m.get(k))
                .and_then(|q| base::quantity::parse_milli(&q.0))
                .filter(|v| *v > 0)
        };
        let mut limited = 0;
        for r in ["cpu", "memory"] {
            let l = get(lim, r);
            if let Some(v) = get(req, r).or(l) {
                *requests.entry(r).or_default() += v;
            }
            if let Some(v) = l {
                *limits.entry(r).or_default() += v;
                limited += 1;
            }
        }
        if limited < 2 {
            guaranteed = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        "BestEffort"
    } else if guaranteed && requests == limits {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use runtime::ContainerDetails;
    use std::time::Duration;

    #[test]
    fn the_cache_versions_changes_only_and_pokes_without_blocking() {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let cache = StatusCache::with_notify(tx);
        let running = PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        };
        cache.set("u1", running.clone());
        let (v1, _) = cache.get_versioned("u1").expect("a status");
        cache.set("u1", running.clone());
        assert_eq!(
            cache.get_versioned("u1").map(|(v, _)| v),
            Some(v1),
            "same status"
        );
        let failed = PodStatus {
            phase: Some("Failed".into()),
            ..Default::default()
        };
        // The channel is full (one poke pending): set returns all the same.
        cache.set("u1", failed);
        let (v2, st) = cache.get_versioned("u1").expect("a status");
        assert!(v2 > v1);
        assert_eq!(st.phase.as_deref(), Some("Failed"));
        assert_eq!(rx.try_iter().count(), 1, "one pending poke covers both");
    }

    fn t(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + s)
    }

    fn container(name: &str) -> Container {
        Container {
            name: name.into(),
            image: Some("img".into()),
            ..Default::default()
        }
    }

    fn pod(names: &[&str], policy: &str) -> Pod {
        Pod {
            spec: Some(PodSpec {
                restart_policy: Some(policy.into()),
                containers: names.iter().map(|n| container(n)).collect(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// `inits`: (name, sidecar).
    fn with_inits(mut p: Pod, inits: &[(&str, bool)]) -> Pod {
        if let Some(s) = p.spec.as_mut() {
            s.init_containers = Some(
                inits
                    .iter()
                    .map(|(n, sidecar)| Container {
                        restart_policy: sidecar.then(|| "Always".to_string()),
                        ..container(n)
                    })
                    .collect(),
            );
        }
        p
    }

    fn ctr(
        name: &str,
        state: ContainerState,
        exit: i64,
        restarts: u32,
        created: u64,
    ) -> ContainerDetails {
        let mut l = BTreeMap::new();
        l.insert(labels::CONTAINER_NAME.to_string(), name.to_string());
        l.insert(labels::RESTART_COUNT.to_string(), restarts.to_string());
        l.insert(labels::CONTAINER_TYPE.to_string(), "container".to_string());
        l.insert(labels::SANDBOX_ID.to_string(), "sb".to_string());
        ContainerDetails {
            id: format!("{name}-{restarts}"),
            name: name.into(),
            labels: l,
            state,
            image: "img".into(),
            image_id: "sha256:1".into(),
            created: t(created),
            started_at: Some(t(created + 1)),
            finished_at: (state == ContainerState::Exited).then(|| t(created + 2)),
            exit_code: exit,
            oom_killed: false,
            error: String::new(),
            pid: 0,
            ip_address: String::new(),
            additional_ips: Vec::new(),
            host_network: false,
            stop_signal: String::new(),
            rootfs_dir: String::new(),
            log_path: String::new(),
        }
    }

    fn init(name: &str, state: ContainerState, exit: i64, created: u64) -> ContainerDetails {
        let mut d = ctr(name, state, exit, 0, created);
        d.labels
            .insert(labels::CONTAINER_TYPE.to_string(), "init".to_string());
        d
    }

    fn sandbox() -> ContainerDetails {
        let mut s = ctr("POD", ContainerState::Running, 0, 0, 0);
        s.id = "sb".into();
        s.name = labels::sandbox_name("p", "default", "u", 0);
        s.ip_address = "172.17.0.5".into();
        s.host_network = false;
        s.labels
            .insert(labels::DOCKER_TYPE.into(), labels::TYPE_SANDBOX.into());
        s
    }

    fn rt(containers: Vec<ContainerDetails>) -> RuntimePod {
        let mut containers = containers;
        base::sort::sort_by_key(&mut containers, |c| std::cmp::Reverse(c.created));
        RuntimePod {
            sandboxes: vec![sandbox()],
            containers,
        }
    }

    fn gen(
        p: &Pod,
        rt: &RuntimePod,
        waiting: &BTreeMap<String, Waiting>,
        prev: Option<&PodStatus>,
    ) -> PodStatus {
        generate(
            p,
            rt,
            &StatusInputs {
                waiting,
                previous: prev,
                host_ip: "10.0.0.1",
                now: t(100),
                pod_is_terminal: false,
                probes: None,
                runtime_type: "docker",
            },
        )
    }

    fn cond<'a>(s: &'a PodStatus, ty: &str) -> &'a PodCondition {
        s.conditions
            .as_ref()
            .and_then(|c| c.iter().find(|c| c.type_ == ty))
            .expect("condition present")
    }

    #[test]
    fn pod_ips_are_one_per_family_with_the_nodes_family_first() {
        let p = pod(&["a"], "Always");
        let mut r = rt(vec![ctr("a", ContainerState::Running, 0, 0, 10)]);
        // The plugins' order (IPv4 first) with a second IPv4 the kubelet drops.
        r.sandboxes[0].ip_address = "10.88.1.5".into();
        r.sandboxes[0].additional_ips = vec!["fd00:1::5".into(), "10.88.1.6".into()];
        let s = gen(&p, &r, &BTreeMap::new(), None);
        assert_eq!(s.pod_ip.as_deref(), Some("10.88.1.5"));
        let ips: Vec<&str> = s.pod_ips.iter().flatten().map(|i| i.ip.as_str()).collect();
        assert_eq!(ips, ["10.88.1.5", "fd00:1::5"]);
        // On an IPv6 node the IPv6 address is the pod's IP.
        let v6 = generate(
            &p,
            &r,
            &StatusInputs {
                waiting: &BTreeMap::new(),
                previous: None,
                host_ip: "fd00::1",
                now: t(100),
                pod_is_terminal: false,
                probes: None,
                runtime_type: "docker",
            },
        );
        assert_eq!(v6.pod_ip.as_deref(), Some("fd00:1::5"));
        let ips: Vec<&str> = v6.pod_ips.iter().flatten().map(|i| i.ip.as_str()).collect();
        assert_eq!(ips, ["fd00:1::5", "10.88.1.5"]);
        // A stopped sandbox: the last ones known stay.
        r.sandboxes[0].state = ContainerState::Exited;
        let later = gen(&p, &r, &BTreeMap::new(), Some(&s));
        assert_eq!(later.pod_ips, s.pod_ips);
    }

    #[test]
    fn probe_results_drive_ready_started_and_the_conditions() {
        use k8s_openapi::api::core::v1::{ExecAction, Probe};
        use runtime::container::results::ResultsCache;
        use runtime::container::{ProbeResult, ProbeType};
        let probe = || {
            Some(Probe {
                exec: Some(ExecAction {
                    command: Some(vec!["true".into()]),
                }),
                ..Default::default()
            })
        };
        let mut p = pod(&["a"], "Always");
        if let Some(s) = p.spec.as_mut() {
            s.containers[0].readiness_probe = probe();
            s.containers[0].startup_probe = probe();
        }
        let rt = RuntimePod {
            sandboxes: vec![sandbox()],
            containers: vec![ctr("a", ContainerState::Running, 0, 0, 1)],
        };
        let results = ResultsCache::default();
        let status = |results: &ResultsCache| {
            generate(
                &p,
                &rt,
                &StatusInputs {
                    waiting: &BTreeMap::new(),
                    previous: None,
                    host_ip: "10.0.0.1",
                    now: t(100),
                    pod_is_terminal: false,
                    probes: Some(results),
                    runtime_type: "docker",
                },
            )
        };
        let flags = |s: &PodStatus| {
            let c = &s.container_statuses.as_ref().expect("statuses")[0];
            (c.started, c.ready, cond(s, "Ready").status.clone())
        };
        // No startup result yet: not started, not ready.
        assert_eq!(
            flags(&status(&results)),
            (Some(false), false, "False".into())
        );
        results.set("a-0", ProbeType::Startup, ProbeResult::Success);
        results.set("a-0", ProbeType::Readiness, ProbeResult::Failure);
        assert_eq!(
            flags(&status(&results)),
            (Some(true), false, "False".into())
        );
        results.set("a-0", ProbeType::Readiness, ProbeResult::Success);
        assert_eq!(flags(&status(&results)), (Some(true), true, "True".into()));
    }

    fn waiting_reason(s: &ContainerStatus) -> Option<String> {
        s.state
            .as_ref()
            .and_then(|st| st.waiting.as_ref())
            .and_then(|w| w.reason.clone())
    }

    #[test]
    fn two_running_containers_make_a_running_ready_pod() {
        let p = pod(&["b", "a"], "Always");
        let rt = rt(vec![
            ctr("a", ContainerState::Running, 0, 0, 1),
            ctr("b", ContainerState::Running, 0, 2, 1),
        ]);
        let s = gen(&p, &rt, &BTreeMap::new(), None);
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(s.pod_ip.as_deref(), Some("172.17.0.5"));
        assert_eq!(s.host_ip.as_deref(), Some("10.0.0.1"));
        assert_eq!(s.qos_class.as_deref(), Some("BestEffort"));
        let cs = s.container_statuses.as_ref().expect("statuses");
        assert_eq!(
            cs.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert_eq!(cs[1].restart_count, 2);
        assert!(cs.iter().all(|c| c.ready && c.started == Some(true)));
        assert_eq!(cs[0].container_id.as_deref(), Some("docker://a-0"));
        let types: Vec<&str> = s
            .conditions
            .iter()
            .flatten()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(
            types,
            [
                "PodReadyToStartContainers",
                "Initialized",
                "Ready",
                "ContainersReady",
                "PodScheduled"
            ]
        );
        assert!(s.conditions.iter().flatten().all(|c| c.status == "True"));
    }

    #[test]
    fn nothing_started_yet_is_pending_container_creating() {
        let p = pod(&["a"], "Always");
        let s = gen(&p, &RuntimePod::default(), &BTreeMap::new(), None);
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        let c = &s.container_statuses.as_ref().expect("statuses")[0];
        assert_eq!(waiting_reason(c).as_deref(), Some("ContainerCreating"));
        assert_eq!(cond(&s, "PodReadyToStartContainers").status, "False");
        let ready = cond(&s, "Ready");
        assert_eq!(ready.reason.as_deref(), Some("ContainersNotReady"));
        assert_eq!(
            ready.message.as_deref(),
            Some("containers with unready status: [a]")
        );
    }

    #[test]
    fn init_containers_show_pod_initializing_and_initialized_false() {
        let p = with_inits(pod(&["app"], "Always"), &[("i1", false), ("i2", false)]);
        let rt = rt(vec![init("i1", ContainerState::Running, 0, 1)]);
        let s = gen(&p, &rt, &BTreeMap::new(), None);
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        let app = &s.container_statuses.as_ref().expect("apps")[0];
        assert_eq!(waiting_reason(app).as_deref(), Some("PodInitializing"));
        let inits = s.init_container_statuses.as_ref().expect("inits");
        assert_eq!(
            waiting_reason(&inits[1]).as_deref(),
            Some("PodInitializing")
        );
        let c = cond(&s, "Initialized");
        assert_eq!(c.status, "False");
        assert_eq!(c.reason.as_deref(), Some("ContainersNotInitialized"));
        assert_eq!(
            c.message.as_deref(),
            Some("containers with incomplete status: [i1 i2]")
        );
        // Done inits are ready; the pod is initialized once the app container runs.
        let rt = super::tests::rt(vec![
            init("i1", ContainerState::Exited, 0, 1),
            init("i2", ContainerState::Exited, 0, 3),
            ctr("app", ContainerState::Running, 0, 0, 5),
        ]);
        let s = gen(&p, &rt, &BTreeMap::new(), None);
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(cond(&s, "Initialized").status, "True");
        let inits = s.init_container_statuses.as_ref().expect("inits");
        assert!(inits.iter().all(|i| i.ready && i.started == Some(false)));
        let t0 = inits[0].state.as_ref().and_then(|s| s.terminated.as_ref());
        assert_eq!(t0.and_then(|t| t.reason.as_deref()), Some("Completed"));
    }

    /// Table: the phase for each restart policy and the states of init, sidecar and app
    /// containers (upstream `getPhase`).
    #[test]
    fn phase_table() {
        use ContainerState::{Exited, Running};
        struct Case {
            policy: &'static str,
            inits: &'static [(&'static str, bool)],
            running: &'static [(&'static str, ContainerState, i64, bool)],
            want: &'static str,
        }
        let cases = [
            // policy, init spec, (name, state, exit, is_init) instances
            Case {
                policy: "Always",
                inits: &[],
                running: &[("a", Exited, 0, false)],
                want: "Running",
            },
            Case {
                policy: "Never",
                inits: &[],
                running: &[("a", Exited, 0, false)],
                want: "Succeeded",
            },
            Case {
                policy: "Never",
                inits: &[],
                running: &[("a", Exited, 2, false)],
                want: "Failed",
            },
            Case {
                policy: "OnFailure",
                inits: &[],
                running: &[("a", Exited, 0, false)],
                want: "Succeeded",
            },
            Case {
                policy: "OnFailure",
                inits: &[],
                running: &[("a", Exited, 1, false)],
                want: "Running",
            },
            Case {
                policy: "Never",
                inits: &[("i", false)],
                running: &[("i", Exited, 1, true)],
                want: "Failed",
            },
            Case {
                policy: "Always",
                inits: &[("i", false)],
                running: &[("i", Exited, 1, true)],
                want: "Pending",
            },
            Case {
                policy: "Always",
                inits: &[("i", false)],
                running: &[("i", Running, 0, true)],
                want: "Pending",
            },
            // A running sidecar and a finished app under Never: Succeeded needs the
            // sidecar stopped; while it runs the pod is Running.
            Case {
                policy: "Never",
                inits: &[("s", true)],
                running: &[("s", Running, 0, true), ("a", Exited, 0, false)],
                want: "Running",
            },
            Case {
                policy: "Never",
                inits: &[("s", true)],
                running: &[("s", Exited, 143, true), ("a", Exited, 0, false)],
                want: "Succeeded",
            },
            // A sidecar running, the app not yet created: still initializing.
            Case {
                policy: "Always",
                inits: &[("s", true)],
                running: &[("s", Running, 0, true)],
                want: "Pending",
            },
            Case {
                policy: "Always",
                inits: &[("s", true)],
                running: &[("s", Running, 0, true), ("a", Running, 0, false)],
                want: "Running",
            },
        ];
        for (i, c) in cases.iter().enumerate() {
            let p = with_inits(pod(&["a"], c.policy), c.inits);
            let cs = c
                .running
                .iter()
                .enumerate()
                .map(|(k, (n, st, exit, is_init))| {
                    let k = u64::try_from(k).unwrap_or(0) * 3;
                    if *is_init {
                        init(n, *st, *exit, k)
                    } else {
                        ctr(n, *st, *exit, 0, k)
                    }
                })
                .collect();
            let s = gen(&p, &rt(cs), &BTreeMap::new(), None);
            assert_eq!(s.phase.as_deref(), Some(c.want), "case {i}");
        }
    }

    #[test]
    fn sidecar_counts_for_readiness_and_initialized_once_started() {
        let p = with_inits(pod(&["app"], "Always"), &[("side", true)]);
        let rt1 = rt(vec![init("side", ContainerState::Running, 0, 1)]);
        let s = gen(&p, &rt1, &BTreeMap::new(), None);
        assert_eq!(cond(&s, "Initialized").status, "True", "sidecar started");
        assert_eq!(
            cond(&s, "ContainersReady").message.as_deref(),
            Some("containers with unready status: [app]")
        );
        let rt2 = rt(vec![
            init("side", ContainerState::Exited, 1, 1),
            ctr("app", ContainerState::Running, 0, 0, 5),
        ]);
        let s = gen(&p, &rt2, &BTreeMap::new(), None);
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(
            cond(&s, "Ready").message.as_deref(),
            Some("containers with unready status: [side]")
        );
    }

    #[test]
    fn backoff_shows_waiting_with_the_dead_instance_as_last_state() {
        let p = pod(&["a"], "Always");
        let rt = rt(vec![
            ctr("a", ContainerState::Exited, 1, 3, 10),
            ctr("a", ContainerState::Exited, 1, 2, 1),
        ]);
        let mut w = BTreeMap::new();
        w.insert(
            "a".to_string(),
            Waiting {
                reason: "CrashLoopBackOff".into(),
                message: "back-off 40s restarting failed container=a pod=p".into(),
            },
        );
        let s = gen(&p, &rt, &w, None);
        let c = &s.container_statuses.expect("statuses")[0];
        assert_eq!(waiting_reason(c).as_deref(), Some("CrashLoopBackOff"));
        let last = c
            .last_state
            .clone()
            .and_then(|l| l.terminated)
            .expect("last state");
        assert_eq!(last.exit_code, 1);
        assert_eq!(last.reason.as_deref(), Some("Error"));
        assert_eq!(last.container_id.as_deref(), Some("docker://a-3"));
        assert_eq!(c.restart_count, 3);
        // A crash-looping pod with restartPolicy Always is Running, as upstream.
        assert_eq!(s.phase.as_deref(), Some("Running"));
    }

    #[test]
    fn terminal_phase_is_sticky_and_keeps_its_reason() {
        let p = pod(&["a"], "Always");
        let prev = PodStatus {
            phase: Some("Failed".into()),
            reason: Some("DeadlineExceeded".into()),
            ..Default::default()
        };
        let rt = rt(vec![ctr("a", ContainerState::Running, 0, 0, 1)]);
        let s = gen(&p, &rt, &BTreeMap::new(), Some(&prev));
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        assert_eq!(s.reason.as_deref(), Some("DeadlineExceeded"));
    }

    #[test]
    fn active_deadline_fails_the_pod() {
        let mut p = pod(&["a"], "Always");
        if let Some(s) = p.spec.as_mut() {
            s.active_deadline_seconds = Some(30);
        }
        let rt = rt(vec![ctr("a", ContainerState::Running, 0, 0, 1)]);
        let young = PodStatus {
            start_time: Some(k8s_time(t(80))),
            ..Default::default()
        };
        assert_eq!(
            gen(&p, &rt, &BTreeMap::new(), Some(&young))
                .phase
                .as_deref(),
            Some("Running")
        );
        let old = PodStatus {
            start_time: Some(k8s_time(t(70))),
            ..Default::default()
        };
        let s = gen(&p, &rt, &BTreeMap::new(), Some(&old));
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        assert_eq!(s.reason.as_deref(), Some("DeadlineExceeded"));
        assert_eq!(
            s.message.as_deref(),
            Some("Pod was active on the node longer than the specified deadline")
        );
        assert_eq!(cond(&s, "Ready").reason.as_deref(), Some("PodFailed"));
        assert!(past_active_deadline(&p, Some(t(70)), t(100)));
        assert!(!past_active_deadline(&p, Some(t(71)), t(100)));
        assert!(!past_active_deadline(
            &pod(&["a"], "Always"),
            Some(t(0)),
            t(100)
        ));
    }

    #[test]
    fn transition_time_kept_while_status_unchanged() {
        let p = pod(&["a"], "Always");
        let rt1 = rt(vec![ctr("a", ContainerState::Running, 0, 0, 1)]);
        let mut first = gen(&p, &rt1, &BTreeMap::new(), None);
        // Pretend the first status was computed long ago.
        for c in first.conditions.iter_mut().flatten() {
            c.last_transition_time = Some(k8s_time(t(5)));
        }
        let second = gen(&p, &rt1, &BTreeMap::new(), Some(&first));
        assert_eq!(
            cond(&second, "Ready").last_transition_time,
            Some(k8s_time(t(5)))
        );
        let rt_dead = rt(vec![ctr("a", ContainerState::Exited, 1, 0, 1)]);
        let third = gen(&p, &rt_dead, &BTreeMap::new(), Some(&first));
        assert_eq!(cond(&third, "Ready").status, "False");
        assert_eq!(
            cond(&third, "Ready").last_transition_time,
            Some(k8s_time(t(100)))
        );
    }

    #[test]
    fn a_vanished_running_container_ends_as_status_unknown() {
        let p = pod(&["a"], "Always");
        let running = gen(
            &p,
            &rt(vec![ctr("a", ContainerState::Running, 0, 4, 1)]),
            &BTreeMap::new(),
            None,
        );
        let s = gen(&p, &rt(vec![]), &BTreeMap::new(), Some(&running));
        let c = &s.container_statuses.as_ref().expect("statuses")[0];
        let last = c
            .last_state
            .as_ref()
            .and_then(|l| l.terminated.as_ref())
            .expect("last state");
        assert_eq!(last.reason.as_deref(), Some("ContainerStatusUnknown"));
        assert_eq!(last.exit_code, 137);
        assert_eq!(c.restart_count, 5);
        // TerminatePod: whatever is not terminated becomes ContainerStatusUnknown.
        let done = terminate(&running, false);
        assert_eq!(done.phase, running.phase, "a static pod keeps its phase");
        assert_eq!(
            terminate(&running, true).phase.as_deref(),
            Some("Failed"),
            "any other pod ends terminal"
        );
        let t = done.container_statuses.as_ref().expect("statuses")[0]
            .state
            .as_ref()
            .and_then(|s| s.terminated.clone())
            .expect("terminated");
        assert_eq!(t.reason.as_deref(), Some("ContainerStatusUnknown"));
        assert_eq!(
            t.message.as_deref(),
            Some("The container could not be located when the pod was terminated")
        );
    }

    #[test]
    fn container_ids_carry_the_runtimes_name() {
        let c = container("a");
        let d = ctr("a", ContainerState::Running, 0, 0, 1);
        let docker = convert(&c, &d, None, "docker");
        assert_eq!(docker.container_id.as_deref(), Some("docker://a-0"));
        assert_eq!(docker.image_id, "docker://sha256:1");
        // On a CRI runtime: its name, and the image reference as it reports it.
        let cri = convert(&c, &d, None, "containerd");
        assert_eq!(cri.container_id.as_deref(), Some("containerd://a-0"));
        assert_eq!(cri.image_id, "sha256:1");
        let d = ctr("a", ContainerState::Exited, 1, 0, 1);
        let t = terminated(&d, "containerd").terminated.expect("terminated");
        assert_eq!(t.container_id.as_deref(), Some("containerd://a-0"));
    }

    #[test]
    fn oom_and_cannot_run_reasons() {
        let mut d = ctr("a", ContainerState::Exited, 137, 0, 1);
        d.oom_killed = true;
        assert_eq!(
            terminated(&d, "docker")
                .terminated
                .and_then(|t| t.reason)
                .as_deref(),
            Some("OOMKilled")
        );
        let mut d = ctr("a", ContainerState::Exited, 127, 0, 1);
        d.finished_at = None;
        d.error = "exec: \"nope\": executable file not found".into();
        let t = terminated(&d, "docker").terminated.expect("terminated");
        assert_eq!(t.reason.as_deref(), Some("ContainerCannotRun"));
        assert!(t.message.is_some());
    }

    #[test]
    fn termination_messages_share_twelve_kib_per_pod() {
        let p = pod(&["a", "b", "c"], "Never");
        let mut d = ctr("a", ContainerState::Exited, 1, 0, 1);
        d.error = "x".repeat(6000);
        let s = gen(&p, &rt(vec![d]), &BTreeMap::new(), None);
        let c = &s.container_statuses.as_ref().expect("statuses")[0];
        let msg = c
            .state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .and_then(|t| t.message.clone())
            .expect("message");
        assert_eq!(msg.len(), 4096);
    }

    #[test]
    fn qos_classes() {
        let q = |s: &str| Quantity(s.into());
        let res = |req: &[(&str, &str)], lim: &[(&str, &str)]| ResourceRequirements {
            requests: Some(req.iter().map(|(k, v)| (k.to_string(), q(v))).collect()),
            limits: Some(lim.iter().map(|(k, v)| (k.to_string(), q(v))).collect()),
            ..Default::default()
        };
        let with = |r: Vec<ResourceRequirements>| {
            let names: Vec<String> = (0..r.len()).map(|i| format!("c{i}")).collect();
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let mut p = pod(&refs, "Always");
            if let Some(s) = p.spec.as_mut() {
                for (c, r) in s.containers.iter_mut().zip(r) {
                    c.resources = Some(r);
                }
            }
            qos_class(&p)
        };
        assert_eq!(with(vec![]), "BestEffort");
        assert_eq!(with(vec![res(&[("cpu", "0")], &[])]), "BestEffort");
        assert_eq!(with(vec![res(&[("cpu", "100m")], &[])]), "Burstable");
        assert_eq!(
            with(vec![res(
                &[("cpu", "0.1"), ("memory", "64Mi")],
                &[("cpu", "100m"), ("memory", "64Mi")]
            )]),
            "Guaranteed"
        );
        // Requests default to limits.
        assert_eq!(
            with(vec![res(&[], &[("cpu", "1"), ("memory", "1Gi")])]),
            "Guaranteed"
        );
        // Every container must limit both.
        assert_eq!(
            with(vec![
                res(&[], &[("cpu", "1"), ("memory", "1Gi")]),
                res(&[], &[("cpu", "1")])
            ]),
            "Burstable"
        );
        // An init container counts too.
        let mut p = with_inits(pod(&["a"], "Always"), &[("i", false)]);
        if let Some(s) = p.spec.as_mut() {
            s.containers[0].resources = Some(res(&[], &[("cpu", "1"), ("memory", "1Gi")]));
        }
        assert_eq!(qos_class(&p), "Burstable");
    }
}
