//! Health checks: the runtime's liveness (the `runtime-up` loop, upstream
//! `updateRuntimeUp`), and the set of named checks the healthz endpoints report
//! (`ping`, `syncloop`, `pleg`, `runtime`, and `network`: the runtime's network
//! readiness, which the same loop reads), each with upstream's wording.
//!
//! Every periodic loop (one spawned with a period: `src-file`, `src-http`,
//! `runtime-up`, `volume-mgr`, …) is also a check of its own name: it fails when the
//! loop's current tick has run for longer than [`loop_stall_window`], i.e. the loop is
//! blocked inside a tick (a read that never returns) and has stopped doing its job.
//! Loops registered without a period (the sync loop, stream readers, pod workers) may
//! block legitimately and are not judged this way; `pleg` keeps its own upstream check.
//!
//! Loops that keep failing (a manifest that does not parse, a source that cannot be
//! reached) are not health failures: they are reported as warnings beside the checks,
//! so `/healthz?verbose` names the file and the reason without failing the kubelet.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

use crate::pleg::PlegShared;
use base::loops::{lock, LoopRegistry, LoopState};
use base::time::go_duration;
use runtime::{Runtime, RuntimeError};

/// Upstream's `updateRuntimeUp` period.
pub(crate) const RUNTIME_UP_PERIOD: Duration = Duration::from_secs(5);
/// Upstream `maxWaitForContainerRuntime`: the runtime is down after this without an answer.
pub(crate) const MAX_WAIT_FOR_RUNTIME: Duration = Duration::from_secs(30);
/// The sync loop is stuck after max(2 × syncFrequency, this) without an iteration.
pub(crate) const MIN_SYNC_LOOP_WINDOW: Duration = Duration::from_secs(300);

/// A periodic loop is stuck when one tick has run for this many periods…
pub(crate) const LOOP_STALL_PERIODS: u32 = 3;
/// …and for at least this long. Every outside call a tick makes has a timeout of 30 s
/// or less (Docker calls, a URL 10 s, etcd 10 s), so a tick running for two minutes is
/// blocked, not slow; the floor keeps 1 s loops (PLEG-like relists on a busy Docker)
/// from being called stuck by a few slow calls in a row.
pub(crate) const MIN_LOOP_STALL_WINDOW: Duration = Duration::from_secs(120);
/// A pod worker is stuck when one job (a pod's sync or kill hand-over) has held it
/// this long. A sync makes only runtime calls, each with a timeout of 30 s or less,
/// a few per container: two minutes is blocked, not slow.
pub(crate) const POD_WORKER_STALL: Duration = Duration::from_secs(120);
/// Pod workers are named `<this>N`.
const POD_WORKER_PREFIX: &str = "pod-worker-";

/// The first tick may do start-up work (the first list of every container on a
/// loaded node, a runtime still starting): it gets the sync loop's window.
pub(crate) const FIRST_TICK_STALL_WINDOW: Duration = MIN_SYNC_LOOP_WINDOW;

/// How long one tick of a loop with `period` may run before the loop is unhealthy:
/// max(3 × period, 2 min), and at least 5 min for the first tick.
pub(crate) fn loop_stall_window(period: Duration, first_tick: bool) -> Duration {
    let window = period
        .saturating_mul(LOOP_STALL_PERIODS)
        .max(MIN_LOOP_STALL_WINDOW);
    if first_tick {
        window.max(FIRST_TICK_STALL_WINDOW)
    } else {
        window
    }
}

/// The stall check of one loop: Err (upstream's PLEG wording) when its current tick
/// has run longer than its window. Loops without a period, and finished ones (shutdown)
/// always pass.
pub(crate) fn loop_stall(name: &str, st: &LoopState, now: Instant) -> Result<(), String> {
    let (Some(period), Some(since)) = (st.period, st.busy_since) else {
        return Ok(());
    };
    if st.finished {
        return Ok(());
    }
    let threshold = loop_stall_window(period, st.ticks == 0);
    let busy = now.saturating_duration_since(since);
    if busy > threshold {
        return Err(format!(
            "{name} was last seen active {} ago; threshold is {}",
            go_duration(busy),
            go_duration(threshold)
        ));
    }
    Ok(())
}

