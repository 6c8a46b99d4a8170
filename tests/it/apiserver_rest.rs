//! The stand-in API server's REST endpoints for the object store: URL routing
//! (`/api/v1[/namespaces/{ns}]/{resource}[/{name}[/{sub}]]`, the same under
//! `/apis/{group}/{version}`, and the old `/watch/` prefix), GET, LIST, WATCH, POST,
//! PUT, PATCH and DELETE onto [`super::store`], the scripted request faults, the
//! request counts, and discovery documents for kubectl.
//!
//! Where it is not faithful: `limit`/`continue` are ignored (a list is one page),
//! `dryRun`, `fieldManager` and server-side apply are not supported; a watch filters
//! each change by the object's new state only (upstream turns a MODIFIED that leaves
//! or enters the selection into DELETED or ADDED); `resourceVersion` on a list or get
//! is ignored (the answer is always the latest); no `sendInitialEvents`.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::Shutdown;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::store::{ApiError, Identity, PatchType, Resource, Selector, Sub, RESOURCES};
use super::{chunk, credentials, lock, proxy, read_body, respond, tables, Call, Shared, Tls};

/// A parsed object URL.
struct Target {
    res: &'static Resource,
    /// `None`: all namespaces (or a cluster-scoped kind).
    ns: Option<String>,
    name: Option<String>,
    sub: Option<String>,
    /// The `/watch/` prefix.
    watch: bool,
}

fn parse_target(route: &str) -> Option<Target> {
    let seg: Vec<&str> = route.split('/').filter(|s| !s.is_empty()).collect();
    let (group, version, mut rest) = match seg.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return None,
    };
    let mut watch = false;
    if rest.first() == Some(&"watch") {
        watch = true;
        rest = &rest[1..];
    }
    let mut ns = None;
    if rest.len() >= 3 && rest[0] == "namespaces" {
        ns = Some(rest[1].to_string());
        rest = &rest[2..];
    }
    let (res_name, name, sub) = match rest {
        [r] => (*r, None, None),
        [r, n] => (*r, Some(n.to_string()), None),
        [r, n, s] => (*r, Some(n.to_string()), Some(s.to_string())),
        _ => return None,
    };
    let res = RESOURCES
        .iter()
        .find(|r| r.name == res_name && r.group == group && r.version == version)?;
    if ns.is_some() && !res.namespaced {
        return None;
    }
    if res.namespaced && ns.is_none() && name.is_some() {
        return None;
    }
    Some(Target {
        res,
        ns,
        name,
        sub,
        watch,
    })
}

fn not_served(route: &str) -> Value {
    json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
        "message":format!("the server could not find the requested resource ({route})"),
        "reason":"NotFound","details":{},"code":404})
}

fn fail(stream: &mut Tls, e: &ApiError) -> u16 {
    respond(stream, e.code, &e.status());
    e.code
}

