//! A pod's name service files: its hostname and domain (upstream
//! `GeneratePodHostNameAndDomain`, `GetNodenameForKernel`), its DNS resolver settings
//! (`pkg/kubelet/network/dns`: `GetPodDNS`, `parseResolvConf`, the limits) rendered as
//! a resolv.conf (dockershim's `rewriteResolvFile` format), and its managed
//! `/etc/hosts` (`managedHostsFileContent`, `nodeHostsFileContent`). All pure: file
//! contents come in as strings and go out as strings.

use k8s_openapi::api::core::v1::Pod;

/// Upstream `validation.MaxDNSNameservers`.
pub(crate) const MAX_NAMESERVERS: usize = 3;
/// Upstream `MaxDNSSearchPathsExpanded` (ExpandedDNSConfig is GA).
pub(crate) const MAX_SEARCH_PATHS: usize = 32;
/// Upstream `MaxDNSSearchListCharsExpanded`.
pub(crate) const MAX_SEARCH_LIST_CHARS: usize = 2048;
/// A search path longer than a DNS subdomain makes some resolvers abort (glibc 2.28).
const MAX_SEARCH_PATH_LEN: usize = 253;
/// The Linux nodename field holds 64 characters.
const FQDN_MAX_LEN: usize = 64;
/// Upstream caps the hostname at 63 characters.
const HOSTNAME_MAX_LEN: usize = 63;

/// The kubelet's DNS settings (`clusterDNS`, `clusterDomain`, `resolvConf`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DnsSettings {
    /// `clusterDNS`: the nameservers of `ClusterFirst` pods.
    pub cluster_dns: Vec<String>,
    /// `clusterDomain`, e.g. `cluster.local`; "" if unset.
    pub cluster_domain: String,
    /// `resolvConf`: the node's resolver file that `Default` pods get; "" disables it.
    pub resolv_conf: String,
}

/// A pod's resolver configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DnsConfig {
    /// `nameserver` lines.
    pub servers: Vec<String>,
    /// The `search` line.
    pub searches: Vec<String>,
    /// The `options` line.
    pub options: Vec<String>,
}

/// Something worth a log line (upstream sends these as events).
pub(crate) type Warnings = Vec<String>;

/// The pod's hostname and domain (upstream `GeneratePodHostNameAndDomain`): the
/// hostname is `spec.hostname` or the pod name, cut to 63 characters; the domain is
/// `<subdomain>.<namespace>.svc.<clusterDomain>` when a subdomain is set.
pub(crate) fn hostname_and_domain(
    pod: &Pod,
    cluster_domain: &str,
) -> Result<(String, String), String> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let spec = pod.spec.as_ref();
    let mut hostname = name.clone();
    if let Some(h) = spec
        .and_then(|s| s.hostname.as_deref())
        .filter(|h| !h.is_empty())
    {
        if let Err(e) = dns1123_label(h) {
            return Err(format!("pod Hostname {h:?} is not a valid DNS label: {e}"));
        }
        hostname = h.to_string();
    }
    if hostname.len() > HOSTNAME_MAX_LEN {
        let cut = hostname[..HOSTNAME_MAX_LEN].trim_end_matches(['-', '.']);
        if cut.is_empty() {
            return Err(format!(
                "hostname for pod {name:?} was invalid: {hostname:?}"
            ));
        }
        hostname = cut.to_string();
    }
    let mut domain = String::new();
    if let Some(sub) = spec
        .and_then(|s| s.subdomain.as_deref())
        .filter(|s| !s.is_empty())
    {
        if let Err(e) = dns1123_label(sub) {
            return Err(format!(
                "pod Subdomain {sub:?} is not a valid DNS label: {e}"
            ));
        }
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        domain = format!("{sub}.{ns}.svc.{cluster_domain}");
    }
    Ok((hostname, domain))
}