/// The check of one pod worker: Err when its current job has held it longer than
/// [`POD_WORKER_STALL`]. An idle or finished worker passes.
pub(crate) fn worker_stall(name: &str, st: &LoopState, now: Instant) -> Result<(), String> {
    let Some(since) = st.busy_since.filter(|_| !st.finished) else {
        return Ok(());
    };
    let busy = now.saturating_duration_since(since);
    if busy > POD_WORKER_STALL {
        return Err(format!(
            "{name} has been on one pod's work for {}; threshold is {}",
            go_duration(busy),
            go_duration(POD_WORKER_STALL)
        ));
    }
    Ok(())
}

/// Whether a loop's health is judged as a pod worker's.
fn is_pod_worker(name: &str) -> bool {
    name.strip_prefix(POD_WORKER_PREFIX)
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The runtime's liveness, written by the `runtime-up` loop.
#[derive(Debug, Default)]
pub(crate) struct RuntimeHealth {
    last_ok: Mutex<Option<Instant>>,
}

impl RuntimeHealth {
    /// Err with upstream's wording while the runtime is not known to be up.
    pub(crate) fn healthy(&self, now: Instant) -> Result<(), String> {
        match *lock(&self.last_ok) {
            None => Err("container runtime status check may not have completed yet".into()),
            Some(t) if now.saturating_duration_since(t) > MAX_WAIT_FOR_RUNTIME => {
                Err("container runtime is down".into())
            }
            Some(_) => Ok(()),
        }
    }

    /// One `runtime-up` tick: asks the runtime for its version. On the transition from
    /// down (or unknown) to up, sends on `up` so the sync loop re-syncs every pod.
    pub(crate) fn tick(&self, runtime: &dyn Runtime, up: &Sender<()>) -> Result<(), RuntimeError> {
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
        Ok(())
    }
}

/// Upstream's `networkError` before the first status: the node is not ready until the
/// runtime's network has been seen.
const NETWORK_UNKNOWN: &str = "network state unknown";

/// How often a ready network is asked again (it changes rarely; a bridge taken down
/// shows within 30 s). While it is not ready, or unknown (Docker down at start), it is
/// asked every [`RUNTIME_UP_PERIOD`], so the node turns Ready within 5 s of Docker.
pub(crate) const NET_STATUS_PERIOD: Duration = Duration::from_secs(30);

/// The runtime's network readiness, written by the `runtime-up` loop (upstream's
/// `runtimeState.networkError`, set from CRI `Status`'s `NetworkReady`).
#[derive(Debug, Default)]
pub(crate) struct NetworkHealth {
    error: Mutex<Option<Result<(), String>>>,
    /// When the network was last seen ready.
    ready_at: Mutex<Option<Instant>>,
}

impl NetworkHealth {
    /// Err with upstream's wording while pods cannot get a network.
    pub(crate) fn healthy(&self) -> Result<(), String> {
        lock(&self.error)
            .clone()
            .unwrap_or_else(|| Err(NETWORK_UNKNOWN.into()))
    }

    /// One network check of the `runtime-up` loop. A runtime that does not answer leaves the last state
    /// (the `runtime` check reports it), as upstream's `updateRuntimeUp`.
    pub(crate) fn tick(&self, runtime: &dyn Runtime) -> Result<(), RuntimeError> {
        let now = Instant::now();
        let fresh = lock(&self.ready_at)
            .is_some_and(|at| now.saturating_duration_since(at) < NET_STATUS_PERIOD);
        if fresh {
            return Ok(());
        }
        let st = runtime.network_status()?;
        *lock(&self.ready_at) = st.ready.then_some(now);
        let state = if st.ready {
            Ok(())
        } else {
            Err(format!(
                "container runtime network not ready: NetworkReady=false reason:{} message:{}",
                st.reason, st.message
            ))
        };
        let before = lock(&self.error).replace(state.clone());
        if before.as_ref() != Some(&state) {
            match &state {
                Ok(()) => log::info!("container runtime network is ready"),
                Err(e) => log::warn!("{e}"),
            }
        }
        Ok(())
    }
}

/// The checks behind the healthz endpoints.
#[derive(Debug, Clone)]
pub(crate) struct HealthChecks {
    /// Every loop's ticks.
    pub registry: Arc<LoopRegistry>,
    /// The PLEG's relist time.
    pub pleg: Arc<PlegShared>,
    /// The runtime's liveness.
    pub runtime: Arc<RuntimeHealth>,
    /// The runtime's network readiness.
    pub network: Arc<NetworkHealth>,
    /// `syncFrequency`, for the sync-loop window.
    pub sync_frequency: Duration,
    /// What the node lacks that is no health failure (a kernel without the memory
    /// cgroup controller): warnings beside the loops' in `/healthz?verbose`.
    pub node_warnings: Vec<(String, String)>,
}

/// The names of the checks, in the order they are reported.
pub(crate) const CHECKS: [&str; 5] = ["ping", "syncloop", "pleg", "runtime", "network"];

impl HealthChecks {
    /// Runs one named check (a fixed one, or a periodic loop's stall check). None if
    /// there is no such check.
    pub(crate) fn check(&self, name: &str, now: Instant) -> Option<Result<(), String>> {
        Some(match name {
            "ping" => Ok(()),
            "syncloop" => self.sync_loop(now),
            "pleg" => self
                .pleg
                .healthy(now)
                .map_err(|e| format!("PLEG is not healthy: {e}")),
            "runtime" => self.runtime.healthy(now),
            "network" => self.network.healthy(),
            _ => {
                let st = self.registry.get(name)?;
                if is_pod_worker(name) {
                    return Some(worker_stall(name, &st, now));
                }
                st.period?;
                loop_stall(name, &st, now)
            }
        })
    }

    /// What the systemd watchdog pings for: the sync loop's and the PLEG's checks, as
    /// `/healthz` runs them. The runtime's and the network's are left out: a restart
    /// cannot bring Docker or its bridge back.
    pub(crate) fn watchdog(&self, now: Instant) -> Result<(), String> {
        for name in ["syncloop", "pleg"] {
            if let Some(Err(e)) = self.check(name, now) {
                return Err(format!("{name}: {e}"));
            }
        }
        Ok(())
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

    /// Every check's result, in order: the fixed checks, then one per periodic loop
    /// and per pod worker alive (by name; a loop named like a fixed check is covered by
    /// that check).
    pub(crate) fn all(&self, now: Instant) -> Vec<(String, Result<(), String>)> {
        let fixed = CHECKS
            .iter()
            .filter_map(|n| self.check(n, now).map(|r| (n.to_string(), r)));
        let loops = self
            .registry
            .snapshot()
            .into_iter()
            .filter(|(name, st)| {
                (st.period.is_some() || is_pod_worker(name)) && !CHECKS.contains(&name.as_str())
            })
            .map(|(name, st)| {
                let r = if is_pod_worker(&name) {
                    worker_stall(&name, &st, now)
                } else {
                    loop_stall(&name, &st, now)
                };
                (name, r)
            })
            .collect::<Vec<_>>();
        fixed.chain(loops).collect()
    }

    /// Loops whose last tick failed, with the error (e.g. a bad manifest).
    pub(crate) fn warnings(&self) -> Vec<(String, String)> {
        let mut out = self.node_warnings.clone();
        out.extend(
            self.registry
                .snapshot()
                .into_iter()
                .filter_map(|(name, st)| st.last_error.map(|e| (name, e))),
        );
        out
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

    fn state(period: Option<Duration>, ticks: u64, busy_since: Option<Instant>) -> LoopState {
        let t0 = busy_since.unwrap_or_else(Instant::now);
        LoopState {
            period,
            started: t0,
            last_tick: Some(t0),
            last_tick_wall: None,
            last_duration: None,
            busy_since,
            last_error: None,
            ticks,
            errors: 0,
            panics: 0,
            finished: false,
        }
    }

    #[test]
    fn healthz_lists_periodic_loops_and_fails_the_one_blocked_in_a_tick() {
        use base::loops::{shutdown_channel, Loops, Periodic};
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop);
        let (release_tx, release_rx) = crossbeam_channel::bounded::<()>(0);
        let spec = |name: &str| Periodic {
            name: name.into(),
            period: Duration::from_secs(1),
            wake: None,
        };
        // One tick that blocks until released, as src-file did on a FIFO.
        loops
            .spawn_periodic(spec("blocked"), move || {
                let _ = release_rx.recv();
                Ok::<(), std::io::Error>(())
            })
            .expect("spawn");
        loops
            .spawn_periodic(spec("fine"), || Ok::<(), std::io::Error>(()))
            .expect("spawn");
        loops
            .spawn(
                "events",
                |stop, _| while !stop.sleep(Duration::from_millis(5)) {},
            )
            .expect("spawn");
        let checks = HealthChecks {
            registry: loops.registry(),
            pleg: Arc::new(PlegShared::default()),
            runtime: Arc::new(RuntimeHealth::default()),
            network: Arc::new(NetworkHealth::default()),
            sync_frequency: Duration::from_secs(1),
            node_warnings: Vec::new(),
        };
        let until = Instant::now() + Duration::from_secs(10);
        while checks
            .registry
            .get("blocked")
            .is_none_or(|s| s.busy_since.is_none())
            || checks.registry.get("fine").is_none_or(|s| s.ticks == 0)
        {
            assert!(Instant::now() < until, "loops never ticked");
            std::thread::sleep(Duration::from_millis(2));
        }
        let later = Instant::now() + Duration::from_secs(301);
        let all = checks.all(later);
        let names: Vec<_> = all.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["ping", "syncloop", "pleg", "runtime", "network", "blocked", "fine"]
        );
        let blocked = checks.check("blocked", later).expect("a check");
        assert!(
            blocked
                .as_ref()
                .is_err_and(|e| e.starts_with("blocked was last seen active ")),
            "{blocked:?}"
        );
        assert_eq!(all[5].1, blocked);
        assert_eq!(checks.check("fine", later), Some(Ok(())));
        assert_eq!(checks.check("events", later), None, "no period: no check");
        // No sync loop and no relist: the systemd watchdog is not fed.
        let wd = checks.watchdog(Instant::now());
        assert!(
            wd.as_ref().is_err_and(|e| e.starts_with("syncloop: ")),
            "{wd:?}"
        );
        drop(release_tx);
        shutdown.trigger();
        assert!(loops.join_all(Duration::from_secs(10)).is_empty());
    }

    #[test]
    fn the_watchdog_check_fails_with_a_wedged_sync_loop_or_pleg() {
        use base::loops::{shutdown_channel, Loops};
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop);
        let (ticked_tx, ticked_rx) = crossbeam_channel::bounded(1);
        // A sync loop that iterates once and then waits for shutdown.
        loops
            .spawn("sync-loop", move |stop, handle| {
                let began = handle.begin_tick();
                handle.end_tick(began, None);
                let _ = ticked_tx.send(());
                while !stop.sleep(Duration::from_millis(5)) {}
            })
            .expect("spawn");
        ticked_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("ticked");
        let checks = HealthChecks {
            registry: loops.registry(),
            pleg: Arc::new(PlegShared::default()),
            runtime: Arc::new(RuntimeHealth::default()),
            network: Arc::new(NetworkHealth::default()),
            sync_frequency: Duration::from_secs(1),
            node_warnings: Vec::new(),
        };
        let now = Instant::now();
        // The sync loop is fine; a PLEG that never relisted is not.
        assert_eq!(
            checks.watchdog(now),
            Err("pleg: PLEG is not healthy: pleg has yet to be successful".into())
        );
        // Five minutes without a sync-loop iteration: wedged, whatever the PLEG says.
        let wd = checks.watchdog(now + Duration::from_secs(301));
        assert!(
            wd.as_ref()
                .is_err_and(|e| e.starts_with("syncloop: sync Loop took longer than expected")),
            "{wd:?}"
        );
        shutdown.trigger();
        assert!(loops.join_all(Duration::from_secs(10)).is_empty());
    }

    #[test]
    fn network_readiness_has_upstreams_wording_and_survives_a_runtime_error() {
        use runtime::fake::{FakeClock, FakeRuntime, Fault, Op};
        use runtime::NetworkStatus;
        let rt = FakeRuntime::new(FakeClock::default());
        let h = NetworkHealth::default();
        assert_eq!(h.healthy(), Err("network state unknown".into()));
        h.tick(&rt).expect("tick");
        assert_eq!(h.healthy(), Ok(()));
        h.tick(&rt).expect("tick");
        assert_eq!(
            rt.count(Op::NetworkStatus),
            1,
            "a ready network is asked every 30 s"
        );
        *lock(&h.ready_at) = None;
        rt.set_network_status(NetworkStatus {
            ready: false,
            reason: "NetworkPluginNotReady".into(),
            message: "docker: network plugin is not ready: the bridge network does not exist"
                .into(),
        });
        h.tick(&rt).expect("tick");
        assert_eq!(
            h.healthy(),
            Err("container runtime network not ready: NetworkReady=false \
                 reason:NetworkPluginNotReady message:docker: network plugin is not ready: \
                 the bridge network does not exist"
                .into())
        );
        rt.fail(Op::NetworkStatus, 1, Fault::Unavailable);
        assert!(h.tick(&rt).is_err());
        assert!(h.healthy().is_err(), "the last state is kept");
    }

    #[test]
    fn loop_stall_window_is_three_periods_with_a_floor_and_a_longer_first_tick() {
        let s = Duration::from_secs;
        assert_eq!(loop_stall_window(s(1), false), s(120), "the floor");
        assert_eq!(loop_stall_window(s(20), false), s(120));
        assert_eq!(loop_stall_window(s(60), false), s(180), "3 periods");
        assert_eq!(loop_stall_window(s(300), false), s(900));
        assert_eq!(loop_stall_window(s(20), true), s(300), "first tick");
        assert_eq!(loop_stall_window(s(300), true), s(900));
        assert_eq!(loop_stall_window(Duration::MAX, false), Duration::MAX);
    }

    #[test]
    fn a_periodic_loop_stuck_in_a_tick_fails_its_check() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let period = Some(s(20));
        // In its 10th tick for 2 min: at the threshold, not over it.
        let st = state(period, 9, Some(t0));
        assert_eq!(loop_stall("src-file", &st, t0 + s(120)), Ok(()));
        assert_eq!(
            loop_stall("src-file", &st, t0 + s(121)),
            Err("src-file was last seen active 2m1s ago; threshold is 2m0s".into())
        );
        // Between ticks (sleeping out its period): never stuck, however long ago.
        let idle = state(period, 9, None);
        assert_eq!(loop_stall("src-file", &idle, t0 + s(3600)), Ok(()));
        // A slow first tick gets 5 min.
        let first = state(period, 0, Some(t0));
        assert_eq!(loop_stall("src-file", &first, t0 + s(200)), Ok(()));
        assert!(loop_stall("src-file", &first, t0 + s(301)).is_err());
        // Event loops (no period) may block for good; finished loops are shut down.
        let event = state(None, 3, Some(t0));
        assert_eq!(loop_stall("src-etcd", &event, t0 + s(3600)), Ok(()));
        let done = LoopState {
            finished: true,
            ..state(period, 9, Some(t0))
        };
        assert_eq!(loop_stall("src-file", &done, t0 + s(3600)), Ok(()));
    }

    #[test]
    fn a_pod_worker_held_by_one_job_past_the_bound_fails_a_check_of_its_name() {
        use base::loops::{shutdown_channel, Loops, Pool, PoolSpec};
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop);
        let (release_tx, release_rx) = crossbeam_channel::bounded::<()>(0);
        let (job_tx, job_rx) = crossbeam_channel::bounded::<()>(1);
        // A pool named as the pod workers, whose one job blocks until released.
        let pool = Pool::new(
            &loops,
            PoolSpec {
                prefix: "pod-worker".into(),
                max: 2,
                idle: Duration::from_secs(60),
            },
            job_rx,
            move |(), _| {
                let _ = release_rx.recv();
            },
        );
        job_tx.send(()).expect("queue");
        pool.kick();
        let checks = HealthChecks {
            registry: loops.registry(),
            pleg: Arc::new(PlegShared::default()),
            runtime: Arc::new(RuntimeHealth::default()),
            network: Arc::new(NetworkHealth::default()),
            sync_frequency: Duration::from_secs(1),
            node_warnings: Vec::new(),
        };
        let until = Instant::now() + Duration::from_secs(10);
        while checks
            .registry
            .get("pod-worker-0")
            .is_none_or(|s| s.busy_since.is_none())
        {
            assert!(Instant::now() < until, "the worker never took its job");
            std::thread::sleep(Duration::from_millis(2));
        }
        let now = Instant::now();
        assert_eq!(checks.check("pod-worker-0", now), Some(Ok(())));
        let later = now + POD_WORKER_STALL + Duration::from_secs(1);
        let stuck = checks.check("pod-worker-0", later).expect("a check");
        assert!(
            stuck
                .as_ref()
                .is_err_and(|e| e.starts_with("pod-worker-0 has been on one pod's work for ")),
            "{stuck:?}"
        );
        let all = checks.all(later);
        assert!(
            all.contains(&("pod-worker-0".to_string(), stuck)),
            "{all:?}"
        );
        assert_eq!(checks.check("pod-worker-1", later), None, "not started");
        // Released, the worker is idle and passes.
        release_tx.send(()).expect("release");
        while checks
            .registry
            .get("pod-worker-0")
            .is_some_and(|s| s.busy_since.is_some())
        {
            assert!(Instant::now() < until, "the job never ended");
            std::thread::sleep(Duration::from_millis(2));
        }
        assert_eq!(checks.check("pod-worker-0", later), Some(Ok(())));
        shutdown.trigger();
        assert!(loops.join_all(Duration::from_secs(10)).is_empty());
    }
}
