//! Byte checks eight bytes a step in a `u64` ("SIMD within a register"). In wasm32 (Envoy's V8,
//! built without the SIMD proposal) core's own loops step by a byte (`memcmp`) or by a `usize` of
//! four (`is_ascii`): on the hot path of every streamed event and every scanned text these are
//! what is left to make cheaper. Natively the standard ones are as fast or faster; one way is kept
//! for both.

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
