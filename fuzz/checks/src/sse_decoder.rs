//! The SSE decoder: never panics; what it decodes does not depend on how the bytes were cut into
//! chunks; what it decodes, encoded again, decodes to the same events.

use livecheck::sse::{encode, Decoder, Event, SseError};

fn decode(limit: usize, chunks: &[&[u8]]) -> Result<Vec<Event>, SseError> {
    let mut decoder = Decoder::new(limit);
    let mut events = Vec::new();
    for chunk in chunks {
        decoder.push(chunk, &mut events)?;
    }
    decoder.finish(&mut events)?;
    Ok(events)
}

/// The target's body: panics when `input` breaks one of the properties above.
pub fn check(input: &[u8]) {
    // First byte: the line limit (small ones reach `TooLong`); second: the chunk size.
    let [limit, size, body @ ..] = input else {
        return;
    };
    let limit = usize::from(*limit) * 4 + 1;
    let whole = decode(limit, &[body]);
    let chunks: Vec<&[u8]> = body.chunks(usize::from(*size % 16) + 1).collect();
    let chunked = decode(limit, &chunks);
    assert_eq!(whole, chunked, "the chunking changed what was decoded");
    let bytewise: Vec<&[u8]> = body.chunks(1).collect();
    assert_eq!(whole, decode(limit, &bytewise), "bytewise differs");
    if let Ok(events) = whole {
        let mut again = Vec::new();
        for e in &events {
            encode(&mut again, e.event.as_deref(), &e.data);
        }
        assert_eq!(
            decode(usize::MAX, &[&again]),
            Ok(events),
            "encode/decode round trip"
        );
    }
}
