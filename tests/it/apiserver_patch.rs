//! The stand-in API server's three patch formats, applied to objects as JSON values:
//! strategic merge patch (apimachinery's `strategicpatch`), JSON merge patch (RFC 7386)
//! and JSON patch (RFC 6902).
//!
//! Where it is not faithful: the strategic merge patch knows its patch strategies from a
//! small table of paths ([`strategy`]) instead of the Go structs' `patchStrategy` /
//! `patchMergeKey` tags, so a list not in the table is replaced whole (upstream would
//! merge some of them, e.g. containers' `resizePolicy`); `$setElementOrder` puts the
//! listed elements first in its order and keeps server-only elements after them in their
//! old order (upstream interleaves them by their old neighbours); a `$retainKeys` list is
//! applied but not checked against the patch's own keys.

use serde_json::{Map, Value};

/// How a list at a path is patched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Replaced whole (no `patchStrategy`).
    Replace,
    /// Maps merged by this key (`patchStrategy:"merge"`, `patchMergeKey`).
    MergeKey(&'static str),
    /// Primitive values merged as a set (`patchStrategy:"merge"` on a list of strings).
    MergePrimitive,
}

/// The strategy of the list at `path` (map keys from the object's root; a list element
/// adds nothing to the path). `kind` is the object's kind.
pub fn strategy(kind: &str, path: &[String]) -> Strategy {
    let p: Vec<&str> = path.iter().map(String::as_str).collect();
    use Strategy::*;
    match (kind, p.as_slice()) {
        (_, ["metadata", "ownerReferences"]) => MergeKey("uid"),
        (_, ["metadata", "finalizers"]) => MergePrimitive,
        ("Node", ["status", "conditions"]) => MergeKey("type"),
        ("Node", ["status", "addresses"]) => MergeKey("type"),
        ("Node", ["status", "volumesAttached"]) => MergeKey("name"),
        ("Node", ["spec", "podCIDRs"]) => MergePrimitive,
        ("Pod", ["status", "conditions"]) => MergeKey("type"),
        ("Pod", ["status", "podIPs"]) => MergeKey("ip"),
        ("Pod", ["status", "hostIPs"]) => MergeKey("ip"),
        ("Pod", ["status", "resourceClaimStatuses"]) => MergeKey("name"),
        ("Pod", ["spec", "containers" | "initContainers" | "ephemeralContainers"]) => {
            MergeKey("name")
        }
        ("Pod", ["spec", "volumes"]) => MergeKey("name"),
        ("Pod", ["spec", "imagePullSecrets"]) => MergeKey("name"),
        ("Pod", ["spec", _, "ports"]) => MergeKey("containerPort"),
        ("Pod", ["spec", _, "env"]) => MergeKey("name"),
        ("Pod", ["spec", _, "volumeMounts"]) => MergeKey("mountPath"),
        ("Pod", ["spec", _, "volumeDevices"]) => MergeKey("devicePath"),
        _ => Replace,
    }
}

/// A patch that cannot be applied (the API server answers 422 or 400).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchError(pub String);

type R<T> = Result<T, PatchError>;

fn err<T>(msg: impl Into<String>) -> R<T> {
    Err(PatchError(msg.into()))
}

/// Applies a strategic merge patch to `original` (an object of `kind`).
pub fn strategic_merge(kind: &str, original: &Value, patch: &Value) -> R<Value> {
    let Value::Object(p) = patch else {
        return err("a strategic merge patch must be a JSON object");
    };
    let o = match original {
        Value::Object(o) => o.clone(),
        _ => Map::new(),
    };
    match merge_map(kind, &mut Vec::new(), o, p)? {
        Some(m) => Ok(Value::Object(m)),
        None => Ok(Value::Object(Map::new())),
    }
}

