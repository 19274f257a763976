//! Amazon Bedrock Converse through the built `.wasm` in the harness: `POST /model/{modelId}/converse`
//! (a JSON answer) and `/converse-stream` (an AWS event stream, `application/vnd.amazon.eventstream`).
//! The same checks as every API, Bedrock's stop shape (`stopReason: "guardrail_intervened"`, the
//! reply as the assistant's text), requests never changed (the caller signed them with SigV4), and
//! the caller's signature never handed to the judge nor reported.
//!
//! Shapes: botocore's bedrock-runtime service model (`ConverseRequest`, `ConverseResponse`,
//! `ConverseStreamOutput`); the AWS API reference `API_runtime_Converse`, `API_runtime_ConverseStream`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use common::fixtures::*;
use common::*;
use livecheck::eventstream;
use livecheck_harness::{Host, StreamId};
use serde_json::{json, Value};

/// boto3 percent-encodes the model id's `:` in the path.
const MODEL_PATH: &str = "/model/anthropic.claude-3-haiku-20240307-v1%3A0";
const EVENT_STREAM: &str = "application/vnd.amazon.eventstream";
const SIGNATURE: &str = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261207/us-east-1/bedrock/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7";

fn path(stream: bool) -> String {
    if stream {
        format!("{MODEL_PATH}/converse-stream")
    } else {
        format!("{MODEL_PATH}/converse")
    }
}

/// What boto3 sends beside the body: the SigV4 signature, its date, a session token.
fn headers() -> Vec<(&'static str, &'static str)> {
    vec![
        ("authorization", SIGNATURE),
        ("x-amz-date", "20261207T120000Z"),
        ("x-amz-security-token", "FwoGZXIvYXdzEXAMPLETOKEN"),
    ]
}

/// A request as boto3's `converse`/`converse_stream` sends it.
fn request(question: &str) -> String {
    json!({
        "messages": [{"role": "user", "content": [{"text": question}]}],
        "system": [{"text": "You answer questions about orders."}],
        "inferenceConfig": {"maxTokens": 256, "temperature": 0.2},
    })
    .to_string()
}

fn answer_of(content: Value, stop: &str) -> Value {
    json!({
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": stop,
        "usage": {"inputTokens": 8, "outputTokens": 6, "totalTokens": 14},
        "metrics": {"latencyMs": 321},
    })
}

fn answer(text: &str) -> String {
    answer_of(json!([{"text": text}]), "end_turn").to_string()
}

