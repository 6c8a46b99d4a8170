//! The pure rules of a pod status write (upstream `status_manager.go`'s
//! `mergePodStatus`, `checkContainerStateTransition` and the terminal-phase guard, and `statusutil.PatchPodStatus`'s
//! two-way strategic merge patch): what the kubelet sends is the status it computed,
//! merged with the conditions it does not own, never moving a terminal phase back,
//! as the difference from what the API server holds.
//!
//! The patch is computed over JSON values with `PodStatus`'s patch strategies:
//! `conditions` merge by `type`, `podIPs` and `hostIPs` by `ip`, every other list is
//! replaced whole, maps are diffed recursively and a field that disappears is `null`.
//! As client-go's `CreateTwoWayMergePatch`, a merged list that changed carries
//! `$setElementOrder/<list>` and its removed items as `{"$patch": "delete"}`.

use k8s_openapi::api::core::v1::{PodCondition, PodSpec, PodStatus};
use serde_json::{Map, Value};

/// Conditions the kubelet owns (upstream `PodConditionByKubelet`): computed here, so
/// ours replace the API's; every other condition the API holds is kept.
pub(crate) const KUBELET_CONDITIONS: [&str; 5] = [
    "PodScheduled",
    "Ready",
    "Initialized",
    "ContainersReady",
    "PodReadyToStartContainers",
];

/// True for `Succeeded` and `Failed`.
fn terminal(phase: Option<&str>) -> bool {
    matches!(phase, Some("Succeeded" | "Failed"))
}

/// Upstream `mergePodStatus`, plus the rule that a terminal phase is never left: the
/// status to write, from the API's `old` and the kubelet's `new`.
///
/// - Conditions not owned by the kubelet are kept from `old`, ahead of the kubelet's.
/// - A pod that may still have running containers is not reported terminal yet (its
///   old phase, reason and message stay).
/// - A pod terminal in the API stays so (phase, reason, message).
/// - Once terminal, `Ready` and `ContainersReady` are False (`PodCompleted` or
///   `PodFailed`).
pub(crate) fn merge_pod_status(
    old: &PodStatus,
    new: &PodStatus,
    could_have_running_containers: bool,
) -> PodStatus {
    let mut out = new.clone();
    let mut conditions: Vec<PodCondition> = old
        .conditions
        .iter()
        .flatten()
        .filter(|c| !KUBELET_CONDITIONS.contains(&c.type_.as_str()))
        .cloned()
        .collect();
    conditions.extend(
        new.conditions
            .iter()
            .flatten()
            .filter(|c| KUBELET_CONDITIONS.contains(&c.type_.as_str()))
            .cloned(),
    );
    out.conditions = (!conditions.is_empty()).then_some(conditions);
    // Not the kubelet's to change (the scheduler's, the resource claim controller's).
    out.resource_claim_statuses = old.resource_claim_statuses.clone();
    out.nominated_node_name = old.nominated_node_name.clone();

    let (old_terminal, new_terminal) = (
        terminal(old.phase.as_deref()),
        terminal(new.phase.as_deref()),
    );
    if (!old_terminal && new_terminal && could_have_running_containers)
        || (old_terminal && !new_terminal)
    {
        out.phase = old.phase.clone();
        out.reason = old.reason.clone();
        out.message = old.message.clone();
    }
    if let Some(phase) = out.phase.clone().filter(|p| terminal(Some(p))) {
        let reason = if phase == "Succeeded" {
            "PodCompleted"
        } else {
            "PodFailed"
        };
        for c in out.conditions.iter_mut().flatten() {
            if (c.type_ == "Ready" || c.type_ == "ContainersReady") && c.status == "True" {
                c.status = "False".into();
                c.reason = Some(reason.into());
                c.message = None;
                // The flip is now (upstream: updateLastTransitionTime).
                c.last_transition_time = Some(base::time::k8s_time(std::time::SystemTime::now()));
            }
        }
    }
    out
}

