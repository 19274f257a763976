//! Legacy completion chunks (`stream: true` on `POST /v1/completions`): each a `text_completion`
//! object whose choices carry `text`; the last of a choice its `finish_reason`; with
//! `stream_options.include_usage` a last chunk with no choices and the usage; then `data: [DONE]`.
//! Reference: <https://platform.openai.com/docs/api-reference/completions/create>.
//!
//! Each choice index is a channel: its `text`, in stream order. A chunk split in two keeps
//! everything but the unsent text in the first part (`finish_reason` moves to the second); the
//! second is a bare chunk with only the rest of the text, which the SDKs concatenate as any
//! other. A cut ends every unfinished choice with `finish_reason: "content_filter"`, then a usage
//! chunk when the request set `stream_options.include_usage`, then `data: [DONE]`: how the vendor
//! ends a filtered answer. The API has no tool calls.
//!
//! Most of a stream is chunks of text alone that differ only in their text: after one was read,
//! the next of its shape is read from it without parsing ([`Template`]), and goes out as it came
//! once its text is confirmed (the short path, [`Format::text_alone`]), as Chat's.

use std::borrow::Cow;
use std::collections::BTreeSet;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use crate::api::{Request, ToolCall};
use crate::sse;
use crate::stream::event::{Ev, TextAlone, TextPlace};
use crate::stream::format::{Format, Lane, TextIn, TextKind, Unit, Unreadable};
use crate::stream::template::{span_in, Slot, Template};
use crate::stream::util::{self, str_at, u64_at};

/// Top-level fields of a chunk that a chunk the filter writes repeats.
const HEAD_FIELDS: &[&str] = &["id", "object", "created", "model", "system_fingerprint"];

pub(crate) struct Completions {
    model: Option<String>,
    include_usage: bool,
    /// The first chunk's identity (`id`, `created`, `model`, …), for chunks the filter writes.
    head: Option<Map<String, Value>>,
    /// Text chunks read: the completion tokens a cut stream reports, as Chat counts them.
    deltas: u64,
    prompt_tokens: u64,
    seen: BTreeSet<u64>,
    finished: BTreeSet<u64>,
    done: bool,
    /// The last chunk of text alone: the next one, byte for byte the same but for its text (and
    /// `obfuscation`) string, is read from it without parsing.
    template: Option<Template>,
}

impl Completions {
    pub(crate) fn new(request: &Request) -> Self {
        Self {
            model: request.model.clone(),
            include_usage: request.include_usage,
            head: None,
            deltas: 0,
            prompt_tokens: 0,
            seen: BTreeSet::new(),
            finished: BTreeSet::new(),
            done: false,
            template: None,
        }
    }

