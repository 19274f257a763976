//! OpenAI Responses, `POST /v1/responses`.
//!
//! Reference: <https://platform.openai.com/docs/api-reference/responses> and the streaming events
//! at <https://platform.openai.com/docs/api-reference/responses-streaming>.
//!
//! Everything about this API is in this folder: here the request an input check reads, the answer
//! an output check reads, and the bodies the filter writes in its shape (a refusal, a withheld
//! answer); [`stream`] reads and rewrites its event stream as it passes; [`recovered`]
//! re-emits a recovered answer as that stream.

use serde_json::{json, Map, Value};

use super::{content_texts, Answer, CallValues, CallerText, Ids, Request, ToolCall};
use crate::json::{push_event, scalars_of_text, scalars_of_value, str_field, to_vec};
use crate::json::{FieldError, Node, Obj};

pub(super) mod recovered;
pub(crate) mod stream;

/// Content part types a caller's message carries text in.
const TEXT_PARTS: &[&str] = &["input_text", "text", "output_text"];

/// Output items that end the round asking the caller to act. Hosted tools (`web_search_call`,
/// `file_search_call`, `code_interpreter_call`, `mcp_call`, …) already ran at the vendor, so the
/// answer beside them is final and judged checks must read it.
const CALLER_TOOL_CALLS: &[&str] = &[
    "function_call",
    "custom_tool_call",
    "computer_call",
    "local_shell_call",
    "shell_call",
    "apply_patch_call",
    "mcp_approval_request",
];

/// Fields of a tool-call item that carry what the model wrote for the tool.
const CALL_VALUE_FIELDS: &[&str] = &["action", "operation", "queries", "code"];

pub(super) fn parse_request(body: &Obj<'_>) -> Result<Request, FieldError> {
    let mut caller = CallerText::default();
    if let Some(instructions) = body.opt_str_field("instructions")? {
        caller.piece(&instructions);
    }
    match body.get("prompt") {
        None | Some(Node::Null) => {}
        Some(Node::Object(prompt)) => {
            for variable in prompt_variables(prompt)? {
                caller.piece(&variable);
            }
        }
        Some(_) => return Err(FieldError::must_be("prompt", "an object")),
    }
    match body.get("input") {
        None | Some(Node::Null) => {}
        Some(Node::Str(input)) => caller.message(true, &[input]),
        Some(Node::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                let Node::Object(item) = item else {
                    return Err(FieldError::must_be(format!("input[{i}]"), "an object"));
                };
                // A message item may leave out its type; every other item (tool outputs, calls,
                // reasoning, references) is not the caller's text.
                if !matches!(item.str_field("type"), None | Some("message")) {
                    continue;
                }
                let Some(role) = item.str_field("role") else {
                    return Err(FieldError::must_be(format!("input[{i}].role"), "a string"));
                };
                let path = || format!("input[{i}].content");
                let texts = content_texts(item.get("content"), TEXT_PARTS, &path)?;
                if role == "assistant" {
                    continue;
                }
                caller.message(role == "user", &texts);
            }
        }
        Some(_) => {
            return Err(FieldError::must_be(
                "input",
                "a string or an array of input items",
            ))
        }
    }
    let (input_text, user_texts) = caller.finish();
    Ok(Request {
        input_text,
        user_texts,
        stream: body.bool_field("stream")?,
        background: body.bool_field("background")?,
        include_usage: false,
        json_array: false,
        model: body.opt_str_field("model")?,
        ..Request::default()
    })
}

