//! The authenticated kubelet port (`--port`) against real clients: kubectl with a
//! client-certificate kubeconfig, curl with and without certificates, openssl
//! s_client for TLS versions, and raw sockets that start a handshake and never finish
//! it. Certificates come from the openssl CLI ([`Pki`], plus one client certificate
//! with several O values made here).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use std::collections::BTreeSet;

use crate::apiserver::Pki;
use crate::util::{free_port, pod_yaml, wait_for, Node, LONG, SLEEPER};

/// Starts `node` with the kubelet port on a free port and `extra`; waits until the
/// port accepts connections. Returns the port.
pub(crate) fn start(node: &mut Node, extra: &[&str]) -> u16 {
    let port = free_port();
    let port_flag = format!("--port={port}");
    let mut args: Vec<&str> = vec![&port_flag];
    args.extend_from_slice(extra);
    node.start(&args);
    wait_for("the kubelet port to listen", LONG, || {
        TcpStream::connect(("127.0.0.1", port)).ok()
    });
    port
}

/// Flags for a node serving the test PKI's server certificate and trusting its CA.
pub(crate) fn pki_flags(pki: &Pki) -> Vec<String> {
    vec![
        format!("--tls-cert-file={}", pki.server_cert.display()),
        format!("--tls-private-key-file={}", pki.server_key.display()),
        format!("--client-ca-file={}", pki.ca.display()),
    ]
}

pub(crate) fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).output().expect("run client")
}

