//! Static pod manifests: decoding, the defaulting every static pod gets and its
//! validation (by [`crate::validation`]), as upstream's `pkg/kubelet/config/common.go` (`tryDecodeSinglePod`,
//! `tryDecodePodList`, `applyDefaults`), for every static source: files
//! ([`Origin::File`]), URL bodies and etcd values ([`Origin::Url`]), and pods pushed
//! over the kubelet port ([`Origin::Server`]).
//!
//! A manifest holds a `Pod`, a `PodList`, or several of them as a multi-document YAML
//! stream (`---`); empty documents are skipped. A JSON manifest is one document.
//!
//! Defaulting: the name becomes `<name>-<lowercase(nodeName)>`, the namespace
//! `default` if empty, `spec.nodeName` the node, `status.phase` `Pending`; the
//! annotation `kubernetes.io/config.hash` holds the UID; pods from files tolerate every
//! `NoExecute` taint.
//!
//! The UID, unless the manifest gives one, is derived so that the kubelet recognises
//! the same pod again (after a re-read, and after a restart: it is the key the running
//! containers carry in their labels): 32 hex digits of FNV-1a 128 over the manifest's
//! canonical JSON (the decoded pod re-encoded, before any defaulting) **with
//! `spec.containers` removed** (all but their host ports), then `host:<nodeName>`, then `file:<path>` (or
//! `url:<url>`, or `server:` for a pushed pod, whose UID is thus the same however it
//! was pushed, and after a restart). Upstream hashes the whole object (after a Go-specific dump that no
//! other language reproduces). Leaving the app containers out is deliberate: editing a
//! container of a manifest (its image, command, probes…) keeps the pod's UID, so the
//! kubelet sees an UPDATE and replaces only that container, by its spec hash, as it
//! would for an API pod; any other edit (labels, annotations, volumes, init
//! containers, restartPolicy, hostNetwork…) changes the UID, so the old pod is removed
//! and a new one created, which is what such edits need (the sandbox and volumes are
//! set up only at pod creation). The node name and the path make the same manifest
//! under two names, or on two nodes, two different pods.
//!
//! Over 800 lines: 300 of them are its unit tests (every error message, the UID's
//! rules), and every static source's decoding, defaulting and UID belong together.

use std::fmt;
use std::path::Path;

use super::nodecount::{self, MAX_MANIFEST_NODES};
use super::CONFIG_HASH_ANNOTATION;
use k8s_openapi::api::core::v1::{Pod, PodStatus, Toleration};
use serde::Deserialize;
use serde_json::Value;

/// The largest manifest read from a file, a URL body or an etcd value. The API server
/// takes at most 3 MB in one request, so no pod (nor a list of the few pods a node
/// runs) is bigger; anything larger is a mistake (a log, an image, a generated file)
/// whose decoding would cost the node hundreds of MB. Upstream's `maxConfigLength`
/// (10 MB) predates that bound.
pub const MAX_MANIFEST_BYTES: u64 = 3 * 1024 * 1024;

/// Where a manifest came from; it is part of the UID and of every error.
#[derive(Clone, Copy, Debug)]
pub enum Origin<'a> {
    /// A file of the file source (`staticPodPath`).
    File(&'a Path),
    /// The body of the HTTP source's URL (`staticPodURL`).
    Url(&'a str),
    /// A pod pushed over the kubelet port (the server source): the label is what
    /// errors name (the request, or the file the pushed set is kept in); it is not
    /// part of the UID, so the same pod has one UID however and whenever it came.
    Server(&'a str),
}

impl Origin<'_> {
    /// The bytes hashed into the UID after the node: `file:<path>` or `url:<url>`.
    fn hash_tag(&self) -> Vec<u8> {
        match self {
            Origin::File(p) => [b"file:".as_slice(), p.as_os_str().as_encoded_bytes()].concat(),
            Origin::Url(u) => format!("url:{u}").into_bytes(),
            Origin::Server(_) => b"server:".to_vec(),
        }
    }
}

impl fmt::Display for Origin<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File(p) => write!(f, "{}", p.display()),
            Origin::Url(u) | Origin::Server(u) => f.write_str(u),
        }
    }
}

