//! The command line: upstream kubelet's flags, spelled as pflag spells them.
//!
//! `--flag=value` and `--flag value` both work, and so do the shorthands `-v` and `-h`
//! (`-v 4`, `-v=4`, `-v4`). The last occurrence of a flag wins. Values are checked here,
//! once, so an error names the flag; layering over the config file happens in the
//! parent module. As with pflag, `--help` ends parsing where it stands, while
//! `--version` is honoured after every flag parsed.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::duration::{format_duration, parse_duration};
use super::{defaults, ConfigError, MAX_VERBOSITY};

/// Flags as given; `None`: not on the command line.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Flags {
    /// `--config`.
    pub config: Option<PathBuf>,
    /// `--pod-manifest-path`; an empty value means "no file source".
    pub pod_manifest_path: Option<PathBuf>,
    /// `--hostname-override`.
    pub hostname_override: Option<String>,
    /// `--root-dir`.
    pub root_dir: Option<PathBuf>,
    /// `--container-runtime-endpoint`.
    pub container_runtime_endpoint: Option<String>,
    /// `--pod-infra-container-image`.
    pub pod_infra_container_image: Option<String>,
    /// `--healthz-port`.
    pub healthz_port: Option<u16>,
    /// `--healthz-bind-address`.
    pub healthz_bind_address: Option<IpAddr>,
    /// `--read-only-port`.
    pub read_only_port: Option<u16>,
    /// `--address`.
    pub address: Option<IpAddr>,
    /// `--port`.
    pub port: Option<u16>,
    /// `--sync-frequency`.
    pub sync_frequency: Option<Duration>,
    /// `--file-check-frequency`.
    pub file_check_frequency: Option<Duration>,
    /// `--v` / `-v`.
    pub verbosity: Option<u8>,
    /// `--manifest-url`; an empty value means "no HTTP source".
    pub manifest_url: Option<String>,
    /// `--manifest-url-header`, every occurrence in order (name, value).
    pub manifest_url_headers: Vec<(String, String)>,
    /// `--http-check-frequency`.
    pub http_check_frequency: Option<Duration>,
    /// `--etcd-servers`, split on commas; empty: no etcd source.
    pub etcd_servers: Option<Vec<String>>,
    /// `--etcd-prefix`.
    pub etcd_prefix: Option<String>,
    /// `--etcd-cafile`.
    pub etcd_cafile: Option<PathBuf>,
    /// `--etcd-certfile`.
    pub etcd_certfile: Option<PathBuf>,
    /// `--etcd-keyfile`.
    pub etcd_keyfile: Option<PathBuf>,
    /// `--kubeconfig`; an empty value means "no API server" (standalone).
    pub kubeconfig: Option<PathBuf>,
    /// `--cluster-dns` (repeatable, comma-separated).
    pub cluster_dns: Option<Vec<String>>,
    /// `--cluster-domain`.
    pub cluster_domain: Option<String>,
    /// `--resolv-conf`; "" disables it.
    pub resolv_conf: Option<String>,
}

/// What the command line asks for.
// Built once at startup and matched at once: the size of `Run` costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Parsed {
    /// Run with these flags.
    Run(Flags),
    /// `--help` / `-h`.
    Help,
    /// `--version`.
    Version,
}

/// One flag: its long name, shorthand, value placeholder (None for booleans) and help.
struct Spec {
    name: &'static str,
    short: Option<char>,
    value: Option<&'static str>,
    help: &'static str,
}

