//! Authentication and authorization of the kubelet port (upstream's
//! `pkg/kubelet/server/auth.go` and the chain `cmd/kubelet/app/auth.go` builds): one
//! function, [`filter`], runs before the port's route `match`.
//!
//! Authentication: the client certificate rustls verified against `--client-ca-file`
//! (user = the leaf's CN, groups = its O values); else, with `--anonymous-auth`,
//! `system:anonymous` in `system:unauthenticated`; else 401 `Unauthorized`. Bearer
//! tokens (TokenReview) are not implemented: a request with only a token is treated as
//! one without credentials. Authorization: `AlwaysAllow`; `Webhook` (a
//! SubjectAccessReview) is refused at start, and would answer 500 here if it ever got
//! this far. Each request's upstream attributes (verb, `nodes/<subresource>`) are
//! computed and logged, so a webhook authorizer has what it needs.

use super::{Reply, Req};
use crate::config::values::AuthorizationMode;

/// `system:anonymous`, upstream's anonymous user.
pub const ANONYMOUS_USER: &str = "system:anonymous";
/// `system:unauthenticated`, its group.
pub const UNAUTHENTICATED_GROUP: &str = "system:unauthenticated";
/// `system:authenticated`, the group every authenticated user is in.
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";

/// How the port authenticates and authorizes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthConfig {
    /// `--anonymous-auth`.
    pub anonymous: bool,
    /// `--authorization-mode`.
    pub mode: AuthorizationMode,
    /// The node's name: the `nodes/<name>` the attributes name.
    pub node_name: String,
}

/// Who made a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// The user name.
    pub name: String,
    /// Its groups.
    pub groups: Vec<String>,
}

/// Upstream's authorizer attributes of a kubelet request (resource `nodes`, API group
/// `""`, version `v1`, a resource request).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attributes {
    /// The API verb from the HTTP method (`get`, `create` …; empty for others).
    pub verb: &'static str,
    /// The subresources to try in order: the fine-grained one (`pods`, `healthz`,
    /// `configz`, `checkpoint`) then `proxy`, or one (`stats`, `metrics`, `log`,
    /// `spec`, `proxy`). Either allowing wins (`KubeletFineGrainedAuthz`).
    pub subresources: Vec<&'static str>,
    /// The node's name.
    pub name: String,
}

/// The user a request authenticates as, if any.
pub fn authenticate(peer_certificates: &[Vec<u8>], anonymous: bool) -> Option<User> {
    if let Some(user) = peer_certificates.first().and_then(|leaf| user_of(leaf)) {
        return Some(user);
    }
    anonymous.then(|| User {
        name: ANONYMOUS_USER.to_string(),
        groups: vec![UNAUTHENTICATED_GROUP.to_string()],
    })
}

/// The user of a verified leaf certificate: CN, and O as groups (upstream's
/// `CommonNameUserConversion`; a certificate without a CN authenticates no one).
fn user_of(der: &[u8]) -> Option<User> {
    let subject = subject(der)?;
    let name = subject
        .iter()
        .find(|(oid, _)| *oid == OID_COMMON_NAME)
        .map(|(_, v)| v.clone())
        .filter(|n| !n.is_empty())?;
    let mut groups: Vec<String> = subject
        .iter()
        .filter(|(oid, _)| *oid == OID_ORGANIZATION)
        .map(|(_, v)| v.clone())
        .collect();
    groups.push(AUTHENTICATED_GROUP.to_string());
    Some(User { name, groups })
}

