//! The sidecar's limits at work (their values: [`crate::config::Limits`], `[limits]` in the config):
//! every route's request body is read up to `max_request_bytes` and a larger one is answered 413
//! with a JSON error; answers from judge backends and upstreams are read with a cap
//! ([`read_capped`]); what a full queue refused is counted here ([`Dropped`]) and shown by
//! `GET /healthz`.

use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use serde_json::json;

/// Bounds every request body of `router` at `max` bytes: a larger body is not read, and the caller
/// gets 413 with `{"error": …}` naming the limit.
pub fn bound_requests(router: Router, max: usize) -> Router {
    router
        .layer(middleware::map_response_with_state(max, too_large_as_json))
        .layer(DefaultBodyLimit::max(max))
}

/// axum answers an oversized body 413 in plain text: the sidecar's errors are JSON.
async fn too_large_as_json(State(max): State<usize>, response: Response) -> Response {
    if response.status() != StatusCode::PAYLOAD_TOO_LARGE {
        return response;
    }
    tracing::warn!(
        max_request_bytes = max,
        "request body over the limit: refused"
    );
    let error = format!(
        "the request body is larger than the sidecar's limit of {max} bytes (limits.max_request_bytes)"
    );
    (
        StatusCode::PAYLOAD_TOO_LARGE,
        Json(json!({ "error": error })),
    )
        .into_response()
}

/// Why an answer was not read whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unread {
    /// It is (or says it is, in `content-length`) larger than the limit; the rest is not read.
    TooLarge,
    /// The connection broke while reading it.
    Broken,
}

/// Reads an answer's body, at most `limit` bytes of it.
pub async fn read_capped(mut response: reqwest::Response, limit: usize) -> Result<Vec<u8>, Unread> {
    let declared = response.content_length().unwrap_or(0);
    if usize::try_from(declared).map_or(true, |n| n > limit) {
        return Err(Unread::TooLarge);
    }
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|_| Unread::Broken)? {
        if bytes.len().saturating_add(chunk.len()) > limit {
            return Err(Unread::TooLarge);
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// What full queues refused since the sidecar started.
#[derive(Debug, Default)]
pub struct Dropped {
    background_checks: AtomicU64,
    events: AtomicU64,
}

impl Dropped {
    /// Counts background checks stored `errored` because the pending queue was full; the total.
    pub fn background_checks(&self, n: usize) -> u64 {
        add(&self.background_checks, n)
    }

    /// Counts webhook events dropped because the outbox was full; the total.
    pub fn events(&self, n: usize) -> u64 {
        add(&self.events, n)
    }

    /// Counts and logs (numbers only, never a text) what a full queue refused of one write.
    pub fn note(&self, refused_checks: usize, dropped_events: usize) {
        if refused_checks > 0 {
            let total = self.background_checks(refused_checks);
            tracing::warn!(
                refused = refused_checks,
                total,
                "the pending queue is full (limits.max_pending_checks): background checks stored as errored, not judged"
            );
        }
        if dropped_events > 0 {
            let total = self.events(dropped_events);
            tracing::warn!(
                dropped = dropped_events,
                total,
                "the event outbox is full (limits.max_queued_events): webhook deliveries dropped"
            );
        }
    }

    /// The totals as `GET /healthz` shows them.
    pub fn as_json(&self) -> serde_json::Value {
        json!({
            "background_checks": self.background_checks.load(Ordering::Relaxed),
            "events": self.events.load(Ordering::Relaxed),
        })
    }
}

fn add(counter: &AtomicU64, n: usize) -> u64 {
    let n = u64::try_from(n).unwrap_or(u64::MAX);
    counter.fetch_add(n, Ordering::Relaxed).saturating_add(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_are_counted_and_shown() {
        let dropped = Dropped::default();
        assert_eq!(dropped.background_checks(2), 2);
        assert_eq!(dropped.background_checks(1), 3);
        assert_eq!(dropped.events(4), 4);
        assert_eq!(
            dropped.as_json(),
            json!({"background_checks": 3, "events": 4})
        );
    }
}
