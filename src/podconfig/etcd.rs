//! The etcd source: pods from every key under a prefix of an etcd cluster
//! (`--etcd-servers`, `--etcd-prefix`, default `/registry/hosts/<nodeName>/`), as the
//! kubelet's early `pkg/kubelet/config/etcd.go` did (it watched
//! `/registry/hosts/<host>/kubelet`), spoken over etcd's v3 JSON gateway (`/v3/`)
//! with ureq, so no gRPC and no async runtime.
//!
//! One thread, `src-etcd`. It reads the whole prefix (`POST /v3/kv/range`), sends a
//! snapshot, then opens a watch (`POST /v3/watch`) from the next revision and reads
//! its stream line by line; every event batch updates the per-key state and sends a
//! full snapshot (upstream's `SET`). A dropped stream (etcd restarted, a network
//! blip) is resumed from the last revision seen, on the next server of the list (fail
//! over), after a backoff; a watch refused because that revision was compacted, or a
//! store whose revision went backwards (etcd's data was replaced), is answered by
//! reading the prefix again.
//!
//! Every key holds one Pod or a PodList (or several YAML documents), JSON or YAML;
//! pods are validated and defaulted as static pods ([`super::manifest`]: name suffix
//! `-<node>`, UID hashed with the key). A key that stops decoding keeps its last good
//! pods and is reported (log + loop error) until fixed; a deleted key's pods go. TLS:
//! `--etcd-cafile`, `--etcd-certfile`, `--etcd-keyfile`.
//!
//! Over 800 lines: the state machine, its unit tests and the fuzzing entry that drives
//! it ([`fuzz_stream`], which needs the source's private state) belong together.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::Sender;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::ByteString;
use serde::Deserialize;
use serde_json::json;
use ureq::Agent;

use super::manifest::{self, Format, ManifestError, Origin, MAX_MANIFEST_BYTES};
use super::{Source, SourceUpdate};
use base::httpclient::servers::{self as client, TlsSettings};
use base::lines::LineReader;
use base::loops::{error_chain, LoopHandle, Loops, SpawnError, Stop};
use base::wait::{jitter_fraction, Backoff};

/// A range read (the whole prefix) must finish within this.
pub(crate) const RANGE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a quiet watch wakes its reader, to see shutdown.
pub const WATCH_WAKEUP: Duration = Duration::from_secs(1);
/// A watch connection is renewed after this (resumed from the last revision, so
/// nothing is missed): the bound on a connection that died without a FIN.
pub(crate) const WATCH_MAX: Duration = Duration::from_secs(300);
/// Retry backoff after an error: client-go's reflector values (800 ms doubling to 30 s).
pub(crate) const BACKOFF_MIN: Duration = Duration::from_millis(800);
/// See [`BACKOFF_MIN`].
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// The retry backoff: [`BACKOFF_MIN`] doubling to [`BACKOFF_MAX`], jitter 0.5.
pub(crate) const BACKOFF: Backoff = Backoff {
    initial: BACKOFF_MIN,
    cap: BACKOFF_MAX,
    jitter: 0.5,
};

/// The settings of the etcd source.
#[derive(Clone, Debug, PartialEq)]
pub struct EtcdConfig {
    /// Client URLs, tried in order (`http://127.0.0.1:2379`).
    pub servers: Vec<String>,
    /// The key prefix.
    pub prefix: String,
    /// TLS (CA, client certificate and key), as PEM.
    pub tls: TlsSettings,
}

impl EtcdConfig {
    /// The client's TLS: the PEM settings (checked even when every server is plain
    /// http), and the host's CAs only for https servers without a CA bundle.
    pub fn tls_config(&self) -> Result<ureq::tls::TlsConfig, String> {
        client::tls_config_for(&self.tls, self.servers.iter().map(String::as_str))
    }
}

