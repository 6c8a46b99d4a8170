//! The kubelet port's bearer tokens, Webhook authorization, certificate reload and
//! cipher suites, against real clients (curl, kubectl, openssl s_client) and the test
//! API server stand-in's TokenReview and SubjectAccessReview endpoints
//! ([`TestApiServer`], scripted: tokens → users, (user, subresource) → allowed, faults).
//!
//! The matrix test runs every handler the port has × every kind of credential, for
//! both authorization modes with anonymous on and off, and checks each status and body.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::apiserver::{Options, Pki, ReviewFault, TestApiServer};
use crate::kubelet_port::{client_cert, kubectl_raw, pki_flags, run, start};
use crate::util::{wait_for, Node, LONG};

/// `curl -sk` with an optional client certificate and bearer token: (status, body);
/// status 0 when no HTTP answer came.
fn get(port: u16, path: &str, cert: Option<(&Path, &Path)>, token: Option<&str>) -> (u16, String) {
    let mut c = Command::new("curl");
    c.args(["-sk", "--max-time", "30", "-w", "\n%{http_code}"]);
    if let Some((crt, key)) = cert {
        c.arg("--cert").arg(crt).arg("--key").arg(key);
    }
    if let Some(t) = token {
        c.args(["-H", &format!("Authorization: Bearer {t}")]);
    }
    c.arg(format!("https://127.0.0.1:{port}{path}"));
    let out = run(&mut c);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// A kubeconfig for the kubelet port at `port` with the user stanza `user` (YAML).
fn port_kubeconfig(dir: &Path, name: &str, port: u16, user: &str) -> PathBuf {
    let pki = Pki::get();
    let user: String = user.lines().map(|l| format!("    {l}\n")).collect();
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: node\n  cluster:\n    server: \
         https://127.0.0.1:{port}\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n\
         {user}contexts:\n- name: c\n  context: {{cluster: node, user: u}}\ncurrent-context: c\n",
        pki.ca.display()
    );
    let path = dir.join(name);
    std::fs::write(&path, text).expect("kubeconfig");
    path
}

/// Starts `node` with the test PKI, `--kubeconfig` for `api` and the token webhook on,
/// plus `extra`; returns the kubelet port.
fn start_with_api(node: &mut Node, api: &TestApiServer, extra: &[String]) -> u16 {
    let kc = api.kubeconfig(&node.dir, "kubelet.kubeconfig", "token: good-token");
    let mut flags = pki_flags(&Pki::get());
    flags.push(format!("--kubeconfig={}", kc.display()));
    flags.push("--authentication-token-webhook".into());
    flags.extend_from_slice(extra);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    start(node, &flags)
}

/// The stand-in's tables: alice may use `nodes/proxy`; the test PKI's client
/// certificate (system:node:test) only `pods`, `healthz` and `configz`; mallory
/// nothing; `tok-refused` is nobody.
fn scripted_api() -> TestApiServer {
    let api = TestApiServer::start(Options::default());
    api.set_token_user("tok-alice", "alice", &["devs"]);
    api.set_token_user("tok-mallory", "mallory", &[]);
    api.allow("alice", "proxy");
    for sub in ["pods", "healthz", "configz"] {
        api.allow("system:node:test", sub);
    }
    api
}

