//! Anthropic's legacy Text Completions (`POST /v1/complete`) through the built `.wasm` in the
//! harness: the prompt's text checked on the way in, the completion on the way out, streamed with
//! the minimal hold-back and cut where a match starts, and asked again (the test plays the sidecar).

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::fixtures::*;
use common::*;
use livecheck_harness::{Callout, Host, StreamId};
use serde_json::{json, Value};

const PATH: &str = "/v1/complete";
const BLOCKED_REPLY: &str = "I cannot help with that. Never share a password in this conversation.";

/// Only a rule blocks the output: the answer streams, holding back only what could begin an IBAN.
const RULES_ONLY: &str = r#"{"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {
    "blocked_reply": "Not allowed.",
    "live_checks": [{"name": "no-iban", "stage": "output", "kind": "matches_pattern",
                     "pattern": "NL\\d{2}[A-Z]{4}\\d{10}", "max_match": 18}]}}}}}"#;

/// A rule that does not recover: a failed answer is withheld.
const WITHHOLDS: &str = r#"{"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {
    "blocked_reply": "Not allowed.",
    "live_checks": [{"name": "no-secret", "stage": "output", "kind": "not_contains",
                     "expected": "SECRET"}]}}}}}"#;

fn prompt(question: &str) -> String {
    format!("You answer about orders.\n\nHuman: {question}\n\nAssistant:")
}

fn request(question: &str, stream: bool) -> String {
    json!({"model": "claude-2.1", "prompt": prompt(question),
           "max_tokens_to_sample": 300, "stream": stream})
    .to_string()
}

fn answer(text: &str) -> String {
    json!({"type": "completion", "id": "compl_01Up", "completion": text,
           "stop_reason": "stop_sequence", "model": "claude-2.1", "stop": "\n\nHuman:"})
    .to_string()
}

/// The upstream's events: a completion event per piece, a ping, then the last one.
fn stream(pieces: &[&str]) -> String {
    let completion = |text: &str, stop: Value| {
        let data = json!({"type": "completion", "id": "compl_01Up", "completion": text,
                          "stop_reason": stop, "model": "claude-2.1"});
        format!("event: completion\ndata: {data}\n\n")
    };
    let mut events = String::new();
    for (i, piece) in pieces.iter().enumerate() {
        events.push_str(&completion(piece, Value::Null));
        if i == 0 {
            events.push_str("event: ping\ndata: {\"type\": \"ping\"}\n\n");
        }
    }
    events.push_str(&completion("", json!("stop_sequence")));
    events
}

