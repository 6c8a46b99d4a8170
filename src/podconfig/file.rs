//! The file source: static pods from `staticPodPath`, a directory of manifests or one
//! manifest file, as upstream's `pkg/kubelet/config/file.go` (+ `file_linux.go`).
//!
//! One thread, `src-file`. Its tick ([`FileSource::tick`]) re-reads every manifest and
//! sends one full snapshot ([`SourceUpdate`], upstream's `SET`) of all their pods,
//! every `fileCheckFrequency`; between ticks it waits on an inotify watch of the
//! directory (and the shutdown descriptor) and ticks as soon as something in it
//! changes, so an edit is picked up well within a second; the periodic re-list covers
//! anything a watch can miss.
//!
//! Directory rules: not recursive (subdirectories are skipped), names starting with `.`
//! are skipped (editors' swap files, `kubectl`'s temporaries), only `*.yaml`, `*.yml`
//! and `*.json` are read, in name order. A path given as one file is read whatever its
//! name. Decoding and defaulting live in [`super::manifest`].
//!
//! Only regular files are read (after following links), never more than
//! [`MAX_MANIFEST_BYTES`], and without blocking: a FIFO or a device named `*.yaml` is
//! reported as a bad manifest, never opened for a blocking read ([`base::fsutil`]).
//! A file is decoded only when it changed: a tick first compares its inode, size and
//! times with the last read, then (if they differ, or were too fresh to trust) a hash
//! of its bytes; the last decoded result per file is kept, so an unchanged manifest
//! costs one `stat` per tick, not a parse.
//!
//! A manifest that stops parsing keeps the pods it last had (a half-written file must
//! not stop a running static pod); its error is returned by the tick, so the loop
//! registry shows it until the file is fixed. A deleted manifest's pods leave the
//! snapshot, and the merge removes them. A missing path gives an empty snapshot (the
//! source still counts as ready), logged once.
//!
//! Over 800 lines: 480 of them are its unit tests (FIFOs, caps, changes, inotify),
//! beside the reading rules they check.

use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeMap;
use std::hash::Hasher;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crossbeam_channel::Sender;
use k8s_openapi::api::core::v1::Pod;

use super::manifest::{
    self, DuplicateUid, Format, ManifestError, ManifestErrorKind, Origin, MAX_MANIFEST_BYTES,
};
use super::{Source, SourceUpdate};
use base::fsutil::{self, Fingerprint, ReadError};
use base::loops::{Loops, SpawnError};

/// The file extensions read from a manifest directory.
const MANIFEST_EXTENSIONS: &[&str] = &["yaml", "yml", "json"];

/// Why a tick of the file source is not clean. The snapshot was still sent (unless the
/// merge is gone), holding every good pod.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FileSourceError {
    /// These manifests cannot be used; each keeps the pods it last had. Shared with
    /// the cache, which reports an unchanged bad file again without decoding it.
    /// One line per bad file, so the registry and the log show them all.
    #[error("{}", one_per_line(.0))]
    Manifests(Vec<Arc<ManifestError>>),
    /// The path exists but cannot be listed; the last pods are kept.
    #[error("cannot list {path}: {source}")]
    List {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The pod config merge no longer listens (shutdown).
    #[error("the pod config merge is gone")]
    Disconnected,
}

/// The manifests' errors, one a line.
fn one_per_line(errors: &[Arc<ManifestError>]) -> String {
    let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
    lines.join("\n")
}

/// What the source knows of one manifest file between ticks.
#[derive(Debug, Default)]
struct Manifest {
    /// The pods of its last good read, stamped for the merge ([`stamp_file_pod`]);
    /// kept while the file is bad. Shared with the merge, which stores them as they are.
    pods: Option<Vec<Arc<Pod>>>,
    /// What its bytes looked like when last read, and how they decoded.
    seen: Option<Seen>,
    /// The indexes in `pods` of the pods left out of the snapshot because another
    /// pod has their UID ([`FileSource::claim_uids`]).
    refused: Vec<usize>,
}

/// The last bytes read from a manifest, by fingerprint and hash.
#[derive(Debug)]
struct Seen {
    fingerprint: Fingerprint,
    /// Whether the fingerprint was taken long enough after the file's last change to
    /// be trusted ([`Fingerprint::settled`]); if not, the bytes are hashed again.
    settled: bool,
    hash: u64,
    /// Their length.
    size: u64,
    /// The decode error of those bytes, reported again while they are unchanged.
    error: Option<Arc<ManifestError>>,
}

/// The file source's state between ticks: what each manifest last gave.
#[derive(Debug)]
pub(crate) struct FileSource {
    path: PathBuf,
    node_name: String,
    updates: Sender<SourceUpdate>,
    /// Per manifest file; ordered by path, so by file name.
    files: BTreeMap<PathBuf, Manifest>,
    /// Per pod UID, the manifest whose pod held it in the last snapshot: that file
    /// keeps it when another manifest's pod claims it too.
    uid_owners: BTreeMap<String, PathBuf>,
    /// Whether "path does not exist" was logged since the path was last seen.
    missing_logged: bool,
    /// Manifests decoded so far (a changed file counts once), for tests and debugging.
    decodes: u64,
    /// A large manifest was decoded, changed or removed: its pods (and the copies
    /// the sync loop and pod workers make) are freed on other threads over the next
    /// seconds, so freed memory is handed back again at the next tick.
    trim_next_tick: bool,
}

impl FileSource {
    /// A source for `path` (a directory or one file) on node `node_name`, sending its
    /// snapshots to `updates`.
    pub(crate) fn new(
        path: PathBuf,
        node_name: String,
        updates: Sender<SourceUpdate>,
    ) -> FileSource {
        FileSource {
            path: trim_trailing_slash(path),
            node_name,
            updates,
            files: BTreeMap::new(),
            uid_owners: BTreeMap::new(),
            missing_logged: false,
            decodes: 0,
            trim_next_tick: false,
        }
    }

