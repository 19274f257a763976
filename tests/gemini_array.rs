//! Gemini's `:streamGenerateContent` without `alt=sse` through the built `.wasm` in the harness:
//! Google answers one JSON array sent piece by piece (`[{…}`, then `,\r\n{…}` per chunk, then `]`,
//! as `application/json`), each element a `GenerateContentResponse` with its new parts. livecheck
//! reads it as it reads the SSE stream (tests/gemini.rs) and writes back in the same framing: what
//! the caller receives is one valid JSON array however the answer was cut.
//!
//! Sources: <https://ai.google.dev/api/generate-content#method:-models.streamgeneratecontent>;
//! the array's bytes as symfony/ai#1988 and kgateway-dev/kgateway#10804 show them.

#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

mod common;

use common::fixtures::*;
use common::*;
use livecheck_harness::{Host, StreamId};
use serde_json::{json, Value};

const MODEL: &str = "gemini-2.5-flash";
const GEMINI_API: &str = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?key=AIza-key";
const VERTEX: &str = "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-flash:streamGenerateContent";
const PATHS: [&str; 2] = [GEMINI_API, VERTEX];
const JSON: &str = "application/json; charset=UTF-8";

/// Every chunking of the SSE tests, and one more that splits inside separators.
const SPLITS: [Chunking; 4] = [
    Chunking::Bytes(1),
    Chunking::Bytes(5),
    Chunking::Bytes(7),
    Chunking::Whole,
];

fn request(question: &str) -> String {
    json!({"contents": [{"role": "user", "parts": [{"text": question}]}]}).to_string()
}

fn ask(host: &mut Host, path: &str, question: &str) -> StreamId {
    send_request(host, path, &[], &request(question), Chunking::Bytes(7))
}

/// A chunk of `parts`, with the usage so far; `finish` on the last.
fn chunk(parts: Value, finish: Option<&str>, n: usize) -> Value {
    let mut candidate = json!({"content": {"parts": parts, "role": "model"}, "index": 0});
    if let Some(finish) = finish {
        candidate["finishReason"] = json!(finish);
    }
    json!({
        "candidates": [candidate],
        "usageMetadata": {"promptTokenCount": 8, "candidatesTokenCount": n, "totalTokenCount": 8 + n},
        "modelVersion": MODEL,
        "responseId": "resp-a1",
    })
}

/// Chunks as Google writes them: each pretty-printed, `[` before the first, `,\r\n` between.
fn array_of(chunks: &[Value]) -> String {
    let elements: Vec<String> = chunks
        .iter()
        .map(|c| serde_json::to_string_pretty(c).unwrap())
        .collect();
    format!("[{}]", elements.join(",\r\n"))
}

/// A stream saying `pieces`, the last chunk finishing.
fn stream(pieces: &[&str]) -> String {
    let last = pieces.len() - 1;
    let chunks: Vec<Value> = pieces
        .iter()
        .enumerate()
        .map(|(i, p)| chunk(json!([{"text": p}]), (i == last).then_some("STOP"), i + 1))
        .collect();
    array_of(&chunks)
}

