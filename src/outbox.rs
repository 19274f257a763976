//! Turn reports wait here after their turn until the sidecar has stored them.
//!
//! A turn is never delayed or changed by its report: the report is queued when the turn ended and
//! sent from the VM's root context on its tick (so a stream that ended cannot cancel it). A report
//! the sidecar did not take (unreachable, restarting, a 5xx) goes back to the front of the queue
//! and is sent again after a backoff, so results survive a sidecar outage; the sidecar stores each
//! result once, so a report sent twice is harmless. The queue is bounded: when it is full the
//! newest report is dropped and counted.

use std::collections::VecDeque;

/// The most reports waiting or in flight in one VM.
pub const CAPACITY: usize = 1024;
/// The most bytes they may hold together (a report carries the texts of its background checks).
pub const MAX_BYTES: usize = 16 << 20;
/// The most reports sent per tick.
pub const PER_TICK: usize = 32;
/// The wait after a failed delivery, doubled per consecutive failure up to [`MAX_BACKOFF_MS`].
pub const FIRST_BACKOFF_MS: u64 = 250;
pub const MAX_BACKOFF_MS: u64 = 5_000;

/// A callout ready to send: headers (with `:path` etc.) and the JSON body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// How the sidecar answered a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// A 2xx: stored.
    Stored,
    /// A 4xx other than 408/429: the sidecar will never take this report; sending it again would
    /// only block the queue.
    Refused,
    /// No answer, a reset, a timeout, a 408/429 or a 5xx: sent again later.
    Failed,
}

impl Delivery {
    pub fn of_status(status: Option<u16>) -> Self {
        match status {
            Some(200..=299) => Self::Stored,
            Some(408 | 429) => Self::Failed,
            Some(400..=499) => Self::Refused,
            _ => Self::Failed,
        }
    }
}

#[derive(Debug, Default)]
pub struct Outbox {
    waiting: VecDeque<Job>,
    /// Callout token → the report it carries, until the sidecar answers.
    in_flight: Vec<(u32, Job)>,
    /// Reports dropped because the queue was full, since the VM started.
    pub dropped: u64,
    consecutive_failures: u32,
    /// Bytes held by reports waiting or in flight.
    bytes: usize,
    /// Nothing is sent before this time (ms since the Unix epoch).
    resume_at_ms: u64,
}

impl Outbox {
    /// Queues a report; `false` (and counted) when full.
    pub fn push(&mut self, job: Job) -> bool {
        let size = job_size(&job);
        if self.len() >= CAPACITY || self.bytes.saturating_add(size) > MAX_BYTES {
            self.dropped += 1;
            return false;
        }
        self.bytes += size;
        self.waiting.push_back(job);
        true
    }

    /// The next reports to send now, oldest first: none while backing off.
    pub fn take_batch(&mut self, now_ms: u64) -> Vec<Job> {
        if now_ms < self.resume_at_ms {
            return Vec::new();
        }
        let n = self.waiting.len().min(PER_TICK);
        self.waiting.drain(..n).collect()
    }

    /// A report went out as callout `token`.
    pub fn sent(&mut self, token: u32, job: Job) {
        self.in_flight.push((token, job));
    }

    /// A report could not be sent at all: it waits again, first in line.
    pub fn unsent(&mut self, job: Job, now_ms: u64) {
        self.waiting.push_front(job);
        self.failed(now_ms);
    }

    /// The sidecar answered callout `token`. Returns `false` for a token this outbox never sent.
    pub fn answered(&mut self, token: u32, delivery: Delivery, now_ms: u64) -> bool {
        let Some(at) = self.in_flight.iter().position(|(t, _)| *t == token) else {
            return false;
        };
        let (_, job) = self.in_flight.swap_remove(at);
        match delivery {
            Delivery::Stored | Delivery::Refused => {
                self.bytes = self.bytes.saturating_sub(job_size(&job));
                self.consecutive_failures = 0;
                self.resume_at_ms = 0;
            }
            Delivery::Failed => {
                self.waiting.push_front(job);
                self.failed(now_ms);
            }
        }
        true
    }

    fn failed(&mut self, now_ms: u64) {
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        let shift = self.consecutive_failures.saturating_sub(1).min(16);
        let backoff = FIRST_BACKOFF_MS
            .saturating_mul(1 << shift)
            .min(MAX_BACKOFF_MS);
        self.resume_at_ms = now_ms.saturating_add(backoff);
    }