/// The name the kernel gets (upstream `GetNodenameForKernel`): the FQDN when
/// `setHostnameAsFQDN` is set and there is a domain, else the short hostname.
pub(crate) fn kernel_hostname(
    hostname: &str,
    domain: &str,
    as_fqdn: bool,
) -> Result<String, String> {
    if domain.is_empty() || !as_fqdn {
        return Ok(hostname.to_string());
    }
    let fqdn = format!("{hostname}.{domain}");
    if fqdn.len() > FQDN_MAX_LEN {
        return Err(format!(
            "failed to construct FQDN from pod hostname and cluster domain, FQDN {fqdn} is too long ({FQDN_MAX_LEN} characters is the max, {} characters requested)",
            fqdn.len()
        ));
    }
    Ok(fqdn)
}

/// RFC 1123 label: lowercase alphanumerics and `-`, starting and ending alphanumeric.
fn dns1123_label(s: &str) -> Result<(), &'static str> {
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    if s.len() > 63 {
        return Err("must be no more than 63 characters");
    }
    let valid = s.chars().all(|c| ok_char(c) || c == '-')
        && s.chars().next().is_some_and(ok_char)
        && s.chars().last().is_some_and(ok_char);
    if valid {
        Ok(())
    } else {
        Err("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character")
    }
}

/// Parses a resolv.conf (upstream `parseResolvConf`): nameservers accumulate, the last
/// `search` and `options` lines win, trailing dots of search domains are dropped.
pub fn parse_resolv_conf(text: &str) -> DnsConfig {
    let mut c = DnsConfig::default();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.first().copied() {
            Some("nameserver") if fields.len() >= 2 => c.servers.push(fields[1].to_string()),
            Some("search") => {
                c.searches = fields[1..]
                    .iter()
                    .map(|s| s.trim_end_matches('.').to_string())
                    .collect()
            }
            Some("options") => c.options = fields[1..].iter().map(|s| s.to_string()).collect(),
            _ => {}
        }
    }
    c
}

/// The DNS policy that applies, after upstream's fallbacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DnsType {
    /// The cluster's nameservers and search domains.
    Cluster,
    /// The node's resolver file.
    Host,
    /// Only the pod's `dnsConfig`.
    None,
}

/// Upstream `getPodDNSType`: `ClusterFirst` on the host network falls back to
/// `Default`; the API's default policy is `ClusterFirst`.
pub(crate) fn dns_type(pod: &Pod) -> Result<DnsType, String> {
    let spec = pod.spec.as_ref();
    let host_network = spec.and_then(|s| s.host_network).unwrap_or(false);
    match spec
        .and_then(|s| s.dns_policy.as_deref())
        .unwrap_or("ClusterFirst")
    {
        "None" => Ok(DnsType::None),
        "ClusterFirstWithHostNet" => Ok(DnsType::Cluster),
        "ClusterFirst" if !host_network => Ok(DnsType::Cluster),
        "ClusterFirst" | "Default" => Ok(DnsType::Host),
        other => Err(format!("invalid DNSPolicy={other}")),
    }
}

