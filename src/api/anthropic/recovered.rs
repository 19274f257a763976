//! A recovered Anthropic answer as the event stream a streaming caller expects: `message_start`,
//! each content block started, its deltas, stopped, then `message_delta` and `message_stop`.
//! `thinking` is re-emitted as `thinking_delta` and `signature_delta`; other blocks arrive whole in
//! their `content_block_start`. The common part (usage, the dispatch) is `api/recovered.rs`.
//!
//! Reference: <https://docs.anthropic.com/en/docs/build-with-claude/streaming>.

use serde_json::{json, Map, Value};

use crate::json::{push_typed, FieldError};

/// [`super::super::as_stream`] for Anthropic Messages.
pub(in crate::api) fn stream(body: Map<String, Value>) -> Result<Vec<u8>, FieldError> {
    let Some(Value::Array(content)) = body.get("content") else {
        return Err(FieldError::must_be("content", "an array"));
    };
    let usage = match body.get("usage") {
        Some(Value::Object(usage)) => usage.clone(),
        _ => Map::new(),
    };
    // The start says no output yet; `message_delta` carries the cumulative counts, which the SDK
    // copies onto the message.
    let mut start_usage = usage.clone();
    start_usage.insert("output_tokens".into(), json!(0));
    let mut start = body.clone();
    start.insert("content".into(), json!([]));
    start.insert("stop_reason".into(), Value::Null);
    start.insert("stop_sequence".into(), Value::Null);
    start.insert("usage".into(), Value::Object(start_usage));

    let mut out = Vec::new();
    push_typed(
        &mut out,
        &json!({"type": "message_start", "message": Value::Object(start)}),
    );
    for (index, block) in content.iter().enumerate() {
        let Value::Object(block) = block else {
            return Err(FieldError::must_be(
                format!("content[{index}]"),
                "an object",
            ));
        };
        let (first, deltas) = anthropic_block(block);
        push_typed(
            &mut out,
            &json!({"type": "content_block_start", "index": index, "content_block": first}),
        );
        for delta in deltas {
            push_typed(
                &mut out,
                &json!({"type": "content_block_delta", "index": index, "delta": delta}),
            );
        }
        push_typed(
            &mut out,
            &json!({"type": "content_block_stop", "index": index}),
        );
    }
    let stop = |key: &str| body.get(key).cloned().unwrap_or(Value::Null);
    let mut end_usage = usage;
    end_usage.entry("output_tokens").or_insert_with(|| json!(0));
    push_typed(
        &mut out,
        &json!({"type": "message_delta",
                "delta": {"stop_reason": stop("stop_reason"), "stop_sequence": stop("stop_sequence")},
                "usage": Value::Object(end_usage)}),
    );
    push_typed(&mut out, &json!({"type": "message_stop"}));
    Ok(out)
}

/// A content block as `content_block_start` announces it, and the deltas that complete it.
fn anthropic_block(block: &Map<String, Value>) -> (Value, Vec<Value>) {
    let text = |key: &str| block.get(key).and_then(Value::as_str).unwrap_or_default();
    match block.get("type").and_then(Value::as_str) {
        Some("text") => {
            let mut deltas = Vec::new();
            if !text("text").is_empty() {
                deltas.push(json!({"type": "text_delta", "text": text("text")}));
            }
            if let Some(Value::Array(citations)) = block.get("citations") {
                deltas.extend(
                    citations
                        .iter()
                        .map(|c| json!({"type": "citations_delta", "citation": c})),
                );
            }
            (json!({"type": "text", "text": ""}), deltas)
        }
        Some("thinking") => {
            let mut deltas = Vec::new();
            if !text("thinking").is_empty() {
                deltas.push(json!({"type": "thinking_delta", "thinking": text("thinking")}));
            }
            if !text("signature").is_empty() {
                deltas.push(json!({"type": "signature_delta", "signature": text("signature")}));
            }
            (
                json!({"type": "thinking", "thinking": "", "signature": ""}),
                deltas,
            )
        }
        Some("tool_use" | "server_tool_use" | "mcp_tool_use") => {
            let mut first = block.clone();
            first.insert("input".into(), json!({}));
            let deltas = match block.get("input") {
                Some(Value::Object(input)) if input.is_empty() => Vec::new(),
                Some(input) => vec![json!({"type": "input_json_delta",
                                           "partial_json": input.to_string()})],
                None => Vec::new(),
            };
            (Value::Object(first), deltas)
        }
        // Redacted thinking, tool results and anything newer arrive whole in the start event.
        _ => (Value::Object(block.clone()), Vec::new()),
    }
}
