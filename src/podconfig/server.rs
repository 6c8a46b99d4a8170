//! The server source: static pods pushed to the node over its authenticated port, the
//! fifth source, as the first kubelet's `POST /container` (one manifest) and `POST
//! /containers` (the whole set) were. Off by default (`--enable-server-source`,
//! `enableServerSource`). The port's handlers (`server::push`) bound and read the
//! request bodies; this module decodes them and keeps the set.
//!
//! Every pushed pod is decoded, validated and defaulted exactly as a static pod of the
//! other sources ([`super::manifest`], [`Origin::Server`]: named `<name>-<node>`, its
//! UID hashed from the pod and `server:`, so the same pod has the same UID however and
//! whenever it is pushed) and annotated `kubernetes.io/config.source: server`. The set
//! is keyed by namespace and name as pushed. A change ([`ServerSource::replace`] for
//! `PUT /pods`, [`ServerSource::add`] for `POST`, [`ServerSource::remove`] for
//! `DELETE`) is refused whole if one document is bad; one that leaves the set as it
//! was writes and sends nothing. Otherwise the new set is written to
//! `<root-dir>/pods-pushed/pods.json` ([`base::fsutil::write_atomic`]: a crash leaves
//! the old set or the new), then sent on the pod config channel as the source's whole
//! snapshot, by the request's own thread: the source has no thread.
//!
//! One change at a time: a change takes the turn (a flag under the state's mutex,
//! waited for on a condvar at most [`TURN_WAIT`], then [`ServerSourceError::Busy`]),
//! so the file, the snapshots and the set in memory follow one order; the mutex is
//! held only to read or swap the set and the flag, never across the write or the send.
//! A snapshot the merge does not take within [`SEND_TIMEOUT`] (the sync loop stuck)
//! puts the old file back and refuses the change.
//!
//! The file is a v1 `PodList` of the pods as pushed (before the defaults; a manifest
//! the file source could read too), kept within a manifest's bounds (3 MiB, 100 000
//! nodes) so that it can always be read back. At start ([`ServerSource::open`]) it is
//! read, its pods prepared again (the same UIDs, so their running containers are
//! adopted, not recreated) and sent as the source's first snapshot before the sync loop
//! runs, so "all sources ready" is not held back. A file that cannot be read or
//! decoded is logged, naming it, set aside as `pods.json.corrupt`, and the source
//! starts empty; nothing else is affected.
//!
//! Over 800 lines: half of it is its unit tests (the body shapes, refusals, the file
//! written, read back and found corrupt, the turn), which need the source's private
//! state.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use k8s_openapi::api::core::v1::Pod;

use super::manifest::{self, Decoded, Format, ManifestError, Origin, MAX_MANIFEST_BYTES};
use super::nodecount::{self, MAX_MANIFEST_NODES};
use super::{set_annotation, Source, SourceUpdate, CONFIG_SOURCE_ANNOTATION};
use base::fsutil::{self, ReadError};
use base::loops::{error_chain, lock};

/// The directory under the root dir that holds the pushed set.
pub(crate) const STORE_DIR: &str = "pods-pushed";
/// The file in it.
pub(crate) const STORE_FILE: &str = "pods.json";
/// How long a change waits for another one being written (an fsync on a slow disk)
/// before it is refused with 503: a port worker is not held longer.
pub(crate) const TURN_WAIT: Duration = Duration::from_secs(10);
/// How long the merge's channel may stay full before a change is refused: only a
/// stuck sync loop leaves it full (it drains the channel every iteration).
pub(crate) const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// What errors about a request's body name as its origin.
pub(crate) const BODY_ORIGIN: &str = "request body";

