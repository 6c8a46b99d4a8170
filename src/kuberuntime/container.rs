//! The runtime configuration of a pod's sandbox and of its app and init containers: the
//! pod spec mapped onto CRI-shaped [`PodSandboxConfig`] and [`ContainerConfig`]
//! (upstream `generatePodSandboxConfig`, `generateContainerConfig`,
//! `GenerateRunContainerOptions`, `generateLinuxContainerResources`,
//! `determineEffectiveSecurityContext`). Each runtime translates them into its own
//! calls (Docker's: `crates/docker/src/translate.rs`).
//!
//! [`container_config`] gathers what the spec alone does not say (the pod's IP, the
//! volumes set up by the volume manager, the image's user, the node's DNS files) into a
//! [`ContainerContext`], then [`generate_container_config`] maps spec and context onto
//! the runtime config as a pure function. Anything the spec asks for that cannot be
//! honoured is a `CreateContainerConfigError` for that container, with upstream's
//! message; it never fails the pod's other containers.
//!
//! Over 800 lines: a third of it is its unit tests; the mapping itself is one pass over
//! the container spec and reads best in one place.

pub mod dns;
pub(crate) mod env;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod, PodSecurityContext, SecurityContext};

use super::actions::StartAction;
use super::ManagerConfig;
use crate::images::normalize_image;
use crate::volume::VolumeManager;
use dns::DnsSettings;
use runtime::config::{
    ContainerConfig, ContainerMetadata, LinuxContainerConfig, LinuxContainerSecurityContext,
    LinuxPodSandboxConfig, LinuxSandboxSecurityContext, Mount, NamespaceMode, NamespaceOption,
    PodSandboxConfig, PodSandboxMetadata, PortMapping, Resources, SecurityProfile,
};
use runtime::container::downward::{effective_requests, limits, NodeFacts};
use runtime::container::format_pod;
use runtime::container::labels;
use runtime::container::Waiting;
use runtime::{Runtime, RuntimeError};

/// The waiting reason of a container whose spec cannot be honoured.
pub(crate) const CREATE_CONTAINER_CONFIG_ERROR: &str = "CreateContainerConfigError";

/// Upstream `MinShares`: the kernel's minimum CPU weight, also what a container without
/// a CPU request gets.
pub(crate) const MIN_SHARES: i64 = 2;
/// Upstream `MaxShares`: the kernel's maximum CPU weight.
pub(crate) const MAX_SHARES: i64 = 262_144;
/// Upstream `SharesPerCPU`.
pub(crate) const SHARES_PER_CPU: i64 = 1024;
/// Upstream `QuotaPeriod`: the CFS period in µs (100 ms), `cpuCFSQuotaPeriod`'s default.
pub(crate) const QUOTA_PERIOD: i64 = 100_000;
/// Upstream `MinQuotaPeriod`: the kernel refuses a CFS quota under 1 ms.
pub(crate) const MIN_QUOTA: i64 = 1_000;

/// Where a container finds the pod's managed hosts file and resolver file.
const ETC_HOSTS: &str = "/etc/hosts";
const ETC_RESOLV_CONF: &str = "/etc/resolv.conf";

/// What the container configs need from the node and the kubelet's configuration.
#[derive(Clone, Debug)]
pub struct NodeContext {
    /// `--root-dir`: pod directories and `seccomp/` profiles live below it.
    pub root_dir: PathBuf,
    /// The node's IPs (`status.hostIP(s)`, host-network pods' IPs).
    pub host_ips: Vec<String>,
    /// `clusterDNS`, `clusterDomain`, `resolvConf`.
    pub dns: DnsSettings,
    /// Node allocatable CPU (millicores), memory and ephemeral storage (bytes): what the
    /// downward API reports for a container without limits.
    pub allocatable: Allocatable,
    /// The volume manager that sets up pod volumes before containers start.
    pub volumes: Arc<VolumeManager>,
}

/// The node's allocatable resources.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Allocatable {
    /// Millicores.
    pub cpu_milli: i128,
    /// Bytes.
    pub memory: i128,
    /// Bytes.
    pub ephemeral_storage: i128,
}

