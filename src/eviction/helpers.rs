//! The eviction manager's pure decisions (upstream `pkg/kubelet/eviction/helpers.go`):
//! which thresholds are met by the observations, since when, which node conditions
//! they raise and for how long they stay (the transition period), the ranking of pods
//! (§9.3: usage above requests first, then lower priority, then usage above request),
//! the eviction message, local-storage limit violations, and admission under pressure.
//! Every function takes `now` and plain data, so all are table-tested. Over 800 lines
//! only with those tables: upstream's helpers.go, kept as one file so it reads as one.

use std::collections::BTreeMap;
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;

use super::api::{Condition, Signal, Threshold};

/// One signal's observation (upstream `signalObservation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Observation {
    /// What is left (bytes, inodes, pids).
    pub available: i128,
    /// The total.
    pub capacity: i128,
    /// When the figures were measured (a threshold is acted on only after fresh ones).
    pub time: Instant,
}

/// The observations of one pass.
pub(crate) type Observations = BTreeMap<Signal, Observation>;

/// Usage of one container, as the eviction manager ranks and explains it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ContainerUsage {
    /// The container's name.
    pub name: String,
    /// Memory working set, bytes.
    pub working_set: Option<u64>,
    /// Writable layer + logs, bytes.
    pub ephemeral: Option<u64>,
}

/// Usage of one pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PodUsage {
    /// Its containers'.
    pub containers: Vec<ContainerUsage>,
    /// Bytes used by each local volume (emptyDir) by name.
    pub volumes: BTreeMap<String, u64>,
    /// Processes (threads) in the pod.
    pub processes: Option<u64>,
}

impl PodUsage {
    /// Working set summed over containers (None: no figure at all).
    pub(crate) fn memory(&self) -> Option<u64> {
        sum(self.containers.iter().map(|c| c.working_set))
    }

    /// Containers' writable layers and logs plus the local volumes.
    pub(crate) fn ephemeral(&self) -> Option<u64> {
        let c = sum(self.containers.iter().map(|c| c.ephemeral));
        let v: u64 = self.volumes.values().sum();
        match c {
            Some(c) => Some(c.saturating_add(v)),
            None if !self.volumes.is_empty() => Some(v),
            None => None,
        }
    }
}

fn sum(it: impl Iterator<Item = Option<u64>>) -> Option<u64> {
    it.fold(None, |acc, v| match (acc, v) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
    })
}

/// The thresholds met by the observations (upstream `thresholdsMet`): the threshold's
/// amount (plus its minimum reclaim when `enforce_min_reclaim`, for thresholds already
/// met that must recover past it) above what is available. Signals not observed are
/// never met.
pub(crate) fn thresholds_met(
    thresholds: &[Threshold],
    observations: &Observations,
    enforce_min_reclaim: bool,
) -> Vec<Threshold> {
    thresholds
        .iter()
        .filter(|t| {
            let Some(o) = observations.get(&t.signal) else {
                return false;
            };
            let mut amount = t.value.amount(o.capacity);
            if enforce_min_reclaim {
                amount += t.min_reclaim.map_or(0, |r| r.amount(o.capacity));
            }
            amount > o.available
        })
        .cloned()
        .collect()
}

/// `a` plus the thresholds of `b` not in it (upstream `mergeThresholds`).
pub(crate) fn merge_thresholds(mut a: Vec<Threshold>, b: Vec<Threshold>) -> Vec<Threshold> {
    for t in b {
        if !a.contains(&t) {
            a.push(t);
        }
    }
    a
}

/// When each threshold was first observed met, keeping earlier times (upstream
/// `thresholdsFirstObservedAt`).
pub(crate) fn thresholds_first_observed_at(
    met: &[Threshold],
    last: &[(Threshold, Instant)],
    now: Instant,
) -> Vec<(Threshold, Instant)> {
    met.iter()
        .map(|t| {
            let at = last.iter().find(|(l, _)| l == t).map_or(now, |(_, at)| *at);
            (t.clone(), at)
        })
        .collect()
}

/// The thresholds whose grace period has passed (upstream `thresholdsMetGracePeriod`).
pub(crate) fn thresholds_met_grace_period(
    observed_at: &[(Threshold, Instant)],
    now: Instant,
) -> Vec<Threshold> {
    observed_at
        .iter()
        .filter(|(t, at)| now.saturating_duration_since(*at) >= t.grace_period)
        .map(|(t, _)| t.clone())
        .collect()
}

