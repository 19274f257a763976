//! Rule patterns: RE2 syntax, a bounded longest match, and nothing that matches everything or nothing.
//!
//! A streamed answer holds back only text that could still begin a match, which is never more than
//! the longest match any output rule allows: every rule must prove that bound in characters (not
//! bytes: the hold-back counts characters of decoded text).

use regex_syntax::hir::{Class, Hir, HirKind};
use regex_syntax::ParserBuilder;

/// The longest a pattern's source may be.
pub const MAX_PATTERN_LEN: usize = 500;
/// The largest `max_match` an operator may declare: the most characters a stream is held back.
pub const MAX_MATCH_LIMIT: usize = 200;

/// A rule, checked and ready to join a stage's automaton.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Regex source for the automaton (a `not_contains` text is escaped and case-insensitive).
    pub regex: String,
    /// The longest possible match, in characters.
    pub longest: usize,
}

/// Why a pattern or forbidden text was refused. Never quotes the pattern: config errors are logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatternError {
    TooLong { len: usize },
    Syntax(String),
    Unbounded,
    LongerThanMaxMatch { longest: usize, max_match: usize },
    MatchesEmpty,
    MatchesNothing,
    MaxMatchOutOfRange { max_match: usize },
    EmptyText,
    TextTooLong { len: usize },
    Unfolded,
}

impl std::fmt::Display for PatternError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TooLong { len } => write!(
                f,
                "is {len} characters long; at most {MAX_PATTERN_LEN} are allowed"
            ),
            Self::Syntax(why) => write!(f, "is not RE2 syntax: {why}"),
            Self::Unbounded => write!(
                f,
                "has no longest match (an unbounded repetition such as `*`, `+` or `{{n,}}`); bound it"
            ),
            Self::LongerThanMaxMatch { longest, max_match } => write!(
                f,
                "can match up to {longest} characters, more than max_match {max_match}"
            ),
            Self::MatchesEmpty => write!(f, "matches the empty text, so it would match everywhere"),
            Self::MatchesNothing => write!(f, "can never match anything"),
            Self::MaxMatchOutOfRange { max_match } => write!(
                f,
                "max_match {max_match} is out of range: it must be 1 to {MAX_MATCH_LIMIT}"
            ),
            Self::EmptyText => write!(
                f,
                "is empty (invisible characters do not count: rule checks never see them)"
            ),
            Self::Unfolded => write!(
                f,
                "holds a character that rule checks never see as written: they read text folded \
                 (invisible characters removed; full-width letters, ligatures and other \
                 compatibility forms as their plain form), so write its folded form"
            ),
            Self::TextTooLong { len } => write!(
                f,
                "is {len} characters long; forbidden text may be at most {MAX_MATCH_LIMIT}"
            ),
        }
    }
}

impl std::error::Error for PatternError {}

/// Checks an RE2-syntax pattern against its declared `max_match`.
pub fn compile_pattern(source: &str, max_match: usize) -> Result<Rule, PatternError> {
    let len = source.chars().count();
    if len > MAX_PATTERN_LEN {
        return Err(PatternError::TooLong { len });
    }
    if max_match == 0 || max_match > MAX_MATCH_LIMIT {
        return Err(PatternError::MaxMatchOutOfRange { max_match });
    }
    let hir = ParserBuilder::new()
        .build()
        .parse(source)
        .map_err(|e| PatternError::Syntax(syntax_reason(&e)))?;
    match hir.properties().minimum_len() {
        None => return Err(PatternError::MatchesNothing),
        Some(0) => return Err(PatternError::MatchesEmpty),
        Some(_) => {}
    }
    if !literals_are_folded(&hir) {
        return Err(PatternError::Unfolded);
    }
    let longest = longest_match(&hir).ok_or(PatternError::Unbounded)?;
    if longest > max_match {
        return Err(PatternError::LongerThanMaxMatch { longest, max_match });
    }
    Ok(Rule {
        regex: source.to_owned(),
        longest,
    })
}

