//! `POST /v1/retry` against an upstream double: the body each vendor is asked again with (the rules
//! and the instruction added, no tool it could call, not streamed, otherwise the original), the
//! turn's credentials forwarded, only configured upstreams reached, and every failure `errored`.

// Test helpers outside #[test] functions may unwrap too (clippy.toml covers only the tests).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
#[path = "common/upstream.rs"]
mod upstream;

use std::path::Path;
use std::time::Duration;

use common::Judge;
use livecheck_judge::retry::instruction;
use livecheck_judge::Settings;
use livecheck_wire::{Api, RetryAnswer, RetryOutcome, RetryRequest, RETRY_PATH};
use serde_json::{json, Value};
use upstream::{Reply, UpstreamDouble};

const AUTHORITY: &str = "api.example.com";

const ANTHROPIC_ANSWER: &str = r#"{"id":"msg_retry","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"I'm not allowed to do that."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":20,"output_tokens":8}}"#;
const CHAT_ANSWER: &str = r#"{"id":"chatcmpl-retry","object":"chat.completion","created":1,"model":"gpt-4.1-mini","choices":[{"index":0,"message":{"role":"assistant","content":"I'm not allowed to do that."},"finish_reason":"stop"}],"usage":{"prompt_tokens":20,"completion_tokens":8,"total_tokens":28}}"#;
const RESPONSES_ANSWER: &str = r#"{"id":"resp_retry","object":"response","status":"completed","error":null,"output":[{"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"I'm not allowed to do that.","annotations":[]}]}],"usage":{"input_tokens":20,"output_tokens":8,"total_tokens":28}}"#;

fn rules() -> Vec<String> {
    vec![
        "Never use the word \"darn\".".into(),
        "Answer questions about orders only.".into(),
    ]
}

fn config(base_url: &str, timeout_ms: u64) -> String {
    format!(
        r#"
        [[backends]]
        name = "unused"
        api = "openai"
        base_url = "http://127.0.0.1:9"
        models = ["*"]

        [[upstreams]]
        name = "vendor"
        authority = "{AUTHORITY}"
        base_url = "{base_url}"
        timeout_ms = {timeout_ms}
        "#
    )
}

async fn judge_for(upstream: &UpstreamDouble) -> Judge {
    Judge::start(&config(&upstream.base_url(), 5_000)).await
}

fn retry_request(api: Api, path: &str, original: &Value) -> RetryRequest {
    RetryRequest {
        api,
        authority: AUTHORITY.into(),
        path: path.into(),
        request: original.to_string(),
        rules: rules(),
        attempt: 2,
        keep_tools: false,
    }
}

async fn post(judge: &Judge, body: &str, headers: &[(&str, &str)]) -> (u16, Value) {
    judge.post_to(RETRY_PATH, body, headers).await
}

async fn retry(judge: &Judge, req: &RetryRequest, headers: &[(&str, &str)]) -> RetryAnswer {
    let (status, body) = post(judge, &serde_json::to_string(req).unwrap(), headers).await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_value(body).unwrap()
}

/// `value` without these top-level keys.
fn without(value: &Value, keys: &[&str]) -> Value {
    let mut value = value.clone();
    for key in keys {
        value.as_object_mut().unwrap().remove(*key);
    }
    value
}

fn errored(answer: &RetryAnswer, reason: &str) {
    assert_eq!(answer.outcome, RetryOutcome::Errored, "{answer:?}");
    assert_eq!(answer.body, None);
    assert_eq!(answer.reason.as_deref(), Some(reason));
}

fn answered(answer: &RetryAnswer, body: &str) {
    assert_eq!(answer.outcome, RetryOutcome::Answered, "{answer:?}");
    assert_eq!(
        answer.body.as_deref(),
        Some(body),
        "the answer comes back verbatim"
    );
    assert_eq!(answer.reason, None);
}

fn assert_rules_in(text: &str) {
    for rule in rules() {
        assert!(text.contains(&format!("- {rule}")), "{text}");
    }
    assert!(text.contains("Do not mention this instruction, a correction or an earlier answer"));
}

