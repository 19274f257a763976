//! OpenAI Chat Completions, `POST /v1/chat/completions`, and the OpenAI error shape both OpenAI
//! APIs share.
//!
//! Reference: <https://platform.openai.com/docs/api-reference/chat>.
//!
//! Everything about this API is in this folder: here the request an input check reads, the answer
//! an output check reads, and the bodies the filter writes in its shape (a refusal, a withheld
//! answer, the OpenAI error); [`stream`] reads and rewrites its event stream as it passes;
//! [`recovered`] re-emits a recovered answer as that stream.

use serde_json::{json, Map, Value};

use super::{content_texts, Answer, CallValues, CallerText, Ids, Request, ToolCall};
use crate::json::{push_event, scalars_of_text};
use crate::json::{FieldError, Node, Obj};

pub(super) mod recovered;
pub(crate) mod stream;

/// Roles whose text an input check does not read: the model's own, and tool results.
const UNREAD_ROLES: &[&str] = &["assistant", "tool", "function"];

pub(super) fn parse_request(body: &Obj<'_>) -> Result<Request, FieldError> {
    let Some(Node::Array(messages)) = body.get("messages") else {
        return Err(FieldError::must_be("messages", "an array"));
    };
    let mut caller = CallerText::default();
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
        // Every other role (system, developer, user, and any unexpected one) is read.
        if UNREAD_ROLES.contains(&role) {
            continue;
        }
        caller.message(role == "user", &texts);
    }
    let include_usage = super::include_usage(body)?;
    let (input_text, user_texts) = caller.finish();
    Ok(Request {
        input_text,
        user_texts,
        stream: body.bool_field("stream")?,
        background: false,
        include_usage,
        json_array: false,
        model: body.opt_str_field("model")?,
        ..Request::default()
    })
}

pub(super) fn parse_answer(body: &Obj<'_>, rule_text: bool) -> Result<Answer, FieldError> {
    let Some(Node::Array(choices)) = body.get("choices") else {
        return Err(FieldError::must_be("choices", "an array"));
    };
    let mut text = String::new();
    let mut values = CallValues::new(rule_text);
    let mut the_calls = Vec::new();
    let mut asks_for_tool = false;
    for (i, choice) in choices.iter().enumerate() {
        let Node::Object(choice) = choice else {
            return Err(FieldError::must_be(format!("choices[{i}]"), "an object"));
        };
        if matches!(
            choice.str_field("finish_reason"),
            Some("tool_calls" | "function_call")
        ) {
            asks_for_tool = true;
        }
        let Some(Node::Object(message)) = choice.get("message") else {
            continue;
        };
        let path = || format!("choices[{i}].message.content");
        for piece in content_texts(message.get("content"), &["text"], &path)? {
            text.push_str(piece);
        }
        if let Some(Node::Array(tool_calls)) = message.get("tool_calls") {
            asks_for_tool |= !tool_calls.is_empty();
            for call in tool_calls.iter() {
                // Read where it lies: no `serde_json::Value` built for it.
                let call = call.as_object();
                values.push(|| tool_call_values(call));
                the_calls.push(tool_call(call));
            }
        }
        if let Some(Node::Object(call)) = message.get("function_call") {
            asks_for_tool = true;
            values.push(|| arguments_values(call.get("arguments")));
            the_calls.push(function_call(Some(call)));
        }
    }
    Ok(Answer {
        rule_text: values.rule_text(&text),
        text,
        asks_for_tool,
        id: body.str_field("id").map(str::to_owned),
        calls: the_calls,
    })
}

/// A string member of an object (`""` when missing or not a string).
fn str_member(object: Option<&Obj<'_>>, key: &str) -> String {
    object
        .and_then(|o| o.str_field(key))
        .unwrap_or_default()
        .to_owned()
}

/// A `tool_calls` entry as tool-call checks read it: a function's name and JSON arguments, or a
/// custom tool's name and free input. An entry that is not an object names nothing.
fn tool_call(call: Option<&Obj<'_>>) -> ToolCall {
    if let Some(function) = call.and_then(|c| c.get("function")) {
        return function_call(function.as_object());
    }
    let custom = call.and_then(|c| c.get("custom")).and_then(Node::as_object);
    ToolCall {
        name: str_member(custom, "name"),
        arguments: str_member(custom, "input"),
        json: false,
    }
}

