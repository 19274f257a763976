#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::rc::Rc;

use super::*;
use crate::api::Api;
use crate::config::Policy;
use crate::stream::caller;
use crate::stream::framing::EXCEPTION;
use crate::stream::Hold;

const IBAN_POLICY: &str = r#"{"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {
  "blocked_reply": "Not allowed.",
  "live_checks": [{"name": "no-iban", "stage": "output", "kind": "matches_pattern",
                   "pattern": "NL\\d{2}[A-Z]{4}\\d{10}", "max_match": 18}]}}}}}"#;

fn version() -> Rc<crate::config::Version> {
    Policy::from_json(IBAN_POLICY.as_bytes())
        .unwrap()
        .select(None, None, None)
        .unwrap()
}

fn event(name: &str, data: &str) -> sse::Event {
    sse::Event {
        event: Some(name.to_owned()),
        data: data.to_owned(),
    }
}

/// A stream as Bedrock frames it, each event's JSON as written here (padding `p` included).
fn framed(events: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, data) in events {
        eventstream::encode_event(&mut out, name, data.as_bytes()).unwrap();
    }
    out
}

/// Every message of `bytes`: its name (as the framing names it) and its payload as JSON.
fn messages(bytes: &[u8]) -> Vec<(String, Value)> {
    let mut decoder = eventstream::Decoder::new(1 << 20);
    let mut out = Vec::new();
    decoder.push(bytes, &mut out).unwrap();
    decoder.finish().unwrap();
    out.into_iter()
        .map(|m| {
            let name = match m.message_type() {
                Some("exception") => format!("{EXCEPTION}{}", m.exception_type().unwrap()),
                _ => m.event_type().unwrap().to_owned(),
            };
            (name, serde_json::from_slice(&m.payload).unwrap())
        })
        .collect()
}

fn names(messages: &[(String, Value)]) -> Vec<&str> {
    messages.iter().map(|(n, _)| n.as_str()).collect()
}

