//! Gemini `:streamGenerateContent?alt=sse`: each SSE `data:` event is one
//! `GenerateContentResponse` holding only its new parts, with no event name and no end marker
//! (the body's end ends the stream).
//!
//! Each candidate index is a channel: the `text` of its parts, thoughts (`thought: true`) aside
//! (reasoning, read nowhere as the other readers' reasoning is not). A `functionCall` part comes
//! whole in one chunk: it is one tool call, complete in its chunk, its `args` object's strings
//! read by rule checks as the call's text. `finishReason` ends its candidate; `usageMetadata` is
//! cumulative (every chunk repeats the count so far); `promptFeedback` comes in the first chunk
//! only. A chunk split by a cut keeps everything in its first part but the unsent text and the
//! finish reasons; the rest is a chunk of its candidates' answer text alone (SDKs join a
//! candidate's text parts across chunks). A cut ends every unfinished candidate with one last
//! chunk: the reply (when given) as its text, `finishReason: "SAFETY"` (as the non-streamed
//! withheld answer, [`super::withhold`]), and the usage so far.
//!
//! Without `alt=sse` the same chunks are the elements of one JSON array ([`super::array`]): read
//! in that framing, written back in it, the array's end where the upstream's came (or at a cut).
//!
//! Sources: <https://ai.google.dev/api/generate-content#method:-models.streamgeneratecontent>;
//! googleapis/python-genai `models.py` (`'{model}:streamGenerateContent?alt=sse'`),
//! `_api_client.py` (reads `data:` lines, joins a multi-line event with `\n`), `types.py`
//! (`GenerateContentResponse`, `Candidate`, `FinishReason.SAFETY`: "When streaming, content is
//! empty if content filters blocks the output"; `promptFeedback` "only in the first stream
//! chunk"); example chunks in simonw/llm-gemini#97.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Map, Value};

use super::array::ArrayWriter;
use super::STOP_REASON;
use crate::api::{Request, ToolCall};
use crate::frame::Padding;
use crate::sse;
use crate::stream::event::Ev;
use crate::stream::format::{Format, Lane, TextIn, TextKind, Unit, Unreadable};
use crate::stream::framing::{Framing, ARRAY_END};
use crate::stream::util::{self, u64_at};

/// Top-level fields of a chunk that name the answer: the chunks the filter writes repeat them.
const HEAD_FIELDS: &[&str] = &["modelVersion", "responseId", "createTime"];

pub(crate) struct Gemini {
    model: Option<String>,
    /// The first chunk's `modelVersion`, `responseId`, `createTime`.
    head: Option<Map<String, Value>>,
    /// The last `usageMetadata` read (cumulative).
    usage: Option<Map<String, Value>>,
    /// Chunks read with answer text: the least the output can have counted.
    text_chunks: u64,
    /// Per candidate, the function calls read so far (a call's key is its candidate and ordinal).
    calls_read: BTreeMap<u64, u64>,
    /// A call's key → where its part stands in its chunk (candidate position, part position).
    call_at: BTreeMap<u64, (usize, usize)>,
    /// Candidates the caller has seen, and those it has seen finish.
    seen: BTreeSet<u64>,
    finished: BTreeSet<u64>,
    closed: bool,
    /// The stream is one JSON array ([`Request::json_array`]): its writer.
    array: Option<ArrayWriter>,
}

impl Gemini {
    pub(crate) fn new(request: &Request) -> Self {
        Self {
            model: request.model.clone(),
            head: None,
            usage: None,
            text_chunks: 0,
            calls_read: BTreeMap::new(),
            call_at: BTreeMap::new(),
            seen: BTreeSet::new(),
            finished: BTreeSet::new(),
            closed: false,
            array: request.json_array.then(ArrayWriter::default),
        }
    }

    /// The JSON array's end, when the stream is one (once).
    fn end_array(&mut self, out: &mut Vec<u8>) {
        if let Some(array) = &mut self.array {
            array.end(out);
        }
    }

    /// Whether `name` is the JSON array's end ([`Framing::JsonArray`]): only in that framing.
    fn is_array_end(&self, name: Option<&str>) -> bool {
        self.array.is_some() && name == Some(ARRAY_END)
    }