/// `curl -sk` (optionally with a client certificate): (HTTP status, body), or the
/// status 0 when no HTTP answer came (handshake refused).
fn curl(port: u16, path: &str, cert: Option<(&Path, &Path)>) -> (u16, String) {
    let mut c = Command::new("curl");
    c.args(["-sk", "--max-time", "10", "-w", "\n%{http_code}"]);
    if let Some((crt, key)) = cert {
        c.arg("--cert").arg(crt).arg("--key").arg(key);
    }
    c.arg(format!("https://127.0.0.1:{port}{path}"));
    let out = run(&mut c);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// A kubeconfig for `https://127.0.0.1:port` with a client certificate.
fn kubeconfig(dir: &Path, port: u16, ca: &Path, crt: &Path, key: &Path) -> PathBuf {
    let path = dir.join("client.kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: node\n  cluster:\n    server: \
         https://127.0.0.1:{port}\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n    \
         client-certificate: {}\n    client-key: {}\ncontexts:\n- name: c\n  context: {{cluster: \
         node, user: u}}\ncurrent-context: c\n",
        ca.display(),
        crt.display(),
        key.display()
    );
    std::fs::write(&path, text).expect("kubeconfig");
    path
}

pub(crate) fn kubectl_raw(kubeconfig: &Path, path: &str) -> (bool, String) {
    let out = run(Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["get", "--raw", path]));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// `openssl s_client` with `version` (`-tls1_1`, `-tls1_3`): whether a handshake
/// finished, and its output.
fn s_client(port: u16, version: &str) -> (bool, String) {
    let out = run(Command::new("openssl").args([
        "s_client",
        version,
        "-connect",
        &format!("127.0.0.1:{port}"),
    ]));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let ok = out.status.success() && text.contains("BEGIN CERTIFICATE");
    (ok, text)
}

/// A client certificate signed by the test CA with CN `admin` and two O values.
fn admin_cert(pki: &Pki, dir: &Path) -> (PathBuf, PathBuf) {
    client_cert(pki, dir, "admin", "/CN=admin/O=system:masters/O=ops")
}

/// A client certificate signed by the test CA with subject `subj`, as
/// `<dir>/<name>.crt` and `.key`.
pub(crate) fn client_cert(pki: &Pki, dir: &Path, name: &str, subj: &str) -> (PathBuf, PathBuf) {
    let (crt, key, csr) = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
        dir.join(format!("{name}.csr")),
    );
    let ext = dir.join(format!("{name}.ext"));
    std::fs::write(&ext, "extendedKeyUsage=clientAuth\n").expect("ext");
    let ok = |out: Output| assert!(out.status.success(), "{out:?}");
    ok(run(Command::new("openssl")
        .args([
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ])
        .args(["-subj", subj, "-keyout"])
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

#[test]
fn kubectl_with_a_client_certificate_reads_pods_healthz_and_configz() {
    let pki = Pki::get();
    let mut node = Node::new("kport");
    let mut flags = pki_flags(&pki);
    flags.push("--anonymous-auth=false".into());
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let port = start(&mut node, &flags);
    let kc = kubeconfig(&node.dir, port, &pki.ca, &pki.client_cert, &pki.client_key);

    let (ok, pods) = kubectl_raw(&kc, "/pods");
    assert!(ok, "kubectl get --raw /pods: {pods}");
    let pods: serde_json::Value = serde_json::from_str(&pods).expect("JSON");
    assert_eq!(pods["kind"], "PodList");
    assert_eq!(pods, node.pods(), "the read-only port's JSON");
    let (ok, health) = kubectl_raw(&kc, "/healthz");
    assert!(ok && health == "ok", "{health}");
    let (ok, sub) = kubectl_raw(&kc, "/healthz/ping");
    assert!(ok && sub == "ok", "{sub}");
    let (ok, configz) = kubectl_raw(&kc, "/configz");
    assert!(ok, "{configz}");
    let configz: serde_json::Value = serde_json::from_str(&configz).expect("JSON");
    let kcfg = &configz["kubeletconfig"];
    assert_eq!(kcfg["port"], port);
    assert_eq!(kcfg["authentication"]["anonymous"]["enabled"], false);
    assert_eq!(kcfg["authorization"]["mode"], "AlwaysAllow");
    assert_eq!(kcfg["syncFrequency"], "1m0s");
    assert_eq!(
        kcfg["tlsCertFile"],
        pki.server_cert.display().to_string().as_str()
    );
    let (ok, metrics) = kubectl_raw(&kc, "/metrics");
    assert!(
        ok && metrics.contains("# TYPE kubelet_running_pods gauge\nkubelet_running_pods 0\n"),
        "{metrics}"
    );
    let (ok, missing) = kubectl_raw(&kc, "/exec/ns/p/c");
    assert!(!ok && missing.contains("NotFound"), "{missing}");

    // Without a certificate: 401, whatever the Authorization header says.
    assert_eq!(curl(port, "/pods", None), (401, "Unauthorized".to_string()));
    let out = run(Command::new("curl")
        .args(["-sk", "-o", "/dev/null", "-w", "%{http_code}"])
        .args(["-H", "Authorization: Bearer some-token"])
        .arg(format!("https://127.0.0.1:{port}/pods")));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "401");
    // A certificate from another CA: 401 after the handshake, as upstream.
    let got = curl(port, "/pods", Some((&pki.rogue_cert, &pki.rogue_key)));
    assert_eq!(
        got,
        (401, "Unauthorized".to_string()),
        "a rogue certificate is a failed credential"
    );
    // CN is the user, every O a group.
    let (crt, key) = admin_cert(&pki, &node.dir);
    let (code, body) = curl(port, "/healthz", Some((&crt, &key)));
    assert_eq!((code, body.as_str()), (200, "ok"));
    wait_for("the request's attributes in the log", LONG, || {
        node.log()
            .contains("user=admin groups=[\"system:masters\", \"ops\", \"system:authenticated\"] verb=get resource=nodes")
            .then_some(())
    });

    // TLS versions: 1.1 refused, 1.3 served.
    let (ok, text) = s_client(port, "-tls1_1");
    assert!(!ok, "TLS 1.1 must be refused: {text}");
    let (ok, text) = s_client(port, "-tls1_3");
    assert!(ok, "TLS 1.3: {text}");
}

#[test]
fn anonymous_requests_pass_with_anonymous_auth_and_the_self_signed_pair_is_reused() {
    let mut node = Node::new("kanon");
    let flags = ["--anonymous-auth=true", "--authorization-mode=AlwaysAllow"];
    let port = start(&mut node, &flags);
    assert_eq!(curl(port, "/healthz", None), (200, "ok".to_string()));
    let (code, body) = curl(port, "/pods", None);
    assert_eq!(code, 200, "{body}");
    let (ok, first) = s_client(port, "-tls1_2");
    assert!(ok, "{first}");
    let pki = node.dir.join("root").join("pki");
    let on_disk = std::fs::read_to_string(pki.join("kubelet.crt")).expect("kubelet.crt");
    let served = |text: &str| {
        let begin = text
            .find("-----BEGIN CERTIFICATE-----")
            .expect("a certificate");
        let end = text.find("-----END CERTIFICATE-----").expect("its end");
        text[begin..end].to_string()
    };
    assert!(
        on_disk.contains(&served(&first)),
        "the generated pair is served"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(pki.join("kubelet.key"))
        .expect("kubelet.key")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    // Restarted with TLS 1.3 as the minimum: the same pair, 1.2 refused.
    node.signal(libc::SIGTERM);
    node.wait_exit(LONG);
    let port = start(
        &mut node,
        &[flags[0], flags[1], "--tls-min-version=VersionTLS13"],
    );
    let (ok, text) = s_client(port, "-tls1_2");
    assert!(!ok, "TLS 1.2 is below --tls-min-version: {text}");
    let (ok, second) = s_client(port, "-tls1_3");
    assert!(ok, "{second}");
    assert_eq!(
        served(&first),
        served(&second),
        "the same certificate after a restart"
    );
}

/// `GET path` over the test's own rustls client (trusting the test CA) presenting
/// `crt`/`key`: (HTTP status, body); the error when the handshake or request fails.
fn rustls_get(port: u16, path: &str, crt: &Path, key: &Path) -> Result<(u16, String), String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    let pki = Pki::get();
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(&pki.ca).expect("ca") {
        roots.add(c.expect("ca cert")).expect("add");
    }
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(crt)
        .expect("cert")
        .map(|c| c.expect("cert"))
        .collect();
    let key = PrivateKeyDer::from_pem_file(key).expect("key");
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_client_auth_cert(chain, key)
    .expect("client config");
    let name = ServerName::try_from("127.0.0.1").expect("name");
    let conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name)
        .map_err(|e| e.to_string())?;
    let tcp = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    write!(
        tls,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("handshake or request: {e}"))?;
    let mut out = Vec::new();
    if let Err(e) = tls.read_to_end(&mut out) {
        if out.is_empty() {
            return Err(format!("no answer: {e}"));
        }
    }
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no status line: {text:?}"))?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    Ok((status, body.to_string()))
}

/// Upstream's kubelet asks for a client certificate without requiring one to verify
/// during the handshake (Go's `RequestClientCert`), then its x509 authenticator
/// verifies the chain: a certificate from another CA is answered 401, anonymous
/// requests allowed or not, and the right CA's certificate is still let in.
#[test]
fn a_certificate_from_another_ca_is_answered_401_not_refused_at_the_handshake() {
    let pki = Pki::get();
    for anonymous in [false, true] {
        let mut node = Node::new("kotherca");
        let mut flags = pki_flags(&pki);
        flags.push(format!("--anonymous-auth={anonymous}"));
        flags.push("--authorization-mode=AlwaysAllow".into());
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let port = start(&mut node, &flags);
        let rogue = (pki.rogue_cert.as_path(), pki.rogue_key.as_path());
        let ours = (pki.client_cert.as_path(), pki.client_key.as_path());

        assert_eq!(
            curl(port, "/pods", Some(rogue)),
            (401, "Unauthorized".to_string()),
            "anonymous={anonymous}: curl with a certificate from another CA"
        );
        assert_eq!(
            rustls_get(port, "/pods", rogue.0, rogue.1).map(|(code, _)| code),
            Ok(401),
            "anonymous={anonymous}: a rustls client with a certificate from another CA"
        );
        let (code, body) = curl(port, "/pods", Some(ours));
        assert_eq!(
            code, 200,
            "anonymous={anonymous}: the client CA's certificate: {body}"
        );
        let got = rustls_get(port, "/pods", ours.0, ours.1);
        assert!(
            matches!(&got, Ok((200, body)) if body.contains("PodList")),
            "anonymous={anonymous}: {got:?}"
        );
        // Without a certificate: anonymous, or 401, as before.
        let want = if anonymous { 200 } else { 401 };
        assert_eq!(curl(port, "/pods", None).0, want, "anonymous={anonymous}");
        // Why, in the log, naming the certificate's subject.
        wait_for("the refused certificate in the log", LONG, || {
            node.log()
                .lines()
                .any(|l| l.contains("CN=system:node:rogue") && l.contains("did not verify"))
                .then_some(())
        });
    }
    // The client CA's subject is offered as a hint (openssl lists it).
    let mut node = Node::new("kothercah");
    let flags = pki_flags(&pki);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let port = start(&mut node, &flags);
    let out =
        run(Command::new("openssl").args(["s_client", "-connect", &format!("127.0.0.1:{port}")]));
    let text = String::from_utf8_lossy(&out.stdout);
    let names = text
        .split("Acceptable client certificate CA names")
        .nth(1)
        .unwrap_or("");
    assert!(
        names.trim_start().starts_with("CN = ca") || names.contains("CN=ca"),
        "{text}"
    );
}

#[test]
fn a_tls_handshake_that_never_finishes_is_closed_at_the_header_timeout() {
    let pki = Pki::get();
    let mut node = Node::new("kslow");
    let flags = pki_flags(&pki);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let port = start(&mut node, &flags);
    let silent = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let mut partial = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    // The first bytes of a ClientHello record announcing 512 bytes, then nothing.
    partial
        .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01])
        .expect("write");
    let opened = Instant::now();
    // Meanwhile the port answers others at once.
    let kc = kubeconfig(&node.dir, port, &pki.ca, &pki.client_cert, &pki.client_key);
    let asked = Instant::now();
    let (ok, health) = kubectl_raw(&kc, "/healthz");
    assert!(ok && health == "ok", "{health}");
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "{:?}",
        asked.elapsed()
    );
    for mut s in [silent, partial] {
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        let mut buf = [0u8; 64];
        let closed = match s.read(&mut buf) {
            Ok(0) => true,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
            Ok(_) => false,
        };
        assert!(closed, "closed by the server, not answered");
    }
    let took = opened.elapsed();
    assert!(
        took >= Duration::from_secs(9) && took < Duration::from_secs(25),
        "closed at the 10 s header timeout, took {took:?}"
    );
}

