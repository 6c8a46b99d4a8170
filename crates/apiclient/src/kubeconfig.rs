//! The `--kubeconfig` file: clusters, users and contexts, resolved through
//! `current-context` into one [`RestConfig`] (where the API server is, how to trust it,
//! how to prove who we are). Mirrors client-go's `clientcmd` (`DirectClientConfig`,
//! `ClientConfigLoadingRules.ResolvePaths`) for the fields a kubelet uses.
//!
//! Understood: `server`, `certificate-authority` and `-data`, `insecure-skip-tls-verify`,
//! `client-certificate`/`client-key` and their `-data`, `token`, `tokenFile`, and `exec`
//! credential plugins ([`crate::exec`]). Relative paths are resolved against the
//! kubeconfig's own directory, as client-go does. Files named by the kubeconfig are read
//! once here, except `tokenFile`, which is re-read (a projected or rotated token) by the
//! client. Anything else a kubeconfig may hold (`auth-provider`, `username`/`password`,
//! `proxy-url`) is refused with a message naming it, rather than silently ignored.

use std::fmt;
use std::path::{Path, PathBuf};

use k8s_openapi::ByteString;
use serde::Deserialize;

use crate::exec::ExecConfig;
use base::httpclient::servers::TlsSettings;

/// Why the kubeconfig cannot be used. Every message names the file.
#[derive(Debug, thiserror::Error)]
#[error("kubeconfig {path}: {}", self.what())]
pub struct KubeconfigError {
    /// The kubeconfig file.
    pub path: PathBuf,
    /// What is wrong; the first layer of the `source()` chain, which `error_chain`
    /// does not repeat (its message ends this one, or is its cause's).
    #[source]
    pub kind: KubeconfigErrorKind,
}

impl KubeconfigError {
    /// The message after the file: a read of the kubeconfig itself is "it".
    fn what(&self) -> String {
        match &self.kind {
            KubeconfigErrorKind::Read { file, .. } if file == &self.path => {
                "cannot read it".to_string()
            }
            KubeconfigErrorKind::Read { file, .. } => format!("cannot read {}", file.display()),
            other => other.to_string(),
        }
    }
}

/// What is wrong with a kubeconfig.
#[derive(Debug, thiserror::Error)]
pub enum KubeconfigErrorKind {
    /// The file (or one it names) cannot be read. The message is the cause's:
    /// [`KubeconfigError`] says which file.
    #[error("{source}")]
    Read {
        /// The file that could not be read.
        file: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Not valid YAML, or not the shape of a kubeconfig.
    #[error("not a valid kubeconfig: {0}")]
    Parse(serde_norway::Error),
    /// The content is not usable (no current context, unknown cluster…).
    #[error("{0}")]
    Invalid(String),
}

/// Where the API server is and how to talk to it.
#[derive(Clone, Debug)]
pub struct RestConfig {
    /// The server's base URL, e.g. `https://10.0.0.1:6443`, without a trailing `/`.
    pub server: String,
    /// How to trust the server and, with a client certificate, prove who we are.
    pub tls: TlsSettings,
    /// How to authenticate with a header.
    pub auth: Auth,
}

/// Header credentials of a user. Several may be set; the client picks (see
/// [`crate::ApiClient`]).
#[derive(Clone, Default)]
pub struct Auth {
    /// A static bearer token.
    pub token: Option<String>,
    /// A file holding a bearer token, re-read as it rotates.
    pub token_file: Option<PathBuf>,
    /// A credential plugin to run.
    pub exec: Option<ExecConfig>,
}

impl fmt::Debug for Auth {
    // Tokens are secrets: say only whether one is set.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Auth")
            .field("token", &self.token.is_some())
            .field("token_file", &self.token_file)
            .field("exec", &self.exec.as_ref().map(|e| &e.command))
            .finish()
    }
}