    fn chunk(&self, choices: Value) -> Value {
        let mut chunk = self.head.clone().unwrap_or_else(|| {
            let mut head = Map::new();
            head.insert("id".into(), json!("cmpl-livecheck"));
            head.insert("object".into(), json!("text_completion"));
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

/// A chunk of text alone (one choice, its text and nothing else: no finish, log probabilities or
/// usage), checked without building its tree: any other chunk, or a field not listed here or
/// listed twice, fails to read here. Every value goes through serde_json's own parsers, so a
/// chunk read here is one the tree reader accepts and reads the same way.
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
    /// Kept as written: where it stands in the chunk's JSON is where a changed text goes.
    #[serde(borrow)]
    text: &'a RawValue,
    index: u64,
    logprobs: Option<()>,
    finish_reason: Option<()>,
}

/// Where a plain chunk's one text field is: its JSON pointer.
const TEXT: &str = "/choices/0/text";

/// A template of `event` when it is a plain chunk of text alone (non-empty) on one line.
fn template_of(event: &sse::Event) -> Option<Template> {
    if event.event.is_some() || event.data.contains('\n') {
        return None;
    }
    let chunk: Plain = serde_json::from_str(&event.data).ok()?;
    // An id or a text that is not a string is not the plain shape.
    serde_json::from_str::<Cow<str>>(chunk.id.get()).ok()?;
    let (choice,) = chunk.choices;
    let text: Cow<str> = serde_json::from_str(choice.text.get()).ok()?;
    if text.is_empty() {
        return None;
    }
    let obfuscation = match chunk.obfuscation {
        Some(raw) => {
            serde_json::from_str::<Cow<str>>(raw.get()).ok()?;
            Some((span_in(&event.data, raw.get())?, Slot::String))
        }
        None => None,
    };
    let place = TextPlace {
        channel: usize::try_from(choice.index).ok()?,
        name: None,
        choice: Some(choice.index),
        block: None,
        sequence: None,
        template: None,
        pointer: TEXT,
        span: span_in(&event.data, choice.text.get())?,
        join_id: Some(span_in(&event.data, chunk.id.get())?),
    };
    Some(Template::new(event.data.clone(), place, obfuscation))
}

/// The unit of a chunk of text alone its template read: its JSON as it came.
fn unit_of(event: sse::Event, alone: TextAlone<'_>) -> Unit {
    let TextAlone { text, place } = alone;
    let mut ev = Ev::unchanged(event.event, event.data, place.choice.map(|c| (c, false)));
    ev.text_span(TEXT, place.span);
    if let Some(id) = place.join_id {
        ev.join_id_at(id);
    }
    let mut unit = Unit::new(ev, Lane::Answer);
    unit.texts.push(TextIn {
        pointer: TEXT.into(),
        channel: place.channel,
        kind: TextKind::Answer,
        text: Some(text.into_owned()),
    });
    unit
}

/// The one choice of a chunk, when it has exactly one.
fn only_choice(ev: &Ev) -> Option<&Value> {
    match ev.data().get("choices") {
        Some(Value::Array(choices)) if choices.len() == 1 => choices.first(),
        _ => None,
    }
}

impl Format for Completions {
    fn read(&mut self, event: sse::Event) -> Result<Unit, Unreadable> {
        // A chunk's JSON starts with `{`: only other data can be the end marker.
        if !event.data.starts_with('{') && event.data.trim() == "[DONE]" {
            let mut unit = Unit::new(Ev::new(event.event, Value::Null), Lane::End);
            unit.terminal = true;
            return Ok(unit);
        }
        if event.event.is_none() {
            let data = event.data.as_bytes();
            let read = self.template.as_ref().and_then(|t| t.read(data));
            if let Some((alone, _)) = read.filter(|(_, len)| *len == data.len()) {
                let alone = TextAlone {
                    text: Cow::Owned(alone.text.into_owned()),
                    place: alone.place,
                };
                self.deltas += 1;
                return Ok(unit_of(event, alone));
            }
        }
        let (data, as_it_came) = util::parse(&event)?;
        if data.get("error").is_some() {
            let ev = Ev::parsed(event.event, event.data, data, as_it_came);
            return Ok(Unit::new(ev, Lane::End));
        }
        let Value::Object(chunk) = &data else {
            return Err(Unreadable);
        };
        if self.head.is_none() {
            let head: Map<String, Value> = HEAD_FIELDS
                .iter()
                .filter_map(|k| chunk.get(*k).map(|v| ((*k).to_owned(), v.clone())))
                .collect();
            self.head = Some(head);
        }
        if let Some(n) = u64_at(&data, "/usage/prompt_tokens") {
            self.prompt_tokens = n;
        }
        let choices = match data.get("choices") {
            Some(Value::Array(choices)) => choices.as_slice(),
            None | Some(Value::Null) => &[],
            Some(_) => return Err(Unreadable),
        };
        let (mut texts, mut ends, mut finish) = (Vec::new(), Vec::new(), false);
        for (k, choice) in choices.iter().enumerate() {
            let index = u64_at(choice, "/index").unwrap_or(k as u64);
            let channel = usize::try_from(index).map_err(|_| Unreadable)?;
            match util::at(choice, "/text") {
                None | Some(Value::Null) => {}
                Some(Value::String(text)) if text.is_empty() => {}
                Some(Value::String(_)) => texts.push(TextIn {
                    pointer: format!("/choices/{k}/text").into(),
                    channel,
                    kind: TextKind::Answer,
                    text: None,
                }),
                // A text that is not a string cannot be checked: never passed.
                Some(_) => return Err(Unreadable),
            }
            if str_at(choice, "/finish_reason").is_some() {
                ends.push(channel);
                finish = true;
            }
        }
        if !texts.is_empty() {
            self.deltas += 1;
        }
        let usage_only = choices.is_empty() && data.get("usage").is_some_and(|u| !u.is_null());
        let lane = if !texts.is_empty() {
            Lane::Answer
        } else if finish || usage_only {
            Lane::End
        } else {
            Lane::Side
        };
        self.template = match lane {
            Lane::Answer if as_it_came && ends.is_empty() => template_of(&event),
            _ => None,
        };
        let mut unit = Unit::new(Ev::parsed(event.event, event.data, data, as_it_came), lane);
        unit.texts = texts;
        unit.ends = ends;
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
        // What `write` remembers of a chunk of text alone.
        if let Some(choice) = place.choice.filter(|c| !self.seen.contains(c)) {
            self.seen.insert(choice);
        }
    }

    fn write(&mut self, ev: Ev, out: &mut Vec<u8>) {
        if let (Some(_), Some((index, _))) = (ev.raw(), ev.choice) {
            // A chunk of text alone its template read, as it came: it finishes nothing.
            self.seen.insert(index);
            util::write(&ev, out);
            return;
        }
        if ev.data().is_null() {
            self.done = true;
            out.extend_from_slice(b"data: [DONE]\n\n");
            return;
        }
        if let Some(Value::Array(choices)) = ev.data().get("choices") {
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
        // A chunk of text alone has no finish reason to take out.
        if ev.raw().is_some() && ev.choice.is_some() {
            return;
        }
        if let Some(Value::Array(choices)) = ev.data_mut().and_then(|d| d.get_mut("choices")) {
            for choice in choices.iter_mut().filter_map(Value::as_object_mut) {
                choice.insert("finish_reason".into(), Value::Null);
            }
        }
    }

    fn rest(&self, ev: &mut Ev) {
        // A chunk of text alone is its own bare rest: its text is set when it is written.
        if ev.join_id().is_some() {
            return;
        }
        let Some(Value::Object(chunk)) = ev.data_mut() else {
            return;
        };
        // The usage, when a chunk carries it with text, stays with the first part.
        if chunk.get("usage").is_some_and(|u| !u.is_null()) {
            chunk.insert("usage".into(), Value::Null);
        }
        let Some(Value::Array(choices)) = chunk.get_mut("choices") else {
            return;
        };
        for choice in choices.iter_mut() {
            *choice = json!({
                "text": choice.get("text").filter(|t| t.is_string()).cloned()
                    .unwrap_or_else(|| json!("")),
                "index": choice.get("index").cloned().unwrap_or(Value::Null),
                "logprobs": null,
                "finish_reason": choice.get("finish_reason").cloned().unwrap_or(Value::Null),
            });
        }
    }

    fn joins(&self, rest: &Ev, next: &Ev) -> bool {
        // Two chunks of text alone: the same choice and the same id as written, without a tree.
        if let (Some(r), Some(n)) = (rest.join_id(), next.join_id()) {
            return r == n && rest.choice.map(|c| c.0) == next.choice.map(|c| c.0);
        }
        let (Some(r), Some(n)) = (only_choice(rest), only_choice(next)) else {
            return false;
        };
        let text_only = |c: &Value| {
            c.get("text").is_some_and(Value::is_string)
                && c.get("finish_reason").is_none_or(Value::is_null)
                && c.get("logprobs").is_none_or(Value::is_null)
        };
        r.get("index") == n.get("index")
            && text_only(r)
            && text_only(n)
            && next.data().get("usage").is_none_or(Value::is_null)
            && rest.data().get("id") == next.data().get("id")
    }

    fn close(&mut self, reply: Option<&str>, out: &mut Vec<u8>) {
        if self.done {
            return;
        }
        let mut open: Vec<u64> = self.seen.difference(&self.finished).copied().collect();
        if self.seen.is_empty() {
            open.push(0);
        }
        let choices = |text: &str, finish: Value| -> Value {
            open.iter()
                .map(|&index| {
                    json!({"text": text, "index": index, "logprobs": null,
                           "finish_reason": finish})
                })
                .collect()
        };
        if let Some(reply) = reply {
            let said = self.chunk(choices(reply, Value::Null));
            util::write(&Ev::new(None, said), out);
        }
        let ended = self.chunk(choices("", json!("content_filter")));
        util::write(&Ev::new(None, ended), out);
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

    fn call_of(&self, _key: u64, _events: &[&Ev]) -> Option<ToolCall> {
        // No tools: no event is ever part of a call.
        None
    }
}