/// The text of a Converse answer as boto3 returns it: its text blocks, in order.
fn text_of(body: &Value) -> String {
    body["output"]["message"]["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| b["text"].as_str())
        .collect()
}

fn ask(host: &mut Host, question: &str, stream: bool) -> StreamId {
    send_request(
        host,
        &path(stream),
        &headers(),
        &request(question),
        Chunking::Bytes(7),
    )
}

/// The seed policy with `no-iban` recovering or not.
fn seed(recover: bool) -> String {
    SEED.replace(r#""recover": true"#, &format!(r#""recover": {recover}"#))
}

/// The upstream answers `body` (any bytes) in the given chunks.
fn send_chunks(host: &mut Host, s: StreamId, content_type: &str, chunks: &[&[u8]]) {
    host.send_response_headers(
        s,
        &[
            (":status", "200"),
            ("content-type", content_type),
            ("x-amzn-requestid", "5c3b7e7a-0000-4000-8000-000000000001"),
        ],
        false,
    )
    .unwrap();
    for chunk in chunks {
        host.send_response_body(s, chunk, false).unwrap();
    }
    host.send_response_body(s, b"", true).unwrap();
}

fn send_json(host: &mut Host, s: StreamId, body: &str, chunking: Chunking) {
    send_chunks(
        host,
        s,
        "application/json",
        &chunking.split(body.as_bytes()),
    );
}

#[test]
fn a_clean_turn_passes_as_it_came() {
    let mut host = livecheck(SEED);
    let s = ask(&mut host, CLEAN_QUESTION, false);
    let upstream = host.upstream_received(s);
    assert_eq!(
        upstream.body_text(),
        request(CLEAN_QUESTION),
        "never changed"
    );
    assert_eq!(upstream.header("authorization"), Some(SIGNATURE));
    let body = answer(CLEAN_ANSWER);
    send_json(&mut host, s, &body, Chunking::Bytes(7));
    let caller = host.caller_received(s);
    assert_eq!(caller.status(), Some(200));
    assert!(caller.header("x-core-check").is_none());
    assert_eq!(caller.body_text(), body);
}

#[test]
fn a_forbidden_question_is_refused_as_a_guardrail_stop_before_any_model_is_asked() {
    let mut host = livecheck(SEED);
    let s = ask(&mut host, FORBIDDEN_QUESTION, false);
    assert!(question_held(&host, s));
    let caller = host.caller_received(s);
    assert_eq!(caller.status(), Some(200));
    assert!(caller
        .header("x-core-check")
        .unwrap()
        .contains("no-passwords"));
    assert_eq!(caller.header("content-type"), Some("application/json"));
    let body = json(&caller.body);
    assert!(text_of(&body).contains("Never share a password"));
    assert_eq!(body["stopReason"], "guardrail_intervened");
    assert_eq!(body["output"]["message"]["role"], "assistant");
    assert_eq!(body["usage"]["totalTokens"], 0);
    assert_eq!(body["metrics"]["latencyMs"], 0);
}

#[test]
fn a_forbidden_answer_is_withheld_as_a_guardrail_stop() {
    for chunking in CHUNKINGS {
        let mut host = livecheck(&seed(false));
        let s = ask(&mut host, CLEAN_QUESTION, false);
        send_json(&mut host, s, &answer(FORBIDDEN_ANSWER), chunking);
        let caller = host.caller_received(s);
        assert!(!caller.body_text().contains("NL91"), "{chunking:?}");
        let body = json(&caller.body);
        assert_eq!(body["stopReason"], "guardrail_intervened");
        assert!(text_of(&body).starts_with("I cannot help with that."));
        assert_eq!(body["usage"]["totalTokens"], 14, "the answer's usage kept");
        assert_eq!(body["metrics"]["latencyMs"], 321);
        assert_eq!(host.metric("livecheck.orders.no-iban.failed"), Some(1));
    }
}

/// A judged check is asked without anything that signs for AWS: the judge calls its own model.
#[test]
fn a_judged_check_never_gets_the_callers_aws_signature() {
    let config = r#"{"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {
        "blocked_reply": "Not allowed.",
        "live_checks": [{"name": "polite", "stage": "input", "kind": "polite_tone"}]}}}}}"#;
    for stream in [false, true] {
        let mut host = livecheck(config);
        let s = ask(&mut host, CLEAN_QUESTION, stream);
        let calls = callouts_to(&host, "/v1/judge");
        assert_eq!(calls.len(), 1);
        assert_eq!(
            json(&calls[0].body)["judge_model"],
            "anthropic.claude-3-haiku-20240307-v1:0",
            "the model the path names, decoded"
        );
        for (name, value) in &calls[0].headers {
            assert!(
                name != "authorization" && !name.starts_with("x-amz"),
                "{name}"
            );
            assert!(
                !value.contains("AWS4-HMAC") && !value.contains("FwoG"),
                "{name}"
            );
        }
        let body = String::from_utf8_lossy(&calls[0].body);
        assert!(
            !body.contains("AWS4-HMAC") && !body.contains("AKIDEXAMPLE") && !body.contains("FwoG")
        );
        let verdict = r#"{"outcome": "passed", "score": 0.9, "reason": "ok"}"#;
        host.answer_callout(calls[0].token, &[(":status", "200")], verdict.as_bytes())
            .unwrap();
        assert!(!question_held(&host, s), "passed, sent on");
        let upstream = host.upstream_received(s);
        assert_eq!(upstream.body_text(), request(CLEAN_QUESTION));
        assert_eq!(upstream.header("authorization"), Some(SIGNATURE));
    }
}

