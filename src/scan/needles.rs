//! The bytes a text must hold for any rule of a stage to match, found without the automaton.
//!
//! Every match of a rule holds at least one byte of a set read off the rule's syntax (an IBAN
//! pattern needs a digit, an e-mail pattern an `@`, a forbidden word its rarest letter). Where the
//! union of a stage's sets is rare in text (no letter, no space), the stage's searches run only
//! in windows around those bytes, each as wide as the stage's longest match on either side: a
//! match lies wholly inside the window of any of its needed bytes, so no match is missed, and
//! every window is searched inside the whole text (assertions such as `\b` see the real
//! neighbours), so none is invented. Text holding none of the bytes is clean after one table
//! pass; text holding many is searched whole, as without this.

use regex_syntax::hir::{Class, Hir, HirKind};
use regex_syntax::ParserBuilder;

use crate::lanes::{Cover, BLOCK};

/// A set of byte values.
#[derive(Clone, PartialEq, Eq)]
pub struct ByteSet([bool; 256]);

impl std::fmt::Debug for ByteSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set()
            .entries((0..=255u8).filter(|b| self.has(*b)))
            .finish()
    }
}

impl ByteSet {
    fn empty() -> Self {
        Self([false; 256])
    }

    fn of(bytes: impl IntoIterator<Item = u8>) -> Self {
        let mut set = Self::empty();
        for b in bytes {
            if let Some(slot) = set.0.get_mut(usize::from(b)) {
                *slot = true;
            }
        }
        set
    }

    fn union(mut self, other: &Self) -> Self {
        for (mine, theirs) in self.0.iter_mut().zip(other.0.iter()) {
            *mine |= *theirs;
        }
        self
    }

    pub fn has(&self, byte: u8) -> bool {
        // Any u8 is in range: the lookup compiles without a check.
        self.0.get(usize::from(byte)).copied().unwrap_or(false)
    }

    /// How often text is expected to hold one of these bytes: a rough rank of bytes in prose,
    /// to choose the rarest set a rule needs and to give up on a common one.
    fn commonness(&self) -> u32 {
        (0..=255u8).filter(|b| self.has(*b)).map(commonness).sum()
    }
}

/// Letters and spaces are everywhere in text, capitals and common punctuation often, digits and
/// the rest seldom.
fn commonness(b: u8) -> u32 {
    match b {
        b'a'..=b'z' | b' ' => 100,
        b'A'..=b'Z' | b'.' | b',' | b'\n' => 20,
        b'0'..=b'9' | b'\'' | b'"' | b'?' | b'!' | b':' | b';' | b'(' | b')' => 5,
        _ => 1,
    }
}

/// Above this a stage's needed bytes are too common in text for windows to pay (any lowercase
/// letter or the space alone is 100).
const TOO_COMMON: u32 = 99;

/// One set the matches of `hir` each hold a byte of; `None` when some match may hold none of a
/// useful set (it can be empty, or is built only of look-arounds).
fn needed(hir: &Hir) -> Option<ByteSet> {
    match hir.kind() {
        HirKind::Empty | HirKind::Look(_) => None,
        HirKind::Literal(lit) => lit
            .0
            .iter()
            .copied()
            .min_by_key(|b| commonness(*b))
            .map(|b| ByteSet::of([b])),
        HirKind::Class(Class::Bytes(class)) => {
            Some(ByteSet::of(class.iter().flat_map(|r| r.start()..=r.end())))
        }
        HirKind::Class(Class::Unicode(class)) => {
            Some(ByteSet::of(class.iter().flat_map(|r| {
                first_bytes(u32::from(r.start()), u32::from(r.end()))
            })))
        }
        HirKind::Repetition(rep) if rep.min == 0 => None,
        HirKind::Repetition(rep) => needed(&rep.sub),
        HirKind::Capture(cap) => needed(&cap.sub),
        HirKind::Concat(parts) => parts
            .iter()
            .filter_map(needed)
            .min_by_key(ByteSet::commonness),
        HirKind::Alternation(alts) => alts
            .iter()
            .try_fold(ByteSet::empty(), |set, alt| Some(set.union(&needed(alt)?))),
    }
}

/// The first bytes of the UTF-8 encodings of the characters `lo..=hi`: within one encoded length
/// the first byte grows with the character, so each length's part is one run of first bytes.
fn first_bytes(lo: u32, hi: u32) -> impl Iterator<Item = u8> {
    const LENGTHS: [(u32, u32); 4] = [
        (0, 0x7F),
        (0x80, 0x7FF),
        (0x800, 0xFFFF),
        (0x1_0000, 0x10_FFFF),
    ];
    LENGTHS.into_iter().flat_map(move |(from, to)| {
        let (a, b) = (lo.max(from), hi.min(to));
        match (first_byte(a), first_byte(b)) {
            (Some(x), Some(y)) if a <= b => Some(x..=y),
            _ => None,
        }
        .into_iter()
        .flatten()
    })
}

