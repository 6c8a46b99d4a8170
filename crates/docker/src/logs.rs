//! A container's log as a stream: `GET /containers/{id}/logs` with the options of
//! [`LogOptions`] (`follow`, `since`, `timestamps`, `tail`, `stdout`/`stderr`), its
//! multiplexed frames demultiplexed as they arrive (a TTY container's log is raw).
//!
//! The answer's head must come within the call timeout (a loaded engine is given
//! several tries, as the events stream is); the body has no total timeout, because a
//! followed log lasts as long as the container and a slow client paces the reads. Each
//! read waits at most the caller's wake-up period (ureq's per-read timeout, which its
//! body reader survives), so the stream thread can look at its client and at
//! shutdown between reads. A log that is not followed and makes no progress for
//! [`IDLE_LIMIT`] is given up (`TimedOut`).
//!
//! Docker reads its own log files (json-file, local, journald …); upstream's kubelet
//! reads the CRI log file under `/var/log/pods`. Both print timestamps as RFC 3339 with
//! nine fraction digits, so `timestamps=true` lines read the same.

use std::io::{self, Read};
use std::time::{Duration, Instant, SystemTime};

use crate::client::{is_read_timeout, Client, Req};
use crate::stream::{FrameDecoder, StreamKind};
use base::netutil::query_escape;
use runtime::{LogOptions, LogStream, RuntimeError};

/// A log read that is not followed and gets nothing from the engine this long is given
/// up: the engine answers a finished log at disk speed.
const IDLE_LIMIT: Duration = Duration::from_secs(30);

/// What one socket read takes at most from the engine.
const READ_CHUNK: usize = 64 * 1024;

/// The query of a logs call (pure).
pub(super) fn logs_path(id: &str, opts: &LogOptions) -> String {
    let flag = |b: bool| if b { "1" } else { "0" };
    let mut path = format!(
        "/containers/{}/logs?stdout={}&stderr={}",
        query_escape(id),
        flag(opts.stdout),
        flag(opts.stderr)
    );
    if opts.follow {
        path.push_str("&follow=1");
    }
    if opts.timestamps {
        path.push_str("&timestamps=1");
    }
    match opts.tail {
        Some(n) => path.push_str(&format!("&tail={n}")),
        None => path.push_str("&tail=all"),
    }
    if let Some(since) = opts.since {
        // Docker's `since`: seconds since the epoch with nine fraction digits. A time
        // before the epoch filters nothing; 0 would mean "no filter" anyway.
        if let Ok(d) = since.duration_since(SystemTime::UNIX_EPOCH) {
            path.push_str(&format!("&since={}.{:09}", d.as_secs(), d.subsec_nanos()));
        }
    }
    path
}

/// Opens the log stream of container `id`; `tty` says whether its log is raw.
pub(super) fn open(
    client: &Client,
    id: &str,
    tty: bool,
    opts: &LogOptions,
    wake: Duration,
    open_timeout: Duration,
) -> Result<LogStream, RuntimeError> {
    let op = format!("read logs of container {id}");
    let req = Req::get(logs_path(id, opts)).timeout(None).per_read(wake);
    // The per-read timeout also bounds the wait for the head: a loaded engine may take
    // longer than one wake-up period, so try again (a GET of a log has no effect) until
    // the call timeout.
    let deadline = Instant::now() + open_timeout;
    let resp = loop {
        match client.send_ok(&op, &req) {
            Ok(resp) => break resp,
            Err(RuntimeError::Timeout { .. }) if Instant::now() < deadline => continue,
            Err(RuntimeError::Timeout { .. }) => {
                return Err(RuntimeError::Timeout {
                    op,
                    after: open_timeout,
                })
            }
            Err(e) => return Err(e),
        }
    };
    let body = resp.into_body().into_with_config().limit(u64::MAX).reader();
    Ok(Box::new(DockerLogStream {
        body: Box::new(body),
        tty,
        decoder: FrameDecoder::default(),
        pending: Vec::new(),
        pending_at: 0,
        raw: vec![0u8; READ_CHUNK],
        idle_limit: (!opts.follow).then_some(IDLE_LIMIT),
        last_progress: Instant::now(),
    }))
}

