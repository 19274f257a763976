//! Several sidecar replicas on one PostgreSQL database, in this process (the deployment's shape, with
//! the workers' intervals shortened): each background check is claimed by one replica and judged with
//! its turn's key by the replica holding that key; a replica's work goes to the others when it is gone
//! (at once when it leaves cleanly, when its lease runs out when it dies); each event is delivered by
//! one replica. The same through real processes: `replicas.rs`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::doubles::{verdict, Answer, BackendDouble, Vendor};
use common::output;
use common::results::*;
use livecheck_judge::pending::NO_KEY_REASON;
use livecheck_wire::Outcome::Failed;
use serde_json::Value;

fn replica_config(judge: &BackendDouble, fallback: bool) -> Extras {
    Extras {
        token: true,
        backend: Some(backend_config(judge, fallback)),
        fallback_key: fallback.then(|| "sk-fallback-1".to_owned()),
        ..Extras::default()
    }
}

/// A report of turn `id` with one background check `tone`, as the filter sends it with the turn's key.
async fn report_background(replica: &Sidecar, id: &str, key: &str) {
    let mut judge = output("polite_tone", "Q?", "A.");
    judge.judge_model = "judge-small".into();
    let mut r = report(id, "orders", vec![]);
    r.background.push(background("tone", judge));
    let auth = format!("Bearer {key}");
    let (status, body) = replica
        .post_report_with(
            &serde_json::to_string(&r).unwrap(),
            &[("authorization", &auth)],
        )
        .await;
    assert_eq!(status, 200, "{body}");
}

/// The keys the judge double was asked with, each with how many times.
fn keys_asked(judge: &BackendDouble) -> HashMap<String, usize> {
    let mut keys = HashMap::new();
    for seen in judge.seen() {
        *keys
            .entry(seen.header("authorization").unwrap_or("").to_owned())
            .or_default() += 1;
    }
    keys
}

