//! What one pod sync must do (upstream `computePodActions`), as a pure function of the
//! pod spec, its containers as the runtime reports them, the backoff table and `now`.
//! The executor in [`super::RuntimeManager`] carries the actions out.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::{Container, Pod};

use super::backoff::Backoff;
use super::labels::{self, ContainerKind};
use super::RuntimePod;
use crate::runtime::{ContainerDetails, ContainerState};
use crate::status::Waiting;

/// Start one container of the spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartAction {
    /// Init or app container.
    pub kind: ContainerKind,
    /// Index in `initContainers` or `containers`.
    pub index: usize,
    /// Container name.
    pub name: String,
    /// Restart count of the new instance (its name's attempt).
    pub restart_count: u32,
    /// Backoff key to bump when this start is a restart (None for a first start).
    pub backoff_key: Option<String>,
}

/// Stop one container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KillAction {
    /// Runtime ID.
    pub id: String,
    /// Container name in the spec.
    pub name: String,
    /// Why, as upstream words it.
    pub reason: String,
    /// Grace period overriding the pod's (a liveness or startup probe's own
    /// `terminationGracePeriodSeconds`).
    pub grace: Option<Duration>,
}

/// Everything one sync will do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodActions {
    /// Stop every container and the sandbox first (sandbox changed, or the pod is done).
    pub kill_pod: bool,
    /// Create a new sandbox with this attempt number.
    pub create_sandbox: Option<u32>,
    /// The running sandbox to start containers in (when not creating one).
    pub sandbox_id: Option<String>,
    /// Single containers to stop.
    pub kill: Vec<KillAction>,
    /// Containers to start, in order.
    pub start: Vec<StartAction>,
    /// Containers not started, with the reason shown in their status.
    pub waiting: BTreeMap<String, Waiting>,
    /// Sync again after this long (a backoff expires), even without events.
    pub requeue_after: Option<Duration>,
}

/// The backoff key of a container (upstream: `<pod>_<ns>_<uid>_<container>_<hash>`), so a
/// spec change starts its backoff fresh.
pub fn backoff_key(pod: &Pod, c: &Container) -> String {
    format!(
        "{}_{}_{}_{}_{:x}",
        pod.metadata.name.as_deref().unwrap_or_default(),
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.uid.as_deref().unwrap_or_default(),
        c.name,
        labels::container_hash(c)
    )
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

/// A duration as Go prints it (`10s`, `1m20s`, `5m0s`), for messages users compare.
pub fn go_duration(d: Duration) -> String {
    let s = d.as_secs();
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m{}s", s / 60, s % 60)
    } else {
        format!("{}h{}m{}s", s / 3600, (s % 3600) / 60, s % 60)
    }
}

/// Whether a new sandbox is needed (upstream `podSandboxChanged`), and its attempt.
fn sandbox_changed(pod: &Pod, rt: &RuntimePod) -> (bool, u32) {
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
        || (newest.network_mode == "host") != host_network
        || (!host_network && newest.ip_address.is_empty());
    (changed, attempt + 1)
}

/// Upstream `ShouldContainerBeRestarted` for a container whose newest instance is not
/// running.
fn should_restart(policy: &str, newest: &ContainerDetails) -> bool {
    match newest.state {
        ContainerState::Created | ContainerState::Unknown => true,
        _ => match policy {
            "Never" => false,
            "OnFailure" => newest.exit_code != 0,
            _ => true,
        },
    }
}

/// Checks the restart backoff of a dead container: Ok(key) to restart now (and bump the
/// key), Err(waiting, remaining) while it must wait.
fn check_backoff(
    pod: &Pod,
    c: &Container,
    newest: &ContainerDetails,
    backoff: &Backoff,
    now: Instant,
    wall: SystemTime,
) -> Result<String, (Waiting, Duration)> {
    let key = backoff_key(pod, c);
    let since = newest.finished_at.unwrap_or(newest.created);
    let elapsed = wall.duration_since(since).unwrap_or(Duration::ZERO);
    match backoff.get(&key, now) {
        Some(b) if backoff.is_in_backoff(&key, elapsed, now) => Err((
            Waiting {
                reason: "CrashLoopBackOff".into(),
                message: format!(
                    "back-off {} restarting failed container={} pod={}",
                    go_duration(b),
                    c.name,
                    format_pod(pod)
                ),
            },
            b.saturating_sub(elapsed),
        )),
        _ => Ok(key),
    }
}