/// Which syntax a manifest is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// YAML, possibly several documents (JSON that YAML accepts also works).
    Yaml,
    /// One JSON document.
    Json,
}

impl Format {
    /// The format a file's name says: `.json` is JSON, anything else YAML.
    pub fn of(path: &Path) -> Format {
        match path.extension() {
            Some(e) if e.eq_ignore_ascii_case("json") => Format::Json,
            _ => Format::Yaml,
        }
    }
}

/// Why a manifest (or one pod in it) cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{origin}: {}{kind}", self.position())]
pub struct ManifestError {
    /// The file or URL.
    pub origin: String,
    /// The 0-based document of a YAML stream, if the problem is inside one.
    pub document: Option<usize>,
    /// The 0-based item of a `PodList`, if the problem is inside one.
    pub item: Option<usize>,
    /// What is wrong: the end of the message, and the cause's holder (a layer of the
    /// `source()` chain that `error_chain` does not repeat, its message being the end
    /// of this one).
    #[source]
    pub kind: ManifestErrorKind,
}

/// What is wrong with a manifest.
#[derive(Debug, thiserror::Error)]
pub enum ManifestErrorKind {
    /// The file cannot be read.
    #[error("cannot read: {0}")]
    Read(#[source] std::io::Error),
    /// The file is larger than [`MAX_MANIFEST_BYTES`].
    #[error("larger than {} MiB, not read", MAX_MANIFEST_BYTES >> 20)]
    TooLarge,
    /// The file is not UTF-8 text.
    #[error("not UTF-8 text")]
    NotUtf8,
    /// A YAML syntax error; serde's message carries the line and column.
    #[error("invalid YAML: {0}")]
    Yaml(#[source] serde_norway::Error),
    /// A JSON syntax error, with its line and column.
    #[error("invalid JSON: {0}")]
    Json(#[source] serde_json::Error),
    /// The document is not a Pod or a PodList.
    #[error("{0}")]
    Kind(String),
    /// The object does not decode as a v1 Pod (a field of the wrong type…).
    #[error("cannot decode pod: {0}")]
    Decode(#[source] serde_json::Error),
    /// The text decodes to more nodes or bytes than the decoder's bound
    /// ([`super::nodecount`]; aliases count as what they repeat): not decoded.
    #[error("decodes to {0} (aliases count as what they repeat), not decoded")]
    TooManyNodes(nodecount::Exceeded),
    /// The pod decodes but is not valid.
    #[error("invalid pod: {0}")]
    Invalid(String),
    /// The pod's UID is already the UID of a pod of another manifest (or of an
    /// earlier document of this one), which keeps it.
    #[error(
        "pod {} has uid {:?}, already the uid of pod {} from {}; ignoring it (a uid names one pod: drop `metadata.uid` to have one derived from the file)",
        .0.pod, .0.uid, .0.owner, .0.owner_origin
    )]
    DuplicateUid(Box<DuplicateUid>),
}

/// A pod refused for a UID another pod has.
#[derive(Debug)]
pub struct DuplicateUid {
    /// This pod's full name.
    pub pod: String,
    /// The UID both give.
    pub uid: String,
    /// The full name of the pod that keeps the UID.
    pub owner: String,
    /// The file or URL of that pod.
    pub owner_origin: String,
}

impl ManifestError {
    /// Where in the manifest, as the message's middle: `document 1: item 0: `, or
    /// nothing.
    fn position(&self) -> String {
        let mut at = String::new();
        if let Some(d) = self.document {
            at.push_str(&format!("document {d}: "));
        }
        if let Some(i) = self.item {
            at.push_str(&format!("item {i}: "));
        }
        at
    }

    /// True when the file vanished between listing and reading: a deletion, not an
    /// error.
    pub fn is_not_found(&self) -> bool {
        matches!(&self.kind, ManifestErrorKind::Read(e) if e.kind() == std::io::ErrorKind::NotFound)
    }
}

/// A problem found before the origin is attached.
struct Problem {
    document: Option<usize>,
    item: Option<usize>,
    kind: ManifestErrorKind,
}

impl Problem {
    fn at(document: usize, kind: ManifestErrorKind) -> Self {
        Problem {
            document: Some(document),
            item: None,
            kind,
        }
    }
}

/// Decodes, validates and defaults every pod of a manifest's text, in document order.
pub(crate) fn pods_from_str(
    text: &str,
    format: Format,
    origin: Origin<'_>,
    node_name: &str,
) -> Result<Vec<Pod>, ManifestError> {
    let with_origin = |p: Problem| ManifestError {
        origin: origin.to_string(),
        document: p.document,
        item: p.item,
        kind: p.kind,
    };
    let decoded = decode(text, format).map_err(with_origin)?;
    decoded
        .into_iter()
        .map(|d| prepare_decoded(d, node_name, origin))
        .collect()
}

/// A pod as decoded from a manifest, before the static pod defaults, with where it
/// was: what the server source keeps (it defaults a pod again when it loads it).
#[derive(Clone, Debug)]
pub(crate) struct Decoded {
    /// The 0-based document of the text.
    pub(crate) document: usize,
    /// The 0-based item of a `PodList`.
    pub(crate) item: Option<usize>,
    /// The pod as written.
    pub(crate) pod: Pod,
}

/// Decodes a manifest's text without defaulting or validating its pods.
pub(crate) fn decode_str(
    text: &str,
    format: Format,
    origin: Origin<'_>,
) -> Result<Vec<Decoded>, ManifestError> {
    decode(text, format).map_err(|p| ManifestError {
        origin: origin.to_string(),
        document: p.document,
        item: p.item,
        kind: p.kind,
    })
}

/// Decodes a body that may be JSON or YAML (a URL's, a push's): a stream of JSON
/// objects if it reads as one (each object a document), else YAML (one or more
/// documents, JSON ones included). Nothing is defaulted or validated yet.
pub(crate) fn decode_body(body: &[u8], origin: Origin<'_>) -> Result<Vec<Decoded>, ManifestError> {
    let text = std::str::from_utf8(body).map_err(|_| ManifestError {
        origin: origin.to_string(),
        document: None,
        item: None,
        kind: ManifestErrorKind::NotUtf8,
    })?;
    if text.trim_start().starts_with('{') {
        let docs: Result<Vec<Value>, _> = serde_json::Deserializer::from_str(text)
            .into_iter()
            .collect();
        if let Ok(docs) = docs {
            if docs.len() == 1 {
                return decode_str(text, Format::Json, origin);
            }
            let mut pods = Vec::new();
            for (i, doc) in docs.iter().enumerate() {
                let one = decode_str(&doc.to_string(), Format::Json, origin).map_err(|mut e| {
                    e.document = Some(i);
                    e
                })?;
                pods.extend(one.into_iter().map(|d| Decoded { document: i, ..d }));
            }
            return Ok(pods);
        }
        // Not a JSON stream (JSON documents between `---`): YAML reads it.
    }
    decode_str(text, Format::Yaml, origin)
}

/// [`prepare`]s a decoded pod; its error names the origin, document and item.
pub(crate) fn prepare_decoded(
    d: Decoded,
    node_name: &str,
    origin: Origin<'_>,
) -> Result<Pod, ManifestError> {
    prepare(d.pod, node_name, origin).map_err(|reason| ManifestError {
        origin: origin.to_string(),
        document: Some(d.document),
        item: d.item,
        kind: ManifestErrorKind::Invalid(reason),
    })
}

/// Decodes every pod, with its document and `PodList` item.
fn decode(text: &str, format: Format) -> Result<Vec<Decoded>, Problem> {
    // Counted first: the decoders build every node before anything can be checked.
    let counted = match format {
        Format::Json => nodecount::json(text, MAX_MANIFEST_NODES),
        // With its aliases expanded, no more text than a manifest may hold without.
        Format::Yaml => nodecount::yaml(text, MAX_MANIFEST_NODES, MAX_MANIFEST_BYTES),
    };
    if let Err(e) = counted {
        return Err(Problem {
            document: None,
            item: None,
            kind: ManifestErrorKind::TooManyNodes(e),
        });
    }
    let mut documents = Vec::new();
    match format {
        Format::Json => {
            let v: Value = serde_json::from_str(text)
                .map_err(|e| Problem::at(0, ManifestErrorKind::Json(e)))?;
            documents.push(v);
        }
        Format::Yaml => {
            for (i, doc) in serde_norway::Deserializer::from_str(text).enumerate() {
                // Stop at the first syntax error: the parser cannot resync after one.
                let mut v = Value::deserialize(doc)
                    .map_err(|e| Problem::at(i, ManifestErrorKind::Yaml(e)))?;
                yaml11_octal_modes(&mut v);
                documents.push(v);
            }
        }
    }
    let mut pods = Vec::new();
    for (i, doc) in documents.into_iter().enumerate() {
        if doc.is_null() {
            continue; // an empty document: `---` twice, or only comments
        }
        if !doc.is_object() {
            let found = format!("expected a Pod or PodList, found {}", describe(&doc));
            return Err(Problem::at(i, ManifestErrorKind::Kind(found)));
        }
        let kind = match doc.get("kind") {
            Some(Value::String(k)) => k.clone(),
            None | Some(Value::Null) => {
                let missing = "kind is missing (want Pod or PodList)".to_string();
                return Err(Problem::at(i, ManifestErrorKind::Kind(missing)));
            }
            Some(other) => other.to_string(),
        };
        match kind.as_str() {
            "Pod" => {
                let pod = base::json::from_value(&doc)
                    .map_err(|e| Problem::at(i, ManifestErrorKind::Decode(e)))?;
                pods.push(Decoded {
                    document: i,
                    item: None,
                    pod,
                });
            }
            "PodList" => {
                let items = match doc.get("items") {
                    None | Some(Value::Null) => Vec::new(),
                    Some(Value::Array(items)) => items.clone(),
                    Some(other) => {
                        return Err(Problem::at(
                            i,
                            ManifestErrorKind::Kind(format!(
                                "PodList items must be a list, found {}",
                                describe(other)
                            )),
                        ))
                    }
                };
                for (j, item) in items.into_iter().enumerate() {
                    let pod = base::json::from_value(&item).map_err(|e| Problem {
                        document: Some(i),
                        item: Some(j),
                        kind: ManifestErrorKind::Decode(e),
                    })?;
                    pods.push(Decoded {
                        document: i,
                        item: Some(j),
                        pod,
                    });
                }
            }
            other => {
                return Err(Problem::at(
                    i,
                    ManifestErrorKind::Kind(format!("kind {other:?} is not Pod or PodList")),
                ))
            }
        }
    }
    Ok(pods)
}

/// Upstream reads manifests with YAML 1.1 (go-yaml v2 under sigs.k8s.io/yaml), where a
/// plain `0400` is the octal number 256; serde_norway (YAML 1.2) gives the string "0400",
/// which no pod field takes. File modes are where people write octal (`defaultMode`,
/// an item's `mode`), so a string of octal digits with a leading 0 under those keys is
/// read as YAML 1.1 would. (A quoted '0400' is read the same way; upstream refuses it.)
fn yaml11_octal_modes(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                if key == "defaultMode" || key == "mode" {
                    if let Value::String(s) = value {
                        let octal = s.len() > 1
                            && s.starts_with('0')
                            && s.bytes().all(|b| (b'0'..=b'7').contains(&b));
                        if let Some(n) = octal.then(|| i64::from_str_radix(s, 8).ok()).flatten() {
                            *value = Value::from(n);
                            continue;
                        }
                    }
                }
                yaml11_octal_modes(value);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(yaml11_octal_modes),
        _ => {}
    }
}

fn describe(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// Applies the static pod defaults to a decoded pod, then validates it with
/// upstream's rules (upstream's `tryDecodeSinglePod`: defaults first, so the name
/// checked is the one the pod runs under). The error is the reason only: every field
/// error, as upstream prints a `field.ErrorList`.
pub fn prepare(mut pod: Pod, node_name: &str, origin: Origin<'_>) -> Result<Pod, String> {
    // Before the defaults: they turn an empty name into "-<node>", whose error would
    // hide the real one.
    if pod.metadata.name.as_deref().unwrap_or("").is_empty() {
        return Err("name is needed for the pod".into());
    }
    let uid = match pod.metadata.uid.as_deref() {
        Some(u) if !u.is_empty() => u.to_string(),
        _ => static_pod_uid(&pod, node_name, origin)?,
    };
    apply_defaults(&mut pod, node_name, uid, matches!(origin, Origin::File(_)));
    crate::validation::validate_pod_create(&pod).map_err(|errs| errs.to_string())?;
    super::shrink(&mut pod);
    Ok(pod)
}

/// The derived UID of a static pod without one (see the module docs for why
/// `spec.containers` is left out). Host ports stay in: they are published on the
/// sandbox, so changing one needs a new sandbox, hence a new pod.
fn static_pod_uid(pod: &Pod, node_name: &str, origin: Origin<'_>) -> Result<String, String> {
    let mut basis = pod.clone();
    if let Some(spec) = basis.spec.as_mut() {
        spec.containers = spec
            .containers
            .iter()
            .filter_map(|c| {
                let host_ports: Vec<_> = c
                    .ports
                    .iter()
                    .flatten()
                    .filter(|p| p.host_port.unwrap_or(0) != 0)
                    .cloned()
                    .collect();
                (!host_ports.is_empty()).then(|| k8s_openapi::api::core::v1::Container {
                    ports: Some(host_ports),
                    ..Default::default()
                })
            })
            .collect();
    }
    let canonical =
        serde_json::to_vec(&basis).map_err(|e| format!("cannot encode the pod to hash it: {e}"))?;
    let mut h = Fnv1a128::new();
    h.write(&canonical);
    h.write(b"host:");
    h.write(node_name.as_bytes());
    h.write(&origin.hash_tag());
    Ok(format!("{:032x}", h.finish()))
}

/// Upstream's `applyDefaults`, after the UID is known.
fn apply_defaults(pod: &mut Pod, node_name: &str, uid: String, from_file: bool) {
    let meta = &mut pod.metadata;
    let name = meta.name.take().unwrap_or_default();
    meta.name = Some(format!("{name}-{}", node_name.to_lowercase()));
    if meta.namespace.as_deref().unwrap_or("").is_empty() {
        meta.namespace = Some("default".into());
    }
    meta.annotations
        .get_or_insert_with(Default::default)
        .insert(CONFIG_HASH_ANNOTATION.into(), uid.clone());
    meta.uid = Some(uid);

    let spec = pod.spec.get_or_insert_with(Default::default);
    spec.node_name = Some(node_name.to_string());
    if from_file {
        // Static pods must survive node problems (upstream: AddOrUpdateTolerationInPod).
        let tolerate_no_execute = Toleration {
            operator: Some("Exists".into()),
            effect: Some("NoExecute".into()),
            ..Toleration::default()
        };
        let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
        if !tolerations.contains(&tolerate_no_execute) {
            tolerations.push(tolerate_no_execute);
        }
    }
    pod.status.get_or_insert_with(PodStatus::default).phase = Some("Pending".into());
}

/// FNV-1a with a 128-bit state (the hash upstream's newest `applyDefaults` uses).
#[derive(Debug)]
struct Fnv1a128(u128);

impl Fnv1a128 {
    const OFFSET_BASIS: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013b;

    fn new() -> Self {
        Fnv1a128(Self::OFFSET_BASIS)
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u128::from(*b);
            self.0 = self.0.wrapping_mul(Self::PRIME);
        }
    }

    fn finish(&self) -> u128 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::CONFIG_HASH_ANNOTATION;
    use super::*;

    fn origin() -> Origin<'static> {
        Origin::File(Path::new("/etc/kubernetes/manifests/web.yaml"))
    }

