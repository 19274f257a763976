//! A stream seen from both ends, for the properties the rewriter must keep (tests/stream_properties.rs
//! and the fuzz targets in `fuzz/` read streams through here, so both judge the rewriter the same
//! way): [`upstream`] writes an answer whose text arrives in given deltas, in each vendor's
//! documented event shape; [`decode`] reads back what a caller's SDK would show from the bytes it
//! received, and refuses bytes that are not valid in the vendor's format.
//!
//! Not used by the filter itself: the shipped `.wasm` links none of it.

use std::rc::Rc;

use serde_json::{json, Value};

use super::framing::{Framing, ERROR, EXCEPTION};
use super::{Cut, Hold, Rewriter, Step};
use crate::api::{Api, Request};
use crate::config::Version;
use crate::eventstream;
use crate::sse;

/// An upstream stream whose answer text arrives in `deltas`, one text event per delta, then the
/// vendor's end of the answer (Anthropic's `message_stop`, Chat's `[DONE]`, Responses'
/// `response.completed`).
pub fn upstream(api: Api, deltas: &[String]) -> Vec<u8> {
    let mut out = Vec::new();
    if api == Api::Converse {
        converse_upstream(deltas, &mut out);
        return out;
    }
    let mut event = |data: Value| {
        let name = data.get("type").and_then(Value::as_str).map(str::to_owned);
        sse::encode(&mut out, name.as_deref(), &data.to_string());
    };
    match api {
        Api::AnthropicMessages => {
            event(json!({"type": "message_start", "message": {"id": "msg_1",
                "type": "message", "role": "assistant", "model": "m", "content": [],
                "usage": {"input_tokens": 1, "output_tokens": 1}}}));
            event(json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}}));
            for d in deltas {
                event(json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": d}}));
                event(json!({"type": "ping"}));
            }
            event(json!({"type": "content_block_stop", "index": 0}));
            event(json!({"type": "message_delta",
                "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}}));
            event(json!({"type": "message_stop"}));
        }
        Api::ChatCompletions => {
            let chunk = |delta: Value, finish: Value| {
                json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                       "choices": [{"index": 0, "delta": delta, "logprobs": null,
                                    "finish_reason": finish}]})
            };
            for d in deltas {
                event(chunk(json!({"content": d}), Value::Null));
            }
            event(chunk(json!({}), json!("stop")));
            sse::encode(&mut out, None, "[DONE]");
        }
        Api::Responses => {
            let response = json!({"id": "resp_1", "object": "response", "status": "in_progress",
                                  "model": "m", "output": []});
            event(json!({"type": "response.created", "sequence_number": 0,
                "response": response}));
            event(
                json!({"type": "response.output_item.added", "sequence_number": 1,
                "output_index": 0, "item": {"id": "msg_1", "type": "message",
                "status": "in_progress", "role": "assistant", "content": []}}),
            );
            for (i, d) in deltas.iter().enumerate() {
                event(json!({"type": "response.output_text.delta",
                    "sequence_number": i + 2, "item_id": "msg_1", "output_index": 0,
                    "content_index": 0, "delta": d}));
            }
            event(json!({"type": "response.completed",
                "sequence_number": deltas.len() + 2, "response": response}));
        }
        Api::Completions => {
            let chunk = |text: &str, finish: Value| {
                json!({"id": "cmpl-1", "object": "text_completion", "created": 1,
                       "choices": [{"text": text, "index": 0, "logprobs": null,
                                    "finish_reason": finish}], "model": "m"})
            };
            for d in deltas {
                event(chunk(d, Value::Null));
            }
            event(chunk("", json!("stop")));
            sse::encode(&mut out, None, "[DONE]");
        }
        // Written above, framed as AWS event-stream messages.
        Api::Converse => {}
        Api::Gemini => {
            // No end marker: the last chunk carries the finish and the usage.
            let chunk = |text: &str, finish: Value| {
                json!({"candidates": [{"content": {"parts": [{"text": text}], "role": "model"},
                                       "finishReason": finish, "index": 0}],
                       "usageMetadata": {"promptTokenCount": 1, "totalTokenCount": 1},
                       "modelVersion": "m", "responseId": "r_1"})
            };
            for d in deltas {
                event(chunk(d, Value::Null));
            }
            event(chunk("", json!("STOP")));
        }
        Api::AnthropicComplete => {
            let completion = |text: &str, stop: Value| {
                json!({"type": "completion", "id": "compl_1", "completion": text,
                       "stop_reason": stop, "model": "m"})
            };
            for d in deltas {
                event(completion(d, Value::Null));
                event(json!({"type": "ping"}));
            }
            event(completion("", json!("stop_sequence")));
        }
        Api::Embeddings | Api::MessageBatches => {}
    }
    out
}