const TOOLS: &str = r#"{"default_agent": "mail", "agents": {"mail": {"published": "1", "versions": {"1": {
    "blocked_reply": "Not allowed.",
    "allowed_tools": ["send_email", "lookup_*"],
    "tool_checks": [
        {"name": "no-billing", "tool": "send_email", "when": "The email contains billing information", "reason": "No billing info in email."}
    ]}}}}}"#;

fn tool_answer(name: &str, input: Value) -> String {
    answer_of(
        json!([{"text": "Sending it."},
               {"toolUse": {"toolUseId": "tooluse_1", "name": name, "input": input}}]),
        "tool_use",
    )
    .to_string()
}

#[test]
fn a_tool_use_not_allowed_is_denied() {
    for chunking in [Chunking::Bytes(7), Chunking::Whole] {
        let mut host = livecheck(TOOLS);
        let s = ask(&mut host, CLEAN_QUESTION, false);
        let body = tool_answer("drop_tables", json!({"table": "orders"}));
        send_json(&mut host, s, &body, chunking);
        let got = host.caller_received(s);
        assert!(!got.body_text().contains("drop_tables"), "{chunking:?}");
        assert_eq!(host.metric("livecheck.mail.allowed_tools.failed"), Some(1));
        let body = json(&got.body);
        assert_eq!(body["stopReason"], "guardrail_intervened");
        assert_eq!(
            text_of(&body),
            "The tool is not one this agent may call.",
            "{chunking:?}"
        );
    }
}

#[test]
fn a_tool_use_a_tool_check_denies_is_withheld_with_the_rows_reason() {
    let mut host = livecheck(TOOLS);
    let s = ask(&mut host, CLEAN_QUESTION, false);
    let body = tool_answer(
        "send_email",
        json!({"to": "bob@ok.example", "body": "Invoice 7"}),
    );
    send_json(&mut host, s, &body, Chunking::Whole);
    let checks = callouts_to(&host, "/v1/tool-check");
    assert_eq!(checks.len(), 1);
    let asked = json(&checks[0].body);
    assert_eq!(asked["tool"], "send_email");
    let arguments: Value = serde_json::from_str(asked["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(arguments["to"], "bob@ok.example");
    let verdict = json!({"outcome": "failed", "reason": "It attaches an invoice."}).to_string();
    host.answer_callout(checks[0].token, &[(":status", "200")], verdict.as_bytes())
        .unwrap();
    let got = host.caller_received(s);
    assert!(!got.body_text().contains("bob@ok.example"));
    let body = json(&got.body);
    assert_eq!(body["stopReason"], "guardrail_intervened");
    assert_eq!(text_of(&body), "No billing info in email.");
    assert_eq!(host.metric("livecheck.mail.no-billing.failed"), Some(1));
}

/// A Converse turn is recorded as any other: its results reach the sidecar without the turn's
/// text or anything of the caller's signature.
#[test]
fn a_converse_turn_reports_its_results_without_its_credentials() {
    let mut host = livecheck(&seed(false));
    let s = ask(&mut host, CLEAN_QUESTION, false);
    send_json(&mut host, s, &answer(FORBIDDEN_ANSWER), Chunking::Whole);
    host.finish_stream(s).unwrap();
    host.advance_time(std::time::Duration::from_millis(250));
    let sent = report_callouts(&host);
    assert_eq!(sent.len(), 1);
    let report = report_of(&sent[0]);
    let results = report["results"].as_array().unwrap();
    let iban = results.iter().find(|r| r["name"] == "no-iban").unwrap();
    assert_eq!(iban["outcome"], "failed");
    let body = String::from_utf8_lossy(&sent[0].body);
    for secret in ["NL91", "AWS4-HMAC", "AKIDEXAMPLE", "FwoG", "order 17"] {
        assert!(!body.contains(secret), "{secret}");
    }
    assert_eq!(sent[0].header("authorization"), None);
    assert!(sent[0]
        .headers
        .iter()
        .all(|(n, v)| !n.starts_with("x-amz") && !v.contains("AWS4")));
}

/// One event as Bedrock frames it (`:event-type`, `:content-type`, `:message-type`), with the
/// padding member `p` Bedrock adds to every payload.
fn frame(out: &mut Vec<u8>, name: &str, mut data: Value) {
    data["p"] = json!("abcdefghijklmnopqrstuvwxyzABCDEF");
    eventstream::encode_event(out, name, data.to_string().as_bytes()).unwrap();
}

fn stream_end(out: &mut Vec<u8>, stop: &str) {
    frame(out, "messageStop", json!({"stopReason": stop}));
    frame(
        out,
        "metadata",
        json!({"usage": {"inputTokens": 8, "outputTokens": 6, "totalTokens": 14},
               "metrics": {"latencyMs": 321}}),
    );
}

/// A converse-stream saying `pieces` in one text block, ended as Bedrock ends a turn.
fn stream(pieces: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    frame(&mut out, "messageStart", json!({"role": "assistant"}));
    for piece in pieces {
        frame(
            &mut out,
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"text": piece}}),
        );
    }
    frame(
        &mut out,
        "contentBlockStop",
        json!({"contentBlockIndex": 0}),
    );
    stream_end(&mut out, "end_turn");
    out
}

