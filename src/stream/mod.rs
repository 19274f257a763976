//! A streamed answer, rewritten as it passes: upstream SSE bytes in, the bytes the caller may see
//! out. Pure logic; the turn feeds it body chunks and sends what it returns.
//!
//! Every upstream event becomes one [`Piece`]: the event, and the fields of it that carry checked
//! text (answer text, tool-call arguments). Checked text goes to its channel's [`Holdback`] (a
//! channel is the text of one answer: Chat's `n > 1` choices each have one). Pieces leave in
//! upstream order, each as soon as the text in it is confirmed; a piece whose text is confirmed
//! only in part is cut in two valid events of the vendor's format (the part now, the rest later);
//! the rest joins the next event when that one is the same kind of text event (`Piece::absorb`),
//! so text held at an event's end costs no extra event on the wire.
//! Events without checked text wait for the text before them, so the order never changes in
//! [`Hold::Rules`]. In the whole-text modes the answer's pieces and the round's last events are set
//! aside until the caller of [`Rewriter::release`] or [`Rewriter::cut`] decided.
//!
//! Decisions are taken after every upstream event, never per chunk, so what the caller receives is
//! the same however the upstream body was split.
//!
//! A tool call is a unit: when rules read calls, its events wait until it is complete and all its
//! text is confirmed, then go together; a cut inside it drops all of it.

mod args;
pub mod caller;
mod holdback;
pub(crate) mod template;

use std::borrow::Cow;
use std::cell::OnceCell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::rc::Rc;

use serde_json::Value;

use crate::api::anthropic::stream as anthropic;
use crate::api::chat::stream as chat;
use crate::api::responses::stream as responses;
use crate::api::{Api, Request, ToolCall};
use crate::config::{Check, Stage, Version};
use crate::sse;
use args::ArgsReader;
use holdback::Holdback;

/// The most text channels (Chat choices) a stream may open; more is unreadable.
const MAX_CHANNELS: usize = 128;

/// How a streamed answer is held, from the version's blocking output checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// Only rule checks block: the text streams, holding back per channel only the text that could
    /// still become the start of a match (`holdback`).
    Rules,
    /// Another blocking output check: the round's answer text is held whole until
    /// [`Rewriter::release`] or [`Rewriter::cut`]; reasoning and tool-call events keep streaming
    /// (tool-call arguments held back as in `Rules`). A rule match still cuts at once.
    WholeText,
    /// A check asks for recovery: nothing of the round, reasoning included, is shown until
    /// released. Rules are decided by the caller on [`RoundEnd::rule_text`], so a failed rule can
    /// still be recovered; once the text read so far holds a match, the round ends there (the
    /// rest of the doomed answer is not read: see [`RoundEnd::early`]).
    Everything,
}

impl Hold {
    /// The hold a version's blocking output checks need; `None` when none blocks.
    pub fn for_version(version: &Version) -> Option<Hold> {
        let blocking: Vec<_> = version
            .checks
            .iter()
            .filter(|c| c.blocks_output())
            .collect();
        if blocking.is_empty() {
            // Tool checks alone: the text streams as it comes, tool calls wait for their checks.
            version.tools.any().then_some(Hold::Rules)
        } else if blocking.iter().any(|c| c.recover) {
            Some(Hold::Everything)
        } else if blocking.iter().all(|c| c.kind.is_rule()) {
            Some(Hold::Rules)
        } else {
            Some(Hold::WholeText)
        }
    }
}

/// What one call gave.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Step {
    /// Bytes to send the caller now (possibly none).
    pub out: Vec<u8>,
    /// The stream was cut: `out` ends with the vendor's closing events and every later call
    /// returns nothing.
    pub cut: Option<Cut>,
    /// The round ended (whole-text modes only): decide it, then call `release` or `cut`.
    pub round_end: Option<RoundEnd>,
    /// Tool calls complete in this step that the version's tool checks read: each call's events
    /// wait until [`Rewriter::allow_calls`] or [`Rewriter::deny_calls`], by its key.
    pub calls: Vec<(u64, ToolCall)>,
    /// The held round outgrew `max_body_bytes` and goes on as a rules-only stream: its judged
    /// checks could not decide, and each passes on error ([`Rewriter::feed`]).
    pub unjudged: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cut {
    /// Index of the check that stopped the stream, in its version; `None`: an unreadable stream of
    /// a version with no blocking output check (tool checks alone), which names no check.
    pub check: Option<usize>,
    pub why: CutWhy,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CutWhy {
    /// The check's rule matched the text.
    Matched,
    /// The stream could not be read (not SSE, not UTF-8, not JSON, a line over the limit): the
    /// check is errored. It is the first blocking output check without `on_error: "pass"`, else the
    /// first blocking output check.
    Unreadable,
    /// The caller cut it ([`Rewriter::cut`]).
    Decided,
}

/// A held round, complete: what its checks read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoundEnd {
    /// The answer text: each channel's text deltas concatenated, channels in order.
    pub answer_text: String,
    /// What rule checks read: per channel, the text and tool-call values in stream order, each
    /// tool-call value after a `"\n"`; channels joined by `"\n"`.
    pub rule_text: String,
    pub asks_for_tool: bool,
    /// [`Hold::Everything`]: the round ended before the upstream's answer did, because its text
    /// already holds a match of this check's rule; later upstream bytes are not read.
    pub early: Option<usize>,
}

/// The answer text of a complete streamed answer (as judged checks read it), or `None` when it
/// cannot be read or asked for a tool. Reads a copy after the fact; the stream itself passed as
/// it came.
pub fn answer_of(
    api: Api,
    version: &Rc<Version>,
    request: &Request,
    body: &[u8],
) -> Option<String> {
    let mut rewriter = Rewriter::new(
        api,
        Rc::clone(version),
        request,
        Hold::Everything,
        body.len().max(1),
    );
    // All of the answer is read: no round ends early.
    rewriter.decides_early = false;
    let mut step = rewriter.feed(body);
    if step.cut.is_some() {
        return None;
    }
    if step.round_end.is_none() {
        step = rewriter.finish();
    }
    step.round_end
        .filter(|r| !r.asks_for_tool)
        .map(|r| r.answer_text)
}

/// Within a chunk, what queued pieces confirmed is sent every this many pieces.
const SEND_EVERY: usize = 8;

