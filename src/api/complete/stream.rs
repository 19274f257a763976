//! Anthropic Text Completions events: <https://docs.anthropic.com/en/api/streaming>.
//!
//! `event: completion` carries the next piece of the answer in `completion` with `stop_reason:
//! null`; the last one (its `completion` usually empty) says the stop reason. `event: ping` and
//! `event: error` (`{"type": "error", "error": {…}}`) carry no text. One channel (0): the
//! `completion` texts in stream order; no tool calls. A cut ends the answer the way the vendor
//! does: one last `completion` event, empty, with `stop_reason: "stop_sequence"` (the API has no
//! content-filter reason: see [`super`]), after the blocked reply as one more `completion` event
//! when one is said.

use serde_json::{json, Value};

use super::STOP_REASON;
use crate::api::{Request, ToolCall};
use crate::sse;
use crate::stream::event::Ev;
use crate::stream::format::{Format, Lane, TextIn, TextKind, Unit, Unreadable};
use crate::stream::util::{self, str_at};

/// The event most of a stream is, and where its text is.
const COMPLETION: &str = "completion";
const TEXT: &str = "/completion";

pub(crate) struct Complete {
    model: Option<String>,
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
        let mut unit = Unit::new(Ev::parsed(event.event, event.data, data, as_it_came), lane);
        unit.texts = texts;
        unit.ends = ends;
        unit.terminal = terminal;
        Ok(unit)
    }

    fn write(&mut self, ev: Ev, out: &mut Vec<u8>) {
        if str_at(ev.data(), "/type") == Some(COMPLETION) && !text_alone(&ev) {
            self.stopped = true;
        }
        util::write(&ev, out);
    }

    fn part(&self, ev: &mut Ev) {
        // The stop reason belongs to the last part of the answer.
        if text_alone(ev) {
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
        text_alone(rest) && text_alone(next)
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
