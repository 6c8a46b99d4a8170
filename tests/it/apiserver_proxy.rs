//! The stand-in API server's pod subresources, proxied to the kubelet as kube-apiserver
//! does it (`pkg/registry/core/pod/strategy.go` `LogLocation`/`streamLocation`/
//! `PortForwardLocation`, `pkg/registry/core/pod/rest/log.go` with the generic
//! `LocationStreamer`, and apimachinery's `UpgradeAwareHandler` for the upgrades):
//!
//! - `GET …/pods/{name}/log`: the container checked (or defaulted to the pod's only
//!   one), `PodLogOptions` re-encoded as the kubelet's query, a fresh GET of
//!   `/containerLogs/{ns}/{pod}/{container}` sent with the stand-in's client
//!   certificate; a 2xx answer is relayed as it comes (head and body), any other
//!   becomes a `Status` (`GenericHttpResponseChecker`).
//! - `GET|POST …/pods/{name}/exec|attach` and `…/portforward`: the URL rewritten to
//!   `/exec/{ns}/{pod}/{container}?…` (`/attach/…`, `/portForward/{ns}/{pod}?port=…`),
//!   the client's other headers kept as they are (`Upgrade`, `Connection`,
//!   `Sec-WebSocket-*`, `X-Stream-Protocol-Version` …) but `Authorization`, which the
//!   API server's authentication removes, then bytes piped both ways until either side
//!   closes: SPDY and WebSocket pass through untouched.
//!
//! The kubelet's serving certificate is not verified, as kube-apiserver without
//! `--kubelet-certificate-authority`. Test code: one thread per proxied connection,
//! one `poll(2)` loop over both TLS ends.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use serde_json::{json, Value};

use super::Pki;

/// A request head as the client sent it, and the bytes that followed it.
#[derive(Debug, Clone)]
pub struct Head {
    /// `GET`, `POST` …
    pub method: String,
    /// The request target (path and query) as sent.
    pub target: String,
    /// Headers in order, names as sent.
    pub headers: Vec<(String, String)>,
    /// Bytes read past the head.
    pub rest: Vec<u8>,
}

impl Head {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The largest head read from a client or a kubelet.
const MAX_HEAD: usize = 1024 * 1024;
/// What is read of a kubelet's error body (`maxReadLength` in upstream's checker).
const MAX_ERROR_BODY: usize = 50 * 1024;
/// Connecting and handshaking with a kubelet.
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// Reads a request or response head from `r`: the head text and what followed it.
pub fn read_head(r: &mut impl Read) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = find(&buf, b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            return Some((String::from_utf8_lossy(&buf).into_owned(), rest));
        }
        if buf.len() > MAX_HEAD {
            return None;
        }
        match r.read(&mut chunk) {
            Ok(0) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
}

/// Parses a request head read by [`read_head`].
pub fn parse_request(text: &str, rest: Vec<u8>) -> Option<Head> {
    let mut lines = text.split("\r\n");
    let mut first = lines.next()?.split_whitespace();
    let method = first.next()?.to_string();
    let target = first.next()?.to_string();
    let headers = lines
        .filter(|l| !l.is_empty())
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    Some(Head {
        method,
        target,
        headers,
        rest,
    })
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The query of a target as (key, value) pairs in order, values unescaped.
pub fn query_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|s| !s.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (super::unescape(k), super::unescape(v))
        })
        .collect()
}

