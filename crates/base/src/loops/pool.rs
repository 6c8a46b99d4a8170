//! Worker pools of the loop helper: named worker threads that start when jobs wait
//! and exit when idle, so `ps -T` on an idle node shows its loops and no idle workers
//! (the `pod-kill-N`, `pod-worker-N`, `probe-worker-N`, `probe-exec-N` and `srv-*-N`
//! threads). Every worker is spawned by [`Loops`] (its stack size, its registry, its
//! join at shutdown) under the name `<prefix>-N`, the lowest N free.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use super::{error_chain, lock, LoopHandle, Loops, SpawnError, Stop};

/// How a [`Pool`] grows and shrinks.
#[derive(Clone, Debug)]
pub struct PoolSpec {
    /// Workers are called `<prefix>-N`, N below `max`; the lowest free N is taken, so
    /// names are reused (`pod-kill-0` again after it exited). At most 15 bytes in all.
    pub prefix: String,
    /// Workers at most (at least one).
    pub max: usize,
    /// A worker that has had no job for this long exits, as does one that for this long
    /// took only jobs another free worker could have taken.
    pub idle: Duration,
}

/// A bounded pool of named worker threads that take jobs from one channel: a worker
/// starts when a job is queued and no worker is free to take it (up to `max`), and
/// exits after `idle` without a job, or without a job that no other free worker could
/// have taken (so a trickle that one worker serves keeps one). So `ps -T` shows `pod-kill-0` only while kills
/// run, and an idle node keeps no thread for work it does not have.
///
/// The caller owns the channel (bounded or not, so back-pressure stays its own) and
/// calls [`Pool::kick`] after each send. Each job is one tick of the worker in the
/// registry; a worker that exits for idleness leaves the registry (`/debug/loops`,
/// `/metrics`) and a later one under its name registers afresh.
pub struct Pool<J> {
    shared: Arc<PoolShared<J>>,
}

impl<J> Clone for Pool<J> {
    fn clone(&self) -> Self {
        Pool {
            shared: self.shared.clone(),
        }
    }
}

impl<J> fmt::Debug for Pool<J> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let slots = lock(&self.shared.slots);
        f.debug_struct("Pool")
            .field("prefix", &self.shared.spec.prefix)
            .field("live", &slots.live.iter().filter(|l| **l).count())
            .field("queued", &self.shared.rx.len())
            .finish()
    }
}

type PoolRun<J> = Box<dyn Fn(J, &LoopHandle) + Send + Sync>;

struct PoolShared<J> {
    loops: Loops,
    spec: PoolSpec,
    rx: Receiver<J>,
    slots: Mutex<PoolSlots>,
    run: PoolRun<J>,
}

/// Who holds which name, and how many workers can take a job without a new one.
#[derive(Debug)]
struct PoolSlots {
    /// `live[n]`: `<prefix>-n` is taken (starting, working, waiting or leaving).
    live: Vec<bool>,
    /// Workers spawned that have not yet waited for their first job.
    starting: usize,
    /// Workers waiting for a job now.
    waiting: usize,
}

/// Why a pool worker stopped waiting.
enum Got<J> {
    Job(J),
    Idle,
    Stop,
}

impl<J: Send + 'static> Pool<J> {
    /// A pool taking jobs from `rx` and running each with `run` (given the worker's
    /// handle, for its name) on a worker spawned by `loops` (with its stack size). No
    /// thread starts before the first [`Pool::kick`].
    pub fn new<F>(loops: &Loops, spec: PoolSpec, rx: Receiver<J>, run: F) -> Pool<J>
    where
        F: Fn(J, &LoopHandle) + Send + Sync + 'static,
    {
        let max = spec.max.max(1);
        Pool {
            shared: Arc::new(PoolShared {
                loops: loops.clone(),
                spec: PoolSpec { max, ..spec },
                rx,
                slots: Mutex::new(PoolSlots {
                    live: vec![false; max],
                    starting: 0,
                    waiting: 0,
                }),
                run: Box::new(run),
            }),
        }
    }

    /// Starts a worker when jobs are queued that the free workers cannot all take, and
    /// the pool is below its maximum. Call it after every send. A worker that cannot
    /// be spawned is logged; its job stays queued for the workers there are (or the
    /// next kick).
    pub fn kick(&self) {
        kick(&self.shared);
    }

    /// Workers alive now (starting, working, waiting or leaving).
    #[cfg(test)]
    pub(crate) fn live(&self) -> usize {
        lock(&self.shared.slots).live.iter().filter(|l| **l).count()
    }
}