/// Why a push is refused, or the stored set not read. Nothing of the set changes.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ServerSourceError {
    /// A document does not decode, or holds an invalid pod (upstream's field paths).
    #[error(transparent)]
    Manifest(ManifestError),
    /// Two pods of one request (or of the stored set) have the same namespace and name.
    #[error("{origin}: document {document}: pod {namespace}/{name} is given twice (first in document {first})")]
    Duplicate {
        /// The request body or the file.
        origin: String,
        /// The namespace.
        namespace: String,
        /// The name, as pushed.
        name: String,
        /// The document of the first.
        first: usize,
        /// The document of the second.
        document: usize,
    },
    /// Two pods of the set would have one UID (`metadata.uid` given twice).
    #[error("{origin}: pod {pod} has uid {uid:?}, already the uid of pushed pod {owner}")]
    DuplicateUid {
        /// The request body or the file.
        origin: String,
        /// The pod refused (its name as it would run).
        pod: String,
        /// The UID.
        uid: String,
        /// The pushed pod that has it.
        owner: String,
    },
    /// `POST /pods` takes exactly one pod.
    #[error("{BODY_ORIGIN}: one pod is needed, found {0}")]
    NotOne(usize),
    /// No pushed pod has this namespace and name.
    #[error("no pushed pod {namespace}/{name}")]
    NotFound {
        /// The namespace asked for.
        namespace: String,
        /// The name asked for.
        name: String,
    },
    /// The set would be larger than its file may be to be read back.
    #[error("the pushed set would be too large to keep: {0}")]
    TooLarge(String),
    /// The set could not be encoded (never expected of decoded pods).
    #[error("cannot encode the pushed set")]
    Encode(#[source] serde_json::Error),
    /// Another change is being written.
    #[error("another push is being written; try again")]
    Busy,
    /// The set could not be written.
    #[error("cannot write {}", path.display())]
    Store {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The stored set could not be read.
    #[error("{}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: ReadError,
    },
    /// The merge did not take the new set in time (the sync loop is stuck).
    #[error("the pod config merge did not take the pushed set within {0:?}; nothing changed")]
    NotTaken(Duration),
}

/// A pushed pod.
#[derive(Clone, Debug)]
struct Pushed {
    /// As pushed (decoded, before the defaults): what the file keeps.
    given: Pod,
    /// As it runs: defaulted, validated, annotated with its source.
    running: Arc<Pod>,
}

/// The set: (namespace, name as pushed) → pod.
type PodSet = BTreeMap<(String, String), Pushed>;

/// What a change found; the set in memory is swapped under the mutex only.
#[derive(Debug, Default)]
struct State {
    set: Arc<PodSet>,
    /// A change holds the turn (see the module docs).
    writing: bool,
}

/// What `POST /pods` did.
#[derive(Debug)]
pub(crate) struct Added {
    /// The pod as it runs.
    pub(crate) pod: Arc<Pod>,
    /// False when a pushed pod of that name was replaced (or pushed again unchanged).
    pub(crate) created: bool,
}

/// The server source's set, its file and its channel to the merge.
#[derive(Debug)]
pub(crate) struct ServerSource {
    node_name: String,
    path: PathBuf,
    updates: Sender<SourceUpdate>,
    state: Mutex<State>,
    turn: Condvar,
    /// [`TURN_WAIT`] and [`SEND_TIMEOUT`] (tests shorten them).
    turn_wait: Duration,
    send_timeout: Duration,
}

impl ServerSource {
    /// The source of a kubelet whose root dir is `root_dir`: its stored set read (see
    /// the module docs for a corrupt one) and sent as its first snapshot.
    pub(crate) fn open(
        root_dir: &Path,
        node_name: &str,
        updates: Sender<SourceUpdate>,
    ) -> Arc<ServerSource> {
        let source = ServerSource {
            node_name: node_name.to_string(),
            path: root_dir.join(STORE_DIR).join(STORE_FILE),
            updates,
            state: Mutex::default(),
            turn: Condvar::new(),
            turn_wait: TURN_WAIT,
            send_timeout: SEND_TIMEOUT,
        };
        let set = match source.load() {
            Ok(set) => {
                log::info!(
                    "adding pod source server: {} pushed pods from {}",
                    set.len(),
                    source.path.display()
                );
                set
            }
            Err(e) => {
                let aside = source.path.with_extension("json.corrupt");
                let moved = match std::fs::rename(&source.path, &aside) {
                    Ok(()) => format!("moved to {}", aside.display()),
                    Err(m) => format!("could not be moved aside: {m}"),
                };
                log::error!(
                    "server pod source: cannot read the pushed set: {}; the source starts \
                     with no pods (the file {moved})",
                    error_chain(&e)
                );
                PodSet::new()
            }
        };
        // Before the sync loop runs, on a channel nobody else has filled: never waits.
        let _ = source.updates.send(snapshot(&set));
        lock(&source.state).set = Arc::new(set);
        Arc::new(source)
    }

