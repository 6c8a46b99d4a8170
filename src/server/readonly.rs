//! The read-only port (`--read-only-port`, default 10255; 0 disables): no
//! authentication and nothing that acts, but not free of secrets: `/pods` serves every
//! pod spec with its `env` values, as upstream's does, so anyone who can reach the port
//! reads them; disable it (`--read-only-port=0`) wherever that matters. `/pods` (the pods this
//! kubelet runs, with the status it computed), `/healthz` and its sub-checks, and
//! `/debug/loops` (every loop's last tick, to tell which one is stuck), `/metrics`
//! (the kubelet's Prometheus metrics, as upstream's read-only port serves them) and
//! `/metrics/probes` (probe results and lateness, Prometheus text), and the resource
//! analyzer's `/stats/summary`, `/metrics/resource` and `/metrics/cadvisor`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::healthz;
use super::http_metrics::metrics_reply;
use crate::health::HealthChecks;
use crate::metrics::KubeletMetrics;
use crate::pleg::RuntimePodInfo;
use crate::stats::metrics::{render_cadvisor, render_resource};
use crate::stats::StatsProvider;
use crate::status::StatusCache;
use base::loops::{lock, LoopRegistry};
use wire::server::{Reply, Req};

/// The pods the sync loop manages, published for readers (an `Arc` swapped under a
/// short lock), and the statuses the pod workers computed.
#[derive(Debug, Default)]
pub struct PodsView {
    pods: Mutex<Arc<Vec<Arc<Pod>>>>,
    /// Statuses by pod UID.
    pub statuses: Arc<StatusCache>,
}

impl PodsView {
    /// A view over `statuses`.
    pub fn new(statuses: Arc<StatusCache>) -> Self {
        PodsView {
            pods: Mutex::default(),
            statuses,
        }
    }

    /// Replaces the published pod set (sync loop only).
    pub fn publish(&self, pods: Vec<Arc<Pod>>) {
        *lock(&self.pods) = Arc::new(pods);
    }

    /// The published pods.
    pub fn pods(&self) -> Arc<Vec<Arc<Pod>>> {
        lock(&self.pods).clone()
    }

    /// The pods with their computed status, as a `v1` `PodList` JSON document.
    pub fn pod_list_json(&self) -> Vec<u8> {
        let items: Vec<Pod> = self
            .pods()
            .iter()
            .map(|p| {
                let mut p = (**p).clone();
                let uid = p.metadata.uid.clone().unwrap_or_default();
                if let Some(st) = self.statuses.get(&uid) {
                    p.status = Some((*st).clone());
                }
                p
            })
            .collect();
        encode_pod_list(&items)
    }
}

/// A `v1` `PodList` JSON document of `items` (pods, or references to them), encoded
/// straight from them: going through a `serde_json::Value` first built a map per field
/// of every pod on each request.
pub(crate) fn encode_pod_list<T: serde::Serialize>(items: &[T]) -> Vec<u8> {
    #[derive(serde::Serialize)]
    struct PodList<'a, T> {
        kind: &'static str,
        #[serde(rename = "apiVersion")]
        api_version: &'static str,
        metadata: serde_json::Map<String, serde_json::Value>,
        items: &'a [T],
    }
    let list = PodList {
        kind: "PodList",
        api_version: "v1",
        metadata: serde_json::Map::new(),
        items,
    };
    serde_json::to_vec(&list).unwrap_or_default()
}

/// `/runningpods/`'s body (upstream `getRunningPods`): a `v1` `PodList` of the pods
/// the runtime runs (any container or the sandbox running), as the last PLEG relist
/// saw them, each as upstream's `Pod.ToAPIPod` makes it: name, namespace, UID, and
/// its running containers' names and images (sandboxes left out). Encoded as Go
/// encodes these objects, zero-valued fields included (`creationTimestamp: null`,
/// `resources: {}`, `status: {}`, and `items: null` for no pods).
pub(crate) fn running_pods_json(pods: &BTreeMap<String, RuntimePodInfo>) -> Vec<u8> {
    let mut running: Vec<(&String, &RuntimePodInfo)> =
        pods.iter().filter(|(_, p)| p.running).collect();
    base::sort::sort_by(&mut running, |a, b| {
        (&a.1.namespace, &a.1.name, a.0).cmp(&(&b.1.namespace, &b.1.name, b.0))
    });
    let items: Vec<serde_json::Value> = running
        .into_iter()
        .map(|(uid, p)| {
            let containers: Vec<serde_json::Value> = p
                .running_containers
                .iter()
                .map(|(name, image)| json!({"name": name, "image": image, "resources": {}}))
                .collect();
            json!({
                "metadata": {
                    "name": p.name,
                    "namespace": p.namespace,
                    "uid": uid,
                    "creationTimestamp": null,
                },
                "spec": {
                    "containers": if containers.is_empty() { serde_json::Value::Null } else { containers.into() },
                },
                "status": {},
            })
        })
        .collect();
    let list = json!({
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {},
        "items": if items.is_empty() { serde_json::Value::Null } else { items.into() },
    });
    serde_json::to_vec(&list).unwrap_or_default()
}

/// What the read-only port serves from.
#[derive(Debug, Clone)]
pub(crate) struct ReadOnly {
    /// Health checks.
    pub checks: HealthChecks,
    /// Pods and statuses.
    pub pods: Arc<PodsView>,
    /// Loop registry, for `/debug/loops`.
    pub registry: Arc<LoopRegistry>,
    /// Probe counters, for `/metrics/probes`.
    pub probe_metrics: Arc<crate::prober::metrics::ProbeMetrics>,
    /// The kubelet's metrics, for `/metrics`.
    pub metrics: Arc<KubeletMetrics>,
    /// The resource analyzer's latest figures, for `/stats/summary`,
    /// `/metrics/resource` and `/metrics/cadvisor`.
    pub stats: Arc<StatsProvider>,
}

