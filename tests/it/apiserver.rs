//! A TEST STAND-IN for a Kubernetes API server. No real kube-apiserver can be installed
//! on these machines, so the tests of rkubelet's API source run against this small
//! server, which implements exactly the documented API conventions rkubelet relies on
//! and nothing more:
//!
//! - `GET /api/v1/pods` with `fieldSelector=spec.nodeName=<node>` (also `==`, several
//!   terms comma-separated), answering a `PodList` with `metadata.resourceVersion`;
//! - the same with `watch=true`: a chunked stream of `{"type":…,"object":…}` lines,
//!   ADDED / MODIFIED / DELETED for every change after the `resourceVersion` asked
//!   for (`0` or empty: the current pods as ADDED first), BOOKMARK events when
//!   `allowWatchBookmarks=true`, and an ERROR event with a 410 `Expired` Status when
//!   the version is older than the oldest the server keeps (after [`TestApiServer::compact`]);
//!   or, if configured, a plain HTTP 410 answer instead;
//! - server-side watch timeouts: the stream ends cleanly after `timeoutSeconds`, or
//!   the server's own cap ([`Options::max_watch`]), whichever is shorter;
//! - authentication over TLS: a bearer token from the accepted set, or a client
//!   certificate signed by the test CA; anything else gets 401 with a Status body;
//! - `POST /apis/authentication.k8s.io/v1/tokenreviews` and
//!   `POST /apis/authorization.k8s.io/v1/subjectaccessreviews`, answered from a
//!   scripted table (tokens → users; (user, subresource) pairs allowed, all else no
//!   opinion), counted, and switchable to answer 500 or to hang ([`ReviewFault`]), for
//!   the kubelet port's webhooks.
//! - what kubectl needs to reach a pod: discovery (`/version`, `/api`, `/apis`,
//!   `/api/v1`), `GET /api/v1/namespaces/{ns}/pods/{name}`, and the pod subresources
//!   `log`, `exec`, `attach` and `portforward` proxied to the kubelet of the pod's node
//!   as kube-apiserver proxies them ([`proxy`]; the kubelet's address is set with
//!   [`TestApiServer::set_kubelet`]).
//!
//! Each connection serves one request (`Connection: close`). Certificates are made at
//! test time with the `openssl` CLI ([`Pki`]). It lives only under `tests/` and is used
//! by the integration tests and the sources and kubelet_port benchmarks.
//!
//! Over 800 lines: one server's state (store, history, tables, faults, request log)
//! and the handlers that share it; split, every file would need all of it.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

#[path = "apiserver_proxy.rs"]
pub mod proxy;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{json, Value};

