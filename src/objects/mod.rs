//! The ConfigMaps, Secrets and service account tokens this node's pods reference
//! (upstream `pkg/kubelet/configmap`, `pkg/kubelet/secret` with the `Cache` change
//! detection strategy, and `pkg/kubelet/token`): what volumes, env and image pulls
//! read, fetched from the API server only for the pods bound here, which is what the
//! Node authorizer allows a kubelet.
//!
//! Strategy: a TTL cache per object (upstream's `cacheBasedManager`): an object
//! fetched less than [`CACHE_TTL`] ago is served from memory, an older one is fetched
//! again on use; a pod seen for the first time invalidates the objects it references
//! (upstream `AddReference`), so a new pod never starts with stale data. Errors are
//! not cached (a missing ConfigMap is asked for again on the next sync). Upstream's
//! default, `Watch`, would hold one watch connection (here one thread) per object;
//! on a small board a GET per object per minute is cheaper.
//!
//! Fetches run on the pod worker that needs them, so they are bounded: each is one
//! request of at most [`FETCH_TIMEOUT`], and after one that could not reach the API
//! server, fetches fail at once for [`UNAVAILABLE_FOR`] (as the kubelet port's
//! webhooks do), so a dead API server holds no worker longer than one timeout. While
//! the API server is unreachable, an object fetched before is served as last seen
//! (as upstream's watch-based store would); only an object never fetched fails.
//!
//! The `object-refresh` loop (in `volume::refresh`) keeps the copies that running
//! pods' volumes read fresher than the TTL and learns from [`refresh`] which objects
//! changed, so updates reach running pods' files without waiting for their syncs.
//!
//! Without `--kubeconfig` (a standalone node) every lookup fails with a clear error.

pub(crate) mod refresh;
pub(crate) mod token;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};

use apiclient::{ApiClient, ApiError};
use base::loops::lock;

/// One fetch's budget: it runs on a pod worker that other pods may wait for.
pub(crate) const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Upstream `defaultTTL` of the cache-based managers (without the node's TTL
/// annotation, which the TTL controller sets from the cluster's size).
pub(crate) const CACHE_TTL: Duration = Duration::from_secs(60);
/// After a fetch could not reach the API server, fetches fail at once for this long.
pub(crate) const UNAVAILABLE_FOR: Duration = Duration::from_secs(3);
/// A cached object no pod asked for in this long is dropped (its pods are gone).
const UNUSED_FOR: Duration = Duration::from_secs(10 * 60);

/// The kinds of objects read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A core/v1 ConfigMap.
    ConfigMap,
    /// A core/v1 Secret.
    Secret,
    /// A service account token (TokenRequest).
    Token,
}

impl Kind {
    /// The name upstream's messages use (`configmap "x" not found`).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::ConfigMap => "configmap",
            Kind::Secret => "secret",
            Kind::Token => "serviceaccount token",
        }
    }
}

/// Why an object could not be had.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// The API server says it does not exist.
    #[error("{} {name:?} not found", .kind.as_str())]
    NotFound {
        /// Its kind.
        kind: Kind,
        /// Its name.
        name: String,
    },
    /// No API server is configured (no `--kubeconfig`).
    #[error("cannot get {} {object}: no API server is configured (--kubeconfig)", .kind.as_str())]
    NoClient {
        /// Its kind.
        kind: Kind,
        /// `namespace/name`.
        object: String,
    },
    /// The request failed.
    #[error("{}", api_failure(.kind, .object))]
    Api {
        /// Its kind.
        kind: Kind,
        /// `namespace/name`.
        object: String,
        /// The cause (boxed: it is large, and errors travel through every sync).
        source: Box<ApiError>,
    },
    /// A fetch moments ago could not reach the API server: not asked again yet.
    #[error("cannot get {} {object}: the API server was unreachable less than {UNAVAILABLE_FOR:?} ago", .kind.as_str())]
    Unavailable {
        /// Its kind.
        kind: Kind,
        /// `namespace/name`.
        object: String,
    },
}

