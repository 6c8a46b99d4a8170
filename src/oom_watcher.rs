//! The OOM watcher (upstream `pkg/kubelet/oom/oom_watcher_linux.go` over cAdvisor's
//! `utils/oomparser`): the `oom-watcher` thread reads the kernel's log from
//! `/dev/kmsg` and turns each OOM kill whose victim ran in the root cgroup (a system
//! OOM, not a container's own limit) into a Warning `SystemOOM` node event, `System OOM
//! encountered, victim process: <name>, pid: <pid>`. A container killed by its own
//! limit stays `OOMKilled` from Docker's state; nothing here touches it.
//!
//! The parser is pure ([`OomParser::feed`] takes one kmsg record's text) and recognises
//! cAdvisor's patterns: the `invoked oom-killer:` line opens an instance; the kernel 5.0+
//! `oom-kill:constraint=…,oom_memcg=…,task_memcg=…,task=…,pid=…` line or the older
//! `Task in <memcg> killed as a result of limit of <memcg>` one names the cgroups;
//! `Killed process <pid> (<name>)` (also as `Out of memory: Killed process …` and
//! `Memory cgroup out of memory: Killed process …`) closes it.
//!
//! The reader opens `/dev/kmsg` non-blocking, seeks to its end (older records were
//! seen by an earlier run; upstream's parser replays the whole buffer at start) and
//! waits in `poll(2)` on it and on the shutdown descriptor ([`Stop::fd`]), with no
//! timeout: an idle watcher never wakes, and sees shutdown at once. When
//! `/dev/kmsg` cannot be read (no privilege, a container), it logs once and no thread
//! is started.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use base::loops::{LoopHandle, Loops, SpawnError, Stop};
use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;

/// The thread's name.
pub(crate) const THREAD: &str = "oom-watcher";
/// Upstream's event reason.
pub(crate) const SYSTEM_OOM_EVENT: &str = "SystemOOM";
/// The cgroup of a system OOM's victim (upstream `recordEventContainerName`).
const ROOT_CGROUP: &str = "/";
/// A kmsg record is at most this long (the kernel's `CONSOLE_EXT_LOG_MAX`).
const RECORD_MAX: usize = 8192;

/// One OOM kill (cAdvisor's `OomInstance`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct OomInstance {
    /// The victim's pid.
    pub pid: u32,
    /// The victim's command name.
    pub process_name: String,
    /// The cgroup whose limit was hit (`/` for a system OOM).
    pub container_name: String,
    /// The victim's cgroup.
    pub victim_container_name: String,
}

impl OomInstance {
    /// The node event's message for a system OOM, None for one inside a cgroup
    /// (upstream's watcher records only victims of the root cgroup).
    pub(crate) fn system_oom_message(&self) -> Option<String> {
        if self.victim_container_name != ROOT_CGROUP {
            return None;
        }
        let mut m = "System OOM encountered".to_string();
        if !self.process_name.is_empty() && self.pid != 0 {
            m += &format!(", victim process: {}, pid: {}", self.process_name, self.pid);
        }
        Some(m)
    }
}

/// The kernel log's OOM records, assembled across lines.
#[derive(Debug, Default)]
pub(crate) struct OomParser {
    current: Option<OomInstance>,
}

impl OomParser {
    /// Feeds one kmsg record (`6,1234,5678,-;message`, or just the message); returns
    /// the OOM instance it completes.
    pub(crate) fn feed(&mut self, record: &str) -> Option<OomInstance> {
        let message = kmsg_message(record);
        if message.contains("invoked oom-killer:") {
            self.current = Some(OomInstance {
                container_name: ROOT_CGROUP.into(),
                victim_container_name: ROOT_CGROUP.into(),
                ..Default::default()
            });
            return None;
        }
        let cur = self.current.as_mut()?;
        if let Some(rest) = message.strip_prefix("oom-kill:") {
            for field in rest.split(',') {
                let Some((k, v)) = field.split_once('=') else {
                    continue;
                };
                match k {
                    "oom_memcg" => cur.container_name = v.to_string(),
                    "task_memcg" => cur.victim_container_name = v.to_string(),
                    "task" => cur.process_name = v.to_string(),
                    "pid" => cur.pid = v.parse().unwrap_or(0),
                    _ => {}
                }
            }
            return None;
        }
        if let Some(rest) = message.strip_prefix("Task in ") {
            if let Some((victim, limit)) = rest.split_once(" killed as a result of limit of ") {
                cur.victim_container_name = victim.to_string();
                cur.container_name = limit.trim().to_string();
            }
            return None;
        }
        if let Some(i) = message.find("Killed process ") {
            let rest = &message[i + "Killed process ".len()..];
            let (pid, rest) = rest.split_once(' ')?;
            let name = rest.strip_prefix('(')?;
            let name = &name[..name.rfind(')')?];
            cur.pid = pid.parse().unwrap_or(cur.pid);
            cur.process_name = name.to_string();
            return self.current.take();
        }
        None
    }
}

