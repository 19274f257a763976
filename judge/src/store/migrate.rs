//! Schema migrations, run on start: each file in `judge/migrations/` once, in order, in its own
//! transaction, recorded in `livecheck_migrations`.
//!
//! Several replicas may start at once on one PostgreSQL database: before any DDL (even the
//! `CREATE TABLE IF NOT EXISTS` of the record table, which two sessions racing on a fresh database
//! fail) each takes a session-level advisory lock on one connection and holds it across every
//! migration, so one replica migrates and the others then find the work done. That connection is
//! closed afterwards: whatever happens (an error, a cancelled start), its lock ends with it and never
//! stays on a pooled connection. SQLite: one sidecar, no lock.
//!
//! From migration 4 on every migration is additive (docs/design/024-replica-schema.md): an older replica
//! keeps running on the newer schema during a rolling upgrade, so a database recording versions this
//! sidecar does not know is opened as it is.

use sqlx::{AnyConnection, AnyPool, Connection};

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
    (
        4,
        "replicas",
        include_str!("../../migrations/0004_replicas.sql"),
    ),
];

/// An arbitrary constant naming livecheck's migration lock.
const LOCK_KEY: i64 = 0x006c_636a_7564_6765;

pub(super) async fn run(pool: &AnyPool, flavor: Flavor) -> Result<(), StoreError> {
    let mut conn = pool.acquire().await?;
    if flavor == Flavor::Sqlite {
        return migrate(&mut conn).await;
    }
    // The session lock must never outlive this start on a connection the pool hands out again.
    conn.close_on_drop();
    // The lock function returns void, which the Any driver cannot read: select around it.
    sqlx::query("SELECT 1 FROM (SELECT pg_advisory_lock($1)) AS locked")
        .bind(LOCK_KEY)
        .execute(&mut *conn)
        .await?;
    let migrated = migrate(&mut conn).await;
    // A failed migration's transaction was rolled back when it was dropped; the unlock runs after it.
    let unlocked = sqlx::query_scalar::<_, bool>("SELECT pg_advisory_unlock($1)")
        .bind(LOCK_KEY)
        .fetch_one(&mut *conn)
        .await;
    if let Err(e) = &unlocked {
        tracing::warn!(
            error = super::error_kind(e),
            "cannot release the migration lock: it ends with its connection, closed now"
        );
    }
    migrated
}

/// Applies every migration not recorded yet, each in its own transaction, on `conn` (which holds the
/// migration lock on PostgreSQL).
async fn migrate(conn: &mut AnyConnection) -> Result<(), StoreError> {
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS livecheck_migrations (\
         version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)",
    )
    .execute(&mut *conn)
    .await?;
    for (version, name, sql) in MIGRATIONS {
        let mut tx = conn.begin().await?;
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
    note_newer_migrations(conn).await
}

