//! The kubelet's HTTP ports end to end, for the fuzz targets `http_readonly`,
//! `http_kubelet` and `upgrade`: a client's bytes go through the transport's own head
//! parsing and answer encoding ([`http::fuzz_connection`]), the handler each port is
//! served with (the read-only and healthz routers, the kubelet port's auth filter and
//! router, each behind the request metrics as in `kubelet::run`), and, for an answer
//! that takes the connection over (logs, `/run`, `/debug/flags/v`, exec, attach,
//! port-forward), the stream's own code over a loopback TCP connection whose client
//! side has already sent everything and half-closed.
//!
//! The state is in memory: one static pod from a real manifest with its status, a
//! [`FakeRuntime`] (made anew for each input, so its call records do not pile up)
//! running the pod's container and sandbox, and a `/logs/` directory of a few files.
//! What lives across inputs (metrics, caches) is the servers' own, so what would pile
//! up in a kubelet piles up here too and libFuzzer's RSS bound sees it. No Docker, no
//! thread of ours (a port-forward's dials run on the loop helper's short `netns-dial`
//! threads, into a process that does not exist), no sleeping: a stream ends when it
//! reads the client's end, and its writes give up after [`STREAM_WRITE_TIMEOUT`].

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStatus, Pod, PodStatus,
};

use super::NODE;
use crate::health::HealthChecks;
use crate::metrics::KubeletMetrics;
use crate::pleg::PlegShared;
use crate::podconfig::manifest::{self, Format, Origin};
use crate::prober::metrics::ProbeMetrics;
use crate::server::auth::webhook::{CacheTtls, Webhooks};
use crate::server::auth::{AuthConfig, Authorizer};
use crate::server::healthz;
use crate::server::http_metrics::{instrument, ServerType};
use crate::server::kubelet::{self, KubeletServer};
use crate::server::readonly::{self, PodsView, ReadOnly};
use crate::server::streams::StreamServer;
use crate::stats::analyzer::Snapshot;
use crate::stats::StatsProvider;
use crate::status::StatusCache;
use apiclient::kubeconfig::RestConfig;
use apiclient::ApiClient;
use base::loops::{shutdown_channel, Loops, Shutdown, Stop};
use runtime::config::{ContainerConfig, PodSandboxConfig};
use runtime::container::labels;
use runtime::fake::{FakeClock, FakeRuntime};
use runtime::Runtime;
use wire::server::http::{self, Limits};
use wire::server::{Reply, Req};
use wire::x509::ClientCert;

/// How long a stream's write waits for the client (the port's is 4 h): the client side
/// here never reads, so a stream that writes more than the socket buffers hold gives
/// up after this instead of stalling the fuzzer.
pub(super) const STREAM_WRITE_TIMEOUT: Duration = Duration::from_millis(100);

/// The static pod every input may name: `default/web-fuzz-node`, containers `app`
/// and `side`, an env value (which `/pods` serves, as upstream's).
const MANIFEST: &str = "apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: default
spec:
  containers:
  - name: app
    image: busybox
    command: [sh, -c, 'sleep 3600']
    env:
    - {name: GREETING, value: hello}
  - name: side
    image: busybox
";

/// A PID no process can have (Linux's `pid_max` is at most 2^22): a port-forward's
/// dial into its network namespace fails at opening `/proc/<pid>/ns/net`, never
/// reaching a real process's ports.
const NO_SUCH_PID: u32 = u32::MAX;

/// The content of a file beside `/logs/`'s directory (`../rkubelet-fuzz-secret` from
/// it): no answer may ever carry it, whatever the path.
const CANARY: &[u8] = b"rkubelet-fuzz-canary-7f3a";