    const WEB: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  labels: {app: web}\n\
                       spec:\n  containers:\n  - name: c\n    image: busybox:1\n";

    fn pods(text: &str) -> Vec<Pod> {
        pods_from_str(text, Format::Yaml, origin(), "Node-1").expect("valid manifest")
    }

    #[test]
    fn a_kept_pod_holds_no_spare_room_in_its_lists() {
        let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers:\n  \
                    - name: c\n    image: busybox:1\n    args: [a, b, c, d, e]\n    \
                    env: [{name: A, value: '1'}]\n  volumes: [{name: v, emptyDir: {}}]\n";
        let p = pods(text).remove(0);
        let spec = p.spec.expect("spec");
        assert_eq!(spec.containers.capacity(), 1);
        let c = &spec.containers[0];
        let args = c.args.as_ref().expect("args");
        assert_eq!((args.len(), args.capacity()), (5, 5));
        assert_eq!(c.env.as_ref().map(Vec::capacity), Some(1));
        assert_eq!(spec.volumes.as_ref().map(Vec::capacity), Some(1));
    }

    fn err(text: &str) -> String {
        pods_from_str(text, Format::Yaml, origin(), "node-1")
            .expect_err("invalid manifest")
            .to_string()
    }

    fn uid(p: &Pod) -> &str {
        p.metadata.uid.as_deref().expect("uid")
    }

