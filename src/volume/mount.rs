//! The few mount-table operations the volume manager needs, over rustix: read
//! `/proc/self/mountinfo`, mount a tmpfs, bind-mount (subPaths), unmount. (Upstream uses `k8s.io/mount-utils`,
//! which runs `mount(8)`; a syscall needs no helper binary on a small board.)

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The kernel's mount table for this process.
const MOUNTINFO: &str = "/proc/self/mountinfo";

/// One mount from the mount table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountEntry {
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// Filesystem type (`tmpfs`, `ext4`, …).
    pub fs_type: String,
}

/// Parses mountinfo text (`man 5 proc`): field 5 is the mount point (octal-escaped),
/// the filesystem type follows the ` - ` separator.
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mount_point = left.split(' ').nth(4)?;
            let fs_type = right.split(' ').next()?;
            Some(MountEntry {
                mount_point: PathBuf::from(unescape(mount_point)),
                fs_type: fs_type.to_string(),
            })
        })
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`: undone.
pub(crate) fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            let oct = &b[i + 1..i + 4];
            let parsed = std::str::from_utf8(oct)
                .ok()
                .and_then(|o| u8::from_str_radix(o, 8).ok());
            if let Some(v) = parsed {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every mount at or below `dir`, deepest first (the order to unmount them in).
pub fn mounts_under(dir: &Path) -> io::Result<Vec<MountEntry>> {
    let text = std::fs::read_to_string(MOUNTINFO)?;
    let mut found: Vec<MountEntry> = parse_mountinfo(&text)
        .into_iter()
        .filter(|m| m.mount_point.starts_with(dir))
        .collect();
    base::sort::sort_by_key(&mut found, |m| {
        std::cmp::Reverse(m.mount_point.components().count())
    });
    found.dedup();
    Ok(found)
}

/// The filesystem type mounted exactly at `path`, if something is (the last mount
/// there wins, as in the kernel).
pub(crate) fn mounted_at(path: &Path) -> io::Result<Option<String>> {
    let text = std::fs::read_to_string(MOUNTINFO)?;
    Ok(parse_mountinfo(&text)
        .into_iter()
        .rfind(|m| m.mount_point == path)
        .map(|m| m.fs_type))
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path has a NUL byte"))
}

/// Mounts a tmpfs at `path`, of `size` bytes if given (else the kernel's default, half
/// the RAM).
pub(crate) fn mount_tmpfs(path: &Path, size: Option<u64>) -> io::Result<()> {
    let target = c_path(path)?;
    let data = CString::new(size.map(|s| format!("size={s}")).unwrap_or_default())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "bad mount options"))?;
    rustix::mount::mount(
        c"tmpfs",
        target.as_c_str(),
        c"tmpfs",
        rustix::mount::MountFlags::empty(),
        data.as_c_str(),
    )
    .map_err(io::Error::from)
}

/// Bind-mounts `source` onto `target` (not recursively: mounts below `source` are
/// not carried along). Both paths are resolved by the kernel here; the subPath code
/// passes a `/proc/self/fd/N` source it opened safely.
pub(crate) fn bind_mount(source: &Path, target: &Path) -> io::Result<()> {
    let src = c_path(source)?;
    let dst = c_path(target)?;
    // mount(src, dst, NULL, MS_BIND, NULL), as before.
    rustix::mount::mount_bind(src.as_c_str(), dst.as_c_str()).map_err(io::Error::from)
}

/// Unmounts whatever is mounted at `path`, never following a symlink there
/// (`UMOUNT_NOFOLLOW`).
pub fn unmount(path: &Path) -> io::Result<()> {
    let target = c_path(path)?;
    // umount2(path, UMOUNT_NOFOLLOW).
    rustix::mount::unmount(target.as_c_str(), rustix::mount::UnmountFlags::NOFOLLOW)
        .map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_give_mount_point_and_type() {
        let text = "22 27 0:21 / /proc rw,relatime - proc proc rw\n\
                    61 27 0:50 / /var/lib/rk/pods/u1/volumes/kubernetes.io~empty-dir/cache rw,relatime shared:1 - tmpfs tmpfs rw,size=1024k\n\
                    62 27 0:51 / /tmp/with\\040space rw - ext4 /dev/vda rw\n";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].mount_point, PathBuf::from("/proc"));
        assert_eq!(m[0].fs_type, "proc");
        assert_eq!(
            m[1].mount_point,
            PathBuf::from("/var/lib/rk/pods/u1/volumes/kubernetes.io~empty-dir/cache")
        );
        assert_eq!(m[1].fs_type, "tmpfs");
        assert_eq!(m[2].mount_point, PathBuf::from("/tmp/with space"));
    }
}
