//! Exec credential plugins (kubeconfig `users[].user.exec`): a child process that
//! prints an `ExecCredential` (`client.authentication.k8s.io/v1` or `v1beta1`) with a
//! bearer token and/or a client certificate. Mirrors client-go's
//! `plugin/pkg/client/auth/exec` (`Authenticator.refreshCredsLocked`): the request is
//! passed in `KUBERNETES_EXEC_INFO`, stdin is closed (rkubelet is never interactive),
//! stderr goes to our log, and the answer is cached until its `expirationTimestamp`
//! (or until the server answers 401).
//!
//! The plugin runs with a deadline ([`EXEC_TIMEOUT`]) in a process group of its own
//! (`base::process::run_with_deadline`): past the deadline it and what it started are
//! killed. No thread is started for it.

use std::fmt;
use std::process::Command;
use std::time::{Duration, SystemTime};

use base::process::{run_with_deadline, RunError};
use serde::Deserialize;

/// The longest a credential plugin may run: client-go gives no limit, but a kubelet
/// whose source thread hangs on a stuck plugin would stop seeing pod changes.
pub(crate) const EXEC_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest plugin answer read; a credential is a few KB.
const MAX_OUTPUT: u64 = 1024 * 1024;

/// The `exec` stanza of a kubeconfig user.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct ExecConfig {
    /// `client.authentication.k8s.io/v1` or `/v1beta1`.
    #[serde(rename = "apiVersion", default)]
    pub api_version: String,
    /// The program: a path, or a name looked up on PATH.
    pub command: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra environment variables.
    #[serde(default)]
    pub env: Vec<EnvVar>,
    /// Shown when the command is not found.
    #[serde(rename = "installHint", default)]
    pub install_hint: Option<String>,
}

/// One environment variable of a plugin.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct EnvVar {
    /// Name.
    pub name: String,
    /// Value.
    pub value: String,
}

/// What a plugin gave.
#[derive(Clone, Default, PartialEq)]
pub(crate) struct Credential {
    /// A bearer token.
    pub token: Option<String>,
    /// A client certificate (PEM).
    pub cert_pem: Option<Vec<u8>>,
    /// Its key (PEM).
    pub key_pem: Option<Vec<u8>>,
    /// When to run the plugin again; None: keep it until the server refuses it.
    pub expires: Option<SystemTime>,
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credential")
            .field("token", &self.token.is_some())
            .field("cert", &self.cert_pem.is_some())
            .field("expires", &self.expires)
            .finish()
    }
}

impl Credential {
    /// True while the credential may still be used at `now`.
    pub(crate) fn fresh(&self, now: SystemTime) -> bool {
        self.expires.is_none_or(|t| now < t)
    }
}

/// Why a plugin gave no credential. The message names the command.
#[derive(Debug, thiserror::Error)]
#[error("exec credential plugin {command:?}: {reason}")]
pub struct ExecError {
    /// The plugin's command.
    pub command: String,
    /// What went wrong.
    pub reason: String,
}

#[derive(Deserialize)]
struct ExecCredential {
    #[serde(rename = "apiVersion", default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    status: Option<ExecStatus>,
}

