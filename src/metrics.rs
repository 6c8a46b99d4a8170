//! The kubelet's `/metrics` families: upstream's names, types, labels, buckets and
//! help (`pkg/kubelet/metrics/metrics.go`, `pkg/kubelet/server/metrics/metrics.go`)
//! for what rkubelet has, the process collector's figures, and rkubelet's own
//! per-loop figures from the [`LoopRegistry`].
//!
//! One [`KubeletMetrics`] is made by the kubelet's wiring and shared (an `Arc`) by the
//! components that record into it: the PLEG (relist histograms, running pods and
//! containers), the pod workers (worker durations, restarted pods, containers per
//! pod), the syncer (pod start duration), the runtime manager (started pods and
//! containers), the instrumented runtime (runtime operations), the sync loop (desired
//! pods) and the servers (HTTP requests). Where each is observed is said at its field.

use std::sync::Arc;
use std::time::Instant;

use base::loops::LoopRegistry;
use base::metrics::process::{self, ProcessFamilies};
use base::metrics::{
    exponential_buckets, Collector, Counter, CounterVec, Desc, Gauge, GaugeVec, Histogram,
    HistogramVec, DEF_BUCKETS,
};

/// Upstream `PodStatusSyncDuration`'s buckets.
pub(crate) const POD_STATUS_SYNC_BUCKETS: &[f64] =
    &[0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 20.0, 30.0, 45.0, 60.0];
/// Upstream `podStartupDurationBuckets`.
pub(crate) const POD_STARTUP_BUCKETS: &[f64] = &[
    0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 20.0, 30.0, 45.0, 60.0, 120.0, 180.0, 240.0,
    300.0, 360.0, 480.0, 600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0,
];

/// `container_type` of an app container.
pub const CONTAINER: &str = "container";
/// `container_type` of an init container (sidecars included, as upstream).
pub(crate) const INIT_CONTAINER: &str = "init_container";

/// Every family of the kubelet's `/metrics`.
#[derive(Debug)]
pub struct KubeletMetrics {
    /// `kubelet_node_name{node}` = 1; set once at start.
    pub node_name: GaugeVec<1>,
    /// Pods with a running sandbox, set by each PLEG relist (upstream
    /// `updateRunningPodAndContainerMetrics`).
    pub running_pods: Gauge,
    /// Containers (sandboxes not counted) by state, set by each PLEG relist.
    pub running_containers: GaugeVec<1>,
    /// Pods the sources ask for, by `static` ("true" unless from the API server); set
    /// by the sync loop whenever it publishes its pods.
    pub desired_pods: GaugeVec<1>,
    /// From a pod's `config.seen` to the first sync that finds it Running (the syncer).
    pub pod_start_duration: Histogram,
    /// From the status manager seeing a pod's status change to the API server having
    /// it (the status manager).
    pub pod_status_sync_duration: Histogram,
    /// From a pod's work being handed to the pod workers to its end, by
    /// `operation_type` (`create`, `update`, `sync`, `kill`).
    pub pod_worker_duration: HistogramVec<1>,
    /// Containers of a pod when the pod workers first see it.
    pub containers_per_pod: Histogram,
    /// The time one relist took, failed ones included (the PLEG).
    pub pleg_relist_duration: Histogram,
    /// From the last successful relist's start to this relist's start.
    pub pleg_relist_interval: Histogram,
    /// Unix time (whole seconds) of the last successful relist's start.
    pub pleg_last_seen: Gauge,
    /// PLEG events dropped because the sync loop's channel was full. Upstream calls
    /// it `kubelet_pleg_discard_events`, a counter without `_total`, which
    /// `promtool check metrics` refuses; exported under rkubelet's prefix with the
    /// suffix instead.
    pub pleg_discard_events: Counter,
    /// Event-stream connections the evented PLEG opened (upstream's
    /// `kubelet_evented_pleg_connection_success_count`, with the `_total` suffix).
    pub evented_pleg_conn: Counter,
    /// Event-stream connections that failed or broke (upstream's
    /// `kubelet_evented_pleg_connection_error_count`, with the `_total` suffix).
    pub evented_pleg_conn_err: Counter,
    /// From an event's time at the runtime to the PLEG reading it.
    pub evented_pleg_conn_latency: Histogram,
    /// Events not written to the API server, by why (`queue_full`,
    /// `retries_exhausted`, `refused`); rkubelet's own.
    pub events_dropped: CounterVec<1>,
    /// Runtime calls by `operation_type` (the instrumented runtime).
    pub runtime_operations: CounterVec<1>,
    /// Runtime call durations by `operation_type`.
    pub runtime_operations_duration: HistogramVec<1>,
    /// Failed runtime calls by `operation_type`.
    pub runtime_operations_errors: CounterVec<1>,
    /// Sandboxes the runtime manager tried to create.
    pub started_pods: Counter,
    /// Sandboxes that failed to be created or started.
    pub started_pods_errors: Counter,
    /// Containers the runtime manager tried to start, by `container_type`.
    pub started_containers: CounterVec<1>,
    /// Container starts that failed, by `code` (the waiting reason) and
    /// `container_type`.
    pub started_containers_errors: CounterVec<2>,
    /// Pods deleted and created again with the same UID while the kubelet still held
    /// them (the pod workers), by `static`.
    pub restarted_pods: CounterVec<1>,
    /// Pods evicted by the eviction manager, by `eviction_signal`. Upstream calls it
    /// `kubelet_evictions`, a counter without `_total`, which `promtool check metrics`
    /// refuses; exported under rkubelet's prefix with the suffix, as the PLEG's.
    pub evictions: CounterVec<1>,
    /// HTTP requests by `long_running`, `method`, `path`, `server_type` (counted when
    /// they arrive, before authentication, as upstream's `ServeHTTP`).
    pub http_requests: CounterVec<4>,
    /// HTTP handler durations, same labels.
    pub http_requests_duration: HistogramVec<4>,
    /// HTTP requests inside a handler, same labels.
    pub http_inflight: GaugeVec<4>,
    loops: Arc<LoopRegistry>,
}