#[test]
fn webhook_authorization_without_a_kubeconfig_leaves_the_port_unserved_and_the_node_running() {
    let mut node = Node::new("kwebhook");
    let port = free_port();
    node.start(&[&format!("--port={port}"), "--authorization-mode=Webhook"]);
    // Fail closed: nothing answers on the port, the rest of the kubelet runs.
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the port must not be served without an authorizer"
    );
    assert_eq!(node.healthz_get("/healthz/ping").0, 200);
    let log = node.log();
    assert!(
        log.contains("authorization mode Webhook needs the API server of --kubeconfig")
            && log.contains("is not served"),
        "{log}"
    );
}

/// The TCP ports process `pid` listens on: its sockets' inodes, looked up among the
/// listening entries (state 0A) of `/proc/net/tcp` and `tcp6`.
fn listening_ports(pid: u32) -> BTreeSet<u16> {
    let inodes: BTreeSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("the process's descriptors")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|link| {
            let link = link.to_str()?;
            Some(
                link.strip_prefix("socket:[")?
                    .strip_suffix(']')?
                    .to_string(),
            )
        })
        .collect();
    let mut ports = BTreeSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() > 9 && f[3] == "0A" && inodes.contains(f[9]) {
                let port = f[1].rsplit(':').next();
                ports.extend(port.and_then(|p| u16::from_str_radix(p, 16).ok()));
            }
        }
    }
    ports
}

