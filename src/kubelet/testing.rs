//! A kubelet over a `FakeRuntime`, for the sync loop's and the syncer's unit tests:
//! the same [`Components`] `start` wires, without ports, source threads or the
//! `pleg`, `runtime-up` and `pod-worker-N` threads. The test steps each of those by
//! hand: it hands events to [`SyncLoop::handle_event`], relists the PLEG itself, and
//! runs the pod workers' queue on its own thread ([`Node::settle`]), so "nothing was
//! done" can be asserted without waiting. The prober's threads and the `pod-killer` run
//! as in the daemon (a kill is handed over and finishes on its own thread).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::Sender;
use k8s_openapi::api::core::v1::Pod;

use super::sync_loop::{Event, SyncLoop};
use super::syncer::SyncHandler;
use super::{Components, LoopInputs};
use crate::config::{KubeletConfig, Loaded};
use crate::container::labels;
use crate::loops::{shutdown_channel, Loops, Shutdown};
use crate::pleg::Pleg;
use crate::podconfig::manifest::{prepare, Origin};
use crate::podconfig::{PodConfig, Source, SourceUpdate};
use crate::runtime::fake::{FakeClock, FakeRuntime};
use crate::runtime::{ContainerDetails, ContainerState, Runtime};
use crate::testutil::TempDir;

/// The node's name.
pub(super) const NODE: &str = "node1";
/// The one app image the fake runtime holds.
pub(super) const IMAGE: &str = "busybox:1";
/// How long a test waits for work handed to another thread (the pod killer, the
/// prober) before it fails.
const DEADLINE: Duration = Duration::from_secs(10);

/// A clock 60 s behind the real one: the runtime manager's backoff reads the real
/// clock, so container times must be near it (see [`FakeClock::starting_at`]).
pub(super) fn clock() -> FakeClock {
    FakeClock::starting_at(SystemTime::now() - Duration::from_secs(60))
}

/// A runtime holding the app and pause images.
pub(super) fn runtime(clock: &FakeClock) -> Arc<FakeRuntime> {
    Arc::new(
        FakeRuntime::new(clock.clone())
            .with_image(IMAGE)
            .with_image(crate::config::defaults::POD_INFRA_CONTAINER_IMAGE),
    )
}

/// A static pod (defaulted and validated as the file source does) from a YAML flow
/// mapping of its spec, with a fixed UID.
pub(super) fn pod(name: &str, uid: &str, spec: &str) -> Pod {
    let yaml = format!("{{metadata: {{name: {name}, uid: {uid}}}, spec: {spec}}}");
    let pod: Pod = serde_yaml::from_str(&yaml).expect("pod yaml");
    prepare(
        pod,
        NODE,
        Origin::File(Path::new("/etc/kubernetes/manifests/p.yaml")),
    )
    .expect("valid pod")
}

/// A kubelet over a fake runtime.
pub(super) struct Node {
    pub(super) rt: Arc<FakeRuntime>,
    pub(super) sl: SyncLoop,
    pub(super) handler: Arc<SyncHandler>,
    pub(super) pleg: Pleg,
    pub(super) cfg: KubeletConfig,
    _up_tx: Sender<()>,
    shutdown: Option<(Shutdown, Loops)>,
    _dir: TempDir,
}

