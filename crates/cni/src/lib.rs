//! rkubelet's CNI client (the CNI specification's runtime side, as libcni does it):
//! find the network in the configuration directory ([`conf`]), run its plugin chain
//! with `ADD` on a sandbox's network namespace and with `DEL` when the sandbox goes,
//! and keep each `ADD`'s result in libcni's cache ([`cache`]) so that a `DEL` gets it
//! as `prevResult` and a restarted kubelet knows which sandboxes it gave an address.
//!
//! Each plugin runs with a deadline in a process group of its own
//! (`base::process::run_with_deadline`): a hung plugin costs its caller the deadline
//! and nothing else. Nothing here knows a pod or a runtime: the caller passes the
//! container ID, the namespace path and the `CNI_ARGS`.
// What another crate uses is `pub`, the rest `pub(crate)` or private
// (tests/tidy.rs checks that each `pub` item is named outside the crate).
#![warn(unreachable_pub)]

pub mod cache;
pub mod conf;

use std::io::ErrorKind;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use conf::NetworkConfigList;

/// The most of a plugin's stdout or stderr kept: results are a few KiB.
const MAX_PLUGIN_OUTPUT: usize = 1024 * 1024;

/// A plugin whose binary is open for writing cannot be run ("text file busy"): it is
/// being installed or upgraded in place. Like libcni, try again a second later, up to
/// five times, within the plugin's deadline.
const BUSY_RETRIES: u32 = 5;
const BUSY_WAIT: Duration = Duration::from_secs(1);

/// Where and how the plugins run.
#[derive(Clone, Debug)]
pub struct Cni {
    /// Directories searched for a plugin's binary, in order (`--cni-bin-dir`).
    pub bin_dirs: Vec<PathBuf>,
    /// The results cache (`--cni-cache-dir`).
    pub cache_dir: PathBuf,
    /// The longest one plugin may run.
    pub timeout: Duration,
}

/// What one `ADD` or `DEL` is about (libcni's `RuntimeConf`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RuntimeConf {
    /// The sandbox's container ID (`CNI_CONTAINERID`).
    pub container_id: String,
    /// The network namespace's path (`CNI_NETNS`; "" on a `DEL` when it is gone).
    pub netns: String,
    /// The interface in it (`CNI_IFNAME`).
    pub ifname: String,
    /// `CNI_ARGS`, in order.
    pub args: Vec<(String, String)>,
    /// Capability arguments (`runtimeConfig`: `portMappings`, `bandwidth`, …), given to
    /// the plugins that declare the capability.
    pub capability_args: Map<String, Value>,
}

/// The errors of running a network's plugins.
#[derive(Debug, thiserror::Error)]
pub enum CniError {
    /// No binary of the plugin's type in any plugin directory.
    #[error("failed to find plugin {plugin:?} in path {dirs:?}")]
    PluginNotFound {
        /// The plugin's type.
        plugin: String,
        /// The directories searched.
        dirs: Vec<PathBuf>,
    },
    /// The plugin could not be run, or did not finish within its deadline.
    #[error("plugin type={plugin:?} failed ({command}): {source}")]
    Run {
        /// The plugin's type.
        plugin: String,
        /// `ADD` or `DEL`.
        command: &'static str,
        /// Why.
        source: base::process::RunError,
    },
    /// The plugin answered with an error.
    #[error("plugin type={plugin:?} failed ({command}): {message}")]
    Plugin {
        /// The plugin's type.
        plugin: String,
        /// `ADD` or `DEL`.
        command: &'static str,
        /// Its `msg` and `details` (or its output when that is not a CNI error).
        message: String,
    },
    /// The plugin's result is not JSON.
    #[error("plugin type={plugin:?} ({command}) printed no result: {reason}")]
    BadResult {
        /// The plugin's type.
        plugin: String,
        /// `ADD` or `DEL`.
        command: &'static str,
        /// What is wrong.
        reason: String,
    },
}

impl Cni {
    /// Runs the network's plugins with `ADD`, in order, each given the result of the
    /// one before as `prevResult`; keeps the last result in the cache and returns it.
    pub fn add(&self, net: &NetworkConfigList, rt: &RuntimeConf) -> Result<Value, CniError> {
        let mut prev: Option<Value> = None;
        for plugin in &net.plugins {
            let conf = plugin_conf(net, plugin, prev.as_ref(), rt);
            let out = self.invoke(plugin_type(plugin), "ADD", &conf, rt)?;
            prev = Some(out);
        }
        let result = prev.unwrap_or(Value::Null);
        if let Err(e) = cache::write(&self.cache_dir, net, rt, &result) {
            log::warn!(
                "cni: cannot keep the result of {} for {}: {e}",
                net.name,
                rt.container_id
            );
        }
        Ok(result)
    }

    /// Runs the network's plugins with `DEL`, in reverse order, each given the cached
    /// `ADD` result as `prevResult`; forgets the cached result when all succeeded.
    pub fn del(&self, net: &NetworkConfigList, rt: &RuntimeConf) -> Result<(), CniError> {
        let prev =
            cache::read(&self.cache_dir, &net.name, &rt.container_id, &rt.ifname).map(|c| c.result);
        for plugin in net.plugins.iter().rev() {
            let conf = plugin_conf(net, plugin, prev.as_ref(), rt);
            self.invoke(plugin_type(plugin), "DEL", &conf, rt)?;
        }
        cache::remove(&self.cache_dir, &net.name, &rt.container_id, &rt.ifname);
        Ok(())
    }

