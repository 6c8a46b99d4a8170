//! The `node-lease` loop: the node's heartbeat Lease `kube-node-lease/<node>`
//! (`coordination.k8s.io/v1`), renewed every quarter of its duration (10 s of 40 s), as
//! upstream's lease controller (`component-helpers/apimachinery/lease/controller.go`).
//!
//! With a lease from the last renewal it PUTs that object (its resourceVersion) with a
//! new `renewTime`, no GET; if that fails it falls back to ensuring the lease: GET,
//! 404 → create, retried with a backoff of 200 ms doubling to 7 s while the API server
//! cannot be reached, then updates again. An update is tried at most
//! [`MAX_UPDATE_RETRIES`] times per renewal; a 409 `Conflict` (someone else wrote it)
//! means GET the newer lease and update that. Once the Node's UID is known (the
//! `node-status` loop shares it through [`Heartbeat`]) the lease gets an owner reference
//! to the Node, so it is collected with it. Every call has the heartbeat timeout
//! (min(lease duration, `nodeStatusUpdateFrequency`), upstream's heartbeat client).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;

use apiclient::leases::NODE_LEASE_NAMESPACE;
use apiclient::{ApiClient, ApiError};
use base::loops::{lock, run_jittered, Loops, SpawnError, Stop};

/// Upstream `nodeLeaseRenewIntervalFraction`: renew every quarter of the duration.
pub(crate) const RENEW_INTERVAL_FRACTION: f64 = 0.25;
/// Upstream `maxUpdateRetries`.
pub(crate) const MAX_UPDATE_RETRIES: u32 = 5;
/// Upstream `maxBackoff`: the longest wait between two tries to ensure the lease.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(7);
/// The backoff's start; the first wait is twice it (upstream doubles before sleeping).
pub(crate) const INITIAL_BACKOFF: Duration = Duration::from_millis(100);
/// Upstream's jitter of the renew period (`wait.JitterUntil` 0.04).
pub(crate) const RENEW_JITTER: f64 = 0.04;

/// What the `node-status` and `node-lease` loops share: the Node's UID once known,
/// and whether a heartbeat write failed since the status loop last looked (then it
/// reads the Node again rather than trust its last copy).
#[derive(Debug, Default)]
pub(crate) struct Heartbeat {
    node_uid: Mutex<Option<String>>,
    trouble: AtomicBool,
}

impl Heartbeat {
    /// The Node's UID, once registered or read.
    pub(crate) fn node_uid(&self) -> Option<String> {
        lock(&self.node_uid).clone()
    }

    /// Records the Node's UID.
    pub(crate) fn set_node_uid(&self, uid: Option<String>) {
        if uid.is_some() {
            *lock(&self.node_uid) = uid;
        }
    }

    /// Notes that a write to the API server failed.
    pub(crate) fn note_trouble(&self) {
        self.trouble.store(true, Ordering::Relaxed);
    }

    /// Whether a write failed since the last call (and clears it).
    pub(crate) fn take_trouble(&self) -> bool {
        self.trouble.swap(false, Ordering::Relaxed)
    }
}

/// The lease calls, a seam for the controller's unit tests.
pub(crate) trait LeaseApi: Send {
    /// GET the node's lease.
    fn get(&self) -> Result<Lease, ApiError>;
    /// POST it.
    fn create(&self, lease: &Lease) -> Result<Lease, ApiError>;
    /// PUT it (with its resourceVersion).
    fn update(&self, lease: &Lease) -> Result<Lease, ApiError>;
}

/// The lease calls over the API client.
#[derive(Debug)]
pub(crate) struct ApiLeases {
    client: Arc<ApiClient>,
    name: String,
    timeout: Duration,
}

impl LeaseApi for ApiLeases {
    fn get(&self) -> Result<Lease, ApiError> {
        self.client
            .get_lease(NODE_LEASE_NAMESPACE, &self.name, self.timeout)
    }
    fn create(&self, lease: &Lease) -> Result<Lease, ApiError> {
        self.client.create_lease(lease, self.timeout)
    }
    fn update(&self, lease: &Lease) -> Result<Lease, ApiError> {
        self.client.update_lease(lease, self.timeout)
    }
}

/// Why a renewal failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LeaseError {
    /// Every update attempt failed; the last error.
    #[error("failed {MAX_UPDATE_RETRIES} attempts to update lease {NODE_LEASE_NAMESPACE}/{node}")]
    Retries {
        /// The lease's name.
        node: String,
        /// The last failure.
        source: Box<ApiError>,
    },
}

