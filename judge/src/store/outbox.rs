//! The event outbox: a `response.check_failed` event per webhook queued in the transaction that
//! stores the result that did not pass (its body from [`crate::event_body`]), then removed when
//! delivered or retried later; claiming a due event is [`super::claims`]' work.

use livecheck_wire::{CheckResult, Outcome};
use sqlx::{Any, Transaction};

use super::queues::Room;
use super::results::Turn;
use super::{Store, StoreError};
use crate::event_body;
use crate::ids;

/// An event waiting for delivery to one webhook.
#[derive(Debug, Clone)]
pub struct OutboxEvent {
    pub id: String,
    pub webhook: String,
    pub body: String,
    pub attempts: i64,
}

impl Store {
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
}

/// Queues a `response.check_failed` event per webhook for a result that did not pass.
pub(super) async fn queue_event(
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
