//! What one pod sync must do (upstream `computePodActions`, `computeInitContainerActions`
//! and `ShouldContainerBeRestarted`), as a pure function of the pod spec, its containers
//! as the runtime reports them, the restart backoff table and `now`. The executor in
//! [`super::RuntimeManager`] carries the actions out.
//!
//! Upstream checks the restart backoff when it starts a container (`doBackOff`); here the
//! check is part of the pure decision, so a container in CrashLoopBackOff comes out as a
//! waiting reason and a requeue time instead of a start.
//!
//! Over 800 lines: about half of it is the table tests of `compute_pod_actions`, kept
//! beside the decisions they pin down.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};

use base::time::go_duration;
use runtime::container::backoff::Backoff;
use runtime::container::helpers::{never_ran, policy, sandbox_changed, should_restart};
use runtime::container::labels::{self, ContainerKind};
use runtime::container::Waiting;
use runtime::container::{format_pod, RuntimePod};
use runtime::{ContainerDetails, ContainerState};

/// Start one container of the spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StartAction {
    /// Init or app container.
    pub kind: ContainerKind,
    /// Index in `initContainers` or `containers`.
    pub index: usize,
    /// Container name.
    pub name: String,
    /// Restart count of the new instance (its name's attempt).
    pub restart_count: u32,
    /// Backoff key to bump when the container starts, with the dead instance's finish
    /// time (upstream `Next(key, finishedAt)`); None when no dead instance exists.
    pub backoff: Option<(String, SystemTime)>,
}

/// Why a container is stopped (upstream `containerKillReason`; it picks the grace period:
/// probes may carry their own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KillReason {
    /// Spec changed, unknown state, pod done.
    Other,
    /// postStart hook failed.
    FailedPostStartHook,
    /// Liveness probe failed (the prober's kills).
    LivenessProbe,
    /// Startup probe failed.
    StartupProbe,
}

/// Stop one container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KillAction {
    /// Runtime ID.
    pub id: String,
    /// Container name in the spec.
    pub name: String,
    /// Init (sidecar) or app container.
    pub kind: ContainerKind,
    /// Why, as upstream words it (the `Killing` event's message).
    pub message: String,
    /// Why, for the grace period.
    pub reason: KillReason,
}

/// Everything one sync will do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PodActions {
    /// Stop every container and the sandbox first (sandbox changed, or the pod is done).
    pub kill_pod: bool,
    /// Create a new sandbox with this attempt number.
    pub create_sandbox: Option<u32>,
    /// The running sandbox to start containers in (when not creating one).
    pub sandbox_id: Option<String>,
    /// Single containers to stop.
    pub kill: Vec<KillAction>,
    /// Init containers to start, in spec order: the next regular one, and sidecars
    /// (which keep running and are restarted like app containers).
    pub start_init: Vec<StartAction>,
    /// App containers to start, in spec order.
    pub start: Vec<StartAction>,
    /// Containers not started, with the reason shown in their status.
    pub waiting: BTreeMap<String, Waiting>,
    /// Sync again after this long (a backoff expires), even without events.
    pub requeue_after: Option<Duration>,
}

/// What besides the pod and its runtime view decides the actions. A struct, so that
/// more inputs (probe results) are added without touching every caller.
#[derive(Debug)]
pub(crate) struct ActionInputs<'a> {
    /// Restart backoff entries.
    pub backoff: &'a Backoff<SystemTime>,
    /// Now.
    pub now: SystemTime,
    /// The pod must not run any more: its phase is terminal, its active deadline
    /// passed, or it is being deleted. Everything running is stopped, nothing starts.
    pub terminal: bool,
}

/// The backoff key of a container (upstream `GetStableKey`:
/// `<pod>_<ns>_<uid>_<container>_<hash>`), so a spec change starts its backoff fresh.
pub(crate) fn backoff_key(pod: &Pod, c: &Container) -> String {
    format!(
        "{}_{}_{}_{}_{:x}",
        pod.metadata.name.as_deref().unwrap_or_default(),
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.uid.as_deref().unwrap_or_default(),
        c.name,
        labels::container_hash(c)
    )
}

/// Upstream `isInitContainerFailed`.
fn init_failed(d: &ContainerDetails) -> bool {
    d.oom_killed
        || (d.state == ContainerState::Exited && d.exit_code != 0)
        || d.state == ContainerState::Unknown
}

fn start_of(c: &Container, index: usize, kind: ContainerKind, rt: &RuntimePod) -> StartAction {
    // Restart counts continue across instances and sandboxes (upstream: the newest
    // status's restartCount + 1). A newest instance that never ran is replaced under
    // its own count instead (upstream adds 1 there too; see ARCHITECTURE.md): a kubelet
    // killed between create and start must not show its users a restart that did not
    // happen.
    let restart_count = rt.newest(&c.name, kind).map_or(0, |d| {
        let rc = labels::restart_count(&d.labels);
        if never_ran(d) {
            rc
        } else {
            rc.saturating_add(1)
        }
    });
    StartAction {
        kind,
        index,
        name: c.name.clone(),
        restart_count,
        backoff: None,
    }
}