/// The lease controller's state: the lease from the last successful write.
pub(crate) struct LeaseController {
    api: Box<dyn LeaseApi>,
    node: String,
    duration_seconds: i32,
    heartbeat: Arc<Heartbeat>,
    latest: Option<Lease>,
    /// The clock (tests pass a fixed one).
    now: fn() -> SystemTime,
}

impl std::fmt::Debug for LeaseController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseController")
            .field("node", &self.node)
            .field(
                "latest",
                &self.latest.as_ref().map(|l| &l.metadata.resource_version),
            )
            .finish()
    }
}

/// The heartbeat client's timeout: min(lease duration, `nodeStatusUpdateFrequency`).
pub(crate) fn heartbeat_timeout(lease_duration: Duration, status_frequency: Duration) -> Duration {
    lease_duration.min(status_frequency)
}

impl LeaseController {
    /// A controller of `node`'s lease through `api`.
    pub(crate) fn new(
        api: Box<dyn LeaseApi>,
        node: &str,
        duration_seconds: u32,
        heartbeat: Arc<Heartbeat>,
    ) -> Self {
        LeaseController {
            api,
            node: node.to_string(),
            duration_seconds: i32::try_from(duration_seconds).unwrap_or(i32::MAX),
            heartbeat,
            latest: None,
            now: SystemTime::now,
        }
    }

    /// One renewal (upstream `sync`). `sleep` waits out a backoff and returns true
    /// when the kubelet is stopping (then the renewal ends quietly).
    pub(crate) fn sync(&mut self, sleep: &dyn Fn(Duration) -> bool) -> Result<(), LeaseError> {
        if let Some(latest) = self.latest.clone() {
            match self.retry_update(latest, sleep) {
                Ok(()) => return Ok(()),
                Err(e) => log::info!(
                    "failed to update lease using latest lease, fallback to ensure lease: {}",
                    base::loops::error_chain(&e)
                ),
            }
        }
        let Some((lease, created)) = self.backoff_ensure(sleep) else {
            return Ok(());
        };
        self.latest = Some(lease.clone());
        if created {
            return Ok(());
        }
        self.retry_update(lease, sleep)
    }

    /// Upstream `retryUpdateLease`.
    fn retry_update(
        &mut self,
        mut base: Lease,
        sleep: &dyn Fn(Duration) -> bool,
    ) -> Result<(), LeaseError> {
        let mut last = None;
        for _ in 0..MAX_UPDATE_RETRIES {
            let lease = self.new_lease(Some(&base));
            match self.api.update(&lease) {
                Ok(l) => {
                    self.latest = Some(l);
                    return Ok(());
                }
                Err(e) => {
                    self.heartbeat.note_trouble();
                    log::debug!("failed to update lease: {}", base::loops::error_chain(&e));
                    if e.is_conflict() {
                        // Someone else wrote it: work from the newer one.
                        match self.backoff_ensure(sleep) {
                            Some((l, _)) => base = l,
                            None => return Ok(()),
                        }
                    }
                    last = Some(e);
                }
            }
        }
        self.latest = None;
        Err(LeaseError::Retries {
            node: self.node.clone(),
            source: Box::new(last.unwrap_or_else(|| ApiError::Tls("no attempt".into()))),
        })
    }

    /// Upstream `backoffEnsureLease`: the lease, created if missing (and whether this
    /// call created it), retried until it works. None when stopping.
    fn backoff_ensure(&mut self, sleep: &dyn Fn(Duration) -> bool) -> Option<(Lease, bool)> {
        let mut wait = INITIAL_BACKOFF;
        let mut failures = 0u32;
        loop {
            match self.ensure() {
                Ok(found) => {
                    if failures > 0 {
                        log::info!("node lease reachable again after {failures} failed tries");
                    }
                    return Some(found);
                }
                Err(e) => {
                    self.heartbeat.note_trouble();
                    wait = wait.saturating_mul(2).min(MAX_BACKOFF);
                    let line = format!(
                        "failed to ensure lease exists, will retry in {wait:?}: {}",
                        base::loops::error_chain(&e)
                    );
                    if failures == 0 {
                        log::warn!("{line}");
                    } else {
                        log::debug!("{line}");
                    }
                    failures = failures.saturating_add(1);
                    if sleep(wait) {
                        return None;
                    }
                }
            }
        }
    }