    /// The stored set: empty when there is no file.
    fn load(&self) -> Result<PodSet, ServerSourceError> {
        let path = &self.path;
        let bytes = match fsutil::read_regular(path, MAX_MANIFEST_BYTES) {
            Ok((bytes, _)) => bytes,
            Err(e) if e.is_not_found() => return Ok(PodSet::new()),
            Err(source) => {
                return Err(ServerSourceError::Read {
                    path: path.clone(),
                    source,
                })
            }
        };
        let label = path.display().to_string();
        let origin = Origin::Server(&label);
        let text = std::str::from_utf8(&bytes).map_err(|_| {
            from_manifest(ManifestError {
                origin: label.clone(),
                document: None,
                item: None,
                kind: manifest::ManifestErrorKind::NotUtf8,
            })
        })?;
        let decoded = manifest::decode_str(text, Format::Json, origin).map_err(from_manifest)?;
        self.prepare(decoded, origin)
    }

    /// Every pushed pod as it runs, in namespace and name order.
    pub(crate) fn pods(&self) -> Vec<Arc<Pod>> {
        let set = lock(&self.state).set.clone();
        set.values().map(|p| p.running.clone()).collect()
    }

    /// `PUT /pods`: the body's pods become the whole set. Returns the set as it runs.
    pub(crate) fn replace(&self, body: &[u8]) -> Result<Vec<Arc<Pod>>, ServerSourceError> {
        let origin = Origin::Server(BODY_ORIGIN);
        let new = self.prepare(decode(body)?, origin)?;
        let turn = self.take_turn()?;
        let running = new.values().map(|p| p.running.clone()).collect();
        turn.commit(new)?;
        Ok(running)
    }

    /// `POST /pods`: the body's one pod is added, or replaces the pushed pod of its
    /// namespace and name.
    pub(crate) fn add(&self, body: &[u8]) -> Result<Added, ServerSourceError> {
        let origin = Origin::Server(BODY_ORIGIN);
        let decoded = decode(body)?;
        if decoded.len() != 1 {
            return Err(ServerSourceError::NotOne(decoded.len()));
        }
        let (key, pushed) = self
            .prepare(decoded, origin)?
            .into_iter()
            .next()
            .ok_or(ServerSourceError::NotOne(0))?;
        let turn = self.take_turn()?;
        let mut new = (*turn.current).clone();
        let pod = pushed.running.clone();
        let created = new.insert(key, pushed).is_none();
        check_uids(&new, origin)?;
        turn.commit(new)?;
        Ok(Added { pod, created })
    }

    /// `DELETE /pods/<namespace>/<name>`: removes the pushed pod of that namespace and
    /// name, `name` as it runs (`<name>-<node>`) or as it was pushed; the first wins.
    pub(crate) fn remove(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<Pod>, ServerSourceError> {
        let turn = self.take_turn()?;
        let found = turn
            .current
            .iter()
            .find(|((ns, _), p)| {
                ns == namespace && p.running.metadata.name.as_deref() == Some(name)
            })
            .or_else(|| {
                let key = (namespace.to_string(), name.to_string());
                turn.current.get_key_value(&key)
            })
            .map(|(k, p)| (k.clone(), p.running.clone()));
        let Some((key, pod)) = found else {
            return Err(ServerSourceError::NotFound {
                namespace: namespace.to_string(),
                name: name.to_string(),
            });
        };
        let mut new = (*turn.current).clone();
        new.remove(&key);
        turn.commit(new)?;
        Ok(pod)
    }

    /// Defaults and validates decoded pods as static pods of this node, refusing a
    /// name given twice and a UID used twice.
    fn prepare(
        &self,
        decoded: Vec<Decoded>,
        origin: Origin<'_>,
    ) -> Result<PodSet, ServerSourceError> {
        let mut set = PodSet::new();
        let mut documents: BTreeMap<(String, String), usize> = BTreeMap::new();
        for d in decoded {
            let given = d.pod.clone();
            let document = d.document;
            let mut running =
                manifest::prepare_decoded(d, &self.node_name, origin).map_err(from_manifest)?;
            set_annotation(
                &mut running,
                CONFIG_SOURCE_ANNOTATION,
                Source::Server.as_str(),
            );
            let key = key_of(&given);
            if let Some(first) = documents.insert(key.clone(), document) {
                return Err(ServerSourceError::Duplicate {
                    origin: origin.to_string(),
                    namespace: key.0,
                    name: key.1,
                    first,
                    document,
                });
            }
            set.insert(
                key,
                Pushed {
                    given,
                    running: Arc::new(running),
                },
            );
        }
        check_uids(&set, origin)?;
        Ok(set)
    }

    /// Waits for the turn (at most [`TURN_WAIT`]).
    fn take_turn(&self) -> Result<Turn<'_>, ServerSourceError> {
        let deadline = Instant::now() + self.turn_wait;
        let mut state = lock(&self.state);
        while state.writing {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ServerSourceError::Busy);
            }
            state = match self.turn.wait_timeout(state, left) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
        state.writing = true;
        Ok(Turn {
            source: self,
            current: state.set.clone(),
        })
    }
}