fn first_byte(c: u32) -> Option<u8> {
    let mut buf = [0u8; 4];
    char::from_u32(c)
        // A surrogate has no encoding: its neighbour's first byte is the same (0xED).
        .or_else(|| char::from_u32(0xD7FF).filter(|_| (0xD800..=0xDFFF).contains(&c)))
        .and_then(|ch| ch.encode_utf8(&mut buf).as_bytes().first().copied())
}

/// A stage's windows: its needed bytes and how far around one of them a match can reach.
#[derive(Debug, Clone)]
pub struct Needles {
    bytes: ByteSet,
    /// A test that holds every needed byte: what a text is scanned for, a block at a time (a
    /// block may hit with no needed byte in it, see [`crate::lanes`]).
    cover: Cover,
    /// The longest match of the stage, in bytes (a character is at most four).
    reach: usize,
}

impl Needles {
    /// For rules given as regex sources (parsed as the automaton parses them) and the stage's
    /// longest match in characters; `None` when the stage's needed bytes are common in text.
    pub fn new<'a>(sources: impl IntoIterator<Item = &'a str>, longest: usize) -> Option<Self> {
        let mut bytes = ByteSet::empty();
        for source in sources {
            let hir = ParserBuilder::new().build().parse(source).ok()?;
            bytes = bytes.union(&needed(&hir)?);
        }
        if bytes.commonness() > TOO_COMMON {
            return None;
        }
        Some(Self {
            cover: Cover::of_set(&bytes.0)?,
            bytes,
            reach: longest.saturating_mul(4),
        })
    }

    /// Where the first needed byte at or after `at` is: blocks the cover does not hit are
    /// skipped whole, and the first that it hits is read byte by byte.
    fn next_needed(&self, text: &[u8], at: usize) -> Option<usize> {
        let rest = text.get(at..)?;
        let mut offset = 0;
        for block in rest.chunks_exact(BLOCK) {
            if let Ok(block) = <&[u8; BLOCK]>::try_from(block) {
                if self.cover.hits(block) {
                    if let Some(i) = block.iter().position(|b| self.bytes.has(*b)) {
                        return Some(at + offset + i);
                    }
                }
            }
            offset += BLOCK;
        }
        rest.get(offset..)?
            .iter()
            .position(|b| self.bytes.has(*b))
            .map(|i| at + offset + i)
    }

    /// The stretches of `text` any match lies in, in order and disjoint; `None` when they would
    /// cover half of it or more (then the whole text is searched as one).
    pub fn windows(&self, text: &[u8]) -> Option<Vec<(usize, usize)>> {
        let mut windows: Vec<(usize, usize)> = Vec::new();
        let mut covered = 0usize;
        let mut at = 0;
        while let Some(p) = self.next_needed(text, at) {
            let (mut start, mut end) = (
                p.saturating_sub(self.reach),
                p.saturating_add(self.reach)
                    .saturating_add(1)
                    .min(text.len()),
            );
            // Out to character boundaries: a window never starts or ends inside a character.
            while start > 0 && text.get(start).is_some_and(|b| is_continuation(*b)) {
                start -= 1;
            }
            while text.get(end).is_some_and(|b| is_continuation(*b)) {
                end += 1;
            }
            match windows.last_mut() {
                Some(last) if start <= last.1 => {
                    covered += end.saturating_sub(last.1);
                    last.1 = last.1.max(end);
                }
                _ => {
                    covered += end - start;
                    windows.push((start, end));
                }
            }
            if covered.saturating_mul(2) >= text.len() {
                return None;
            }
            at = p + 1;
        }
        Some(windows)
    }
}

/// A byte inside a UTF-8 character, not its first.
fn is_continuation(b: u8) -> bool {
    b & 0xC0 == 0x80
}

#[cfg(test)]
mod tests {
    use super::*;

    fn needles(sources: &[&str], longest: usize) -> Option<Needles> {
        Needles::new(sources.iter().copied(), longest)
    }

    fn set_of(source: &str) -> Vec<u8> {
        let hir = ParserBuilder::new().build().parse(source).unwrap();
        let set = needed(&hir).unwrap();
        (0..=255u8).filter(|b| set.has(*b)).collect()
    }

