//! Azure OpenAI through the built `.wasm` in the harness: a deployment path is read as Chat
//! Completions (the deployment the model), its answers' content-filter fields go as they came
//! while the text is checked as always (hold-back, cuts, withheld answers, recovery), and a retry
//! carries the caller's `api-key`.
//!
//! Azure's shapes: <https://learn.microsoft.com/azure/foundry/openai/concepts/content-streaming>
//! (a first chunk of `choices: []` holding `prompt_filter_results`, verdicts beside the text,
//! annotations of text already sent with an empty id and model).

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::fixtures::*;
use common::*;
use livecheck_harness::{Host, StreamId};
use serde_json::{json, Value};

const PATH: &str = "/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21";
const API_KEY: &str = "azure-key-of-the-turn";

/// Only a rule blocks the output: the answer streams, held back only where an IBAN could begin.
const RULES_ONLY: &str = r#"{"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {
    "blocked_reply": "Not allowed.",
    "live_checks": [{"name": "no-iban", "stage": "output", "kind": "matches_pattern",
                     "pattern": "NL\\d{2}[A-Z]{4}\\d{10}", "max_match": 18}]}}}}}"#;

/// A check asks for recovery: nothing of a round shows until it passed.
const HELD: &str = r#"{"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {
    "blocked_reply": "Not allowed.",
    "live_checks": [{"name": "no-iban", "stage": "output", "kind": "matches_pattern",
                     "pattern": "NL\\d{2}[A-Z]{4}\\d{10}", "max_match": 18},
                    {"name": "no-password", "stage": "output", "kind": "not_contains",
                     "expected": "password", "recover": true}]}}}}}"#;

const CLEAN: [&str; 4] = ["Your order ", "ships ", "tomorrow", ", promised."];
const FORBIDDEN: [&str; 4] = ["Pay to NL9", "1ABNA04", "17164300", " today."];

fn verdicts() -> Value {
    let safe = json!({"filtered": false, "severity": "safe"});
    json!({"hate": safe, "self_harm": safe, "sexual": safe, "violence": safe})
}

fn prompt_filter_results() -> Value {
    json!([{"prompt_index": 0, "content_filter_results": verdicts()}])
}

/// An Azure OpenAI stream saying `pieces`: the prompt's verdicts first, the text's beside it, an
/// annotation with an empty delta, the finish, and an annotation of the text already sent.
fn azure_stream(pieces: &[&str]) -> String {
    let data = |v: Value| format!("data: {v}\n\n");
    let chunk = |choice: Value| {
        data(
            json!({"choices": [choice], "created": 1790000000, "id": "chatcmpl-az",
                    "model": "gpt-4o-2024-11-20", "object": "chat.completion.chunk",
                    "system_fingerprint": "fp_az"}),
        )
    };
    let annotation = |choice: Value| {
        data(json!({"choices": [choice], "created": 0, "id": "", "model": "", "object": ""}))
    };
    let mut out = data(
        json!({"choices": [], "created": 0, "id": "", "model": "", "object": "",
                              "prompt_filter_results": prompt_filter_results()}),
    );
    out += &chunk(
        json!({"content_filter_results": {}, "delta": {"content": "", "refusal": null,
        "role": "assistant"}, "finish_reason": null, "index": 0, "logprobs": null}),
    );
    for (i, p) in pieces.iter().enumerate() {
        out += &chunk(
            json!({"content_filter_results": verdicts(), "delta": {"content": p},
            "finish_reason": null, "index": 0, "logprobs": null}),
        );
        if i == 1 {
            out += &annotation(json!({"content_filter_results": verdicts(), "delta": {},
                "finish_reason": null, "index": 0}));
        }
    }
    out += &chunk(
        json!({"content_filter_results": {}, "delta": {}, "finish_reason": "stop",
        "index": 0, "logprobs": null}),
    );
    let sent = pieces.concat().len();
    out += &annotation(
        json!({"content_filter_offsets": {"check_offset": sent, "start_offset": 0,
        "end_offset": sent}, "content_filter_results": verdicts(), "finish_reason": null,
        "index": 0}),
    );
    out + "data: [DONE]\n\n"
}

/// Azure OpenAI's whole answer saying `text`, with the prompt's and the text's verdicts.
fn azure_answer(text: &str) -> String {
    json!({"choices": [{"content_filter_results": verdicts(), "finish_reason": "stop", "index": 0,
            "logprobs": null, "message": {"annotations": [], "content": text, "refusal": null,
            "role": "assistant"}}],
           "created": 1790000000, "id": "chatcmpl-az", "model": "gpt-4o-2024-11-20",
           "object": "chat.completion", "prompt_filter_results": prompt_filter_results(),
           "system_fingerprint": "fp_az",
           "usage": {"completion_tokens": 7, "prompt_tokens": 11, "total_tokens": 18}})
    .to_string()
}

