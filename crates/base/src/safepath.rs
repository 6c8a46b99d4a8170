//! Host paths built from pod input (UIDs, pod, volume and container names, subPaths,
//! profile names) that cannot leave their parent directory. Every such path goes
//! through [`safe_join`] or [`safe_join_relative`], whatever validation the input
//! passed before: validation decides what a pod may say, this decides what the
//! kubelet may touch, and a bug in one must not open the other (upstream's kubelet
//! has the same belt and braces: API validation, then `utilstrings` and the subpath
//! checks on the node).

use std::path::{Path, PathBuf};

/// A name or relative path refused because it would leave its parent.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("refusing path {name:?} below {parent}: {reason}")]
pub struct UnsafePathError {
    /// The parent directory.
    pub parent: PathBuf,
    /// The name or path refused.
    pub name: String,
    /// Why.
    pub reason: &'static str,
}

impl From<UnsafePathError> for std::io::Error {
    fn from(e: UnsafePathError) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, e)
    }
}

/// Why `name` is not one plain path component, if it is not.
fn component_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("empty name")
    } else if name == "." || name == ".." {
        Some("not a name")
    } else if name.contains('/') {
        Some("contains '/'")
    } else if name.contains('\0') {
        Some("contains NUL")
    } else {
        None
    }
}

/// `parent/name` where `name` must be exactly one ordinary component: not empty, not
/// `.` or `..`, no `/` (hence not absolute), no NUL.
pub fn safe_join(parent: &Path, name: &str) -> Result<PathBuf, UnsafePathError> {
    match component_problem(name) {
        None => Ok(parent.join(name)),
        Some(reason) => Err(UnsafePathError {
            parent: parent.to_path_buf(),
            name: name.to_string(),
            reason,
        }),
    }
}

/// `parent/rel` where `rel` is a relative path of ordinary components (empty and `.`
/// components are skipped, as the kernel would): no `..`, not absolute, no NUL.
/// Symlinks are not resolved here; code that follows them must check where they lead
/// (see the volume manager's subPath handling).
pub fn safe_join_relative(parent: &Path, rel: &str) -> Result<PathBuf, UnsafePathError> {
    let refuse = |reason| UnsafePathError {
        parent: parent.to_path_buf(),
        name: rel.to_string(),
        reason,
    };
    if rel.starts_with('/') {
        return Err(refuse("absolute path"));
    }
    let mut out = parent.to_path_buf();
    for part in rel.split('/').filter(|p| !p.is_empty() && *p != ".") {
        if let Some(reason) = component_problem(part) {
            return Err(refuse(reason));
        }
        out.push(part);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_join_takes_one_plain_component_only() {
        let root = Path::new("/var/lib/kubelet/pods");
        assert_eq!(safe_join(root, "abc-1"), Ok(root.join("abc-1")));
        for bad in ["", ".", "..", "a/b", "/etc", "../../x", "a\0b"] {
            let e = safe_join(root, bad).expect_err(bad);
            assert_eq!(e.name, bad);
        }
        assert_eq!(
            safe_join(root, "..").expect_err("..").to_string(),
            "refusing path \"..\" below /var/lib/kubelet/pods: not a name"
        );
    }

    #[test]
    fn safe_join_relative_stays_below_its_parent() {
        let base = Path::new("/v");
        assert_eq!(safe_join_relative(base, "a/./b//c"), Ok(base.join("a/b/c")));
        assert_eq!(safe_join_relative(base, ""), Ok(base.to_path_buf()));
        for bad in ["/etc", "a/../../x", "..", "a\0"] {
            assert!(safe_join_relative(base, bad).is_err(), "{bad}");
        }
    }
}
