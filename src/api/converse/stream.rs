//! Bedrock `converse-stream`: an AWS event stream ([`crate::eventstream`], read through
//! [`Framing::event_stream`]), each message an event named by its `:event-type` with the JSON of
//! that member of `ConverseStreamOutput` as its payload.
//!
//! Events: `messageStart` (`role`); `contentBlockStart` (`contentBlockIndex`, `start`: a `toolUse`
//! `{toolUseId, name, type?}`, a `toolResult` or an `image`: a text block has no start);
//! `contentBlockDelta` (`contentBlockIndex`, `delta`: `text` (answer text), `toolUse.input` (a piece
//! of the call's JSON arguments), `reasoningContent` (reasoning, never answer text), `citation` (no
//! text), `toolResult`, `image`); `contentBlockStop`; `messageStop` (`stopReason`: `tool_use` asks
//! for a tool); `metadata` (`usage`, `metrics`, `trace`: after `messageStop` in Bedrock's streams,
//! though the model sets no order). Exceptions (`exception:<type>`) and errors (`error:<code>`) end
//! the round. Real payloads carry a padding member `p` the model does not declare: never read,
//! written back as it came.
//!
//! One channel (0): the text deltas and the tool-use input pieces, in stream order. A block that
//! starts (every kind but text) is a call: held whole until its `contentBlockStop`. Each event is
//! written back with [`eventstream::encode_event`] (Bedrock's header order; its JSON as it came
//! while unchanged). A text delta cut in two is two valid deltas of the same block. A cut closes
//! the open blocks, says the reply (when given) as a text delta in a block of its own, then stops
//! the way Bedrock stops a turn its guardrail stopped: `messageStop {"stopReason":
//! "guardrail_intervened"}` and `metadata` with the usage so far and `metrics` (both required by
//! `ConverseStreamMetadataEvent`), which boto3 reads as a normal end.
//!
//! Sources: botocore `botocore/data/bedrock-runtime/2023-09-30/service-2.json` (boto/botocore
//! 0e6e2404: `ConverseStreamOutput`, `ContentBlockStartEvent`, `ContentBlockDeltaEvent`,
//! `ToolUseBlockDelta`, `ReasoningContentBlockDelta`, `MessageStopEvent`,
//! `ConverseStreamMetadataEvent`, `ConverseStreamMetrics`); AWS API reference
//! `API_runtime_ConverseStream`, `API_runtime_ConverseStreamOutput`.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::STOP_REASON;
use crate::api::ToolCall;
use crate::eventstream;
use crate::sse;
use crate::stream::event::Ev;
use crate::stream::format::{Format, Lane, TextIn, TextKind, Unit, Unreadable};
use crate::stream::framing::{self, Framing};
use crate::stream::template::span_in;
use crate::stream::util::{self, str_at, u64_at};

/// Where a text delta's text is.
const TEXT: &str = "/delta/text";
/// Where a tool use's piece of input is.
const INPUT: &str = "/delta/toolUse/input";

#[derive(Default)]
pub(crate) struct Converse {
    /// Upstream block index → its lane.
    lanes: BTreeMap<u64, Lane>,
    /// Blocks that started (tool uses, results, images): calls, held whole.
    calls: BTreeSet<u64>,
    /// The `metadata` event's `usage` and `metrics`, once read.
    usage: Option<Value>,
    metrics: Option<Value>,
    /// Text deltas read: the least the output can have counted.
    deltas: u64,
    stop_read: bool,
    metadata_read: bool,
    /// What the caller has seen: the message start, its open blocks, the highest block index,
    /// the stop and the metadata.
    started: bool,
    open: BTreeSet<u64>,
    last_index: Option<u64>,
    stopped: bool,
    ended: bool,
}

/// A text delta, read borrowed to learn where its text literal stands (other members, the
/// padding `p` included, are skipped).
#[derive(Deserialize)]
struct PlainDelta<'a> {
    #[serde(borrow)]
    delta: PlainText<'a>,
}

#[derive(Deserialize)]
struct PlainText<'a> {
    #[serde(borrow)]
    text: &'a RawValue,
}

fn text_span(data: &str) -> Option<std::ops::Range<usize>> {
    let delta: PlainDelta = serde_json::from_str(data).ok()?;
    span_in(data, delta.delta.text.get())
}

fn index_of(data: &Value) -> Result<u64, Unreadable> {
    u64_at(data, "/contentBlockIndex").ok_or(Unreadable)
}

/// An optional member that must be a string when there: `None` absent or null.
fn string_at<'v>(data: &'v Value, pointer: &str) -> Result<Option<&'v str>, Unreadable> {
    match util::at(data, pointer) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(Unreadable),
    }
}

