//! cgroups on the filesystem (upstream `cgroup_manager_linux.go`): a cgroup's name as
//! components (`kubepods`, `burstable`, `pod<uid>`), spelled per driver (cgroupfs:
//! `/kubepods/burstable/pod<uid>`; systemd: `/kubepods.slice/kubepods-burstable.slice/
//! kubepods-burstable-pod<uid_with_underscores>.slice`), and its creation, settings and
//! removal under a cgroupfs mount, v1 (one hierarchy per controller: cpu, memory, pids)
//! or v2 (one unified tree, controllers enabled in each parent's
//! `cgroup.subtree_control`). Every function here is a filesystem call: callers keep
//! them off the sync loop and hold no lock across them.

use std::io;
use std::path::{Path, PathBuf};

use super::resources::{shares_to_weight, ResourceConfig};

/// How the runtime names cgroups (Docker's `/info` `CgroupDriver`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Driver {
    /// Paths under the cgroupfs mount.
    Cgroupfs,
    /// systemd slices.
    Systemd,
}

/// The cgroup hierarchy's version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Version {
    /// One hierarchy per controller.
    V1,
    /// The unified hierarchy.
    V2,
}

/// The v1 controllers the kubelet creates a cgroup in (the runtime creates the rest
/// of a container's); v2 enables these in `cgroup.subtree_control`.
pub(crate) const V1_CONTROLLERS: &[&str] = &["cpu", "cpuacct", "memory", "pids"];

/// Which version is mounted at `mount` (`/sys/fs/cgroup`): v2 has
/// `cgroup.controllers` at its top.
pub(crate) fn detect_version(mount: &Path) -> Version {
    if mount.join("cgroup.controllers").exists() {
        Version::V2
    } else {
        Version::V1
    }
}

/// Whether the kernel's memory controller is there for pods' cgroups under `mount`:
/// v2, named in the root's `cgroup.controllers`; v1, enabled in `/proc/cgroups`
/// (`proc_cgroups`, its text; a kernel booted with `cgroup_disable=memory`, as Raspberry
/// Pi OS is without `cgroup_enable=memory`, says 0) and mounted.
pub(crate) fn memory_controller(mount: &Path, proc_cgroups: Option<&str>) -> bool {
    match detect_version(mount) {
        Version::V2 => std::fs::read_to_string(mount.join("cgroup.controllers"))
            .is_ok_and(|c| c.split_whitespace().any(|w| w == "memory")),
        Version::V1 => {
            let enabled = proc_cgroups.is_none_or(|text| {
                text.lines().any(|l| {
                    let f: Vec<&str> = l.split_whitespace().collect();
                    f.first() == Some(&"memory") && f.get(3) == Some(&"1")
                })
            });
            enabled && mount.join("memory").is_dir()
        }
    }
}

/// A cgroup's name as its components (upstream `CgroupName`); empty is the root.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct CgroupName(pub Vec<String>);

impl CgroupName {
    /// The name of `--cgroup-root` ("" or "/" is the root; a systemd slice's
    /// `.slice` suffix and prefix are dropped, as upstream's
    /// `ParseSystemdToCgroupName`).
    pub(crate) fn from_root(root: &str) -> CgroupName {
        CgroupName(
            root.split('/')
                .filter(|p| !p.is_empty())
                .map(|p| match p.strip_suffix(".slice") {
                    Some(s) => s.rsplit('-').next().unwrap_or(s).to_string(),
                    None => p.to_string(),
                })
                .collect(),
        )
    }

    /// This name with one more component.
    pub(crate) fn child(&self, c: &str) -> CgroupName {
        let mut v = self.0.clone();
        v.push(c.to_string());
        CgroupName(v)
    }

    /// The cgroupfs spelling: `/a/b/c` (`/` for the root).
    pub(crate) fn to_cgroupfs(&self) -> String {
        format!("/{}", self.0.join("/"))
    }

    /// The systemd spelling (upstream `ToSystemd`): each component a slice whose
    /// name carries its parents' (`-` in a component becomes `_`), `/` for the root.
    pub(crate) fn to_systemd(&self) -> String {
        if self.0.is_empty() {
            return "/".into();
        }
        let mut prefix = String::new();
        let mut out = String::new();
        for c in &self.0 {
            let c = c.replace('-', "_");
            if !prefix.is_empty() {
                prefix.push('-');
            }
            prefix.push_str(&c);
            out.push('/');
            out.push_str(&prefix);
            out.push_str(".slice");
        }
        out
    }

