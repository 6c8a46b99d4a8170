//! Pod sysctls (upstream `pkg/kubelet/sysctl` with component-helpers'
//! `node/util/sysctl`): which kernel namespace a sysctl lives in, the safe set every pod
//! may use (narrowed by the running kernel's version, as upstream's
//! `SafeSysctlAllowlist`), the allowlist built from it and `--allowed-unsafe-sysctls`
//! (upstream `NewAllowlist`, refusing a pattern that is not known to be namespaced),
//! and its verdict on a pod (upstream's `patternAllowlist.Admit`: reason
//! `SysctlForbidden`, and a namespaced sysctl is refused when the pod shares that
//! namespace with the host). Names may use `/` as the separator (sysctl.d(5));
//! [`normalize_name`] turns them into the dotted form, as upstream's `NormalizeName`.
//!
//! Pure but for [`kernel_version`]; imports nothing of the crate, so configuration,
//! validation, admission and the sandbox's config all build on it.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::Pod;

/// The reason of a pod refused for its sysctls (upstream `ForbiddenReason`).
pub(crate) const FORBIDDEN_REASON: &str = "SysctlForbidden";

/// The longest sysctl name or pattern (upstream `SysctlMaxLength`).
pub(crate) const MAX_LENGTH: usize = 253;

/// A sysctl name, `.` or `/` separated, as the pod validation message prints it
/// (upstream's `sysctlContainSlashRegexp`, anchors included).
pub(crate) const NAME_REGEX: &str =
    r"^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$";

/// A sysctl or a pattern ending in `*`, as `NewAllowlist`'s message prints it
/// (upstream policy's `SysctlContainSlashPatternFmt`, without anchors).
pub(crate) const PATTERN_REGEX: &str =
    r"([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\./])*([a-z0-9][-_a-z0-9]*)?[a-z0-9*]";

/// Upstream's safe sysctls of earlier releases: always safe, whatever the kernel
/// version read (upstream `legacySafeSysctls`).
const LEGACY_SAFE: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];

/// Safe only from the kernel version that namespaced them (upstream `newerSysctls`,
/// versions from `pkg/util/kernel/constants.go`).
const NEWER_SAFE: &[(&str, (u64, u64))] = &[
    // torvalds/linux 122ff243f5f1.
    ("net.ipv4.ip_local_reserved_ports", (3, 16)),
    // torvalds/linux 356d1833b638, both.
    ("net.ipv4.tcp_rmem", (4, 15)),
    ("net.ipv4.tcp_wmem", (4, 15)),
];

/// A kernel namespace that holds sysctls (upstream's `Namespace`; its names, which
/// the refusal message prints).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Namespace {
    /// The IPC namespace (`kernel.shm*`, `kernel.msg*`, `kernel.sem`, `fs.mqueue.*`).
    Ipc,
    /// The network namespace (`net.*`).
    Net,
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Namespace::Ipc => "IPC",
            Namespace::Net => "Net",
        })
    }
}

/// A pattern `NewAllowlist` refuses: its message is upstream's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SysctlError(pub String);

/// The dotted form of a sysctl name (upstream `NormalizeName`): a name whose first
/// separator is `/` has its `/` and `.` swapped (`net/ipv4/conf/eno2.100/rp_filter` →
/// `net.ipv4.conf.eno2/100.rp_filter`); any other is kept.
pub(crate) fn normalize_name(name: &str) -> String {
    match name.find(['.', '/']) {
        Some(i) if name.as_bytes()[i] == b'/' => name
            .chars()
            .map(|c| match c {
                '.' => '/',
                '/' => '.',
                c => c,
            })
            .collect(),
        _ => name.to_string(),
    }
}

