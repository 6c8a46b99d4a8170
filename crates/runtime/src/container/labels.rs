//! Docker container names and labels, as the upstream kubelet's Docker integration
//! (dockershim) wrote them, so that `docker ps` on an rkubelet node reads like one on a
//! dockershim node and tools that match on these labels keep working.
//!
//! Names: `k8s_POD_<pod>_<ns>_<uid>_<attempt>` for sandboxes and
//! `k8s_<container>_<pod>_<ns>_<uid>_<restartCount>` for containers
//! (`pkg/kubelet/dockershim/naming.go`). Labels: `io.kubernetes.*` as in
//! `pkg/kubelet/kuberuntime/labels.go`; CRI annotations carried as Docker labels with the
//! `annotation.` prefix, as dockershim stored them. Everything the kubelet needs after a
//! restart (pod identity, container name, restart count, spec hash, grace period) is
//! here, so a restarted kubelet adopts its containers (DESIGN.md rule 7).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};

/// Label: the pod's name.
pub const POD_NAME: &str = "io.kubernetes.pod.name";
/// Label: the pod's namespace.
pub const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
/// Label: the pod's UID; the filter of every list call.
pub const POD_UID: &str = "io.kubernetes.pod.uid";
/// Label: the container's name in the pod spec (`POD` for the sandbox).
pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";
/// Label (dockershim): `podsandbox` or `container`.
pub const DOCKER_TYPE: &str = "io.kubernetes.docker.type";
/// Label (dockershim): the sandbox a container belongs to.
pub const SANDBOX_ID: &str = "io.kubernetes.sandbox.id";
/// Annotation-label: the container spec hash, base 16.
pub(crate) const CONTAINER_HASH: &str = "annotation.io.kubernetes.container.hash";
/// Annotation-label: the container's restart count, decimal.
pub const RESTART_COUNT: &str = "annotation.io.kubernetes.container.restartCount";
/// Annotation-label: the container's kind: `init` or `container`.
pub const CONTAINER_TYPE: &str = "annotation.io.kubernetes.container.type";
/// Annotation-label: the pod's termination grace period in seconds.
pub const TERMINATION_GRACE: &str = "annotation.io.kubernetes.pod.terminationGracePeriod";
/// Annotation-label: terminationMessagePath.
pub const TERMINATION_MESSAGE_PATH: &str =
    "annotation.io.kubernetes.container.terminationMessagePath";
/// Annotation-label: terminationMessagePolicy.
pub const TERMINATION_MESSAGE_POLICY: &str =
    "annotation.io.kubernetes.container.terminationMessagePolicy";
/// Annotation-label: the container's preStop handler as JSON, so an orphan (a pod no
/// source knows any more) is still stopped with its hook, as upstream's
/// `restoreSpecsFromContainerLabels`.
pub(crate) const PRE_STOP_HANDLER: &str = "annotation.io.kubernetes.container.preStopHandler";
/// Label rkubelet adds to every container it creates, so a list can find them all,
/// and to keep apart several rkubelets (tests run many) on one Docker engine.
pub const MANAGED_BY_NODE: &str = "io.rkubelet.node";

/// `io.kubernetes.docker.type` of a sandbox.
pub const TYPE_SANDBOX: &str = "podsandbox";
/// `io.kubernetes.docker.type` of a container.
pub const TYPE_CONTAINER: &str = "container";
/// The container name dockershim gave the sandbox.
pub const SANDBOX_CONTAINER_NAME: &str = "POD";

/// The Docker name of a pod's sandbox.
pub fn sandbox_name(pod_name: &str, namespace: &str, uid: &str, attempt: u32) -> String {
    format!("k8s_{SANDBOX_CONTAINER_NAME}_{pod_name}_{namespace}_{uid}_{attempt}")
}

/// The Docker name of an app or init container.
pub fn container_name(
    container: &str,
    pod_name: &str,
    namespace: &str,
    uid: &str,
    restart_count: u32,
) -> String {
    format!("k8s_{container}_{pod_name}_{namespace}_{uid}_{restart_count}")
}

/// The parts of a Docker name written by [`container_name`] or [`sandbox_name`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedName {
    /// Container name (`POD` for a sandbox).
    pub container: String,
    /// Pod name.
    pub pod: String,
    /// Namespace.
    pub namespace: String,
    /// Pod UID.
    pub uid: String,
    /// Attempt / restart count.
    pub attempt: u32,
}

