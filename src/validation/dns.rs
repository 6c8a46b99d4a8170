//! The name service fields of a pod spec, as upstream's `ValidateHostAliases`,
//! `validatePodDNSConfig` and `IsValidIP`: what a pod may write into its own
//! `/etc/hosts` and `resolv.conf`.
//!
//! These strings are written into those files line by line
//! ([`crate::kuberuntime::container::dns`]), so a hostname or a search domain holding
//! a newline would add a line of its own choosing (`"a\nevil 6.6.6.6"`); here every
//! one must be an IP address or an RFC 1123 subdomain, an option's name and value hold
//! no whitespace, and the lists stay within the resolver's limits.

use k8s_openapi::api::core::v1::{HostAlias, PodDNSConfig};

use super::field::{ErrorList, FieldError, Path};
use super::names::is_dns1123_subdomain;

/// Upstream `MaxDNSNameservers`: glibc reads at most three.
pub(crate) const MAX_NAMESERVERS: usize = 3;
/// Upstream `MaxDNSSearchPaths` (the expanded limit, GA since 1.28).
pub(crate) const MAX_SEARCH_PATHS: usize = 32;
/// Upstream `MaxDNSSearchListChars`: the search line, spaces between paths included.
pub(crate) const MAX_SEARCH_LIST_CHARS: usize = 2048;
/// Upstream `IsValidIP`'s detail.
const INVALID_IP: &str = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)";

/// `ValidateHostAliases`: each alias has a valid IP and RFC 1123 subdomain hostnames.
pub(crate) fn validate_host_aliases(aliases: &[HostAlias], path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    for (i, alias) in aliases.iter().enumerate() {
        let p = path.index(i);
        errs.extend(is_valid_ip(&p.child("ip"), alias.ip.as_str()));
        for (j, hostname) in alias.hostnames.iter().flatten().enumerate() {
            let hp = p.child("hostnames").index(j);
            for msg in is_dns1123_subdomain(hostname) {
                errs.push(FieldError::invalid(&hp, hostname, &msg));
            }
        }
    }
    errs
}

/// `validatePodDNSConfig`: with `dnsPolicy: None` a config with a nameserver is
/// required; nameservers are IPs, at most [`MAX_NAMESERVERS`]; searches are RFC 1123
/// subdomains (a trailing dot allowed), at most [`MAX_SEARCH_PATHS`] and
/// [`MAX_SEARCH_LIST_CHARS`] together; options have names.
pub(crate) fn validate_pod_dns_config(
    config: Option<&PodDNSConfig>,
    dns_policy: Option<&str>,
    path: &Path,
) -> ErrorList {
    let mut errs = ErrorList::default();
    if dns_policy == Some("None") {
        let Some(config) = config else {
            errs.push(FieldError::required(
                path,
                "must provide `dnsConfig` when `dnsPolicy` is None",
            ));
            return errs;
        };
        if config.nameservers.as_ref().is_none_or(Vec::is_empty) {
            errs.push(FieldError::required(
                &path.child("nameservers"),
                "must provide at least one DNS nameserver when `dnsPolicy` is None",
            ));
            return errs;
        }
    }
    let Some(config) = config else {
        return errs;
    };
    let ns_path = path.child("nameservers");
    let nameservers = config.nameservers.as_deref().unwrap_or_default();
    if nameservers.len() > MAX_NAMESERVERS {
        errs.push(FieldError::invalid(
            &ns_path,
            nameservers,
            &format!("must not have more than {MAX_NAMESERVERS} nameservers"),
        ));
    }
    for (i, ns) in nameservers.iter().enumerate() {
        errs.extend(is_valid_ip(&ns_path.index(i), ns));
    }
    let search_path = path.child("searches");
    let searches = config.searches.as_deref().unwrap_or_default();
    if searches.len() > MAX_SEARCH_PATHS {
        errs.push(FieldError::invalid(
            &search_path,
            searches,
            &format!("must not have more than {MAX_SEARCH_PATHS} search paths"),
        ));
    }
    // The spaces between the paths count.
    let chars = searches
        .iter()
        .map(String::len)
        .fold(searches.len().saturating_sub(1), usize::saturating_add);
    if chars > MAX_SEARCH_LIST_CHARS {
        errs.push(FieldError::invalid(
            &search_path,
            searches,
            &format!(
                "must not have more than {MAX_SEARCH_LIST_CHARS} characters (including spaces) in the search list"
            ),
        ));
    }
    for (i, search) in searches.iter().enumerate() {
        // A trailing dot (a fully qualified name) is fine.
        let trimmed = search.strip_suffix('.').unwrap_or(search);
        for msg in is_dns1123_subdomain(trimmed) {
            errs.push(FieldError::invalid(&search_path.index(i), trimmed, &msg));
        }
    }
    for (i, option) in config.options.iter().flatten().enumerate() {
        let option_path = path.child("options").index(i);
        let name = option.name.as_deref().unwrap_or_default();
        if name.is_empty() {
            errs.push(FieldError::required(&option_path, "must not be empty"));
        } else if has_whitespace(name) {
            errs.push(FieldError::invalid(
                &option_path.child("name"),
                name,
                WHITESPACE_MSG,
            ));
        }
        if let Some(value) = option.value.as_deref().filter(|v| has_whitespace(v)) {
            errs.push(FieldError::invalid(
                &option_path.child("value"),
                value,
                WHITESPACE_MSG,
            ));
        }
    }
    errs
}

