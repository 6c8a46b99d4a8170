//! What the `object-refresh` loop asks of the object cache: which objects a pod's
//! volumes read ([`volume_references`]), how old each cached copy is, a refetch of one
//! ([`ObjectManager::refresh`]), and when each object's content last changed.
//!
//! Change detection: every time a fetch (here or on a pod worker) stores an object
//! whose content differs from the last one seen for that name, including its
//! appearance and its deletion, the manager's generation counter steps and the object
//! is stamped with it. A pod's volumes written when the generation was `g` are stale
//! exactly when one of the objects they read has a stamp above `g`, whichever thread
//! fetched the new copy. The last content is kept as a hash, apart from the cache
//! entries (which a new pod invalidates), so a refetch of the same content never
//! counts as a change.

use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;

use super::{Entry, Key, Kind, ObjectError, ObjectManager, State};
use apiclient::ApiError;
use base::loops::lock;

/// The manager's monotonic clock: the real one, or one tests move by hand.
#[derive(Debug, Clone, Default)]
pub struct Clock(Option<Arc<Mutex<Instant>>>);

impl Clock {
    /// A clock that stands still until [`Clock::advance`] moves it (tests).
    pub fn manual() -> Clock {
        Clock(Some(Arc::new(Mutex::new(Instant::now()))))
    }

    /// Now.
    pub fn now(&self) -> Instant {
        match &self.0 {
            None => Instant::now(),
            Some(t) => *lock(t),
        }
    }

    /// Moves a manual clock forward (the real clock ignores it).
    pub fn advance(&self, by: std::time::Duration) {
        if let Some(t) = &self.0 {
            let mut t = lock(t);
            *t += by;
        }
    }
}

/// One ConfigMap or Secret a pod's volume reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectRef {
    /// ConfigMap or Secret.
    pub kind: Kind,
    /// The pod's namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}/{}", self.kind.as_str(), self.namespace, self.name)
    }
}

/// The ConfigMaps and Secrets `pod`'s volumes read (configMap, secret and projected
/// sources), sorted, each once. Env and pull secrets are left out: a running
/// container's environment never changes.
pub(crate) fn volume_references(pod: &Pod) -> Vec<ObjectRef> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let r = |kind, name: &str| ObjectRef {
        kind,
        namespace: ns.clone(),
        name: name.to_string(),
    };
    let mut out = Vec::new();
    for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        if let Some(c) = &v.config_map {
            out.push(r(Kind::ConfigMap, &c.name));
        }
        if let Some(s) = v.secret.as_ref().and_then(|s| s.secret_name.as_deref()) {
            out.push(r(Kind::Secret, s));
        }
        for src in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(c) = &src.config_map {
                out.push(r(Kind::ConfigMap, &c.name));
            }
            if let Some(s) = &src.secret {
                out.push(r(Kind::Secret, &s.name));
            }
        }
    }
    base::sort::sort(&mut out);
    out.dedup();
    out
}

/// A hash of an object's whole content (None: it does not exist).
fn fingerprint<T: Serialize>(v: &T) -> u64 {
    let mut h = DefaultHasher::new();
    serde_json::to_vec(v).unwrap_or_default().hash(&mut h);
    h.finish()
}

impl State {
    /// Notes the content last seen of an object (None: not found); a change from the
    /// last one noted (or a first sight) stamps it with the next generation.
    pub(super) fn note_content(&mut self, kind: Kind, key: &Key, content: Option<u64>) {
        let id = (kind, key.0.clone(), key.1.clone());
        if self.changes.get(&id).is_some_and(|(c, _)| *c == content) {
            return;
        }
        self.generation += 1;
        let g = self.generation;
        self.changes.insert(id, (content, g));
    }

    /// Stores a fetched object in `map` and notes its content.
    pub(super) fn store<T: Serialize>(
        &mut self,
        kind: Kind,
        key: Key,
        value: Arc<T>,
        now: Instant,
        map: impl Fn(&mut State) -> &mut std::collections::HashMap<Key, Entry<T>>,
    ) {
        let fp = fingerprint(value.as_ref());
        self.note_content(kind, &key, Some(fp));
        map(self).insert(
            key,
            Entry {
                value,
                fetched: now,
                used: now,
            },
        );
    }

