//! Byte searches eight bytes a step in a `u64` ("SIMD within a register"). In wasm32 (Envoy's V8,
//! built without the SIMD proposal) core's and `memchr`'s own loops step by a byte or by a `usize`
//! of four: on the hot path of every streamed event and every scanned text these are what is left
//! to make cheaper. Natively the standard ones are as fast or faster; one way is kept for both.

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// The eight bytes of `word` as a `u64` (`word` is 8 bytes long).
#[inline]
fn load(word: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(word);
    u64::from_le_bytes(b)
}

/// Whether some byte of `x` is zero.
#[inline]
fn has_zero(x: u64) -> bool {
    x.wrapping_sub(ONES) & !x & HIGH != 0
}

/// `bytes.is_ascii()`, in 32-byte strides.
#[inline]
pub fn is_ascii(bytes: &[u8]) -> bool {
    let mut strides = bytes.chunks_exact(32);
    for stride in &mut strides {
        let any = stride.chunks_exact(8).fold(0, |any, word| any | load(word));
        if any & HIGH != 0 {
            return false;
        }
    }
    strides.remainder().is_ascii()
}

/// `a == b`.
#[inline]
pub fn eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let (mut x, mut y) = (a.chunks_exact(8), b.chunks_exact(8));
    if (&mut x).zip(&mut y).any(|(p, q)| load(p) != load(q)) {
        return false;
    }
    x.remainder() == y.remainder()
}

/// Where the first `\n` or `\r` of `bytes` is.
#[inline]
pub fn line_end(bytes: &[u8]) -> Option<usize> {
    let (nl, cr) = (ONES * u64::from(b'\n'), ONES * u64::from(b'\r'));
    let mut at = 0;
    for word in bytes.chunks_exact(8) {
        let x = load(word);
        if has_zero(x ^ nl) || has_zero(x ^ cr) {
            break;
        }
        at += 8;
    }
    let rest = bytes.get(at..)?;
    rest.iter()
        .position(|&b| b == b'\n' || b == b'\r')
        .map(|i| at + i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wide_ascii_check_agrees_with_cores_at_every_length_and_position() {
        for len in 0..80 {
            let mut bytes = vec![b'a'; len];
            assert!(is_ascii(&bytes), "{len}");
            for at in 0..len {
                for high in [0x80u8, 0xC3, 0xFF] {
                    bytes[at] = high;
                    assert_eq!(is_ascii(&bytes), bytes.is_ascii(), "{len} {at} {high:#x}");
                    bytes[at] = b'a';
                }
            }
        }
    }

    /// Every length to 40 and every place of the byte sought (or of a difference), against the
    /// standard library.
    #[test]
    fn agrees_with_the_standard_searches() {
        for len in 0..40 {
            let plain = vec![b'a'; len];
            assert!(is_ascii(&plain));
            assert_eq!(line_end(&plain), None);
            assert!(eq(&plain, &plain));
            assert!(!eq(&plain, &vec![b'a'; len + 1]));
            for at in 0..len {
                for byte in [b'\n', b'\r', 0x80, 0xff, 0x00, 0x0b, b'b'] {
                    let mut bytes = plain.clone();
                    bytes[at] = byte;
                    // A second one later: the first is found.
                    if at + 3 < len {
                        bytes[at + 3] = b'\n';
                    }
                    assert_eq!(is_ascii(&bytes), bytes.is_ascii(), "{len} {at} {byte}");
                    let expected = bytes.iter().position(|&b| b == b'\n' || b == b'\r');
                    assert_eq!(line_end(&bytes), expected, "{len} {at} {byte}");
                    assert_eq!(eq(&bytes, &plain), bytes == plain, "{len} {at} {byte}");
                }
            }
        }
    }
}
