//! Registry credentials from a Docker config file (upstream
//! `pkg/credentialprovider`: `ReadDockerConfigFile`, `BasicDockerKeyring`).
//!
//! The first valid file wins, searched where the upstream kubelet searches:
//! `config.json` in `<root-dir>`, the working directory, `~/.docker` and `/.docker`,
//! then the legacy `.dockercfg` in `<root-dir>`, the working directory, `~` and `/`.
//! Entries hold `auth` (base64 of `user:password`) or `username` / `password`. An
//! image matches an entry whose host (a glob per dot-separated part, port exact) and
//! path prefix match its repository; more specific entries are tried first. The file
//! is read at each pull, so edits apply without a restart.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use runtime::RegistryAuth;

/// The Docker Hub key the keyring falls back to for unqualified images.
const DEFAULT_REGISTRY_HOST: &str = "index.docker.io";

/// One entry of a config file.
#[derive(Clone, Debug, Default, Deserialize)]
struct Entry {
    #[serde(default)]
    auth: String,
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
}

/// `config.json`: entries under `auths`.
#[derive(Debug, Deserialize)]
struct ConfigJson {
    #[serde(default)]
    auths: BTreeMap<String, Entry>,
}

/// Credentials by normalised key (`host[/path]`), most specific first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Keyring {
    entries: Vec<(String, String, String)>,
}

/// Where credentials were found, for logs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Found {
    /// The file read.
    pub path: PathBuf,
    /// Its credentials.
    pub keyring: Keyring,
}

/// The search paths for `root_dir`, in upstream's order: (file, is legacy format).
pub(crate) fn search_paths(root_dir: &Path) -> Vec<(PathBuf, bool)> {
    let cwd = std::env::current_dir().unwrap_or_default();
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let mut out = Vec::new();
    let json_dirs = [
        Some(root_dir.to_path_buf()),
        Some(cwd.clone()),
        home.as_ref().map(|h| h.join(".docker")),
        Some(PathBuf::from("/.docker")),
    ];
    for d in json_dirs.into_iter().flatten() {
        out.push((d.join("config.json"), false));
    }
    let legacy_dirs = [
        Some(root_dir.to_path_buf()),
        Some(cwd),
        home,
        Some(PathBuf::from("/")),
    ];
    for d in legacy_dirs.into_iter().flatten() {
        out.push((d.join(".dockercfg"), true));
    }
    out
}

/// Reads the first valid config file among `paths`. A file that exists but does not
/// parse is logged and skipped, as upstream does.
pub(crate) fn read_first(paths: &[(PathBuf, bool)]) -> Option<Found> {
    for (path, legacy) in paths {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                log::warn!("cannot read registry credentials {}: {e}", path.display());
                continue;
            }
        };
        match parse(&text, *legacy) {
            Ok(keyring) => {
                return Some(Found {
                    path: path.clone(),
                    keyring,
                })
            }
            Err(e) => log::warn!("ignoring registry credentials {}: {e}", path.display()),
        }
    }
    None
}

/// Parses a config file's text: `config.json` (`{"auths": {...}}`) or the legacy
/// `.dockercfg` (the entries at the top level).
pub(crate) fn parse(text: &str, legacy: bool) -> Result<Keyring, String> {
    let entries: BTreeMap<String, Entry> = if legacy {
        serde_json::from_str(text).map_err(|e| e.to_string())?
    } else {
        serde_json::from_str::<ConfigJson>(text)
            .map_err(|e| e.to_string())?
            .auths
    };
    let mut k = Keyring::default();
    for (loc, e) in entries {
        let (user, pass) = if e.auth.is_empty() {
            (e.username, e.password)
        } else {
            let raw = decode_base64(&e.auth)
                .ok_or_else(|| format!("entry {loc:?}: auth is not base64"))?;
            let s =
                String::from_utf8(raw).map_err(|_| format!("entry {loc:?}: auth is not text"))?;
            let (u, p) = s
                .split_once(':')
                .ok_or_else(|| format!("entry {loc:?}: auth is not user:password"))?;
            (u.to_string(), p.to_string())
        };
        k.entries.push((normalize_key(&loc), user, pass));
    }
    // Reverse order puts `quay.io/coreos` before `quay.io`: specific paths first.
    base::sort::sort_by(&mut k.entries, |a, b| b.0.cmp(&a.0));
    k.entries.dedup_by(|a, b| a == b);
    Ok(k)
}