#[derive(Deserialize)]
struct ExecStatus {
    token: Option<String>,
    #[serde(rename = "clientCertificateData")]
    client_certificate_data: Option<String>,
    #[serde(rename = "clientKeyData")]
    client_key_data: Option<String>,
    #[serde(rename = "expirationTimestamp")]
    expiration_timestamp: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

/// Runs the plugin once and reads its credential.
pub(crate) fn run(cfg: &ExecConfig) -> Result<Credential, ExecError> {
    run_with_timeout(cfg, EXEC_TIMEOUT)
}

/// [`run`] with its deadline given.
pub(crate) fn run_with_timeout(
    cfg: &ExecConfig,
    timeout: Duration,
) -> Result<Credential, ExecError> {
    let fail = |reason: String| ExecError {
        command: cfg.command.clone(),
        reason,
    };
    let api_version = if cfg.api_version.is_empty() {
        "client.authentication.k8s.io/v1".to_string()
    } else {
        cfg.api_version.clone()
    };
    if !api_version.starts_with("client.authentication.k8s.io/") {
        return Err(fail(format!(
            "apiVersion {api_version:?} is not client.authentication.k8s.io/v1 or v1beta1"
        )));
    }
    let info = serde_json::json!({
        "apiVersion": api_version,
        "kind": "ExecCredential",
        "spec": {"interactive": false},
    });
    let mut cmd = Command::new(&cfg.command);
    cmd.args(&cfg.args)
        .env("KUBERNETES_EXEC_INFO", info.to_string());
    for e in &cfg.env {
        cmd.env(&e.name, &e.value);
    }
    let max = usize::try_from(MAX_OUTPUT).unwrap_or(usize::MAX);
    let done = run_with_deadline(&mut cmd, b"", timeout, max).map_err(|e| match e {
        RunError::Spawn(_) => {
            let hint = cfg
                .install_hint
                .as_deref()
                .map(|h| format!(" ({})", h.trim()))
                .unwrap_or_default();
            fail(format!("{e}{hint}"))
        }
        e => fail(e.to_string()),
    })?;
    let (out, err, status) = (done.stdout, done.stderr, done.status);
    let err_text = String::from_utf8_lossy(&err);
    if !err_text.trim().is_empty() {
        log::info!(
            "exec credential plugin {:?}: {}",
            cfg.command,
            err_text.trim()
        );
    }
    if !status.success() {
        return Err(fail(format!("exited with {status}")));
    }
    parse(&out, &api_version).map_err(fail)
}

/// Reads a plugin's stdout. The error is the reason only.
fn parse(out: &[u8], want_version: &str) -> Result<Credential, String> {
    let cred: ExecCredential = serde_json::from_slice(out)
        .map_err(|e| format!("its output is not an ExecCredential: {e}"))?;
    if cred.kind != "ExecCredential" {
        return Err(format!(
            "its output has kind {:?}, not ExecCredential",
            cred.kind
        ));
    }
    if cred.api_version != want_version {
        return Err(format!(
            "its output has apiVersion {:?}, want {want_version:?}",
            cred.api_version
        ));
    }
    let status = cred
        .status
        .ok_or_else(|| "its output has no status".to_string())?;
    let token = status.token.filter(|t| !t.is_empty());
    let cert_pem = status.client_certificate_data.map(String::into_bytes);
    let key_pem = status.client_key_data.map(String::into_bytes);
    if cert_pem.is_some() != key_pem.is_some() {
        return Err("its output has a client certificate without a key, or a key alone".into());
    }
    if token.is_none() && cert_pem.is_none() {
        return Err("its output has neither a token nor a client certificate".into());
    }
    let expires = status.expiration_timestamp.map(|t| {
        let secs = t.0.as_second();
        // Before 1970 means "already expired": run the plugin again next time.
        std::time::UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).unwrap_or(0))
    });
    Ok(Credential {
        token,
        cert_pem,
        key_pem,
        expires,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    const V1: &str = "client.authentication.k8s.io/v1";

    #[test]
    fn parses_tokens_certificates_and_expiry() {
        let c = parse(
            br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"t","expirationTimestamp":"2030-01-01T00:00:00Z"}}"#,
            V1,
        )
        .expect("valid");
        assert_eq!(c.token.as_deref(), Some("t"));
        let exp = c.expires.expect("expiry");
        assert!(c.fresh(exp - Duration::from_secs(1)));
        assert!(!c.fresh(exp));
        let rows: &[(&str, &str)] = &[
            ("nope", "its output is not an ExecCredential: expected ident at line 1 column 2"),
            (r#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"X","status":{}}"#, "its output has kind \"X\", not ExecCredential"),
            (r#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential"}"#, "its output has no status"),
            (r#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{}}"#, "its output has neither a token nor a client certificate"),
            (r#"{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{"token":"t"}}"#, "its output has apiVersion \"client.authentication.k8s.io/v1beta1\", want \"client.authentication.k8s.io/v1\""),
        ];
        for (out, want) in rows {
            assert_eq!(
                parse(out.as_bytes(), V1).err().as_deref(),
                Some(*want),
                "{out}"
            );
        }
    }

    #[test]
    fn runs_a_plugin_with_its_env_and_reports_failures() {
        let cfg = ExecConfig {
            api_version: V1.into(),
            command: "/bin/sh".into(),
            args: vec![
                "-c".into(),
                r#"echo "{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"$TOK\"}}""#.into(),
            ],
            env: vec![EnvVar {
                name: "TOK".into(),
                value: "from-env".into(),
            }],
            install_hint: None,
        };
        assert_eq!(run(&cfg).expect("runs").token.as_deref(), Some("from-env"));

        let failing = ExecConfig {
            args: vec!["-c".into(), "echo oops >&2; exit 3".into()],
            ..cfg.clone()
        };
        assert_eq!(
            run(&failing).expect_err("fails").to_string(),
            "exec credential plugin \"/bin/sh\": exited with exit status: 3"
        );
        let missing = ExecConfig {
            command: "/nonexistent/cred-plugin".into(),
            install_hint: Some("install it".into()),
            ..cfg
        };
        let e = run(&missing).expect_err("missing").to_string();
        assert!(
            e.contains("cannot run it") && e.ends_with("(install it)"),
            "{e}"
        );
    }

    #[test]
    fn a_plugin_whose_child_keeps_stdout_open_times_out_and_its_group_is_killed() {
        let dir = base::testutil::TempDir::new("exec-cred");
        let pid_file = dir.0.join("pid");
        let cfg = ExecConfig {
            api_version: V1.into(),
            command: "/bin/sh".into(),
            args: vec![
                "-c".into(),
                format!(
                    r#"sleep 1000 & echo $! > {}; echo '{{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{{"token":"t"}}}}'"#,
                    pid_file.display()
                ),
            ],
            env: vec![],
            install_hint: None,
        };
        let began = Instant::now();
        let e = run_with_timeout(&cfg, Duration::from_secs(1))
            .expect_err("times out")
            .to_string();
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "{:?}",
            began.elapsed()
        );
        assert!(e.contains("did not finish within 1s"), "{e}");
        let pid = std::fs::read_to_string(&pid_file).expect("pid file");
        let stat = format!("/proc/{}/stat", pid.trim());
        // Killed: gone, or a zombie until its new parent reaps it.
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let state = std::fs::read_to_string(&stat)
                .ok()
                .and_then(|s| s.rsplit(") ").next().map(|r| r.chars().next()));
            match state {
                None | Some(Some('Z')) => break,
                _ => {
                    assert!(Instant::now() < until, "the plugin's child still runs");
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
    }
}
