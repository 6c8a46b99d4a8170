//! The command line: upstream kubelet's flags, spelled as pflag spells them.
//!
//! `--flag=value` and `--flag value` both work, and so do the shorthands `-v` and `-h`
//! (`-v 4`, `-v=4`, `-v4`). The last occurrence of a flag wins, except for a
//! repeatable one, which adds to its list. Which flags exist and how each value is
//! checked is the settings table's ([`super::settings`]); values are checked here, once,
//! so an error names the flag; layering over the config file happens in the parent
//! module. As with pflag, `--help` ends parsing where it stands, while `--version` is
//! honoured after every flag parsed.

use super::settings::{Layer, ENTRIES, SPECS};
use super::table::Spec;
use super::values::text;
use super::ConfigError;
// The tests below name it through `use super::*`.
#[cfg(test)]
use std::time::Duration;

/// The flags given: the settings [`Layer`] of the command line.
pub type Flags = Layer;

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
        let invalid = |value: String, reason| ConfigError::InvalidFlag {
            flag: shown.clone(),
            value,
            reason,
        };

        let value = if spec.value.is_none() {
            // A boolean: pflag takes `--flag` for true and only `--flag=value` besides.
            let on = match inline {
                None => true,
                Some(v) => parse_bool(spec.name, &v).map_err(|reason| invalid(v, reason))?,
            };
            match spec.name {
                "help" if on => return Ok(Parsed::Help),
                "help" => continue,
                "version" => {
                    version = on;
                    continue;
                }
                _ => on.to_string(),
            }
        } else {
            match inline {
                Some(v) => v,
                None => {
                    // pflag takes the next argument as the value, whatever it looks like.
                    let v = args.get(i).ok_or_else(|| ConfigError::MissingValue {
                        flag: shown.clone(),
                    })?;
                    i += 1;
                    v.clone()
                }
            }
        };
        flags
            .set(spec.name, &value)
            .map_err(|reason| invalid(value, reason))?;
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

/// A boolean flag's value; `--version` also takes upstream's `raw`.
fn parse_bool(name: &str, v: &str) -> Result<bool, String> {
    match v {
        "raw" if name == "version" => Ok(true),
        v => text::boolean(v),
    }
}

/// The default `--help` shows for a flag: the table's, unless it is empty.
fn default_of(name: &str) -> Option<String> {
    ENTRIES
        .iter()
        .find(|e| e.flag == Some(name))
        .and_then(|e| e.default)
        .filter(|d| !d.is_empty())
        .map(str::to_string)
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

/// The kubelet version rkubelet reports to the API server (`nodeInfo.kubeletVersion`):
/// a semver naming the Kubernetes release whose kubelet behaviour it follows, with
/// rkubelet's own version after it.
pub(crate) const KUBELET_VERSION: &str = concat!("v1.32.0-rkubelet.", env!("CARGO_PKG_VERSION"));

/// The text `--version` prints: rkubelet's version, and the kubelet version the Node
/// reports (upstream prints `Kubernetes v1.32.0`).
pub fn version() -> String {
    format!(
        "rkubelet {} (Kubernetes {KUBELET_VERSION})\n",
        env!("CARGO_PKG_VERSION")
    )
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
                static_pod_path: Some("/etc/kubernetes/manifests".into()),
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
                manifest_url_headers: Some(vec![
                    ("A".into(), "1".into()),
                    ("B".into(), "x:y".into()),
                    ("A".into(), "2".into()),
                ]),
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

    #[test]
    fn every_flag_is_in_help_with_its_default() {
        let help = help();
        for e in ENTRIES {
            let Some(flag) = e.flag else { continue };
            // The flag's row: its name, then its description on the same line or the next.
            let lines: Vec<&str> = help.lines().collect();
            let at = lines
                .iter()
                .position(|l| {
                    let l = l.trim_start().trim_start_matches("-v, ");
                    l.strip_prefix(&format!("--{flag}"))
                        .is_some_and(|rest| rest.is_empty() || rest.starts_with(' '))
                })
                .unwrap_or_else(|| panic!("--help lists --{flag}:\n{help}"));
            let row = format!("{} {}", lines[at], lines.get(at + 1).unwrap_or(&""));
            assert!(row.contains(e.help), "--{flag}'s help text:\n{help}");
            match e.default.filter(|d| !d.is_empty()) {
                Some(d) => assert!(row.contains(&format!("(default {d})")), "--{flag}: {row}"),
                None => assert!(!lines[at].contains("(default"), "--{flag}: {row}"),
            }
        }
    }
}
