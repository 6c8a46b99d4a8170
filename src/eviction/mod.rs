//! The eviction manager (upstream `pkg/kubelet/eviction/eviction_manager.go`): every
//! 10 s (`evictionMonitoringPeriod`) it observes the node's signals, decides which
//! thresholds are met and which pressure conditions hold (kept for the transition
//! period), evicts pods over their local-storage limits, then for the first met
//! threshold whose grace period passed: records `EvictionThresholdMet`, tries the
//! node-level reclaim (container GC, then image GC: closures the wiring hands in), and
//! if that is not enough evicts at most one pod, ranked as §9.3, critical pods never.
//!
//! I/O is behind three seams so a pass is unit-tested with fakes: [`Inputs`] (the
//! signals, the active pods and their usage), the reclaimers, and [`Evictor`] (kills
//! the pod through the kubelet's kill path and writes its Failed/`Evicted` status).
//! The conditions are published in [`PressureState`], which the node status and
//! admission read.

pub(crate) mod api;
pub(crate) mod helpers;
pub(crate) mod signals;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;

use crate::metrics::KubeletMetrics;
use api::{Condition, Signal, Threshold};
use helpers::{Observations, PodUsage};

/// Upstream `evictionMonitoringPeriod`.
pub(crate) const MONITORING_PERIOD: Duration = Duration::from_secs(10);
/// The grace of a hard eviction (upstream `immediateEvictionGracePeriodSeconds`).
pub(crate) const IMMEDIATE_GRACE: Duration = Duration::from_secs(1);

/// The manager's settings.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    /// Hard and soft thresholds.
    pub thresholds: Vec<Threshold>,
    /// How long a condition stays after its threshold was last met.
    pub pressure_transition_period: Duration,
    /// The longest grace given to a pod evicted for a soft threshold.
    pub max_pod_grace_period: Duration,
    /// Enforce emptyDir `sizeLimit` and `ephemeral-storage` limits.
    pub local_storage_capacity_isolation: bool,
}

/// What one pass reads.
pub(crate) trait Inputs: Send {
    /// The node's signals now.
    fn observe(&mut self) -> Observations;
    /// The pods that may be evicted (running, not terminating).
    fn active_pods(&mut self) -> Vec<Arc<Pod>>;
    /// Usage of those pods by UID (missing: no stats). `fresh`: a threshold is met and
    /// the pods are about to be ranked, so their working sets must be current (upstream
    /// asks its summary provider for fresh stats); else the disk figures suffice (the
    /// local-storage limits).
    fn pod_usage(&mut self, pods: &[Arc<Pod>], fresh: bool) -> BTreeMap<String, PodUsage>;
}

/// Kills an evicted pod and records its status.
pub(crate) trait Evictor: Send {
    /// Kills `pod` with `grace`, its status Failed, reason `Evicted`, `message`;
    /// false when it could not be.
    fn evict(&mut self, pod: &Pod, grace: Duration, message: &str) -> bool;

    /// Called at the start of every pass (the kubelet's re-applies the status of
    /// recent evictions that a sync in flight overwrote).
    fn tick(&mut self) {}
}

/// A node-level reclaim step (container GC, image GC).
pub(crate) type Reclaimer = Box<dyn FnMut() -> Result<(), String> + Send>;

/// The pressure conditions now, shared with the node status and admission.
#[derive(Debug, Default)]
pub(crate) struct PressureState(Mutex<Vec<Condition>>);

impl PressureState {
    /// The conditions that hold.
    pub(crate) fn conditions(&self) -> Vec<Condition> {
        base::loops::lock(&self.0).clone()
    }

    #[cfg(test)]
    /// Whether `c` holds.
    pub(crate) fn has(&self, c: Condition) -> bool {
        base::loops::lock(&self.0).contains(&c)
    }

    /// Replaces the conditions (the manager after each pass; tests).
    pub(crate) fn set(&self, conditions: Vec<Condition>) {
        *base::loops::lock(&self.0) = conditions;
    }

    /// Admission under pressure (§9.4): None admits, Some(message) rejects with
    /// reason `Evicted`.
    pub(crate) fn admit(&self, pod: &Pod) -> Option<String> {
        helpers::admit(pod, &self.conditions())
    }
}

