//! Fingerprints of tool calls.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Digest of a tool call (tool name + canonical JSON of the arguments, so key order does not matter):
/// tells a retry from different work under the same idempotency key, and binds state to one call.
pub fn fingerprint(tool: &str, arguments: &Value) -> String {
    fn canonical(v: &Value, out: &mut String) {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<_> = m.keys().collect();
                keys.sort();
                out.push('{');
                for k in keys {
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    canonical(&m[k], out);
                    out.push(',');
                }
                out.push('}');
            }
            Value::Array(a) => {
                out.push('[');
                for x in a {
                    canonical(x, out);
                    out.push(',');
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut text = String::new();
    canonical(arguments, &mut text);
    let mut h = Sha256::new();
    h.update(tool.as_bytes());
    h.update([0]);
    h.update(text.as_bytes());
    hex::encode(h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_ignores_key_order() {
        let a = fingerprint(
            "t",
            &serde_json::json!({"a": 1, "b": [1, {"x": 2, "y": 3}]}),
        );
        let b = fingerprint(
            "t",
            &serde_json::json!({"b": [1, {"y": 3, "x": 2}], "a": 1}),
        );
        assert_eq!(a, b);
        assert_ne!(a, fingerprint("u", &serde_json::json!({"a": 1})));
    }
}
