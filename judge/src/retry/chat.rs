//! Recovery's rules for OpenAI Chat Completions (`POST /v1/chat/completions`): how the original
//! request is asked again. Tool history is a `tool` / `function` message or an assistant message
//! with tool calls; the tools and the deprecated functions each go, or stay with their choice set to
//! `none`; the instruction is a last `system` message. Its own file so that a reader looking for
//! what the sidecar does with a Chat request opens one place.

use serde_json::{json, Map, Value};

use super::{disable_tools, objects};

/// The path suffix of this API, as the filter recognises it.
pub(super) fn adapt(body: &mut Map<String, Value>, instruction: String, keep_tools: bool) {
    let tool_history = objects(body.get("messages")).any(|m| {
        let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
        let calls = m
            .get("tool_calls")
            .and_then(Value::as_array)
            .is_some_and(|c| !c.is_empty());
        let legacy = m.get("function_call").is_some_and(Value::is_object);
        matches!(role, "tool" | "function") || calls || legacy
    });
    if !keep_tools {
        body.remove("parallel_tool_calls");
        disable_tools(
            body,
            tool_history,
            &["tools"],
            &["tool_choice"],
            json!("none"),
        );
        // The deprecated functions: the same, with their own choice.
        disable_tools(
            body,
            tool_history,
            &["functions"],
            &["function_call"],
            json!("none"),
        );
    }
    let message = json!({"role": "system", "content": instruction});
    match body.get_mut("messages") {
        Some(Value::Array(messages)) => messages.push(message),
        _ => {
            body.insert("messages".into(), json!([message]));
        }
    }
}
