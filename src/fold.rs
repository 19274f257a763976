//! What rule checks read: the text folded so that text that reads the same to a model matches the
//! same (issue 18). Every character is folded on its own, so a stream folds exactly as the whole
//! text does, whatever its splits:
//!
//! - invisible characters are removed: Unicode's default-ignorable code points (zero-width space,
//!   joiners and non-joiner, word joiner, soft hyphen, byte order mark, bidi marks, embeddings,
//!   overrides and isolates, the Unicode tag characters U+E0000-E0FFF, variation selectors,
//!   Hangul fillers, invisible math operators);
//! - compatibility forms become their plain form, the character's own NFKC: full-width and
//!   half-width forms, ligatures (`ﬁ` reads `fi`), mathematical bold / italic / script letters,
//!   circled and parenthesised letters and digits, superscripts, no-break and other spaces.
//!
//! Not folded (written down in `docs/normalization.md`, each with a test): a letter followed by a
//! combining mark stays two characters (`e` + U+0301 is not `é`), look-alike letters of other
//! scripts (Cyrillic `а`) stay themselves, and case is left to the rule (`not_contains` ignores
//! case, a pattern as written).
//!
//! Positions stay those of the original text: a match found in the folded text is mapped back to
//! the original character its first folded character came from ([`original_offset`]), so a cut
//! lands at the first character of the match in what the caller receives.

use std::borrow::Cow;
use std::sync::OnceLock;

use unicode_normalization::{is_nfkc_quick, IsNormalized, UnicodeNormalization};

/// Calls `emit` with each character `c` folds to: none for an invisible character, itself for
/// most, several for a ligature.
#[inline]
pub fn fold_char(c: char, mut emit: impl FnMut(char)) {
    if folds_to_itself(c) {
        emit(c);
        return;
    }
    if is_invisible(c) {
        return;
    }
    for d in std::iter::once(c).nfkc() {
        if !is_invisible(d) {
            emit(d);
        }
    }
}

/// Whether `c` folds to itself alone: below U+00A0 always (ASCII and the C1 controls are their
/// own NFKC), in the rest of the Basic Multilingual Plane as [`SelfFolding`] holds it, beyond it
/// as [`folds_to_itself_by_rule`] says.
#[inline]
pub fn folds_to_itself(c: char) -> bool {
    c < '\u{a0}'
        || SelfFolding::get()
            .holds(c)
            .unwrap_or_else(|| folds_to_itself_by_rule(c))
}

/// Whether `c` folds to itself alone, read off Unicode's properties: not invisible, and its own
/// NFKC by the quick check. Some tens of ns a character natively and ~150 ns in V8 for CJK text
/// (a 1 MiB Chinese question took ~53 ms to fold in V8), so [`SelfFolding`] holds the answer for
/// every character of the Basic Multilingual Plane.
fn folds_to_itself_by_rule(c: char) -> bool {
    c < '\u{a0}' || (!is_invisible(c) && is_nfkc_quick(std::iter::once(c)) == IsNormalized::Yes)
}

/// [`folds_to_itself_by_rule`] for each of the 65,536 code points of the Basic Multilingual Plane,
/// one bit each (8 KiB), computed once per VM ([`warm`] at configure time).
struct SelfFolding([u64; 1024]);

impl SelfFolding {
    fn get() -> &'static Self {
        static TABLE: OnceLock<Box<SelfFolding>> = OnceLock::new();
        TABLE.get_or_init(|| {
            let mut bits = Box::new(Self([0; 1024]));
            for code in 0..=0xFFFFu32 {
                // A surrogate is no character: its bit stays 0 and is never read.
                if char::from_u32(code).is_some_and(folds_to_itself_by_rule) {
                    if let Some(word) = bits.0.get_mut((code / 64) as usize) {
                        *word |= 1 << (code % 64);
                    }
                }
            }
            bits
        })
    }

    /// `Some(whether c folds to itself)` for a character of the Basic Multilingual Plane.
    #[inline]
    fn holds(&self, c: char) -> Option<bool> {
        let code = u32::from(c);
        let word = self.0.get((code / 64) as usize)?;
        Some(word & (1 << (code % 64)) != 0)
    }
}