/// What a pass did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// No threshold to act on.
    Nothing,
    /// The node-level reclaim brought the signal back.
    Reclaimed,
    /// This pod (UID) was evicted.
    Evicted(String),
    /// A threshold was met but no pod could be evicted.
    NoneEvicted,
}

/// The manager's memory between passes.
pub(crate) struct Manager {
    config: Config,
    node: String,
    inputs: Box<dyn Inputs>,
    evictor: Box<dyn Evictor>,
    reclaimers: Vec<(&'static str, Reclaimer)>,
    metrics: Option<Arc<KubeletMetrics>>,
    state: Arc<PressureState>,
    thresholds_met: Vec<Threshold>,
    first_observed: Vec<(Threshold, Instant)>,
    conditions_last_observed: BTreeMap<Condition, Instant>,
    last_observations: Option<Observations>,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("config", &self.config)
            .field("thresholds_met", &self.thresholds_met)
            .finish_non_exhaustive()
    }
}

impl Manager {
    /// A manager for `node` (the name its events are about).
    pub(crate) fn new(
        config: Config,
        node: &str,
        inputs: Box<dyn Inputs>,
        evictor: Box<dyn Evictor>,
    ) -> Self {
        Manager {
            config,
            node: node.to_string(),
            inputs,
            evictor,
            reclaimers: Vec::new(),
            metrics: None,
            state: Arc::default(),
            thresholds_met: Vec::new(),
            first_observed: Vec::new(),
            conditions_last_observed: BTreeMap::new(),
            last_observations: None,
        }
    }

    /// Adds a node-level reclaim step; steps run in the order added (container GC
    /// first, then image GC, as upstream's).
    pub(crate) fn with_reclaimer(mut self, name: &'static str, r: Reclaimer) -> Self {
        self.reclaimers.push((name, r));
        self
    }

    /// Publishes the conditions in `state` (shared with the node status and admission).
    pub(crate) fn with_state(mut self, state: Arc<PressureState>) -> Self {
        self.state = state;
        self
    }

    /// Counts evictions in `kubelet_evictions`.
    pub(crate) fn with_metrics(mut self, m: Arc<KubeletMetrics>) -> Self {
        self.metrics = Some(m);
        self
    }

    #[cfg(test)]
    /// The conditions it publishes.
    pub(crate) fn state(&self) -> Arc<PressureState> {
        Arc::clone(&self.state)
    }

