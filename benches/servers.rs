//! `make bench`: the plain ports under connection floods. A real rkubelet (release
//! build, no pods) is flooded on its read-only port while `/healthz` is timed on both
//! ports; the table gives connections held (descriptors), threads, RSS before, during
//! and after, and the healthz latency under the flood. Target: `/healthz` under 1 s
//! (p99) whatever the flood, a fixed thread count, and the process alive.
#![allow(clippy::disallowed_methods)] // clippy.toml's sort ban is for shipped code

#[path = "common/mod.rs"]
#[allow(dead_code)] // this bench needs only the process helpers
mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{proc_status, spawn_kubelet, verdict};

const PAUSE: &str = "rkubelet/pause:3.10";

fn main() {
    raise_own_nofile();
    println!("rkubelet plain ports under connection floods (read-only port flooded)\n");
    println!(
        "| flood | nofile | made | fds held | threads before/during | RSS before / during / after (MiB) | healthz p50 / p99 / max | alive |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    idle_flood("10,000 idle connections", 20_000, 10_000);
    idle_flood("2,000 idle connections", 1024, 2_000);
    // Fewer descriptors than the two ports' caps (as if something else took them):
    // accept meets EMFILE.
    idle_flood(
        "1,000 idle connections, limit cut to 160 (EMFILE)",
        160,
        1_000,
    );
    slowloris("500 slowloris (1 byte/s, 15 s)", 1024, 500);
}

struct Kubelet {
    child: std::process::Child,
    dir: std::path::PathBuf,
    hz: u16,
    ro: u16,
}

impl Kubelet {
    fn start(tag: &str, nofile: u64) -> Kubelet {
        let dir =
            std::env::temp_dir().join(format!("rkubelet-bench-srv-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("manifests")).expect("dir");
        let (child, hz, ro) = spawn_kubelet(&dir, &format!("bench-srv-{tag}"), PAUSE);
        let k = Kubelet { child, dir, hz, ro };
        let until = Instant::now() + Duration::from_secs(60);
        while get(k.hz).is_none() {
            assert!(Instant::now() < until, "rkubelet did not answer");
            std::thread::sleep(Duration::from_millis(50));
        }
        // Set once it runs (its caps were fitted to the limit it started with), as
        // `prlimit` would: a low limit then stands for descriptors taken elsewhere.
        let lim = libc::rlimit {
            rlim_cur: nofile,
            rlim_max: nofile,
        };
        let pid = libc::pid_t::try_from(k.child.id()).expect("pid");
        // SAFETY: prlimit on our own child with a valid rlimit struct.
        let rc = unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, &lim, std::ptr::null_mut()) };
        assert_eq!(rc, 0, "prlimit");
        k
    }

    fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id()))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// 20 timed `/healthz` GETs on each port.
    fn healthz_latencies(&self) -> Vec<Duration> {
        let mut v = Vec::new();
        for _ in 0..20 {
            for port in [self.ro, self.hz] {
                let t = Instant::now();
                let ok = get(port).is_some_and(|c| c == 200);
                v.push(if ok {
                    t.elapsed()
                } else {
                    Duration::from_secs(999)
                });
            }
        }
        v
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn get(port: u16) -> Option<u16> {
    let mut s = TcpStream::connect_timeout(&addr(port), Duration::from_secs(5)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(b"GET /healthz HTTP/1.0\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.split_whitespace().nth(1)?.parse().ok()
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn connections(port: u16, n: usize) -> Vec<TcpStream> {
    (0..n)
        .filter_map(|_| TcpStream::connect_timeout(&addr(port), Duration::from_millis(500)).ok())
        .collect()
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// RSS (KiB), threads and open descriptors of the kubelet at one moment.
#[derive(Clone, Copy)]
struct Sample {
    rss: u64,
    threads: u64,
    fds: usize,
}

impl Sample {
    fn of(k: &Kubelet) -> Sample {
        let (rss, threads) = proc_status(k.child.id());
        Sample {
            rss,
            threads,
            fds: k.fds(),
        }
    }

    fn max(self, o: Sample) -> Sample {
        Sample {
            rss: self.rss.max(o.rss),
            threads: self.threads.max(o.threads),
            fds: self.fds.max(o.fds),
        }
    }
}

/// One row of the table.
struct Row<'a> {
    name: &'a str,
    nofile: u64,
    made: usize,
    before: Sample,
    during: Sample,
    after: Sample,
    /// Healthz latencies during the flood.
    lat: Vec<Duration>,
}

impl Row<'_> {
    fn print(&self, k: &mut Kubelet) {
        let mut lat = self.lat.clone();
        base::sort::sort(&mut lat);
        let p = |q: f64| lat[((lat.len() - 1) as f64 * q) as usize];
        println!(
            "| {} | {} | {} | {} | {} / {} | {:.1} / {:.1} / {:.1} | {:.1?} / {:.1?} / {:.1?} {} | {} |",
            self.name,
            self.nofile,
            self.made,
            self.during.fds.saturating_sub(self.before.fds),
            self.before.threads,
            self.during.threads,
            mib(self.before.rss),
            mib(self.during.rss),
            mib(self.after.rss),
            p(0.5),
            p(0.99),
            p(1.0),
            verdict(p(0.99) < Duration::from_secs(1)),
            if k.alive() { "yes" } else { "NO" }
        );
    }
}

/// One flood of `n` connections to the read-only port of a kubelet with `nofile`
/// descriptors: `drive` does what the flood does while it lasts and returns the healthz
/// latencies and the largest sample seen; then the connections go and the row prints.
fn flood(
    name: &str,
    tag: &str,
    nofile: u64,
    n: usize,
    drive: impl FnOnce(&Kubelet, &mut [TcpStream], Sample) -> (Vec<Duration>, Sample),
) {
    let mut k = Kubelet::start(tag, nofile);
    std::thread::sleep(Duration::from_secs(2));
    let before = Sample::of(&k);
    let mut conns = connections(k.ro, n);
    let made = conns.len();
    let (lat, during) = drive(&k, &mut conns, before);
    drop(conns);
    std::thread::sleep(Duration::from_secs(5));
    let after = Sample::of(&k);
    Row {
        name,
        nofile,
        made,
        before,
        during,
        after,
        lat,
    }
    .print(&mut k);
}

fn idle_flood(name: &str, nofile: u64, n: usize) {
    flood(name, &format!("idle{n}"), nofile, n, |k, _, _| {
        let lat = k.healthz_latencies();
        (lat, Sample::of(k))
    });
}

fn slowloris(name: &str, nofile: u64, n: usize) {
    flood(name, &format!("slow{n}"), nofile, n, |k, conns, before| {
        let head = b"GET /pods HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaa";
        let mut lat = Vec::new();
        let mut during = before;
        let started = Instant::now();
        let mut second = 0;
        while started.elapsed() < Duration::from_secs(15) {
            for s in conns.iter_mut() {
                let _ = s.write_all(&head[second % head.len()..][..1]);
            }
            second += 1;
            let t = Instant::now();
            lat.extend(k.healthz_latencies().into_iter().take(4));
            during = during.max(Sample::of(k));
            std::thread::sleep(Duration::from_secs(1).saturating_sub(t.elapsed()));
        }
        (lat, during)
    });
}

fn raise_own_nofile() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid rlimit struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}
