//! The CRI client against a real containerd (Debian's, with its CRI plugin): each test
//! starts a containerd of its own (root, state, socket, CNI configuration and bridge
//! under a temp dir of its own), imports the repo's offline images into it, and
//! tears everything down afterwards, even when it fails ([`Containerd`]'s `Drop`, in
//! `common/`, shared with `runtime.rs`).
//!
//! Needs root, `containerd` and `ctr` (apt: containerd), the CNI plugins in
//! `/usr/lib/cni` (apt: containernetworking-plugins), Docker with the images of
//! `make images`; without them the tests fail and say what is missing.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::{client, loops, wait_for, Containerd, BUSYBOX};
use grpc::Code;
use rkubelet_cri::client::CriClient;
use rkubelet_cri::v1;

#[test]
fn version_names_containerd_and_cri_v1() {
    let c = Containerd::start();
    let (cri, _s) = client(&c);
    let v = cri
        .version(&v1::VersionRequest {
            version: "v1".into(),
        })
        .expect("Version");
    assert_eq!(v.runtime_name, "containerd");
    assert_eq!(v.runtime_api_version, "v1");
    assert!(v.runtime_version.starts_with("1.6"), "{v:?}");
}

#[test]
fn status_reports_runtime_and_network_ready() {
    let c = Containerd::start();
    let (cri, _s) = client(&c);
    let status = cri
        .status(&v1::StatusRequest { verbose: false })
        .expect("Status")
        .status
        .expect("a RuntimeStatus");
    let ready = |t: &str| status.conditions.iter().any(|c| c.r#type == t && c.status);
    assert!(ready("RuntimeReady"), "{status:?}");
    // The CNI configuration is read shortly after start.
    let network_ready = ready("NetworkReady")
        || wait_for(Duration::from_secs(20), "NetworkReady", || {
            let s = cri
                .status(&v1::StatusRequest { verbose: false })
                .ok()?
                .status?;
            s.conditions
                .iter()
                .any(|c| c.r#type == "NetworkReady" && c.status)
                .then_some(true)
        });
    assert!(network_ready);
}

fn sandbox_config(name: &str, dir: &Path) -> v1::PodSandboxConfig {
    v1::PodSandboxConfig {
        metadata: Some(v1::PodSandboxMetadata {
            name: name.into(),
            uid: format!("{name}-uid"),
            namespace: "default".into(),
            attempt: 0,
        }),
        hostname: name.into(),
        log_directory: dir.join("logs").to_string_lossy().into_owned(),
        labels: [("app".to_string(), name.to_string())].into(),
        linux: Some(v1::LinuxPodSandboxConfig::default()),
        ..Default::default()
    }
}

#[test]
fn a_sandbox_and_its_container_live_and_go() {
    let c = Containerd::start();
    let (cri, _s) = client(&c);
    let config = sandbox_config("life", &c.dir);
    let sandbox = cri
        .run_pod_sandbox(&v1::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        })
        .expect("RunPodSandbox")
        .pod_sandbox_id;
    let status = cri
        .pod_sandbox_status(&v1::PodSandboxStatusRequest {
            pod_sandbox_id: sandbox.clone(),
            verbose: false,
        })
        .expect("PodSandboxStatus")
        .status
        .expect("a status");
    assert_eq!(status.state, v1::PodSandboxState::SandboxReady as i32);
    assert_eq!(status.labels.get("app").map(String::as_str), Some("life"));
    let ip = status.network.map(|n| n.ip).unwrap_or_default();
    assert!(
        ip.starts_with("10."),
        "a pod address from the test's bridge: {ip:?}"
    );

    let container = cri
        .create_container(&v1::CreateContainerRequest {
            pod_sandbox_id: sandbox.clone(),
            config: Some(v1::ContainerConfig {
                metadata: Some(v1::ContainerMetadata {
                    name: "sleeper".into(),
                    attempt: 0,
                }),
                image: Some(v1::ImageSpec {
                    image: format!("docker.io/{BUSYBOX}"),
                    ..Default::default()
                }),
                command: vec!["sleep".into(), "3600".into()],
                log_path: "sleeper/0.log".into(),
                linux: Some(v1::LinuxContainerConfig::default()),
                ..Default::default()
            }),
            sandbox_config: Some(config),
        })
        .expect("CreateContainer")
        .container_id;
    cri.start_container(&v1::StartContainerRequest {
        container_id: container.clone(),
    })
    .expect("StartContainer");
    let state = cri
        .container_status(&v1::ContainerStatusRequest {
            container_id: container.clone(),
            verbose: false,
        })
        .expect("ContainerStatus")
        .status
        .expect("a status")
        .state;
    assert_eq!(state, v1::ContainerState::ContainerRunning as i32);
    let exec = cri
        .exec_sync(&v1::ExecSyncRequest {
            container_id: container.clone(),
            cmd: vec!["echo".into(), "hi".into()],
            timeout: 10,
        })
        .expect("ExecSync");
    assert_eq!((exec.stdout.as_slice(), exec.exit_code), (&b"hi\n"[..], 0));
    assert!(
        c.dir.join("logs/sleeper/0.log").exists(),
        "the container's CRI log file"
    );

    cri.stop_container(&v1::StopContainerRequest {
        container_id: container.clone(),
        timeout: 1,
    })
    .expect("StopContainer");
    cri.remove_container(&v1::RemoveContainerRequest {
        container_id: container,
    })
    .expect("RemoveContainer");
    cri.stop_pod_sandbox(&v1::StopPodSandboxRequest {
        pod_sandbox_id: sandbox.clone(),
    })
    .expect("StopPodSandbox");
    cri.remove_pod_sandbox(&v1::RemovePodSandboxRequest {
        pod_sandbox_id: sandbox,
    })
    .expect("RemovePodSandbox");
    let left = cri
        .list_containers(&v1::ListContainersRequest::default())
        .expect("ListContainers");
    assert!(left.containers.is_empty(), "{left:?}");
    let sandboxes = cri
        .list_pod_sandbox(&v1::ListPodSandboxRequest::default())
        .expect("ListPodSandbox");
    assert!(sandboxes.items.is_empty(), "{sandboxes:?}");
}

#[test]
fn images_are_listed_and_inspected() {
    let c = Containerd::start();
    let (cri, _s) = client(&c);
    let images = cri
        .list_images(&v1::ListImagesRequest::default())
        .expect("ListImages");
    let busybox = format!("docker.io/{BUSYBOX}");
    assert!(
        images.images.iter().any(|i| i.repo_tags.contains(&busybox)),
        "{images:?}"
    );
    let status = cri
        .image_status(&v1::ImageStatusRequest {
            image: Some(v1::ImageSpec {
                image: busybox,
                ..Default::default()
            }),
            verbose: false,
        })
        .expect("ImageStatus");
    assert!(status.image.is_some_and(|i| i.size > 0));
    let fs = cri
        .image_fs_info(&v1::ImageFsInfoRequest {})
        .expect("ImageFsInfo");
    assert!(!fs.image_filesystems.is_empty());
    cri.update_runtime_config(&v1::UpdateRuntimeConfigRequest {
        runtime_config: Some(v1::RuntimeConfig {
            network_config: Some(v1::NetworkConfig {
                pod_cidr: "10.250.0.0/24".into(),
            }),
        }),
    })
    .expect("UpdateRuntimeConfig");
}

#[test]
fn sixteen_threads_call_on_one_channel() {
    let c = Containerd::start();
    let (cri, _s) = client(&c);
    let cri = Arc::new(cri);
    let threads: Vec<_> = (0..16)
        .map(|i| {
            let cri = cri.clone();
            base::testutil::spawn_named("caller", move || {
                for _ in 0..25 {
                    if i % 2 == 0 {
                        let v = cri
                            .version(&v1::VersionRequest {
                                version: "v1".into(),
                            })
                            .expect("Version");
                        assert_eq!(v.runtime_name, "containerd");
                    } else {
                        cri.list_images(&v1::ListImagesRequest::default())
                            .expect("ListImages");
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a caller failed");
    }
    // All on one connection: the daemon's socket has one connected peer besides
    // its listener (/proc/net/unix names the path on the daemon's side).
    let table = std::fs::read_to_string("/proc/net/unix").expect("/proc/net/unix");
    let sock = c.sock.to_string_lossy().into_owned();
    let connected = table
        .lines()
        .filter(|l| l.ends_with(&format!(" {sock}")))
        .filter(|l| l.split_whitespace().nth(5) == Some("03"))
        .count();
    assert_eq!(connected, 1, "connections to {sock}:\n{table}");
}

#[test]
fn a_one_millisecond_deadline_is_exceeded() {
    let c = Containerd::start();
    let (_shutdown, loops) = loops();
    let cri = CriClient::new(&c.endpoint(), Duration::from_millis(1), &loops).expect("client");
    // A sandbox takes the runtime far longer than 1 ms (a shim, a namespace, CNI).
    let e = cri
        .run_pod_sandbox(&v1::RunPodSandboxRequest {
            config: Some(sandbox_config("late", &c.dir)),
            runtime_handler: String::new(),
        })
        .expect_err("1 ms is too short");
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e}");
}

#[test]
fn a_restarted_containerd_is_reconnected_to() {
    let mut c = Containerd::start();
    let (cri, _s) = client(&c);
    let version = v1::VersionRequest {
        version: "v1".into(),
    };
    cri.version(&version).expect("before");
    c.stop_daemon("-KILL");
    let e = cri.version(&version).expect_err("no daemon");
    assert_eq!(e.code(), Code::Unavailable, "{e}");
    c.run_daemon();
    let v = cri
        .version(&version)
        .expect("the same client, after the restart");
    assert_eq!(v.runtime_name, "containerd");
}

#[test]
fn container_events_are_unimplemented_on_1_6() {
    let c = Containerd::start();
    let (cri, _s) = client(&c);
    let mut events = cri.get_container_events().expect("the call starts");
    let first = events.next().expect("an item");
    let e = first.expect_err("containerd 1.6 has no GetContainerEvents");
    assert_eq!(e.code(), Code::Unimplemented, "{e}");
    assert!(events.next().is_none());
}
