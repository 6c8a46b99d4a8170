//! The `--config` file: a `KubeletConfiguration` (`kubelet.config.k8s.io/v1beta1`) read
//! from YAML (or JSON) into the settings rkubelet implements.
//!
//! [`KubeletConfiguration`] names every field of upstream's v1beta1 type
//! (`staging/src/k8s.io/kubelet/config/v1beta1/types.go`), so a kubeadm-written file is
//! accepted as it is; a name that upstream does not know is a typo and is refused
//! (serde's `deny_unknown_fields`, checked first by hand so the error names the field
//! plainly). Fields rkubelet does not implement yet are accepted and reported by name so
//! the caller can log them once.
//!
//! Zero and empty values mean "unset", as in upstream's defaulting
//! (`pkg/kubelet/apis/config/v1beta1/defaults.go`): `port: 0` gives the default 10250,
//! `syncFrequency: 0s` gives `1m`, `address: ""` gives `0.0.0.0`. Only `healthzPort`
//! (a pointer upstream) and `readOnlyPort` (whose default is 0) can be set to 0 to
//! disable their server. Relative paths are resolved against the file's directory, as
//! upstream's `resolveRelativePaths` does.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{self, Visitor};
use serde::Deserialize;
use serde_yaml::Value;

use super::duration::parse_duration;
use super::{ConfigError, MAX_VERBOSITY};
use crate::fsutil::{self, ReadError};

/// The only `apiVersion` upstream's kubelet reads today.
pub const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
/// The `kind` of the file.
pub const KIND: &str = "KubeletConfiguration";

/// Declares [`KubeletConfiguration`]: the fields rkubelet reads, then every other
/// upstream field, accepted as an untyped value so that its presence can be reported.
macro_rules! kubelet_configuration {
    ($($field:ident = $name:literal,)*) => {
        /// Upstream's v1beta1 `KubeletConfiguration`, field by field. Values stay
        /// untyped here; [`read`] converts the implemented ones with errors that name
        /// the field.
        #[derive(Debug, Default, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct KubeletConfiguration {
            /// Must be [`API_VERSION`].
            #[serde(rename = "apiVersion")]
            pub api_version: Option<Value>,
            /// Must be [`KIND`].
            pub kind: Option<Value>,
            /// `false`: no authenticated (10250) server; rkubelet sets the port to 0.
            #[serde(rename = "enableServer")]
            pub enable_server: Option<Value>,
            /// A directory of manifests or one manifest file.
            #[serde(rename = "staticPodPath")]
            pub static_pod_path: Option<Value>,
            /// Pod resync period.
            #[serde(rename = "syncFrequency")]
            pub sync_frequency: Option<Value>,
            /// Full re-list period of `staticPodPath`.
            #[serde(rename = "fileCheckFrequency")]
            pub file_check_frequency: Option<Value>,
            /// Poll period of `staticPodURL`.
            #[serde(rename = "httpCheckFrequency")]
            pub http_check_frequency: Option<Value>,
            /// A URL of static pod manifests.
            #[serde(rename = "staticPodURL")]
            pub static_pod_url: Option<Value>,
            /// Headers sent to `staticPodURL`: a map of name to a list of values.
            #[serde(rename = "staticPodURLHeader")]
            pub static_pod_url_header: Option<Value>,
            /// Where the read-only and authenticated servers listen.
            pub address: Option<Value>,
            /// The authenticated server's port.
            pub port: Option<Value>,
            /// The read-only server's port; 0 disables it.
            #[serde(rename = "readOnlyPort")]
            pub read_only_port: Option<Value>,
            /// The healthz server's port; 0 disables it.
            #[serde(rename = "healthzPort")]
            pub healthz_port: Option<Value>,
            /// The healthz server's address.
            #[serde(rename = "healthzBindAddress")]
            pub healthz_bind_address: Option<Value>,
            /// The container runtime's endpoint.
            #[serde(rename = "containerRuntimeEndpoint")]
            pub container_runtime_endpoint: Option<Value>,
            /// component-base's logging options; `verbosity` is implemented.
            pub logging: Option<Logging>,
            /// The nameservers of `ClusterFirst` pods.
            #[serde(rename = "clusterDNS")]
            pub cluster_dns: Option<Value>,
            /// The cluster's DNS domain.
            #[serde(rename = "clusterDomain")]
            pub cluster_domain: Option<Value>,
            /// The resolver file `Default` pods get.
            #[serde(rename = "resolvConf")]
            pub resolv_conf: Option<Value>,
            /// One image pull at a time (default true).
            #[serde(rename = "serializeImagePulls")]
            pub serialize_image_pulls: Option<Value>,
            /// With `serializeImagePulls: false`, how many pulls at once.
            #[serde(rename = "maxParallelImagePulls")]
            pub max_parallel_image_pulls: Option<Value>,
            $(
                #[doc = concat!("`", $name, "`: accepted, not implemented.")]
                #[serde(rename = $name)]
                pub $field: Option<Value>,
            )*
        }

        impl KubeletConfiguration {
            /// The names of the upstream fields present in the file that rkubelet does
            /// not implement, in declaration order.
            fn unimplemented_present(&self) -> Vec<String> {
                let mut present = Vec::new();
                $( if self.$field.is_some() { present.push($name.to_string()); } )*
                present
            }
        }
    };
}

