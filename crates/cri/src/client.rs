//! `CriClient`: the CRI v1 runtime and image services (upstream
//! `k8s.io/cri-client` `remoteRuntimeService` and `remoteImageService`) as typed,
//! blocking calls over one `grpc::Channel`: each takes its request message and returns
//! its reply, within the client's request timeout (`--runtime-request-timeout`), but
//! for `ExecSync` (the command's own timeout on top, as upstream) and `PullImage`
//! (longer: a pull is slow). `GetContainerEvents` is the one server-streaming call.

use std::path::PathBuf;
use std::time::Duration;

use base::loops::Loops;
use grpc::{Cancel, Channel, Code, Endpoint, GrpcError, Options, Streaming};
use prost::Message;

use crate::v1;

/// The thread that reads the runtime's connection.
const THREAD_NAME: &str = "cri-conn";
/// A pull's deadline: upstream gives `PullImage` none (only cancel); a deadline keeps
/// a hung runtime from holding a pod worker for ever.
const PULL_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// A CRI call that did not return its reply.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    /// `--container-runtime-endpoint` is not a Unix socket.
    #[error("{0:?} is not a CRI endpoint (unix:///path/to/socket)")]
    Endpoint(String),
    /// The call failed: connection, deadline, or the runtime's own error status.
    #[error(transparent)]
    Grpc(#[from] GrpcError),
    /// The runtime's reply is not the message the method returns.
    #[error("{method} on {endpoint}: undecodable reply")]
    Decode {
        method: &'static str,
        endpoint: String,
        #[source]
        source: prost::DecodeError,
    },
}

impl CriError {
    /// The gRPC code of the failure: `Unimplemented` for a method the runtime does not
    /// have (containerd 1.6's `GetContainerEvents`), `NotFound` for a container gone.
    pub fn code(&self) -> Code {
        match self {
            CriError::Endpoint(_) => Code::InvalidArgument,
            CriError::Grpc(e) => e.code(),
            CriError::Decode { .. } => Code::Internal,
        }
    }
}

/// The endpoint a `--container-runtime-endpoint` value names: `unix:///path` or a
/// bare absolute path (upstream's deprecated form).
fn parse_endpoint(s: &str) -> Result<Endpoint, CriError> {
    let path = s.strip_prefix("unix://").unwrap_or(s);
    if path.starts_with('/') {
        Ok(Endpoint::Unix(PathBuf::from(path)))
    } else {
        Err(CriError::Endpoint(s.to_string()))
    }
}

/// One CRI runtime (and its image service on the same socket).
#[derive(Debug)]
pub struct CriClient {
    channel: Channel,
    timeout: Duration,
}

macro_rules! unary {
    ($($(#[$doc:meta])* $name:ident: $path:literal, $req:ident -> $resp:ident;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(&self, request: &v1::$req) -> Result<v1::$resp, CriError> {
                self.call($path, request, self.timeout)
            }
        )*
    };
}

impl CriClient {
    /// A client of the runtime at `endpoint`, each call within `timeout`; it connects
    /// on the first call (and again after the connection broke). The connection's
    /// reader thread is spawned through `loops`.
    pub fn new(endpoint: &str, timeout: Duration, loops: &Loops) -> Result<CriClient, CriError> {
        let options = Options::new(THREAD_NAME, concat!("rkubelet/", env!("CARGO_PKG_VERSION")));
        Ok(CriClient {
            channel: Channel::new(parse_endpoint(endpoint)?, options, loops),
            timeout,
        })
    }

    fn call<Req: Message, Resp: Message + Default>(
        &self,
        method: &'static str,
        request: &Req,
        timeout: Duration,
    ) -> Result<Resp, CriError> {
        let reply = self
            .channel
            .unary(method, &request.encode_to_vec(), timeout)?;
        Resp::decode(reply.as_slice()).map_err(|source| CriError::Decode {
            method,
            endpoint: self.channel.endpoint().to_string(),
            source,
        })
    }

