//! Container log files as log shippers find them (upstream's dockershim
//! `createContainerLogSymlink` and kuberuntime's `legacyLogSymlink`, reference §4.4):
//! `<pod-logs-dir>/<ns>_<pod>_<uid>/<container>/<restartCount>.log` → Docker's json-file
//! log, and `<container-logs-dir>/<pod>_<ns>_<container>-<id>.log` → that first link.
//! On a CRI runtime the first is the runtime's own log file (the sandbox's log
//! directory and the container's log path say so), so only the second is a link.
//! Made when a container starts (and again by the CRI container log manager, so a
//! kubelet that died before making one makes it later), removed with it (on CRI with
//! the log files, rotated ones too: upstream's `ContainerLogManager.Clean`); container
//! GC sweeps what dangles. Docker's own rotation (`max-size`, `max-file`) bounds its
//! files; on CRI, `crate::container_log_manager` does.

use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use runtime::container::labels;

/// ext4's longest file name (upstream `MaxFileNameLength`).
const MAX_FILE_NAME: usize = 255;
/// The legacy links' suffix.
const LOG_SUFFIX: &str = ".log";

/// Where the links go and how Docker rotates the files. Empty directories: no links
/// (the unit tests' runtime managers).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogSettings {
    /// `podLogsDir` (`/var/log/pods`).
    pub pods_dir: PathBuf,
    /// The legacy links' directory (`/var/log/containers`).
    pub containers_dir: PathBuf,
    /// The runtime writes each container's log file in `pods_dir` itself (CRI): the
    /// kubelet removes those files with their container.
    pub runtime_writes_files: bool,
}

impl LogSettings {
    /// True when links are made at all.
    pub fn enabled(&self) -> bool {
        !self.pods_dir.as_os_str().is_empty() && !self.containers_dir.as_os_str().is_empty()
    }
}

/// A pod's log directory name: `<namespace>_<name>_<uid>`.
pub(crate) fn pod_log_dir_name(namespace: &str, name: &str, uid: &str) -> String {
    format!("{namespace}_{name}_{uid}")
}

/// The pod UID a pod log directory name ends in (after its last `_`).
pub(crate) fn uid_of_pod_log_dir(name: &str) -> Option<&str> {
    name.rsplit_once('_')
        .map(|(_, uid)| uid)
        .filter(|u| !u.is_empty())
}

/// The link of one container instance in the pod log directory, from its labels:
/// `<dir>/<ns>_<pod>_<uid>/<container>/<restartCount>.log`. None without the pod's
/// labels (not a kubelet container) or for a sandbox.
pub(crate) fn container_log_link(
    s: &LogSettings,
    l: &std::collections::BTreeMap<String, String>,
) -> Option<PathBuf> {
    let get = |k: &str| l.get(k).map(String::as_str).filter(|v| !v.is_empty());
    let container = get(labels::CONTAINER_NAME)?;
    if container == labels::SANDBOX_CONTAINER_NAME
        || get(labels::DOCKER_TYPE) == Some(labels::TYPE_SANDBOX)
    {
        return None;
    }
    let dir = pod_log_dir_name(
        get(labels::POD_NAMESPACE)?,
        get(labels::POD_NAME)?,
        get(labels::POD_UID)?,
    );
    // Names from labels are validated pod and container names: no `/`; refuse any
    // that would leave the directory anyway.
    if [dir.as_str(), container]
        .iter()
        .any(|p| p.contains('/') || *p == "..")
    {
        return None;
    }
    Some(
        s.pods_dir
            .join(dir)
            .join(container)
            .join(format!("{}.log", labels::restart_count(l))),
    )
}

/// The legacy link (upstream `logSymlink`): `<pod>_<ns>_<container>-<id>.log`, the
/// name cut so that it fits 255 bytes with its suffix.
pub(crate) fn legacy_log_link(
    s: &LogSettings,
    l: &std::collections::BTreeMap<String, String>,
    id: &str,
) -> Option<PathBuf> {
    let get = |k: &str| l.get(k).map(String::as_str).filter(|v| !v.is_empty());
    let name = format!(
        "{}_{}_{}-{id}",
        get(labels::POD_NAME)?,
        get(labels::POD_NAMESPACE)?,
        get(labels::CONTAINER_NAME)?
    );
    if name.contains('/') {
        return None;
    }
    let mut cut = MAX_FILE_NAME - LOG_SUFFIX.len();
    while cut < name.len() && !name.is_char_boundary(cut) {
        cut -= 1;
    }
    let name = &name[..name.len().min(cut)];
    Some(s.containers_dir.join(format!("{name}{LOG_SUFFIX}")))
}

/// Replaces whatever is at `link` with a symbolic link to `target`.
fn relink(target: &Path, link: &Path) -> io::Result<()> {
    match std::fs::remove_file(link) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::os::unix::fs::symlink(target, link)
}

