//! The one helper that spawns every named thread of the kubelet, and the registry of
//! their ticks.
//!
//! Every loop of rkubelet is an OS thread with a name that `ps -T` and `top -H` show
//! (`sync-loop`, `pleg`, `src-file`, `pod-worker-0` …). [`Loops`] spawns them all, so
//! that each one records its ticks (start, duration, last error) in the
//! [`LoopRegistry`], and each one ends when the single shutdown broadcast closes its
//! [`Stop`] channel. Health checks read the registry to tell which loop is stuck.
//!
//! The stop channel is also the sleep: a periodic loop waits on `recv_timeout`, so
//! closing one channel wakes and ends every loop at once. Worker sets are
//! [`Pool`]s (in `loops/pool.rs`): workers that start on demand and exit when idle.
//!
//! A panic in a loop is a defect, but it does not take the node down: each loop body
//! (a periodic tick, an event loop, a pool's job, a stream thread) runs under
//! `catch_unwind`. The panic is logged once with the loop's name, counted in the
//! registry (`/debug/loops`, `rkubelet_loop_panics_total`), and the loop runs again
//! after a back-off of 1 s doubling to 1 min, so a loop that panics on every tick does
//! not spin (`crate::panics`). A stream thread's panic ends that stream only. Upstream
//! Go crashes the whole process on an unrecovered panic; the main thread's panic stays
//! fatal here too.
//!
//! Over 800 lines: its unit tests drive real threads through every kind of spawn
//! (periodic, event loop, supervised, transient), with and without panics.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use crate::panics::{catch, injected_panic, PanicBackoff};

mod pool;
pub use pool::{Pool, PoolSpec};

/// The kernel keeps 15 bytes of a thread name (16 with the NUL); longer names are cut,
/// and then `top -H` and our logs disagree.
pub const MAX_THREAD_NAME: usize = 15;

/// An uninhabited type: nothing is ever sent on the shutdown channel, it is only closed.
#[derive(Debug)]
pub enum Never {}

/// The receiving side of the shutdown broadcast. Cloned into every loop.
#[derive(Clone, Debug)]
pub struct Stop(Receiver<Never>, Arc<UnixStream>);

impl Stop {
    /// Sleeps for `d`, or less if shutdown begins. Returns true when the loop must end.
    pub fn sleep(&self, d: Duration) -> bool {
        match self.0.recv_timeout(d) {
            Ok(never) => match never {},
            Err(RecvTimeoutError::Timeout) => false,
            Err(RecvTimeoutError::Disconnected) => true,
        }
    }

    /// True once shutdown has begun. Never blocks.
    pub fn is_stopped(&self) -> bool {
        matches!(
            self.0.try_recv(),
            Err(crossbeam_channel::TryRecvError::Disconnected)
        )
    }

    /// The channel itself, for loops that `select!` over it beside their own inputs.
    /// It becomes ready (disconnected) when shutdown begins.
    pub fn receiver(&self) -> &Receiver<Never> {
        &self.0
    }

    /// A descriptor that becomes readable (end of file) when shutdown begins, for
    /// loops that wait in `poll(2)` on descriptors of their own (inotify, `/dev/kmsg`):
    /// with it in the set they need no timeout just to notice shutdown, so an idle
    /// one never wakes.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.1.as_fd()
    }
}

/// The sending side of the shutdown broadcast. Dropping it (or calling
/// [`Shutdown::trigger`]) stops every loop.
#[derive(Debug)]
pub struct Shutdown(Mutex<Option<(Sender<Never>, UnixStream)>>);

impl Shutdown {
    /// Begins shutdown. Idempotent.
    pub fn trigger(&self) {
        lock(&self.0).take();
    }
}

/// A new shutdown broadcast: the trigger and the first receiver.
///
/// # Panics
/// When the process has no descriptor left for the socket pair behind [`Stop::fd`]
/// (at start-up, before any loop runs).
pub fn shutdown_channel() -> (Shutdown, Stop) {
    let (tx, rx) = crossbeam_channel::bounded(0);
    let (keep, watch) = UnixStream::pair().expect("a socket pair for the shutdown broadcast");
    (
        Shutdown(Mutex::new(Some((tx, keep)))),
        Stop(rx, Arc::new(watch)),
    )
}

