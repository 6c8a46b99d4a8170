//! systemd's notify protocol (`sd_notify`), in a few lines instead of libsystemd:
//! one datagram per message to the Unix socket named by `$NOTIFY_SOCKET`. `READY=1`
//! once the servers are bound and the first relist is done (`Type=notify` units wait for
//! it), `STATUS=…` lines a person reads in `systemctl status`, `STOPPING=1` at shutdown.
//! Without `$NOTIFY_SOCKET` (not under systemd) every call does nothing.
//!
//! The watchdog (`WatchdogSec=` in the unit): when systemd sets `$WATCHDOG_USEC` (and
//! `$WATCHDOG_PID` is unset or this process, as `sd_watchdog_enabled` decides), the
//! `watchdog` loop sends `WATCHDOG=1` every half of that timeout, but only while the
//! health check it is given passes (the sync loop's and the PLEG's, as `/healthz`), so a
//! wedged kubelet misses its pings and systemd restarts it. Without `$WATCHDOG_USEC` no
//! such thread runs.

use std::ffi::OsString;
use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use base::loops::{Loops, Periodic, SpawnError};

/// Sends one notification; returns whether it was sent. Failures are logged at debug
/// only: a kubelet must not stop because systemd is not listening.
pub fn notify(state: &str) -> bool {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return false;
    };
    match notify_to(&path, state) {
        Ok(()) => true,
        Err(e) => {
            log::debug!("sd_notify to {}: {e}", path.to_string_lossy());
            false
        }
    }
}

/// Sends one notification to the socket at `path` (`@name`: an abstract socket).
pub(crate) fn notify_to(path: &std::ffi::OsStr, state: &str) -> std::io::Result<()> {
    let sock = UnixDatagram::unbound()?;
    let bytes = path.as_encoded_bytes();
    if let Some(name) = bytes.strip_prefix(b"@") {
        // An abstract socket: '@' stands for the leading NUL byte.
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(name)
            .and_then(|addr| sock.send_to_addr(state.as_bytes(), &addr))
            .map(drop)
    } else {
        sock.send_to(state.as_bytes(), path).map(drop)
    }
}

/// The `watchdog` loop's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Watchdog {
    /// systemd's timeout (`WatchdogSec=`); pings go out every half of it.
    pub timeout: Duration,
    /// Where pings go (`$NOTIFY_SOCKET`).
    pub socket: OsString,
}

impl Watchdog {
    /// Time between pings: half the timeout, as `sd_watchdog_enabled(3)` advises, at
    /// least 1 ms.
    pub fn period(&self) -> Duration {
        (self.timeout / 2).max(Duration::from_millis(1))
    }

    /// The watchdog systemd asked for in this process's environment, if any. Values
    /// that do not parse are logged and ignored (no watchdog), as libsystemd's.
    pub fn from_env() -> Option<Watchdog> {
        let var = |k: &str| std::env::var(k).ok();
        let timeout = match watchdog_timeout(
            var("WATCHDOG_USEC").as_deref(),
            var("WATCHDOG_PID").as_deref(),
            std::process::id(),
        ) {
            Ok(t) => t?,
            Err(e) => {
                log::warn!("systemd watchdog not enabled: {e}");
                return None;
            }
        };
        let Some(socket) = std::env::var_os("NOTIFY_SOCKET") else {
            log::warn!("WATCHDOG_USEC is set but NOTIFY_SOCKET is not: no watchdog pings");
            return None;
        };
        Some(Watchdog { timeout, socket })
    }
}

/// `sd_watchdog_enabled`: the watchdog timeout from `$WATCHDOG_USEC` (None when unset,
/// or when `$WATCHDOG_PID` names another process); an error for values that do not
/// parse or a zero timeout.
pub(crate) fn watchdog_timeout(
    usec: Option<&str>,
    pid: Option<&str>,
    me: u32,
) -> Result<Option<Duration>, String> {
    let Some(usec) = usec else {
        return Ok(None);
    };
    let usec: u64 = usec
        .trim()
        .parse()
        .map_err(|_| format!("WATCHDOG_USEC={usec:?} is not a number of microseconds"))?;
    if usec == 0 {
        return Err("WATCHDOG_USEC=0".into());
    }
    if let Some(pid) = pid {
        let pid: u32 = pid
            .trim()
            .parse()
            .map_err(|_| format!("WATCHDOG_PID={pid:?} is not a process ID"))?;
        if pid != me {
            return Ok(None);
        }
    }
    Ok(Some(Duration::from_micros(usec)))
}

