//! The HTTP source: static pods from `--manifest-url` (`staticPodURL`), polled every
//! `httpCheckFrequency`, as upstream's `pkg/kubelet/config/http.go`
//! (`sourceURL.extractFromURL`).
//!
//! One thread, `src-http`, a periodic loop whose tick ([`HttpSource::tick`]) GETs the
//! URL with the configured headers (`--manifest-url-header`, `staticPodURLHeader`)
//! and a 10 s timeout. The body is one Pod, a PodList, or several of them as a
//! multi-document YAML stream or a stream of JSON objects; the pods are validated and
//! defaulted as static pods (name `-<node>` suffix, UID hashed with `url:<url>`) by
//! [`super::manifest`]. A body identical to the last good one sends nothing.
//!
//! A non-2xx answer, a timeout or a body that does not parse keeps the last good pods
//! (a flaky web server must not stop running static pods) and is the tick's error, so
//! the log and `/healthz?verbose` name the URL and the reason until it recovers. As
//! upstream, an empty body is an empty snapshot (every pod of the URL goes) and is
//! still reported. Until the first good answer the source is not ready, so
//! housekeeping waits for it.

use std::fmt;
use std::time::Duration;

use crossbeam_channel::Sender;
use k8s_openapi::api::core::v1::Pod;
use ureq::Agent;

use super::manifest::{self, ManifestError, Origin, MAX_MANIFEST_BYTES};
use super::{Source, SourceUpdate};
use base::httpclient::servers as client;
use base::loops::{Loops, Periodic, SpawnError};

