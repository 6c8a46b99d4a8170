//! Running a helper program with a deadline: an exec credential plugin, a CNI plugin.
//! The child runs in a process group of its own; its input is written and its stdout
//! and stderr read on the calling thread with `poll(2)` until both end or the deadline
//! passes, and then the whole group is killed. A program that exits while something it
//! started (`sleep 1000 &`) keeps its stdout open therefore costs the caller at most
//! the deadline, and that something is killed too. No thread is started for it.

use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use rustix::process::{Pid, Signal};

/// What a program that ended wrote, and how it ended.
#[derive(Debug)]
pub struct Finished {
    /// Its exit status.
    pub status: ExitStatus,
    /// Its standard output, at most the bound asked for (the rest is read and dropped).
    pub stdout: Vec<u8>,
    /// Its standard error, the same way.
    pub stderr: Vec<u8>,
}

/// Why a program did not run to its end.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// It could not be started.
    #[error("cannot run it: {0}")]
    Spawn(#[source] io::Error),
    /// Its deadline passed; it and what it started were killed.
    #[error("did not finish within {0:?} (killed with what it started)")]
    TimedOut(Duration),
    /// Writing its input, reading its output or waiting for it failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The error.
        #[source]
        source: io::Error,
    },
}

/// Runs `cmd` with `input` on its stdin (closed when written; none when empty),
/// reading at most `max_output` bytes of each of stdout and stderr, and waits for it
/// to exit, all within `timeout`.
pub fn run_with_deadline(
    cmd: &mut Command,
    input: &[u8],
    timeout: Duration,
    max_output: usize,
) -> Result<Finished, RunError> {
    cmd.stdin(if input.is_empty() {
        Stdio::null()
    } else {
        Stdio::piped()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    // Its own process group, so that a timeout kills what it started too.
    .process_group(0);
    let mut child = cmd.spawn().map_err(RunError::Spawn)?;
    let deadline = crate::time::saturating_deadline(Instant::now(), timeout);
    let outcome = exchange(&mut child, input, deadline, max_output).and_then(|(out, err)| {
        wait_until(&mut child, deadline).map(|status| Finished {
            status,
            stdout: out,
            stderr: err,
        })
    });
    match outcome {
        Ok(done) => Ok(done),
        Err(e) => {
            kill_group(&mut child);
            Err(e.unwrap_or(RunError::TimedOut(timeout)))
        }
    }
}

/// A child's open pipe to read (None once it has ended).
type Pipe = Box<dyn ReadFd>;

/// A child's pipe: readable, with its descriptor for poll(2).
trait ReadFd: Read + AsFd {}

impl<T: Read + AsFd> ReadFd for T {}

/// Writes `input` to the child's stdin and reads its stdout and stderr until both
/// end. Err(None) when the deadline passes.
fn exchange(
    child: &mut Child,
    input: &[u8],
    deadline: Instant,
    max_output: usize,
) -> Result<(Vec<u8>, Vec<u8>), Option<RunError>> {
    let io_err = |what: &'static str| move |source: io::Error| Some(RunError::Io { what, source });
    let mut stdin: Option<ChildStdin> = child.stdin.take();
    if let Some(s) = &stdin {
        rustix::io::ioctl_fionbio(s, true)
            .map_err(io::Error::from)
            .map_err(io_err("cannot write its input"))?;
    }
    let mut written = 0;
    let mut pipes: [(Option<Pipe>, Vec<u8>); 2] = [
        (child.stdout.take().map(|p| Box::new(p) as Pipe), Vec::new()),
        (child.stderr.take().map(|p| Box::new(p) as Pipe), Vec::new()),
    ];
    let mut chunk = [0u8; 8192];
    while stdin.is_some() || pipes.iter().any(|(p, _)| p.is_some()) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(None);
        }
        // The input while some is left to write, then the pipes still open.
        let mut set: Vec<PollFd<'_>> = stdin
            .iter()
            .map(|s| PollFd::from_borrowed_fd(s.as_fd(), PollFlags::OUT))
            .chain(
                pipes
                    .iter()
                    .filter_map(|(p, _)| p.as_ref())
                    .map(|p| PollFd::from_borrowed_fd(p.as_fd(), PollFlags::IN)),
            )
            .collect();
        let wait = crate::time::poll_timeout(left.max(Duration::from_millis(1)));
        match rustix::event::poll(&mut set, Some(&wait)) {
            Ok(_) => {}
            Err(Errno::INTR) => continue,
            Err(e) => return Err(io_err("cannot wait for it")(e.into())),
        }
        let mut revents = set.iter().map(|p| !p.revents().is_empty());
        let input_ready = stdin.is_some() && revents.next().unwrap_or(false);
        let ready: Vec<bool> = pipes
            .iter()
            .map(|(p, _)| p.is_some() && revents.next().unwrap_or(false))
            .collect();
        if input_ready {
            if let Some(s) = stdin.as_mut() {
                match s.write(&input[written..]) {
                    Ok(n) => written += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    // It closed its input early: what it read is all it wants.
                    Err(e) if e.kind() == io::ErrorKind::BrokenPipe => written = input.len(),
                    Err(e) => return Err(io_err("cannot write its input")(e)),
                }
            }
            if written >= input.len() {
                // Dropping the pipe closes it: the child reads end-of-file.
                stdin = None;
            }
        }
        for (ready, (pipe, buf)) in ready.into_iter().zip(pipes.iter_mut()) {
            if !ready {
                continue;
            }
            let Some(p) = pipe.as_mut() else { continue };
            // poll said it is readable (or closed): this read does not block.
            match p.read(&mut chunk) {
                Ok(0) => *pipe = None,
                Ok(k) => {
                    let room = max_output.saturating_sub(buf.len());
                    buf.extend_from_slice(&chunk[..k.min(room)]);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err("cannot read its output")(e)),
            }
        }
    }
    let [(_, out), (_, err)] = pipes;
    Ok((out, err))
}

