//! The results store: turns, check results, pending background checks, alert state and the event
//! outbox, in SQLite (a file, WAL) or PostgreSQL. One code path over both through sqlx's `Any` driver:
//! runtime queries with `$n` placeholders (SQLite reads them too), only TEXT, BIGINT and DOUBLE PRECISION
//! columns, booleans as 0/1, times as milliseconds since the Unix epoch.
//!
//! Every statement that writes for a turn starts its transaction by touching the turn's row: on
//! PostgreSQL that row lock makes a report and a background result of the same turn wait for each
//! other, so `seq` stays the order decided; SQLite writes through one connection anyway.

mod claims;
mod migrate;
mod overview;
pub mod sessions;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;

use livecheck_wire::{Alert, BackgroundCheck, CheckResult, Mode, Outcome, TurnReport};
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{Any, AnyPool, Row, Transaction};

use crate::event_body;
use crate::ids;

pub use overview::{AgentCounts, AlertView, Bucket, FailedResult};
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

/// How many rows the store's queues take (`[limits]`): pending background checks, and webhook
/// deliveries waiting in the outbox (one per event and webhook). Each count is read once per
/// transaction; transactions running at once may each fill the last room, so a queue can pass
/// its limit by at most the reports stored concurrently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueLimits {
    pub pending_checks: u64,
    pub events: u64,
}

impl Default for QueueLimits {
    fn default() -> Self {
        Self {
            pending_checks: crate::config::DEFAULT_MAX_PENDING_CHECKS,
            events: crate::config::DEFAULT_MAX_QUEUED_EVENTS,
        }
    }
}

/// The reason stored for a background check that found the pending queue full.
pub const QUEUE_FULL_REASON: &str =
    "The judge sidecar's queue of background checks was full: this check was not judged.";

/// The room left in the queues within one transaction.
struct Room {
    limits: QueueLimits,
    pending: Option<u64>,
    events: Option<u64>,
    /// Outbox rows not written for want of room, in this transaction so far.
    dropped_events: usize,
}

impl Room {
    fn new(limits: QueueLimits) -> Self {
        Self {
            limits,
            pending: None,
            events: None,
            dropped_events: 0,
        }
    }

    /// Takes one pending check's room; `false` when the queue is full.
    async fn take_pending(&mut self, tx: &mut Transaction<'_, Any>) -> Result<bool, StoreError> {
        let used = match self.pending {
            Some(n) => n,
            None => count_rows(tx, "pending_checks").await?,
        };
        let room = used < self.limits.pending_checks;
        self.pending = Some(used + u64::from(room));
        Ok(room)
    }

    /// Takes room for `n` outbox rows; `false` (and counted) when they do not fit.
    async fn take_events(
        &mut self,
        tx: &mut Transaction<'_, Any>,
        n: usize,
    ) -> Result<bool, StoreError> {
        let used = match self.events {
            Some(n) => n,
            None => count_rows(tx, "event_outbox").await?,
        };
        let n64 = u64::try_from(n).unwrap_or(u64::MAX);
        let room = used.saturating_add(n64) <= self.limits.events;
        if room {
            self.events = Some(used.saturating_add(n64));
        } else {
            self.events = Some(used);
            self.dropped_events += n;
        }
        Ok(room)
    }
}

/// `table` is one of the store's own table names, never input.
async fn count_rows(tx: &mut Transaction<'_, Any>, table: &str) -> Result<u64, StoreError> {
    let n: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table}"))
        .fetch_one(&mut **tx)
        .await?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// A check that got new results and carries an alert rule.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertCheck {
    pub agent: String,
    pub check: String,
    pub alert: Alert,
}

/// What one report changed.
#[derive(Debug, Default)]
pub struct Ingested {
    /// Results stored now (not stored before).
    pub stored: usize,
    /// Events queued for delivery.
    pub events: usize,
    pub alerts: Vec<AlertCheck>,
    /// Background checks of the report still to judge (new, or pending from an earlier delivery).
    pub pending: Vec<String>,
    /// Of those, the ones whose turn's key this replica holds now (it came with this report): only
    /// this replica judges them while it is alive.
    pub held: Vec<String>,
    /// Background checks stored `errored` ([`QUEUE_FULL_REASON`]): the pending queue was full.
    pub refused_checks: usize,
    /// Webhook deliveries not queued: the outbox was full.
    pub dropped_events: usize,
}

/// A stored turn.
#[derive(Debug, Clone)]
pub struct Turn {
    pub turn_id: String,
    pub response_id: Option<String>,
    pub agent: String,
}