kubelet_configuration! {
    pod_logs_dir = "podLogsDir",
    tls_cert_file = "tlsCertFile",
    tls_private_key_file = "tlsPrivateKeyFile",
    tls_cipher_suites = "tlsCipherSuites",
    tls_curve_preferences = "tlsCurvePreferences",
    tls_min_version = "tlsMinVersion",
    rotate_certificates = "rotateCertificates",
    server_tls_bootstrap = "serverTLSBootstrap",
    authentication = "authentication",
    authorization = "authorization",
    registry_pull_qps = "registryPullQPS",
    registry_burst = "registryBurst",
    image_pull_credentials_verification_policy = "imagePullCredentialsVerificationPolicy",
    preloaded_images_verification_allowlist = "preloadedImagesVerificationAllowlist",
    event_record_qps = "eventRecordQPS",
    event_burst = "eventBurst",
    enable_debugging_handlers = "enableDebuggingHandlers",
    enable_contention_profiling = "enableContentionProfiling",
    oom_score_adj = "oomScoreAdj",
    streaming_connection_idle_timeout = "streamingConnectionIdleTimeout",
    node_status_update_frequency = "nodeStatusUpdateFrequency",
    node_status_report_frequency = "nodeStatusReportFrequency",
    node_lease_duration_seconds = "nodeLeaseDurationSeconds",
    image_minimum_gc_age = "imageMinimumGCAge",
    image_maximum_gc_age = "imageMaximumGCAge",
    image_gc_high_threshold_percent = "imageGCHighThresholdPercent",
    image_gc_low_threshold_percent = "imageGCLowThresholdPercent",
    volume_stats_agg_period = "volumeStatsAggPeriod",
    kubelet_cgroups = "kubeletCgroups",
    system_cgroups = "systemCgroups",
    cgroup_root = "cgroupRoot",
    cgroups_per_qos = "cgroupsPerQOS",
    cgroup_driver = "cgroupDriver",
    cpu_manager_policy = "cpuManagerPolicy",
    single_process_oom_kill = "singleProcessOOMKill",
    cpu_manager_policy_options = "cpuManagerPolicyOptions",
    cpu_manager_reconcile_period = "cpuManagerReconcilePeriod",
    dra_manager_reconcile_period = "draManagerReconcilePeriod",
    memory_manager_policy = "memoryManagerPolicy",
    topology_manager_policy = "topologyManagerPolicy",
    topology_manager_scope = "topologyManagerScope",
    topology_manager_policy_options = "topologyManagerPolicyOptions",
    qos_reserved = "qosReserved",
    runtime_request_timeout = "runtimeRequestTimeout",
    hairpin_mode = "hairpinMode",
    max_pods = "maxPods",
    pod_cidr = "podCIDR",
    pod_pids_limit = "podPidsLimit",
    run_once = "runOnce",
    cpu_cfs_quota = "cpuCFSQuota",
    cpu_cfs_quota_period = "cpuCFSQuotaPeriod",
    node_status_max_images = "nodeStatusMaxImages",
    max_open_files = "maxOpenFiles",
    content_type = "contentType",
    kube_api_qps = "kubeAPIQPS",
    kube_api_burst = "kubeAPIBurst",
    eviction_hard = "evictionHard",
    eviction_soft = "evictionSoft",
    eviction_soft_grace_period = "evictionSoftGracePeriod",
    eviction_pressure_transition_period = "evictionPressureTransitionPeriod",
    eviction_max_pod_grace_period = "evictionMaxPodGracePeriod",
    eviction_minimum_reclaim = "evictionMinimumReclaim",
    merge_default_eviction_settings = "mergeDefaultEvictionSettings",
    pods_per_core = "podsPerCore",
    enable_controller_attach_detach = "enableControllerAttachDetach",
    protect_kernel_defaults = "protectKernelDefaults",
    make_iptables_util_chains = "makeIPTablesUtilChains",
    iptables_masquerade_bit = "iptablesMasqueradeBit",
    iptables_drop_bit = "iptablesDropBit",
    feature_gates = "featureGates",
    fail_swap_on = "failSwapOn",
    memory_swap = "memorySwap",
    container_log_max_size = "containerLogMaxSize",
    container_log_max_files = "containerLogMaxFiles",
    container_log_max_workers = "containerLogMaxWorkers",
    container_log_monitor_interval = "containerLogMonitorInterval",
    config_map_and_secret_change_detection_strategy = "configMapAndSecretChangeDetectionStrategy",
    system_reserved = "systemReserved",
    kube_reserved = "kubeReserved",
    reserved_system_cpus = "reservedSystemCPUs",
    show_hidden_metrics_for_version = "showHiddenMetricsForVersion",
    system_reserved_cgroup = "systemReservedCgroup",
    kube_reserved_cgroup = "kubeReservedCgroup",
    enforce_node_allocatable = "enforceNodeAllocatable",
    allowed_unsafe_sysctls = "allowedUnsafeSysctls",
    volume_plugin_dir = "volumePluginDir",
    provider_id = "providerID",
    kernel_memcg_notification = "kernelMemcgNotification",
    enable_system_log_handler = "enableSystemLogHandler",
    enable_system_log_query = "enableSystemLogQuery",
    shutdown_grace_period = "shutdownGracePeriod",
    shutdown_grace_period_critical_pods = "shutdownGracePeriodCriticalPods",
    shutdown_grace_period_by_pod_priority = "shutdownGracePeriodByPodPriority",
    crash_loop_back_off = "crashLoopBackOff",
    reserved_memory = "reservedMemory",
    enable_profiling_handler = "enableProfilingHandler",
    enable_debug_flags_handler = "enableDebugFlagsHandler",
    seccomp_default = "seccompDefault",
    memory_throttling_factor = "memoryThrottlingFactor",
    memory_reservation_policy = "memoryReservationPolicy",
    register_with_taints = "registerWithTaints",
    register_node = "registerNode",
    tracing = "tracing",
    local_storage_capacity_isolation = "localStorageCapacityIsolation",
    image_service_endpoint = "imageServiceEndpoint",
    fail_cgroup_v1 = "failCgroupV1",
    user_namespaces = "userNamespaces",
    pod_housekeeping_period = "podHousekeepingPeriod",
}

