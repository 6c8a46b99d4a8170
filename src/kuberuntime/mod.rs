//! The kubelet's runtime manager (upstream `pkg/kubelet/kuberuntime`): reads a pod's
//! containers from the runtime, decides what to start and kill, and does it.
pub mod labels;
