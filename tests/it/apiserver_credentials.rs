//! The credentials the stand-in API server hands out, and who may ask for them:
//!
//! - TokenRequest (`POST /api/v1/namespaces/{ns}/serviceaccounts/{name}/token`, as
//!   `pkg/registry/core/serviceaccount/storage/token.go`): validated (expirationSeconds
//!   defaulted to 3600, below 600 → 422 "may not specify a duration less than 10
//!   minutes"), the bound object looked up (a pod must exist, run as that service
//!   account and have the uid given, else 404/400/409), and answered with a JWT-shaped
//!   token whose payload has `aud`, `exp`, `iat`, `nbf`, `iss`, `jti`, `sub`
//!   (`system:serviceaccount:<ns>:<name>`) and `kubernetes.io` (namespace, pod,
//!   node, serviceaccount) and `status.expirationTimestamp`; every request recorded.
//! - CertificateSigningRequests: on create the request must be a PEM
//!   `CERTIFICATE REQUEST` with a signerName and usages (else 422); a test-driven
//!   approver ([`super::TestApiServer::approve_csr`], `deny_csr`, an auto-approve
//!   switch, or a client's PUT of the `approval` subresource) and a signer that, for
//!   an approved CSR, checks the request (signature; for
//!   `kubernetes.io/kube-apiserver-client-kubelet` CN `system:node:*` and O
//!   `system:nodes`, else a `Failed` condition) and signs it with the test CA through
//!   `openssl ca` for the configured lifetime (or `spec.expirationSeconds` if
//!   shorter), writing `status.certificate`.
//! - Bootstrap tokens (`<id>.<secret>`): the user `system:bootstrap:<id>` in group
//!   `system:bootstrappers`, allowed only certificatesigningrequests (403 Forbidden
//!   elsewhere), as kubeadm's RBAC allows them.
//!
//! Where it is not faithful: tokens are not signed (the signature part is a fixed
//! string) and nothing verifies them; no extended bound-token expiry (upstream gives
//! kube-audience pod tokens a year and warns after the asked time); the signer does
//! not backdate `notBefore` (upstream backdates up to 5 minutes), copies the CSR's
//! extensions (SANs) for every signer, and enforces no usage rules; `openssl` 3.0 has
//! no `-not_after` for `x509 -req`, so `openssl ca` with `-startdate`/`-enddate` gives
//! second-precision lifetimes.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

use base64::Engine as _;
use serde_json::{json, Value};

use super::store::{self, ApiError, Identity, Resource, Store};
use super::{lock, Pki, Shared};

/// The audience of a token when the request names none.
pub const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