/// A `not_contains` text as a rule: matched literally, ignoring case, folded as the text it is
/// matched against is ([`crate::fold`]), so `ｐａｓｓ` forbids what `pass` forbids.
pub fn compile_forbidden_text(text: &str) -> Result<Rule, PatternError> {
    let len = text.chars().count();
    if len > MAX_MATCH_LIMIT {
        return Err(PatternError::TextTooLong { len });
    }
    let folded = crate::fold::fold(text);
    let longest = folded.chars().count();
    if longest == 0 {
        return Err(PatternError::EmptyText);
    }
    Ok(Rule {
        regex: format!("(?i:{})", regex_syntax::escape(&folded)),
        longest,
    })
}

/// The longest text, in characters, that `hir` can match; `None` when unbounded.
fn longest_match(hir: &Hir) -> Option<usize> {
    match hir.kind() {
        HirKind::Empty | HirKind::Look(_) => Some(0),
        HirKind::Literal(lit) => Some(String::from_utf8_lossy(&lit.0).chars().count()),
        HirKind::Class(Class::Unicode(_)) => Some(1),
        // A byte class only arises in non-UTF-8 mode, which the parser is never put in; a byte is
        // at most one character.
        HirKind::Class(Class::Bytes(_)) => Some(1),
        HirKind::Repetition(rep) => {
            let max = usize::try_from(rep.max?).ok()?;
            longest_match(&rep.sub)?.checked_mul(max)
        }
        HirKind::Capture(cap) => longest_match(&cap.sub),
        HirKind::Concat(parts) => parts
            .iter()
            .try_fold(0usize, |sum, part| sum.checked_add(longest_match(part)?)),
        HirKind::Alternation(alts) => alts
            .iter()
            .try_fold(0usize, |max, alt| Some(max.max(longest_match(alt)?))),
    }
}

/// Whether every literal of `hir` is text as rule checks read it: a literal that folds to something
/// else ([`crate::fold`]) could never match.
fn literals_are_folded(hir: &Hir) -> bool {
    match hir.kind() {
        HirKind::Literal(lit) => String::from_utf8_lossy(&lit.0)
            .chars()
            .all(crate::fold::folds_to_itself),
        HirKind::Empty | HirKind::Look(_) | HirKind::Class(_) => true,
        HirKind::Repetition(rep) => literals_are_folded(&rep.sub),
        HirKind::Capture(cap) => literals_are_folded(&cap.sub),
        HirKind::Concat(parts) | HirKind::Alternation(parts) => {
            parts.iter().all(literals_are_folded)
        }
    }
}

/// The parser's reason without the pattern it quotes (config errors are logged; patterns are not).
fn syntax_reason(err: &regex_syntax::Error) -> String {
    match err {
        regex_syntax::Error::Parse(e) => {
            format!("{} at character {}", e.kind(), char_offset(e.span()))
        }
        regex_syntax::Error::Translate(e) => {
            format!("{} at character {}", e.kind(), char_offset(e.span()))
        }
        _ => "unsupported syntax".to_owned(),
    }
}

