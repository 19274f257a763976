//! Byte tests a block of 32 bytes at a time, written in 16-byte lanes so that LLVM compiles them
//! to a handful of vector instructions: WebAssembly's SIMD in the filter's build (`i8x16.sub`,
//! `i8x16.le_u`, `v128.or`, `v128.any_true`; `.cargo/config.toml` enables it) and SSE2 natively.
//! Without vector instructions the same code is a byte-at-a-time loop, slower than a table.
//!
//! How it is written matters (checked in the `--emit asm` of each): the lanes are ORed per lane
//! and read as one `u128`; an OR of 32 lanes into one byte, or a `bool` per condition, compiled to
//! an extract per lane. So did ranges known when compiling (LLVM folds them, then reduces the
//! lanes badly): the ranges are read at run time.

/// How many bytes [`Ranges::hits`] tests a step.
pub const BLOCK: usize = 32;

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

    #[test]
    fn more_than_four_ranges_join_the_nearest() {
        let joined = Ranges::covering(vec![(1, 2), (10, 11), (13, 13), (40, 41), (100, 120)]);
        assert_eq!(
            joined,
            Some(Ranges::of([(1, 2), (10, 13), (40, 41), (100, 120)]))
        );
    }
}
