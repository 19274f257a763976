//! Cuts: forbidden text found in a channel, an unreadable stream, or the caller's decision ends
//! the stream there, with what was confirmed before it sent and the vendor's closing events after.
//! In [`Hold::Everything`] a match instead ends the held round early.

use super::holdback;
use super::{Cut, CutWhy, Hold, Phase, Rewriter, Step};
use crate::config::Check;

impl Rewriter {
    /// Ends the stream now because `check` stopped it. In whole-text modes the caller saw none of
    /// the answer, so it says the version's `blocked_reply` instead.
    pub fn cut(&mut self, check: usize) -> Vec<u8> {
        let mut step = Step::default();
        if self.phase != Phase::Done {
            self.cut_now(Some(check), CutWhy::Decided, None, &mut step);
        }
        step.out
    }

    /// Scans a channel; on certain forbidden text cuts there. Returns whether it cut.
    pub(super) fn scan(&mut self, channel: usize, step: &mut Step) -> bool {
        let found = self.find(channel);
        self.stop_at(found, channel, step)
    }

    /// Reads a channel's new text: the forbidden text in it, once certain.
    pub(super) fn find(&mut self, channel: usize) -> Option<holdback::Found> {
        self.channels
            .get_mut(&channel)
            .and_then(|ch| ch.holdback.scan(&self.version.output_rules))
    }

    /// Acts on what [`Self::find`] found in a channel: cuts there, or ends a held round early.
    /// Returns whether it did.
    pub(super) fn stop_at(
        &mut self,
        found: Option<holdback::Found>,
        channel: usize,
        step: &mut Step,
    ) -> bool {
        if self.hold == Hold::Everything && self.phase != Phase::Released {
            // The caller decides the round (a failed rule may recover): it ends here if doomed.
            if let (Some(found), Phase::Open) = (found, self.phase) {
                self.abandoned = Some(found.check);
                self.end_round(step);
                return true;
            }
            return false;
        }
        match found {
            Some(found) => {
                self.cut_now(
                    Some(found.check),
                    CutWhy::Matched,
                    Some((channel, found.pos)),
                    step,
                );
                true
            }
            None => false,
        }
    }

    pub(super) fn unreadable(&mut self, step: &mut Step) {
        if self.phase == Phase::Done {
            return;
        }
        let check = self.version.errored_check(Check::blocks_output);
        self.cut_now(check, CutWhy::Unreadable, None, step);
    }

    pub(super) fn cut_now(
        &mut self,
        check: Option<usize>,
        why: CutWhy,
        at: Option<(usize, usize)>,
        step: &mut Step,
    ) {
        if at.is_some() {
            self.release_queue(at, &mut step.out);
        }
        self.queue.clear();
        self.held.clear();
        let reply = match (self.hold, self.phase) {
            (Hold::Rules, _) | (_, Phase::Released) => None,
            _ => Some(self.version.blocked_reply.as_str()),
        };
        self.format.close(reply, &mut step.out);
        self.phase = Phase::Done;
        step.cut = Some(Cut { check, why });
    }
}
