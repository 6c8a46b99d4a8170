//! The `volume-mgr` loop's half of the volume manager (upstream
//! `cleanupOrphanedPodDirs` in `kubelet_volumes.go`): removes the directory of every
//! pod that no source wants and that has no container left, unmounting the tmpfs
//! volumes and subPath bind mounts rkubelet made (also those a previous run left) and
//! refusing to delete through any other mount. A pod's directory is unmounted and
//! moved away under that pod's own lock only; the tree is deleted with no lock held.

use std::io;
use std::path::Path;

use super::{mount, subpath, VolumeError, VolumeManager, DELETING_PREFIX, TMPFS_PLUGINS};
use base::loops::lock;
use base::safepath::{safe_join, UnsafePathError};
use runtime::container::labels;

/// How old the pods directory's mtime must be for a pass that found every directory
/// kept to let the next passes skip until it changes.
const MTIME_SETTLED: std::time::Duration = std::time::Duration::from_secs(1);

impl VolumeManager {
    /// One pass of the `volume-mgr` loop (upstream `cleanupOrphanedPodDirs`): removes
    /// the directory of every pod that is not wanted and has no container left in the
    /// runtime. A pass that found every directory kept makes the next ones a `stat`,
    /// until the directory's mtime or the list of wanted pods changes.
    pub fn cleanup_orphans(&self) -> Result<(), VolumeError> {
        let (known, generation, all_kept_as_of) = {
            let d = lock(&self.desired);
            (d.known, d.generation, d.all_kept_as_of)
        };
        if !known {
            return Ok(());
        }
        let pods_dir = self.pods_dir();
        // Read before the listing: a directory made or removed after it changes the
        // mtime the next pass compares.
        let mtime = std::fs::metadata(&pods_dir).and_then(|m| m.modified()).ok();
        if mtime.is_some() && all_kept_as_of == mtime.map(|m| (generation, m)) {
            return Ok(());
        }
        let entries = match std::fs::read_dir(&pods_dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(source) => {
                return Err(VolumeError::Io {
                    what: "cannot read".into(),
                    path: pods_dir,
                    source,
                })
            }
        };
        let mut first_err = None;
        let mut all_kept = true;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let kept = !name.starts_with(DELETING_PREFIX) && self.is_kept(&name);
            all_kept &= kept;
            let res = if name.starts_with(DELETING_PREFIX) {
                remove_pod_tree(&entry.path())
            } else if kept {
                Ok(())
            } else {
                self.remove_orphan(&name)
            };
            if let Err(e) = res {
                // The loop logs the returned error when it changes; the others of this
                // pass only at debug, so a stuck directory does not flood the log.
                log::debug!("{}", base::loops::error_chain(&e));
                first_err.get_or_insert(e);
            }
        }
        // Trusted only for an mtime a second old: timestamps are coarse (a jiffy), and
        // a directory made within the tick of the last change would not change it.
        let settled = mtime.filter(|m| m.elapsed().is_ok_and(|d| d > MTIME_SETTLED));
        if all_kept && first_err.is_none() {
            lock(&self.desired).all_kept_as_of = settled.map(|m| (generation, m));
        }
        first_err.map_or(Ok(()), Err)
    }

    fn remove_orphan(&self, uid: &str) -> Result<(), VolumeError> {
        // Never while a container of the pod exists: it may still use the volumes.
        let filter = [
            format!("{}={}", labels::MANAGED_BY_NODE, self.node_name),
            format!("{}={uid}", labels::POD_UID),
        ];
        let containers =
            self.runtime
                .list_containers(&filter)
                .map_err(|source| VolumeError::Runtime {
                    uid: uid.to_string(),
                    source,
                })?;
        if !containers.is_empty() {
            log::debug!(
                "orphaned pod {uid}: {} container(s) left; keeping its directory",
                containers.len()
            );
            return Ok(());
        }
        let refused = |e: UnsafePathError| VolumeError::Io {
            what: "refusing orphaned pod directory".into(),
            path: self.pods_dir(),
            source: e.into(),
        };
        let dir = self.pod_dir(uid).map_err(refused)?;
        let trash =
            safe_join(&self.pods_dir(), &format!("{DELETING_PREFIX}{uid}")).map_err(refused)?;
        let moved = self.with_pod(uid, |st| -> Result<bool, VolumeError> {
            // A sync may have set the pod up again since the check above; it marks the
            // pod kept before it takes this lock.
            if self.is_kept(uid) {
                return Ok(false);
            }
            unmount_all(&dir)?;
            std::fs::rename(&dir, &trash).map_err(|source| VolumeError::Io {
                what: "cannot move away orphaned pod directory".into(),
                path: dir.clone(),
                source,
            })?;
            st.ready.clear();
            st.failed.clear();
            // Still under the pod's lock: a set-up waiting for it finds its entry gone
            // and starts over on a fresh one, after the move.
            lock(&self.pods).remove(uid);
            self.objects.forget_pod(uid);
            self.stop_refreshing(uid);
            Ok(true)
        })?;
        if !moved {
            return Ok(());
        }
        remove_pod_tree(&trash)?;
        log::info!("Cleaned up orphaned pod directory {}", dir.display());
        Ok(())
    }
}

/// Unmounts every mount below `dir`: the tmpfs volumes and the subPath bind mounts
/// (`volume-subpaths/<volume>/<container>/<index>`, upstream `CleanSubPaths`) rkubelet
/// made, deepest first. Any other mount is left alone and stops the removal (deleting
/// through it would delete the mounted filesystem's files).
fn unmount_all(dir: &Path) -> Result<(), VolumeError> {
    let io_err = |what: &str, path: &Path| {
        let what = what.to_string();
        let path = path.to_path_buf();
        move |source| VolumeError::Io { what, path, source }
    };
    // The mount table holds canonical paths: a root dir reached through a symlink must
    // not hide the mounts below it (the removal would then delete through them).
    let dir = &std::fs::canonicalize(dir).map_err(io_err("cannot resolve", dir))?;
    for m in mount::mounts_under(dir).map_err(io_err("cannot read the mount table for", dir))? {
        let tmpfs_volume = m.fs_type == "tmpfs"
            && m.mount_point
                .parent()
                .and_then(Path::file_name)
                .is_some_and(|p| TMPFS_PLUGINS.iter().any(|t| p == *t));
        let ours = tmpfs_volume || subpath::is_subpath_mount(dir, &m.mount_point);
        if !ours {
            return Err(VolumeError::Io {
                what: format!(
                    "refusing to remove pod directory: a {} filesystem is mounted at",
                    m.fs_type
                ),
                path: m.mount_point,
                source: io::Error::from(io::ErrorKind::ResourceBusy),
            });
        }
        mount::unmount(&m.mount_point).map_err(io_err("cannot unmount", &m.mount_point))?;
    }
    Ok(())
}

/// Removes a pod directory that no longer has mounts below it (checked again: a
/// leftover from a crash may still have one). Symlinks are removed, never followed.
fn remove_pod_tree(dir: &Path) -> Result<(), VolumeError> {
    unmount_all(dir)?;
    std::fs::remove_dir_all(dir).map_err(|source| VolumeError::Io {
        what: "cannot remove pod directory".into(),
        path: dir.to_path_buf(),
        source,
    })
}
