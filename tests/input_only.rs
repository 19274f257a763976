//! The input-only APIs through the built `.wasm` in the harness: embeddings (OpenAI and Azure) and
//! Anthropic Message Batches. Their input is checked like any question's; their answer is not the
//! model's words and passes as it came; a refused input is an error in the vendor's shape.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use std::time::Duration;

use common::fixtures::*;
use common::*;
use livecheck_harness::{Host, StreamId};
use serde_json::{json, Value};

const EMBEDDINGS: [&str; 2] = [
    "/v1/embeddings",
    "/openai/deployments/emb-small/embeddings?api-version=2024-10-21",
];
const BATCHES: &str = "/v1/messages/batches";
const REFUSED_HEADER: &str = r#"stage=input, check="no-passwords", code=input_check_failed"#;

fn embeddings_request(input: Value) -> String {
    json!({"model": "text-embedding-3-small", "input": input, "encoding_format": "float"})
        .to_string()
}

/// What the vendor answers an embeddings request. It holds text the seed's output rule would
/// withhold from an answer: no output check reads it here.
const EMBEDDINGS_ANSWER: &str = r#"{"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [0.25, -0.5]}], "model": "text-embedding-3-small", "usage": {"prompt_tokens": 4, "total_tokens": 4}, "note": "NL91ABNA0417164300"}"#;

/// What Anthropic answers a batch's creation: the batch, queued.
const BATCH_ANSWER: &str = r#"{"id": "msgbatch_013Zva2CMHLNnXjNJJKqJ2EF", "type": "message_batch", "processing_status": "in_progress", "request_counts": {"processing": 2, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}, "ended_at": null, "created_at": "2026-12-07T17:00:00Z", "expires_at": "2026-12-08T17:00:00Z", "cancel_initiated_at": null, "results_url": null, "archived_at": null, "note": "NL91ABNA0417164300"}"#;

fn batch_request(requests: &[(&str, &str, bool)]) -> String {
    let requests: Vec<Value> = requests
        .iter()
        .map(|(id, question, stream)| {
            json!({"custom_id": id, "params": {"model": "claude-sonnet-4-5", "max_tokens": 64,
                   "stream": stream, "messages": [{"role": "user", "content": question}]}})
        })
        .collect();
    json!({ "requests": requests }).to_string()
}

/// The upstream answers with `answer`; what the caller received must be it, byte for byte.
fn answered_as_it_came(host: &mut Host, s: StreamId, answer: &str, chunking: Chunking) {
    let length = answer.len().to_string();
    send_answer(
        host,
        s,
        &[
            ("content-type", "application/json"),
            ("content-length", &length),
        ],
        answer,
        chunking,
    );
    let caller = host.caller_received(s);
    assert_eq!(caller.status(), Some(200));
    assert_eq!(caller.body_text(), answer);
    assert!(caller.end_of_stream);
    assert_eq!(caller.header("content-length"), Some(length.as_str()));
    assert_eq!(caller.header("x-core-check"), None);
    assert!(caller.header("x-core-response-id").is_some());
    assert!(
        callouts_to(host, "/v1/retry").is_empty(),
        "no answer is asked again"
    );
}

#[test]
fn a_clean_embeddings_input_reaches_upstream_and_its_answer_passes_as_it_came() {
    for path in EMBEDDINGS {
        for chunking in CHUNKINGS {
            let mut host = livecheck(SEED);
            let body = embeddings_request(json!(["Where is order 17?", CLEAN_QUESTION]));
            let s = send_request(&mut host, path, &[], &body, chunking);
            let up = host.upstream_received(s);
            assert_eq!(up.body_text(), body, "{path} {chunking:?}");
            assert!(up.end_of_stream);
            assert_eq!(host.metric("livecheck.orders.no-passwords.passed"), Some(1));
            answered_as_it_came(&mut host, s, EMBEDDINGS_ANSWER, chunking);
            assert_eq!(host.metric("livecheck.orders.no-iban.passed"), None);
        }
    }
}

#[test]
fn a_forbidden_embeddings_input_is_refused_as_an_openai_error_and_never_reaches_upstream() {
    for path in EMBEDDINGS {
        for input in [
            json!(FORBIDDEN_QUESTION),
            json!(["fine", FORBIDDEN_QUESTION]),
        ] {
            let mut host = livecheck(SEED);
            let body = embeddings_request(input);
            let s = send_request(&mut host, path, &[], &body, Chunking::Bytes(7));
            assert!(question_held(&host, s), "{path}");
            let caller = host.caller_received(s);
            assert_eq!(caller.status(), Some(400));
            assert_eq!(caller.header("x-core-check"), Some(REFUSED_HEADER));
            assert_eq!(caller.header("content-type"), Some("application/json"));
            let error = json(&caller.body);
            assert_eq!(error["error"]["type"], "invalid_request_error");
            assert_eq!(
                error["error"]["message"],
                "I cannot help with that. Never share a password in this conversation."
            );
            assert_eq!(host.metric("livecheck.orders.no-passwords.failed"), Some(1));
        }
    }
}