/// Computes what one sync of `pod` must do.
pub fn compute_pod_actions(
    pod: &Pod,
    rt: &RuntimePod,
    backoff: &Backoff,
    now: Instant,
    wall: SystemTime,
) -> PodActions {
    let mut a = PodActions::default();
    let Some(spec) = &pod.spec else {
        return a;
    };
    let policy = spec.restart_policy.as_deref().unwrap_or("Always");
    let inits = spec.init_containers.as_deref().unwrap_or_default();

    let (changed, attempt) = sandbox_changed(pod, rt);
    if changed {
        a.kill_pod = rt
            .sandboxes
            .iter()
            .chain(&rt.containers)
            .any(|c| c.state == ContainerState::Running);
        // restartPolicy Never: a pod whose containers already ran does not come back.
        if policy == "Never" && attempt != 0 && !rt.containers.is_empty() {
            return a;
        }
        if !inits.is_empty() {
            // A new sandbox runs the init containers again from the first.
            a.start.push(first_start(inits, 0, ContainerKind::Init, rt));
        } else {
            for (i, c) in spec.containers.iter().enumerate() {
                let succeeded = rt
                    .newest(&c.name, ContainerKind::App)
                    .is_some_and(|d| d.state == ContainerState::Exited && d.exit_code == 0);
                if policy == "OnFailure" && succeeded {
                    continue;
                }
                a.start
                    .push(first_start(&spec.containers, i, ContainerKind::App, rt));
            }
        }
        if !a.start.is_empty() {
            a.create_sandbox = Some(attempt);
        }
        return a;
    }
    a.sandbox_id = rt.sandboxes.first().map(|s| s.id.clone());

    let mut min_requeue: Option<Duration> = None;
    let mut requeue = |d: Duration| {
        min_requeue = Some(min_requeue.map_or(d, |m| m.min(d)));
    };

    // Init containers: one at a time, in order, each to success.
    if !crate::status::init_containers_done(pod, rt) {
        for (i, c) in inits.iter().enumerate() {
            match rt.newest(&c.name, ContainerKind::Init) {
                None => {
                    a.start.push(first_start(inits, i, ContainerKind::Init, rt));
                }
                Some(d) if d.state == ContainerState::Running => {}
                Some(d) if d.state == ContainerState::Exited && d.exit_code == 0 => continue,
                Some(d) => {
                    if policy == "Never" {
                        // A failed init container fails the pod.
                        a.kill_pod = true;
                    } else {
                        match check_backoff(pod, c, d, backoff, now, wall) {
                            Ok(key) => a.start.push(restart(inits, i, ContainerKind::Init, d, key)),
                            Err((w, left)) => {
                                a.waiting.insert(c.name.clone(), w);
                                requeue(left);
                            }
                        }
                    }
                }
            }
            break;
        }
        a.requeue_after = min_requeue;
        return a;
    }

    let mut keep = 0;
    let mut should_run_later = false;
    for (i, c) in spec.containers.iter().enumerate() {
        match rt.newest(&c.name, ContainerKind::App) {
            None => a
                .start
                .push(first_start(&spec.containers, i, ContainerKind::App, rt)),
            Some(d) if d.state == ContainerState::Running => {
                if labels::hash_label(&d.labels) != labels::container_hash(c) {
                    a.kill.push(KillAction {
                        id: d.id.clone(),
                        name: c.name.clone(),
                        reason: format!("Container {} definition changed", c.name),
                        grace: None,
                    });
                    a.start.push(StartAction {
                        kind: ContainerKind::App,
                        index: i,
                        name: c.name.clone(),
                        restart_count: labels::restart_count(&d.labels) + 1,
                        backoff_key: None,
                    });
                } else {
                    keep += 1;
                }
            }
            Some(d) => {
                if !should_restart(policy, d) {
                    continue;
                }
                match check_backoff(pod, c, d, backoff, now, wall) {
                    Ok(key) => {
                        a.start
                            .push(restart(&spec.containers, i, ContainerKind::App, d, key))
                    }
                    Err((w, left)) => {
                        a.waiting.insert(c.name.clone(), w);
                        requeue(left);
                        should_run_later = true;
                    }
                }
            }
        }
    }
    // Running containers that the spec no longer has are stopped.
    let names: Vec<&str> = spec.containers.iter().map(|c| c.name.as_str()).collect();
    for d in &rt.containers {
        let name = d
            .labels
            .get(labels::CONTAINER_NAME)
            .map(String::as_str)
            .unwrap_or_default();
        if d.state == ContainerState::Running
            && crate::status::kind_of(d) == ContainerKind::App
            && !names.contains(&name)
        {
            a.kill.push(KillAction {
                id: d.id.clone(),
                name: name.to_string(),
                reason: format!("Container {name} is not in the pod spec"),
                grace: None,
            });
        }
    }
    // Nothing runs and nothing will: the pod is done, stop its sandbox.
    if keep == 0 && a.start.is_empty() && !should_run_later {
        a.kill_pod = true;
    }
    a.requeue_after = min_requeue;
    a
}

