//! The probe results the rest of the kubelet reads (upstream
//! `pkg/kubelet/prober/results/results_manager.go`): the last published result of each
//! probe, keyed by container ID, so a new container instance starts with no result and
//! a stale one cannot leak onto it.
//!
//! The `prober` thread writes; pod workers read it while computing pod actions (a
//! liveness or startup failure kills the container) and status (`ready`, `started`).
//! It lives below the prober, beside the other state a sync reads, so that the
//! runtime manager and the status code read it without depending on the prober.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::container::{ProbeResult, ProbeType};
use base::loops::lock;

/// Published results by (container ID, probe type). One small lock.
#[derive(Debug, Default)]
pub struct ResultsCache {
    inner: Mutex<HashMap<(String, ProbeType), ProbeResult>>,
}

impl ResultsCache {
    /// The published result of one probe of a container, if any.
    pub fn get(&self, container_id: &str, ty: ProbeType) -> Option<ProbeResult> {
        lock(&self.inner)
            .get(&(container_id.to_string(), ty))
            .copied()
    }

    /// Publishes a result; true when it differs from the one before.
    pub fn set(&self, container_id: &str, ty: ProbeType, r: ProbeResult) -> bool {
        lock(&self.inner).insert((container_id.to_string(), ty), r) != Some(r)
    }

    /// Forgets one probe of a container.
    pub fn remove(&self, container_id: &str, ty: ProbeType) {
        lock(&self.inner).remove(&(container_id.to_string(), ty));
    }

    /// The probe that condemned a container: its liveness or startup probe failed
    /// (upstream's `livenessManager`/`startupManager` lookups in `computePodActions`).
    pub fn failed_probe(&self, container_id: &str) -> Option<ProbeType> {
        let m = lock(&self.inner);
        [ProbeType::Liveness, ProbeType::Startup]
            .into_iter()
            .find(|ty| m.get(&(container_id.to_string(), *ty)) == Some(&ProbeResult::Failure))
    }

    /// Number of results held (for tests and debugging).
    pub fn len(&self) -> usize {
        lock(&self.inner).len()
    }

    /// True when no result is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_reports_changes_and_failed_probe_finds_liveness_or_startup() {
        let c = ResultsCache::default();
        assert!(c.set("a", ProbeType::Readiness, ProbeResult::Failure));
        assert!(!c.set("a", ProbeType::Readiness, ProbeResult::Failure));
        assert!(c.set("a", ProbeType::Readiness, ProbeResult::Success));
        assert_eq!(c.failed_probe("a"), None, "readiness never kills");
        c.set("a", ProbeType::Startup, ProbeResult::Failure);
        assert_eq!(c.failed_probe("a"), Some(ProbeType::Startup));
        c.set("a", ProbeType::Liveness, ProbeResult::Failure);
        assert_eq!(c.failed_probe("a"), Some(ProbeType::Liveness));
        assert_eq!(c.failed_probe("b"), None, "keyed by container ID");
        c.remove("a", ProbeType::Liveness);
        c.remove("a", ProbeType::Startup);
        assert_eq!(c.failed_probe("a"), None);
        assert_eq!(c.len(), 1);
    }
}
