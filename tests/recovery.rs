//! Recovery through the built `.wasm` in the harness: the test plays the sidecar, answering the
//! retry callouts (`/v1/retry`) and the judge's.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use std::time::Duration;

use common::fixtures::*;
use common::*;
use livecheck_harness::{Callout, Host, StreamId};
use serde_json::{json, Value};

/// `no-iban` recovers; `no-secret` does not; `tone` is judged and recovers.
fn config(extra_checks: &str, version_fields: &str) -> String {
    format!(
        r#"{{"default_agent": "a", "agents": {{"a": {{"published": "1", "versions": {{"1": {{
        "blocked_reply": "Not allowed." {version_fields},
        "live_checks": [
            {{"name": "no-iban", "stage": "output", "kind": "matches_pattern", "pattern": "NL\\d{{2}}[A-Z]{{4}}\\d{{10}}", "max_match": 18,
             "recover": true, "description": "Never state a bank account number."}}
            {extra_checks}
        ]}}}}}}}}}}"#
    )
}

const NO_SECRET: &str =
    r#", {"name": "no-secret", "stage": "output", "kind": "not_contains", "expected": "SECRET"}"#;
const TONE: &str = r#", {"name": "tone", "stage": "output", "kind": "polite_tone", "judge_model": "j", "recover": true}"#;

const ANOTHER_FORBIDDEN: &str = "Send it to NL02RABO0123456789 please.";

fn retries(host: &Host) -> Vec<Callout> {
    callouts_to(host, "/v1/retry")
}

fn judge_calls(host: &Host) -> Vec<Callout> {
    callouts_to(host, "/v1/judge")
}

fn ask(host: &mut Host, vendor: Vendor, stream: bool) -> StreamId {
    send_request(
        host,
        vendor.path(),
        &[
            ("authorization", "Bearer sk-turn"),
            ("anthropic-version", "2023-06-01"),
        ],
        &vendor.request(CLEAN_QUESTION, stream),
        Chunking::Bytes(7),
    )
}

fn answer(host: &mut Host, s: StreamId, vendor: Vendor, text: &str) {
    send_answer(
        host,
        s,
        &[("content-type", "application/json")],
        &vendor.answer(text),
        Chunking::Bytes(7),
    );
}

/// The sidecar's answer to a retry: the upstream's answer saying `text`.
fn retried(host: &mut Host, c: &Callout, body: &str) {
    let answer = json!({"outcome": "answered", "body": body}).to_string();
    host.answer_callout(c.token, &[(":status", "200")], answer.as_bytes())
        .unwrap();
}

fn usage_total(vendor: Vendor, body: &Value) -> (u64, u64) {
    let u = &body["usage"];
    match vendor {
        Vendor::Chat => (
            u["prompt_tokens"].as_u64().unwrap(),
            u["completion_tokens"].as_u64().unwrap(),
        ),
        _ => (
            u["input_tokens"].as_u64().unwrap(),
            u["output_tokens"].as_u64().unwrap(),
        ),
    }
}

