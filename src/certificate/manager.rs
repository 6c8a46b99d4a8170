//! The `client-cert` thread: TLS bootstrap when start-up asked for it, then, with
//! `--rotate-certificates`, rotation of the client certificate (client-go's
//! `util/certificate` manager: `nextRotationDeadline`, `rotateCerts`).
//!
//! Rotation waits until a deadline drawn at 70–90 % of the current certificate's
//! lifetime (so nodes made together do not all ask at once), asks with the current
//! certificate (the shared client's) through [`super::request`], writes the new pair,
//! swaps `kubelet-client-current.pem` and hands the pair to the running client. A
//! failure keeps the current certificate and tries again after 2 s doubling to
//! [`RETRY_CAP`]. Each attempt is one tick in the loop registry.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crossbeam_channel::Sender;

use super::bootstrap::Bootstrap;
use super::request::request_certificate;
use super::store::{describe, stamp, validity, CertStore, Pair};
use super::{csr, CertError};
use apiclient::ApiClient;
use base::loops::{error_chain, LoopHandle, Loops, SpawnError, Stop};

/// The thread's name.
pub(crate) const THREAD: &str = "client-cert";
/// How long one rotation request waits for its certificate (upstream
/// `certificateWaitTimeout`).
pub(crate) const ROTATION_WAIT: Duration = Duration::from_secs(15 * 60);
/// The first retry after a failed request (upstream's backoff: 2 s, doubling).
pub(crate) const RETRY_FIRST: Duration = Duration::from_secs(2);
/// The longest wait between retries (upstream polls every 32 s once its five
/// backoff steps are spent).
pub(crate) const RETRY_CAP: Duration = Duration::from_secs(32);
/// The longest single sleep before a rotation deadline: the wall clock is read again
/// after it, so a clock step or a suspend does not push the rotation late.
const MAX_SLEEP: Duration = Duration::from_secs(600);

/// When to rotate a certificate valid from `not_before` to `not_after` (upstream
/// `nextRotationDeadline` with `jitteryDuration`): at 70 % plus `jitter` (in `[0, 1)`)
/// times 20 % of its lifetime.
pub(crate) fn rotation_deadline(
    not_before: SystemTime,
    not_after: SystemTime,
    jitter: f64,
) -> SystemTime {
    let total = not_after
        .duration_since(not_before)
        .unwrap_or(Duration::ZERO);
    let fraction = 0.7 + 0.2 * jitter.clamp(0.0, 1.0);
    base::time::saturating_system_add(not_before, total.mul_f64(fraction))
}

/// The next rotation of a certificate of `validity` (None: unreadable) at `now`: its
/// deadline ([`rotation_deadline`]; now when there is no certificate to read), and
/// the certificate's `notBefore` when this clock has not reached it yet. The deadline is
/// the certificate's, never the clock's: with the clock behind (a board without an RTC)
/// it lies after `notBefore`, later than `now`, and the wait re-reads the clock (at
/// least every [`MAX_SLEEP`]) so a step forward brings it on time; nothing is judged
/// invalid or asked for again because of the clock.
pub(crate) fn next_rotation(
    validity: Option<(SystemTime, SystemTime)>,
    now: SystemTime,
    jitter: f64,
) -> (SystemTime, Option<SystemTime>) {
    match validity {
        Some((from, to)) => (
            rotation_deadline(from, to, jitter),
            (now < from).then_some(from),
        ),
        None => (now, None),
    }
}

/// A random number in `[0, 1)` for the rotation jitter (0.5 if the system has no
/// randomness to give).
fn jitter() -> f64 {
    use ring::rand::SecureRandom as _;
    let mut b = [0u8; 4];
    match ring::rand::SystemRandom::new().fill(&mut b) {
        Ok(()) => f64::from(u32::from_be_bytes(b)) / (f64::from(u32::MAX) + 1.0),
        Err(_) => 0.5,
    }
}

