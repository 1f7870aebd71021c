//! JSON parsing that refuses an object with the same key twice.
//!
//! RFC 8259 leaves duplicate names to the reader, and readers differ: `serde_json` keeps the last,
//! many proxies and gateways the first. A message such as `{"method":"ping","method":"tasks/list"}`
//! would then be one call to whatever checked it and another to us. Refusing it closes that gap.

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::fmt;

/// Parses `bytes` as one JSON value, failing on a key repeated in any object (at any depth), with
/// the key and where it is in the error.
pub fn from_slice(bytes: &[u8]) -> serde_json::Result<Value> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = Strict.deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

/// A `serde_json::Value` built by hand, so that a repeated key is an error instead of a replacement.
struct Strict;

impl<'de> DeserializeSeed<'de> for Strict {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        // As serde_json's own `Value` does: a number it cannot hold (never produced by its parser for
        // valid JSON) becomes null.
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(v) = seq.next_element_seed(Strict)? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut obj = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if obj.contains_key(&key) {
                return Err(de::Error::custom(format_args!(
                    "the key {key:?} appears twice in one object; send each key once"
                )));
            }
            let value = map.next_value_seed(Strict)?;
            obj.insert(key, value);
        }
        Ok(Value::Object(obj))
    }
}

#[cfg(test)]
mod tests {
    use super::from_slice;
    use serde_json::Value;

    #[test]
    fn a_repeated_key_is_refused_at_any_depth() {
        let e = from_slice(br#"{"method":"ping","method":"tasks/list"}"#).unwrap_err();
        assert!(e.to_string().contains("\"method\" appears twice"), "{e}");
        let e = from_slice(br#"{"params":{"a":[{"x":1,"x":2}]}}"#).unwrap_err();
        assert!(e.to_string().contains("\"x\" appears twice"), "{e}");
        // The same key in sibling objects is fine.
        assert!(from_slice(br#"[{"x":1},{"x":2}]"#).is_ok());
    }

    #[test]
    fn anything_else_reads_exactly_as_serde_json_does() {
        for text in [
            r#"{"a":1,"b":-2,"c":3.5,"d":1e300,"e":"\u00e9\n","f":[true,false,null],"g":{}}"#,
            "18446744073709551615",
            "-9223372036854775808",
            r#""""#,
            "[]",
        ] {
            let ours = from_slice(text.as_bytes()).unwrap();
            let theirs: Value = serde_json::from_str(text).unwrap();
            assert_eq!(ours, theirs, "{text}");
        }
        assert!(from_slice(b"{} trailing").is_err());
        assert!(from_slice(b"{\"a\":").is_err());
    }
}
