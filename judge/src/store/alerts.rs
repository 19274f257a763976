//! Alert state in the store: the alert rule a check's latest result carried (kept for the operator
//! pages), and the claim of a check's alert for the day, one caller per UTC day across replicas.

use livecheck_wire::Alert;
use sqlx::{Any, Transaction};

use super::{Store, StoreError};
use crate::ids;

/// A check that got new results and carries an alert rule.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertCheck {
    pub agent: String,
    pub check: String,
    pub alert: Alert,
}

/// A check's alert rule as stored (two nullable columns).
pub(super) fn alert_from(rate: Option<f64>, over: Option<i64>) -> Option<Alert> {
    match (rate, over) {
        (Some(failure_rate), Some(over)) => Some(Alert {
            failure_rate,
            over_last: u32::try_from(over).unwrap_or(u32::MAX),
        }),
        _ => None,
    }
}

impl Store {
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
}

/// Keeps the alert rule a check's new result carried, for the operator pages (the latest wins).
pub(super) async fn remember_alert_rule(
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
