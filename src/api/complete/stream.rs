//! Anthropic Text Completions events: <https://docs.anthropic.com/en/api/streaming>.
//!
//! `event: completion` carries the next piece of the answer in `completion` with `stop_reason:
//! null`; the last one (its `completion` usually empty) says the stop reason. `event: ping` and
//! `event: error` (`{"type": "error", "error": {…}}`) carry no text. One channel (0): the
//! `completion` texts in stream order; no tool calls. A cut ends the answer the way the vendor
//! does: one last `completion` event, empty, with `stop_reason: "stop_sequence"` (the API has no
//! content-filter reason: see [`super`]), after the blocked reply as one more `completion` event
//! when one is said. Most of a stream is `completion` events that differ only in their text: after
//! one of the plain shape was read from its JSON, the next are read as its template ([`Templates`]).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::STOP_REASON;
use crate::api::{Request, ToolCall};
use crate::sse;
use crate::stream::event::{Ev, TextAlone, TextPlace};
use crate::stream::format::{Format, Lane, TextIn, TextKind, Unit, Unreadable};
use crate::stream::template::{span_in, Templates};
use crate::stream::util::{self, str_at};

/// The event most of a stream is, and where its text is.
const COMPLETION: &str = "completion";
const TEXT: &str = "/completion";

/// A completion event of the plain shape (its text, no stop reason; nothing else but the fields
/// listed, nothing twice), read borrowed to learn where its text literal stands. Every value goes
/// through serde_json's own parsers: what it accepts the tree reader reads the same way.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Fields only read to be accepted: the event goes out as it came.
struct Plain<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    completion: &'a RawValue,
    stop_reason: Option<()>,
    #[serde(borrow)]
    model: Option<Cow<'a, str>>,
    stop: Option<()>,
    #[serde(borrow)]
    log_id: Option<Cow<'a, str>>,
}

/// Where a completion event's text literal stands in its data (bytes, quotes included): `None`
/// unless the event has the plain shape.
fn plain_text_span(data: &str) -> Option<std::ops::Range<usize>> {
    let plain: Plain = serde_json::from_str(data).ok()?;
    if plain.kind != COMPLETION {
        return None;
    }
    span_in(data, plain.completion.get())
}

/// The one block a template names: the answer (the completion has no blocks).
const BLOCK: u64 = 0;

pub(crate) struct Complete {
    model: Option<String>,
    /// The answer's lane, as a template's read looks it up.
    lanes: BTreeMap<u64, Lane>,
    /// No tool call: a template's read looks its block up here.
    calls: BTreeSet<u64>,
    /// The last plain text event read from its JSON, as a pattern for the next.
    templates: Templates,
    /// The first completion event's `id` and `model`, for the events the filter writes.
    id: Option<Value>,
    upstream_model: Option<Value>,
    /// The caller was sent the last completion event (the one with a stop reason).
    stopped: bool,
}

impl Complete {
    pub(crate) fn new(request: &Request) -> Self {
        Self {
            model: request.model.clone(),
            lanes: BTreeMap::from([(BLOCK, Lane::Answer)]),
            calls: BTreeSet::new(),
            templates: Templates::default(),
            id: None,
            upstream_model: None,
            stopped: false,
        }
    }

    fn completion(&self, text: &str, stop_reason: Option<&str>) -> Ev {
        let data = json!({
            "type": COMPLETION,
            "id": self.id.clone().unwrap_or_else(|| json!("compl_livecheck")),
            "completion": text,
            "stop_reason": stop_reason,
            "model": self.upstream_model.clone()
                .unwrap_or_else(|| json!(self.model.as_deref().unwrap_or_default())),
        });
        Ev::new(Some(COMPLETION.to_owned()), data)
    }
}

/// Whether an event is a completion event that ends nothing: text alone.
fn text_alone(ev: &Ev) -> bool {
    let data = ev.data();
    str_at(data, "/type") == Some(COMPLETION) && data.get("stop_reason").is_none_or(Value::is_null)
}