/// Locks a mutex, recovering the data if a thread panicked while holding it: a loop's
/// panic is caught and the loop restarted, and the state it guarded must stay usable
/// by everyone else (each guarded structure is left consistent between statements).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The body of a loop spawned with [`Loops::spawn`] that ticks like a periodic one,
/// but sleeps `period` stretched by up to `jitter` (a fraction) each time, as
/// client-go's `JitterUntil`, and hands its tick the stop receiver (for back-offs the
/// tick sleeps through). Returns at shutdown. For loops whose set-up must run on their
/// own thread first (`node-status`, `node-lease`).
pub fn run_jittered<E, F>(
    stop: &Stop,
    handle: &LoopHandle,
    period: Duration,
    jitter: f64,
    mut tick: F,
) where
    E: std::error::Error,
    F: FnMut(&Stop) -> Result<(), E>,
{
    loop {
        let began = handle.begin_tick();
        let err = tick(stop).err().map(|e| error_chain(&e));
        handle.end_tick(began, err);
        let wait = period.mul_f64(1.0 + jitter * crate::wait::jitter_fraction());
        if stop.sleep(wait) {
            return;
        }
    }
}

/// Formats an error with its whole `source()` chain: `outer: middle: inner`.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let msg = c.to_string();
        // Some errors repeat their source in their own message; do not say it twice.
        if !s.ends_with(&msg) {
            s.push_str(": ");
            s.push_str(&msg);
        }
        cur = c.source();
    }
    s
}

/// What the registry knows about one loop.
#[derive(Clone, Debug)]
pub struct LoopState {
    /// The loop's period, if it is periodic.
    pub period: Option<Duration>,
    /// When the thread started.
    pub started: Instant,
    /// Start of the last tick (or activity report of an event loop).
    pub last_tick: Option<Instant>,
    /// Wall-clock time of the last tick, for people reading the debug endpoint.
    pub last_tick_wall: Option<SystemTime>,
    /// How long the last tick took.
    pub last_duration: Option<Duration>,
    /// Start of the tick in progress, None between ticks: how the health checks tell a
    /// loop stuck inside a tick (blocked in a read) from one waiting for its period.
    pub busy_since: Option<Instant>,
    /// The last tick's error, cleared by a tick that succeeds.
    pub last_error: Option<String>,
    /// Ticks so far.
    pub ticks: u64,
    /// Ticks so far that ended with an error (`/metrics`' `rkubelet_loop_errors_total`).
    pub errors: u64,
    /// Panics caught so far; each restarted the loop (`rkubelet_loop_panics_total`).
    pub panics: u64,
    /// Whether the thread has returned.
    pub finished: bool,
}

impl LoopState {
    fn new(period: Option<Duration>) -> Self {
        LoopState {
            period,
            started: Instant::now(),
            last_tick: None,
            last_tick_wall: None,
            last_duration: None,
            busy_since: None,
            last_error: None,
            ticks: 0,
            errors: 0,
            panics: 0,
            finished: false,
        }
    }
}

/// Per-loop tick records, shared by every loop (writers) and the health checks and debug
/// endpoints (readers). One small lock, held for microseconds.
#[derive(Debug, Default)]
pub struct LoopRegistry {
    loops: Mutex<BTreeMap<String, LoopState>>,
    /// Panics of short-lived threads (`spawn_transient`), by thread name: they are not
    /// loops, but their panics count. The names are a fixed set (`stream-0..127`).
    transient_panics: Mutex<BTreeMap<String, u64>>,
}

impl LoopRegistry {
    /// A snapshot of every loop's state, sorted by name.
    pub fn snapshot(&self) -> BTreeMap<String, LoopState> {
        lock(&self.loops).clone()
    }

    /// One loop's state.
    pub fn get(&self, name: &str) -> Option<LoopState> {
        lock(&self.loops).get(name).cloned()
    }

