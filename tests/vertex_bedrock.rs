//! Anthropic's Messages API on Google Vertex AI (`…/models/{model}:rawPredict`,
//! `:streamRawPredict`) and on Amazon Bedrock (`/model/{model}/invoke`) through the built `.wasm`
//! in the harness: the same checks as on `/v1/messages`, the model the path names, the platform's
//! body rules (a string `anthropic_version`; Bedrock's `invoke` never streams), and recovery that
//! hands the sidecar no Bedrock signature and withholds the answer when the retry cannot be sent.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::fixtures::*;
use common::*;
use livecheck_harness::{Host, StreamId};
use serde_json::{json, Value};

const VERTEX_MODEL: &str =
    "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4@20250514";
const BEDROCK: &str = "/model/anthropic.claude-3-5-sonnet-20240620-v1:0/invoke";
const SIGNATURE: &str = "AWS4-HMAC-SHA256 Credential=AKID/20261207/us-east-1/bedrock/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature=abc";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Platform {
    Vertex,
    Bedrock,
}

const PLATFORMS: [Platform; 2] = [Platform::Vertex, Platform::Bedrock];

impl Platform {
    fn path(self, stream: bool) -> String {
        match (self, stream) {
            (Platform::Vertex, false) => format!("{VERTEX_MODEL}:rawPredict"),
            (Platform::Vertex, true) => format!("{VERTEX_MODEL}:streamRawPredict"),
            (Platform::Bedrock, _) => BEDROCK.to_owned(),
        }
    }

    fn model(self) -> &'static str {
        match self {
            Platform::Vertex => "claude-sonnet-4@20250514",
            Platform::Bedrock => "anthropic.claude-3-5-sonnet-20240620-v1:0",
        }
    }

    /// The request body as the SDKs send it: the Messages body less `model`, with
    /// `anthropic_version`; Bedrock's without `stream`.
    fn request(self, question: &str, stream: bool) -> String {
        let mut body: Value =
            serde_json::from_str(&Vendor::Anthropic.request(question, stream)).unwrap();
        let body_obj = body.as_object_mut().unwrap();
        body_obj.remove("model");
        match self {
            Platform::Vertex => body["anthropic_version"] = json!("vertex-2023-10-16"),
            Platform::Bedrock => {
                body_obj.remove("stream");
                body["anthropic_version"] = json!("bedrock-2023-05-31");
            }
        }
        body.to_string()
    }

    /// The caller's credentials: a Google token, or a SigV4 signature.
    fn headers(self) -> Vec<(&'static str, &'static str)> {
        match self {
            Platform::Vertex => vec![("authorization", "Bearer ya29.google-token")],
            Platform::Bedrock => vec![
                ("authorization", SIGNATURE),
                ("x-amz-date", "20261207T120000Z"),
                ("x-amz-content-sha256", "e3b0c442"),
            ],
        }
    }
}

fn ask(host: &mut Host, platform: Platform, question: &str, stream: bool) -> StreamId {
    send_request(
        host,
        &platform.path(stream),
        &platform.headers(),
        &platform.request(question, stream),
        Chunking::Bytes(7),
    )
}

fn answer(host: &mut Host, s: StreamId, text: &str) {
    send_answer(
        host,
        s,
        &[("content-type", "application/json")],
        &Vendor::Anthropic.answer(text),
        Chunking::Bytes(7),
    );
}

