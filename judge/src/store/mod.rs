//! The results store: turns, check results, pending background checks, alert state and the event
//! outbox, in SQLite (a file, WAL) or PostgreSQL. One code path over both through sqlx's `Any` driver:
//! runtime queries with `$n` placeholders (SQLite reads them too), only TEXT, BIGINT and DOUBLE PRECISION
//! columns, booleans as 0/1, times as milliseconds since the Unix epoch.
//!
//! Every statement that writes for a turn starts its transaction by touching the turn's row: on
//! PostgreSQL that row lock makes a report and a background result of the same turn wait for each
//! other, so `seq` stays the order decided; SQLite writes through one connection anyway.
//!
//! One room per part of the schema's work: [`ingest`] (storing reports and background results) over
//! [`rows`] (multi-row statements), [`queues`] and [`outbox`]; [`results`] (reading them back),
//! [`alerts`], [`pending`] and [`claims`] (the work replicas share), [`erase`] (erasure and
//! retention), [`overview`] (the operator pages' reads), [`sessions`], [`migrate`]. Here: opening the
//! store, and [`error_kind`], the one place a store error becomes words for a log or an answer.

mod alerts;
mod claims;
mod erase;
mod ingest;
mod migrate;
mod outbox;
mod overview;
mod pending;
mod queues;
mod results;
mod rows;
pub mod sessions;

use std::time::Duration;

use sqlx::any::AnyPoolOptions;
use sqlx::AnyPool;

pub use alerts::AlertCheck;
pub use ingest::{Ingested, StoredBackground};
pub use outbox::OutboxEvent;
pub use overview::{AgentCounts, AlertView, Bucket, FailedResult};
pub use pending::{KeyHolder, PendingCheck};
pub use queues::{QueueLimits, QUEUE_FULL_REASON};
pub use results::{CheckCounts, StoredResult, Turn};
pub use sqlx::Error as StoreError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    Sqlite,
    Postgres,
}

/// An open store; cheap to clone (a pool).
#[derive(Clone)]
pub struct Store {
    pool: AnyPool,
    flavor: Flavor,
    queues: QueueLimits,
}

/// A store error as it leaves the store for a log line or an answer: its kind only. A database error's
/// message can quote values and a connection error its URL, so this is the one place a store error
/// becomes words; `Debug` prints the kind too, so no derived `Debug` of a caller's error can quote one.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct StoreFailure(&'static str);

impl From<StoreError> for StoreFailure {
    fn from(e: StoreError) -> Self {
        Self(error_kind(&e))
    }
}

impl std::fmt::Display for StoreFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::fmt::Debug for StoreFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StoreFailure({:?})", self.0)
    }
}

/// A short name for a store error, for logs: a database error's message can quote values.
pub fn error_kind(e: &StoreError) -> &'static str {
    match e {
        StoreError::Database(_) => "database error",
        StoreError::PoolTimedOut => "pool timed out",
        StoreError::PoolClosed => "pool closed",
        StoreError::Io(_) => "io error",
        StoreError::Tls(_) => "tls error",
        StoreError::Protocol(_) => "protocol error",
        StoreError::RowNotFound => "row not found",
        StoreError::ColumnDecode { .. } | StoreError::Decode(_) => "decode error",
        StoreError::Configuration(_) => "configuration error",
        StoreError::Migrate(_) => "migration error",
        _ => "store error",
    }
}

impl Store {
    /// Connects (creating a SQLite file and its directory), then brings the schema up to date.
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        sqlx::any::install_default_drivers();
        let flavor = if url.starts_with("sqlite:") {
            Flavor::Sqlite
        } else {
            Flavor::Postgres
        };
        let options = AnyPoolOptions::new().acquire_timeout(Duration::from_secs(5));
        let pool = match flavor {
            Flavor::Sqlite => {
                if let Some(dir) = url
                    .strip_prefix("sqlite://")
                    .and_then(|p| std::path::Path::new(p).parent())
                {
                    std::fs::create_dir_all(dir)?;
                }
                // One connection: SQLite has one writer anyway, and this way a transaction never
                // meets a busy database. `secure_delete` overwrites deleted rows (the judged text of
                // a pending check) instead of leaving them in free pages.
                options
                    .max_connections(1)
                    .after_connect(|conn, _| {
                        Box::pin(async move {
                            sqlx::query("PRAGMA secure_delete = ON")
                                .execute(&mut *conn)
                                .await
                                .map(|_| ())
                        })
                    })
                    .connect(&format!("{url}?mode=rwc"))
                    .await?
            }
            Flavor::Postgres => options.max_connections(8).connect(url).await?,
        };
        if flavor == Flavor::Sqlite {
            sqlx::raw_sql("PRAGMA journal_mode = WAL")
                .execute(&pool)
                .await?;
        }
        migrate::run(&pool, flavor).await?;
        Ok(Self {
            pool,
            flavor,
            queues: QueueLimits::default(),
        })
    }

    /// The same store with other queue limits.
    pub fn with_queue_limits(self, queues: QueueLimits) -> Self {
        Self { queues, ..self }
    }

    pub fn flavor(&self) -> Flavor {
        self.flavor
    }

    /// SQLite keeps the pages a transaction wrote in its write-ahead log until a checkpoint, so a
    /// deleted pending check's judged text would linger in `-wal` after `secure_delete` zeroed it in
    /// the database: checkpoint and truncate the log at once. PostgreSQL: nothing to do here.
    async fn forget_deleted(&self) -> Result<(), StoreError> {
        if self.flavor == Flavor::Sqlite {
            sqlx::raw_sql("PRAGMA wal_checkpoint(TRUNCATE)")
                .execute(&self.pool)
                .await?;
        }
        Ok(())
    }

    /// A trivial query: whether the database answers.
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map(|_| ())
    }

    /// Closes the pool (tests restart a sidecar on the same database).
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_failure_names_the_kind_and_never_quotes_the_error() {
        let quoting = StoreError::Configuration("postgres://livecheck:s3cret@db/results".into());
        let failure = StoreFailure::from(quoting);
        for shown in [failure.to_string(), format!("{failure:?}")] {
            assert!(shown.contains("configuration error"), "{shown}");
            assert!(
                !shown.contains("s3cret") && !shown.contains("postgres://"),
                "{shown}"
            );
        }
    }
}