/// Logs the migrations a newer sidecar applied that this one does not know, and goes on: they are
/// additive, so this sidecar reads and writes the tables it knows as before (mid-rollout, or after a
/// rollback).
async fn note_newer_migrations(conn: &mut AnyConnection) -> Result<(), StoreError> {
    let known = MIGRATIONS.iter().map(|(v, _, _)| *v).max().unwrap_or(0);
    let newer: Vec<i64> = sqlx::query_scalar(
        "SELECT version FROM livecheck_migrations WHERE version > $1 ORDER BY version",
    )
    .bind(known)
    .fetch_all(&mut *conn)
    .await?;
    if let Some(newest) = newer.last() {
        tracing::info!(
            known,
            newest,
            unknown = newer.len(),
            "the store was migrated by a newer sidecar: running on it (its additions are ignored here)"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::MIGRATIONS;

    /// The first migration written for several replicas on one database; every one from here on
    /// is additive.
    const FIRST_ADDITIVE: i64 = 4;

    /// What in `sql` an older replica running on the new schema would break on, one line each: it
    /// still reads and writes the tables and columns it knows, by their names and types, and inserts
    /// rows without the columns it does not know.
    fn not_additive(sql: &str) -> Vec<String> {
        let code: String = sql
            .lines()
            .map(|line| line.split_once("--").map_or(line, |(code, _)| code))
            .collect::<Vec<_>>()
            .join(" ");
        let mut problems = Vec::new();
        for statement in code.split(';') {
            let words: Vec<String> = statement
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| !w.is_empty())
                .map(str::to_ascii_uppercase)
                .collect();
            let has = |w: &str| words.iter().any(|x| x == w);
            let has_pair = |a: &str, b: &str| words.windows(2).any(|p| p[0] == a && p[1] == b);
            let alter = has_pair("ALTER", "TABLE");
            let why = if has("DROP") {
                Some("drops something an older replica uses")
            } else if has("RENAME") {
                Some("renames something an older replica names")
            } else if alter && has("TYPE") {
                Some("changes a column's type")
            } else if alter && has_pair("SET", "NOT") {
                Some("makes a column required")
            } else if alter && has_pair("ADD", "CONSTRAINT") {
                Some("adds a constraint an older replica's writes may break")
            } else if alter && has_pair("NOT", "NULL") && !has("DEFAULT") {
                Some("adds a required column without a default: an older replica's inserts fail")
            } else {
                None
            };
            if let Some(why) = why {
                problems.push(format!("{why}: {}", words.join(" ")));
            }
        }
        problems
    }

    #[test]
    fn every_migration_from_4_on_is_additive() {
        // A rolling upgrade runs the old replicas on the new schema until they are replaced, and a
        // rollback runs the old binary on it for good: a migration that drops, renames or retypes
        // what they use, or requires a column they do not write, stops them mid-rollout.
        let checked: Vec<i64> = MIGRATIONS
            .iter()
            .filter(|(version, _, _)| *version >= FIRST_ADDITIVE)
            .map(|(version, name, sql)| {
                assert_eq!(
                    not_additive(sql),
                    Vec::<String>::new(),
                    "migration {version} ({name}) is not additive"
                );
                *version
            })
            .collect();
        assert!(checked.contains(&FIRST_ADDITIVE), "{checked:?}");
    }

    #[test]
    fn a_migration_that_would_stop_an_older_replica_is_found() {
        for sql in [
            "DROP TABLE pending_checks",
            "DROP INDEX results_turn",
            "ALTER TABLE results DROP COLUMN reason",
            "ALTER TABLE results RENAME COLUMN reason TO why",
            "ALTER TABLE results RENAME TO checks",
            "ALTER TABLE results ALTER COLUMN score TYPE TEXT",
            "ALTER TABLE results ALTER COLUMN score SET DATA TYPE TEXT",
            "ALTER TABLE results ALTER COLUMN judge_model SET NOT NULL",
            "ALTER TABLE results ADD COLUMN source TEXT NOT NULL",
            "ALTER TABLE results ADD source TEXT NOT NULL",
            "ALTER TABLE results ADD CONSTRAINT one CHECK (attempt = 1)",
            "CREATE TABLE x (a TEXT);\n-- a note\nalter table results\n  drop column reason;",
        ] {
            assert_eq!(not_additive(sql).len(), 1, "{sql}");
        }
        for sql in [
            "ALTER TABLE results ADD COLUMN source TEXT",
            "ALTER TABLE results ADD COLUMN tries BIGINT NOT NULL DEFAULT 0",
            "CREATE TABLE things (id TEXT PRIMARY KEY, n BIGINT NOT NULL)",
            "CREATE INDEX things_n ON things (n)",
            "-- never DROP or RENAME anything\nCREATE TABLE dropped_types (renamed TEXT)",
        ] {
            assert_eq!(not_additive(sql), Vec::<String>::new(), "{sql}");
        }
    }
}