/// The stats paths both ports serve from the analyzer's latest snapshot: None when
/// `path` is not one of them.
pub(crate) fn stats_reply(stats: &StatsProvider, req: &Req, path: &[&str]) -> Option<Reply> {
    Some(match path {
        // Upstream's summary route answers GET and POST.
        ["stats", "summary"] if req.method == "GET" || req.method == "POST" => {
            let only = query_value(&req.query, "only_cpu_and_memory") == Some("true");
            Reply::json(200, crate::stats::summary_json(stats, only))
        }
        ["stats", "summary"] => Reply::method_not_allowed("GET, POST"),
        // Upstream's metrics handlers answer every method.
        ["metrics", "resource"] => {
            metrics_reply(render_resource(&stats.demand(crate::stats::DEMAND_WAIT)))
        }
        ["metrics", "cadvisor"] => {
            metrics_reply(render_cadvisor(&stats.demand(crate::stats::DEMAND_WAIT)))
        }
        _ => return None,
    })
}

/// The first value of `key` in a query string (values here are plain words, never
/// escaped).
fn query_value<'a>(query: &'a str, key: &str) -> Option<&'a str> {
    query.split('&').find_map(|kv| {
        kv.split_once('=')
            .filter(|(k, _)| *k == key)
            .map(|(_, v)| v)
    })
}

/// Routes one request on the read-only port.
pub(crate) fn handle(ro: &ReadOnly, req: &Req) -> Reply {
    let path = req.path();
    if let Some(reply) = stats_reply(&ro.stats, req, &path) {
        return reply;
    }
    match path.as_slice() {
        ["pods"] if req.method == "GET" => Reply::json(200, ro.pods.pod_list_json()),
        ["pods"] => Reply::method_not_allowed("GET"),
        ["healthz"] => healthz(&ro.checks, req, None),
        ["healthz", sub] => healthz(&ro.checks, req, Some(sub)),
        ["debug", "loops"] => Reply::text(200, loops_table(&ro.registry)),
        // Upstream's metrics handler answers every method.
        ["metrics"] => metrics_reply(ro.metrics.render()),
        ["metrics", "probes"] => Reply {
            content_type: "text/plain; version=0.0.4; charset=utf-8",
            ..Reply::text(200, ro.probe_metrics.render())
        },
        _ => Reply::not_found(),
    }
}

/// A table of every loop: name, period, ticks, panics caught, seconds since the last
/// tick, the last tick's duration, and its error; then the stream threads' panics.
pub(crate) fn loops_table(registry: &LoopRegistry) -> String {
    let now = Instant::now();
    let mut out = format!(
        "{:<16} {:>8} {:>8} {:>7} {:>10} {:>10}  {}\n",
        "LOOP", "PERIOD", "TICKS", "PANICS", "AGO", "TOOK", "LAST ERROR"
    );
    for (name, st) in registry.snapshot() {
        let period = st.period.map_or("-".to_string(), |p| format!("{p:?}"));
        let ago = st.last_tick.map_or("never".to_string(), |t| {
            format!("{:.1}s", now.saturating_duration_since(t).as_secs_f64())
        });
        let took = st
            .last_duration
            .map_or("-".to_string(), |d| format!("{d:.1?}"));
        let state = if st.finished { " (stopped)" } else { "" };
        out.push_str(&format!(
            "{:<16} {:>8} {:>8} {:>7} {:>10} {:>10}  {}{}\n",
            name,
            period,
            st.ticks,
            st.panics,
            ago,
            took,
            st.last_error.unwrap_or_default(),
            state
        ));
    }
    for (name, n) in registry.transient_panics() {
        out.push_str(&format!(
            "stream thread {name}: {n} panics (each ended its stream)\n"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &str, running: bool, containers: &[(&str, &str)]) -> RuntimePodInfo {
        RuntimePodInfo {
            full_name: format!("{name}_default"),
            name: name.into(),
            namespace: "default".into(),
            running,
            running_containers: containers
                .iter()
                .map(|(n, i)| (n.to_string(), i.to_string()))
                .collect(),
            grace_seconds: 30,
        }
    }

    #[test]
    fn running_pods_are_listed_as_upstream_encodes_them() {
        let mut pods = BTreeMap::new();
        pods.insert("u2".to_string(), info("web", true, &[("a", "busybox:1")]));
        pods.insert("u1".to_string(), info("only-sandbox", true, &[]));
        pods.insert("u3".to_string(), info("dead", false, &[]));
        let v: serde_json::Value = serde_json::from_slice(&running_pods_json(&pods)).expect("JSON");
        assert_eq!(
            v,
            json!({
                "kind": "PodList", "apiVersion": "v1", "metadata": {},
                "items": [
                    {"metadata": {"name": "only-sandbox", "namespace": "default", "uid": "u1",
                                  "creationTimestamp": null},
                     "spec": {"containers": null}, "status": {}},
                    {"metadata": {"name": "web", "namespace": "default", "uid": "u2",
                                  "creationTimestamp": null},
                     "spec": {"containers": [{"name": "a", "image": "busybox:1", "resources": {}}]},
                     "status": {}},
                ]
            })
        );
        let none: serde_json::Value =
            serde_json::from_slice(&running_pods_json(&BTreeMap::new())).expect("JSON");
        assert_eq!(none["items"], serde_json::Value::Null);
    }
}