/// Waits for the child to exit, until the deadline. std has no timed wait, so this
/// polls; it only runs after the child closed its output, when it is exiting.
fn wait_until(child: &mut Child, deadline: Instant) -> Result<ExitStatus, Option<RunError>> {
    loop {
        match child.try_wait() {
            Ok(Some(st)) => return Ok(st),
            Ok(None) if Instant::now() >= deadline => return Err(None),
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(source) => {
                return Err(Some(RunError::Io {
                    what: "cannot wait for it",
                    source,
                }))
            }
        }
    }
}

/// Kills the child's process group (it and whatever it started) and reaps it.
fn kill_group(child: &mut Child) {
    // kill(-pid, SIGKILL): the process group the child leads (it was spawned with
    // process_group(0), so its PGID is its PID); the child is not reaped yet, so that
    // PID is still ours.
    if let Some(pid) = i32::try_from(child.id()).ok().and_then(Pid::from_raw) {
        let _ = rustix::process::kill_process_group(pid, Signal::KILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("/bin/sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn input_goes_in_and_both_outputs_come_back_bounded() {
        let input = vec![b'x'; 300_000];
        let done = run_with_deadline(
            &mut sh("wc -c; echo oops >&2; exit 3"),
            &input,
            Duration::from_secs(20),
            1024,
        )
        .expect("runs");
        assert_eq!(String::from_utf8_lossy(&done.stdout).trim(), "300000");
        assert_eq!(done.stderr, b"oops\n");
        assert_eq!(done.status.code(), Some(3));
        let big = run_with_deadline(
            &mut sh("head -c 100000 /dev/zero"),
            b"",
            Duration::from_secs(20),
            1000,
        )
        .expect("runs");
        assert_eq!(big.stdout.len(), 1000, "read to the end, kept to the bound");
    }

    #[test]
    fn a_program_that_ignores_its_input_is_no_error() {
        let done = run_with_deadline(
            &mut sh("exec 0<&-; echo done"),
            &vec![b'y'; 1 << 20],
            Duration::from_secs(20),
            1024,
        )
        .expect("runs");
        assert_eq!(done.stdout, b"done\n");
    }

    #[test]
    fn past_its_deadline_it_and_its_children_are_killed() {
        let dir = crate::testutil::TempDir::new("process-deadline");
        let pidfile = dir.0.join("child.pid");
        let t = Instant::now();
        let err = run_with_deadline(
            &mut sh(&format!(
                "sleep 1000 & echo $! > {}; wait",
                pidfile.display()
            )),
            b"",
            Duration::from_millis(500),
            1024,
        )
        .expect_err("times out");
        assert!(matches!(err, RunError::TimedOut(_)), "{err}");
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        let pid = std::fs::read_to_string(&pidfile).expect("pid file");
        let alive = || {
            std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()))
                .map(|s| !s.contains(") Z "))
                .unwrap_or(false)
        };
        // SIGKILL is delivered at once, but the process takes a moment to go.
        let until = Instant::now() + Duration::from_secs(10);
        while alive() {
            assert!(Instant::now() < until, "the sleep it started still runs");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn a_program_that_is_not_there_is_a_spawn_error() {
        let err = run_with_deadline(
            &mut Command::new("/nonexistent/rkubelet-plugin"),
            b"",
            Duration::from_secs(1),
            1024,
        )
        .expect_err("no such file");
        assert!(matches!(err, RunError::Spawn(_)), "{err}");
    }
}
