//! A text event of the last one's shape, read without parsing.
//!
//! Most of a stream is text events that differ only in their text string (and, in some
//! vendors' events, another string that changes every event, such as OpenAI's `obfuscation`).
//! After one such event was read as JSON, the next is compared with it byte for byte outside
//! those strings, and each string's literal is found (a backslash skips the next byte) and read
//! as JSON. When all of that holds, the event is the template's JSON with other strings in the
//! same places, so the JSON reader would read it the same way: its place is the template's with
//! the new text, its spans moved by the strings' new lengths. Anything else (other spacing,
//! another id or index, another kind of event, an empty text, a string JSON refuses) is the
//! vendor reader's, as before.

use std::borrow::Cow;
use std::ops::Range;

use super::{TextAlone, TextPlace};
use crate::swar;

pub(super) struct Template {
    /// The event's data as it came: one line, UTF-8.
    data: String,
    /// The string literals that may differ (bytes, quotes included), in the order they stand.
    slots: Vec<Range<usize>>,
    /// Which of `slots` is the text.
    text: usize,
    /// What a read event's place says besides its spans; its `join_id` (a literal among the
    /// fixed bytes, so the same in every event read) is where it stands in the template.
    place: TextPlace,
}

impl Template {
    /// A template of `data`, a text event's data of one line whose text literal stands at
    /// `place.span` and whose `other` literal (if any) also differs from event to event.
    pub(super) fn new(data: String, place: TextPlace, other: Option<Range<usize>>) -> Self {
        let mut slots: Vec<_> = std::iter::once(place.span.clone()).chain(other).collect();
        slots.sort_by_key(|s| s.start);
        let text = slots.iter().position(|s| *s == place.span).unwrap_or(0);
        Self {
            data,
            slots,
            text,
            place,
        }
    }

    /// An event's data at the start of `data` (what follows it is not read), read as text alone
    /// when it has the template's shape; with its length. The data need not be UTF-8: every
    /// byte outside the literals is compared with the template's (UTF-8, one line) and each
    /// literal is read as a JSON string (no raw control character) and UTF-8, so data read here
    /// is UTF-8 and holds no line end.
    pub(super) fn read<'d>(&self, data: &'d [u8]) -> Option<(TextAlone<'d>, usize)> {
        // Template offset `from` → data offset `at`, slot by slot.
        let (mut from, mut at) = (0usize, 0usize);
        let mut found = None;
        let mut shift_at_id = 0isize;
        let id_start = self.place.join_id.as_ref().map_or(0, |id| id.start);
        for (i, slot) in self.slots.iter().enumerate() {
            let fixed = self.data.as_bytes().get(from..slot.start)?;
            if !swar::eq(data.get(at..at.checked_add(fixed.len())?)?, fixed) {
                return None;
            }
            at += fixed.len();
            let end = literal_end(data, at)?;
            let text = literal_text(data.get(at..end)?)?;
            if slot.end <= id_start {
                shift_at_id +=
                    isize::try_from(end - at).ok()? - isize::try_from(slot.len()).ok()?;
            }
            if i == self.text {
                found = Some((at..end, text));
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
            ..self.place.clone()
        };
        Some((TextAlone { text, place }, end))
    }
}

/// The text of a whole JSON string literal (quotes included), or `None` where JSON refuses it. A
/// literal without an escape or a control character is its text as written (most are: a few
/// words); any other is read by serde_json.
pub(super) fn literal_text(literal: &[u8]) -> Option<Cow<'_, str>> {
    let literal = std::str::from_utf8(literal).ok()?;
    let inner = literal.get(1..literal.len().checked_sub(1)?)?;
    if inner.bytes().all(|b| b != b'\\' && b >= 0x20) {
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

/// Where `part`, a slice borrowed from `whole`, stands in it (bytes).
pub(super) fn span_in(whole: &str, part: &str) -> Option<Range<usize>> {
    let start = (part.as_ptr() as usize).checked_sub(whole.as_ptr() as usize)?;
    let range = start..start.checked_add(part.len())?;
    (whole.get(range.clone())? == part).then_some(range)
}
