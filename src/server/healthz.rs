//! The healthz port (`--healthz-port`, default 127.0.0.1:10248): `/healthz` and its
//! sub-checks. Upstream's answers `ok` whenever the process serves HTTP; ours runs the
//! real checks (sync loop, PLEG, runtime), so systemd scripts polling it learn the truth.

use super::healthz;
use crate::health::HealthChecks;
use wire::server::{Reply, Req};

/// Routes one request on the healthz port.
pub(crate) fn handle(checks: &HealthChecks, req: &Req) -> Reply {
    match req.path().as_slice() {
        ["healthz"] => healthz(checks, req, None),
        ["healthz", sub] => healthz(checks, req, Some(sub)),
        _ => Reply::not_found(),
    }
}
