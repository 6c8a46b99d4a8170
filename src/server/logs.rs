//! `GET /containerLogs/{namespace}/{pod}/{container}` on the kubelet port (upstream's
//! `getContainerLogs` in `pkg/kubelet/server/server.go`, with the kubelet's
//! `GetKubeletContainerLogs`/`validateContainerLogStatus` and the CRI log writer of
//! `pkg/kubelet/kuberuntime/logs`).
//!
//! The query is decoded as a `v1` `PodLogOptions` (`follow`, `previous`,
//! `sinceSeconds`, `sinceTime`, `timestamps`, `tailLines`, legacy `tail`,
//! `limitBytes`, `stream`) and validated as upstream does, with its codes and bodies:
//! 400 `{"message": "Unable to decode query."}`, 422 `{"message": "Invalid request."}`,
//! 404 `pod "<p>" does not exist` / `container "<c>" not found in pod "<p>"`, and 400
//! with the kubelet's own words for a container that has no log to show (waiting,
//! no previous instance) or a runtime that fails. Which instance: the container ID
//! from the pod's status (the status cache, else the status the source sent), the
//! last terminated one for `previous`; with no status at all, Docker's list by the
//! pod's UID and the container's name (newest, or the one before it).
//!
//! The answer is chunked and streams from a thread of its own (`stream-N`, a
//! [`Reply::takeover`]): each piece the runtime hands over is written as a chunk at
//! once (upstream's flush writer), `limitBytes` cuts the stream, and a followed log
//! ends when the container stops, when the client goes (checked every
//! [`WAKE`] while the log is quiet) or at shutdown.
//!
//! Unlike upstream, which reads the CRI log file under `/var/log/pods`, the log comes
//! from Docker's logs API ([`Runtime::log_stream`]): Docker keeps the files.

use std::io::{self, Read};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodStatus};
use rustix::event::{PollFd, PollFlags, Timespec};

use super::readonly::PodsView;
use runtime::container::labels;
use runtime::{ContainerState, LogOptions, LogStream, Runtime};
use wire::server::http::Hijacked;
use wire::server::{Reply, Req};

/// How long one read of the log waits before the stream thread looks at its client
/// and at shutdown again: a client that went away is noticed within this.
pub(crate) const WAKE: Duration = Duration::from_millis(500);

/// The largest piece written as one chunk.
const CHUNK: usize = 32 * 1024;

/// Which streams a request asks for (`stream`, upstream's `PodLogsQuerySplitStreams`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Streams {
    /// `All` (the default): stdout and stderr interleaved.
    All,
    /// `Stdout`.
    Stdout,
    /// `Stderr`.
    Stderr,
}

/// A `PodLogOptions` decoded from the query.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LogQuery {
    /// `follow`.
    pub follow: bool,
    /// `previous`.
    pub previous: bool,
    /// `timestamps`.
    pub timestamps: bool,
    /// `sinceSeconds`.
    pub since_seconds: Option<i64>,
    /// `sinceTime`: present (an empty value is the zero time, as upstream's decoding).
    pub since_time: Option<Option<SystemTime>>,
    /// `tailLines` (or legacy `tail`).
    pub tail_lines: Option<i64>,
    /// `limitBytes`.
    pub limit_bytes: Option<i64>,
    /// `stream`, as given.
    pub stream: Option<String>,
}

/// Why a query is refused: 400 (cannot be decoded) or 422 (invalid).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QueryProblem {
    /// `Unable to decode query.`
    Decode,
    /// `Invalid request.`
    Invalid,
}

/// The query's pairs, percent-decoded as Go's `url.ParseQuery` (`+` is a space); a
/// pair with a bad escape is dropped, as `URL.Query()` drops it.
pub(crate) fn query_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|kv| !kv.is_empty())
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            Some((unescape_query(k)?, unescape_query(v)?))
        })
        .collect()
}

/// One query component, `+` as a space, `%XX` decoded; None for a bad escape.
fn unescape_query(s: &str) -> Option<String> {
    let plus: String = s.replace('+', " ");
    percent_decode(&plus)
}