/// Why the etcd source cannot read or watch right now. Each message names the server.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// The request failed (refused, timed out…).
    #[error("etcd {server}: {what}")]
    Transport {
        /// What was asked, e.g. `read /registry/hosts/n/`.
        what: String,
        /// The server.
        server: String,
        /// The cause.
        source: ureq::Error,
    },
    /// The server's certificate is not valid yet by this node's clock (see
    /// [`base::clock`]): a condition to wait out, named as such.
    #[error("etcd {server}: {what}: {}", base::clock::not_yet_valid_words(*not_before))]
    ClockBehind {
        /// What was asked.
        what: String,
        /// The server.
        server: String,
        /// The certificate's `notBefore`, when the TLS layer said.
        not_before: Option<SystemTime>,
    },
    /// The server answered with an error.
    #[error("etcd {server}: {what}: {reason}")]
    Answer {
        /// What was asked.
        what: String,
        /// The server.
        server: String,
        /// The status and message.
        reason: String,
    },
    /// The watch stream broke off.
    #[error("etcd {server}: the watch broke off")]
    Stream {
        /// The server.
        server: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The TLS settings cannot be used.
    #[error("etcd TLS settings: {0}")]
    Tls(String),
    /// The pod config merge no longer listens (shutdown).
    #[error("the pod config merge is gone")]
    Disconnected,
}

impl EtcdError {
    /// The error of a request that got no answer: [`EtcdError::ClockBehind`] when the
    /// server's certificate is not valid yet by this node's clock, else a transport
    /// error.
    fn transport(what: String, server: String, source: ureq::Error) -> EtcdError {
        match client::not_valid_yet(&source) {
            Some(not_before) => EtcdError::ClockBehind {
                what,
                server,
                not_before,
            },
            None => EtcdError::Transport {
                what,
                server,
                source,
            },
        }
    }
}

/// One key's state: its last value and the pods of its last good value.
#[derive(Debug)]
struct KeyState {
    value: Vec<u8>,
    pods: Vec<Pod>,
    error: Option<String>,
}

/// How a watch ended.
#[derive(Debug, PartialEq)]
pub enum WatchEnd {
    /// Shutdown began.
    Stopped,
    /// The stream ended or renewed itself: watch again from the last revision.
    Closed,
    /// The revision to resume from is gone: read the prefix again.
    Relist(String),
}

/// The etcd source's state.
pub struct EtcdSource {
    cfg: EtcdConfig,
    /// Index in `cfg.servers` of the server in use.
    current: usize,
    node_name: String,
    updates: Sender<SourceUpdate>,
    agent: Agent,
    keys: BTreeMap<String, KeyState>,
    /// The revision of the state held: the watch resumes after it.
    revision: i64,
}

impl fmt::Debug for EtcdSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdSource")
            .field("servers", &self.cfg.servers)
            .field("prefix", &self.cfg.prefix)
            .field("revision", &self.revision)
            .field("keys", &self.keys.len())
            .finish()
    }
}

#[derive(Deserialize, Default)]
struct Header {
    #[serde(default)]
    revision: Option<String>,
}

#[derive(Deserialize)]
struct Kv {
    key: ByteString,
    #[serde(default)]
    value: Option<ByteString>,
    #[serde(default)]
    mod_revision: Option<String>,
}

#[derive(Deserialize)]
struct RangeResponse {
    #[serde(default)]
    header: Header,
    #[serde(default)]
    kvs: Vec<Kv>,
}

#[derive(Deserialize)]
struct WatchLine {
    result: Option<WatchResult>,
    error: Option<GatewayError>,
}

#[derive(Deserialize)]
struct WatchResult {
    #[serde(default)]
    header: Header,
    #[serde(default)]
    created: bool,
    #[serde(default)]
    canceled: bool,
    #[serde(default)]
    compact_revision: Option<String>,
    #[serde(default)]
    cancel_reason: Option<String>,
    #[serde(default)]
    events: Vec<Event>,
}

#[derive(Deserialize)]
struct Event {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    kv: Kv,
}

#[derive(Deserialize)]
struct GatewayError {
    #[serde(default)]
    message: String,
}

fn rev(s: &Option<String>) -> i64 {
    s.as_deref().and_then(|r| r.parse().ok()).unwrap_or(0)
}