fn char_offset(span: &regex_syntax::ast::Span) -> usize {
    span.start.column.saturating_sub(1)
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn dutch_iban_is_exactly_eighteen_characters() {
        let rule = compile_pattern(r"NL\d{2}[A-Z]{4}\d{10}", 18).unwrap();
        assert_eq!(rule.longest, 18);
    }

    #[test]
    fn longest_match_counts_characters_not_bytes() {
        assert_eq!(compile_pattern("é{3}", 3).unwrap().longest, 3);
        assert_eq!(compile_pattern("日本", 2).unwrap().longest, 2);
    }

    #[test]
    fn alternation_takes_its_longest_branch() {
        assert_eq!(compile_pattern("ab|abcdef|x", 6).unwrap().longest, 6);
        assert_eq!(compile_pattern(r"\bfoo(bar)?\b", 6).unwrap().longest, 6);
    }

    #[test]
    fn unbounded_repetition_is_refused() {
        for p in [".*x", r"\w+", "a{3,}", "(ab)*c"] {
            assert_eq!(compile_pattern(p, 200), Err(PatternError::Unbounded), "{p}");
        }
    }

    #[test]
    fn longest_match_over_max_match_is_refused() {
        assert_eq!(
            compile_pattern(r"\d{19}", 18),
            Err(PatternError::LongerThanMaxMatch {
                longest: 19,
                max_match: 18
            })
        );
    }

    #[test]
    fn backreferences_and_lookaround_are_not_re2() {
        for p in [r"(a)\1", "a(?=b)", "a(?!b)", "(?<=a)b"] {
            assert!(
                matches!(compile_pattern(p, 10), Err(PatternError::Syntax(_))),
                "{p}"
            );
        }
    }

    #[test]
    fn syntax_errors_never_quote_the_pattern() {
        let err = compile_pattern("secret(", 10).unwrap_err().to_string();
        assert!(!err.contains("secret"), "{err}");
    }

    #[test]
    fn patterns_that_match_empty_or_nothing_are_refused() {
        assert_eq!(compile_pattern("a?", 1), Err(PatternError::MatchesEmpty));
        assert_eq!(compile_pattern(r"\b", 1), Err(PatternError::MatchesEmpty));
        assert_eq!(
            compile_pattern(r"[^\s\S]", 1),
            Err(PatternError::MatchesNothing)
        );
    }

    #[test]
    fn pattern_length_and_max_match_have_limits() {
        let long = "a".repeat(501);
        assert_eq!(
            compile_pattern(&long, 200),
            Err(PatternError::TooLong { len: 501 })
        );
        assert_eq!(
            compile_pattern("a", 201),
            Err(PatternError::MaxMatchOutOfRange { max_match: 201 })
        );
        assert_eq!(
            compile_pattern("a", 0),
            Err(PatternError::MaxMatchOutOfRange { max_match: 0 })
        );
    }

    #[test]
    fn forbidden_text_is_literal_and_ignores_case() {
        let rule = compile_forbidden_text("pass.word").unwrap();
        assert_eq!(rule.longest, 9);
        let re = regex_automata::meta::Regex::new(&rule.regex).unwrap();
        assert!(re.is_match("my PASS.WORD is"));
        assert!(!re.is_match("my passXword is"));
    }

    #[test]
    fn a_pattern_literal_rule_checks_never_see_is_refused() {
        for p in [
            "ｐａｓｓ",
            "\u{FB01}le",
            "pass\u{200B}word",
            r"\x{200B}",
            "a|x\u{00AD}",
        ] {
            assert_eq!(compile_pattern(p, 20), Err(PatternError::Unfolded), "{p:?}");
        }
        assert!(
            compile_pattern("[ａ-ｚ]x", 2).is_ok(),
            "classes may hold anything"
        );
        assert!(compile_pattern("café", 4).is_ok());
    }

    #[test]
    fn forbidden_text_is_folded_as_the_text_it_reads() {
        let rule = compile_forbidden_text("ｐａｓｓ\u{200B}word").unwrap();
        assert_eq!(rule.longest, 8);
        let re = regex_automata::meta::Regex::new(&rule.regex).unwrap();
        assert!(re.is_match("the PASSWORD"));
    }

    #[test]
    fn forbidden_text_must_be_short_and_non_empty() {
        assert_eq!(compile_forbidden_text(""), Err(PatternError::EmptyText));
        assert_eq!(
            compile_forbidden_text("\u{200B}\u{00AD}"),
            Err(PatternError::EmptyText),
            "only invisible characters"
        );
        assert_eq!(
            compile_forbidden_text(&"x".repeat(201)),
            Err(PatternError::TextTooLong { len: 201 })
        );
    }
}
