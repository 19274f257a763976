//! Schema migrations, run on start: each file in `judge/migrations/` once, in order, in its own
//! transaction, recorded in `livecheck_migrations`. On PostgreSQL an advisory lock keeps two sidecars
//! starting together from applying the same migration twice.

use sqlx::AnyPool;

use super::{Flavor, StoreError};

/// (version, name, SQL), in order. A shipped migration is never edited: add the next one.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "results",
        include_str!("../../migrations/0001_results.sql"),
    ),
    (
        2,
        "tool_calls",
        include_str!("../../migrations/0002_tool_calls.sql"),
    ),
    (
        3,
        "alert_rules",
        include_str!("../../migrations/0003_alert_rules.sql"),
    ),
];

/// An arbitrary constant naming livecheck's migration lock.
const LOCK_KEY: i64 = 0x006c_636a_7564_6765;

pub(super) async fn run(pool: &AnyPool, flavor: Flavor) -> Result<(), StoreError> {
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS livecheck_migrations (\
         version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)",
    )
    .execute(pool)
    .await?;
    for (version, name, sql) in MIGRATIONS {
        let mut tx = pool.begin().await?;
        if flavor == Flavor::Postgres {
            // The lock function returns void, which the Any driver cannot read: select around it.
            sqlx::query("SELECT 1 FROM (SELECT pg_advisory_xact_lock($1)) AS locked")
                .bind(LOCK_KEY)
                .execute(&mut *tx)
                .await?;
        }
        let applied: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM livecheck_migrations WHERE version = $1")
                .bind(version)
                .fetch_one(&mut *tx)
                .await?;
        if applied == 0 {
            sqlx::raw_sql(sql).execute(&mut *tx).await?;
            sqlx::query(
                "INSERT INTO livecheck_migrations (version, name, applied_at) VALUES ($1, $2, $3)",
            )
            .bind(version)
            .bind(*name)
            .bind(crate::ids::now_ms())
            .execute(&mut *tx)
            .await?;
            tracing::info!(version, name, "store migrated");
        }
        tx.commit().await?;
    }
    Ok(())
}
