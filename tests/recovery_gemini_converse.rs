//! Recovery for Google Gemini and Amazon Bedrock Converse through the built `.wasm` in the harness,
//! the test playing the sidecar (`/v1/retry`, `/v1/judge`, the reports): a Gemini answer that fails
//! a check asking for recovery is asked again and the caller gets the second answer, streamed or
//! not, the caller's Google key going only in the retry callout; a Converse answer is asked again
//! only through the sidecar (which has the upstream's own key, or answers `errored`, and the answer
//! is then withheld as without `recover`), the caller's signature never handed on.
//!
//! Shapes: <https://ai.google.dev/api/generate-content>; Converse as in boto/botocore
//! `bedrock-runtime/2023-09-30/service-2.json` (`ConverseResponse`).
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use std::time::Duration;

use common::fixtures::*;
use common::*;
use livecheck_harness::{Callout, Host, StreamId};
use serde_json::{json, Value};

const GEMINI_API: &str = "/v1beta/models/gemini-2.5-flash";
const VERTEX: &str =
    "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-flash";
const KEY: &str = "AIza-key-of-the-turn";
const TOKEN: &str = "Bearer ya29.google-token";
const CONVERSE: &str = "/model/us.anthropic.claude-3-5-sonnet-20241022-v2%3A0/converse";
const SIGNATURE: &str = "AWS4-HMAC-SHA256 Credential=AKID/20261207/us-east-1/bedrock/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature=abc";
const RULE: &str = "Never state a bank account number.";

/// `no-iban` recovers, or not; with `judged`, `tone` is a judged output check too.
fn config(recover: bool, judged: bool) -> String {
    let tone = if judged {
        r#", {"name": "tone", "stage": "output", "kind": "polite_tone", "judge_model": "j", "recover": true}"#
    } else {
        ""
    };
    format!(
        r#"{{"default_agent": "a", "agents": {{"a": {{"published": "1", "versions": {{"1": {{
        "blocked_reply": "Not allowed.", "recover_attempts": 2,
        "live_checks": [
            {{"name": "no-iban", "stage": "output", "kind": "matches_pattern", "pattern": "NL\\d{{2}}[A-Z]{{4}}\\d{{10}}",
              "max_match": 18, "recover": {recover}, "description": "{RULE}"}}
            {tone}
        ]}}}}}}}}}}"#
    )
}

// --- Gemini ----------------------------------------------------------------------------------------

/// Where a Gemini turn goes, with the caller's credentials: the Gemini API's key in its header or
/// in the path's `?key=`, or Vertex's Google token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Google {
    KeyHeader,
    KeyInQuery,
    Vertex,
}

const GOOGLES: [Google; 3] = [Google::KeyHeader, Google::KeyInQuery, Google::Vertex];

impl Google {
    fn path(self, stream: bool) -> String {
        let method = if stream {
            ":streamGenerateContent?alt=sse"
        } else {
            ":generateContent"
        };
        match self {
            Google::KeyHeader => format!("{GEMINI_API}{method}"),
            Google::KeyInQuery if stream => format!("{GEMINI_API}{method}&key={KEY}"),
            Google::KeyInQuery => format!("{GEMINI_API}{method}?key={KEY}"),
            Google::Vertex => format!("{VERTEX}{method}"),
        }
    }

    fn headers(self) -> Vec<(&'static str, &'static str)> {
        match self {
            Google::KeyHeader => vec![("x-goog-api-key", KEY)],
            Google::KeyInQuery => vec![],
            Google::Vertex => vec![("authorization", TOKEN)],
        }
    }
}

fn gemini_request() -> String {
    json!({
        "contents": [{"role": "user", "parts": [{"text": CLEAN_QUESTION}]}],
        "systemInstruction": {"parts": [{"text": "You answer questions about orders."}]},
    })
    .to_string()
}

