//! `rkubelet pause`: the process that holds a pod sandbox's namespaces open, so the
//! kubelet binary is its own pause image (see `images::selfimport`) and a node with no
//! registry still runs pods.
//!
//! The behaviour is upstream's `build/pause/linux/pause.c`: `-v` (anywhere, any case)
//! prints a version and exits 0; a warning when it is not PID 1 (pause is used outside
//! sandboxes too, so it is not an error); SIGINT and SIGTERM print `Shutting down, got
//! signal: <name>` and exit 0, so `docker stop` of a sandbox is quick and clean; SIGCHLD
//! reaps every exited child with `waitpid(-1, WNOHANG)`, because as PID 1 of a shared
//! PID namespace it inherits the orphans nobody else waits for. Failing to install a
//! handler exits 1, 2 or 3, as upstream's does.
//!
//! Unlike pause.c, the handlers only record the signal: the three signals stay blocked
//! except inside `sigsuspend(2)`, and the work (reaping, exiting) happens on the main
//! flow after it returns, so nothing but an atomic store runs in signal context and no
//! signal is lost between two waits.
//!
//! The signal mask, handlers and `sigsuspend` stay `unsafe` libc calls: rustix has
//! them only in its `runtime` module, which is hidden, unstable, itself `unsafe`, and
//! not for a process that has a libc (it is for writing one).
//!
//! `main` calls [`run`] before anything else (no logging, no threads, no config), so
//! the process is a few hundred KiB of touched pages, not a kubelet.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// The subcommand that makes the binary a pause process.
pub const SUBCOMMAND: &str = "pause";

/// What `-v` prints (upstream: `pause.c <version>`).
pub fn version() -> String {
    format!("pause (rkubelet) {}", env!("CARGO_PKG_VERSION"))
}

/// Signals seen by the handler and not handled yet, one bit per signal number.
static PENDING: AtomicU64 = AtomicU64::new(0);

extern "C" fn record(signo: libc::c_int) {
    if let Ok(bit) = u32::try_from(signo) {
        if bit < 64 {
            // Async-signal-safe: one lock-free atomic operation.
            PENDING.fetch_or(1 << bit, Ordering::SeqCst);
        }
    }
}

/// Whether `args` (without the program and subcommand) ask for the version.
pub(crate) fn wants_version<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> bool {
    args.iter().any(|a| {
        a.as_ref()
            .to_str()
            .is_some_and(|s| s.eq_ignore_ascii_case("-v"))
    })
}

/// Runs the pause process with `args` (what follows `pause` on the command line).
/// Returns only to give main the exit code (0 after SIGINT/SIGTERM or `-v`).
pub fn run<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> u8 {
    if wants_version(args) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", version()).and_then(|()| out.flush());
        return 0;
    }
    if !rustix::process::getpid().is_init() {
        say("Warning: pause should be the first process");
    }
    // SAFETY: an all-zero sigset_t is a valid value to initialise with sigemptyset.
    let mut blocked: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: sigemptyset/sigaddset write into the one sigset_t they are given.
    unsafe {
        libc::sigemptyset(&mut blocked);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGCHLD] {
            libc::sigaddset(&mut blocked, s);
        }
    }
    // Blocked before the handlers exist, so a signal arriving meanwhile waits for the
    // first sigsuspend instead of being handled halfway.
    // SAFETY: valid set pointer; the old mask is not wanted (null).
    unsafe { libc::sigprocmask(libc::SIG_BLOCK, &blocked, std::ptr::null_mut()) };
    for (sig, flags, code) in [
        (libc::SIGINT, 0, 1),
        (libc::SIGTERM, 0, 2),
        (libc::SIGCHLD, libc::SA_NOCLDSTOP, 3),
    ] {
        if install(sig, flags).is_err() {
            return code;
        }
    }
    // Children that ended before the handler was there are reaped too.
    reap();
    // SAFETY: an all-zero sigset_t is a valid value to initialise with sigemptyset.
    let mut during: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: sigemptyset writes into the one sigset_t it is given.
    unsafe { libc::sigemptyset(&mut during) };
    loop {
        // SAFETY: valid set pointer; returns -1/EINTR after a handler ran, with the
        // blocked mask restored.
        unsafe { libc::sigsuspend(&during) };
        let pending = PENDING.swap(0, Ordering::SeqCst);
        if pending & (1 << libc::SIGCHLD) != 0 {
            reap();
        }
        for sig in [libc::SIGINT, libc::SIGTERM] {
            if pending & (1 << sig) != 0 {
                say(&format!("Shutting down, got signal: {}", signal_name(sig)));
                return 0;
            }
        }
    }
}

/// One line on stderr; a stderr that cannot be written (a closed pipe) is no reason
/// for pause to fail, where `eprintln!` would panic.
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Installs [`record`] for `sig`.
fn install(sig: libc::c_int, flags: libc::c_int) -> Result<(), ()> {
    // SAFETY: an all-zero sigaction is valid (empty mask, no flags) before it is filled.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = record as extern "C" fn(libc::c_int) as libc::sighandler_t;
    sa.sa_flags = flags;
    // SAFETY: sigemptyset writes into the mask of the struct it is given.
    unsafe { libc::sigemptyset(&mut sa.sa_mask) };
    // SAFETY: a valid sigaction for a catchable signal; the old one is not wanted.
    if unsafe { libc::sigaction(sig, &sa, std::ptr::null_mut()) } < 0 {
        return Err(());
    }
    Ok(())
}

/// Waits for every child that has exited (upstream's `sigreap`).
fn reap() {
    use rustix::process::{wait, WaitOptions};
    // wait4(-1, …, WNOHANG): any child, never blocking; ends at "none exited yet"
    // (None) or at ECHILD (no children at all). Not rustix's waitpid(None, …), which
    // is wait4(0, …): only children in pause's own process group, and the orphans
    // it inherits keep theirs.
    while let Ok(Some(_)) = wait(WaitOptions::NOHANG) {}
}

/// `psignal`'s description of the two signals that end pause.
fn signal_name(sig: libc::c_int) -> &'static str {
    match sig {
        libc::SIGINT => "Interrupt",
        _ => "Terminated",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_flag_is_found_anywhere_in_any_case() {
        assert!(wants_version(&["-v"]));
        assert!(wants_version(&["x", "-V"]));
        assert!(!wants_version::<&str>(&[]));
        assert!(!wants_version(&["--version", "v"]));
        assert!(version().starts_with("pause (rkubelet) "));
    }

    #[test]
    fn the_handler_records_each_signal_once() {
        PENDING.store(0, Ordering::SeqCst);
        record(libc::SIGCHLD);
        record(libc::SIGTERM);
        record(-1);
        record(200);
        let p = PENDING.swap(0, Ordering::SeqCst);
        assert_eq!(p, (1 << libc::SIGCHLD) | (1 << libc::SIGTERM));
        assert_eq!(signal_name(libc::SIGINT), "Interrupt");
        assert_eq!(signal_name(libc::SIGTERM), "Terminated");
    }
}
