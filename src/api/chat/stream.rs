//! OpenAI Chat Completions chunks: <https://platform.openai.com/docs/api-reference/chat-streaming>.
//!
//! Each choice index is a channel: its `delta.content`, then its tool calls'
//! `function.arguments`, in stream order. A chunk split in two keeps everything but the unsent
//! text in the first part (`finish_reason` moves to the second); the second is a bare chunk with
//! only the rest of the text, since the SDKs concatenate every string they are sent again. A cut
//! ends every unfinished choice with `finish_reason: "content_filter"`, then a usage chunk when the
//! request set `stream_options.include_usage`, then `data: [DONE]`.
//!
//! Azure OpenAI's content-filter fields carry no text of the answer and go as they came: a first
//! chunk of `choices: []` with `prompt_filter_results`, `content_filter_results` beside a choice's
//! text, and chunks annotating text already sent (`content_filter_results`,
//! `content_filter_offsets`, no delta), those two of an empty id and model. Reference:
//! <https://learn.microsoft.com/azure/foundry/openai/concepts/content-streaming>.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use crate::api::{Request, ToolCall};
use crate::sse;
use crate::stream::event::{Ev, TextAlone, TextPlace};
use crate::stream::format::{Format, Lane, TextIn, TextKind, Unit, Unreadable};
use crate::stream::template::{span_in, Slot, Template};
use crate::stream::util::{self, str_at, u64_at};

/// Top-level fields of a chunk that a bare chunk repeats.
const HEAD_FIELDS: &[&str] = &[
    "id",
    "object",
    "created",
    "model",
    "system_fingerprint",
    "service_tier",
];

pub(crate) struct Chat {
    model: Option<String>,
    include_usage: bool,
    /// The first chunk's identity (`id`, `created`, `model`, …), for chunks the filter writes.
    head: Option<Map<String, Value>>,
    deltas: u64,
    prompt_tokens: u64,
    written_any: bool,
    seen: BTreeSet<u64>,
    finished: BTreeSet<u64>,
    /// Per choice, the tool call its deltas are writing: it is complete once another call of the
    /// choice starts, the choice finishes, or the stream ends.
    writing: BTreeMap<u64, u64>,
    done: bool,
    /// The last plain chunk of text alone: the next one, byte for byte the same but for its
    /// content (and `obfuscation`) string, is read from it without parsing.
    template: Option<Template>,
}

impl Chat {
    pub(crate) fn new(request: &Request) -> Self {
        Self {
            model: request.model.clone(),
            include_usage: request.include_usage,
            head: None,
            deltas: 0,
            prompt_tokens: 0,
            written_any: false,
            seen: BTreeSet::new(),
            finished: BTreeSet::new(),
            writing: BTreeMap::new(),
            done: false,
            template: None,
        }
    }

    fn chunk(&self, choices: Value) -> Value {
        let mut chunk = self.head.clone().unwrap_or_else(|| {
            let mut head = Map::new();
            head.insert("id".into(), json!("chatcmpl-livecheck"));
            head.insert("object".into(), json!("chat.completion.chunk"));
            head.insert("created".into(), json!(0));
            head.insert(
                "model".into(),
                json!(self.model.as_deref().unwrap_or_default()),
            );
            head
        });
        chunk.insert("choices".into(), choices);
        if self.include_usage {
            chunk.insert("usage".into(), Value::Null);
        }
        Value::Object(chunk)
    }
}

