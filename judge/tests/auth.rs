//! The filter token (`[filter] token_env`, sent as `x-livecheck-token`) on the four filter endpoints,
//! kept apart from the operator token; the turn's key still forwarded, the filter token never; and
//! the probes, which need no token.

// Test helpers outside #[test] functions may unwrap too (clippy.toml covers only the tests).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;
#[path = "common/upstream.rs"]
#[allow(dead_code)]
mod upstream;

use common::doubles::{asks_tool_check, tool_verdict, verdict, BackendDouble, Vendor};
use common::results::{
    backend_config, report, result, turn_id, Db, Extras, Sidecar, FILTER_TOKEN, TOKEN,
};
use common::{config_for, output, tool_check, Judge, KEY};
use livecheck_wire::{
    Api, Outcome, RetryRequest, FILTER_TOKEN_HEADER, JUDGE_PATH, RESULTS_BATCH_PATH, RESULTS_PATH,
    RETRY_PATH, TOOL_CHECK_PATH,
};
use serde_json::{json, Value};
use upstream::{Reply, UpstreamDouble};

const FILTER_PATHS: [&str; 5] = [
    JUDGE_PATH,
    TOOL_CHECK_PATH,
    RETRY_PATH,
    RESULTS_PATH,
    RESULTS_BATCH_PATH,
];

const CHAT_ANSWER: &str = r#"{"id":"chatcmpl-retry","object":"chat.completion","created":1,"model":"gpt-4.1-mini","choices":[{"index":0,"message":{"role":"assistant","content":"Gladly."},"finish_reason":"stop"}],"usage":{"prompt_tokens":20,"completion_tokens":2,"total_tokens":22}}"#;

/// A whole sidecar requiring the filter token (and with an operator token), whose judge backend
/// and retry upstream are doubles.
struct Stack {
    sidecar: Sidecar,
    backend: BackendDouble,
    upstream: UpstreamDouble,
    db: Db,
}

async fn stack() -> Stack {
    let backend = BackendDouble::deciding(Vendor::OpenAi, |body| {
        if asks_tool_check(body) {
            tool_verdict(false, "The condition does not hold.")
        } else {
            verdict(true, 0.9, "Polite.")
        }
    })
    .await;
    let upstream = UpstreamDouble::start(Reply::Ok(CHAT_ANSWER.into())).await;
    let db = Db::sqlite().await;
    let extras = Extras {
        token: true,
        filter_token: true,
        backend: Some(backend_config(&backend, false)),
        upstream: Some(upstream.base_url()),
        ..Extras::default()
    };
    let sidecar = Sidecar::start(&db, &extras).await;
    Stack {
        sidecar,
        backend,
        upstream,
        db,
    }
}

