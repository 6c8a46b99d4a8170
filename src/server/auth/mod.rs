//! Authentication and authorization of the kubelet port (upstream's
//! `pkg/kubelet/server/auth.go`, `InstallAuthFilter` in `server.go`, and the chain
//! `cmd/kubelet/app/auth.go` builds): one function, [`filter`], runs before the port's
//! route `match`.
//!
//! Authentication, in upstream's order (a union, then anonymous as a fallback that a
//! failed credential never reaches):
//! 1. the client certificate, verified against `--client-ca-file` when the request was
//!    read ([`ClientCert`], [`x509`]: user = CN, groups = O);
//! 2. with `--authentication-token-webhook`, an `Authorization: Bearer` token, reviewed
//!    by the API server ([`webhook`], a TokenReview, cached);
//! 3. with `--anonymous-auth`, `system:anonymous` in `system:unauthenticated`.
//!
//! Users of 1 and 2 also get `system:authenticated`. A certificate that does not verify
//! (another CA, expired …) and a token the API server refuses, or cannot review, are
//! failed credentials: 401 `Unauthorized`, anonymous or not, and a failed certificate
//! ends the chain before the token is asked (upstream's `unionauth.NewFailOnError`);
//! so is no credential without anonymous.
//!
//! Authorization: `AlwaysAllow`, or `Webhook`: a SubjectAccessReview per subresource of
//! the request's attributes ([`attributes`], the fine-grained one first, then `proxy`;
//! a write on `/pods`, which pushes pods, is `proxy` alone),
//! the first allow wins; none: 403 `Forbidden (user=…, verb=…, resource=nodes,
//! subresource(s)=[…])`; a review that fails: 500 `Authorization error (…)`.

pub(crate) mod cache;
pub(crate) mod webhook;

use std::sync::Arc;

use self::webhook::Webhooks;
use apiclient::review::AccessRequest;
use base::loops::error_chain;
use wire::server::{Reply, Req};
use wire::x509::{self, ClientCert, User};

/// `system:anonymous`, upstream's anonymous user.
pub(crate) const ANONYMOUS_USER: &str = "system:anonymous";
/// `system:unauthenticated`, its group.
pub(crate) const UNAUTHENTICATED_GROUP: &str = "system:unauthenticated";
/// `system:authenticated`, the group every authenticated user is in.
pub(crate) const AUTHENTICATED_GROUP: &str = "system:authenticated";

/// How the port authenticates and authorizes.
#[derive(Debug, Clone)]
pub(crate) struct AuthConfig {
    /// `--anonymous-auth`.
    pub anonymous: bool,
    /// With `--authentication-token-webhook`: who reviews bearer tokens. `None`: a
    /// bearer token is not a credential (nor an error) here.
    pub token_webhook: Option<Arc<Webhooks>>,
    /// `--authorization-mode`.
    pub authorizer: Authorizer,
    /// The node's name: the `nodes/<name>` the attributes name.
    pub node_name: String,
}

/// `--authorization-mode`, with what it needs.
#[derive(Debug, Clone)]
pub(crate) enum Authorizer {
    /// Every authenticated request is allowed.
    AlwaysAllow,
    /// A SubjectAccessReview to the API server decides.
    Webhook(Arc<Webhooks>),
}

/// Upstream's authorizer attributes of a kubelet request (resource `nodes`, API group
/// `""`, version `v1`, a resource request).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Attributes {
    /// The API verb from the HTTP method (`get`, `create` …; empty for others).
    pub verb: &'static str,
    /// The subresources to try in order: the fine-grained one (`pods`, `healthz`,
    /// `configz`) then `proxy`, or one (`stats`, `metrics`, `log`, `checkpoint`, `spec`,
    /// `proxy`). Either allowing wins (`KubeletFineGrainedAuthz`, on by default since
    /// 1.33).
    pub subresources: Vec<&'static str>,
    /// The node's name.
    pub name: String,
}

/// What the token authenticator made of a request's bearer token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TokenOutcome {
    /// No bearer token, or tokens are not reviewed here.
    Absent,
    /// The token's user.
    User(User),
    /// The token was refused, or could not be reviewed: why.
    Failed(String),
}