/// Rewrites one streamed answer.
pub struct Rewriter {
    format: Box<dyn Format>,
    version: Rc<Version>,
    hold: Hold,
    decoder: sse::Decoder,
    channels: BTreeMap<usize, Channel>,
    queue: VecDeque<Piece>,
    held: Vec<Piece>,
    phase: Phase,
    asks_for_tool: bool,
    /// `finish` was called: what is queued goes as it is (a tool call cut mid-escape included).
    upstream_done: bool,
    /// The answer's own id, from the first event that carries it.
    answer_id: Option<String>,
    /// Tool calls started and not yet complete. A tool call is never shown in part: its events
    /// wait until it is complete and all its text confirmed, then go together, or never.
    open_calls: BTreeSet<u64>,
    /// [`Hold::Everything`]: the rules read the round as it streams, and a match ends it early.
    decides_early: bool,
    /// The round ended early on this check's match: the rest of the upstream's answer is not read.
    abandoned: Option<usize>,
    /// Tool calls complete and waiting for the version's tool checks: never sent until allowed.
    awaiting: BTreeSet<u64>,
    /// How many upstream events were read (each piece's `seq`).
    seq: u64,
    /// The policy's `max_body_bytes`: the most of the upstream held whole (a held round, a tool
    /// call waiting to complete or for its checks, and what follows it), as a non-streamed answer
    /// is held whole only up to it.
    limit: usize,
    /// Upstream bytes read since something was held whole ([`Self::holds_whole`]).
    held_bytes: usize,
    /// Scratch: the channels an event touched.
    touched: Vec<usize>,
    /// Tests: whether [`Self::pass_whole`] may take events, and how many it sent as they came.
    #[cfg(test)]
    short_path: bool,
    #[cfg(test)]
    passed_whole: usize,
    /// Tests: events the short path read (sent as they came or not).
    #[cfg(test)]
    read_short: usize,
    /// Tests: text events the short path read behind a held rest, which joined them.
    #[cfg(test)]
    joined_short: usize,
}

/// The answer's id an event carries: Anthropic `message_start`'s `message.id`, a Responses event's
/// `response.id`, a Chat chunk's `id`.
fn answer_id(data: &Value) -> Option<String> {
    ["/message/id", "/response/id", "/id"]
        .iter()
        .find_map(|p| util::str_at(data, p))
        .map(str::to_owned)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Open,
    /// Whole-text modes: waiting for `release` or `cut`.
    Decide,
    /// Released: what is left streams in order.
    Released,
    Done,
}

#[derive(Debug, Default)]
struct Channel {
    holdback: Holdback,
    readers: BTreeMap<u64, ArgsReader>,
    /// The tool call text was last pushed for.
    last_call: Option<u64>,
    /// Whole-text modes: the round's texts, for [`RoundEnd`].
    answer: String,
    rule: String,
}

impl Rewriter {
    /// `limit` (the policy's `max_body_bytes`) bounds one SSE line, one event's data, and what is
    /// held whole (a held round, a tool call and the events after it): past it the stream is cut
    /// as unreadable.
    pub fn new(
        api: Api,
        version: Rc<Version>,
        request: &Request,
        hold: Hold,
        limit: usize,
    ) -> Self {
        let format: Box<dyn Format> = match api {
            Api::AnthropicMessages => Box::new(anthropic::Anthropic::new(request)),
            Api::ChatCompletions => Box::new(chat::Chat::new(request)),
            Api::Responses => Box::new(responses::Responses::new(request)),
        };
        Self {
            format,
            version,
            hold,
            decoder: sse::Decoder::new(limit),
            channels: BTreeMap::new(),
            queue: VecDeque::new(),
            held: Vec::new(),
            phase: Phase::Open,
            asks_for_tool: false,
            upstream_done: false,
            answer_id: None,
            open_calls: BTreeSet::new(),
            decides_early: true,
            abandoned: None,
            awaiting: BTreeSet::new(),
            seq: 0,
            limit,
            held_bytes: 0,
            touched: Vec::new(),
            #[cfg(test)]
            short_path: true,
            #[cfg(test)]
            passed_whole: 0,
            #[cfg(test)]
            read_short: 0,
            #[cfg(test)]
            joined_short: 0,
        }
    }

    /// The upstream's id of the answer, once an event carried it (`msg_…`, `chatcmpl-…`, `resp_…`).
    pub fn answer_id(&self) -> Option<&str> {
        self.answer_id.as_deref()
    }

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

    /// What is held whole lives in the VM: `taken` (upstream bytes read while holding, up to the
    /// end of the event they complete, if any) counts against the limit, and past it the stream
    /// ends as one that cannot be read (fail closed) before the events they complete are read:
    /// `false`, and `step` says so. A round held only for judged checks that all pass on error
    /// goes on unjudged instead. Counted an event at a time, so the event the limit falls in is
    /// the same however the upstream was split (a CRLF's LF, which the next push may read, is not
    /// counted with the event it ends).
    fn keeps_held(&mut self, taken: &[u8], step: &mut Step) -> bool {
        let lf = usize::from(taken.ends_with(b"\r\n"));
        let within = self.held_bytes.saturating_add(taken.len() - lf) <= self.limit;
        self.held_bytes = self.held_bytes.saturating_add(taken.len());
        if within {
            return true;
        }
        if self.goes_on_unjudged() {
            self.stop_holding_whole(step);
            return true;
        }
        // What the chunk's earlier events confirmed goes first, as at a chunk's end.
        self.release_queue(None, &mut step.out);
        self.outgrown(step);
        false
    }

    /// Whether the upstream is being held whole: a round of a whole-text mode not yet decided, or
    /// a tool call open or waiting for its checks (the events after it wait too).
    fn holds_whole(&self) -> bool {
        match self.phase {
            Phase::Open | Phase::Decide if self.hold != Hold::Rules => true,
            Phase::Done => false,
            _ => !self.open_calls.is_empty() || !self.awaiting.is_empty(),
        }
    }

    /// Whether a held round that outgrew the limit goes on as if its judged checks had passed:
    /// it is held only for them (no recovery, no tool call open or waiting) and every one of them
    /// says `on_error: "pass"`, so none can decide and none stops the turn for that (the
    /// non-streamed answer over the limit passes likewise). The rule checks go on reading it.
    fn goes_on_unjudged(&self) -> bool {
        self.hold == Hold::WholeText
            && self.phase == Phase::Open
            && self.open_calls.is_empty()
            && self.awaiting.is_empty()
            && crate::judge::blocking_judged(&self.version, Stage::Output)
                .into_iter()
                .all(|i| self.version.checks.get(i).is_some_and(|c| c.on_error_pass))
    }

    /// The held round goes on as a rules-only stream: what it set aside joins the queue in
    /// upstream order and leaves as its text is confirmed, as any later text does.
    fn stop_holding_whole(&mut self, step: &mut Step) {
        self.hold = Hold::Rules;
        let held = std::mem::take(&mut self.held);
        if !held.is_empty() {
            let mut merged: Vec<Piece> = self.queue.drain(..).chain(held).collect();
            merged.sort_by_key(|p| p.seq);
            self.queue = merged.into();
        }
        for ch in self.channels.values_mut() {
            ch.answer = String::new();
            ch.rule = String::new();
        }
        step.unjudged = true;
    }

