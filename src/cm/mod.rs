//! The container manager (upstream `pkg/kubelet/cm`): the `kubepods` cgroup hierarchy
//! under `--cgroup-root` (`kubepods`, `kubepods/burstable`, `kubepods/besteffort`),
//! node allocatable enforced on `kubepods` (`--enforce-node-allocatable=pods`: memory
//! limit and cpu shares of capacity less `--kube-reserved` and `--system-reserved`),
//! one cgroup per pod (Guaranteed pods directly under `kubepods`) with the pod's
//! limits, handed to Docker as every container's `CgroupParent`, the burstable QoS
//! cgroup's shares kept at its pods' cpu requests, and pod cgroups removed once the
//! pod's containers are.
//!
//! The hierarchy is built on the first pod sync that needs it (Docker's `/info` says
//! the cgroup driver), on a pod worker; every write is a filesystem call made with no
//! lock held. A cgroupfs that cannot be written (an unprivileged kubelet, a read-only
//! `/sys/fs/cgroup`) is logged once and pods run without pod cgroups. A kernel without
//! the memory controller gets the hierarchy with cpu and pids only (admission refuses
//! pods with memory limits there).

pub(crate) mod cgroups;
pub(crate) mod resources;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use k8s_openapi::api::core::v1::Pod;

use cgroups::{CgroupFs, CgroupName, Driver};
use resources::{QosClass, ResourceConfig};
use runtime::{Runtime, RuntimeError};

/// Upstream's event reason when `kubepods` got its limits.
pub(crate) const NODE_ALLOCATABLE_ENFORCED: &str = "NodeAllocatableEnforced";
/// How often `pod-cgroup-gc` looks for pod cgroups of pods that are gone.
pub(crate) const POD_CGROUP_GC_PERIOD: std::time::Duration = std::time::Duration::from_secs(10);
/// The cgroupfs mount.
pub(crate) const CGROUP_MOUNT: &str = "/sys/fs/cgroup";

/// Errors of the container manager, each naming its pod or cgroup.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CmError {
    /// The runtime's `/info` could not be read (the driver is not known yet).
    #[error("reading the runtime's cgroup driver")]
    Runtime(#[source] RuntimeError),
    /// A pod's cgroup could not be created or updated.
    #[error("ensuring cgroup {cgroup} of pod {pod}")]
    PodCgroup {
        /// The pod (`ns/name`).
        pod: String,
        /// The cgroup.
        cgroup: String,
        /// The filesystem's answer.
        source: std::io::Error,
    },
}

/// What the container manager is set up with.
#[derive(Clone, Debug)]
pub(crate) struct CmSettings {
    /// The node (for the `NodeAllocatableEnforced` event).
    pub node_name: String,
    /// `--cgroups-per-qos`.
    pub cgroups_per_qos: bool,
    /// `--cgroup-root`.
    pub cgroup_root: String,
    /// `--enforce-node-allocatable` has `pods`.
    pub enforce_pods: bool,
    /// The cgroupfs mount (`/sys/fs/cgroup`; a fake tree in tests).
    pub mount: PathBuf,
    /// Online CPUs in milli-units (the node's capacity).
    pub capacity_cpu_milli: i128,
    /// Memory capacity in bytes.
    pub capacity_memory: i64,
    /// Capacity less kube and system reserved: cpu milli-units.
    pub allocatable_cpu_milli: i128,
    /// Capacity less kube and system reserved: memory bytes.
    pub allocatable_memory: i64,
}

/// The hierarchy once built.
#[derive(Clone, Debug)]
struct Ready {
    fs: CgroupFs,
    kubepods: CgroupName,
}

#[derive(Debug)]
enum State {
    /// Not built yet.
    Unknown,
    /// Built.
    Ready(Ready),
    /// Pods run without pod cgroups (logged once).
    Disabled,
}

/// Pods with a cgroup: their QoS class and cpu request (for the burstable shares).
#[derive(Debug, Default)]
struct Book {
    pods: HashMap<String, (QosClass, i128)>,
    /// Bumped on every change, so a writer sees that its shares are stale.
    generation: u64,
}

