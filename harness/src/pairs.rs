//! The proxy-wasm pairs encoding: a count, then (key length, value length) pairs, then the
//! NUL-terminated keys and values (proxy-wasm-cpp-host `src/pairs_util.cc`).

/// Encodes pairs the way the host hands header maps to the guest.
pub(crate) fn encode(pairs: &[(String, String)]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&u32_len(pairs.len()).to_le_bytes());
    for (k, v) in pairs {
        out.extend_from_slice(&u32_len(k.len()).to_le_bytes());
        out.extend_from_slice(&u32_len(v.len()).to_le_bytes());
    }
    for (k, v) in pairs {
        out.extend_from_slice(k.as_bytes());
        out.push(0);
        out.extend_from_slice(v.as_bytes());
        out.push(0);
    }
    out
}

fn u32_len(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Decodes pairs sent by the guest. Like the host, a malformed buffer decodes to no pairs.
pub(crate) fn decode(bytes: &[u8]) -> Vec<(String, String)> {
    decode_checked(bytes).unwrap_or_default()
}

fn read_u32(bytes: &[u8], at: usize) -> Option<usize> {
    let raw: [u8; 4] = bytes.get(at..at.checked_add(4)?)?.try_into().ok()?;
    usize::try_from(u32::from_le_bytes(raw)).ok()
}

fn decode_checked(bytes: &[u8]) -> Option<Vec<(String, String)>> {
    let count = read_u32(bytes, 0)?;
    let mut text = count.checked_mul(8)?.checked_add(4)?;
    if text > bytes.len() {
        return None;
    }
    let mut pairs = Vec::with_capacity(count);
    for i in 0..count {
        let key_len = read_u32(bytes, 4 + i * 8)?;
        let value_len = read_u32(bytes, 8 + i * 8)?;
        let key = bytes.get(text..text.checked_add(key_len)?)?;
        text = text.checked_add(key_len)?.checked_add(1)?;
        let value = bytes.get(text..text.checked_add(value_len)?)?;
        text = text.checked_add(value_len)?.checked_add(1)?;
        pairs.push((
            String::from_utf8_lossy(key).into_owned(),
            String::from_utf8_lossy(value).into_owned(),
        ));
    }
    Some(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_round_trip() {
        let pairs = vec![
            (":status".to_owned(), "200".to_owned()),
            ("x-a".to_owned(), String::new()),
        ];
        assert_eq!(decode(&encode(&pairs)), pairs);
    }

    #[test]
    fn truncated_pairs_decode_to_nothing() {
        let bytes = encode(&[("key".to_owned(), "value".to_owned())]);
        assert!(decode(&bytes[..bytes.len() - 3]).is_empty());
        assert!(decode(&[1, 0]).is_empty());
    }
}