/// What lives for the whole fuzzing process.
struct Shared {
    pod: Pod,
    uid: String,
    metrics: Arc<KubeletMetrics>,
    probe_metrics: Arc<ProbeMetrics>,
    stats: Arc<StatsProvider>,
    checks: HealthChecks,
    loops: Loops,
    stop: Stop,
    /// Kept so that [`Shared::stop`] never closes.
    _shutdown: Shutdown,
    /// Where the client ends of taken-over connections connect.
    listener: TcpListener,
    addr: SocketAddr,
    log_dir: PathBuf,
    /// A client certificate with a CN (`admin`, group `system:masters`).
    admin_cert: Vec<u8>,
    /// A client certificate without a CN.
    nameless_cert: Vec<u8>,
    /// Token and access reviews to an API server nobody listens on.
    webhooks: Arc<Webhooks>,
}

static SHARED: OnceLock<Option<Shared>> = OnceLock::new();

fn shared() -> Option<&'static Shared> {
    SHARED.get_or_init(Shared::new).as_ref()
}

impl Shared {
    /// None when the machine cannot give a loopback socket or a temp directory: the
    /// targets then do nothing (and the corpus test says so).
    fn new() -> Option<Shared> {
        // The fuzzer's main is libFuzzer's, which leaves SIGPIPE fatal; a stream's
        // write to a client that left must be an error, as in the kubelet (Rust's
        // runtime ignores SIGPIPE there).
        // SAFETY: setting a signal's disposition to SIG_IGN has no handler to race.
        // rustix sets dispositions only in its hidden, unstable `runtime` module (not
        // for a process with a libc), so this stays libc's signal(3).
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
        let pods = manifest::pods_from_str(
            MANIFEST,
            Format::Yaml,
            Origin::File(std::path::Path::new("/etc/kubernetes/manifests/web.yaml")),
            NODE,
        )
        .ok()?;
        let pod = pods.into_iter().next()?;
        let uid = pod.metadata.uid.clone()?;
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop.clone());
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).ok()?;
        let addr = listener.local_addr().ok()?;
        let log_dir = log_dir()?;
        let stats = Arc::new(StatsProvider::default());
        stats.publish(Snapshot {
            time: Some(SystemTime::now()),
            machine_memory_bytes: Some(8 << 30),
            ..Snapshot::default()
        });
        let checks = HealthChecks {
            registry: loops.registry(),
            pleg: Arc::new(PlegShared::default()),
            runtime: Arc::default(),
            network: Arc::default(),
            sync_frequency: Duration::from_secs(1),
            node_warnings: Vec::new(),
        };
        // Nobody listens on this port once the probe listener is dropped: every review
        // is refused at once (and then not tried for 3 s), as with an API server down.
        let unreachable = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| l.local_addr())
            .ok()?;
        let client = ApiClient::new(RestConfig {
            server: format!("http://{unreachable}"),
            tls: Default::default(),
            auth: Default::default(),
        })
        .ok()?;
        let ttl = Duration::from_secs(60);
        let webhooks = Arc::new(Webhooks::new(
            Arc::new(client),
            CacheTtls {
                token: ttl,
                authorized: ttl,
                unauthorized: ttl,
            },
        ));
        Some(Shared {
            pod,
            uid,
            metrics: Arc::new(KubeletMetrics::new(loops.registry())),
            probe_metrics: Arc::default(),
            stats,
            checks,
            loops,
            stop,
            _shutdown: shutdown,
            listener,
            addr,
            log_dir,
            admin_cert: certificate(Some("admin"), Some("system:masters"))?,
            nameless_cert: certificate(None, Some("ops"))?,
            webhooks,
        })
    }

    /// A loopback connection: the server's end (for the takeover) and the client's,
    /// which has nothing more to send.
    fn connect(&self) -> Option<(TcpStream, TcpStream)> {
        let client = TcpStream::connect(self.addr).ok()?;
        let (server, _) = self.listener.accept().ok()?;
        client.shutdown(std::net::Shutdown::Write).ok()?;
        Some((server, client))
    }

    /// The pods view of one input: the static pod, its status naming the running
    /// container `container_id`.
    fn pods_view(&self, container_id: &str) -> Arc<PodsView> {
        let statuses = Arc::new(StatusCache::default());
        let view = Arc::new(PodsView::new(statuses.clone()));
        view.publish(vec![Arc::new(self.pod.clone())]);
        let running = |name: &str, id: &str| ContainerStatus {
            name: name.to_string(),
            container_id: (!id.is_empty()).then(|| format!("docker://{id}")),
            image: "busybox".into(),
            image_id: "docker-pullable://busybox@sha256:00".into(),
            ready: true,
            restart_count: 0,
            started: Some(true),
            state: Some(ContainerState {
                running: Some(ContainerStateRunning { started_at: None }),
                ..ContainerState::default()
            }),
            ..ContainerStatus::default()
        };
        statuses.set(
            &self.uid,
            PodStatus {
                phase: Some("Running".into()),
                // `side` has no ID yet: logs look it up in the runtime.
                container_statuses: Some(vec![running("app", container_id), running("side", "")]),
                ..PodStatus::default()
            },
        );
        view
    }

    /// The runtime of one input: the pod's sandbox (with [`NO_SUCH_PID`]) and its two
    /// containers, running; returns it and the `app` container's ID.
    fn runtime(&self) -> Option<(Arc<FakeRuntime>, String)> {
        let rt = Arc::new(FakeRuntime::new(FakeClock::default()).with_image("busybox"));
        let run = |name: &str, container: Option<&str>| -> Option<String> {
            let mut l = BTreeMap::new();
            l.insert(labels::MANAGED_BY_NODE.to_string(), NODE.to_string());
            l.insert(labels::POD_UID.to_string(), self.uid.clone());
            l.insert(labels::POD_NAME.to_string(), "web-fuzz-node".to_string());
            l.insert(labels::POD_NAMESPACE.to_string(), "default".to_string());
            let ty = match container {
                Some(c) => {
                    l.insert(labels::CONTAINER_NAME.to_string(), c.to_string());
                    labels::TYPE_CONTAINER
                }
                None => labels::TYPE_SANDBOX,
            };
            l.insert(labels::DOCKER_TYPE.to_string(), ty.to_string());
            let id = rt
                .create_container(
                    "",
                    &ContainerConfig {
                        labels: l,
                        ..ContainerConfig::named(name.to_string(), "busybox")
                    },
                    &PodSandboxConfig::default(),
                )
                .ok()?;
            rt.start_container(&id).ok()?;
            Some(id)
        };
        let sandbox = run("k8s_POD_web-fuzz-node_default_uid_0", None)?;
        rt.set_pid(&sandbox, NO_SUCH_PID);
        let app = run("k8s_app_web-fuzz-node_default_uid_0", Some("app"))?;
        run("k8s_side_web-fuzz-node_default_uid_0", Some("side"))?;
        Some((rt, app))
    }
}

