//! A TEST STAND-IN for a Kubernetes API server. No real kube-apiserver can be installed
//! on these machines, so rkubelet's tests against "a cluster" run against this small
//! server, which implements the API conventions a kubelet and kubectl rely on with the
//! API server's semantics, and says below where it is not faithful. Its parts:
//!
//! - this file: the TLS server, authentication, the request log, the test-side
//!   helpers ([`TestApiServer`]), faults (stop/restart, [`TestApiServer::down_for`],
//!   [`TestApiServer::fail_requests`], [`TestApiServer::restart_with_new_versions`]),
//!   the review endpoints, and the routing to the parts below;
//! - [`store`] (apiserver_store.rs): a generic object store for pods, nodes, events,
//!   configmaps, secrets, serviceaccounts, namespaces, leases and CSRs with one
//!   resourceVersion counter, create/update/patch/delete semantics (409 AlreadyExists
//!   and Conflict, uid and resourceVersion preconditions, status subresources,
//!   graceful pod deletion, finalizers) and field/label selectors;
//! - [`patch`] (apiserver_patch.rs): strategic merge, JSON merge and JSON patches;
//! - `rest` (apiserver_rest.rs): the REST routes onto the store — GET, LIST, WATCH
//!   (chunked `{"type":…,"object":…}` lines after the `resourceVersion` asked for,
//!   BOOKMARKs when `allowWatchBookmarks=true`, a 410 `Expired` ERROR event — or a
//!   plain 410 answer, [`Options::gone_as_status`] — for a compacted version, an end
//!   at `timeoutSeconds` or [`Options::max_watch`]), POST, PUT, PATCH, DELETE, the
//!   request counts ([`TestApiServer::call_counts`]) and discovery;
//! - [`tables`] (apiserver_tables.rs): `meta.k8s.io/v1` Tables with upstream's printer
//!   columns, for kubectl;
//! - [`credentials`] (apiserver_credentials.rs): TokenRequest, CSR approval and signing
//!   by the test CA, bootstrap tokens;
//! - [`admission`] (apiserver_admission.rs): pod validation and defaulting, and the
//!   ServiceAccount admission plugin behind a switch;
//! - [`proxy`] (apiserver_proxy.rs): the pod subresources `log`, `exec`, `attach` and
//!   `portforward` proxied to the kubelet of the pod's node as kube-apiserver proxies
//!   them (the kubelet's address is set with [`TestApiServer::set_kubelet`]).
//!
//! Authentication over TLS: a bearer token from the accepted set (the user from the
//! TokenReview table, else `token-user`), a bootstrap token, or a client certificate
//! signed by the test CA (the user is its subject's CN, its groups the O values);
//! anything else gets 401 with a Status body. Authorization: bootstrap-token users may
//! only use CSRs; everyone else may do everything (upstream's Node authorizer would
//! limit a kubelet to its own node and its pods' objects). `POST /apis/authentication.k8s.io/v1/tokenreviews` and
//! `POST /apis/authorization.k8s.io/v1/subjectaccessreviews` are answered from a
//! scripted table (tokens → users; (user, subresource) pairs allowed, all else no
//! opinion), counted, and switchable to answer 500 or to hang ([`ReviewFault`]), for
//! the kubelet port's webhooks.
//!
//! Not faithful, besides what each part's header says: each connection serves one
//! request (`Connection: close`; no HTTP/2, no keep-alive); JSON only (no protobuf, no
//! CBOR); no admission (no ServiceAccount token volume injected into pods, no default
//! namespace objects); no API priority and fairness. Certificates are made at test
//! time with the `openssl` CLI ([`Pki`]). It lives only under `tests/` and is used by
//! the integration tests and the sources, kubelet_port, logs and streams benchmarks.
//!
//! Over 800 lines: one server's state (store, tables, faults, request log), the
//! test-side helpers over it and the handlers that share it; the object semantics,
//! patches and REST routes are in their own files.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

#[path = "apiserver_proxy.rs"]
pub mod proxy;