/// Bootstrap and rotation of the kubelet's client certificate, run on the
/// `client-cert` thread.
#[derive(Debug)]
pub(crate) struct ClientCertManager {
    client: Arc<ApiClient>,
    store: CertStore,
    node_name: String,
    rotate: bool,
    bootstrap: Option<Bootstrap>,
    /// The pair the client uses now, if any.
    current: Option<Pair>,
}

impl ClientCertManager {
    /// A manager of `client`'s certificate, kept in `store`; rotating when `rotate`.
    pub(crate) fn new(
        client: Arc<ApiClient>,
        store: CertStore,
        node_name: &str,
        rotate: bool,
    ) -> Self {
        ClientCertManager {
            client,
            store,
            node_name: node_name.to_string(),
            rotate,
            bootstrap: None,
            current: None,
        }
    }

    /// Runs `bootstrap` first.
    pub(crate) fn with_bootstrap(mut self, bootstrap: Bootstrap) -> Self {
        self.bootstrap = Some(bootstrap);
        self
    }

    /// The pair the client starts with.
    pub(crate) fn with_current(mut self, current: Option<Pair>) -> Self {
        self.current = current;
        self
    }

    /// Starts the `client-cert` thread. A bootstrap the cluster refuses (CSR denied or
    /// failed) sends its error to `fatal`, for `main` to end the process with.
    pub(crate) fn start(mut self, loops: &Loops, fatal: Sender<String>) -> Result<(), SpawnError> {
        loops.spawn(THREAD, move |stop, handle| self.run(&stop, &handle, &fatal))
    }

    fn run(&mut self, stop: &Stop, handle: &LoopHandle, fatal: &Sender<String>) {
        if let Some(bootstrap) = self.bootstrap.take() {
            match self.bootstrap(&bootstrap, stop, handle) {
                Ok(pair) => self.current = Some(pair),
                Err(CertError::Stopped) => return,
                Err(e) => {
                    let msg = format!("TLS bootstrap: {}", error_chain(&e));
                    log::error!("{msg}");
                    let _ = fatal.try_send(msg);
                    return;
                }
            }
        }
        if self.rotate {
            self.rotate_forever(stop, handle);
        }
    }

    /// Bootstrap attempts until one succeeds, the CSR is refused (denied or failed:
    /// the error), or shutdown.
    fn bootstrap(
        &self,
        bootstrap: &Bootstrap,
        stop: &Stop,
        handle: &LoopHandle,
    ) -> Result<Pair, CertError> {
        let mut backoff = RETRY_FIRST;
        loop {
            let began = handle.begin_tick();
            match bootstrap.run(&self.store, &self.node_name, stop) {
                Ok(pair) => {
                    handle.end_tick(began, None);
                    self.client
                        .set_client_identity(pair.cert_pem.clone(), pair.key_pem.clone())
                        .map_err(CertError::client)?;
                    return Ok(pair);
                }
                Err(
                    e @ (CertError::Denied { .. } | CertError::Failed { .. } | CertError::Stopped),
                ) => {
                    handle.end_tick(began, None);
                    return Err(e);
                }
                Err(e) => {
                    // Logged by the registry (warn when the message changes).
                    let msg = format!(
                        "TLS bootstrap: {}; trying again in {}s",
                        error_chain(&e),
                        backoff.as_secs()
                    );
                    handle.end_tick(began, Some(msg));
                    if stop.sleep(backoff) {
                        return Err(CertError::Stopped);
                    }
                    backoff = (backoff * 2).min(RETRY_CAP);
                }
            }
        }
    }