/// The HTTP metrics' label names, sorted as the text format prints them.
pub(crate) const HTTP_LABELS: [&str; 4] = ["long_running", "method", "path", "server_type"];

impl KubeletMetrics {
    /// The families, empty, with the per-loop figures read from `loops` at scrape.
    pub fn new(loops: Arc<LoopRegistry>) -> Self {
        let a = Desc::alpha;
        KubeletMetrics {
            node_name: GaugeVec::new(
                a(
                    "kubelet_node_name",
                    "The node's name. The count is always 1.",
                ),
                ["node"],
            ),
            running_pods: Gauge::new(
                a(
                    "kubelet_running_pods",
                    "Number of pods that have a running pod sandbox",
                ),
                [],
            ),
            running_containers: GaugeVec::new(
                a(
                    "kubelet_running_containers",
                    "Number of containers currently running",
                ),
                ["container_state"],
            ),
            desired_pods: GaugeVec::new(
                a(
                    "kubelet_desired_pods",
                    "The number of pods the kubelet is being instructed to run. static is \
                     true if the pod is not from the apiserver.",
                ),
                ["static"],
            ),
            pod_start_duration: Histogram::new(
                a(
                    "kubelet_pod_start_duration_seconds",
                    "Duration in seconds from kubelet seeing a pod for the first time to \
                     the pod starting to run",
                ),
                [],
                POD_STARTUP_BUCKETS,
            ),
            pod_status_sync_duration: Histogram::new(
                a(
                    "kubelet_pod_status_sync_duration_seconds",
                    "Duration in seconds to sync a pod status update. Measures time from \
                     detection of a change to pod status until the API is successfully \
                     updated for that pod, even if multiple intevening changes to pod \
                     status occur.",
                ),
                [],
                POD_STATUS_SYNC_BUCKETS,
            ),
            pod_worker_duration: HistogramVec::new(
                a(
                    "kubelet_pod_worker_duration_seconds",
                    "Duration in seconds to sync a single pod. Broken down by operation \
                     type: create, update, or sync",
                ),
                ["operation_type"],
                DEF_BUCKETS,
            ),
            containers_per_pod: Histogram::new(
                a(
                    "kubelet_containers_per_pod_count",
                    "The number of containers per pod.",
                ),
                [],
                &exponential_buckets(1.0, 2.0, 5),
            ),
            pleg_relist_duration: Histogram::new(
                a(
                    "kubelet_pleg_relist_duration_seconds",
                    "Duration in seconds for relisting pods in PLEG.",
                ),
                [],
                DEF_BUCKETS,
            ),
            pleg_relist_interval: Histogram::new(
                a(
                    "kubelet_pleg_relist_interval_seconds",
                    "Interval in seconds between relisting in PLEG.",
                ),
                [],
                DEF_BUCKETS,
            ),
            pleg_last_seen: Gauge::new(
                a(
                    "kubelet_pleg_last_seen_seconds",
                    "Timestamp in seconds when PLEG was last seen active.",
                ),
                [],
            ),
            pleg_discard_events: Counter::new(
                Desc::raw(
                    "rkubelet_pleg_discard_events_total",
                    "The number of discard events in PLEG (upstream's \
                     kubelet_pleg_discard_events).",
                ),
                [],
            ),
            evented_pleg_conn: Counter::new(
                Desc::raw(
                    "rkubelet_evented_pleg_connection_success_total",
                    "The number of times the evented PLEG opened the runtime's event \
                     stream (upstream's kubelet_evented_pleg_connection_success_count).",
                ),
                [],
            ),
            evented_pleg_conn_err: Counter::new(
                Desc::raw(
                    "rkubelet_evented_pleg_connection_error_total",
                    "The number of errors encountered during the establishment of \
                     streaming connection with the runtime (upstream's \
                     kubelet_evented_pleg_connection_error_count).",
                ),
                [],
            ),
            evented_pleg_conn_latency: Histogram::new(
                a(
                    "kubelet_evented_pleg_connection_latency_seconds",
                    "The latency of streaming connection with the CR runtime, measured in \
                     seconds.",
                ),
                [],
                DEF_BUCKETS,
            ),
            events_dropped: CounterVec::new(
                Desc::raw(
                    "rkubelet_events_dropped_total",
                    "Events the kubelet recorded but did not write to the API server: its \
                     queue was full, its tries ran out, or the server refused them.",
                ),
                ["reason"],
            ),
            runtime_operations: CounterVec::new(
                a(
                    "kubelet_runtime_operations_total",
                    "Cumulative number of runtime operations by operation type.",
                ),
                ["operation_type"],
            ),
            runtime_operations_duration: HistogramVec::new(
                a(
                    "kubelet_runtime_operations_duration_seconds",
                    "Duration in seconds of runtime operations. Broken down by operation \
                     type.",
                ),
                ["operation_type"],
                &exponential_buckets(0.005, 2.5, 14),
            ),
            runtime_operations_errors: CounterVec::new(
                a(
                    "kubelet_runtime_operations_errors_total",
                    "Cumulative number of runtime operation errors by operation type.",
                ),
                ["operation_type"],
            ),
            started_pods: Counter::new(
                a(
                    "kubelet_started_pods_total",
                    "Cumulative number of pods started",
                ),
                [],
            ),
            started_pods_errors: Counter::new(
                a(
                    "kubelet_started_pods_errors_total",
                    "Cumulative number of errors when starting pods",
                ),
                [],
            ),
            started_containers: CounterVec::new(
                a(
                    "kubelet_started_containers_total",
                    "Cumulative number of containers started",
                ),
                ["container_type"],
            ),
            started_containers_errors: CounterVec::new(
                a(
                    "kubelet_started_containers_errors_total",
                    "Cumulative number of errors when starting containers",
                ),
                ["code", "container_type"],
            ),
            restarted_pods: CounterVec::new(
                a(
                    "kubelet_restarted_pods_total",
                    "Number of pods that have been restarted because they were deleted and \
                     recreated with the same UID while the kubelet was watching them \
                     (common for static pods, extremely uncommon for API pods)",
                ),
                ["static"],
            ),
            evictions: CounterVec::new(
                Desc::raw(
                    "rkubelet_evictions_total",
                    "Cumulative number of pod evictions by eviction signal (upstream's \
                     kubelet_evictions).",
                ),
                ["eviction_signal"],
            ),
            http_requests: CounterVec::new(
                a(
                    "kubelet_http_requests_total",
                    "Number of the http requests received since the server started",
                ),
                HTTP_LABELS,
            ),
            http_requests_duration: HistogramVec::new(
                a(
                    "kubelet_http_requests_duration_seconds",
                    "Duration in seconds to serve http requests",
                ),
                HTTP_LABELS,
                DEF_BUCKETS,
            ),
            http_inflight: GaugeVec::new(
                a(
                    "kubelet_http_inflight_requests",
                    "Number of the inflight http requests",
                ),
                HTTP_LABELS,
            ),
            loops,
        }
    }