/// [`ObjectError::Api`]'s message: a token's in upstream's token manager's words, an
/// object's in its cache-based manager's.
fn api_failure(kind: &Kind, object: &str) -> String {
    if *kind == Kind::Token {
        format!("failed to fetch token for {object}")
    } else {
        format!("failed to get object {object} ({})", kind.as_str())
    }
}

impl ObjectError {
    /// The object does not exist (an `optional` reference then counts as empty).
    pub fn is_not_found(&self) -> bool {
        matches!(self, ObjectError::NotFound { .. })
    }

    /// The error with its whole cause, as events and waiting messages show it.
    pub fn message(&self) -> String {
        base::loops::error_chain(self)
    }
}

/// The API calls the manager makes: the seam its unit tests replace.
pub trait Fetcher: Send + Sync + fmt::Debug {
    /// `GET` one ConfigMap (`from_cache`: a refresh, any recent version will do).
    fn config_map(
        &self,
        namespace: &str,
        name: &str,
        from_cache: bool,
    ) -> Result<ConfigMap, ApiError>;
    /// `GET` one Secret.
    fn secret(&self, namespace: &str, name: &str, from_cache: bool) -> Result<Secret, ApiError>;
    /// A TokenRequest for service account `namespace/name`.
    fn token(
        &self,
        namespace: &str,
        name: &str,
        request: &TokenRequest,
    ) -> Result<TokenRequest, ApiError>;
}

impl Fetcher for ApiClient {
    fn config_map(
        &self,
        namespace: &str,
        name: &str,
        from_cache: bool,
    ) -> Result<ConfigMap, ApiError> {
        self.get_config_map(namespace, name, from_cache, FETCH_TIMEOUT)
    }
    fn secret(&self, namespace: &str, name: &str, from_cache: bool) -> Result<Secret, ApiError> {
        self.get_secret(namespace, name, from_cache, FETCH_TIMEOUT)
    }
    fn token(
        &self,
        namespace: &str,
        name: &str,
        request: &TokenRequest,
    ) -> Result<TokenRequest, ApiError> {
        self.request_token(namespace, name, request, FETCH_TIMEOUT)
    }
}

/// A cached object.
#[derive(Debug)]
struct Entry<T> {
    value: Arc<T>,
    fetched: Instant,
    used: Instant,
}

type Key = (String, String);

#[derive(Debug, Default)]
struct State {
    config_maps: HashMap<Key, Entry<ConfigMap>>,
    secrets: HashMap<Key, Entry<Secret>>,
    /// Pods seen (by UID): a new one invalidates what it references.
    pods: HashSet<String>,
    /// Fetches fail at once until then.
    unavailable_until: Option<Instant>,
    /// Per object: the hash of the content last seen (None: not found) and the
    /// generation at which it last changed (see [`refresh`]).
    changes: HashMap<(Kind, String, String), (Option<u64>, u64)>,
    /// Steps at every change of any object's content.
    generation: u64,
}

/// The ConfigMaps, Secrets and tokens of this node's pods, shared by the pod workers,
/// the image pullers' requesters and the volume manager. Its lock is held only to read
/// or write the cache, never across a request.
#[derive(Debug)]
pub struct ObjectManager {
    fetcher: Option<Arc<dyn Fetcher>>,
    ttl: Duration,
    state: Mutex<State>,
    tokens: token::TokenManager,
    clock: refresh::Clock,
}

impl ObjectManager {
    /// A manager fetching through `fetcher` (None: a standalone node).
    pub fn new(fetcher: Option<Arc<dyn Fetcher>>) -> ObjectManager {
        ObjectManager {
            fetcher,
            ttl: CACHE_TTL,
            state: Mutex::new(State::default()),
            tokens: token::TokenManager::default(),
            clock: refresh::Clock::default(),
        }
    }

    /// The same with another cache TTL (tests).
    pub fn with_ttl(mut self, ttl: Duration) -> ObjectManager {
        self.ttl = ttl;
        self
    }

