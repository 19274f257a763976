//! Anthropic Messages, `POST /v1/messages`.
//!
//! Reference: <https://docs.anthropic.com/en/api/messages> and the streaming event sequence at
//! <https://docs.anthropic.com/en/docs/build-with-claude/streaming>.
//!
//! Everything about this API is in this folder: here the request an input check reads, the answer
//! an output check reads, and the bodies the filter writes in its shape (a refusal, a withheld
//! answer, an error); [`stream`] reads and rewrites its event stream as it passes; [`recovered`]
//! re-emits a recovered answer as that stream.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use super::{content_texts, Answer, CallValues, CallerText, Ids, Request, ToolCall};
use crate::json::{push_event, scalars_of_text, scalars_of_value};
use crate::json::{FieldError, Node, Obj};

pub(crate) mod platform;
pub(super) mod recovered;
pub(crate) mod stream;

/// Block types whose `input` is a tool call the model makes.
const TOOL_USE_BLOCKS: &[&str] = &["tool_use", "server_tool_use", "mcp_tool_use"];

pub(super) fn parse_request(body: &Obj<'_>) -> Result<Request, FieldError> {
    let mut caller = CallerText::default();
    for piece in content_texts(body.get("system"), &["text"], &|| "system".into())? {
        caller.piece(piece);
    }
    let Some(Node::Array(messages)) = body.get("messages") else {
        return Err(FieldError::must_be("messages", "an array"));
    };
    for (i, message) in messages.iter().enumerate() {
        let Node::Object(message) = message else {
            return Err(FieldError::must_be(format!("messages[{i}]"), "an object"));
        };
        let Some(role) = message.str_field("role") else {
            return Err(FieldError::must_be(
                format!("messages[{i}].role"),
                "a string",
            ));
        };
        let path = || format!("messages[{i}].content");
        let texts = content_texts(message.get("content"), &["text"], &path)?;
        // Every role but the model's own is read, so an unexpected role cannot hide text.
        if role == "assistant" {
            continue;
        }
        caller.message(role == "user", &texts);
    }
    let (input_text, user_texts) = caller.finish();
    Ok(Request {
        input_text,
        user_texts,
        stream: body.bool_field("stream")?,
        background: false,
        include_usage: false,
        json_array: false,
        model: body.opt_str_field("model")?,
        ..Request::default()
    })
}

/// `tool_use.input` as written, so numbers keep their digits.
#[derive(Deserialize)]
struct RawAnswer<'a> {
    #[serde(borrow)]
    content: Vec<RawBlock<'a>>,
}

#[derive(Deserialize)]
struct RawBlock<'a> {
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
}

pub(super) fn parse_answer(
    raw: &[u8],
    body: &Obj<'_>,
    rule_text: bool,
) -> Result<Answer, FieldError> {
    let Some(Node::Array(content)) = body.get("content") else {
        return Err(FieldError::must_be("content", "an array"));
    };
    let mut raw_blocks = None;
    let mut text = String::new();
    let mut values = CallValues::new(rule_text);
    let mut tool_calls = Vec::new();
    for (i, block) in content.iter().enumerate() {
        let Node::Object(block) = block else {
            return Err(FieldError::must_be(format!("content[{i}]"), "an object"));
        };
        match block.str_field("type") {
            Some("text") => text.push_str(block.str_field("text").unwrap_or_default()),
            Some(kind) if TOOL_USE_BLOCKS.contains(&kind) => {
                // Read again only when there is a tool use: its input as written.
                let raw_blocks: &Vec<RawBlock> = raw_blocks.get_or_insert_with(|| {
                    serde_json::from_slice::<RawAnswer>(raw)
                        .map(|a| a.content)
                        .unwrap_or_default()
                });
                // The input as written; as parsed only where the raw read found none. A tool use
                // without one calls the tool with no arguments: `{}`, as an MCP `tools/call` without
                // `arguments` reads, so its arguments are always JSON.
                let arguments = match raw_blocks.get(i).and_then(|b| b.input) {
                    Some(input) => {
                        values.push(|| scalars_of_text(input.get()));
                        input.get().to_owned()
                    }
                    None => match block.get("input").map(Node::to_value) {
                        Some(v) => {
                            values.push(|| scalars_of_value(&v));
                            v.to_string()
                        }
                        None => {
                            values.push(Vec::new);
                            "{}".to_owned()
                        }
                    },
                };
                // Server and MCP tool uses ran at Anthropic: only the caller's own tools are checked.
                if kind == "tool_use" {
                    tool_calls.push(ToolCall {
                        name: block.str_field("name").unwrap_or_default().to_owned(),
                        arguments,
                        json: true,
                    });
                }
            }
            _ => {}
        }
    }
    Ok(Answer {
        rule_text: values.rule_text(&text),
        text,
        asks_for_tool: body.str_field("stop_reason") == Some("tool_use"),
        id: body.str_field("id").map(str::to_owned),
        calls: tool_calls,
    })
}

fn message(reply: Option<&str>, req: &Request, ids: &Ids) -> Value {
    let content = match reply {
        Some(reply) => json!([{"type": "text", "text": reply}]),
        None => json!([]),
    };
    json!({
        "id": format!("msg_{}", ids.token),
        "type": "message",
        "role": "assistant",
        "model": req.model.as_deref().unwrap_or_default(),
        "content": content,
        "stop_reason": reply.map(|_| "refusal"),
        "stop_sequence": null,
        "usage": {
            "input_tokens": 0,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": 0,
        },
    })
}

pub(super) fn refusal(reply: &str, req: &Request, ids: &Ids) -> Vec<u8> {
    crate::json::to_vec(&message(Some(reply), req, ids))
}

pub(super) fn refusal_stream(reply: &str, req: &Request, ids: &Ids) -> Vec<u8> {
    let events = [
        json!({"type": "message_start", "message": message(None, req, ids)}),
        json!({"type": "content_block_start", "index": 0,
               "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0,
               "delta": {"type": "text_delta", "text": reply}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta",
               "delta": {"stop_reason": "refusal", "stop_sequence": null},
               "usage": {"output_tokens": 0}}),
        json!({"type": "message_stop"}),
    ];
    let mut out = Vec::new();
    for event in &events {
        push_event(&mut out, str_field_of(event, "type"), event);
    }
    out
}

fn str_field_of<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

pub(super) fn withhold(body: &mut Map<String, Value>, reply: &str) -> Result<(), FieldError> {
    if !matches!(body.get("content"), Some(Value::Array(_))) {
        return Err(FieldError::must_be("content", "an array"));
    }
    body.insert("content".into(), json!([{"type": "text", "text": reply}]));
    body.insert("stop_reason".into(), json!("refusal"));
    body.insert("stop_sequence".into(), Value::Null);
    Ok(())
}

pub(super) fn error(status: u16, message: &str) -> Value {
    let kind = match status {
        413 => "request_too_large",
        _ => "invalid_request_error",
    };
    json!({"type": "error", "error": {"type": kind, "message": message}})
}