/// Makes both links of a started container whose runtime log is `log_path`. A
/// container without a log file (another log driver) gets none.
pub(crate) fn make_links(
    s: &LogSettings,
    l: &std::collections::BTreeMap<String, String>,
    id: &str,
    log_path: &str,
) -> io::Result<()> {
    if !s.enabled() || log_path.is_empty() {
        return Ok(());
    }
    let (Some(link), Some(legacy)) = (container_log_link(s, l), legacy_log_link(s, l, id)) else {
        return Ok(());
    };
    // On CRI the runtime's file is where the first link would be.
    if link != Path::new(log_path) {
        if let Some(dir) = link.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(dir)?;
        }
        relink(Path::new(log_path), &link)?;
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(&s.containers_dir)?;
    relink(&link, &legacy)
}

/// Makes the legacy link of a running container unless it is there (the CRI
/// container log manager's pass: links a killed kubelet did not make). True when it
/// made one.
pub(crate) fn ensure_links(
    s: &LogSettings,
    l: &std::collections::BTreeMap<String, String>,
    id: &str,
    log_path: &str,
) -> io::Result<bool> {
    if !s.enabled() || log_path.is_empty() {
        return Ok(false);
    }
    let (Some(link), Some(legacy)) = (container_log_link(s, l), legacy_log_link(s, l, id)) else {
        return Ok(false);
    };
    if std::fs::read_link(&legacy).is_ok_and(|t| t == link) {
        return Ok(false);
    }
    make_links(s, l, id, log_path).map(|()| true)
}

/// Removes a removed container's links: the legacy one (its name holds the ID) and
/// the pod log directory's one when it still points at this container's file (the
/// runtime's log path holds the ID).
pub(crate) fn remove_links(
    s: &LogSettings,
    l: &std::collections::BTreeMap<String, String>,
    id: &str,
) {
    if !s.enabled() || id.is_empty() {
        return;
    }
    if let Some(legacy) = legacy_log_link(s, l, id) {
        let _ = std::fs::remove_file(legacy);
    }
    let Some(link) = container_log_link(s, l) else {
        return;
    };
    if s.runtime_writes_files {
        remove_log_files(&link);
        return;
    }
    let ours = std::fs::read_link(&link)
        .map(|t| t.to_string_lossy().contains(id))
        .unwrap_or(false);
    if ours {
        let _ = std::fs::remove_file(&link);
    }
}

/// Removes a CRI log file and its rotated files (`<file>.<time>`, `.gz`, a
/// compression's `.tmp`), as upstream's `Clean` removes `<path>*`.
fn remove_log_files(file: &Path) {
    let (Some(dir), Some(name)) = (file.parent(), file.file_name()) else {
        return;
    };
    let name = name.to_string_lossy();
    let rotated = format!("{name}.");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let n = e.file_name();
        let n = n.to_string_lossy();
        if n == name || n.starts_with(&rotated) {
            if let Err(err) = std::fs::remove_file(e.path()) {
                log::debug!("cannot remove log file {}: {err}", e.path().display());
            }
        }
    }
}

/// What a sweep removed.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Swept {
    /// Dangling legacy links removed.
    pub links: usize,
    /// Pod log directories removed.
    pub pod_dirs: usize,
}

