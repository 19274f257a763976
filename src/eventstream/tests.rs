use super::*;

/// Encoded messages from botocore's own tests (boto/botocore `tests/unit/test_eventstream.py`
/// at 0e6e2404b85dc336dd2889814e089bde7d1a4c55: `EMPTY_MESSAGE`, `INT8_HEADER`...), the
/// bytes reproduced as they are there.
mod botocore {
    pub const EMPTY_MESSAGE: &[u8] = b"\x00\x00\x00\x10\x00\x00\x00\x00\x05\xc2H\xeb}\x98\xc8\xff";
    pub const INT8_HEADER: &[u8] =
        b"\x00\x00\x00\x17\x00\x00\x00\x07)\x86\x01X\x04byte\x02\xff\xc2\xf8i\xdc";
    pub const INT16_HEADER: &[u8] =
        b"\x00\x00\x00\x19\x00\x00\x00\tq\x0e\x92>\x05short\x03\xff\xff\xb2|\xb6\xcc";
    pub const INT32_HEADER: &[u8] = b"\x00\x00\x00\x1d\x00\x00\x00\r\x83\xe3\xf0\xe7\x07integer\x04\xff\xff\xff\xff\x8b\x8e\x12\xeb";
    pub const INT64_HEADER: &[u8] = b"\x00\x00\x00\x1e\x00\x00\x00\x0e]J\xdb\x8d\x04long\x05\xff\xff\xff\xff\xff\xff\xff\xffK\xc22\xda";
    pub const PAYLOAD_NO_HEADERS: &[u8] =
        b"\x00\x00\x00\x1d\x00\x00\x00\x00\xfdR\x8cZ{'foo':'bar'}\xc3e96";
    pub const PAYLOAD_ONE_STR_HEADER: &[u8] = b"\x00\x00\x00=\x00\x00\x00 \x07\xfd\x83\x96\x0ccontent-type\x07\x00\x10application/json{'foo':'bar'}\x8d\x9c\x08\xb1";
    pub const ALL_HEADERS_TYPES: &[u8] = b"\x00\x00\x00\x62\x00\x00\x00\x52\x03\xb5\xcb\x9c\
        \x010\x00\x011\x01\x012\x02\x02\x013\x03\x00\x03\
        \x014\x04\x00\x00\x00\x04\x015\x05\x00\x00\x00\x00\x00\x00\x00\x05\
        \x016\x06\x00\x05bytes\x017\x07\x00\x04utf8\
        \x018\x08\x00\x00\x00\x00\x00\x00\x00\x08\x019\x090123456789abcdef\
        \x63\x35\x36\x71";
    pub const ERROR_EVENT_MESSAGE: &[u8] = b"\x00\x00\x00\x52\x00\x00\x00\x42\xbf\x23\x63\x7e\
        \x0d:message-type\x07\x00\x05error\
        \x0b:error-code\x07\x00\x04code\
        \x0e:error-message\x07\x00\x07message\
        \x6b\x6c\xea\x3d";

    pub const CORRUPTED_HEADER_LENGTH: &[u8] = b"\x00\x00\x00=\xff\x00\x01\x02\x07\xfd\x83\x96\x0ccontent-type\x07\x00\x10application/json{'foo':'bar'}\x8d\x9c\x08\xb1";
    pub const CORRUPTED_HEADERS: &[u8] = b"\x00\x00\x00=\x00\x00\x00 \x07\xfd\x83\x96\x0ccontent+type\x07\x00\x10application/json{'foo':'bar'}\x8d\x9c\x08\xb1";
    pub const CORRUPTED_LENGTH: &[u8] =
        b"\x01\x00\x00\x1d\x00\x00\x00\x00\xfdR\x8cZ{'foo':'bar'}\xc3e96";
    pub const CORRUPTED_PAYLOAD: &[u8] =
        b"\x00\x00\x00\x1d\x00\x00\x00\x00\xfdR\x8cZ{'foo':'bar'\x8d\xc3e96";
    pub const DUPLICATE_HEADER: &[u8] = b"\x00\x00\x00\x24\x00\x00\x00\x14\x4b\xb9\x82\xd0\
        \x04test\x04asdf\x04test\x04asdf\xf3\xf4\x75\x63";
    /// Well-formed, checksums matching, but headers longer than the message.
    pub const INVALID_HEADERS_LENGTH: &[u8] = b"\x00\x00\x00\x3d\xff\x00\x01\x02\x15\x83\xf5\xc2\
        \x0ccontent-type\x07\x00\x10application/json{'foo':'bar'}\x2f\x37\x7f\x5d";
    /// The prelude of `INVALID_PAYLOAD_LENGTH` (a 24 MiB payload follows it there).
    pub const INVALID_PAYLOAD_LENGTH_PRELUDE: &[u8] =
        b"\x01\x80\x00\x21\x00\x00\x00\x00\xdd\x3f\x33\xb1";
}

