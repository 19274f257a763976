//! Google Gemini `generateContent` through the built `.wasm` in the harness, on the Gemini API
//! (`/v1beta/models/{model}:generateContent`, `:streamGenerateContent?alt=sse`) and on Vertex AI
//! (`…/publishers/google/models/{model}:…`): the same checks as every API, the model the path
//! names, Google's stop shapes (`finishReason: "SAFETY"`), a failed answer withheld when no retry
//! passes (recovery itself: tests/recovery_gemini_converse.rs), and the caller's Google key never
//! handed to the judge.
//!
//! Shapes: <https://ai.google.dev/api/generate-content>; googleapis/python-genai `types.py`
//! (`GenerateContentResponse`, `Candidate`, `Part`); stream chunks as in simonw/llm-gemini#97.

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::fixtures::*;
use common::*;
use livecheck_harness::{Host, StreamId};
use serde_json::{json, Value};

const MODEL: &str = "gemini-2.5-flash";
const GEMINI_API: &str = "/v1beta/models/gemini-2.5-flash";
const VERTEX: &str =
    "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-flash";
const KEY: &str = "AIza-key-of-the-turn";

/// Where the request goes: the Gemini API (key in `x-goog-api-key`) or Vertex (a Google token).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Platform {
    Gemini,
    Vertex,
}

const PLATFORMS: [Platform; 2] = [Platform::Gemini, Platform::Vertex];

impl Platform {
    fn path(self, stream: bool) -> String {
        let base = match self {
            Platform::Gemini => GEMINI_API,
            Platform::Vertex => VERTEX,
        };
        if stream {
            format!("{base}:streamGenerateContent?alt=sse")
        } else {
            format!("{base}:generateContent")
        }
    }

    fn headers(self) -> Vec<(&'static str, &'static str)> {
        match self {
            Platform::Gemini => vec![("x-goog-api-key", KEY)],
            Platform::Vertex => vec![("authorization", "Bearer ya29.google-token")],
        }
    }
}

/// A request as google-genai sends it (`contents`, a system instruction, a generation config).
fn request(question: &str) -> String {
    json!({
        "contents": [{"role": "user", "parts": [{"text": question}]}],
        "systemInstruction": {"parts": [{"text": "You answer questions about orders."}]},
        "generationConfig": {"temperature": 0.2},
    })
    .to_string()
}

fn answer_of(parts: Value, finish: &str) -> Value {
    json!({
        "candidates": [{"content": {"parts": parts, "role": "model"},
                        "finishReason": finish, "index": 0}],
        "usageMetadata": {"promptTokenCount": 8, "candidatesTokenCount": 6, "totalTokenCount": 14},
        "modelVersion": MODEL,
        "responseId": "resp-g1",
    })
}

fn answer(text: &str) -> String {
    answer_of(json!([{"text": text}]), "STOP").to_string()
}

/// A `:streamGenerateContent?alt=sse` stream saying `pieces`: each chunk its new text and the
/// usage so far, the last with the finish.
fn stream(pieces: &[&str]) -> String {
    let last = pieces.len().saturating_sub(1);
    pieces
        .iter()
        .enumerate()
        .map(|(i, piece)| {
            let mut chunk = answer_of(json!([{"text": piece}]), "STOP");
            if i != last {
                chunk["candidates"][0]
                    .as_object_mut()
                    .unwrap()
                    .remove("finishReason");
            }
            chunk["usageMetadata"]["candidatesTokenCount"] = json!(i + 1);
            format!("data: {chunk}\n\n")
        })
        .collect()
}

/// The first candidate's text as google-genai's `.text` reads it (its text parts, thoughts aside).
fn text_of(response: &Value) -> String {
    response["candidates"][0]["content"]["parts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p.get("thought") != Some(&json!(true)))
        .filter_map(|p| p["text"].as_str())
        .collect()
}

/// Every chunk of a stream the caller got (each must be JSON), and the text they say.
fn read_chunks(body: &str) -> (Vec<Value>, String) {
    let chunks: Vec<Value> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| json(d.trim().as_bytes()))
        .collect();
    let text = chunks.iter().map(text_of).collect();
    (chunks, text)
}

fn ask(host: &mut Host, platform: Platform, question: &str, stream: bool) -> StreamId {
    send_request(
        host,
        &platform.path(stream),
        &platform.headers(),
        &request(question),
        Chunking::Bytes(7),
    )
}