/// What a caller reading the events sees: the text, and the stop reason of the event that ends it.
fn read_events(body: &str) -> (String, Option<String>) {
    let (mut text, mut end) = (String::new(), None);
    for block in body.split_terminator("\n\n") {
        let mut lines = block.lines();
        let name = lines.next().unwrap().strip_prefix("event: ").unwrap();
        let data: Value =
            serde_json::from_str(lines.next().unwrap().strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(data["type"], name, "an event is named by its type");
        if name == "completion" {
            assert!(end.is_none(), "nothing after the last completion");
            text.push_str(data["completion"].as_str().unwrap());
            end = data["stop_reason"].as_str().map(str::to_owned);
        }
    }
    (text, end)
}

fn ask(host: &mut Host, question: &str, stream: bool) -> StreamId {
    send_request(
        host,
        PATH,
        &[
            ("x-api-key", "sk-turn"),
            ("anthropic-version", "2023-06-01"),
        ],
        &request(question, stream),
        Chunking::Bytes(7),
    )
}

fn answer_with(host: &mut Host, s: StreamId, text: &str) {
    send_answer(
        host,
        s,
        &[("content-type", "application/json")],
        &answer(text),
        Chunking::Bytes(7),
    );
}

fn retried(host: &mut Host, c: &Callout, body: &str) {
    let answer = json!({"outcome": "answered", "body": body}).to_string();
    host.answer_callout(c.token, &[(":status", "200")], answer.as_bytes())
        .unwrap();
}

#[test]
fn a_clean_turn_passes_both_ways_unchanged() {
    for chunking in CHUNKINGS {
        let mut host = livecheck(SEED);
        let body = request(CLEAN_QUESTION, false);
        let s = send_request(&mut host, PATH, &[], &body, chunking);
        let up = host.upstream_received(s);
        assert_eq!(up.body_text(), body, "{chunking:?}");
        assert!(up.end_of_stream);
        assert_eq!(host.metric("livecheck.orders.no-passwords.passed"), Some(1));
        send_answer(
            &mut host,
            s,
            &[("content-type", "application/json")],
            &answer(CLEAN_ANSWER),
            chunking,
        );
        let caller = host.caller_received(s);
        assert!(caller.header("x-core-check").is_none());
        assert_eq!(json(&caller.body), json(answer(CLEAN_ANSWER).as_bytes()));
        assert_eq!(host.metric("livecheck.orders.no-iban.passed"), Some(1));
    }
}

#[test]
fn a_forbidden_question_is_refused_as_a_completion_and_never_reaches_upstream() {
    for chunking in CHUNKINGS {
        let mut host = livecheck(SEED);
        let body = request(FORBIDDEN_QUESTION, false);
        let s = send_request(&mut host, PATH, &[], &body, chunking);
        assert!(question_held(&host, s), "{chunking:?}");
        let caller = host.caller_received(s);
        assert_eq!(caller.status(), Some(200));
        assert_eq!(
            caller.header("x-core-check"),
            Some(r#"stage=input, check="no-passwords", code=input_check_failed"#)
        );
        let reply = json(&caller.body);
        assert_eq!(reply["type"], "completion");
        assert_eq!(reply["completion"], BLOCKED_REPLY);
        assert_eq!(reply["stop_reason"], "stop_sequence");
        assert_eq!(reply["model"], "claude-2.1");
        assert!(reply["id"].as_str().unwrap().starts_with("compl_"));
    }
}

#[test]
fn a_forbidden_streamed_question_is_refused_as_the_vendor_streams() {
    let mut host = livecheck(SEED);
    let s = ask(&mut host, FORBIDDEN_QUESTION, true);
    assert!(question_held(&host, s));
    let caller = host.caller_received(s);
    assert_eq!(caller.header("content-type"), Some("text/event-stream"));
    assert!(caller.header("x-core-check").is_some());
    let (text, end) = read_events(&caller.body_text());
    assert_eq!(text, BLOCKED_REPLY);
    assert_eq!(end.as_deref(), Some("stop_sequence"));
}

#[test]
fn only_the_human_turns_and_the_system_text_are_read() {
    // The model's own earlier turn is not the caller's: it is not checked, as in Messages.
    let prompt = "\n\nHuman: hi\n\nAssistant: your password is safe\n\nHuman: thanks\n\nAssistant:";
    let body = json!({"model": "claude-2.1", "prompt": prompt, "max_tokens_to_sample": 9});
    let mut host = livecheck(SEED);
    let s = send_request(&mut host, PATH, &[], &body.to_string(), Chunking::Whole);
    assert!(host.upstream_received(s).end_of_stream);
    for prompt in [
        "Keep the password.\n\nHuman: hi\n\nAssistant:",
        "\n\nHuman: hi\n\nAssistant: ok\n\nHuman: a password\n\nAssistant:",
    ] {
        let body = json!({"model": "claude-2.1", "prompt": prompt, "max_tokens_to_sample": 9});
        let mut host = livecheck(SEED);
        let s = send_request(&mut host, PATH, &[], &body.to_string(), Chunking::Whole);
        assert!(question_held(&host, s), "{prompt:?}");
    }
}

#[test]
fn a_prompt_that_is_not_a_string_is_refused_with_400_naming_it() {
    let mut host = livecheck(SEED);
    let body = json!({"model": "claude-2.1", "prompt": ["\n\nHuman: a password"],
                      "max_tokens_to_sample": 9});
    let s = send_request(&mut host, PATH, &[], &body.to_string(), Chunking::Whole);
    assert!(question_held(&host, s));
    let caller = host.caller_received(s);
    assert_eq!(caller.status(), Some(400));
    let error = json(&caller.body);
    assert_eq!(error["type"], "error");
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert!(error["error"]["message"]
        .as_str()
        .unwrap()
        .contains("prompt"));
}

#[test]
fn a_failed_answer_is_withheld_keeping_its_id() {
    let mut host = livecheck(WITHHOLDS);
    let s = ask(&mut host, CLEAN_QUESTION, false);
    answer_with(&mut host, s, "The code is SECRET-42.");
    let caller = host.caller_received(s);
    // The answer's headers went on when they came: the check is named in the stats and results.
    assert_eq!(caller.header("x-core-check"), None);
    assert!(!caller.body_text().contains("SECRET-42"));
    let body = json(&caller.body);
    assert_eq!(body["completion"], "Not allowed.");
    assert_eq!(body["stop_reason"], "stop_sequence");
    assert_eq!(body["stop"], Value::Null);
    assert_eq!(body["id"], "compl_01Up");
    assert_eq!(host.metric("livecheck.a.no-secret.failed"), Some(1));
}

#[test]
fn a_match_is_cut_where_it_starts_however_the_stream_is_split() {
    let pieces = ["Pay to NL9", "1ABNA04", "17164300", " today."];
    let upstream = stream(&pieces);
    let mut seen = None;
    for size in 1..=upstream.len() {
        let mut host = livecheck(RULES_ONLY);
        let s = ask(&mut host, CLEAN_QUESTION, true);
        send_answer(
            &mut host,
            s,
            &[("content-type", "text/event-stream")],
            &upstream,
            Chunking::Bytes(size),
        );
        let caller = host.caller_received(s);
        let body = caller.body_text();
        assert!(!body.contains("NL9"), "size {size}");
        let (text, end) = read_events(&body);
        assert_eq!(text, "Pay to ", "size {size}");
        assert_eq!(end.as_deref(), Some("stop_sequence"), "size {size}");
        assert_eq!(host.metric("livecheck.a.no-iban.failed"), Some(1));
        // The caller receives the same events however the upstream was split.
        assert_eq!(
            seen.get_or_insert_with(|| body.clone()),
            &body,
            "size {size}"
        );
    }
}

#[test]
fn a_clean_stream_arrives_as_it_came() {
    for chunking in CHUNKINGS {
        let mut host = livecheck(RULES_ONLY);
        let s = ask(&mut host, CLEAN_QUESTION, true);
        let upstream = stream(&["Your order ", "ships ", "tomorrow, NL", " promised."]);
        send_answer(
            &mut host,
            s,
            &[("content-type", "text/event-stream")],
            &upstream,
            chunking,
        );
        let caller = host.caller_received(s);
        assert!(caller.end_of_stream && !caller.reset, "{chunking:?}");
        let (text, end) = read_events(&caller.body_text());
        assert_eq!(text, "Your order ships tomorrow, NL promised.");
        assert_eq!(end.as_deref(), Some("stop_sequence"));
    }
}

#[test]
fn a_failed_answer_is_asked_for_again_with_the_original_prompt() {
    let mut host = livecheck(SEED);
    let s = ask(&mut host, CLEAN_QUESTION, false);
    answer_with(&mut host, s, FORBIDDEN_ANSWER);
    let calls = callouts_to(&host, "/v1/retry");
    assert_eq!(calls.len(), 1);
    assert!(answer_held(&host, s));
    let retry = json(&calls[0].body);
    assert_eq!(retry["api"], "anthropic_complete");
    assert_eq!(retry["path"], PATH);
    assert_eq!(retry["request"], request(CLEAN_QUESTION, false));
    assert_eq!(calls[0].header("x-api-key"), Some("sk-turn"));
    assert!(!String::from_utf8_lossy(&calls[0].body).contains("NL91"));
    retried(&mut host, &calls[0], &answer(CLEAN_ANSWER));
    let caller = host.caller_received(s);
    assert!(caller.header("x-core-check").is_none());
    let body = json(&caller.body);
    assert_eq!(body["completion"], CLEAN_ANSWER);
    assert!(body.get("usage").is_none(), "this API states no usage");
    assert_eq!(host.metric("livecheck.orders.no-iban.failed"), Some(1));
    assert_eq!(host.metric("livecheck.orders.no-iban.passed"), Some(1));
}

#[test]
fn a_streaming_caller_gets_the_recovered_answer_as_completion_events() {
    let mut host = livecheck(SEED);
    let s = ask(&mut host, CLEAN_QUESTION, true);
    send_answer(
        &mut host,
        s,
        &[("content-type", "text/event-stream")],
        &stream(&["Pay to NL91ABNA04", "17164300 today."]),
        Chunking::Bytes(7),
    );
    let calls = callouts_to(&host, "/v1/retry");
    assert_eq!(calls.len(), 1);
    assert!(
        host.caller_received(s).body.is_empty(),
        "nothing of the round is shown"
    );
    retried(&mut host, &calls[0], &answer(CLEAN_ANSWER));
    let caller = host.caller_received(s);
    assert!(caller.end_of_stream);
    let (text, end) = read_events(&caller.body_text());
    assert_eq!(text, CLEAN_ANSWER);
    assert_eq!(end.as_deref(), Some("stop_sequence"));
    assert!(!caller.body_text().contains("NL91"));
}

/// A judged input check and a judged output check, both blocking.
const JUDGED: &str = r#"{"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {
    "blocked_reply": "Not allowed.",
    "live_checks": [
        {"name": "on-topic", "stage": "input", "kind": "custom_rule", "expected": "The question is about orders.", "judge_model": "judge-1"},
        {"name": "polite-out", "stage": "output", "kind": "polite_tone", "judge_model": "judge-1"}
    ]}}}}}"#;