    /// Bytes held by reports waiting or in flight.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Reports waiting or in flight.
    pub fn len(&self) -> usize {
        self.waiting.len() + self.in_flight.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn job_size(job: &Job) -> usize {
    job.body.len()
        + job
            .headers
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>()
}

#[cfg(test)]
mod tests {
    #[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    fn job(n: u8) -> Job {
        Job {
            headers: vec![],
            body: vec![n],
        }
    }

    #[test]
    fn a_full_outbox_drops_and_counts() {
        let mut out = Outbox::default();
        for _ in 0..CAPACITY {
            assert!(out.push(job(1)));
        }
        assert!(!out.push(job(2)));
        assert_eq!((out.len(), out.dropped), (CAPACITY, 1));
    }

    #[test]
    fn reports_are_bounded_in_bytes_too() {
        let mut out = Outbox::default();
        let big = Job {
            headers: vec![],
            body: vec![0; MAX_BYTES / 2],
        };
        assert!(out.push(big.clone()));
        assert!(out.push(big.clone()));
        assert!(!out.push(job(1)), "full by bytes");
        assert_eq!(out.dropped, 1);
        let batch = out.take_batch(0);
        out.sent(1, batch[0].clone());
        assert!(out.answered(1, Delivery::Stored, 0));
        assert_eq!(out.bytes(), MAX_BYTES / 2);
        assert!(out.push(job(1)), "room again once one was stored");
    }

    #[test]
    fn batches_leave_oldest_first_and_bounded() {
        let mut out = Outbox::default();
        for i in 0..40 {
            out.push(job(i));
        }
        let first = out.take_batch(0);
        assert_eq!(first.len(), PER_TICK);
        assert_eq!(first[0].body, vec![0]);
        assert_eq!(out.take_batch(0).len(), 40 - PER_TICK);
    }

    #[test]
    fn statuses_say_whether_to_send_again() {
        assert_eq!(Delivery::of_status(Some(200)), Delivery::Stored);
        assert_eq!(Delivery::of_status(Some(400)), Delivery::Refused);
        assert_eq!(Delivery::of_status(Some(429)), Delivery::Failed);
        assert_eq!(Delivery::of_status(Some(503)), Delivery::Failed);
        assert_eq!(Delivery::of_status(None), Delivery::Failed);
    }

    #[test]
    fn a_refused_report_is_dropped() {
        let mut out = Outbox::default();
        out.push(job(1));
        let batch = out.take_batch(0);
        out.sent(3, batch[0].clone());
        assert!(out.answered(3, Delivery::Refused, 0));
        assert!(out.is_empty());
        assert!(out.take_batch(0).is_empty());
    }

    #[test]
    fn a_report_in_flight_counts_until_stored() {
        let mut out = Outbox::default();
        out.push(job(1));
        let batch = out.take_batch(0);
        out.sent(7, batch[0].clone());
        assert_eq!(out.len(), 1);
        assert!(!out.answered(8, Delivery::Stored, 0), "an unknown token");
        assert!(out.answered(7, Delivery::Stored, 0));
        assert!(out.is_empty());
    }

    #[test]
    fn a_report_not_taken_is_sent_again_after_a_growing_backoff() {
        let mut out = Outbox::default();
        out.push(job(1));
        out.push(job(2));
        let batch = out.take_batch(1_000);
        out.sent(1, batch[0].clone());
        out.sent(2, batch[1].clone());
        assert!(out.answered(2, Delivery::Stored, 1_000));
        assert!(out.answered(1, Delivery::Failed, 1_000));
        assert!(out.take_batch(1_100).is_empty(), "backing off");
        let again = out.take_batch(1_000 + FIRST_BACKOFF_MS);
        assert_eq!(again.len(), 1, "the stored report is gone");
        assert_eq!(again[0].body, vec![1]);
        out.unsent(again[0].clone(), 2_000);
        assert!(out.take_batch(2_000 + FIRST_BACKOFF_MS).is_empty());
        assert_eq!(out.take_batch(2_000 + 2 * FIRST_BACKOFF_MS).len(), 1);
        for _ in 0..20 {
            out.unsent(job(3), 0);
        }
        assert!(out.take_batch(MAX_BACKOFF_MS - 1).is_empty());
        assert!(
            !out.take_batch(MAX_BACKOFF_MS).is_empty(),
            "the backoff is capped"
        );
    }
}
