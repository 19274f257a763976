//! Amazon Bedrock Converse through the built `.wasm` in the harness: `POST /model/{modelId}/converse`
//! (a JSON answer) and `/converse-stream` (an AWS event stream, `application/vnd.amazon.eventstream`).
//! The same checks as every API, Bedrock's stop shape (`stopReason: "guardrail_intervened"`, the
//! reply as the assistant's text), requests never changed (the caller signed them with SigV4), and
//! the caller's signature never handed to the judge nor reported.
//!
//! Shapes: botocore's bedrock-runtime service model (`ConverseRequest`, `ConverseResponse`,
//! `ConverseStreamOutput`); the AWS API reference `API_runtime_Converse`, `API_runtime_ConverseStream`.

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::fixtures::*;
use common::*;
use livecheck_harness::{Host, StreamId};
use serde_json::{json, Value};

/// boto3 percent-encodes the model id's `:` in the path.
const MODEL_PATH: &str = "/model/anthropic.claude-3-haiku-20240307-v1%3A0";
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