/// What the caller received, which must be one JSON array of objects, and the text it says (the
/// first candidate's text parts, as google-genai's `.text` joins them, thoughts aside).
fn read_array(body: &str) -> (Vec<Value>, String) {
    let chunks: Vec<Value> =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("not one JSON array ({e}): {body}"));
    let text = chunks
        .iter()
        .flat_map(|c| {
            assert!(c.is_object(), "{c}");
            c["candidates"][0]["content"]["parts"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter(|p| p.get("thought") != Some(&json!(true)))
        .filter_map(|p| p["text"].as_str().map(str::to_owned))
        .collect();
    (chunks, text)
}

fn finish_of(chunk: &Value) -> &Value {
    &chunk["candidates"][0]["finishReason"]
}

/// The seed policy with `no-iban` recovering or not (recovering: the round is held whole).
fn seed(recover: bool) -> String {
    SEED.replace(r#""recover": true"#, &format!(r#""recover": {recover}"#))
}

#[test]
fn a_clean_stream_passes_as_it_came() {
    let upstream = stream(&["Your order ", "ships \"[tomorrow]\"."]);
    for path in PATHS {
        for recover in [false, true] {
            for chunking in SPLITS {
                let mut host = livecheck(&seed(recover));
                let s = ask(&mut host, path, CLEAN_QUESTION);
                assert_eq!(
                    host.upstream_received(s).body_text(),
                    request(CLEAN_QUESTION)
                );
                send_answer(&mut host, s, &[("content-type", JSON)], &upstream, chunking);
                let caller = host.caller_received(s);
                assert_eq!(caller.status(), Some(200));
                assert!(caller.header("x-core-check").is_none());
                assert_eq!(
                    caller.body_text(),
                    upstream,
                    "{path} recover {recover} {chunking:?}"
                );
            }
        }
    }
}

#[test]
fn a_forbidden_question_is_refused_as_an_array_of_one_blocked_response() {
    for path in PATHS {
        let mut host = livecheck(SEED);
        let s = ask(&mut host, path, FORBIDDEN_QUESTION);
        assert!(question_held(&host, s), "{path}");
        let caller = host.caller_received(s);
        assert_eq!(caller.status(), Some(200));
        assert_eq!(caller.header("content-type"), Some("application/json"));
        assert!(caller
            .header("x-core-check")
            .unwrap()
            .contains("no-passwords"));
        let (chunks, text) = read_array(&caller.body_text());
        assert_eq!(chunks.len(), 1, "one element, the whole refusal");
        assert!(text.contains("Never share a password"), "{text}");
        assert_eq!(finish_of(&chunks[0]), "SAFETY");
        assert_eq!(chunks[0]["promptFeedback"]["blockReason"], "SAFETY");
        assert_eq!(chunks[0]["modelVersion"], MODEL, "the path names the model");
    }
}

#[test]
fn a_streamed_answer_is_cut_where_the_match_starts_as_one_array_under_every_chunking() {
    let upstream = stream(&["Pay to NL9", "1ABNA04", "17164300", " today."]);
    for path in PATHS {
        for chunking in SPLITS {
            let mut host = livecheck(&seed(false));
            let s = ask(&mut host, path, CLEAN_QUESTION);
            send_answer(&mut host, s, &[("content-type", JSON)], &upstream, chunking);
            let body = host.caller_received(s).body_text();
            assert!(!body.contains("NL9"), "{path} {chunking:?}: {body}");
            let (chunks, text) = read_array(&body);
            assert_eq!(text, "Pay to ", "{path} {chunking:?}");
            let last = chunks.last().unwrap();
            assert_eq!(finish_of(last), "SAFETY", "{chunking:?}");
            assert_eq!(last["responseId"], "resp-a1");
            let finishes = chunks.iter().filter(|c| !finish_of(c).is_null()).count();
            assert_eq!(finishes, 1, "{chunking:?}: the candidate finishes once");
            assert_eq!(host.metric("livecheck.orders.no-iban.failed"), Some(1));
        }
    }
}

#[test]
fn a_held_round_that_fails_is_the_reply_stopped_for_safety_alone_in_the_array() {
    // `no-iban` recovers: the round is held whole and asked again; when the sidecar cannot ask
    // again, the caller gets the reply instead of anything of the answer.
    let upstream = stream(&["Pay to NL9", "1ABNA04", "17164300", " today."]);
    for chunking in SPLITS {
        let mut host = livecheck(SEED);
        let s = ask(&mut host, GEMINI_API, CLEAN_QUESTION);
        send_answer(&mut host, s, &[("content-type", JSON)], &upstream, chunking);
        let calls = callouts_to(&host, "/v1/retry");
        assert_eq!(calls.len(), 1, "asked again once");
        let errored = r#"{"outcome": "errored", "reason": "the upstream could not be reached"}"#;
        host.answer_callout(calls[0].token, &[(":status", "200")], errored.as_bytes())
            .unwrap();
        let body = host.caller_received(s).body_text();
        assert!(!body.contains("Pay to"), "{chunking:?}: {body}");
        let (chunks, text) = read_array(&body);
        assert_eq!(chunks.len(), 1, "{chunking:?}");
        assert!(text.starts_with("I cannot help with that."), "{text}");
        assert_eq!(finish_of(&chunks[0]), "SAFETY");
        assert_eq!(host.metric("livecheck.orders.no-iban.failed"), Some(1));
    }
}

const TOOLS: &str = r#"{"default_agent": "mail", "agents": {"mail": {"published": "1", "versions": {"1": {
    "blocked_reply": "Not allowed.",
    "allowed_tools": ["send_email", "lookup_*"]}}}}}"#;