/// The text values a request fills into a stored prompt: strings and `input_text` parts (images
/// and files are not read).
fn prompt_variables(prompt: &Obj<'_>) -> Result<Vec<String>, FieldError> {
    let variables = match prompt.get("variables") {
        None | Some(Node::Null) => return Ok(Vec::new()),
        Some(Node::Object(variables)) => variables,
        Some(_) => return Err(FieldError::must_be("prompt.variables", "an object")),
    };
    let mut texts = Vec::new();
    for value in variables.values_by_key() {
        match value {
            Node::Str(text) => texts.push((*text).to_owned()),
            Node::Object(part) => match part.str_field("type") {
                Some("input_text") => match part.str_field("text") {
                    Some(text) => texts.push(text.to_owned()),
                    None => {
                        return Err(FieldError::Needs {
                            what: "prompt.variables input_text",
                            needs: "a string text",
                        })
                    }
                },
                Some(_) => {}
                None => {
                    return Err(FieldError::Needs {
                        what: "prompt.variables object",
                        needs: "a string type",
                    })
                }
            },
            _ => {
                return Err(FieldError::must_be(
                    "prompt.variables values",
                    "strings or input_text, input_image or input_file objects",
                ))
            }
        }
    }
    Ok(texts)
}

/// Whether an output item of this type ends the round asking the caller to act (hosted tools
/// already ran at the vendor). Shared with the stream reader.
fn asks_for_tool_item(kind: &str) -> bool {
    CALLER_TOOL_CALLS.contains(&kind)
}

fn is_tool_call(kind: &str) -> bool {
    kind.ends_with("_call") || CALLER_TOOL_CALLS.contains(&kind)
}