/// A converse-stream saying `deltas`: each a text delta of block 0 (with the padding member `p`
/// Bedrock adds), then the block's stop, `messageStop` and `metadata`.
fn converse_upstream(deltas: &[String], out: &mut Vec<u8>) {
    let mut frame = |name: &str, data: Value| {
        let _ = eventstream::encode_event(out, name, data.to_string().as_bytes());
    };
    frame("messageStart", json!({"role": "assistant"}));
    for d in deltas {
        frame(
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"text": d}, "p": "abcdefgh"}),
        );
    }
    frame("contentBlockStop", json!({"contentBlockIndex": 0}));
    frame("messageStop", json!({"stopReason": "end_turn"}));
    frame(
        "metadata",
        json!({"usage": {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2},
               "metrics": {"latencyMs": 1}}),
    );
}

/// The events of a stream as its vendor frames them (SSE; Converse: AWS event-stream messages,
/// named as [`Framing::EventStream`] names them), and whether all of it was read.
fn events_of(api: Api, bytes: &[u8]) -> (Vec<sse::Event>, Result<(), NotInFormat>) {
    let mut events = Vec::new();
    if api != Api::Converse {
        let mut decoder = sse::Decoder::new(usize::MAX);
        let decoded = decoder
            .push(bytes, &mut events)
            .and_then(|()| decoder.finish(&mut events))
            .map_err(NotInFormat::Sse);
        return (events, decoded);
    }
    let mut framing = Framing::event_stream(usize::MAX);
    let mut rest = bytes;
    while !rest.is_empty() {
        match framing.push_event(rest, &mut events) {
            Ok(read) => rest = rest.get(read..).unwrap_or_default(),
            Err(_) => return (events, Err(NotInFormat::EventStream)),
        }
    }
    let ended = framing
        .finish(&mut events)
        .map_err(|_| NotInFormat::EventStream);
    (events, ended)
}

/// Gemini's stream without `alt=sse` saying `deltas`: [`upstream`]'s chunks as the elements of one
/// JSON array, separated as Google separates them.
pub fn upstream_array(deltas: &[String]) -> Vec<u8> {
    let mut events = Vec::new();
    let mut decoder = sse::Decoder::new(usize::MAX);
    let _ = decoder.push(&upstream(Api::Gemini, deltas), &mut events);
    let elements: Vec<String> = events.into_iter().map(|e| e.data).collect();
    format!("[{}]", elements.join(",\r\n")).into_bytes()
}

/// Reads Gemini's JSON-array stream as a caller does: the bytes must be one JSON array of
/// objects (else [`NotInFormat::NotJson`] or [`NotInFormat::NotObject`] at event 0), each element
/// read as [`decode`] reads a chunk.
pub fn decode_array(bytes: &[u8]) -> Result<Decoded, NotInFormat> {
    let elements: Vec<Value> =
        serde_json::from_slice(bytes).map_err(|_| NotInFormat::NotJson { event: 0 })?;
    let mut chunks = Vec::new();
    for element in &elements {
        if !element.is_object() {
            return Err(NotInFormat::NotObject { event: 0 });
        }
        sse::encode(&mut chunks, None, &element.to_string());
    }
    decode(Api::Gemini, &chunks)
}

/// What a caller read from a stream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decoded {
    /// The answer text, as the vendor's SDK shows it: every text delta, in order.
    pub text: String,
    /// How many events arrived.
    pub events: usize,
}

/// Why bytes a caller received are not valid in the vendor's format ([`decode`]); events are
/// counted from 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotInFormat {
    /// Not SSE.
    Sse(sse::SseError),
    /// Not a whole AWS event stream of events, exceptions and errors (Converse).
    EventStream,
    /// The event's data is not JSON.
    NotJson { event: usize },
    /// The event's data is JSON but not an object.
    NotObject { event: usize },
    /// The event's name is not its `type`.
    Misnamed { event: usize },
    /// The event's text delta is not a string.
    TextNotString { event: usize },
}

impl std::fmt::Display for NotInFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Sse(e) => e.fmt(f),
            Self::EventStream => write!(f, "not a whole AWS event stream"),
            Self::NotJson { event } => write!(f, "event {event}: its data is not JSON"),
            Self::NotObject { event } => write!(f, "event {event}: its data is not a JSON object"),
            Self::Misnamed { event } => write!(f, "event {event}: named other than its type"),
            Self::TextNotString { event } => write!(f, "event {event}: its text is not a string"),
        }
    }
}

impl std::error::Error for NotInFormat {}