/// A body each filter endpoint accepts.
fn body_for(path: &str) -> String {
    match path {
        JUDGE_PATH => serde_json::to_string(&output("polite_tone", "Where is it?", "On its way.")),
        TOOL_CHECK_PATH => serde_json::to_string(&tool_check(
            "The mail goes outside the company",
            "send_mail",
            r#"{"to":"carol@example.com"}"#,
            &["Mail Carol"],
        )),
        RETRY_PATH => serde_json::to_string(&RetryRequest {
            api: Api::ChatCompletions,
            authority: "api.example.com".into(),
            path: "/v1/chat/completions".into(),
            request:
                json!({"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "Hi"}]})
                    .to_string(),
            rules: vec!["Be polite.".into()],
            attempt: 2,
            keep_tools: false,
        }),
        RESULTS_PATH => serde_json::to_string(&report(
            &turn_id(),
            "orders",
            vec![result("no-secrets", Outcome::Passed, 1)],
        )),
        RESULTS_BATCH_PATH => Ok::<_, serde_json::Error>(
            json!({"reports": [report(
                &turn_id(),
                "orders",
                vec![result("no-secrets", Outcome::Passed, 1)],
            )]})
            .to_string(),
        ),
        other => panic!("not a filter path: {other}"),
    }
    .unwrap()
}

/// The filter token with its last character changed: the same length, wrong.
fn same_length_wrong() -> String {
    let mut wrong = FILTER_TOKEN[..FILTER_TOKEN.len() - 1].to_owned();
    wrong.push(if FILTER_TOKEN.ends_with('0') {
        '1'
    } else {
        '0'
    });
    assert_eq!(wrong.len(), FILTER_TOKEN.len());
    wrong
}

#[tokio::test]
async fn every_filter_endpoint_answers_401_without_the_filter_token() {
    let s = stack().await;
    let wrong = same_length_wrong();
    let longer = format!("{FILTER_TOKEN}x");
    let bearer_key = format!("Bearer {KEY}");
    let bearer_filter = format!("Bearer {FILTER_TOKEN}");
    let bearer_operator = format!("Bearer {TOKEN}");
    // Each carries the turn's key as a callout does: a caller's key opens nothing here.
    let refused: Vec<(&str, Vec<(&str, &str)>)> = vec![
        ("missing", vec![("authorization", &bearer_key)]),
        (
            "wrong",
            vec![(FILTER_TOKEN_HEADER, "nope"), ("x-api-key", KEY)],
        ),
        (
            "same length, wrong",
            vec![(FILTER_TOKEN_HEADER, &wrong), ("x-api-key", KEY)],
        ),
        (
            "the token and more",
            vec![(FILTER_TOKEN_HEADER, &longer), ("x-api-key", KEY)],
        ),
        (
            "the filter token as the caller's bearer",
            vec![("authorization", &bearer_filter)],
        ),
        (
            "the filter token as the caller's key",
            vec![("x-api-key", FILTER_TOKEN)],
        ),
        (
            "the operator token in the filter header",
            vec![(FILTER_TOKEN_HEADER, TOKEN), ("authorization", &bearer_key)],
        ),
        (
            "the operator token as bearer",
            vec![("authorization", &bearer_operator)],
        ),
    ];
    for path in FILTER_PATHS {
        for (what, headers) in &refused {
            let (status, body) = s.sidecar.post_with(path, &body_for(path), headers).await;
            assert_eq!(status, 401, "{path}, {what}: {body}");
            assert_eq!(
                body,
                json!({"error": "a valid filter token is needed"}),
                "{path}, {what}"
            );
        }
    }
    assert!(s.backend.seen().is_empty(), "a refused callout was judged");
    assert!(
        s.upstream.received().is_empty(),
        "a refused retry reached the upstream"
    );
    assert!(
        s.db.rows("SELECT turn_id FROM turns").await.is_empty(),
        "a refused report was stored"
    );
    s.sidecar.stop().await;
}

#[tokio::test]
async fn every_filter_endpoint_serves_the_filter_token_and_forwards_only_the_turns_key() {
    let s = stack().await;
    let bearer_key = format!("Bearer {KEY}");
    let headers = [
        (FILTER_TOKEN_HEADER, FILTER_TOKEN),
        ("authorization", bearer_key.as_str()),
    ];
    let mut answers = Vec::new();
    for path in FILTER_PATHS {
        let (status, body) = s.sidecar.post_with(path, &body_for(path), &headers).await;
        assert_eq!(status, 200, "{path}: {body}");
        answers.push(body);
    }
    assert_eq!(answers[0]["outcome"], "passed", "{}", answers[0]);
    assert_eq!(answers[1]["outcome"], "passed", "{}", answers[1]);
    assert_eq!(answers[2]["outcome"], "answered", "{}", answers[2]);
    assert_eq!(answers[3], json!({"stored": 1}));

    // The turn's key goes on; the filter token stays with the sidecar.
    let judged = s.backend.seen();
    assert_eq!(judged.len(), 2, "one judge call per judged endpoint");
    for call in &judged {
        assert_eq!(call.header("authorization"), Some(bearer_key.as_str()));
        assert_eq!(call.header(FILTER_TOKEN_HEADER), None);
        assert!(!format!("{:?}", call.headers).contains(FILTER_TOKEN));
    }
    let retried = s.upstream.only_request();
    assert_eq!(retried.header("authorization"), Some(bearer_key.as_str()));
    assert_eq!(retried.header(FILTER_TOKEN_HEADER), None);
    assert!(!format!("{:?}", retried.headers).contains(FILTER_TOKEN));
    s.sidecar.stop().await;
}

#[tokio::test]
async fn the_filter_token_does_not_open_the_operator_api() {
    let s = stack().await;
    let path = format!("/responses/{}/checks", turn_id());
    let (status, _) = s
        .sidecar
        .api_with(reqwest::Method::GET, &path, Some(FILTER_TOKEN))
        .await;
    assert_eq!(status, 401, "the filter token as bearer");
    let response = reqwest::Client::new()
        .get(format!("{}{path}", s.sidecar.url))
        .header(FILTER_TOKEN_HEADER, FILTER_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401, "the filter token in its own header");
    let (status, body) = s.sidecar.api(reqwest::Method::GET, &path).await;
    assert_eq!(status, 404, "the operator token reads the API: {body}");
    s.sidecar.stop().await;
}

#[tokio::test]
async fn without_a_filter_token_the_filter_endpoints_take_any_local_caller() {
    let db = Db::sqlite().await;
    let sidecar = Sidecar::start(&db, &Extras::default()).await;
    let (status, body) = sidecar
        .post_with(RESULTS_PATH, &body_for(RESULTS_PATH), &[])
        .await;
    assert_eq!((status, body), (200, json!({"stored": 1})));
    sidecar.stop().await;
}

async fn probe(url: &str, path: &str) -> (u16, Value) {
    let response = reqwest::get(format!("{url}{path}")).await.unwrap();
    let status = response.status().as_u16();
    (
        status,
        serde_json::from_slice(&response.bytes().await.unwrap()).unwrap(),
    )
}

#[tokio::test]
async fn the_probes_need_no_token_and_readiness_follows_the_store() {
    let s = stack().await;
    let url = s.sidecar.url.clone();
    let live = (
        200,
        json!({"status": "ok", "dropped": {"background_checks": 0, "events": 0}}),
    );
    assert_eq!(probe(&url, "/healthz").await, live);
    let ready = probe(&url, "/readyz").await;
    assert_eq!(ready, (200, json!({"status": "ready"})));

    // The store stops answering (its pool closed, as when the database went away).
    s.sidecar.app.store().unwrap().close().await;
    let unready = probe(&url, "/readyz").await;
    assert_eq!(
        unready,
        (503, json!({"error": "the results store is unavailable"}))
    );
    assert_eq!(probe(&url, "/healthz").await, live, "still live");
    s.sidecar.stop().await;
}

#[tokio::test]
async fn a_judge_without_a_results_store_is_live_but_not_ready() {
    let double = BackendDouble::start(Vendor::OpenAi, verdict(true, 1.0, "ok")).await;
    let judge = Judge::start(&config_for(&double, 1_000)).await;
    assert_eq!(probe(&judge.url, "/healthz").await.0, 200);
    assert_eq!(probe(&judge.url, "/readyz").await.0, 503);
}
