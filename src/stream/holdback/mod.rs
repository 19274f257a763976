//! The checked text of one channel, scanned as it grows, holding back only what could still
//! become the start of a match.
//!
//! Positions count characters of the channel's checked text. The automaton reads that text folded
//! ([`crate::fold`], a character at a time, so the splits do not matter), and every folded
//! character is a possible start of a match: a thread follows it through the stage's anchored
//! automaton one byte at a time and dies as soon as no match can begin there. A thread's position
//! is the original character its folded character came from, so held text and cuts are counted
//! in the text as written. The text from the earliest live start on is held
//! back (none on most text: "word word" can never begin an IBAN); everything before it is
//! confirmed. Each byte is read once per live thread, whose states carry across pushes; threads
//! in the same state have the same future, so only the earliest is kept. A match found at some
//! start is certain once no earlier start is alive and no earlier check can still match at that
//! start (its thread is over, the check is the stage's first, or the longest match fits after
//! it), so the check named is the one a search over the whole text names.
//!
//! Where the automaton cannot tell (a byte it gives up on, such as non-ASCII next to a Unicode
//! `\b`, or a cleared cache), that start is decided by a search once the longest match fits in
//! the text after it (or the text ended): the held window then is the rules' longest match, as a
//! fixed window would be. Memory is the held text and one state per live thread.

use std::collections::HashSet;

use regex_automata::hybrid::LazyStateID;

use crate::scan::{Automaton, RuleSet};

mod ahead;
mod decision;
mod threads;

/// The stage's automaton for one scan; `None` leaves every start to a search.
type Dfa<'a> = Option<Automaton<'a>>;

#[derive(Debug, Default)]
pub(crate) struct Holdback {
    /// Characters pushed so far.
    len: usize,
    /// Characters the pushed text folds to, so far: how far past a start the automaton has read.
    folded: usize,
    /// The held text, as written.
    window: String,
    /// The folded character before `window`: context for a search's assertions (`\b`, `^`).
    context: Option<char>,
    /// Bytes and characters of `window` the threads have read.
    read: usize,
    read_pos: usize,
    /// The last byte read: the look-behind of the next start.
    last: Option<u8>,
    /// Live starts, earliest first.
    threads: Vec<Thread>,
    /// The earliest match found so far (not yet certain while an earlier start is alive), and the
    /// folded position of its start.
    found: Option<Found>,
    found_folded: usize,
    /// The automaton's clear count when the threads' states were taken.
    clears: usize,
    /// Scratch for merging many threads (kept to reuse its allocation).
    states: HashSet<LazyStateID>,
    /// Read start by start (the threads above); otherwise read ahead (below).
    threaded: bool,
    /// Reading ahead: the unanchored automaton's state after the text read (all starts at once),
    /// and its clear count then; `None`: read the held text again from its start.
    ahead: Option<LazyStateID>,
    ahead_clears: usize,
    /// The channel's text is complete.
    ended: bool,
    /// Only counts: the text is read whole elsewhere (nothing streams, so nothing is held back).
    passive: bool,
    /// Text was read ahead without settling what it confirms ([`Self::advance`]).
    unsettled: bool,
    /// Tests: read start by start only, never ahead (the reference the reading ahead must equal).
    #[cfg(test)]
    threads_only: bool,
}

#[derive(Debug, Clone, Copy)]
struct Thread {
    /// Where the match would start: a character position, and its byte offset in `window`.
    pos: usize,
    at: usize,
    /// Where in the folded text: the byte in the folded form of that character (a ligature folds
    /// to several), and the folded character position.
    sub: usize,
    folded: usize,
    /// Its automaton state; `None`: decided by a search instead.
    state: Option<LazyStateID>,
}

/// Forbidden text that will be in the text whatever follows: where it starts, and its check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Found {
    pub pos: usize,
    pub check: usize,
}

impl Holdback {
    pub(crate) fn passive() -> Self {
        Self {
            passive: true,
            ..Self::default()
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// No forbidden text starts before this position.
    pub(crate) fn confirmed(&self) -> usize {
        if !self.threaded {
            return self.window_start();
        }
        let held = self.threads.first().map(|t| t.pos);
        let found = self.found.map(|f| f.pos);
        [held, found, Some(self.read_pos)]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(self.len)
    }

    pub(crate) fn push(&mut self, text: &str) {
        self.len += text.chars().count();
        if self.passive {
            self.read_pos = self.len;
        } else {
            self.window.push_str(text);
        }
    }

    /// No more text will come: the end of the text is the end of the channel.
    pub(crate) fn end(&mut self) {
        self.ended = true;
    }

    /// Reads what was pushed since the last scan. Returns the leftmost forbidden text once it is
    /// certain; otherwise confirms as far as nothing can start.
    pub(crate) fn scan(&mut self, rules: &RuleSet) -> Option<Found> {
        self.unsettled = false;
        if self.passive || rules.is_empty() {
            self.window.clear();
            self.read = 0;
            self.read_pos = self.len;
            return None;
        }
        // One borrow of the automaton's cache for all the new text.
        let mut dfa = rules.automaton();
        if !self.threaded {
            if self.read_ahead(&mut dfa, rules) {
                return None;
            }
            self.read_by_threads();
        }
        self.read_new(&mut dfa);
        if self.ended {
            self.read_end(&mut dfa);
        }
        drop(dfa);
        self.search_undecided(rules);
        let certain = self.found.filter(|f| match self.threads.first() {
            None => true,
            // Its own start, still read: naming needs no more text when no earlier check
            // exists, or once the longest match fits after it (as a search would name it).
            Some(t) => {
                t.pos == f.pos
                    && (Some(f.check) == rules.first_check()
                        || self.folded.saturating_sub(self.found_folded) > rules.longest())
            }
        });
        if certain.is_none() {
            self.trim();
            self.read_ahead_when_idle();
        }
        certain
    }

    /// Text was read ahead ([`Self::advance`]) and not yet settled by a scan.
    pub(crate) fn unsettled(&self) -> bool {
        self.unsettled
    }

    /// Reading ahead: where `window` begins, in characters. The window's text read so far is
    /// ASCII (a byte is a character and folds to itself), so it is that far behind what was read.
    fn window_start(&self) -> usize {
        self.read_pos.saturating_sub(self.read)
    }

    /// The folded byte before `window` (the look-behind of its first start): the last of
    /// `context`'s.
    fn before_window(&self) -> Option<u8> {
        self.context
            .and_then(|c| c.encode_utf8(&mut [0; 4]).as_bytes().last().copied())
    }
}

#[cfg(test)]
mod tests;