/// component-base's `LoggingConfiguration` (`logging:` in the file).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Logging {
    /// klog's `-v`: 0 (info) to 10 (trace everything). Implemented.
    pub verbosity: Option<Value>,
    /// `text` or `json`: accepted, not implemented.
    pub format: Option<Value>,
    /// Log flush period: accepted, not implemented.
    #[serde(rename = "flushFrequency")]
    pub flush_frequency: Option<Value>,
    /// Per-file verbosity: accepted, not implemented.
    pub vmodule: Option<Value>,
    /// Format-specific options: accepted, not implemented.
    pub options: Option<Value>,
}

impl Logging {
    fn unimplemented_present(&self) -> Vec<String> {
        [
            ("logging.format", &self.format),
            ("logging.flushFrequency", &self.flush_frequency),
            ("logging.vmodule", &self.vmodule),
            ("logging.options", &self.options),
        ]
        .into_iter()
        .filter(|(_, v)| v.is_some())
        .map(|(n, _)| n.to_string())
        .collect()
    }
}

/// What a config file sets, typed and validated. `None`: the file leaves it unset.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FileSettings {
    /// `enableServer`.
    pub enable_server: Option<bool>,
    /// `staticPodPath`, resolved against the file's directory.
    pub static_pod_path: Option<PathBuf>,
    /// `syncFrequency`.
    pub sync_frequency: Option<Duration>,
    /// `fileCheckFrequency`.
    pub file_check_frequency: Option<Duration>,
    /// `httpCheckFrequency`.
    pub http_check_frequency: Option<Duration>,
    /// `staticPodURL`.
    pub static_pod_url: Option<String>,
    /// `staticPodURLHeader`, flattened to (name, value) in order.
    pub static_pod_url_headers: Vec<(String, String)>,
    /// `address`.
    pub address: Option<IpAddr>,
    /// `port`.
    pub port: Option<u16>,
    /// `readOnlyPort`.
    pub read_only_port: Option<u16>,
    /// `healthzPort`.
    pub healthz_port: Option<u16>,
    /// `healthzBindAddress`.
    pub healthz_bind_address: Option<IpAddr>,
    /// `containerRuntimeEndpoint`.
    pub container_runtime_endpoint: Option<String>,
    /// `logging.verbosity`.
    pub verbosity: Option<u8>,
    /// `clusterDNS`.
    pub cluster_dns: Option<Vec<String>>,
    /// `clusterDomain`.
    pub cluster_domain: Option<String>,
    /// `resolvConf`, resolved against the file's directory; `Some("")` disables it.
    pub resolv_conf: Option<String>,
    /// `serializeImagePulls`.
    pub serialize_image_pulls: Option<bool>,
    /// `maxParallelImagePulls` (at least 1; more only without serialized pulls).
    pub max_parallel_image_pulls: Option<u32>,
    /// Upstream fields present in the file that rkubelet ignores.
    pub unsupported: Vec<String>,
}

/// The largest config file read. A `KubeletConfiguration` is a few KiB; a bigger file
/// (or `/dev/zero`) is a mistake that must not eat the node's memory before start-up.
pub const MAX_CONFIG_FILE_BYTES: u64 = 1024 * 1024;

/// Reads and validates the config file at `path`. Only a regular file is read (a FIFO
/// would block start-up for good, a device would never end), at most
/// [`MAX_CONFIG_FILE_BYTES`].
pub fn read(path: &Path) -> Result<FileSettings, ConfigError> {
    let fail = |source| ConfigError::ReadFile {
        path: path.to_path_buf(),
        source,
    };
    let (bytes, _) = fsutil::read_regular(path, MAX_CONFIG_FILE_BYTES).map_err(|e| match e {
        ReadError::Io(e) => fail(e),
        other => fail(std::io::Error::other(other.to_string())),
    })?;
    let text = String::from_utf8(bytes).map_err(|_| {
        fail(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        ))
    })?;
    parse(path, &text)
}

