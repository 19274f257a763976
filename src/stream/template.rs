//! A text event of the last one's shape, read without parsing.
//!
//! Most of a stream is text events that differ only in their text string (and, in some vendors'
//! events, other values that change every event: OpenAI's `obfuscation` string, the Responses
//! API's `sequence_number`). After one such event was read as JSON, the next is compared with it
//! byte for byte outside those values; each string's literal is found (a backslash skips the next
//! byte) and read as JSON, and each number's digits as an integer JSON writes. When all of that
//! holds, the event is the template's JSON with other values in the same places, so the JSON
//! reader would read it the same way: its place is the template's with the new text, its spans
//! moved by the values' new lengths. Anything else (other spacing, another id or index, another
//! kind of event, an empty text, a value JSON refuses) is the vendor reader's, as before.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use super::event::{Ev, TextAlone, TextPlace};
use super::format::{Lane, TextIn, TextKind, Unit};

use crate::{sse, swar};

/// A value of a template's event that may differ from event to event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    /// The text (a string literal, quotes included).
    Text,
    /// Another string literal.
    String,
    /// A number the event counts itself by (an integer of digits alone), read into
    /// [`TextPlace::sequence`].
    Sequence,
}

pub(crate) struct Template {
    /// The event's data as it came: one line, UTF-8.
    data: String,
    /// The values that may differ (bytes), in the order they stand.
    slots: Vec<(Range<usize>, Slot)>,
    /// What a read event's place says besides its spans; its `join_id` (a literal among the
    /// fixed bytes, so the same in every event read) is where it stands in the template.
    place: TextPlace,
}

impl Template {
    /// A template of `data`, a text event's data of one line whose text literal stands at
    /// `place.span` and whose `others` (a string literal or a sequence number each) also differ
    /// from event to event.
    pub(crate) fn new(
        data: String,
        place: TextPlace,
        others: impl IntoIterator<Item = (Range<usize>, Slot)>,
    ) -> Self {
        let mut slots: Vec<_> = std::iter::once((place.span.clone(), Slot::Text))
            .chain(others)
            .collect();
        slots.sort_by_key(|(s, _)| s.start);
        Self { data, slots, place }
    }

    /// A template of a named vendor's text event (Anthropic, Responses): `event` named `name`,
    /// its data one line, its text (at `pointer`, its literal at `span`) in channel 0, of block
    /// or item `block`; the reader's `number` for it; `None` for an event of another name or of
    /// several lines.
    fn named(
        event: &sse::Event,
        (name, pointer): (&'static str, &'static str),
        (span, block): (Range<usize>, u64),
        others: Vec<(Range<usize>, Slot)>,
        number: u64,
    ) -> Option<Self> {
        if event.event.as_deref() != Some(name) || event.data.contains('\n') {
            return None;
        }
        let place = TextPlace {
            channel: 0,
            name: Some(name),
            choice: None,
            block: Some(block),
            sequence: None,
            template: Some(number),
            pointer,
            span,
            join_id: None,
        };
        Some(Self::new(event.data.clone(), place, others))
    }

    /// An event's data at the start of `data` (what follows it is not read), read as text alone
    /// when it has the template's shape; with its length. The data need not be UTF-8: every
    /// byte outside the literals is compared with the template's (UTF-8, one line) and each
    /// literal is read as a JSON string (no raw control character) and UTF-8, so data read here
    /// is UTF-8 and holds no line end.
    pub(crate) fn read<'d>(&self, data: &'d [u8]) -> Option<(TextAlone<'d>, usize)> {
        // Template offset `from` → data offset `at`, slot by slot.
        let (mut from, mut at) = (0usize, 0usize);
        let mut found = None;
        let mut sequence = None;
        let mut shift_at_id = 0isize;
        let id_start = self.place.join_id.as_ref().map_or(0, |id| id.start);
        for (slot, kind) in &self.slots {
            let fixed = self.data.as_bytes().get(from..slot.start)?;
            if !swar::eq(data.get(at..at.checked_add(fixed.len())?)?, fixed) {
                return None;
            }
            at += fixed.len();
            let end = match kind {
                Slot::Text | Slot::String => {
                    let end = literal_end(data, at)?;
                    let text = literal_text(data.get(at..end)?)?;
                    if *kind == Slot::Text {
                        found = Some((at..end, text));
                    }
                    end
                }
                Slot::Sequence => {
                    let (n, end) = integer(data, at)?;
                    sequence = Some(n);
                    end
                }
            };
            if slot.end <= id_start {
                shift_at_id +=
                    isize::try_from(end - at).ok()? - isize::try_from(slot.len()).ok()?;
            }
            from = slot.end;
            at = end;
        }
        let tail = self.data.as_bytes().get(from..)?;
        let end = at.checked_add(tail.len())?;
        if !swar::eq(data.get(at..end)?, tail) {
            return None;
        }
        let (span, text) = found.filter(|(_, text)| !text.is_empty())?;
        let join_id = match &self.place.join_id {
            Some(id) => Some(
                id.start.checked_add_signed(shift_at_id)?
                    ..id.end.checked_add_signed(shift_at_id)?,
            ),
            None => None,
        };
        let place = TextPlace {
            span,
            join_id,
            sequence,
            ..self.place.clone()
        };
        Some((TextAlone { text, place }, end))
    }
}