/// What [`generate_container_config`] needs beyond the pod spec.
#[derive(Clone, Debug, Default)]
pub struct ContainerContext {
    /// The node's name (the `io.rkubelet.node` label).
    pub node_name: String,
    /// The sandbox the container joins (its `io.kubernetes.sandbox.id` label).
    pub sandbox_id: String,
    /// The container's environment, resolved ([`env::make_environment`]).
    pub env: Vec<(String, String)>,
    /// Bind mounts: volumes, the managed hosts and resolver files.
    pub mounts: Vec<Mount>,
    /// The image's configured user (`USER`), when it had to be read.
    pub image_user: Option<String>,
    /// A `Localhost` seccomp profile's path under `<root>/seccomp/`, checked readable.
    pub seccomp_profile: Option<String>,
}

/// The runtime config of an app or init container: gathers the context (runtime
/// calls, the volume manager, files under the pod directory), then maps it.
/// Ok(Err(waiting)) when the container cannot be created as specified.
/// `sandbox_ips` are the sandbox's IPs as this sync read them (once for all its
/// containers), or why they could not be read.
pub(crate) fn container_config(
    runtime: &Arc<dyn Runtime>,
    cfg: &ManagerConfig,
    pod: &Pod,
    c: &Container,
    s: &StartAction,
    sandbox_id: &str,
    sandbox_ips: Result<&[String], &str>,
) -> Result<Result<ContainerConfig, Waiting>, RuntimeError> {
    let config_error = |message: String| {
        Ok(Err(Waiting {
            reason: CREATE_CONTAINER_CONFIG_ERROR.into(),
            message,
        }))
    };
    let node = &cfg.node;
    let spec = pod.spec.clone().unwrap_or_default();
    let host_network = spec.host_network == Some(true);
    let pod_ips = if host_network {
        node.host_ips.clone()
    } else {
        match sandbox_ips {
            Ok(ips) => ips.to_vec(),
            Err(e) => return config_error(format!("cannot read the pod sandbox's IP: {e}")),
        }
    };
    let facts = NodeFacts {
        pod_ips: pod_ips.clone(),
        host_ips: node.host_ips.clone(),
        allocatable_cpu_milli: node.allocatable.cpu_milli,
        allocatable_memory: node.allocatable.memory,
        allocatable_ephemeral_storage: node.allocatable.ephemeral_storage,
    };
    let (hostname, domain) = match dns::hostname_and_domain(pod, &node.dns.cluster_domain) {
        Ok(h) => h,
        Err(e) => return config_error(e),
    };
    let env = match env::make_environment(pod, c, &facts, node.volumes.objects()) {
        Ok(e) => e,
        Err(e) => return config_error(e),
    };

    // Volumes are set up before the container is created (upstream
    // WaitForAttachAndMount), then mapped onto bind mounts.
    let volumes = node.volumes.setup_pod(pod);
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let mut mounts = match node.volumes.mounts_for(&uid, &volumes, c, &env) {
        Ok(m) => m,
        Err(e) => return config_error(e),
    };
    let pod_dir = match node.volumes.pod_dir(&uid) {
        Ok(d) => d,
        Err(e) => return config_error(e.to_string()),
    };
    let mounted = |path: &str, mounts: &[Mount]| mounts.iter().any(|m| m.container_path == path);

    // The managed /etc/hosts (upstream makeHostsMount), unless the container mounts its own.
    if (!pod_ips.is_empty() || host_network) && !mounted(ETC_HOSTS, &mounts) {
        let node_hosts = if host_network {
            match std::fs::read_to_string(ETC_HOSTS) {
                Ok(t) => Some(t),
                Err(e) => return config_error(format!("cannot read the node's {ETC_HOSTS}: {e}")),
            }
        } else {
            None
        };
        let text = dns::render_hosts(pod, &pod_ips, &hostname, &domain, node_hosts.as_deref());
        let path = pod_dir.join("etc-hosts");
        if let Err(e) = write_if_changed(&path, &text, 0o644) {
            return config_error(format!("cannot write {}: {e}", path.display()));
        }
        mounts.push(Mount {
            host_path: path.display().to_string(),
            container_path: ETC_HOSTS.into(),
            read_only: false,
        });
    }

    // The pod's resolver file (upstream GetPodDNS, written as dockershim rewrote it).
    if !mounted(ETC_RESOLV_CONF, &mounts) {
        let host_resolv = if node.dns.resolv_conf.is_empty() {
            None
        } else {
            match std::fs::read_to_string(&node.dns.resolv_conf) {
                Ok(t) => Some(t),
                Err(e) => {
                    return config_error(format!(
                        "cannot read resolvConf {}: {e}",
                        node.dns.resolv_conf
                    ))
                }
            }
        };
        let ipv6 = node.host_ips.first().is_some_and(|ip| ip.contains(':'));
        let (dns_cfg, warnings) = dns::pod_dns(pod, &node.dns, host_resolv.as_deref(), ipv6);
        for w in warnings {
            log::info!("pod {}: {w}", format_pod(pod));
        }
        if let Some(w) = dns::loopback_resolver_warning(pod, &dns_cfg) {
            // Upstream's reason for a resolver it had to change or could not form.
            crate::record::event(pod, None, true, "DNSConfigForming", &w);
        }
        if let Some(text) = dns::render_resolv_conf(&dns_cfg) {
            let path = pod_dir.join("resolv.conf");
            if let Err(e) = write_if_changed(&path, &text, 0o644) {
                return config_error(format!("cannot write {}: {e}", path.display()));
            }
            mounts.push(Mount {
                host_path: path.display().to_string(),
                container_path: ETC_RESOLV_CONF.into(),
                read_only: false,
            });
        }
    }

    // The image's user, only when the security context needs it (upstream reads it
    // for every container; one inspect fewer per start here).
    let sc = effective_security_context(pod, c);
    let needs_user =
        sc.run_as_user.is_none() && (sc.run_as_non_root == Some(true) || sc.run_as_group.is_some());
    let image_user = if needs_user {
        let image = normalize_image(c.image.as_deref().unwrap_or_default());
        match runtime.inspect_image(&image) {
            Ok(Some(i)) => Some(i.user),
            Ok(None) => return config_error(format!("image {image:?} is not present")),
            Err(e) if e.is_unavailable() => return Err(e),
            Err(e) => return config_error(format!("failed to get image user: {e}")),
        }
    } else {
        None
    };

    let seccomp_profile = match seccomp_of(&spec.security_context, c) {
        Some((kind, file)) if kind == "Localhost" => {
            // The profile name is the pod's: it must stay inside <root>/seccomp.
            let path =
                match base::safepath::safe_join_relative(&node.root_dir.join("seccomp"), &file) {
                    Ok(p) => p,
                    Err(e) => return config_error(format!("failed to read seccomp profile: {e}")),
                };
            match std::fs::File::open(&path) {
                Ok(_) => Some(path.display().to_string()),
                Err(e) => {
                    return config_error(format!(
                        "failed to read seccomp profile {}: {e}",
                        path.display()
                    ))
                }
            }
        }
        _ => None,
    };

    let ctx = ContainerContext {
        node_name: cfg.node_name.clone(),
        sandbox_id: sandbox_id.to_string(),
        env,
        mounts,
        image_user,
        seccomp_profile,
    };
    Ok(
        generate_container_config(pod, c, s, &ctx).map_err(|message| Waiting {
            reason: CREATE_CONTAINER_CONFIG_ERROR.into(),
            message,
        }),
    )
}