    /// Upstream `ensureLease`.
    fn ensure(&self) -> Result<(Lease, bool), ApiError> {
        match self.api.get() {
            Ok(l) => Ok((l, false)),
            Err(e) if e.is_not_found() => {
                let lease = self.new_lease(None);
                self.api.create(&lease).map(|l| (l, true))
            }
            Err(e) => Err(e),
        }
    }

    /// Upstream `newLease`: `base` (or a new lease) held by this node, with the
    /// duration, renewed now, and the Node as owner once its UID is known.
    fn new_lease(&self, base: Option<&Lease>) -> Lease {
        let mut lease = base.cloned().unwrap_or_else(|| Lease {
            metadata: ObjectMeta {
                name: Some(self.node.clone()),
                namespace: Some(NODE_LEASE_NAMESPACE.into()),
                ..Default::default()
            },
            spec: None,
        });
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = Some(self.node.clone());
        spec.lease_duration_seconds = Some(self.duration_seconds);
        spec.renew_time = Some(micro_time((self.now)()));
        if lease
            .metadata
            .owner_references
            .as_ref()
            .is_none_or(Vec::is_empty)
        {
            if let Some(uid) = self.heartbeat.node_uid() {
                lease.metadata.owner_references = Some(vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: self.node.clone(),
                    uid,
                    ..Default::default()
                }]);
            }
        }
        lease
    }
}

