//! The volume manager (upstream `pkg/kubelet/volumemanager` with the `emptyDir` and
//! `hostPath` plugins, `makeMounts` from `kubelet_pods.go`, and the orphaned pod
//! directory cleanup of `HandlePodCleanups`).
//!
//! A pod's volumes are set up before any of its containers is created: the pod worker
//! calls [`VolumeManager::setup_pod`] synchronously (upstream `WaitForAttachAndMount`),
//! and [`PodVolumes::mounts_for`] turns a container's `volumeMounts` into bind mounts
//! (with `subPath` / `subPathExpr`). Each pod owns `<root>/pods/<uid>/`: its emptyDirs
//! live under `volumes/kubernetes.io~empty-dir/<name>` (a tmpfs mounted there for
//! `medium: Memory`), and the container manager writes its `etc-hosts` and
//! `resolv.conf` beside them.
//!
//! The `volume-mgr` loop removes the directories of pods that are gone: not wanted by
//! any source (the sync loop's housekeeping says which pods are wanted, and only once
//! every source has been seen) and without any container left in the runtime. It
//! unmounts the tmpfs volumes it made and never deletes through another mount.
//!
//! `configMap`, `secret`, `downwardAPI` and `projected` volumes (upstream's plugins of
//! those names) are written by the [`atomic_writer`] from the payload [`projection`]
//! makes of the objects the [`ObjectManager`] reads: under
//! `volumes/kubernetes.io~<plugin>/<name>`, a tmpfs for secret, downwardAPI and
//! projected volumes (so secrets never touch the disk; upstream wraps them in a memory
//! emptyDir), the node's disk for configMaps. They are mounted read-only, and set up
//! again at every set-up of the pod (the pod workers call it on each sync, at least
//! every `--sync-frequency`, and at once when the pod's labels or annotations change),
//! so object updates, label and annotation changes and token refreshes reach running
//! containers; a failed refresh keeps the last content. Between syncs, the
//! `object-refresh` loop ([`refresh`]) refetches the objects running pods' volumes
//! read and rewrites the volumes of the pods whose objects changed or whose token is
//! due, within [`refresh::REFRESH_PERIOD`] and a half.
//!
//! Other volume types (PVC, CSI, …) are refused with a clear reason on the containers
//! that mount them; the pod's other containers still run.
//!
//! Over 800 lines: a quarter is its unit tests; every volume type's set-up reads best
//! beside the per-pod locking it runs under and the mounts it becomes.

pub(crate) mod atomic_writer;
mod cleanup;
pub(crate) mod hostpath;
pub mod mount;
pub(crate) mod projection;
pub(crate) mod refresh;
pub(crate) mod subpath;

use base::safepath::{safe_join, UnsafePathError};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, Volume};

use self::atomic_writer::Payload;
use crate::objects::ObjectManager;
use base::loops::lock;
use base::quantity::parse_milli;
use runtime::config::Mount;
use runtime::container::downward::NodeFacts;
use runtime::container::expansion::expand;
use runtime::{Runtime, RuntimeError};

/// Each API volume's payload (or why it could not be made), by volume name.
type Payloads = BTreeMap<String, Result<Payload, String>>;

/// How often orphaned pod directories are looked for (upstream housekeeping, 2 s).
pub(crate) const VOLUME_MGR_PERIOD: Duration = Duration::from_secs(2);

/// The emptyDir plugin's directory name under a pod's `volumes/`.
pub(crate) const EMPTY_DIR_PLUGIN: &str = "kubernetes.io~empty-dir";
/// The directory names of the API-backed plugins, as upstream's.
pub(crate) const CONFIG_MAP_PLUGIN: &str = "kubernetes.io~configmap";
/// Secrets (tmpfs).
pub(crate) const SECRET_PLUGIN: &str = "kubernetes.io~secret";
/// Downward API files (tmpfs).
pub(crate) const DOWNWARD_API_PLUGIN: &str = "kubernetes.io~downward-api";
/// Projected volumes (tmpfs).
pub(crate) const PROJECTED_PLUGIN: &str = "kubernetes.io~projected";
/// The plugins whose volume directories are tmpfs mounts rkubelet made and may unmount.
const TMPFS_PLUGINS: [&str; 4] = [
    EMPTY_DIR_PLUGIN,
    SECRET_PLUGIN,
    DOWNWARD_API_PLUGIN,
    PROJECTED_PLUGIN,
];

/// A pod directory being deleted is first renamed to this prefix (then removed outside
/// the lock); a leftover after a crash is removed on the next pass.
const DELETING_PREFIX: &str = ".deleting-";

/// Errors of the cleanup loop.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    /// A filesystem operation failed.
    #[error("{what} {path}")]
    Io {
        /// What was being done.
        what: String,
        /// The path.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The runtime could not say whether a pod still has containers.
    #[error("cannot list the containers of orphaned pod {uid}")]
    Runtime {
        /// The pod UID.
        uid: String,
        /// The cause.
        source: RuntimeError,
    },
    /// An object running pods' volumes read could not be refetched.
    #[error("cannot refresh the objects of running pods' volumes")]
    Refresh {
        /// The cause (it names the object).
        source: crate::objects::ObjectError,
    },
}

