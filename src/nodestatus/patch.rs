//! The two-way strategic merge patch from the Node last read to the Node with its new
//! status (upstream `PatchNodeStatus` → `preparePatchBytesforNodeStatus` →
//! `strategicpatch.CreateTwoWayMergePatch`), pure over JSON values.
//!
//! Maps are diffed recursively (a key gone is `null`); lists with a patch merge key in
//! the Node's schema (`status.conditions` by `type`, `metadata.ownerReferences` by
//! `uid`) are diffed element by element, changed elements carrying their key, removed
//! ones as `{"$patch": "delete"}`, with `$setElementOrder/<list>` naming the new order;
//! every other list is replaced whole. The spec is never patched (the new Node's spec
//! is the old one's), and `status.addresses`, mis-annotated upstream as merged by
//! `type`, is sent whole with a `{"$patch": "replace"}` element when it changed (upstream
//! `fixupPatchForNodeStatusAddresses`).

use serde_json::{Map, Value};

/// The merge key of the list at `path` (dot-joined keys from the Node's root), if the
/// Node's schema gives it one that this diff uses.
fn merge_key(path: &str) -> Option<&'static str> {
    match path {
        "status.conditions" => Some("type"),
        "status.addresses" => Some("type"),
        "metadata.ownerReferences" => Some("uid"),
        _ => None,
    }
}