/// Go's `url.QueryEscape`.
pub fn query_escape(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(b))
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Go's `url.Values.Encode`: sorted by key (stable, so one key's values keep their
/// order), both escaped.
fn encode(mut params: Vec<(&str, String)>) -> String {
    base::sort::sort_by(&mut params, |a, b| a.0.cmp(b.0));
    params
        .iter()
        .map(|(k, v)| format!("{}={}", query_escape(k), query_escape(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// The API machinery's string → bool for a query parameter that is present: anything
/// but "false" and "0" is true (an empty value too).
fn truthy(v: &str) -> bool {
    !(v == "0" || v.eq_ignore_ascii_case("false"))
}

/// A `Status` failure object.
pub fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
        "message":message,"reason":reason,"code":code})
}

/// The pod's container names: init, regular, ephemeral (`VisitContainers`' order).
fn container_names(pod: &Value) -> Vec<String> {
    ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .flat_map(|k| pod["spec"][k].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["name"].as_str().map(str::to_string))
        .collect()
}

/// Upstream's `validateContainer`: the named container must exist; without a name the
/// pod's only (regular) container is used. (kubectl applies the
/// `kubectl.kubernetes.io/default-container` annotation itself, before asking.)
fn validate_container(container: &str, pod: &Value) -> Result<String, Value> {
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    if container.is_empty() {
        let regular = pod["spec"]["containers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        return match regular.len() {
            1 => Ok(regular[0]["name"].as_str().unwrap_or_default().to_string()),
            0 => Err(status(
                400,
                "BadRequest",
                &format!("a container name must be specified for pod {name}"),
            )),
            _ => Err(status(
                400,
                "BadRequest",
                &format!(
                    "a container name must be specified for pod {name}, choose one of: [{}]",
                    container_names(pod).join(" ")
                ),
            )),
        };
    }
    if container_names(pod).iter().any(|c| c == container) {
        Ok(container.to_string())
    } else {
        Err(status(
            400,
            "BadRequest",
            &format!("container {container} is not valid for pod {name}"),
        ))
    }
}

/// Where a pod subresource request goes on the kubelet: method, path and query, and
/// whether it is a log request (a fresh GET whose errors become a `Status`) or an
/// upgrade (the client's request, relayed).
#[derive(Debug, PartialEq, Eq)]
pub struct Location {
    /// The kubelet's path and query.
    pub target: String,
    /// `log` (true) or an upgrade.
    pub is_log: bool,
}

/// The kubelet location of `sub` for `pod` (upstream's `*Location` functions), or the
/// `Status` to answer with.
pub fn location(method: &str, sub: &str, query: &str, pod: &Value) -> Result<Location, Value> {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let q = query_pairs(query);
    let get = |k: &str| {
        q.iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let flag = |k: &str| q.iter().any(|(key, _)| key == k) && truthy(&get(k));
    let all = |k: &str| -> Vec<String> {
        q.iter()
            .filter(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
            .collect()
    };
    let allowed = match sub {
        "log" => method == "GET",
        "exec" | "attach" | "portforward" => method == "GET" || method == "POST",
        _ => {
            return Err(status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ))
        }
    };
    if !allowed {
        return Err(status(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        ));
    }
    let mut params: Vec<(&str, String)> = Vec::new();
    let target = match sub {
        "log" => {
            let container = validate_container(&get("container"), pod)?;
            for f in ["follow", "previous", "timestamps"] {
                if flag(f) {
                    params.push((f, "true".to_string()));
                }
            }
            for number in [
                "sinceSeconds",
                "sinceTime",
                "tailLines",
                "limitBytes",
                "stream",
            ] {
                let v = get(number);
                if !v.is_empty() {
                    params.push((number, v));
                }
            }
            format!("/containerLogs/{ns}/{name}/{container}")
        }
        "exec" | "attach" => {
            let container = validate_container(&get("container"), pod)?;
            for f in ["stdin", "stdout", "stderr", "tty"] {
                if flag(f) {
                    params.push((f, "1".to_string()));
                }
            }
            if sub == "exec" {
                for c in all("command") {
                    params.push(("command", c));
                }
            }
            format!("/{sub}/{ns}/{name}/{container}")
        }
        _ => {
            let ports = all("ports").join(",");
            if !ports.is_empty() {
                params.push(("port", ports));
            }
            format!("/portForward/{ns}/{name}")
        }
    };
    if pod["spec"]["nodeName"]
        .as_str()
        .unwrap_or_default()
        .is_empty()
        && sub != "log"
    {
        return Err(status(
            400,
            "BadRequest",
            &format!("pod {name} does not have a host assigned"),
        ));
    }
    let query = encode(params);
    Ok(Location {
        target: if query.is_empty() {
            target
        } else {
            format!("{target}?{query}")
        },
        is_log: sub == "log",
    })
}

/// Accepts any kubelet serving certificate (kube-apiserver without
/// `--kubelet-certificate-authority`), still checking the handshake's signatures.
#[derive(Debug)]
struct AnyServerCert(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyServerCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The stand-in's kubelet client: the test PKI's client certificate (CN
/// `system:node:test`), any serving certificate accepted.
fn kubelet_client_config() -> Arc<rustls::ClientConfig> {
    static CONFIG: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let pki = Pki::get();
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let certs: Vec<CertificateDer<'static>> =
                CertificateDer::pem_file_iter(&pki.client_cert)
                    .expect("client cert")
                    .map(|c| c.expect("cert"))
                    .collect();
            let key = PrivateKeyDer::from_pem_file(&pki.client_key).expect("client key");
            let config = rustls::ClientConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .expect("versions")
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyServerCert(provider)))
                .with_client_auth_cert(certs, key)
                .expect("client config");
            Arc::new(config)
        })
        .clone()
}

