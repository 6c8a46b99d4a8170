//! The `--config` file: a `KubeletConfiguration` (`kubelet.config.k8s.io/v1beta1`) read
//! from YAML (or JSON) into a [`Layer`] of the settings rkubelet implements.
//!
//! [`KUBELET_CONFIGURATION_FIELDS`] names every field of upstream's v1beta1 type
//! (`staging/src/k8s.io/kubelet/config/v1beta1/types.go`), so a kubeadm-written file is
//! accepted as it is; a name that upstream does not know is a typo and is refused
//! with an error that names the field plainly ([`RKUBELET_FIELDS`], rkubelet's own,
//! are known too). Which fields are implemented, and how each is read, is the settings table's
//! business ([`super::settings`]); the others are accepted and reported by name so the
//! caller can log them once.
//!
//! Zero and empty values mean "unset", as in upstream's defaulting
//! (`pkg/kubelet/apis/config/v1beta1/defaults.go`): `port: 0` gives the default 10250,
//! `syncFrequency: 0s` gives `1m`, `address: ""` gives `0.0.0.0`. Only `healthzPort`
//! (a pointer upstream) and `readOnlyPort` (whose default is 0) can be set to 0 to
//! disable their server. Relative paths are resolved against the file's directory, as
//! upstream's `resolveRelativePaths` does.

use std::path::Path;

use serde_norway::{Mapping, Value};

use super::settings::{Layer, ENTRIES};
use super::values::yaml::{describe, lookup};
use super::ConfigError;
use base::fsutil::{self, ReadError};
// The tests below name these through `use super::*`.
#[cfg(test)]
use std::{path::PathBuf, time::Duration};

/// The only `apiVersion` upstream's kubelet reads today.
pub(crate) const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
/// The `kind` of the file.
pub(crate) const KIND: &str = "KubeletConfiguration";

/// What a config file sets: the settings [`Layer`], with the upstream fields present
/// that rkubelet ignores in `unsupported`.
pub(crate) type FileSettings = Layer;

/// Declares [`KUBELET_CONFIGURATION_FIELDS`] from upstream's field names, spelled as in
/// the file.
macro_rules! kubelet_configuration {
    ($($field:ident)*) => {
        /// Upstream's v1beta1 `KubeletConfiguration`, field by field, in types.go's
        /// order: the names a file may use. Values stay untyped; the settings table
        /// reads the implemented ones. A list, not a struct with a derived
        /// `Deserialize`: only the names are needed, and that derive over ~130 fields
        /// was 68 KiB of code in the binary (the largest single function).
        pub(crate) const KUBELET_CONFIGURATION_FIELDS: &[&str] = &["logging", $(stringify!($field),)*];
    };
}