/// Serves one object request.
pub fn serve(
    mut stream: Tls,
    sh: &Shared,
    head: &proxy::Head,
    route: &str,
    q: &BTreeMap<String, String>,
    who: &Identity,
) {
    let Some(t) = parse_target(route) else {
        return respond(&mut stream, 404, &not_served(route));
    };
    let watching = t.watch || matches!(q.get("watch").map(String::as_str), Some("true" | "1"));
    let verb = match (head.method.as_str(), &t.name) {
        ("GET", None) if watching => "WATCH",
        ("GET", None) => "LIST",
        (m, _) => m,
    }
    .to_string();
    let kind = match &t.sub {
        Some(s) => format!("{}/{s}", t.res.name),
        None => t.res.name.to_string(),
    };
    let ns = t.ns.clone().unwrap_or_default();
    let name = t.name.clone().unwrap_or_default();
    let patch_body = std::cell::RefCell::new(None);
    let record = |code: u16| {
        lock(&sh.state).calls.push(Call {
            verb: verb.clone(),
            kind: kind.clone(),
            namespace: ns.clone(),
            name: name.clone(),
            user: who.user.clone(),
            code,
            at: Instant::now(),
            patch: patch_body.borrow_mut().take(),
        });
    };
    // A scripted failure.
    let fault = {
        let mut st = lock(&sh.state);
        if st
            .fault
            .as_ref()
            .is_some_and(|f| f.until.is_some_and(|u| u <= Instant::now()))
        {
            st.fault = None;
        }
        st.fault
            .as_ref()
            .filter(|f| f.resource.as_deref().is_none_or(|r| r == t.res.name))
            .map(|f| f.code)
    };
    if let Some(code) = fault {
        record(code);
        let reason = match code {
            503 => "ServiceUnavailable",
            429 => "TooManyRequests",
            504 => "Timeout",
            _ => "InternalError",
        };
        let body = json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
            "message":format!("scripted failure ({code})"),"reason":reason,"code":code});
        return respond(&mut stream, code, &body);
    }
    let lower = match verb.as_str() {
        "PUT" => "update".to_string(),
        "POST" => "create".to_string(),
        v => v.to_lowercase(),
    };
    if let Err(e) = credentials::authorize(who, &lower, t.res, &ns) {
        return record(fail(&mut stream, &e));
    }
    let sub = match t.sub.as_deref() {
        None => Some(Sub::Main),
        Some("status") if t.res.has_status => Some(Sub::Status),
        Some("approval") if t.res.name == "certificatesigningrequests" => Some(Sub::Approval),
        Some("token") if t.res.name == "serviceaccounts" && method_is_post(head) => {
            return token(stream, sh, head, &ns, &name, record);
        }
        _ => None,
    };
    let method = head.method.as_str();
    let as_table = tables::wants_table(head.header("accept").unwrap_or_default());
    let include = q
        .get("includeObject")
        .map(String::as_str)
        .unwrap_or("Metadata");
    if verb == "WATCH" {
        record(0);
        return watch(stream, sh, q, t.res, t.ns.as_deref());
    }
    if method == "GET" && t.name.is_none() {
        let sel = match Selector::parse(
            t.res,
            q.get("fieldSelector").map(String::as_str).unwrap_or(""),
            q.get("labelSelector").map(String::as_str).unwrap_or(""),
        ) {
            Ok(s) => s,
            Err(e) => return record(fail(&mut stream, &e)),
        };
        let st = lock(&sh.state);
        let items = st.store.list(t.res, t.ns.as_deref(), &sel);
        let rv = st.store.rv;
        drop(st);
        let body = if as_table {
            tables::table(t.res, &items, Some(rv), include)
        } else {
            json!({"kind":format!("{}List", t.res.kind),"apiVersion":t.res.api_version(),
                "metadata":{"resourceVersion": rv.to_string()},"items":items})
        };
        respond(&mut stream, 200, &body);
        return record(200);
    }
    let Some(sub) = sub else {
        let e = ApiError::not_found(t.res, &name);
        return record(fail(&mut stream, &e));
    };
    let body = if matches!(method, "POST" | "PUT" | "PATCH" | "DELETE") {
        let Some(raw) = read_body(&mut stream, head) else {
            return;
        };
        let ct = head.header("content-type").unwrap_or("application/json");
        if !ct.contains("json") {
            // Protobuf and CBOR are not spoken: 415, as a server without them.
            let e = ApiError {
                code: 415,
                reason: "UnsupportedMediaType",
                message: format!("the body of the request was in an unknown format - accepted media types include: application/json, application/yaml ({ct})"),
                details: Value::Null,
            };
            return record(fail(&mut stream, &e));
        }
        if raw.iter().all(u8::is_ascii_whitespace) {
            Value::Null
        } else {
            match serde_json::from_slice::<Value>(&raw) {
                Ok(v) => v,
                Err(e) => {
                    let e = ApiError::bad_request(format!("the request body is not JSON: {e}"));
                    return record(fail(&mut stream, &e));
                }
            }
        }
    } else {
        Value::Null
    };
    if method == "PATCH" {
        *patch_body.borrow_mut() = Some(body.clone());
    }
    let result = {
        let mut st = lock(&sh.state);
        let s = &mut st.store;
        match (method, t.name.as_deref()) {
            ("GET", Some(n)) => s
                .get(t.res, &ns, n)
                .cloned()
                .ok_or_else(|| ApiError::not_found(t.res, n))
                .map(|o| (200, o)),
            ("POST", None) => s
                .require_namespace(t.res, &ns)
                .and_then(|()| s.create(t.res, &ns, body, who))
                .map(|o| (201, o)),
            ("PUT", Some(n)) => s.update(t.res, &ns, n, sub, body).map(|o| (200, o)),
            ("PATCH", Some(n)) => {
                let ct = head.header("content-type").unwrap_or_default();
                match PatchType::from_content_type(ct) {
                    Some(how) => s.patch(t.res, &ns, n, sub, how, &body).map(|o| (200, o)),
                    None => Err(ApiError {
                        code: 415,
                        reason: "UnsupportedMediaType",
                        message: format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json ({ct})"),
                        details: Value::Null,
                    }),
                }
            }
            ("DELETE", Some(n)) if sub == Sub::Main => {
                let mut opts = if body.is_object() { body } else { json!({}) };
                if let Some(g) = q.get("gracePeriodSeconds").and_then(|g| g.parse::<i64>().ok()) {
                    opts["gracePeriodSeconds"] = json!(g);
                }
                s.delete(t.res, &ns, n, &opts).map(|o| (200, o))
            }
            _ => Err(ApiError {
                code: 405,
                reason: "MethodNotAllowed",
                message: format!("the server does not allow this method on the requested resource ({method} {route})"),
                details: Value::Null,
            }),
        }
    };
    sh.changed.notify_all();
    // The approver and signer, after the answer (as the controllers act after it).
    let csr_to_sign = match (&result, t.res.name, method, sub) {
        (Ok(_), "certificatesigningrequests", "POST", _) if lock(&sh.state).csr_auto_approve => {
            Some(true)
        }
        (Ok(_), "certificatesigningrequests", "PUT" | "PATCH", Sub::Approval) => Some(false),
        _ => None,
    };
    let csr_name = match &result {
        Ok((_, o)) => o["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        Err(_) => String::new(),
    };
    match result {
        Ok((code, obj)) => {
            let obj = if method == "GET" && as_table && sub == Sub::Main {
                tables::table(t.res, &[obj], None, include)
            } else {
                obj
            };
            respond(&mut stream, code, &obj);
            record(code);
        }
        Err(e) => record(fail(&mut stream, &e)),
    }
    if let Some(approve) = csr_to_sign {
        if approve {
            credentials::decide(sh, &csr_name, true);
        }
        let lifetime = lock(&sh.state).csr_lifetime;
        credentials::sign(sh, &csr_name, lifetime);
    }
}