    /// The usage the caller is told at a cut: the last count read, its candidates at least one
    /// per chunk of text read, its total the sum of its counts.
    fn usage_so_far(&self) -> Value {
        let mut usage = self.usage.clone().unwrap_or_default();
        let count = |usage: &Map<String, Value>, key: &str| {
            usage.get(key).and_then(Value::as_u64).unwrap_or(0)
        };
        let candidates = count(&usage, "candidatesTokenCount").max(self.text_chunks);
        usage.insert("candidatesTokenCount".into(), json!(candidates));
        let prompt = count(&usage, "promptTokenCount");
        usage.insert("promptTokenCount".into(), json!(prompt));
        let total = ["thoughtsTokenCount", "toolUsePromptTokenCount"]
            .iter()
            .fold(prompt.saturating_add(candidates), |sum, key| {
                sum.saturating_add(count(&usage, key))
            });
        usage.insert("totalTokenCount".into(), json!(total));
        Value::Object(usage)
    }
}

/// A JSON pointer's reference token for `key` (RFC 6901: `~` as `~0`, `/` as `~1`).
fn token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// The pointers to every non-empty string in `value` (at `at`), in document order.
fn strings_in(value: &Value, at: &str, out: &mut Vec<String>) {
    match value {
        Value::String(s) if !s.is_empty() => out.push(at.to_owned()),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                strings_in(item, &format!("{at}/{i}"), out);
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                strings_in(item, &format!("{at}/{}", token(key)), out);
            }
        }
        _ => {}
    }
}

/// A part's function call, under its JSON name or its proto name (both: unreadable, as the
/// non-streamed reader has it): the name it is under and the call, `None` for none.
fn function_call(part: &Map<String, Value>) -> Result<Option<(&str, &Value)>, Unreadable> {
    let call = match (part.get("functionCall"), part.get("function_call")) {
        (Some(_), Some(_)) => return Err(Unreadable),
        (Some(call), None) => ("functionCall", call),
        (None, Some(call)) => ("function_call", call),
        (None, None) => return Ok(None),
    };
    match call.1 {
        Value::Null => Ok(None),
        Value::Object(fields) => match fields.get("args") {
            None | Some(Value::Null | Value::Object(_)) => Ok(Some(call)),
            Some(_) => Err(Unreadable),
        },
        _ => Err(Unreadable),
    }
}

/// `executableCode`/`executable_code` (code Google ran): of an object shape, or unreadable.
fn check_code(part: &Map<String, Value>) -> Result<(), Unreadable> {
    match (part.get("executableCode"), part.get("executable_code")) {
        (Some(_), Some(_)) => Err(Unreadable),
        (Some(code), None) | (None, Some(code)) if !(code.is_object() || code.is_null()) => {
            Err(Unreadable)
        }
        _ => Ok(()),
    }
}

/// The parts of a candidate, as the non-streamed reader checks them (`content` and `parts` absent
/// or null are none).
fn parts_of(candidate: &Value) -> Result<&[Value], Unreadable> {
    let Value::Object(candidate) = candidate else {
        return Err(Unreadable);
    };
    let content = match candidate.get("content") {
        None | Some(Value::Null) => return Ok(&[]),
        Some(Value::Object(content)) => content,
        Some(_) => return Err(Unreadable),
    };
    match content.get("parts") {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(parts)) => Ok(parts),
        Some(_) => Err(Unreadable),
    }
}

/// Whether a part is answer text (a string `text`, not a thought).
fn is_answer_text(part: &Value) -> bool {
    part.get("text").is_some_and(Value::is_string) && part.get("thought") != Some(&json!(true))
}

/// A candidate's `index` (its position when absent): a number below 2^32 (a call's key holds it
/// in its high half), or unreadable.
fn index_of(candidate: &Value, position: usize) -> Result<u64, Unreadable> {
    match candidate.get("index") {
        None | Some(Value::Null) => Ok(position as u64),
        Some(index) => index
            .as_u64()
            .filter(|&i| i <= u64::from(u32::MAX))
            .ok_or(Unreadable),
    }
}

fn candidates_of(data: &Value) -> Result<&[Value], Unreadable> {
    match data.get("candidates") {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(candidates)) => Ok(candidates),
        Some(_) => Err(Unreadable),
    }
}