/// The set-up volumes of one pod: each volume's host path, or why it failed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodVolumes {
    volumes: BTreeMap<String, Result<PathBuf, String>>,
    /// Volumes every container mounts read-only (configMap, secret, downwardAPI,
    /// projected: upstream's plugins say so in `GetAttributes`).
    read_only: BTreeSet<String>,
}

/// Which pods' directories must stay. The sync loop's housekeeping writes it; held for
/// microseconds, never across a filesystem call.
#[derive(Debug, Default)]
struct Desired {
    /// Pods whose directory must stay: wanted by a source, or set up since the last
    /// list of wanted pods.
    keep: HashSet<String>,
    /// False until housekeeping first said which pods are wanted: before that, no
    /// directory is removed.
    known: bool,
    /// Counts the times housekeeping's list changed `keep` (a pod no longer wanted
    /// may leave an orphan behind).
    generation: u64,
    /// The list's generation and the pods directory's mtime at the last cleanup pass
    /// that found every directory kept: until either changes, a pass has nothing to do.
    all_kept_as_of: Option<(u64, std::time::SystemTime)>,
}

/// One pod's volume state, behind the pod's own lock: the only lock held across the
/// filesystem calls that make, mount, unmount or move that pod's directory.
#[derive(Debug, Default)]
struct PodState {
    /// Volumes set up successfully, volume name → (source fingerprint, host path): not
    /// set up again (upstream: a mounted volume stays mounted).
    ready: HashMap<String, (String, PathBuf)>,
    /// The last failure per volume, so that each new failure is logged once.
    failed: HashMap<String, String>,
    /// The pod last set up, when it has API-backed volumes: what the
    /// `object-refresh` loop rewrites them from.
    pod: Option<Arc<Pod>>,
}

/// Sets up pod volumes and cleans up after pods. Shared by the pod workers and the
/// `volume-mgr` loop.
#[derive(Debug)]
pub struct VolumeManager {
    root_dir: PathBuf,
    runtime: Arc<dyn Runtime>,
    node_name: String,
    /// Node allocatable memory in bytes: the size of a memory emptyDir with no limit.
    allocatable_memory: u64,
    /// The ConfigMaps, Secrets and tokens of configMap, secret and projected volumes.
    objects: Arc<ObjectManager>,
    /// What downwardAPI volumes report for resources without limits.
    facts: NodeFacts,
    /// What housekeeping says must stay (a small lock the sync loop takes).
    desired: Mutex<Desired>,
    /// Each pod's own lock. The map's lock is held only to find or insert an entry;
    /// a pod's lock is taken after the map's is released, so a slow filesystem call
    /// (a hung hostPath) holds one pod and nothing else.
    pods: Mutex<HashMap<String, Arc<Mutex<PodState>>>>,
    /// The running pods whose API-backed volumes the `object-refresh` loop keeps
    /// current (a small lock, never across a filesystem call or a fetch).
    refreshed: Mutex<HashMap<String, refresh::Tracked>>,
}

impl VolumeManager {
    /// A manager for pods under `<root_dir>/pods`.
    pub fn new(
        root_dir: PathBuf,
        runtime: Arc<dyn Runtime>,
        node_name: String,
        allocatable_memory: u64,
    ) -> Self {
        VolumeManager {
            root_dir,
            runtime,
            node_name,
            allocatable_memory,
            objects: Arc::new(ObjectManager::new(None)),
            facts: NodeFacts {
                allocatable_memory: i128::from(allocatable_memory),
                ..Default::default()
            },
            desired: Mutex::new(Desired::default()),
            pods: Mutex::new(HashMap::new()),
            refreshed: Mutex::new(HashMap::new()),
        }
    }

    /// Reads API-backed volumes' objects through `objects`; `facts` holds the node's
    /// allocatable resources for downwardAPI volumes.
    pub fn with_objects(mut self, objects: Arc<ObjectManager>, facts: NodeFacts) -> Self {
        self.objects = objects;
        self.facts = facts;
        self
    }

    /// The object manager (env and image pulls read through it too).
    pub fn objects(&self) -> &Arc<ObjectManager> {
        &self.objects
    }

    /// Runs `f` under the pod's own lock. The entry is looked up again once the lock
    /// is held: a removal that dropped it meanwhile (under that same lock) sends us
    /// round again, so two holders of different locks for one pod never overlap.
    fn with_pod<R>(&self, uid: &str, f: impl FnOnce(&mut PodState) -> R) -> R {
        loop {
            let cell = lock(&self.pods).entry(uid.to_string()).or_default().clone();
            let mut st = lock(&cell);
            let current = lock(&self.pods)
                .get(uid)
                .is_some_and(|c| Arc::ptr_eq(c, &cell));
            if current {
                return f(&mut st);
            }
        }
    }

    /// `<root>/pods`.
    pub fn pods_dir(&self) -> PathBuf {
        self.root_dir.join("pods")
    }

    /// `<root>/pods/<uid>`; a UID that is not one plain name is refused (it comes
    /// from the pod, or from a directory listing).
    pub fn pod_dir(&self, uid: &str) -> Result<PathBuf, UnsafePathError> {
        safe_join(&self.pods_dir(), uid)
    }