    /// Notes that `pod` references its objects (upstream `RegisterPod`): the first
    /// time a pod is seen, the objects it references are fetched afresh on next use.
    pub fn register_pod(&self, pod: &Pod) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let mut st = lock(&self.state);
        if !st.pods.insert(uid) {
            return;
        }
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let refs = references(pod);
        for name in refs.config_maps {
            st.config_maps.remove(&(ns.clone(), name));
        }
        for name in refs.secrets {
            st.secrets.remove(&(ns.clone(), name));
        }
    }

    /// Forgets a pod that is gone (upstream `UnregisterPod`, and the token manager's
    /// `DeleteServiceAccountToken`).
    pub fn forget_pod(&self, uid: &str) {
        lock(&self.state).pods.remove(uid);
        self.tokens.forget_pod(uid);
    }

    /// A ConfigMap of `namespace`.
    pub fn config_map(&self, namespace: &str, name: &str) -> Result<Arc<ConfigMap>, ObjectError> {
        self.get(
            Kind::ConfigMap,
            namespace,
            name,
            |s| &mut s.config_maps,
            |f, from_cache| f.config_map(namespace, name, from_cache),
        )
    }

    /// A Secret of `namespace`.
    pub fn secret(&self, namespace: &str, name: &str) -> Result<Arc<Secret>, ObjectError> {
        self.get(
            Kind::Secret,
            namespace,
            name,
            |s| &mut s.secrets,
            |f, from_cache| f.secret(namespace, name, from_cache),
        )
    }

    /// A token of service account `namespace/sa` for `pod`, with `audience` (None: the
    /// API server's) and `expiration_seconds`, from the token cache or a TokenRequest
    /// (upstream `GetServiceAccountToken`).
    pub fn service_account_token(
        &self,
        pod: &Pod,
        service_account: &str,
        audience: Option<&str>,
        expiration_seconds: i64,
    ) -> Result<String, ObjectError> {
        let key = token_key(pod, service_account, audience, expiration_seconds);
        let object = format!("{}/{}", key.namespace, key.service_account);
        let Some(fetcher) = &self.fetcher else {
            return Err(ObjectError::NoClient {
                kind: Kind::Token,
                object,
            });
        };
        let now = SystemTime::now();
        if let Some(t) = self.tokens.fresh(&key, now) {
            return Ok(t);
        }
        if self.is_unavailable() {
            return self
                .tokens
                .unexpired(&key, now)
                .ok_or(ObjectError::Unavailable {
                    kind: Kind::Token,
                    object,
                });
        }
        match fetcher.token(&key.namespace, &key.service_account, &key.request()) {
            Ok(answer) => self.tokens.store(&key, &answer).ok_or_else(|| {
                log::warn!("the TokenRequest for {object} answered no token");
                ObjectError::Unavailable {
                    kind: Kind::Token,
                    object: object.clone(),
                }
            }),
            Err(e) => {
                self.note_error(&e);
                match self.tokens.unexpired(&key, now) {
                    // Upstream: a token that is still valid is used while a refresh fails.
                    Some(t) => {
                        log::warn!(
                            "couldn't update token {object}: {}",
                            base::loops::error_chain(&e)
                        );
                        Ok(t)
                    }
                    None => Err(ObjectError::Api {
                        kind: Kind::Token,
                        object,
                        source: Box::new(e),
                    }),
                }
            }
        }
    }

    fn is_unavailable(&self) -> bool {
        lock(&self.state)
            .unavailable_until
            .is_some_and(|t| self.clock.now() < t)
    }

    fn note_error(&self, e: &ApiError) {
        if matches!(
            e,
            ApiError::Transport { .. } | ApiError::ClockBehind { .. } | ApiError::Stream { .. }
        ) {
            lock(&self.state).unavailable_until = Some(self.clock.now() + UNAVAILABLE_FOR);
        }
    }

    /// The cached object if fresh, else a fetch (without the lock), stored.
    fn get<T: serde::Serialize>(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        map: impl Fn(&mut State) -> &mut HashMap<Key, Entry<T>> + Copy,
        fetch: impl FnOnce(&dyn Fetcher, bool) -> Result<T, ApiError>,
    ) -> Result<Arc<T>, ObjectError> {
        let object = format!("{namespace}/{name}");
        let Some(fetcher) = &self.fetcher else {
            return Err(ObjectError::NoClient { kind, object });
        };
        let key = (namespace.to_string(), name.to_string());
        let now = self.clock.now();
        let stale = {
            let mut st = lock(&self.state);
            let m = map(&mut st);
            m.retain(|_, e| now.duration_since(e.used) < UNUSED_FOR);
            match m.get_mut(&key) {
                Some(e) if now.duration_since(e.fetched) < self.ttl => {
                    e.used = now;
                    return Ok(e.value.clone());
                }
                Some(e) => Some(e.value.clone()),
                None => None,
            }
        };
        if self.is_unavailable() {
            return stale.ok_or(ObjectError::Unavailable { kind, object });
        }
        // A refresh of an object read before may come from the API server's cache.
        match fetch(fetcher.as_ref(), stale.is_some()) {
            Ok(v) => {
                let value = Arc::new(v);
                lock(&self.state).store(kind, key, value.clone(), now, map);
                Ok(value)
            }
            Err(e) if e.is_not_found() => {
                lock(&self.state).gone(kind, key, map);
                Err(ObjectError::NotFound {
                    kind,
                    name: name.to_string(),
                })
            }
            Err(e) => {
                self.note_error(&e);
                match stale {
                    Some(v) if e.is_unreachable() => {
                        log::debug!(
                            "{} {object}: serving the copy last fetched: {}",
                            kind.as_str(),
                            base::loops::error_chain(&e)
                        );
                        Ok(v)
                    }
                    _ => Err(ObjectError::Api {
                        kind,
                        object,
                        source: Box::new(e),
                    }),
                }
            }
        }
    }
}

