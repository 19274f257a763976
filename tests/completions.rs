//! OpenAI's legacy text completions (`/v1/completions`, Azure's
//! `/openai/deployments/{d}/completions`) through the built `.wasm` in the harness: a clean turn,
//! a refused question, a withheld answer, a judged check, a stream cut where the match starts
//! however it is split, a recovered answer, and the turn's report.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use std::time::Duration;

use common::fixtures::*;
use common::*;
use livecheck_harness::{Callout, Host, StreamId};
use serde_json::{json, Value};

const DIRECT: &str = "/v1/completions";
const AZURE: &str = "/openai/deployments/instruct-prod/completions?api-version=2024-10-21";
const PATHS: [&str; 2] = [DIRECT, AZURE];
const BLOCKED_REPLY: &str = "I cannot help with that. Never share a password in this conversation.";

/// The seed's input rule and its output rule without recovery: a rules-only stream.
const RULES: &str = r#"{"default_agent": "orders", "agents": {"orders": {"published": "1", "versions": {"1": {
    "blocked_reply": "Not allowed.",
    "live_checks": [
        {"name": "no-passwords", "stage": "input", "kind": "not_contains", "expected": "password"},
        {"name": "no-iban", "stage": "output", "kind": "matches_pattern", "pattern": "NL\\d{2}[A-Z]{4}\\d{10}", "max_match": 18}
    ]}}}}}"#;

/// A blocking judged output check.
const JUDGED: &str = r#"{"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {
    "blocked_reply": "Not allowed.",
    "live_checks": [
        {"name": "polite-out", "stage": "output", "kind": "polite_tone", "judge_model": "judge-1"}
    ]}}}}}"#;

fn request(prompt: &str, stream: bool) -> String {
    json!({"model": "gpt-3.5-turbo-instruct", "prompt": prompt, "max_tokens": 64,
           "stream": stream, "stream_options": if stream { json!({"include_usage": true}) } else { Value::Null }})
    .to_string()
}

