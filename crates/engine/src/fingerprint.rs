//! Fingerprints of tool calls.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Digest of a tool call (tool name + canonical JSON of the arguments, so key order does not matter):
/// tells a retry from different work under the same idempotency key, and binds state to one call.
pub fn fingerprint(tool: &str, arguments: &Value) -> String {
    /// Feeds what is written straight to the digest: large arguments are never copied into a
    /// canonical text first.
    struct Digesting(Sha256);
    impl std::io::Write for Digesting {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.update(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    fn canonical(v: &Value, out: &mut Digesting) {
        use std::io::Write as _;
        // Writing to a digest cannot fail, and a Value always serializes.
        match v {
            Value::Object(m) => {
                let mut keys: Vec<_> = m.keys().collect();
                keys.sort();
                let _ = out.write_all(b"{");
                for k in keys {
                    let _ = serde_json::to_writer(&mut *out, k);
                    let _ = out.write_all(b":");
                    canonical(&m[k], out);
                    let _ = out.write_all(b",");
                }
                let _ = out.write_all(b"}");
            }
            Value::Array(a) => {
                let _ = out.write_all(b"[");
                for x in a {
                    canonical(x, out);
                    let _ = out.write_all(b",");
                }
                let _ = out.write_all(b"]");
            }
            other => {
                let _ = serde_json::to_writer(&mut *out, other);
            }
        }
    }
    let mut h = Digesting(Sha256::new());
    h.0.update(tool.as_bytes());
    h.0.update([0]);
    canonical(arguments, &mut h);
    hex::encode(h.0.finalize())
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
        // The digest of the canonical text (fingerprints are stored: they must not change).
        assert_eq!(
            fingerprint(
                "t",
                &serde_json::json!({"b": "x\"y", "a": [1.5, null, true]})
            ),
            hex::encode(Sha256::digest(
                b"t\0{\"a\":[1.5,null,true,],\"b\":\"x\\\"y\",}"
            ))
        );
    }
}