    /// Re-reads every manifest and sends one snapshot of all pods. Err lists every bad
    /// manifest (the snapshot was sent all the same).
    pub(crate) fn tick(&mut self) -> Result<(), FileSourceError> {
        if std::mem::take(&mut self.trim_next_tick) {
            base::malloc::release_freed_memory();
        }
        let refreshed = self.refresh();
        let update = SourceUpdate {
            source: Source::File,
            pods: self.pods(),
            checkpoint: false,
        };
        self.updates
            .send(update)
            .map_err(|_| FileSourceError::Disconnected)?;
        refreshed
    }

    /// Every pod of every manifest, by file name then document order, less the pods
    /// refused for a UID another pod has.
    pub(crate) fn pods(&self) -> Vec<Arc<Pod>> {
        self.files
            .values()
            .flat_map(|m| {
                m.pods
                    .iter()
                    .flatten()
                    .enumerate()
                    .filter(|(i, _)| !m.refused.contains(i))
                    .map(|(_, p)| p.clone())
            })
            .collect()
    }

    #[cfg(test)]
    /// How many times a manifest's bytes were decoded (unchanged files are not).
    pub(crate) fn decodes(&self) -> u64 {
        self.decodes
    }

    /// Brings the per-file cache up to date with the disk.
    fn refresh(&mut self) -> Result<(), FileSourceError> {
        let listed = match self.list() {
            Ok(Some(files)) => files,
            Ok(None) => {
                self.files.clear();
                self.uid_owners.clear();
                return Ok(());
            }
            Err(source) => {
                return Err(FileSourceError::List {
                    path: self.path.clone(),
                    source,
                })
            }
        };
        let mut errors = Vec::new();
        let mut files = BTreeMap::new();
        for file in listed {
            let mut entry = self.files.remove(&file).unwrap_or_default();
            match self.load(&file, &mut entry) {
                // Deleted between the listing and the read: gone, not broken.
                Load::Gone => continue,
                Load::Ok => {}
                Load::Bad(e) => errors.push(e),
            }
            files.insert(file, entry);
        }
        // Large manifests gone since the last tick (removed, or unreadable now that
        // their pods were dropped): their memory is freed over the next seconds.
        let large = |m: &Manifest| m.seen.as_ref().is_some_and(|s| s.size >= TRIM_AFTER);
        if self.files.values().any(large) {
            self.trim_next_tick = true;
        }
        self.files = files;
        errors.extend(self.claim_uids());
        if errors.is_empty() {
            Ok(())
        } else {
            Err(FileSourceError::Manifests(errors))
        }
    }

    /// Gives each pod UID to one pod: the pod runs, and is known to the merge, the
    /// pod workers and the runtime's labels, by its UID, so two pods with one UID
    /// would take each other's sandbox and containers. A UID is derived per file
    /// (upstream's `applyDefaults`), so only manifests that write the same
    /// `metadata.uid` collide: the manifest that held the UID in the last snapshot
    /// keeps it (a new file cannot take a running pod's UID), else the first by file
    /// name and document; every other pod with it is refused, with an error naming
    /// both files. Deleting the refused one's file touches nothing; deleting the
    /// keeper's lets the next one in.
    fn claim_uids(&mut self) -> Vec<Arc<ManifestError>> {
        let previous = std::mem::take(&mut self.uid_owners);
        let uid = |p: &Pod| p.metadata.uid.clone().unwrap_or_default();
        // UID -> (file, index of its pod there, the pod's full name).
        let mut owners: BTreeMap<String, (PathBuf, usize, String)> = BTreeMap::new();
        for (file, m) in &self.files {
            for (i, p) in m.pods.iter().flatten().enumerate() {
                let u = uid(p);
                if previous.get(&u) == Some(file) && !owners.contains_key(&u) {
                    owners.insert(u, (file.clone(), i, super::full_name(p)));
                }
            }
        }
        let mut errors = Vec::new();
        for (file, m) in &mut self.files {
            m.refused.clear();
            for (i, p) in m.pods.iter().flatten().enumerate() {
                let u = uid(p);
                match owners.get(&u) {
                    None => {
                        owners.insert(u, (file.clone(), i, super::full_name(p)));
                    }
                    Some((f, j, _)) if f == file && *j == i => {}
                    Some((owner_file, _, owner)) => {
                        m.refused.push(i);
                        errors.push(Arc::new(ManifestError {
                            origin: file.display().to_string(),
                            document: None,
                            item: None,
                            kind: ManifestErrorKind::DuplicateUid(Box::new(DuplicateUid {
                                pod: super::full_name(p),
                                uid: u,
                                owner: owner.clone(),
                                owner_origin: owner_file.display().to_string(),
                            })),
                        }));
                    }
                }
            }
        }
        self.uid_owners = owners.into_iter().map(|(u, (f, _, _))| (u, f)).collect();
        errors
    }

