//! The runtime-neutral configs of [`runtime::config`] as Docker create requests, as
//! dockershim translated CRI's (`docker_sandbox.go` `makeSandboxDockerConfig`,
//! `docker_container.go` `CreateContainer`, `security_context.go`,
//! `helpers_linux.go`): Docker's names (`k8s_<container>_<pod>_<ns>_<uid>_<attempt>`),
//! namespace mode strings, binds, published ports, cgroup knobs, the user string and
//! the security options. Pure functions: no I/O here (a `Localhost` seccomp profile's
//! JSON is read by the caller and passed in).
//!
//! A sandbox is a pause container holding the pod's network and IPC namespaces; every
//! container of the pod joins both (`container:<sandbox>`), and its PID namespace when
//! the pod shares one. A pod on the node's network has a sandbox on `host`, which its
//! containers join all the same.

use std::collections::HashMap;

use bollard_stubs::models as api;

use runtime::config::{
    ContainerConfig, LinuxContainerSecurityContext, NamespaceMode, PodSandboxConfig,
    SecurityProfile,
};
use runtime::container::labels;

/// Rotation of the containers' json-file logs (upstream `containerLogMaxSize` and
/// `containerLogMaxFiles`: Docker's json-file `max-size` and `max-file`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogRotation {
    /// A file is rotated when it reaches this many bytes.
    pub max_size: u64,
    /// At most this many files are kept, the current one included.
    pub max_files: u32,
}

/// The Docker name of a pod's sandbox (dockershim `makeSandboxName`).
pub(crate) fn sandbox_name(cfg: &PodSandboxConfig) -> String {
    let m = &cfg.metadata;
    labels::sandbox_name(&m.name, &m.namespace, &m.uid, m.attempt)
}

/// The Docker name of a container (dockershim `makeContainerName`); a container made
/// outside any pod (a sandbox config without a pod name: tests, tools) is named as
/// its metadata says.
pub(crate) fn container_name(cfg: &ContainerConfig, sandbox: &PodSandboxConfig) -> String {
    let m = &sandbox.metadata;
    if m.name.is_empty() {
        return cfg.metadata.name.clone();
    }
    labels::container_name(
        &cfg.metadata.name,
        &m.name,
        &m.namespace,
        &m.uid,
        cfg.metadata.attempt,
    )
}

fn non_empty<T: Clone>(v: &[T]) -> Option<Vec<T>> {
    (!v.is_empty()).then(|| v.to_vec())
}