/// A pod's resolver configuration (upstream `GetPodDNS`). `host_resolv` is the text of
/// the node's resolver file (None when `resolvConf` is ""); `node_ipv6` says whether
/// the node's address is IPv6 (for the no-resolv.conf fallback).
pub(crate) fn pod_dns(
    pod: &Pod,
    settings: &DnsSettings,
    host_resolv: Option<&str>,
    node_ipv6: bool,
) -> (DnsConfig, Warnings) {
    let mut warnings = Vec::new();
    let mut cfg = host_resolv.map(parse_resolv_conf).unwrap_or_default();
    let kind = match dns_type(pod) {
        Ok(k) => k,
        Err(e) => {
            warnings.push(format!("{e}; falling back to the ClusterFirst policy"));
            DnsType::Cluster
        }
    };
    let mut host = kind == DnsType::Host;
    match kind {
        DnsType::None => cfg = DnsConfig::default(),
        DnsType::Cluster if !settings.cluster_dns.is_empty() => {
            cfg.servers = settings.cluster_dns.clone();
            cfg.searches = cluster_searches(pod, &settings.cluster_domain, &cfg.searches);
            cfg.options = vec!["ndots:5".to_string()];
        }
        DnsType::Cluster => {
            warnings.push(
                "kubelet does not have ClusterDNS IP configured and cannot create Pod using \"ClusterFirst\" policy. Falling back to \"Default\" policy."
                    .to_string(),
            );
            host = true;
        }
        DnsType::Host => {}
    }
    if host && host_resolv.is_none() {
        // No resolver file: point at the local machine, as the resolver library does
        // with no nameserver, and search nothing.
        cfg.servers = vec![if node_ipv6 { "::1" } else { "127.0.0.1" }.to_string()];
        cfg.searches = vec![".".to_string()];
    }
    if let Some(extra) = pod.spec.as_ref().and_then(|s| s.dns_config.as_ref()) {
        append_unique(&mut cfg.servers, extra.nameservers.iter().flatten());
        append_unique(&mut cfg.searches, extra.searches.iter().flatten());
        for o in extra.options.iter().flatten() {
            let Some(name) = o.name.as_deref() else {
                continue;
            };
            let rendered = match o.value.as_deref() {
                Some(v) if !v.is_empty() => format!("{name}:{v}"),
                _ => name.to_string(),
            };
            // Options given by the pod replace an existing option of the same name.
            let same = |existing: &String| existing.split(':').next() == Some(name);
            match cfg.options.iter().position(same) {
                Some(i) => cfg.options[i] = rendered,
                None => cfg.options.push(rendered),
            }
        }
    }
    fit_limits(&mut cfg, &mut warnings);
    (cfg, warnings)
}

fn cluster_searches(pod: &Pod, domain: &str, host: &[String]) -> Vec<String> {
    if domain.is_empty() {
        return host.to_vec();
    }
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    let mut out = vec![
        format!("{ns}.svc.{domain}"),
        format!("svc.{domain}"),
        domain.to_string(),
    ];
    append_unique(&mut out, host.iter());
    out
}

fn append_unique<'a>(to: &mut Vec<String>, more: impl Iterator<Item = &'a String>) {
    for s in more {
        if !to.contains(s) {
            to.push(s.clone());
        }
    }
    // Duplicates already in `to` stay only once too (upstream `omitDuplicates`).
    let mut seen = Vec::new();
    to.retain(|s| {
        let new = !seen.contains(s);
        seen.push(s.clone());
        new
    });
}

/// Upstream `formDNSConfigFitsLimits`: at most 3 nameservers; at most 32 search paths,
/// none longer than 253 characters, 2048 characters in all.
fn fit_limits(cfg: &mut DnsConfig, warnings: &mut Warnings) {
    if cfg.servers.len() > MAX_NAMESERVERS {
        cfg.servers.truncate(MAX_NAMESERVERS);
        warnings.push(format!(
            "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: {}",
            cfg.servers.join(" ")
        ));
    }
    let mut exceeded = false;
    if cfg.searches.len() > MAX_SEARCH_PATHS {
        cfg.searches.truncate(MAX_SEARCH_PATHS);
        exceeded = true;
    }
    let before = cfg.searches.len();
    cfg.searches.retain(|s| s.len() <= MAX_SEARCH_PATH_LEN);
    exceeded |= cfg.searches.len() != before;
    while cfg.searches.join(" ").len() > MAX_SEARCH_LIST_CHARS {
        cfg.searches.pop();
        exceeded = true;
    }
    if exceeded {
        warnings.push(format!(
            "Search Line limits were exceeded, some search paths have been omitted, the applied search line is: {}",
            cfg.searches.join(" ")
        ));
    }
}

/// systemd-resolved's stub resolver, the only nameserver of its `/etc/resolv.conf`.
pub(crate) const RESOLVED_STUB: &str = "127.0.0.53";
/// The file systemd-resolved keeps with the servers it forwards to: what kubeadm
/// points the kubelet's `resolvConf` at on such a host.
pub(crate) const RESOLVED_UPLINK: &str = "/run/systemd/resolve/resolv.conf";
/// The default `resolvConf`, the one file that is swapped for [`RESOLVED_UPLINK`].
pub(crate) const HOST_RESOLV_CONF: &str = "/etc/resolv.conf";

