//! MCP Events (`io.modelcontextprotocol/events`, SEP-3415) on the webhook profile ChatGPT and the
//! AI SDK speak: the event types this server offers, the settings (`[events]`), the errors in
//! either numbering, and subscription ids.
//!
//! The log, subscriptions and deliveries are the store's ([`mcp_tasks_engine::events`]): a task's
//! event is written with the status change that makes it, and its deliveries with it (or, on
//! PostgreSQL, by the fan-out the delivery loop runs). [`verify`] makes the challenge POST a
//! subscribe needs, [`deliver`] sends the deliveries, [`occurrence`] renders what they carry.

pub mod deliver;
pub mod occurrence;
pub mod verify;

use mcp_tasks_engine::events::{TASK_FINISHED, TASK_INPUT_REQUIRED};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::time::Duration;

use crate::webhooks::AllowedHosts;

/// The extension's identifier, as advertised in `capabilities.extensions`.
pub const EXTENSION: &str = "io.modelcontextprotocol/events";

/// Largest event body sent (SEP-3415: receivers may refuse more with 413).
pub const MAX_BODY_BYTES: usize = 256 * 1024;

/// Which numbers the extension's errors carry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ErrorNumbering {
    /// The design sketch's, which ChatGPT uses: -32011 … -32015.
    #[default]
    Sketch,
    /// SEP-3415's (provisional): -32023 … -32027.
    Sep,
}

impl ErrorNumbering {
    /// Reads `sketch` or `sep-3415`.
    pub fn parse(s: &str) -> Option<ErrorNumbering> {
        match s {
            "sketch" => Some(ErrorNumbering::Sketch),
            "sep-3415" | "sep" => Some(ErrorNumbering::Sep),
            _ => None,
        }
    }

    /// The code of `kind`.
    pub fn code(self, kind: ErrorKind) -> i64 {
        let base = match self {
            ErrorNumbering::Sketch => -32011,
            ErrorNumbering::Sep => -32023,
        };
        base - match kind {
            ErrorKind::NotFound => 0,
            ErrorKind::Forbidden => 1,
            ErrorKind::ResourceExhausted => 2,
            ErrorKind::Unsupported => 3,
            ErrorKind::CallbackEndpoint => 4,
        }
    }
}

/// The extension's own errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Unknown event type or subscription.
    NotFound,
    /// No authenticated principal, or not permitted.
    Forbidden,
    /// A limit was reached.
    ResourceExhausted,
    /// A well-formed option this server does not offer.
    Unsupported,
    /// The endpoint failed its verification or could not be reached.
    CallbackEndpoint,
}

/// Who sees a declared type's events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Audience {
    /// Only the principal whose task published the event.
    Owner,
    /// Every principal that may call the tool named (its scopes apply).
    Callers(String),
}

/// An event type this server offers.
#[derive(Clone, Debug, PartialEq)]
pub struct EventType {
    /// Its name, e.g. `task.finished`.
    pub name: String,
    /// What it means.
    pub description: String,
    /// The subscription arguments (a JSON Schema object): each property is a filter on the
    /// payload's field of that name.
    pub input_schema: Value,
    /// The shape of `data`.
    pub payload_schema: Value,
    /// Who sees its events.
    pub audience: Audience,
}

impl EventType {
    /// The built-in task types: every task's end and its waits for input, to its own principal.
    pub fn built_in() -> Vec<EventType> {
        let arguments = json!({
            "type": "object",
            "properties": {
                "taskId": {"type": "string", "description": "Only this task's event."},
                "tool": {"type": "string", "description": "Only events of this tool's tasks."}
            },
            "additionalProperties": false
        });
        vec![
            EventType {
                name: TASK_FINISHED.into(),
                description: "One of your tasks ended: completed, failed or cancelled. \
                              `result` (or `error`) is the tool's outcome; a result too large \
                              for the event is left out (`resultOmitted`): fetch it from the task."
                    .into(),
                input_schema: arguments.clone(),
                payload_schema: json!({
                    "type": "object",
                    "properties": {
                        "taskId": {"type": "string"},
                        "tool": {"type": "string"},
                        "status": {"enum": ["completed", "failed", "cancelled"]},
                        "statusMessage": {"type": "string"},
                        "result": {"type": "object"},
                        "error": {"type": "object"},
                        "resultOmitted": {"type": "boolean"}
                    },
                    "required": ["taskId", "tool", "status"]
                }),
                audience: Audience::Owner,
            },
            EventType {
                name: TASK_INPUT_REQUIRED.into(),
                description: "One of your tasks waits for an answer: `inputRequests` says what \
                              to answer (answer it with tasks/update, or the tool's follow-up)."
                    .into(),
                input_schema: arguments,
                payload_schema: json!({
                    "type": "object",
                    "properties": {
                        "taskId": {"type": "string"},
                        "tool": {"type": "string"},
                        "inputRequests": {"type": "object"}
                    },
                    "required": ["taskId", "tool"]
                }),
                audience: Audience::Owner,
            },
        ]
    }