/// Reads the bytes a caller received as the vendor's SDK would. An error says what is not valid in
/// the vendor's format: not SSE, an event whose data is not a JSON object (Chat's `[DONE]` aside),
/// an event named other than its `type`, a text delta that is not a string.
pub fn decode(api: Api, bytes: &[u8]) -> Result<Decoded, NotInFormat> {
    let (events, framed) = events_of(api, bytes);
    framed?;
    let mut out = Decoded {
        events: events.len(),
        ..Decoded::default()
    };
    for (i, e) in events.iter().enumerate() {
        if matches!(api, Api::ChatCompletions | Api::Completions) && e.data == "[DONE]" {
            continue;
        }
        // An AWS exception or error: in the format (the SDK raises it), no JSON asked of it.
        let name = e.event.as_deref().unwrap_or_default();
        if api == Api::Converse && (name.starts_with(EXCEPTION) || name.starts_with(ERROR)) {
            continue;
        }
        let data: Value =
            serde_json::from_str(&e.data).map_err(|_| NotInFormat::NotJson { event: i })?;
        if !data.is_object() {
            return Err(NotInFormat::NotObject { event: i });
        }
        let kind = data.get("type").and_then(Value::as_str);
        // Converse names its events by `:event-type`; its payloads carry no `type`.
        if let Some(name) = e.event.as_ref().filter(|_| api != Api::Converse) {
            if kind != Some(name.as_str()) {
                return Err(NotInFormat::Misnamed { event: i });
            }
        }
        let piece = match api {
            Api::AnthropicMessages if kind == Some("content_block_delta") => data
                .pointer("/delta/type")
                .filter(|t| *t == "text_delta")
                .and_then(|_| data.pointer("/delta/text")),
            Api::AnthropicMessages => None,
            Api::ChatCompletions => data.pointer("/choices/0/delta/content"),
            Api::Responses if kind == Some("response.output_text.delta") => data.get("delta"),
            Api::Responses => None,
            Api::Completions => data.pointer("/choices/0/text"),
            Api::AnthropicComplete if kind == Some("completion") => data.get("completion"),
            Api::AnthropicComplete => None,
            // The candidate's text parts, joined (a split chunk's rest keeps its other parts as
            // empty texts).
            Api::Gemini => {
                if let Some(Value::Array(parts)) = data.pointer("/candidates/0/content/parts") {
                    for part in parts {
                        if part.get("thought") == Some(&json!(true)) {
                            continue;
                        }
                        match part.get("text") {
                            None | Some(Value::Null) => {}
                            Some(Value::String(s)) => out.text.push_str(s),
                            Some(_) => return Err(NotInFormat::TextNotString { event: i }),
                        }
                    }
                }
                None
            }
            Api::Embeddings => None,
            Api::MessageBatches => None,
            Api::Converse if name == "contentBlockDelta" => data.pointer("/delta/text"),
            Api::Converse => None,
        };
        match piece {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => out.text.push_str(s),
            Some(_) => return Err(NotInFormat::TextNotString { event: i }),
        }
    }
    Ok(out)
}

/// What a caller reads from a stream but for how the text is divided among its events: the text
/// its SDK shows ([`decode`]; `None` for bytes out of the vendor's format), and the events with
/// their text emptied (and Responses' sequence numbers, which count the events), a run of equal
/// text events counted once (a text event split in two); an error of the SSE decoder ends the
/// list. The rewriter keeps this, not the bytes, the same however the upstream was split: text
/// confirmed by a later event of the same body chunk goes in its own event whole, text confirmed
/// only by a later chunk in two parts.
pub fn read_by_caller(api: Api, bytes: &[u8]) -> (Option<String>, Vec<(Option<String>, String)>) {
    let (events, decoded) = events_of(api, bytes);
    let text_at: &[&str] = match api {
        Api::AnthropicMessages => &["/delta/text"],
        Api::ChatCompletions => &["/choices/0/delta/content"],
        Api::Responses => &["/delta"],
        Api::Completions => &["/choices/0/text"],
        Api::AnthropicComplete => &["/completion"],
        Api::Gemini => &["/candidates/0/content/parts/0/text"],
        Api::Converse => &["/delta/text"],
        Api::Embeddings => &[],
        Api::MessageBatches => &[],
    };
    let mut shapes: Vec<(Option<String>, String)> = Vec::new();
    let mut last_was_text = false;
    for e in events {
        let mut is_text = false;
        let data = match serde_json::from_str::<Value>(&e.data) {
            Ok(mut v) => {
                for p in text_at {
                    if let Some(t) = v.pointer_mut(p).filter(|t| t.is_string()) {
                        *t = Value::from("");
                        is_text = true;
                    }
                }
                if let Some(n) = v.pointer_mut("/sequence_number") {
                    *n = Value::Null;
                }
                v.to_string()
            }
            Err(_) => e.data,
        };
        let shape = (e.event, data);
        // A text event split in two: its parts count once.
        if !(is_text && last_was_text && shapes.last() == Some(&shape)) {
            shapes.push(shape);
        }
        last_was_text = is_text;
    }
    if let Err(e) = decoded {
        shapes.push((Some("error".to_owned()), e.to_string()));
    }
    (decode(api, bytes).ok().map(|d| d.text), shapes)
}

