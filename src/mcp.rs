//! MCP (Streamable HTTP) requests passing through Envoy: the JSON-RPC `tools/call` a client
//! (an agent) sends an MCP server, read for tool-call checks, and the answers the filter writes in
//! its place. <https://modelcontextprotocol.io/specification/2025-06-18/basic/transports>
//!
//! Bodies are parsed strictly (no key twice at any depth), as vendor requests are: a server that
//! kept the other of two `"arguments"` would run a call other than the one checked.

use serde_json::{json, Value};

use crate::api::ToolCall;

/// What an MCP POST body holds, as tool-call checks see it.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// One `tools/call` request: its JSON-RPC id and the call.
    ToolsCall { id: Value, call: ToolCall },
    /// Anything else (initialize, tools/list, notifications, responses): not checked.
    Other,
    /// Not something the filter can check, answered in its place: HTTP status, JSON-RPC error
    /// code and a message that names fields, never quotes the body.
    Refused {
        status: u32,
        code: i64,
        message: &'static str,
    },
}

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const INVALID_PARAMS: i64 = -32602;

/// Reads an MCP POST body.
pub fn read(body: &[u8]) -> Message {
    let refused = |code, message| Message::Refused {
        status: 400,
        code,
        message,
    };
    let Ok(value) = crate::json::parse_strict(body) else {
        return refused(
            PARSE_ERROR,
            "the body is not valid JSON (or repeats a key), so its tool calls cannot be checked",
        );
    };
    match value {
        Value::Array(items) => {
            // JSON-RPC batches (MCP 2025-03-26): checked one call at a time only.
            if items.iter().any(is_tools_call) {
                refused(
                    INVALID_REQUEST,
                    "a batch with tools/call cannot be checked: send each tools/call on its own",
                )
            } else {
                Message::Other
            }
        }
        value if is_tools_call(&value) => tools_call(&value),
        _ => Message::Other,
    }
}

fn is_tools_call(value: &Value) -> bool {
    value.get("method").and_then(Value::as_str) == Some("tools/call")
}

fn tools_call(request: &Value) -> Message {
    let invalid = |message| Message::Refused {
        status: 400,
        code: INVALID_PARAMS,
        message,
    };
    let Some(id) = request
        .get("id")
        .filter(|id| id.is_string() || id.is_number())
    else {
        return Message::Refused {
            status: 400,
            code: INVALID_REQUEST,
            message: "a tools/call request needs an id (a string or a number)",
        };
    };
    let Some(name) = request.pointer("/params/name").and_then(Value::as_str) else {
        return invalid("tools/call needs params.name, a string");
    };
    let arguments = match request.pointer("/params/arguments") {
        None | Some(Value::Null) => "{}".to_owned(),
        Some(args @ Value::Object(_)) => args.to_string(),
        Some(_) => return invalid("tools/call params.arguments must be an object"),
    };
    Message::ToolsCall {
        id: id.clone(),
        call: ToolCall {
            name: name.to_owned(),
            arguments,
            json: true,
        },
    }
}

/// The answer to a denied call: a tool result with `isError: true` and the reason as its text,
/// what the MCP spec says to show the model (so the agent learns why, and the server is never
/// called).
pub fn denied(id: &Value, reason: &str) -> Vec<u8> {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "result": {"content": [{"type": "text", "text": reason}], "isError": true},
    })
    .to_string()
    .into_bytes()
}

/// A JSON-RPC error answer (the request is refused, not forwarded).
pub fn error(id: Option<&Value>, code: i64, message: &str) -> Vec<u8> {
    json!({
        "jsonrpc": "2.0",
        "id": id.cloned().unwrap_or(Value::Null),
        "error": {"code": code, "message": message},
    })
    .to_string()
    .into_bytes()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_tools_call_is_read_with_its_id_name_and_arguments() {
        let body = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"send_email","arguments":{"to":"bob@x.example"}}}"#;
        let Message::ToolsCall { id, call } = read(body) else {
            panic!()
        };
        assert_eq!(id, json!(7));
        assert_eq!(call.name, "send_email");
        assert_eq!(
            serde_json::from_str::<Value>(&call.arguments).unwrap(),
            json!({"to": "bob@x.example"})
        );
        let none = br#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"ping"}}"#;
        assert!(matches!(read(none), Message::ToolsCall { call, .. } if call.arguments == "{}"));
    }

    #[test]
    fn other_messages_pass_and_what_cannot_be_checked_is_refused() {
        for other in [
            &br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#[..],
            br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            br#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]"#,
        ] {
            assert_eq!(read(other), Message::Other);
        }
        let code = |body: &[u8]| match read(body) {
            Message::Refused { code, .. } => Some(code),
            _ => None,
        };
        // The same key twice: which `arguments` would the server run?
        let twice = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"to":"x"},"arguments":{"to":"y"}}}"#;
        assert_eq!(code(twice), Some(PARSE_ERROR));
        assert_eq!(code(b"{"), Some(PARSE_ERROR));
        let batch = br#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}}]"#;
        assert_eq!(code(batch), Some(INVALID_REQUEST));
        let no_name = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}"#;
        assert_eq!(code(no_name), Some(INVALID_PARAMS));
        let bad_args = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":"x"}}"#;
        assert_eq!(code(bad_args), Some(INVALID_PARAMS));
        let no_id = br#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"a"}}"#;
        assert_eq!(code(no_id), Some(INVALID_REQUEST));
    }

    #[test]
    fn a_denied_call_is_an_error_result_for_the_model() {
        let v: Value = serde_json::from_slice(&denied(&json!("r-1"), "No billing info.")).unwrap();
        assert_eq!(
            v,
            json!({"jsonrpc": "2.0", "id": "r-1", "result": {"content": [{"type": "text", "text": "No billing info."}], "isError": true}})
        );
    }
}