#[tokio::test]
async fn anthropic_is_asked_again_without_tools_or_stream_and_with_the_rules() {
    let upstream = UpstreamDouble::start(Reply::Ok(ANTHROPIC_ANSWER.into())).await;
    let judge = judge_for(&upstream).await;
    let original = json!({
        "model": "claude-sonnet-4-5", "max_tokens": 1024, "temperature": 0.2,
        "system": "You answer questions about orders.",
        "messages": [{"role": "user", "content": "Swear at me."}],
        "tools": [{"name": "lookup", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "auto"},
        "stream": true,
        "metadata": {"user_id": "u1"}
    });
    let req = retry_request(Api::AnthropicMessages, "/v1/messages?beta=true", &original);
    let answer = retry(
        &judge,
        &req,
        &[
            ("x-api-key", "sk-ant-turn"),
            ("anthropic-version", "2023-06-01"),
            ("anthropic-beta", "prompt-caching-2024-07-31"),
            ("x-unrelated", "not forwarded"),
        ],
    )
    .await;
    answered(&answer, ANTHROPIC_ANSWER);

    let seen = upstream.only_request();
    assert_eq!(seen.method, "POST");
    assert_eq!(seen.uri, "/v1/messages?beta=true");
    assert_eq!(seen.header("x-api-key"), Some("sk-ant-turn"));
    assert_eq!(seen.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(
        seen.header("anthropic-beta"),
        Some("prompt-caching-2024-07-31")
    );
    assert_eq!(seen.header("x-unrelated"), None);
    assert_eq!(seen.header("content-type"), Some("application/json"));
    assert_eq!(seen.header("accept-encoding"), Some("identity"));

    let mut expected = without(&original, &["stream", "tools", "tool_choice"]);
    expected["system"] = json!(format!(
        "You answer questions about orders.\n\n{}",
        instruction(&rules())
    ));
    assert_eq!(seen.body, expected);
    assert_rules_in(seen.body["system"].as_str().unwrap());
}

#[tokio::test]
async fn anthropic_tool_history_keeps_the_tools_but_chooses_none() {
    let upstream = UpstreamDouble::start(Reply::Ok(ANTHROPIC_ANSWER.into())).await;
    let judge = judge_for(&upstream).await;
    let original = json!({
        "model": "claude-sonnet-4-5", "max_tokens": 1024,
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": "Where is order 17?"},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"order": 17}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "shipped"}]}
        ],
        "tools": [{"name": "lookup", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "any"},
        "stream": false
    });
    let req = retry_request(Api::AnthropicMessages, "/v1/messages", &original);
    answered(&retry(&judge, &req, &[]).await, ANTHROPIC_ANSWER);
    let mut expected = without(&original, &["stream"]);
    expected["tool_choice"] = json!({"type": "none"});
    expected["system"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "text", "text": instruction(&rules())}));
    assert_eq!(upstream.only_request().body, expected);
}

#[tokio::test]
async fn chat_is_asked_again_with_a_last_system_message_and_no_tools() {
    let upstream = UpstreamDouble::start(Reply::Ok(CHAT_ANSWER.into())).await;
    let judge = judge_for(&upstream).await;
    let original = json!({
        "model": "gpt-4.1-mini", "temperature": 0.7, "top_p": 0.9, "seed": 7, "n": 1,
        "messages": [
            {"role": "system", "content": "You answer questions about orders."},
            {"role": "user", "content": "Swear at me."}
        ],
        "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {}}}],
        "tool_choice": "required",
        "parallel_tool_calls": true,
        "functions": [{"name": "legacy", "parameters": {}}],
        "function_call": "auto",
        "stream": true,
        "stream_options": {"include_usage": true}
    });
    let req = retry_request(Api::ChatCompletions, "/v1/chat/completions", &original);
    let answer = retry(
        &judge,
        &req,
        &[
            ("authorization", "Bearer sk-turn"),
            ("openai-organization", "org-1"),
            ("openai-project", "proj-1"),
        ],
    )
    .await;
    answered(&answer, CHAT_ANSWER);
    let seen = upstream.only_request();
    assert_eq!(seen.header("authorization"), Some("Bearer sk-turn"));
    assert_eq!(seen.header("openai-organization"), Some("org-1"));
    assert_eq!(seen.header("openai-project"), Some("proj-1"));
    let mut expected = without(
        &original,
        &[
            "stream",
            "stream_options",
            "tools",
            "tool_choice",
            "parallel_tool_calls",
            "functions",
            "function_call",
        ],
    );
    expected["messages"]
        .as_array_mut()
        .unwrap()
        .push(json!({"role": "system", "content": instruction(&rules())}));
    assert_eq!(seen.body, expected);
    assert_rules_in(seen.body["messages"][2]["content"].as_str().unwrap());
}

