//! The arithmetic of pod resources (pure): a pod's requests and limits as upstream's
//! `resource.PodRequests` / `PodLimits` add them up (init containers, sidecars,
//! overhead), the pod cgroup's settings (`ResourceConfigForPod`), the QoS cgroups'
//! cpu shares, and cgroup v2's cpu weight from v1 shares.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::kuberuntime::container::{
    milli_cpu_to_quota, milli_cpu_to_shares, MAX_SHARES, MIN_SHARES, QUOTA_PERIOD,
};
use runtime::container::downward::{effective_requests, limits};

/// A pod's QoS class (upstream `v1qos.GetPodQOS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum QosClass {
    /// Every container limits cpu and memory, requests equal limits.
    Guaranteed,
    /// Some request or limit, not Guaranteed.
    Burstable,
    /// No request or limit of cpu or memory at all.
    BestEffort,
}

impl QosClass {
    /// The pod's class (the status's computation, one definition).
    pub(crate) fn of(pod: &Pod) -> QosClass {
        match crate::status::qos_class(pod) {
            "Guaranteed" => QosClass::Guaranteed,
            "Burstable" => QosClass::Burstable,
            _ => QosClass::BestEffort,
        }
    }
}

/// Settings of one cgroup; None leaves a knob as it is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ResourceConfig {
    /// cgroup v1 `cpu.shares` (v2: converted to `cpu.weight`).
    pub cpu_shares: Option<u64>,
    /// CFS quota in µs per period (v1 `cpu.cfs_quota_us`, v2 `cpu.max`).
    pub cpu_quota: Option<i64>,
    /// CFS period in µs.
    pub cpu_period: Option<u64>,
    /// Memory limit in bytes (v1 `memory.limit_in_bytes`, v2 `memory.max`).
    pub memory: Option<i64>,
}