    #[test]
    fn a_rule_needs_its_rarest_part() {
        assert_eq!(set_of("[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}"), b"0123456789");
        assert_eq!(set_of("[a-z]{1,64}@[a-z]{1,63}"), b"@");
        assert_eq!(set_of("sk-[A-Za-z0-9]{32}"), b"-");
        assert_eq!(set_of("(?i:project-bluebird)"), b"-");
        assert_eq!(set_of("cat|dog"), b"cd");
    }

    #[test]
    fn an_alternation_needs_one_of_each_branch() {
        let set = set_of("x7|y@");
        assert!(set.contains(&b'7') && set.contains(&b'@'), "{set:?}");
    }

    #[test]
    fn non_ascii_classes_need_their_first_bytes() {
        // é is C3 A9, € is E2 82 AC, 😀 is F0 9F 98 80.
        assert_eq!(set_of("é"), vec![0xC3]);
        assert_eq!(set_of("[é€😀]"), vec![0xC3, 0xE2, 0xF0]);
        assert_eq!(
            set_of("[\u{7F}-\u{800}]"),
            vec![
                0x7F, 0xC2, 0xC3, 0xC4, 0xC5, 0xC6, 0xC7, 0xC8, 0xC9, 0xCA, 0xCB, 0xCC, 0xCD, 0xCE,
                0xCF, 0xD0, 0xD1, 0xD2, 0xD3, 0xD4, 0xD5, 0xD6, 0xD7, 0xD8, 0xD9, 0xDA, 0xDB, 0xDC,
                0xDD, 0xDE, 0xDF, 0xE0
            ]
        );
    }

    #[test]
    fn rules_that_need_common_bytes_or_nothing_have_no_needles() {
        assert!(
            needles(&["password"], 8).is_none(),
            "letters are everywhere"
        );
        assert!(
            needles(&["[0-9]{4}", "a?b?"], 4).is_none(),
            "a rule that can need nothing"
        );
        assert!(needles(&["[0-9]{4}", r"\b[0-9]"], 4).is_some());
    }

    #[test]
    fn windows_reach_a_match_either_side_of_a_needed_byte_and_merge() {
        let n = needles(&["[0-9]{2}"], 2).unwrap();
        let text = [b"x".repeat(100), b"7".to_vec(), b"x".repeat(100)].concat();
        assert_eq!(n.windows(&text), Some(vec![(92, 109)]));
        assert_eq!(n.windows(b"nothing to see here"), Some(vec![]));
        let two = [
            b"x".repeat(50),
            b"12".to_vec(),
            b"x".repeat(100),
            b"3".to_vec(),
            b"x".repeat(100),
        ]
        .concat();
        assert_eq!(n.windows(&two), Some(vec![(42, 60), (144, 161)]));
        // Windows covering half the text or more: searched whole.
        assert_eq!(n.windows(b"x1x2x3x4x5"), None);
    }

    #[test]
    fn a_set_is_its_ranges() {
        let set = ByteSet::of(b"0123456789@-".iter().copied().chain([0, 255]));
        assert_eq!(
            crate::lanes::ranges_of(&set.0),
            vec![(0, 0), (b'-', b'-'), (b'0', b'9'), (b'@', b'@'), (255, 255)]
        );
        assert_eq!(crate::lanes::ranges_of(&ByteSet::empty().0), vec![]);
    }

    /// The first needed byte found at every offset and length around the block edges, among bytes
    /// the cover holds that are not in the set.
    #[test]
    fn the_next_needed_byte_is_the_first_in_the_set_past_blocks_that_only_look_like_it() {
        let n = needles(&["[0-9]", "[@]", "[-]", "[;]", "[#]"], 1).unwrap();
        // Natively five ranges: the nearest two ('0'..='9' and ';') are joined, so the cover
        // holds ':' (the wasm build's tables hold the set exactly).
        assert_eq!(
            n.cover.hits(&[b':'; BLOCK]),
            cfg!(not(all(target_arch = "wasm32", target_feature = "simd128")))
        );
        let decoys = b":::x:";
        for len in 0..(3 * BLOCK) {
            let text: Vec<u8> = (0..len).map(|i| decoys[i % decoys.len()]).collect();
            assert_eq!(n.next_needed(&text, 0), None, "{len}");
            for at in 0..len {
                for needle in [b'5', b'@', b'-', b';'] {
                    let mut t = text.clone();
                    t[at] = needle;
                    for from in [0, at / 2, at, at + 1] {
                        let want = (from <= at).then_some(at);
                        assert_eq!(n.next_needed(&t, from), want, "{len} {at} {from}");
                    }
                }
            }
        }
    }
}