/// The container manager, shared by the pod workers and the pod killer's callbacks.
#[derive(Debug)]
pub(crate) struct ContainerManager {
    settings: CmSettings,
    runtime: Arc<dyn Runtime>,
    state: Mutex<State>,
    book: Mutex<Book>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The pod's cgroup name (upstream `GetPodContainerName`): `pod<uid>` under its QoS
/// cgroup; Guaranteed pods directly under `kubepods`.
pub(crate) fn pod_cgroup_name(kubepods: &CgroupName, qos: QosClass, uid: &str) -> CgroupName {
    let pod = format!("pod{uid}");
    match qos {
        QosClass::Guaranteed => kubepods.child(&pod),
        QosClass::Burstable => kubepods.child("burstable").child(&pod),
        QosClass::BestEffort => kubepods.child("besteffort").child(&pod),
    }
}

impl ContainerManager {
    /// A manager; nothing is built until a pod needs it.
    pub(crate) fn new(settings: CmSettings, runtime: Arc<dyn Runtime>) -> Self {
        ContainerManager {
            settings,
            runtime,
            state: Mutex::new(State::Unknown),
            book: Mutex::default(),
        }
    }

    /// The `kubepods` cgroup's settings (upstream `enforceNodeAllocatableCgroups`):
    /// allocatable (capacity less reserved) when enforcing `pods`, else capacity.
    fn kubepods_config(&self) -> ResourceConfig {
        let s = &self.settings;
        let (cpu, memory) = if s.enforce_pods {
            (s.allocatable_cpu_milli, s.allocatable_memory)
        } else {
            (s.capacity_cpu_milli, s.capacity_memory)
        };
        ResourceConfig {
            cpu_shares: Some(
                u64::try_from(crate::kuberuntime::container::milli_cpu_to_shares(cpu)).unwrap_or(2),
            ),
            memory: Some(memory.max(1)),
            ..Default::default()
        }
    }

    /// Builds the hierarchy the first time (Docker's driver, the cgroup version);
    /// None when pods run without pod cgroups.
    fn ready(&self) -> Result<Option<Ready>, CmError> {
        match &*lock(&self.state) {
            State::Ready(r) => return Ok(Some(r.clone())),
            State::Disabled => return Ok(None),
            State::Unknown => {}
        }
        let info = self.runtime.info().map_err(CmError::Runtime)?;
        let driver = match info.cgroup_driver.as_str() {
            "cgroupfs" => Driver::Cgroupfs,
            "systemd" => Driver::Systemd,
            other => {
                return Ok(self.disable(&format!(
                    "the runtime reports no known cgroup driver ({other:?})"
                )))
            }
        };
        let fs = CgroupFs {
            version: cgroups::detect_version(&self.settings.mount),
            mount: self.settings.mount.clone(),
            driver,
            // v1: a memory controller disabled on the kernel command line is not
            // mounted either, so the mount alone tells.
            memory: cgroups::memory_controller(&self.settings.mount, None),
        };
        let kubepods = CgroupName::from_root(&self.settings.cgroup_root).child("kubepods");
        let built = fs
            .ensure(&kubepods, &self.kubepods_config())
            .and_then(|()| {
                fs.ensure(
                    &kubepods.child("burstable"),
                    &ResourceConfig {
                        cpu_shares: Some(2),
                        ..Default::default()
                    },
                )
            })
            .and_then(|()| {
                fs.ensure(
                    &kubepods.child("besteffort"),
                    &ResourceConfig {
                        cpu_shares: Some(2),
                        ..Default::default()
                    },
                )
            });
        if let Err(e) = built {
            return Ok(self.disable(&format!(
                "cannot build the {} cgroup: {e}",
                kubepods.path(driver)
            )));
        }
        let ready = Ready { fs, kubepods };
        let first = {
            let mut st = lock(&self.state);
            let first = matches!(*st, State::Unknown);
            *st = State::Ready(ready.clone());
            first
        };
        if first {
            log::info!(
                "container manager: {} cgroups ({:?}, driver {:?}{}) under {}",
                ready.kubepods.path(driver),
                ready.fs.version,
                driver,
                if ready.fs.memory {
                    ""
                } else {
                    ", no memory controller: cpu and pids only"
                },
                self.settings.mount.display()
            );
            if self.settings.enforce_pods {
                crate::record::node_event(
                    &self.settings.node_name,
                    false,
                    NODE_ALLOCATABLE_ENFORCED,
                    "Updated Node Allocatable limit across pods",
                );
            }
        }
        self.update_burstable(&ready);
        Ok(Some(ready))
    }

