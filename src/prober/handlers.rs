//! Running one probe: exec through the runtime, HTTP GET, TCP connect, gRPC health check
//! (upstream `pkg/kubelet/prober/prober.go` `runProbe`, `pkg/probe/{exec,http,tcp}`;
//! gRPC in [`super::grpc`]). Each call blocks a pool thread for at most the probe's
//! timeout.

use std::io::Read;
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use super::spec::Handler;
use super::{Outcome, USER_AGENT};
use base::httpclient::pods::{host_of, resolve_location};
use base::loops::{Loops, Shutdown};
use base::netutil::join_host_port;
use runtime::container::ProbeResult;
use runtime::{Runtime, RuntimeError};

/// Upstream reads at most 10 KiB of a probe's HTTP body (`maxRespBodyLength`).
pub(crate) const MAX_BODY: u64 = 10 * 1024;
/// Exec output kept for the message: the same cap as the HTTP body.
pub const MAX_OUTPUT: usize = 10 * 1024;
/// Upstream (Go's client default) stops after 10 same-host redirects.
use base::httpclient::pods::MAX_REDIRECTS;

/// Runs probes. One per `probe-worker-N` thread.
#[derive(Debug)]
pub struct Prober {
    runtime: Arc<dyn Runtime>,
    agent: ureq::Agent,
    /// Spawns a gRPC probe's connection reader (`grpc-probe`, one per probe: a probe
    /// dials its own connection, as upstream's does).
    loops: Loops,
}

/// The loops of a [`Prober`] made without the daemon's (the tests'): never shut down,
/// and each gRPC probe's reader ends with its connection anyway.
fn own_loops() -> Loops {
    static OWN: OnceLock<(Shutdown, Loops)> = OnceLock::new();
    OWN.get_or_init(|| {
        let (shutdown, stop) = base::loops::shutdown_channel();
        (shutdown, Loops::new(stop))
    })
    .1
    .clone()
}

impl Prober {
    /// A prober that execs through `runtime`.
    pub fn new(runtime: Arc<dyn Runtime>) -> Self {
        // Redirects are followed by hand below: only to the same host.
        let agent = base::httpclient::pods::pod_agent(USER_AGENT);
        Prober {
            runtime,
            agent,
            loops: own_loops(),
        }
    }

    /// The same prober, spawning its gRPC probes' readers through `loops` (the
    /// daemon's: counted in its registry, ended at shutdown).
    pub(crate) fn with_loops(self, loops: &Loops) -> Self {
        Prober {
            loops: loops.clone(),
            ..self
        }
    }

    /// Runs one probe against container `container_id` of a pod with IP `pod_ip`.
    pub fn run(
        &self,
        h: &Handler,
        container_id: &str,
        pod_ip: Option<&str>,
        timeout: Duration,
    ) -> Outcome {
        let host = |given: &Option<String>| given.as_deref().or(pod_ip).map(str::to_string);
        match h {
            Handler::Exec { command } => self.exec(container_id, command, timeout),
            Handler::Http {
                https,
                host: h,
                port,
                path,
                headers,
            } => match host(h) {
                Some(host) => {
                    let scheme = if *https { "https" } else { "http" };
                    let url = format!("{scheme}://{}{path}", join_host_port(&host, *port));
                    self.http(&url, headers, timeout)
                }
                None => Outcome::new(ProbeResult::Unknown, "the pod has no IP yet"),
            },
            Handler::Tcp { host: h, port } => match host(h) {
                Some(host) => tcp(&host, *port, timeout),
                None => Outcome::new(ProbeResult::Unknown, "the pod has no IP yet"),
            },
            // Upstream: a gRPC probe always targets the pod IP.
            Handler::Grpc { port, service } => match pod_ip {
                Some(ip) => super::grpc::check(ip, *port, service, timeout, &self.loops),
                None => Outcome::new(ProbeResult::Unknown, "the pod has no IP yet"),
            },
        }
    }