/// A converse-stream saying a sentence, then calling `name` with `input` in two pieces.
fn tool_stream(name: &str, input: &Value) -> Vec<u8> {
    let input = input.to_string();
    let (a, b) = input.split_at(input.len() / 2);
    let mut out = Vec::new();
    frame(&mut out, "messageStart", json!({"role": "assistant"}));
    frame(
        &mut out,
        "contentBlockDelta",
        json!({"contentBlockIndex": 0, "delta": {"text": "Sending it."}}),
    );
    frame(
        &mut out,
        "contentBlockStop",
        json!({"contentBlockIndex": 0}),
    );
    frame(
        &mut out,
        "contentBlockStart",
        json!({"contentBlockIndex": 1,
               "start": {"toolUse": {"toolUseId": "tooluse_1", "name": name}}}),
    );
    for piece in [a, b] {
        frame(
            &mut out,
            "contentBlockDelta",
            json!({"contentBlockIndex": 1, "delta": {"toolUse": {"input": piece}}}),
        );
    }
    frame(
        &mut out,
        "contentBlockStop",
        json!({"contentBlockIndex": 1}),
    );
    stream_end(&mut out, "tool_use");
    out
}

/// What boto3's `converse_stream` yields from the bytes a caller got: each event's name and
/// payload. The bytes must be whole AWS event-stream messages, every one an event.
fn events(bytes: &[u8]) -> Vec<(String, Value)> {
    let mut decoder = eventstream::Decoder::new(1 << 20);
    let mut messages = Vec::new();
    decoder.push(bytes, &mut messages).unwrap();
    decoder
        .finish()
        .expect("the stream ends on a whole message");
    messages
        .into_iter()
        .map(|m| {
            assert_eq!(m.message_type(), Some("event"));
            assert_eq!(m.content_type(), Some("application/json"));
            let name = m.event_type().unwrap().to_owned();
            (name, json(&m.payload))
        })
        .collect()
}

/// The text deltas' text, as a caller joins it.
fn streamed_text(events: &[(String, Value)]) -> String {
    events
        .iter()
        .filter(|(name, _)| name == "contentBlockDelta")
        .filter_map(|(_, d)| d["delta"]["text"].as_str())
        .collect()
}

