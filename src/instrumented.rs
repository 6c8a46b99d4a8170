//! A [`Runtime`] that counts and times every call of the one it wraps (upstream
//! `pkg/kubelet/kuberuntime/instrumented_services.go`): `kubelet_runtime_operations_total`,
//! `kubelet_runtime_operations_duration_seconds` and
//! `kubelet_runtime_operations_errors_total`, by `operation_type`.
//!
//! Operation names are CRI's where a call has a CRI counterpart (`list_containers`,
//! `container_status`, `create_container`, `exec_sync`, `image_status`, …), so
//! dashboards made for upstream read them; calls CRI has no name for keep their own
//! (`kill_container`, `logs`). The kubelet's wiring wraps the Docker client once, so
//! every caller (pod workers, pod killer, PLEG, prober, pullers, runtime-up) is counted.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::metrics::KubeletMetrics;
use runtime::config::{ContainerConfig, PodSandboxConfig};
use runtime::{
    ContainerDetails, ContainerSummary, EventFilter, EventItem, ExecResult, ExecSession,
    ImageDetails, LogOptions, LogStream, NetworkStatus, ProcessIo, RegistryAuth, Runtime,
    RuntimeError, RuntimeInfo, RuntimeVersion, StreamOptions, StreamRequest, TermSize,
};

/// The wrapper: every call goes to `inner`, and is recorded in `metrics`.
#[derive(Debug)]
pub(crate) struct InstrumentedRuntime {
    inner: Arc<dyn Runtime>,
    metrics: Arc<KubeletMetrics>,
}

impl InstrumentedRuntime {
    /// Wraps `inner`.
    pub(crate) fn new(inner: Arc<dyn Runtime>, metrics: Arc<KubeletMetrics>) -> Self {
        InstrumentedRuntime { inner, metrics }
    }

    /// Runs one call and records it: a count and the duration always, an error count
    /// when it failed (upstream `recordOperation` and `recordError`).
    fn record<T>(
        &self,
        operation: &'static str,
        call: impl FnOnce() -> Result<T, RuntimeError>,
    ) -> Result<T, RuntimeError> {
        let began = Instant::now();
        let r = call();
        let m = &self.metrics;
        m.runtime_operations.inc([operation]);
        m.runtime_operations_duration
            .observe([operation], began.elapsed().as_secs_f64());
        if r.is_err() {
            m.runtime_operations_errors.inc([operation]);
        }
        r
    }
}

impl Runtime for InstrumentedRuntime {
    fn version(&self) -> Result<RuntimeVersion, RuntimeError> {
        self.record("version", || self.inner.version())
    }

    fn info(&self) -> Result<RuntimeInfo, RuntimeError> {
        self.record("info", || self.inner.info())
    }

    fn list_containers(
        &self,
        label_filter: &[String],
    ) -> Result<Vec<ContainerSummary>, RuntimeError> {
        self.record("list_containers", || {
            self.inner.list_containers(label_filter)
        })
    }

    fn inspect_container(&self, id: &str) -> Result<ContainerDetails, RuntimeError> {
        self.record("container_status", || self.inner.inspect_container(id))
    }

    fn run_pod_sandbox(&self, config: &PodSandboxConfig) -> Result<String, RuntimeError> {
        self.record("run_podsandbox", || self.inner.run_pod_sandbox(config))
    }

    fn create_container(
        &self,
        pod_sandbox_id: &str,
        config: &ContainerConfig,
        sandbox_config: &PodSandboxConfig,
    ) -> Result<String, RuntimeError> {
        self.record("create_container", || {
            self.inner
                .create_container(pod_sandbox_id, config, sandbox_config)
        })
    }

    fn start_container(&self, id: &str) -> Result<(), RuntimeError> {
        self.record("start_container", || self.inner.start_container(id))
    }

    fn stop_container(&self, id: &str, grace: Duration) -> Result<(), RuntimeError> {
        self.record("stop_container", || self.inner.stop_container(id, grace))
    }

    fn kill_container(&self, id: &str, signal: &str) -> Result<(), RuntimeError> {
        self.record("kill_container", || self.inner.kill_container(id, signal))
    }

    fn remove_container(&self, id: &str) -> Result<(), RuntimeError> {
        self.record("remove_container", || self.inner.remove_container(id))
    }

    fn inspect_image(&self, image: &str) -> Result<Option<ImageDetails>, RuntimeError> {
        self.record("image_status", || self.inner.inspect_image(image))
    }

    fn pull_image(&self, image: &str, auth: Option<&RegistryAuth>) -> Result<(), RuntimeError> {
        self.record("pull_image", || self.inner.pull_image(image, auth))
    }

    fn import_image(
        &self,
        image: &str,
        changes: &[String],
        tar: (&mut dyn std::io::Read, u64),
    ) -> Result<(), RuntimeError> {
        self.record("import_image", || {
            self.inner.import_image(image, changes, tar)
        })
    }

    fn load_image(&self, tar: (&mut dyn std::io::Read, u64)) -> Result<Vec<String>, RuntimeError> {
        self.record("load_image", || self.inner.load_image(tar))
    }