    /// The path under the mount for `driver`.
    pub(crate) fn path(&self, driver: Driver) -> String {
        match driver {
            Driver::Cgroupfs => self.to_cgroupfs(),
            Driver::Systemd => self.to_systemd(),
        }
    }

    /// What Docker takes as `CgroupParent`: the cgroupfs path, or the leaf slice.
    pub(crate) fn runtime_parent(&self, driver: Driver) -> String {
        match driver {
            Driver::Cgroupfs => self.to_cgroupfs(),
            Driver::Systemd => self
                .to_systemd()
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_string(),
        }
    }
}

/// The cgroupfs tree the kubelet writes: the mount, its version and the driver's
/// spelling. The unit tests point `mount` at a fake tree.
#[derive(Clone, Debug)]
pub(crate) struct CgroupFs {
    /// `/sys/fs/cgroup`.
    pub mount: PathBuf,
    /// v1 or v2.
    pub version: Version,
    /// How names are spelled.
    pub driver: Driver,
    /// The kernel has the memory controller ([`memory_controller`]). Without it no
    /// memory limit is written (there is no file to write it to; admission refuses
    /// pods with one) and, on v2, `+memory` is not asked of `cgroup.subtree_control`,
    /// which refuses the whole write: the pods' cgroups keep their cpu and pids.
    pub memory: bool,
}

impl CgroupFs {
    /// The directories of a cgroup: one per mounted v1 controller, or the one v2
    /// directory.
    pub(crate) fn dirs(&self, name: &CgroupName) -> Vec<PathBuf> {
        let rel = name.path(self.driver);
        let rel = rel.trim_start_matches('/');
        match self.version {
            // Only the controllers mounted here (a kernel may lack one).
            Version::V1 => V1_CONTROLLERS
                .iter()
                .map(|c| self.mount.join(c))
                .filter(|root| root.is_dir())
                .map(|root| root.join(rel))
                .collect(),
            Version::V2 => vec![self.mount.join(rel)],
        }
    }

    /// The directory that stands for the cgroup: the v2 one, or on v1 the memory
    /// controller's (the cpu controller's on a kernel without memory).
    fn main_dir(&self, name: &CgroupName) -> PathBuf {
        let rel = name.path(self.driver);
        let rel = rel.trim_start_matches('/');
        match self.version {
            Version::V1 if self.memory => self.mount.join("memory").join(rel),
            Version::V1 => self.mount.join("cpu").join(rel),
            Version::V2 => self.mount.join(rel),
        }
    }

    /// Does the cgroup exist (its memory directory, or the v2 one)?
    pub(crate) fn exists(&self, name: &CgroupName) -> bool {
        self.main_dir(name).is_dir()
    }

