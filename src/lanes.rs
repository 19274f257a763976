//! Byte tests a block of 64 bytes at a time, written so that they compile to a handful of vector
//! instructions: WebAssembly's SIMD in the filter's build (`.cargo/config.toml` enables it) and
//! SSE2 natively. Without vector instructions the same code is a byte-at-a-time loop, slower than a
//! table.
//!
//! Two tests of a block against a set of bytes, one per build ([`Cover`]):
//! - [`Ranges`], natively: at most four byte ranges, each a subtract and an unsigned compare per
//!   lane, in portable code that LLVM compiles to SSE2. How it is written matters (checked in the
//!   `--emit asm` of each): the lanes are ORed per lane and read as one `u128`; an OR of 32 lanes
//!   into one byte, or a `bool` per condition, compiled to an extract per lane. So did ranges known
//!   when compiling (LLVM folds them, then reduces the lanes badly): the ranges are read at run time.
//! - [`Nibbles`], in the wasm build: a byte's low and high halves each look up a class mask in a
//!   16-entry table (`i8x16.swizzle`), and the byte is in the set when the two masks share a bit:
//!   the same few instructions for any set, exact for any set whose high halves fall into at most
//!   eight classes. In V8 four ranges cost ~16-20 instructions per 16 bytes (an unsigned compare is
//!   two), the tables ~10 (see docs/design/012-needle-search.md).
//!
//! Both may hit a block that holds no byte of the set (when the set is too scattered to be held
//! exactly), never miss one that does: a hit is confirmed byte by byte.

/// How many bytes [`Ranges::hits`] tests a step.
pub const BLOCK: usize = 64;

/// At most four byte ranges, tested all at once against every byte of a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ranges {
    /// The ranges' first bytes; a range is `low..=low + span` (unused slots repeat the first).
    low: [u8; 4],
    span: [u8; 4],
}

impl Ranges {
    /// Four ranges, each `(first, last)` with `first <= last` (repeat one to use fewer).
    pub fn of(ranges: [(u8, u8); 4]) -> Self {
        let mut this = Self {
            low: [0; 4],
            span: [0; 4],
        };
        for ((low, span), (first, last)) in this.low.iter_mut().zip(&mut this.span).zip(ranges) {
            (*low, *span) = (first, last.wrapping_sub(first));
        }
        this
    }

    /// Ranges that hold every byte of `ranges` (sorted, disjoint, each `(first, last)`): beyond
    /// four, the two with the fewest bytes between them are joined until four are left, so more
    /// bytes hit, never fewer. `None` for no range.
    pub fn covering(mut ranges: Vec<(u8, u8)>) -> Option<Self> {
        while ranges.len() > 4 {
            let nearest = ranges
                .windows(2)
                .enumerate()
                .min_by_key(|(_, pair)| match pair {
                    [(_, last), (first, _)] => first.saturating_sub(*last),
                    _ => u8::MAX,
                })
                .map(|(i, _)| i)?;
            let (_, last) = ranges.remove(nearest + 1);
            if let Some(range) = ranges.get_mut(nearest) {
                range.1 = last;
            }
        }
        let first = *ranges.first()?;
        let mut four = [first; 4];
        for (slot, range) in four.iter_mut().zip(ranges) {
            *slot = range;
        }
        Some(Self::of(four))
    }

    /// Whether any byte of `block` lies in one of the ranges.
    #[inline]
    pub fn hits(&self, block: &[u8; BLOCK]) -> bool {
        let mut any = [0u8; 16];
        for half in block.chunks_exact(16) {
            for (hit, b) in any.iter_mut().zip(half) {
                for (low, span) in self.low.iter().zip(&self.span) {
                    *hit |= u8::from(b.wrapping_sub(*low) <= *span);
                }
            }
        }
        u128::from_le_bytes(any) != 0
    }
}

/// The block test of this build: [`Nibbles`] in the wasm build (WebAssembly's SIMD has a byte
/// shuffle), [`Ranges`] elsewhere (SSE2 has none).
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub type Cover = Nibbles;
/// The block test of this build: [`Nibbles`] in the wasm build (WebAssembly's SIMD has a byte
/// shuffle), [`Ranges`] elsewhere (SSE2 has none).
#[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
pub type Cover = Ranges;

impl Ranges {
    /// Ranges that hold every byte of `set` ([`Ranges::covering`]); `None` for the empty set.
    pub fn of_set(set: &[bool; 256]) -> Option<Self> {
        Self::covering(ranges_of(set))
    }
}

/// `set` as sorted, disjoint ranges of bytes, each `(first, last)`.
pub fn ranges_of(set: &[bool; 256]) -> Vec<(u8, u8)> {
    let mut ranges: Vec<(u8, u8)> = Vec::new();
    for b in (0..=255u8).filter(|b| set.get(usize::from(*b)).copied().unwrap_or(false)) {
        match ranges.last_mut() {
            Some((_, last)) if u16::from(*last) + 1 == u16::from(b) => *last = b,
            _ => ranges.push((b, b)),
        }
    }
    ranges
}

