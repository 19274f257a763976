//! The short path for the common event: an event of answer text alone, read in place without
//! building it, goes out as the bytes it came as once its text is confirmed, byte for byte what the
//! general path ([`super::route`]) would send, in the same step.

use std::borrow::Cow;

use super::event::TextPlace;
use super::format::TextKind;
use super::holdback;
use super::queue::{Field, FieldMap, Piece};
use super::{Hold, Phase, Rewriter, Step};

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

impl Rewriter {
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
    pub(super) fn pass_whole<'c>(&mut self, mut chunk: &'c [u8], step: &mut Step) -> &'c [u8] {
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
            let Some(sse) = self.decoder.as_sse() else {
                break;
            };
            let Some((line, named)) = sse.data_line(chunk, self.format.text_name()) else {
                break;
            };
            // Behind a held rest, a text event takes the rest in (`Piece::absorb`): not as it came.
            let behind_rest = run.is_empty() && self.queue.back().is_some_and(|p| p.rest);
            // The format finds where the data ends (no pass over the line to look for it first);
            // a data line of another shape, or not ended by a blank line, is the decoder's.
            let Some((alone, data_len)) = self.format.text_alone(line) else {
                break;
            };
            let Some((data, len)) = sse.data_event(line, data_len) else {
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

    /// Reads a channel's new text ahead without settling it
    /// ([`super::holdback::Holdback::advance`]): whether no match ends in it.
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
}
