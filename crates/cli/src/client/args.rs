//! A tool's arguments from the command line: `NAME=VALUE` pairs and `--args JSON`, checked against
//! the tool's input schema before anything is sent.

use anyhow::{bail, Context, Result};
use serde_json::{Map, Value};

/// The value of `NAME=VALUE`: JSON when it parses as JSON, else the text itself.
pub fn parse_value(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

/// Splits `NAME=VALUE`.
pub fn split_pair(pair: &str) -> Result<(String, Value)> {
    let Some((name, value)) = pair.split_once('=') else {
        bail!("{pair:?} is not NAME=VALUE");
    };
    if name.is_empty() {
        bail!("{pair:?}: the name before '=' is empty");
    }
    Ok((name.to_string(), parse_value(value)))
}

/// The arguments object: `--args` first, then each pair (a pair overrides the same name).
pub fn build(json: Option<&str>, pairs: &[String]) -> Result<Value> {
    let mut args = match json {
        Some(text) => {
            match serde_json::from_str::<Value>(text).context("--args is not valid JSON")? {
                Value::Object(m) => m,
                other => bail!("--args must be a JSON object, got {other}"),
            }
        }
        None => Map::new(),
    };
    for p in pairs {
        let (name, value) = split_pair(p)?;
        args.insert(name, value);
    }
    Ok(Value::Object(args))
}

/// Checks `args` against `schema`; the error names each field that is wrong.
pub fn check(tool: &str, schema: &Value, args: &Value) -> Result<()> {
    let Ok(validator) = jsonschema::validator_for(schema) else {
        // A schema we cannot compile is the server's business; it checks the arguments itself.
        return Ok(());
    };
    let problems: Vec<String> = validator
        .iter_errors(args)
        .map(|e| {
            let path = e.instance_path().to_string();
            let field = path.trim_start_matches('/');
            if field.is_empty() {
                format!("  {e}")
            } else {
                format!("  {field}: {e}")
            }
        })
        .collect();
    if problems.is_empty() {
        return Ok(());
    }
    bail!(
        "the arguments do not fit the input schema of {tool}:\n{}",
        problems.join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_are_json_when_they_parse() {
        assert_eq!(parse_value("3"), json!(3));
        assert_eq!(parse_value("true"), json!(true));
        assert_eq!(parse_value("[1,2]"), json!([1, 2]));
        assert_eq!(parse_value("\"3\""), json!("3"));
        assert_eq!(parse_value("hello world"), json!("hello world"));
        assert_eq!(parse_value(""), json!(""));
        assert_eq!(split_pair("a=b=c").unwrap(), ("a".into(), json!("b=c")));
        assert!(split_pair("novalue").is_err());
        assert!(split_pair("=x").is_err());
    }

    #[test]
    fn pairs_override_args_and_bad_args_are_refused() {
        let v = build(Some(r#"{"a": 1, "b": 2}"#), &["b=3".into(), "c=x".into()]).unwrap();
        assert_eq!(v, json!({"a": 1, "b": 3, "c": "x"}));
        assert!(build(Some("[1]"), &[]).is_err());
        assert!(build(Some("{"), &[]).is_err());
    }

    #[test]
    fn schema_errors_name_the_field() {
        let schema = json!({"type": "object", "properties": {"seconds": {"type": "number"}},
            "required": ["seconds"]});
        assert!(check("t", &schema, &json!({"seconds": 2})).is_ok());
        let e = check("t", &schema, &json!({"seconds": "two"}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("seconds:"), "{e}");
        let e = check("t", &schema, &json!({})).unwrap_err().to_string();
        assert!(e.contains("seconds"), "{e}");
    }
}