type ClientSide = rustls::StreamOwned<rustls::ServerConnection, TcpStream>;
type KubeletSide = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// Connects to the kubelet at `addr` and finishes the TLS handshake.
fn dial(addr: SocketAddr) -> io::Result<KubeletSide> {
    let tcp = TcpStream::connect_timeout(&addr, DIAL_TIMEOUT)?;
    tcp.set_nodelay(true)?;
    tcp.set_read_timeout(Some(DIAL_TIMEOUT))?;
    tcp.set_write_timeout(Some(DIAL_TIMEOUT))?;
    let name = ServerName::IpAddress(addr.ip().into());
    let conn =
        rustls::ClientConnection::new(kubelet_client_config(), name).map_err(io::Error::other)?;
    let mut s = rustls::StreamOwned::new(conn, tcp);
    while s.conn.is_handshaking() {
        s.conn.complete_io(&mut s.sock)?;
    }
    Ok(s)
}

/// Answers `client` with a `Status` and closes.
pub fn respond_status(client: &mut ClientSide, st: &Value) {
    let code = st["code"]
        .as_u64()
        .and_then(|c| u16::try_from(c).ok())
        .unwrap_or(500);
    super::respond(client, code, st);
}

/// Serves one pod subresource request: `head` came from `client`, for `pod`, whose
/// node's kubelet is at `kubelet` (None: the node is unknown). `stopped` ends the pipe.
pub fn serve(
    mut client: ClientSide,
    head: &Head,
    sub: &str,
    pod: &Value,
    kubelet: Option<SocketAddr>,
    stopped: &AtomicBool,
) {
    let query = head.target.split_once('?').map(|(_, q)| q).unwrap_or("");
    let loc = match location(&head.method, sub, query, pod) {
        Ok(loc) => loc,
        Err(st) => return respond_status(&mut client, &st),
    };
    let node = pod["spec"]["nodeName"].as_str().unwrap_or_default();
    if node.is_empty() {
        // LogLocation's empty location: an empty log.
        return super::respond_text(&mut client, 200, "");
    }
    let Some(addr) = kubelet else {
        let st = status(404, "NotFound", &format!("nodes \"{node}\" not found"));
        return respond_status(&mut client, &st);
    };
    let mut kubelet = match dial(addr) {
        Ok(k) => k,
        Err(e) => {
            let st = status(
                500,
                "InternalError",
                &format!("Internal error occurred: dial kubelet {addr}: {e}"),
            );
            return respond_status(&mut client, &st);
        }
    };
    let mut out = format!(
        "{} {} HTTP/1.1\r\nHost: {addr}\r\n",
        head.method, loc.target
    );
    if loc.is_log {
        // The LocationStreamer's own GET: none of the client's headers.
        out.push_str("User-Agent: test-apiserver\r\nConnection: close\r\n\r\n");
    } else {
        let peer = client
            .sock
            .peer_addr()
            .map(|a| a.ip().to_string())
            .unwrap_or_default();
        let mut forwarded = false;
        for (k, v) in &head.headers {
            if k.eq_ignore_ascii_case("host") || k.eq_ignore_ascii_case("authorization") {
                continue;
            }
            if k.eq_ignore_ascii_case("x-forwarded-for") {
                out.push_str(&format!("{k}: {v}, {peer}\r\n"));
                forwarded = true;
                continue;
            }
            out.push_str(&format!("{k}: {v}\r\n"));
        }
        if !forwarded {
            out.push_str(&format!("X-Forwarded-For: {peer}\r\n"));
        }
        out.push_str("\r\n");
    }
    if kubelet.write_all(out.as_bytes()).is_err() || kubelet.flush().is_err() {
        return;
    }
    let mut to_client = Vec::new();
    if loc.is_log {
        let Some((text, rest)) = read_head(&mut kubelet) else {
            let st = status(
                500,
                "InternalError",
                "Internal error occurred: no answer from the kubelet",
            );
            return respond_status(&mut client, &st);
        };
        let code: u16 = text
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        if !(200..=206).contains(&code) {
            let body = read_error_body(&mut kubelet, &text, rest);
            let name = pod["metadata"]["name"].as_str().unwrap_or_default();
            let st = match code {
                500 => status(
                    500,
                    "InternalError",
                    &format!("Internal error occurred: {body}"),
                ),
                400 => status(400, "BadRequest", &body),
                _ => {
                    let mut st = status(
                        code,
                        if code == 404 { "NotFound" } else { "Unknown" },
                        &format!(
                            "the server could not find the requested resource ( pods/log {name})"
                        ),
                    );
                    st["details"] = json!({"name": name, "kind": "pods/log",
                        "causes": [{"reason": "UnexpectedServerResponse", "message": body}]});
                    st
                }
            };
            return respond_status(&mut client, &st);
        }
        to_client.extend_from_slice(text.as_bytes());
        to_client.extend_from_slice(&rest);
    }
    let rustls::StreamOwned {
        conn: cconn,
        sock: csock,
    } = client;
    let rustls::StreamOwned {
        conn: kconn,
        sock: ksock,
    } = kubelet;
    let mut ends = [
        End::new(rustls::Connection::Server(cconn), csock),
        End::new(rustls::Connection::Client(kconn), ksock),
    ];
    // Bytes already due each way: the kubelet's head (log), the client's early bytes.
    if ends[0].conn.writer().write_all(&to_client).is_err()
        || ends[1].conn.writer().write_all(&head.rest).is_err()
    {
        return;
    }
    pipe(&mut ends, stopped);
}

