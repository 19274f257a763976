//! Reading ahead: one unanchored automaton reads the new text for every start at once, and only
//! where the held text begins is read back from the end ([`RuleSet::held_from`]). Most text holds
//! no match and is ASCII, so this is the common path; text where a match ends, non-ASCII text, or
//! a state the automaton cannot tell goes back to reading start by start ([`super::threads`]).

use regex_automata::hybrid::LazyStateID;

use super::{Dfa, Holdback};
use crate::scan::{Automaton, RuleSet, Step};

/// The automaton's state after all of `bytes` from `state`, when no match ended in them and it
/// read them all; `None` otherwise (a match, the end of every match, a byte it gives up on).
fn read_without_match(
    a: &mut Automaton<'_>,
    state: LazyStateID,
    bytes: &[u8],
) -> Option<LazyStateID> {
    match a.read(state, bytes) {
        (
            read,
            Step::Live {
                state,
                matched: None,
            },
        ) if read == bytes.len() => Some(state),
        _ => None,
    }
}

impl Holdback {
    /// Reads the new text ahead, as [`Self::scan`] would, without settling where the held text
    /// begins: `true` when it was read so and no match ended in it (so a scan now would find
    /// nothing), `false` (nothing changed) when the text is a scan's to read. Until the next scan,
    /// [`Self::confirmed`] stays where the last one left it: short of what the text confirms,
    /// never past it. A stream reads each event's text so and settles once for the events of a
    /// chunk that no match can end in (`Rewriter::pass_whole`): where the held text begins is read
    /// back from the end, which reads the same from one text as from its pieces.
    pub(crate) fn advance(&mut self, rules: &RuleSet) -> bool {
        if self.passive || rules.is_empty() || self.threaded || self.ended {
            return false;
        }
        let mut dfa = rules.automaton();
        let Some(a) = dfa.as_mut() else {
            return false;
        };
        let Some(state) = self.ahead.filter(|_| self.ahead_clears == a.clears()) else {
            return false;
        };
        let new = self.window.as_bytes().get(self.read..).unwrap_or_default();
        if !crate::swar::is_ascii(new) {
            return false;
        }
        let Some(state) = read_without_match(a, state, new) else {
            return false;
        };
        self.ahead = Some(state);
        self.took_ahead();
        self.unsettled = true;
        true
    }

    /// The window's new (ASCII) text was read ahead: every byte a character that folds to itself.
    fn took_ahead(&mut self) {
        let new = self.window.len() - self.read;
        self.read_pos += new;
        self.folded += new;
        self.read = self.window.len();
        self.last = self
            .window
            .as_bytes()
            .last()
            .copied()
            .or(self.before_window());
    }

    /// Reads the new text with the automaton reading ahead for every start at once: most text
    /// holds no match, and then only where the held text begins is needed, which the rules'
    /// prefixes read backwards from the end tell ([`RuleSet::held_from`]): a byte read once
    /// ahead, and the held text (a word or so) once back, instead of a thread per start. `false`
    /// when the text must be read start by start: some match ended (where it begins and which
    /// check it is are the threads' to tell), the text is not ASCII (its folding maps
    /// positions), or the automaton cannot tell.
    pub(super) fn read_ahead(&mut self, dfa: &mut Dfa<'_>, rules: &RuleSet) -> bool {
        let Some(a) = dfa.as_mut() else {
            return false;
        };
        let new = self.window.as_bytes().get(self.read..).unwrap_or_default();
        if !crate::swar::is_ascii(new) {
            return false;
        }
        // A state taken before a clear of the cache (by any stream) means nothing: the held
        // text is read again from its start (no match can begin before it).
        let (state, from) = match self.ahead {
            Some(state) if self.ahead_clears == a.clears() => (state, self.read),
            _ => match a.unanchored(self.before_window()) {
                Some(state) => (state, 0),
                None => return false,
            },
        };
        let unread = self.window.as_bytes().get(from..).unwrap_or_default();
        let Some(state) = read_without_match(a, state, unread) else {
            return false;
        };
        if self.ended
            && !matches!(
                a.step_end(state),
                Step::Dead | Step::Live { matched: None, .. }
            )
        {
            return false;
        }
        let held_from = if self.ended {
            self.window.len()
        } else {
            match rules.held_from(self.window.as_bytes(), self.before_window()) {
                Some(at) => at,
                None => return false,
            }
        };
        self.ahead = Some(state);
        self.ahead_clears = a.clears();
        self.took_ahead();
        // ASCII: a byte is a character and folds to itself.
        if let Some(&before) = held_from
            .checked_sub(1)
            .and_then(|i| self.window.as_bytes().get(i))
        {
            self.context = Some(char::from(before));
        }
        self.window.drain(..held_from);
        self.read -= held_from;
        true
    }

    /// From reading ahead to reading start by start: the held text is read again from its
    /// start, a thread per character (no match begins before it).
    pub(super) fn read_by_threads(&mut self) {
        self.threaded = true;
        self.threads.clear();
        self.read_pos = self.window_start();
        self.folded -= self.read;
        self.last = self.before_window();
        self.read = 0;
        self.ahead = None;
    }

    /// Back to reading ahead once no start is alive and nothing was found: nothing is held then,
    /// so the automaton reading ahead starts afresh after the text read.
    pub(super) fn read_ahead_when_idle(&mut self) {
        #[cfg(test)]
        if self.threads_only {
            return;
        }
        if self.threads.is_empty() && self.found.is_none() && !self.ended && self.window.is_empty()
        {
            self.threaded = false;
            self.ahead = None;
        }
    }
}