/// A set of bytes as two 16-entry tables of class masks: byte `b` hits when
/// `low[b & 15] & high[b >> 4]` is not zero. The high halves whose bytes in the set have the same
/// low halves form a class with a bit of its own; with more than eight classes the two whose
/// union adds the fewest bytes are joined, so more bytes hit, never fewer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nibbles {
    low: [u8; 16],
    high: [u8; 16],
}

impl Nibbles {
    /// The tables for `set`; `None` for the empty set.
    pub fn of_set(set: &[bool; 256]) -> Option<Self> {
        // Per high half, the low halves of its bytes in the set.
        let mut lows = [0u16; 16];
        for (b, _) in set.iter().enumerate().filter(|(_, inside)| **inside) {
            if let Some(l) = lows.get_mut(b >> 4) {
                *l |= 1 << (b & 15);
            }
        }
        // Classes: (the low halves, the high halves that have them).
        let mut classes: Vec<(u16, u16)> = Vec::new();
        for (h, l) in lows.iter().enumerate().filter(|(_, l)| **l != 0) {
            match classes.iter_mut().find(|(low, _)| low == l) {
                Some((_, highs)) => *highs |= 1 << h,
                None => classes.push((*l, 1 << h)),
            }
        }
        if classes.is_empty() {
            return None;
        }
        while classes.len() > 8 {
            // The pair whose union adds the fewest bytes to the set, joined.
            let added = |(l1, h1): (u16, u16), (l2, h2): (u16, u16)| {
                let (l, h) = (l1 | l2, h1 | h2);
                (l.count_ones() * h.count_ones()).saturating_sub(
                    l1.count_ones() * h1.count_ones() + l2.count_ones() * h2.count_ones(),
                )
            };
            let mut best = (0, 1, u32::MAX);
            for i in 0..classes.len() {
                for j in i + 1..classes.len() {
                    if let (Some(a), Some(b)) = (classes.get(i), classes.get(j)) {
                        let cost = added(*a, *b);
                        if cost < best.2 {
                            best = (i, j, cost);
                        }
                    }
                }
            }
            let (l2, h2) = classes.remove(best.1);
            if let Some((l1, h1)) = classes.get_mut(best.0) {
                (*l1, *h1) = (*l1 | l2, *h1 | h2);
            }
        }
        let mut this = Self {
            low: [0; 16],
            high: [0; 16],
        };
        for (bit, (l, h)) in classes.iter().enumerate() {
            let mask = 1u8 << bit;
            for i in 0..16 {
                if l & (1 << i) != 0 {
                    if let Some(slot) = this.low.get_mut(i) {
                        *slot |= mask;
                    }
                }
                if h & (1 << i) != 0 {
                    if let Some(slot) = this.high.get_mut(i) {
                        *slot |= mask;
                    }
                }
            }
        }
        Some(this)
    }

    /// Whether `byte` hits the tables (what [`Nibbles::hits`] tests in every lane).
    #[inline]
    pub fn hit(&self, byte: u8) -> bool {
        let (l, h) = (usize::from(byte & 15), usize::from(byte >> 4));
        self.low
            .get(l)
            .zip(self.high.get(h))
            .is_some_and(|(l, h)| l & h != 0)
    }

    /// Whether any byte of `block` hits the tables: per 16 bytes two shuffles, two ANDs, a shift.
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    #[inline]
    pub fn hits(&self, block: &[u8; BLOCK]) -> bool {
        use core::arch::wasm32::{
            i8x16_splat, i8x16_swizzle, u8x16_shr, v128, v128_and, v128_any_true, v128_load,
            v128_or,
        };
        // SAFETY: each pointer is to 16 readable bytes (the two tables, and the block's 16-byte
        // chunks); `v128_load` reads 16 bytes and allows any alignment.
        let load = |bytes: &[u8]| unsafe { v128_load(bytes.as_ptr().cast::<v128>()) };
        let (low, high) = (load(&self.low), load(&self.high));
        let hit = |v: v128| {
            let l = v128_and(v, i8x16_splat(15));
            let h = u8x16_shr(v, 4);
            v128_and(i8x16_swizzle(low, l), i8x16_swizzle(high, h))
        };
        let any = block
            .chunks_exact(16)
            .fold(i8x16_splat(0), |any, lane| v128_or(any, hit(load(lane))));
        v128_any_true(any)
    }

