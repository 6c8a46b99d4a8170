//! Mirror pods (upstream `pkg/kubelet/pod/mirror_client.go` and the pod manager's
//! mirror bookkeeping), the pure part: which mirror pods to create and delete so that
//! every static pod (file, URL, etcd) has exactly one current mirror on the API
//! server, and the mirror pod object itself. The status manager carries the decisions
//! out (see its module docs for why there and not in the pod workers).
//!
//! A mirror belongs to the static pod of the same full name; it is current while its
//! `kubernetes.io/config.mirror` equals the static pod's `kubernetes.io/config.hash`
//! and it is not being deleted. A stale one is deleted (grace 0, UID precondition) and
//! a new one created; one whose static pod is gone is deleted once every source has
//! spoken (so a restart never deletes the mirror of a pod its source has not sent yet).
//!
//! rkubelet's static pod hash leaves `spec.containers` out (an edited container is
//! replaced alone, see ARCHITECTURE.md), so the hash alone would keep a mirror with an
//! old container spec: each mirror also carries [`MIRROR_SPEC_ANNOTATION`], a digest of
//! the spec it copied, and one whose digest differs is stale too.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::podconfig::{annotation, full_name, CONFIG_HASH_ANNOTATION, CONFIG_MIRROR_ANNOTATION};

/// The annotation holding the SHA-256 (first 16 hex digits) of the spec a mirror
/// copied.
pub(crate) const MIRROR_SPEC_ANNOTATION: &str = "rkubelet.io/mirror-spec-hash";

/// The digest of a static pod's spec, as [`MIRROR_SPEC_ANNOTATION`] holds it.
pub(crate) fn spec_hash(pod: &Pod) -> String {
    let json = serde_json::to_vec(&pod.spec).unwrap_or_default();
    let digest = ring::digest::digest(&ring::digest::SHA256, &json);
    digest
        .as_ref()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Whether mirror `m` is a current copy of the static pod whose hash and spec digest
/// these are.
fn is_current(m: &Pod, hash: &str, spec: &str) -> bool {
    m.metadata.deletion_timestamp.is_none()
        && annotation(m, CONFIG_MIRROR_ANNOTATION).as_deref() == Some(hash)
        && annotation(m, MIRROR_SPEC_ANNOTATION).as_deref() == Some(spec)
}

/// One thing to do on the API server.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum MirrorAction {
    /// Create the mirror of this static pod.
    Create(Arc<Pod>),
    /// Delete this mirror pod (grace 0, its UID as precondition).
    Delete {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// Its UID.
        uid: String,
    },
}

#[cfg(test)]
/// True for a pod that is a mirror (upstream `IsMirrorPod`).
pub(crate) fn is_mirror_pod(pod: &Pod) -> bool {
    annotation(pod, CONFIG_MIRROR_ANNOTATION).is_some()
}

/// The static pod's hash (upstream `getHashFromMirrorPod`'s counterpart: the
/// `config.hash` annotation, else its UID).
pub(crate) fn static_hash(pod: &Pod) -> String {
    annotation(pod, CONFIG_HASH_ANNOTATION)
        .or_else(|| pod.metadata.uid.clone())
        .unwrap_or_default()
}

/// The mirror of `static_pod` that is current, if any (upstream
/// `IsMirrorPodOf` and no deletion timestamp).
pub(crate) fn current_mirror<'a>(
    static_pod: &Pod,
    mirrors: &'a [Arc<Pod>],
) -> Option<&'a Arc<Pod>> {
    let full = full_name(static_pod);
    let (hash, spec) = (static_hash(static_pod), spec_hash(static_pod));
    mirrors
        .iter()
        .find(|m| full_name(m) == full && is_current(m, &hash, &spec))
}

fn delete(m: &Pod) -> MirrorAction {
    MirrorAction::Delete {
        namespace: m.metadata.namespace.clone().unwrap_or_default(),
        name: m.metadata.name.clone().unwrap_or_default(),
        uid: m.metadata.uid.clone().unwrap_or_default(),
    }
}

/// What to do so that every static pod in `pods` has one current mirror among
/// `mirrors` and no mirror is left without its static pod (upstream `SyncPod`'s mirror
/// part and `HandlePodCleanups`' `deleteOrphanedMirrorPods`). Deletes come before the
/// create of the same name.
pub(crate) fn mirror_actions(
    pods: &[Arc<Pod>],
    mirrors: &[Arc<Pod>],
    sources_ready: bool,
) -> Vec<MirrorAction> {
    let mut by_name: BTreeMap<String, Vec<&Arc<Pod>>> = BTreeMap::new();
    for m in mirrors {
        by_name.entry(full_name(m)).or_default().push(m);
    }
    let mut out = Vec::new();
    let mut statics = std::collections::BTreeSet::new();
    for pod in pods.iter().filter(|p| runtime::container::is_static_pod(p)) {
        let full = full_name(pod);
        statics.insert(full.clone());
        let (hash, spec) = (static_hash(pod), spec_hash(pod));
        let mine = by_name.get(&full).map(Vec::as_slice).unwrap_or_default();
        let mut current = false;
        for m in mine {
            if is_current(m, &hash, &spec) {
                current = true;
            } else {
                out.push(delete(m));
            }
        }
        if !current {
            out.push(MirrorAction::Create(pod.clone()));
        }
    }
    if sources_ready {
        for (full, ms) in &by_name {
            if !statics.contains(full) {
                out.extend(ms.iter().map(|m| delete(m)));
            }
        }
    }
    out
}