fn kill_of(d: &ContainerDetails, name: &str, kind: ContainerKind, message: String) -> KillAction {
    KillAction {
        id: d.id.clone(),
        name: name.to_string(),
        kind,
        message,
        reason: KillReason::Other,
    }
}

/// Applies the restart backoff to one start (upstream `doBackOff`): the newest exited
/// instance's finish time is the start of the wait. Ok(start with its backoff key) to
/// start now; Err(()) when it waits (the waiting reason and requeue are recorded).
fn gate(
    pod: &Pod,
    c: &Container,
    mut s: StartAction,
    rt: &RuntimePod,
    inp: &ActionInputs<'_>,
    a: &mut PodActions,
) -> Result<StartAction, ()> {
    let exited = rt
        .instances(&c.name, s.kind)
        .into_iter()
        .find(|d| d.state == ContainerState::Exited);
    let Some(d) = exited else {
        return Ok(s);
    };
    let key = backoff_key(pod, c);
    let finished = d.finished_at.unwrap_or(d.created);
    if inp
        .backoff
        .is_in_backoff_since_mono(&key, finished, inp.now, std::time::Instant::now())
    {
        let b = inp.backoff.current(&key).unwrap_or(super::backoff::INITIAL);
        a.waiting.insert(
            c.name.clone(),
            Waiting {
                reason: "CrashLoopBackOff".into(),
                message: format!(
                    "back-off {} restarting failed container={} pod={}",
                    go_duration(b),
                    c.name,
                    format_pod(pod)
                ),
            },
        );
        let elapsed = inp.now.duration_since(finished).unwrap_or(Duration::ZERO);
        let left = b.saturating_sub(elapsed).max(Duration::from_secs(1));
        a.requeue_after = Some(a.requeue_after.map_or(left, |r| r.min(left)));
        return Err(());
    }
    s.backoff = Some((key, finished));
    Ok(s)
}

/// Adds to `a` the kill (and restart, unless `restartPolicy: Never`) of every running
/// app container whose liveness or startup probe failed (upstream `computePodActions`:
/// `Container <c> failed liveness probe, will be restarted`). `failed_probe` says which
/// probe condemned a container ID, if any. The kill's reason picks the probe's own
/// `terminationGracePeriodSeconds` when it has one. As upstream (`doBackOff` looks for
/// an exited instance of the container), the restart goes through the CrashLoopBackOff
/// gate: a liveness loop slows down like a crash loop.
pub(crate) fn kill_unhealthy(
    a: &mut PodActions,
    pod: &Pod,
    rt: &RuntimePod,
    failed_probe: &dyn Fn(&str) -> Option<runtime::container::ProbeType>,
    inp: &ActionInputs<'_>,
) {
    let Some(spec) = &pod.spec else {
        return;
    };
    if a.kill_pod || inp.terminal {
        return; // everything stops anyway
    }
    let restart = policy(spec) != "Never";
    for (i, c) in spec.containers.iter().enumerate() {
        let Some(d) = rt
            .newest(&c.name, ContainerKind::App)
            .filter(|d| d.state == ContainerState::Running)
        else {
            continue;
        };
        if a.kill.iter().any(|k| k.id == d.id) {
            continue;
        }
        let Some(ty) = failed_probe(&d.id) else {
            continue;
        };
        let mut message = format!("Container {} failed {} probe", c.name, ty.word());
        if restart {
            message.push_str(", will be restarted");
        }
        a.kill.push(KillAction {
            id: d.id.clone(),
            name: c.name.clone(),
            kind: ContainerKind::App,
            message,
            reason: match ty {
                runtime::container::ProbeType::Startup => KillReason::StartupProbe,
                _ => KillReason::LivenessProbe,
            },
        });
        if !restart || a.start.iter().any(|s| s.name == c.name) {
            continue;
        }
        let s = StartAction {
            kind: ContainerKind::App,
            index: i,
            name: c.name.clone(),
            restart_count: labels::restart_count(&d.labels).saturating_add(1),
            backoff: None,
        };
        if let Ok(s) = gate(pod, c, s, rt, inp, a) {
            a.start.push(s);
        }
    }
}

