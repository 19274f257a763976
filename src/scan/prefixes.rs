//! The prefixes of a stage's matches, read backwards: where, at the end of a stream's text so far,
//! forbidden text could still begin (`stream::holdback`'s reading ahead).
//!
//! For a pattern `r`, `prefixes(r)` matches exactly the texts some continuation turns into a match
//! of `r` (the empty text included), built on the syntax: a concatenation `r1 r2 … rn` is
//! `P(r1) | r1 (P(r2) | r2 (… | r(n-1) P(rn)))` (linear in size), a repetition of at most `m` is
//! up to `m - 1` whole repetitions then a prefix of one more, a class or a literal character is
//! itself or nothing. An assertion (`\b`, `^`, `$`) is itself or nothing: at the end of the text
//! so far, the character after it is not known yet; inside a prefix it is decided as in a match.
//! A lazy DFA of all of a stage's prefixes, reversed and anchored, reads the text from its end
//! backwards until no longer suffix can be a prefix: the earliest start it matched at is where
//! the text held back begins. It reads the held text and a character or two before it, not the
//! stream.

use std::cell::RefCell;

use regex_automata::hybrid::dfa::{Cache, DFA};
use regex_automata::nfa::thompson;
use regex_automata::util::{start, syntax};
use regex_automata::Anchored;
use regex_syntax::hir::{Hir, HirKind, Repetition};

/// The most memory the prefixes' automaton may take (per stage and VM). Rules whose prefixes
/// need more (large Unicode classes repeated many times: `\w{1,64}` is 64 copies of `\w`, ~5 MB
/// reversed) are read start by start, as before there was this automaton.
const NFA_LIMIT: usize = 4 << 20;

/// The reversed prefixes of a stage's rules, and the cache its states live in (one per VM).
#[derive(Debug)]
pub(super) struct Prefixes {
    dfa: DFA,
    cache: RefCell<Cache>,
}

impl Prefixes {
    /// `sources`: the stage's patterns, each already compiled on its own; `capacity`: the
    /// cache's, as the stream automaton's.
    pub(super) fn new(sources: &[&str], capacity: usize) -> Option<Self> {
        let hirs = syntax::parse_many(sources).ok()?;
        let prefixes: Vec<Hir> = hirs.iter().map(prefixes).collect::<Option<_>>()?;
        let nfa = thompson::Compiler::new()
            .configure(
                thompson::Config::new()
                    .reverse(true)
                    .which_captures(thompson::WhichCaptures::None)
                    .nfa_size_limit(Some(NFA_LIMIT)),
            )
            .build_many_from_hir(&prefixes)
            .ok()?;
        let dfa = DFA::builder()
            .configure(super::stream_config(capacity))
            .build_from_nfa(nfa)
            .ok()?;
        let cache = RefCell::new(dfa.create_cache());
        Some(Self { dfa, cache })
    }

    /// The first position of `text` (bytes) from which the rest of it could still begin a match,
    /// `text.len()` when none; `before`: the byte before `text` (`None`: it starts the stream).
    /// `None` when the automaton cannot tell (a byte it gives up on, such as non-ASCII beside a
    /// Unicode `\b`, or its cache borrowed).
    pub(super) fn held_from(&self, text: &[u8], before: Option<u8>) -> Option<usize> {
        let mut cache = self.cache.try_borrow_mut().ok()?;
        let cache = &mut *cache;
        // Backwards from the end: the character after the text is not known yet.
        let config = start::Config::new().anchored(Anchored::Yes);
        let mut state = self.dfa.start_state(cache, &config).ok()?;
        let mut held = text.len();
        for at in (0..text.len()).rev() {
            let byte = *text.get(at)?;
            state = self.dfa.next_state(cache, state, byte).ok()?;
            if state.is_tagged() {
                if state.is_dead() {
                    return Some(held);
                }
                if state.is_quit() {
                    return None;
                }
                // A match is seen one byte late: the text from `at + 1` on is a prefix.
                if state.is_match() {
                    held = at + 1;
                }
            }
        }
        state = match before {
            Some(byte) => self.dfa.next_state(cache, state, byte).ok()?,
            None => self.dfa.next_eoi_state(cache, state).ok()?,
        };
        if state.is_quit() {
            return None;
        }
        Some(if state.is_match() { 0 } else { held })
    }
}

