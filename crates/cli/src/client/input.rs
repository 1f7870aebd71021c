//! The CLI's answers to a server's questions: `--answer NAME=VALUE` fills form fields, defaults
//! fill the rest; a question that cannot be answered is declined and the CLI says so. Sampling goes
//! to `--sampling-command`, or is refused.

use futures::future::BoxFuture;
use indicatif::ProgressBar;
use mcp_tasks_client::InputHandler;
use serde_json::{json, Map, Value};
use std::io::IsTerminal;
use std::process::Stdio;
use tokio::io::AsyncWriteExt;

use super::args::split_pair;
use super::prompt::{self, Answer};

/// Answers from the command line, and from the person at the terminal when there is one.
pub struct CliInput {
    answers: Map<String, Value>,
    sampling_command: Option<String>,
    /// Prompts on the terminal (stdin and stderr are terminals).
    interactive: bool,
    /// The progress bar, hidden while a prompt is up.
    bar: Option<ProgressBar>,
}

impl CliInput {
    /// From `--answer` pairs and `--sampling-command`; `bar` is hidden while prompting.
    pub fn new(
        answers: &[String],
        sampling_command: Option<String>,
        bar: Option<ProgressBar>,
    ) -> anyhow::Result<CliInput> {
        let mut m = Map::new();
        for a in answers {
            let (k, v) = split_pair(a).map_err(|e| anyhow::anyhow!("--answer {e}"))?;
            m.insert(k, v);
        }
        Ok(CliInput {
            answers: m,
            sampling_command: sampling_command.filter(|c| !c.trim().is_empty()),
            interactive: std::io::stdin().is_terminal() && std::io::stderr().is_terminal(),
            bar,
        })
    }

    /// The fields of `schema` answered with `--answer`, as their types want them.
    fn given(&self, schema: &Value) -> Map<String, Value> {
        prompt::fields(schema)
            .0
            .iter()
            .filter_map(|(name, prop)| Some((name.clone(), coerce(self.answers.get(name)?, prop))))
            .collect()
    }

    /// Prompts on the terminal for what `--answer` did not give (blocking, off the runtime's
    /// threads, with the progress bar hidden).
    async fn prompt(&self, message: &str, schema: &Value) -> Value {
        let known = self.given(schema);
        let all = schema
            .get("properties")
            .and_then(Value::as_object)
            .is_none_or(|p| p.keys().all(|k| known.contains_key(k)));
        if all {
            return json!({"action": "accept", "content": known});
        }
        let (message, schema, bar) = (message.to_string(), schema.clone(), self.bar.clone());
        let asked = tokio::task::spawn_blocking(move || {
            let run = || prompt::ask(&message, &schema, &known);
            match bar {
                Some(b) => b.suspend(run),
                None => run(),
            }
        })
        .await;
        match asked {
            Ok(Ok(Answer::Accept(content))) => json!({"action": "accept", "content": content}),
            Ok(Ok(Answer::Decline)) => json!({"action": "decline"}),
            Ok(Ok(Answer::Cancel)) => json!({"action": "cancel"}),
            Ok(Err(e)) => {
                eprintln!("cannot ask on the terminal ({e}); declined");
                json!({"action": "decline"})
            }
            Err(_) => json!({"action": "cancel"}),
        }
    }

    /// The form's content from the answers and defaults, or the names of required fields nobody
    /// answered.
    fn fill(&self, schema: &Value) -> Result<Map<String, Value>, Vec<String>> {
        let (props, required) = prompt::fields(schema);
        let mut content = Map::new();
        let mut missing = Vec::new();
        for (name, prop) in &props {
            let value = match self.answers.get(name) {
                Some(v) => Some(coerce(v, prop)),
                None => prop.get("default").cloned(),
            };
            match value {
                Some(v) => {
                    content.insert(name.clone(), v);
                }
                None if required.contains(&name.as_str()) => missing.push(name.clone()),
                None => {}
            }
        }
        if missing.is_empty() {
            Ok(content)
        } else {
            Err(missing)
        }
    }
}

