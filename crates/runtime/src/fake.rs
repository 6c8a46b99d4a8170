//! `FakeRuntime`: an in-memory [`Runtime`] for unit tests of the logic above the
//! runtime seam (the sync loop, the syncer, the pod killer, the prober loop). It keeps
//! containers and images in a map, reads time from an injected [`FakeClock`], records
//! every call, and lets a test script what Docker would do: a container that exits as
//! soon as it starts, one that ignores its stop signal (so that only SIGKILL ends it),
//! an error or a delay on the next calls of one operation.
//!
//! It is deliberately simple: no namespaces, no logs beyond what a test sets, and an
//! event stream only where a test scripts one ([`FakeRuntime::script_event_stream`]:
//! whether each connection opens, the events it delivers, where it is cut); an
//! unscripted stream never opens, so the PLEG keeps relisting every second. The Docker client itself is
//! tested against the real engine in `tests/it`; this fake is for logic only.
//!
//! Over 800 lines: one fake for the whole `Runtime` trait (interactive execs and
//! attaches on socket pairs included), its scripting knobs and its own tests.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::config::{ContainerConfig, NamespaceMode, PodSandboxConfig};
use crate::container::labels;
use crate::{
    ContainerDetails, ContainerState, ContainerSummary, EventFilter, EventItem, ExecResult,
    ExecSession, ImageDetails, LogOptions, LogStream, NetworkStatus, OutputKind, ProcessIo,
    RegistryAuth, Runtime, RuntimeError, RuntimeEvent, RuntimeInfo, RuntimeVersion, StreamOptions,
    StreamRequest, TermSize, SIGKILL,
};
use base::loops::lock;

/// The label that names a Kubernetes container (as `kuberuntime` writes it).
const CONTAINER_NAME_LABEL: &str = "io.kubernetes.container.name";

/// A wall clock the test moves by hand.
#[derive(Clone, Debug)]
pub struct FakeClock(Arc<Mutex<SystemTime>>);

impl Default for FakeClock {
    fn default() -> Self {
        // A fixed, recognisable start: 2026-01-01T00:00:00Z.
        FakeClock(Arc::new(Mutex::new(
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600),
        )))
    }
}

impl FakeClock {
    /// A clock that starts at `t`. Code above the seam that still reads the real
    /// clock (the runtime manager's restart backoff compares `finishedAt` with
    /// `SystemTime::now()`) needs a fake clock near the real time: a test starts it a
    /// little in the past and moves it toward now.
    pub fn starting_at(t: SystemTime) -> Self {
        FakeClock(Arc::new(Mutex::new(t)))
    }

    /// The current fake time.
    pub fn now(&self) -> SystemTime {
        *lock(&self.0)
    }

    /// Moves the clock forward.
    pub fn advance(&self, d: Duration) {
        let mut t = lock(&self.0);
        *t += d;
    }
}

/// The runtime's operations, for scripting faults and counting calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    /// `version`
    Version,
    /// `info`
    Info,
    /// `list_containers`
    List,
    /// `inspect_container`
    Inspect,
    /// `create_container`
    Create,
    /// `start_container`
    Start,
    /// A graceful stop: `stop_container`, or `kill_container` with any signal but
    /// SIGKILL (the stop signal a graceful stop begins with). Scripting a delay or a
    /// fault on `Stop` scripts it on stops however the kubelet carries them out.
    Stop,
    /// `kill_container` with SIGKILL: the end of a grace period.
    Kill,
    /// `remove_container`
    Remove,
    /// `inspect_image`
    InspectImage,
    /// `pull_image`
    Pull,
    /// `import_image`
    Import,
    /// `load_image`
    Load,
    /// `list_images`
    ListImages,
    /// `remove_image`
    RemoveImage,
    /// `logs`
    Logs,
    /// `exec`
    Exec,
    /// `exec_interactive`
    ExecInteractive,
    /// `exec_status`
    ExecStatus,
    /// `attach`
    Attach,
    /// `resize_exec` and `resize_container`
    Resize,
    /// `events`
    Events,
    /// `network_status`
    NetworkStatus,
}

/// One recorded call: the operation and what it was about (a container ID or name,
/// an image, or "").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    /// The operation.
    pub op: Op,
    /// Its subject.
    pub target: String,
}

/// One signal sent with `kill_container`, with the real time it was sent (the fake
/// clock does not move by itself; tests of grace periods measure real time).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signal {
    /// The container's ID.
    pub id: String,
    /// The signal as sent.
    pub signal: String,
    /// When the call was made.
    pub at: Instant,
}

/// An error a scripted fault answers with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The runtime cannot be reached.
    Unavailable,
    /// The call timed out.
    Timeout,
    /// The runtime answered with an error status and message.
    Api(u16, String),
}