    /// The v2 controllers the kubelet's cgroups get: cpu, memory (when the kernel
    /// has it) and pids.
    fn v2_controllers(&self) -> &'static [&'static str] {
        if self.memory {
            &["cpu", "memory", "pids"]
        } else {
            &["cpu", "pids"]
        }
    }

    /// Creates the cgroup (and its parents) and applies `config`.
    pub(crate) fn ensure(&self, name: &CgroupName, config: &ResourceConfig) -> io::Result<()> {
        for dir in self.dirs(name) {
            std::fs::create_dir_all(&dir).map_err(|e| at(&dir, e))?;
        }
        if self.version == Version::V2 {
            self.enable_controllers(name)?;
        }
        self.update(name, config)
    }

    /// v2: every ancestor below the mount hands cpu, memory and pids down (memory
    /// only when the kernel has it: the kernel refuses a write naming a controller it
    /// lacks, and with it the others).
    fn enable_controllers(&self, name: &CgroupName) -> io::Result<()> {
        let rel = name.path(self.driver);
        let wanted = self.v2_controllers();
        let mut dir = self.mount.clone();
        let parts: Vec<&str> = rel.split('/').filter(|p| !p.is_empty()).collect();
        for part in parts {
            let file = dir.join("cgroup.subtree_control");
            let current = std::fs::read_to_string(&file).unwrap_or_default();
            if !wanted
                .iter()
                .all(|c| current.split_whitespace().any(|w| w == *c))
            {
                let line: Vec<String> = wanted.iter().map(|c| format!("+{c}")).collect();
                std::fs::write(&file, line.join(" ")).map_err(|e| at(&file, e))?;
            }
            dir = dir.join(part);
        }
        Ok(())
    }

    /// Applies `config` to an existing cgroup.
    pub(crate) fn update(&self, name: &CgroupName, config: &ResourceConfig) -> io::Result<()> {
        let rel = name.path(self.driver);
        let rel = rel.trim_start_matches('/');
        match self.version {
            Version::V1 => {
                let cpu = self.mount.join("cpu").join(rel);
                if let Some(s) = config.cpu_shares {
                    write(&cpu.join("cpu.shares"), &s.to_string())?;
                }
                // The period first: a quota is checked against it.
                if let Some(p) = config.cpu_period {
                    write(&cpu.join("cpu.cfs_period_us"), &p.to_string())?;
                }
                if let Some(q) = config.cpu_quota {
                    let q = if q <= 0 { -1 } else { q };
                    write(&cpu.join("cpu.cfs_quota_us"), &q.to_string())?;
                }
                if let Some(m) = config.memory.filter(|_| self.memory) {
                    let m = if m <= 0 { -1 } else { m };
                    let mem = self.mount.join("memory").join(rel);
                    write(&mem.join("memory.limit_in_bytes"), &m.to_string())?;
                }
            }
            Version::V2 => {
                let dir = self.mount.join(rel);
                if let Some(s) = config.cpu_shares {
                    write(&dir.join("cpu.weight"), &shares_to_weight(s).to_string())?;
                }
                if config.cpu_quota.is_some() || config.cpu_period.is_some() {
                    let period = config.cpu_period.unwrap_or(100_000);
                    let quota = match config.cpu_quota {
                        Some(q) if q > 0 => q.to_string(),
                        _ => "max".to_string(),
                    };
                    write(&dir.join("cpu.max"), &format!("{quota} {period}"))?;
                }
                if let Some(m) = config.memory.filter(|_| self.memory) {
                    let m = if m <= 0 {
                        "max".to_string()
                    } else {
                        m.to_string()
                    };
                    write(&dir.join("memory.max"), &m)?;
                }
            }
        }
        Ok(())
    }

    /// Removes the cgroup (its directories; a missing one is fine). Fails while a
    /// process is in it.
    pub(crate) fn remove(&self, name: &CgroupName) -> io::Result<()> {
        for dir in self.dirs(name) {
            match std::fs::remove_dir(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(at(&dir, e)),
            }
        }
        Ok(())
    }

    /// The child cgroups' directory names of `name` (from memory, or the v2 tree).
    pub(crate) fn children(&self, name: &CgroupName) -> Vec<String> {
        let Ok(rd) = std::fs::read_dir(self.main_dir(name)) else {
            return Vec::new();
        };
        rd.filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().into_string().ok())
            .collect()
    }
}

fn write(path: &Path, value: &str) -> io::Result<()> {
    std::fs::write(path, value).map_err(|e| at(path, e))
}