/// A converse-stream with reasoning, two text deltas (the padding `p` holds what looks like an
/// IBAN: never read), a tool use in two input pieces, then the stop and the metadata.
const STREAM: &[(&str, &str)] = &[
    ("messageStart", r#"{"p":"abcdefghijk","role":"assistant"}"#),
    (
        "contentBlockDelta",
        r#"{"contentBlockIndex":0,"delta":{"reasoningContent":{"text":"NL91ABNA0417164300?"}},"p":"abc"}"#,
    ),
    ("contentBlockStop", r#"{"contentBlockIndex":0,"p":"abcd"}"#),
    (
        "contentBlockDelta",
        r#"{"contentBlockIndex":1,"delta":{"text":"Sending "},"p":"NL91ABNA0417164300"}"#,
    ),
    (
        "contentBlockDelta",
        r#"{"contentBlockIndex":1,"delta":{"text":"it."},"p":"abcdefgh"}"#,
    ),
    (
        "contentBlockStop",
        r#"{"contentBlockIndex":1,"p":"abcdefghijklm"}"#,
    ),
    (
        "contentBlockStart",
        r#"{"contentBlockIndex":2,"p":"ab","start":{"toolUse":{"name":"send_email","toolUseId":"tooluse_1"}}}"#,
    ),
    (
        "contentBlockDelta",
        r#"{"contentBlockIndex":2,"delta":{"toolUse":{"input":"{\"to\": \"bob"}},"p":"abcdef"}"#,
    ),
    (
        "contentBlockDelta",
        r#"{"contentBlockIndex":2,"delta":{"toolUse":{"input":"@ok.example\"}"}},"p":"abcdef"}"#,
    ),
    (
        "contentBlockStop",
        r#"{"contentBlockIndex":2,"p":"abcdefg"}"#,
    ),
    (
        "messageStop",
        r#"{"p":"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRS","stopReason":"tool_use"}"#,
    ),
    (
        "metadata",
        r#"{"metrics":{"latencyMs":812},"p":"abcdefghijklmnopqrstuvwxyzABCDEFGHIJ","usage":{"inputTokens":19,"outputTokens":12,"totalTokens":31}}"#,
    ),
];

#[test]
fn every_event_is_read_in_its_lane_with_its_texts_and_calls() {
    let mut converse = Converse::new();
    let units: Vec<Unit> = STREAM
        .iter()
        .map(|(n, d)| converse.read(event(n, d)).unwrap())
        .collect();
    let lanes: Vec<Lane> = units.iter().map(|u| u.lane).collect();
    use Lane::{Answer, End, Side};
    assert_eq!(
        lanes,
        [Side, Side, Side, Answer, Answer, Answer, Side, Side, Side, Side, End, End]
    );
    let texts: Vec<Vec<&str>> = units
        .iter()
        .map(|u| u.texts.iter().map(|t| t.pointer.as_ref()).collect())
        .collect();
    assert_eq!(texts[1], Vec::<&str>::new(), "reasoning is no answer text");
    assert_eq!(texts[3], [TEXT]);
    assert_eq!(texts[7], [INPUT]);
    assert_eq!(
        units[7].texts[0].kind,
        TextKind::Tool {
            call: 2,
            json: true
        }
    );
    assert_eq!(units[6].calls, [2]);
    assert_eq!(units[9].calls_done, [2]);
    assert!(units[3].calls.is_empty());
    assert!(units[10].asks_for_tool, "tool_use asks for a tool");
    assert_eq!(units[10].ends, [0]);
    assert!(!units[10].terminal && units[11].terminal, "ended by both");
    let call_events: Vec<&Ev> = units[6..10].iter().map(|u| &u.ev).collect();
    assert_eq!(
        converse.call_of(2, &call_events),
        Some(ToolCall {
            name: "send_email".into(),
            arguments: r#"{"to": "bob@ok.example"}"#.into(),
            json: true,
        })
    );
}

#[test]
fn a_clean_stream_goes_out_byte_for_byte_however_split() {
    let upstream = framed(STREAM);
    for size in [1, 2, 7, 64, upstream.len()] {
        let got = caller::rewrite(
            Api::Converse,
            Hold::Rules,
            &version(),
            &upstream,
            size,
            1 << 20,
        );
        assert_eq!(got.cut, None, "{size}: the padding's IBAN is never read");
        assert_eq!(got.out, upstream, "chunks of {size}");
    }
}

#[test]
fn a_cut_text_delta_is_two_valid_deltas_and_the_stream_stops_as_bedrocks_guardrail_stops_it() {
    let upstream = framed(&[
        ("messageStart", r#"{"role":"assistant"}"#),
        (
            "contentBlockDelta",
            r#"{"contentBlockIndex":0,"delta":{"text":"Pay to NL9"},"p":"ab"}"#,
        ),
        (
            "contentBlockDelta",
            r#"{"contentBlockIndex":0,"delta":{"text":"1ABNA0417164300 now."},"p":"ab"}"#,
        ),
        ("contentBlockStop", r#"{"contentBlockIndex":0}"#),
        ("messageStop", r#"{"stopReason":"end_turn"}"#),
        (
            "metadata",
            r#"{"metrics":{"latencyMs":9},"usage":{"inputTokens":3,"outputTokens":2,"totalTokens":5}}"#,
        ),
    ]);
    for split in 1..upstream.len() {
        let got = caller::rewrite(
            Api::Converse,
            Hold::Rules,
            &version(),
            &upstream,
            split,
            1 << 20,
        );
        assert!(got.cut.is_some(), "{split}");
        let out = messages(&got.out);
        assert_eq!(
            names(&out),
            [
                "messageStart",
                "contentBlockDelta",
                "contentBlockStop",
                "messageStop",
                "metadata"
            ]
            .iter()
            .copied()
            .take(1)
            .chain(std::iter::repeat_n(
                "contentBlockDelta",
                names(&out).len() - 5
            ))
            .chain([
                "contentBlockDelta",
                "contentBlockStop",
                "messageStop",
                "metadata"
            ])
            .collect::<Vec<_>>(),
            "{split}"
        );
        let text: String = out
            .iter()
            .filter_map(|(_, d)| d.pointer("/delta/text").and_then(Value::as_str))
            .collect();
        assert_eq!(text, "Pay to ", "{split}");
        assert_eq!(
            out[out.len() - 2].1,
            json!({"stopReason": "guardrail_intervened"})
        );
        let metadata = &out[out.len() - 1].1;
        assert_eq!(metadata["metrics"]["latencyMs"], 0);
        assert!(metadata["usage"]["inputTokens"].is_u64());
        assert!(metadata["usage"]["totalTokens"].is_u64());
    }
}

#[test]
fn a_close_says_the_reply_in_a_block_of_its_own_after_closing_the_open_one() {
    let mut converse = Converse::new();
    let mut out = Vec::new();
    for (name, data) in &STREAM[..4] {
        let unit = converse.read(event(name, data)).unwrap();
        converse.write(unit.ev, &mut out);
    }
    let sent = out.len();
    converse.close(Some("Not allowed."), &mut out);
    let closing = messages(&out[sent..]);
    assert_eq!(
        closing,
        [
            ("contentBlockStop".into(), json!({"contentBlockIndex": 1})),
            (
                "contentBlockDelta".into(),
                json!({"contentBlockIndex": 2, "delta": {"text": "Not allowed."}})
            ),
            ("contentBlockStop".into(), json!({"contentBlockIndex": 2})),
            (
                "messageStop".into(),
                json!({"stopReason": "guardrail_intervened"})
            ),
            (
                "metadata".into(),
                json!({"usage": {"inputTokens": 0, "outputTokens": 1, "totalTokens": 1},
                       "metrics": {"latencyMs": 0}})
            ),
        ]
    );
    let mut again = Vec::new();
    converse.close(Some("Not allowed."), &mut again);
    assert!(again.is_empty(), "a stream ends once");
}

#[test]
fn a_close_after_the_metadata_was_read_states_its_usage_but_not_its_trace() {
    let mut converse = Converse::new();
    let metadata = r#"{"metrics":{"latencyMs":40},"usage":{"inputTokens":7,"outputTokens":3,"totalTokens":10},"trace":{"guardrail":{"modelOutput":["NL91"]}}}"#;
    converse.read(event("metadata", metadata)).unwrap();
    let mut out = Vec::new();
    converse.close(None, &mut out);
    let out = messages(&out);
    assert_eq!(names(&out), ["messageStart", "messageStop", "metadata"]);
    assert_eq!(
        out[2].1,
        json!({"usage": {"inputTokens": 7, "outputTokens": 3, "totalTokens": 10},
               "metrics": {"latencyMs": 40}})
    );
}

#[test]
fn a_refused_question_is_one_whole_stream_bedrocks_guardrail_stop() {
    let out = messages(&refusal_stream("No passwords."));
    assert_eq!(
        out,
        [
            ("messageStart".into(), json!({"role": "assistant"})),
            (
                "contentBlockDelta".into(),
                json!({"contentBlockIndex": 0, "delta": {"text": "No passwords."}})
            ),
            ("contentBlockStop".into(), json!({"contentBlockIndex": 0})),
            (
                "messageStop".into(),
                json!({"stopReason": "guardrail_intervened"})
            ),
            (
                "metadata".into(),
                json!({"usage": {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0},
                       "metrics": {"latencyMs": 0}})
            ),
        ]
    );
}

#[test]
fn a_server_tool_and_a_result_are_no_calls_to_check_and_input_alone_names_no_tool() {
    let mut converse = Converse::new();
    let server = converse
        .read(event(
            "contentBlockStart",
            r#"{"contentBlockIndex":0,"start":{"toolUse":{"name":"web_search","toolUseId":"t","type":"server_tool_use"}}}"#,
        ))
        .unwrap();
    assert_eq!(server.calls, [0], "held whole all the same");
    assert_eq!(converse.call_of(0, &[&server.ev]), None);
    let result = converse
        .read(event(
            "contentBlockStart",
            r#"{"contentBlockIndex":1,"start":{"toolResult":{"toolUseId":"t"}}}"#,
        ))
        .unwrap();
    assert_eq!(converse.call_of(1, &[&result.ev]), None);
    let input = converse
        .read(event(
            "contentBlockDelta",
            r#"{"contentBlockIndex":4,"delta":{"toolUse":{"input":""}}}"#,
        ))
        .unwrap();
    assert_eq!(input.calls, [4]);
    assert_eq!(
        converse.call_of(4, &[&input.ev]),
        Some(ToolCall {
            name: String::new(),
            arguments: "{}".into(),
            json: true
        })
    );
}

#[test]
fn exceptions_and_errors_end_the_round_and_go_out_as_they_came() {
    let mut converse = Converse::new();
    let mut out = Vec::new();
    let exception = event(
        "exception:throttlingException",
        r#"{"message":"Rate exceeded"}"#,
    );
    let unit = converse.read(exception).unwrap();
    assert_eq!(unit.lane, Lane::End);
    converse.write(unit.ev, &mut out);
    let mut want = Vec::new();
    eventstream::encode_exception(
        &mut want,
        "throttlingException",
        br#"{"message":"Rate exceeded"}"#,
    )
    .unwrap();
    assert_eq!(out, want);
    let unit = converse
        .read(event("error:InternalFailure", "broke"))
        .unwrap();
    assert_eq!(unit.lane, Lane::End);
    let mut out = Vec::new();
    converse.write(unit.ev, &mut out);
    let mut want = Vec::new();
    eventstream::encode(
        &mut want,
        &[
            (":message-type", "error"),
            (":error-code", "InternalFailure"),
            (":error-message", "broke"),
        ],
        b"",
    )
    .unwrap();
    assert_eq!(out, want);
}

#[test]
fn events_not_in_the_documented_shape_are_unreadable() {
    for (name, data) in [
        ("contentBlockDelta", r#"{"delta":{"text":"x"}}"#),
        (
            "contentBlockDelta",
            r#"{"contentBlockIndex":0,"delta":{"text":7}}"#,
        ),
        (
            "contentBlockDelta",
            r#"{"contentBlockIndex":0,"delta":"x"}"#,
        ),
        (
            "contentBlockDelta",
            r#"{"contentBlockIndex":0,"delta":{"toolUse":{}}}"#,
        ),
        (
            "contentBlockDelta",
            r#"{"contentBlockIndex":0,"delta":{"toolUse":{"input":{}}}}"#,
        ),
        (
            "contentBlockStart",
            r#"{"contentBlockIndex":0,"start":null}"#,
        ),
        ("contentBlockStop", r#"{"contentBlockIndex":"0"}"#),
        ("messageStop", r#"{"stopReason":1}"#),
        ("metadata", r#"{"usage":[]}"#),
        ("messageStart", r#"[]"#),
        ("messageStart", r#"{"#),
    ] {
        assert!(
            Converse::new().read(event(name, data)).is_err(),
            "{name} {data}"
        );
    }
    let nameless = sse::Event {
        event: None,
        data: "{}".into(),
    };
    assert!(Converse::new().read(nameless).is_err());
}

#[test]
fn a_recovered_answer_streams_as_bedrock_streams_it_and_states_its_usage() {
    let body = json!({
        "output": {"message": {"role": "assistant", "content": [
            {"reasoningContent": {"reasoningText": {"text": "Think.", "signature": "sig"}}},
            {"text": "Sending it."},
            {"toolUse": {"toolUseId": "tooluse_1", "name": "send_email", "input": {"to": "bob"}}},
        ]}},
        "stopReason": "tool_use",
        "usage": {"inputTokens": 8, "outputTokens": 6, "totalTokens": 14},
        "metrics": {"latencyMs": 321},
    });
    let Value::Object(map) = body else {
        unreachable!()
    };
    let bytes = super::super::recovered::stream(map).unwrap();
    let out = messages(&bytes);
    assert_eq!(
        names(&out),
        [
            "messageStart",
            "contentBlockDelta",
            "contentBlockDelta",
            "contentBlockStop",
            "contentBlockDelta",
            "contentBlockStop",
            "contentBlockStart",
            "contentBlockDelta",
            "contentBlockStop",
            "messageStop",
            "metadata"
        ]
    );
    assert_eq!(out[4].1["delta"]["text"], "Sending it.");
    assert_eq!(out[6].1["start"]["toolUse"]["name"], "send_email");
    assert_eq!(out[7].1["delta"]["toolUse"]["input"], r#"{"to":"bob"}"#);
    assert_eq!(out[9].1["stopReason"], "tool_use");
    // What the stream states is what the caller's read of it gives.
    let usage = crate::api::stream_usage(Api::Converse, &bytes).unwrap();
    assert_eq!((usage.input_tokens, usage.output_tokens), (8, 6));
    let read = caller::decode(Api::Converse, &bytes).unwrap();
    assert_eq!(read.text, "Sending it.");
    let again = caller::rewrite(Api::Converse, Hold::Rules, &version(), &bytes, 5, 1 << 20);
    assert_eq!(again.out, bytes, "its own reader passes it as it is");
}

#[test]
fn a_recovered_answers_usage_is_every_attempts_with_bedrocks_total_of_all_four_counts() {
    let body = json!({
        "output": {"message": {"role": "assistant", "content": [{"text": "Fine."}]}},
        "stopReason": "end_turn",
        "usage": {"inputTokens": 8, "outputTokens": 6, "totalTokens": 14},
        "metrics": {"latencyMs": 321},
    })
    .to_string();
    let total = crate::api::Usage {
        input_tokens: 16,
        output_tokens: 12,
        cache_read_tokens: 5,
        cache_creation_tokens: 2,
        reasoning_tokens: 0,
    };
    let out = crate::api::with_usage(Api::Converse, body.as_bytes(), &total).unwrap();
    let out: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        out["usage"],
        json!({"inputTokens": 16, "outputTokens": 12, "totalTokens": 35,
               "cacheReadInputTokens": 5, "cacheWriteInputTokens": 2})
    );
    assert_eq!(out["metrics"], json!({"latencyMs": 321}));
}

/// Under every hold and chunking, with reasoning and a tool use around the text and a match in
/// it or not: the caller's bytes are whole event-stream messages, every block that started stops
/// once, one `messageStop` then `metadata` end them.
#[test]
fn every_hold_and_chunking_leaves_a_whole_stream_with_every_block_stopped() {
    let with_match: Vec<(&str, String)> = STREAM
        .iter()
        .map(|(n, d)| (*n, d.replace("Sending ", "Pay NL91ABNA0417164300 ")))
        .collect();
    let with_match: Vec<(&str, &str)> = with_match.iter().map(|(n, d)| (*n, d.as_str())).collect();
    for (events, matched) in [(STREAM, false), (&with_match[..], true)] {
        let upstream = framed(events);
        for hold in [Hold::Rules, Hold::WholeText, Hold::Everything] {
            for size in [1, 3, 7, 50, upstream.len()] {
                let got =
                    caller::rewrite(Api::Converse, hold, &version(), &upstream, size, 1 << 20);
                let out = messages(&got.out);
                let context = format!("{hold:?} {size}");
                let names = names(&out);
                assert_eq!(names.first(), Some(&"messageStart"), "{context}");
                assert_eq!(
                    names[names.len() - 2..],
                    ["messageStop", "metadata"],
                    "{context}"
                );
                assert_eq!(names.iter().filter(|n| **n == "messageStop").count(), 1);
                let mut open = BTreeSet::new();
                for (name, data) in &out {
                    let index = data["contentBlockIndex"].as_u64();
                    match name.as_str() {
                        "contentBlockStart" | "contentBlockDelta" => {
                            open.insert(index.unwrap());
                        }
                        "contentBlockStop" => {
                            assert!(open.remove(&index.unwrap()), "{context}: stopped once")
                        }
                        _ => {}
                    }
                }
                assert!(open.is_empty(), "{context}");
                let text: String = out
                    .iter()
                    .filter_map(|(_, d)| d.pointer("/delta/text").and_then(Value::as_str))
                    .collect();
                if matched {
                    // Under the rules the text before the match; held, the blocked reply.
                    let want = if hold == Hold::Rules {
                        "Pay "
                    } else {
                        "Not allowed."
                    };
                    assert_eq!(text, want, "{context}");
                    assert_eq!(out[out.len() - 2].1["stopReason"], "guardrail_intervened");
                } else if hold == Hold::Rules {
                    assert_eq!(text, "Sending it.", "{context}");
                    assert!(got.out == upstream, "{context}: as it came");
                } else {
                    // Held text waits while the tool use streams ahead: the same events, reordered.
                    assert_eq!(text, "Sending it.", "{context}");
                    let mut want = messages(&upstream);
                    let mut out = out;
                    want.sort_by_key(|(n, d)| format!("{n}{d}"));
                    out.sort_by_key(|(n, d)| format!("{n}{d}"));
                    assert!(out == want, "{context}: the upstream's events");
                }
            }
        }
    }
}