    /// Sets up every volume of `pod` that is not set up yet (upstream
    /// `WaitForAttachAndMount`): the pod directory, emptyDirs, hostPath checks. A
    /// volume that fails is reported in the result (and logged once per new reason);
    /// the others are still set up.
    pub fn setup_pod(&self, pod: &Pod) -> PodVolumes {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        // Kept from now on, so a removal that has not taken the pod's lock yet backs
        // off (it checks again under that lock).
        lock(&self.desired).keep.insert(uid.clone());
        self.objects.register_pod(pod);
        // Read before the objects are: a change stored after is seen as newer.
        let generation = self.objects.generation();
        // The objects are fetched before the pod's lock is taken: the lock is held
        // across the pod's filesystem calls only, never across a request.
        let payloads = self.api_payloads(pod);
        self.with_pod(&uid, |st| {
            let out = self.setup_locked(pod, &uid, st, &payloads);
            self.track(&uid, pod, st, generation);
            out
        })
    }

    /// The payload of each configMap, secret, downwardAPI and projected volume of
    /// `pod`, from the object cache or the API server (so outside any pod lock).
    fn api_payloads(&self, pod: &Pod) -> Payloads {
        pod.spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .filter(|v| is_api_volume(v))
            .map(|v| {
                let payload = projection::make_payload(v, pod, &self.objects, &self.facts);
                (v.name.clone(), payload)
            })
            .collect()
    }