/// The sidecar could not ask again: the one retry in flight is answered `errored`.
fn no_retry(host: &mut Host) {
    let calls = callouts_to(host, "/v1/retry");
    assert_eq!(calls.len(), 1, "asked again");
    let errored = r#"{"outcome": "errored", "reason": "the upstream could not be reached"}"#;
    host.answer_callout(calls[0].token, &[(":status", "200")], errored.as_bytes())
        .unwrap();
}

/// The seed policy with `no-iban` recovering or not.
fn seed(recover: bool) -> String {
    SEED.replace(r#""recover": true"#, &format!(r#""recover": {recover}"#))
}

#[test]
fn a_clean_turn_passes_as_it_came() {
    for platform in PLATFORMS {
        for stream_it in [false, true] {
            let mut host = livecheck(SEED);
            let s = ask(&mut host, platform, CLEAN_QUESTION, stream_it);
            let upstream = host.upstream_received(s);
            assert_eq!(
                upstream.body_text(),
                request(CLEAN_QUESTION),
                "{platform:?}"
            );
            assert_eq!(upstream.header("accept-encoding"), Some("identity"));
            let (body, content_type) = if stream_it {
                (
                    stream(&["Your order ", "ships tomorrow."]),
                    "text/event-stream",
                )
            } else {
                (answer(CLEAN_ANSWER), "application/json")
            };
            send_answer(
                &mut host,
                s,
                &[("content-type", content_type)],
                &body,
                Chunking::Bytes(7),
            );
            let caller = host.caller_received(s);
            assert_eq!(caller.status(), Some(200));
            assert!(caller.header("x-core-check").is_none(), "{platform:?}");
            assert_eq!(caller.body_text(), body, "{platform:?} stream {stream_it}");
        }
    }
}

#[test]
fn a_forbidden_question_is_refused_as_a_blocked_prompt_before_any_model_is_asked() {
    for platform in PLATFORMS {
        for stream_it in [false, true] {
            let mut host = livecheck(SEED);
            let s = ask(&mut host, platform, FORBIDDEN_QUESTION, stream_it);
            assert!(question_held(&host, s), "{platform:?}");
            let caller = host.caller_received(s);
            assert_eq!(caller.status(), Some(200));
            assert!(caller
                .header("x-core-check")
                .unwrap()
                .contains("no-passwords"));
            let body = if stream_it {
                assert_eq!(caller.header("content-type"), Some("text/event-stream"));
                let (mut chunks, text) = read_chunks(&caller.body_text());
                assert_eq!(chunks.len(), 1, "one chunk, the whole refusal");
                assert!(text.contains("Never share a password"));
                chunks.pop().unwrap()
            } else {
                json(caller.body_text().as_bytes())
            };
            assert!(text_of(&body).contains("Never share a password"));
            assert_eq!(body["candidates"][0]["finishReason"], "SAFETY");
            assert_eq!(body["promptFeedback"]["blockReason"], "SAFETY");
            assert_eq!(body["modelVersion"], MODEL, "the path names the model");
        }
    }
}

#[test]
fn a_forbidden_answer_is_withheld_without_a_retry() {
    // `no-iban` asks for recovery or not: withheld at once, or when the retry has no answer.
    for recover in [false, true] {
        for platform in PLATFORMS {
            let mut host = livecheck(&seed(recover));
            let s = ask(&mut host, platform, CLEAN_QUESTION, false);
            send_answer(
                &mut host,
                s,
                &[("content-type", "application/json")],
                &answer(FORBIDDEN_ANSWER),
                Chunking::Bytes(7),
            );
            if recover {
                no_retry(&mut host);
            }
            assert!(callouts_to(&host, "/v1/retry").is_empty(), "no retry");
            let caller = host.caller_received(s);
            assert!(!caller.body_text().contains("NL91"), "{platform:?}");
            let body = json(caller.body_text().as_bytes());
            assert_eq!(body["candidates"][0]["finishReason"], "SAFETY");
            assert!(text_of(&body).starts_with("I cannot help with that."));
            assert_eq!(body["responseId"], "resp-g1", "the answer's id kept");
            assert_eq!(body["usageMetadata"]["totalTokenCount"], 14);
            assert_eq!(host.metric("livecheck.orders.no-iban.failed"), Some(1));
        }
    }
}

#[test]
fn a_streamed_answer_is_cut_where_the_match_starts_under_every_chunking() {
    let upstream = stream(&["Pay to NL9", "1ABNA04", "17164300", " today."]);
    for platform in PLATFORMS {
        for chunking in CHUNKINGS.into_iter().chain([Chunking::Bytes(5)]) {
            let mut host = livecheck(&seed(false));
            let s = ask(&mut host, platform, CLEAN_QUESTION, true);
            send_answer(
                &mut host,
                s,
                &[("content-type", "text/event-stream")],
                &upstream,
                chunking,
            );
            let caller = host.caller_received(s);
            let body = caller.body_text();
            assert!(!body.contains("NL9"), "{platform:?} {chunking:?}: {body}");
            let (chunks, text) = read_chunks(&body);
            assert_eq!(text, "Pay to ", "{platform:?} {chunking:?}");
            let last = chunks.last().unwrap();
            assert_eq!(
                last["candidates"][0]["finishReason"], "SAFETY",
                "{chunking:?}"
            );
            assert_eq!(last["responseId"], "resp-g1");
            assert!(last["usageMetadata"]["promptTokenCount"].is_u64());
            let finishes = chunks
                .iter()
                .filter(|c| c["candidates"][0].get("finishReason").is_some())
                .count();
            assert_eq!(finishes, 1, "{chunking:?}: the candidate finishes once");
            assert_eq!(host.metric("livecheck.orders.no-iban.failed"), Some(1));
        }
    }
}

#[test]
fn a_held_streamed_answer_that_fails_ends_as_the_reply_stopped_for_safety() {
    // `no-iban` asks for recovery: the round is held whole, and when the retry has no answer the
    // caller gets the reply instead of anything of the answer.
    for chunking in CHUNKINGS {
        let mut host = livecheck(SEED);
        let s = ask(&mut host, Platform::Gemini, CLEAN_QUESTION, true);
        send_answer(
            &mut host,
            s,
            &[("content-type", "text/event-stream")],
            &stream(&["Pay to NL9", "1ABNA04", "17164300", " today."]),
            chunking,
        );
        no_retry(&mut host);
        let body = host.caller_received(s).body_text();
        assert!(
            !body.contains("NL9") && !body.contains("Pay to"),
            "{chunking:?}: {body}"
        );
        let (chunks, text) = read_chunks(&body);
        assert!(
            text.starts_with("I cannot help with that."),
            "{chunking:?}: {text}"
        );
        let last = chunks.last().unwrap();
        assert_eq!(last["candidates"][0]["finishReason"], "SAFETY");
        assert_eq!(host.metric("livecheck.orders.no-iban.failed"), Some(1));
    }
}

#[test]
fn a_judged_check_never_gets_the_callers_google_credentials() {
    let config = r#"{"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {
        "blocked_reply": "Not allowed.",
        "live_checks": [{"name": "polite", "stage": "input", "kind": "polite_tone"}]}}}}}"#;
    for platform in PLATFORMS {
        let mut host = livecheck(config);
        let mut headers = platform.headers();
        headers.push(("authorization", "Bearer ya29.google-token"));
        headers.push(("x-api-key", "not-the-judges"));
        let s = send_request(
            &mut host,
            &platform.path(false),
            &headers,
            &request(CLEAN_QUESTION),
            Chunking::Whole,
        );
        let calls = callouts_to(&host, "/v1/judge");
        assert_eq!(calls.len(), 1);
        assert_eq!(json(&calls[0].body)["judge_model"], MODEL);
        for header in ["authorization", "x-api-key", "x-goog-api-key"] {
            assert_eq!(calls[0].header(header), None, "{platform:?}: {header}");
        }
        let body = String::from_utf8_lossy(&calls[0].body);
        assert!(
            !body.contains("AIza") && !body.contains("ya29"),
            "{platform:?}"
        );
        let verdict = r#"{"outcome": "passed", "score": 0.9, "reason": "ok"}"#;
        host.answer_callout(calls[0].token, &[(":status", "200")], verdict.as_bytes())
            .unwrap();
        assert!(!question_held(&host, s), "{platform:?}: passed, sent on");
    }
}

