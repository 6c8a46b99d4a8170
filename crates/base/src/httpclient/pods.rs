//! The one HTTP client set-up for requests the kubelet makes to pods: `httpGet` probes
//! and `httpGet` lifecycle hooks. Upstream's probe transport (`pkg/probe/http`
//! `New`): no proxy (a pod is never reached through one), no keep-alive (a probe every
//! few seconds would otherwise hold a connection per container open), no compression,
//! and TLS without certificate verification (pods serve self-signed certificates).
//!
//! ureq follows no redirect here: each caller follows them itself by its own rule (a
//! probe to the same host only, a hook to any host), with [`resolve_location`].

use ureq::http::Uri;

/// Go's HTTP client stops after 10 redirects, and so do probes and hooks.
pub const MAX_REDIRECTS: usize = 10;

/// The agent probes and hooks send their GETs with, announcing `user_agent`. Timeouts
/// are per request (each caller has its own deadline).
pub fn pod_agent(user_agent: &str) -> ureq::Agent {
    let tls = ureq::tls::TlsConfig::builder()
        .provider(ureq::tls::TlsProvider::Rustls)
        // Upstream: probes and hooks skip certificate verification.
        .disable_verification(true)
        .build();
    ureq::Agent::config_builder()
        // A status is an answer, not an error: each caller judges it.
        .http_status_as_error(false)
        .max_redirects(0)
        .proxy(None)
        .max_idle_connections(0)
        .max_idle_connections_per_host(0)
        .accept_encoding(ureq::config::AutoHeaderValue::None)
        .user_agent(user_agent)
        .accept("*/*")
        // ureq's default header limit (a pod's server may send big headers), but a
        // small output buffer: each probe's buffers are below malloc's mmap threshold.
        .input_buffer_size(64 * 1024)
        .output_buffer_size(super::CONNECTION_BUFFER)
        .tls_config(tls)
        .build()
        .new_agent()
}

/// Where a redirect's `Location` leads from `current`: it may be absolute,
/// scheme-relative (`//host/x`), absolute-path (`/x`) or relative to `current`'s
/// directory. None when `current` or the result is not a URL with a host.
pub fn resolve_location(current: &str, location: &str) -> Option<String> {
    let cur = current.parse::<Uri>().ok()?;
    let scheme = cur.scheme_str().unwrap_or("http");
    let authority = cur.authority().map(|a| a.as_str()).unwrap_or_default();
    let next = if location.contains("://") {
        location.to_string()
    } else if let Some(rest) = location.strip_prefix("//") {
        format!("{scheme}://{rest}")
    } else if location.starts_with('/') {
        format!("{scheme}://{authority}{location}")
    } else {
        let path = cur.path();
        let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
        let dir = if dir.is_empty() { "/" } else { dir };
        format!("{scheme}://{authority}{dir}{location}")
    };
    next.parse::<Uri>().ok()?.host()?;
    Some(next)
}

/// The host name of a URL, for same-host checks.
pub fn host_of(url: &str) -> Option<String> {
    url.parse::<Uri>().ok()?.host().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_resolve_against_the_current_url() {
        let cur = "http://10.0.0.5:8080/a/b";
        for (loc, want) in [
            ("/ok", Some("http://10.0.0.5:8080/ok")),
            ("c?x=1", Some("http://10.0.0.5:8080/a/c?x=1")),
            ("//10.0.0.6/x", Some("http://10.0.0.6/x")),
            ("https://example.com/", Some("https://example.com/")),
            ("http:///nohost", None),
        ] {
            assert_eq!(resolve_location(cur, loc).as_deref(), want, "{loc}");
        }
        assert_eq!(
            resolve_location("http://h/", "x").as_deref(),
            Some("http://h/x")
        );
        assert_eq!(resolve_location("not a url", "/x"), None);
    }
}