impl Fault {
    fn error(&self, op: Op, target: &str) -> RuntimeError {
        let op = format!("{op:?} {target}");
        match self {
            Fault::Unavailable => RuntimeError::Unavailable {
                endpoint: "fake://".into(),
                source: std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
            },
            Fault::Timeout => RuntimeError::Timeout {
                op,
                after: Duration::from_secs(1),
            },
            Fault::Api(status, message) => RuntimeError::Api {
                op,
                status: *status,
                message: message.clone(),
            },
        }
    }
}

#[derive(Debug, Default)]
struct State {
    containers: BTreeMap<String, ContainerDetails>,
    /// The containers that get an address in the pod network when they start:
    /// sandboxes off the node's network, and containers a test made without a pod.
    pod_network: BTreeSet<String>,
    /// The image sandboxes run ([`FakeRuntime::with_sandbox_image`]); "" for one that
    /// need not be present.
    sandbox_image: String,
    images: BTreeMap<String, ImageDetails>,
    /// Images a pull can fetch.
    registry: BTreeSet<String>,
    /// Every import: the image, its changes and the tar's bytes as read.
    imports: Vec<(String, Vec<String>, Vec<u8>)>,
    next_id: u64,
    calls: Vec<Call>,
    /// Per operation: errors for its next calls, in order.
    faults: BTreeMap<Op, Vec<Fault>>,
    /// Per operation: how long each call blocks before it acts.
    delays: BTreeMap<Op, Duration>,
    /// Per operation: calls inside their delay now, and the most ever at once.
    in_flight: BTreeMap<Op, usize>,
    max_in_flight: BTreeMap<Op, usize>,
    /// Kubernetes container name → exit code it exits with as soon as it starts.
    exit_on_start: BTreeMap<String, i64>,
    /// Answers of `exec`, by container ID.
    exec_results: BTreeMap<String, ExecResult>,
    /// Kubernetes container names whose containers ignore every signal but SIGKILL.
    ignore_stop_signal: BTreeSet<String>,
    /// Every `kill_container` call, in order.
    signals: Vec<Signal>,
    /// The process side of every interactive exec and attach, by container ID, for
    /// the test to play the process.
    processes: Vec<(String, UnixStream)>,
    /// Interactive execs: exec ID → container ID.
    execs: BTreeMap<String, String>,
    /// Every resize, by exec or container ID.
    resizes: Vec<(String, TermSize)>,
    /// What `info` answers.
    info: RuntimeInfo,
    /// What `network_status` answers; None: ready.
    network: Option<NetworkStatus>,
    /// Each `update_runtime_config`'s pod CIDRs, in order.
    pod_cidrs: Vec<Vec<String>>,
    /// The outcomes of the next event-stream connections: true opens, false is
    /// refused. None left: the stream never opens (it waits for shutdown).
    event_opens: VecDeque<bool>,
    /// Events the open stream delivers next.
    event_queue: VecDeque<RuntimeEvent>,
    /// Set by [`FakeRuntime::cut_event_stream`]: the open stream ends with an error
    /// once it has delivered what is queued.
    event_cut: bool,
    /// The filter of every watch, in order.
    event_filters: Vec<EventFilter>,
    /// Each sandbox's `cgroup_parent`, by pod UID (the last one run).
    cgroup_parents: BTreeMap<String, String>,
}

/// The in-memory runtime.
#[derive(Debug, Default)]
pub struct FakeRuntime {
    state: Mutex<State>,
    clock: FakeClock,
}

impl FakeRuntime {
    /// Scripts the next connection of the event stream: it opens (true) or is refused
    /// with an unavailable error (false). Scripts queue up, one per connection.
    pub fn script_event_stream(&self, opens: bool) {
        lock(&self.state).event_opens.push_back(opens);
    }

    /// Queues an event for the open (or next opened) event stream.
    pub fn push_event(&self, event: RuntimeEvent) {
        lock(&self.state).event_queue.push_back(event);
    }

    /// Ends the open event stream with an error, as a Docker restart does, once it has
    /// delivered the events queued before.
    pub fn cut_event_stream(&self) {
        lock(&self.state).event_cut = true;
    }

    /// The filter of every event-stream connection so far, in order.
    pub fn event_filters(&self) -> Vec<EventFilter> {
        lock(&self.state).event_filters.clone()
    }

    /// Scripts what `info` answers (its cgroup driver).
    pub fn set_info(&self, info: RuntimeInfo) {
        lock(&self.state).info = info;
    }

    /// An empty runtime on `clock`.
    pub fn new(clock: FakeClock) -> Self {
        FakeRuntime {
            state: Mutex::default(),
            clock,
        }
    }

    /// Sandboxes run `image` (which must be present when they are run), as Docker's
    /// runs `--pod-infra-container-image`.
    pub fn with_sandbox_image(self, image: &str) -> Self {
        lock(&self.state).sandbox_image = image.to_string();
        self
    }