/// A `MicroTime` (RFC 3339, six fraction digits when serialized).
fn micro_time(t: SystemTime) -> MicroTime {
    let micros = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    MicroTime(Timestamp::from_microsecond(micros).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// Starts the `node-lease` loop.
pub(crate) fn start(
    loops: &Loops,
    client: Arc<ApiClient>,
    node: &str,
    duration_seconds: u32,
    timeout: Duration,
    heartbeat: Arc<Heartbeat>,
) -> Result<(), SpawnError> {
    let api = ApiLeases {
        client,
        name: node.to_string(),
        timeout,
    };
    let mut controller = LeaseController::new(Box::new(api), node, duration_seconds, heartbeat);
    let interval =
        Duration::from_secs(u64::from(duration_seconds)).mul_f64(RENEW_INTERVAL_FRACTION);
    loops.spawn("node-lease", move |stop: Stop, handle| {
        run_jittered(&stop, &handle, interval, RENEW_JITTER, |stop| {
            controller.sync(&|d| stop.sleep(d))
        });
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// A scripted API: each call takes the next answer of its kind; every call is logged.
    #[derive(Default)]
    struct Script {
        gets: Mutex<VecDeque<Result<Lease, ApiError>>>,
        creates: Mutex<VecDeque<Result<Lease, ApiError>>>,
        updates: Mutex<VecDeque<Result<Lease, ApiError>>>,
        calls: Arc<Mutex<Vec<String>>>,
    }

    impl LeaseApi for Script {
        fn get(&self) -> Result<Lease, ApiError> {
            lock(&self.calls).push("get".into());
            lock(&self.gets).pop_front().unwrap_or_else(|| Err(down()))
        }
        fn create(&self, lease: &Lease) -> Result<Lease, ApiError> {
            lock(&self.calls).push("create".into());
            let mut l = lease.clone();
            l.metadata.resource_version = Some("1".into());
            lock(&self.creates).pop_front().unwrap_or(Ok(l))
        }
        fn update(&self, lease: &Lease) -> Result<Lease, ApiError> {
            let rv = lease.metadata.resource_version.clone().unwrap_or_default();
            let owner = lease.metadata.owner_references.as_ref().map_or(0, Vec::len);
            lock(&self.calls).push(format!("update rv={rv} owners={owner}"));
            lock(&self.updates).pop_front().unwrap_or_else(|| {
                let mut l = lease.clone();
                l.metadata.resource_version = Some(format!("{rv}+"));
                Ok(l)
            })
        }
    }

    fn status(code: u16, reason: &str) -> ApiError {
        ApiError::Status {
            what: "lease",
            url: "u".into(),
            code,
            reason: reason.into(),
            message: String::new(),
        }
    }

    fn down() -> ApiError {
        status(503, "ServiceUnavailable")
    }

    fn stored(rv: &str) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                namespace: Some(NODE_LEASE_NAMESPACE.into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            spec: Some(LeaseSpec::default()),
        }
    }

    fn controller(script: Script) -> (LeaseController, Arc<Mutex<Vec<String>>>, Arc<Heartbeat>) {
        let calls = script.calls.clone();
        let hb = Arc::new(Heartbeat::default());
        let mut c = LeaseController::new(Box::new(script), "n1", 40, hb.clone());
        c.now = || SystemTime::UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456);
        (c, calls, hb)
    }

    fn no_sleep(_: Duration) -> bool {
        false
    }

    #[test]
    fn a_missing_lease_is_created_then_renewed_without_a_get() {
        let script = Script::default();
        lock(&script.gets).push_back(Err(status(404, "NotFound")));
        let (mut c, calls, hb) = controller(script);
        c.sync(&no_sleep).expect("ok");
        let created = c.latest.clone().expect("ok");
        let spec = created.spec.expect("ok");
        assert_eq!(spec.holder_identity.as_deref(), Some("n1"));
        assert_eq!(spec.lease_duration_seconds, Some(40));
        assert_eq!(
            serde_json::to_value(&spec.renew_time).expect("ok"),
            "2023-11-14T22:13:20.123456Z"
        );
        hb.set_node_uid(Some("uid-1".into()));
        c.sync(&no_sleep).expect("ok");
        c.sync(&no_sleep).expect("ok");
        assert_eq!(
            *lock(&calls),
            [
                "get",
                "create",
                "update rv=1 owners=1",
                "update rv=1+ owners=1"
            ]
        );
        let owner = &c
            .latest
            .clone()
            .expect("ok")
            .metadata
            .owner_references
            .expect("ok")[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("Node", "n1", "uid-1")
        );
    }

    #[test]
    fn a_conflict_gets_the_newer_lease_and_updates_it() {
        let script = Script::default();
        lock(&script.gets).push_back(Ok(stored("5")));
        lock(&script.gets).push_back(Ok(stored("9")));
        lock(&script.updates).push_back(Err(status(409, "Conflict")));
        let (mut c, calls, hb) = controller(script);
        c.sync(&no_sleep).expect("ok");
        assert_eq!(
            *lock(&calls),
            ["get", "update rv=5 owners=0", "get", "update rv=9 owners=0"]
        );
        assert!(hb.take_trouble());
        assert!(!hb.take_trouble());
    }

    #[test]
    fn while_the_api_is_down_ensure_backs_off_doubling_to_seven_seconds() {
        let script = Script::default();
        // Cached lease fails 5 times, then gets fail 8 times, then it answers.
        for _ in 0..5 {
            lock(&script.updates).push_back(Err(down()));
        }
        for _ in 0..8 {
            lock(&script.gets).push_back(Err(down()));
        }
        lock(&script.gets).push_back(Ok(stored("7")));
        let (mut c, calls, _) = controller(script);
        c.latest = Some(stored("3"));
        let waits = Mutex::new(Vec::new());
        c.sync(&|d| {
            lock(&waits).push(d.as_millis());
            false
        })
        .expect("ok");
        assert_eq!(*lock(&waits), [200, 400, 800, 1600, 3200, 6400, 7000, 7000]);
        let calls = lock(&calls).clone();
        assert_eq!(
            calls
                .iter()
                .filter(|c| c.starts_with("update rv=3"))
                .count(),
            5
        );
        assert_eq!(
            calls.last().map(String::as_str),
            Some("update rv=7 owners=0")
        );
    }

    #[test]
    fn five_failed_updates_are_an_error_and_the_next_sync_gets_again() {
        let script = Script::default();
        lock(&script.gets).push_back(Ok(stored("2")));
        for _ in 0..5 {
            lock(&script.updates).push_back(Err(status(500, "InternalError")));
        }
        lock(&script.gets).push_back(Ok(stored("4")));
        let (mut c, calls, _) = controller(script);
        let e = c.sync(&no_sleep).expect_err("an error");
        assert_eq!(
            e.to_string(),
            "failed 5 attempts to update lease kube-node-lease/n1"
        );
        c.sync(&no_sleep).expect("ok");
        assert_eq!(lock(&calls).iter().filter(|c| *c == "get").count(), 2);
    }

    #[test]
    fn stopping_ends_a_backoff() {
        let (mut c, calls, _) = controller(Script::default());
        c.sync(&|_| true).expect("ok");
        assert_eq!(*lock(&calls), ["get"]);
        assert_eq!(
            heartbeat_timeout(Duration::from_secs(40), Duration::from_secs(10)),
            Duration::from_secs(10)
        );
    }
}