/// The message of a kmsg record: after the `prio,seq,time,flags;` header, without
/// the continuation lines (` KEY=value`) the kernel appends.
pub(crate) fn kmsg_message(record: &str) -> &str {
    let text = match record.split_once(';') {
        Some((header, msg)) if header.split(',').count() >= 3 => msg,
        _ => record,
    };
    text.split('\n').next().unwrap_or("").trim_end()
}

/// Starts the watcher on `/dev/kmsg` for `node`; Ok(false) (logged once) when the
/// kernel log cannot be read.
pub(crate) fn start(loops: &Loops, node: &str, kmsg: &Path) -> Result<bool, SpawnError> {
    let mut file = match open_kmsg(kmsg) {
        Ok(f) => f,
        Err(e) => {
            log::info!(
                "oom watcher: cannot read {} ({e}); system OOMs are not reported",
                kmsg.display()
            );
            return Ok(false);
        }
    };
    let node = node.to_string();
    loops.spawn(THREAD, move |stop, handle| {
        watch(&mut file, &stop, &handle, |oom| {
            log::info!(
                "oom watcher: OOM kill of {} (pid {}) in {}",
                oom.process_name,
                oom.pid,
                oom.victim_container_name
            );
            if let Some(m) = oom.system_oom_message() {
                crate::record::node_event(&node, true, SYSTEM_OOM_EVENT, &m);
            }
        });
    })?;
    Ok(true)
}

/// Opens the kernel log non-blocking at its end.
fn open_kmsg(path: &Path) -> io::Result<File> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    // lseek(fd, 0, SEEK_END): /dev/kmsg takes it to mean "after the last record"; a
    // failure (a regular file in tests) is harmless.
    let _ = rustix::fs::seek(&f, rustix::fs::SeekFrom::End(0));
    Ok(f)
}