    /// The common case on a short path: whole events of text alone (most of a stream) are read
    /// in place and, once their text is confirmed, go out as the bytes they came as, with no
    /// event built, queued or written. What the caller receives is what the general path sends,
    /// byte for byte, in the same step: an event of the general path goes whole when its text is
    /// confirmed within the chunk, and is split only at the chunk's end or a cut. So events whose
    /// text is still held wait in `run` (behind the queue), and go whole once a later event
    /// confirmed them and everything queued before them goes whole; at the chunk's end, a cut, or
    /// an event of another kind they join the queue as the general path would have queued them,
    /// and it takes over. A text event behind a held rest (a split event's unsent text, as a
    /// paced stream leaves one at most chunks' ends) is read here too and takes the rest in at
    /// once, as the general path would at the chunk's end. Returns the bytes not taken.
    fn pass_whole<'c>(&mut self, mut chunk: &'c [u8], step: &mut Step) -> &'c [u8] {
        #[cfg(test)]
        if !self.short_path {
            return chunk;
        }
        let mut run: Vec<Pending<'c>> = Vec::new();
        while self.hold == Hold::Rules
            && self.phase == Phase::Open
            && self.open_calls.is_empty()
            && self.awaiting.is_empty()
            && self.answer_id.is_some()
        {
            let Some((line, named)) = self.decoder.data_line(chunk, self.format.text_name()) else {
                break;
            };
            // Behind a held rest, a text event takes the rest in (`Piece::absorb`): not as it came.
            let behind_rest = run.is_empty() && self.queue.back().is_some_and(|p| p.rest);
            // The format finds where the data ends (no pass over the line to look for it first);
            // a data line of another shape, or not ended by a blank line, is the decoder's.
            let Some((alone, data_len)) = self.format.text_alone(line) else {
                break;
            };
            let Some((data, len)) = self.decoder.data_event(line, data_len) else {
                break;
            };
            self.format.took(&alone.place);
            #[cfg(test)]
            {
                self.read_short += 1;
            }
            let (event, rest) = chunk.split_at_checked(named + len).unwrap_or((chunk, &[]));
            chunk = rest;
            let channel = alone.place.channel;
            let Ok(map) = self.place_text(channel, TextKind::Answer, &alone.text) else {
                // What was read ahead is settled first: the text it confirms goes before the end
                // (forbidden text it finds ends the stream there instead).
                if let Some((found, at)) = self.settle() {
                    self.queue_run(run);
                    self.stop_at(Some(found), at, step);
                    return chunk;
                }
                self.queue_run(run);
                self.release_queue(None, &mut step.out);
                self.unreadable(step);
                return chunk;
            };
            self.seq += 1;
            if run.capacity() == 0 {
                // Room for the chunk's events (~150-200 bytes each): grown once, not per event.
                run.reserve(chunk.len() / 128 + 1);
            }
            run.push(Pending {
                seq: self.seq,
                event,
                data,
                text: alone.text,
                place: alone.place,
                map,
            });
            if !behind_rest && self.reads_ahead(channel) {
                // No match ends in its text (most text): what it confirms is settled once, for
                // the run, when it stops ([`Self::settle_run`]), not an event at a time.
                continue;
            }
            let (found, channel) = match self.settle() {
                Some((found, at)) => (Some(found), at),
                None => (self.find(channel), channel),
            };
            let confirmed = found.is_none()
                && run
                    .iter()
                    .all(|p| p.map.end() <= self.bound(p.place.channel, None));
            if confirmed && self.queue_goes_whole() {
                self.release_queue(None, &mut step.out);
                let as_they_came = run
                    .iter()
                    .enumerate()
                    .all(|(after, p)| self.format.goes_as_it_came(&p.place, after));
                if as_they_came {
                    for p in run.drain(..) {
                        self.pass(&p.place, p.event, step);
                    }
                    continue;
                }
            }
            if found.is_some() {
                self.queue_run(run);
                self.stop_at(found, channel, step);
                return chunk;
            }
            if behind_rest {
                // The rest joins this event now, as the general path would join them at the
                // chunk's end, and the event goes if its text is confirmed (whole, never split
                // before the chunk's end): the events after it need not wait behind the rest.
                self.queue_run(std::mem::take(&mut run));
                self.send_queued(None, false, &mut step.out);
                #[cfg(test)]
                {
                    self.joined_short += 1;
                }
                continue;
            }
            if confirmed && self.queue_goes_whole() {
                // Confirmed, but `write` changes something of it (the queue before it went
                // already): the events go the general way, whole, as it would send them.
                self.queue_run(std::mem::take(&mut run));
                self.release_queue(None, &mut step.out);
            }
        }
        if self.settle_run(&mut run, step) {
            return chunk;
        }
        self.queue_run(run);
        chunk
    }

    /// Reads a channel's new text ahead without settling it ([`Holdback::advance`]): whether no
    /// match ends in it.
    fn reads_ahead(&mut self, channel: usize) -> bool {
        let rules = &self.version.output_rules;
        self.channels
            .get_mut(&channel)
            .is_some_and(|ch| ch.holdback.advance(rules))
    }

    /// Settles every channel read ahead: what its text confirms, as a scan after each event would
    /// have left it. The first forbidden text found, and its channel (none, as reading ahead saw
    /// no match end; a scan is the judge).
    fn settle(&mut self) -> Option<(holdback::Found, usize)> {
        let rules = &self.version.output_rules;
        let mut found = None;
        for (&channel, ch) in &mut self.channels {
            if ch.holdback.unsettled() {
                if let Some(f) = ch.holdback.scan(rules) {
                    found.get_or_insert((f, channel));
                }
            }
        }
        found
    }

    /// The end of a run of events read ahead: their channels settled, the events whose text is
    /// confirmed go as they came (or the general way, whole, when `write` would change one), in
    /// order and up to the first that is not; the rest wait in `run`, as events whose text is
    /// still held do. Every event goes as a scan after each would have sent it by the chunk's
    /// end: confirmed text only grows as text comes. Returns whether the stream was cut.
    fn settle_run(&mut self, run: &mut Vec<Pending<'_>>, step: &mut Step) -> bool {
        if let Some((found, channel)) = self.settle() {
            self.queue_run(std::mem::take(run));
            return self.stop_at(Some(found), channel, step);
        }
        let confirmed = run
            .iter()
            .take_while(|p| p.map.end() <= self.bound(p.place.channel, None))
            .count();
        if confirmed == 0 || !self.queue_goes_whole() {
            return false;
        }
        self.release_queue(None, &mut step.out);
        let as_they_came = run
            .iter()
            .take(confirmed)
            .enumerate()
            .all(|(after, p)| self.format.goes_as_it_came(&p.place, after));
        let rest = run.split_off(confirmed);
        let went = std::mem::replace(run, rest);
        if as_they_came {
            for p in went {
                self.pass(&p.place, p.event, step);
            }
        } else {
            self.queue_run(went);
            self.release_queue(None, &mut step.out);
        }
        false
    }

    /// An event the short path read goes out as it came.
    fn pass(&mut self, place: &TextPlace, event: &[u8], step: &mut Step) {
        self.format.passed(place);
        step.out.extend_from_slice(event);
        #[cfg(test)]
        {
            self.passed_whole += 1;
        }
    }

    /// Events the short path read and did not send join the queue, as the general path queues them.
    fn queue_run(&mut self, run: Vec<Pending<'_>>) {
        for p in run {
            let channel = p.place.channel;
            let field = Field {
                pointer: Cow::Borrowed(p.place.pointer),
                channel,
                raw: p.text.into_owned(),
                map: p.map,
                changed: false,
            };
            self.queue.push_back(Piece {
                seq: p.seq,
                // UTF-8 (`text_alone` read it): nothing is replaced. Most events are ASCII,
                // checked eight bytes a step ([`swar::ascii_str`]).
                ev: p.place.ev(match crate::swar::ascii_str(p.data) {
                    Some(data) => data.to_owned(),
                    None => String::from_utf8_lossy(p.data).into_owned(),
                }),
                fields: vec![field],
                calls: Vec::new(),
                rest: false,
            });
        }
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

    /// Whole-text modes: the round passed; sends what was held, in upstream order.
    pub fn release(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        if matches!(self.phase, Phase::Done | Phase::Released) {
            return out;
        }
        // A tool call still waiting for its checks holds back what came after it upstream: held
        // pieces from there on join the queue (in upstream order), which keeps them until the call
        // is allowed; the held pieces before it go now.
        let waits_from = self
            .queue
            .iter()
            .chain(&self.held)
            .filter(|p| p.calls.iter().any(|c| self.awaiting.contains(c)))
            .map(|p| p.seq)
            .min();
        let mut later = Vec::new();
        for piece in std::mem::take(&mut self.held) {
            if waits_from.is_some_and(|w| piece.seq >= w) {
                later.push(piece);
            } else {
                self.write_whole(piece, &mut out);
            }
        }
        if !later.is_empty() {
            let mut merged: Vec<Piece> = self.queue.drain(..).chain(later).collect();
            merged.sort_by_key(|p| p.seq);
            self.queue = merged.into();
        }
        self.phase = if self.upstream_done || self.abandoned.is_some() {
            Phase::Done
        } else {
            Phase::Released
        };
        self.release_queue(None, &mut out);
        out
    }

    /// The tool checks allowed `calls`: their events, and what waited behind them, go now.
    pub fn allow_calls(&mut self, calls: &[u64]) -> Vec<u8> {
        let mut out = Vec::new();
        for call in calls {
            self.awaiting.remove(call);
        }
        // Not while a held round waits for its decision, nor after a cut (done before the end).
        let cut = self.phase == Phase::Done && !self.upstream_done;
        if self.phase != Phase::Decide && !cut {
            self.release_queue(None, &mut out);
        }
        out
    }

    /// A tool call was denied: the stream ends now, saying `reason` as the answer's last text.
    /// Nothing of the denied call (or of what followed it) is ever sent.
    pub fn deny_calls(&mut self, reason: &str) -> Vec<u8> {
        let mut out = Vec::new();
        if self.phase == Phase::Done && !self.upstream_done {
            return out;
        }
        self.queue.clear();
        self.held.clear();
        self.awaiting.clear();
        self.format.close(Some(reason), &mut out);
        self.phase = Phase::Done;
        out
    }

    /// Whether tool calls wait for their checks.
    pub fn awaits_calls(&self) -> bool {
        !self.awaiting.is_empty()
    }

    /// Calls complete after this event that tool checks read: from now on they wait.
    fn await_calls(&mut self, done: &[u64], step: &mut Step) {
        for &key in done {
            let events: Vec<&Ev> = self
                .held
                .iter()
                .chain(&self.queue)
                .filter(|p| p.calls.contains(&key))
                .map(|p| &p.ev)
                .collect();
            // A tool the vendor runs itself (a server tool) already ran: nothing to await.
            if let Some(call) = self.format.call_of(key, &events) {
                self.awaiting.insert(key);
                step.calls.push((key, call));
            }
        }
    }

    /// Ends the stream now because `check` stopped it. In whole-text modes the caller saw none of
    /// the answer, so it says the version's `blocked_reply` instead.
    pub fn cut(&mut self, check: usize) -> Vec<u8> {
        let mut step = Step::default();
        if self.phase != Phase::Done {
            self.cut_now(Some(check), CutWhy::Decided, None, &mut step);
        }
        step.out
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
    fn place_text(
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

    /// Scans a channel; on certain forbidden text cuts there. Returns whether it cut.
    fn scan(&mut self, channel: usize, step: &mut Step) -> bool {
        let found = self.find(channel);
        self.stop_at(found, channel, step)
    }

    /// Reads a channel's new text: the forbidden text in it, once certain.
    fn find(&mut self, channel: usize) -> Option<holdback::Found> {
        self.channels
            .get_mut(&channel)
            .and_then(|ch| ch.holdback.scan(&self.version.output_rules))
    }

    /// Acts on what [`Self::find`] found in a channel: cuts there, or ends a held round early.
    /// Returns whether it did.
    fn stop_at(&mut self, found: Option<holdback::Found>, channel: usize, step: &mut Step) -> bool {
        if self.hold == Hold::Everything && self.phase != Phase::Released {
            // The caller decides the round (a failed rule may recover): it ends here if doomed.
            if let (Some(found), Phase::Open) = (found, self.phase) {
                self.abandoned = Some(found.check);
                self.end_round(step);
                return true;
            }
            return false;
        }
        match found {
            Some(found) => {
                self.cut_now(
                    Some(found.check),
                    CutWhy::Matched,
                    Some((channel, found.pos)),
                    step,
                );
                true
            }
            None => false,
        }
    }

    /// Sends the queued pieces whose text is confirmed, cutting the first one that is confirmed
    /// only in part. `cut_at`: a channel whose text ends at a position (forbidden text starts there).
    fn release_queue(&mut self, cut_at: Option<(usize, usize)>, out: &mut Vec<u8>) {
        self.send_queued(cut_at, true, out);
    }

    /// [`Self::release_queue`]; with `split` false it stops at the first piece that cannot go
    /// whole instead of sending its confirmed part.
    fn send_queued(&mut self, cut_at: Option<(usize, usize)>, split: bool, out: &mut Vec<u8>) {
        let finishing = self.upstream_done && cut_at.is_none();
        // Calls found complete and confirmed in this pass: the rest of their events go too.
        let mut cleared: Vec<u64> = Vec::new();
        while let Some(mut piece) = self.queue.pop_front() {
            if let Some(next) = self.queue.front_mut() {
                if next.absorb(&mut piece, self.format.as_ref()) {
                    continue;
                }
            }
            if piece.calls.iter().any(|c| self.awaiting.contains(c)) {
                // Never sent before its tool checks allowed it, the upstream's end or not.
                self.queue.push_front(piece);
                return;
            }
            if !finishing && !piece.calls.iter().all(|c| cleared.contains(c)) {
                if !self.call_goes(&piece, cut_at) {
                    self.queue.push_front(piece);
                    return;
                }
                cleared.extend(piece.calls.iter().copied());
            }
            let whole = finishing
                || piece
                    .fields
                    .iter()
                    .all(|f| f.needs() <= self.bound(f.channel, cut_at));
            if whole {
                self.write_whole(piece, out);
                continue;
            }
            if !split {
                self.queue.push_front(piece);
                return;
            }
            // The part's event: a copy of the held one with each field's part as its text.
            let mut now: Option<Ev> = None;
            let mut any = false;
            for field in &mut piece.fields {
                let bound = self.bound(field.channel, cut_at);
                let part = field.split_at(bound);
                any |= !part.is_empty();
                now = Some(
                    now.as_ref()
                        .unwrap_or(&piece.ev)
                        .with_text(&field.pointer, part),
                );
            }
            let mut now = now.unwrap_or_else(|| piece.ev.clone());
            if any {
                self.format.part(&mut now);
                self.format.write(now, out);
                self.format.rest(&mut piece.ev);
                piece.rest = true;
            }
            self.queue.push_front(piece);
            return;
        }
    }

    /// Whether every queued piece goes whole as it stands, now as later: no tool call, all its
    /// text confirmed, and the last not a held rest (which the next text event would take in).
    fn queue_goes_whole(&self) -> bool {
        !self.queue.back().is_some_and(|p| p.rest)
            && self.queue.iter().all(|p| {
                p.calls.is_empty()
                    && p.fields
                        .iter()
                        .all(|f| f.needs() <= self.bound(f.channel, None))
            })
    }

    /// How far a channel's text may go out: where a cut stops it, else what is confirmed.
    fn bound(&self, channel: usize, cut_at: Option<(usize, usize)>) -> usize {
        match cut_at {
            Some((at, pos)) if at == channel => pos,
            _ => self
                .channels
                .get(&channel)
                .map_or(0, |c| c.holdback.confirmed()),
        }
    }

    /// Whether the tool calls `piece` is part of may go: each complete, and every queued event of
    /// them confirmed whole (so none is ever split, and a cut inside one drops all of it).
    fn call_goes(&self, piece: &Piece, cut_at: Option<(usize, usize)>) -> bool {
        if piece.calls.iter().any(|c| self.open_calls.contains(c)) {
            return false;
        }
        let confirmed = |p: &Piece| {
            p.fields
                .iter()
                .all(|f| f.needs() <= self.bound(f.channel, cut_at))
        };
        std::iter::once(piece)
            .chain(&self.queue)
            .filter(|p| p.calls.iter().any(|c| piece.calls.contains(c)))
            .all(confirmed)
    }

    fn write_whole(&mut self, mut piece: Piece, out: &mut Vec<u8>) {
        for field in piece.fields.into_iter().filter(|f| f.changed) {
            set_text(&mut piece.ev, &field.pointer, field.raw);
        }
        self.format.write(piece.ev, out);
    }

    fn round_end(&mut self, step: &mut Step) {
        if self.phase != Phase::Open {
            return;
        }
        let channels: Vec<usize> = self.channels.keys().copied().collect();
        for channel in channels {
            if let Some(ch) = self.channels.get_mut(&channel) {
                ch.holdback.end();
            }
            // A held round's rules are decided by the caller on the whole text.
            if self.hold != Hold::Everything && self.scan(channel, step) {
                return;
            }
        }
        self.release_queue(None, &mut step.out);
        if self.hold == Hold::Rules {
            return;
        }
        self.end_round(step);
    }

    /// Whole-text modes: the round's texts go to the caller to decide.
    fn end_round(&mut self, step: &mut Step) {
        self.phase = Phase::Decide;
        let mut end = RoundEnd {
            asks_for_tool: self.asks_for_tool,
            early: self.abandoned,
            ..RoundEnd::default()
        };
        let mut rules = Vec::new();
        for ch in self.channels.values_mut() {
            end.answer_text.push_str(&std::mem::take(&mut ch.answer));
            rules.push(std::mem::take(&mut ch.rule));
        }
        end.rule_text = rules.join("\n");
        step.round_end = Some(end);
    }

    /// What is held whole outgrew the limit: the check that cannot decide is one that holds it (a
    /// judged check, else one that recovers), the first without `on_error: "pass"` first; held
    /// for a tool call alone, as any unreadable stream.
    fn outgrown(&mut self, step: &mut Step) {
        let holds = self
            .version
            .errored_check(|c| c.blocks_output() && (!c.kind.is_rule() || c.recover));
        match holds {
            Some(check) => self.cut_now(Some(check), CutWhy::Unreadable, None, step),
            None => self.unreadable(step),
        }
    }

    fn unreadable(&mut self, step: &mut Step) {
        if self.phase == Phase::Done {
            return;
        }
        let check = self.version.errored_check(Check::blocks_output);
        self.cut_now(check, CutWhy::Unreadable, None, step);
    }

    fn cut_now(
        &mut self,
        check: Option<usize>,
        why: CutWhy,
        at: Option<(usize, usize)>,
        step: &mut Step,
    ) {
        if at.is_some() {
            self.release_queue(at, &mut step.out);
        }
        self.queue.clear();
        self.held.clear();
        let reply = match (self.hold, self.phase) {
            (Hold::Rules, _) | (_, Phase::Released) => None,
            _ => Some(self.version.blocked_reply.as_str()),
        };
        self.format.close(reply, &mut step.out);
        self.phase = Phase::Done;
        step.cut = Some(Cut { check, why });
    }
}

impl Channel {
    fn push(&mut self, text: &str, whole: bool) {
        self.holdback.push(text);
        if whole {
            self.rule.push_str(text);
        }
    }
}

fn set_text(ev: &mut Ev, pointer: &str, text: String) {
    if ev.splice_text(pointer, &text) {
        return;
    }
    if let Some(slot) = ev.data_mut().and_then(|data| util::at_mut(data, pointer)) {
        *slot = Value::String(text);
    }
}

/// Appends `text` as the JSON string literal serde_json writes for it: most texts
/// ([`crate::swar::written_as_is`]) as they are between quotes, any other through serde_json.
fn push_literal(out: &mut String, text: &str) -> Option<()> {
    if crate::swar::written_as_is(text) {
        out.push('"');
        out.push_str(text);
        out.push('"');
    } else {
        out.push_str(&serde_json::to_string(text).ok()?);
    }
    Some(())
}

/// An event's JSON as it came with a new text written into it ([`Ev::spliced_raw`]): where that
/// text's literal and the event's `id` literal now stand.
struct Spliced {
    raw: String,
    span: (&'static str, std::ops::Range<usize>),
    join_id: Option<std::ops::Range<usize>>,
}

/// An event that cannot be read: the stream is unreadable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unreadable;

/// One event, as read and as written.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Ev {
    pub name: Option<String>,
    /// The upstream's JSON as it came, while nothing about the event changed: it is written as
    /// it is (no tree built, nothing serialized). Any change through [`Ev::data_mut`] drops it.
    raw: Option<String>,
    /// The JSON as a tree; built on first use for an event read from `raw`.
    data: OnceCell<Value>,
    /// Chat, read without its tree: its one choice's index and whether the chunk finishes it
    /// (what `write` remembers of a chunk it passes through).
    pub choice: Option<(u64, bool)>,
    /// Where the text field at this JSON pointer stands in `raw` (bytes of its string literal,
    /// quotes included): a new text for it is written there, and the rest of `raw` kept.
    span: Option<(&'static str, std::ops::Range<usize>)>,
    /// A Chat chunk read plain whose delta is its text alone and that finishes nothing: where its
    /// `id` literal stands in `raw`. Such a chunk is its own bare rest, and joins another like it
    /// with the same choice and id without a tree.
    join_id: Option<std::ops::Range<usize>>,
    /// What the template that read it knows of it (Anthropic, Responses), while `raw` is kept.
    templated: Option<Templated>,
}

/// What a template's read says of a text event (Anthropic, Responses): its vendor writes,
/// renumbers and joins it without building its tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Templated {
    /// The template that read it: events of one template differ only in its slots.
    pub template: u64,
    /// Its content block's (output item's) index upstream.
    pub block: u64,
    /// The number it counts itself by upstream.
    pub sequence: Option<u64>,
}

impl Ev {
    pub(crate) fn new(name: Option<String>, data: Value) -> Self {
        Self {
            name,
            raw: None,
            data: OnceCell::from(data),
            choice: None,
            span: None,
            join_id: None,
            templated: None,
        }
    }

    /// An event read into its tree from `raw`; `as_it_came` (no key twice in any object, see
    /// [`util::parse`]): until something changes it (through [`Ev::data_mut`]) it is written as
    /// it came, not serialized again: key order, spacing and escapes as the vendor wrote them.
    pub(crate) fn parsed(name: Option<String>, raw: String, data: Value, as_it_came: bool) -> Self {
        Self {
            name,
            raw: as_it_came.then_some(raw),
            data: OnceCell::from(data),
            choice: None,
            span: None,
            join_id: None,
            templated: None,
        }
    }

    /// An event read without building its tree: `raw` is JSON the tree reader accepts.
    pub(crate) fn unchanged(
        name: Option<String>,
        raw: String,
        choice: Option<(u64, bool)>,
    ) -> Self {
        Self {
            name,
            raw: Some(raw),
            data: OnceCell::new(),
            choice,
            span: None,
            join_id: None,
            templated: None,
        }
    }

    /// What the template that read it knows of it, while it is written from its JSON as it came.
    pub(crate) fn templated(&self) -> Option<Templated> {
        self.raw.as_ref().and(self.templated)
    }

    /// Says where the string at `pointer` stands in the event's JSON as it came.
    pub(crate) fn text_span(&mut self, pointer: &'static str, span: std::ops::Range<usize>) {
        self.span = Some((pointer, span));
    }

    pub(crate) fn join_id_at(&mut self, id: std::ops::Range<usize>) {
        self.join_id = Some(id);
    }

    /// The `id` literal of a plain Chat chunk of text alone, while it is written from `raw`.
    pub(crate) fn join_id(&self) -> Option<&str> {
        self.raw.as_deref()?.get(self.join_id.clone()?)
    }

    /// Writes `text` as the string at `pointer` straight into the JSON as it came (nothing else
    /// of it changes: key order, spacing, other escapes); `false` when the event has no such
    /// place, and nothing changed.
    fn splice_text(&mut self, pointer: &str, text: &str) -> bool {
        let Some(spliced) = self.spliced_raw(pointer, text) else {
            return false;
        };
        self.raw = Some(spliced.raw);
        self.span = Some(spliced.span);
        self.join_id = spliced.join_id;
        // A tree built from the JSON before holds the old text.
        self.data = OnceCell::new();
        true
    }

    /// A copy of the event with `text` as the string at `pointer`: written straight into a copy
    /// of its JSON as it came where it has such a place ([`Ev::splice_text`]), else set in a copy
    /// of its tree.
    fn with_text(&self, pointer: &str, text: String) -> Ev {
        match self.spliced_raw(pointer, &text) {
            Some(spliced) => Ev {
                name: self.name.clone(),
                raw: Some(spliced.raw),
                data: OnceCell::new(),
                choice: self.choice,
                span: Some(spliced.span),
                join_id: spliced.join_id,
                templated: self.templated,
            },
            None => {
                let mut copy = self.clone();
                set_text(&mut copy, pointer, text);
                copy
            }
        }
    }

    /// The event's JSON as it came with `text` as the string at `pointer` (one copy, nothing
    /// else of it changed); `None` when the event has no such place.
    fn spliced_raw(&self, pointer: &str, text: &str) -> Option<Spliced> {
        let (Some(raw), Some((at, span))) = (self.raw.as_deref(), self.span.as_ref()) else {
            return None;
        };
        if *at != pointer || span.start > span.end {
            return None;
        }
        let (before, after) = (raw.get(..span.start)?, raw.get(span.end..)?);
        let mut spliced = String::with_capacity(raw.len() - span.len() + text.len() + 2);
        spliced.push_str(before);
        push_literal(&mut spliced, text)?;
        let new_end = spliced.len();
        spliced.push_str(after);
        // What stands after the text moved with it.
        let join_id = self.join_id.clone().map(|id| {
            if id.start >= span.end {
                (id.start + new_end - span.end)..(id.end + new_end - span.end)
            } else {
                id
            }
        });
        Some(Spliced {
            raw: spliced,
            span: (*at, span.start..new_end),
            join_id,
        })
    }

    pub(crate) fn data(&self) -> &Value {
        self.data.get_or_init(|| {
            self.raw
                .as_deref()
                .and_then(|raw| serde_json::from_str(raw).ok())
                .unwrap_or(Value::Null)
        })
    }

    /// The tree, to change: the event is no longer written as it came.
    pub(crate) fn data_mut(&mut self) -> Option<&mut Value> {
        self.data();
        self.raw = None;
        self.choice = None;
        self.span = None;
        self.join_id = None;
        self.templated = None;
        self.data.get_mut()
    }

    /// Sets the number field `key` of the event's object to `n` (renumbering what the vendor
    /// numbers, as the caller sees it); an event that holds `n` there already is left as it
    /// came.
    pub(crate) fn set_number(&mut self, key: &str, n: u64) {
        if self.data().get(key).and_then(Value::as_u64) == Some(n) {
            return;
        }
        if let Some(Value::Object(fields)) = self.data_mut() {
            fields.insert(key.to_owned(), Value::from(n));
        }
    }

    /// The upstream's JSON, when the event is unchanged.
    pub(crate) fn raw(&self) -> Option<&str> {
        self.raw.as_deref()
    }
}

/// Which part of a round an event belongs to (what whole-text modes hold).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lane {
    /// The answer text and the events around it (its block, item or chunk).
    Answer,
    /// Reasoning, tool calls, pings, the start of the message: they stream in `WholeText`.
    Side,
    /// The round's ending events, and errors: after the answer.
    End,
}

/// A checked text field of an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TextIn {
    /// JSON pointer to the string field (a constant for most fields: nothing allocated per event).
    pub pointer: Cow<'static, str>,
    pub channel: usize,
    pub kind: TextKind,
    /// The field's string, when the reader read it without building the event's tree.
    pub text: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TextKind {
    Answer,
    /// A tool call's input: JSON arguments, or free text (a custom tool's input, code).
    Tool {
        call: u64,
        json: bool,
    },
}

/// One upstream event, read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Unit {
    pub ev: Ev,
    pub lane: Lane,
    pub texts: Vec<TextIn>,
    /// Channels whose text is complete after this event.
    pub ends: Vec<usize>,
    /// The round's last event.
    pub terminal: bool,
    pub asks_for_tool: bool,
    /// The tool calls this event is part of (its start, its arguments, its end), by a key unique
    /// within the stream.
    pub calls: Vec<u64>,
    /// Tool calls complete after this event.
    pub calls_done: Vec<u64>,
}

