//! Anthropic's Messages on Amazon Bedrock, streamed (`/model/{model}/invoke-with-response-stream`)
//! through the built `.wasm` in the harness: the Messages events each base64 in an AWS
//! event-stream `chunk` message. The same checks as on `/v1/messages`; what the caller gets is a
//! valid event stream however the answer was cut, its chunks holding Anthropic's own events.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod common;

use common::fixtures::*;
use common::*;
use livecheck::{base64, eventstream};
use livecheck_harness::{Host, StreamId};
use serde_json::{json, Value};

const PATH: &str = "/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke-with-response-stream";
const MODEL: &str = "anthropic.claude-sonnet-4-5-20250929-v1:0";
const SIGNATURE: &str = "AWS4-HMAC-SHA256 Credential=AKID/20261207/us-east-1/bedrock/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature=abc";
const EVENT_STREAM: &str = "application/vnd.amazon.eventstream";
/// Bedrock's padding, a prefix of these of random length.
const PAD: &str = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/// The body as `AnthropicBedrock` sends it: the Messages body less `model` and `stream`, with
/// `anthropic_version`.
fn request(question: &str) -> String {
    let mut body: Value = serde_json::from_str(&Vendor::Anthropic.request(question, true)).unwrap();
    let fields = body.as_object_mut().unwrap();
    fields.remove("model");
    fields.remove("stream");
    fields.insert("anthropic_version".into(), json!("bedrock-2023-05-31"));
    body.to_string()
}

fn ask(host: &mut Host, question: &str) -> StreamId {
    send_request(
        host,
        PATH,
        &[
            ("authorization", SIGNATURE),
            ("x-amz-date", "20261207T120000Z"),
        ],
        &request(question),
        Chunking::Bytes(7),
    )
}

/// Anthropic's SSE events as Bedrock streams them: each event's JSON base64 in a chunk, padded.
fn chunks(events: &[String]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, event) in events.iter().enumerate() {
        let data = event
            .lines()
            .find_map(|l| l.strip_prefix("data: "))
            .unwrap();
        let mut bytes = String::new();
        base64::encode(data.as_bytes(), &mut bytes);
        let pad = &PAD[..(i * 7) % PAD.len() + 1];
        let payload = format!(r#"{{"bytes":"{bytes}","p":"{pad}"}}"#);
        eventstream::encode_event(&mut out, "chunk", payload.as_bytes()).unwrap();
    }
    out
}

/// The upstream answers in event-stream framing, its body in `pieces`, then its end.
fn answer_in(host: &mut Host, s: StreamId, pieces: &[&[u8]]) {
    host.send_response_headers(
        s,
        &[
            (":status", "200"),
            ("content-type", EVENT_STREAM),
            ("x-amzn-bedrock-content-type", "application/json"),
        ],
        false,
    )
    .unwrap();
    for piece in pieces {
        host.send_response_body(s, piece, false).unwrap();
    }
    host.send_response_body(s, b"", true).unwrap();
}

fn answer(host: &mut Host, s: StreamId, body: &[u8], chunking: Chunking) {
    answer_in(host, s, &chunking.split(body));
}

/// What the caller read, as the Anthropic SDK reads a Bedrock stream: a well-framed event
/// stream (ending on a whole message), every message a `chunk` event whose payload's `bytes`
/// decode to one Messages event.
struct Read {
    events: Vec<Value>,
    text: String,
    stop_reason: Option<String>,
}

