//! Upstream's atomic writer (`pkg/volume/util/atomic_writer.go`): the files of a
//! configMap, secret, downwardAPI or projected volume are written so that a reader in
//! a container never sees half an update.
//!
//! Layout of a volume directory:
//!
//! ```text
//! ..2024_05_01_12_34_56.123456789/   the current data (a new directory per update)
//! ..data -> ..2024_05_01_12_34_56.123456789
//! ca.crt -> ..data/ca.crt            one user-visible symlink per top-level name
//! sub    -> ..data/sub
//! ```
//!
//! An update writes a new timestamped directory, points `..data_tmp` at it and renames
//! that over `..data` (one atomic `rename(2)`), adds the symlinks of new names,
//! removes those of names that are gone, then deletes the old directory. Nothing is
//! written when every file already holds its content and mode.
//!
//! With a pod's `fsGroup`, every file and directory written goes to that group, files
//! group-readable and directories group-searchable and setgid (upstream
//! `SetVolumeOwnership` for a read-only volume).

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

/// The symlink to the current data directory.
pub(crate) const DATA_DIR: &str = "..data";
/// The symlink made beside it, then renamed over it.
const DATA_DIR_TMP: &str = "..data_tmp";
/// Upstream's limits on a payload path and its parts.
const MAX_PATH: usize = 4096;
const MAX_NAME: usize = 255;

/// One file of a volume: its content and mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FileProjection {
    /// The content.
    pub data: Vec<u8>,
    /// The permission bits.
    pub mode: u32,
}

/// A volume's files by relative path.
pub(crate) type Payload = BTreeMap<String, FileProjection>;

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// Upstream `validatePath`: relative, no `..` part, not starting with `..`, within the
/// length limits.
pub(crate) fn validate_path(p: &str) -> io::Result<()> {
    if p.is_empty() {
        return Err(invalid("invalid path: must not be empty".into()));
    }
    if p.len() > MAX_PATH {
        return Err(invalid(format!(
            "invalid path: must be less than or equal to {MAX_PATH} characters"
        )));
    }
    if p.starts_with('/') {
        return Err(invalid(format!("invalid path: must be relative path: {p}")));
    }
    if p.split('/').any(|s| s == "..") {
        return Err(invalid(format!("invalid path: must not contain '..': {p}")));
    }
    if p.starts_with("..") {
        return Err(invalid(format!(
            "invalid path: must not start with '..': {p}"
        )));
    }
    if p.split('/').any(|s| s.len() > MAX_NAME) {
        return Err(invalid(format!(
            "invalid path: the name of each part must be at most {MAX_NAME} characters: {p}"
        )));
    }
    Ok(())
}

/// `p` without `.` and empty parts (`a//./b` → `a/b`).
fn clean(p: &str) -> String {
    Path::new(p)
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// The first part of a relative path: the name of its user-visible symlink.
fn top(p: &str) -> &str {
    p.split('/').next().unwrap_or(p)
}

/// Upstream's `roMask`: what `SetVolumeOwnership` adds to a read-only volume's files.
const GROUP_READ: u32 = 0o440;
/// Added to its directories (`execMask` and setgid) besides [`GROUP_READ`].
const GROUP_DIR: u32 = 0o2550;

/// Writes `payload` into `target` atomically (upstream `AtomicWriter.Write`), owned
/// by group `fs_group` when given; returns whether anything changed. `target` must
/// exist.
pub(crate) fn write(target: &Path, payload: &Payload, fs_group: Option<u32>) -> io::Result<bool> {
    let mut clean_payload: BTreeMap<String, FileProjection> = BTreeMap::new();
    for (p, f) in payload {
        validate_path(p)?;
        let c = clean(p);
        if c.is_empty() {
            return Err(invalid(format!("invalid path: {p}")));
        }
        let mut f = f.clone();
        if fs_group.is_some() {
            f.mode |= GROUP_READ;
        }
        clean_payload.insert(c, f);
    }
    let old_dir = std::fs::read_link(target.join(DATA_DIR))
        .ok()
        .map(|l| target.join(l));
    let old_files = match &old_dir {
        Some(d) => list_files(d)?,
        None => BTreeSet::new(),
    };
    let new_tops: BTreeSet<&str> = base::sort::set(clean_payload.keys().map(|p| top(p)));
    let old_tops: BTreeSet<String> = base::sort::set(old_files.iter().map(|p| top(p).to_string()));
    let unchanged = old_dir.as_ref().is_some_and(|d| {
        old_files.len() == clean_payload.len()
            && clean_payload.iter().all(|(p, f)| same_file(&d.join(p), f))
    });
    if unchanged {
        return Ok(false);
    }

    let new_dir = new_timestamp_dir(target)?;
    let written = write_payload(&new_dir, &clean_payload, fs_group).and_then(|()| {
        let tmp = target.join(DATA_DIR_TMP);
        let _ = std::fs::remove_file(&tmp);
        let name = new_dir
            .file_name()
            .ok_or_else(|| invalid("no timestamp directory name".into()))?;
        std::os::unix::fs::symlink(name, &tmp)?;
        std::fs::rename(&tmp, target.join(DATA_DIR))
    });
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&new_dir);
        return Err(e);
    }
    // The user-visible names: a symlink through `..data` for each new top-level name.
    for name in &new_tops {
        let link = target.join(name);
        if std::fs::read_link(&link).is_err() {
            if std::fs::symlink_metadata(&link).is_ok() {
                // Something else sits there (not ours): leave it, as upstream fails.
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} exists and is not a symlink", link.display()),
                ));
            }
            std::os::unix::fs::symlink(Path::new(DATA_DIR).join(name), &link)?;
        }
    }
    for name in old_tops.iter().filter(|n| !new_tops.contains(n.as_str())) {
        let link = target.join(name);
        if std::fs::read_link(&link).is_ok() {
            std::fs::remove_file(&link)?;
        }
    }
    if let Some(d) = old_dir.filter(|d| *d != new_dir) {
        std::fs::remove_dir_all(&d)?;
    }
    Ok(true)
}

