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
use super::framing::{self, Framing};
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
            name if framing::is_exception(name) => Ok(Unit::new(
                Ev::new(event.event, Value::String(event.data)),
                Lane::End,
            )),
            // An event type `ResponseStream` does not model: botocore would drop it unread.
            _ => Err(Unreadable),
        }
    }

    fn write(&mut self, ev: Ev, out: &mut Vec<u8>) {
        if let Some(name) = ev
            .name
            .as_deref()
            .filter(|n| framing::is_exception(Some(n)))
        {
            framing::write_exception(name, ev.data().as_str().unwrap_or_default(), out);
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

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use super::super::fixtures::*;
    use super::super::{Cut, Hold, Rewriter};
    use crate::api::{Api, Platform, Request};
    use crate::config::Policy;
    use crate::{base64, eventstream, sse};

    fn request(platform: Platform) -> Request {
        Request {
            stream: true,
            model: Some("m".into()),
            platform,
            ..Request::default()
        }
    }

    /// Each SSE event of `stream`, and the same events as Bedrock's chunk messages.
    fn both(stream: &str) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        let mut decoder = sse::Decoder::new(usize::MAX);
        let mut events = Vec::new();
        decoder.push(stream.as_bytes(), &mut events).unwrap();
        decoder.finish(&mut events).unwrap();
        events
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let mut plain = Vec::new();
                sse::encode(&mut plain, e.event.as_deref(), &e.data);
                let mut bytes = String::new();
                base64::encode(e.data.as_bytes(), &mut bytes);
                let pad = "abcdefghijklmnopqrstuvwxyz".get(..=i % 26).unwrap();
                let payload = format!(r#"{{"bytes":"{bytes}","p":"{pad}"}}"#);
                let mut chunk = Vec::new();
                eventstream::encode_event(&mut chunk, "chunk", payload.as_bytes()).unwrap();
                (plain, chunk)
            })
            .unzip()
    }

    fn run(platform: Platform, chunks: &[Vec<u8>]) -> (Vec<u8>, Option<Cut>) {
        let version = Policy::from_json(POLICY.as_bytes())
            .unwrap()
            .select(None, None, None)
            .unwrap();
        let mut rw = Rewriter::new(
            Api::AnthropicMessages,
            Rc::clone(&version),
            &request(platform),
            Hold::Rules,
            1 << 20,
        );
        let (mut out, mut cut) = (Vec::new(), None);
        for chunk in chunks {
            let step = rw.feed(chunk);
            out.extend(step.out);
            cut = cut.or(step.cut);
        }
        let step = rw.finish();
        out.extend(step.out);
        (out, cut.or(step.cut))
    }

    /// The events' data a caller reads: from SSE, or from whole chunk messages (the stream must
    /// end on one).
    fn read_sse(bytes: &[u8]) -> Vec<String> {
        let mut decoder = sse::Decoder::new(usize::MAX);
        let mut events = Vec::new();
        decoder.push(bytes, &mut events).unwrap();
        decoder.finish(&mut events).unwrap();
        events.into_iter().map(|e| e.data).collect()
    }

    fn read_chunks(bytes: &[u8]) -> Vec<String> {
        let mut decoder = eventstream::Decoder::new(usize::MAX);
        let mut messages = Vec::new();
        decoder.push(bytes, &mut messages).unwrap();
        decoder.finish().unwrap();
        messages
            .into_iter()
            .map(|m| {
                assert_eq!(m.event_type(), Some("chunk"));
                let payload = String::from_utf8(m.payload).unwrap();
                super::super::chunks::read_chunk(&payload).unwrap().0.data
            })
            .collect()
    }

    #[test]
    fn a_stream_in_chunks_is_read_cut_and_written_as_the_same_stream_in_sse() {
        let mut cuts = 0;
        for stream in [
            ANTHROPIC_IBAN_ACROSS_EVENTS,
            ANTHROPIC_WORD_BESIDE_TOOL,
            ANTHROPIC_IBAN_IN_TOOL,
            ANTHROPIC_CLEAN,
        ] {
            let (plain, chunks) = both(stream);
            // Event by event, and all at once: the same upstream events, split the same way.
            for whole in [false, true] {
                let (plain, chunks) = if whole {
                    (vec![plain.concat()], vec![chunks.concat()])
                } else {
                    (plain.clone(), chunks.clone())
                };
                let (sse_out, sse_cut) = run(Platform::Direct, &plain);
                let (chunk_out, chunk_cut) = run(Platform::Bedrock, &chunks);
                assert_eq!(chunk_cut, sse_cut, "whole {whole}");
                assert_eq!(read_chunks(&chunk_out), read_sse(&sse_out), "whole {whole}");
                cuts += usize::from(sse_cut.is_some());
            }
        }
        assert!(cuts >= 4, "the streams with a match are cut ({cuts})");
    }
}
