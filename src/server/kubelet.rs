//! The authenticated kubelet port (`--address`:`--port`, default 0.0.0.0:10250; 0
//! disables it): HTTPS only, every request authenticated and authorized by
//! [`auth::filter`] before the route `match` (Go's mux rules of [`debug::mux_redirect`]
//! come first, as upstream's mux runs before its filters). Served: `/pods` (the
//! read-only port's JSON), `/healthz` and its sub-checks, and the debugging handlers
//! (`--enable-debugging-handlers`, default true; else 405, [`debug::disabled`]):
//! `/configz` (`{"kubeletconfig": {…}}`, the effective configuration in v1beta1's
//! field names, as upstream's `setConfigz`), `/containerLogs` ([`logs`]), `/logs/`
//! ([`logfiles`]), `/run`, `PUT /debug/flags/v` ([`debug`]) and `/runningpods/` (the
//! runtime's pods from the last PLEG relist); `/metrics` and `/metrics/probes`
//! (Prometheus text); `/stats/summary`, `/metrics/resource` and `/metrics/cadvisor`
//! (the resource analyzer's, as the read-only port's); `/exec`, `/attach` and `/portForward` ([`streams`]), also
//! debugging handlers. With `--enable-server-source`: `PUT`/`POST /pods`, `DELETE
//! /pods/{ns}/{name}` and `GET /pods?source=server` ([`push`], the server pod source;
//! else those answer 404). Everything else is 404.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::auth::{self, AuthConfig};
use super::http_metrics::metrics_reply;
use super::readonly::{running_pods_json, stats_reply, PodsView};
use super::streams::{self, PodRef, StreamServer};
use super::{debug, healthz, logfiles, logs, push};
use crate::config::KubeletConfig;
use crate::health::HealthChecks;
use crate::metrics::KubeletMetrics;
use crate::pleg::PlegShared;
use crate::podconfig::server::ServerSource;
use crate::prober::metrics::ProbeMetrics;
use crate::stats::StatsProvider;
use runtime::Runtime;
use wire::server::{Reply, Req};
use wire::streams::Verb;

/// Where `/logs/` serves from on a node (upstream's `http.Dir("/var/log/")`).
pub(crate) const NODE_LOG_DIR: &str = "/var/log";

/// What the kubelet port serves from.
#[derive(Debug, Clone)]
pub(crate) struct KubeletServer {
    /// Authentication and authorization.
    pub auth: AuthConfig,
    /// Health checks.
    pub checks: HealthChecks,
    /// Pods and statuses.
    pub pods: Arc<PodsView>,
    /// The `/configz` document, made once at start (the configuration never changes
    /// while the process runs).
    pub configz: Arc<Vec<u8>>,
    /// The kubelet's metrics, for `/metrics`.
    pub metrics: Arc<KubeletMetrics>,
    /// Probe counters, for `/metrics/probes`.
    pub probe_metrics: Arc<ProbeMetrics>,
    /// The runtime's pods as the PLEG last listed them, for `/runningpods/`: no
    /// runtime call on a request.
    pub runtime_pods: Arc<PlegShared>,
    /// The container runtime (container logs, `/run`).
    pub runtime: Arc<dyn Runtime>,
    /// `--enable-debugging-handlers`.
    pub debugging_handlers: bool,
    /// The directory `/logs/` serves ([`NODE_LOG_DIR`]; tests point it elsewhere).
    pub log_dir: PathBuf,
    /// Exec, attach and port-forward.
    pub streams: StreamServer,
    /// The resource analyzer's latest figures (`nodes/stats`, `nodes/metrics`).
    pub stats: Arc<StatsProvider>,
    /// The server pod source, with `--enable-server-source`.
    pub push: Option<Arc<ServerSource>>,
}

