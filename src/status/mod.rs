//! Pod status: computed from what the runtime reports (upstream
//! `generateAPIPodStatus`, `getPhase`, `status/generate.go`,
//! `convertToAPIContainerStatuses`), and the cache that publishes it to readers.
//!
//! The computation is pure: the pod, its containers as the runtime reports them, the
//! waiting reasons of the last sync (backoff, pull errors), the previous status (for
//! transition times and sticky terminal phases) and `now` go in; a `PodStatus` comes
//! out. Pod workers write the result into [`StatusCache`]; the HTTP servers read it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use k8s_openapi::api::core::v1::{
    Container, ContainerState as ApiState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};

use crate::kuberuntime::labels::{self, ContainerKind};
use crate::kuberuntime::RuntimePod;
use crate::loops::lock;
use crate::runtime::{ContainerDetails, ContainerState};
use crate::time::k8s_time;

/// Why a container was not started in the last sync, shown as its waiting state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiting {
    /// Upstream's reason: `CrashLoopBackOff`, `ErrImagePull`, `ImagePullBackOff`, …
    pub reason: String,
    /// Human-readable detail.
    pub message: String,
}

/// The computed statuses of every pod the kubelet runs, by UID. Written by pod workers,
/// read by the servers. One small lock.
#[derive(Debug, Default)]
pub struct StatusCache {
    inner: Mutex<HashMap<String, Arc<PodStatus>>>,
}

impl StatusCache {
    /// The last status computed for a pod.
    pub fn get(&self, uid: &str) -> Option<Arc<PodStatus>> {
        lock(&self.inner).get(uid).cloned()
    }

    /// Publishes a pod's status.
    pub fn set(&self, uid: &str, status: PodStatus) {
        lock(&self.inner).insert(uid.to_string(), Arc::new(status));
    }

    /// Forgets a pod (after it is gone).
    pub fn remove(&self, uid: &str) {
        lock(&self.inner).remove(uid);
    }

    /// The UIDs with a status.
    pub fn uids(&self) -> Vec<String> {
        lock(&self.inner).keys().cloned().collect()
    }
}

/// Everything the status computation needs besides the pod and its runtime view.
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
    /// Published probe results, for `ready` and `started` (None: probes ignored, a
    /// running container is ready and started).
    pub probes: Option<&'a crate::prober::results::ResultsCache>,
}

