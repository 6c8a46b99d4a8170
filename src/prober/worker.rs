//! One probe of one container, as pure decisions (upstream `pkg/kubelet/prober/worker.go`
//! `doProbe`): whether a due probe runs at all ([`gate`]), and how raw results become
//! published ones through the success and failure thresholds ([`ProbeState::record`]).
//!
//! The `prober` thread owns one [`ProbeState`] per (pod, container, probe type) and
//! resets it whenever a new container instance appears.

use std::time::{Duration, SystemTime};

use runtime::container::{ProbeResult, ProbeType};

/// What the prober knows of the container instance a probe watches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ContainerView {
    /// Runtime ID of the newest instance.
    pub id: String,
    /// Whether it is running.
    pub running: bool,
    /// When it started (None if the runtime does not say).
    pub started_at: Option<SystemTime>,
}

/// The counting state of one probe for one container instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ProbeState {
    /// The last raw result.
    last: ProbeResult,
    /// How many times in a row it came.
    run: u32,
    /// After a published liveness or startup failure the probe waits for a new
    /// container instance (the kill is on its way).
    pub on_hold: bool,
}

impl Default for ProbeState {
    fn default() -> Self {
        ProbeState {
            last: ProbeResult::Unknown,
            run: 0,
            on_hold: false,
        }
    }
}

impl ProbeState {
    /// Counts one raw result; returns the result to publish once `success_threshold`
    /// successes or `failure_threshold` failures came in a row. Unknown (the probe
    /// could not be run) is not counted. A published liveness or startup failure puts
    /// the probe on hold and zeroes the run.
    pub(crate) fn record(
        &mut self,
        ty: ProbeType,
        r: ProbeResult,
        success_threshold: u32,
        failure_threshold: u32,
    ) -> Option<ProbeResult> {
        if r == ProbeResult::Unknown {
            return None;
        }
        if self.last == r {
            self.run = self.run.saturating_add(1);
        } else {
            self.last = r;
            self.run = 1;
        }
        let threshold = match r {
            ProbeResult::Success => success_threshold,
            _ => failure_threshold,
        };
        if self.run < threshold {
            return None;
        }
        if r == ProbeResult::Failure && ty != ProbeType::Readiness {
            self.on_hold = true;
            self.run = 0;
        }
        Some(r)
    }
}

/// What to do with a probe that is due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gate {
    /// Not now (on hold, initial delay, waiting for the startup probe, or done).
    Skip,
    /// The container is not running: publish Failure without probing.
    NotRunning,
    /// Run the probe.
    Run,
}