impl Turn {
    /// The id results and events name the turn by: the upstream's, else the filter's.
    pub fn public_id(&self) -> &str {
        self.response_id.as_deref().unwrap_or(&self.turn_id)
    }
}

/// A stored result as the API shows it.
#[derive(Debug, Clone)]
pub struct StoredResult {
    pub id: String,
    pub seq: i64,
    pub name: String,
    pub stage: String,
    pub kind: String,
    pub mode: String,
    pub attempt: i64,
    pub outcome: String,
    pub score: Option<f64>,
    pub reason: String,
    pub judge_model: Option<String>,
    pub passed_on_error: bool,
    pub created_at_ms: i64,
    /// Tool-call checks only: the tool's name.
    pub tool: Option<String>,
    /// Tool-call checks only: which call of the answer (from 1). Every other result has none.
    pub call: Option<u32>,
}

/// One check's counts in an agent's summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckCounts {
    pub name: String,
    pub passed: i64,
    pub failed: i64,
    pub errored: i64,
}

/// A background check waiting for its verdict.
#[derive(Debug, Clone)]
pub struct PendingCheck {
    pub turn_id: String,
    pub name: String,
    /// The `JudgeRequest` as JSON (holds the judged text).
    pub request: String,
    pub alert: Option<Alert>,
    /// Where the turn's key is.
    pub key: KeyHolder,
}

/// Where a pending check's turn's key is, as the replica that claims the check sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyHolder {
    /// In this replica's memory.
    Here,
    /// The report came without one.
    NoneCame,
    /// With a replica that is gone: the key is lost.
    Gone,
}

/// A check's alert rule as stored (two nullable columns).
fn alert_from(rate: Option<f64>, over: Option<i64>) -> Option<Alert> {
    match (rate, over) {
        (Some(failure_rate), Some(over)) => Some(Alert {
            failure_rate,
            over_last: u32::try_from(over).unwrap_or(u32::MAX),
        }),
        _ => None,
    }
}

/// An event waiting for delivery to one webhook.
#[derive(Debug, Clone)]
pub struct OutboxEvent {
    pub id: String,
    pub webhook: String,
    pub body: String,
    pub attempts: i64,
}

/// What a stored background result changed.
#[derive(Debug, Default)]
pub struct StoredBackground {
    pub stored: bool,
    /// The check was no longer this replica's (taken over, or its turn erased): nothing stored.
    pub claim_lost: bool,
    pub events: usize,
    pub alert: Option<AlertCheck>,
    /// Webhook deliveries not queued: the outbox was full.
    pub dropped_events: usize,
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

#[derive(Clone, Copy)]
enum Which<'a> {
    Person(&'a str),
    Before(i64),
}

const TURN_COLUMNS: &str = "turn_id, response_id, agent";

fn turn_from(row: &AnyRow) -> Result<Turn, StoreError> {
    Ok(Turn {
        turn_id: row.try_get(0)?,
        response_id: row.try_get(1)?,
        agent: row.try_get(2)?,
    })
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

    /// Stores a report in one transaction: its turn, every result not stored before (with its
    /// events), and its background checks not judged yet as pending checks. `key_holder`: the
    /// replica that keeps the key the report came with in memory, if one came.
    pub async fn ingest(
        &self,
        report: &TurnReport,
        webhooks: &[String],
        now_ms: i64,
        key_holder: Option<&str>,
    ) -> Result<Ingested, StoreError> {
        let mut tx = self.pool.begin().await?;
        let mut room = Room::new(self.queues);
        let mut out =
            ingest_in(&mut tx, &[report], webhooks, now_ms, key_holder, &mut room).await?;
        tx.commit().await?;
        out.pop().ok_or(StoreError::RowNotFound)
    }

    /// Stores several reports (a batch from the filter) in one transaction, each as [`Self::ingest`]
    /// stores one: one commit for all, which is most of what a report costs the store.
    pub async fn ingest_many(
        &self,
        reports: &[&TurnReport],
        webhooks: &[String],
        now_ms: i64,
        key_holder: Option<&str>,
    ) -> Result<Vec<Ingested>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let mut room = Room::new(self.queues);
        let out = ingest_in(&mut tx, reports, webhooks, now_ms, key_holder, &mut room).await?;
        tx.commit().await?;
        Ok(out)
    }

