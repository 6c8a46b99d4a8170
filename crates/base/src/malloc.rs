//! How rkubelet's heap is kept small: glibc's malloc tuned for a daemon of ~25
//! mostly sleeping threads ([`tune`], by `mallopt` before any thread starts), and freed heap given
//! back to the kernel after a big decode and once a minute ([`release_freed_memory`]).
//! Other C libraries (musl's mallocng) have no arenas or thread caches and give memory
//! back on their own, so all of this is glibc only and a no-op elsewhere.

use std::time::Duration;

/// A decode of at least this many bytes is followed by [`release_freed_memory`]: a
/// YAML tree costs tens of times its text, and a few hundred KiB is where glibc's
/// kept arenas start to show in RSS.
pub const TRIM_AFTER_BYTES: usize = 256 * 1024;

/// Gives memory freed after a big decode back to the kernel. glibc keeps freed heap
/// in its arenas (per thread), so one 3 MiB manifest could keep hundreds of MB of
/// RSS long after its tree is dropped; `malloc_trim(0)` returns them. Other C
/// libraries (musl) give memory back on their own, so this is glibc only.
pub fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks glibc's own heap under glibc's own locks; it
    // takes no pointer and is safe to call from any thread at any time. A glibc
    // allocator call, not a syscall: rustix has no wrapper for it.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// How often housekeeping gives freed heap back ([`release_freed_memory_every`]): a
/// node that started 110 pods kept ~1.2 MiB of freed heap in glibc's free lists
/// while idle (measured: VmRSS 20.1 MiB, 18.8 MiB with a trim every 10 s); a walk of
/// an idle node's free lists once a minute costs nothing measurable.
pub const TRIM_PERIOD: Duration = Duration::from_secs(60);

/// [`release_freed_memory`] if `period` has passed since the last trim through here
/// (the first call trims), and says whether it did. For a loop that runs more often
/// than that.
pub fn release_freed_memory_every(period: Duration) -> bool {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    use std::time::Instant;
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    // Milliseconds since EPOCH of the last trim, plus one (0: never).
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = u64::try_from(EPOCH.get_or_init(Instant::now).elapsed().as_millis())
        .unwrap_or(u64::MAX)
        .saturating_add(1);
    let period = u64::try_from(period.as_millis()).unwrap_or(u64::MAX);
    let last = LAST.load(Ordering::Relaxed);
    if last != 0 && now.saturating_sub(last) < period {
        return false;
    }
    let due = LAST
        .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
        .is_ok();
    if due {
        release_freed_memory();
    }
    due
}

/// glibc's malloc settings, made first in `main` before any thread starts:
///
/// - One arena. By default glibc gives each thread that allocates an arena of its own
///   (up to 8 per core), and each keeps its own touched pages and free lists; with 30
///   pods idle, VmRSS 12.4 MiB with glibc's default, 11.7 MiB with two (measured,
///   release build, ports off); with 110 pods idle 20.1 MiB with two, 18.9 MiB with one.
/// - Blocks of [`MMAP_THRESHOLD`] and more are mapped on their own and unmapped when
///   freed, and free memory at the heap's top past [`TRIM_THRESHOLD`] goes back at
///   once. glibc's default threshold starts at 128 KiB and rises to the largest block
///   freed (up to 32 MiB), so after a start-up burst every Docker list and API answer
///   buffer lived in the heap and the long-lived objects allocated between them kept
///   its pages: at 110 idle pods the heap was 8.5 MiB resident, 7.5 MiB with these.
pub fn tune() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets glibc tunables; called before other threads exist.
    // glibc allocator calls, not syscalls: rustix has no wrapper for them.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
    }
}

/// Blocks this large or larger are mmapped (see [`tune`]): above most of the kubelet's
/// own objects (a pod's spec is a few KiB), below its I/O buffers. glibc only.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(crate) const MMAP_THRESHOLD: i32 = 32 * 1024;
/// Free memory at the heap's top beyond this is given back at once (see [`tune`]).
/// glibc only.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(crate) const TRIM_THRESHOLD: i32 = 64 * 1024;
