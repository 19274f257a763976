//! The operator pages' login sessions (`sessions`, migration 4), here so that every replica on the
//! database knows a login made on any of them and a logout made on any ends it everywhere. A row
//! holds the SHA-256 of the session's id (hex; the id itself, the cookie's value, is never stored),
//! the session's CSRF token and when it ends. The pages decide ids, tokens and lifetimes
//! (`pages::session`); this is where they are kept.

use super::{Store, StoreError};

/// Sessions kept at most; past that the ones closest to expiry go. Replicas logging in at the same
/// moment may each fill the last place, so the table can pass this by the logins made at once,
/// until the next login trims it.
pub const MAX_SESSIONS: i64 = 256;

impl Store {
    /// Keeps a new session. First deletes the sessions that have ended and, when [`MAX_SESSIONS`]
    /// are still live, those closest to expiry, so that the new one is within the bound.
    pub async fn open_session(
        &self,
        digest: &str,
        csrf: &str,
        expires_at_ms: i64,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM sessions WHERE expires_at <= $1")
            .bind(now_ms)
            .execute(&mut *tx)
            .await?;
        let live: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM sessions")
            .fetch_one(&mut *tx)
            .await?;
        let over = live - MAX_SESSIONS + 1;
        if over > 0 {
            sqlx::query(
                "DELETE FROM sessions WHERE digest IN \
                 (SELECT digest FROM sessions ORDER BY expires_at, digest LIMIT $1)",
            )
            .bind(over)
            .execute(&mut *tx)
            .await?;
        }
        sqlx::query("INSERT INTO sessions (digest, csrf, expires_at) VALUES ($1, $2, $3)")
            .bind(digest)
            .bind(csrf)
            .bind(expires_at_ms)
            .execute(&mut *tx)
            .await?;
        tx.commit().await
    }

    /// The CSRF token of the session with this digest, while it lasts; `None` for a session that
    /// ended or never was. An ended session is deleted by the next login.
    pub async fn session_csrf(
        &self,
        digest: &str,
        now_ms: i64,
    ) -> Result<Option<String>, StoreError> {
        sqlx::query_scalar("SELECT csrf FROM sessions WHERE digest = $1 AND expires_at > $2")
            .bind(digest)
            .bind(now_ms)
            .fetch_optional(&self.pool)
            .await
    }

    /// Ends a session on every replica (nothing when there is none).
    pub async fn close_session(&self, digest: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM sessions WHERE digest = $1")
            .bind(digest)
            .execute(&self.pool)
            .await
            .map(|_| ())
    }
}