    /// Stores a judged background check's result (mode `background`, attempt 1) and deletes the
    /// pending check with its text, if replica `me` still holds its claim: a replica taken for dead
    /// while it judged stores nothing (the one that took the check over stores its own verdict). A
    /// turn erased meanwhile stores nothing either.
    pub async fn store_background(
        &self,
        me: &str,
        turn_id: &str,
        result: &CheckResult,
        webhooks: &[String],
        now_ms: i64,
    ) -> Result<StoredBackground, StoreError> {
        let mut tx = self.pool.begin().await?;
        let touched = sqlx::query("UPDATE turns SET agent = agent WHERE turn_id = $1")
            .bind(turn_id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        let claimed = sqlx::query(
            "DELETE FROM pending_checks WHERE turn_id = $1 AND name = $2 AND claimed_by = $3",
        )
        .bind(turn_id)
        .bind(&result.name)
        .bind(me)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        let mut out = StoredBackground::default();
        if claimed == 0 {
            out.claim_lost = true;
            tx.rollback().await?;
            return Ok(out);
        }
        let mut room = Room::new(self.queues);
        if touched == 1 {
            let StoredTurn {
                turn,
                version,
                mut next_seq,
            } = stored_turns(&mut tx, [turn_id])
                .await?
                .remove(turn_id)
                .ok_or(StoreError::RowNotFound)?;
            if insert_result(&mut tx, &turn, &version, result, &mut next_seq).await? {
                out.stored = true;
                out.events =
                    queue_event(&mut tx, &turn, result, webhooks, now_ms, &mut room).await?;
                out.dropped_events = room.dropped_events;
                out.alert = result.alert.map(|alert| AlertCheck {
                    agent: turn.agent.clone(),
                    check: result.name.clone(),
                    alert,
                });
                if let Some(alert) = &out.alert {
                    remember_alert_rule(&mut tx, alert, now_ms).await?;
                }
            }
        }
        tx.commit().await?;
        self.forget_deleted().await?;
        Ok(out)
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

    /// Drops a pending check that cannot be judged (its request no longer parses).
    pub async fn drop_pending(&self, turn_id: &str, name: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM pending_checks WHERE turn_id = $1 AND name = $2")
            .bind(turn_id)
            .bind(name)
            .execute(&self.pool)
            .await?;
        self.forget_deleted().await
    }

    /// A turn by the filter's id (`lc_…`), else by the upstream's response id.
    pub async fn find_turn(&self, id: &str) -> Result<Option<Turn>, StoreError> {
        let by_turn = sqlx::query(&format!(
            "SELECT {TURN_COLUMNS} FROM turns WHERE turn_id = $1"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        let row = match by_turn {
            Some(row) => Some(row),
            None => {
                sqlx::query(&format!(
                    "SELECT {TURN_COLUMNS} FROM turns WHERE response_id = $1 \
                     ORDER BY created_at DESC, turn_id LIMIT 1"
                ))
                .bind(id)
                .fetch_optional(&self.pool)
                .await?
            }
        };
        row.as_ref().map(turn_from).transpose()
    }

    /// A turn's results after `after_seq`, in decided order.
    pub async fn results_page(
        &self,
        turn_id: &str,
        after_seq: i64,
        limit: i64,
    ) -> Result<Vec<StoredResult>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, seq, name, stage, kind, mode, attempt, outcome, score, reason, judge_model, \
             passed_on_error, created_at, tool, tool_call FROM results WHERE turn_id = $1 AND seq > $2 \
             ORDER BY seq LIMIT $3",
        )
        .bind(turn_id)
        .bind(after_seq)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let passed_on_error: i64 = row.try_get(11)?;
                let call: i64 = row.try_get(14)?;
                Ok(StoredResult {
                    id: row.try_get(0)?,
                    seq: row.try_get(1)?,
                    name: row.try_get(2)?,
                    stage: row.try_get(3)?,
                    kind: row.try_get(4)?,
                    mode: row.try_get(5)?,
                    attempt: row.try_get(6)?,
                    outcome: row.try_get(7)?,
                    score: row.try_get(8)?,
                    reason: row.try_get(9)?,
                    judge_model: row.try_get(10)?,
                    passed_on_error: passed_on_error != 0,
                    created_at_ms: row.try_get(12)?,
                    tool: row.try_get(13)?,
                    // 0 is "not a tool call's result".
                    call: u32::try_from(call).ok().filter(|c| *c > 0),
                })
            })
            .collect()
    }

