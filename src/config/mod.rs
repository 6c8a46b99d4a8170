//! The kubelet's effective configuration: flags (spelled as the upstream kubelet's)
//! layered over a `KubeletConfiguration` file (`kubelet.config.k8s.io/v1beta1`).
//!
//! Raw inputs are validated once, here, into [`KubeletConfig`]; nothing else in the
//! kubelet parses flags or the config file. Precedence, as upstream: defaults, then the
//! file given by `--config`, then flags given on the command line.
//!
//! Every setting is one entry of the table in [`settings`], from which [`table`]'s
//! macro generates the rest. [`flags`] reads the command line and [`mod@file`] the
//! `KubeletConfiguration`, each into a [`Layer`]; [`values`] reads each kind of value
//! (flag text, YAML), [`duration`] Go durations; [`load`] layers them. Two rules are
//! upstream's special cases and live in `merge`: the read-only port is 10255, anonymous
//! auth on, token webhook off and authorization `AlwaysAllow` when only flags are used,
//! and 0 (disabled), off, on and `Webhook` when a config file is given
//! (`applyLegacyDefaults` against the v1beta1 defaults); and `enableServer: false`
//! sets the port to 0.
//!
//! Over 800 lines: `load`, `merge` and their table-driven tests of precedence and of
//! every special-cased default belong together; the code itself is under 400.

#[macro_use]
pub(crate) mod table;

pub(crate) mod duration;
pub(crate) mod file;
pub mod flags;
pub mod settings;
pub(crate) mod values;

use std::path::{Path, PathBuf};

pub use settings::{defaults, KubeletConfig, Layer};
// The tests below name these through `use super::*`.
#[cfg(test)]
use std::{net::IpAddr, time::Duration};

/// klog's useful range of `-v`: above 10 nothing more is logged anywhere.
pub(crate) const MAX_VERBOSITY: u8 = 10;

impl KubeletConfig {
    /// `--cert-dir`, else `<root-dir>/pki`.
    pub fn cert_dir(&self) -> PathBuf {
        self.cert_dir
            .clone()
            .unwrap_or_else(|| self.root_dir.join(defaults::CERT_DIR_IN_ROOT_DIR))
    }

    /// Logs, once at info, each config-file field that is accepted but not
    /// implemented. [`load`] cannot: it runs before the logger exists (the logger needs
    /// the verbosity it reads), so `main` calls this right after starting the logger.
    pub fn log_unsupported_fields(&self) {
        for name in &self.unsupported_fields {
            log::info!("config field {name} is not supported by rkubelet yet; ignored");
        }
    }
}

/// What the command line asks for.
// Built once at startup and matched at once: the size of `Run` costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Loaded {
    /// Run the kubelet with this configuration.
    Run(KubeletConfig),
    /// `--help`: print this text and exit 0.
    Help(String),
    /// `--version`: print this text and exit 0.
    Version(String),
}