/// A non-streamed answer saying `text`, with usage 11 in / 7 out.
fn answer(text: &str) -> String {
    json!({"id": "cmpl-up", "object": "text_completion", "created": 1_790_000_000,
           "model": "gpt-3.5-turbo-instruct",
           "choices": [{"text": text, "index": 0, "logprobs": null, "finish_reason": "stop"}],
           "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}})
    .to_string()
}

/// A streamed answer, one chunk per piece, then its finish, its usage and `[DONE]`.
fn stream(pieces: &[&str]) -> String {
    let chunk = |text: &str, finish: Value| {
        let data = json!({"id": "cmpl-up", "object": "text_completion", "created": 1_790_000_000,
            "choices": [{"text": text, "index": 0, "logprobs": null, "finish_reason": finish}],
            "model": "gpt-3.5-turbo-instruct", "usage": null});
        format!("data: {data}\n\n")
    };
    let mut out: String = pieces.iter().map(|p| chunk(p, Value::Null)).collect();
    out.push_str(&chunk("", json!("stop")));
    let usage = json!({"id": "cmpl-up", "object": "text_completion", "created": 1_790_000_000,
        "choices": [], "model": "gpt-3.5-turbo-instruct",
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}});
    out.push_str(&format!("data: {usage}\n\ndata: [DONE]\n\n"));
    out
}

fn ask(host: &mut Host, path: &str, prompt: &str, stream: bool, chunking: Chunking) -> StreamId {
    send_request(
        host,
        path,
        &[("authorization", "Bearer sk-turn")],
        &request(prompt, stream),
        chunking,
    )
}

fn answer_with(host: &mut Host, s: StreamId, body: &str, content_type: &str, chunking: Chunking) {
    send_answer(host, s, &[("content-type", content_type)], body, chunking);
}

/// The chunks' data of a stream the caller received: `[DONE]` as a string.
fn chunks(text: &str) -> Vec<Value> {
    text.split_terminator("\n\n")
        .map(|e| {
            let data = e.strip_prefix("data: ").unwrap();
            serde_json::from_str(data).unwrap_or_else(|_| json!(data))
        })
        .collect()
}

/// The text a streaming caller's SDK shows: every chunk's first choice's text.
fn streamed_text(text: &str) -> String {
    chunks(text)
        .iter()
        .filter_map(|c| c.pointer("/choices/0/text").and_then(Value::as_str))
        .collect()
}

#[test]
fn a_clean_turn_passes_both_ways_unchanged() {
    for path in PATHS {
        for chunking in CHUNKINGS {
            let mut host = livecheck(SEED);
            let body = request(CLEAN_QUESTION, false);
            let s = ask(&mut host, path, CLEAN_QUESTION, false, chunking);
            assert_eq!(host.upstream_received(s).body_text(), body);
            assert_eq!(host.metric("livecheck.orders.no-passwords.passed"), Some(1));
            let up = answer(CLEAN_ANSWER);
            answer_with(&mut host, s, &up, "application/json", chunking);
            let caller = host.caller_received(s);
            assert_eq!(caller.body_text(), up, "{path} {chunking:?}");
            assert!(caller.header("x-core-check").is_none());
            assert_eq!(host.metric("livecheck.orders.no-iban.passed"), Some(1));
        }
    }
}

#[test]
fn a_forbidden_prompt_or_suffix_is_refused_as_a_filtered_completion_and_never_sent() {
    for path in PATHS {
        for chunking in CHUNKINGS {
            let mut host = livecheck(SEED);
            let s = ask(&mut host, path, FORBIDDEN_QUESTION, false, chunking);
            assert!(question_held(&host, s), "{path} {chunking:?}");
            let caller = host.caller_received(s);
            assert_eq!(
                caller.header("x-core-check"),
                Some(r#"stage=input, check="no-passwords", code=input_check_failed"#)
            );
            let reply = json(&caller.body);
            assert_eq!(reply["object"], "text_completion");
            assert_eq!(reply["choices"][0]["text"], BLOCKED_REPLY);
            assert_eq!(reply["choices"][0]["finish_reason"], "content_filter");
            assert!(reply["id"].as_str().unwrap().starts_with("cmpl-"));
        }
        // The suffix is the caller's text too; so is every prompt of a list.
        for body in [
            json!({"model": "m", "prompt": "Hello", "suffix": "my password"}),
            json!({"model": "m", "prompt": ["Hello", "my password"]}),
        ] {
            let mut host = livecheck(SEED);
            let s = send_request(&mut host, path, &[], &body.to_string(), Chunking::Whole);
            assert!(question_held(&host, s), "{body}");
            assert_eq!(host.metric("livecheck.orders.no-passwords.failed"), Some(1));
        }
    }
}

#[test]
fn a_forbidden_streamed_prompt_is_refused_as_chunks_ending_done() {
    let mut host = livecheck(SEED);
    let s = ask(
        &mut host,
        AZURE,
        FORBIDDEN_QUESTION,
        true,
        Chunking::Bytes(7),
    );
    assert!(question_held(&host, s));
    let caller = host.caller_received(s);
    assert_eq!(caller.header("content-type"), Some("text/event-stream"));
    let text = caller.body_text();
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    assert_eq!(streamed_text(&text), BLOCKED_REPLY);
    let chunks = chunks(&text);
    // The deployment is the model the caller asked for.
    assert_eq!(chunks[0]["model"], "instruct-prod");
    assert_eq!(chunks[1]["choices"][0]["finish_reason"], "content_filter");
    assert_eq!(chunks[2]["usage"]["total_tokens"], 0);
}

#[test]
fn token_prompts_are_refused_400_naming_the_field() {
    for prompt in [json!([1212, 318]), json!([[1212, 318]])] {
        let mut host = livecheck(SEED);
        let body = json!({"model": "m", "prompt": prompt}).to_string();
        let s = send_request(&mut host, DIRECT, &[], &body, Chunking::Whole);
        assert!(question_held(&host, s));
        let caller = host.caller_received(s);
        assert_eq!(caller.status(), Some(400));
        let error = json(&caller.body);
        assert_eq!(error["error"]["type"], "invalid_request_error");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains("prompt[0] must be a string"), "{message}");
    }
}

#[test]
fn a_forbidden_answer_is_withheld_with_its_id_and_usage_kept() {
    for path in PATHS {
        for chunking in CHUNKINGS {
            let mut host = livecheck(SEED);
            let s = ask(&mut host, path, CLEAN_QUESTION, false, chunking);
            answer_with(
                &mut host,
                s,
                &answer(FORBIDDEN_ANSWER),
                "application/json",
                chunking,
            );
            // The seed's no-iban recovers; the sidecar is unreachable here: withheld.
            let retry = callouts_to(&host, "/v1/retry");
            assert_eq!(retry.len(), 1);
            host.fail_callout(retry[0].token).unwrap();
            let caller = host.caller_received(s);
            assert!(!caller.body_text().contains("NL91"), "{path} {chunking:?}");
            let reply = json(&caller.body);
            assert_eq!(reply["id"], "cmpl-up");
            assert_eq!(reply["choices"][0]["text"], BLOCKED_REPLY);
            assert_eq!(reply["choices"][0]["finish_reason"], "content_filter");
            assert_eq!(reply["usage"]["completion_tokens"], 7);
            assert_eq!(host.metric("livecheck.orders.no-iban.failed"), Some(1));
        }
    }
}

#[test]
fn a_judged_check_reads_the_completion_and_its_failure_withholds_it() {
    let mut host = livecheck(JUDGED);
    let s = ask(&mut host, DIRECT, CLEAN_QUESTION, false, Chunking::Whole);
    answer_with(
        &mut host,
        s,
        &answer("Go away."),
        "application/json",
        Chunking::Bytes(7),
    );
    let judge = callouts_to(&host, "/v1/judge");
    assert_eq!(judge.len(), 1);
    let asked = json(&judge[0].body);
    assert_eq!(asked["stage"], "output");
    assert!(asked["text"].as_str().unwrap().contains("Go away."));
    assert!(answer_held(&host, s));
    let verdict = r#"{"outcome": "failed", "score": 0.1, "reason": "rude", "usage": {"input_tokens": 3, "output_tokens": 1}}"#;
    host.answer_callout(judge[0].token, &[(":status", "200")], verdict.as_bytes())
        .unwrap();
    let reply = json(&host.caller_received(s).body);
    assert_eq!(reply["choices"][0]["text"], "Not allowed.");
    assert_eq!(reply["choices"][0]["finish_reason"], "content_filter");
}

#[test]
fn a_clean_stream_arrives_whole_under_every_chunking() {
    for chunking in CHUNKINGS {
        let mut host = livecheck(RULES);
        let s = ask(&mut host, DIRECT, CLEAN_QUESTION, true, chunking);
        let up = stream(&["Your order ", "ships ", "tomorrow."]);
        answer_with(&mut host, s, &up, "text/event-stream", chunking);
        let caller = host.caller_received(s);
        assert_eq!(caller.body_text(), up, "{chunking:?}");
    }
}

#[test]
fn a_stream_is_cut_at_the_matchs_first_character_under_any_split() {
    let up = stream(&["Pay to N", "L91ABNA04171", "64300 today.", " More."]);
    for size in 1..=up.len().min(64) {
        let mut host = livecheck(RULES);
        let s = ask(&mut host, AZURE, CLEAN_QUESTION, true, Chunking::Whole);
        answer_with(
            &mut host,
            s,
            &up,
            "text/event-stream",
            Chunking::Bytes(size),
        );
        let caller = host.caller_received(s);
        let text = caller.body_text();
        assert_eq!(streamed_text(&text), "Pay to ", "split {size}: {text}");
        assert!(!text.contains("NL91") && !text.contains("64300"));
        let chunks = chunks(&text);
        let n = chunks.len();
        assert_eq!(
            chunks[n - 3]["choices"][0]["finish_reason"],
            "content_filter"
        );
        assert_eq!(chunks[n - 2]["choices"], json!([]));
        assert!(chunks[n - 2]["usage"]["completion_tokens"].is_u64());
        assert_eq!(chunks[n - 1], "[DONE]");
        assert_eq!(host.metric("livecheck.orders.no-iban.failed"), Some(1));
    }
}

fn retried(host: &mut Host, c: &Callout, body: &str) {
    let answer = json!({"outcome": "answered", "body": body}).to_string();
    host.answer_callout(c.token, &[(":status", "200")], answer.as_bytes())
        .unwrap();
}

#[test]
fn a_failed_answer_is_recovered_and_only_the_passing_one_is_shown() {
    for (path, stream) in [(DIRECT, false), (AZURE, true)] {
        let mut host = livecheck(SEED);
        let s = ask(&mut host, path, CLEAN_QUESTION, stream, Chunking::Bytes(7));
        let (body, content_type) = if stream {
            (
                self::stream(&["Pay to ", FORBIDDEN_ANSWER]),
                "text/event-stream",
            )
        } else {
            (answer(FORBIDDEN_ANSWER), "application/json")
        };
        answer_with(&mut host, s, &body, content_type, Chunking::Bytes(7));
        let calls = callouts_to(&host, "/v1/retry");
        assert_eq!(calls.len(), 1, "{path}");
        assert!(answer_held(&host, s), "nothing shows while asked again");
        let retry = json(&calls[0].body);
        assert_eq!(retry["path"], path);
        assert_eq!(
            retry["request"].as_str().unwrap(),
            request(CLEAN_QUESTION, stream)
        );
        assert!(!String::from_utf8_lossy(&calls[0].body).contains("NL91"));
        retried(&mut host, &calls[0], &answer(CLEAN_ANSWER));
        let caller = host.caller_received(s);
        let text = caller.body_text();
        assert!(!text.contains("NL91"), "{text}");
        if stream {
            assert_eq!(streamed_text(&text), CLEAN_ANSWER);
            let chunks = chunks(&text);
            let n = chunks.len();
            assert_eq!(chunks[n - 1], "[DONE]");
            assert_eq!(chunks[n - 2]["usage"]["prompt_tokens"], 22, "{text}");
        } else {
            let reply = json(&caller.body);
            assert_eq!(reply["choices"][0]["text"], CLEAN_ANSWER);
            assert_eq!(
                reply["usage"]["prompt_tokens"], 22,
                "usage of both attempts"
            );
            assert_eq!(reply["usage"]["completion_tokens"], 14);
        }
        assert_eq!(host.metric("livecheck.orders.no-iban.failed"), Some(1));
        assert_eq!(host.metric("livecheck.orders.no-iban.passed"), Some(1));
    }
}

#[test]
fn a_turn_reports_its_results_without_its_text() {
    let mut host = livecheck(RULES);
    let s = ask(
        &mut host,
        DIRECT,
        FORBIDDEN_QUESTION,
        false,
        Chunking::Whole,
    );
    host.finish_stream(s).unwrap();
    host.advance_time(Duration::from_millis(250));
    let sent = report_callouts(&host);
    assert_eq!(sent.len(), 1);
    let report = report_of(&sent[0]);
    assert_eq!(report["results"][0]["name"], "no-passwords");
    assert_eq!(report["results"][0]["outcome"], "failed");
    let body = String::from_utf8_lossy(&sent[0].body).to_lowercase();
    assert!(!body.contains("hunter2"));
}
