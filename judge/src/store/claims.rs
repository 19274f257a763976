//! Several sidecars on one database: who is alive, and which of them does each piece of background
//! work. A replica takes a random id at start and keeps a row in `replicas` whose `alive_until` it
//! renews; it deletes the row when it stops cleanly. Work is claimed, never just read: a pending
//! background check or a due outbox event is taken by one conditional `UPDATE … SET claimed_by`
//! that succeeds for exactly one replica (on PostgreSQL a second claimant waits for the first's row
//! lock, then finds the row claimed), and a claim held by a replica that is no longer alive is free
//! again. A background check whose turn's key a live replica holds (`key_holder`) is claimed only by
//! that replica; the others take it only once it is gone, and then judge it without that key.
//!
//! Every condition reads "alive" as a row in `replicas` whose lease has not run out at the
//! statement's `now`: one SQL fragment, [`alive`], shared by every query here.

use sqlx::Row;

use super::alerts::alert_from;
use super::outbox::OutboxEvent;
use super::pending::{KeyHolder, PendingCheck};
use super::{Store, StoreError};

/// `column` names a replica that is alive at `$now` (the placeholder named by `now`).
fn alive(column: &str, now: &str) -> String {
    format!("EXISTS (SELECT 1 FROM replicas r WHERE r.id = {column} AND r.alive_until >= {now})")
}

/// A claim (`claimed_by`) that anyone may take now: none, or its replica is gone.
fn free(now: &str) -> String {
    format!("(claimed_by IS NULL OR NOT {})", alive("claimed_by", now))
}

/// A background check that replica `me` may judge: it holds the key, no key came, or the replica
/// holding it is gone.
fn judgeable_by(me: &str, now: &str) -> String {
    format!(
        "(key_holder IS NULL OR key_holder = {me} OR NOT {})",
        alive("key_holder", now)
    )
}

impl Store {
    /// Registers replica `id` as alive until `until_ms`, or renews its lease; also deletes the rows
    /// of replicas dead for a day (nothing refers to them any more than to an absent row).
    pub async fn renew_replica(
        &self,
        id: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<(), StoreError> {
        let renewed = sqlx::query("UPDATE replicas SET alive_until = $1 WHERE id = $2")
            .bind(until_ms)
            .bind(id)
            .execute(&self.pool)
            .await?
            .rows_affected();
        if renewed == 0 {
            sqlx::query(
                "INSERT INTO replicas (id, alive_until, started_at) VALUES ($1, $2, $3) \
                 ON CONFLICT (id) DO UPDATE SET alive_until = excluded.alive_until",
            )
            .bind(id)
            .bind(until_ms)
            .bind(now_ms)
            .execute(&self.pool)
            .await?;
        }
        sqlx::query("DELETE FROM replicas WHERE alive_until < $1")
            .bind(now_ms.saturating_sub(crate::ids::DAY_MS))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// A replica stopping cleanly: its claims are released and its row deleted, so the others take
    /// its work (and the checks whose key it held) now rather than when its lease runs out.
    pub async fn leave(&self, id: &str) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        for sql in [
            "UPDATE pending_checks SET claimed_by = NULL WHERE claimed_by = $1",
            "UPDATE event_outbox SET claimed_by = NULL WHERE claimed_by = $1",
            "DELETE FROM replicas WHERE id = $1",
        ] {
            sqlx::query(sql).bind(id).execute(&mut *tx).await?;
        }
        tx.commit().await
    }

    /// The oldest pending background checks replica `me` may claim now (see [`Self::claim_check`]).
    pub async fn claimable_checks(
        &self,
        me: &str,
        now_ms: i64,
        limit: i64,
    ) -> Result<Vec<PendingCheck>, StoreError> {
        let sql = format!(
            "SELECT turn_id, name, request, alert_rate, alert_over, key_holder FROM pending_checks \
             WHERE {} AND {} ORDER BY created_at, turn_id, name LIMIT $3",
            free("$2"),
            judgeable_by("$1", "$2"),
        );
        let rows = sqlx::query(&sql)
            .bind(me)
            .bind(now_ms)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| {
                let key_holder: Option<String> = row.try_get(5)?;
                Ok(PendingCheck {
                    turn_id: row.try_get(0)?,
                    name: row.try_get(1)?,
                    request: row.try_get(2)?,
                    alert: alert_from(row.try_get(3)?, row.try_get(4)?),
                    key: match key_holder {
                        None => KeyHolder::NoneCame,
                        Some(holder) if holder == me => KeyHolder::Here,
                        Some(_) => KeyHolder::Gone,
                    },
                })
            })
            .collect()
    }

