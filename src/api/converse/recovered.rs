//! A recovered Converse answer as the converse-stream a streaming caller expects: `messageStart`,
//! each content block as its events (`text` as one text delta; `toolUse` started with its
//! `toolUseId` and `name`, its `input` as one delta of its JSON; `reasoningContent` as its reasoning
//! text, signature or redacted content deltas; cited content as its text), `contentBlockStop`, then
//! `messageStop` with the answer's `stopReason` and `metadata` with its `usage`, `metrics` and
//! `trace`. Blocks a stream has no delta for (images, documents, ...) are left out. The common part
//! (usage, the dispatch) is `api/recovered.rs`.
//!
//! Reference: botocore's bedrock-runtime service model (`ConverseStreamOutput`,
//! `ContentBlockDelta`, `ReasoningContentBlockDelta`, `ToolUseBlockStart`), AWS API reference
//! `API_runtime_ConverseStream`.

use serde_json::{json, Map, Value};

use crate::eventstream;
use crate::json::FieldError;

fn push(out: &mut Vec<u8>, name: &str, data: &Value) {
    // Nothing is appended for what cannot be framed (over 4 GiB).
    let _ = eventstream::encode_event(out, name, data.to_string().as_bytes());
}

/// The deltas of one block of the answer, and its start when it has one.
fn block_events(block: &Map<String, Value>) -> (Option<Value>, Vec<Value>) {
    let mut deltas = Vec::new();
    if let Some(Value::String(text)) = block.get("text") {
        deltas.push(json!({"text": text}));
    }
    if let Some(Value::Array(cited)) = block.pointer_of("citationsContent", "content") {
        for text in cited.iter().filter_map(|c| c.get("text")) {
            deltas.push(json!({"text": text}));
        }
    }
    if let Some(Value::Object(reasoning)) = block.get("reasoningContent") {
        if let Some(Value::Object(said)) = reasoning.get("reasoningText") {
            if let Some(text) = said.get("text") {
                deltas.push(json!({"reasoningContent": {"text": text}}));
            }
            if let Some(signature) = said.get("signature") {
                deltas.push(json!({"reasoningContent": {"signature": signature}}));
            }
        }
        if let Some(redacted) = reasoning.get("redactedContent") {
            deltas.push(json!({"reasoningContent": {"redactedContent": redacted}}));
        }
    }
    let mut start = None;
    if let Some(Value::Object(tool_use)) = block.get("toolUse") {
        let mut first = Map::new();
        for key in ["toolUseId", "name", "type"] {
            if let Some(value) = tool_use.get(key) {
                first.insert(key.to_owned(), value.clone());
            }
        }
        start = Some(json!({"toolUse": first}));
        let input = tool_use
            .get("input")
            .map_or_else(|| "{}".to_owned(), Value::to_string);
        deltas.push(json!({"toolUse": {"input": input}}));
    }
    (start, deltas)
}

/// `block.<outer>.<inner>`.
trait PointerOf {
    fn pointer_of(&self, outer: &str, inner: &str) -> Option<&Value>;
}

impl PointerOf for Map<String, Value> {
    fn pointer_of(&self, outer: &str, inner: &str) -> Option<&Value> {
        self.get(outer)?.get(inner)
    }
}

/// [`super::super::as_stream`] for Converse.
pub(in crate::api) fn stream(body: Map<String, Value>) -> Result<Vec<u8>, FieldError> {
    let Some(Value::Array(content)) = body
        .pointer_of("output", "message")
        .and_then(|m| m.get("content"))
    else {
        return Err(FieldError::must_be("output.message.content", "an array"));
    };
    let mut out = Vec::new();
    push(&mut out, "messageStart", &json!({"role": "assistant"}));
    let mut index = 0u64;
    for (i, block) in content.iter().enumerate() {
        let Value::Object(block) = block else {
            return Err(FieldError::must_be(
                format!("output.message.content[{i}]"),
                "an object",
            ));
        };
        let (start, deltas) = block_events(block);
        if start.is_none() && deltas.is_empty() {
            continue;
        }
        if let Some(start) = start {
            push(
                &mut out,
                "contentBlockStart",
                &json!({"contentBlockIndex": index, "start": start}),
            );
        }
        for delta in deltas {
            push(
                &mut out,
                "contentBlockDelta",
                &json!({"contentBlockIndex": index, "delta": delta}),
            );
        }
        push(
            &mut out,
            "contentBlockStop",
            &json!({"contentBlockIndex": index}),
        );
        index += 1;
    }
    let mut stop = Map::new();
    stop.insert(
        "stopReason".into(),
        body.get("stopReason").cloned().unwrap_or(json!("end_turn")),
    );
    if let Some(fields) = body.get("additionalModelResponseFields") {
        stop.insert("additionalModelResponseFields".into(), fields.clone());
    }
    push(&mut out, "messageStop", &Value::Object(stop));
    let mut metadata = Map::new();
    for key in [
        "usage",
        "metrics",
        "trace",
        "performanceConfig",
        "serviceTier",
    ] {
        if let Some(value) = body.get(key) {
            metadata.insert(key.to_owned(), value.clone());
        }
    }
    metadata
        .entry("metrics")
        .or_insert_with(|| json!({"latencyMs": 0}));
    push(&mut out, "metadata", &Value::Object(metadata));
    Ok(out)
}

/// The usage of a complete converse-stream: its `metadata` event's (the last, were there more);
/// `None` when it states none or is not a whole event stream.
pub(in crate::api) fn stream_usage(bytes: &[u8]) -> Option<super::Usage> {
    let mut decoder = eventstream::Decoder::new(bytes.len().max(1));
    let mut messages = Vec::new();
    decoder.push(bytes, &mut messages).ok()?;
    decoder.finish().ok()?;
    let metadata = messages
        .iter()
        .rev()
        .find(|m| m.message_type() == Some("event") && m.event_type() == Some("metadata"))?;
    let metadata: Value = serde_json::from_slice(&metadata.payload).ok()?;
    super::usage(metadata.get("usage")?)
}
