//! A wall clock that is behind: a board without an RTC starts in 1970 (or where its
//! clock stood when it was last shut down) and jumps forward when NTP syncs. Until then
//! every certificate issued by a correct clock is "not yet valid" here. That is a
//! condition to wait out, never a reason to give a certificate up: this module
//! recognises it in rustls's errors ([`not_valid_yet`]), words the one log line that
//! names the clock ([`behind_line`]), and keeps that line to once per condition
//! ([`Notice`]: raised, then cleared by the next success) or once per interval
//! ([`RateLimited`], for per-request checks that have no "success" to clear on).
//! [`clock_floor`] is a date this binary cannot have run before, so a clock before it is
//! known to be behind (systemd's `TIME_EPOCH` does the same).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use crate::loops::lock;

/// 2026-12-01T00:00:00Z, when this code was written: a wall clock before it is behind
/// for certain. Moving it forward with a release keeps [`clock_floor`] useful; it must
/// never be later than the day the binary is built.
const FLOOR_UNIX_SECS: u64 = 1_796_083_200;

/// The earliest time this binary can really be running at (see [`FLOOR_UNIX_SECS`]).
pub fn clock_floor() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(FLOOR_UNIX_SECS)
}

/// The start-up line when `now` is before [`clock_floor`]: the clock is behind for
/// certain, and certificates will be "not yet valid" until it is set.
pub fn behind_floor(now: SystemTime) -> Option<String> {
    (now < clock_floor()).then(|| {
        format!(
            "this node's clock says {}, before this rkubelet was made ({}): the clock is \
             behind (no RTC, NTP not yet synced); certificates look not yet valid until it \
             is set, and are retried",
            crate::time::k8s_time(now).0,
            crate::time::k8s_time(clock_floor()).0
        )
    })
}

/// `Some` when `e` says a certificate is not valid yet at the verification time (rustls's
/// `NotValidYet`, or `NotValidYetContext` with its `notBefore`, given inside).
pub fn not_valid_yet(e: &rustls::Error) -> Option<Option<SystemTime>> {
    use rustls::CertificateError;
    match e {
        rustls::Error::InvalidCertificate(CertificateError::NotValidYet) => Some(None),
        rustls::Error::InvalidCertificate(CertificateError::NotValidYetContext {
            not_before,
            ..
        }) => Some(Some(
            SystemTime::UNIX_EPOCH + Duration::from_secs(not_before.as_secs()),
        )),
        _ => None,
    }
}

/// The line that names the clock: `<whose> certificate is not valid until <notBefore>;
/// this node's clock says <now>: is the clock behind (no RTC, NTP not yet synced)?`
/// (`not valid yet` when rustls did not say until when).
pub fn behind_line(whose: &str, not_before: Option<SystemTime>, now: SystemTime) -> String {
    format!(
        "{whose} certificate is {}; this node's clock says {}: is the clock behind \
         (no RTC, NTP not yet synced)?",
        until(not_before),
        crate::time::k8s_time(now).0
    )
}

/// `not valid until <notBefore>`, or `not valid yet` when rustls did not say until when.
fn until(not_before: Option<SystemTime>) -> String {
    match not_before {
        Some(t) => format!("not valid until {}", crate::time::k8s_time(t).0),
        None => "not valid yet".to_string(),
    }
}

/// A certificate "not yet valid" named in an error that a loop logs on each change of
/// wording (a source's tick error): the same words for as long as the condition
/// lasts, so it is one line, not one per try (no "now" in it, unlike [`behind_line`]).
pub fn not_yet_valid_words(not_before: Option<SystemTime>) -> String {
    format!(
        "the server's certificate is {} by this node's clock: is the clock behind (no RTC, \
         NTP not yet synced)?",
        until(not_before)
    )
}

/// A condition logged once: [`Notice::raise`] is true the first time only, until
/// [`Notice::clear`] (the next success) ends the condition.
#[derive(Debug, Default)]
pub struct Notice(AtomicBool);

impl Notice {
    /// A notice not raised.
    pub const fn new() -> Notice {
        Notice(AtomicBool::new(false))
    }