#[derive(Debug, Deserialize)]
struct RawConfig {
    #[serde(default)]
    clusters: Vec<Named<RawCluster>>,
    #[serde(default)]
    users: Vec<NamedUser>,
    #[serde(default)]
    contexts: Vec<Named<RawContext>>,
    #[serde(rename = "current-context", default)]
    current_context: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Named<T> {
    name: String,
    #[serde(alias = "cluster", alias = "context")]
    value: T,
}

#[derive(Debug, Deserialize)]
struct NamedUser {
    name: String,
    user: RawUser,
}

#[derive(Debug, Deserialize)]
struct RawCluster {
    server: Option<String>,
    #[serde(rename = "certificate-authority")]
    certificate_authority: Option<PathBuf>,
    #[serde(rename = "certificate-authority-data")]
    certificate_authority_data: Option<ByteString>,
    #[serde(rename = "insecure-skip-tls-verify", default)]
    insecure_skip_tls_verify: bool,
    #[serde(rename = "proxy-url")]
    proxy_url: Option<String>,
}

#[derive(Debug, Deserialize)]
struct RawContext {
    cluster: String,
    user: Option<String>,
}

#[derive(Default, Deserialize)]
struct RawUser {
    #[serde(rename = "client-certificate")]
    client_certificate: Option<PathBuf>,
    #[serde(rename = "client-certificate-data")]
    client_certificate_data: Option<ByteString>,
    #[serde(rename = "client-key")]
    client_key: Option<PathBuf>,
    #[serde(rename = "client-key-data")]
    client_key_data: Option<ByteString>,
    token: Option<String>,
    #[serde(rename = "tokenFile")]
    token_file: Option<PathBuf>,
    exec: Option<ExecConfig>,
    #[serde(rename = "auth-provider")]
    auth_provider: Option<serde_norway::Value>,
    username: Option<String>,
}

impl fmt::Debug for RawUser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RawUser { .. }")
    }
}

/// Reads the kubeconfig at `path` and resolves its current context.
pub fn load(path: &Path) -> Result<RestConfig, KubeconfigError> {
    let fail = |kind| KubeconfigError {
        path: path.to_path_buf(),
        kind,
    };
    let text = std::fs::read_to_string(path).map_err(|source| {
        fail(KubeconfigErrorKind::Read {
            file: path.to_path_buf(),
            source,
        })
    })?;
    let raw: RawConfig =
        serde_norway::from_str(&text).map_err(|e| fail(KubeconfigErrorKind::Parse(e)))?;
    let base = path.parent().unwrap_or(Path::new("."));
    resolve(raw, base).map_err(fail)
}

/// Fuzzing (`crate::fuzzing`): a kubeconfig's text parsed and resolved as [`load`]
/// does, files named relative to `base`.
#[cfg(feature = "fuzzing")]
pub fn fuzz_parse(text: &str, base: &Path) -> bool {
    serde_norway::from_str::<RawConfig>(text)
        .ok()
        .is_some_and(|raw| resolve(raw, base).is_ok())
}