/// The stream ends as Bedrock ends a turn its guardrail stopped: every block that started
/// stopped, `messageStop` with `guardrail_intervened`, then `metadata` with usage and metrics.
fn assert_guardrail_end(events: &[(String, Value)], context: &str) {
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"messageStart"), "{context}");
    assert_eq!(
        names[names.len() - 2..],
        ["messageStop", "metadata"],
        "{context}"
    );
    assert_eq!(
        events[events.len() - 2].1["stopReason"],
        "guardrail_intervened",
        "{context}"
    );
    let metadata = &events[events.len() - 1].1;
    for count in ["inputTokens", "outputTokens", "totalTokens"] {
        assert!(metadata["usage"][count].is_u64(), "{context}: {count}");
    }
    assert!(metadata["metrics"]["latencyMs"].is_u64(), "{context}");
    assert_eq!(
        names.iter().filter(|n| **n == "messageStop").count(),
        1,
        "{context}"
    );
    let mut open = std::collections::BTreeSet::new();
    for (name, data) in events {
        let index = data["contentBlockIndex"].as_u64();
        match name.as_str() {
            "contentBlockStart" | "contentBlockDelta" => {
                open.insert(index.unwrap());
            }
            "contentBlockStop" => assert!(open.remove(&index.unwrap()), "{context}"),
            _ => {}
        }
    }
    assert!(open.is_empty(), "{context}: every block stopped");
}

#[test]
fn a_clean_stream_passes_byte_for_byte_under_every_chunking() {
    let upstream = stream(&["Your order ", "ships ", "tomorrow."]);
    for chunking in CHUNKINGS.into_iter().chain([Chunking::Bytes(5)]) {
        let mut host = livecheck(SEED);
        let s = ask(&mut host, CLEAN_QUESTION, true);
        assert_eq!(
            host.upstream_received(s).body_text(),
            request(CLEAN_QUESTION)
        );
        send_chunks(&mut host, s, EVENT_STREAM, &chunking.split(&upstream));
        let caller = host.caller_received(s);
        assert_eq!(caller.status(), Some(200));
        assert_eq!(caller.header("content-type"), Some(EVENT_STREAM));
        assert!(caller.header("x-core-check").is_none());
        assert_eq!(caller.body, upstream, "{chunking:?}");
    }
}

#[test]
fn a_forbidden_question_streamed_is_refused_as_one_whole_event_stream() {
    let mut host = livecheck(SEED);
    let s = ask(&mut host, FORBIDDEN_QUESTION, true);
    assert!(question_held(&host, s));
    let caller = host.caller_received(s);
    assert_eq!(caller.status(), Some(200));
    assert_eq!(caller.header("content-type"), Some(EVENT_STREAM));
    assert!(caller
        .header("x-core-check")
        .unwrap()
        .contains("no-passwords"));
    let got = events(&caller.body);
    assert_guardrail_end(&got, "refused");
    assert!(streamed_text(&got).contains("Never share a password"));
    assert_eq!(got[got.len() - 1].1["usage"]["totalTokens"], 0);
}

/// Every way the frames can be split: 1-byte chunks, every 2-way split, assorted sizes.
fn splits(body: &[u8]) -> Vec<Vec<&[u8]>> {
    let mut out: Vec<Vec<&[u8]>> = vec![body.chunks(1).collect()];
    for at in 1..body.len() {
        let (a, b) = body.split_at(at);
        out.push(vec![a, b]);
    }
    for size in [2, 3, 7, 16, 64, 100, 333] {
        out.push(body.chunks(size).collect());
    }
    out
}

