//! subPath mounts (upstream `pkg/volume/util/subpath/subpath_linux.go`), safe against
//! a container that rewrites its volume while they are made (CVE-2021-25741).
//!
//! A subPath lies inside a volume a container can write, so any *path* to it may lead
//! somewhere else by the time it is used: a container swapping a directory and a
//! symlink to `/` with `renameat2(RENAME_EXCHANGE)` wins the race between a check and
//! the runtime's own resolution of the path, 100 ms later. So, as upstream, the path
//! is resolved once, by us, one component at a time from the volume's root with
//! `openat(O_NOFOLLOW)`; the file descriptor that comes out is bind-mounted (through
//! `/proc/self/fd/N`) onto a directory only the kubelet writes,
//! `<pod dir>/volume-subpaths/<volume>/<container>/<index>`, and *that* is what the
//! runtime gets. Whatever the container renames afterwards, the mount holds the inode
//! that was checked. Missing directories are made the same way (`mkdirat` below an
//! open parent, upstream `doSafeMakeDir`).
//!
//! The mounts stay while the pod exists (a restarted container reuses its own) and go
//! with the pod directory: the `volume-mgr` loop's cleanup unmounts them
//! ([`is_subpath_mount`]), also those a previous kubelet left.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

use super::mount;

/// The directory under a pod's directory that holds the subPath bind mounts (upstream
/// `containerSubPathDirectoryName`).
pub(crate) const SUBPATHS_DIR: &str = "volume-subpaths";

/// Mode of the directories and files made under [`SUBPATHS_DIR`] (upstream 0750).
const TARGET_MODE: u32 = 0o750;

/// How many stacked mounts a stale target may carry before we give up unmounting
/// them (one is the normal case; more means something else mounts there).
const MAX_STALE_MOUNTS: usize = 8;

/// Whether `mount_point` is a subPath bind mount of the pod directory `pod_dir`:
/// exactly `<pod_dir>/volume-subpaths/<volume>/<container>/<index>`.
pub(crate) fn is_subpath_mount(pod_dir: &Path, mount_point: &Path) -> bool {
    let Ok(rel) = mount_point.strip_prefix(pod_dir) else {
        return false;
    };
    let parts: Vec<_> = rel.components().collect();
    parts.len() == 4
        && parts[0] == Component::Normal(SUBPATHS_DIR.as_ref())
        && parts.iter().all(|c| matches!(c, Component::Normal(_)))
}

/// Checks a subPath and creates it below the volume if missing, refusing anything
/// that leaves the volume (upstream `ValidatePathNoBacksteps`, `SafeMakeDir`, and the
/// `EvalSymlinks` + `PathWithinBase` of `doBindSubPath`). Returns the subPath with
/// every symlink resolved; [`bind`] opens it again without following any.
pub(crate) fn prepare(
    base: &Path,
    sub: &str,
    volume: &str,
    container: &str,
) -> Result<PathBuf, String> {
    if sub.starts_with('/') {
        return Err(format!(
            "error SubPath `{sub}` must not be an absolute path"
        ));
    }
    if Path::new(sub)
        .components()
        .any(|c| c == Component::ParentDir)
    {
        return Err(format!(
            "unable to provision SubPath `{sub}`: must not contain '..'"
        ));
    }
    let escaped = || {
        format!("failed to prepare subPath for volumeMount {volume:?} of container {container:?}")
    };
    let path = base::safepath::safe_join_relative(base, sub).map_err(|e| e.to_string())?;
    if std::fs::symlink_metadata(&path).is_err() {
        let mode = std::fs::metadata(base)
            .map(|m| m.permissions().mode() & 0o7777)
            .unwrap_or(0o755);
        safe_make_dir(base, sub, mode).map_err(|e| {
            log::warn!("creating subPath {sub:?} of volume {volume:?}: {e}");
            format!("failed to create subPath directory for volumeMount {volume:?} of container {container:?}")
        })?;
    }
    // A symlink inside the volume (written by a container) must not lead out of it.
    let real_base = std::fs::canonicalize(base).map_err(|_| escaped())?;
    let real = std::fs::canonicalize(&path).map_err(|_| escaped())?;
    if !real.starts_with(&real_base) {
        log::warn!(
            "subPath {sub:?} of volume {volume:?} resolves to {} outside the volume",
            real.display()
        );
        return Err(escaped());
    }
    Ok(real)
}