    /// Panics of short-lived stream threads, by thread name.
    pub fn transient_panics(&self) -> BTreeMap<String, u64> {
        lock(&self.transient_panics).clone()
    }

    fn register(&self, name: &str, period: Option<Duration>) {
        lock(&self.loops).insert(name.to_string(), LoopState::new(period));
    }

    /// Forgets a pool worker that has exited for idleness: it is no loop any more, and
    /// a worker that starts later under the same name registers afresh.
    fn remove(&self, name: &str) {
        lock(&self.loops).remove(name);
    }

    fn update(&self, name: &str, f: impl FnOnce(&mut LoopState)) {
        if let Some(st) = lock(&self.loops).get_mut(name) {
            f(st);
        }
    }
}

/// Lets a loop that is not a plain ticker (the sync loop, a stream reader, a pod
/// worker) record its activity in the registry.
#[derive(Clone, Debug)]
pub struct LoopHandle {
    name: String,
    registry: Arc<LoopRegistry>,
}

impl LoopHandle {
    /// Records the start of one iteration; returns the instant to pass to
    /// [`LoopHandle::end_tick`].
    pub fn begin_tick(&self) -> Instant {
        let now = self.begin_job();
        injected_panic(&self.name);
        now
    }

    /// [`LoopHandle::begin_tick`] for a pool's job: the test trigger is left to the
    /// job ([`LoopHandle::injected_panic`]), which knows what a panic must release.
    pub(crate) fn begin_job(&self) -> Instant {
        let now = Instant::now();
        let wall = SystemTime::now();
        self.registry.update(&self.name, |st| {
            st.last_tick = Some(now);
            st.last_tick_wall = Some(wall);
            st.busy_since = Some(now);
        });
        now
    }

    /// The test builds' panic trigger for this loop (`RKUBELET_TEST_PANIC`); nothing in
    /// a release build. Pool jobs call it once their state is guarded.
    pub fn injected_panic(&self) {
        injected_panic(&self.name);
    }

    /// Records the end of one iteration and its outcome. Logs an error when it differs
    /// from the previous one (at warn), or at debug when it repeats.
    pub fn end_tick(&self, began: Instant, error: Option<String>) {
        let took = began.elapsed();
        let name = &self.name;
        // Decided under the registry's lock, logged after it: a write to a slow
        // stderr must not hold every loop and the health checks.
        let mut say: Option<(log::Level, String)> = None;
        self.registry.update(name, |st| {
            st.ticks += 1;
            if error.is_some() {
                st.errors += 1;
            }
            st.last_duration = Some(took);
            st.busy_since = None;
            say = match &error {
                Some(e) if st.last_error.as_deref() != Some(e.as_str()) => {
                    Some((log::Level::Warn, format!("{name}: {e}")))
                }
                Some(e) => Some((log::Level::Debug, format!("{name}: still failing: {e}"))),
                None if st.last_error.is_some() => {
                    Some((log::Level::Info, format!("{name}: recovered")))
                }
                None => None,
            };
            st.last_error = error;
        });
        if let Some((level, line)) = say {
            log::log!(level, "{line}");
        }
    }

    /// The loop's name (also its thread's name).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Records a caught panic (`line` says where and what) and that the loop runs
    /// again after `restart_in`; logs it, once.
    fn panicked(&self, line: &str, restart_in: Duration) {
        let name = &self.name;
        let mut n = 0;
        self.registry.update(name, |st| {
            st.panics += 1;
            st.errors += 1;
            if let Some(b) = st.busy_since.take() {
                st.ticks += 1;
                st.last_duration = Some(b.elapsed());
            }
            st.last_error = Some(format!("panicked: {line}; restarting in {restart_in:?}"));
            n = st.panics;
        });
        log::error!("{name}: {line}; restarting the loop in {restart_in:?} (panic {n})");
    }
}

/// How a periodic loop is woken: by its period, or early by a message on `wake`.
#[derive(Debug)]
pub struct Periodic {
    /// Thread and registry name, at most 15 bytes.
    pub name: String,
    /// Time between the end of one tick and the start of the next.
    pub period: Duration,
    /// Optional early-wake channel: any message runs a tick now. Bursts are drained,
    /// so ten pokes run one tick.
    pub wake: Option<Receiver<()>>,
}

