//! Recovery's rules for the OpenAI Responses API (`POST /v1/responses`): how the original request is
//! asked again. A request in a stored conversation cannot be (the rejected answer is part of it);
//! `background` goes; tool history in `input`, an earlier response or a stored prompt keeps the
//! tools with the choice `none`; the instruction joins `instructions`. Its own file so that a reader
//! looking for what the sidecar does with a Responses request opens one place.

use serde_json::{json, Map, Value};

use super::{disable_tools, objects, type_of, Failure};

/// The path suffix of this API, as the filter recognises it.
pub(super) fn adapt(
    body: &mut Map<String, Value>,
    instruction: String,
    keep_tools: bool,
) -> Result<(), Failure> {
    // The original's answer, the rejected one, is already part of a stored conversation.
    if body.get("conversation").is_some_and(|c| !c.is_null()) {
        return Err(Failure::StoredConversation);
    }
    body.remove("background");
    if !keep_tools {
        body.remove("parallel_tool_calls");
    }
    let input_history = objects(body.get("input")).any(|item| {
        let kind = type_of(item);
        kind.ends_with("_call") || kind.ends_with("_call_output") || kind.starts_with("mcp_")
    });
    // An earlier response or a stored prompt may hold tool calls or tools the request cannot show:
    // keep what there is and choose none.
    let unseen = ["previous_response_id", "prompt"]
        .iter()
        .any(|k| body.get(*k).is_some_and(|v| !v.is_null()));
    if keep_tools {
        // Stopped for a denied tool call: the model may call tools again.
    } else if input_history || unseen {
        body.insert("tool_choice".into(), json!("none"));
    } else {
        disable_tools(body, false, &["tools"], &["tool_choice"], json!("none"));
        body.remove("max_tool_calls");
    }
    match body.get_mut("instructions") {
        Some(Value::String(text)) if !text.is_empty() => {
            text.push_str("\n\n");
            text.push_str(&instruction);
        }
        _ => {
            body.insert("instructions".into(), Value::String(instruction));
        }
    }
    Ok(())
}
