//! How each kind of setting value is read, once per spelling: [`text`] from a flag (and
//! from a default, which is spelled as the flag would be), [`yaml`] from a
//! `KubeletConfiguration` field. The settings table names one of each per setting.
//!
//! Errors are the reason only ("not a port number (0-65535)"); the caller names the flag
//! or the field and the value, so every message is one line that says which input is
//! wrong, in the upstream kubelet's words where it has them.
//!
//! Over 800 lines: every reader of every kind of value, with the node-label, taint and
//! reservation rules and their tests, kept in one place so each value is read one way.

/// How the kubelet port authorizes a request (`--authorization-mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthorizationMode {
    /// Every authenticated request is allowed.
    AlwaysAllow,
    /// A `SubjectAccessReview` to the API server decides.
    Webhook,
}

impl AuthorizationMode {
    /// Upstream's spelling.
    pub fn name(self) -> &'static str {
        match self {
            AuthorizationMode::AlwaysAllow => "AlwaysAllow",
            AuthorizationMode::Webhook => "Webhook",
        }
    }
}

/// One `--register-with-taints` entry: `key=value:Effect` (the value may be empty).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Taint {
    /// The taint's key, a qualified name.
    pub key: String,
    /// Its value, a label value (may be empty).
    pub value: String,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

/// The label keys a kubelet may set on its own Node in the `kubernetes.io` and `k8s.io`
/// namespaces (upstream `kubeletapis.KubeletLabels`).
pub(crate) const KUBELET_LABELS: &[&str] = &[
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
];

/// The label namespaces (and their subdomains) a kubelet may set freely (upstream
/// `kubeletapis.KubeletLabelNamespaces`).
pub(crate) const KUBELET_LABEL_NAMESPACES: &[&str] =
    &["kubelet.kubernetes.io", "node.kubernetes.io"];

/// Flag values: pflag's spellings.
pub(crate) mod text {
    use std::net::IpAddr;
    use std::path::PathBuf;
    use std::time::Duration;

    use super::AuthorizationMode;
    use crate::config::duration::parse_duration;
    use crate::config::MAX_VERBOSITY;
    use wire::tls::TlsVersion;

    /// Any path; an empty one means "none" where the setting is optional.
    pub(crate) fn any_path(v: &str) -> Result<PathBuf, String> {
        Ok(v.into())
    }

    /// A path that must be given.
    pub(crate) fn path(v: &str) -> Result<PathBuf, String> {
        string(v).map(PathBuf::from)
    }

    /// Any string, empty included.
    pub(crate) fn any_string(v: &str) -> Result<String, String> {
        Ok(v.to_string())
    }

    /// A string that must not be empty.
    pub(crate) fn string(v: &str) -> Result<String, String> {
        if v.is_empty() {
            Err("must not be empty".into())
        } else {
            Ok(v.to_string())
        }
    }

    /// `--network-plugin`: empty (Docker's bridge), `cni` or `kubenet`.
    pub(crate) fn network_plugin(v: &str) -> Result<String, String> {
        match v {
            "" | "cni" | "kubenet" => Ok(v.to_string()),
            _ => Err(format!(
                "{v:?} is not a network plugin: \"\", cni or kubenet"
            )),
        }
    }

    /// `--hairpin-mode`: how a pod reaches itself through a service.
    pub(crate) fn hairpin_mode(v: &str) -> Result<String, String> {
        match v {
            "promiscuous-bridge" | "hairpin-veth" | "none" => Ok(v.to_string()),
            _ => Err(format!(
                "{v:?} is not a hairpin mode: promiscuous-bridge, hairpin-veth or none"
            )),
        }
    }

    /// `--pod-cidr`: one CIDR, or one of each family comma-separated; empty for none.
    pub(crate) fn pod_cidr(v: &str) -> Result<String, String> {
        crate::network::kubenet::parse_pod_cidrs(&[v.to_string()])?;
        Ok(v.to_string())
    }

    /// `--non-masquerade-cidr`: one CIDR.
    pub(crate) fn cidr(v: &str) -> Result<String, String> {
        crate::network::kubenet::Cidr::parse(v)?;
        Ok(v.to_string())
    }

    /// A port number.
    pub(crate) fn port(v: &str) -> Result<u16, String> {
        v.parse::<u16>()
            .map_err(|_| "not a port number (0-65535)".into())
    }