/// The token cache's key for `pod`'s token of `service_account`.
fn token_key(
    pod: &Pod,
    service_account: &str,
    audience: Option<&str>,
    expiration_seconds: i64,
) -> token::TokenKey {
    token::TokenKey {
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        service_account: service_account.to_string(),
        audience: audience.map(str::to_string),
        expiration_seconds,
        pod_name: pod.metadata.name.clone().unwrap_or_default(),
        pod_uid: pod.metadata.uid.clone().unwrap_or_default(),
    }
}

/// The names of the ConfigMaps and Secrets a pod references (upstream
/// `VisitPodConfigmapNames` / `VisitPodSecretNames`): volumes, projected sources,
/// env and envFrom of every container, image pull secrets.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct References {
    /// ConfigMap names.
    pub config_maps: Vec<String>,
    /// Secret names.
    pub secrets: Vec<String>,
}

/// What `pod` references.
pub(crate) fn references(pod: &Pod) -> References {
    let mut r = References::default();
    let Some(spec) = &pod.spec else {
        return r;
    };
    for v in spec.volumes.iter().flatten() {
        if let Some(c) = &v.config_map {
            r.config_maps.push(c.name.clone());
        }
        if let Some(s) = v.secret.as_ref().and_then(|s| s.secret_name.clone()) {
            r.secrets.push(s);
        }
        for src in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(c) = &src.config_map {
                r.config_maps.push(c.name.clone());
            }
            if let Some(s) = &src.secret {
                r.secrets.push(s.name.clone());
            }
        }
    }
    let containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    for c in containers {
        for f in c.env_from.iter().flatten() {
            if let Some(x) = &f.config_map_ref {
                r.config_maps.push(x.name.clone());
            }
            if let Some(x) = &f.secret_ref {
                r.secrets.push(x.name.clone());
            }
        }
        for e in c.env.iter().flatten() {
            let Some(from) = &e.value_from else { continue };
            if let Some(x) = &from.config_map_key_ref {
                r.config_maps.push(x.name.clone());
            }
            if let Some(x) = &from.secret_key_ref {
                r.secrets.push(x.name.clone());
            }
        }
    }
    for s in spec.image_pull_secrets.iter().flatten() {
        r.secrets.push(s.name.clone());
    }
    base::sort::sort(&mut r.config_maps);
    r.config_maps.dedup();
    base::sort::sort(&mut r.secrets);
    r.secrets.dedup();
    r
}