    /// The `kubepods` cgroup as the cgroupfs readers name it (`/kubepods`, or
    /// `/kubepods.slice` with the systemd driver) once the hierarchy is built; None
    /// before, or without pod cgroups. Never builds it.
    pub(crate) fn pods_cgroup(&self) -> Option<String> {
        match &*lock(&self.state) {
            State::Ready(r) => Some(r.kubepods.path(r.fs.driver)),
            _ => None,
        }
    }

    /// Pods run without pod cgroups from now on; said once.
    fn disable(&self, why: &str) -> Option<Ready> {
        let first = {
            let mut st = lock(&self.state);
            let first = !matches!(*st, State::Disabled);
            *st = State::Disabled;
            first
        };
        if first {
            log::warn!("container manager: {why}; pods run without pod cgroups");
        }
        None
    }

    /// Creates or updates the pod's cgroup (upstream `EnsureExists`, after
    /// `UpdateQOSCgroups`) and returns what the runtime takes as `CgroupParent` (""
    /// without pod cgroups). Called by a pod worker before the pod's sync.
    pub(crate) fn ensure_pod(&self, pod: &Pod) -> Result<String, CmError> {
        if !self.settings.cgroups_per_qos {
            return Ok(String::new());
        }
        let Some(ready) = self.ready()? else {
            return Ok(String::new());
        };
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let qos = QosClass::of(pod);
        let cpu = resources::pod_requests(pod)
            .get("cpu")
            .copied()
            .unwrap_or(0);
        let name = pod_cgroup_name(&ready.kubepods, qos, &uid);
        let known = lock(&self.book).pods.get(&uid).copied() == Some((qos, cpu));
        if !known || !ready.fs.exists(&name) {
            {
                let mut b = lock(&self.book);
                b.pods.insert(uid.clone(), (qos, cpu));
                b.generation += 1;
            }
            // The burstable shares grow before the pod's cgroup is made.
            if qos == QosClass::Burstable {
                self.update_burstable(&ready);
            }
            ready
                .fs
                .ensure(&name, &resources::pod_resource_config(pod))
                .map_err(|source| CmError::PodCgroup {
                    pod: runtime::container::format_pod(pod),
                    cgroup: name.path(ready.fs.driver),
                    source,
                })?;
        }
        Ok(name.runtime_parent(ready.fs.driver))
    }

    /// Removes a pod's cgroup once its containers are gone (upstream
    /// `cleanupOrphanedPodCgroups`' `Destroy`), wherever its QoS class put it.
    pub(crate) fn remove_pod(&self, uid: &str) {
        if !self.settings.cgroups_per_qos {
            return;
        }
        let Ok(Some(ready)) = self.ready() else {
            return;
        };
        let was = {
            let mut b = lock(&self.book);
            let was = b.pods.remove(uid);
            b.generation += 1;
            was
        };
        for qos in [
            QosClass::Guaranteed,
            QosClass::Burstable,
            QosClass::BestEffort,
        ] {
            let name = pod_cgroup_name(&ready.kubepods, qos, uid);
            if !ready.fs.exists(&name) {
                continue;
            }
            match ready.fs.remove(&name) {
                Ok(()) => log::debug!("removed cgroup {}", name.path(ready.fs.driver)),
                Err(e) => log::warn!(
                    "container manager: removing cgroup {}: {e}",
                    name.path(ready.fs.driver)
                ),
            }
        }
        if was.is_some_and(|(q, _)| q == QosClass::Burstable) {
            self.update_burstable(&ready);
        }
    }