    /// An IP address.
    pub(crate) fn ip(v: &str) -> Result<IpAddr, String> {
        v.parse::<IpAddr>().map_err(|_| "not an IP address".into())
    }

    /// Comma-separated IP addresses (pflag's string slice), kept in their canonical
    /// spelling; empty parts are dropped.
    pub(crate) fn ips(v: &str) -> Result<Vec<String>, String> {
        v.split(',')
            .filter(|p| !p.is_empty())
            .map(|p| ip(p).map(|a| a.to_string()))
            .collect()
    }

    /// A loop period: a Go duration above zero (a zero period would spin).
    pub(crate) fn period(v: &str) -> Result<Duration, String> {
        match parse_duration(v) {
            Ok(d) if d.is_zero() => Err("must be greater than 0".into()),
            Ok(d) => Ok(d),
            Err(e) => Err(format!("invalid duration: {e}")),
        }
    }

    /// A Go duration, zero included (a cache TTL: 0 caches nothing).
    pub(crate) fn duration(v: &str) -> Result<Duration, String> {
        parse_duration(v).map_err(|e| format!("invalid duration: {e}"))
    }

    /// `--tls-cipher-suites`: comma-separated upstream names (empty parts dropped).
    pub(crate) fn cipher_suites(v: &str) -> Result<Vec<String>, String> {
        v.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(cipher_suite)
            .collect()
    }

    /// One upstream cipher suite name, refused in component-base's words.
    pub(crate) fn cipher_suite(name: &str) -> Result<String, String> {
        if wire::tls::TLS_CIPHER_SUITE_NAMES.contains(&name) {
            Ok(name.to_string())
        } else {
            Err(format!(
                "cipher suite {name} not supported or doesn't exist"
            ))
        }
    }

    /// klog's `-v`.
    pub(crate) fn verbosity(v: &str) -> Result<u8, String> {
        v.parse::<u8>()
            .ok()
            .filter(|n| *n <= MAX_VERBOSITY)
            .ok_or_else(|| format!("not a verbosity level (0-{MAX_VERBOSITY})"))
    }

    /// A whole number of at least 1 (upstream's wording for less).
    pub(crate) fn positive_int(v: &str) -> Result<u32, String> {
        match v.parse::<i64>() {
            Ok(n) if n < 1 => Err(format!("{n} must be a positive number")),
            Ok(n) => u32::try_from(n).map_err(|_| format!("{n} is too large")),
            Err(_) => Err("not a whole number".into()),
        }
    }

    /// `--tls-min-version`: upstream's names; rustls speaks TLS 1.2 and 1.3 only, so
    /// the older names upstream also takes are refused with that reason.
    pub(crate) fn tls_version(v: &str) -> Result<TlsVersion, String> {
        match v {
            "VersionTLS12" => Ok(TlsVersion::Tls12),
            "VersionTLS13" => Ok(TlsVersion::Tls13),
            "VersionTLS10" | "VersionTLS11" => {
                Err("TLS versions before 1.2 are not supported (VersionTLS12, VersionTLS13)".into())
            }
            _ => Err("not a TLS version (VersionTLS12, VersionTLS13)".into()),
        }
    }

    /// `--authorization-mode`: `AlwaysAllow` or `Webhook`.
    pub(crate) fn authorization_mode(v: &str) -> Result<AuthorizationMode, String> {
        match v {
            "AlwaysAllow" => Ok(AuthorizationMode::AlwaysAllow),
            "Webhook" => Ok(AuthorizationMode::Webhook),
            _ => Err("not an authorization mode (AlwaysAllow, Webhook)".into()),
        }
    }

    /// A boolean, as Go's `strconv.ParseBool` reads it.
    pub(crate) fn boolean(v: &str) -> Result<bool, String> {
        match v {
            "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
            "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
            _ => Err("not a boolean (true or false)".into()),
        }
    }

    /// An http:// or https:// URL with a host, or empty ("none").
    pub(crate) fn url(v: &str) -> Result<String, String> {
        if v.is_empty() {
            return Ok(String::new());
        }
        let rest = v
            .strip_prefix("http://")
            .or_else(|| v.strip_prefix("https://"))
            .ok_or_else(|| "not an http:// or https:// URL".to_string())?;
        if rest.is_empty() || rest.starts_with('/') {
            return Err("the URL has no host".into());
        }
        if v.chars().any(char::is_whitespace) {
            return Err("the URL has a space in it".into());
        }
        Ok(v.to_string())
    }

