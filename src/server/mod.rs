//! The kubelet's HTTP ports' handlers. One file per port, one `match` on (method,
//! path segments) per port; the `wire` crate's bounded transport (`wire::server::http`) is under
//! all of them and the only code that knows the wire.
//!
//! Ports are bound by `wire::server::bind` during start-up, so a port in use is a
//! start-up error with the address in it. Each port is then served by its own named
//! poller thread (`srv-healthz`, `srv-readonly`) and a fixed pool of workers
//! (`srv-readonly-0` …).

pub(crate) mod auth;
pub(crate) mod debug;
pub(crate) mod healthz;
pub(crate) mod http_metrics;
pub(crate) mod kubelet;
pub(crate) mod logfiles;
pub(crate) mod logs;
pub(crate) mod push;
pub(crate) mod readonly;
pub(crate) mod streams;

use std::time::Instant;

use crate::health::HealthChecks;
use wire::server::{Reply, Req};

/// `/healthz` and `/healthz/<check>`, shared by the healthz and read-only ports.
/// Upstream's format: `ok`, or one `[+]name ok` / `[-]name failed: reason` line per check
/// and `healthz check failed`; `?verbose` lists every check (and loop warnings) even
/// when all pass. Unlike upstream, failing reasons are shown, not withheld.
pub(crate) fn healthz(checks: &HealthChecks, req: &Req, sub: Option<&str>) -> Reply {
    let now = Instant::now();
    if req.method != "GET" && req.method != "HEAD" {
        return Reply::method_not_allowed("GET, HEAD");
    }
    if let Some(name) = sub {
        return match checks.check(name, now) {
            None => Reply::not_found(),
            Some(Ok(())) => Reply::text(200, "ok"),
            Some(Err(e)) => Reply::text(500, format!("internal server error: {e}\n")),
        };
    }
    let results = checks.all(now);
    let failed = results.iter().any(|(_, r)| r.is_err());
    let verbose = req.has_query("verbose");
    if !failed && !verbose {
        return Reply::text(200, "ok");
    }
    let mut body = String::new();
    for (name, r) in &results {
        match r {
            Ok(()) => body.push_str(&format!("[+]{name} ok\n")),
            Err(e) => body.push_str(&format!("[-]{name} failed: {e}\n")),
        }
    }
    if verbose {
        for (name, e) in checks.warnings() {
            body.push_str(&format!("warning: {name}: {e}\n"));
        }
    }
    if failed {
        body.push_str("healthz check failed\n");
        Reply::text(500, body)
    } else {
        body.push_str("healthz check passed\n");
        Reply::text(200, body)
    }
}