fn text_in(pointer: &'static str, kind: TextKind) -> TextIn {
    TextIn {
        pointer: pointer.into(),
        channel: 0,
        kind,
        text: None,
    }
}

/// An event's payload: its JSON as it came while unchanged, else its tree written.
fn payload(ev: &Ev) -> Cow<'_, str> {
    match ev.raw() {
        Some(raw) => Cow::Borrowed(raw),
        None => Cow::Owned(serde_json::to_string(ev.data()).unwrap_or_default()),
    }
}

impl Converse {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    fn emit(&mut self, name: &str, data: Value, out: &mut Vec<u8>) {
        self.write(Ev::new(Some(name.to_owned()), data), out);
    }

    /// The usage the caller is told at a cut: the `metadata` event's when read, else none of the
    /// input and one output token per text delta read.
    fn usage_so_far(&self) -> Value {
        self.usage.clone().unwrap_or_else(
            || json!({"inputTokens": 0, "outputTokens": self.deltas, "totalTokens": self.deltas}),
        )
    }

    fn read_event(&mut self, name: &str, data: &Value, unit: &mut Unit) -> Result<(), Unreadable> {
        match name {
            "messageStart" => {}
            "contentBlockStart" => {
                let index = index_of(data)?;
                if !matches!(util::at(data, "/start"), Some(Value::Object(_))) {
                    return Err(Unreadable);
                }
                self.calls.insert(index);
                self.lanes.insert(index, Lane::Side);
                unit.calls.push(index);
            }
            "contentBlockDelta" => {
                let index = index_of(data)?;
                if !matches!(util::at(data, "/delta"), Some(Value::Object(_))) {
                    return Err(Unreadable);
                }
                let mut lane = self.lanes.get(&index).copied();
                if let Some(text) = string_at(data, TEXT)? {
                    self.deltas += 1;
                    lane = Some(Lane::Answer);
                    if !text.is_empty() {
                        unit.texts.push(text_in(TEXT, TextKind::Answer));
                    }
                }
                if util::at(data, "/delta/toolUse").is_some() {
                    // `ToolUseBlockDelta` requires its `input`, a string.
                    let input = string_at(data, INPUT)?.ok_or(Unreadable)?;
                    self.calls.insert(index);
                    lane = Some(Lane::Side);
                    if !input.is_empty() {
                        let kind = TextKind::Tool {
                            call: index,
                            json: true,
                        };
                        unit.texts.push(text_in(INPUT, kind));
                    }
                }
                if util::at(data, "/delta/reasoningContent").is_some() {
                    lane = Some(Lane::Side);
                }
                // A citation goes with the text it cites; anything else is beside the answer.
                let citation = util::at(data, "/delta/citation").is_some();
                let lane = lane.unwrap_or(if citation { Lane::Answer } else { Lane::Side });
                self.lanes.insert(index, lane);
                unit.lane = lane;
                unit.calls.extend(self.calls.get(&index));
            }
            "contentBlockStop" => {
                let index = index_of(data)?;
                unit.lane = self.lanes.get(&index).copied().unwrap_or(Lane::Side);
                unit.calls.extend(self.calls.get(&index));
                unit.calls_done.clone_from(&unit.calls);
            }
            "messageStop" => {
                unit.lane = Lane::End;
                unit.asks_for_tool = string_at(data, "/stopReason")? == Some("tool_use");
                unit.ends.push(0);
                self.stop_read = true;
                unit.terminal = self.metadata_read;
            }
            "metadata" => {
                unit.lane = Lane::End;
                match data.get("usage") {
                    Some(usage @ Value::Object(_)) => self.usage = Some(usage.clone()),
                    None | Some(Value::Null) => {}
                    Some(_) => return Err(Unreadable),
                }
                self.metrics = data.get("metrics").filter(|m| m.is_object()).cloned();
                self.metadata_read = true;
                unit.terminal = self.stop_read;
            }
            // An event the model does not declare: boto3 skips it; it passes beside the answer.
            _ => {}
        }
        Ok(())
    }
}

impl Format for Converse {
    fn framing(&self, limit: usize) -> Framing {
        Framing::event_stream(limit)
    }

