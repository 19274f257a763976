//! OpenAI Responses events:
//! <https://platform.openai.com/docs/api-reference/responses-streaming>.
//!
//! One channel (0): output text deltas and tool-call inputs (`function_call_arguments`,
//! `mcp_call_arguments` as JSON; `custom_tool_call_input` and `code_interpreter_call_code` as
//! text), in stream order. Every written event is renumbered: `sequence_number` counts what the
//! caller receives, and `output_index` follows the order items are written. A cut writes the
//! blocked reply as a message item of its own, then `response.incomplete` with
//! `incomplete_details.reason: "content_filter"` and that reply as its output. What the caller
//! was sent before the cut is not restated: items still open stay without their `.done` events (a
//! partial tool call is never handed over as done), and the output does not repeat their text, so
//! nothing here grows with the answer (restating it meant keeping every character sent).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::api::{Request, ToolCall};
use crate::sse;
use crate::stream::event::{Ev, TextAlone, TextPlace};
use crate::stream::format::{Format, Lane, TextIn, TextKind, Unit, Unreadable};
use crate::stream::template::{keeps_index, span_in, Slot, Templates};
use crate::stream::util::{self, str_at, u64_at};

pub(crate) struct Responses {
    model: Option<String>,
    /// The upstream's response object (`response.created` / `in_progress`).
    response: Option<Value>,
    lanes: BTreeMap<u64, Lane>,
    deltas: u64,
    sequence: u64,
    created: bool,
    next_index: u64,
    indexes: BTreeMap<u64, u64>,
    /// Upstream output indexes of the items that are tool calls.
    calls: BTreeSet<u64>,
    ended: bool,
    /// The last text delta read from its JSON, as a pattern for the next ([`Templates`]).
    templates: Templates,
    /// The template whose deltas carry no log probabilities (`logprobs` absent, null or empty):
    /// they join one another and split without a change but their text.
    bare_template: Option<u64>,
}

/// The event most of a stream is.
const TEXT_EVENT: &str = "response.output_text.delta";
/// Where a delta's text is.
const DELTA: &str = "/delta";

/// An output text delta of the plain shape (nothing but these fields, nothing twice), read
/// borrowed to learn where its values stand. Every value goes through serde_json's own parsers:
/// what it accepts the tree reader reads the same way.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Fields only read to be accepted: they are the template's fixed bytes.
struct PlainDelta<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    item_id: Cow<'a, str>,
    output_index: u64,
    content_index: u64,
    #[serde(borrow)]
    delta: &'a RawValue,
    #[serde(borrow)]
    logprobs: Option<&'a RawValue>,
    #[serde(borrow)]
    sequence_number: Option<&'a RawValue>,
    #[serde(borrow)]
    obfuscation: Option<&'a RawValue>,
}

/// What a plain delta's data says of its place: the delta's literal and its output index, its
/// other values that differ from event to event (`sequence_number`, `obfuscation`), and whether
/// it carries no log probabilities (`logprobs` absent, null or empty).
type PlainPlace = (
    (std::ops::Range<usize>, u64),
    Vec<(std::ops::Range<usize>, Slot)>,
    bool,
);

fn plain_delta(data: &str) -> Option<PlainPlace> {
    let delta: PlainDelta = serde_json::from_str(data).ok()?;
    if delta.kind != TEXT_EVENT {
        return None;
    }
    let mut others = Vec::new();
    if let Some(n) = delta.sequence_number {
        // An integer of digits alone (the template reads no other number).
        n.get().parse::<u64>().ok()?;
        others.push((span_in(data, n.get())?, Slot::Sequence));
    }
    if let Some(o) = delta.obfuscation {
        serde_json::from_str::<Cow<str>>(o.get()).ok()?;
        others.push((span_in(data, o.get())?, Slot::String));
    }
    let bare = delta.logprobs.is_none_or(|l| {
        serde_json::from_str::<Value>(l.get())
            .is_ok_and(|l| l.is_null() || l.as_array().is_some_and(Vec::is_empty))
    });
    Some((
        (span_in(data, delta.delta.get())?, delta.output_index),
        others,
        bare,
    ))
}