    fn setup_locked(
        &self,
        pod: &Pod,
        uid: &str,
        st: &mut PodState,
        payloads: &Payloads,
    ) -> PodVolumes {
        let pod_name = runtime::container::format_pod(pod);
        let mut out = PodVolumes::default();
        if let Err(e) = self.make_pod_dirs(uid) {
            let msg = format!("cannot create the pod directory: {e}");
            for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
                out.volumes.insert(v.name.clone(), Err(msg.clone()));
            }
            log::warn!("pod {pod_name}: {msg}");
            return out;
        }
        for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
            let fingerprint = serde_json::to_string(v).unwrap_or_default();
            let ready = st
                .ready
                .get(&v.name)
                .filter(|(f, _)| *f == fingerprint)
                .map(|(_, p)| p.clone());
            let api = is_api_volume(v);
            if api {
                out.read_only.insert(v.name.clone());
            }
            let result = match ready {
                Some(p) if !api => Ok(p),
                ready => {
                    let r = self.set_up_volume(pod, uid, v, payloads).map_err(|e| {
                        format!("MountVolume.SetUp failed for volume {:?} : {e}", v.name)
                    });
                    match (r, ready) {
                        // A refresh that failed keeps the volume as it was.
                        (Err(msg), Some(p)) => {
                            if st.failed.get(&v.name) != Some(&msg) {
                                log::warn!("pod {pod_name}: {msg}");
                                crate::record::event(pod, None, true, "FailedMount", &msg);
                                st.failed.insert(v.name.clone(), msg);
                            }
                            out.volumes.insert(v.name.clone(), Ok(p));
                            continue;
                        }
                        (r, _) => r,
                    }
                }
            };
            match &result {
                Ok(p) => {
                    st.ready.insert(v.name.clone(), (fingerprint, p.clone()));
                    st.failed.remove(&v.name);
                }
                Err(msg) => {
                    if st.failed.get(&v.name) != Some(msg) {
                        log::warn!("pod {pod_name}: {msg}");
                        st.failed.insert(v.name.clone(), msg.clone());
                    }
                    if api {
                        // Upstream's event, rate limited by the recorder.
                        crate::record::event(pod, None, true, "FailedMount", msg);
                    }
                }
            }
            out.volumes.insert(v.name.clone(), result);
        }
        out
    }

    fn make_pod_dirs(&self, uid: &str) -> io::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        let dir = self.pod_dir(uid)?;
        for d in [dir.clone(), dir.join("volumes"), dir.join("plugins")] {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o750)
                .create(&d)?;
        }
        Ok(())
    }

    /// One volume: its host path, or upstream's reason why not.
    fn set_up_volume(
        &self,
        pod: &Pod,
        uid: &str,
        v: &Volume,
        payloads: &Payloads,
    ) -> Result<PathBuf, String> {
        if let Some(hp) = &v.host_path {
            hostpath::set_up(&hp.path, hp.type_.as_deref(), &hostpath::Host)?;
            return Ok(PathBuf::from(&hp.path));
        }
        match volume_type(v) {
            // The API defaults a volume without a source to an emptyDir.
            "emptyDir" | "" => {}
            "configMap" | "secret" | "downwardAPI" | "projected" => {
                let payload = payloads.get(&v.name).ok_or_else(|| {
                    format!("no payload was prepared for volume {:?}", v.name)
                })?;
                return self.set_up_api_volume(pod, uid, v, payload.as_ref().map_err(Clone::clone)?);
            }
            other => {
                return Err(format!(
                    "unsupported volume type {other} (rkubelet supports emptyDir, hostPath, configMap, secret, downwardAPI and projected)"
                ))
            }
        }
        let ed = v.empty_dir.clone().unwrap_or_default();
        let plugin_dir = self
            .pod_dir(uid)
            .map_err(|e| e.to_string())?
            .join("volumes")
            .join(EMPTY_DIR_PLUGIN);
        let dir = safe_join(&plugin_dir, &v.name).map_err(|e| e.to_string())?;
        make_world_writable_dir(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        match ed.medium.as_deref().unwrap_or("") {
            "" => {}
            "Memory" => {
                let mounted = mount::mounted_at(&dir)
                    .map_err(|e| format!("cannot read the mount table: {e}"))?;
                if mounted.as_deref() != Some("tmpfs") {
                    let size = self.tmpfs_size(pod, ed.size_limit.as_ref().map(|q| q.0.as_str()));
                    mount::mount_tmpfs(&dir, size)
                        .map_err(|e| format!("cannot mount a tmpfs at {}: {e}", dir.display()))?;
                }
            }
            m if m.starts_with("HugePages") => {
                return Err(format!(
                    "emptyDir medium {m:?} is not supported (rkubelet supports \"\" and \"Memory\")"
                ))
            }
            m => return Err(format!("unknown storage medium {m:?}")),
        }
        if let Some(gid) = pod
            .spec
            .as_ref()
            .and_then(|s| s.security_context.as_ref())
            .and_then(|sc| sc.fs_group)
        {
            set_volume_ownership(&dir, gid)
                .map_err(|e| format!("cannot give {} to fsGroup {gid}: {e}", dir.display()))?;
        }
        Ok(dir)
    }

    /// A configMap, secret, downwardAPI or projected volume: its directory (a tmpfs
    /// but for configMaps), its payload from the objects, written atomically.
    fn set_up_api_volume(
        &self,
        pod: &Pod,
        uid: &str,
        v: &Volume,
        payload: &Payload,
    ) -> Result<PathBuf, String> {
        let plugin = match volume_type(v) {
            "configMap" => CONFIG_MAP_PLUGIN,
            "secret" => SECRET_PLUGIN,
            "downwardAPI" => DOWNWARD_API_PLUGIN,
            _ => PROJECTED_PLUGIN,
        };
        // The objects came first (`api_payloads`): nothing is made for a volume whose
        // object is missing.
        let plugin_dir = self
            .pod_dir(uid)
            .map_err(|e| e.to_string())?
            .join("volumes")
            .join(plugin);
        let dir = safe_join(&plugin_dir, &v.name).map_err(|e| e.to_string())?;
        make_dir(&dir, 0o755).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        if plugin != CONFIG_MAP_PLUGIN {
            let mounted =
                mount::mounted_at(&dir).map_err(|e| format!("cannot read the mount table: {e}"))?;
            if mounted.as_deref() != Some("tmpfs") {
                let size = self.tmpfs_size(pod, None);
                mount::mount_tmpfs(&dir, size)
                    .map_err(|e| format!("cannot mount a tmpfs at {}: {e}", dir.display()))?;
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
                    .map_err(|e| format!("cannot set the mode of {}: {e}", dir.display()))?;
            }
        }
        let fs_group = pod
            .spec
            .as_ref()
            .and_then(|s| s.security_context.as_ref())
            .and_then(|sc| sc.fs_group)
            .and_then(|g| u32::try_from(g).ok());
        if let Some(gid) = fs_group {
            std::os::unix::fs::chown(&dir, None, Some(gid))
                .map_err(|e| format!("cannot give {} to fsGroup {gid}: {e}", dir.display()))?;
        }
        match atomic_writer::write(&dir, payload, fs_group) {
            Ok(true) => log::debug!(
                "pod {}: volume {:?} written",
                runtime::container::format_pod(pod),
                v.name
            ),
            Ok(false) => {}
            Err(e) => return Err(format!("error writing payload to {}: {e}", dir.display())),
        }
        Ok(dir)
    }

    /// A memory emptyDir's size (upstream `calculateEmptyDirMemorySize`): the smallest
    /// of its sizeLimit and the pod's memory limit, else the node's allocatable memory.
    fn tmpfs_size(&self, pod: &Pod, size_limit: Option<&str>) -> Option<u64> {
        let bytes = |milli: i128| u64::try_from(milli.saturating_add(999) / 1000).ok();
        let pod_limit = pod_memory_limit(pod).and_then(bytes);
        let limit = size_limit
            .and_then(parse_milli)
            .filter(|m| *m > 0)
            .and_then(bytes);
        let node = (self.allocatable_memory > 0).then_some(self.allocatable_memory);
        [limit, pod_limit].into_iter().flatten().min().or(node)
    }

    /// Says which pods the sources want (called by housekeeping, only once every source
    /// has been seen). Directories of other pods become candidates for removal.
    /// Never blocks on a filesystem call: it takes only the small `desired` lock.
    /// Every 2 s with the same pods, mostly: the set is built only when it changed.
    pub fn set_desired_pods<'a, I>(&self, uids: I)
    where
        I: IntoIterator<Item = &'a str>,
        I::IntoIter: Clone,
    {
        let uids = uids.into_iter();
        let mut d = lock(&self.desired);
        let same = d.known
            && d.keep.len() == uids.clone().count()
            && uids.clone().all(|u| d.keep.contains(u));
        if same {
            return;
        }
        d.generation += 1;
        d.keep = uids.map(str::to_string).collect();
        d.known = true;
    }

    fn is_kept(&self, uid: &str) -> bool {
        lock(&self.desired).keep.contains(uid)
    }
}

