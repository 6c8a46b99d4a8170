//! PodConfig: pod sources and the merge of their snapshots into per-pod operations.
//!
//! Each source (`file`, `http`, `etcd`, `api`, `server`) sends full snapshots of its pods
//! ([`SourceUpdate`]); the merge turns them into ADD / UPDATE / DELETE / REMOVE /
//! RECONCILE operations and knows when every configured source has sent its first
//! snapshot ("all sources ready"). Mirrors `pkg/kubelet/config/config.go`.
//!
//! Over 800 lines: 380 of them are its unit tests, one per merge rule (order,
//! conflicts of names and UIDs, held-back pods, mirrors, refusals).

pub mod apiserver;
pub(crate) mod checkpoint;
pub mod etcd;
pub(crate) mod file;
pub mod http;
#[cfg(target_os = "linux")]
pub(crate) mod inotify;
pub mod manifest;
pub mod nodecount;
pub(crate) mod server;

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

/// A pod source, by the name upstream gives it (also the `config.source` annotation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    /// Static pods from a directory or file (`staticPodPath`).
    File,
    /// Static pods from a URL (`staticPodURL`).
    Http,
    /// Pods from an etcd prefix.
    Etcd,
    /// Pods bound to this node on the API server.
    Api,
    /// Static pods pushed over the kubelet port (`--enable-server-source`).
    Server,
}

impl Source {
    /// The source's name: `file`, `http`, `etcd`, `api`, `server`.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::File => "file",
            Source::Http => "http",
            Source::Etcd => "etcd",
            Source::Api => "api",
            Source::Server => "server",
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A full snapshot of one source's pods (upstream's `SET`). Pods are already defaulted
/// by the source (name suffix, namespace, UID, `config.hash`). Shared: a pod the merge
/// stores unchanged is the source's own copy (see [`stamp_file_pod`]), and a pod it
/// already holds is compared, not copied.
#[derive(Clone, Debug)]
pub struct SourceUpdate {
    /// Which source.
    pub source: Source,
    /// Every pod the source holds now.
    pub pods: Vec<Arc<Pod>>,
    /// The pods are the API source's checkpoints ([`checkpoint`]), sent while it cannot
    /// reach its server at start: they run, but the source is not yet ready (nothing
    /// is killed as an orphan, no delete is acted on) until its first real snapshot,
    /// which the merge compares with them as with any earlier snapshot. Ignored once
    /// the source has sent a real one.
    pub checkpoint: bool,
}

/// Stamps a pod the file source just decoded with what the merge would: its source
/// (`file`) and the time the kubelet first saw it (now; whatever the manifest wrote
/// there is overwritten, as upstream's merge does). The merge then stores the file
/// source's own copy instead of an annotated one of its own: static pods are held once.
pub(crate) fn stamp_file_pod(pod: &mut Pod, now_rfc3339: &str) {
    set_annotation(pod, CONFIG_SOURCE_ANNOTATION, Source::File.as_str());
    set_annotation(pod, CONFIG_SEEN_ANNOTATION, now_rfc3339);
}

/// Gives back the spare room a decode left in a pod's lists, for a pod the kubelet
/// keeps for its life. serde grows each list by pushes (doubling): three containers
/// sit in room for four (a `Container` is 2.1 KiB), five arguments or env entries in
/// room for eight. A list of one `Container` holds no spare room already (Rust's first
/// allocation of elements over 1 KiB is for one).
pub(crate) fn shrink(pod: &mut Pod) {
    let Some(spec) = pod.spec.as_mut() else {
        return;
    };
    for list in [Some(&mut spec.containers), spec.init_containers.as_mut()]
        .into_iter()
        .flatten()
    {
        list.shrink_to_fit();
        for c in list.iter_mut() {
            shrink_list(&mut c.env);
            shrink_list(&mut c.volume_mounts);
            shrink_list(&mut c.ports);
            shrink_list(&mut c.command);
            shrink_list(&mut c.args);
        }
    }
    shrink_list(&mut spec.ephemeral_containers);
    shrink_list(&mut spec.volumes);
    shrink_list(&mut spec.tolerations);
}

fn shrink_list<T>(list: &mut Option<Vec<T>>) {
    if let Some(l) = list {
        l.shrink_to_fit();
    }
}

/// The annotation naming the source a pod came from.
pub(crate) const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";
/// The annotation holding the time the kubelet first saw a pod.
pub(crate) const CONFIG_SEEN_ANNOTATION: &str = "kubernetes.io/config.seen";
/// The annotation holding a static pod's hash (its UID).
pub(crate) const CONFIG_HASH_ANNOTATION: &str = "kubernetes.io/config.hash";
/// The annotation marking a mirror pod.
pub(crate) const CONFIG_MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// What the merge says happened to a set of pods (upstream's `PodOperation`, without
/// `SET`, which only sources send).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodOp {
    /// New pods.
    Add,
    /// Pods whose spec, labels or annotations changed.
    Update,
    /// Pods gracefully deleted (deletionTimestamp set) at their source.
    Delete,
    /// Pods gone from their source.
    Remove,
    /// Pods whose status alone differs (API copies).
    Reconcile,
}