/// Container GC's sweep (upstream `evictPodLogsDirectories`): dangling `*.log` links
/// in the legacy directory, and, when `keep_pod` is given (every source ready), the
/// pod log directories of pods it does not keep. Nothing but links and the pod
/// directories' own trees is removed; errors are returned as text for the caller's
/// event.
pub(crate) fn sweep(
    s: &LogSettings,
    keep_pod: Option<&dyn Fn(&str) -> bool>,
) -> (Swept, Vec<String>) {
    let mut swept = Swept::default();
    let mut errors = Vec::new();
    if !s.enabled() {
        return (swept, errors);
    }
    if let Some(keep) = keep_pod {
        if let Ok(entries) = std::fs::read_dir(&s.pods_dir) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let Some(uid) = uid_of_pod_log_dir(&name) else {
                    continue;
                };
                let is_dir = e.file_type().map(|t| t.is_dir()).unwrap_or(false);
                if !is_dir || keep(uid) {
                    continue;
                }
                match std::fs::remove_dir_all(e.path()) {
                    Ok(()) => swept.pod_dirs += 1,
                    Err(err) => errors.push(format!(
                        "failed to remove pod logs directory {}: {err}",
                        e.path().display()
                    )),
                }
            }
        }
    }
    if let Ok(entries) = std::fs::read_dir(&s.containers_dir) {
        for e in entries.flatten() {
            let path = e.path();
            let is_link = e.file_type().map(|t| t.is_symlink()).unwrap_or(false);
            let is_log = path.extension().is_some_and(|x| x == "log");
            // `metadata` follows the link: an error is a dangling one.
            if is_link && is_log && std::fs::metadata(&path).is_err() {
                match std::fs::remove_file(&path) {
                    Ok(()) => swept.links += 1,
                    Err(err) => errors.push(format!(
                        "failed to remove container log symlink {}: {err}",
                        path.display()
                    )),
                }
            }
        }
    }
    (swept, errors)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use base::testutil::TempDir;

    fn labels_of(pod: &str, ns: &str, uid: &str, c: &str, rc: u32) -> BTreeMap<String, String> {
        BTreeMap::from([
            (labels::POD_NAME.to_string(), pod.to_string()),
            (labels::POD_NAMESPACE.to_string(), ns.to_string()),
            (labels::POD_UID.to_string(), uid.to_string()),
            (labels::CONTAINER_NAME.to_string(), c.to_string()),
            (labels::RESTART_COUNT.to_string(), rc.to_string()),
        ])
    }

    fn settings(dir: &Path) -> LogSettings {
        LogSettings {
            pods_dir: dir.join("pods"),
            containers_dir: dir.join("containers"),
            runtime_writes_files: false,
        }
    }

    #[test]
    fn links_are_named_as_upstream_lays_them_out() {
        let s = settings(Path::new("/l"));
        let l = labels_of("web", "default", "u1", "app", 3);
        assert_eq!(
            container_log_link(&s, &l).expect("test value"),
            Path::new("/l/pods/default_web_u1/app/3.log")
        );
        assert_eq!(
            legacy_log_link(&s, &l, "abc").expect("test value"),
            Path::new("/l/containers/web_default_app-abc.log")
        );
        assert_eq!(uid_of_pod_log_dir("default_web_u1"), Some("u1"));
    }

    #[test]
    fn a_long_legacy_name_is_cut_to_255_bytes() {
        let s = settings(Path::new("/l"));
        let l = labels_of(&"p".repeat(200), "default", "u1", "app", 0);
        let link = legacy_log_link(&s, &l, &"f".repeat(64)).expect("test value");
        let name = link
            .file_name()
            .expect("test value")
            .to_str()
            .expect("test value");
        assert_eq!(name.len(), 255);
        assert!(name.ends_with(".log"));
    }

    #[test]
    fn a_sandbox_gets_no_link() {
        let s = settings(Path::new("/l"));
        let l = labels_of("web", "default", "u1", "POD", 0);
        assert_eq!(container_log_link(&s, &l), None);
    }

    #[test]
    fn links_resolve_then_go_with_the_container_and_the_sweep_takes_dangling_ones() {
        let dir = TempDir::new("logs");
        let s = settings(&dir.0);
        let file = dir.0.join("abc-json.log");
        std::fs::write(&file, b"line\n").expect("test value");
        let l = labels_of("web", "default", "u1", "app", 0);
        make_links(&s, &l, "abc", file.to_str().expect("test value")).expect("test value");
        let legacy = legacy_log_link(&s, &l, "abc").expect("test value");
        assert_eq!(std::fs::read(&legacy).expect("test value"), b"line\n");
        remove_links(&s, &l, "abc");
        assert!(std::fs::symlink_metadata(&legacy).is_err());
        assert!(
            std::fs::symlink_metadata(container_log_link(&s, &l).expect("test value")).is_err()
        );

        // A dangling legacy link (its file gone) is swept; so is the directory of a
        // pod that is not kept, once sources are ready.
        make_links(&s, &l, "abc", file.to_str().expect("test value")).expect("test value");
        std::fs::remove_file(&file).expect("test value");
        let (swept, errors) = sweep(&s, None);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(swept.links, 1);
        assert!(
            s.pods_dir.join("default_web_u1").is_dir(),
            "kept until ready"
        );
        let keep_none = |_: &str| false;
        let (swept, _) = sweep(&s, Some(&keep_none));
        assert_eq!(swept.pod_dirs, 1);
        assert!(!s.pods_dir.join("default_web_u1").exists());
    }

    #[test]
    fn on_cri_the_log_file_is_linked_not_replaced_and_goes_with_its_container() {
        let dir = TempDir::new("crilogs");
        let s = LogSettings {
            runtime_writes_files: true,
            ..settings(&dir.0)
        };
        let l = labels_of("web", "default", "u1", "app", 0);
        // The runtime's file is where the pod directory's link would be.
        let file = container_log_link(&s, &l).expect("test value");
        std::fs::create_dir_all(file.parent().expect("test value")).expect("test value");
        std::fs::write(&file, b"T stdout F line\n").expect("test value");
        let log_path = file.to_str().expect("test value");
        assert!(ensure_links(&s, &l, "abc", log_path).expect("test value"));
        assert!(!ensure_links(&s, &l, "abc", log_path).expect("test value"));
        assert!(std::fs::symlink_metadata(&file)
            .expect("test value")
            .is_file());
        let legacy = legacy_log_link(&s, &l, "abc").expect("test value");
        assert_eq!(
            std::fs::read(&legacy).expect("test value"),
            b"T stdout F line\n"
        );
        // Its rotated files go with it; the next instance's file stays.
        let parent = file.parent().expect("test value");
        std::fs::write(parent.join("0.log.20240101-000000.gz"), b"z").expect("test value");
        std::fs::write(parent.join("0.log.20240101-000001"), b"r").expect("test value");
        std::fs::write(parent.join("1.log"), b"next").expect("test value");
        remove_links(&s, &l, "abc");
        let mut left: Vec<String> = std::fs::read_dir(parent)
            .expect("test value")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        base::sort::sort(&mut left);
        assert_eq!(left, ["1.log"]);
        assert!(std::fs::symlink_metadata(&legacy).is_err());
    }
}