/// The thresholds whose signal was measured again since the last pass (upstream
/// `thresholdsUpdatedStats`); a signal with no earlier figure counts as new.
pub(crate) fn thresholds_updated_stats(
    thresholds: Vec<Threshold>,
    observations: &Observations,
    last: &Observations,
) -> Vec<Threshold> {
    thresholds
        .into_iter()
        .filter(
            |t| match (observations.get(&t.signal), last.get(&t.signal)) {
                (Some(now), Some(before)) => now.time > before.time,
                (Some(_), None) => true,
                (None, _) => false,
            },
        )
        .collect()
}

/// The node conditions met thresholds raise (upstream `nodeConditions`), in order.
pub(crate) fn node_conditions(met: &[Threshold]) -> Vec<Condition> {
    let mut out: Vec<Condition> = met.iter().map(|t| t.signal.condition()).collect();
    base::sort::sort(&mut out);
    out.dedup();
    out
}

/// When each condition was last observed (upstream `nodeConditionsLastObservedAt`):
/// the current ones now, the others as they were.
pub(crate) fn node_conditions_last_observed_at(
    current: &[Condition],
    last: &BTreeMap<Condition, Instant>,
    now: Instant,
) -> BTreeMap<Condition, Instant> {
    let mut out = last.clone();
    for c in current {
        out.insert(*c, now);
    }
    out
}

/// The conditions observed within the transition period (upstream
/// `nodeConditionsObservedSince`): a pressure condition stays set this long after it
/// was last seen, so it does not flap.
pub(crate) fn node_conditions_observed_since(
    observed_at: &BTreeMap<Condition, Instant>,
    period: std::time::Duration,
    now: Instant,
) -> Vec<Condition> {
    observed_at
        .iter()
        .filter(|(_, at)| now.saturating_duration_since(**at) < period)
        .map(|(c, _)| *c)
        .collect()
}

/// Thresholds in the order they are acted on (upstream `byEvictionPriority`): memory
/// first, the rest as given.
pub(crate) fn sort_by_eviction_priority(thresholds: &mut [Threshold]) {
    base::sort::sort_by_key(thresholds, |t| u8::from(!t.signal.is_memory()));
}

/// A pod as the ranking sees it.
#[derive(Debug)]
pub(crate) struct Candidate<'a> {
    /// The pod.
    pub pod: &'a Pod,
    /// Its usage, None when no stats were found (such pods rank first, as upstream's).
    pub usage: Option<&'a PodUsage>,
}

/// A pod's request of `resource` summed over its containers (upstream `podRequest`:
/// the larger of the app containers' sum and any init container's), in bytes.
pub(crate) fn pod_request(pod: &Pod, resource: &str) -> i128 {
    let Some(spec) = &pod.spec else { return 0 };
    let req = |c: &k8s_openapi::api::core::v1::Container| -> i128 {
        c.resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get(resource))
            .and_then(|q| base::quantity::parse_milli(&q.0))
            .map_or(0, |m| (m + 999) / 1000)
    };
    let containers: i128 = spec.containers.iter().map(req).sum();
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .map(req)
        .max()
        .unwrap_or(0);
    containers.max(init)
}

/// The pod's priority (0 without one).
pub(crate) fn priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// What a ranking compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rank {
    /// Memory working set against memory requests.
    Memory,
    /// Ephemeral storage against its requests.
    Disk,
    /// Processes (priority first).
    Pids,
}

impl Rank {
    /// The ranking for a signal (upstream `signalToRankFunc`).
    pub(crate) fn for_signal(s: Signal) -> Rank {
        match s {
            Signal::PidAvailable => Rank::Pids,
            s if s.is_memory() => Rank::Memory,
            _ => Rank::Disk,
        }
    }
}

