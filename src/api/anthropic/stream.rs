//! Anthropic Messages events: <https://docs.anthropic.com/en/docs/build-with-claude/streaming>.
//!
//! One channel (0): the text deltas of every text block and the `partial_json` of every tool-use
//! block, in stream order. Content block indexes are renumbered in the order blocks are written,
//! so a text block released after a tool call keeps the SDK's `content[index]` valid. A cut closes
//! the open blocks, then `message_delta` with `stop_reason: "refusal"` and `usage.output_tokens`,
//! then `message_stop`.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::api::{Request, ToolCall};
use crate::sse;
use crate::stream::event::{Ev, TextAlone, TextPlace};
use crate::stream::format::{Format, Lane, TextIn, TextKind, Unit, Unreadable};
use crate::stream::template::{keeps_index, span_in, Templates};
use crate::stream::util::{self, str_at, u64_at};

pub(crate) struct Anthropic {
    model: Option<String>,
    /// `message_start`'s message, to start a stream the caller has not seen start.
    message: Option<Value>,
    /// Upstream block index → its lane.
    lanes: BTreeMap<u64, Lane>,
    /// Output tokens: the most the upstream reported, or one per delta read if more.
    reported_tokens: u64,
    deltas: u64,
    started: bool,
    next_index: u64,
    /// Upstream block index → the index the caller sees.
    indexes: BTreeMap<u64, u64>,
    open: BTreeSet<u64>,
    /// Upstream indexes of the blocks that are tool calls (or their results): neither text nor
    /// thinking.
    calls: BTreeSet<u64>,
    message_ended: bool,
    stopped: bool,
    /// The last text delta read from its JSON, as a pattern for the next ([`Templates`]).
    templates: Templates,
}

/// The event most of a stream is.
const TEXT_EVENT: &str = "content_block_delta";
/// Where a text delta's text is.
const TEXT: &str = "/delta/text";

/// A text delta of the plain shape (`type`, `index`, and a `text_delta` with its `text`; nothing
/// else, nothing twice), read borrowed to learn where its text literal stands. Every value goes
/// through serde_json's own parsers: what it accepts the tree reader reads the same way.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlainDelta<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    index: u64,
    #[serde(borrow)]
    delta: PlainText<'a>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlainText<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    text: &'a RawValue,
}

/// Where a text delta's text literal stands in its data (bytes, quotes included), and its block
/// index: `None` unless the delta has the plain shape.
fn plain_text_span(data: &str) -> Option<(std::ops::Range<usize>, u64)> {
    let delta: PlainDelta = serde_json::from_str(data).ok()?;
    if delta.kind != TEXT_EVENT || delta.delta.kind != "text_delta" {
        return None;
    }
    Some((span_in(data, delta.delta.text.get())?, delta.index))
}

impl Anthropic {
    pub(crate) fn new(request: &Request) -> Self {
        Self {
            model: request.model.clone(),
            message: None,
            lanes: BTreeMap::new(),
            reported_tokens: 0,
            deltas: 0,
            started: false,
            next_index: 0,
            indexes: BTreeMap::new(),
            open: BTreeSet::new(),
            calls: BTreeSet::new(),
            message_ended: false,
            stopped: false,
            templates: Templates::default(),
        }
    }

    fn emit(&mut self, data: Value, out: &mut Vec<u8>) {
        let name = str_at(&data, "/type").map(str::to_owned);
        self.write(Ev::new(name, data), out);
    }
}

fn index_of(data: &Value) -> Result<u64, Unreadable> {
    u64_at(data, "/index").ok_or(Unreadable)
}

impl Format for Anthropic {
    fn call_of(&self, _key: u64, events: &[&Ev]) -> Option<ToolCall> {
        let start = events
            .iter()
            .find(|e| str_at(e.data(), "/type") == Some("content_block_start"))?;
        // Server and MCP tool uses ran at Anthropic: only the caller's own tools are checked.
        if str_at(start.data(), "/content_block/type") != Some("tool_use") {
            return None;
        }
        let mut arguments: String = events
            .iter()
            .filter(|e| str_at(e.data(), "/delta/type") == Some("input_json_delta"))
            .filter_map(|e| str_at(e.data(), "/delta/partial_json"))
            .collect();
        if arguments.is_empty() {
            // No deltas: the input is the one the block started with (`{}` for none).
            arguments = util::at(start.data(), "/content_block/input")
                .map_or_else(|| "{}".to_owned(), Value::to_string);
        }
        Some(ToolCall {
            name: str_at(start.data(), "/content_block/name")
                .unwrap_or_default()
                .to_owned(),
            arguments,
            json: true,
        })
    }