fn gemini_answer_of(text: &str, finish: Option<&str>, output_tokens: u64) -> Value {
    let mut candidate =
        json!({"content": {"parts": [{"text": text}], "role": "model"}, "index": 0});
    if let Some(finish) = finish {
        candidate["finishReason"] = json!(finish);
    }
    json!({
        "candidates": [candidate],
        "usageMetadata": {"promptTokenCount": 8, "candidatesTokenCount": output_tokens,
                          "totalTokenCount": 8 + output_tokens},
        "modelVersion": "gemini-2.5-flash",
        "responseId": "resp-g1",
    })
}

fn gemini_answer(text: &str) -> String {
    gemini_answer_of(text, Some("STOP"), 6).to_string()
}

/// An `alt=sse` stream saying `pieces`, the last chunk with the finish.
fn gemini_stream(pieces: &[&str]) -> String {
    let last = pieces.len() - 1;
    pieces
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let chunk = gemini_answer_of(p, (i == last).then_some("STOP"), i as u64 + 1);
            format!("data: {chunk}\n\n")
        })
        .collect()
}

/// The first candidate's text, as google-genai's `.text` reads it.
fn gemini_text(response: &Value) -> String {
    response["candidates"][0]["content"]["parts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["text"].as_str())
        .collect()
}

fn ask_gemini(host: &mut Host, google: Google, stream: bool) -> StreamId {
    send_request(
        host,
        &google.path(stream),
        &google.headers(),
        &gemini_request(),
        Chunking::Bytes(7),
    )
}

/// The sidecar's answer to a retry: the upstream's answer, verbatim.
fn answered(host: &mut Host, c: &Callout, body: &str) {
    let answer = json!({"outcome": "answered", "body": body}).to_string();
    host.answer_callout(c.token, &[(":status", "200")], answer.as_bytes())
        .unwrap();
}

/// The one retry in flight, checked for what the filter hands the sidecar of a Gemini turn: the
/// caller's credentials as its headers (the `?key=` in the path), the original body and path.
fn the_gemini_retry(host: &Host, google: Google, stream: bool) -> Callout {
    let calls = callouts_to(host, "/v1/retry");
    assert_eq!(calls.len(), 1, "{google:?}");
    let retry = json(&calls[0].body);
    assert_eq!(retry["api"], "gemini");
    assert_eq!(retry["path"], google.path(stream), "{google:?}");
    assert_eq!(retry["request"], gemini_request());
    assert_eq!(retry["rules"], json!([RULE]));
    let (key, auth) = match google {
        Google::KeyHeader => (Some(KEY), None),
        Google::KeyInQuery => (None, None),
        Google::Vertex => (None, Some(TOKEN)),
    };
    assert_eq!(calls[0].header("x-goog-api-key"), key, "{google:?}");
    assert_eq!(calls[0].header("authorization"), auth, "{google:?}");
    calls[0].clone()
}

#[test]
fn a_failing_gemini_answer_is_asked_again_and_the_caller_gets_the_second() {
    for google in GOOGLES {
        let mut host = livecheck(&config(true, false));
        let s = ask_gemini(&mut host, google, false);
        send_answer(
            &mut host,
            s,
            &[("content-type", "application/json")],
            &gemini_answer(FORBIDDEN_ANSWER),
            Chunking::Bytes(7),
        );
        assert!(answer_held(&host, s), "{google:?}: held while asked again");
        let retry = the_gemini_retry(&host, google, false);
        answered(&mut host, &retry, &gemini_answer(CLEAN_ANSWER));
        let caller = host.caller_received(s);
        assert_eq!(caller.status(), Some(200));
        assert!(caller.header("x-core-check").is_none(), "{google:?}");
        let body = json(caller.body_text().as_bytes());
        assert_eq!(gemini_text(&body), CLEAN_ANSWER, "{google:?}");
        assert_eq!(body["candidates"][0]["finishReason"], "STOP");
        // Both answers' tokens: the caller pays for both.
        assert_eq!(body["usageMetadata"]["promptTokenCount"], 16, "{body}");
        assert_eq!(body["usageMetadata"]["candidatesTokenCount"], 12, "{body}");
        assert!(!caller.body_text().contains("NL91"));
    }
}

#[test]
fn a_held_gemini_stream_that_fails_gets_the_second_answer_as_its_chunks() {
    let upstream = gemini_stream(&["Pay to NL9", "1ABNA04", "17164300", " today."]);
    for google in GOOGLES {
        for chunking in CHUNKINGS {
            let mut host = livecheck(&config(true, false));
            let s = ask_gemini(&mut host, google, true);
            send_answer(
                &mut host,
                s,
                &[("content-type", "text/event-stream")],
                &upstream,
                chunking,
            );
            let retry = the_gemini_retry(&host, google, true);
            answered(&mut host, &retry, &gemini_answer(CLEAN_ANSWER));
            let body = host.caller_received(s).body_text();
            assert!(
                !body.contains("NL9") && !body.contains("Pay to"),
                "{google:?} {chunking:?}: {body}"
            );
            let chunks: Vec<Value> = body
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| json(d.trim().as_bytes()))
                .collect();
            let text: String = chunks.iter().map(gemini_text).collect();
            assert_eq!(text, CLEAN_ANSWER, "{google:?} {chunking:?}");
            let finishes: Vec<&Value> = chunks
                .iter()
                .filter_map(|c| c["candidates"][0].get("finishReason"))
                .collect();
            assert_eq!(finishes, [&json!("STOP")], "{chunking:?}: finishes once");
        }
    }
}