fn read(body: &[u8]) -> Read {
    let mut decoder = eventstream::Decoder::new(usize::MAX);
    let mut messages = Vec::new();
    decoder.push(body, &mut messages).unwrap();
    decoder
        .finish()
        .expect("the stream ends on a whole message");
    let mut out = Read {
        events: Vec::new(),
        text: String::new(),
        stop_reason: None,
    };
    for message in messages {
        assert_eq!(message.message_type(), Some("event"));
        assert_eq!(message.event_type(), Some("chunk"));
        assert_eq!(message.content_type(), Some("application/json"));
        let part = json(&message.payload);
        let pad = part["p"].as_str().unwrap_or_default();
        assert!(PAD.starts_with(pad), "a padding of Bedrock's alphabet");
        let event = json(&base64::decode(part["bytes"].as_str().unwrap()).unwrap());
        match event["type"].as_str().unwrap() {
            "content_block_delta" if event["delta"]["type"] == "text_delta" => {
                out.text.push_str(event["delta"]["text"].as_str().unwrap());
            }
            "message_delta" => {
                out.stop_reason = event["delta"]["stop_reason"].as_str().map(str::to_owned);
            }
            _ => {}
        }
        out.events.push(event);
    }
    out
}

fn types(read: &Read) -> Vec<&str> {
    read.events
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect()
}

/// The seed policy with `no-iban` recovering or not.
fn seed(recover: bool) -> String {
    SEED.replace(r#""recover": true"#, &format!(r#""recover": {recover}"#))
}

#[test]
fn a_clean_stream_passes_byte_for_byte() {
    let upstream = chunks(&stream(
        Vendor::Anthropic,
        &["Your order ", "ships tomorrow."],
    ));
    for recover in [false, true] {
        for chunking in CHUNKINGS {
            let mut host = livecheck(&seed(recover));
            let s = ask(&mut host, CLEAN_QUESTION);
            assert_eq!(
                host.upstream_received(s).body_text(),
                request(CLEAN_QUESTION)
            );
            answer(&mut host, s, &upstream, chunking);
            let caller = host.caller_received(s);
            assert_eq!(caller.status(), Some(200));
            assert_eq!(caller.header("content-type"), Some(EVENT_STREAM));
            assert!(caller.header("x-core-check").is_none());
            assert!(
                caller.body == upstream,
                "recover {recover}, {chunking:?}: the frames as they came, padding included"
            );
            assert_eq!(host.metric("livecheck.orders.no-iban.passed"), Some(1));
        }
    }
}

#[test]
fn a_refused_question_is_answered_as_a_bedrock_stream() {
    let mut host = livecheck(SEED);
    let s = ask(&mut host, FORBIDDEN_QUESTION);
    assert!(question_held(&host, s), "no model was asked");
    let caller = host.caller_received(s);
    assert_eq!(caller.status(), Some(200));
    assert_eq!(caller.header("content-type"), Some(EVENT_STREAM));
    assert!(caller
        .header("x-core-check")
        .unwrap()
        .contains("no-passwords"));
    let read = read(&caller.body);
    assert!(
        read.text.contains("Never share a password"),
        "{}",
        read.text
    );
    assert_eq!(read.stop_reason.as_deref(), Some("refusal"));
    assert_eq!(
        read.events[0]["message"]["model"], MODEL,
        "the path names the model"
    );
    assert_eq!(types(&read).last(), Some(&"message_stop"));
}

/// The upstream's answer, cut at every byte, and at every frame's end.
fn every_split(body: &[u8]) -> Vec<Vec<&[u8]>> {
    let mut splits: Vec<Vec<&[u8]>> = (1..body.len())
        .map(|at| vec![&body[..at], &body[at..]])
        .collect();
    splits.push(body.chunks(1).collect());
    // Frame by frame: each message's total length is its first four bytes.
    let mut frames = Vec::new();
    let mut rest = body;
    while rest.len() >= 4 {
        let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
        frames.push(&rest[..len]);
        rest = &rest[len..];
    }
    splits.push(frames);
    splits
}

#[test]
fn a_stream_is_cut_where_the_match_starts_under_every_split_of_its_frames() {
    let upstream = chunks(&stream(
        Vendor::Anthropic,
        &["Pay to NL9", "1ABNA04", "17164300", " today."],
    ));
    // One worker, a stream a split: the filter keeps nothing of one stream in another.
    let mut host = livecheck(&seed(false));
    for (i, pieces) in every_split(&upstream).into_iter().enumerate() {
        let s = ask(&mut host, CLEAN_QUESTION);
        answer_in(&mut host, s, &pieces);
        let caller = host.caller_received(s);
        let read = read(&caller.body);
        let at = pieces[0].len();
        assert_eq!(read.text, "Pay to ", "split at {at}");
        assert!(
            !read.events.iter().any(|e| e.to_string().contains("NL9")),
            "split at {at}"
        );
        assert_eq!(
            read.stop_reason.as_deref(),
            Some("refusal"),
            "split at {at}"
        );
        assert_eq!(
            types(&read),
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ],
            "split at {at}: the closing events, once"
        );
        assert_eq!(
            host.metric("livecheck.orders.no-iban.failed"),
            Some(i as u64 + 1)
        );
        host.finish_stream(s).unwrap();
    }
}