/// Computes what one sync of `pod` must do.
pub(crate) fn compute_pod_actions(
    pod: &Pod,
    rt: &RuntimePod,
    inp: &ActionInputs<'_>,
) -> PodActions {
    let mut a = PodActions::default();
    let Some(spec) = &pod.spec else {
        return a;
    };
    let policy = policy(spec);
    let inits = spec.init_containers.as_deref().unwrap_or_default();

    if inp.terminal {
        // A pod that is done only stops (upstream: the pod worker's terminating state).
        a.kill_pod = rt.any_running();
        a.sandbox_id = rt.running_sandbox().map(|s| s.id.clone());
        return a;
    }

    let (changed, attempt) = sandbox_changed(pod, rt);
    if changed {
        a.kill_pod = rt.any_running();
        // restartPolicy Never: a pod whose containers already ran does not come back.
        if policy == "Never" && attempt != 0 && !rt.containers.is_empty() {
            return a;
        }
        let to_start: Vec<usize> = spec
            .containers
            .iter()
            .enumerate()
            .filter(|(_, c)| {
                let succeeded = rt
                    .newest(&c.name, ContainerKind::App)
                    .is_some_and(|d| d.state == ContainerState::Exited && d.exit_code == 0);
                !(policy == "OnFailure" && succeeded)
            })
            .map(|(i, _)| i)
            .collect();
        if to_start.is_empty() && inits.is_empty() {
            return a;
        }
        a.create_sandbox = Some(attempt);
        if let Some(first) = inits.first() {
            // A new sandbox runs the init containers again from the first.
            let s = start_of(first, 0, ContainerKind::Init, rt);
            if let Ok(s) = gate(pod, first, s, rt, inp, &mut a) {
                a.start_init.push(s);
            }
        } else {
            for i in to_start {
                let c = &spec.containers[i];
                let s = start_of(c, i, ContainerKind::App, rt);
                if let Ok(s) = gate(pod, c, s, rt, inp, &mut a) {
                    a.start.push(s);
                }
            }
        }
        return a;
    }
    a.sandbox_id = rt.sandboxes.first().map(|s| s.id.clone());

    let initialized = compute_init_actions(spec, rt, &mut a);
    if a.kill_pod || !initialized {
        gate_inits(pod, inits, rt, inp, &mut a);
        return a;
    }

    let mut keep = 0;
    let mut to_start = Vec::new();
    for (i, c) in spec.containers.iter().enumerate() {
        let newest = rt.newest(&c.name, ContainerKind::App);
        match newest {
            Some(d) if d.state == ContainerState::Running => {
                if labels::hash_label(&d.labels) != labels::container_hash(c) {
                    // Restarted whatever the restart policy: the spec changed.
                    a.kill.push(kill_of(
                        d,
                        &c.name,
                        ContainerKind::App,
                        format!("Container {} definition changed, will be restarted", c.name),
                    ));
                    to_start.push(i);
                } else {
                    keep += 1;
                }
            }
            _ => {
                if should_restart(pod, c, ContainerKind::App, rt) {
                    to_start.push(i);
                    if let Some(d) = newest.filter(|d| d.state == ContainerState::Unknown) {
                        // It may still run: stop it before starting another instance.
                        a.kill.push(kill_of(
                            d,
                            &c.name,
                            ContainerKind::App,
                            "Container is in \"unknown\" state, try killing it before restart"
                                .into(),
                        ));
                    }
                }
            }
        }
    }
    // Running containers that the spec no longer has are stopped (a static pod keeps its
    // UID when only spec.containers changes, see podconfig/manifest.rs).
    for d in &rt.containers {
        let name = d
            .labels
            .get(labels::CONTAINER_NAME)
            .map(String::as_str)
            .unwrap_or_default();
        if d.state != ContainerState::Running {
            continue;
        }
        let kind = runtime::container::kind_of(d);
        let known = match kind {
            ContainerKind::App => spec.containers.iter().any(|c| c.name == name),
            ContainerKind::Init => inits.iter().any(|c| c.name == name),
        };
        if !known {
            a.kill.push(kill_of(
                d,
                name,
                kind,
                format!("Container {name} is not in the pod spec"),
            ));
        }
    }
    if keep == 0 && to_start.is_empty() {
        // Nothing runs and nothing will: the pod is done. Sidecars do not keep it alive.
        a.kill_pod = true;
        a.start_init.clear();
        return a;
    }
    gate_inits(pod, inits, rt, inp, &mut a);
    for i in to_start {
        let c = &spec.containers[i];
        let s = start_of(c, i, ContainerKind::App, rt);
        if let Ok(s) = gate(pod, c, s, rt, inp, &mut a) {
            a.start.push(s);
        }
    }
    a
}

/// Applies the backoff to the init starts in order; a regular init container that must
/// wait stops the ones after it (upstream: "the init container failed to start,
/// aborting"), a sidecar that must wait does not.
fn gate_inits(
    pod: &Pod,
    inits: &[Container],
    rt: &RuntimePod,
    inp: &ActionInputs<'_>,
    a: &mut PodActions,
) {
    let planned = std::mem::take(&mut a.start_init);
    for s in planned {
        let Some(c) = inits.get(s.index) else {
            continue;
        };
        match gate(pod, c, s, rt, inp, a) {
            Ok(s) => a.start_init.push(s),
            Err(()) if labels::is_sidecar(c) => {}
            Err(()) => break,
        }
    }
}