/// The error with the file it was about.
fn at(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a real cgroup2 mount of the test's own: the memory controller is there exactly
    /// when the kernel has it enabled and no v1 hierarchy holds it (`/proc/cgroups`:
    /// hierarchy 0). On a hybrid host such as this project's CI machines (memory on v1,
    /// the unified tree beside it) that is a real cgroup2 tree without it.
    #[test]
    fn a_real_cgroup2_mount_says_whether_it_has_the_memory_controller() {
        let tmp = base::testutil::TempDir::new("cgroup2");
        let target = tmp.0.join("mnt");
        std::fs::create_dir_all(&target).expect("mount point");
        rustix::mount::mount(
            "none",
            &target,
            "cgroup2",
            rustix::mount::MountFlags::empty(),
            None::<&std::ffi::CStr>,
        )
        .expect("mount a cgroup2 of our own (needs root)");
        let proc_cgroups = std::fs::read_to_string("/proc/cgroups").expect("/proc/cgroups");
        let on_v2 = proc_cgroups.lines().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.first() == Some(&"memory") && f.get(1) == Some(&"0") && f.get(3) == Some(&"1")
        });
        let found = memory_controller(&target, None);
        let _ = rustix::mount::unmount(&target, rustix::mount::UnmountFlags::DETACH);
        assert_eq!(
            detect_version(&tmp.0),
            Version::V1,
            "the temp dir itself is no cgroup"
        );
        assert_eq!(found, on_v2, "/proc/cgroups:\n{proc_cgroups}");
    }

    #[test]
    fn the_memory_controller_is_found_or_missed_on_v1_and_v2() {
        let tmp = base::testutil::TempDir::new("memcg");
        // v1: mounted and enabled; disabled on the kernel command line; not mounted.
        std::fs::create_dir_all(tmp.0.join("memory")).expect("fake v1");
        let enabled =
            "#subsys_name\thierarchy\tnum_cgroups\tenabled\ncpu\t2\t1\t1\nmemory\t4\t80\t1\n";
        let disabled =
            "#subsys_name\thierarchy\tnum_cgroups\tenabled\ncpu\t2\t1\t1\nmemory\t0\t1\t0\n";
        assert!(memory_controller(&tmp.0, Some(enabled)));
        assert!(!memory_controller(&tmp.0, Some(disabled)));
        std::fs::remove_dir(tmp.0.join("memory")).expect("rm");
        assert!(!memory_controller(&tmp.0, Some(enabled)));
        // v2: named in the root's controllers, or not.
        std::fs::write(
            tmp.0.join("cgroup.controllers"),
            "cpuset cpu io memory pids\n",
        )
        .expect("v2");
        assert!(memory_controller(&tmp.0, None));
        std::fs::write(tmp.0.join("cgroup.controllers"), "cpuset cpu io pids\n").expect("v2");
        assert!(!memory_controller(&tmp.0, None));
    }

    #[test]
    fn names_per_driver() {
        let root = CgroupName::from_root("");
        let pod = root
            .child("kubepods")
            .child("burstable")
            .child("pod1234-5678");
        assert_eq!(pod.to_cgroupfs(), "/kubepods/burstable/pod1234-5678");
        assert_eq!(
            pod.to_systemd(),
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_5678.slice"
        );
        assert_eq!(
            pod.runtime_parent(Driver::Systemd),
            "kubepods-burstable-pod1234_5678.slice"
        );
        assert_eq!(
            pod.runtime_parent(Driver::Cgroupfs),
            "/kubepods/burstable/pod1234-5678"
        );
        assert_eq!(root.to_cgroupfs(), "/");
        assert_eq!(root.to_systemd(), "/");
        let r = CgroupName::from_root("/rk/test-1");
        assert_eq!(r.child("kubepods").to_cgroupfs(), "/rk/test-1/kubepods");
        assert_eq!(CgroupName::from_root("/"), CgroupName::default());
    }

    #[test]
    fn v1_writes_per_controller() {
        let tmp = base::testutil::TempDir::new("cgv1");
        for c in V1_CONTROLLERS {
            std::fs::create_dir_all(tmp.0.join(c)).expect("fake cgroupfs");
        }
        let fs = CgroupFs {
            mount: tmp.0.clone(),
            version: detect_version(&tmp.0),
            driver: Driver::Cgroupfs,
            memory: true,
        };
        assert_eq!(fs.version, Version::V1);
        let name = CgroupName::from_root("/t").child("kubepods").child("podx");
        let cfg = ResourceConfig {
            cpu_shares: Some(512),
            cpu_quota: Some(50_000),
            cpu_period: Some(100_000),
            memory: Some(64 << 20),
        };
        fs.ensure(&name, &cfg).expect("fake cgroupfs");
        let read = |p: &str| std::fs::read_to_string(tmp.0.join(p)).expect("fake cgroupfs");
        assert_eq!(read("cpu/t/kubepods/podx/cpu.shares"), "512");
        assert_eq!(read("cpu/t/kubepods/podx/cpu.cfs_quota_us"), "50000");
        assert_eq!(read("cpu/t/kubepods/podx/cpu.cfs_period_us"), "100000");
        assert_eq!(
            read("memory/t/kubepods/podx/memory.limit_in_bytes"),
            "67108864"
        );
        assert!(tmp.0.join("pids/t/kubepods/podx").is_dir());
        assert!(fs.exists(&name));
        assert_eq!(
            fs.children(&CgroupName::from_root("/t").child("kubepods")),
            vec!["podx".to_string()]
        );
        // A real cgroupfs removes its files with the directory; a fake one cannot.
        for d in fs.dirs(&name) {
            for f in std::fs::read_dir(&d).expect("fake cgroupfs") {
                std::fs::remove_file(f.expect("fake cgroupfs").path()).expect("fake cgroupfs");
            }
        }
        fs.remove(&name).expect("fake cgroupfs");
        assert!(!fs.exists(&name));
        fs.remove(&name).expect("fake cgroupfs");
    }

    /// A kernel without the memory controller (Raspberry Pi OS's default): found by the
    /// guest test on a real v2 tree, where `+cpu +memory +pids` in one write is refused
    /// whole and every pod ran without a cgroup. cpu and pids are still handed down and
    /// written; no memory file is.
    #[test]
    fn without_the_memory_controller_cpu_and_pids_are_still_set() {
        let tmp = base::testutil::TempDir::new("cgv2-nomem");
        std::fs::write(tmp.0.join("cgroup.controllers"), "cpuset cpu io pids\n")
            .expect("fake cgroupfs");
        let fs = CgroupFs {
            mount: tmp.0.clone(),
            version: detect_version(&tmp.0),
            driver: Driver::Systemd,
            memory: memory_controller(&tmp.0, None),
        };
        assert!(!fs.memory);
        let cfg = ResourceConfig {
            cpu_shares: Some(1024),
            cpu_quota: Some(20_000),
            cpu_period: Some(100_000),
            memory: Some(1 << 20),
        };
        let pod = CgroupName::default().child("kubepods").child("podu");
        fs.ensure(&pod, &cfg).expect("fake cgroupfs");
        let read = |p: &str| std::fs::read_to_string(tmp.0.join(p)).expect("fake cgroupfs");
        assert_eq!(read("cgroup.subtree_control"), "+cpu +pids");
        assert_eq!(
            read("kubepods.slice/kubepods-podu.slice/cpu.max"),
            "20000 100000"
        );
        assert!(!tmp
            .0
            .join("kubepods.slice/kubepods-podu.slice/memory.max")
            .exists());
        assert!(fs.exists(&pod));

        // v1: no memory hierarchy mounted; the cgroup is found by its cpu directory.
        let tmp = base::testutil::TempDir::new("cgv1-nomem");
        for c in ["cpu", "cpuacct", "pids"] {
            std::fs::create_dir_all(tmp.0.join(c)).expect("fake cgroupfs");
        }
        let fs = CgroupFs {
            mount: tmp.0.clone(),
            version: detect_version(&tmp.0),
            driver: Driver::Cgroupfs,
            memory: memory_controller(&tmp.0, None),
        };
        assert!(!fs.memory);
        let kubepods = CgroupName::default().child("kubepods");
        fs.ensure(&kubepods.child("podu"), &cfg)
            .expect("fake cgroupfs");
        assert_eq!(
            std::fs::read_to_string(tmp.0.join("cpu/kubepods/podu/cpu.shares"))
                .expect("fake cgroupfs"),
            "1024"
        );
        assert!(!tmp.0.join("memory").exists());
        assert!(fs.exists(&kubepods.child("podu")));
        assert_eq!(fs.children(&kubepods), vec!["podu".to_string()]);
    }

    #[test]
    fn v2_writes_weight_max_and_enables_controllers() {
        let tmp = base::testutil::TempDir::new("cgv2");
        std::fs::write(tmp.0.join("cgroup.controllers"), "cpu memory pids").expect("fake cgroupfs");
        let fs = CgroupFs {
            mount: tmp.0.clone(),
            version: detect_version(&tmp.0),
            driver: Driver::Systemd,
            memory: true,
        };
        assert_eq!(fs.version, Version::V2);
        let qos = CgroupName::default().child("kubepods").child("burstable");
        fs.ensure(
            &qos.child("poda-b"),
            &ResourceConfig {
                cpu_shares: Some(1024),
                cpu_quota: Some(20_000),
                cpu_period: Some(100_000),
                memory: Some(1 << 20),
            },
        )
        .expect("fake cgroupfs");
        let read = |p: &str| std::fs::read_to_string(tmp.0.join(p)).expect("fake cgroupfs");
        let pod = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poda_b.slice";
        assert_eq!(read(&format!("{pod}/cpu.weight")), "39");
        assert_eq!(read(&format!("{pod}/cpu.max")), "20000 100000");
        assert_eq!(read(&format!("{pod}/memory.max")), "1048576");
        assert_eq!(read("cgroup.subtree_control"), "+cpu +memory +pids");
        assert_eq!(
            read("kubepods.slice/kubepods-burstable.slice/cgroup.subtree_control"),
            "+cpu +memory +pids"
        );
        // No quota: unlimited.
        fs.update(
            &qos.child("poda-b"),
            &ResourceConfig {
                cpu_period: Some(100_000),
                cpu_quota: Some(0),
                memory: Some(0),
                ..Default::default()
            },
        )
        .expect("fake cgroupfs");
        assert_eq!(read(&format!("{pod}/cpu.max")), "max 100000");
        assert_eq!(read(&format!("{pod}/memory.max")), "max");
    }
}
