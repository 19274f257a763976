//! One multi-pattern automaton per agent version and stage: every rule check of that stage at once.
//!
//! Besides the searches over a whole text, a stage has a lazy DFA that reads a stream one byte at a
//! time from a given start ([`Automaton::start`], [`Automaton::read`]): a streamed answer carries its
//! state across events instead of rescanning, and holds back only text that can still become the
//! start of a match (`stream::holdback`).

use std::borrow::Cow;
use std::cell::{OnceCell, RefCell};

use regex_automata::hybrid::dfa::{Cache, DFA};
use regex_automata::hybrid::LazyStateID;
use regex_automata::meta::Regex;
use regex_automata::util::start;
use regex_automata::{Anchored, Input, MatchKind, PatternSet};

use crate::fold::{fold, original_offset};
use crate::pattern::Rule;

mod needles;
mod prefixes;

use needles::Needles;
use prefixes::Prefixes;

/// The rule checks of one stage, compiled together.
#[derive(Debug)]
pub struct RuleSet {
    /// Leftmost-first: where the first forbidden text starts.
    regex: Option<Regex>,
    /// All matches, overlapping: which checks failed (a rule whose match hides inside another's too).
    every: Option<Regex>,
    /// Automaton pattern id → index of the check in its version.
    checks: Vec<usize>,
    longest: usize,
    /// Every rule, anchored, all matches: read a byte at a time from a start.
    stream: Option<Streamer>,
    /// Where in a text the searches over whole texts need to look, when the rules need rare bytes.
    needles: Option<Needles>,
}

/// The lazy DFA and the cache its states live in, shared by every stream of the VM (one thread).
#[derive(Debug)]
struct Streamer {
    dfa: DFA,
    cache: RefCell<Cache>,
    /// No rule has an assertion (`\b`, `^`, `$`): a match's start does not depend on the byte
    /// before it, so every start is the same state.
    look_free: bool,
    /// The rules' prefixes, read backwards: where text that could still become a match begins.
    /// Built on the first stream that needs it (a version that never streams never pays for it);
    /// `None` inside: too large to build, and streams read start by start.
    prefixes: OnceCell<Option<Prefixes>>,
    /// What the prefixes are built from: the rules' patterns, and the cache's capacity.
    sources: Vec<String>,
    capacity: usize,
}

/// A lazy DFA that reads a stream a byte at a time: every match reported (a stream needs all of
/// them), Unicode `\b` on ASCII (it gives up on a non-ASCII byte beside one), a cache of
/// `capacity` bytes shared by the VM's streams.
fn stream_config(capacity: usize) -> regex_automata::hybrid::dfa::Config {
    DFA::config()
        .match_kind(MatchKind::All)
        .unicode_word_boundary(true)
        .cache_capacity(capacity)
        // Below the least that works, that least.
        .skip_cache_capacity_check(true)
}

/// Where a match that began at some start stands after a byte ([`Automaton::read`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// No match can begin at that start any more.
    Dead,
    /// A match may still follow. `matched`: a match of that check ended before this byte.
    Live {
        state: LazyStateID,
        matched: Option<usize>,
    },
    /// The automaton cannot tell here (a byte it gives up on, such as non-ASCII next to a
    /// Unicode `\b`): the caller decides that start with [`RuleSet::match_at`] instead.
    Unknown,
}

/// [`RuleSet::automaton`]: reads matches from given starts, a byte at a time.
pub struct Automaton<'a> {
    dfa: &'a DFA,
    cache: std::cell::RefMut<'a, Cache>,
    checks: &'a [usize],
    look_free: bool,
    /// With `look_free`, the start once looked up, and the cache's clear count then.
    start: Option<(usize, Step)>,
}

