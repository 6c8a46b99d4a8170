//! Resource usage statistics (upstream `pkg/kubelet/stats` and
//! `pkg/kubelet/server/stats`): the raw readers of cgroupfs and `/proc` ([`cgroupfs`],
//! shared with the eviction manager), the disk usage scanner ([`fsscan`]), the `stats`
//! loop that samples everything every 10 s ([`analyzer`]), the `/stats/summary`
//! document ([`types`]) and the `/metrics/resource` and `/metrics/cadvisor` texts
//! ([`metrics`]). The ports serve the latest snapshot; a request samples nothing.

pub(crate) mod analyzer;
pub(crate) mod cgroupfs;
pub(crate) mod fsscan;
pub(crate) mod metrics;
pub(crate) mod openfiles;
pub(crate) mod summary;
pub(crate) mod types;

use std::sync::Arc;

pub(crate) use analyzer::{Analyzer, StatsConfig, StatsProvider, DEMAND_WAIT, STATS_PERIOD};

use base::loops::{Loops, Periodic, SpawnError};
use runtime::Runtime;

/// Starts the `stats` loop; returns the provider the ports read.
pub(crate) fn start(
    loops: &Loops,
    cfg: StatsConfig,
    runtime: Arc<dyn Runtime>,
) -> Result<Arc<StatsProvider>, SpawnError> {
    let provider = Arc::new(StatsProvider::default());
    if !analyzer::cgroups_present(&cfg.cgroups) {
        log::warn!(
            "stats: no cgroup hierarchy at {}: /stats/summary will have no pod figures",
            cfg.cgroups.root().display()
        );
    }
    // A reader of a node nobody read for a while runs a tick at once.
    let (wake, woken) = crossbeam_channel::bounded(1);
    provider.set_wake(wake);
    let mut analyzer = Analyzer::new(cfg, runtime, provider.clone());
    loops.spawn_periodic(
        Periodic {
            name: "stats".into(),
            period: STATS_PERIOD,
            wake: Some(woken),
        },
        move || analyzer.tick(),
    )?;
    Ok(provider)
}

/// `/stats/summary`'s body (`?only_cpu_and_memory=true`: the reduced form).
pub(crate) fn summary_json(provider: &StatsProvider, only_cpu_and_memory: bool) -> Vec<u8> {
    let snap = provider.demand(DEMAND_WAIT);
    let body = if only_cpu_and_memory {
        serde_json::to_vec(&summary::cpu_and_memory_only(&snap.summary))
    } else {
        serde_json::to_vec(&snap.summary)
    };
    body.unwrap_or_default()
}