impl Unit {
    pub(crate) fn new(ev: Ev, lane: Lane) -> Self {
        Self {
            ev,
            lane,
            texts: Vec::new(),
            ends: Vec::new(),
            terminal: false,
            asks_for_tool: false,
            calls: Vec::new(),
            calls_done: Vec::new(),
        }
    }
}

/// A vendor's stream format.
pub(crate) trait Format {
    /// Reads one upstream event.
    fn read(&mut self, event: sse::Event) -> Result<Unit, Unreadable>;
    /// Writes one event for the caller, renumbering what the vendor numbers in emission order,
    /// and remembers what the caller has seen (for `close`).
    fn write(&mut self, ev: Ev, out: &mut Vec<u8>);
    /// Tests: the reader makes no template, so every event is read from its JSON.
    #[cfg(test)]
    fn without_templates(&mut self) {}
    /// The name (`event:` field) of the events [`Format::text_alone`] reads; `None`: nameless.
    fn text_name(&self) -> Option<&'static str> {
        None
    }
    /// An event's data, at the start of `line` (the bytes after `data: `, then the rest of the
    /// chunk; the event named [`Format::text_name`]), read as text alone when it is an event `write` sends byte for byte as it
    /// came once its text is confirmed (most of a stream): with the data's length, the data UTF-8
    /// without a line end. `None` for any other event, which `read` then reads. Nothing is
    /// counted: an event taken from here is then [`Format::took`], and either sent as it came
    /// ([`Format::passed`]) or queued as [`TextPlace::ev`] makes it.
    fn text_alone<'d>(&self, _line: &'d [u8]) -> Option<(TextAlone<'d>, usize)> {
        None
    }
    /// Whether `write` would send an event [`Format::text_alone`] read byte for byte as it came,
    /// were it sent now, `after` such events ([`Format::passed`] not yet told of them): what was
    /// sent before it may decide that (Anthropic renumbers blocks; Responses numbers every event).
    fn goes_as_it_came(&self, _place: &TextPlace, _after: usize) -> bool {
        true
    }
    /// An event read by [`Format::text_alone`] went out as it came: what `write` would remember.
    fn passed(&mut self, _place: &TextPlace) {}
    /// An event [`Format::text_alone`] read is taken: what `read` would count of it.
    fn took(&mut self, _place: &TextPlace) {}
    /// The first part of a split event (its text fields already cut): what must not be repeated
    /// in the rest, or belongs at the end, is adjusted.
    fn part(&self, _ev: &mut Ev) {}
    /// The rest of a split event, after a first part was written.
    fn rest(&self, _ev: &mut Ev) {}
    /// Whether the text of `rest` (what is left of a split text event) may go first in the text
    /// of `next`, the event after it: both the same kind of text event at the same place, `next`
    /// carrying nothing but its text (no finish, role, usage or log probabilities). `false`
    /// unless the format says so: the rest then goes as an event of its own.
    fn joins(&self, _rest: &Ev, _next: &Ev) -> bool {
        false
    }
    /// Ends the stream for the caller: closes what is open, says `reply` as the answer when
    /// given, and stops the way the vendor stops a filtered answer, with the usage known so far.
    fn close(&mut self, reply: Option<&str>, out: &mut Vec<u8>);
    /// The complete tool call `key` from its events (start to end), as tool checks read it;
    /// `None` for a tool the vendor runs itself.
    fn call_of(&self, key: u64, events: &[&Ev]) -> Option<ToolCall>;
}

