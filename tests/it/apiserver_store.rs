//! The stand-in API server's object store: every kind it serves, keyed by (resource,
//! namespace, name), with one global resourceVersion counter, a change history for
//! watches, and the registry's write semantics (`k8s.io/apiserver`'s generic
//! `registry.Store` with each kind's strategy):
//!
//! - create: uid, creationTimestamp, resourceVersion, generateName; 409 AlreadyExists;
//!   a pod's status is reset to `Pending` with its QoS class, a CSR's is cleared and its
//!   requester (username, groups, uid) filled in from the caller;
//! - update (PUT) and patch (strategic merge, merge, JSON patch), on the object or its
//!   `status` subresource: the main resource ignores `.status`, the subresource ignores
//!   everything but `.status`; a `metadata.resourceVersion` that differs is a 409
//!   Conflict, a `metadata.uid` that differs a 409 precondition failure; a write that
//!   changes nothing is not written (no new resourceVersion, no watch event);
//! - delete with `DeleteOptions` (preconditions, grace period): a bound, non-terminal
//!   pod is only marked (deletionTimestamp = now + grace) until a delete with grace 0;
//!   a later delete may only shorten the grace; an object with finalizers stays,
//!   marked, until an update removes the last one.
//!
//! Where it is not faithful: no validation beyond names and the rules above (any spec
//! change is accepted, upstream refuses most pod spec updates with 422); no admission;
//! no defaulting but a pod's status and QoS class; timestamps have second precision;
//! field selectors support the fields listed in [`field_allowed`]; label selectors
//! support `=`, `==`, `!=`, `key` and `!key` (no set-based `in`/`notin`); no
//! `managedFields`, no `generation` bumps, no garbage collection of dependents.
//!
//! Over 800 lines: nearly half is the unit tests of these rules, beside the one store
//! they share.

use std::collections::BTreeMap;

use base64::Engine as _;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::{json, Value};

use super::admission;
use super::patch::{self, PatchError};

/// A kind the stand-in serves.
#[derive(Debug)]
pub struct Resource {
    /// Plural, as in URLs.
    pub name: &'static str,
    /// `""` for the core group.
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub singular: &'static str,
    pub namespaced: bool,
    /// Has a `status` subresource (the main resource ignores `.status`).
    pub has_status: bool,
    pub short_names: &'static [&'static str],
}

impl Resource {
    /// `v1` or `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `pods`, `leases.coordination.k8s.io`: how error messages name it.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.name.to_string()
        } else {
            format!("{}.{}", self.name, self.group)
        }
    }
}

/// Every kind served, in discovery order.
pub const RESOURCES: &[Resource] = &[
    Resource {
        name: "pods",
        group: "",
        version: "v1",
        kind: "Pod",
        singular: "pod",
        namespaced: true,
        has_status: true,
        short_names: &["po"],
    },
    Resource {
        name: "nodes",
        group: "",
        version: "v1",
        kind: "Node",
        singular: "node",
        namespaced: false,
        has_status: true,
        short_names: &["no"],
    },
    Resource {
        name: "events",
        group: "",
        version: "v1",
        kind: "Event",
        singular: "event",
        namespaced: true,
        has_status: false,
        short_names: &["ev"],
    },
    Resource {
        name: "configmaps",
        group: "",
        version: "v1",
        kind: "ConfigMap",
        singular: "configmap",
        namespaced: true,
        has_status: false,
        short_names: &["cm"],
    },
    Resource {
        name: "secrets",
        group: "",
        version: "v1",
        kind: "Secret",
        singular: "secret",
        namespaced: true,
        has_status: false,
        short_names: &[],
    },
    Resource {
        name: "serviceaccounts",
        group: "",
        version: "v1",
        kind: "ServiceAccount",
        singular: "serviceaccount",
        namespaced: true,
        has_status: false,
        short_names: &["sa"],
    },
    Resource {
        name: "namespaces",
        group: "",
        version: "v1",
        kind: "Namespace",
        singular: "namespace",
        namespaced: false,
        has_status: true,
        short_names: &["ns"],
    },
    Resource {
        name: "leases",
        group: "coordination.k8s.io",
        version: "v1",
        kind: "Lease",
        singular: "lease",
        namespaced: true,
        has_status: false,
        short_names: &[],
    },
    Resource {
        name: "certificatesigningrequests",
        group: "certificates.k8s.io",
        version: "v1",
        kind: "CertificateSigningRequest",
        singular: "certificatesigningrequest",
        namespaced: false,
        has_status: true,
        short_names: &["csr"],
    },
];

/// The kind served under this plural name.
pub fn resource(name: &str) -> Option<&'static Resource> {
    RESOURCES.iter().find(|r| r.name == name)
}

/// An error answer: an HTTP code and a `Status` body.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Value,
}