/// The API name of a volume's type ("" when no source is set).
pub(crate) fn volume_type(v: &Volume) -> &'static str {
    let kinds: [(&'static str, bool); 30] = [
        ("emptyDir", v.empty_dir.is_some()),
        ("hostPath", v.host_path.is_some()),
        ("configMap", v.config_map.is_some()),
        ("secret", v.secret.is_some()),
        ("projected", v.projected.is_some()),
        ("downwardAPI", v.downward_api.is_some()),
        ("persistentVolumeClaim", v.persistent_volume_claim.is_some()),
        ("ephemeral", v.ephemeral.is_some()),
        ("csi", v.csi.is_some()),
        ("nfs", v.nfs.is_some()),
        ("image", v.image.is_some()),
        ("iscsi", v.iscsi.is_some()),
        ("gitRepo", v.git_repo.is_some()),
        ("awsElasticBlockStore", v.aws_elastic_block_store.is_some()),
        ("azureDisk", v.azure_disk.is_some()),
        ("azureFile", v.azure_file.is_some()),
        ("cephfs", v.cephfs.is_some()),
        ("cinder", v.cinder.is_some()),
        ("fc", v.fc.is_some()),
        ("flexVolume", v.flex_volume.is_some()),
        ("flocker", v.flocker.is_some()),
        ("gcePersistentDisk", v.gce_persistent_disk.is_some()),
        ("glusterfs", v.glusterfs.is_some()),
        ("photonPersistentDisk", v.photon_persistent_disk.is_some()),
        ("portworxVolume", v.portworx_volume.is_some()),
        ("quobyte", v.quobyte.is_some()),
        ("rbd", v.rbd.is_some()),
        ("scaleIO", v.scale_io.is_some()),
        ("storageos", v.storageos.is_some()),
        ("vsphereVolume", v.vsphere_volume.is_some()),
    ];
    kinds
        .into_iter()
        .find(|(_, set)| *set)
        .map_or("", |(name, _)| name)
}

/// The pod's memory limit if every app container has one (upstream `PodLimits`:
/// the larger of the app containers' sum and the largest init container), in
/// milli-units.
fn pod_memory_limit(pod: &Pod) -> Option<i128> {
    let spec = pod.spec.as_ref()?;
    let limit = |c: &Container| {
        c.resources
            .as_ref()
            .and_then(|r| r.limits.as_ref())
            .and_then(|l| l.get("memory"))
            .and_then(|q| parse_milli(&q.0))
    };
    let mut sum = 0i128;
    for c in &spec.containers {
        sum = sum.saturating_add(limit(c)?);
    }
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .filter_map(limit)
        .max();
    Some(init.map_or(sum, |i| i.max(sum)))
}

/// Whether a volume's files come from the API or the pod (set up again on each sync,
/// mounted read-only).
pub(crate) fn is_api_volume(v: &Volume) -> bool {
    matches!(
        volume_type(v),
        "configMap" | "secret" | "downwardAPI" | "projected"
    )
}

/// A directory (and its parents) with `mode` when it is made.
fn make_dir(dir: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if let Some(parent) = dir.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(parent)?;
    }
    match std::fs::DirBuilder::new().mode(mode).create(dir) {
        Ok(()) => std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// An emptyDir's directory: created if missing, mode 0777 whatever the umask (so that
/// containers running as any user can write, as upstream's `setupDir`).
fn make_world_writable_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if let Some(parent) = dir.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(parent)?;
    }
    match std::fs::DirBuilder::new().mode(0o777).create(dir) {
        Ok(()) => std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// Upstream `SetVolumeOwnership`: everything in the volume gets group `gid`, group
/// read-write, and directories the setgid bit so new files inherit the group.
fn set_volume_ownership(dir: &Path, gid: i64) -> io::Result<()> {
    let gid = u32::try_from(gid).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        let meta = std::fs::symlink_metadata(&p)?;
        if meta.file_type().is_symlink() {
            continue;
        }
        std::os::unix::fs::lchown(&p, None, Some(gid))?;
        let mode = meta.permissions().mode();
        let new_mode = if meta.is_dir() {
            for e in std::fs::read_dir(&p)? {
                stack.push(e?.path());
            }
            mode | 0o2770
        } else {
            mode | 0o660
        };
        if new_mode != mode {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(new_mode))?;
        }
    }
    Ok(())
}