    fn exec(&self, id: &str, command: &[String], timeout: Duration) -> Outcome {
        match self.runtime.exec(id, command, timeout) {
            Ok(r) => {
                let mut out = r.stdout;
                out.extend_from_slice(&r.stderr);
                out.truncate(MAX_OUTPUT);
                let text = String::from_utf8_lossy(&out).trim_end().to_string();
                if r.exit_code == 0 {
                    Outcome::new(ProbeResult::Success, text)
                } else if text.is_empty() {
                    Outcome::new(
                        ProbeResult::Failure,
                        format!("command {command:?} exited with {}", r.exit_code),
                    )
                } else {
                    Outcome::new(ProbeResult::Failure, text)
                }
            }
            // Upstream (ExecProbeTimeout): a timed-out command is a failure.
            Err(RuntimeError::Timeout { after, .. }) => Outcome::new(
                ProbeResult::Failure,
                format!("command {command:?} timed out after {after:?}"),
            ),
            Err(e) => Outcome::new(ProbeResult::Unknown, base::loops::error_chain(&e)),
        }
    }

    fn http(&self, url: &str, headers: &[(String, String)], timeout: Duration) -> Outcome {
        let deadline = base::time::saturating_deadline(Instant::now(), timeout);
        let first = url.to_string();
        let mut url = first.clone();
        for hop in 0..=MAX_REDIRECTS {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Outcome::new(
                    ProbeResult::Failure,
                    format!("Get {url:?}: context deadline exceeded"),
                );
            }
            let mut req = self.agent.get(&url);
            for (k, v) in headers {
                if k.eq_ignore_ascii_case("accept") && v.is_empty() {
                    // Upstream: an explicit empty Accept removes the default.
                    continue;
                }
                req = req.header(k.as_str(), v.as_str());
            }
            let empty_accept = headers
                .iter()
                .any(|(k, v)| k.eq_ignore_ascii_case("accept") && v.is_empty());
            let mut cfg = req.config().timeout_global(Some(left));
            if empty_accept {
                cfg = cfg.accept(ureq::config::AutoHeaderValue::None);
            }
            let resp = match cfg.build().call() {
                Ok(r) => r,
                Err(e) => return Outcome::new(ProbeResult::Failure, format!("Get {url:?}: {e}")),
            };
            let code = resp.status().as_u16();
            let location = resp
                .headers()
                .get("location")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let mut body = Vec::new();
            // A body that breaks off is still a response: the status decides.
            let _ = resp
                .into_body()
                .into_with_config()
                .limit(u64::MAX)
                .reader()
                .take(MAX_BODY)
                .read_to_end(&mut body);
            let body = String::from_utf8_lossy(&body).to_string();
            if matches!(code, 301 | 302 | 303 | 307 | 308) {
                if let Some(loc) = location {
                    match redirect(&first, &url, &loc) {
                        Redirect::Follow(next) if hop < MAX_REDIRECTS => {
                            url = next;
                            continue;
                        }
                        Redirect::Follow(_) => {
                            return Outcome::new(
                                ProbeResult::Failure,
                                format!("Get {url:?}: stopped after {MAX_REDIRECTS} redirects"),
                            )
                        }
                        Redirect::OtherHost => {}
                    }
                }
            }
            return http_verdict(code, body);
        }
        Outcome::new(ProbeResult::Failure, "stopped after redirects")
    }
}

/// Upstream `DoHTTPProbe`'s verdict: 200–399 succeed (a 3xx that was not followed is a
/// success with a warning), anything else fails.
pub(crate) fn http_verdict(code: u16, body: String) -> Outcome {
    match code {
        200..=299 => Outcome::new(ProbeResult::Success, body),
        300..=399 => Outcome {
            result: ProbeResult::Success,
            message: format!("Probe terminated redirects, Response body: {body}"),
            warning: true,
        },
        _ => Outcome::new(
            ProbeResult::Failure,
            format!("HTTP probe failed with statuscode: {code}"),
        ),
    }
}

/// What to do with a redirect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Redirect {
    /// Follow it to this URL (same host as the first request).
    Follow(String),
    /// It leads to another host (or cannot be read): stop, keep the 3xx.
    OtherHost,
}