fn method_is_post(head: &proxy::Head) -> bool {
    head.method == "POST"
}

/// `POST …/serviceaccounts/{name}/token`: a TokenRequest.
fn token(
    mut stream: Tls,
    sh: &Shared,
    head: &proxy::Head,
    ns: &str,
    name: &str,
    record: impl Fn(u16),
) {
    let Some(raw) = read_body(&mut stream, head) else {
        return;
    };
    let req: Value = match serde_json::from_slice(&raw) {
        Ok(v) => v,
        Err(e) => {
            let e = ApiError::bad_request(format!("the request body is not JSON: {e}"));
            return record(fail(&mut stream, &e));
        }
    };
    let answer = {
        let mut st = lock(&sh.state);
        let require = st.require_service_accounts;
        let mut answer = credentials::token_request(&mut st.store, require, ns, name, &req);
        if let (Ok(a), Some(secs)) = (&mut answer, st.token_lifetime) {
            let exp = std::time::SystemTime::now() + std::time::Duration::from_secs(secs);
            a["status"]["expirationTimestamp"] = json!(base::time::k8s_time(exp));
        }
        if let Ok(a) = &answer {
            st.token_requests
                .push((ns.to_string(), name.to_string(), a.clone()));
        }
        answer
    };
    match answer {
        Ok(a) => {
            respond(&mut stream, 201, &a);
            record(201)
        }
        Err(e) => record(fail(&mut stream, &e)),
    }
}