/// An event of answer text alone, read in place ([`Format::text_alone`]).
pub(crate) struct TextAlone<'d> {
    pub text: Cow<'d, str>,
    pub place: TextPlace,
}

/// Where an event read in place keeps its text: what its [`Ev`] says when it is queued.
#[derive(Debug, Clone)]
pub(crate) struct TextPlace {
    pub channel: usize,
    /// The event's name (`event:` field), when the vendor names its events.
    pub name: Option<&'static str>,
    /// The choice it belongs to (Chat).
    pub choice: Option<u64>,
    /// Its content block's (Anthropic) or output item's (Responses) index upstream.
    pub block: Option<u64>,
    /// The number the event counts itself by upstream (Responses' `sequence_number`).
    pub sequence: Option<u64>,
    /// The template that read it, numbered by its vendor's reader (Anthropic, Responses).
    pub template: Option<u64>,
    /// JSON pointer to the text, and where its string literal stands in the data (quotes in).
    pub pointer: &'static str,
    pub span: std::ops::Range<usize>,
    /// Where the event's `id` literal stands: it joins another like it ([`Ev::join_id`]; Chat).
    pub join_id: Option<std::ops::Range<usize>>,
}

impl TextPlace {
    /// The event, as `read` reads it, its JSON `data`.
    fn ev(self, data: String) -> Ev {
        let templated = self.templated();
        let mut ev = Ev::unchanged(
            self.name.map(str::to_owned),
            data,
            self.choice.map(|c| (c, false)),
        );
        ev.text_span(self.pointer, self.span);
        if let Some(id) = self.join_id {
            ev.join_id_at(id);
        }
        ev.templated = templated;
        ev
    }