    /// Makes `image` present on the node.
    pub fn with_image(self, image: &str) -> Self {
        let id = format!("sha256:{:064x}", lock(&self.state).images.len() + 1);
        lock(&self.state)
            .images
            .insert(image.to_string(), image_details(image, &id));
        self
    }

    /// A fake runtime with one running busybox container named `name`; returns it and
    /// the container's ID.
    pub fn with_running_container(name: &str) -> (Arc<FakeRuntime>, String) {
        let rt = Arc::new(FakeRuntime::new(FakeClock::default()).with_image("busybox"));
        let id = rt
            .create_container(
                "",
                &ContainerConfig::named(name, "busybox"),
                &PodSandboxConfig::default(),
            )
            .expect("create");
        rt.start_container(&id).expect("start");
        (rt, id)
    }

    /// Makes `image` pullable (absent until pulled).
    pub fn with_pullable(self, image: &str) -> Self {
        lock(&self.state).registry.insert(image.to_string());
        self
    }

    /// Every image imported so far: its name, its changes and its tar.
    pub fn imports(&self) -> Vec<(String, Vec<String>, Vec<u8>)> {
        lock(&self.state).imports.clone()
    }

    /// The next `times` calls of `op` fail with `fault`.
    pub fn fail(&self, op: Op, times: usize, fault: Fault) {
        let mut st = lock(&self.state);
        let queue = st.faults.entry(op).or_default();
        queue.extend(std::iter::repeat_n(fault, times));
    }

    /// Every call of `op` blocks for `d` before it acts (a slow runtime).
    pub fn delay(&self, op: Op, d: Duration) {
        lock(&self.state).delays.insert(op, d);
    }

    /// Containers named `name` (the Kubernetes container name) exit with `code` as
    /// soon as they start.
    pub fn exit_on_start(&self, name: &str, code: i64) {
        lock(&self.state)
            .exit_on_start
            .insert(name.to_string(), code);
    }

    /// Containers named `name` (the Kubernetes container name) ignore their stop
    /// signal: a graceful stop ends only with SIGKILL, when the grace period is over.
    pub fn ignore_stop_signal(&self, name: &str) {
        lock(&self.state)
            .ignore_stop_signal
            .insert(name.to_string());
    }

    /// Container `id` was configured with stop signal `signal` (as an image's
    /// STOPSIGNAL or `lifecycle.stopSignal` configures it).
    pub fn set_stop_signal(&self, id: &str, signal: &str) {
        if let Some(c) = lock(&self.state).containers.get_mut(id) {
            c.stop_signal = signal.to_string();
        }
    }

    /// Every signal sent with `kill_container`, in order.
    pub fn signals(&self) -> Vec<Signal> {
        lock(&self.state).signals.clone()
    }

    /// What `network_status` answers from now on.
    pub fn set_network_status(&self, status: NetworkStatus) {
        lock(&self.state).network = Some(status);
    }

    /// The pod CIDRs of each `update_runtime_config`, in order.
    pub fn pod_cidr_updates(&self) -> Vec<Vec<String>> {
        lock(&self.state).pod_cidrs.clone()
    }

    /// What `exec` in container `id` answers.
    pub fn set_exec_result(&self, id: &str, result: ExecResult) {
        lock(&self.state)
            .exec_results
            .insert(id.to_string(), result);
    }

    /// The process side of the oldest interactive exec or attach in container `id`
    /// not taken yet: what the test writes there is the process's stdout, what it
    /// reads is its stdin (end of file once the input is closed), and dropping it
    /// ends the process.
    pub fn take_process(&self, id: &str) -> Option<UnixStream> {
        let mut st = lock(&self.state);
        let i = st.processes.iter().position(|(c, _)| c == id)?;
        Some(st.processes.remove(i).1)
    }

    /// Every resize so far: (exec or container ID, size).
    pub fn resizes(&self) -> Vec<(String, TermSize)> {
        lock(&self.state).resizes.clone()
    }

    /// Gives running container `id` the host PID `pid` (the fake makes one up at
    /// start), e.g. one no process has, so that whatever enters the PID's namespaces
    /// fails instead of entering a real process's.
    pub fn set_pid(&self, id: &str, pid: u32) {
        if let Some(c) = lock(&self.state).containers.get_mut(id) {
            c.pid = pid;
        }
    }

    /// A running container exits now with `code`.
    pub fn exit(&self, id: &str, code: i64) {
        let now = self.clock.now();
        if let Some(c) = lock(&self.state).containers.get_mut(id) {
            finish(c, code, now);
        }
    }

    /// An exited container is marked OOM-killed after the fact, as Docker does when
    /// containerd reports the OOM after the exit.
    pub fn mark_oom_killed(&self, id: &str) {
        if let Some(c) = lock(&self.state).containers.get_mut(id) {
            c.oom_killed = true;
        }
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        lock(&self.state).calls.clone()
    }

