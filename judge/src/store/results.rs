//! Turns and results as the API reads them back: a turn by either of its ids, a turn's results in
//! decided order, an agent's counts per check, and how a check's latest results stand (alerts).

use sqlx::any::AnyRow;
use sqlx::Row;

use super::{Store, StoreError};

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

const TURN_COLUMNS: &str = "turn_id, response_id, agent";

pub(super) fn turn_from(row: &AnyRow) -> Result<Turn, StoreError> {
    Ok(Turn {
        turn_id: row.try_get(0)?,
        response_id: row.try_get(1)?,
        agent: row.try_get(2)?,
    })
}

impl Store {
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
}