/// Adds to `a` the kill (and restart, unless `restartPolicy: Never`) of every running
/// app container whose liveness or startup probe failed (upstream `computePodActions`:
/// `Container <c> failed liveness probe, will be restarted`). `failed_probe` says which
/// probe condemned a container ID, if any. The kill uses the probe's own
/// `terminationGracePeriodSeconds` when it has one. As upstream (`doBackOff` looks for
/// an exited instance of the container), a container whose previous instance also died
/// restarts under the CrashLoopBackOff rules: a liveness loop slows down like a crash
/// loop.
pub fn kill_unhealthy(
    a: &mut PodActions,
    pod: &Pod,
    rt: &RuntimePod,
    failed_probe: &dyn Fn(&str) -> Option<crate::prober::ProbeType>,
    backoff: &Backoff,
    now: Instant,
    wall: SystemTime,
) {
    let Some(spec) = &pod.spec else {
        return;
    };
    if a.kill_pod {
        return; // everything goes anyway
    }
    let restart = spec.restart_policy.as_deref() != Some("Never");
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
        let probe = crate::prober::spec::probe_of(c, ty);
        let mut reason = format!("Container {} failed {} probe", c.name, ty.word());
        if restart {
            reason.push_str(", will be restarted");
        }
        a.kill.push(KillAction {
            id: d.id.clone(),
            name: c.name.clone(),
            reason,
            grace: probe
                .and_then(|p| p.termination_grace_period_seconds)
                .filter(|s| *s > 0)
                .map(|s| Duration::from_secs(s.unsigned_abs())),
        });
        if !restart {
            continue;
        }
        let previous = rt
            .instances(&c.name, ContainerKind::App)
            .get(1)
            .copied()
            .filter(|p| p.state == ContainerState::Exited);
        let backoff_key = match previous.map(|p| check_backoff(pod, c, p, backoff, now, wall)) {
            None => None,
            Some(Ok(key)) => Some(key),
            Some(Err((w, left))) => {
                a.waiting.insert(c.name.clone(), w);
                a.requeue_after = Some(a.requeue_after.map_or(left, |r| r.min(left)));
                continue;
            }
        };
        a.start.push(StartAction {
            kind: ContainerKind::App,
            index: i,
            name: c.name.clone(),
            restart_count: labels::restart_count(&d.labels) + 1,
            backoff_key,
        });
    }
}

fn first_start(list: &[Container], i: usize, kind: ContainerKind, rt: &RuntimePod) -> StartAction {
    let name = list[i].name.clone();
    // Restart counts continue across sandboxes (upstream: status restartCount + 1).
    let restart_count = rt
        .newest(&name, kind)
        .map_or(0, |d| labels::restart_count(&d.labels) + 1);
    StartAction {
        kind,
        index: i,
        name,
        restart_count,
        backoff_key: None,
    }
}