fn verdicts(host: &mut Host, outcome: &str) {
    let verdict = format!(
        r#"{{"outcome": "{outcome}", "score": 0.5, "reason": "because", "usage": {{"input_tokens": 3, "output_tokens": 1}}}}"#
    );
    for c in callouts_to(host, "/v1/judge") {
        host.answer_callout(c.token, &[(":status", "200")], verdict.as_bytes())
            .unwrap();
    }
}

#[test]
fn judged_checks_read_the_human_turn_and_the_completion() {
    let mut host = livecheck(JUDGED);
    let s = ask(&mut host, CLEAN_QUESTION, false);
    let asked = callouts_to(&host, "/v1/judge");
    assert_eq!(asked.len(), 1);
    assert!(question_held(&host, s), "held until judged");
    let input = json(&asked[0].body);
    assert_eq!(input["stage"], "input");
    assert_eq!(
        input["text"],
        format!("You answer about orders.\n{CLEAN_QUESTION}"),
        "the system text and the Human turn, not the markers"
    );
    verdicts(&mut host, "passed");
    assert!(host.upstream_received(s).end_of_stream);
    answer_with(&mut host, s, "Go away.");
    let judged = callouts_to(&host, "/v1/judge");
    assert_eq!(judged.len(), 1);
    let output = json(&judged[0].body);
    assert_eq!(output["stage"], "output");
    assert_eq!(output["text"], "Go away.");
    assert_eq!(output["question"], CLEAN_QUESTION);
    assert!(answer_held(&host, s), "held until judged");
    verdicts(&mut host, "failed");
    let body = json(&host.caller_received(s).body);
    assert_eq!(body["completion"], "Not allowed.");
    assert_eq!(body["stop_reason"], "stop_sequence");
    assert_eq!(host.metric("livecheck.a.polite-out.failed"), Some(1));
}

#[test]
fn a_streamed_answer_is_judged_whole_and_a_failed_one_says_the_blocked_reply() {
    let mut host = livecheck(JUDGED);
    let s = ask(&mut host, CLEAN_QUESTION, true);
    verdicts(&mut host, "passed");
    send_answer(
        &mut host,
        s,
        &[("content-type", "text/event-stream")],
        &stream(&["Go ", "away", "."]),
        Chunking::Bytes(5),
    );
    let judged = callouts_to(&host, "/v1/judge");
    assert_eq!(judged.len(), 1);
    assert_eq!(json(&judged[0].body)["text"], "Go away.");
    assert!(
        !host.caller_received(s).body_text().contains("away"),
        "the answer text waits for its verdict"
    );
    verdicts(&mut host, "failed");
    let (text, end) = read_events(&host.caller_received(s).body_text());
    assert_eq!(text, "Not allowed.");
    assert_eq!(end.as_deref(), Some("stop_sequence"));
}
