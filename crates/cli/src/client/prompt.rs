//! A form elicitation as terminal prompts, built from its JSON schema: text, numbers, booleans,
//! single and multiple choice (SEP-1330 enum forms), required fields and defaults; the person may
//! also decline or cancel.

use dialoguer::{theme::ColorfulTheme, Confirm, Input, MultiSelect, Select};
use serde_json::{json, Map, Value};

/// What a person answered.
pub enum Answer {
    /// The form's content.
    Accept(Map<String, Value>),
    /// They said no.
    Decline,
    /// They dismissed the question.
    Cancel,
}

/// A form schema's fields and the names of the required ones.
pub fn fields(schema: &Value) -> (Map<String, Value>, Vec<&str>) {
    let props = schema
        .get("properties")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let required = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    (props, required)
}

/// The choices of a single-choice field: `(value, label)`.
fn choices(prop: &Value) -> Option<Vec<(Value, String)>> {
    if let Some(values) = prop.get("enum").and_then(Value::as_array) {
        let names = prop.get("enumNames").and_then(Value::as_array);
        return Some(
            values
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let label = names
                        .and_then(|n| n.get(i))
                        .and_then(Value::as_str)
                        .map(str::to_string)
                        .unwrap_or_else(|| plain(v));
                    (v.clone(), label)
                })
                .collect(),
        );
    }
    let options = prop
        .get("oneOf")
        .or_else(|| prop.get("anyOf"))
        .and_then(Value::as_array)?;
    Some(
        options
            .iter()
            .filter_map(|o| {
                let v = o.get("const")?.clone();
                let label = o
                    .get("title")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .unwrap_or_else(|| plain(&v));
                Some((v, label))
            })
            .collect(),
    )
}

fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn io(e: dialoguer::Error) -> String {
    e.to_string()
}

/// Asks for each field of `schema` not already in `known`, on the terminal. Blocking.
pub fn ask(message: &str, schema: &Value, known: &Map<String, Value>) -> Result<Answer, String> {
    let theme = ColorfulTheme::default();
    eprintln!("\nThe tool asks: {message}");
    let what = Select::with_theme(&theme)
        .with_prompt("Answer it?")
        .items(["Answer", "Decline", "Cancel"])
        .default(0)
        .interact_opt()
        .map_err(io)?;
    match what {
        Some(0) => {}
        Some(1) => return Ok(Answer::Decline),
        _ => return Ok(Answer::Cancel),
    }
    let (props, required) = fields(schema);
    let mut content = known.clone();
    for (name, prop) in &props {
        if content.contains_key(name) {
            continue;
        }
        let must = required.contains(&name.as_str());
        let title = prop.get("title").and_then(Value::as_str).unwrap_or(name);
        let label = match prop.get("description").and_then(Value::as_str) {
            Some(d) => format!("{title} ({d})"),
            None => title.to_string(),
        };
        let label = if must {
            label
        } else {
            format!("{label} [optional]")
        };
        let default = prop.get("default");
        let kind = prop.get("type").and_then(Value::as_str).unwrap_or("string");
        let value: Option<Value> = if kind == "array" {
            let items = prop.get("items").cloned().unwrap_or(json!({}));
            let opts = choices(&items).unwrap_or_default();
            let defaults: Vec<bool> = opts
                .iter()
                .map(|(v, _)| {
                    default
                        .and_then(Value::as_array)
                        .is_some_and(|d| d.contains(v))
                })
                .collect();
            let picked = MultiSelect::with_theme(&theme)
                .with_prompt(format!("{label} (space to pick, enter to end)"))
                .items(opts.iter().map(|(_, l)| l.as_str()))
                .defaults(&defaults)
                .interact_opt()
                .map_err(io)?;
            match picked {
                None => return Ok(Answer::Cancel),
                Some(p) => Some(Value::Array(
                    p.into_iter().map(|i| opts[i].0.clone()).collect(),
                )),
            }
        } else if let Some(opts) = choices(prop) {
            let mut labels: Vec<String> = opts.iter().map(|(_, l)| l.clone()).collect();
            if !must {
                labels.push("(leave empty)".into());
            }
            let start = default
                .and_then(|d| opts.iter().position(|(v, _)| v == d))
                .unwrap_or(0);
            match Select::with_theme(&theme)
                .with_prompt(&label)
                .items(&labels)
                .default(start)
                .interact_opt()
                .map_err(io)?
            {
                None => return Ok(Answer::Cancel),
                Some(i) if i < opts.len() => Some(opts[i].0.clone()),
                Some(_) => None,
            }
        } else if kind == "boolean" {
            let mut c = Confirm::with_theme(&theme).with_prompt(&label);
            if let Some(d) = default.and_then(Value::as_bool) {
                c = c.default(d);
            }
            match c.interact_opt().map_err(io)? {
                None => return Ok(Answer::Cancel),
                Some(b) => Some(Value::Bool(b)),
            }
        } else {
            let integer = kind == "integer";
            let number = integer || kind == "number";
            let mut input = Input::<String>::with_theme(&theme)
                .with_prompt(&label)
                .allow_empty(!must || default.is_some());
            if let Some(d) = default {
                input = input.default(plain(d)).show_default(true);
            }
            if number {
                input = input.validate_with(move |s: &String| -> Result<(), String> {
                    if s.is_empty() {
                        return Ok(());
                    }
                    let ok = if integer {
                        s.trim().parse::<i64>().is_ok()
                    } else {
                        s.trim().parse::<f64>().is_ok_and(f64::is_finite)
                    };
                    if ok {
                        Ok(())
                    } else {
                        Err(format!(
                            "not {}",
                            if integer { "an integer" } else { "a number" }
                        ))
                    }
                });
            }
            let text = input.interact_text().map_err(io)?;
            if text.is_empty() {
                None
            } else if integer {
                text.trim().parse::<i64>().ok().map(Value::from)
            } else if number {
                text.trim().parse::<f64>().ok().map(Value::from)
            } else {
                Some(Value::String(text))
            }
        };
        if let Some(v) = value {
            content.insert(name.clone(), v);
        }
    }
    Ok(Answer::Accept(content))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_enum_form_gives_its_choices() {
        let plain = json!({"type": "string", "enum": ["a", "b"]});
        assert_eq!(choices(&plain).unwrap()[1], (json!("b"), "b".to_string()));
        let named = json!({"type": "string", "enum": ["a"], "enumNames": ["Alpha"]});
        assert_eq!(choices(&named).unwrap()[0].1, "Alpha");
        let titled = json!({"type": "string", "oneOf": [{"const": "r", "title": "Red"}]});
        assert_eq!(
            choices(&titled).unwrap()[0],
            (json!("r"), "Red".to_string())
        );
        assert!(choices(&json!({"type": "string"})).is_none());
    }
}