/// The attributes of a request on the kubelet port (`GetRequestAttributes`).
pub fn attributes(method: &str, path: &str, node_name: &str) -> Attributes {
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
    } else if sub("/pods") || sub("/runningpods") {
        vec!["pods", "proxy"]
    } else if sub("/healthz") {
        vec!["healthz", "proxy"]
    } else if sub("/configz") {
        vec!["configz", "proxy"]
    } else if sub("/checkpoint") {
        vec!["checkpoint", "proxy"]
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
pub fn filter(auth: &AuthConfig, req: &Req) -> Result<(), Reply> {
    let Some(user) = authenticate(&req.peer_certificates, auth.anonymous) else {
        log::debug!("srv-kubelet: unauthenticated request from {:?}", req.peer);
        return Err(Reply::text(401, "Unauthorized"));
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
    match auth.mode {
        AuthorizationMode::AlwaysAllow => Ok(()),
        // Refused at start (no SubjectAccessReview client yet); never allow by accident.
        AuthorizationMode::Webhook => Err(Reply::text(
            500,
            format!(
                "Authorization error (user={}, verb={}, resource=nodes, subresource(s)={:?})",
                user.name, attrs.verb, attrs.subresources
            ),
        )),
    }
}

/// `2.5.4.3`, id-at-commonName, as DER content bytes.
const OID_COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
/// `2.5.4.10`, id-at-organizationName.
const OID_ORGANIZATION: &[u8] = &[0x55, 0x04, 0x0a];

/// One DER element: (tag, content, what follows). Single-byte tags only (all the
/// certificate fields walked here have one); lengths up to 4 bytes.
fn tlv(buf: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = buf.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

/// The subject of a DER certificate as (attribute OID, value) pairs, in order. The
/// certificate was verified by rustls already; this only reads its names.
fn subject(der: &[u8]) -> Option<Vec<(&[u8], String)>> {
    const SEQUENCE: u8 = 0x30;
    const SET: u8 = 0x31;
    const OID: u8 = 0x06;
    let (SEQUENCE, cert, _) = tlv(der)? else {
        return None;
    };
    let (SEQUENCE, tbs, _) = tlv(cert)? else {
        return None;
    };
    // [0] version (optional), serial, signature algorithm, issuer, validity, subject.
    let (tag, _, mut rest) = tlv(tbs)?;
    if tag == 0xa0 {
        rest = tlv(rest)?.2; // the serial
    }
    for _ in 0..3 {
        rest = tlv(rest)?.2;
    }
    let (SEQUENCE, mut rdns, _) = tlv(rest)? else {
        return None;
    };
    let mut out = Vec::new();
    while !rdns.is_empty() {
        let (SET, mut set, after) = tlv(rdns)? else {
            return None;
        };
        rdns = after;
        while !set.is_empty() {
            let (SEQUENCE, atv, after) = tlv(set)? else {
                return None;
            };
            set = after;
            let (OID, oid, value) = tlv(atv)? else {
                return None;
            };
            let (_, value, _) = tlv(value)?;
            out.push((oid, String::from_utf8_lossy(value).into_owned()));
        }
    }
    Some(out)
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

    #[test]
    fn certificate_users_are_cn_with_o_groups_and_anonymous_only_without_one() {
        // rcgen keeps one value per attribute; several O values are covered by the
        // integration test's openssl certificate.
        let admin = cert(Some("kube-apiserver"), &["system:masters"]);
        let want = User {
            name: "kube-apiserver".into(),
            groups: vec!["system:masters".into(), AUTHENTICATED_GROUP.into()],
        };
        for anonymous in [false, true] {
            assert_eq!(
                authenticate(std::slice::from_ref(&admin), anonymous),
                Some(want.clone())
            );
        }
        let anon = User {
            name: ANONYMOUS_USER.into(),
            groups: vec![UNAUTHENTICATED_GROUP.into()],
        };
        assert_eq!(authenticate(&[], true), Some(anon.clone()));
        assert_eq!(authenticate(&[], false), None);
        // No CN: the certificate authenticates no one.
        let nameless = cert(None, &["ops"]);
        assert_eq!(authenticate(std::slice::from_ref(&nameless), false), None);
        assert_eq!(authenticate(&[nameless], true), Some(anon));
        // Garbage (never reaches here past rustls, but must not panic).
        assert_eq!(authenticate(&[vec![0x30, 0x84, 0xff]], false), None);
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
            (
                "POST",
                "/checkpoint/ns/p/c",
                "create",
                &["checkpoint", "proxy"],
            ),
            ("GET", "/stats/summary", "get", &["stats"]),
            ("GET", "/metrics", "get", &["metrics"]),
            ("GET", "/metrics/cadvisor", "get", &["metrics"]),
            ("GET", "/logs/syslog", "get", &["log"]),
            ("GET", "/spec/", "get", &["spec"]),
            ("POST", "/exec/ns/p/c", "create", &["proxy"]),
            ("PUT", "/debug/flags/v", "update", &["proxy"]),
            ("DELETE", "/x", "delete", &["proxy"]),
            ("PATCH", "/x", "patch", &["proxy"]),
            ("OPTIONS", "/pods", "", &["pods", "proxy"]),
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
    fn the_filter_answers_401_without_credentials_and_never_allows_webhook() {
        let mut auth = AuthConfig {
            anonymous: false,
            mode: AuthorizationMode::AlwaysAllow,
            node_name: "n".into(),
        };
        let mut req = Req::new("GET", "/pods");
        // A bearer token alone is not a credential here (no TokenReview yet).
        req.headers
            .push(("Authorization".into(), "Bearer abc".into()));
        let denied = filter(&auth, &req).expect_err("401");
        assert_eq!(
            (denied.status, denied.body.as_slice()),
            (401, &b"Unauthorized"[..])
        );
        auth.anonymous = true;
        assert!(filter(&auth, &req).is_ok(), "anonymous + AlwaysAllow");
        req.peer_certificates = vec![cert(Some("admin"), &[])];
        auth.anonymous = false;
        assert!(filter(&auth, &req).is_ok(), "certificate + AlwaysAllow");
        auth.mode = AuthorizationMode::Webhook;
        assert_eq!(filter(&auth, &req).expect_err("500").status, 500);
    }
}