impl Automaton<'_> {
    /// Where a match beginning after `look_behind` (the byte before it; `None` at the start of the
    /// text) starts, before any byte of it was read.
    #[inline]
    pub fn start(&mut self, look_behind: Option<u8>) -> Step {
        if let Some((clears, step)) = self.start {
            if clears == self.clears() {
                return step;
            }
        }
        let config = start::Config::new()
            .anchored(Anchored::Yes)
            .look_behind(look_behind);
        let state = self.dfa.start_state(&mut self.cache, &config).ok();
        let step = self.step_of(state);
        if self.look_free {
            self.start = Some((self.clears(), step));
        }
        step
    }

    /// Where every match beginning at or after a position (`look_behind`: the byte before it)
    /// stands before any byte was read: the automaton reading ahead for all starts at once, which
    /// says that some match ended ([`Self::read`] stops at it) but not where it began. `None`
    /// when it cannot tell (a byte it gives up on).
    pub fn unanchored(&mut self, look_behind: Option<u8>) -> Option<LazyStateID> {
        let config = start::Config::new()
            .anchored(Anchored::No)
            .look_behind(look_behind);
        let state = self.dfa.start_state(&mut self.cache, &config).ok()?;
        (!state.is_tagged()).then_some(state)
    }

    /// Reads `bytes` from `state` up to the first state that is not plain (a match, the end of
    /// every match, a byte it gives up on): how many bytes were read, and where that left the
    /// match; all of them read, `Live` without a match. The step of the common byte is a
    /// transition lookup alone, with no [`Step`] made for it.
    #[inline]
    pub fn read(&mut self, mut state: LazyStateID, bytes: &[u8]) -> (usize, Step) {
        let cache = &mut *self.cache;
        for (i, &b) in bytes.iter().enumerate() {
            match self.dfa.next_state(cache, state, b) {
                Ok(next) if !next.is_tagged() => state = next,
                next => return (i + 1, self.tagged_step(next.ok())),
            }
        }
        (
            bytes.len(),
            Step::Live {
                state,
                matched: None,
            },
        )
    }

    /// Reads the end of the text.
    #[inline]
    pub fn step_end(&mut self, state: LazyStateID) -> Step {
        let state = self.dfa.next_eoi_state(&mut self.cache, state).ok();
        self.step_of(state)
    }

    /// How many times the states handed out so far were thrown away: a state from before a clear
    /// means nothing after it (the cache is bounded; a clear is rare).
    #[inline]
    pub fn clears(&self) -> usize {
        self.cache.clear_count()
    }

    #[inline(always)]
    fn step_of(&self, state: Option<LazyStateID>) -> Step {
        match state {
            // Most states: no tag (not dead, quit, unknown or matching, and not a start).
            Some(state) if !state.is_tagged() => Step::Live {
                state,
                matched: None,
            },
            _ => self.tagged_step(state),
        }
    }

    /// [`Self::step_of`] for the rarer states, kept out of line so the common step stays small.
    #[inline(never)]
    fn tagged_step(&self, state: Option<LazyStateID>) -> Step {
        match state {
            None => Step::Unknown,
            Some(state) if state.is_dead() => Step::Dead,
            Some(state) if state.is_quit() || state.is_unknown() => Step::Unknown,
            Some(state) => {
                let matched = state.is_match().then(|| {
                    (0..self.dfa.match_len(&self.cache, state))
                        .filter_map(|i| {
                            let pattern = self.dfa.match_pattern(&self.cache, state, i);
                            self.checks.get(pattern.as_usize()).copied()
                        })
                        .min()
                });
                Step::Live {
                    state,
                    matched: matched.flatten(),
                }
            }
        }
    }
}

/// Where the leftmost forbidden text starts, and which check found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hit {
    pub check: usize,
    /// Byte offset of the match start in the scanned text.
    pub start: usize,
}

/// Why rules that each compiled alone could not be compiled together. Never quotes a pattern:
/// config errors are logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleSetError {
    /// The automaton of all of them together exceeds its size limit (in bytes).
    TooLarge { limit: usize },
    /// Any other reason.
    NotTogether,
}

impl std::fmt::Display for RuleSetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TooLarge { limit } => write!(
                f,
                "the rules together exceed the automaton size limit ({limit} bytes)"
            ),
            Self::NotTogether => f.write_str("the rules could not be compiled together"),
        }
    }
}

impl RuleSet {
    /// Compiles `(check index, rule)` pairs for searches over whole texts (the input stage). Each
    /// rule was already validated on its own.
    pub fn new(rules: &[(usize, Rule)]) -> Result<Self, RuleSetError> {
        Self::build(rules, None)
    }

