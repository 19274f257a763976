//! `POST /v1/retry` for Google Gemini and Amazon Bedrock Converse: a Gemini turn is asked again at
//! `:generateContent` with the caller's key (`x-goog-api-key`, or `?key=` in the path) or Google
//! token as it came, the rules one more part of its system instruction; a Converse turn, signed by
//! the caller, only with the upstream's own key (`api_key_env`, Bearer) at `/converse`, never
//! with the caller's signature, and `errored` with nothing sent without one.

// Test helpers outside #[test] functions may unwrap too (clippy.toml covers only the tests).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
// Only some of the double's replies are used here.
#[allow(dead_code)]
#[path = "common/upstream.rs"]
mod upstream;

use common::Judge;
use livecheck_wire::{Api, RetryAnswer, RetryOutcome, RetryRequest, RETRY_PATH};
use serde_json::{json, Value};
use upstream::{Reply, UpstreamDouble};

const GEMINI: &str = "generativelanguage.googleapis.com";
const VERTEX: &str = "us-central1-aiplatform.googleapis.com";
const BEDROCK: &str = "bedrock-runtime.us-east-1.amazonaws.com";
const GEMINI_MODEL: &str = "/v1beta/models/gemini-2.5-flash";
const VERTEX_MODEL: &str =
    "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-flash";
const CONVERSE_MODEL: &str = "/model/us.anthropic.claude-3-5-sonnet-20241022-v2%3A0";
const KEY: &str = "AIza-caller-key";
const RULE: &str = "Never say the secret word.";
const SIGNATURE: &str = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261207/us-east-1/bedrock/aws4_request, SignedHeaders=host;x-amz-date, Signature=abc";
const GEMINI_ANSWER: &str = r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"Sure."}]},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":2,"totalTokenCount":11},"modelVersion":"gemini-2.5-flash","responseId":"r2"}"#;
const CONVERSE_ANSWER: &str = r#"{"output":{"message":{"role":"assistant","content":[{"text":"Sure."}]}},"stopReason":"end_turn","usage":{"inputTokens":9,"outputTokens":2,"totalTokens":11},"metrics":{"latencyMs":120}}"#;

fn config(base_url: &str, own_keys: bool) -> String {
    let gemini_key = if own_keys {
        "api_key_env = \"GEMINI_KEY\""
    } else {
        ""
    };
    let bedrock_key = if own_keys {
        "api_key_env = \"BEDROCK_KEY\""
    } else {
        ""
    };
    format!(
        r#"
        [[backends]]
        name = "unused"
        api = "openai"
        base_url = "http://127.0.0.1:9"
        models = ["*"]

        [[upstreams]]
        name = "gemini"
        authority = "{GEMINI}"
        base_url = "{base_url}"
        {gemini_key}

        [[upstreams]]
        name = "vertex"
        authority = "{VERTEX}"
        base_url = "{base_url}"

        [[upstreams]]
        name = "bedrock"
        authority = "{BEDROCK}"
        base_url = "{base_url}"
        {bedrock_key}
        "#
    )
}

fn env(var: &str) -> Option<String> {
    match var {
        "BEDROCK_KEY" => Some("bedrock-api-key-1".to_owned()),
        "GEMINI_KEY" => Some("AIza-sidecar-key".to_owned()),
        _ => None,
    }
}

async fn judge(upstream: &UpstreamDouble, own_keys: bool) -> Judge {
    Judge::start_with_env(&config(&upstream.base_url(), own_keys), &env).await
}

fn request(api: Api, authority: &str, path: &str, original: &Value) -> RetryRequest {
    RetryRequest {
        api,
        authority: authority.into(),
        path: path.into(),
        request: original.to_string(),
        rules: vec![RULE.into()],
        attempt: 2,
        keep_tools: false,
    }
}

async fn retry(judge: &Judge, req: &RetryRequest, headers: &[(&str, &str)]) -> RetryAnswer {
    let (status, body) = judge
        .post_to(RETRY_PATH, &serde_json::to_string(req).unwrap(), headers)
        .await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_value(body).unwrap()
}