/// Every flag, in the order `--help` lists them.
const SPECS: &[Spec] = &[
    Spec {
        name: "config",
        short: None,
        value: Some("file"),
        help: "Read a KubeletConfiguration (kubelet.config.k8s.io/v1beta1) from this file. \
               Flags given on the command line override its values.",
    },
    Spec {
        name: "pod-manifest-path",
        short: None,
        value: Some("path"),
        help: "Directory (or single file) of static pod manifests to run. Empty: none.",
    },
    Spec {
        name: "hostname-override",
        short: None,
        value: Some("name"),
        help: "Use this as the node name instead of the host name.",
    },
    Spec {
        name: "root-dir",
        short: None,
        value: Some("path"),
        help: "Directory for the kubelet's own files (volume mounts, plugins, checkpoints).",
    },
    Spec {
        name: "container-runtime-endpoint",
        short: None,
        value: Some("endpoint"),
        help: "The Docker engine's endpoint.",
    },
    Spec {
        name: "pod-infra-container-image",
        short: None,
        value: Some("image"),
        help: "Image of each pod's sandbox (\"pause\") container.",
    },
    Spec {
        name: "healthz-port",
        short: None,
        value: Some("port"),
        help: "Port of the localhost healthz endpoint; 0 disables it.",
    },
    Spec {
        name: "healthz-bind-address",
        short: None,
        value: Some("ip"),
        help: "IP address the healthz server listens on.",
    },
    Spec {
        name: "read-only-port",
        short: None,
        value: Some("port"),
        help: "Port of the unauthenticated read-only server; 0 disables it. \
               Default 10255, or 0 when --config is given.",
    },
    Spec {
        name: "address",
        short: None,
        value: Some("ip"),
        help: "IP address the kubelet servers listen on.",
    },
    Spec {
        name: "port",
        short: None,
        value: Some("port"),
        help: "Port of the authenticated kubelet server; 0 disables it.",
    },
    Spec {
        name: "sync-frequency",
        short: None,
        value: Some("duration"),
        help: "Longest time between two syncs of a pod.",
    },
    Spec {
        name: "file-check-frequency",
        short: None,
        value: Some("duration"),
        help: "Time between two full reads of --pod-manifest-path (changes are also \
               picked up at once through inotify).",
    },
    Spec {
        name: "manifest-url",
        short: None,
        value: Some("url"),
        help: "URL of static pod manifests to run (one Pod, a PodList, or several \
               YAML/JSON documents), polled every --http-check-frequency. Empty: none.",
    },
    Spec {
        name: "manifest-url-header",
        short: None,
        value: Some("'Name:Value,…'"),
        help: "HTTP headers sent with --manifest-url, comma-separated Name:Value pairs. \
               Repeatable; a name given twice is sent twice, in order.",
    },
    Spec {
        name: "http-check-frequency",
        short: None,
        value: Some("duration"),
        help: "Time between two fetches of --manifest-url.",
    },
    Spec {
        name: "etcd-servers",
        short: None,
        value: Some("urls"),
        help: "Comma-separated etcd client URLs to read pods from (failed over in \
               order). Empty: no etcd source.",
    },
    Spec {
        name: "etcd-prefix",
        short: None,
        value: Some("prefix"),
        help: "Key prefix of this node's pods in etcd; each key holds a Pod or a PodList. \
               Default /registry/hosts/<node name>/.",
    },
    Spec {
        name: "etcd-cafile",
        short: None,
        value: Some("file"),
        help: "CA bundle to verify the etcd servers with.",
    },
    Spec {
        name: "etcd-certfile",
        short: None,
        value: Some("file"),
        help: "Client certificate for etcd (with --etcd-keyfile).",
    },
    Spec {
        name: "etcd-keyfile",
        short: None,
        value: Some("file"),
        help: "Client key for etcd (with --etcd-certfile).",
    },
    Spec {
        name: "kubeconfig",
        short: None,
        value: Some("file"),
        help: "kubeconfig of the API server to take this node's pods from. Empty: \
               standalone (no API server).",
    },
    Spec {
        name: "cluster-dns",
        short: None,
        value: Some("ips"),
        help: "Comma-separated nameserver IPs of pods with dnsPolicy ClusterFirst. Without \
               it such pods get the node's resolver (the Default policy).",
    },
    Spec {
        name: "cluster-domain",
        short: None,
        value: Some("domain"),
        help: "The cluster's DNS domain, e.g. cluster.local: search paths and pod FQDNs.",
    },
    Spec {
        name: "resolv-conf",
        short: None,
        value: Some("file"),
        help: "Resolver file that pods with dnsPolicy Default get (default /etc/resolv.conf); \
               empty: none.",
    },
    Spec {
        name: "v",
        short: Some('v'),
        value: Some("level"),
        help: "Log verbosity, 0 to 10: 0-1 info, 2-4 debug, 5 and up trace.",
    },
    Spec {
        name: "help",
        short: Some('h'),
        value: None,
        help: "Print this help and exit.",
    },
    Spec {
        name: "version",
        short: None,
        value: None,
        help: "Print the version and exit.",
    },
];

