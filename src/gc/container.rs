//! Container GC's decisions (upstream `kuberuntime_gc.go`, reference §8.1), pure: which
//! dead containers and inactive sandboxes go, given one container list, the policy,
//! the time and which pods are gone. [`super::ContainerGc`] carries them out.
//!
//! One difference from upstream, on purpose: the newest instance of a container of a
//! pod that still exists is never removed, whatever the limits say (upstream's global
//! `--maximum-dead-containers` may take it). The pod's restart count is that
//! instance's label plus one, and `kubectl logs --previous` reads it.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, SystemTime};

use runtime::container::labels;
use runtime::{ContainerState, ContainerSummary};

/// Upstream `GCPolicy` (flags `--minimum-container-ttl-duration`,
/// `--maximum-dead-containers-per-container`, `--maximum-dead-containers`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcPolicy {
    /// A dead container younger than this (by creation) is kept.
    pub min_age: Duration,
    /// Dead instances kept per (pod, container name); negative: no limit.
    pub max_per_pod_container: i32,
    /// Dead containers kept on the node; negative: no limit.
    pub max_containers: i32,
}

impl Default for GcPolicy {
    /// Upstream's defaults.
    fn default() -> Self {
        GcPolicy {
            min_age: Duration::ZERO,
            max_per_pod_container: 1,
            max_containers: -1,
        }
    }
}

/// Upstream `minDeadContainerInPod`: the per-pod pruning after a container died keeps
/// at least this many dead instances.
pub(crate) const MIN_DEAD_CONTAINER_IN_POD: usize = 1;

/// What one pass removes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Dead (or unknown-state) app and init containers, in removal order.
    pub containers: Vec<ContainerSummary>,
}

impl Plan {
    /// The IDs, for tests.
    #[cfg(test)]
    pub(crate) fn ids(&self) -> Vec<&str> {
        self.containers.iter().map(|c| c.id.as_str()).collect()
    }
}

fn label<'a>(c: &'a ContainerSummary, key: &str) -> &'a str {
    c.labels.get(key).map(String::as_str).unwrap_or_default()
}

/// True for a pod sandbox (the `POD` container).
pub(crate) fn is_sandbox(c: &ContainerSummary) -> bool {
    label(c, labels::DOCKER_TYPE) == labels::TYPE_SANDBOX
        || label(c, labels::CONTAINER_NAME) == labels::SANDBOX_CONTAINER_NAME
}

/// Newest first: restart count (the attempt), then creation time (upstream sorts its
/// evict units by creation; the attempt breaks ties of a clock that went back).
fn newest_first(v: &mut [ContainerSummary]) {
    base::sort::sort_by_key(v, |c| {
        (
            Reverse(labels::restart_count(&c.labels)),
            Reverse(c.created),
            c.id.clone(),
        )
    });
}

type Unit = (String, String);

/// The newest instance of each (pod, container) among every app container, running
/// ones included: the ones whose removal would lower a restart count.
fn newest_instances(all: &[ContainerSummary]) -> HashSet<String> {
    let mut by_unit: BTreeMap<Unit, Vec<ContainerSummary>> = BTreeMap::new();
    for c in all.iter().filter(|c| !is_sandbox(c)) {
        let key = (
            label(c, labels::POD_UID).to_string(),
            label(c, labels::CONTAINER_NAME).to_string(),
        );
        by_unit.entry(key).or_default().push(c.clone());
    }
    by_unit
        .into_values()
        .filter_map(|mut v| {
            newest_first(&mut v);
            v.into_iter().next().map(|c| c.id)
        })
        .collect()
}

/// Removes the oldest `n` of a newest-first unit, never a protected one; returns what
/// is left (newest first).
fn remove_oldest(
    mut unit: Vec<ContainerSummary>,
    n: usize,
    protected: &HashSet<String>,
    out: &mut Vec<ContainerSummary>,
) -> Vec<ContainerSummary> {
    let keep = unit.len().saturating_sub(n);
    let tail = unit.split_off(keep);
    for c in tail.into_iter().rev() {
        if protected.contains(&c.id) {
            unit.push(c);
        } else {
            out.push(c);
        }
    }
    newest_first(&mut unit);
    unit
}