/// One kind of credential a request carries.
#[derive(Debug, Clone, Copy)]
enum Cred {
    None,
    /// A client certificate from another CA.
    Rogue,
    /// The test PKI's client certificate (CN system:node:test).
    Cert,
    /// A bearer token.
    Token(&'static str),
    /// A certificate of a user never seen before (errcase), while reviews fail.
    ErrCert,
    /// A token never seen before, while reviews fail.
    ErrToken,
}

const ROWS: [(&str, Cred); 8] = [
    ("no credentials", Cred::None),
    ("certificate from another CA", Cred::Rogue),
    ("valid certificate", Cred::Cert),
    ("valid token", Cred::Token("tok-alice")),
    ("refused token", Cred::Token("tok-refused")),
    ("webhook says no", Cred::Token("tok-mallory")),
    ("webhook errors (certificate)", Cred::ErrCert),
    ("webhook errors (token)", Cred::ErrToken),
];

/// Every handler the port has: path, its subresources, and the status that shows
/// the request was served (`None`: any status but 0, 401, 403 and 500 — the handler
/// may not exist yet, and its 404 still proves authorization let it through).
const PATHS: [(&str, &[&str], Option<u16>); 5] = [
    ("/pods", &["pods", "proxy"], Some(200)),
    ("/healthz", &["healthz", "proxy"], Some(200)),
    ("/configz", &["configz", "proxy"], Some(200)),
    ("/runningpods/", &["pods", "proxy"], None),
    ("/containerLogs/ns/p/c", &["proxy"], None),
];

/// What a request should get.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Want {
    /// Served by its handler.
    Pass,
    /// This status and body.
    Status(u16, String),
}

/// The expected answer, from upstream's rules.
fn want(webhook: bool, anonymous: bool, cred: Cred, subs: &[&str]) -> Want {
    let forbidden = |user: &str| {
        Want::Status(
            403,
            format!(
                "Forbidden (user={user}, verb=get, resource=nodes, subresource(s)=[{}])\n",
                subs.join(" ")
            ),
        )
    };
    let unauthorized = Want::Status(401, "Unauthorized".into());
    match cred {
        // Verified after the handshake; a failure is a failed credential (401, not
        // anonymous and not the token), as upstream's x509 authenticator.
        Cred::Rogue => unauthorized,
        Cred::None if !anonymous => unauthorized,
        Cred::None if webhook => forbidden("system:anonymous"),
        // A refused or unreviewable token fails, anonymous or not.
        Cred::Token("tok-refused") | Cred::ErrToken => unauthorized,
        Cred::Cert if webhook && subs == ["proxy"] => forbidden("system:node:test"),
        Cred::Token("tok-mallory") if webhook => forbidden("mallory"),
        Cred::ErrCert if webhook => Want::Status(
            500,
            format!(
                "Authorization error (user=errcase, verb=get, resource=nodes, subresource={})",
                subs[0]
            ),
        ),
        _ => Want::Pass,
    }
}

fn matches(got: &(u16, String), want: &Want, pass: Option<u16>) -> bool {
    match want {
        Want::Status(code, body) => got.0 == *code && got.1 == *body,
        Want::Pass => match pass {
            Some(code) => got.0 == code,
            None => ![0, 401, 403, 500].contains(&got.0),
        },
    }
}