/// Bind-mounts `real` (a path [`prepare`] resolved, below the volume `base`) onto
/// `target`, opening it from `base` one component at a time without following any
/// symlink, so the mount holds the file that is inside the volume now, whatever the
/// path leads to later (upstream `doBindSubPath`). `target`'s parent must exist and be
/// the kubelet's own. A target already mounted with that same file is kept (a
/// restarted container); one with another is unmounted and mounted again.
pub(crate) fn bind(base: &Path, real: &Path, target: &Path) -> io::Result<()> {
    let real_base = std::fs::canonicalize(base)?;
    let rel = real.strip_prefix(&real_base).map_err(|_| {
        invalid(format!(
            "{} is not below {}",
            real.display(),
            real_base.display()
        ))
    })?;
    // Compared with the mount table's canonical paths below (the kubelet's root dir
    // may be reached through a symlink).
    let target = &match (target.parent(), target.file_name()) {
        (Some(parent), Some(name)) => std::fs::canonicalize(parent)?.join(name),
        _ => return Err(invalid(format!("bad target {}", target.display()))),
    };
    let fd = open_beneath(&real_base, rel, None)?;
    let file = File::from(fd);
    let meta = file.metadata()?;
    if meta.file_type().is_symlink() {
        return Err(invalid(format!("{} is a symlink", real.display())));
    }
    if mount::mounted_at(target)?.is_some() {
        let same =
            std::fs::metadata(target).is_ok_and(|t| t.dev() == meta.dev() && t.ino() == meta.ino());
        if same {
            return Ok(());
        }
        for _ in 0..MAX_STALE_MOUNTS {
            mount::unmount(target)?;
            if mount::mounted_at(target)?.is_none() {
                break;
            }
        }
        if mount::mounted_at(target)?.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::ResourceBusy,
                format!("{} stays mounted", target.display()),
            ));
        }
    }
    make_target(target, meta.is_dir())?;
    let source = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    mount::bind_mount(&source, target)
}

/// The (unmounted) mount point for a directory or a file: made if missing, made again
/// if it is of the other kind (the subPath changed from a file to a directory).
fn make_target(target: &Path, dir: bool) -> io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    match std::fs::symlink_metadata(target) {
        Ok(m) if m.is_dir() == dir && !m.file_type().is_symlink() => return Ok(()),
        Ok(m) if m.is_dir() => std::fs::remove_dir(target)?,
        Ok(_) => std::fs::remove_file(target)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    if dir {
        std::fs::DirBuilder::new().mode(TARGET_MODE).create(target)
    } else {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(TARGET_MODE)
            .custom_flags(libc::O_NOFOLLOW)
            .open(target)
            .map(drop)
    }
}

/// Creates `base/sub` one component at a time with `mode`, each directory made with
/// `mkdirat` below its parent opened without following symlinks: a container cannot
/// point it at the host, even by swapping a directory for a symlink meanwhile.
fn safe_make_dir(base: &Path, sub: &str, mode: u32) -> io::Result<()> {
    let real_base = std::fs::canonicalize(base)?;
    open_beneath(&real_base, Path::new(sub), Some(mode)).map(drop)
}

