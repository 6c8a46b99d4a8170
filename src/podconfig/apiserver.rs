//! The API server source: the pods bound to this node on a Kubernetes API server, as
//! upstream's `pkg/kubelet/config/apiserver.go` (`NewSourceApiserver`: a reflector over
//! `spec.nodeName=<node>` feeding an undelta store that sends the whole list on every
//! change).
//!
//! One thread, `src-api`. It lists the pods (`resourceVersion=0` at first, the newest
//! state after a 410), sends a snapshot, then watches from the list's resourceVersion
//! with bookmarks, reading the chunked stream line by line ([`ApiClient::watch_pods`]);
//! each ADDED / MODIFIED / DELETED event updates the store and sends the full list
//! (upstream's `SET`); a BOOKMARK only moves the resourceVersion. When the server ends
//! the watch (its `timeoutSeconds`, 5 to 10 minutes, passed) or the stream drops, the
//! watch is opened again from the last resourceVersion; a 410 Gone (as an answer or as
//! an ERROR event) means that version is too old, and the pods are listed again.
//! Errors back off exponentially with jitter, 800 ms doubling to 30 s, as the
//! reflector does; the last error is the loop's error, so `/healthz?verbose` shows a
//! refused token or an unreachable server by name.
//!
//! Pods with a deletionTimestamp are sent like any other: the merge turns the change
//! into a DELETE and the sync loop kills the pod with its grace period. Until the
//! first list succeeds the source is not ready, so after a restart with the API
//! server unreachable, housekeeping kills nothing.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use k8s_openapi::api::core::v1::Pod;

use super::checkpoint::Checkpoints;
use super::{Source, SourceUpdate};
use apiclient::{ApiClient, ApiError, StreamItem, WatchEvent};
use base::loops::{error_chain, LoopHandle, Loops, SpawnError, Stop};
use base::wait::{jitter_fraction, Backoff};

/// Upstream's reflector backoff: 800 ms …
pub(crate) const BACKOFF_MIN: Duration = Duration::from_millis(800);
/// … doubling up to 30 s.
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// A watch that ran this long without error resets the backoff (upstream: 2 min of
/// stability).
pub(crate) const BACKOFF_RESET: Duration = Duration::from_secs(120);
/// Upstream's `minWatchTimeout`: watches last a random time in [5 min, 10 min), so
/// that many kubelets do not reconnect in step.
pub(crate) const MIN_WATCH_TIMEOUT: Duration = Duration::from_secs(300);

/// Upstream's reflector backoff manager: 800 ms doubling to 30 s, jitter 1.0.
pub(crate) const BACKOFF: Backoff = Backoff {
    initial: BACKOFF_MIN,
    cap: BACKOFF_MAX,
    jitter: 1.0,
};

/// The next backoff after `current` failed: doubled, capped.
pub(crate) fn next_backoff(current: Duration) -> Duration {
    BACKOFF.next(current)
}

/// `d` stretched by `1 + fraction` (fraction in [0, 1)): the wait actually slept.
pub(crate) fn with_jitter(d: Duration, fraction: f64) -> Duration {
    BACKOFF.jittered(d, fraction)
}

/// The `timeoutSeconds` of one watch: [5 min, 10 min) from `fraction` in [0, 1).
pub(crate) fn watch_timeout_seconds(fraction: f64) -> u64 {
    let min = MIN_WATCH_TIMEOUT.as_secs();
    min + (min as f64 * fraction.clamp(0.0, 0.999)) as u64
}

/// How a watch ended.
#[derive(Debug, PartialEq)]
pub enum WatchEnd {
    /// Shutdown began.
    Stopped,
    /// The server closed it: watch again from the last resourceVersion.
    Closed,
    /// The resourceVersion is too old (410): list again.
    Gone(String),
}

/// The API source's state: the pods by UID and the resourceVersion they are at.
#[derive(Debug)]
pub struct ApiSource {
    client: Arc<ApiClient>,
    node_name: String,
    updates: Sender<SourceUpdate>,
    /// Shared with the merge: a snapshot copies no pod.
    pods: BTreeMap<String, Arc<Pod>>,
    resource_version: Option<String>,
    /// With `checkpointApiPods`: the checkpoint files, kept as the pods change.
    checkpoints: Option<Checkpoints>,
    /// The checkpointed pods read at start, until they are sent (the first list
    /// failed) or no longer needed (it succeeded).
    offline: Vec<Arc<Pod>>,
    /// How many checkpointed pods were sent (0 once a list succeeded).
    checkpoint_count: usize,
}

impl ApiSource {
    /// A source of the pods bound to `node_name`.
    pub fn new(client: Arc<ApiClient>, node_name: String, updates: Sender<SourceUpdate>) -> Self {
        ApiSource {
            client,
            node_name,
            updates,
            pods: BTreeMap::new(),
            resource_version: None,
            checkpoints: None,
            offline: Vec::new(),
            checkpoint_count: 0,
        }
    }