impl Responses {
    pub(crate) fn new(request: &Request) -> Self {
        Self {
            model: request.model.clone(),
            response: None,
            lanes: BTreeMap::new(),
            deltas: 0,
            sequence: 0,
            created: false,
            next_index: 0,
            indexes: BTreeMap::new(),
            calls: BTreeSet::new(),
            ended: false,
            templates: Templates::default(),
            bare_template: None,
        }
    }

    /// Whether `ev` was read by the template whose deltas carry no log probabilities.
    fn bare(&self, ev: &Ev) -> bool {
        ev.templated()
            .is_some_and(|t| Some(t.template) == self.bare_template)
    }

    fn emit(&mut self, data: Value, out: &mut Vec<u8>) {
        let name = str_at(&data, "/type").map(str::to_owned);
        self.write(Ev::new(name, data), out);
    }

    /// Writes an event the filter made, already numbered by output index.
    fn emit_numbered(&mut self, mut data: Value, out: &mut Vec<u8>) {
        set(&mut data, "sequence_number", json!(self.sequence));
        self.sequence += 1;
        let name = str_at(&data, "/type").map(str::to_owned);
        util::write(&Ev::new(name, data), out);
    }

    fn base(&self) -> Value {
        self.response.clone().unwrap_or_else(|| {
            json!({
                "id": "resp_livecheck",
                "object": "response",
                "created_at": 0,
                "status": "in_progress",
                "error": null,
                "incomplete_details": null,
                "model": self.model.as_deref().unwrap_or_default(),
                "output": [],
                "usage": null,
            })
        })
    }
}

fn set(value: &mut Value, key: &str, field: Value) {
    if let Value::Object(m) = value {
        m.insert(key.into(), field);
    }
}

/// An item that calls a tool, with input the rules read or that the caller runs.
fn is_call(item: &str) -> bool {
    super::asks_for_tool_item(item) || matches!(item, "mcp_call" | "code_interpreter_call")
}