/// Writes `text` to `path` unless it already holds exactly that: the file is
/// bind-mounted into running containers, which would see it empty for a moment.
fn write_if_changed(path: &Path, text: &str, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if std::fs::read_to_string(path).is_ok_and(|old| old == text) {
        return Ok(());
    }
    std::fs::write(path, text)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// The runtime config of an app or init container from the spec and its context, as
/// a pure function. Err is a `CreateContainerConfigError` message.
pub(crate) fn generate_container_config(
    pod: &Pod,
    c: &Container,
    s: &StartAction,
    ctx: &ContainerContext,
) -> Result<ContainerConfig, String> {
    let sc = effective_security_context(pod, c);
    verify_run_as_non_root(pod, c, &sc, ctx.image_user.as_deref())?;
    let (command, args) = env::expand_command_and_args(c, &ctx.env);
    Ok(ContainerConfig {
        metadata: ContainerMetadata {
            name: c.name.clone(),
            attempt: s.restart_count,
        },
        image: normalize_image(c.image.as_deref().unwrap_or_default()),
        command,
        args,
        working_dir: c.working_dir.clone().unwrap_or_default(),
        envs: ctx.env.clone(),
        mounts: ctx.mounts.clone(),
        labels: labels::container_labels(
            pod,
            &ctx.node_name,
            c,
            s.kind,
            s.restart_count,
            &ctx.sandbox_id,
        ),
        log_path: format!("{}/{}.log", c.name, s.restart_count),
        stdin: c.stdin.unwrap_or(false),
        stdin_once: c.stdin_once.unwrap_or(false),
        tty: c.tty.unwrap_or(false),
        linux: LinuxContainerConfig {
            resources: container_resources(c),
            security_context: security_context(pod, c, &sc, ctx)?,
        },
        // `lifecycle.stopSignal`; unset, the runtime uses the image's or SIGTERM.
        stop_signal: c
            .lifecycle
            .as_ref()
            .and_then(|l| l.stop_signal.clone())
            .unwrap_or_default(),
    })
}

/// The pod's namespaces (upstream `namespacesForPod`), for its sandbox and each of its
/// containers: the node's where the pod asks for them, else the pod's; the PID
/// namespace is each container's own unless the pod shares one.
fn pod_namespaces(pod: &Pod) -> NamespaceOption {
    let spec = pod.spec.as_ref();
    let node_or = |host: Option<bool>, otherwise: NamespaceMode| {
        if host == Some(true) {
            NamespaceMode::Node
        } else {
            otherwise
        }
    };
    NamespaceOption {
        network: node_or(spec.and_then(|s| s.host_network), NamespaceMode::Pod),
        ipc: node_or(spec.and_then(|s| s.host_ipc), NamespaceMode::Pod),
        pid: node_or(
            spec.and_then(|s| s.host_pid),
            if spec.and_then(|s| s.share_process_namespace) == Some(true) {
                NamespaceMode::Pod
            } else {
                NamespaceMode::Container
            },
        ),
    }
}

/// Upstream `MilliCPUToShares`: 1024 shares per CPU, at least 2, at most 262144.
pub(crate) fn milli_cpu_to_shares(milli_cpu: i128) -> i64 {
    if milli_cpu <= 0 {
        return MIN_SHARES;
    }
    let shares = milli_cpu.saturating_mul(i128::from(SHARES_PER_CPU)) / 1000;
    i64::try_from(shares.clamp(i128::from(MIN_SHARES), i128::from(MAX_SHARES)))
        .unwrap_or(MAX_SHARES)
}

/// Upstream `MilliCPUToQuota`: the CFS quota for a CPU limit over `period` µs; 0 (no
/// quota) without a limit; at least 1 ms.
pub(crate) fn milli_cpu_to_quota(milli_cpu: i128, period: i64) -> i64 {
    if milli_cpu <= 0 {
        return 0;
    }
    let quota = milli_cpu.saturating_mul(i128::from(period)) / 1000;
    i64::try_from(quota.max(i128::from(MIN_QUOTA))).unwrap_or(i64::MAX)
}

/// A container's cgroup settings (upstream `generateLinuxContainerResources`): CPU
/// shares from the request (or the limit when only that is set), a CFS quota from the
/// limit over a 100 ms period, and the memory limit.
pub(crate) fn container_resources(c: &Container) -> Resources {
    let requests = effective_requests(c);
    let limits = limits(c);
    let cpu_limit = limits.get("cpu").copied().unwrap_or(0);
    let memory = limits.get("memory").copied().unwrap_or(0);
    Resources {
        cpu_shares: milli_cpu_to_shares(requests.get("cpu").copied().unwrap_or(0)),
        cpu_quota: milli_cpu_to_quota(cpu_limit, QUOTA_PERIOD),
        cpu_period: QUOTA_PERIOD,
        // Quantities are in milli-units; bytes round up.
        memory_limit: i64::try_from(memory.saturating_add(999) / 1000).unwrap_or(i64::MAX),
    }
}

/// The security context that applies to a container: its own settings over the pod's
/// (upstream `DetermineEffectiveSecurityContext`).
pub(crate) fn effective_security_context(pod: &Pod, c: &Container) -> SecurityContext {
    let pod_sc: PodSecurityContext = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.clone())
        .unwrap_or_default();
    let mut sc = c.security_context.clone().unwrap_or_default();
    sc.run_as_user = sc.run_as_user.or(pod_sc.run_as_user);
    sc.run_as_group = sc.run_as_group.or(pod_sc.run_as_group);
    sc.run_as_non_root = sc.run_as_non_root.or(pod_sc.run_as_non_root);
    sc.se_linux_options = sc.se_linux_options.or(pod_sc.se_linux_options);
    sc.seccomp_profile = sc.seccomp_profile.or(pod_sc.seccomp_profile);
    sc.app_armor_profile = sc.app_armor_profile.or(pod_sc.app_armor_profile);
    sc
}