const TOOLS: &str = r#"{"default_agent": "mail", "agents": {"mail": {"published": "1", "versions": {"1": {
    "blocked_reply": "Not allowed.",
    "allowed_tools": ["send_email", "lookup_*"]}}}}}"#;

#[test]
fn a_function_call_not_allowed_is_denied_streamed_or_not() {
    let call = json!({"functionCall": {"name": "drop_tables", "args": {"table": "orders"}}});
    for stream_it in [false, true] {
        for chunking in [Chunking::Bytes(7), Chunking::Whole] {
            let mut host = livecheck(TOOLS);
            let s = ask(&mut host, Platform::Gemini, CLEAN_QUESTION, stream_it);
            let body = if stream_it {
                let first = answer_of(json!([{"text": "Dropping it."}]), "STOP");
                let mut first = first;
                first["candidates"][0]
                    .as_object_mut()
                    .unwrap()
                    .remove("finishReason");
                let last = answer_of(json!([call]), "STOP");
                format!("data: {first}\n\ndata: {last}\n\n")
            } else {
                answer_of(json!([{"text": "Dropping it."}, call]), "STOP").to_string()
            };
            let content_type = if stream_it {
                "text/event-stream"
            } else {
                "application/json"
            };
            send_answer(
                &mut host,
                s,
                &[("content-type", content_type)],
                &body,
                chunking,
            );
            let got = host.caller_received(s).body_text();
            assert!(
                !got.contains("drop_tables"),
                "{stream_it} {chunking:?}: {got}"
            );
            assert_eq!(
                host.metric("livecheck.mail.allowed_tools.failed"),
                Some(1),
                "{stream_it} {chunking:?}"
            );
            let text = if stream_it {
                let (chunks, text) = read_chunks(&got);
                let last = chunks.last().unwrap();
                assert_eq!(last["candidates"][0]["finishReason"], "SAFETY");
                text
            } else {
                text_of(&json(got.as_bytes()))
            };
            assert!(
                text.contains("The tool is not one this agent may call."),
                "{stream_it} {chunking:?}: {text}"
            );
        }
    }
}