    /// Per check name, the agent's results since `since_ms` (every version), sorted by name.
    pub async fn summary(
        &self,
        agent: &str,
        since_ms: i64,
    ) -> Result<Vec<CheckCounts>, StoreError> {
        let rows = sqlx::query(
            "SELECT name, \
             COUNT(CASE WHEN outcome = 'passed' THEN 1 END), \
             COUNT(CASE WHEN outcome = 'failed' THEN 1 END), \
             COUNT(CASE WHEN outcome = 'errored' THEN 1 END) \
             FROM results WHERE agent = $1 AND created_at >= $2 GROUP BY name ORDER BY name",
        )
        .bind(agent)
        .bind(since_ms)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(CheckCounts {
                    name: row.try_get(0)?,
                    passed: row.try_get(1)?,
                    failed: row.try_get(2)?,
                    errored: row.try_get(3)?,
                })
            })
            .collect()
    }

    /// Of an agent's check's latest `n` results (every version): how many, and how many did not pass.
    pub async fn latest_counts(
        &self,
        agent: &str,
        check: &str,
        n: u32,
    ) -> Result<(i64, i64), StoreError> {
        let row = sqlx::query(
            "SELECT COUNT(*), COUNT(CASE WHEN outcome <> 'passed' THEN 1 END) FROM \
             (SELECT outcome FROM results WHERE agent = $1 AND name = $2 \
              ORDER BY created_at DESC, id DESC LIMIT $3) AS latest",
        )
        .bind(agent)
        .bind(check)
        .bind(i64::from(n))
        .fetch_one(&self.pool)
        .await?;
        Ok((row.try_get(0)?, row.try_get(1)?))
    }

    /// Claims the day's alert of an agent's check (the UTC day of `now_ms`, which is kept as when it
    /// last fired): true for exactly one caller per UTC day, across processes and restarts (one
    /// conditional upsert, atomic on both databases).
    pub async fn claim_alert(
        &self,
        agent: &str,
        check: &str,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let claimed = sqlx::query(
            "INSERT INTO alert_state (agent, check_name, last_fired_day, last_fired_at) \
             VALUES ($1, $2, $3, $4) \
             ON CONFLICT (agent, check_name) DO UPDATE SET last_fired_day = excluded.last_fired_day, \
             last_fired_at = excluded.last_fired_at \
             WHERE alert_state.last_fired_day < excluded.last_fired_day",
        )
        .bind(agent)
        .bind(check)
        .bind(ids::utc_day(now_ms))
        .bind(now_ms)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(claimed == 1)
    }

    /// Erases every turn of a person: results, pending checks and undelivered events included.
    /// Returns how many turns were erased.
    pub async fn erase_person(&self, person: &str) -> Result<u64, StoreError> {
        self.delete_turns(Which::Person(person)).await
    }

    /// Deletes every turn first stored before `before_ms`, with its results, pending checks and
    /// undelivered events. Returns how many turns were deleted.
    pub async fn sweep(&self, before_ms: i64) -> Result<u64, StoreError> {
        self.delete_turns(Which::Before(before_ms)).await
    }

    async fn delete_turns(&self, which: Which<'_>) -> Result<u64, StoreError> {
        let condition = match which {
            Which::Person(_) => "person = $1",
            Which::Before(_) => "created_at < $1",
        };
        let mut tx = self.pool.begin().await?;
        let mut turns = 0;
        for table in ["results", "pending_checks", "event_outbox", "turns"] {
            let sql = if table == "turns" {
                format!("DELETE FROM turns WHERE {condition}")
            } else {
                format!(
                    "DELETE FROM {table} WHERE turn_id IN (SELECT turn_id FROM turns WHERE {condition})"
                )
            };
            let query = sqlx::query(&sql);
            let query = match which {
                Which::Person(person) => query.bind(person),
                Which::Before(ms) => query.bind(ms),
            };
            turns = query.execute(&mut *tx).await?.rows_affected();
        }
        tx.commit().await?;
        self.forget_deleted().await?;
        Ok(turns)
    }

    /// An event delivered (or given up on): gone from the outbox.
    pub async fn remove_event(&self, id: &str, webhook: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM event_outbox WHERE id = $1 AND webhook = $2")
            .bind(id)
            .bind(webhook)
            .execute(&self.pool)
            .await
            .map(|_| ())
    }

    /// An event whose delivery failed: tried again at `next_ms`, by whichever replica claims it then.
    pub async fn retry_event(
        &self,
        id: &str,
        webhook: &str,
        attempts: i64,
        next_ms: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE event_outbox SET attempts = $1, next_attempt_at = $2, claimed_by = NULL \
             WHERE id = $3 AND webhook = $4",
        )
        .bind(attempts)
        .bind(next_ms)
        .bind(id)
        .bind(webhook)
        .execute(&self.pool)
        .await
        .map(|_| ())
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