/// `/logs/`'s directory: a few files and a subdirectory, made once (the same content
/// for every fuzzing process, so several may share it).
fn log_dir() -> Option<PathBuf> {
    let secret = std::env::temp_dir().join("rkubelet-fuzz-secret");
    if !secret.exists() {
        std::fs::write(&secret, CANARY).ok()?;
    }
    let dir = std::env::temp_dir().join("rkubelet-fuzz-logs");
    std::fs::create_dir_all(dir.join("pods/default_web")).ok()?;
    for (name, text) in [
        ("syslog", "Dec  1 06:00:00 node kubelet[1]: started\n"),
        ("kern.log", "Dec  1 06:00:00 node kernel: [0.0] Linux\n"),
        ("pods/default_web/app.log", "hello\n"),
    ] {
        let path = dir.join(name);
        if !path.exists() {
            std::fs::write(&path, text).ok()?;
        }
    }
    Some(dir)
}

/// A DER certificate with this CN and O (rcgen, self-signed: taken as verified
/// against the client CA; the filter only reads its names).
fn certificate(cn: Option<&str>, org: Option<&str>) -> Option<Vec<u8>> {
    let mut params = rcgen::CertificateParams::new(Vec::new()).ok()?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    if let Some(o) = org {
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, o);
    }
    if let Some(cn) = cn {
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
    }
    let key = rcgen::KeyPair::generate().ok()?;
    Some(params.self_signed(&key).ok()?.der().to_vec())
}

