//! A recovered Text Completion as the event stream a streaming caller expects: its text in one
//! `completion` event (`stop_reason: null`), then the last `completion` event, empty, with the
//! answer's stop reason; every other field (`id`, `model`, …) as the answer has it. The common part
//! (the dispatch) is `api/recovered.rs`; this API states no usage.
//!
//! Reference: <https://docs.anthropic.com/en/api/streaming>.

use serde_json::{json, Map, Value};

use crate::json::{push_typed, FieldError};

/// [`super::super::as_stream`] for Text Completions.
pub(in crate::api) fn stream(body: Map<String, Value>) -> Result<Vec<u8>, FieldError> {
    let Some(Value::String(text)) = body.get("completion") else {
        return Err(FieldError::must_be("completion", "a string"));
    };
    let event = |text: &str, last: bool| {
        let mut event = body.clone();
        event.insert("type".into(), json!("completion"));
        event.insert("completion".into(), json!(text));
        if !last {
            event.insert("stop_reason".into(), Value::Null);
            if event.contains_key("stop") {
                event.insert("stop".into(), Value::Null);
            }
        }
        Value::Object(event)
    };
    let mut out = Vec::new();
    if !text.is_empty() {
        push_typed(&mut out, &event(text, false));
    }
    push_typed(&mut out, &event("", true));
    Ok(out)
}