/// The body of a logs answer, demultiplexed.
struct DockerLogStream {
    body: Box<dyn Read + Send>,
    tty: bool,
    decoder: FrameDecoder,
    /// Payload decoded and not yet handed out.
    pending: Vec<u8>,
    pending_at: usize,
    raw: Vec<u8>,
    idle_limit: Option<Duration>,
    last_progress: Instant,
}

impl Read for DockerLogStream {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        loop {
            if self.pending_at < self.pending.len() {
                let n = out.len().min(self.pending.len() - self.pending_at);
                out[..n].copy_from_slice(&self.pending[self.pending_at..self.pending_at + n]);
                self.pending_at += n;
                return Ok(n);
            }
            self.pending.clear();
            self.pending_at = 0;
            // A TTY log has no frames: read straight into the caller's buffer.
            let dst: &mut [u8] = if self.tty { out } else { &mut self.raw };
            match self.body.read(dst) {
                Ok(0) => return Ok(0),
                Ok(n) => {
                    self.last_progress = Instant::now();
                    if self.tty {
                        return Ok(n);
                    }
                    let pending = &mut self.pending;
                    self.decoder.push(&self.raw[..n], &mut |kind, payload| {
                        if matches!(kind, StreamKind::Stdout | StreamKind::Stderr) {
                            pending.extend_from_slice(payload);
                        }
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_read_timeout(&e) => {
                    let idle = self.last_progress.elapsed();
                    return Err(match self.idle_limit {
                        Some(limit) if idle >= limit => io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!("the engine sent nothing for {}s", idle.as_secs()),
                        ),
                        _ => io::Error::from(io::ErrorKind::WouldBlock),
                    });
                }
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_path_carries_every_option() {
        let id = "abc";
        assert_eq!(
            logs_path(id, &LogOptions::default()),
            "/containers/abc/logs?stdout=1&stderr=1&tail=all"
        );
        let opts = LogOptions {
            follow: true,
            since: Some(SystemTime::UNIX_EPOCH + Duration::new(1_700_000_000, 5)),
            timestamps: true,
            tail: Some(0),
            stdout: false,
            stderr: true,
        };
        assert_eq!(
            logs_path(id, &opts),
            "/containers/abc/logs?stdout=0&stderr=1&follow=1&timestamps=1&tail=0\
             &since=1700000000.000000005"
        );
    }

    fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![kind, 0, 0, 0];
        f.extend_from_slice(&u32::try_from(payload.len()).expect("len").to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    /// A body that hands out `parts` one read at a time, a timeout between them.
    struct Parts(Vec<Option<Vec<u8>>>);

    impl Read for Parts {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            if self.0.is_empty() {
                return Ok(0);
            }
            match self.0.remove(0) {
                None => Err(io::Error::from(io::ErrorKind::TimedOut)),
                Some(p) => {
                    out[..p.len()].copy_from_slice(&p);
                    Ok(p.len())
                }
            }
        }
    }

    fn stream(parts: Vec<Option<Vec<u8>>>, tty: bool, idle: Option<Duration>) -> DockerLogStream {
        DockerLogStream {
            body: Box::new(Parts(parts)),
            tty,
            decoder: FrameDecoder::default(),
            pending: Vec::new(),
            pending_at: 0,
            raw: vec![0u8; READ_CHUNK],
            idle_limit: idle,
            last_progress: Instant::now(),
        }
    }

    #[test]
    fn frames_are_demultiplexed_and_a_quiet_engine_is_would_block() {
        let mut all = frame(1, b"out\n");
        all.extend(frame(2, b"err\n"));
        let (first, second) = all.split_at(6);
        let mut s = stream(
            vec![Some(first.to_vec()), None, Some(second.to_vec())],
            false,
            None,
        );
        let mut buf = [0u8; 3];
        let mut got = Vec::new();
        loop {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) => assert_eq!(e.kind(), io::ErrorKind::WouldBlock),
            }
        }
        assert_eq!(got, b"out\nerr\n");
    }

    #[test]
    fn a_log_that_is_not_followed_gives_up_when_the_engine_stalls() {
        let mut s = stream(vec![None], true, Some(Duration::ZERO));
        let e = s.read(&mut [0u8; 8]).expect_err("stalled");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        let mut raw = stream(vec![Some(b"raw tty".to_vec())], true, None);
        let mut buf = [0u8; 16];
        assert_eq!(raw.read(&mut buf).expect("read"), 7);
        assert_eq!(&buf[..7], b"raw tty");
    }
}