/// Runs `bytes` as one connection to a port served by `handler`.
/// Returns the answers' statuses (`0` for a takeover).
fn connection(
    s: &Shared,
    bytes: &[u8],
    cert: &ClientCert,
    limits: Limits,
    handler: &dyn Fn(&Req) -> Reply,
) -> Vec<u16> {
    let limits = Limits {
        stream_write_timeout: STREAM_WRITE_TIMEOUT,
        ..limits
    };
    // The client's end lives until the takeover returns, so the stream's writes have
    // somewhere to go.
    let mut client = None;
    let mut connect = || {
        let (server, c) = s.connect()?;
        client = Some(c);
        Some((server, s.stop.clone()))
    };
    let (statuses, mut answers) = http::fuzz_connection(bytes, cert, limits, handler, &mut connect);
    // What the streams wrote, as far as the client's buffer took it.
    if let Some(mut c) = client {
        if c.set_nonblocking(true).is_ok() {
            let mut buf = [0u8; 16 << 10];
            while let Ok(n @ 1..) = std::io::Read::read(&mut c, &mut buf) {
                answers.extend_from_slice(&buf[..n]);
            }
        }
    }
    assert!(
        !answers.windows(CANARY.len()).any(|w| w == CANARY),
        "a file outside /logs/ was served: {}",
        String::from_utf8_lossy(&answers)
    );
    statuses
}

/// The read-only port (first byte even) or the healthz port (odd): the rest is what
/// a client sends.
pub(super) fn http_readonly(data: &[u8]) {
    let (which, rest) = super::split(data);
    readonly_port(which, rest);
}

fn readonly_port(which: u8, rest: &[u8]) -> Vec<u16> {
    let Some(s) = shared() else {
        return Vec::new();
    };
    if which % 2 == 1 {
        let checks = s.checks.clone();
        return connection(s, rest, &ClientCert::Absent, Limits::PLAIN, &move |r| {
            healthz::handle(&checks, r)
        });
    }
    let ro = ReadOnly {
        checks: s.checks.clone(),
        pods: s.pods_view("0"),
        registry: s.loops.registry(),
        probe_metrics: s.probe_metrics.clone(),
        metrics: s.metrics.clone(),
        stats: s.stats.clone(),
    };
    let handler = instrument(s.metrics.clone(), ServerType::ReadOnly, move |r| {
        readonly::handle(&ro, r)
    });
    connection(s, rest, &ClientCert::Absent, Limits::PLAIN, &handler)
}

/// The kubelet port: the first byte picks how the client authenticated and how the
/// port authorizes (bit 0: anonymous allowed; bits 1–2: no certificate, `admin`'s,
/// one without a CN, one that did not verify; bit 3: bearer tokens reviewed; bit 4: the webhook
/// authorizer; bit 5: debugging handlers off), the rest is what the client sends
/// after the handshake.
pub(super) fn http_kubelet(data: &[u8]) {
    let (which, rest) = super::split(data);
    kubelet_port(which, rest);
}

/// Exec, attach and port-forward: like [`http_kubelet`] with the client allowed
/// (`admin`'s certificate, `AlwaysAllow`), so every input reaches the streaming
/// handlers and, past the upgrade, the session.
pub(super) fn upgrade(data: &[u8]) {
    kubelet_port(0b0000_0010, data);
}