/// How a stream went through the rewriter: every byte the caller received, the cut (if any), and
/// whether a held round went on unjudged past the limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewritten {
    pub out: Vec<u8>,
    pub cut: Option<Cut>,
    pub unjudged: bool,
}

/// An upstream `body` through the rewriter in `size`-byte chunks, holding at most `limit` bytes
/// whole, a held round decided as the turn decides it on the version's rules alone: cut at a
/// match, else released.
pub fn rewrite(
    api: Api,
    hold: Hold,
    version: &Rc<Version>,
    body: &[u8],
    size: usize,
    limit: usize,
) -> Rewritten {
    let request = Request {
        stream: true,
        ..Request::default()
    };
    rewrite_request(api, &request, hold, version, body, size, limit)
}

/// [`rewrite`] for a stream `request` asked for (Gemini's JSON array: [`Request::json_array`]).
pub fn rewrite_request(
    api: Api,
    request: &Request,
    hold: Hold,
    version: &Rc<Version>,
    body: &[u8],
    size: usize,
    limit: usize,
) -> Rewritten {
    let mut rw = Rewriter::new(api, Rc::clone(version), request, hold, limit);
    let mut done = Rewritten {
        out: Vec::new(),
        cut: None,
        unjudged: false,
    };
    let mut round = None;
    let mut take = |step: Step| {
        done.out.extend(step.out);
        done.cut = done.cut.or(step.cut);
        round = round.take().or(step.round_end);
        done.unjudged |= step.unjudged;
    };
    for chunk in body.chunks(size.max(1)) {
        take(rw.feed(chunk));
    }
    take(rw.finish());
    if let Some(round) = round {
        let hit = round.early.or_else(|| {
            version
                .output_rules
                .first_hit(&round.rule_text)
                .map(|h| h.check)
        });
        done.out.extend(match hit {
            Some(check) => rw.cut(check),
            None => rw.release(),
        });
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_written_upstream_decodes_to_its_deltas() {
        let deltas = ["Pay é".to_owned(), "日本 \"now\"\n".to_owned()];
        for api in [
            Api::AnthropicMessages,
            Api::ChatCompletions,
            Api::Responses,
            Api::AnthropicComplete,
            Api::Completions,
            Api::Converse,
        ] {
            let decoded = decode(api, &upstream(api, &deltas));
            assert_eq!(
                decoded.map(|d| d.text),
                Ok("Pay é日本 \"now\"\n".to_owned())
            );
        }
    }

    #[test]
    fn gemini_written_as_one_json_array_decodes_to_its_deltas_and_nothing_else_does() {
        let deltas = ["Pay é".to_owned(), "日本 \"now\"\n".to_owned()];
        let bytes = upstream_array(&deltas);
        assert!(bytes.starts_with(b"[{") && bytes.ends_with(b"}]"));
        assert_eq!(
            decode_array(&bytes).map(|d| d.text),
            Ok("Pay é日本 \"now\"\n".to_owned())
        );
        assert!(decode_array(&bytes[..bytes.len() - 1]).is_err());
        assert!(decode_array(b"[{}, 1]").is_err());
        assert!(decode_array(&upstream(Api::Gemini, &deltas)).is_err());
    }

    #[test]
    fn bytes_out_of_the_vendor_format_are_refused() {
        let api = Api::AnthropicMessages;
        assert!(decode(api, b"data: {\"type\":\"ping\"\n\n").is_err());
        assert!(decode(api, b"event: ping\ndata: {\"type\":\"pong\"}\n\n").is_err());
        assert!(decode(api, b"data: [DONE]\n\n").is_err());
        assert!(decode(Api::ChatCompletions, b"data: [DONE]\n\n").is_ok());
        let bad_text = br#"data: {"choices":[{"delta":{"content":7}}]}"#;
        assert!(decode(Api::ChatCompletions, bad_text).is_err());
        // Converse: AWS event-stream messages, whole, their text deltas strings.
        let converse = upstream(Api::Converse, &["Hi".to_owned()]);
        assert!(decode(Api::Converse, &converse).is_ok());
        assert!(decode(Api::Converse, &converse[..converse.len() - 1]).is_err());
        assert!(decode(Api::Converse, b"data: {}\n\n").is_err());
        let mut bad = Vec::new();
        eventstream::encode_event(&mut bad, "contentBlockDelta", br#"{"delta":{"text":7}}"#)
            .unwrap_or_default();
        assert!(decode(Api::Converse, &bad).is_err());
    }
}