fn non_empty_str(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

fn non_zero(n: i64) -> Option<i64> {
    (n != 0).then_some(n)
}

/// "" (all addresses) is what Docker expects for "any"; 0.0.0.0 means the same.
fn host_ip(ip: &str) -> String {
    if ip == "0.0.0.0" {
        String::new()
    } else {
        ip.to_string()
    }
}

fn log_config(rotation: Option<LogRotation>) -> Option<api::HostConfigLogConfig> {
    rotation.map(|r| api::HostConfigLogConfig {
        typ: Some("json-file".into()),
        config: Some(HashMap::from([
            ("max-size".to_string(), r.max_size.to_string()),
            ("max-file".to_string(), r.max_files.to_string()),
        ])),
    })
}

/// The create request of a pod's sandbox running `image` (dockershim
/// `makeSandboxDockerConfig`): the pod's hostname, labels, published host ports and
/// sysctls, in the pod's cgroup; the node's network, PID or IPC namespace where the
/// pod asks for it, else a network on Docker's bridge (`none` when a network plugin
/// makes the pod's network, and maps its host ports) and an IPC namespace its
/// containers can join.
pub(crate) fn sandbox_body(
    cfg: &PodSandboxConfig,
    image: &str,
    plugin_network: bool,
) -> api::ContainerCreateBody {
    let ns = &cfg.linux.security_context.namespace_options;
    let host_network = ns.network == NamespaceMode::Node;
    let pod_network = if plugin_network { "none" } else { "default" };
    let mut port_bindings: HashMap<String, Option<Vec<api::PortBinding>>> = HashMap::new();
    let mut exposed: Vec<String> = Vec::new();
    // Published ports only make sense on the sandbox's own bridge network.
    for p in cfg
        .port_mappings
        .iter()
        .filter(|_| !host_network && !plugin_network)
    {
        let key = format!("{}/{}", p.container_port, p.protocol.to_ascii_lowercase());
        if !exposed.contains(&key) {
            exposed.push(key.clone());
        }
        port_bindings
            .entry(key)
            .or_default()
            .get_or_insert_with(Vec::new)
            .push(api::PortBinding {
                host_ip: Some(host_ip(&p.host_ip)),
                host_port: Some(p.host_port.to_string()),
            });
    }
    let node_or = |mode: &NamespaceMode, otherwise: Option<&str>| {
        if *mode == NamespaceMode::Node {
            Some("host".to_string())
        } else {
            otherwise.map(str::to_string)
        }
    };
    let host_config = api::HostConfig {
        // Every network namespace can be joined; "default" is the bridge.
        network_mode: node_or(&ns.network, Some(pod_network)),
        // Docker 20.10's default IPC mode is private, which others cannot join.
        ipc_mode: node_or(&ns.ipc, Some("shareable")),
        // A private PID namespace is Docker's default and has no name.
        pid_mode: node_or(&ns.pid, None),
        port_bindings: (!port_bindings.is_empty()).then_some(port_bindings),
        cgroup_parent: non_empty_str(&cfg.linux.cgroup_parent),
        privileged: Some(false),
        readonly_rootfs: Some(false),
        sysctls: (!cfg.linux.sysctls.is_empty())
            .then(|| cfg.linux.sysctls.clone().into_iter().collect()),
        ..Default::default()
    };
    api::ContainerCreateBody {
        image: Some(image.to_string()),
        labels: Some(cfg.labels.clone().into_iter().collect()),
        hostname: non_empty_str(&cfg.hostname),
        exposed_ports: non_empty(&exposed),
        open_stdin: Some(false),
        stdin_once: Some(false),
        tty: Some(false),
        host_config: Some(host_config),
        ..Default::default()
    }
}

/// Docker's `User`: the uid or user name, with `:gid` when a group is given
/// (dockershim `modifyContainerConfig`); "" for the image's.
fn user(sc: &LinuxContainerSecurityContext) -> String {
    let mut user = match sc.run_as_user {
        Some(uid) => uid.to_string(),
        None => sc.run_as_username.clone(),
    };
    if let Some(gid) = sc.run_as_group {
        user = format!("{user}:{gid}");
    }
    user
}

/// Docker's `SecurityOpt` (dockershim `getSecurityOpts`): `no-new-privileges`, then
/// the seccomp profile unless the container is privileged (Docker applies none to a
/// privileged container). `seccomp_json` is a `Localhost` profile's content.
fn security_opt(sc: &LinuxContainerSecurityContext, seccomp_json: Option<&str>) -> Vec<String> {
    let mut opts = Vec::new();
    if sc.no_new_privs {
        opts.push("no-new-privileges".to_string());
    }
    if !sc.privileged {
        match (&sc.seccomp, seccomp_json) {
            (SecurityProfile::Unconfined, _) => opts.push("seccomp=unconfined".to_string()),
            (SecurityProfile::RuntimeDefault, _) => {}
            (SecurityProfile::Localhost(_), Some(json)) => opts.push(format!("seccomp={json}")),
            // The caller reads the profile before it asks for the body.
            (SecurityProfile::Localhost(_), None) => {}
        }
    }
    opts
}

/// The create request of a container in the sandbox `sandbox_id` (dockershim
/// `CreateContainer`): it joins the sandbox's network and IPC namespaces (and its PID
/// namespace when the pod shares one), under the pod's cgroup.
pub(crate) fn container_body(
    sandbox_id: &str,
    cfg: &ContainerConfig,
    sandbox: &PodSandboxConfig,
    rotation: Option<LogRotation>,
    seccomp_json: Option<&str>,
) -> api::ContainerCreateBody {
    let sc = &cfg.linux.security_context;
    let joined = format!("container:{sandbox_id}");
    let binds: Vec<String> = cfg
        .mounts
        .iter()
        .map(|m| {
            let mut b = format!("{}:{}", m.host_path, m.container_path);
            if m.read_only {
                b.push_str(":ro");
            }
            b
        })
        .collect();
    let group_add: Vec<String> = sc
        .supplemental_groups
        .iter()
        .map(|g| g.to_string())
        .collect();
    let r = &cfg.linux.resources;
    // A container made outside any pod (no sandbox: tests, tools) keeps Docker's
    // namespaces.
    let in_pod = !sandbox_id.is_empty();
    let host_config = api::HostConfig {
        network_mode: in_pod.then(|| joined.clone()),
        ipc_mode: in_pod.then(|| joined.clone()),
        pid_mode: match sc.namespace_options.pid {
            NamespaceMode::Node => Some("host".to_string()),
            NamespaceMode::Pod => in_pod.then_some(joined),
            NamespaceMode::Container => None,
        },
        binds: non_empty(&binds),
        cpu_shares: non_zero(r.cpu_shares),
        cpu_quota: non_zero(r.cpu_quota),
        cpu_period: non_zero(r.cpu_period),
        memory: non_zero(r.memory_limit),
        cgroup_parent: non_empty_str(&sandbox.linux.cgroup_parent),
        group_add: non_empty(&group_add),
        privileged: Some(sc.privileged),
        cap_add: non_empty(&sc.add_capabilities),
        cap_drop: non_empty(&sc.drop_capabilities),
        readonly_rootfs: Some(sc.readonly_rootfs),
        security_opt: non_empty(&security_opt(sc, seccomp_json)),
        log_config: log_config(rotation),
        ..Default::default()
    };
    let env: Vec<String> = cfg.envs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    api::ContainerCreateBody {
        image: Some(cfg.image.clone()),
        // None keeps the image's; Some(vec![]) is sent as [] and clears it.
        entrypoint: cfg.command.clone(),
        cmd: cfg.args.clone(),
        env: non_empty(&env),
        working_dir: non_empty_str(&cfg.working_dir),
        labels: Some(cfg.labels.clone().into_iter().collect()),
        user: non_empty_str(&user(sc)),
        open_stdin: Some(cfg.stdin),
        stdin_once: Some(cfg.stdin_once),
        tty: Some(cfg.tty),
        stop_signal: non_empty_str(&cfg.stop_signal),
        host_config: Some(host_config),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use runtime::config::{
        ContainerMetadata, LinuxContainerConfig, LinuxPodSandboxConfig,
        LinuxSandboxSecurityContext, Mount, NamespaceOption, PodSandboxMetadata, PortMapping,
        Resources,
    };

    fn json<T: serde::Serialize>(body: T) -> serde_json::Value {
        serde_json::to_value(body).expect("serializes")
    }

    fn pod_sandbox() -> PodSandboxConfig {
        PodSandboxConfig {
            metadata: PodSandboxMetadata {
                name: "web".into(),
                uid: "u1".into(),
                namespace: "default".into(),
                attempt: 2,
            },
            linux: LinuxPodSandboxConfig {
                cgroup_parent: "/kubepods/podu1".into(),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn names_are_dockershims() {
        let sb = pod_sandbox();
        assert_eq!(sandbox_name(&sb), "k8s_POD_web_default_u1_2");
        let c = ContainerConfig {
            metadata: ContainerMetadata {
                name: "app".into(),
                attempt: 3,
            },
            ..Default::default()
        };
        assert_eq!(container_name(&c, &sb), "k8s_app_web_default_u1_3");
        assert_eq!(container_name(&c, &PodSandboxConfig::default()), "app");
    }

    #[test]
    fn a_container_leaves_image_defaults_unset_and_joins_its_sandbox() {
        let cfg = ContainerConfig {
            image: "rkubelet/busybox:1.35".into(),
            ..Default::default()
        };
        let v = json(container_body("sb", &cfg, &pod_sandbox(), None, None));
        assert_eq!(v["Image"], "rkubelet/busybox:1.35");
        for absent in [
            "Entrypoint",
            "Cmd",
            "Env",
            "WorkingDir",
            "User",
            "Hostname",
            "ExposedPorts",
        ] {
            assert!(v.get(absent).is_none(), "{absent} should be unset: {v}");
        }
        let hc = &v["HostConfig"];
        for absent in ["Binds", "PortBindings", "Memory", "Sysctls", "LogConfig"] {
            assert!(hc.get(absent).is_none(), "{absent} should be unset: {hc}");
        }
        assert_eq!(hc["NetworkMode"], "container:sb");
        assert_eq!(hc["IpcMode"], "container:sb");
        assert_eq!(
            hc["PidMode"], "container:sb",
            "CRI's default PID mode is the pod's"
        );
        assert_eq!(
            hc["CgroupParent"], "/kubepods/podu1",
            "the sandbox's cgroup"
        );
        assert_eq!(hc["SecurityOpt"], serde_json::json!(["seccomp=unconfined"]));
    }

    #[test]
    fn a_container_outside_any_pod_keeps_dockers_namespaces() {
        let cfg = ContainerConfig::named("tool", "busybox");
        let v = json(container_body(
            "",
            &cfg,
            &PodSandboxConfig::default(),
            None,
            None,
        ));
        let hc = &v["HostConfig"];
        for absent in ["NetworkMode", "IpcMode", "PidMode", "CgroupParent"] {
            assert!(hc.get(absent).is_none(), "{absent} should be unset: {hc}");
        }
    }

    #[test]
    fn a_container_sends_an_explicitly_empty_entrypoint() {
        let cfg = ContainerConfig {
            command: Some(vec![]),
            args: Some(vec!["sh".into(), "-c".into(), "true".into()]),
            ..Default::default()
        };
        let v = json(container_body("sb", &cfg, &pod_sandbox(), None, None));
        assert_eq!(v["Entrypoint"], serde_json::json!([]));
        assert_eq!(v["Cmd"], serde_json::json!(["sh", "-c", "true"]));
    }

    #[test]
    fn a_container_maps_mounts_resources_security_and_log_rotation() {
        let cfg = ContainerConfig {
            envs: vec![("A".into(), "1".into()), ("B".into(), "x=y".into())],
            mounts: vec![
                Mount {
                    host_path: "/h".into(),
                    container_path: "/c".into(),
                    read_only: true,
                },
                Mount {
                    host_path: "/h2".into(),
                    container_path: "/c2".into(),
                    read_only: false,
                },
            ],
            linux: LinuxContainerConfig {
                resources: Resources {
                    cpu_shares: 512,
                    cpu_quota: 50_000,
                    cpu_period: 100_000,
                    memory_limit: 64 << 20,
                },
                security_context: LinuxContainerSecurityContext {
                    add_capabilities: vec!["NET_ADMIN".into()],
                    drop_capabilities: vec!["ALL".into()],
                    namespace_options: NamespaceOption {
                        pid: NamespaceMode::Node,
                        ..Default::default()
                    },
                    run_as_user: Some(1000),
                    run_as_group: Some(1500),
                    supplemental_groups: vec![2000, 3000],
                    readonly_rootfs: true,
                    no_new_privs: true,
                    ..Default::default()
                },
            },
            stop_signal: "SIGINT".into(),
            ..Default::default()
        };
        let rotation = Some(LogRotation {
            max_size: 10 << 20,
            max_files: 5,
        });
        let v = json(container_body("sb", &cfg, &pod_sandbox(), rotation, None));
        let hc = &v["HostConfig"];
        assert_eq!(v["Env"], serde_json::json!(["A=1", "B=x=y"]));
        assert_eq!(hc["Binds"], serde_json::json!(["/h:/c:ro", "/h2:/c2"]));
        assert_eq!(hc["PidMode"], "host");
        assert_eq!(hc["CpuShares"], 512);
        assert_eq!(hc["CpuQuota"], 50_000);
        assert_eq!(hc["CpuPeriod"], 100_000);
        assert_eq!(hc["Memory"], 64 << 20);
        assert_eq!(hc["CapAdd"], serde_json::json!(["NET_ADMIN"]));
        assert_eq!(hc["CapDrop"], serde_json::json!(["ALL"]));
        assert_eq!(hc["GroupAdd"], serde_json::json!(["2000", "3000"]));
        assert_eq!(hc["ReadonlyRootfs"], true);
        assert_eq!(
            hc["SecurityOpt"],
            serde_json::json!(["no-new-privileges", "seccomp=unconfined"])
        );
        assert_eq!(v["User"], "1000:1500");
        assert_eq!(v["StopSignal"], "SIGINT");
        assert_eq!(hc["LogConfig"]["Type"], "json-file");
        assert_eq!(hc["LogConfig"]["Config"]["max-size"], "10485760");
        assert_eq!(hc["LogConfig"]["Config"]["max-file"], "5");
    }

    #[test]
    fn users_and_seccomp_profiles_are_spelled_as_dockershim_spells_them() {
        let sc = |f: &dyn Fn(&mut LinuxContainerSecurityContext)| {
            let mut sc = LinuxContainerSecurityContext::default();
            f(&mut sc);
            sc
        };
        assert_eq!(user(&sc(&|_| {})), "");
        assert_eq!(user(&sc(&|s| s.run_as_user = Some(7))), "7");
        assert_eq!(
            user(&sc(&|s| {
                s.run_as_username = "app".into();
                s.run_as_group = Some(9);
            })),
            "app:9"
        );
        let default = sc(&|s| s.seccomp = SecurityProfile::RuntimeDefault);
        assert!(security_opt(&default, None).is_empty());
        let local = sc(&|s| s.seccomp = SecurityProfile::Localhost("/p.json".into()));
        assert_eq!(
            security_opt(&local, Some("{\"defaultAction\":\"SCMP_ACT_ALLOW\"}")),
            ["seccomp={\"defaultAction\":\"SCMP_ACT_ALLOW\"}"]
        );
        let privileged = sc(&|s| {
            s.privileged = true;
            s.no_new_privs = true;
        });
        assert_eq!(security_opt(&privileged, None), ["no-new-privileges"]);
    }

    #[test]
    fn a_sandbox_holds_the_namespaces_ports_and_sysctls() {
        let mut sb = pod_sandbox();
        sb.hostname = "web".into();
        sb.labels = [("io.kubernetes.pod.name".into(), "web".into())].into();
        sb.port_mappings = vec![
            PortMapping {
                protocol: "TCP".into(),
                container_port: 80,
                host_port: 8080,
                host_ip: "0.0.0.0".into(),
            },
            PortMapping {
                protocol: "tcp".into(),
                container_port: 80,
                host_port: 8081,
                host_ip: "127.0.0.1".into(),
            },
        ];
        sb.linux.sysctls = [("kernel.shm_rmid_forced".into(), "1".into())].into();
        let v = json(sandbox_body(&sb, "rkubelet/pause:3.10", false));
        let hc = &v["HostConfig"];
        assert_eq!(v["Image"], "rkubelet/pause:3.10");
        assert_eq!(v["Hostname"], "web");
        assert_eq!(v["Labels"]["io.kubernetes.pod.name"], "web");
        assert_eq!(hc["NetworkMode"], "default");
        assert_eq!(hc["IpcMode"], "shareable");
        assert!(hc.get("PidMode").is_none(), "{hc}");
        assert_eq!(hc["CgroupParent"], "/kubepods/podu1");
        assert_eq!(
            hc["PortBindings"]["80/tcp"],
            serde_json::json!([
                {"HostIp": "", "HostPort": "8080"},
                {"HostIp": "127.0.0.1", "HostPort": "8081"}
            ])
        );
        assert_eq!(v["ExposedPorts"], serde_json::json!({"80/tcp": {}}));
        assert_eq!(hc["Sysctls"]["kernel.shm_rmid_forced"], "1");

        // A network plugin's pod: no network of Docker's, the plugin maps the ports.
        let v = json(sandbox_body(&sb, "pause", true));
        assert_eq!(v["HostConfig"]["NetworkMode"], "none");
        assert!(v["HostConfig"].get("PortBindings").is_none(), "{v}");
        assert!(v.get("ExposedPorts").is_none(), "{v}");

        sb.linux.security_context = LinuxSandboxSecurityContext {
            namespace_options: NamespaceOption {
                network: NamespaceMode::Node,
                pid: NamespaceMode::Node,
                ipc: NamespaceMode::Node,
            },
        };
        let v = json(sandbox_body(&sb, "pause", true));
        let hc = &v["HostConfig"];
        assert_eq!(hc["NetworkMode"], "host");
        assert_eq!(hc["IpcMode"], "host");
        assert_eq!(hc["PidMode"], "host");
        assert!(
            hc.get("PortBindings").is_none(),
            "no ports on the node's network"
        );
    }
}