/// The resolver file pods are given for `configured` (`resolvConf`): the same, unless
/// it is `/etc/resolv.conf` naming only systemd-resolved's stub (a loopback address,
/// which no pod can reach from its own network namespace) and systemd-resolved's own
/// file names a server that is not loopback: then that file, and the reason why, to
/// be logged once. `read` reads a file (None when it cannot).
pub(crate) fn node_resolv_conf(
    configured: &str,
    read: &dyn Fn(&str) -> Option<String>,
) -> (String, Option<String>) {
    let unchanged = (configured.to_string(), None);
    if configured != HOST_RESOLV_CONF {
        return unchanged;
    }
    let Some(text) = read(configured) else {
        return unchanged;
    };
    let servers = parse_resolv_conf(&text).servers;
    if servers.is_empty() || servers.iter().any(|s| s != RESOLVED_STUB) {
        return unchanged;
    }
    let uplink = read(RESOLVED_UPLINK).map(|t| parse_resolv_conf(&t).servers);
    match uplink {
        Some(up) if up.iter().any(|s| !is_loopback(s)) => (
            RESOLVED_UPLINK.to_string(),
            Some(format!(
                "resolvConf {configured} names only systemd-resolved's stub \
                 ({RESOLVED_STUB}), which pods cannot reach: pods get \
                 {RESOLVED_UPLINK} instead (nameservers {})",
                up.join(", ")
            )),
        ),
        _ => unchanged,
    }
}

/// Whether a nameserver address is a loopback address (127.0.0.0/8, ::1).
fn is_loopback(server: &str) -> bool {
    server
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}

/// A warning for a pod in its own network namespace whose resolver would be a loopback
/// address: the pod's own loopback, where nothing answers DNS. None for a
/// host-network pod (the node's loopback is its own) or when no server is loopback.
pub(crate) fn loopback_resolver_warning(pod: &Pod, cfg: &DnsConfig) -> Option<String> {
    let host_network = pod
        .spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false);
    if host_network {
        return None;
    }
    let server = cfg.servers.iter().find(|s| is_loopback(s))?;
    Some(format!(
        "nameserver {server} is a loopback address: the pod has its own network \
         namespace and nothing in it answers DNS there, so its name lookups will fail; \
         set clusterDNS, a resolvConf with reachable servers, or the pod's dnsConfig"
    ))
}

/// A resolv.conf for `cfg` (dockershim's `rewriteResolvFile` layout); None when there
/// is nothing to write, which leaves the runtime's own file in place.
pub fn render_resolv_conf(cfg: &DnsConfig) -> Option<String> {
    let mut lines: Vec<String> = cfg
        .servers
        .iter()
        .map(|s| format!("nameserver {s}"))
        .collect();
    if !cfg.searches.is_empty() {
        lines.push(format!("search {}", cfg.searches.join(" ")));
    }
    if !cfg.options.is_empty() {
        lines.push(format!("options {}", cfg.options.join(" ")));
    }
    (!lines.is_empty()).then(|| lines.join("\n") + "\n")
}

const MANAGED_HOSTS_HEADER: &str = "# Kubernetes-managed hosts file.\n";
const MANAGED_HOSTS_HEADER_HOST_NETWORK: &str = "# Kubernetes-managed hosts file (host network).\n";