/// Reports' rows, inside the caller's transaction, each as if stored alone and in order, in few
/// statements (a statement is most of what a row cost: sqlx hands each to SQLite's worker thread
/// and back): the turns in one, the turns as stored with their next result numbers in one, every
/// result in one multi-row insert per [`ROWS_PER_STATEMENT`]; then per report its events, alert
/// rules and background checks.
async fn ingest_in(
    tx: &mut Transaction<'_, Any>,
    reports: &[&TurnReport],
    webhooks: &[String],
    now_ms: i64,
    key_holder: Option<&str>,
    room: &mut Room,
) -> Result<Vec<Ingested>, StoreError> {
    upsert_turns(tx, reports, now_ms).await?;
    let turns = stored_turns(tx, reports.iter().map(|r| r.turn_id.as_str())).await?;
    let stored_turn = |id: &str| turns.get(id).ok_or(StoreError::RowNotFound);
    // Each turn's next result number, counted on in report order.
    let mut next: HashMap<&str, i64> = turns
        .iter()
        .map(|(id, stored)| (id.as_str(), stored.next_seq))
        .collect();
    let mut rows = Vec::new();
    for report in reports {
        let stored = stored_turn(&report.turn_id)?;
        let seq = next
            .get_mut(report.turn_id.as_str())
            .ok_or(StoreError::RowNotFound)?;
        for result in &report.results {
            rows.push(ResultRow {
                turn: &stored.turn,
                version: &stored.version,
                result,
                seq: *seq,
            });
            *seq += 1;
        }
    }
    let mut new = insert_results(tx, &rows).await?.into_iter();
    let mut all = Vec::with_capacity(reports.len());
    for report in reports {
        let dropped_before = room.dropped_events;
        let StoredTurn { turn, version, .. } = stored_turn(&report.turn_id)?;
        let mut out = Ingested::default();
        let mut alerting = BTreeSet::new();
        for result in &report.results {
            if !new.next().unwrap_or(false) {
                continue;
            }
            out.stored += 1;
            out.events += queue_event(tx, turn, result, webhooks, now_ms, room).await?;
            if let Some(alert) = result.alert {
                if alerting.insert(result.name.clone()) {
                    out.alerts.push(AlertCheck {
                        agent: turn.agent.clone(),
                        check: result.name.clone(),
                        alert,
                    });
                }
            }
        }
        let seq = next
            .get_mut(report.turn_id.as_str())
            .ok_or(StoreError::RowNotFound)?;
        background_in(
            tx, report, turn, version, seq, webhooks, now_ms, key_holder, room, &mut out,
        )
        .await?;
        out.dropped_events = room.dropped_events - dropped_before;
        all.push(out);
    }
    Ok(all)
}

/// A report's alert rules and its background checks not judged yet (pending, or refused when
/// the queue is full), after its results.
#[allow(clippy::too_many_arguments)]
async fn background_in(
    tx: &mut Transaction<'_, Any>,
    report: &TurnReport,
    turn: &Turn,
    version: &str,
    seq: &mut i64,
    webhooks: &[String],
    now_ms: i64,
    key_holder: Option<&str>,
    room: &mut Room,
    out: &mut Ingested,
) -> Result<(), StoreError> {
    for alert in &out.alerts {
        remember_alert_rule(tx, alert, now_ms).await?;
    }
    for check in &report.background {
        if result_exists(tx, &turn.turn_id, &check.name).await? {
            continue;
        }
        if !pending_exists(tx, &turn.turn_id, &check.name).await? && !room.take_pending(tx).await? {
            let result = queue_full_result(check, now_ms);
            if insert_result(tx, turn, version, &result, seq).await? {
                out.stored += 1;
                out.refused_checks += 1;
                out.events += queue_event(tx, turn, &result, webhooks, now_ms, room).await?;
            }
            continue;
        }
        let request =
            serde_json::to_string(&check.judge).map_err(|e| StoreError::Encode(Box::new(e)))?;
        let inserted = sqlx::query(
            "INSERT INTO pending_checks (turn_id, name, request, alert_rate, alert_over, created_at, key_holder) \
             VALUES ($1, $2, $3, CASE WHEN $7 = 1 THEN $4 END, $5, $6, $8) ON CONFLICT (turn_id, name) DO NOTHING",
        )
        .bind(&turn.turn_id)
        .bind(&check.name)
        .bind(request)
        .bind(check.alert.map_or(0.0, |a| a.failure_rate))
        .bind(check.alert.map(|a| i64::from(a.over_last)))
        .bind(now_ms)
        .bind(i64::from(check.alert.is_some()))
        .bind(key_holder)
        .execute(&mut **tx)
        .await?
        .rows_affected();
        let held = match key_holder {
            None => false,
            Some(_) if inserted == 1 => true,
            // Sent again (the first answer was lost): the key is this replica's now unless a live
            // one holds it or is judging the check.
            Some(me) => claims::take_key(tx, me, &turn.turn_id, &check.name, now_ms).await?,
        };
        if held {
            out.held.push(check.name.clone());
        }
        out.pending.push(check.name.clone());
    }
    Ok(())
}

