//! A recovered Responses answer as the event stream a streaming caller expects: created,
//! in progress, each output item added and done (a message item with its content parts and text
//! deltas; `reasoning` and every other item whole), then the terminal event its status names, every
//! event numbered. The common part (usage, the dispatch) is `api/recovered.rs`.
//!
//! Reference: <https://platform.openai.com/docs/api-reference/responses-streaming>.

use serde_json::{json, Map, Value};

use crate::json::{push_typed, FieldError};

/// [`super::super::as_stream`] for Responses.
pub(in crate::api) fn stream(body: Map<String, Value>) -> Result<Vec<u8>, FieldError> {
    let Some(Value::Array(output)) = body.get("output") else {
        return Err(FieldError::must_be("output", "an array"));
    };
    let mut started = body.clone();
    started.insert("status".into(), json!("in_progress"));
    started.insert("output".into(), json!([]));
    started.insert("usage".into(), Value::Null);
    started.insert("incomplete_details".into(), Value::Null);
    started.insert("error".into(), Value::Null);
    // The SDK shapes add the joined text; it belongs to the finished response only.
    started.remove("output_text");
    let started = Value::Object(started);

    let mut events = vec![
        json!({"type": "response.created", "response": started}),
        json!({"type": "response.in_progress", "response": started}),
    ];
    for (index, item) in output.iter().enumerate() {
        let Value::Object(item) = item else {
            return Err(FieldError::must_be(format!("output[{index}]"), "an object"));
        };
        if item.get("type").and_then(Value::as_str) == Some("message") {
            message_events(index, item, &mut events)?;
        } else {
            events.push(
                json!({"type": "response.output_item.added", "output_index": index,
                               "item": Value::Object(item.clone())}),
            );
        }
        events.push(
            json!({"type": "response.output_item.done", "output_index": index,
                           "item": Value::Object(item.clone())}),
        );
    }
    let terminal = match body.get("status").and_then(Value::as_str) {
        Some("incomplete") => "response.incomplete",
        Some("failed") => "response.failed",
        _ => "response.completed",
    };
    events.push(json!({"type": terminal, "response": Value::Object(body.clone())}));

    let mut out = Vec::new();
    for (sequence_number, mut event) in events.into_iter().enumerate() {
        if let Value::Object(fields) = &mut event {
            fields.insert("sequence_number".into(), json!(sequence_number));
        }
        push_typed(&mut out, &event);
    }
    Ok(out)
}

/// A message item: added empty, then each content part added, its text, done; not yet the item's
/// own `done`.
fn message_events(
    index: usize,
    item: &Map<String, Value>,
    events: &mut Vec<Value>,
) -> Result<(), FieldError> {
    let item_id = item.get("id").cloned().unwrap_or(Value::Null);
    let parts = match item.get("content") {
        Some(Value::Array(parts)) => parts.as_slice(),
        None | Some(Value::Null) => &[],
        Some(_) => {
            return Err(FieldError::must_be(
                format!("output[{index}].content"),
                "an array",
            ))
        }
    };
    let mut added = item.clone();
    added.insert("status".into(), json!("in_progress"));
    added.insert("content".into(), json!([]));
    events.push(
        json!({"type": "response.output_item.added", "output_index": index,
                       "item": Value::Object(added)}),
    );
    for (content_index, part) in parts.iter().enumerate() {
        let Value::Object(part) = part else {
            return Err(FieldError::must_be(
                format!("output[{index}].content[{content_index}]"),
                "an object",
            ));
        };
        let at = |kind: &str, mut fields: Value| {
            if let Value::Object(fields) = &mut fields {
                fields.insert("type".into(), json!(kind));
                fields.insert("item_id".into(), item_id.clone());
                fields.insert("output_index".into(), json!(index));
                fields.insert("content_index".into(), json!(content_index));
            }
            fields
        };
        let text = |key: &str| part.get(key).and_then(Value::as_str).unwrap_or_default();
        match part.get("type").and_then(Value::as_str) {
            Some("output_text") => {
                let logprobs = part.get("logprobs").cloned().unwrap_or(json!([]));
                events.push(at(
                    "response.content_part.added",
                    json!({"part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}}),
                ));
                if !text("text").is_empty() {
                    events.push(at(
                        "response.output_text.delta",
                        json!({"delta": text("text"), "logprobs": logprobs}),
                    ));
                }
                events.push(at(
                    "response.output_text.done",
                    json!({"text": text("text"), "logprobs": logprobs}),
                ));
            }
            Some("refusal") => {
                events.push(at(
                    "response.content_part.added",
                    json!({"part": {"type": "refusal", "refusal": ""}}),
                ));
                if !text("refusal").is_empty() {
                    events.push(at(
                        "response.refusal.delta",
                        json!({"delta": text("refusal")}),
                    ));
                }
                events.push(at(
                    "response.refusal.done",
                    json!({"refusal": text("refusal")}),
                ));
            }
            _ => events.push(at(
                "response.content_part.added",
                json!({"part": Value::Object(part.clone())}),
            )),
        }
        events.push(at(
            "response.content_part.done",
            json!({"part": Value::Object(part.clone())}),
        ));
    }
    Ok(())
}