/// Ranks candidates, first to evict first (upstream `rankMemoryPressure`,
/// `rankDiskPressureFunc`, `rankPIDPressure`): a pod without stats first; then pods
/// whose usage exceeds their requests; then lower priority; then the larger usage above
/// the request. For pids: lower priority, then more processes.
pub(crate) fn rank(candidates: &mut [Candidate<'_>], by: Rank) {
    let usage = |c: &Candidate<'_>| -> Option<i128> {
        let u = c.usage?;
        match by {
            Rank::Memory => u.memory().map(i128::from),
            Rank::Disk => u.ephemeral().map(i128::from),
            Rank::Pids => u.processes.map(i128::from),
        }
    };
    let request = |c: &Candidate<'_>| -> i128 {
        match by {
            Rank::Memory => pod_request(c.pod, "memory"),
            Rank::Disk => pod_request(c.pod, "ephemeral-storage"),
            Rank::Pids => 0,
        }
    };
    base::sort::sort_by(candidates, |a, b| {
        let (ua, ub) = (usage(a), usage(b));
        // No stats first.
        let by_found = ua.is_some().cmp(&ub.is_some());
        if by_found.is_ne() || ua.is_none() {
            return by_found;
        }
        let (ua, ub) = (ua.unwrap_or(0), ub.unwrap_or(0));
        let (ra, rb) = (request(a), request(b));
        let exceeds = |u: i128, r: i128| by != Rank::Pids && u > r;
        exceeds(ub, rb)
            .cmp(&exceeds(ua, ra))
            .then(priority(a.pod).cmp(&priority(b.pod)))
            .then((ub - rb).cmp(&(ua - ra)))
    });
}

/// A quantity as Go's `resource.Quantity` prints a BinarySI one (`200Mi`, `52428801`).
pub(crate) fn binary_si(n: i128) -> String {
    if n == 0 {
        return "0".into();
    }
    const SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    let (mut v, mut i) = (n, 0);
    if n.unsigned_abs() < 1024 {
        return n.to_string();
    }
    while i + 1 < SUFFIXES.len() && v % 1024 == 0 {
        v /= 1024;
        i += 1;
    }
    format!("{v}{}", SUFFIXES[i])
}

/// A quantity as Go prints a DecimalSI one (`5k`, `52428`).
pub(crate) fn decimal_si(n: i128) -> String {
    if n == 0 {
        return "0".into();
    }
    const SUFFIXES: [&str; 7] = ["", "k", "M", "G", "T", "P", "E"];
    let (mut v, mut i) = (n, 0);
    while i + 1 < SUFFIXES.len() && v % 1000 == 0 {
        v /= 1000;
        i += 1;
    }
    format!("{v}{}", SUFFIXES[i])
}

fn quantity(signal: Signal, n: i128) -> String {
    if signal.is_bytes() {
        binary_si(n)
    } else {
        decimal_si(n)
    }
}

/// The evicted pod's status message (upstream `evictionMessage`): the resource, the
/// threshold and what was available, then each container using more than it requested.
pub(crate) fn eviction_message(
    signal: Signal,
    pod: &Pod,
    usage: Option<&PodUsage>,
    met: &[Threshold],
    observations: &Observations,
) -> String {
    let resource = signal.resource();
    let mut message = format!("The node was low on resource: {resource}. ");
    if let (Some(t), Some(o)) = (
        met.iter().find(|t| t.signal == signal),
        observations.get(&signal),
    ) {
        message += &format!(
            "Threshold quantity: {}, available: {}. ",
            quantity(signal, t.value.amount(o.capacity)),
            quantity(signal, o.available)
        );
    }
    let (Some(usage), Some(spec)) = (usage, &pod.spec) else {
        return message;
    };
    for cs in &usage.containers {
        let Some(c) = spec.containers.iter().find(|c| c.name == cs.name) else {
            continue;
        };
        let used = match resource {
            "memory" => cs.working_set,
            "ephemeral-storage" => cs.ephemeral,
            _ => None,
        };
        let request = c
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get(resource))
            .map(|q| q.0.clone());
        let req_bytes = request
            .as_deref()
            .and_then(base::quantity::parse_milli)
            .map_or(0, |m| (m + 999) / 1000);
        if let Some(used) = used.map(i128::from).filter(|u| *u > req_bytes) {
            message += &format!(
                "Container {} was using {}, request is {}, has larger consumption of {resource}. ",
                c.name,
                binary_si(used),
                request.unwrap_or_else(|| "0".into())
            );
        }
    }
    message
}