    /// What the template that read the event knows of it.
    fn templated(&self) -> Option<Templated> {
        Some(Templated {
            template: self.template?,
            block: self.block?,
            sequence: self.sequence,
        })
    }
}

/// An event of text alone the short path read in place and holds ([`Rewriter::pass_whole`]).
struct Pending<'c> {
    seq: u64,
    /// Its bytes as they came, and its data among them.
    event: &'c [u8],
    /// UTF-8 ([`Format::text_alone`] read it).
    data: &'c [u8],
    text: Cow<'c, str>,
    place: TextPlace,
    map: FieldMap,
}

/// An event on its way out, and its checked fields.
#[derive(Debug)]
struct Piece {
    /// Its upstream event's place in the stream (a split event's rest keeps it).
    seq: u64,
    ev: Ev,
    fields: Vec<Field>,
    /// The tool calls it is part of, when rules read tool calls: it goes only with all of them.
    calls: Vec<u64>,
    /// What is left of an event whose first part went out (its text was confirmed only in part).
    rest: bool,
}

impl Piece {
    /// Takes `rest`, what is left of the event before this one, into this one: its text goes
    /// first in this event's text, so the caller gets as many events as the upstream sent, not
    /// one more per split. Only for two text events of the same kind and place that differ in
    /// nothing but their text (and their numbering); `false` when they cannot be joined.
    fn absorb(&mut self, rest: &mut Piece, format: &dyn Format) -> bool {
        // Tried for every piece that leaves the queue: most are not a rest.
        if !rest.rest {
            return false;
        }
        let ([r], [n]) = (rest.fields.as_slice(), self.fields.as_slice()) else {
            return false;
        };
        let (FieldMap::Plain { start, end }, FieldMap::Plain { start: next, .. }) =
            (&r.map, &n.map)
        else {
            return false;
        };
        let joinable = r.pointer == n.pointer
            && r.channel == n.channel
            && end == next
            && rest.calls.is_empty()
            && self.calls.is_empty()
            && rest.ev.name == self.ev.name
            && format.joins(&rest.ev, &self.ev);
        if !joinable {
            return false;
        }
        let start = *start;
        let (Some(taken), Some(field)) = (rest.fields.first_mut(), self.fields.first_mut()) else {
            return false;
        };
        let text = std::mem::take(&mut taken.raw);
        field.raw.insert_str(0, &text);
        field.changed = true;
        if let FieldMap::Plain { start: s, .. } = &mut field.map {
            *s = start;
        }
        true
    }
}