/// One merged operation on a set of pods from one source.
#[derive(Clone, Debug)]
pub(crate) struct PodUpdate {
    /// The operation.
    pub op: PodOp,
    /// The pods it applies to (an empty `Add` says "this source is alive"): the merge's
    /// own stored copies, shared, so a pod's spec is held once by the merge, the sync
    /// loop and the pod workers together.
    pub pods: Vec<Arc<Pod>>,
    /// The source they came from.
    pub source: Source,
}

/// The merge of every source's snapshots. Owned by the sync loop.
#[derive(Debug)]
pub(crate) struct PodConfig {
    configured: std::collections::BTreeSet<Source>,
    /// Per source: pod UID → the pod as last stored.
    pods: std::collections::BTreeMap<Source, std::collections::BTreeMap<String, Arc<Pod>>>,
    /// Per source whose last snapshot met a conflict: the pods of that snapshot it did
    /// not store (held back, refused, repeated), so that a pod held back by a conflict
    /// is admitted as soon as the other source lets go of the name (a source that
    /// polls may not send again for a long time, and one that watches only on a
    /// change). With its stored pods (and the API's mirrors) they are the snapshot
    /// again.
    held: std::collections::BTreeMap<Source, Vec<Arc<Pod>>>,
    /// Per source: the conflicts its last snapshot met, one message each.
    conflicts: std::collections::BTreeMap<Source, Vec<String>>,
    /// Per source: its pods refused by validation, one message each (pod and errors).
    invalid: std::collections::BTreeMap<Source, Vec<String>>,
    /// The mirror pods the API source holds (upstream's pod manager keeps them apart):
    /// never run, never in a conflict; the status manager matches them to their
    /// static pods by full name.
    mirrors: Vec<Arc<Pod>>,
    /// The sources whose stored pods are checkpoints, not yet a snapshot of their own.
    provisional: std::collections::BTreeSet<Source>,
}

impl PodConfig {
    /// A merge expecting snapshots from exactly these sources.
    pub(crate) fn new(configured: &[Source]) -> Self {
        PodConfig {
            configured: base::sort::set(configured.iter().copied()),
            pods: Default::default(),
            held: Default::default(),
            conflicts: Default::default(),
            invalid: Default::default(),
            mirrors: Vec::new(),
            provisional: Default::default(),
        }
    }

    /// The mirror pods the API source sent last (pods with `config.mirror`).
    pub(crate) fn mirror_pods(&self) -> &[Arc<Pod>] {
        &self.mirrors
    }

    /// True once every configured source has delivered at least one snapshot
    /// (upstream's `SeenAllSources`). Until then nothing destructive may happen.
    pub(crate) fn seen_all_sources(&self) -> bool {
        self.configured.iter().all(|s| self.is_ready(*s))
    }

    /// Whether `source` has sent a snapshot of its own (checkpoints do not count).
    fn is_ready(&self, source: Source) -> bool {
        self.pods.contains_key(&source) && !self.provisional.contains(&source)
    }

    /// The sources that have not yet sent a snapshot.
    pub(crate) fn sources_not_ready(&self) -> Vec<Source> {
        self.configured
            .iter()
            .filter(|s| !self.is_ready(**s))
            .copied()
            .collect()
    }

    /// The conflicts in force: pods held back because another source has a pod of the
    /// same name. One line each, naming the pod and both sources; empty when none.
    pub(crate) fn conflicts(&self) -> Vec<String> {
        self.conflicts.values().flatten().cloned().collect()
    }

    /// Everything held back: the conflicts and the pods refused by validation, one
    /// line each; what the sync loop keeps visible as its warning.
    pub(crate) fn held_back(&self) -> Vec<String> {
        let mut out = self.conflicts();
        out.extend(self.invalid.values().flatten().cloned());
        out
    }

    #[cfg(test)]
    /// Every pod of every source, in source then UID order.
    pub(crate) fn all_pods(&self) -> Vec<Arc<Pod>> {
        self.pods
            .values()
            .flat_map(|m| m.values().cloned())
            .collect()
    }