    fn read(&mut self, event: sse::Event) -> Result<Unit, Unreadable> {
        let name = event.event.clone().ok_or(Unreadable)?;
        if framing::is_exception(Some(&name)) {
            // Bedrock's error in the stream (boto3 raises it): the round's end, passed as it came.
            let ev = Ev::unchanged(event.event, event.data, None);
            return Ok(Unit::new(ev, Lane::End));
        }
        let (data, as_it_came) = util::parse(&event)?;
        if !data.is_object() {
            return Err(Unreadable);
        }
        let mut unit = Unit::new(Ev::new(None, Value::Null), Lane::Side);
        self.read_event(&name, &data, &mut unit)?;
        let span = (as_it_came && !unit.texts.is_empty() && name == "contentBlockDelta")
            .then(|| text_span(&event.data))
            .flatten();
        let mut ev = Ev::parsed(event.event, event.data, data, as_it_came);
        if let Some(span) = span {
            ev.text_span(TEXT, span);
        }
        unit.ev = ev;
        Ok(unit)
    }

    fn write(&mut self, ev: Ev, out: &mut Vec<u8>) {
        let name = ev.name.as_deref().unwrap_or_default();
        let data = payload(&ev);
        if framing::is_exception(Some(name)) {
            framing::write_exception(name, &data, out);
            return;
        }
        let index = u64_at(ev.data(), "/contentBlockIndex");
        match (name, index) {
            ("messageStart", _) => self.started = true,
            ("contentBlockStart" | "contentBlockDelta", Some(index)) => {
                self.open.insert(index);
                self.last_index = self.last_index.max(Some(index));
            }
            ("contentBlockStop", Some(index)) => {
                self.open.remove(&index);
            }
            ("messageStop", _) => self.stopped = true,
            ("metadata", _) => self.ended = true,
            _ => {}
        }
        let _ = eventstream::encode_event(out, name, data.as_bytes());
    }

    fn joins(&self, rest: &Ev, next: &Ev) -> bool {
        // `next` a delta of text alone (padding aside) in the same block as `rest`.
        let text_alone = |ev: &Ev| {
            ev.name.as_deref() == Some("contentBlockDelta")
                && matches!(util::at(ev.data(), "/delta"), Some(Value::Object(d))
                    if d.len() == 1 && d.get("text").is_some_and(Value::is_string))
        };
        let plain = matches!(next.data(), Value::Object(o)
            if o.keys().all(|k| matches!(k.as_str(), "contentBlockIndex" | "delta" | "p")));
        text_alone(rest)
            && text_alone(next)
            && plain
            && rest.data().get("contentBlockIndex") == next.data().get("contentBlockIndex")
    }

    fn close(&mut self, reply: Option<&str>, out: &mut Vec<u8>) {
        if self.stopped && self.ended {
            return;
        }
        if !self.stopped {
            if !self.started {
                self.emit("messageStart", json!({"role": "assistant"}), out);
            }
            for index in std::mem::take(&mut self.open) {
                self.emit("contentBlockStop", json!({"contentBlockIndex": index}), out);
            }
            if let Some(reply) = reply {
                let index = self.last_index.map_or(0, |i| i.saturating_add(1));
                self.emit(
                    "contentBlockDelta",
                    json!({"contentBlockIndex": index, "delta": {"text": reply}}),
                    out,
                );
                self.emit("contentBlockStop", json!({"contentBlockIndex": index}), out);
            }
            self.emit("messageStop", json!({"stopReason": STOP_REASON}), out);
        }
        if !self.ended {
            let metrics = self
                .metrics
                .clone()
                .unwrap_or_else(|| json!({"latencyMs": 0}));
            let usage = self.usage_so_far();
            self.emit("metadata", json!({"usage": usage, "metrics": metrics}), out);
        }
    }

    fn call_of(&self, _key: u64, events: &[&Ev]) -> Option<ToolCall> {
        let start = events
            .iter()
            .find(|e| e.name.as_deref() == Some("contentBlockStart"));
        let name = match start {
            Some(start) => {
                let tool_use = util::at(start.data(), "/start/toolUse")?;
                // A server tool ran at Bedrock: only the caller's own tools are checked.
                if str_at(tool_use, "/type") == Some("server_tool_use") {
                    return None;
                }
                str_at(tool_use, "/name").unwrap_or_default()
            }
            // Input pieces without a start name no tool: checked as a call to none.
            None => "",
        };
        let mut arguments: String = events
            .iter()
            .filter_map(|e| str_at(e.data(), INPUT))
            .collect();
        if arguments.is_empty() {
            arguments = "{}".to_owned();
        }
        Some(ToolCall {
            name: name.to_owned(),
            arguments,
            json: true,
        })
    }
}

/// A refused question as a converse-stream: the message starts, says `reply` in one text block,
/// stops as Bedrock's guardrail stops it, and states no usage (no model was asked).
pub(crate) fn refusal_stream(reply: &str) -> Vec<u8> {
    let mut out = Vec::new();
    Converse::new().close(Some(reply), &mut out);
    out
}

#[cfg(test)]
mod tests;