    /// Rotates before each certificate's deadline, until shutdown.
    fn rotate_forever(&mut self, stop: &Stop, handle: &LoopHandle) {
        let mut backoff = RETRY_FIRST;
        loop {
            let now = SystemTime::now();
            let (deadline, clock_behind) =
                next_rotation(self.current.as_ref().and_then(validity), now, jitter());
            if let Some(not_before) = clock_behind {
                log::warn!(
                    "{} It is kept, and rotated at its deadline {} (by the clock once it is set).",
                    base::clock::behind_line("the client", Some(not_before), now),
                    stamp(deadline)
                );
            }
            log::info!(
                "client certificate rotation deadline is {}",
                stamp(deadline)
            );
            loop {
                let left = deadline
                    .duration_since(SystemTime::now())
                    .unwrap_or(Duration::ZERO);
                if left.is_zero() {
                    break;
                }
                if stop.sleep(left.min(MAX_SLEEP)) {
                    return;
                }
            }
            loop {
                let began = handle.begin_tick();
                match self.rotate_once(stop) {
                    Ok(()) => {
                        handle.end_tick(began, None);
                        backoff = RETRY_FIRST;
                        break;
                    }
                    Err(CertError::Stopped) => return,
                    Err(e) => {
                        let msg = format!(
                            "rotating the client certificate: {}; the current one is kept, \
                             trying again in {}s",
                            error_chain(&e),
                            backoff.as_secs()
                        );
                        handle.end_tick(began, Some(msg));
                        if stop.sleep(backoff) {
                            return;
                        }
                        backoff = (backoff * 2).min(RETRY_CAP);
                    }
                }
            }
        }
    }

    /// One rotation: a new key and CSR sent with the current certificate, the new pair
    /// written and given to the client.
    fn rotate_once(&mut self, stop: &Stop) -> Result<(), CertError> {
        log::info!("rotating the client certificate");
        let key = csr::generate_key().map_err(CertError::Key)?;
        let cert_pem = request_certificate(
            &self.client,
            &key,
            &self.node_name,
            None,
            ROTATION_WAIT,
            stop,
        )?;
        let pair = Pair {
            cert_pem,
            key_pem: key.serialize_pem().into_bytes(),
        };
        let written = self.store.update(&pair, SystemTime::now())?;
        self.client
            .set_client_identity(pair.cert_pem.clone(), pair.key_pem.clone())
            .map_err(CertError::client)?;
        log::info!(
            "client certificate rotated: {} ({}); new connections use it",
            written.display(),
            describe(&pair)
        );
        self.current = Some(pair);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn the_rotation_deadline_is_between_70_and_90_percent_of_the_lifetime() {
        let (from, to) = (at(1000), at(1000 + 100_000));
        assert_eq!(rotation_deadline(from, to, 0.0), at(1000 + 70_000));
        assert_eq!(rotation_deadline(from, to, 0.5), at(1000 + 80_000));
        assert_eq!(rotation_deadline(from, to, 1.0), at(1000 + 90_000));
        assert_eq!(
            rotation_deadline(from, to, 7.0),
            at(1000 + 90_000),
            "clamped"
        );
        assert_eq!(rotation_deadline(to, from, 0.5), to, "backwards: at once");
        for _ in 0..100 {
            let j = jitter();
            assert!((0.0..1.0).contains(&j), "{j}");
        }
    }

    #[test]
    fn a_clock_behind_neither_moves_the_deadline_nor_asks_at_once() {
        // Issued for a year from 2026-12-01; this node's clock says 2025-12-01.
        let (from, to) = (at(1_796_083_200), at(1_796_083_200 + 365 * 86_400));
        let behind = at(1_764_547_200);
        let (deadline, clock_behind) = next_rotation(Some((from, to)), behind, 0.5);
        assert_eq!(
            deadline,
            rotation_deadline(from, to, 0.5),
            "the certificate's"
        );
        assert!(deadline > from && deadline > behind, "not in the past");
        assert_eq!(clock_behind, Some(from), "the clock line names notBefore");
        // In 1970 just the same.
        assert_eq!(next_rotation(Some((from, to)), at(0), 0.5).0, deadline);
        // A clock within the validity: no clock line.
        assert_eq!(
            next_rotation(Some((from, to)), at(1_800_000_000), 0.5).1,
            None
        );
        // No readable certificate: ask now.
        assert_eq!(next_rotation(None, behind, 0.5), (behind, None));
    }
}