    #[test]
    fn a_manifest_of_too_many_nodes_is_refused_before_it_is_decoded() {
        let n = usize::try_from(MAX_MANIFEST_NODES).expect("limit");
        let many = format!("{WEB}x: [{}]\n", vec!["0"; n].join(","));
        assert_eq!(
            err(&many),
            "/etc/kubernetes/manifests/web.yaml: decodes to more than 100000 nodes (aliases count as what they repeat), not decoded"
        );
        let bomb = format!("{WEB}a: &a {}\nb: [*a, *a, *a, *a]\n", "x".repeat(1 << 20));
        assert!(err(&bomb).ends_with(": decodes to more than 3145728 bytes of text (aliases count as what they repeat), not decoded"));
        let json = format!("{{\"kind\": \"Pod\", \"x\": [{}]}}", vec!["0"; n].join(","));
        let e = pods_from_str(&json, Format::Json, origin(), "n").expect_err("too many");
        assert!(matches!(e.kind, ManifestErrorKind::TooManyNodes(_)), "{e}");
        // Just under the limit it decodes.
        let fewer = format!("{WEB}x: [{}]\n", vec!["0"; n - 100].join(","));
        assert_eq!(pods(&fewer).len(), 1);
    }

    #[test]
    fn fnv1a_128_matches_the_reference_vectors() {
        let hash = |s: &str| {
            let mut h = Fnv1a128::new();
            h.write(s.as_bytes());
            h.finish()
        };
        assert_eq!(hash(""), 0x6c62272e07bb014262b821756295c58d);
        assert_eq!(hash("a"), 0xd228cb696f1a8caf78912b704e4a8964);
        assert_eq!(hash("foobar"), 0x343e1662793c64bf6f0d3597ba446f18);
    }

