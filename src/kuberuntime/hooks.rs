//! Container lifecycle hooks (upstream `pkg/kubelet/lifecycle/handlers.go`,
//! `handlerRunner.Run`): postStart and preStop handlers of the three kinds: `exec` (a
//! command in the container, failing on a non-zero exit), `httpGet` (a GET to the pod,
//! failing only when no answer comes: upstream ignores the status code) and `sleep`.
//!
//! Every handler runs within a timeout: preStop within what is left of the grace period,
//! postStart within [`POST_START_TIMEOUT`]. The messages are upstream's, because users
//! search logs for them.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Pod};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use base::httpclient::pods::{pod_agent, resolve_location, MAX_REDIRECTS};
use runtime::container::format_pod;
use runtime::Runtime;

/// Upstream runs postStart without a timeout, so a hung hook holds the pod's sync for
/// ever. Two minutes leaves slow hooks room while bounding how long its pod stays
/// parked and its `post-start-N` thread busy.
pub(crate) const POST_START_TIMEOUT: Duration = Duration::from_secs(120);

/// Upstream's lifecycle hooks send this User-Agent (`kube-lifecycle/<version>`).
const USER_AGENT: &str = "kube-lifecycle/rkubelet";

/// Where an `httpGet` handler without a host goes.
#[derive(Clone, Debug)]
pub(crate) struct HookTarget<'a> {
    /// The container's runtime ID (for `exec`).
    pub container_id: &'a str,
    /// The pod's IP ("" when the pod has none yet).
    pub pod_ip: &'a str,
}

/// Runs one handler; Err(message) as upstream words it when the handler failed.
pub(crate) fn run(
    runtime: &dyn Runtime,
    pod: &Pod,
    c: &Container,
    handler: &LifecycleHandler,
    target: &HookTarget<'_>,
    timeout: Duration,
) -> Result<(), String> {
    if let Some(exec) = &handler.exec {
        let cmd = exec.command.clone().unwrap_or_default();
        let failed = |error: String, output: &[u8]| {
            format!(
                "Exec lifecycle hook ([{}]) for Container {:?} in Pod {:?} failed - error: {error}, message: {:?}",
                cmd.join(" "),
                c.name,
                format_pod(pod),
                String::from_utf8_lossy(output)
            )
        };
        return match runtime.exec(target.container_id, &cmd, timeout) {
            Ok(r) if r.exit_code == 0 => Ok(()),
            Ok(r) => {
                let mut out = r.stdout;
                out.extend_from_slice(&r.stderr);
                Err(failed(
                    format!("command '{}' exited with {}", cmd.join(" "), r.exit_code),
                    &out,
                ))
            }
            Err(e) => Err(failed(base::loops::error_chain(&e), b"")),
        };
    }
    if let Some(get) = &handler.http_get {
        let path = get.path.clone().unwrap_or_default();
        return http_get(c, get, target, timeout).map_err(|error| {
            format!(
                "HTTP lifecycle hook ({path}) for Container {:?} in Pod {:?} failed - error: {error}",
                c.name,
                format_pod(pod)
            )
        });
    }
    if let Some(sleep) = &handler.sleep {
        let want = base::time::secs(sleep.seconds);
        sleep_until(base::time::saturating_deadline(
            Instant::now(),
            want.min(timeout),
        ));
        return Ok(());
    }
    Err(format!(
        "Cannot run handler: invalid handler: {}",
        serde_json::to_string(handler).unwrap_or_default()
    ))
}

/// Sleeps until `t` (the `sleep` action: nothing to wait on but time itself).
fn sleep_until(t: Instant) {
    let left = t.saturating_duration_since(Instant::now());
    if !left.is_zero() {
        std::thread::sleep(left);
    }
}

/// The port of an `httpGet` handler: an empty name means 80 (upstream
/// `runHTTPHandler`), anything else resolves as a probe's port does.
pub(crate) fn resolve_port(port: &IntOrString, c: &Container) -> Result<u16, String> {
    match port {
        IntOrString::String(s) if s.is_empty() => Ok(80),
        port => runtime::container::resolve_port(port, c),
    }
}

/// The URL of an `httpGet` handler (upstream `NewRequestForHTTPGetAction`).
pub(crate) fn http_url(
    c: &Container,
    get: &k8s_openapi::api::core::v1::HTTPGetAction,
    pod_ip: &str,
) -> Result<String, String> {
    let host = get
        .host
        .clone()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| pod_ip.to_string());
    if host.is_empty() {
        return Err("failed to find networking container: the pod has no IP".into());
    }
    let scheme = get.scheme.as_deref().unwrap_or("HTTP").to_ascii_lowercase();
    let port = resolve_port(&get.port, c)?;
    let path = get.path.clone().unwrap_or_default();
    let path = path.strip_prefix('/').unwrap_or(&path);
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host
    };
    Ok(format!("{scheme}://{host}:{port}/{path}"))
}

