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
    /// The channel's text is complete.
    ended: bool,
    /// Only counts: the text is read whole elsewhere (nothing streams, so nothing is held back).
    passive: bool,
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
        if self.passive || rules.is_empty() {
            self.window.clear();
            self.read = 0;
            self.read_pos = self.len;
            return None;
        }
        // One borrow of the automaton's cache for all the new text.
        let mut dfa = rules.automaton();
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
        }
        certain
    }

    /// Every new folded character starts a thread (until a match was found: nothing after it
    /// matters), and every live thread reads every new byte of the folded text.
    fn read_new(&mut self, dfa: &mut Dfa<'_>) {
        let window = std::mem::take(&mut self.window);
        let mut at = self.read;
        for c in window.get(self.read..).unwrap_or_default().chars() {
            let mut sub = 0;
            crate::fold::fold_char(c, |f| {
                self.read_folded(dfa, f, at, sub);
                sub += f.len_utf8();
            });
            at += c.len_utf8();
            self.read_pos += 1;
        }
        self.read = at;
        self.window = window;
    }

    /// One folded character `f`, byte `sub` of the folded form of the character at byte `at`.
    fn read_folded(&mut self, dfa: &mut Dfa<'_>, f: char, at: usize, sub: usize) {
        if let (Ok(b), Some(a)) = (u8::try_from(f), dfa.as_mut()) {
            if b.is_ascii() && self.read_plain(a, b, at, sub) {
                return;
            }
        }
        if self.found.is_none() {
            if self.threads.iter().all(|t| t.state.is_none()) {
                self.clears = clears(dfa);
            }
            let start = dfa.as_mut().map_or(Step::Unknown, |a| a.start(self.last));
            let state = match start {
                Step::Dead => None,
                Step::Live { state, .. } => Some(Some(state)),
                Step::Unknown => Some(None),
            };
            if let Some(state) = state {
                self.threads.push(Thread {
                    pos: self.read_pos,
                    at,
                    sub,
                    folded: self.folded,
                    state,
                });
            }
            self.forget_if_cleared(dfa);
        }
        let mut bytes = [0; 4];
        for &b in f.encode_utf8(&mut bytes).as_bytes() {
            self.step_all(dfa, |a, state| a.step(state, b));
            self.last = Some(b);
        }
        self.folded += 1;
        self.merge();
    }

    /// [`Self::read_folded`] for the common character, with the same outcome: an ASCII byte that
    /// ends no match and that every live start (and the new one at it) reads in the automaton,
    /// with no match found yet and a handful of threads. The next states are worked out first and
    /// kept only if all of that holds; otherwise nothing changed (`false`) and the general path
    /// reads the character (a step is a pure function of the state and the byte, so reading it
    /// again gives the same states; a cache clear meanwhile is seen there as any clear is).
    fn read_plain(&mut self, a: &mut Automaton<'_>, b: u8, at: usize, sub: usize) -> bool {
        let n = self.threads.len();
        if self.found.is_some() || n >= FEW_THREADS {
            return false;
        }
        if n == 0 {
            self.clears = a.clears();
        } else if a.clears() != self.clears {
            return false;
        }
        let plain = |step: Step| match step {
            Step::Dead => Some(None),
            Step::Live {
                state,
                matched: None,
            } => Some(Some(state)),
            _ => None,
        };
        // The next state of every thread, in order (`None`: it died).
        let mut next = [None; FEW_THREADS];
        for (slot, t) in next.iter_mut().zip(&self.threads) {
            let Some(state) = t.state else {
                return false;
            };
            match plain(a.step(state, b)) {
                Some(state) => *slot = state,
                None => return false,
            }
        }
        let fresh = match plain(a.start(self.last)) {
            Some(Some(state)) => match plain(a.step(state, b)) {
                Some(state) => state,
                None => return false,
            },
            Some(None) => None,
            None => return false,
        };
        if a.clears() != self.clears {
            return false;
        }
        // Threads in the same state have the same future: the earliest is kept.
        let mut kept = 0;
        for i in 0..n {
            let (Some(Some(state)), Some(t)) = (next.get(i).copied(), self.threads.get(i).copied())
            else {
                continue;
            };
            if next.get(..i).is_some_and(|e| e.contains(&Some(state))) {
                continue;
            }
            if let Some(slot) = self.threads.get_mut(kept) {
                *slot = Thread {
                    state: Some(state),
                    ..t
                };
            }
            kept += 1;
        }
        self.threads.truncate(kept);
        if let Some(state) = fresh {
            if !self.threads.iter().any(|t| t.state == Some(state)) {
                self.threads.push(Thread {
                    pos: self.read_pos,
                    at,
                    sub,
                    folded: self.folded,
                    state: Some(state),
                });
            }
        }
        self.last = Some(b);
        self.folded += 1;
        true
    }

    /// The end of the text: assertions at the end are decided, and no thread reads further.
    fn read_end(&mut self, dfa: &mut Dfa<'_>) {
        self.step_all(dfa, |a, state| a.step_end(state));
        // Every automaton thread has now said all it will; searches decide the rest.
        self.threads.retain(|t| t.state.is_none());
    }

    /// Moves every automaton thread on by `step`, recording matches and dropping dead threads.
    /// A state is never used after the automaton's cache was cleared (by any stream): from then
    /// on its thread is decided by a search.
    fn step_all(
        &mut self,
        dfa: &mut Dfa<'_>,
        step: impl Fn(&mut Automaton<'_>, LazyStateID) -> Step,
    ) {
        let mut matched = Vec::new();
        let clears = self.clears;
        self.threads.retain_mut(|t| {
            let (Some(a), Some(state)) = (dfa.as_mut(), t.state) else {
                t.state = None;
                return true;
            };
            if a.clears() != clears {
                t.state = None;
                return true;
            }
            match step(a, state) {
                Step::Dead => false,
                Step::Live { state, matched: m } => {
                    t.state = Some(state);
                    matched.extend(m.map(|check| (Found { pos: t.pos, check }, t.folded)));
                    true
                }
                Step::Unknown => {
                    t.state = None;
                    true
                }
            }
        });
        self.forget_if_cleared(dfa);
        for (found, folded) in matched {
            self.record(found, folded);
        }
    }

    fn forget_if_cleared(&mut self, dfa: &Dfa<'_>) {
        let now = clears(dfa);
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
    /// and there the earliest check.
    fn record(&mut self, found: Found, folded: usize) {
        let better = self
            .found
            .is_none_or(|f| (found.pos, found.check) < (f.pos, f.check));
        if better {
            self.found = Some(found);
            self.found_folded = folded;
        }
        // Later starts cannot come before it.
        self.threads.retain(|t| t.pos <= found.pos);
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
        for text in texts(5) {
            let whole = rules.first_hit(&text);
            let mut hb = Holdback::default();
            let mut found = None;
            for (i, c) in text.char_indices() {
                hb.push(&c.to_string());
                found = found.or(hb.scan(&rules));
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
