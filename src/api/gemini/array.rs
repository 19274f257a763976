//! Gemini's `:streamGenerateContent` without `alt=sse`: the same chunks as the SSE stream
//! ([`super::stream`]), each an element of one JSON array sent piece by piece (read by
//! [`crate::jsonarray`]). What the caller receives is one valid JSON array however the answer was
//! cut: `[` before the first element, `,\r\n` between elements, `]` at the end, the bytes Google
//! writes between its elements (symfony/ai#1988, kgateway-dev/kgateway#10804); whitespace the
//! upstream put around its separators is not kept.

use crate::stream::event::Ev;

const OPEN: &[u8] = b"[";
const SEPARATOR: &[u8] = b",\r\n";
const CLOSE: &[u8] = b"]";

/// Writes the array's elements and its end, each once and in order.
#[derive(Debug, Default)]
pub(crate) struct ArrayWriter {
    opened: bool,
    ended: bool,
}

impl ArrayWriter {
    /// One chunk as the array's next element: its JSON as it came when unchanged.
    pub(crate) fn element(&mut self, ev: &Ev, out: &mut Vec<u8>) {
        if self.ended {
            return;
        }
        out.extend_from_slice(if self.opened { SEPARATOR } else { OPEN });
        self.opened = true;
        match ev.raw() {
            Some(raw) => out.extend_from_slice(raw.as_bytes()),
            None => out.extend(crate::json::to_vec(ev.data())),
        }
    }

    /// The array's end (its start too, when no element was written): once.
    pub(crate) fn end(&mut self, out: &mut Vec<u8>) {
        if self.ended {
            return;
        }
        if !self.opened {
            out.extend_from_slice(OPEN);
            self.opened = true;
        }
        out.extend_from_slice(CLOSE);
        self.ended = true;
    }
}

/// A whole response as the one element of the array stream (a refused question, a recovered
/// answer).
pub(super) fn whole(response: Vec<u8>) -> Vec<u8> {
    let mut out = OPEN.to_vec();
    out.extend(response);
    out.extend_from_slice(CLOSE);
    out
}

#[cfg(test)]
mod tests;