/// Whether a pod is never evicted (upstream `IsCriticalPod`): a static or mirror pod,
/// or one at system-critical priority (2000000000) or above.
pub(crate) fn is_critical_pod(pod: &Pod) -> bool {
    const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;
    let mirror = pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"));
    runtime::container::is_static_pod(pod) || mirror || priority(pod) >= SYSTEM_CRITICAL_PRIORITY
}

/// Whether a container of `pod` has an `ephemeral-storage` limit: the pods whose
/// writable layers and logs [`local_storage_violation`] needs measured.
pub(crate) fn has_container_storage_limit(pod: &Pod) -> bool {
    pod.spec.iter().flat_map(|s| &s.containers).any(|c| {
        c.resources
            .as_ref()
            .and_then(|r| r.limits.as_ref())
            .is_some_and(|l| l.contains_key("ephemeral-storage"))
    })
}

/// A pod's local storage limit violation: the message it is evicted with (upstream
/// `localStorageEviction`: emptyDir `sizeLimit`, then each container's
/// `ephemeral-storage` limit, then the pod's total), or None.
pub(crate) fn local_storage_violation(pod: &Pod, usage: &PodUsage) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    for v in spec.volumes.iter().flatten() {
        let Some(limit) = v
            .empty_dir
            .as_ref()
            .and_then(|e| e.size_limit.as_ref())
            .map(|q| q.0.clone())
        else {
            continue;
        };
        let bytes = base::quantity::parse_milli(&limit).map(|m| (m + 999) / 1000)?;
        if let Some(used) = usage.volumes.get(&v.name) {
            if i128::from(*used) > bytes {
                return Some(format!(
                    "Usage of EmptyDir volume \"{}\" exceeds the limit \"{limit}\". ",
                    v.name
                ));
            }
        }
    }
    let limit_of = |c: &k8s_openapi::api::core::v1::Container| -> Option<(String, i128)> {
        let q = c
            .resources
            .as_ref()?
            .limits
            .as_ref()?
            .get("ephemeral-storage")?
            .0
            .clone();
        let b = base::quantity::parse_milli(&q)? / 1000;
        Some((q, b))
    };
    let mut total_limit: i128 = 0;
    let mut all_limited = true;
    for c in &spec.containers {
        match limit_of(c) {
            Some((text, bytes)) => {
                total_limit += bytes;
                let used = usage
                    .containers
                    .iter()
                    .find(|u| u.name == c.name)
                    .and_then(|u| u.ephemeral);
                if used.is_some_and(|u| i128::from(u) > bytes) {
                    return Some(format!(
                        "Container {} exceeded its local ephemeral storage limit \"{text}\". ",
                        c.name
                    ));
                }
            }
            None => all_limited = false,
        }
    }
    if all_limited && !spec.containers.is_empty() {
        if let Some(used) = usage.ephemeral() {
            if i128::from(used) > total_limit {
                return Some(format!(
                    "Pod ephemeral local storage usage exceeds the total limit of containers {}. ",
                    binary_si(total_limit)
                ));
            }
        }
    }
    None
}

/// Admission under pressure (upstream eviction manager's `Admit`, §9.4): None admits;
/// Some(message) rejects with reason `Evicted`. Critical pods are always admitted;
/// under memory pressure alone, pods other than BestEffort, and BestEffort pods that
/// tolerate the `node.kubernetes.io/memory-pressure:NoSchedule` taint.
pub(crate) fn admit(pod: &Pod, conditions: &[Condition]) -> Option<String> {
    if conditions.is_empty() || is_critical_pod(pod) {
        return None;
    }
    if conditions == [Condition::MemoryPressure] {
        if crate::status::qos_class(pod) != "BestEffort" {
            return None;
        }
        let tolerates = pod
            .spec
            .as_ref()
            .and_then(|s| s.tolerations.as_ref())
            .is_some_and(|ts| {
                ts.iter().any(|t| {
                    let key_ok = match t.key.as_deref() {
                        None | Some("") => t.operator.as_deref() == Some("Exists"),
                        Some(k) => k == "node.kubernetes.io/memory-pressure",
                    };
                    let effect_ok =
                        matches!(t.effect.as_deref(), None | Some("") | Some("NoSchedule"));
                    let value_ok = t.operator.as_deref() == Some("Exists")
                        || t.value.as_deref().unwrap_or("").is_empty();
                    key_ok && effect_ok && value_ok
                })
            });
        if tolerates {
            return None;
        }
    }
    let names: Vec<&str> = conditions.iter().map(|c| c.name()).collect();
    Some(format!("The node had condition: [{}]. ", names.join(" ")))
}