    /// Brings one file's entry up to date: decodes it only if its bytes changed.
    fn load(&mut self, file: &Path, entry: &mut Manifest) -> Load {
        let fail = |kind| {
            Load::Bad(Arc::new(ManifestError {
                origin: file.display().to_string(),
                document: None,
                item: None,
                kind,
            }))
        };
        let read_failed = |e: ReadError| match e {
            _ if e.is_not_found() => Load::Gone,
            ReadError::TooLarge { .. } => fail(ManifestErrorKind::TooLarge),
            ReadError::Io(e) => fail(ManifestErrorKind::Read(e)),
            other => fail(ManifestErrorKind::Read(io::Error::other(other.to_string()))),
        };
        // A stat first: an unchanged file is not even opened.
        let meta = match fsutil::stat_regular(file) {
            Ok(m) => m,
            Err(e) => return read_failed(e),
        };
        if let Some(seen) = &entry.seen {
            if seen.settled && seen.fingerprint == Fingerprint::of(&meta) {
                return seen.error.clone().map_or(Load::Ok, Load::Bad);
            }
        }
        let (bytes, fingerprint) = match fsutil::read_regular(file, MAX_MANIFEST_BYTES) {
            Ok(read) => read,
            Err(e) => return read_failed(e),
        };
        let settled = fingerprint.settled(SystemTime::now());
        let hash = hash_bytes(&bytes);
        if let Some(seen) = &mut entry.seen {
            if seen.hash == hash {
                seen.fingerprint = fingerprint;
                seen.settled = settled;
                return seen.error.clone().map_or(Load::Ok, Load::Bad);
            }
        }
        self.decodes += 1;
        let size = bytes.len();
        let started = std::time::Instant::now();
        let decoded = match String::from_utf8(bytes) {
            Ok(text) => manifest::pods_from_str(
                &text,
                Format::of(file),
                Origin::File(file),
                &self.node_name,
            ),
            Err(_) => Err(ManifestError {
                origin: file.display().to_string(),
                document: None,
                item: None,
                kind: ManifestErrorKind::NotUtf8,
            }),
        };
        log::debug!(
            "decoded manifest path={file:?} bytes={size} took={:?}",
            started.elapsed()
        );
        if size >= base::malloc::TRIM_AFTER_BYTES {
            // The text and its YAML tree are dropped by now.
            base::malloc::release_freed_memory();
        }
        let error = match decoded {
            Ok(pods) => {
                let now = base::time::rfc3339_nano(std::time::SystemTime::now());
                let stamp = |mut p: Pod| {
                    super::stamp_file_pod(&mut p, &now);
                    Arc::new(p)
                };
                // Into a vector of its own size: `collect` from `pods.into_iter()`
                // would reuse the decoded pods' buffer for these pointers and keep a
                // whole `Pod`'s size (2 KiB) per pod for as long as the file is.
                let mut stamped = Vec::with_capacity(pods.len());
                stamped.extend(pods.into_iter().map(stamp));
                entry.pods = Some(stamped);
                None
            }
            Err(e) => Some(Arc::new(e)),
        };
        entry.seen = Some(Seen {
            fingerprint,
            settled,
            hash,
            size: size as u64,
            error: error.clone(),
        });
        if size >= base::malloc::TRIM_AFTER_BYTES {
            // The pods it replaced are freed on other threads over the next seconds.
            self.trim_next_tick = true;
        }
        error.map_or(Load::Ok, Load::Bad)
    }

    /// The manifest files under the path, sorted; None when the path does not exist.
    fn list(&mut self) -> io::Result<Option<Vec<PathBuf>>> {
        let meta = match std::fs::metadata(&self.path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if !self.missing_logged {
                    log::info!("path does not exist, ignoring path={:?}", self.path);
                    self.missing_logged = true;
                }
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        if self.missing_logged {
            log::info!("path exists now, reading it path={:?}", self.path);
            self.missing_logged = false;
        }
        if !meta.is_dir() {
            return Ok(Some(vec![self.path.clone()]));
        }
        let mut files = Vec::new();
        for entry in std::fs::read_dir(&self.path)? {
            let entry = entry?;
            let name = entry.file_name();
            let path = entry.path();
            if name.as_encoded_bytes().first() == Some(&b'.') {
                continue;
            }
            // Follow symlinks: a manifest may be a link into a versioned directory.
            match std::fs::metadata(&path) {
                Ok(m) if m.is_dir() => {
                    log::debug!("not recursing into manifest path path={path:?}");
                    continue;
                }
                Ok(_) => {}
                // A dangling link or a file deleted meanwhile: nothing to read.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                // Anything else shows up as that file's read error.
                Err(_) => {}
            }
            if is_manifest_name(&path) {
                files.push(path);
            } else {
                log::debug!("skipping non-manifest file path={path:?}");
            }
        }
        base::sort::sort(&mut files);
        Ok(Some(files))
    }
}

/// [`base::malloc::TRIM_AFTER_BYTES`] as a file size.
const TRIM_AFTER: u64 = base::malloc::TRIM_AFTER_BYTES as u64;

/// The outcome of [`FileSource::load`] for one file.
#[derive(Debug)]
enum Load {
    /// Its pods are current (or it has none).
    Ok,
    /// It vanished: drop it.
    Gone,
    /// It cannot be used; its last good pods (if any) are kept.
    Bad(Arc<ManifestError>),
}

/// A hash of a manifest's bytes, to tell a rewrite with the same content (a `touch`,
/// a config manager writing the same file again) from a change. SipHash with fixed
/// keys: stable within the process, which is all the cache needs.
fn hash_bytes(bytes: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    h.write(bytes);
    h.finish()
}

fn is_manifest_name(path: &Path) -> bool {
    path.extension().and_then(|e| e.to_str()).is_some_and(|e| {
        MANIFEST_EXTENSIONS
            .iter()
            .any(|m| e.eq_ignore_ascii_case(m))
    })
}

/// `/etc/kubernetes/manifests/` and `/etc/kubernetes/manifests` are one path (upstream
/// trims the separator); the file names joined to it must not differ.
fn trim_trailing_slash(path: PathBuf) -> PathBuf {
    let s = path.as_os_str().as_encoded_bytes();
    let trimmed = s.len() - s.iter().rev().take_while(|b| **b == b'/').count();
    if trimmed == 0 || trimmed == s.len() {
        return path;
    }
    path.components().collect()
}

/// Starts the file source: the `src-file` loop, a full re-read at once and every
/// `period`, and (on Linux) at once when its inotify watch sees a change.
pub(crate) fn start(
    loops: &Loops,
    path: PathBuf,
    node_name: String,
    period: Duration,
    updates: Sender<SourceUpdate>,
) -> Result<(), SpawnError> {
    log::info!("adding static pod path path={path:?}");
    let mut source = FileSource::new(path, node_name, updates);
    // Decodes manifests (serde_norway recursion): the big stack.
    let loops = loops.with_stack_size(base::loops::BIG_STACK);
    #[cfg(target_os = "linux")]
    loops.spawn_timed("src-file", period, move |stop, handle| {
        let watched = source.path.clone();
        watch::run(&stop, &handle, &watched, period, &mut || source.tick())
    })?;
    #[cfg(not(target_os = "linux"))]
    loops.spawn_periodic(
        base::loops::Periodic {
            name: "src-file".into(),
            period,
            wake: None,
        },
        move || source.tick(),
    )?;
    Ok(())
}

/// The `src-file` loop on Linux: ticks every period, and at once when inotify events
/// under the static pod path say something changed (upstream's `file_linux.go`
/// watcher). One thread: it waits in `poll(2)` on the inotify descriptor and the
/// shutdown descriptor with the time to the next periodic tick as its timeout, so an
/// idle source wakes once a period (it was a second thread, `src-file-watch`, that
/// woke every 500 ms to look for shutdown).
#[cfg(target_os = "linux")]
mod watch {
    use std::ffi::OsString;
    use std::io;
    use std::path::Path;
    use std::time::{Duration, Instant};