    /// How many calls of `op` were made.
    pub fn count(&self, op: Op) -> usize {
        lock(&self.state)
            .calls
            .iter()
            .filter(|c| c.op == op)
            .count()
    }

    /// The most calls of `op` that were ever inside their delay at once (how far the
    /// caller ran them in parallel).
    pub fn max_in_flight(&self, op: Op) -> usize {
        lock(&self.state)
            .max_in_flight
            .get(&op)
            .copied()
            .unwrap_or(0)
    }

    /// The `cgroup_parent` the last sandbox of pod `uid` was run with (the container
    /// manager's pod cgroup); None if none was run.
    pub fn cgroup_parent(&self, uid: &str) -> Option<String> {
        lock(&self.state).cgroup_parents.get(uid).cloned()
    }

    /// Every container, in detail.
    pub fn containers(&self) -> Vec<ContainerDetails> {
        lock(&self.state).containers.values().cloned().collect()
    }

    /// A socket pair for a process in running container `id`: one end for the
    /// caller, the other kept for [`FakeRuntime::take_process`].
    /// Creates a container named `name`; a leftover of the same name is replaced, as
    /// the Docker runtime replaces one.
    fn create(
        &self,
        name: &str,
        image: &str,
        container_labels: &BTreeMap<String, String>,
        host_network: bool,
        stop_signal: String,
    ) -> Result<String, RuntimeError> {
        self.enter(Op::Create, name)?;
        let now = self.clock.now();
        let mut st = lock(&self.state);
        st.containers.retain(|_, c| c.name != name);
        let image_id = match st.images.get(image) {
            Some(i) => i.id.clone(),
            None if image.is_empty() => String::new(),
            None => return Err(not_found(Op::Create, image)),
        };
        st.next_id += 1;
        let id = format!("{:064x}", st.next_id);
        let details = ContainerDetails {
            id: id.clone(),
            name: name.to_string(),
            labels: container_labels.clone(),
            state: ContainerState::Created,
            image: image.to_string(),
            image_id,
            created: now,
            started_at: None,
            finished_at: None,
            exit_code: 0,
            oom_killed: false,
            error: String::new(),
            pid: 0,
            ip_address: String::new(),
            additional_ips: Vec::new(),
            host_network,
            stop_signal,
            rootfs_dir: String::new(),
            log_path: String::new(),
        };
        st.containers.insert(id.clone(), details);
        Ok(id)
    }

    fn connect(&self, id: &str, op: Op) -> Result<Box<dyn ProcessIo>, RuntimeError> {
        let mut st = lock(&self.state);
        match st.containers.get(id) {
            Some(c) if c.state == ContainerState::Running => {}
            Some(_) => {
                return Err(RuntimeError::Conflict {
                    op: format!("{op:?} {id}"),
                    message: "container is not running".into(),
                })
            }
            None => return Err(not_found(op, id)),
        }
        let (ours, theirs) = UnixStream::pair().map_err(|source| RuntimeError::Unavailable {
            endpoint: "fake://".into(),
            source,
        })?;
        ours.set_nonblocking(true)
            .map_err(|source| RuntimeError::Unavailable {
                endpoint: "fake://".into(),
                source,
            })?;
        st.processes.push((id.to_string(), theirs));
        Ok(Box::new(FakeIo(ours)))
    }

    /// Records the call, waits out its delay (without the lock), then answers its
    /// scripted fault, if any.
    fn enter(&self, op: Op, target: &str) -> Result<(), RuntimeError> {
        let delay = {
            let mut st = lock(&self.state);
            st.calls.push(Call {
                op,
                target: target.to_string(),
            });
            let delay = st.delays.get(&op).copied();
            if delay.is_some() {
                let n = st.in_flight.entry(op).or_default();
                *n += 1;
                let n = *n;
                let max = st.max_in_flight.entry(op).or_default();
                *max = (*max).max(n);
            }
            delay
        };
        if let Some(d) = delay {
            // The fake's stand-in for a slow runtime call, not a wait for a condition.
            std::thread::sleep(d);
        }
        let mut st = lock(&self.state);
        if delay.is_some() {
            if let Some(n) = st.in_flight.get_mut(&op) {
                *n = n.saturating_sub(1);
            }
        }
        match st.faults.get_mut(&op) {
            Some(queue) if !queue.is_empty() => Err(queue.remove(0).error(op, target)),
            _ => Ok(()),
        }
    }
}

/// A fake process's streams: raw bytes on a socket pair, all output as stdout.
#[derive(Debug)]
struct FakeIo(UnixStream);

impl ProcessIo for FakeIo {
    fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    fn has_buffered(&self) -> bool {
        false
    }

    fn read_output(&mut self, emit: &mut dyn FnMut(OutputKind, &[u8])) -> io::Result<usize> {
        let mut buf = [0u8; 16 * 1024];
        let n = self.0.read(&mut buf)?;
        if n > 0 {
            emit(OutputKind::Stdout, &buf[..n]);
        }
        Ok(n)
    }