    /// Like [`RuleSet::new`], and the automaton a stream is read with, a byte at a time (the
    /// output stage).
    pub fn streamed(rules: &[(usize, Rule)]) -> Result<Self, RuleSetError> {
        Self::build(rules, Some(DFA::config().get_cache_capacity()))
    }

    /// [`RuleSet::streamed`] with the smallest cache the automaton works with: it is cleared
    /// every few states, so the readers' handling of clears is exercised.
    #[cfg(test)]
    pub(crate) fn streamed_clearing(rules: &[(usize, Rule)]) -> Result<Self, RuleSetError> {
        Self::build(rules, Some(0))
    }

    /// `stream`: the stream automaton's cache capacity, when the set has one.
    fn build(rules: &[(usize, Rule)], stream: Option<usize>) -> Result<Self, RuleSetError> {
        let longest = rules.iter().map(|(_, r)| r.longest).max().unwrap_or(0);
        let checks = rules.iter().map(|(i, _)| *i).collect();
        let needles = Needles::new(rules.iter().map(|(_, r)| r.regex.as_str()), longest);
        let (regex, every, stream) = if rules.is_empty() {
            (None, None, None)
        } else {
            let sources: Vec<&str> = rules.iter().map(|(_, r)| r.regex.as_str()).collect();
            let build = |kind| {
                Regex::builder()
                    .configure(Regex::config().match_kind(kind))
                    .build_many(&sources)
                    .map_err(|e| match e.size_limit() {
                        // The error may quote a pattern; keep only its kind.
                        Some(limit) => RuleSetError::TooLarge { limit },
                        None => RuleSetError::NotTogether,
                    })
            };
            let stream = if let Some(capacity) = stream {
                let dfa = DFA::builder()
                    .configure(stream_config(capacity))
                    .build_many(&sources)
                    .map_err(|_| RuleSetError::NotTogether)?;
                let cache = RefCell::new(dfa.create_cache());
                let look_free = dfa.get_nfa().look_set_any().is_empty();
                Some(Streamer {
                    dfa,
                    cache,
                    look_free,
                    prefixes: OnceCell::new(),
                    sources: sources.iter().map(|s| (*s).to_owned()).collect(),
                    capacity,
                })
            } else {
                None
            };
            (
                Some(build(MatchKind::LeftmostFirst)?),
                Some(build(MatchKind::All)?),
                stream,
            )
        };
        Ok(Self {
            regex,
            every,
            checks,
            longest,
            stream,
            needles,
        })
    }

