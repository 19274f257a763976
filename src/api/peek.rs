//! The answer's id from the start of a body the filter does not otherwise read (an answer no output
//! check holds): the first `"id": "…"` in its first bytes, which is the answer's own id in every
//! vendor's non-streamed answer and in the first event of its stream.

/// How far into an answer the id is looked for.
pub const PEEK_BYTES: usize = 4096;

/// The first `"id"` string value in `prefix` (at most [`PEEK_BYTES`] are read); `None` when there is
/// none yet, or it is not a plain id (letters, digits, `_`, `-`, `.`, `:`; at most 200).
pub fn peek_id(prefix: &[u8]) -> Option<String> {
    let prefix = prefix.get(..prefix.len().min(PEEK_BYTES))?;
    let mut from = 0;
    while let Some(at) = find(prefix.get(from..)?, b"\"id\"") {
        let rest = prefix.get(from + at + 4..)?;
        from += at + 4;
        let rest = skip_space(rest);
        let Some(rest) = rest.strip_prefix(b":") else {
            continue;
        };
        let Some(value) = skip_space(rest).strip_prefix(b"\"") else {
            continue;
        };
        let end = value.iter().position(|b| *b == b'"')?;
        let id = value.get(..end)?;
        let plain = !id.is_empty()
            && id.len() <= 200
            && id
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || b"_-.:".contains(b));
        return plain.then(|| String::from_utf8_lossy(id).into_owned());
    }
    None
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn skip_space(bytes: &[u8]) -> &[u8] {
    let n = bytes.iter().take_while(|b| b.is_ascii_whitespace()).count();
    bytes.get(n..).unwrap_or_default()
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn finds_each_vendors_id_in_answers_and_first_events() {
        let cases: [(&[u8], &str); 4] = [
            (br#"{"id": "chatcmpl-9x", "object": "chat.completion"}"#, "chatcmpl-9x"),
            (
                b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01\"",
                "msg_01",
            ),
            (
                b"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\" : \"resp_7\"}}",
                "resp_7",
            ),
            (b"data: {\"id\":\"chatcmpl-s\",\"object\":\"chat.completion.chunk\"", "chatcmpl-s"),
        ];
        for (body, id) in cases {
            assert_eq!(peek_id(body).as_deref(), Some(id));
        }
    }

    #[test]
    fn an_id_cut_short_or_not_plain_is_not_taken() {
        assert_eq!(peek_id(br#"{"id": "chatcmpl-9"#), None);
        assert_eq!(peek_id(br#"{"id": "a b"}"#), None);
        assert_eq!(peek_id(br#"{"id": 7, "x": 1}"#), None);
        assert_eq!(peek_id(b""), None);
        let mut late = vec![b' '; PEEK_BYTES];
        late.extend_from_slice(br#"{"id": "late"}"#);
        assert_eq!(peek_id(&late), None, "only the first bytes are read");
    }
}