/// Test certificates made with the openssl CLI, once per test process.
#[derive(Debug, Clone)]
pub struct Pki {
    /// The directory holding them.
    pub dir: PathBuf,
    /// The CA certificate.
    pub ca: PathBuf,
    /// The server's certificate (SAN IP 127.0.0.1, DNS localhost) and key. Also good
    /// for client auth: etcd's gateway dials its own gRPC port with it.
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    /// A client certificate (CN system:node:test) and key, signed by the CA.
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    /// A client certificate from another CA, which the server must refuse.
    pub rogue_cert: PathBuf,
    pub rogue_key: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("the openssl CLI is needed for the test certificates (apt-get install openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Pki {
    /// A rustls client configuration with the test client certificate, trusting the
    /// test CA (the identity kube-apiserver uses towards kubelets).
    pub fn client_config(&self) -> Arc<rustls::ClientConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(&self.ca).expect("ca") {
            roots.add(c.expect("ca cert")).expect("add");
        }
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&self.client_cert)
            .expect("cert")
            .map(|c| c.expect("cert"))
            .collect();
        let key = PrivateKeyDer::from_pem_file(&self.client_key).expect("key");
        Arc::new(
            rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .expect("versions")
                .with_root_certificates(roots)
                .with_client_auth_cert(certs, key)
                .expect("config"),
        )
    }

    /// The test certificates, made once under cargo's test scratch directory and
    /// reused by later runs (so nothing is left behind in /tmp).
    pub fn get() -> Pki {
        static PKI: OnceLock<Pki> = OnceLock::new();
        PKI.get_or_init(|| {
            // Bump the version when the certificates' shape changes.
            let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("test-pki-v1");
            if !dir.join("done").exists() {
                // Made aside and renamed into place, so parallel test processes never
                // see half a set.
                let tmp = dir.with_extension(format!("tmp-{}", std::process::id()));
                let _ = std::fs::remove_dir_all(&tmp);
                std::fs::create_dir_all(&tmp).expect("pki dir");
                Self::make(&tmp);
                std::fs::write(tmp.join("done"), "").expect("marker");
                if std::fs::rename(&tmp, &dir).is_err() {
                    // Another process won the race: use its set.
                    let _ = std::fs::remove_dir_all(&tmp);
                }
            }
            Pki {
                ca: dir.join("ca.crt"),
                server_cert: dir.join("server.crt"),
                server_key: dir.join("server.key"),
                client_cert: dir.join("client.crt"),
                client_key: dir.join("client.key"),
                rogue_cert: dir.join("rogue.crt"),
                rogue_key: dir.join("rogue.key"),
                dir,
            }
        })
        .clone()
    }

    /// Makes the CA, server, client and rogue certificates in `dir`.
    fn make(dir: &Path) {
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        for ca in ["ca", "rogue-ca"] {
            let (key, crt, subj) = (
                format!("{ca}.key"),
                format!("{ca}.crt"),
                format!("/CN={ca}"),
            );
            let mut a = vec!["req", "-x509"];
            a.extend_from_slice(&ec);
            a.extend_from_slice(&[
                "-keyout",
                &key,
                "-out",
                &crt,
                "-days",
                "3650",
                "-subj",
                &subj,
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ]);
            openssl(dir, &a);
        }
        let leaf = |name: &str, cn: &str, ca: &str, ext: &str| {
            let mut a: Vec<String> = vec!["req".into()];
            a.extend(ec.iter().map(|s| s.to_string()));
            a.extend(
                [
                    "-keyout",
                    &format!("{name}.key"),
                    "-out",
                    &format!("{name}.csr"),
                    "-subj",
                    &format!("/CN={cn}"),
                ]
                .iter()
                .map(|s| s.to_string()),
            );
            openssl(dir, &a.iter().map(String::as_str).collect::<Vec<_>>());
            std::fs::write(dir.join(format!("{name}.ext")), ext).expect("ext file");
            openssl(
                dir,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &format!("{name}.csr"),
                    "-CA",
                    &format!("{ca}.crt"),
                    "-CAkey",
                    &format!("{ca}.key"),
                    "-CAcreateserial",
                    "-out",
                    &format!("{name}.crt"),
                    "-days",
                    "3650",
                    "-extfile",
                    &format!("{name}.ext"),
                ],
            );
        };
        leaf(
            "server",
            "127.0.0.1",
            "ca",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
             keyUsage=digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\n",
        );
        let client_ext = "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n\
                          extendedKeyUsage=clientAuth\n";
        leaf("client", "system:node:test", "ca", client_ext);
        leaf("rogue", "system:node:rogue", "rogue-ca", client_ext);
    }
}

/// How the review endpoints misbehave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReviewFault {
    /// They answer from the table.
    #[default]
    None,
    /// They answer 500 with a Status.
    Error,
    /// They never answer (until the fault is cleared or the server stops; 60 s at most).
    Hang,
}

/// How the stand-in behaves.
#[derive(Debug, Clone)]
pub struct Options {
    /// Bearer tokens accepted.
    pub tokens: Vec<String>,
    /// The longest a watch may last, whatever `timeoutSeconds` asks.
    pub max_watch: Duration,
    /// How often a watch with bookmarks gets one.
    pub bookmark_every: Duration,
    /// Answer an expired watch with HTTP 410 instead of an ERROR event.
    pub gone_as_status: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            tokens: vec!["good-token".into()],
            max_watch: Duration::from_secs(600),
            bookmark_every: Duration::from_secs(1),
            gone_as_status: false,
        }
    }
}