    fn list_images(&self) -> Result<Vec<ImageDetails>, RuntimeError> {
        self.record("list_images", || self.inner.list_images())
    }

    fn image_fs_usage(&self) -> Result<Option<runtime::ImageFsUsage>, RuntimeError> {
        self.record("image_fs_info", || self.inner.image_fs_usage())
    }

    fn remove_image(&self, image: &str) -> Result<(), RuntimeError> {
        self.record("remove_image", || self.inner.remove_image(image))
    }

    fn logs(&self, id: &str, tail: Option<u64>) -> Result<Vec<u8>, RuntimeError> {
        self.record("logs", || self.inner.logs(id, tail))
    }

    fn log_stream(
        &self,
        id: &str,
        opts: &LogOptions,
        wake: Duration,
    ) -> Result<LogStream, RuntimeError> {
        // Counted and timed up to the stream's opening (CRI has no call of its own:
        // the kubelet reads the log file).
        self.record("log_stream", || self.inner.log_stream(id, opts, wake))
    }

    fn reopen_container_log(&self, id: &str) -> Result<(), RuntimeError> {
        self.record("reopen_container_log", || {
            self.inner.reopen_container_log(id)
        })
    }

    fn exec(
        &self,
        id: &str,
        cmd: &[String],
        timeout: Duration,
    ) -> Result<ExecResult, RuntimeError> {
        self.record("exec_sync", || self.inner.exec(id, cmd, timeout))
    }

    fn exec_interactive(
        &self,
        id: &str,
        cmd: &[String],
        opts: StreamOptions,
    ) -> Result<ExecSession, RuntimeError> {
        // CRI's `Exec` (the streaming one): counted up to the start.
        self.record("exec", || self.inner.exec_interactive(id, cmd, opts))
    }

    fn exec_status(&self, exec_id: &str) -> Result<Option<i64>, RuntimeError> {
        self.record("exec_status", || self.inner.exec_status(exec_id))
    }

    fn resize_exec(&self, exec_id: &str, size: TermSize) -> Result<(), RuntimeError> {
        self.record("resize_exec", || self.inner.resize_exec(exec_id, size))
    }

    fn attach(&self, id: &str, opts: StreamOptions) -> Result<Box<dyn ProcessIo>, RuntimeError> {
        // CRI's `Attach`: counted up to the connection.
        self.record("attach", || self.inner.attach(id, opts))
    }

    fn resize_container(&self, id: &str, size: TermSize) -> Result<(), RuntimeError> {
        self.record("resize_container", || self.inner.resize_container(id, size))
    }

    fn stream_url(&self, request: &StreamRequest) -> Result<Option<String>, RuntimeError> {
        // CRI's `Exec`, `Attach`, `PortForward`: the request for a URL, not the session.
        let operation = match request {
            StreamRequest::Exec { .. } => "exec",
            StreamRequest::Attach { .. } => "attach",
            StreamRequest::PortForward { .. } => "port_forward",
        };
        self.record(operation, || self.inner.stream_url(request))
    }

    fn watch_events(
        &self,
        filter: &EventFilter,
        on_item: &mut dyn FnMut(EventItem) -> bool,
        should_stop: &dyn Fn() -> bool,
    ) -> Result<(), RuntimeError> {
        // Recorded when the stream ends, as upstream's `get_container_events`.
        self.record("get_container_events", || {
            self.inner.watch_events(filter, on_item, should_stop)
        })
    }

    fn network_status(&self) -> Result<NetworkStatus, RuntimeError> {
        // CRI's `Status` call, upstream's operation name.
        self.record("status", || self.inner.network_status())
    }

    fn update_runtime_config(&self, pod_cidrs: &[String]) -> Result<(), RuntimeError> {
        self.record("update_runtime_config", || {
            self.inner.update_runtime_config(pod_cidrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use runtime::fake::{FakeClock, FakeRuntime, Fault, Op};

    #[test]
    fn calls_are_counted_timed_and_failures_counted_by_cri_name() {
        let fake = Arc::new(FakeRuntime::new(FakeClock::starting_at(
            std::time::SystemTime::now(),
        )));
        let m = Arc::new(KubeletMetrics::default());
        let rt = InstrumentedRuntime::new(fake.clone(), m.clone());
        rt.version().expect("version");
        rt.list_containers(&[]).expect("list");
        rt.list_containers(&[]).expect("list");
        fake.fail(Op::List, 1, Fault::Api(500, "boom".into()));
        assert!(rt.list_containers(&[]).is_err());
        assert!(rt.inspect_container("nope").is_err(), "not found");
        assert_eq!(m.runtime_operations.get(["list_containers"]), 3);
        assert_eq!(m.runtime_operations_errors.get(["list_containers"]), 1);
        assert_eq!(m.runtime_operations.get(["version"]), 1);
        assert_eq!(m.runtime_operations_errors.get(["version"]), 0);
        assert_eq!(m.runtime_operations_errors.get(["container_status"]), 1);
        assert_eq!(m.runtime_operations_duration.count(["list_containers"]), 3);
    }
}