/// A watch of `res` in `ns` (`None`: everywhere): ADDED for what exists when asked
/// from version 0 or none, then every change after the version asked for, BOOKMARKs
/// if allowed, a 410 when that version is compacted away; ends at `timeoutSeconds`
/// (or the server's cap) cleanly, or breaks off when watches are dropped.
fn watch(
    mut stream: Tls,
    sh: &Shared,
    q: &BTreeMap<String, String>,
    res: &'static Resource,
    ns: Option<&str>,
) {
    let selector = match Selector::parse(
        res,
        q.get("fieldSelector").map(String::as_str).unwrap_or(""),
        q.get("labelSelector").map(String::as_str).unwrap_or(""),
    ) {
        Ok(s) => s,
        Err(e) => {
            fail(&mut stream, &e);
            return;
        }
    };
    let selected = |obj: &Value| {
        ns.is_none_or(|ns| obj["metadata"]["namespace"].as_str() == Some(ns))
            && selector.matches(obj)
    };
    let from: u64 = q
        .get("resourceVersion")
        .and_then(|r| r.parse().ok())
        .unwrap_or(0);
    let bookmarks = q.get("allowWatchBookmarks").map(String::as_str) == Some("true");
    let asked = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(sh.opts.max_watch);
    let until = Instant::now() + asked.min(sh.opts.max_watch);

    let st = lock(&sh.state);
    let generation = st.drop_generation;
    if from != 0 && from < st.store.oldest - 1 {
        let oldest = st.store.oldest;
        drop(st);
        let status = json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
            "message":format!("too old resource version: {from} ({oldest})"),
            "reason":"Expired","code":410});
        if sh.opts.gone_as_status {
            return respond(&mut stream, 410, &status);
        }
        let _ = write!(
            stream,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        );
        chunk(&mut stream, &json!({"type":"ERROR","object":status}));
        let _ = write!(stream, "0\r\n\r\n");
        let _ = stream.flush();
        return;
    }
    let mut initial = Vec::new();
    let mut cursor = from;
    if from == 0 {
        initial = st
            .store
            .list(res, ns, &selector)
            .into_iter()
            .collect::<Vec<_>>();
        cursor = st.store.rv;
    }
    drop(st);
    if write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    .is_err()
        || stream.flush().is_err()
    {
        return;
    }
    for p in initial {
        if !chunk(&mut stream, &json!({"type":"ADDED","object":p})) {
            return;
        }
    }
    let mut next_bookmark = Instant::now() + sh.opts.bookmark_every;
    loop {
        let mut st = lock(&sh.state);
        loop {
            if st.drop_generation != generation || sh.stopped.load(Ordering::SeqCst) {
                // Break off without the terminating chunk: a dropped connection.
                drop(st);
                let _ = stream.sock.shutdown(Shutdown::Both);
                return;
            }
            let now = Instant::now();
            if now >= until {
                drop(st);
                let _ = write!(stream, "0\r\n\r\n");
                let _ = stream.flush();
                return;
            }
            let pending = st.store.history.last().is_some_and(|c| c.rv > cursor);
            if pending || (bookmarks && now >= next_bookmark) {
                break;
            }
            let wait = until.min(next_bookmark).saturating_duration_since(now);
            st = sh
                .changed
                .wait_timeout(st, wait.max(Duration::from_millis(10)))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        let history = &st.store.history;
        let first = history.partition_point(|c| c.rv <= cursor);
        let events: Vec<(u64, &'static str, Value)> = history[first..]
            .iter()
            .filter(|c| c.resource == res.name)
            .map(|c| (c.rv, c.kind, c.object.clone()))
            .collect();
        let store_rv = st.store.rv;
        drop(st);
        // Everything up to the store's version has been looked at.
        let seen = store_rv;
        for (_, kind, obj) in events {
            if selected(&obj) && !chunk(&mut stream, &json!({"type":kind,"object":obj})) {
                return;
            }
        }
        cursor = seen;
        if bookmarks && Instant::now() >= next_bookmark {
            let bm = json!({"type":"BOOKMARK","object":{"kind":res.kind,
                "apiVersion":res.api_version(),
                "metadata":{"resourceVersion": cursor.to_string()}}});
            if !chunk(&mut stream, &bm) {
                return;
            }
            next_bookmark = Instant::now() + sh.opts.bookmark_every;
        }
    }
}

/// The verbs of a kind served in full.
const ALL_VERBS: &[&str] = &[
    "create", "delete", "get", "list", "patch", "update", "watch",
];

/// `/apis`: the groups beyond the core one.
pub fn discovery_groups() -> Value {
    let group = |name: &str| {
        let gv = format!("{name}/v1");
        json!({"name":name,"versions":[{"groupVersion":gv,"version":"v1"}],
            "preferredVersion":{"groupVersion":gv,"version":"v1"}})
    };
    json!({"kind":"APIGroupList","apiVersion":"v1","groups":[
        group("coordination.k8s.io"),
        group("certificates.k8s.io"),
        group("authentication.k8s.io"),
        group("authorization.k8s.io"),
    ]})
}

/// `/api/v1`, `/apis/{group}/{version}`: the kinds served there and their
/// subresources.
pub fn discovery(group: &str, version: &str) -> Value {
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    let sub = |name: &str, kind: &str, namespaced: bool, verbs: &[&str]| json!({"name":name,"singularName":"","namespaced":namespaced,"kind":kind,"verbs":verbs});
    let mut resources = Vec::new();
    for r in RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        let mut entry = json!({"name":r.name,"singularName":r.singular,"namespaced":r.namespaced,
            "kind":r.kind,"verbs":ALL_VERBS});
        if !r.short_names.is_empty() {
            entry["shortNames"] = json!(r.short_names);
        }
        if r.name == "pods" {
            entry["categories"] = json!(["all"]);
        }
        resources.push(entry);
        if r.has_status {
            resources.push(sub(
                &format!("{}/status", r.name),
                r.kind,
                r.namespaced,
                &["get", "patch", "update"],
            ));
        }
        match r.name {
            "pods" => {
                resources.push(sub(
                    "pods/attach",
                    "PodAttachOptions",
                    true,
                    &["create", "get"],
                ));
                resources.push(sub("pods/exec", "PodExecOptions", true, &["create", "get"]));
                resources.push(sub("pods/log", "Pod", true, &["get"]));
                resources.push(sub(
                    "pods/portforward",
                    "PodPortForwardOptions",
                    true,
                    &["create", "get"],
                ));
            }
            "serviceaccounts" => resources.push(sub(
                "serviceaccounts/token",
                "TokenRequest",
                true,
                &["create"],
            )),
            "certificatesigningrequests" => resources.push(sub(
                "certificatesigningrequests/approval",
                "CertificateSigningRequest",
                false,
                &["get", "patch", "update"],
            )),
            _ => {}
        }
    }
    match group {
        "authentication.k8s.io" => {
            resources.push(sub("tokenreviews", "TokenReview", false, &["create"]))
        }
        "authorization.k8s.io" => resources.push(sub(
            "subjectaccessreviews",
            "SubjectAccessReview",
            false,
            &["create"],
        )),
        _ => {}
    }
    json!({"kind":"APIResourceList","apiVersion":"v1","groupVersion":gv,"resources":resources})
}