/// A chunk of the shape most of a stream has (one choice, its text or its finish, nothing else),
/// read without building its tree. Any other chunk (tool calls, usage, log probabilities, several
/// choices, an error, a field not listed here or listed twice) fails to read here and is read as a
/// tree, as before. Every value goes through serde_json's own parsers (strings with their escapes,
/// numbers), so a chunk read here is one the tree reader accepts and reads the same way.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Fields only read to be accepted: the chunk goes out as it came.
struct Plain<'a> {
    /// Kept as written: two text chunks with the same id literal may join ([`Ev::join_id`]).
    #[serde(borrow)]
    id: &'a RawValue,
    #[serde(borrow)]
    object: Cow<'a, str>,
    created: u64,
    #[serde(borrow)]
    model: Cow<'a, str>,
    #[serde(borrow)]
    system_fingerprint: Option<Cow<'a, str>>,
    #[serde(borrow)]
    service_tier: Option<Cow<'a, str>>,
    /// Kept as written: it differs in every chunk, so a [`Template`] leaves a place for it.
    #[serde(borrow)]
    obfuscation: Option<&'a RawValue>,
    usage: Option<()>,
    #[serde(borrow)]
    choices: (PlainChoice<'a>,),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct PlainChoice<'a> {
    index: u64,
    #[serde(borrow)]
    delta: PlainDelta<'a>,
    logprobs: Option<()>,
    #[serde(borrow)]
    finish_reason: Option<Cow<'a, str>>,
    /// Azure OpenAI's verdicts on the text so far (categories, severities, blocklists): no text
    /// of the answer, kept as it came.
    #[serde(borrow)]
    content_filter_results: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct PlainDelta<'a> {
    /// Kept as written, so that where it stands in the chunk is known: a changed text is written
    /// back into the chunk's own JSON there ([`Ev::text_span`]).
    #[serde(borrow)]
    content: Option<&'a RawValue>,
    #[serde(borrow)]
    role: Option<Cow<'a, str>>,
    refusal: Option<()>,
}

/// What [`Chat::read_plain`] read of a chunk: the unit without its event yet.
struct PlainUnit {
    /// Where the content string stands in the chunk's JSON (bytes, quotes included).
    content_span: Option<std::ops::Range<usize>>,
    /// A chunk whose delta is its text alone and that finishes nothing: where its `id` literal
    /// stands in its JSON.
    join_id: Option<std::ops::Range<usize>>,
    unit_lane: Lane,
    index: u64,
    channel: usize,
    finish: Option<bool>,
    calls_done: Vec<u64>,
}

impl PlainUnit {
    /// What the template read of a chunk of text alone.
    fn of(place: TextPlace) -> Self {
        Self {
            content_span: Some(place.span),
            join_id: place.join_id,
            unit_lane: Lane::Answer,
            index: place.choice.unwrap_or_default(),
            channel: place.channel,
            finish: None,
            calls_done: Vec::new(),
        }
    }

    /// The unit, its event the upstream's JSON as it came.
    fn finish(self, event: sse::Event, text: Option<String>) -> Unit {
        let mut ev = Ev::unchanged(
            event.event,
            event.data,
            Some((self.index, self.finish.is_some())),
        );
        if let Some(span) = self.content_span {
            ev.text_span(CONTENT, span);
        }
        if let Some(id) = self.join_id {
            ev.join_id_at(id);
        }
        let mut unit = Unit::new(ev, self.unit_lane);
        if let Some(text) = text {
            unit.texts.push(TextIn {
                pointer: CONTENT.into(),
                channel: self.channel,
                kind: TextKind::Answer,
                text: Some(text),
            });
        }
        if let Some(asks) = self.finish {
            unit.ends.push(self.channel);
            unit.asks_for_tool = asks;
        }
        unit.calls_done = self.calls_done;
        unit
    }
}

impl Chat {
    /// Reads a chunk of the plain shape ([`Plain`]) as `read` reads it from its tree; `None` for
    /// any other chunk.
    #[allow(clippy::type_complexity)]
    fn read_plain(
        &mut self,
        event: &sse::Event,
    ) -> Option<Result<(PlainUnit, Option<String>), Unreadable>> {
        if event.event.is_none() {
            let data = event.data.as_bytes();
            let read = self.template.as_ref().and_then(|t| t.read(data));
            if let Some((alone, _)) = read.filter(|(_, len)| *len == data.len()) {
                self.deltas += 1;
                let text = alone.text.into_owned();
                return Some(Ok((PlainUnit::of(alone.place), Some(text))));
            }
        }
        let chunk: Plain = serde_json::from_str(&event.data).ok()?;
        // An id that is not a string is not the plain shape: read as a tree.
        serde_json::from_str::<Cow<str>>(chunk.id.get()).ok()?;
        let (choice,) = chunk.choices;
        let text_alone = choice.delta.content.is_some()
            && choice.delta.role.is_none()
            && choice.delta.refusal.is_none()
            && choice.finish_reason.is_none();
        let join_id = if text_alone {
            Some(span_in(&event.data, chunk.id.get())?)
        } else {
            None
        };
        let Ok(channel) = usize::try_from(choice.index) else {
            return Some(Err(Unreadable));
        };
        let (text, content_span) = match choice.delta.content {
            Some(raw) => {
                // A content that is not a string is not the plain shape: read as a tree.
                let text: Cow<str> = serde_json::from_str(raw.get()).ok()?;
                let span = span_in(&event.data, raw.get())?;
                ((!text.is_empty()).then(|| text.into_owned()), Some(span))
            }
            None => (None, None),
        };
        let finish = choice
            .finish_reason
            .map(|reason| matches!(&*reason, "tool_calls" | "function_call"));
        let mut calls_done = Vec::new();
        if finish.is_some() {
            calls_done.extend(self.writing.remove(&choice.index));
        }
        if text.is_some() {
            self.deltas += 1;
        }
        let obfuscation = match chunk.obfuscation {
            Some(raw) => {
                serde_json::from_str::<Cow<str>>(raw.get()).ok()?;
                Some(span_in(&event.data, raw.get())?)
            }
            None => None,
        };
        // Data of one line only (several `data:` lines are joined by `\n`): a template's bytes
        // are then a line's, which the short path reads in place (`Format::text_alone`).
        let one_line = !event.data.contains('\n');
        self.template = match (&join_id, &content_span, &text) {
            (Some(id), Some(content), Some(_)) if event.event.is_none() && one_line => {
                let place = TextPlace {
                    channel,
                    name: None,
                    choice: Some(choice.index),
                    block: None,
                    sequence: None,
                    template: None,
                    pointer: CONTENT,
                    span: content.clone(),
                    join_id: Some(id.clone()),
                };
                let obfuscation = obfuscation.map(|span| (span, Slot::String));
                Some(Template::new(event.data.clone(), place, obfuscation))
            }
            _ => None,
        };
        let unit_lane = if text.is_some() {
            Lane::Answer
        } else if finish.is_some() {
            Lane::End
        } else {
            Lane::Side
        };
        let read = PlainUnit {
            content_span,
            join_id,
            unit_lane,
            index: choice.index,
            channel,
            finish,
            calls_done,
        };
        Some(Ok((read, text)))
    }
}

/// Where the plain chunk's one text field is: its JSON pointer.
const CONTENT: &str = "/choices/0/delta/content";

/// The tool calls a chunk is part of, and those it completes.
#[derive(Default)]
struct Calls {
    part_of: Vec<u64>,
    done: Vec<u64>,
}

impl Calls {
    /// The chunk writes `call` of `choice`: the call the choice wrote before is complete.
    fn writes(&mut self, writing: &mut BTreeMap<u64, u64>, choice: u64, call: u64) {
        self.part_of.push(call);
        if let Some(before) = writing.insert(choice, call).filter(|&b| b != call) {
            self.done.push(before);
        }
    }
}

/// Choice and tool-call index together: one call key per channel.
fn call_key(choice: u64, call: u64) -> u64 {
    (choice << 32) | (call & 0xffff_ffff)
}

impl Format for Chat {
    fn call_of(&self, key: u64, events: &[&Ev]) -> Option<ToolCall> {
        let (choice, index) = (key >> 32, key & 0xffff_ffff);
        let mut call = ToolCall {
            json: true,
            ..ToolCall::default()
        };
        for ev in events {
            let Some(Value::Array(choices)) = ev.data().get("choices") else {
                continue;
            };
            for (k, c) in choices.iter().enumerate() {
                if u64_at(c, "/index").unwrap_or(k as u64) != choice {
                    continue;
                }
                let parts: Vec<&Value> = if index == 0xffff_ffff {
                    // The legacy `function_call`.
                    util::at(c, "/delta/function_call").into_iter().collect()
                } else {
                    match util::at(c, "/delta/tool_calls") {
                        Some(Value::Array(calls)) => calls
                            .iter()
                            .enumerate()
                            .filter(|(j, tc)| u64_at(tc, "/index").unwrap_or(*j as u64) == index)
                            .map(|(_, tc)| {
                                tc.get("function")
                                    .or_else(|| tc.get("custom"))
                                    .unwrap_or(tc)
                            })
                            .collect(),
                        _ => Vec::new(),
                    }
                };
                for part in parts {
                    if call.name.is_empty() {
                        call.name = str_at(part, "/name").unwrap_or_default().to_owned();
                    }
                    if let Some(arguments) = str_at(part, "/arguments") {
                        call.arguments.push_str(arguments);
                    }
                    if let Some(input) = str_at(part, "/input") {
                        // A custom tool: free text.
                        call.json = false;
                        call.arguments.push_str(input);
                    }
                }
            }
        }
        Some(call)
    }

    fn read(&mut self, event: sse::Event) -> Result<Unit, Unreadable> {
        // A chunk's JSON starts with `{`: only other data can be the end marker.
        if !event.data.starts_with('{') && event.data.trim() == "[DONE]" {
            let mut unit = Unit::new(Ev::new(event.event, Value::Null), Lane::End);
            unit.terminal = true;
            unit.calls_done = std::mem::take(&mut self.writing).into_values().collect();
            return Ok(unit);
        }
        if self.head.is_some() {
            if let Some(unit) = self.read_plain(&event) {
                let (unit, text) = unit?;
                return Ok(unit.finish(event, text));
            }
        }
        let (data, as_it_came) = util::parse(&event)?;
        if data.get("error").is_some() {
            let ev = Ev::parsed(event.event, event.data, data, as_it_came);
            return Ok(Unit::new(ev, Lane::End));
        }
        if self.head.is_none() {
            // Azure OpenAI's content-filter annotations (`prompt_filter_results` first, verdicts
            // on text already sent later) come in chunks of an empty id, model and `created: 0`:
            // not the answer's identity.
            let annotation = data.get("id").and_then(Value::as_str) == Some("");
            if let (Value::Object(chunk), false) = (&data, annotation) {
                let head: Map<String, Value> = HEAD_FIELDS
                    .iter()
                    .filter_map(|k| chunk.get(*k).map(|v| ((*k).to_owned(), v.clone())))
                    .collect();
                self.head = Some(head);
            }
        }
        if let Some(n) = u64_at(&data, "/usage/prompt_tokens") {
            self.prompt_tokens = n;
        }
        let (mut texts, mut ends, mut asks) = (Vec::new(), Vec::new(), false);
        let (mut content, mut finish) = (false, false);
        let mut parts = Calls::default();
        let choices = match data.get("choices") {
            Some(Value::Array(choices)) => choices.as_slice(),
            None | Some(Value::Null) => &[],
            Some(_) => return Err(Unreadable),
        };
        for (k, choice) in choices.iter().enumerate() {
            let index = u64_at(choice, "/index").unwrap_or(k as u64);
            let channel = usize::try_from(index).map_err(|_| Unreadable)?;
            let at = format!("/choices/{k}");
            if str_at(choice, "/delta/content").is_some_and(|t| !t.is_empty()) {
                texts.push(TextIn {
                    pointer: format!("{at}/delta/content").into(),
                    channel,
                    kind: TextKind::Answer,
                    text: None,
                });
                content = true;
            }
            if let Some(Value::Array(calls)) = util::at(choice, "/delta/tool_calls") {
                asks |= !calls.is_empty();
                for (j, call) in calls.iter().enumerate() {
                    let n = u64_at(call, "/index").unwrap_or(j as u64);
                    parts.writes(&mut self.writing, index, call_key(index, n));
                    if str_at(call, "/function/arguments").is_some_and(|t| !t.is_empty()) {
                        texts.push(TextIn {
                            pointer: format!("{at}/delta/tool_calls/{j}/function/arguments").into(),
                            channel,
                            kind: TextKind::Tool {
                                call: call_key(index, n),
                                json: true,
                            },
                            text: None,
                        });
                    }
                }
            }
            if util::at(choice, "/delta/function_call").is_some_and(|f| !f.is_null()) {
                parts.writes(&mut self.writing, index, call_key(index, 0xffff_ffff));
            }
            if str_at(choice, "/delta/function_call/arguments").is_some_and(|t| !t.is_empty()) {
                asks = true;
                texts.push(TextIn {
                    pointer: format!("{at}/delta/function_call/arguments").into(),
                    channel,
                    kind: TextKind::Tool {
                        call: call_key(index, 0xffff_ffff),
                        json: true,
                    },
                    text: None,
                });
            }
            if let Some(reason) = str_at(choice, "/finish_reason") {
                parts.done.extend(self.writing.remove(&index));
                asks |= matches!(reason, "tool_calls" | "function_call");
                ends.push(channel);
                finish = true;
            }
        }
        if !texts.is_empty() {
            self.deltas += 1;
        }
        let usage_only = choices.is_empty() && data.get("usage").is_some_and(|u| !u.is_null());
        let lane = if content {
            Lane::Answer
        } else if finish || usage_only {
            Lane::End
        } else {
            Lane::Side
        };
        let mut unit = Unit::new(Ev::parsed(event.event, event.data, data, as_it_came), lane);
        unit.texts = texts;
        unit.ends = ends;
        unit.asks_for_tool = asks;
        unit.calls = parts.part_of;
        unit.calls_done = parts.done;
        Ok(unit)
    }

    fn text_alone<'d>(&self, line: &'d [u8]) -> Option<(TextAlone<'d>, usize)> {
        self.template.as_ref()?.read(line)
    }

    fn took(&mut self, _place: &TextPlace) {
        // What `read` counts of a chunk of text.
        self.deltas += 1;
    }

    fn passed(&mut self, place: &TextPlace) {
        // What `write` remembers of a plain chunk that finishes nothing.
        self.written_any = true;
        // Most events are a choice already seen: a lookup, not an insert.
        if let Some(choice) = place.choice.filter(|c| !self.seen.contains(c)) {
            self.seen.insert(choice);
        }
    }

    fn write(&mut self, ev: Ev, out: &mut Vec<u8>) {
        if let (Some(_), Some((index, finishes))) = (ev.raw(), ev.choice) {
            // Passed through as it came: what the tree branch below remembers, from the read.
            self.written_any = true;
            self.seen.insert(index);
            if finishes {
                self.finished.insert(index);
            }
            util::write(&ev, out);
            return;
        }
        if ev.data().is_null() {
            self.done = true;
            out.extend_from_slice(b"data: [DONE]\n\n");
            return;
        }
        if let Some(Value::Array(choices)) = ev.data().get("choices") {
            self.written_any = true;
            for (k, choice) in choices.iter().enumerate() {
                let index = u64_at(choice, "/index").unwrap_or(k as u64);
                self.seen.insert(index);
                if str_at(choice, "/finish_reason").is_some() {
                    self.finished.insert(index);
                }
            }
        }
        util::write(&ev, out);
    }

    fn part(&self, ev: &mut Ev) {
        // A plain chunk that finishes nothing has no finish reason to take out.
        if ev.raw().is_some() && ev.choice.is_some_and(|(_, finishes)| !finishes) {
            return;
        }
        if let Some(Value::Array(choices)) = ev.data_mut().and_then(|d| d.get_mut("choices")) {
            for choice in choices {
                if let Value::Object(choice) = choice {
                    choice.insert("finish_reason".into(), Value::Null);
                }
            }
        }
    }

    fn joins(&self, rest: &Ev, next: &Ev) -> bool {
        // Two plain chunks of text alone (no role, finish, log probabilities or usage; a null
        // refusal carries nothing): the same choice and the same id as written. What the tree
        // branch below asks, without building either tree.
        if let (Some(r), Some(n)) = (rest.join_id(), next.join_id()) {
            return r == n && rest.choice.map(|c| c.0) == next.choice.map(|c| c.0);
        }
        fn only(ev: &Ev) -> Option<&Value> {
            match ev.data().get("choices") {
                Some(Value::Array(choices)) if choices.len() == 1 => choices.first(),
                _ => None,
            }
        }
        let (Some(r), Some(n)) = (only(rest), only(next)) else {
            return false;
        };
        let text_only = |c: &Value| {
            c.get("delta")
                .and_then(Value::as_object)
                .is_some_and(|d| d.len() == 1 && d.get("content").is_some_and(Value::is_string))
                && c.get("finish_reason").is_none_or(Value::is_null)
                && c.get("logprobs").is_none_or(Value::is_null)
        };
        r.get("index") == n.get("index")
            && text_only(r)
            && text_only(n)
            && next.data().get("usage").is_none_or(Value::is_null)
            && rest.data().get("id") == next.data().get("id")
    }

    fn rest(&self, ev: &mut Ev) {
        // A plain chunk of text alone is its own bare chunk: its text is set when it is written.
        if ev.join_id().is_some() {
            return;
        }
        let Some(Value::Object(chunk)) = ev.data_mut() else {
            return;
        };
        let Some(Value::Array(choices)) = chunk.get_mut("choices") else {
            return;
        };
        for choice in choices.iter_mut() {
            let mut delta = Map::new();
            if let Some(content) = util::at(choice, "/delta/content").filter(|c| c.is_string()) {
                delta.insert("content".into(), content.clone());
            }
            if let Some(Value::Array(calls)) = util::at(choice, "/delta/tool_calls") {
                let calls: Vec<Value> = calls
                    .iter()
                    .map(|call| {
                        let mut bare = Map::new();
                        if let Some(index) = call.get("index") {
                            bare.insert("index".into(), index.clone());
                        }
                        if let Some(arguments) = util::at(call, "/function/arguments") {
                            bare.insert("function".into(), json!({"arguments": arguments}));
                        }
                        Value::Object(bare)
                    })
                    .collect();
                delta.insert("tool_calls".into(), Value::Array(calls));
            }
            if let Some(arguments) = util::at(choice, "/delta/function_call/arguments") {
                delta.insert("function_call".into(), json!({"arguments": arguments}));
            }
            *choice = json!({
                "index": choice.get("index").cloned().unwrap_or(Value::Null),
                "delta": delta,
                "logprobs": null,
                "finish_reason": choice.get("finish_reason").cloned().unwrap_or(Value::Null),
            });
        }
    }

    fn close(&mut self, reply: Option<&str>, out: &mut Vec<u8>) {
        if self.done {
            return;
        }
        let mut open: Vec<u64> = self.seen.difference(&self.finished).copied().collect();
        if self.seen.is_empty() {
            open.push(0);
        }
        if let Some(reply) = reply {
            let role = !self.written_any;
            let choices: Vec<Value> = open
                .iter()
                .map(|&index| {
                    let delta = if role {
                        json!({"role": "assistant", "content": reply})
                    } else {
                        json!({"content": reply})
                    };
                    json!({"index": index, "delta": delta, "logprobs": null, "finish_reason": null})
                })
                .collect();
            util::write(&Ev::new(None, self.chunk(Value::Array(choices))), out);
        }
        let choices: Vec<Value> = open
            .iter()
            .map(|&index| {
                json!({"index": index, "delta": {}, "logprobs": null,
                       "finish_reason": "content_filter"})
            })
            .collect();
        util::write(&Ev::new(None, self.chunk(Value::Array(choices))), out);
        if self.include_usage {
            let mut last = self.chunk(json!([]));
            if let Value::Object(last) = &mut last {
                last.insert(
                    "usage".into(),
                    json!({
                        "prompt_tokens": self.prompt_tokens,
                        "completion_tokens": self.deltas,
                        "total_tokens": self.prompt_tokens.saturating_add(self.deltas),
                    }),
                );
            }
            util::write(&Ev::new(None, last), out);
        }
        out.extend_from_slice(b"data: [DONE]\n\n");
        self.done = true;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;

    fn event(data: &str) -> sse::Event {
        sse::Event {
            event: None,
            data: data.to_owned(),
        }
    }

    /// `next` read by a reader that just read `first` (its template) and by one without a
    /// template: the same unit, and whether the template read it.
    fn both(first: &str, next: &str) -> (Result<Unit, Unreadable>, Result<Unit, Unreadable>, bool) {
        let mut with = Chat::new(&Request::default());
        let mut without = Chat::new(&Request::default());
        // The first chunk is read as a tree (its head is kept), the next plain: the template.
        for _ in 0..2 {
            with.read(event(first)).unwrap();
            without.read(event(first)).unwrap();
        }
        without.template = None;
        let fast = with
            .template
            .as_ref()
            .and_then(|t| t.read(next.as_bytes()))
            .is_some_and(|(_, len)| len == next.len());
        let a = with.read(event(next));
        let b = without.read(event(next));
        assert_eq!(with.deltas, without.deltas);
        (a, b, fast)
    }

    const FIRST: &str = r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hel"},"logprobs":null,"finish_reason":null}],"obfuscation":"ab"}"#;

    #[test]
    fn a_chunk_of_the_templates_shape_is_read_as_the_plain_reader_reads_it() {
        let same_shape = [
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"lo, w\"orld \u00e9\n"},"logprobs":null,"finish_reason":null}],"obfuscation":"x"}"#,
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"\ud83d\ude00 \\"},"logprobs":null,"finish_reason":null}],"obfuscation":"longer obfuscation"}"#,
            // Written as it reads (no escape): taken as it stands, non-ASCII and DEL included.
            "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"naïve café \u{7f}~\"},\"logprobs\":null,\"finish_reason\":null}],\"obfuscation\":\"\"}",
        ];
        for next in same_shape {
            let (a, b, fast) = both(FIRST, next);
            assert!(fast, "{next}");
            assert_eq!(a, b, "{next}");
        }
    }

    /// The short path reads a template's bytes as one line's: data of several `data:` lines
    /// (joined by `\n`) makes none.
    #[test]
    fn data_of_several_lines_makes_no_template() {
        let mut chat = Chat::new(&Request::default());
        let two_lines = FIRST.replace(r#","model""#, ",\n\"model\"");
        for _ in 0..2 {
            chat.read(event(&two_lines)).unwrap();
        }
        assert!(chat.template.is_none());
        chat.read(event(FIRST)).unwrap();
        assert!(chat.template.is_some());
    }

    #[test]
    fn a_chunk_of_another_shape_or_a_bad_string_is_read_as_before() {
        let other = [
            // Another id, other spacing, a finish, a role, an empty text, a key more.
            FIRST.replace("chatcmpl-1", "chatcmpl-2"),
            FIRST.replace(r#""model":"m""#, r#""model": "m""#),
            FIRST.replace(r#""finish_reason":null"#, r#""finish_reason":"stop""#),
            FIRST.replace(
                r#""content":"Hel""#,
                r#""role":"assistant","content":"Hel""#,
            ),
            FIRST.replace(r#""content":"Hel""#, r#""content":"""#),
            FIRST.replace(
                r#""obfuscation":"ab""#,
                r#""obfuscation":"ab","usage":null"#,
            ),
            // Strings serde_json refuses, or that are not strings.
            FIRST.replace(r#""content":"Hel""#, r#""content":"a\qb""#),
            FIRST.replace(r#""content":"Hel""#, "\"content\":\"a\u{1}b\""),
            FIRST.replace(r#""content":"Hel""#, r#""content":"\ud800""#),
            FIRST.replace(r#""content":"Hel""#, r#""content":"a""b""#),
            FIRST.replace(r#""obfuscation":"ab""#, r#""obfuscation":7"#),
            FIRST.replace(r#""obfuscation":"ab""#, "\"obfuscation\":\"a\u{1f}b\""),
            FIRST.replace(r#""content":"Hel""#, r#""content":"unterminated"#),
        ];
        for next in &other {
            let (a, b, fast) = both(FIRST, next);
            assert!(!fast, "{next}");
            assert_eq!(a, b, "{next}");
        }
    }

    const AZURE_PROMPT: &str = r#"{"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{"hate":{"filtered":false,"severity":"safe"}}}]}"#;
    const AZURE_TEXT: &str = r#"{"choices":[{"content_filter_results":{"hate":{"filtered":false,"severity":"safe"}},"delta":{"content":"Hel"},"finish_reason":null,"index":0,"logprobs":null}],"created":1,"id":"chatcmpl-az","model":"gpt-4o","object":"chat.completion.chunk","system_fingerprint":"fp_1"}"#;
    const AZURE_ANNOTATION: &str = r#"{"choices":[{"content_filter_offsets":{"check_offset":3,"start_offset":0,"end_offset":3},"content_filter_results":{"hate":{"filtered":false,"severity":"safe"}},"finish_reason":null,"index":0}],"created":0,"id":"","model":"","object":""}"#;

    #[test]
    fn azures_prompt_annotation_is_not_the_answers_identity() {
        let mut chat = Chat::new(&Request::default());
        let first = chat.read(event(AZURE_PROMPT)).unwrap();
        assert!(first.texts.is_empty() && first.ends.is_empty());
        assert!(chat.head.is_none());
        chat.read(event(AZURE_TEXT)).unwrap();
        let head = chat.head.as_ref().unwrap();
        assert_eq!(head["id"], "chatcmpl-az");
        assert_eq!(head["model"], "gpt-4o");
        let mut out = Vec::new();
        chat.close(None, &mut out);
        let out = String::from_utf8(out).unwrap();
        assert!(out.contains(r#""id":"chatcmpl-az""#), "{out}");
        assert!(out.contains(r#""finish_reason":"content_filter""#), "{out}");
    }

    #[test]
    fn azures_text_beside_its_filter_verdicts_is_read_on_the_plain_path() {
        let mut chat = Chat::new(&Request::default());
        chat.read(event(AZURE_PROMPT)).unwrap();
        chat.read(event(AZURE_TEXT)).unwrap();
        let next = AZURE_TEXT.replace(r#""content":"Hel""#, r#""content":"lo""#);
        let plain = chat.read_plain(&event(&next));
        let (unit, text) = plain.expect("the plain shape").unwrap();
        assert_eq!(text.as_deref(), Some("lo"));
        assert!(unit.join_id.is_some(), "text alone beside the verdicts");
        let (a, b, fast) = both(AZURE_TEXT, &next);
        assert!(fast, "the same verdicts: the template reads it");
        assert_eq!(a, b);
        let other = next.replace(r#""severity":"safe""#, r#""severity":"low""#);
        let (a, b, fast) = both(AZURE_TEXT, &other);
        assert!(!fast);
        assert_eq!(a, b);
    }

    #[test]
    fn azures_annotation_of_text_already_sent_is_read_as_a_side_chunk() {
        let mut chat = Chat::new(&Request::default());
        for data in [AZURE_PROMPT, AZURE_TEXT] {
            chat.read(event(data)).unwrap();
        }
        let unit = chat.read(event(AZURE_ANNOTATION)).unwrap();
        assert!(unit.texts.is_empty() && unit.ends.is_empty() && !unit.asks_for_tool);
        assert_eq!(unit.lane, Lane::Side);
        let filtered = AZURE_TEXT
            .replace(r#""delta":{"content":"Hel"}"#, r#""delta":{}"#)
            .replace(
                r#""finish_reason":null"#,
                r#""finish_reason":"content_filter""#,
            );
        let unit = chat.read(event(&filtered)).unwrap();
        assert_eq!(unit.ends, vec![0]);
        assert!(!unit.asks_for_tool);
    }

    #[test]
    fn an_id_after_the_text_is_found_where_the_text_moved_it() {
        let first = r#"{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}],"object":"chat.completion.chunk","created":1,"model":"m","id":"chatcmpl-9"}"#;
        let next = first.replace(r#""content":"a""#, r#""content":"a much longer text""#);
        let (a, b, fast) = both(first, &next);
        assert!(fast);
        let a = a.unwrap();
        assert_eq!(a, b.unwrap());
        assert_eq!(a.ev.join_id(), Some(r#""chatcmpl-9""#));
    }
}