/// The end of a prefix range: the prefix with its last byte incremented (bytes of
/// 0xff dropped first), as etcd's `clientv3.GetPrefixRangeEnd`.
pub(crate) fn prefix_range_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every byte was 0xff (or the prefix is empty): "to the end of the keyspace".
    vec![0]
}

fn b64(bytes: &[u8]) -> serde_json::Value {
    serde_json::to_value(ByteString(bytes.to_vec())).unwrap_or_default()
}

impl EtcdSource {
    /// A source over `cfg` for node `node_name`. Fails only on unusable TLS settings.
    pub fn new(
        cfg: EtcdConfig,
        node_name: String,
        updates: Sender<SourceUpdate>,
    ) -> Result<EtcdSource, EtcdError> {
        let tls = cfg.tls_config().map_err(EtcdError::Tls)?;
        Ok(EtcdSource {
            cfg,
            current: 0,
            node_name,
            updates,
            agent: client::agent(tls, RANGE_TIMEOUT),
            keys: BTreeMap::new(),
            revision: 0,
        })
    }

    /// The server in use.
    pub fn server(&self) -> &str {
        self.cfg
            .servers
            .get(self.current)
            .map(String::as_str)
            .unwrap_or_default()
    }

    /// Moves to the next server of the list.
    fn fail_over(&mut self) {
        if self.cfg.servers.len() > 1 {
            self.current = (self.current + 1) % self.cfg.servers.len();
            log::info!("etcd: failing over to {}", self.server());
        }
    }

    /// The keys that do not decode, one line each; None when every key is good.
    pub fn key_errors(&self) -> Option<String> {
        let errors: Vec<&str> = self
            .keys
            .values()
            .filter_map(|k| k.error.as_deref())
            .collect();
        (!errors.is_empty()).then(|| errors.join("\n"))
    }

    /// The pods of every key, by key.
    pub fn pods(&self) -> Vec<Pod> {
        self.keys.values().flat_map(|k| k.pods.clone()).collect()
    }

    /// Reads the whole prefix, from the first server that answers (starting with the
    /// one in use), and sends the snapshot.
    pub fn list(&mut self) -> Result<(), EtcdError> {
        let mut last_err = None;
        for _ in 0..self.cfg.servers.len().max(1) {
            match self.range() {
                Ok(resp) => return self.apply_range(resp),
                Err(e) => {
                    log::debug!("{}", error_chain(&e));
                    last_err = Some(e);
                    self.fail_over();
                }
            }
        }
        Err(last_err.unwrap_or(EtcdError::Disconnected))
    }

    /// Takes a range read's answer as the whole state (keys whose value did not
    /// change keep their decoded pods) and sends the snapshot.
    fn apply_range(&mut self, resp: RangeResponse) -> Result<(), EtcdError> {
        let mut keys = std::mem::take(&mut self.keys);
        let mut fresh = BTreeMap::new();
        for kv in resp.kvs {
            let key = String::from_utf8_lossy(&kv.key.0).into_owned();
            let value = kv.value.map(|v| v.0).unwrap_or_default();
            let old = keys.remove(&key);
            fresh.insert(key.clone(), self.decode(&key, value, old));
        }
        self.keys = fresh;
        self.revision = rev(&resp.header.revision);
        self.send()
    }

    fn range(&self) -> Result<RangeResponse, EtcdError> {
        let server = self.server().to_string();
        let what = format!("read {}", self.cfg.prefix);
        let prefix = self.cfg.prefix.as_bytes();
        let body = json!({"key": b64(prefix), "range_end": b64(&prefix_range_end(prefix))});
        let resp = self
            .agent
            .post(&format!("{server}/v3/kv/range"))
            .header("Content-Type", "application/json")
            .send(body.to_string())
            .map_err(|source| EtcdError::transport(what.clone(), server.clone(), source))?;
        let code = resp.status().as_u16();
        let bytes = resp
            .into_body()
            .into_with_config()
            .limit(64 * MAX_MANIFEST_BYTES)
            .read_to_vec()
            .map_err(|source| EtcdError::transport(what.clone(), server.clone(), source))?;
        if !(200..300).contains(&code) {
            return Err(EtcdError::Answer {
                what,
                server,
                reason: format!("{code}: {}", String::from_utf8_lossy(&bytes).trim()),
            });
        }
        serde_json::from_slice(&bytes).map_err(|e| EtcdError::Answer {
            what,
            server,
            reason: format!("the answer does not decode: {e}"),
        })
    }

