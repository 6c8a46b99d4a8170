//! The fuzz targets' entry points: every parser of outside input, reached from the
//! fuzz crate (`fuzz/`, `make fuzz`) and from `tests/fuzz_corpus.rs` (which replays
//! the committed corpus on stable Rust), through this one module and the few
//! `#[doc(hidden)]` hooks it calls. Nothing here changes what the kubelet does.
//!
//! Each target takes raw bytes and must neither panic nor allocate without bound,
//! whatever the bytes.

mod servers;

use std::path::Path;

use crate::podconfig::manifest::{self, Format, Origin};

/// The node name the targets use where a parser needs one.
const NODE: &str = "fuzz-node";

/// A target: raw bytes in, nothing out (it must only not panic or swell).
pub type Target = fn(&[u8]);

/// Every target, by name (the fuzz crate's binaries and `fuzz/corpus/<name>/`).
pub const TARGETS: &[(&str, Target)] = &[
    ("manifest", manifest_target),
    ("kubelet_config", kubelet_config),
    ("flags", flags),
    ("kubeconfig", kubeconfig),
    ("docker", docker),
    ("etcd_watch", etcd_watch),
    ("api_watch", api_watch),
    ("http_head", http_head),
    ("quantity", quantity),
    ("duration", duration),
    ("reference", reference),
    ("spdy", spdy),
    ("websocket", websocket),
    ("grpc", grpc),
    ("kmsg", kmsg),
    ("procfs", procfs),
    ("http_readonly", servers::http_readonly),
    ("http_kubelet", servers::http_kubelet),
    ("upgrade", servers::upgrade),
    ("grpc_frames", grpc_frames),
    ("etcd_stream", etcd_stream),
];

/// Runs the target called `name`; false when there is none.
pub fn run(name: &str, data: &[u8]) -> bool {
    match TARGETS.iter().find(|(n, _)| *n == name) {
        Some((_, f)) => {
            f(data);
            true
        }
        None => false,
    }
}

/// The first byte picks a variant, the rest is the input.
fn split(data: &[u8]) -> (u8, &[u8]) {
    match data.split_first() {
        Some((first, rest)) => (*first, rest),
        None => (0, data),
    }
}

fn text(data: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(data)
}

/// A manifest (YAML or JSON, one or many documents, a PodList) through the file
/// source's decode, defaulting and validation, and the URL source's.
fn manifest_target(data: &[u8]) {
    let (which, rest) = split(data);
    let t = text(rest);
    let (format, origin) = match which % 3 {
        0 => (
            Format::Yaml,
            Origin::File(Path::new("/etc/kubernetes/manifests/p.yaml")),
        ),
        1 => (
            Format::Json,
            Origin::File(Path::new("/etc/kubernetes/manifests/p.json")),
        ),
        _ => (Format::Yaml, Origin::Url("http://example.com/pods")),
    };
    let _ = manifest::pods_from_str(&t, format, origin, NODE);
}

/// A KubeletConfiguration file.
fn kubelet_config(data: &[u8]) {
    let _ = crate::config::file::parse(Path::new("/var/lib/kubelet/config.yaml"), &text(data));
}

/// A command line: arguments separated by NUL bytes.
fn flags(data: &[u8]) {
    let mut args = vec!["rkubelet".to_string()];
    args.extend(data.split(|b| *b == 0).map(|a| text(a).into_owned()));
    let _ = crate::config::flags::parse(&args);
}

/// A kubeconfig, resolved against a directory that does not exist (no file is read
/// unless the input names one by absolute path).
fn kubeconfig(data: &[u8]) {
    let _ = apiclient::kubeconfig::fuzz_parse(&text(data), Path::new("/nonexistent-fuzz"));
}

/// Docker's answers: container list, inspect, an event line, image list and inspect,
/// the multiplexed stream framing, an error body, a time.
fn docker(data: &[u8]) {
    let (which, rest) = split(data);
    docker::fuzz_answer(which, rest);
}

/// One line of an etcd v3 JSON-gateway watch, and the manifests in its values.
fn etcd_watch(data: &[u8]) {
    crate::podconfig::etcd::fuzz_stream(data, false, NODE);
}