/// Keeps the alert rule a check's new result carried, for the operator pages (the latest wins).
async fn remember_alert_rule(
    tx: &mut Transaction<'_, Any>,
    alert: &AlertCheck,
    now_ms: i64,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO alert_rules (agent, check_name, failure_rate, over_last, seen_at) \
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (agent, check_name) DO UPDATE SET \
         failure_rate = excluded.failure_rate, over_last = excluded.over_last, seen_at = excluded.seen_at",
    )
    .bind(&alert.agent)
    .bind(&alert.check)
    .bind(alert.alert.failure_rate)
    .bind(i64::from(alert.alert.over_last))
    .bind(now_ms)
    .execute(&mut **tx)
    .await
    .map(|_| ())
}

/// A background check the full queue refused, as its result: `errored`, never judged.
fn queue_full_result(check: &BackgroundCheck, now_ms: i64) -> CheckResult {
    CheckResult {
        name: check.name.clone(),
        stage: check.judge.stage,
        kind: check.judge.kind.clone(),
        mode: Mode::Background,
        attempt: 1,
        outcome: Outcome::Errored,
        score: None,
        reason: QUEUE_FULL_REASON.to_owned(),
        judge_model: Some(check.judge.judge_model.clone()),
        passed_on_error: false,
        created_at_ms: u64::try_from(now_ms).unwrap_or(0),
        alert: check.alert,
        tool: None,
        call: None,
    }
}

/// A redelivered report's check already waits: it takes no new room.
async fn pending_exists(
    tx: &mut Transaction<'_, Any>,
    turn_id: &str,
    name: &str,
) -> Result<bool, StoreError> {
    let n: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM pending_checks WHERE turn_id = $1 AND name = $2")
            .bind(turn_id)
            .bind(name)
            .fetch_one(&mut **tx)
            .await?;
    Ok(n > 0)
}

async fn result_exists(
    tx: &mut Transaction<'_, Any>,
    turn_id: &str,
    name: &str,
) -> Result<bool, StoreError> {
    let n: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM results WHERE turn_id = $1 AND name = $2 AND attempt = 1 \
         AND tool_call = 0",
    )
    .bind(turn_id)
    .bind(name)
    .fetch_one(&mut **tx)
    .await?;
    Ok(n > 0)
}

// A NULL DOUBLE PRECISION is never bound: sqlx 0.8's Any driver binds it as a float4 NULL, and
// PostgreSQL's cached statement then refuses the next real (float8) value. `CASE WHEN flag = 1` instead.

/// Rows per multi-row statement: at most 19 parameters a row, well inside SQLite's 32,766 and
/// PostgreSQL's 65,535.
const ROWS_PER_STATEMENT: usize = 256;

/// `sql` written with `?` for every parameter, as the connection's database numbers them: SQLite
/// keeps `?` (sqlx looks each parameter's name up, and SQLite finds a named one by a linear walk,
/// so `$N` costs a statement of n parameters n² steps: `make bench-ingest` measured 1,520 µs a
/// report with 256 results a statement, 460 with 32, 250 with `?` and 256); PostgreSQL gets
/// `$1, $2, …` in order. No SQL text here holds a `?` otherwise.
fn numbered(conn: &sqlx::AnyConnection, sql: &str) -> String {
    if conn.backend_name().eq_ignore_ascii_case("sqlite") {
        return sql.to_owned();
    }
    let mut out = String::with_capacity(sql.len() + sql.len() / 4);
    for (k, piece) in sql.split('?').enumerate() {
        if k > 0 {
            out.push('$');
            out.push_str(&k.to_string());
        }
        out.push_str(piece);
    }
    out
}

/// `(…), (…)`: `rows` copies of one row's placeholders, for a multi-row statement.
fn rows_of(rows: usize, row: &str) -> String {
    vec![format!("({row})"); rows].join(", ")
}

