//! A real etcd server for the tests (Debian's `etcd-server`, 3.4): one per test, on
//! free loopback ports with its own data directory, spoken to through its v3 JSON
//! gateway. Stopped and its directory removed on drop.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::ByteString;
use serde_json::{json, Value};

use crate::util::{free_port, unique, wait_for};

/// The etcd binary.
pub const ETCD: &str = "/usr/bin/etcd";

/// A running etcd.
pub struct Etcd {
    /// The client URL, e.g. `http://127.0.0.1:40123`.
    pub url: String,
    client_port: u16,
    peer_port: u16,
    dir: PathBuf,
    child: Option<Child>,
    agent: ureq::Agent,
    /// TLS flags of the server, when it serves https.
    tls_args: Vec<String>,
}

fn b64(s: &[u8]) -> Value {
    serde_json::to_value(ByteString(s.to_vec())).expect("base64")
}

impl Etcd {
    /// Starts a fresh etcd and waits until it answers.
    pub fn start() -> Etcd {
        Self::start_with(None)
    }

    /// Starts a fresh etcd serving https with the test CA's server certificate and
    /// requiring a client certificate signed by that CA.
    pub fn start_tls(pki: &crate::apiserver::Pki) -> Etcd {
        Self::start_with(Some(pki))
    }

    fn start_with(pki: Option<&crate::apiserver::Pki>) -> Etcd {
        assert!(
            std::path::Path::new(ETCD).exists(),
            "{ETCD} is missing: install Debian's etcd-server (apt-get install -y etcd-server; \
             .ci/run does it)"
        );
        let dir = std::env::temp_dir().join(format!("rkubelet-etcd-{}", unique("e")));
        std::fs::create_dir_all(&dir).expect("etcd dir");
        let mut config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .proxy(None)
            .timeout_global(Some(Duration::from_secs(10)));
        let mut tls_args = Vec::new();
        let mut scheme = "http";
        if let Some(pki) = pki {
            let read = |p: &std::path::Path| Some(std::fs::read(p).expect("pem"));
            let settings = base::httpclient::servers::TlsSettings {
                ca_pem: read(&pki.ca),
                cert_pem: read(&pki.client_cert),
                key_pem: read(&pki.client_key),
                insecure: false,
            };
            config = config
                .tls_config(base::httpclient::servers::tls_config(&settings).expect("tls config"));
            for (flag, path) in [
                ("--cert-file", &pki.server_cert),
                ("--key-file", &pki.server_key),
                ("--trusted-ca-file", &pki.ca),
            ] {
                tls_args.push(format!("{flag}={}", path.display()));
            }
            tls_args.push("--client-cert-auth".into());
            scheme = "https";
        }
        let client_port = free_port();
        let mut e = Etcd {
            url: format!("{scheme}://127.0.0.1:{client_port}"),
            client_port,
            peer_port: free_port(),
            dir,
            child: None,
            agent: ureq::Agent::new_with_config(config.build()),
            tls_args,
        };
        e.run();
        e
    }

    fn run(&mut self) {
        let p = self.peer_port;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("etcd.log"))
            .expect("etcd log");
        let child = Command::new(ETCD)
            .args([
                "--name",
                "t",
                "--data-dir",
                &self.dir.join("data").display().to_string(),
                "--listen-client-urls",
                &self.url,
                "--advertise-client-urls",
                &self.url,
                "--listen-peer-urls",
                &format!("http://127.0.0.1:{p}"),
                "--initial-advertise-peer-urls",
                &format!("http://127.0.0.1:{p}"),
                "--initial-cluster",
                &format!("t=http://127.0.0.1:{p}"),
            ])
            .args(&self.tls_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn etcd");
        self.child = Some(child);
        wait_for("etcd to answer", Duration::from_secs(60), || {
            self.post("/v3/kv/range", &json!({"key": b64(b"/")})).ok()
        });
    }

    /// Kills etcd (SIGKILL), keeping its data.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops it (SIGKILL), then runs `change` against the same data served on another
    /// client port, which nobody watching [`Etcd::url`] knows: to them etcd is away
    /// while its data changes. Stopped again afterwards; [`Etcd::restart`] brings it
    /// back on its own port with whatever `change` did (compactions included).
    pub fn change_while_away(&mut self, change: impl FnOnce(&Etcd)) {
        self.stop();
        let scheme = self.url.split_once("://").map_or("http", |(s, _)| s);
        let client_port = free_port();
        let mut aside = Etcd {
            url: format!("{scheme}://127.0.0.1:{client_port}"),
            client_port,
            peer_port: self.peer_port,
            dir: self.dir.clone(),
            child: None,
            agent: self.agent.clone(),
            tls_args: self.tls_args.clone(),
        };
        aside.run();
        change(&aside);
        aside.stop();
        // The data directory is this etcd's: the stand-in must not remove it.
        std::mem::forget(aside);
    }

    /// Starts it again on the same ports and data.
    pub fn restart(&mut self) {
        self.stop();
        self.run();
    }

    fn post(&self, path: &str, body: &Value) -> Result<Value, String> {
        let mut resp = self
            .agent
            .post(&format!("{}{path}", self.url))
            .header("Content-Type", "application/json")
            .send(body.to_string())
            .map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let text = resp
            .body_mut()
            .read_to_string()
            .map_err(|e| e.to_string())?;
        if status != 200 {
            return Err(format!("{path}: {status}: {text}"));
        }
        serde_json::from_str(&text).map_err(|e| e.to_string())
    }

    /// Puts a key; returns the new revision.
    pub fn put(&self, key: &str, value: &str) -> i64 {
        let r = self
            .post(
                "/v3/kv/put",
                &json!({"key": b64(key.as_bytes()), "value": b64(value.as_bytes())}),
            )
            .expect("put");
        r["header"]["revision"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .expect("revision")
    }

    /// Deletes a key.
    pub fn delete(&self, key: &str) {
        self.post("/v3/kv/deleterange", &json!({"key": b64(key.as_bytes())}))
            .expect("delete");
    }

    /// Compacts the history up to the current revision.
    pub fn compact(&self) {
        let rev = self.revision();
        self.post(
            "/v3/kv/compaction",
            &json!({"revision": rev.to_string(), "physical": true}),
        )
        .expect("compact");
    }

    /// The current revision.
    pub fn revision(&self) -> i64 {
        let r = self
            .post("/v3/kv/range", &json!({"key": b64(b"/")}))
            .expect("range");
        r["header"]["revision"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .expect("revision")
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
