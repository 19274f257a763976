//! Background checks waiting for their verdict, as a replica that claims one sees it ([`PendingCheck`],
//! with where its turn's key is); they are written by [`super::ingest`] and claimed in
//! [`super::claims`].

use livecheck_wire::Alert;

use super::{Store, StoreError};

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

impl Store {
    /// Drops a pending check that cannot be judged (its request no longer parses).
    pub async fn drop_pending(&self, turn_id: &str, name: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM pending_checks WHERE turn_id = $1 AND name = $2")
            .bind(turn_id)
            .bind(name)
            .execute(&self.pool)
            .await?;
        self.forget_deleted().await
    }
}