/// Upstream's chain: the certificate's user, else the token's, else anonymous. `token`
/// is asked only when no certificate was presented or a verified one gave no user (no
/// CN). `Err(None)`: no credential and no anonymous; `Err(Some(why))`: a credential
/// that failed (401 even with anonymous on).
pub(crate) fn authenticate(
    cert: &ClientCert,
    token: impl FnOnce() -> TokenOutcome,
    anonymous: bool,
) -> Result<User, Option<String>> {
    match cert {
        ClientCert::Verified(chain) => {
            if let Some(user) = chain.first().and_then(|leaf| x509::user_of(leaf)) {
                return Ok(with_authenticated_group(user));
            }
        }
        ClientCert::Unverified { subject, reason } => {
            return Err(Some(format!(
                "client certificate {subject:?} did not verify against the client CA: {reason}"
            )));
        }
        ClientCert::Absent => {}
    }
    match token() {
        TokenOutcome::User(user) => return Ok(with_authenticated_group(user)),
        TokenOutcome::Failed(why) => return Err(Some(why)),
        TokenOutcome::Absent => {}
    }
    if anonymous {
        Ok(User {
            name: ANONYMOUS_USER.to_string(),
            groups: vec![UNAUTHENTICATED_GROUP.to_string()],
            ..User::default()
        })
    } else {
        Err(None)
    }
}

/// Upstream's `AuthenticatedGroupAdder`: `system:authenticated` joins the groups unless
/// the user is anonymous or already in it (or in `system:unauthenticated`).
fn with_authenticated_group(mut user: User) -> User {
    let marked = user
        .groups
        .iter()
        .any(|g| g == AUTHENTICATED_GROUP || g == UNAUTHENTICATED_GROUP);
    if user.name != ANONYMOUS_USER && !marked {
        user.groups.push(AUTHENTICATED_GROUP.to_string());
    }
    user
}

