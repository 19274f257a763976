//! The store's schema under several replicas (issue 52): replicas starting at once on a fresh
//! PostgreSQL database all come up and apply each migration once, and a database that a newer
//! sidecar migrated further (a rolling upgrade, or a rollback) still opens and works here.
//! docs/design/024-replica-schema.md says why.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use common::results::*;
use livecheck_judge::store::Store;
use livecheck_wire::Outcome::Failed;

/// The migrations this sidecar ships, as `livecheck_migrations` records them.
const VERSIONS: [&str; 4] = ["Some(1)", "Some(2)", "Some(3)", "Some(4)"];

async fn recorded_versions(db: &Db) -> Vec<String> {
    db.rows("SELECT version FROM livecheck_migrations ORDER BY version")
        .await
        .into_iter()
        .map(|row| row.concat())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_replicas_starting_at_once_on_a_fresh_database_all_open_it() {
    let db = Db::postgres().await;
    // Local tasks: the compiler cannot prove sqlx's `Any` futures `Send` for `tokio::spawn`. Each
    // open has its own pool and connections, so the server sees eight starts at once all the same.
    let local = tokio::task::LocalSet::new();
    let stores = local
        .run_until(async {
            let opens: Vec<_> = (0..8)
                .map(|_| {
                    let url = db.url.clone();
                    tokio::task::spawn_local(async move { Store::open(&url).await })
                })
                .collect();
            let mut stores = Vec::new();
            for (i, open) in opens.into_iter().enumerate() {
                match open.await.unwrap() {
                    Ok(store) => stores.push(store),
                    Err(e) => panic!("replica {i} could not open the store: {e}"),
                }
            }
            stores
        })
        .await;
    assert_eq!(recorded_versions(&db).await, VERSIONS);
    assert!(db.rows("SELECT digest FROM sessions").await.is_empty());
    for store in &stores {
        store.ping().await.unwrap();
        store.close().await;
    }
}

on_both!(a_database_a_newer_sidecar_migrated_still_opens_and_works);

/// What a later migration may do (additive only: a nullable column, a new table), applied and
/// recorded as that sidecar would.
async fn migrate_as_a_newer_sidecar(db: &Db) {
    Store::open(&db.url).await.unwrap().close().await;
    db.execute("ALTER TABLE results ADD COLUMN judged_by TEXT")
        .await;
    db.execute("CREATE TABLE future_things (id TEXT PRIMARY KEY, note TEXT)")
        .await;
    db.execute(
        "INSERT INTO livecheck_migrations (version, name, applied_at) VALUES (5, 'future', 1), (99, 'far_future', 2)",
    )
    .await;
}

async fn a_database_a_newer_sidecar_migrated_still_opens_and_works(db: Db) {
    let logs = capture_logs();
    migrate_as_a_newer_sidecar(&db).await;

    let sidecar = Sidecar::start(
        &db,
        &Extras {
            token: true,
            ..Extras::default()
        },
    )
    .await;
    let id = turn_id();
    let (status, body) = sidecar
        .post_report(&report(&id, "orders", vec![result("no-pw", Failed, 1)]))
        .await;
    assert_eq!(status, 200, "{body}");
    let checks = sidecar.all_checks(&id).await;
    assert_eq!(checks.len(), 1);
    assert_eq!(checks[0]["outcome"], "failed");
    // The new column stays as the newer sidecar would find it: empty, never written here.
    assert_eq!(db.rows("SELECT judged_by FROM results").await, [[""]]);
    sidecar.stop().await;

    let mut versions = VERSIONS.map(String::from).to_vec();
    versions.extend(["Some(5)".to_owned(), "Some(99)".to_owned()]);
    assert_eq!(
        recorded_versions(&db).await,
        versions,
        "nothing applied again"
    );
    let logs = logs.lock().unwrap().clone();
    assert!(
        logs.lines()
            .any(|l| l.contains("migrated by a newer sidecar") && l.contains("newest=99")),
        "{logs}"
    );
}