#[test]
fn authorization_matrix_over_both_modes_with_anonymous_on_and_off() {
    let pki = Pki::get();
    let api = scripted_api();
    let mut mismatches = Vec::new();
    let mut checked = 0;
    for (webhook, anonymous) in [(false, false), (false, true), (true, false), (true, true)] {
        let mut node = Node::new("kauthz");
        let (errcase_crt, errcase_key) = client_cert(&pki, &node.dir, "errcase", "/CN=errcase");
        let mode = if webhook { "Webhook" } else { "AlwaysAllow" };
        let port = start_with_api(
            &mut node,
            &api,
            &[
                format!("--authorization-mode={mode}"),
                format!("--anonymous-auth={anonymous}"),
            ],
        );
        for (label, cred) in ROWS {
            let failing = matches!(cred, Cred::ErrCert | Cred::ErrToken);
            if failing {
                api.set_review_fault(ReviewFault::Error);
            }
            for (path, subs, pass) in PATHS {
                let got = match cred {
                    Cred::None => get(port, path, None, None),
                    Cred::Rogue => get(port, path, Some((&pki.rogue_cert, &pki.rogue_key)), None),
                    Cred::Cert => get(port, path, Some((&pki.client_cert, &pki.client_key)), None),
                    Cred::Token(t) => get(port, path, None, Some(t)),
                    Cred::ErrCert => get(port, path, Some((&errcase_crt, &errcase_key)), None),
                    Cred::ErrToken => get(port, path, None, Some("tok-never-seen")),
                };
                let want = want(webhook, anonymous, cred, subs);
                checked += 1;
                if !matches(&got, &want, pass) {
                    mismatches.push(format!(
                        "{mode} anonymous={anonymous} {label} {path}: want {want:?}, got {got:?}"
                    ));
                }
            }
            if failing {
                api.set_review_fault(ReviewFault::None);
            }
        }

        if webhook && !anonymous {
            // kubectl, a real client, with a token and with a certificate.
            let alice = port_kubeconfig(&node.dir, "alice.kubeconfig", port, "token: tok-alice");
            let (ok, pods) = kubectl_raw(&alice, "/pods");
            assert!(ok && pods.contains("\"PodList\""), "{pods}");
            let mallory =
                port_kubeconfig(&node.dir, "mallory.kubeconfig", port, "token: tok-mallory");
            let (ok, out) = kubectl_raw(&mallory, "/pods");
            assert!(
                !ok && out.contains("(Forbidden)")
                    && out.contains(
                        "Forbidden (user=mallory, verb=get, resource=nodes, subresource(s)=[pods proxy])"
                    ),
                "{out}"
            );
            let refused =
                port_kubeconfig(&node.dir, "refused.kubeconfig", port, "token: tok-refused");
            let (ok, out) = kubectl_raw(&refused, "/healthz");
            // kubectl's words for a 401.
            assert!(
                !ok && out.contains("You must be logged in to the server"),
                "{out}"
            );
            let cert = port_kubeconfig(
                &node.dir,
                "cert.kubeconfig",
                port,
                &format!(
                    "client-certificate: {}\nclient-key: {}",
                    pki.client_cert.display(),
                    pki.client_key.display()
                ),
            );
            let (ok, out) = kubectl_raw(&cert, "/healthz");
            assert!(ok && out == "ok", "{out}");
            // The SubjectAccessReview the stand-in got for alice's /pods.
            let review = api
                .access_reviews()
                .into_iter()
                .find(|s| s["user"] == "alice" && s["resourceAttributes"]["subresource"] == "pods")
                .expect("a review of alice on nodes/pods");
            let attrs = &review["resourceAttributes"];
            assert_eq!(
                (
                    &attrs["verb"],
                    &attrs["resource"],
                    &attrs["version"],
                    &attrs["name"]
                ),
                (
                    &"get".into(),
                    &"nodes".into(),
                    &"v1".into(),
                    &node.name.as_str().into()
                ),
                "{review}"
            );
            assert_eq!(
                review["groups"],
                serde_json::json!(["devs", "system:authenticated"])
            );
            assert_eq!(review["uid"], "uid-alice");
        }
    }
    assert_eq!(checked, 4 * ROWS.len() * PATHS.len());
    assert!(
        mismatches.is_empty(),
        "{} answers differ:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}

/// How many requests of the stand-in's log went to `path`.
fn posts(api: &TestApiServer, path: &str) -> usize {
    api.requests()
        .iter()
        .filter(|r| r.starts_with(&format!("POST {path} ")))
        .count()
}

const TOKENREVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";

#[test]
fn webhook_answers_are_cached_for_their_ttls_and_errors_are_not() {
    let api = scripted_api();
    let mut node = Node::new("kcache");
    let port = start_with_api(
        &mut node,
        &api,
        &[
            "--authorization-mode=Webhook".into(),
            "--anonymous-auth=false".into(),
            "--authentication-token-webhook-cache-ttl=1m".into(),
            "--authorization-webhook-cache-unauthorized-ttl=2s".into(),
        ],
    );
    let reviewed = |token: &str| api.token_reviews().iter().filter(|t| *t == token).count();
    for _ in 0..3 {
        assert_eq!(get(port, "/pods", None, Some("tok-alice")).0, 200);
        assert_eq!(get(port, "/pods", None, Some("tok-refused")).0, 401);
    }
    assert_eq!(reviewed("tok-alice"), 1, "a user is cached");
    assert_eq!(reviewed("tok-refused"), 1, "so is a refusal");
    // pods (no opinion) then proxy (allowed), each asked once.
    assert_eq!(api.access_reviews_of("alice", "pods"), 1);
    assert_eq!(api.access_reviews_of("alice", "proxy"), 1);
    // The "no" on nodes/pods expires after 2 s; the "yes" on proxy stays (5 m).
    wait_for("the denied decision to expire", LONG, || {
        assert_eq!(get(port, "/pods", None, Some("tok-alice")).0, 200);
        (api.access_reviews_of("alice", "pods") == 2).then_some(())
    });
    assert_eq!(api.access_reviews_of("alice", "proxy"), 1);
    assert_eq!(reviewed("tok-alice"), 1);

    // A review that fails is not cached: each request asks again.
    api.set_review_fault(ReviewFault::Error);
    let before = posts(&api, TOKENREVIEWS);
    for _ in 0..2 {
        assert_eq!(get(port, "/pods", None, Some("tok-other")).0, 401);
    }
    assert_eq!(posts(&api, TOKENREVIEWS), before + 2);
    api.set_review_fault(ReviewFault::None);

    // /configz shows the settings in use.
    let (code, body) = get(port, "/configz", None, Some("tok-alice"));
    assert_eq!(code, 200, "{body}");
    let kc: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let kc = &kc["kubeletconfig"];
    assert_eq!(
        kc["authentication"]["webhook"],
        serde_json::json!({"enabled": true, "cacheTTL": "1m0s"})
    );
    assert_eq!(
        kc["authorization"],
        serde_json::json!({"mode": "Webhook",
            "webhook": {"cacheAuthorizedTTL": "5m0s", "cacheUnauthorizedTTL": "2s"}})
    );
    assert!(!node.log().contains("tok-"), "tokens are never logged");
}

#[test]
fn a_hanging_or_stopped_api_server_costs_at_most_one_review_timeout() {
    let pki = Pki::get();
    let mut api = scripted_api();
    let mut node = Node::new("khang");
    let port = start_with_api(&mut node, &api, &["--anonymous-auth=false".into()]);
    assert_eq!(get(port, "/pods", None, Some("tok-alice")).0, 200);

    // Every worker waits on a review that never answers.
    api.set_review_fault(ReviewFault::Hang);
    let before = posts(&api, TOKENREVIEWS);
    let began = Instant::now();
    let hung: Vec<_> = (0..4)
        .map(|i| {
            std::thread::spawn(move || {
                let token = format!("tok-hang-{i}");
                let r = get(port, "/pods", None, Some(&token));
                (r, began.elapsed())
            })
        })
        .collect();
    wait_for("four reviews in flight", LONG, || {
        (posts(&api, TOKENREVIEWS) == before + 4).then_some(())
    });
    // A request that needs no review waits at most for a worker to give up its
    // review (5 s), not for the API server.
    let asked = Instant::now();
    let healthz = get(
        port,
        "/healthz",
        Some((&pki.client_cert, &pki.client_key)),
        None,
    );
    let waited = asked.elapsed();
    assert_eq!(healthz, (200, "ok".to_string()));
    assert!(waited < Duration::from_secs(9), "waited {waited:?}");
    for h in hung {
        let (got, took) = h.join().expect("thread");
        assert_eq!(got, (401, "Unauthorized".to_string()));
        assert!(
            took >= Duration::from_secs(4) && took < Duration::from_secs(15),
            "a review is given up at its 5 s timeout, took {took:?}"
        );
    }
    // Right after, reviews fail at once without asking.
    let asked = Instant::now();
    let reviews = posts(&api, TOKENREVIEWS);
    assert_eq!(get(port, "/pods", None, Some("tok-hang-4")).0, 401);
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(
        posts(&api, TOKENREVIEWS),
        reviews,
        "not asked while unreachable"
    );
    // A cached token is still served.
    assert_eq!(get(port, "/pods", None, Some("tok-alice")).0, 200);
    api.set_review_fault(ReviewFault::None);
    wait_for("reviews to work again", LONG, || {
        (get(port, "/pods", None, Some("tok-mallory")).0 == 200).then_some(())
    });

    // A stopped API server (connection refused): 401 at once, then served again.
    api.stop();
    let asked = Instant::now();
    assert_eq!(get(port, "/healthz", None, Some("tok-stopped")).0, 401);
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "{:?}",
        asked.elapsed()
    );
    api.restart();
    api.set_token_user("tok-late", "alice", &[]);
    wait_for("the restarted API server to review tokens", LONG, || {
        (get(port, "/healthz", None, Some("tok-late")).0 == 200).then_some(())
    });
}

/// The serial of the certificate `openssl s_client` is served on `port`.
fn served_serial(port: u16) -> String {
    let out =
        run(Command::new("openssl").args(["s_client", "-connect", &format!("127.0.0.1:{port}")]));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (Some(begin), Some(end)) = (
        text.find("-----BEGIN CERTIFICATE-----"),
        text.find("-----END CERTIFICATE-----"),
    ) else {
        return String::new();
    };
    let pem = &text[begin..end + "-----END CERTIFICATE-----".len()];
    let mut x509 = Command::new("openssl")
        .args(["x509", "-noout", "-serial"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("openssl x509");
    use std::io::Write;
    x509.stdin
        .take()
        .expect("stdin")
        .write_all(pem.as_bytes())
        .expect("pem");
    let out = x509.wait_with_output().expect("serial");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A serving certificate for 127.0.0.1 signed by the test CA, as `<dir>/<name>.crt`
/// and `.key`.
fn serving_cert(pki: &Pki, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let (crt, key, csr, ext) = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
        dir.join(format!("{name}.csr")),
        dir.join(format!("{name}.ext")),
    );
    std::fs::write(&ext, "subjectAltName=IP:127.0.0.1,DNS:localhost\n").expect("ext");
    let ok = |out: std::process::Output| assert!(out.status.success(), "{out:?}");
    ok(run(Command::new("openssl")
        .args([
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-subj", "/CN=127.0.0.1", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&csr)));
    ok(run(Command::new("openssl")
        .args(["x509", "-req", "-days", "1", "-in"])
        .arg(&csr)
        .arg("-CA")
        .arg(&pki.ca)
        .arg("-CAkey")
        .arg(pki.dir.join("ca.key"))
        .arg("-CAcreateserial")
        .arg("-CAserial")
        .arg(dir.join("ca.srl"))
        .arg("-extfile")
        .arg(&ext)
        .arg("-out")
        .arg(&crt)));
    (crt, key)
}

/// Replaces `to` with `from`'s bytes by a rename, as rotation tools do.
fn replace(from: &Path, to: &Path) {
    let tmp = to.with_extension("tmp");
    std::fs::copy(from, &tmp).expect("copy");
    std::fs::rename(&tmp, to).expect("rename");
}

#[test]
fn rotated_certificate_files_are_served_without_a_restart() {
    let pki = Pki::get();
    let mut node = Node::new("krotate");
    let dir = node.dir.join("certs");
    std::fs::create_dir_all(&dir).expect("dir");
    let (crt, key, ca) = (dir.join("tls.crt"), dir.join("tls.key"), dir.join("ca.crt"));
    replace(&pki.server_cert, &crt);
    replace(&pki.server_key, &key);
    replace(&pki.ca, &ca);
    let flags = [
        format!("--tls-cert-file={}", crt.display()),
        format!("--tls-private-key-file={}", key.display()),
        format!("--client-ca-file={}", ca.display()),
        "--anonymous-auth=false".into(),
        "--authorization-mode=AlwaysAllow".into(),
    ];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let port = start(&mut node, &flags);
    let first = served_serial(port);
    assert!(first.starts_with("serial="), "{first}");

    // A new pair, key first then certificate, each by a rename.
    let (new_crt, new_key) = serving_cert(&pki, &node.dir, "rotated");
    replace(&new_key, &key);
    replace(&new_crt, &crt);
    let second = wait_for("the rotated certificate to be served", LONG, || {
        let s = served_serial(port);
        (s != first && s.starts_with("serial=")).then_some(s)
    });
    let want = run(Command::new("openssl")
        .args(["x509", "-noout", "-serial", "-in"])
        .arg(&new_crt));
    assert_eq!(second, String::from_utf8_lossy(&want.stdout).trim());
    let client = Some((pki.client_cert.as_path(), pki.client_key.as_path()));
    assert_eq!(get(port, "/healthz", client, None), (200, "ok".into()));

    // A broken certificate file: the rotated pair stays, the log says why.
    std::fs::write(dir.join("broken"), "not a certificate").expect("write");
    replace(&dir.join("broken"), &crt);
    wait_for("the bad file to be reported", LONG, || {
        node.log()
            .contains("the previous serving pair stays in use")
            .then_some(())
    });
    assert_eq!(served_serial(port), second);

    // The client CA changes to the other CA: its clients get in, the old ones no longer
    // (401, on the connections and handshakes made after the change).
    let rogue = Some((pki.rogue_cert.as_path(), pki.rogue_key.as_path()));
    let unauthorized = (401, "Unauthorized".to_string());
    assert_eq!(get(port, "/healthz", rogue, None), unauthorized);
    replace(&pki.dir.join("rogue-ca.crt"), &ca);
    wait_for("the new client CA to be used", LONG, || {
        (get(port, "/healthz", rogue, None) == (200, "ok".into())).then_some(())
    });
    assert_eq!(get(port, "/healthz", client, None), unauthorized);
}

/// `openssl s_client` with `args`: whether a handshake finished, and its output.
fn handshake(port: u16, args: &[&str]) -> (bool, String) {
    let out = run(Command::new("openssl")
        .arg("s_client")
        .args(args)
        .args(["-connect", &format!("127.0.0.1:{port}")]));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (
        out.status.success() && text.contains("BEGIN CERTIFICATE"),
        text,
    )
}

#[test]
fn tls_cipher_suites_narrow_tls12_and_an_unknown_name_stops_start_up() {
    let pki = Pki::get();
    let mut node = Node::new("kcipher");
    // The test server key is ECDSA P-256; one TLS 1.2 ECDSA suite, a TLS 1.3 name
    // (taken, changes nothing) and one rustls lacks (left out, with a warning).
    let mut flags = pki_flags(&pki);
    flags.extend([
        "--tls-cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,TLS_AES_128_GCM_SHA256,\
         TLS_RSA_WITH_AES_128_GCM_SHA256"
            .to_string(),
        "--anonymous-auth".into(),
        "--authorization-mode=AlwaysAllow".into(),
    ]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let port = start(&mut node, &flags);
    let (ok, text) = handshake(
        port,
        &["-tls1_2", "-cipher", "ECDHE-ECDSA-AES256-GCM-SHA384"],
    );
    assert!(
        ok && text.contains("ECDHE-ECDSA-AES256-GCM-SHA384"),
        "{text}"
    );
    let (ok, text) = handshake(
        port,
        &["-tls1_2", "-cipher", "ECDHE-ECDSA-AES128-GCM-SHA256"],
    );
    assert!(!ok, "a suite not listed is refused: {text}");
    let (ok, text) = handshake(
        port,
        &["-tls1_2", "-cipher", "ECDHE-ECDSA-CHACHA20-POLY1305"],
    );
    assert!(!ok, "{text}");
    let (ok, text) = handshake(port, &["-tls1_3"]);
    assert!(ok, "TLS 1.3 is not narrowed: {text}");
    let log = node.log();
    assert!(
        log.contains("rustls has no TLS_RSA_WITH_AES_128_GCM_SHA256"),
        "{log}"
    );
    let (code, body) = get(port, "/configz", None, None);
    assert_eq!(code, 200, "{body}");
    let kc: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(
        kc["kubeletconfig"]["tlsCipherSuites"],
        serde_json::json!([
            "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
            "TLS_AES_128_GCM_SHA256",
            "TLS_RSA_WITH_AES_128_GCM_SHA256"
        ])
    );

    // An unknown name: exit 2, the name in the message, nothing started.
    let out = node
        .command(&["--tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA999"])
        .stderr(Stdio::piped())
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA999")
            && stderr.contains("not supported or doesn't exist"),
        "{stderr}"
    );
}
