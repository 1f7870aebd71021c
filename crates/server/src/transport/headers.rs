//! Decoding MCP's protocol headers: one decoder for every header whose value mirrors a body field
//! (`Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`), including the `=?base64?…?=` form for values that
//! are not header-safe.

use axum::http::{HeaderMap, HeaderValue};
use base64::Engine as _;

/// The text of a header value: surrounding whitespace trimmed (RFC 9110 §5.5), the
/// `=?base64?…?=` form decoded (it must be padded base64 of UTF-8). `None` when it is not valid.
pub(crate) fn decode(v: &HeaderValue) -> Option<String> {
    let s = v.to_str().ok()?.trim();
    match s
        .strip_prefix("=?base64?")
        .and_then(|r| r.strip_suffix("?="))
    {
        Some(b64) => {
            let bytes = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
            String::from_utf8(bytes).ok()
        }
        None => Some(s.to_string()),
    }
}

impl crate::wire::era_2026::Headers for HeaderMap {
    fn text(&self, name: &str) -> Option<Option<String>> {
        self.get(name).map(decode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_decode_as_the_spec_says() {
        let table: &[(&[u8], Option<&str>)] = &[
            (b"tools/call", Some("tools/call")),
            (b"  greet \t", Some("greet")),
            (b"=?base64?SGVsbG8=?=", Some("Hello")),
            (b"=?base64?w6lsw6hu?=", Some("\u{e9}l\u{e8}n")),
            (b" =?base64?SGVsbG8=?= ", Some("Hello")),
            (b"=?base64?SGVsbG8?=", None), // unpadded
            (b"=?base64?!!!!?=", None),    // not base64
            (b"=?base64?/w==?=", None),    // not UTF-8
            (b"=?base64?SGVsbG8=", Some("=?base64?SGVsbG8=")), // no closing marker: literal
            (b"", Some("")),
        ];
        for (raw, want) in table {
            let v = HeaderValue::from_bytes(raw).unwrap();
            assert_eq!(
                decode(&v).as_deref(),
                *want,
                "{:?}",
                String::from_utf8_lossy(raw)
            );
        }
        let opaque = HeaderValue::from_bytes(b"caf\xe9").unwrap();
        assert_eq!(decode(&opaque), None, "non-visible bytes are not text");
    }
}