    fn write_input(&mut self, data: &[u8]) -> io::Result<usize> {
        self.0.write(data)
    }

    fn close_input(&mut self) -> io::Result<()> {
        self.0.shutdown(std::net::Shutdown::Write)
    }
}

fn image_details(reference: &str, id: &str) -> ImageDetails {
    ImageDetails {
        id: id.to_string(),
        repo_tags: vec![reference.to_string()],
        repo_digests: Vec::new(),
        size: 1 << 20,
        entrypoint: Vec::new(),
        cmd: vec!["/bin/sh".into()],
        user: String::new(),
        stop_signal: String::new(),
    }
}

fn finish(c: &mut ContainerDetails, code: i64, now: SystemTime) {
    if c.state == ContainerState::Running {
        c.state = ContainerState::Exited;
        c.exit_code = code;
        c.finished_at = Some(now);
        c.pid = 0;
        c.ip_address.clear();
    }
}

fn not_found(op: Op, target: &str) -> RuntimeError {
    RuntimeError::NotFound {
        op: format!("{op:?} {target}"),
        message: format!("No such object: {target}"),
    }
}

fn matches(labels: &BTreeMap<String, String>, filter: &[String]) -> bool {
    filter.iter().all(|f| match f.split_once('=') {
        Some((k, v)) => labels.get(k).is_some_and(|x| x == v),
        None => labels.contains_key(f.as_str()),
    })
}

impl Runtime for FakeRuntime {
    fn version(&self) -> Result<RuntimeVersion, RuntimeError> {
        self.enter(Op::Version, "")?;
        Ok(RuntimeVersion {
            runtime_name: "fake".into(),
            runtime_version: "0.0.0".into(),
            api_version: "1.41".into(),
        })
    }

    fn info(&self) -> Result<RuntimeInfo, RuntimeError> {
        self.enter(Op::Info, "")?;
        // By default no cgroup driver: the container manager builds no cgroups.
        Ok(lock(&self.state).info.clone())
    }

    fn list_containers(
        &self,
        label_filter: &[String],
    ) -> Result<Vec<ContainerSummary>, RuntimeError> {
        self.enter(Op::List, "")?;
        let st = lock(&self.state);
        Ok(st
            .containers
            .values()
            .filter(|c| matches(&c.labels, label_filter))
            .map(|c| ContainerSummary {
                id: c.id.clone(),
                name: c.name.clone(),
                labels: c.labels.clone(),
                state: c.state,
                image: c.image.clone(),
                image_id: c.image_id.clone(),
                created: c.created,
            })
            .collect())
    }

    fn inspect_container(&self, id: &str) -> Result<ContainerDetails, RuntimeError> {
        self.enter(Op::Inspect, id)?;
        lock(&self.state)
            .containers
            .get(id)
            .cloned()
            .ok_or_else(|| not_found(Op::Inspect, id))
    }

    fn run_pod_sandbox(&self, config: &PodSandboxConfig) -> Result<String, RuntimeError> {
        let m = &config.metadata;
        let name = labels::sandbox_name(&m.name, &m.namespace, &m.uid, m.attempt);
        let host_network =
            config.linux.security_context.namespace_options.network == NamespaceMode::Node;
        let sandbox_image = {
            let mut st = lock(&self.state);
            st.cgroup_parents
                .insert(m.uid.clone(), config.linux.cgroup_parent.clone());
            st.sandbox_image.clone()
        };
        let id = self.create(
            &name,
            &sandbox_image,
            &config.labels,
            host_network,
            String::new(),
        )?;
        if !host_network {
            lock(&self.state).pod_network.insert(id.clone());
        }
        self.start_container(&id)?;
        Ok(id)
    }

    fn create_container(
        &self,
        _pod_sandbox_id: &str,
        config: &ContainerConfig,
        sandbox_config: &PodSandboxConfig,
    ) -> Result<String, RuntimeError> {
        let m = &sandbox_config.metadata;
        // A container made by a test without a pod is named as it asked.
        let name = if m.name.is_empty() {
            config.metadata.name.clone()
        } else {
            labels::container_name(
                &config.metadata.name,
                &m.name,
                &m.namespace,
                &m.uid,
                config.metadata.attempt,
            )
        };
        let id = self.create(
            &name,
            &config.image,
            &config.labels,
            false,
            config.stop_signal.clone(),
        )?;
        if m.name.is_empty() {
            lock(&self.state).pod_network.insert(id.clone());
        }
        Ok(id)
    }