fn request(question: &str, stream: bool) -> String {
    json!({"model": "gpt-4o-prod", "stream": stream, "messages": [
        {"role": "system", "content": "You answer questions about orders."},
        {"role": "user", "content": question}]})
    .to_string()
}

fn ask(host: &mut Host, question: &str, stream: bool) -> StreamId {
    send_request(
        host,
        PATH,
        &[("api-key", API_KEY)],
        &request(question, stream),
        Chunking::Bytes(7),
    )
}

fn answer_stream(host: &mut Host, s: StreamId, body: &str, chunking: Chunking) {
    send_answer(
        host,
        s,
        &[("content-type", "text/event-stream")],
        body,
        chunking,
    );
}

/// The first chunk the caller received whose id is not empty (Azure's annotations' is).
fn first_id(body: &str) -> String {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| v["id"].as_str().map(str::to_owned))
        .find(|id| !id.is_empty())
        .unwrap_or_default()
}

#[test]
fn a_clean_azure_stream_arrives_as_it_came_under_every_chunking() {
    for chunking in CHUNKINGS {
        let mut host = livecheck(RULES_ONLY);
        let s = ask(&mut host, CLEAN_QUESTION, true);
        let upstream = azure_stream(&CLEAN);
        answer_stream(&mut host, s, &upstream, chunking);
        let caller = host.caller_received(s);
        assert_eq!(caller.body_text(), upstream, "{chunking:?}");
        assert!(caller.end_of_stream && !caller.reset);
        assert_eq!(host.metric("livecheck.a.no-iban.passed"), Some(1));
    }
}

#[test]
fn a_forbidden_azure_stream_is_cut_where_the_match_starts_in_the_answers_own_chunks() {
    for chunking in CHUNKINGS {
        let mut host = livecheck(RULES_ONLY);
        let s = ask(&mut host, CLEAN_QUESTION, true);
        answer_stream(&mut host, s, &azure_stream(&FORBIDDEN), chunking);
        let body = host.caller_received(s).body_text();
        let got = read_stream(Vendor::Chat, &body);
        assert_eq!(got.text, "Pay to ", "{chunking:?}");
        assert_eq!(got.end, "content_filter+[DONE]", "{chunking:?}");
        assert!(!body.contains("NL9"), "{chunking:?}: {body}");
        assert!(body.contains("prompt_filter_results"), "{chunking:?}");
        // The chunks the filter writes carry the answer's identity, not the annotations' empty one.
        let written = body.rsplit("data: ").nth(1).unwrap();
        let written: Value = serde_json::from_str(written.trim()).unwrap();
        assert_eq!(written["id"], "chatcmpl-az", "{chunking:?}: {body}");
        assert_eq!(written["model"], "gpt-4o-2024-11-20");
        assert_eq!(first_id(&body), "chatcmpl-az");
        assert_eq!(host.metric("livecheck.a.no-iban.failed"), Some(1));
    }
}

#[test]
fn a_held_azure_stream_arrives_whole_or_is_withheld_when_it_cannot_recover() {
    let password: &[&str] = &["Your pass", "word is ", "hunter2."];
    for (pieces, text, end) in [
        (&CLEAN[..], CLEAN.concat(), "stop+[DONE]"),
        (password, "Not allowed.".to_owned(), "content_filter+[DONE]"),
    ] {
        let mut host = livecheck(HELD);
        let s = ask(&mut host, CLEAN_QUESTION, true);
        answer_stream(&mut host, s, &azure_stream(pieces), Chunking::Bytes(7));
        if let Some(retry) = callouts_to(&host, "/v1/retry").first() {
            assert!(host.caller_received(s).body.is_empty());
            host.fail_callout(retry.token).unwrap();
        }
        let body = host.caller_received(s).body_text();
        let got = read_stream(Vendor::Chat, &body);
        assert_eq!((got.text.as_str(), got.end.as_str()), (text.as_str(), end));
        assert!(!body.contains("hunter2"), "{body}");
        // A passing round goes as it came; a withheld one is written afresh, as the answer's.
        assert_eq!(body.contains("prompt_filter_results"), end == "stop+[DONE]");
        assert_eq!(first_id(&body), "chatcmpl-az");
    }
}

