//! The kubelet as its own pause image. rkubelet runs on small boards that often reach
//! no registry; when the configured `--pod-infra-container-image` is absent and its
//! pull fails, a statically linked rkubelet imports itself into Docker as a one-file
//! image (`/rkubelet`, mode 0755, `ENTRYPOINT ["/rkubelet","pause"]`, see
//! [`crate::pause`]) tagged with the configured name, and pods run. Upstream has no
//! such fallback: its sandbox image must come from a registry or be loaded by hand.
//!
//! Only a static binary can do this: a dynamic one needs its loader and libraries,
//! which the one-file image does not have. "Static" is read from the running binary
//! itself (`/proc/self/exe`): an ELF file without a `PT_INTERP` program header is
//! started by the kernel alone (static and static-pie both), whatever it was built
//! with. The tar is streamed to the engine (header, the file, padding), never held in
//! memory whole.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::Path;

use runtime::{Runtime, RuntimeError};

/// The running binary.
pub(crate) const SELF_EXE: &str = "/proc/self/exe";
/// The binary's path inside the image.
pub(crate) const PATH_IN_IMAGE: &str = "rkubelet";
/// The image's entrypoint: the binary as a pause process.
pub(crate) const ENTRYPOINT: &str = r#"ENTRYPOINT ["/rkubelet","pause"]"#;

/// ELF's `PT_INTERP`: the program header naming the dynamic loader.
const PT_INTERP: u32 = 3;
/// A program header table larger than this is refused (real ones are a few hundred
/// bytes; the bound keeps a corrupt header from sizing an allocation).
const MAX_PHDRS_BYTES: usize = 64 * 1024;
/// The loader's path is read up to this length (for the error message only).
const MAX_INTERP: u64 = 4096;
/// tar's block size.
const BLOCK: u64 = 512;