#[test]
fn a_streamed_answer_is_cut_at_the_matchs_first_character_under_every_split() {
    let upstream = stream(&["Pay to NL9", "1ABNA04", "17164300", " today."]);
    let mut host = livecheck(&seed(false));
    for (i, chunks) in splits(&upstream).into_iter().enumerate() {
        let s = ask(&mut host, CLEAN_QUESTION, true);
        send_chunks(&mut host, s, EVENT_STREAM, &chunks);
        let caller = host.caller_received(s);
        let got = events(&caller.body);
        assert_eq!(streamed_text(&got), "Pay to ", "split {i}");
        assert!(
            !String::from_utf8_lossy(&caller.body).contains("NL9"),
            "split {i}"
        );
        assert_guardrail_end(&got, &format!("split {i}"));
    }
    let runs = splits(&upstream).len() as u64;
    assert_eq!(host.metric("livecheck.orders.no-iban.failed"), Some(runs));
}

/// A blocking judged output check holds the round whole: when it fails, the caller gets the
/// reply instead of anything of the answer, stopped as Bedrock's guardrail stops a turn.
#[test]
fn a_held_streamed_round_that_fails_its_judge_ends_as_the_reply_stopped() {
    let judged = r#"{"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {
        "blocked_reply": "Not allowed.",
        "live_checks": [
            {"name": "polite-out", "stage": "output", "kind": "polite_tone", "judge_model": "judge-1"}
        ]}}}}}"#;
    for chunking in CHUNKINGS {
        let mut host = livecheck(judged);
        let s = ask(&mut host, CLEAN_QUESTION, true);
        let upstream = stream(&["Go ", "away."]);
        send_chunks(&mut host, s, EVENT_STREAM, &chunking.split(&upstream));
        let judge = callouts_to(&host, "/v1/judge");
        assert_eq!(judge.len(), 1, "{chunking:?}");
        assert_eq!(json(&judge[0].body)["text"], "Go away.");
        assert!(
            !String::from_utf8_lossy(&host.caller_received(s).body).contains("away"),
            "{chunking:?}: held"
        );
        let verdict = r#"{"outcome": "failed", "score": 0.1, "reason": "rude"}"#;
        host.answer_callout(judge[0].token, &[(":status", "200")], verdict.as_bytes())
            .unwrap();
        let caller = host.caller_received(s);
        let got = events(&caller.body);
        assert_eq!(streamed_text(&got), "Not allowed.", "{chunking:?}");
        assert_guardrail_end(&got, &format!("{chunking:?}"));
        assert_eq!(
            got[got.len() - 1].1["usage"]["totalTokens"],
            14,
            "the answer's usage"
        );
        assert_eq!(host.metric("livecheck.a.polite-out.failed"), Some(1));
    }
}

#[test]
fn a_streamed_tool_use_not_allowed_is_never_shown_and_ends_the_stream() {
    let upstream = tool_stream("drop_tables", &json!({"table": "orders"}));
    for chunking in CHUNKINGS {
        let mut host = livecheck(TOOLS);
        let s = ask(&mut host, CLEAN_QUESTION, true);
        send_chunks(&mut host, s, EVENT_STREAM, &chunking.split(&upstream));
        let caller = host.caller_received(s);
        assert!(
            !String::from_utf8_lossy(&caller.body).contains("drop_tables"),
            "{chunking:?}"
        );
        let got = events(&caller.body);
        assert!(
            got.iter().all(|(name, _)| name != "contentBlockStart"),
            "{chunking:?}: nothing of the call"
        );
        assert_eq!(
            streamed_text(&got),
            "Sending it.The tool is not one this agent may call.",
            "{chunking:?}"
        );
        assert_guardrail_end(&got, &format!("{chunking:?}"));
        assert_eq!(host.metric("livecheck.mail.allowed_tools.failed"), Some(1));
    }
}