#[test]
fn token_arrays_cannot_be_read_and_are_refused_naming_the_field() {
    for path in EMBEDDINGS {
        for (input, field) in [
            (json!([9906, 1917]), "input[0]"),
            (json!([[9906], [1917]]), "input[0]"),
            (json!(["hello", [1917]]), "input[1]"),
        ] {
            let mut host = livecheck(SEED);
            let s = send_request(
                &mut host,
                path,
                &[],
                &embeddings_request(input),
                Chunking::Whole,
            );
            assert!(question_held(&host, s));
            let caller = host.caller_received(s);
            assert_eq!(caller.status(), Some(400));
            assert_eq!(caller.header("x-core-check"), None);
            let message = json(&caller.body)["error"]["message"].to_string();
            assert!(
                message.contains(&format!("{field} must be a string or an array of strings")),
                "{message}"
            );
            assert!(message.contains("token arrays"), "{message}");
        }
    }
}

#[test]
fn a_clean_batch_is_queued_and_its_answer_passes_as_it_came() {
    for chunking in CHUNKINGS {
        let mut host = livecheck(SEED);
        // A request may ask for a stream: a batch never streams.
        let body = batch_request(&[("a-1", CLEAN_QUESTION, false), ("a-2", "Thanks!", true)]);
        let s = send_request(&mut host, BATCHES, &[], &body, chunking);
        let up = host.upstream_received(s);
        assert_eq!(up.body_text(), body, "{chunking:?}");
        assert!(up.end_of_stream);
        assert_eq!(host.metric("livecheck.orders.no-passwords.passed"), Some(1));
        answered_as_it_came(&mut host, s, BATCH_ANSWER, chunking);
    }
}

#[test]
fn a_batch_holding_one_forbidden_request_is_refused_whole_naming_its_custom_id() {
    for chunking in CHUNKINGS {
        let mut host = livecheck(SEED);
        let body = batch_request(&[
            ("first", CLEAN_QUESTION, false),
            ("the-second", FORBIDDEN_QUESTION, false),
            ("third", "my password again", false),
        ]);
        let s = send_request(&mut host, BATCHES, &[], &body, chunking);
        assert!(question_held(&host, s), "no request of the batch is queued");
        let caller = host.caller_received(s);
        assert_eq!(caller.status(), Some(400));
        assert_eq!(caller.header("x-core-check"), Some(REFUSED_HEADER));
        let error = json(&caller.body);
        assert_eq!(error["type"], "error");
        assert_eq!(error["error"]["type"], "invalid_request_error");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains(r#"custom_id "the-second""#), "{message}");
        assert!(!message.contains("hunter2") && !message.to_lowercase().contains("password"));
        assert!(
            !message.contains("I cannot help"),
            "no blocked_reply: {message}"
        );
        assert_eq!(host.metric("livecheck.orders.no-passwords.failed"), Some(1));
        assert_eq!(host.metric("livecheck.orders.no-passwords.passed"), None);
    }
}

#[test]
fn a_refused_batch_records_its_input_result_under_the_id_the_caller_got() {
    let mut host = livecheck(SEED);
    let body = batch_request(&[("b-1", FORBIDDEN_QUESTION, false)]);
    let s = send_request(&mut host, BATCHES, &[], &body, Chunking::Whole);
    let turn_id = host
        .caller_received(s)
        .header("x-core-response-id")
        .unwrap()
        .to_owned();
    host.finish_stream(s).unwrap();
    host.advance_time(Duration::from_millis(250));
    let sent = report_callouts(&host);
    assert_eq!(sent.len(), 1);
    let report = report_of(&sent[0]);
    assert_eq!(report["turn_id"], turn_id.as_str());
    let results: Vec<(&Value, &Value)> = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (&r["name"], &r["outcome"]))
        .collect();
    assert_eq!(results, [(&json!("no-passwords"), &json!("failed"))]);
    assert!(!String::from_utf8_lossy(&sent[0].body).contains("hunter2"));
}

#[test]
fn a_batch_request_that_cannot_be_read_refuses_the_batch_naming_its_field() {
    let unreadable = json!({"requests": [
        {"custom_id": "ok", "params": {"model": "m", "max_tokens": 1,
                                       "messages": [{"role": "user", "content": "hi"}]}},
        {"custom_id": "bad", "params": {"model": "m", "max_tokens": 1,
                                        "messages": [{"role": "user", "content": 7}]}}
    ]})
    .to_string();
    let mut host = livecheck(SEED);
    let s = send_request(&mut host, BATCHES, &[], &unreadable, Chunking::Bytes(7));
    assert!(question_held(&host, s));
    let caller = host.caller_received(s);
    assert_eq!(caller.status(), Some(400));
    assert_eq!(caller.header("x-core-check"), None);
    let error = json(&caller.body);
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert_eq!(
        error["error"]["message"],
        "requests[1].params.messages[0].content must be a string or an array of content blocks"
    );
}