fn restart(
    list: &[Container],
    i: usize,
    kind: ContainerKind,
    d: &ContainerDetails,
    key: String,
) -> StartAction {
    StartAction {
        kind,
        index: i,
        name: list[i].name.clone(),
        restart_count: labels::restart_count(&d.labels) + 1,
        backoff_key: Some(key),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn t(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + s)
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
            status: None,
        }
    }

    fn ctr(
        p: &Pod,
        name: &str,
        state: ContainerState,
        exit: i64,
        rc: u32,
        finished: u64,
    ) -> ContainerDetails {
        let spec = p.spec.as_ref().expect("spec");
        let c = spec
            .containers
            .iter()
            .find(|c| c.name == name)
            .cloned()
            .unwrap_or_default();
        let l = labels::container_labels(p, "n", &c, ContainerKind::App, rc, "sb");
        ContainerDetails {
            id: format!("{name}{rc}"),
            name: labels::container_name(name, "p", "default", "u1", rc),
            labels: l,
            state,
            image: "img".into(),
            image_id: "sha256:1".into(),
            created: t(finished.saturating_sub(5)),
            started_at: Some(t(finished.saturating_sub(4))),
            finished_at: (state == ContainerState::Exited).then(|| t(finished)),
            exit_code: exit,
            oom_killed: false,
            error: String::new(),
            pid: 1,
            ip_address: String::new(),
            network_mode: "container:sb".into(),
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
            network_mode: "default".into(),
        }
    }

    fn compute(
        p: &Pod,
        rt: &RuntimePod,
        b: &Backoff,
        now: Instant,
        wall: SystemTime,
    ) -> PodActions {
        compute_pod_actions(p, rt, b, now, wall)
    }

    #[test]
    fn new_pod_creates_sandbox_and_starts_all() {
        let p = pod(&["a", "b"], "Always");
        let a = compute(
            &p,
            &RuntimePod::default(),
            &Backoff::default(),
            Instant::now(),
            t(10),
        );
        assert_eq!(a.create_sandbox, Some(0));
        assert!(!a.kill_pod);
        assert_eq!(
            a.start.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert!(a.start.iter().all(|s| s.restart_count == 0));
    }

    #[test]
    fn healthy_pod_needs_nothing() {
        let p = pod(&["a"], "Always");
        let rt = RuntimePod {
            sandboxes: vec![sandbox(ContainerState::Running, 0)],
            containers: vec![ctr(&p, "a", ContainerState::Running, 0, 0, 10)],
        };
        let a = compute(&p, &rt, &Backoff::default(), Instant::now(), t(10));
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
        let old = pod(&["a", "b"], "Always");
        let rt = RuntimePod {
            sandboxes: vec![sandbox(ContainerState::Running, 0)],
            containers: vec![
                ctr(&old, "a", ContainerState::Running, 0, 0, 10),
                ctr(&old, "b", ContainerState::Running, 0, 0, 10),
            ],
        };
        let mut new = old.clone();
        if let Some(s) = new.spec.as_mut() {
            s.containers[1].image = Some("img:2".into());
        }
        let a = compute(&new, &rt, &Backoff::default(), Instant::now(), t(10));
        assert!(!a.kill_pod && a.create_sandbox.is_none());
        assert_eq!(a.kill.len(), 1);
        assert_eq!(a.kill[0].id, "b0");
        assert_eq!(a.kill[0].reason, "Container b definition changed");
        assert_eq!(a.start.len(), 1);
        assert_eq!(
            (a.start[0].name.as_str(), a.start[0].restart_count),
            ("b", 1)
        );
    }

    #[test]
    fn dead_sandbox_kills_and_recreates_with_next_attempt() {
        let p = pod(&["a"], "Always");
        let rt = RuntimePod {
            sandboxes: vec![sandbox(ContainerState::Exited, 2)],
            containers: vec![ctr(&p, "a", ContainerState::Running, 0, 4, 10)],
        };
        let a = compute(&p, &rt, &Backoff::default(), Instant::now(), t(10));
        assert!(a.kill_pod);
        assert_eq!(a.create_sandbox, Some(3));
        assert_eq!(a.start[0].restart_count, 5, "restart count continues");
    }

    #[test]
    fn restart_policies_decide_restarts() {
        for (policy, exit, restarts) in [
            ("Always", 0, true),
            ("Always", 1, true),
            ("OnFailure", 0, false),
            ("OnFailure", 1, true),
            ("Never", 1, false),
        ] {
            let p = pod(&["a"], policy);
            let rt = RuntimePod {
                sandboxes: vec![sandbox(ContainerState::Running, 0)],
                containers: vec![ctr(&p, "a", ContainerState::Exited, exit, 0, 10)],
            };
            let a = compute(&p, &rt, &Backoff::default(), Instant::now(), t(11));
            assert_eq!(!a.start.is_empty(), restarts, "{policy} exit {exit}");
            // A pod with nothing left to run stops its sandbox.
            assert_eq!(a.kill_pod, !restarts, "{policy} exit {exit}");
        }
    }

    #[test]
    fn crash_loop_waits_for_backoff_and_requeues() {
        let p = pod(&["a"], "Always");
        let rt = RuntimePod {
            sandboxes: vec![sandbox(ContainerState::Running, 0)],
            containers: vec![ctr(&p, "a", ContainerState::Exited, 1, 1, 100)],
        };
        let now = Instant::now();
        let mut b = Backoff::default();
        let c = &p.spec.as_ref().expect("spec").containers[0];
        b.next(&backoff_key(&p, c), now);
        b.next(&backoff_key(&p, c), now); // 20 s
        let a = compute(&p, &rt, &b, now, t(105));
        assert!(a.start.is_empty());
        assert!(!a.kill_pod, "a pod in backoff keeps its sandbox");
        let w = a.waiting.get("a").expect("waiting");
        assert_eq!(w.reason, "CrashLoopBackOff");
        assert_eq!(
            w.message,
            "back-off 20s restarting failed container=a pod=p_default(u1)"
        );
        assert_eq!(a.requeue_after, Some(Duration::from_secs(15)));
        // After the backoff it restarts with the next restart count.
        let a = compute(&p, &rt, &b, now, t(121));
        assert_eq!(a.start.len(), 1);
        assert_eq!(a.start[0].restart_count, 2);
        assert!(a.start[0].backoff_key.is_some());
    }

    #[test]
    fn never_pod_that_ran_is_not_recreated_when_its_sandbox_dies() {
        let p = pod(&["a"], "Never");
        let rt = RuntimePod {
            sandboxes: vec![sandbox(ContainerState::Exited, 0)],
            containers: vec![ctr(&p, "a", ContainerState::Exited, 0, 0, 10)],
        };
        let a = compute(&p, &rt, &Backoff::default(), Instant::now(), t(11));
        assert_eq!(a.create_sandbox, None);
        assert!(a.start.is_empty());
    }

    #[test]
    fn init_containers_run_in_order_before_apps() {
        let mut p = pod(&["app"], "Always");
        if let Some(s) = p.spec.as_mut() {
            s.init_containers = Some(vec![
                Container {
                    name: "i1".into(),
                    image: Some("img".into()),
                    ..Default::default()
                },
                Container {
                    name: "i2".into(),
                    image: Some("img".into()),
                    ..Default::default()
                },
            ]);
        }
        let a = compute(
            &p,
            &RuntimePod::default(),
            &Backoff::default(),
            Instant::now(),
            t(1),
        );
        assert_eq!(
            a.start.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            ["i1"]
        );
        let mut i1 = ctr(&p, "i1", ContainerState::Exited, 0, 0, 5);
        i1.labels
            .insert(labels::CONTAINER_TYPE.into(), "init".into());
        i1.labels.insert(labels::CONTAINER_NAME.into(), "i1".into());
        let rt = RuntimePod {
            sandboxes: vec![sandbox(ContainerState::Running, 0)],
            containers: vec![i1],
        };
        let a = compute(&p, &rt, &Backoff::default(), Instant::now(), t(6));
        assert_eq!(
            a.start.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            ["i2"]
        );
    }

    #[test]
    fn failed_liveness_kills_and_restarts_with_the_probe_grace() {
        use crate::prober::ProbeType;
        use k8s_openapi::api::core::v1::{ExecAction, Probe};
        for (policy, restarts) in [("Always", true), ("OnFailure", true), ("Never", false)] {
            let mut p = pod(&["a", "b"], policy);
            if let Some(s) = p.spec.as_mut() {
                s.containers[0].liveness_probe = Some(Probe {
                    exec: Some(ExecAction {
                        command: Some(vec!["true".into()]),
                    }),
                    termination_grace_period_seconds: Some(3),
                    ..Default::default()
                });
            }
            let rt = RuntimePod {
                sandboxes: vec![sandbox(ContainerState::Running, 0)],
                containers: vec![
                    ctr(&p, "a", ContainerState::Running, 0, 2, 10),
                    ctr(&p, "b", ContainerState::Running, 0, 0, 10),
                ],
            };
            let mut a = compute(&p, &rt, &Backoff::default(), Instant::now(), t(10));
            kill_unhealthy(
                &mut a,
                &p,
                &rt,
                &|id| (id == "a2").then_some(ProbeType::Liveness),
                &Backoff::default(),
                Instant::now(),
                t(10),
            );
            assert_eq!(a.kill.len(), 1, "{policy}");
            let k = &a.kill[0];
            assert_eq!(k.id, "a2");
            let want = if restarts {
                "Container a failed liveness probe, will be restarted"
            } else {
                "Container a failed liveness probe"
            };
            assert_eq!(k.reason, want);
            assert_eq!(k.grace, Some(Duration::from_secs(3)));
            assert_eq!(
                a.start
                    .iter()
                    .map(|s| (s.name.as_str(), s.restart_count))
                    .collect::<Vec<_>>(),
                if restarts { vec![("a", 3)] } else { vec![] },
                "{policy}"
            );
        }
        // A startup failure kills with the pod's grace when the probe has none.
        let p = pod(&["a"], "Always");
        let rt = RuntimePod {
            sandboxes: vec![sandbox(ContainerState::Running, 0)],
            containers: vec![ctr(&p, "a", ContainerState::Running, 0, 0, 10)],
        };
        let mut a = compute(&p, &rt, &Backoff::default(), Instant::now(), t(10));
        let b = Backoff::default();
        kill_unhealthy(
            &mut a,
            &p,
            &rt,
            &|_| Some(ProbeType::Startup),
            &b,
            Instant::now(),
            t(10),
        );
        assert_eq!(
            a.kill[0].reason,
            "Container a failed startup probe, will be restarted"
        );
        assert_eq!(a.kill[0].grace, None);
        assert_eq!(
            a.start[0].backoff_key, None,
            "a first kill restarts at once"
        );
    }

    #[test]
    fn repeated_liveness_kills_back_off_like_a_crash_loop() {
        use crate::prober::ProbeType;
        let p = pod(&["a"], "Always");
        // Instance 1 runs and failed its probe; instance 0 was killed 5 s ago.
        let rt = RuntimePod {
            sandboxes: vec![sandbox(ContainerState::Running, 0)],
            containers: vec![
                ctr(&p, "a", ContainerState::Running, 0, 1, 100),
                ctr(&p, "a", ContainerState::Exited, 137, 0, 100),
            ],
        };
        let now = Instant::now();
        let c = &p.spec.as_ref().expect("spec").containers[0];
        // No backoff yet: killed and restarted at once, bumping the backoff.
        let mut a = compute(&p, &rt, &Backoff::default(), now, t(105));
        kill_unhealthy(
            &mut a,
            &p,
            &rt,
            &|_| Some(ProbeType::Liveness),
            &Backoff::default(),
            now,
            t(105),
        );
        assert_eq!(a.kill.len(), 1);
        assert_eq!(a.start[0].backoff_key, Some(backoff_key(&p, c)));
        // In backoff (10 s since the previous instance died 5 s ago): killed, not
        // restarted yet, shown as CrashLoopBackOff, resynced when the backoff ends.
        let mut b = Backoff::default();
        b.next(&backoff_key(&p, c), now);
        let mut a = compute(&p, &rt, &b, now, t(105));
        kill_unhealthy(
            &mut a,
            &p,
            &rt,
            &|_| Some(ProbeType::Liveness),
            &b,
            now,
            t(105),
        );
        assert_eq!(a.kill.len(), 1);
        assert!(a.start.is_empty());
        assert_eq!(a.waiting["a"].reason, "CrashLoopBackOff");
        assert_eq!(a.requeue_after, Some(Duration::from_secs(5)));
    }

    #[test]
    fn go_durations() {
        assert_eq!(go_duration(Duration::from_secs(10)), "10s");
        assert_eq!(go_duration(Duration::from_secs(300)), "5m0s");
        assert_eq!(go_duration(Duration::from_secs(80)), "1m20s");
    }
}