/// `%XX` decoded (no `+` rule); None for a bad escape or bytes that are not UTF-8.
pub(crate) fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Decodes and validates the query (upstream: the `tail` compatibility rewrite,
/// `DecodeParameters` into `v1.PodLogOptions`, `ValidatePodLogOptions`). Pure.
pub(crate) fn parse_query(query: &str) -> Result<LogQuery, QueryProblem> {
    let mut pairs = query_pairs(query);
    // Legacy `tail=<n>` replaces every `tailLines`; `tail=all` removes them.
    if let Some(tail) = first(&pairs, "tail")
        .filter(|t| !t.is_empty())
        .map(str::to_string)
    {
        pairs.retain(|(k, _)| k != "tailLines");
        if tail != "all" {
            pairs.push(("tailLines".to_string(), tail));
        }
    }
    let boolean = |key: &str| {
        first(&pairs, key).is_some_and(|v| v != "0" && !v.eq_ignore_ascii_case("false"))
    };
    let int = |key: &str| -> Result<Option<i64>, QueryProblem> {
        first(&pairs, key)
            .map(|v| v.parse::<i64>().map_err(|_| QueryProblem::Decode))
            .transpose()
    };
    let since_time = match first(&pairs, "sinceTime") {
        None => None,
        Some("" | "null") => Some(None),
        Some(t) => Some(Some(
            base::time::parse_rfc3339(t).ok_or(QueryProblem::Decode)?,
        )),
    };
    let q = LogQuery {
        follow: boolean("follow"),
        previous: boolean("previous"),
        timestamps: boolean("timestamps"),
        since_seconds: int("sinceSeconds")?,
        since_time,
        tail_lines: int("tailLines")?,
        limit_bytes: int("limitBytes")?,
        stream: first(&pairs, "stream").map(str::to_string),
    };
    let invalid = q.tail_lines.is_some_and(|n| n < 0)
        || q.limit_bytes.is_some_and(|n| n < 1)
        || (q.since_seconds.is_some() && q.since_time.is_some())
        || q.since_seconds.is_some_and(|n| n < 1)
        || q.stream.as_deref().is_some_and(|s| {
            !matches!(s, "All" | "Stdout" | "Stderr") || (s != "All" && q.tail_lines.is_some())
        });
    if invalid {
        return Err(QueryProblem::Invalid);
    }
    Ok(q)
}

fn first<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

impl LogQuery {
    /// The streams asked for.
    pub(crate) fn streams(&self) -> Streams {
        match self.stream.as_deref() {
            Some("Stdout") => Streams::Stdout,
            Some("Stderr") => Streams::Stderr,
            _ => Streams::All,
        }
    }

    /// The runtime's options at `now` (upstream `NewLogOptions`: the later of
    /// `now - sinceSeconds` and `sinceTime`).
    pub(crate) fn log_options(&self, now: SystemTime) -> LogOptions {
        let from_seconds = self.since_seconds.map(|s| {
            let d = base::time::secs(s);
            now.checked_sub(d).unwrap_or(SystemTime::UNIX_EPOCH)
        });
        let since = match (from_seconds, self.since_time.flatten()) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let streams = self.streams();
        LogOptions {
            follow: self.follow,
            since,
            timestamps: self.timestamps,
            tail: self.tail_lines.and_then(|n| u64::try_from(n).ok()),
            stdout: streams != Streams::Stderr,
            stderr: streams != Streams::Stdout,
        }
    }
}

/// Which runtime container holds the log, as the pod's status tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Instance {
    /// This container ID.
    Id(String),
    /// No status mentions the container: ask the runtime for the newest instance
    /// (or the one before it, for `previous`).
    Lookup,
}