    /// Drops an object the API server says is gone and notes its absence.
    pub(super) fn gone<T>(
        &mut self,
        kind: Kind,
        key: Key,
        map: impl Fn(&mut State) -> &mut std::collections::HashMap<Key, Entry<T>>,
    ) {
        map(self).remove(&key);
        self.note_content(kind, &key, None);
    }
}

/// What one refresh found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refreshed {
    /// The content differs from the last copy seen (or it appeared or went).
    Changed,
    /// The same content.
    Unchanged,
}

impl ObjectManager {
    /// The same with another clock (tests).
    pub fn with_clock(mut self, clock: Clock) -> ObjectManager {
        self.clock = clock;
        self
    }

    /// The manager's clock.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Whether an API server is configured (else nothing can be refreshed).
    pub fn has_client(&self) -> bool {
        self.fetcher.is_some()
    }

    /// The generation now: volumes written from the cache as it is now are stale once
    /// an object they read has a later [`ObjectManager::changed_at`].
    pub fn generation(&self) -> u64 {
        lock(&self.state).generation
    }

    /// The generation at which `r`'s content last changed (0: never seen).
    pub fn changed_at(&self, r: &ObjectRef) -> u64 {
        let id = (r.kind, r.namespace.clone(), r.name.clone());
        lock(&self.state).changes.get(&id).map_or(0, |(_, g)| *g)
    }

    /// When the cached copy of `r` was fetched (None: none is cached).
    pub fn fetched_at(&self, r: &ObjectRef) -> Option<Instant> {
        let key = (r.namespace.clone(), r.name.clone());
        let st = lock(&self.state);
        match r.kind {
            Kind::ConfigMap => st.config_maps.get(&key).map(|e| e.fetched),
            Kind::Secret => st.secrets.get(&key).map(|e| e.fetched),
            Kind::Token => None,
        }
    }

    /// Forgets the change stamps of objects no longer in `keep` (the objects the
    /// refreshed pods' volumes read).
    pub fn retain_changes(&self, keep: &HashSet<ObjectRef>) {
        lock(&self.state).changes.retain(|(kind, ns, name), _| {
            keep.contains(&ObjectRef {
                kind: *kind,
                namespace: ns.clone(),
                name: name.clone(),
            })
        });
    }

    /// Whether the token `pod`'s projected volume asks for (service account,
    /// audience, lifetime) is missing or due for a refresh (80 % of its lifetime, or
    /// 24 h, as [`super::token::requires_refresh`]).
    pub fn token_due(
        &self,
        pod: &Pod,
        service_account: &str,
        audience: Option<&str>,
        expiration_seconds: i64,
    ) -> bool {
        let key = super::token_key(pod, service_account, audience, expiration_seconds);
        self.tokens.fresh(&key, SystemTime::now()).is_none()
    }

    /// Fetches `r` again whatever its cached copy's age, stores it and says whether
    /// its content changed. Fails at once while the API server was unreachable less
    /// than [`super::UNAVAILABLE_FOR`] ago; a failed fetch keeps the cached copy.
    pub fn refresh(&self, r: &ObjectRef) -> Result<Refreshed, ObjectError> {
        let (ns, name) = (r.namespace.as_str(), r.name.as_str());
        match r.kind {
            Kind::ConfigMap => {
                self.refresh_one(r, |s| &mut s.config_maps, |f, c| f.config_map(ns, name, c))
            }
            Kind::Secret => self.refresh_one(r, |s| &mut s.secrets, |f, c| f.secret(ns, name, c)),
            Kind::Token => Ok(Refreshed::Unchanged),
        }
    }