/// The user part of an image's `USER` (`1000:1000` → `1000`).
fn user_part(image_user: &str) -> &str {
    image_user.split(':').next().unwrap_or_default()
}

/// Upstream `verifyRunAsNonRoot`: with `runAsNonRoot`, refuse uid 0 and images whose
/// user is root, unset, or a name that cannot be checked.
pub(crate) fn verify_run_as_non_root(
    pod: &Pod,
    c: &Container,
    sc: &SecurityContext,
    image_user: Option<&str>,
) -> Result<(), String> {
    if sc.run_as_non_root != Some(true) {
        return Ok(());
    }
    let p = format_pod(pod);
    if let Some(uid) = sc.run_as_user {
        if uid == 0 {
            return Err(format!(
                "container's runAsUser breaks non-root policy (pod: {p:?}, container: {})",
                c.name
            ));
        }
        return Ok(());
    }
    let user = user_part(image_user.unwrap_or_default());
    match user.parse::<i64>() {
        // An image without a user runs as root.
        _ if user.is_empty() => Err(format!(
            "container has runAsNonRoot and image will run as root (pod: {p:?}, container: {})",
            c.name
        )),
        Ok(0) => Err(format!(
            "container has runAsNonRoot and image will run as root (pod: {p:?}, container: {})",
            c.name
        )),
        Ok(uid) if !(1..=i64::from(i32::MAX)).contains(&uid) => Err(format!(
            "container has runAsNonRoot and image has an invalid user id ({uid}). (Must be 1-({})): must be between 0 and 2147483647, inclusive (pod: {p:?}, container: {})",
            i32::MAX,
            c.name
        )),
        Ok(_) => Ok(()),
        Err(_) => Err(format!(
            "container has runAsNonRoot and image has non-numeric user ({user}), cannot verify user is non-root (pod: {p:?}, container: {})",
            c.name
        )),
    }
}