    /// Its `EventDefinition`.
    pub fn definition(&self) -> Value {
        json!({
            "name": self.name,
            "description": self.description,
            "delivery": ["poll", "push", "webhook"],
            "inputSchema": self.input_schema,
            "payloadSchema": self.payload_schema,
        })
    }

    /// Whether this is one of the task types (whose arguments name the task and tool).
    pub fn is_task_type(&self) -> bool {
        self.name == TASK_FINISHED || self.name == TASK_INPUT_REQUIRED
    }
}

/// How Events are served (`[events]` in the config).
#[derive(Clone, Debug, PartialEq)]
pub struct EventSettings {
    /// Whether webhooks may go to `http://127.0.0.1` and `http://[::1]` (tests and local
    /// development only; the AI SDK's `allowInsecureLocalhost` counterpart).
    pub allow_insecure_loopback: bool,
    /// Hosts a subscription's URL may name beyond the public internet (plain http allowed): the
    /// webhooks' list, joined at start.
    pub allowed_hosts: AllowedHosts,
    /// Live subscriptions one principal may hold (default 100).
    pub max_subscriptions_per_principal: usize,
    /// Lifetime of a subscription whose client suggests none (default 24 h).
    pub default_ttl: Duration,
    /// Shortest lifetime granted (default 5 min): a shorter suggestion gets this.
    pub min_ttl: Duration,
    /// Longest lifetime granted, also for a client that asks for none (default 7 days).
    pub max_ttl: Duration,
    /// How long an endpoint's verification holds for its principal (default 24 h).
    pub verification_ttl: Duration,
    /// How long one POST (verification or delivery) may take (default 10 s).
    pub timeout: Duration,
    /// How long the log keeps an event (default 24 h): a cursor older than that is `truncated`.
    pub keep: Duration,
    /// How long a refreshed subscription's replaced secret signs too (default 1 h).
    pub rotation_grace: Duration,
    /// Which error numbers are used (default the sketch's, ChatGPT's).
    pub error_numbering: ErrorNumbering,
    /// The types declared in the config (`[[events]]`), after the built-in task types.
    pub types: Vec<EventType>,
    /// Whether control envelopes are sent (default off: ChatGPT takes none; the AI SDK's
    /// receiver does): `terminated` to a subscription an operator ended, or whose type is no
    /// longer declared; `gap` to one whose delivery was given up.
    pub control_envelopes: bool,
    /// The wait after a `gap` envelope was not taken, doubling up to 10 min (default 30 s); a gap
    /// is told at most [`deliver::GAP_ATTEMPTS`] times.
    pub gap_retry: Duration,
}

impl Default for EventSettings {
    fn default() -> Self {
        EventSettings {
            allow_insecure_loopback: false,
            allowed_hosts: AllowedHosts::default(),
            max_subscriptions_per_principal: 100,
            default_ttl: Duration::from_secs(24 * 3600),
            min_ttl: Duration::from_secs(300),
            max_ttl: Duration::from_secs(7 * 24 * 3600),
            verification_ttl: Duration::from_secs(24 * 3600),
            timeout: Duration::from_secs(10),
            keep: Duration::from_secs(24 * 3600),
            rotation_grace: Duration::from_secs(3600),
            error_numbering: ErrorNumbering::Sketch,
            types: Vec::new(),
            control_envelopes: false,
            gap_retry: Duration::from_secs(30),
        }
    }
}

impl EventSettings {
    /// Every type offered: the task types, then the declared ones.
    pub fn all_types(&self) -> Vec<EventType> {
        let mut all = EventType::built_in();
        all.extend(self.types.iter().cloned());
        all
    }

    /// The type named `name`.
    pub fn find(&self, name: &str) -> Option<EventType> {
        self.all_types().into_iter().find(|t| t.name == name)
    }

    /// The hosts a URL may name beyond the public internet: the allowed ones, and the loopback
    /// addresses when [`EventSettings::allow_insecure_loopback`] is on.
    pub fn hosts(&self) -> AllowedHosts {
        if !self.allow_insecure_loopback {
            return self.allowed_hosts.clone();
        }
        let mut hosts = self.allowed_hosts.clone();
        hosts.add("127.0.0.1");
        hosts.add("::1");
        hosts
    }

    /// Checks the declared types: names unique, not a built-in one, schemas objects.
    pub fn check(&self) -> Result<(), String> {
        let mut seen = std::collections::HashSet::new();
        for t in self.all_types() {
            if !seen.insert(t.name.clone()) {
                return Err(format!(
                    "[[events]] {:?}: declared twice (or a built-in type)",
                    t.name
                ));
            }
            if t.name.is_empty() || t.name.chars().any(char::is_whitespace) {
                return Err(format!(
                    "[[events]] {:?}: a name is one word, e.g. build.finished",
                    t.name
                ));
            }
            if !t.input_schema.is_object() || !t.payload_schema.is_object() {
                return Err(format!(
                    "[[events]] {:?}: input_schema and payload_schema are JSON Schema objects",
                    t.name
                ));
            }
            jsonschema::validator_for(&t.input_schema)
                .map_err(|e| format!("[[events]] {:?}: input_schema: {e}", t.name))?;
        }
        Ok(())
    }
}