/// A held round (`no-iban` recovers) whose answer fails: the model is asked again through the
/// sidecar, at Bedrock's `invoke` (never streamed); the recovered answer reaches the caller as
/// the chunks it expects, and when the sidecar cannot ask (no key of its own for a signed
/// request) the round ends as the blocked reply, never a byte of the failing answer.
#[test]
fn a_held_round_that_fails_is_recovered_or_replaced_in_chunks() {
    let upstream = chunks(&stream(
        Vendor::Anthropic,
        &["Pay to NL9", "1ABNA04", "17164300", " today."],
    ));
    for (outcome, want) in [
        (
            json!({"outcome": "answered", "body": Vendor::Anthropic.answer(CLEAN_ANSWER)}),
            CLEAN_ANSWER,
        ),
        (
            json!({"outcome": "errored",
                   "reason": "the caller signed the request, and the upstream has no key of its own"}),
            "I cannot help with that.",
        ),
    ] {
        for chunking in CHUNKINGS {
            let mut host = livecheck(SEED);
            let s = ask(&mut host, CLEAN_QUESTION);
            answer(&mut host, s, &upstream, chunking);
            let calls = callouts_to(&host, "/v1/retry");
            assert_eq!(calls.len(), 1, "{chunking:?}");
            assert_eq!(
                calls[0].header("authorization"),
                None,
                "no signature leaves"
            );
            assert_eq!(json(&calls[0].body)["path"], PATH);
            assert!(answer_held(&host, s), "nothing of the round was shown");
            host.answer_callout(
                calls[0].token,
                &[(":status", "200")],
                outcome.to_string().as_bytes(),
            )
            .unwrap();
            let caller = host.caller_received(s);
            let read = read(&caller.body);
            assert!(read.text.starts_with(want), "{chunking:?}: {}", read.text);
            assert!(!read.text.contains("NL9") && !read.text.contains("Pay to"));
            assert_eq!(types(&read).last(), Some(&"message_stop"));
        }
    }
}

const TOOLS: &str = r#"{"default_agent": "mail", "agents": {"mail": {"published": "1", "versions": {"1": {
    "blocked_reply": "Not allowed.",
    "allowed_tools": ["send_email", "lookup_*"]}}}}}"#;

/// A tool call the agent may not make is never shown, not even in part: the stream ends with
/// the denial as the answer's text, in chunks.
#[test]
fn a_tool_call_not_allowed_is_denied_in_chunks() {
    let ev = |data: Value| format!("event: x\ndata: {data}\n\n");
    let events = vec![
        ev(
            json!({"type": "message_start", "message": {"id": "msg_bdrk_1", "type": "message",
            "role": "assistant", "model": "claude-sonnet-4-5", "content": [], "stop_reason": null,
            "stop_sequence": null, "usage": {"input_tokens": 11, "output_tokens": 1}}}),
        ),
        ev(json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}})),
        ev(json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": "Dropping it."}})),
        ev(json!({"type": "content_block_stop", "index": 0})),
        ev(
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use",
            "id": "toolu_1", "name": "drop_tables", "input": {}}}),
        ),
        ev(json!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": "{\"table\": \"orders\"}"}})),
        ev(json!({"type": "content_block_stop", "index": 1})),
        ev(
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use",
            "stop_sequence": null}, "usage": {"output_tokens": 9}}),
        ),
        ev(json!({"type": "message_stop"})),
    ];
    let upstream = chunks(&events);
    for chunking in CHUNKINGS {
        let mut host = livecheck(TOOLS);
        let s = ask(&mut host, CLEAN_QUESTION);
        answer(&mut host, s, &upstream, chunking);
        let read = read(&host.caller_received(s).body);
        assert!(
            !read
                .events
                .iter()
                .any(|e| e.to_string().contains("drop_tables")),
            "{chunking:?}"
        );
        assert!(
            read.text
                .contains("The tool is not one this agent may call."),
            "{chunking:?}: {}",
            read.text
        );
        assert_eq!(read.stop_reason.as_deref(), Some("refusal"));
        assert_eq!(types(&read).last(), Some(&"message_stop"));
        assert_eq!(
            host.metric("livecheck.mail.allowed_tools.failed"),
            Some(1),
            "{chunking:?}"
        );
    }
}