/// Why a watchdog tick sent no ping (the loop's recorded error).
#[derive(Debug, thiserror::Error)]
pub(crate) enum SystemdError {
    /// A health check failed: no ping, so systemd restarts a kubelet that stays so.
    #[error("not telling systemd's watchdog we are alive: {0}")]
    Unhealthy(String),
    /// The ping could not be sent.
    #[error("cannot send WATCHDOG=1")]
    Notify(#[source] std::io::Error),
}

/// Starts the `watchdog` loop: every [`Watchdog::period`], `WATCHDOG=1` if
/// `healthy()` passes. A failing check is the loop's error (logged when it changes,
/// listed as a warning on `/healthz?verbose`).
pub fn start_watchdog<F>(loops: &Loops, wd: Watchdog, healthy: F) -> Result<(), SpawnError>
where
    F: Fn() -> Result<(), String> + Send + 'static,
{
    log::info!(
        "systemd watchdog: WATCHDOG=1 every {:?} (timeout {:?}) while healthy",
        wd.period(),
        wd.timeout
    );
    let period = wd.period();
    loops.spawn_periodic(
        Periodic {
            name: "watchdog".into(),
            period,
            wake: None,
        },
        move || {
            healthy().map_err(SystemdError::Unhealthy)?;
            notify_to(&wd.socket, "WATCHDOG=1").map_err(SystemdError::Notify)
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_to_the_notify_socket() {
        let dir = std::env::temp_dir().join(format!("rkubelet-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("notify.sock");
        let listener = UnixDatagram::bind(&path).expect("bind");
        // The variable is process-wide; this is the only test that sets it.
        std::env::set_var("NOTIFY_SOCKET", &path);
        assert!(notify("READY=1"));
        std::env::remove_var("NOTIFY_SOCKET");
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf).expect("recv");
        assert_eq!(&buf[..n], b"READY=1");
        let _ = std::fs::remove_dir_all(&dir);
        assert!(!notify("READY=1"));
    }

    #[test]
    fn watchdog_enabled_follows_sd_watchdog_enabled() {
        let me = 4242;
        assert_eq!(watchdog_timeout(None, None, me), Ok(None));
        assert_eq!(
            watchdog_timeout(Some("30000000"), None, me),
            Ok(Some(Duration::from_secs(30)))
        );
        assert_eq!(
            watchdog_timeout(Some("30000000"), Some("4242"), me),
            Ok(Some(Duration::from_secs(30)))
        );
        assert_eq!(
            watchdog_timeout(Some("30000000"), Some("1"), me),
            Ok(None),
            "meant for another process"
        );
        assert!(watchdog_timeout(Some("0"), None, me).is_err());
        assert!(watchdog_timeout(Some("30s"), None, me).is_err());
        assert!(watchdog_timeout(Some("1000"), Some("x"), me).is_err());
        let wd = Watchdog {
            timeout: Duration::from_secs(30),
            socket: OsString::new(),
        };
        assert_eq!(wd.period(), Duration::from_secs(15), "half the timeout");
    }

    /// A fake systemd: a datagram socket of our own that the watchdog is pointed at.
    fn fake_notify_socket(tag: &str) -> (std::path::PathBuf, UnixDatagram) {
        let dir = std::env::temp_dir().join(format!("rkubelet-wd-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("notify.sock");
        let sock = UnixDatagram::bind(&path).expect("bind");
        (dir, sock)
    }

    #[test]
    fn pings_arrive_every_half_period_while_healthy_and_stop_when_wedged() {
        use base::loops::shutdown_channel;
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        use std::time::Instant;

        let (dir, sock) = fake_notify_socket("pings");
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop);
        let healthy = Arc::new(AtomicBool::new(true));
        let wd = Watchdog {
            timeout: Duration::from_millis(200),
            socket: dir.join("notify.sock").into_os_string(),
        };
        let h = healthy.clone();
        start_watchdog(&loops, wd, move || {
            if h.load(Ordering::SeqCst) {
                Ok(())
            } else {
                Err("sync Loop took longer than expected".into())
            }
        })
        .expect("spawn");

        // Healthy: pings keep coming, never closer together than the half period.
        sock.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        let mut buf = [0u8; 64];
        let mut times = Vec::new();
        for _ in 0..5 {
            let n = sock.recv(&mut buf).expect("a ping while healthy");
            assert_eq!(&buf[..n], b"WATCHDOG=1");
            times.push(Instant::now());
        }
        for w in times.windows(2) {
            // The period runs from a tick's end to the next one's start; a little
            // scheduling slack either side of the receive is allowed.
            assert!(
                w[1] - w[0] >= Duration::from_millis(80),
                "pings {:?} apart",
                w[1] - w[0]
            );
        }

        // Wedged: once a tick has seen the failing check, nothing more arrives.
        healthy.store(false, Ordering::SeqCst);
        let registry = loops.registry();
        let until = Instant::now() + Duration::from_secs(30);
        while registry
            .get("watchdog")
            .and_then(|s| s.last_error)
            .is_none()
        {
            assert!(Instant::now() < until, "the watchdog never saw the failure");
            std::thread::sleep(Duration::from_millis(5));
        }
        let err = registry.get("watchdog").and_then(|s| s.last_error);
        assert!(
            err.as_deref()
                .is_some_and(|e| e.contains("sync Loop took longer")),
            "{err:?}"
        );
        sock.set_nonblocking(true).expect("nonblocking");
        while sock.recv(&mut buf).is_ok() {}
        sock.set_nonblocking(false).expect("blocking");
        sock.set_read_timeout(Some(Duration::from_millis(600)))
            .expect("timeout");
        assert!(
            sock.recv(&mut buf).is_err(),
            "a ping arrived while unhealthy"
        );
        let failing = registry.get("watchdog").map_or(0, |s| s.errors);
        assert!(failing >= 1);

        // Healthy again: pings resume.
        healthy.store(true, Ordering::SeqCst);
        sock.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        let n = sock.recv(&mut buf).expect("pings resume");
        assert_eq!(&buf[..n], b"WATCHDOG=1");

        shutdown.trigger();
        assert!(loops.join_all(Duration::from_secs(10)).is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
