//! The words the vendor formats speak: the [`Format`] trait each vendor's stream implements, and
//! what its reader says of one upstream event ([`Unit`]: its lane, checked texts, ends and calls).

use std::borrow::Cow;

use super::event::{Ev, TextAlone, TextPlace};
use super::framing::Framing;
use crate::api::ToolCall;
use crate::frame::Padding;
use crate::sse;

/// An event that cannot be read: the stream is unreadable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unreadable;

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
    /// How the vendor frames this stream's events, with no event longer than `limit` bytes.
    fn framing(&self, limit: usize) -> Framing {
        Framing::sse(limit)
    }
    /// What fills the opt-in length frame ([`crate::frame`]) once the stream is over: lines every
    /// client of this stream skips.
    fn padding(&self) -> Padding {
        Padding::Comments
    }
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