#[test]
fn a_forbidden_azure_answer_is_withheld_and_its_verdicts_on_the_prompt_stay() {
    let mut host = livecheck(RULES_ONLY);
    let s = ask(&mut host, CLEAN_QUESTION, false);
    send_answer(
        &mut host,
        s,
        &[("content-type", "application/json")],
        &azure_answer(FORBIDDEN_ANSWER),
        Chunking::Bytes(7),
    );
    let caller = host.caller_received(s);
    assert!(!caller.body_text().contains("NL91"));
    let body = json(&caller.body);
    assert_eq!(body["choices"][0]["message"]["content"], "Not allowed.");
    assert_eq!(body["choices"][0]["finish_reason"], "content_filter");
    assert_eq!(body["prompt_filter_results"], prompt_filter_results());

    let mut host = livecheck(RULES_ONLY);
    let s = ask(&mut host, CLEAN_QUESTION, false);
    let clean = azure_answer(CLEAN_ANSWER);
    let headers = [("content-type", "application/json")];
    send_answer(&mut host, s, &headers, &clean, Chunking::Bytes(7));
    assert_eq!(host.caller_received(s).body_text(), clean);
}

#[test]
fn a_refused_question_on_a_deployment_path_never_reaches_azure_and_names_the_deployment() {
    let mut host = livecheck(SEED);
    let s = ask(&mut host, FORBIDDEN_QUESTION, false);
    assert!(question_held(&host, s));
    let body = json(&host.caller_received(s).body);
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], "gpt-4o-prod");
    assert_eq!(body["choices"][0]["finish_reason"], "content_filter");
    assert_eq!(host.metric("livecheck.orders.no-passwords.failed"), Some(1));
}

#[test]
fn a_recovered_azure_stream_asks_again_on_its_path_with_its_api_key() {
    let mut host = livecheck(SEED);
    let s = ask(&mut host, CLEAN_QUESTION, true);
    answer_stream(&mut host, s, &azure_stream(&FORBIDDEN), Chunking::Bytes(7));
    assert!(
        host.caller_received(s).body.is_empty(),
        "nothing of the round is shown"
    );
    let retries = callouts_to(&host, "/v1/retry");
    assert_eq!(retries.len(), 1);
    let retry = &retries[0];
    assert_eq!(retry.header("api-key"), Some(API_KEY));
    let asked = json(&retry.body);
    assert_eq!(asked["path"], PATH);
    assert_eq!(asked["api"], "chat_completions");
    let answered = json!({"outcome": "answered", "body": azure_answer(CLEAN_ANSWER)}).to_string();
    host.answer_callout(retry.token, &[(":status", "200")], answered.as_bytes())
        .unwrap();
    let caller = host.caller_received(s);
    assert!(caller.end_of_stream);
    let got = read_stream(Vendor::Chat, &caller.body_text());
    assert_eq!(got.text, CLEAN_ANSWER);
    assert_eq!(got.end, "stop+[DONE]");
    assert!(!caller.body_text().contains("NL91"));
}

#[test]
fn an_azure_turns_key_is_never_sent_to_the_judge_nor_recorded() {
    let config = r#"{"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {
        "live_checks": [{"name": "tone", "stage": "output", "kind": "polite_tone",
                         "judge_model": "j"}]}}}}}"#;
    let mut host = livecheck(config);
    let s = ask(&mut host, CLEAN_QUESTION, false);
    let headers = [("content-type", "application/json")];
    send_answer(
        &mut host,
        s,
        &headers,
        &azure_answer(CLEAN_ANSWER),
        Chunking::Whole,
    );
    let calls = host.pending_callouts();
    assert!(!calls.is_empty());
    for call in &calls {
        assert_eq!(call.header("api-key"), None);
        assert!(!String::from_utf8_lossy(&call.body).contains(API_KEY));
    }
}

#[test]
fn an_answer_azures_own_filter_stopped_goes_as_it_came() {
    let upstream = azure_stream(&CLEAN[..2]).replace(
        r#""finish_reason":"stop""#,
        r#""finish_reason":"content_filter""#,
    );
    assert!(upstream.contains(r#""finish_reason":"content_filter""#));
    for chunking in CHUNKINGS {
        let mut host = livecheck(RULES_ONLY);
        let s = ask(&mut host, CLEAN_QUESTION, true);
        answer_stream(&mut host, s, &upstream, chunking);
        let caller = host.caller_received(s);
        assert_eq!(caller.body_text(), upstream, "{chunking:?}");
        assert_eq!(host.metric("livecheck.a.no-iban.passed"), Some(1));
    }
}
