//! The stand-in API server's `meta.k8s.io/v1` Tables, what kubectl asks for with
//! `Accept: application/json;as=Table;v=v1;g=meta.k8s.io` on `get`: the columns and cells
//! of upstream's server-side printers (`pkg/printers/internalversion/printers.go`,
//! always printed wide, as the API server does; kubectl hides the priority-1 columns
//! unless `-o wide`) for pods, nodes, events, namespaces, configmaps, secrets,
//! serviceaccounts, leases and CSRs; each row carries the object's metadata as a
//! `PartialObjectMetadata` (or the object with `includeObject=Object`).
//!
//! Where it is not faithful: a pod's row has no `conditions` (upstream marks completed
//! pods so `kubectl get` can hide them with `--show-all=false`, gone since 1.14
//! anyway); restartable init containers (sidecars) are counted as plain init
//! containers; the CSR printer's REQUESTEDDURATION is always `<none>`; a watch never
//! answers in Table form (`kubectl get -w` prints nothing until a change and then
//! fails over to plain objects).

use k8s_openapi::jiff::Timestamp;
use serde_json::{json, Value};

use super::store::Resource;

fn col(name: &str, ty: &str, priority: u8, format: &str) -> Value {
    json!({"name": name, "type": ty, "format": format, "description": "", "priority": priority})
}