    /// Every family in the text format, sorted by name: the recorded ones, the
    /// process's (read from `/proc/self` now) and the loops' (read from the loop
    /// registry now).
    pub fn render(&self) -> String {
        let process = ProcessFamilies::new(&process::read_self());
        let loops = LoopFamilies::new(&self.loops, Instant::now());
        let mut all: Vec<&dyn Collector> = vec![
            &self.node_name,
            &self.running_pods,
            &self.running_containers,
            &self.desired_pods,
            &self.pod_start_duration,
            &self.pod_status_sync_duration,
            &self.pod_worker_duration,
            &self.containers_per_pod,
            &self.pleg_relist_duration,
            &self.pleg_relist_interval,
            &self.pleg_last_seen,
            &self.pleg_discard_events,
            &self.evented_pleg_conn,
            &self.evented_pleg_conn_err,
            &self.evented_pleg_conn_latency,
            &self.events_dropped,
            &self.runtime_operations,
            &self.runtime_operations_duration,
            &self.runtime_operations_errors,
            &self.started_pods,
            &self.started_pods_errors,
            &self.started_containers,
            &self.started_containers_errors,
            &self.restarted_pods,
            &self.evictions,
            &self.http_requests,
            &self.http_requests_duration,
            &self.http_inflight,
        ];
        all.extend(process.collectors());
        all.extend(loops.collectors());
        base::metrics::render(&mut all)
    }
}