/// Computes a pod's status from its runtime view.
pub fn generate(pod: &Pod, rt: &RuntimePod, inp: &StatusInputs<'_>) -> PodStatus {
    let spec = pod.spec.clone().unwrap_or_default();
    let sandbox = rt.running_sandbox();
    let inits_done = init_containers_done(pod, rt);

    let init_statuses: Vec<ContainerStatus> = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| container_status(c, ContainerKind::Init, rt, inp, false))
        .collect();
    let mut app_statuses: Vec<ContainerStatus> = spec
        .containers
        .iter()
        .map(|c| container_status(c, ContainerKind::App, rt, inp, !inits_done))
        .collect();
    app_statuses.sort_by(|a, b| a.name.cmp(&b.name));

    let restart_policy = spec.restart_policy.as_deref().unwrap_or("Always");
    let mut phase = phase(restart_policy, &init_statuses, &app_statuses, inits_done);
    if let Some(prev) = inp.previous.and_then(|p| p.phase.as_deref()) {
        // Terminal phases are sticky: a pod never leaves Succeeded or Failed.
        if prev == "Succeeded" || prev == "Failed" {
            phase = prev.to_string();
        }
    }

    let pod_ip = if spec.host_network == Some(true) {
        Some(inp.host_ip.to_string())
    } else {
        sandbox
            .map(|s| s.ip_address.clone())
            .filter(|ip| !ip.is_empty())
            // A stopped sandbox has no IP; keep the last one known, as upstream does.
            .or_else(|| inp.previous.and_then(|p| p.pod_ip.clone()))
    };

    let mut conditions = Vec::new();
    let prev_conds = inp.previous.and_then(|p| p.conditions.as_ref());
    let mut cond = |ty: &str, ok: bool, reason: Option<String>, message: Option<String>| {
        let status = if ok { "True" } else { "False" }.to_string();
        let last = prev_conds
            .and_then(|cs| cs.iter().find(|c| c.type_ == ty))
            .filter(|c| c.status == status)
            .and_then(|c| c.last_transition_time.clone())
            .unwrap_or_else(|| k8s_time(inp.now));
        conditions.push(PodCondition {
            type_: ty.to_string(),
            status,
            reason,
            message,
            last_transition_time: Some(last),
            last_probe_time: None,
            observed_generation: None,
        });
    };

    let sandbox_ready = sandbox.is_some_and(|s| {
        spec.host_network == Some(true) || !s.ip_address.is_empty() || s.network_mode == "host"
    });
    cond("PodReadyToStartContainers", sandbox_ready, None, None);

    let incomplete_inits: Vec<String> = init_statuses
        .iter()
        .filter(|s| !terminated_ok(s))
        .map(|s| s.name.clone())
        .collect();
    if phase == "Succeeded" {
        cond("Initialized", true, Some("PodCompleted".into()), None);
    } else if inits_done || incomplete_inits.is_empty() {
        cond("Initialized", true, None, None);
    } else {
        cond(
            "Initialized",
            false,
            Some("ContainersNotInitialized".into()),
            Some(format!(
                "containers with incomplete status: [{}]",
                incomplete_inits.join(" ")
            )),
        );
    }

    let unready: Vec<String> = app_statuses
        .iter()
        .filter(|s| !s.ready)
        .map(|s| s.name.clone())
        .collect();
    let (ready, reason, message) = match phase.as_str() {
        "Succeeded" => (false, Some("PodCompleted".to_string()), None),
        "Failed" => (false, Some("PodFailed".to_string()), None),
        _ if unready.is_empty() => (true, None, None),
        _ => (
            false,
            Some("ContainersNotReady".to_string()),
            Some(format!(
                "containers with unready status: [{}]",
                unready.join(" ")
            )),
        ),
    };
    cond("ContainersReady", ready, reason.clone(), message.clone());
    cond("Ready", ready, reason, message);
    cond("PodScheduled", true, None, None);

    PodStatus {
        phase: Some(phase),
        conditions: Some(conditions),
        host_ip: Some(inp.host_ip.to_string()),
        host_ips: Some(vec![HostIP {
            ip: inp.host_ip.to_string(),
        }]),
        pod_ip: pod_ip.clone(),
        pod_ips: pod_ip.map(|ip| vec![PodIP { ip }]),
        start_time: inp
            .previous
            .and_then(|p| p.start_time.clone())
            .or_else(|| Some(k8s_time(inp.now))),
        qos_class: Some(qos_class(pod).to_string()),
        init_container_statuses: if init_statuses.is_empty() {
            None
        } else {
            Some(init_statuses)
        },
        container_statuses: Some(app_statuses),
        ..Default::default()
    }
}

/// True when the pod's init containers are done: there are none, every one exited 0,
/// or an app container has already run (upstream treats inits as done then).
pub fn init_containers_done(pod: &Pod, rt: &RuntimePod) -> bool {
    let spec = match &pod.spec {
        Some(s) => s,
        None => return true,
    };
    let inits = spec.init_containers.as_deref().unwrap_or_default();
    if inits.is_empty()
        || rt
            .containers
            .iter()
            .any(|c| kind_of(c) == ContainerKind::App)
    {
        return true;
    }
    inits.iter().all(|c| {
        rt.newest(&c.name, ContainerKind::Init)
            .is_some_and(|d| d.state == ContainerState::Exited && d.exit_code == 0)
    })
}

/// Whether a runtime container is an init or app container (by its label).
pub fn kind_of(c: &ContainerDetails) -> ContainerKind {
    match c.labels.get(labels::CONTAINER_TYPE).map(String::as_str) {
        Some("init") => ContainerKind::Init,
        _ => ContainerKind::App,
    }
}