/// The namespace of a dotted sysctl or prefix (upstream `namespaceOf`): the IPC
/// names (`kernel.shm` and `kernel.msg` stand for their groups), or a `net.` or
/// `fs.mqueue.` name.
fn namespace_of(name: &str) -> Option<Namespace> {
    const IPC_NAMES: &[&str] = &[
        "kernel.sem",
        "kernel.shmall",
        "kernel.shmmax",
        "kernel.shmmni",
        "kernel.shm_rmid_forced",
        "kernel.shm",
        "kernel.msgmax",
        "kernel.msgmnb",
        "kernel.msgmni",
        "kernel.msg",
    ];
    if IPC_NAMES.contains(&name) {
        Some(Namespace::Ipc)
    } else if name.starts_with("net.") {
        Some(Namespace::Net)
    } else if name.starts_with("fs.mqueue.") {
        Some(Namespace::Ipc)
    } else {
        None
    }
}

/// A sysctl or pattern read (upstream `GetNamespace`): its namespace, its dotted name
/// up to the first `*`, and whether it had one (a prefix).
pub(crate) fn get_namespace(sysctl: &str) -> (Option<Namespace>, String, bool) {
    let mut name = normalize_name(sysctl);
    let prefixed = match name.find('*') {
        Some(i) => {
            name.truncate(i);
            true
        }
        None => false,
    };
    (namespace_of(&name), name, prefixed)
}

/// `[a-z0-9]` (a segment's first and last character).
fn alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// One segment of a name: `[a-z0-9]([-_a-z0-9]*[a-z0-9])?`.
fn is_segment(s: &[u8]) -> bool {
    match s {
        [] => false,
        [only] => alnum(*only),
        [first, mid @ .., last] => {
            alnum(*first)
                && alnum(*last)
                && mid.iter().all(|b| alnum(*b) || *b == b'-' || *b == b'_')
        }
    }
}

/// Is this a valid sysctl name (upstream `IsValidSysctlName`): at most 253
/// characters of segments separated by `.` or `/` ([`NAME_REGEX`]).
pub(crate) fn is_valid_name(name: &str) -> bool {
    name.len() <= MAX_LENGTH
        && name
            .as_bytes()
            .split(|b| *b == b'.' || *b == b'/')
            .all(is_segment)
}

/// Is this a valid sysctl pattern (upstream policy's `IsValidSysctlPattern`): a name
/// whose last segment may end in `*` ([`PATTERN_REGEX`]).
pub(crate) fn is_valid_pattern(pattern: &str) -> bool {
    if pattern.len() > MAX_LENGTH {
        return false;
    }
    let parts: Vec<&[u8]> = pattern
        .as_bytes()
        .split(|b| *b == b'.' || *b == b'/')
        .collect();
    let Some((last, init)) = parts.split_last() else {
        return false;
    };
    // The last segment: `([a-z0-9][-_a-z0-9]*)?[a-z0-9*]`.
    let last_ok = match last {
        [] => false,
        [only] => alnum(*only) || *only == b'*',
        [first, mid @ .., end] => {
            alnum(*first)
                && mid.iter().all(|b| alnum(*b) || *b == b'-' || *b == b'_')
                && (alnum(*end) || *end == b'*')
        }
    };
    last_ok && init.iter().all(|s| is_segment(s))
}

/// The safe sysctls on a kernel of this version (upstream `getSafeSysctlAllowlist`):
/// the legacy ones always, the newer ones when the version is known and recent enough.
pub(crate) fn safe_sysctls(kernel: Option<(u64, u64)>) -> Vec<&'static str> {
    let mut out = LEGACY_SAFE.to_vec();
    for (name, min) in NEWER_SAFE {
        if kernel.is_some_and(|k| k >= *min) {
            out.push(name);
        } else {
            log::info!(
                "kernel version {} is too old, dropping the sysctl {name} from the safe sysctl list",
                kernel.map_or_else(|| "unknown".to_string(), |(a, b)| format!("{a}.{b}"))
            );
        }
    }
    out
}