/// Every regular file below `dir`, as relative paths.
fn list_files(dir: &Path) -> io::Result<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((d, rel)) = stack.pop() {
        let entries = match std::fs::read_dir(&d) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for e in entries {
            let e = e?;
            let name = e.file_name().to_string_lossy().into_owned();
            let r = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            if e.file_type()?.is_dir() {
                stack.push((e.path(), r));
            } else {
                out.insert(r);
            }
        }
    }
    Ok(out)
}

/// The file at `p` holds exactly `f` (content and mode).
fn same_file(p: &Path, f: &FileProjection) -> bool {
    let mode_ok = std::fs::symlink_metadata(p)
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o7777 == f.mode & 0o7777);
    mode_ok && std::fs::read(p).is_ok_and(|d| d == f.data)
}

/// A new `..<timestamp>` directory in `target`, mode 0755.
fn new_timestamp_dir(target: &Path) -> io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let stamp = base::time::rfc3339_nano(std::time::SystemTime::now())
        .trim_end_matches('Z')
        .replace(['-', 'T', ':'], "_");
    for n in 0..100u32 {
        let name = if n == 0 {
            format!("..{stamp}")
        } else {
            format!("..{stamp}.{n}")
        };
        let dir = target.join(name);
        match std::fs::DirBuilder::new().mode(0o755).create(&dir) {
            Ok(()) => {
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
                return Ok(dir);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "no free timestamp directory name",
    ))
}