    /// Merges one source's snapshot; returns the operations in upstream's order:
    /// REMOVE, ADD, UPDATE, DELETE, (an empty ADD on a source's first quiet snapshot),
    /// RECONCILE. `now_rfc3339` stamps `config.seen` on pods seen for the first time.
    ///
    /// A snapshot that frees a pod name lets another source's pod of that name in at
    /// once: its operations follow this source's.
    pub(crate) fn merge(&mut self, update: SourceUpdate, now_rfc3339: &str) -> Vec<PodUpdate> {
        let source = update.source;
        if update.checkpoint && self.is_ready(source) {
            // The source has spoken for itself: its checkpoints are older news.
            return Vec::new();
        }
        let mut out = self.merge_snapshot(source, update.pods, now_rfc3339);
        if update.checkpoint {
            self.provisional.insert(source);
        } else {
            self.provisional.remove(&source);
        }
        let blocked: Vec<Source> = self
            .conflicts
            .iter()
            .filter(|(s, c)| **s != source && !c.is_empty())
            .map(|(s, _)| *s)
            .collect();
        for other in blocked {
            let pods = self.last_snapshot(other);
            out.extend(self.merge_snapshot(other, pods, now_rfc3339));
        }
        out
    }

    /// `source`'s last snapshot, put together again: the pods stored from it, the
    /// mirrors (the API source's), and the pods it held back.
    fn last_snapshot(&self, source: Source) -> Vec<Arc<Pod>> {
        let mut pods: Vec<Arc<Pod>> = self
            .pods
            .get(&source)
            .into_iter()
            .flat_map(|m| m.values().cloned())
            .collect();
        if source == Source::Api {
            pods.extend(self.mirrors.iter().cloned());
        }
        pods.extend(self.held.get(&source).into_iter().flatten().cloned());
        pods
    }

    fn merge_snapshot(
        &mut self,
        source: Source,
        pods: Vec<Arc<Pod>>,
        now_rfc3339: &str,
    ) -> Vec<PodUpdate> {
        let first_snapshot = !self.is_ready(source);
        let pods = if source == Source::Api {
            // Mirror pods are the API's copies of static pods: never run.
            let (mirrors, pods) = pods
                .into_iter()
                .partition(|p| annotation(p, CONFIG_MIRROR_ANNOTATION).is_some());
            self.mirrors = mirrors;
            pods
        } else {
            pods
        };
        let (incoming, dropped) = self.validate(source, pods);
        if self.conflicts.contains_key(&source) {
            self.held.insert(source, dropped);
        } else {
            self.held.remove(&source);
        }
        let old = self.pods.remove(&source).unwrap_or_default();

        let (mut adds, mut updates, mut deletes, mut reconciles) = (vec![], vec![], vec![], vec![]);
        let mut renamed = Vec::new();
        let mut stored = std::collections::BTreeMap::new();
        for mut pod in incoming {
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            // A UID that now names another pod (the file that held it was deleted and
            // another with the same `metadata.uid` takes it over): the old pod is
            // removed and the new one added, never the old one kept under the new
            // one's name.
            let old_pod = old
                .get(&uid)
                .filter(|existing| full_name(existing) == full_name(&pod));
            if old_pod.is_none() {
                if let Some(existing) = old.get(&uid) {
                    renamed.push(existing.clone());
                }
            }
            match old_pod {
                None => {
                    // The file source stamped its pods when it decoded them.
                    let stamped = source == Source::File
                        && annotation(&pod, CONFIG_SEEN_ANNOTATION).is_some();
                    ensure_annotation(&mut pod, CONFIG_SOURCE_ANNOTATION, source.as_str());
                    if !stamped {
                        ensure_annotation(&mut pod, CONFIG_SEEN_ANNOTATION, now_rfc3339);
                    }
                    adds.push(pod.clone());
                    stored.insert(uid, pod);
                }
                Some(existing) if Arc::ptr_eq(existing, &pod) => {
                    stored.insert(uid, pod);
                }
                Some(existing) => {
                    // What is stored of a changed pod: the source's, with the stored
                    // pod's first-seen stamp.
                    let keep = |mut pod: Arc<Pod>| {
                        ensure_annotation(&mut pod, CONFIG_SOURCE_ANNOTATION, source.as_str());
                        if let Some(seen) = annotation(existing, CONFIG_SEEN_ANNOTATION) {
                            ensure_annotation(&mut pod, CONFIG_SEEN_ANNOTATION, &seen);
                        }
                        pod
                    };
                    if semantically_changed(existing, &pod) {
                        let pod = keep(pod);
                        if pod.metadata.deletion_timestamp.is_some() {
                            deletes.push(pod.clone());
                        } else {
                            updates.push(pod.clone());
                        }
                        stored.insert(uid, pod);
                    } else if existing.status != pod.status {
                        let pod = keep(pod);
                        reconciles.push(pod.clone());
                        stored.insert(uid, pod);
                    } else {
                        stored.insert(uid, existing.clone());
                    }
                }
            }
        }
        let mut removes: Vec<Arc<Pod>> = old
            .iter()
            .filter(|(uid, _)| !stored.contains_key(*uid))
            .map(|(_, p)| p.clone())
            .collect();
        removes.extend(renamed);
        self.pods.insert(source, stored);

        let quiet = adds.is_empty() && updates.is_empty() && deletes.is_empty();
        let mut out = Vec::new();
        for (op, pods) in [
            (PodOp::Remove, removes),
            (PodOp::Add, adds),
            (PodOp::Update, updates),
            (PodOp::Delete, deletes),
        ] {
            if !pods.is_empty() {
                out.push(PodUpdate { op, pods, source });
            }
        }
        if first_snapshot && quiet {
            // Tell the sync loop this source is alive, though it has nothing to add.
            out.push(PodUpdate {
                op: PodOp::Add,
                pods: vec![],
                source,
            });
        }
        if !reconciles.is_empty() {
            out.push(PodUpdate {
                op: PodOp::Reconcile,
                pods: reconciles,
                source,
            });
        }
        out
    }