#[test]
fn a_function_call_not_allowed_is_denied_and_the_array_ends_stopped_for_safety() {
    let call = json!({"functionCall": {"name": "drop_tables", "args": {"table": "orders"}}});
    let upstream = array_of(&[
        chunk(json!([{"text": "Dropping it."}]), None, 1),
        chunk(json!([call]), Some("STOP"), 2),
    ]);
    for chunking in SPLITS {
        let mut host = livecheck(TOOLS);
        let s = ask(&mut host, GEMINI_API, CLEAN_QUESTION);
        send_answer(&mut host, s, &[("content-type", JSON)], &upstream, chunking);
        let body = host.caller_received(s).body_text();
        assert!(!body.contains("drop_tables"), "{chunking:?}: {body}");
        assert_eq!(host.metric("livecheck.mail.allowed_tools.failed"), Some(1));
        let (chunks, text) = read_array(&body);
        assert_eq!(finish_of(chunks.last().unwrap()), "SAFETY");
        assert!(
            text.contains("The tool is not one this agent may call."),
            "{chunking:?}: {text}"
        );
    }
}

#[test]
fn what_is_not_one_array_is_cut_closed_and_the_caller_still_gets_one() {
    let whole = stream(&["Your order ", "ships tomorrow."]);
    let unfinished = whole.strip_suffix(']').unwrap().to_owned();
    let not_object = format!("{unfinished},\r\n7]");
    let after = format!("{whole},{{}}");
    let sse = format!(
        "data: {}\n\n",
        chunk(json!([{"text": "Hi."}]), Some("STOP"), 1)
    );
    for (name, upstream, seen) in [
        ("a stream that ends before ]", unfinished.as_str(), true),
        (
            "an element that is not an object",
            not_object.as_str(),
            true,
        ),
        ("bytes after the array", after.as_str(), true),
        ("server-sent events", sse.as_str(), false),
        ("a bare object", "{\"candidates\": []}", false),
    ] {
        for chunking in SPLITS {
            let mut host = livecheck(&seed(false));
            let s = ask(&mut host, VERTEX, CLEAN_QUESTION);
            send_answer(&mut host, s, &[("content-type", JSON)], upstream, chunking);
            let body = host.caller_received(s).body_text();
            let (chunks, text) = read_array(&body);
            assert!(
                !body.contains("7]") && !body.contains("Hi."),
                "{name}: {body}"
            );
            let last = chunks.last().unwrap();
            if seen {
                // The caller saw the answer finish: the array only ends.
                assert_eq!(text, "Your order ships tomorrow.", "{name} {chunking:?}");
                assert_eq!(finish_of(last), "STOP", "{name}");
            } else {
                assert_eq!(text, "", "{name} {chunking:?}");
                assert_eq!(finish_of(last), "SAFETY", "{name}");
            }
        }
    }
}

#[test]
fn a_background_check_reads_the_array_answer_that_passed_as_it_came() {
    // No blocking output check: the answer is not held, only copied for the background check,
    // which must read the array as a stream (Google sends it as `application/json`).
    let config = r#"{"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {"live_checks": [
        {"name": "tone", "stage": "output", "kind": "polite_tone", "mode": "background", "sample": 1, "judge_model": "judge-1"}]}}}}}"#;
    let upstream = stream(&["Your order ", "ships tomorrow."]);
    for path in PATHS {
        let mut host = livecheck(config);
        let s = ask(&mut host, path, CLEAN_QUESTION);
        send_answer(
            &mut host,
            s,
            &[("content-type", JSON)],
            &upstream,
            Chunking::Bytes(7),
        );
        assert_eq!(host.caller_received(s).body_text(), upstream, "{path}");
        host.finish_stream(s).unwrap();
        host.advance_time(std::time::Duration::from_millis(250));
        let sent = report_callouts(&host);
        assert_eq!(sent.len(), 1, "{path}");
        let report = report_of(&sent[0]);
        assert_eq!(report["background"][0]["name"], "tone");
        assert_eq!(
            report["background"][0]["judge"]["text"], "Your order ships tomorrow.",
            "{path}"
        );
    }
}
