//! Deleting turns with everything stored for them (results, pending checks, undelivered events): a
//! person's on request (erasure), and every turn past the retention period (the sweep).

use super::{Store, StoreError};

#[derive(Clone, Copy)]
enum Which<'a> {
    Person(&'a str),
    Before(i64),
}

impl Store {
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
}