#[derive(Default)]
struct State {
    /// The store's resourceVersion (incremented by every change).
    rv: u64,
    /// Pods by namespace/name.
    pods: BTreeMap<(String, String), Value>,
    /// Every change: (rv, type, object).
    history: Vec<(u64, &'static str, Value)>,
    /// Versions below this are gone (410).
    oldest: u64,
    /// Bumped to make every open watch break off without a clean end.
    drop_generation: u64,
    /// Request log: "GET <path> ua=<user agent> auth=<token|cert|none>".
    requests: Vec<String>,
    /// Accepted tokens (may change while running).
    tokens: BTreeSet<String>,
    /// TokenReview answers: token → (user, groups); other tokens are refused.
    token_users: BTreeMap<String, (String, Vec<String>)>,
    /// SubjectAccessReview answers: the (user, subresource) pairs allowed.
    allowed: BTreeSet<(String, String)>,
    /// How the review endpoints misbehave.
    review_fault: ReviewFault,
    /// Every token reviewed, in order.
    token_reviews: Vec<String>,
    /// Every SubjectAccessReview's spec, in order.
    access_reviews: Vec<Value>,
    /// The kubelet port of each node, for the pod subresources.
    kubelets: proxy::Kubelets,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    stopped: AtomicBool,
    opts: Options,
}

/// A running stand-in API server on 127.0.0.1 over TLS.
pub struct TestApiServer {
    /// Its address.
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<std::thread::JoinHandle<()>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl TestApiServer {
    /// Starts on a free port.
    pub fn start(opts: Options) -> TestApiServer {
        Self::start_on(0, opts)
    }

    /// Starts on `port` (0: any), with an empty store.
    pub fn start_on(port: u16, opts: Options) -> TestApiServer {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                rv: 100,
                oldest: 1,
                tokens: opts.tokens.iter().cloned().collect(),
                ..State::default()
            }),
            changed: Condvar::new(),
            stopped: AtomicBool::new(false),
            opts,
        });
        let (addr, accept) = Self::serve(port, shared.clone());
        TestApiServer {
            addr,
            shared,
            accept: Some(accept),
        }
    }

    fn serve(port: u16, shared: Arc<Shared>) -> (SocketAddr, std::thread::JoinHandle<()>) {
        let pki = Pki::get();
        let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind test API server");
        let addr = listener.local_addr().expect("addr");
        let tls = Arc::new(server_config(&pki));
        let sh = shared.clone();
        let accept = std::thread::Builder::new()
            .name("test-apiserver".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if sh.stopped.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(conn) = conn else { continue };
                    let sh = sh.clone();
                    let tls = tls.clone();
                    let _ = std::thread::Builder::new()
                        .name("test-apiserver".into())
                        .spawn(move || handle_conn(conn, tls, sh));
                }
            })
            .expect("spawn");
        (addr, accept)
    }

    /// The base URL.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.addr.port())
    }

    /// Stops serving (open watches break off); the store is kept for [`Self::restart`].
    pub fn stop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        self.drop_watches();
        let _ = TcpStream::connect(self.addr);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }

    /// Serves again on the same port with the same store.
    pub fn restart(&mut self) {
        self.shared.stopped.store(false, Ordering::SeqCst);
        let (_, accept) = Self::serve(self.addr.port(), self.shared.clone());
        self.accept = Some(accept);
    }

    fn change(&self, kind: &'static str, mut pod: Value) -> u64 {
        let mut st = lock(&self.shared.state);
        st.rv += 1;
        let rv = st.rv;
        pod["metadata"]["resourceVersion"] = json!(rv.to_string());
        let key = (
            pod["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_string(),
            pod["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
        if kind == "DELETED" {
            st.pods.remove(&key);
        } else {
            st.pods.insert(key, pod.clone());
        }
        st.history.push((rv, kind, pod));
        drop(st);
        self.shared.changed.notify_all();
        rv
    }

    /// Creates a pod (a v1 Pod as JSON); fills in namespace, uid and
    /// creationTimestamp if absent. Returns the pod as stored.
    pub fn create_pod(&self, mut pod: Value) -> Value {
        let meta = &mut pod["metadata"];
        if meta["namespace"].is_null() {
            meta["namespace"] = json!("default");
        }
        if meta["uid"].is_null() {
            meta["uid"] = json!(format!(
                "uid-{}-{}",
                meta["name"].as_str().unwrap_or_default(),
                lock(&self.shared.state).rv + 1
            ));
        }
        if meta["creationTimestamp"].is_null() {
            meta["creationTimestamp"] = json!("2024-01-01T00:00:00Z");
        }
        pod["apiVersion"] = json!("v1");
        pod["kind"] = json!("Pod");
        self.change("ADDED", pod.clone());
        self.get_pod(
            "default",
            pod["metadata"]["name"].as_str().unwrap_or_default(),
        )
        .unwrap_or(pod)
    }

    /// The stored pod.
    pub fn get_pod(&self, ns: &str, name: &str) -> Option<Value> {
        lock(&self.shared.state)
            .pods
            .get(&(ns.to_string(), name.to_string()))
            .cloned()
    }

    /// Replaces a pod (MODIFIED).
    pub fn update_pod(&self, pod: Value) {
        self.change("MODIFIED", pod);
    }

    /// A graceful delete: sets deletionTimestamp and the grace (MODIFIED), as the API
    /// server does before the kubelet confirms the pod is gone.
    pub fn mark_deleted(&self, ns: &str, name: &str, grace: i64) {
        let mut pod = self.get_pod(ns, name).expect("pod to delete");
        pod["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
        pod["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
        self.change("MODIFIED", pod);
    }

    /// Removes a pod at once (DELETED).
    pub fn delete_pod(&self, ns: &str, name: &str) {
        let pod = self.get_pod(ns, name).expect("pod to delete");
        self.change("DELETED", pod);
    }

    /// Forgets the history: every version before now is gone (410).
    pub fn compact(&self) {
        let mut st = lock(&self.shared.state);
        st.oldest = st.rv + 1;
        st.history.clear();
    }

    /// Breaks every open watch off mid-stream (no clean end).
    pub fn drop_watches(&self) {
        lock(&self.shared.state).drop_generation += 1;
        self.shared.changed.notify_all();
    }

    /// Replaces the accepted tokens.
    pub fn set_tokens(&self, tokens: &[&str]) {
        lock(&self.shared.state).tokens = tokens.iter().map(|t| t.to_string()).collect();
    }

    /// The TokenReview table: `token` is `user` in `groups`.
    pub fn set_token_user(&self, token: &str, user: &str, groups: &[&str]) {
        lock(&self.shared.state).token_users.insert(
            token.to_string(),
            (
                user.to_string(),
                groups.iter().map(|g| g.to_string()).collect(),
            ),
        );
    }

    /// The SubjectAccessReview table: `user` may do anything to `nodes/<subresource>`.
    pub fn allow(&self, user: &str, subresource: &str) {
        lock(&self.shared.state)
            .allowed
            .insert((user.to_string(), subresource.to_string()));
    }

    /// Makes the review endpoints misbehave (or behave again).
    pub fn set_review_fault(&self, fault: ReviewFault) {
        lock(&self.shared.state).review_fault = fault;
        self.shared.changed.notify_all();
    }

    /// Every token reviewed so far, in order.
    pub fn token_reviews(&self) -> Vec<String> {
        lock(&self.shared.state).token_reviews.clone()
    }

    /// Every SubjectAccessReview spec received so far, in order.
    pub fn access_reviews(&self) -> Vec<Value> {
        lock(&self.shared.state).access_reviews.clone()
    }

    /// How many SubjectAccessReviews asked about `user` and `subresource`.
    pub fn access_reviews_of(&self, user: &str, subresource: &str) -> usize {
        lock(&self.shared.state)
            .access_reviews
            .iter()
            .filter(|s| s["user"] == user && s["resourceAttributes"]["subresource"] == subresource)
            .count()
    }

    /// Where the kubelet of `node` listens (its `--port`, on 127.0.0.1): pod
    /// subresources of pods bound to `node` are proxied there.
    pub fn set_kubelet(&self, node: &str, port: u16) {
        lock(&self.shared.state)
            .kubelets
            .insert(node.to_string(), SocketAddr::from(([127, 0, 0, 1], port)));
    }

    /// The request log.
    pub fn requests(&self) -> Vec<String> {
        lock(&self.shared.state).requests.clone()
    }

    /// The store's resourceVersion.
    pub fn resource_version(&self) -> u64 {
        lock(&self.shared.state).rv
    }

    /// Writes a kubeconfig for this server into `dir`; `user` is the YAML of the
    /// user stanza (e.g. `token: good-token`). Returns its path.
    pub fn kubeconfig(&self, dir: &Path, name: &str, user: &str) -> PathBuf {
        Self::kubeconfig_for(&self.url(), dir, name, user)
    }

    /// A kubeconfig for a server at `url` (that may not be running yet).
    pub fn kubeconfig_for(url: &str, dir: &Path, name: &str, user: &str) -> PathBuf {
        let pki = Pki::get();
        let user: String = user.lines().map(|l| format!("    {l}\n")).collect();
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {url}\n    certificate-authority: {}\n\
             users:\n- name: u\n  user:\n{user}contexts:\n- name: ctx\n  context: {{cluster: test, user: u}}\ncurrent-context: ctx\n",
            pki.ca.display()
        );
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write kubeconfig");
        path
    }
}

impl Drop for TestApiServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn server_config(pki: &Pki) -> rustls::ServerConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(&pki.ca).expect("ca") {
        roots.add(c.expect("ca cert")).expect("add ca");
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .allow_unauthenticated()
    .build()
    .expect("client verifier");
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&pki.server_cert)
        .expect("server cert")
        .map(|c| c.expect("cert"))
        .collect();
    let key = PrivateKeyDer::from_pem_file(&pki.server_key).expect("server key");
    rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .expect("server config")
}

type Tls = rustls::StreamOwned<rustls::ServerConnection, TcpStream>;

fn handle_conn(tcp: TcpStream, tls: Arc<rustls::ServerConfig>, sh: Arc<Shared>) {
    let _ = tcp.set_read_timeout(Some(Duration::from_secs(10)));
    let _ = tcp.set_nodelay(true);
    let Ok(conn) = rustls::ServerConnection::new(tls) else {
        return;
    };
    let mut stream = rustls::StreamOwned::new(conn, tcp);
    // Finish the handshake first: a refused client certificate ends here.
    while stream.conn.is_handshaking() {
        if stream.conn.complete_io(&mut stream.sock).is_err() {
            return;
        }
    }
    let has_cert = stream
        .conn
        .peer_certificates()
        .is_some_and(|c| !c.is_empty());
    let Some(head) = proxy::read_head(&mut stream).and_then(|(t, r)| proxy::parse_request(&t, r))
    else {
        return;
    };
    let path = head.target.clone();
    let header = |name: &str| head.header(name).unwrap_or_default().to_string();
    let token = header("authorization")
        .strip_prefix("Bearer ")
        .unwrap_or_default()
        .to_string();
    let authed_by = {
        let mut st = lock(&sh.state);
        let by = if !token.is_empty() && st.tokens.contains(&token) {
            "token"
        } else if has_cert && token.is_empty() {
            "cert"
        } else if token.is_empty() {
            "none"
        } else {
            "bad-token"
        };
        st.requests.push(format!(
            "{} {path} ua={} auth={by}",
            head.method,
            header("user-agent")
        ));
        by
    };
    if authed_by == "none" || authed_by == "bad-token" {
        let body = json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
            "message":"Unauthorized","reason":"Unauthorized","code":401});
        return respond(&mut stream, 401, &body);
    }
    let (route, query) = path.split_once('?').unwrap_or((path.as_str(), ""));
    let q: BTreeMap<String, String> = query
        .split('&')
        .filter(|s| !s.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (k.to_string(), unescape(v))
        })
        .collect();
    let segments: Vec<&str> = route.split('/').filter(|s| !s.is_empty()).collect();
    match (head.method.as_str(), segments.as_slice()) {
        ("GET", ["api", "v1", "pods"]) => {}
        ("GET", ["version"]) => {
            let v = json!({"major":"1","minor":"32","gitVersion":"v1.32.0-test-apiserver",
                "platform":"linux/amd64"});
            return respond(&mut stream, 200, &v);
        }
        ("GET", ["api"]) => {
            let v = json!({"kind":"APIVersions","versions":["v1"],"serverAddressByClientCIDRs":
                [{"clientCIDR":"0.0.0.0/0","serverAddress":"127.0.0.1"}]});
            return respond(&mut stream, 200, &v);
        }
        ("GET", ["apis"]) => {
            let v = json!({"kind":"APIGroupList","apiVersion":"v1","groups":[]});
            return respond(&mut stream, 200, &v);
        }
        ("GET", ["api", "v1"]) => return respond(&mut stream, 200, &discovery_v1()),
        ("GET", ["api", "v1", "namespaces", ns, "pods", name]) => {
            let pod = lock(&sh.state)
                .pods
                .get(&(ns.to_string(), name.to_string()))
                .cloned();
            return match pod {
                Some(p) => respond(&mut stream, 200, &p),
                None => respond(&mut stream, 404, &pod_not_found(name)),
            };
        }
        ("POST", ["apis", "authentication.k8s.io" | "authorization.k8s.io", ..]) => {
            let Some(body) = read_body(&mut stream, &head) else {
                return;
            };
            return review(&mut stream, &sh, route, &body);
        }
        (_, ["api", "v1", "namespaces", ns, "pods", name, sub]) => {
            let (pod, kubelet) = {
                let st = lock(&sh.state);
                let pod = st.pods.get(&(ns.to_string(), name.to_string())).cloned();
                let node = pod
                    .as_ref()
                    .and_then(|p| p["spec"]["nodeName"].as_str())
                    .unwrap_or_default()
                    .to_string();
                (pod, st.kubelets.get(&node).copied())
            };
            let Some(pod) = pod else {
                return respond(&mut stream, 404, &pod_not_found(name));
            };
            let sub = sub.to_string();
            return proxy::serve(stream, &head, &sub, &pod, kubelet, &sh.stopped);
        }
        _ => {
            let body = json!({"kind":"Status","apiVersion":"v1","status":"Failure",
                "message":format!("the server could not find the requested resource ({route})"),
                "reason":"NotFound","code":404});
            return respond(&mut stream, 404, &body);
        }
    }
    let selector = match parse_selector(q.get("fieldSelector").map(String::as_str).unwrap_or("")) {
        Ok(s) => s,
        Err(msg) => {
            let body = json!({"kind":"Status","apiVersion":"v1","status":"Failure",
                "message":msg,"reason":"BadRequest","code":400});
            return respond(&mut stream, 400, &body);
        }
    };
    if q.get("watch").map(String::as_str) == Some("true")
        || q.get("watch").map(String::as_str) == Some("1")
    {
        watch(stream, &sh, &q, &selector);
    } else {
        let st = lock(&sh.state);
        let items: Vec<Value> = st
            .pods
            .values()
            .filter(|p| matches(p, &selector))
            .cloned()
            .collect();
        let body = json!({"kind":"PodList","apiVersion":"v1",
            "metadata":{"resourceVersion": st.rv.to_string()},"items":items});
        drop(st);
        respond(&mut stream, 200, &body);
    }
}