/// Routes one request on the kubelet port, after authentication and authorization.
pub(crate) fn handle(k: &KubeletServer, req: &Req) -> Reply {
    if let Some(reply) = debug::mux_redirect(req, k.debugging_handlers) {
        return reply;
    }
    if let Err(reply) = auth::filter(&k.auth, req) {
        return reply;
    }
    if !k.debugging_handlers && debug::is_disabled_path(req) {
        return debug::disabled();
    }
    // Segments as sent, empty ones kept (`/containerLogs/ns/pod/` has an empty name).
    let raw: Vec<&str> = req.raw_path.split('/').skip(1).collect();
    let path = req.path();
    if let Some(reply) = stats_reply(&k.stats, req, &path) {
        return reply;
    }
    match path.as_slice() {
        ["pods"] if req.method == "GET" && !push::asks_for_source(req) => {
            Reply::json(200, k.pods.pod_list_json())
        }
        ["pods", ..] => push::handle(k.push.as_ref(), req, &raw[1..]),
        ["healthz"] => healthz(&k.checks, req, None),
        ["healthz", sub] => healthz(&k.checks, req, Some(sub)),
        // Upstream's metrics handlers answer every method.
        ["metrics"] => metrics_reply(k.metrics.render()),
        ["metrics", "probes"] => metrics_reply(k.probe_metrics.render()),
        ["runningpods"] if k.debugging_handlers && req.method == "GET" => {
            Reply::json(200, running_pods_json(&k.runtime_pods.runtime_pods()))
        }
        ["runningpods"] if k.debugging_handlers => Reply::method_not_allowed("GET"),
        // Upstream's configz handler answers every method; it is one of the debugging
        // handlers.
        ["configz"] if k.debugging_handlers => Reply::json(200, k.configz.as_ref().clone()),
        ["containerLogs", ..] if k.debugging_handlers => {
            logs::handle(&k.pods, &k.runtime, req, &raw[1..])
        }
        ["logs", ..] if k.debugging_handlers => match req.raw_path.strip_prefix("/logs/") {
            Some(rest) => logfiles::handle(&k.log_dir, req, rest),
            None => Reply::not_found(),
        },
        ["run", ..] if k.debugging_handlers => debug::run(&k.pods, &k.runtime, req, &raw[1..]),
        ["debug", "flags", "v"] if k.debugging_handlers && req.raw_path == "/debug/flags/v" => {
            debug::flags_v(req)
        }
        [verb @ ("exec" | "attach"), ns, pod, rest @ ..]
            if k.debugging_handlers && matches!(rest.len(), 1 | 2) =>
        {
            if req.method != "GET" && req.method != "POST" {
                return Reply::method_not_allowed("GET, POST");
            }
            let verb = if *verb == "exec" {
                Verb::Exec
            } else {
                Verb::Attach
            };
            let (uid, container) = match rest {
                [uid, container] => (Some(*uid), *container),
                [container] => (None, *container),
                _ => return Reply::not_found(),
            };
            let pod = PodRef {
                namespace: ns,
                name: pod,
                uid,
            };
            streams::remote_command(&k.streams, req, verb, pod, container)
        }
        ["portForward", ns, pod, rest @ ..] if k.debugging_handlers && rest.len() <= 1 => {
            if req.method != "GET" && req.method != "POST" {
                return Reply::method_not_allowed("GET, POST");
            }
            let pod = PodRef {
                namespace: ns,
                name: pod,
                uid: rest.first().copied(),
            };
            streams::port_forward(&k.streams, req, pod)
        }
        _ => Reply::not_found(),
    }
}