impl Format for Complete {
    fn read(&mut self, event: sse::Event) -> Result<Unit, Unreadable> {
        let event = match self.templates.read_event(event, &self.lanes, &self.calls) {
            Ok(unit) => return Ok(unit),
            Err(event) => event,
        };
        let (data, as_it_came) = util::parse(&event)?;
        let kind = str_at(&data, "/type").unwrap_or_default();
        let mut texts = Vec::new();
        let (mut lane, mut ends, mut terminal) = (Lane::Side, Vec::new(), false);
        match kind {
            COMPLETION => {
                // A completion whose text is not a string cannot be read.
                let Some(text) = data.get("completion").map(Value::as_str) else {
                    return Err(Unreadable);
                };
                let text = text.ok_or(Unreadable)?;
                if self.id.is_none() {
                    self.id = data.get("id").cloned();
                    self.upstream_model = data.get("model").cloned();
                }
                if !text.is_empty() {
                    lane = Lane::Answer;
                    texts.push(TextIn {
                        pointer: TEXT.into(),
                        channel: 0,
                        kind: TextKind::Answer,
                        text: None,
                    });
                }
                if data.get("stop_reason").is_some_and(|r| !r.is_null()) {
                    if texts.is_empty() {
                        lane = Lane::End;
                    }
                    ends.push(0);
                    terminal = true;
                }
            }
            "error" => lane = Lane::End,
            _ => {}
        }
        // A text event written as it came keeps where its text stands: a changed text is written
        // there, the rest of its JSON kept; and one of text alone makes the template for the next.
        let span = (as_it_came && kind == COMPLETION)
            .then(|| plain_text_span(&event.data))
            .flatten();
        if let Some(span) = span
            .clone()
            .filter(|_| !texts.is_empty() && ends.is_empty())
        {
            self.templates
                .make(&event, (COMPLETION, TEXT), (span, BLOCK), Vec::new());
        }
        let mut ev = Ev::parsed(event.event, event.data, data, as_it_came);
        if let Some(span) = span {
            ev.text_span(TEXT, span);
        }
        let mut unit = Unit::new(ev, lane);
        unit.texts = texts;
        unit.ends = ends;
        unit.terminal = terminal;
        Ok(unit)
    }

    #[cfg(test)]
    fn without_templates(&mut self) {
        self.templates.off = true;
    }

    fn text_name(&self) -> Option<&'static str> {
        Some(COMPLETION)
    }

    fn text_alone<'d>(&self, line: &'d [u8]) -> Option<(TextAlone<'d>, usize)> {
        self.templates.read_outside_calls(line, &self.calls)
    }

    fn goes_as_it_came(&self, _place: &TextPlace, _after: usize) -> bool {
        // Nothing is renumbered.
        true
    }

    fn write(&mut self, ev: Ev, out: &mut Vec<u8>) {
        // A template's read is text alone (its fixed bytes say `"stop_reason":null`).
        if ev.templated().is_some() {
            util::write(&ev, out);
            return;
        }
        if str_at(ev.data(), "/type") == Some(COMPLETION) && !text_alone(&ev) {
            self.stopped = true;
        }
        util::write(&ev, out);
    }

    fn part(&self, ev: &mut Ev) {
        // The stop reason belongs to the last part of the answer.
        if ev.templated().is_some() || text_alone(ev) {
            return;
        }
        if let Some(Value::Object(data)) = ev.data_mut() {
            data.insert("stop_reason".into(), Value::Null);
            if data.contains_key("stop") {
                data.insert("stop".into(), Value::Null);
            }
        }
    }

    fn joins(&self, rest: &Ev, next: &Ev) -> bool {
        let alone = |ev: &Ev| ev.templated().is_some() || text_alone(ev);
        alone(rest) && alone(next)
    }

    fn close(&mut self, reply: Option<&str>, out: &mut Vec<u8>) {
        if self.stopped {
            return;
        }
        if let Some(reply) = reply {
            let ev = self.completion(reply, None);
            util::write(&ev, out);
        }
        let ev = self.completion("", Some(STOP_REASON));
        self.write(ev, out);
    }

    fn call_of(&self, _key: u64, _events: &[&Ev]) -> Option<ToolCall> {
        None
    }
}

#[cfg(test)]
mod tests;