fn unescape(v: &str) -> String {
    let b = v.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(n) = u8::from_str_radix(&v[i + 1..i + 3], 16) {
                out.push(n);
                i += 3;
                continue;
            }
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `field=value` terms (`=` or `==`), comma-separated; only the fields a kubelet uses.
fn parse_selector(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for term in s.split(',').filter(|t| !t.is_empty()) {
        let (f, v) = term
            .split_once("==")
            .or_else(|| term.split_once('='))
            .ok_or_else(|| format!("invalid field selector term {term:?}"))?;
        if !["spec.nodeName", "metadata.name", "metadata.namespace"].contains(&f) {
            return Err(format!("field label not supported: {f}"));
        }
        out.push((f.to_string(), v.to_string()));
    }
    Ok(out)
}

fn matches(pod: &Value, selector: &[(String, String)]) -> bool {
    selector.iter().all(|(f, v)| {
        let got = match f.as_str() {
            "spec.nodeName" => &pod["spec"]["nodeName"],
            "metadata.name" => &pod["metadata"]["name"],
            _ => &pod["metadata"]["namespace"],
        };
        got.as_str().unwrap_or("") == v
    })
}

/// A request's body by its Content-Length (at most 1 MiB): what came with the head,
/// then the rest from the stream.
fn read_body(stream: &mut Tls, head: &proxy::Head) -> Option<Vec<u8>> {
    let len: usize = head
        .header("content-length")
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(0);
    if len > 1024 * 1024 || head.rest.len() > len {
        return None;
    }
    let mut body = head.rest.clone();
    let mut more = vec![0; len - body.len()];
    stream.read_exact(&mut more).ok()?;
    body.extend_from_slice(&more);
    Some(body)
}

/// The review endpoints: a TokenReview or SubjectAccessReview answered from the table
/// (or not, under a [`ReviewFault`]).
fn review(stream: &mut Tls, sh: &Shared, route: &str, body: &[u8]) {
    let Ok(req) = serde_json::from_slice::<Value>(body) else {
        let status = json!({"kind":"Status","apiVersion":"v1","status":"Failure",
            "message":"the request body is not JSON","reason":"BadRequest","code":400});
        return respond(stream, 400, &status);
    };
    let mut st = lock(&sh.state);
    let until = Instant::now() + Duration::from_secs(60);
    while st.review_fault == ReviewFault::Hang
        && !sh.stopped.load(Ordering::SeqCst)
        && Instant::now() < until
    {
        st = sh
            .changed
            .wait_timeout(st, Duration::from_millis(200))
            .unwrap_or_else(|p| p.into_inner())
            .0;
    }
    if st.review_fault != ReviewFault::None {
        drop(st);
        let status = json!({"kind":"Status","apiVersion":"v1","status":"Failure",
            "message":"review failed (scripted)","reason":"InternalError","code":500});
        return respond(stream, 500, &status);
    }
    match route {
        "/apis/authentication.k8s.io/v1/tokenreviews" => {
            let token = req["spec"]["token"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            st.token_reviews.push(token.clone());
            let status = match st.token_users.get(&token) {
                Some((user, groups)) => json!({"authenticated": true,
                    "user": {"username": user, "uid": format!("uid-{user}"), "groups": groups}}),
                None => json!({"authenticated": false}),
            };
            drop(st);
            let answer = json!({"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview",
                "metadata":{"creationTimestamp":null},"spec":req["spec"],"status":status});
            respond(stream, 201, &answer);
        }
        "/apis/authorization.k8s.io/v1/subjectaccessreviews" => {
            let spec = req["spec"].clone();
            st.access_reviews.push(spec.clone());
            let key = (
                spec["user"].as_str().unwrap_or_default().to_string(),
                spec["resourceAttributes"]["subresource"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            );
            let allowed = st.allowed.contains(&key);
            drop(st);
            let status = if allowed {
                json!({"allowed": true, "reason": "scripted allow"})
            } else {
                json!({"allowed": false, "reason": "no rule"})
            };
            let answer = json!({"apiVersion":"authorization.k8s.io/v1",
                "kind":"SubjectAccessReview","metadata":{"creationTimestamp":null},
                "spec":spec,"status":status});
            respond(stream, 201, &answer);
        }
        _ => {
            drop(st);
            let status = json!({"kind":"Status","apiVersion":"v1","status":"Failure",
                "message":format!("the server could not find the requested resource ({route})"),
                "reason":"NotFound","code":404});
            respond(stream, 404, &status);
        }
    }
}

/// `pods "<name>" not found`, as the API server words it.
fn pod_not_found(name: &str) -> Value {
    json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
        "message":format!("pods \"{name}\" not found"),"reason":"NotFound",
        "details":{"name":name,"kind":"pods"},"code":404})
}

/// The `v1` resources kubectl looks up before it asks for a pod or its subresources.
fn discovery_v1() -> Value {
    let sub = |name: &str, kind: &str, verbs: &[&str]| json!({"name":name,"singularName":"","namespaced":true,"kind":kind,"verbs":verbs});
    json!({"kind":"APIResourceList","groupVersion":"v1","resources":[
        {"name":"pods","singularName":"pod","namespaced":true,"kind":"Pod",
         "verbs":["create","delete","get","list","patch","update","watch"],
         "shortNames":["po"],"categories":["all"]},
        sub("pods/attach", "PodAttachOptions", &["create", "get"]),
        sub("pods/exec", "PodExecOptions", &["create", "get"]),
        sub("pods/log", "Pod", &["get"]),
        sub("pods/portforward", "PodPortForwardOptions", &["create", "get"]),
        sub("pods/status", "Pod", &["get", "patch", "update"]),
    ]})
}

fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        410 => "Gone",
        500 => "Internal Server Error",
        _ => "Error",
    }
}