impl Format for Gemini {
    /// Google's readers take every line but a blank one for data: google-genai parses a line that
    /// does not start `data: ` as JSON (an error body) and raises `UnknownApiResponseError` on an
    /// SSE comment (python-genai `_api_client.py` `_iter_response_stream`, checked with 3.6.1
    /// through Envoy); the JavaScript SDK fails a stream that ends with anything but whitespace
    /// after its last `data:` event (google-gemini/generative-ai-js
    /// `packages/main/src/requests/stream-reader.ts` `getResponseStream`).
    fn padding(&self) -> Padding {
        Padding::BlankLines
    }

    fn framing(&self, limit: usize) -> Framing {
        if self.array.is_some() {
            Framing::json_array(limit)
        } else {
            Framing::sse(limit)
        }
    }

    fn read(&mut self, event: sse::Event) -> Result<Unit, Unreadable> {
        if self.is_array_end(event.event.as_deref()) {
            return Ok(Unit::new(Ev::new(event.event, Value::Null), Lane::End));
        }
        let (data, as_it_came) = util::parse(&event)?;
        let Value::Object(chunk) = &data else {
            return Err(Unreadable);
        };
        if chunk.get("error").is_some() {
            let ev = Ev::parsed(event.event, event.data, data, as_it_came);
            return Ok(Unit::new(ev, Lane::End));
        }
        if self.head.is_none() {
            let head: Map<String, Value> = HEAD_FIELDS
                .iter()
                .filter_map(|k| chunk.get(*k).map(|v| ((*k).to_owned(), v.clone())))
                .collect();
            self.head = Some(head);
        }
        match chunk.get("usageMetadata") {
            None | Some(Value::Null) => {}
            Some(Value::Object(usage)) => self.usage = Some(usage.clone()),
            Some(_) => return Err(Unreadable),
        }
        let (mut texts, mut ends, mut calls) = (Vec::new(), Vec::new(), Vec::new());
        let (mut answer, mut thought) = (false, false);
        let candidates = candidates_of(&data)?;
        for (k, candidate) in candidates.iter().enumerate() {
            let index = index_of(candidate, k)?;
            let channel = usize::try_from(index).map_err(|_| Unreadable)?;
            for (j, part) in parts_of(candidate)?.iter().enumerate() {
                let Value::Object(fields) = part else {
                    return Err(Unreadable);
                };
                let at = format!("/candidates/{k}/content/parts/{j}");
                match fields.get("text") {
                    None | Some(Value::Null) => {}
                    Some(Value::String(text)) if is_answer_text(part) => {
                        if !text.is_empty() {
                            answer = true;
                            texts.push(TextIn {
                                pointer: format!("{at}/text").into(),
                                channel,
                                kind: TextKind::Answer,
                                text: None,
                            });
                        }
                    }
                    Some(Value::String(_)) => thought = true,
                    Some(_) => return Err(Unreadable),
                }
                check_code(fields)?;
                if let Some((name, call)) = function_call(fields)? {
                    let n = self.calls_read.entry(index).or_insert(0);
                    let key = (index << 32) | *n;
                    *n += 1;
                    self.call_at.insert(key, (k, j));
                    calls.push(key);
                    let mut strings = Vec::new();
                    if let Some(args) = call.get("args") {
                        strings_in(args, &format!("{at}/{name}/args"), &mut strings);
                    }
                    texts.extend(strings.into_iter().map(|pointer| TextIn {
                        pointer: pointer.into(),
                        channel,
                        kind: TextKind::Tool {
                            call: key,
                            json: false,
                        },
                        text: None,
                    }));
                }
            }
            match candidate.get("finishReason") {
                None | Some(Value::Null) => {}
                Some(Value::String(_)) => ends.push(channel),
                Some(_) => return Err(Unreadable),
            }
        }
        if answer {
            self.text_chunks += 1;
        }
        let lane = if answer {
            Lane::Answer
        } else if thought || !calls.is_empty() {
            Lane::Side
        } else if !ends.is_empty() || candidates.is_empty() {
            // A finish, a chunk of usage alone, a blocked prompt's feedback.
            Lane::End
        } else {
            Lane::Side
        };
        let mut unit = Unit::new(Ev::parsed(event.event, event.data, data, as_it_came), lane);
        unit.texts = texts;
        unit.ends = ends;
        unit.asks_for_tool = !calls.is_empty();
        unit.calls_done.clone_from(&calls);
        unit.calls = calls;
        Ok(unit)
    }