    /// `ContainerStatus` within `timeout` instead of the request timeout: a log
    /// follower's quick question, which must not hold its reader long.
    pub(crate) fn container_status_within(
        &self,
        request: &v1::ContainerStatusRequest,
        timeout: Duration,
    ) -> Result<v1::ContainerStatusResponse, CriError> {
        self.call(
            "/runtime.v1.RuntimeService/ContainerStatus",
            request,
            timeout,
        )
    }

    unary! {
        /// The runtime's name and version, and the CRI version it speaks.
        version: "/runtime.v1.RuntimeService/Version", VersionRequest -> VersionResponse;
        /// RuntimeReady and NetworkReady.
        status: "/runtime.v1.RuntimeService/Status", StatusRequest -> StatusResponse;
        /// Creates and starts a sandbox; its ID.
        run_pod_sandbox: "/runtime.v1.RuntimeService/RunPodSandbox", RunPodSandboxRequest -> RunPodSandboxResponse;
        stop_pod_sandbox: "/runtime.v1.RuntimeService/StopPodSandbox", StopPodSandboxRequest -> StopPodSandboxResponse;
        remove_pod_sandbox: "/runtime.v1.RuntimeService/RemovePodSandbox", RemovePodSandboxRequest -> RemovePodSandboxResponse;
        pod_sandbox_status: "/runtime.v1.RuntimeService/PodSandboxStatus", PodSandboxStatusRequest -> PodSandboxStatusResponse;
        list_pod_sandbox: "/runtime.v1.RuntimeService/ListPodSandbox", ListPodSandboxRequest -> ListPodSandboxResponse;
        create_container: "/runtime.v1.RuntimeService/CreateContainer", CreateContainerRequest -> CreateContainerResponse;
        start_container: "/runtime.v1.RuntimeService/StartContainer", StartContainerRequest -> StartContainerResponse;
        remove_container: "/runtime.v1.RuntimeService/RemoveContainer", RemoveContainerRequest -> RemoveContainerResponse;
        list_containers: "/runtime.v1.RuntimeService/ListContainers", ListContainersRequest -> ListContainersResponse;
        container_status: "/runtime.v1.RuntimeService/ContainerStatus", ContainerStatusRequest -> ContainerStatusResponse;
        update_container_resources: "/runtime.v1.RuntimeService/UpdateContainerResources", UpdateContainerResourcesRequest -> UpdateContainerResourcesResponse;
        /// The runtime's own figures of one container (the kubelet reads cgroupfs; the
        /// tests compare with these).
        container_stats: "/runtime.v1.RuntimeService/ContainerStats", ContainerStatsRequest -> ContainerStatsResponse;
        /// The runtime reopens the container's log file at its path (after the kubelet
        /// renamed it: rotation).
        reopen_container_log: "/runtime.v1.RuntimeService/ReopenContainerLog", ReopenContainerLogRequest -> ReopenContainerLogResponse;
        /// The node's pod CIDR to the runtime.
        update_runtime_config: "/runtime.v1.RuntimeService/UpdateRuntimeConfig", UpdateRuntimeConfigRequest -> UpdateRuntimeConfigResponse;
        /// The URL of the runtime's streaming server for one exec session.
        exec: "/runtime.v1.RuntimeService/Exec", ExecRequest -> ExecResponse;
        /// The URL of the runtime's streaming server for one attach session.
        attach: "/runtime.v1.RuntimeService/Attach", AttachRequest -> AttachResponse;
        /// The URL of the runtime's streaming server for one port-forward session.
        port_forward: "/runtime.v1.RuntimeService/PortForward", PortForwardRequest -> PortForwardResponse;
        list_images: "/runtime.v1.ImageService/ListImages", ListImagesRequest -> ListImagesResponse;
        image_status: "/runtime.v1.ImageService/ImageStatus", ImageStatusRequest -> ImageStatusResponse;
        remove_image: "/runtime.v1.ImageService/RemoveImage", RemoveImageRequest -> RemoveImageResponse;
        image_fs_info: "/runtime.v1.ImageService/ImageFsInfo", ImageFsInfoRequest -> ImageFsInfoResponse;
    }