/// The body of a kubelet's error answer (by Content-Length, or up to close), at most
/// [`MAX_ERROR_BODY`] bytes.
fn read_error_body(kubelet: &mut KubeletSide, head: &str, mut body: Vec<u8>) -> String {
    let len = head
        .split("\r\n")
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
        .unwrap_or(MAX_ERROR_BODY)
        .min(MAX_ERROR_BODY);
    let mut chunk = [0u8; 4096];
    while body.len() < len {
        match kubelet.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
        }
    }
    body.truncate(len);
    String::from_utf8_lossy(&body).into_owned()
}

/// One TLS end of a pipe.
struct End {
    conn: rustls::Connection,
    sock: TcpStream,
    /// The peer closed (or failed).
    closed: bool,
}

impl End {
    fn new(conn: rustls::Connection, sock: TcpStream) -> End {
        End {
            conn,
            sock,
            closed: false,
        }
    }

    /// Writes what TLS has queued, as far as the socket takes it. False on failure.
    fn flush(&mut self) -> bool {
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut self.sock) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        true
    }

    /// Reads what the socket has into TLS, as long as TLS takes more (its plaintext
    /// buffer is bounded: past it `read_tls` fails). Marks the end closed on EOF or
    /// failure.
    fn fill(&mut self) {
        while self.conn.wants_read() {
            match self.conn.read_tls(&mut self.sock) {
                Ok(0) => {
                    self.closed = true;
                    return;
                }
                Ok(_) => {
                    if self.conn.process_new_packets().is_err() {
                        self.closed = true;
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.closed = true;
                    return;
                }
            }
        }
    }
}