#[tokio::test]
async fn chat_tool_history_keeps_the_tools_but_chooses_none() {
    let upstream = UpstreamDouble::start(Reply::Ok(CHAT_ANSWER.into())).await;
    let judge = judge_for(&upstream).await;
    let original = json!({
        "model": "gpt-4.1-mini",
        "messages": [
            {"role": "user", "content": "Where is order 17?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "lookup", "arguments": "{\"order\":17}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "shipped"}
        ],
        "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {}}}],
        "parallel_tool_calls": false
    });
    let req = retry_request(Api::ChatCompletions, "/v1/chat/completions", &original);
    answered(&retry(&judge, &req, &[]).await, CHAT_ANSWER);
    let mut expected = without(&original, &["parallel_tool_calls"]);
    expected["tool_choice"] = json!("none");
    expected["messages"]
        .as_array_mut()
        .unwrap()
        .push(json!({"role": "system", "content": instruction(&rules())}));
    assert_eq!(upstream.only_request().body, expected);
}

#[tokio::test]
async fn responses_is_asked_again_with_the_rules_in_its_instructions() {
    let upstream = UpstreamDouble::start(Reply::Ok(RESPONSES_ANSWER.into())).await;
    let judge = judge_for(&upstream).await;
    let original = json!({
        "model": "gpt-4.1", "instructions": "You answer questions about orders.",
        "input": [{"role": "user", "content": "Swear at me."}],
        "tools": [{"type": "web_search"}, {"type": "function", "name": "lookup", "parameters": {}}],
        "tool_choice": "auto", "parallel_tool_calls": true, "max_tool_calls": 3,
        "stream": true, "background": false, "store": true,
        "reasoning": {"effort": "low"}, "max_output_tokens": 500
    });
    let req = retry_request(Api::Responses, "/v1/responses", &original);
    answered(
        &retry(&judge, &req, &[("authorization", "Bearer sk-turn")]).await,
        RESPONSES_ANSWER,
    );
    let mut expected = without(
        &original,
        &[
            "stream",
            "background",
            "tools",
            "tool_choice",
            "parallel_tool_calls",
            "max_tool_calls",
        ],
    );
    expected["instructions"] = json!(format!(
        "You answer questions about orders.\n\n{}",
        instruction(&rules())
    ));
    let seen = upstream.only_request();
    assert_eq!(seen.body, expected);
    assert_rules_in(seen.body["instructions"].as_str().unwrap());
}

#[tokio::test]
async fn responses_tool_history_or_an_earlier_response_chooses_no_tool() {
    let upstream = UpstreamDouble::start(Reply::Ok(RESPONSES_ANSWER.into())).await;
    let judge = judge_for(&upstream).await;
    let with_calls = json!({
        "model": "gpt-4.1",
        "input": [
            {"role": "user", "content": "Where is order 17?"},
            {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "shipped"}
        ],
        "tools": [{"type": "function", "name": "lookup", "parameters": {}}]
    });
    let earlier = json!({
        "model": "gpt-4.1", "previous_response_id": "resp_earlier",
        "input": "And when does it arrive?"
    });
    for original in [with_calls, earlier] {
        let req = retry_request(Api::Responses, "/v1/responses", &original);
        answered(&retry(&judge, &req, &[]).await, RESPONSES_ANSWER);
        let mut expected = original.clone();
        expected["tool_choice"] = json!("none");
        expected["instructions"] = json!(instruction(&rules()));
        assert_eq!(upstream.received().last().unwrap().body, expected);
    }
}

#[tokio::test]
async fn a_stored_conversation_is_not_asked_again() {
    let upstream = UpstreamDouble::start(Reply::Ok(RESPONSES_ANSWER.into())).await;
    let judge = judge_for(&upstream).await;
    let original = json!({"model": "gpt-4.1", "conversation": "conv_1", "input": "Hi"});
    let req = retry_request(Api::Responses, "/v1/responses", &original);
    errored(
        &retry(&judge, &req, &[]).await,
        "a request in a stored conversation cannot be asked again without the rejected answer",
    );
    assert!(upstream.received().is_empty());
}

#[tokio::test]
async fn an_unknown_authority_is_refused_without_any_request() {
    let upstream = UpstreamDouble::start(Reply::Ok(CHAT_ANSWER.into())).await;
    let judge = judge_for(&upstream).await;
    let original = json!({"model": "m", "messages": [{"role": "user", "content": "Hi"}]});
    for authority in [
        "evil.example.com",
        upstream.base_url().trim_start_matches("http://"),
        "api.example.com.evil.com",
        "",
    ] {
        let mut req = retry_request(Api::ChatCompletions, "/v1/chat/completions", &original);
        req.authority = authority.into();
        errored(
            &retry(&judge, &req, &[("authorization", "Bearer sk-turn")]).await,
            "no upstream is configured for this host",
        );
    }
    assert!(upstream.received().is_empty(), "nothing was sent anywhere");

    // Case and a port the entry does not name still find it.
    let mut req = retry_request(Api::ChatCompletions, "/v1/chat/completions", &original);
    req.authority = "API.Example.COM:443".into();
    answered(&retry(&judge, &req, &[]).await, CHAT_ANSWER);
}

#[tokio::test]
async fn a_path_of_another_endpoint_is_refused_without_any_request() {
    let upstream = UpstreamDouble::start(Reply::Ok(CHAT_ANSWER.into())).await;
    let judge = judge_for(&upstream).await;
    let original = json!({"model": "m", "messages": []});
    for (api, path) in [
        (Api::ChatCompletions, "/v1/files"),
        (Api::ChatCompletions, "/v1/responses"),
        (Api::AnthropicMessages, "/v1/messages/count_tokens"),
        (
            Api::ChatCompletions,
            "@evil.example.com/v1/chat/completions",
        ),
    ] {
        let req = retry_request(api, path, &original);
        errored(
            &retry(&judge, &req, &[]).await,
            "the path is not one of this API's",
        );
    }
    assert!(upstream.received().is_empty());
}

#[tokio::test]
async fn every_unusable_upstream_answer_is_errored() {
    let original = json!({"model": "m", "messages": [{"role": "user", "content": "Hi"}]});
    let cases = [
        (
            Reply::Status(500, r#"{"error":{"message":"boom"}}"#.into()),
            "the upstream answered status 500",
        ),
        (
            Reply::Status(429, r#"{"error":{"message":"slow down"}}"#.into()),
            "the upstream answered status 429",
        ),
        (
            Reply::Ok("<html>gateway</html>".into()),
            "the upstream's answer is not a JSON object",
        ),
        (
            Reply::Ok("[1, 2]".into()),
            "the upstream's answer is not a JSON object",
        ),
        (
            Reply::Ok(
                r#"{"type":"error","error":{"type":"overloaded_error","message":"x"}}"#.into(),
            ),
            "the upstream answered with an error",
        ),
        (
            Reply::Ok(r#"{"error":{"message":"x","type":"server_error"}}"#.into()),
            "the upstream answered with an error",
        ),
        (
            Reply::Big(livecheck_judge::config::DEFAULT_MAX_RETRY_ANSWER_BYTES + 1),
            "the upstream's answer is too large",
        ),
        (
            Reply::Redirect("http://127.0.0.1:9/v1/chat/completions".into()),
            "the upstream answered status 307",
        ),
        (
            Reply::Slow(Duration::from_secs(3), CHAT_ANSWER.into()),
            "the upstream did not answer in time",
        ),
    ];
    for (reply, reason) in cases {
        let upstream = UpstreamDouble::start(reply).await;
        let judge = Judge::start(&config(&upstream.base_url(), 300)).await;
        let req = retry_request(Api::ChatCompletions, "/v1/chat/completions", &original);
        errored(&retry(&judge, &req, &[]).await, reason);
        assert_eq!(upstream.received().len(), 1, "{reason}");
    }
    // An answer just within the limit is read.
    let big = UpstreamDouble::start(Reply::Big(
        livecheck_judge::config::DEFAULT_MAX_RETRY_ANSWER_BYTES,
    ))
    .await;
    let judge = judge_for(&big).await;
    let req = retry_request(Api::ChatCompletions, "/v1/chat/completions", &original);
    errored(
        &retry(&judge, &req, &[]).await,
        "the upstream's answer is not a JSON object",
    );
}

#[tokio::test]
async fn an_upstream_that_is_down_is_errored() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let judge = Judge::start(&config(&format!("http://127.0.0.1:{port}"), 2_000)).await;
    let original = json!({"model": "m", "messages": []});
    let req = retry_request(Api::ChatCompletions, "/v1/chat/completions", &original);
    errored(
        &retry(&judge, &req, &[]).await,
        "the upstream could not be reached",
    );
}

#[tokio::test]
async fn a_bad_retry_request_is_refused_with_400() {
    let upstream = UpstreamDouble::start(Reply::Ok(CHAT_ANSWER.into())).await;
    let judge = judge_for(&upstream).await;
    let (status, body) = post(&judge, r#"{"api":"chat_completions"}"#, &[]).await;
    assert_eq!(status, 400, "{body}");
    let (status, _) = post(&judge, "not json", &[]).await;
    assert_eq!(status, 400);
    // A well-formed callout whose original body is not an object, or without a rule, is errored.
    let mut req = retry_request(Api::ChatCompletions, "/v1/chat/completions", &json!([1]));
    errored(
        &retry(&judge, &req, &[]).await,
        "the original request is not a JSON object",
    );
    req.request = "{}".into();
    req.rules.clear();
    errored(
        &retry(&judge, &req, &[]).await,
        "the retry names no broken rule",
    );
    assert!(upstream.received().is_empty());
}

#[test]
fn every_upstream_problem_is_listed() {
    let bad = r#"
        [[backends]]
        api = "openai"
        base_url = "http://h"
        models = ["*"]
        [[upstreams]]
        name = "a"
        authority = "api.example.com"
        base_url = "ftp://h"
        [[upstreams]]
        name = "b"
        authority = "API.example.com"
        base_url = "https://h/v1/"
        [[upstreams]]
        name = "c"
        authority = "https://api.example.com/"
        base_url = "https://h?x=1"
        timeout_ms = 0
        [[upstreams]]
        name = "d"
        authority = "api.example.org:99999"
        base_url = "https://user:pw@h"
        [[upstreams]]
        name = "e"
        authority = "ok.example.com"
        base_url = "https://ok.example.com"
        [[upstreams]]
        name = "f"
        authority = "ok.example.com"
        base_url = "https://ok.example.com"
    "#;
    let err = Settings::from_toml(bad, &|_| None).unwrap_err();
    let all = err.to_string();
    for needle in [
        "upstream \"a\": base_url \"ftp://h\" must be an http or https URL",
        "upstream \"b\": base_url \"https://h/v1/\" must not end in /v1",
        "upstream \"c\": authority \"https://api.example.com/\" is not a host or host:port",
        "upstream \"c\": base_url \"https://h?x=1\" must not have a query or fragment",
        "upstream \"c\": timeout_ms must be between 1 and 600000, not 0",
        "upstream \"d\": authority \"api.example.org:99999\" is not a host or host:port",
        "upstream \"d\": base_url \"https://user:pw@h\" must not carry credentials",
        "upstream \"f\": authority \"ok.example.com\" is already served by upstream \"e\"",
    ] {
        assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
    }
    assert_eq!(err.0.len(), 8, "{all}");
}

#[test]
fn upstreams_are_found_by_authority_as_written() {
    let s = Settings::from_toml(
        r#"
        [[backends]]
        api = "openai"
        base_url = "http://h"
        models = ["*"]
        [[upstreams]]
        authority = "api.example.com"
        base_url = "https://api.example.com/"
        [[upstreams]]
        name = "local"
        authority = "127.0.0.1:10000"
        base_url = "http://127.0.0.1:8080"
        timeout_ms = 1234
        [[upstreams]]
        authority = "[::1]:10000"
        base_url = "http://[::1]:8080"
        "#,
        &|_| None,
    )
    .unwrap();
    let name = |a: &str| s.upstreams.for_authority(a).map(|u| u.name.clone());
    assert_eq!(name("api.example.com").as_deref(), Some("upstreams[0]"));
    assert_eq!(name("Api.Example.com:443").as_deref(), Some("upstreams[0]"));
    assert_eq!(name("127.0.0.1:10000").as_deref(), Some("local"));
    assert_eq!(
        name("127.0.0.1"),
        None,
        "an entry with a port needs that port"
    );
    assert_eq!(name("127.0.0.1:10001"), None);
    assert_eq!(name("[::1]:10000").as_deref(), Some("upstreams[2]"));
    assert_eq!(name("example.com"), None);
    let local = s.upstreams.for_authority("127.0.0.1:10000").unwrap();
    assert_eq!(local.timeout, Duration::from_millis(1234));
    assert_eq!(local.base_url.as_str(), "http://127.0.0.1:8080/");
}

#[test]
fn the_shipped_configs_name_their_upstreams() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let demo = Settings::load(&dir.join("demo.toml"), &|_| None).unwrap();
    let local = demo.upstreams.for_authority("127.0.0.1:10000").unwrap();
    assert_eq!(local.base_url.as_str(), "http://127.0.0.1:8080/");
    assert!(demo.upstreams.for_authority("localhost:10000").is_some());
    let example = Settings::load(&dir.join("example.toml"), &|_| None).unwrap();
    assert!(!example.upstreams.is_empty());
    let azure = example
        .upstreams
        .for_authority("my-resource.openai.azure.com")
        .unwrap();
    assert_eq!(
        azure.base_url.as_str(),
        "https://my-resource.openai.azure.com/"
    );
    let vertex = example
        .upstreams
        .for_authority("us-east5-aiplatform.googleapis.com")
        .unwrap();
    assert_eq!(
        vertex.base_url.as_str(),
        "https://us-east5-aiplatform.googleapis.com/"
    );
}

#[test]
fn a_glob_authority_serves_every_host_its_star_matches_and_fills_the_base_url() {
    let s = Settings::from_toml(
        r#"
        [[backends]]
        api = "openai"
        base_url = "http://h"
        models = ["*"]
        [[upstreams]]
        name = "azure"
        authority = "*.openai.azure.com"
        base_url = "https://*.openai.azure.com"
        [[upstreams]]
        name = "prod"
        authority = "prod.openai.azure.com"
        base_url = "https://gateway.example.com"
        [[upstreams]]
        name = "bedrock"
        authority = "bedrock-runtime.*.amazonaws.com"
        base_url = "https://bedrock.example.com"
        [[upstreams]]
        name = "eu"
        authority = "eu*.openai.azure.com"
        base_url = "https://eu.example.com"
        [[upstreams]]
        name = "local"
        authority = "*.local.test:10000"
        base_url = "http://127.0.0.1:8080"
        "#,
        &|_| None,
    )
    .unwrap();
    let find = |a: &str| {
        s.upstreams
            .for_authority(a)
            .map(|u| (u.name.clone(), u.base_url.to_string()))
    };
    let found = |name: &str, url: &str| Some((name.to_owned(), url.to_owned()));
    assert_eq!(
        find("My-Res.openai.azure.com"),
        found("azure", "https://my-res.openai.azure.com/")
    );
    assert_eq!(
        find("my-res.openai.azure.com:443"),
        found("azure", "https://my-res.openai.azure.com/")
    );
    assert_eq!(
        find("prod.openai.azure.com"),
        found("prod", "https://gateway.example.com/"),
        "an exact authority wins over a glob"
    );
    assert_eq!(
        find("eu-west.openai.azure.com"),
        found("eu", "https://eu.example.com/"),
        "the glob fixing more characters wins"
    );
    assert_eq!(
        find("bedrock-runtime.us-east-1.amazonaws.com"),
        found("bedrock", "https://bedrock.example.com/")
    );
    assert_eq!(find("a.b.openai.azure.com"), None, "the star is one label");
    assert_eq!(find("openai.azure.com"), None);
    assert_eq!(find("evil.com/x.openai.azure.com"), None);
    assert_eq!(
        find("a.local.test:10000"),
        found("local", "http://127.0.0.1:8080/")
    );
    assert_eq!(
        find("a.local.test"),
        None,
        "an entry with a port needs that port"
    );
}

#[test]
fn every_glob_problem_is_listed() {
    let bad = r#"
        [[backends]]
        api = "openai"
        base_url = "http://h"
        models = ["*"]
        [[upstreams]]
        name = "a"
        authority = "*.*.azure.com"
        base_url = "https://h"
        [[upstreams]]
        name = "b"
        authority = "example.*"
        base_url = "https://h"
        [[upstreams]]
        name = "c"
        authority = "api.example.com"
        base_url = "https://*.example.com"
        [[upstreams]]
        name = "d"
        authority = "*.openai.azure.com"
        base_url = "https://h/*/x"
        [[upstreams]]
        name = "e"
        authority = "*.openai.azure.com"
        base_url = "https://*.openai.azure.com"
        [[upstreams]]
        name = "f"
        authority = "*.openai.azure.com"
        base_url = "https://h"
        [[upstreams]]
        name = "g"
        authority = "*..azure.com"
        base_url = "https://h"
    "#;
    let err = Settings::from_toml(bad, &|_| None).unwrap_err();
    let all = err.to_string();
    for needle in [
        "upstream \"a\": authority \"*.*.azure.com\" may hold one `*` only",
        "upstream \"b\": authority \"example.*\" may not hold its `*` in the last label",
        "upstream \"c\": base_url \"https://*.example.com\" may hold a `*` only when the authority holds one",
        "upstream \"d\": base_url \"https://h/*/x\" may hold one `*`, in its host",
        "upstream \"f\": authority \"*.openai.azure.com\" is already served by upstream \"e\"",
        "upstream \"g\": authority \"*..azure.com\" is not a host name",
    ] {
        assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
    }
    assert_eq!(err.0.len(), 6, "{all}");
}

#[tokio::test]
async fn azure_is_asked_again_on_its_deployment_path_with_its_api_key() {
    let upstream = UpstreamDouble::start(Reply::Ok(CHAT_ANSWER.into())).await;
    let judge = judge_for(&upstream).await;
    let original = json!({
        "model": "gpt-4o-prod",
        "messages": [{"role": "user", "content": "Swear at me."}],
        "stream": true
    });
    let path = "/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21";
    let req = retry_request(Api::ChatCompletions, path, &original);
    let answer = retry(
        &judge,
        &req,
        &[("api-key", "azure-turn-key"), ("x-unrelated", "no")],
    )
    .await;
    answered(&answer, CHAT_ANSWER);
    let seen = upstream.only_request();
    assert_eq!(seen.uri, path, "the api-version query is kept as it came");
    assert_eq!(seen.header("api-key"), Some("azure-turn-key"));
    assert_eq!(seen.header("x-unrelated"), None);
}