#[derive(Debug)]
struct Field {
    pointer: Cow<'static, str>,
    channel: usize,
    /// What is left to send of the field's string.
    raw: String,
    map: FieldMap,
    /// `raw` is no longer the event's string (a part of it went, or a held rest joined it).
    changed: bool,
}

#[derive(Debug)]
enum FieldMap {
    /// Each character of `raw` is one character of checked text, from `start` to `end`.
    Plain { start: usize, end: usize },
    /// `raw` is JSON text: `(position, byte)` where each checked character's JSON starts.
    Json {
        starts: Vec<(usize, usize)>,
        end: usize,
        pending: Option<usize>,
    },
}

impl FieldMap {
    /// The position the channel must be confirmed to for the whole field to go.
    fn end(&self) -> usize {
        match self {
            FieldMap::Plain { end, .. } => *end,
            FieldMap::Json { end, pending, .. } => end + usize::from(pending.is_some()),
        }
    }
}

impl Field {
    /// The position the channel must be confirmed to for the whole field to go.
    fn needs(&self) -> usize {
        self.map.end()
    }

    /// Takes the part of the field before position `bound`.
    fn split_at(&mut self, bound: usize) -> String {
        let byte = match &mut self.map {
            FieldMap::Plain { start, .. } => {
                let n = bound.saturating_sub(*start);
                let byte = self
                    .raw
                    .char_indices()
                    .nth(n)
                    .map_or(self.raw.len(), |(i, _)| i);
                *start += self.raw.get(..byte).unwrap_or_default().chars().count();
                byte
            }
            FieldMap::Json {
                starts, pending, ..
            } => {
                let byte = starts
                    .iter()
                    .find(|(pos, _)| *pos >= bound)
                    .map(|&(_, byte)| byte)
                    .or(*pending)
                    .unwrap_or(self.raw.len());
                starts.retain(|(pos, _)| *pos >= bound);
                for (_, b) in starts.iter_mut() {
                    *b = b.saturating_sub(byte);
                }
                *pending = pending.map(|p| p.saturating_sub(byte));
                byte
            }
        };
        self.changed |= byte > 0;
        let rest = self.raw.get(byte..).unwrap_or_default().to_owned();
        self.raw.truncate(byte);
        std::mem::replace(&mut self.raw, rest)
    }
}

