//! The API server as the kubelet port's token authenticator and authorizer
//! (upstream's `DelegatingAuthenticatorConfig` with a webhook token authenticator
//! behind `cache.New(tokenAuth, false, cacheTTL, cacheTTL)`, and
//! `DelegatingAuthorizerConfig`'s webhook authorizer), with their caches.
//!
//! Tokens: a TokenReview's user is kept for `cacheTTL` (2 m), and so is a refusal;
//! errors are not kept (the next request asks again). The cache key is the token's
//! SHA-256, so no token is held as a key and none is ever logged. Decisions: an allowing
//! SubjectAccessReview is kept `cacheAuthorizedTTL` (5 m), any other answer
//! `cacheUnauthorizedTTL` (30 s); errors are not kept. Both caches hold at most
//! [`CACHE_ENTRIES`] entries ([`TtlCache`]).
//!
//! Every review is one request bounded by [`REVIEW_TIMEOUT`], made on the port's worker
//! thread. Upstream retries a failed review with backoff (up to ~5 tries); the port
//! has only four workers, so here a review is tried once, and a review that could not
//! reach the API server (refused, timed out) makes the next [`UNAVAILABLE_FOR`] of
//! reviews fail at once instead of each waiting out its own timeout: with the API
//! server gone, a request the caches can answer waits at most one timeout behind the
//! ones that cannot.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::UserInfo;

use super::cache::TtlCache;
use apiclient::review::AccessRequest;
use apiclient::{ApiClient, ApiError};
use base::loops::lock;
use wire::x509::User;

/// One review's budget: the port's workers wait on it, so it is well under the 10 s a
/// client has to send a request head (upstream: 10 s per try, with retries).
pub(crate) const REVIEW_TIMEOUT: Duration = Duration::from_secs(5);
/// Entries per cache: each is well under a KiB, so the two caches together stay under
/// about 2 MiB however many distinct tokens or users are seen.
pub(crate) const CACHE_ENTRIES: usize = 1024;
/// After a review could not reach the API server, reviews fail at once for this long.
pub(crate) const UNAVAILABLE_FOR: Duration = Duration::from_secs(3);

/// How long answers are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CacheTtls {
    /// A token's user or refusal (`authentication.webhook.cacheTTL`).
    pub token: Duration,
    /// An allowing decision (`authorization.webhook.cacheAuthorizedTTL`).
    pub authorized: Duration,
    /// Any other decision (`authorization.webhook.cacheUnauthorizedTTL`).
    pub unauthorized: Duration,
}

/// Why a review gave no answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WebhookError {
    /// The call failed (unreachable, timed out, an error status, an undecodable answer).
    #[error("the review failed")]
    Api(#[source] ApiError),
    /// An earlier review could not reach the API server moments ago: not asked again
    /// yet.
    #[error(
        "the API server was unreachable less than {UNAVAILABLE_FOR:?} ago; not asked again yet"
    )]
    Unavailable,
    /// The review answered with an error of its own.
    #[error("the review answered an error: {0}")]
    Review(String),
}

/// The reviews and their caches, shared by the port's workers. Every lock is held
/// only to read or write a cache entry, never across a review.
pub(crate) struct Webhooks {
    client: Arc<ApiClient>,
    ttls: CacheTtls,
    /// SHA-256 of a token → its user, or `None` for a refused token.
    tokens: Mutex<TtlCache<[u8; 32], Option<User>>>,
    /// A request → whether it was allowed.
    decisions: Mutex<TtlCache<AccessRequest, bool>>,
    /// Reviews fail at once until then.
    unavailable_until: Mutex<Option<Instant>>,
}

impl fmt::Debug for Webhooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Webhooks")
            .field("server", &self.client.server())
            .field("ttls", &self.ttls)
            .finish_non_exhaustive()
    }
}

impl Webhooks {
    /// Reviews through `client`, answers kept for `ttls`.
    pub(crate) fn new(client: Arc<ApiClient>, ttls: CacheTtls) -> Webhooks {
        Webhooks {
            client,
            ttls,
            tokens: Mutex::new(TtlCache::new(CACHE_ENTRIES)),
            decisions: Mutex::new(TtlCache::new(CACHE_ENTRIES)),
            unavailable_until: Mutex::new(None),
        }
    }

    /// The user holding `token`, `None` if the API server refused it.
    pub(crate) fn authenticate_token(&self, token: &str) -> Result<Option<User>, WebhookError> {
        let key = token_key(token);
        if let Some(known) = lock(&self.tokens).get(&key, Instant::now()) {
            return Ok(known);
        }
        let status = self.call(|c| c.review_token(token, REVIEW_TIMEOUT))?;
        let user = if status.authenticated == Some(true) {
            Some(user_of(status.user.unwrap_or_default()))
        } else if let Some(error) = status.error.filter(|e| !e.is_empty()) {
            // Upstream: a refusal with an error is an error (not cached).
            return Err(WebhookError::Review(error));
        } else {
            None
        };
        lock(&self.tokens).insert(key, user.clone(), self.ttls.token, Instant::now());
        Ok(user)
    }