/// Parses a Docker container name (with or without the leading `/`). Names not
/// starting with `k8s_` are not managed by a kubelet. Like upstream, a random suffix
/// (a 7th field, added after a name conflict) is tolerated.
pub fn parse_name(name: &str) -> Option<ParsedName> {
    let name = name.strip_prefix('/').unwrap_or(name);
    let parts: Vec<&str> = name.split('_').collect();
    if parts.first() != Some(&"k8s") || !(parts.len() == 6 || parts.len() == 7) {
        return None;
    }
    Some(ParsedName {
        container: parts[1].to_string(),
        pod: parts[2].to_string(),
        namespace: parts[3].to_string(),
        uid: parts[4].to_string(),
        attempt: parts[5].parse().ok()?,
    })
}

/// The labels on a pod's sandbox: the kubelet labels, the pod's own labels, and the
/// pod's annotations as `annotation.`-prefixed labels (as dockershim stored them).
pub fn sandbox_labels(pod: &Pod, node: &str) -> BTreeMap<String, String> {
    let meta = &pod.metadata;
    let mut l = BTreeMap::new();
    for (k, v) in meta.labels.iter().flatten() {
        l.insert(k.clone(), v.clone());
    }
    for (k, v) in meta.annotations.iter().flatten() {
        l.insert(format!("annotation.{k}"), v.clone());
    }
    l.insert(POD_NAME.into(), meta.name.clone().unwrap_or_default());
    l.insert(
        POD_NAMESPACE.into(),
        meta.namespace.clone().unwrap_or_default(),
    );
    l.insert(POD_UID.into(), meta.uid.clone().unwrap_or_default());
    l.insert(CONTAINER_NAME.into(), SANDBOX_CONTAINER_NAME.into());
    l.insert(DOCKER_TYPE.into(), TYPE_SANDBOX.into());
    l.insert(MANAGED_BY_NODE.into(), node.into());
    l.insert(
        TERMINATION_GRACE.into(),
        grace_period_seconds(pod).to_string(),
    );
    l
}

/// Whether a container is an init container or an app container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContainerKind {
    /// `spec.initContainers[*]`.
    Init,
    /// `spec.containers[*]`.
    App,
}

/// The labels on an app or init container.
pub fn container_labels(
    pod: &Pod,
    node: &str,
    c: &Container,
    kind: ContainerKind,
    restart_count: u32,
    sandbox_id: &str,
) -> BTreeMap<String, String> {
    let meta = &pod.metadata;
    let mut l = BTreeMap::new();
    l.insert(POD_NAME.into(), meta.name.clone().unwrap_or_default());
    l.insert(
        POD_NAMESPACE.into(),
        meta.namespace.clone().unwrap_or_default(),
    );
    l.insert(POD_UID.into(), meta.uid.clone().unwrap_or_default());
    l.insert(CONTAINER_NAME.into(), c.name.clone());
    l.insert(DOCKER_TYPE.into(), TYPE_CONTAINER.into());
    l.insert(SANDBOX_ID.into(), sandbox_id.into());
    l.insert(MANAGED_BY_NODE.into(), node.into());
    l.insert(CONTAINER_HASH.into(), format!("{:x}", container_hash(c)));
    l.insert(RESTART_COUNT.into(), restart_count.to_string());
    l.insert(
        CONTAINER_TYPE.into(),
        match kind {
            ContainerKind::Init => "init",
            ContainerKind::App => "container",
        }
        .into(),
    );
    l.insert(
        TERMINATION_GRACE.into(),
        grace_period_seconds(pod).to_string(),
    );
    l.insert(
        TERMINATION_MESSAGE_PATH.into(),
        c.termination_message_path
            .clone()
            .unwrap_or_else(|| "/dev/termination-log".into()),
    );
    l.insert(
        TERMINATION_MESSAGE_POLICY.into(),
        c.termination_message_policy
            .clone()
            .unwrap_or_else(|| "File".into()),
    );
    if let Some(pre_stop) = c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref()) {
        // Serializing a k8s-openapi struct cannot fail; a missing label only loses the
        // hook for an orphan, which upstream also tolerates.
        if let Ok(json) = serde_json::to_string(pre_stop) {
            l.insert(PRE_STOP_HANDLER.into(), json);
        }
    }
    l
}

/// The preStop handler a container label carries (None when absent or unreadable).
pub fn pre_stop_label(
    labels: &BTreeMap<String, String>,
) -> Option<k8s_openapi::api::core::v1::LifecycleHandler> {
    labels
        .get(PRE_STOP_HANDLER)
        .and_then(|v| serde_json::from_str(v).ok())
}