/// The seed policy with `no-iban` recovering or not.
fn seed(recover: bool) -> String {
    SEED.replace(r#""recover": true"#, &format!(r#""recover": {recover}"#))
}

#[test]
fn a_clean_turn_passes_as_it_came() {
    for platform in PLATFORMS {
        let mut host = livecheck(SEED);
        let s = ask(&mut host, platform, CLEAN_QUESTION, false);
        let upstream = host.upstream_received(s);
        assert_eq!(
            upstream.body_text(),
            platform.request(CLEAN_QUESTION, false),
            "{platform:?}: the question goes as it came"
        );
        answer(&mut host, s, CLEAN_ANSWER);
        let caller = host.caller_received(s);
        assert_eq!(caller.status(), Some(200));
        assert!(caller.header("x-core-check").is_none());
        assert_eq!(caller.body_text(), Vendor::Anthropic.answer(CLEAN_ANSWER));
    }
}

#[test]
fn a_forbidden_question_is_refused_before_any_model_is_asked() {
    for platform in PLATFORMS {
        let mut host = livecheck(SEED);
        let s = ask(&mut host, platform, FORBIDDEN_QUESTION, false);
        assert!(question_held(&host, s), "{platform:?}");
        let caller = host.caller_received(s);
        assert_eq!(caller.status(), Some(200));
        let body = json(caller.body_text().as_bytes());
        assert_eq!(body["stop_reason"], "refusal", "{platform:?}");
        assert!(Vendor::Anthropic
            .text_of(&body)
            .contains("Never share a password"));
        assert_eq!(body["model"], platform.model(), "the path names the model");
        assert!(caller
            .header("x-core-check")
            .unwrap()
            .contains("no-passwords"));
    }
}

#[test]
fn a_forbidden_answer_is_withheld() {
    for platform in PLATFORMS {
        let mut host = livecheck(&seed(false));
        let s = ask(&mut host, platform, CLEAN_QUESTION, false);
        answer(&mut host, s, FORBIDDEN_ANSWER);
        let caller = host.caller_received(s);
        assert!(!caller.body_text().contains("NL91"), "{platform:?}");
        let body = json(caller.body_text().as_bytes());
        assert_eq!(body["stop_reason"], "refusal");
        assert_eq!(host.metric("livecheck.orders.no-iban.failed"), Some(1));
    }
}

#[test]
fn a_streamed_vertex_answer_is_cut_where_the_match_starts() {
    let mut host = livecheck(&seed(false));
    let s = ask(&mut host, Platform::Vertex, CLEAN_QUESTION, true);
    let events = stream(Vendor::Anthropic, &["Pay to NL91AB", "NA0417164300 today."]);
    send_answer(
        &mut host,
        s,
        &[("content-type", "text/event-stream")],
        &events.concat(),
        Chunking::Bytes(5),
    );
    let caller = host.caller_received(s);
    let read = read_stream(Vendor::Anthropic, &caller.body_text());
    assert_eq!(read.text, "Pay to ");
    assert!(!caller.body_text().contains("NL91"));
    assert_eq!(host.metric("livecheck.orders.no-iban.failed"), Some(1));
}

#[test]
fn a_platform_body_the_filter_cannot_read_is_refused_with_400() {
    let cases = [
        // Bedrock's invoke never streams: a body asking for a stream is not misread.
        (
            BEDROCK.to_owned(),
            json!({"anthropic_version": "bedrock-2023-05-31", "stream": true, "max_tokens": 9,
                   "messages": [{"role": "user", "content": CLEAN_QUESTION}]}),
            "stream must be false on Bedrock's invoke, which never streams",
        ),
        (
            Platform::Vertex.path(false),
            json!({"max_tokens": 9, "messages": [{"role": "user", "content": CLEAN_QUESTION}]}),
            "anthropic_version must be a string",
        ),
        (
            BEDROCK.to_owned(),
            json!({"anthropic_version": 1, "messages": []}),
            "anthropic_version must be a string",
        ),
    ];
    for (path, body, message) in cases {
        let mut host = livecheck(SEED);
        let s = send_request(&mut host, &path, &[], &body.to_string(), Chunking::Whole);
        assert!(question_held(&host, s), "{path}");
        let caller = host.caller_received(s);
        assert_eq!(caller.status(), Some(400), "{path}");
        let body = json(caller.body_text().as_bytes());
        if path.starts_with("/model/") {
            // Bedrock's own error shape: what its SDKs read from a ValidationException.
            assert_eq!(body, json!({ "message": message }));
            assert_eq!(
                caller.header("x-amzn-errortype"),
                Some("ValidationException")
            );
        } else {
            assert_eq!(body["type"], "error");
            assert_eq!(body["error"]["message"], message);
        }
    }
}

#[test]
fn a_judged_check_judges_with_the_model_the_path_names() {
    let config = r#"{"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {
        "blocked_reply": "Not allowed.",
        "live_checks": [{"name": "polite", "stage": "input", "kind": "polite_tone"}]}}}}}"#;
    for platform in PLATFORMS {
        let mut host = livecheck(config);
        let s = ask(&mut host, platform, CLEAN_QUESTION, false);
        let calls = callouts_to(&host, "/v1/judge");
        assert_eq!(calls.len(), 1);
        assert_eq!(json(&calls[0].body)["judge_model"], platform.model());
        assert_eq!(
            calls[0].header("authorization"),
            None,
            "the platform's credentials are not the judge's"
        );
        let verdict = r#"{"outcome": "passed", "score": 0.9, "reason": "ok"}"#;
        host.answer_callout(calls[0].token, &[(":status", "200")], verdict.as_bytes())
            .unwrap();
        assert!(!question_held(&host, s), "{platform:?}: passed, sent on");
    }
}

#[test]
fn a_vertex_retry_carries_the_callers_token() {
    let mut host = livecheck(SEED);
    let s = ask(&mut host, Platform::Vertex, CLEAN_QUESTION, true);
    let events = stream(Vendor::Anthropic, &[FORBIDDEN_ANSWER]);
    send_answer(
        &mut host,
        s,
        &[("content-type", "text/event-stream")],
        &events.concat(),
        Chunking::Whole,
    );
    let calls = callouts_to(&host, "/v1/retry");
    assert_eq!(calls.len(), 1);
    assert_eq!(
        calls[0].header("authorization"),
        Some("Bearer ya29.google-token")
    );
    let retry = json(&calls[0].body);
    assert_eq!(retry["path"], Platform::Vertex.path(true));
    let answered = json!({"outcome": "answered", "body": Vendor::Anthropic.answer(CLEAN_ANSWER)});
    host.answer_callout(
        calls[0].token,
        &[(":status", "200")],
        answered.to_string().as_bytes(),
    )
    .unwrap();
    let caller = host.caller_received(s);
    let read = read_stream(Vendor::Anthropic, &caller.body_text());
    assert_eq!(read.text, CLEAN_ANSWER, "the recovered answer, as events");
    assert!(!caller.body_text().contains("NL91"));
}