#[path = "apiserver_patch.rs"]
pub mod patch;

#[path = "apiserver_store.rs"]
pub mod store;

#[path = "apiserver_rest.rs"]
mod rest;

#[path = "apiserver_tables.rs"]
pub mod tables;

#[path = "apiserver_credentials.rs"]
pub mod credentials;

#[path = "apiserver_admission.rs"]
pub mod admission;

#[cfg(test)]
#[path = "apiserver_http.rs"]
mod http_tests;

#[cfg(test)]
#[path = "apiserver_kubectl.rs"]
mod kubectl_tests;

pub use store::{Identity, PatchType};
use store::{Selector, Store, Sub};

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

/// libfaketime (Debian's `faketime`): the certificates are made with the clock 2 h back.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// How far before their making the test certificates are valid from: a kubelet whose
/// wall clock is stepped an hour back (the chaos suite's clock scenario) still trusts
/// them, as it would a cluster's CA made long ago.
pub const PKI_BACKDATED: &str = "-2h";

fn openssl(dir: &Path, args: &[&str]) {
    let mut cmd = Command::new("openssl");
    if Path::new(LIBFAKETIME).exists() {
        // openssl stamps notBefore with its own clock: run it 2 h in the past.
        cmd.env("LD_PRELOAD", LIBFAKETIME)
            .env("FAKETIME", PKI_BACKDATED)
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    }
    let out =
        cmd.current_dir(dir).args(args).output().expect(
            "the openssl CLI is needed for the test certificates (apt-get install openssl)",
        );
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
            // Bump the version when the certificates' shape changes (v2: backdated). A
            // set made without libfaketime (not backdated) is kept apart, so it is not
            // reused once libfaketime is installed.
            let name = if Path::new(LIBFAKETIME).exists() {
                "test-pki-v2"
            } else {
                "test-pki-v2-not-backdated"
            };
            let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
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

/// A scripted failure of the API endpoints.
#[derive(Debug, Clone)]
struct Fault {
    /// The HTTP code answered (500, 503 …).
    code: u16,
    /// Only requests for this resource (`pods`, `leases` …); `None`: every API request.
    resource: Option<String>,
    /// Until when (`None`: until cleared).
    until: Option<Instant>,
}

/// One request as the API machinery sees it (for request counts).
#[derive(Debug, Clone)]
pub struct Call {
    /// `GET`, `LIST`, `WATCH`, `POST`, `PUT`, `PATCH`, `DELETE`.
    pub verb: String,
    /// `pods`, `nodes/status`, `leases`, `serviceaccounts/token` … (empty for
    /// discovery and reviews).
    pub kind: String,
    /// Namespace and name (empty when none).
    pub namespace: String,
    pub name: String,
    /// The authenticated user.
    pub user: String,
    /// The HTTP status answered (0 for a watch, which answers as it goes). Pod
    /// subresources proxied to a kubelet, discovery and reviews are not recorded here.
    pub code: u16,
    /// When it arrived.
    pub at: Instant,
    /// The body of a PATCH (the patch itself), so a test can tell what a report changed.
    pub patch: Option<Value>,
}

#[derive(Default)]
struct State {
    /// Every object and the change history.
    store: Store,
    /// Bumped to make every open watch break off without a clean end.
    drop_generation: u64,
    /// Request log: "GET <path> ua=<user agent> auth=<token|cert|none>".
    requests: Vec<String>,
    /// Requests to the object store, with their verb and kind.
    calls: Vec<Call>,
    /// A scripted failure of the object endpoints.
    fault: Option<Fault>,
    /// Refuse connections until then (the listener is closed).
    down_until: Option<Instant>,
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
    /// Every TokenRequest answered: (namespace, service account, the TokenRequest).
    token_requests: Vec<(String, String, Value)>,
    /// A TokenRequest for a missing service account is 404 (upstream); off: any name.
    require_service_accounts: bool,
    /// Issued tokens expire this many seconds after they are issued, whatever the
    /// request's `expirationSeconds` (which the answer still echoes): a refresh then
    /// falls due sooner. None: as asked.
    token_lifetime: Option<u64>,
    /// Bootstrap tokens accepted: id → secret.
    bootstrap_tokens: BTreeMap<String, String>,
    /// Approve (and issue) every CSR when it is created.
    csr_auto_approve: bool,
    /// The lifetime of issued certificates, in seconds.
    csr_lifetime: i64,
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
                store: Store::new(100),
                tokens: opts.tokens.iter().cloned().collect(),
                csr_lifetime: 365 * 86400,
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
                let mut listener = listener;
                loop {
                    let conn = listener.accept();
                    if sh.stopped.load(Ordering::SeqCst) {
                        return;
                    }
                    let down = lock(&sh.state).down_until.filter(|t| *t > Instant::now());
                    if let Some(until) = down {
                        // Down: the port refuses connections until then.
                        drop(conn);
                        drop(listener);
                        loop {
                            if sh.stopped.load(Ordering::SeqCst) {
                                return;
                            }
                            if Instant::now() >= until {
                                if let Ok(l) = TcpListener::bind(addr) {
                                    listener = l;
                                    break;
                                }
                            }
                            std::thread::sleep(Duration::from_millis(50));
                        }
                        continue;
                    }
                    let Ok((conn, _)) = conn else { continue };
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

    /// Goes down for `d` without the test waiting: open watches break off and the
    /// port refuses connections (it is closed), then it serves again with the same
    /// store. Returns at once.
    pub fn down_for(&self, d: Duration) {
        lock(&self.shared.state).down_until = Some(Instant::now() + d);
        self.drop_watches();
        // Wakes the accept loop, which closes the port.
        let _ = TcpStream::connect(self.addr);
    }

    /// Whether a [`Self::down_for`] is still in force.
    pub fn is_down(&self) -> bool {
        lock(&self.shared.state)
            .down_until
            .is_some_and(|t| t > Instant::now())
    }

    /// Answers every request for `resource` (`None`: every object request; discovery,
    /// reviews and pod subresources are not affected) with HTTP `code` and a Status,
    /// for `d` (`None`: until [`Self::clear_fault`]). Open watches break off.
    pub fn fail_requests(&self, code: u16, resource: Option<&str>, d: Option<Duration>) {
        lock(&self.shared.state).fault = Some(Fault {
            code,
            resource: resource.map(str::to_string),
            until: d.map(|d| Instant::now() + d),
        });
        self.drop_watches();
    }

    /// Ends a [`Self::fail_requests`].
    pub fn clear_fault(&self) {
        lock(&self.shared.state).fault = None;
    }

    /// As an API server restored from a backup: every object kept, the
    /// resourceVersion counter far ahead (each object gets a new version), the watch
    /// history gone so that every old version is answered 410 Gone, and open watches
    /// broken off.
    pub fn restart_with_new_versions(&self) {
        lock(&self.shared.state).store.renumber(1_000_000);
        self.drop_watches();
    }

    fn change(&self, kind: &'static str, pod: Value) -> u64 {
        let res = store::resource("pods").expect("pods are served");
        let mut st = lock(&self.shared.state);
        st.store
            .ensure_namespace(pod["metadata"]["namespace"].as_str().unwrap_or("default"));
        st.store.put_raw(res, kind, pod);
        let rv = st.store.rv;
        drop(st);
        self.shared.changed.notify_all();
        rv
    }

    /// Creates a pod (a v1 Pod as JSON) as it is, status included (a test's
    /// shortcut, not the API's create); fills in namespace, uid and creationTimestamp
    /// if absent. Returns the pod as stored.
    pub fn create_pod(&self, mut pod: Value) -> Value {
        let meta = &mut pod["metadata"];
        if meta["namespace"].is_null() {
            meta["namespace"] = json!("default");
        }
        if meta["uid"].is_null() {
            meta["uid"] = json!(format!(
                "uid-{}-{}",
                meta["name"].as_str().unwrap_or_default(),
                lock(&self.shared.state).store.rv + 1
            ));
        }
        if meta["creationTimestamp"].is_null() {
            meta["creationTimestamp"] = json!("2024-01-01T00:00:00Z");
        }
        pod["apiVersion"] = json!("v1");
        pod["kind"] = json!("Pod");
        self.change("ADDED", pod.clone());
        self.get_pod(
            pod["metadata"]["namespace"].as_str().unwrap_or("default"),
            pod["metadata"]["name"].as_str().unwrap_or_default(),
        )
        .unwrap_or(pod)
    }

    /// The stored pod.
    pub fn get_pod(&self, ns: &str, name: &str) -> Option<Value> {
        self.get("pods", ns, name)
    }

    /// Replaces a pod as it is (MODIFIED; no version check).
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

    /// The stored object of `resource` (plural: `nodes`, `leases` …); `ns` is
    /// ignored for cluster-scoped kinds.
    pub fn get(&self, resource: &str, ns: &str, name: &str) -> Option<Value> {
        let res = store::resource(resource).expect("a served resource");
        lock(&self.shared.state).store.get(res, ns, name).cloned()
    }

    /// Every stored object of `resource` in `ns` (`None`: all namespaces).
    pub fn list(&self, resource: &str, ns: Option<&str>) -> Vec<Value> {
        let res = store::resource(resource).expect("a served resource");
        lock(&self.shared.state)
            .store
            .list(res, ns, &Selector::default())
    }

    /// Runs a store operation as a request would, waking watches.
    fn write<T>(&self, f: impl FnOnce(&mut Store) -> T) -> T {
        let out = f(&mut lock(&self.shared.state).store);
        self.shared.changed.notify_all();
        out
    }

    /// Creates an object with the API's semantics (POST), as the test (user
    /// `test`); the error is the Status the API would answer.
    pub fn create(&self, resource: &str, ns: &str, obj: Value) -> Result<Value, Value> {
        let res = store::resource(resource).expect("a served resource");
        let who = Identity {
            user: "test".into(),
            groups: vec!["system:masters".into()],
        };
        self.write(|s| {
            s.ensure_namespace(ns);
            s.create(res, ns, obj, &who)
        })
        .map_err(|e| e.status())
    }

    /// Replaces an object (PUT; `status`: the status subresource).
    pub fn update(
        &self,
        resource: &str,
        ns: &str,
        obj: Value,
        status: bool,
    ) -> Result<Value, Value> {
        let res = store::resource(resource).expect("a served resource");
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let sub = if status { Sub::Status } else { Sub::Main };
        self.write(|s| s.update(res, ns, &name, sub, obj))
            .map_err(|e| e.status())
    }

    /// Patches an object (PATCH; `status`: the status subresource).
    pub fn patch(
        &self,
        resource: &str,
        ns: &str,
        name: &str,
        status: bool,
        how: PatchType,
        p: &Value,
    ) -> Result<Value, Value> {
        let res = store::resource(resource).expect("a served resource");
        let sub = if status { Sub::Status } else { Sub::Main };
        self.write(|s| s.patch(res, ns, name, sub, how, p))
            .map_err(|e| e.status())
    }

    /// Deletes an object with DeleteOptions `opts` (`json!({})` for none); the answer
    /// as the API gives it (the pod, or a Status).
    pub fn delete(
        &self,
        resource: &str,
        ns: &str,
        name: &str,
        opts: &Value,
    ) -> Result<Value, Value> {
        let res = store::resource(resource).expect("a served resource");
        self.write(|s| s.delete(res, ns, name, opts))
            .map_err(|e| e.status())
    }

    /// Forgets the history: every version before now is gone (410).
    pub fn compact(&self) {
        lock(&self.shared.state).store.compact();
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

    /// The TokenReview table: `token` is `user` in `groups`. A token accepted for
    /// requests ([`Self::set_tokens`]) also authenticates as this user.
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

    /// Every object request so far (verb, kind, namespace, name, user, code, time).
    pub fn calls(&self) -> Vec<Call> {
        lock(&self.shared.state).calls.clone()
    }

    /// Object requests since `since`, counted by (verb, kind), e.g.
    /// `("PATCH", "nodes/status")`, `("PUT", "leases")`, `("WATCH", "pods")`.
    pub fn call_counts(&self, since: Instant) -> BTreeMap<(String, String), usize> {
        let mut out = BTreeMap::new();
        for c in lock(&self.shared.state)
            .calls
            .iter()
            .filter(|c| c.at >= since)
        {
            *out.entry((c.verb.clone(), c.kind.clone())).or_insert(0) += 1;
        }
        out
    }

    /// Every TokenRequest answered so far: (namespace, service account, the
    /// TokenRequest with its token).
    pub fn token_requests(&self) -> Vec<(String, String, Value)> {
        lock(&self.shared.state).token_requests.clone()
    }

    /// Tokens issued from now on expire `secs` after they are issued (the answer's
    /// `status.expirationTimestamp`; `spec.expirationSeconds` stays what was asked),
    /// so a client's refresh falls due within a test. None: as asked.
    pub fn set_token_lifetime(&self, secs: Option<u64>) {
        lock(&self.shared.state).token_lifetime = secs;
    }

    /// Makes a TokenRequest for a service account that is not in the store 404, as
    /// upstream (default: off, any name is served).
    pub fn require_service_accounts(&self, on: bool) {
        lock(&self.shared.state).require_service_accounts = on;
    }

    /// Accepts bootstrap token `<id>.<secret>` (user `system:bootstrap:<id>`, group
    /// `system:bootstrappers`; CSRs only).
    pub fn add_bootstrap_token(&self, id: &str, secret: &str) {
        lock(&self.shared.state)
            .bootstrap_tokens
            .insert(id.to_string(), secret.to_string());
    }

    /// Turns the ServiceAccount admission plugin (and the controllers making each
    /// namespace's `default` ServiceAccount and `kube-root-ca.crt` ConfigMap, with the
    /// test CA) on or off: pods created through the API from now on get the projected
    /// `kube-api-access-*` volume, as in a real cluster.
    pub fn set_service_account_admission(&self, on: bool) {
        let ca = std::fs::read_to_string(Pki::get().ca).expect("test CA");
        let mut st = lock(&self.shared.state);
        st.store.sa_admission = on;
        st.store.root_ca = ca;
        let namespaces: Vec<String> = st
            .store
            .list(
                store::resource("namespaces").expect("served"),
                None,
                &Selector::default(),
            )
            .iter()
            .filter_map(|n| n["metadata"]["name"].as_str().map(str::to_string))
            .collect();
        for ns in namespaces {
            st.store.publish(&ns);
        }
    }

    /// Approves CSR `name` and issues its certificate (signed by the test CA, or a
    /// `Failed` condition if the request is not acceptable). False if there is none.
    pub fn approve_csr(&self, name: &str) -> bool {
        if !credentials::decide(&self.shared, name, true) {
            return false;
        }
        let lifetime = lock(&self.shared.state).csr_lifetime;
        credentials::sign(&self.shared, name, lifetime);
        true
    }

    /// Denies CSR `name`. False if there is none.
    pub fn deny_csr(&self, name: &str) -> bool {
        credentials::decide(&self.shared, name, false)
    }

    /// Approves and issues every CSR as soon as it is created.
    pub fn set_csr_auto_approve(&self, on: bool) {
        lock(&self.shared.state).csr_auto_approve = on;
    }

    /// The lifetime of the certificates issued from now on (default 365 days; any
    /// number of seconds, for rotation tests).
    pub fn set_csr_lifetime(&self, d: Duration) {
        lock(&self.shared.state).csr_lifetime = d.as_secs() as i64;
    }

    /// The store's resourceVersion.
    pub fn resource_version(&self) -> u64 {
        lock(&self.shared.state).store.rv
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
    let cert: Option<Vec<u8>> = stream
        .conn
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.as_ref().to_vec());
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
    let (authed_by, who) = {
        let mut st = lock(&sh.state);
        let bootstrap = credentials::bootstrap_identity(&token, &st.bootstrap_tokens);
        let by = if !token.is_empty() && st.tokens.contains(&token) {
            "token"
        } else if bootstrap.is_some() {
            "bootstrap"
        } else if cert.is_some() && token.is_empty() {
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
        let who = match by {
            "token" => match st.token_users.get(&token) {
                Some((user, groups)) => Identity {
                    user: user.clone(),
                    groups: groups.clone(),
                },
                None => Identity {
                    user: "token-user".into(),
                    groups: vec!["system:authenticated".into()],
                },
            },
            "cert" => cert.as_deref().map(cert_identity).unwrap_or_default(),
            "bootstrap" => bootstrap.unwrap_or_default(),
            _ => Identity::default(),
        };
        (by, who)
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
        ("GET", ["version"]) => {
            let v = json!({"major":"1","minor":"32","gitVersion":"v1.32.0-test-apiserver",
                "platform":"linux/amd64"});
            respond(&mut stream, 200, &v)
        }
        ("GET", ["api"]) => {
            let v = json!({"kind":"APIVersions","versions":["v1"],"serverAddressByClientCIDRs":
                [{"clientCIDR":"0.0.0.0/0","serverAddress":"127.0.0.1"}]});
            respond(&mut stream, 200, &v)
        }
        ("GET", ["apis"]) => respond(&mut stream, 200, &rest::discovery_groups()),
        ("GET", ["api", "v1"]) => respond(&mut stream, 200, &rest::discovery("", "v1")),
        ("GET", ["apis", group, version]) => {
            respond(&mut stream, 200, &rest::discovery(group, version))
        }
        ("POST", ["apis", "authentication.k8s.io" | "authorization.k8s.io", ..]) => {
            let Some(body) = read_body(&mut stream, &head) else {
                return;
            };
            review(&mut stream, &sh, route, &body)
        }
        (_, ["api", "v1", "namespaces", ns, "pods", name, sub])
            if matches!(*sub, "log" | "exec" | "attach" | "portforward") =>
        {
            let (pod, kubelet) = {
                let st = lock(&sh.state);
                let pods = store::resource("pods").expect("pods are served");
                let pod = st.store.get(pods, ns, name).cloned();
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
            proxy::serve(stream, &head, &sub, &pod, kubelet, &sh.stopped)
        }
        _ => rest::serve(stream, &sh, &head, route, &q, &who),
    }
}

/// The user of a client certificate: its subject's CN, and its O values as groups
/// (a minimal DER walk: the subject is the name after the validity times).
fn cert_identity(der: &[u8]) -> Identity {
    let mut who = Identity::default();
    let mut after_validity = false;
    let mut i = 0;
    while i + 2 < der.len() {
        // UTCTime or GeneralizedTime: the validity; the subject follows.
        if (der[i] == 0x17 || der[i] == 0x18) && (der[i + 1] == 13 || der[i + 1] == 15) {
            after_validity = true;
        }
        if after_validity
            && der[i] == 0x06
            && der[i + 1] == 3
            && der.get(i + 2..i + 4) == Some(&[0x55, 0x04])
        {
            let attr = der.get(i + 4).copied();
            let (tag, len) = (der.get(i + 5).copied(), der.get(i + 6).copied());
            if let (Some(attr), Some(0x0c | 0x13), Some(len)) = (attr, tag, len) {
                let start = i + 7;
                if let Some(v) = der.get(start..start + len as usize) {
                    let v = String::from_utf8_lossy(v).into_owned();
                    match attr {
                        3 if who.user.is_empty() => who.user = v,
                        10 => who.groups.push(v),
                        _ => {}
                    }
                }
            }
        }
        i += 1;
    }
    who.groups.push("system:authenticated".into());
    who
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

fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        410 => "Gone",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
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

/// Reads one whole HTTP answer body from `stream` (tests of the stand-in itself).
pub fn read_all(mut r: impl Read) -> String {
    let mut s = String::new();
    let _ = r.read_to_string(&mut s);
    s
}