    /// Drops the pods that must not run: an invalid pod (upstream's rules, see
    /// [`crate::validation`]: the one gate every pod of every source passes before
    /// admission), a full name (`name_namespace`) repeated inside one snapshot (the
    /// later one is dropped, as upstream) or already held by another source (a
    /// conflict: the pod keeps running from the source that had it first). The source's
    /// other pods are unaffected. Returns the pods kept, and the ones dropped.
    fn validate(&mut self, source: Source, pods: Vec<Arc<Pod>>) -> (Vec<Arc<Pod>>, Vec<Arc<Pod>>) {
        let mut conflicts = Vec::new();
        let mut invalid = Vec::new();
        let mut names = std::collections::BTreeSet::new();
        let mut out = Vec::with_capacity(pods.len());
        let mut dropped = Vec::new();
        let stored = self.pods.get(&source);
        // UID -> the full name of the pod that has it in this snapshot. A UID this
        // source's stored pod has goes to that pod again, wherever it comes in the
        // snapshot: a newcomer never takes a running pod's UID.
        let mut uids: std::collections::BTreeMap<String, String> = pods
            .iter()
            .filter_map(|p| {
                let uid = p.metadata.uid.as_deref().unwrap_or_default();
                let held = stored?.get(uid)?;
                (full_name(held) == full_name(p)).then(|| (uid.to_string(), full_name(p)))
            })
            .collect();
        for pod in pods {
            let full = full_name(&pod);
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            // The very pod stored from this source's last snapshot passed already (the
            // file source sends its unchanged pods again every 20 s).
            let passed = stored
                .and_then(|m| m.get(pod.metadata.uid.as_deref().unwrap_or_default()))
                .is_some_and(|p| Arc::ptr_eq(p, &pod));
            let errs = if passed {
                None
            } else {
                crate::validation::validate_pod_create(&pod).err()
            };
            if let Some(errs) = errs {
                let msg = format!("invalid pod {full} from source {source}, ignoring it: {errs}");
                // Said once when it begins; the sync loop's warning keeps it visible.
                let known = self.invalid.get(&source).is_some_and(|m| m.contains(&msg));
                if !known {
                    log::warn!("{msg}");
                }
                invalid.push(msg);
                dropped.push(pod);
                continue;
            }
            if !names.insert(full.clone()) {
                log::warn!(
                    "Error validating pod {full} from {source} due to duplicate pod name {}, ignoring",
                    pod.metadata.name.as_deref().unwrap_or_default()
                );
                dropped.push(pod);
                continue;
            }
            match uids.get(&uid) {
                Some(holder) if *holder != full => {
                    // Pods are keyed by UID everywhere (the merge, the pod workers,
                    // the runtime's labels): two with one UID would share a sandbox.
                    log::warn!(
                        "Error validating pod {full} from {source} due to duplicate pod uid {uid} (the uid of pod {holder}), ignoring"
                    );
                    dropped.push(pod);
                    continue;
                }
                Some(_) => {}
                None => {
                    uids.insert(uid.clone(), full.clone());
                }
            }
            let other = self.pods.iter().find_map(|(s, m)| {
                if *s == source {
                    return None;
                }
                if m.values().any(|p| full_name(p) == full) {
                    return Some(format!(
                        "conflicts with the pod of the same name from source {s}"
                    ));
                }
                m.get(&uid)
                    .map(|p| format!("has the uid {uid} of pod {} from source {s}", full_name(p)))
            });
            if let Some(why) = other {
                let msg = format!(
                    "pod {full} from source {source} {why}; ignoring the one from {source}"
                );
                // Said once when it begins; the sync loop's warning keeps it visible.
                let known = self
                    .conflicts
                    .get(&source)
                    .is_some_and(|c| c.contains(&msg));
                if !known {
                    log::warn!("{msg}");
                }
                conflicts.push(msg);
                dropped.push(pod);
                continue;
            }
            out.push(pod);
        }
        if conflicts.is_empty() {
            if self.conflicts.remove(&source).is_some() {
                log::info!("pods from source {source} no longer conflict with another source");
            }
        } else {
            self.conflicts.insert(source, conflicts);
        }
        if invalid.is_empty() {
            self.invalid.remove(&source);
        } else {
            self.invalid.insert(source, invalid);
        }
        (out, dropped)
    }
}

