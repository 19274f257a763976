//! How much the sidecar reads and keeps (`[limits]`): the values and their defaults, checked here;
//! [`crate::limits`] enforces them.

use std::time::Duration;

use super::file::RawLimits;

/// How much the sidecar reads and keeps, so that no caller, backend or burst of traffic grows its
/// memory or its store without bound (`[limits]`; every field has a default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest request body of any route (the filter's callouts and reports, the operator API):
    /// a larger one is answered 413 with a JSON error, unread.
    pub max_request_bytes: usize,
    /// The largest answer read from a judge backend: a larger one is an `errored` verdict.
    pub max_backend_answer_bytes: usize,
    /// The largest answer read from an upstream model on recovery: a larger one is no retry.
    pub max_retry_answer_bytes: usize,
    /// Background checks waiting for their verdict: a report's check beyond is stored `errored`.
    pub max_pending_checks: u64,
    /// Webhook events waiting for delivery: an event beyond is dropped (counted and logged).
    pub max_queued_events: u64,
}

/// A judge request holds a question and an answer of up to the filter's `max_body_bytes` (1 MiB by
/// default) each, a report the texts of its background checks: 8 MiB leaves room for both.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 8 << 20;
/// A verdict is a few hundred bytes of JSON; an answer is bounded by the backend's `max_tokens`.
pub const DEFAULT_MAX_BACKEND_ANSWER_BYTES: usize = 1 << 20;
pub const DEFAULT_MAX_RETRY_ANSWER_BYTES: usize = 4 << 20;
pub const DEFAULT_MAX_PENDING_CHECKS: u64 = 10_000;
/// One webhook event delivery attempt's time limit.
pub const EVENT_DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_MAX_QUEUED_EVENTS: u64 = 100_000;
/// The smallest byte limit accepted: a judge request or a verdict needs more than this.
const MIN_BYTES_LIMIT: usize = 1024;

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            max_backend_answer_bytes: DEFAULT_MAX_BACKEND_ANSWER_BYTES,
            max_retry_answer_bytes: DEFAULT_MAX_RETRY_ANSWER_BYTES,
            max_pending_checks: DEFAULT_MAX_PENDING_CHECKS,
            max_queued_events: DEFAULT_MAX_QUEUED_EVENTS,
        }
    }
}

pub(super) fn compile_limits(raw: RawLimits, problems: &mut Vec<String>) -> Limits {
    let d = Limits::default();
    let mut bytes = |name: &str, value: Option<usize>, default: usize| match value {
        Some(n) if n < MIN_BYTES_LIMIT => {
            problems.push(format!(
                "limits: {name} must be at least {MIN_BYTES_LIMIT} bytes, not {n}"
            ));
            default
        }
        Some(n) => n,
        None => default,
    };
    let max_request_bytes = bytes(
        "max_request_bytes",
        raw.max_request_bytes,
        d.max_request_bytes,
    );
    let max_backend_answer_bytes = bytes(
        "max_backend_answer_bytes",
        raw.max_backend_answer_bytes,
        d.max_backend_answer_bytes,
    );
    let max_retry_answer_bytes = bytes(
        "max_retry_answer_bytes",
        raw.max_retry_answer_bytes,
        d.max_retry_answer_bytes,
    );
    let mut count = |name: &str, value: Option<u64>, default: u64| match value {
        Some(0) => {
            problems.push(format!("limits: {name} must be at least 1"));
            default
        }
        Some(n) => n,
        None => default,
    };
    Limits {
        max_request_bytes,
        max_backend_answer_bytes,
        max_retry_answer_bytes,
        max_pending_checks: count(
            "max_pending_checks",
            raw.max_pending_checks,
            d.max_pending_checks,
        ),
        max_queued_events: count(
            "max_queued_events",
            raw.max_queued_events,
            d.max_queued_events,
        ),
    }
}