    use crate::podconfig::inotify::{Event, Inotify, Waited, WatchDescriptor, WATCH_MASK};
    use base::loops::{error_chain, LoopHandle, Stop};

    /// After an event, how long to wait for the rest of its burst (an editor's write,
    /// close and rename), so the tick reads a finished file once rather than a
    /// half-written one first.
    const SETTLE: Duration = Duration::from_millis(30);
    /// The most a burst may delay the wake.
    const SETTLE_MAX: Duration = Duration::from_millis(200);
    /// Upstream's watch-retry backoff: 1 s doubling to 20 s.
    pub(super) const RETRY_MIN: Duration = Duration::from_secs(1);
    pub(super) const RETRY_MAX: Duration = Duration::from_secs(20);

    /// What is watched: the path's directory, or the directory holding the one file.
    #[derive(Debug)]
    enum Target {
        Dir,
        FileIn { name: OsString },
    }

    #[derive(Debug)]
    struct Watch {
        inotify: Inotify,
        wd: WatchDescriptor,
        target: Target,
    }

    /// What a batch of events means.
    #[derive(Debug, Default, PartialEq)]
    struct Verdict {
        /// Something relevant changed: tick now.
        changed: bool,
        /// The watch is gone (the directory was deleted or moved): set it up again.
        lost: bool,
    }

    /// What one wait brought.
    enum Batch {
        Events(Vec<Event>),
        Timeout,
        Stop,
    }

    /// Runs until shutdown: the watch is set up (again) before the list it must not
    /// miss changes after, then `tick` runs at once, every `period`, and whenever the
    /// watch sees a change.
    pub(super) fn run<E: std::error::Error>(
        stop: &Stop,
        handle: &LoopHandle,
        path: &Path,
        period: Duration,
        tick: &mut dyn FnMut() -> Result<(), E>,
    ) {
        let mut backoff = RETRY_MIN;
        let mut watch: Option<Watch> = None;
        let mut retry_at = Instant::now();
        let mut due = Instant::now();
        loop {
            let now = Instant::now();
            if watch.is_none() && now >= retry_at {
                match establish(path) {
                    Ok(w) => {
                        log::debug!("watching {:?} for static pod changes", path);
                        watch = Some(w);
                        backoff = RETRY_MIN;
                        // Catch what changed while nothing watched.
                        due = now;
                    }
                    Err(e) => {
                        // A missing path is a normal state (the source logs it once).
                        if e.kind() != io::ErrorKind::NotFound {
                            log::warn!("{}: cannot watch {}: {e}", handle.name(), path.display());
                        }
                        retry_at = now + backoff;
                        backoff = (backoff * 2).min(RETRY_MAX);
                    }
                }
            }
            if now >= due {
                let began = handle.begin_tick();
                let err = tick().err().map(|e| error_chain(&e));
                handle.end_tick(began, err);
                due = Instant::now() + period;
            }
            let until = match watch {
                Some(_) => due,
                None => due.min(retry_at),
            };
            let timeout = until.saturating_duration_since(Instant::now());
            let Some(w) = &mut watch else {
                if stop.sleep(timeout) {
                    return;
                }
                continue;
            };
            match next_batch(&mut w.inotify, stop, timeout) {
                Ok(Batch::Stop) => return,
                Ok(Batch::Timeout) => {}
                Ok(Batch::Events(events)) => {
                    let verdict = judge(w, &events);
                    if verdict.lost {
                        log::debug!("lost the watch on {:?}; setting it up again", path);
                        watch = None;
                        retry_at = Instant::now();
                    }
                    if verdict.changed || verdict.lost {
                        due = Instant::now();
                    }
                }
                Err(e) => {
                    log::warn!("{}: inotify on {}: {e}", handle.name(), path.display());
                    watch = None;
                    retry_at = Instant::now() + backoff;
                }
            }
        }
    }

    /// Watches the path's directory (or, for a file, its parent directory).
    fn establish(path: &Path) -> io::Result<Watch> {
        let meta = std::fs::metadata(path)?;
        let inotify = Inotify::new()?;
        if meta.is_dir() {
            let wd = inotify.add_watch(path, WATCH_MASK | libc::IN_ONLYDIR)?;
            return Ok(Watch {
                inotify,
                wd,
                target: Target::Dir,
            });
        }
        let name = path
            .file_name()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?
            .to_os_string();
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let wd = inotify.add_watch(parent, WATCH_MASK | libc::IN_ONLYDIR)?;
        Ok(Watch {
            inotify,
            wd,
            target: Target::FileIn { name },
        })
    }

    /// Waits up to `timeout` for events (or shutdown), then gathers the rest of their
    /// burst.
    fn next_batch(inotify: &mut Inotify, stop: &Stop, timeout: Duration) -> io::Result<Batch> {
        match inotify.wait_or_stop(timeout, stop.fd())? {
            Waited::Stop => return Ok(Batch::Stop),
            Waited::Timeout => return Ok(Batch::Timeout),
            Waited::Events => {}
        }
        let mut events = inotify.read_events()?;
        let until = Instant::now() + SETTLE_MAX;
        while !settled(&events) && Instant::now() < until && inotify.wait(SETTLE)? {
            events.extend(inotify.read_events()?);
        }
        Ok(Batch::Events(events))
    }

    /// Whether a burst has ended in a finished file: its last event closes a write,
    /// renames a file in, deletes one or changes attributes, so no writer is
    /// left half-way. Then the tick need not wait [`SETTLE`] for more (an atomic
    /// rename, as editors and config managers write, is seen at once: 30 ms off every
    /// manifest's start); a burst that ends in a create or a write still settles.
    fn settled(events: &[Event]) -> bool {
        events.last().is_some_and(|e| {
            e.has(libc::IN_CLOSE_WRITE | libc::IN_MOVED_TO | libc::IN_DELETE | libc::IN_ATTRIB)
        })
    }