#[cfg(test)]
mod tests {
    use super::super::api::Value;
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).expect("pod")
    }

    fn besteffort(name: &str) -> Pod {
        pod(json!({"metadata": {"name": name, "uid": name},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}))
    }

    fn requesting(name: &str, mem: &str, prio: i32) -> Pod {
        pod(json!({"metadata": {"name": name, "uid": name},
            "spec": {"priority": prio, "containers": [{"name": "c", "image": "i",
                "resources": {"requests": {"memory": mem, "cpu": "100m"}}}]}}))
    }

    fn mem(ws: u64) -> PodUsage {
        PodUsage {
            containers: vec![ContainerUsage {
                name: "c".into(),
                working_set: Some(ws),
                ephemeral: Some(ws),
            }],
            ..Default::default()
        }
    }

    fn obs(signal: Signal, available: i128, capacity: i128, time: Instant) -> Observations {
        [(
            signal,
            Observation {
                available,
                capacity,
                time,
            },
        )]
        .into()
    }

    fn hard(signal: Signal, value: Value) -> Threshold {
        Threshold {
            signal,
            value,
            grace_period: Duration::ZERO,
            min_reclaim: None,
        }
    }

    #[test]
    fn thresholds_met_by_observations() {
        let now = Instant::now();
        let t = vec![
            hard(Signal::MemoryAvailable, Value::Quantity(100 << 20)),
            hard(Signal::NodeFsAvailable, Value::Percentage(0.1)),
        ];
        let mut o = obs(Signal::MemoryAvailable, 50 << 20, 1 << 30, now);
        o.extend(obs(Signal::NodeFsAvailable, 200, 1000, now));
        let met = thresholds_met(&t, &o, false);
        assert_eq!(met, vec![t[0].clone()]);
        // Unobserved signals are never met.
        assert!(thresholds_met(&t, &Observations::new(), false).is_empty());
        // Once met, it must recover past the minimum reclaim.
        let mut with_reclaim = t[0].clone();
        with_reclaim.min_reclaim = Some(Value::Quantity(100 << 20));
        let o = obs(Signal::MemoryAvailable, 150 << 20, 1 << 30, now);
        assert!(thresholds_met(std::slice::from_ref(&with_reclaim), &o, false).is_empty());
        assert_eq!(thresholds_met(&[with_reclaim], &o, true).len(), 1);
    }

    #[test]
    fn soft_thresholds_wait_their_grace_period() {
        let t0 = Instant::now();
        let soft = Threshold {
            grace_period: Duration::from_secs(30),
            ..hard(Signal::MemoryAvailable, Value::Quantity(1))
        };
        let first = thresholds_first_observed_at(std::slice::from_ref(&soft), &[], t0);
        assert!(thresholds_met_grace_period(&first, t0).is_empty());
        let t1 = t0 + Duration::from_secs(31);
        let again = thresholds_first_observed_at(std::slice::from_ref(&soft), &first, t1);
        assert_eq!(again[0].1, t0, "the first time is kept");
        assert_eq!(thresholds_met_grace_period(&again, t1), vec![soft]);
    }

    #[test]
    fn conditions_stay_for_the_transition_period() {
        let t0 = Instant::now();
        let period = Duration::from_secs(300);
        let met = vec![
            hard(Signal::NodeFsAvailable, Value::Quantity(1)),
            hard(Signal::ImageFsAvailable, Value::Quantity(1)),
        ];
        let conds = node_conditions(&met);
        assert_eq!(conds, [Condition::DiskPressure]);
        let at = node_conditions_last_observed_at(&conds, &BTreeMap::new(), t0);
        // Gone from the observations, kept until the period ends.
        let at = node_conditions_last_observed_at(&[], &at, t0 + Duration::from_secs(10));
        assert_eq!(
            node_conditions_observed_since(&at, period, t0 + Duration::from_secs(299)),
            [Condition::DiskPressure]
        );
        assert!(node_conditions_observed_since(&at, period, t0 + period).is_empty());
    }

    #[test]
    fn only_freshly_measured_thresholds_are_acted_on() {
        let t0 = Instant::now();
        let t = vec![hard(Signal::MemoryAvailable, Value::Quantity(1))];
        let before = obs(Signal::MemoryAvailable, 0, 1, t0);
        assert!(thresholds_updated_stats(t.clone(), &before, &before).is_empty());
        let after = obs(Signal::MemoryAvailable, 0, 1, t0 + Duration::from_secs(1));
        assert_eq!(thresholds_updated_stats(t, &after, &before).len(), 1);
    }

    #[test]
    fn memory_first_in_eviction_priority() {
        let mut t = vec![
            hard(Signal::NodeFsAvailable, Value::Quantity(1)),
            hard(Signal::PidAvailable, Value::Quantity(1)),
            hard(Signal::MemoryAvailable, Value::Quantity(1)),
        ];
        sort_by_eviction_priority(&mut t);
        let order: Vec<_> = t.iter().map(|t| t.signal).collect();
        assert_eq!(
            order,
            [
                Signal::MemoryAvailable,
                Signal::NodeFsAvailable,
                Signal::PidAvailable
            ]
        );
    }

    #[test]
    fn memory_ranking_table() {
        // (pod, usage): the order upstream's rankMemoryPressure gives.
        let be_small = besteffort("be-small");
        let be_big = besteffort("be-big");
        let under = requesting("burst-under", "500Mi", 0);
        let over_low = requesting("burst-over-low-prio", "100Mi", -10);
        let over = requesting("burst-over", "100Mi", 0);
        let no_stats = requesting("no-stats", "1Gi", 1000);
        let (u_small, u_big, u_under, u_over_low, u_over) = (
            mem(10 << 20),
            mem(300 << 20),
            mem(400 << 20),
            mem(150 << 20),
            mem(1 << 30),
        );
        let mut c = vec![
            Candidate {
                pod: &under,
                usage: Some(&u_under),
            },
            Candidate {
                pod: &be_small,
                usage: Some(&u_small),
            },
            Candidate {
                pod: &over,
                usage: Some(&u_over),
            },
            Candidate {
                pod: &be_big,
                usage: Some(&u_big),
            },
            Candidate {
                pod: &no_stats,
                usage: None,
            },
            Candidate {
                pod: &over_low,
                usage: Some(&u_over_low),
            },
        ];
        rank(&mut c, Rank::Memory);
        let names: Vec<_> = c
            .iter()
            .map(|c| c.pod.metadata.name.as_deref().unwrap_or(""))
            .collect();
        assert_eq!(
            names,
            [
                "no-stats",
                "burst-over-low-prio",
                "burst-over",
                "be-big",
                "be-small",
                "burst-under"
            ]
        );
    }

    #[test]
    fn pid_ranking_is_priority_then_processes() {
        let (a, b, c) = (
            requesting("a", "1Gi", 10),
            requesting("b", "1Gi", 0),
            requesting("c", "1Gi", 0),
        );
        let procs = |n| PodUsage {
            processes: Some(n),
            ..Default::default()
        };
        let (ua, ub, uc) = (procs(100), procs(5), procs(50));
        let mut v = vec![
            Candidate {
                pod: &a,
                usage: Some(&ua),
            },
            Candidate {
                pod: &b,
                usage: Some(&ub),
            },
            Candidate {
                pod: &c,
                usage: Some(&uc),
            },
        ];
        rank(&mut v, Rank::Pids);
        let names: Vec<_> = v.iter().map(|c| c.pod.metadata.name.clone()).collect();
        assert_eq!(
            names,
            [Some("c".into()), Some("b".into()), Some("a".into())]
        );
    }

    #[test]
    fn eviction_message_is_upstreams() {
        let now = Instant::now();
        let t = vec![hard(Signal::MemoryAvailable, Value::Quantity(100 << 20))];
        let o = obs(Signal::MemoryAvailable, 50 << 20, 8 << 30, now);
        let p = besteffort("p");
        let u = mem(200 << 20);
        assert_eq!(
            eviction_message(Signal::MemoryAvailable, &p, Some(&u), &t, &o),
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: \
             50Mi. Container c was using 200Mi, request is 0, has larger consumption of memory. "
        );
        // Under its request: no container line.
        let r = requesting("r", "1Gi", 0);
        assert_eq!(
            eviction_message(Signal::MemoryAvailable, &r, Some(&u), &t, &o),
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. "
        );
        let t = vec![hard(Signal::NodeFsAvailable, Value::Percentage(0.1))];
        let o = obs(Signal::NodeFsAvailable, 1 << 20, 100 << 20, now);
        assert_eq!(
            eviction_message(Signal::NodeFsAvailable, &p, None, &t, &o),
            "The node was low on resource: ephemeral-storage. Threshold quantity: 10Mi, \
             available: 1Mi. "
        );
    }

    #[test]
    fn quantities_print_as_go() {
        assert_eq!(binary_si(100 << 20), "100Mi");
        assert_eq!(binary_si(10_485_761), "10485761");
        assert_eq!(binary_si(0), "0");
        assert_eq!(binary_si(512), "512");
        assert_eq!(decimal_si(5000), "5k");
        assert_eq!(decimal_si(52_428), "52428");
    }

    #[test]
    fn local_storage_limits() {
        let p = pod(json!({"metadata": {"name": "p"}, "spec": {
            "containers": [{"name": "c", "image": "i",
                "resources": {"limits": {"ephemeral-storage": "10Mi"}}}],
            "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "1Mi"}}]}}));
        let mut u = PodUsage {
            containers: vec![ContainerUsage {
                name: "c".into(),
                working_set: None,
                ephemeral: Some(1 << 20),
            }],
            volumes: [("scratch".to_string(), 512 << 10)].into(),
            processes: None,
        };
        assert_eq!(local_storage_violation(&p, &u), None);
        u.volumes.insert("scratch".into(), 2 << 20);
        assert_eq!(
            local_storage_violation(&p, &u).as_deref(),
            Some("Usage of EmptyDir volume \"scratch\" exceeds the limit \"1Mi\". ")
        );
        u.volumes.insert("scratch".into(), 0);
        u.containers[0].ephemeral = Some(11 << 20);
        assert_eq!(
            local_storage_violation(&p, &u).as_deref(),
            Some("Container c exceeded its local ephemeral storage limit \"10Mi\". ")
        );
        u.containers[0].ephemeral = Some(9 << 20);
        u.volumes.insert("scratch".into(), 900 << 10);
        assert_eq!(local_storage_violation(&p, &u), None);
        // The pod's total: 9Mi + a 2Mi volume (within its own limit after a change).
        let p2 = pod(json!({"metadata": {"name": "p"}, "spec": {
            "containers": [{"name": "c", "image": "i",
                "resources": {"limits": {"ephemeral-storage": "10Mi"}}}],
            "volumes": [{"name": "scratch", "emptyDir": {}}]}}));
        u.volumes.insert("scratch".into(), 2 << 20);
        assert_eq!(
            local_storage_violation(&p2, &u).as_deref(),
            Some("Pod ephemeral local storage usage exceeds the total limit of containers 10Mi. ")
        );
    }

    #[test]
    fn admission_under_pressure() {
        let be = besteffort("be");
        let burst = requesting("b", "1Gi", 0);
        let tolerating = pod(json!({"metadata": {"name": "t"}, "spec": {
            "containers": [{"name": "c", "image": "i"}],
            "tolerations": [{"key": "node.kubernetes.io/memory-pressure",
                "operator": "Exists", "effect": "NoSchedule"}]}}));
        let static_pod = pod(json!({"metadata": {"name": "s",
            "annotations": {"kubernetes.io/config.source": "file"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}));
        let mem = [Condition::MemoryPressure];
        let disk = [Condition::DiskPressure];
        assert_eq!(admit(&be, &[]), None);
        assert_eq!(
            admit(&be, &mem).as_deref(),
            Some("The node had condition: [MemoryPressure]. ")
        );
        assert_eq!(admit(&burst, &mem), None);
        assert_eq!(admit(&tolerating, &mem), None);
        assert_eq!(admit(&static_pod, &disk), None);
        assert_eq!(
            admit(&burst, &disk).as_deref(),
            Some("The node had condition: [DiskPressure]. ")
        );
        assert_eq!(
            admit(
                &tolerating,
                &[Condition::MemoryPressure, Condition::DiskPressure]
            )
            .as_deref(),
            Some("The node had condition: [MemoryPressure DiskPressure]. ")
        );
    }
}