/// Upstream `computeInitContainerActions`: walks the init containers from the last to
/// the first, so that removed records of finished init containers do not make them run
/// again; starts the next regular init container, keeps sidecars running (restarting
/// them like app containers), and fails the pod on an init failure under
/// `restartPolicy: Never`. Returns true once the pod is initialized.
fn compute_init_actions(spec: &PodSpec, rt: &RuntimePod, a: &mut PodActions) -> bool {
    let inits = spec.init_containers.as_deref().unwrap_or_default();
    if inits.is_empty() {
        return true;
    }
    // An app container created or running means the inits ran before (their records
    // may be gone). An exited one does not: it may be from an old sandbox.
    let mut initialized = spec.containers.iter().any(|c| {
        rt.newest(&c.name, ContainerKind::App)
            .is_some_and(|d| matches!(d.state, ContainerState::Created | ContainerState::Running))
    });
    let mut previously = initialized;
    let restart_on_failure = policy(spec) != "Never";
    let last = inits.len() - 1;
    let mut to_start: Vec<usize> = Vec::new();
    for i in (0..inits.len()).rev() {
        let c = &inits[i];
        let sidecar = labels::is_sidecar(c);
        let Some(d) = rt.newest(&c.name, ContainerKind::Init) else {
            if previously && sidecar {
                to_start.push(i);
            }
            continue;
        };
        if previously && !sidecar {
            // After initialization only sidecars need to keep running.
            continue;
        }
        match d.state {
            ContainerState::Created => to_start.push(i),
            ContainerState::Running if sidecar => {
                if i == last {
                    initialized = true;
                } else if !previously {
                    // Started for the first time: the next init container may start.
                    to_start.push(i + 1);
                }
                if labels::hash_label(&d.labels) != labels::container_hash(c) {
                    a.kill.push(kill_of(
                        d,
                        &c.name,
                        ContainerKind::Init,
                        format!("Init container {} definition changed", c.name),
                    ));
                    to_start.push(i);
                }
            }
            ContainerState::Running => {}
            ContainerState::Exited if sidecar => to_start.push(i),
            ContainerState::Exited => {
                if init_failed(d) {
                    if !restart_on_failure {
                        a.kill_pod = true;
                        a.start_init.clear();
                        return false;
                    }
                    to_start.push(i);
                } else if i == last {
                    initialized = true;
                } else {
                    to_start.push(i + 1);
                }
            }
            ContainerState::Unknown => {
                if !sidecar && !restart_on_failure {
                    a.kill_pod = true;
                    a.start_init.clear();
                    return false;
                }
                a.kill.push(kill_of(
                    d,
                    &c.name,
                    ContainerKind::Init,
                    "Init container is in \"unknown\" state, try killing it before restart".into(),
                ));
                to_start.push(i);
            }
        }
        previously = true;
    }
    if !previously {
        to_start.push(0);
    }
    base::sort::sort(&mut to_start);
    to_start.dedup();
    a.start_init = to_start
        .into_iter()
        .filter_map(|i| {
            inits
                .get(i)
                .map(|c| start_of(c, i, ContainerKind::Init, rt))
        })
        .collect();
    initialized
}