    /// The stage's stream automaton, its cache borrowed for one read of new text (one borrow, not
    /// one per byte). `None` without one (a set built for searches only) or while another read
    /// holds it: every start is then left to a search, slower, never wrong.
    pub fn automaton(&self) -> Option<Automaton<'_>> {
        let stream = self.stream.as_ref()?;
        Some(Automaton {
            dfa: &stream.dfa,
            cache: stream.cache.try_borrow_mut().ok()?,
            checks: &self.checks,
            look_free: stream.look_free,
            start: None,
        })
    }

    /// The first position of folded `text` (bytes, from where a stream's held text begins) from
    /// which the rest of it could still begin a match; `text.len()` when none. `before`: the byte
    /// before `text` (`None`: the stream's start). `None` when it cannot be told here (no stream
    /// automaton, or a byte it gives up on): the caller reads the text start by start instead.
    pub fn held_from(&self, text: &[u8], before: Option<u8>) -> Option<usize> {
        let stream = self.stream.as_ref()?;
        let prefixes = stream.prefixes.get_or_init(|| {
            let sources: Vec<&str> = stream.sources.iter().map(String::as_str).collect();
            Prefixes::new(&sources, stream.capacity)
        });
        prefixes.as_ref()?.held_from(text, before)
    }

    /// The check whose match begins at byte `at` of `haystack`, decided by a search: `haystack`
    /// is folded text already ([`crate::fold`]) and must hold the whole text after `at` that a
    /// match could cover (or the whole text); the text before `at` is context for assertions.
    /// Among checks matching there, the earliest.
    pub fn match_at(&self, haystack: &str, at: usize) -> Option<usize> {
        let regex = self.regex.as_ref()?;
        let input = Input::new(haystack)
            .range(at.min(haystack.len())..)
            .anchored(Anchored::Yes);
        let m = regex.find(input)?;
        self.checks.get(m.pattern().as_usize()).copied()
    }

    /// The longest match any rule allows, in characters: how far a stream is held back.
    pub fn longest(&self) -> usize {
        self.longest
    }

    /// The earliest check of the stage that is a rule.
    pub fn first_check(&self) -> Option<usize> {
        self.checks.iter().copied().min()
    }

    pub fn is_empty(&self) -> bool {
        self.regex.is_none()
    }

    /// The leftmost match in `text`, read folded ([`crate::fold`]); among matches starting at the
    /// same place, the earliest check. `start` is in `text` itself: the first character of the
    /// match as written.
    pub fn first_hit(&self, text: &str) -> Option<Hit> {
        let regex = self.regex.as_ref()?;
        let folded = fold(text);
        let haystack: &str = folded.as_ref();
        let m = match self.windows(haystack) {
            Some(windows) => windows
                .into_iter()
                .find_map(|(a, b)| regex.find(Input::new(haystack).span(a..b)))?,
            None => regex.find(haystack)?,
        };
        let check = *self.checks.get(m.pattern().as_usize())?;
        let start = match folded {
            Cow::Borrowed(_) => m.start(),
            Cow::Owned(_) => original_offset(text, m.start()),
        };
        Some(Hit { check, start })
    }

    /// The stretches of folded `text` that hold every match, when the rules need rare bytes and
    /// the text holds few of them (`needles`); `None`: search it whole.
    fn windows(&self, text: &str) -> Option<Vec<(usize, usize)>> {
        self.needles.as_ref()?.windows(text.as_bytes())
    }

    /// Every check with a match anywhere in `text`, read folded, in check order.
    ///
    /// Most texts hold no match: one search that stops at the first match says so (measured ~20%
    /// cheaper than the overlapping search, natively and in V8, on the bench rules), and only a
    /// text that holds one is searched again for every check that matches.
    pub fn failed_checks(&self, text: &str) -> Vec<usize> {
        let (Some(first), Some(regex)) = (self.regex.as_ref(), self.every.as_ref()) else {
            return Vec::new();
        };
        let text = fold(text);
        let haystack: &str = text.as_ref();
        let any = match self.windows(haystack) {
            Some(windows) => windows
                .into_iter()
                .any(|(a, b)| first.is_match(Input::new(haystack).span(a..b))),
            None => first.is_match(haystack),
        };
        if !any {
            return Vec::new();
        }
        let mut set = PatternSet::new(regex.pattern_len());
        regex.which_overlapping_matches(&Input::new(text.as_ref()), &mut set);
        let mut failed: Vec<usize> = set
            .iter()
            .filter_map(|p| self.checks.get(p.as_usize()).copied())
            .collect();
        failed.sort_unstable();
        failed
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::pattern::{compile_forbidden_text, compile_pattern};

    fn iban_and_password() -> RuleSet {
        RuleSet::new(&[
            (0, compile_forbidden_text("password").unwrap()),
            (3, compile_pattern(r"NL\d{2}[A-Z]{4}\d{10}", 18).unwrap()),
        ])
        .unwrap()
    }

    #[test]
    fn leftmost_match_wins_and_names_its_check() {
        let rules = iban_and_password();
        let text = "pay NL91ABNA0417164300 with Password";
        assert_eq!(rules.first_hit(text), Some(Hit { check: 3, start: 4 }));
        assert_eq!(rules.failed_checks(text), vec![0, 3]);
    }

    #[test]
    fn clean_text_fails_nothing() {
        let rules = iban_and_password();
        assert_eq!(rules.first_hit("all good"), None);
        assert!(rules.failed_checks("all good").is_empty());
    }

    #[test]
    fn hold_back_is_the_longest_rule() {
        assert_eq!(iban_and_password().longest(), 18);
        assert_eq!(RuleSet::new(&[]).unwrap().longest(), 0);
    }

    #[test]
    fn rules_read_the_folded_text_and_name_the_original_start() {
        let rules = iban_and_password();
        // "ｐａｓｓ" is 3 bytes a character; the zero-width space before it is 3 bytes too.
        let text = "my \u{200B}ｐａｓｓ\u{200B}word";
        assert_eq!(rules.first_hit(text), Some(Hit { check: 0, start: 6 }));
        assert_eq!(rules.failed_checks(text), vec![0]);
        assert_eq!(
            rules.first_hit("pay ＮＬ91ABNA0417164300"),
            Some(Hit { check: 3, start: 4 })
        );
    }

    /// The windows change nothing: the same first hit and failing checks as a search of the whole
    /// text, on texts dense and sparse in the bytes the rules need, with word boundaries and
    /// anchors at the windows' edges and characters of several bytes around them.
    #[cfg(not(target_arch = "wasm32"))]
    mod windows_agree {
        use super::*;
        use proptest::prelude::*;

        const RULES: [(&str, usize); 9] = [
            ("[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}", 34),
            ("[0-9]{4}[ -]?[0-9]{4}", 9),
            (
                "[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}\\.[A-Za-z]{2,6}",
                135,
            ),
            (r"\b[0-9]{2}\b", 2),
            ("^[0-9]{3}", 3),
            ("[0-9]{3}$", 3),
            ("é[0-9]", 2),
            ("x@y|-z", 3),
            (r"(?i:ab-c)", 4),
        ];
        const PIECES: [&str; 14] = [
            "a", "b", "c", " ", "1", "2", "@", "-", "é", "AB", "x", "y", ".", "\u{200B}",
        ];
        /// Whole matches, or nearly, so that matches meet windows' edges often.
        const MATCHES: [&str; 10] = [
            "NL91ABNAXXXXXXXXXXXXXXX7",
            "1234 5678",
            "a.very.long.local.part.of.an.address.that.goes.on.and.on@b.cd",
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa@host-name.example",
            " 12 ",
            "é7",
            "x@y",
            "-z",
            "AB-C",
            "123",
        ];

        fn text() -> impl Strategy<Value = String> {
            prop::collection::vec(
                prop_oneof![
                    8 => Just("word ".to_owned()),
                    1 => (0..PIECES.len()).prop_map(|i| PIECES[i].to_owned()),
                    1 => (0..MATCHES.len()).prop_map(|i| MATCHES[i].to_owned()),
                ],
                0..400,
            )
            .prop_map(|parts| parts.concat())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(400))]
            #[test]
            fn same_as_the_whole_text(which in prop::collection::vec(any::<bool>(), RULES.len()), text in text()) {
                let rules: Vec<(usize, Rule)> = RULES
                    .iter()
                    .zip(&which)
                    .filter(|(_, on)| **on)
                    .enumerate()
                    .map(|(i, ((source, longest), _))| (i, compile_pattern(source, *longest).unwrap()))
                    .collect();
                let with = RuleSet::new(&rules).unwrap();
                let mut whole = RuleSet::new(&rules).unwrap();
                whole.needles = None;
                prop_assert_eq!(with.first_hit(&text), whole.first_hit(&text));
                prop_assert_eq!(with.failed_checks(&text), whole.failed_checks(&text));
            }
        }
    }

    #[test]
    fn the_prefixes_are_built_on_the_first_stream_that_needs_them() {
        let rules = RuleSet::streamed(&[(0, compile_forbidden_text("secret").unwrap())]).unwrap();
        let built = |rules: &RuleSet| rules.stream.as_ref().unwrap().prefixes.get().is_some();
        assert!(!built(&rules), "not at configure time");
        assert_eq!(rules.held_from(b"a sec", None), Some(2));
        assert!(built(&rules));
        assert_eq!(rules.held_from(b"a se", None), Some(2));
    }

    #[test]
    fn an_empty_set_never_matches() {
        let rules = RuleSet::new(&[]).unwrap();
        assert!(rules.is_empty());
        assert_eq!(rules.first_hit("password"), None);
    }
}
