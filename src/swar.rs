//! Byte checks eight bytes a step in a `u64` ("SIMD within a register"). In wasm32 core's own loops
//! step by a byte (`memcmp`) or by a `usize` of four (`is_ascii`): on the hot path of every
//! streamed event and every scanned text these are what is left to make cheaper. Natively the
//! standard ones are as fast or faster; one way is kept for both. The wasm build has WebAssembly's
//! SIMD since `scan::needles` needed it (`crate::lanes`); written in its lanes,
//! [`plain_string_len`] measured no faster in V8 (1 MiB: ~150-185 µs against ~170-190) and twice
//! as slow natively (~115 µs against ~58), so its strides, and [`is_ascii`]'s, are tested in
//! WebAssembly's SIMD itself in the wasm build and eight bytes a step elsewhere.

const HIGH: u64 = 0x8080_8080_8080_8080;

/// The eight bytes of `word` as a `u64` (`word` is 8 bytes long).
#[inline]
fn load(word: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(word);
    u64::from_le_bytes(b)
}

/// `bytes.is_ascii()`, in 32-byte strides.
#[inline]
pub fn is_ascii(bytes: &[u8]) -> bool {
    ascii_len(bytes) == bytes.len()
}

/// How many bytes `bytes` starts with that are ASCII: 32-byte strides skipped while all are, then
/// the rest tested whole, else a byte at a time.
#[inline]
pub fn ascii_len(bytes: &[u8]) -> usize {
    let mut done = 0;
    for stride in bytes.chunks_exact(32) {
        match <&[u8; 32]>::try_from(stride) {
            Ok(stride) if stride_is_ascii(stride) => done += 32,
            _ => break,
        }
    }
    let rest = bytes.get(done..).unwrap_or_default();
    // The short tail of an ASCII text a word at a time (core's test), as most texts end.
    if rest.is_ascii() {
        return bytes.len();
    }
    done + rest
        .iter()
        .position(|b| !b.is_ascii())
        .unwrap_or(rest.len())
}

/// Whether every byte of a 32-byte stride is ASCII, in WebAssembly's SIMD: the two halves ORed,
/// their high bits read at once (`i8x16.bitmask`). In V8 the `u64` stride took ~44 µs a MiB (the
/// input text of a 1 MiB question folded), this ~half (bench/optimisation-log-turn.md).
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
#[inline]
fn stride_is_ascii(stride: &[u8; 32]) -> bool {
    use core::arch::wasm32::{i8x16_bitmask, v128, v128_load, v128_or};
    let (low, high) = stride.split_at(16);
    // SAFETY: `low` and `high` are 16 bytes each of `stride` (split at 16 of 32), all readable;
    // `v128_load` reads 16 bytes and allows any alignment.
    let (low, high) = unsafe {
        (
            v128_load(low.as_ptr().cast::<v128>()),
            v128_load(high.as_ptr().cast::<v128>()),
        )
    };
    i8x16_bitmask(v128_or(low, high)) == 0
}

/// Whether every byte of a 32-byte stride is ASCII, eight bytes a step.
#[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
#[inline]
fn stride_is_ascii(stride: &[u8; 32]) -> bool {
    stride.chunks_exact(8).fold(0, |any, word| any | load(word)) & HIGH == 0
}

/// `bytes` as a `str` when every byte of it is ASCII ([`is_ascii`]); `None` otherwise. In wasm32
/// core's UTF-8 check walks most of a short text a byte at a time (~0.1 µs for an event's 150
/// bytes in V8); text known to be UTF-8 that is not ASCII is the caller's to check that way.
#[inline]
pub fn ascii_str(bytes: &[u8]) -> Option<&str> {
    if !is_ascii(bytes) {
        return None;
    }
    // SAFETY: every byte of `bytes` is below 0x80 (checked just above), and a sequence of such
    // bytes is valid UTF-8 (each is a character of its own).
    Some(unsafe { std::str::from_utf8_unchecked(bytes) })
}

