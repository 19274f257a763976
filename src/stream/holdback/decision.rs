//! What the threads found, decided: starts the automaton could not judge are decided by a search
//! once the longest match fits after them, the earliest match (and there the earliest check) is
//! recorded, and the text no live start needs any more is dropped from the held window.

use super::{Found, Holdback, Thread};
use crate::scan::RuleSet;

impl Holdback {
    /// Starts that only a search can decide, decided once the longest match after them was read.
    pub(super) fn search_undecided(&mut self, rules: &RuleSet) {
        let (folded, ended, longest) = (self.folded, self.ended, rules.longest());
        let ready =
            |t: &Thread| t.state.is_none() && (ended || folded.saturating_sub(t.folded) > longest);
        if !self.threads.iter().any(ready) {
            return;
        }
        // The search reads the folded text too: the context character, then the window folded.
        let mut haystack = String::new();
        haystack.extend(self.context);
        let mut offsets = Vec::new();
        for (at, c) in self.window.char_indices() {
            offsets.push((at, haystack.len()));
            crate::fold::fold_char(c, |f| haystack.push(f));
        }
        let mut decided = Vec::new();
        self.threads.retain(|t| {
            if !ready(t) {
                return true;
            }
            let found = offsets
                .iter()
                .find(|(at, _)| *at == t.at)
                .and_then(|(_, start)| rules.match_at(&haystack, start + t.sub));
            decided.extend(found.map(|check| (Found { pos: t.pos, check }, t.folded)));
            false
        });
        for (found, folded) in decided {
            self.record(found, folded);
        }
    }

    /// A match begins at `found.pos` (folded position `folded`): the earliest such start wins,
    /// and there the earliest check. The threads that start later are dropped.
    pub(super) fn record(&mut self, found: Found, folded: usize) {
        self.note(found, folded);
        // Later starts cannot come before it.
        self.threads.retain(|t| t.pos <= found.pos);
    }

    /// [`Self::record`] but for dropping the later threads, which the reader passes over.
    pub(super) fn note(&mut self, found: Found, folded: usize) {
        let better = self
            .found
            .is_none_or(|f| (found.pos, found.check) < (f.pos, f.check));
        if better {
            self.found = Some(found);
            self.found_folded = folded;
        }
    }

    /// Drops text no thread needs; the last folded character dropped is kept as context.
    pub(super) fn trim(&mut self) {
        let keep = self.threads.first().map_or(self.read, |t| t.at);
        let Some(head) = self.window.get(..keep).filter(|h| !h.is_empty()) else {
            return;
        };
        // Folded backwards from the end, the first character that folds to something.
        if let Some(last) = head.chars().rev().find_map(|c| {
            let mut last = None;
            crate::fold::fold_char(c, |f| last = Some(f));
            last
        }) {
            self.context = Some(last);
        }
        self.window.drain(..keep);
        self.read -= keep;
        for t in &mut self.threads {
            t.at -= keep;
        }
    }
}