    /// Keeps a checkpoint of every pod under `root_dir` (see [`super::checkpoint`]),
    /// and runs the ones kept by an earlier run when the first list fails.
    pub(crate) fn with_checkpoints(mut self, root_dir: &std::path::Path) -> Self {
        let (store, pods) = Checkpoints::open(root_dir);
        if !pods.is_empty() {
            log::info!(
                "pod checkpoints: {} API pods kept by the last run, to run if the API \
                 server cannot be reached",
                pods.len()
            );
        }
        self.checkpoints = Some(store);
        self.offline = pods;
        self
    }

    /// The resourceVersion the store is at (None before the first list).
    pub fn resource_version(&self) -> Option<&str> {
        self.resource_version.as_deref()
    }

    /// Lists the pods and sends the snapshot. `fresh`: ask for the newest state
    /// rather than the server's cache (after a 410).
    pub fn list(&mut self, fresh: bool) -> Result<(), ApiError> {
        let rv = if fresh { None } else { Some("0") };
        let list = self.client.list_pods(&self.node_name, rv)?;
        self.pods = base::sort::map(list.items.into_iter().filter_map(|mut p| {
            super::shrink(&mut p);
            p.metadata.uid.clone().map(|u| (u, Arc::new(p)))
        }));
        self.resource_version = Some(list.resource_version);
        self.send();
        self.offline = Vec::new();
        if self.checkpoint_count > 0 {
            log::info!(
                "the API server answers: its {} pods replace the {} run from checkpoints",
                self.pods.len(),
                self.checkpoint_count
            );
            self.checkpoint_count = 0;
        }
        if let Some(c) = &mut self.checkpoints {
            c.sync_all(&self.pods);
        }
        Ok(())
    }

    /// Sends the full list. A closed merge means shutdown; the loop sees it next.
    fn send(&self) -> bool {
        self.updates
            .send(SourceUpdate {
                source: Source::Api,
                pods: self.pods.values().cloned().collect(),
                checkpoint: false,
            })
            .is_ok()
    }