/// The strategic merge patch taking `old` to `new` (whole Node objects as JSON), with
/// `new`'s spec reset to `old`'s. An empty object when nothing differs.
pub(crate) fn node_status_patch(old: &Value, new: &Value) -> Value {
    let mut new = new.clone();
    if let Some(obj) = new.as_object_mut() {
        match old.get("spec") {
            Some(spec) => obj.insert("spec".into(), spec.clone()),
            None => obj.remove("spec"),
        };
    }
    let old_addrs = old
        .pointer("/status/addresses")
        .filter(|a| a.as_array().is_some_and(|a| !a.is_empty()));
    let new_addrs = new.pointer("/status/addresses").cloned();
    let manual = old_addrs.is_some() && old_addrs != new_addrs.as_ref();
    if manual {
        if let Some(st) = new.get_mut("status").and_then(Value::as_object_mut) {
            st.insert(
                "addresses".into(),
                old_addrs.cloned().unwrap_or(Value::Null),
            );
        }
    }
    let (Some(o), Some(n)) = (old.as_object(), new.as_object()) else {
        return new;
    };
    let mut patch = diff_maps(o, n, "");
    if manual {
        let mut list = new_addrs
            .and_then(|a| a.as_array().cloned())
            .unwrap_or_default();
        list.push(serde_json::json!({"$patch": "replace"}));
        let status = patch
            .entry("status")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(st) = status.as_object_mut() {
            st.insert("addresses".into(), Value::Array(list));
        }
    }
    Value::Object(patch)
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Upstream `diffMaps` for a two-way patch (deletions as `null`).
fn diff_maps(old: &Map<String, Value>, new: &Map<String, Value>, path: &str) -> Map<String, Value> {
    let mut patch = Map::new();
    for (k, nv) in new {
        let p = child(path, k);
        match old.get(k) {
            None if nv.is_null() => {}
            None => {
                patch.insert(k.clone(), nv.clone());
            }
            Some(ov) if ov == nv => {}
            Some(ov) => match (ov, nv) {
                (Value::Object(o), Value::Object(n)) => {
                    let d = diff_maps(o, n, &p);
                    if !d.is_empty() {
                        patch.insert(k.clone(), Value::Object(d));
                    }
                }
                (Value::Array(o), Value::Array(n)) => match merge_key(&p) {
                    Some(key) => diff_merge_list(o, n, key, k, &mut patch),
                    None => {
                        patch.insert(k.clone(), nv.clone());
                    }
                },
                _ => {
                    patch.insert(k.clone(), nv.clone());
                }
            },
        }
    }
    for k in old.keys() {
        if !new.contains_key(k) {
            patch.insert(k.clone(), Value::Null);
        }
    }
    patch
}

/// A list of maps merged by `key`: changed and new elements (changed ones as their
/// diff plus the key), removed ones as delete directives, and the new order.
fn diff_merge_list(
    old: &[Value],
    new: &[Value],
    key: &str,
    field: &str,
    patch: &mut Map<String, Value>,
) {
    let key_of = |v: &Value| v.get(key).cloned().unwrap_or(Value::Null);
    let mut elements = Vec::new();
    for n in new {
        let kv = key_of(n);
        match old.iter().find(|o| key_of(o) == kv) {
            None => elements.push(n.clone()),
            Some(o) if o == n => {}
            Some(o) => match (o.as_object(), n.as_object()) {
                (Some(om), Some(nm)) => {
                    let mut d = diff_maps(om, nm, "");
                    if !d.is_empty() {
                        d.insert(key.to_string(), kv);
                        elements.push(Value::Object(d));
                    }
                }
                _ => elements.push(n.clone()),
            },
        }
    }
    for o in old {
        let kv = key_of(o);
        if !new.iter().any(|n| key_of(n) == kv) {
            let mut d = Map::new();
            d.insert("$patch".into(), "delete".into());
            d.insert(key.to_string(), kv);
            elements.push(Value::Object(d));
        }
    }
    let old_order: Vec<Value> = old.iter().map(key_of).collect();
    let new_order: Vec<Value> = new.iter().map(key_of).collect();
    if elements.is_empty() && old_order == new_order {
        return;
    }
    let order = new_order
        .into_iter()
        .map(|kv| {
            let mut m = Map::new();
            m.insert(key.to_string(), kv);
            Value::Object(m)
        })
        .collect();
    patch.insert(format!("$setElementOrder/{field}"), Value::Array(order));
    if !elements.is_empty() {
        patch.insert(field.to_string(), Value::Array(elements));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conds(hb: &str, ready: &str) -> Value {
        json!([
            {"type": "MemoryPressure", "status": "False", "lastHeartbeatTime": hb},
            {"type": "Ready", "status": ready, "lastHeartbeatTime": hb}
        ])
    }

    #[test]
    fn table() {
        let addr = |ip: &str| json!([{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": "n"}]);
        let cases: Vec<(&str, Value, Value, Value)> = vec![
            (
                "nothing changed",
                json!({"status": {"conditions": conds("t1", "True")}}),
                json!({"status": {"conditions": conds("t1", "True")}}),
                json!({}),
            ),
            (
                "heartbeats only: each condition with its key, and the order",
                json!({"status": {"conditions": conds("t1", "True")}}),
                json!({"status": {"conditions": conds("t2", "True")}}),
                json!({"status": {
                 "$setElementOrder/conditions": [{"type": "MemoryPressure"}, {"type": "Ready"}],
                 "conditions": [
                     {"type": "MemoryPressure", "lastHeartbeatTime": "t2"},
                     {"type": "Ready", "lastHeartbeatTime": "t2"}]}}),
            ),
            (
                "a condition added and one removed",
                json!({"status": {"conditions": [{"type": "A", "status": "True"}, {"type": "B", "status": "True"}]}}),
                json!({"status": {"conditions": [{"type": "A", "status": "True"}, {"type": "C", "status": "False"}]}}),
                json!({"status": {
                 "$setElementOrder/conditions": [{"type": "A"}, {"type": "C"}],
                 "conditions": [{"type": "C", "status": "False"}, {"$patch": "delete", "type": "B"}]}}),
            ),
            (
                "scalars, maps and plain lists: replaced; gone keys null",
                json!({"status": {"nodeInfo": {"kubeletVersion": "a", "x": 1}, "images": [{"names": ["a"]}],
                    "capacity": {"cpu": "2"}}}),
                json!({"status": {"nodeInfo": {"kubeletVersion": "b"}, "images": [{"names": ["b"]}],
                    "capacity": {"cpu": "2", "pods": "110"}}}),
                json!({"status": {"nodeInfo": {"kubeletVersion": "b", "x": null},
                    "images": [{"names": ["b"]}], "capacity": {"pods": "110"}}}),
            ),
            (
                "the spec is never patched",
                json!({"spec": {"podCIDR": "a"}, "status": {}}),
                json!({"spec": {"podCIDR": "b", "unschedulable": true}, "status": {}}),
                json!({}),
            ),
            (
                "addresses that changed are replaced whole",
                json!({"status": {"addresses": addr("10.0.0.1")}}),
                json!({"status": {"addresses": addr("10.0.0.2")}}),
                json!({"status": {"addresses": [
                 {"type": "InternalIP", "address": "10.0.0.2"}, {"type": "Hostname", "address": "n"},
                 {"$patch": "replace"}]}}),
            ),
            (
                "first addresses are merged as new elements",
                json!({"status": {}}),
                json!({"status": {"addresses": addr("10.0.0.1")}}),
                json!({"status": {"addresses": addr("10.0.0.1")}}),
            ),
            (
                "labels ride along in metadata",
                json!({"metadata": {"labels": {"a": "1"}}, "status": {}}),
                json!({"metadata": {"labels": {"a": "2"}}, "status": {}}),
                json!({"metadata": {"labels": {"a": "2"}}}),
            ),
        ];
        for (name, old, new, want) in cases {
            assert_eq!(node_status_patch(&old, &new), want, "{name}");
        }
    }
}
