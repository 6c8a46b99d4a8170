//! TLS bootstrap and client certificate rotation against the API server stand-in:
//! rkubelet started with only a bootstrap kubeconfig (a bootstrap token) files a CSR
//! for `system:node:<node>`, runs its static pods while it waits, and once the test
//! approves it writes the pair and the kubeconfig and talks to the API server as the
//! node; a denied CSR ends it with the reason; a short-lived certificate is rotated
//! without a restart (a refused rotation keeps the current one and asks again) and
//! the node keeps working after the first one expired.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::Value;

use crate::apiserver::{Options, TestApiServer};
use crate::util::{pod_yaml, wait_for, Node, LONG, SLEEPER};

/// The bootstrap token the stand-in accepts (`system:bootstrap:abcdef`).
const TOKEN_ID: &str = "abcdef";
const TOKEN_SECRET: &str = "0123456789abcdef";

/// The files of one bootstrapping node.
struct Paths {
    kubeconfig: PathBuf,
    cert_dir: PathBuf,
}

/// Starts `node` with a static pod, a bootstrap kubeconfig for `api` and a
/// `--kubeconfig` that does not exist yet, plus `extra` flags.
fn start_bootstrapping(node: &mut Node, api: &TestApiServer, extra: &[&str]) -> Paths {
    api.add_bootstrap_token(TOKEN_ID, TOKEN_SECRET);
    let bootstrap = api.kubeconfig(
        &node.dir,
        "bootstrap.kubeconfig",
        &format!("token: {TOKEN_ID}.{TOKEN_SECRET}"),
    );
    let paths = Paths {
        kubeconfig: node.dir.join("etc/kubelet.kubeconfig"),
        cert_dir: node.dir.join("pki"),
    };
    node.write_manifest("static.yaml", &pod_yaml("static", 1, &[("main", SLEEPER)]));
    let mut flags = vec![
        format!("--bootstrap-kubeconfig={}", bootstrap.display()),
        format!("--kubeconfig={}", paths.kubeconfig.display()),
        format!("--cert-dir={}", paths.cert_dir.display()),
    ];
    flags.extend(extra.iter().map(|s| s.to_string()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    node.start(&flags);
    paths
}

/// The CSRs in the stand-in whose name starts with `prefix`.
fn csrs(api: &TestApiServer, prefix: &str) -> Vec<Value> {
    api.list("certificatesigningrequests", None)
        .into_iter()
        .filter(|c| {
            c["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with(prefix))
        })
        .collect()
}

/// Waits for the first CSR whose name starts with `prefix`.
fn wait_for_csr(api: &TestApiServer, prefix: &str) -> Value {
    wait_for("a CSR", LONG, || csrs(api, prefix).into_iter().next())
}

/// `openssl req -noout <args>` of a PEM request.
fn openssl_req(pem: &[u8], args: &[&str]) -> String {
    let mut child = Command::new("openssl")
        .arg("req")
        .arg("-noout")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl");
    use std::io::Write;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(pem)
        .expect("write request");
    let out = child.wait_with_output().expect("openssl output");
    assert!(
        out.status.success(),
        "openssl req {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `openssl x509 -noout <args>` of a PEM file.
fn openssl_x509(file: &Path, args: &[&str]) -> String {
    let out = Command::new("openssl")
        .args(["x509", "-noout", "-in"])
        .arg(file)
        .args(args)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Checks what a CSR asks for: the node's name in `system:nodes`, an ECDSA P-256 key,
/// the kubelet client signer, digital signature and client auth, filed by `user`.
fn check_csr(csr: &Value, node: &Node, user: &str) {
    assert_eq!(
        csr["spec"]["signerName"], "kubernetes.io/kube-apiserver-client-kubelet",
        "{csr}"
    );
    assert_eq!(
        csr["spec"]["usages"],
        serde_json::json!(["digital signature", "client auth"]),
        "{csr}"
    );
    assert_eq!(csr["spec"]["username"], user, "{csr}");
    let pem = base64::engine::general_purpose::STANDARD
        .decode(csr["spec"]["request"].as_str().expect("request"))
        .expect("base64 request");
    let subject = openssl_req(&pem, &["-subject", "-nameopt", "RFC2253"]);
    assert!(
        subject.contains(&format!("CN=system:node:{}", node.name)),
        "{subject}"
    );
    assert!(subject.contains("O=system:nodes"), "{subject}");
    let text = openssl_req(&pem, &["-text", "-verify"]);
    assert!(text.contains("id-ecPublicKey"), "{text}");
    assert!(
        text.contains("prime256v1") || text.contains("P-256"),
        "{text}"
    );
    assert!(text.contains("verify OK"), "{text}");
}

/// The calls the node made as `system:node:<node>` (with its client certificate)
/// that arrived after `since`.
fn calls_as_node(api: &TestApiServer, node: &Node, since: Instant) -> usize {
    let user = format!("system:node:{}", node.name);
    api.calls()
        .iter()
        .filter(|c| c.user == user && c.at > since && c.kind == "pods")
        .count()
}

/// The `kubectl get csr <name>` row (as an administrator), split on whitespace.
fn kubectl_csr_row(api: &TestApiServer, node: &Node, name: &str) -> Vec<String> {
    let admin = api.kubeconfig(&node.dir, "admin.kubeconfig", "token: good-token");
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&admin)
        .args(["--request-timeout=20s", "get", "csr", name])
        .output()
        .expect("kubectl is installed");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "kubectl get csr: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text.lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_else(|| panic!("no row {name} in:\n{text}"))
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// The `kubelet-client-*.pem` files other than the `-current` link, sorted.
fn pair_files(cert_dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(cert_dir)
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    let n = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                    n.starts_with("kubelet-client-2") && n.ends_with(".pem")
                })
                .collect()
        })
        .unwrap_or_default();
    base::sort::sort(&mut v);
    v
}

#[test]
fn bootstrap_files_a_csr_waits_for_approval_and_then_talks_as_the_node() {
    let api = TestApiServer::start(Options::default());
    let mut node = Node::new("boot");
    let t0 = Instant::now();
    let paths = start_bootstrapping(&mut node, &api, &[]);

    let csr = wait_for_csr(&api, "node-csr-");
    let name = csr["metadata"]["name"].as_str().expect("name").to_string();
    check_csr(&csr, &node, &format!("system:bootstrap:{TOKEN_ID}"));
    // Static pods do not wait for the cluster.
    wait_for("the static pod to run while the CSR waits", LONG, || {
        let key = format!("static-{}/main", node.name);
        node.running()
            .get(&key)
            .filter(|v| !v.is_empty())
            .map(|_| ())
    });
    wait_for("the waiting log line", LONG, || {
        node.log()
            .contains(&format!("waiting for CSR {name} to be approved"))
            .then_some(())
    });
    assert!(
        !paths.kubeconfig.exists(),
        "no kubeconfig before the certificate"
    );
    assert_eq!(calls_as_node(&api, &node, t0), 0, "nothing as the node yet");
    // What an administrator sees: NAME AGE SIGNERNAME REQUESTOR REQUESTEDDURATION
    // CONDITION.
    let row = kubectl_csr_row(&api, &node, &name);
    assert_eq!(
        row[2], "kubernetes.io/kube-apiserver-client-kubelet",
        "{row:?}"
    );
    assert_eq!(row[3], format!("system:bootstrap:{TOKEN_ID}"), "{row:?}");
    assert_eq!(row.last().map(String::as_str), Some("Pending"), "{row:?}");

    let approved = Instant::now();
    assert!(api.approve_csr(&name));
    wait_for("the kubeconfig to be written", LONG, || {
        paths.kubeconfig.exists().then_some(())
    });
    let row = kubectl_csr_row(&api, &node, &name);
    assert_eq!(
        row.last().map(String::as_str),
        Some("Approved,Issued"),
        "{row:?}"
    );
    let current = paths.cert_dir.join("kubelet-client-current.pem");
    let target = std::fs::read_link(&current).expect("current is a link");
    let files = pair_files(&paths.cert_dir);
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(paths.cert_dir.join(&target), files[0]);
    let mode = std::fs::metadata(&files[0])
        .expect("stat")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the pair is private");
    let subject = openssl_x509(&current, &["-subject", "-nameopt", "RFC2253"]);
    assert!(
        subject.contains(&format!("CN=system:node:{}", node.name))
            && subject.contains("O=system:nodes"),
        "{subject}"
    );
    assert!(
        !paths.cert_dir.join("kubelet-client.key.tmp").exists(),
        "the bootstrap key is removed once issued"
    );
    let kubeconfig = std::fs::read_to_string(&paths.kubeconfig).expect("kubeconfig");
    assert!(
        // A double-quoted YAML scalar (the path has nothing to escape).
        kubeconfig.contains(&format!("client-certificate: \"{}\"", current.display())),
        "{kubeconfig}"
    );
    assert!(kubeconfig.contains(&api.url()), "{kubeconfig}");

    // The API source lists and watches this node's pods as the node.
    wait_for("pod requests as system:node:<node>", LONG, || {
        (calls_as_node(&api, &node, approved) > 0).then_some(())
    });
    assert!(node.alive(), "{}", node.log());
    assert_eq!(
        csrs(&api, "").len(),
        1,
        "one CSR, no rotation without --rotate-certificates"
    );

    // Restarted, the node uses the kubeconfig it wrote: no new CSR.
    node.kill9();
    let before = node.log().len();
    let restarted = Instant::now();
    node.start(&[
        &format!(
            "--bootstrap-kubeconfig={}",
            node.dir.join("bootstrap.kubeconfig").display()
        ),
        &format!("--kubeconfig={}", paths.kubeconfig.display()),
        &format!("--cert-dir={}", paths.cert_dir.display()),
    ]);
    let deadline = restarted + LONG;
    while calls_as_node(&api, &node, restarted) == 0 {
        assert!(
            Instant::now() < deadline,
            "no pod requests after a restart; log:\n{}",
            node.log()[before..]
                .lines()
                .filter(|l| ["main]", "src-api]", "client-cert]"]
                    .iter()
                    .any(|t| l.contains(t))
                    || l.starts_with('W')
                    || l.starts_with('E'))
                .collect::<Vec<_>>()
                .join("\n")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(csrs(&api, "").len(), 1, "still one CSR: {}", node.log());
}

#[test]
fn a_denied_bootstrap_csr_stops_rkubelet_with_the_reason() {
    let api = TestApiServer::start(Options::default());
    let mut node = Node::new("bootdeny");
    let paths = start_bootstrapping(&mut node, &api, &[]);
    let csr = wait_for_csr(&api, "node-csr-");
    let name = csr["metadata"]["name"].as_str().expect("name").to_string();
    assert!(api.deny_csr(&name));
    let (code, _) = node.wait_exit(LONG);
    assert_eq!(code, Some(1), "exit 1; log:\n{}", node.log());
    let log = node.log();
    assert!(
        log.contains(&format!("certificate signing request {name} is denied")),
        "{log}"
    );
    assert!(!paths.kubeconfig.exists(), "no kubeconfig");
    assert!(pair_files(&paths.cert_dir).is_empty());
}

#[test]
fn a_short_lived_certificate_is_rotated_without_a_restart_after_a_refusal() {
    // Watches end every 5 s, so the node opens new connections (new handshakes) all
    // the time: after the first certificate expired, only the new one gets through.
    let api = TestApiServer::start(Options {
        max_watch: Duration::from_secs(5),
        ..Options::default()
    });
    // Two minutes: the rotation deadline (84-108 s) leaves room for a refused request
    // and its retry before the first certificate expires.
    const LIFETIME: Duration = Duration::from_secs(120);
    const WAIT: Duration = Duration::from_secs(240);
    api.set_csr_lifetime(LIFETIME);
    api.set_csr_auto_approve(true);
    let mut node = Node::new("rotate");
    let paths = start_bootstrapping(&mut node, &api, &["--rotate-certificates"]);
    wait_for("the bootstrap certificate", LONG, || {
        (pair_files(&paths.cert_dir).len() == 1).then_some(())
    });
    api.set_csr_auto_approve(false);
    let first = pair_files(&paths.cert_dir).remove(0);
    let first_serial = openssl_x509(&first, &["-serial"]);

    // At 70-90 % of the lifetime the node asks, with its current certificate. The
    // first request is denied: the node keeps its certificate and asks again.
    let refused = wait_for("the rotation CSR", WAIT, || {
        csrs(&api, "csr-").into_iter().next()
    });
    check_csr(&refused, &node, &format!("system:node:{}", node.name));
    let refused = refused["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_string();
    assert!(api.deny_csr(&refused));
    wait_for("the refusal to be logged", LONG, || {
        node.log()
            .contains(&format!("certificate signing request {refused} is denied"))
            .then_some(())
    });
    assert!(
        node.log().contains("the current one is kept"),
        "{}",
        node.log()
    );
    let retry = wait_for("a second rotation CSR", LONG, || {
        csrs(&api, "csr-")
            .into_iter()
            .find(|c| c["metadata"]["name"] != refused.as_str())
    });
    let retry = retry["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_string();
    assert!(api.approve_csr(&retry));
    wait_for("a rotated certificate", LONG, || {
        (pair_files(&paths.cert_dir).len() == 2).then_some(())
    });
    let current = paths.cert_dir.join("kubelet-client-current.pem");
    let second_serial = openssl_x509(&current, &["-serial"]);
    assert_ne!(first_serial, second_serial, "the link names the new pair");
    wait_for("the rotation log line", LONG, || {
        node.log()
            .contains("client certificate rotated")
            .then_some(())
    });

    // After the first certificate expired (it cannot pass a handshake any more), the
    // node still lists and watches its pods: it uses the new one, and never restarted.
    wait_for("the first certificate to expire", WAIT, || {
        let out = Command::new("openssl")
            .args(["x509", "-noout", "-checkend", "0", "-in"])
            .arg(&first)
            .output()
            .expect("openssl");
        (!out.status.success()).then_some(())
    });
    let expired = Instant::now();
    wait_for(
        "pod requests after the first certificate expired",
        LONG,
        || (calls_as_node(&api, &node, expired) > 0).then_some(()),
    );
    assert!(node.alive(), "{}", node.log());
}