/// Writes every file below `dir` (upstream `writePayloadToDir`): parents 0755, each
/// file with its mode whatever the umask; with `fs_group`, everything (`dir` too) in
/// that group.
fn write_payload(
    dir: &Path,
    payload: &BTreeMap<String, FileProjection>,
    fs_group: Option<u32>,
) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let mut dirs = BTreeSet::from([dir.to_path_buf()]);
    for (p, f) in payload {
        let path = dir.join(p);
        if let Some(parent) = path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(parent)?;
            dirs.extend(
                parent
                    .ancestors()
                    .take_while(|a| a.starts_with(dir))
                    .map(Path::to_path_buf),
            );
        }
        std::fs::write(&path, &f.data)?;
        if let Some(gid) = fs_group {
            std::os::unix::fs::lchown(&path, None, Some(gid))?;
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(f.mode & 0o7777))?;
    }
    if let Some(gid) = fs_group {
        for d in dirs {
            std::os::unix::fs::lchown(&d, None, Some(gid))?;
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755 | GROUP_DIR))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use base::testutil::TempDir;

    fn file(data: &str, mode: u32) -> FileProjection {
        FileProjection {
            data: data.as_bytes().to_vec(),
            mode,
        }
    }

    fn payload(items: &[(&str, &str, u32)]) -> Payload {
        items
            .iter()
            .map(|(p, d, m)| (p.to_string(), file(d, *m)))
            .collect()
    }

    fn read(p: &Path) -> String {
        std::fs::read_to_string(p).expect("read")
    }

    #[test]
    fn files_are_symlinks_through_the_data_link() {
        let t = TempDir::new("aw-layout");
        let dir = &t.0;
        let p = payload(&[("ca.crt", "CA", 0o644), ("sub/key", "K", 0o600)]);
        assert!(write(dir, &p, None).expect("write"));
        let data = std::fs::read_link(dir.join(DATA_DIR)).expect("..data");
        assert!(data.to_string_lossy().starts_with("..20"), "{data:?}");
        assert_eq!(
            std::fs::read_link(dir.join("ca.crt")).expect("link"),
            PathBuf::from("..data/ca.crt")
        );
        assert_eq!(
            std::fs::read_link(dir.join("sub")).expect("link"),
            PathBuf::from("..data/sub")
        );
        assert_eq!(read(&dir.join("ca.crt")), "CA");
        assert_eq!(read(&dir.join("sub/key")), "K");
        let mode = |p: &str| {
            std::fs::metadata(dir.join(p))
                .expect("meta")
                .permissions()
                .mode()
                & 0o7777
        };
        assert_eq!(mode("ca.crt"), 0o644);
        assert_eq!(mode("sub/key"), 0o600);
        // Same payload again: nothing written.
        assert!(!write(dir, &p, None).expect("again"));
        assert_eq!(std::fs::read_link(dir.join(DATA_DIR)).expect("same"), data);
    }

    #[test]
    fn an_update_swaps_the_data_and_removes_keys_that_went() {
        let t = TempDir::new("aw-update");
        let dir = &t.0;
        write(dir, &payload(&[("a", "1", 0o644), ("b", "2", 0o644)]), None).expect("first");
        let first = std::fs::read_link(dir.join(DATA_DIR)).expect("..data");
        write(
            dir,
            &payload(&[("a", "one", 0o644), ("c", "3", 0o644)]),
            None,
        )
        .expect("second");
        let second = std::fs::read_link(dir.join(DATA_DIR)).expect("..data");
        assert_ne!(first, second);
        assert!(!dir.join(&first).exists(), "the old data directory is gone");
        assert_eq!(read(&dir.join("a")), "one");
        assert_eq!(read(&dir.join("c")), "3");
        assert!(std::fs::symlink_metadata(dir.join("b")).is_err(), "b went");
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        base::sort::sort(&mut names);
        assert_eq!(
            names,
            vec![
                second.to_string_lossy().into_owned(),
                "..data".into(),
                "a".into(),
                "c".into()
            ]
        );
        // A mode change alone is an update too.
        assert!(write(
            dir,
            &payload(&[("a", "one", 0o400), ("c", "3", 0o644)]),
            None
        )
        .expect("mode"));
        assert_eq!(
            std::fs::metadata(dir.join("a"))
                .expect("a")
                .permissions()
                .mode()
                & 0o777,
            0o400
        );
    }

    #[test]
    fn paths_must_stay_inside() {
        for bad in ["/abs", "../up", "a/../../b", "..hidden", ""] {
            assert!(validate_path(bad).is_err(), "{bad}");
        }
        for good in ["a", "a/b", "a..b", ".a"] {
            assert!(validate_path(good).is_ok(), "{good}");
        }
        let t = TempDir::new("aw-bad");
        assert!(write(&t.0, &payload(&[("../x", "x", 0o644)]), None).is_err());
        assert!(!t.0.join(DATA_DIR).exists());
    }

    #[test]
    fn an_fs_group_owns_the_files_and_can_read_them() {
        use std::os::unix::fs::MetadataExt;
        let t = TempDir::new("aw-fsgroup");
        let dir = &t.0;
        let p = payload(&[("token", "t", 0o600), ("sub/key", "k", 0o400)]);
        assert!(write(dir, &p, Some(4242)).expect("write"));
        let meta = |p: &str| std::fs::metadata(dir.join(p)).expect("meta");
        assert_eq!(meta("token").gid(), 4242);
        assert_eq!(meta("token").permissions().mode() & 0o7777, 0o640);
        assert_eq!(meta("sub/key").permissions().mode() & 0o7777, 0o440);
        assert_eq!(meta("sub").gid(), 4242);
        assert_eq!(meta("sub").permissions().mode() & 0o7777, 0o2755);
        assert!(
            !write(dir, &p, Some(4242)).expect("again"),
            "nothing changed"
        );
    }
}