    /// After a first list that failed: runs the checkpointed pods until a list
    /// succeeds. Returns what the loop's error adds (for `/healthz?verbose`).
    fn run_checkpoints(&mut self) -> Option<String> {
        if self.resource_version.is_some() || self.checkpoints.is_none() {
            return None;
        }
        let n = self.offline.len();
        if n > 0 {
            let pods = std::mem::take(&mut self.offline);
            log::info!(
                "the API server cannot be reached: running {n} pods from their checkpoints \
                 until it answers: {}",
                pods.iter()
                    .map(|p| super::full_name(p))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            let _ = self.updates.send(SourceUpdate {
                source: Source::Api,
                pods,
                checkpoint: true,
            });
            self.checkpoint_count = n;
        }
        (self.checkpoint_count > 0).then(|| {
            format!(
                "; running {} pods from their checkpoints until it answers",
                self.checkpoint_count
            )
        })
    }

    /// Watches from the resourceVersion held, applying every event, until the server
    /// closes the stream, the version is gone, or shutdown begins. `on_event` is
    /// called once the watch is open and after every event applied.
    pub fn watch(
        &mut self,
        stop: &Stop,
        timeout_seconds: u64,
        on_event: &mut dyn FnMut(),
    ) -> Result<WatchEnd, ApiError> {
        let rv = self.resource_version.clone().unwrap_or_else(|| "0".into());
        let mut stream = match self
            .client
            .watch_pods(&self.node_name, &rv, timeout_seconds)
        {
            Ok(s) => s,
            Err(e) if e.is_gone() => return Ok(WatchEnd::Gone(e.to_string())),
            Err(e) => return Err(e),
        };
        // Open again: an earlier error (a dropped stream, a server that was down) is over.
        on_event();
        loop {
            if stop.is_stopped() {
                return Ok(WatchEnd::Stopped);
            }
            let event = match stream.next_item()? {
                StreamItem::Idle => continue,
                StreamItem::End => return Ok(WatchEnd::Closed),
                StreamItem::Event(e) => e,
            };
            match event {
                WatchEvent::Added(mut pod) | WatchEvent::Modified(mut pod) => {
                    super::shrink(&mut pod);
                    self.bump(&pod);
                    let uid = pod.metadata.uid.clone();
                    if let Some(uid) = &uid {
                        self.pods.insert(uid.clone(), Arc::new(*pod));
                    }
                    if !self.send() {
                        return Ok(WatchEnd::Stopped);
                    }
                    if let (Some(c), Some(uid)) = (&mut self.checkpoints, &uid) {
                        c.update(uid, self.pods.get(uid).map(|p| &**p));
                    }
                }
                WatchEvent::Deleted(pod) => {
                    self.bump(&pod);
                    if let Some(uid) = &pod.metadata.uid {
                        self.pods.remove(uid);
                    }
                    if !self.send() {
                        return Ok(WatchEnd::Stopped);
                    }
                    if let (Some(c), Some(uid)) = (&mut self.checkpoints, &pod.metadata.uid) {
                        c.update(uid, None);
                    }
                }
                WatchEvent::Bookmark(rv) => {
                    if !rv.is_empty() {
                        self.resource_version = Some(rv);
                    }
                }
                WatchEvent::Error(status) => {
                    let msg = format!(
                        "the watch ended with {} {}: {}",
                        status.code, status.reason, status.message
                    );
                    if status.code == 410 || status.reason == "Expired" || status.reason == "Gone" {
                        return Ok(WatchEnd::Gone(msg));
                    }
                    return Err(ApiError::Status {
                        what: "watch pods",
                        url: self.client.server().to_string(),
                        code: status.code,
                        reason: status.reason,
                        message: status.message,
                    });
                }
            }
            on_event();
        }
    }

    fn bump(&mut self, pod: &Pod) {
        if let Some(rv) = pod
            .metadata
            .resource_version
            .clone()
            .filter(|r| !r.is_empty())
        {
            self.resource_version = Some(rv);
        }
    }

    /// The `src-api` thread: list, watch, re-watch, relist on 410, back off on
    /// errors, until shutdown.
    pub fn run(&mut self, stop: &Stop, handle: &LoopHandle) {
        let mut need_list = true;
        let mut fresh = false;
        let mut backoff = BACKOFF_MIN;
        log::info!(
            "Watching apiserver {} for pods of node {}",
            self.client.server(),
            self.node_name
        );
        loop {
            if stop.is_stopped() {
                return;
            }
            let began = handle.begin_tick();
            let result = if need_list {
                self.list(fresh).map(|()| {
                    need_list = false;
                    fresh = false;
                    None
                })
            } else {
                let opened = Instant::now();
                let timeout = watch_timeout_seconds(jitter_fraction());
                let r = self.watch(stop, timeout, &mut || {
                    let t = handle.begin_tick();
                    handle.end_tick(t, None);
                });
                if opened.elapsed() >= BACKOFF_RESET {
                    backoff = BACKOFF_MIN;
                }
                r.map(Some)
            };
            match result {
                Ok(None) => {
                    handle.end_tick(began, None);
                    backoff = BACKOFF_MIN;
                }
                Ok(Some(WatchEnd::Stopped)) => return,
                Ok(Some(WatchEnd::Closed)) => handle.end_tick(began, None),
                Ok(Some(WatchEnd::Gone(why))) => {
                    log::info!("{why}; listing pods again");
                    handle.end_tick(began, None);
                    need_list = true;
                    fresh = true;
                }
                Err(e @ ApiError::Stream { .. }) => {
                    // A watch that broke off is not yet a failure: watch again (after
                    // the shortest backoff); if the server is gone, that says so.
                    log::info!("{}; watching again", error_chain(&e));
                    handle.end_tick(began, None);
                    if stop.sleep(with_jitter(BACKOFF_MIN, jitter_fraction())) {
                        return;
                    }
                }
                Err(e) => {
                    let mut why = error_chain(&e);
                    if need_list {
                        why.push_str(&self.run_checkpoints().unwrap_or_default());
                    }
                    handle.end_tick(began, Some(why));
                    if stop.sleep(with_jitter(backoff, jitter_fraction())) {
                        return;
                    }
                    backoff = next_backoff(backoff);
                }
            }
        }
    }
}

/// Starts the `src-api` thread.
pub fn start(loops: &Loops, mut source: ApiSource) -> Result<(), SpawnError> {
    log::info!("Adding apiserver pod source");
    // Decodes the API server's JSON (serde recursion): the big stack.
    let loops = loops.with_stack_size(base::loops::BIG_STACK);
    loops.spawn("src-api", move |stop, handle| source.run(&stop, &handle))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_the_cap() {
        let mut d = BACKOFF_MIN;
        let mut seen = vec![d];
        for _ in 0..8 {
            d = next_backoff(d);
            seen.push(d);
        }
        assert_eq!(
            seen.iter().map(|d| d.as_millis()).collect::<Vec<_>>(),
            [800, 1600, 3200, 6400, 12800, 25600, 30000, 30000, 30000]
        );
    }

    #[test]
    fn jitter_and_watch_timeouts_stay_in_range() {
        let rows = [
            (0.0, 1000, 300),
            (0.5, 1500, 450),
            (0.999, 1999, 599),
            (7.0, 2000, 599),
        ];
        for (f, want_ms, want_secs) in rows {
            assert_eq!(
                with_jitter(Duration::from_secs(1), f).as_millis(),
                want_ms,
                "{f}"
            );
            assert_eq!(watch_timeout_seconds(f), want_secs, "{f}");
        }
    }
}
