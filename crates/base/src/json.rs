//! Conversions between `serde_json::Value` and typed values that go through JSON text,
//! so every Kubernetes type has one deserializer (serde_json's slice reader, the one
//! the API client's `from_slice` uses) and one serializer (its `Vec<u8>` writer) in
//! the binary. serde instantiates a type's whole tree once per deserializer and
//! serializer: `serde_json::from_value` of a Pod beside `from_slice` of a Pod doubled
//! the PodSpec, Volume and Option code (README "Building for boards" has the bytes).
//! The callers are off the hot paths (manifests, watch events, status patches,
//! validation), where the extra text round trip costs microseconds.

use serde::de::{DeserializeOwned, Error as _};
use serde::Serialize;
use serde_json::Value;

/// `serde_json::from_value`, through text. The error reads as `from_value`'s: the
/// position in the re-serialized text means nothing to the reader, so it is cut.
pub fn from_value<T: DeserializeOwned>(v: &Value) -> Result<T, serde_json::Error> {
    let text = serde_json::to_vec(v)?;
    serde_json::from_slice(&text).map_err(|e| {
        let msg = e.to_string();
        let at = format!(" at line {} column {}", e.line(), e.column());
        serde_json::Error::custom(msg.strip_suffix(&at).unwrap_or(&msg))
    })
}

/// `serde_json::to_value`, through text.
pub fn to_value<T: Serialize + ?Sized>(x: &T) -> Result<Value, serde_json::Error> {
    serde_json::from_slice(&serde_json::to_vec(x)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Pod, Volume};
    use serde_json::json;

    #[test]
    fn round_trips_agree_with_serde_json_s_own() {
        let v = json!({"metadata": {"name": "a", "labels": {"x": "1"}},
            "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}]}],
                     "terminationGracePeriodSeconds": 30, "volumes": [{"name": "v", "emptyDir": {}}]}});
        let ours: Pod = from_value(&v).expect("decodes");
        let theirs: Pod = serde_json::from_value(v.clone()).expect("decodes");
        assert_eq!(ours, theirs);
        assert_eq!(
            to_value(&ours).expect("encodes"),
            serde_json::to_value(&theirs).expect("encodes")
        );
        let f = json!({"a": 1.5, "b": -3, "c": u64::MAX, "d": [null, true, "s"]});
        assert_eq!(to_value(&f).expect("encodes"), f);
    }

    #[test]
    fn errors_read_as_from_value_s_without_a_position() {
        let v = json!({"name": "v", "emptyDir": {"sizeLimit": 5}, "hostPath": "x"});
        let ours = from_value::<Volume>(&v).expect_err("bad").to_string();
        let theirs = serde_json::from_value::<Volume>(v)
            .expect_err("bad")
            .to_string();
        assert_eq!(ours, theirs);
        assert!(!ours.contains(" at line "), "{ours}");
    }
}