    /// Comma-separated URLs (empty entries dropped, trailing slashes trimmed); none at
    /// all means "no etcd".
    pub(crate) fn urls(v: &str) -> Result<Vec<String>, String> {
        v.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| url(s).map_err(|r| format!("{s:?}: {r}")))
            .map(|r| r.map(|u| u.trim_end_matches('/').to_string()))
            .collect()
    }

    /// An etcd key prefix: absolute, as every kubelet key is.
    pub(crate) fn etcd_prefix(v: &str) -> Result<String, String> {
        if !v.starts_with('/') {
            return Err("must start with /".into());
        }
        Ok(v.to_string())
    }

    /// `--node-labels`: comma-separated `key=value` pairs (pflag's `mapStringString`),
    /// checked as upstream's `ValidateKubeletFlags`: keys are qualified names, values
    /// label values, and a key in the `kubernetes.io` or `k8s.io` namespaces must be one
    /// a kubelet may set (the NodeRestriction admission refuses the others).
    pub(crate) fn node_labels(v: &str) -> Result<Vec<(String, String)>, String> {
        use crate::validation::names::{is_qualified_name, is_valid_label_value};
        let mut out: Vec<(String, String)> = Vec::new();
        let mut unknown = Vec::new();
        for pair in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("{pair:?} must be formatted as key=value"))?;
            let (key, value) = (key.trim(), value.trim());
            let mut errs = is_qualified_name(key);
            errs.extend(is_valid_label_value(value));
            if !errs.is_empty() {
                return Err(format!(
                    "invalid node labels: {key}={value}: {}",
                    errs.join("; ")
                ));
            }
            if is_kubernetes_label(key) && !is_kubelet_label(key) {
                unknown.push(key.to_string());
            }
            out.retain(|(k, _)| k != key);
            out.push((key.to_string(), value.to_string()));
        }
        if !unknown.is_empty() {
            base::sort::sort(&mut unknown);
            return Err(format!(
                "unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: {unknown:?}; \
                 --node-labels in the 'kubernetes.io' namespace must begin with an allowed prefix \
                 ({}) or be in the specifically allowed set ({})",
                super::KUBELET_LABEL_NAMESPACES.join(", "),
                super::KUBELET_LABELS.join(", ")
            ));
        }
        Ok(out)
    }

    /// The prefix of a label key (before `/`), empty without one.
    fn label_namespace(key: &str) -> &str {
        key.split_once('/').map_or("", |(ns, _)| ns)
    }

    /// Upstream `isKubernetesLabel`: the key is in `kubernetes.io` or `k8s.io` (or a
    /// subdomain of either).
    pub(crate) fn is_kubernetes_label(key: &str) -> bool {
        let ns = label_namespace(key);
        ["kubernetes.io", "k8s.io"]
            .iter()
            .any(|d| ns == *d || ns.ends_with(&format!(".{d}")))
    }

    /// Upstream `IsKubeletLabel`: one of the kubelet's own labels, or in one of the
    /// namespaces a kubelet may set.
    pub(crate) fn is_kubelet_label(key: &str) -> bool {
        let ns = label_namespace(key);
        super::KUBELET_LABELS.contains(&key)
            || super::KUBELET_LABEL_NAMESPACES
                .iter()
                .any(|d| ns == *d || ns.ends_with(&format!(".{d}")))
    }

    /// `--register-with-taints`: comma-separated `key=value:Effect` or `key:Effect`
    /// (upstream `taints.ParseTaint`).
    pub(crate) fn taints(v: &str) -> Result<Vec<super::Taint>, String> {
        v.split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(taint)
            .collect()
    }

    /// One taint, in upstream's words when it is refused.
    pub(crate) fn taint(spec: &str) -> Result<super::Taint, String> {
        use crate::validation::names::{is_qualified_name, is_valid_label_value};
        let bad = || format!("invalid taint spec: {spec}");
        let (kv, effect) = spec.rsplit_once(':').ok_or_else(bad)?;
        if !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect) {
            return Err(format!(
                "invalid taint effect: {effect}, unsupported taint effect (NoSchedule, \
                 PreferNoSchedule, NoExecute)"
            ));
        }
        let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
        let errs = is_qualified_name(key);
        if !errs.is_empty() {
            return Err(format!("{}; {}", bad(), errs.join("; ")));
        }
        let errs = is_valid_label_value(value);
        if !errs.is_empty() {
            return Err(format!("{}; {}", bad(), errs.join("; ")));
        }
        Ok(super::Taint {
            key: key.to_string(),
            value: value.to_string(),
            effect: effect.to_string(),
        })
    }

    /// `--node-ip`: an IP address, or empty (detect it).
    pub(crate) fn node_ip(v: &str) -> Result<String, String> {
        if v.is_empty() {
            return Ok(String::new());
        }
        ip(v).map(|a| a.to_string())
    }

    /// A count or size, zero included (`--eviction-max-pod-grace-period` seconds,
    /// `--log-file-max-size` MB).
    pub(crate) fn non_negative_int(v: &str) -> Result<u32, String> {
        v.parse::<u32>()
            .map_err(|_| format!("{v:?} is not a whole number of 0 or more"))
    }

    /// `--node-status-max-images`: a count, or -1 for no cap.
    pub(crate) fn max_images(v: &str) -> Result<i32, String> {
        match v.parse::<i32>() {
            Ok(n) if n < -1 => Err(format!("{n} must be -1 (no cap) or more")),
            Ok(n) => Ok(n),
            Err(_) => Err("not a whole number".into()),
        }
    }

    /// A whole number, negative included (`--maximum-dead-containers`: -1 is no limit).
    pub(crate) fn int(v: &str) -> Result<i32, String> {
        v.parse::<i32>().map_err(|_| "not a whole number".into())
    }

    /// A percentage, 0 to 100 (the image GC thresholds).
    pub(crate) fn percent(v: &str) -> Result<u8, String> {
        match v.parse::<i64>() {
            Ok(n) if (0..=100).contains(&n) => u8::try_from(n).map_err(|_| "too large".into()),
            Ok(n) => Err(format!("{n} is not a percentage (0-100)")),
            Err(_) => Err("not a whole number".into()),
        }
    }

    /// A size as a resource quantity (`10Mi`), in bytes, above zero
    /// (`containerLogMaxSize`).
    pub(crate) fn bytes(v: &str) -> Result<u64, String> {
        base::quantity::parse_milli(v)
            .map(|m| m / 1000)
            .filter(|b| *b > 0)
            .and_then(|b| u64::try_from(b).ok())
            .ok_or_else(|| format!("{v:?} is not a size above zero (such as 10Mi)"))
    }

    /// A number of files of at least 2 (upstream's `containerLogMaxFiles` rule: the
    /// file being written and one rotated).
    pub(crate) fn log_files(v: &str) -> Result<u32, String> {
        match v.parse::<i64>() {
            Ok(n) if n < 2 => Err(format!("{n} must be 2 or more")),
            Ok(n) => u32::try_from(n).map_err(|_| format!("{n} is too large")),
            Err(_) => Err("not a whole number".into()),
        }
    }

    /// `containerLogMonitorInterval`: at least 3 s (upstream's validation).
    pub(crate) fn log_monitor_interval(v: &str) -> Result<Duration, String> {
        let d = duration(v)?;
        if d < Duration::from_secs(3) {
            return Err(format!("{v} is less than 3s"));
        }
        Ok(d)
    }

    /// `--kube-reserved`, `--system-reserved`: comma-separated `name=quantity` of
    /// `cpu`, `memory`, `ephemeral-storage` and `pid` (upstream `parseResourceList`),
    /// each a non-negative quantity; a name given again replaces the earlier one.
    pub(crate) fn reserved(v: &str) -> Result<Vec<(String, String)>, String> {
        let mut out: Vec<(String, String)> = Vec::new();
        for pair in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, q) = pair
                .split_once('=')
                .ok_or_else(|| format!("{pair:?} must be formatted as name=quantity"))?;
            let (name, q) = (name.trim(), q.trim());
            reserved_one(name, q)?;
            out.retain(|(n, _)| n != name);
            out.push((name.to_string(), q.to_string()));
        }
        Ok(out)
    }

    /// `--enforce-node-allocatable`: comma-separated `pods`, `system-reserved`,
    /// `kube-reserved` or `none` (upstream's validation: `none` stands alone).
    pub(crate) fn enforce_node_allocatable(v: &str) -> Result<Vec<String>, String> {
        let list: Vec<String> = v
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect();
        check_enforce_node_allocatable(&list)?;
        Ok(list)
    }

    /// `--allowed-unsafe-sysctls`: comma-separated sysctls or patterns ending in `*`,
    /// each refused as upstream's `NewAllowlist` refuses it (not a valid pattern, or not
    /// known to be namespaced), so a bad one stops the start-up naming it.
    pub(crate) fn sysctl_patterns(v: &str) -> Result<Vec<String>, String> {
        let list: Vec<String> = v
            .split(',')
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect();
        crate::sysctl::Allowlist::new(&list).map_err(|e| e.0)?;
        Ok(list)
    }

    /// Upstream's check of `enforceNodeAllocatable`'s levels.
    pub(crate) fn check_enforce_node_allocatable(list: &[String]) -> Result<(), String> {
        for l in list {
            if !["pods", "system-reserved", "kube-reserved", "none"].contains(&l.as_str()) {
                return Err(format!(
                    "invalid option {l:?} specified for enforceNodeAllocatable setting. \
                     Valid options are \"pods\", \"system-reserved\", \"kube-reserved\", or \"none\""
                ));
            }
        }
        if list.len() > 1 && list.iter().any(|l| l == "none") {
            return Err(
                "enforceNodeAllocatable (--enforce-node-allocatable) may not \
                        contain additional enforcements when \"none\" is specified"
                    .into(),
            );
        }
        Ok(())
    }

    /// One reserved resource, in upstream's words when it is refused.
    pub(crate) fn reserved_one(name: &str, q: &str) -> Result<(), String> {
        if !["cpu", "memory", "ephemeral-storage", "pid"].contains(&name) {
            return Err(format!("cannot reserve {name:?} resource"));
        }
        match base::quantity::parse_milli(q) {
            Some(m) if m >= 0 => Ok(()),
            Some(_) => Err(format!(
                "resource quantity for {name:?} cannot be negative: {q}"
            )),
            None => Err(format!("{q:?} is not a quantity")),
        }
    }

    /// Upstream's `colonSeparatedMultimapStringString`: `Name:Value` pairs separated by
    /// commas; the value may hold colons, not commas.
    pub(crate) fn headers(v: &str) -> Result<Vec<(String, String)>, String> {
        let mut out = Vec::new();
        for pair in v.split(',') {
            if pair.trim().is_empty() {
                continue;
            }
            let (name, value) = pair
                .split_once(':')
                .ok_or_else(|| format!("{pair:?} is not Name:Value"))?;
            let name = name.trim();
            if name.is_empty()
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
            {
                return Err(format!("{name:?} is not an HTTP header name"));
            }
            out.push((name.to_string(), value.trim().to_string()));
        }
        Ok(out)
    }
}

