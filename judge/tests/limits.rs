//! The sidecar's limits (`[limits]`): an oversized request body on any route is refused 413 with a
//! JSON error, a judge backend's oversized answer is an `errored` verdict, and full queues (pending
//! background checks, the webhook outbox) refuse with a counted reason instead of growing.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use common::doubles::{verdict, BackendDouble, Vendor};
use common::results::*;
use common::{config_for, output, Judge};
use livecheck_judge::store::QUEUE_FULL_REASON;
use livecheck_wire::Outcome::{Errored, Failed};
use livecheck_wire::{
    Outcome, JUDGE_PATH, RESULTS_BATCH_PATH, RESULTS_PATH, RETRY_PATH, TOOL_CHECK_PATH,
};
use serde_json::{json, Value};

const FILTER_ROUTES: [&str; 5] = [
    JUDGE_PATH,
    TOOL_CHECK_PATH,
    RETRY_PATH,
    RESULTS_PATH,
    RESULTS_BATCH_PATH,
];

#[tokio::test]
async fn every_route_refuses_a_body_over_the_limit_413_with_a_json_error() {
    let double = BackendDouble::start(Vendor::OpenAi, verdict(true, 1.0, "Fine.")).await;
    let config = format!(
        "{}\n[limits]\nmax_request_bytes = 4096\n",
        config_for(&double, 3000)
    );
    let judge = Judge::start(&config).await;
    // Valid JSON, one byte over: refused unread, whatever the route.
    let mut over = json!({"pad": ""}).to_string();
    over.insert_str(8, &"x".repeat(4097 - over.len()));
    assert_eq!(over.len(), 4097);
    for path in FILTER_ROUTES {
        let (status, body) = judge.post_to(path, &over, &[]).await;
        assert_eq!(status, 413, "{path}: {body}");
        let error = body["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("larger than the sidecar's limit of 4096 bytes"),
            "{path}: {body}"
        );
    }
    // A judge request under the limit is judged as before.
    let req = output("polite_tone", "Where is order 17?", &"y".repeat(3000));
    let text = serde_json::to_string(&req).unwrap();
    assert!(text.len() < 4096);
    let (status, body) = judge.post_raw(&text, &[]).await;
    assert_eq!(
        (status, &body["outcome"]),
        (200, &json!("passed")),
        "{body}"
    );
}

#[tokio::test]
async fn a_backend_answer_over_the_limit_is_an_errored_verdict() {
    for vendor in [Vendor::OpenAi, Vendor::Anthropic] {
        // A verdict whose reason makes the answer some 3 KB.
        let long = "Polite. ".repeat(400);
        let double = BackendDouble::start(vendor, verdict(true, 0.9, &long)).await;
        let base = config_for(&double, 3000);
        let req = output("polite_tone", "Where is order 17?", "Tomorrow.");
        let capped = Judge::start(&format!(
            "{base}\n[limits]\nmax_backend_answer_bytes = 2048\n"
        ))
        .await;
        let verdict = capped.judge(&req).await;
        assert_eq!(verdict.outcome, Outcome::Errored, "{vendor:?}");
        assert_eq!(
            verdict.reason,
            "The judge backend's answer was larger than the sidecar's limit."
        );
        // Under the default limit the same answer is a verdict.
        let default = Judge::start(&base).await;
        assert_eq!(default.judge(&req).await.outcome, Outcome::Passed);
    }
}

async fn healthz_dropped(sidecar: &Sidecar) -> Value {
    let resp = reqwest::get(format!("{}/healthz", sidecar.url))
        .await
        .unwrap();
    let body: Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
    body["dropped"].clone()
}

/// A report bringing two background checks into a queue with room for one: the first waits, the
/// second is stored at once as `errored` with the queue's reason (never judged, never lost), and
/// the refusal is counted.
async fn a_full_pending_queue_stores_the_check_errored_and_counts_it(db: Db) {
    let extras = Extras {
        token: true,
        limits: Some("max_pending_checks = 1".into()),
        ..Extras::default()
    };
    let sidecar = Sidecar::start(&db, &extras).await;
    let id = turn_id();
    let mut r = report(&id, "orders", vec![]);
    for name in ["tone-a", "tone-b"] {
        let judge = output("polite_tone", "Where is order 17?", "Tomorrow.");
        r.background.push(background(name, judge));
    }
    assert_eq!(sidecar.post_report(&r).await, (200, json!({"stored": 1})));
    let items = sidecar.all_checks(&id).await;
    let refused: Vec<&Value> = items
        .iter()
        .filter(|c| c["reason"] == QUEUE_FULL_REASON)
        .collect();
    assert_eq!(refused.len(), 1, "{items:?}");
    assert_eq!(
        (
            &refused[0]["name"],
            &refused[0]["outcome"],
            &refused[0]["mode"]
        ),
        (&json!("tone-b"), &json!("errored"), &json!("background"))
    );
    assert_eq!(healthz_dropped(&sidecar).await["background_checks"], 1);
    // The one that waited is judged (errored here: the backend is unreachable) and stored.
    wait_until("the waiting check is stored", async || {
        sidecar.all_checks(&id).await.len() == 2
    })
    .await;
    // Sent again: nothing new is stored and nothing more is counted.
    assert_eq!(sidecar.post_report(&r).await, (200, json!({"stored": 0})));
    assert_eq!(healthz_dropped(&sidecar).await["background_checks"], 1);
    sidecar.stop().await;
}

/// Two failed results for one webhook into an outbox with room for one: one event is queued, the
/// other dropped and counted; the results themselves are all stored.
async fn a_full_outbox_drops_the_event_and_counts_it(db: Db) {
    let extras = Extras {
        token: true,
        // Nothing listens there: the queued event stays in the outbox, retried.
        webhooks: vec!["http://127.0.0.1:9/hook".into()],
        limits: Some("max_queued_events = 1".into()),
        ..Extras::default()
    };
    let sidecar = Sidecar::start(&db, &extras).await;
    let id = turn_id();
    let r = report(
        &id,
        "orders",
        vec![result("a", Failed, 1), result("b", Errored, 1)],
    );
    assert_eq!(sidecar.post_report(&r).await, (200, json!({"stored": 2})));
    assert_eq!(db.rows("SELECT id FROM event_outbox").await.len(), 1);
    assert_eq!(healthz_dropped(&sidecar).await["events"], 1);
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_pending_queue_on_sqlite() {
    a_full_pending_queue_stores_the_check_errored_and_counts_it(Db::sqlite().await).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_pending_queue_on_postgres() {
    a_full_pending_queue_stores_the_check_errored_and_counts_it(Db::postgres().await).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_outbox_on_sqlite() {
    a_full_outbox_drops_the_event_and_counts_it(Db::sqlite().await).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_outbox_on_postgres() {
    a_full_outbox_drops_the_event_and_counts_it(Db::postgres().await).await
}