impl ApiError {
    /// The `Status` object sent.
    pub fn status(&self) -> Value {
        let mut s = json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
            "message":self.message,"reason":self.reason,"code":self.code});
        if !self.details.is_null() {
            s["details"] = self.details.clone();
        }
        s
    }

    fn new(code: u16, reason: &'static str, message: String) -> ApiError {
        ApiError {
            code,
            reason,
            message,
            details: Value::Null,
        }
    }

    fn about(mut self, res: &Resource, name: &str) -> ApiError {
        let mut d = json!({"name": name, "kind": res.name});
        if !res.group.is_empty() {
            d["group"] = json!(res.group);
        }
        self.details = d;
        self
    }

    pub fn not_found(res: &Resource, name: &str) -> ApiError {
        ApiError::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", res.qualified()),
        )
        .about(res, name)
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "BadRequest", message.into())
    }

    pub fn invalid(res: &Resource, name: &str, message: impl Into<String>) -> ApiError {
        ApiError::new(
            422,
            "Invalid",
            format!("{} \"{name}\" is invalid: {}", res.kind, message.into()),
        )
        .about(res, name)
    }

    /// 409 Conflict: `Operation cannot be fulfilled on <qualified> "<name>": <why>`.
    pub fn conflict(res: &Resource, name: &str, why: &str) -> ApiError {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                res.qualified()
            ),
        )
        .about(res, name)
    }
}

/// Upstream's optimistic-concurrency message.
pub const MODIFIED: &str =
    "the object has been modified; please apply your changes to the latest version and try again";

/// Which part of an object a write addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sub {
    Main,
    Status,
    /// A CSR's `approval`: only `status.conditions`.
    Approval,
}

/// The three patch content types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    StrategicMerge,
    Merge,
    Json,
}

impl PatchType {
    /// From a request's Content-Type.
    pub fn from_content_type(ct: &str) -> Option<PatchType> {
        match ct.split(';').next().unwrap_or("").trim() {
            "application/strategic-merge-patch+json" => Some(PatchType::StrategicMerge),
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/json-patch+json" => Some(PatchType::Json),
            _ => None,
        }
    }
}

/// Who makes a request (for a CSR's requester).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    pub user: String,
    pub groups: Vec<String>,
}

/// One change in the history.
#[derive(Debug, Clone)]
pub struct Change {
    pub rv: u64,
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub kind: &'static str,
    pub resource: &'static str,
    pub object: Value,
}

/// Key of an object: (resource, namespace or "", name).
pub type Key = (String, String, String);

/// The objects and their history.
#[derive(Debug, Default)]
pub struct Store {
    /// The last resourceVersion given out.
    pub rv: u64,
    objects: BTreeMap<Key, Value>,
    /// Every change since the last compaction.
    pub history: Vec<Change>,
    /// Versions below this are gone (410).
    pub oldest: u64,
    seq: u64,
    /// The ServiceAccount admission plugin and its controllers are on.
    pub sa_admission: bool,
    /// The CA published as `kube-root-ca.crt` (PEM) when they are.
    pub root_ca: String,
}

/// Now, as the API server writes timestamps (RFC 3339, seconds, UTC).
pub fn now() -> String {
    format_ts(now_ts())
}

/// jiff here is built without `std`'s clock: from the system time, to the second.
fn now_ts() -> Timestamp {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    Timestamp::from_second(secs).unwrap_or(Timestamp::UNIX_EPOCH)
}

fn format_ts(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn meta_str<'a>(o: &'a Value, field: &str) -> &'a str {
    o["metadata"][field].as_str().unwrap_or_default()
}

