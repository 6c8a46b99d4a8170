//! The image preload directory (`imagePreloadDir`, rkubelet's own): image archives
//! (`docker save` or OCI layout tarballs, optionally compressed) loaded into the
//! runtime, for boards that have no registry to pull from.
//!
//! Every regular file in the directory whose name does not start with a dot is an
//! archive. It is loaded at start, before the sources start, so pods that need its
//! images find them; then the `image-preload` loop looks again every
//! [`PRELOAD_PERIOD`] and loads a new or changed archive once it has stopped changing
//! (its fingerprint settled: a file still being copied in waits). An archive is loaded
//! once per content: the same file is not loaded again at the next pass or restart of
//! the loop (after a restart of rkubelet it is, which the runtime answers quickly:
//! the layers are there). An archive that cannot be loaded is logged once, naming the
//! file and the runtime's reason, and stays the loop's warning (`/healthz?verbose`)
//! until it is removed or replaced; the other archives load. While the runtime cannot
//! be reached nothing is recorded, and the next pass tries again.
//!
//! The images an archive loaded are kept from image GC for as long as the archive is
//! in the directory ([`Protected`]).

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use base::fsutil::{self, Fingerprint};
use base::loops::lock;
use runtime::{Runtime, RuntimeError};

/// How often the directory is looked at again.
pub(crate) const PRELOAD_PERIOD: Duration = Duration::from_secs(10);

/// What a pass could not load (the loop's error): one line per archive, or the
/// directory's own.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct PreloadError(String);

/// The image IDs image GC leaves alone: those of the archives in the directory.
#[derive(Debug, Default)]
pub(crate) struct Protected(Mutex<HashSet<String>>);

impl Protected {
    /// The protected image IDs now.
    pub(crate) fn ids(&self) -> HashSet<String> {
        lock(&self.0).clone()
    }
}

/// What became of one archive.
#[derive(Debug)]
struct Archive {
    /// The file as it was when it was loaded (or refused).
    fingerprint: Fingerprint,
    /// The IDs of the images it loaded; empty when it was refused.
    images: Vec<String>,
    /// Why it was refused.
    failed: Option<String>,
}

/// The directory's archives, and what each loaded.
#[derive(Debug)]
pub(crate) struct Preloader {
    dir: PathBuf,
    runtime: Arc<dyn Runtime>,
    archives: BTreeMap<PathBuf, Archive>,
    protected: Arc<Protected>,
}

impl Preloader {
    /// A preloader of `dir`; nothing is read yet.
    pub(crate) fn new(dir: PathBuf, runtime: Arc<dyn Runtime>) -> Preloader {
        Preloader {
            dir,
            runtime,
            archives: BTreeMap::new(),
            protected: Arc::default(),
        }
    }

    /// The image IDs the archives loaded, shared with image GC.
    pub(crate) fn protected(&self) -> Arc<Protected> {
        self.protected.clone()
    }

    /// One pass: loads each new or changed archive that has settled, forgets removed
    /// ones. Err: the archives that could not be loaded (or the directory), one line each.
    pub(crate) fn scan(&mut self, now: SystemTime) -> Result<(), PreloadError> {
        let present = match archives_in(&self.dir) {
            Ok(p) => p,
            Err(e) => {
                return Err(PreloadError(format!(
                    "image preload directory {}: {e}",
                    self.dir.display()
                )))
            }
        };
        self.archives.retain(|path, _| present.contains_key(path));
        for (path, fingerprint) in &present {
            let known = self
                .archives
                .get(path)
                .is_some_and(|a| a.fingerprint == *fingerprint);
            if known || !fingerprint.settled(now) {
                continue;
            }
            match self.load(path) {
                Ok(images) => {
                    self.archives.insert(
                        path.clone(),
                        Archive {
                            fingerprint: *fingerprint,
                            images,
                            failed: None,
                        },
                    );
                }
                Err(Load::RuntimeAway(e)) => {
                    // Tried again at the next pass.
                    return Err(PreloadError(format!(
                        "image archive {}: the runtime cannot be reached: {e}",
                        path.display()
                    )));
                }
                Err(Load::Refused(why)) => {
                    log::error!(
                        "image archive {}: cannot be loaded: {why}; the other archives load",
                        path.display()
                    );
                    self.archives.insert(
                        path.clone(),
                        Archive {
                            fingerprint: *fingerprint,
                            images: Vec::new(),
                            failed: Some(why),
                        },
                    );
                }
            }
        }
        *lock(&self.protected.0) = self
            .archives
            .values()
            .flat_map(|a| a.images.iter().cloned())
            .collect();
        let failed: Vec<String> = self
            .archives
            .iter()
            .filter_map(|(p, a)| {
                let why = a.failed.as_ref()?;
                Some(format!("image archive {}: {why}", p.display()))
            })
            .collect();
        if failed.is_empty() {
            Ok(())
        } else {
            Err(PreloadError(failed.join("; ")))
        }
    }

