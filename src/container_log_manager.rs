//! The container log manager of a CRI runtime (upstream's `pkg/kubelet/logs`,
//! `container_log_manager.go`): the `log-rotate` loop, every
//! `containerLogMonitorInterval` (10 s), looks at each running container's CRI log
//! file and rotates one that reached `containerLogMaxSize`: rotated files left by an
//! interrupted pass (`.tmp`, a file already compressed) are removed, the oldest go
//! until `containerLogMaxFiles` − 2 rotated ones are left, those are compressed
//! (`.gz`), the current file is renamed `<file>.<YYYYMMDD-hhmmss>` (UTC here; upstream
//! uses the node's zone) and the runtime is told to reopen it (CRI
//! `ReopenContainerLog`; a refusal renames it back, to try again next pass). A file
//! that went missing is reopened too. The same pass makes `/var/log/containers` links
//! a killed kubelet did not make. Docker rotates its own files: the loop runs only
//! on CRI.
//!
//! Upstream queues the containers to `containerLogMaxWorkers` goroutines; one thread
//! does them in turn here. A rotation that would reuse the name of one made in the
//! same second waits for the next pass (upstream's rename would replace that file).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use crate::kuberuntime::logs::{self, LogSettings};
use runtime::container::{labels, short};
use runtime::{ContainerState, Runtime, RuntimeError};

/// The loop's thread name.
pub(crate) const THREAD: &str = "log-rotate";
/// A compressed rotated file's suffix.
const COMPRESS_SUFFIX: &str = ".gz";
/// A compression under way (or interrupted) writes here first.
const TMP_SUFFIX: &str = ".tmp";

/// Why a pass or one container's rotation failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LogManagerError {
    /// The runtime's list failed.
    #[error("cannot list the containers")]
    List(#[source] RuntimeError),
    /// A file operation on a log file failed.
    #[error("{what} {}", path.display())]
    File {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The runtime did not reopen a renamed log file (it was renamed back).
    #[error("the runtime did not reopen the log of container {id}")]
    Reopen {
        id: String,
        #[source]
        source: RuntimeError,
    },
    /// Some containers' logs could not be looked at or rotated (each logged).
    #[error("{failed} of the containers' logs could not be rotated; the first: {first}")]
    Some { failed: usize, first: String },
}

fn file_error(what: &'static str, path: &Path) -> impl FnOnce(io::Error) -> LogManagerError {
    let path = path.to_path_buf();
    move |source| LogManagerError::File { what, path, source }
}

/// When to rotate and how many files to keep (upstream `LogRotatePolicy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RotatePolicy {
    /// `containerLogMaxSize` in bytes.
    pub max_size: u64,
    /// `containerLogMaxFiles`, at least 2: the current file and the rotated ones.
    pub max_files: u32,
}

/// What a rotation does to the rotated files already there (pure).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Leftovers and the oldest files beyond the policy.
    pub remove: Vec<String>,
    /// Rotated files kept, still to be compressed.
    pub compress: Vec<String>,
}

/// Upstream's `cleanupUnusedLogs`, `removeExcessLogs` and the compression choice over
/// the rotated files' names (`<log>.*`). A `.tmp` is an interrupted compression and a
/// plain file beside its `.gz` was compressed already: both are unused. Of the rest,
/// sorted by name (oldest first: the suffix is the time), all but the newest
/// `max_files - 2` go: the current file and the one this rotation makes are the
/// other two.
pub(crate) fn plan_rotation(rotated: &[String], max_files: u32) -> Plan {
    let mut plan = Plan::default();
    let mut in_use: Vec<String> = Vec::new();
    for name in rotated {
        let compressed_twin = rotated.contains(&format!("{name}{COMPRESS_SUFFIX}"));
        if name.ends_with(TMP_SUFFIX) || (!name.ends_with(COMPRESS_SUFFIX) && compressed_twin) {
            plan.remove.push(name.clone());
        } else {
            in_use.push(name.clone());
        }
    }
    base::sort::sort(&mut in_use);
    let keep = usize::try_from(max_files.saturating_sub(2)).unwrap_or(usize::MAX);
    let excess = in_use.len().saturating_sub(keep);
    plan.remove.extend(in_use.drain(..excess));
    plan.compress = in_use
        .into_iter()
        .filter(|n| !n.ends_with(COMPRESS_SUFFIX))
        .collect();
    plan
}