impl Store {
    /// An empty store whose next resourceVersion is `rv + 1`.
    pub fn new(rv: u64) -> Store {
        let mut s = Store {
            rv,
            oldest: 1,
            ..Store::default()
        };
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            s.ensure_namespace(ns);
        }
        s
    }

    /// Makes namespace `ns` exist (Active), quietly: no new resourceVersion, no watch
    /// event (what kube-apiserver makes at start, or what a test's own objects need).
    pub fn ensure_namespace(&mut self, ns: &str) {
        let res = resource("namespaces").expect("served");
        let key = Self::key(res, "", ns);
        if ns.is_empty() || self.objects.contains_key(&key) {
            return;
        }
        let uid = self.new_uid();
        let obj = json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": ns, "uid": uid, "creationTimestamp": now(),
                         "resourceVersion": self.rv.to_string(),
                         "labels": {"kubernetes.io/metadata.name": ns}},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}});
        self.objects.insert(key, obj);
        self.publish(ns);
    }

    /// With ServiceAccount admission on: the `default` ServiceAccount and the
    /// `kube-root-ca.crt` ConfigMap in `ns`, quietly, if missing (what the
    /// serviceaccount and root-ca-cert-publisher controllers make).
    pub fn publish(&mut self, ns: &str) {
        if !self.sa_admission {
            return;
        }
        let objects = [
            (
                "serviceaccounts",
                "default",
                json!({"apiVersion": "v1", "kind": "ServiceAccount"}),
            ),
            (
                "configmaps",
                "kube-root-ca.crt",
                json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"ca.crt": self.root_ca}}),
            ),
        ];
        for (r, name, mut obj) in objects {
            let res = resource(r).expect("served");
            let key = Self::key(res, ns, name);
            if self.objects.contains_key(&key) {
                continue;
            }
            obj["metadata"] = json!({"name": name, "namespace": ns, "uid": self.new_uid(),
                "creationTimestamp": now(), "resourceVersion": self.rv.to_string()});
            self.objects.insert(key, obj);
        }
    }

    /// NamespaceLifecycle admission for a client's create: the namespace must exist.
    pub fn require_namespace(&self, res: &Resource, ns: &str) -> Result<(), ApiError> {
        let nsres = resource("namespaces").expect("served");
        if !res.namespaced || self.get(nsres, "", ns).is_some() {
            return Ok(());
        }
        Err(ApiError::not_found(nsres, ns))
    }

    fn key(res: &Resource, ns: &str, name: &str) -> Key {
        let ns = if res.namespaced { ns } else { "" };
        (res.name.to_string(), ns.to_string(), name.to_string())
    }

    /// The stored object.
    pub fn get(&self, res: &Resource, ns: &str, name: &str) -> Option<&Value> {
        self.objects.get(&Self::key(res, ns, name))
    }

    /// The objects of `res` in `ns` (all namespaces: `None`) that `sel` selects.
    pub fn list(&self, res: &Resource, ns: Option<&str>, sel: &Selector) -> Vec<Value> {
        self.objects
            .iter()
            .filter(|((r, n, _), _)| r == res.name && ns.is_none_or(|ns| ns == n))
            .filter(|(_, o)| sel.matches(o))
            .map(|(_, o)| o.clone())
            .collect()
    }

    /// Writes `obj` as it is (a new resourceVersion) and records the change.
    pub fn put_raw(&mut self, res: &'static Resource, kind: &'static str, mut obj: Value) -> Value {
        self.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        let key = Self::key(res, meta_str(&obj, "namespace"), meta_str(&obj, "name"));
        if kind == "DELETED" {
            self.objects.remove(&key);
        } else {
            self.objects.insert(key, obj.clone());
        }
        self.history.push(Change {
            rv: self.rv,
            kind,
            resource: res.name,
            object: obj.clone(),
        });
        obj
    }

    /// A random-ish number: unique per store and run.
    fn random(&mut self) -> u64 {
        self.seq += 1;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        // splitmix64 over (sequence, time, pid)
        let mut z = nanos
            ^ self.seq.wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ (u64::from(std::process::id()) << 32);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Five characters as `generateName` appends them.
    fn random_suffix(&mut self) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let mut r = self.random();
        (0..5)
            .map(|_| {
                let c = ALPHABET[(r % ALPHABET.len() as u64) as usize];
                r /= ALPHABET.len() as u64;
                char::from(c)
            })
            .collect()
    }

    /// A UUID-shaped uid.
    pub fn new_uid(&mut self) -> String {
        let (a, b) = (self.random(), self.random());
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            0x8000 | (b >> 48) & 0x3fff,
            b & 0xffff_ffff_ffff
        )
    }

    /// POST: creates `obj` in `ns` (ignored for cluster-scoped kinds).
    pub fn create(
        &mut self,
        res: &'static Resource,
        ns: &str,
        mut obj: Value,
        who: &Identity,
    ) -> Result<Value, ApiError> {
        if !obj.is_object() {
            return Err(ApiError::bad_request("the body is not a JSON object"));
        }
        if !obj["metadata"].is_object() {
            obj["metadata"] = json!({});
        }
        if res.namespaced {
            let body_ns = meta_str(&obj, "namespace");
            if !body_ns.is_empty() && body_ns != ns {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            obj["metadata"]["namespace"] = json!(ns);
        } else if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("namespace");
        }
        let mut name = meta_str(&obj, "name").to_string();
        if name.is_empty() {
            let prefix = meta_str(&obj, "generateName").to_string();
            if prefix.is_empty() {
                return Err(ApiError::invalid(
                    res,
                    "",
                    "metadata.name: Required value: name or generateName is required",
                ));
            }
            name = format!("{prefix}{}", self.random_suffix());
            obj["metadata"]["name"] = json!(name);
        }
        if self.get(res, ns, &name).is_some() {
            return Err(ApiError::new(
                409,
                "AlreadyExists",
                format!("{} \"{name}\" already exists", res.qualified()),
            )
            .about(res, &name));
        }
        obj["apiVersion"] = json!(res.api_version());
        obj["kind"] = json!(res.kind);
        let uid = self.new_uid();
        let meta = obj["metadata"]
            .as_object_mut()
            .expect("metadata is an object");
        meta.insert("uid".into(), json!(uid));
        meta.insert("creationTimestamp".into(), json!(now()));
        for f in [
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "resourceVersion",
        ] {
            meta.remove(f);
        }
        match res.kind {
            "Pod" => {
                admission::validate_pod(&obj).map_err(|msg| ApiError::invalid(res, &name, msg))?;
                admission::default_pod(&mut obj);
                if self.sa_admission {
                    let suffix = self.random_suffix();
                    admission::service_account(&mut obj, &suffix);
                }
                let qos = qos_class(&obj["spec"]);
                obj["status"] = json!({"phase": "Pending", "qosClass": qos});
            }
            "Namespace" => {
                self.publish(&name);
                obj["status"] = json!({"phase": "Active"});
                obj["spec"] = json!({"finalizers": ["kubernetes"]});
                obj["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
            }
            "CertificateSigningRequest" => {
                validate_csr(&name, &obj["spec"])?;
                obj["status"] = json!({});
                obj["spec"]["username"] = json!(who.user);
                obj["spec"]["groups"] = json!(who.groups);
                obj["spec"]["uid"] = json!(format!("uid-{}", who.user));
            }
            _ => {}
        }
        Ok(self.put_raw(res, "ADDED", obj))
    }

    /// PUT: replaces the object (or its status) with `obj`.
    pub fn update(
        &mut self,
        res: &'static Resource,
        ns: &str,
        name: &str,
        sub: Sub,
        obj: Value,
    ) -> Result<Value, ApiError> {
        let Some(old) = self.get(res, ns, name).cloned() else {
            return Err(ApiError::not_found(res, name));
        };
        if !obj.is_object() {
            return Err(ApiError::bad_request("the body is not a JSON object"));
        }
        let body_name = meta_str(&obj, "name");
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        self.write_over(res, old, obj, sub)
    }

    /// PATCH: applies `p` to the object (or its status).
    pub fn patch(
        &mut self,
        res: &'static Resource,
        ns: &str,
        name: &str,
        sub: Sub,
        how: PatchType,
        p: &Value,
    ) -> Result<Value, ApiError> {
        let Some(old) = self.get(res, ns, name).cloned() else {
            return Err(ApiError::not_found(res, name));
        };
        let patched = match how {
            PatchType::StrategicMerge => patch::strategic_merge(res.kind, &old, p),
            PatchType::Merge => {
                if p.is_object() {
                    Ok(patch::merge_patch(&old, p))
                } else {
                    Err(PatchError("a merge patch must be a JSON object".into()))
                }
            }
            PatchType::Json => patch::json_patch(&old, p),
        }
        .map_err(|e| ApiError::invalid(res, name, e.0))?;
        // A patch without a resourceVersion is applied to the current object whatever
        // its version: the old one stands in (the check below then passes).
        let mut patched = patched;
        if patched["metadata"]["resourceVersion"].is_null() {
            patched["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
        }
        self.write_over(res, old, patched, sub)
    }

    /// The common part of update and patch: the preconditions in `new`'s metadata,
    /// the fields the addressed part may not change, and the write if anything changed.
    fn write_over(
        &mut self,
        res: &'static Resource,
        old: Value,
        new: Value,
        sub: Sub,
    ) -> Result<Value, ApiError> {
        let name = meta_str(&old, "name").to_string();
        let old_uid = meta_str(&old, "uid");
        let new_uid = meta_str(&new, "uid");
        if !new_uid.is_empty() && new_uid != old_uid {
            return Err(ApiError::conflict(
                res,
                &name,
                &format!("Precondition failed: UID in precondition: {new_uid}, UID in object meta: {old_uid}"),
            ));
        }
        let new_rv = meta_str(&new, "resourceVersion");
        if !new_rv.is_empty() && new_rv != meta_str(&old, "resourceVersion") {
            return Err(ApiError::conflict(res, &name, MODIFIED));
        }
        let mut out = match sub {
            Sub::Approval => {
                let mut o = old.clone();
                o["status"]["conditions"] = new["status"]["conditions"].clone();
                o
            }
            Sub::Status => {
                let mut o = old.clone();
                o["status"] = new.get("status").cloned().unwrap_or(json!({}));
                o
            }
            Sub::Main => {
                let mut o = new;
                if res.has_status {
                    match old.get("status") {
                        Some(s) => o["status"] = s.clone(),
                        None => {
                            if let Some(m) = o.as_object_mut() {
                                m.remove("status");
                            }
                        }
                    }
                }
                if !o["metadata"].is_object() {
                    o["metadata"] = json!({});
                }
                // What no client may change.
                for f in [
                    "name",
                    "namespace",
                    "uid",
                    "creationTimestamp",
                    "deletionTimestamp",
                    "deletionGracePeriodSeconds",
                ] {
                    match old["metadata"].get(f) {
                        Some(v) => o["metadata"][f] = v.clone(),
                        None => {
                            if let Some(m) = o["metadata"].as_object_mut() {
                                m.remove(f);
                            }
                        }
                    }
                }
                o
            }
        };
        out["apiVersion"] = json!(res.api_version());
        out["kind"] = json!(res.kind);
        out["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
        if out == old {
            return Ok(old);
        }
        // The last finalizer of an object being deleted with no grace left: gone.
        if !out["metadata"]["deletionTimestamp"].is_null()
            && out["metadata"]["deletionGracePeriodSeconds"]
                .as_i64()
                .unwrap_or(0)
                == 0
            && out["metadata"]["finalizers"]
                .as_array()
                .is_none_or(|f| f.is_empty())
        {
            return Ok(self.put_raw(res, "DELETED", out));
        }
        Ok(self.put_raw(res, "MODIFIED", out))
    }

    /// DELETE with `opts` (a DeleteOptions, `{}` for none). Answers the object (pods,
    /// and anything only marked) or a Status Success.
    pub fn delete(
        &mut self,
        res: &'static Resource,
        ns: &str,
        name: &str,
        opts: &Value,
    ) -> Result<Value, ApiError> {
        let Some(mut obj) = self.get(res, ns, name).cloned() else {
            return Err(ApiError::not_found(res, name));
        };
        let uid = meta_str(&obj, "uid").to_string();
        if let Some(want) = opts["preconditions"]["uid"].as_str() {
            if want != uid {
                return Err(ApiError::conflict(
                    res,
                    name,
                    &format!("Precondition failed: UID in precondition: {want}, UID in object meta: {uid}"),
                ));
            }
        }
        if let Some(want) = opts["preconditions"]["resourceVersion"].as_str() {
            let have = meta_str(&obj, "resourceVersion");
            if want != have {
                return Err(ApiError::conflict(
                    res,
                    name,
                    &format!("Precondition failed: ResourceVersion in precondition: {want}, ResourceVersion in object meta: {have}"),
                ));
            }
        }
        let asked = opts["gracePeriodSeconds"].as_i64();
        // The pod strategy's CheckGracefulDelete: the grace to give, 0 for none.
        let grace = if res.kind == "Pod" {
            let phase = obj["status"]["phase"].as_str().unwrap_or_default();
            let bound = !obj["spec"]["nodeName"]
                .as_str()
                .unwrap_or_default()
                .is_empty();
            if !bound || phase == "Succeeded" || phase == "Failed" {
                0
            } else {
                asked
                    .or_else(|| obj["spec"]["terminationGracePeriodSeconds"].as_i64())
                    .unwrap_or(30)
                    .max(0)
            }
        } else {
            0
        };
        let now = now_ts();
        let meta = &obj["metadata"];
        let has_finalizers = meta["finalizers"].as_array().is_some_and(|f| !f.is_empty());
        if let Some(existing) = meta["deletionTimestamp"].as_str() {
            // Already being deleted: only a shorter grace changes anything.
            let current = meta["deletionGracePeriodSeconds"].as_i64().unwrap_or(0);
            let shorter = asked.filter(|g| *g < current);
            match shorter {
                Some(g) if g > 0 || has_finalizers => {
                    let start = existing
                        .parse::<Timestamp>()
                        .unwrap_or(now)
                        .checked_sub(SignedDuration::from_secs(current))
                        .unwrap_or(now);
                    let at = start
                        .checked_add(SignedDuration::from_secs(g))
                        .unwrap_or(now);
                    obj["metadata"]["deletionTimestamp"] = json!(format_ts(at));
                    obj["metadata"]["deletionGracePeriodSeconds"] = json!(g);
                    return Ok(self.put_raw(res, "MODIFIED", obj));
                }
                Some(_) => {}
                None => return Ok(obj),
            }
        } else if grace > 0 || has_finalizers {
            let at = now
                .checked_add(SignedDuration::from_secs(grace))
                .unwrap_or(now);
            obj["metadata"]["deletionTimestamp"] = json!(format_ts(at));
            obj["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
            return Ok(self.put_raw(res, "MODIFIED", obj));
        }
        let gone = self.put_raw(res, "DELETED", obj);
        if res.kind == "Pod" {
            return Ok(gone);
        }
        let mut details = json!({"name": name, "kind": res.name, "uid": uid});
        if !res.group.is_empty() {
            details["group"] = json!(res.group);
        }
        Ok(
            json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success",
            "details": details}),
        )
    }

    /// Forgets the history: every version before now is gone (410).
    pub fn compact(&mut self) {
        self.oldest = self.rv + 1;
        self.history.clear();
    }

    /// As after an API server restored from a backup: every object kept with a new
    /// resourceVersion far ahead of the old ones, the history gone (old versions: 410).
    pub fn renumber(&mut self, jump: u64) {
        self.rv += jump;
        for obj in self.objects.values_mut() {
            self.rv += 1;
            obj["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        }
        self.compact();
    }
}

/// Checks a CSR's `spec` on create (upstream's `ValidateCertificateRequestCreate`, the
/// parts a kubelet can get wrong).
fn validate_csr(name: &str, spec: &Value) -> Result<(), ApiError> {
    let invalid = |msg: &str| ApiError {
        code: 422,
        reason: "Invalid",
        message: format!(
            "CertificateSigningRequest.certificates.k8s.io \"{name}\" is invalid: {msg}"
        ),
        details: json!({"name": name, "group": "certificates.k8s.io",
            "kind": "CertificateSigningRequest"}),
    };
    let pem = spec["request"]
        .as_str()
        .and_then(|r| base64::engine::general_purpose::STANDARD.decode(r).ok())
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    if !pem.contains("-----BEGIN CERTIFICATE REQUEST-----") {
        return Err(invalid(
            "spec.request: Invalid value: \"...\": PEM block type must be CERTIFICATE REQUEST",
        ));
    }
    if spec["signerName"].as_str().unwrap_or_default().is_empty() {
        return Err(invalid("spec.signerName: Required value"));
    }
    if spec["usages"].as_array().is_none_or(|u| u.is_empty()) {
        return Err(invalid("spec.usages: Required value"));
    }
    Ok(())
}

/// A pod's QoS class from its containers' resources (`qos.GetPodQOS`, simplified: cpu
/// and memory only, init containers included).
fn qos_class(spec: &Value) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|k| spec[*k].as_array())
        .flatten()
        .collect();
    let mut any = false;
    let mut guaranteed = true;
    for c in containers {
        let (req, lim) = (&c["resources"]["requests"], &c["resources"]["limits"]);
        for r in ["cpu", "memory"] {
            let (q, l) = (&req[r], &lim[r]);
            if !q.is_null() || !l.is_null() {
                any = true;
            }
            // A limit alone is also the request.
            if l.is_null() || (!q.is_null() && q != l) {
                guaranteed = false;
            }
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}

/// The fields a field selector may name for a kind (upstream: each kind's
/// `GetAttrs`/`AddFieldLabelConversionFunc`).
pub fn field_allowed(res: &Resource, field: &str) -> bool {
    if matches!(field, "metadata.name" | "metadata.namespace") {
        return true;
    }
    match res.kind {
        "Pod" => matches!(
            field,
            "spec.nodeName"
                | "spec.restartPolicy"
                | "spec.schedulerName"
                | "spec.serviceAccountName"
                | "spec.hostNetwork"
                | "status.phase"
                | "status.podIP"
                | "status.nominatedNodeName"
        ),
        "Node" => field == "spec.unschedulable",
        "Event" => matches!(
            field,
            "involvedObject.kind"
                | "involvedObject.namespace"
                | "involvedObject.name"
                | "involvedObject.uid"
                | "involvedObject.apiVersion"
                | "involvedObject.resourceVersion"
                | "involvedObject.fieldPath"
                | "reason"
                | "reportingComponent"
                | "source"
                | "type"
        ),
        "Secret" => field == "type",
        "CertificateSigningRequest" => field == "spec.signerName",
        _ => false,
    }
}

/// A field's value as a selector compares it (`source` is the event's component).
fn field_value(obj: &Value, field: &str) -> String {
    let path = if field == "source" {
        "source.component"
    } else {
        field
    };
    let mut v = obj;
    for part in path.split('.') {
        v = &v[part];
    }
    match v {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A parsed field and label selector.
#[derive(Debug, Clone, Default)]
pub struct Selector {
    /// (field, wanted, equal?)
    fields: Vec<(String, String, bool)>,
    /// (label, wanted value or None for existence, equal?)
    labels: Vec<(String, Option<String>, bool)>,
}

impl Selector {
    /// Parses `fieldSelector` and `labelSelector` query values for `res`.
    pub fn parse(res: &Resource, fields: &str, labels: &str) -> Result<Selector, ApiError> {
        let mut sel = Selector::default();
        for term in fields.split(',').filter(|t| !t.is_empty()) {
            let (f, v, eq) = split_term(term).ok_or_else(|| {
                ApiError::bad_request(format!("invalid field selector term {term:?}"))
            })?;
            if !field_allowed(res, f) {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {f}"
                )));
            }
            sel.fields.push((f.to_string(), v.to_string(), eq));
        }
        for term in labels.split(',').filter(|t| !t.is_empty()) {
            let term = term.trim();
            if term.contains(" in ") || term.contains(" notin ") || term.contains('(') {
                return Err(ApiError::bad_request(format!(
                    "the stand-in supports no set-based label selector: {term:?}"
                )));
            }
            match split_term(term) {
                Some((k, v, eq)) => sel.labels.push((k.to_string(), Some(v.to_string()), eq)),
                None => match term.strip_prefix('!') {
                    Some(k) => sel.labels.push((k.to_string(), None, false)),
                    None => sel.labels.push((term.to_string(), None, true)),
                },
            }
        }
        Ok(sel)
    }

    /// Whether `obj` is selected.
    pub fn matches(&self, obj: &Value) -> bool {
        self.fields
            .iter()
            .all(|(f, v, eq)| (field_value(obj, f) == *v) == *eq)
            && self.labels.iter().all(|(k, v, eq)| {
                let have = obj["metadata"]["labels"][k].as_str();
                match v {
                    Some(v) => (have == Some(v.as_str())) == *eq,
                    None => have.is_some() == *eq,
                }
            })
    }
}

/// `a=b`, `a==b`, `a!=b` → (a, b, equal?).
fn split_term(term: &str) -> Option<(&str, &str, bool)> {
    if let Some((k, v)) = term.split_once("!=") {
        return Some((k.trim(), v.trim(), false));
    }
    term.split_once("==")
        .or_else(|| term.split_once('='))
        .map(|(k, v)| (k.trim(), v.trim(), true))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(name: &str) -> &'static Resource {
        resource(name).expect("served")
    }

    fn node_identity() -> Identity {
        Identity {
            user: "system:node:n1".into(),
            groups: vec!["system:nodes".into()],
        }
    }

    #[test]
    fn create_fills_metadata_generates_names_and_refuses_duplicates() {
        let mut s = Store::new(100);
        let who = node_identity();
        let lease = s
            .create(
                res("leases"),
                "kube-node-lease",
                json!({"metadata": {"name": "n1"}, "spec": {"holderIdentity": "n1"}}),
                &who,
            )
            .expect("created");
        assert_eq!(lease["metadata"]["resourceVersion"], "101");
        assert_eq!(lease["metadata"]["namespace"], "kube-node-lease");
        assert_eq!(lease["apiVersion"], "coordination.k8s.io/v1");
        assert_eq!(lease["metadata"]["uid"].as_str().map(str::len), Some(36));
        assert!(lease["metadata"]["creationTimestamp"].is_string());
        let again = s
            .create(
                res("leases"),
                "kube-node-lease",
                json!({"metadata": {"name": "n1"}}),
                &who,
            )
            .expect_err("exists");
        assert_eq!((again.code, again.reason), (409, "AlreadyExists"));
        assert_eq!(
            again.message,
            "leases.coordination.k8s.io \"n1\" already exists"
        );
        let ev = s
            .create(
                res("events"),
                "default",
                json!({"metadata": {"generateName": "p1."}}),
                &who,
            )
            .expect("created");
        let name = ev["metadata"]["name"].as_str().expect("name");
        assert!(name.starts_with("p1.") && name.len() == 8, "{name}");
        // A pod's status is the server's; a node's is the client's.
        let pod = s
            .create(
                res("pods"),
                "default",
                json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i:1"}]},
                       "status": {"phase": "Running"}}),
                &who,
            )
            .expect("created");
        assert_eq!(
            pod["status"],
            json!({"phase": "Pending", "qosClass": "BestEffort"})
        );
        let node = s
            .create(
                res("nodes"),
                "ignored",
                json!({"metadata": {"name": "n1"}, "status": {"capacity": {"pods": "110"}}}),
                &who,
            )
            .expect("created");
        assert_eq!(node["status"]["capacity"]["pods"], "110");
        assert!(node["metadata"].get("namespace").is_none());
        assert!(s.get(res("nodes"), "", "n1").is_some());
    }

    #[test]
    fn updates_conflict_on_a_stale_version_and_noop_writes_are_not_written() {
        let mut s = Store::new(0);
        let who = Identity::default();
        let l = s
            .create(
                res("leases"),
                "ns",
                json!({"metadata": {"name": "x"}, "spec": {"a": 1}}),
                &who,
            )
            .expect("created");
        let mut stale = l.clone();
        stale["spec"]["a"] = json!(2);
        let l2 = s
            .update(res("leases"), "ns", "x", Sub::Main, stale.clone())
            .expect("updated");
        assert_eq!(l2["metadata"]["resourceVersion"], "2");
        let e = s
            .update(res("leases"), "ns", "x", Sub::Main, stale)
            .expect_err("stale");
        assert_eq!((e.code, e.reason), (409, "Conflict"));
        assert_eq!(
            e.message,
            "Operation cannot be fulfilled on leases.coordination.k8s.io \"x\": the object has been modified; please apply your changes to the latest version and try again"
        );
        // Without a resourceVersion: last write wins.
        let mut blind = l2.clone();
        blind["metadata"]
            .as_object_mut()
            .expect("meta")
            .remove("resourceVersion");
        blind["spec"]["a"] = json!(3);
        assert_eq!(
            s.update(res("leases"), "ns", "x", Sub::Main, blind)
                .expect("updated")["spec"]["a"],
            3
        );
        let e = s
            .update(
                res("leases"),
                "ns",
                "nope",
                Sub::Main,
                json!({"metadata": {}}),
            )
            .expect_err("missing");
        assert_eq!(e.code, 404);
        // The same content again: no new version, no event.
        let before = (s.rv, s.history.len());
        let cur = s.get(res("leases"), "ns", "x").cloned().expect("there");
        s.update(res("leases"), "ns", "x", Sub::Main, cur)
            .expect("noop");
        assert_eq!((s.rv, s.history.len()), before);
    }

    #[test]
    fn status_and_main_writes_touch_only_their_part_and_uid_preconditions_hold() {
        let mut s = Store::new(0);
        let who = Identity::default();
        let p = s
            .create(
                res("pods"),
                "default",
                json!({"metadata": {"name": "p", "labels": {"a": "1"}},
                       "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i:1"}]}}),
                &who,
            )
            .expect("created");
        let uid = p["metadata"]["uid"].as_str().expect("uid").to_string();
        let got = s
            .patch(
                res("pods"),
                "default",
                "p",
                Sub::Status,
                PatchType::StrategicMerge,
                &json!({"metadata": {"uid": uid, "labels": {"a": "2"}},
                        "status": {"phase": "Running",
                                   "conditions": [{"type": "Ready", "status": "True"}]}}),
            )
            .expect("patched");
        assert_eq!(got["status"]["phase"], "Running");
        assert_eq!(got["status"]["qosClass"], "BestEffort");
        assert_eq!(
            got["metadata"]["labels"]["a"], "1",
            "metadata ignored by /status"
        );
        let e = s
            .patch(
                res("pods"),
                "default",
                "p",
                Sub::Status,
                PatchType::StrategicMerge,
                &json!({"metadata": {"uid": "other"}, "status": {"phase": "Failed"}}),
            )
            .expect_err("uid differs");
        assert_eq!(e.code, 409);
        assert!(
            e.message.ends_with(&format!(
                "Precondition failed: UID in precondition: other, UID in object meta: {uid}"
            )),
            "{}",
            e.message
        );
        let e = s
            .patch(
                res("pods"),
                "default",
                "p",
                Sub::Main,
                PatchType::Merge,
                &json!({"metadata": {"resourceVersion": "1"}}),
            )
            .expect_err("stale rv");
        assert_eq!(e.reason, "Conflict");
        let got = s
            .patch(
                res("pods"),
                "default",
                "p",
                Sub::Main,
                PatchType::Merge,
                &json!({"metadata": {"labels": {"b": "2"}}, "status": {"phase": "Failed"}}),
            )
            .expect("patched");
        assert_eq!(got["metadata"]["labels"], json!({"a": "1", "b": "2"}));
        assert_eq!(
            got["status"]["phase"], "Running",
            "status ignored by the main resource"
        );
        let kinds: Vec<&str> = s.history.iter().map(|c| c.kind).collect();
        assert_eq!(kinds, ["ADDED", "MODIFIED", "MODIFIED"]);
    }

    #[test]
    fn pod_deletion_is_graceful_for_bound_running_pods_and_only_shortens() {
        let mut s = Store::new(0);
        let who = Identity::default();
        let pod = |name: &str, node: &str| {
            json!({"metadata": {"name": name},
                   "spec": {"nodeName": node, "terminationGracePeriodSeconds": 20,
                            "containers": [{"name": "c", "image": "i:1"}]}})
        };
        s.create(res("pods"), "d", pod("bound", "n1"), &who)
            .expect("created");
        s.create(res("pods"), "d", pod("unbound", ""), &who)
            .expect("created");
        let got = s
            .delete(res("pods"), "d", "bound", &json!({}))
            .expect("marked");
        assert_eq!(got["metadata"]["deletionGracePeriodSeconds"], 20);
        let first = got["metadata"]["deletionTimestamp"]
            .as_str()
            .expect("ts")
            .to_string();
        assert!(s.get(res("pods"), "d", "bound").is_some());
        // A longer grace changes nothing; a shorter one moves the deadline earlier.
        let same = s
            .delete(
                res("pods"),
                "d",
                "bound",
                &json!({"gracePeriodSeconds": 60}),
            )
            .expect("unchanged");
        assert_eq!(same["metadata"]["deletionTimestamp"], first.as_str());
        let shorter = s
            .delete(res("pods"), "d", "bound", &json!({"gracePeriodSeconds": 5}))
            .expect("shortened");
        assert_eq!(shorter["metadata"]["deletionGracePeriodSeconds"], 5);
        assert!(
            shorter["metadata"]["deletionTimestamp"]
                .as_str()
                .expect("ts")
                < first.as_str()
        );
        // Preconditions.
        let e = s
            .delete(
                res("pods"),
                "d",
                "bound",
                &json!({"gracePeriodSeconds": 0,
                "preconditions": {"uid": "nope"}}),
            )
            .expect_err("uid");
        assert_eq!(e.code, 409);
        let uid = s.get(res("pods"), "d", "bound").expect("there")["metadata"]["uid"].clone();
        s.delete(
            res("pods"),
            "d",
            "bound",
            &json!({"gracePeriodSeconds": 0,
            "preconditions": {"uid": uid}}),
        )
        .expect("deleted");
        assert!(s.get(res("pods"), "d", "bound").is_none());
        // Unbound: at once.
        s.delete(res("pods"), "d", "unbound", &json!({}))
            .expect("deleted");
        assert!(s.get(res("pods"), "d", "unbound").is_none());
        let kinds: Vec<&str> = s.history.iter().map(|c| c.kind).collect();
        assert_eq!(
            kinds,
            ["ADDED", "ADDED", "MODIFIED", "MODIFIED", "DELETED", "DELETED"]
        );
        // Other kinds: at once, a Status answer; finalizers hold an object.
        s.create(
            res("configmaps"),
            "d",
            json!({"metadata": {"name": "c"}}),
            &who,
        )
        .expect("c");
        let st = s
            .delete(res("configmaps"), "d", "c", &json!({}))
            .expect("deleted");
        assert_eq!(st["status"], "Success");
        s.create(
            res("configmaps"),
            "d",
            json!({"metadata": {"name": "f", "finalizers": ["x"]}}),
            &who,
        )
        .expect("f");
        s.delete(res("configmaps"), "d", "f", &json!({}))
            .expect("marked");
        assert!(s.get(res("configmaps"), "d", "f").is_some());
        s.patch(
            res("configmaps"),
            "d",
            "f",
            Sub::Main,
            PatchType::Merge,
            &json!({"metadata": {"finalizers": null}}),
        )
        .expect("patched");
        assert!(s.get(res("configmaps"), "d", "f").is_none());
    }

    #[test]
    fn selectors_and_renumbering() {
        let mut s = Store::new(0);
        let who = Identity::default();
        for (name, kind, labels) in [("a", "Pod", json!({"x": "1"})), ("b", "Node", json!({}))] {
            s.create(
                res("events"),
                "d",
                json!({"metadata": {"name": name, "labels": labels},
                "involvedObject": {"kind": kind, "name": name}}),
                &who,
            )
            .expect("created");
        }
        let sel = Selector::parse(res("events"), "involvedObject.kind=Pod", "").expect("ok");
        assert_eq!(s.list(res("events"), Some("d"), &sel).len(), 1);
        let sel = Selector::parse(res("events"), "involvedObject.kind!=Pod", "!x").expect("ok");
        assert_eq!(
            s.list(res("events"), None, &sel)[0]["metadata"]["name"],
            "b"
        );
        let sel = Selector::parse(res("events"), "", "x==1").expect("ok");
        assert_eq!(
            s.list(res("events"), None, &sel)[0]["metadata"]["name"],
            "a"
        );
        assert_eq!(
            s.list(res("events"), Some("other"), &Selector::default())
                .len(),
            0
        );
        assert_eq!(
            Selector::parse(res("pods"), "spec.nope=1", "")
                .expect_err("bad")
                .code,
            400
        );
        let before = s.rv;
        s.renumber(1_000_000);
        assert!(s.rv > before + 1_000_000);
        assert!(s.history.is_empty() && s.oldest == s.rv + 1);
        let sel = Selector::default();
        assert!(s.list(res("events"), None, &sel).iter().all(|e| {
            e["metadata"]["resourceVersion"]
                .as_str()
                .expect("rv")
                .parse::<u64>()
                .expect("n")
                > before + 1_000_000
        }));
    }
}