    fn start_container(&self, id: &str) -> Result<(), RuntimeError> {
        self.enter(Op::Start, id)?;
        let now = self.clock.now();
        let mut st = lock(&self.state);
        let exit_code = {
            let c = st
                .containers
                .get(id)
                .ok_or_else(|| not_found(Op::Start, id))?;
            c.labels
                .get(CONTAINER_NAME_LABEL)
                .and_then(|n| st.exit_on_start.get(n))
                .copied()
        };
        let n = st.next_id;
        let networked = st.pod_network.contains(id);
        let c = st
            .containers
            .get_mut(id)
            .ok_or_else(|| not_found(Op::Start, id))?;
        c.state = ContainerState::Running;
        c.started_at = Some(now);
        c.finished_at = None;
        c.pid = 1000 + u32::try_from(n % 60_000).unwrap_or(0);
        if networked {
            c.ip_address = format!("10.88.{}.{}", (n / 250) % 250, n % 250 + 2);
        }
        if let Some(code) = exit_code {
            finish(c, code, now);
        }
        Ok(())
    }

    fn stop_container(&self, id: &str, _grace: Duration) -> Result<(), RuntimeError> {
        self.enter(Op::Stop, id)?;
        let now = self.clock.now();
        if let Some(c) = lock(&self.state).containers.get_mut(id) {
            // As if the process honoured its stop signal.
            finish(c, 0, now);
        }
        Ok(())
    }

    fn kill_container(&self, id: &str, signal: &str) -> Result<(), RuntimeError> {
        let op = if signal == SIGKILL {
            Op::Kill
        } else {
            Op::Stop
        };
        lock(&self.state).signals.push(Signal {
            id: id.to_string(),
            signal: signal.to_string(),
            at: Instant::now(),
        });
        self.enter(op, id)?;
        let now = self.clock.now();
        let mut st = lock(&self.state);
        let ignores = st
            .containers
            .get(id)
            .and_then(|c| c.labels.get(CONTAINER_NAME_LABEL))
            .is_some_and(|n| st.ignore_stop_signal.contains(n));
        if let Some(c) = st.containers.get_mut(id) {
            if op == Op::Kill {
                // 128 + 9, as a shell reports a SIGKILLed process.
                finish(c, 137, now);
            } else if !ignores {
                // As if the process honoured its stop signal.
                finish(c, 0, now);
            }
        }
        // Stopped or gone is no error, as Docker's 409 "is not running" and 404.
        Ok(())
    }

    fn remove_container(&self, id: &str) -> Result<(), RuntimeError> {
        self.enter(Op::Remove, id)?;
        lock(&self.state).containers.remove(id);
        Ok(())
    }

    fn inspect_image(&self, image: &str) -> Result<Option<ImageDetails>, RuntimeError> {
        self.enter(Op::InspectImage, image)?;
        Ok(lock(&self.state).images.get(image).cloned())
    }

    fn pull_image(&self, image: &str, _auth: Option<&RegistryAuth>) -> Result<(), RuntimeError> {
        self.enter(Op::Pull, image)?;
        let mut st = lock(&self.state);
        if !st.registry.contains(image) {
            return Err(RuntimeError::Api {
                op: format!("pull {image}"),
                status: 404,
                message: format!("manifest for {image} not found"),
            });
        }
        let id = format!("sha256:{:064x}", st.images.len() + 1);
        st.images
            .insert(image.to_string(), image_details(image, &id));
        Ok(())
    }

    fn import_image(
        &self,
        image: &str,
        changes: &[String],
        (tar, len): (&mut dyn std::io::Read, u64),
    ) -> Result<(), RuntimeError> {
        self.enter(Op::Import, image)?;
        // Read outside the lock, as the engine reads the body.
        let mut bytes = Vec::new();
        let read = std::io::Read::read_to_end(&mut std::io::Read::take(tar, len), &mut bytes);
        if let Err(e) = read {
            return Err(RuntimeError::Api {
                op: format!("import {image}"),
                status: 500,
                message: e.to_string(),
            });
        }
        let mut st = lock(&self.state);
        let id = format!("sha256:{:064x}", st.images.len() + 1);
        st.images
            .insert(image.to_string(), image_details(image, &id));
        st.imports
            .push((image.to_string(), changes.to_vec(), bytes));
        Ok(())
    }