/// The managed `/etc/hosts` of a pod (upstream `managedHostsFileContent`), or for a
/// host-network pod the node's hosts file under a header (`nodeHostsFileContent`);
/// `spec.hostAliases` are appended in both cases.
pub(crate) fn render_hosts(
    pod: &Pod,
    pod_ips: &[String],
    hostname: &str,
    domain: &str,
    node_hosts: Option<&str>,
) -> String {
    let mut out = String::new();
    match node_hosts {
        Some(node) => {
            out.push_str(MANAGED_HOSTS_HEADER_HOST_NETWORK);
            out.push_str(node);
        }
        None => {
            out.push_str(MANAGED_HOSTS_HEADER);
            out.push_str("127.0.0.1\tlocalhost\n");
            out.push_str("::1\tlocalhost ip6-localhost ip6-loopback\n");
            out.push_str("fe00::0\tip6-localnet\n");
            out.push_str("fe00::0\tip6-mcastprefix\n");
            out.push_str("fe00::1\tip6-allnodes\n");
            out.push_str("fe00::2\tip6-allrouters\n");
            for ip in pod_ips {
                if domain.is_empty() {
                    out.push_str(&format!("{ip}\t{hostname}\n"));
                } else {
                    out.push_str(&format!("{ip}\t{hostname}.{domain}\t{hostname}\n"));
                }
            }
        }
    }
    let aliases = pod.spec.as_ref().and_then(|s| s.host_aliases.as_ref());
    if let Some(aliases) = aliases.filter(|a| !a.is_empty()) {
        out.push_str("\n# Entries added by HostAliases.\n");
        for a in aliases {
            let names: Vec<&str> = a.hostnames.iter().flatten().map(String::as_str).collect();
            out.push_str(&format!("{}\t{}\n", a.ip, names.join("\t")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{HostAlias, PodDNSConfig, PodDNSConfigOption, PodSpec};

    fn pod(spec: PodSpec) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some("web-node1".into());
        p.metadata.namespace = Some("prod".into());
        p.spec = Some(spec);
        p
    }

    #[test]
    fn hostname_domain_and_fqdn() {
        let p = pod(PodSpec {
            hostname: Some("h".into()),
            subdomain: Some("sub".into()),
            ..Default::default()
        });
        assert_eq!(
            hostname_and_domain(&p, "cluster.local"),
            Ok(("h".into(), "sub.prod.svc.cluster.local".into()))
        );
        assert_eq!(
            kernel_hostname("h", "sub.prod.svc.cluster.local", true).as_deref(),
            Ok("h.sub.prod.svc.cluster.local")
        );
        assert_eq!(
            kernel_hostname("h", "sub.prod.svc.cluster.local", false).as_deref(),
            Ok("h")
        );
        assert_eq!(kernel_hostname("h", "", true).as_deref(), Ok("h"));
        assert!(kernel_hostname(&"a".repeat(40), &"b".repeat(40), true)
            .expect_err("too long")
            .contains("is too long (64 characters is the max, 81 characters requested)"));
        let mut long = pod(PodSpec::default());
        long.metadata.name = Some(format!("{}-x", "a".repeat(62)));
        assert_eq!(
            hostname_and_domain(&long, "").map(|(h, _)| h),
            Ok("a".repeat(62))
        );
        let bad = pod(PodSpec {
            hostname: Some("Bad_Name".into()),
            ..Default::default()
        });
        assert!(hostname_and_domain(&bad, "")
            .expect_err("invalid")
            .starts_with("pod Hostname \"Bad_Name\" is not a valid DNS label"));
    }

    #[test]
    fn the_resolved_stub_is_swapped_for_resolveds_own_file() {
        let files = |stub: &'static str, uplink: Option<&'static str>| {
            move |p: &str| match p {
                HOST_RESOLV_CONF => Some(stub.to_string()),
                RESOLVED_UPLINK => uplink.map(str::to_string),
                _ => None,
            }
        };
        let stub = "nameserver 127.0.0.53\noptions edns0 trust-ad\nsearch lan\n";
        let (path, why) = node_resolv_conf(
            HOST_RESOLV_CONF,
            &files(stub, Some("nameserver 192.168.1.1\nsearch lan\n")),
        );
        assert_eq!(path, RESOLVED_UPLINK);
        assert!(why.expect("a reason").contains("192.168.1.1"));
        // No file of systemd-resolved's, or one with only loopback servers: unchanged.
        for uplink in [None, Some("nameserver 127.0.0.1\n")] {
            let (path, why) = node_resolv_conf(HOST_RESOLV_CONF, &files(stub, uplink));
            assert_eq!((path.as_str(), why), (HOST_RESOLV_CONF, None));
        }
        // A real server beside the stub, or another configured file: unchanged.
        let mixed = "nameserver 127.0.0.53\nnameserver 10.0.0.2\n";
        let (path, _) = node_resolv_conf(
            HOST_RESOLV_CONF,
            &files(mixed, Some("nameserver 192.168.1.1\n")),
        );
        assert_eq!(path, HOST_RESOLV_CONF);
        let (path, _) = node_resolv_conf("/etc/other.conf", &|_| Some(stub.into()));
        assert_eq!(path, "/etc/other.conf");
    }

    #[test]
    fn a_loopback_resolver_is_a_warning_unless_the_pod_is_on_the_host_network() {
        let cfg = |servers: &[&str]| DnsConfig {
            servers: servers.iter().map(|s| s.to_string()).collect(),
            ..DnsConfig::default()
        };
        let mut pod = Pod {
            spec: Some(Default::default()),
            ..Pod::default()
        };
        assert!(loopback_resolver_warning(&pod, &cfg(&["10.96.0.10"])).is_none());
        for s in ["127.0.0.53", "127.0.0.1", "::1"] {
            let w = loopback_resolver_warning(&pod, &cfg(&["10.0.0.2", s])).expect("warning");
            assert!(w.contains(s), "{w}");
        }
        pod.spec.as_mut().expect("spec").host_network = Some(true);
        assert!(loopback_resolver_warning(&pod, &cfg(&["127.0.0.53"])).is_none());
    }

    #[test]
    fn resolv_conf_parsing_follows_upstream() {
        let c = parse_resolv_conf(
            "# comment\nnameserver 1.1.1.1\nnameserver 8.8.8.8\nsearch a.com. b.com\nsearch c.com d.com.\noptions ndots:2 edns0\nnameserver\n",
        );
        assert_eq!(c.servers, ["1.1.1.1", "8.8.8.8"]);
        assert_eq!(c.searches, ["c.com", "d.com"]);
        assert_eq!(c.options, ["ndots:2", "edns0"]);
    }

    const HOST: &str = "nameserver 10.0.0.53\nsearch corp.example\noptions timeout:2\n";

    fn settings(dns: &[&str], domain: &str) -> DnsSettings {
        DnsSettings {
            cluster_dns: dns.iter().map(|s| s.to_string()).collect(),
            cluster_domain: domain.into(),
            resolv_conf: "/etc/resolv.conf".into(),
        }
    }

    #[test]
    fn dns_policies() {
        let cf = pod(PodSpec::default());
        let (c, w) = pod_dns(
            &cf,
            &settings(&["10.96.0.10"], "cluster.local"),
            Some(HOST),
            false,
        );
        assert_eq!(
            render_resolv_conf(&c).as_deref(),
            Some("nameserver 10.96.0.10\nsearch prod.svc.cluster.local svc.cluster.local cluster.local corp.example\noptions ndots:5\n")
        );
        assert!(w.is_empty());

        // ClusterFirst without clusterDNS: Default, with a warning.
        let (c, w) = pod_dns(&cf, &settings(&[], ""), Some(HOST), false);
        assert_eq!(render_resolv_conf(&c).as_deref(), Some(HOST));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("Falling back to \"Default\" policy"));

        // ClusterFirst on the host network is Default; ClusterFirstWithHostNet is not.
        let hn = |policy: &str| {
            pod(PodSpec {
                host_network: Some(true),
                dns_policy: Some(policy.into()),
                ..Default::default()
            })
        };
        let s = settings(&["10.96.0.10"], "cluster.local");
        let (c, _) = pod_dns(&hn("ClusterFirst"), &s, Some(HOST), false);
        assert_eq!(c.servers, ["10.0.0.53"]);
        let (c, _) = pod_dns(&hn("ClusterFirstWithHostNet"), &s, Some(HOST), false);
        assert_eq!(c.servers, ["10.96.0.10"]);

        // None: only dnsConfig; options given twice keep one entry, the pod's value.
        let none = pod(PodSpec {
            dns_policy: Some("None".into()),
            dns_config: Some(PodDNSConfig {
                nameservers: Some(vec!["1.2.3.4".into(), "1.2.3.4".into()]),
                searches: Some(vec!["ns1.svc.cluster-domain.example".into()]),
                options: Some(vec![
                    PodDNSConfigOption {
                        name: Some("ndots".into()),
                        value: Some("2".into()),
                    },
                    PodDNSConfigOption {
                        name: Some("edns0".into()),
                        value: None,
                    },
                ]),
            }),
            ..Default::default()
        });
        let (c, _) = pod_dns(&none, &s, Some(HOST), false);
        assert_eq!(
            render_resolv_conf(&c).as_deref(),
            Some("nameserver 1.2.3.4\nsearch ns1.svc.cluster-domain.example\noptions ndots:2 edns0\n")
        );
        // None without dnsConfig: nothing to write.
        let bare_none = pod(PodSpec {
            dns_policy: Some("None".into()),
            ..Default::default()
        });
        assert_eq!(
            render_resolv_conf(&pod_dns(&bare_none, &s, Some(HOST), false).0),
            None
        );

        // Default with dnsConfig options overriding the host's.
        let def = pod(PodSpec {
            dns_policy: Some("Default".into()),
            dns_config: Some(PodDNSConfig {
                options: Some(vec![PodDNSConfigOption {
                    name: Some("timeout".into()),
                    value: Some("5".into()),
                }]),
                ..Default::default()
            }),
            ..Default::default()
        });
        let (c, _) = pod_dns(&def, &s, Some(HOST), false);
        assert_eq!(c.options, ["timeout:5"]);
        // Default with resolvConf "": localhost and search ".".
        let (c, _) = pod_dns(&def, &s, None, false);
        assert_eq!(c.servers, ["127.0.0.1"]);
        assert_eq!(c.searches, ["."]);
    }

    #[test]
    fn dns_limits_are_enforced() {
        let many = pod(PodSpec {
            dns_policy: Some("None".into()),
            dns_config: Some(PodDNSConfig {
                nameservers: Some((1..=5).map(|i| format!("10.0.0.{i}")).collect()),
                searches: Some((0..40).map(|i| format!("d{i}.example")).collect()),
                options: None,
            }),
            ..Default::default()
        });
        let (c, w) = pod_dns(&many, &DnsSettings::default(), None, false);
        assert_eq!(c.servers.len(), MAX_NAMESERVERS);
        assert_eq!(c.searches.len(), MAX_SEARCH_PATHS);
        assert_eq!(w.len(), 2, "{w:?}");
    }

    #[test]
    fn hosts_file_like_upstream() {
        let p = pod(PodSpec {
            host_aliases: Some(vec![
                HostAlias {
                    ip: "127.0.0.1".into(),
                    hostnames: Some(vec!["foo.local".into(), "bar.local".into()]),
                },
                HostAlias {
                    ip: "10.1.2.3".into(),
                    hostnames: Some(vec!["foo.remote".into()]),
                },
            ]),
            ..Default::default()
        });
        let h = render_hosts(&p, &["172.17.0.5".into()], "web", "", None);
        assert_eq!(
            h,
            "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n172.17.0.5\tweb\n\n# Entries added by HostAliases.\n127.0.0.1\tfoo.local\tbar.local\n10.1.2.3\tfoo.remote\n"
        );
        let bare = pod(PodSpec::default());
        let h = render_hosts(
            &bare,
            &["172.17.0.5".into()],
            "web",
            "sub.prod.svc.cl",
            None,
        );
        assert!(h.ends_with("172.17.0.5\tweb.sub.prod.svc.cl\tweb\n"), "{h}");
        let h = render_hosts(&p, &[], "web", "", Some("127.0.0.1 localhost\n"));
        assert!(h.starts_with("# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n\n# Entries added by HostAliases.\n"), "{h}");
    }
}
