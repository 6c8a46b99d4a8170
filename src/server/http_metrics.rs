//! The ports' HTTP metrics (upstream `Server.ServeHTTP` with
//! `pkg/kubelet/server/metrics`): every request is counted in
//! `kubelet_http_requests_total`, held in `kubelet_http_inflight_requests` while its
//! handler runs, and timed into `kubelet_http_requests_duration_seconds`, labelled by
//! method, path bucket, server type and long-running. A wrapper around a port's
//! handler ([`instrument`]), so the transport (`http.rs`) knows nothing of it.
//!
//! The labels are bounded as upstream bounds them: a method outside the standard set
//! is `other`; the path is its first segment (`metrics/<x>` for `/metrics/<x>`) when
//! that names a handler the kubelet installs, else `other`. Counting happens before
//! authentication, so a refused request counts too. The duration is the handler's
//! (authentication included), not the time to write the answer.

use std::sync::Arc;
use std::time::Instant;

use crate::metrics::KubeletMetrics;
use base::metrics::CONTENT_TYPE;
use wire::server::{Reply, Req};

/// Which port a request came to (the `server_type` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ServerType {
    /// The read-only port.
    ReadOnly,
    /// The authenticated kubelet port.
    ReadWrite,
}

impl ServerType {
    fn label(self) -> &'static str {
        match self {
            ServerType::ReadOnly => "readonly",
            ServerType::ReadWrite => "readwrite",
        }
    }
}

/// Upstream `metricsMethodBuckets`.
const METHODS: [&str; 8] = [
    "OPTIONS", "GET", "HEAD", "POST", "PUT", "DELETE", "TRACE", "CONNECT",
];

/// Upstream's `addMetricsBucketMatcher` calls: the default handlers, the debugging
/// handlers and their disabled stand-ins, `/debug` (pprof, and here `/debug/loops`).
const PATHS: [&str; 18] = [
    "attach",
    "checkpoint",
    "configz",
    "containerLogs",
    "debug",
    "exec",
    "healthz",
    "logs",
    "metrics",
    "metrics/cadvisor",
    "metrics/probes",
    "metrics/resource",
    "pods",
    "portForward",
    "pprof",
    "run",
    "runningpods",
    "stats",
];

/// The `method` label (upstream `getMetricMethodBucket`).
pub(crate) fn method_bucket(method: &str) -> &'static str {
    METHODS
        .iter()
        .find(|m| **m == method)
        .copied()
        .unwrap_or("other")
}

/// The `path` label (upstream `getMetricBucket` over `getURLRootPath`): the first
/// segment, or `metrics/<second>` under `/metrics/`, when it is a known handler.
pub(crate) fn path_bucket(segments: &[String]) -> &'static str {
    let root = match segments {
        [first, second, ..] if first == "metrics" => format!("{first}/{second}"),
        [first, ..] => first.clone(),
        [] => String::new(),
    };
    PATHS
        .iter()
        .find(|p| **p == root)
        .copied()
        .unwrap_or("other")
}

/// The `long_running` label (upstream `isLongRunningRequest`). Upstream's table says
/// `portforward` while its bucket is `portForward`, so port-forwards count as not
/// long-running there; kept, so the series match.
pub(crate) fn long_running(path: &'static str) -> &'static str {
    match path {
        "exec" | "attach" | "portforward" | "debug" => "true",
        _ => "false",
    }
}

/// `handler` with every request recorded in `metrics` as coming to `server`.
pub(crate) fn instrument<H>(
    metrics: Arc<KubeletMetrics>,
    server: ServerType,
    handler: H,
) -> impl Fn(&Req) -> Reply + Send + Sync + 'static
where
    H: Fn(&Req) -> Reply + Send + Sync + 'static,
{
    move |req: &Req| {
        let path = path_bucket(&req.segments);
        let labels = [
            long_running(path),
            method_bucket(&req.method),
            path,
            server.label(),
        ];
        metrics.http_requests.inc(labels);
        metrics.http_inflight.add(labels, 1.0);
        let began = Instant::now();
        let reply = handler(req);
        metrics
            .http_requests_duration
            .observe(labels, began.elapsed().as_secs_f64());
        metrics.http_inflight.add(labels, -1.0);
        reply
    }
}

/// A `/metrics` answer: the text format with its content type.
pub(crate) fn metrics_reply(text: String) -> Reply {
    Reply {
        content_type: CONTENT_TYPE,
        ..Reply::text(200, text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_methods_fall_into_upstreams_buckets() {
        let seg = |p: &str| Req::new("GET", p).segments;
        let cases = [
            ("/pods", "pods"),
            ("/pods/", "pods"),
            ("/metrics", "metrics"),
            ("/metrics/probes", "metrics/probes"),
            ("/metrics/cadvisor", "metrics/cadvisor"),
            ("/metrics/nope", "other"),
            ("/healthz/syncloop", "healthz"),
            ("/runningpods/", "runningpods"),
            ("/exec/ns/pod/c", "exec"),
            ("/containerLogs/ns/pod/c", "containerLogs"),
            ("/debug/loops", "debug"),
            ("/", "other"),
            ("/some/random/thing", "other"),
            ("/PODS", "other"),
        ];
        for (path, want) in cases {
            assert_eq!(path_bucket(&seg(path)), want, "{path}");
        }
        assert_eq!(method_bucket("GET"), "GET");
        assert_eq!(method_bucket("PATCH"), "other", "as upstream's set");
        assert_eq!(method_bucket("get"), "other");
        assert_eq!(long_running("exec"), "true");
        assert_eq!(long_running("portForward"), "false");
        assert_eq!(long_running("pods"), "false");
    }

    #[test]
    fn requests_are_counted_timed_and_inflight_while_in_the_handler() {
        let m = Arc::new(KubeletMetrics::default());
        let seen = m.clone();
        let h = instrument(m.clone(), ServerType::ReadOnly, move |r: &Req| {
            let labels = ["false", "GET", "pods", "readonly"];
            if r.method == "GET" {
                assert_eq!(seen.http_inflight.get(labels), 1.0, "inside the handler");
            }
            Reply::text(200, "ok")
        });
        h(&Req::new("GET", "/pods"));
        h(&Req::new("GET", "/pods?x=1"));
        h(&Req::new("BREW", "/secret/path/of/someone"));
        let labels = ["false", "GET", "pods", "readonly"];
        assert_eq!(m.http_requests.get(labels), 2);
        assert_eq!(m.http_inflight.get(labels), 0.0);
        assert_eq!(m.http_requests_duration.count(labels), 2);
        assert_eq!(
            m.http_requests.get(["false", "other", "other", "readonly"]),
            1,
            "unknown methods and paths share one series"
        );
    }
}