/// A frame Bedrock's `invoke-with-response-stream` sent (an `InvokeModelWithResponseStream`
/// `chunk`: the model's own event base64 in `bytes`, and the random-length padding `p` that
/// Bedrock adds), as AI21Labs/ai21-python keeps it in `tests/unittests/test_aws_stream_decoder.py`
/// at 661c5f574a3128749fb8316e950e0b2602d8c8d0; both checksums verified with Python's
/// `binascii.crc32`.
const BEDROCK_CHUNK: &[u8] = b"\x00\x00\x01\x80\x00\x00\x00K\xfe\x96$F\
    \x0b:event-type\x07\x00\x05chunk\r:content-type\x07\x00\x10application/json\
    \r:message-type\x07\x00\x05event\
    {\"bytes\":\"eyJpZCI6ImNtcGwtOTgxZjdmMTc2YWQ0NDE0NTliOTRlNDVlZTI5MmEzMjEiLCJjaG9pY2VzIjpbeyJpbmRleC\
    I6MCwiZGVsdGEiOnsicm9sZSI6ImFzc2lzdGFudCJ9LCJmaW5pc2hfcmVhc29uIjpudWxsfV0sInVzYWdlIjp7InByb21wd\
    F90b2tlbnMiOjQ0LCJ0b3RhbF90b2tlbnMiOjQ0LCJjb21wbGV0aW9uX3Rva2VucyI6MH19\",\"p\":\"abcdefghijklmnopq\
    rstuv\"}5\xca\xa7\x98";

fn decode_in(chunks: &[&[u8]]) -> Result<Vec<Message>, EventStreamError> {
    let mut decoder = Decoder::new(1024);
    let mut out = Vec::new();
    for chunk in chunks {
        decoder.push(chunk, &mut out)?;
    }
    decoder.finish()?;
    Ok(out)
}

/// The messages and the error of a stream pushed in `chunks`, all of them pushed.
fn decode_until_error(chunks: &[&[u8]], limit: usize) -> (Vec<Message>, EventStreamError) {
    let mut decoder = Decoder::new(limit);
    let mut out = Vec::new();
    for chunk in chunks {
        if let Err(e) = decoder.push(chunk, &mut out) {
            return (out, e);
        }
    }
    let e = decoder.finish().unwrap_err();
    (out, e)
}

fn msg(headers: &[(&str, Value)], payload: &[u8]) -> Message {
    Message {
        headers: headers
            .iter()
            .map(|(name, value)| Header {
                name: (*name).to_owned(),
                value: value.clone(),
            })
            .collect(),
        payload: payload.to_vec(),
    }
}

fn s(text: &str) -> Value {
    Value::String(text.to_owned())
}

/// A message around a raw headers block, with both checksums right.
fn framed(headers: &[u8], payload: &[u8]) -> Vec<u8> {
    let total = (FRAME + headers.len() + payload.len()) as u32;
    framed_with(total, headers.len() as u32, headers, payload)
}

/// A message whose prelude says `total` and `headers_len` whatever follows, both checksums
/// computed over what is written.
fn framed_with(total: u32, headers_len: u32, headers: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&total.to_be_bytes());
    out.extend_from_slice(&headers_len.to_be_bytes());
    out.extend_from_slice(&crc32(&out).to_be_bytes());
    out.extend_from_slice(headers);
    out.extend_from_slice(payload);
    out.extend_from_slice(&crc32(&out).to_be_bytes());
    out
}