impl VolumeManager {
    /// A container's `volumeMounts` as bind mounts (upstream `makeMounts`): the
    /// volume's host path; for a `subPath` (or a `subPathExpr` expanded from the
    /// container's environment; the sub-directory is created if missing) the
    /// kubelet's own bind mount of it, `<pod dir>/volume-subpaths/<volume>/<container>/
    /// <index>` ([`subpath`]), never a path into the volume that the container could
    /// swap for a symlink before the runtime resolves it. Made under the pod's lock, so
    /// the pod's cleanup never runs between a mount and its directory.
    /// Err is the `CreateContainerConfigError` message.
    pub fn mounts_for(
        &self,
        uid: &str,
        volumes: &PodVolumes,
        c: &Container,
        env: &[(String, String)],
    ) -> Result<Vec<Mount>, String> {
        let mut out = Vec::new();
        for (index, m) in c.volume_mounts.iter().flatten().enumerate() {
            let base = match volumes.volumes.get(&m.name) {
                None => {
                    return Err(format!(
                        "cannot find volume {:?} to mount into container {:?}",
                        m.name, c.name
                    ))
                }
                Some(Err(e)) => return Err(e.clone()),
                Some(Ok(p)) => p,
            };
            let sub = match m.sub_path_expr.as_deref().filter(|s| !s.is_empty()) {
                Some(expr) => expand_sub_path(expr, env)?,
                None => m.sub_path.clone().unwrap_or_default(),
            };
            let host_path = if sub.is_empty() {
                base.clone()
            } else {
                self.with_pod(uid, |_| {
                    let real = subpath::prepare(base, &sub, &m.name, &c.name)?;
                    self.bind_sub_path(uid, base, &real, &m.name, &c.name, index)
                        .map_err(|e| {
                            log::warn!(
                                "pod {uid}: subPath {sub:?} of volume {:?} for container {:?}: {e}",
                                m.name,
                                c.name
                            );
                            format!(
                                "failed to prepare subPath for volumeMount {:?} of container {:?}",
                                m.name, c.name
                            )
                        })
                })?
            };
            let container_path = if m.mount_path.starts_with('/') {
                m.mount_path.clone()
            } else {
                format!("/{}", m.mount_path)
            };
            out.push(Mount {
                host_path: host_path.display().to_string(),
                container_path,
                read_only: m.read_only.unwrap_or(false) || volumes.read_only.contains(&m.name),
            });
        }
        Ok(out)
    }