    /// Whether any byte of `block` hits the tables, a byte at a time (only the wasm build tests
    /// blocks with them; this keeps the native tests on the same tables).
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    pub fn hits(&self, block: &[u8; BLOCK]) -> bool {
        block.iter().any(|b| self.hit(*b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sets() -> Vec<Vec<(u8, u8)>> {
        vec![
            vec![(b'-', b'-'), (b'0', b'9'), (b'@', b'@')],
            vec![(0, 0), (255, 255)],
            vec![(0x80, 0xFF)],
            vec![(0, 0x1F), (b'"', b'"'), (b'\\', b'\\'), (0x80, 0xFF)],
            (0..=255u8).step_by(7).map(|b| (b, b)).collect(),
            vec![(1, 2), (10, 11), (20, 20), (40, 41), (100, 120), (200, 201)],
        ]
    }

    /// Every byte at every place of a block: a byte of the set always hits, and with four ranges
    /// or fewer no other byte does.
    #[test]
    fn a_block_hits_where_a_byte_is_in_a_range_and_four_ranges_are_exact() {
        for set in sets() {
            let ranges = Ranges::covering(set.clone()).unwrap();
            let inside = |b: u8| set.iter().any(|&(first, last)| (first..=last).contains(&b));
            let filler = (0..=255u8).find(|b| !inside(*b)).unwrap();
            let filler_hits = ranges.hits(&[filler; BLOCK]);
            for byte in 0..=255u8 {
                for at in 0..BLOCK {
                    let mut block = [filler; BLOCK];
                    block[at] = byte;
                    let hit = ranges.hits(&block);
                    if inside(byte) {
                        assert!(hit, "{set:?} {byte:#x} at {at}");
                    } else if set.len() <= 4 && !filler_hits {
                        assert!(!hit, "{set:?} {byte:#x} at {at}");
                    }
                }
            }
        }
        assert_eq!(Ranges::covering(Vec::new()), None);
    }

    fn set_of(ranges: &[(u8, u8)]) -> [bool; 256] {
        let mut set = [false; 256];
        for &(first, last) in ranges {
            for b in first..=last {
                set[usize::from(b)] = true;
            }
        }
        set
    }

    /// Every byte at every place of a block, through the tables as the build tests blocks (SIMD in
    /// the wasm build): a byte of the set always hits, and a set of at most eight classes of high
    /// halves (every set here but the scattered ones) hits no other byte.
    #[test]
    fn a_block_hits_the_tables_where_a_byte_is_in_the_set_and_eight_classes_are_exact() {
        let mut all = sets();
        // Sixteen classes: a different low half for every high half (0x00, 0x11, …, 0xFF).
        all.push((0..16u8).map(|h| (h * 17, h * 17)).collect());
        // Scattered: every byte whose square is 1, 4 or 9 modulo 13.
        all.push(
            (0..=255u8)
                .filter(|b| [1, 4, 9].contains(&(u32::from(*b) * u32::from(*b) % 13)))
                .map(|b| (b, b))
                .collect(),
        );
        all.push(
            (0..16u8)
                .map(|h| (h * 16 + h % 7, h * 16 + h % 7))
                .collect(),
        );
        all.push(vec![(0, 255)]);
        let mut inexact = 0;
        for ranges in all {
            let set = set_of(&ranges);
            let tables = Nibbles::of_set(&set).unwrap();
            let classes: std::collections::HashSet<u16> = (0..16)
                .map(|h| {
                    (0..16)
                        .filter(|l| set[h * 16 + l])
                        .fold(0u16, |m, l| m | 1 << l)
                })
                .filter(|m| *m != 0)
                .collect();
            let exact = classes.len() <= 8;
            inexact += usize::from(!exact);
            let filler = (0..=255u8).find(|b| !tables.hit(*b));
            for byte in 0..=255u8 {
                if set[usize::from(byte)] {
                    assert!(tables.hit(byte), "{ranges:?} {byte:#x}");
                } else if exact {
                    assert!(!tables.hit(byte), "{ranges:?} {byte:#x}");
                }
                let Some(filler) = filler else { continue };
                for at in 0..BLOCK {
                    let mut block = [filler; BLOCK];
                    block[at] = byte;
                    assert_eq!(
                        tables.hits(&block),
                        tables.hit(byte),
                        "{ranges:?} {byte:#x} at {at}"
                    );
                }
            }
        }
        assert!(inexact >= 2, "the scattered sets join classes");
        assert_eq!(Nibbles::of_set(&[false; 256]), None);
    }

    #[test]
    fn the_bench_rules_needed_bytes_are_three_classes() {
        let set = set_of(&[(b'-', b'-'), (b'0', b'9'), (b'@', b'@')]);
        let tables = Nibbles::of_set(&set).unwrap();
        let hits: Vec<u8> = (0..=255u8).filter(|b| tables.hit(*b)).collect();
        assert_eq!(hits, b"-0123456789@");
    }

    #[test]
    fn more_than_four_ranges_join_the_nearest() {
        let joined = Ranges::covering(vec![(1, 2), (10, 11), (13, 13), (40, 41), (100, 120)]);
        assert_eq!(
            joined,
            Some(Ranges::of([(1, 2), (10, 13), (40, 41), (100, 120)]))
        );
    }
}