/// Parses the text of a config file; `path` names it in errors and anchors relative
/// paths.
pub fn parse(path: &Path, text: &str) -> Result<FileSettings, ConfigError> {
    let doc: Value = serde_yaml::from_str(text).map_err(|source| ConfigError::ParseFile {
        path: path.to_path_buf(),
        source,
    })?;
    let map = match &doc {
        Value::Mapping(m) => m,
        other => {
            return Err(ConfigError::NotKubeletConfiguration {
                path: path.to_path_buf(),
                reason: format!("expected a mapping, found {}", describe(other)),
            })
        }
    };
    check_type_meta(path, map.get("apiVersion"), "apiVersion", API_VERSION)?;
    check_type_meta(path, map.get("kind"), "kind", KIND)?;
    check_known_fields(path, map, "", struct_fields::<KubeletConfiguration>())?;
    if let Some(Value::Mapping(logging)) = map.get("logging") {
        check_known_fields(path, logging, "logging.", struct_fields::<Logging>())?;
    }
    // Every key is known and every value untyped, so this only fails on a `logging`
    // that is not a mapping.
    let cfg: KubeletConfiguration =
        serde_yaml::from_value(doc.clone()).map_err(|e| ConfigError::InvalidField {
            path: path.to_path_buf(),
            field: "logging".into(),
            reason: e.to_string(),
        })?;
    settings(path, cfg)
}

fn settings(path: &Path, cfg: KubeletConfiguration) -> Result<FileSettings, ConfigError> {
    let field = |name: &str, reason: String| ConfigError::InvalidField {
        path: path.to_path_buf(),
        field: name.into(),
        reason,
    };
    let base = path.parent().unwrap_or(Path::new(""));
    let mut unsupported = cfg.unimplemented_present();
    let logging = cfg.logging.unwrap_or_default();
    unsupported.extend(logging.unimplemented_present());

    let string = |name: &str, v: &Option<Value>| string_field(v).map_err(|r| field(name, r));
    let port = |name: &str, v: &Option<Value>| -> Result<Option<u16>, ConfigError> {
        v.as_ref()
            .map(as_port)
            .transpose()
            .map_err(|r| field(name, r))
    };
    let duration = |name: &str, v: &Option<Value>| -> Result<Option<Duration>, ConfigError> {
        let d = v
            .as_ref()
            .map(as_duration)
            .transpose()
            .map_err(|r| field(name, r))?;
        // Upstream defaulting treats a zero duration as unset.
        Ok(d.filter(|d| !d.is_zero()))
    };
    let ip = |name: &str, v: &Option<Value>| -> Result<Option<IpAddr>, ConfigError> {
        string(name, v)?
            .map(|s| {
                s.parse::<IpAddr>().map_err(|_| {
                    field(
                        name,
                        invalid(&Value::String(s.clone()), "not an IP address"),
                    )
                })
            })
            .transpose()
    };

    let serialize_image_pulls = cfg
        .serialize_image_pulls
        .as_ref()
        .map(|v| v.as_bool().ok_or_else(|| invalid(v, "not a boolean")))
        .transpose()
        .map_err(|r| field("serializeImagePulls", r))?;
    let max_parallel_image_pulls =
        image_pulls(serialize_image_pulls, cfg.max_parallel_image_pulls.as_ref())
            .map_err(|r| field("maxParallelImagePulls", r))?;

    Ok(FileSettings {
        enable_server: cfg
            .enable_server
            .as_ref()
            .map(|v| v.as_bool().ok_or_else(|| invalid(v, "not a boolean")))
            .transpose()
            .map_err(|r| field("enableServer", r))?,
        static_pod_path: string("staticPodPath", &cfg.static_pod_path)?.map(|p| base.join(p)),
        sync_frequency: duration("syncFrequency", &cfg.sync_frequency)?,
        file_check_frequency: duration("fileCheckFrequency", &cfg.file_check_frequency)?,
        http_check_frequency: duration("httpCheckFrequency", &cfg.http_check_frequency)?,
        static_pod_url: string("staticPodURL", &cfg.static_pod_url)?
            .map(|u| super::flags::url_or_empty(&u).map_err(|r| field("staticPodURL", r)))
            .transpose()?,
        static_pod_url_headers: header_map(&cfg.static_pod_url_header)
            .map_err(|r| field("staticPodURLHeader", r))?,
        address: ip("address", &cfg.address)?,
        // Upstream defaulting treats `port: 0` as unset (10250).
        port: port("port", &cfg.port)?.filter(|p| *p != 0),
        read_only_port: port("readOnlyPort", &cfg.read_only_port)?,
        healthz_port: port("healthzPort", &cfg.healthz_port)?,
        healthz_bind_address: ip("healthzBindAddress", &cfg.healthz_bind_address)?,
        container_runtime_endpoint: string(
            "containerRuntimeEndpoint",
            &cfg.container_runtime_endpoint,
        )?,
        verbosity: logging
            .verbosity
            .as_ref()
            .map(as_verbosity)
            .transpose()
            .map_err(|r| field("logging.verbosity", r))?,
        cluster_dns: cfg
            .cluster_dns
            .as_ref()
            .map(as_ip_list)
            .transpose()
            .map_err(|r| field("clusterDNS", r))?,
        cluster_domain: string("clusterDomain", &cfg.cluster_domain)?,
        // An explicit "" turns the node's resolver file off, so it is kept.
        resolv_conf: match &cfg.resolv_conf {
            Some(Value::String(s)) if s.is_empty() => Some(String::new()),
            v => string("resolvConf", v)?.map(|p| base.join(p).display().to_string()),
        },
        serialize_image_pulls,
        max_parallel_image_pulls,
        unsupported,
    })
}