#[test]
fn a_batch_larger_than_the_gateway_reads_is_refused() {
    let mut host = livecheck(&with_max_body_bytes(SEED, 256));
    let many: Vec<(String, &str, bool)> = (0..8)
        .map(|i| (format!("r-{i}"), CLEAN_QUESTION, false))
        .collect();
    let many: Vec<(&str, &str, bool)> = many.iter().map(|(i, q, s)| (i.as_str(), *q, *s)).collect();
    let s = send_request(
        &mut host,
        BATCHES,
        &[],
        &batch_request(&many),
        Chunking::Bytes(64),
    );
    assert!(question_held(&host, s));
    let caller = host.caller_received(s);
    assert_eq!(caller.status(), Some(413));
    assert_eq!(json(&caller.body)["error"]["type"], "request_too_large");
}

/// A judged input check and one rule.
const JUDGED: &str = r#"{"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {
    "blocked_reply": "Not allowed.",
    "live_checks": [
        {"name": "no-passwords", "stage": "input", "kind": "not_contains", "expected": "password"},
        {"name": "on-topic", "stage": "input", "kind": "custom_rule", "expected": "The question is about orders.", "judge_model": "judge-1"}
    ]}}}}}"#;

#[test]
fn a_batch_with_judged_input_checks_is_refused_before_any_is_queued() {
    let mut host = livecheck(JUDGED);
    let body = batch_request(&[("a-1", CLEAN_QUESTION, false)]);
    let s = send_request(&mut host, BATCHES, &[], &body, Chunking::Whole);
    assert!(question_held(&host, s));
    assert!(callouts_to(&host, "/v1/judge").is_empty());
    let caller = host.caller_received(s);
    assert_eq!(caller.status(), Some(400));
    let message = json(&caller.body)["error"]["message"].to_string();
    assert!(message.contains("judged input checks"), "{message}");
    // Its rules still decide first: a forbidden request is named.
    let body = batch_request(&[("a-2", FORBIDDEN_QUESTION, false)]);
    let s = send_request(&mut host, BATCHES, &[], &body, Chunking::Whole);
    let message = json(&host.caller_received(s).body)["error"]["message"].to_string();
    assert!(message.contains(r#"custom_id \"a-2\""#), "{message}");
}

#[test]
fn embeddings_inputs_are_judged_as_any_question() {
    for (outcome, reaches) in [("passed", true), ("failed", false)] {
        let mut host = livecheck(JUDGED);
        let body = embeddings_request(json!(CLEAN_QUESTION));
        let s = send_request(&mut host, EMBEDDINGS[0], &[], &body, Chunking::Whole);
        assert!(question_held(&host, s), "held while judged");
        let calls = callouts_to(&host, "/v1/judge");
        assert_eq!(calls.len(), 1);
        assert!(String::from_utf8_lossy(&calls[0].body).contains(CLEAN_QUESTION));
        let verdict = format!(
            r#"{{"outcome": "{outcome}", "score": 0.5, "reason": "because", "usage": {{"input_tokens": 3, "output_tokens": 1}}}}"#
        );
        host.answer_callout(calls[0].token, &[(":status", "200")], verdict.as_bytes())
            .unwrap();
        assert_eq!(host.upstream_received(s).body_text() == body, reaches);
        if !reaches {
            let caller = host.caller_received(s);
            assert_eq!(caller.status(), Some(400));
            assert_eq!(
                caller.header("x-core-check"),
                Some(r#"stage=input, check="on-topic", code=input_check_failed"#)
            );
            assert_eq!(json(&caller.body)["error"]["message"], "Not allowed.");
        }
    }
}

#[test]
fn a_queued_batch_records_its_input_results_under_the_batch_id() {
    let mut host = livecheck(SEED);
    let body = batch_request(&[("q-1", CLEAN_QUESTION, false), ("q-2", "Thanks!", false)]);
    let s = send_request(&mut host, BATCHES, &[], &body, Chunking::Whole);
    answered_as_it_came(&mut host, s, BATCH_ANSWER, Chunking::Bytes(7));
    host.finish_stream(s).unwrap();
    host.advance_time(Duration::from_millis(250));
    let sent = report_callouts(&host);
    assert_eq!(sent.len(), 1);
    let report = report_of(&sent[0]);
    // The batch's id: what the caller reads its results back by.
    assert_eq!(report["response_id"], "msgbatch_013Zva2CMHLNnXjNJJKqJ2EF");
    let results: Vec<(&Value, &Value)> = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (&r["name"], &r["outcome"]))
        .collect();
    // One result per check for the batch; no output check read its answer.
    assert_eq!(results, [(&json!("no-passwords"), &json!("passed"))]);
    assert!(report.get("background").is_none());
}