/// The turn of one change: the set it started from; given back when dropped.
struct Turn<'a> {
    source: &'a ServerSource,
    current: Arc<PodSet>,
}

impl Turn<'_> {
    /// Writes and sends `new` unless it is the set already, then makes it the set.
    fn commit(self, new: PodSet) -> Result<(), ServerSourceError> {
        if same(&self.current, &new) {
            return Ok(());
        }
        let src = self.source;
        let text = store_text(&new)?;
        src.write(&text)?;
        if let Err(e) = src.updates.send_timeout(snapshot(&new), src.send_timeout) {
            // Not sent: the file goes back to the set the merge has.
            let restored = store_text(&self.current).and_then(|old| src.write(&old));
            if let Err(r) = restored {
                log::error!(
                    "server pod source: the merge did not take a push ({e}) and the previous \
                     set could not be written back: {}",
                    error_chain(&r)
                );
            }
            return Err(ServerSourceError::NotTaken(src.send_timeout));
        }
        log::info!(
            "server pod source: {} pushed pods: {}",
            new.len(),
            new.values()
                .map(|p| super::full_name(&p.running))
                .collect::<Vec<_>>()
                .join(", ")
        );
        lock(&src.state).set = Arc::new(new);
        Ok(())
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        lock(&self.source.state).writing = false;
        self.source.turn.notify_one();
    }
}

impl ServerSource {
    /// Writes the store file (its directory made first, private: pod specs carry env
    /// values).
    fn write(&self, text: &str) -> Result<(), ServerSourceError> {
        let store = |source| ServerSourceError::Store {
            path: self.path.clone(),
            source,
        };
        if let Some(dir) = self.path.parent() {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(store)?;
        }
        fsutil::write_atomic(&self.path, text.as_bytes(), 0o600).map_err(store)
    }
}

/// A request's body decoded ([`manifest::decode_body`]); the memory a big one took
/// goes back to the system, as after the other sources' big decodes.
fn decode(body: &[u8]) -> Result<Vec<Decoded>, ServerSourceError> {
    let decoded = manifest::decode_body(body, Origin::Server(BODY_ORIGIN));
    if body.len() >= base::malloc::TRIM_AFTER_BYTES {
        base::malloc::release_freed_memory();
    }
    decoded.map_err(from_manifest)
}

fn from_manifest(e: ManifestError) -> ServerSourceError {
    ServerSourceError::Manifest(e)
}

/// (namespace, name) as pushed; an empty namespace is `default`, as the defaults make it.
fn key_of(pod: &Pod) -> (String, String) {
    let ns = pod
        .metadata
        .namespace
        .as_deref()
        .filter(|n| !n.is_empty())
        .unwrap_or("default");
    (
        ns.to_string(),
        pod.metadata.name.clone().unwrap_or_default(),
    )
}