/// Spawns and joins every named thread. Cloning shares the same set.
#[derive(Clone, Debug)]
pub struct Loops {
    registry: Arc<LoopRegistry>,
    stop: Stop,
    handles: Arc<Mutex<Vec<NamedHandle>>>,
    /// Stack size of the threads this copy spawns ([`Loops::with_stack_size`]).
    stack_size: usize,
}

/// A loop thread's stack unless its spawner asks for more: 512 KiB, a quarter of
/// Rust's 2 MiB default. Only touched pages cost RSS, but a deep tick leaves its pages
/// touched for the thread's life, and the smaller reservation is what a 32-bit board's
/// address space and `ulimit -v` see. The loops that keep it decode only Docker's and
/// the kernel's shallow answers or encode the kubelet's own objects; threads that
/// decode outside YAML or JSON (serde recurses per nesting level, up to its 128-level
/// limit) or run request handlers get [`BIG_STACK`].
pub(crate) const LOOP_STACK: usize = 512 * 1024;

/// The stack of threads that decode outside input (sources, request handlers, pod
/// workers, the prober's runs): Rust's default, 2 MiB. serde_json and serde_norway stop
/// at 128 levels of nesting, and a debug build's frames per level are large.
pub const BIG_STACK: usize = 2 * 1024 * 1024;

/// A spawned thread and its name, for joining and for naming the ones that linger.
type NamedHandle = (String, JoinHandle<()>);

/// A thread could not be spawned (the process is out of threads or memory).
#[derive(Debug, thiserror::Error)]
#[error("cannot spawn thread {name}")]
pub struct SpawnError {
    name: String,
    source: std::io::Error,
}

impl SpawnError {
    /// A thread (or what it needs before it can start) could not be made.
    pub fn new(name: &str, source: std::io::Error) -> Self {
        SpawnError {
            name: name.to_string(),
            source,
        }
    }
}

impl Loops {
    /// A new set of loops that all end when `stop` closes.
    pub fn new(stop: Stop) -> Self {
        Loops {
            registry: Arc::new(LoopRegistry::default()),
            stop,
            handles: Arc::new(Mutex::new(Vec::new())),
            stack_size: LOOP_STACK,
        }
    }

    /// The same set of loops, but the threads spawned through the copy get a stack of
    /// `bytes` (see [`LOOP_STACK`] and [`BIG_STACK`]).
    pub fn with_stack_size(&self, bytes: usize) -> Loops {
        Loops {
            stack_size: bytes,
            ..self.clone()
        }
    }

    /// The registry every loop records into.
    pub fn registry(&self) -> Arc<LoopRegistry> {
        self.registry.clone()
    }

    /// Runs `tick` at once and then every `spec.period` (or when woken) until shutdown.
    /// A tick's error is recorded and logged; the loop goes on with the next period. A
    /// tick's panic is caught, logged and counted; the next tick runs after the panic
    /// back-off instead of the period.
    pub fn spawn_periodic<E, F>(&self, spec: Periodic, mut tick: F) -> Result<(), SpawnError>
    where
        E: std::error::Error,
        F: FnMut() -> Result<(), E> + Send + 'static,
    {
        let Periodic { name, period, wake } = spec;
        self.registry.register(&name, Some(period));
        let handle = self.handle(&name);
        let stop = self.stop.clone();
        let mut backoff = PanicBackoff::default();
        self.spawn_thread(&name, move || loop {
            let ticked = catch(|| {
                let began = handle.begin_tick();
                let err = tick().err().map(|e| error_chain(&e));
                handle.end_tick(began, err);
            });
            let stopped = match ticked {
                Err(line) => {
                    let d = backoff.on_panic(Instant::now());
                    handle.panicked(&line, d);
                    stop.sleep(d)
                }
                Ok(()) => match &wake {
                    None => stop.sleep(period),
                    Some(wake) => wait_or_wake(&stop, wake, period),
                },
            };
            if stopped {
                return;
            }
        })
    }