/// The running kernel's major and minor version, from `/proc/sys/kernel/osrelease`
/// (upstream `utilkernel.GetVersion`); None when it cannot be read.
pub(crate) fn kernel_version() -> Option<(u64, u64)> {
    match std::fs::read_to_string("/proc/sys/kernel/osrelease") {
        Ok(s) => {
            let v = parse_kernel_version(s.trim());
            if v.is_none() {
                log::warn!("cannot parse the kernel version {:?}", s.trim());
            }
            v
        }
        Err(e) => {
            log::warn!("cannot read the kernel version: {e}");
            None
        }
    }
}

/// `6.8.0-45-generic` → (6, 8): upstream's `ParseGeneric` wants at least two numeric
/// components; what follows them is ignored.
fn parse_kernel_version(s: &str) -> Option<(u64, u64)> {
    let s = s.strip_prefix('v').unwrap_or(s);
    let mut parts = s.splitn(3, '.');
    let major = parts.next()?.parse().ok()?;
    let minor: String = parts
        .next()?
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    Some((major, minor.parse().ok()?))
}

/// The sysctls pods may set (upstream's `patternAllowlist`): names and prefixes (a
/// pattern's text before its `*`), each with its namespace.
#[derive(Clone, Debug, Default)]
pub(crate) struct Allowlist {
    sysctls: BTreeMap<String, Namespace>,
    prefixes: Vec<(String, Namespace)>,
}

impl Allowlist {
    /// The allowlist of these sysctls and patterns (upstream `NewAllowlist`): each must
    /// be a valid pattern that names a namespaced sysctl or group.
    pub(crate) fn new<S: AsRef<str>>(patterns: &[S]) -> Result<Allowlist, SysctlError> {
        let mut w = Allowlist::default();
        for p in patterns {
            let p = p.as_ref();
            if !is_valid_pattern(p) {
                return Err(SysctlError(format!(
                    "sysctl {p:?} must have at most {MAX_LENGTH} characters and match regex \
                     {PATTERN_REGEX}"
                )));
            }
            let (ns, name, prefixed) = get_namespace(p);
            let Some(ns) = ns else {
                return Err(SysctlError(format!(
                    "the sysctls {name:?} are not known to be namespaced"
                )));
            };
            if prefixed {
                w.prefixes.push((name, ns));
            } else {
                w.sysctls.insert(name, ns);
            }
        }
        Ok(w)
    }

    /// The safe set on this kernel plus the node's allowed unsafe sysctls (upstream's
    /// `SafeSysctlAllowlist()` appended with `allowedUnsafeSysctls`).
    pub(crate) fn for_node<S: AsRef<str>>(
        kernel: Option<(u64, u64)>,
        allowed_unsafe: &[S],
    ) -> Result<Allowlist, SysctlError> {
        let mut all: Vec<&str> = safe_sysctls(kernel);
        all.extend(allowed_unsafe.iter().map(AsRef::as_ref));
        Allowlist::new(&all)
    }

    /// Upstream `validateSysctl`: Err is why `sysctl` is refused to a pod with these
    /// host namespaces.
    pub(crate) fn validate(
        &self,
        sysctl: &str,
        host_net: bool,
        host_ipc: bool,
    ) -> Result<(), String> {
        let sysctl = normalize_name(sysctl);
        let ns = self.sysctls.get(&sysctl).copied().or_else(|| {
            self.prefixes
                .iter()
                .find(|(p, _)| sysctl.starts_with(p.as_str()))
                .map(|(_, ns)| *ns)
        });
        match ns {
            None => Err(format!("{sysctl:?} not allowlisted")),
            Some(ns @ Namespace::Ipc) if host_ipc => {
                Err(format!("{sysctl:?} not allowed with host {ns} enabled"))
            }
            Some(ns @ Namespace::Net) if host_net => {
                Err(format!("{sysctl:?} not allowed with host {ns} enabled"))
            }
            Some(_) => Ok(()),
        }
    }