fn respond(stream: &mut Tls, code: u16, body: &Value) {
    let body = body.to_string();
    let _ = write!(
        stream,
        "HTTP/1.1 {code} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        reason(code),
        body.len()
    );
    let _ = stream.flush();
    stream.conn.send_close_notify();
    let _ = stream.conn.complete_io(&mut stream.sock);
}

/// A plain-text answer (an empty log).
fn respond_text(stream: &mut Tls, code: u16, body: &str) {
    let _ = write!(
        stream,
        "HTTP/1.1 {code} {}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        reason(code),
        body.len()
    );
    let _ = stream.flush();
    stream.conn.send_close_notify();
    let _ = stream.conn.complete_io(&mut stream.sock);
}

fn chunk(stream: &mut Tls, event: &Value) -> bool {
    let line = format!("{event}\n");
    write!(stream, "{:x}\r\n{line}\r\n", line.len()).is_ok() && stream.flush().is_ok()
}

fn watch(
    mut stream: Tls,
    sh: &Shared,
    q: &BTreeMap<String, String>,
    selector: &[(String, String)],
) {
    let from: u64 = q
        .get("resourceVersion")
        .and_then(|r| r.parse().ok())
        .unwrap_or(0);
    let bookmarks = q.get("allowWatchBookmarks").map(String::as_str) == Some("true");
    let asked = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(sh.opts.max_watch);
    let until = Instant::now() + asked.min(sh.opts.max_watch);

    let st = lock(&sh.state);
    let generation = st.drop_generation;
    if from != 0 && from < st.oldest - 1 {
        let oldest = st.oldest;
        drop(st);
        let status = json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
            "message":format!("too old resource version: {from} ({oldest})"),
            "reason":"Expired","code":410});
        if sh.opts.gone_as_status {
            return respond(&mut stream, 410, &status);
        }
        let _ = write!(
            stream,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        );
        chunk(&mut stream, &json!({"type":"ERROR","object":status}));
        let _ = write!(stream, "0\r\n\r\n");
        let _ = stream.flush();
        return;
    }
    let mut initial = Vec::new();
    let mut cursor = from;
    if from == 0 {
        initial = st
            .pods
            .values()
            .filter(|p| matches(p, selector))
            .cloned()
            .collect();
        cursor = st.rv;
    }
    drop(st);
    if write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    .is_err()
        || stream.flush().is_err()
    {
        return;
    }
    for p in initial {
        if !chunk(&mut stream, &json!({"type":"ADDED","object":p})) {
            return;
        }
    }
    let mut next_bookmark = Instant::now() + sh.opts.bookmark_every;
    loop {
        let mut st = lock(&sh.state);
        loop {
            if st.drop_generation != generation || sh.stopped.load(Ordering::SeqCst) {
                // Break off without the terminating chunk: a dropped connection.
                drop(st);
                let _ = stream.sock.shutdown(Shutdown::Both);
                return;
            }
            let now = Instant::now();
            if now >= until {
                drop(st);
                let _ = write!(stream, "0\r\n\r\n");
                let _ = stream.flush();
                return;
            }
            let pending = st.history.iter().any(|(rv, _, _)| *rv > cursor);
            if pending || (bookmarks && now >= next_bookmark) {
                break;
            }
            let wait = until.min(next_bookmark).saturating_duration_since(now);
            st = sh
                .changed
                .wait_timeout(st, wait.max(Duration::from_millis(10)))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        let events: Vec<(u64, &'static str, Value)> = st
            .history
            .iter()
            .filter(|(rv, _, _)| *rv > cursor)
            .cloned()
            .collect();
        let store_rv = st.rv;
        drop(st);
        for (rv, kind, obj) in events {
            cursor = rv;
            if matches(&obj, selector) && !chunk(&mut stream, &json!({"type":kind,"object":obj})) {
                return;
            }
        }
        if bookmarks && Instant::now() >= next_bookmark {
            cursor = cursor.max(store_rv);
            let bm = json!({"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1",
                "metadata":{"resourceVersion": cursor.to_string()}}});
            if !chunk(&mut stream, &bm) {
                return;
            }
            next_bookmark = Instant::now() + sh.opts.bookmark_every;
        }
    }
}

/// Reads one whole HTTP answer body from `stream` (tests of the stand-in itself).
pub fn read_all(mut r: impl Read) -> String {
    let mut s = String::new();
    let _ = r.read_to_string(&mut s);
    s
}