fn b64url(data: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(data)
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

fn rfc3339(secs: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(secs)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

/// Decodes the payload of a token this server issued (for tests).
pub fn token_claims(token: &str) -> Option<Value> {
    let payload = token.split('.').nth(1)?;
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .ok()?;
    serde_json::from_slice(&raw).ok()
}

/// A TokenRequest for service account `ns`/`name`: the TokenRequest answered.
pub fn token_request(
    st: &mut Store,
    require_sa: bool,
    ns: &str,
    name: &str,
    req: &Value,
) -> Result<Value, ApiError> {
    let sa_res = store::resource("serviceaccounts").expect("served");
    let invalid = |msg: String| ApiError {
        code: 422,
        reason: "Invalid",
        message: format!("TokenRequest.authentication.k8s.io \"{name}\" is invalid: {msg}"),
        details: json!({"name": name, "group": "authentication.k8s.io", "kind": "TokenRequest"}),
    };
    let req_name = req["metadata"]["name"].as_str().unwrap_or_default();
    if !req_name.is_empty() && req_name != name {
        return Err(invalid(format!(
            "metadata.name: Invalid value: \"{req_name}\": must match the service account name if specified"
        )));
    }
    let sa = st.get(sa_res, ns, name).cloned();
    if sa.is_none() && require_sa {
        return Err(ApiError::not_found(sa_res, name));
    }
    let sa_uid = sa
        .as_ref()
        .and_then(|s| s["metadata"]["uid"].as_str())
        .map(str::to_string)
        .unwrap_or_else(|| format!("uid-sa-{ns}-{name}"));
    let exp_secs = req["spec"]["expirationSeconds"].as_i64().unwrap_or(3600);
    if exp_secs < 600 {
        return Err(ApiError {
            message: format!("TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: {exp_secs}: may not specify a duration less than 10 minutes"),
            ..invalid(String::new())
        });
    }
    if exp_secs > 1 << 32 {
        return Err(ApiError {
            message: format!("TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: {exp_secs}: may not specify a duration larger than 2^32 seconds"),
            ..invalid(String::new())
        });
    }
    let mut audiences: Vec<Value> = req["spec"]["audiences"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if audiences.is_empty() {
        audiences = vec![json!(API_AUDIENCE)];
    }
    let mut k8s = json!({"namespace": ns, "serviceaccount": {"name": name, "uid": sa_uid}});
    let bound = &req["spec"]["boundObjectRef"];
    if !bound.is_null() {
        let kind = bound["kind"].as_str().unwrap_or_default();
        let bname = bound["name"].as_str().unwrap_or_default();
        let want_uid = bound["uid"].as_str().unwrap_or_default();
        let (res_name, group_kind) = match kind {
            "Pod" => ("pods", "Pod"),
            "Secret" => ("secrets", "Secret"),
            "Node" => ("nodes", "Node"),
            other => {
                return Err(ApiError::bad_request(format!(
                    "cannot bind token to object of type /v1, Kind={other}"
                )))
            }
        };
        let res = store::resource(res_name).expect("served");
        let obj = st
            .get(res, ns, bname)
            .cloned()
            .ok_or_else(|| ApiError::not_found(res, bname))?;
        if kind == "Pod" {
            let pod_sa = obj["spec"]["serviceAccountName"]
                .as_str()
                .filter(|s| !s.is_empty())
                .unwrap_or("default");
            if pod_sa != name {
                return Err(ApiError::bad_request(format!(
                    "cannot bind token for serviceaccount \"{name}\" to pod running with different serviceaccount name."
                )));
            }
        }
        let uid = obj["metadata"]["uid"].as_str().unwrap_or_default();
        if !want_uid.is_empty() && want_uid != uid {
            return Err(ApiError::conflict(
                &Resource {
                    name: group_kind,
                    ..*res
                },
                bname,
                &format!("the UID in the bound object reference ({want_uid}) does not match the UID in record. The object might have been deleted and then recreated"),
            ));
        }
        k8s[kind.to_lowercase()] = json!({"name": bname, "uid": uid});
        if kind == "Pod" {
            if let Some(node) = obj["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
                let node_uid = st
                    .get(store::resource("nodes").expect("served"), "", node)
                    .and_then(|n| n["metadata"]["uid"].as_str().map(str::to_string));
                k8s["node"] = match node_uid {
                    Some(u) => json!({"name": node, "uid": u}),
                    None => json!({"name": node}),
                };
            }
        }
    }
    let now = unix_now();
    let claims = json!({
        "aud": audiences,
        "exp": now + exp_secs,
        "iat": now,
        "nbf": now,
        "iss": API_AUDIENCE,
        "jti": st.new_uid(),
        "kubernetes.io": k8s,
        "sub": format!("system:serviceaccount:{ns}:{name}"),
    });
    let header = json!({"alg": "RS256", "kid": "stand-in"});
    let token = format!(
        "{}.{}.{}",
        b64url(header.to_string().as_bytes()),
        b64url(claims.to_string().as_bytes()),
        b64url(b"stand-in: not signed")
    );
    let mut out = req.clone();
    out["apiVersion"] = json!("authentication.k8s.io/v1");
    out["kind"] = json!("TokenRequest");
    if !out["metadata"].is_object() {
        out["metadata"] = json!({});
    }
    out["metadata"]["name"] = json!(name);
    out["metadata"]["namespace"] = json!(ns);
    out["metadata"]["creationTimestamp"] = json!(rfc3339(now));
    out["spec"]["audiences"] = json!(audiences);
    out["spec"]["expirationSeconds"] = json!(exp_secs);
    out["status"] = json!({"token": token, "expirationTimestamp": rfc3339(now + exp_secs)});
    Ok(out)
}

/// The user of a bootstrap token `<id>.<secret>` if it is one of `known` (id → secret).
pub fn bootstrap_identity(
    token: &str,
    known: &std::collections::BTreeMap<String, String>,
) -> Option<Identity> {
    let (id, secret) = token.split_once('.')?;
    let ok = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    if !ok(id, 6) || !ok(secret, 16) || known.get(id).map(String::as_str) != Some(secret) {
        return None;
    }
    Some(Identity {
        user: format!("system:bootstrap:{id}"),
        groups: vec!["system:bootstrappers".into(), "system:authenticated".into()],
    })
}

/// Whether `who` may touch `res` at all: bootstrap users only CSRs. The refusal is
/// upstream's Forbidden wording.
pub fn authorize(who: &Identity, verb: &str, res: &Resource, ns: &str) -> Result<(), ApiError> {
    if !who.groups.iter().any(|g| g == "system:bootstrappers")
        || res.name == "certificatesigningrequests"
    {
        return Ok(());
    }
    let scope = if ns.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace \"{ns}\"")
    };
    Err(ApiError {
        code: 403,
        reason: "Forbidden",
        message: format!(
            "{} is forbidden: User \"{}\" cannot {verb} resource \"{}\" in API group \"{}\" {scope}",
            res.qualified(),
            who.user,
            res.name,
            res.group
        ),
        details: json!({"kind": res.name}),
    })
}

/// Adds an `Approved` (or `Denied`) condition to CSR `name`, if it has neither.
/// Returns false when there is no such CSR.
pub(super) fn decide(sh: &Shared, name: &str, approve: bool) -> bool {
    let res = store::resource("certificatesigningrequests").expect("served");
    let mut st = lock(&sh.state);
    let Some(mut csr) = st.store.get(res, "", name).cloned() else {
        return false;
    };
    let decided = csr["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == "Approved" || c["type"] == "Denied")
    });
    if !decided {
        let (ty, reason, message) = if approve {
            ("Approved", "StandInApprove", "approved by the test")
        } else {
            ("Denied", "StandInDeny", "denied by the test")
        };
        let cond = json!({"type": ty, "status": "True", "reason": reason, "message": message,
            "lastUpdateTime": store::now(), "lastTransitionTime": store::now()});
        match csr["status"]["conditions"].as_array_mut() {
            Some(c) => c.push(cond),
            None => csr["status"]["conditions"] = json!([cond]),
        }
        st.store.put_raw(res, "MODIFIED", csr);
    }
    drop(st);
    sh.changed.notify_all();
    true
}