// Every field but `logging`, in types.go's order (plus `podHousekeepingPeriod` from the
// newest tree).
kubelet_configuration! {
    apiVersion kind enableServer staticPodPath podLogsDir syncFrequency fileCheckFrequency
    httpCheckFrequency staticPodURL staticPodURLHeader address port readOnlyPort tlsCertFile
    tlsPrivateKeyFile tlsCipherSuites tlsCurvePreferences tlsMinVersion rotateCertificates
    serverTLSBootstrap authentication authorization registryPullQPS registryBurst
    imagePullCredentialsVerificationPolicy preloadedImagesVerificationAllowlist
    eventRecordQPS eventBurst enableDebuggingHandlers enableContentionProfiling healthzPort
    healthzBindAddress oomScoreAdj clusterDomain clusterDNS streamingConnectionIdleTimeout
    nodeStatusUpdateFrequency nodeStatusReportFrequency nodeLeaseDurationSeconds
    imageMinimumGCAge imageMaximumGCAge imageGCHighThresholdPercent
    imageGCLowThresholdPercent volumeStatsAggPeriod kubeletCgroups systemCgroups cgroupRoot
    cgroupsPerQOS cgroupDriver cpuManagerPolicy singleProcessOOMKill cpuManagerPolicyOptions
    cpuManagerReconcilePeriod draManagerReconcilePeriod memoryManagerPolicy
    topologyManagerPolicy topologyManagerScope topologyManagerPolicyOptions qosReserved
    runtimeRequestTimeout hairpinMode maxPods podCIDR podPidsLimit resolvConf runOnce
    cpuCFSQuota cpuCFSQuotaPeriod nodeStatusMaxImages maxOpenFiles contentType kubeAPIQPS
    kubeAPIBurst serializeImagePulls maxParallelImagePulls evictionHard evictionSoft
    evictionSoftGracePeriod evictionPressureTransitionPeriod evictionMaxPodGracePeriod
    evictionMinimumReclaim mergeDefaultEvictionSettings podsPerCore
    enableControllerAttachDetach protectKernelDefaults makeIPTablesUtilChains
    iptablesMasqueradeBit iptablesDropBit featureGates failSwapOn memorySwap
    containerLogMaxSize containerLogMaxFiles containerLogMaxWorkers
    containerLogMonitorInterval configMapAndSecretChangeDetectionStrategy systemReserved
    kubeReserved reservedSystemCPUs showHiddenMetricsForVersion systemReservedCgroup
    kubeReservedCgroup enforceNodeAllocatable allowedUnsafeSysctls volumePluginDir
    providerID kernelMemcgNotification enableSystemLogHandler enableSystemLogQuery
    shutdownGracePeriod shutdownGracePeriodCriticalPods shutdownGracePeriodByPodPriority
    crashLoopBackOff reservedMemory enableProfilingHandler enableDebugFlagsHandler
    seccompDefault memoryThrottlingFactor memoryReservationPolicy registerWithTaints
    registerNode tracing localStorageCapacityIsolation containerRuntimeEndpoint
    imageServiceEndpoint failCgroupV1 userNamespaces podHousekeepingPeriod
}

/// rkubelet's own fields, beyond upstream's: settings upstream's kubelet does not have
/// (its strict decoding warns about them and goes on), so that a file written for
/// rkubelet can still turn them on.
pub(crate) const RKUBELET_FIELDS: &[&str] =
    &["enableServerSource", "checkpointApiPods", "imagePreloadDir"];

/// component-base's `LoggingConfiguration` (`logging:` in the file): its field names.
/// `verbosity` is klog's `-v`, `format` `text` or `json`, `flushFrequency` the log
/// flush period, `vmodule` per-file verbosity, `options` format-specific options.
pub(crate) const LOGGING_FIELDS: &[&str] = &[
    "verbosity",
    "format",
    "flushFrequency",
    "vmodule",
    "options",
];

/// The largest config file read. A `KubeletConfiguration` is a few KiB; a bigger file
/// (or `/dev/zero`) is a mistake that must not eat the node's memory before start-up.
pub(crate) const MAX_CONFIG_FILE_BYTES: u64 = 1024 * 1024;