/// Why the flags or the config file cannot be used. `main` prints it and exits 2.
/// Each message is one line naming the flag or field and the reason; an I/O or YAML
/// cause is also kept as the `source()` (and said once by `error_chain`).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A flag rkubelet does not know.
    #[error("unknown flag: {0}")]
    UnknownFlag(String),
    /// A flag that takes a value came last, without one.
    #[error("flag needs an argument: {flag}")]
    MissingValue {
        /// The flag as written (`--port`, `-v`).
        flag: String,
    },
    /// A flag's value is not valid.
    #[error("invalid value {value:?} for flag {flag}: {reason}")]
    InvalidFlag {
        /// The flag as written.
        flag: String,
        /// The value given.
        value: String,
        /// Why it is refused.
        reason: String,
    },
    /// A positional argument: the kubelet takes none.
    #[error("unexpected argument {0:?}: rkubelet takes flags only")]
    UnexpectedArgument(String),
    /// The config file cannot be read.
    #[error("config file {path}: cannot read it: {source}")]
    ReadFile {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The config file is not valid YAML.
    #[error("config file {path}: invalid YAML: {source}")]
    ParseFile {
        /// The file.
        path: PathBuf,
        /// The parser's error, with its line and column.
        source: serde_norway::Error,
    },
    /// The config file is not a v1beta1 `KubeletConfiguration`.
    #[error("config file {path}: not a KubeletConfiguration: {reason}")]
    NotKubeletConfiguration {
        /// The file.
        path: PathBuf,
        /// What is wrong with its `apiVersion`, `kind` or shape.
        reason: String,
    },
    /// The config file has a field upstream's `KubeletConfiguration` does not have.
    #[error("config file {path}: unknown field {field:?}")]
    UnknownField {
        /// The file.
        path: PathBuf,
        /// The field, e.g. `fooBar` or `logging.color`.
        field: String,
    },
    /// A config file field's value is not valid.
    #[error("config file {path}: field {field}: {reason}")]
    InvalidField {
        /// The file.
        path: PathBuf,
        /// The field.
        field: String,
        /// Why the value is refused.
        reason: String,
    },
    /// Without `--hostname-override`, the host name could not be read.
    #[error("cannot read the host name from {path} ({source}); set --hostname-override")]
    HostName {
        /// Where it was read from.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The node name came out empty.
    #[error("the node name is empty; set --hostname-override")]
    EmptyNodeName,
    /// The host name (no `--hostname-override`) is not a valid node name.
    #[error("the host name {name:?} is not a valid node name: {reason}; set --hostname-override")]
    InvalidNodeName {
        /// The lowercased host name.
        name: String,
        /// Why, in upstream's words.
        reason: String,
    },
}

/// Reads the command line (`args` as `std::env::args()` gives it, program name first)
/// and the config file it names, into the effective configuration.
pub fn load(args: Vec<String>) -> Result<Loaded, ConfigError> {
    load_with(&args, Path::new(defaults::HOSTNAME_FILE))
}

/// [`load`], reading the host name from `hostname_file`.
fn load_with(args: &[String], hostname_file: &Path) -> Result<Loaded, ConfigError> {
    let rest = args.get(1..).unwrap_or(&[]);
    let flags = match flags::parse(rest)? {
        flags::Parsed::Help => return Ok(Loaded::Help(flags::help())),
        flags::Parsed::Version => return Ok(Loaded::Version(flags::version())),
        flags::Parsed::Run(f) => f,
    };
    let file = flags.config.as_deref().map(file::read).transpose()?;
    check_pairs(&flags)?;
    let node_name = node_name(flags.hostname_override.as_deref(), hostname_file)?;
    merge(flags, file, node_name).map(Loaded::Run)
}

/// Flags that only make sense together.
fn check_pairs(flags: &flags::Flags) -> Result<(), ConfigError> {
    let show = |p: &Option<PathBuf>| {
        p.as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    };
    match (&flags.etcd_certfile, &flags.etcd_keyfile) {
        (Some(_), None) => Err(ConfigError::InvalidFlag {
            flag: "--etcd-certfile".into(),
            value: show(&flags.etcd_certfile),
            reason: "needs --etcd-keyfile too".into(),
        }),
        (None, Some(_)) => Err(ConfigError::InvalidFlag {
            flag: "--etcd-keyfile".into(),
            value: show(&flags.etcd_keyfile),
            reason: "needs --etcd-certfile too".into(),
        }),
        _ => Ok(()),
    }
}

/// Layers defaults < file < flags. Pure: everything it needs is passed in.
fn merge(
    flags: flags::Flags,
    file: Option<file::FileSettings>,
    node_name: String,
) -> Result<KubeletConfig, ConfigError> {
    let file = file.map(|mut file| {
        // A config file brings v1beta1's defaults, where the read-only port is off;
        // upstream's `applyLegacyDefaults` gives 10255 only to a kubelet without one.
        file.read_only_port
            .get_or_insert(defaults::READ_ONLY_PORT_WITH_CONFIG_FILE);
        // `enableServer: false` turns the authenticated server off: rkubelet says that
        // with port 0. An explicit `--port` still wins, as every flag does.
        if file.enable_server == Some(false) {
            file.port = Some(0);
        }
        // The same for authentication and authorization: v1beta1's defaults are the
        // secure ones (anonymous off, Webhook), the flags' are the legacy ones.
        file.anonymous_auth
            .get_or_insert(defaults::ANONYMOUS_AUTH_WITH_CONFIG_FILE);
        file.authorization_mode
            .get_or_insert(defaults::AUTHORIZATION_MODE_WITH_CONFIG_FILE);
        file.authentication_token_webhook
            .get_or_insert(defaults::AUTHENTICATION_TOKEN_WEBHOOK_WITH_CONFIG_FILE);
        file
    });
    let cfg = settings::resolve(flags.over(file.unwrap_or_default()), node_name)?;
    // Upstream's `ValidateKubeletConfiguration`: parallel pulls need serializeImagePulls
    // off.
    if cfg.serialize_image_pulls && cfg.max_parallel_image_pulls.is_some_and(|n| n > 1) {
        return Err(ConfigError::InvalidField {
            path: cfg.config_file.clone().unwrap_or_default(),
            field: "maxParallelImagePulls".into(),
            reason: "cannot be larger than 1 unless serializeImagePulls is set to false".into(),
        });
    }
    Ok(cfg)
}

/// `--hostname-override`, else the kernel's host name; trimmed and lowercased, as
/// upstream's `nodeutil.GetHostname`, then checked to be a DNS-1123 subdomain (a Node's
/// name must be one, and it ends up in every static pod's name).
fn node_name(hostname_override: Option<&str>, hostname_file: &Path) -> Result<String, ConfigError> {
    let given = hostname_override
        .map(|h| h.trim().to_lowercase())
        .unwrap_or_default();
    if !given.is_empty() {
        dns1123_subdomain(&given).map_err(|reason| ConfigError::InvalidFlag {
            flag: "--hostname-override".into(),
            value: hostname_override.unwrap_or_default().to_string(),
            reason,
        })?;
        return Ok(given);
    }
    let host = std::fs::read_to_string(hostname_file).map_err(|source| ConfigError::HostName {
        path: hostname_file.to_path_buf(),
        source,
    })?;
    let host = host.trim().to_lowercase();
    if host.is_empty() {
        return Err(ConfigError::EmptyNodeName);
    }
    dns1123_subdomain(&host).map_err(|reason| ConfigError::InvalidNodeName {
        name: host.clone(),
        reason,
    })?;
    Ok(host)
}

/// Upstream's `validation.IsDNS1123Subdomain`, with its messages.
fn dns1123_subdomain(s: &str) -> Result<(), String> {
    const MAX_LEN: usize = 253;
    let mut errors = Vec::new();
    if s.len() > MAX_LEN {
        errors.push(format!("must be no more than {MAX_LEN} characters"));
    }
    let label_ok = |l: &str| {
        let b = l.as_bytes();
        let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
        b.first().is_some_and(alnum)
            && b.last().is_some_and(alnum)
            && b.iter().all(|c| alnum(c) || *c == b'-')
    };
    if !s.split('.').all(label_ok) {
        errors.push(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric \
             characters, '-' or '.', and must start and end with an alphanumeric character \
             (e.g. 'example.com', regex used for validation is \
             '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
                .to_string(),
        );
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use base::testutil::TempDir;

    const HEAD: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

    fn argv(a: &[&str]) -> Vec<String> {
        std::iter::once("rkubelet")
            .chain(a.iter().copied())
            .map(String::from)
            .collect()
    }

    fn run_with(dir: &TempDir, a: &[&str]) -> Result<KubeletConfig, ConfigError> {
        let host = dir.write("hostname", "  My-Host\n");
        match load_with(&argv(a), &host)? {
            Loaded::Run(c) => Ok(c),
            other => panic!("{a:?}: {other:?}"),
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn defaults_with_flags_only() {
        let dir = TempDir::new("defaults");
        let c = run_with(&dir, &[]).expect("valid");
        assert_eq!(
            c,
            KubeletConfig {
                node_name: "my-host".into(),
                static_pod_path: None,
                root_dir: defaults::ROOT_DIR.into(),
                container_runtime_endpoint: defaults::CONTAINER_RUNTIME_ENDPOINT.into(),
                runtime_request_timeout: Duration::from_secs(120),
                image_service_endpoint: String::new(),
                pod_infra_container_image: defaults::POD_INFRA_CONTAINER_IMAGE.into(),
                network_plugin: String::new(),
                cni_bin_dir: "/opt/cni/bin".into(),
                cni_conf_dir: "/etc/cni/net.d".into(),
                cni_cache_dir: "/var/lib/cni/cache".into(),
                pod_cidr: String::new(),
                non_masquerade_cidr: "10.0.0.0/8".into(),
                hairpin_mode: "promiscuous-bridge".into(),
                network_plugin_mtu: 0,
                healthz_port: 10248,
                healthz_bind_address: ip("127.0.0.1"),
                read_only_port: 10255,
                address: ip("0.0.0.0"),
                port: 10250,
                tls_cert_file: None,
                tls_private_key_file: None,
                cert_dir: None,
                tls_min_version: wire::tls::TlsVersion::Tls12,
                client_ca_file: None,
                tls_cipher_suites: vec![],
                enable_debugging_handlers: true,
                anonymous_auth: true,
                authentication_token_webhook: false,
                authentication_token_webhook_cache_ttl: Duration::from_secs(120),
                authorization_mode: values::AuthorizationMode::AlwaysAllow,
                authorization_webhook_cache_authorized_ttl: Duration::from_secs(300),
                authorization_webhook_cache_unauthorized_ttl: Duration::from_secs(30),
                sync_frequency: Duration::from_secs(60),
                file_check_frequency: Duration::from_secs(20),
                cluster_dns: vec![],
                cluster_domain: String::new(),
                resolv_conf: defaults::RESOLV_CONF.into(),
                verbosity: None,
                manifest_url: None,
                manifest_url_headers: vec![],
                http_check_frequency: Duration::from_secs(20),
                etcd_servers: vec![],
                etcd_prefix: "/registry/hosts/my-host/".into(),
                etcd_cafile: None,
                etcd_certfile: None,
                etcd_keyfile: None,
                enable_server_source: false,
                checkpoint_api_pods: false,
                image_preload_dir: None,
                kubeconfig: None,
                bootstrap_kubeconfig: None,
                rotate_certificates: false,
                serialize_image_pulls: true,
                max_parallel_image_pulls: None,
                register_node: true,
                node_labels: vec![],
                register_with_taints: vec![],
                node_ip: None,
                max_pods: 110,
                kube_reserved: vec![],
                system_reserved: vec![],
                cgroups_per_qos: true,
                cgroup_root: String::new(),
                enforce_node_allocatable: vec!["pods".into()],
                allowed_unsafe_sysctls: vec![],
                node_status_update_frequency: Duration::from_secs(10),
                node_status_report_frequency: Duration::from_secs(300),
                node_status_max_images: 50,
                node_lease_duration_seconds: 40,
                eviction_hard: None,
                eviction_soft: None,
                eviction_soft_grace_period: None,
                eviction_minimum_reclaim: None,
                eviction_max_pod_grace_period: 0,
                eviction_pressure_transition_period: Duration::from_secs(300),
                log_file: None,
                log_file_max_size: 1800,
                log_flush_frequency: Duration::from_secs(5),
                minimum_container_ttl_duration: Duration::ZERO,
                maximum_dead_containers_per_container: 1,
                maximum_dead_containers: -1,
                container_gc_period: Duration::from_secs(60),
                image_gc_period: Duration::from_secs(300),
                image_gc_high_threshold_percent: 85,
                image_gc_low_threshold_percent: 80,
                image_minimum_gc_age: Duration::from_secs(120),
                image_maximum_gc_age: Duration::ZERO,
                container_log_max_size: 10 << 20,
                container_log_max_files: 5,
                container_log_monitor_interval: Duration::from_secs(10),
                pod_logs_dir: "/var/log/pods".into(),
                container_logs_dir: "/var/log/containers".into(),
                config_file: None,
                unsupported_fields: vec![],
            }
        );
    }

    #[test]
    fn auth_defaults_are_legacy_with_flags_and_secure_with_a_config_file() {
        use values::AuthorizationMode::{AlwaysAllow, Webhook};
        let dir = TempDir::new("authdefaults");
        let c = run_with(&dir, &[]).expect("valid");
        assert!(c.anonymous_auth);
        assert!(
            !c.authentication_token_webhook,
            "flags: tokens are not reviewed"
        );
        assert_eq!(c.authorization_mode, AlwaysAllow);
        assert_eq!(c.cert_dir(), Path::new(defaults::ROOT_DIR).join("pki"));
        let cfg = dir.write("auth.yaml", HEAD);
        let cfg = cfg.to_str().expect("utf-8");
        let c = run_with(&dir, &["--config", cfg]).expect("valid");
        assert!(!c.anonymous_auth, "v1beta1: anonymous off");
        assert_eq!(c.authorization_mode, Webhook, "v1beta1: Webhook");
        assert!(c.authentication_token_webhook, "v1beta1: tokens reviewed");
        assert_eq!(
            (
                c.authentication_token_webhook_cache_ttl,
                c.authorization_webhook_cache_authorized_ttl,
                c.authorization_webhook_cache_unauthorized_ttl
            ),
            (
                Duration::from_secs(120),
                Duration::from_secs(300),
                Duration::from_secs(30)
            ),
            "both columns share the TTLs"
        );
        let c = run_with(
            &dir,
            &[
                "--config",
                cfg,
                "--anonymous-auth",
                "--authorization-mode=AlwaysAllow",
                "--cert-dir=/x/pki",
            ],
        )
        .expect("valid");
        assert!(c.anonymous_auth, "a flag wins over the file's default");
        assert_eq!(c.authorization_mode, AlwaysAllow);
        assert_eq!(c.cert_dir(), Path::new("/x/pki"));
        let cfg = dir.write(
            "auth2.yaml",
            &format!("{HEAD}authentication: {{anonymous: {{enabled: true}}}}\n"),
        );
        let c = run_with(&dir, &["--config", cfg.to_str().expect("utf-8")]).expect("valid");
        assert!(c.anonymous_auth, "the file's value wins over its default");
        assert!(run_with(&dir, &["--tls-min-version=VersionTLS11"]).is_err());
        // A zero TTL in the file is unset (v1beta1 defaulting); on the flag it is "ask
        // every time".
        let cfg = dir.write(
            "auth3.yaml",
            &format!("{HEAD}authentication: {{webhook: {{enabled: false, cacheTTL: 0s}}}}\n"),
        );
        let c = run_with(&dir, &["--config", cfg.to_str().expect("utf-8")]).expect("valid");
        assert!(!c.authentication_token_webhook);
        assert_eq!(
            c.authentication_token_webhook_cache_ttl,
            Duration::from_secs(120)
        );
        let c = run_with(&dir, &["--authentication-token-webhook-cache-ttl=0s"]).expect("valid");
        assert_eq!(c.authentication_token_webhook_cache_ttl, Duration::ZERO);
        // Cipher suites: upstream's names, the legacy ChaCha spelling included; an
        // unknown one is refused with its name.
        let c = run_with(
            &dir,
            &[
                "--tls-cipher-suites=TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305,TLS_AES_128_GCM_SHA256",
                "--tls-cipher-suites=TLS_RSA_WITH_AES_128_GCM_SHA256",
            ],
        )
        .expect("valid");
        assert_eq!(
            c.tls_cipher_suites,
            [
                "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
                "TLS_AES_128_GCM_SHA256",
                "TLS_RSA_WITH_AES_128_GCM_SHA256"
            ]
        );
        let err = run_with(
            &dir,
            &["--tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM,x"],
        )
        .expect_err("unknown suite");
        assert!(
            err.to_string().contains("TLS_ECDHE_RSA_WITH_AES_128_GCM"),
            "{err}"
        );
    }

    #[test]
    fn allowed_unsafe_sysctls_must_be_namespaced() {
        let dir = TempDir::new("sysctls");
        let c = run_with(
            &dir,
            &[
                "--allowed-unsafe-sysctls=kernel.msg*,net.core.somaxconn",
                "--allowed-unsafe-sysctls",
                "fs/mqueue/*",
            ],
        )
        .expect("valid");
        assert_eq!(
            c.allowed_unsafe_sysctls,
            ["kernel.msg*", "net.core.somaxconn", "fs/mqueue/*"]
        );
        let e = run_with(
            &dir,
            &["--allowed-unsafe-sysctls=kernel.msg*,vm.swappiness"],
        )
        .expect_err("not namespaced");
        assert_eq!(
            base::loops::error_chain(&e),
            "invalid value \"kernel.msg*,vm.swappiness\" for flag --allowed-unsafe-sysctls: \
             the sysctls \"vm.swappiness\" are not known to be namespaced"
        );
        let cfg = dir.write(
            "sysctls.yaml",
            &format!("{HEAD}allowedUnsafeSysctls: [\"kernel.*\"]\n"),
        );
        let e = run_with(&dir, &[&format!("--config={}", cfg.display())]).expect_err("kernel.*");
        let msg = base::loops::error_chain(&e);
        assert!(
            msg.ends_with("the sysctls \"kernel.\" are not known to be namespaced"),
            "{msg}"
        );
    }

    #[test]
    fn image_pull_settings_are_checked_as_upstream() {
        let dir = TempDir::new("pulls");
        let run = |body: &str| {
            let cfg = dir.write("pulls.yaml", &format!("{HEAD}{body}"));
            run_with(&dir, &[&format!("--config={}", cfg.display())])
        };
        let c = run("serializeImagePulls: false\nmaxParallelImagePulls: 4\n").expect("valid");
        assert_eq!(
            (c.serialize_image_pulls, c.max_parallel_image_pulls),
            (false, Some(4))
        );
        let c = run("maxParallelImagePulls: 1\n").expect("1 with serialized pulls");
        assert_eq!(c.max_parallel_image_pulls, Some(1));
        let cfg = dir.0.join("pulls.yaml").display().to_string();
        for (body, want) in [
            (
                "maxParallelImagePulls: 2\n",
                "field maxParallelImagePulls: cannot be larger than 1 unless \
                 serializeImagePulls is set to false",
            ),
            (
                "serializeImagePulls: false\nmaxParallelImagePulls: 0\n",
                "field maxParallelImagePulls: 0 must be a positive number",
            ),
        ] {
            let e = run(body).expect_err(body);
            assert_eq!(
                base::loops::error_chain(&e),
                format!("config file {cfg}: {want}"),
                "{body}"
            );
        }
    }

    #[test]
    fn dns_settings_from_flags_over_the_file() {
        let dir = TempDir::new("dns");
        let file = dir.write(
            "c.yaml",
            &format!(
                "{HEAD}clusterDNS: [\"10.0.0.10\"]\nclusterDomain: from.file\nresolvConf: r.conf\n"
            ),
        );
        let c = run_with(&dir, &[&format!("--config={}", file.display())]).expect("valid");
        assert_eq!(c.cluster_dns, vec!["10.0.0.10".to_string()]);
        assert_eq!(c.cluster_domain, "from.file");
        assert_eq!(c.resolv_conf, dir.0.join("r.conf").display().to_string());
        let c = run_with(
            &dir,
            &[
                &format!("--config={}", file.display()),
                "--cluster-dns=10.1.0.10,10.1.0.11",
                "--cluster-dns",
                "10.1.0.12",
                "--cluster-domain=cluster.local",
                "--resolv-conf=",
            ],
        )
        .expect("valid");
        assert_eq!(c.cluster_dns, ["10.1.0.10", "10.1.0.11", "10.1.0.12"]);
        assert_eq!(c.cluster_domain, "cluster.local");
        assert_eq!(c.resolv_conf, "");
        assert!(run_with(&dir, &["--cluster-dns=not-an-ip"]).is_err());
    }

    #[test]
    fn default_addresses_parse() {
        assert!(defaults::HEALTHZ_BIND_ADDRESS.parse::<IpAddr>().is_ok());
        assert!(defaults::ADDRESS.parse::<IpAddr>().is_ok());
    }

    #[test]
    fn precedence_is_defaults_then_file_then_flags() {
        let dir = TempDir::new("precedence");
        let cfg = dir.write(
            "config.yaml",
            &format!(
                "{HEAD}staticPodPath: /from/file\nhealthzPort: 1111\nsyncFrequency: 2m\n\
                 fileCheckFrequency: 5s\naddress: 10.0.0.1\nport: 2222\nreadOnlyPort: 3333\n\
                 healthzBindAddress: 10.0.0.2\ncontainerRuntimeEndpoint: unix:///file.sock\n\
                 logging: {{verbosity: 2}}\n"
            ),
        );
        let cfg = cfg.to_str().expect("utf-8 path");
        // (flags, check) rows: each flag overrides its file value; the others keep it.
        type Check = fn(&KubeletConfig);
        let rows: &[(&[&str], Check)] = &[
            (&[], |c| {
                assert_eq!(c.static_pod_path, Some("/from/file".into()));
                assert_eq!(c.healthz_port, 1111);
                assert_eq!(c.sync_frequency, Duration::from_secs(120));
                assert_eq!(c.file_check_frequency, Duration::from_secs(5));
                assert_eq!(c.address, ip("10.0.0.1"));
                assert_eq!(c.port, 2222);
                assert_eq!(c.read_only_port, 3333);
                assert_eq!(c.healthz_bind_address, ip("10.0.0.2"));
                assert_eq!(c.container_runtime_endpoint, "unix:///file.sock");
                assert_eq!(c.verbosity, Some(2));
            }),
            (&["--pod-manifest-path=/from/flag"], |c| {
                assert_eq!(c.static_pod_path, Some("/from/flag".into()));
                assert_eq!(c.healthz_port, 1111);
            }),
            (&["--pod-manifest-path="], |c| {
                assert_eq!(c.static_pod_path, None)
            }),
            (&["--healthz-port=0"], |c| assert_eq!(c.healthz_port, 0)),
            (&["--sync-frequency=10s"], |c| {
                assert_eq!(c.sync_frequency, Duration::from_secs(10))
            }),
            (&["--file-check-frequency", "1s"], |c| {
                assert_eq!(c.file_check_frequency, Duration::from_secs(1))
            }),
            (&["--address=127.0.0.1"], |c| {
                assert_eq!(c.address, ip("127.0.0.1"))
            }),
            (&["--port=0"], |c| assert_eq!(c.port, 0)),
            (&["--read-only-port=0"], |c| assert_eq!(c.read_only_port, 0)),
            (&["--healthz-bind-address=::1"], |c| {
                assert_eq!(c.healthz_bind_address, ip("::1"))
            }),
            (&["--container-runtime-endpoint=unix:///flag.sock"], |c| {
                assert_eq!(c.container_runtime_endpoint, "unix:///flag.sock")
            }),
            (&["-v", "7"], |c| assert_eq!(c.verbosity, Some(7))),
            (&["--hostname-override=  Node-A "], |c| {
                assert_eq!(c.node_name, "node-a")
            }),
            (&["--hostname-override="], |c| {
                assert_eq!(c.node_name, "my-host")
            }),
        ];
        for (flags, check) in rows {
            let mut a = vec!["--config", cfg];
            a.extend_from_slice(flags);
            let c = run_with(&dir, &a).unwrap_or_else(|e| panic!("{flags:?}: {e}"));
            assert_eq!(c.config_file.as_deref(), Some(Path::new(cfg)));
            check(&c);
        }
        // Flags are layered over the file wherever they appear on the command line.
        let c = run_with(&dir, &["--port=1", "--config", cfg]).expect("valid");
        assert_eq!(c.port, 1);
    }

    #[test]
    fn url_source_settings_come_from_the_file_unless_flags_say_otherwise() {
        let dir = TempDir::new("url");
        let cfg = dir.write(
            "c.yaml",
            &format!(
                "{HEAD}staticPodURL: http://from/file\nhttpCheckFrequency: 7s\n\
                 staticPodURLHeader:\n  X-A: [one, two]\n  X-B: [b]\n"
            ),
        );
        let cfg = cfg.to_str().expect("utf-8");
        let c = run_with(&dir, &["--config", cfg]).expect("valid");
        assert_eq!(c.manifest_url.as_deref(), Some("http://from/file"));
        assert_eq!(c.http_check_frequency, Duration::from_secs(7));
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(
            c.manifest_url_headers,
            [pair("X-A", "one"), pair("X-A", "two"), pair("X-B", "b")]
        );
        assert!(!c
            .unsupported_fields
            .iter()
            .any(|f| f.contains("staticPodURL")));
        let c = run_with(
            &dir,
            &[
                "--config",
                cfg,
                "--manifest-url=",
                "--manifest-url-header=X-C:c",
            ],
        )
        .expect("valid");
        assert_eq!(c.manifest_url, None, "an empty flag turns the source off");
        assert_eq!(c.manifest_url_headers, [pair("X-C", "c")]);
        let e = run_with(&dir, &["--etcd-certfile=/c"]).expect_err("pair");
        assert_eq!(
            e.to_string(),
            "invalid value \"/c\" for flag --etcd-certfile: needs --etcd-keyfile too"
        );
        let c = run_with(
            &dir,
            &["--etcd-servers=http://127.0.0.1:1", "--kubeconfig="],
        )
        .expect("valid");
        assert_eq!(c.etcd_servers, ["http://127.0.0.1:1"]);
        assert_eq!(c.etcd_prefix, "/registry/hosts/my-host/");
        assert_eq!(c.kubeconfig, None);
    }

    #[test]
    fn read_only_port_defaults_to_0_with_a_config_file_and_10255_without() {
        let dir = TempDir::new("readonly");
        let cfg = dir.write("c.yaml", HEAD);
        let cfg = cfg.to_str().expect("utf-8 path");
        assert_eq!(run_with(&dir, &[]).expect("valid").read_only_port, 10255);
        assert_eq!(
            run_with(&dir, &["--config", cfg])
                .expect("valid")
                .read_only_port,
            0
        );
        let c = run_with(&dir, &["--config", cfg, "--read-only-port=10255"]).expect("valid");
        assert_eq!(c.read_only_port, 10255);
        // Everything else keeps the flag defaults.
        let c = run_with(&dir, &["--config", cfg]).expect("valid");
        assert_eq!(c.port, 10250);
        assert_eq!(c.healthz_port, 10248);
    }

    #[test]
    fn enable_server_false_turns_the_kubelet_port_off_unless_a_flag_sets_it() {
        let dir = TempDir::new("enableserver");
        let cfg = dir.write(
            "c.yaml",
            &format!("{HEAD}enableServer: false\nport: 10250\n"),
        );
        let cfg = cfg.to_str().expect("utf-8 path");
        assert_eq!(run_with(&dir, &["--config", cfg]).expect("valid").port, 0);
        assert_eq!(
            run_with(&dir, &["--config", cfg, "--port=10250"])
                .expect("valid")
                .port,
            10250
        );
    }

    #[test]
    fn unsupported_fields_are_reported() {
        let dir = TempDir::new("unsupported");
        let cfg = dir.write(
            "c.yaml",
            &format!("{HEAD}tlsCurvePreferences: [CurveP256]\ncgroupDriver: systemd\n"),
        );
        let c = run_with(&dir, &["--config", cfg.to_str().expect("utf-8")]).expect("valid");
        assert_eq!(
            c.unsupported_fields,
            vec!["tlsCurvePreferences", "cgroupDriver"]
        );
        c.log_unsupported_fields();
    }

    #[test]
    fn help_and_version_read_no_file() {
        let dir = TempDir::new("help");
        let host = dir.0.join("hostname");
        let missing = ["--config", "/nonexistent/rkubelet.yaml"];
        let mut a = missing.to_vec();
        a.push("--help");
        assert!(
            matches!(load_with(&argv(&a), &host), Ok(Loaded::Help(h)) if h.contains("--config"))
        );
        let mut a = missing.to_vec();
        a.push("--version");
        assert!(matches!(
            load_with(&argv(&a), &host),
            Ok(Loaded::Version(_))
        ));
    }

    #[test]
    fn errors_are_one_line_and_name_the_culprit() {
        let dir = TempDir::new("errors");
        let bad = dir.write("bad.yaml", &format!("{HEAD}fooBar: 1\n"));
        let bad = bad.to_str().expect("utf-8");
        let missing = dir.0.join("missing.yaml");
        let missing = missing.to_str().expect("utf-8");
        let cases: Vec<(Vec<&str>, String)> = vec![
            (vec!["--foo"], "unknown flag: --foo".into()),
            (
                vec!["--healthz-port=abc"],
                "invalid value \"abc\" for flag --healthz-port: not a port number (0-65535)".into(),
            ),
            (
                vec!["--config", bad],
                format!("config file {bad}: unknown field \"fooBar\""),
            ),
            (
                vec!["--config", missing],
                format!(
                    "config file {missing}: cannot read it: No such file or directory (os error 2)"
                ),
            ),
        ];
        let fifo = dir.0.join("fifo.yaml");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
        )
        .expect("mkfifo");
        let fifo = fifo.to_str().expect("utf-8");
        let huge = dir.write("huge.yaml", &format!("{HEAD}#{}\n", "x".repeat(1 << 20)));
        let huge = huge.to_str().expect("utf-8");
        let cases = cases.into_iter().chain([
            (
                vec!["--config", fifo],
                format!("config file {fifo}: cannot read it: is a FIFO, not a regular file"),
            ),
            (
                vec!["--config", "/dev/zero"],
                "config file /dev/zero: cannot read it: is a character device, not a regular file"
                    .to_string(),
            ),
            (
                vec!["--config", dir.0.to_str().expect("utf-8")],
                format!(
                    "config file {}: cannot read it: is a directory, not a regular file",
                    dir.0.display()
                ),
            ),
            (
                vec!["--config", huge],
                format!(
                    "config file {huge}: cannot read it: is {} bytes, more than the 1048576 bytes allowed",
                    HEAD.len() + 2 + (1 << 20)
                ),
            ),
            (
                vec!["--hostname-override", "Bad Name!/x"],
                "invalid value \"Bad Name!/x\" for flag --hostname-override: a lowercase RFC 1123 \
                 subdomain must consist of lower case alphanumeric characters, '-' or '.', and \
                 must start and end with an alphanumeric character (e.g. 'example.com', regex \
                 used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
                    .to_string(),
            ),
        ]);
        for (a, want) in cases {
            let e = run_with(&dir, &a).expect_err(&want);
            let msg = base::loops::error_chain(&e);
            assert_eq!(msg, want);
            assert!(!msg.contains('\n'));
        }
    }

    #[test]
    fn node_name_comes_from_the_host_name_file_without_an_override() {
        let dir = TempDir::new("nodename");
        let empty = dir.write("empty", " \n");
        assert!(matches!(
            node_name(None, &empty),
            Err(ConfigError::EmptyNodeName)
        ));
        let e = node_name(None, &dir.0.join("nope")).expect_err("missing file");
        assert!(
            e.to_string().starts_with("cannot read the host name from "),
            "{e}"
        );
        assert_eq!(
            node_name(Some("X"), &dir.0.join("nope")).expect("override"),
            "x"
        );
        assert_eq!(
            node_name(Some(" Node-1.Example.COM "), &empty).expect("lowercased first"),
            "node-1.example.com"
        );
        for bad in ["a..b", "-a", "a-", "a_b", ".a", "a/b", &"a".repeat(254)] {
            assert!(node_name(Some(bad), &empty).is_err(), "{bad:?}");
        }
        let odd = dir.write("odd", "my_host\n");
        let e = node_name(None, &odd).expect_err("underscore");
        assert!(
            e.to_string().starts_with(
                "the host name \"my_host\" is not a valid node name: a lowercase RFC 1123"
            ),
            "{e}"
        );
        // The real one, on Linux.
        assert!(!node_name(None, Path::new(defaults::HOSTNAME_FILE))
            .expect("host")
            .is_empty());
    }
}