/// A Converse stream as Bedrock sends one (event names and payloads from botocore's
/// `bedrock-runtime/2023-09-30/service-2.json`, `ConverseStreamOutput`), ending in a stop.
fn converse_stream() -> Vec<u8> {
    let mut out = Vec::new();
    let events: [(&str, &str); 6] = [
        ("messageStart", r#"{"role":"assistant"}"#),
        (
            "contentBlockDelta",
            r#"{"contentBlockIndex":0,"delta":{"text":"Hé日本😀"}}"#,
        ),
        ("contentBlockStop", r#"{"contentBlockIndex":0}"#),
        (
            "contentBlockStart",
            r#"{"contentBlockIndex":1,"start":{"toolUse":{"toolUseId":"t1","name":"get"}}}"#,
        ),
        ("messageStop", r#"{"stopReason":"guardrail_intervened"}"#),
        (
            "metadata",
            r#"{"usage":{"inputTokens":3,"outputTokens":2,"totalTokens":5},"metrics":{"latencyMs":9}}"#,
        ),
    ];
    for (event, json) in events {
        encode_event(&mut out, event, json.as_bytes()).unwrap();
    }
    out
}

#[test]
fn crc32_is_the_ieee_one() {
    // The CRC-32/ISO-HDLC check value, and botocore's prelude CRC of `EMPTY_MESSAGE`.
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    assert_eq!(crc32(b""), 0);
    assert_eq!(crc32(&botocore::EMPTY_MESSAGE[..8]), 0x05C2_48EB);
    assert_eq!(crc32(&botocore::EMPTY_MESSAGE[..12]), 0x7D98_C8FF);
}

#[test]
fn botocores_vectors_decode_as_botocore_reads_them() {
    use botocore::*;
    let json = b"{'foo':'bar'}";
    let cases: [(&[u8], Message); 9] = [
        (EMPTY_MESSAGE, msg(&[], b"")),
        (INT8_HEADER, msg(&[("byte", Value::Byte(-1))], b"")),
        (INT16_HEADER, msg(&[("short", Value::Short(-1))], b"")),
        (INT32_HEADER, msg(&[("integer", Value::Int(-1))], b"")),
        (INT64_HEADER, msg(&[("long", Value::Long(-1))], b"")),
        (PAYLOAD_NO_HEADERS, msg(&[], json)),
        (
            PAYLOAD_ONE_STR_HEADER,
            msg(&[("content-type", s("application/json"))], json),
        ),
        (
            ALL_HEADERS_TYPES,
            msg(
                &[
                    ("0", Value::Bool(true)),
                    ("1", Value::Bool(false)),
                    ("2", Value::Byte(2)),
                    ("3", Value::Short(3)),
                    ("4", Value::Int(4)),
                    ("5", Value::Long(5)),
                    ("6", Value::Bytes(b"bytes".to_vec())),
                    ("7", s("utf8")),
                    ("8", Value::Timestamp(8)),
                    ("9", Value::Uuid(*b"0123456789abcdef")),
                ],
                b"",
            ),
        ),
        (
            ERROR_EVENT_MESSAGE,
            msg(
                &[
                    (MESSAGE_TYPE, s("error")),
                    (ERROR_CODE, s("code")),
                    (ERROR_MESSAGE, s("message")),
                ],
                b"",
            ),
        ),
    ];
    for (bytes, expected) in &cases {
        assert_eq!(decode_in(&[bytes]).unwrap(), vec![expected.clone()]);
    }
    // All on one stream, as botocore's `test_all_positive_cases`.
    let all: Vec<u8> = cases.iter().flat_map(|(b, _)| b.iter().copied()).collect();
    let expected: Vec<Message> = cases.into_iter().map(|(_, m)| m).collect();
    assert_eq!(decode_in(&[&all]).unwrap(), expected);
}

#[test]
fn the_encoder_writes_botocores_bytes() {
    use botocore::*;
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a [u8], &'a [u8]);
    let cases: [Case; 4] = [
        (&[], b"", EMPTY_MESSAGE),
        (&[], b"{'foo':'bar'}", PAYLOAD_NO_HEADERS),
        (
            &[("content-type", "application/json")],
            b"{'foo':'bar'}",
            PAYLOAD_ONE_STR_HEADER,
        ),
        (
            &[
                (MESSAGE_TYPE, "error"),
                (ERROR_CODE, "code"),
                (ERROR_MESSAGE, "message"),
            ],
            b"",
            ERROR_EVENT_MESSAGE,
        ),
    ];
    for (headers, payload, expected) in cases {
        let mut out = b"before".to_vec();
        encode(&mut out, headers, payload).unwrap();
        assert_eq!(&out[6..], expected);
        assert_eq!(&out[..6], b"before");
    }
}

#[test]
fn bedrock_events_round_trip_with_their_headers() {
    let mut out = Vec::new();
    let stop = br#"{"stopReason":"guardrail_intervened"}"#;
    encode_event(&mut out, "messageStop", stop).unwrap();
    let thrown = br#"{"message":"Rate exceeded"}"#;
    encode_exception(&mut out, "throttlingException", thrown).unwrap();
    let messages = decode_in(&[&out]).unwrap();
    let [event, exception] = &messages[..] else {
        panic!("two messages: {messages:?}");
    };
    assert_eq!(event.event_type(), Some("messageStop"));
    assert_eq!(event.message_type(), Some("event"));
    assert_eq!(event.content_type(), Some("application/json"));
    assert_eq!(event.exception_type(), None);
    assert_eq!(event.payload, stop);
    assert_eq!(exception.exception_type(), Some("throttlingException"));
    assert_eq!(exception.message_type(), Some("exception"));
    assert_eq!(exception.event_type(), None);
    assert_eq!(exception.payload, thrown);
    // A header of another type is not read as a string.
    let typed = decode_in(&[botocore::INT32_HEADER]).unwrap();
    assert_eq!(typed[0].header("integer"), Some(&Value::Int(-1)));
    assert_eq!(typed[0].string("integer"), None);
}

#[test]
fn a_frame_bedrock_sent_decodes_and_encodes_byte_for_byte() {
    let messages = decode_in(&[BEDROCK_CHUNK]).unwrap();
    let [chunk] = &messages[..] else {
        panic!("one message: {messages:?}");
    };
    assert_eq!(chunk.event_type(), Some("chunk"));
    assert_eq!(chunk.message_type(), Some("event"));
    assert_eq!(chunk.content_type(), Some("application/json"));
    assert!(chunk.payload.starts_with(b"{\"bytes\":\"eyJpZCI6"));
    assert!(chunk
        .payload
        .ends_with(b"\"p\":\"abcdefghijklmnopqrstuv\"}"));
    // The encoder writes Bedrock's own headers, in Bedrock's order, to the same bytes.
    let mut out = Vec::new();
    encode_event(&mut out, "chunk", &chunk.payload).unwrap();
    assert_eq!(out, BEDROCK_CHUNK);
}

#[test]
fn every_split_of_a_stream_gives_the_same_messages() {
    let mut stream = converse_stream();
    stream.extend_from_slice(botocore::ALL_HEADERS_TYPES);
    stream.extend_from_slice(botocore::EMPTY_MESSAGE);
    stream.extend_from_slice(botocore::PAYLOAD_ONE_STR_HEADER);
    stream.extend_from_slice(BEDROCK_CHUNK);
    let stream = &stream[..];
    let whole = decode_in(&[stream]).unwrap();
    let names: Vec<Option<&str>> = whole.iter().map(Message::event_type).collect();
    assert_eq!(
        names,
        [
            Some("messageStart"),
            Some("contentBlockDelta"),
            Some("contentBlockStop"),
            Some("contentBlockStart"),
            Some("messageStop"),
            Some("metadata"),
            None,
            None,
            None,
            Some("chunk"),
        ]
    );
    for i in 0..=stream.len() {
        let (a, b) = stream.split_at(i);
        assert_eq!(decode_in(&[a, b]).unwrap(), whole, "split at {i}");
    }
    let bytes: Vec<&[u8]> = stream.chunks(1).flat_map(|b| [b, &b""[..]]).collect();
    assert_eq!(decode_in(&bytes).unwrap(), whole);
    for size in [2, 3, 5, 7, 11, 13, 64] {
        let chunks: Vec<&[u8]> = stream.chunks(size).collect();
        assert_eq!(decode_in(&chunks).unwrap(), whole, "chunks of {size}");
    }
    // A message at a time: each push stops where its message ended, the rest pushed after.
    for i in 0..=stream.len() {
        let mut decoder = Decoder::new(1024);
        let mut out = Vec::new();
        for chunk in [&stream[..i], &stream[i..]] {
            let mut rest = chunk;
            while !rest.is_empty() {
                let before = out.len();
                let read = decoder.push_message(rest, &mut out).unwrap();
                assert!(out.len() - before <= 1, "split at {i}");
                assert!(read > 0 && (read == rest.len() || out.len() > before));
                rest = &rest[read..];
            }
        }
        decoder.finish().unwrap();
        assert_eq!(out, whole, "split at {i}, a message at a time");
    }
}

#[test]
fn botocores_corrupt_vectors_are_errors() {
    use botocore::*;
    let cases: [(&[u8], EventStreamError); 6] = [
        (CORRUPTED_LENGTH, EventStreamError::PreludeCrc),
        (CORRUPTED_HEADER_LENGTH, EventStreamError::PreludeCrc),
        (CORRUPTED_PAYLOAD, EventStreamError::MessageCrc),
        (CORRUPTED_HEADERS, EventStreamError::MessageCrc),
        (DUPLICATE_HEADER, EventStreamError::DuplicateHeader),
        (INVALID_HEADERS_LENGTH, EventStreamError::BadLength),
    ];
    for (bytes, error) in cases {
        assert_eq!(decode_in(&[bytes]), Err(error), "{bytes:?}");
    }
    // botocore refuses that payload for its 24 MiB limit; this decoder for the limit it is given.
    let mut decoder = Decoder::new(1024);
    let pushed = decoder.push(INVALID_PAYLOAD_LENGTH_PRELUDE, &mut Vec::new());
    assert_eq!(pushed, Err(EventStreamError::TooLong));
}

#[test]
fn malformed_headers_and_lengths_are_errors() {
    use EventStreamError::*;
    let cases: Vec<(Vec<u8>, EventStreamError)> = vec![
        // A name longer than the block, a name length with nothing after it.
        (framed(b"\x05ab", b""), HeaderOverrun),
        (framed(b"\x01", b""), HeaderOverrun),
        // A name, then no type.
        (framed(b"\x01a", b""), HeaderOverrun),
        // Values cut short: each fixed width, and a length past the block.
        (framed(b"\x01a\x02", b""), HeaderOverrun),
        (framed(b"\x01a\x03\x00", b""), HeaderOverrun),
        (framed(b"\x01a\x04\x00\x00\x00", b""), HeaderOverrun),
        (
            framed(b"\x01a\x05\x00\x00\x00\x00\x00\x00\x00", b"x"),
            HeaderOverrun,
        ),
        (framed(b"\x01a\x06\x00", b""), HeaderOverrun),
        (framed(b"\x01a\x06\x00\x03ab", b"c"), HeaderOverrun),
        (framed(b"\x01a\x07\x00\x03ab", b"c"), HeaderOverrun),
        (framed(b"\x01a\x08\x00\x00", b""), HeaderOverrun),
        (framed(b"\x01a\x09012345678901234", b"5"), HeaderOverrun),
        // Value types past 9.
        (framed(b"\x01a\x0a", b""), UnknownValueType),
        (framed(b"\x01a\xff\x00", b""), UnknownValueType),
        // Not UTF-8: a name, a string value (a byte array may hold anything).
        (framed(b"\x01\xff\x00", b""), NotUtf8),
        (framed(b"\x01a\x07\x00\x01\xff", b""), NotUtf8),
        // A name twice, whatever the values' types.
        (framed(b"\x01a\x00\x01a\x02\x01", b""), DuplicateHeader),
        // Lengths that frame no message: under 16 bytes; headers past the payload's end.
        (framed_with(15, 0, b"", b""), BadLength),
        (framed_with(0, 0, b"", b""), BadLength),
        (framed_with(17, 2, b"\x00", b""), BadLength),
        (framed_with(u32::MAX, u32::MAX, b"", b""), BadLength),
        // Over the limit.
        (framed(b"", &[b'x'; 1024 - FRAME + 1]), TooLong),
    ];
    for (bytes, error) in &cases {
        assert_eq!(decode_in(&[bytes]), Err(*error), "{bytes:?}");
    }
    // At the limit, and a byte array that is not UTF-8.
    let at_limit = framed(b"\x01a\x06\x00\x01\xff", &[b'x'; 1024 - FRAME - 6]);
    assert_eq!(
        decode_in(&[&at_limit]).unwrap(),
        vec![msg(
            &[("a", Value::Bytes(vec![0xff]))],
            &[b'x'; 1024 - FRAME - 6]
        )]
    );
    // An empty name is a name.
    assert_eq!(
        decode_in(&[&framed(b"\x00\x00", b"")]).unwrap(),
        vec![msg(&[("", Value::Bool(true))], b"")]
    );
}

#[test]
fn an_error_is_the_same_under_every_split_and_the_messages_before_it_are_read() {
    let mut good = converse_stream();
    good.extend_from_slice(botocore::INT8_HEADER);
    let before = decode_in(&[&good]).unwrap();
    let bad: [(&[u8], EventStreamError); 5] = [
        (botocore::CORRUPTED_LENGTH, EventStreamError::PreludeCrc),
        (botocore::CORRUPTED_PAYLOAD, EventStreamError::MessageCrc),
        (
            botocore::DUPLICATE_HEADER,
            EventStreamError::DuplicateHeader,
        ),
        (
            botocore::INVALID_HEADERS_LENGTH,
            EventStreamError::BadLength,
        ),
        (
            &botocore::PAYLOAD_NO_HEADERS[..20],
            EventStreamError::Truncated,
        ),
    ];
    for (tail, error) in bad {
        let stream = [&good[..], tail].concat();
        for i in 0..=stream.len() {
            let (a, b) = stream.split_at(i);
            assert_eq!(
                decode_until_error(&[a, b], 1024),
                (before.clone(), error),
                "split at {i}"
            );
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(decode_until_error(&bytes, 1024), (before.clone(), error));
    }
}

#[test]
fn a_bad_prelude_fails_before_the_rest_arrives() {
    // Its 12 bytes are enough: the decoder buffers nothing of a message it cannot frame.
    let mut decoder = Decoder::new(1 << 20);
    let mut out = Vec::new();
    decoder
        .push(&botocore::CORRUPTED_LENGTH[..11], &mut out)
        .unwrap();
    let pushed = decoder.push(&botocore::CORRUPTED_LENGTH[11..12], &mut out);
    assert_eq!(pushed, Err(EventStreamError::PreludeCrc));
    let mut decoder = Decoder::new(64);
    let pushed = decoder.push(botocore::INVALID_PAYLOAD_LENGTH_PRELUDE, &mut out);
    assert_eq!(pushed, Err(EventStreamError::TooLong));
    assert!(out.is_empty());
}

#[test]
fn a_broken_stream_stays_broken() {
    let mut decoder = Decoder::new(1024);
    let mut out = Vec::new();
    let first = decoder.push(botocore::CORRUPTED_PAYLOAD, &mut out);
    assert_eq!(first, Err(EventStreamError::MessageCrc));
    // Good messages after it are not read: where the next one starts is not known.
    let again = decoder.push(botocore::EMPTY_MESSAGE, &mut out);
    assert_eq!(again, Err(EventStreamError::MessageCrc));
    let one = decoder.push_message(botocore::EMPTY_MESSAGE, &mut out);
    assert_eq!(one, Err(EventStreamError::MessageCrc));
    assert_eq!(decoder.finish(), Err(EventStreamError::MessageCrc));
    assert!(out.is_empty());
}

#[test]
fn a_stream_ending_inside_a_message_is_truncated() {
    for i in 1..botocore::PAYLOAD_ONE_STR_HEADER.len() {
        let cut = &botocore::PAYLOAD_ONE_STR_HEADER[..i];
        assert_eq!(decode_in(&[cut]), Err(EventStreamError::Truncated), "{i}");
    }
    assert_eq!(decode_in(&[]), Ok(vec![]));
}

#[test]
fn a_decoded_message_encodes_to_the_bytes_it_came_from() {
    use botocore::*;
    for bytes in [
        EMPTY_MESSAGE,
        INT8_HEADER,
        INT16_HEADER,
        INT32_HEADER,
        INT64_HEADER,
        PAYLOAD_NO_HEADERS,
        PAYLOAD_ONE_STR_HEADER,
        ALL_HEADERS_TYPES,
        ERROR_EVENT_MESSAGE,
        BEDROCK_CHUNK,
    ] {
        let [message] = &decode_in(&[bytes]).unwrap()[..] else {
            panic!("one message");
        };
        let mut out = Vec::new();
        encode_message(&mut out, message).unwrap();
        assert_eq!(out, bytes);
    }
    // Typed values at their extremes.
    let message = msg(
        &[
            ("b", Value::Byte(i8::MIN)),
            ("s", Value::Short(i16::MAX)),
            ("i", Value::Int(i32::MIN)),
            ("l", Value::Long(i64::MAX)),
            ("t", Value::Timestamp(-1)),
            ("u", Value::Uuid([0xff; 16])),
            ("y", Value::Bytes(vec![0, 0xff])),
            ("e", Value::Bytes(Vec::new())),
            ("z", s("")),
        ],
        b"\x00\xff",
    );
    let mut out = Vec::new();
    encode_message(&mut out, &message).unwrap();
    assert_eq!(decode_in(&[&out]).unwrap(), vec![message]);
}

#[test]
fn the_encoder_refuses_what_it_cannot_frame_and_writes_nothing() {
    let long_name = "n".repeat(256);
    let long_value = "v".repeat(65_536);
    let mut out = b"kept".to_vec();
    let refused = [
        encode(&mut out, &[(&long_name, "v")], b""),
        encode(&mut out, &[("n", &long_value)], b""),
        encode(&mut out, &[("ok", "v"), (&long_name, "v")], b""),
    ];
    assert_eq!(refused, [Err(EventStreamError::HeaderTooLong); 3]);
    let bytes = msg(&[("b", Value::Bytes(vec![0; 65_536]))], b"");
    let refused = encode_message(&mut out, &bytes);
    assert_eq!(refused, Err(EventStreamError::HeaderTooLong));
    assert_eq!(out, b"kept");
    // The longest of each is written and read back.
    let name = "n".repeat(255);
    let value = "v".repeat(65_535);
    let mut out = Vec::new();
    encode(&mut out, &[(&name, &value)], b"p").unwrap();
    let mut decoder = Decoder::new(1 << 20);
    let mut messages = Vec::new();
    decoder.push(&out, &mut messages).unwrap();
    assert_eq!(messages, vec![msg(&[(&name, s(&value))], b"p")]);
}
/// Any messages, of every header type, read back as they were written however the stream is
/// cut; a byte changed anywhere stops the stream at the message it is in, with a checksum error.
#[cfg(not(target_arch = "wasm32"))]
mod any_stream {
    use super::*;
    use proptest::prelude::*;
    use proptest::sample::Index;

    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![
            any::<bool>().prop_map(Value::Bool),
            any::<i8>().prop_map(Value::Byte),
            any::<i16>().prop_map(Value::Short),
            any::<i32>().prop_map(Value::Int),
            any::<i64>().prop_map(Value::Long),
            prop::collection::vec(any::<u8>(), 0..40).prop_map(Value::Bytes),
            ".{0,20}".prop_map(Value::String),
            any::<i64>().prop_map(Value::Timestamp),
            any::<[u8; 16]>().prop_map(Value::Uuid),
        ]
    }

    fn message() -> impl Strategy<Value = Message> {
        let headers = prop::collection::btree_map("[a-z:-]{0,12}", value(), 0..6);
        let payload = prop::collection::vec(any::<u8>(), 0..80);
        (headers, payload).prop_map(|(headers, payload)| Message {
            headers: headers
                .into_iter()
                .map(|(name, value)| Header { name, value })
                .collect(),
            payload,
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        #[test]
        fn messages_read_back_however_cut_and_a_changed_byte_is_caught(
            messages in prop::collection::vec(message(), 1..5),
            cuts in prop::collection::vec(any::<Index>(), 0..6),
            change in (any::<Index>(), 1..=u8::MAX),
        ) {
            let mut stream = Vec::new();
            let mut ends = Vec::new();
            for m in &messages {
                encode_message(&mut stream, m).unwrap();
                ends.push(stream.len());
            }
            let mut at: Vec<usize> = cuts.iter().map(|i| i.index(stream.len() + 1)).collect();
            at.sort_unstable();
            let pieces = |bytes: &[u8]| -> Vec<Vec<u8>> {
                let mut from = 0;
                let mut out = Vec::new();
                for &to in &at {
                    out.push(bytes[from..to].to_vec());
                    from = to;
                }
                out.push(bytes[from..].to_vec());
                out
            };
            let chunks = pieces(&stream);
            let chunks: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
            prop_assert_eq!(decode_in(&chunks), Ok(messages.clone()));

            let (i, bits) = change;
            let i = i.index(stream.len());
            let mut changed = stream.clone();
            changed[i] ^= bits;
            let k = ends.iter().position(|&end| i < end).unwrap();
            let chunks = pieces(&changed);
            let chunks: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
            let (read, error) = decode_until_error(&chunks, 1 << 20);
            prop_assert_eq!(read, messages[..k].to_vec());
            prop_assert!(
                matches!(error, EventStreamError::PreludeCrc | EventStreamError::MessageCrc),
                "{:?}",
                error
            );
        }
    }
}