pub(super) fn parse_answer(body: &Obj<'_>, rule_text: bool) -> Result<Answer, FieldError> {
    let Some(Node::Array(output)) = body.get("output") else {
        return Err(FieldError::must_be("output", "an array"));
    };
    let mut text = String::new();
    let mut values = CallValues::new(rule_text);
    let mut the_calls = Vec::new();
    let mut asks_for_tool = false;
    for (i, item) in output.iter().enumerate() {
        let Node::Object(fields) = item else {
            return Err(FieldError::must_be(format!("output[{i}]"), "an object"));
        };
        match fields.str_field("type") {
            Some("message") => {
                let path = || format!("output[{i}].content");
                for piece in content_texts(fields.get("content"), &["output_text"], &path)? {
                    text.push_str(piece);
                }
            }
            Some(kind) if is_tool_call(kind) => {
                let Value::Object(item) = item.to_value() else {
                    continue;
                };
                let caller = CALLER_TOOL_CALLS.contains(&kind);
                asks_for_tool |= caller;
                values.push(|| call_values(&item));
                if caller {
                    the_calls.push(tool_call(kind, &item));
                }
            }
            _ => {}
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

/// A caller-run tool-call item as tool-call checks read it (shared with the stream reader): a function's name and JSON
/// `arguments`, a custom tool's name and free `input`; a built-in tool (`computer_call`,
/// `local_shell_call`, …) is named by its type, its arguments the JSON of what it would do.
fn tool_call(kind: &str, item: &Map<String, Value>) -> ToolCall {
    match kind {
        "function_call" | "mcp_approval_request" => ToolCall {
            name: str_field(item, "name").unwrap_or_default().to_owned(),
            arguments: str_field(item, "arguments").unwrap_or_default().to_owned(),
            json: true,
        },
        "custom_tool_call" => ToolCall {
            name: str_field(item, "name").unwrap_or_default().to_owned(),
            arguments: str_field(item, "input").unwrap_or_default().to_owned(),
            json: false,
        },
        _ => {
            let what: Map<String, Value> = item
                .iter()
                .filter(|(k, _)| !matches!(k.as_str(), "id" | "call_id" | "type" | "status"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            ToolCall {
                name: kind.to_owned(),
                arguments: Value::Object(what).to_string(),
                json: true,
            }
        }
    }
}

/// What the model wrote for a tool: `arguments` (a JSON text), a custom tool's free `input`, and
/// the values of a built-in tool's action, operation, queries or code.
fn call_values(item: &Map<String, Value>) -> Vec<String> {
    let mut values = Vec::new();
    if let Some(arguments) = str_field(item, "arguments") {
        values.extend(scalars_of_text(arguments));
    }
    if let Some(input) = str_field(item, "input") {
        values.push(input.to_owned());
    }
    for field in CALL_VALUE_FIELDS {
        if let Some(value) = item.get(*field) {
            values.extend(scalars_of_value(value));
        }
    }
    values
}

fn output_message(id: &str, reply: &str) -> Value {
    json!({
        "type": "message",
        "id": id,
        "status": "incomplete",
        "role": "assistant",
        "content": [{"type": "output_text", "text": reply, "annotations": [], "logprobs": []}],
    })
}

fn incomplete() -> Value {
    json!({"reason": "content_filter"})
}

/// The response object the filter answers with; `output` empty and `in_progress` for the start
/// of a stream.
fn response(reply: Option<&str>, req: &Request, ids: &Ids) -> Value {
    let (status, details, output) = match reply {
        Some(reply) => (
            "incomplete",
            incomplete(),
            json!([output_message(&format!("msg_{}", ids.token), reply)]),
        ),
        None => ("in_progress", Value::Null, json!([])),
    };
    json!({
        "id": format!("resp_{}", ids.token),
        "object": "response",
        "created_at": ids.created,
        "status": status,
        "background": req.background,
        "error": null,
        "incomplete_details": details,
        "instructions": null,
        "max_output_tokens": null,
        "model": req.model.as_deref().unwrap_or_default(),
        "output": output,
        "parallel_tool_calls": true,
        "previous_response_id": null,
        "reasoning": {"effort": null, "summary": null},
        "store": false,
        "temperature": null,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": null,
        "truncation": "disabled",
        "usage": {
            "input_tokens": 0,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": 0,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 0,
        },
        "metadata": {},
    })
}

pub(super) fn refusal(reply: &str, req: &Request, ids: &Ids) -> Vec<u8> {
    to_vec(&response(Some(reply), req, ids))
}

pub(super) fn refusal_stream(reply: &str, req: &Request, ids: &Ids) -> Vec<u8> {
    let item_id = format!("msg_{}", ids.token);
    let started = response(None, req, ids);
    let part = |text: &str| json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []});
    let at = |mut event: Value| {
        if let Value::Object(fields) = &mut event {
            fields.insert("item_id".into(), json!(item_id));
            fields.insert("output_index".into(), json!(0));
            fields.insert("content_index".into(), json!(0));
        }
        event
    };
    let events = [
        json!({"type": "response.created", "response": started}),
        json!({"type": "response.in_progress", "response": started}),
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": {"type": "message", "id": item_id, "status": "in_progress",
                        "role": "assistant", "content": []}}),
        at(json!({"type": "response.content_part.added", "part": part("")})),
        at(json!({"type": "response.output_text.delta", "delta": reply, "logprobs": []})),
        at(json!({"type": "response.output_text.done", "text": reply, "logprobs": []})),
        at(json!({"type": "response.content_part.done", "part": part(reply)})),
        json!({"type": "response.output_item.done", "output_index": 0,
               "item": output_message(&item_id, reply)}),
        json!({"type": "response.incomplete", "response": response(Some(reply), req, ids)}),
    ];
    let mut out = Vec::new();
    for (sequence_number, mut event) in events.into_iter().enumerate() {
        let name = event.get("type").and_then(Value::as_str).map(str::to_owned);
        if let Value::Object(fields) = &mut event {
            fields.insert("sequence_number".into(), json!(sequence_number));
        }
        push_event(&mut out, name.as_deref(), &event);
    }
    out
}

pub(super) fn withhold(body: &mut Map<String, Value>, reply: &str) -> Result<(), FieldError> {
    let Some(Value::Array(output)) = body.get("output") else {
        return Err(FieldError::must_be("output", "an array"));
    };
    let message_id = output
        .iter()
        .find(|item| item.get("type").and_then(Value::as_str) == Some("message"))
        .and_then(|item| item.get("id"))
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| {
            let id = str_field(body, "id").unwrap_or_default();
            format!("msg_{}", id.strip_prefix("resp_").unwrap_or(id))
        });
    body.insert("output".into(), json!([output_message(&message_id, reply)]));
    body.insert("status".into(), json!("incomplete"));
    body.insert("incomplete_details".into(), incomplete());
    body.insert("error".into(), Value::Null);
    // Some SDK-shaped bodies carry the joined answer text too.
    body.remove("output_text");
    Ok(())
}
