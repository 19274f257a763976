//! What is held whole: a round of a whole-text mode until the caller decides it, and a tool call
//! (with what follows it) until it is complete and checked, all bounded by `max_body_bytes`. A held
//! round ends here ([`RoundEnd`]) and is released in upstream order; one that outgrows the limit
//! goes on unjudged or is cut as unreadable.

use super::queue::Piece;
use super::{CutWhy, Hold, Phase, Rewriter, RoundEnd, Step};
use crate::config::Stage;

impl Rewriter {
    /// What is held whole lives in the VM: `taken` (upstream bytes read while holding, up to the
    /// end of the event they complete, if any) counts against the limit, and past it the stream
    /// ends as one that cannot be read (fail closed) before the events they complete are read:
    /// `false`, and `step` says so. A round held only for judged checks that all pass on error
    /// goes on unjudged instead. Counted an event at a time, so the event the limit falls in is
    /// the same however the upstream was split (a CRLF's LF, which the next push may read, is not
    /// counted with the event it ends).
    pub(super) fn keeps_held(&mut self, taken: &[u8], step: &mut Step) -> bool {
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
    pub(super) fn holds_whole(&self) -> bool {
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

    pub(super) fn round_end(&mut self, step: &mut Step) {
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
    pub(super) fn end_round(&mut self, step: &mut Step) {
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
}
