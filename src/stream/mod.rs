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
//!
//! This file holds the rewriter's state and what it answers; its work is in rooms of its own:
//! `route` reads the upstream and routes each event, `short` is the short path for events of text
//! alone, `queue` sends pieces as their text is confirmed, `held` holds rounds and tool calls
//! whole, `calls` lets complete tool calls go, `cut` ends the stream. `event` and `format` are the
//! words the vendor formats speak (`util` their shared helpers, `pointer` the JSON pointers under
//! both); they name nothing above them, so a vendor's reader can import them without a circle.
//! `holdback` scans a channel's text and `args` reads tool-call arguments.

mod args;
pub mod caller;
mod holdback;
pub(crate) mod template;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::rc::Rc;

use crate::api::anthropic::stream as anthropic;
use crate::api::chat::stream as chat;
use crate::api::complete::stream as complete;
use crate::api::completions::stream as completions;
use crate::api::converse::stream as converse;
use crate::api::gemini::stream as gemini;
use crate::api::responses::stream as responses;
use crate::api::{Api, Request, ToolCall};
use crate::config::Version;
use args::ArgsReader;
use format::Format;
use holdback::Holdback;
use queue::Piece;

mod calls;
mod chunked;
pub(crate) mod chunks;
mod cut;
pub(crate) mod event;
pub(crate) mod format;
pub(crate) mod framing;
mod held;
mod pointer;
mod queue;
mod route;
mod short;
mod unreadable;
pub(crate) mod util;

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

/// Rewrites one streamed answer.
pub struct Rewriter {
    format: Box<dyn Format>,
    version: Rc<Version>,
    hold: Hold,
    decoder: framing::Framing,
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
            Api::Completions => Box::new(completions::Completions::new(request)),
            Api::Gemini => Box::new(gemini::Gemini::new(request)),
            // Their answers never stream: any stream is unreadable.
            Api::AnthropicComplete => Box::new(complete::Complete::new(request)),
            Api::Converse => Box::new(converse::Converse::new()),
            Api::Embeddings => Box::new(unreadable::NoStream),
            Api::MessageBatches => Box::new(unreadable::NoStream),
        };
        // Bedrock's `invoke-with-response-stream`: the same events, each in a chunk message.
        let format: Box<dyn Format> = if crate::api::in_bedrock_chunks(api, request) {
            Box::new(chunked::Chunked::new(format))
        } else {
            format
        };
        let decoder = format.framing(limit);
        Self {
            format,
            version,
            hold,
            decoder,
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

    /// What pads this stream's length frame: its framing's choice, else its format's.
    pub fn padding(&self) -> crate::frame::Padding {
        self.decoder
            .padding()
            .unwrap_or_else(|| self.format.padding())
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

#[cfg(test)]
mod fixtures;
#[cfg(test)]
mod tests;