/// How many bytes `bytes` starts with that a JSON string holds as they are: printable ASCII other
/// than `"` and `\\` (so it stops at a quote, an escape, a control character or a non-ASCII byte).
/// Most strings a body holds (keys, ids, names) end within eight bytes: one word is looked at
/// first; past it, 32 bytes a step while none of them stops it.
#[inline]
pub fn plain_string_len(bytes: &[u8]) -> usize {
    let mut done = 0;
    if let Some(word) = bytes.get(..8) {
        let stop = stops(load(word));
        if stop != 0 {
            return (stop.trailing_zeros() / 8) as usize;
        }
        done = 8;
    }
    for stride in bytes.get(done..).unwrap_or_default().chunks_exact(32) {
        match <&[u8; 32]>::try_from(stride) {
            Ok(stride) if !stride_stops(stride) => done += 32,
            _ => break,
        }
    }
    let rest = bytes.get(done..).unwrap_or_default();
    let mut words = rest.chunks_exact(8);
    for word in &mut words {
        let stop = stops(load(word));
        if stop != 0 {
            return done + (stop.trailing_zeros() / 8) as usize;
        }
        done += 8;
    }
    let tail = words.remainder();
    done + tail
        .iter()
        .position(|&b| !(0x20..0x80).contains(&b) || b == b'"' || b == b'\\')
        .unwrap_or(tail.len())
}

/// Whether JSON writes `text` between quotes as it is: no quote, backslash or control character,
/// the characters serde_json escapes (it leaves every other one, non-ASCII included, as it is).
/// ASCII text is read a stride at a time ([`plain_string_len`]); from a non-ASCII byte on, a byte
/// at a time.
#[inline]
pub fn written_as_is(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes
        .get(plain_string_len(bytes)..)
        .unwrap_or_default()
        .iter()
        .all(|&b| b >= 0x20 && b != b'"' && b != b'\\')
}

/// Whether a 32-byte stride holds a byte that stops [`plain_string_len`], in WebAssembly's SIMD:
/// one signed compare with 0x20 takes both the control and the non-ASCII bytes, two compares the
/// quote and the backslash (~7 instructions per 16 bytes; LLVM does not write this from portable
/// code, see `crate::lanes`). In V8 the SWAR stride took ~170-190 µs a MiB, about three times
/// native.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
#[inline]
fn stride_stops(stride: &[u8; 32]) -> bool {
    use core::arch::wasm32::{
        i8x16_eq, i8x16_lt, i8x16_splat, v128, v128_any_true, v128_load, v128_or,
    };
    let (low, high) = stride.split_at(16);
    let stops = |lane: &[u8]| {
        // SAFETY: `lane` is 16 bytes of `stride` (split at 16 of 32), all readable; `v128_load`
        // reads 16 bytes and allows any alignment.
        let v = unsafe { v128_load(lane.as_ptr().cast::<v128>()) };
        v128_or(
            v128_or(
                i8x16_lt(v, i8x16_splat(0x20)),
                i8x16_eq(v, i8x16_splat(0x22)),
            ),
            i8x16_eq(v, i8x16_splat(0x5C)),
        )
    };
    v128_any_true(v128_or(stops(low), stops(high)))
}

/// Whether a 32-byte stride holds a byte that stops [`plain_string_len`], eight bytes a step.
#[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
#[inline]
fn stride_stops(stride: &[u8; 32]) -> bool {
    stride
        .chunks_exact(8)
        .fold(0, |any, word| any | stops(load(word)))
        != 0
}

/// The high bit of each byte of `w` a JSON string cannot hold as it is (see
/// [`plain_string_len`]). Bits above the lowest may be wrong (a borrow runs upwards); the lowest
/// never is.
#[inline]
fn stops(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let zero = |v: u64| v.wrapping_sub(ONES) & !v;
    (zero(w ^ (ONES * u64::from(b'"')))
        | zero(w ^ (ONES * u64::from(b'\\')))
        | w.wrapping_sub(ONES * 0x20) & !w
        | w)
        & HIGH
}

/// `a == b`, eight bytes a step.
#[inline]
fn eq_words(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let (mut x, mut y) = (a.chunks_exact(8), b.chunks_exact(8));
    if (&mut x).zip(&mut y).any(|(p, q)| load(p) != load(q)) {
        return false;
    }
    x.remainder() == y.remainder()
}

/// `a == b`.
#[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
#[inline]
pub fn eq(a: &[u8], b: &[u8]) -> bool {
    eq_words(a, b)
}

