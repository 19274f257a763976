//! A recovered legacy completion as the chunks a streaming caller expects: per choice one chunk
//! with its text (and log probabilities), then one with its `finish_reason`; a usage chunk (no
//! choices) when the request set `stream_options.include_usage`; then `data: [DONE]`. The common
//! part (usage, the dispatch) is `api/recovered.rs`.
//!
//! Reference: <https://platform.openai.com/docs/api-reference/completions/create> (`stream`).

use serde_json::{json, Map, Value};

use crate::api::chat::recovered::{end_openai_stream, openai_chunk_head};
use crate::api::Request;
use crate::json::{push_event, FieldError};

/// Top-level fields of an answer that every chunk repeats.
const CHUNK_HEAD: &[&str] = &["id", "created", "model", "system_fingerprint"];

/// [`super::super::as_stream`] for legacy completions.
pub(in crate::api) fn stream(
    body: Map<String, Value>,
    request: &Request,
) -> Result<Vec<u8>, FieldError> {
    let Some(Value::Array(choices)) = body.get("choices") else {
        return Err(FieldError::must_be("choices", "an array"));
    };
    let head = openai_chunk_head(&body, CHUNK_HEAD, "text_completion", request);
    let mut out = Vec::new();
    let mut chunk = |choices: Value| {
        let mut chunk = head.clone();
        chunk.insert("choices".into(), choices);
        push_event(&mut out, None, &Value::Object(chunk));
    };
    for (i, choice) in choices.iter().enumerate() {
        let Value::Object(choice) = choice else {
            return Err(FieldError::must_be(format!("choices[{i}]"), "an object"));
        };
        let index = choice.get("index").cloned().unwrap_or_else(|| json!(i));
        let text = choice.get("text").cloned().unwrap_or_else(|| json!(""));
        let logprobs = choice.get("logprobs").cloned().unwrap_or(Value::Null);
        chunk(json!([{"text": text, "index": index, "logprobs": logprobs,
                      "finish_reason": null}]));
        let finish = choice
            .get("finish_reason")
            .cloned()
            .filter(|f| !f.is_null())
            .unwrap_or(json!("stop"));
        chunk(json!([{"text": "", "index": index, "logprobs": null, "finish_reason": finish}]));
    }
    end_openai_stream(&mut out, head, &body, request);
    Ok(out)
}