/// Helpers the vendor formats share.
pub(crate) mod util {
    use serde_json::Value;

    use super::{Ev, Unreadable};
    use crate::sse;

    /// An event's JSON as a tree, read as serde_json reads it (a key twice counts with its last
    /// value), and whether the event may go out as it came: only when no object of it repeats a
    /// key (read by the one-pass reader, `api::reader`). One that repeats a key goes out as its
    /// tree, which kept the last, so that no reader of what the caller gets can take text that
    /// was not checked.
    pub(crate) fn parse(event: &sse::Event) -> Result<(Value, bool), Unreadable> {
        if let Some(data) = crate::json::reader::read_value(event.data.as_bytes()) {
            return Ok((data, true));
        }
        serde_json::from_str(&event.data)
            .map(|data| (data, false))
            .map_err(|_| Unreadable)
    }

    /// Writes an event: an unchanged one as it came (key order, spacing and escapes included).
    pub(crate) fn write(ev: &Ev, out: &mut Vec<u8>) {
        if let Some(raw) = ev.raw() {
            sse::encode(out, ev.name.as_deref(), raw);
            return;
        }
        let data = serde_json::to_string(ev.data()).unwrap_or_default();
        sse::encode(out, ev.name.as_deref(), &data);
    }

    pub(crate) fn str_at<'a>(value: &'a Value, pointer: &str) -> Option<&'a str> {
        at(value, pointer).and_then(Value::as_str)
    }

    pub(crate) fn u64_at(value: &Value, pointer: &str) -> Option<u64> {
        at(value, pointer).and_then(Value::as_u64)
    }

    /// `Value::pointer` without its allocation per token (it unescapes every token with
    /// `replace`; the pointers here are written by this crate and have no `~` escapes, and the
    /// rare one that does goes to `Value::pointer`). On the hot path of every event: measured.
    pub(crate) fn at<'a>(value: &'a Value, pointer: &str) -> Option<&'a Value> {
        if pointer.as_bytes().contains(&b'~') {
            return value.pointer(pointer);
        }
        let mut v = value;
        for token in pointer.strip_prefix('/')?.split('/') {
            v = match v {
                Value::Object(map) => map.get(token)?,
                Value::Array(items) => items.get(index(token)?)?,
                _ => return None,
            };
        }
        Some(v)
    }

    /// [`at`], mutable.
    pub(crate) fn at_mut<'a>(value: &'a mut Value, pointer: &str) -> Option<&'a mut Value> {
        if pointer.as_bytes().contains(&b'~') {
            return value.pointer_mut(pointer);
        }
        let mut v = value;
        for token in pointer.strip_prefix('/')?.split('/') {
            v = match v {
                Value::Object(map) => map.get_mut(token)?,
                Value::Array(items) => items.get_mut(index(token)?)?,
                _ => return None,
            };
        }
        Some(v)
    }

    /// An array index token as RFC 6901 reads it: digits, no leading zero.
    fn index(token: &str) -> Option<usize> {
        if token.is_empty() || (token.len() > 1 && token.starts_with('0')) {
            return None;
        }
        token.parse().ok()
    }
}

#[cfg(test)]
mod fixtures;
#[cfg(test)]
mod tests;
