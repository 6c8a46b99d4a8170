//! Checkpoints of the API server's pods (`checkpointApiPods`), so that a node that
//! restarts while its API server is out of reach runs its pods again: rkubelet's own
//! (upstream's kubelet needs the API server to start an API pod; its alpha
//! `--bootstrap-checkpoint-path` did this for annotated pods only and was removed).
//!
//! The API source ([`super::apiserver`]) keeps one file per pod bound to this node,
//! `<root-dir>/pod-checkpoints/<uid>.json`: the pod as the API server sent it, less its
//! status, `resourceVersion` and `managedFields`, which change all the time without
//! changing what runs. A file is written ([`base::fsutil::write_atomic`]) only when
//! that content changes (a new pod, a new spec, labels or annotations), so the status
//! updates that make up most of a watch write nothing; it is removed when the pod is
//! deleted, leaves the node, is being deleted or is finished (phase `Succeeded` or
//! `Failed` on the API server). Mirror pods are never checkpointed.
//!
//! At start the files are read ([`Checkpoints::open`]); a file that cannot be read or
//! decoded is logged by name, removed, and the others are kept. The API source sends
//! the pods read as a provisional snapshot when its first list fails (see
//! [`super::SourceUpdate::checkpoint`]).

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::manifest::MAX_MANIFEST_BYTES;
use super::{annotation, CONFIG_MIRROR_ANNOTATION};
use base::fsutil;

/// The directory under the root dir that holds the checkpoints.
pub(crate) const CHECKPOINT_DIR: &str = "pod-checkpoints";

/// The checkpoint files and what each holds.
#[derive(Debug)]
pub(crate) struct Checkpoints {
    dir: PathBuf,
    /// Pod UID → the hash of the content its file holds.
    written: BTreeMap<String, u64>,
}

/// What a pod's checkpoint holds: the pod less what changes without changing what
/// runs. `None` for a pod that is not checkpointed.
fn content(pod: &Pod) -> Option<Pod> {
    let finished = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Succeeded" || p == "Failed");
    if finished
        || pod.metadata.deletion_timestamp.is_some()
        || pod.metadata.uid.as_deref().unwrap_or("").is_empty()
        || annotation(pod, CONFIG_MIRROR_ANNOTATION).is_some()
    {
        return None;
    }
    let mut pod = pod.clone();
    pod.status = None;
    pod.metadata.resource_version = None;
    pod.metadata.managed_fields = None;
    Some(pod)
}

/// The encoded checkpoint and its hash (stable within the process, which is all the
/// comparison needs: the files read at start are hashed again).
fn encode(pod: &Pod) -> Result<(Vec<u8>, u64), serde_json::Error> {
    let bytes = serde_json::to_vec(pod)?;
    let mut h = DefaultHasher::new();
    h.write(&bytes);
    Ok((bytes, h.finish()))
}