/// What cannot be read is never passed unread: a chunk whose `bytes` are not strict base64, a
/// stream in server-sent events where the path promised chunks, a frame whose checksum is off.
#[test]
fn a_stream_that_cannot_be_read_is_cut_and_still_well_framed() {
    let good = chunks(&stream(
        Vendor::Anthropic,
        &["Your order ", "ships tomorrow."],
    ));
    let mut bad_base64 = chunks(&stream(Vendor::Anthropic, &["Your order "])[..2]);
    eventstream::encode_event(
        &mut bad_base64,
        "chunk",
        br#"{"bytes":"eyJ0eXBlIjoicGluZyJ9 "}"#,
    )
    .unwrap();
    let mut bad_crc = good.clone();
    let middle = bad_crc.len() / 2;
    bad_crc[middle] ^= 1;
    let sse = stream(Vendor::Anthropic, &["Your order "])
        .concat()
        .into_bytes();
    for (name, body) in [("base64", bad_base64), ("crc", bad_crc), ("sse", sse)] {
        let mut host = livecheck(&seed(false));
        let s = ask(&mut host, CLEAN_QUESTION);
        answer(&mut host, s, &body, Chunking::Whole);
        let caller = host.caller_received(s);
        let read = read(&caller.body);
        assert_eq!(read.stop_reason.as_deref(), Some("refusal"), "{name}");
        assert_eq!(types(&read).last(), Some(&"message_stop"), "{name}");
        assert_eq!(
            host.metric("livecheck.orders.no-iban.errored"),
            Some(1),
            "{name}"
        );
    }
}

/// An exception Bedrock sends inside the stream (`modelStreamErrorException`: the model failed
/// mid-answer) ends the round and reaches the caller as the exception it came as, after the text
/// before it, which its checks read: the SDK raises it as it would without livecheck.
#[test]
fn an_exception_in_the_stream_reaches_the_caller_as_it_came() {
    let events = stream(Vendor::Anthropic, &["Your order ", "ships tomorrow."]);
    let mut upstream = chunks(&events[..4]);
    let exception = br#"{"message":"The model failed.","originalStatusCode":500}"#;
    eventstream::encode_exception(&mut upstream, "modelStreamErrorException", exception).unwrap();
    for recover in [false, true] {
        for chunking in CHUNKINGS {
            let mut host = livecheck(&seed(recover));
            let s = ask(&mut host, CLEAN_QUESTION);
            answer(&mut host, s, &upstream, chunking);
            let body = host.caller_received(s).body.clone();
            let mut decoder = eventstream::Decoder::new(usize::MAX);
            let mut messages = Vec::new();
            decoder.push(&body, &mut messages).unwrap();
            decoder.finish().unwrap();
            let last = messages.pop().unwrap();
            assert_eq!(
                last.exception_type(),
                Some("modelStreamErrorException"),
                "recover {recover}, {chunking:?}"
            );
            assert_eq!(last.payload, exception);
            let mut rest = Vec::new();
            for m in &messages {
                eventstream::encode_message(&mut rest, m).unwrap();
            }
            let read = read(&rest);
            assert_eq!(read.text, "Your order ships tomorrow.");
        }
    }
}