/// Upstream `evictContainers`: the app and init containers to remove. `pod_gone`
/// answers for a pod UID whether everything of it may go (the caller answers false
/// until every source is ready).
pub(crate) fn plan_containers(
    all: &[ContainerSummary],
    policy: &GcPolicy,
    now: SystemTime,
    pod_gone: &dyn Fn(&str) -> bool,
) -> Plan {
    let newest_gc_time = now
        .checked_sub(policy.min_age)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let newest = newest_instances(all);
    // Evict units: dead containers by (pod UID, container name).
    let mut units: HashMap<Unit, Vec<ContainerSummary>> = HashMap::new();
    for c in all {
        if is_sandbox(c) || c.state == ContainerState::Running || c.created > newest_gc_time {
            continue;
        }
        // A pod's newest instance still `Created` is being started, not dead: counted
        // as dead, it took the place of a really dead one under the limits (the pass
        // between a restart's create and its start removed every dead instance).
        if c.state == ContainerState::Created && newest.contains(&c.id) {
            continue;
        }
        let uid = label(c, labels::POD_UID);
        if uid.is_empty() {
            continue;
        }
        units
            .entry((
                uid.to_string(),
                label(c, labels::CONTAINER_NAME).to_string(),
            ))
            .or_default()
            .push(c.clone());
    }
    for unit in units.values_mut() {
        newest_first(unit);
    }
    let mut plan = Plan::default();
    // Everything of a gone pod.
    let none = HashSet::new();
    let gone: Vec<Unit> = units.keys().filter(|k| pod_gone(&k.0)).cloned().collect();
    for key in gone {
        if let Some(unit) = units.remove(&key) {
            let n = unit.len();
            remove_oldest(unit, n, &none, &mut plan.containers);
        }
    }
    // Only a live pod's newest instances are protected.
    let protected: HashSet<String> = newest;
    let mut keys: Vec<Unit> = units.keys().cloned().collect();
    base::sort::sort(&mut keys);
    let enforce = |units: &mut HashMap<Unit, Vec<ContainerSummary>>,
                   keep: usize,
                   out: &mut Vec<ContainerSummary>| {
        for key in &keys {
            if let Some(unit) = units.remove(key) {
                let n = unit.len().saturating_sub(keep);
                let left = remove_oldest(unit, n, &protected, out);
                units.insert(key.clone(), left);
            }
        }
    };
    if let Ok(keep) = usize::try_from(policy.max_per_pod_container) {
        enforce(&mut units, keep, &mut plan.containers);
    }
    if let Ok(max) = usize::try_from(policy.max_containers) {
        let count = |u: &HashMap<Unit, Vec<ContainerSummary>>| u.values().map(Vec::len).sum();
        let n_units = units.values().filter(|u| !u.is_empty()).count().max(1);
        if count(&units) > max {
            enforce(&mut units, (max / n_units).max(1), &mut plan.containers);
            let total: usize = count(&units);
            if total > max {
                let mut flat: Vec<ContainerSummary> = units.into_values().flatten().collect();
                base::sort::sort_by_key(&mut flat, |c| (Reverse(c.created), c.id.clone()));
                remove_oldest(flat, total - max, &protected, &mut plan.containers);
            }
        }
    }
    plan
}

/// Upstream `evictSandboxes`: a sandbox is active while it runs or any container
/// (listed in `all`) still belongs to it. Of a gone pod every inactive sandbox goes;
/// of any other pod, every inactive one but the newest sandbox.
pub(crate) fn plan_sandboxes(
    all: &[ContainerSummary],
    pod_gone: &dyn Fn(&str) -> bool,
) -> Vec<ContainerSummary> {
    let used: HashSet<&str> = all
        .iter()
        .filter(|c| !is_sandbox(c))
        .map(|c| label(c, labels::SANDBOX_ID))
        .collect();
    let mut by_pod: BTreeMap<String, Vec<ContainerSummary>> = BTreeMap::new();
    for c in all.iter().filter(|c| is_sandbox(c)) {
        let uid = label(c, labels::POD_UID);
        if !uid.is_empty() {
            by_pod.entry(uid.to_string()).or_default().push(c.clone());
        }
    }
    let mut out = Vec::new();
    for (uid, mut sandboxes) in by_pod {
        newest_first(&mut sandboxes);
        let keep = usize::from(!pod_gone(&uid));
        for s in sandboxes.into_iter().skip(keep) {
            let active = s.state == ContainerState::Running || used.contains(s.id.as_str());
            if !active {
                out.push(s);
            }
        }
    }
    out
}