fn kick<J: Send + 'static>(shared: &Arc<PoolShared<J>>) {
    loop {
        if shared.loops.stop.is_stopped() {
            return;
        }
        let mut slots = lock(&shared.slots);
        if shared.rx.len() <= slots.waiting + slots.starting {
            return;
        }
        let Some(n) = slots.live.iter().position(|l| !*l) else {
            // At the maximum; a leaving worker kicks again once its name is free.
            return;
        };
        slots.live[n] = true;
        slots.starting += 1;
        drop(slots);
        let name = format!("{}-{n}", shared.spec.prefix);
        if let Err(e) = spawn_worker(shared, n, &name) {
            let mut slots = lock(&shared.slots);
            slots.live[n] = false;
            slots.starting -= 1;
            drop(slots);
            shared.loops.registry.remove(&name);
            log::error!("{}", error_chain(&e));
            return;
        }
    }
}

fn spawn_worker<J: Send + 'static>(
    shared: &Arc<PoolShared<J>>,
    n: usize,
    name: &str,
) -> Result<(), SpawnError> {
    let loops = &shared.loops;
    loops.registry.register(name, None);
    let handle = loops.handle(name);
    let stop = loops.stop.clone();
    let me = shared.clone();
    loops.spawn_joined(name, move || {
        pool_worker(&me, &stop, &handle);
        me.loops.registry.remove(handle.name());
        lock(&me.slots).live[n] = false;
        log::debug!("{}: exited", handle.name());
        // Jobs may have come while this name was leaving and the pool was full.
        kick(&me);
    })
}