    fn read(&mut self, event: sse::Event) -> Result<Unit, Unreadable> {
        let event = match self.templates.read_event(event, &self.lanes, &self.calls) {
            Ok(unit) => {
                self.deltas += 1;
                return Ok(unit);
            }
            Err(event) => event,
        };
        let (data, as_it_came) = util::parse(&event)?;
        let kind = str_at(&data, "/type").unwrap_or_default().to_owned();
        let mut texts = Vec::new();
        let mut unit_lane = Lane::Side;
        let (mut ends, mut terminal, mut asks) = (Vec::new(), false, false);
        let (mut calls, mut calls_done) = (Vec::new(), Vec::new());
        match kind.as_str() {
            "message_start" => {
                self.message = data.get("message").cloned();
                if let Some(n) = u64_at(&data, "/message/usage/output_tokens") {
                    self.reported_tokens = self.reported_tokens.max(n);
                }
            }
            "content_block_start" => {
                let index = index_of(&data)?;
                let lane = match str_at(&data, "/content_block/type") {
                    Some("text") => Lane::Answer,
                    _ => Lane::Side,
                };
                if lane == Lane::Answer
                    && str_at(&data, "/content_block/text").is_some_and(|t| !t.is_empty())
                {
                    texts.push(text_in("/content_block/text", TextKind::Answer));
                }
                if !matches!(
                    str_at(&data, "/content_block/type"),
                    Some("text" | "thinking" | "redacted_thinking")
                ) {
                    self.calls.insert(index);
                }
                calls.extend(self.calls.get(&index));
                self.lanes.insert(index, lane);
                unit_lane = lane;
            }
            "content_block_delta" => {
                let index = index_of(&data)?;
                calls.extend(self.calls.get(&index));
                self.deltas += 1;
                unit_lane = self.lanes.get(&index).copied().unwrap_or(Lane::Side);
                match str_at(&data, "/delta/type") {
                    Some("text_delta") => texts.push(text_in(TEXT, TextKind::Answer)),
                    Some("input_json_delta") => texts.push(text_in(
                        "/delta/partial_json",
                        TextKind::Tool {
                            call: index,
                            json: true,
                        },
                    )),
                    _ => {}
                }
            }
            "content_block_stop" => {
                let index = index_of(&data)?;
                calls.extend(self.calls.get(&index));
                calls_done.clone_from(&calls);
                unit_lane = self.lanes.get(&index).copied().unwrap_or(Lane::Side);
            }
            "message_delta" => {
                unit_lane = Lane::End;
                asks = str_at(&data, "/delta/stop_reason") == Some("tool_use");
                if let Some(n) = u64_at(&data, "/usage/output_tokens") {
                    self.reported_tokens = self.reported_tokens.max(n);
                }
                ends.push(0);
            }
            "message_stop" => {
                unit_lane = Lane::End;
                terminal = true;
            }
            "error" => unit_lane = Lane::End,
            _ => {}
        }
        // Text fields that are empty carry nothing to check.
        texts.retain(|t: &TextIn| str_at(&data, &t.pointer) != Some(""));
        // A text delta written as it came keeps where its text stands: a changed text is written
        // there, the rest of its JSON kept; and one of text makes the template for the next.
        let span = (as_it_came && kind == TEXT_EVENT)
            .then(|| plain_text_span(&event.data))
            .flatten();
        if let Some(plain) = span.clone().filter(|_| !texts.is_empty()) {
            self.templates
                .make(&event, (TEXT_EVENT, TEXT), plain, Vec::new());
        }
        let mut ev = Ev::parsed(event.event, event.data, data, as_it_came);
        if let Some((span, _)) = span {
            ev.text_span(TEXT, span);
        }
        let mut unit = Unit::new(ev, unit_lane);
        unit.texts = texts;
        unit.ends = ends;
        unit.terminal = terminal;
        unit.asks_for_tool = asks;
        unit.calls = calls;
        unit.calls_done = calls_done;
        Ok(unit)
    }