/// Upstream's `duration.HumanDuration` of the time since `ts` (`<unknown>` if none).
pub fn since(ts: &Value) -> String {
    let Some(t) = ts.as_str().and_then(|s| s.parse::<Timestamp>().ok()) else {
        return "<unknown>".into();
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    human_duration(now - t.as_second())
}

/// `k8s.io/apimachinery/pkg/util/duration.HumanDuration`, in seconds.
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{dy}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

fn or_none(v: &str) -> String {
    if v.is_empty() {
        "<none>".into()
    } else {
        v.to_string()
    }
}

/// The column definitions of a kind (upstream's names; kubectl upper-cases them).
fn columns(res: &Resource) -> Vec<Value> {
    let name = col("Name", "string", 0, "name");
    let age = col("Age", "string", 0, "");
    match res.kind {
        "Pod" => vec![
            name,
            col("Ready", "string", 0, ""),
            col("Status", "string", 0, ""),
            col("Restarts", "string", 0, ""),
            age,
            col("IP", "string", 1, ""),
            col("Node", "string", 1, ""),
            col("Nominated Node", "string", 1, ""),
            col("Readiness Gates", "string", 1, ""),
        ],
        "Node" => vec![
            name,
            col("Status", "string", 0, ""),
            col("Roles", "string", 0, ""),
            age,
            col("Version", "string", 0, ""),
            col("Internal-IP", "string", 1, ""),
            col("External-IP", "string", 1, ""),
            col("OS-Image", "string", 1, ""),
            col("Kernel-Version", "string", 1, ""),
            col("Container-Runtime", "string", 1, ""),
        ],
        "Event" => vec![
            col("Last Seen", "string", 0, ""),
            col("Type", "string", 0, ""),
            col("Reason", "string", 0, ""),
            col("Object", "string", 0, ""),
            col("Subobject", "string", 1, ""),
            col("Source", "string", 1, ""),
            col("Message", "string", 0, ""),
            col("First Seen", "string", 1, ""),
            col("Count", "string", 1, ""),
            col("Name", "string", 1, "name"),
        ],
        "Namespace" => vec![name, col("Status", "string", 0, ""), age],
        "ConfigMap" => vec![name, col("Data", "string", 0, ""), age],
        "Secret" => vec![
            name,
            col("Type", "string", 0, ""),
            col("Data", "string", 0, ""),
            age,
        ],
        "ServiceAccount" => vec![name, col("Secrets", "string", 0, ""), age],
        "Lease" => vec![name, col("Holder", "string", 0, ""), age],
        "CertificateSigningRequest" => vec![
            name,
            age,
            col("SignerName", "string", 0, ""),
            col("Requestor", "string", 0, ""),
            col("RequestedDuration", "string", 0, ""),
            col("Condition", "string", 0, ""),
        ],
        _ => vec![name, col("Created At", "date", 0, "")],
    }
}

/// A row's cells for `o`.
fn cells(res: &Resource, o: &Value) -> Vec<Value> {
    let name = json!(s(&o["metadata"]["name"]));
    let age = json!(since(&o["metadata"]["creationTimestamp"]));
    match res.kind {
        "Pod" => pod_cells(o),
        "Node" => node_cells(o),
        "Event" => event_cells(o),
        "Namespace" => vec![name, json!(s(&o["status"]["phase"])), age],
        "ConfigMap" => {
            let n = o["data"].as_object().map_or(0, |m| m.len())
                + o["binaryData"].as_object().map_or(0, |m| m.len());
            vec![name, json!(n), age]
        }
        "Secret" => {
            let n = o["data"].as_object().map_or(0, |m| m.len());
            vec![name, json!(s(&o["type"])), json!(n), age]
        }
        "ServiceAccount" => {
            let n = o["secrets"].as_array().map_or(0, |a| a.len());
            vec![name, json!(n), age]
        }
        "Lease" => vec![name, json!(s(&o["spec"]["holderIdentity"])), age],
        "CertificateSigningRequest" => {
            let conds: Vec<&str> = o["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| s(&c["type"]))
                .collect();
            let mut condition = conds.join(",");
            if condition.is_empty() {
                condition = "Pending".into();
            }
            if !o["status"]["certificate"]
                .as_str()
                .unwrap_or_default()
                .is_empty()
            {
                condition.push_str(",Issued");
            }
            vec![
                name,
                age,
                json!(s(&o["spec"]["signerName"])),
                json!(s(&o["spec"]["username"])),
                json!("<none>"),
                json!(condition),
            ]
        }
        _ => vec![name, o["metadata"]["creationTimestamp"].clone()],
    }
}

/// `printPod`.
fn pod_cells(pod: &Value) -> Vec<Value> {
    let spec = &pod["spec"];
    let status = &pod["status"];
    let total = spec["containers"].as_array().map_or(0, |a| a.len());
    let phase = s(&status["phase"]).to_string();
    let mut reason = phase.clone();
    if !s(&status["reason"]).is_empty() {
        reason = s(&status["reason"]).to_string();
    }
    let conditions: Vec<&Value> = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    if conditions
        .iter()
        .any(|c| c["type"] == "PodScheduled" && c["reason"] == "SchedulingGated")
    {
        reason = "SchedulingGated".into();
    }
    let mut restarts: i64 = 0;
    let mut ready = 0;
    let mut last_restart: Option<String> = None;
    let later = |last: &mut Option<String>, c: &Value| {
        if let Some(f) = c["lastState"]["terminated"]["finishedAt"].as_str() {
            if last.as_deref().is_none_or(|l| f > l) {
                *last = Some(f.to_string());
            }
        }
    };
    let inits: Vec<&Value> = status["initContainerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    let n_inits = spec["initContainers"].as_array().map_or(0, |a| a.len());
    let mut initializing = false;
    for (i, c) in inits.iter().enumerate() {
        restarts += c["restartCount"].as_i64().unwrap_or(0);
        later(&mut last_restart, c);
        let term = &c["state"]["terminated"];
        let waiting = &c["state"]["waiting"];
        if !term.is_null() && term["exitCode"].as_i64().unwrap_or(0) == 0 {
            continue;
        }
        if !term.is_null() {
            reason = if s(&term["reason"]).is_empty() {
                match term["signal"].as_i64().unwrap_or(0) {
                    0 => format!("Init:ExitCode:{}", term["exitCode"].as_i64().unwrap_or(0)),
                    sig => format!("Init:Signal:{sig}"),
                }
            } else {
                format!("Init:{}", s(&term["reason"]))
            };
        } else if !s(&waiting["reason"]).is_empty() && s(&waiting["reason"]) != "PodInitializing" {
            reason = format!("Init:{}", s(&waiting["reason"]));
        } else {
            reason = format!("Init:{i}/{n_inits}");
        }
        initializing = true;
        break;
    }
    let initialized = conditions
        .iter()
        .any(|c| c["type"] == "Initialized" && c["status"] == "True");
    if !initializing || initialized {
        restarts = 0;
        last_restart = None;
        let mut has_running = false;
        let cs: Vec<&Value> = status["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .collect();
        for c in cs.iter().rev() {
            restarts += c["restartCount"].as_i64().unwrap_or(0);
            later(&mut last_restart, c);
            let term = &c["state"]["terminated"];
            let waiting = &c["state"]["waiting"];
            if !s(&waiting["reason"]).is_empty() {
                reason = s(&waiting["reason"]).to_string();
            } else if !s(&term["reason"]).is_empty() {
                reason = s(&term["reason"]).to_string();
            } else if !term.is_null() {
                reason = match term["signal"].as_i64().unwrap_or(0) {
                    0 => format!("ExitCode:{}", term["exitCode"].as_i64().unwrap_or(0)),
                    sig => format!("Signal:{sig}"),
                };
            } else if c["ready"] == true && !c["state"]["running"].is_null() {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            let pod_ready = conditions
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            reason = if pod_ready { "Running" } else { "NotReady" }.into();
        }
    }
    let deleting = !pod["metadata"]["deletionTimestamp"].is_null();
    if deleting && s(&status["reason"]) == "NodeLost" {
        reason = "Unknown".into();
    } else if deleting && phase != "Succeeded" && phase != "Failed" {
        reason = "Terminating".into();
    }
    let restarts = match (&last_restart, restarts) {
        (Some(t), n) if n != 0 => format!("{n} ({} ago)", since(&json!(t))),
        (_, n) => n.to_string(),
    };
    let ip = status["podIPs"][0]["ip"].as_str().unwrap_or_default();
    let gates = match spec["readinessGates"].as_array() {
        Some(g) if !g.is_empty() => {
            let ok = g
                .iter()
                .filter(|gate| {
                    conditions
                        .iter()
                        .find(|c| c["type"] == gate["conditionType"])
                        .is_some_and(|c| c["status"] == "True")
                })
                .count();
            format!("{ok}/{}", g.len())
        }
        _ => "<none>".into(),
    };
    vec![
        json!(s(&pod["metadata"]["name"])),
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts),
        json!(since(&pod["metadata"]["creationTimestamp"])),
        json!(or_none(ip)),
        json!(or_none(s(&spec["nodeName"]))),
        json!(or_none(s(&status["nominatedNodeName"]))),
        json!(gates),
    ]
}

/// `printNode`.
fn node_cells(node: &Value) -> Vec<Value> {
    let mut status: Vec<String> = Vec::new();
    if let Some(c) = node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
    {
        status.push(
            if c["status"] == "True" {
                "Ready"
            } else {
                "NotReady"
            }
            .into(),
        );
    }
    if status.is_empty() {
        status.push("Unknown".into());
    }
    if node["spec"]["unschedulable"] == true {
        status.push("SchedulingDisabled".into());
    }
    let mut roles: Vec<String> = Vec::new();
    if let Some(labels) = node["metadata"]["labels"].as_object() {
        for (k, v) in labels {
            if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
                if !role.is_empty() {
                    roles.push(role.to_string());
                }
            } else if k == "kubernetes.io/role" && !s(v).is_empty() {
                roles.push(s(v).to_string());
            }
        }
    }
    base::sort::sort(&mut roles);
    roles.dedup();
    let address = |ty: &str| {
        node["status"]["addresses"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["type"] == ty)
            .map(|a| s(&a["address"]).to_string())
            .unwrap_or_else(|| "<none>".into())
    };
    let info = &node["status"]["nodeInfo"];
    let unknown = |v: &Value| {
        let v = s(v);
        if v.is_empty() {
            "<unknown>".to_string()
        } else {
            v.to_string()
        }
    };
    vec![
        json!(s(&node["metadata"]["name"])),
        json!(status.join(",")),
        json!(or_none(&roles.join(","))),
        json!(since(&node["metadata"]["creationTimestamp"])),
        json!(s(&info["kubeletVersion"])),
        json!(address("InternalIP")),
        json!(address("ExternalIP")),
        json!(unknown(&info["osImage"])),
        json!(unknown(&info["kernelVersion"])),
        json!(unknown(&info["containerRuntimeVersion"])),
    ]
}

/// `printEvent` (wide).
fn event_cells(e: &Value) -> Vec<Value> {
    let mut first = since(&e["firstTimestamp"]);
    if e["firstTimestamp"].is_null() {
        first = since(&e["eventTime"]);
    }
    let mut last = since(&e["lastTimestamp"]);
    if e["lastTimestamp"].is_null() {
        last = first.clone();
    }
    let mut count = e["count"].as_i64().unwrap_or(0);
    if !e["series"].is_null() {
        last = since(&e["series"]["lastObservedTime"]);
        count = e["series"]["count"].as_i64().unwrap_or(0);
    } else if count == 0 {
        count = 1;
    }
    let obj = &e["involvedObject"];
    let kind = s(&obj["kind"]).to_lowercase();
    let target = if s(&obj["name"]).is_empty() {
        kind
    } else {
        format!("{kind}/{}", s(&obj["name"]))
    };
    let mut component = s(&e["source"]["component"]).to_string();
    if component.is_empty() {
        component = s(&e["reportingComponent"]).to_string();
    }
    let mut host = s(&e["source"]["host"]).to_string();
    if host.is_empty() {
        host = s(&e["reportingInstance"]).to_string();
    }
    let source = if host.is_empty() {
        component
    } else {
        format!("{component}, {host}")
    };
    vec![
        json!(last),
        json!(s(&e["type"])),
        json!(s(&e["reason"])),
        json!(target),
        json!(s(&obj["fieldPath"])),
        json!(source),
        json!(s(&e["message"]).trim()),
        json!(first),
        json!(count),
        json!(s(&e["metadata"]["name"])),
    ]
}

/// Whether an Accept header asks for a Table.
pub fn wants_table(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=Table") && first.contains("g=meta.k8s.io"))
}

/// The Table of `objects`; `include` is the `includeObject` query value.
pub fn table(res: &Resource, objects: &[Value], rv: Option<u64>, include: &str) -> Value {
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let object = match include {
                "None" => Value::Null,
                "Object" => o.clone(),
                _ => json!({"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1",
                    "metadata": o["metadata"]}),
            };
            json!({"cells": cells(res, o), "object": object})
        })
        .collect();
    let mut meta = json!({});
    if let Some(rv) = rv {
        meta["resourceVersion"] = json!(rv.to_string());
    }
    json!({"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":meta,
        "columnDefinitions": columns(res), "rows": rows})
}

#[cfg(test)]
mod tests {
    // The benches that include this file compile it without its #[test] functions.
    #[allow(unused_imports)]
    use super::*;

    #[test]
    fn human_durations_as_upstream_prints_them() {
        let cases = [
            (-5, "<invalid>"),
            (-1, "0s"),
            (59, "59s"),
            (119, "119s"),
            (120, "2m"),
            (150, "2m30s"),
            (600, "10m"),
            (3 * 3600 - 60, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 120, "3h2m"),
            (10 * 3600, "10h"),
            (50 * 3600, "2d2h"),
            (10 * 86400, "10d"),
            (3 * 365 * 86400 + 86400, "3y1d"),
            (9 * 365 * 86400, "9y"),
        ];
        for (secs, want) in cases {
            assert_eq!(human_duration(secs), want, "{secs}");
        }
    }

    #[test]
    fn pod_status_column_follows_upstreams_printer() {
        let pod = |status: Value, deleting: bool| {
            let mut p = json!({"metadata": {"name": "p"},
                "spec": {"containers": [{"name": "a"}, {"name": "b"}]}, "status": status});
            if deleting {
                p["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
            }
            p
        };
        let running = json!({"phase": "Running", "podIPs": [{"ip": "10.0.0.5"}],
            "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 0, "state": {"running": {}}},
                {"name": "b", "ready": false, "restartCount": 2,
                 "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]});
        let c = pod_cells(&pod(running.clone(), false));
        assert_eq!(
            (c[1].as_str(), c[2].as_str(), c[3].as_str()),
            (Some("1/2"), Some("CrashLoopBackOff"), Some("2"))
        );
        assert_eq!(c[5], "10.0.0.5");
        assert_eq!(c[6], "<none>");
        assert_eq!(pod_cells(&pod(running, true))[2], "Terminating");
        let failed = json!({"phase": "Failed", "containerStatuses": [
            {"name": "a", "state": {"terminated": {"exitCode": 3}}}]});
        assert_eq!(pod_cells(&pod(failed.clone(), false))[2], "ExitCode:3");
        assert_eq!(
            pod_cells(&pod(failed, true))[2],
            "ExitCode:3",
            "terminal: not Terminating"
        );
        assert_eq!(
            pod_cells(&pod(json!({"phase": "Pending"}), false))[2],
            "Pending"
        );
    }

    #[test]
    fn node_status_roles_and_addresses_follow_upstreams_printer() {
        let node = json!({"metadata": {"name": "n", "labels": {
                "node-role.kubernetes.io/worker": "", "kubernetes.io/role": "edge"}},
            "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "Unknown"}],
                       "addresses": [{"type": "Hostname", "address": "n"},
                                     {"type": "InternalIP", "address": "10.0.0.1"}],
                       "nodeInfo": {"kubeletVersion": "v1.32.0", "osImage": "Debian",
                                    "containerRuntimeVersion": "docker://20.10.24"}}});
        let c = node_cells(&node);
        assert_eq!(c[1], "NotReady,SchedulingDisabled");
        assert_eq!(c[2], "edge,worker");
        assert_eq!(
            (c[5].as_str(), c[6].as_str()),
            (Some("10.0.0.1"), Some("<none>"))
        );
        assert_eq!(c[8], "<unknown>");
        assert_eq!(
            node_cells(&json!({"metadata": {"name": "x"}}))[1],
            "Unknown"
        );
        assert!(wants_table(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
        ));
        assert!(!wants_table("application/json"));
    }
}