/// `KubeletConfiguration` fields. Each reader gets a present, non-null value and the
/// file's directory, and returns `None` where upstream's defaulting treats the value
/// as unset (`""`, `0s`, `port: 0`).
pub(crate) mod yaml {
    use std::net::IpAddr;
    use std::path::{Path, PathBuf};
    use std::time::Duration;

    use serde_norway::{Mapping, Value};

    use super::text;
    use crate::config::duration::parse_duration;
    use crate::config::MAX_VERBOSITY;

    /// The value of a field, `logging.verbosity` naming one inside `logging`; a null
    /// value is no value, as `Option` fields read it.
    pub(crate) fn lookup<'a>(map: &'a Mapping, field: &str) -> Option<&'a Value> {
        let (head, rest) = match field.split_once('.') {
            Some((h, r)) => (h, Some(r)),
            None => (field, None),
        };
        match (map.get(head)?, rest) {
            (Value::Null, _) => None,
            (v, None) => Some(v),
            (Value::Mapping(inner), Some(rest)) => lookup(inner, rest),
            (_, Some(_)) => None,
        }
    }

    /// A string; empty means unset, as in upstream's defaulting.
    pub(crate) fn string(v: &Value, _: &Path) -> Result<Option<String>, String> {
        match v {
            Value::String(s) if s.is_empty() => Ok(None),
            Value::String(s) => Ok(Some(s.clone())),
            other => Err(invalid(other, "not a string")),
        }
    }

    /// `podCIDR`: a pod CIDR (or one of each family).
    pub(crate) fn pod_cidr(v: &Value, base: &Path) -> Result<Option<String>, String> {
        string(v, base)?
            .map(|s| super::text::pod_cidr(&s))
            .transpose()
    }

    /// `hairpinMode`.
    pub(crate) fn hairpin_mode(v: &Value, base: &Path) -> Result<Option<String>, String> {
        string(v, base)?
            .map(|s| super::text::hairpin_mode(&s))
            .transpose()
    }

    /// A path, resolved against the file's directory as upstream's
    /// `resolveRelativePaths` does.
    pub(crate) fn path(v: &Value, base: &Path) -> Result<Option<PathBuf>, String> {
        Ok(string(v, base)?.map(|p| base.join(p)))
    }

    /// `resolvConf`: a path, where an explicit "" turns the node's resolver file off
    /// (and so is kept, not taken for unset).
    pub(crate) fn resolv_conf(v: &Value, base: &Path) -> Result<Option<String>, String> {
        match v {
            Value::String(s) if s.is_empty() => Ok(Some(String::new())),
            v => Ok(path(v, base)?.map(|p| p.display().to_string())),
        }
    }

    /// An http:// or https:// URL.
    pub(crate) fn url(v: &Value, base: &Path) -> Result<Option<String>, String> {
        string(v, base)?.map(|u| text::url(&u)).transpose()
    }

    /// An IP address.
    pub(crate) fn ip(v: &Value, base: &Path) -> Result<Option<IpAddr>, String> {
        string(v, base)?
            .map(|s| {
                s.parse::<IpAddr>()
                    .map_err(|_| invalid(&Value::String(s.clone()), "not an IP address"))
            })
            .transpose()
    }

    /// A list of IP addresses (`clusterDNS`).
    pub(crate) fn ips(v: &Value, _: &Path) -> Result<Option<Vec<String>>, String> {
        let Value::Sequence(items) = v else {
            return Err(invalid(v, "not a list of IP addresses"));
        };
        items
            .iter()
            .map(|i| match i {
                Value::String(s) if s.parse::<IpAddr>().is_ok() => Ok(s.clone()),
                other => Err(invalid(other, "not an IP address")),
            })
            .collect::<Result<_, _>>()
            .map(Some)
    }

    /// A port number, 0..=65535; 0 is a value (it disables the server). Upstream's
    /// fields are int32, so only YAML integers count.
    pub(crate) fn port(v: &Value, _: &Path) -> Result<Option<u16>, String> {
        v.as_u64()
            .and_then(|n| u16::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| invalid(v, "not a port number (0-65535)"))
    }

    /// A port number where 0 means unset: upstream defaulting gives `port: 0` 10250.
    pub(crate) fn nonzero_port(v: &Value, base: &Path) -> Result<Option<u16>, String> {
        Ok(port(v, base)?.filter(|p| *p != 0))
    }

    /// A Go duration string, as `metav1.Duration` reads it; zero means unset.
    pub(crate) fn duration(v: &Value, _: &Path) -> Result<Option<Duration>, String> {
        match v {
            Value::String(s) => parse_duration(s)
                .map(|d| Some(d).filter(|d| !d.is_zero()))
                .map_err(|e| format!("invalid duration {s:?}: {e}")),
            other => Err(invalid(other, "not a duration string such as \"20s\"")),
        }
    }

    /// A klog verbosity level.
    pub(crate) fn verbosity(v: &Value, _: &Path) -> Result<Option<u8>, String> {
        v.as_u64()
            .and_then(|n| u8::try_from(n).ok())
            .filter(|n| *n <= MAX_VERBOSITY)
            .map(Some)
            .ok_or_else(|| invalid(v, &format!("not a verbosity level (0-{MAX_VERBOSITY})")))
    }

    /// A whole number of at least 1; null is unset (a Go `*int32` left nil).
    pub(crate) fn positive_int(v: &Value, _: &Path) -> Result<Option<u32>, String> {
        if v.is_null() {
            return Ok(None);
        }
        let n = v.as_i64().ok_or_else(|| invalid(v, "not a whole number"))?;
        if n < 1 {
            return Err(format!("{n} must be a positive number"));
        }
        u32::try_from(n)
            .map(Some)
            .map_err(|_| invalid(v, "too large"))
    }

    /// A percentage, 0 to 100.
    pub(crate) fn percent(v: &Value, _: &Path) -> Result<Option<u8>, String> {
        let n = v.as_i64().ok_or_else(|| invalid(v, "not a whole number"))?;
        text::percent(&n.to_string()).map(Some)
    }

    /// A size as a quantity string (`10Mi`), in bytes; empty is unset.
    pub(crate) fn bytes(v: &Value, _: &Path) -> Result<Option<u64>, String> {
        match v {
            Value::String(s) if s.is_empty() => Ok(None),
            Value::String(s) => text::bytes(s).map(Some),
            Value::Number(n) => text::bytes(&n.to_string()).map(Some),
            other => Err(invalid(other, "not a size such as \"10Mi\"")),
        }
    }

    /// `containerLogMaxFiles`: at least 2.
    pub(crate) fn log_files(v: &Value, _: &Path) -> Result<Option<u32>, String> {
        let n = v.as_i64().ok_or_else(|| invalid(v, "not a whole number"))?;
        text::log_files(&n.to_string()).map(Some)
    }

    /// `containerLogMonitorInterval`: a duration of at least 3 s.
    pub(crate) fn log_monitor_interval(v: &Value, _: &Path) -> Result<Option<Duration>, String> {
        match v {
            Value::String(s) => text::log_monitor_interval(s).map(Some),
            other => Err(invalid(other, "not a duration string such as \"10s\"")),
        }
    }

    /// `nodeStatusMaxImages`: a count, or -1 for no cap.
    pub(crate) fn max_images(v: &Value, _: &Path) -> Result<Option<i32>, String> {
        let n = v.as_i64().ok_or_else(|| invalid(v, "not a whole number"))?;
        let n = i32::try_from(n).map_err(|_| invalid(v, "too large"))?;
        text::max_images(&n.to_string()).map(Some)
    }

    /// `tlsMinVersion`; empty is unset.
    pub(crate) fn tls_version(
        v: &Value,
        base: &Path,
    ) -> Result<Option<wire::tls::TlsVersion>, String> {
        string(v, base)?.map(|s| text::tls_version(&s)).transpose()
    }

    /// `tlsCipherSuites`: a list of upstream names.
    pub(crate) fn cipher_suites(v: &Value, _: &Path) -> Result<Option<Vec<String>>, String> {
        let Value::Sequence(items) = v else {
            return Err(invalid(v, "not a list of cipher suite names"));
        };
        items
            .iter()
            .map(|i| match i {
                Value::String(s) => text::cipher_suite(s),
                other => Err(invalid(other, "not a cipher suite name")),
            })
            .collect::<Result<_, _>>()
            .map(Some)
    }

    /// `authorization.mode`.
    pub(crate) fn authorization_mode(
        v: &Value,
        base: &Path,
    ) -> Result<Option<super::AuthorizationMode>, String> {
        string(v, base)?
            .map(|s| text::authorization_mode(&s))
            .transpose()
    }

    /// A boolean.
    pub(crate) fn boolean(v: &Value, _: &Path) -> Result<Option<bool>, String> {
        v.as_bool()
            .map(Some)
            .ok_or_else(|| invalid(v, "not a boolean"))
    }

    /// `kubeReserved`, `systemReserved`: a map of resource name to quantity.
    pub(crate) fn reserved(v: &Value, _: &Path) -> Result<Option<Vec<(String, String)>>, String> {
        let Value::Mapping(map) = v else {
            return Err(invalid(v, "not a map of resource name to quantity"));
        };
        let mut out = Vec::new();
        for (name, q) in map {
            let (Value::String(name), Some(q)) = (name, scalar_text(q)) else {
                return Err(invalid(q, "not a resource quantity"));
            };
            text::reserved_one(name, &q)?;
            out.push((name.clone(), q));
        }
        Ok(Some(out))
    }

    /// `enforceNodeAllocatable`: a list of levels.
    pub(crate) fn enforce_node_allocatable(
        v: &Value,
        _: &Path,
    ) -> Result<Option<Vec<String>>, String> {
        let out = string_list(v)?;
        text::check_enforce_node_allocatable(&out)?;
        Ok(Some(out))
    }

    /// `allowedUnsafeSysctls`: a list of sysctls or patterns, checked as the flag's.
    pub(crate) fn sysctl_patterns(v: &Value, _: &Path) -> Result<Option<Vec<String>>, String> {
        let out = string_list(v)?;
        crate::sysctl::Allowlist::new(&out).map_err(|e| e.0)?;
        Ok(Some(out))
    }

    /// A YAML list of strings, each as it is.
    fn string_list(v: &Value) -> Result<Vec<String>, String> {
        let Value::Sequence(seq) = v else {
            return Err(invalid(v, "not a list of strings"));
        };
        seq.iter()
            .map(|item| match item {
                Value::String(s) => Ok(s.clone()),
                _ => Err(invalid(item, "not a string")),
            })
            .collect()
    }

    /// A YAML scalar's text (a quantity may be written as a number).
    fn scalar_text(v: &Value) -> Option<String> {
        match v {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    }

    /// `staticPodURLHeader`: a map of header name to a list of values (Go's
    /// `map[string][]string`), flattened in the file's order.
    pub(crate) fn headers(v: &Value, _: &Path) -> Result<Option<Vec<(String, String)>>, String> {
        let Value::Mapping(map) = v else {
            return Err(invalid(v, "not a map of header name to values"));
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
                text::headers(&format!("{name}:"))?;
                out.push((name.clone(), value));
            }
        }
        Ok(Some(out))
    }

    /// "invalid value X: reason".
    pub(crate) fn invalid(v: &Value, reason: &str) -> String {
        format!("invalid value {}: {reason}", describe(v))
    }

    /// A value, short enough for a one-line message.
    pub(crate) fn describe(v: &Value) -> String {
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
}