/// `--config` naming the shipped KubeletConfiguration (the unit's
/// `/etc/rkubelet/config.yaml`).
fn shipped_config() -> String {
    format!(
        "--config={}/systemd/config.yaml",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// `curl -sk -X POST` (optionally with a client certificate): (status, body).
fn curl_post(port: u16, path: &str, cert: Option<(&Path, &Path)>) -> (u16, String) {
    let mut c = Command::new("curl");
    c.args([
        "-sk",
        "-X",
        "POST",
        "--max-time",
        "30",
        "-w",
        "\n%{http_code}",
    ]);
    if let Some((crt, key)) = cert {
        c.arg("--cert").arg(crt).arg("--key").arg(key);
    }
    c.arg(format!("https://127.0.0.1:{port}{path}"));
    let out = run(&mut c);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

#[test]
fn the_shipped_config_refuses_anonymous_requests_and_serves_no_read_only_port() {
    // As the unit runs it, with no --kubeconfig: no read-only port (no flag given
    // here), and 10250 fails closed, unserved, while the node runs.
    let mut node = Node::new("kshipped");
    node.ro_port = 0;
    let port = free_port();
    node.start(&[&shipped_config(), &format!("--port={port}")]);
    assert_eq!(
        listening_ports(node.pid()),
        BTreeSet::from([node.healthz_port]),
        "healthz only: {}",
        node.log()
    );
    let log = node.log();
    assert!(
        log.contains("needs the API server of --kubeconfig") && log.contains("is not served"),
        "{log}"
    );
    drop(node);

    // A standalone node's overrides (`make run`'s, the README's "Standalone nodes"),
    // with hack/run-pki.sh's CA and client certificate.
    let mut node = Node::new("kstandalone");
    node.ro_port = 0;
    let pki = node.dir.join("pki");
    let made = run(Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/hack/run-pki.sh")).arg(&pki));
    assert!(made.status.success(), "hack/run-pki.sh: {made:?}");
    node.write_manifest("shell.yaml", &pod_yaml("shell", 1, &[("c", SLEEPER)]));
    let ca = format!("--client-ca-file={}", pki.join("ca.crt").display());
    let port = start(
        &mut node,
        &[
            &shipped_config(),
            &ca,
            "--authentication-token-webhook=false",
            "--authorization-mode=AlwaysAllow",
        ],
    );
    assert_eq!(
        listening_ports(node.pid()),
        BTreeSet::from([node.healthz_port, port]),
        "no read-only port"
    );
    let pod = format!("shell-{}", node.name);
    wait_for("the pod to run", LONG, || {
        node.running()
            .contains_key(&format!("{pod}/c"))
            .then_some(())
    });
    let run_id = format!("/run/default/{pod}/c?cmd=id");
    // Anonymous: 401 for everything, exec included.
    assert_eq!(curl(port, "/pods", None), (401, "Unauthorized".to_string()));
    assert_eq!(
        curl_post(port, &run_id, None),
        (401, "Unauthorized".to_string())
    );
    // The client certificate of the configured CA is let in.
    let (crt, key) = (pki.join("client.crt"), pki.join("client.key"));
    let cert = Some((crt.as_path(), key.as_path()));
    let (code, pods) = curl(port, "/pods", cert);
    assert_eq!(code, 200, "{pods}");
    assert!(pods.contains(&pod), "{pods}");
    let (code, id) = curl_post(port, &run_id, cert);
    assert!(code == 200 && id.starts_with("uid=0 "), "{code} {id}");
    let (code, configz) = curl(port, "/configz", cert);
    assert_eq!(code, 200, "{configz}");
    let configz: serde_json::Value = serde_json::from_str(&configz).expect("JSON");
    let kcfg = &configz["kubeletconfig"];
    assert_eq!(kcfg["readOnlyPort"], 0);
    assert_eq!(kcfg["authentication"]["anonymous"]["enabled"], false);
    assert_eq!(kcfg["authentication"]["webhook"]["enabled"], false);
    assert_eq!(kcfg["authorization"]["mode"], "AlwaysAllow");
}

/// Sends `request` over TLS (no client certificate, no verification: the port runs
/// with anonymous auth) from python3's ssl module, a client that is not ours, and
/// returns the answer's status line ("" if the connection closed without one).
fn tls_exchange(port: u16, request: &[u8]) -> String {
    let script = "import socket, ssl, sys\n\
        ctx = ssl.create_default_context(); ctx.check_hostname = False\n\
        ctx.verify_mode = ssl.CERT_NONE\n\
        s = ctx.wrap_socket(socket.create_connection(('127.0.0.1', int(sys.argv[1]))),\n\
            server_hostname='localhost')\n\
        s.settimeout(60)\n\
        try:\n    s.sendall(sys.stdin.buffer.read())\n\
        except OSError:\n    pass\n\
        out = b''\n\
        while True:\n\
        \x20   try:\n\
        \x20       b = s.recv(65536)\n\
        \x20   except OSError:\n\
        \x20       break\n\
        \x20   if not b:\n\
        \x20       break\n\
        \x20   out += b\n\
        print(out.split(b'\\r\\n')[0].decode())\n";
    let mut child = Command::new("python3")
        .args(["-c", script, &port.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(request).expect("request to python3");
    }
    let out = child.wait_with_output().expect("python3");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `/healthz` over TLS answers within one second at least once in three tries (each
/// try is cut at 1 s by curl itself), so a loaded machine's hiccup is not a failure
/// but a port that is held up is.
fn healthz_answers_within_a_second(port: u16) {
    let tries: Vec<String> = (0..3)
        .map(|_| {
            let out = run(Command::new("curl").args([
                "-sk",
                "-m",
                "1",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                &format!("https://127.0.0.1:{port}/healthz"),
            ]));
            String::from_utf8_lossy(&out.stdout).into_owned()
        })
        .collect();
    assert!(tries.iter().any(|c| c == "200"), "/healthz: {tries:?}");
}

#[test]
fn bad_input_on_the_kubelet_port_gets_its_error_and_healthz_stays_fast() {
    let pki = Pki::get();
    let mut node = Node::new("kbad");
    let flags = pki_flags(&pki);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let port = start(&mut node, &flags);
    // 1000 connections that go silent before their handshake.
    let flood = crate::servers::silent_connections(port, 1000);
    assert!(flood.len() >= 900, "only {} connections made", flood.len());
    healthz_answers_within_a_second(port);
    // A head over the 1 MiB cap: 431, never read whole.
    let mut big = b"GET /pods HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
    big.extend(std::iter::repeat_n(b'a', 2 * 1024 * 1024));
    big.extend_from_slice(b"\r\n\r\n");
    let status = tls_exchange(port, &big);
    assert!(
        status.starts_with("HTTP/1.1 431 "),
        "2 MiB head: {status:?}"
    );
    healthz_answers_within_a_second(port);
    // An unterminated head: 408 at the 10 s header timeout, meanwhile others served.
    let unterminated = std::thread::spawn(move || {
        let began = Instant::now();
        let status = tls_exchange(port, b"GET /pods HTTP/1.1\r\nHost: x\r\n");
        (status, began.elapsed())
    });
    std::thread::sleep(Duration::from_secs(2));
    healthz_answers_within_a_second(port);
    let (status, took) = unterminated.join().expect("unterminated request");
    assert!(
        status.starts_with("HTTP/1.1 408 "),
        "unterminated: {status:?}"
    );
    assert!(took >= Duration::from_secs(9), "408 after {took:?}");
    // An escape by an encoded `..` is cleaned, never served from outside.
    let (code, _) = curl(port, "/logs/%2e%2e/%2e%2e/etc/passwd", None);
    assert!(code == 404 || code == 301 || code == 400, "%2e%2e: {code}");
    drop(flood);
    healthz_answers_within_a_second(port);
    assert!(node.alive(), "rkubelet died: {}", node.log());
}
