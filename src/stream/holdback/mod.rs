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

use crate::scan::{Automaton, RuleSet, Step};

/// The stage's automaton for one scan; `None` leaves every start to a search.
type Dfa<'a> = Option<Automaton<'a>>;

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

fn clears(dfa: &Dfa<'_>) -> usize {
    dfa.as_ref().map_or(0, Automaton::clears)
}

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

/// Up to this many live threads are merged by comparing states pairwise.
const FEW_THREADS: usize = 16;

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

    /// Text was read ahead ([`Self::advance`]) and not yet settled by a scan.
    pub(crate) fn unsettled(&self) -> bool {
        self.unsettled
    }

    /// Reads the new text with the automaton reading ahead for every start at once: most text
    /// holds no match, and then only where the held text begins is needed, which the rules'
    /// prefixes read backwards from the end tell ([`RuleSet::held_from`]): a byte read once
    /// ahead, and the held text (a word or so) once back, instead of a thread per start. `false`
    /// when the text must be read start by start: some match ended (where it begins and which
    /// check it is are the threads' to tell), the text is not ASCII (its folding maps
    /// positions), or the automaton cannot tell.
    fn read_ahead(&mut self, dfa: &mut Dfa<'_>, rules: &RuleSet) -> bool {
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
    fn read_by_threads(&mut self) {
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
    fn read_ahead_when_idle(&mut self) {
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

    /// Reads the text pushed since the last scan, folded. Most text is ASCII, which folds to
    /// itself: its bytes are read where they are, and every byte is a folded character.
    fn read_new(&mut self, dfa: &mut Dfa<'_>) {
        let window = std::mem::take(&mut self.window);
        // Non-ASCII text only: its folded bytes and where each folded character starts (nothing
        // is kept between reads: a stream's memory stays what it holds back).
        let (mut starts, mut folded) = (Vec::new(), Vec::new());
        let new = window.get(self.read..).unwrap_or_default();
        let (at0, pos0, folded0) = (self.read, self.read_pos, self.folded);
        let ascii = crate::swar::is_ascii(new.as_bytes());
        let mut chars = new.len();
        if !ascii {
            chars = 0;
            for (i, c) in new.char_indices() {
                let mut sub = 0;
                crate::fold::fold_char(c, |f| {
                    let thread = Thread {
                        pos: pos0 + chars,
                        at: at0 + i,
                        sub,
                        folded: folded0 + starts.len(),
                        state: None,
                    };
                    starts.push((folded.len(), thread));
                    folded.extend_from_slice(f.encode_utf8(&mut [0; 4]).as_bytes());
                    sub += f.len_utf8();
                });
                chars += 1;
            }
        }
        let (bytes, count): (&[u8], usize) = if ascii {
            (new.as_bytes(), new.len())
        } else {
            (&folded, starts.len())
        };
        let start_of = |k: usize| {
            if ascii {
                let thread = Thread {
                    pos: pos0 + k,
                    at: at0 + k,
                    sub: 0,
                    folded: folded0 + k,
                    state: None,
                };
                Some((k, thread))
            } else {
                starts.get(k).copied()
            }
        };
        self.read_bytes(dfa, bytes, count, start_of);
        self.read = window.len();
        self.read_pos = pos0 + chars;
        self.folded = folded0 + count;
        if let Some(&b) = bytes.last() {
            self.last = Some(b);
        }
        self.window = window;
    }

    /// Reads new folded `bytes` one thread at a time: every live thread reads all of them in one
    /// run (until it dies), then each of the `count` new folded characters (`start_of`: its first
    /// byte in `bytes` and the thread starting there) starts a thread that reads the rest; threads
    /// that end in the same state are merged afterwards.
    /// The outcome is what reading each byte with every thread in turn gives: a match recorded
    /// at some start drops the later starts, and no thread starts after the byte that recorded
    /// the first match. The runs are tight loops over a slice, with no bookkeeping per
    /// character (which cost several times the automaton's steps when each byte was read by
    /// every thread in turn).
    fn read_bytes(
        &mut self,
        dfa: &mut Dfa<'_>,
        bytes: &[u8],
        count: usize,
        start_of: impl Fn(usize) -> Option<(usize, Thread)>,
    ) {
        // The live threads' states were taken at `old_clears`; those of the threads kept from now
        // on at `self.clears`.
        let old_clears = self.clears;
        self.clears = clears(dfa);
        let starts_allowed = self.found.is_none();
        // The byte whose reading recorded this read's first match.
        let mut first_match: Option<usize> = None;
        // The live threads read in place, those still alive moved to the front. A match noted
        // meanwhile drops no thread kept so far (they start no later than it: threads are in
        // start order), and the threads after it are passed over here.
        let mut kept = 0;
        for i in 0..self.threads.len() {
            let Some(t) = self.threads.get(i).copied() else {
                break;
            };
            if self.found.is_some_and(|f| t.pos > f.pos) {
                continue;
            }
            let state = match (dfa.as_mut(), t.state) {
                (Some(a), Some(state)) if a.clears() == old_clears => {
                    self.run(a, t, state, bytes, 0, &mut first_match)
                }
                _ => Some(None),
            };
            if let (Some(state), Some(slot)) = (state, self.threads.get_mut(kept)) {
                *slot = Thread { state, ..t };
                kept += 1;
            }
        }
        self.threads.truncate(kept);
        for k in 0..count {
            let Some((byte, t)) = start_of(k) else {
                break;
            };
            let later =
                self.found.is_some_and(|f| t.pos > f.pos) || first_match.is_some_and(|j| byte > j);
            if !starts_allowed || later {
                break;
            }
            let Some(a) = dfa.as_mut() else {
                self.threads.push(t);
                continue;
            };
            let look_behind = match byte.checked_sub(1) {
                None => self.last,
                Some(i) => bytes.get(i).copied(),
            };
            let start = a.start(look_behind);
            self.forget_if_cleared(a.clears());
            let state = match start {
                Step::Dead => None,
                Step::Live { state, .. } => self.run(a, t, state, bytes, byte, &mut first_match),
                Step::Unknown => Some(None),
            };
            if let Some(state) = state {
                self.threads.push(Thread { state, ..t });
            }
        }
        self.merge();
    }

    /// Thread `t`, in `state`, reads `bytes` from `from` on until it dies (`None`), else its state
    /// after them (`Some(None)`: decided by a search from now on); its matches are noted as they
    /// are read. Most threads die or read to the end without a match or anything else to note:
    /// that is one read here; [`Self::run_noting`] takes the rest on from where it stopped.
    #[inline]
    fn run(
        &mut self,
        a: &mut Automaton<'_>,
        t: Thread,
        state: LazyStateID,
        bytes: &[u8],
        from: usize,
        first_match: &mut Option<usize>,
    ) -> Option<Option<LazyStateID>> {
        let rest = bytes.get(from..).unwrap_or_default();
        let (read, step) = a.read(state, rest);
        if a.clears() == self.clears {
            match step {
                Step::Dead => return None,
                Step::Live {
                    state,
                    matched: None,
                } if read == rest.len() => return Some(Some(state)),
                _ => {}
            }
        }
        self.run_noting(a, t, (read, step), bytes, from, first_match)
    }

    /// [`Self::run`] on from where its first read stopped (`first`: bytes read, and the step
    /// there), for a thread that matches, meets a byte the automaton gives up on, or reads while
    /// the automaton's cache is cleared.
    #[inline(never)]
    fn run_noting(
        &mut self,
        a: &mut Automaton<'_>,
        t: Thread,
        first: (usize, Step),
        bytes: &[u8],
        from: usize,
        first_match: &mut Option<usize>,
    ) -> Option<Option<LazyStateID>> {
        let (mut read, mut step) = first;
        let mut j = from;
        let (mut state, mut alive) = (None, true);
        loop {
            j += read;
            match step {
                Step::Live {
                    state: next,
                    matched,
                } => {
                    state = Some(next);
                    if let Some(check) = matched {
                        // Recorded while reading byte j - 1.
                        let at = j.saturating_sub(1);
                        *first_match = Some(first_match.map_or(at, |f| f.min(at)));
                        self.note(Found { pos: t.pos, check }, t.folded);
                    }
                    if j >= bytes.len() {
                        break;
                    }
                    (read, step) = a.read(next, bytes.get(j..).unwrap_or_default());
                }
                Step::Dead => {
                    alive = false;
                    break;
                }
                // Decided by a search instead, from here on.
                Step::Unknown => {
                    state = None;
                    break;
                }
            }
        }
        if a.clears() != self.clears {
            self.forget_if_cleared(a.clears());
            state = None;
        }
        alive.then_some(state)
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

    /// The end of the text: assertions at the end are decided, matches there recorded, and no
    /// automaton thread reads further (searches decide the threads without a state). A state is
    /// never used after the automaton's cache was cleared (by any stream).
    fn read_end(&mut self, dfa: &mut Dfa<'_>) {
        let mut matched = Vec::new();
        let taken = self.clears;
        self.threads.retain_mut(|t| {
            let (Some(a), Some(state)) = (dfa.as_mut(), t.state) else {
                t.state = None;
                return true;
            };
            if a.clears() != taken {
                t.state = None;
                return true;
            }
            match a.step_end(state) {
                Step::Dead => false,
                Step::Live { matched: m, .. } => {
                    matched.extend(m.map(|check| (Found { pos: t.pos, check }, t.folded)));
                    false
                }
                Step::Unknown => {
                    t.state = None;
                    true
                }
            }
        });
        self.forget_if_cleared(clears(dfa));
        for (found, folded) in matched {
            self.record(found, folded);
        }
    }

    /// After a clear of the automaton's cache (`now` clears so far), no state kept is used.
    fn forget_if_cleared(&mut self, now: usize) {
        if now != self.clears {
            self.clears = now;
            for t in &mut self.threads {
                t.state = None;
            }
        }
    }

    /// Starts that only a search can decide, decided once the longest match after them was read.
    fn search_undecided(&mut self, rules: &RuleSet) {
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
    fn record(&mut self, found: Found, folded: usize) {
        self.note(found, folded);
        // Later starts cannot come before it.
        self.threads.retain(|t| t.pos <= found.pos);
    }

    /// [`Self::record`] but for dropping the later threads, which the reader passes over.
    fn note(&mut self, found: Found, folded: usize) {
        let better = self
            .found
            .is_none_or(|f| (found.pos, found.check) < (f.pos, f.check));
        if better {
            self.found = Some(found);
            self.found_folded = folded;
        }
    }

    /// Keeps the earliest of the automaton threads that share a state: their futures are the same.
    /// Live threads are usually few, and then each is compared with the earlier ones kept (no
    /// hashing per character); many (a run of digits inside a counted repetition) go through a set.
    fn merge(&mut self) {
        if self.threads.len() < 2 {
            return;
        }
        if self.threads.len() > FEW_THREADS {
            let states = &mut self.states;
            states.clear();
            self.threads
                .retain(|t| t.state.is_none_or(|state| states.insert(state)));
            return;
        }
        let mut kept = 0;
        for i in 0..self.threads.len() {
            let Some(t) = self.threads.get(i).copied() else {
                break;
            };
            let repeat = t.state.is_some()
                && self
                    .threads
                    .get(..kept)
                    .is_some_and(|earlier| earlier.iter().any(|e| e.state == t.state));
            if !repeat {
                if let Some(slot) = self.threads.get_mut(kept) {
                    *slot = t;
                }
                kept += 1;
            }
        }
        self.threads.truncate(kept);
    }

    /// Drops text no thread needs; the last folded character dropped is kept as context.
    fn trim(&mut self) {
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

#[cfg(test)]
mod tests {

    use super::*;
    use crate::pattern::{compile_forbidden_text, compile_pattern};

    fn rules() -> RuleSet {
        RuleSet::streamed(&[
            (0, compile_pattern(r"NL\d{2}[A-Z]{4}\d{10}", 18).unwrap()),
            (2, compile_forbidden_text("secret").unwrap()),
        ])
        .unwrap()
    }

    fn pushed(rules: &RuleSet, pieces: &[&str]) -> (Holdback, Option<Found>) {
        let mut hb = Holdback::default();
        let mut found = None;
        for piece in pieces {
            hb.push(piece);
            found = found.or(hb.scan(rules));
        }
        (hb, found)
    }

    #[test]
    fn text_that_cannot_start_a_match_is_not_held() {
        let rules = rules();
        let (hb, found) = pushed(&rules, &["word word word ", "é日本 and more"]);
        assert_eq!(found, None);
        assert_eq!(hb.confirmed(), hb.len());
        assert!(hb.window.chars().count() <= 1, "{:?}", hb.window);
    }

    #[test]
    fn only_the_suffix_that_can_still_begin_a_match_is_held() {
        let rules = rules();
        let (hb, _) = pushed(&rules, &["pay to NL91AB"]);
        assert_eq!(hb.confirmed(), 7, "held from the N");
        assert!(
            !hb.threaded && hb.threads.is_empty(),
            "read ahead, no thread per start"
        );
        let (hb, _) = pushed(&rules, &["it is a sec"]);
        assert_eq!(hb.confirmed(), 8, "held from the s of sec");
        let (hb, _) = pushed(&rules, &["NL9 no"]);
        assert_eq!(hb.confirmed(), 6, "released once it cannot be an IBAN");
    }

    #[test]
    fn a_match_is_certain_only_with_a_character_after_it() {
        let rules = RuleSet::streamed(&[(4, compile_pattern(r"\bcat\b", 3).unwrap())]).unwrap();
        let mut hb = Holdback::default();
        hb.push("a cat");
        assert_eq!(hb.scan(&rules), None);
        assert_eq!(hb.confirmed(), 2);
        hb.push("s");
        assert_eq!(hb.scan(&rules), None);
        assert_eq!(hb.confirmed(), 6);
        hb.push(" and a cat!");
        assert_eq!(hb.scan(&rules), Some(Found { pos: 13, check: 4 }));
    }

    #[test]
    fn the_end_of_the_text_decides_what_was_held() {
        let rules = RuleSet::streamed(&[(4, compile_pattern(r"\bcat\b", 3).unwrap())]).unwrap();
        let mut hb = Holdback::default();
        hb.push("a cat");
        assert_eq!(hb.scan(&rules), None);
        hb.end();
        assert_eq!(hb.scan(&rules), Some(Found { pos: 2, check: 4 }));
        let mut hb = Holdback::default();
        hb.push("a ca");
        hb.end();
        assert_eq!(hb.scan(&rules), None);
        assert_eq!(hb.confirmed(), 4);
    }

    #[test]
    fn a_match_split_over_pushes_is_found_where_it_starts() {
        let rules = rules();
        let (_, found) = pushed(
            &rules,
            &[
                "pay N",
                "L91AB",
                "NA0417",
                "164300 now",
                " and more text here",
            ],
        );
        assert_eq!(found, Some(Found { pos: 4, check: 0 }));
    }

    #[test]
    fn at_one_start_the_earliest_check_that_matches_is_named() {
        let rules = RuleSet::streamed(&[
            (0, compile_pattern("abcd", 4).unwrap()),
            (1, compile_pattern("ab", 2).unwrap()),
        ])
        .unwrap();
        assert_eq!(
            pushed(&rules, &["xabcd!"]).1,
            Some(Found { pos: 1, check: 0 })
        );
        assert_eq!(
            pushed(&rules, &["xabcx!"]).1,
            Some(Found { pos: 1, check: 1 })
        );
    }

    #[test]
    fn a_unicode_word_boundary_next_to_non_ascii_is_decided_by_a_search() {
        // The automaton gives up on non-ASCII beside a Unicode `\b`; the search decides instead.
        let rules = RuleSet::streamed(&[(1, compile_pattern(r"\bgeheim\b", 6).unwrap())]).unwrap();
        assert_eq!(
            pushed(&rules, &["ééé geheim é"]).1,
            Some(Found { pos: 4, check: 1 })
        );
        assert_eq!(pushed(&rules, &["éégeheim é"]).1, None);
        let (hb, found) = pushed(&rules, &["é geheimnis und mehr text"]);
        assert_eq!((found, hb.confirmed()), (None, hb.len()));
        // At é (and after it), the automaton cannot judge a start: it is held until the longest
        // match fits after it, as a fixed window would hold it.
        let (mut hb, _) = pushed(&rules, &["égeh"]);
        assert_eq!(hb.confirmed(), 0);
        hb.push("eimnis");
        assert_eq!(hb.scan(&rules), None);
        assert_eq!(hb.confirmed(), hb.len());
    }

    #[test]
    fn text_that_could_each_begin_a_match_keeps_no_more_than_the_longest_match() {
        // Every letter could begin an address: at most the longest match's starts are alive, and
        // the text held and kept is no longer, however long the run.
        let rules = RuleSet::streamed(&[(0, compile_pattern("[a-z]{1,5}@x", 7).unwrap())]).unwrap();
        let mut hb = Holdback::default();
        for _ in 0..1000 {
            hb.push("a");
            assert_eq!(hb.scan(&rules), None);
            assert!(hb.threads.len() <= rules.longest(), "{}", hb.threads.len());
            assert!(hb.len() - hb.confirmed() <= rules.longest());
            assert!(hb.window.chars().count() <= rules.longest() + 1);
        }
    }

    #[test]
    fn without_rules_or_passive_everything_is_confirmed() {
        let none = RuleSet::streamed(&[]).unwrap();
        let (hb, found) = pushed(&none, &["a sec", "ret NL91"]);
        assert_eq!((found, hb.confirmed()), (None, 13));
        let mut passive = Holdback::passive();
        passive.push("a sec");
        assert_eq!(passive.confirmed(), 5);
    }

    #[test]
    fn rules_whose_prefixes_are_too_large_to_read_ahead_are_read_start_by_start() {
        let rules =
            RuleSet::streamed(&[(0, compile_pattern(r"\w{1,64}@\w{1,63}", 128).unwrap())]).unwrap();
        let text = "write to ana@example now, or to bob";
        let whole = rules.first_hit(text).map(|h| Found {
            pos: h.start,
            check: h.check,
        });
        assert_eq!(whole, Some(Found { pos: 9, check: 0 }));
        for size in [1, 3, text.len()] {
            let mut hb = Holdback::default();
            let mut found = None;
            for piece in text.as_bytes().chunks(size) {
                hb.push(std::str::from_utf8(piece).unwrap());
                found = found.or(hb.scan(&rules));
                assert!(hb.confirmed() <= 9, "released a match");
            }
            hb.end();
            assert_eq!(found.or(hb.scan(&rules)), whole, "in pieces of {size}");
            assert!(hb.threaded);
        }
    }

    #[test]
    fn a_rule_set_built_for_searches_only_holds_by_search_and_releases_no_match() {
        let rules =
            RuleSet::new(&[(0, compile_pattern(r"NL\d{2}[A-Z]{4}\d{10}", 18).unwrap())]).unwrap();
        let (_, found) = pushed(&rules, &["pay NL91ABNA0417164300 now"]);
        assert_eq!(found, Some(Found { pos: 4, check: 0 }));
        let (hb, _) = pushed(&rules, &["word word word word word"]);
        assert_eq!(hb.confirmed(), hb.len() - rules.longest());
    }

    /// Rules over a small alphabet, ASCII word boundaries included, for exhaustive checks.
    fn small_rules() -> RuleSet {
        RuleSet::streamed(&[
            (0, compile_pattern("aab", 3).unwrap()),
            (1, compile_pattern(r"(?-u:\b)ba(?-u:\b)", 2).unwrap()),
            (3, compile_pattern("N[ab]{1,2}", 3).unwrap()),
        ])
        .unwrap()
    }

    const ALPHABET: [char; 4] = ['a', 'b', ' ', 'N'];

    /// Every text of exactly `len` characters of the alphabet.
    fn texts(len: usize) -> Vec<String> {
        texts_of(&ALPHABET, len)
    }

    fn texts_of(alphabet: &[char], len: usize) -> Vec<String> {
        (0..len).fold(vec![String::new()], |texts, _| {
            texts
                .iter()
                .flat_map(|t| alphabet.iter().map(move |c| format!("{t}{c}")))
                .collect()
        })
    }

    /// Where the held text must start: the first position at which some continuation of `text`
    /// makes a match begin (decided by searches, not by the automaton); the length when none.
    fn must_hold_from(
        rules: &RuleSet,
        text: &str,
        memo: &mut std::collections::HashMap<String, usize>,
    ) -> usize {
        if let Some(&held) = memo.get(text) {
            return held;
        }
        let continuations: Vec<String> = (0..=rules.longest() + 1).flat_map(texts).collect();
        let held = (0..text.len())
            .find(|&s| {
                continuations
                    .iter()
                    .any(|w| rules.match_at(&format!("{text}{w}"), s).is_some())
            })
            .unwrap_or(text.len());
        memo.insert(text.to_owned(), held);
        held
    }

    #[test]
    fn exhaustively_nothing_is_held_that_cannot_begin_a_match_and_no_match_is_released() {
        let rules = small_rules();
        let mut memo = std::collections::HashMap::new();
        // Scans that ended reading ahead, and start by start: both ways are checked.
        let (mut ahead, mut threaded) = (0, 0);
        for text in texts(5) {
            let whole = rules.first_hit(&text);
            let mut hb = Holdback::default();
            let mut found = None;
            for (i, c) in text.char_indices() {
                hb.push(&c.to_string());
                found = found.or(hb.scan(&rules));
                if hb.threaded {
                    threaded += 1;
                } else {
                    ahead += 1;
                }
                let prefix = &text[..=i];
                if found.is_none() {
                    assert_eq!(
                        hb.confirmed(),
                        must_hold_from(&rules, prefix, &mut memo),
                        "{text:?} after {prefix:?}"
                    );
                }
                if let Some(hit) = whole {
                    assert!(hb.confirmed() <= hit.start, "{text:?} released a match");
                }
            }
            hb.end();
            found = found.or(hb.scan(&rules));
            let expected = whole.map(|h| Found {
                pos: h.start,
                check: h.check,
            });
            assert_eq!(found, expected, "{text:?} read a character at a time");
            let mut at_once = Holdback::default();
            at_once.push(&text);
            let first = at_once.scan(&rules);
            at_once.end();
            assert_eq!(first.or(at_once.scan(&rules)), expected, "{text:?} at once");
        }
        assert!(
            ahead > 500 && threaded > 500,
            "{ahead} ahead, {threaded} threaded"
        );
    }

    /// Reading ahead holds exactly what reading start by start holds, and finds the same match,
    /// after every piece of random texts read in random pieces, with the bench's rules (an e-mail
    /// address's counted repetitions, an IBAN, a card number, an API key, a forbidden word).
    #[cfg(not(target_arch = "wasm32"))]
    mod ahead_equals_threads {
        use super::*;
        use proptest::prelude::*;

        fn bench_rules() -> RuleSet {
            RuleSet::streamed(&[
                (0, compile_forbidden_text("project-bluebird").unwrap()),
                (1, compile_pattern("[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}", 34).unwrap()),
                (2, compile_pattern("[0-9]{4}[ -]?[0-9]{4}[ -]?[0-9]{4}[ -]?[0-9]{4}", 19).unwrap()),
                (
                    3,
                    compile_pattern(
                        r"[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(\.[A-Za-z0-9-]{1,63}){0,1}\.[A-Za-z]{2,6}",
                        200,
                    )
                    .unwrap(),
                ),
                (4, compile_pattern("sk-[A-Za-z0-9]{32}", 35).unwrap()),
            ])
            .unwrap()
        }

        const PIECES: [&str; 16] = [
            "word ", "ana", "@", "example", ".", "com", " ", "NL91", "ABNA", "0417", "1643", "-",
            "sk-", "Ab3", "project", "é",
        ];

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(300))]
            #[test]
            fn same_holds_and_finds(
                parts in prop::collection::vec(0..PIECES.len(), 0..80),
                sizes in prop::collection::vec(1usize..12, 1..8),
            ) {
                let rules = bench_rules();
                let text: String = parts.iter().map(|&i| PIECES[i]).collect();
                let mut ahead = Holdback::default();
                let mut threads = Holdback { threaded: true, threads_only: true, ..Holdback::default() };
                let (mut found_ahead, mut found_threads) = (None, None);
                let chars: Vec<char> = text.chars().collect();
                let mut at = 0;
                for &size in sizes.iter().cycle() {
                    if at >= chars.len() {
                        break;
                    }
                    let piece: String = chars[at..(at + size).min(chars.len())].iter().collect();
                    at += size;
                    ahead.push(&piece);
                    threads.push(&piece);
                    found_ahead = found_ahead.or(ahead.scan(&rules));
                    found_threads = found_threads.or(threads.scan(&rules));
                    prop_assert_eq!(found_ahead, found_threads, "{:?} at {}", text, at);
                    if found_ahead.is_none() {
                        prop_assert_eq!(ahead.confirmed(), threads.confirmed(), "{:?} at {}", text, at);
                    }
                }
                ahead.end();
                threads.end();
                found_ahead = found_ahead.or(ahead.scan(&rules));
                found_threads = found_threads.or(threads.scan(&rules));
                prop_assert_eq!(found_ahead, found_threads, "{:?} at the end", text);
                let whole = rules.first_hit(&text).map(|h| Found {
                    pos: text[..h.start].chars().count(),
                    check: h.check,
                });
                prop_assert_eq!(found_ahead, whole, "{:?}", text);
            }
        }
    }

    #[test]
    fn a_cache_cleared_every_few_states_changes_no_finding() {
        // The smallest cache: the states threads hold are thrown away again and again, mid-read
        // too; a thread whose state went is decided by a search, never by a stale state.
        let rules = [
            (0, compile_pattern("aab", 3).unwrap()),
            (1, compile_pattern(r"(?-u:\b)ba(?-u:\b)", 2).unwrap()),
            (3, compile_pattern("N[ab]{1,2}", 3).unwrap()),
            (4, compile_pattern("[ab]{2,6}N", 7).unwrap()),
        ];
        let mut texts = texts(5);
        texts.push("ab ba aaab Nab abababN bba N".repeat(20));
        // With the word boundary, and without (then every start is one state, looked up once).
        for rules in [&rules[..], &[&rules[..1], &rules[2..]].concat()] {
            let clearing = RuleSet::streamed_clearing(rules).unwrap();
            let roomy = RuleSet::streamed(rules).unwrap();
            for text in &texts {
                let whole = roomy.first_hit(text).map(|h| Found {
                    pos: h.start,
                    check: h.check,
                });
                for pieces in [text.len(), 1, 3] {
                    let mut hb = Holdback::default();
                    let mut found = None;
                    for piece in text.as_bytes().chunks(pieces.max(1)) {
                        hb.push(std::str::from_utf8(piece).unwrap());
                        found = found.or(hb.scan(&clearing));
                        if let Some(hit) = whole {
                            assert!(hb.confirmed() <= hit.pos, "{text:?} released a match");
                        }
                    }
                    hb.end();
                    assert_eq!(found.or(hb.scan(&clearing)), whole, "{text:?} in {pieces}s");
                }
            }
            let clears = clearing.automaton().map_or(0, |a| a.clears());
            assert!(clears > 100, "the cache was cleared {clears} times");
        }
    }

    #[test]
    fn exhaustively_folded_text_is_read_as_the_whole_text_is_searched() {
        // A ligature that folds to two letters, a full-width letter and a zero-width space, around
        // rules that begin inside the ligature, span it, and need a word boundary.
        let rules = RuleSet::streamed(&[
            (0, compile_pattern("ffa", 3).unwrap()),
            (1, compile_pattern(r"(?-u:\b)if(?-u:\b)", 2).unwrap()),
            (2, compile_forbidden_text("ia").unwrap()),
        ])
        .unwrap();
        let alphabet = ['f', 'a', 'i', ' ', '\u{FB01}', '\u{200B}', '\u{FF46}'];
        for text in texts_of(&alphabet, 5) {
            let whole = rules.first_hit(&text).map(|h| Found {
                pos: text[..h.start].chars().count(),
                check: h.check,
            });
            let mut hb = Holdback::default();
            let mut found = None;
            for c in text.chars() {
                hb.push(&c.to_string());
                found = found.or(hb.scan(&rules));
                if let Some(hit) = whole {
                    assert!(hb.confirmed() <= hit.pos, "{text:?} released a match");
                }
            }
            hb.end();
            found = found.or(hb.scan(&rules));
            assert_eq!(found, whole, "{text:?} read a character at a time");
            let mut at_once = Holdback::default();
            at_once.push(&text);
            let first = at_once.scan(&rules);
            at_once.end();
            assert_eq!(first.or(at_once.scan(&rules)), whole, "{text:?} at once");
        }
    }

    #[test]
    fn in_a_ligature_the_match_at_its_first_folded_letter_is_named() {
        // "ﬃ" folds to "ffi": the search finds "f" first (check 2); "i", an earlier check, starts
        // later in the folded text, at the same character as written. (The x{0,5} keeps the
        // match uncertain until the text ends, while a later start could still name another.)
        let rules = RuleSet::streamed(&[
            (0, compile_forbidden_text("i").unwrap()),
            (2, compile_pattern("fx{0,5}", 6).unwrap()),
        ])
        .unwrap();
        let hit = rules.first_hit("a \u{FB03}").unwrap();
        let expected = Some(Found { pos: 2, check: 2 });
        assert_eq!(hit.check, 2);
        for pieces in [&["a \u{FB03}"][..], &["a ", "\u{FB03}"]] {
            let (mut hb, found) = pushed(&rules, pieces);
            hb.end();
            assert_eq!(found.or(hb.scan(&rules)), expected, "{pieces:?}");
        }
    }

    #[test]
    fn invisible_characters_inside_forbidden_text_do_not_hide_it_from_a_stream() {
        let rules = rules();
        let (_, found) = pushed(&rules, &["the se", "\u{200B}", "c\u{00AD}r", "ｅt is out"]);
        assert_eq!(found, Some(Found { pos: 4, check: 2 }));
        // However many invisible characters follow a start, it is held, never released early.
        let mut hb = Holdback::default();
        hb.push("a sec");
        for _ in 0..500 {
            hb.push("\u{200B}");
            assert_eq!(hb.scan(&rules), None);
            assert_eq!(hb.confirmed(), 2);
        }
        hb.push("ret");
        hb.push(" more");
        assert_eq!(hb.scan(&rules), Some(Found { pos: 2, check: 2 }));
    }
}
