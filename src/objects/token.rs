//! The service account token cache (upstream `pkg/kubelet/token/token_manager.go`):
//! one token per (service account, audience, lifetime, bound pod), reused until it
//! needs a refresh ([`requires_refresh`]: older than 24 h, or within 20 % of its
//! lifetime of expiring, less a jitter of up to 10 s), kept while a refresh fails and
//! it has not expired, forgotten with its pod. Tokens are never logged.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};

use base::loops::lock;

/// Upstream `maxTTL`: a token older than this is refreshed whatever its lifetime.
pub(crate) const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// Upstream `maxJitter`: refreshes of many pods are spread over this.
pub(crate) const MAX_JITTER: Duration = Duration::from_secs(10);

/// What a token is asked for with; equal keys share a token (upstream `keyFunc`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct TokenKey {
    /// The service account's namespace (the pod's).
    pub namespace: String,
    /// The service account.
    pub service_account: String,
    /// The audience (None: the API server's default).
    pub audience: Option<String>,
    /// The lifetime asked for.
    pub expiration_seconds: i64,
    /// The pod the token is bound to.
    pub pod_name: String,
    /// Its UID.
    pub pod_uid: String,
}

impl TokenKey {
    /// The TokenRequest for this key, as upstream's projected volume builds it.
    pub(crate) fn request(&self) -> TokenRequest {
        TokenRequest {
            spec: TokenRequestSpec {
                audiences: self.audience.iter().cloned().collect(),
                expiration_seconds: Some(self.expiration_seconds),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: Some(self.pod_name.clone()),
                    uid: Some(self.pod_uid.clone()),
                }),
            },
            ..Default::default()
        }
    }
}

/// A token and when it expires.
#[derive(Clone)]
struct Cached {
    token: String,
    expires: SystemTime,
    /// The lifetime the server granted (its answer's `spec.expirationSeconds`).
    lifetime_seconds: i64,
    /// This entry's jitter, drawn once (upstream draws one per check).
    jitter: Duration,
}

impl std::fmt::Debug for Cached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cached")
            .field("expires", &self.expires)
            .field("lifetime_seconds", &self.lifetime_seconds)
            .finish_non_exhaustive()
    }
}

/// The tokens issued to this node's pods.
#[derive(Debug, Default)]
pub(crate) struct TokenManager {
    cache: Mutex<HashMap<TokenKey, Cached>>,
}

/// Upstream `requiresRefresh`: true when `now` is past the token's issue time plus
/// [`MAX_TTL`], or within 20 % of its lifetime of `expires` (each less `jitter`).
pub(crate) fn requires_refresh(
    now: SystemTime,
    expires: SystemTime,
    lifetime_seconds: i64,
    jitter: Duration,
) -> bool {
    let lifetime = base::time::secs(lifetime_seconds);
    let issued = expires
        .checked_sub(lifetime)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let too_old = issued
        .checked_add(MAX_TTL.saturating_sub(jitter))
        .is_some_and(|t| now > t);
    let fifth = base::time::secs(lifetime_seconds.saturating_mul(20) / 100);
    let near_end = expires
        .checked_sub(fifth.saturating_add(jitter))
        .is_none_or(|t| now > t);
    too_old || near_end
}

impl TokenManager {
    /// The cached token for `key` if it needs no refresh.
    pub(crate) fn fresh(&self, key: &TokenKey, now: SystemTime) -> Option<String> {
        let mut cache = lock(&self.cache);
        cache.retain(|_, c| c.expires > now);
        cache
            .get(key)
            .filter(|c| !requires_refresh(now, c.expires, c.lifetime_seconds, c.jitter))
            .map(|c| c.token.clone())
    }

    /// The cached token for `key` if it has not expired (used while a refresh fails).
    pub(crate) fn unexpired(&self, key: &TokenKey, now: SystemTime) -> Option<String> {
        lock(&self.cache)
            .get(key)
            .filter(|c| c.expires > now)
            .map(|c| c.token.clone())
    }