/// The pod's and container's seccomp profile type and localhost file, container first.
fn seccomp_of(pod_sc: &Option<PodSecurityContext>, c: &Container) -> Option<(String, String)> {
    c.security_context
        .as_ref()
        .and_then(|s| s.seccomp_profile.clone())
        .or_else(|| pod_sc.as_ref().and_then(|s| s.seccomp_profile.clone()))
        .map(|p| (p.type_, p.localhost_profile.unwrap_or_default()))
}

/// The security context as the runtime takes it (upstream
/// `convertToRuntimeSecurityContext` over the effective security context, the pod's
/// supplemental groups and fsGroup, and upstream's default seccomp profile).
pub fn security_context(
    pod: &Pod,
    c: &Container,
    sc: &SecurityContext,
    ctx: &ContainerContext,
) -> Result<LinuxContainerSecurityContext, String> {
    let pod_sc = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.clone())
        .unwrap_or_default();
    // A group alone applies to the image's user, as CRI runtimes do.
    let run_as_username = match (sc.run_as_user, sc.run_as_group) {
        (None, Some(_)) => match user_part(ctx.image_user.as_deref().unwrap_or_default()) {
            "" => "0".to_string(),
            u => u.to_string(),
        },
        _ => String::new(),
    };
    let mut supplemental_groups: Vec<i64> = Vec::new();
    for g in pod_sc
        .supplemental_groups
        .iter()
        .flatten()
        .chain(pod_sc.fs_group.iter())
    {
        if !supplemental_groups.contains(g) {
            supplemental_groups.push(*g);
        }
    }
    let caps = sc.capabilities.clone().unwrap_or_default();
    // Upstream's default (seccompDefault: false) is Unconfined.
    let seccomp = match sc.seccomp_profile.as_ref().map(|p| p.type_.as_str()) {
        None | Some("Unconfined") => SecurityProfile::Unconfined,
        Some("RuntimeDefault") => SecurityProfile::RuntimeDefault,
        Some("Localhost") => match &ctx.seccomp_profile {
            Some(path) => SecurityProfile::Localhost(path.clone()),
            None => {
                return Err(format!(
                    "container {}: localhost seccomp profile not read",
                    c.name
                ))
            }
        },
        Some(other) => return Err(format!("unknown seccomp profile type {other:?}")),
    };
    Ok(LinuxContainerSecurityContext {
        add_capabilities: caps.add.unwrap_or_default(),
        drop_capabilities: caps.drop.unwrap_or_default(),
        privileged: sc.privileged == Some(true),
        namespace_options: pod_namespaces(pod),
        run_as_user: sc.run_as_user,
        run_as_username,
        run_as_group: sc.run_as_group,
        supplemental_groups,
        readonly_rootfs: sc.read_only_root_filesystem == Some(true),
        no_new_privs: sc.allow_privilege_escalation == Some(false),
        seccomp,
    })
}