#[cfg(test)]
pub(crate) mod fake {
    //! A [`Fetcher`] over in-memory objects, counting its calls.

    use super::*;

    /// In-memory ConfigMaps and Secrets by `namespace/name`; tokens numbered.
    #[derive(Debug, Default)]
    pub(crate) struct FakeFetcher {
        /// ConfigMaps.
        pub config_maps: Mutex<HashMap<String, ConfigMap>>,
        /// Secrets.
        pub secrets: Mutex<HashMap<String, Secret>>,
        /// Calls made, e.g. `configmap ns/name`.
        pub calls: Mutex<Vec<String>>,
        /// Answer every call with this transport-like failure instead.
        pub down: Mutex<bool>,
        /// The lifetime of the tokens issued (None: as asked).
        pub token_lifetime: Mutex<Option<i64>>,
        /// Fail every call as a connection that broke (the API server unreachable).
        pub unreachable: Mutex<bool>,
    }

    impl FakeFetcher {
        fn fault(&self, what: &'static str) -> Option<ApiError> {
            if *lock(&self.unreachable) {
                return Some(ApiError::Stream {
                    what,
                    url: String::new(),
                    source: std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
                });
            }
            (*lock(&self.down)).then(|| status(503, what))
        }
    }

    fn status(code: u16, what: &'static str) -> ApiError {
        ApiError::Status {
            what,
            url: String::new(),
            code,
            reason: String::new(),
            message: String::new(),
        }
    }

    impl Fetcher for FakeFetcher {
        fn config_map(
            &self,
            namespace: &str,
            name: &str,
            _from_cache: bool,
        ) -> Result<ConfigMap, ApiError> {
            let key = format!("{namespace}/{name}");
            lock(&self.calls).push(format!("configmap {key}"));
            if let Some(e) = self.fault("get configmap") {
                return Err(e);
            }
            lock(&self.config_maps)
                .get(&key)
                .cloned()
                .ok_or_else(|| status(404, "get configmap"))
        }
        fn secret(
            &self,
            namespace: &str,
            name: &str,
            _from_cache: bool,
        ) -> Result<Secret, ApiError> {
            let key = format!("{namespace}/{name}");
            lock(&self.calls).push(format!("secret {key}"));
            if let Some(e) = self.fault("get secret") {
                return Err(e);
            }
            lock(&self.secrets)
                .get(&key)
                .cloned()
                .ok_or_else(|| status(404, "get secret"))
        }
        fn token(
            &self,
            namespace: &str,
            name: &str,
            request: &TokenRequest,
        ) -> Result<TokenRequest, ApiError> {
            let n = {
                let mut calls = lock(&self.calls);
                calls.push(format!("token {namespace}/{name}"));
                calls.len()
            };
            if let Some(e) = self.fault("create token") {
                return Err(e);
            }
            let secs = lock(&self.token_lifetime)
                .or(request.spec.expiration_seconds)
                .unwrap_or(3600);
            let mut answer = request.clone();
            answer.status = Some(k8s_openapi::api::authentication::v1::TokenRequestStatus {
                token: format!("token-{n}"),
                expiration_timestamp: base::time::k8s_time(
                    SystemTime::now() + Duration::from_secs(u64::try_from(secs).unwrap_or(0)),
                ),
            });
            Ok(answer)
        }
    }