/// Upstream's `podContainerDeletor` after a PLEG `ContainerDied`: the exited instances
/// of the container that died (by name, in its pod) beyond the newest `keep` (at least
/// [`MIN_DEAD_CONTAINER_IN_POD`]), never the newest instance. Only exited ones count, as
/// upstream's `getContainersToDeleteInPod`: a restart's instance still `Created` is
/// being started, and counted it took the place of the one dead instance kept (on a
/// relisting PLEG, containerd 1.6's, the death is seen after the restart's create).
pub(crate) fn plan_died(
    pod_containers: &[ContainerSummary],
    died_id: &str,
    max_per_pod_container: i32,
) -> Vec<ContainerSummary> {
    let Some(died) = pod_containers.iter().find(|c| c.id == died_id) else {
        return Vec::new();
    };
    if is_sandbox(died) {
        return Vec::new();
    }
    let name = label(died, labels::CONTAINER_NAME);
    let uid = label(died, labels::POD_UID);
    let newest = newest_instances(pod_containers);
    let mut dead: Vec<ContainerSummary> = pod_containers
        .iter()
        .filter(|c| {
            !is_sandbox(c)
                && c.state == ContainerState::Exited
                && label(c, labels::CONTAINER_NAME) == name
                && label(c, labels::POD_UID) == uid
        })
        .cloned()
        .collect();
    newest_first(&mut dead);
    let keep = usize::try_from(max_per_pod_container)
        .unwrap_or(usize::MAX)
        .max(MIN_DEAD_CONTAINER_IN_POD);
    dead.into_iter()
        .skip(keep)
        .filter(|c| !newest.contains(&c.id))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_767_225_600;

    fn at(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(T0 + s)
    }

    /// Container `id` of pod `uid`, container `name`, attempt `rc`, created at `t`.
    fn c(
        id: &str,
        uid: &str,
        name: &str,
        rc: u32,
        t: u64,
        state: ContainerState,
    ) -> ContainerSummary {
        let mut l = BTreeMap::from([
            (labels::POD_UID.to_string(), uid.to_string()),
            (labels::CONTAINER_NAME.to_string(), name.to_string()),
            (labels::RESTART_COUNT.to_string(), rc.to_string()),
            (labels::SANDBOX_ID.to_string(), format!("sb-{uid}")),
        ]);
        if name == "POD" {
            l.insert(labels::DOCKER_TYPE.into(), labels::TYPE_SANDBOX.into());
            l.remove(labels::SANDBOX_ID);
        }
        ContainerSummary {
            id: id.into(),
            name: id.into(),
            labels: l,
            state,
            image: "busybox".into(),
            image_id: "sha256:1".into(),
            created: at(t),
        }
    }

    use ContainerState::{Created, Exited, Running, Unknown};

    fn live(_: &str) -> bool {
        false
    }

    #[test]
    fn a_crash_loop_keeps_the_running_instance_and_the_newest_dead_one() {
        let all = vec![
            c("a0", "u1", "app", 0, 0, Exited),
            c("a1", "u1", "app", 1, 10, Exited),
            c("a2", "u1", "app", 2, 20, Exited),
            c("a3", "u1", "app", 3, 30, Running),
        ];
        let p = plan_containers(&all, &GcPolicy::default(), at(100), &live);
        assert_eq!(p.ids(), ["a0", "a1"], "oldest first");
    }

    #[test]
    fn the_newest_dead_instance_stays_even_with_no_dead_containers_allowed() {
        let all = vec![
            c("a0", "u1", "app", 0, 0, Exited),
            c("a1", "u1", "app", 1, 10, Exited),
        ];
        let policy = GcPolicy {
            max_per_pod_container: 0,
            max_containers: 0,
            ..GcPolicy::default()
        };
        let p = plan_containers(&all, &policy, at(100), &live);
        assert_eq!(p.ids(), ["a0"], "a1 carries the restart count");
    }

    #[test]
    fn an_instance_being_started_is_not_counted_as_dead() {
        // Pod u1's restart is created, not yet started; u2 and u3 each have a dead one.
        let all = vec![
            c("a0", "u1", "app", 0, 0, Exited),
            c("a1", "u1", "app", 1, 50, Created),
            c("b0", "u2", "app", 0, 10, Exited),
            c("b1", "u2", "app", 1, 60, Running),
            c("c0", "u3", "app", 0, 20, Exited),
            c("c1", "u3", "app", 1, 70, Running),
        ];
        let policy = GcPolicy {
            max_containers: 1,
            ..GcPolicy::default()
        };
        let p = plan_containers(&all, &policy, at(100), &live);
        assert_eq!(p.ids(), ["a0", "b0"], "the newest dead one (c0) stays");
    }

    #[test]
    fn min_age_keeps_young_dead_containers() {
        let all = vec![
            c("a0", "u1", "app", 0, 0, Exited),
            c("a1", "u1", "app", 1, 90, Exited),
            c("a2", "u1", "app", 2, 95, Running),
        ];
        let policy = GcPolicy {
            min_age: Duration::from_secs(30),
            max_per_pod_container: 0,
            ..GcPolicy::default()
        };
        let p = plan_containers(&all, &policy, at(100), &live);
        assert_eq!(p.ids(), ["a0"]);
    }

    #[test]
    fn the_global_limit_removes_the_oldest_across_pods() {
        // Three pods, each with a running instance and two dead ones; 2 dead allowed
        // node-wide, per-container limit off.
        let mut all = Vec::new();
        for (i, uid) in ["u1", "u2", "u3"].iter().enumerate() {
            let t = i as u64 * 100;
            all.push(c(&format!("{uid}-0"), uid, "app", 0, t, Exited));
            all.push(c(&format!("{uid}-1"), uid, "app", 1, t + 10, Exited));
            all.push(c(&format!("{uid}-2"), uid, "app", 2, t + 20, Running));
        }
        let policy = GcPolicy {
            max_per_pod_container: -1,
            max_containers: 2,
            ..GcPolicy::default()
        };
        let p = plan_containers(&all, &policy, at(1000), &live);
        let mut ids = p.ids();
        base::sort::sort(&mut ids);
        // Per unit max(1, 2/3) = 1 → the three "-0" go; then the oldest "-1" until 2.
        assert_eq!(ids, ["u1-0", "u1-1", "u2-0", "u3-0"]);
    }

    #[test]
    fn everything_of_a_gone_pod_goes_unknown_ones_included() {
        let all = vec![
            c("a0", "u1", "app", 0, 0, Exited),
            c("a1", "u1", "app", 1, 10, Unknown),
            c("b0", "u2", "app", 0, 0, Exited),
        ];
        let gone = |uid: &str| uid == "u1";
        let p = plan_containers(&all, &GcPolicy::default(), at(100), &gone);
        let mut ids = p.ids();
        base::sort::sort(&mut ids);
        assert_eq!(ids, ["a0", "a1"]);
    }

    #[test]
    fn sandboxes_all_inactive_but_the_newest_of_a_live_pod_every_inactive_of_a_gone_one() {
        let all = vec![
            c("s0", "u1", "POD", 0, 0, Exited),
            c("s1", "u1", "POD", 1, 10, Exited),
            c("s2", "u1", "POD", 2, 20, Running),
            c("t0", "u2", "POD", 0, 0, Exited),
            c("t1", "u2", "POD", 1, 10, Exited),
            // A dead container still points at u3's old sandbox: it stays active.
            c("x0", "u3", "POD", 0, 0, Exited),
            c("x1", "u3", "POD", 1, 10, Exited),
        ];
        let mut all = all;
        let mut app = c("app", "u3", "app", 0, 5, Exited);
        app.labels.insert(labels::SANDBOX_ID.into(), "x0".into());
        all.push(app);
        let gone = |uid: &str| uid == "u2";
        let mut ids: Vec<String> = plan_sandboxes(&all, &gone)
            .into_iter()
            .map(|c| c.id)
            .collect();
        base::sort::sort(&mut ids);
        assert_eq!(ids, ["s0", "s1", "t0", "t1"]);
    }

    #[test]
    fn a_died_container_prunes_its_own_instances_only() {
        let all = vec![
            c("a0", "u1", "app", 0, 0, Exited),
            c("a1", "u1", "app", 1, 10, Exited),
            c("a2", "u1", "app", 2, 20, Exited),
            c("b0", "u1", "side", 0, 0, Exited),
            c("b1", "u1", "side", 1, 10, Exited),
        ];
        let ids: Vec<String> = plan_died(&all, "a2", 1).into_iter().map(|c| c.id).collect();
        assert_eq!(ids, ["a1", "a0"]);
        // Zero asked: one is kept all the same (upstream's minimum).
        let ids: Vec<String> = plan_died(&all, "a2", 0).into_iter().map(|c| c.id).collect();
        assert_eq!(ids, ["a1", "a0"]);
        assert!(plan_died(&all, "zz", 1).is_empty());
    }

    #[test]
    fn a_death_seen_after_the_restarts_create_keeps_the_dead_instance() {
        // The relist saw a0 die only once a1 was created (not yet started): a0 is the
        // one dead instance, kept.
        let all = vec![
            c("a0", "u1", "app", 0, 0, Exited),
            c("a1", "u1", "app", 1, 10, Created),
        ];
        assert!(plan_died(&all, "a0", 1).is_empty());
    }
}