/// Creates the reports' turns, or adds a response id to one stored without it. A turn named by
/// several reports is written once, with the first report's fields and the first response id any
/// of them has (what writing them one after the other leaves).
async fn upsert_turns(
    tx: &mut Transaction<'_, Any>,
    reports: &[&TurnReport],
    now_ms: i64,
) -> Result<(), StoreError> {
    let mut turns: Vec<(&TurnReport, Option<&String>)> = Vec::new();
    let mut at: HashMap<&str, usize> = HashMap::new();
    for report in reports {
        match at
            .get(report.turn_id.as_str())
            .and_then(|&i| turns.get_mut(i))
        {
            Some((_, response_id)) => {
                *response_id = response_id.or(report.response_id.as_ref());
            }
            None => {
                at.insert(&report.turn_id, turns.len());
                turns.push((report, report.response_id.as_ref()));
            }
        }
    }
    for chunk in turns.chunks(ROWS_PER_STATEMENT) {
        let sql = numbered(
            tx,
            &format!(
                "INSERT INTO turns (turn_id, response_id, agent, version, person, created_at) VALUES {} \
                 ON CONFLICT (turn_id) DO UPDATE SET response_id = COALESCE(turns.response_id, excluded.response_id)",
                rows_of(chunk.len(), "?, ?, ?, ?, ?, ?")
            ),
        );
        let mut query = sqlx::query(&sql);
        for (report, response_id) in chunk {
            query = query
                .bind(&report.turn_id)
                .bind(*response_id)
                .bind(&report.agent)
                .bind(&report.version)
                .bind(&report.person)
                .bind(now_ms);
        }
        query.execute(&mut **tx).await?;
    }
    Ok(())
}

/// Turns as stored, each with its version and its next result number (a turn not stored is
/// absent).
async fn stored_turns<'a>(
    tx: &mut Transaction<'_, Any>,
    turn_ids: impl IntoIterator<Item = &'a str>,
) -> Result<HashMap<String, StoredTurn>, StoreError> {
    let ids: BTreeSet<&str> = turn_ids.into_iter().collect();
    let ids: Vec<&str> = ids.into_iter().collect();
    let mut turns = HashMap::with_capacity(ids.len());
    for chunk in ids.chunks(ROWS_PER_STATEMENT) {
        let sql = numbered(
            tx,
            &format!(
                "SELECT t.turn_id, t.response_id, t.agent, t.version, \
                 (SELECT COALESCE(MAX(r.seq), 0) + 1 FROM results r WHERE r.turn_id = t.turn_id) \
                 FROM turns t WHERE t.turn_id IN ({})",
                vec!["?"; chunk.len()].join(", ")
            ),
        );
        let mut query = sqlx::query(&sql);
        for id in chunk {
            query = query.bind(*id);
        }
        for row in query.fetch_all(&mut **tx).await? {
            let turn = turn_from(&row)?;
            let stored = StoredTurn {
                version: row.try_get(3)?,
                next_seq: row.try_get(4)?,
                turn,
            };
            turns.insert(stored.turn.turn_id.clone(), stored);
        }
    }
    Ok(turns)
}

/// A turn as stored, with its version and the number its next result takes.
struct StoredTurn {
    turn: Turn,
    version: String,
    next_seq: i64,
}

/// A result to store, with its turn and its number in the turn.
struct ResultRow<'a> {
    turn: &'a Turn,
    version: &'a str,
    result: &'a CheckResult,
    seq: i64,
}

/// Stores a result unless the same (turn, check, attempt, call) is stored already; `true` when
/// stored. `seq` is the turn's next result number within this transaction, counted on here.
async fn insert_result(
    tx: &mut Transaction<'_, Any>,
    turn: &Turn,
    version: &str,
    result: &CheckResult,
    seq: &mut i64,
) -> Result<bool, StoreError> {
    let row = ResultRow {
        turn,
        version,
        result,
        seq: *seq,
    };
    *seq += 1;
    Ok(insert_results(tx, std::slice::from_ref(&row))
        .await?
        .first()
        .copied()
        .unwrap_or(false))
}