    /// Loads one archive; the IDs of the images it holds.
    fn load(&self, path: &Path) -> Result<Vec<String>, Load> {
        let mut file = std::fs::File::open(path).map_err(|e| Load::Refused(e.to_string()))?;
        let len = file
            .metadata()
            .map_err(|e| Load::Refused(e.to_string()))?
            .len();
        let began = std::time::Instant::now();
        let names = self
            .runtime
            .load_image((&mut file, len))
            .map_err(|e| match e {
                RuntimeError::Unavailable { .. } => Load::RuntimeAway(e.to_string()),
                other => Load::Refused(other.to_string()),
            })?;
        if names.is_empty() {
            return Err(Load::Refused("the runtime loaded no image from it".into()));
        }
        log::info!(
            "loaded image archive {} ({} bytes, {:?}): {}",
            path.display(),
            len,
            began.elapsed(),
            names.join(", ")
        );
        let mut ids = Vec::new();
        for name in &names {
            match self.runtime.inspect_image(name) {
                Ok(Some(image)) => ids.push(image.id),
                Ok(None) => log::warn!(
                    "image archive {}: the runtime loaded {name} but does not list it",
                    path.display()
                ),
                Err(e) => log::warn!("image archive {}: {name}: {e}", path.display()),
            }
        }
        Ok(ids)
    }
}

/// Why an archive did not load.
enum Load {
    /// The runtime could not be asked: try again.
    RuntimeAway(String),
    /// The runtime (or the file) refused it: not again until it changes.
    Refused(String),
}

/// The archives in `dir`: regular files not named with a leading dot, with their
/// fingerprints. A missing directory holds none.
fn archives_in(dir: &Path) -> std::io::Result<BTreeMap<PathBuf, Fingerprint>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) => return Err(e),
    };
    let mut out = BTreeMap::new();
    for entry in entries {
        let path = entry?.path();
        let hidden = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_none_or(|n| n.starts_with('.'));
        if hidden {
            continue;
        }
        if let Ok(meta) = fsutil::stat_regular(&path) {
            out.insert(path, Fingerprint::of(&meta));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use base::testutil::TempDir;
    use runtime::fake::{FakeClock, FakeRuntime};

    fn later() -> SystemTime {
        SystemTime::now() + Duration::from_secs(5)
    }

    #[test]
    fn archives_load_once_and_protect_their_images_while_present() {
        let dir = TempDir::new("preload");
        let fake = Arc::new(FakeRuntime::new(FakeClock::default()));
        let mut p = Preloader::new(dir.0.clone(), fake.clone());
        let protected = p.protected();
        assert!(p.scan(later()).is_ok(), "no directory holds no archive");

        dir.write("apps.tar", "example.com/app:1\nexample.com/tool:2\n");
        dir.write(".partial.tar", "example.com/hidden:1\n");
        assert!(p.scan(later()).is_ok());
        let app = fake
            .inspect_image("example.com/app:1")
            .expect("inspect")
            .expect("loaded");
        assert!(fake
            .inspect_image("example.com/hidden:1")
            .expect("inspect")
            .is_none());
        assert_eq!(protected.ids().len(), 2);
        assert!(protected.ids().contains(&app.id));

        // Not loaded again while unchanged.
        fake.remove_image("example.com/app:1").expect("remove");
        assert!(p.scan(later()).is_ok());
        assert!(fake
            .inspect_image("example.com/app:1")
            .expect("inspect")
            .is_none());

        // Removed: its images are no longer protected.
        dir.remove("apps.tar");
        assert!(p.scan(later()).is_ok());
        assert!(protected.ids().is_empty());
    }

    #[test]
    fn a_broken_archive_is_named_and_the_others_load() {
        let dir = TempDir::new("preload");
        let fake = Arc::new(FakeRuntime::new(FakeClock::default()));
        let mut p = Preloader::new(dir.0.clone(), fake.clone());
        dir.write("a-broken.tar", "");
        dir.write("b-good.tar", "example.com/good:1\n");
        let err = p
            .scan(later())
            .expect_err("the broken archive is reported")
            .to_string();
        assert!(err.contains("a-broken.tar"), "{err}");
        assert!(err.contains("invalid tar header"), "{err}");
        assert!(fake
            .inspect_image("example.com/good:1")
            .expect("inspect")
            .is_some());
        // Still reported at the next pass, not loaded again; fixed, it loads.
        assert!(p.scan(later()).is_err());
        dir.write("a-broken.tar", "example.com/fixed:1\n");
        assert!(p.scan(later()).is_ok());
        assert!(fake
            .inspect_image("example.com/fixed:1")
            .expect("inspect")
            .is_some());
    }

    #[test]
    fn a_file_still_being_written_waits_for_the_next_pass() {
        let dir = TempDir::new("preload");
        let fake = Arc::new(FakeRuntime::new(FakeClock::default()));
        let mut p = Preloader::new(dir.0.clone(), fake.clone());
        dir.write("new.tar", "example.com/new:1\n");
        assert!(p.scan(SystemTime::now() - Duration::from_secs(5)).is_ok());
        assert!(fake
            .inspect_image("example.com/new:1")
            .expect("inspect")
            .is_none());
        assert!(p.scan(later()).is_ok());
        assert!(fake
            .inspect_image("example.com/new:1")
            .expect("inspect")
            .is_some());
    }
}