    #[cfg(test)]
    fn without_templates(&mut self) {
        self.templates.off = true;
    }

    fn text_name(&self) -> Option<&'static str> {
        Some(TEXT_EVENT)
    }

    fn text_alone<'d>(&self, line: &'d [u8]) -> Option<(TextAlone<'d>, usize)> {
        self.templates.read_outside_calls(line, &self.calls)
    }

    fn goes_as_it_came(&self, place: &TextPlace, _after: usize) -> bool {
        keeps_index(place, &self.indexes)
    }

    fn took(&mut self, _place: &TextPlace) {
        // What `read` counts of a delta.
        self.deltas += 1;
    }

    fn joins(&self, rest: &Ev, next: &Ev) -> bool {
        // Two deltas a template read: text deltas both, their blocks known without a tree.
        if let (Some(r), Some(n)) = (rest.templated(), next.templated()) {
            return r.block == n.block;
        }
        let text = |ev: &Ev| {
            str_at(ev.data(), "/type") == Some("content_block_delta")
                && str_at(ev.data(), "/delta/type") == Some("text_delta")
        };
        text(rest) && text(next) && rest.data().get("index") == next.data().get("index")
    }

    fn write(&mut self, mut ev: Ev, out: &mut Vec<u8>) {
        if let Some(t) = ev.templated() {
            // A text delta a template read: renumbered as below, without its tree unless it is.
            if let Some(&index) = self.indexes.get(&t.block).filter(|&&i| i != t.block) {
                ev.set_number("index", index);
            }
            util::write(&ev, out);
            return;
        }
        match str_at(ev.data(), "/type") {
            Some("message_start") => self.started = true,
            Some("content_block_start") => {
                if let Some(upstream) = u64_at(ev.data(), "/index") {
                    let index = self.next_index;
                    self.next_index += 1;
                    self.indexes.insert(upstream, index);
                    self.open.insert(index);
                    ev.set_number("index", index);
                }
            }
            Some(kind @ ("content_block_delta" | "content_block_stop")) => {
                let stop = kind == "content_block_stop";
                if let Some(&index) = u64_at(ev.data(), "/index").and_then(|i| self.indexes.get(&i))
                {
                    ev.set_number("index", index);
                    if stop {
                        self.open.remove(&index);
                    }
                }
            }
            Some("message_delta") => self.message_ended = true,
            Some("message_stop") => self.stopped = true,
            _ => {}
        }
        util::write(&ev, out);
    }

    fn close(&mut self, reply: Option<&str>, out: &mut Vec<u8>) {
        if self.stopped {
            return;
        }
        if !self.started {
            let mut message = self.message.clone().unwrap_or_else(|| {
                json!({
                    "id": "msg_livecheck",
                    "type": "message",
                    "role": "assistant",
                    "model": self.model.as_deref().unwrap_or_default(),
                    "stop_reason": null,
                    "stop_sequence": null,
                    "usage": {"input_tokens": 0, "output_tokens": 0},
                })
            });
            if let Value::Object(m) = &mut message {
                m.insert("content".into(), json!([]));
            }
            self.emit(json!({"type": "message_start", "message": message}), out);
        }
        for index in std::mem::take(&mut self.open) {
            self.emit(json!({"type": "content_block_stop", "index": index}), out);
        }
        if let Some(reply) = reply {
            let index = self.next_index;
            self.next_index += 1;
            for event in [
                json!({"type": "content_block_start", "index": index,
                       "content_block": {"type": "text", "text": ""}}),
                json!({"type": "content_block_delta", "index": index,
                       "delta": {"type": "text_delta", "text": reply}}),
                json!({"type": "content_block_stop", "index": index}),
            ] {
                util::write(
                    &Ev::new(str_at(&event, "/type").map(str::to_owned), event),
                    out,
                );
            }
        }
        if !self.message_ended {
            let tokens = self.reported_tokens.max(self.deltas);
            self.emit(
                json!({"type": "message_delta",
                       "delta": {"stop_reason": "refusal", "stop_sequence": null},
                       "usage": {"output_tokens": tokens}}),
                out,
            );
        }
        self.emit(json!({"type": "message_stop"}), out);
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