/// A UID usable as a file name (the API server's are UUIDs).
fn safe_uid(uid: &str) -> bool {
    !uid.is_empty()
        && uid.len() <= 128
        && uid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl Checkpoints {
    /// The checkpoints under `root_dir`, and the pods they hold (in UID order). A file
    /// that cannot be used is logged and removed.
    pub(crate) fn open(root_dir: &Path) -> (Checkpoints, Vec<Arc<Pod>>) {
        let dir = root_dir.join(CHECKPOINT_DIR);
        let mut store = Checkpoints {
            dir,
            written: BTreeMap::new(),
        };
        let mut pods = Vec::new();
        let entries = match std::fs::read_dir(&store.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (store, pods),
            Err(e) => {
                log::error!(
                    "pod checkpoints: cannot read {}: {e}; none are run",
                    store.dir.display()
                );
                return (store, pods);
            }
        };
        let mut paths: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        base::sort::sort(&mut paths);
        for path in paths {
            match read(&path) {
                Ok((pod, hash)) => {
                    let uid = pod.metadata.uid.clone().unwrap_or_default();
                    store.written.insert(uid, hash);
                    pods.push(Arc::new(pod));
                }
                Err(why) => {
                    log::error!(
                        "pod checkpoint {}: {why}; removed, the other checkpoints are kept",
                        path.display()
                    );
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        (store, pods)
    }

    /// Makes the checkpoints those of `pods` (the API source's whole view): writes the
    /// new and changed, removes the rest.
    pub(crate) fn sync_all(&mut self, pods: &BTreeMap<String, Arc<Pod>>) {
        let gone: Vec<String> = self
            .written
            .keys()
            .filter(|uid| !pods.contains_key(*uid))
            .cloned()
            .collect();
        for uid in gone {
            self.update(&uid, None);
        }
        for (uid, pod) in pods {
            self.update(uid, Some(pod));
        }
    }

    /// `uid`'s pod is now `pod` (`None`: deleted or gone from the node).
    pub(crate) fn update(&mut self, uid: &str, pod: Option<&Pod>) {
        let Some(pod) = pod.and_then(content) else {
            if self.written.remove(uid).is_some() {
                let path = self.path(uid);
                match std::fs::remove_file(&path) {
                    Ok(()) => log::debug!("removed pod checkpoint {}", path.display()),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => log::warn!("cannot remove pod checkpoint {}: {e}", path.display()),
                }
            }
            return;
        };
        if !safe_uid(uid) {
            log::warn!("pod {uid:?}: a UID that cannot name a file is not checkpointed");
            return;
        }
        let (bytes, hash) = match encode(&pod) {
            Ok(e) => e,
            Err(e) => {
                log::warn!("pod {uid}: cannot encode its checkpoint: {e}");
                return;
            }
        };
        if self.written.get(uid) == Some(&hash) {
            return;
        }
        let path = self.path(uid);
        let written = std::fs::create_dir_all(&self.dir)
            .and_then(|()| fsutil::write_atomic(&path, &bytes, 0o600));
        match written {
            Ok(()) => {
                log::debug!("wrote pod checkpoint {}", path.display());
                self.written.insert(uid.to_string(), hash);
            }
            Err(e) => {
                // Tried again on the pod's next change or list.
                log::warn!("cannot write pod checkpoint {}: {e}", path.display());
                self.written.remove(uid);
            }
        }
    }

    fn path(&self, uid: &str) -> PathBuf {
        self.dir.join(format!("{uid}.json"))
    }
}

/// One checkpoint file: the pod and the hash of its content.
fn read(path: &Path) -> Result<(Pod, u64), String> {
    let (bytes, _) = fsutil::read_regular(path, MAX_MANIFEST_BYTES).map_err(|e| e.to_string())?;
    let pod: Pod = serde_json::from_slice(&bytes).map_err(|e| format!("not a pod: {e}"))?;
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let named = path.file_stem().and_then(|s| s.to_str()) == Some(uid.as_str());
    if !named {
        return Err(format!("its pod's UID is {uid:?}, not the file's name"));
    }
    let pod = content(&pod).ok_or("its pod is finished, being deleted or a mirror pod")?;
    let (_, hash) = encode(&pod).map_err(|e| e.to_string())?;
    Ok((pod, hash))
}

#[cfg(test)]
mod tests {
    use super::*;
    use base::testutil::TempDir;
    use k8s_openapi::api::core::v1::{Container, PodSpec, PodStatus};

    fn pod(uid: &str, image: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(format!("p-{uid}"));
        p.metadata.namespace = Some("default".into());
        p.metadata.uid = Some(uid.into());
        p.metadata.resource_version = Some("1".into());
        p.spec = Some(PodSpec {
            node_name: Some("n".into()),
            containers: vec![Container {
                name: "c".into(),
                image: Some(image.into()),
                ..Default::default()
            }],
            ..Default::default()
        });
        p.status = Some(PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        });
        p
    }

    fn mtime(p: &Path) -> std::time::SystemTime {
        std::fs::metadata(p)
            .and_then(|m| m.modified())
            .expect("checkpoint mtime")
    }

    #[test]
    fn a_file_is_written_only_when_what_runs_changes() {
        let root = TempDir::new("checkpoint");
        let (mut cp, pods) = Checkpoints::open(&root.0);
        assert!(pods.is_empty());
        let mut p = pod("u1", "busybox");
        cp.update("u1", Some(&p));
        let file = root.0.join(CHECKPOINT_DIR).join("u1.json");
        let first = mtime(&file);
        let on_disk: Pod =
            serde_json::from_slice(&std::fs::read(&file).expect("read")).expect("decode");
        assert!(on_disk.status.is_none() && on_disk.metadata.resource_version.is_none());

        // A status update and a new resourceVersion: nothing written.
        std::thread::sleep(std::time::Duration::from_millis(20));
        p.metadata.resource_version = Some("2".into());
        p.status.as_mut().expect("status").pod_ip = Some("10.1.1.1".into());
        cp.update("u1", Some(&p));
        assert_eq!(mtime(&file), first);

        // A new image: written.
        p.spec.as_mut().expect("spec").containers[0].image = Some("nginx".into());
        cp.update("u1", Some(&p));
        let on_disk: Pod =
            serde_json::from_slice(&std::fs::read(&file).expect("read")).expect("decode");
        assert_eq!(
            on_disk.spec.expect("spec").containers[0].image.as_deref(),
            Some("nginx")
        );

        // Read back by a new process: the same pod, and the same content writes nothing.
        let (mut again, pods) = Checkpoints::open(&root.0);
        assert_eq!(pods.len(), 1);
        assert_eq!(pods[0].metadata.uid.as_deref(), Some("u1"));
        let before = mtime(&file);
        std::thread::sleep(std::time::Duration::from_millis(20));
        again.update("u1", Some(&p));
        assert_eq!(mtime(&file), before);
    }

    #[test]
    fn finished_deleted_and_mirror_pods_lose_their_checkpoint() {
        let root = TempDir::new("checkpoint");
        let (mut cp, _) = Checkpoints::open(&root.0);
        let dir = root.0.join(CHECKPOINT_DIR);
        let mut all = BTreeMap::new();
        for uid in ["a", "b", "c", "d"] {
            all.insert(uid.to_string(), Arc::new(pod(uid, "busybox")));
        }
        cp.sync_all(&all);
        assert_eq!(std::fs::read_dir(&dir).expect("dir").count(), 4);

        let mut done = pod("a", "busybox");
        done.status.as_mut().expect("status").phase = Some("Succeeded".into());
        cp.update("a", Some(&done));
        let mut deleting = pod("b", "busybox");
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2024-01-01T00:00:00Z".parse().expect("time"),
            ));
        cp.update("b", Some(&deleting));
        cp.update("c", None);
        let mut mirror = pod("m", "busybox");
        mirror
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(CONFIG_MIRROR_ANNOTATION.into(), "x".into());
        cp.update("m", Some(&mirror));
        let left: Vec<String> = std::fs::read_dir(&dir)
            .expect("dir")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, ["d.json"]);

        // The whole view without d: its file goes too.
        cp.sync_all(&BTreeMap::new());
        assert_eq!(std::fs::read_dir(&dir).expect("dir").count(), 0);
    }

    #[test]
    fn a_broken_checkpoint_is_named_removed_and_the_others_run() {
        let root = TempDir::new("checkpoint");
        let (mut cp, _) = Checkpoints::open(&root.0);
        cp.update("good", Some(&pod("good", "busybox")));
        let dir = root.0.join(CHECKPOINT_DIR);
        std::fs::write(dir.join("bad.json"), b"{not json").expect("write");
        let mut other = pod("other", "busybox");
        other.status = None;
        std::fs::write(
            dir.join("wrong.json"),
            serde_json::to_vec(&other).expect("encode"),
        )
        .expect("write");
        let (_, pods) = Checkpoints::open(&root.0);
        let uids: Vec<_> = pods.iter().map(|p| p.metadata.uid.clone()).collect();
        assert_eq!(uids, [Some("good".to_string())]);
        assert!(!dir.join("bad.json").exists());
        assert!(!dir.join("wrong.json").exists());
    }

    #[test]
    fn a_uid_that_cannot_name_a_file_is_not_checkpointed() {
        let root = TempDir::new("checkpoint");
        let (mut cp, _) = Checkpoints::open(&root.0);
        cp.update("../x", Some(&pod("../x", "busybox")));
        assert!(!root.0.join("x.json").exists());
        assert!(!root.0.join(CHECKPOINT_DIR).exists());
    }
}