fn terminated_ok(s: &ContainerStatus) -> bool {
    s.state
        .as_ref()
        .and_then(|st| st.terminated.as_ref())
        .is_some_and(|t| t.exit_code == 0)
}

fn container_status(
    c: &Container,
    kind: ContainerKind,
    rt: &RuntimePod,
    inp: &StatusInputs<'_>,
    pod_initializing: bool,
) -> ContainerStatus {
    let instances = rt.instances(&c.name, kind);
    let newest = instances.first().copied();
    let previous = instances.get(1).copied();
    let waiting_default = if pod_initializing {
        "PodInitializing"
    } else {
        "ContainerCreating"
    };
    let (state, last_state) = match (inp.waiting.get(&c.name), newest) {
        (Some(w), newest) => (
            ApiState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(w.reason.clone()),
                    message: Some(w.message.clone()),
                }),
                ..Default::default()
            },
            newest
                .filter(|d| d.state == ContainerState::Exited)
                .map(api_state),
        ),
        (None, Some(d)) => (
            api_state(d),
            previous
                .filter(|d| d.state == ContainerState::Exited)
                .map(api_state),
        ),
        (None, None) => (
            ApiState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(waiting_default.into()),
                    message: None,
                }),
                ..Default::default()
            },
            None,
        ),
    };
    let running = newest.is_some_and(|d| d.state == ContainerState::Running)
        && inp.waiting.get(&c.name).is_none();
    let (started, ready) = probed_readiness(c, kind, newest, running, inp.probes);
    ContainerStatus {
        name: c.name.clone(),
        image: c.image.clone().unwrap_or_default(),
        image_id: newest
            .map(|d| format!("docker://{}", d.image_id))
            .unwrap_or_default(),
        container_id: newest.map(|d| format!("docker://{}", d.id)),
        ready,
        started: Some(started),
        restart_count: newest
            .map(|d| i32::try_from(labels::restart_count(&d.labels)).unwrap_or(i32::MAX))
            .unwrap_or(0),
        state: Some(state),
        last_state: Some(last_state.unwrap_or_default()),
        ..Default::default()
    }
}

/// Upstream §5.4: `started` = running and (startup probe succeeded or there is none);
/// `ready` = started and (readiness probe succeeded or there is none). A probe without
/// a published result counts as not passed.
fn probed_readiness(
    c: &Container,
    kind: ContainerKind,
    newest: Option<&ContainerDetails>,
    running: bool,
    probes: Option<&crate::prober::results::ResultsCache>,
) -> (bool, bool) {
    use crate::prober::{ProbeResult, ProbeType};
    let (Some(p), Some(d), ContainerKind::App, true) = (probes, newest, kind, running) else {
        return (running, running);
    };
    let passed = |has: bool, ty| !has || p.get(&d.id, ty) == Some(ProbeResult::Success);
    let started = passed(c.startup_probe.is_some(), ProbeType::Startup);
    let ready = started && passed(c.readiness_probe.is_some(), ProbeType::Readiness);
    (started, ready)
}

/// The API state of one runtime container (upstream's dockershim mapping).
fn api_state(d: &ContainerDetails) -> ApiState {
    match d.state {
        ContainerState::Running => ApiState {
            running: Some(ContainerStateRunning {
                started_at: d.started_at.map(k8s_time),
            }),
            ..Default::default()
        },
        ContainerState::Exited => {
            let (reason, started, finished) = match d.finished_at {
                Some(f) if d.oom_killed => ("OOMKilled", d.started_at, Some(f)),
                Some(f) if d.exit_code == 0 => ("Completed", d.started_at, Some(f)),
                Some(f) => ("Error", d.started_at, Some(f)),
                // Never ran: Docker could not start it.
                None if d.exit_code != 0 => {
                    ("ContainerCannotRun", Some(d.created), Some(d.created))
                }
                None => ("Completed", d.started_at, None),
            };
            ApiState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: i32::try_from(d.exit_code).unwrap_or(-1),
                    reason: Some(reason.into()),
                    message: if d.error.is_empty() {
                        None
                    } else {
                        Some(d.error.clone())
                    },
                    started_at: started.map(k8s_time),
                    finished_at: finished.map(k8s_time),
                    container_id: Some(format!("docker://{}", d.id)),
                    signal: None,
                }),
                ..Default::default()
            }
        }
        ContainerState::Created | ContainerState::Unknown => ApiState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("ContainerCreating".into()),
                message: None,
            }),
            ..Default::default()
        },
    }
}