impl Default for KubeletMetrics {
    /// Families over a loop registry of their own (unit tests).
    fn default() -> Self {
        KubeletMetrics::new(Arc::default())
    }
}

/// rkubelet's own per-loop figures, read from the loop registry at scrape time.
/// Loops that have returned are left out, so threads that come and go cannot grow
/// the output; the label values are thread names, a fixed set per configuration.
#[derive(Debug)]
struct LoopFamilies {
    ticks: CounterVec<1>,
    errors: CounterVec<1>,
    panics: CounterVec<1>,
    age: GaugeVec<1>,
    took: GaugeVec<1>,
}

impl LoopFamilies {
    fn new(registry: &LoopRegistry, now: Instant) -> Self {
        let r = Desc::raw;
        let f = LoopFamilies {
            ticks: CounterVec::new(
                r(
                    "rkubelet_loop_ticks_total",
                    "Iterations each of rkubelet's loops (named threads) has begun and ended.",
                ),
                ["loop"],
            ),
            errors: CounterVec::new(
                r(
                    "rkubelet_loop_errors_total",
                    "Iterations of each loop that ended with an error.",
                ),
                ["loop"],
            ),
            panics: CounterVec::new(
                r(
                    "rkubelet_loop_panics_total",
                    "Panics caught in each loop (each restarted the loop after a back-off) \
                     and in each stream thread (each ended its stream).",
                ),
                ["loop"],
            ),
            age: GaugeVec::new(
                r(
                    "rkubelet_loop_last_tick_age_seconds",
                    "Seconds since each loop last began an iteration (loops that never \
                     did are left out).",
                ),
                ["loop"],
            ),
            took: GaugeVec::new(
                r(
                    "rkubelet_loop_last_tick_duration_seconds",
                    "How long each loop's last finished iteration took, in seconds.",
                ),
                ["loop"],
            ),
        };
        for (name, st) in registry.snapshot() {
            if st.finished {
                continue;
            }
            f.ticks.add([&name], st.ticks);
            f.errors.add([&name], st.errors);
            f.panics.add([&name], st.panics);
            if let Some(t) = st.last_tick {
                f.age
                    .set([&name], now.saturating_duration_since(t).as_secs_f64());
            }
            if let Some(d) = st.last_duration {
                f.took.set([&name], d.as_secs_f64());
            }
        }
        for (name, n) in registry.transient_panics() {
            f.panics.add([&name], n);
        }
        f
    }