/// `/configz`'s body: `{"kubeletconfig": {…}}` with the fields rkubelet has, spelled and
/// formatted as v1beta1's JSON (Go durations, `omitempty` strings left out). The
/// serving pair's paths are the ones in use, the self-signed ones included, as
/// upstream fills `tlsCertFile` in after making them.
pub(crate) fn configz_json(cfg: &KubeletConfig, cert_file: &str, key_file: &str) -> Vec<u8> {
    let mut kc = Map::new();
    let mut put = |k: &str, v: Value| {
        let empty = matches!(&v, Value::String(s) if s.is_empty());
        if !empty {
            kc.insert(k.to_string(), v);
        }
    };
    let path = |p: &Option<std::path::PathBuf>| {
        p.as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    };
    put("enableServer", json!(cfg.port != 0));
    put("staticPodPath", json!(path(&cfg.static_pod_path)));
    put("syncFrequency", json!(go_duration(cfg.sync_frequency)));
    put(
        "fileCheckFrequency",
        json!(go_duration(cfg.file_check_frequency)),
    );
    put(
        "httpCheckFrequency",
        json!(go_duration(cfg.http_check_frequency)),
    );
    put(
        "staticPodURL",
        json!(cfg.manifest_url.clone().unwrap_or_default()),
    );
    let mut headers: Map<String, Value> = Map::new();
    for (name, value) in &cfg.manifest_url_headers {
        if let Value::Array(values) = headers.entry(name.clone()).or_insert(json!([])) {
            values.push(json!(value));
        }
    }
    if !headers.is_empty() {
        put("staticPodURLHeader", Value::Object(headers));
    }
    put("address", json!(cfg.address.to_string()));
    put("port", json!(cfg.port));
    put("readOnlyPort", json!(cfg.read_only_port));
    put("tlsCertFile", json!(cert_file));
    put("tlsPrivateKeyFile", json!(key_file));
    put("tlsMinVersion", json!(cfg.tls_min_version.name()));
    if !cfg.tls_cipher_suites.is_empty() {
        put("tlsCipherSuites", json!(cfg.tls_cipher_suites));
    }
    put(
        "authentication",
        json!({
            "x509": {"clientCAFile": path(&cfg.client_ca_file)},
            "webhook": {
                "enabled": cfg.authentication_token_webhook,
                "cacheTTL": go_duration(cfg.authentication_token_webhook_cache_ttl),
            },
            "anonymous": {"enabled": cfg.anonymous_auth},
        }),
    );
    put(
        "authorization",
        json!({
            "mode": cfg.authorization_mode.name(),
            "webhook": {
                "cacheAuthorizedTTL": go_duration(cfg.authorization_webhook_cache_authorized_ttl),
                "cacheUnauthorizedTTL":
                    go_duration(cfg.authorization_webhook_cache_unauthorized_ttl),
            },
        }),
    );
    if cfg.enable_server_source {
        // rkubelet's own field (the server pod source), as the config file spells it.
        put("enableServerSource", json!(true));
    }
    if cfg.checkpoint_api_pods {
        put("checkpointApiPods", json!(true));
    }
    put("healthzPort", json!(cfg.healthz_port));
    put(
        "healthzBindAddress",
        json!(cfg.healthz_bind_address.to_string()),
    );
    put("clusterDomain", json!(cfg.cluster_domain));
    if !cfg.cluster_dns.is_empty() {
        put("clusterDNS", json!(cfg.cluster_dns));
    }
    put("resolvConf", json!(cfg.resolv_conf));
    put("serializeImagePulls", json!(cfg.serialize_image_pulls));
    if let Some(n) = cfg.max_parallel_image_pulls {
        put("maxParallelImagePulls", json!(n));
    }
    put(
        "containerRuntimeEndpoint",
        json!(cfg.container_runtime_endpoint),
    );
    put("logging", json!({"verbosity": cfg.verbosity.unwrap_or(0)}));
    serde_json::to_vec(&json!({ "kubeletconfig": kc })).unwrap_or_default()
}

/// A duration as Go's `time.Duration.String` prints whole-second and millisecond
/// values (`1m0s`, `20s`, `1h0m0s`, `500ms`, `0s`).
fn go_duration(d: Duration) -> String {
    let secs = d.as_secs();
    let nanos = d.subsec_nanos();
    if secs == 0 {
        return match nanos {
            0 => "0s".to_string(),
            n if n % 1_000_000 == 0 => format!("{}ms", n / 1_000_000),
            n => format!("{}s", f64::from(n) / 1e9),
        };
    }
    let s = if nanos == 0 {
        (secs % 60).to_string()
    } else {
        format!("{}", (secs % 60) as f64 + f64::from(nanos) / 1e9)
    };
    match (secs / 3600, secs / 60 % 60) {
        (0, 0) => format!("{s}s"),
        (0, m) => format!("{m}m{s}s"),
        (h, m) => format!("{h}h{m}m{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_as_go_does() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_secs(20), "20s"),
            (Duration::from_secs(60), "1m0s"),
            (Duration::from_secs(3725), "1h2m5s"),
            (Duration::from_millis(500), "500ms"),
            (Duration::from_millis(1500), "1.5s"),
        ];
        for (d, want) in cases {
            assert_eq!(go_duration(d), want, "{d:?}");
        }
    }
}