/// Upstream's `getPhase`.
fn phase(
    restart_policy: &str,
    inits: &[ContainerStatus],
    apps: &[ContainerStatus],
    inits_done: bool,
) -> String {
    let st = |s: &ContainerStatus| s.state.clone().unwrap_or_default();
    let last_failed = |s: &ContainerStatus| {
        s.last_state
            .as_ref()
            .and_then(|l| l.terminated.as_ref())
            .is_some_and(|t| t.exit_code != 0)
    };
    let mut init_failed = 0;
    let mut init_pending = 0;
    for s in inits {
        let state = st(s);
        if let Some(t) = &state.terminated {
            if t.exit_code != 0 {
                init_failed += 1;
            }
        } else if state.waiting.is_some() && last_failed(s) {
            init_failed += 1;
        } else {
            init_pending += 1;
        }
    }
    if !inits_done && init_failed > 0 && restart_policy == "Never" {
        return "Failed".into();
    }

    let (mut running, mut stopped, mut succeeded, mut waiting, mut unknown) = (0, 0, 0, 0, 0);
    for s in apps {
        let state = st(s);
        if state.running.is_some() {
            running += 1;
        } else if let Some(t) = &state.terminated {
            stopped += 1;
            if t.exit_code == 0 {
                succeeded += 1;
            }
        } else if state.waiting.is_some() {
            let last = s.last_state.as_ref().and_then(|l| l.terminated.as_ref());
            if let Some(t) = last {
                stopped += 1;
                if t.exit_code == 0 {
                    succeeded += 1;
                }
            } else {
                waiting += 1;
            }
        } else {
            unknown += 1;
        }
    }
    if !inits_done && (init_pending > 0 || init_failed > 0) {
        return "Pending".into();
    }
    if waiting > 0 {
        return "Pending".into();
    }
    if running > 0 && unknown == 0 {
        return "Running".into();
    }
    if running == 0 && stopped > 0 && unknown == 0 {
        return match restart_policy {
            "Never" if succeeded == stopped => "Succeeded",
            "Never" => "Failed",
            "OnFailure" if succeeded == stopped => "Succeeded",
            _ => "Running",
        }
        .into();
    }
    "Pending".into()
}

