//! The 2026-07-28 routing headers checked against the body: `MCP-Protocol-Version`,
//! `Mcp-Method`, `Mcp-Name`, and `Mcp-Param-*` for tool arguments marked `x-mcp-header`.

use mcp_tasks_protocol::jsonrpc::Request;
use serde_json::Value;

use super::declared_version;
use crate::core::Server;

/// The HTTP headers of a request, as the transport decoded them: `None` when absent, `Some(None)` when
/// present but not valid text (bad characters or bad `=?base64?…?=` encoding).
pub(crate) trait Headers {
    /// The decoded value of header `name` (lowercase).
    fn text(&self, name: &str) -> Option<Option<String>>;
}

/// Checks the 2026-07-28 routing headers against the body: `MCP-Protocol-Version`, `Mcp-Method`,
/// `Mcp-Name` for the methods that name a tool, prompt, resource or task, and `Mcp-Param-*` for tool
/// arguments marked `x-mcp-header`. `Err` says what disagrees (answered 400 + -32020).
pub(crate) fn check_headers(
    server: &Server,
    headers: &dyn Headers,
    req: &Request,
) -> Result<(), String> {
    // A body that declares no version is reported as malformed `_meta` (-32602) by the dispatcher.
    if let Some(declared) = declared_version(req.params.as_ref()) {
        match headers.text("mcp-protocol-version") {
            None => return Err("missing MCP-Protocol-Version header".into()),
            Some(Some(v)) if v == declared => {}
            Some(v) => {
                return Err(format!(
                    "MCP-Protocol-Version header {:?} does not match _meta protocolVersion {declared:?}",
                    v.unwrap_or_default()
                ));
            }
        }
    }
    match headers.text("mcp-method") {
        None => {
            return Err(format!(
                "missing Mcp-Method header (expected {:?})",
                req.method
            ))
        }
        Some(Some(m)) if m == req.method => {}
        Some(m) => {
            return Err(format!(
                "Mcp-Method header {:?} does not match the body's method {:?}",
                m.unwrap_or_default(),
                req.method
            ));
        }
    }
    let name_field = match req.method.as_str() {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    };
    if let Some(field) = name_field {
        // A body without the field is invalid params, which the dispatcher reports (-32602).
        let Some(expected) = req
            .params
            .as_ref()
            .and_then(|p| p.get(field))
            .and_then(Value::as_str)
        else {
            return Ok(());
        };
        match headers.text("mcp-name") {
            None => {
                return Err(format!(
                    "missing Mcp-Name header (expected params.{field} {expected:?})"
                ))
            }
            Some(None) => return Err("Mcp-Name header is not valid text".into()),
            Some(Some(n)) if n != expected => {
                return Err(format!(
                    "Mcp-Name header {n:?} does not match params.{field} {expected:?}"
                ));
            }
            Some(Some(_)) => {}
        }
    }
    if req.method == "tools/call" {
        check_param_headers(server, headers, req)?;
    }
    Ok(())
}

/// Arguments a tool marks with `x-mcp-header` are mirrored in `Mcp-Param-<Name>` headers; each must be
/// present when the argument is, and equal to it.
fn check_param_headers(
    server: &Server,
    headers: &dyn Headers,
    req: &Request,
) -> Result<(), String> {
    let params = req.params.as_ref();
    let Some(name) = params.and_then(|p| p.get("name")).and_then(Value::as_str) else {
        return Ok(());
    };
    let Some(tool) = server.tools().get(name) else {
        return Ok(());
    };
    let Some(props) = tool
        .tool
        .input_schema
        .get("properties")
        .and_then(Value::as_object)
    else {
        return Ok(());
    };
    let args = params.and_then(|p| p.get("arguments"));
    for (arg, schema) in props {
        let Some(header) = schema.get("x-mcp-header").and_then(Value::as_str) else {
            continue;
        };
        let value = match args.and_then(|a| a.get(arg)) {
            None | Some(Value::Null) => continue,
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
        };
        match headers.text(&format!("mcp-param-{}", header.to_ascii_lowercase())) {
            None => {
                return Err(format!(
                    "missing Mcp-Param-{header} header for argument {arg:?}"
                ))
            }
            Some(Some(v)) if v == value => {}
            Some(Some(v)) => {
                return Err(format!(
                    "Mcp-Param-{header} header {v:?} does not match argument {arg:?}"
                ));
            }
            Some(None) => {
                return Err(format!(
                    "Mcp-Param-{header} header is not valid (bad base64 or characters)"
                ))
            }
        }
    }
    Ok(())
}