#[cfg(test)]
mod tests {
    // The benches that include this file compile it without its #[test] functions.
    #[allow(unused_imports)]
    use super::*;

    #[test]
    fn urls_name_a_kind_a_namespace_an_object_and_a_subresource() {
        let t = parse_target("/api/v1/namespaces/ns/pods/p/status").expect("served");
        assert_eq!(
            (
                t.res.name,
                t.ns.as_deref(),
                t.name.as_deref(),
                t.sub.as_deref()
            ),
            ("pods", Some("ns"), Some("p"), Some("status"))
        );
        let t = parse_target("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n")
            .expect("served");
        assert_eq!((t.res.name, t.name.as_deref()), ("leases", Some("n")));
        let t = parse_target("/api/v1/nodes/n1/status").expect("served");
        assert_eq!(
            (t.res.name, t.ns, t.sub.as_deref()),
            ("nodes", None, Some("status"))
        );
        let t = parse_target("/api/v1/watch/namespaces/d/configmaps").expect("served");
        assert!(t.watch && t.name.is_none());
        let t = parse_target("/api/v1/namespaces/d").expect("served");
        assert_eq!((t.res.name, t.name.as_deref()), ("namespaces", Some("d")));
        assert!(parse_target("/api/v1/namespaces/d/nodes/n").is_none());
        assert!(parse_target("/api/v1/pods/p").is_none());
        assert!(parse_target("/apis/coordination.k8s.io/v1/widgets").is_none());
        assert!(parse_target("/api/v1/leases").is_none());
    }
}