/// rkubelet's own rule (upstream checks only that an option has a name): an option is
/// written as one `name:value` word of the `options` line, so a space would add an
/// option and a newline a line of its own choosing.
const WHITESPACE_MSG: &str = "must not contain whitespace or control characters";

fn has_whitespace(s: &str) -> bool {
    s.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// `IsValidIP`: what Go's `netutils.ParseIPSloppy` takes, an IPv4 or IPv6 address
/// (IPv4 octets may have leading zeros, read as decimal).
pub(crate) fn is_valid_ip(path: &Path, value: &str) -> ErrorList {
    let mut errs = ErrorList::default();
    if value.parse::<std::net::IpAddr>().is_err() && !is_sloppy_ipv4(value) {
        errs.push(FieldError::invalid(path, value, INVALID_IP));
    }
    errs
}

/// Four dot-separated decimal octets, leading zeros allowed (Go's legacy parser).
fn is_sloppy_ipv4(value: &str) -> bool {
    let parts: Vec<&str> = value.split('.').collect();
    parts.len() == 4
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.bytes().all(|b| b.is_ascii_digit())
                && p.parse::<u64>().is_ok_and(|n| n <= 255)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> k8s_openapi::api::core::v1::PodSpec {
        serde_norway::from_str(yaml).expect("test spec decodes")
    }

    fn messages(errs: ErrorList) -> Vec<String> {
        errs.0.iter().map(ToString::to_string).collect()
    }

    fn aliases(yaml: &str) -> Vec<String> {
        let s = spec(yaml);
        messages(validate_host_aliases(
            s.host_aliases.as_deref().unwrap_or_default(),
            &Path::new("spec").child("hostAliases"),
        ))
    }

    fn dns(yaml: &str) -> Vec<String> {
        let s = spec(yaml);
        messages(validate_pod_dns_config(
            s.dns_config.as_ref(),
            s.dns_policy.as_deref(),
            &Path::new("spec").child("dnsConfig"),
        ))
    }

    const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

    #[test]
    fn good_host_aliases_and_dns_config_pass() {
        let good = "containers: []\nhostAliases: [{ip: 10.0.0.1, hostnames: [a, b.example.com]}, {ip: '2001:db8::1', hostnames: [c]}, {ip: 010.001.0.1}]\ndnsPolicy: None\ndnsConfig: {nameservers: [1.1.1.1, '::1', 8.8.8.8], searches: [svc.cluster.local, example.com.], options: [{name: ndots, value: '5'}]}\n";
        assert!(aliases(good).is_empty(), "{:?}", aliases(good));
        assert!(dns(good).is_empty(), "{:?}", dns(good));
        assert!(dns("containers: []\n").is_empty());
    }

    #[test]
    fn a_hostname_or_ip_that_would_add_a_hosts_line_is_refused() {
        let got = aliases(
            "containers: []\nhostAliases: [{ip: \"1.2.3.4\\n6.6.6.6 evil\", hostnames: [ok, \"a\\nevil 6.6.6.6\", \"\"]}, {ip: ''}]\n",
        );
        assert_eq!(
            got,
            [
                "spec.hostAliases[0].ip: Invalid value: \"1.2.3.4\\n6.6.6.6 evil\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)".to_string(),
                format!("spec.hostAliases[0].hostnames[1]: Invalid value: \"a\\nevil 6.6.6.6\": {SUBDOMAIN_MSG}"),
                format!("spec.hostAliases[0].hostnames[2]: Invalid value: \"\": {SUBDOMAIN_MSG}"),
                "spec.hostAliases[1].ip: Invalid value: \"\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)".to_string(),
            ]
        );
    }

    #[test]
    fn dns_config_gives_upstream_paths_and_messages() {
        assert_eq!(
            dns("containers: []\ndnsPolicy: None\n"),
            ["spec.dnsConfig: Required value: must provide `dnsConfig` when `dnsPolicy` is None"]
        );
        assert_eq!(
            dns("containers: []\ndnsPolicy: None\ndnsConfig: {searches: [\"a\\nnameserver 6.6.6.6\"]}\n"),
            ["spec.dnsConfig.nameservers: Required value: must provide at least one DNS nameserver when `dnsPolicy` is None"]
        );
        assert_eq!(
            dns("containers: []\ndnsConfig: {nameservers: [1.1.1.1, 2.2.2.2, 3.3.3.3, \"4.4.4.4\\nsearch evil\"], searches: [\"a\\nnameserver 6.6.6.6\", 'B.', '.'], options: [{value: x}]}\n"),
            [
                "spec.dnsConfig.nameservers: Invalid value: []string{\"1.1.1.1\", \"2.2.2.2\", \"3.3.3.3\", \"4.4.4.4\\nsearch evil\"}: must not have more than 3 nameservers".to_string(),
                "spec.dnsConfig.nameservers[3]: Invalid value: \"4.4.4.4\\nsearch evil\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)".to_string(),
                format!("spec.dnsConfig.searches[0]: Invalid value: \"a\\nnameserver 6.6.6.6\": {SUBDOMAIN_MSG}"),
                format!("spec.dnsConfig.searches[1]: Invalid value: \"B\": {SUBDOMAIN_MSG}"),
                format!("spec.dnsConfig.searches[2]: Invalid value: \"\": {SUBDOMAIN_MSG}"),
                "spec.dnsConfig.options[0]: Required value: must not be empty".to_string(),
            ]
        );
    }

    #[test]
    fn an_option_that_would_add_a_word_or_a_line_is_refused() {
        assert_eq!(
            dns("containers: []\ndnsConfig: {options: [{name: ndots, value: \"1\\nnameserver 6.6.6.6\"}, {name: \"a b\"}, {name: edns0}, {name: timeout, value: '2'}]}\n"),
            [
                format!("spec.dnsConfig.options[0].value: Invalid value: \"1\\nnameserver 6.6.6.6\": {WHITESPACE_MSG}"),
                format!("spec.dnsConfig.options[1].name: Invalid value: \"a b\": {WHITESPACE_MSG}"),
            ]
        );
    }

    #[test]
    fn search_lists_are_bounded_in_count_and_characters() {
        let many: Vec<String> = (0..33).map(|i| format!("d{i}")).collect();
        let got = dns(&format!(
            "containers: []\ndnsConfig: {{searches: [{}]}}\n",
            many.join(", ")
        ));
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(
            got[0].starts_with("spec.dnsConfig.searches: Invalid value: []string{\"d0\", \"d1\"")
                && got[0].ends_with("}: must not have more than 32 search paths"),
            "{got:?}"
        );
        // 8 paths of 253 characters, a ninth of 16 and 8 spaces: 2048 fits, 2049 not.
        let label = "a".repeat(63);
        let long = |extra: usize| {
            let mut paths = vec![format!("{label}.{label}.{label}.{}", "b".repeat(61)); 8];
            paths.push("c".repeat(16 + extra));
            paths.join(", ")
        };
        assert!(dns(&format!(
            "containers: []\ndnsConfig: {{searches: [{}]}}\n",
            long(0)
        ))
        .is_empty());
        let got = dns(&format!(
            "containers: []\ndnsConfig: {{searches: [{}]}}\n",
            long(1)
        ));
        assert!(
            got.iter().any(|m| m.ends_with(
                "must not have more than 2048 characters (including spaces) in the search list"
            )),
            "{got:?}"
        );
    }

    #[test]
    fn ips_are_read_as_go_reads_them() {
        for ok in [
            "1.2.3.4",
            "001.02.3.255",
            "::1",
            "::ffff:1.2.3.4",
            "2001:db8::ffff",
        ] {
            assert!(is_valid_ip(&Path::new("ip"), ok).is_empty(), "{ok}");
        }
        for bad in [
            "",
            "1.2.3",
            "1.2.3.256",
            "1.2.3.4 ",
            "a.b.c.d",
            "fe80::1%eth0",
            "1.2.3.-4",
        ] {
            assert_eq!(is_valid_ip(&Path::new("ip"), bad).0.len(), 1, "{bad:?}");
        }
    }
}