    fn collectors(&self) -> Vec<&dyn Collector> {
        vec![
            &self.ticks,
            &self.errors,
            &self.panics,
            &self.age,
            &self.took,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base::testutil::promtool_check;

    #[test]
    fn every_family_renders_with_upstream_markers_and_promtool_accepts_it() {
        let m = KubeletMetrics::default();
        m.node_name.set(["node-1"], 1.0);
        for s in ["created", "exited", "running", "unknown"] {
            m.running_containers.set([s], 0.0);
        }
        m.running_containers.set(["running"], 2.0);
        m.desired_pods.set(["true"], 1.0);
        m.desired_pods.set(["false"], 0.0);
        m.pod_start_duration.observe([], 1.5);
        m.pod_worker_duration.observe(["create"], 0.2);
        m.runtime_operations.inc(["list_containers"]);
        m.runtime_operations_duration
            .observe(["list_containers"], 0.004);
        m.runtime_operations_errors.inc(["start_container"]);
        m.started_containers.inc([CONTAINER]);
        m.started_containers_errors
            .inc(["CreateContainerError", CONTAINER]);
        m.restarted_pods.inc(["true"]);
        m.evictions.inc(["memory.available"]);
        m.http_requests.inc(["false", "GET", "metrics", "readonly"]);
        m.http_requests_duration
            .observe(["false", "GET", "metrics", "readonly"], 0.001);
        m.http_inflight
            .set(["false", "GET", "metrics", "readonly"], 1.0);
        let text = m.render();
        for line in [
            "# HELP kubelet_running_pods [ALPHA] Number of pods that have a running pod sandbox\n",
            "# TYPE kubelet_running_pods gauge\nkubelet_running_pods 0\n",
            "kubelet_node_name{node=\"node-1\"} 1\n",
            "kubelet_running_containers{container_state=\"running\"} 2\n",
            "kubelet_started_containers_errors_total{code=\"CreateContainerError\",container_type=\"container\"} 1\n",
            "kubelet_http_requests_total{long_running=\"false\",method=\"GET\",path=\"metrics\",server_type=\"readonly\"} 1\n",
            "rkubelet_evictions_total{eviction_signal=\"memory.available\"} 1\n",
            "kubelet_runtime_operations_duration_seconds_bucket{operation_type=\"list_containers\",le=\"0.005\"} 1\n",
            "kubelet_pod_start_duration_seconds_bucket{le=\"3600\"} 1\n",
            "# TYPE rkubelet_pleg_discard_events_total counter\nrkubelet_pleg_discard_events_total 0\n",
            "# HELP process_resident_memory_bytes Resident memory size in bytes.\n",
            "# TYPE process_cpu_seconds_total counter\n",
            "# TYPE process_start_time_seconds gauge\n",
        ] {
            assert!(text.contains(line), "missing {line:?} in:\n{text}");
        }
        let names: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split(' ').next())
            .collect();
        let mut sorted = names.clone();
        base::sort::sort(&mut sorted);
        assert_eq!(names, sorted, "families are sorted by name");
        promtool_check(&text);
    }

    #[test]
    fn loop_figures_come_from_the_registry_and_leave_out_stopped_loops() {
        let (shutdown, stop) = base::loops::shutdown_channel();
        let loops = base::loops::Loops::new(stop);
        let (tx, rx) = crossbeam_channel::bounded::<()>(1);
        loops
            .spawn("test-loop", move |stop, handle| {
                let t = handle.begin_tick();
                handle.end_tick(t, Some("boom".into()));
                let t = handle.begin_tick();
                handle.end_tick(t, None);
                let _ = tx.send(());
                let _ = stop.receiver().recv();
            })
            .expect("spawn");
        loops.spawn("test-gone", |_, _| {}).expect("spawn");
        rx.recv().expect("ticked");
        let until = Instant::now() + std::time::Duration::from_secs(10);
        while !loops
            .registry()
            .get("test-gone")
            .is_some_and(|s| s.finished)
        {
            assert!(Instant::now() < until, "test-gone did not finish");
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let m = KubeletMetrics::new(loops.registry());
        let text = m.render();
        assert!(
            text.contains("rkubelet_loop_ticks_total{loop=\"test-loop\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("rkubelet_loop_errors_total{loop=\"test-loop\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("rkubelet_loop_panics_total{loop=\"test-loop\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("rkubelet_loop_last_tick_age_seconds{loop=\"test-loop\"} "),
            "{text}"
        );
        assert!(!text.contains("test-gone"), "{text}");
        promtool_check(&text);
        shutdown.trigger();
        assert!(loops
            .join_all(std::time::Duration::from_secs(10))
            .is_empty());
    }
}