/// The caller's Google key reaches the sidecar only as the retry's credential: the judge that
/// decides the second answer and the turn's report never see it.
#[test]
fn the_callers_google_key_goes_only_in_the_retry_callout() {
    for google in [Google::KeyHeader, Google::KeyInQuery] {
        let mut host = livecheck(&config(true, true));
        let s = ask_gemini(&mut host, google, false);
        send_answer(
            &mut host,
            s,
            &[("content-type", "application/json")],
            &gemini_answer(FORBIDDEN_ANSWER),
            Chunking::Whole,
        );
        let retry = the_gemini_retry(&host, google, false);
        answered(&mut host, &retry, &gemini_answer(CLEAN_ANSWER));
        // The second answer's judged check.
        let judge = callouts_to(&host, "/v1/judge");
        assert_eq!(judge.len(), 1, "{google:?}");
        assert!(!String::from_utf8_lossy(&judge[0].body).contains("AIza"));
        assert!(judge[0].headers.iter().all(|(_, v)| !v.contains("AIza")));
        let verdict = r#"{"outcome": "passed", "score": 0.9, "reason": "ok"}"#;
        host.answer_callout(judge[0].token, &[(":status", "200")], verdict.as_bytes())
            .unwrap();
        assert_eq!(
            gemini_text(&json(host.caller_received(s).body_text().as_bytes())),
            CLEAN_ANSWER
        );
        host.finish_stream(s).unwrap();
        host.advance_time(Duration::from_millis(250));
        let sent = report_callouts(&host);
        assert_eq!(sent.len(), 1, "{google:?}");
        let report = report_of(&sent[0]);
        let iban = report["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "no-iban" && r["outcome"] == "failed");
        assert!(iban.is_some(), "the first answer's failure is recorded");
        let body = String::from_utf8_lossy(&sent[0].body);
        for secret in ["AIza", "NL91", "order 17"] {
            assert!(!body.contains(secret), "{google:?}: {secret}");
        }
        assert!(sent[0].headers.iter().all(|(_, v)| !v.contains("AIza")));
    }
}

// --- Converse ----------------------------------------------------------------------------------------

fn converse_request() -> String {
    json!({"messages": [{"role": "user", "content": [{"text": CLEAN_QUESTION}]}],
           "system": [{"text": "You answer questions about orders."}],
           "inferenceConfig": {"maxTokens": 256}})
    .to_string()
}

fn converse_answer(text: &str) -> String {
    json!({"output": {"message": {"role": "assistant", "content": [{"text": text}]}},
           "stopReason": "end_turn",
           "usage": {"inputTokens": 8, "outputTokens": 6, "totalTokens": 14},
           "metrics": {"latencyMs": 120}})
    .to_string()
}

fn ask_converse(host: &mut Host) -> StreamId {
    send_request(
        host,
        CONVERSE,
        &[
            ("authorization", SIGNATURE),
            ("x-amz-date", "20261207T120000Z"),
        ],
        &converse_request(),
        Chunking::Bytes(7),
    )
}

fn answer_converse(host: &mut Host, s: StreamId, text: &str) {
    send_answer(
        host,
        s,
        &[("content-type", "application/json")],
        &converse_answer(text),
        Chunking::Bytes(7),
    );
}

/// The one retry in flight for a Converse turn: the original path and body, no signature.
fn the_converse_retry(host: &Host) -> Callout {
    let calls = callouts_to(host, "/v1/retry");
    assert_eq!(calls.len(), 1);
    let retry = json(&calls[0].body);
    assert_eq!(retry["api"], "converse");
    assert_eq!(retry["path"], CONVERSE);
    assert_eq!(retry["request"], converse_request());
    assert_eq!(
        calls[0].header("authorization"),
        None,
        "the caller's signature never leaves"
    );
    assert!(!String::from_utf8_lossy(&calls[0].body).contains("AWS4-HMAC"));
    calls[0].clone()
}

/// The sidecar has the upstream's own key: it asks again and the caller gets the second answer.
#[test]
fn a_failing_converse_answer_is_asked_again_through_the_sidecars_own_key() {
    let mut host = livecheck(&config(true, false));
    let s = ask_converse(&mut host);
    answer_converse(&mut host, s, FORBIDDEN_ANSWER);
    assert!(answer_held(&host, s));
    let retry = the_converse_retry(&host);
    answered(&mut host, &retry, &converse_answer(CLEAN_ANSWER));
    let caller = host.caller_received(s);
    assert!(caller.header("x-core-check").is_none());
    let body = json(caller.body_text().as_bytes());
    assert_eq!(
        body["output"]["message"]["content"][0]["text"],
        CLEAN_ANSWER
    );
    assert_eq!(body["stopReason"], "end_turn");
    assert_eq!(body["usage"]["inputTokens"], 16, "both answers' tokens");
    assert_eq!(body["usage"]["outputTokens"], 12);
    assert_eq!(body["usage"]["totalTokens"], 28);
    assert!(body["usage"].get("total_tokens").is_none(), "{body}");
}

/// The sidecar has no key of its own for the upstream (it answers `errored`, sending nothing):
/// the answer is withheld exactly as without `recover`.
#[test]
fn a_converse_answer_the_sidecar_cannot_ask_again_is_withheld_as_without_recover() {
    let mut without = livecheck(&config(false, false));
    let s = ask_converse(&mut without);
    answer_converse(&mut without, s, FORBIDDEN_ANSWER);
    assert!(callouts_to(&without, "/v1/retry").is_empty());
    let withheld = without.caller_received(s);

    let mut host = livecheck(&config(true, false));
    let s = ask_converse(&mut host);
    answer_converse(&mut host, s, FORBIDDEN_ANSWER);
    let retry = the_converse_retry(&host);
    let errored = json!({"outcome": "errored",
        "reason": "the caller signed the request, and the upstream has no key of its own"});
    host.answer_callout(
        retry.token,
        &[(":status", "200")],
        errored.to_string().as_bytes(),
    )
    .unwrap();
    let caller = host.caller_received(s);
    assert!(!caller.body_text().contains("NL91"));
    assert_eq!(caller.status(), withheld.status());
    assert_eq!(
        caller.header("x-core-check"),
        withheld.header("x-core-check")
    );
    let (got, want) = (
        json(caller.body_text().as_bytes()),
        json(withheld.body_text().as_bytes()),
    );
    assert_eq!(got["stopReason"], "guardrail_intervened");
    assert_eq!(got["output"], want["output"]);
    assert_eq!(got["usage"], want["usage"]);
}