/// The runtime config of a pod's sandbox: it holds the pod's network and IPC
/// namespaces, its hostname, its host ports and the pod's sysctls (upstream
/// `generatePodSandboxConfig`). `cgroup_parent` is the pod's cgroup from the container
/// manager. Err is why the sandbox cannot be created.
pub fn sandbox_config(
    cfg: &ManagerConfig,
    pod: &Pod,
    attempt: u32,
    cgroup_parent: String,
) -> Result<PodSandboxConfig, String> {
    let meta = &pod.metadata;
    let spec = pod.spec.clone().unwrap_or_default();
    let (name, namespace, uid) = (
        meta.name.clone().unwrap_or_default(),
        meta.namespace.clone().unwrap_or_default(),
        meta.uid.clone().unwrap_or_default(),
    );
    let host_network = spec.host_network == Some(true);
    let hostname = if host_network {
        String::new()
    } else {
        let (h, d) = dns::hostname_and_domain(pod, &cfg.node.dns.cluster_domain)?;
        dns::kernel_hostname(&h, &d, spec.set_hostname_as_fqdn == Some(true))?
    };
    let log_directory = if cfg.logs.enabled() {
        let dir = super::logs::pod_log_dir_name(&namespace, &name, &uid);
        cfg.logs.pods_dir.join(dir).display().to_string()
    } else {
        String::new()
    };
    Ok(PodSandboxConfig {
        labels: labels::sandbox_labels(pod, &cfg.node_name),
        annotations: pod.metadata.annotations.clone().unwrap_or_default(),
        metadata: PodSandboxMetadata {
            name,
            uid,
            namespace,
            attempt,
        },
        hostname,
        log_directory,
        // Host ports only make sense on the sandbox's own network.
        port_mappings: if host_network {
            Vec::new()
        } else {
            host_ports(pod)
        },
        linux: LinuxPodSandboxConfig {
            cgroup_parent,
            security_context: LinuxSandboxSecurityContext {
                namespace_options: pod_namespaces(pod),
            },
            // Admitted, so each is safe or allowed; the containers join the sandbox's
            // network and IPC namespaces, so they see the values.
            sysctls: crate::sysctl::pod_sysctls(pod),
        },
    })
}