impl Node {
    /// A kubelet expecting snapshots from `sources`, over `rt`, with the runtime known
    /// to be up.
    pub(super) fn new(rt: &Arc<FakeRuntime>, sources: &[Source]) -> Node {
        let dir = TempDir::new("kubelet");
        let args = [
            "rkubelet".to_string(),
            format!("--hostname-override={NODE}"),
            format!("--root-dir={}", dir.0.display()),
        ];
        let cfg = match crate::config::load(args.to_vec()) {
            Ok(Loaded::Run(cfg)) => cfg,
            other => panic!("config: {other:?}"),
        };
        let (shutdown, stop) = shutdown_channel();
        let loops = Loops::new(stop);
        let runtime: Arc<dyn Runtime> = rt.clone();
        let (probe_tx, probe_rx) = crossbeam_channel::bounded(crate::prober::EVENT_CAPACITY);
        let parts = Components::new(&cfg, &runtime, &loops, probe_tx).expect("components");
        let handler = parts.syncer(&loops, &cfg).expect("syncer");
        let (pleg_tx, pleg_rx) = crossbeam_channel::bounded(crate::pleg::CHANNEL_CAPACITY);
        let pleg = Pleg::new(
            runtime.clone(),
            NODE,
            pleg_tx,
            parts.pleg_shared.clone(),
            None,
        );
        let (up_tx, up_rx) = crossbeam_channel::bounded(1);
        parts
            .runtime_health
            .tick(runtime.as_ref(), &up_tx)
            .expect("runtime up");
        let (_source_tx, source_rx) = crossbeam_channel::bounded::<SourceUpdate>(1);
        let sl = parts.sync_loop(
            PodConfig::new(sources),
            LoopInputs {
                sources: source_rx,
                pleg: pleg_rx,
                probes: probe_rx,
                runtime_up: up_rx,
            },
        );
        Node {
            rt: rt.clone(),
            sl,
            handler,
            pleg,
            cfg,
            _up_tx: up_tx,
            shutdown: Some((shutdown, loops)),
            _dir: dir,
        }
    }

    /// Hands the sync loop one event, then lets the pod workers finish.
    pub(super) fn handle(&mut self, e: Event) {
        self.sl.handle_event(e);
        self.settle();
    }

    /// A source's full snapshot.
    pub(super) fn snapshot(&mut self, source: Source, pods: Vec<Pod>) {
        self.handle(Event::Config(SourceUpdate { source, pods }));
    }

    /// One PLEG relist; its events go to the sync loop.
    pub(super) fn relist(&mut self) {
        self.pleg.relist().expect("relist");
        if let Ok(e) = self.sl.pleg_rx.try_recv() {
            self.handle(Event::Pleg(e));
        }
    }

    /// Runs the pod workers' queue on this thread until no pod has work left (kills
    /// handed to the pod killer finish on its thread; polled with a deadline).
    pub(super) fn settle(&self) {
        let until = Instant::now() + DEADLINE;
        loop {
            self.sl.workers.run_queued(self.handler.as_ref());
            if self.sl.workers.idle() {
                return;
            }
            assert!(Instant::now() < until, "pod work not done in {DEADLINE:?}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// The instances of container `name` of pod `uid`, newest first (the sandbox is
    /// `POD`).
    pub(super) fn instances(&self, uid: &str, name: &str) -> Vec<ContainerDetails> {
        let mut v: Vec<ContainerDetails> = self
            .rt
            .containers()
            .into_iter()
            .filter(|c| {
                c.labels.get(labels::POD_UID).map(String::as_str) == Some(uid)
                    && c.labels.get(labels::CONTAINER_NAME).map(String::as_str) == Some(name)
            })
            .collect();
        v.sort_by_key(|c| std::cmp::Reverse((c.created, labels::restart_count(&c.labels))));
        v
    }

    /// The running instance of container `name` of pod `uid`.
    pub(super) fn running(&self, uid: &str, name: &str) -> Option<ContainerDetails> {
        self.instances(uid, name)
            .into_iter()
            .find(|c| c.state == ContainerState::Running)
    }

    /// Every container of pod `uid`, any state.
    pub(super) fn containers_of(&self, uid: &str) -> Vec<ContainerDetails> {
        self.rt
            .containers()
            .into_iter()
            .filter(|c| c.labels.get(labels::POD_UID).map(String::as_str) == Some(uid))
            .collect()
    }

    /// The pod's phase in the status cache.
    pub(super) fn phase(&self, uid: &str) -> Option<String> {
        self.sl.statuses.get(uid).and_then(|s| s.phase.clone())
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some((shutdown, loops)) = self.shutdown.take() {
            shutdown.trigger();
            let left = loops.join_all(DEADLINE);
            if !std::thread::panicking() {
                assert!(left.is_empty(), "threads still running: {left:?}");
            }
        }
    }
}