fn kubelet_port(which: u8, rest: &[u8]) -> Vec<u16> {
    let (Some(s), Some((runtime, app))) = (shared(), shared().and_then(Shared::runtime)) else {
        return Vec::new();
    };
    let cert = match (which >> 1) & 3 {
        0 => ClientCert::Absent,
        1 => ClientCert::Verified(vec![s.admin_cert.clone()]),
        2 => ClientCert::Verified(vec![s.nameless_cert.clone()]),
        _ => ClientCert::Unverified {
            subject: "CN=mallory".into(),
            reason: "invalid peer certificate: UnknownIssuer".into(),
        },
    };
    let auth = AuthConfig {
        anonymous: which & 1 != 0,
        token_webhook: (which & 8 != 0).then(|| s.webhooks.clone()),
        authorizer: if which & 16 != 0 {
            Authorizer::Webhook(s.webhooks.clone())
        } else {
            Authorizer::AlwaysAllow
        },
        node_name: NODE.to_string(),
    };
    let pods = s.pods_view(&app);
    let runtime: Arc<dyn Runtime> = runtime;
    let k = KubeletServer {
        auth,
        checks: s.checks.clone(),
        pods: pods.clone(),
        configz: Arc::new(br#"{"kubeletconfig":{"enableServer":true}}"#.to_vec()),
        metrics: s.metrics.clone(),
        probe_metrics: s.probe_metrics.clone(),
        runtime_pods: s.checks.pleg.clone(),
        runtime: runtime.clone(),
        debugging_handlers: which & 32 == 0,
        log_dir: s.log_dir.clone(),
        streams: StreamServer {
            pods,
            runtime,
            loops: s.loops.clone(),
            node_name: NODE.to_string(),
        },
        stats: s.stats.clone(),
        // The server pod source writes a file per push: not fuzzed through the port
        // (its bodies decode as the URL source's do).
        push: None,
    };
    let handler = instrument(s.metrics.clone(), ServerType::ReadWrite, move |r| {
        kubelet::handle(&k, r)
    });
    connection(s, rest, &cert, Limits::KUBELET, &handler)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(path: &str) -> Vec<u8> {
        format!("GET {path} HTTP/1.1\r\nHost: n\r\n\r\n").into_bytes()
    }

    #[test]
    fn inputs_reach_every_ports_handlers_and_streams() {
        assert!(shared().is_some(), "the fixture is made");
        assert_eq!(readonly_port(0, &get("/pods")), [200]);
        assert_eq!(readonly_port(0, &get("/nope")), [404]);
        assert_eq!(readonly_port(1, &get("/healthz/ping")), [200]);
        // Pipelined, until one says close.
        let mut two = get("/metrics");
        two.extend_from_slice(b"GET /debug/loops HTTP/1.0\r\n\r\n");
        two.extend_from_slice(&get("/pods"));
        assert_eq!(readonly_port(0, &two), [200, 200]);
        assert_eq!(
            readonly_port(0, b"GET /pods HTTP/1.1\r\nContent-Length: x\r\n\r\n"),
            [400]
        );
        // The kubelet port: no credentials, then admin's certificate.
        assert_eq!(kubelet_port(0, &get("/pods")), [401]);
        assert_eq!(kubelet_port(2, &get("/pods")), [200]);
        // An unreachable token reviewer is a failed credential.
        let token = b"GET /pods HTTP/1.1\r\nAuthorization: Bearer t\r\n\r\n";
        assert_eq!(kubelet_port(9, token), [401]);
        // Streams run: logs, and a WebSocket exec that the client leaves at once.
        assert_eq!(
            kubelet_port(2, &get("/containerLogs/default/web-fuzz-node/app")),
            [0]
        );
        let exec = "GET /exec/default/web-fuzz-node/app?command=ls&stdout=1 HTTP/1.1\r\n\
                    Connection: Upgrade\r\nUpgrade: websocket\r\n\
                    Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
                    Sec-WebSocket-Protocol: v5.channel.k8s.io\r\n\r\n";
        assert_eq!(kubelet_port(2, exec.as_bytes()), [0]);
        // `..` never leaves `/logs/`'s directory (the canary beside it is not served).
        let above = get("/logs/%2e%2e/rkubelet-fuzz-secret");
        assert_eq!(kubelet_port(2, &above), [404]);
        assert_eq!(
            kubelet_port(2, &get("/logs/pods/default_web/app.log")),
            [200]
        );
        let missing = get("/exec/default/nope/app?command=ls&stdout=1");
        assert_eq!(kubelet_port(2, &missing), [404]);
    }
}