/// Upstream's redirect rule for probes (`pkg/probe/http` `RedirectChecker(false)`): a
/// redirect is followed only when its target has the same host name as the probe's
/// first request. `location` may be absolute, scheme-relative or relative to `current`.
pub(crate) fn redirect(first: &str, current: &str, location: &str) -> Redirect {
    let Some(first_host) = host_of(first) else {
        return Redirect::OtherHost;
    };
    match resolve_location(current, location) {
        Some(next) if host_of(&next).as_deref() == Some(first_host.as_str()) => {
            Redirect::Follow(next)
        }
        _ => Redirect::OtherHost,
    }
}

/// Upstream `tcp.DoTCPProbe`: a connection within the timeout is success.
fn tcp(host: &str, port: u16, timeout: Duration) -> Outcome {
    let target = join_host_port(host, port);
    let addrs = match (host, port).to_socket_addrs() {
        Ok(a) => a.collect::<Vec<_>>(),
        Err(e) => return Outcome::new(ProbeResult::Failure, format!("dial tcp {target}: {e}")),
    };
    let Some(addr) = addrs.first() else {
        return Outcome::new(
            ProbeResult::Failure,
            format!("dial tcp {target}: no address"),
        );
    };
    match TcpStream::connect_timeout(addr, timeout) {
        Ok(_) => Outcome::new(ProbeResult::Success, ""),
        Err(e) => Outcome::new(ProbeResult::Failure, format!("dial tcp {target}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::TcpListener;

    #[test]
    fn redirects_are_followed_only_to_the_same_host() {
        let first = "http://10.0.0.5:8080/healthz";
        for (current, loc, want) in [
            (
                first,
                "/ok",
                Redirect::Follow("http://10.0.0.5:8080/ok".into()),
            ),
            (
                first,
                "http://10.0.0.5:9090/other",
                Redirect::Follow("http://10.0.0.5:9090/other".into()),
            ),
            (
                "http://10.0.0.5:8080/a/b",
                "c?x=1",
                Redirect::Follow("http://10.0.0.5:8080/a/c?x=1".into()),
            ),
            (
                first,
                "https://10.0.0.5/secure",
                Redirect::Follow("https://10.0.0.5/secure".into()),
            ),
            (first, "http://example.com/", Redirect::OtherHost),
            (first, "//10.0.0.6/x", Redirect::OtherHost),
            (
                "http://10.0.0.5:8080/x",
                "/y",
                Redirect::Follow("http://10.0.0.5:8080/y".into()),
            ),
        ] {
            assert_eq!(redirect(first, current, loc), want, "{current} -> {loc}");
        }
    }

    #[test]
    fn http_verdicts_follow_upstream() {
        assert_eq!(http_verdict(200, "ok".into()).result, ProbeResult::Success);
        assert_eq!(
            http_verdict(399, String::new()).result,
            ProbeResult::Success
        );
        let w = http_verdict(302, "moved".into());
        assert!(w.warning && w.result == ProbeResult::Success);
        assert_eq!(
            w.message,
            "Probe terminated redirects, Response body: moved"
        );
        let f = http_verdict(500, "boom".into());
        assert_eq!(f.result, ProbeResult::Failure);
        assert_eq!(f.message, "HTTP probe failed with statuscode: 500");
        assert_eq!(
            http_verdict(404, String::new()).result,
            ProbeResult::Failure
        );
    }

    /// A tiny one-shot HTTP server on loopback for the client side of the probe: a
    /// real socket and real HTTP, answering each connection with the next canned reply.
    fn serve(replies: Vec<String>) -> (u16, std::thread::JoinHandle<Vec<String>>) {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        let h = std::thread::Builder::new()
            .name("test-http".into())
            .spawn(move || {
                let mut seen = Vec::new();
                for reply in replies {
                    let (mut s, _) = l.accept().expect("accept");
                    let mut buf = [0u8; 4096];
                    let n = s.read(&mut buf).expect("read");
                    seen.push(String::from_utf8_lossy(&buf[..n]).to_string());
                    s.write_all(reply.as_bytes()).expect("write");
                }
                seen
            })
            .expect("spawn");
        (port, h)
    }

    fn reply(code: u16, extra: &str, body: &str) -> String {
        format!(
            "HTTP/1.1 {code} X\r\nContent-Length: {}\r\nConnection: close\r\n{extra}\r\n{body}",
            body.len()
        )
    }

    fn prober() -> Prober {
        // HTTP and TCP probes never touch the runtime; a Docker client that points
        // nowhere stands in.
        let rt = docker::Docker::connect("unix:///nonexistent/docker.sock").expect("endpoint");
        Prober::new(Arc::new(rt))
    }

    #[test]
    fn http_probe_sends_upstream_headers_and_follows_a_same_host_redirect() {
        let (port, h) = serve(vec![
            reply(302, "Location: /ready\r\n", ""),
            reply(200, "", "fine"),
        ]);
        let out = prober().http(
            &format!("http://127.0.0.1:{port}/start"),
            &[("X-Probe".into(), "1".into())],
            Duration::from_secs(5),
        );
        assert_eq!(out.result, ProbeResult::Success, "{out:?}");
        assert_eq!(out.message, "fine");
        let seen = h.join().expect("server");
        assert!(seen[0].starts_with("GET /start HTTP/1.1"), "{}", seen[0]);
        assert!(seen[1].starts_with("GET /ready HTTP/1.1"), "{}", seen[1]);
        let lower = seen[0].to_ascii_lowercase();
        assert!(lower.contains("user-agent: kube-probe/1.33"), "{lower}");
        assert!(lower.contains("accept: */*"), "{lower}");
        assert!(lower.contains("x-probe: 1"), "{lower}");
        assert!(!lower.contains("accept-encoding"), "{lower}");
    }

    #[test]
    fn http_probe_stops_at_a_redirect_to_another_host_and_fails_on_500() {
        let (port, h) = serve(vec![
            reply(301, "Location: http://example.invalid/\r\n", "gone"),
            reply(500, "", "boom"),
        ]);
        let p = prober();
        let url = format!("http://127.0.0.1:{port}/");
        let out = p.http(&url, &[], Duration::from_secs(5));
        assert_eq!(out.result, ProbeResult::Success);
        assert!(out.warning);
        let out = p.http(
            &url,
            &[("Accept".into(), String::new())],
            Duration::from_secs(5),
        );
        assert_eq!(out.result, ProbeResult::Failure);
        assert_eq!(out.message, "HTTP probe failed with statuscode: 500");
        let seen = h.join().expect("server");
        assert!(
            !seen[1].to_ascii_lowercase().contains("accept:"),
            "an empty Accept removes the default: {}",
            seen[1]
        );
    }

    #[test]
    fn http_probe_gives_up_after_ten_redirects_and_on_refused_connections() {
        let replies = (0..=MAX_REDIRECTS)
            .map(|_| reply(302, "Location: /again\r\n", ""))
            .collect();
        let (port, h) = serve(replies);
        let out = prober().http(
            &format!("http://127.0.0.1:{port}/"),
            &[],
            Duration::from_secs(10),
        );
        assert_eq!(out.result, ProbeResult::Failure);
        assert!(
            out.message.ends_with("stopped after 10 redirects"),
            "{}",
            out.message
        );
        h.join().expect("server");

        let closed = closed_port();
        let out = prober().http(
            &format!("http://127.0.0.1:{closed}/"),
            &[],
            Duration::from_secs(2),
        );
        assert_eq!(out.result, ProbeResult::Failure, "{out:?}");
    }

    fn closed_port() -> u16 {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    }

    #[test]
    fn tcp_probe_connects_or_fails() {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        assert_eq!(
            tcp("127.0.0.1", port, Duration::from_secs(1)).result,
            ProbeResult::Success
        );
        drop(l);
        let out = tcp("127.0.0.1", port, Duration::from_secs(1));
        assert_eq!(out.result, ProbeResult::Failure);
        assert!(
            out.message.starts_with("dial tcp 127.0.0.1:"),
            "{}",
            out.message
        );
    }

    #[test]
    fn grpc_probe_to_a_closed_port_fails_with_upstreams_message() {
        let out = prober().run(
            &Handler::Grpc {
                port: closed_port(),
                service: String::new(),
            },
            "id",
            Some("127.0.0.1"),
            Duration::from_secs(1),
        );
        assert_eq!(out.result, ProbeResult::Failure);
        assert!(
            out.message
                .starts_with("timeout: failed to connect service \"127.0.0.1:"),
            "{}",
            out.message
        );
    }
}