    /// Bind-mounts the resolved subPath `real` of the volume at `base` onto its target
    /// under the pod directory (which must exist: a pod cleaned up meanwhile is not
    /// made again here). The caller holds the pod's lock.
    fn bind_sub_path(
        &self,
        uid: &str,
        base: &Path,
        real: &Path,
        volume: &str,
        container: &str,
        index: usize,
    ) -> io::Result<PathBuf> {
        use std::os::unix::fs::DirBuilderExt;
        let mut target = self.pod_dir(uid)?.join(subpath::SUBPATHS_DIR);
        for name in [None, Some(volume), Some(container)] {
            if let Some(name) = name {
                target = safe_join(&target, name)?;
            }
            match std::fs::DirBuilder::new().mode(0o750).create(&target) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        let target = safe_join(&target, &index.to_string())?;
        subpath::bind(base, real, &target)?;
        Ok(target)
    }
}

impl PodVolumes {
    /// The failure of a volume the container mounts, if any (for reporting).
    pub fn failure_for(&self, c: &Container) -> Option<String> {
        c.volume_mounts
            .iter()
            .flatten()
            .find_map(|m| self.volumes.get(&m.name).and_then(|r| r.clone().err()))
    }
}

/// Upstream `ExpandContainerVolumeMounts`: every referenced variable must be set and
/// non-empty.
pub(crate) fn expand_sub_path(expr: &str, env: &[(String, String)]) -> Result<String, String> {
    let map: HashMap<&str, &str> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut missing: Vec<String> = Vec::new();
    let out = expand(expr, &mut |name: &str| match map.get(name) {
        Some(v) if !v.is_empty() => v.to_string(),
        _ => {
            if !missing.iter().any(|m| m == name) {
                missing.push(name.to_string());
            }
            String::new()
        }
    });
    if missing.is_empty() {
        Ok(out)
    } else {
        base::sort::sort(&mut missing);
        Err(format!("missing value for {}", missing.join(", ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base::testutil::TempDir;
    use runtime::fake::{FakeClock, FakeRuntime};
    use std::time::Instant;

    fn manager(root: &TempDir) -> Arc<VolumeManager> {
        Arc::new(VolumeManager::new(
            root.0.clone(),
            Arc::new(FakeRuntime::new(FakeClock::default())),
            "node".into(),
            0,
        ))
    }

    fn pod_with_uid(uid: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.uid = Some(uid.into());
        p
    }

    #[test]
    fn a_stuck_filesystem_call_holds_only_its_own_pod() {
        let root = TempDir::new("vol-locks");
        let vm = manager(&root);
        let (entered_tx, entered) = crossbeam_channel::bounded(1);
        let (release, released) = crossbeam_channel::bounded::<()>(1);
        // A set-up stuck in a filesystem call (a hung hostPath) holds its pod's lock.
        let stuck = {
            let vm = vm.clone();
            std::thread::Builder::new()
                .name("test-stuck".into())
                .spawn(move || {
                    vm.with_pod("slow", |_| {
                        let _ = entered_tx.send(());
                        let _ = released.recv_timeout(Duration::from_secs(30));
                    })
                })
        };
        entered
            .recv_timeout(Duration::from_secs(10))
            .expect("the slow set-up runs");
        // Meanwhile the sync loop's housekeeping, another pod's set-up and the cleanup
        // pass all finish without waiting for it.
        let (done_tx, done) = crossbeam_channel::bounded(1);
        let other = {
            let vm = vm.clone();
            std::thread::Builder::new()
                .name("test-other".into())
                .spawn(move || {
                    let began = Instant::now();
                    vm.set_desired_pods(["slow", "fast"]);
                    let v = vm.setup_pod(&pod_with_uid("fast"));
                    vm.cleanup_orphans().expect("cleanup");
                    let _ = done_tx.send((began.elapsed(), v));
                })
        };
        let (took, v) = done
            .recv_timeout(Duration::from_secs(5))
            .expect("housekeeping and other pods do not wait for a stuck pod");
        assert!(took < Duration::from_secs(5));
        assert_eq!(v, PodVolumes::default());
        assert!(root.0.join("pods/fast/volumes").is_dir());
        release.send(()).expect("release");
        stuck.expect("spawn").join().expect("stuck thread");
        other.expect("spawn").join().expect("other thread");
    }

    #[test]
    fn a_config_map_volume_follows_its_object_and_a_failed_refresh_keeps_it() {
        use crate::objects::fake::{config_map, FakeFetcher};
        use crate::objects::{Fetcher, ObjectManager};
        let root = TempDir::new("vol-cm");
        let f = Arc::new(FakeFetcher::default());
        lock(&f.config_maps).insert("ns/cm".into(), config_map(&[("k", "v1")]));
        let objects = Arc::new(
            ObjectManager::new(Some(f.clone() as Arc<dyn Fetcher>)).with_ttl(Duration::ZERO),
        );
        let vm = VolumeManager::new(
            root.0.clone(),
            Arc::new(FakeRuntime::new(FakeClock::default())),
            "node".into(),
            0,
        )
        .with_objects(objects, NodeFacts::default());
        let pod: Pod = serde_norway::from_str(
            "metadata: {name: p, namespace: ns, uid: u1}\n\
             spec:\n  volumes: [{name: v, configMap: {name: cm}}]\n\
             \x20 containers: [{name: c, volumeMounts: [{name: v, mountPath: /etc/v}]}]",
        )
        .expect("pod");
        let c = pod.spec.as_ref().expect("spec").containers[0].clone();
        let file = root.0.join("pods/u1/volumes/kubernetes.io~configmap/v/k");
        let mounts = vm
            .mounts_for("u1", &vm.setup_pod(&pod), &c, &[])
            .expect("mounts");
        assert!(mounts[0].read_only, "API volumes are mounted read-only");
        assert_eq!(std::fs::read_to_string(&file).expect("k"), "v1");
        lock(&f.config_maps).insert("ns/cm".into(), config_map(&[("k", "v2")]));
        vm.setup_pod(&pod);
        assert_eq!(std::fs::read_to_string(&file).expect("k"), "v2");
        // The object goes: the refresh fails, the volume keeps its last content.
        lock(&f.config_maps).clear();
        let v = vm.setup_pod(&pod);
        assert!(v.failure_for(&c).is_none(), "{v:?}");
        assert_eq!(std::fs::read_to_string(&file).expect("k"), "v2");
        // A pod whose object never existed: its containers wait with upstream's words.
        let mut other = pod.clone();
        other.metadata.uid = Some("u2".into());
        assert_eq!(
            vm.setup_pod(&other).failure_for(&c).as_deref(),
            Some("MountVolume.SetUp failed for volume \"v\" : configmap \"cm\" not found")
        );
    }

    #[test]
    fn an_orphaned_pod_directory_goes_and_a_wanted_one_stays() {
        let root = TempDir::new("vol-orphans");
        let vm = manager(&root);
        vm.setup_pod(&pod_with_uid("gone"));
        vm.setup_pod(&pod_with_uid("kept"));
        vm.set_desired_pods(["kept"]);
        vm.cleanup_orphans().expect("cleanup");
        assert!(!root.0.join("pods/gone").exists());
        assert!(root.0.join("pods/kept").is_dir());
        // Set up again after its removal: a fresh directory and state.
        vm.setup_pod(&pod_with_uid("gone"));
        assert!(root.0.join("pods/gone/volumes").is_dir());
    }

    #[test]
    fn a_pass_after_one_that_found_every_directory_kept_still_sees_new_orphans() {
        let root = TempDir::new("vol-all-kept");
        let vm = manager(&root);
        vm.setup_pod(&pod_with_uid("a"));
        vm.setup_pod(&pod_with_uid("b"));
        vm.set_desired_pods(["a", "b"]);
        // An mtime as of a while ago (a fresh one is not trusted: timestamps are coarse).
        let age = |root: &TempDir| {
            let dir = std::fs::File::open(root.0.join("pods")).expect("open");
            let past = std::time::SystemTime::now() - Duration::from_secs(10);
            dir.set_modified(past).expect("set mtime");
        };
        age(&root);
        vm.cleanup_orphans().expect("cleanup");
        assert!(
            lock(&vm.desired).all_kept_as_of.is_some(),
            "nothing to do next time"
        );
        vm.cleanup_orphans().expect("cleanup");
        // A pod no longer wanted: the list changed, so the next pass looks again.
        vm.set_desired_pods(["a"]);
        vm.cleanup_orphans().expect("cleanup");
        assert!(!root.0.join("pods/b").exists());
        // A directory of a pod nobody wants appears: the directory's mtime changed.
        age(&root);
        vm.cleanup_orphans().expect("cleanup");
        assert!(lock(&vm.desired).all_kept_as_of.is_some());
        std::fs::create_dir_all(root.0.join("pods/stray")).expect("mkdir");
        vm.cleanup_orphans().expect("cleanup");
        assert!(!root.0.join("pods/stray").exists());
        assert!(root.0.join("pods/a").is_dir());
    }

    #[test]
    fn sub_path_expr_needs_every_variable() {
        let env = vec![
            ("POD".to_string(), "web".to_string()),
            ("EMPTY".to_string(), String::new()),
        ];
        assert_eq!(
            expand_sub_path("logs/$(POD)", &env).as_deref(),
            Ok("logs/web")
        );
        assert_eq!(
            expand_sub_path("$(B)/$(A)/$(EMPTY)/$(A)", &env),
            Err("missing value for A, B, EMPTY".into())
        );
        assert_eq!(expand_sub_path("$$(POD)", &env).as_deref(), Ok("$(POD)"));
    }

    #[test]
    fn sub_path_mounts_go_with_the_pod_even_after_a_restart_and_host_files_stay() {
        let root = TempDir::new("vol-subpath-cleanup");
        // A root dir reached through a symlink: the mount table names the real path.
        let links = TempDir::new("vol-subpath-link");
        let linked = links.0.join("root");
        std::os::unix::fs::symlink(&root.0, &linked).expect("symlink");
        let manager = |_: &TempDir| {
            Arc::new(VolumeManager::new(
                linked.clone(),
                Arc::new(FakeRuntime::new(FakeClock::default())),
                "node".into(),
                0,
            ))
        };
        let host = root.0.join("host");
        std::fs::create_dir_all(host.join("data")).expect("host dir");
        std::fs::write(host.join("data/keep"), "host file").expect("host file");
        let vm = manager(&root);
        let pod: Pod = serde_norway::from_str(&format!(
            "metadata: {{name: p, namespace: ns, uid: u1}}\n\
             spec:\n  volumes: [{{name: hp, hostPath: {{path: {:?}}}}}, {{name: e, emptyDir: {{}}}}]\n\
             \x20 containers: [{{name: c, volumeMounts: [{{name: hp, mountPath: /h, subPath: data}}, {{name: e, mountPath: /e, subPath: x/y}}]}}]",
            host.display().to_string()
        ))
        .expect("pod");
        let c = pod.spec.as_ref().expect("spec").containers[0].clone();
        let mounts = vm
            .mounts_for("u1", &vm.setup_pod(&pod), &c, &[])
            .expect("mounts");
        let subpaths = linked.join("pods/u1").join(subpath::SUBPATHS_DIR);
        let made: Vec<_> = mount::mounts_under(&root.0.join("pods/u1"))
            .expect("mountinfo")
            .into_iter()
            .map(|m| m.mount_point)
            .collect();
        // A kubelet restarted since: a new manager, the mounts the old one left.
        let vm = manager(&root);
        vm.set_desired_pods([]);
        let cleaned = vm.cleanup_orphans();
        let left = mount::mounts_under(&root.0).expect("mountinfo");
        for m in &left {
            let _ = mount::unmount(&m.mount_point);
        }
        let hosts: Vec<_> = mounts.iter().map(|m| m.host_path.clone()).collect();
        assert_eq!(
            hosts,
            [
                subpaths.join("hp/c/0").display().to_string(),
                subpaths.join("e/c/1").display().to_string()
            ]
        );
        assert_eq!(made.len(), 2, "{made:?}");
        cleaned.expect("cleanup");
        assert!(left.is_empty(), "{left:?}");
        assert!(!root.0.join("pods/u1").exists());
        assert_eq!(
            std::fs::read_to_string(host.join("data/keep")).expect("host file stays"),
            "host file"
        );
    }

    #[test]
    fn volume_types_are_named_as_in_the_api() {
        let mut v = Volume {
            name: "x".into(),
            ..Default::default()
        };
        assert_eq!(volume_type(&v), "");
        v.config_map = Some(Default::default());
        assert_eq!(volume_type(&v), "configMap");
        v.config_map = None;
        v.persistent_volume_claim = Some(Default::default());
        assert_eq!(volume_type(&v), "persistentVolumeClaim");
    }

    #[test]
    fn memory_limit_of_a_pod_needs_every_container_limited() {
        use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
        let c = |mem: Option<&str>| Container {
            resources: mem.map(|m| ResourceRequirements {
                limits: Some([("memory".to_string(), Quantity(m.into()))].into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let pod = |cs: Vec<Container>, init: Vec<Container>| Pod {
            spec: Some(PodSpec {
                containers: cs,
                init_containers: Some(init),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            pod_memory_limit(&pod(vec![c(Some("1Mi")), c(Some("2Mi"))], vec![])),
            Some(3 << 20).map(|b: i128| b * 1000)
        );
        assert_eq!(
            pod_memory_limit(&pod(vec![c(Some("1Mi")), c(None)], vec![])),
            None
        );
        assert_eq!(
            pod_memory_limit(&pod(vec![c(Some("1Mi"))], vec![c(Some("8Mi"))])),
            Some((8i128 << 20) * 1000)
        );
    }
}
