//! Network configurations as libcni finds them (`ConfFiles`, `LoadConfList`,
//! `ConfListFromConf`): the files of the configuration directory ending in `.conf`,
//! `.conflist` or `.json`, in name order; the first that is a valid configuration is
//! the network. A `.conf` (or `.json` without `plugins`) is one plugin, made a list of
//! one. A file that is not valid is skipped with its reason, as the kubelet's `cni`
//! plugin skipped it.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// The largest configuration file read: real ones are a few hundred bytes.
const MAX_CONF_BYTES: u64 = 1024 * 1024;

/// One network: its name, its CNI version and its plugins, in order.
#[derive(Clone, Debug, PartialEq)]
pub struct NetworkConfigList {
    /// `name`.
    pub name: String,
    /// `cniVersion`.
    pub cni_version: String,
    /// Each plugin's configuration object (`type`, its own keys, `capabilities`).
    pub plugins: Vec<Map<String, Value>>,
    /// The file it came from.
    pub path: PathBuf,
    /// The file's bytes (kept in the result cache, as libcni does).
    pub bytes: Vec<u8>,
}

impl NetworkConfigList {
    /// Whether a plugin of the chain takes the runtime's `capability` (its
    /// `capabilities` object says `true`).
    pub fn has_capability(&self, capability: &str) -> bool {
        self.plugins.iter().any(|p| {
            p.get("capabilities")
                .and_then(|c| c.get(capability))
                .and_then(Value::as_bool)
                == Some(true)
        })
    }
}

/// Why a file is not a network configuration.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct ConfError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong.
    pub reason: String,
}

/// Parses one configuration file's bytes (`.conflist`: a list; otherwise one plugin).
pub fn parse(path: &Path, bytes: &[u8]) -> Result<NetworkConfigList, ConfError> {
    let fail = |reason: String| ConfError {
        path: path.to_path_buf(),
        reason,
    };
    let v: Value =
        serde_json::from_slice(bytes).map_err(|e| fail(format!("not valid JSON: {e}")))?;
    let Value::Object(obj) = v else {
        return Err(fail("not a JSON object".into()));
    };
    let text = |key: &str| obj.get(key).and_then(Value::as_str).unwrap_or_default();
    let name = text("name").to_string();
    if name.is_empty() {
        return Err(fail("no network name".into()));
    }
    let cni_version = text("cniVersion").to_string();
    let is_list = path.extension().is_some_and(|e| e == "conflist")
        || (path.extension().is_some_and(|e| e == "json") && obj.contains_key("plugins"));
    let plugins: Vec<Map<String, Value>> = if is_list {
        let Some(list) = obj.get("plugins").and_then(Value::as_array) else {
            return Err(fail("no plugins list".into()));
        };
        let mut out = Vec::new();
        for (i, p) in list.iter().enumerate() {
            let Value::Object(p) = p else {
                return Err(fail(format!("plugin {i} is not an object")));
            };
            out.push(p.clone());
        }
        out
    } else {
        vec![obj.clone()]
    };
    if plugins.is_empty() {
        return Err(fail("no plugins in the list".into()));
    }
    for (i, p) in plugins.iter().enumerate() {
        match p.get("type").and_then(Value::as_str) {
            Some(t) if !t.is_empty() && !t.contains('/') => {}
            _ => return Err(fail(format!("plugin {i} has no valid type"))),
        }
    }
    Ok(NetworkConfigList {
        name,
        cni_version,
        plugins,
        path: path.to_path_buf(),
        bytes: bytes.to_vec(),
    })
}

/// The directory's configuration files, in name order (libcni `ConfFiles`).
pub fn files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.extension()
                .is_some_and(|e| e == "conf" || e == "conflist" || e == "json")
                && p.is_file()
        })
        .collect();
    base::sort::sort(&mut out);
    Ok(out)
}

/// The directory's network: the first valid configuration; otherwise why there is
/// none (every file's reason, or that there are no files).
pub fn load(dir: &Path) -> Result<NetworkConfigList, String> {
    let paths = files(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let mut reasons = Vec::new();
    for p in &paths {
        let bytes = match base::fsutil::read_regular(p, MAX_CONF_BYTES) {
            Ok((b, _)) => b,
            Err(e) => {
                reasons.push(format!("{}: {e}", p.display()));
                continue;
            }
        };
        match parse(p, &bytes) {
            Ok(list) => return Ok(list),
            Err(e) => reasons.push(e.to_string()),
        }
    }
    if reasons.is_empty() {
        Err(format!("no networks found in {}", dir.display()))
    } else {
        Err(reasons.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base::testutil::TempDir;

    #[test]
    fn the_first_valid_file_by_name_is_the_network() {
        let dir = TempDir::new("cni-conf");
        let d = &dir.0;
        assert!(load(d).expect_err("empty").contains("no networks found"));
        std::fs::write(d.join("00-broken.conflist"), "{not json").expect("write");
        std::fs::write(d.join("05-notes.txt"), "ignored").expect("write");
        std::fs::write(
            d.join("10-one.conf"),
            r#"{"cniVersion":"1.0.0","name":"one","type":"bridge","bridge":"cni0"}"#,
        )
        .expect("write");
        std::fs::write(
            d.join("20-list.conflist"),
            r#"{"cniVersion":"1.0.0","name":"list","plugins":[{"type":"bridge"},
               {"type":"portmap","capabilities":{"portMappings":true}}]}"#,
        )
        .expect("write");
        let n = load(d).expect("a network");
        assert_eq!((n.name.as_str(), n.plugins.len()), ("one", 1));
        assert_eq!(n.plugins[0]["bridge"], "cni0");
        assert!(!n.has_capability("portMappings"));
        std::fs::remove_file(d.join("10-one.conf")).expect("rm");
        let n = load(d).expect("a network");
        assert_eq!((n.name.as_str(), n.plugins.len()), ("list", 2));
        assert!(n.has_capability("portMappings"));
    }

    #[test]
    fn invalid_configurations_say_why() {
        let p = Path::new("/x/a.conflist");
        for (text, why) in [
            ("[]", "not a JSON object"),
            (r#"{"plugins":[]}"#, "no network name"),
            (r#"{"name":"n"}"#, "no plugins list"),
            (r#"{"name":"n","plugins":[]}"#, "no plugins in the list"),
            (
                r#"{"name":"n","plugins":[{"type":"../x"}]}"#,
                "no valid type",
            ),
        ] {
            let e = parse(p, text.as_bytes()).expect_err(text);
            assert!(e.to_string().contains(why), "{text}: {e}");
            assert!(e.to_string().starts_with("/x/a.conflist: "), "{e}");
        }
    }
}