/// True for a restartable init container ("sidecar": `restartPolicy: Always` inside
/// `initContainers`, upstream `IsRestartableInitContainer`).
pub fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// The grace period a container label carries (30 s when missing, the API default).
pub fn grace_label(labels: &BTreeMap<String, String>) -> i64 {
    labels
        .get(TERMINATION_GRACE)
        .and_then(|v| v.parse().ok())
        .unwrap_or(30)
}

/// The pod's termination grace period: the spec's, else the API default of 30 s.
pub fn grace_period_seconds(pod: &Pod) -> i64 {
    pod.spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(30)
        .max(0)
}

/// The restart count a container label carries (0 when missing or unparsable, as upstream).
pub fn restart_count(labels: &BTreeMap<String, String>) -> u32 {
    labels
        .get(RESTART_COUNT)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The spec hash a container label carries (0 when missing).
pub fn hash_label(labels: &BTreeMap<String, String>) -> u64 {
    labels
        .get(CONTAINER_HASH)
        .and_then(|v| u64::from_str_radix(v, 16).ok())
        .unwrap_or(0)
}

/// A stable 64-bit hash of a container spec: FNV-1a over its canonical JSON. A change to
/// any field of the container changes it, and the container is replaced; the same spec
/// hashes the same in every kubelet run (no random seed), so restarts adopt.
pub fn container_hash(c: &Container) -> u64 {
    // Serializing a k8s-openapi struct is deterministic: fields in declaration order,
    // maps are BTreeMaps. It cannot fail (no non-string map keys), but if it ever did,
    // hashing the name alone is a safe fallback: it only loses change detection.
    let bytes = serde_json::to_vec(c).unwrap_or_else(|_| c.name.clone().into_bytes());
    fnv1a64(&bytes)
}

/// FNV-1a, 64 bit.
pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let n = container_name("app", "web-node1", "default", "abc", 3);
        assert_eq!(n, "k8s_app_web-node1_default_abc_3");
        let p = parse_name(&format!("/{n}")).expect("parses");
        assert_eq!(p.container, "app");
        assert_eq!(p.pod, "web-node1");
        assert_eq!(p.namespace, "default");
        assert_eq!(p.uid, "abc");
        assert_eq!(p.attempt, 3);
        let s = sandbox_name("web-node1", "default", "abc", 0);
        assert_eq!(s, "k8s_POD_web-node1_default_abc_0");
        assert_eq!(parse_name(&s).expect("parses").container, "POD");
    }

    #[test]
    fn foreign_names_are_not_parsed() {
        assert_eq!(parse_name("nginx"), None);
        assert_eq!(parse_name("k8s_a_b"), None);
        assert_eq!(parse_name("k8s_a_b_c_d_notanumber"), None);
        assert!(parse_name("k8s_a_b_c_d_1_deadbeef").is_some());
    }

    #[test]
    fn hash_changes_with_the_spec_and_only_then() {
        let a = Container {
            name: "app".into(),
            image: Some("busybox:1".into()),
            ..Default::default()
        };
        let mut b = a.clone();
        assert_eq!(container_hash(&a), container_hash(&b));
        b.image = Some("busybox:2".into());
        assert_ne!(container_hash(&a), container_hash(&b));
    }

    #[test]
    fn labels_carry_restart_count_and_hash() {
        let pod = Pod::default();
        let c = Container {
            name: "app".into(),
            ..Default::default()
        };
        let l = container_labels(&pod, "n1", &c, ContainerKind::App, 4, "sb");
        assert_eq!(restart_count(&l), 4);
        assert_eq!(hash_label(&l), container_hash(&c));
        assert_eq!(l.get(SANDBOX_ID).map(String::as_str), Some("sb"));
        assert_eq!(restart_count(&BTreeMap::new()), 0);
        assert!(pre_stop_label(&l).is_none());
    }

    #[test]
    fn pre_stop_survives_in_a_label() {
        let c: Container = serde_json::from_value(serde_json::json!({
            "name": "app",
            "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", "sleep 1"]}}}
        }))
        .expect("container");
        let l = container_labels(&Pod::default(), "n1", &c, ContainerKind::App, 0, "sb");
        let h = pre_stop_label(&l).expect("hook");
        assert_eq!(
            h.exec.and_then(|e| e.command),
            Some(vec!["sh".into(), "-c".into(), "sleep 1".into()])
        );
        assert_eq!(grace_label(&l), 30);
    }
}