/// A config key as the keyring indexes it: no scheme, `/v1/` and `/v2/` paths mean
/// the host itself.
fn normalize_key(loc: &str) -> String {
    let rest = loc
        .strip_prefix("https://")
        .or_else(|| loc.strip_prefix("http://"))
        .unwrap_or(loc);
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let path = if path.starts_with("/v1/") || path.starts_with("/v2/") {
        &path[3..]
    } else {
        path
    };
    if path.is_empty() || path == "/" {
        host.to_string()
    } else {
        format!("{host}{path}")
    }
}

/// A Secret's registry credentials, if it is a pull secret (upstream
/// `MakeDockerKeyring`): type `kubernetes.io/dockerconfigjson` with a
/// `.dockerconfigjson` key, or `kubernetes.io/dockercfg` with `.dockercfg`.
/// None for any other Secret; Err when its content does not parse.
pub(crate) fn pull_secret_keyring(
    secret: &k8s_openapi::api::core::v1::Secret,
) -> Option<Result<Keyring, String>> {
    let data = secret.data.as_ref()?;
    let (key, legacy) = match secret.type_.as_deref() {
        Some("kubernetes.io/dockerconfigjson") => (".dockerconfigjson", false),
        Some("kubernetes.io/dockercfg") => (".dockercfg", true),
        _ => return None,
    };
    let bytes = data.get(key).filter(|b| !b.0.is_empty())?;
    Some(
        std::str::from_utf8(&bytes.0)
            .map_err(|_| format!("{key} is not text"))
            .and_then(|t| parse(t, legacy)),
    )
}

impl Keyring {
    /// Adds another keyring's entries (upstream `BasicDockerKeyring.Add` of several
    /// pull secrets): lookups then see them all, most specific first.
    pub(crate) fn extend(&mut self, other: Keyring) {
        self.entries.extend(other.entries);
        base::sort::sort_by(&mut self.entries, |a, b| b.0.cmp(&a.0));
        self.entries.dedup_by(|a, b| a == b);
    }

    /// The credentials for a fully qualified repository (`docker.io/library/busybox`,
    /// `127.0.0.1:5000/rk/busybox`), most specific first (upstream `Lookup`).
    pub(crate) fn lookup(&self, repository: &str) -> Vec<RegistryAuth> {
        let server = repository.split('/').next().unwrap_or_default().to_string();
        let auth = |(_, u, p): &(String, String, String)| RegistryAuth {
            username: u.clone(),
            password: p.clone(),
            server_address: server.clone(),
        };
        let found: Vec<RegistryAuth> = self
            .entries
            .iter()
            .filter(|(key, _, _)| urls_match(key, repository))
            .map(auth)
            .collect();
        if !found.is_empty() {
            return found;
        }
        if is_default_registry_match(repository) {
            return self
                .entries
                .iter()
                .filter(|(key, _, _)| key == DEFAULT_REGISTRY_HOST)
                .map(auth)
                .collect();
        }
        Vec::new()
    }
}

/// Upstream `isDefaultRegistryMatch`: the image lives on Docker Hub.
fn is_default_registry_match(image: &str) -> bool {
    let mut parts = image.splitn(2, '/');
    let first = parts.next().unwrap_or_default();
    if first.is_empty() {
        return false;
    }
    if parts.next().is_none() {
        return true;
    }
    first == "docker.io" || first == "index.docker.io" || !first.contains(['.', ':'])
}

