//! The checked text of one channel, scanned as it grows, keeping only what is not yet confirmed.
//!
//! Positions count characters of the channel's checked text. A position is confirmed when no
//! forbidden text can start there: every match starting before `len - longest` ends at least one
//! character before the end of the text read so far, so it and the assertions after it (`\b`, `$`)
//! are decided; one confirmed character stays in the window as context for the assertions before
//! it. Memory is the longest match plus one character plus the latest delta.

use crate::scan::RuleSet;

#[derive(Debug, Default)]
pub(crate) struct Holdback {
    /// Characters pushed so far.
    len: usize,
    /// No forbidden text starts before this position.
    confirmed: usize,
    /// One confirmed character of context (none at the start), then the unconfirmed text.
    window: String,
    /// Byte length of the context at the start of `window`.
    context: usize,
    /// The channel's text is complete.
    ended: bool,
    /// Only counts: the text is read whole elsewhere (nothing streams, so nothing is held back).
    passive: bool,
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

    pub(crate) fn confirmed(&self) -> usize {
        self.confirmed
    }

    pub(crate) fn push(&mut self, text: &str) {
        self.len += text.chars().count();
        if self.passive {
            self.confirmed = self.len;
        } else {
            self.window.push_str(text);
        }
    }

    /// No more text will come: the end of the text is the end of the channel.
    pub(crate) fn end(&mut self) {
        self.ended = true;
    }

    /// Scans the window. Returns the leftmost forbidden text once it is certain; otherwise
    /// confirms as far as nothing can start.
    pub(crate) fn scan(&mut self, rules: &RuleSet) -> Option<Found> {
        if self.passive {
            return None;
        }
        let limit = if self.ended {
            self.len
        } else {
            self.len.saturating_sub(rules.longest())
        };
        if let Some(hit) = rules.first_hit_in(&self.window, self.context) {
            let before = self.window.get(self.context..hit.start).unwrap_or_default();
            let pos = self.confirmed + before.chars().count();
            if self.ended || pos < limit {
                return Some(Found {
                    pos,
                    check: hit.check,
                });
            }
        }
        self.confirm(limit);
        None
    }

    /// Drops confirmed text from the window, keeping one character of context.
    fn confirm(&mut self, to: usize) {
        let Some(advance) = to.checked_sub(self.confirmed).filter(|&n| n > 0) else {
            return;
        };
        let unconfirmed = self.window.get(self.context..).unwrap_or_default();
        let cut = self.context
            + unconfirmed
                .char_indices()
                .nth(advance)
                .map_or(unconfirmed.len(), |(i, _)| i);
        let head = self.window.get(..cut).unwrap_or_default();
        let keep_from = head.char_indices().next_back().map_or(cut, |(i, _)| i);
        self.window = self.window.get(keep_from..).unwrap_or_default().to_owned();
        self.context = cut - keep_from;
        self.confirmed = to;
    }
}

#[cfg(test)]
mod tests {
    #[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use crate::pattern::{compile_forbidden_text, compile_pattern};

    fn rules() -> RuleSet {
        RuleSet::new(&[
            (0, compile_pattern(r"NL\d{2}[A-Z]{4}\d{10}", 18).unwrap()),
            (2, compile_forbidden_text("secret").unwrap()),
        ])
        .unwrap()
    }

    #[test]
    fn confirms_all_but_the_longest_match() {
        let rules = rules();
        let mut hb = Holdback::default();
        hb.push("é".repeat(30).as_str());
        assert_eq!(hb.scan(&rules), None);
        assert_eq!(hb.confirmed(), 12);
        assert_eq!(hb.window.chars().count(), 19);
        hb.end();
        assert_eq!(hb.scan(&rules), None);
        assert_eq!(hb.confirmed(), 30);
    }

    #[test]
    fn a_match_is_certain_only_with_a_character_after_the_longest_match() {
        let rules = RuleSet::new(&[(4, compile_pattern(r"\bcat\b", 3).unwrap())]).unwrap();
        let mut hb = Holdback::default();
        hb.push("a cat");
        assert_eq!(hb.scan(&rules), None);
        hb.push("s");
        assert_eq!(hb.scan(&rules), None);
        hb.push(" and a cat!");
        assert_eq!(hb.scan(&rules), Some(Found { pos: 13, check: 4 }));
    }

    #[test]
    fn a_match_split_over_pushes_is_found_where_it_starts() {
        let rules = rules();
        let mut hb = Holdback::default();
        for piece in [
            "pay N",
            "L91AB",
            "NA0417",
            "164300 now",
            " and more text here",
        ] {
            hb.push(piece);
            if let Some(found) = hb.scan(&rules) {
                assert_eq!(found, Found { pos: 4, check: 0 });
                return;
            }
        }
        panic!("not found");
    }
}