/// Resolves the current context of a parsed kubeconfig. Pure apart from reading the
/// files it names (relative to `base`).
fn resolve(raw: RawConfig, base: &Path) -> Result<RestConfig, KubeconfigErrorKind> {
    let invalid = |s: String| KubeconfigErrorKind::Invalid(s);
    let current = raw
        .current_context
        .filter(|c| !c.is_empty())
        .ok_or_else(|| invalid("current-context is not set".into()))?;
    let context = raw
        .contexts
        .into_iter()
        .find(|c| c.name == current)
        .ok_or_else(|| invalid(format!("current-context {current:?} is not among contexts")))?
        .value;
    let cluster = raw
        .clusters
        .into_iter()
        .find(|c| c.name == context.cluster)
        .ok_or_else(|| {
            invalid(format!(
                "context {current:?} names cluster {:?}, which is not among clusters",
                context.cluster
            ))
        })?
        .value;
    let user = match &context.user {
        None => RawUser::default(),
        Some(u) if u.is_empty() => RawUser::default(),
        Some(u) => {
            raw.users
                .into_iter()
                .find(|n| &n.name == u)
                .ok_or_else(|| {
                    invalid(format!(
                        "context {current:?} names user {u:?}, which is not among users"
                    ))
                })?
                .user
        }
    };

    let server = cluster
        .server
        .filter(|s| !s.is_empty())
        .ok_or_else(|| invalid(format!("cluster {:?} has no server", context.cluster)))?;
    if !(server.starts_with("https://") || server.starts_with("http://")) {
        return Err(invalid(format!(
            "server {server:?} is not an http:// or https:// URL"
        )));
    }
    if cluster.proxy_url.is_some() {
        return Err(invalid("proxy-url is not supported by rkubelet".into()));
    }
    if user.auth_provider.is_some() {
        return Err(invalid(
            "auth-provider is not supported by rkubelet (use an exec plugin)".into(),
        ));
    }
    if user.username.is_some() {
        return Err(invalid(
            "username/password (basic) authentication is not supported by rkubelet".into(),
        ));
    }

    let read = |p: &Path| -> Result<Vec<u8>, KubeconfigErrorKind> {
        let file = base.join(p);
        std::fs::read(&file).map_err(|source| KubeconfigErrorKind::Read { file, source })
    };
    // `-data` wins over the file, as in client-go.
    let pick = |data: Option<ByteString>,
                file: Option<PathBuf>|
     -> Result<Option<Vec<u8>>, KubeconfigErrorKind> {
        match (data, file) {
            (Some(d), _) if !d.0.is_empty() => Ok(Some(d.0)),
            (_, Some(f)) if !f.as_os_str().is_empty() => read(&f).map(Some),
            _ => Ok(None),
        }
    };
    let ca_pem = pick(
        cluster.certificate_authority_data,
        cluster.certificate_authority,
    )?;
    if ca_pem.is_some() && cluster.insecure_skip_tls_verify {
        // client-go refuses this pair too: it is always a mistake.
        return Err(invalid(
            "certificate-authority and insecure-skip-tls-verify are both set".into(),
        ));
    }
    let tls = TlsSettings {
        ca_pem,
        cert_pem: pick(user.client_certificate_data, user.client_certificate)?,
        key_pem: pick(user.client_key_data, user.client_key)?,
        insecure: cluster.insecure_skip_tls_verify,
    };
    base::httpclient::servers::tls_config(&tls).map_err(invalid)?;
    let auth = Auth {
        token: user.token.filter(|t| !t.is_empty()),
        token_file: user
            .token_file
            .filter(|f| !f.as_os_str().is_empty())
            .map(|f| base.join(f)),
        exec: user.exec.map(|mut e| {
            // A relative command with a slash is relative to the kubeconfig, as in
            // client-go; a bare name is looked up on PATH.
            if e.command.contains('/') && !e.command.starts_with('/') {
                e.command = base.join(&e.command).display().to_string();
            }
            e
        }),
    };
    Ok(RestConfig {
        server: server.trim_end_matches('/').to_string(),
        tls,
        auth,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<RestConfig, String> {
        let raw: RawConfig = serde_norway::from_str(text).map_err(|e| e.to_string())?;
        resolve(raw, Path::new("/etc/kubernetes")).map_err(|e| match e {
            KubeconfigErrorKind::Invalid(s) => s,
            other => format!("{other:?}"),
        })
    }

    const BASE: &str = "apiVersion: v1\nkind: Config\n\
        clusters:\n- name: c\n  cluster:\n    server: https://10.0.0.1:6443/\n    insecure-skip-tls-verify: true\n\
        - name: other\n  cluster:\n    server: http://other\n\
        contexts:\n- name: ctx\n  context: {cluster: c, user: u}\n\
        - name: anon\n  context: {cluster: other}\n\
        users:\n- name: u\n  user:\n    token: abc\n    tokenFile: tok\n";

    #[test]
    fn the_current_context_picks_cluster_and_user() {
        let c = parse(&format!("{BASE}current-context: ctx\n")).expect("valid");
        assert_eq!(c.server, "https://10.0.0.1:6443");
        assert!(c.tls.insecure);
        assert_eq!(c.auth.token.as_deref(), Some("abc"));
        assert_eq!(
            c.auth.token_file.as_deref(),
            Some(Path::new("/etc/kubernetes/tok")),
            "relative to the kubeconfig's directory"
        );
        let anon = parse(&format!("{BASE}current-context: anon\n")).expect("valid");
        assert_eq!(anon.server, "http://other");
        assert!(anon.auth.token.is_none());
        assert!(
            !format!("{:?}", c.auth).contains("abc"),
            "no token in Debug"
        );
    }

    #[test]
    fn data_fields_are_base64() {
        let text = "clusters:\n- name: c\n  cluster:\n    server: https://s\n    certificate-authority-data: bm90IGEgY2VydA==\n\
            contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n\
            users:\n- name: u\n  user: {}\n";
        assert_eq!(
            parse(text).err().as_deref(),
            Some("CA bundle: no certificate in it"),
            "decoded and checked"
        );
    }

    #[test]
    fn errors_name_what_is_missing() {
        let rows = [
            (BASE.to_string(), "current-context is not set"),
            (
                format!("{BASE}current-context: nope\n"),
                "current-context \"nope\" is not among contexts",
            ),
            (
                BASE.replace("user: u}", "user: v}") + "current-context: ctx\n",
                "context \"ctx\" names user \"v\", which is not among users",
            ),
            (
                BASE.replace("https://10.0.0.1:6443/", "10.0.0.1") + "current-context: ctx\n",
                "server \"10.0.0.1\" is not an http:// or https:// URL",
            ),
            (
                BASE.replace("token: abc", "username: admin") + "current-context: ctx\n",
                "username/password (basic) authentication is not supported by rkubelet",
            ),
        ];
        for (text, want) in rows {
            assert_eq!(parse(&text).err().as_deref(), Some(want), "{text}");
        }
    }

    #[test]
    fn exec_plugins_resolve_relative_commands() {
        let text = BASE.replace(
            "    token: abc\n    tokenFile: tok\n",
            "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: ./bin/cred\n      args: [get]\n      env: [{name: A, value: b}]\n",
        ) + "current-context: ctx\n";
        let c = parse(&text).expect("valid");
        let e = c.auth.exec.expect("exec");
        assert_eq!(e.command, "/etc/kubernetes/./bin/cred");
        assert_eq!(e.args, ["get"]);
    }

    #[test]
    fn a_missing_file_is_named() {
        let e = load(Path::new("/nonexistent/kubeconfig")).expect_err("missing");
        assert_eq!(
            base::loops::error_chain(&e),
            "kubeconfig /nonexistent/kubeconfig: cannot read it: No such file or directory (os error 2)"
        );
    }

    /// The kind is a layer of the `source()` chain that `error_chain` does not repeat:
    /// a file the kubeconfig names, and a parse error, read as before the derive.
    #[test]
    fn a_missing_named_file_and_bad_yaml_are_said_once() {
        let dir = base::testutil::TempDir::new("kubeconfig-chain");
        let text = BASE.replace(
            "    tokenFile: tok\n",
            "    client-certificate: missing.crt\n    client-key: missing.key\n",
        ) + "current-context: ctx\n";
        let path = dir.write("kubeconfig", &text);
        let e = load(&path).expect_err("missing token file");
        assert_eq!(
            base::loops::error_chain(&e),
            format!(
                "kubeconfig {}: cannot read {}: No such file or directory (os error 2)",
                path.display(),
                dir.0.join("missing.crt").display()
            )
        );
        let path = dir.write("bad", "clusters: [");
        let e = load(&path).expect_err("bad yaml");
        assert!(e.to_string().contains(": not a valid kubeconfig: "), "{e}");
        assert_eq!(base::loops::error_chain(&e), e.to_string());
    }
}