/// A named vendor's templates (Anthropic, Responses): the current one, the others numbered in
/// the order they were made.
#[derive(Default)]
pub(crate) struct Templates {
    current: Option<Template>,
    made: u64,
    /// Tests: none is made ([`super::Format::without_templates`]).
    #[cfg(test)]
    pub(crate) off: bool,
}

impl Templates {
    /// Makes the template of `event` ([`Template::named`]) the current one: its number, `None`
    /// when `event` makes none.
    pub(crate) fn make(
        &mut self,
        event: &sse::Event,
        names: (&'static str, &'static str),
        at: (Range<usize>, u64),
        others: Vec<(Range<usize>, Slot)>,
    ) -> Option<u64> {
        #[cfg(test)]
        if self.off {
            return None;
        }
        let number = self.made;
        self.current = Some(Template::named(event, names, at, others, number)?);
        self.made += 1;
        Some(number)
    }

    /// A text event of the current template's shape (named as its events are), read without its
    /// tree: the unit the vendor's reader makes of it from its tree (its lane and the tool calls
    /// of its block or item from `lanes` and `calls`), the event its JSON as it came. The event
    /// back for any other.
    pub(crate) fn read_event(
        &self,
        event: sse::Event,
        lanes: &BTreeMap<u64, Lane>,
        calls: &BTreeSet<u64>,
    ) -> Result<Unit, sse::Event> {
        let read = match &self.current {
            Some(template) if event.event.as_deref() == template.place.name => template
                .read(event.data.as_bytes())
                .filter(|(_, len)| *len == event.data.len())
                .map(|(alone, _)| (alone.text.into_owned(), alone.place)),
            _ => None,
        };
        let Some((text, place)) = read.filter(|(_, place)| place.block.is_some()) else {
            return Err(event);
        };
        let block = place.block.unwrap_or_default();
        let mut ev = Ev::unchanged(event.event, event.data, None);
        ev.text_span(place.pointer, place.span.clone());
        ev.templated = place.templated();
        let mut unit = Unit::new(ev, lanes.get(&block).copied().unwrap_or(Lane::Side));
        unit.texts.push(TextIn {
            pointer: place.pointer.into(),
            channel: place.channel,
            kind: TextKind::Answer,
            text: Some(text),
        });
        unit.calls.extend(calls.get(&block));
        Ok(unit)
    }

    /// [`Template::read`] of the current template for an event whose block or item is not a
    /// tool call's (`calls`): a call's events go as a unit, never on the short path.
    pub(crate) fn read_outside_calls<'d>(
        &self,
        line: &'d [u8],
        calls: &BTreeSet<u64>,
    ) -> Option<(TextAlone<'d>, usize)> {
        let (alone, len) = self.current.as_ref()?.read(line)?;
        (!calls.contains(&alone.place.block?)).then_some((alone, len))
    }
}

/// Whether the caller sees the block or item `place` belongs to under its upstream index
/// (`indexes`: upstream index → the caller's), so that `write` renumbers nothing of it.
pub(crate) fn keeps_index(place: &TextPlace, indexes: &BTreeMap<u64, u64>) -> bool {
    place
        .block
        .is_some_and(|block| indexes.get(&block) == Some(&block))
}

/// The text of a whole JSON string literal (quotes included), or `None` where JSON refuses it. A
/// literal whose text JSON writes as it is ([`crate::swar::written_as_is`]) is that text (most are: a few
/// words); any other is read by serde_json.
pub(crate) fn literal_text(literal: &[u8]) -> Option<Cow<'_, str>> {
    // Most are ASCII, checked a stride at a time (core's check walks a short text a byte at a time).
    let literal = match crate::swar::ascii_str(literal) {
        Some(ascii) => ascii,
        None => std::str::from_utf8(literal).ok()?,
    };
    let inner = literal.get(1..literal.len().checked_sub(1)?)?;
    if crate::swar::written_as_is(inner) {
        return Some(Cow::Borrowed(inner));
    }
    serde_json::from_str(literal).ok()
}

/// Where the string literal starting at byte `at` of `data` ends (just past its closing quote),
/// read as a JSON tokenizer reads it (a backslash escapes the next byte); whether what lies
/// between is a valid string is serde_json's to say.
fn literal_end(bytes: &[u8], at: usize) -> Option<usize> {
    if bytes.get(at) != Some(&b'"') {
        return None;
    }
    let mut i = at + 1;
    loop {
        match bytes.get(i)? {
            b'"' => return Some(i + 1),
            b'\\' => i += 2,
            _ => i += 1,
        }
    }
}

/// The non-negative integer JSON writes at byte `at` of `bytes` (digits, no leading zero but a
/// lone `0`), as a `u64`, and where it ends; `None` for anything else there (a sign, a leading
/// zero, more digits than a `u64` holds). What follows it is the template's to compare.
fn integer(bytes: &[u8], at: usize) -> Option<(u64, usize)> {
    let digits = bytes
        .get(at..)?
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    let text = bytes.get(at..at.checked_add(digits)?)?;
    if text.is_empty() || (text.len() > 1 && text.first() == Some(&b'0')) {
        return None;
    }
    let n = std::str::from_utf8(text).ok()?.parse().ok()?;
    Some((n, at + digits))
}

/// Where `part`, a slice borrowed from `whole`, stands in it (bytes).
pub(crate) fn span_in(whole: &str, part: &str) -> Option<Range<usize>> {
    let start = (part.as_ptr() as usize).checked_sub(whole.as_ptr() as usize)?;
    let range = start..start.checked_add(part.len())?;
    (whole.get(range.clone())? == part).then_some(range)
}
