//! JSON-RPC 2.0 framing: parsing with precise error reports, and building replies.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::fmt;

use crate::error_codes;

/// A request id: a string or an integer. `null` and fractional numbers are rejected when parsing.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RequestId {
    /// An integer id.
    Number(i64),
    /// A string id.
    String(String),
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestId::Number(n) => write!(f, "{n}"),
            RequestId::String(s) => write!(f, "{s:?}"),
        }
    }
}

impl RequestId {
    fn from_value(v: &Value) -> Option<RequestId> {
        match v {
            Value::String(s) => Some(RequestId::String(s.clone())),
            Value::Number(n) => n.as_i64().map(RequestId::Number),
            _ => None,
        }
    }
    /// The id as a JSON value.
    pub fn to_value(&self) -> Value {
        match self {
            RequestId::Number(n) => json!(n),
            RequestId::String(s) => json!(s),
        }
    }
}

/// The error object of a JSON-RPC error response.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    /// The error code (see [`crate::error_codes`]).
    pub code: i64,
    /// A one-sentence description of what was wrong.
    pub message: String,
    /// Structured details, when there are any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ErrorObject {
    /// An error with a code and message and no data.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        ErrorObject {
            code,
            message: message.into(),
            data: None,
        }
    }
    /// Attaches `data`.
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }
    /// -32700: the bytes were not JSON.
    pub fn parse_error(detail: impl fmt::Display) -> Self {
        Self::new(error_codes::PARSE_ERROR, format!("Parse error: {detail}"))
    }
    /// -32600: JSON, but not a valid JSON-RPC message.
    pub fn invalid_request(detail: impl fmt::Display) -> Self {
        Self::new(
            error_codes::INVALID_REQUEST,
            format!("Invalid request: {detail}"),
        )
    }
    /// -32601 for a method this server does not serve.
    /// A method name that is not plain (spaces, control characters, empty) is quoted, so that
    /// `"tasks/get "` reads as what it is.
    pub fn method_not_found(method: &str) -> Self {
        let plain = !method.is_empty()
            && method
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "/_-.:$".contains(c));
        let shown = if plain {
            method.to_string()
        } else {
            format!("{method:?}")
        };
        Self::new(
            error_codes::METHOD_NOT_FOUND,
            format!("Method not found: {shown}"),
        )
    }
    /// -32602 with a message saying which parameter was wrong.
    pub fn invalid_params(detail: impl Into<String>) -> Self {
        Self::new(error_codes::INVALID_PARAMS, detail)
    }
    /// -32603 with a message.
    pub fn internal(detail: impl Into<String>) -> Self {
        Self::new(error_codes::INTERNAL_ERROR, detail)
    }
}

impl fmt::Display for ErrorObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for ErrorObject {}

/// A request: has an id and expects a response.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// The id the response must echo.
    pub id: RequestId,
    /// The method name.
    pub method: String,
    /// The params (an object or array), if any.
    pub params: Option<Value>,
}

/// A notification: no id, no response.
#[derive(Clone, Debug, PartialEq)]
pub struct Notification {
    /// The method name.
    pub method: String,
    /// The params, if any.
    pub params: Option<Value>,
}

/// A successful response.
#[derive(Clone, Debug, PartialEq)]
pub struct Response {
    /// The id of the request answered.
    pub id: RequestId,
    /// The result object.
    pub result: Value,
}

/// An error response. `id` is absent when the request's id could not be read (parse errors).
#[derive(Clone, Debug, PartialEq)]
pub struct ErrorResponse {
    /// The id of the request answered, when known.
    pub id: Option<RequestId>,
    /// What went wrong.
    pub error: ErrorObject,
}

/// Any JSON-RPC 2.0 message.
#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    /// A request.
    Request(Request),
    /// A notification.
    Notification(Notification),
    /// A successful response.
    Response(Response),
    /// An error response.
    Error(ErrorResponse),
}

/// Why a message could not be accepted: the error to send back, and the request id if one was readable.
#[derive(Clone, Debug, PartialEq)]
pub struct Rejected {
    /// The id of the offending request, when it could be read.
    pub id: Option<RequestId>,
    /// The error to answer with.
    pub error: ErrorObject,
}

/// Parses one JSON-RPC message from bytes, saying exactly what is wrong when it is not one.
pub fn parse_message(bytes: &[u8]) -> Result<Message, Rejected> {
    // A key given twice is refused: a proxy that reads the first and a server that reads the last
    // would each see a different message.
    let value: Value = crate::strict_json::from_slice(bytes).map_err(|e| Rejected {
        id: None,
        error: ErrorObject::parse_error(e),
    })?;
    message_from_value(value)
}