/// A Bedrock request is signed by the caller: the retry callout carries no signature, and when
/// the sidecar cannot ask again (no key of its own) the answer is withheld exactly as without
/// `recover`.
#[test]
fn a_bedrock_answer_the_sidecar_cannot_ask_again_is_withheld_as_without_recover() {
    let mut without = livecheck(&seed(false));
    let s = ask(&mut without, Platform::Bedrock, CLEAN_QUESTION, false);
    answer(&mut without, s, FORBIDDEN_ANSWER);
    let withheld = without.caller_received(s);

    let mut host = livecheck(SEED);
    let s = ask(&mut host, Platform::Bedrock, CLEAN_QUESTION, false);
    answer(&mut host, s, FORBIDDEN_ANSWER);
    let calls = callouts_to(&host, "/v1/retry");
    assert_eq!(calls.len(), 1);
    assert_eq!(
        calls[0].header("authorization"),
        None,
        "the caller's signature never leaves"
    );
    assert!(!String::from_utf8_lossy(&calls[0].body).contains("AWS4-HMAC"));
    assert!(answer_held(&host, s));
    let errored = json!({"outcome": "errored",
        "reason": "the caller signed the request, and the upstream has no key of its own"});
    host.answer_callout(
        calls[0].token,
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
    assert_eq!(got["stop_reason"], "refusal");
    assert_eq!(got["content"], want["content"]);
    assert_eq!(got["stop_reason"], want["stop_reason"]);
}

/// SigV4 signs the headers it lists: one the caller signed reaches Bedrock as signed, so the
/// filter does not ask for an uncompressed answer there; a compressed answer is then withheld as
/// unreadable, never passed unread.
#[test]
fn a_header_the_caller_signed_reaches_bedrock_as_signed() {
    let signed = "AWS4-HMAC-SHA256 Credential=AKID/20261207/us-east-1/bedrock/aws4_request, SignedHeaders=accept-encoding;content-type;host;x-amz-date, Signature=abc";
    let mut host = livecheck(SEED);
    let s = send_request(
        &mut host,
        BEDROCK,
        &[
            ("authorization", signed),
            ("accept-encoding", "gzip, deflate"),
        ],
        &Platform::Bedrock.request(CLEAN_QUESTION, false),
        Chunking::Whole,
    );
    let upstream = host.upstream_received(s);
    assert_eq!(upstream.header("accept-encoding"), Some("gzip, deflate"));
    assert_eq!(upstream.header("authorization"), Some(signed));
    send_answer(
        &mut host,
        s,
        &[
            ("content-type", "application/json"),
            ("content-encoding", "gzip"),
        ],
        "\u{1f}compressed",
        Chunking::Whole,
    );
    let caller = host.caller_received(s);
    assert!(!caller.body_text().contains("compressed"), "withheld");

    // Unsigned, it is asked for as identity, as on every other path.
    for (platform, auth) in [
        (Platform::Bedrock, SIGNATURE),
        (Platform::Vertex, "Bearer ya29.google-token"),
    ] {
        let mut host = livecheck(SEED);
        let s = send_request(
            &mut host,
            &platform.path(false),
            &[("authorization", auth), ("accept-encoding", "gzip")],
            &platform.request(CLEAN_QUESTION, false),
            Chunking::Whole,
        );
        assert_eq!(
            host.upstream_received(s).header("accept-encoding"),
            Some("identity"),
            "{platform:?}"
        );
    }
}

/// A platform turn is recorded as any other: its results reach the sidecar under the id the caller
/// got, without the turn's text or the platform's credentials.
#[test]
fn a_platform_turn_reports_its_results_without_its_credentials() {
    for platform in PLATFORMS {
        let mut host = livecheck(&seed(false));
        let s = ask(&mut host, platform, CLEAN_QUESTION, false);
        answer(&mut host, s, FORBIDDEN_ANSWER);
        let turn_id = host
            .caller_received(s)
            .header("x-core-response-id")
            .unwrap()
            .to_owned();
        host.finish_stream(s).unwrap();
        host.advance_time(std::time::Duration::from_millis(250));
        let sent = report_callouts(&host);
        assert_eq!(sent.len(), 1, "{platform:?}");
        let report = report_of(&sent[0]);
        assert_eq!(report["turn_id"], turn_id.as_str());
        let results = report["results"].as_array().unwrap();
        let iban = results.iter().find(|r| r["name"] == "no-iban").unwrap();
        assert_eq!(iban["outcome"], "failed");
        let body = String::from_utf8_lossy(&sent[0].body);
        for secret in ["NL91", "AWS4-HMAC", "ya29", "x-amz"] {
            assert!(!body.contains(secret), "{platform:?}: {secret}");
        }
        assert_eq!(sent[0].header("authorization"), None);
    }
}