/// Merges patch map `p` into `o`; `None`: the map is deleted (`$patch: delete`).
fn merge_map(
    kind: &str,
    path: &mut Vec<String>,
    mut o: Map<String, Value>,
    p: &Map<String, Value>,
) -> R<Option<Map<String, Value>>> {
    match p.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            let mut out = p.clone();
            out.remove("$patch");
            return Ok(Some(strip_directives(out)));
        }
        Some("delete") => return Ok(None),
        Some(other) => return err(format!("unknown patch type: {other}")),
        None => {}
    }
    // $deleteFromPrimitiveList/<key> first, so a merge of the same list adds after it.
    for (k, v) in p {
        if let Some(list) = k.strip_prefix("$deleteFromPrimitiveList/") {
            let Value::Array(gone) = v else {
                return err(format!("{k} must be a list"));
            };
            if let Some(Value::Array(items)) = o.get_mut(list) {
                items.retain(|i| !gone.contains(i));
            }
        }
    }
    for (k, pv) in p {
        if k.starts_with('$') {
            continue;
        }
        if pv.is_null() {
            o.remove(k);
            continue;
        }
        path.push(k.clone());
        let merged = match (o.remove(k), pv) {
            (Some(Value::Object(ov)), Value::Object(pm)) => {
                merge_map(kind, path, ov, pm)?.map(Value::Object)
            }
            (Some(Value::Array(ov)), Value::Array(pl)) => {
                Some(Value::Array(merge_list(kind, path, ov, pl)?))
            }
            (_, Value::Object(pm)) => merge_map(kind, path, Map::new(), pm)?.map(Value::Object),
            (_, Value::Array(pl)) => Some(Value::Array(merge_list(kind, path, Vec::new(), pl)?)),
            (_, v) => Some(v.clone()),
        };
        path.pop();
        if let Some(v) = merged {
            o.insert(k.clone(), v);
        }
    }
    for (k, order) in p {
        if let Some(list) = k.strip_prefix("$setElementOrder/") {
            let Value::Array(order) = order else {
                return err(format!("{k} must be a list"));
            };
            path.push(list.to_string());
            let key = strategy(kind, path);
            path.pop();
            if let Some(Value::Array(items)) = o.get_mut(list) {
                reorder(items, order, key);
            }
        }
    }
    if let Some(keep) = p.get("$retainKeys") {
        let Value::Array(keep) = keep else {
            return err("$retainKeys must be a list");
        };
        o.retain(|k, _| keep.iter().any(|x| x.as_str() == Some(k)));
    }
    Ok(Some(o))
}

/// A map with its directives removed, recursively (what `$patch: replace` stores).
fn strip_directives(m: Map<String, Value>) -> Map<String, Value> {
    m.into_iter()
        .filter(|(k, _)| !k.starts_with('$'))
        .map(|(k, v)| {
            let v = match v {
                Value::Object(inner) => Value::Object(strip_directives(inner)),
                other => other,
            };
            (k, v)
        })
        .collect()
}

fn merge_list(kind: &str, path: &mut Vec<String>, o: Vec<Value>, p: &[Value]) -> R<Vec<Value>> {
    // A `{"$patch": "replace"}` element replaces the whole list with the others.
    if p.iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        return Ok(p
            .iter()
            .filter(|i| i.get("$patch").is_none())
            .cloned()
            .map(|v| match v {
                Value::Object(m) => Value::Object(strip_directives(m)),
                v => v,
            })
            .collect());
    }
    match strategy(kind, path) {
        Strategy::Replace => Ok(p
            .iter()
            .cloned()
            .map(|v| match v {
                Value::Object(m) => Value::Object(strip_directives(m)),
                v => v,
            })
            .collect()),
        Strategy::MergePrimitive => {
            let mut out = o;
            for v in p {
                if !out.contains(v) {
                    out.push(v.clone());
                }
            }
            Ok(out)
        }
        Strategy::MergeKey(key) => {
            let mut out = o;
            for item in p {
                let Value::Object(pm) = item else {
                    return err(format!(
                        "a list merged by {key} ({}) holds a non-map element",
                        path.join(".")
                    ));
                };
                let Some(kv) = pm.get(key) else {
                    return err(format!(
                        "map: {item} does not contain declared merge key: {key}"
                    ));
                };
                let at = out.iter().position(|e| e.get(key) == Some(kv));
                if pm.get("$patch").and_then(Value::as_str) == Some("delete") {
                    out.retain(|e| e.get(key) != Some(kv));
                    continue;
                }
                match at {
                    Some(i) => {
                        let Value::Object(om) = std::mem::take(&mut out[i]) else {
                            out[i] = Value::Object(strip_directives(pm.clone()));
                            continue;
                        };
                        match merge_map(kind, path, om, pm)? {
                            Some(m) => out[i] = Value::Object(m),
                            None => {
                                out.remove(i);
                            }
                        }
                    }
                    None => {
                        if let Some(m) = merge_map(kind, path, Map::new(), pm)? {
                            out.push(Value::Object(m));
                        }
                    }
                }
            }
            Ok(out)
        }
    }
}