fn gemini_original() -> Value {
    json!({"contents": [{"role": "user", "parts": [{"text": "Hi"}]}],
           "systemInstruction": {"parts": [{"text": "Be kind."}]},
           "tools": [{"functionDeclarations": [{"name": "send_email"}]}]})
}

fn converse_original() -> Value {
    json!({"messages": [{"role": "user", "content": [{"text": "Hi"}]}],
           "system": [{"text": "Be kind."}], "inferenceConfig": {"maxTokens": 64},
           "toolConfig": {"tools": [{"toolSpec": {"name": "send_email",
                                     "inputSchema": {"json": {"type": "object"}}}}]}})
}

/// The system instruction's texts, the rules' instruction last.
fn system_texts(body: &Value, field: &str) -> Vec<String> {
    body[field]
        .as_array()
        .or_else(|| body[field]["parts"].as_array())
        .unwrap()
        .iter()
        .map(|p| p["text"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_streamed_gemini_turn_is_asked_again_at_generate_content_with_the_callers_key() {
    let upstream = UpstreamDouble::start(Reply::Ok(GEMINI_ANSWER.into())).await;
    let judge = judge(&upstream, false).await;
    let path = format!("{GEMINI_MODEL}:streamGenerateContent?alt=sse");
    let answer = retry(
        &judge,
        &request(Api::Gemini, GEMINI, &path, &gemini_original()),
        &[("x-goog-api-key", KEY)],
    )
    .await;
    assert_eq!(answer.outcome, RetryOutcome::Answered, "{answer:?}");
    assert_eq!(answer.body.as_deref(), Some(GEMINI_ANSWER));
    let seen = upstream.only_request();
    assert_eq!(seen.uri, format!("{GEMINI_MODEL}:generateContent"));
    assert_eq!(seen.header("x-goog-api-key"), Some(KEY));
    assert_eq!(seen.header("authorization"), None);
    let texts = system_texts(&seen.body, "systemInstruction");
    assert_eq!(texts[0], "Be kind.");
    assert!(texts[1].contains(RULE), "{texts:?}");
    assert!(seen.body.get("tools").is_none(), "no tool it could call");
    assert_eq!(seen.body["contents"], gemini_original()["contents"]);
}

#[tokio::test]
async fn a_gemini_key_in_the_query_and_a_vertex_token_are_reused_as_they_came() {
    let upstream = UpstreamDouble::start(Reply::Ok(GEMINI_ANSWER.into())).await;
    let judge = judge(&upstream, false).await;
    let path = format!("{GEMINI_MODEL}:streamGenerateContent?alt=sse&key={KEY}");
    let answer = retry(
        &judge,
        &request(Api::Gemini, GEMINI, &path, &gemini_original()),
        &[],
    )
    .await;
    assert_eq!(answer.outcome, RetryOutcome::Answered, "{answer:?}");
    let path = format!("{VERTEX_MODEL}:generateContent");
    let answer = retry(
        &judge,
        &request(Api::Gemini, VERTEX, &path, &gemini_original()),
        &[("authorization", "Bearer ya29.google-token")],
    )
    .await;
    assert_eq!(answer.outcome, RetryOutcome::Answered, "{answer:?}");
    let seen = upstream.received();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen[0].uri,
        format!("{GEMINI_MODEL}:generateContent?key={KEY}")
    );
    assert_eq!(seen[1].uri, path);
    assert_eq!(
        seen[1].header("authorization"),
        Some("Bearer ya29.google-token")
    );
}

#[tokio::test]
async fn a_gemini_upstreams_own_key_goes_as_its_api_key_in_place_of_the_callers() {
    let upstream = UpstreamDouble::start(Reply::Ok(GEMINI_ANSWER.into())).await;
    let judge = judge(&upstream, true).await;
    let path = format!("{GEMINI_MODEL}:generateContent?key={KEY}");
    let answer = retry(
        &judge,
        &request(Api::Gemini, GEMINI, &path, &gemini_original()),
        &[("x-goog-api-key", KEY)],
    )
    .await;
    assert_eq!(answer.outcome, RetryOutcome::Answered, "{answer:?}");
    let seen = upstream.only_request();
    assert_eq!(seen.uri, format!("{GEMINI_MODEL}:generateContent"));
    assert_eq!(seen.header("x-goog-api-key"), Some("AIza-sidecar-key"));
    assert_eq!(seen.header("authorization"), None);
}

#[tokio::test]
async fn a_gemini_error_answer_is_errored() {
    let upstream = UpstreamDouble::start(Reply::Status(
        400,
        r#"{"error":{"code":400,"message":"bad","status":"INVALID_ARGUMENT"}}"#.into(),
    ))
    .await;
    let judge = judge(&upstream, false).await;
    let path = format!("{GEMINI_MODEL}:generateContent");
    let answer = retry(
        &judge,
        &request(Api::Gemini, GEMINI, &path, &gemini_original()),
        &[("x-goog-api-key", KEY)],
    )
    .await;
    assert_eq!(answer.outcome, RetryOutcome::Errored);
    assert_eq!(answer.body, None);
}

#[tokio::test]
async fn a_converse_turn_without_the_upstreams_own_key_is_errored_and_nothing_is_sent() {
    let upstream = UpstreamDouble::start(Reply::Ok(CONVERSE_ANSWER.into())).await;
    let judge = judge(&upstream, false).await;
    for operation in ["converse", "converse-stream"] {
        let path = format!("{CONVERSE_MODEL}/{operation}");
        let answer = retry(
            &judge,
            &request(Api::Converse, BEDROCK, &path, &converse_original()),
            &[("authorization", SIGNATURE)],
        )
        .await;
        assert_eq!(answer.outcome, RetryOutcome::Errored);
        assert_eq!(answer.body, None);
        assert_eq!(
            answer.reason.as_deref(),
            Some("the caller signed the request, and the upstream has no key of its own")
        );
    }
    assert!(upstream.received().is_empty(), "nothing was sent");
}

#[tokio::test]
async fn a_streamed_converse_turn_is_asked_again_at_converse_with_the_upstreams_own_key() {
    let upstream = UpstreamDouble::start(Reply::Ok(CONVERSE_ANSWER.into())).await;
    let judge = judge(&upstream, true).await;
    let path = format!("{CONVERSE_MODEL}/converse-stream");
    let answer = retry(
        &judge,
        &request(Api::Converse, BEDROCK, &path, &converse_original()),
        &[
            ("authorization", SIGNATURE),
            ("x-amz-date", "20261207T120000Z"),
        ],
    )
    .await;
    assert_eq!(answer.outcome, RetryOutcome::Answered, "{answer:?}");
    assert_eq!(answer.body.as_deref(), Some(CONVERSE_ANSWER));
    let seen = upstream.only_request();
    assert_eq!(seen.uri, format!("{CONVERSE_MODEL}/converse"));
    assert_eq!(
        seen.header("authorization"),
        Some("Bearer bedrock-api-key-1")
    );
    assert_eq!(seen.header("x-amz-date"), None);
    let texts = system_texts(&seen.body, "system");
    assert_eq!(texts[0], "Be kind.");
    assert!(texts[1].contains(RULE), "{texts:?}");
    assert!(
        seen.body.get("toolConfig").is_none(),
        "no tool it could call"
    );
    assert_eq!(seen.body["inferenceConfig"]["maxTokens"], 64);
}

#[tokio::test]
async fn a_converse_turn_to_a_stored_prompt_is_not_asked_again() {
    let upstream = UpstreamDouble::start(Reply::Ok(CONVERSE_ANSWER.into())).await;
    let judge = judge(&upstream, true).await;
    let path =
        "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Aprompt%2FPROMPT12345%3A1/converse";
    let original = json!({"promptVariables": {"topic": {"text": "orders"}}});
    let answer = retry(
        &judge,
        &request(Api::Converse, BEDROCK, path, &original),
        &[],
    )
    .await;
    assert_eq!(answer.outcome, RetryOutcome::Errored);
    assert_eq!(
        answer.reason.as_deref(),
        Some("a request to a stored prompt cannot carry the instruction")
    );
    assert!(upstream.received().is_empty(), "nothing was sent");
}