    #[test]
    fn octal_file_modes_are_read_as_yaml_1_1_reads_them() {
        let text = format!(
            "{WEB}  volumes:\n  - name: s\n    secret:\n      secretName: s\n      defaultMode: 0400\n      \
             items:\n      - {{key: k, path: k, mode: 0755}}\n      - {{key: j, path: j, mode: 420}}\n"
        );
        let p = pods(&text).remove(0);
        let secret = p.spec.expect("spec").volumes.expect("volumes")[0]
            .secret
            .clone()
            .expect("secret");
        assert_eq!(secret.default_mode, Some(0o400));
        let modes: Vec<_> = secret
            .items
            .expect("items")
            .iter()
            .map(|i| i.mode)
            .collect();
        assert_eq!(modes, vec![Some(0o755), Some(420)]);
    }

    #[test]
    fn defaults_are_applied() {
        let p = pods(WEB).remove(0);
        assert_eq!(p.metadata.name.as_deref(), Some("web-node-1"));
        assert_eq!(p.metadata.namespace.as_deref(), Some("default"));
        let spec = p.spec.as_ref().expect("spec");
        assert_eq!(spec.node_name.as_deref(), Some("Node-1"));
        assert_eq!(
            spec.tolerations.as_deref(),
            Some(
                &[Toleration {
                    operator: Some("Exists".into()),
                    effect: Some("NoExecute".into()),
                    ..Toleration::default()
                }][..]
            )
        );
        assert_eq!(
            p.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Pending")
        );
        let u = uid(&p);
        assert_eq!(u.len(), 32);
        assert!(u
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        let hash = p
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(CONFIG_HASH_ANNOTATION));
        assert_eq!(hash.map(String::as_str), Some(u));
    }

