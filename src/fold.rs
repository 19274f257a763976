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

use unicode_normalization::{is_nfkc_quick, IsNormalized, UnicodeNormalization};

/// Calls `emit` with each character `c` folds to: none for an invisible character, itself for
/// most, several for a ligature.
#[inline]
pub fn fold_char(c: char, mut emit: impl FnMut(char)) {
    // Below U+00A0 nothing folds (ASCII and the C1 controls are their own NFKC).
    if c < '\u{a0}' {
        emit(c);
        return;
    }
    if is_invisible(c) {
        return;
    }
    if is_nfkc_quick(std::iter::once(c)) == IsNormalized::Yes {
        emit(c);
        return;
    }
    for d in std::iter::once(c).nfkc() {
        if !is_invisible(d) {
            emit(d);
        }
    }
}

/// Whether `c` folds to itself alone.
#[inline]
pub fn folds_to_itself(c: char) -> bool {
    c < '\u{a0}' || (!is_invisible(c) && is_nfkc_quick(std::iter::once(c)) == IsNormalized::Yes)
}

/// `text` folded; borrowed when nothing in it folds (all ASCII text, most text).
pub fn fold(text: &str) -> Cow<'_, str> {
    if crate::swar::is_ascii(text.as_bytes()) {
        return Cow::Borrowed(text);
    }
    let Some((first, _)) = text.char_indices().find(|&(_, c)| !folds_to_itself(c)) else {
        return Cow::Borrowed(text);
    };
    let (head, rest) = text.split_at(first);
    let mut folded = String::with_capacity(text.len());
    folded.push_str(head);
    for c in rest.chars() {
        fold_char(c, |d| folded.push(d));
    }
    Cow::Owned(folded)
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
