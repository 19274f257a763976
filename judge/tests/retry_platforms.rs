//! `POST /v1/retry` for the Messages API on Google Vertex AI and Amazon Bedrock: Vertex reuses the
//! caller's Google token and asks a streamed original again at `:rawPredict`; Bedrock's requests
//! are signed by the caller, so a retry goes only with the upstream's own key (`api_key_env`) and
//! never carries the caller's signature; without a key it is `errored` and nothing is sent.

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
use livecheck_judge::Settings;
use livecheck_wire::{Api, RetryAnswer, RetryOutcome, RetryRequest, RETRY_PATH};
use serde_json::{json, Value};
use upstream::{Reply, UpstreamDouble};

const VERTEX: &str = "us-east5-aiplatform.googleapis.com";
const BEDROCK: &str = "bedrock-runtime.us-east-1.amazonaws.com";
const VERTEX_MODEL: &str =
    "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4@20250514";
const BEDROCK_PATH: &str = "/model/anthropic.claude-3-5-sonnet-20240620-v1:0/invoke";
const ANSWER: &str = r#"{"id":"msg_retry","type":"message","role":"assistant","model":"claude-sonnet-4","content":[{"type":"text","text":"Sure."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":20,"output_tokens":8}}"#;
const SIGNATURE: &str = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261207/us-east-1/bedrock/aws4_request, SignedHeaders=host;x-amz-date, Signature=abc";

fn config(base_url: &str, bedrock_key_env: Option<&str>) -> String {
    let key = bedrock_key_env.map_or(String::new(), |v| format!("api_key_env = \"{v}\""));
    format!(
        r#"
        [[backends]]
        name = "unused"
        api = "openai"
        base_url = "http://127.0.0.1:9"
        models = ["*"]

        [[upstreams]]
        name = "vertex"
        authority = "{VERTEX}"
        base_url = "{base_url}"

        [[upstreams]]
        name = "bedrock"
        authority = "{BEDROCK}"
        base_url = "{base_url}"
        {key}
        "#
    )
}

fn env(var: &str) -> Option<String> {
    (var == "BEDROCK_KEY").then(|| "bedrock-api-key-1".to_owned())
}

fn request(authority: &str, path: &str, original: &Value) -> RetryRequest {
    RetryRequest {
        api: Api::AnthropicMessages,
        authority: authority.into(),
        path: path.into(),
        request: original.to_string(),
        rules: vec!["Never say the secret word.".into()],
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

fn bedrock_original() -> Value {
    json!({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64,
           "messages": [{"role": "user", "content": "Hi"}]})
}

#[tokio::test]
async fn a_streamed_vertex_turn_is_asked_again_at_raw_predict_with_the_callers_token() {
    let upstream = UpstreamDouble::start(Reply::Ok(ANSWER.into())).await;
    let judge = Judge::start(&config(&upstream.base_url(), None)).await;
    let original = json!({"anthropic_version": "vertex-2023-10-16", "max_tokens": 64,
        "stream": true, "messages": [{"role": "user", "content": "Hi"}]});
    let req = request(
        VERTEX,
        &format!("{VERTEX_MODEL}:streamRawPredict"),
        &original,
    );
    let answer = retry(
        &judge,
        &req,
        &[("authorization", "Bearer ya29.google-token")],
    )
    .await;
    assert_eq!(answer.outcome, RetryOutcome::Answered, "{answer:?}");
    assert_eq!(answer.body.as_deref(), Some(ANSWER));
    let seen = upstream.only_request();
    assert_eq!(seen.method, "POST");
    assert_eq!(seen.uri, format!("{VERTEX_MODEL}:rawPredict"));
    assert_eq!(
        seen.header("authorization"),
        Some("Bearer ya29.google-token")
    );
    assert_eq!(seen.body["anthropic_version"], "vertex-2023-10-16");
    assert!(seen.body.get("stream").is_none(), "{}", seen.body);
    assert!(seen.body.get("model").is_none(), "the path names the model");
}

#[tokio::test]
async fn a_bedrock_turn_without_the_upstreams_own_key_is_errored_and_nothing_is_sent() {
    let upstream = UpstreamDouble::start(Reply::Ok(ANSWER.into())).await;
    let judge = Judge::start(&config(&upstream.base_url(), None)).await;
    let answer = retry(
        &judge,
        &request(BEDROCK, BEDROCK_PATH, &bedrock_original()),
        &[("authorization", SIGNATURE)],
    )
    .await;
    assert_eq!(answer.outcome, RetryOutcome::Errored);
    assert_eq!(answer.body, None);
    assert_eq!(
        answer.reason.as_deref(),
        Some("the caller signed the request, and the upstream has no key of its own")
    );
    assert!(upstream.received().is_empty(), "nothing was sent");
}

#[tokio::test]
async fn a_bedrock_turn_is_asked_again_with_the_upstreams_own_key_never_the_signature() {
    let upstream = UpstreamDouble::start(Reply::Ok(ANSWER.into())).await;
    let judge =
        Judge::start_with_env(&config(&upstream.base_url(), Some("BEDROCK_KEY")), &env).await;
    let answer = retry(
        &judge,
        &request(BEDROCK, BEDROCK_PATH, &bedrock_original()),
        &[("authorization", SIGNATURE), ("x-api-key", "caller-key")],
    )
    .await;
    assert_eq!(answer.outcome, RetryOutcome::Answered, "{answer:?}");
    let seen = upstream.only_request();
    assert_eq!(seen.uri, BEDROCK_PATH);
    assert_eq!(
        seen.header("authorization"),
        Some("Bearer bedrock-api-key-1")
    );
    assert_eq!(seen.header("x-api-key"), None);
    assert_eq!(seen.body["anthropic_version"], "bedrock-2023-05-31");
}

#[test]
fn an_upstream_key_is_read_from_its_env_var_and_never_printed() {
    let toml = config(
        "https://bedrock-runtime.us-east-1.amazonaws.com",
        Some("BEDROCK_KEY"),
    );
    let err = Settings::from_toml(&toml, &|_| None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("upstream \"bedrock\": api_key_env names BEDROCK_KEY, which is not set"),
        "{err}"
    );
    let s = Settings::from_toml(&toml, &env).unwrap();
    let bedrock = s.upstreams.for_authority(BEDROCK).unwrap();
    assert_eq!(
        bedrock.api_key.as_ref().map(|k| k.expose()),
        Some("bedrock-api-key-1")
    );
    let printed = format!("{bedrock:?} {s:?}");
    assert!(!printed.contains("bedrock-api-key-1"), "{printed}");
    assert!(s.upstreams.for_authority(VERTEX).unwrap().api_key.is_none());
}