    #[test]
    fn a_given_namespace_and_uid_are_kept_and_the_toleration_is_not_doubled() {
        let p = pods(
            "kind: Pod\nmetadata: {name: a, namespace: kube-system, uid: my-uid}\n\
             spec:\n  tolerations: [{operator: Exists, effect: NoExecute}]\n  \
             containers: [{name: c, image: i}]\n",
        )
        .remove(0);
        assert_eq!(p.metadata.namespace.as_deref(), Some("kube-system"));
        assert_eq!(p.metadata.uid.as_deref(), Some("my-uid"));
        let hash = p
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(CONFIG_HASH_ANNOTATION));
        assert_eq!(hash.map(String::as_str), Some("my-uid"));
        assert_eq!(p.spec.and_then(|s| s.tolerations).map(|t| t.len()), Some(1));
    }

    #[test]
    fn url_pods_get_no_toleration_and_another_uid() {
        let from_url = pods_from_str(WEB, Format::Yaml, Origin::Url("http://x/pods"), "Node-1")
            .expect("valid");
        assert_eq!(
            from_url[0]
                .spec
                .as_ref()
                .and_then(|s| s.tolerations.as_ref()),
            None
        );
        assert_ne!(uid(&from_url[0]), uid(&pods(WEB)[0]));
    }

    #[test]
    fn uid_is_stable_and_ignores_only_the_app_containers() {
        let base = uid(&pods(WEB)[0]).to_string();
        assert_eq!(uid(&pods(WEB)[0]), base, "same manifest, same uid");
        let same = |text: &str| uid(&pods(text)[0]) == base;
        assert!(
            same(&WEB.replace("busybox:1", "busybox:2")),
            "image edit keeps the uid"
        );
        assert!(
            same(&format!("{WEB}    command: [sleep, '1']\n")),
            "command edit keeps the uid"
        );
        assert!(
            !same(&WEB.replace("app: web", "app: web2")),
            "label edit changes it"
        );
        assert!(
            !same(&format!("{WEB}  hostNetwork: true\n")),
            "hostNetwork changes it"
        );
        assert!(
            same(&format!("{WEB}    ports: [{{containerPort: 80}}]\n")),
            "a container port without a host port keeps it"
        );
        assert!(
            !same(&format!(
                "{WEB}    ports: [{{containerPort: 80, hostPort: 8080}}]\n"
            )),
            "a host port changes it: it lives on the sandbox"
        );
        assert!(
            !same(&format!("{WEB}  initContainers: [{{name: i, image: x}}]\n")),
            "init containers change it"
        );
        let other_node = pods_from_str(WEB, Format::Yaml, origin(), "node-2").expect("valid");
        assert_ne!(uid(&other_node[0]), base, "another node, another uid");
        let other_path = pods_from_str(
            WEB,
            Format::Yaml,
            Origin::File(Path::new("/x/web.yaml")),
            "Node-1",
        )
        .expect("valid");
        assert_ne!(uid(&other_path[0]), base, "another file, another uid");
    }

    #[test]
    fn multi_document_yaml_and_pod_lists_keep_their_order() {
        let text = format!(
            "---\n{WEB}---\n# only a comment\n---\nkind: PodList\napiVersion: v1\nitems:\n\
             - metadata: {{name: b}}\n  spec: {{containers: [{{name: c, image: i}}]}}\n\
             - metadata: {{name: a}}\n  spec: {{containers: [{{name: c, image: i}}]}}\n---\n"
        );
        let names: Vec<_> = pods(&text)
            .into_iter()
            .map(|p| p.metadata.name.unwrap_or_default())
            .collect();
        assert_eq!(names, ["web-node-1", "b-node-1", "a-node-1"]);
    }

    #[test]
    fn json_is_one_document() {
        let text = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"j"},
            "spec":{"containers":[{"name":"c","image":"i"}]}}"#;
        let p = pods_from_str(text, Format::Json, origin(), "n").expect("valid json");
        assert_eq!(p[0].metadata.name.as_deref(), Some("j-n"));
        let e = pods_from_str("{\"kind\": ", Format::Json, origin(), "n").expect_err("bad json");
        assert!(
            e.to_string().contains("invalid JSON: EOF while parsing"),
            "{e}"
        );
    }

    #[test]
    fn errors_name_the_origin_document_item_and_reason() {
        let o = "/etc/kubernetes/manifests/web.yaml";
        let cases: Vec<(String, String)> = vec![
            (
                format!("{WEB}---\nkind: Pod\nspec: {{containers: [{{name: c, image: i}}]}}\n"),
                format!("{o}: document 1: invalid pod: name is needed for the pod"),
            ),
            (
                "kind: Pod\nmetadata: {name: a}\n".into(),
                format!("{o}: document 0: invalid pod: spec.containers: Required value"),
            ),
            (
                "kind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: '', image: i}]}\n".into(),
                format!("{o}: document 0: invalid pod: spec.containers[0].name: Required value"),
            ),
            (
                "kind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c, image: i}, {name: c, image: i}]}\n".into(),
                format!("{o}: document 0: invalid pod: spec.containers[1].name: Duplicate value: \"c\""),
            ),
            (
                "kind: Pod\nmetadata: {name: a}\nspec: {initContainers: [{name: c, image: i}], containers: [{name: c, image: i}]}\n".into(),
                format!("{o}: document 0: invalid pod: spec.initContainers[0].name: Duplicate value: \"c\""),
            ),
            (
                "kind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c}]}\n".into(),
                format!("{o}: document 0: invalid pod: spec.containers[0].image: Required value"),
            ),
            (
                "kind: PodList\nitems:\n- metadata: {name: a}\n  spec: {containers: [{name: c, image: i}]}\n- spec: {containers: [{name: c, image: i}]}\n".into(),
                format!("{o}: document 0: item 1: invalid pod: name is needed for the pod"),
            ),
            (
                "kind: Pod\nmetadata: {name: a}\nspec:\n  volumes: [{name: '../../../../../hostsecret', emptyDir: {}}]\n  containers: [{name: c, image: i, volumeMounts: [{name: '../../../../../hostsecret', mountPath: /v}]}]\n".into(),
                format!("{o}: document 0: invalid pod: [spec.volumes[0].name: Invalid value: \"../../../../../hostsecret\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?'), spec.containers[0].volumeMounts[0].name: Not found: \"../../../../../hostsecret\"]"),
            ),
            (
                "kind: Deployment\n".into(),
                format!("{o}: document 0: kind \"Deployment\" is not Pod or PodList"),
            ),
            (
                "metadata: {name: a}\n".into(),
                format!("{o}: document 0: kind is missing (want Pod or PodList)"),
            ),
            (
                "- a\n".into(),
                format!("{o}: document 0: expected a Pod or PodList, found a list"),
            ),
            (
                "kind: PodList\nitems: 3\n".into(),
                format!("{o}: document 0: PodList items must be a list, found a number"),
            ),
            (
                "apiVersion: v2\nkind: Pod\n".into(),
                format!("{o}: document 0: cannot decode pod: invalid value: string \"v2\", expected v1"),
            ),
        ];
        for (text, want) in cases {
            assert_eq!(err(&text), want, "manifest:\n{text}");
        }
    }

    #[test]
    fn yaml_syntax_errors_carry_the_location() {
        let e = err(&format!("{WEB}---\nkind: Pod\nmetadata: {{name: [\n"));
        assert!(
            e.starts_with("/etc/kubernetes/manifests/web.yaml: document 1: invalid YAML: "),
            "{e}"
        );
        assert!(e.contains(" at line 13 column 1"), "{e}");
    }

    /// The kind is a layer of the `source()` chain whose message ends the manifest's,
    /// and its cause is in it already: `error_chain` says each once.
    #[test]
    fn the_chain_says_the_cause_once() {
        for text in [
            format!("{WEB}---\nkind: Pod\nmetadata: {{name: [\n"),
            "kind: Service\n".to_string(),
        ] {
            let e = pods_from_str(&text, Format::Yaml, origin(), "node-1").expect_err("invalid");
            assert_eq!(base::loops::error_chain(&e), e.to_string());
        }
    }
}
