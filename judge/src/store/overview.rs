//! What the operator pages read: agents and their counts over a window, counts per check in time
//! buckets, a check's recent results that did not pass, and alert rules with their state. Reads
//! only; names, outcomes, fixed fields and reasons, never anything else of a turn (the store holds
//! no text of a turn but a pending check's request, which nothing here reads).

use sqlx::Row;

use super::{Store, StoreError};

/// An agent's results over a window (every version); zero counts when it has none there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentCounts {
    pub agent: String,
    /// Turns with at least one result in the window.
    pub turns: i64,
    pub passed: i64,
    pub failed: i64,
    pub errored: i64,
}

/// One check's results in one time bucket: `index` counts buckets of the asked width from the
/// window's start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bucket {
    pub name: String,
    pub index: i64,
    pub passed: i64,
    pub failed: i64,
    pub errored: i64,
}

/// A result that did not pass, with its turn's ids.
#[derive(Debug, Clone, PartialEq)]
pub struct FailedResult {
    pub turn_id: String,
    pub response_id: Option<String>,
    pub outcome: String,
    pub stage: String,
    pub attempt: i64,
    /// Tool-call checks only: which call of the answer.
    pub call: Option<u32>,
    pub reason: String,
    pub created_at_ms: i64,
}

/// An alerting check of an agent: the rule its latest result carried, and when it last fired.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertView {
    pub check: String,
    pub failure_rate: f64,
    pub over_last: i64,
    /// When the alert was last claimed (fired), if ever since the store kept the time.
    pub last_fired_at_ms: Option<i64>,
}

const COUNTS: &str = "COUNT(CASE WHEN outcome = 'passed' THEN 1 END), \
     COUNT(CASE WHEN outcome = 'failed' THEN 1 END), \
     COUNT(CASE WHEN outcome = 'errored' THEN 1 END)";

impl Store {
    /// Every agent the store has a turn of, with its counts since `since_ms`, sorted by name.
    pub async fn agents(&self, since_ms: i64) -> Result<Vec<AgentCounts>, StoreError> {
        let names: Vec<String> = sqlx::query_scalar("SELECT DISTINCT agent FROM turns")
            .fetch_all(&self.pool)
            .await?;
        let rows = sqlx::query(&format!(
            "SELECT agent, COUNT(DISTINCT turn_id), {COUNTS} FROM results \
             WHERE created_at >= $1 GROUP BY agent"
        ))
        .bind(since_ms)
        .fetch_all(&self.pool)
        .await?;
        let mut out: Vec<AgentCounts> = names
            .into_iter()
            .map(|agent| AgentCounts {
                agent,
                turns: 0,
                passed: 0,
                failed: 0,
                errored: 0,
            })
            .collect();
        for row in &rows {
            let counts = AgentCounts {
                agent: row.try_get(0)?,
                turns: row.try_get(1)?,
                passed: row.try_get(2)?,
                failed: row.try_get(3)?,
                errored: row.try_get(4)?,
            };
            match out.iter_mut().find(|a| a.agent == counts.agent) {
                Some(known) => *known = counts,
                None => out.push(counts),
            }
        }
        out.sort_by(|a, b| a.agent.cmp(&b.agent));
        Ok(out)
    }

    /// An agent's results since `since_ms` per check and bucket of `width_ms` (buckets without
    /// results are absent), sorted by check and bucket.
    pub async fn buckets(
        &self,
        agent: &str,
        since_ms: i64,
        width_ms: i64,
    ) -> Result<Vec<Bucket>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT name, (created_at - $2) / $3, {COUNTS} FROM results \
             WHERE agent = $1 AND created_at >= $2 GROUP BY 1, 2 ORDER BY 1, 2"
        ))
        .bind(agent)
        .bind(since_ms)
        .bind(width_ms.max(1))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(Bucket {
                    name: row.try_get(0)?,
                    index: row.try_get(1)?,
                    passed: row.try_get(2)?,
                    failed: row.try_get(3)?,
                    errored: row.try_get(4)?,
                })
            })
            .collect()
    }

    /// An agent's check's latest results since `since_ms` that did not pass, newest first.
    pub async fn failures(
        &self,
        agent: &str,
        check: &str,
        since_ms: i64,
        limit: i64,
    ) -> Result<Vec<FailedResult>, StoreError> {
        let rows = sqlx::query(
            "SELECT r.turn_id, t.response_id, r.outcome, r.stage, r.attempt, r.tool_call, r.reason, \
             r.created_at FROM results r JOIN turns t ON t.turn_id = r.turn_id \
             WHERE r.agent = $1 AND r.name = $2 AND r.outcome <> 'passed' AND r.created_at >= $3 \
             ORDER BY r.created_at DESC, r.id DESC LIMIT $4",
        )
        .bind(agent)
        .bind(check)
        .bind(since_ms)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let call: i64 = row.try_get(5)?;
                Ok(FailedResult {
                    turn_id: row.try_get(0)?,
                    response_id: row.try_get(1)?,
                    outcome: row.try_get(2)?,
                    stage: row.try_get(3)?,
                    attempt: row.try_get(4)?,
                    call: u32::try_from(call).ok().filter(|c| *c > 0),
                    reason: row.try_get(6)?,
                    created_at_ms: row.try_get(7)?,
                })
            })
            .collect()
    }

    /// An agent's alerting checks, sorted by name.
    pub async fn alerts(&self, agent: &str) -> Result<Vec<AlertView>, StoreError> {
        let rows = sqlx::query(
            "SELECT r.check_name, r.failure_rate, r.over_last, s.last_fired_at FROM alert_rules r \
             LEFT JOIN alert_state s ON s.agent = r.agent AND s.check_name = r.check_name \
             WHERE r.agent = $1 ORDER BY r.check_name",
        )
        .bind(agent)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(AlertView {
                    check: row.try_get(0)?,
                    failure_rate: row.try_get(1)?,
                    over_last: row.try_get(2)?,
                    last_fired_at_ms: row.try_get(3)?,
                })
            })
            .collect()
    }
}