#[cfg(test)]
mod tests {
    use super::text::{max_images, node_labels, taints};
    use super::Taint;

    #[test]
    fn node_labels_are_checked_as_upstream() {
        let ok =
            node_labels("a=1, node.kubernetes.io/role=edge,kubelet.kubernetes.io/x=").expect("ok");
        assert_eq!(
            ok,
            [
                ("a".to_string(), "1".to_string()),
                ("node.kubernetes.io/role".into(), "edge".into()),
                ("kubelet.kubernetes.io/x".into(), String::new()),
            ]
        );
        // Allowed well-known keys and subdomains of the allowed namespaces.
        assert!(node_labels("topology.kubernetes.io/zone=z,x.node.kubernetes.io/y=1").is_ok());
        assert!(node_labels("example.com/k=v").is_ok());
        for bad in [
            "node-role.kubernetes.io/master=",
            "kubernetes.io/foo=1",
            "x.k8s.io/a=b",
        ] {
            let e = node_labels(bad).expect_err("an error");
            assert!(
                e.starts_with("unknown 'kubernetes.io' or 'k8s.io' labels"),
                "{bad}: {e}"
            );
        }
        assert!(node_labels("novalue")
            .expect_err("an error")
            .contains("key=value"));
        assert!(node_labels("a b=1")
            .expect_err("an error")
            .starts_with("invalid node labels"));
        assert!(node_labels("a=-x-")
            .expect_err("an error")
            .starts_with("invalid node labels"));
        assert_eq!(
            node_labels("a=1,a=2").expect("ok"),
            [("a".into(), "2".into())]
        );
    }