    /// Claims a pending check for replica `me`: true for exactly one replica while the claim lasts.
    pub async fn claim_check(
        &self,
        me: &str,
        turn_id: &str,
        name: &str,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        set_if_claimable(&self.pool, "claimed_by", me, turn_id, name, now_ms).await
    }

    /// Events due for delivery that no live replica is delivering.
    pub async fn claimable_events(
        &self,
        now_ms: i64,
        limit: i64,
    ) -> Result<Vec<OutboxEvent>, StoreError> {
        let sql = format!(
            "SELECT id, webhook, body, attempts FROM event_outbox WHERE next_attempt_at <= $1 AND {} \
             ORDER BY next_attempt_at, created_at, id LIMIT $2",
            free("$1"),
        );
        let rows = sqlx::query(&sql)
            .bind(now_ms)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| {
                Ok(OutboxEvent {
                    id: row.try_get(0)?,
                    webhook: row.try_get(1)?,
                    body: row.try_get(2)?,
                    attempts: row.try_get(3)?,
                })
            })
            .collect()
    }

    /// When the next event no live replica is delivering is due, if any.
    pub async fn next_event_due(&self, now_ms: i64) -> Result<Option<i64>, StoreError> {
        let sql = format!(
            "SELECT MIN(next_attempt_at) FROM event_outbox WHERE {}",
            free("$1")
        );
        sqlx::query_scalar(&sql)
            .bind(now_ms)
            .fetch_one(&self.pool)
            .await
    }

    /// Claims a due event for delivery by replica `me`: true for exactly one replica.
    pub async fn claim_event(
        &self,
        me: &str,
        event: &OutboxEvent,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let sql = format!(
            "UPDATE event_outbox SET claimed_by = $1 WHERE id = $3 AND webhook = $4 \
             AND next_attempt_at <= $2 AND {}",
            free("$2"),
        );
        let claimed = sqlx::query(&sql)
            .bind(me)
            .bind(now_ms)
            .bind(&event.id)
            .bind(&event.webhook)
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(claimed == 1)
    }

    /// Keeps only the (turn, check) pairs whose key replica `me` still holds in the store: a check
    /// judged, erased or taken over needs its key no more.
    pub async fn keys_held(&self, me: &str) -> Result<Vec<(String, String)>, StoreError> {
        let rows = sqlx::query("SELECT turn_id, name FROM pending_checks WHERE key_holder = $1")
            .bind(me)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
            .collect()
    }
}

/// Inside a report's transaction: makes replica `me` the key holder of a check pending from an
/// earlier delivery of the same report, when no live replica holds its key and none is judging it.
/// True when `me` holds it now.
pub(super) async fn take_key(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    me: &str,
    turn_id: &str,
    name: &str,
    now_ms: i64,
) -> Result<bool, StoreError> {
    set_if_claimable(&mut **tx, "key_holder", me, turn_id, name, now_ms).await
}

/// Sets a pending check's `column` (`claimed_by` or `key_holder`, never input) to `me` when `me`
/// may claim the check now, or has claimed it already (a report sent again to the replica judging
/// its check keeps that replica the key's holder); true when it did.
async fn set_if_claimable<'e>(
    executor: impl sqlx::Executor<'e, Database = sqlx::Any>,
    column: &str,
    me: &str,
    turn_id: &str,
    name: &str,
    now_ms: i64,
) -> Result<bool, StoreError> {
    let sql = format!(
        "UPDATE pending_checks SET {column} = $1 WHERE turn_id = $3 AND name = $4 \
         AND (claimed_by = $1 OR {}) AND {}",
        free("$2"),
        judgeable_by("$1", "$2"),
    );
    let set = sqlx::query(&sql)
        .bind(me)
        .bind(now_ms)
        .bind(turn_id)
        .bind(name)
        .execute(executor)
        .await?
        .rows_affected();
    Ok(set == 1)
}