/// `$setElementOrder`: the listed elements first, in its order; the rest after them.
fn reorder(items: &mut Vec<Value>, order: &[Value], key: Strategy) {
    let id = |v: &Value| -> Value {
        match key {
            Strategy::MergeKey(k) => v.get(k).cloned().unwrap_or(Value::Null),
            _ => v.clone(),
        }
    };
    let mut rest = std::mem::take(items);
    for o in order {
        let want = id(o);
        if let Some(i) = rest.iter().position(|e| id(e) == want) {
            items.push(rest.remove(i));
        }
    }
    items.append(&mut rest);
}

/// Applies a JSON merge patch (RFC 7386).
pub fn merge_patch(original: &Value, patch: &Value) -> Value {
    match patch {
        Value::Object(p) => {
            let mut o = match original {
                Value::Object(o) => o.clone(),
                _ => Map::new(),
            };
            for (k, v) in p {
                if v.is_null() {
                    o.remove(k);
                } else {
                    let merged = merge_patch(o.get(k).unwrap_or(&Value::Null), v);
                    o.insert(k.clone(), merged);
                }
            }
            Value::Object(o)
        }
        other => other.clone(),
    }
}

/// Applies a JSON patch (RFC 6902): add, remove, replace, move, copy, test.
pub fn json_patch(original: &Value, patch: &Value) -> R<Value> {
    let Value::Array(ops) = patch else {
        return err("a JSON patch must be a list of operations");
    };
    let mut doc = original.clone();
    for op in ops {
        let name = op["op"].as_str().unwrap_or_default();
        let path = op["path"]
            .as_str()
            .ok_or_else(|| PatchError(format!("operation {op} has no path")))?;
        match name {
            "add" => add(&mut doc, path, value_of(op)?)?,
            "remove" => {
                remove(&mut doc, path)?;
            }
            "replace" => {
                remove(&mut doc, path)?;
                add(&mut doc, path, value_of(op)?)?;
            }
            "move" | "copy" => {
                let from = op["from"]
                    .as_str()
                    .ok_or_else(|| PatchError(format!("operation {op} has no from")))?;
                let v = if name == "move" {
                    remove(&mut doc, from)?
                } else {
                    doc.pointer(from)
                        .cloned()
                        .ok_or_else(|| PatchError(format!("missing value at {from}")))?
                };
                add(&mut doc, path, v)?;
            }
            "test" => {
                if doc.pointer(path) != Some(&value_of(op)?) {
                    return err(format!("testing value {path} failed"));
                }
            }
            other => return err(format!("unexpected kind: {other}")),
        }
    }
    Ok(doc)
}

fn value_of(op: &Value) -> R<Value> {
    op.get("value")
        .cloned()
        .ok_or_else(|| PatchError(format!("operation {op} has no value")))
}

