//! The results side of the sidecar, every test against SQLite and against PostgreSQL: turn reports
//! (`POST /v1/results`), the operator API, background checks, events, alerts, retention and erasure.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::time::Duration;

use common::doubles::{verdict, Answer, BackendDouble, Vendor};
use common::results::*;
use common::{output, KEY};
use livecheck_judge::ids;
use livecheck_wire::Outcome::{Errored, Failed, Passed};
use reqwest::Method;
use serde_json::{json, Value};

on_both!(
    a_report_is_stored_and_read_back_by_either_id,
    a_report_sent_again_is_stored_and_evented_once,
    results_page_by_cursor,
    the_api_needs_the_token_and_answers_json_errors,
    a_bad_report_is_refused_400_naming_the_field,
    a_batch_stores_each_valid_report_once_and_skips_a_bad_one,
    a_batch_larger_than_one_statement_stores_every_result_once_in_order,
    a_closed_store_answers_503,
    the_summary_counts_each_check_since_a_time,
    erasure_removes_every_turn_of_a_person,
    the_retention_sweep_at_start_deletes_old_turns,
    an_alert_fires_once_under_a_burst_and_not_before_over_last,
    an_alert_fires_once_a_day_across_a_restart,
    a_background_check_is_judged_with_the_turns_key_and_stored,
    a_pending_check_without_its_key_after_a_restart,
    events_are_signed_and_verified_by_a_python_receiver,
    no_text_reaches_rows_events_alerts_or_logs,
    tool_call_results_are_stored_once_per_call_and_name_their_tool,
    a_bad_tool_call_result_is_refused_400,
    a_database_of_the_first_release_is_migrated_with_every_row,
);

fn api_only() -> Extras {
    Extras {
        token: true,
        ..Extras::default()
    }
}