    /// Stops a container, giving it the request's grace period (seconds) on top of the
    /// request timeout, as upstream.
    pub fn stop_container(
        &self,
        request: &v1::StopContainerRequest,
    ) -> Result<v1::StopContainerResponse, CriError> {
        let grace = Duration::from_secs(request.timeout.max(0).unsigned_abs());
        self.call(
            "/runtime.v1.RuntimeService/StopContainer",
            request,
            self.timeout.saturating_add(grace),
        )
    }

    /// Runs a command in a container to its end; the deadline is the command's own
    /// timeout (seconds, 0 for none) on top of the request timeout, as upstream.
    pub fn exec_sync(
        &self,
        request: &v1::ExecSyncRequest,
    ) -> Result<v1::ExecSyncResponse, CriError> {
        let own = Duration::from_secs(request.timeout.max(0).unsigned_abs());
        self.call(
            "/runtime.v1.RuntimeService/ExecSync",
            request,
            self.timeout.saturating_add(own),
        )
    }

    /// Pulls an image; its reference as the runtime stored it.
    pub fn pull_image(
        &self,
        request: &v1::PullImageRequest,
    ) -> Result<v1::PullImageResponse, CriError> {
        self.call(
            "/runtime.v1.ImageService/PullImage",
            request,
            PULL_TIMEOUT.max(self.timeout),
        )
    }

    /// The runtime's container events, until the runtime ends the stream, the
    /// connection breaks, or the returned stream is cancelled or dropped. A runtime
    /// without them (containerd before 1.7) fails the first item with
    /// [`Code::Unimplemented`] (see [`CriError::code`]).
    pub fn get_container_events(&self) -> Result<ContainerEvents<'_>, CriError> {
        const METHOD: &str = "/runtime.v1.RuntimeService/GetContainerEvents";
        let stream = self.channel.server_streaming(
            METHOD,
            &v1::GetEventsRequest {}.encode_to_vec(),
            None,
        )?;
        Ok(ContainerEvents {
            stream,
            endpoint: self.channel.endpoint().to_string(),
        })
    }
}

/// The stream of `GetContainerEvents`.
#[derive(Debug)]
pub struct ContainerEvents<'a> {
    stream: Streaming<'a>,
    endpoint: String,
}

impl ContainerEvents<'_> {
    /// A handle that ends the stream from another thread.
    pub fn canceller(&self) -> Cancel {
        self.stream.canceller()
    }
}

impl Iterator for ContainerEvents<'_> {
    type Item = Result<v1::ContainerEventResponse, CriError>;

    fn next(&mut self) -> Option<Self::Item> {
        let item = self.stream.next()?;
        Some(item.map_err(CriError::from).and_then(|bytes| {
            v1::ContainerEventResponse::decode(bytes.as_slice()).map_err(|source| {
                CriError::Decode {
                    method: "/runtime.v1.RuntimeService/GetContainerEvents",
                    endpoint: self.endpoint.clone(),
                    source,
                }
            })
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_unix_sockets() {
        assert_eq!(
            parse_endpoint("unix:///run/containerd/containerd.sock").ok(),
            Some(Endpoint::Unix("/run/containerd/containerd.sock".into()))
        );
        assert_eq!(
            parse_endpoint("/var/run/crio/crio.sock").ok(),
            Some(Endpoint::Unix("/var/run/crio/crio.sock".into()))
        );
        for bad in [
            "tcp://127.0.0.1:1234",
            "unix://relative.sock",
            "npipe:////./pipe/x",
        ] {
            assert!(
                matches!(parse_endpoint(bad), Err(CriError::Endpoint(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn messages_encode_as_the_proto_says() {
        // VersionRequest{version: "v1"}: field 1, a string.
        let v = v1::VersionRequest {
            version: "v1".into(),
        };
        assert_eq!(v.encode_to_vec(), [0x0a, 2, b'v', b'1']);
        let back = v1::VersionRequest::decode([0x0a, 2, b'v', b'1'].as_slice()).expect("decodes");
        assert_eq!(back.version, "v1");
    }
}
