//! The streaming sessions of exec, attach and port-forward (upstream's CRI streaming
//! server, `pkg/kubelet/cri/streaming/{remotecommand,portforward}`), once the
//! kubelet's handler has checked a request and taken its connection over.
//!
//! ONE stream thread runs a whole session: the protocol upgrade (WebSocket in
//! [`websocket`], SPDY/3.1 in [`httpstream`]), the process or the pod sockets, and the
//! client, all in one `poll(2)` loop, both ways non-blocking, each direction's buffer
//! bounded (a side is not read while the other side's outgoing buffer is over
//! [`HIGH_WATER`]). Nothing blocks longer than a second without looking at shutdown,
//! and the session ends within about a second of its client going away.
//!
//! The parts: [`wire`] (the client connection with its bounded outgoing buffer),
//! [`websocket`] (the upgrade and the channel protocols), [`remotecommand`] (exec and
//! attach sessions), [`portforward`] (port-forward sessions), [`netns`] (dialing a
//! port inside the pod's network namespace), [`proxy`] (a session a runtime's own
//! streaming server serves, proxied to it).

pub mod httpstream;
pub(crate) mod netns;
pub mod portforward;
pub mod proxy;
pub mod remotecommand;
pub mod websocket;
pub mod wire;

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// A side is not read while the other side's outgoing buffer holds more than this:
/// the bound on what a session keeps per direction.
pub(crate) const HIGH_WATER: usize = 1024 * 1024;

/// The most client bytes a session takes in one round of its loop: what is read
/// beyond [`HIGH_WATER`] before the session stops reading is at most this (plus one
/// message).
pub(crate) const READ_BUDGET: usize = 256 * 1024;

/// How long one `poll(2)` of a session waits at most, so shutdown is seen promptly.
pub(crate) const POLL_TICK: Duration = Duration::from_secs(1);

/// A session with no traffic either way for this long is closed (upstream's
/// `streamingConnectionIdleTimeout` default).
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(4 * 3600);

/// The longest a client may take to open its streams after the upgrade (upstream's
/// `DefaultStreamCreationTimeout`).
pub(crate) const STREAM_CREATION_TIMEOUT: Duration = Duration::from_secs(30);

/// Which container-side session a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    /// `/exec`: run a command.
    Exec,
    /// `/attach`: the main process's streams.
    Attach,
}

/// How an exec ended, for the error stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Exit code 0 (or an attach that ended).
    Success,
    /// The command (second field) exited with this non-zero code.
    ExitCode(i64, Vec<String>),
    /// The runtime failed (`error executing command in container: …`).
    Internal(String),
}

/// `metav1.Status` as Go's `json.Marshal` writes it: fields in the struct's order,
/// `metadata` always (an empty struct is not omitted), empty fields left out.
#[derive(serde::Serialize)]
struct Status<'a> {
    metadata: serde_json::Map<String, serde_json::Value>,
    status: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<Details>,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<u16>,
}

#[derive(serde::Serialize)]
struct Details {
    causes: Vec<Cause>,
}

#[derive(serde::Serialize)]
struct Cause {
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'static str>,
    message: String,
}

impl Outcome {
    /// The failure's message (what kubectl prints before v4), "" for a success.
    fn message(&self) -> String {
        match self {
            Outcome::Success => String::new(),
            // Upstream wraps the runtime's exit error (containerd's wording).
            Outcome::ExitCode(code, cmd) => format!(
                "command terminated with non-zero exit code: error executing command \
                 [{}], exit code {code}",
                cmd.join(" ")
            ),
            Outcome::Internal(e) => format!("Internal error occurred: {e}"),
        }
    }