    /// Spawns a thread that runs its own loop (an event loop, a blocking stream reader,
    /// a pod worker). It gets the stop receiver and a handle to record its activity.
    /// When the body panics, the panic is caught, logged and counted, and the body is
    /// called again after the panic back-off (unless shutdown began): it must be able
    /// to start over from whatever state its last run left.
    pub fn spawn<F>(&self, name: &str, body: F) -> Result<(), SpawnError>
    where
        F: FnMut(Stop, LoopHandle) + Send + 'static,
    {
        self.registry.register(name, None);
        self.spawn_restarting(name, body)
    }

    /// The thread of [`Loops::spawn`] and [`Loops::spawn_timed`] (registered by the
    /// caller): the body under `catch_unwind`, run again after a panic's back-off.
    fn spawn_restarting<F>(&self, name: &str, mut body: F) -> Result<(), SpawnError>
    where
        F: FnMut(Stop, LoopHandle) + Send + 'static,
    {
        let handle = self.handle(name);
        let stop = self.stop.clone();
        let mut backoff = PanicBackoff::default();
        self.spawn_thread(name, move || loop {
            match catch(|| body(stop.clone(), handle.clone())) {
                Ok(()) => return,
                Err(line) => {
                    let d = backoff.on_panic(Instant::now());
                    handle.panicked(&line, d);
                    if stop.sleep(d) {
                        return;
                    }
                }
            }
        })
    }

    /// Spawns a loop that keeps its own time (it waits in `poll(2)` on descriptors of
    /// its own beside [`Stop::fd`]) but ticks at least every `period`: registered
    /// with the period, so the health checks watch it as a periodic loop. The body
    /// records its ticks through the handle; a panic is caught as [`Loops::spawn`]'s.
    pub fn spawn_timed<F>(&self, name: &str, period: Duration, body: F) -> Result<(), SpawnError>
    where
        F: FnMut(Stop, LoopHandle) + Send + 'static,
    {
        self.registry.register(name, Some(period));
        self.spawn_restarting(name, body)
    }

    /// Spawns an event loop whose body is run again, `backoff` later, whenever it
    /// returns before shutdown (with an error, or without one): a loop that must never
    /// end, such as a server's accept loop, survives whatever made it return. Each
    /// return is recorded as the loop's error.
    pub fn spawn_supervised<E, F>(
        &self,
        name: &str,
        backoff: Duration,
        mut body: F,
    ) -> Result<(), SpawnError>
    where
        E: std::error::Error,
        F: FnMut(&Stop, &LoopHandle) -> Result<(), E> + Send + 'static,
    {
        self.spawn(name, move |stop, handle| loop {
            let result = body(&stop, &handle);
            if stop.is_stopped() {
                return;
            }
            let began = handle.begin_tick();
            let why = match result {
                Ok(()) => "returned".to_string(),
                Err(e) => error_chain(&e),
            };
            handle.end_tick(
                began,
                Some(format!("{why}; running it again in {backoff:?}")),
            );
            if stop.sleep(backoff) {
                return;
            }
        })
    }

    /// Spawns a short-lived thread that serves one client (a stream of the kubelet
    /// port: logs followed, exec, attach, port-forward) and ends with it. Unlike a loop
    /// it is neither in the registry (it has no ticks, and there may be many over the
    /// process's life) nor joined at exit (a client session ends with the process).
    /// The caller bounds how many run at once. A panic ends that one client's thread
    /// only: it is caught, logged, and counted by thread name
    /// ([`LoopRegistry::transient_panics`]); whatever the body owned is dropped.
    pub fn spawn_transient<F>(&self, name: &str, body: F) -> Result<(), SpawnError>
    where
        F: FnOnce(Stop) + Send + 'static,
    {
        debug_assert!(
            name.len() <= MAX_THREAD_NAME,
            "thread name too long: {name}"
        );
        let stop = self.stop.clone();
        let registry = self.registry.clone();
        let owned = name.to_string();
        thread::Builder::new()
            .name(name.to_string())
            .stack_size(self.stack_size)
            .spawn(move || {
                if let Err(line) = catch(|| body(stop)) {
                    *lock(&registry.transient_panics)
                        .entry(owned.clone())
                        .or_default() += 1;
                    log::error!("{owned}: {line}; this stream ends");
                }
            })
            .map(drop)
            .map_err(|source| SpawnError {
                name: name.to_string(),
                source,
            })
    }