    /// Whether `request` is allowed. Denied and "no opinion" are both `false`.
    pub(crate) fn authorize(&self, request: &AccessRequest) -> Result<bool, WebhookError> {
        if let Some(known) = lock(&self.decisions).get(request, Instant::now()) {
            return Ok(known);
        }
        let status = self.call(|c| c.review_access(request, REVIEW_TIMEOUT))?;
        let denied = status.denied == Some(true);
        if status.allowed && denied {
            return Err(WebhookError::Review(
                "webhook subject access review returned both allow and deny response".into(),
            ));
        }
        if !status.allowed {
            log::debug!(
                "srv-kubelet: SubjectAccessReview did not allow user={} verb={} \
                 subresource={}: denied={denied} reason={:?}",
                request.user,
                request.verb,
                request.subresource,
                status.reason.unwrap_or_default()
            );
        }
        let ttl = if status.allowed {
            self.ttls.authorized
        } else {
            self.ttls.unauthorized
        };
        lock(&self.decisions).insert(request.clone(), status.allowed, ttl, Instant::now());
        Ok(status.allowed)
    }

    /// Runs one review unless the API server was just found unreachable; an
    /// unreachable one starts [`UNAVAILABLE_FOR`].
    fn call<T>(
        &self,
        review: impl FnOnce(&ApiClient) -> Result<T, ApiError>,
    ) -> Result<T, WebhookError> {
        if lock(&self.unavailable_until).is_some_and(|until| Instant::now() < until) {
            return Err(WebhookError::Unavailable);
        }
        review(&self.client).map_err(|e| {
            if matches!(e, ApiError::Transport { .. } | ApiError::ClockBehind { .. }) {
                *lock(&self.unavailable_until) = Some(base::time::saturating_deadline(
                    Instant::now(),
                    UNAVAILABLE_FOR,
                ));
            }
            WebhookError::Api(e)
        })
    }
}

/// The cache key of a token.
fn token_key(token: &str) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let mut key = [0u8; 32];
    key.copy_from_slice(digest.as_ref());
    key
}

/// A TokenReview's user.
fn user_of(info: UserInfo) -> User {
    User {
        name: info.username.unwrap_or_default(),
        uid: info.uid.unwrap_or_default(),
        groups: info.groups.unwrap_or_default(),
        extra: info.extra.unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reviews through a client of a server nobody listens on.
    fn unreachable() -> Webhooks {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("port")
            .port();
        let client = ApiClient::new(apiclient::kubeconfig::RestConfig {
            server: format!("http://127.0.0.1:{port}"),
            tls: Default::default(),
            auth: Default::default(),
        })
        .expect("client");
        let ttl = Duration::from_secs(60);
        Webhooks::new(
            Arc::new(client),
            CacheTtls {
                token: ttl,
                authorized: ttl,
                unauthorized: ttl,
            },
        )
    }

    #[test]
    fn an_unreachable_api_server_fails_the_next_reviews_at_once_and_nothing_is_cached() {
        let w = unreachable();
        let e = w.authenticate_token("t").expect_err("unreachable");
        assert!(
            matches!(e, WebhookError::Api(ApiError::Transport { .. })),
            "{e:?}"
        );
        let request = AccessRequest {
            user: "u".into(),
            uid: String::new(),
            groups: vec![],
            extra: Default::default(),
            verb: "get".into(),
            subresource: "pods".into(),
            node: "n".into(),
        };
        // Within UNAVAILABLE_FOR neither review is tried.
        let e = w.authorize(&request).expect_err("fails fast");
        assert!(matches!(e, WebhookError::Unavailable), "{e:?}");
        let e = w.authenticate_token("t").expect_err("fails fast");
        assert!(matches!(e, WebhookError::Unavailable), "{e:?}");
        assert!(lock(&w.tokens).is_empty() && lock(&w.decisions).is_empty());
    }

    #[test]
    fn token_keys_are_digests_not_tokens() {
        let a = token_key("secret-token");
        assert_eq!(a, token_key("secret-token"));
        assert_ne!(a, token_key("secret-token2"));
        assert!(!a.windows(6).any(|w| w == b"secret"));
    }

    #[test]
    fn review_users_keep_name_uid_groups_and_extra() {
        let info = UserInfo {
            username: Some("alice".into()),
            uid: Some("u-1".into()),
            groups: Some(vec!["devs".into()]),
            extra: Some([("scopes".to_string(), vec!["a".to_string()])].into()),
        };
        let u = user_of(info);
        assert_eq!(
            (u.name.as_str(), u.uid.as_str(), u.groups.as_slice()),
            ("alice", "u-1", &["devs".to_string()][..])
        );
        assert_eq!(u.extra["scopes"], ["a"]);
        assert_eq!(user_of(UserInfo::default()).name, "");
    }
}