/// Splits a JSON pointer into its parent pointer and its last token (unescaped).
fn split(path: &str) -> R<(&str, String)> {
    let Some(i) = path.rfind('/') else {
        return err(format!("invalid JSON pointer {path:?}"));
    };
    let last = path[i + 1..].replace("~1", "/").replace("~0", "~");
    Ok((&path[..i], last))
}

fn add(doc: &mut Value, path: &str, v: Value) -> R<()> {
    if path.is_empty() {
        *doc = v;
        return Ok(());
    }
    let (parent, last) = split(path)?;
    match doc.pointer_mut(parent) {
        Some(Value::Object(m)) => {
            m.insert(last, v);
            Ok(())
        }
        Some(Value::Array(a)) => {
            let i = if last == "-" {
                a.len()
            } else {
                last.parse::<usize>()
                    .map_err(|_| PatchError(format!("invalid index in {path}")))?
            };
            if i > a.len() {
                return err(format!(
                    "add operation does not apply: index out of range in {path}"
                ));
            }
            a.insert(i, v);
            Ok(())
        }
        _ => err(format!(
            "add operation does not apply: doc is missing path: {path:?}"
        )),
    }
}

fn remove(doc: &mut Value, path: &str) -> R<Value> {
    let (parent, last) = split(path)?;
    let missing = || {
        PatchError(format!(
            "remove operation does not apply: doc is missing path: {path:?}"
        ))
    };
    match doc.pointer_mut(parent) {
        Some(Value::Object(m)) => m.remove(&last).ok_or_else(missing),
        Some(Value::Array(a)) => {
            let i: usize = last.parse().map_err(|_| missing())?;
            if i < a.len() {
                Ok(a.remove(i))
            } else {
                Err(missing())
            }
        }
        _ => Err(missing()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    // The benches that include this file compile it without its #[test] functions.
    #[allow(unused_imports)]
    use serde_json::json;

    fn smp(kind: &str, o: Value, p: Value) -> Value {
        strategic_merge(kind, &o, &p).expect("patch applies")
    }

    #[test]
    fn node_status_conditions_and_addresses_merge_by_type_and_follow_set_element_order() {
        let node = json!({"status": {
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "reason": "A"},
                {"type": "Ready", "status": "False", "reason": "KubeletNotReady"}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"},
                          {"type": "Hostname", "address": "n1"}],
            "images": [{"names": ["a"]}, {"names": ["b"]}]}});
        let patch = json!({"status": {
            "$setElementOrder/conditions": [{"type": "Ready"}, {"type": "MemoryPressure"}],
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.2"}],
            "images": [{"names": ["c"]}]}});
        let got = smp("Node", node, patch);
        assert_eq!(
            got["status"]["conditions"],
            json!([{"type": "Ready", "status": "True", "reason": "KubeletReady"},
                   {"type": "MemoryPressure", "status": "False", "reason": "A"}])
        );
        assert_eq!(
            got["status"]["addresses"],
            json!([{"type": "InternalIP", "address": "10.0.0.2"},
                   {"type": "Hostname", "address": "n1"}])
        );
        // No merge key: replaced.
        assert_eq!(got["status"]["images"], json!([{"names": ["c"]}]));
        // Directives are never stored.
        assert!(got["status"].get("$setElementOrder/conditions").is_none());
    }

    #[test]
    fn null_deletes_maps_merge_and_patch_directives_delete_and_replace() {
        let o = json!({"metadata": {"labels": {"a": "1", "b": "2"}},
            "status": {"podIPs": [{"ip": "1.1.1.1"}, {"ip": "2.2.2.2"}],
                       "conditions": [{"type": "Ready", "status": "True"}],
                       "containerStatuses": [{"name": "a"}, {"name": "b"}]}});
        let p = json!({"metadata": {"labels": {"a": null, "c": "3"}},
            "status": {"podIPs": [{"ip": "1.1.1.1", "$patch": "delete"}],
                       "conditions": [{"type": "Initialized", "status": "True"}],
                       "containerStatuses": [{"name": "b"}]}});
        let got = smp("Pod", o, p);
        assert_eq!(got["metadata"]["labels"], json!({"b": "2", "c": "3"}));
        assert_eq!(got["status"]["podIPs"], json!([{"ip": "2.2.2.2"}]));
        assert_eq!(
            got["status"]["conditions"],
            json!([{"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"}])
        );
        assert_eq!(got["status"]["containerStatuses"], json!([{"name": "b"}]));

        let got = smp(
            "Pod",
            json!({"status": {"conditions": [{"type": "A"}, {"type": "B"}], "x": {"y": 1, "z": 2}}}),
            json!({"status": {"conditions": [{"type": "C"}, {"$patch": "replace"}],
                              "x": {"$patch": "replace", "w": 3}}}),
        );
        assert_eq!(
            got,
            json!({"status": {"conditions": [{"type": "C"}], "x": {"w": 3}}})
        );

        let got = smp(
            "Pod",
            json!({"a": {"b": 1}, "c": 2}),
            json!({"a": {"$patch": "delete"}}),
        );
        assert_eq!(got, json!({"c": 2}));
    }

    #[test]
    fn retain_keys_primitive_lists_and_owner_references() {
        let got = smp(
            "Pod",
            json!({"spec": {"volumes": [{"name": "v", "emptyDir": {}}]},
                   "metadata": {"finalizers": ["a", "b"],
                                "ownerReferences": [{"uid": "1", "name": "x"}]}}),
            json!({"spec": {"volumes": [{"name": "v", "$retainKeys": ["name", "hostPath"],
                                         "hostPath": {"path": "/p"}}]},
                   "metadata": {"$deleteFromPrimitiveList/finalizers": ["a"],
                                "finalizers": ["c"],
                                "ownerReferences": [{"uid": "2", "name": "y"}]}}),
        );
        assert_eq!(
            got["spec"]["volumes"],
            json!([{"name": "v", "hostPath": {"path": "/p"}}])
        );
        assert_eq!(got["metadata"]["finalizers"], json!(["b", "c"]));
        assert_eq!(
            got["metadata"]["ownerReferences"],
            json!([{"uid": "1", "name": "x"}, {"uid": "2", "name": "y"}])
        );
        // Node taints have no patch strategy: replaced.
        let got = smp(
            "Node",
            json!({"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}}),
            json!({"spec": {"taints": [{"key": "b", "effect": "NoSchedule"}]}}),
        );
        assert_eq!(
            got["spec"]["taints"],
            json!([{"key": "b", "effect": "NoSchedule"}])
        );
        // An element without its merge key is refused.
        assert!(strategic_merge(
            "Node",
            &json!({}),
            &json!({"status": {"conditions": [{"status": "True"}]}})
        )
        .is_err());
    }

    #[test]
    fn merge_patch_and_json_patch() {
        let o = json!({"a": {"b": 1, "c": [1, 2]}, "d": "x"});
        assert_eq!(
            merge_patch(&o, &json!({"a": {"b": null, "c": [3]}, "e": true})),
            json!({"a": {"c": [3]}, "d": "x", "e": true})
        );
        let got = json_patch(
            &o,
            &json!([
                {"op": "test", "path": "/d", "value": "x"},
                {"op": "add", "path": "/a/c/-", "value": 9},
                {"op": "replace", "path": "/d", "value": "y"},
                {"op": "remove", "path": "/a/b"},
                {"op": "copy", "from": "/d", "path": "/f~1g"},
                {"op": "move", "from": "/a/c", "path": "/h"}
            ]),
        )
        .expect("applies");
        assert_eq!(got, json!({"a": {}, "d": "y", "f/g": "y", "h": [1, 2, 9]}));
        assert!(json_patch(&o, &json!([{"op": "test", "path": "/d", "value": "z"}])).is_err());
        assert!(json_patch(&o, &json!([{"op": "remove", "path": "/nope"}])).is_err());
    }
}
