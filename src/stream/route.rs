//! The upstream read: body chunks decoded into events, each event read by its vendor's format and
//! routed (its checked texts to their channels' hold-back, the event queued to stream or set aside
//! for a held round), then scanned; what a chunk's events confirmed is sent at the chunk's end.
//! The short path ([`super::short`]) takes the common events before this general path.

use serde_json::Value;

use super::format::{Lane, TextKind, Unreadable};
use super::holdback::Holdback;
use super::queue::{Field, FieldMap, Piece};
use super::util;
use super::{Channel, Hold, Phase, Rewriter, Step};
use crate::sse;

/// The most text channels (Chat choices) a stream may open; more is unreadable.
const MAX_CHANNELS: usize = 128;

/// Within a chunk, what queued pieces confirmed is sent every this many pieces.
const SEND_EVERY: usize = 8;

/// The answer's id an event carries: Anthropic `message_start`'s `message.id`, a Responses event's
/// `response.id`, a Chat chunk's `id`.
fn answer_id(data: &Value) -> Option<String> {
    ["/message/id", "/response/id", "/id"]
        .iter()
        .find_map(|p| util::str_at(data, p))
        .map(str::to_owned)
}

impl Rewriter {
    /// One upstream body chunk.
    pub fn feed(&mut self, chunk: &[u8]) -> Step {
        let _span = crate::profile::span("phase.stream_feed");
        let mut step = Step::default();
        if self.phase == Phase::Done || self.abandoned.is_some() {
            return step;
        }
        // What goes out is about what came in: grown once, not per event.
        step.out.reserve(chunk.len() + chunk.len() / 8);
        let mut rest = chunk;
        let mut events = Vec::new();
        let mut decoded = Ok(());
        while self.reading() {
            rest = self.pass_whole(rest, &mut step);
            if rest.is_empty() || !self.reading() {
                break;
            }
            // The general path, up to the end of the next event: the short path may take the
            // events after it. The decoder gives the same events however its input is split.
            // While holding, the decoder reads no further than one byte past the limit, so the
            // limit is met where the same bytes meet it however they were split, and before a
            // line beyond it could be found unreadable.
            let holding = self.holds_whole();
            let room = if holding {
                self.limit.saturating_sub(self.held_bytes).saturating_add(1)
            } else {
                usize::MAX
            };
            match self
                .decoder
                .push_event(rest.get(..room).unwrap_or(rest), &mut events)
            {
                Ok(read) => {
                    let (taken, left) = rest.split_at(read.min(rest.len()));
                    rest = left;
                    if holding && !self.keeps_held(taken, &mut step) {
                        return step;
                    }
                }
                Err(e) => decoded = Err(e),
            }
            if !holding {
                self.held_bytes = 0;
            }
            self.read_events(events.drain(..), &mut step);
            if decoded.is_err() {
                break;
            }
        }
        self.chunk_read(&mut step);
        if decoded.is_err() {
            self.unreadable(&mut step);
        }
        step
    }

    /// The end of the upstream body: the held tail is checked, then sent or cut. In whole-text
    /// modes a round the upstream never ended is handed back as ended here.
    pub fn finish(&mut self) -> Step {
        let mut step = Step::default();
        if self.phase == Phase::Done || self.abandoned.is_some() {
            return step;
        }
        let mut events = Vec::new();
        let decoded = self.decoder.finish(&mut events);
        self.events(events, &mut step);
        if decoded.is_err() {
            self.unreadable(&mut step);
        }
        self.upstream_done = true;
        self.round_end(&mut step);
        if matches!(self.phase, Phase::Open | Phase::Released) {
            self.release_queue(None, &mut step.out);
            self.phase = Phase::Done;
        }
        step
    }

    /// A chunk's events, read one by one (each scanned as it comes, so a cut or an early end
    /// stops at the event it is in); what they confirmed is sent every [`SEND_EVERY`] queued
    /// pieces and after the last of them. An event whose text a later event of the same chunk
    /// confirms then goes whole, as it came, instead of split at its end and joined to the next:
    /// the caller reads the same text at the same moment (one callback), in fewer rewritten events.
    fn events(&mut self, events: Vec<sse::Event>, step: &mut Step) {
        self.read_events(events.into_iter(), step);
        self.chunk_read(step);
    }

    /// Events of a chunk, one by one; what they confirmed is sent every [`SEND_EVERY`] queued
    /// pieces ([`Self::chunk_read`] sends the rest once the chunk is read).
    fn read_events(&mut self, events: impl Iterator<Item = sse::Event>, step: &mut Step) {
        for event in events {
            // A round ended early reads nothing more, not even the rest of this chunk: what the
            // caller reads must not depend on how the upstream was split.
            if !self.reading() {
                break;
            }
            if self.event(event, step).is_err() {
                // What the chunk's earlier events confirmed still goes before the stream ends.
                self.release_queue(None, &mut step.out);
                self.unreadable(step);
            } else if self.queue.len() >= SEND_EVERY && self.reading() {
                // What a chunk of many events holds at once stays a few pieces: those whose text
                // is confirmed go (none is split before the chunk's end).
                self.send_queued(None, false, &mut step.out);
            }
        }
    }