    /// The pod cgroups on disk whose UIDs `keep` rejects, removed (a kubelet restart
    /// forgets pods removed meanwhile). Called off the sync loop.
    pub(crate) fn remove_orphans(&self, keep: &dyn Fn(&str) -> bool) -> Result<(), CmError> {
        if !self.settings.cgroups_per_qos {
            return Ok(());
        }
        let Some(ready) = self.ready()? else {
            return Ok(());
        };
        let parents = [
            ready.kubepods.clone(),
            ready.kubepods.child("burstable"),
            ready.kubepods.child("besteffort"),
        ];
        for parent in parents {
            for child in ready.fs.children(&parent) {
                let uid = match ready.fs.driver {
                    Driver::Cgroupfs => child.strip_prefix("pod").map(str::to_string),
                    Driver::Systemd => child
                        .strip_suffix(".slice")
                        .and_then(|c| c.rsplit('-').next())
                        .and_then(|c| c.strip_prefix("pod"))
                        .map(|u| u.replace('_', "-")),
                };
                if let Some(uid) = uid.filter(|u| !keep(u)) {
                    self.remove_pod(&uid);
                }
            }
        }
        Ok(())
    }

    /// Writes the burstable QoS cgroup's shares: its pods' cpu requests added up.
    /// Written with no lock held; written again if the pods changed meanwhile.
    fn update_burstable(&self, ready: &Ready) {
        loop {
            let (generation, shares) = {
                let b = lock(&self.book);
                let reqs = b
                    .pods
                    .values()
                    .filter(|(q, _)| *q == QosClass::Burstable)
                    .map(|(_, cpu)| *cpu);
                (b.generation, resources::burstable_shares(reqs))
            };
            let name = ready.kubepods.child("burstable");
            if let Err(e) = ready.fs.update(
                &name,
                &ResourceConfig {
                    cpu_shares: Some(shares),
                    ..Default::default()
                },
            ) {
                log::warn!("container manager: burstable cpu shares: {e}");
            }
            if lock(&self.book).generation == generation {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use runtime::fake::FakeRuntime;

    fn settings(mount: PathBuf) -> CmSettings {
        CmSettings {
            node_name: "n".into(),
            cgroups_per_qos: true,
            cgroup_root: "/t".into(),
            enforce_pods: true,
            mount,
            capacity_cpu_milli: 2000,
            capacity_memory: 4 << 30,
            allocatable_cpu_milli: 1500,
            allocatable_memory: 3 << 30,
        }
    }

    #[test]
    fn pod_cgroup_names_per_qos() {
        let k = CgroupName::from_root("").child("kubepods");
        assert_eq!(
            pod_cgroup_name(&k, QosClass::Guaranteed, "u").to_cgroupfs(),
            "/kubepods/podu"
        );
        assert_eq!(
            pod_cgroup_name(&k, QosClass::Burstable, "u").to_cgroupfs(),
            "/kubepods/burstable/podu"
        );
        assert_eq!(
            pod_cgroup_name(&k, QosClass::BestEffort, "a-b").to_systemd(),
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-poda_b.slice"
        );
    }

    #[test]
    fn without_a_cgroup_driver_pods_run_without_cgroups() {
        let tmp = base::testutil::TempDir::new("cm-none");
        let cm = ContainerManager::new(settings(tmp.0.clone()), Arc::new(FakeRuntime::default()));
        let pod = Pod::default();
        assert_eq!(cm.ensure_pod(&pod).expect("fake cgroupfs"), "");
        assert!(std::fs::read_dir(&tmp.0)
            .expect("fake cgroupfs")
            .next()
            .is_none());
    }

    #[test]
    fn an_unwritable_cgroupfs_runs_pods_without_cgroups() {
        let tmp = base::testutil::TempDir::new("cm-ro");
        // A file where the controllers' directories should be: nothing can be made.
        let mount = tmp.write("not-a-dir", "");
        let rt = FakeRuntime::default();
        rt.set_info(runtime::RuntimeInfo {
            cgroup_driver: "cgroupfs".into(),
            ..Default::default()
        });
        let cm = ContainerManager::new(settings(mount), Arc::new(rt));
        assert_eq!(cm.ensure_pod(&pod("a", "100m")).expect("no error"), "");
        assert!(matches!(*lock(&cm.state), State::Disabled));
        // Said once; later pods go on without asking again.
        assert_eq!(cm.ensure_pod(&pod("b", "100m")).expect("no error"), "");
    }

    #[test]
    fn kubepods_gets_allocatable_or_capacity() {
        let tmp = base::testutil::TempDir::new("cm-alloc");
        let mut s = settings(tmp.0.clone());
        let cm = ContainerManager::new(s.clone(), Arc::new(FakeRuntime::default()));
        assert_eq!(
            cm.kubepods_config(),
            ResourceConfig {
                cpu_shares: Some(1536),
                memory: Some(3 << 30),
                ..Default::default()
            }
        );
        s.enforce_pods = false;
        let cm = ContainerManager::new(s, Arc::new(FakeRuntime::default()));
        assert_eq!(cm.kubepods_config().memory, Some(4 << 30));
        assert_eq!(cm.kubepods_config().cpu_shares, Some(2048));
    }

    fn pod(uid: &str, cpu_request: &str) -> Pod {
        use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
        Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                uid: Some(uid.into()),
                name: Some(uid.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    resources: Some(ResourceRequirements {
                        requests: Some([("cpu".to_string(), Quantity(cpu_request.into()))].into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn v2_tree_pods_qos_shares_and_removal() {
        let tmp = base::testutil::TempDir::new("cm-v2");
        std::fs::write(tmp.0.join("cgroup.controllers"), "cpu memory pids").expect("fake cgroupfs");
        let rt = FakeRuntime::default();
        rt.set_info(runtime::RuntimeInfo {
            cgroup_driver: "systemd".into(),
            cgroup_version: "2".into(),
            ..Default::default()
        });
        let mut s = settings(tmp.0.clone());
        s.cgroup_root = String::new();
        let cm = ContainerManager::new(s, Arc::new(rt));
        assert_eq!(cm.pods_cgroup(), None, "not built yet");
        let parent = cm.ensure_pod(&pod("a-1", "500m")).expect("fake cgroupfs");
        assert_eq!(parent, "kubepods-burstable-poda_1.slice");
        // The eviction manager's `allocatableMemory.available` reads it here.
        assert_eq!(cm.pods_cgroup().as_deref(), Some("/kubepods.slice"));
        cm.ensure_pod(&pod("b-2", "250m")).expect("fake cgroupfs");
        let read = |p: &str| std::fs::read_to_string(tmp.0.join(p)).expect("fake cgroupfs");
        // kubepods: allocatable 1500m -> 1536 shares -> weight 59; 3 GiB.
        assert_eq!(read("kubepods.slice/cpu.weight"), "59");
        assert_eq!(read("kubepods.slice/memory.max"), (3u64 << 30).to_string());
        // burstable: 750m -> 768 shares -> weight 30.
        assert_eq!(
            read("kubepods.slice/kubepods-burstable.slice/cpu.weight"),
            "30"
        );
        assert_eq!(
            read("kubepods.slice/kubepods-besteffort.slice/cpu.weight"),
            "1"
        );
        assert_eq!(
            read("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poda_1.slice/cpu.weight"),
            "20"
        );
        // A fake tree keeps files a real cgroupfs drops with the directory.
        let dir = tmp
            .0
            .join("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poda_1.slice");
        for f in std::fs::read_dir(&dir).expect("fake cgroupfs") {
            std::fs::remove_file(f.expect("fake cgroupfs").path()).expect("fake cgroupfs");
        }
        cm.remove_orphans(&|uid| uid == "b-2")
            .expect("fake cgroupfs");
        assert!(!dir.exists());
        // 250m -> 256 shares -> weight 10.
        assert_eq!(
            read("kubepods.slice/kubepods-burstable.slice/cpu.weight"),
            "10"
        );
    }
}