/// A Gemini turn is recorded as any other: its results reach the sidecar without the turn's text
/// or the caller's key, whether in `x-goog-api-key` or in the path's `?key=`.
#[test]
fn a_gemini_turn_reports_its_results_without_its_key() {
    let path = format!("{GEMINI_API}:generateContent?key={KEY}");
    for headers in [vec![("x-goog-api-key", KEY)], vec![]] {
        let mut host = livecheck(&seed(true));
        let s = send_request(
            &mut host,
            &path,
            &headers,
            &request(CLEAN_QUESTION),
            Chunking::Whole,
        );
        send_answer(
            &mut host,
            s,
            &[("content-type", "application/json")],
            &answer(FORBIDDEN_ANSWER),
            Chunking::Whole,
        );
        no_retry(&mut host);
        host.finish_stream(s).unwrap();
        host.advance_time(std::time::Duration::from_millis(250));
        let sent = report_callouts(&host);
        assert_eq!(sent.len(), 1);
        let report = report_of(&sent[0]);
        let results = report["results"].as_array().unwrap();
        let iban = results.iter().find(|r| r["name"] == "no-iban").unwrap();
        assert_eq!(iban["outcome"], "failed");
        let body = String::from_utf8_lossy(&sent[0].body);
        for secret in ["NL91", "AIza", "order 17"] {
            assert!(!body.contains(secret), "{secret}");
        }
        assert!(sent[0].headers.iter().all(|(_, v)| !v.contains("AIza")));
    }
}

/// The opt-in length frame (`stream_frame_bytes`) pads a Gemini stream with blank lines alone,
/// clean or cut: Google's SDKs read every other line as data (google-genai raises
/// `UnknownApiResponseError` on an SSE comment line; the JavaScript SDK fails a stream that ends
/// with anything but whitespace after its last event).
#[test]
fn a_framed_stream_is_padded_with_blank_lines_alone_clean_or_cut() {
    const FRAME: usize = 64 * 1024;
    let config = seed(false).replacen('{', &format!("{{\"stream_frame_bytes\": {FRAME}, "), 1);
    let clean: &[&str] = &["Your order ", "ships tomorrow."];
    let forbidden: &[&str] = &["Pay to NL9", "1ABNA04", "17164300", " today."];
    for platform in PLATFORMS {
        for (pieces, said) in [
            (clean, "Your order ships tomorrow."),
            (forbidden, "Pay to "),
        ] {
            let mut host = livecheck(&config);
            let s = ask(&mut host, platform, CLEAN_QUESTION, true);
            send_answer(
                &mut host,
                s,
                &[("content-type", "text/event-stream")],
                &stream(pieces),
                Chunking::Bytes(7),
            );
            let caller = host.caller_received(s);
            assert_eq!(
                caller.header("content-length"),
                Some(FRAME.to_string().as_str())
            );
            let body = caller.body_text();
            assert_eq!(body.len(), FRAME, "{platform:?} {said:?}");
            let (_, text) = read_chunks(&body);
            assert_eq!(text, said, "{platform:?}");
            let events_end = body.rfind("}\n\n").unwrap() + "}\n\n".len();
            assert!(
                body[events_end..].bytes().all(|b| b == b'\n'),
                "{platform:?} {said:?}: the padding is blank lines alone"
            );
        }
    }
}