/// The pod's QoS class (`pkg/apis/core/v1/helper/qos`): Guaranteed when every container
/// has CPU and memory limits equal to its requests, BestEffort when none has any
/// request or limit, Burstable otherwise.
pub fn qos_class(pod: &Pod) -> &'static str {
    let Some(spec) = &pod.spec else {
        return "BestEffort";
    };
    let all = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter());
    let mut any = false;
    let mut guaranteed = true;
    for c in all {
        let res = c.resources.clone().unwrap_or_default();
        let requests = res.requests.unwrap_or_default();
        let limits = res.limits.unwrap_or_default();
        let get =
            |m: &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
             k: &str| { m.get(k).and_then(|q| crate::quantity::parse_milli(&q.0)) };
        for r in ["cpu", "memory"] {
            let req = get(&requests, r);
            let lim = get(&limits, r);
            if req.is_some_and(|v| v != 0) || lim.is_some_and(|v| v != 0) {
                any = true;
            }
            match (req, lim) {
                (_, None) => guaranteed = false,
                (Some(a), Some(b)) if a != b => guaranteed = false,
                _ => {}
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::ContainerDetails;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use std::time::Duration;

    fn t(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + s)
    }

    fn pod(names: &[&str], policy: &str) -> Pod {
        Pod {
            spec: Some(PodSpec {
                restart_policy: Some(policy.into()),
                containers: names
                    .iter()
                    .map(|n| Container {
                        name: (*n).into(),
                        image: Some("img".into()),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }),
            ..Default::default()
        }
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
            network_mode: "container:sb".into(),
        }
    }

    fn sandbox() -> ContainerDetails {
        let mut s = ctr("POD", ContainerState::Running, 0, 0, 0);
        s.ip_address = "172.17.0.5".into();
        s.network_mode = "default".into();
        s
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
                probes: None,
            },
        )
    }

    #[test]
    fn probe_results_drive_ready_started_and_the_conditions() {
        use crate::prober::results::ResultsCache;
        use crate::prober::{ProbeResult, ProbeType};
        use k8s_openapi::api::core::v1::{ExecAction, Probe};
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
                    probes: Some(results),
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
        let s = status(&results);
        assert_eq!(flags(&s), (Some(true), false, "False".into()));
        assert_eq!(
            cond(&s, "ContainersReady").message.as_deref(),
            Some("containers with unready status: [a]")
        );
        results.set("a-0", ProbeType::Readiness, ProbeResult::Success);
        assert_eq!(flags(&status(&results)), (Some(true), true, "True".into()));
    }

    fn cond<'a>(s: &'a PodStatus, ty: &str) -> &'a PodCondition {
        s.conditions
            .as_ref()
            .and_then(|c| c.iter().find(|c| c.type_ == ty))
            .expect("condition present")
    }

    #[test]
    fn two_running_containers_make_a_running_ready_pod() {
        let p = pod(&["b", "a"], "Always");
        let rt = RuntimePod {
            sandboxes: vec![sandbox()],
            containers: vec![
                ctr("a", ContainerState::Running, 0, 0, 1),
                ctr("b", ContainerState::Running, 0, 2, 1),
            ],
        };
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
        assert!(cs.iter().all(|c| c.ready));
        assert_eq!(cs[0].container_id.as_deref(), Some("docker://a-0"));
        assert_eq!(cond(&s, "Ready").status, "True");
        assert_eq!(cond(&s, "PodReadyToStartContainers").status, "True");
    }

    #[test]
    fn nothing_started_yet_is_pending_container_creating() {
        let p = pod(&["a"], "Always");
        let s = gen(&p, &RuntimePod::default(), &BTreeMap::new(), None);
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        let st = s.container_statuses.expect("statuses")[0]
            .state
            .clone()
            .expect("state");
        assert_eq!(
            st.waiting.and_then(|w| w.reason).as_deref(),
            Some("ContainerCreating")
        );
        assert_eq!(
            cond(
                &gen(&p, &RuntimePod::default(), &BTreeMap::new(), None),
                "Ready"
            )
            .reason
            .as_deref(),
            Some("ContainersNotReady")
        );
    }

    #[test]
    fn backoff_shows_waiting_with_the_dead_instance_as_last_state() {
        let p = pod(&["a"], "Always");
        let rt = RuntimePod {
            sandboxes: vec![sandbox()],
            containers: vec![ctr("a", ContainerState::Exited, 1, 3, 1)],
        };
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
        let st = c.state.clone().expect("state");
        assert_eq!(
            st.waiting.and_then(|w| w.reason).as_deref(),
            Some("CrashLoopBackOff")
        );
        let last = c
            .last_state
            .clone()
            .and_then(|l| l.terminated)
            .expect("last state");
        assert_eq!(last.exit_code, 1);
        assert_eq!(last.reason.as_deref(), Some("Error"));
        assert_eq!(c.restart_count, 3);
        // A crash-looping pod with restartPolicy Always is Running, as upstream.
        assert_eq!(s.phase.as_deref(), Some("Running"));
    }

    #[test]
    fn phases_by_restart_policy() {
        for (policy, exit, want) in [
            ("Never", 0, "Succeeded"),
            ("Never", 2, "Failed"),
            ("OnFailure", 0, "Succeeded"),
            ("Always", 0, "Running"),
        ] {
            let p = pod(&["a"], policy);
            let rt = RuntimePod {
                sandboxes: vec![],
                containers: vec![ctr("a", ContainerState::Exited, exit, 0, 1)],
            };
            let s = gen(&p, &rt, &BTreeMap::new(), None);
            assert_eq!(s.phase.as_deref(), Some(want), "{policy} exit {exit}");
        }
    }

    #[test]
    fn terminal_phase_is_sticky() {
        let p = pod(&["a"], "Always");
        let prev = PodStatus {
            phase: Some("Failed".into()),
            ..Default::default()
        };
        let rt = RuntimePod {
            sandboxes: vec![sandbox()],
            containers: vec![ctr("a", ContainerState::Running, 0, 0, 1)],
        };
        assert_eq!(
            gen(&p, &rt, &BTreeMap::new(), Some(&prev)).phase.as_deref(),
            Some("Failed")
        );
    }

    #[test]
    fn transition_time_kept_while_status_unchanged() {
        let p = pod(&["a"], "Always");
        let rt = RuntimePod {
            sandboxes: vec![sandbox()],
            containers: vec![ctr("a", ContainerState::Running, 0, 0, 1)],
        };
        let mut first = gen(&p, &rt, &BTreeMap::new(), None);
        // Pretend the first status was computed long ago.
        for c in first.conditions.iter_mut().flatten() {
            c.last_transition_time = Some(k8s_time(t(5)));
        }
        let second = gen(&p, &rt, &BTreeMap::new(), Some(&first));
        assert_eq!(
            cond(&second, "Ready").last_transition_time,
            Some(k8s_time(t(5)))
        );
        let rt_dead = RuntimePod {
            sandboxes: vec![sandbox()],
            containers: vec![ctr("a", ContainerState::Exited, 1, 0, 1)],
        };
        let third = gen(&p, &rt_dead, &BTreeMap::new(), Some(&first));
        assert_eq!(cond(&third, "Ready").status, "False");
        assert_eq!(
            cond(&third, "Ready").last_transition_time,
            Some(k8s_time(t(100)))
        );
    }

    #[test]
    fn oom_and_cannot_run_reasons() {
        let mut d = ctr("a", ContainerState::Exited, 137, 0, 1);
        d.oom_killed = true;
        assert_eq!(
            api_state(&d).terminated.and_then(|t| t.reason).as_deref(),
            Some("OOMKilled")
        );
        let mut d = ctr("a", ContainerState::Exited, 127, 0, 1);
        d.finished_at = None;
        d.error = "exec: \"nope\": executable file not found".into();
        let t = api_state(&d).terminated.expect("terminated");
        assert_eq!(t.reason.as_deref(), Some("ContainerCannotRun"));
        assert!(t.message.is_some());
    }

    #[test]
    fn qos_classes() {
        let mut p = pod(&["a"], "Always");
        assert_eq!(qos_class(&p), "BestEffort");
        let q = |s: &str| Quantity(s.into());
        let res = |req: &[(&str, &str)], lim: &[(&str, &str)]| ResourceRequirements {
            requests: Some(req.iter().map(|(k, v)| (k.to_string(), q(v))).collect()),
            limits: Some(lim.iter().map(|(k, v)| (k.to_string(), q(v))).collect()),
            ..Default::default()
        };
        if let Some(s) = p.spec.as_mut() {
            s.containers[0].resources = Some(res(&[("cpu", "100m")], &[]));
        }
        assert_eq!(qos_class(&p), "Burstable");
        if let Some(s) = p.spec.as_mut() {
            s.containers[0].resources = Some(res(
                &[("cpu", "0.1"), ("memory", "64Mi")],
                &[("cpu", "100m"), ("memory", "64Mi")],
            ));
        }
        assert_eq!(qos_class(&p), "Guaranteed");
    }
}