/// Upstream's `validateContainerLogStatus` over a pod status: the container ID to
/// read, or the 400 message why there is no log. `None` status: [`Instance::Lookup`].
pub(crate) fn container_instance(
    pod_name: &str,
    status: Option<&PodStatus>,
    container: &str,
    previous: bool,
) -> Result<Instance, String> {
    let Some(status) = status else {
        return Ok(Instance::Lookup);
    };
    let find = |list: &Option<Vec<ContainerStatus>>| {
        list.iter().flatten().find(|s| s.name == container).cloned()
    };
    let Some(cs) = find(&status.container_statuses)
        .or_else(|| find(&status.init_container_statuses))
        .or_else(|| find(&status.ephemeral_container_statuses))
    else {
        if status.container_statuses.is_none() && status.init_container_statuses.is_none() {
            // A status without containers yet (a source's pod before its first sync).
            return Ok(Instance::Lookup);
        }
        return Err(format!(
            "container {container:?} in pod {pod_name:?} is not available"
        ));
    };
    let id = |s: &Option<String>| {
        s.as_deref()
            .filter(|s| !s.is_empty())
            .map(|s| s.split_once("://").map_or(s, |(_, id)| id).to_string())
    };
    let last = cs.last_state.as_ref().and_then(|s| s.terminated.as_ref());
    let state = cs.state.clone().unwrap_or_default();
    let terminated_here = || format!("container {container:?} in pod {pod_name:?} is terminated");
    if previous {
        return last
            .and_then(|t| id(&t.container_id))
            .map(Instance::Id)
            .ok_or_else(|| {
                format!("previous terminated container {container:?} in pod {pod_name:?} not found")
            });
    }
    if state.running.is_some() {
        return id(&cs.container_id)
            .map(Instance::Id)
            .ok_or_else(terminated_here);
    }
    if let Some(t) = &state.terminated {
        return id(&t.container_id)
            .or_else(|| last.and_then(|l| id(&l.container_id)))
            .map(Instance::Id)
            .ok_or_else(terminated_here);
    }
    if let Some(l) = last {
        return id(&l.container_id)
            .map(Instance::Id)
            .ok_or_else(terminated_here);
    }
    let reason = state
        .waiting
        .as_ref()
        .map(|w| w.reason.clone().unwrap_or_default());
    Err(match reason.as_deref() {
        Some("ErrImagePull") => format!(
            "container {container:?} in pod {pod_name:?} is waiting to start: image can't be pulled"
        ),
        Some("ImagePullBackOff") => format!(
            "container {container:?} in pod {pod_name:?} is waiting to start: trying and failing \
             to pull image"
        ),
        Some(r) => format!("container {container:?} in pod {pod_name:?} is waiting to start: {r}"),
        None => {
            format!("container {container:?} in pod {pod_name:?} is waiting to start - no logs yet")
        }
    })
}

/// Whether `pod`'s spec has a container (regular, init or ephemeral) called `name`
/// (upstream `GetContainerSpec`).
fn has_container(pod: &Pod, name: &str) -> bool {
    let Some(spec) = &pod.spec else {
        return false;
    };
    spec.containers.iter().any(|c| c.name == name)
        || spec
            .init_containers
            .iter()
            .flatten()
            .any(|c| c.name == name)
        || spec
            .ephemeral_containers
            .iter()
            .flatten()
            .any(|c| c.name == name)
}

/// A 400/404/422 answer with upstream's body (plain text, as go-restful writes it).
fn error(status: u16, body: impl Into<String>) -> Reply {
    Reply::text(status, body)
}