    /// The plugin's binary: the first `dir/type` that exists.
    fn find(&self, plugin: &str) -> Result<PathBuf, CniError> {
        self.bin_dirs
            .iter()
            .map(|d| d.join(plugin))
            .find(|p| p.is_file())
            .ok_or_else(|| CniError::PluginNotFound {
                plugin: plugin.to_string(),
                dirs: self.bin_dirs.clone(),
            })
    }

    /// Runs one plugin (the CNI protocol: the command and its arguments in the
    /// environment, the configuration on stdin, the result or error on stdout).
    fn invoke(
        &self,
        plugin: &str,
        command: &'static str,
        conf: &Value,
        rt: &RuntimeConf,
    ) -> Result<Value, CniError> {
        let bin = self.find(plugin)?;
        let args: Vec<String> = rt.args.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let path = std::env::join_paths(&self.bin_dirs).unwrap_or_default();
        let mut cmd = Command::new(&bin);
        cmd.env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", &rt.container_id)
            .env("CNI_NETNS", &rt.netns)
            .env("CNI_IFNAME", &rt.ifname)
            .env("CNI_ARGS", args.join(";"))
            .env("CNI_PATH", path);
        let input = conf.to_string().into_bytes();
        let started = Instant::now();
        let mut retries = 0;
        let done = loop {
            let left = self.timeout.saturating_sub(started.elapsed());
            match base::process::run_with_deadline(&mut cmd, &input, left, MAX_PLUGIN_OUTPUT) {
                Err(base::process::RunError::Spawn(e))
                    if e.kind() == ErrorKind::ExecutableFileBusy
                        && retries < BUSY_RETRIES
                        && left > BUSY_WAIT =>
                {
                    retries += 1;
                    log::debug!(
                        "cni: {} is being written (text file busy); {command} again in {BUSY_WAIT:?}",
                        bin.display()
                    );
                    std::thread::sleep(BUSY_WAIT);
                }
                other => {
                    break other.map_err(|source| CniError::Run {
                        plugin: plugin.to_string(),
                        command,
                        source,
                    })?
                }
            }
        };
        let stderr = String::from_utf8_lossy(&done.stderr);
        if !stderr.trim().is_empty() {
            log::debug!("cni: {plugin} ({command}) says: {}", stderr.trim());
        }
        if !done.status.success() {
            return Err(CniError::Plugin {
                plugin: plugin.to_string(),
                command,
                message: error_message(&done.stdout, &stderr, done.status),
            });
        }
        if command == "DEL" || done.stdout.iter().all(u8::is_ascii_whitespace) {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&done.stdout).map_err(|e| CniError::BadResult {
            plugin: plugin.to_string(),
            command,
            reason: e.to_string(),
        })
    }
}

fn plugin_type(plugin: &Map<String, Value>) -> &str {
    plugin
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// One plugin's stdin (libcni `buildOneConfig`): its object with the network's name
/// and CNI version, the previous result, and the capability arguments it declares.
fn plugin_conf(
    net: &NetworkConfigList,
    plugin: &Map<String, Value>,
    prev: Option<&Value>,
    rt: &RuntimeConf,
) -> Value {
    let mut conf = plugin.clone();
    conf.insert("name".into(), Value::String(net.name.clone()));
    conf.insert("cniVersion".into(), Value::String(net.cni_version.clone()));
    if let Some(p) = prev.filter(|p| !p.is_null()) {
        conf.insert("prevResult".into(), p.clone());
    }
    let runtime: Map<String, Value> = plugin
        .get("capabilities")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(_, on)| on.as_bool() == Some(true))
        .filter_map(|(cap, _)| Some((cap.clone(), rt.capability_args.get(cap)?.clone())))
        .collect();
    if !runtime.is_empty() {
        conf.insert("runtimeConfig".into(), Value::Object(runtime));
    }
    Value::Object(conf)
}

/// A failed plugin's message: its CNI error's `msg` and `details`, else what it wrote.
fn error_message(stdout: &[u8], stderr: &str, status: std::process::ExitStatus) -> String {
    if let Ok(v) = serde_json::from_slice::<Value>(stdout) {
        let text = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default();
        match (text("msg"), text("details")) {
            ("", _) => {}
            (m, "") => return m.to_string(),
            (m, d) => return format!("{m}; {d}"),
        }
    }
    let out = String::from_utf8_lossy(stdout);
    let said = [out.trim(), stderr.trim()]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    if said.is_empty() {
        format!("exited with {status}")
    } else {
        format!("exited with {status}: {said}")
    }
}

/// The addresses of a result (`ips[].address`, without the prefix length), IPv4
/// first then IPv6, as the kubelet orders a pod's IPs.
pub fn result_ips(result: &Value) -> Vec<String> {
    let mut ips: Vec<String> = result
        .get("ips")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|ip| ip.get("address").and_then(Value::as_str))
        .map(|a| a.split('/').next().unwrap_or_default().to_string())
        .filter(|a| !a.is_empty())
        .collect();
    base::sort::sort_by(&mut ips, |a, b| a.contains(':').cmp(&b.contains(':')));
    ips
}

/// The CNI plugin directories of a comma-separated `--cni-bin-dir`.
pub fn bin_dirs(flag: &str) -> Vec<PathBuf> {
    flag.split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .collect()
}

#[cfg(test)]
mod tests;