    /// Decides what a batch of events means for the static pod path.
    fn judge(w: &Watch, events: &[Event]) -> Verdict {
        let mut v = Verdict::default();
        for e in events {
            if e.has(libc::IN_Q_OVERFLOW) {
                // Events were dropped: re-list to be sure.
                v.changed = true;
                continue;
            }
            if e.wd != w.wd {
                continue; // a watch we dropped
            }
            if e.has(
                libc::IN_DELETE_SELF | libc::IN_MOVE_SELF | libc::IN_IGNORED | libc::IN_UNMOUNT,
            ) {
                v.lost = true;
                continue;
            }
            let Some(name) = &e.name else {
                // The directory's own attributes: harmless to re-list.
                v.changed = true;
                continue;
            };
            if name.as_encoded_bytes().first() == Some(&b'.') {
                continue; // hidden files are never manifests
            }
            match &w.target {
                // Subdirectories are never read.
                Target::Dir => v.changed |= !e.has(libc::IN_ISDIR),
                Target::FileIn { name: file } if name == file => {
                    v.changed = true;
                    // The file became a directory: watch that instead.
                    v.lost |= e.has(libc::IN_ISDIR);
                }
                Target::FileIn { .. } => {}
            }
        }
        v
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn ev(wd: &WatchDescriptor, mask: u32, name: Option<&str>) -> Event {
            Event {
                wd: *wd,
                mask,
                cookie: 0,
                name: name.map(OsString::from),
            }
        }

        #[test]
        fn a_burst_is_settled_once_its_last_event_finishes_a_file() {
            let w = establish(&std::env::temp_dir()).expect("watch the temp dir");
            let wd = w.wd;
            let atomic = [
                ev(&wd, libc::IN_CREATE, Some(".a.yaml.tmp")),
                ev(&wd, libc::IN_MODIFY, Some(".a.yaml.tmp")),
                ev(&wd, libc::IN_CLOSE_WRITE, Some(".a.yaml.tmp")),
                ev(&wd, libc::IN_MOVED_FROM, Some(".a.yaml.tmp")),
            ];
            assert!(!settled(&atomic), "renamed out, not yet in");
            let mut done = atomic.to_vec();
            done.push(ev(&wd, libc::IN_MOVED_TO, Some("a.yaml")));
            assert!(settled(&done));
            assert!(!settled(&atomic[..2]), "still being written");
            assert!(settled(&atomic[..3]));
            assert!(settled(&[ev(&wd, libc::IN_DELETE, Some("a.yaml"))]));
            assert!(!settled(&[]));
        }

        #[test]
        fn judge_filters_hidden_files_subdirectories_and_other_names() {
            let dir = std::env::temp_dir();
            let w = establish(&dir).expect("watch the temp dir");
            let wd = w.wd;
            let changed = Verdict {
                changed: true,
                lost: false,
            };
            assert_eq!(
                judge(&w, &[ev(&wd, libc::IN_CLOSE_WRITE, Some("a.yaml"))]),
                changed
            );
            assert_eq!(
                judge(&w, &[ev(&wd, libc::IN_MODIFY, Some(".a.yaml.swp"))]),
                Verdict::default()
            );
            assert_eq!(
                judge(
                    &w,
                    &[ev(&wd, libc::IN_CREATE | libc::IN_ISDIR, Some("sub"))]
                ),
                Verdict::default()
            );
            assert!(judge(&w, &[ev(&wd, libc::IN_DELETE_SELF, None)]).lost);
            let file_w = Watch {
                target: Target::FileIn {
                    name: "web.yaml".into(),
                },
                ..w
            };
            assert_eq!(
                judge(&file_w, &[ev(&wd, libc::IN_MOVED_TO, Some("web.yaml"))]),
                changed
            );
            assert_eq!(
                judge(&file_w, &[ev(&wd, libc::IN_MOVED_TO, Some("other.yaml"))]),
                Verdict::default()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base::loops::shutdown_channel;
    use crossbeam_channel::Receiver;
    use std::time::Instant;

    use base::testutil::TempDir;

    fn pod(name: &str, image: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  labels: {{app: {name}}}\n\
             spec:\n  containers:\n  - name: c\n    image: {image}\n"
        )
    }

    fn source(path: &Path, node: &str) -> (FileSource, Receiver<SourceUpdate>) {
        let (tx, rx) = crossbeam_channel::unbounded();
        (FileSource::new(path.to_path_buf(), node.into(), tx), rx)
    }

    /// One tick: its result and the snapshot it sent.
    fn tick(
        src: &mut FileSource,
        rx: &Receiver<SourceUpdate>,
    ) -> (Result<(), String>, Vec<Arc<Pod>>) {
        let r = src.tick().map_err(|e| e.to_string());
        let update = rx.try_recv().expect("every tick sends a snapshot");
        assert_eq!(update.source, Source::File);
        assert!(rx.try_recv().is_err(), "exactly one snapshot per tick");
        (r, update.pods)
    }

    fn names(pods: &[Arc<Pod>]) -> Vec<String> {
        pods.iter()
            .map(|p| p.metadata.name.clone().unwrap_or_default())
            .collect()
    }

    fn uid_of(pods: &[Arc<Pod>], name: &str) -> String {
        pods.iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .and_then(|p| p.metadata.uid.clone())
            .unwrap_or_else(|| panic!("no pod {name} in {:?}", names(pods)))
    }

    #[test]
    fn reads_yaml_multi_document_pod_lists_and_json_in_name_order() {
        let dir = TempDir::new("formats");
        dir.write(
            "b-multi.yaml",
            &format!("{}---\n---\n{}", pod("b1", "i"), pod("b2", "i")),
        );
        dir.write(
            "c-list.yml",
            "apiVersion: v1\nkind: PodList\nitems:\n\
             - metadata: {name: c1}\n  spec: {containers: [{name: c, image: i}]}\n\
             - metadata: {name: c2}\n  spec: {containers: [{name: c, image: i}]}\n",
        );
        dir.write(
            "a.json",
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"i"}]}}"#,
        );
        let (mut src, rx) = source(&dir.0, "Node-X");
        let (r, pods) = tick(&mut src, &rx);
        assert_eq!(r, Ok(()));
        assert_eq!(
            names(&pods),
            [
                "a-node-x",
                "b1-node-x",
                "b2-node-x",
                "c1-node-x",
                "c2-node-x"
            ]
        );
        for p in &pods {
            assert_eq!(p.metadata.namespace.as_deref(), Some("default"));
            assert_eq!(
                p.spec.as_ref().and_then(|s| s.node_name.as_deref()),
                Some("Node-X")
            );
        }
    }

    #[test]
    fn skips_hidden_files_subdirectories_and_other_extensions() {
        let dir = TempDir::new("skips");
        dir.write("web.yaml", &pod("web", "i"));
        dir.write(".hidden.yaml", &pod("hidden", "i"));
        dir.write(".web.yaml.swp", "binary junk");
        dir.write("notes.txt", "not yaml: [");
        dir.write("web.yaml~", &pod("backup", "i"));
        std::fs::create_dir(dir.0.join("sub.yaml")).expect("mkdir");
        std::fs::write(dir.0.join("sub.yaml").join("inner.yaml"), pod("inner", "i"))
            .expect("write");
        let (mut src, rx) = source(&dir.0, "n");
        let (r, pods) = tick(&mut src, &rx);
        assert_eq!(r, Ok(()));
        assert_eq!(names(&pods), ["web-n"]);
    }

    #[test]
    fn a_single_file_path_and_a_trailing_slash_work() {
        let dir = TempDir::new("single");
        let file = dir.write("pod.manifest", &pod("one", "i"));
        dir.write("other.yaml", &pod("other", "i"));
        let (mut src, rx) = source(&file, "n");
        assert_eq!(names(&tick(&mut src, &rx).1), ["one-n"]);

        let with_slash = PathBuf::from(format!("{}/", dir.0.display()));
        let (mut a, rx_a) = source(&with_slash, "n");
        let (mut b, rx_b) = source(&dir.0, "n");
        let (pa, pb) = (tick(&mut a, &rx_a).1, tick(&mut b, &rx_b).1);
        assert_eq!(
            uid_of(&pa, "other-n"),
            uid_of(&pb, "other-n"),
            "same files, same uids"
        );
    }

    #[test]
    fn uid_is_stable_and_follows_node_path_and_non_container_edits() {
        let dir = TempDir::new("uid");
        dir.write("web.yaml", &pod("web", "busybox:1"));
        let (mut src, rx) = source(&dir.0, "n");
        let first = uid_of(&tick(&mut src, &rx).1, "web-n");
        assert_eq!(
            uid_of(&tick(&mut src, &rx).1, "web-n"),
            first,
            "a re-read keeps it"
        );
        let (mut again, rx2) = source(&dir.0, "n");
        assert_eq!(
            uid_of(&tick(&mut again, &rx2).1, "web-n"),
            first,
            "a restart keeps it"
        );

        let (mut other_node, rx3) = source(&dir.0, "m");
        assert_ne!(
            uid_of(&tick(&mut other_node, &rx3).1, "web-m"),
            first,
            "another node"
        );

        dir.write("web-copy.yaml", &pod("web", "busybox:1"));
        let both = tick(&mut src, &rx).1;
        let uids: Vec<_> = both.iter().filter_map(|p| p.metadata.uid.clone()).collect();
        assert_eq!(uids.len(), 2);
        assert_ne!(uids[0], uids[1], "another path");
        dir.remove("web-copy.yaml");

        dir.write("web.yaml", &pod("web", "busybox:2"));
        assert_eq!(
            uid_of(&tick(&mut src, &rx).1, "web-n"),
            first,
            "an image edit keeps it"
        );

        dir.write(
            "web.yaml",
            &pod("web", "busybox:2").replace("app: web", "app: other"),
        );
        assert_ne!(
            uid_of(&tick(&mut src, &rx).1, "web-n"),
            first,
            "a label edit changes it"
        );
    }

    #[test]
    fn an_explicit_uid_is_kept() {
        let dir = TempDir::new("explicit");
        dir.write(
            "web.yaml",
            &pod("web", "i").replace("  name: web\n", "  name: web\n  uid: abc-123\n"),
        );
        let (mut src, rx) = source(&dir.0, "n");
        assert_eq!(uid_of(&tick(&mut src, &rx).1, "web-n"), "abc-123");
    }

    #[test]
    fn a_uid_another_manifest_has_is_refused_and_the_holder_keeps_it() {
        let dir = TempDir::new("dupuid");
        let with_uid = |name: &str| {
            pod(name, "i").replace(
                &format!("  name: {name}\n"),
                &format!("  name: {name}\n  uid: same\n"),
            )
        };
        // A later file (by name) arrives first and runs.
        let m = dir.write("m.yaml", &with_uid("m"));
        let (mut src, rx) = source(&dir.0, "n");
        let (r, pods) = tick(&mut src, &rx);
        assert_eq!((r, names(&pods)), (Ok(()), vec!["m-n".to_string()]));
        // One before it and one after it by name, with the same uid: both refused,
        // each error naming its file and the holder's.
        let a = dir.write("a.yaml", &with_uid("a"));
        let z = dir.write(
            "z.yaml",
            &format!("{}---\n{}", with_uid("z"), pod("other", "i")),
        );
        let (r, pods) = tick(&mut src, &rx);
        assert_eq!(names(&pods), ["m-n", "other-n"], "the holder keeps the uid");
        let msg = r.expect_err("two refused pods");
        let want = |file: &Path, name: &str| {
            format!(
                "{}: pod {name}_default has uid \"same\", already the uid of pod m-n_default from {}; ignoring it (a uid names one pod: drop `metadata.uid` to have one derived from the file)",
                file.display(),
                m.display()
            )
        };
        assert_eq!(
            msg.lines().collect::<Vec<_>>(),
            [want(&a, "a-n"), want(&z, "z-n")]
        );
        // Refused again on the next tick, though nothing changed.
        assert_eq!(names(&tick(&mut src, &rx).1), ["m-n", "other-n"]);
        // Deleting a refused file touches nothing, and its error goes.
        dir.remove("z.yaml");
        let (r, pods) = tick(&mut src, &rx);
        assert_eq!(names(&pods), ["m-n"]);
        assert_eq!(r.expect_err("a.yaml still refused").lines().count(), 1);
        // Deleting the holder lets the next one (by name) in, cleanly.
        dir.remove("m.yaml");
        let (r, pods) = tick(&mut src, &rx);
        assert_eq!((r, names(&pods)), (Ok(()), vec!["a-n".to_string()]));
        // Two documents of one file with one uid: the first keeps it.
        dir.write(
            "a.yaml",
            &format!("{}---\n{}", with_uid("a"), with_uid("b")),
        );
        let (r, pods) = tick(&mut src, &rx);
        assert_eq!(names(&pods), ["a-n"]);
        assert!(
            r.expect_err("b refused")
                .ends_with(&format!("already the uid of pod a-n_default from {}; ignoring it (a uid names one pod: drop `metadata.uid` to have one derived from the file)", a.display())),
        );
    }

    #[test]
    fn a_bad_document_is_reported_with_file_index_and_reason() {
        let dir = TempDir::new("bad");
        let bad = dir.write(
            "bad.yaml",
            &format!("{}---\nkind: Pod\nspec: {{}}\n", pod("a", "i")),
        );
        let broken = dir.write("broken.yaml", "kind: Pod\nmetadata: {name: [\n");
        dir.write("good.yaml", &pod("good", "i"));
        let (mut src, rx) = source(&dir.0, "n");
        let (r, pods) = tick(&mut src, &rx);
        assert_eq!(
            names(&pods),
            ["good-n"],
            "a bad file gives no pods, the others load"
        );
        let msg = r.expect_err("two bad files");
        let lines: Vec<_> = msg.lines().collect();
        assert_eq!(lines.len(), 2, "{msg}");
        assert_eq!(
            lines[0],
            format!(
                "{}: document 1: invalid pod: name is needed for the pod",
                bad.display()
            )
        );
        assert!(
            lines[1].starts_with(&format!("{}: document 0: invalid YAML: ", broken.display())),
            "{msg}"
        );
        assert!(lines[1].contains(" at line 3 column "), "{msg}");
    }

    #[test]
    fn a_file_that_turns_bad_keeps_its_last_good_pods_until_fixed() {
        let dir = TempDir::new("turnsbad");
        dir.write(
            "web.yaml",
            &format!("{}---\n{}", pod("web", "i:1"), pod("db", "i:1")),
        );
        let (mut src, rx) = source(&dir.0, "n");
        let (r, good) = tick(&mut src, &rx);
        assert_eq!(r, Ok(()));
        dir.write(
            "web.yaml",
            &format!("{}---\n{}", pod("web", "i:2"), "kind: Pod\n"),
        );
        let (r, kept) = tick(&mut src, &rx);
        assert!(r.is_err());
        assert_eq!(names(&kept), ["web-n", "db-n"]);
        assert_eq!(kept, good, "the whole file's last good pods, unchanged");
        dir.write("web.yaml", &pod("web", "i:3"));
        let (r, fixed) = tick(&mut src, &rx);
        assert_eq!(r, Ok(()), "fixed: the error clears");
        assert_eq!(names(&fixed), ["web-n"]);
    }

    #[test]
    fn a_deleted_file_takes_its_pods_away() {
        let dir = TempDir::new("deleted");
        dir.write("a.yaml", &pod("a", "i"));
        dir.write("b.yaml", &pod("b", "i"));
        let (mut src, rx) = source(&dir.0, "n");
        assert_eq!(names(&tick(&mut src, &rx).1), ["a-n", "b-n"]);
        dir.remove("a.yaml");
        assert_eq!(names(&tick(&mut src, &rx).1), ["b-n"]);
    }

    #[test]
    fn a_missing_path_gives_an_empty_snapshot_and_is_picked_up_later() {
        let dir = TempDir::new("missing");
        let path = dir.0.join("manifests");
        let (mut src, rx) = source(&path, "n");
        for _ in 0..2 {
            let (r, pods) = tick(&mut src, &rx);
            assert_eq!(r, Ok(()));
            assert!(pods.is_empty());
        }
        assert!(src.missing_logged, "logged once, not again");
        std::fs::create_dir(&path).expect("mkdir");
        std::fs::write(path.join("a.yaml"), pod("a", "i")).expect("write");
        assert_eq!(names(&tick(&mut src, &rx).1), ["a-n"]);
        assert!(!src.missing_logged);
        std::fs::remove_dir_all(&path).expect("rm");
        assert!(
            tick(&mut src, &rx).1.is_empty(),
            "a removed directory's pods go"
        );
    }

    #[test]
    fn a_closed_merge_is_an_error() {
        let dir = TempDir::new("closed");
        let (mut src, rx) = source(&dir.0, "n");
        drop(rx);
        assert!(matches!(src.tick(), Err(FileSourceError::Disconnected)));
    }

    fn mkfifo(path: &Path) {
        use rustix::fs::{mkfifoat, Mode, CWD};
        mkfifoat(CWD, path, Mode::from_raw_mode(0o644)).expect("mkfifo");
    }

    /// Runs `f` on another thread and fails (rather than hangs) if it blocks.
    fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = crossbeam_channel::bounded(1);
        std::thread::Builder::new()
            .name("test-within".into())
            .spawn(move || {
                let _ = tx.send(f());
            })
            .expect("spawn");
        rx.recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("{what} blocked"))
    }

    #[test]
    fn a_fifo_in_the_directory_is_reported_and_never_blocks_the_others() {
        let dir = TempDir::new("fifo");
        dir.write("a.yaml", &pod("a", "i"));
        let fifo = dir.0.join("zz.yaml");
        mkfifo(&fifo);
        let path = dir.0.clone();
        let (r, pods, src) = within("a tick over a FIFO", move || {
            let (mut src, rx) = source(&path, "n");
            let (r, pods) = tick(&mut src, &rx);
            (r, pods, src)
        });
        assert_eq!(names(&pods), ["a-n"]);
        assert_eq!(
            r,
            Err(format!(
                "{}: cannot read: is a FIFO, not a regular file",
                fifo.display()
            ))
        );
        drop(src);
        // The file itself as the path: refused the same way, without blocking.
        let (r, pods) = within("a FIFO as the path", move || {
            let (mut src, rx) = source(&fifo, "n");
            tick(&mut src, &rx)
        });
        assert!(pods.is_empty());
        assert!(r
            .expect_err("a FIFO")
            .ends_with("is a FIFO, not a regular file"));
    }

    #[test]
    fn a_manifest_over_the_cap_is_refused_before_it_is_read() {
        let dir = TempDir::new("big");
        let mut text = pod("big", "i");
        let pad = usize::try_from(MAX_MANIFEST_BYTES).expect("fits") + 1 - text.len();
        text.push_str(&format!("# {}\n", "x".repeat(pad)));
        let big = dir.write("big.yaml", &text);
        let (mut src, rx) = source(&dir.0, "n");
        let (r, pods) = tick(&mut src, &rx);
        assert!(pods.is_empty());
        assert_eq!(
            r,
            Err(format!("{}: larger than 3 MiB, not read", big.display()))
        );
        assert_eq!(src.decodes(), 0, "never decoded");
    }

    #[test]
    fn an_unchanged_manifest_is_decoded_once() {
        let dir = TempDir::new("cache");
        let web = dir.write("web.yaml", &pod("web", "i:1"));
        dir.write("bad.yaml", "kind: Pod\n");
        let (mut src, rx) = source(&dir.0, "n");
        let (r1, first) = tick(&mut src, &rx);
        assert_eq!(src.decodes(), 2);
        for _ in 0..5 {
            let (r, pods) = tick(&mut src, &rx);
            assert_eq!(pods, first, "the cached pods");
            assert_eq!(r, r1, "a bad file is still reported");
        }
        assert_eq!(src.decodes(), 2, "nothing decoded again");

        // The same bytes written again (a new mtime, maybe a new inode): hashed, not
        // decoded.
        dir.write("web.yaml", &pod("web", "i:1"));
        assert_eq!(tick(&mut src, &rx).1, first);
        assert_eq!(src.decodes(), 2);

        // Same size, written at once (possibly the same mtime tick): still seen.
        dir.write("web.yaml", &pod("web", "i:2"));
        let (_, pods) = tick(&mut src, &rx);
        assert_eq!(src.decodes(), 3);
        let image = pods[0].spec.as_ref().map(|s| s.containers[0].image.clone());
        assert_eq!(image, Some(Some("i:2".to_string())));
        assert_eq!(
            std::fs::metadata(&web).expect("stat").len() as usize,
            pod("web", "i:2").len()
        );
    }

    fn wait_for_pods(rx: &Receiver<SourceUpdate>, want: &[&str], deadline: Duration) -> Duration {
        let start = Instant::now();
        loop {
            let left = deadline.saturating_sub(start.elapsed());
            let update = rx
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no snapshot with {want:?} within {deadline:?}"));
            if names(&update.pods) == want {
                return start.elapsed();
            }
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_watcher_ticks_soon_after_a_file_is_written() {
        let dir = TempDir::new("watch");
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop);
        let (wake_tx, wake_rx) = crossbeam_channel::bounded(1);
        let watched = dir.0.clone();
        loops
            .spawn_timed(
                "test-watch",
                Duration::from_secs(3600),
                move |stop, handle| {
                    let mut tick = || {
                        let _ = wake_tx.try_send(());
                        Ok::<(), std::io::Error>(())
                    };
                    watch::run(
                        &stop,
                        &handle,
                        &watched,
                        Duration::from_secs(3600),
                        &mut tick,
                    )
                },
            )
            .expect("spawn");
        // The first tick comes once the watch is set up.
        wake_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("watch established");
        dir.write(".hidden.yaml", "x");
        dir.write("web.yaml", &pod("web", "i"));
        let t = Instant::now();
        wake_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("ticked after the write");
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "ticked in {:?}",
            t.elapsed()
        );
        shutdown.trigger();
        // Its wait's timeout is the hour to the next tick: only the shutdown
        // descriptor can end it in time.
        assert!(
            loops.join_all(Duration::from_secs(5)).is_empty(),
            "stops at shutdown"
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn start_picks_up_changes_quickly_and_a_directory_created_later() {
        let dir = TempDir::new("start");
        let path = dir.0.join("manifests");
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop);
        let (tx, rx) = crossbeam_channel::unbounded();
        // A period far beyond the test: only the watcher can make it tick again.
        start(
            &loops,
            path.clone(),
            "n".into(),
            Duration::from_secs(3600),
            tx,
        )
        .expect("start");
        let first = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("first snapshot");
        assert!(first.pods.is_empty(), "missing path: one empty snapshot");
        // The watch was tried (and failed: no directory) before that first list, so
        // the directory is found by its retry.
        let registry = loops.registry();

        std::fs::create_dir(&path).expect("mkdir");
        std::fs::write(path.join("a.yaml"), pod("a", "i")).expect("write");
        // Picked up by the watch retry, after its first 1 s backoff.
        let took = wait_for_pods(&rx, &["a-n"], Duration::from_secs(10));
        assert!(
            took < watch::RETRY_MIN * 2,
            "found by the first retry, in {took:?}"
        );

        std::fs::write(path.join("b.yaml"), pod("b", "i")).expect("write");
        let took = wait_for_pods(&rx, &["a-n", "b-n"], Duration::from_secs(10));
        assert!(took < Duration::from_secs(1), "an edit is seen in {took:?}");

        std::fs::remove_file(path.join("a.yaml")).expect("rm");
        let took = wait_for_pods(&rx, &["b-n"], Duration::from_secs(10));
        assert!(
            took < Duration::from_secs(1),
            "a deletion is seen in {took:?}"
        );

        assert!(registry.get("src-file").is_some_and(|s| s.ticks >= 3));
        assert!(
            registry.get("src-file-watch").is_none(),
            "the watch runs on src-file's own thread"
        );
        shutdown.trigger();
        assert!(loops.join_all(Duration::from_secs(5)).is_empty());
    }
}