fn spec_by_name(name: &str) -> Option<&'static Spec> {
    SPECS.iter().find(|s| s.name == name)
}

fn spec_by_short(c: char) -> Option<&'static Spec> {
    SPECS.iter().find(|s| s.short == Some(c))
}

/// Parses the arguments that follow the program name.
pub fn parse(args: &[String]) -> Result<Parsed, ConfigError> {
    let mut flags = Flags::default();
    let mut version = false;
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        let (spec, shown, inline) = if arg == "--" {
            // pflag's end of flags: anything after it is an argument, and the kubelet
            // takes none.
            return match args.get(i) {
                Some(a) => Err(ConfigError::UnexpectedArgument(a.clone())),
                None => Ok(finish(flags, version)),
            };
        } else if let Some(long) = arg.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (long, None),
            };
            let spec =
                spec_by_name(name).ok_or_else(|| ConfigError::UnknownFlag(format!("--{name}")))?;
            (spec, format!("--{name}"), inline)
        } else if let Some(short) = arg.strip_prefix('-').filter(|s| !s.is_empty()) {
            let mut chars = short.chars();
            let c = chars.next().unwrap_or('-');
            let rest = chars.as_str();
            let spec = spec_by_short(c).ok_or_else(|| ConfigError::UnknownFlag(arg.clone()))?;
            let inline = match rest.strip_prefix('=') {
                Some(v) => Some(v.to_string()),
                None if rest.is_empty() => None,
                // `-v4`: pflag lets a shorthand's value follow directly.
                None if spec.value.is_some() => Some(rest.to_string()),
                None => return Err(ConfigError::UnknownFlag(arg.clone())),
            };
            (spec, format!("-{c}"), inline)
        } else {
            return Err(ConfigError::UnexpectedArgument(arg.clone()));
        };

        if spec.value.is_none() {
            let on = match inline.as_deref() {
                None => true,
                Some(v) => parse_bool(spec.name, v).map_err(|reason| ConfigError::InvalidFlag {
                    flag: shown.clone(),
                    value: v.to_string(),
                    reason,
                })?,
            };
            match spec.name {
                "help" if on => return Ok(Parsed::Help),
                "version" => version = on,
                _ => {}
            }
            continue;
        }

        let value = match inline {
            Some(v) => v,
            None => {
                // pflag takes the next argument as the value, whatever it looks like.
                let v = args.get(i).ok_or_else(|| ConfigError::MissingValue {
                    flag: shown.clone(),
                })?;
                i += 1;
                v.clone()
            }
        };
        set(&mut flags, spec.name, &value).map_err(|reason| ConfigError::InvalidFlag {
            flag: shown,
            value,
            reason,
        })?;
    }
    Ok(finish(flags, version))
}

fn finish(flags: Flags, version: bool) -> Parsed {
    if version {
        Parsed::Version
    } else {
        Parsed::Run(flags)
    }
}

/// A boolean flag's value, as Go's `strconv.ParseBool` reads it; `--version` also
/// takes upstream's `raw`.
fn parse_bool(name: &str, v: &str) -> Result<bool, String> {
    match v {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        "raw" if name == "version" => Ok(true),
        _ => Err("not a boolean (true or false)".into()),
    }
}