    /// Decodes one key's value; a bad value keeps the key's last good pods.
    fn decode(&self, key: &str, value: Vec<u8>, old: Option<KeyState>) -> KeyState {
        if let Some(old) = old.as_ref().filter(|o| o.value == value) {
            return KeyState {
                value,
                pods: old.pods.clone(),
                error: old.error.clone(),
            };
        }
        match pods_from_value(key, &value, &self.node_name) {
            Ok(pods) => KeyState {
                value,
                pods,
                error: None,
            },
            Err(e) => {
                let msg = e.to_string();
                log::warn!("{msg}");
                KeyState {
                    value,
                    pods: old.map(|o| o.pods).unwrap_or_default(),
                    error: Some(msg),
                }
            }
        }
    }

    fn send(&self) -> Result<(), EtcdError> {
        self.updates
            .send(SourceUpdate {
                source: Source::Etcd,
                pods: self.pods().into_iter().map(std::sync::Arc::new).collect(),
                checkpoint: false,
            })
            .map_err(|_| EtcdError::Disconnected)
    }

    /// Watches the prefix from the revision after the state held, applying and sending
    /// every event batch, until the stream ends, shutdown begins, or the revision is
    /// gone. `on_progress` is called after every batch and when the watch is set up.
    pub fn watch(
        &mut self,
        stop: &Stop,
        on_progress: &mut dyn FnMut(&EtcdSource),
    ) -> Result<WatchEnd, EtcdError> {
        let server = self.server().to_string();
        let request = ureq::http::Request::builder()
            .method("POST")
            .uri(format!("{server}/v3/watch"))
            .header("Content-Type", "application/json")
            .body(self.watch_request())
            .map_err(|e| EtcdError::Transport {
                what: "watch".into(),
                server: server.clone(),
                source: ureq::Error::Http(e),
            })?;
        let request = self
            .agent
            .configure_request(request)
            .timeout_global(Some(WATCH_MAX))
            .timeout_recv_response(Some(RANGE_TIMEOUT))
            .timeout_per_read(Some(WATCH_WAKEUP))
            .build();
        let resp = self.agent.run(request).map_err(|source| {
            EtcdError::transport(format!("watch {}", self.cfg.prefix), server.clone(), source)
        })?;
        let code = resp.status().as_u16();
        if !(200..300).contains(&code) {
            return Err(EtcdError::Answer {
                what: "watch".into(),
                server,
                reason: format!("status {code}"),
            });
        }
        let reader = resp.into_body().into_with_config().limit(u64::MAX).reader();
        let mut lines = LineReader::new(reader, client::MAX_LINE);
        let opened = Instant::now();
        loop {
            if stop.is_stopped() {
                return Ok(WatchEnd::Stopped);
            }
            let line = match lines.next_line() {
                Ok(Some(l)) => l,
                Ok(None) => return Ok(WatchEnd::Closed),
                Err(e) if client::is_read_timeout(&e) => continue,
                // The connection's own lifetime is up: renew it.
                Err(_) if opened.elapsed() >= WATCH_MAX => return Ok(WatchEnd::Closed),
                Err(source) => return Err(EtcdError::Stream { server, source }),
            };
            if let Some(end) = self.apply_watch_line(&server, &line, on_progress)? {
                return Ok(end);
            }
        }
    }

    /// The body of the watch request: the prefix, from the revision after the state
    /// held. The revision is etcd's (any int64 it sends): saturating, so a store at
    /// `i64::MAX` cannot overflow it.
    fn watch_request(&self) -> String {
        let prefix = self.cfg.prefix.as_bytes();
        json!({"create_request": {
            "key": b64(prefix),
            "range_end": b64(&prefix_range_end(prefix)),
            "start_revision": self.revision.saturating_add(1).to_string(),
        }})
        .to_string()
    }