/// The names in `dir` of `file`'s rotated files (`<file>.*`).
fn rotated_files(file: &Path) -> Result<Vec<String>, LogManagerError> {
    let (Some(dir), Some(name)) = (file.parent(), file.file_name()) else {
        return Ok(Vec::new());
    };
    let prefix = format!("{}.", name.to_string_lossy());
    let entries = std::fs::read_dir(dir).map_err(file_error("cannot list", dir))?;
    Ok(entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&prefix))
        .collect())
}

/// Compresses `path` as upstream: gzip into `<path>.tmp`, renamed to `<path>.gz`,
/// then the plain file removed.
fn compress(path: &Path) -> Result<(), LogManagerError> {
    use std::io::Write;
    let tmp = PathBuf::from(format!("{}{TMP_SUFFIX}", path.display()));
    let gz = PathBuf::from(format!("{}{COMPRESS_SUFFIX}", path.display()));
    let written = (|| -> Result<(), LogManagerError> {
        let mut input = std::fs::File::open(path).map_err(file_error("cannot open", path))?;
        let out = std::fs::File::create(&tmp).map_err(file_error("cannot create", &tmp))?;
        let mut enc = flate2::write::GzEncoder::new(out, flate2::Compression::default());
        io::copy(&mut input, &mut enc).map_err(file_error("cannot compress", path))?;
        let mut out = enc.finish().map_err(file_error("cannot compress", path))?;
        out.flush().map_err(file_error("cannot write", &tmp))?;
        std::fs::rename(&tmp, &gz).map_err(file_error("cannot rename", &tmp))
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    std::fs::remove_file(path).map_err(file_error("cannot remove", path))
}

/// The `log-rotate` loop's state: the runtime, the node's containers, the policy.
#[derive(Debug)]
pub(crate) struct ContainerLogManager {
    runtime: Arc<dyn Runtime>,
    node_name: String,
    policy: RotatePolicy,
    links: LogSettings,
}

impl ContainerLogManager {
    pub(crate) fn new(
        runtime: Arc<dyn Runtime>,
        node_name: &str,
        policy: RotatePolicy,
        links: LogSettings,
    ) -> ContainerLogManager {
        ContainerLogManager {
            runtime,
            node_name: node_name.to_string(),
            policy,
            links,
        }
    }

    /// One pass (upstream `rotateLogs` and `processContainer`) at `now`: every running
    /// container of this node. A container's failure is logged and the others go on;
    /// the pass's error counts them.
    pub(crate) fn tick(&self, now: SystemTime) -> Result<(), LogManagerError> {
        let filter = [format!("{}={}", labels::MANAGED_BY_NODE, self.node_name)];
        let list = self
            .runtime
            .list_containers(&filter)
            .map_err(LogManagerError::List)?;
        let mut failed = 0usize;
        let mut first = None;
        for c in list {
            // Only running containers write: a stopped one needs no new file.
            let sandbox =
                c.labels.get(labels::DOCKER_TYPE).map(String::as_str) == Some(labels::TYPE_SANDBOX);
            if c.state != ContainerState::Running || sandbox {
                continue;
            }
            if let Err(e) = self.process_container(&c.id, now) {
                let line = base::loops::error_chain(&e);
                log::warn!("container {}: log rotation: {line}", short(&c.id));
                failed += 1;
                first.get_or_insert(line);
            }
        }
        match first {
            None => Ok(()),
            Some(first) => Err(LogManagerError::Some { failed, first }),
        }
    }

    /// One container: its links made if missing, a missing file reopened, a big one
    /// rotated.
    fn process_container(&self, id: &str, now: SystemTime) -> Result<(), LogManagerError> {
        let details = match self.runtime.inspect_container(id) {
            Ok(d) => d,
            // Gone since the list.
            Err(RuntimeError::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(LogManagerError::List(e)),
        };
        if details.log_path.is_empty() {
            return Ok(());
        }
        let path = PathBuf::from(&details.log_path);
        match logs::ensure_links(&self.links, &details.labels, id, &details.log_path) {
            Ok(true) => log::debug!("container {}: made its log link", short(id)),
            Ok(false) => {}
            Err(e) => log::warn!("cannot make the log links of container {}: {e}", short(id)),
        }
        let size = match std::fs::metadata(&path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // Removed by someone: the runtime makes it again.
                self.runtime.reopen_container_log(id).map_err(|source| {
                    LogManagerError::Reopen {
                        id: id.to_string(),
                        source,
                    }
                })?;
                std::fs::metadata(&path)
                    .map_err(file_error("no log file after a reopen:", &path))?
                    .len()
            }
            Err(e) => return Err(file_error("cannot stat", &path)(e)),
        };
        if size < self.policy.max_size {
            return Ok(());
        }
        self.rotate(id, &path, now)
    }

    /// Upstream `rotateLog`: the rotated files tidied and compressed, then the current
    /// one renamed and reopened.
    fn rotate(&self, id: &str, path: &Path, now: SystemTime) -> Result<(), LogManagerError> {
        let dir = path.parent().unwrap_or(Path::new("/"));
        let plan = plan_rotation(&rotated_files(path)?, self.policy.max_files);
        for name in &plan.remove {
            let p = dir.join(name);
            match std::fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(file_error("cannot remove", &p)(e)),
            }
        }
        for name in &plan.compress {
            compress(&dir.join(name))?;
        }
        let rotated = PathBuf::from(format!(
            "{}.{}",
            path.display(),
            base::time::compact_utc(now)
        ));
        if std::fs::symlink_metadata(&rotated).is_ok() {
            log::debug!(
                "container {}: {} exists; rotating next pass",
                short(id),
                rotated.display()
            );
            return Ok(());
        }
        std::fs::rename(path, &rotated).map_err(file_error("cannot rename", path))?;
        if let Err(source) = self.runtime.reopen_container_log(id) {
            // Back, so the next pass tries again (upstream does the same).
            if let Err(e) = std::fs::rename(&rotated, path) {
                log::error!(
                    "cannot rename {} back to {}: {e}",
                    rotated.display(),
                    path.display()
                );
            }
            return Err(LogManagerError::Reopen {
                id: id.to_string(),
                source,
            });
        }
        log::debug!(
            "container {}: log rotated to {}",
            short(id),
            rotated.display()
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base::testutil::TempDir;
    use std::io::Read;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_rotation_keeps_max_files_minus_two_rotated_files_and_drops_leftovers() {
        let rotated = names(&[
            "0.log.20240101-000003",
            "0.log.20240101-000001.gz",
            "0.log.20240101-000002.gz",
            "0.log.20240101-000002",
            "0.log.20240101-000004.gz.tmp",
        ]);
        // max 5: the current file, the new rotated one, and 3 older ones.
        assert_eq!(
            plan_rotation(&rotated, 5),
            Plan {
                remove: names(&["0.log.20240101-000002", "0.log.20240101-000004.gz.tmp"]),
                compress: names(&["0.log.20240101-000003"]),
            }
        );
        // max 3: one older file stays, the newest.
        assert_eq!(
            plan_rotation(&rotated, 3),
            Plan {
                remove: names(&[
                    "0.log.20240101-000002",
                    "0.log.20240101-000004.gz.tmp",
                    "0.log.20240101-000001.gz",
                    "0.log.20240101-000002.gz",
                ]),
                compress: names(&["0.log.20240101-000003"]),
            }
        );
        // max 2: no older file stays.
        assert_eq!(plan_rotation(&rotated, 2).compress, Vec::<String>::new());
        assert_eq!(plan_rotation(&rotated, 2).remove.len(), 5);
        assert_eq!(plan_rotation(&[], 5), Plan::default());
    }

    #[test]
    fn compression_leaves_only_the_gz() {
        let dir = TempDir::new("logcompress");
        let plain = dir.0.join("0.log.20240101-000000");
        let text = "2024-01-01T00:00:00Z stdout F hello\n".repeat(100);
        std::fs::write(&plain, &text).expect("write");
        compress(&plain).expect("compress");
        assert!(!plain.exists());
        assert!(!dir.0.join("0.log.20240101-000000.tmp").exists());
        let gz = std::fs::File::open(dir.0.join("0.log.20240101-000000.gz")).expect("gz");
        let mut back = String::new();
        flate2::read::GzDecoder::new(gz)
            .read_to_string(&mut back)
            .expect("gunzip");
        assert_eq!(back, text);
        let found = rotated_files(&dir.0.join("0.log")).expect("list");
        assert_eq!(found, names(&["0.log.20240101-000000.gz"]));
    }
}
