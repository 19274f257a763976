//! `POST /v1/background`: accepted at once, judged afterwards with the turn's key, bounded.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::time::Duration;

use common::doubles::{verdict, BackendDouble, Vendor};
use common::{config_for, output, Judge, KEY};
use livecheck_wire::BackgroundJob;

fn job() -> BackgroundJob {
    BackgroundJob {
        agent: "orders".into(),
        version: "1".into(),
        check: "tone".into(),
        judge: output("polite_tone", "Where is order 17?", "It ships tomorrow."),
    }
}

async fn post(judge: &Judge, body: &str) -> u16 {
    reqwest::Client::new()
        .post(format!("{}/v1/background", judge.url))
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {KEY}"))
        .body(body.to_owned())
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn a_background_check_is_accepted_at_once_then_judged_with_the_turns_key() {
    for vendor in Vendor::BOTH {
        let double = BackendDouble::start(vendor, verdict(true, 0.9, "Fine.")).await;
        let judge = Judge::start(&config_for(&double, 2_000)).await;
        let status = post(&judge, &serde_json::to_string(&job()).unwrap()).await;
        assert_eq!(status, 202, "{vendor:?}");
        let mut waited = Duration::ZERO;
        while double.seen().is_empty() && waited < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(20)).await;
            waited += Duration::from_millis(20);
        }
        let seen = double.only_request();
        let auth = seen
            .headers
            .get("authorization")
            .or_else(|| seen.headers.get("x-api-key"));
        assert!(
            auth.is_some_and(|v| v.to_str().unwrap().contains(KEY)),
            "{vendor:?}"
        );
    }
}

#[tokio::test]
async fn a_bad_background_body_is_refused_400() {
    let double = BackendDouble::start(Vendor::OpenAi, verdict(true, 0.9, "Fine.")).await;
    let judge = Judge::start(&config_for(&double, 2_000)).await;
    assert_eq!(post(&judge, "{not json").await, 400);
    assert_eq!(post(&judge, r#"{"agent": "a"}"#).await, 400);
    assert!(double.seen().is_empty());
}