/// Upstream `checkContainerStateTransition`: a container the API shows terminated may
/// not be reported running or waiting again unless the pod's restart policy restarts
/// it (`Always`; `OnFailure` after a non-zero exit) or it is a sidecar (an init
/// container with `restartPolicy: Always`). Err names the container: the whole update
/// is dropped.
pub(crate) fn check_container_state_transition(
    old: &PodStatus,
    new: &PodStatus,
    spec: &PodSpec,
) -> Result<(), String> {
    let restart_policy = spec.restart_policy.as_deref().unwrap_or("Always");
    if restart_policy == "Always" {
        return Ok(());
    }
    let sidecar = |name: &str| {
        spec.init_containers
            .iter()
            .flatten()
            .any(|c| c.name == name && c.restart_policy.as_deref() == Some("Always"))
    };
    let lists = [
        (&old.container_statuses, &new.container_statuses),
        (&old.init_container_statuses, &new.init_container_statuses),
    ];
    for (olds, news) in lists {
        for o in olds.iter().flatten() {
            let Some(t) = o.state.as_ref().and_then(|s| s.terminated.as_ref()) else {
                continue;
            };
            if (t.exit_code != 0 && restart_policy == "OnFailure") || sidecar(&o.name) {
                continue;
            }
            let back = news.iter().flatten().any(|n| {
                n.name == o.name && n.state.as_ref().is_none_or(|s| s.terminated.is_none())
            });
            if back {
                return Err(format!(
                    "terminated container {} attempted illegal transition to non-terminated state",
                    o.name
                ));
            }
        }
    }
    Ok(())
}

/// The body of upstream's `PatchPodStatus`: a two-way strategic merge patch from
/// `{status: old}` to `{metadata: {uid}, status: new}`. None when the statuses are
/// the same (the uid alone is no change: nothing to send).
pub(crate) fn status_patch(uid: &str, old: &PodStatus, new: &PodStatus) -> Option<Value> {
    let old = base::json::to_value(old).unwrap_or(Value::Null);
    let new = base::json::to_value(new).unwrap_or(Value::Null);
    let diff = match (&old, &new) {
        (Value::Object(o), Value::Object(n)) => diff_maps(o, n, "")?,
        (_, Value::Object(n)) if !n.is_empty() => n.clone(),
        _ => return None,
    };
    Some(serde_json::json!({"metadata": {"uid": uid}, "status": diff}))
}

/// The merge key of a list at `path` (PodStatus's `patchMergeKey`s), if it merges.
fn merge_key(path: &str) -> Option<&'static str> {
    match path {
        "conditions" => Some("type"),
        "podIPs" | "hostIPs" => Some("ip"),
        "resourceClaimStatuses" => Some("name"),
        _ => None,
    }
}

/// The patch turning map `old` into `new`; None when they are equal.
fn diff_maps(
    old: &Map<String, Value>,
    new: &Map<String, Value>,
    path: &str,
) -> Option<Map<String, Value>> {
    let mut out = Map::new();
    for (k, nv) in new {
        let child = if path.is_empty() {
            k.clone()
        } else {
            format!("{path}.{k}")
        };
        match old.get(k) {
            Some(ov) if ov == nv => {}
            Some(Value::Object(om)) if nv.is_object() => {
                if let Some(d) = nv.as_object().and_then(|nm| diff_maps(om, nm, &child)) {
                    out.insert(k.clone(), Value::Object(d));
                }
            }
            Some(Value::Array(ol)) if nv.is_array() && merge_key(&child).is_some() => {
                let key = merge_key(&child).unwrap_or_default();
                let nl = nv.as_array().map(Vec::as_slice).unwrap_or_default();
                if let Some(d) = diff_merge_list(ol, nl, key, &child) {
                    out.insert(format!("$setElementOrder/{k}"), order_of(nl, key));
                    if !d.is_empty() {
                        out.insert(k.clone(), Value::Array(d));
                    }
                }
            }
            _ => {
                out.insert(k.clone(), nv.clone());
            }
        }
    }
    for k in old.keys() {
        if !new.contains_key(k) {
            out.insert(k.clone(), Value::Null);
        }
    }
    (!out.is_empty()).then_some(out)
}

/// `[{key: v}, ...]` in `list`'s order.
fn order_of(list: &[Value], key: &str) -> Value {
    Value::Array(
        list.iter()
            .filter_map(|i| i.get(key))
            .map(|v| {
                let mut m = Map::new();
                m.insert(key.to_string(), v.clone());
                Value::Object(m)
            })
            .collect(),
    )
}