    fn handle(&self, name: &str) -> LoopHandle {
        LoopHandle {
            name: name.to_string(),
            registry: self.registry.clone(),
        }
    }

    fn spawn_thread<F>(&self, name: &str, body: F) -> Result<(), SpawnError>
    where
        F: FnOnce() + Send + 'static,
    {
        let registry = self.registry.clone();
        let owned = name.to_string();
        self.spawn_joined(name, move || {
            body();
            registry.update(&owned, |st| st.finished = true);
            log::debug!("{owned}: stopped");
        })
    }

    /// Spawns a thread that [`Loops::join_all`] waits for. Handles of threads that have
    /// already ended (pool workers gone idle) are dropped here, so they do not pile up.
    fn spawn_joined<F>(&self, name: &str, body: F) -> Result<(), SpawnError>
    where
        F: FnOnce() + Send + 'static,
    {
        debug_assert!(
            name.len() <= MAX_THREAD_NAME,
            "thread name too long: {name}"
        );
        let h = thread::Builder::new()
            .name(name.to_string())
            .stack_size(self.stack_size)
            .spawn(body)
            .map_err(|source| SpawnError {
                name: name.to_string(),
                source,
            })?;
        let mut handles = lock(&self.handles);
        let (done, mut running): (Vec<_>, Vec<_>) = std::mem::take(&mut *handles)
            .into_iter()
            .partition(|(_, h)| h.is_finished());
        running.push((name.to_string(), h));
        *handles = running;
        drop(handles);
        for (name, h) in done {
            // Already finished: joining does not block.
            if h.join().is_err() {
                log::error!("thread {name} panicked");
            }
        }
        Ok(())
    }