/// Refuses a set in which two pods have one UID (the merge would run only one).
fn check_uids(set: &PodSet, origin: Origin<'_>) -> Result<(), ServerSourceError> {
    let mut owners: BTreeMap<&str, &Pod> = BTreeMap::new();
    for p in set.values() {
        let uid = p.running.metadata.uid.as_deref().unwrap_or_default();
        if let Some(owner) = owners.insert(uid, &p.running) {
            return Err(ServerSourceError::DuplicateUid {
                origin: origin.to_string(),
                pod: super::full_name(&p.running),
                uid: uid.to_string(),
                owner: super::full_name(owner),
            });
        }
    }
    Ok(())
}

/// Whether two sets hold the same pods as pushed.
fn same(a: &PodSet, b: &PodSet) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|((ka, pa), (kb, pb))| ka == kb && pa.given == pb.given)
}

/// The source's snapshot of `set`.
fn snapshot(set: &PodSet) -> SourceUpdate {
    SourceUpdate {
        source: Source::Server,
        pods: set.values().map(|p| p.running.clone()).collect(),
        checkpoint: false,
    }
}

/// The file's text: a v1 `PodList` of the pods as pushed, refused when it could not be
/// read back (more bytes or nodes than a manifest may have).
fn store_text(set: &PodSet) -> Result<String, ServerSourceError> {
    #[derive(serde::Serialize)]
    struct PodList<'a> {
        kind: &'static str,
        #[serde(rename = "apiVersion")]
        api_version: &'static str,
        items: Vec<&'a Pod>,
    }
    let list = PodList {
        kind: "PodList",
        api_version: "v1",
        items: set.values().map(|p| &p.given).collect(),
    };
    let text = serde_json::to_string(&list).map_err(ServerSourceError::Encode)?;
    if text.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(ServerSourceError::TooLarge(format!(
            "{} bytes, more than {} MiB",
            text.len(),
            MAX_MANIFEST_BYTES >> 20
        )));
    }
    nodecount::json(&text, MAX_MANIFEST_NODES)
        .map_err(|e| ServerSourceError::TooLarge(e.to_string()))?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use base::testutil::TempDir;
    use crossbeam_channel::Receiver;

    const NODE: &str = "Node-1";

    fn pod_yaml(name: &str, image: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\n\
             spec: {{containers: [{{name: c, image: {image}}}]}}\n"
        )
    }

    fn open(dir: &TempDir) -> (Arc<ServerSource>, Receiver<SourceUpdate>) {
        let (tx, rx) = crossbeam_channel::bounded(16);
        (ServerSource::open(&dir.0, NODE, tx), rx)
    }

    fn store(dir: &TempDir) -> PathBuf {
        dir.0.join(STORE_DIR).join(STORE_FILE)
    }

    /// The names (as they run) of every snapshot sent so far.
    fn sent(rx: &Receiver<SourceUpdate>) -> Vec<Vec<String>> {
        rx.try_iter()
            .map(|u| {
                assert_eq!(u.source, Source::Server);
                names(&u.pods)
            })
            .collect()
    }

    fn names(pods: &[Arc<Pod>]) -> Vec<String> {
        pods.iter()
            .map(|p| p.metadata.name.clone().unwrap_or_default())
            .collect()
    }

    fn uid(p: &Pod) -> String {
        p.metadata.uid.clone().unwrap_or_default()
    }

    #[test]
    fn a_pod_a_pod_list_and_several_documents_are_pushed_as_static_pods() {
        let dir = TempDir::new("server-shapes");
        let (src, rx) = open(&dir);
        assert_eq!(sent(&rx), [Vec::<String>::new()], "the first (empty) view");
        let json = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"j","namespace":"kube-system"},"spec":{"containers":[{"name":"c","image":"i"}]}}"#;
        let list = "kind: PodList\napiVersion: v1\nitems:\n\
                    - metadata: {name: b}\n  spec: {containers: [{name: c, image: i}]}\n\
                    - metadata: {name: a}\n  spec: {containers: [{name: c, image: i}]}\n";
        let rows: Vec<(String, Vec<&str>)> = vec![
            (pod_yaml("web", "busybox"), vec!["web-node-1"]),
            (json.to_string(), vec!["j-node-1"]),
            (format!("{json}\n{json}").replace("\"j\"", "\"k\""), vec![]),
            (list.to_string(), vec!["a-node-1", "b-node-1"]),
            (
                format!("{}---\n{list}---\n", pod_yaml("web", "busybox")),
                vec!["a-node-1", "b-node-1", "web-node-1"],
            ),
        ];
        for (body, want) in rows {
            match src.replace(body.as_bytes()) {
                Ok(pods) => {
                    assert_eq!(names(&pods), want, "{body}");
                    for p in &pods {
                        let a = p.metadata.annotations.as_ref().expect("annotations");
                        assert_eq!(a[CONFIG_SOURCE_ANNOTATION], "server");
                        assert_eq!(a[super::super::CONFIG_HASH_ANNOTATION], uid(p));
                        assert_eq!(
                            p.spec.as_ref().and_then(|s| s.node_name.as_deref()),
                            Some(NODE)
                        );
                    }
                }
                // Two JSON documents with one name: refused, naming both.
                Err(e) => {
                    assert!(want.is_empty(), "{body}: {e}");
                    assert_eq!(
                        e.to_string(),
                        "request body: document 1: pod kube-system/k is given twice (first in document 0)"
                    );
                }
            }
        }
        assert_eq!(
            sent(&rx),
            [
                vec!["web-node-1"],
                vec!["j-node-1"],
                vec!["a-node-1", "b-node-1"],
                vec!["a-node-1", "b-node-1", "web-node-1"],
            ]
        );
        assert_eq!(names(&src.pods()), ["a-node-1", "b-node-1", "web-node-1"]);
    }

    #[test]
    fn a_bad_document_refuses_the_whole_push_and_the_set_stays() {
        let dir = TempDir::new("server-bad");
        let (src, rx) = open(&dir);
        let good = format!("{}---\n{}", pod_yaml("a", "i"), pod_yaml("b", "i"));
        src.replace(good.as_bytes()).expect("good set");
        let written = std::fs::read(store(&dir)).expect("stored");
        let bad = format!(
            "{}---\nkind: Pod\nmetadata: {{name: c}}\nspec: {{containers: [{{name: c}}]}}\n",
            pod_yaml("a", "other")
        );
        for body in [
            bad.as_str(),
            "kind: Pod\nmetadata: {name: [\n",
            "kind: Service\n",
        ] {
            let e = src.replace(body.as_bytes()).expect_err("refused");
            assert!(matches!(e, ServerSourceError::Manifest(_)), "{e:?}");
            let e = src.add(body.as_bytes()).expect_err("refused");
            assert!(
                matches!(
                    e,
                    ServerSourceError::Manifest(_) | ServerSourceError::NotOne(2)
                ),
                "{e:?}"
            );
        }
        let e = src.replace(bad.as_bytes()).expect_err("refused");
        assert_eq!(
            e.to_string(),
            "request body: document 1: invalid pod: spec.containers[0].image: Required value"
        );
        assert_eq!(names(&src.pods()), ["a-node-1", "b-node-1"]);
        assert_eq!(std::fs::read(store(&dir)).expect("stored"), written);
        assert_eq!(sent(&rx).len(), 2, "the first view and the good set only");
    }

    #[test]
    fn post_adds_or_replaces_one_pod_and_delete_takes_either_name() {
        let dir = TempDir::new("server-post");
        let (src, rx) = open(&dir);
        let put = src.replace(pod_yaml("a", "i").as_bytes()).expect("put");
        let added = src.add(pod_yaml("b", "i").as_bytes()).expect("post b");
        assert!(added.created);
        assert_eq!(added.pod.metadata.name.as_deref(), Some("b-node-1"));
        // The same pod by PUT or POST: one UID.
        let again = src.add(pod_yaml("a", "i").as_bytes()).expect("post a");
        assert!(!again.created);
        assert_eq!(uid(&again.pod), uid(&put[0]));
        // A new image keeps the UID (the container is replaced, not the pod).
        let replaced = src
            .add(pod_yaml("a", "j").as_bytes())
            .expect("post a again");
        assert!(!replaced.created);
        assert_eq!(uid(&replaced.pod), uid(&put[0]));
        let two = format!("{}---\n{}", pod_yaml("c", "i"), pod_yaml("d", "i"));
        assert!(matches!(
            src.add(two.as_bytes()),
            Err(ServerSourceError::NotOne(2))
        ));
        assert!(matches!(
            src.add(b"---\n"),
            Err(ServerSourceError::NotOne(0))
        ));
        // By the name it runs under, and by the name it was pushed with.
        let gone = src.remove("default", "a-node-1").expect("delete a");
        assert_eq!(uid(&gone), uid(&put[0]));
        src.remove("default", "b").expect("delete b");
        let e = src.remove("default", "b").expect_err("gone");
        assert_eq!(e.to_string(), "no pushed pod default/b");
        assert!(matches!(
            src.remove("other", "a"),
            Err(ServerSourceError::NotFound { .. })
        ));
        assert_eq!(
            sent(&rx),
            [
                vec![],
                vec!["a-node-1"],
                vec!["a-node-1", "b-node-1"],
                vec!["a-node-1", "b-node-1"],
                vec!["b-node-1"],
                vec![],
            ]
        );
    }

    #[test]
    fn a_push_that_changes_nothing_writes_and_sends_nothing() {
        let dir = TempDir::new("server-same");
        let (src, rx) = open(&dir);
        let body = format!("{}---\n{}", pod_yaml("a", "i"), pod_yaml("b", "i"));
        src.replace(body.as_bytes()).expect("put");
        std::fs::remove_file(store(&dir)).expect("remove the file");
        src.replace(body.as_bytes()).expect("put again");
        src.add(pod_yaml("b", "i").as_bytes())
            .expect("post the same");
        assert!(!store(&dir).exists(), "nothing written");
        assert_eq!(sent(&rx).len(), 2, "the first view and one change");
    }

    #[test]
    fn the_pushed_set_is_read_back_at_start_with_the_same_uids() {
        let dir = TempDir::new("server-reopen");
        let (src, _rx) = open(&dir);
        let body = format!(
            "{}---\n{}",
            pod_yaml("a", "i"),
            "kind: Pod\nmetadata: {name: b, namespace: ops, uid: my-uid}\n\
             spec: {containers: [{name: c, image: i}]}\n"
        );
        let pushed = src.replace(body.as_bytes()).expect("put");
        let mode = std::fs::metadata(store(&dir)).expect("stat");
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
            0o600
        );
        drop(src);
        let (again, rx) = open(&dir);
        let first = rx.try_recv().expect("the stored set is the first view");
        assert_eq!(first.pods.len(), 2);
        for (a, b) in pushed.iter().zip(&first.pods) {
            assert_eq!(**a, **b, "the same pods, UIDs included");
        }
        assert_eq!(uid(&first.pods[1]), "my-uid");
        assert_eq!(names(&again.pods()), ["a-node-1", "b-node-1"]);
        // The file is a manifest as the other sources read it: a PodList of the pods
        // as pushed.
        let text = std::fs::read_to_string(store(&dir)).expect("read");
        let list: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(list["kind"], "PodList");
        assert_eq!(list["items"][0]["metadata"]["name"], "a");
    }

    #[test]
    fn a_corrupt_file_is_set_aside_and_the_source_starts_empty() {
        let bad_pod = r#"{"kind":"PodList","apiVersion":"v1","items":[{"metadata":{"name":"x"},"spec":{"containers":[{"name":"c"}]}}]}"#;
        for garbage in [
            "{\"kind\": \"PodList\", \"items\": [",
            "\u{0}\u{1}not json",
            bad_pod,
        ] {
            let dir = TempDir::new("server-corrupt");
            std::fs::create_dir_all(dir.0.join(STORE_DIR)).expect("dir");
            std::fs::write(store(&dir), garbage).expect("write garbage");
            let (src, rx) = open(&dir);
            let first = rx.try_recv().expect("a first view");
            assert!(first.pods.is_empty(), "{garbage}");
            assert!(src.pods().is_empty());
            assert!(!store(&dir).exists());
            let aside = dir.0.join(STORE_DIR).join("pods.json.corrupt");
            assert_eq!(std::fs::read_to_string(&aside).expect("set aside"), garbage);
            // The source works: a push writes a good file.
            src.replace(pod_yaml("a", "i").as_bytes()).expect("put");
            let (_again, rx) = open(&dir);
            assert_eq!(names(&rx.try_recv().expect("view").pods), ["a-node-1"]);
        }
        // The error names the file and the reason.
        let dir = TempDir::new("server-corrupt-msg");
        std::fs::create_dir_all(dir.0.join(STORE_DIR)).expect("dir");
        std::fs::write(store(&dir), bad_pod).expect("write");
        let (tx, _rx) = crossbeam_channel::bounded(1);
        let src = ServerSource::open(&dir.0, NODE, tx);
        std::fs::write(store(&dir), bad_pod).expect("write again");
        let e = src.load().expect_err("invalid");
        assert_eq!(
            e.to_string(),
            format!(
                "{}: document 0: item 0: invalid pod: spec.containers[0].image: Required value",
                store(&dir).display()
            )
        );
    }

    #[test]
    fn duplicate_names_and_uids_are_refused() {
        let dir = TempDir::new("server-dup");
        let (src, _rx) = open(&dir);
        let uid_pod = |name: &str| {
            format!(
                "kind: Pod\nmetadata: {{name: {name}, uid: u1}}\n\
                 spec: {{containers: [{{name: c, image: i}}]}}\n"
            )
        };
        let e = src
            .replace(format!("{}---\n{}", uid_pod("a"), uid_pod("b")).as_bytes())
            .expect_err("two pods, one uid");
        assert_eq!(
            e.to_string(),
            "request body: pod b-node-1_default has uid \"u1\", already the uid of pushed pod a-node-1_default"
        );
        src.replace(uid_pod("a").as_bytes()).expect("put a");
        let e = src
            .add(uid_pod("b").as_bytes())
            .expect_err("b takes a's uid");
        assert!(matches!(e, ServerSourceError::DuplicateUid { .. }), "{e}");
        // An empty namespace is `default`: one pod.
        let e = src
            .replace(
                format!(
                    "{}---\n{}",
                    pod_yaml("a", "i"),
                    pod_yaml("a", "i").replace("{name: a}", "{name: a, namespace: default}")
                )
                .as_bytes(),
            )
            .expect_err("one name twice");
        assert!(matches!(e, ServerSourceError::Duplicate { .. }), "{e}");
    }

    #[test]
    fn a_set_too_large_to_read_back_is_refused() {
        let dir = TempDir::new("server-large");
        let (src, _rx) = open(&dir);
        let big = |name: &str| {
            format!(
                "kind: Pod\nmetadata: {{name: {name}}}\n\
                 spec: {{containers: [{{name: c, image: i, args: ['{}']}}]}}\n",
                "x".repeat(2 << 20)
            )
        };
        src.add(big("a").as_bytes()).expect("one fits");
        let e = src.add(big("b").as_bytes()).expect_err("two do not");
        assert!(matches!(e, ServerSourceError::TooLarge(_)), "{e}");
        assert_eq!(names(&src.pods()), ["a-node-1"]);
    }

    #[test]
    fn a_merge_that_does_not_take_the_set_refuses_it_and_the_file_goes_back() {
        let dir = TempDir::new("server-stuck");
        let (tx, rx) = crossbeam_channel::bounded(1);
        let mut src = Arc::into_inner(ServerSource::open(&dir.0, NODE, tx)).expect("one");
        src.send_timeout = Duration::from_millis(50);
        src.turn_wait = Duration::from_millis(50);
        // The channel holds the first view: full.
        src.replace(pod_yaml("a", "i").as_bytes())
            .expect_err("not taken");
        assert!(src.pods().is_empty());
        assert_eq!(
            std::fs::read_to_string(store(&dir)).expect("read"),
            r#"{"kind":"PodList","apiVersion":"v1","items":[]}"#
        );
        // Taken once the merge drains the channel.
        drop(rx.try_recv());
        src.replace(pod_yaml("a", "i").as_bytes()).expect("taken");
        // A change waits its turn, and gives up after the wait.
        let turn = src.take_turn().expect("the turn");
        assert!(matches!(
            src.remove("default", "a"),
            Err(ServerSourceError::Busy)
        ));
        drop(turn);
        drop(rx.try_recv());
        src.remove("default", "a").expect("its turn came");
    }
}