/// Opens `rel` below the directory `base` (itself no symlink): every component with
/// `openat(O_NOFOLLOW)` from the descriptor of the one before (upstream `doSafeOpen`).
/// A symlink on the way is refused; the last component is opened `O_PATH` whatever it
/// is (a symlink there comes back as itself, for the caller to refuse). With
/// `create`, missing directories are made with that mode (upstream `doSafeMakeDir`).
fn open_beneath(base: &Path, rel: &Path, create: Option<u32>) -> io::Result<OwnedFd> {
    let dir_flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut cur = open_at(None, base.as_os_str().as_bytes(), dir_flags)?;
    let parts: Vec<&[u8]> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(p) => Some(Ok(p.as_bytes())),
            Component::CurDir => None,
            other => Some(Err(invalid(format!(
                "{:?} in subPath {}",
                other.as_os_str(),
                rel.display()
            )))),
        })
        .collect::<io::Result<_>>()?;
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        let flags = if last {
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC
        } else {
            dir_flags
        };
        let next = match (open_at(Some(&cur), part, flags), create) {
            (Ok(fd), _) => fd,
            (Err(e), Some(mode)) if e.kind() == io::ErrorKind::NotFound => {
                make_dir_at(&cur, part, mode)?
            }
            (Err(e), _) if e.raw_os_error() == Some(Errno::LOOP.raw_os_error()) => {
                return Err(invalid(format!(
                    "{} is a symlink",
                    base.join(rel).display()
                )))
            }
            (Err(e), _) => return Err(e),
        };
        cur = next;
    }
    Ok(cur)
}