    /// A ConfigMap with string data.
    pub(crate) fn config_map(data: &[(&str, &str)]) -> ConfigMap {
        ConfigMap {
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    /// A Secret with data.
    pub(crate) fn secret(data: &[(&str, &str)]) -> Secret {
        Secret {
            data: Some(
                data.iter()
                    .map(|(k, v)| {
                        (
                            k.to_string(),
                            k8s_openapi::ByteString(v.as_bytes().to_vec()),
                        )
                    })
                    .collect(),
            ),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::{config_map, FakeFetcher};
    use super::*;

    fn manager(f: &Arc<FakeFetcher>) -> ObjectManager {
        ObjectManager::new(Some(f.clone() as Arc<dyn Fetcher>))
    }

    fn pod(uid: &str) -> Pod {
        serde_norway::from_str(&format!(
            "metadata: {{name: p, namespace: ns, uid: {uid}}}\n\
             spec: {{containers: [{{name: c, envFrom: [{{configMapRef: {{name: cm}}}}]}}]}}"
        ))
        .expect("pod")
    }

    #[test]
    fn a_fresh_object_is_served_from_the_cache_and_a_new_pod_refetches() {
        let f = Arc::new(FakeFetcher::default());
        lock(&f.config_maps).insert("ns/cm".into(), config_map(&[("a", "1")]));
        let m = manager(&f);
        m.register_pod(&pod("u1"));
        assert_eq!(
            m.config_map("ns", "cm")
                .expect("cm")
                .data
                .as_ref()
                .expect("data")["a"],
            "1"
        );
        m.config_map("ns", "cm").expect("cm");
        assert_eq!(lock(&f.calls).len(), 1, "the second read is cached");
        lock(&f.config_maps).insert("ns/cm".into(), config_map(&[("a", "2")]));
        m.register_pod(&pod("u1"));
        m.config_map("ns", "cm").expect("cm");
        assert_eq!(lock(&f.calls).len(), 1, "a known pod does not invalidate");
        m.register_pod(&pod("u2"));
        let cm = m.config_map("ns", "cm").expect("cm");
        assert_eq!(cm.data.as_ref().expect("data")["a"], "2");
        assert_eq!(lock(&f.calls).len(), 2);
    }

    #[test]
    fn an_expired_entry_is_fetched_again_and_errors_are_not_cached() {
        let f = Arc::new(FakeFetcher::default());
        let m = manager(&f).with_ttl(Duration::ZERO);
        let e = m.config_map("ns", "cm").expect_err("missing");
        assert!(e.is_not_found());
        assert_eq!(e.to_string(), "configmap \"cm\" not found");
        lock(&f.config_maps).insert("ns/cm".into(), config_map(&[("a", "1")]));
        m.config_map("ns", "cm").expect("appeared");
        m.config_map("ns", "cm").expect("again");
        assert_eq!(lock(&f.calls).len(), 3);
    }

    #[test]
    fn without_an_api_server_lookups_fail_clearly() {
        let m = ObjectManager::new(None);
        assert_eq!(
            m.secret("ns", "s").expect_err("no client").to_string(),
            "cannot get secret ns/s: no API server is configured (--kubeconfig)"
        );
    }

    #[test]
    fn an_unreachable_api_server_serves_the_last_copy() {
        let f = Arc::new(FakeFetcher::default());
        lock(&f.config_maps).insert("ns/cm".into(), config_map(&[("a", "1")]));
        let m = manager(&f).with_ttl(Duration::ZERO);
        m.config_map("ns", "cm").expect("first");
        *lock(&f.down) = true;
        assert!(m.config_map("ns", "cm").is_ok(), "stale copy while down");
        assert!(m.config_map("ns", "other").is_err());
    }

    #[test]
    fn references_cover_volumes_env_and_pull_secrets() {
        let p: Pod = serde_norway::from_str(
            "metadata: {name: p}\n\
             spec:\n  imagePullSecrets: [{name: reg}]\n  volumes:\n\
             \x20 - {name: a, configMap: {name: cm1}}\n\
             \x20 - {name: b, secret: {secretName: s1}}\n\
             \x20 - {name: c, projected: {sources: [{configMap: {name: cm2}}, {secret: {name: s2}}]}}\n\
             \x20 containers: [{name: x, env: [{name: E, valueFrom: {secretKeyRef: {name: s3, key: k}}}]}]",
        )
        .expect("pod");
        assert_eq!(
            references(&p),
            References {
                config_maps: vec!["cm1".into(), "cm2".into()],
                secrets: vec!["reg".into(), "s1".into(), "s2".into(), "s3".into()],
            }
        );
    }
}