    /// Raises it; true when it was not raised (log the line now).
    pub fn raise(&self) -> bool {
        !self.0.swap(true, Ordering::Relaxed)
    }

    /// Ends the condition; true when it was raised (the next one is logged again).
    pub fn clear(&self) -> bool {
        // A load first: the common case (nothing raised) writes nothing.
        self.0.load(Ordering::Relaxed) && self.0.swap(false, Ordering::Relaxed)
    }
}

/// At most one line per `interval`.
#[derive(Debug)]
pub struct RateLimited {
    interval: Duration,
    last: Mutex<Option<Instant>>,
}

impl RateLimited {
    /// Once per `interval` at most.
    pub const fn new(interval: Duration) -> RateLimited {
        RateLimited {
            interval,
            last: Mutex::new(None),
        }
    }

    /// Whether a line may be logged at `now` (monotonic); if so, the interval starts.
    pub fn allow(&self, now: Instant) -> bool {
        let mut last = lock(&self.last);
        match *last {
            Some(t) if now.saturating_duration_since(t) < self.interval => false,
            _ => {
                *last = Some(now);
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::UnixTime;
    use rustls::CertificateError;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn not_valid_yet_is_told_from_other_certificate_errors() {
        let plain = rustls::Error::InvalidCertificate(CertificateError::NotValidYet);
        assert_eq!(not_valid_yet(&plain), Some(None));
        let context = rustls::Error::InvalidCertificate(CertificateError::NotValidYetContext {
            time: UnixTime::since_unix_epoch(Duration::from_secs(1_700_000_000)),
            not_before: UnixTime::since_unix_epoch(Duration::from_secs(1_796_083_200)),
        });
        assert_eq!(not_valid_yet(&context), Some(Some(at(1_796_083_200))));
        for other in [
            rustls::Error::InvalidCertificate(CertificateError::Expired),
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
            rustls::Error::General("x".into()),
        ] {
            assert_eq!(not_valid_yet(&other), None, "{other}");
        }
    }

    #[test]
    fn the_line_names_the_clock_and_both_times() {
        assert_eq!(
            behind_line(
                "the API server's",
                Some(at(1_796_083_200)),
                at(1_764_547_200)
            ),
            "the API server's certificate is not valid until 2026-12-01T00:00:00Z; this \
             node's clock says 2025-12-01T00:00:00Z: is the clock behind (no RTC, NTP not \
             yet synced)?"
        );
        assert!(behind_line("a", None, at(0)).starts_with("a certificate is not valid yet; "));
    }

    #[test]
    fn a_notice_is_raised_once_until_cleared() {
        let n = Notice::new();
        assert!(!n.clear(), "nothing to clear");
        assert!(n.raise(), "first: log");
        assert!(!n.raise(), "second: quiet");
        assert!(!n.raise(), "every retry: quiet");
        assert!(n.clear(), "a success ends it");
        assert!(!n.clear());
        assert!(n.raise(), "a new condition: log again");
    }

    #[test]
    fn rate_limited_allows_one_per_interval() {
        let r = RateLimited::new(Duration::from_secs(60));
        let t0 = Instant::now();
        assert!(r.allow(t0));
        assert!(!r.allow(t0 + Duration::from_secs(1)));
        assert!(!r.allow(t0 + Duration::from_secs(59)));
        assert!(r.allow(t0 + Duration::from_secs(60)));
        assert!(!r.allow(t0 + Duration::from_secs(61)));
    }

    #[test]
    fn the_floor_is_in_the_past() {
        assert!(
            clock_floor() <= SystemTime::now(),
            "FLOOR_UNIX_SECS is later than today"
        );
    }

    #[test]
    fn a_clock_before_the_floor_is_named_at_start() {
        assert_eq!(behind_floor(clock_floor()), None);
        assert_eq!(behind_floor(SystemTime::now()), None);
        let line = behind_floor(at(0)).expect("1970 is behind");
        assert!(
            line.starts_with(
                "this node's clock says 1970-01-01T00:00:00Z, before this rkubelet was made \
                 (2026-12-01T00:00:00Z): the clock is behind"
            ),
            "{line}"
        );
    }
}