/// The hook's GET, following redirects to any host as Go's default client does (up to
/// [`MAX_REDIRECTS`]), all within `timeout`. Any answer is success.
fn http_get(
    c: &Container,
    get: &k8s_openapi::api::core::v1::HTTPGetAction,
    target: &HookTarget<'_>,
    timeout: Duration,
) -> Result<(), String> {
    let mut url = http_url(c, get, target.pod_ip)?;
    let deadline = base::time::saturating_deadline(Instant::now(), timeout);
    let agent = pod_agent(USER_AGENT);
    for hop in 0..=MAX_REDIRECTS {
        let mut req = agent.get(&url);
        for h in get.http_headers.iter().flatten() {
            // Credentials are not carried across a redirect (what ureq's own redirect
            // handling did for this hook before).
            if hop > 0 && h.name.eq_ignore_ascii_case("authorization") {
                continue;
            }
            req = req.header(h.name.as_str(), h.value.as_str());
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let mut resp = req
            .config()
            .timeout_global(Some(left))
            .build()
            .call()
            .map_err(|e| e.to_string())?;
        // Read (a bounded amount of) the body so the server sees a complete exchange.
        let _ = resp.body_mut().with_config().limit(10 * 1024).read_to_vec();
        let next = matches!(resp.status().as_u16(), 301 | 302 | 303 | 307 | 308)
            .then(|| resp.headers().get("location")?.to_str().ok())
            .flatten()
            .and_then(|loc| resolve_location(&url, loc));
        match next {
            Some(_) if hop == MAX_REDIRECTS => {
                return Err(format!(
                    "Get {url:?}: stopped after {MAX_REDIRECTS} redirects"
                ))
            }
            Some(next) => url = next,
            None => return Ok(()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerPort, HTTPGetAction};

    fn container() -> Container {
        Container {
            name: "web".into(),
            ports: Some(vec![ContainerPort {
                name: Some("http".into()),
                container_port: 8080,
                ..Default::default()
            }]),
            ..Default::default()
        }
    }

    #[test]
    fn ports_resolve_by_number_or_name() {
        let c = container();
        assert_eq!(resolve_port(&IntOrString::Int(81), &c), Ok(81));
        assert_eq!(resolve_port(&IntOrString::String("82".into()), &c), Ok(82));
        assert_eq!(
            resolve_port(&IntOrString::String("http".into()), &c),
            Ok(8080)
        );
        assert_eq!(
            resolve_port(&IntOrString::String(String::new()), &c),
            Ok(80)
        );
        assert!(resolve_port(&IntOrString::String("nope".into()), &c).is_err());
        assert!(resolve_port(&IntOrString::Int(70000), &c).is_err());
    }

    #[test]
    fn urls_default_to_the_pod_ip() {
        let c = container();
        let get = HTTPGetAction {
            path: Some("/hook".into()),
            port: IntOrString::String("http".into()),
            ..Default::default()
        };
        assert_eq!(
            http_url(&c, &get, "172.17.0.4").as_deref(),
            Ok("http://172.17.0.4:8080/hook")
        );
        let get = HTTPGetAction {
            host: Some("::1".into()),
            scheme: Some("HTTPS".into()),
            port: IntOrString::Int(443),
            ..Default::default()
        };
        assert_eq!(http_url(&c, &get, "").as_deref(), Ok("https://[::1]:443/"));
        let get = HTTPGetAction::default();
        assert!(http_url(&c, &get, "").is_err());
    }

    /// Serves one connection on `l` with `reply`; sends back the request head.
    fn serve_once(l: std::net::TcpListener, reply: String) -> crossbeam_channel::Receiver<String> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        std::thread::Builder::new()
            .name("test-serve".into())
            .spawn(move || {
                use std::io::{Read, Write};
                let Ok((mut s, _)) = l.accept() else { return };
                let mut head = Vec::new();
                let mut b = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut b) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&b[..n]),
                    }
                }
                let _ = s.write_all(reply.as_bytes());
                let _ = tx.send(String::from_utf8_lossy(&head).to_string());
            })
            .expect("spawn");
        rx
    }

    #[test]
    fn http_hook_follows_a_redirect_to_another_host_without_its_credentials() {
        let bind = || std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let (first, second) = (bind(), bind());
        let second_port = second.local_addr().expect("addr").port();
        // "localhost" is another host name than "127.0.0.1" for the redirect rule.
        let moved = format!(
            "HTTP/1.1 302 Found\r\nLocation: http://localhost:{second_port}/next\r\n\
             Content-Length: 0\r\nConnection: close\r\n\r\n"
        );
        let first_port = first.local_addr().expect("addr").port();
        let first_rx = serve_once(first, moved);
        let second_rx = serve_once(
            second,
            "HTTP/1.1 500 Oops\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".into(),
        );
        let get = HTTPGetAction {
            host: Some("127.0.0.1".into()),
            path: Some("/hook".into()),
            port: IntOrString::Int(i32::from(first_port)),
            http_headers: Some(vec![k8s_openapi::api::core::v1::HTTPHeader {
                name: "Authorization".into(),
                value: "Bearer t".into(),
            }]),
            ..Default::default()
        };
        let target = HookTarget {
            container_id: "",
            pod_ip: "",
        };
        // Any answer, a 500 included, is success for a hook (upstream).
        assert_eq!(
            http_get(&container(), &get, &target, Duration::from_secs(10)),
            Ok(())
        );
        let wait = Duration::from_secs(10);
        let head = first_rx.recv_timeout(wait).expect("the first request");
        assert!(head.starts_with("GET /hook "), "{head}");
        assert!(head.contains("kube-lifecycle/"), "{head}");
        let head = second_rx
            .recv_timeout(wait)
            .expect("the redirected request");
        assert!(head.starts_with("GET /next "), "{head}");
        assert!(
            !head.to_ascii_lowercase().contains("authorization"),
            "{head}"
        );
    }
}