    /// Upstream `Admit`: the message of the pod's first refused sysctl (the reason is
    /// [`FORBIDDEN_REASON`]); None admits.
    pub(crate) fn admit(&self, pod: &Pod) -> Option<String> {
        let spec = pod.spec.as_ref()?;
        let sysctls = spec.security_context.as_ref()?.sysctls.as_ref()?;
        let host_net = spec.host_network == Some(true);
        let host_ipc = spec.host_ipc == Some(true);
        sysctls.iter().find_map(|s| {
            self.validate(&s.name, host_net, host_ipc)
                .err()
                .map(|e| format!("forbidden sysctl: {e}"))
        })
    }
}

/// The pod's sysctls for its sandbox, names in the dotted form (upstream converts them
/// with `ConvertPodSysctlsVariableToDotsSeparator` before creating the sandbox, as runc
/// wants dots).
pub(crate) fn pod_sysctls(pod: &Pod) -> BTreeMap<String, String> {
    pod.spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|sc| sc.sysctls.as_ref())
        .into_iter()
        .flatten()
        .map(|s| (normalize_name(&s.name), s.value.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> Pod {
        serde_norway::from_str(yaml).expect("pod")
    }

    #[test]
    fn names_with_slashes_are_normalized_as_upstream() {
        for (input, want) in [
            ("", ""),
            ("kernel.msgmax", "kernel.msgmax"),
            ("kernel/msgmax", "kernel.msgmax"),
            (
                "net.ipv4.conf.eno2/100.rp_filter",
                "net.ipv4.conf.eno2/100.rp_filter",
            ),
            (
                "net/ipv4/conf/eno2.100/rp_filter",
                "net.ipv4.conf.eno2/100.rp_filter",
            ),
            (
                "net/ipv4/ip_local_port_range",
                "net.ipv4.ip_local_port_range",
            ),
            ("net/*", "net.*"),
        ] {
            assert_eq!(normalize_name(input), want, "{input}");
        }
    }

    #[test]
    fn namespaces_of_names_and_patterns() {
        for (input, want) in [
            (
                "kernel.shm_rmid_forced",
                (Some(Namespace::Ipc), "kernel.shm_rmid_forced", false),
            ),
            ("kernel.shm*", (Some(Namespace::Ipc), "kernel.shm", true)),
            ("kernel.msg*", (Some(Namespace::Ipc), "kernel.msg", true)),
            (
                "kernel.msgmax",
                (Some(Namespace::Ipc), "kernel.msgmax", false),
            ),
            ("kernel.sem", (Some(Namespace::Ipc), "kernel.sem", false)),
            ("fs.mqueue.*", (Some(Namespace::Ipc), "fs.mqueue.", true)),
            (
                "fs/mqueue/msg_max",
                (Some(Namespace::Ipc), "fs.mqueue.msg_max", false),
            ),
            ("net.*", (Some(Namespace::Net), "net.", true)),
            (
                "net.ipv4.tcp_syncookies",
                (Some(Namespace::Net), "net.ipv4.tcp_syncookies", false),
            ),
            ("net*", (None, "net", true)),
            ("kernel.*", (None, "kernel.", true)),
            ("kernel.sh*", (None, "kernel.sh", true)),
            ("vm.swappiness", (None, "vm.swappiness", false)),
            ("fs.mqueue", (None, "fs.mqueue", false)),
        ] {
            let (ns, name, prefixed) = get_namespace(input);
            assert_eq!((ns, name.as_str(), prefixed), want, "{input}");
        }
    }

    #[test]
    fn names_and_patterns_follow_upstreams_regexes() {
        for good in [
            "kernel.msgmax",
            "net/ipv4/tcp_syncookies",
            "a",
            "a-b_c.d0",
            "net.ipv4.conf.eno2/100.rp_filter",
        ] {
            assert!(is_valid_name(good), "{good}");
        }
        for bad in [
            "",
            ".a",
            "a.",
            "a..b",
            "A.b",
            "a.-b",
            "a.b_",
            "kernel.msg*",
            "a b",
        ] {
            assert!(!is_valid_name(bad), "{bad}");
        }
        assert!(!is_valid_name(&"a".repeat(254)));
        assert!(is_valid_name(&"a".repeat(253)));
        for good in [
            "kernel.msg*",
            "net.*",
            "*",
            "kernel.sem",
            "fs/mqueue/*",
            "a-*",
            "net.ipv4.tcp_*",
        ] {
            assert!(is_valid_pattern(good), "{good}");
        }
        for bad in ["", "net.**", "*.net", "net*.ipv4", "Net.*", "net..*", "-a*"] {
            assert!(!is_valid_pattern(bad), "{bad}");
        }
    }

    #[test]
    fn the_safe_set_is_narrowed_by_the_kernel_version() {
        let old = safe_sysctls(Some((3, 10)));
        assert_eq!(old, LEGACY_SAFE);
        let unknown = safe_sysctls(None);
        assert_eq!(unknown, LEGACY_SAFE);
        let mid = safe_sysctls(Some((4, 5)));
        assert!(mid.contains(&"net.ipv4.ip_local_reserved_ports"));
        assert!(!mid.contains(&"net.ipv4.tcp_rmem"));
        let new = safe_sysctls(Some((6, 8)));
        assert_eq!(new.len(), LEGACY_SAFE.len() + NEWER_SAFE.len());
        assert!(new.contains(&"net.ipv4.tcp_wmem"));
        for s in new {
            assert!(is_valid_pattern(s) && get_namespace(s).0.is_some(), "{s}");
        }
    }

    #[test]
    fn kernel_versions_parse_as_upstreams_generic_versions() {
        assert_eq!(parse_kernel_version("6.8.0-45-generic"), Some((6, 8)));
        assert_eq!(parse_kernel_version("4.15"), Some((4, 15)));
        assert_eq!(parse_kernel_version("5.10.0+"), Some((5, 10)));
        assert_eq!(parse_kernel_version("3.16-rc1"), Some((3, 16)));
        assert_eq!(parse_kernel_version("6"), None);
        assert_eq!(parse_kernel_version("x.y"), None);
    }

    #[test]
    fn new_allowlist_refuses_what_is_not_namespaced() {
        for (pattern, want) in [
            (
                "vm.swappiness",
                "the sysctls \"vm.swappiness\" are not known to be namespaced",
            ),
            (
                "kernel.*",
                "the sysctls \"kernel.\" are not known to be namespaced",
            ),
            ("net*", "the sysctls \"net\" are not known to be namespaced"),
            (
                "Kernel.msg*",
                "sysctl \"Kernel.msg*\" must have at most 253 characters and match regex \
                 ([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\\./])*([a-z0-9][-_a-z0-9]*)?[a-z0-9*]",
            ),
        ] {
            let err = Allowlist::new(&["kernel.msg*", pattern]).expect_err(pattern);
            assert_eq!(err.0, want);
        }
        assert!(Allowlist::new(&[
            "kernel.shm*",
            "kernel.msg*",
            "kernel.sem",
            "fs.mqueue.*",
            "net.*"
        ])
        .is_ok());
    }

    #[test]
    fn names_and_prefixes_are_matched_with_host_namespaces() {
        let w = Allowlist::new(&[
            "kernel.shm_rmid_forced",
            "kernel.msg*",
            "net.ipv4.tcp_syncookies",
            "fs/mqueue/*",
        ])
        .expect("allowlist");
        assert_eq!(w.validate("kernel.shm_rmid_forced", true, false), Ok(()));
        assert_eq!(w.validate("kernel/msgmax", false, false), Ok(()));
        assert_eq!(w.validate("fs.mqueue.msg_max", false, false), Ok(()));
        assert_eq!(
            w.validate("kernel.shmmax", false, false),
            Err("\"kernel.shmmax\" not allowlisted".into())
        );
        assert_eq!(
            w.validate("kernel.msgmnb", false, true),
            Err("\"kernel.msgmnb\" not allowed with host IPC enabled".into())
        );
        assert_eq!(
            w.validate("kernel.shm_rmid_forced", false, true),
            Err("\"kernel.shm_rmid_forced\" not allowed with host IPC enabled".into())
        );
        assert_eq!(
            w.validate("net/ipv4/tcp_syncookies", true, false),
            Err("\"net.ipv4.tcp_syncookies\" not allowed with host Net enabled".into())
        );
        assert_eq!(w.validate("net.ipv4.tcp_syncookies", false, true), Ok(()));
    }

    #[test]
    fn admission_refuses_the_first_forbidden_sysctl() {
        let w = Allowlist::for_node(Some((6, 8)), &["kernel.msg*"]).expect("allowlist");
        let with = |extra: &str, sysctls: &str| {
            pod(&format!(
                "metadata: {{name: p}}\nspec:\n  {extra}\n  securityContext: {{sysctls: [{sysctls}]}}\n  containers: [{{name: c, image: busybox}}]\n"
            ))
        };
        assert_eq!(
            w.admit(&pod("metadata: {name: p}\nspec: {containers: []}\n")),
            None
        );
        assert_eq!(
            w.admit(&with(
                "hostPID: false",
                "{name: kernel.shm_rmid_forced, value: '1'}"
            )),
            None
        );
        assert_eq!(
            w.admit(&with(
                "hostPID: false",
                "{name: kernel.msgmax, value: '9000'}"
            )),
            None
        );
        assert_eq!(
            w.admit(&with(
                "hostPID: false",
                "{name: net.ipv4.tcp_rmem, value: '4096 87380 6291456'}"
            )),
            None
        );
        assert_eq!(
            w.admit(&with(
                "hostPID: false",
                "{name: kernel.shm_rmid_forced, value: '1'}, {name: kernel.shmmax, value: '1'}, {name: vm.swappiness, value: '1'}"
            )),
            Some("forbidden sysctl: \"kernel.shmmax\" not allowlisted".into())
        );
        assert_eq!(
            w.admit(&with(
                "hostNetwork: true",
                "{name: net.ipv4.tcp_syncookies, value: '1'}"
            )),
            Some(
                "forbidden sysctl: \"net.ipv4.tcp_syncookies\" not allowed with host Net enabled"
                    .into()
            )
        );
        assert_eq!(
            w.admit(&with(
                "hostIPC: true",
                "{name: kernel.msgmax, value: '9000'}"
            )),
            Some("forbidden sysctl: \"kernel.msgmax\" not allowed with host IPC enabled".into())
        );
        // Without the unsafe pattern, kernel.msgmax is not allowed at all.
        let safe = Allowlist::for_node(Some((6, 8)), &[] as &[&str]).expect("allowlist");
        assert_eq!(
            safe.admit(&with(
                "hostPID: false",
                "{name: kernel.msgmax, value: '9000'}"
            )),
            Some("forbidden sysctl: \"kernel.msgmax\" not allowlisted".into())
        );
    }

    #[test]
    fn a_pods_sysctls_reach_the_sandbox_dotted() {
        let p = pod(
            "metadata: {name: p}\nspec:\n  securityContext: {sysctls: [{name: kernel/shm_rmid_forced, value: '1'}, {name: net.ipv4.ip_local_port_range, value: '1024 65000'}]}\n  containers: []\n",
        );
        let got = pod_sysctls(&p);
        assert_eq!(
            got.into_iter().collect::<Vec<_>>(),
            [
                ("kernel.shm_rmid_forced".to_string(), "1".to_string()),
                (
                    "net.ipv4.ip_local_port_range".to_string(),
                    "1024 65000".to_string()
                ),
            ]
        );
        assert!(pod_sysctls(&pod("metadata: {name: p}\nspec: {containers: []}\n")).is_empty());
    }
}
