//! A reference for where rule checks find their first match, written apart from the product
//! (`src/fold.rs`, `src/pattern.rs`, `src/scan`) so that a test comparing with it fails when the
//! product's folding or matching goes wrong, instead of agreeing with it.
//!
//! What it reads is what `docs/normalization.md` promises: each character folded on its own
//! (Unicode's default-ignorable code points removed, the rest replaced by its own NFKC, straight
//! from the `unicode-normalization` crate), a `not_contains` text searched for naively, letter by
//! letter ignoring case, and a pattern by `regex-automata`'s meta regex compiled from the pattern
//! as written. A match's start is mapped back to the character as written that its first folded
//! character came from, through a table built while folding.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use regex_automata::meta::Regex;
use unicode_normalization::UnicodeNormalization;

/// A rule check of the output stage, as the operator wrote it.
#[derive(Debug)]
pub enum Rule {
    /// `not_contains`: the text, folded as the answer is, found ignoring case.
    Text(String),
    /// `matches_pattern`: the pattern, matched as written.
    Pattern(Regex),
}

/// The output stage's rule checks of a policy's single version, read from its JSON.
pub fn output_rules(policy: &str) -> Vec<Rule> {
    let policy: serde_json::Value = serde_json::from_str(policy).unwrap();
    let agents = policy["agents"].as_object().unwrap();
    let versions = agents
        .values()
        .flat_map(|a| a["versions"].as_object().unwrap().values());
    versions
        .flat_map(|v| v["live_checks"].as_array().unwrap().iter())
        .filter(|c| c["stage"] == "output")
        .map(|c| match c["kind"].as_str().unwrap() {
            "not_contains" => Rule::Text(fold(c["expected"].as_str().unwrap()).text),
            "matches_pattern" => Rule::Pattern(Regex::new(c["pattern"].as_str().unwrap()).unwrap()),
            kind => panic!("not a rule check: {kind}"),
        })
        .collect()
}

/// Where in `text` (a byte offset of the text as written) the first match of any of `rules`
/// starts, read folded; `None` when nothing in it matches.
pub fn first_match(rules: &[Rule], text: &str) -> Option<usize> {
    let folded = fold(text);
    let start = rules
        .iter()
        .filter_map(|rule| match rule {
            Rule::Text(needle) => find_ignoring_case(&folded.text, needle),
            Rule::Pattern(regex) => regex.find(&folded.text).map(|m| m.start()),
        })
        .min()?;
    Some(folded.origin[start])
}

/// `text` as rules read it.
pub struct Folded {
    pub text: String,
    /// For each byte of `text`: the byte offset in the original text of the character it came from.
    pub origin: Vec<usize>,
}

/// Each character of `text` on its own: removed when invisible, else its NFKC, less any invisible
/// character that holds.
pub fn fold(text: &str) -> Folded {
    let mut folded = Folded {
        text: String::new(),
        origin: Vec::new(),
    };
    for (at, c) in text.char_indices() {
        if is_default_ignorable(c) {
            continue;
        }
        for d in std::iter::once(c)
            .nfkc()
            .filter(|&d| !is_default_ignorable(d))
        {
            folded.text.push(d);
            folded.origin.extend(std::iter::repeat_n(at, d.len_utf8()));
        }
    }
    folded
}

/// The leftmost place where `needle` starts in `haystack`, letter by letter ignoring case; tried at
/// every character.
fn find_ignoring_case(haystack: &str, needle: &str) -> Option<usize> {
    haystack.char_indices().map(|(at, _)| at).find(|&at| {
        let mut rest = haystack[at..].chars();
        needle
            .chars()
            .all(|n| rest.next().is_some_and(|h| same_letter(h, n)))
    })
}

/// Whether two characters are the same ignoring case (enough for the letters these tests use; the
/// product's `(?i)` is Unicode's simple case folding, the same for them).
fn same_letter(a: char, b: char) -> bool {
    a == b || a.to_lowercase().eq(b.to_lowercase())
}