/// Checks one flag's value and stores it. The error is the reason only; the caller
/// names the flag and the value.
fn set(f: &mut Flags, name: &str, v: &str) -> Result<(), String> {
    match name {
        "config" => f.config = Some(non_empty(v)?.into()),
        "pod-manifest-path" => f.pod_manifest_path = Some(v.into()),
        "hostname-override" => f.hostname_override = Some(v.into()),
        "root-dir" => f.root_dir = Some(non_empty(v)?.into()),
        "container-runtime-endpoint" => f.container_runtime_endpoint = Some(non_empty(v)?.into()),
        "pod-infra-container-image" => f.pod_infra_container_image = Some(non_empty(v)?.into()),
        "healthz-port" => f.healthz_port = Some(port(v)?),
        "healthz-bind-address" => f.healthz_bind_address = Some(ip(v)?),
        "read-only-port" => f.read_only_port = Some(port(v)?),
        "address" => f.address = Some(ip(v)?),
        "port" => f.port = Some(port(v)?),
        "sync-frequency" => f.sync_frequency = Some(period(v)?),
        "file-check-frequency" => f.file_check_frequency = Some(period(v)?),
        "v" => f.verbosity = Some(verbosity(v)?),
        "manifest-url" => f.manifest_url = Some(url_or_empty(v)?),
        "manifest-url-header" => f.manifest_url_headers.extend(headers(v)?),
        "http-check-frequency" => f.http_check_frequency = Some(period(v)?),
        "etcd-servers" => f.etcd_servers = Some(url_list(v)?),
        "etcd-prefix" => f.etcd_prefix = Some(etcd_prefix(v)?),
        "etcd-cafile" => f.etcd_cafile = Some(non_empty(v)?.into()),
        "etcd-certfile" => f.etcd_certfile = Some(non_empty(v)?.into()),
        "etcd-keyfile" => f.etcd_keyfile = Some(non_empty(v)?.into()),
        "kubeconfig" => f.kubeconfig = Some(v.into()),
        "cluster-dns" => {
            // pflag's string slice: comma-separated, and a repeated flag adds to it.
            let list = f.cluster_dns.get_or_insert_with(Vec::new);
            for part in v.split(',').filter(|p| !p.is_empty()) {
                list.push(ip(part)?.to_string());
            }
        }
        "cluster-domain" => f.cluster_domain = Some(v.into()),
        "resolv-conf" => f.resolv_conf = Some(v.into()),
        // Every name with a value is listed above; SPECS and this match move together.
        other => return Err(format!("flag {other} is not handled")),
    }
    Ok(())
}

fn non_empty(v: &str) -> Result<&str, String> {
    if v.is_empty() {
        Err("must not be empty".into())
    } else {
        Ok(v)
    }
}

/// An http:// or https:// URL with a host, or empty ("none").
pub(crate) fn url_or_empty(v: &str) -> Result<String, String> {
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

/// Comma-separated URLs (empty entries dropped); none at all means "no etcd".
fn url_list(v: &str) -> Result<Vec<String>, String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| url_or_empty(s).map_err(|r| format!("{s:?}: {r}")))
        .map(|r| r.map(|u| u.trim_end_matches('/').to_string()))
        .collect()
}

