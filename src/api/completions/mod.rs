//! OpenAI's legacy text completions, `POST /v1/completions` (and Azure's
//! `/openai/deployments/{d}/completions`): a `prompt` continued as `choices[].text`.
//!
//! Reference: <https://platform.openai.com/docs/api-reference/completions>.
//!
//! As `api/chat/`: here the request an input check reads, the answer an output check reads, and
//! the bodies the filter writes in its shape (a refusal, a withheld answer; the error is OpenAI's,
//! [`super::chat::error`]); [`stream`] reads and rewrites its event stream as it passes;
//! [`recovered`] re-emits a recovered answer as that stream. The API has no tools and no roles:
//! every prompt is the caller's own text (a user message each), and `suffix` is read beside it.

use serde_json::{json, Map, Value};

use super::{Answer, CallValues, CallerText, Ids, Request};
use crate::json::{push_event, FieldError, Node, Obj};

pub(super) mod recovered;
pub(crate) mod stream;

/// What a `prompt` must be: the vendor also takes token ids, which no check can read as text.
const PROMPT_TEXT: &str = "a string or an array of strings (token ids cannot be checked)";
const PROMPT_ITEM: &str = "a string (token ids cannot be checked)";

pub(super) fn parse_request(body: &Obj<'_>) -> Result<Request, FieldError> {
    let mut caller = CallerText::default();
    match body.get("prompt") {
        Some(Node::Str(prompt)) => caller.message(true, &[prompt]),
        Some(Node::Array(prompts)) => {
            for (i, prompt) in prompts.iter().enumerate() {
                let Node::Str(prompt) = prompt else {
                    return Err(FieldError::must_be(format!("prompt[{i}]"), PROMPT_ITEM));
                };
                // Each prompt is answered on its own: a user message each.
                caller.message(true, &[prompt]);
            }
        }
        _ => return Err(FieldError::must_be("prompt", PROMPT_TEXT)),
    }
    match body.get("suffix") {
        None | Some(Node::Null) => {}
        Some(Node::Str(suffix)) => caller.piece(suffix),
        Some(_) => return Err(FieldError::must_be("suffix", "a string")),
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
    for (i, choice) in choices.iter().enumerate() {
        let Node::Object(choice) = choice else {
            return Err(FieldError::must_be(format!("choices[{i}]"), "an object"));
        };
        match choice.get("text") {
            None | Some(Node::Null) => {}
            Some(Node::Str(piece)) => text.push_str(piece),
            Some(_) => {
                return Err(FieldError::must_be(
                    format!("choices[{i}].text"),
                    "a string",
                ))
            }
        }
    }
    Ok(Answer {
        // No tool calls: the rule text is the text.
        rule_text: CallValues::new(rule_text).rule_text(&text),
        text,
        asks_for_tool: false,
        id: body.str_field("id").map(str::to_owned),
        calls: Vec::new(),
    })
}

/// A choice saying `text`, ended as the vendor ends a filtered one.
fn choice(index: Value, text: &str, finish: Value) -> Value {
    json!({"text": text, "index": index, "logprobs": null, "finish_reason": finish})
}

fn zero_usage() -> Value {
    json!({"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0})
}

pub(super) fn refusal(reply: &str, req: &Request, ids: &Ids) -> Vec<u8> {
    crate::json::to_vec(&json!({
        "id": format!("cmpl-{}", ids.token),
        "object": "text_completion",
        "created": ids.created,
        "model": req.model.as_deref().unwrap_or_default(),
        "choices": [choice(json!(0), reply, json!("content_filter"))],
        "usage": zero_usage(),
    }))
}

pub(super) fn refusal_stream(reply: &str, req: &Request, ids: &Ids) -> Vec<u8> {
    let chunk = |choices: Value| {
        let mut chunk = json!({
            "id": format!("cmpl-{}", ids.token),
            "object": "text_completion",
            "created": ids.created,
            "choices": choices,
            "model": req.model.as_deref().unwrap_or_default(),
        });
        // With include_usage every chunk carries `usage: null` but the last, as the vendor does.
        if let (true, Value::Object(chunk)) = (req.include_usage, &mut chunk) {
            chunk.insert("usage".into(), Value::Null);
        }
        chunk
    };
    let mut chunks = vec![
        chunk(json!([choice(json!(0), reply, Value::Null)])),
        chunk(json!([choice(json!(0), "", json!("content_filter"))])),
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
        choices.push(choice(json!(0), reply, json!("content_filter")));
    }
    for (i, slot) in choices.iter_mut().enumerate() {
        let index = slot.get("index").cloned().unwrap_or_else(|| json!(i));
        // A fresh choice: the log probabilities carry the answer's tokens too.
        *slot = choice(index, reply, json!("content_filter"));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