    /// A chunk's events were all read: what they confirmed goes now.
    fn chunk_read(&mut self, step: &mut Step) {
        if self.reading() {
            self.release_queue(None, &mut step.out);
        }
        // Between chunks a stream keeps room for the pieces it holds and no more: room kept for
        // the most any chunk queued made a stream's memory depend on its history (room for 8
        // pieces, 1,088 bytes in the VM, from the first chunk that queued more than 4). Room for
        // two kept (a paced stream's rest and the event behind it, without growing the queue at
        // every chunk) cost 0.3-0.5 KiB more per stream in `make bench-memory-ab` for no
        // difference in Envoy's CPU: not kept.
        self.queue.shrink_to_fit();
    }

    /// The stream still reads upstream events: not ended, and no round ended early.
    fn reading(&self) -> bool {
        self.phase != Phase::Done && self.abandoned.is_none()
    }

    fn event(&mut self, event: sse::Event, step: &mut Step) -> Result<(), Unreadable> {
        let unit = self.format.read(event)?;
        self.asks_for_tool |= unit.asks_for_tool;
        let ev = unit.ev;
        if self.answer_id.is_none() {
            self.answer_id = answer_id(ev.data());
        }
        let mut fields = Vec::with_capacity(unit.texts.len());
        // Kept between events: most events touch one channel, and allocate nothing for it.
        let mut touched = std::mem::take(&mut self.touched);
        touched.clear();
        for mut text in unit.texts {
            let raw = match text.text.take() {
                Some(read) => read,
                None => match util::at(ev.data(), &text.pointer) {
                    Some(Value::String(s)) => s.clone(),
                    _ => return Err(Unreadable),
                },
            };
            touched.push(text.channel);
            let map = self.place_text(text.channel, text.kind, &raw)?;
            fields.push(Field {
                pointer: text.pointer,
                channel: text.channel,
                raw,
                map,
                changed: false,
            });
        }
        // Rules read a call's arguments as it streams and tool checks read it whole: a call is a
        // unit for either. Without both, a call streams as it comes.
        let units = !self.version.output_rules.is_empty() || self.version.tools.any();
        let calls = if units {
            self.open_calls.extend(unit.calls.iter().copied());
            unit.calls
        } else {
            Vec::new()
        };
        for call in &unit.calls_done {
            self.open_calls.remove(call);
        }
        // The last step that can fail: an event that cannot be read is never queued.
        for &channel in &unit.ends {
            self.channel(channel)?.holdback.end();
            touched.push(channel);
        }
        self.seq += 1;
        let piece = Piece {
            seq: self.seq,
            ev,
            fields,
            calls,
            rest: false,
        };
        let aside = match (self.phase, self.hold) {
            (Phase::Released, _) | (_, Hold::Rules) => false,
            (_, Hold::Everything) => true,
            (_, Hold::WholeText) => unit.lane != Lane::Side,
        };
        if aside {
            self.held.push(piece);
        } else {
            self.queue.push_back(piece);
        }
        if self.version.tools.any() {
            self.await_calls(&unit.calls_done, step);
        }
        touched.sort_unstable();
        touched.dedup();
        let cut = touched.iter().any(|&channel| self.scan(channel, step));
        self.touched = touched;
        if cut {
            return Ok(());
        }
        if unit.terminal {
            self.round_end(step);
        }
        Ok(())
    }

    fn channel(&mut self, channel: usize) -> Result<&mut Channel, Unreadable> {
        if !self.channels.contains_key(&channel) && self.channels.len() >= MAX_CHANNELS {
            return Err(Unreadable);
        }
        let passive = self.hold == Hold::Everything && !self.decides_early;
        Ok(self.channels.entry(channel).or_insert_with(|| Channel {
            holdback: if passive {
                Holdback::passive()
            } else {
                Holdback::default()
            },
            ..Channel::default()
        }))
    }

    /// Adds a field's text to its channel: where its characters are.
    pub(super) fn place_text(
        &mut self,
        channel: usize,
        kind: TextKind,
        raw: &str,
    ) -> Result<FieldMap, Unreadable> {
        let whole = self.hold != Hold::Rules;
        let ch = self.channel(channel)?;
        Ok(match kind {
            TextKind::Answer => {
                if ch.last_call.take().is_some() {
                    ch.push("\n", whole);
                }
                let start = ch.holdback.len();
                ch.push(raw, whole);
                if whole {
                    ch.answer.push_str(raw);
                }
                FieldMap::Plain {
                    start,
                    end: ch.holdback.len(),
                }
            }
            TextKind::Tool { call, json: false } => {
                if ch.last_call.replace(call) != Some(call) {
                    ch.push("\n", whole);
                }
                let start = ch.holdback.len();
                ch.push(raw, whole);
                FieldMap::Plain {
                    start,
                    end: ch.holdback.len(),
                }
            }
            TextKind::Tool { call, json: true } => {
                ch.last_call = Some(call);
                let decoded = ch.readers.entry(call).or_default().read(raw);
                let base = ch.holdback.len();
                ch.push(&decoded.text, whole);
                FieldMap::Json {
                    starts: decoded
                        .starts
                        .iter()
                        .enumerate()
                        .map(|(i, &at)| (base + i, at))
                        .collect(),
                    end: ch.holdback.len(),
                    pending: decoded.pending,
                }
            }
        })
    }
}
