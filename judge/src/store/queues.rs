//! How full the store's two queues may get (`[limits]`): pending background checks and the event
//! outbox. [`Room`] counts what one transaction may still add; a check the full queue refuses is
//! stored `errored` with [`QUEUE_FULL_REASON`], an event that does not fit is dropped (counted).

use sqlx::{Any, Transaction};

use super::StoreError;

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
pub(super) struct Room {
    pub(super) limits: QueueLimits,
    pub(super) pending: Option<u64>,
    pub(super) events: Option<u64>,
    /// Outbox rows not written for want of room, in this transaction so far.
    pub(super) dropped_events: usize,
}

impl Room {
    pub(super) fn new(limits: QueueLimits) -> Self {
        Self {
            limits,
            pending: None,
            events: None,
            dropped_events: 0,
        }
    }

    /// Takes one pending check's room; `false` when the queue is full.
    pub(super) async fn take_pending(
        &mut self,
        tx: &mut Transaction<'_, Any>,
    ) -> Result<bool, StoreError> {
        let used = match self.pending {
            Some(n) => n,
            None => count_rows(tx, "pending_checks").await?,
        };
        let room = used < self.limits.pending_checks;
        self.pending = Some(used + u64::from(room));
        Ok(room)
    }

    /// Takes room for `n` outbox rows; `false` (and counted) when they do not fit.
    pub(super) async fn take_events(
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