/// Reads records until shutdown, handing each completed OOM to `on_oom`.
pub(crate) fn watch(
    file: &mut File,
    stop: &Stop,
    handle: &LoopHandle,
    mut on_oom: impl FnMut(OomInstance),
) {
    let mut parser = OomParser::default();
    let mut buf = vec![0u8; RECORD_MAX];
    while !stop.is_stopped() {
        let mut pfds = [
            PollFd::new(&*file, PollFlags::IN),
            PollFd::from_borrowed_fd(stop.fd(), PollFlags::IN),
        ];
        // No timeout: the shutdown descriptor ends the wait.
        let n = rustix::event::poll(&mut pfds, None);
        if !matches!(n, Ok(n) if n > 0)
            || !pfds[1].revents().is_empty()
            || pfds[0].revents().is_empty()
        {
            continue;
        }
        let began = handle.begin_tick();
        // One read returns one record; drain what is there.
        loop {
            match file.read(&mut buf) {
                Ok(0) => break,
                Ok(len) => {
                    // /dev/kmsg gives one record per read, its continuation lines
                    // indented; a pipe (tests) may give several records at once.
                    let text = String::from_utf8_lossy(&buf[..len]);
                    for record in text.split('\n').filter(|l| !l.starts_with(' ')) {
                        if let Some(oom) = parser.feed(record) {
                            on_oom(oom);
                        }
                    }
                }
                // Records overwritten before we read them: go on with the next.
                Err(e) if e.raw_os_error() == Some(Errno::PIPE.raw_os_error()) => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    log::warn!("oom watcher: reading the kernel log: {e}; stopping");
                    handle.end_tick(began, Some(e.to_string()));
                    return;
                }
            }
        }
        handle.end_tick(began, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A system OOM as a 5.10 kernel logs it (recorded from a Debian 11 host).
    const SYSTEM_OOM: &[&str] = &[
        "4,1017,5470419921,-;stress invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0, oom_score_adj=0",
        "4,1018,5470419935,-;CPU: 1 PID: 23544 Comm: stress Not tainted 5.10.0-26-amd64 #1 Debian 5.10.197-1",
        "6,1019,5470420102,-;Mem-Info:",
        "6,1040,5470420412,-;oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/,task=stress,pid=23544,uid=0",
        "3,1041,5470420440,-;Out of memory: Killed process 23544 (stress) total-vm:2105480kB, anon-rss:1964516kB, file-rss:4kB, shmem-rss:0kB, UID:0 pgtables:3896kB oom_score_adj:0",
    ];

    /// A container's own limit (cgroup v1, docker parent).
    const MEMCG_OOM: &[&str] = &[
        "4,2000,6000000000,-;sh invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
        "6,2001,6000000100,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=4b1c,mems_allowed=0,oom_memcg=/docker/4b1c,task_memcg=/docker/4b1c,task=sh,pid=4242,uid=0",
        "3,2002,6000000200,-;Memory cgroup out of memory: Killed process 4242 (sh) total-vm:105000kB, anon-rss:20400kB, file-rss:0kB",
    ];

    /// A pre-5.0 kernel's lines.
    const LEGACY_OOM: &[&str] = &[
        "4,10,100,-;java invoked oom-killer: gfp_mask=0x24000c0, order=0, oom_score_adj=0",
        "6,11,101,-;Task in /kubepods/pod1/abc killed as a result of limit of /kubepods/pod1",
        "3,12,102,-;Killed process 1234 (java) total-vm:100kB, anon-rss:10kB, file-rss:0kB",
    ];

    fn run(lines: &[&str]) -> Vec<OomInstance> {
        let mut p = OomParser::default();
        lines.iter().filter_map(|l| p.feed(l)).collect()
    }

    #[test]
    fn a_system_oom_becomes_a_system_oom_event() {
        let got = run(SYSTEM_OOM);
        assert_eq!(
            got,
            [OomInstance {
                pid: 23544,
                process_name: "stress".into(),
                container_name: "/".into(),
                victim_container_name: "/".into(),
            }]
        );
        assert_eq!(
            got[0].system_oom_message().as_deref(),
            Some("System OOM encountered, victim process: stress, pid: 23544")
        );
    }

    #[test]
    fn a_containers_own_oom_is_not_a_system_oom() {
        let got = run(MEMCG_OOM);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].victim_container_name, "/docker/4b1c");
        assert_eq!(got[0].process_name, "sh");
        assert_eq!(got[0].system_oom_message(), None);
        let got = run(LEGACY_OOM);
        assert_eq!(got[0].pid, 1234);
        assert_eq!(got[0].container_name, "/kubepods/pod1");
        assert_eq!(got[0].victim_container_name, "/kubepods/pod1/abc");
    }

    #[test]
    fn records_without_an_opening_line_are_ignored() {
        assert!(run(&["3,1,1,-;Out of memory: Killed process 1 (x)"]).is_empty());
        assert_eq!(kmsg_message("6,1,2,-;hello\n SUBSYSTEM=x\n"), "hello");
        assert_eq!(kmsg_message("plain; text"), "plain; text");
    }

    #[test]
    fn reads_dev_kmsg_where_readable() {
        let path = Path::new("/dev/kmsg");
        match open_kmsg(path) {
            Ok(_) => {}
            Err(e) => {
                println!("skipped: /dev/kmsg is not readable here ({e})");
                return;
            }
        }
        // The watcher starts, waits in poll and stops within its poll timeout.
        let (shutdown, stop) = base::loops::shutdown_channel();
        let loops = Loops::new(stop);
        assert!(start(&loops, "node-1", path).expect("spawn"));
        shutdown.trigger();
        assert!(loops.join_all(Duration::from_secs(5)).is_empty());
    }

    #[test]
    fn the_reader_turns_records_from_a_pipe_into_system_ooms() {
        use std::io::Write;
        let (reader, writer) =
            rustix::pipe::pipe_with(rustix::pipe::PipeFlags::NONBLOCK).expect("pipe2");
        let (mut reader, mut writer) = (File::from(reader), File::from(writer));
        let (shutdown, stop) = base::loops::shutdown_channel();
        let loops = Loops::new(stop);
        let (tx, rx) = crossbeam_channel::bounded(4);
        loops
            .spawn("oom-test", move |stop, handle| {
                watch(&mut reader, &stop, &handle, |oom| {
                    let _ = tx.send(oom.system_oom_message());
                })
            })
            .expect("spawn");
        for line in MEMCG_OOM.iter().chain(SYSTEM_OOM) {
            writer
                .write_all(format!("{line}\n").as_bytes())
                .expect("write");
        }
        let first = rx.recv_timeout(Duration::from_secs(10)).expect("first OOM");
        assert_eq!(first, None, "a container's own OOM is no system OOM");
        let second = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("second OOM");
        assert_eq!(
            second.as_deref(),
            Some("System OOM encountered, victim process: stress, pid: 23544")
        );
        shutdown.trigger();
        assert!(loops.join_all(Duration::from_secs(5)).is_empty());
    }

    #[test]
    fn an_unreadable_kernel_log_starts_nothing() {
        let (_shutdown, stop) = base::loops::shutdown_channel();
        let loops = Loops::new(stop);
        let missing = Path::new("/nonexistent/kmsg");
        assert!(!start(&loops, "node-1", missing).expect("no spawn"));
        assert!(loops.registry().get(THREAD).is_none());
    }
}