    /// The `metav1.Status` JSON the v4 and v5 protocols send on the error stream
    /// (upstream's `v4WriteStatusFunc`): `Success`, or `Failure` with reason
    /// `NonZeroExitCode` and the code as an `ExitCode` cause, or `InternalError`.
    pub(crate) fn status_json(&self) -> Vec<u8> {
        let status = match self {
            Outcome::Success => Status {
                metadata: serde_json::Map::new(),
                status: "Success",
                message: None,
                reason: None,
                details: None,
                code: None,
            },
            Outcome::ExitCode(code, _) => Status {
                metadata: serde_json::Map::new(),
                status: "Failure",
                message: Some(self.message()),
                reason: Some("NonZeroExitCode"),
                details: Some(Details {
                    causes: vec![Cause {
                        reason: Some("ExitCode"),
                        message: code.to_string(),
                    }],
                }),
                code: None,
            },
            Outcome::Internal(e) => Status {
                metadata: serde_json::Map::new(),
                status: "Failure",
                message: Some(self.message()),
                reason: Some("InternalError"),
                details: Some(Details {
                    causes: vec![Cause {
                        reason: None,
                        message: e.clone(),
                    }],
                }),
                code: Some(500),
            },
        };
        serde_json::to_vec(&status).unwrap_or_default()
    }

    /// What the protocols before v4 send on the error stream (upstream's
    /// `v1WriteStatusFunc`): the message of a failure, nothing for a success.
    pub(crate) fn status_text(&self) -> Vec<u8> {
        self.message().into_bytes()
    }
}

/// One `poll(2)` over `fds`, at most `timeout`; interrupted calls count as "nothing".
pub(crate) fn poll(fds: &mut [libc::pollfd], timeout: Duration) -> io::Result<()> {
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    let n = libc::nfds_t::try_from(fds.len()).unwrap_or(libc::nfds_t::MAX);
    // SAFETY: `fds` is a valid, writable slice of `n` pollfd structs; a descriptor
    // closed meanwhile makes poll report POLLNVAL, nothing worse. This stays libc:
    // rustix's poll takes descriptors borrowed from their owners, and a session's
    // are raw, one of them the process's side from the runtime seam
    // (`runtime::ProcessIo::fd`, a `RawFd`).
    let rc = unsafe { libc::poll(fds.as_mut_ptr(), n, ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(())
}

/// The poll events that say a client is gone even when the session is not reading
/// it (WebSocket and SPDY have no half-close: a client that shut its side left).
pub(crate) const HUNG_UP: libc::c_short = libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR;

/// A `pollfd` for `fd` asking for `events`.
pub(crate) fn pollfd(fd: RawFd, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_bodies_are_upstreams_json() {
        assert_eq!(
            String::from_utf8(Outcome::Success.status_json()).expect("utf8"),
            r#"{"metadata":{},"status":"Success"}"#
        );
        let cmd = vec!["sh".to_string(), "-c".to_string(), "exit 42".to_string()];
        assert_eq!(
            String::from_utf8(Outcome::ExitCode(42, cmd.clone()).status_json()).expect("utf8"),
            "{\"metadata\":{},\"status\":\"Failure\",\"message\":\"command terminated with \
             non-zero exit code: error executing command [sh -c exit 42], exit code 42\",\
             \"reason\":\"NonZeroExitCode\",\"details\":{\"causes\":[{\"reason\":\"ExitCode\",\
             \"message\":\"42\"}]}}"
        );
        let v: serde_json::Value =
            serde_json::from_slice(&Outcome::ExitCode(42, cmd).status_json()).expect("json");
        assert_eq!(v["status"], "Failure");
        assert_eq!(v["reason"], "NonZeroExitCode");
        assert_eq!(v["details"]["causes"][0]["reason"], "ExitCode");
        assert_eq!(v["details"]["causes"][0]["message"], "42");
        assert!(v["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("command terminated with non-zero exit code")));
        let v: serde_json::Value =
            serde_json::from_slice(&Outcome::Internal("boom".into()).status_json()).expect("json");
        assert_eq!(v["reason"], "InternalError");
        assert_eq!(v["code"], 500);
        assert_eq!(v["message"], "Internal error occurred: boom");
        assert!(Outcome::Success.status_text().is_empty());
        assert!(
            String::from_utf8_lossy(&Outcome::ExitCode(1, Vec::new()).status_text())
                .contains("exit code 1")
        );
    }
}
