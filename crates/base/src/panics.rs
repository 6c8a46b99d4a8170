//! Panics of the kubelet's loops: caught, described in one line, and paced.
//!
//! A panic anywhere is a defect, but one bad input must not take the node down (and
//! systemd's restart would meet the same input again). `loops` runs every loop body
//! through [`catch`]; the panic hook (`main.rs`) hands its one line to the loop through
//! [`note_caught_panic`], so each panic is logged once, by the loop, with its restart;
//! [`PanicBackoff`] paces the restarts (1 s doubling to 1 min). Upstream Go crashes the
//! process on an unrecovered panic; here only the main thread's panic does.
//!
//! Test builds also have a trigger that makes a named loop panic
//! (`RKUBELET_TEST_PANIC`), for the integration test of a running kubelet.

use std::cell::{Cell, RefCell};
use std::panic::{self, AssertUnwindSafe};
use std::time::{Duration, Instant};

/// A panic's one log line: the thread first (the loop's name), then std's text, its
/// line break ("panicked at <place>:\n<message>") made a space.
pub fn panic_line(thread: Option<&str>, info: &dyn std::fmt::Display) -> String {
    let info = info.to_string().replace('\n', " ");
    format!("thread {} panicked: {info}", thread.unwrap_or("<unnamed>"))
}

/// The first pause before a loop that panicked runs again. Long enough that a loop
/// panicking on every tick costs little; short enough that one stray panic is barely seen.
pub(crate) const PANIC_BACKOFF_FIRST: Duration = Duration::from_secs(1);

/// The longest pause: a loop that keeps panicking still runs once a minute, so it
/// recovers by itself when the input that made it panic is gone.
pub(crate) const PANIC_BACKOFF_MAX: Duration = Duration::from_secs(60);

/// The restart back-off of one loop: 1 s, doubled for each panic in a row, at most
/// 1 min; back to 1 s once the loop has run [`PANIC_BACKOFF_MAX`] without panicking.
#[derive(Debug, Default)]
pub(crate) struct PanicBackoff {
    next: Option<Duration>,
    restarted_at: Option<Instant>,
}

impl PanicBackoff {
    /// The pause after a panic at `now`.
    pub(crate) fn on_panic(&mut self, now: Instant) -> Duration {
        let calm = self
            .restarted_at
            .is_some_and(|r| now.saturating_duration_since(r) >= PANIC_BACKOFF_MAX);
        let d = match self.next {
            Some(d) if !calm => d,
            _ => PANIC_BACKOFF_FIRST,
        };
        self.next = Some(d.saturating_mul(2).min(PANIC_BACKOFF_MAX));
        self.restarted_at = Some(now + d);
        d
    }
}

thread_local! {
    /// Set while this thread runs a body whose panic is caught ([`catch`]).
    static CATCHING: Cell<bool> = const { Cell::new(false) };
    /// The panic hook's line for the panic being caught, for the catcher to log.
    static CAUGHT_LINE: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// For the process's panic hook: when this thread's panic will be caught by its loop,
/// keeps `line` for the loop to log (with its restart) and returns true, so each panic
/// is one log line; false when the panic is not caught (the main thread, a thread not
/// spawned here), which the hook logs itself.
pub fn note_caught_panic(line: &str) -> bool {
    if !CATCHING.with(Cell::get) {
        return false;
    }
    CAUGHT_LINE.with(|l| *l.borrow_mut() = Some(line.to_string()));
    true
}

/// Runs `f`, catching a panic: Err holds the panic hook's line (thread, message,
/// place), or the panic's message when no hook noted one (tests).
pub(crate) fn catch<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    let was = CATCHING.with(|c| c.replace(true));
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    CATCHING.with(|c| c.set(was));
    result.map_err(|payload| {
        CAUGHT_LINE
            .with(|l| l.borrow_mut().take())
            .unwrap_or_else(|| {
                let msg = payload
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic with no message".to_string());
                panic_line(std::thread::current().name(), &msg)
            })
    })
}

/// Test builds only (debug assertions, as `cargo test` builds the binary the
/// integration tests run): `RKUBELET_TEST_PANIC=<loop>:<n>[,<loop>:<n>…]` makes the
/// named loop panic at the start of its first `n` iterations, so a test can check that
/// a running kubelet survives a loop's panic. Release builds have no such trigger.
#[cfg(debug_assertions)]
pub(crate) fn injected_panic(name: &str) {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static LEFT: OnceLock<Mutex<HashMap<String, u32>>> = OnceLock::new();
    let left = LEFT.get_or_init(|| {
        let spec = std::env::var("RKUBELET_TEST_PANIC").unwrap_or_default();
        let map = spec
            .split(',')
            .filter_map(|one| {
                let (loop_name, n) = one.split_once(':')?;
                Some((loop_name.to_string(), n.parse().ok()?))
            })
            .collect();
        Mutex::new(map)
    });
    let fire = match left.lock().unwrap_or_else(|p| p.into_inner()).get_mut(name) {
        Some(n) if *n > 0 => {
            *n -= 1;
            true
        }
        _ => false,
    };
    if fire {
        panic!("RKUBELET_TEST_PANIC: injected panic in {name}");
    }
}

#[cfg(not(debug_assertions))]
pub(crate) fn injected_panic(_name: &str) {}

#[cfg(test)]
mod tests {
    use super::*;

    fn named<T: Send + 'static>(
        name: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::JoinHandle<T> {
        std::thread::Builder::new()
            .name(name.to_string())
            .spawn(f)
            .expect("spawn a test thread")
    }

    #[test]
    fn panic_backoff_doubles_to_a_minute_and_resets_after_a_calm_minute() {
        let mut b = PanicBackoff::default();
        let t0 = Instant::now();
        let secs: Vec<u64> = (0..9)
            .map(|i| b.on_panic(t0 + Duration::from_millis(i)).as_secs())
            .collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        // Restarted at t0+60 s (the last pause), then ran calmly for over a minute.
        let later = t0 + Duration::from_secs(60 + 61);
        assert_eq!(b.on_panic(later), PANIC_BACKOFF_FIRST);
        assert_eq!(b.on_panic(later), Duration::from_secs(2));
    }

    #[test]
    fn panic_hook_line_is_used_once_when_noted() {
        let got = named("noted", || {
            catch(|| {
                assert!(note_caught_panic(
                    "thread noted panicked: x at src/a.rs:1:1"
                ));
                panic!("x");
            })
        })
        .join()
        .expect("join");
        assert_eq!(
            got.err().as_deref(),
            Some("thread noted panicked: x at src/a.rs:1:1")
        );
        assert!(!note_caught_panic("not inside a caught loop"));
    }

    #[test]
    fn panic_line_names_the_thread_first_on_one_line() {
        let line = named("pod-kill-0", || {
            panic_line(std::thread::current().name(), &"boom at src/x.rs:1:1")
        })
        .join()
        .expect("join");
        assert_eq!(line, "thread pod-kill-0 panicked: boom at src/x.rs:1:1");
        assert_eq!(panic_line(None, &"x"), "thread <unnamed> panicked: x");
        assert_eq!(
            panic_line(Some("pleg"), &"panicked at src/pleg.rs:1:1:\nboom"),
            "thread pleg panicked: panicked at src/pleg.rs:1:1: boom"
        );
    }
}