/// Every prefix of a match of `hir`, the empty one included; `None` for a literal that is not
/// UTF-8 (rules are parsed as UTF-8, so none is): fewer prefixes would release text too early.
fn prefixes(hir: &Hir) -> Option<Hir> {
    let or_nothing = |hir: Hir| Hir::alternation(vec![Hir::empty(), hir]);
    Some(match hir.kind() {
        HirKind::Empty => Hir::empty(),
        // Character by character: a stream's text ends between characters.
        HirKind::Literal(literal) => {
            std::str::from_utf8(&literal.0)
                .ok()?
                .chars()
                .rev()
                .fold(Hir::empty(), |rest, c| {
                    let c = Hir::literal(c.encode_utf8(&mut [0; 4]).as_bytes());
                    or_nothing(Hir::concat(vec![c, rest]))
                })
        }
        HirKind::Class(_) | HirKind::Look(_) => or_nothing(hir.clone()),
        HirKind::Repetition(rep) => match rep.max {
            Some(0) => Hir::empty(),
            max => Hir::concat(vec![
                Hir::repetition(Repetition {
                    min: 0,
                    max: max.map(|m| m - 1),
                    greedy: rep.greedy,
                    sub: rep.sub.clone(),
                }),
                prefixes(&rep.sub)?,
            ]),
        },
        HirKind::Capture(capture) => prefixes(&capture.sub)?,
        HirKind::Concat(parts) => {
            let mut parts = parts.iter().rev();
            let Some(last) = parts.next() else {
                return Some(Hir::empty());
            };
            parts.try_fold(prefixes(last)?, |rest, part| {
                Some(Hir::alternation(vec![
                    prefixes(part)?,
                    Hir::concat(vec![part.clone(), rest]),
                ]))
            })?
        }
        HirKind::Alternation(alternatives) => {
            Hir::alternation(alternatives.iter().map(prefixes).collect::<Option<_>>()?)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(patterns: &[&str], text: &str, before: Option<u8>) -> Option<usize> {
        Prefixes::new(patterns, DFA::config().get_cache_capacity())
            .unwrap()
            .held_from(text.as_bytes(), before)
    }

    #[test]
    fn only_a_suffix_that_can_still_become_a_match_is_held() {
        let iban = r"NL\d{2}[A-Z]{4}\d{10}";
        assert_eq!(held(&[iban], "pay to NL91AB", None), Some(7));
        assert_eq!(held(&[iban], "word word word", None), Some(14));
        assert_eq!(held(&[iban], "NL9 no", None), Some(6));
        assert_eq!(held(&["secret"], "it is a sec", None), Some(8));
        assert_eq!(held(&["secret", iban], "a sec N", None), Some(6));
    }

    #[test]
    fn a_counted_repetition_is_held_no_longer_than_its_bound() {
        let text = "a".repeat(20);
        assert_eq!(held(&["[a-z]{1,5}@x"], &text, None), Some(15));
        assert_eq!(held(&["[a-z]{1,5}@x"], "aaa@", None), Some(0));
        assert_eq!(held(&["[a-z]{1,5}@x"], "aaa@y", None), Some(4));
        assert_eq!(held(&["[a-z]{1,5}@x"], "aaa@-", None), Some(5));
    }

    #[test]
    fn assertions_are_decided_inside_the_prefix_and_open_at_its_end() {
        let cat = r"\bcat\b";
        assert_eq!(held(&[cat], "a cat", None), Some(2));
        assert_eq!(held(&[cat], "a cats", None), Some(6));
        assert_eq!(held(&[cat], "scat", None), Some(4));
        // The byte before the text decides a `\b` or `^` at its first position.
        assert_eq!(held(&[cat], "cat", Some(b's')), Some(3));
        assert_eq!(held(&[cat], "cat", Some(b' ')), Some(0));
        assert_eq!(held(&["^[0-9]{3}"], "12", None), Some(0));
        assert_eq!(held(&["^[0-9]{3}"], "12", Some(b'x')), Some(2));
        assert_eq!(held(&["[0-9]{3}$"], "x12", None), Some(1));
    }

    #[test]
    fn prefixes_too_large_for_their_limit_are_not_built() {
        // 64 copies of `\w` reversed: over the limit, so such a stage reads start by start.
        let capacity = DFA::config().get_cache_capacity();
        assert!(Prefixes::new(&[r"\w{1,64}@\w{1,63}"], capacity).is_none());
        assert!(Prefixes::new(&[r"[a-z0-9._%+-]{1,64}@[a-z0-9-]{1,63}"], capacity).is_some());
    }

    #[test]
    fn non_ascii_beside_a_unicode_word_boundary_cannot_be_told() {
        assert_eq!(held(&[r"\bgeheim\b"], "ab geh", None), Some(3));
        assert_eq!(held(&[r"\bgeheim\b"], "égeh", None), None);
    }
}