/// Why rkubelet could not import itself.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SelfImportError {
    /// The running binary could not be read.
    #[error("cannot read the running binary {SELF_EXE}")]
    Exe {
        /// What failed.
        source: io::Error,
    },
    /// The running binary is not an ELF file this code can read.
    #[error("{SELF_EXE} is not a usable ELF file: {0}")]
    NotElf(String),
    /// The running binary is dynamically linked: it needs a loader the image lacks.
    #[error(
        "rkubelet is dynamically linked (interpreter {interpreter}) and cannot be its \
             own pause image; run a static build (e.g. --target x86_64-unknown-linux-musl) \
             or make the image available"
    )]
    Dynamic {
        /// The `PT_INTERP` path.
        interpreter: String,
    },
    /// The tar header could not be made.
    #[error("cannot make the image's tar header")]
    Tar(#[source] io::Error),
    /// The engine refused or failed the import.
    #[error("the engine did not import it")]
    Runtime(#[source] RuntimeError),
}

/// The fields of an ELF header that locate its program headers.
#[derive(Debug, PartialEq, Eq)]
struct ElfHeader {
    class64: bool,
    little: bool,
    phoff: u64,
    phentsize: usize,
    phnum: usize,
}

/// Reads `N` bytes at `at` as an unsigned number of the file's byte order.
fn uint(b: &[u8], at: usize, n: usize, little: bool) -> Result<u64, String> {
    let s = b
        .get(at..at.saturating_add(n))
        .ok_or_else(|| format!("truncated at byte {at}"))?;
    let mut v: u64 = 0;
    for i in 0..n {
        let byte = if little { s[n - 1 - i] } else { s[i] };
        v = (v << 8) | u64::from(byte);
    }
    Ok(v)
}

/// Parses the ELF identification and the program header table's place.
fn parse_header(h: &[u8]) -> Result<ElfHeader, String> {
    if h.get(..4) != Some(b"\x7fELF".as_slice()) {
        return Err("no ELF magic".into());
    }
    let class64 = match h.get(4) {
        Some(1) => false,
        Some(2) => true,
        other => return Err(format!("unknown ELF class {other:?}")),
    };
    let little = match h.get(5) {
        Some(1) => true,
        Some(2) => false,
        other => return Err(format!("unknown ELF byte order {other:?}")),
    };
    let (phoff, entsize_at, num_at, off_len) = if class64 {
        (0x20, 0x36, 0x38, 8)
    } else {
        (0x1c, 0x2a, 0x2c, 4)
    };
    let phoff = uint(h, phoff, off_len, little)?;
    let phentsize = usize::try_from(uint(h, entsize_at, 2, little)?).map_err(|e| e.to_string())?;
    let phnum = usize::try_from(uint(h, num_at, 2, little)?).map_err(|e| e.to_string())?;
    let min_entry = if class64 { 56 } else { 32 };
    if phnum > 0 && phentsize < min_entry {
        return Err(format!("program header entries of {phentsize} bytes"));
    }
    if phnum == 0xffff {
        return Err("extended program header numbering".into());
    }
    Ok(ElfHeader {
        class64,
        little,
        phoff,
        phentsize,
        phnum,
    })
}

/// The `PT_INTERP` segment's file offset and size, if the table has one.
fn find_interp(h: &ElfHeader, table: &[u8]) -> Result<Option<(u64, u64)>, String> {
    for i in 0..h.phnum {
        let at = i.saturating_mul(h.phentsize);
        if uint(table, at, 4, h.little)? != u64::from(PT_INTERP) {
            continue;
        }
        let (off, size) = if h.class64 {
            (
                uint(table, at + 8, 8, h.little)?,
                uint(table, at + 0x20, 8, h.little)?,
            )
        } else {
            (
                uint(table, at + 4, 4, h.little)?,
                uint(table, at + 0x10, 4, h.little)?,
            )
        };
        return Ok(Some((off, size)));
    }
    Ok(None)
}

/// The dynamic loader `file` names (its `PT_INTERP`), or None for a static binary.
pub(crate) fn interpreter(file: &File) -> Result<Option<String>, SelfImportError> {
    let mut head = [0u8; 64];
    file.read_exact_at(&mut head, 0)
        .map_err(|e| SelfImportError::NotElf(format!("reading its header: {e}")))?;
    let h = parse_header(&head).map_err(SelfImportError::NotElf)?;
    let len = h.phentsize.saturating_mul(h.phnum);
    if len > MAX_PHDRS_BYTES {
        return Err(SelfImportError::NotElf(format!(
            "a program header table of {len} bytes"
        )));
    }
    let mut table = vec![0u8; len];
    file.read_exact_at(&mut table, h.phoff)
        .map_err(|e| SelfImportError::NotElf(format!("reading its program headers: {e}")))?;
    let Some((off, size)) = find_interp(&h, &table).map_err(SelfImportError::NotElf)? else {
        return Ok(None);
    };
    let mut path = vec![0u8; usize::try_from(size.min(MAX_INTERP)).unwrap_or(0)];
    // The path is only for the message: an unreadable one still means "dynamic".
    if file.read_exact_at(&mut path, off).is_err() {
        return Ok(Some("(unreadable)".into()));
    }
    let end = path.iter().position(|b| *b == 0).unwrap_or(path.len());
    Ok(Some(String::from_utf8_lossy(&path[..end]).into_owned()))
}

/// The image's tar as a stream: one ustar header for `PATH_IN_IMAGE` (mode 0755,
/// root-owned, `size` bytes), the binary from `exe`, padding to a block, and the two
/// zero blocks that end an archive. Returns the stream and its exact length.
pub(crate) fn image_tar<R: Read>(
    exe: R,
    size: u64,
    mtime: u64,
) -> Result<(impl Read, u64), SelfImportError> {
    let mut header = tar::Header::new_ustar();
    header
        .set_path(PATH_IN_IMAGE)
        .map_err(SelfImportError::Tar)?;
    header.set_size(size);
    header.set_mode(0o755);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(mtime);
    header.set_entry_type(tar::EntryType::Regular);
    header.set_cksum();
    let pad = (BLOCK - size % BLOCK) % BLOCK;
    let trailer = pad.saturating_add(2 * BLOCK);
    let total = BLOCK.saturating_add(size).saturating_add(trailer);
    let stream = io::Cursor::new(header.as_bytes().to_vec())
        .chain(exe.take(size))
        .chain(io::repeat(0).take(trailer));
    Ok((stream, total))
}

/// Imports the running binary as `image` with the pause entrypoint, if it is static.
/// Returns the binary's size.
pub(crate) fn import_self(runtime: &dyn Runtime, image: &str) -> Result<u64, SelfImportError> {
    import_exe(runtime, Path::new(SELF_EXE), image)
}

/// [`import_self`] for the binary at `exe` (tests give another file).
pub(crate) fn import_exe(
    runtime: &dyn Runtime,
    exe: &Path,
    image: &str,
) -> Result<u64, SelfImportError> {
    let file = File::open(exe).map_err(|source| SelfImportError::Exe { source })?;
    if let Some(interpreter) = interpreter(&file)? {
        return Err(SelfImportError::Dynamic { interpreter });
    }
    let meta = file
        .metadata()
        .map_err(|source| SelfImportError::Exe { source })?;
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    let size = meta.len();
    let (mut tar, len) = image_tar(file, size, mtime)?;
    runtime
        .import_image(image, &[ENTRYPOINT.to_string()], (&mut tar, len))
        .map_err(SelfImportError::Runtime)?;
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use runtime::fake::{FakeClock, FakeRuntime};

    /// A minimal ELF header and program header table: `interp` adds a PT_INTERP.
    fn elf(class64: bool, little: bool, interp: Option<&str>) -> Vec<u8> {
        let put = |b: &mut Vec<u8>, at: usize, n: usize, v: u64| {
            for i in 0..n {
                let shift = if little { 8 * i } else { 8 * (n - 1 - i) };
                b[at + i] = ((v >> shift) & 0xff) as u8;
            }
        };
        let (ehsize, phentsize) = if class64 { (64, 56) } else { (52, 32) };
        let phnum = if interp.is_some() { 2 } else { 1 };
        let table_end = ehsize + phentsize * phnum;
        let mut b = vec![0u8; table_end + 64];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = if class64 { 2 } else { 1 };
        b[5] = if little { 1 } else { 2 };
        let (phoff_at, entsize_at, num_at, off_len) = if class64 {
            (0x20, 0x36, 0x38, 8)
        } else {
            (0x1c, 0x2a, 0x2c, 4)
        };
        put(&mut b, phoff_at, off_len, ehsize as u64);
        put(&mut b, entsize_at, 2, phentsize as u64);
        put(&mut b, num_at, 2, phnum as u64);
        // The first program header is a PT_LOAD (1) either way.
        put(&mut b, ehsize, 4, 1);
        if let Some(path) = interp {
            let at = ehsize + phentsize;
            put(&mut b, at, 4, u64::from(PT_INTERP));
            let (off_at, size_at, n) = if class64 { (8, 0x20, 8) } else { (4, 0x10, 4) };
            put(&mut b, at + off_at, n, table_end as u64);
            put(&mut b, at + size_at, n, path.len() as u64 + 1);
            b[table_end..table_end + path.len()].copy_from_slice(path.as_bytes());
        }
        b
    }

    fn interp_of(bytes: &[u8]) -> Result<Option<String>, SelfImportError> {
        let dir = base::testutil::TempDir::new("selfimport");
        let path = dir.0.join("exe");
        std::fs::write(&path, bytes).expect("write");
        interpreter(&File::open(&path).expect("open"))
    }

    #[test]
    fn static_is_no_pt_interp_in_every_class_and_byte_order() {
        for class64 in [true, false] {
            for little in [true, false] {
                let what = format!("class64={class64} little={little}");
                let st = interp_of(&elf(class64, little, None)).expect(&what);
                assert_eq!(st, None, "{what}");
                let dynamic =
                    interp_of(&elf(class64, little, Some("/lib/ld-musl-armhf.so.1"))).expect(&what);
                assert_eq!(
                    dynamic.as_deref(),
                    Some("/lib/ld-musl-armhf.so.1"),
                    "{what}"
                );
            }
        }
    }

    #[test]
    fn the_test_binary_is_dynamic_and_junk_is_not_elf() {
        // `cargo test` builds for the host's glibc target: a dynamic executable.
        let me = File::open(SELF_EXE).expect("open self");
        let interp = interpreter(&me).expect("our own ELF header");
        assert!(
            interp.as_deref().is_some_and(|p| p.contains("ld-")),
            "{interp:?}"
        );
        assert!(matches!(
            interp_of(b"#!/bin/sh\necho hi\n"),
            Err(SelfImportError::NotElf(_))
        ));
        let mut truncated = elf(true, true, None);
        truncated.truncate(70);
        assert!(matches!(
            interp_of(&truncated),
            Err(SelfImportError::NotElf(_))
        ));
        let mut huge = elf(true, true, None);
        huge[0x38] = 0xfe;
        huge[0x39] = 0xff;
        assert!(matches!(interp_of(&huge), Err(SelfImportError::NotElf(_))));
    }

    #[test]
    fn the_tar_holds_the_binary_alone_executable_and_block_aligned() {
        let body: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        let (mut stream, len) = image_tar(body.as_slice(), 1000, 1_700_000_000).expect("tar");
        let mut bytes = Vec::new();
        stream.read_to_end(&mut bytes).expect("read");
        assert_eq!(bytes.len() as u64, len, "the announced length is exact");
        assert_eq!(len % BLOCK, 0);
        assert_eq!(len, 512 + 1024 + 1024, "header, two blocks of data, end");
        assert!(bytes[bytes.len() - 1024..].iter().all(|b| *b == 0));
        let mut archive = tar::Archive::new(bytes.as_slice());
        let mut entries = archive.entries().expect("entries");
        let mut e = entries.next().expect("one entry").expect("entry");
        assert_eq!(e.path().expect("path").to_str(), Some("rkubelet"));
        assert_eq!(e.header().mode().expect("mode"), 0o755);
        assert_eq!(e.header().uid().expect("uid"), 0);
        assert_eq!(e.header().entry_type(), tar::EntryType::Regular);
        let mut content = Vec::new();
        e.read_to_end(&mut content).expect("content");
        assert_eq!(content, body);
        drop(e);
        assert!(entries.next().is_none(), "nothing else in the image");

        // A size on a block boundary gets no padding.
        let (_, len) = image_tar(io::empty(), 1024, 0).expect("tar");
        assert_eq!(len, 512 + 1024 + 1024);
    }

    #[test]
    fn a_dynamic_binary_is_not_imported() {
        let rt = FakeRuntime::new(FakeClock::default());
        let err =
            import_self(&rt, "rkubelet-test/pause:1").expect_err("the test binary is dynamic");
        assert!(matches!(err, SelfImportError::Dynamic { .. }), "{err}");
        assert!(err.to_string().contains("dynamically linked"), "{err}");
        assert!(rt.imports().is_empty());
    }

    #[test]
    fn a_static_binary_is_imported_with_the_pause_entrypoint() {
        let dir = base::testutil::TempDir::new("selfimport");
        let exe = dir.0.join("rkubelet");
        let bytes = elf(true, true, None);
        std::fs::write(&exe, &bytes).expect("write");
        let rt = FakeRuntime::new(FakeClock::default());
        let size = import_exe(&rt, &exe, "rkubelet-test/pause:1").expect("import");
        assert_eq!(size, bytes.len() as u64);
        let imports = rt.imports();
        assert_eq!(imports.len(), 1);
        let (image, changes, tar_bytes) = &imports[0];
        assert_eq!(image, "rkubelet-test/pause:1");
        assert_eq!(
            changes,
            &[r#"ENTRYPOINT ["/rkubelet","pause"]"#.to_string()]
        );
        let mut archive = tar::Archive::new(tar_bytes.as_slice());
        let mut e = archive
            .entries()
            .expect("entries")
            .next()
            .expect("entry")
            .expect("entry");
        let mut content = Vec::new();
        e.read_to_end(&mut content).expect("content");
        assert_eq!(content, bytes);
    }
}
