//! Base64 (RFC 4648 §4, the standard alphabet with `=` padding): Bedrock's
//! `invoke-with-response-stream` carries each of the model's events base64-encoded in a `chunk`
//! message's JSON (`{"bytes": "…"}`, botocore's `PayloadPart.bytes`, a blob). Decoding is strict:
//! only the alphabet, padding only at the end and only to a multiple of four, and no bits set
//! past the last byte (the one encoding [`encode`] writes), so what is read is exactly one byte
//! string, never a guess (Python's `base64.b64decode`, which botocore runs, skips characters
//! outside the alphabet: a lenient decoder here could read other bytes than the SDK).
//! <https://www.rfc-editor.org/rfc/rfc4648#section-4>

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Each byte's value in the alphabet, or `INVALID`.
const INVALID: u8 = 0xff;
const VALUES: [u8; 256] = {
    let mut table = [INVALID; 256];
    let mut i = 0;
    while i < 64 {
        #[allow(clippy::indexing_slicing)]
        // const evaluation: an index out of bounds fails the build
        {
            table[ALPHABET[i] as usize] = i as u8;
        }
        i += 1;
    }
    table
};

/// The text is not base64 as [`decode`] reads it. Never quotes the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotBase64;

/// Appends the base64 of `bytes` to `out`.
pub fn encode(bytes: &[u8], out: &mut String) {
    out.reserve(bytes.len().div_ceil(3) * 4);
    let sextet = |n: u32, shift: u32| {
        char::from(
            ALPHABET
                .get(((n >> shift) & 63) as usize)
                .copied()
                .unwrap_or(b'A'),
        )
    };
    let mut groups = bytes.chunks_exact(3);
    for group in &mut groups {
        if let [a, b, c] = *group {
            let n = u32::from_be_bytes([0, a, b, c]);
            for shift in [18, 12, 6, 0] {
                out.push(sextet(n, shift));
            }
        }
    }
    match *groups.remainder() {
        [a] => {
            let n = u32::from(a) << 16;
            out.push(sextet(n, 18));
            out.push(sextet(n, 12));
            out.push_str("==");
        }
        [a, b] => {
            let n = (u32::from(a) << 16) | (u32::from(b) << 8);
            out.push(sextet(n, 18));
            out.push(sextet(n, 12));
            out.push(sextet(n, 6));
            out.push('=');
        }
        _ => {}
    }
}

/// The bytes `text` encodes; an error for anything but the one encoding [`encode`] writes.
pub fn decode(text: &str) -> Result<Vec<u8>, NotBase64> {
    let text = text.as_bytes();
    if !text.len().is_multiple_of(4) {
        return Err(NotBase64);
    }
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let mut groups = text.chunks_exact(4).peekable();
    while let Some(group) = groups.next() {
        let last = groups.peek().is_none();
        let pad = match group {
            [.., b'=', b'='] if last => 2,
            [.., b'='] if last => 1,
            _ => 0,
        };
        let mut n: u32 = 0;
        for (i, &c) in group.iter().enumerate() {
            let value = if i >= 4 - pad {
                0
            } else {
                VALUES.get(usize::from(c)).copied().unwrap_or(INVALID)
            };
            if value == INVALID {
                return Err(NotBase64);
            }
            n = (n << 6) | u32::from(value);
        }
        let [_, a, b, c] = n.to_be_bytes();
        match pad {
            0 => out.extend_from_slice(&[a, b, c]),
            // The bits after the last byte must be zero: one encoding for each byte string.
            1 if c == 0 => out.extend_from_slice(&[a, b]),
            2 if b == 0 && c == 0 => out.push(a),
            _ => return Err(NotBase64),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(bytes: &[u8]) -> String {
        let mut out = String::new();
        encode(bytes, &mut out);
        out
    }

    #[test]
    fn rfc_4648_vectors_encode_and_decode() {
        for (plain, coded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(encoded(plain.as_bytes()), coded);
            assert_eq!(decode(coded).unwrap(), plain.as_bytes(), "{coded}");
        }
    }

    #[test]
    fn every_byte_value_and_length_round_trips() {
        let bytes: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
        for len in 0..bytes.len() {
            let slice = &bytes[..len];
            assert_eq!(decode(&encoded(slice)).unwrap(), slice, "{len}");
        }
        assert_eq!(
            encoded(&[0xfb, 0xff, 0xbf]),
            "+/+/",
            "the standard alphabet, not the URL one"
        );
    }

    #[test]
    fn anything_but_the_one_encoding_is_not_base64() {
        for bad in [
            "Zg", "Zg=", "Zm9", "Z===", "====", "Zg==Zg==", "Zm9v\n", " Zm9v", "Zm9v ", "Zm-v",
            "Zm_v", "Zh==", "Zm9=", "Zm8=Zm9v", "Zé==", "=Zm9",
        ] {
            assert_eq!(decode(bad), Err(NotBase64), "{bad:?}");
        }
    }

    #[test]
    fn a_bedrock_chunks_bytes_decode_to_its_event() {
        // A chunk's `bytes` as Bedrock sends them (golem-cloud and AI21 test captures).
        assert_eq!(
            decode("eyJ0eXBlIjoibWVzc2FnZV9zdG9wIn0=").unwrap(),
            br#"{"type":"message_stop"}"#
        );
    }
}