/// `a == b`, in WebAssembly's SIMD: sixteen bytes a step, the last sixteen read overlapping the
/// step before (a stream's text event is compared with its template's ~150 bytes this way for
/// every event; wasm32's `memcmp` is a byte loop).
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
#[inline]
pub fn eq(a: &[u8], b: &[u8]) -> bool {
    use core::arch::wasm32::{v128, v128_any_true, v128_load, v128_xor};
    if a.len() != b.len() {
        return false;
    }
    let Some(last) = a.len().checked_sub(16) else {
        return eq_words(a, b);
    };
    let differs = |at: usize| match (a.get(at..at + 16), b.get(at..at + 16)) {
        (Some(p), Some(q)) => {
            // SAFETY: `p` and `q` are 16 readable bytes each (checked slices); `v128_load`
            // reads 16 bytes and allows any alignment.
            let (p, q) = unsafe {
                (
                    v128_load(p.as_ptr().cast::<v128>()),
                    v128_load(q.as_ptr().cast::<v128>()),
                )
            };
            v128_any_true(v128_xor(p, q))
        }
        _ => true,
    };
    let mut at = 0;
    while at < last {
        if differs(at) {
            return false;
        }
        at += 16;
    }
    !differs(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wide_ascii_check_agrees_with_cores_at_every_length_and_position() {
        for len in 0..80 {
            let mut bytes = vec![b'a'; len];
            assert!(is_ascii(&bytes), "{len}");
            assert_eq!(ascii_len(&bytes), len);
            assert_eq!(ascii_str(&bytes), Some("a".repeat(len).as_str()), "{len}");
            for at in 0..len {
                for high in [0x80u8, 0xC3, 0xFF] {
                    bytes[at] = high;
                    assert_eq!(is_ascii(&bytes), bytes.is_ascii(), "{len} {at} {high:#x}");
                    assert_eq!(ascii_len(&bytes), at, "{len} {at} {high:#x}");
                    assert_eq!(ascii_str(&bytes), None, "{len} {at} {high:#x}");
                    bytes[at] = b'a';
                }
            }
        }
    }

    /// Every length to 40, every place of a stop and every kind of byte after it.
    #[test]
    fn bytes_compare_equal_exactly_when_core_says_so_at_every_length_and_position() {
        for len in 0..70 {
            let a: Vec<u8> = (0..len).map(|i: usize| (i * 7 % 251) as u8).collect();
            let mut b = a.clone();
            assert!(eq(&a, &b), "{len}");
            assert!(!eq(&a, &b[..len.saturating_sub(1)]) || len == 0, "{len}");
            for at in 0..len {
                for flip in [0x01u8, 0x80, 0xFF] {
                    b[at] ^= flip;
                    assert!(!eq(&a, &b), "{len} {at} {flip:#x}");
                    b[at] ^= flip;
                }
            }
        }
    }

    #[test]
    fn the_plain_string_run_stops_at_the_first_byte_a_string_cannot_hold_as_is() {
        let plain = |b: u8| (0x20..0x80).contains(&b) && b != b'"' && b != b'\\';
        for len in 0..40 {
            let text = vec![b'a'; len];
            assert_eq!(plain_string_len(&text), len);
            for at in 0..len {
                for byte in 0..=255u8 {
                    let mut bytes = text.clone();
                    bytes[at] = byte;
                    // Whatever follows the stop must not move it.
                    for after in [0u8, b'"', 0xff, b'a'] {
                        if at + 1 < len {
                            bytes[at + 1] = after;
                        }
                        let want = bytes.iter().position(|&b| !plain(b)).unwrap_or(len);
                        assert_eq!(
                            plain_string_len(&bytes),
                            want,
                            "{len} {at} {byte:#x} {after:#x}"
                        );
                    }
                }
            }
        }
    }

    /// Every length to 40, every place and every character kind, against what serde_json writes.
    #[test]
    fn a_text_is_written_as_is_where_serde_json_writes_it_between_quotes() {
        for len in 0..40 {
            for at in 0..len {
                for c in [
                    'a', '"', '\\', '\n', '\u{1}', '\u{1f}', ' ', '\u{7f}', 'é', '😀',
                ] {
                    let text: String = (0..len).map(|i| if i == at { c } else { 'a' }).collect();
                    let as_is = serde_json::to_string(&text).unwrap() == format!("\"{text}\"");
                    assert_eq!(written_as_is(&text), as_is, "{text:?}");
                }
            }
        }
    }

    /// Every length to 40 and every place of a difference, against the standard library.
    #[test]
    fn agrees_with_the_standard_searches() {
        for len in 0..40 {
            let plain = vec![b'a'; len];
            assert!(is_ascii(&plain));
            assert!(eq(&plain, &plain));
            assert!(!eq(&plain, &vec![b'a'; len + 1]));
            for at in 0..len {
                for byte in [b'\n', b'\r', 0x80, 0xff, 0x00, 0x0b, b'b'] {
                    let mut bytes = plain.clone();
                    bytes[at] = byte;
                    assert_eq!(is_ascii(&bytes), bytes.is_ascii(), "{len} {at} {byte}");
                    assert_eq!(eq(&bytes, &plain), bytes == plain, "{len} {at} {byte}");
                }
            }
        }
    }
}
