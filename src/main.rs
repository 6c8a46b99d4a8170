//! rkubelet's entry point: flags and config file into a `KubeletConfig`, the Docker
//! runtime, the kubelet's loops, then the main thread waits for readiness (systemd
//! `READY=1`) and for a signal. SIGTERM/SIGINT stop every loop and exit 0 within 2 s,
//! leaving the containers running; SIGHUP is logged.
//!
//! `rkubelet pause` is not the kubelet: it is the sandbox's pause process (`pause`),
//! dispatched first thing in `main`.
//!
//! Exit codes: 0 after a clean stop (or `--help`/`--version`), 1 when start-up fails
//! (a port in use, no root directory), 2 for a bad flag, config file or endpoint.

use std::process::ExitCode;
use std::time::Duration;

use base::loops::error_chain;
use base::panics;
use rkubelet::config::{self, Loaded};
use rkubelet::{kubelet, logging, systemd};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

/// How long the loops get to finish after SIGTERM; the process exits within 2 s either way.
const SHUTDOWN_DEADLINE: Duration = Duration::from_millis(1500);

/// The process's exit codes.
#[derive(Clone, Copy, Debug)]
enum Exit {
    /// Stopped cleanly.
    Ok = 0,
    /// Start-up failed.
    Failure = 1,
    /// Bad flags, config file or endpoint: nothing was started.
    Usage = 2,
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> Self {
        ExitCode::from(e as u8)
    }
}

fn main() -> ExitCode {
    // `rkubelet pause` is a sandbox's init: nothing of the kubelet's start-up (no
    // logging, no threads, no config) runs before it.
    let mut args = std::env::args_os().skip(1);
    if args
        .next()
        .is_some_and(|a| a == rkubelet::pause::SUBCOMMAND)
    {
        let rest: Vec<_> = args.collect();
        return ExitCode::from(rkubelet::pause::run(&rest));
    }
    let exit = run();
    // What the log file's buffer still holds (`--log-file`).
    logging::flush();
    exit.into()
}

