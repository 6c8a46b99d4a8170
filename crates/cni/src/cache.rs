//! libcni's result cache: `<cache dir>/results/<network>-<container ID>-<interface>`,
//! one JSON file per `ADD` (`kind: cniCacheV1`, the configuration's bytes in base64,
//! the arguments, the result). A `DEL` gives the result back to the plugins as
//! `prevResult` (without it, plugins such as `firewall` leave their rules behind), and
//! after a restart the files say which sandboxes have an address, and which one.
//! Files are written aside and renamed, so a crash leaves the old file or the new one.

use std::path::{Path, PathBuf};

use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::conf::NetworkConfigList;
use crate::RuntimeConf;

/// What one `ADD` left in the cache.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedResult {
    /// `cniCacheV1`.
    pub kind: String,
    /// The sandbox's container ID.
    pub container_id: String,
    /// The configuration list's bytes, base64.
    pub config: String,
    /// The interface.
    pub if_name: String,
    /// The network's name.
    pub network_name: String,
    /// The namespace's path at the `ADD`.
    #[serde(default)]
    pub netns: String,
    /// `CNI_ARGS` as pairs.
    #[serde(default)]
    pub cni_args: Vec<(String, String)>,
    /// The capability arguments.
    #[serde(default)]
    pub capability_args: Map<String, Value>,
    /// The chain's result.
    #[serde(default)]
    pub result: Value,
}

fn results_dir(cache_dir: &Path) -> PathBuf {
    cache_dir.join("results")
}

fn file(cache_dir: &Path, network: &str, container_id: &str, ifname: &str) -> PathBuf {
    results_dir(cache_dir).join(format!("{network}-{container_id}-{ifname}"))
}

/// Keeps an `ADD`'s result.
pub(crate) fn write(
    cache_dir: &Path,
    net: &NetworkConfigList,
    rt: &RuntimeConf,
    result: &Value,
) -> std::io::Result<()> {
    let entry = CachedResult {
        kind: "cniCacheV1".into(),
        container_id: rt.container_id.clone(),
        config: base64::engine::general_purpose::STANDARD.encode(&net.bytes),
        if_name: rt.ifname.clone(),
        network_name: net.name.clone(),
        netns: rt.netns.clone(),
        cni_args: rt.args.clone(),
        capability_args: rt.capability_args.clone(),
        result: result.clone(),
    };
    let dir = results_dir(cache_dir);
    std::fs::create_dir_all(&dir)?;
    let path = file(cache_dir, &net.name, &rt.container_id, &rt.ifname);
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec(&entry).unwrap_or_default())?;
    std::fs::rename(&tmp, &path)
}

/// The cached result of one container's interface on one network.
pub fn read(
    cache_dir: &Path,
    network: &str,
    container_id: &str,
    ifname: &str,
) -> Option<CachedResult> {
    let bytes = std::fs::read(file(cache_dir, network, container_id, ifname)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Forgets one cached result (gone already is fine).
pub(crate) fn remove(cache_dir: &Path, network: &str, container_id: &str, ifname: &str) {
    let _ = std::fs::remove_file(file(cache_dir, network, container_id, ifname));
}

/// Every cached result (for sandboxes that went while the kubelet was away); files
/// that do not parse are skipped.
pub fn all(cache_dir: &Path) -> Vec<CachedResult> {
    let Ok(entries) = std::fs::read_dir(results_dir(cache_dir)) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.path().extension().is_none_or(|x| x != "tmp"))
        .filter_map(|e| serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok())
        .collect()
}

impl CachedResult {
    /// The configuration list the `ADD` ran (to `DEL` with the same one).
    pub fn network(&self) -> Option<NetworkConfigList> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&self.config)
            .ok()?;
        let path = PathBuf::from(format!("{}.conflist", self.network_name));
        crate::conf::parse(&path, &bytes)
            .or_else(|_| crate::conf::parse(Path::new("cached.conf"), &bytes))
            .ok()
    }

    /// The `RuntimeConf` of the `ADD`, for its `DEL` (with `netns` as now known).
    pub fn runtime_conf(&self, netns: &str) -> RuntimeConf {
        RuntimeConf {
            container_id: self.container_id.clone(),
            netns: netns.to_string(),
            ifname: self.if_name.clone(),
            args: self.cni_args.clone(),
            capability_args: self.capability_args.clone(),
        }
    }
}