fn pool_worker<J: Send + 'static>(shared: &PoolShared<J>, stop: &Stop, handle: &LoopHandle) {
    {
        let mut slots = lock(&shared.slots);
        slots.starting -= 1;
        slots.waiting += 1;
    }
    // When this worker last took a job no other worker was free to take: it was
    // spawned for one. Jobs that any of several free workers could have taken do not
    // count, or a steady trickle handed round the free workers in turn (crossbeam
    // wakes its waiting receivers in turn) would keep every worker a burst started,
    // each with its stack and allocator caches, however little the trickle needs.
    let mut needed_at = Instant::now();
    loop {
        let got = crossbeam_channel::select! {
            recv(stop.receiver()) -> _ => Got::Stop,
            recv(shared.rx) -> job => match job {
                Ok(job) => Got::Job(job),
                Err(_) => Got::Stop,
            },
            default(shared.spec.idle) => Got::Idle,
        };
        let mut slots = lock(&shared.slots);
        match got {
            Got::Job(job) => {
                if slots.waiting == 1 {
                    needed_at = Instant::now();
                }
                slots.waiting -= 1;
                drop(slots);
                let began = handle.begin_job();
                // A job's panic is caught here: counted and logged as the worker's,
                // and the worker goes on with the next job (its job's own state is
                // the caller's to release, as the pod workers do).
                match super::catch(|| (shared.run)(job, handle)) {
                    Ok(()) => handle.end_tick(began, None),
                    Err(line) => handle.panicked(&line, Duration::ZERO),
                }
                let mut slots = lock(&shared.slots);
                // Another worker is free and nothing waits: the pool has not needed
                // this one for `idle`, so it leaves as an idle worker would.
                if slots.waiting > 0
                    && shared.rx.is_empty()
                    && needed_at.elapsed() >= shared.spec.idle
                {
                    return;
                }
                slots.waiting += 1;
            }
            // A job sent just now, before its kick saw this worker waiting: stay.
            Got::Idle if !shared.rx.is_empty() => {}
            Got::Idle | Got::Stop => {
                slots.waiting -= 1;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{shutdown_channel, BIG_STACK, LOOP_STACK};
    use super::*;
    use std::time::Instant;

    fn wait_for(mut cond: impl FnMut() -> bool) {
        let until = Instant::now() + Duration::from_secs(10);
        while !cond() {
            assert!(Instant::now() < until, "condition not met in 10 s");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn pool_workers(loops: &Loops, prefix: &str) -> Vec<String> {
        loops
            .registry()
            .snapshot()
            .into_keys()
            .filter(|n| n.starts_with(prefix))
            .collect()
    }

    #[test]
    fn pool_starts_workers_on_demand_up_to_its_max_and_reuses_names_after_idle() {
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop);
        let (tx, rx) = crossbeam_channel::unbounded::<u32>();
        let (gate_tx, gate_rx) = crossbeam_channel::unbounded::<()>();
        let (seen_tx, seen_rx) = crossbeam_channel::unbounded::<String>();
        let spec = PoolSpec {
            prefix: "tp".into(),
            max: 3,
            idle: Duration::from_millis(200),
        };
        let pool = Pool::new(&loops, spec, rx, move |_job, h: &LoopHandle| {
            let _ = seen_tx.send(h.name().to_string());
            let _ = gate_rx.recv_timeout(Duration::from_secs(10));
        });
        assert_eq!(pool.live(), 0, "no thread before the first job");
        assert!(pool_workers(&loops, "tp-").is_empty());
        for i in 0..5 {
            tx.send(i).expect("send");
            pool.kick();
        }
        let mut names: Vec<String> = (0..3)
            .map(|_| seen_rx.recv_timeout(Duration::from_secs(10)).expect("ran"))
            .collect();
        crate::sort::sort(&mut names);
        assert_eq!(
            names,
            ["tp-0", "tp-1", "tp-2"],
            "grows to its max, no further"
        );
        assert_eq!(pool.live(), 3);
        for _ in 0..5 {
            gate_tx.send(()).expect("open");
        }
        for _ in 0..2 {
            seen_rx
                .recv_timeout(Duration::from_secs(10))
                .expect("queued jobs ran");
        }
        // Idle workers leave, and leave the registry.
        wait_for(|| pool.live() == 0 && pool_workers(&loops, "tp-").is_empty());
        // The next job starts the lowest name again.
        tx.send(9).expect("send");
        pool.kick();
        assert_eq!(
            seen_rx.recv_timeout(Duration::from_secs(10)).expect("ran"),
            "tp-0"
        );
        gate_tx.send(()).expect("open");
        let st = loops.registry().get("tp-0").expect("registered again");
        assert!(!st.finished);
        shutdown.trigger();
        assert!(loops.join_all(Duration::from_secs(10)).is_empty());
        assert_eq!(pool.live(), 0);
    }

    #[test]
    fn pool_keeps_only_the_workers_a_trickle_of_jobs_needs() {
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop);
        let (tx, rx) = crossbeam_channel::unbounded::<bool>();
        let (gate_tx, gate_rx) = crossbeam_channel::unbounded::<()>();
        let (ran_tx, ran_rx) = crossbeam_channel::unbounded::<()>();
        let spec = PoolSpec {
            prefix: "tt".into(),
            max: 3,
            idle: Duration::from_millis(300),
        };
        let pool = Pool::new(&loops, spec, rx, move |gated, _h: &LoopHandle| {
            let _ = ran_tx.send(());
            if gated {
                let _ = gate_rx.recv_timeout(Duration::from_secs(10));
            }
        });
        // A burst: three workers.
        for _ in 0..3 {
            tx.send(true).expect("send");
            pool.kick();
        }
        for _ in 0..3 {
            ran_rx.recv_timeout(Duration::from_secs(10)).expect("ran");
        }
        assert_eq!(pool.live(), 3);
        for _ in 0..3 {
            gate_tx.send(()).expect("open");
        }
        // Then a job every 30 ms, each over at once: every worker would see one well
        // within its idle time, but one worker takes them all.
        let until = Instant::now() + Duration::from_secs(10);
        while pool.live() > 1 {
            assert!(Instant::now() < until, "{} workers kept", pool.live());
            tx.send(false).expect("send");
            pool.kick();
            ran_rx.recv_timeout(Duration::from_secs(10)).expect("ran");
            std::thread::sleep(Duration::from_millis(30));
        }
        // The one left still takes the trickle, and no second one is kept for it (a
        // stall past the idle time on a loaded machine may let the last one go too).
        for _ in 0..15 {
            tx.send(false).expect("send");
            pool.kick();
            ran_rx.recv_timeout(Duration::from_secs(10)).expect("ran");
            std::thread::sleep(Duration::from_millis(30));
        }
        assert!(pool.live() <= 1, "{} workers kept", pool.live());
        shutdown.trigger();
        assert!(loops.join_all(Duration::from_secs(10)).is_empty());
    }

    #[test]
    fn pool_worker_gets_the_stack_size_asked_for() {
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop).with_stack_size(BIG_STACK);
        let (tx, rx) = crossbeam_channel::unbounded::<()>();
        let (done_tx, done_rx) = crossbeam_channel::unbounded::<usize>();
        let spec = PoolSpec {
            prefix: "deep".into(),
            max: 1,
            idle: Duration::from_secs(60),
        };
        // Recursion that needs more than LOOP_STACK but fits in BIG_STACK.
        fn depth(n: usize) -> usize {
            let buf = [n as u8; 1024];
            if n == 0 {
                return usize::from(buf[0]);
            }
            std::hint::black_box(&buf);
            depth(n - 1) + 1
        }
        let pool = Pool::new(&loops, spec, rx, move |(), _h: &LoopHandle| {
            let _ = done_tx.send(depth(LOOP_STACK / 1024 + 64));
        });
        tx.send(()).expect("send");
        pool.kick();
        assert!(done_rx.recv_timeout(Duration::from_secs(10)).is_ok());
        shutdown.trigger();
        assert!(loops.join_all(Duration::from_secs(10)).is_empty());
    }
}