fn run() -> Exit {
    base::malloc::tune();
    let args: Vec<String> = std::env::args().collect();
    let cfg = match config::load(args) {
        Ok(Loaded::Run(cfg)) => cfg,
        Ok(Loaded::Help(text)) => return print_out(&text),
        Ok(Loaded::Version(v)) => return print_out(&v),
        Err(e) => {
            eprintln!("rkubelet: {}", error_chain(&e));
            return Exit::Usage;
        }
    };
    // The endpoint's form is checked (not dialled) before logging starts, so a bad one
    // is one line on stderr like every other bad flag, not a start-up log followed by an
    // error. What answers on it is asked in `kubelet::start`.
    let endpoints = std::iter::once(&cfg.container_runtime_endpoint)
        .chain(Some(&cfg.image_service_endpoint).filter(|e| !e.is_empty()));
    for endpoint in endpoints {
        if let Err(e) = kubelet::check_endpoint(endpoint) {
            eprintln!("rkubelet: {}", error_chain(&e));
            return Exit::Usage;
        }
    }
    logging::init(cfg.verbosity);
    if let Some(path) = &cfg.log_file {
        if let Err(e) = logging::set_log_file(path, u64::from(cfg.log_file_max_size)) {
            eprintln!("rkubelet: --log-file {}: {e}", path.display());
            return Exit::Usage;
        }
    }
    install_panic_hook();
    raise_nofile_limit();
    cfg.log_unsupported_fields();
    log::info!(
        "rkubelet {} starting: node {}, root dir {}, runtime {}",
        env!("CARGO_PKG_VERSION"),
        cfg.node_name,
        cfg.root_dir.display(),
        cfg.container_runtime_endpoint
    );
    if let Some(line) = base::clock::behind_floor(std::time::SystemTime::now()) {
        log::warn!("{line}");
    }

    let mut signals = match signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP]) {
        Ok(s) => s,
        Err(e) => {
            log::error!("cannot install signal handlers: {e}");
            return Exit::Failure;
        }
    };
    let signals_handle = signals.handle();
    let (sig_tx, sig_rx) = crossbeam_channel::bounded(4);

    let running = match kubelet::start(cfg) {
        Ok(r) => r,
        Err(e) => {
            log::error!("{}", error_chain(&e));
            return Exit::Failure;
        }
    };
    // The signal thread only forwards signals to the main thread; it ends when the
    // handle is closed. Signals that arrive before it runs wait in signal-hook.
    let spawned = running.loops().spawn("signals", move |_stop, handle| {
        for s in signals.forever() {
            let began = handle.begin_tick();
            let sent = sig_tx.send(s);
            handle.end_tick(began, None);
            if sent.is_err() {
                return;
            }
        }
    });
    if let Err(e) = spawned {
        log::error!("{}", error_chain(&e));
        running.stop(SHUTDOWN_DEADLINE);
        return Exit::Failure;
    }
    for (name, addr) in &running.bound {
        log::info!("Starting to listen ({name}) on {addr}");
    }

    let mut first_relist = running.first_relist.clone();
    let mut fatal = running.fatal.clone();
    let mut exit = Exit::Ok;
    loop {
        crossbeam_channel::select! {
            recv(first_relist) -> _ => {
                // Servers are bound and the runtime has been listed once: ready.
                if systemd::notify("READY=1\nSTATUS=serving; first relist done") {
                    log::info!("told systemd we are ready");
                }
                // systemd's watchdog counts from readiness; so do our pings.
                if let Err(e) = running.start_watchdog() {
                    log::error!("{}", error_chain(&e));
                }
                first_relist = crossbeam_channel::never();
            },
            recv(fatal) -> msg => match msg {
                Ok(msg) => {
                    log::error!("stopping: {msg}");
                    exit = Exit::Failure;
                    break;
                }
                Err(_) => fatal = crossbeam_channel::never(),
            },
            recv(sig_rx) -> sig => match sig {
                Ok(SIGHUP) => log::info!("SIGHUP: reloading the configuration is not supported yet; ignored"),
                Ok(s) => {
                    log::info!("received signal {s}; shutting down (containers keep running)");
                    break;
                }
                Err(_) => break,
            },
        }
    }
    systemd::notify("STOPPING=1");
    // Closed first, so that the signal thread ends with the others.
    signals_handle.close();
    let lingering = running.stop(SHUTDOWN_DEADLINE);
    if !lingering.is_empty() {
        log::warn!("threads still busy at exit: {}", lingering.join(", "));
    }
    log::info!("rkubelet stopped");
    exit
}

/// Raises the soft limit of open descriptors to the hard limit, as the Go runtime does
/// for the upstream kubelet at start (since Go 1.19): systemd's default soft limit
/// (1024) is meant for `select(2)` users, which rkubelet is not. The servers' caps keep
/// rkubelet well inside 1024 either way.
fn raise_nofile_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    // getrlimit cannot fail for RLIMIT_NOFILE; `None` is RLIM_INFINITY.
    let lim = getrlimit(Resource::Nofile);
    let (cur, max) = (
        lim.current.unwrap_or(u64::MAX),
        lim.maximum.unwrap_or(u64::MAX),
    );
    if cur >= max {
        return;
    }
    let wanted = Rlimit {
        current: lim.maximum,
        maximum: lim.maximum,
    };
    if setrlimit(Resource::Nofile, wanted).is_ok() {
        log::debug!("raised the open-descriptor limit from {cur} to {max}");
    }
}

/// Prints `--help`/`--version` text. A closed stdout (`rkubelet --help | head`) is not
/// a failure: `println!` would panic on it.
fn print_out(text: &str) -> Exit {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}").and_then(|()| out.flush());
    Exit::Ok
}

/// Logs a panic with the name of the thread it happened on (so the loop is known).
/// A loop's panic is caught by its loop, which logs this line once with its restart
/// (`panics::note_caught_panic`); any other panic (the main thread's) is logged here and
/// handed to the default hook, and on the main thread it ends the process with a
/// non-zero exit code (101).
fn install_panic_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let thread = std::thread::current();
        let line = panics::panic_line(thread.name(), info);
        if panics::note_caught_panic(&line) {
            return;
        }
        log::error!("{line}");
        default(info);
    }));
}