impl Format for Responses {
    fn call_of(&self, _key: u64, events: &[&Ev]) -> Option<ToolCall> {
        // The item as `output_item.done` gives it whole: read as a non-streamed answer's item.
        let done = events
            .iter()
            .find(|e| str_at(e.data(), "/type") == Some("response.output_item.done"))?;
        let Some(Value::Object(item)) = done.data().get("item") else {
            return None;
        };
        let kind = item.get("type").and_then(Value::as_str)?;
        // Hosted tools (MCP, code interpreter, search) ran at the vendor: not the caller's to run.
        super::asks_for_tool_item(kind).then(|| super::tool_call(kind, item))
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
        let output_index = u64_at(&data, "/output_index");
        let mut lane = output_index
            .and_then(|i| self.lanes.get(&i).copied())
            .unwrap_or(Lane::Side);
        let mut texts = Vec::new();
        let (mut ends, mut terminal, mut asks) = (Vec::new(), false, false);
        let tool = |json| TextKind::Tool {
            call: output_index.unwrap_or(u64::MAX),
            json,
        };
        match kind.as_str() {
            "response.created" | "response.in_progress" => {
                self.response = data.get("response").cloned();
            }
            "response.output_item.added" => {
                let index = output_index.ok_or(Unreadable)?;
                let item = str_at(&data, "/item/type").unwrap_or_default();
                lane = match item {
                    "message" => Lane::Answer,
                    _ => Lane::Side,
                };
                if is_call(item) {
                    self.calls.insert(index);
                }
                self.lanes.insert(index, lane);
            }
            "response.output_text.delta" => texts.push(TextKind::Answer),
            "response.function_call_arguments.delta" | "response.mcp_call_arguments.delta" => {
                texts.push(tool(true));
            }
            "response.custom_tool_call_input.delta"
            | "response.code_interpreter_call_code.delta" => {
                texts.push(tool(false));
            }
            "response.output_item.done" => {
                asks = str_at(&data, "/item/type").is_some_and(super::asks_for_tool_item);
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                lane = Lane::End;
                terminal = true;
                ends.push(0);
            }
            "error" => lane = Lane::End,
            _ => {}
        }
        if kind.ends_with(".delta") {
            self.deltas += 1;
        }
        let texts = if str_at(&data, "/delta").is_some_and(|d| !d.is_empty()) {
            texts
                .into_iter()
                .map(|kind| TextIn {
                    pointer: "/delta".into(),
                    channel: 0,
                    kind,
                    text: None,
                })
                .collect()
        } else {
            Vec::new()
        };
        let calls: Vec<u64> = output_index
            .filter(|i| self.calls.contains(i))
            .into_iter()
            .collect();
        let calls_done = if kind == "response.output_item.done" {
            calls.clone()
        } else {
            Vec::new()
        };
        // A text delta written as it came keeps where its text stands: a changed text is written
        // there, the rest of its JSON kept; and one of text makes the template for the next.
        let plain = (as_it_came && kind == TEXT_EVENT)
            .then(|| plain_delta(&event.data))
            .flatten();
        let span = plain.as_ref().map(|((span, _), _, _)| span.clone());
        if let Some((at, others, bare)) = plain.filter(|_| !texts.is_empty()) {
            let made = self.templates.make(&event, (TEXT_EVENT, DELTA), at, others);
            if let Some(number) = made {
                self.bare_template = bare.then_some(number);
            }
        }
        let mut ev = Ev::parsed(event.event, event.data, data, as_it_came);
        if let Some(span) = span {
            ev.text_span(DELTA, span);
        }
        let mut unit = Unit::new(ev, lane);
        unit.texts = texts;
        unit.ends = ends;
        unit.terminal = terminal;
        unit.asks_for_tool = asks;
        unit.calls = calls;
        unit.calls_done = calls_done;
        Ok(unit)
    }

