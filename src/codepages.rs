//! rkubelet's own code pages in its resident set. Start-up and pod churn map most of
//! the binary's code and read-only data (a page fault maps 64 KiB around it), and
//! those pages then stay resident though an idle node runs a small part of them. Once
//! a minute housekeeping drops the read-only pages of the binary and of the C library
//! from this process's page tables ([`drop_code_pages`]); the next use of a page
//! maps it again from the page cache, so what stays resident is what the loops run.
//! The link order puts that code together (`build.rs`, `hack/idle-order.txt`), so it
//! is a few hundred KiB rather than pages spread over the whole binary.
//!
//! Only mappings that hold no page of their own are dropped: a private mapping's page
//! that was written (relocations, a debugger's breakpoint) is anonymous memory that
//! dropping would lose; a mapping with any such page is left as it is.

use std::io;

/// A read-only mapping of a file in `/proc/self/smaps`, with the resident figures
/// [`drop_code_pages`] needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// Its address range, as smaps prints it (under qemu-user, the host's: wider than
    /// a 32-bit guest's `usize`).
    pub start: u64,
    pub end: u64,
    /// The file's path as smaps shows it.
    pub path: String,
    /// Resident kB.
    pub rss_kb: u64,
    /// kB of pages of this process's own (written, or never backed by the file).
    pub anonymous_kb: u64,
}

/// The private, read-only mappings of files (code `r-xp`, constants `r--p`) in a
/// `/proc/PID/smaps` text, in its order.
pub fn read_only_file_mappings(smaps: &str) -> Vec<Mapping> {
    let mut out = Vec::new();
    // The mapping the field lines belong to: None for one that is not wanted.
    let mut current: Option<Mapping> = None;
    for line in smaps.lines() {
        if let Some(m) = header(line) {
            out.extend(current.take());
            current = m;
            continue;
        }
        let Some(m) = current.as_mut() else { continue };
        let mut fields = line.split_whitespace();
        let (Some(key), Some(value)) = (fields.next(), fields.next()) else {
            continue;
        };
        let Ok(kb) = value.parse::<u64>() else {
            continue;
        };
        match key {
            "Rss:" => m.rss_kb = kb,
            "Anonymous:" => m.anonymous_kb = kb,
            _ => {}
        }
    }
    out.extend(current);
    out
}

/// A mapping's header line: `Some(Some(..))` for a wanted mapping, `Some(None)` for
/// another mapping, `None` for a field line.
fn header(line: &str) -> Option<Option<Mapping>> {
    let mut parts = line.split_whitespace();
    let range = parts.next()?;
    let (start, end) = range.split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    let perms = parts.next()?;
    let (_offset, _dev, inode) = (parts.next()?, parts.next()?, parts.next()?);
    let path = parts.collect::<Vec<_>>().join(" ");
    let wanted = matches!(perms, "r-xp" | "r--p") && inode != "0" && path.starts_with('/');
    Some(wanted.then_some(Mapping {
        start,
        end,
        path,
        rss_kb: 0,
        anonymous_kb: 0,
    }))
}

/// The mappings [`drop_code_pages`] drops: those of the files whose code holds
/// one of `addresses` (this binary, the C library: mapped for the process's whole
/// life, so none is unmapped and reused between the read and the drop), with no
/// anonymous page.
pub fn droppable(mappings: &[Mapping], addresses: &[u64]) -> Vec<Mapping> {
    let files: Vec<&str> = mappings
        .iter()
        .filter(|m| addresses.iter().any(|&a| m.start <= a && a < m.end))
        .map(|m| m.path.as_str())
        .collect();
    mappings
        .iter()
        .filter(|m| files.contains(&m.path.as_str()) && m.anonymous_kb == 0 && m.rss_kb > 0)
        .cloned()
        .collect()
}

/// [`drop_code_pages`], saying at debug level what it did.
pub fn release_unused_code() {
    match drop_code_pages() {
        Ok(kb) => log::debug!("Released {kb} kB of resident code pages"),
        Err(e) => log::debug!("Code pages not released: reading /proc/self/smaps: {e}"),
    }
}