    /// Keeps the token of a TokenRequest's answer; returns it (None: it has none).
    pub(crate) fn store(&self, key: &TokenKey, answer: &TokenRequest) -> Option<String> {
        let status = answer.status.as_ref().filter(|s| !s.token.is_empty())?;
        let expires = base::time::system_time(&status.expiration_timestamp);
        let lifetime_seconds = answer
            .spec
            .expiration_seconds
            .unwrap_or(key.expiration_seconds);
        let jitter = MAX_JITTER.mul_f64(base::wait::jitter_fraction());
        lock(&self.cache).insert(
            key.clone(),
            Cached {
                token: status.token.clone(),
                expires,
                lifetime_seconds,
                jitter,
            },
        );
        Some(status.token.clone())
    }

    /// Forgets the tokens bound to a pod that is gone.
    pub(crate) fn forget_pod(&self, uid: &str) {
        lock(&self.cache).retain(|k, _| k.pod_uid != uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: u64 = 3600;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
    }

    #[test]
    fn a_token_is_refreshed_in_the_last_fifth_of_its_lifetime() {
        // Issued at 0 for 3600 s: refreshed after 2880 s (80 %).
        let exp = at(HOUR);
        assert!(!requires_refresh(at(0), exp, 3600, Duration::ZERO));
        assert!(!requires_refresh(at(2879), exp, 3600, Duration::ZERO));
        assert!(requires_refresh(at(2881), exp, 3600, Duration::ZERO));
        // The jitter brings it forward.
        assert!(requires_refresh(
            at(2875),
            exp,
            3600,
            Duration::from_secs(10)
        ));
        // 600 s tokens: after 480 s.
        assert!(!requires_refresh(at(479), at(600), 600, Duration::ZERO));
        assert!(requires_refresh(at(481), at(600), 600, Duration::ZERO));
    }

    #[test]
    fn a_long_token_is_refreshed_after_a_day() {
        let year = 365 * 24 * HOUR;
        let exp = at(year);
        let lifetime = i64::try_from(year).expect("fits");
        assert!(!requires_refresh(
            at(23 * HOUR),
            exp,
            lifetime,
            Duration::ZERO
        ));
        assert!(requires_refresh(
            at(24 * HOUR + 1),
            exp,
            lifetime,
            Duration::ZERO
        ));
    }

    #[test]
    fn a_token_answer_whose_expiry_is_near_needs_a_refresh_at_once() {
        // The server granted 600 s but the token ends in 100 s: within the last fifth.
        assert!(requires_refresh(at(0), at(100), 600, Duration::ZERO));
    }

    #[test]
    fn tokens_are_kept_per_key_and_forgotten_with_their_pod() {
        let m = TokenManager::default();
        let key = TokenKey {
            namespace: "ns".into(),
            service_account: "default".into(),
            audience: None,
            expiration_seconds: 3607,
            pod_name: "p".into(),
            pod_uid: "u".into(),
        };
        let mut answer = key.request();
        answer.status = Some(k8s_openapi::api::authentication::v1::TokenRequestStatus {
            token: "t1".into(),
            expiration_timestamp: base::time::k8s_time(
                SystemTime::now() + Duration::from_secs(3607),
            ),
        });
        assert_eq!(m.store(&key, &answer).as_deref(), Some("t1"));
        assert_eq!(m.fresh(&key, SystemTime::now()).as_deref(), Some("t1"));
        let spec = &key.request().spec;
        assert_eq!(spec.audiences, Vec::<String>::new());
        assert_eq!(
            spec.bound_object_ref
                .as_ref()
                .and_then(|r| r.kind.as_deref()),
            Some("Pod")
        );
        m.forget_pod("u");
        assert_eq!(m.fresh(&key, SystemTime::now()), None);
    }
}
