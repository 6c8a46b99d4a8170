//! The runtime configuration of an app or init container: the pod spec's container
//! mapped onto [`ContainerConfig`] (upstream `generateContainerConfig` and dockershim's
//! mapping to Docker's create call).

use k8s_openapi::api::core::v1::{Container, Pod};

use super::actions::StartAction;
use super::labels;
use crate::images::normalize_image;
use crate::runtime::{ContainerConfig, NamespaceMode};

/// The runtime config of an app or init container.
pub fn container_config(
    pod: &Pod,
    c: &Container,
    s: &StartAction,
    sandbox_id: &str,
    node: &str,
) -> ContainerConfig {
    let meta = &pod.metadata;
    let env = c
        .env
        .iter()
        .flatten()
        .filter_map(|e| {
            e.value
                .as_ref()
                .map(|v| format!("{}={}", e.name, v))
                .or_else(|| {
                    // valueFrom sources come with the container-spec work; plain values only now.
                    e.value_from.as_ref().map(|_| format!("{}=", e.name))
                })
        })
        .collect();
    let joined = NamespaceMode::Container(sandbox_id.to_string());
    ContainerConfig {
        name: labels::container_name(
            &c.name,
            meta.name.as_deref().unwrap_or_default(),
            meta.namespace.as_deref().unwrap_or_default(),
            meta.uid.as_deref().unwrap_or_default(),
            s.restart_count,
        ),
        image: normalize_image(c.image.as_deref().unwrap_or_default()),
        entrypoint: c.command.clone().filter(|v| !v.is_empty()),
        cmd: c.args.clone().filter(|v| !v.is_empty()),
        env,
        working_dir: c.working_dir.clone().unwrap_or_default(),
        labels: labels::container_labels(pod, node, c, s.kind, s.restart_count, sandbox_id),
        network: Some(joined.clone()),
        ipc: Some(joined),
        stdin: c.stdin.unwrap_or(false),
        stdin_once: c.stdin_once.unwrap_or(false),
        tty: c.tty.unwrap_or(false),
        ..Default::default()
    }
}

/// The runtime config of a pod's sandbox (pause) container: it holds the pod's network
/// and IPC namespaces (upstream dockershim `makeSandboxDockerConfig`).
pub fn sandbox_config(pod: &Pod, attempt: u32, image: &str, node: &str) -> ContainerConfig {
    let meta = &pod.metadata;
    let spec = pod.spec.clone().unwrap_or_default();
    let pod_name = meta.name.clone().unwrap_or_default();
    let host_network = spec.host_network == Some(true);
    ContainerConfig {
        name: labels::sandbox_name(
            &pod_name,
            meta.namespace.as_deref().unwrap_or_default(),
            meta.uid.as_deref().unwrap_or_default(),
            attempt,
        ),
        image: image.to_string(),
        labels: labels::sandbox_labels(pod, node),
        // Upstream sets the pod name as the hostname (at most 63 characters).
        hostname: if host_network {
            String::new()
        } else {
            spec.hostname
                .clone()
                .unwrap_or_else(|| pod_name.chars().take(63).collect())
        },
        network: Some(if host_network {
            NamespaceMode::Host
        } else {
            NamespaceMode::Private
        }),
        ipc: Some(if spec.host_ipc == Some(true) {
            NamespaceMode::Host
        } else {
            NamespaceMode::Shareable
        }),
        pid: spec.host_pid.filter(|h| *h).map(|_| NamespaceMode::Host),
        ..Default::default()
    }
}
