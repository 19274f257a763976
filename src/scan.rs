//! One multi-pattern automaton per agent version and stage: every rule check of that stage at once.

use regex_automata::meta::Regex;
use regex_automata::{Input, MatchKind, PatternSet};

use crate::pattern::Rule;

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
}

/// Where the leftmost forbidden text starts, and which check found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hit {
    pub check: usize,
    /// Byte offset of the match start in the scanned text.
    pub start: usize,
}

impl RuleSet {
    /// Compiles `(check index, rule)` pairs. Each rule was already validated on its own.
    pub fn new(rules: &[(usize, Rule)]) -> Result<Self, String> {
        let longest = rules.iter().map(|(_, r)| r.longest).max().unwrap_or(0);
        let checks = rules.iter().map(|(i, _)| *i).collect();
        let (regex, every) = if rules.is_empty() {
            (None, None)
        } else {
            let sources: Vec<&str> = rules.iter().map(|(_, r)| r.regex.as_str()).collect();
            let build = |kind| {
                Regex::builder()
                    .configure(Regex::config().match_kind(kind))
                    .build_many(&sources)
                    .map_err(|e| match e.size_limit() {
                        // The error may quote a pattern; keep only its kind.
                        Some(limit) => format!(
                            "the rules together exceed the automaton size limit ({limit} bytes)"
                        ),
                        None => "the rules could not be compiled together".to_owned(),
                    })
            };
            (
                Some(build(MatchKind::LeftmostFirst)?),
                Some(build(MatchKind::All)?),
            )
        };
        Ok(Self {
            regex,
            every,
            checks,
            longest,
        })
    }

    /// The longest match any rule allows, in characters: how far a stream is held back.
    pub fn longest(&self) -> usize {
        self.longest
    }

    pub fn is_empty(&self) -> bool {
        self.regex.is_none()
    }

    /// The leftmost match in `text`; among matches starting at the same place, the earliest check.
    pub fn first_hit(&self, text: &str) -> Option<Hit> {
        let regex = self.regex.as_ref()?;
        let m = regex.find(text)?;
        let check = *self.checks.get(m.pattern().as_usize())?;
        Some(Hit {
            check,
            start: m.start(),
        })
    }

    /// The leftmost match starting at or after byte `from` of `haystack`. The text before `from`
    /// is context only: look-around assertions (`\b`, `^`) read it, so a window of a longer text
    /// scans as the whole text would.
    pub fn first_hit_in(&self, haystack: &str, from: usize) -> Option<Hit> {
        let regex = self.regex.as_ref()?;
        // `range` panics past the end; `from` is clamped first.
        let input = Input::new(haystack).range(from.min(haystack.len())..);
        let m = regex.find(input)?;
        let check = *self.checks.get(m.pattern().as_usize())?;
        Some(Hit {
            check,
            start: m.start(),
        })
    }

    /// Every check with a match anywhere in `text`, in check order.
    pub fn failed_checks(&self, text: &str) -> Vec<usize> {
        let Some(regex) = self.every.as_ref() else {
            return Vec::new();
        };
        let mut set = PatternSet::new(regex.pattern_len());
        regex.which_overlapping_matches(&Input::new(text), &mut set);
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
    #[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
    use wasm_bindgen_test::wasm_bindgen_test as test;

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
    fn context_before_the_window_is_read_by_assertions_only() {
        let rules = RuleSet::new(&[(1, compile_pattern(r"\bcat\b", 3).unwrap())]).unwrap();
        assert_eq!(rules.first_hit_in("bobcat", 3), None);
        assert_eq!(
            rules.first_hit_in("a cat", 2),
            Some(Hit { check: 1, start: 2 })
        );
        let start = RuleSet::new(&[(0, compile_pattern("^x", 1).unwrap())]).unwrap();
        assert_eq!(start.first_hit_in("ax", 1), None);
    }

    #[test]
    fn an_empty_set_never_matches() {
        let rules = RuleSet::new(&[]).unwrap();
        assert!(rules.is_empty());
        assert_eq!(rules.first_hit("password"), None);
    }
}