/// An etcd key prefix: absolute, as every kubelet key is.
fn etcd_prefix(v: &str) -> Result<String, String> {
    if !v.starts_with('/') {
        return Err("must start with /".into());
    }
    Ok(v.to_string())
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

fn port(v: &str) -> Result<u16, String> {
    v.parse::<u16>()
        .map_err(|_| "not a port number (0-65535)".into())
}

fn ip(v: &str) -> Result<IpAddr, String> {
    v.parse::<IpAddr>().map_err(|_| "not an IP address".into())
}

/// A loop period: a Go duration above zero (a zero period would spin).
fn period(v: &str) -> Result<Duration, String> {
    match parse_duration(v) {
        Ok(d) if d.is_zero() => Err("must be greater than 0".into()),
        Ok(d) => Ok(d),
        Err(e) => Err(format!("invalid duration: {e}")),
    }
}

fn verbosity(v: &str) -> Result<u8, String> {
    v.parse::<u8>()
        .ok()
        .filter(|n| *n <= MAX_VERBOSITY)
        .ok_or_else(|| format!("not a verbosity level (0-{MAX_VERBOSITY})"))
}

/// The default shown in `--help`, if the flag has one worth showing.
fn default_of(name: &str) -> Option<String> {
    Some(match name {
        "root-dir" => defaults::ROOT_DIR.into(),
        "container-runtime-endpoint" => defaults::CONTAINER_RUNTIME_ENDPOINT.into(),
        "pod-infra-container-image" => defaults::POD_INFRA_CONTAINER_IMAGE.into(),
        "healthz-port" => defaults::HEALTHZ_PORT.to_string(),
        "healthz-bind-address" => defaults::HEALTHZ_BIND_ADDRESS.into(),
        "address" => defaults::ADDRESS.into(),
        "port" => defaults::PORT.to_string(),
        "sync-frequency" => format_duration(defaults::SYNC_FREQUENCY),
        "file-check-frequency" => format_duration(defaults::FILE_CHECK_FREQUENCY),
        "http-check-frequency" => format_duration(defaults::HTTP_CHECK_FREQUENCY),
        _ => return None,
    })
}

/// The text `--help` prints.
pub fn help() -> String {
    let mut out = String::from(
        "rkubelet: a Kubernetes node agent that runs pods through Docker.\n\n\
         Usage:\n  rkubelet [flags]\n\nFlags:\n",
    );
    let rows: Vec<(String, String)> = SPECS
        .iter()
        .map(|s| {
            let mut head = String::from("  ");
            if let Some(c) = s.short {
                head.push_str(&format!("-{c}, "));
            } else {
                head.push_str("    ");
            }
            head.push_str("--");
            head.push_str(s.name);
            if let Some(v) = s.value {
                head.push(' ');
                head.push_str(v);
            }
            let mut text = s.help.to_string();
            if let Some(d) = default_of(s.name) {
                text.push_str(&format!(" (default {d})"));
            }
            (head, text)
        })
        .collect();
    out.push_str(&help_rows(&rows));
    out
}

/// A flag whose name and value type are longer than this gets its description on the
/// next line, so one long name does not push every description to the right.
const HELP_MAX_HEAD: usize = 40;
/// Spaces between the longest name and the descriptions, as pflag.
const HELP_GAP: usize = 3;

/// Lays out `(name and type, description)` rows as pflag does: descriptions start in one
/// column after the longest name (at most [`HELP_MAX_HEAD`]) and [`HELP_GAP`] spaces;
/// a longer name is followed by its description on the next line, in that column.
fn help_rows(rows: &[(String, String)]) -> String {
    let width = |s: &str| s.chars().count();
    let column = rows
        .iter()
        .map(|(h, _)| width(h))
        .filter(|w| *w <= HELP_MAX_HEAD)
        .max()
        .unwrap_or(0)
        + HELP_GAP;
    let mut out = String::new();
    for (head, text) in rows {
        let w = width(head);
        if w + HELP_GAP <= column {
            out.push_str(&format!("{head}{}{text}\n", " ".repeat(column - w)));
        } else {
            out.push_str(&format!("{head}\n{}{text}\n", " ".repeat(column)));
        }
    }
    out
}

/// The text `--version` prints.
pub fn version() -> String {
    format!("rkubelet {}\n", env!("CARGO_PKG_VERSION"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    fn run(a: &[&str]) -> Flags {
        match parse(&args(a)) {
            Ok(Parsed::Run(f)) => f,
            other => panic!("{a:?}: {other:?}"),
        }
    }

    #[test]
    fn both_value_forms_and_shorthands_parse() {
        let want = Flags {
            healthz_port: Some(1),
            verbosity: Some(4),
            ..Flags::default()
        };
        assert_eq!(run(&["--healthz-port=1", "--v=4"]), want);
        assert_eq!(run(&["--healthz-port", "1", "--v", "4"]), want);
        assert_eq!(run(&["--healthz-port", "1", "-v", "4"]), want);
        assert_eq!(run(&["--healthz-port", "1", "-v=4"]), want);
        assert_eq!(run(&["--healthz-port", "1", "-v4"]), want);
    }

    #[test]
    fn every_flag_is_read() {
        let f = run(&[
            "--config=/etc/rk.yaml",
            "--pod-manifest-path",
            "/etc/kubernetes/manifests",
            "--hostname-override=Node-1",
            "--root-dir=/var/lib/rk",
            "--container-runtime-endpoint=unix:///run/docker.sock",
            "--pod-infra-container-image=pause:1",
            "--healthz-port=0",
            "--healthz-bind-address=0.0.0.0",
            "--read-only-port=0",
            "--address=::",
            "--port=0",
            "--sync-frequency=1m30s",
            "--file-check-frequency=500ms",
            "--v=10",
            "--manifest-url=http://h/pods",
            "--manifest-url-header",
            "A:1,B:x:y",
            "--manifest-url-header=A:2",
            "--http-check-frequency=2s",
            "--etcd-servers=http://e1:2379/, https://e2:2379",
            "--etcd-prefix=/p/",
            "--etcd-cafile=/ca",
            "--etcd-certfile=/c",
            "--etcd-keyfile=/k",
            "--kubeconfig=/kc",
        ]);
        assert_eq!(
            f,
            Flags {
                config: Some("/etc/rk.yaml".into()),
                pod_manifest_path: Some("/etc/kubernetes/manifests".into()),
                hostname_override: Some("Node-1".into()),
                root_dir: Some("/var/lib/rk".into()),
                container_runtime_endpoint: Some("unix:///run/docker.sock".into()),
                pod_infra_container_image: Some("pause:1".into()),
                healthz_port: Some(0),
                healthz_bind_address: Some("0.0.0.0".parse().expect("ip")),
                read_only_port: Some(0),
                address: Some("::".parse().expect("ip")),
                port: Some(0),
                sync_frequency: Some(Duration::from_secs(90)),
                file_check_frequency: Some(Duration::from_millis(500)),
                verbosity: Some(10),
                manifest_url: Some("http://h/pods".into()),
                manifest_url_headers: vec![
                    ("A".into(), "1".into()),
                    ("B".into(), "x:y".into()),
                    ("A".into(), "2".into()),
                ],
                http_check_frequency: Some(Duration::from_secs(2)),
                etcd_servers: Some(vec!["http://e1:2379".into(), "https://e2:2379".into()]),
                etcd_prefix: Some("/p/".into()),
                etcd_cafile: Some("/ca".into()),
                etcd_certfile: Some("/c".into()),
                etcd_keyfile: Some("/k".into()),
                kubeconfig: Some("/kc".into()),
                ..Default::default()
            }
        );
    }

    #[test]
    fn the_last_occurrence_wins_and_a_value_may_start_with_a_dash() {
        assert_eq!(run(&["--port=1", "--port=2"]).port, Some(2));
        assert_eq!(
            run(&["--hostname-override", "-odd-"])
                .hostname_override
                .as_deref(),
            Some("-odd-")
        );
    }

    #[test]
    fn help_puts_a_gap_between_every_flag_and_its_description() {
        let rows = vec![
            (
                "  -v, --v level".to_string(),
                "Verbosity. (default 0)".to_string(),
            ),
            ("      --short".to_string(), "A.".to_string()),
            (format!("      --{} x", "y".repeat(50)), "Long.".to_string()),
        ];
        assert_eq!(
            help_rows(&rows),
            format!(
                "  -v, --v level   Verbosity. (default 0)\n      --short     A.\n      --{} x\n                  Long.\n",
                "y".repeat(50)
            )
        );
        // The real text: every flag's description follows its name and type after at
        // least two spaces, or starts the next line, indented.
        let h = help();
        let lines: Vec<&str> = h.lines().collect();
        for s in SPECS {
            let head = format!(
                "--{}{}",
                s.name,
                s.value.map(|v| format!(" {v}")).unwrap_or_default()
            );
            let flag_part = |l: &str| {
                let l = l.trim_start();
                let l = match s.short {
                    Some(c) => l.strip_prefix(&format!("-{c}, ")).unwrap_or(l),
                    None => l,
                };
                l.strip_prefix(&head)
                    .filter(|rest| rest.is_empty() || rest.starts_with(' '))
                    .map(str::to_string)
            };
            let (i, after) = lines
                .iter()
                .enumerate()
                .find_map(|(i, l)| flag_part(l).map(|a| (i, a)))
                .unwrap_or_else(|| panic!("help lists {head}:\n{h}"));
            let first = s.help.split_whitespace().next().unwrap_or("");
            if after.is_empty() {
                assert!(
                    lines[i + 1].starts_with("    ")
                        && lines[i + 1].trim_start().starts_with(first),
                    "{head}:\n{h}"
                );
            } else {
                assert!(
                    after.starts_with("  ") && after.trim_start().starts_with(first),
                    "{head}: {:?}",
                    lines[i]
                );
            }
            if let Some(d) = default_of(s.name) {
                assert!(
                    h.contains(&format!("(default {d})")),
                    "{head} lists its default"
                );
            }
        }
    }

    #[test]
    fn help_and_version() {
        assert!(matches!(parse(&args(&["--help"])), Ok(Parsed::Help)));
        assert!(matches!(parse(&args(&["-h"])), Ok(Parsed::Help)));
        // As pflag: help stops parsing, so a later bad flag does not matter…
        assert!(matches!(parse(&args(&["-h", "--nope"])), Ok(Parsed::Help)));
        // …but an earlier one does.
        assert!(parse(&args(&["--nope", "-h"])).is_err());
        assert!(matches!(parse(&args(&["--version"])), Ok(Parsed::Version)));
        assert!(matches!(
            parse(&args(&["--version", "--port=1"])),
            Ok(Parsed::Version)
        ));
        assert!(matches!(
            parse(&args(&["--version=raw"])),
            Ok(Parsed::Version)
        ));
        assert!(matches!(
            parse(&args(&["--version=false"])),
            Ok(Parsed::Run(_))
        ));
        assert!(matches!(
            parse(&args(&["--help=false"])),
            Ok(Parsed::Run(_))
        ));
        let h = help();
        for s in SPECS {
            assert!(
                h.contains(&format!("--{}", s.name)),
                "help lists --{}",
                s.name
            );
        }
        assert!(h.contains("(default 10248)"));
        assert!(version().starts_with("rkubelet "));
    }

    #[test]
    fn errors_name_the_flag_and_the_reason() {
        let cases: &[(&[&str], &str)] = &[
            (&["--foo"], "unknown flag: --foo"),
            (&["--foo=1"], "unknown flag: --foo"),
            (&["-x"], "unknown flag: -x"),
            (&["-config=/x"], "unknown flag: -config=/x"),
            (&["-hv"], "unknown flag: -hv"),
            (
                &["manifests"],
                "unexpected argument \"manifests\": rkubelet takes flags only",
            ),
            (
                &["--", "x"],
                "unexpected argument \"x\": rkubelet takes flags only",
            ),
            (&["--port"], "flag needs an argument: --port"),
            (&["-v"], "flag needs an argument: -v"),
            (
                &["--healthz-port=abc"],
                "invalid value \"abc\" for flag --healthz-port: not a port number (0-65535)",
            ),
            (
                &["--port", "65536"],
                "invalid value \"65536\" for flag --port: not a port number (0-65535)",
            ),
            (
                &["--read-only-port=-1"],
                "invalid value \"-1\" for flag --read-only-port: not a port number (0-65535)",
            ),
            (
                &["--address=localhost"],
                "invalid value \"localhost\" for flag --address: not an IP address",
            ),
            (
                &["--healthz-bind-address="],
                "invalid value \"\" for flag --healthz-bind-address: not an IP address",
            ),
            (
                &["--sync-frequency=1x"],
                "invalid value \"1x\" for flag --sync-frequency: invalid duration: \
                 unknown unit \"x\" (use ns, us, ms, s, m or h)",
            ),
            (
                &["--file-check-frequency=20"],
                "invalid value \"20\" for flag --file-check-frequency: invalid duration: \
                 missing unit (use e.g. 20s, 1m30s, 500ms)",
            ),
            (
                &["--file-check-frequency=0s"],
                "invalid value \"0s\" for flag --file-check-frequency: must be greater than 0",
            ),
            (
                &["--v=11"],
                "invalid value \"11\" for flag --v: not a verbosity level (0-10)",
            ),
            (
                &["-v", "x"],
                "invalid value \"x\" for flag -v: not a verbosity level (0-10)",
            ),
            (
                &["--root-dir="],
                "invalid value \"\" for flag --root-dir: must not be empty",
            ),
            (
                &["--manifest-url=ftp://h/x"],
                "invalid value \"ftp://h/x\" for flag --manifest-url: not an http:// or https:// URL",
            ),
            (
                &["--manifest-url-header=NoColon"],
                "invalid value \"NoColon\" for flag --manifest-url-header: \"NoColon\" is not Name:Value",
            ),
            (
                &["--etcd-servers=http://a:1,b:2"],
                "invalid value \"http://a:1,b:2\" for flag --etcd-servers: \"b:2\": not an http:// or https:// URL",
            ),
            (
                &["--etcd-prefix=registry"],
                "invalid value \"registry\" for flag --etcd-prefix: must start with /",
            ),
            (
                &["--version=maybe"],
                "invalid value \"maybe\" for flag --version: not a boolean (true or false)",
            ),
        ];
        for (a, want) in cases {
            let e = parse(&args(a)).expect_err(&format!("{a:?}"));
            assert_eq!(e.to_string(), *want, "args {a:?}");
        }
    }
}
