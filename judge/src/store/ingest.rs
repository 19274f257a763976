//! Storing what the filter reports: a report (or a batch of them) in one transaction, with its new
//! results, their events and alert rules, and its background checks as pending checks (or stored
//! `errored` when the queue is full); and a judged background check's result, stored only while
//! this replica still holds its claim.

use std::collections::{BTreeSet, HashMap};

use livecheck_wire::{BackgroundCheck, CheckResult, Mode, Outcome, TurnReport};
use sqlx::{Any, Transaction};

use super::alerts::{remember_alert_rule, AlertCheck};
use super::claims;
use super::outbox::queue_event;
use super::queues::{Room, QUEUE_FULL_REASON};
use super::results::Turn;
use super::rows::{
    insert_result, insert_results, stored_turns, upsert_turns, ResultRow, StoredTurn,
};
use super::{Store, StoreError};

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

impl Store {
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