/// Every init container of the pod that is a sidecar, by name.
pub(crate) fn sidecar_names(pod: &Pod) -> Vec<String> {
    pod.spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| labels::is_sidecar(c))
        .map(|c| c.name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

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
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("default".into()),
                uid: Some("u1".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                restart_policy: Some(policy.into()),
                containers: names.iter().map(|n| container(n)).collect(),
                ..Default::default()
            }),
            status: None,
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

    fn spec_of<'a>(p: &'a Pod, name: &str) -> (&'a Container, ContainerKind) {
        let spec = p.spec.as_ref().expect("spec");
        if let Some(c) = spec.containers.iter().find(|c| c.name == name) {
            return (c, ContainerKind::App);
        }
        let c = spec
            .init_containers
            .iter()
            .flatten()
            .find(|c| c.name == name)
            .expect("container in spec");
        (c, ContainerKind::Init)
    }

    fn ctr(
        p: &Pod,
        name: &str,
        state: ContainerState,
        exit: i64,
        rc: u32,
        finished: u64,
    ) -> ContainerDetails {
        let (c, kind) = spec_of(p, name);
        let l = labels::container_labels(p, "n", c, kind, rc, "sb0");
        ContainerDetails {
            id: format!("{name}{rc}"),
            name: labels::container_name(name, "p", "default", "u1", rc),
            labels: l,
            state,
            image: "img".into(),
            image_id: "sha256:1".into(),
            created: t(finished.saturating_sub(5) + u64::from(rc)),
            started_at: Some(t(finished.saturating_sub(4))),
            finished_at: (state == ContainerState::Exited).then(|| t(finished)),
            exit_code: exit,
            oom_killed: false,
            error: String::new(),
            pid: 1,
            ip_address: String::new(),
            additional_ips: Vec::new(),
            host_network: false,
            stop_signal: String::new(),
            rootfs_dir: String::new(),
            log_path: String::new(),
        }
    }

    fn sandbox(state: ContainerState, attempt: u32) -> ContainerDetails {
        ContainerDetails {
            id: format!("sb{attempt}"),
            name: labels::sandbox_name("p", "default", "u1", attempt),
            labels: BTreeMap::new(),
            state,
            image: "pause".into(),
            image_id: "sha256:2".into(),
            created: t(0),
            started_at: Some(t(0)),
            finished_at: None,
            exit_code: 0,
            oom_killed: false,
            error: String::new(),
            pid: 1,
            ip_address: "172.17.0.9".into(),
            additional_ips: Vec::new(),
            host_network: false,
            stop_signal: String::new(),
            rootfs_dir: String::new(),
            log_path: String::new(),
        }
    }

    fn running_pod(containers: Vec<ContainerDetails>) -> RuntimePod {
        let mut rp = RuntimePod {
            sandboxes: vec![sandbox(ContainerState::Running, 0)],
            containers,
        };
        rp.sort();
        rp
    }

    fn compute(p: &Pod, rt: &RuntimePod, b: &Backoff<SystemTime>, now: SystemTime) -> PodActions {
        compute_pod_actions(
            p,
            rt,
            &ActionInputs {
                backoff: b,
                now,
                terminal: false,
            },
        )
    }

    fn names(s: &[StartAction]) -> Vec<&str> {
        s.iter().map(|s| s.name.as_str()).collect()
    }

    /// An instance as a kubelet killed between create and start leaves it.
    fn never_started(p: &Pod, name: &str, rc: u32) -> ContainerDetails {
        ContainerDetails {
            started_at: None,
            ..ctr(p, name, ContainerState::Created, 0, rc, 30)
        }
    }

    #[test]
    fn a_container_created_but_never_started_is_replaced_under_its_own_restart_count() {
        let p = pod(&["a"], "Always");
        let b = Backoff::default();
        // The first instance never started: the new one is still the first run.
        let rt = running_pod(vec![never_started(&p, "a", 0)]);
        let a = compute(&p, &rt, &b, t(40));
        assert_eq!(names(&a.start), ["a"]);
        assert_eq!(
            a.start[0].restart_count, 0,
            "nothing ran, nothing restarted"
        );
        assert_eq!(a.start[0].backoff, None, "no crash to back off from");
        // After an edit's restart (instance 1) that never started: still one restart.
        let rt = running_pod(vec![
            ctr(&p, "a", ContainerState::Exited, 0, 0, 20),
            never_started(&p, "a", 1),
        ]);
        let a = compute(&p, &rt, &b, t(40));
        assert_eq!(names(&a.start), ["a"]);
        assert_eq!(a.start[0].restart_count, 1);
        // A start the runtime refused leaves `Created` with an exit code and an error:
        // that attempt counts, as upstream's.
        let refused = ContainerDetails {
            exit_code: 128,
            error: "exec: \"nope\": executable file not found in $PATH".into(),
            ..never_started(&p, "a", 0)
        };
        let rt = running_pod(vec![refused]);
        let a = compute(&p, &rt, &b, t(40));
        assert_eq!(names(&a.start), ["a"]);
        assert_eq!(a.start[0].restart_count, 1);
    }

    #[test]
    fn a_never_started_init_container_keeps_its_restart_count() {
        let p = with_inits(pod(&["a"], "Always"), &[("i", false)]);
        let rt = running_pod(vec![never_started(&p, "i", 0)]);
        let a = compute(&p, &rt, &Backoff::default(), t(40));
        assert_eq!(names(&a.start_init), ["i"]);
        assert_eq!(a.start_init[0].restart_count, 0);
    }

    #[test]
    fn failed_liveness_kills_and_restarts_only_that_container_then_backs_off() {
        use runtime::container::ProbeType;
        let p = pod(&["a", "b"], "Always");
        let rt = running_pod(vec![
            ctr(&p, "a", ContainerState::Running, 0, 0, 10),
            ctr(&p, "b", ContainerState::Running, 0, 0, 10),
        ]);
        let b = Backoff::default();
        let inp = ActionInputs {
            backoff: &b,
            now: t(20),
            terminal: false,
        };
        let mut a = compute_pod_actions(&p, &rt, &inp);
        let failed = |id: &str| (id == "a0").then_some(ProbeType::Liveness);
        kill_unhealthy(&mut a, &p, &rt, &failed, &inp);
        assert_eq!(a.kill.len(), 1);
        assert_eq!(a.kill[0].id, "a0");
        assert_eq!(a.kill[0].reason, KillReason::LivenessProbe);
        assert_eq!(
            a.kill[0].message,
            "Container a failed liveness probe, will be restarted"
        );
        assert_eq!(names(&a.start), ["a"]);
        assert_eq!(a.start[0].restart_count, 1);

        // The restarted instance fails again while the dead one finished just now:
        // the restart waits out CrashLoopBackOff like a crash.
        let mut b = Backoff::default();
        b.next_at(&backoff_key(&p, spec_of(&p, "a").0), t(20), t(20));
        let rt = running_pod(vec![
            ctr(&p, "a", ContainerState::Exited, 137, 0, 20),
            ctr(&p, "a", ContainerState::Running, 0, 1, 22),
            ctr(&p, "b", ContainerState::Running, 0, 0, 10),
        ]);
        let inp = ActionInputs {
            backoff: &b,
            now: t(23),
            terminal: false,
        };
        let mut a = compute_pod_actions(&p, &rt, &inp);
        let failed = |id: &str| (id == "a1").then_some(ProbeType::Liveness);
        kill_unhealthy(&mut a, &p, &rt, &failed, &inp);
        assert_eq!(a.kill.len(), 1);
        assert!(a.start.is_empty());
        assert_eq!(
            a.waiting.get("a").map(|w| w.reason.as_str()),
            Some("CrashLoopBackOff")
        );
    }

    #[test]
    fn failed_liveness_under_never_kills_without_restart() {
        use runtime::container::ProbeType;
        let p = pod(&["a"], "Never");
        let rt = running_pod(vec![ctr(&p, "a", ContainerState::Running, 0, 0, 10)]);
        let b = Backoff::default();
        let inp = ActionInputs {
            backoff: &b,
            now: t(20),
            terminal: false,
        };
        let mut a = compute_pod_actions(&p, &rt, &inp);
        kill_unhealthy(&mut a, &p, &rt, &|_| Some(ProbeType::Startup), &inp);
        assert_eq!(a.kill[0].message, "Container a failed startup probe");
        assert_eq!(a.kill[0].reason, KillReason::StartupProbe);
        assert!(a.start.is_empty());
    }

    #[test]
    fn new_pod_creates_sandbox_and_starts_all() {
        let p = pod(&["a", "b"], "Always");
        let a = compute(&p, &RuntimePod::default(), &Backoff::default(), t(10));
        assert_eq!(a.create_sandbox, Some(0));
        assert!(!a.kill_pod);
        assert_eq!(names(&a.start), ["a", "b"]);
        assert!(a.start.iter().all(|s| s.restart_count == 0));
    }

    #[test]
    fn healthy_pod_needs_nothing() {
        let p = pod(&["a"], "Always");
        let rt = running_pod(vec![ctr(&p, "a", ContainerState::Running, 0, 0, 10)]);
        let a = compute(&p, &rt, &Backoff::default(), t(10));
        assert_eq!(
            a,
            PodActions {
                sandbox_id: Some("sb0".into()),
                ..Default::default()
            }
        );
    }

    #[test]
    fn changed_spec_replaces_only_that_container() {
        let old = pod(&["a", "b"], "Never");
        let rt = running_pod(vec![
            ctr(&old, "a", ContainerState::Running, 0, 0, 10),
            ctr(&old, "b", ContainerState::Running, 0, 0, 10),
        ]);
        let mut new = old.clone();
        if let Some(s) = new.spec.as_mut() {
            s.containers[1].image = Some("img:2".into());
        }
        let a = compute(&new, &rt, &Backoff::default(), t(10));
        assert!(!a.kill_pod && a.create_sandbox.is_none());
        assert_eq!(a.kill.len(), 1);
        assert_eq!(a.kill[0].id, "b0");
        assert_eq!(
            a.kill[0].message,
            "Container b definition changed, will be restarted"
        );
        // Restarted even under restartPolicy Never: the spec changed.
        assert_eq!(
            a.start
                .iter()
                .map(|s| (s.name.as_str(), s.restart_count))
                .collect::<Vec<_>>(),
            [("b", 1)]
        );
    }

    #[test]
    fn dead_sandbox_kills_and_recreates_with_next_attempt() {
        let p = pod(&["a"], "Always");
        let rt = RuntimePod {
            sandboxes: vec![sandbox(ContainerState::Exited, 2)],
            containers: vec![ctr(&p, "a", ContainerState::Running, 0, 4, 10)],
        };
        let a = compute(&p, &rt, &Backoff::default(), t(10));
        assert!(a.kill_pod);
        assert_eq!(a.create_sandbox, Some(3));
        assert_eq!(a.start[0].restart_count, 5, "restart count continues");
    }

    #[test]
    fn host_network_toggle_needs_a_new_sandbox() {
        let mut p = pod(&["a"], "Always");
        let rt = running_pod(vec![ctr(&p, "a", ContainerState::Running, 0, 0, 10)]);
        if let Some(s) = p.spec.as_mut() {
            s.host_network = Some(true);
        }
        let a = compute(&p, &rt, &Backoff::default(), t(10));
        assert!(a.kill_pod);
        assert_eq!(a.create_sandbox, Some(1));
    }

    #[test]
    fn restart_policies_decide_restarts() {
        for (policy, exit, restarts) in [
            ("Always", 0, true),
            ("Always", 1, true),
            ("OnFailure", 0, false),
            ("OnFailure", 1, true),
            ("Never", 0, false),
            ("Never", 1, false),
        ] {
            let p = pod(&["a"], policy);
            let rt = running_pod(vec![ctr(&p, "a", ContainerState::Exited, exit, 0, 10)]);
            let a = compute(&p, &rt, &Backoff::default(), t(11));
            assert_eq!(!a.start.is_empty(), restarts, "{policy} exit {exit}");
            // A pod with nothing left to run stops its sandbox.
            assert_eq!(a.kill_pod, !restarts, "{policy} exit {exit}");
        }
    }

    #[test]
    fn on_failure_new_sandbox_skips_succeeded_containers() {
        let p = pod(&["ok", "bad"], "OnFailure");
        let rt = RuntimePod {
            sandboxes: vec![sandbox(ContainerState::Exited, 0)],
            containers: vec![
                ctr(&p, "ok", ContainerState::Exited, 0, 0, 10),
                ctr(&p, "bad", ContainerState::Exited, 3, 0, 10),
            ],
        };
        let a = compute(&p, &rt, &Backoff::default(), t(100));
        assert_eq!(a.create_sandbox, Some(1));
        assert_eq!(names(&a.start), ["bad"]);
    }

    #[test]
    fn crash_loop_waits_for_backoff_and_requeues() {
        let p = pod(&["a"], "Always");
        let rt = running_pod(vec![ctr(&p, "a", ContainerState::Exited, 1, 1, 100)]);
        let mut b = Backoff::default();
        let c = &p.spec.as_ref().expect("spec").containers[0];
        b.next_at(&backoff_key(&p, c), t(50), t(50));
        b.next_at(&backoff_key(&p, c), t(90), t(90)); // 20 s
        let a = compute(&p, &rt, &b, t(105));
        assert!(a.start.is_empty());
        assert!(!a.kill_pod, "a pod in backoff keeps its sandbox");
        let w = a.waiting.get("a").expect("waiting");
        assert_eq!(w.reason, "CrashLoopBackOff");
        assert_eq!(
            w.message,
            "back-off 20s restarting failed container=a pod=p_default(u1)"
        );
        assert_eq!(a.requeue_after, Some(Duration::from_secs(15)));
        // After the backoff it restarts with the next restart count, timed from the finish.
        let a = compute(&p, &rt, &b, t(121));
        assert_eq!(a.start.len(), 1);
        assert_eq!(a.start[0].restart_count, 2);
        assert_eq!(
            a.start[0].backoff,
            Some((backoff_key(&p, c), t(100))),
            "Next(key, finishedAt)"
        );
    }

    #[test]
    fn never_pod_that_ran_is_not_recreated_when_its_sandbox_dies() {
        let p = pod(&["a"], "Never");
        let rt = RuntimePod {
            sandboxes: vec![sandbox(ContainerState::Exited, 0)],
            containers: vec![ctr(&p, "a", ContainerState::Exited, 0, 0, 10)],
        };
        let a = compute(&p, &rt, &Backoff::default(), t(11));
        assert_eq!(a.create_sandbox, None);
        assert!(a.start.is_empty());
    }

    #[test]
    fn terminal_pod_only_stops() {
        let p = pod(&["a"], "Always");
        let rt = running_pod(vec![ctr(&p, "a", ContainerState::Running, 0, 0, 10)]);
        let a = compute_pod_actions(
            &p,
            &rt,
            &ActionInputs {
                backoff: &Backoff::default(),
                now: t(20),
                terminal: true,
            },
        );
        assert!(a.kill_pod);
        assert!(a.start.is_empty() && a.start_init.is_empty() && a.create_sandbox.is_none());
    }

    #[test]
    fn unknown_state_is_killed_before_restart() {
        let p = pod(&["a"], "Always");
        let rt = running_pod(vec![ctr(&p, "a", ContainerState::Unknown, 0, 0, 10)]);
        let a = compute(&p, &rt, &Backoff::default(), t(11));
        assert_eq!(a.kill.len(), 1);
        assert_eq!(names(&a.start), ["a"]);
    }

    /// Table: which init containers start, for the states of the init containers.
    #[test]
    fn init_containers_run_one_at_a_time_in_order() {
        use ContainerState::{Exited, Running};
        let base = with_inits(pod(&["app"], "Always"), &[("i1", false), ("i2", false)]);
        type Case<'a> = (&'a [(&'a str, ContainerState, i64)], &'a [&'a str], bool);
        let cases: &[Case<'_>] = &[
            (&[], &["i1"], false),
            (&[("i1", Running, 0)], &[], false),
            (&[("i1", Exited, 0)], &["i2"], false),
            (&[("i1", Exited, 0), ("i2", Running, 0)], &[], false),
            (&[("i1", Exited, 0), ("i2", Exited, 0)], &[], true),
            // A failed init container is retried (restartPolicy Always).
            (&[("i1", Exited, 1)], &["i1"], false),
            // Records of earlier inits may be gone: the last one decides.
            (&[("i2", Exited, 0)], &[], true),
        ];
        for (states, want, app_starts) in cases {
            let cs = states
                .iter()
                .map(|(n, s, e)| ctr(&base, n, *s, *e, 0, 10))
                .collect();
            let a = compute(&base, &running_pod(cs), &Backoff::default(), t(100));
            assert_eq!(names(&a.start_init), *want, "{states:?}");
            assert_eq!(names(&a.start) == ["app"], *app_starts, "{states:?}");
            assert!(!a.kill_pod, "{states:?}");
        }
    }

    #[test]
    fn failed_init_under_never_fails_the_pod() {
        let p = with_inits(pod(&["app"], "Never"), &[("i1", false)]);
        let rt = running_pod(vec![ctr(&p, "i1", ContainerState::Exited, 2, 0, 10)]);
        let a = compute(&p, &rt, &Backoff::default(), t(100));
        assert!(a.kill_pod);
        assert!(a.start_init.is_empty() && a.start.is_empty());
    }

    #[test]
    fn a_new_sandbox_runs_inits_again_from_the_first() {
        let p = with_inits(pod(&["app"], "Always"), &[("i1", false)]);
        let rt = RuntimePod {
            sandboxes: vec![sandbox(ContainerState::Exited, 0)],
            containers: vec![
                ctr(&p, "i1", ContainerState::Exited, 0, 0, 10),
                ctr(&p, "app", ContainerState::Exited, 137, 0, 50),
            ],
        };
        let a = compute(&p, &rt, &Backoff::default(), t(100));
        assert_eq!(a.create_sandbox, Some(1));
        assert_eq!(names(&a.start_init), ["i1"]);
        assert!(a.start.is_empty());
    }

    /// Sidecars start in order, the next init container starts once the sidecar runs,
    /// and sidecars are restarted beside the app containers.
    #[test]
    fn sidecars_start_in_order_and_restart_like_apps() {
        use ContainerState::{Exited, Running};
        let p = with_inits(
            pod(&["app"], "Never"),
            &[("s1", true), ("i2", false), ("s3", true)],
        );
        type Case<'a> = (&'a [(&'a str, ContainerState, i64)], &'a [&'a str], bool);
        let cases: &[Case<'_>] = &[
            (&[], &["s1"], false),
            (&[("s1", Running, 0)], &["i2"], false),
            (&[("s1", Running, 0), ("i2", Exited, 0)], &["s3"], false),
            (
                &[("s1", Running, 0), ("i2", Exited, 0), ("s3", Running, 0)],
                &[],
                true,
            ),
            // A dead sidecar is restarted even under restartPolicy Never.
            (
                &[("s1", Exited, 1), ("i2", Exited, 0), ("s3", Running, 0)],
                &["s1"],
                true,
            ),
        ];
        for (states, want, app) in cases {
            let cs = states
                .iter()
                .map(|(n, s, e)| ctr(&p, n, *s, *e, 0, 10))
                .collect();
            let a = compute(&p, &running_pod(cs), &Backoff::default(), t(100));
            assert_eq!(names(&a.start_init), *want, "{states:?}");
            assert_eq!(names(&a.start) == ["app"], *app, "{states:?}");
        }
    }

    #[test]
    fn sidecars_do_not_keep_a_finished_pod_alive() {
        let p = with_inits(pod(&["app"], "Never"), &[("s1", true)]);
        let rt = running_pod(vec![
            ctr(&p, "s1", ContainerState::Running, 0, 0, 10),
            ctr(&p, "app", ContainerState::Exited, 0, 0, 20),
        ]);
        let a = compute(&p, &rt, &Backoff::default(), t(100));
        assert!(a.kill_pod, "app done: the pod stops, sidecar included");
        assert!(a.start_init.is_empty());
    }

    #[test]
    fn an_init_container_in_backoff_waits_and_blocks_the_next() {
        let p = with_inits(pod(&["app"], "Always"), &[("i1", false)]);
        let rt = running_pod(vec![ctr(&p, "i1", ContainerState::Exited, 1, 3, 95)]);
        let mut b = Backoff::default();
        let c = spec_of(&p, "i1").0;
        b.next_at(&backoff_key(&p, c), t(80), t(80));
        let a = compute(&p, &rt, &b, t(100));
        assert!(a.start_init.is_empty());
        assert_eq!(a.waiting["i1"].reason, "CrashLoopBackOff");
        assert_eq!(a.requeue_after, Some(Duration::from_secs(5)));
    }

    #[test]
    fn go_durations() {
        assert_eq!(go_duration(Duration::from_secs(10)), "10s");
        assert_eq!(go_duration(Duration::from_secs(300)), "5m0s");
        assert_eq!(go_duration(Duration::from_secs(80)), "1m20s");
    }
}
