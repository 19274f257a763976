//! The answer's id from the start of a body the filter does not otherwise read (an answer no output
//! check holds): the first `"id": "…"` in its first bytes, which is the answer's own id in every
//! vendor's non-streamed answer and in the first event of its stream (on Bedrock's
//! `invoke-with-response-stream`, the first event is base64 in the first chunk message).

use crate::eventstream;
use crate::stream::chunks;

/// How far into an answer the id is looked for.
pub const PEEK_BYTES: usize = 4096;

/// The first `"id"` string value in `prefix` (at most [`PEEK_BYTES`] are read); `None` when there is
/// none yet, or it is not a plain id (letters, digits, `_`, `-`, `.`, `:`; at most 200).
pub fn peek_id(prefix: &[u8]) -> Option<String> {
    let prefix = prefix.get(..prefix.len().min(PEEK_BYTES))?;
    plain_id(prefix).or_else(|| in_first_chunk(prefix))
}

/// The id in the event the first message of an AWS event stream carries in its `chunk`.
fn in_first_chunk(prefix: &[u8]) -> Option<String> {
    let mut messages = Vec::new();
    eventstream::Decoder::new(PEEK_BYTES)
        .push_message(prefix, &mut messages)
        .ok()?;
    let first = messages
        .first()
        .filter(|m| m.event_type() == Some(chunks::CHUNK))?;
    let (event, _) = chunks::read_chunk(std::str::from_utf8(&first.payload).ok()?).ok()?;
    plain_id(event.data.as_bytes())
}

fn plain_id(prefix: &[u8]) -> Option<String> {
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
    fn finds_the_id_in_the_first_chunk_of_a_bedrock_stream() {
        let event = br#"{"type":"message_start","message":{"id":"msg_bdrk_01","type":"message"}}"#;
        let mut bytes = String::new();
        crate::base64::encode(event, &mut bytes);
        let mut stream = Vec::new();
        let payload = format!(r#"{{"bytes":"{bytes}","p":"abc"}}"#);
        eventstream::encode_event(&mut stream, "chunk", payload.as_bytes()).unwrap();
        assert_eq!(peek_id(&stream).as_deref(), Some("msg_bdrk_01"));
        assert_eq!(peek_id(&stream[..stream.len() - 1]), None, "not yet whole");
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