    /// One line of a watch stream: applies its events and sends the snapshot (then
    /// `on_progress`), or says how the watch ends (`Some`).
    fn apply_watch_line(
        &mut self,
        server: &str,
        line: &[u8],
        on_progress: &mut dyn FnMut(&EtcdSource),
    ) -> Result<Option<WatchEnd>, EtcdError> {
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(None);
        }
        let parsed: WatchLine = serde_json::from_slice(line).map_err(|e| EtcdError::Answer {
            what: "watch".into(),
            server: server.to_string(),
            reason: format!("a watch line does not decode: {e}"),
        })?;
        if let Some(err) = parsed.error {
            return Err(EtcdError::Answer {
                what: "watch".into(),
                server: server.to_string(),
                reason: err.message,
            });
        }
        let Some(result) = parsed.result else {
            return Ok(None);
        };
        if result.compact_revision.is_some() && rev(&result.compact_revision) > 0 {
            return Ok(Some(WatchEnd::Relist(format!(
                "revision {} was compacted (compact revision {})",
                self.revision.saturating_add(1),
                rev(&result.compact_revision)
            ))));
        }
        if result.canceled {
            return Ok(Some(WatchEnd::Relist(format!(
                "the watch was canceled: {}",
                result.cancel_reason.unwrap_or_default()
            ))));
        }
        if result.created {
            let store = rev(&result.header.revision);
            if store < self.revision {
                // etcd's data was replaced: revisions start again below ours.
                return Ok(Some(WatchEnd::Relist(format!(
                    "the store's revision {store} is below the last seen {}",
                    self.revision
                ))));
            }
            on_progress(self);
            return Ok(None);
        }
        if result.events.is_empty() {
            return Ok(None); // a progress notification
        }
        for ev in result.events {
            let key = String::from_utf8_lossy(&ev.kv.key.0).into_owned();
            self.revision = self.revision.max(rev(&ev.kv.mod_revision));
            if ev.kind.as_deref() == Some("DELETE") {
                self.keys.remove(&key);
            } else {
                let value = ev.kv.value.map(|v| v.0).unwrap_or_default();
                let old = self.keys.remove(&key);
                let state = self.decode(&key, value, old);
                self.keys.insert(key, state);
            }
        }
        self.send()?;
        on_progress(self);
        Ok(None)
    }

    /// The `src-etcd` thread: list, watch, resume, relist, fail over, until shutdown.
    pub fn run(&mut self, stop: &Stop, handle: &LoopHandle) {
        let mut listed = false;
        let mut backoff = BACKOFF_MIN;
        loop {
            if stop.is_stopped() {
                return;
            }
            let began = handle.begin_tick();
            if !listed {
                match self.list() {
                    Ok(()) => {
                        listed = true;
                        handle.end_tick(began, self.key_errors());
                    }
                    Err(EtcdError::Disconnected) => return,
                    Err(e) => {
                        handle.end_tick(began, Some(error_chain(&e)));
                        if stop.sleep(jittered(backoff)) {
                            return;
                        }
                        backoff = BACKOFF.next(backoff);
                        continue;
                    }
                }
            }
            let began = handle.begin_tick();
            let mut progressed = false;
            let result = self.watch(stop, &mut |s| {
                progressed = true;
                handle.end_tick(began, s.key_errors());
            });
            if progressed {
                backoff = BACKOFF_MIN;
            }
            match result {
                Ok(WatchEnd::Stopped) => return,
                Ok(WatchEnd::Closed) if progressed => continue,
                Ok(WatchEnd::Closed) => {
                    // Closed before it was even set up: do not spin on a server that
                    // hangs up at once.
                    if stop.sleep(jittered(backoff)) {
                        return;
                    }
                    backoff = BACKOFF.next(backoff);
                }
                Ok(WatchEnd::Relist(why)) => {
                    log::info!(
                        "etcd {}: {why}; reading {} again",
                        self.server(),
                        self.cfg.prefix
                    );
                    listed = false;
                    continue;
                }
                Err(EtcdError::Disconnected) => return,
                Err(e) => {
                    let began = handle.begin_tick();
                    handle.end_tick(began, Some(error_chain(&e)));
                    self.fail_over();
                    if stop.sleep(jittered(backoff)) {
                        return;
                    }
                    backoff = BACKOFF.next(backoff);
                }
            }
        }
    }
}

