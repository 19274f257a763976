//! The AWS event-stream decoder (`livecheck::eventstream`): never panics; what it decodes, and the
//! error it stops at, do not depend on how the bytes were cut into chunks, nor on whether they were
//! pushed a message at a time; every message it decodes encodes back to the bytes it came from.

use livecheck::eventstream::{encode_message, Decoder, EventStreamError, Message};

/// The messages decoded from `chunks`, and how the stream ended.
fn decode(limit: usize, chunks: &[&[u8]]) -> (Vec<Message>, Result<(), EventStreamError>) {
    let mut decoder = Decoder::new(limit);
    let mut messages = Vec::new();
    for chunk in chunks {
        if let Err(e) = decoder.push(chunk, &mut messages) {
            return (messages, Err(e));
        }
    }
    let end = decoder.finish();
    (messages, end)
}

/// As [`decode`], each chunk pushed a message at a time.
fn decode_each(limit: usize, chunks: &[&[u8]]) -> (Vec<Message>, Result<(), EventStreamError>) {
    let mut decoder = Decoder::new(limit);
    let mut messages = Vec::new();
    for chunk in chunks {
        let mut rest = *chunk;
        while !rest.is_empty() {
            match decoder.push_message(rest, &mut messages) {
                Ok(read) => rest = rest.get(read..).unwrap_or_default(),
                Err(e) => return (messages, Err(e)),
            }
        }
    }
    let end = decoder.finish();
    (messages, end)
}

/// The target's body: panics when `input` breaks one of the properties above.
pub fn check(input: &[u8]) {
    // First byte: the message limit (small ones reach `TooLong`); second: the chunk size.
    let [limit, size, body @ ..] = input else {
        return;
    };
    let limit = usize::from(*limit) * 16 + 16;
    let whole = decode(limit, &[body]);
    let chunks: Vec<&[u8]> = body.chunks(usize::from(*size % 16) + 1).collect();
    assert_eq!(
        whole,
        decode(limit, &chunks),
        "the chunking changed what was decoded"
    );
    let bytewise: Vec<&[u8]> = body.chunks(1).collect();
    assert_eq!(whole, decode(limit, &bytewise), "bytewise differs");
    assert_eq!(
        whole,
        decode_each(limit, &chunks),
        "a message at a time differs"
    );
    let (messages, end) = whole;
    let mut again = Vec::new();
    for m in &messages {
        encode_message(&mut again, m).unwrap_or_else(|e| panic!("a decoded message: {e}"));
    }
    assert!(
        body.starts_with(&again),
        "a decoded message encodes to other bytes"
    );
    if end.is_ok() {
        assert_eq!(again, body, "a whole stream encodes to other bytes");
    }
}