    fn write(&mut self, ev: Ev, out: &mut Vec<u8>) {
        if self.is_array_end(ev.name.as_deref()) {
            self.end_array(out);
            return;
        }
        if let Ok(candidates) = candidates_of(ev.data()) {
            for (k, candidate) in candidates.iter().enumerate() {
                let index = u64_at(candidate, "/index").unwrap_or(k as u64);
                self.seen.insert(index);
                if candidate.get("finishReason").is_some_and(|r| !r.is_null()) {
                    self.finished.insert(index);
                }
            }
        }
        match &mut self.array {
            Some(array) => array.element(&ev, out),
            None => util::write(&ev, out),
        }
    }

    fn part(&self, ev: &mut Ev) {
        // The finish goes with the rest of the text.
        let Some(Value::Array(candidates)) = ev.data_mut().and_then(|d| d.get_mut("candidates"))
        else {
            return;
        };
        for candidate in candidates {
            // A null finish (no finish, in proto3 JSON) stays as it came.
            if let Value::Object(candidate) = candidate {
                if candidate.get("finishReason").is_some_and(|r| !r.is_null()) {
                    candidate.remove("finishReason");
                }
            }
        }
    }

    fn rest(&self, ev: &mut Ev) {
        // The rest of the text at the same places (its fields are written by their pointers):
        // every other part becomes an empty text, which adds nothing to what an SDK joins.
        let Some(Value::Object(chunk)) = ev.data_mut() else {
            return;
        };
        chunk.remove("promptFeedback");
        let Some(Value::Array(candidates)) = chunk.get_mut("candidates") else {
            return;
        };
        for candidate in candidates.iter_mut() {
            let parts: Vec<Value> = parts_of(candidate)
                .unwrap_or_default()
                .iter()
                .map(|part| match part.get("text") {
                    Some(text) if is_answer_text(part) => json!({"text": text}),
                    _ => json!({"text": ""}),
                })
                .collect();
            let Value::Object(candidate) = candidate else {
                continue;
            };
            // Kept in place, in the order they came: the content, the finish, the index.
            candidate.retain(|key, _| matches!(key.as_str(), "content" | "finishReason" | "index"));
            if let Some(Value::Object(content)) = candidate.get_mut("content") {
                content.retain(|key, _| matches!(key.as_str(), "role" | "parts"));
                content.insert("parts".into(), Value::Array(parts));
            }
        }
    }

    fn close(&mut self, reply: Option<&str>, out: &mut Vec<u8>) {
        if self.closed {
            return;
        }
        self.closed = true;
        let mut open: Vec<u64> = self.seen.difference(&self.finished).copied().collect();
        if self.seen.is_empty() {
            open.push(0);
        }
        if open.is_empty() {
            // Every candidate the caller saw has finished: its stream is whole (but for the
            // array's end).
            self.end_array(out);
            return;
        }
        let candidates: Vec<Value> = open
            .iter()
            .map(|&index| match reply {
                Some(reply) => json!({
                    "content": {"role": "model", "parts": [{"text": reply}]},
                    "finishReason": STOP_REASON,
                    "index": index,
                }),
                // "When streaming, content is empty if content filters blocks the output."
                None => json!({"finishReason": STOP_REASON, "index": index}),
            })
            .collect();
        let mut chunk = Map::new();
        chunk.insert("candidates".into(), Value::Array(candidates));
        chunk.insert("usageMetadata".into(), self.usage_so_far());
        let head = self.head.clone().unwrap_or_default();
        if !head.contains_key("modelVersion") {
            chunk.insert(
                "modelVersion".into(),
                json!(self.model.as_deref().unwrap_or_default()),
            );
        }
        chunk.extend(head);
        let ev = Ev::new(None, Value::Object(chunk));
        self.write(ev, out);
        self.end_array(out);
    }

    fn call_of(&self, key: u64, events: &[&Ev]) -> Option<ToolCall> {
        let &(k, j) = self.call_at.get(&key)?;
        let part = events.iter().find_map(|e| {
            util::at(e.data(), &format!("/candidates/{k}/content/parts/{j}"))
                .and_then(Value::as_object)
        })?;
        let (_, call) = function_call(part).ok()??;
        let arguments = match call.get("args") {
            Some(args @ Value::Object(_)) => args.to_string(),
            _ => "{}".to_owned(),
        };
        Some(ToolCall {
            name: call
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            arguments,
            json: true,
        })
    }
}

#[cfg(test)]
mod tests;