/// The bearer token of `Authorization: Bearer <token>` (upstream's `bearertoken`: the
/// scheme case-insensitive, one space, a non-empty token).
pub(crate) fn bearer_token(req: &Req) -> Option<&str> {
    let value = req.header("Authorization")?.trim();
    let mut parts = value.splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The attributes of a request on the kubelet port (`GetRequestAttributes`).
pub(crate) fn attributes(method: &str, path: &str, node_name: &str) -> Attributes {
    let verb = match method {
        "POST" => "create",
        "GET" | "HEAD" => "get",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => "",
    };
    let sub = |p: &str| is_subpath(path, p);
    let subresources = if sub("/stats") {
        vec!["stats"]
    } else if sub("/metrics") {
        vec!["metrics"]
    } else if sub("/logs") {
        vec!["log"]
    } else if sub("/spec") {
        vec!["spec"]
    } else if sub("/checkpoint") {
        // Its own subresource only, no `proxy` fallback (upstream's, every release).
        vec!["checkpoint"]
    } else if sub("/pods") && matches!(verb, "create" | "update" | "patch" | "delete") {
        // A write on /pods pushes or removes pods (the server source): running code on
        // the node, so `nodes/proxy` alone, as /run and /exec; `nodes/pods`, which lets
        // monitoring read the pod list, never lets anyone write it.
        vec!["proxy"]
    } else if sub("/pods") || sub("/runningpods") {
        vec!["pods", "proxy"]
    } else if sub("/healthz") {
        vec!["healthz", "proxy"]
    } else if sub("/configz") {
        vec!["configz", "proxy"]
    } else {
        vec!["proxy"]
    };
    Attributes {
        verb,
        subresources,
        name: node_name.to_string(),
    }
}

/// Upstream's `isSubpath`: `path` itself or anything below it.
fn is_subpath(subpath: &str, path: &str) -> bool {
    let path = path.trim_end_matches('/');
    subpath == path
        || subpath
            .strip_prefix(path)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Authenticates and authorizes `req`; the answer to send instead of routing it, if
/// it may not go on.
pub(crate) fn filter(auth: &AuthConfig, req: &Req) -> Result<(), Reply> {
    let token = || match (&auth.token_webhook, bearer_token(req)) {
        (Some(reviewer), Some(token)) => match reviewer.authenticate_token(token) {
            Ok(Some(user)) => TokenOutcome::User(user),
            Ok(None) => TokenOutcome::Failed("invalid bearer token".into()),
            Err(e) => {
                if !matches!(e, webhook::WebhookError::Unavailable) {
                    log::warn!(
                        "srv-kubelet: unable to authenticate a bearer token: {}",
                        error_chain(&e)
                    );
                }
                TokenOutcome::Failed(error_chain(&e))
            }
        },
        _ => TokenOutcome::Absent,
    };
    let user = match authenticate(&req.client_cert, token, auth.anonymous) {
        Ok(user) => user,
        Err(why) => {
            log::debug!(
                "srv-kubelet: unauthenticated request from {:?}: {}",
                req.peer,
                why.as_deref().unwrap_or("no credentials")
            );
            return Err(Reply::text(401, "Unauthorized"));
        }
    };
    let path = format!("/{}", req.segments.join("/"));
    let attrs = attributes(&req.method, &path, &auth.node_name);
    log::debug!(
        "srv-kubelet: user={} groups={:?} verb={} resource=nodes name={} subresource(s)={:?} \
         path={path}",
        user.name,
        user.groups,
        attrs.verb,
        attrs.name,
        attrs.subresources
    );
    match &auth.authorizer {
        Authorizer::AlwaysAllow => Ok(()),
        Authorizer::Webhook(reviewer) => decide(&user, &attrs, |subresource| {
            let request = AccessRequest {
                user: user.name.clone(),
                uid: user.uid.clone(),
                groups: user.groups.clone(),
                extra: user.extra.clone(),
                verb: attrs.verb.to_string(),
                subresource: subresource.to_string(),
                node: attrs.name.clone(),
            };
            reviewer.authorize(&request).map_err(|e| error_chain(&e))
        }),
    }
}

/// Upstream's loop over the attributes: each subresource in turn until one is allowed;
/// an error ends it with 500 (naming that subresource), none allowed with 403 (naming
/// them all). `ask` is the authorizer.
fn decide(
    user: &User,
    attrs: &Attributes,
    mut ask: impl FnMut(&str) -> Result<bool, String>,
) -> Result<(), Reply> {
    for subresource in &attrs.subresources {
        match ask(subresource) {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => {
                let msg = format!(
                    "Authorization error (user={}, verb={}, resource=nodes, subresource={subresource})",
                    user.name, attrs.verb
                );
                log::error!("srv-kubelet: {msg}: {e}");
                return Err(Reply::text(500, msg));
            }
        }
    }
    let msg = format!(
        "Forbidden (user={}, verb={}, resource=nodes, subresource(s)=[{}])",
        user.name,
        attrs.verb,
        attrs.subresources.join(" ")
    );
    log::info!("srv-kubelet: {msg}");
    Err(Reply::text(403, format!("{msg}\n")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A DER certificate with this CN and these O values (rcgen).
    fn cert(cn: Option<&str>, orgs: &[&str]) -> Vec<u8> {
        let mut params = rcgen::CertificateParams::new(vec!["x".to_string()]).expect("params");
        params.distinguished_name = rcgen::DistinguishedName::new();
        for o in orgs {
            params
                .distinguished_name
                .push(rcgen::DnType::OrganizationName, *o);
        }
        if let Some(cn) = cn {
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, cn);
        }
        let key = rcgen::KeyPair::generate().expect("key");
        params.self_signed(&key).expect("cert").der().to_vec()
    }

    fn user(name: &str, groups: &[&str]) -> User {
        User {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..User::default()
        }
    }

    #[test]
    fn certificate_users_are_cn_with_o_groups_and_anonymous_only_without_one() {
        // rcgen keeps one value per attribute; several O values are covered by the
        // integration test's openssl certificate.
        let verified = |der: Vec<u8>| ClientCert::Verified(vec![der]);
        let admin = verified(cert(Some("kube-apiserver"), &["system:masters"]));
        let want = user("kube-apiserver", &["system:masters", AUTHENTICATED_GROUP]);
        let absent = || TokenOutcome::Absent;
        for anonymous in [false, true] {
            assert_eq!(authenticate(&admin, absent, anonymous), Ok(want.clone()));
        }
        let anon = user(ANONYMOUS_USER, &[UNAUTHENTICATED_GROUP]);
        let none = ClientCert::Absent;
        assert_eq!(authenticate(&none, absent, true), Ok(anon.clone()));
        assert_eq!(authenticate(&none, absent, false), Err(None));
        // No CN: the certificate authenticates no one.
        let nameless = verified(cert(None, &["ops"]));
        assert_eq!(authenticate(&nameless, absent, false), Err(None));
        assert_eq!(authenticate(&nameless, absent, true), Ok(anon));
        // Garbage (never verifies, but must not panic).
        assert_eq!(
            authenticate(&verified(vec![0x30, 0x84, 0xff]), absent, false),
            Err(None)
        );
        // Already in system:authenticated: not added twice.
        let marked = verified(cert(Some("m"), &[AUTHENTICATED_GROUP]));
        assert_eq!(
            authenticate(&marked, absent, false),
            Ok(user("m", &[AUTHENTICATED_GROUP]))
        );
    }

    #[test]
    fn a_certificate_that_did_not_verify_fails_even_with_anonymous_and_a_token() {
        let rogue = ClientCert::Unverified {
            subject: "CN=mallory".into(),
            reason: "invalid peer certificate: UnknownIssuer".into(),
        };
        let alice = || TokenOutcome::User(user("alice", &[]));
        for anonymous in [false, true] {
            let unasked = || -> TokenOutcome { panic!("token asked after a failed certificate") };
            let why = authenticate(&rogue, unasked, anonymous).expect_err("401");
            let why = why.expect("a failed credential, not a missing one");
            assert!(
                why.contains("CN=mallory") && why.contains("UnknownIssuer"),
                "{why}"
            );
        }
        // Even a good token does not rescue it (upstream fails on the first error).
        assert!(authenticate(&rogue, alice, true).is_err());
        // Through the filter: 401 Unauthorized with anonymous and AlwaysAllow.
        let auth = AuthConfig {
            anonymous: true,
            token_webhook: None,
            authorizer: Authorizer::AlwaysAllow,
            node_name: "n".into(),
        };
        let mut req = Req::new("GET", "/pods");
        req.client_cert = rogue;
        let denied = filter(&auth, &req).expect_err("401");
        assert_eq!(
            (denied.status, denied.body.as_slice()),
            (401, &b"Unauthorized"[..])
        );
    }

    #[test]
    fn the_chain_is_certificate_then_token_then_anonymous_and_a_failed_token_fails() {
        let admin = ClientCert::Verified(vec![cert(Some("admin"), &[])]);
        let none = ClientCert::Absent;
        let alice = || TokenOutcome::User(user("alice", &["devs"]));
        let refused = || TokenOutcome::Failed("invalid bearer token".into());
        for anonymous in [false, true] {
            // A certificate wins; the token is not even asked.
            let unasked = || -> TokenOutcome { panic!("token asked despite a certificate") };
            assert_eq!(
                authenticate(&admin, unasked, anonymous),
                Ok(user("admin", &[AUTHENTICATED_GROUP]))
            );
            assert_eq!(
                authenticate(&none, alice, anonymous),
                Ok(user("alice", &["devs", AUTHENTICATED_GROUP]))
            );
            // A refused token is a 401 even where anonymous would have been served.
            assert_eq!(
                authenticate(&none, refused, anonymous),
                Err(Some("invalid bearer token".into()))
            );
        }
    }

    #[test]
    fn bearer_tokens_are_read_as_upstream() {
        let with = |value: &str| {
            let mut r = Req::new("GET", "/pods");
            r.headers.push(("authorization".into(), value.into()));
            r
        };
        assert_eq!(bearer_token(&with("Bearer abc")), Some("abc"));
        assert_eq!(bearer_token(&with("bearer abc")), Some("abc"));
        assert_eq!(bearer_token(&with("Bearer abc def")), Some("abc"));
        assert_eq!(bearer_token(&with("Bearer  abc")), None, "empty token");
        assert_eq!(bearer_token(&with("Bearer")), None);
        assert_eq!(bearer_token(&with("Basic abc")), None);
        assert_eq!(bearer_token(&Req::new("GET", "/pods")), None);
    }

    #[test]
    fn requests_map_to_upstream_verbs_and_subresources() {
        let cases: &[(&str, &str, &str, &[&str])] = &[
            ("GET", "/pods", "get", &["pods", "proxy"]),
            ("HEAD", "/pods/", "get", &["pods", "proxy"]),
            ("GET", "/runningpods/", "get", &["pods", "proxy"]),
            ("GET", "/podsx", "get", &["proxy"]),
            ("GET", "/healthz/syncloop", "get", &["healthz", "proxy"]),
            ("GET", "/configz", "get", &["configz", "proxy"]),
            ("POST", "/checkpoint/ns/p/c", "create", &["checkpoint"]),
            ("GET", "/stats/summary", "get", &["stats"]),
            ("GET", "/metrics", "get", &["metrics"]),
            ("GET", "/metrics/cadvisor", "get", &["metrics"]),
            ("GET", "/logs/syslog", "get", &["log"]),
            ("GET", "/spec/", "get", &["spec"]),
            ("POST", "/exec/ns/p/c", "create", &["proxy"]),
            ("GET", "/containerLogs/ns/p/c", "get", &["proxy"]),
            ("PUT", "/debug/flags/v", "update", &["proxy"]),
            ("DELETE", "/x", "delete", &["proxy"]),
            ("PATCH", "/x", "patch", &["proxy"]),
            ("OPTIONS", "/pods", "", &["pods", "proxy"]),
            ("PUT", "/pods", "update", &["proxy"]),
            ("POST", "/pods", "create", &["proxy"]),
            ("PATCH", "/pods", "patch", &["proxy"]),
            ("DELETE", "/pods/default/web", "delete", &["proxy"]),
            ("POST", "/runningpods/", "create", &["pods", "proxy"]),
        ];
        for (method, path, verb, subs) in cases {
            let a = attributes(method, path, "node-1");
            assert_eq!(
                (a.verb, a.subresources.as_slice()),
                (*verb, *subs),
                "{method} {path}"
            );
            assert_eq!(a.name, "node-1");
        }
    }

    #[test]
    fn the_first_allowed_subresource_wins_and_refusals_say_upstreams_words() {
        let alice = user("alice", &[AUTHENTICATED_GROUP]);
        let pods = attributes("GET", "/pods", "n");
        let mut asked = Vec::new();
        // Fine-grained refused, proxy allowed: allowed, both asked in order.
        let r = decide(&alice, &pods, |s| {
            asked.push(s.to_string());
            Ok(s == "proxy")
        });
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(asked, ["pods", "proxy"]);
        // The fine-grained one allowed: proxy is not asked.
        let mut asked = Vec::new();
        let r = decide(&alice, &pods, |s| {
            asked.push(s.to_string());
            Ok(true)
        });
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(asked, ["pods"]);
        // Neither: 403 naming both, with upstream's newline.
        let denied = decide(&alice, &pods, |_| Ok(false)).expect_err("403");
        assert_eq!(denied.status, 403);
        assert_eq!(
            String::from_utf8_lossy(&denied.body),
            "Forbidden (user=alice, verb=get, resource=nodes, subresource(s)=[pods proxy])\n"
        );
        // An error ends the loop with 500 naming the subresource asked.
        let failed = decide(&alice, &pods, |_| Err("unreachable".into())).expect_err("500");
        assert_eq!(failed.status, 500);
        assert_eq!(
            String::from_utf8_lossy(&failed.body),
            "Authorization error (user=alice, verb=get, resource=nodes, subresource=pods)"
        );
        let exec = attributes("POST", "/exec/ns/p/c", "n");
        let denied = decide(&alice, &exec, |_| Ok(false)).expect_err("403");
        assert_eq!(
            String::from_utf8_lossy(&denied.body),
            "Forbidden (user=alice, verb=create, resource=nodes, subresource(s)=[proxy])\n"
        );
    }

    #[test]
    fn the_filter_answers_401_without_credentials_and_ignores_tokens_without_a_webhook() {
        let mut auth = AuthConfig {
            anonymous: false,
            token_webhook: None,
            authorizer: Authorizer::AlwaysAllow,
            node_name: "n".into(),
        };
        let mut req = Req::new("GET", "/pods");
        // A bearer token alone is not a credential without the token webhook.
        req.headers
            .push(("Authorization".into(), "Bearer abc".into()));
        let denied = filter(&auth, &req).expect_err("401");
        assert_eq!(
            (denied.status, denied.body.as_slice()),
            (401, &b"Unauthorized"[..])
        );
        auth.anonymous = true;
        assert!(filter(&auth, &req).is_ok(), "anonymous + AlwaysAllow");
        req.client_cert = ClientCert::Verified(vec![cert(Some("admin"), &[])]);
        auth.anonymous = false;
        assert!(filter(&auth, &req).is_ok(), "certificate + AlwaysAllow");
    }
}