async fn results_of(db: &Db) -> Vec<Vec<String>> {
    db.rows("SELECT turn_id, name, attempt, outcome, reason FROM results ORDER BY turn_id")
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_background_check_is_judged_once_with_its_own_turns_key() {
    let db = Db::postgres().await;
    // With the backend's own key configured every replica could judge every check: only the claim
    // keeps them from judging each twice.
    let judge = BackendDouble::start(Vendor::OpenAi, verdict(true, 1.0, "Fine.")).await;
    let config = replica_config(&judge, true);
    let replicas = [
        Sidecar::start(&db, &config).await,
        Sidecar::start(&db, &config).await,
        Sidecar::start(&db, &config).await,
    ];
    let turns: Vec<String> = (0..12).map(|_| turn_id()).collect();
    for (i, id) in turns.iter().enumerate() {
        report_background(&replicas[i % 3], id, &format!("sk-turn-{i}")).await;
    }
    wait_until("every check is judged and stored", async || {
        results_of(&db).await.len() == turns.len()
    })
    .await;
    // Room for a second judgement of any check to show up.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let expected: HashMap<String, usize> = (0..turns.len())
        .map(|i| (format!("Bearer sk-turn-{i}"), 1))
        .collect();
    assert_eq!(keys_asked(&judge), expected);
    let results = results_of(&db).await;
    assert_eq!(results.len(), turns.len());
    assert!(results.iter().all(|r| r[3] == "passed"), "{results:?}");
    assert!(db.rows("SELECT name FROM pending_checks").await.is_empty());
    for replica in replicas {
        replica.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_replicas_check_is_taken_over_when_its_lease_runs_out_and_judged_without_its_key() {
    for fallback in [false, true] {
        let db = Db::postgres().await;
        let slow = BackendDouble::start(Vendor::OpenAi, Answer::Slow(Duration::from_secs(2))).await;
        let dying = Sidecar::start(&db, &replica_config(&slow, fallback)).await;
        let fast = BackendDouble::start(Vendor::OpenAi, verdict(true, 1.0, "Fine.")).await;
        let other = Sidecar::start(&db, &replica_config(&fast, fallback)).await;
        let id = turn_id();
        report_background(&dying, &id, "sk-turn-1").await;
        wait_until("the judge was asked", async || !slow.seen().is_empty()).await;
        // The replica dies mid-judgement: its claim and the key with it.
        dying.stop().await;

        wait_until("the other replica judged the check", async || {
            results_of(&db).await.len() == 1
        })
        .await;
        let results = results_of(&db).await;
        if fallback {
            assert_eq!(results[0][3], "passed");
            assert_eq!(
                fast.only_request().header("authorization"),
                Some("Bearer sk-fallback-1")
            );
        } else {
            assert_eq!(results[0][3], "errored");
            assert_eq!(results[0][4], NO_KEY_REASON);
            assert!(fast.seen().is_empty());
        }
        assert_eq!(slow.seen().len(), 1);
        assert!(db.rows("SELECT name FROM pending_checks").await.is_empty());
        other.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_leaving_cleanly_finishes_its_judgements_with_the_key_then_hands_over() {
    let db = Db::postgres().await;
    let slow = BackendDouble::start(Vendor::OpenAi, Answer::Slow(Duration::from_millis(800))).await;
    let leaving = Sidecar::start(&db, &replica_config(&slow, true)).await;
    let other = Sidecar::start(&db, &replica_config(&slow, true)).await;
    let replica = leaving.app.replica().to_owned();
    let id = turn_id();
    report_background(&leaving, &id, "sk-turn-1").await;
    wait_until("the judge was asked", async || !slow.seen().is_empty()).await;
    leaving.app.leave().await;

    let results = results_of(&db).await;
    assert_eq!(results.len(), 1, "the judgement in flight was finished");
    assert_eq!(results[0][3], "passed");
    assert_eq!(
        slow.only_request().header("authorization"),
        Some("Bearer sk-turn-1")
    );
    assert!(db
        .rows(&format!("SELECT id FROM replicas WHERE id = '{replica}'"))
        .await
        .is_empty());
    leaving.stop().await;
    other.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_sent_again_to_another_replica_gives_it_the_key_of_a_gone_one() {
    let db = Db::postgres().await;
    let judge = BackendDouble::start(Vendor::OpenAi, verdict(true, 1.0, "Fine.")).await;
    let replica = Sidecar::start(&db, &replica_config(&judge, false)).await;
    // As a replica left it that stored the report and died before answering: the filter sends the
    // report again, to another replica, with the key.
    let id = turn_id();
    let mut judged = output("polite_tone", "Q?", "A.");
    judged.judge_model = "judge-small".into();
    let request = serde_json::to_string(&judged).unwrap().replace('\'', "''");
    // (Stored now: the retention sweep at start deletes turns from long ago.)
    let now = livecheck_judge::ids::now_ms();
    db.execute(&format!(
        "INSERT INTO turns (turn_id, agent, version, created_at) VALUES ('{id}', 'orders', '1', {now})"
    ))
    .await;
    db.execute(&format!(
        "INSERT INTO pending_checks (turn_id, name, request, created_at, key_holder, claimed_by) \
         VALUES ('{id}', 'tone', '{request}', {now}, 'rep_gone', 'rep_gone')"
    ))
    .await;
    report_background(&replica, &id, "sk-turn-again").await;

    wait_until("the check is judged", async || {
        results_of(&db).await.len() == 1
    })
    .await;
    assert_eq!(results_of(&db).await[0][3], "passed");
    assert_eq!(
        judge.only_request().header("authorization"),
        Some("Bearer sk-turn-again")
    );
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_event_is_delivered_once_by_one_replica() {
    let db = Db::postgres().await;
    let hook = Recorder::start().await;
    let config = Extras {
        token: true,
        webhooks: vec![hook.url.clone()],
        ..Extras::default()
    };
    let replicas = [
        Sidecar::start(&db, &config).await,
        Sidecar::start(&db, &config).await,
        Sidecar::start(&db, &config).await,
    ];
    let n = 15;
    for i in 0..n {
        let r = report(&turn_id(), "orders", vec![result("no-secrets", Failed, 1)]);
        assert_eq!(replicas[i % 3].post_report(&r).await.0, 200);
    }
    wait_until("every event arrived", async || hook.bodies().len() >= n).await;
    // Every replica polls the outbox every 100 ms: room for a second delivery to show up.
    tokio::time::sleep(Duration::from_millis(600)).await;

    let mut ids: HashMap<String, usize> = HashMap::new();
    for (headers, body) in hook.seen.lock().unwrap().iter() {
        let id = headers["webhook-id"].to_str().unwrap().to_owned();
        let event: Value = serde_json::from_str(body).unwrap();
        assert_eq!(event["id"], id.as_str());
        *ids.entry(id).or_default() += 1;
    }
    assert_eq!(ids.len(), n);
    assert!(ids.values().all(|&count| count == 1), "{ids:?}");
    assert!(db.rows("SELECT id FROM event_outbox").await.is_empty());
    for replica in replicas {
        replica.stop().await;
    }
}