    #[test]
    fn taints_are_key_value_effect() {
        let t = |k: &str, v: &str, e: &str| Taint {
            key: k.into(),
            value: v.into(),
            effect: e.into(),
        };
        assert_eq!(
            taints("a=b:NoSchedule,example.com/c:NoExecute").expect("ok"),
            [
                t("a", "b", "NoSchedule"),
                t("example.com/c", "", "NoExecute")
            ]
        );
        assert_eq!(taints("").expect("ok"), []);
        assert!(taints("a=b")
            .expect_err("an error")
            .contains("invalid taint spec"));
        assert!(taints("a=b:Sometimes")
            .expect_err("an error")
            .contains("invalid taint effect"));
        assert!(taints("a b=c:NoSchedule")
            .expect_err("an error")
            .contains("invalid taint spec"));
        assert!(taints("a=b c:NoSchedule")
            .expect_err("an error")
            .contains("invalid taint spec"));
    }

    #[test]
    fn reserved_resources_are_name_equals_quantity() {
        use super::text::reserved;
        assert_eq!(
            reserved("cpu=100m, memory=1Gi,cpu=200m").expect("ok"),
            [
                ("memory".to_string(), "1Gi".to_string()),
                ("cpu".into(), "200m".into())
            ]
        );
        assert!(reserved("gpu=1")
            .expect_err("an error")
            .contains("cannot reserve"));
        assert!(reserved("cpu=-1")
            .expect_err("an error")
            .contains("negative"));
        assert!(reserved("cpu=lots")
            .expect_err("an error")
            .contains("not a quantity"));
        assert!(reserved("cpu")
            .expect_err("an error")
            .contains("name=quantity"));
    }

    #[test]
    fn max_images_takes_minus_one_for_all() {
        assert_eq!(max_images("-1"), Ok(-1));
        assert_eq!(max_images("0"), Ok(0));
        assert!(max_images("-2").is_err());
        assert!(max_images("x").is_err());
    }
}
