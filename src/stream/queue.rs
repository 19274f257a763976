//! Pieces on their way out: each queued event with its checked fields, sent whole once its text is
//! confirmed, or cut in two valid events where only a part is; a held rest joins the next text
//! event of the same kind ([`Piece::absorb`]).

use std::borrow::Cow;

use super::event::{set_text, Ev};
use super::format::Format;
use super::Rewriter;

/// An event on its way out, and its checked fields.
#[derive(Debug)]
pub(super) struct Piece {
    /// Its upstream event's place in the stream (a split event's rest keeps it).
    pub(super) seq: u64,
    pub(super) ev: Ev,
    pub(super) fields: Vec<Field>,
    /// The tool calls it is part of, when rules read tool calls: it goes only with all of them.
    pub(super) calls: Vec<u64>,
    /// What is left of an event whose first part went out (its text was confirmed only in part).
    pub(super) rest: bool,
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
pub(super) struct Field {
    pub(super) pointer: Cow<'static, str>,
    pub(super) channel: usize,
    /// What is left to send of the field's string.
    pub(super) raw: String,
    pub(super) map: FieldMap,
    /// `raw` is no longer the event's string (a part of it went, or a held rest joined it).
    pub(super) changed: bool,
}

#[derive(Debug)]
pub(super) enum FieldMap {
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
    pub(super) fn end(&self) -> usize {
        match self {
            FieldMap::Plain { end, .. } => *end,
            FieldMap::Json { end, pending, .. } => end + usize::from(pending.is_some()),
        }
    }
}

impl Field {
    /// The position the channel must be confirmed to for the whole field to go.
    pub(super) fn needs(&self) -> usize {
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

impl Rewriter {
    /// Sends the queued pieces whose text is confirmed, cutting the first one that is confirmed
    /// only in part. `cut_at`: a channel whose text ends at a position (forbidden text starts there).
    pub(super) fn release_queue(&mut self, cut_at: Option<(usize, usize)>, out: &mut Vec<u8>) {
        self.send_queued(cut_at, true, out);
    }

    /// [`Self::release_queue`]; with `split` false it stops at the first piece that cannot go
    /// whole instead of sending its confirmed part.
    pub(super) fn send_queued(
        &mut self,
        cut_at: Option<(usize, usize)>,
        split: bool,
        out: &mut Vec<u8>,
    ) {
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
    pub(super) fn queue_goes_whole(&self) -> bool {
        !self.queue.back().is_some_and(|p| p.rest)
            && self.queue.iter().all(|p| {
                p.calls.is_empty()
                    && p.fields
                        .iter()
                        .all(|f| f.needs() <= self.bound(f.channel, None))
            })
    }

    /// How far a channel's text may go out: where a cut stops it, else what is confirmed.
    pub(super) fn bound(&self, channel: usize, cut_at: Option<(usize, usize)>) -> usize {
        match cut_at {
            Some((at, pos)) if at == channel => pos,
            _ => self
                .channels
                .get(&channel)
                .map_or(0, |c| c.holdback.confirmed()),
        }
    }

    pub(super) fn write_whole(&mut self, mut piece: Piece, out: &mut Vec<u8>) {
        for field in piece.fields.into_iter().filter(|f| f.changed) {
            set_text(&mut piece.ev, &field.pointer, field.raw);
        }
        self.format.write(piece.ev, out);
    }
}