/// Computes the table [`folds_to_itself`] reads (once per VM), so that no turn waits for it.
pub fn warm() {
    SelfFolding::get();
}

/// `text` folded; borrowed when nothing in it folds (all ASCII text, most text). Runs of ASCII
/// are skipped a stride at a time, the other characters looked up, and what folds to itself is
/// copied a run at a time.
pub fn fold(text: &str) -> Cow<'_, str> {
    let Some(first) = next_folding(text, 0) else {
        return Cow::Borrowed(text);
    };
    let mut folded = String::with_capacity(text.len());
    let (mut at, mut next) = (0, Some(first));
    while let Some(n) = next {
        // `n` begins a character of `text` (`next_folding` found one there).
        let (Some(run), Some(c)) = (
            text.get(at..n),
            text.get(n..).and_then(|t| t.chars().next()),
        ) else {
            break;
        };
        folded.push_str(run);
        fold_char(c, |d| folded.push(d));
        at = n + c.len_utf8();
        next = next_folding(text, at);
    }
    folded.push_str(text.get(at..).unwrap_or_default());
    Cow::Owned(folded)
}

/// Where the first character of `text` from byte `from` on that does not fold to itself begins.
fn next_folding(text: &str, from: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut at = from;
    while let Some(b) = bytes.get(at) {
        if b.is_ascii() {
            at += crate::swar::ascii_len(bytes.get(at..)?);
            continue;
        }
        let c = text.get(at..)?.chars().next()?;
        if !folds_to_itself(c) {
            return Some(at);
        }
        at += c.len_utf8();
    }
    None
}

/// The byte offset in `text` of the character whose folded form holds byte `folded_at` of
/// `fold(text)`; the text's length when `folded_at` is at or past the folded text's end.
pub fn original_offset(text: &str, folded_at: usize) -> usize {
    let mut folded_len = 0;
    for (at, c) in text.char_indices() {
        fold_char(c, |d| folded_len += d.len_utf8());
        if folded_len > folded_at {
            return at;
        }
    }
    text.len()
}

/// Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt): code points that render as
/// nothing unless a font shows them on purpose.
fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{034F}'
            | '\u{061C}'
            | '\u{115F}'..='\u{1160}'
            | '\u{17B4}'..='\u{17B5}'
            | '\u{180B}'..='\u{180F}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{3164}'
            | '\u{FE00}'..='\u{FE0F}'
            | '\u{FEFF}'
            | '\u{FFA0}'
            | '\u{FFF0}'..='\u{FFF8}'
            | '\u{1BCA0}'..='\u{1BCA3}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0000}'..='\u{E0FFF}'
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii_text_is_borrowed_unchanged() {
        assert!(matches!(fold("plain text 123"), Cow::Borrowed(_)));
        assert!(matches!(fold("é日本 café"), Cow::Borrowed(_)));
    }

    #[test]
    fn invisible_characters_are_removed() {
        for c in [
            '\u{200B}',
            '\u{200C}',
            '\u{200D}',
            '\u{2060}',
            '\u{00AD}',
            '\u{FEFF}',
            '\u{200E}',
            '\u{200F}',
            '\u{202A}',
            '\u{202E}',
            '\u{2066}',
            '\u{2069}',
            '\u{061C}',
            '\u{E0001}',
            '\u{E0041}',
            '\u{E007F}',
            '\u{FE0F}',
            '\u{180E}',
            '\u{2062}',
        ] {
            assert_eq!(
                fold(&format!("pass{c}word")),
                "password",
                "U+{:04X}",
                c as u32
            );
        }
    }

    #[test]
    fn compatibility_forms_become_plain() {
        assert_eq!(fold("ｐａｓｓｗｏｒｄ"), "password");
        assert_eq!(fold("ＰＡＳＳ"), "PASS");
        assert_eq!(fold("\u{FB01}le \u{FB00}"), "file ff");
        assert_eq!(fold("𝐩𝐚𝐬𝐬"), "pass", "mathematical bold");
        assert_eq!(fold("𝑝𝑎𝑠𝑠"), "pass", "mathematical italic");
        assert_eq!(fold("ⓟⓐⓢⓢ"), "pass", "circled");
        assert_eq!(fold("x²"), "x2");
        assert_eq!(
            fold("a\u{00A0}b\u{2003}c"),
            "a b c",
            "no-break and em spaces"
        );
        assert_eq!(fold("ｽ"), "ス", "half-width katakana");
    }

    #[test]
    fn what_is_not_folded_stays() {
        assert_eq!(
            fold("cafe\u{0301}"),
            "cafe\u{0301}",
            "combining marks are not composed"
        );
        assert_eq!(fold("раss"), "раss", "Cyrillic look-alikes stay");
        assert_eq!(fold("PassWord"), "PassWord", "case is the rule's business");
        assert_eq!(fold("é"), "é");
        assert_eq!(
            fold("ﾊﾟ"),
            "ハ\u{309A}",
            "a half-width sound mark becomes the combining one, not composed with its letter"
        );
    }

    #[test]
    fn offsets_map_back_to_the_character_that_folded() {
        let text = "a\u{200B}ｐ\u{FB01}x";
        let folded = fold(text);
        assert_eq!(folded, "apfix");
        // a -> 0, p (from ｐ at byte 4) -> 4, f and i (from ﬁ at byte 7) -> 7, x -> 10.
        let mapped: Vec<usize> = (0..folded.len())
            .map(|i| original_offset(text, i))
            .collect();
        assert_eq!(mapped, vec![0, 4, 7, 7, 10]);
        assert_eq!(original_offset(text, folded.len()), text.len());
    }

    /// The table holds what Unicode's properties say, for every character of the Basic
    /// Multilingual Plane.
    #[test]
    fn the_table_agrees_with_the_rule_for_every_bmp_character() {
        let table = SelfFolding::get();
        for c in (0..=0xFFFFu32).filter_map(char::from_u32) {
            assert_eq!(
                table.holds(c),
                Some(folds_to_itself_by_rule(c)),
                "U+{:04X}",
                u32::from(c)
            );
        }
        assert_eq!(table.holds('\u{1D429}'), None, "beyond the BMP: by rule");
        assert!(!folds_to_itself('\u{1D429}') && folds_to_itself('\u{1F600}'));
    }

    /// Folding a text is folding each character of it, whatever runs of ASCII surround the
    /// characters that fold or stay (at every offset around the 32-byte strides).
    #[test]
    fn the_ascii_runs_skipped_change_nothing() {
        let by_char = |text: &str| {
            let mut out = String::new();
            for c in text.chars() {
                fold_char(c, |d| out.push(d));
            }
            out
        };
        for odd in [
            "ü",
            "日",
            "ｐ",
            "\u{200B}",
            "\u{FB01}",
            "𝐩",
            "😀",
            "\u{00A0}",
            "é\u{0301}",
        ] {
            for before in 0..70 {
                for after in [0, 1, 31, 33] {
                    let text = format!(
                        "{}{odd}{}ｘ{}",
                        "a".repeat(before),
                        "b".repeat(after),
                        "c".repeat(after)
                    );
                    assert_eq!(fold(&text), by_char(&text), "{odd:?} {before} {after}");
                    let stays = format!("{}{odd}{}", "a".repeat(before), "b".repeat(after));
                    let folded = fold(&stays);
                    assert_eq!(folded, by_char(&stays), "{odd:?} {before} {after}");
                    // Borrowed only when nothing folds (a combining mark alone may be its own
                    // NFKC without the quick check saying so: then owned, and the same).
                    assert!(
                        !matches!(folded, Cow::Borrowed(_)) || folded == stays.as_str(),
                        "{odd:?} {before} {after}"
                    );
                }
            }
        }
    }

    #[test]
    fn folding_a_character_at_a_time_is_folding_the_text() {
        let text = "ｔｈｅ \u{FB03}x\u{200D}y 𝟙² ①";
        let mut one_by_one = String::new();
        for c in text.chars() {
            fold_char(c, |d| one_by_one.push(d));
        }
        assert_eq!(one_by_one, fold(text));
        assert_eq!(one_by_one, "the ffixy 12 1");
    }
}