fn restartable(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

fn add(into: &mut BTreeMap<String, i128>, from: &BTreeMap<String, i128>) {
    for (k, v) in from {
        let e = into.entry(k.clone()).or_insert(0);
        *e = e.saturating_add(*v);
    }
}

fn max_into(into: &mut BTreeMap<String, i128>, from: &BTreeMap<String, i128>) {
    for (k, v) in from {
        let e = into.entry(k.clone()).or_insert(0);
        *e = (*e).max(*v);
    }
}

/// Upstream `resource.PodRequests` / `PodLimits` over `per` (a container's requests
/// or limits, milli-units): the app containers and the sidecars (restartable init
/// containers) add up; each other init container needs its own amount plus the
/// sidecars started before it, and the pod needs the largest of these; the pod's
/// overhead comes on top.
fn pod_amounts(
    pod: &Pod,
    per: impl Fn(&Container) -> BTreeMap<String, i128>,
) -> BTreeMap<String, i128> {
    let mut out = BTreeMap::new();
    let Some(spec) = &pod.spec else {
        return out;
    };
    for c in &spec.containers {
        add(&mut out, &per(c));
    }
    let mut sidecars = BTreeMap::new();
    let mut init_max = BTreeMap::new();
    for c in spec.init_containers.iter().flatten() {
        let r = per(c);
        if restartable(c) {
            add(&mut out, &r);
            add(&mut sidecars, &r);
            max_into(&mut init_max, &sidecars);
        } else {
            let mut need = sidecars.clone();
            add(&mut need, &r);
            max_into(&mut init_max, &need);
        }
    }
    max_into(&mut out, &init_max);
    if let Some(overhead) = &spec.overhead {
        let o = base::sort::map(
            overhead
                .iter()
                .filter_map(|(k, q)| base::quantity::parse_milli(&q.0).map(|v| (k.clone(), v))),
        );
        add(&mut out, &o);
    }
    out
}

/// The pod's requests in milli-units by resource (a missing request is its limit, as
/// API defaulting makes it).
pub(crate) fn pod_requests(pod: &Pod) -> BTreeMap<String, i128> {
    pod_amounts(pod, effective_requests)
}

/// The pod's limits in milli-units by resource.
pub(crate) fn pod_limits(pod: &Pod) -> BTreeMap<String, i128> {
    pod_amounts(pod, limits)
}

/// Milli-units of bytes as whole bytes, rounded up.
pub(crate) fn milli_to_bytes(milli: i128) -> i64 {
    i64::try_from(milli.max(0).saturating_add(999) / 1000).unwrap_or(i64::MAX)
}

/// Does every container (init and app) set a limit of `resource`?
fn every_container_limits(pod: &Pod, resource: &str) -> bool {
    let Some(spec) = &pod.spec else {
        return false;
    };
    spec.init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .all(|c| limits(c).get(resource).is_some_and(|v| *v > 0))
}

/// The pod cgroup's settings (upstream `ResourceConfigForPod`, CFS quota enforced
/// with the 100 ms period): cpu shares from the requests; a quota and a memory limit
/// only when every container sets that limit; BestEffort gets the minimum shares.
pub(crate) fn pod_resource_config(pod: &Pod) -> ResourceConfig {
    let requests = pod_requests(pod);
    let lims = pod_limits(pod);
    let cpu_request = requests.get("cpu").copied().unwrap_or(0);
    let shares = u64::try_from(milli_cpu_to_shares(cpu_request)).unwrap_or(2);
    let period = u64::try_from(QUOTA_PERIOD).unwrap_or(100_000);
    let quota = milli_cpu_to_quota(lims.get("cpu").copied().unwrap_or(0), QUOTA_PERIOD);
    let memory = milli_to_bytes(lims.get("memory").copied().unwrap_or(0));
    let cpu_limited = every_container_limits(pod, "cpu");
    let memory_limited = every_container_limits(pod, "memory");
    match QosClass::of(pod) {
        QosClass::Guaranteed => ResourceConfig {
            cpu_shares: Some(shares),
            cpu_quota: Some(quota),
            cpu_period: Some(period),
            memory: Some(memory),
        },
        QosClass::Burstable => ResourceConfig {
            cpu_shares: Some(shares),
            cpu_quota: cpu_limited.then_some(quota),
            cpu_period: cpu_limited.then_some(period),
            memory: memory_limited.then_some(memory),
        },
        QosClass::BestEffort => ResourceConfig {
            cpu_shares: Some(MIN_SHARES as u64),
            ..Default::default()
        },
    }
}

/// The burstable QoS cgroup's shares: its pods' cpu requests added up
/// (upstream `setCPUCgroupConfig`).
pub(crate) fn burstable_shares(cpu_requests_milli: impl IntoIterator<Item = i128>) -> u64 {
    let sum = cpu_requests_milli
        .into_iter()
        .fold(0i128, |a, b| a.saturating_add(b.max(0)));
    u64::try_from(milli_cpu_to_shares(sum)).unwrap_or(2)
}

/// cgroup v2's `cpu.weight` for v1 shares (upstream `CpuSharesToCpuWeight`): [2,
/// 262144] mapped linearly onto [1, 10000].
pub(crate) fn shares_to_weight(shares: u64) -> u64 {
    let s = shares.clamp(MIN_SHARES as u64, MAX_SHARES as u64);
    1 + ((s - 2) * 9999) / 262_142
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn container(name: &str, req: &[(&str, &str)], lim: &[(&str, &str)]) -> Container {
        let m = |l: &[(&str, &str)]| {
            (!l.is_empty()).then(|| {
                l.iter()
                    .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                    .collect()
            })
        };
        Container {
            name: name.into(),
            resources: Some(ResourceRequirements {
                requests: m(req),
                limits: m(lim),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    pub(crate) fn pod(containers: Vec<Container>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn shares_and_weight_follow_upstream() {
        assert_eq!(milli_cpu_to_shares(0), 2);
        assert_eq!(milli_cpu_to_shares(1), 2);
        assert_eq!(milli_cpu_to_shares(100), 102);
        assert_eq!(milli_cpu_to_shares(1000), 1024);
        assert_eq!(milli_cpu_to_shares(1_000_000), 262_144);
        assert_eq!(shares_to_weight(2), 1);
        assert_eq!(shares_to_weight(1024), 39);
        assert_eq!(shares_to_weight(262_144), 10_000);
        assert_eq!(shares_to_weight(102), 4);
        assert_eq!(milli_cpu_to_quota(500, 100_000), 50_000);
        assert_eq!(milli_cpu_to_quota(1, 100_000), 1_000);
        assert_eq!(burstable_shares([100, 250]), 358);
        assert_eq!(burstable_shares([]), 2);
    }

    #[test]
    fn guaranteed_pods_get_every_limit() {
        let p = pod(vec![
            container("a", &[], &[("cpu", "500m"), ("memory", "64Mi")]),
            container("b", &[], &[("cpu", "250m"), ("memory", "32Mi")]),
        ]);
        assert_eq!(QosClass::of(&p), QosClass::Guaranteed);
        assert_eq!(
            pod_resource_config(&p),
            ResourceConfig {
                cpu_shares: Some(768),
                cpu_quota: Some(75_000),
                cpu_period: Some(100_000),
                memory: Some(96 << 20),
            }
        );
    }

    #[test]
    fn burstable_pods_get_limits_only_when_every_container_sets_them() {
        let p = pod(vec![
            container("a", &[("cpu", "100m")], &[("memory", "64Mi")]),
            container("b", &[("cpu", "100m")], &[]),
        ]);
        assert_eq!(QosClass::of(&p), QosClass::Burstable);
        assert_eq!(
            pod_resource_config(&p),
            ResourceConfig {
                cpu_shares: Some(204),
                ..Default::default()
            }
        );
        let p = pod(vec![container(
            "a",
            &[("cpu", "100m"), ("memory", "10Mi")],
            &[("memory", "64Mi"), ("cpu", "1")],
        )]);
        let c = pod_resource_config(&p);
        assert_eq!(c.memory, Some(64 << 20));
        assert_eq!(c.cpu_quota, Some(100_000));
        assert_eq!(c.cpu_shares, Some(102));
    }

    #[test]
    fn best_effort_pods_get_minimum_shares() {
        let p = pod(vec![container("a", &[], &[])]);
        assert_eq!(QosClass::of(&p), QosClass::BestEffort);
        assert_eq!(
            pod_resource_config(&p),
            ResourceConfig {
                cpu_shares: Some(2),
                ..Default::default()
            }
        );
    }

    #[test]
    fn init_containers_and_sidecars_count_as_upstream() {
        let mut p = pod(vec![container("app", &[("cpu", "100m")], &[])]);
        let mut side = container("side", &[("cpu", "50m")], &[]);
        side.restart_policy = Some("Always".into());
        let init = container("init", &[("cpu", "500m")], &[]);
        p.spec.as_mut().expect("test pod").init_containers = Some(vec![side, init]);
        // app + sidecar = 150m; init after the sidecar needs 550m.
        assert_eq!(pod_requests(&p)["cpu"], 550);
        let p = pod(vec![
            container("a", &[("memory", "1Mi")], &[]),
            container("b", &[("memory", "1Mi")], &[]),
        ]);
        assert_eq!(milli_to_bytes(pod_requests(&p)["memory"]), 2 << 20);
    }
}