    /// Waits until every thread has returned or `deadline` has passed. Returns the names
    /// of the threads still running (they are left behind; the process is about to exit).
    pub fn join_all(&self, deadline: Duration) -> Vec<String> {
        let until = crate::time::saturating_deadline(Instant::now(), deadline);
        let mut handles = std::mem::take(&mut *lock(&self.handles));
        loop {
            let (done, running): (Vec<_>, Vec<_>) =
                handles.into_iter().partition(|(_, h)| h.is_finished());
            for (name, h) in done {
                if h.join().is_err() {
                    log::error!("thread {name} panicked");
                }
            }
            handles = running;
            if handles.is_empty() || Instant::now() >= until {
                return handles.into_iter().map(|(n, _)| n).collect();
            }
            // Joining is the one place that polls: std has no timed join.
            thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Waits for `period`, an early wake, or shutdown. Returns true on shutdown.
fn wait_or_wake(stop: &Stop, wake: &Receiver<()>, period: Duration) -> bool {
    crossbeam_channel::select! {
        recv(stop.receiver()) -> _ => true,
        recv(wake) -> msg => {
            if msg.is_err() {
                // The waker is gone: fall back to the plain period.
                return stop.sleep(period);
            }
            // Coalesce a burst of wakes into one tick.
            while wake.try_recv().is_ok() {}
            false
        },
        default(period) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[derive(Debug, thiserror::Error)]
    #[error("{0}")]
    struct TestError(&'static str);

    fn wait_for(mut cond: impl FnMut() -> bool) {
        let until = Instant::now() + Duration::from_secs(10);
        while !cond() {
            assert!(Instant::now() < until, "condition not met in 10 s");
            thread::sleep(Duration::from_millis(2));
        }
    }

    #[test]
    fn periodic_loop_records_ticks_and_errors_and_stops_on_shutdown() {
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop);
        let n = Arc::new(AtomicUsize::new(0));
        let n2 = n.clone();
        let spec = Periodic {
            name: "test-loop".into(),
            period: Duration::from_millis(1),
            wake: None,
        };
        loops
            .spawn_periodic(spec, move || {
                let i = n2.fetch_add(1, Ordering::SeqCst);
                if i == 0 {
                    Err(TestError("first tick fails"))
                } else {
                    Ok(())
                }
            })
            .expect("spawn");
        wait_for(|| n.load(Ordering::SeqCst) >= 3);
        let st = loops.registry().get("test-loop").expect("registered");
        assert!(st.ticks >= 2);
        assert_eq!(st.last_error, None, "a good tick clears the error");
        shutdown.trigger();
        assert!(loops.join_all(Duration::from_secs(10)).is_empty());
        assert!(
            loops
                .registry()
                .get("test-loop")
                .expect("still listed")
                .finished
        );
    }

    #[test]
    fn long_period_loop_stops_at_once_on_shutdown() {
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop);
        let spec = Periodic {
            name: "slow-loop".into(),
            period: Duration::from_secs(3600),
            wake: None,
        };
        loops
            .spawn_periodic(spec, || Ok::<(), TestError>(()))
            .expect("spawn");
        wait_for(|| {
            loops
                .registry()
                .get("slow-loop")
                .is_some_and(|s| s.ticks == 1)
        });
        let t = Instant::now();
        shutdown.trigger();
        assert!(loops.join_all(Duration::from_secs(10)).is_empty());
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn wake_runs_a_tick_before_the_period() {
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop);
        let (tx, rx) = crossbeam_channel::bounded(1);
        let spec = Periodic {
            name: "woken".into(),
            period: Duration::from_secs(3600),
            wake: Some(rx),
        };
        loops
            .spawn_periodic(spec, || Ok::<(), TestError>(()))
            .expect("spawn");
        wait_for(|| loops.registry().get("woken").is_some_and(|s| s.ticks == 1));
        tx.send(()).expect("send");
        wait_for(|| loops.registry().get("woken").is_some_and(|s| s.ticks == 2));
        shutdown.trigger();
        assert!(loops.join_all(Duration::from_secs(10)).is_empty());
    }

    #[test]
    fn supervised_loop_runs_again_after_returning() {
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop);
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = runs.clone();
        loops
            .spawn_supervised("supervised", Duration::from_millis(1), move |stop, _h| {
                if counted.fetch_add(1, Ordering::SeqCst) == 0 {
                    return Err(TestError("poll failed"));
                }
                // The second run serves until shutdown.
                while !stop.sleep(Duration::from_secs(3600)) {}
                Ok(())
            })
            .expect("spawn");
        wait_for(|| runs.load(Ordering::SeqCst) == 2);
        let st = loops.registry().get("supervised").expect("registered");
        assert_eq!(
            st.last_error.as_deref(),
            Some("poll failed; running it again in 1ms")
        );
        shutdown.trigger();
        assert!(loops.join_all(Duration::from_secs(10)).is_empty());
        assert_eq!(
            runs.load(Ordering::SeqCst),
            2,
            "not run again after shutdown"
        );
    }

    #[test]
    fn thread_carries_its_name() {
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop);
        let (tx, rx) = crossbeam_channel::bounded(1);
        loops
            .spawn("named-thread", move |_stop, _h| {
                let _ = tx.send(thread::current().name().map(str::to_string));
            })
            .expect("spawn");
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(10)).expect("name"),
            Some("named-thread".to_string())
        );
        shutdown.trigger();
        assert!(loops.join_all(Duration::from_secs(10)).is_empty());
    }

    #[test]
    fn periodic_loop_that_panics_is_restarted_counted_and_its_panic_recorded() {
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop);
        let n = Arc::new(AtomicUsize::new(0));
        let n2 = n.clone();
        let spec = Periodic {
            name: "panicky".into(),
            period: Duration::from_millis(1),
            wake: None,
        };
        loops
            .spawn_periodic(spec, move || {
                if n2.fetch_add(1, Ordering::SeqCst) == 0 {
                    panic!("boom in tick");
                }
                Ok::<(), TestError>(())
            })
            .expect("spawn");
        // The second tick runs after the first back-off (1 s).
        wait_for(|| n.load(Ordering::SeqCst) >= 2);
        let st = loops.registry().get("panicky").expect("registered");
        assert_eq!(st.panics, 1);
        assert!(st.errors >= 1);
        assert!(st.ticks >= 2, "the panicked tick counts too");
        assert!(!st.finished, "still running");
        wait_for(|| {
            loops
                .registry()
                .get("panicky")
                .is_some_and(|s| s.last_error.is_none())
        });
        shutdown.trigger();
        assert!(loops.join_all(Duration::from_secs(10)).is_empty());
    }

    #[test]
    fn panic_is_recorded_with_the_loop_name_and_message() {
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop);
        let spec = Periodic {
            name: "always-panics".into(),
            period: Duration::from_millis(1),
            wake: None,
        };
        loops
            .spawn_periodic(spec, || -> Result<(), TestError> { panic!("bad input") })
            .expect("spawn");
        wait_for(|| {
            loops
                .registry()
                .get("always-panics")
                .is_some_and(|s| s.panics == 1)
        });
        let st = loops.registry().get("always-panics").expect("registered");
        // The same text as the one log line of the panic.
        assert_eq!(
            st.last_error.as_deref(),
            Some("panicked: thread always-panics panicked: bad input; restarting in 1s")
        );
        // Shutdown during the back-off ends the loop at once.
        shutdown.trigger();
        assert!(loops.join_all(Duration::from_secs(10)).is_empty());
        assert_eq!(
            loops
                .registry()
                .get("always-panics")
                .expect("listed")
                .panics,
            1
        );
    }

    #[test]
    fn event_loop_body_that_panics_runs_again() {
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop);
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = runs.clone();
        loops
            .spawn("ev-panics", move |stop, handle| {
                let began = handle.begin_tick();
                if counted.fetch_add(1, Ordering::SeqCst) == 0 {
                    panic!("first run panics mid-tick");
                }
                handle.end_tick(began, None);
                while !stop.sleep(Duration::from_secs(3600)) {}
            })
            .expect("spawn");
        wait_for(|| runs.load(Ordering::SeqCst) == 2);
        let st = loops.registry().get("ev-panics").expect("registered");
        assert_eq!(st.panics, 1);
        assert_eq!(st.busy_since, None, "the panicked tick is closed");
        shutdown.trigger();
        assert!(loops.join_all(Duration::from_secs(10)).is_empty());
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn supervised_loop_survives_a_panic() {
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop);
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = runs.clone();
        loops
            .spawn_supervised("sup-panics", Duration::from_millis(1), move |stop, _h| {
                if counted.fetch_add(1, Ordering::SeqCst) == 0 {
                    panic!("accept loop bug");
                }
                while !stop.sleep(Duration::from_secs(3600)) {}
                Ok::<(), TestError>(())
            })
            .expect("spawn");
        wait_for(|| runs.load(Ordering::SeqCst) == 2);
        assert_eq!(
            loops.registry().get("sup-panics").expect("listed").panics,
            1
        );
        shutdown.trigger();
        assert!(loops.join_all(Duration::from_secs(10)).is_empty());
    }

    #[test]
    fn transient_thread_panic_ends_only_it_and_is_counted() {
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop);
        let (tx, rx) = crossbeam_channel::bounded::<()>(1);
        loops
            .spawn_transient("stream-7", move |_stop| {
                let _tx = tx; // dropped while unwinding: the receiver sees it.
                panic!("bad frame");
            })
            .expect("spawn");
        assert!(rx.recv_timeout(Duration::from_secs(10)).is_err());
        wait_for(|| loops.registry().transient_panics().get("stream-7") == Some(&1));
        shutdown.trigger();
        assert!(loops.join_all(Duration::from_secs(10)).is_empty());
    }

    #[test]
    fn error_chain_joins_sources() {
        let inner = std::io::Error::other("connection refused");
        let outer = SpawnError {
            name: "x".into(),
            source: inner,
        };
        assert_eq!(
            error_chain(&outer),
            "cannot spawn thread x: connection refused"
        );
    }
}
