//! A vendor's stream format carried in Bedrock's `invoke-with-response-stream` chunks
//! ([`super::chunks`]): the events come out of the event-stream messages before the format reads
//! them, and what the format writes goes back into chunk messages, so the format reads and writes
//! its own events and never knows how they travel. Exceptions and errors in the stream end the
//! round (lane `End`) and go out again as they came.
//!
//! The re-framing is a writer around the format, not a part of it nor of the rewriter: every byte
//! the rewriter sends is one the format wrote (the SSE short path, which sends upstream bytes as
//! they came, runs only on SSE framing), so wrapping the format is the one place that sees all
//! of them, closing events included.

use serde_json::Value;

use super::chunks::{self, Pads};
use super::event::{Ev, TextPlace};
use super::format::{Format, Lane, Unit, Unreadable};
use super::framing::Framing;
use crate::api::ToolCall;
use crate::sse;

pub(crate) struct Chunked {
    inner: Box<dyn Format>,
    pads: Pads,
    /// What the format wrote, before it is framed: kept, so that writing allocates once.
    written: Vec<u8>,
}

impl Chunked {
    pub(crate) fn new(inner: Box<dyn Format>) -> Self {
        Self {
            inner,
            pads: Pads::default(),
            written: Vec::new(),
        }
    }
}

impl Format for Chunked {
    fn framing(&self, limit: usize) -> Framing {
        Framing::event_stream(limit)
    }

    fn read(&mut self, event: sse::Event) -> Result<Unit, Unreadable> {
        match event.event.as_deref() {
            Some(chunks::CHUNK) => {
                let (inner, pad) = chunks::read_chunk(&event.data).map_err(|_| Unreadable)?;
                self.pads.read(&inner.data, pad);
                self.inner.read(inner)
            }
            name if chunks::is_exception(name) => Ok(Unit::new(
                Ev::new(event.event, Value::String(event.data)),
                Lane::End,
            )),
            // An event type `ResponseStream` does not model: botocore would drop it unread.
            _ => Err(Unreadable),
        }
    }

    fn write(&mut self, ev: Ev, out: &mut Vec<u8>) {
        if let Some(name) = ev.name.as_deref().filter(|n| chunks::is_exception(Some(n))) {
            chunks::write_exception(name, ev.data().as_str().unwrap_or_default(), out);
            return;
        }
        self.written.clear();
        self.inner.write(ev, &mut self.written);
        chunks::reframe(&self.written, out, &mut self.pads);
    }

    #[cfg(test)]
    fn without_templates(&mut self) {
        self.inner.without_templates();
    }

    fn goes_as_it_came(&self, place: &TextPlace, after: usize) -> bool {
        self.inner.goes_as_it_came(place, after)
    }

    fn passed(&mut self, place: &TextPlace) {
        self.inner.passed(place);
    }

    fn took(&mut self, place: &TextPlace) {
        self.inner.took(place);
    }

    fn part(&self, ev: &mut Ev) {
        self.inner.part(ev);
    }

    fn rest(&self, ev: &mut Ev) {
        self.inner.rest(ev);
    }

    fn joins(&self, rest: &Ev, next: &Ev) -> bool {
        self.inner.joins(rest, next)
    }

    fn close(&mut self, reply: Option<&str>, out: &mut Vec<u8>) {
        self.written.clear();
        self.inner.close(reply, &mut self.written);
        chunks::reframe(&self.written, out, &mut self.pads);
        self.pads.clear();
    }

    fn call_of(&self, key: u64, events: &[&Ev]) -> Option<ToolCall> {
        self.inner.call_of(key, events)
    }
}