/// `{"name": …, "arguments": "<JSON text>"}`: a function call (and the legacy `function_call`).
fn function_call(function: Option<&Obj<'_>>) -> ToolCall {
    ToolCall {
        name: str_member(function, "name"),
        arguments: str_member(function, "arguments"),
        json: true,
    }
}

/// A tool call's argument values: `function.arguments` (a JSON text), or a custom tool's free
/// `custom.input`, as is.
fn tool_call_values(call: Option<&Obj<'_>>) -> Vec<String> {
    let member = |outer: &str, key: &str| {
        call.and_then(|c| c.get(outer))
            .and_then(Node::as_object)
            .and_then(|o| o.get(key))
    };
    if call.and_then(|c| c.get("function")).is_some() {
        return arguments_values(member("function", "arguments"));
    }
    match member("custom", "input") {
        Some(Node::Str(input)) => vec![(*input).to_owned()],
        _ => Vec::new(),
    }
}

fn arguments_values(arguments: Option<&Node<'_>>) -> Vec<String> {
    match arguments {
        Some(Node::Str(arguments)) => scalars_of_text(arguments),
        _ => Vec::new(),
    }
}

fn message(reply: &str) -> Value {
    json!({"role": "assistant", "content": reply, "refusal": null, "annotations": []})
}

fn choice(index: Value, reply: &str) -> Value {
    json!({
        "index": index,
        "message": message(reply),
        "logprobs": null,
        "finish_reason": "content_filter",
    })
}

fn zero_usage() -> Value {
    json!({"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0})
}

pub(super) fn refusal(reply: &str, req: &Request, ids: &Ids) -> Vec<u8> {
    crate::json::to_vec(&json!({
        "id": format!("chatcmpl-{}", ids.token),
        "object": "chat.completion",
        "created": ids.created,
        "model": req.model.as_deref().unwrap_or_default(),
        "choices": [choice(json!(0), reply)],
        "usage": zero_usage(),
    }))
}

pub(super) fn refusal_stream(reply: &str, req: &Request, ids: &Ids) -> Vec<u8> {
    let chunk = |choices: Value| {
        let mut chunk = json!({
            "id": format!("chatcmpl-{}", ids.token),
            "object": "chat.completion.chunk",
            "created": ids.created,
            "model": req.model.as_deref().unwrap_or_default(),
            "choices": choices,
        });
        // With include_usage every chunk carries `usage: null` but the last, as the vendor does.
        if let (true, Value::Object(chunk)) = (req.include_usage, &mut chunk) {
            chunk.insert("usage".into(), Value::Null);
        }
        chunk
    };
    let mut chunks = vec![
        chunk(
            json!([{"index": 0, "delta": {"role": "assistant", "content": reply},
                      "logprobs": null, "finish_reason": null}]),
        ),
        chunk(json!([{"index": 0, "delta": {}, "logprobs": null,
                      "finish_reason": "content_filter"}])),
    ];
    if req.include_usage {
        let mut last = chunk(json!([]));
        if let Value::Object(last) = &mut last {
            last.insert("usage".into(), zero_usage());
        }
        chunks.push(last);
    }
    let mut out = Vec::new();
    for chunk in &chunks {
        push_event(&mut out, None, chunk);
    }
    out.extend_from_slice(b"data: [DONE]\n\n");
    out
}

pub(super) fn withhold(body: &mut Map<String, Value>, reply: &str) -> Result<(), FieldError> {
    let Some(Value::Array(choices)) = body.get_mut("choices") else {
        return Err(FieldError::must_be("choices", "an array"));
    };
    if choices.is_empty() {
        choices.push(choice(json!(0), reply));
    }
    for (i, slot) in choices.iter_mut().enumerate() {
        let index = slot.get("index").cloned().unwrap_or_else(|| json!(i));
        // A fresh choice: tool calls, audio, annotations and logprobs all carry the answer.
        *slot = choice(index, reply);
    }
    Ok(())
}

pub(super) fn error(message: &str) -> Value {
    json!({"error": {
        "message": message,
        "type": "invalid_request_error",
        "param": null,
        "code": null,
    }})
}
