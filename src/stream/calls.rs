//! Tool calls as units: a call's events go together once it is complete, its text confirmed and
//! the version's tool checks allowed it, or never (a denied call ends the stream).

use super::event::Ev;
use super::queue::Piece;
use super::{Phase, Rewriter, Step};

impl Rewriter {
    /// The tool checks allowed `calls`: their events, and what waited behind them, go now.
    pub fn allow_calls(&mut self, calls: &[u64]) -> Vec<u8> {
        let mut out = Vec::new();
        for call in calls {
            self.awaiting.remove(call);
        }
        // Not while a held round waits for its decision, nor after a cut (done before the end).
        let cut = self.phase == Phase::Done && !self.upstream_done;
        if self.phase != Phase::Decide && !cut {
            self.release_queue(None, &mut out);
        }
        out
    }

    /// A tool call was denied: the stream ends now, saying `reason` as the answer's last text.
    /// Nothing of the denied call (or of what followed it) is ever sent.
    pub fn deny_calls(&mut self, reason: &str) -> Vec<u8> {
        let mut out = Vec::new();
        if self.phase == Phase::Done && !self.upstream_done {
            return out;
        }
        self.queue.clear();
        self.held.clear();
        self.awaiting.clear();
        self.format.close(Some(reason), &mut out);
        self.phase = Phase::Done;
        out
    }

    /// Whether tool calls wait for their checks.
    pub fn awaits_calls(&self) -> bool {
        !self.awaiting.is_empty()
    }

    /// Calls complete after this event that tool checks read: from now on they wait.
    pub(super) fn await_calls(&mut self, done: &[u64], step: &mut Step) {
        for &key in done {
            let events: Vec<&Ev> = self
                .held
                .iter()
                .chain(&self.queue)
                .filter(|p| p.calls.contains(&key))
                .map(|p| &p.ev)
                .collect();
            // A tool the vendor runs itself (a server tool) already ran: nothing to await.
            if let Some(call) = self.format.call_of(key, &events) {
                self.awaiting.insert(key);
                step.calls.push((key, call));
            }
        }
    }

    /// Whether the tool calls `piece` is part of may go: each complete, and every queued event of
    /// them confirmed whole (so none is ever split, and a cut inside one drops all of it).
    pub(super) fn call_goes(&self, piece: &Piece, cut_at: Option<(usize, usize)>) -> bool {
        if piece.calls.iter().any(|c| self.open_calls.contains(c)) {
            return false;
        }
        let confirmed = |p: &Piece| {
            p.fields
                .iter()
                .all(|f| f.needs() <= self.bound(f.channel, cut_at))
        };
        std::iter::once(piece)
            .chain(&self.queue)
            .filter(|p| p.calls.iter().any(|c| piece.calls.contains(c)))
            .all(confirmed)
    }
}