#[test]
fn a_failed_answer_is_asked_for_again_and_only_the_passing_one_is_shown() {
    for vendor in VENDORS {
        let mut host = livecheck(&config("", ""));
        let s = ask(&mut host, vendor, false);
        answer(&mut host, s, vendor, FORBIDDEN_ANSWER);
        let calls = retries(&host);
        assert_eq!(calls.len(), 1, "{vendor:?}");
        assert!(
            common::answer_held(&host, s),
            "nothing reaches the caller while the model is asked again"
        );
        let retry = json(&calls[0].body);
        assert_eq!(retry["attempt"], 2);
        assert_eq!(
            retry["rules"],
            json!(["Never state a bank account number."])
        );
        assert_eq!(retry["path"], vendor.path());
        assert_eq!(retry["authority"], "api.test");
        assert_eq!(
            retry["request"].as_str().unwrap(),
            vendor.request(CLEAN_QUESTION, false)
        );
        assert_eq!(calls[0].header("authorization"), Some("Bearer sk-turn"));
        assert_eq!(calls[0].header("anthropic-version"), Some("2023-06-01"));
        assert!(
            !String::from_utf8_lossy(&calls[0].body).contains("NL91"),
            "the rejected answer never leaves"
        );
        retried(&mut host, &calls[0], &vendor.answer(CLEAN_ANSWER));
        let caller = host.caller_received(s);
        assert_eq!(caller.status(), Some(200));
        assert!(caller.header("x-core-check").is_none(), "{vendor:?}");
        assert!(caller.header("x-core-response-id").is_some());
        let body = json(caller.body_text().as_bytes());
        assert_eq!(vendor.text_of(&body), CLEAN_ANSWER);
        assert_eq!(
            usage_total(vendor, &body),
            (22, 14),
            "usage of both attempts"
        );
        assert!(!caller.body_text().contains("NL91"));
        assert_eq!(host.metric("livecheck.a.no-iban.failed"), Some(1));
        assert_eq!(host.metric("livecheck.a.no-iban.passed"), Some(1));
    }
}