/// An answer as the field's type wants it: `--answer n=5` for a string field is "5".
fn coerce(v: &Value, prop: &Value) -> Value {
    match (prop.get("type").and_then(Value::as_str), v) {
        (Some("string"), Value::String(_)) => v.clone(),
        (Some("string"), other) => Value::String(other.to_string()),
        (Some("boolean"), Value::String(s)) => match s.to_ascii_lowercase().as_str() {
            "yes" | "y" | "true" | "on" => json!(true),
            "no" | "n" | "false" | "off" => json!(false),
            _ => v.clone(),
        },
        _ => v.clone(),
    }
}

impl InputHandler for CliInput {
    fn can_elicit(&self) -> bool {
        true
    }

    fn can_sample(&self) -> bool {
        self.sampling_command.is_some()
    }

    fn elicit<'a>(&'a self, params: &'a Value) -> BoxFuture<'a, Value> {
        Box::pin(async move {
            let message = params.get("message").and_then(Value::as_str).unwrap_or("");
            if params.get("mode").and_then(Value::as_str) == Some("url") {
                let url = params.get("url").and_then(Value::as_str).unwrap_or("");
                if self.interactive {
                    let schema = json!({"type": "object", "properties": {}});
                    eprintln!("\nThe tool asks you to open this link yourself (it is not opened for you):\n  {url}");
                    return match self.prompt(message, &schema).await["action"].as_str() {
                        Some("accept") => json!({"action": "accept"}),
                        Some("decline") => json!({"action": "decline"}),
                        _ => json!({"action": "cancel"}),
                    };
                }
                eprintln!("The tool asks you to open {url}\n  {message}\n(declined: no terminal to ask on; open it yourself if you trust it)");
                return json!({"action": "decline"});
            }
            let schema = params.get("requestedSchema").cloned().unwrap_or(json!({}));
            if self.interactive {
                return self.prompt(message, &schema).await;
            }
            match self.fill(&schema) {
                Ok(content) => json!({"action": "accept", "content": content}),
                Err(missing) => {
                    eprintln!(
                        "The tool asks: {message}\n(declined: no answer for {}; give --answer {}=VALUE)",
                        missing.join(", "),
                        missing[0]
                    );
                    json!({"action": "decline"})
                }
            }
        })
    }

    fn sample<'a>(&'a self, params: &'a Value) -> BoxFuture<'a, Result<Value, String>> {
        Box::pin(async move {
            let Some(cmd) = &self.sampling_command else {
                eprintln!("The tool asks for an LLM completion (sampling); refused: give --sampling-command CMD to answer such requests");
                return Err(
                    "the user gave no sampling command (mcp-tasks call --sampling-command)".into(),
                );
            };
            run_sampling(cmd, params).await
        })
    }
}

/// Runs `sh -c CMD` with the request's params on stdin; its stdout is the `CreateMessageResult`.
async fn run_sampling(cmd: &str, params: &Value) -> Result<Value, String> {
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot run the sampling command: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        let body = params.to_string();
        let _ = stdin.write_all(body.as_bytes()).await;
    }
    let out = child
        .wait_with_output()
        .await
        .map_err(|e| format!("the sampling command failed: {e}"))?;
    if !out.status.success() {
        return Err(format!("the sampling command exited with {}", out.status));
    }
    serde_json::from_slice::<Value>(&out.stdout)
        .ok()
        .filter(Value::is_object)
        .ok_or_else(|| {
            "the sampling command did not print a JSON object (a CreateMessageResult)".into()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_fill_from_answers_and_defaults() {
        let input = CliInput::new(&["confirm=yes".into(), "n=5".into()], None, None).unwrap();
        let schema = json!({"type": "object", "properties": {
            "confirm": {"type": "boolean"}, "n": {"type": "string"},
            "color": {"type": "string", "default": "red"}, "note": {"type": "string"}},
            "required": ["confirm"]});
        let c = input.fill(&schema).unwrap();
        assert_eq!(
            Value::Object(c),
            json!({"confirm": true, "n": "5", "color": "red"})
        );
        let none = CliInput::new(&[], None, None).unwrap();
        assert_eq!(none.fill(&schema).unwrap_err(), vec!["confirm".to_string()]);
    }
}
