//! A recovered Chat Completions answer as the chunks a streaming caller expects: per choice its
//! role, `reasoning_content` (OpenAI-compatible servers) as one delta, content, refusal and tool
//! calls, then its `finish_reason`; a usage chunk when the request set
//! `stream_options.include_usage`; then `data: [DONE]`. The common part (usage, the dispatch) is
//! `api/recovered.rs`. The chunk head and the stream's end are written here for the legacy
//! completions too, whose stream has Chat's shape.
//!
//! Reference: <https://platform.openai.com/docs/api-reference/chat-streaming>.

use serde_json::{json, Map, Value};

use crate::api::Request;
use crate::json::{push_event, FieldError};

/// Top-level fields of an answer that every chunk repeats.
const CHUNK_HEAD: &[&str] = &[
    "id",
    "created",
    "model",
    "system_fingerprint",
    "service_tier",
];

/// [`super::super::as_stream`] for Chat Completions.
pub(in crate::api) fn stream(
    body: Map<String, Value>,
    request: &Request,
) -> Result<Vec<u8>, FieldError> {
    let Some(Value::Array(choices)) = body.get("choices") else {
        return Err(FieldError::must_be("choices", "an array"));
    };
    let head = openai_chunk_head(&body, CHUNK_HEAD, "chat.completion.chunk", request);
    let mut out = Vec::new();
    let mut chunk = |index: &Value, delta: Value, logprobs: Value, finish: Value| {
        let mut chunk = head.clone();
        chunk.insert(
            "choices".into(),
            json!([{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}]),
        );
        push_event(&mut out, None, &Value::Object(chunk));
    };
    for (i, choice) in choices.iter().enumerate() {
        let Value::Object(choice) = choice else {
            return Err(FieldError::must_be(format!("choices[{i}]"), "an object"));
        };
        let index = choice.get("index").cloned().unwrap_or_else(|| json!(i));
        let empty = Map::new();
        let message = match choice.get("message") {
            Some(Value::Object(message)) => message,
            _ => &empty,
        };
        let text = |key: &str| {
            message
                .get(key)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        };
        let role = message.get("role").cloned().unwrap_or(json!("assistant"));
        chunk(
            &index,
            json!({"role": role, "content": "", "refusal": null}),
            Value::Null,
            Value::Null,
        );
        if let Some(reasoning) = text("reasoning_content") {
            chunk(
                &index,
                json!({"reasoning_content": reasoning}),
                Value::Null,
                Value::Null,
            );
        }
        let logprobs = choice.get("logprobs").cloned().unwrap_or(Value::Null);
        let mut logprobs = Some(logprobs).filter(|l| !l.is_null());
        if let Some(content) = text("content") {
            let lp = logprobs.take().unwrap_or(Value::Null);
            chunk(&index, json!({"content": content}), lp, Value::Null);
        }
        if let Some(refusal) = text("refusal") {
            let lp = logprobs.take().unwrap_or(Value::Null);
            chunk(&index, json!({"refusal": refusal}), lp, Value::Null);
        }
        if let Some(Value::Array(calls)) = message.get("tool_calls") {
            let calls: Vec<Value> = calls
                .iter()
                .enumerate()
                .map(|(j, call)| {
                    let mut call = call.clone();
                    if let Value::Object(call) = &mut call {
                        call.insert("index".into(), json!(j));
                    }
                    call
                })
                .collect();
            if !calls.is_empty() {
                chunk(
                    &index,
                    json!({"tool_calls": calls}),
                    Value::Null,
                    Value::Null,
                );
            }
        }
        if let Some(call @ Value::Object(_)) = message.get("function_call") {
            chunk(
                &index,
                json!({"function_call": call}),
                Value::Null,
                Value::Null,
            );
        }
        let finish = choice
            .get("finish_reason")
            .cloned()
            .filter(|f| !f.is_null())
            .unwrap_or(json!("stop"));
        chunk(&index, json!({}), logprobs.unwrap_or(Value::Null), finish);
    }
    end_openai_stream(&mut out, head, &body, request);
    Ok(out)
}

/// What every chunk of an OpenAI stream (Chat, legacy completions) repeats, from the non-streamed
/// answer `body`: its `fields`, the chunks' `object`, and `usage: null` when the request asked for
/// a usage chunk (the vendor says so in every chunk but the last).
pub(in crate::api) fn openai_chunk_head(
    body: &Map<String, Value>,
    fields: &[&str],
    object: &str,
    request: &Request,
) -> Map<String, Value> {
    let mut head: Map<String, Value> = fields
        .iter()
        .filter_map(|k| body.get(*k).map(|v| ((*k).to_owned(), v.clone())))
        .collect();
    head.insert("object".into(), json!(object));
    if request.include_usage {
        head.insert("usage".into(), Value::Null);
    }
    head
}

/// The end of an OpenAI stream: the usage chunk (no choices, the answer's usage) when the request
/// asked for one, then `data: [DONE]`.
pub(in crate::api) fn end_openai_stream(
    out: &mut Vec<u8>,
    mut head: Map<String, Value>,
    body: &Map<String, Value>,
    request: &Request,
) {
    if request.include_usage {
        head.insert("choices".into(), json!([]));
        head.insert(
            "usage".into(),
            body.get("usage").cloned().unwrap_or(Value::Null),
        );
        push_event(out, None, &Value::Object(head));
    }
    out.extend_from_slice(b"data: [DONE]\n\n");
}
