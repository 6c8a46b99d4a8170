//! Health checks: the runtime's liveness (the `runtime-up` loop, upstream
//! `updateRuntimeUp`), and the set of named checks the healthz endpoints report
//! (`ping`, `syncloop`, `pleg`, `runtime`), each with upstream's wording.
//!
//! Loops that keep failing (a manifest that does not parse, a source that cannot be
//! reached) are not health failures: they are reported as warnings beside the checks,
//! so `/healthz?verbose` names the file and the reason without failing the kubelet.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

use crate::loops::{lock, LoopRegistry};
use crate::pleg::PlegShared;
use crate::runtime::{Runtime, RuntimeError, RuntimeVersion};

/// Upstream's `updateRuntimeUp` period.
pub const RUNTIME_UP_PERIOD: Duration = Duration::from_secs(5);
/// Upstream `maxWaitForContainerRuntime`: the runtime is down after this without an answer.
pub const MAX_WAIT_FOR_RUNTIME: Duration = Duration::from_secs(30);
/// The sync loop is stuck after max(2 × syncFrequency, this) without an iteration.
pub const MIN_SYNC_LOOP_WINDOW: Duration = Duration::from_secs(300);

/// The runtime's liveness, written by the `runtime-up` loop.
#[derive(Debug, Default)]
pub struct RuntimeHealth {
    last_ok: Mutex<Option<Instant>>,
    version: Mutex<Option<RuntimeVersion>>,
}

impl RuntimeHealth {
    /// Err with upstream's wording while the runtime is not known to be up.
    pub fn healthy(&self, now: Instant) -> Result<(), String> {
        match *lock(&self.last_ok) {
            None => Err("container runtime status check may not have completed yet".into()),
            Some(t) if now.saturating_duration_since(t) > MAX_WAIT_FOR_RUNTIME => {
                Err("container runtime is down".into())
            }
            Some(_) => Ok(()),
        }
    }

    /// The runtime's version, once known.
    pub fn version(&self) -> Option<RuntimeVersion> {
        lock(&self.version).clone()
    }

    /// One `runtime-up` tick: asks the runtime for its version. On the transition from
    /// down (or unknown) to up, sends on `up` so the sync loop re-syncs every pod.
    pub fn tick(&self, runtime: &dyn Runtime, up: &Sender<()>) -> Result<(), RuntimeError> {
        let now = Instant::now();
        let was_up = self.healthy(now).is_ok();
        let v = runtime.version()?;
        if !was_up {
            log::info!(
                "container runtime is up: {} {} (API {})",
                v.runtime_name,
                v.runtime_version,
                v.api_version
            );
            let _ = up.try_send(());
        }
        *lock(&self.last_ok) = Some(now);
        *lock(&self.version) = Some(v);
        Ok(())
    }
}

/// The checks behind the healthz endpoints.
#[derive(Debug, Clone)]
pub struct HealthChecks {
    /// Every loop's ticks.
    pub registry: Arc<LoopRegistry>,
    /// The PLEG's relist time.
    pub pleg: Arc<PlegShared>,
    /// The runtime's liveness.
    pub runtime: Arc<RuntimeHealth>,
    /// `syncFrequency`, for the sync-loop window.
    pub sync_frequency: Duration,
}

/// The names of the checks, in the order they are reported.
pub const CHECKS: [&str; 4] = ["ping", "syncloop", "pleg", "runtime"];

impl HealthChecks {
    /// Runs one named check. None if there is no such check.
    pub fn check(&self, name: &str, now: Instant) -> Option<Result<(), String>> {
        Some(match name {
            "ping" => Ok(()),
            "syncloop" => self.sync_loop(now),
            "pleg" => self
                .pleg
                .healthy(now)
                .map_err(|e| format!("PLEG is not healthy: {e}")),
            "runtime" => self.runtime.healthy(now),
            _ => return None,
        })
    }

    /// Upstream's `SyncLoopHealthCheck`.
    fn sync_loop(&self, now: Instant) -> Result<(), String> {
        let window = (self.sync_frequency * 2).max(MIN_SYNC_LOOP_WINDOW);
        let st = self
            .registry
            .get("sync-loop")
            .ok_or_else(|| "sync loop is not running".to_string())?;
        let last = st.last_tick.unwrap_or(st.started);
        if st.finished {
            return Err("sync loop has stopped".into());
        }
        if now.saturating_duration_since(last) > window {
            return Err(format!(
                "sync Loop took longer than expected (last iteration {:?} ago)",
                now.saturating_duration_since(last)
            ));
        }
        Ok(())
    }

    /// Every check's result, in order.
    pub fn all(&self, now: Instant) -> Vec<(&'static str, Result<(), String>)> {
        CHECKS
            .iter()
            .filter_map(|n| self.check(n, now).map(|r| (*n, r)))
            .collect()
    }

    /// Loops whose last tick failed, with the error (e.g. a bad manifest).
    pub fn warnings(&self) -> Vec<(String, String)> {
        self.registry
            .snapshot()
            .into_iter()
            .filter_map(|(name, st)| st.last_error.map(|e| (name, e)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_health_wording() {
        let h = RuntimeHealth::default();
        let now = Instant::now();
        assert_eq!(
            h.healthy(now),
            Err("container runtime status check may not have completed yet".into())
        );
        *lock(&h.last_ok) = Some(now);
        assert!(h.healthy(now + Duration::from_secs(29)).is_ok());
        assert_eq!(
            h.healthy(now + Duration::from_secs(31)),
            Err("container runtime is down".into())
        );
    }
}