/// Unicode's Default_Ignorable_Code_Point, as DerivedCoreProperties.txt lists it (Unicode 16).
pub fn is_default_ignorable(c: char) -> bool {
    matches!(u32::from(c),
        0x00AD // soft hyphen
        | 0x034F // combining grapheme joiner
        | 0x061C // Arabic letter mark
        | 0x115F..=0x1160 // Hangul choseong and jungseong fillers
        | 0x17B4..=0x17B5 // Khmer inherent vowels
        | 0x180B..=0x180F // Mongolian free variation selectors, vowel separator
        | 0x200B..=0x200F // zero-width space, (non-)joiner, left-to-right and right-to-left marks
        | 0x202A..=0x202E // bidi embeddings and overrides
        | 0x2060..=0x206F // word joiner, invisible operators, isolates, deprecated formats
        | 0x3164 // Hangul filler
        | 0xFE00..=0xFE0F // variation selectors 1-16
        | 0xFEFF // zero-width no-break space (byte order mark)
        | 0xFFA0 // half-width Hangul filler
        | 0xFFF0..=0xFFF8 // unassigned, reserved as ignorable
        | 0x1BCA0..=0x1BCA3 // shorthand format controls
        | 0x1D173..=0x1D17A // musical symbol beam and phrase controls
        | 0xE0000..=0xE0FFF // tags, variation selectors 17-256, the rest reserved as ignorable
    )
}

/// The reference itself, against what is written down and against Unicode's own tables.
#[cfg(test)]
mod tests {
    use super::*;

    /// The list above is the property as regex-syntax's Unicode tables hold it, code point by
    /// code point.
    #[test]
    fn the_invisible_characters_are_unicodes_default_ignorable_code_points() {
        let property = Regex::new(r"^\p{Default_Ignorable_Code_Point}$").unwrap();
        for c in (0..=0x10FFFFu32).filter_map(char::from_u32) {
            assert_eq!(
                is_default_ignorable(c),
                property.is_match(c.encode_utf8(&mut [0; 4]) as &str),
                "U+{:04X}",
                u32::from(c)
            );
        }
    }

    #[test]
    fn folding_removes_invisible_characters_and_maps_compatibility_forms() {
        let folded = fold("a\u{200B}ｐ\u{FB01}x\u{E0041}𝐲²");
        assert_eq!(folded.text, "apfixy2");
        // a at 0; ｐ (bytes 4-6) at 4; ﬁ (7-9): f and i; x at 10; 𝐲 after the tag (11-14)
        // at 15; ² at 19.
        assert_eq!(folded.origin, vec![0, 4, 7, 7, 10, 15, 19]);
        assert_eq!(
            fold("cafe\u{301} раss").text,
            "cafe\u{301} раss",
            "not composed, not confusables"
        );
    }

    #[test]
    fn the_first_match_is_found_where_it_is_written() {
        let rules = output_rules(
            r#"{"agents": {"a": {"versions": {"1": {"live_checks": [
              {"name": "p", "stage": "output", "kind": "not_contains", "expected": "ｐass"},
              {"name": "i", "stage": "output", "kind": "matches_pattern",
               "pattern": "\\bNL\\d{2}\\b"},
              {"name": "q", "stage": "input", "kind": "not_contains", "expected": "hello"}]}}}}}"#,
        );
        assert_eq!(first_match(&rules, "hello, all clear"), None);
        assert_eq!(
            first_match(&rules, "ok\u{200B} \u{00AD}pa\u{00AD}SSword"),
            Some(8)
        );
        assert_eq!(first_match(&rules, "x ＮＬ12 then pass"), Some(2));
        assert_eq!(
            first_match(&rules, "xNL12 then PASS"),
            Some(11),
            "no word boundary before NL"
        );
        assert_eq!(
            first_match(&rules, "NL12\u{200B}3 Pass"),
            Some(9),
            "read as NL123"
        );
    }
}