#[test]
fn a_streamed_tool_use_waits_whole_for_its_tool_check_and_a_denial_ends_the_stream() {
    let input = json!({"to": "bob@ok.example", "body": "Invoice 7"});
    let upstream = tool_stream("send_email", &input);
    for deny in [true, false] {
        let mut host = livecheck(TOOLS);
        let s = ask(&mut host, CLEAN_QUESTION, true);
        send_chunks(
            &mut host,
            s,
            EVENT_STREAM,
            &Chunking::Bytes(7).split(&upstream),
        );
        let checks = callouts_to(&host, "/v1/tool-check");
        assert_eq!(checks.len(), 1);
        let asked = json(&checks[0].body);
        assert_eq!(asked["tool"], "send_email");
        let arguments: Value = serde_json::from_str(asked["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(arguments, input, "the input pieces joined");
        let before = String::from_utf8_lossy(&host.caller_received(s).body).into_owned();
        assert!(
            !before.contains("send_email") && !before.contains("bob@"),
            "held whole"
        );
        let (outcome, reason) = if deny {
            ("failed", "It attaches an invoice.")
        } else {
            ("passed", "Fine.")
        };
        let verdict = json!({"outcome": outcome, "reason": reason}).to_string();
        host.answer_callout(checks[0].token, &[(":status", "200")], verdict.as_bytes())
            .unwrap();
        let caller = host.caller_received(s);
        assert!(caller.end_of_stream);
        if deny {
            let got = events(&caller.body);
            assert!(!String::from_utf8_lossy(&caller.body).contains("bob@"));
            assert_eq!(streamed_text(&got), "Sending it.No billing info in email.");
            assert_guardrail_end(&got, "denied");
            assert_eq!(host.metric("livecheck.mail.no-billing.failed"), Some(1));
        } else {
            assert_eq!(caller.body, upstream, "allowed: as it came");
        }
    }
}

/// An exception Bedrock sends in the stream reaches the caller as it came (boto3 raises it).
#[test]
fn an_exception_in_the_stream_reaches_the_caller_as_bedrock_sent_it() {
    let mut upstream = Vec::new();
    frame(&mut upstream, "messageStart", json!({"role": "assistant"}));
    frame(
        &mut upstream,
        "contentBlockDelta",
        json!({"contentBlockIndex": 0, "delta": {"text": "Your order "}}),
    );
    eventstream::encode_exception(
        &mut upstream,
        "modelStreamErrorException",
        br#"{"message":"The model failed","originalStatusCode":500}"#,
    )
    .unwrap();
    for chunking in CHUNKINGS {
        let mut host = livecheck(&seed(false));
        let s = ask(&mut host, CLEAN_QUESTION, true);
        send_chunks(&mut host, s, EVENT_STREAM, &chunking.split(&upstream));
        assert_eq!(host.caller_received(s).body, upstream, "{chunking:?}");
    }
}

/// A stream that is not whole AWS event-stream messages is never passed unread: what was
/// confirmed before goes, then the stream ends as a guardrail stop.
#[test]
fn a_stream_that_breaks_its_framing_is_cut_where_it_breaks() {
    let mut upstream = stream(&["Your order ", "ships tomorrow."]);
    // A byte of the second text delta: its message's CRC no longer holds.
    let broken = upstream.windows(5).position(|w| w == b"ships").unwrap();
    upstream[broken] ^= 0x20;
    let mut host = livecheck(&seed(false));
    let s = ask(&mut host, CLEAN_QUESTION, true);
    send_chunks(&mut host, s, EVENT_STREAM, &[&upstream]);
    let got = events(&host.caller_received(s).body);
    assert_guardrail_end(&got, "broken");
    assert_eq!(streamed_text(&got), "Your order ");
    assert!(!String::from_utf8_lossy(&host.caller_received(s).body).contains("hips"));
}

/// `stream_frame_bytes` frames a converse-stream too: its length announced, the answer or the cut
/// followed by whole event-stream messages of an event type no SDK names (`livecheckPadding`, which
/// boto3 skips), never SSE comments, to exactly the frame's length.
#[test]
fn a_framed_converse_stream_is_padded_with_whole_messages_to_its_length() {
    let framed = seed(false).replacen("{\n", "{\n  \"stream_frame_bytes\": 65536,\n", 1);
    for (pieces, cut) in [
        (&["Your order ", "ships tomorrow."][..], false),
        (&["Pay to NL9", "1ABNA0417164300"][..], true),
    ] {
        let mut host = livecheck(&framed);
        let s = ask(&mut host, CLEAN_QUESTION, true);
        let upstream = stream(pieces);
        send_chunks(
            &mut host,
            s,
            EVENT_STREAM,
            &Chunking::Bytes(7).split(&upstream),
        );
        let caller = host.caller_received(s);
        assert_eq!(
            caller.header("content-length"),
            Some("65536"),
            "the frame announced"
        );
        assert_eq!(caller.body.len(), 65536, "padded to exactly the frame");
        let mut messages = Vec::new();
        let mut decoder = livecheck::eventstream::Decoder::new(1 << 20);
        decoder
            .push(&caller.body, &mut messages)
            .expect("whole messages");
        decoder.finish().expect("none cut short");
        let padding = messages
            .iter()
            .position(|m| m.event_type() == Some("livecheckPadding"))
            .expect("padded");
        assert!(messages[padding..]
            .iter()
            .all(|m| m.event_type() == Some("livecheckPadding")));
        let mut answer = Vec::new();
        for m in &messages[..padding] {
            livecheck::eventstream::encode_message(&mut answer, m).expect("frames");
        }
        let got = events(&answer);
        if cut {
            assert_eq!(streamed_text(&got), "Pay to ");
            assert_guardrail_end(&got, "cut");
        } else {
            assert_eq!(answer, upstream);
        }
    }
}

/// A held stream (`no-iban` recovers) whose answer fails: the caller sees nothing of it; the
/// sidecar's passing answer (a whole Converse answer) reaches it re-emitted as a converse-stream
/// with the usage of both answers, or, when the sidecar cannot ask again, the reply stopped.
#[test]
fn a_held_stream_gets_the_recovered_answer_as_a_converse_stream_or_the_reply() {
    for recovered in [true, false] {
        let mut host = livecheck(SEED);
        let s = ask(&mut host, CLEAN_QUESTION, true);
        let upstream = stream(&["Pay to NL91ABNA04", "17164300 today."]);
        send_chunks(
            &mut host,
            s,
            EVENT_STREAM,
            &Chunking::Bytes(7).split(&upstream),
        );
        let calls = callouts_to(&host, "/v1/retry");
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].header("authorization"), None);
        assert!(!String::from_utf8_lossy(&calls[0].body).contains("AWS4-HMAC"));
        assert!(
            host.caller_received(s).body.is_empty(),
            "nothing of the round"
        );
        let verdict = if recovered {
            json!({"outcome": "answered", "body": answer(CLEAN_ANSWER)})
        } else {
            json!({"outcome": "errored",
                   "reason": "the caller signed the request, and the upstream has no key of its own"})
        };
        host.answer_callout(
            calls[0].token,
            &[(":status", "200")],
            verdict.to_string().as_bytes(),
        )
        .unwrap();
        let caller = host.caller_received(s);
        assert!(!String::from_utf8_lossy(&caller.body).contains("NL91"));
        let got = events(&caller.body);
        let last = &got[got.len() - 1];
        assert_eq!(last.0, "metadata", "{recovered}");
        if recovered {
            assert_eq!(streamed_text(&got), CLEAN_ANSWER);
            assert_eq!(got[got.len() - 2].1["stopReason"], "end_turn");
            assert_eq!(last.1["usage"]["inputTokens"], 16, "both answers counted");
            assert_eq!(last.1["usage"]["outputTokens"], 12);
            assert_eq!(
                last.1["usage"]["totalTokens"], 28,
                "Bedrock's total, not OpenAI's"
            );
            assert!(last.1["usage"].get("total_tokens").is_none());
        } else {
            assert!(streamed_text(&got).starts_with("I cannot help with that."));
            assert_guardrail_end(&got, "not recovered");
        }
    }
}