/// Reads and validates the config file at `path`. Only a regular file is read (a FIFO
/// would block start-up for good, a device would never end), at most
/// [`MAX_CONFIG_FILE_BYTES`].
pub(crate) fn read(path: &Path) -> Result<FileSettings, ConfigError> {
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
pub(crate) fn parse(path: &Path, text: &str) -> Result<FileSettings, ConfigError> {
    let doc: Value = serde_norway::from_str(text).map_err(|source| ConfigError::ParseFile {
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
    let known = [KUBELET_CONFIGURATION_FIELDS, RKUBELET_FIELDS].concat();
    check_known_fields(path, map, "", &known)?;
    // Every key is known and every value untyped but `logging`'s, which is a mapping
    // (component-base's struct) or null.
    match map.get("logging") {
        None | Some(Value::Null) => {}
        Some(Value::Mapping(logging)) => {
            check_known_fields(path, logging, "logging.", LOGGING_FIELDS)?
        }
        Some(other) => {
            return Err(ConfigError::InvalidField {
                path: path.to_path_buf(),
                field: "logging".into(),
                reason: format!("expected a mapping, found {}", describe(other)),
            })
        }
    }
    let base = path.parent().unwrap_or(Path::new(""));
    let mut settings =
        Layer::from_file(map, base).map_err(|(field, reason)| ConfigError::InvalidField {
            path: path.to_path_buf(),
            field: field.into(),
            reason,
        })?;
    settings.unsupported = unsupported(map);
    Ok(settings)
}

/// The upstream fields present in the file that the settings table does not read, in
/// types.go's order, then those inside `logging`.
fn unsupported(map: &Mapping) -> Vec<String> {
    // A field is read if the table names it, or names a field inside it.
    let read = |name: &str| {
        ENTRIES.iter().filter_map(|e| e.file).any(|f| {
            f == name
                || f.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with('.'))
        })
    };
    let mut out = Vec::new();
    for name in KUBELET_CONFIGURATION_FIELDS {
        if !["apiVersion", "kind"].contains(name) && lookup(map, name).is_some() && !read(name) {
            out.push(name.to_string());
        }
    }
    if read("logging") {
        for name in LOGGING_FIELDS {
            let name = format!("logging.{name}");
            if lookup(map, &name).is_some() && !read(&name) {
                out.push(name);
            }
        }
    }
    out
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
    map: &Mapping,
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
        let mut ours: Vec<&str> = KUBELET_CONFIGURATION_FIELDS.to_vec();
        let mut theirs = UPSTREAM_FIELDS.to_vec();
        base::sort::sort(&mut ours);
        base::sort::sort(&mut theirs);
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
                "staticPodPath"
                | "containerRuntimeEndpoint"
                | "tlsCertFile"
                | "tlsPrivateKeyFile" => "/x",
                "tlsMinVersion" => "VersionTLS13",
                "tlsCipherSuites" => "[TLS_AES_128_GCM_SHA256]",
                "logging" => "{verbosity: 3, format: text}",
                "clusterDNS" => "[\"10.96.0.10\"]",
                "clusterDomain" => "cluster.local",
                "resolvConf" => "/etc/resolv.conf",
                "serializeImagePulls" | "enableDebuggingHandlers" => "false",
                "rotateCertificates" => "true",
                "maxParallelImagePulls" => "3",
                "registerNode" => "false",
                "maxPods" => "20",
                "nodeStatusUpdateFrequency" => "\"20s\"",
                "nodeStatusReportFrequency" => "\"1m\"",
                "nodeStatusMaxImages" => "10",
                "nodeLeaseDurationSeconds" => "30",
                "cgroupsPerQOS" => "false",
                "cgroupRoot" => "/rk",
                "enforceNodeAllocatable" => "[pods]",
                "allowedUnsafeSysctls" => "[\"kernel.msg*\"]",
                "imageMinimumGCAge" | "imageMaximumGCAge" => "\"5m\"",
                "imageGCHighThresholdPercent" => "90",
                "imageGCLowThresholdPercent" => "70",
                "containerLogMaxSize" => "5Mi",
                "containerLogMaxFiles" => "3",
                "containerLogMonitorInterval" => "\"5s\"",
                "podLogsDir" => "/srv/pods",
                "podCIDR" => "10.88.1.0/24",
                "hairpinMode" => "hairpin-veth",
                "runtimeRequestTimeout" => "30s",
                "imageServiceEndpoint" => "unix:///run/i.sock",
                _ => "{}",
            };
            body.push_str(&format!("{f}: {value}\n"));
        }
        let s = parse_body(&body).expect("every upstream field is accepted");
        assert_eq!(s.verbosity, Some(3));
        assert_eq!(s.port, Some(1234));
        assert!(s.unsupported.contains(&"tlsCurvePreferences".to_string()));
        assert!(!s.unsupported.contains(&"tlsCipherSuites".to_string()));
        assert!(s.unsupported.contains(&"logging.format".to_string()));
        assert!(!s.unsupported.contains(&"staticPodPath".to_string()));
        assert!(!s.unsupported.contains(&"logging".to_string()));
        // All but the type meta, the 50 implemented fields and `logging`, plus
        // `logging.format`.
        assert_eq!(s.unsupported.len(), UPSTREAM_FIELDS.len() - 53 + 1);
        assert!(!s.unsupported.contains(&"allowedUnsafeSysctls".to_string()));
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
                "logging: 5\n",
                "config file /etc/x.yaml: field logging: expected a mapping, found 5",
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