    fn refresh_one<T: Serialize>(
        &self,
        r: &ObjectRef,
        map: impl Fn(&mut State) -> &mut std::collections::HashMap<Key, Entry<T>> + Copy,
        fetch: impl FnOnce(&dyn super::Fetcher, bool) -> Result<T, ApiError>,
    ) -> Result<Refreshed, ObjectError> {
        let object = format!("{}/{}", r.namespace, r.name);
        let Some(fetcher) = &self.fetcher else {
            return Err(ObjectError::NoClient {
                kind: r.kind,
                object,
            });
        };
        if self.is_unavailable() {
            return Err(ObjectError::Unavailable {
                kind: r.kind,
                object,
            });
        }
        let key = (r.namespace.clone(), r.name.clone());
        let before = self.changed_at(r);
        let cached = map(&mut lock(&self.state)).contains_key(&key);
        let now = self.clock.now();
        match fetch(fetcher.as_ref(), cached) {
            Ok(v) => lock(&self.state).store(r.kind, key, Arc::new(v), now, map),
            Err(e) if e.is_not_found() => lock(&self.state).gone(r.kind, key, map),
            Err(e) => {
                self.note_error(&e);
                return Err(ObjectError::Api {
                    kind: r.kind,
                    object,
                    source: Box::new(e),
                });
            }
        }
        Ok(if self.changed_at(r) != before {
            Refreshed::Changed
        } else {
            Refreshed::Unchanged
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::fake::{config_map, secret, FakeFetcher};
    use super::super::Fetcher;
    use super::*;

    fn cm(name: &str) -> ObjectRef {
        ObjectRef {
            kind: Kind::ConfigMap,
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    #[test]
    fn a_refresh_stamps_only_a_changed_object() {
        let f = Arc::new(FakeFetcher::default());
        lock(&f.config_maps).insert("ns/a".into(), config_map(&[("k", "1")]));
        let m = ObjectManager::new(Some(f.clone() as Arc<dyn Fetcher>));
        assert_eq!(
            m.refresh(&cm("a")).expect("a"),
            Refreshed::Changed,
            "first sight"
        );
        let g = m.generation();
        assert_eq!(m.refresh(&cm("a")).expect("a"), Refreshed::Unchanged);
        // A new pod's invalidation and refetch of the same content is no change.
        let p: Pod = serde_norway::from_str(
            "metadata: {name: p, namespace: ns, uid: u}\n\
             spec: {volumes: [{name: v, configMap: {name: a}}], containers: []}",
        )
        .expect("pod");
        m.register_pod(&p);
        m.config_map("ns", "a").expect("a");
        assert_eq!(m.generation(), g);
        // A change seen by a pod worker's read stamps it too.
        lock(&f.config_maps).insert("ns/a".into(), config_map(&[("k", "2")]));
        m.register_pod(&Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                uid: Some("u2".into()),
                ..p.metadata.clone()
            },
            ..p.clone()
        });
        m.config_map("ns", "a").expect("a");
        assert!(m.changed_at(&cm("a")) > g);
        // Its deletion is a change; so is its return.
        lock(&f.config_maps).clear();
        assert_eq!(m.refresh(&cm("a")).expect("gone"), Refreshed::Changed);
        assert!(m.fetched_at(&cm("a")).is_none());
        assert_eq!(m.refresh(&cm("a")).expect("gone"), Refreshed::Unchanged);
        lock(&f.config_maps).insert("ns/a".into(), config_map(&[("k", "2")]));
        assert_eq!(m.refresh(&cm("a")).expect("back"), Refreshed::Changed);
        assert_eq!(volume_references(&p), vec![cm("a")]);
    }

    #[test]
    fn a_token_is_due_when_missing_or_in_the_last_fifth_of_its_lifetime() {
        let f = Arc::new(FakeFetcher::default());
        let m = ObjectManager::new(Some(f.clone() as Arc<dyn Fetcher>));
        let p: Pod =
            serde_norway::from_str("metadata: {name: p, namespace: ns, uid: u}").expect("pod");
        assert!(m.token_due(&p, "default", None, 3607));
        m.service_account_token(&p, "default", None, 3607)
            .expect("token");
        assert!(!m.token_due(&p, "default", None, 3607));
        assert!(
            m.token_due(&p, "default", Some("vault"), 3607),
            "another key"
        );
        // The server grants 60 s where 600 were asked: due at once.
        *lock(&f.token_lifetime) = Some(60);
        m.service_account_token(&p, "default", None, 600)
            .expect("token");
        assert!(m.token_due(&p, "default", None, 600));
    }

    #[test]
    fn a_failed_refresh_keeps_the_copy_and_an_unreachable_server_fails_fast() {
        let f = Arc::new(FakeFetcher::default());
        lock(&f.secrets).insert("ns/s".into(), secret(&[("k", "1")]));
        let m = ObjectManager::new(Some(f.clone() as Arc<dyn Fetcher>));
        let s = ObjectRef {
            kind: Kind::Secret,
            namespace: "ns".into(),
            name: "s".into(),
        };
        m.refresh(&s).expect("s");
        let g = m.generation();
        *lock(&f.down) = true;
        assert!(m.refresh(&s).is_err());
        assert!(m.fetched_at(&s).is_some(), "the copy stays");
        assert_eq!(m.generation(), g);
        assert!(m.secret("ns", "s").is_ok());
    }
}