/// Whether a due probe of `ty` runs against container `c`. `startup_pending` is true
/// when the container has a startup probe that has not succeeded yet. `seen_running`
/// is how long the prober has known this instance running (monotonic): the initial
/// delay is over once either clock says so, so that a wall clock stepped back (a start
/// time in its future) holds probes for the delay at most, not for the step.
pub(crate) fn gate(
    ty: ProbeType,
    c: &ContainerView,
    st: &ProbeState,
    startup_pending: bool,
    initial_delay: Duration,
    now: SystemTime,
    seen_running: Option<Duration>,
) -> Gate {
    if st.on_hold {
        return Gate::Skip;
    }
    if !c.running {
        return Gate::NotRunning;
    }
    if let Some(started) = c.started_at {
        let wall = now.duration_since(started).unwrap_or(Duration::ZERO);
        if wall.max(seen_running.unwrap_or(Duration::ZERO)) < initial_delay {
            return Gate::Skip;
        }
    }
    match ty {
        // Once the startup probe succeeded it has nothing more to say.
        ProbeType::Startup if !startup_pending => Gate::Skip,
        // Liveness and readiness wait for the startup probe.
        ProbeType::Liveness | ProbeType::Readiness if startup_pending => Gate::Skip,
        _ => Gate::Run,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ProbeResult::{Failure as F, Success as S, Unknown as U};

    /// (type, success threshold, failure threshold, raw results, published after each)
    type Case = (
        ProbeType,
        u32,
        u32,
        Vec<ProbeResult>,
        Vec<Option<ProbeResult>>,
    );

    #[test]
    fn thresholds_publish_only_after_consecutive_results() {
        let cases: Vec<Case> = vec![
            (
                ProbeType::Readiness,
                1,
                3,
                vec![S, F, F, F, F, S],
                vec![Some(S), None, None, Some(F), Some(F), Some(S)],
            ),
            (
                ProbeType::Readiness,
                2,
                1,
                vec![S, F, S, S, S],
                vec![None, Some(F), None, Some(S), Some(S)],
            ),
            // A flip resets the run; unknowns are not counted and do not reset it.
            (
                ProbeType::Readiness,
                1,
                2,
                vec![F, S, F, U, F],
                vec![None, Some(S), None, None, Some(F)],
            ),
            // Liveness: the failure is published once, then the probe is on hold.
            (
                ProbeType::Liveness,
                1,
                2,
                vec![S, F, F],
                vec![Some(S), None, Some(F)],
            ),
        ];
        for (ty, st, ft, raw, want) in cases {
            let mut p = ProbeState::default();
            let got: Vec<_> = raw.iter().map(|r| p.record(ty, *r, st, ft)).collect();
            assert_eq!(got, want, "{ty:?} s={st} f={ft} {raw:?}");
        }
    }

    #[test]
    fn liveness_and_startup_failures_hold_the_probe() {
        for ty in [ProbeType::Liveness, ProbeType::Startup] {
            let mut p = ProbeState::default();
            assert_eq!(p.record(ty, F, 1, 1), Some(F));
            assert!(p.on_hold, "{ty:?}");
        }
        let mut p = ProbeState::default();
        p.record(ProbeType::Readiness, F, 1, 1);
        assert!(!p.on_hold, "readiness keeps probing");
    }

    #[test]
    fn gate_orders_hold_running_delay_and_startup() {
        let t = |s| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        let c = |running, started| ContainerView {
            id: "x".into(),
            running,
            started_at: Some(t(started)),
        };
        let held = ProbeState {
            on_hold: true,
            ..Default::default()
        };
        let fresh = ProbeState::default();
        let d = Duration::from_secs(10);
        use ProbeType::*;
        let cases = [
            (Liveness, c(true, 100), &held, false, t(200), Gate::Skip),
            (
                Readiness,
                c(false, 100),
                &fresh,
                false,
                t(200),
                Gate::NotRunning,
            ),
            (Liveness, c(true, 100), &fresh, false, t(105), Gate::Skip),
            (Liveness, c(true, 100), &fresh, false, t(110), Gate::Run),
            (Readiness, c(true, 100), &fresh, true, t(200), Gate::Skip),
            (Liveness, c(true, 100), &fresh, true, t(200), Gate::Skip),
            (Startup, c(true, 100), &fresh, true, t(200), Gate::Run),
            (Startup, c(true, 100), &fresh, false, t(200), Gate::Skip),
        ];
        for (ty, cv, st, pending, now, want) in cases {
            assert_eq!(
                gate(ty, &cv, st, pending, d, now, None),
                want,
                "{ty:?} {cv:?} {now:?}"
            );
        }
        // The wall clock stepped back an hour after the start at 100: the delay is
        // over once the prober has seen the container running for it.
        let back = t(100) - Duration::from_secs(3600);
        let s = Some;
        let secs = Duration::from_secs;
        assert_eq!(
            gate(Liveness, &c(true, 100), &fresh, false, d, back, s(secs(3))),
            Gate::Skip
        );
        assert_eq!(
            gate(Liveness, &c(true, 100), &fresh, false, d, back, s(secs(10))),
            Gate::Run
        );
        assert_eq!(
            gate(Liveness, &c(true, 100), &fresh, false, d, back, None),
            Gate::Skip
        );
    }
}
