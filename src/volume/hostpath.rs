//! The `hostPath` volume (upstream `pkg/volume/hostpath`): the node's own path, mounted
//! as it is, after its `type` is checked (`checkType`, `typeMatchedOrError`):
//! `DirectoryOrCreate` and `FileOrCreate` create what is missing (0755 / 0644; a file's
//! parent must exist), the other types must already be what they say, and an unset
//! type checks nothing (Docker then creates a missing path as a directory).

use std::io;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

/// What is at a path, as upstream's `GetFileType` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FileKind {
    /// A directory.
    Directory,
    /// A regular file.
    File,
    /// A Unix socket.
    Socket,
    /// A character device.
    CharDevice,
    /// A block device.
    BlockDevice,
    /// Anything else (a FIFO): upstream cannot name it.
    Other,
}

impl FileKind {
    fn name(self) -> &'static str {
        match self {
            FileKind::Directory => "Directory",
            FileKind::File => "File",
            FileKind::Socket => "Socket",
            FileKind::CharDevice => "CharDevice",
            FileKind::BlockDevice => "BlockDevice",
            FileKind::Other => "",
        }
    }
}

/// What the type check needs from the filesystem; the real one is [`Host`], tests use
/// a table.
pub(crate) trait PathProbe {
    /// What is at `path` (following symlinks), None if nothing.
    fn kind(&self, path: &Path) -> Option<FileKind>;
    /// `mkdir -p` with mode 0755.
    fn make_dir(&self, path: &Path) -> io::Result<()>;
    /// Creates an empty file with mode 0644 (the parent must exist).
    fn make_file(&self, path: &Path) -> io::Result<()>;
}

/// The node's filesystem.
#[derive(Debug)]
pub(crate) struct Host;

impl PathProbe for Host {
    fn kind(&self, path: &Path) -> Option<FileKind> {
        let t = std::fs::metadata(path).ok()?.file_type();
        Some(if t.is_dir() {
            FileKind::Directory
        } else if t.is_file() {
            FileKind::File
        } else if t.is_socket() {
            FileKind::Socket
        } else if t.is_char_device() {
            FileKind::CharDevice
        } else if t.is_block_device() {
            FileKind::BlockDevice
        } else {
            FileKind::Other
        })
    }

