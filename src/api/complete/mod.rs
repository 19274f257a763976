//! Anthropic's legacy Text Completions, `POST /v1/complete`.
//!
//! Reference: <https://docs.anthropic.com/en/api/complete> and the streamed events at
//! <https://docs.anthropic.com/en/api/streaming>.
//!
//! The request is one `prompt` string of turns, `"\n\nHuman: …\n\nAssistant:"`; it is read as the
//! Messages reader reads a conversation: the text before the first Human turn is the system prompt,
//! each Human turn is user text (the last one's is the intent), and the Assistant turns are the
//! model's own, skipped as Messages skips assistant messages. The answer is one `completion`
//! string and a `stop_reason`, `"stop_sequence"` or `"max_tokens"`: the API has no refusal nor
//! content-filter reason, so a refusal, a withheld answer and a cut end with `"stop_sequence"`,
//! the reason of an answer the model ended itself, whole and not to be continued (`"max_tokens"`
//! says the answer was cut short and invites asking for more). The API states no usage.
//! Errors are Anthropic's (`{"type": "error", "error": {…}}`).
//!
//! [`stream`] reads and rewrites its event stream as it passes; [`recovered`] re-emits a
//! recovered answer as that stream.

use serde_json::{json, Map, Value};

use super::{CallValues, CallerText, Ids, Request};
use crate::api::Answer;
use crate::json::{push_typed, FieldError, Node, Obj};

pub(super) mod recovered;
pub(crate) mod stream;

/// How a turn of the prompt starts.
const HUMAN: &str = "\n\nHuman:";
const ASSISTANT: &str = "\n\nAssistant:";

/// The reason the filter's answers end with: the model's own end of an answer.
pub(crate) const STOP_REASON: &str = "stop_sequence";

pub(super) fn parse_request(body: &Obj<'_>) -> Result<Request, FieldError> {
    let Some(Node::Str(prompt)) = body.get("prompt") else {
        return Err(FieldError::must_be("prompt", "a string"));
    };
    let mut caller = CallerText::default();
    for (speaker, text) in turns(prompt) {
        match speaker {
            Speaker::System => caller.piece(text.trim()),
            Speaker::Human => caller.message(true, &[text.trim()]),
            // The model's own words (earlier answers, or the start it is to go on from).
            Speaker::Assistant => {}
        }
    }
    let (input_text, user_texts) = caller.finish();
    Ok(Request {
        input_text,
        user_texts,
        stream: body.bool_field("stream")?,
        background: false,
        include_usage: false,
        json_array: false,
        model: body.opt_str_field("model")?,
        ..Request::default()
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Speaker {
    /// Before the first turn.
    System,
    Human,
    Assistant,
}

/// The prompt's parts in order, each with who says it: the text before the first turn (the
/// system prompt), then each turn's text after its `"\n\nHuman:"` or `"\n\nAssistant:"`.
fn turns(prompt: &str) -> Vec<(Speaker, &str)> {
    let mut out = Vec::new();
    let mut speaker = Speaker::System;
    let mut rest = prompt;
    loop {
        let next = [(HUMAN, Speaker::Human), (ASSISTANT, Speaker::Assistant)]
            .into_iter()
            .filter_map(|(marker, who)| rest.find(marker).map(|at| (at, marker, who)))
            .min_by_key(|(at, _, _)| *at);
        let Some((at, marker, who)) = next else {
            out.push((speaker, rest));
            return out;
        };
        out.push((speaker, rest.get(..at).unwrap_or_default()));
        rest = rest.get(at + marker.len()..).unwrap_or_default();
        speaker = who;
    }
}

pub(super) fn parse_answer(body: &Obj<'_>, rule_text: bool) -> Result<Answer, FieldError> {
    let Some(text) = body.str_field("completion") else {
        return Err(FieldError::must_be("completion", "a string"));
    };
    Ok(Answer {
        rule_text: CallValues::new(rule_text).rule_text(text),
        text: text.to_owned(),
        asks_for_tool: false,
        id: body.str_field("id").map(str::to_owned),
        calls: Vec::new(),
    })
}

/// A completion object saying `text`, ending with `stop_reason`.
fn completion(req: &Request, ids: &Ids, text: &str, stop_reason: Option<&str>) -> Value {
    json!({
        "type": "completion",
        "id": format!("compl_{}", ids.token),
        "completion": text,
        "stop_reason": stop_reason,
        "model": req.model.as_deref().unwrap_or_default(),
    })
}

pub(super) fn refusal(reply: &str, req: &Request, ids: &Ids) -> Vec<u8> {
    crate::json::to_vec(&completion(req, ids, reply, Some(STOP_REASON)))
}

/// The refusal as the vendor streams an answer: its text in one `completion` event, then the
/// last one, empty, with the stop reason.
pub(super) fn refusal_stream(reply: &str, req: &Request, ids: &Ids) -> Vec<u8> {
    let mut out = Vec::new();
    push_typed(&mut out, &completion(req, ids, reply, None));
    push_typed(&mut out, &completion(req, ids, "", Some(STOP_REASON)));
    out
}

pub(super) fn withhold(body: &mut Map<String, Value>, reply: &str) -> Result<(), FieldError> {
    if !matches!(body.get("completion"), Some(Value::String(_))) {
        return Err(FieldError::must_be("completion", "a string"));
    }
    body.insert("completion".into(), json!(reply));
    body.insert("stop_reason".into(), json!(STOP_REASON));
    // The stop sequence it met (some answers say it): none was met.
    if body.contains_key("stop") {
        body.insert("stop".into(), Value::Null);
    }
    Ok(())
}

#[cfg(test)]
mod tests;