/// With `hold_answer_headers` the headers wait for the retry too: a recovered answer names no
/// check and carries its own length; one whose every attempt failed names the first stop.
#[test]
fn with_hold_answer_headers_a_recovered_answer_names_no_check_and_a_withheld_one_does() {
    let held = with_setting(
        &config("", r#", "recover_attempts": 1"#),
        "hold_answer_headers",
        "true",
    );
    for vendor in VENDORS {
        for (retry_says, expected) in [
            (CLEAN_ANSWER, None),
            (
                ANOTHER_FORBIDDEN,
                Some(r#"stage=output, check="no-iban", code=output_check_failed"#),
            ),
        ] {
            let mut host = livecheck_with(&held, true).unwrap();
            let s = ask(&mut host, vendor, false);
            answer(&mut host, s, vendor, FORBIDDEN_ANSWER);
            assert!(host.caller_received(s).headers.is_none(), "{vendor:?}");
            let calls = retries(&host);
            retried(&mut host, &calls[0], &vendor.answer(retry_says));
            let caller = host.caller_received(s);
            assert_eq!(caller.header("x-core-check"), expected, "{vendor:?}");
            assert_eq!(
                caller.header("content-length"),
                Some(caller.body.len().to_string().as_str())
            );
            assert!(caller.end_of_stream);
            let text = caller.body_text();
            assert!(!text.contains("NL91") && !text.contains("NL02"), "{text}");
        }
    }
}

#[test]
fn a_failed_check_without_recovery_withholds_at_once() {
    let mut host = livecheck(&config(NO_SECRET, ""));
    let vendor = Vendor::Chat;
    let s = ask(&mut host, vendor, false);
    answer(
        &mut host,
        s,
        vendor,
        "SECRET: pay to NL91ABNA0417164300 today.",
    );
    assert!(retries(&host).is_empty());
    let caller = host.caller_received(s);
    // The answer's headers went on when they came: the check is named in the stats and results.
    assert_eq!(caller.header("x-core-check"), None);
    assert_eq!(host.metric("livecheck.a.no-iban.failed"), Some(1));
    let body = json(caller.body_text().as_bytes());
    assert_eq!(vendor.stop_marker(&body), vendor.refused_marker());
}

#[test]
fn a_judged_check_that_could_not_decide_withholds_at_once() {
    let mut host = livecheck(&config(TONE, ""));
    let vendor = Vendor::Anthropic;
    let s = ask(&mut host, vendor, false);
    answer(&mut host, s, vendor, CLEAN_ANSWER);
    let judge = judge_calls(&host).remove(0);
    host.answer_callout(judge.token, &[(":status", "503")], b"")
        .unwrap();
    assert!(
        retries(&host).is_empty(),
        "an errored check is not recovered"
    );
    assert_eq!(host.caller_received(s).header("x-core-check"), None);
    assert_eq!(host.metric("livecheck.a.tone.errored"), Some(1));
    let body = json(host.caller_received(s).body_text().as_bytes());
    assert_eq!(vendor.stop_marker(&body), vendor.refused_marker());
}

#[test]
fn when_every_attempt_fails_the_first_stop_is_named_and_all_usage_counted() {
    for vendor in VENDORS {
        let mut host = livecheck(&config("", r#", "recover_attempts": 2"#));
        let s = ask(&mut host, vendor, false);
        answer(&mut host, s, vendor, FORBIDDEN_ANSWER);
        for attempt in 2..=3 {
            let calls = retries(&host);
            assert_eq!(calls.len(), 1, "{vendor:?} attempt {attempt}");
            assert_eq!(json(&calls[0].body)["attempt"], attempt);
            retried(&mut host, &calls[0], &vendor.answer(ANOTHER_FORBIDDEN));
        }
        assert!(retries(&host).is_empty(), "no more than recover_attempts");
        let caller = host.caller_received(s);
        assert_eq!(caller.header("x-core-check"), None);
        let body = json(caller.body_text().as_bytes());
        assert_eq!(vendor.stop_marker(&body), vendor.refused_marker());
        assert_eq!(usage_total(vendor, &body), (33, 21));
        assert!(!caller.body_text().contains("NL91") && !caller.body_text().contains("NL02"));
        assert_eq!(host.metric("livecheck.a.no-iban.failed"), Some(3));
    }
}

#[test]
fn a_retry_can_pass_on_the_third_answer() {
    let mut host = livecheck(&config(TONE, r#", "recover_attempts": 3"#));
    let vendor = Vendor::Responses;
    let s = ask(&mut host, vendor, false);
    answer(&mut host, s, vendor, FORBIDDEN_ANSWER);
    assert!(judge_calls(&host).is_empty(), "a failed rule decides first");
    let call = retries(&host).remove(0);
    retried(&mut host, &call, &vendor.answer(ANOTHER_FORBIDDEN));
    let call = retries(&host).remove(0);
    let third = vendor.answer(CLEAN_ANSWER).replace("resp_up", "resp_third");
    retried(&mut host, &call, &third);
    // The third answer passed its rules; the judge decides it too.
    let judge = judge_calls(&host).remove(0);
    assert_eq!(json(&judge.body)["text"], CLEAN_ANSWER);
    host.answer_callout(
        judge.token,
        &[(":status", "200")],
        br#"{"outcome": "passed", "score": 1, "reason": "ok"}"#,
    )
    .unwrap();
    let caller = host.caller_received(s);
    let body = json(caller.body_text().as_bytes());
    assert_eq!(vendor.text_of(&body), CLEAN_ANSWER);
    assert_eq!(usage_total(vendor, &body), (33, 21));
    let shown_id = body["id"].clone();
    assert_eq!(shown_id, "resp_third");
    // The report counts answers.
    host.finish_stream(s).unwrap();
    host.advance_time(Duration::from_millis(250));
    let report = report_of(&report_callouts(&host).remove(0));
    assert_eq!(
        report["response_id"], shown_id,
        "the id of the answer shown"
    );
    let results: Vec<(String, u64, String)> = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_owned(),
                r["attempt"].as_u64().unwrap(),
                r["outcome"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expected = [
        ("no-iban", 1, "failed"),
        ("no-iban", 2, "failed"),
        ("no-iban", 3, "passed"),
        ("tone", 3, "passed"),
    ];
    assert_eq!(
        results,
        expected
            .iter()
            .map(|(n, a, o)| ((*n).to_owned(), *a, (*o).to_owned()))
            .collect::<Vec<_>>()
    );
}

#[test]
fn a_judged_failure_that_recovers_is_asked_again() {
    let mut host = livecheck(&config(TONE, ""));
    let vendor = Vendor::Chat;
    let s = ask(&mut host, vendor, false);
    answer(&mut host, s, vendor, "Figure it out yourself.");
    let judge = judge_calls(&host).remove(0);
    host.answer_callout(
        judge.token,
        &[(":status", "200")],
        br#"{"outcome": "failed", "score": 0.1, "reason": "rude"}"#,
    )
    .unwrap();
    let retry = retries(&host).remove(0);
    assert_eq!(json(&retry.body)["rules"], json!(["tone"]));
    retried(&mut host, &retry, &vendor.answer(CLEAN_ANSWER));
    let judge = judge_calls(&host).remove(0);
    host.answer_callout(
        judge.token,
        &[(":status", "200")],
        br#"{"outcome": "passed", "score": 0.9, "reason": "polite"}"#,
    )
    .unwrap();
    let body = json(host.caller_received(s).body_text().as_bytes());
    assert_eq!(vendor.text_of(&body), CLEAN_ANSWER);
}

#[test]
fn a_retry_that_asks_for_a_tool_is_never_shown() {
    let mut host = livecheck(&config("", ""));
    let vendor = Vendor::Chat;
    let s = ask(&mut host, vendor, false);
    answer(&mut host, s, vendor, FORBIDDEN_ANSWER);
    let tool_call = json!({
        "id": "chatcmpl-t", "object": "chat.completion", "created": 1, "model": "gpt-4.1-mini",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "refund", "arguments": "{\"order\": 17}"}}]}}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
    });
    let call = retries(&host).remove(0);
    retried(&mut host, &call, &tool_call.to_string());
    assert!(common::answer_held(&host, s));
    let again = retries(&host);
    assert_eq!(again.len(), 1, "asked again");
    assert_eq!(json(&again[0].body)["attempt"], 3);
    retried(&mut host, &again[0], &vendor.answer(CLEAN_ANSWER));
    let body = json(host.caller_received(s).body_text().as_bytes());
    assert_eq!(vendor.text_of(&body), CLEAN_ANSWER);
    assert!(!host.caller_received(s).body_text().contains("refund"));
}

#[test]
fn a_sidecar_that_cannot_retry_withholds() {
    let mut host = livecheck(&config("", ""));
    let vendor = Vendor::Anthropic;
    let s = ask(&mut host, vendor, false);
    answer(&mut host, s, vendor, FORBIDDEN_ANSWER);
    let retry = retries(&host).remove(0);
    host.answer_callout(
        retry.token,
        &[(":status", "200")],
        br#"{"outcome": "errored", "reason": "The upstream did not answer."}"#,
    )
    .unwrap();
    let caller = host.caller_received(s);
    let body = json(caller.body_text().as_bytes());
    assert_eq!(vendor.stop_marker(&body), "refusal");
    assert_eq!(host.metric("livecheck.a.no-iban.failed"), Some(1));
}

#[test]
fn no_retry_is_made_that_would_pass_the_deadline() {
    let mut host = livecheck(&config("", r#", "deadline_ms": 3000"#));
    let vendor = Vendor::Chat;
    let s = ask(&mut host, vendor, false);
    // The first answer took 2 s: another would end after the 3 s deadline.
    host.advance_time(Duration::from_secs(2));
    answer(&mut host, s, vendor, FORBIDDEN_ANSWER);
    assert!(retries(&host).is_empty());
    let body = json(host.caller_received(s).body_text().as_bytes());
    assert_eq!(vendor.stop_marker(&body), vendor.refused_marker());
}

#[test]
fn a_held_stream_gets_the_passing_answer_as_events() {
    for vendor in VENDORS {
        let mut host = livecheck(&config("", ""));
        let s = ask(&mut host, vendor, true);
        let first = stream(vendor, &["Pay to NL91ABNA04", "17164300 today."]).concat();
        send_answer(
            &mut host,
            s,
            &[("content-type", "text/event-stream")],
            &first,
            Chunking::Bytes(7),
        );
        let calls = retries(&host);
        assert_eq!(calls.len(), 1, "{vendor:?}");
        assert!(
            host.caller_received(s).body.is_empty(),
            "nothing of the round is shown"
        );
        retried(&mut host, &calls[0], &vendor.answer(CLEAN_ANSWER));
        let caller = host.caller_received(s);
        assert!(caller.end_of_stream, "{vendor:?}");
        let got = read_stream(vendor, &caller.body_text());
        assert_eq!(got.text, CLEAN_ANSWER, "{vendor:?}");
        assert!(!caller.body_text().contains("NL91"));
        assert_ne!(got.end, vendor.refused_marker());
    }
}

#[test]
fn a_held_stream_is_asked_again_once_its_text_fails_and_the_passing_answer_waits_for_the_first() {
    for vendor in VENDORS {
        let mut host = livecheck(&config("", ""));
        let s = ask(&mut host, vendor, true);
        host.send_response_headers(
            s,
            &[(":status", "200"), ("content-type", "text/event-stream")],
            false,
        )
        .unwrap();
        let events = stream(
            vendor,
            &["Pay to NL91ABNA04", "17164300 today.", " And", " more."],
        );
        let mut sent = 0;
        while retries(&host).is_empty() && sent < events.len() {
            host.send_response_body(s, events[sent].as_bytes(), false)
                .unwrap();
            sent += 1;
        }
        let calls = retries(&host);
        assert_eq!(calls.len(), 1, "{vendor:?}");
        assert!(
            sent < events.len() - 2,
            "{vendor:?}: asked again before the first answer ended ({sent} of {} events)",
            events.len()
        );
        retried(&mut host, &calls[0], &vendor.answer(CLEAN_ANSWER));
        assert!(
            host.caller_received(s).body.is_empty(),
            "{vendor:?}: the passing answer waits for the first to end (a reset would make SDKs raise)"
        );
        let rest = events[sent..].concat();
        host.send_response_body(s, rest.as_bytes(), true).unwrap();
        let caller = host.caller_received(s);
        assert!(caller.end_of_stream && !caller.reset, "{vendor:?}");
        let got = read_stream(vendor, &caller.body_text());
        assert_eq!(got.text, CLEAN_ANSWER, "{vendor:?}");
        assert!(!caller.body_text().contains("NL91") && !caller.body_text().contains("more."));
    }
}

#[test]
fn a_held_stream_whose_retries_fail_ends_with_the_blocked_reply() {
    let mut host = livecheck(&config("", r#", "recover_attempts": 1"#));
    let vendor = Vendor::Anthropic;
    let s = ask(&mut host, vendor, true);
    send_answer(
        &mut host,
        s,
        &[("content-type", "text/event-stream")],
        &stream(vendor, &[FORBIDDEN_ANSWER]).concat(),
        Chunking::Whole,
    );
    let call = retries(&host).remove(0);
    retried(&mut host, &call, &vendor.answer(ANOTHER_FORBIDDEN));
    assert!(retries(&host).is_empty());
    let caller = host.caller_received(s);
    let got = read_stream(vendor, &caller.body_text());
    assert_eq!(got.text, "Not allowed.");
    assert!(!caller.body_text().contains("NL"));
}

#[test]
fn an_answer_already_streaming_is_cut_not_recovered() {
    // Without a check that recovers, the answer streams held back by the pattern: a match cuts.
    let config = r#"{"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {"live_checks": [
        {"name": "no-iban", "stage": "output", "kind": "matches_pattern", "pattern": "NL\\d{2}[A-Z]{4}\\d{10}", "max_match": 18}]}}}}}"#;
    let mut host = livecheck(config);
    let vendor = Vendor::Chat;
    let s = ask(&mut host, vendor, true);
    send_answer(
        &mut host,
        s,
        &[("content-type", "text/event-stream")],
        &stream(vendor, &["Your order ships. ", FORBIDDEN_ANSWER]).concat(),
        Chunking::Bytes(7),
    );
    assert!(retries(&host).is_empty());
    let got = read_stream(vendor, &host.caller_received(s).body_text());
    assert_eq!(got.end, "content_filter+[DONE]");
    assert!(got.text.starts_with("Your order ships."));
}