    fn make_dir(&self, path: &Path) -> io::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(path)
    }

    fn make_file(&self, path: &Path) -> io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(path)
        {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// Checks (and for the `…OrCreate` types, creates) a hostPath volume's path before any
/// container mounts it. Err is upstream's message.
pub(crate) fn set_up(path: &str, type_: Option<&str>, probe: &dyn PathProbe) -> Result<(), String> {
    if path.split('/').any(|p| p == "..") {
        return Err(format!("invalid HostPath `{path}`: must not contain '..'"));
    }
    let p = Path::new(path);
    let expect = |kind: FileKind, what: &str| -> Result<(), String> {
        match probe.kind(p) {
            None => Err(format!("hostPath {path} doesn't exist")),
            Some(FileKind::Other) => Err(format!(
                "hostPath type check failed, {path} is not a {what}, unable to determine its type: only recognise file, directory, socket, block device and character device"
            )),
            Some(k) if k == kind => Ok(()),
            Some(k) => Err(format!(
                "hostPath type check failed: {path} is not a {what}, it's a {}",
                k.name()
            )),
        }
    };
    match type_.unwrap_or("") {
        "" => Ok(()),
        "DirectoryOrCreate" if probe.kind(p).is_none() => probe
            .make_dir(p)
            .map_err(|e| format!("cannot create directory {path}: {e}")),
        "DirectoryOrCreate" | "Directory" => expect(FileKind::Directory, "directory"),
        "FileOrCreate" if probe.kind(p).is_none() => probe
            .make_file(p)
            .map_err(|e| format!("cannot create file {path}: {e}")),
        "FileOrCreate" | "File" => expect(FileKind::File, "file"),
        "Socket" => expect(FileKind::Socket, "socket file"),
        "CharDevice" => expect(FileKind::CharDevice, "character device"),
        "BlockDevice" => expect(FileKind::BlockDevice, "block device"),
        other => Err(format!("{other} is an invalid volume type")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::path::PathBuf;

    #[derive(Default)]
    struct Table {
        kinds: RefCell<HashMap<PathBuf, FileKind>>,
        created: RefCell<Vec<String>>,
    }

    impl Table {
        fn with(entries: &[(&str, FileKind)]) -> Table {
            let t = Table::default();
            for (p, k) in entries {
                t.kinds.borrow_mut().insert(PathBuf::from(p), *k);
            }
            t
        }
    }

    impl PathProbe for Table {
        fn kind(&self, path: &Path) -> Option<FileKind> {
            self.kinds.borrow().get(path).copied()
        }
        fn make_dir(&self, path: &Path) -> io::Result<()> {
            self.created
                .borrow_mut()
                .push(format!("dir {}", path.display()));
            self.kinds
                .borrow_mut()
                .insert(path.to_path_buf(), FileKind::Directory);
            Ok(())
        }
        fn make_file(&self, path: &Path) -> io::Result<()> {
            if self.kind(path.parent().unwrap_or(Path::new("/"))).is_none() {
                return Err(io::Error::from(io::ErrorKind::NotFound));
            }
            self.created
                .borrow_mut()
                .push(format!("file {}", path.display()));
            Ok(())
        }
    }

    #[test]
    fn every_type_is_checked_as_upstream() {
        use FileKind::*;
        let fs = [
            ("/d", Directory),
            ("/f", File),
            ("/s", Socket),
            ("/c", CharDevice),
            ("/b", BlockDevice),
            ("/fifo", Other),
        ];
        let cases: &[(&str, &str, Result<(), &str>)] = &[
            ("/d", "", Ok(())),
            ("/nope", "", Ok(())),
            ("/d", "Directory", Ok(())),
            ("/d", "DirectoryOrCreate", Ok(())),
            ("/f", "File", Ok(())),
            ("/f", "FileOrCreate", Ok(())),
            ("/s", "Socket", Ok(())),
            ("/c", "CharDevice", Ok(())),
            ("/b", "BlockDevice", Ok(())),
            (
                "/f",
                "Directory",
                Err("hostPath type check failed: /f is not a directory, it's a File"),
            ),
            (
                "/f",
                "DirectoryOrCreate",
                Err("hostPath type check failed: /f is not a directory, it's a File"),
            ),
            (
                "/d",
                "File",
                Err("hostPath type check failed: /d is not a file, it's a Directory"),
            ),
            (
                "/d",
                "FileOrCreate",
                Err("hostPath type check failed: /d is not a file, it's a Directory"),
            ),
            ("/nope", "Directory", Err("hostPath /nope doesn't exist")),
            ("/nope", "File", Err("hostPath /nope doesn't exist")),
            ("/nope", "Socket", Err("hostPath /nope doesn't exist")),
            (
                "/f",
                "Socket",
                Err("hostPath type check failed: /f is not a socket file, it's a File"),
            ),
            (
                "/b",
                "CharDevice",
                Err("hostPath type check failed: /b is not a character device, it's a BlockDevice"),
            ),
            (
                "/c",
                "BlockDevice",
                Err("hostPath type check failed: /c is not a block device, it's a CharDevice"),
            ),
            (
                "/fifo",
                "File",
                Err("hostPath type check failed, /fifo is not a file, unable to determine its type: only recognise file, directory, socket, block device and character device"),
            ),
            ("/d", "Bogus", Err("Bogus is an invalid volume type")),
            (
                "/d/../etc",
                "",
                Err("invalid HostPath `/d/../etc`: must not contain '..'"),
            ),
        ];
        for (path, ty, want) in cases {
            let t = Table::with(&fs);
            let got = set_up(path, Some(ty), &t);
            assert_eq!(got, want.map_err(str::to_string), "{path} {ty}");
            assert!(
                t.created.borrow().is_empty(),
                "{path} {ty} created something"
            );
        }
    }

    #[test]
    fn or_create_types_create_what_is_missing() {
        let t = Table::with(&[("/", FileKind::Directory), ("/d", FileKind::Directory)]);
        assert_eq!(set_up("/d/new/deep", Some("DirectoryOrCreate"), &t), Ok(()));
        assert_eq!(set_up("/d/file", Some("FileOrCreate"), &t), Ok(()));
        assert_eq!(
            *t.created.borrow(),
            vec!["dir /d/new/deep".to_string(), "file /d/file".to_string()]
        );
        // FileOrCreate does not create the parent directory.
        let err = set_up("/missing/file", Some("FileOrCreate"), &t).expect_err("no parent");
        assert!(err.starts_with("cannot create file /missing/file"), "{err}");
    }
}