/// Interprets a parsed JSON value as a JSON-RPC message.
pub fn message_from_value(value: Value) -> Result<Message, Rejected> {
    let mut obj = match value {
        Value::Object(o) => o,
        Value::Array(_) => {
            return Err(Rejected {
                id: None,
                error: ErrorObject::invalid_request(
                    "JSON-RPC batches are not supported (removed in MCP 2025-06-18); send one message per request",
                ),
            });
        }
        other => {
            return Err(Rejected {
                id: None,
                error: ErrorObject::invalid_request(format!(
                    "expected a JSON object, got {}",
                    type_name(&other)
                )),
            });
        }
    };
    let raw_id = obj.remove("id");
    let id = match &raw_id {
        None => None,
        Some(v) => match RequestId::from_value(v) {
            Some(id) => Some(id),
            None => {
                return Err(Rejected {
                    id: None,
                    error: ErrorObject::invalid_request(format!(
                        "\"id\" must be a string or an integer, got {}",
                        type_name(v)
                    )),
                });
            }
        },
    };
    let reject = |msg: String| Rejected {
        id: id.clone(),
        error: ErrorObject::invalid_request(msg),
    };
    match obj.get("jsonrpc") {
        Some(Value::String(s)) if s == "2.0" => {}
        Some(v) => return Err(reject(format!("\"jsonrpc\" must be \"2.0\", got {v}"))),
        None => return Err(reject("missing \"jsonrpc\": \"2.0\"".into())),
    }
    if let Some(method) = obj.remove("method") {
        let Value::String(method) = method else {
            return Err(reject("\"method\" must be a string".into()));
        };
        let params = obj.remove("params");
        if let Some(p) = &params {
            if !p.is_object() && !p.is_array() {
                return Err(reject(format!(
                    "\"params\" must be an object or an array, got {}",
                    type_name(p)
                )));
            }
        }
        return Ok(match id {
            Some(id) => Message::Request(Request { id, method, params }),
            None => Message::Notification(Notification { method, params }),
        });
    }
    match (obj.remove("result"), obj.remove("error")) {
        (Some(result), None) => match id {
            Some(id) => Ok(Message::Response(Response { id, result })),
            None => Err(reject("a response needs an \"id\"".into())),
        },
        (None, Some(error)) => {
            let error: ErrorObject = serde_json::from_value(error)
                .map_err(|e| reject(format!("malformed \"error\" object: {e}")))?;
            Ok(Message::Error(ErrorResponse { id, error }))
        }
        (Some(_), Some(_)) => Err(reject(
            "a response cannot have both \"result\" and \"error\"".into(),
        )),
        (None, None) => Err(reject(
            "expected \"method\" (request or notification) or \"result\"/\"error\" (response)"
                .into(),
        )),
    }
}

/// What kind of JSON value `v` is, for messages: "null", "a boolean", "a number", "a string",
/// "an array" or "an object".
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl Message {
    /// A response carrying `result`.
    pub fn response(id: RequestId, result: Value) -> Message {
        Message::Response(Response { id, result })
    }
    /// An error response.
    pub fn error(id: Option<RequestId>, error: ErrorObject) -> Message {
        Message::Error(ErrorResponse { id, error })
    }
    /// A notification.
    pub fn notification(method: impl Into<String>, params: Value) -> Message {
        Message::Notification(Notification {
            method: method.into(),
            params: Some(params),
        })
    }
    /// A reply to `id`: a response or an error response.
    pub fn reply(id: RequestId, result: Result<Value, ErrorObject>) -> Message {
        match result {
            Ok(v) => Message::response(id, v),
            Err(e) => Message::error(Some(id), e),
        }
    }

    /// The message as a JSON value, ready to serialize.
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("jsonrpc".into(), json!("2.0"));
        match self {
            Message::Request(r) => {
                m.insert("id".into(), r.id.to_value());
                m.insert("method".into(), json!(r.method));
                if let Some(p) = &r.params {
                    m.insert("params".into(), p.clone());
                }
            }
            Message::Notification(n) => {
                m.insert("method".into(), json!(n.method));
                if let Some(p) = &n.params {
                    m.insert("params".into(), p.clone());
                }
            }
            Message::Response(r) => {
                m.insert("id".into(), r.id.to_value());
                m.insert("result".into(), r.result.clone());
            }
            Message::Error(e) => {
                if let Some(id) = &e.id {
                    m.insert("id".into(), id.to_value());
                }
                m.insert(
                    "error".into(),
                    serde_json::to_value(&e.error).unwrap_or(Value::Null),
                );
            }
        }
        Value::Object(m)
    }

    /// The message as one line of compact JSON (no embedded newlines, as stdio framing requires).
    pub fn to_json(&self) -> String {
        self.to_value().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_error_has_no_id() {
        let r = parse_message(b"{nope").unwrap_err();
        assert_eq!(r.error.code, error_codes::PARSE_ERROR);
        assert!(r.id.is_none());
    }

    #[test]
    fn wrong_version_is_invalid_request_with_id() {
        let r = parse_message(br#"{"jsonrpc":"1.0","id":7,"method":"ping"}"#).unwrap_err();
        assert_eq!(r.error.code, error_codes::INVALID_REQUEST);
        assert_eq!(r.id, Some(RequestId::Number(7)));
        assert!(r.error.message.contains("2.0"));
    }

    #[test]
    fn null_id_is_rejected() {
        let r = parse_message(br#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#).unwrap_err();
        assert_eq!(r.error.code, error_codes::INVALID_REQUEST);
    }

    #[test]
    fn batches_are_rejected_with_reason() {
        let r = parse_message(br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#).unwrap_err();
        assert!(r.error.message.contains("batches"));
    }

    #[test]
    fn round_trips_all_kinds() {
        for text in [
            r#"{"jsonrpc":"2.0","id":"a","method":"x","params":{"k":1}}"#,
            r#"{"jsonrpc":"2.0","method":"n"}"#,
            r#"{"jsonrpc":"2.0","id":3,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"m"}}"#,
        ] {
            let m = parse_message(text.as_bytes()).unwrap();
            let again = parse_message(m.to_json().as_bytes()).unwrap();
            assert_eq!(m, again);
        }
    }
}