async fn a_report_is_stored_and_read_back_by_either_id(db: Db) {
    let sidecar = Sidecar::start(&db, &api_only()).await;
    let id = turn_id();
    let mut judged = result("tone", Passed, 1);
    judged.kind = "polite_tone".into();
    judged.score = Some(0.9);
    judged.judge_model = Some("judge-a".into());
    judged.created_at_ms = 1_792_142_043_000; // 2026-10-16T09:14:03Z
    let mut errored = result("fmt", Errored, 2);
    errored.passed_on_error = true;
    let mut r = report(
        &id,
        "orders",
        vec![result("no-pw", Failed, 1), judged, errored],
    );
    r.response_id = Some("msg_01abc".into());
    assert_eq!(sidecar.post_report(&r).await, (200, json!({"stored": 3})));

    for by in [id.as_str(), "msg_01abc"] {
        let (status, page) = sidecar
            .api(Method::GET, &format!("/responses/{by}/checks"))
            .await;
        assert_eq!(status, 200, "{page}");
        assert_eq!(page["next_cursor"], Value::Null);
        let items = page["items"].as_array().unwrap();
        let names: Vec<&str> = items.iter().map(|i| i["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["no-pw", "tone", "fmt"], "decided order");
        let tone = &items[1];
        assert!(tone["id"].as_str().unwrap().starts_with("rck_"));
        assert_eq!(
            {
                let mut t = tone.clone();
                t["id"] = json!("rck");
                t
            },
            json!({"object": "response.check", "id": "rck", "response_id": "msg_01abc",
                   "name": "tone", "stage": "output", "kind": "polite_tone", "mode": "block",
                   "attempt": 1, "outcome": "passed", "score": 0.9,
                   "reason": "The answer contains text it had to avoid.", "judge_model": "judge-a",
                   "passed_on_error": false, "created_at": "2026-10-16T09:14:03Z"}),
            "{}",
            db.kind
        );
        assert_eq!(items[2]["passed_on_error"], true);
        assert_eq!(items[2]["attempt"], 2);
    }

    // Without an upstream id, the turn is named by the filter's id.
    let bare = turn_id();
    sidecar
        .post_report(&report(&bare, "orders", vec![result("x", Passed, 1)]))
        .await;
    let items = sidecar.all_checks(&bare).await;
    assert_eq!(items[0]["response_id"], bare.as_str());
    sidecar.stop().await;
}

async fn a_report_sent_again_is_stored_and_evented_once(db: Db) {
    let hook = Recorder::start().await;
    let extras = Extras {
        token: true,
        webhooks: vec![hook.url.clone()],
        ..Extras::default()
    };
    let sidecar = Sidecar::start(&db, &extras).await;
    let id = turn_id();
    let r = report(
        &id,
        "orders",
        vec![result("a", Failed, 1), result("b", Passed, 1)],
    );
    assert_eq!(sidecar.post_report(&r).await, (200, json!({"stored": 2})));
    assert_eq!(sidecar.post_report(&r).await, (200, json!({"stored": 0})));
    // A later delivery with one more attempt stores only the new one.
    let mut more = r.clone();
    more.results.push(result("a", Passed, 2));
    assert_eq!(
        sidecar.post_report(&more).await,
        (200, json!({"stored": 1}))
    );
    assert_eq!(sidecar.all_checks(&id).await.len(), 3);
    wait_until("the event arrived", async || !hook.bodies().is_empty()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let bodies = hook.bodies();
    assert_eq!(bodies.len(), 1, "{bodies:?}");
    let event: Value = serde_json::from_str(&bodies[0]).unwrap();
    assert_eq!(event["type"], "response.check_failed");
    assert_eq!(
        event["data"],
        json!({"name": "a", "stage": "output", "kind": "not_contains", "outcome": "failed", "response_id": id})
    );
    sidecar.stop().await;
}

async fn results_page_by_cursor(db: Db) {
    let sidecar = Sidecar::start(&db, &api_only()).await;
    let id = turn_id();
    let results = (0..45)
        .map(|i| result(&format!("check-{i:02}"), Passed, 1))
        .collect();
    sidecar.post_report(&report(&id, "orders", results)).await;

    let mut names = Vec::new();
    let mut cursor = String::new();
    let mut pages = 0;
    loop {
        let (status, page) = sidecar
            .api(
                Method::GET,
                &format!("/responses/{id}/checks?cursor={cursor}"),
            )
            .await;
        assert_eq!(status, 200);
        pages += 1;
        let items = page["items"].as_array().unwrap();
        assert!(items.len() <= 20, "default limit 20");
        names.extend(items.iter().map(|i| i["name"].as_str().unwrap().to_owned()));
        match page["next_cursor"].as_str() {
            Some(next) => cursor = next.to_owned(),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    let expected: Vec<String> = (0..45).map(|i| format!("check-{i:02}")).collect();
    assert_eq!(names, expected);

    let (_, page) = sidecar
        .api(Method::GET, &format!("/responses/{id}/checks?limit=45"))
        .await;
    assert_eq!(page["items"].as_array().unwrap().len(), 45);
    assert_eq!(page["next_cursor"], Value::Null, "exactly one full page");
    for bad in ["limit=0", "limit=101", "limit=x", "cursor=bm9wZQ"] {
        let (status, body) = sidecar
            .api(Method::GET, &format!("/responses/{id}/checks?{bad}"))
            .await;
        assert_eq!(status, 400, "{bad}");
        assert!(body["error"].is_string());
    }
    sidecar.stop().await;
}

async fn the_api_needs_the_token_and_answers_json_errors(db: Db) {
    let sidecar = Sidecar::start(&db, &api_only()).await;
    let (status, body) = sidecar
        .api(Method::GET, "/responses/lc_unknown/checks")
        .await;
    assert_eq!(status, 404);
    assert!(body["error"].is_string());
    for path in [
        "/responses/lc_x/checks",
        "/agents/orders/checks/summary",
        "/people/p1/checks",
    ] {
        let method = if path.starts_with("/people") {
            Method::DELETE
        } else {
            Method::GET
        };
        for token in [None, Some("wrong"), Some("op-token-7f3a9")] {
            let (status, body) = sidecar.api_with(method.clone(), path, token).await;
            assert_eq!(status, 401, "{path} {token:?}");
            assert!(body["error"].is_string());
        }
    }
    sidecar.stop().await;

    // Without a token configured the API is closed, never open.
    let closed = Sidecar::start(&db, &Extras::default()).await;
    let (status, body) = closed
        .api(Method::GET, "/agents/orders/checks/summary")
        .await;
    assert_eq!(
        (status, body),
        (503, json!({"error": "no operator token configured"}))
    );
    closed.stop().await;
}

async fn a_bad_report_is_refused_400_naming_the_field(db: Db) {
    let sidecar = Sidecar::start(&db, &api_only()).await;
    let good =
        serde_json::to_value(report("lc_1", "orders", vec![result("a", Failed, 1)])).unwrap();
    let cases: Vec<(Value, &str)> = vec![
        (json!({"turn_id": "lc_1"}), "misses the field"),
        (
            {
                let mut v = good.clone();
                v["results"][0]["outcome"] = json!("SECRET-TEXT");
                v
            },
            "results[0].outcome",
        ),
        (
            {
                let mut v = good.clone();
                v["results"][0]["attempt"] = json!(0);
                v
            },
            "results[0].attempt",
        ),
        (
            {
                let mut v = good.clone();
                v["agent"] = json!("");
                v
            },
            "agent",
        ),
        (
            {
                let mut v = good.clone();
                v["results"][0]["alert"] = json!({"failure_rate": 0, "over_last": 5});
                v
            },
            "results[0].alert.failure_rate",
        ),
    ];
    for (body, needle) in cases {
        let (status, answer) = sidecar.post_report_with(&body.to_string(), &[]).await;
        assert_eq!(status, 400, "{body}");
        let error = answer["error"].as_str().unwrap();
        assert!(error.contains(needle), "{error:?} should name {needle}");
        assert!(!error.contains("SECRET"), "{error}");
    }
    let (status, _) = sidecar.post_report_with("{not json SECRET", &[]).await;
    assert_eq!(status, 400);
    assert!(db.dump().await.is_empty(), "nothing stored");
    sidecar.stop().await;
}

async fn a_batch_stores_each_valid_report_once_and_skips_a_bad_one(db: Db) {
    let sidecar = Sidecar::start(&db, &api_only()).await;
    let (a, b) = (turn_id(), turn_id());
    let good = |id: &str| {
        serde_json::to_value(report(
            id,
            "orders",
            vec![result("x", Failed, 1), result("y", Passed, 1)],
        ))
        .unwrap()
    };
    let mut bad = good(&turn_id());
    bad["results"][0]["attempt"] = json!(0);
    let batch = json!({"reports": [good(&a), bad, good(&b)]}).to_string();
    assert_eq!(
        sidecar.post_with("/v1/results/batch", &batch, &[]).await,
        (200, json!({"stored": 4, "skipped": 1}))
    );
    assert_eq!(sidecar.all_checks(&a).await.len(), 2);
    assert_eq!(sidecar.all_checks(&b).await.len(), 2);
    // Sent again whole (the filter got no answer): nothing stored twice.
    assert_eq!(
        sidecar.post_with("/v1/results/batch", &batch, &[]).await,
        (200, json!({"stored": 0, "skipped": 1}))
    );
    let (status, answer) = sidecar
        .post_with("/v1/results/batch", r#"{"reports": [], "SECRET": 1}"#, &[])
        .await;
    assert_eq!(status, 400);
    assert!(!answer["error"].as_str().unwrap().contains("SECRET"));
    sidecar.app.store().unwrap().close().await;
    let (status, _) = sidecar.post_with("/v1/results/batch", &batch, &[]).await;
    assert_eq!(
        status, 503,
        "a store that fails fails the batch, sent again"
    );
    sidecar.stop().await;
}

/// The store writes a batch in multi-row statements of 256 rows: more turns and results than
/// that, and a turn two reports of the batch name, are stored as if sent one after the other.
async fn a_batch_larger_than_one_statement_stores_every_result_once_in_order(db: Db) {
    let sidecar = Sidecar::start(&db, &api_only()).await;
    let ids: Vec<String> = (0..270).map(|_| turn_id()).collect();
    let mut reports: Vec<Value> = ids
        .iter()
        .map(|id| {
            serde_json::to_value(report(
                id,
                "orders",
                vec![result("x", Passed, 1), result("y", Failed, 1)],
            ))
            .unwrap()
        })
        .collect();
    // The first turn again, later in the batch: its response id comes now, one result repeats.
    let mut again = report(
        &ids[0],
        "orders",
        vec![result("y", Failed, 1), result("x", Passed, 2)],
    );
    again.response_id = Some("resp_twice".into());
    reports.push(serde_json::to_value(again).unwrap());
    let batch = json!({"reports": reports}).to_string();
    assert_eq!(
        sidecar.post_with("/v1/results/batch", &batch, &[]).await,
        (200, json!({"stored": 541, "skipped": 0}))
    );
    let items = sidecar.all_checks("resp_twice").await;
    let order: Vec<(String, u64)> = items
        .iter()
        .map(|i| {
            (
                i["name"].as_str().unwrap().to_owned(),
                i["attempt"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        order,
        [("x".into(), 1), ("y".into(), 1), ("x".into(), 2)],
        "in the order decided"
    );
    assert_eq!(items[0]["response_id"], "resp_twice");
    for id in [&ids[1], &ids[200], &ids[269]] {
        assert_eq!(sidecar.all_checks(id).await.len(), 2, "{id}");
    }
    assert_eq!(
        sidecar.post_with("/v1/results/batch", &batch, &[]).await,
        (200, json!({"stored": 0, "skipped": 0})),
        "sent again: nothing stored twice"
    );
    sidecar.stop().await;
}

async fn a_closed_store_answers_503(db: Db) {
    let sidecar = Sidecar::start(&db, &api_only()).await;
    sidecar.app.store().unwrap().close().await;
    let (status, body) = sidecar
        .post_report(&report(&turn_id(), "orders", vec![result("a", Passed, 1)]))
        .await;
    assert_eq!(status, 503, "{body}");
    let (status, _) = sidecar
        .api(Method::GET, "/agents/orders/checks/summary")
        .await;
    assert_eq!(status, 503);
    sidecar.stop().await;
}

async fn the_summary_counts_each_check_since_a_time(db: Db) {
    let sidecar = Sidecar::start(&db, &api_only()).await;
    let now = ids::now_ms() as u64;
    let day = 86_400_000u64;
    let at = |mut r: livecheck_wire::CheckResult, ms: u64| {
        r.created_at_ms = ms;
        r
    };
    let turns = [
        (
            "orders",
            "1",
            vec![
                at(result("tone", Passed, 1), now),
                at(result("no-pw", Failed, 1), now),
            ],
        ),
        (
            "orders",
            "2",
            vec![
                at(result("tone", Errored, 1), now - day),
                at(result("no-pw", Passed, 1), now - day),
            ],
        ),
        (
            "orders",
            "2",
            vec![at(result("tone", Failed, 1), now - 10 * day)],
        ),
        ("billing", "1", vec![at(result("tone", Failed, 1), now)]),
    ];
    for (agent, version, results) in turns {
        let mut r = report(&turn_id(), agent, results);
        r.version = version.into();
        assert_eq!(sidecar.post_report(&r).await.0, 200);
    }
    let (status, body) = sidecar
        .api(Method::GET, "/agents/orders/checks/summary")
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        body["items"],
        json!([{"name": "no-pw", "passed": 1, "failed": 1, "errored": 0},
               {"name": "tone", "passed": 1, "failed": 0, "errored": 1}]),
        "seven days back, every version"
    );
    let since_ms = ids::now_ms() - 30 * 86_400_000;
    let since = ids::rfc3339(since_ms);
    let (status, body) = sidecar
        .api(
            Method::GET,
            &format!("/agents/orders/checks/summary?since={since}"),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(body["since"], since.as_str());
    assert_eq!(
        body["items"][1],
        json!({"name": "tone", "passed": 1, "failed": 1, "errored": 1})
    );
    for bad in ["since=yesterday", "since=2020-01-01T00:00:00Z"] {
        let (status, _) = sidecar
            .api(Method::GET, &format!("/agents/orders/checks/summary?{bad}"))
            .await;
        assert_eq!(status, 400, "{bad}");
    }
    let (_, body) = sidecar
        .api(Method::GET, "/agents/nobody/checks/summary")
        .await;
    assert_eq!(body["items"], json!([]));
    sidecar.stop().await;
}

async fn erasure_removes_every_turn_of_a_person(db: Db) {
    let sidecar = Sidecar::start(&db, &api_only()).await;
    let ids_of = |person: &str| {
        let id = turn_id();
        let mut r = report(&id, "orders", vec![result("a", Failed, 1)]);
        r.person = Some(person.into());
        (id, r)
    };
    let (a1, r1) = ids_of("alice");
    let (a2, r2) = ids_of("alice");
    let (b1, r3) = ids_of("bob");
    for r in [r1, r2, r3] {
        assert_eq!(sidecar.post_report(&r).await.0, 200);
    }
    for _ in 0..2 {
        let (status, _) = sidecar.api(Method::DELETE, "/people/alice/checks").await;
        assert_eq!(status, 204);
    }
    for gone in [&a1, &a2] {
        let (status, _) = sidecar
            .api(Method::GET, &format!("/responses/{gone}/checks"))
            .await;
        assert_eq!(status, 404);
    }
    assert_eq!(sidecar.all_checks(&b1).await.len(), 1);
    let dump = db.dump().await.join("\n");
    assert!(!dump.contains("alice"), "{dump}");
    sidecar.stop().await;
}

async fn the_retention_sweep_at_start_deletes_old_turns(db: Db) {
    let sidecar = Sidecar::start(&db, &api_only()).await;
    let (old, young) = (turn_id(), turn_id());
    for id in [&old, &young] {
        sidecar
            .post_report(&report(id, "orders", vec![result("a", Passed, 1)]))
            .await;
    }
    sidecar.stop().await;
    let long_ago = ids::now_ms() - 31 * 86_400_000;
    db.execute(&format!(
        "UPDATE turns SET created_at = {long_ago} WHERE turn_id = '{old}'"
    ))
    .await;
    let restarted = Sidecar::start(&db, &api_only()).await;
    wait_until("the sweep ran", async || {
        db.rows(&format!(
            "SELECT turn_id FROM turns WHERE turn_id = '{old}'"
        ))
        .await
        .is_empty()
    })
    .await;
    assert!(db
        .rows(&format!("SELECT id FROM results WHERE turn_id = '{old}'"))
        .await
        .is_empty());
    assert_eq!(restarted.all_checks(&young).await.len(), 1);
    restarted.stop().await;
}

async fn an_alert_fires_once_under_a_burst_and_not_before_over_last(db: Db) {
    let slack = Recorder::start().await;
    let smtp = SmtpDouble::start().await;
    let extras = Extras {
        slack: Some(slack.url.clone()),
        smtp_port: Some(smtp.port),
        ..api_only()
    };
    let sidecar = Sidecar::start(&db, &extras).await;
    let failing = || alerting(result("no-iban", Failed, 1), 0.5, 10);
    for _ in 0..9 {
        let r = report(&turn_id(), "orders", vec![failing()]);
        assert_eq!(sidecar.post_report(&r).await.0, 200);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        slack.bodies().is_empty(),
        "9 results are fewer than over_last"
    );

    let sidecar = std::sync::Arc::new(sidecar);
    let burst: Vec<_> = (0..20)
        .map(|_| {
            let sidecar = std::sync::Arc::clone(&sidecar);
            tokio::spawn(async move {
                let r = report(&turn_id(), "orders", vec![failing()]);
                sidecar.post_report(&r).await.0
            })
        })
        .collect();
    for task in burst {
        assert_eq!(task.await.unwrap(), 200);
    }
    wait_until("the alert went out", async || {
        !slack.bodies().is_empty() && !smtp.mails().is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let bodies = slack.bodies();
    assert_eq!(bodies.len(), 1, "{bodies:?}");
    let text: Value = serde_json::from_str(&bodies[0]).unwrap();
    let text = text["text"].as_str().unwrap();
    assert!(
        text.contains("\"no-iban\"")
            && text.contains("\"orders\"")
            && text.contains("10 of its last 10"),
        "{text}"
    );
    let mails = smtp.mails();
    assert_eq!(mails.len(), 1, "{mails:?}");
    assert!(
        mails[0].contains("no-iban") && mails[0].contains("orders"),
        "{}",
        mails[0]
    );
    std::sync::Arc::into_inner(sidecar).unwrap().stop().await;
}

async fn an_alert_fires_once_a_day_across_a_restart(db: Db) {
    let slack = Recorder::start().await;
    let extras = Extras {
        slack: Some(slack.url.clone()),
        ..api_only()
    };
    let failing = || alerting(result("tone", Failed, 1), 1.0, 2);
    let sidecar = Sidecar::start(&db, &extras).await;
    for _ in 0..2 {
        sidecar
            .post_report(&report(&turn_id(), "orders", vec![failing()]))
            .await;
    }
    wait_until("the alert went out", async || slack.bodies().len() == 1).await;
    sidecar.stop().await;

    let restarted = Sidecar::start(&db, &extras).await;
    for _ in 0..3 {
        restarted
            .post_report(&report(&turn_id(), "orders", vec![failing()]))
            .await;
    }
    // Another agent's check of the same name is its own alert.
    for _ in 0..2 {
        restarted
            .post_report(&report(&turn_id(), "billing", vec![failing()]))
            .await;
    }
    wait_until("billing's alert went out", async || {
        slack.bodies().len() == 2
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(slack.bodies().len(), 2, "{:?}", slack.bodies());
    restarted.stop().await;
}

async fn a_background_check_is_judged_with_the_turns_key_and_stored(db: Db) {
    let double = BackendDouble::start(Vendor::OpenAi, verdict(false, 0.2, "Rude.")).await;
    let hook = Recorder::start().await;
    let extras = Extras {
        backend: Some(backend_config(&double, false)),
        webhooks: vec![hook.url.clone()],
        ..api_only()
    };
    let sidecar = Sidecar::start(&db, &extras).await;
    let id = turn_id();
    let mut judge = output("polite_tone", "Where is order 17?", "Go away.");
    judge.judge_model = "judge-small".into();
    let mut r = report(&id, "orders", vec![result("no-pw", Passed, 1)]);
    r.background.push(background("tone", judge));
    let auth = format!("Bearer {KEY}");
    let (status, body) = sidecar
        .post_report_with(
            &serde_json::to_string(&r).unwrap(),
            &[("authorization", &auth)],
        )
        .await;
    assert_eq!((status, body), (200, json!({"stored": 1})));
    wait_until("the background result is stored", async || {
        sidecar.all_checks(&id).await.len() == 2
    })
    .await;
    let items = sidecar.all_checks(&id).await;
    let tone = &items[1];
    assert_eq!(
        (
            &tone["name"],
            &tone["mode"],
            &tone["attempt"],
            &tone["outcome"],
            &tone["judge_model"]
        ),
        (
            &json!("tone"),
            &json!("background"),
            &json!(1),
            &json!("failed"),
            &json!("judge-small")
        )
    );
    assert_eq!(tone["reason"], "Rude.");
    assert_eq!(
        double.only_request().header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert!(db.rows("SELECT name FROM pending_checks").await.is_empty());
    // Sent again: judged already, so neither pending nor judged again.
    assert_eq!(sidecar.post_report(&r).await, (200, json!({"stored": 0})));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(double.seen().len(), 1);
    assert!(db.rows("SELECT name FROM pending_checks").await.is_empty());
    wait_until("the event arrived", async || hook.bodies().len() == 1).await;
    sidecar.stop().await;
}

async fn a_pending_check_without_its_key_after_a_restart(db: Db) {
    for fallback in [false, true] {
        let slow = BackendDouble::start(Vendor::OpenAi, Answer::Slow(Duration::from_secs(2))).await;
        let extras = Extras {
            backend: Some(backend_config(&slow, fallback)),
            fallback_key: fallback.then(|| "sk-fallback-1".to_owned()),
            ..api_only()
        };
        let sidecar = Sidecar::start(&db, &extras).await;
        let id = turn_id();
        let mut judge = output("polite_tone", "Q?", "A.");
        judge.judge_model = "judge-small".into();
        let mut r = report(&id, "orders", vec![]);
        r.background.push(background("tone", judge));
        let auth = format!("Bearer {KEY}");
        let (status, _) = sidecar
            .post_report_with(
                &serde_json::to_string(&r).unwrap(),
                &[("authorization", &auth)],
            )
            .await;
        assert_eq!(status, 200);
        wait_until("the judge was asked", async || !slow.seen().is_empty()).await;
        // The sidecar stops mid-judgement: the check stays pending, durably; its key is gone.
        sidecar.stop().await;
        assert_eq!(db.rows("SELECT name FROM pending_checks").await.len(), 1);

        let fast = BackendDouble::start(Vendor::OpenAi, verdict(true, 1.0, "Fine.")).await;
        let extras = Extras {
            backend: Some(backend_config(&fast, fallback)),
            ..extras
        };
        let restarted = Sidecar::start(&db, &extras).await;
        wait_until("the pending check is judged", async || {
            restarted.all_checks(&id).await.len() == 1
        })
        .await;
        let item = &restarted.all_checks(&id).await[0];
        if fallback {
            assert_eq!(item["outcome"], "passed");
            assert_eq!(
                fast.only_request().header("authorization"),
                Some("Bearer sk-fallback-1")
            );
        } else {
            assert_eq!(item["outcome"], "errored");
            assert_eq!(item["reason"], livecheck_judge::pending::NO_KEY_REASON);
            assert!(fast.seen().is_empty());
        }
        assert!(db.rows("SELECT name FROM pending_checks").await.is_empty());
        restarted.stop().await;
    }
}

async fn events_are_signed_and_verified_by_a_python_receiver(db: Db) {
    // The receiver refuses the first delivery (500): the event comes again, with the same id.
    let receiver = PyReceiver::start(1);
    let extras = Extras {
        webhooks: vec![receiver.url.clone()],
        ..api_only()
    };
    let sidecar = Sidecar::start(&db, &extras).await;
    let id = turn_id();
    let mut r = report(
        &id,
        "orders",
        vec![result("no-pw", Failed, 1), result("tone", Errored, 1)],
    );
    r.response_id = Some("resp_9".into());
    sidecar.post_report(&r).await;
    wait_until("both events were accepted", async || {
        receiver.log().await["accepted"].as_array().unwrap().len() == 2
    })
    .await;
    let log = receiver.log().await;
    assert_eq!(log["rejected"], json!([]), "{log}");
    let accepted = log["accepted"].as_array().unwrap();
    let mut outcomes: Vec<&str> = accepted
        .iter()
        .map(|a| a["body"]["data"]["outcome"].as_str().unwrap())
        .collect();
    outcomes.sort();
    assert_eq!(outcomes, ["errored", "failed"]);
    for a in accepted {
        assert!(a["id"].as_str().unwrap().starts_with("evt_"));
        assert_eq!(a["id"], a["body"]["id"]);
        assert_eq!(a["body"]["data"]["response_id"], "resp_9");
        assert!(a["body"]["created_at"].as_str().unwrap().ends_with('Z'));
    }

    // The receiver refuses a tampered body, a stale timestamp and a replay.
    let client = reqwest::Client::new();
    let body = serde_json::to_string(&accepted[0]["body"]).unwrap();
    let event_id = accepted[0]["id"].as_str().unwrap();
    let secret = livecheck_judge::config::Secret::new(HOOK_SECRET);
    let send = async |id: &str, ts: i64, signed: &str, sent: &str| {
        client
            .post(&receiver.url)
            .header("webhook-id", id)
            .header("webhook-timestamp", ts.to_string())
            .header(
                "webhook-signature",
                livecheck_judge::events::signature(&secret, id, ts, signed),
            )
            .body(sent.to_owned())
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    };
    let now = ids::now_ms() / 1000;
    let tampered = body.replace("no-pw", "no-pX").replace("tone", "tonX");
    assert_eq!(send("evt_new", now, &body, &tampered).await, 401);
    assert_eq!(send("evt_new", now - 3600, &body, &body).await, 400);
    assert_eq!(send(event_id, now, &body, &body).await, 409);
    assert_eq!(
        receiver.log().await["rejected"],
        json!(["signature", "timestamp", "replay"])
    );
    sidecar.stop().await;
}

async fn no_text_reaches_rows_events_alerts_or_logs(db: Db) {
    const TEXT: &str = "TEXTMARK-5b1e";
    const REASON: &str = "REASONMARK-c7d2";
    let logs = common::results::capture_logs();
    let double = BackendDouble::start(
        Vendor::Anthropic,
        verdict(false, 0.1, &format!("Not polite {REASON}.")),
    )
    .await;
    let slack = Recorder::start().await;
    let smtp = SmtpDouble::start().await;
    let hook = Recorder::start().await;
    let extras = Extras {
        backend: Some(backend_config(&double, false)),
        slack: Some(slack.url.clone()),
        smtp_port: Some(smtp.port),
        webhooks: vec![hook.url.clone()],
        ..api_only()
    };
    let sidecar = Sidecar::start(&db, &extras).await;
    let id = turn_id();
    let mut judge = output(
        "custom_rule",
        &format!("question {TEXT}"),
        &format!("answer {TEXT}"),
    );
    judge.rule = Some(format!("rule {TEXT}"));
    judge.judge_model = "judge-big".into();
    let mut blocking = alerting(result("no-pw", Failed, 1), 0.5, 1);
    blocking.reason = format!("Judge said {REASON}.");
    let mut r = report(&id, "orders", vec![blocking]);
    r.background.push(background("rule", judge));
    r.background[0].alert = Some(livecheck_wire::Alert {
        failure_rate: 0.5,
        over_last: 1,
    });
    sidecar
        .post_report_with(&serde_json::to_string(&r).unwrap(), &[("x-api-key", KEY)])
        .await;
    wait_until("everything went out", async || {
        sidecar.all_checks(&id).await.len() == 2
            && hook.bodies().len() == 2
            && slack.bodies().len() == 2
            && smtp.mails().len() == 2
    })
    .await;
    assert!(
        double.only_request().body.to_string().contains(TEXT),
        "the judge itself read the text"
    );
    let rows = db.dump().await.join("\n");
    assert!(!rows.contains(TEXT), "{rows}");
    assert!(!rows.contains(KEY), "{rows}");
    assert!(rows.contains(REASON), "reasons are stored: {rows}");
    for (what, texts) in [
        ("events", hook.bodies()),
        ("slack", slack.bodies()),
        ("mail", smtp.mails()),
    ] {
        for text in texts {
            assert!(
                !text.contains(TEXT) && !text.contains(REASON),
                "{what}: {text}"
            );
        }
    }
    sidecar.stop().await;
    let logs = logs.lock().unwrap().clone();
    assert!(
        logs.contains("turn report stored"),
        "the logs were captured"
    );
    for secret in [TEXT, REASON, KEY, TOKEN, HOOK_SECRET] {
        assert!(!logs.contains(secret), "{secret} in the logs:\n{logs}");
    }
}

async fn tool_call_results_are_stored_once_per_call_and_name_their_tool(db: Db) {
    let hook = Recorder::start().await;
    let extras = Extras {
        token: true,
        webhooks: vec![hook.url.clone()],
        ..Extras::default()
    };
    let sidecar = Sidecar::start(&db, &extras).await;
    let id = turn_id();
    // One row on two calls of the same answer: two results of the same check and attempt.
    let r = report(
        &id,
        "mailer",
        vec![
            result("no-pw", Passed, 1),
            tool_result("no-billing-mail", Passed, "send_email", 1),
            tool_result("no-billing-mail", Failed, "send_email", 2),
        ],
    );
    assert_eq!(sidecar.post_report(&r).await, (200, json!({"stored": 3})));
    // Delivered again (the filter did not see the 200): nothing stored or evented twice.
    assert_eq!(sidecar.post_report(&r).await, (200, json!({"stored": 0})));
    // A later delivery with a third call stores only that one.
    let mut more = r.clone();
    more.results
        .push(tool_result("no-billing-mail", Errored, "send_email", 3));
    assert_eq!(
        sidecar.post_report(&more).await,
        (200, json!({"stored": 1}))
    );
    assert_eq!(
        sidecar.post_report(&more).await,
        (200, json!({"stored": 0}))
    );

    let items = sidecar.all_checks(&id).await;
    assert_eq!(items.len(), 4, "{items:?}");
    let rule = items[0].as_object().unwrap();
    assert!(
        !rule.contains_key("tool") && !rule.contains_key("call"),
        "results that are not tool calls' read as before: {rule:?}"
    );
    let calls: Vec<(&Value, &Value, &Value)> = items[1..]
        .iter()
        .map(|i| (&i["tool"], &i["call"], &i["outcome"]))
        .collect();
    assert_eq!(
        calls,
        [
            (&json!("send_email"), &json!(1), &json!("passed")),
            (&json!("send_email"), &json!(2), &json!("failed")),
            (&json!("send_email"), &json!(3), &json!("errored")),
        ]
    );
    assert_eq!(items[2]["name"], "no-billing-mail");
    assert_eq!(items[2]["reason"], "No billing information in email.");
    assert_eq!(items[2]["score"], Value::Null);

    // One event per call that did not pass, naming the tool and the call; never the reason.
    wait_until("both events arrived", async || hook.bodies().len() == 2).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut data: Vec<Value> = hook
        .bodies()
        .iter()
        .map(|b| serde_json::from_str::<Value>(b).unwrap()["data"].clone())
        .collect();
    assert_eq!(data.len(), 2, "{data:?}");
    data.sort_by_key(|d| d["call"].as_u64());
    assert_eq!(
        data[0],
        json!({"name": "no-billing-mail", "stage": "output", "kind": "tool_check",
               "outcome": "failed", "response_id": id, "tool": "send_email", "call": 2})
    );
    assert_eq!(data[1]["call"], 3);
    assert_eq!(data[1]["outcome"], "errored");
    for body in hook.bodies() {
        assert!(!body.contains("No billing information"), "{body}");
    }

    // The summary counts each call's result.
    let (_, summary) = sidecar
        .api(Method::GET, "/agents/mailer/checks/summary")
        .await;
    assert_eq!(
        summary["items"],
        json!([{"name": "no-billing-mail", "passed": 1, "failed": 1, "errored": 1},
               {"name": "no-pw", "passed": 1, "failed": 0, "errored": 0}])
    );
    sidecar.stop().await;
}

async fn a_bad_tool_call_result_is_refused_400(db: Db) {
    let sidecar = Sidecar::start(&db, &api_only()).await;
    let good = serde_json::to_value(report(
        "lc_1",
        "mailer",
        vec![tool_result("no-billing-mail", Failed, "send_email", 1)],
    ))
    .unwrap();
    for (field, value, needle) in [
        ("call", json!(0), "results[0].call"),
        ("call", json!(-1), "results[0].call"),
        ("tool", json!(""), "results[0].tool"),
        ("tool", json!("send\nemail"), "results[0].tool"),
    ] {
        let mut body = good.clone();
        body["results"][0][field] = value;
        let (status, answer) = sidecar.post_report_with(&body.to_string(), &[]).await;
        assert_eq!(status, 400, "{body}");
        let error = answer["error"].as_str().unwrap();
        assert!(error.contains(needle), "{error:?} should name {needle}");
    }
    assert!(db.dump().await.is_empty(), "nothing stored");
    sidecar.stop().await;
}

async fn a_database_of_the_first_release_is_migrated_with_every_row(db: Db) {
    db.at_migration_0001().await;
    let (old, other) = (turn_id(), turn_id());
    for (id, response) in [(&old, "'msg_old'"), (&other, "NULL")] {
        db.execute(&format!(
            "INSERT INTO turns (turn_id, response_id, agent, version, person, created_at) \
             VALUES ('{id}', {response}, 'mailer', '1', 'p1', {})",
            ids::now_ms()
        ))
        .await;
    }
    // (id, turn, seq, name, kind, attempt, outcome, score, judge_model, passed_on_error)
    let rows = [
        format!("'rck_a', '{old}', 1, 'tone', 'polite_tone', 1, 'failed', 0.25, 'judge-a', 0"),
        format!("'rck_b', '{old}', 2, 'tone', 'polite_tone', 2, 'passed', 0.9, 'judge-a', 0"),
        format!("'rck_c', '{old}', 3, 'no-pw', 'not_contains', 1, 'errored', NULL, NULL, 1"),
        format!("'rck_d', '{other}', 1, 'no-pw', 'not_contains', 1, 'passed', NULL, NULL, 0"),
    ];
    for row in rows {
        db.execute(&format!(
            "INSERT INTO results (id, turn_id, seq, name, kind, attempt, outcome, score, \
             judge_model, passed_on_error, agent, version, stage, mode, reason, created_at) \
             VALUES ({row}, 'mailer', '1', 'output', 'block', 'A reason.', 1792142043000)"
        ))
        .await;
    }
    db.execute(&format!(
        "INSERT INTO event_outbox (id, webhook, turn_id, body, attempts, next_attempt_at, created_at) \
         VALUES ('evt_old', 'http://127.0.0.1:9/gone', '{old}', '{{}}', 0, 9999999999999, 1)"
    ))
    .await;
    let before = db
        .rows("SELECT id, turn_id, seq, name, attempt, outcome, score, reason, judge_model FROM results ORDER BY id")
        .await;

    let sidecar = Sidecar::start(&db, &api_only()).await;
    assert_eq!(
        db.rows("SELECT version, name FROM livecheck_migrations ORDER BY version")
            .await,
        [
            ["Some(1)", "results"],
            ["Some(2)", "tool_calls"],
            ["Some(3)", "alert_rules"],
            ["Some(4)", "replicas"]
        ]
    );
    // Every row kept, as it was, with no tool and call 0.
    let after = db
        .rows("SELECT id, turn_id, seq, name, attempt, outcome, score, reason, judge_model FROM results ORDER BY id")
        .await;
    assert_eq!(after, before, "{}", db.kind);
    assert_eq!(
        db.rows("SELECT tool, tool_call FROM results").await,
        vec![vec!["".to_owned(), "Some(0)".to_owned()]; 4]
    );
    assert_eq!(db.rows("SELECT id FROM event_outbox").await, [["evt_old"]]);

    // Read back through the API as before, by either id.
    let items = sidecar.all_checks("msg_old").await;
    assert_eq!(items.len(), 3);
    assert_eq!(items[0]["id"], "rck_a");
    assert_eq!(items[0]["score"], 0.25);
    assert_eq!(items[1]["attempt"], 2);
    assert_eq!(items[2]["passed_on_error"], true);
    for item in &items {
        let item = item.as_object().unwrap();
        assert!(
            !item.contains_key("tool") && !item.contains_key("call"),
            "{item:?}"
        );
    }

    // The old rows still dedupe a report sent again: only what is new is stored, after them.
    let mut again = report(
        &old,
        "mailer",
        vec![
            result("tone", Failed, 1),
            result("no-pw", Errored, 1),
            tool_result("tone", Failed, "send_email", 1),
            result("tone", Passed, 3),
        ],
    );
    again.response_id = Some("msg_old".into());
    assert_eq!(
        sidecar.post_report(&again).await,
        (200, json!({"stored": 2}))
    );
    let items = sidecar.all_checks(&old).await;
    assert_eq!(items.len(), 5);
    assert_eq!(items[3]["tool"], "send_email");
    assert_eq!(items[3]["call"], 1);
    assert_eq!(items[4]["attempt"], 3);

    // Retention and erasure still reach the migrated table.
    let (status, _) = sidecar.api(Method::DELETE, "/people/p1/checks").await;
    assert_eq!(status, 204);
    assert!(db.rows("SELECT id FROM results").await.is_empty());
    sidecar.stop().await;

    // A second start applies nothing again.
    let restarted = Sidecar::start(&db, &api_only()).await;
    assert_eq!(
        db.rows("SELECT version FROM livecheck_migrations")
            .await
            .len(),
        4
    );
    restarted.stop().await;
}