/// Stores results unless the same (turn, check, attempt, call) is stored already, in one
/// multi-row statement per [`ROWS_PER_STATEMENT`]; says for each whether it was stored. Of a
/// result repeated within `rows` the first is stored. A number (`seq`) a result stored before
/// leaves unused is a gap, not a fault: `seq` only orders a turn's results (the pages' cursor).
///
/// Each row gets a fresh id here. A statement that stored every row of its chunk (nearly always)
/// says so in its count; only when it stored fewer are the chunk's ids looked up to tell which.
/// (`RETURNING id` told the same for every statement, but sqlx's SQLite driver hands each returned
/// row across threads on its own: ~30% of the sidecar's CPU per report, `make bench-ingest`.)
async fn insert_results(
    tx: &mut Transaction<'_, Any>,
    rows: &[ResultRow<'_>],
) -> Result<Vec<bool>, StoreError> {
    let mut stored = Vec::with_capacity(rows.len());
    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
        // A NULL DOUBLE PRECISION is never bound (see above): the score goes with a flag.
        let ids: Vec<String> = chunk.iter().map(|_| ids::time_ordered("rck_")).collect();
        let sql = numbered(
            tx,
            &format!(
                "INSERT INTO results (id, turn_id, seq, agent, version, name, stage, kind, mode, attempt, \
                 outcome, score, reason, judge_model, passed_on_error, created_at, tool, tool_call) VALUES {} \
                 ON CONFLICT (turn_id, name, attempt, tool_call) DO NOTHING",
                rows_of(
                    chunk.len(),
                    "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, CASE WHEN ? = 1 THEN ? END, ?, ?, ?, ?, ?, ?"
                )
            ),
        );
        let mut query = sqlx::query(&sql);
        for (row, id) in chunk.iter().zip(&ids) {
            let result = &row.result;
            query = query
                .bind(id.as_str())
                .bind(&row.turn.turn_id)
                .bind(row.seq)
                .bind(&row.turn.agent)
                .bind(row.version)
                .bind(&result.name)
                .bind(result.stage.as_str())
                .bind(&result.kind)
                .bind(result.mode.as_str())
                .bind(i64::from(result.attempt))
                .bind(result.outcome.as_str())
                .bind(i64::from(result.score.is_some()))
                .bind(result.score.unwrap_or_default())
                .bind(&result.reason)
                .bind(&result.judge_model)
                .bind(i64::from(result.passed_on_error))
                .bind(i64::try_from(result.created_at_ms).unwrap_or(i64::MAX))
                .bind(&result.tool)
                .bind(i64::from(result.call.unwrap_or(0)));
        }
        let inserted = query.execute(&mut **tx).await?.rows_affected();
        if usize::try_from(inserted).is_ok_and(|n| n == chunk.len()) {
            stored.extend(std::iter::repeat_n(true, chunk.len()));
            continue;
        }
        let new_ids = ids_present(tx, &ids).await?;
        stored.extend(ids.iter().map(|id| new_ids.contains(id)));
    }
    Ok(stored)
}

/// Which of `ids` (at most [`ROWS_PER_STATEMENT`]) name a stored result.
async fn ids_present(
    tx: &mut Transaction<'_, Any>,
    ids: &[String],
) -> Result<HashSet<String>, StoreError> {
    let sql = numbered(
        tx,
        &format!(
            "SELECT id FROM results WHERE id IN ({})",
            vec!["?"; ids.len()].join(", ")
        ),
    );
    let mut query = sqlx::query(&sql);
    for id in ids {
        query = query.bind(id.as_str());
    }
    let mut present = HashSet::with_capacity(ids.len());
    for row in query.fetch_all(&mut **tx).await? {
        present.insert(row.try_get::<String, _>(0)?);
    }
    Ok(present)
}

/// Queues a `response.check_failed` event per webhook for a result that did not pass.
async fn queue_event(
    tx: &mut Transaction<'_, Any>,
    turn: &Turn,
    result: &CheckResult,
    webhooks: &[String],
    now_ms: i64,
    room: &mut Room,
) -> Result<usize, StoreError> {
    if result.outcome == Outcome::Passed || webhooks.is_empty() {
        return Ok(0);
    }
    if !room.take_events(tx, webhooks.len()).await? {
        return Ok(0);
    }
    let id = ids::time_ordered("evt_");
    let body = event_body::check_failed_body(&id, now_ms, result, turn.public_id());
    for webhook in webhooks {
        sqlx::query(
            "INSERT INTO event_outbox (id, webhook, turn_id, body, attempts, next_attempt_at, created_at) \
             VALUES ($1, $2, $3, $4, 0, $5, $5)",
        )
        .bind(&id)
        .bind(webhook)
        .bind(&turn.turn_id)
        .bind(&body)
        .bind(now_ms)
        .execute(&mut **tx)
        .await?;
    }
    Ok(1)
}