    /// A fake archive is the names of the images it holds, one per line (a real one's
    /// manifest names them); an archive that is not UTF-8 or names none is refused, as
    /// the engine refuses a broken one.
    fn load_image(
        &self,
        (tar, len): (&mut dyn std::io::Read, u64),
    ) -> Result<Vec<String>, RuntimeError> {
        self.enter(Op::Load, "")?;
        let mut bytes = Vec::new();
        let read = std::io::Read::read_to_end(&mut std::io::Read::take(tar, len), &mut bytes);
        let names: Vec<String> = read
            .ok()
            .and_then(|_| String::from_utf8(bytes).ok())
            .map(|t| {
                t.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default();
        if names.is_empty() {
            return Err(RuntimeError::Api {
                op: "load image archive".into(),
                status: 500,
                message: "archive/tar: invalid tar header".into(),
            });
        }
        let mut st = lock(&self.state);
        for name in &names {
            let id = format!("sha256:{:064x}", st.images.len() + 1);
            st.images.insert(name.clone(), image_details(name, &id));
        }
        Ok(names)
    }

    fn image_fs_usage(&self) -> Result<Option<crate::ImageFsUsage>, RuntimeError> {
        Ok(None)
    }

    fn list_images(&self) -> Result<Vec<ImageDetails>, RuntimeError> {
        self.enter(Op::ListImages, "")?;
        Ok(lock(&self.state).images.values().cloned().collect())
    }

    fn remove_image(&self, image: &str) -> Result<(), RuntimeError> {
        self.enter(Op::RemoveImage, image)?;
        let mut st = lock(&self.state);
        // By reference, or by ID (every reference of it, as Docker untags them).
        let before = st.images.len();
        st.images.retain(|r, i| r != image && i.id != image);
        if st.images.len() < before {
            Ok(())
        } else {
            Err(not_found(Op::RemoveImage, image))
        }
    }

    fn logs(&self, id: &str, _tail: Option<u64>) -> Result<Vec<u8>, RuntimeError> {
        self.enter(Op::Logs, id)?;
        if lock(&self.state).containers.contains_key(id) {
            Ok(Vec::new())
        } else {
            Err(not_found(Op::Logs, id))
        }
    }

    fn log_stream(
        &self,
        id: &str,
        _opts: &LogOptions,
        _wake: Duration,
    ) -> Result<LogStream, RuntimeError> {
        self.logs(id, None)
            .map(|bytes| Box::new(std::io::Cursor::new(bytes)) as LogStream)
    }

    /// The fake keeps no log files: reopening a known container's is a no-op (counted
    /// and scripted as [`Op::Logs`]).
    fn reopen_container_log(&self, id: &str) -> Result<(), RuntimeError> {
        self.logs(id, None).map(drop)
    }

    fn exec(
        &self,
        id: &str,
        _cmd: &[String],
        _timeout: Duration,
    ) -> Result<ExecResult, RuntimeError> {
        self.enter(Op::Exec, id)?;
        let st = lock(&self.state);
        match st.containers.get(id) {
            Some(c) if c.state == ContainerState::Running => {
                Ok(st.exec_results.get(id).cloned().unwrap_or(ExecResult {
                    exit_code: 0,
                    stdout: Vec::new(),
                    stderr: Vec::new(),
                }))
            }
            Some(_) => Err(RuntimeError::Conflict {
                op: format!("exec in {id}"),
                message: "container is not running".into(),
            }),
            None => Err(not_found(Op::Exec, id)),
        }
    }

    fn exec_interactive(
        &self,
        id: &str,
        _cmd: &[String],
        _opts: StreamOptions,
    ) -> Result<ExecSession, RuntimeError> {
        self.enter(Op::ExecInteractive, id)?;
        let io = self.connect(id, Op::ExecInteractive)?;
        let mut st = lock(&self.state);
        let exec_id = format!("exec-{}", st.execs.len() + 1);
        st.execs.insert(exec_id.clone(), id.to_string());
        Ok(ExecSession { exec_id, io })
    }

    fn exec_status(&self, exec_id: &str) -> Result<Option<i64>, RuntimeError> {
        self.enter(Op::ExecStatus, exec_id)?;
        let st = lock(&self.state);
        let Some(id) = st.execs.get(exec_id) else {
            return Err(not_found(Op::ExecStatus, exec_id));
        };
        Ok(Some(st.exec_results.get(id).map_or(0, |r| r.exit_code)))
    }

    fn resize_exec(&self, exec_id: &str, size: TermSize) -> Result<(), RuntimeError> {
        self.enter(Op::Resize, exec_id)?;
        lock(&self.state).resizes.push((exec_id.to_string(), size));
        Ok(())
    }

    fn attach(&self, id: &str, _opts: StreamOptions) -> Result<Box<dyn ProcessIo>, RuntimeError> {
        self.enter(Op::Attach, id)?;
        self.connect(id, Op::Attach)
    }

    fn resize_container(&self, id: &str, size: TermSize) -> Result<(), RuntimeError> {
        self.enter(Op::Resize, id)?;
        lock(&self.state).resizes.push((id.to_string(), size));
        Ok(())
    }

    fn stream_url(&self, _request: &StreamRequest) -> Result<Option<String>, RuntimeError> {
        // Sessions are served by the kubelet over `exec_interactive` and `attach`.
        Ok(None)
    }

    fn watch_events(
        &self,
        filter: &EventFilter,
        on_item: &mut dyn FnMut(EventItem) -> bool,
        should_stop: &dyn Fn() -> bool,
    ) -> Result<(), RuntimeError> {
        self.enter(Op::Events, "")?;
        let opens = {
            let mut st = lock(&self.state);
            st.event_filters.push(filter.clone());
            st.event_opens.pop_front()
        };
        let broken = |why: &str| RuntimeError::Unavailable {
            endpoint: "fake://".into(),
            source: io::Error::new(io::ErrorKind::UnexpectedEof, why.to_string()),
        };
        match opens {
            None => {
                // Unscripted: a stream that never opens; wait, as the real one does,
                // until told to stop.
                while !should_stop() {
                    std::thread::sleep(Duration::from_millis(20));
                }
                return Ok(());
            }
            Some(false) => return Err(broken("the fake refused the event stream")),
            Some(true) => {}
        }
        if !on_item(EventItem::Opened) {
            return Ok(());
        }
        loop {
            if should_stop() {
                return Ok(());
            }
            let next = {
                let mut st = lock(&self.state);
                match st.event_queue.pop_front() {
                    Some(e) => Some(e),
                    None if st.event_cut => {
                        st.event_cut = false;
                        return Err(broken("the fake cut the event stream"));
                    }
                    None => None,
                }
            };
            match next {
                Some(e) => {
                    if !on_item(EventItem::Event(e)) {
                        return Ok(());
                    }
                }
                // The fake's stand-in for a blocking read, not a wait in a test.
                None => std::thread::sleep(Duration::from_millis(2)),
            }
        }
    }

    fn network_status(&self) -> Result<NetworkStatus, RuntimeError> {
        self.enter(Op::NetworkStatus, "")?;
        Ok(lock(&self.state).network.clone().unwrap_or(NetworkStatus {
            ready: true,
            ..NetworkStatus::default()
        }))
    }

    fn update_runtime_config(&self, pod_cidrs: &[String]) -> Result<(), RuntimeError> {
        lock(&self.state).pod_cidrs.push(pod_cidrs.to_vec());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IMAGE: &str = "busybox:1";

    fn config(name: &str, k8s_name: &str) -> ContainerConfig {
        ContainerConfig {
            labels: [(CONTAINER_NAME_LABEL.to_string(), k8s_name.to_string())].into(),
            ..ContainerConfig::named(name, IMAGE)
        }
    }

    fn create(rt: &FakeRuntime, cfg: &ContainerConfig) -> Result<String, RuntimeError> {
        rt.create_container("", cfg, &PodSandboxConfig::default())
    }

    #[test]
    fn containers_live_and_die_on_the_fake_clock() {
        let clock = FakeClock::default();
        let rt = FakeRuntime::new(clock.clone()).with_image(IMAGE);
        let leftover = create(&rt, &config("k8s_a", "a")).expect("create");
        let id = create(&rt, &config("k8s_a", "a")).expect("a leftover is replaced");
        assert!(rt
            .inspect_container(&leftover)
            .is_err_and(|e| e.is_not_found()));
        clock.advance(Duration::from_secs(5));
        rt.start_container(&id).expect("start");
        let c = rt.inspect_container(&id).expect("inspect");
        assert_eq!(c.state, ContainerState::Running);
        assert_eq!(c.started_at, Some(clock.now()));
        clock.advance(Duration::from_secs(7));
        rt.exit(&id, 3);
        let c = rt.inspect_container(&id).expect("inspect");
        assert_eq!((c.state, c.exit_code), (ContainerState::Exited, 3));
        assert_eq!(c.finished_at, Some(clock.now()));
        let listed = rt
            .list_containers(&[format!("{CONTAINER_NAME_LABEL}=a")])
            .expect("list");
        assert_eq!(listed.len(), 1);
        assert!(rt
            .list_containers(&[format!("{CONTAINER_NAME_LABEL}=b")])
            .expect("list")
            .is_empty());
        rt.remove_container(&id).expect("remove");
        assert!(rt.inspect_container(&id).is_err_and(|e| e.is_not_found()));
    }

    #[test]
    fn scripted_exits_faults_and_pulls() {
        let rt = FakeRuntime::new(FakeClock::default())
            .with_image(IMAGE)
            .with_pullable("app:2");
        rt.exit_on_start("crasher", 1);
        let id = create(&rt, &config("k8s_c", "crasher")).expect("create");
        rt.start_container(&id).expect("start");
        assert_eq!(
            rt.inspect_container(&id).expect("inspect").state,
            ContainerState::Exited
        );

        rt.fail(Op::Start, 1, Fault::Unavailable);
        assert!(rt.start_container(&id).is_err_and(|e| e.is_unavailable()));
        rt.start_container(&id).expect("the fault was used up");

        assert!(rt.pull_image("nope:1", None).is_err());
        rt.pull_image("app:2", None).expect("pull");
        assert!(rt.inspect_image("app:2").expect("inspect").is_some());
        assert_eq!(rt.count(Op::Start), 3);
        assert_eq!(rt.count(Op::Pull), 2);
    }
}