/// One line of an API server pod watch.
fn api_watch(data: &[u8]) {
    let _ = apiclient::decode_watch_line(data);
}

/// A request head on any of the kubelet's ports, and the request made of it.
fn http_head(data: &[u8]) {
    use wire::server::http::{parse_head, Parsed};
    if let Parsed::Complete(head) = parse_head(data, 16 << 10) {
        let req = wire::server::Req::from_head(&head, None);
        drop(req);
    }
}

/// A resource quantity (`100m`, `1Gi`, `1e3`).
fn quantity(data: &[u8]) {
    let _ = base::quantity::parse_milli(&text(data));
}

/// A Go duration (flags, config file), an RFC 3339 time (API objects, Docker).
fn duration(data: &[u8]) {
    let t = text(data);
    let _ = crate::config::duration::parse_duration(&t);
    let _ = base::time::parse_rfc3339(&t);
}

/// An image reference.
fn reference(data: &[u8]) {
    let t = text(data);
    if let Ok(r) = runtime::reference::parse(&t) {
        let _ = (r.registry(), r.name(), r.repository());
    }
    let r = runtime::reference::split(&t);
    let _ = (r.registry(), r.name(), r.repository());
}

/// SPDY/3.1 frames from a client, through the frame decoder and the session.
fn spdy(data: &[u8]) {
    use wire::spdy::conn::{Config, Session};
    let (which, rest) = split(data);
    let mut session = Session::new(Config::default());
    // Fed whole or in two pieces: a frame cut anywhere must decode the same.
    if which % 2 == 0 {
        session.feed(rest);
    } else {
        let cut = rest.len() / 2;
        session.feed(&rest[..cut]);
        while let Ok(Some(_)) = session.poll_event() {}
        session.feed(&rest[cut..]);
    }
    while let Ok(Some(_)) = session.poll_event() {}
}

/// WebSocket frames from a client (exec, attach, port-forward), and the channel
/// protocols' payloads.
fn websocket(data: &[u8]) {
    wire::streams::websocket::fuzz_frames(data);
}

/// A gRPC health response: header blocks (HPACK) and the DATA payload, split at
/// 0xff bytes (the last piece is the DATA).
fn grpc(data: &[u8]) {
    let mut pieces: Vec<&[u8]> = data.split(|b| *b == 0xff).collect();
    let body = pieces.pop().unwrap_or_default();
    crate::prober::grpc::fuzz_response(&pieces, body);
}

/// What a gRPC server sends after the probe's call: HTTP/2 frames through the
/// probe's frame loop.
fn grpc_frames(data: &[u8]) {
    grpc::fuzz_frames(data);
}

/// A sequence of etcd answers (range reads and watch lines, one per line) through
/// the etcd source's relist/watch state machine.
fn etcd_stream(data: &[u8]) {
    crate::podconfig::etcd::fuzz_stream(data, true, NODE);
}

/// /dev/kmsg records, one per line, through the OOM parser.
fn kmsg(data: &[u8]) {
    let mut p = crate::oom_watcher::OomParser::default();
    for line in text(data).lines() {
        if let Some(oom) = p.feed(line) {
            let _ = oom.system_oom_message();
        }
    }
}

/// The /proc and cgroupfs files the stats and eviction code parse, and eviction
/// thresholds.
fn procfs(data: &[u8]) {
    use crate::stats::cgroupfs::{self, CgroupVersion};
    let (which, rest) = split(data);
    let t = text(rest);
    match which % 7 {
        0 => drop(cgroupfs::parse_meminfo(&t)),
        1 => drop(cgroupfs::parse_proc_stat_cpu(&t)),
        2 => drop(cgroupfs::parse_loadavg_tasks(&t)),
        3 => drop(cgroupfs::parse_proc_cgroup(&t, CgroupVersion::V1)),
        4 => drop(cgroupfs::parse_proc_cgroup(&t, CgroupVersion::V2)),
        5 => drop(crate::stats::summary::parse_net_dev(&t)),
        _ => drop(crate::eviction::api::parse_statements(&t)),
    }
}