/// `/containerLogs/{ns}/{pod}/{container}`: checks what can be checked without the
/// runtime, then streams from a thread of its own. `parts` are the raw path segments
/// after `containerLogs` (empty ones kept: an empty name is upstream's 400).
pub(crate) fn handle(
    pods: &PodsView,
    runtime: &Arc<dyn Runtime>,
    req: &Req,
    parts: &[&str],
) -> Reply {
    if req.method != "GET" {
        return Reply::method_not_allowed("GET");
    }
    let [namespace, pod_name, container] = parts else {
        return Reply::not_found();
    };
    let (Some(namespace), Some(pod_name), Some(container)) = (
        percent_decode(namespace),
        percent_decode(pod_name),
        percent_decode(container),
    ) else {
        return Reply::text(400, "400 Bad Request");
    };
    if pod_name.is_empty() {
        return error(400, r#"{"message": "Missing podID."}"#);
    }
    if container.is_empty() {
        return error(400, r#"{"message": "Missing container name."}"#);
    }
    if namespace.is_empty() {
        return error(400, r#"{"message": "Missing podNamespace."}"#);
    }
    let query = match parse_query(&req.query) {
        Ok(q) => q,
        Err(QueryProblem::Decode) => {
            return error(400, r#"{"message": "Unable to decode query."}"#)
        }
        Err(QueryProblem::Invalid) => return error(422, r#"{"message": "Invalid request."}"#),
    };
    let pods_now = pods.pods();
    let Some(pod) = pods_now.iter().find(|p| {
        p.metadata.namespace.as_deref() == Some(namespace.as_str())
            && p.metadata.name.as_deref() == Some(pod_name.as_str())
    }) else {
        return error(404, format!("pod {pod_name:?} does not exist"));
    };
    if !has_container(pod, &container) {
        return error(
            404,
            format!("container {container:?} not found in pod {pod_name:?}"),
        );
    }
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let cached = pods.statuses.get(&uid);
    let status = cached.as_deref().or(pod.status.as_ref());
    let instance = match container_instance(&pod_name, status, &container, query.previous) {
        Ok(i) => i,
        Err(message) => return error(400, message),
    };
    let opts = query.log_options(SystemTime::now());
    let limit = query.limit_bytes.and_then(|n| u64::try_from(n).ok());
    let runtime = runtime.clone();
    let previous = query.previous;
    Reply::takeover(move |conn| {
        let id = match instance {
            Instance::Id(id) => Ok(id),
            Instance::Lookup => lookup(runtime.as_ref(), &uid, &container, &pod_name, previous),
        };
        let stream = id.and_then(|id| {
            runtime
                .log_stream(&id, &opts, WAKE)
                .map_err(|e| base::loops::error_chain(&e))
        });
        match stream {
            Ok(log) => stream_log(conn, log, limit),
            Err(message) => write_error(conn, 400, &message),
        }
    })
}

/// The container instance by the runtime's list, for a pod whose status does not
/// name it yet: the newest by creation (and restart count), or the one before it.
fn lookup(
    runtime: &dyn Runtime,
    uid: &str,
    container: &str,
    pod_name: &str,
    previous: bool,
) -> Result<String, String> {
    let filter = [
        format!("{}={uid}", labels::POD_UID),
        format!("{}={container}", labels::CONTAINER_NAME),
    ];
    let mut found = runtime
        .list_containers(&filter)
        .map_err(|e| base::loops::error_chain(&e))?;
    base::sort::sort_by_key(&mut found, |c| {
        std::cmp::Reverse((c.created, labels::restart_count(&c.labels)))
    });
    let pick = if previous {
        found
            .iter()
            .skip(1)
            .find(|c| c.state == ContainerState::Exited)
    } else {
        found.first()
    };
    pick.map(|c| c.id.clone()).ok_or_else(|| {
        if previous {
            format!("previous terminated container {container:?} in pod {pod_name:?} not found")
        } else {
            format!("container {container:?} in pod {pod_name:?} is waiting to start - no logs yet")
        }
    })
}

/// A whole error answer on a taken-over connection.
fn write_error(mut conn: Hijacked, status: u16, message: &str) {
    let len = message.len().to_string();
    let _ = conn
        .write_head(
            status,
            &[
                ("Content-Type", "text/plain; charset=utf-8"),
                ("Content-Length", &len),
                ("Connection", "close"),
            ],
        )
        .and_then(|()| conn.write_all(message.as_bytes()));
}

/// Copies `log` to the client as chunks until it ends, `limit` bytes are out, the
/// client goes or shutdown.
fn stream_log(mut conn: Hijacked, mut log: LogStream, limit: Option<u64>) {
    let head = [
        ("Content-Type", "text/plain; charset=utf-8"),
        ("Transfer-Encoding", "chunked"),
        ("Connection", "close"),
    ];
    if conn.write_head(200, &head).is_err() {
        return;
    }
    let mut left = limit.unwrap_or(u64::MAX);
    let mut buf = vec![0u8; CHUNK];
    loop {
        if conn.stop().is_stopped() {
            return;
        }
        let want = usize::try_from(left).unwrap_or(usize::MAX).min(CHUNK);
        match log.read(&mut buf[..want]) {
            Ok(0) => break,
            Ok(n) => {
                if conn.write_chunk(&buf[..n]).is_err() {
                    return;
                }
                left = left.saturating_sub(n as u64);
                if left == 0 {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if client_gone(&mut conn) {
                    log::debug!("containerLogs: the client went away");
                    return;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                log::debug!("containerLogs: the log stream broke: {e}");
                break;
            }
        }
    }
    let _ = conn.finish_chunks();
}

/// True when the client closed its end (or the connection failed). What a client
/// sends meanwhile (it should send nothing) is read and dropped.
pub(crate) fn client_gone(conn: &mut Hijacked) -> bool {
    if !conn.has_buffered() {
        let mut fd = [PollFd::new(&*conn, PollFlags::IN)];
        // Not waiting: a zero timeout.
        let n = rustix::event::poll(&mut fd, Some(&Timespec::default()));
        if !matches!(n, Ok(n) if n > 0) {
            return false;
        }
    }
    let mut scratch = [0u8; 4096];
    loop {
        match conn.read_nonblocking(&mut scratch) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState as ApiState, ContainerStateRunning, ContainerStateTerminated,
        ContainerStateWaiting,
    };

    #[test]
    fn queries_decode_as_pod_log_options() {
        let q = parse_query("follow=true&previous&timestamps=0&tailLines=10&limitBytes=5")
            .expect("valid");
        assert!(q.follow && q.previous && !q.timestamps);
        assert_eq!((q.tail_lines, q.limit_bytes), (Some(10), Some(5)));
        // Legacy tail wins over tailLines; `all` removes the limit.
        assert_eq!(
            parse_query("tailLines=3&tail=7").expect("valid").tail_lines,
            Some(7)
        );
        assert_eq!(
            parse_query("tailLines=3&tail=all")
                .expect("valid")
                .tail_lines,
            None
        );
        let t = parse_query("sinceTime=2024-01-01T00%3A00%3A00Z").expect("valid");
        assert_eq!(
            t.since_time,
            Some(base::time::parse_rfc3339("2024-01-01T00:00:00Z"))
        );
        assert_eq!(
            parse_query("stream=Stderr").expect("valid").streams(),
            Streams::Stderr
        );
        assert!(!parse_query("follow=FALSE").expect("valid").follow);
        assert!(parse_query("follow=").expect("valid").follow);
    }

    #[test]
    fn bad_queries_are_400_or_422_as_upstream() {
        for q in [
            "tailLines=x",
            "sinceSeconds=1.5",
            "limitBytes=",
            "sinceTime=yesterday",
            "tail=x",
        ] {
            assert_eq!(parse_query(q), Err(QueryProblem::Decode), "{q}");
        }
        for q in [
            "tailLines=-1",
            "limitBytes=0",
            "sinceSeconds=0",
            "sinceSeconds=5&sinceTime=2024-01-01T00:00:00Z",
            "stream=Both",
            "stream=Stdout&tailLines=1",
        ] {
            assert_eq!(parse_query(q), Err(QueryProblem::Invalid), "{q}");
        }
        assert!(parse_query("stream=All&tailLines=1").is_ok());
    }

    #[test]
    fn log_options_take_the_later_since() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let q = parse_query("sinceSeconds=10&timestamps=true&tailLines=2").expect("valid");
        let o = q.log_options(now);
        assert_eq!(
            o.since,
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(990))
        );
        assert!(o.timestamps && o.stdout && o.stderr && !o.follow);
        assert_eq!(o.tail, Some(2));
        let huge = parse_query("sinceSeconds=9223372036854775807").expect("valid");
        assert!(huge.log_options(now).since.is_some());
        let o = parse_query("stream=Stdout")
            .expect("valid")
            .log_options(now);
        assert!(o.stdout && !o.stderr);
    }

    fn status(state: ApiState, last: Option<ApiState>) -> PodStatus {
        PodStatus {
            container_statuses: Some(vec![ContainerStatus {
                name: "c".into(),
                container_id: state.running.as_ref().map(|_| "docker://run".to_string()),
                state: Some(state),
                last_state: last,
                ..Default::default()
            }]),
            ..Default::default()
        }
    }

    fn terminated(id: &str) -> ApiState {
        ApiState {
            terminated: Some(ContainerStateTerminated {
                container_id: Some(format!("docker://{id}")),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_instance_comes_from_the_status_as_upstream_picks_it() {
        let running = ApiState {
            running: Some(ContainerStateRunning::default()),
            ..Default::default()
        };
        let st = status(running.clone(), Some(terminated("old")));
        assert_eq!(
            container_instance("p", Some(&st), "c", false),
            Ok(Instance::Id("run".into()))
        );
        assert_eq!(
            container_instance("p", Some(&st), "c", true),
            Ok(Instance::Id("old".into()))
        );
        let fresh = status(running, None);
        assert_eq!(
            container_instance("p", Some(&fresh), "c", true),
            Err(r#"previous terminated container "c" in pod "p" not found"#.into())
        );
        let waiting = status(
            ApiState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some("ImagePullBackOff".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            None,
        );
        assert_eq!(
            container_instance("p", Some(&waiting), "c", false),
            Err(
                r#"container "c" in pod "p" is waiting to start: trying and failing to pull image"#
                    .into()
            )
        );
        assert_eq!(
            container_instance("p", Some(&status(terminated("dead"), None)), "c", false),
            Ok(Instance::Id("dead".into()))
        );
        assert_eq!(
            container_instance("p", Some(&st), "other", false),
            Err(r#"container "other" in pod "p" is not available"#.into())
        );
        assert_eq!(
            container_instance("p", None, "c", false),
            Ok(Instance::Lookup)
        );
        assert_eq!(
            container_instance("p", Some(&PodStatus::default()), "c", false),
            Ok(Instance::Lookup)
        );
    }
}