/// Upstream `URLsMatchStr`: same port, same number of host parts each matching as a
/// glob, and the key's path a prefix of the image's.
fn urls_match(key: &str, image: &str) -> bool {
    let split = |s: &str| -> (String, String) {
        match s.find('/') {
            Some(i) => (s[..i].to_string(), s[i..].to_string()),
            None => (s.to_string(), String::new()),
        }
    };
    let (kh, kp) = split(key);
    let (ih, ip) = split(image);
    let host_port = |h: &str| -> (String, String) {
        match h.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
                (host.to_string(), port.to_string())
            }
            _ => (h.to_string(), String::new()),
        }
    };
    let (kh, kport) = host_port(&kh);
    let (ih, iport) = host_port(&ih);
    if kport != iport {
        return false;
    }
    let kparts: Vec<&str> = kh.split('.').collect();
    let iparts: Vec<&str> = ih.split('.').collect();
    if kparts.len() != iparts.len() {
        return false;
    }
    kparts.iter().zip(&iparts).all(|(k, i)| glob(k, i)) && ip.starts_with(&kp)
}

/// `filepath.Match` for one host part: `*` any run, `?` one character.
fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// Docker config's `auth` decoder: standard base64, padded or not (Docker writes it
/// padded; hand-made files often are not), lenient about unused trailing bits.
const AUTH_BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true),
);

/// The same with the URL-safe alphabet (`-` and `_`), which some tools write.
const AUTH_BASE64_URL: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true),
);