/// A task's own events by the types declared in `[[events]]`: the type must be declared (the
/// task types are the server's), `data` an object that matches its `payloadSchema` and fits in
/// a body; the fields its `inputSchema` names are what subscriptions filter on.
pub struct Declared(pub std::sync::Arc<EventSettings>);

impl mcp_tasks_engine::events::EventRules for Declared {
    fn event(
        &self,
        task: &mcp_tasks_engine::TaskRecord,
        name: &str,
        data: &Value,
    ) -> Result<mcp_tasks_engine::events::NewEvent, String> {
        let Some(ty) = self.0.types.iter().find(|t| t.name == name) else {
            let declared: Vec<&str> = self.0.types.iter().map(|t| t.name.as_str()).collect();
            return Err(if declared.is_empty() {
                format!("event type {name:?} is not declared: declare it in [[events]]")
            } else {
                format!(
                    "event type {name:?} is not declared; the declared ones are {}",
                    declared.join(", ")
                )
            });
        };
        let Value::Object(fields_of) = data else {
            return Err(format!("the data of a {name} event is a JSON object"));
        };
        let validator = jsonschema::validator_for(&ty.payload_schema)
            .map_err(|e| format!("the payload_schema of {name}: {e}"))?;
        if let Some(e) = validator.iter_errors(data).next() {
            return Err(format!(
                "the data does not match the payload_schema of {name}: {e} (at {})",
                e.instance_path()
            ));
        }
        let text = data.to_string();
        if text.len() > MAX_BODY_BYTES - 4096 {
            return Err(format!(
                "the data of a {name} event is {} bytes; an event body carries at most {} KiB",
                text.len(),
                MAX_BODY_BYTES / 1024
            ));
        }
        let filters = ty.input_schema.get("properties").and_then(Value::as_object);
        let fields = fields_of
            .iter()
            .filter(|(k, v)| {
                filters.is_some_and(|f| f.contains_key(*k))
                    && (v.is_string() || v.is_number() || v.is_boolean())
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut event = mcp_tasks_engine::events::NewEvent::new(name, data);
        match &ty.audience {
            Audience::Owner => {
                event.owner = Some(task.owner.clone());
                event.session = task.session.clone();
            }
            Audience::Callers(_) => {}
        }
        event.task_id = Some(task.id.clone());
        event.tool = Some(task.tool.clone());
        event.fields = fields;
        Ok(event)
    }
}

/// The id of `principal`'s subscription to `name` with `arguments` at `url`: the same for the same
/// four, across refreshes, restarts and replicas (`sub_` and 128 bits of a SHA-256 over them as
/// canonical JSON: keys sorted, no spaces), so subscribing again refreshes it.
pub fn subscription_id(principal: &str, url: &str, name: &str, arguments: &Value) -> String {
    let key = Value::Array(vec![
        json!(principal),
        json!(url),
        json!(name),
        canonical(arguments),
    ]);
    let digest = Sha256::digest(key.to_string().as_bytes());
    format!("sub_{}", &hex::encode(digest)[..32])
}

/// `v` with every object's keys in sorted order (serde_json keeps them as they came when its
/// `preserve_order` feature is on somewhere in the build).
pub fn canonical(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), canonical(&m[k])))
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_depend_on_the_four_parts_and_not_on_key_order() {
        let a = subscription_id(
            "alice",
            "https://h.example/x",
            "task.finished",
            &json!({"taskId": "t", "tool": "b"}),
        );
        let b = subscription_id(
            "alice",
            "https://h.example/x",
            "task.finished",
            &json!({"tool": "b", "taskId": "t"}),
        );
        assert_eq!(a, b);
        assert!(a.starts_with("sub_") && a.len() == 36);
        for other in [
            subscription_id(
                "bob",
                "https://h.example/x",
                "task.finished",
                &json!({"taskId": "t", "tool": "b"}),
            ),
            subscription_id(
                "alice",
                "https://h.example/y",
                "task.finished",
                &json!({"taskId": "t", "tool": "b"}),
            ),
            subscription_id(
                "alice",
                "https://h.example/x",
                "task.input_required",
                &json!({"taskId": "t", "tool": "b"}),
            ),
            subscription_id(
                "alice",
                "https://h.example/x",
                "task.finished",
                &json!({"taskId": "t"}),
            ),
        ] {
            assert_ne!(a, other);
        }
    }

    #[test]
    fn both_numberings() {
        assert_eq!(ErrorNumbering::Sketch.code(ErrorKind::NotFound), -32011);
        assert_eq!(
            ErrorNumbering::Sketch.code(ErrorKind::CallbackEndpoint),
            -32015
        );
        assert_eq!(ErrorNumbering::Sep.code(ErrorKind::NotFound), -32023);
        assert_eq!(
            ErrorNumbering::Sep.code(ErrorKind::CallbackEndpoint),
            -32027
        );
    }
}