static SIGNINGS: AtomicU64 = AtomicU64::new(0);

/// The signer: if CSR `name` is approved and not yet issued (nor failed), checks and
/// signs it with the test CA for `lifetime` seconds (or its `expirationSeconds` if
/// shorter) and writes `status.certificate`; a request that fails the checks gets a
/// `Failed` condition. Runs openssl with no lock held.
pub(super) fn sign(sh: &Shared, name: &str, lifetime: i64) {
    let res = store::resource("certificatesigningrequests").expect("served");
    let csr = match lock(&sh.state).store.get(res, "", name) {
        Some(c) => c.clone(),
        None => return,
    };
    let conds: Vec<&str> = csr["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["status"] == "True")
        .filter_map(|c| c["type"].as_str())
        .collect();
    if !conds.contains(&"Approved")
        || conds.contains(&"Denied")
        || conds.contains(&"Failed")
        || !csr["status"]["certificate"].is_null()
    {
        return;
    }
    let seconds = csr["spec"]["expirationSeconds"]
        .as_i64()
        .map_or(lifetime, |e| e.min(lifetime));
    let signer = csr["spec"]["signerName"].as_str().unwrap_or_default();
    let pem = csr["spec"]["request"]
        .as_str()
        .and_then(|r| base64::engine::general_purpose::STANDARD.decode(r).ok())
        .unwrap_or_default();
    let usages: Vec<&str> = csr["spec"]["usages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let outcome = issue(&pem, signer, &usages, seconds);
    let mut st = lock(&sh.state);
    let Some(mut csr) = st.store.get(res, "", name).cloned() else {
        return;
    };
    match outcome {
        Ok(cert) => {
            csr["status"]["certificate"] =
                json!(base64::engine::general_purpose::STANDARD.encode(cert));
        }
        Err(why) => {
            let cond = json!({"type": "Failed", "status": "True",
                "reason": "SignerValidationFailure", "message": why,
                "lastUpdateTime": store::now(), "lastTransitionTime": store::now()});
            match csr["status"]["conditions"].as_array_mut() {
                Some(c) => c.push(cond),
                None => csr["status"]["conditions"] = json!([cond]),
            }
        }
    }
    st.store.put_raw(res, "MODIFIED", csr);
    drop(st);
    sh.changed.notify_all();
}

fn run(dir: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .map_err(|e| format!("openssl: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "openssl {}: {}",
            args.first().copied().unwrap_or_default(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Signs PEM CSR `pem` with the test CA: the certificate's PEM, or why not.
fn issue(pem: &[u8], signer: &str, usages: &[&str], seconds: i64) -> Result<Vec<u8>, String> {
    let pki = Pki::get();
    let n = SIGNINGS.fetch_add(1, Ordering::SeqCst);
    let dir = pki.dir.join(format!("signer-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("new")).map_err(|e| e.to_string())?;
    let result = (|| {
        std::fs::write(dir.join("req.csr"), pem).map_err(|e| e.to_string())?;
        let subject = run(
            &dir,
            &[
                "req", "-in", "req.csr", "-noout", "-verify", "-subject", "-nameopt", "RFC2253",
            ],
        )?;
        let subject = subject
            .lines()
            .find_map(|l| l.strip_prefix("subject="))
            .unwrap_or_default()
            .trim()
            .to_string();
        if signer == "kubernetes.io/kube-apiserver-client-kubelet" {
            let parts: Vec<&str> = subject.split(',').collect();
            let cn_ok = parts
                .iter()
                .any(|p| p.starts_with("CN=system:node:") && p.len() > "CN=system:node:".len());
            let orgs: Vec<&&str> = parts.iter().filter(|p| p.starts_with("O=")).collect();
            if !cn_ok || orgs.len() != 1 || *orgs[0] != "O=system:nodes" {
                return Err(format!(
                    "subject {subject:?} is not a kubelet client's (CN=system:node:<name>, O=system:nodes)"
                ));
            }
        }
        let mut eku = Vec::new();
        if usages.contains(&"client auth") {
            eku.push("clientAuth");
        }
        if usages.contains(&"server auth") {
            eku.push("serverAuth");
        }
        let mut ku = vec!["digitalSignature"];
        if usages.contains(&"key encipherment") {
            ku.push("keyEncipherment");
        }
        let eku_line = if eku.is_empty() {
            String::new()
        } else {
            format!("extendedKeyUsage = {}\n", eku.join(","))
        };
        let conf = format!(
            "[ca]\ndefault_ca = sign\n[sign]\ndir = .\ndatabase = index.txt\nnew_certs_dir = new\n\
             serial = serial\ndefault_md = sha256\npolicy = any\ncopy_extensions = copy\n\
             unique_subject = no\nemail_in_dn = no\n[any]\ncommonName = optional\n\
             organizationName = optional\n[ext]\nbasicConstraints = critical,CA:FALSE\n\
             keyUsage = critical,{}\n{eku_line}",
            ku.join(",")
        );
        std::fs::write(dir.join("ca.conf"), conf).map_err(|e| e.to_string())?;
        std::fs::write(dir.join("index.txt"), "").map_err(|e| e.to_string())?;
        std::fs::write(
            dir.join("serial"),
            format!("{:016X}\n", n + 0x1000 * u64::from(std::process::id())),
        )
        .map_err(|e| e.to_string())?;
        let now = unix_now();
        let fmt = |s: i64| {
            k8s_openapi::jiff::Timestamp::from_second(s)
                .map(|t| t.strftime("%Y%m%d%H%M%SZ").to_string())
                .unwrap_or_default()
        };
        let (start, end) = (fmt(now), fmt(now + seconds));
        let ca = pki.ca.display().to_string();
        let key = pki.dir.join("ca.key").display().to_string();
        run(
            &dir,
            &[
                "ca",
                "-batch",
                "-config",
                "ca.conf",
                "-cert",
                &ca,
                "-keyfile",
                &key,
                "-in",
                "req.csr",
                "-out",
                "out.crt",
                "-notext",
                "-preserveDN",
                "-extensions",
                "ext",
                "-startdate",
                &start,
                "-enddate",
                &end,
            ],
        )?;
        std::fs::read(dir.join("out.crt")).map_err(|e| e.to_string())
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}
