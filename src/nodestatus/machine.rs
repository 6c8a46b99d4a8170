//! The machine's facts the node status reports, read once at start (upstream reads
//! them from cAdvisor's `MachineInfo` and `VersionInfo`): online CPUs, `MemTotal`, the
//! size of the filesystem holding `--root-dir`, hugepage pools, machine-id, DMI product
//! UUID, boot id, kernel release, the OS image. Every file is optional: a fact that
//! cannot be read is left empty (or zero) and logged at debug, as upstream leaves a
//! field empty when cAdvisor lacks it.

use std::path::Path;

/// What does not change while the kubelet runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct MachineInfo {
    /// Online CPUs.
    pub cpus: u64,
    /// `MemTotal` in bytes.
    pub memory_bytes: u64,
    /// Size of the filesystem holding the root directory, in bytes (None: unknown).
    pub ephemeral_storage_bytes: Option<u64>,
    /// Hugepage pools: (page size in bytes, pages).
    pub hugepages: Vec<(u64, u64)>,
    /// `/etc/machine-id`.
    pub machine_id: String,
    /// `/sys/class/dmi/id/product_uuid` (root-only on most hosts; empty if unreadable).
    pub system_uuid: String,
    /// `/proc/sys/kernel/random/boot_id`.
    pub boot_id: String,
    /// `uname -r`.
    pub kernel_version: String,
    /// `PRETTY_NAME` of `/etc/os-release`.
    pub os_image: String,
}

/// Reads the machine's facts; `root_dir` is the kubelet's root directory.
pub(crate) fn read(root_dir: &Path) -> MachineInfo {
    MachineInfo {
        cpus: online_cpus(),
        memory_bytes: read_small("/proc/meminfo")
            .and_then(|t| mem_total(&t))
            .unwrap_or(0),
        ephemeral_storage_bytes: filesystem_size(root_dir),
        hugepages: hugepages(Path::new("/sys/kernel/mm/hugepages")),
        machine_id: read_trimmed("/etc/machine-id"),
        system_uuid: read_trimmed("/sys/class/dmi/id/product_uuid"),
        boot_id: read_trimmed("/proc/sys/kernel/random/boot_id"),
        kernel_version: kernel_release(),
        os_image: read_small("/etc/os-release")
            .or_else(|| read_small("/usr/lib/os-release"))
            .and_then(|t| pretty_name(&t))
            .unwrap_or_else(|| "Linux".into()),
    }
}

/// A small file of `/proc`, `/sys` or `/etc` (64 KiB at most), or None (logged at debug).
fn read_small(path: impl AsRef<Path>) -> Option<String> {
    let path = path.as_ref();
    match base::fsutil::read_regular(path, 64 * 1024) {
        Ok((bytes, _)) => Some(String::from_utf8_lossy(&bytes).into_owned()),
        Err(e) => {
            // Files of /proc and /sys are not "regular" to every check; try plainly.
            match std::fs::read_to_string(path) {
                Ok(t) if t.len() <= 64 * 1024 => Some(t),
                _ => {
                    log::debug!("node status: cannot read {}: {e}", path.display());
                    None
                }
            }
        }
    }
}

fn read_trimmed(path: &str) -> String {
    read_small(path)
        .map(|t| t.trim().to_string())
        .unwrap_or_default()
}

fn online_cpus() -> u64 {
    // SAFETY: sysconf takes no pointer and has no memory effects. It stays libc:
    // glibc answers _SC_NPROCESSORS_ONLN from /sys/devices/system/cpu/online, which
    // rustix has no call for (std's available_parallelism is the affinity mask and
    // cgroup quota instead, a different number).
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    u64::try_from(n).unwrap_or(0).max(1)
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb.saturating_mul(1024))
}

/// `PRETTY_NAME` of an os-release file, unquoted.
fn pretty_name(os_release: &str) -> Option<String> {
    let v = os_release
        .lines()
        .find_map(|l| l.trim().strip_prefix("PRETTY_NAME="))?;
    let v = v.trim();
    let v = v
        .strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .or_else(|| v.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')))
        .unwrap_or(v);
    (!v.is_empty()).then(|| v.to_string())
}

/// The size of the filesystem holding `dir`, in bytes.
fn filesystem_size(dir: &Path) -> Option<u64> {
    let p = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).ok()?;
    let s = rustix::fs::statvfs(p.as_c_str()).ok()?;
    Some(s.f_blocks.saturating_mul(s.f_frsize))
}

/// The kernel release (`uname -r`).
fn kernel_release() -> String {
    // uname(2) cannot fail with a valid buffer, which rustix's own is.
    rustix::system::uname()
        .release()
        .to_string_lossy()
        .into_owned()
}

/// The hugepage pools under `/sys/kernel/mm/hugepages` (`hugepages-2048kB/nr_hugepages`).
fn hugepages(dir: &Path) -> Vec<(u64, u64)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<(u64, u64)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let kb = name
                .strip_prefix("hugepages-")?
                .strip_suffix("kB")?
                .parse::<u64>()
                .ok()?;
            let pages = std::fs::read_to_string(e.path().join("nr_hugepages"))
                .ok()
                .and_then(|t| t.trim().parse::<u64>().ok())
                .unwrap_or(0);
            Some((kb.saturating_mul(1024), pages))
        })
        .collect();
    base::sort::sort(&mut out);
    out
}

/// Go's name of this machine's architecture (`runtime.GOARCH`).
pub(crate) fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "arm" => "arm",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        "s390x" => "s390x",
        "riscv64" => "riscv64",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_meminfo_and_os_release() {
        assert_eq!(
            mem_total("MemTotal:       24568024 kB\nMemFree: 1 kB\n"),
            Some(24568024 * 1024)
        );
        assert_eq!(mem_total("MemFree: 1 kB\n"), None);
        assert_eq!(
            pretty_name("NAME=\"Debian\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n"),
            Some("Debian GNU/Linux 12 (bookworm)".into())
        );
        assert_eq!(pretty_name("PRETTY_NAME=Alpine\n"), Some("Alpine".into()));
        assert_eq!(pretty_name("NAME=x\n"), None);
    }

    #[test]
    fn reads_this_machine() {
        let m = read(Path::new("/"));
        assert!(m.cpus >= 1);
        assert!(m.memory_bytes > 0);
        assert!(m.ephemeral_storage_bytes.unwrap_or(0) > 0);
        assert!(!m.kernel_version.is_empty());
        assert!(!go_arch().is_empty());
    }
}