/// Drops the resident pages of this binary's and the C library's read-only mappings
/// from this process's page tables (see the module). Returns the kB that were
/// resident in them. Linux only; elsewhere nothing.
pub fn drop_code_pages() -> io::Result<u64> {
    #[cfg(target_os = "linux")]
    {
        let smaps = std::fs::read_to_string("/proc/self/smaps")?;
        let ours = drop_code_pages as fn() -> io::Result<u64> as usize as u64;
        let libc = libc::madvise as unsafe extern "C" fn(_, _, _) -> _ as usize as u64;
        let mut dropped = 0;
        for m in droppable(&read_only_file_mappings(&smaps), &[ours, libc]) {
            let (Ok(start), Ok(end)) = (usize::try_from(m.start), usize::try_from(m.end)) else {
                continue;
            };
            // SAFETY: the range is a whole private mapping of a file that is neither
            // writable nor holds a page of this process's own (anonymous 0 kB, and no
            // write can add one to a read-only mapping), and it belongs to this binary
            // or the C library, which stay mapped for the process's life. Dropping its
            // pages loses nothing: the next access maps the same bytes from the file.
            // (Only a debugger's breakpoint written between the read and this call
            // would be lost, the original instruction coming back.)
            let rc = unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED)
            };
            if rc == 0 {
                dropped += m.rss_kb;
            } else {
                log::debug!(
                    "code pages of {} not released: {}",
                    m.path,
                    io::Error::last_os_error()
                );
            }
        }
        Ok(dropped)
    }
    #[cfg(not(target_os = "linux"))]
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
55d0a0000000-55d0a0100000 r--p 00000000 08:01 4242                       /usr/local/bin/rkubelet
Size:               1024 kB
Rss:                 900 kB
Anonymous:             0 kB
55d0a0100000-55d0a0500000 r-xp 00100000 08:01 4242                       /usr/local/bin/rkubelet
Size:               4096 kB
Rss:                3000 kB
Anonymous:             0 kB
55d0a0500000-55d0a0540000 r--p 00500000 08:01 4242                       /usr/local/bin/rkubelet
Size:                256 kB
Rss:                 256 kB
Anonymous:           120 kB
55d0a0540000-55d0a0550000 rw-p 00540000 08:01 4242                       /usr/local/bin/rkubelet
Rss:                  64 kB
Anonymous:            64 kB
55d0a1000000-55d0a1100000 rw-p 00000000 00:00 0                          [heap]
Rss:                 400 kB
Anonymous:           400 kB
7f0000000000-7f0000100000 r-xp 00000000 08:01 77                         /usr/lib/x86_64-linux-gnu/libc.so.6
Rss:                1500 kB
Anonymous:             0 kB
7f0000200000-7f0000210000 r-xp 00000000 08:01 88                         /usr/lib/other lib.so
Rss:                  20 kB
Anonymous:             0 kB
7fff00000000-7fff00002000 r-xp 00000000 00:00 0                          [vdso]
Rss:                   4 kB
Anonymous:             0 kB
";

    #[test]
    fn only_read_only_file_mappings_are_read_with_their_figures() {
        let ms = read_only_file_mappings(SMAPS);
        let got: Vec<(u64, &str, u64, u64)> = ms
            .iter()
            .map(|m| (m.start, m.path.as_str(), m.rss_kb, m.anonymous_kb))
            .collect();
        assert_eq!(
            got,
            [
                (0x55d0a0000000, "/usr/local/bin/rkubelet", 900, 0),
                (0x55d0a0100000, "/usr/local/bin/rkubelet", 3000, 0),
                (0x55d0a0500000, "/usr/local/bin/rkubelet", 256, 120),
                (
                    0x7f0000000000,
                    "/usr/lib/x86_64-linux-gnu/libc.so.6",
                    1500,
                    0
                ),
                (0x7f0000200000, "/usr/lib/other lib.so", 20, 0),
            ]
        );
    }

    #[test]
    fn only_the_files_holding_the_addresses_and_no_written_page_are_dropped() {
        let ms = read_only_file_mappings(SMAPS);
        let starts: Vec<u64> = droppable(&ms, &[0x55d0a0123456, 0x7f0000000100])
            .iter()
            .map(|m| m.start)
            .collect();
        // Not the relocated constants (anonymous pages), not another library.
        assert_eq!(starts, [0x55d0a0000000, 0x55d0a0100000, 0x7f0000000000]);
        assert!(droppable(&ms, &[0x1000]).is_empty());
    }

    #[test]
    fn this_process_drops_its_code_and_runs_on() {
        let kb = drop_code_pages().expect("release");
        assert!(kb > 0, "the test binary's code was resident");
        // The code runs again from the file: this very function, called once more.
        drop_code_pages().expect("release again");
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
        let ours = drop_code_pages as fn() -> io::Result<u64> as usize as u64;
        let text = read_only_file_mappings(&smaps)
            .into_iter()
            .find(|m| m.start <= ours && ours < m.end)
            .expect("this binary's code");
        assert!(text.rss_kb > 0);
    }
}