/// Background checks read a streamed answer in chunks once it completed: with no blocking check
/// (the stream passes untouched, a copy kept) and beside a rule (the rewriter's copy). The turn's
/// report names the answer's id either way.
#[test]
fn background_checks_read_the_answer_from_its_chunks() {
    let tone = r#"{"name": "tone", "stage": "output", "kind": "polite_tone", "mode": "background", "sample": 1, "judge_model": "judge-1"}"#;
    let iban = r#"{"name": "no-iban", "stage": "output", "kind": "matches_pattern", "pattern": "NL\\d{2}[A-Z]{4}\\d{10}", "max_match": 18}"#;
    let upstream = chunks(&stream(
        Vendor::Anthropic,
        &["Your order ", "ships tomorrow."],
    ));
    for checks in [tone.to_owned(), format!("{iban}, {tone}")] {
        let config = format!(
            r#"{{"default_agent": "a", "agents": {{"a": {{"published": "1", "versions": {{"1": {{"live_checks": [{checks}]}}}}}}}}}}"#
        );
        let mut host = livecheck(&config);
        let s = ask(&mut host, CLEAN_QUESTION);
        answer(&mut host, s, &upstream, Chunking::Bytes(7));
        assert!(host.caller_received(s).body == upstream, "{checks}");
        host.finish_stream(s).unwrap();
        host.advance_time(std::time::Duration::from_millis(250));
        let reports: Vec<Value> = host
            .pending_callouts()
            .iter()
            .map(|c| json(&c.body))
            .collect();
        assert_eq!(reports.len(), 1);
        assert_eq!(
            reports[0]["response_id"], "msg_01Up",
            "{checks}: the answer's id, from its first chunk"
        );
        let texts: Vec<Value> = reports
            .iter()
            .flat_map(|r| r["background"].as_array().cloned().unwrap_or_default())
            .map(|b| b["judge"]["text"].clone())
            .collect();
        assert_eq!(texts, [json!("Your order ships tomorrow.")], "{checks}");
    }
}

/// `stream_frame_bytes` frames a Bedrock stream too: its length announced, the chunks (or the cut's
/// closing chunks) followed by whole messages of an event type no SDK names, which botocore's
/// parser leaves empty and the anthropic SDK's Bedrock decoder skips, to exactly the frame's length.
#[test]
fn a_framed_stream_is_padded_with_whole_messages_clean_or_cut() {
    let framed = seed(false).replacen('{', "{\"stream_frame_bytes\": 65536, ", 1);
    for (pieces, cut) in [
        (&["Your order ", "ships tomorrow."][..], false),
        (&["Pay to NL9", "1ABNA0417164300"][..], true),
    ] {
        let mut host = livecheck(&framed);
        let s = ask(&mut host, CLEAN_QUESTION);
        let upstream = chunks(&stream(Vendor::Anthropic, pieces));
        answer(&mut host, s, &upstream, Chunking::Bytes(7));
        let caller = host.caller_received(s);
        assert_eq!(caller.header("content-length"), Some("65536"));
        assert_eq!(caller.body.len(), 65536, "padded to exactly the frame");
        let mut decoder = eventstream::Decoder::new(usize::MAX);
        let mut messages = Vec::new();
        decoder.push(&caller.body, &mut messages).unwrap();
        decoder.finish().expect("whole messages to the end");
        let padding = messages
            .iter()
            .position(|m| m.event_type() == Some("livecheckPadding"))
            .expect("padded");
        assert!(messages[padding..]
            .iter()
            .all(|m| m.event_type() == Some("livecheckPadding")));
        let mut answer = Vec::new();
        for m in &messages[..padding] {
            eventstream::encode_message(&mut answer, m).unwrap();
        }
        let read = read(&answer);
        if cut {
            assert_eq!(read.text, "Pay to ");
            assert_eq!(read.stop_reason.as_deref(), Some("refusal"));
        } else {
            assert_eq!(answer, upstream);
        }
    }
}