/// A backoff stretched by a random factor in [1, 1.5) (upstream's jitter 0.5), so that
/// many kubelets do not retry in step.
pub fn jittered(d: Duration) -> Duration {
    BACKOFF.jittered(d, jitter_fraction())
}

/// Decodes one key's value into static pods.
pub(crate) fn pods_from_value(
    key: &str,
    value: &[u8],
    node_name: &str,
) -> Result<Vec<Pod>, ManifestError> {
    let origin_name = format!("etcd:{key}");
    let origin = Origin::Url(&origin_name);
    let fail = |kind| ManifestError {
        origin: origin_name.clone(),
        document: None,
        item: None,
        kind,
    };
    if value.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(fail(manifest::ManifestErrorKind::TooLarge));
    }
    let text =
        std::str::from_utf8(value).map_err(|_| fail(manifest::ManifestErrorKind::NotUtf8))?;
    // JSON is YAML: one parser reads both, and multi-document YAML too.
    let pods = manifest::pods_from_str(text, Format::Yaml, origin, node_name);
    if value.len() >= base::malloc::TRIM_AFTER_BYTES {
        base::malloc::release_freed_memory();
    }
    pods
}

/// Fuzzing (`crate::fuzzing`): etcd's answers through the source's state machine.
/// `lines`: one per line, a range read's answer (`R` then its JSON) or a watch line;
/// else all of `data` is one watch line. After each, the snapshot sent is taken and
/// the next watch request made, as [`EtcdSource::run`] would.
#[cfg(feature = "fuzzing")]
pub(crate) fn fuzz_stream(data: &[u8], lines: bool, node_name: &str) {
    static AGENT: std::sync::OnceLock<Agent> = std::sync::OnceLock::new();
    let (tx, rx) = crossbeam_channel::unbounded();
    let mut source = EtcdSource {
        cfg: EtcdConfig {
            servers: vec!["http://e1:2379".into(), "http://e2:2379".into()],
            prefix: format!("/registry/hosts/{node_name}/"),
            tls: TlsSettings::default(),
        },
        current: 0,
        node_name: node_name.to_string(),
        updates: tx,
        agent: AGENT.get_or_init(Agent::new_with_defaults).clone(),
        keys: BTreeMap::new(),
        revision: 0,
    };
    let server = source.server().to_string();
    let mut pieces = vec![data];
    if lines {
        pieces = data.split(|b| *b == b'\n').collect();
    }
    for line in pieces {
        let _ = match line.split_first().filter(|_| lines) {
            Some((b'R', body)) => serde_json::from_slice::<RangeResponse>(body)
                .map_err(|e| e.to_string())
                .and_then(|resp| source.apply_range(resp).map_err(|e| e.to_string())),
            _ => source
                .apply_watch_line(&server, line, &mut |_| {})
                .map(drop)
                .map_err(|e| {
                    source.fail_over();
                    e.to_string()
                }),
        };
        let _ = (
            rx.try_iter().count(),
            source.watch_request(),
            source.key_errors(),
        );
    }
}