/// `name_namespace`, the key upstream uses for a pod's full name.
pub fn full_name(pod: &Pod) -> String {
    format!(
        "{}_{}",
        pod.metadata.name.as_deref().unwrap_or_default(),
        pod.metadata.namespace.as_deref().unwrap_or_default()
    )
}

/// A pod's annotation value.
pub fn annotation(pod: &Pod, key: &str) -> Option<String> {
    pod.metadata.annotations.as_ref()?.get(key).cloned()
}

/// Sets an annotation on a shared pod, copying the pod only when the value differs.
fn ensure_annotation(pod: &mut Arc<Pod>, key: &str, value: &str) {
    if annotation(pod, key).as_deref() != Some(value) {
        set_annotation(Arc::make_mut(pod), key, value);
    }
}

fn set_annotation(pod: &mut Pod, key: &str, value: &str) {
    pod.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(key.to_string(), value.to_string());
}

/// Upstream's `checkAndUpdatePod` comparison: spec, labels, deletion timestamp and
/// grace, and annotations other than the kubelet-local ones.
fn semantically_changed(old: &Pod, new: &Pod) -> bool {
    fn user_annotations(p: &Pod) -> std::collections::BTreeMap<String, String> {
        let mut a = p.metadata.annotations.clone().unwrap_or_default();
        for k in [
            CONFIG_SOURCE_ANNOTATION,
            CONFIG_SEEN_ANNOTATION,
            CONFIG_MIRROR_ANNOTATION,
        ] {
            a.remove(k);
        }
        a
    }
    old.spec != new.spec
        || old.metadata.labels != new.metadata.labels
        || old.metadata.deletion_timestamp != new.metadata.deletion_timestamp
        || old.metadata.deletion_grace_period_seconds != new.metadata.deletion_grace_period_seconds
        || user_annotations(old) != user_annotations(new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(name: &str, uid: &str, image: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                uid: Some(uid.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    image: Some(image.into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: None,
        }
    }

    fn set(source: Source, pods: Vec<Pod>) -> SourceUpdate {
        SourceUpdate {
            source,
            pods: pods.into_iter().map(Arc::new).collect(),
            checkpoint: false,
        }
    }

    fn ops(updates: &[PodUpdate]) -> Vec<(PodOp, Vec<String>)> {
        updates
            .iter()
            .map(|u| {
                let uids = u
                    .pods
                    .iter()
                    .map(|p| p.metadata.uid.clone().unwrap_or_default())
                    .collect();
                (u.op, uids)
            })
            .collect()
    }

    #[test]
    fn first_snapshot_adds_and_stamps_source_and_seen() {
        let mut pc = PodConfig::new(&[Source::File]);
        assert!(!pc.seen_all_sources());
        let out = pc.merge(set(Source::File, vec![pod("a", "1", "x")]), "T0");
        assert_eq!(ops(&out), vec![(PodOp::Add, vec!["1".to_string()])]);
        assert_eq!(
            annotation(&out[0].pods[0], CONFIG_SOURCE_ANNOTATION).as_deref(),
            Some("file")
        );
        assert_eq!(
            annotation(&out[0].pods[0], CONFIG_SEEN_ANNOTATION).as_deref(),
            Some("T0")
        );
        assert!(pc.seen_all_sources());
    }

    #[test]
    fn a_file_pod_stamped_by_its_source_is_stored_as_the_sources_own_copy() {
        let mut pc = PodConfig::new(&[Source::File]);
        let mut p = pod("a", "1", "x");
        stamp_file_pod(&mut p, "T-decoded");
        let shared = Arc::new(p);
        let snapshot = || SourceUpdate {
            source: Source::File,
            pods: vec![shared.clone()],
            checkpoint: false,
        };
        let out = pc.merge(snapshot(), "T0");
        assert_eq!(ops(&out), vec![(PodOp::Add, vec!["1".to_string()])]);
        assert!(Arc::ptr_eq(&out[0].pods[0], &shared), "no copy of the pod");
        assert_eq!(
            annotation(&out[0].pods[0], CONFIG_SEEN_ANNOTATION).as_deref(),
            Some("T-decoded")
        );
        // The same snapshot again: nothing happens and the same copy stays.
        assert!(pc.merge(snapshot(), "T1").is_empty());
        assert!(Arc::ptr_eq(&pc.all_pods()[0], &shared));
        // A pod of another source with a seen stamp of its own is stamped by the merge.
        let mut pc = PodConfig::new(&[Source::Http]);
        let mut p = pod("b", "2", "x");
        set_annotation(&mut p, CONFIG_SEEN_ANNOTATION, "user-written");
        let out = pc.merge(set(Source::Http, vec![p]), "T2");
        assert_eq!(
            annotation(&out[0].pods[0], CONFIG_SEEN_ANNOTATION).as_deref(),
            Some("T2")
        );
    }

    #[test]
    fn checkpoints_run_but_leave_the_source_unready_until_its_own_snapshot() {
        let mut pc = PodConfig::new(&[Source::Api]);
        let checkpointed = SourceUpdate {
            checkpoint: true,
            ..set(Source::Api, vec![pod("a", "1", "x"), pod("b", "2", "x")])
        };
        let out = pc.merge(checkpointed.clone(), "T0");
        assert_eq!(ops(&out), vec![(PodOp::Add, vec!["1".into(), "2".into()])]);
        assert!(!pc.seen_all_sources());
        assert_eq!(pc.sources_not_ready(), vec![Source::Api]);

        // The API server answers with a still there, unchanged, and b deleted: a is
        // kept as it runs, b removed, and the source is ready (its first snapshot of
        // its own says so with an empty ADD).
        let out = pc.merge(set(Source::Api, vec![pod("a", "1", "x")]), "T1");
        assert_eq!(
            ops(&out),
            vec![(PodOp::Remove, vec!["2".into()]), (PodOp::Add, vec![])]
        );
        assert!(pc.seen_all_sources());
        assert_eq!(
            annotation(&pc.all_pods()[0], CONFIG_SEEN_ANNOTATION).as_deref(),
            Some("T0")
        );

        // Checkpoints after the source has spoken are ignored.
        assert!(pc.merge(checkpointed, "T2").is_empty());
        assert!(pc.seen_all_sources());
        assert_eq!(pc.all_pods().len(), 1);
    }

    #[test]
    fn a_quiet_first_snapshot_after_checkpoints_still_says_the_source_is_alive() {
        let mut pc = PodConfig::new(&[Source::Api]);
        let checkpointed = SourceUpdate {
            checkpoint: true,
            ..set(Source::Api, vec![pod("a", "1", "x")])
        };
        pc.merge(checkpointed, "T0");
        let out = pc.merge(set(Source::Api, vec![pod("a", "1", "x")]), "T1");
        assert_eq!(ops(&out), vec![(PodOp::Add, vec![])]);
        assert!(pc.seen_all_sources());
    }

    #[test]
    fn empty_first_snapshot_sends_an_empty_add() {
        let mut pc = PodConfig::new(&[Source::File, Source::Http]);
        let out = pc.merge(set(Source::File, vec![]), "T0");
        assert_eq!(ops(&out), vec![(PodOp::Add, vec![])]);
        assert!(!pc.seen_all_sources());
        assert_eq!(pc.sources_not_ready(), vec![Source::Http]);
        // The second empty snapshot says nothing.
        assert!(pc.merge(set(Source::File, vec![]), "T1").is_empty());
    }

    #[test]
    fn same_snapshot_again_is_a_no_op_and_keeps_seen() {
        let mut pc = PodConfig::new(&[Source::File]);
        pc.merge(set(Source::File, vec![pod("a", "1", "x")]), "T0");
        assert!(pc
            .merge(set(Source::File, vec![pod("a", "1", "x")]), "T1")
            .is_empty());
        let all = pc.all_pods();
        assert_eq!(
            annotation(&all[0], CONFIG_SEEN_ANNOTATION).as_deref(),
            Some("T0")
        );
    }

    #[test]
    fn changes_are_classified_in_upstream_order() {
        let mut pc = PodConfig::new(&[Source::File]);
        pc.merge(
            set(
                Source::File,
                vec![pod("a", "1", "x"), pod("b", "2", "x"), pod("c", "3", "x")],
            ),
            "T0",
        );
        let mut deleted = pod("c", "3", "x");
        deleted.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        let out = pc.merge(
            set(
                Source::File,
                vec![pod("b", "2", "y"), deleted, pod("d", "4", "x")],
            ),
            "T1",
        );
        assert_eq!(
            ops(&out),
            vec![
                (PodOp::Remove, vec!["1".to_string()]),
                (PodOp::Add, vec!["4".to_string()]),
                (PodOp::Update, vec!["2".to_string()]),
                (PodOp::Delete, vec!["3".to_string()]),
            ]
        );
    }

    #[test]
    fn status_only_change_is_a_reconcile() {
        let mut pc = PodConfig::new(&[Source::Api]);
        pc.merge(set(Source::Api, vec![pod("a", "1", "x")]), "T0");
        let mut p = pod("a", "1", "x");
        p.status = Some(PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        });
        let out = pc.merge(set(Source::Api, vec![p]), "T1");
        assert_eq!(ops(&out), vec![(PodOp::Reconcile, vec!["1".to_string()])]);
    }

    #[test]
    fn kubelet_local_annotations_do_not_count_as_changes() {
        let mut pc = PodConfig::new(&[Source::File]);
        pc.merge(set(Source::File, vec![pod("a", "1", "x")]), "T0");
        let mut p = pod("a", "1", "x");
        set_annotation(&mut p, CONFIG_SEEN_ANNOTATION, "other");
        assert!(pc.merge(set(Source::File, vec![p]), "T1").is_empty());
        let mut p = pod("a", "1", "x");
        set_annotation(&mut p, "user/key", "v");
        let out = pc.merge(set(Source::File, vec![p]), "T2");
        assert_eq!(ops(&out), vec![(PodOp::Update, vec!["1".to_string()])]);
    }

    #[test]
    fn duplicate_names_in_one_source_keep_the_first() {
        let mut pc = PodConfig::new(&[Source::File]);
        let out = pc.merge(
            set(Source::File, vec![pod("a", "1", "x"), pod("a", "2", "x")]),
            "T0",
        );
        assert_eq!(ops(&out), vec![(PodOp::Add, vec!["1".to_string()])]);
    }

    #[test]
    fn a_uid_held_by_another_pod_is_refused_and_the_holder_keeps_running() {
        let mut pc = PodConfig::new(&[Source::Http]);
        let names = |out: &[PodUpdate]| -> Vec<(PodOp, Vec<String>)> {
            out.iter()
                .map(|u| (u.op, u.pods.iter().map(|p| full_name(p)).collect()))
                .collect()
        };
        // Two pods with one UID in one snapshot: the first runs.
        let out = pc.merge(
            set(Source::Http, vec![pod("m", "1", "x"), pod("a", "1", "x")]),
            "T0",
        );
        assert_eq!(names(&out), [(PodOp::Add, vec!["m_default".to_string()])]);
        // A newcomer ahead of the running pod in the snapshot does not take its UID.
        let snapshot = vec![pod("a", "1", "x"), pod("m", "1", "x"), pod("z", "1", "y")];
        assert!(pc.merge(set(Source::Http, snapshot), "T1").is_empty());
        assert_eq!(
            names(&[PodUpdate {
                op: PodOp::Add,
                pods: pc.all_pods(),
                source: Source::Http
            }]),
            [(PodOp::Add, vec!["m_default".to_string()])]
        );
        // The holder goes and another pod brings its UID: the old pod is removed and
        // the new one added, not the old one kept under the new one's name.
        let out = pc.merge(set(Source::Http, vec![pod("a", "1", "x")]), "T2");
        assert_eq!(
            names(&out),
            [
                (PodOp::Remove, vec!["m_default".to_string()]),
                (PodOp::Add, vec!["a_default".to_string()]),
            ]
        );
    }

    #[test]
    fn a_uid_another_source_holds_is_a_conflict() {
        let mut pc = PodConfig::new(&[Source::File, Source::Http]);
        pc.merge(set(Source::File, vec![pod("a", "1", "x")]), "T0");
        let out = pc.merge(set(Source::Http, vec![pod("b", "1", "x")]), "T1");
        assert_eq!(ops(&out), vec![(PodOp::Add, vec![])]);
        assert_eq!(
            pc.conflicts(),
            ["pod b_default from source http has the uid 1 of pod a_default from source file; ignoring the one from http"]
        );
        // The file lets go: the http pod runs.
        let out = pc.merge(set(Source::File, vec![]), "T2");
        assert_eq!(
            ops(&out),
            vec![
                (PodOp::Remove, vec!["1".to_string()]),
                (PodOp::Add, vec!["1".to_string()])
            ]
        );
        assert_eq!(out[1].source, Source::Http);
    }

    #[test]
    fn same_name_from_two_sources_is_a_conflict_and_runs_once() {
        let mut pc = PodConfig::new(&[Source::File, Source::Http]);
        pc.merge(set(Source::File, vec![pod("a", "1", "x")]), "T0");
        let out = pc.merge(set(Source::Http, vec![pod("a", "9", "x")]), "T1");
        assert_eq!(ops(&out), vec![(PodOp::Add, vec![])]);
        assert_eq!(pc.all_pods().len(), 1);
        assert!(pc.seen_all_sources());
        assert_eq!(
            pc.conflicts(),
            ["pod a_default from source http conflicts with the pod of the same name from source file; ignoring the one from http"]
        );
    }

    #[test]
    fn a_held_back_pod_is_admitted_when_the_other_source_lets_go() {
        let mut pc = PodConfig::new(&[Source::File, Source::Api]);
        pc.merge(set(Source::File, vec![pod("a", "1", "x")]), "T0");
        assert_eq!(
            ops(&pc.merge(set(Source::Api, vec![pod("a", "9", "x")]), "T1")),
            vec![(PodOp::Add, vec![])]
        );
        // The pod moves: the file lets go, and the API's pod runs without the API
        // source having to send again.
        let out = pc.merge(set(Source::File, vec![]), "T2");
        assert_eq!(
            ops(&out),
            vec![
                (PodOp::Remove, vec!["1".to_string()]),
                (PodOp::Add, vec!["9".to_string()])
            ]
        );
        assert_eq!(out[1].source, Source::Api);
        assert!(pc.conflicts().is_empty());
        assert_eq!(
            annotation(&pc.all_pods()[0], CONFIG_SOURCE_ANNOTATION).as_deref(),
            Some("api")
        );
    }

    #[test]
    fn a_held_back_pod_is_admitted_with_its_sources_other_pods_mirrors_and_refusals_kept() {
        let mut pc = PodConfig::new(&[Source::File, Source::Api]);
        pc.merge(set(Source::File, vec![pod("a", "1", "x")]), "T0");
        let mut mirror = pod("web-node1", "m1", "x");
        set_annotation(&mut mirror, CONFIG_MIRROR_ANNOTATION, "s1");
        let mut bad = pod("bad", "3", "x");
        if let Some(spec) = bad.spec.as_mut() {
            spec.containers[0].name = "Not_A_Name".into();
        }
        let out = pc.merge(
            set(
                Source::Api,
                vec![pod("a", "9", "x"), pod("db", "a1", "y"), mirror, bad],
            ),
            "T1",
        );
        assert_eq!(ops(&out), vec![(PodOp::Add, vec!["a1".to_string()])]);
        assert_eq!(pc.held_back().len(), 2, "{:?}", pc.held_back());
        // The file lets go: the held-back pod is added, and nothing else of the API's
        // last snapshot changes (its other pod, its mirror, its refusal).
        let out = pc.merge(set(Source::File, vec![]), "T2");
        assert_eq!(
            ops(&out),
            vec![
                (PodOp::Remove, vec!["1".to_string()]),
                (PodOp::Add, vec!["9".to_string()])
            ]
        );
        assert_eq!(pc.mirror_pods().len(), 1);
        let held = pc.held_back();
        assert_eq!(held.len(), 1, "{held:?}");
        assert!(held[0].starts_with("invalid pod bad_default"), "{held:?}");
        let seen: Vec<_> = pc
            .all_pods()
            .iter()
            .map(|p| annotation(p, CONFIG_SEEN_ANNOTATION))
            .collect();
        // UID order: "9" (first seen when admitted), then "a1" (seen at T1).
        assert_eq!(seen, [Some("T2".to_string()), Some("T1".to_string())]);
    }

    #[test]
    fn an_invalid_pod_is_refused_and_the_sources_other_pods_run() {
        let mut pc = PodConfig::new(&[Source::Api]);
        let mut bad = pod("bad", "2", "x");
        if let Some(spec) = bad.spec.as_mut() {
            spec.volumes = Some(vec![k8s_openapi::api::core::v1::Volume {
                name: "../../x".into(),
                empty_dir: Some(Default::default()),
                ..Default::default()
            }]);
        }
        let out = pc.merge(
            set(Source::Api, vec![pod("a", "1", "x"), bad.clone()]),
            "T0",
        );
        assert_eq!(ops(&out), vec![(PodOp::Add, vec!["1".to_string()])]);
        let held = pc.held_back();
        assert_eq!(held.len(), 1);
        assert!(
            held[0].starts_with("invalid pod bad_default from source api, ignoring it: spec.volumes[0].name: Invalid value: \"../../x\": a lowercase RFC 1123 label"),
            "{held:?}"
        );
        // Fixed at the source: admitted, and the warning ends.
        let out = pc.merge(
            set(Source::Api, vec![pod("a", "1", "x"), pod("bad", "2", "x")]),
            "T1",
        );
        assert_eq!(ops(&out), vec![(PodOp::Add, vec!["2".to_string()])]);
        assert!(pc.held_back().is_empty());
    }

    #[test]
    fn mirror_pods_from_the_api_are_kept_apart_and_never_run_nor_conflict() {
        let mut pc = PodConfig::new(&[Source::File, Source::Api]);
        let out = pc.merge(set(Source::File, vec![pod("web-node1", "s1", "x")]), "T0");
        assert_eq!(ops(&out), vec![(PodOp::Add, vec!["s1".to_string()])]);
        let mut mirror = pod("web-node1", "m1", "x");
        set_annotation(&mut mirror, CONFIG_MIRROR_ANNOTATION, "s1");
        let out = pc.merge(
            set(Source::Api, vec![mirror.clone(), pod("db", "a1", "x")]),
            "T1",
        );
        assert_eq!(ops(&out), vec![(PodOp::Add, vec!["a1".to_string()])]);
        assert!(pc.held_back().is_empty(), "a mirror is no name conflict");
        assert_eq!(pc.mirror_pods().len(), 1);
        assert_eq!(pc.mirror_pods()[0].metadata.uid.as_deref(), Some("m1"));
        // The mirror goes: nothing is removed from the pods that run.
        let out = pc.merge(set(Source::Api, vec![pod("db", "a1", "x")]), "T2");
        assert!(ops(&out).is_empty(), "{:?}", ops(&out));
        assert!(pc.mirror_pods().is_empty());
    }
}