/// Moves plaintext both ways between the two ends until either closes (then what is
/// left is delivered to the other, for at most 10 s) or `stopped` is set.
fn pipe(ends: &mut [End; 2], stopped: &AtomicBool) {
    for e in ends.iter_mut() {
        if e.sock.set_nonblocking(true).is_err() {
            return;
        }
    }
    // One read must always fit into an empty TLS queue: rustls refuses plaintext
    // beyond its 64 KiB buffer limit (records included), and a `write_all` that
    // hits the limit fails and would end the pipe mid-stream.
    let mut buf = vec![0u8; 16 * 1024];
    let mut closing_since: Option<Instant> = None;
    loop {
        for e in ends.iter_mut() {
            if !e.flush() {
                e.closed = true;
            }
        }
        // Plaintext from one end to the other, only while the other's TLS queue is
        // empty (backpressure: the slower side sets the pace).
        for (from, to) in [(0, 1), (1, 0)] {
            while !ends[to].conn.wants_write() {
                match ends[from].conn.reader().read(&mut buf) {
                    Ok(0) => {
                        ends[from].closed = true;
                        break;
                    }
                    Ok(n) => {
                        if ends[to].conn.writer().write_all(&buf[..n]).is_err() {
                            return;
                        }
                        if !ends[to].flush() {
                            ends[to].closed = true;
                        }
                    }
                    Err(_) => break,
                }
            }
        }
        // Done when one end has closed and everything due to the open ends is out.
        let delivered = ends.iter().all(|e| e.closed || !e.conn.wants_write());
        if ends.iter().any(|e| e.closed) {
            let since = *closing_since.get_or_insert_with(Instant::now);
            if delivered
                || ends.iter().all(|e| e.closed)
                || since.elapsed() > Duration::from_secs(10)
            {
                for e in ends.iter_mut() {
                    e.conn.send_close_notify();
                    let _ = e.flush();
                    let _ = e.sock.shutdown(std::net::Shutdown::Both);
                }
                return;
            }
        }
        if stopped.load(Ordering::SeqCst) {
            return;
        }
        let mut fds: Vec<libc::pollfd> = ends
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let other = &ends[1 - i];
                let mut events = 0;
                if !e.closed && e.conn.wants_read() && !other.conn.wants_write() {
                    events |= libc::POLLIN;
                }
                if e.conn.wants_write() {
                    events |= libc::POLLOUT;
                }
                libc::pollfd {
                    fd: e.sock.as_raw_fd(),
                    events,
                    revents: 0,
                }
            })
            .collect();
        // SAFETY: `fds` is a valid slice of two pollfd structs.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, 200) };
        if n < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        for (i, fd) in fds.iter().enumerate() {
            if fd.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
                ends[i].fill();
            }
        }
    }
}

/// The kubelet addresses by node name.
pub type Kubelets = BTreeMap<String, SocketAddr>;

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(containers: &[&str]) -> Value {
        let cs: Vec<Value> = containers.iter().map(|c| json!({"name": c})).collect();
        json!({"metadata": {"name": "p", "namespace": "ns"},
               "spec": {"nodeName": "n", "containers": cs, "initContainers": [{"name": "init"}]}})
    }

    #[test]
    fn log_location_defaults_the_container_and_sorts_the_query() {
        let loc = location(
            "GET",
            "log",
            "tailLines=3&follow=true&sinceTime=2024-01-01T00%3A00%3A00Z&timestamps=false",
            &pod(&["c"]),
        )
        .expect("location");
        assert_eq!(
            loc.target,
            "/containerLogs/ns/p/c?follow=true&sinceTime=2024-01-01T00%3A00%3A00Z&tailLines=3"
        );
        assert!(loc.is_log);
        let err = location("GET", "log", "", &pod(&["a", "b"])).expect_err("two containers");
        assert_eq!(
            err["message"],
            "a container name must be specified for pod p, choose one of: [init a b]"
        );
        let err = location("GET", "log", "container=x", &pod(&["a"])).expect_err("unknown");
        assert_eq!(err["message"], "container x is not valid for pod p");
        assert_eq!(err["code"], 400);
    }

    #[test]
    fn exec_and_port_forward_locations_as_the_api_server_builds_them() {
        let loc = location(
            "POST",
            "exec",
            "command=sh&command=-c&command=echo+a%20b&container=c&stdin=true&stdout=true&tty=false",
            &pod(&["c", "d"]),
        )
        .expect("location");
        assert_eq!(
            loc.target,
            "/exec/ns/p/c?command=sh&command=-c&command=echo+a+b&stdin=1&stdout=1"
        );
        assert!(!loc.is_log);
        let loc =
            location("GET", "portforward", "ports=80&ports=8080", &pod(&["c"])).expect("location");
        assert_eq!(loc.target, "/portForward/ns/p?port=80%2C8080");
        assert_eq!(
            location("PUT", "log", "", &pod(&["c"])).expect_err("method")["code"],
            405
        );
    }
}
