//! The process figures Prometheus's Go process collector exports (which upstream's
//! component-base registers raw, so their help has no stability marker), read from
//! `/proc/self` at scrape time: CPU seconds, resident and virtual memory, start time,
//! open and maximum file descriptors, and the address-space limit.
//!
//! Parsing is a pure function of the files' text, so it is table-tested; reading is a
//! few small `/proc` files and one directory listing per scrape.

use super::{Collector, Desc, GaugeVec};

/// What one read of `/proc/self` found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcessStats {
    /// utime + stime, in seconds.
    pub cpu_seconds: f64,
    /// Virtual memory size, bytes.
    pub virtual_bytes: f64,
    /// Resident set size, bytes.
    pub resident_bytes: f64,
    /// Start time, seconds since the Unix epoch.
    pub start_time_seconds: f64,
    /// Open file descriptors.
    pub open_fds: f64,
    /// The soft limit on file descriptors.
    pub max_fds: f64,
    /// The soft limit on the address space (`RLIMIT_AS`; unlimited is 2^64 - 1, as
    /// the Go collector reports it).
    pub max_virtual_bytes: f64,
}

/// The fields of `/proc/<pid>/stat` this needs, in clock ticks and pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StatFields {
    /// utime + stime, clock ticks.
    pub cpu_ticks: u64,
    /// starttime, clock ticks since boot.
    pub start_ticks: u64,
    /// vsize, bytes.
    pub vsize: u64,
    /// rss, pages.
    pub rss_pages: u64,
}

/// Parses `/proc/<pid>/stat`. The command name (field 2) may hold spaces and
/// parentheses, so fields are counted from after its last `)`: utime and stime are
/// fields 14 and 15, starttime 22, vsize 23, rss 24.
pub(crate) fn parse_stat(text: &str) -> Option<StatFields> {
    let (_, rest) = text.rsplit_once(')')?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // f[0] is field 3.
    let get = |field: usize| f.get(field - 3)?.parse::<u64>().ok();
    Some(StatFields {
        cpu_ticks: get(14)?.saturating_add(get(15)?),
        start_ticks: get(22)?,
        vsize: get(23)?,
        rss_pages: get(24)?,
    })
}