/// `maxParallelImagePulls`, checked as upstream's `ValidateKubeletConfiguration`: a
/// positive number, and more than 1 only when `serializeImagePulls` is false.
fn image_pulls(serialize: Option<bool>, v: Option<&Value>) -> Result<Option<u32>, String> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let n = v.as_i64().ok_or_else(|| invalid(v, "not an integer"))?;
    if n < 1 {
        return Err(format!("{n} must be a positive number"));
    }
    let n = u32::try_from(n).map_err(|_| invalid(v, "too large"))?;
    if n > 1 && serialize.unwrap_or(super::defaults::SERIALIZE_IMAGE_PULLS) {
        return Err("cannot be larger than 1 unless serializeImagePulls is set to false".into());
    }
    Ok(Some(n))
}

/// `staticPodURLHeader`: a map of header name to a list of values (Go's
/// `map[string][]string`), flattened in the file's order.
fn header_map(v: &Option<Value>) -> Result<Vec<(String, String)>, String> {
    let map = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Mapping(m)) => m,
        Some(other) => return Err(invalid(other, "not a map of header name to values")),
    };
    let mut out = Vec::new();
    for (name, values) in map {
        let Value::String(name) = name else {
            return Err(invalid(name, "not a header name"));
        };
        let values = match values {
            Value::Sequence(s) => s.clone(),
            Value::String(s) => vec![Value::String(s.clone())],
            other => return Err(invalid(other, "not a list of header values")),
        };
        for value in values {
            let Value::String(value) = value else {
                return Err(invalid(&value, "not a header value"));
            };
            // The name is checked as the flag checks it; the value is taken whole
            // (commas included: only the flag's syntax splits on them).
            super::flags::headers(&format!("{name}:"))?;
            out.push((name.clone(), value));
        }
    }
    Ok(out)
}

/// A string field; empty means unset, as in upstream's defaulting.
fn string_field(v: &Option<Value>) -> Result<Option<String>, String> {
    match v {
        None => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(invalid(other, "not a string")),
    }
}

/// Checks `apiVersion` or `kind`.
fn check_type_meta(
    path: &Path,
    v: Option<&Value>,
    name: &str,
    want: &str,
) -> Result<(), ConfigError> {
    let reason = match v {
        Some(Value::String(s)) if s == want => return Ok(()),
        None | Some(Value::Null) => format!("{name} is missing (want {want})"),
        Some(other) => format!("{name} {} is not {want}", describe(other)),
    };
    Err(ConfigError::NotKubeletConfiguration {
        path: path.to_path_buf(),
        reason,
    })
}

/// Refuses the first key that is not among `known`, naming it with `prefix`.
fn check_known_fields(
    path: &Path,
    map: &serde_yaml::Mapping,
    prefix: &str,
    known: &[&str],
) -> Result<(), ConfigError> {
    for key in map.keys() {
        let known_key = matches!(key, Value::String(k) if known.contains(&k.as_str()));
        if !known_key {
            let name = match key {
                Value::String(k) => k.clone(),
                other => describe(other),
            };
            return Err(ConfigError::UnknownField {
                path: path.to_path_buf(),
                field: format!("{prefix}{name}"),
            });
        }
    }
    Ok(())
}

/// A port number, 0..=65535. Upstream's fields are int32, so only YAML integers count.
fn as_port(v: &Value) -> Result<u16, String> {
    v.as_u64()
        .and_then(|n| u16::try_from(n).ok())
        .ok_or_else(|| invalid(v, "not a port number (0-65535)"))
}

/// A Go duration string, as `metav1.Duration` reads it.
fn as_duration(v: &Value) -> Result<Duration, String> {
    match v {
        Value::String(s) => parse_duration(s).map_err(|e| format!("invalid duration {s:?}: {e}")),
        other => Err(invalid(other, "not a duration string such as \"20s\"")),
    }
}

/// A list of IP addresses (`clusterDNS`).
fn as_ip_list(v: &Value) -> Result<Vec<String>, String> {
    let Value::Sequence(items) = v else {
        return Err(invalid(v, "not a list of IP addresses"));
    };
    items
        .iter()
        .map(|i| match i {
            Value::String(s) if s.parse::<IpAddr>().is_ok() => Ok(s.clone()),
            other => Err(invalid(other, "not an IP address")),
        })
        .collect()
}

/// A klog verbosity level.
fn as_verbosity(v: &Value) -> Result<u8, String> {
    v.as_u64()
        .and_then(|n| u8::try_from(n).ok())
        .filter(|n| *n <= MAX_VERBOSITY)
        .ok_or_else(|| invalid(v, &format!("not a verbosity level (0-{MAX_VERBOSITY})")))
}