/// An `auth` field's bytes: standard base64, or its URL-safe variant.
fn decode_base64(s: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    let s = s.trim();
    AUTH_BASE64
        .decode(s)
        .or_else(|_| AUTH_BASE64_URL.decode(s))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn users(k: &Keyring, repo: &str) -> Vec<String> {
        k.lookup(repo).into_iter().map(|a| a.username).collect()
    }

    #[test]
    fn both_entry_forms_are_read() {
        // "dXNlcjpwYXNz" is base64("user:pass").
        let k = parse(
            r#"{"auths": {
                "127.0.0.1:5000": {"auth": "dXNlcjpwYXNz"},
                "https://reg.example.com/v2/": {"username": "u2", "password": "p2"}
            }, "credsStore": "desktop"}"#,
            false,
        )
        .expect("parses");
        let a = k.lookup("127.0.0.1:5000/rk/busybox");
        assert_eq!(a.len(), 1);
        assert_eq!(
            (a[0].username.as_str(), a[0].password.as_str()),
            ("user", "pass")
        );
        assert_eq!(a[0].server_address, "127.0.0.1:5000");
        assert_eq!(users(&k, "reg.example.com/team/app"), ["u2"]);
        let legacy =
            parse(r#"{"reg.example.com": {"auth": "dXNlcjpwYXNz"}}"#, true).expect("legacy");
        assert_eq!(users(&legacy, "reg.example.com/x"), ["user"]);
        assert!(parse(r#"{"auths": {"h": {"auth": "!!"}}}"#, false).is_err());
        assert!(parse("not json", false).is_err());
    }

    #[test]
    fn hosts_match_by_port_glob_and_path() {
        let k = parse(
            r#"{"auths": {
                "127.0.0.1:5000": {"username": "port5000"},
                "127.0.0.1": {"username": "noport"},
                "*.example.com": {"username": "glob"},
                "quay.io": {"username": "quay"},
                "quay.io/coreos": {"username": "coreos"},
                "https://index.docker.io/v1/": {"username": "hub"}
            }}"#,
            false,
        )
        .expect("parses");
        assert_eq!(users(&k, "127.0.0.1:5000/a/b"), ["port5000"]);
        assert_eq!(users(&k, "127.0.0.1:5001/a/b"), Vec::<String>::new());
        assert_eq!(users(&k, "127.0.0.1/a"), ["noport"]);
        assert_eq!(users(&k, "reg.example.com/a"), ["glob"]);
        assert_eq!(
            users(&k, "a.b.example.com/a"),
            Vec::<String>::new(),
            "one part per *"
        );
        assert_eq!(users(&k, "quay.io/coreos/etcd"), ["coreos", "quay"]);
        assert_eq!(users(&k, "quay.io/other/x"), ["quay"]);
        assert_eq!(users(&k, "docker.io/library/busybox"), ["hub"]);
        assert_eq!(users(&k, "other.io/x"), Vec::<String>::new());
    }

    #[test]
    fn globs_and_base64() {
        assert!(glob("*", "abc"));
        assert!(glob("a*c", "abbbc"));
        assert!(glob("a?c", "abc"));
        assert!(!glob("a?c", "abbc"));
        assert!(!glob("abc", "abd"));
        assert_eq!(
            decode_base64("dXNlcjpwYXNz").as_deref(),
            Some(&b"user:pass"[..])
        );
        assert_eq!(decode_base64("YQ==").as_deref(), Some(&b"a"[..]));
        assert_eq!(decode_base64("!"), None);
    }

    #[test]
    fn the_first_valid_file_wins() {
        let dir = std::env::temp_dir().join(format!("rkubelet-creds-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("a")).expect("dir");
        std::fs::create_dir_all(dir.join("b")).expect("dir");
        std::fs::write(dir.join("a/config.json"), "{broken").expect("write");
        std::fs::write(
            dir.join("b/config.json"),
            r#"{"auths": {"r.io": {"username": "b"}}}"#,
        )
        .expect("write");
        let paths = vec![
            (dir.join("missing/config.json"), false),
            (dir.join("a/config.json"), false),
            (dir.join("b/config.json"), false),
        ];
        let found = read_first(&paths).expect("found");
        assert_eq!(found.path, dir.join("b/config.json"));
        assert_eq!(users(&found.keyring, "r.io/x"), ["b"]);
        let root = search_paths(Path::new("/var/lib/rk"));
        assert_eq!(root[0], (PathBuf::from("/var/lib/rk/config.json"), false));
        assert!(root.contains(&(PathBuf::from("/.docker/config.json"), false)));
        assert!(root.contains(&(PathBuf::from("/var/lib/rk/.dockercfg"), true)));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn pull_secrets_of_both_types_give_credentials() {
        use k8s_openapi::api::core::v1::Secret;
        use k8s_openapi::ByteString;
        let secret = |ty: &str, key: &str, text: &str| Secret {
            type_: Some(ty.into()),
            data: Some([(key.to_string(), ByteString(text.as_bytes().to_vec()))].into()),
            ..Default::default()
        };
        let json = secret(
            "kubernetes.io/dockerconfigjson",
            ".dockerconfigjson",
            r#"{"auths":{"127.0.0.1:5000":{"username":"u","password":"p"}}}"#,
        );
        let mut k = pull_secret_keyring(&json)
            .expect("a pull secret")
            .expect("parses");
        let legacy = secret(
            "kubernetes.io/dockercfg",
            ".dockercfg",
            r#"{"127.0.0.1:5000/team":{"auth":"dTI6cDI="}}"#,
        );
        k.extend(
            pull_secret_keyring(&legacy)
                .expect("a pull secret")
                .expect("parses"),
        );
        let found = k.lookup("127.0.0.1:5000/team/app");
        let users: Vec<&str> = found.iter().map(|a| a.username.as_str()).collect();
        assert_eq!(users, vec!["u2", "u"], "the more specific entry first");
        assert_eq!(found[0].server_address, "127.0.0.1:5000");
        assert!(pull_secret_keyring(&secret("Opaque", ".dockerconfigjson", "{}")).is_none());
        assert!(pull_secret_keyring(&secret(
            "kubernetes.io/dockerconfigjson",
            ".dockerconfigjson",
            "not json"
        ))
        .expect("a pull secret")
        .is_err());
    }
}