/// The boot time (`btime`, seconds since the epoch) from `/proc/stat`.
pub(crate) fn parse_btime(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// The soft limit of `resource`; an unlimited one (`RLIM_INFINITY`) is `u64::MAX`.
pub fn rlimit_soft(resource: rustix::process::Resource) -> u64 {
    // getrlimit(2) (prlimit64 underneath, as glibc's) cannot fail for a valid resource.
    rustix::process::getrlimit(resource)
        .current
        .unwrap_or(u64::MAX)
}

/// Reads this process's figures. Anything unreadable stays 0 (a scrape never fails
/// because /proc is odd, e.g. inside some sandboxes).
pub fn read_self() -> ProcessStats {
    // With rustix's `use-libc-auxv` these are libc's sysconf(_SC_CLK_TCK) and
    // sysconf(_SC_PAGESIZE), as before: no syscall.
    let ticks = rustix::param::clock_ticks_per_second().max(1) as f64;
    let page = rustix::param::page_size() as f64;
    let mut s = ProcessStats::default();
    if let Some(f) = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .as_deref()
        .and_then(parse_stat)
    {
        s.cpu_seconds = f.cpu_ticks as f64 / ticks;
        s.virtual_bytes = f.vsize as f64;
        s.resident_bytes = f.rss_pages as f64 * page;
        if let Some(btime) = std::fs::read_to_string("/proc/stat")
            .ok()
            .as_deref()
            .and_then(parse_btime)
        {
            s.start_time_seconds = btime as f64 + f.start_ticks as f64 / ticks;
        }
    }
    s.open_fds = std::fs::read_dir("/proc/self/fd").map_or(0.0, |d| d.count() as f64);
    s.max_fds = rlimit_soft(rustix::process::Resource::Nofile) as f64;
    s.max_virtual_bytes = rlimit_soft(rustix::process::Resource::As) as f64;
    s
}

/// The process families for one scrape, filled from one [`ProcessStats`].
#[derive(Debug)]
pub struct ProcessFamilies {
    cpu: CpuSeconds,
    gauges: Vec<GaugeVec<0>>,
}

impl ProcessFamilies {
    /// The families holding `s`.
    pub fn new(s: &ProcessStats) -> Self {
        let gauge = |name, help, v: f64| {
            let g = GaugeVec::new(Desc::raw(name, help), []);
            g.set([], v);
            g
        };
        ProcessFamilies {
            cpu: CpuSeconds(s.cpu_seconds),
            gauges: vec![
                gauge(
                    "process_max_fds",
                    "Maximum number of open file descriptors.",
                    s.max_fds,
                ),
                gauge(
                    "process_open_fds",
                    "Number of open file descriptors.",
                    s.open_fds,
                ),
                gauge(
                    "process_resident_memory_bytes",
                    "Resident memory size in bytes.",
                    s.resident_bytes,
                ),
                gauge(
                    "process_start_time_seconds",
                    "Start time of the process since unix epoch in seconds.",
                    s.start_time_seconds,
                ),
                gauge(
                    "process_virtual_memory_bytes",
                    "Virtual memory size in bytes.",
                    s.virtual_bytes,
                ),
                gauge(
                    "process_virtual_memory_max_bytes",
                    "Maximum amount of virtual memory available in bytes.",
                    s.max_virtual_bytes,
                ),
            ],
        }
    }

    /// Every family, for the registry to sort and render.
    pub fn collectors(&self) -> Vec<&dyn Collector> {
        let mut v: Vec<&dyn Collector> = vec![&self.cpu];
        for g in &self.gauges {
            v.push(g);
        }
        v
    }
}

/// CPU seconds: a counter of a float ([`super::CounterVec`] counts integers).
#[derive(Debug)]
struct CpuSeconds(f64);

impl Collector for CpuSeconds {
    fn name(&self) -> &'static str {
        "process_cpu_seconds_total"
    }

    fn render(&self, out: &mut String) {
        use std::fmt::Write as _;
        let _ = writeln!(
            out,
            "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n\
             # TYPE process_cpu_seconds_total counter\n\
             process_cpu_seconds_total {}",
            super::fmt_f64(self.0)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command() {
        // A command with a space and a parenthesis, as `comm` may be.
        let line = "1234 (rk (let) x) S 1 1234 1234 0 -1 4194560 1000 0 0 0 \
                    150 50 0 0 20 0 12 0 98765 123456789 2048 18446744073709551615 \
                    1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(
            parse_stat(line),
            Some(StatFields {
                cpu_ticks: 200,
                start_ticks: 98765,
                vsize: 123456789,
                rss_pages: 2048,
            })
        );
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S 1 2"), None, "too few fields");
    }

    #[test]
    fn btime_is_read_from_proc_stat() {
        let text = "cpu  1 2 3\nintr 5\nbtime 1700000000\nprocesses 10\n";
        assert_eq!(parse_btime(text), Some(1_700_000_000));
        assert_eq!(parse_btime("cpu 1\n"), None);
    }

    #[test]
    fn this_process_reads_plausibly() {
        let s = read_self();
        assert!(s.resident_bytes > 1_000_000.0, "{s:?}");
        assert!(s.virtual_bytes >= s.resident_bytes, "{s:?}");
        assert!(s.open_fds >= 3.0 && s.max_fds >= s.open_fds, "{s:?}");
        let now = crate::time::unix_secs(std::time::SystemTime::now()) as f64;
        // This test binary started within the last day, and not in the future.
        assert!(s.start_time_seconds <= now + 1.0, "{s:?}");
        assert!(now - s.start_time_seconds < 24.0 * 3600.0, "{s:?}");
    }
}