fn invalid(v: &Value, reason: &str) -> String {
    format!("invalid value {}: {reason}", describe(v))
}

/// A value, short enough for a one-line message.
fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("{s:?}"),
        Value::Sequence(_) => "a list".into(),
        Value::Mapping(_) => "a mapping".into(),
        Value::Tagged(t) => format!("a value tagged {}", t.tag),
    }
}

/// The field names a derived `Deserialize` of a struct knows (after renames). serde
/// passes them to `deserialize_struct`; a deserializer that only records them and
/// fails gives us the list, so the struct stays the one place that names the fields.
fn struct_fields<T: de::DeserializeOwned>() -> &'static [&'static str] {
    struct Capture<'a>(&'a mut &'static [&'static str]);

    impl<'de> de::Deserializer<'de> for Capture<'_> {
        type Error = de::value::Error;

        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("not a struct"))
        }

        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _name: &'static str,
            fields: &'static [&'static str],
            _visitor: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(de::Error::custom("fields captured"))
        }

        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map
            enum identifier ignored_any
        }
    }

    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(Capture(&mut fields));
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field name of upstream's v1beta1 `KubeletConfiguration` (types.go), plus
    /// `podHousekeepingPeriod` from the newest tree.
    const UPSTREAM_FIELDS: &[&str] = &[
        "apiVersion",
        "kind",
        "enableServer",
        "staticPodPath",
        "podLogsDir",
        "syncFrequency",
        "fileCheckFrequency",
        "httpCheckFrequency",
        "staticPodURL",
        "staticPodURLHeader",
        "address",
        "port",
        "readOnlyPort",
        "tlsCertFile",
        "tlsPrivateKeyFile",
        "tlsCipherSuites",
        "tlsCurvePreferences",
        "tlsMinVersion",
        "rotateCertificates",
        "serverTLSBootstrap",
        "authentication",
        "authorization",
        "registryPullQPS",
        "registryBurst",
        "imagePullCredentialsVerificationPolicy",
        "preloadedImagesVerificationAllowlist",
        "eventRecordQPS",
        "eventBurst",
        "enableDebuggingHandlers",
        "enableContentionProfiling",
        "healthzPort",
        "healthzBindAddress",
        "oomScoreAdj",
        "clusterDomain",
        "clusterDNS",
        "streamingConnectionIdleTimeout",
        "nodeStatusUpdateFrequency",
        "nodeStatusReportFrequency",
        "nodeLeaseDurationSeconds",
        "imageMinimumGCAge",
        "imageMaximumGCAge",
        "imageGCHighThresholdPercent",
        "imageGCLowThresholdPercent",
        "volumeStatsAggPeriod",
        "kubeletCgroups",
        "systemCgroups",
        "cgroupRoot",
        "cgroupsPerQOS",
        "cgroupDriver",
        "cpuManagerPolicy",
        "singleProcessOOMKill",
        "cpuManagerPolicyOptions",
        "cpuManagerReconcilePeriod",
        "draManagerReconcilePeriod",
        "memoryManagerPolicy",
        "topologyManagerPolicy",
        "topologyManagerScope",
        "topologyManagerPolicyOptions",
        "qosReserved",
        "runtimeRequestTimeout",
        "hairpinMode",
        "maxPods",
        "podCIDR",
        "podPidsLimit",
        "resolvConf",
        "runOnce",
        "cpuCFSQuota",
        "cpuCFSQuotaPeriod",
        "nodeStatusMaxImages",
        "maxOpenFiles",
        "contentType",
        "kubeAPIQPS",
        "kubeAPIBurst",
        "serializeImagePulls",
        "maxParallelImagePulls",
        "evictionHard",
        "evictionSoft",
        "evictionSoftGracePeriod",
        "evictionPressureTransitionPeriod",
        "evictionMaxPodGracePeriod",
        "evictionMinimumReclaim",
        "mergeDefaultEvictionSettings",
        "podsPerCore",
        "enableControllerAttachDetach",
        "protectKernelDefaults",
        "makeIPTablesUtilChains",
        "iptablesMasqueradeBit",
        "iptablesDropBit",
        "featureGates",
        "failSwapOn",
        "memorySwap",
        "containerLogMaxSize",
        "containerLogMaxFiles",
        "containerLogMaxWorkers",
        "containerLogMonitorInterval",
        "configMapAndSecretChangeDetectionStrategy",
        "systemReserved",
        "kubeReserved",
        "reservedSystemCPUs",
        "showHiddenMetricsForVersion",
        "systemReservedCgroup",
        "kubeReservedCgroup",
        "enforceNodeAllocatable",
        "allowedUnsafeSysctls",
        "volumePluginDir",
        "providerID",
        "kernelMemcgNotification",
        "logging",
        "enableSystemLogHandler",
        "enableSystemLogQuery",
        "shutdownGracePeriod",
        "shutdownGracePeriodCriticalPods",
        "shutdownGracePeriodByPodPriority",
        "crashLoopBackOff",
        "reservedMemory",
        "enableProfilingHandler",
        "enableDebugFlagsHandler",
        "seccompDefault",
        "memoryThrottlingFactor",
        "memoryReservationPolicy",
        "registerWithTaints",
        "registerNode",
        "tracing",
        "localStorageCapacityIsolation",
        "containerRuntimeEndpoint",
        "imageServiceEndpoint",
        "failCgroupV1",
        "userNamespaces",
        "podHousekeepingPeriod",
    ];

    const HEAD: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

    fn p() -> &'static Path {
        Path::new("/etc/x.yaml")
    }

    fn parse_body(body: &str) -> Result<FileSettings, ConfigError> {
        parse(p(), &format!("{HEAD}{body}"))
    }

    #[test]
    fn struct_names_exactly_the_upstream_fields() {
        let mut ours: Vec<&str> = struct_fields::<KubeletConfiguration>().to_vec();
        let mut theirs = UPSTREAM_FIELDS.to_vec();
        ours.sort_unstable();
        theirs.sort_unstable();
        assert_eq!(ours, theirs);
    }

    #[test]
    fn every_upstream_field_is_accepted_and_unimplemented_ones_are_reported() {
        let mut body = String::new();
        for f in UPSTREAM_FIELDS
            .iter()
            .filter(|f| !["apiVersion", "kind"].contains(f))
        {
            let value = match *f {
                "syncFrequency" | "fileCheckFrequency" | "httpCheckFrequency" => "\"30s\"",
                "staticPodURL" => "http://h/pods",
                "address" | "healthzBindAddress" => "\"127.0.0.1\"",
                "port" | "readOnlyPort" | "healthzPort" => "1234",
                "enableServer" => "true",
                "staticPodPath" | "containerRuntimeEndpoint" => "/x",
                "logging" => "{verbosity: 3, format: text}",
                "clusterDNS" => "[\"10.96.0.10\"]",
                "clusterDomain" => "cluster.local",
                "resolvConf" => "/etc/resolv.conf",
                "serializeImagePulls" => "false",
                "maxParallelImagePulls" => "3",
                _ => "{}",
            };
            body.push_str(&format!("{f}: {value}\n"));
        }
        let s = parse_body(&body).expect("every upstream field is accepted");
        assert_eq!(s.verbosity, Some(3));
        assert_eq!(s.port, Some(1234));
        assert!(s.unsupported.contains(&"tlsCertFile".to_string()));
        assert!(s.unsupported.contains(&"logging.format".to_string()));
        assert!(!s.unsupported.contains(&"staticPodPath".to_string()));
        assert!(!s.unsupported.contains(&"logging".to_string()));
        // All but the type meta, the 18 implemented fields and `logging`, plus
        // `logging.format`.
        assert_eq!(s.unsupported.len(), UPSTREAM_FIELDS.len() - 21 + 1);
        assert_eq!(s.serialize_image_pulls, Some(false));
        assert_eq!(s.max_parallel_image_pulls, Some(3));
        assert_eq!(s.cluster_dns, Some(vec!["10.96.0.10".to_string()]));
        assert_eq!(s.resolv_conf.as_deref(), Some("/etc/resolv.conf"));
    }

    #[test]
    fn reads_the_implemented_fields() {
        let s = parse_body(
            "staticPodPath: /etc/kubernetes/manifests\n\
             syncFrequency: 1m30s\n\
             fileCheckFrequency: 5s\n\
             address: 127.0.0.1\n\
             port: 10260\n\
             readOnlyPort: 10255\n\
             healthzPort: 0\n\
             healthzBindAddress: \"::1\"\n\
             containerRuntimeEndpoint: unix:///run/docker.sock\n\
             enableServer: false\n\
             logging:\n  verbosity: 4\n",
        )
        .expect("valid");
        assert_eq!(
            s,
            FileSettings {
                enable_server: Some(false),
                static_pod_path: Some("/etc/kubernetes/manifests".into()),
                sync_frequency: Some(Duration::from_secs(90)),
                file_check_frequency: Some(Duration::from_secs(5)),
                address: Some("127.0.0.1".parse().expect("ip")),
                port: Some(10260),
                read_only_port: Some(10255),
                healthz_port: Some(0),
                healthz_bind_address: Some("::1".parse().expect("ip")),
                container_runtime_endpoint: Some("unix:///run/docker.sock".into()),
                verbosity: Some(4),
                unsupported: vec![],
                ..FileSettings::default()
            }
        );
    }

    #[test]
    fn image_pull_settings_are_checked_as_upstream() {
        let s =
            parse_body("serializeImagePulls: false\nmaxParallelImagePulls: 4\n").expect("valid");
        assert_eq!(
            (s.serialize_image_pulls, s.max_parallel_image_pulls),
            (Some(false), Some(4))
        );
        let s = parse_body("maxParallelImagePulls: 1\n").expect("1 with serialized pulls");
        assert_eq!(s.max_parallel_image_pulls, Some(1));
        let bad = [
            (
                "maxParallelImagePulls: 2\n",
                "config file /etc/x.yaml: field maxParallelImagePulls: cannot be larger \
                 than 1 unless serializeImagePulls is set to false",
            ),
            (
                "serializeImagePulls: false\nmaxParallelImagePulls: 0\n",
                "config file /etc/x.yaml: field maxParallelImagePulls: 0 must be a positive number",
            ),
            (
                "serializeImagePulls: \"no\"\n",
                "config file /etc/x.yaml: field serializeImagePulls: invalid value \"no\": \
                 not a boolean",
            ),
        ];
        for (body, want) in bad {
            let e = parse_body(body).expect_err(body);
            assert_eq!(crate::loops::error_chain(&e), want, "{body}");
        }
    }

    #[test]
    fn zero_and_empty_values_mean_unset_as_upstream_defaults_them() {
        let s = parse_body(
            "staticPodPath: \"\"\nsyncFrequency: 0s\nport: 0\naddress: \"\"\nhealthzPort: ~\n",
        )
        .expect("valid");
        assert_eq!(s, FileSettings::default());
    }

    #[test]
    fn relative_static_pod_path_is_resolved_against_the_file() {
        let s = parse(
            Path::new("/etc/rk/config.yaml"),
            &format!("{HEAD}staticPodPath: pods\n"),
        )
        .expect("valid");
        assert_eq!(s.static_pod_path, Some(PathBuf::from("/etc/rk/pods")));
    }

    #[test]
    fn errors_name_the_file_and_the_field() {
        let cases: &[(&str, &str)] = &[
            (
                "fooBar: 1\n",
                "config file /etc/x.yaml: unknown field \"fooBar\"",
            ),
            (
                "logging: {color: true}\n",
                "config file /etc/x.yaml: unknown field \"logging.color\"",
            ),
            (
                "syncFrequency: 1x\n",
                "config file /etc/x.yaml: field syncFrequency: invalid duration \"1x\": \
                 unknown unit \"x\" (use ns, us, ms, s, m or h)",
            ),
            (
                "fileCheckFrequency: 20\n",
                "config file /etc/x.yaml: field fileCheckFrequency: invalid value 20: \
                 not a duration string such as \"20s\"",
            ),
            (
                "healthzPort: 70000\n",
                "config file /etc/x.yaml: field healthzPort: invalid value 70000: \
                 not a port number (0-65535)",
            ),
            (
                "port: \"abc\"\n",
                "config file /etc/x.yaml: field port: invalid value \"abc\": \
                 not a port number (0-65535)",
            ),
            (
                "readOnlyPort: -1\n",
                "config file /etc/x.yaml: field readOnlyPort: invalid value -1: \
                 not a port number (0-65535)",
            ),
            (
                "address: localhost\n",
                "config file /etc/x.yaml: field address: invalid value \"localhost\": \
                 not an IP address",
            ),
            (
                "healthzBindAddress: [1]\n",
                "config file /etc/x.yaml: field healthzBindAddress: invalid value a list: \
                 not a string",
            ),
            (
                "staticPodPath: 5\n",
                "config file /etc/x.yaml: field staticPodPath: invalid value 5: not a string",
            ),
            (
                "enableServer: yes please\n",
                "config file /etc/x.yaml: field enableServer: invalid value \"yes please\": \
                 not a boolean",
            ),
            (
                "logging: {verbosity: 11}\n",
                "config file /etc/x.yaml: field logging.verbosity: invalid value 11: \
                 not a verbosity level (0-10)",
            ),
        ];
        for (body, want) in cases {
            let e = parse_body(body).expect_err(body);
            assert_eq!(e.to_string(), *want, "body {body:?}");
        }
    }

    #[test]
    fn refuses_other_kinds_and_versions() {
        let cases: &[(&str, &str)] = &[
            (
                "kind: KubeletConfiguration\n",
                "config file /etc/x.yaml: not a KubeletConfiguration: apiVersion is missing \
                 (want kubelet.config.k8s.io/v1beta1)",
            ),
            (
                "apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration\n",
                "config file /etc/x.yaml: not a KubeletConfiguration: apiVersion \
                 \"kubelet.config.k8s.io/v1\" is not kubelet.config.k8s.io/v1beta1",
            ),
            (
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: Pod\n",
                "config file /etc/x.yaml: not a KubeletConfiguration: kind \"Pod\" is not \
                 KubeletConfiguration",
            ),
            (
                "- a\n- b\n",
                "config file /etc/x.yaml: not a KubeletConfiguration: expected a mapping, \
                 found a list",
            ),
            (
                "",
                "config file /etc/x.yaml: not a KubeletConfiguration: expected a mapping, \
                 found null",
            ),
        ];
        for (text, want) in cases {
            let e = parse(p(), text).expect_err(text);
            assert_eq!(e.to_string(), *want, "text {text:?}");
        }
    }

    #[test]
    fn yaml_syntax_errors_carry_the_location() {
        let e = parse_body("port: [1\n").expect_err("bad yaml");
        let msg = e.to_string();
        assert!(
            msg.starts_with("config file /etc/x.yaml: invalid YAML: "),
            "{msg}"
        );
        assert!(msg.contains("line "), "{msg}");
    }

    #[test]
    fn json_files_are_read_too() {
        let s = parse(
            p(),
            r#"{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","port":10251}"#,
        )
        .expect("valid json");
        assert_eq!(s.port, Some(10251));
    }
}