/// Every `hostPort` of the pod's app containers (dockershim `makePortsAndBindings`:
/// ports without a host port are not published).
pub(crate) fn host_ports(pod: &Pod) -> Vec<PortMapping> {
    let mut out: Vec<PortMapping> = Vec::new();
    for c in pod.spec.iter().flat_map(|s| s.containers.iter()) {
        for p in c.ports.iter().flatten() {
            let (Some(host), Ok(container)) = (
                p.host_port
                    .and_then(|h| u16::try_from(h).ok())
                    .filter(|h| *h != 0),
                u16::try_from(p.container_port),
            ) else {
                continue;
            };
            let b = PortMapping {
                container_port: container,
                host_port: host,
                host_ip: p.host_ip.clone().unwrap_or_default(),
                protocol: p.protocol.as_deref().unwrap_or("TCP").to_ascii_lowercase(),
            };
            if !out.contains(&b) {
                out.push(b);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Capabilities, ContainerPort, PodSpec, ResourceRequirements, SeccompProfile,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use runtime::container::labels::ContainerKind;

    #[test]
    fn cpu_shares_and_quota_follow_upstream_arithmetic() {
        for (milli, shares) in [
            (0, 2),
            (1, 2),
            (2, 2),
            (10, 10),
            (100, 102),
            (250, 256),
            (500, 512),
            (1000, 1024),
            (1500, 1536),
            (300_000, 262_144),
        ] {
            assert_eq!(milli_cpu_to_shares(milli), shares, "{milli}m");
        }
        for (milli, quota) in [
            (0, 0),
            (1, 1000),
            (5, 1000),
            (10, 1000),
            (250, 25_000),
            (1000, 100_000),
            (2500, 250_000),
        ] {
            assert_eq!(milli_cpu_to_quota(milli, QUOTA_PERIOD), quota, "{milli}m");
        }
    }

    /// A container with these resource limits and requests (shared with the tests of `env`).
    pub(super) fn res(limits: &[(&str, &str)], requests: &[(&str, &str)]) -> Container {
        let m = |kv: &[(&str, &str)]| {
            (!kv.is_empty()).then(|| {
                kv.iter()
                    .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                    .collect()
            })
        };
        Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                limits: m(limits),
                requests: m(requests),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn resources_map_requests_and_limits() {
        let r = container_resources(&res(
            &[("cpu", "500m"), ("memory", "64Mi")],
            &[("cpu", "250m")],
        ));
        assert_eq!(
            r,
            Resources {
                cpu_shares: 256,
                cpu_quota: 50_000,
                cpu_period: 100_000,
                memory_limit: 64 << 20,
            }
        );
        // Only a limit: the request defaults to it.
        let r = container_resources(&res(&[("cpu", "2")], &[]));
        assert_eq!((r.cpu_shares, r.cpu_quota), (2048, 200_000));
        // Nothing: minimum shares, no quota, no memory limit.
        let r = container_resources(&Container::default());
        assert_eq!((r.cpu_shares, r.cpu_quota, r.memory_limit), (2, 0, 0));
    }

    fn pod_with(spec: PodSpec) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some("p".into());
        p.metadata.namespace = Some("default".into());
        p.metadata.uid = Some("u1".into());
        p.spec = Some(spec);
        p
    }

    fn sc(f: impl FnOnce(&mut SecurityContext)) -> Option<SecurityContext> {
        let mut s = SecurityContext::default();
        f(&mut s);
        Some(s)
    }

    #[test]
    fn run_as_non_root_refusals() {
        let pod = pod_with(PodSpec::default());
        let c = |s: Option<SecurityContext>| Container {
            name: "app".into(),
            security_context: s,
            ..Default::default()
        };
        let check = |cont: &Container, image_user: Option<&str>| {
            let eff = effective_security_context(&pod, cont);
            verify_run_as_non_root(&pod, cont, &eff, image_user)
        };
        let nonroot = c(sc(|s| s.run_as_non_root = Some(true)));
        assert_eq!(check(&c(None), Some("")), Ok(()));
        assert_eq!(
            check(&nonroot, Some("")),
            Err("container has runAsNonRoot and image will run as root (pod: \"p_default(u1)\", container: app)".into())
        );
        assert_eq!(
            check(&nonroot, Some("0:0")),
            Err("container has runAsNonRoot and image will run as root (pod: \"p_default(u1)\", container: app)".into())
        );
        assert_eq!(check(&nonroot, Some("1000:1000")), Ok(()));
        assert_eq!(
            check(&nonroot, Some("nobody")),
            Err("container has runAsNonRoot and image has non-numeric user (nobody), cannot verify user is non-root (pod: \"p_default(u1)\", container: app)".into())
        );
        let root = c(sc(|s| {
            s.run_as_non_root = Some(true);
            s.run_as_user = Some(0);
        }));
        assert_eq!(
            check(&root, None),
            Err("container's runAsUser breaks non-root policy (pod: \"p_default(u1)\", container: app)".into())
        );
        let ok = c(sc(|s| {
            s.run_as_non_root = Some(true);
            s.run_as_user = Some(1000);
        }));
        assert_eq!(check(&ok, Some("")), Ok(()));
    }

    #[test]
    fn security_context_merges_the_pods_and_the_containers() {
        let pod = pod_with(PodSpec {
            security_context: Some(PodSecurityContext {
                run_as_user: Some(1000),
                fs_group: Some(2000),
                supplemental_groups: Some(vec![3000, 2000]),
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".into(),
                    localhost_profile: None,
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        let c = Container {
            name: "app".into(),
            security_context: sc(|s| {
                s.run_as_group = Some(50);
                s.read_only_root_filesystem = Some(true);
                s.allow_privilege_escalation = Some(false);
                s.capabilities = Some(Capabilities {
                    add: Some(vec!["NET_ADMIN".into()]),
                    drop: Some(vec!["ALL".into()]),
                });
            }),
            ..Default::default()
        };
        let eff = effective_security_context(&pod, &c);
        let s = security_context(&pod, &c, &eff, &ContainerContext::default()).expect("maps");
        assert_eq!(
            s,
            LinuxContainerSecurityContext {
                add_capabilities: vec!["NET_ADMIN".into()],
                drop_capabilities: vec!["ALL".into()],
                privileged: false,
                namespace_options: NamespaceOption {
                    network: NamespaceMode::Pod,
                    pid: NamespaceMode::Container,
                    ipc: NamespaceMode::Pod,
                },
                run_as_user: Some(1000),
                run_as_username: String::new(),
                run_as_group: Some(50),
                supplemental_groups: vec![3000, 2000],
                readonly_rootfs: true,
                no_new_privs: true,
                seccomp: SecurityProfile::RuntimeDefault,
            }
        );
        // No profile anywhere: unconfined, as upstream's default.
        let bare = pod_with(PodSpec::default());
        let c = Container::default();
        let eff = effective_security_context(&bare, &c);
        let s = security_context(&bare, &c, &eff, &ContainerContext::default()).expect("maps");
        assert_eq!(s.seccomp, SecurityProfile::Unconfined);
        assert_eq!((s.run_as_user, s.run_as_username.as_str()), (None, ""));
        // A group alone uses the image's user.
        let c = Container {
            security_context: sc(|s| s.run_as_group = Some(7)),
            ..Default::default()
        };
        let eff = effective_security_context(&bare, &c);
        let ctx = ContainerContext {
            image_user: Some("nobody:nogroup".into()),
            ..Default::default()
        };
        let s = security_context(&bare, &c, &eff, &ctx).expect("maps");
        assert_eq!(
            (s.run_as_username.as_str(), s.run_as_group),
            ("nobody", Some(7))
        );
        // The node's namespaces where the pod asks for them.
        let host = pod_with(PodSpec {
            host_network: Some(true),
            host_pid: Some(true),
            ..Default::default()
        });
        let eff = effective_security_context(&host, &c);
        let s = security_context(&host, &c, &eff, &ctx).expect("maps");
        assert_eq!(
            s.namespace_options,
            NamespaceOption {
                network: NamespaceMode::Node,
                pid: NamespaceMode::Node,
                ipc: NamespaceMode::Pod,
            }
        );
    }

    #[test]
    fn host_ports_are_published_once() {
        let port = |c: i32, h: Option<i32>, proto: Option<&str>| ContainerPort {
            container_port: c,
            host_port: h,
            protocol: proto.map(str::to_string),
            ..Default::default()
        };
        let pod = pod_with(PodSpec {
            containers: vec![Container {
                name: "web".into(),
                ports: Some(vec![
                    port(80, Some(8080), None),
                    port(81, None, None),
                    port(53, Some(5353), Some("UDP")),
                    port(80, Some(8080), Some("TCP")),
                ]),
                ..Default::default()
            }],
            ..Default::default()
        });
        let b = host_ports(&pod);
        assert_eq!(b.len(), 2, "{b:?}");
        assert_eq!(
            (b[0].container_port, b[0].host_port, b[0].protocol.as_str()),
            (80, 8080, "tcp")
        );
        assert_eq!(
            (b[1].container_port, b[1].host_port, b[1].protocol.as_str()),
            (53, 5353, "udp")
        );
    }

    #[test]
    fn generated_config_joins_the_sandbox_and_expands_commands() {
        let pod = pod_with(PodSpec {
            share_process_namespace: Some(true),
            ..Default::default()
        });
        let c = Container {
            name: "app".into(),
            image: Some("busybox".into()),
            command: Some(vec!["sh".into(), "-c".into(), "echo $(GREETING)".into()]),
            args: Some(vec![]),
            working_dir: Some("/w".into()),
            ..Default::default()
        };
        let s = StartAction {
            kind: ContainerKind::App,
            index: 0,
            name: "app".into(),
            restart_count: 3,
            backoff: None,
        };
        let ctx = ContainerContext {
            node_name: "n".into(),
            sandbox_id: "sb".into(),
            env: vec![("GREETING".into(), "hi".into())],
            ..Default::default()
        };
        let cfg = generate_container_config(&pod, &c, &s, &ctx).expect("config");
        assert_eq!(cfg.image, "busybox:latest");
        assert_eq!(
            cfg.command,
            Some(vec!["sh".into(), "-c".into(), "echo hi".into()])
        );
        assert_eq!(
            cfg.args, None,
            "an empty args list keeps the image's (none here)"
        );
        assert_eq!(cfg.envs, vec![("GREETING".to_string(), "hi".to_string())]);
        assert_eq!(cfg.working_dir, "/w");
        let ns = &cfg.linux.security_context.namespace_options;
        assert_eq!(
            (&ns.network, &ns.pid),
            (&NamespaceMode::Pod, &NamespaceMode::Pod)
        );
        assert_eq!(
            cfg.metadata,
            ContainerMetadata {
                name: "app".into(),
                attempt: 3
            }
        );
        assert_eq!(cfg.log_path, "app/3.log");
        assert_eq!(
            cfg.labels.get(labels::SANDBOX_ID).map(String::as_str),
            Some("sb")
        );
        assert_eq!(cfg.linux.resources.cpu_shares, MIN_SHARES);
    }
}