/// The mirror pod of `static_pod` (upstream `CreateMirrorPod`): its name, namespace,
/// labels, annotations with `config.mirror` = its hash, its spec bound to this node,
/// owned by the Node (apiVersion v1, kind Node, its name and UID, controller).
pub(crate) fn mirror_pod(static_pod: &Pod, node_name: &str, node_uid: &str) -> Pod {
    let mut annotations = static_pod.metadata.annotations.clone().unwrap_or_default();
    annotations.insert(CONFIG_MIRROR_ANNOTATION.into(), static_hash(static_pod));
    annotations.insert(MIRROR_SPEC_ANNOTATION.into(), spec_hash(static_pod));
    let mut spec = static_pod.spec.clone().unwrap_or_default();
    spec.node_name = Some(node_name.to_string());
    Pod {
        metadata: ObjectMeta {
            name: static_pod.metadata.name.clone(),
            namespace: static_pod.metadata.namespace.clone(),
            labels: static_pod.metadata.labels.clone(),
            annotations: Some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: node_name.to_string(),
                uid: node_uid.to_string(),
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, source: &str, uid: &str, ann: &[(&str, &str)]) -> Arc<Pod> {
        let mut a: BTreeMap<String, String> = ann
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        a.insert("kubernetes.io/config.source".into(), source.into());
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                uid: Some(uid.into()),
                annotations: Some(a),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    fn static_pod(name: &str, hash: &str) -> Arc<Pod> {
        pod(name, "file", hash, &[(CONFIG_HASH_ANNOTATION, hash)])
    }

    fn mirror(name: &str, uid: &str, hash: &str) -> Arc<Pod> {
        let spec = spec_hash(&static_pod(name, hash));
        pod(
            name,
            "api",
            uid,
            &[
                (CONFIG_MIRROR_ANNOTATION, hash),
                (MIRROR_SPEC_ANNOTATION, &spec),
            ],
        )
    }

    fn del(name: &str, uid: &str) -> MirrorAction {
        MirrorAction::Delete {
            namespace: "default".into(),
            name: name.into(),
            uid: uid.into(),
        }
    }

    #[test]
    fn a_static_pod_without_a_mirror_gets_one() {
        let s = static_pod("web-node1", "h1");
        assert_eq!(
            mirror_actions(std::slice::from_ref(&s), &[], true),
            [MirrorAction::Create(s)]
        );
    }

    #[test]
    fn a_current_mirror_is_left_alone_and_api_pods_get_none() {
        let s = static_pod("web-node1", "h1");
        let api = pod("db", "api", "u9", &[]);
        let m = mirror("web-node1", "m1", "h1");
        assert_eq!(
            mirror_actions(&[s.clone(), api], std::slice::from_ref(&m), true),
            []
        );
        assert_eq!(current_mirror(&s, std::slice::from_ref(&m)), Some(&m));
    }

    #[test]
    fn a_stale_hash_or_a_deleted_mirror_is_deleted_then_recreated() {
        let s = static_pod("web-node1", "h2");
        let m = mirror("web-node1", "m1", "h1");
        assert_eq!(
            mirror_actions(std::slice::from_ref(&s), std::slice::from_ref(&m), true),
            [del("web-node1", "m1"), MirrorAction::Create(s.clone())]
        );
        assert_eq!(current_mirror(&s, &[m]), None);
        let mut deleting = (*mirror("web-node1", "m2", "h2")).clone();
        deleting.metadata.deletion_timestamp =
            Some(base::time::k8s_time(std::time::SystemTime::now()));
        assert_eq!(
            mirror_actions(std::slice::from_ref(&s), &[Arc::new(deleting)], true),
            [del("web-node1", "m2"), MirrorAction::Create(s)]
        );
    }

    #[test]
    fn a_mirror_of_an_older_spec_under_the_same_hash_is_recreated() {
        let mut edited = (*static_pod("web-node1", "h1")).clone();
        edited.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            containers: vec![k8s_openapi::api::core::v1::Container {
                name: "c".into(),
                image: Some("new:2".into()),
                ..Default::default()
            }],
            ..Default::default()
        });
        let edited = Arc::new(edited);
        let m = mirror("web-node1", "m1", "h1");
        assert_eq!(
            mirror_actions(
                std::slice::from_ref(&edited),
                std::slice::from_ref(&m),
                true
            ),
            [del("web-node1", "m1"), MirrorAction::Create(edited.clone())]
        );
        let fresh = mirror_pod(&edited, "node1", "n");
        assert_eq!(
            annotation(&fresh, MIRROR_SPEC_ANNOTATION),
            Some(spec_hash(&edited))
        );
    }

    #[test]
    fn an_orphaned_mirror_is_deleted_once_every_source_has_spoken() {
        let m = mirror("gone-node1", "m1", "h1");
        assert_eq!(mirror_actions(&[], std::slice::from_ref(&m), false), []);
        assert_eq!(mirror_actions(&[], &[m], true), [del("gone-node1", "m1")]);
    }

    #[test]
    fn the_mirror_pod_is_owned_by_the_node_and_carries_the_hash() {
        let mut s = (*static_pod("web-node1", "h1")).clone();
        s.spec = Some(Default::default());
        s.status = Some(Default::default());
        let m = mirror_pod(&s, "node1", "node-uid");
        assert!(is_mirror_pod(&m));
        assert_eq!(
            annotation(&m, CONFIG_MIRROR_ANNOTATION).as_deref(),
            Some("h1")
        );
        assert_eq!(m.metadata.uid, None);
        assert_eq!(m.status, None);
        assert_eq!(
            m.spec.as_ref().and_then(|s| s.node_name.as_deref()),
            Some("node1")
        );
        let owner = &m.metadata.owner_references.as_ref().expect("owner")[0];
        assert_eq!(
            (
                owner.api_version.as_str(),
                owner.kind.as_str(),
                owner.name.as_str(),
                owner.uid.as_str(),
                owner.controller
            ),
            ("v1", "Node", "node1", "node-uid", Some(true))
        );
    }
}