    fn write(&mut self, mut ev: Ev, out: &mut Vec<u8>) {
        if let Some(t) = ev.templated() {
            // A text delta a template read: numbered as below, without its tree unless it is
            // renumbered.
            if let Some(&index) = self.indexes.get(&t.block).filter(|&&i| i != t.block) {
                ev.set_number("output_index", index);
            }
            if t.sequence != Some(self.sequence) {
                ev.set_number("sequence_number", self.sequence);
            }
            self.sequence += 1;
            util::write(&ev, out);
            return;
        }
        let kind = str_at(ev.data(), "/type").unwrap_or_default().to_owned();
        let index = match (kind.as_str(), u64_at(ev.data(), "/output_index")) {
            ("response.output_item.added", Some(upstream)) => {
                let index = self.next_index;
                self.next_index += 1;
                self.indexes.insert(upstream, index);
                Some(index)
            }
            (_, Some(upstream)) => self.indexes.get(&upstream).copied(),
            _ => None,
        };
        if let Some(index) = index {
            ev.set_number("output_index", index);
        }
        match kind.as_str() {
            "response.created" => self.created = true,
            "response.completed" | "response.incomplete" | "response.failed" => self.ended = true,
            _ => {}
        }
        ev.set_number("sequence_number", self.sequence);
        self.sequence += 1;
        util::write(&ev, out);
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

    fn goes_as_it_came(&self, place: &TextPlace, after: usize) -> bool {
        // `write` numbers every event the caller gets and renumbers output items in the order
        // they are written: it leaves one as it came when both are the upstream's already.
        let sequence = self.sequence.checked_add(after as u64);
        keeps_index(place, &self.indexes) && place.sequence.is_some() && place.sequence == sequence
    }

    fn took(&mut self, _place: &TextPlace) {
        // What `read` counts of a delta.
        self.deltas += 1;
    }

    fn passed(&mut self, _place: &TextPlace) {
        // What `write` counts of an event it sends.
        self.sequence += 1;
    }

    fn joins(&self, rest: &Ev, next: &Ev) -> bool {
        // Two deltas the same template read, without log probabilities: the same item, output
        // index and content part, known without a tree.
        if self.bare(rest) && self.bare(next) {
            return true;
        }
        let text = |ev: &Ev| {
            str_at(ev.data(), "/type") == Some("response.output_text.delta")
                && ev
                    .data()
                    .get("logprobs")
                    .is_none_or(|l| l.is_null() || l.as_array().is_some_and(Vec::is_empty))
        };
        let same = |key: &str| rest.data().get(key) == next.data().get(key);
        text(rest) && text(next) && same("item_id") && same("output_index") && same("content_index")
    }

    fn part(&self, ev: &mut Ev) {
        // Log probabilities belong to whole tokens: they go with the last part (an event with
        // none keeps its JSON as it came).
        if self.bare(ev) {
            return;
        }
        if ev
            .data()
            .get("logprobs")
            .and_then(Value::as_array)
            .is_some_and(|l| !l.is_empty())
        {
            if let Some(data) = ev.data_mut() {
                set(data, "logprobs", json!([]));
            }
        }
    }

    fn close(&mut self, reply: Option<&str>, out: &mut Vec<u8>) {
        if self.ended {
            return;
        }
        let base = self.base();
        if !self.created {
            let mut started = base.clone();
            set(&mut started, "status", json!("in_progress"));
            self.emit(
                json!({"type": "response.created", "response": started}),
                out,
            );
            self.emit(
                json!({"type": "response.in_progress", "response": started}),
                out,
            );
        }
        let mut output = Vec::new();
        if let Some(reply) = reply {
            let index = self.next_index;
            let id = format!(
                "msg_{}",
                str_at(&base, "/id")
                    .map(|id| id.strip_prefix("resp_").unwrap_or(id))
                    .unwrap_or("livecheck")
            );
            let part = |text: &str| json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []});
            let item = |status: &str, content: Value| {
                json!({"type": "message", "id": id,
                "status": status, "role": "assistant", "content": content})
            };
            let at = json!({"item_id": id, "output_index": index, "content_index": 0});
            let with_at = |mut event: Value| {
                if let (Value::Object(e), Value::Object(at)) = (&mut event, &at) {
                    e.extend(at.clone());
                }
                event
            };
            let events = [
                json!({"type": "response.output_item.added", "output_index": index,
                       "item": item("in_progress", json!([]))}),
                with_at(json!({"type": "response.content_part.added", "part": part("")})),
                with_at(
                    json!({"type": "response.output_text.delta", "delta": reply, "logprobs": []}),
                ),
                with_at(
                    json!({"type": "response.output_text.done", "text": reply, "logprobs": []}),
                ),
                with_at(json!({"type": "response.content_part.done", "part": part(reply)})),
                json!({"type": "response.output_item.done", "output_index": index,
                       "item": item("incomplete", json!([part(reply)]))}),
            ];
            self.next_index += 1;
            output.push(item("incomplete", json!([part(reply)])));
            for event in events {
                self.emit_numbered(event, out);
            }
        }
        let mut response = base;
        set(&mut response, "status", json!("incomplete"));
        set(
            &mut response,
            "incomplete_details",
            json!({"reason": "content_filter"}),
        );
        set(&mut response, "output", Value::Array(output));
        set(
            &mut response,
            "usage",
            json!({
                "input_tokens": 0,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": self.deltas,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": self.deltas,
            }),
        );
        self.emit(
            json!({"type": "response.incomplete", "response": response}),
            out,
        );
    }
}