/// The patch of a list merged by `key`: changed or new items (each with its key and
/// what changed), removed items as `$patch: delete`. None when nothing changed but,
/// perhaps, the order (then the order alone is sent, as client-go does).
fn diff_merge_list(old: &[Value], new: &[Value], key: &str, path: &str) -> Option<Vec<Value>> {
    let find = |list: &[Value], k: &Value| list.iter().find(|i| i.get(key) == Some(k)).cloned();
    let mut out = Vec::new();
    for n in new {
        let Some(k) = n.get(key) else { continue };
        match (find(old, k), n.as_object()) {
            (Some(o), _) if &o == n => {}
            (Some(Value::Object(om)), Some(nm)) => {
                if let Some(mut d) = diff_maps(&om, nm, path) {
                    d.insert(key.to_string(), k.clone());
                    out.push(Value::Object(d));
                }
            }
            _ => out.push(n.clone()),
        }
    }
    for o in old {
        let Some(k) = o.get(key) else { continue };
        if find(new, k).is_none() {
            let mut m = Map::new();
            m.insert("$patch".into(), "delete".into());
            m.insert(key.to_string(), k.clone());
            out.push(Value::Object(m));
        }
    }
    let reordered = {
        let ok: Vec<_> = old.iter().filter_map(|i| i.get(key)).collect();
        let nk: Vec<_> = new.iter().filter_map(|i| i.get(key)).collect();
        ok.len() == nk.len() && ok != nk
    };
    (!out.is_empty() || reordered).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn status(v: Value) -> PodStatus {
        serde_json::from_value(v).expect("status")
    }

    fn cond(t: &str, s: &str) -> Value {
        json!({"type": t, "status": s})
    }

    #[test]
    fn same_status_is_no_patch() {
        let s = status(json!({"phase": "Running", "conditions": [cond("Ready", "True")]}));
        assert_eq!(status_patch("u1", &s, &s), None);
    }

    #[test]
    fn a_changed_condition_is_merged_by_type_with_its_order() {
        let old = status(json!({"phase": "Running",
            "conditions": [cond("Ready", "True"), cond("PodScheduled", "True")]}));
        let new = status(json!({"phase": "Running",
            "conditions": [cond("Ready", "False"), cond("PodScheduled", "True")]}));
        assert_eq!(
            status_patch("u1", &old, &new),
            Some(json!({"metadata": {"uid": "u1"}, "status": {
                "$setElementOrder/conditions": [{"type": "Ready"}, {"type": "PodScheduled"}],
                "conditions": [{"status": "False", "type": "Ready"}]}}))
        );
    }

    #[test]
    fn a_first_status_sends_everything_and_lists_replace_or_merge() {
        let old = PodStatus::default();
        let new = status(json!({"phase": "Running", "podIP": "10.0.0.2",
            "podIPs": [{"ip": "10.0.0.2"}],
            "containerStatuses": [{"name": "a", "ready": true, "restartCount": 0,
                "image": "x", "imageID": ""}]}));
        let p = status_patch("u1", &old, &new).expect("a patch");
        assert_eq!(p["status"]["phase"], "Running");
        assert_eq!(p["status"]["podIPs"], json!([{"ip": "10.0.0.2"}]));
        assert_eq!(p["status"]["containerStatuses"][0]["name"], "a");
        // A changed container status replaces the whole list (no merge key).
        let newer = status(json!({"phase": "Running", "podIP": "10.0.0.2",
            "podIPs": [{"ip": "10.0.0.2"}],
            "containerStatuses": [{"name": "a", "ready": false, "restartCount": 0,
                "image": "x", "imageID": ""}]}));
        let p = status_patch("u1", &new, &newer).expect("a patch");
        assert_eq!(
            p["status"],
            json!({"containerStatuses": [{"name": "a", "ready": false, "restartCount": 0,
                "image": "x", "imageID": ""}]})
        );
    }

    #[test]
    fn a_terminated_container_comes_back_only_if_the_policy_restarts_it() {
        let done = |code: i32| {
            status(json!({"containerStatuses": [{"name": "a", "ready": false,
                "restartCount": 0, "image": "x", "imageID": "",
                "state": {"terminated": {"exitCode": code}}}]}))
        };
        let running = status(json!({"containerStatuses": [{"name": "a", "ready": true,
            "restartCount": 1, "image": "x", "imageID": "",
            "state": {"running": {}}}]}));
        let spec = |policy: &str| -> PodSpec {
            serde_json::from_value(json!({"restartPolicy": policy, "containers": []}))
                .expect("spec")
        };
        let check = check_container_state_transition;
        assert!(check(&done(0), &running, &spec("Always")).is_ok());
        assert!(check(&done(1), &running, &spec("OnFailure")).is_ok());
        assert!(check(&done(0), &running, &spec("OnFailure")).is_err());
        assert!(check(&done(1), &running, &spec("Never")).is_err());
        assert!(check(&done(1), &done(1), &spec("Never")).is_ok());
        // A sidecar restarts whatever the pod's policy.
        let as_init = |s: PodStatus| PodStatus {
            init_container_statuses: s.container_statuses,
            ..Default::default()
        };
        let mut with_sidecar = spec("Never");
        with_sidecar.init_containers = Some(vec![serde_json::from_value(
            json!({"name": "a", "restartPolicy": "Always"}),
        )
        .expect("container")]);
        assert!(check(&as_init(done(1)), &as_init(running.clone()), &with_sidecar).is_ok());
        assert!(check(&as_init(done(1)), &as_init(running), &spec("Never")).is_err());
    }

    #[test]
    fn a_new_order_alone_is_sent_as_the_order() {
        let old =
            status(json!({"conditions": [cond("Ready", "True"), cond("PodScheduled", "True")]}));
        let new =
            status(json!({"conditions": [cond("PodScheduled", "True"), cond("Ready", "True")]}));
        assert_eq!(
            status_patch("u1", &old, &new),
            Some(json!({"metadata": {"uid": "u1"}, "status": {
                "$setElementOrder/conditions": [{"type": "PodScheduled"}, {"type": "Ready"}]}}))
        );
    }

    #[test]
    fn removed_fields_are_null_and_removed_conditions_deleted() {
        let old = status(json!({"phase": "Failed", "reason": "Evicted",
            "conditions": [cond("Ready", "False"), cond("Initialized", "True")]}));
        let new = status(json!({"phase": "Failed", "conditions": [cond("Ready", "False")]}));
        let p = status_patch("u1", &old, &new).expect("a patch");
        assert_eq!(
            p["status"],
            json!({"reason": null,
                "$setElementOrder/conditions": [{"type": "Ready"}],
                "conditions": [{"$patch": "delete", "type": "Initialized"}]})
        );
    }

    #[test]
    fn merge_keeps_conditions_the_kubelet_does_not_own() {
        let old = status(json!({"phase": "Running", "conditions": [
            cond("DisruptionTarget", "True"), cond("Ready", "True"), cond("example.com/gate", "True")]}));
        let new = status(json!({"phase": "Running", "conditions": [cond("Ready", "False")]}));
        let m = merge_pod_status(&old, &new, true);
        let types: Vec<_> = m
            .conditions
            .iter()
            .flatten()
            .map(|c| (c.type_.as_str(), c.status.as_str()))
            .collect();
        assert_eq!(
            types,
            [
                ("DisruptionTarget", "True"),
                ("example.com/gate", "True"),
                ("Ready", "False")
            ]
        );
    }

    #[test]
    fn a_terminal_phase_never_goes_back() {
        let old = status(json!({"phase": "Succeeded", "conditions": [cond("Ready", "False")]}));
        let new = status(json!({"phase": "Running", "conditions": [cond("Ready", "True")]}));
        let m = merge_pod_status(&old, &new, false);
        assert_eq!(m.phase.as_deref(), Some("Succeeded"));
        let ready = m
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "Ready")
            .expect("ready");
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_deref()),
            ("False", Some("PodCompleted"))
        );
    }

    #[test]
    fn terminal_waits_until_no_container_can_run() {
        let old = status(json!({"phase": "Running"}));
        let new = status(json!({"phase": "Failed", "reason": "DeadlineExceeded"}));
        let m = merge_pod_status(&old, &new, true);
        assert_eq!(
            (m.phase.as_deref(), m.reason.as_deref()),
            (Some("Running"), None)
        );
        let m = merge_pod_status(&old, &new, false);
        assert_eq!(
            (m.phase.as_deref(), m.reason.as_deref()),
            (Some("Failed"), Some("DeadlineExceeded"))
        );
    }

    #[test]
    fn terminal_forces_ready_false() {
        let old = status(json!({"phase": "Running"}));
        let new = status(json!({"phase": "Failed",
            "conditions": [cond("Ready", "True"), cond("ContainersReady", "True")]}));
        let m = merge_pod_status(&old, &new, false);
        for c in m.conditions.iter().flatten() {
            assert_eq!(
                (c.status.as_str(), c.reason.as_deref()),
                ("False", Some("PodFailed"))
            );
        }
    }
}