/// Starts the `src-etcd` thread.
pub fn start(loops: &Loops, mut source: EtcdSource) -> Result<(), SpawnError> {
    log::info!(
        "adding etcd pod source servers={:?} prefix={}",
        source.cfg.servers,
        source.cfg.prefix
    );
    // Decodes manifests from etcd (serde recursion): the big stack.
    let loops = loops.with_stack_size(base::loops::BIG_STACK);
    loops.spawn("src-etcd", move |stop, handle| source.run(&stop, &handle))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_certificate_not_yet_valid_names_the_clock() {
        let e = EtcdError::transport(
            "read /registry/hosts/n/".into(),
            "https://e:2379".into(),
            base::testutil::not_valid_yet_error(1_796_083_200),
        );
        assert_eq!(
            e.to_string(),
            "etcd https://e:2379: read /registry/hosts/n/: the server's certificate is not \
             valid until 2026-12-01T00:00:00Z by this node's clock: is the clock behind (no \
             RTC, NTP not yet synced)?"
        );
        assert!(std::error::Error::source(&e).is_none(), "no changing cause");
        let e = EtcdError::transport(
            "watch".into(),
            "https://e:2379".into(),
            ureq::Error::ConnectionFailed,
        );
        assert!(matches!(e, EtcdError::Transport { .. }), "{e:?}");
    }

    #[test]
    fn prefix_range_end_increments_the_last_byte() {
        let rows: &[(&[u8], &[u8])] = &[
            (b"/registry/hosts/n/", b"/registry/hosts/n0"),
            (b"a\xff", b"b"),
            (b"\xff\xff", b"\0"),
            (b"", b"\0"),
        ];
        for (prefix, want) in rows {
            assert_eq!(prefix_range_end(prefix), *want, "{prefix:?}");
        }
    }

    #[test]
    fn values_decode_as_static_pods_named_by_key() {
        let pods = pods_from_value(
            "/registry/hosts/n/web",
            br#"{"kind":"Pod","metadata":{"name":"web"},"spec":{"containers":[{"name":"c","image":"i"}]}}"#,
            "n",
        )
        .expect("valid");
        assert_eq!(pods[0].metadata.name.as_deref(), Some("web-n"));
        let other = pods_from_value(
            "/registry/hosts/n/web2",
            br#"{"kind":"Pod","metadata":{"name":"web"},"spec":{"containers":[{"name":"c","image":"i"}]}}"#,
            "n",
        )
        .expect("valid");
        assert_ne!(
            pods[0].metadata.uid, other[0].metadata.uid,
            "the key is in the UID"
        );
        let e = pods_from_value("/k", b"kind: Pod\n", "n").expect_err("no name");
        assert_eq!(
            e.to_string(),
            "etcd:/k: document 0: invalid pod: name is needed for the pod"
        );
    }

    #[test]
    fn a_value_over_the_manifest_cap_is_refused_undecoded() {
        let cap = usize::try_from(MAX_MANIFEST_BYTES).expect("fits");
        let e = pods_from_value("/k", &vec![b' '; cap + 1], "n").expect_err("too big");
        assert_eq!(e.to_string(), "etcd:/k: larger than 3 MiB, not read");
        // At the cap it is read (and empty, so no pods).
        assert!(pods_from_value("/k", &vec![b' '; cap], "n").is_ok_and(|p| p.is_empty()));
    }

    #[test]
    fn watch_lines_decode() {
        let put: WatchLine = serde_json::from_str(
            r#"{"result":{"header":{"revision":"7"},"events":[{"kv":{"key":"L2E=","value":"eA==","mod_revision":"7"}},{"type":"DELETE","kv":{"key":"L2I=","mod_revision":"7"}}]}}"#,
        )
        .expect("decodes");
        let r = put.result.expect("result");
        assert_eq!(r.events.len(), 2);
        assert_eq!(r.events[0].kv.key.0, b"/a");
        assert_eq!(
            r.events[0].kv.value.as_ref().map(|v| v.0.clone()),
            Some(b"x".to_vec())
        );
        assert_eq!(r.events[1].kind.as_deref(), Some("DELETE"));
        let compacted: WatchLine = serde_json::from_str(
            r#"{"result":{"header":{"revision":"9"},"canceled":true,"compact_revision":"5"}}"#,
        )
        .expect("decodes");
        assert_eq!(rev(&compacted.result.expect("result").compact_revision), 5);
    }

    #[test]
    fn jitter_stretches_by_at_most_half() {
        for _ in 0..50 {
            let d = jittered(Duration::from_secs(2));
            assert!(
                d >= Duration::from_secs(2) && d < Duration::from_secs(3),
                "{d:?}"
            );
        }
    }
}