    /// One pass (upstream `synchronize`).
    pub(crate) fn tick(&mut self, now: Instant) -> Outcome {
        self.evictor.tick();
        let observations = self.inputs.observe();
        let mut met = helpers::thresholds_met(&self.config.thresholds, &observations, false);
        if !self.thresholds_met.is_empty() {
            let unresolved = helpers::thresholds_met(&self.thresholds_met, &observations, true);
            met = helpers::merge_thresholds(met, unresolved);
        }
        let first_observed = helpers::thresholds_first_observed_at(&met, &self.first_observed, now);
        let current = helpers::node_conditions(&met);
        let last_observed = helpers::node_conditions_last_observed_at(
            &current,
            &self.conditions_last_observed,
            now,
        );
        let conditions = helpers::node_conditions_observed_since(
            &last_observed,
            self.config.pressure_transition_period,
            now,
        );
        let mut act = helpers::thresholds_met_grace_period(&first_observed, now);
        if let Some(last) = &self.last_observations {
            act = helpers::thresholds_updated_stats(act, &observations, last);
        }
        if conditions != self.state.conditions() {
            log::info!(
                "eviction manager: node conditions now {:?}",
                conditions.iter().map(|c| c.name()).collect::<Vec<_>>()
            );
        }
        self.state.set(conditions);
        self.first_observed = first_observed;
        // Forget observation times of conditions past their period.
        self.conditions_last_observed =
            base::sort::map(last_observed.into_iter().filter(|(_, at)| {
                now.saturating_duration_since(*at) < self.config.pressure_transition_period
            }));
        self.thresholds_met = act.clone();
        self.last_observations = Some(observations.clone());

        let pods = self.inputs.active_pods();
        let need_usage = self.config.local_storage_capacity_isolation || !act.is_empty();
        let usage = if need_usage {
            self.inputs.pod_usage(&pods, !act.is_empty())
        } else {
            BTreeMap::new()
        };
        if self.config.local_storage_capacity_isolation {
            if let Some(uid) = self.local_storage_eviction(&pods, &usage) {
                return Outcome::Evicted(uid);
            }
        }
        if act.is_empty() {
            return Outcome::Nothing;
        }
        helpers::sort_by_eviction_priority(&mut act);
        let threshold = act[0].clone();
        let resource = threshold.signal.resource();
        crate::record::node_event(
            &self.node,
            true,
            "EvictionThresholdMet",
            &format!("Attempting to reclaim {resource}"),
        );
        if self.reclaim_node_level(&threshold) {
            return Outcome::Reclaimed;
        }
        let mut candidates: Vec<helpers::Candidate<'_>> = pods
            .iter()
            .map(|p| helpers::Candidate {
                pod: p,
                usage: uid(p).and_then(|u| usage.get(u)),
            })
            .collect();
        helpers::rank(&mut candidates, helpers::Rank::for_signal(threshold.signal));
        for c in candidates {
            if helpers::is_critical_pod(c.pod) {
                log::error!(
                    "eviction manager: cannot evict a critical pod {}",
                    name(c.pod)
                );
                continue;
            }
            let grace = if threshold.is_hard() {
                IMMEDIATE_GRACE
            } else {
                let pod_grace = c
                    .pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
                    .map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(0)));
                pod_grace.map_or(self.config.max_pod_grace_period, |g| {
                    g.min(self.config.max_pod_grace_period)
                })
            };
            let message =
                helpers::eviction_message(threshold.signal, c.pod, c.usage, &act, &observations);
            if self.evict(c.pod, grace, &message, threshold.signal) {
                return Outcome::Evicted(uid(c.pod).unwrap_or_default().to_string());
            }
        }
        log::info!("eviction manager: unable to evict any pods from the node");
        Outcome::NoneEvicted
    }

    /// Evicts the first pod over a local storage limit (upstream
    /// `localStorageEviction`; evicted with grace 0, counted under the signal
    /// `ephemeralpodfs.limit` upstream names them with).
    fn local_storage_eviction(
        &mut self,
        pods: &[Arc<Pod>],
        usage: &BTreeMap<String, PodUsage>,
    ) -> Option<String> {
        for p in pods {
            let Some(u) = uid(p).and_then(|u| usage.get(u)) else {
                continue;
            };
            let Some(message) = helpers::local_storage_violation(p, u) else {
                continue;
            };
            if helpers::is_critical_pod(p) {
                continue;
            }
            if self.evictor.evict(p, Duration::ZERO, &message) {
                crate::record::event(p, None, true, "Evicted", &message);
                if let Some(m) = &self.metrics {
                    m.evictions.inc(["ephemeralpodfs.limit"]);
                }
                return Some(uid(p).unwrap_or_default().to_string());
            }
        }
        None
    }

    /// Runs the reclaim steps for a disk signal, then measures again: true when the
    /// threshold (with its minimum reclaim) is no longer met (upstream
    /// `reclaimNodeLevelResources`).
    fn reclaim_node_level(&mut self, threshold: &Threshold) -> bool {
        if !threshold.signal.is_disk() || self.reclaimers.is_empty() {
            return false;
        }
        for (name, r) in &mut self.reclaimers {
            if let Err(e) = r() {
                log::warn!("eviction manager: {name} failed: {e}");
            }
        }
        let observations = self.inputs.observe();
        let still = helpers::thresholds_met(std::slice::from_ref(threshold), &observations, true);
        if still.is_empty() {
            log::info!(
                "eviction manager: node-level reclaim relieved {}",
                threshold.signal
            );
            return true;
        }
        false
    }

    fn evict(&mut self, pod: &Pod, grace: Duration, message: &str, signal: Signal) -> bool {
        log::info!(
            "eviction manager: evicting pod {} for {signal}: {message}",
            name(pod)
        );
        if !self.evictor.evict(pod, grace, message) {
            log::warn!("eviction manager: eviction of pod {} failed", name(pod));
            return false;
        }
        crate::record::event(pod, None, true, "Evicted", message);
        if let Some(m) = &self.metrics {
            m.evictions.inc([signal.name()]);
        }
        true
    }
}

fn uid(p: &Pod) -> Option<&str> {
    p.metadata.uid.as_deref()
}

fn name(p: &Pod) -> String {
    format!(
        "{}/{}",
        p.metadata.namespace.as_deref().unwrap_or(""),
        p.metadata.name.as_deref().unwrap_or("")
    )
}

#[cfg(test)]
mod tests;