/// Upstream's client timeout for the manifest URL.
pub(crate) const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a tick of the HTTP source is not clean. The last good pods are kept (except
/// for an empty body, as upstream).
#[derive(Debug, thiserror::Error)]
pub enum HttpSourceError {
    /// The URL could not be fetched (refused, timed out, TLS…).
    #[error("cannot fetch {url}")]
    Fetch {
        /// The URL.
        url: String,
        /// The cause.
        source: ureq::Error,
    },
    /// The server's certificate is not valid yet by this node's clock (see
    /// [`base::clock`]): a condition to wait out, named as such.
    #[error("cannot fetch {url}: {}", base::clock::not_yet_valid_words(*not_before))]
    ClockBehind {
        /// The URL.
        url: String,
        /// The certificate's `notBefore`, when the TLS layer said.
        not_before: Option<std::time::SystemTime>,
    },
    /// The server answered with a status other than 2xx.
    #[error("{url}: the server answered {code}")]
    Status {
        /// The URL.
        url: String,
        /// The status code.
        code: u16,
    },
    /// The body is larger than a manifest may be.
    #[error("{url}: the body is larger than {} MiB, not read", MAX_MANIFEST_BYTES >> 20)]
    TooLarge {
        /// The URL.
        url: String,
    },
    /// The body is empty: every pod of the URL was removed.
    #[error("zero-length data received from {url}")]
    Empty {
        /// The URL.
        url: String,
    },
    /// The body does not hold valid pods.
    #[error(transparent)]
    Manifest(ManifestError),
    /// The pod config merge no longer listens (shutdown).
    #[error("the pod config merge is gone")]
    Disconnected,
}

impl HttpSourceError {
    /// The error of a fetch that got no answer: [`HttpSourceError::ClockBehind`] when
    /// the server's certificate is not valid yet by this node's clock.
    fn fetch(url: &str, source: ureq::Error) -> HttpSourceError {
        match base::httpclient::servers::not_valid_yet(&source) {
            Some(not_before) => HttpSourceError::ClockBehind {
                url: url.to_string(),
                not_before,
            },
            None => HttpSourceError::Fetch {
                url: url.to_string(),
                source,
            },
        }
    }
}

/// The HTTP source's state between ticks.
pub struct HttpSource {
    url: String,
    headers: Vec<(String, String)>,
    node_name: String,
    updates: Sender<SourceUpdate>,
    agent: Agent,
    /// The body that gave the pods last sent; an identical body sends nothing.
    last_body: Option<Vec<u8>>,
}

impl fmt::Debug for HttpSource {
    // Header values may be credentials: show only their names.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpSource")
            .field("url", &self.url)
            .field(
                "headers",
                &self.headers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("node_name", &self.node_name)
            .finish()
    }
}

impl HttpSource {
    /// A source for `url`, sending `headers` (name, value; repeated names are sent
    /// repeatedly, in order), for node `node_name`.
    pub fn new(
        url: String,
        headers: Vec<(String, String)>,
        node_name: String,
        updates: Sender<SourceUpdate>,
    ) -> HttpSource {
        // An https URL is verified against the host's CAs.
        let tls = ureq::tls::TlsConfig::builder()
            .root_certs(client::default_roots([url.as_str()]))
            .build();
        HttpSource {
            url,
            headers,
            node_name,
            updates,
            agent: client::agent(tls, FETCH_TIMEOUT),
            last_body: None,
        }
    }

    /// Fetches the URL once; sends a snapshot if the body changed and holds pods.
    pub fn tick(&mut self) -> Result<(), HttpSourceError> {
        let body = self.fetch()?;
        if body.iter().all(u8::is_ascii_whitespace) {
            // Upstream: an empty body is an empty set, and an error.
            if self.last_body.as_deref() != Some(&body[..]) {
                self.send(Vec::new())?;
                self.last_body = Some(body);
            }
            return Err(HttpSourceError::Empty {
                url: self.url.clone(),
            });
        }
        if self.last_body.as_deref() == Some(&body[..]) {
            return Ok(());
        }
        let decoded = pods_from_body(&body, &self.url, &self.node_name);
        if body.len() >= base::malloc::TRIM_AFTER_BYTES {
            base::malloc::release_freed_memory();
        }
        self.send(decoded.map_err(HttpSourceError::Manifest)?)?;
        self.last_body = Some(body);
        Ok(())
    }

    fn send(&self, pods: Vec<Pod>) -> Result<(), HttpSourceError> {
        self.updates
            .send(SourceUpdate {
                source: Source::Http,
                pods: pods.into_iter().map(std::sync::Arc::new).collect(),
                checkpoint: false,
            })
            .map_err(|_| HttpSourceError::Disconnected)
    }

    fn fetch(&self) -> Result<Vec<u8>, HttpSourceError> {
        let fetch_err = |source| HttpSourceError::fetch(&self.url, source);
        let mut req = self.agent.get(&self.url);
        for (name, value) in &self.headers {
            req = req.header(name.as_str(), value.as_str());
        }
        let resp = req.call().map_err(fetch_err)?;
        let code = resp.status().as_u16();
        if !(200..300).contains(&code) {
            return Err(HttpSourceError::Status {
                url: self.url.clone(),
                code,
            });
        }
        let body = resp
            .into_body()
            .into_with_config()
            .limit(MAX_MANIFEST_BYTES + 1)
            .read_to_vec()
            .map_err(|e| match e {
                ureq::Error::BodyExceedsLimit(_) => HttpSourceError::TooLarge {
                    url: self.url.clone(),
                },
                other => fetch_err(other),
            })?;
        Ok(body)
    }
}

/// Decodes a body ([`manifest::decode_body`]: a stream of JSON objects, or YAML of one
/// or more documents). Every pod is validated and defaulted as a static pod of `url`.
pub(crate) fn pods_from_body(
    body: &[u8],
    url: &str,
    node_name: &str,
) -> Result<Vec<Pod>, ManifestError> {
    let origin = Origin::Url(url);
    manifest::decode_body(body, origin)?
        .into_iter()
        .map(|d| manifest::prepare_decoded(d, node_name, origin))
        .collect()
}

/// Starts the `src-http` loop: a fetch at once, then every `period`.
pub fn start(
    loops: &Loops,
    url: String,
    headers: Vec<(String, String)>,
    node_name: String,
    period: Duration,
    updates: Sender<SourceUpdate>,
) -> Result<(), SpawnError> {
    log::info!("adding pod source url={url} period={period:?}");
    let mut source = HttpSource::new(url, headers, node_name, updates);
    // Decodes manifests (serde recursion): the big stack.
    let loops = loops.with_stack_size(base::loops::BIG_STACK);
    loops.spawn_periodic(
        Periodic {
            name: "src-http".into(),
            period,
            wake: None,
        },
        move || source.tick(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(pods: &[Pod]) -> Vec<String> {
        pods.iter()
            .map(|p| p.metadata.name.clone().unwrap_or_default())
            .collect()
    }

    #[test]
    fn a_server_certificate_not_yet_valid_names_the_clock() {
        let e = HttpSourceError::fetch(
            "https://s/pods",
            base::testutil::not_valid_yet_error(1_796_083_200),
        );
        assert_eq!(
            e.to_string(),
            "cannot fetch https://s/pods: the server's certificate is not valid until \
             2026-12-01T00:00:00Z by this node's clock: is the clock behind (no RTC, NTP not \
             yet synced)?"
        );
        // The same words at every try: the loop logs the condition once.
        assert!(std::error::Error::source(&e).is_none(), "no changing cause");
        let e = HttpSourceError::fetch("https://s/pods", ureq::Error::ConnectionFailed);
        assert!(matches!(e, HttpSourceError::Fetch { .. }), "{e:?}");
    }

    const POD_JSON: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"NAME"},"spec":{"containers":[{"name":"c","image":"i"}]}}"#;

    #[test]
    fn bodies_in_every_shape_decode() {
        let j = |n: &str| POD_JSON.replace("NAME", n);
        let rows: Vec<(String, Vec<&str>)> = vec![
            (j("a"), vec!["a-n"]),
            (format!("{}\n{}", j("a"), j("b")), vec!["a-n", "b-n"]),
            (format!("{}\n---\n{}", j("a"), j("b")), vec!["a-n", "b-n"]),
            (
                "kind: Pod\nmetadata: {name: y}\nspec: {containers: [{name: c, image: i}]}\n---\n\
                 kind: PodList\nitems:\n- metadata: {name: z}\n  spec: {containers: [{name: c, image: i}]}\n"
                    .into(),
                vec!["y-n", "z-n"],
            ),
        ];
        for (body, want) in rows {
            let pods = pods_from_body(body.as_bytes(), "http://h/p", "n").expect(&body);
            assert_eq!(names(&pods), want, "{body}");
        }
    }

    #[test]
    fn the_url_is_in_the_uid_and_in_errors() {
        // A valid name: "NAME" is only the placeholder, and uppercase is invalid.
        let pod = POD_JSON.replace("NAME", "p");
        let a = pods_from_body(pod.as_bytes(), "http://h/a", "n").expect("valid");
        let b = pods_from_body(pod.as_bytes(), "http://h/b", "n").expect("valid");
        assert_ne!(a[0].metadata.uid, b[0].metadata.uid);
        let again = pods_from_body(pod.as_bytes(), "http://h/a", "n").expect("valid");
        assert_eq!(a[0].metadata.uid, again[0].metadata.uid);
        let e = pods_from_body(
            format!("{pod}\n{{\"kind\":\"Pod\"}}").as_bytes(),
            "http://h/a",
            "n",
        )
        .expect_err("second has no name");
        assert_eq!(
            e.to_string(),
            "http://h/a: document 1: invalid pod: name is needed for the pod"
        );
        let e = pods_from_body(b"kind: Pod\nmetadata: [", "http://h/a", "n").expect_err("bad");
        assert!(
            e.to_string()
                .starts_with("http://h/a: document 0: invalid YAML"),
            "{e}"
        );
    }
}