/// `mkdirat` then open the new directory (without following: it may have been
/// swapped already) and set its mode, which the umask cut.
fn make_dir_at(parent: &OwnedFd, name: &[u8], mode: u32) -> io::Result<OwnedFd> {
    let c = std::ffi::CString::new(name).map_err(|_| invalid("NUL in subPath".into()))?;
    if let Err(e) = rustix::fs::mkdirat(parent, c.as_c_str(), Mode::from_raw_mode(mode)) {
        if e != Errno::EXIST {
            return Err(e.into());
        }
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = open_at(Some(parent), name, flags)?;
    let dir = File::from(fd);
    dir.set_permissions(std::fs::Permissions::from_mode(mode))?;
    Ok(OwnedFd::from(dir))
}

/// `openat(parent, name, flags)`, or `openat(AT_FDCWD, name, flags)` without a parent.
/// No `O_CREAT`, so the mode (0) is not read.
fn open_at(parent: Option<&OwnedFd>, name: &[u8], flags: OFlags) -> io::Result<OwnedFd> {
    let c = std::ffi::CString::new(name).map_err(|_| invalid("NUL in subPath".into()))?;
    let dirfd = parent.map_or(rustix::fs::CWD, AsFd::as_fd);
    Ok(rustix::fs::openat(
        dirfd,
        c.as_c_str(),
        flags,
        Mode::empty(),
    )?)
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use base::testutil::TempDir;

    #[test]
    fn sub_paths_stay_inside_their_volume() {
        let dir = TempDir::new("subpath");
        let vol = dir.0.join("vol");
        std::fs::create_dir_all(&vol).expect("vol");
        std::fs::create_dir_all(dir.0.join("outside")).expect("outside");
        std::os::unix::fs::symlink(dir.0.join("outside"), vol.join("link")).expect("symlink");

        let made = prepare(&vol, "a/b", "v", "c").expect("made");
        assert_eq!(
            made,
            std::fs::canonicalize(vol.join("a/b")).expect("exists")
        );
        assert_eq!(
            prepare(&vol, "/etc", "v", "c"),
            Err("error SubPath `/etc` must not be an absolute path".into())
        );
        assert_eq!(
            prepare(&vol, "a/../../x", "v", "c"),
            Err("unable to provision SubPath `a/../../x`: must not contain '..'".into())
        );
        let esc = "failed to prepare subPath for volumeMount \"v\" of container \"c\"";
        assert_eq!(prepare(&vol, "link", "v", "c"), Err(esc.into()));
        assert_eq!(
            prepare(&vol, "link/new", "v", "c"),
            Err(
                "failed to create subPath directory for volumeMount \"v\" of container \"c\""
                    .into()
            )
        );
        assert!(!dir.0.join("outside/new").exists());
    }

    #[test]
    fn a_symlink_swapped_in_after_the_check_is_never_followed() {
        // The race of CVE-2021-25741, frozen at its worst moment: the path was checked
        // while `d` was a directory, and `d` is a symlink to the host when it is used.
        let dir = TempDir::new("subpath-swap");
        let vol = dir.0.join("vol");
        let host = dir.0.join("host");
        std::fs::create_dir_all(vol.join("d")).expect("d");
        std::fs::create_dir_all(&host).expect("host");
        let real = prepare(&vol, "d", "v", "c").expect("checked");
        std::fs::rename(vol.join("d"), vol.join("was-d")).expect("rename");
        std::os::unix::fs::symlink(&host, vol.join("d")).expect("symlink");
        let target = dir.0.join("target");
        let e = bind(&vol, &real, &target).expect_err("a symlink is refused");
        assert!(e.to_string().contains("is a symlink"), "{e}");
        assert_eq!(mount::mounted_at(&target).expect("mountinfo"), None);
        // A symlinked directory on the way is refused too, and nothing is made there.
        std::fs::create_dir_all(vol.join("was-d/e")).expect("e");
        let real = vol.canonicalize().expect("vol").join("d/e");
        assert!(bind(&vol, &real, &target).is_err());
        assert!(open_beneath(
            &vol.canonicalize().expect("vol"),
            Path::new("d/new"),
            Some(0o755)
        )
        .is_err());
        assert!(!host.join("new").exists());
        assert_eq!(std::fs::read_dir(&host).expect("host").count(), 0);
    }

    #[test]
    fn a_sub_path_is_bind_mounted_once_and_found_by_the_cleanup() {
        let dir = TempDir::new("subpath-bind");
        let vol = dir.0.join("vol");
        std::fs::create_dir_all(vol.join("d")).expect("d");
        std::fs::write(vol.join("f"), "file").expect("f");
        let pod_dir = dir.0.join("pod");
        let target = pod_dir.join(SUBPATHS_DIR).join("v/c/0");
        let file_target = pod_dir.join(SUBPATHS_DIR).join("v/c/1");
        std::fs::create_dir_all(target.parent().expect("parent")).expect("parents");
        let real = prepare(&vol, "d", "v", "c").expect("d");
        bind(&vol, &real, &target).expect("bind");
        // A restarted container: the same file, the same single mount.
        bind(&vol, &real, &target).expect("bind again");
        // Another subPath at that index now: the stale mount goes, the new one comes.
        let real_e = prepare(&vol, "e", "v", "c").expect("e");
        bind(&vol, &real_e, &target).expect("bind another");
        let on_e = std::fs::write(vol.join("e/z"), "z").is_ok() && target.join("z").exists();
        bind(&vol, &real, &target).expect("bind back");
        let real_f = prepare(&vol, "f", "v", "c").expect("f");
        bind(&vol, &real_f, &file_target).expect("bind a file");
        let ours: Vec<_> = mount::mounts_under(&pod_dir)
            .expect("mountinfo")
            .into_iter()
            .map(|m| m.mount_point)
            .collect();
        let cleanup_sees = ours.iter().all(|m| is_subpath_mount(&pod_dir, m));
        let through = std::fs::write(target.join("y"), "y").is_ok()
            && vol.join("d/y").exists()
            && std::fs::read_to_string(&file_target).is_ok_and(|t| t == "file");
        // Unmount before asserting, so a failure leaves no mount behind.
        for m in &ours {
            mount::unmount(m).expect("unmount");
        }
        assert_eq!(ours.len(), 2, "{ours:?}");
        assert!(cleanup_sees, "{ours:?}");
        assert!(through, "the targets show the volume's directory and file");
        assert!(on_e, "a changed subPath is mounted again");
        std::fs::write(vol.join("d/x"), "through the mount").expect("write");
        assert!(!target.join("x").exists(), "unmounted");
        assert!(!is_subpath_mount(
            &pod_dir,
            &pod_dir.join(SUBPATHS_DIR).join("v/c")
        ));
        assert!(!is_subpath_mount(&pod_dir, &pod_dir.join("volumes/a/b/c")));
    }
}
