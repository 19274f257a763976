//! Turn reports wait here after their turn until the sidecar has stored them.
//!
//! A turn is never delayed or changed by its report: the report is queued when the turn ended and
//! sent from the VM's root context on its tick (so a stream that ended cannot cancel it). A report
//! the sidecar did not take (unreachable, restarting, a 5xx) goes back to the front of the queue
//! and is sent again after a backoff, so results survive a sidecar outage; the sidecar stores each
//! result once, so a report sent twice is harmless. Reports without background checks need no
//! headers of their own, so they leave together, many per callout (`POST /v1/results/batch`):
//! a callout costs Envoy far more than the report it carries. The queue is bounded: when it is full the
//! newest report is dropped and counted.

use std::collections::VecDeque;

/// The most reports waiting or in flight in one VM.
pub const CAPACITY: usize = 16_384;
/// The most bytes they may hold together (a report carries the texts of its background checks).
pub const MAX_BYTES: usize = 16 << 20;
/// The most callouts sent per tick.
pub const PER_TICK: usize = 32;
/// The most reports one batch callout carries, and the bytes past which it takes no more (a
/// report larger than that still goes, alone).
pub const BATCH_REPORTS: usize = 256;
pub const BATCH_BYTES: usize = 1 << 20;
/// The wait after a failed delivery, doubled per consecutive failure up to [`MAX_BACKOFF_MS`].
pub const FIRST_BACKOFF_MS: u64 = 250;
pub const MAX_BACKOFF_MS: u64 = 5_000;

/// A report ready to send: its JSON body and, for a report sent alone, the callout's headers (with
/// `:path` etc.).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The report needs no headers of its own (no background checks, so no turn credentials): it
    /// may go with others in one batch callout (`POST /v1/results/batch`).
    pub batchable: bool,
}

/// What one callout carries: one report, or a batch of batchable ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Callout {
    Alone(Job),
    Batch(Vec<Job>),
}

impl Callout {
    fn jobs(self) -> Vec<Job> {
        match self {
            Self::Alone(job) => vec![job],
            Self::Batch(jobs) => jobs,
        }
    }

    fn len(&self) -> usize {
        match self {
            Self::Alone(_) => 1,
            Self::Batch(jobs) => jobs.len(),
        }
    }

    fn size(&self) -> usize {
        match self {
            Self::Alone(job) => job_size(job),
            Self::Batch(jobs) => jobs.iter().map(job_size).sum(),
        }
    }

    /// A batch's body, `{"reports":[...]}`, from the reports' own JSON as written (nothing parsed
    /// or serialized again); `None` for a report sent alone.
    pub fn batch_body(&self) -> Option<Vec<u8>> {
        let Self::Batch(jobs) = self else {
            return None;
        };
        let size: usize = jobs.iter().map(|j| j.body.len() + 1).sum();
        let mut body = Vec::with_capacity(size + 16);
        body.extend_from_slice(b"{\"reports\":[");
        for (i, job) in jobs.iter().enumerate() {
            if i > 0 {
                body.push(b',');
            }
            body.extend_from_slice(&job.body);
        }
        body.extend_from_slice(b"]}");
        Some(body)
    }
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
    /// A batch answered 404 or 405: a sidecar from before batches. Its reports go again, alone,
    /// from now on.
    NoBatches,
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

#[derive(Debug)]
pub struct Outbox {
    waiting: VecDeque<Job>,
    /// Callout token → the reports it carries, until the sidecar answers.
    in_flight: Vec<(u32, Callout)>,
    /// Reports dropped because the queue was full, since the VM started.
    pub dropped: u64,
    consecutive_failures: u32,
    /// Bytes held by reports waiting or in flight.
    bytes: usize,
    /// Reports in flight.
    flying: usize,
    /// Nothing is sent before this time (ms since the Unix epoch).
    resume_at_ms: u64,
    /// Whether the sidecar takes batches (until one answers that it does not).
    batches: bool,
}

impl Default for Outbox {
    fn default() -> Self {
        Self {
            waiting: VecDeque::new(),
            in_flight: Vec::new(),
            dropped: 0,
            consecutive_failures: 0,
            bytes: 0,
            flying: 0,
            resume_at_ms: 0,
            batches: true,
        }
    }
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

    /// The callouts to send now, oldest reports first: at most [`PER_TICK`], the batchable
    /// reports gathered into batches; none while backing off.
    pub fn take(&mut self, now_ms: u64) -> Vec<Callout> {
        if now_ms < self.resume_at_ms {
            return Vec::new();
        }
        let mut callouts: Vec<Callout> = Vec::new();
        // The batch being filled (the last callout), and its bytes.
        let mut open: Option<usize> = None;
        while let Some(job) = self.waiting.pop_front() {
            if job.batchable && self.batches {
                if let (Some(bytes), Some(Callout::Batch(jobs))) = (open, callouts.last_mut()) {
                    if jobs.len() < BATCH_REPORTS && bytes + job.body.len() <= BATCH_BYTES {
                        open = Some(bytes + job.body.len());
                        jobs.push(job);
                        continue;
                    }
                }
                if callouts.len() >= PER_TICK {
                    self.waiting.push_front(job);
                    break;
                }
                open = Some(job.body.len());
                callouts.push(Callout::Batch(vec![job]));
            } else {
                if callouts.len() >= PER_TICK {
                    self.waiting.push_front(job);
                    break;
                }
                open = None;
                callouts.push(Callout::Alone(job));
            }
        }
        callouts
    }

    /// A callout went out as `token`.
    pub fn sent(&mut self, token: u32, callout: Callout) {
        self.flying += callout.len();
        self.in_flight.push((token, callout));
    }

    /// A callout could not be sent at all: its reports wait again, first in line.
    pub fn unsent(&mut self, callout: Callout, now_ms: u64) {
        self.requeue(callout);
        self.failed(now_ms);
    }

    fn requeue(&mut self, callout: Callout) {
        for job in callout.jobs().into_iter().rev() {
            self.waiting.push_front(job);
        }
    }

    /// The sidecar answered callout `token` with `status` (`None`: no answer); how it went, or
    /// `None` for a token this outbox never sent.
    pub fn answered(&mut self, token: u32, status: Option<u16>, now_ms: u64) -> Option<Delivery> {
        let at = self.in_flight.iter().position(|(t, _)| *t == token)?;
        let (_, callout) = self.in_flight.swap_remove(at);
        self.flying = self.flying.saturating_sub(callout.len());
        let batch = matches!(callout, Callout::Batch(_));
        let delivery = match Delivery::of_status(status) {
            Delivery::Refused if batch && matches!(status, Some(404 | 405)) => Delivery::NoBatches,
            other => other,
        };
        match delivery {
            Delivery::Stored | Delivery::Refused => {
                self.bytes = self.bytes.saturating_sub(callout.size());
                self.consecutive_failures = 0;
                self.resume_at_ms = 0;
            }
            Delivery::Failed => {
                self.requeue(callout);
                self.failed(now_ms);
            }
            Delivery::NoBatches => {
                self.batches = false;
                self.requeue(callout);
            }
        }
        Some(delivery)
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
        self.waiting.len() + self.flying
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
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;

    /// A report sent alone (it has background checks).
    fn job(n: u8) -> Job {
        Job {
            headers: vec![],
            body: vec![n],
            batchable: false,
        }
    }

    /// A report that may go in a batch.
    fn small(n: u8) -> Job {
        Job {
            headers: vec![],
            body: format!("{{\"n\":{n}}}").into_bytes(),
            batchable: true,
        }
    }

    fn alone(callout: &Callout) -> &Job {
        match callout {
            Callout::Alone(job) => job,
            Callout::Batch(_) => panic!("a batch"),
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
            batchable: false,
        };
        assert!(out.push(big.clone()));
        assert!(out.push(big.clone()));
        assert!(!out.push(job(1)), "full by bytes");
        assert_eq!(out.dropped, 1);
        let mut callouts = out.take(0);
        out.sent(1, callouts.remove(0));
        assert_eq!(out.answered(1, Some(200), 0), Some(Delivery::Stored));
        assert_eq!(out.bytes(), MAX_BYTES / 2);
        assert!(out.push(job(1)), "room again once one was stored");
    }

    #[test]
    fn callouts_leave_oldest_first_and_bounded() {
        let mut out = Outbox::default();
        for i in 0..40 {
            out.push(job(i));
        }
        let first = out.take(0);
        assert_eq!(first.len(), PER_TICK);
        assert_eq!(alone(&first[0]).body, vec![0]);
        assert_eq!(out.take(0).len(), 40 - PER_TICK);
    }

    #[test]
    fn reports_without_credentials_go_together_in_bounded_batches() {
        let mut out = Outbox::default();
        for i in 0..3 {
            out.push(small(i));
        }
        out.push(job(9));
        out.push(small(3));
        let callouts = out.take(0);
        assert_eq!(callouts.len(), 3, "a batch, the report alone, a batch");
        assert_eq!(
            callouts[0].batch_body().unwrap(),
            br#"{"reports":[{"n":0},{"n":1},{"n":2}]}"#
        );
        assert_eq!(alone(&callouts[1]).body, vec![9]);
        assert_eq!(callouts[1].batch_body(), None);
        assert_eq!(
            callouts[2].batch_body().unwrap(),
            br#"{"reports":[{"n":3}]}"#
        );

        let mut out = Outbox::default();
        for i in 0..(BATCH_REPORTS + 1) {
            out.push(small(i as u8));
        }
        let callouts = out.take(0);
        assert_eq!(
            callouts.iter().map(Callout::len).collect::<Vec<_>>(),
            [BATCH_REPORTS, 1]
        );
        let mut out = Outbox::default();
        let half = Job {
            body: vec![b' '; BATCH_BYTES / 2 + 1],
            ..small(0)
        };
        out.push(half.clone());
        out.push(half);
        assert_eq!(out.take(0).len(), 2, "bounded in bytes");
    }

    #[test]
    fn a_failed_batch_comes_back_whole_and_in_order() {
        let mut out = Outbox::default();
        for i in 0..3 {
            out.push(small(i));
        }
        let mut callouts = out.take(0);
        out.sent(5, callouts.remove(0));
        assert_eq!(out.len(), 3);
        assert_eq!(out.answered(5, Some(503), 0), Some(Delivery::Failed));
        let again = out.take(FIRST_BACKOFF_MS);
        assert_eq!(
            again[0].batch_body().unwrap(),
            br#"{"reports":[{"n":0},{"n":1},{"n":2}]}"#
        );
        out.sent(6, again.into_iter().next().unwrap());
        assert_eq!(out.answered(6, Some(200), 0), Some(Delivery::Stored));
        assert!(out.is_empty());
        assert_eq!(out.bytes(), 0);
    }

    #[test]
    fn a_sidecar_without_batches_gets_the_reports_alone() {
        let mut out = Outbox::default();
        out.push(small(0));
        out.push(small(1));
        let mut callouts = out.take(0);
        out.sent(1, callouts.remove(0));
        assert_eq!(out.answered(1, Some(404), 0), Some(Delivery::NoBatches));
        let again = out.take(0);
        assert_eq!(again.len(), 2, "no backoff, each alone");
        assert_eq!(alone(&again[0]).body, br#"{"n":0}"#);
        // A report sent alone that gets a 404 is refused, as before.
        let mut out = Outbox::default();
        out.push(job(1));
        let mut callouts = out.take(0);
        out.sent(2, callouts.remove(0));
        assert_eq!(out.answered(2, Some(404), 0), Some(Delivery::Refused));
        assert!(out.is_empty());
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
        let mut callouts = out.take(0);
        out.sent(3, callouts.remove(0));
        assert_eq!(out.answered(3, Some(400), 0), Some(Delivery::Refused));
        assert!(out.is_empty());
        assert!(out.take(0).is_empty());
    }

    #[test]
    fn a_report_in_flight_counts_until_stored() {
        let mut out = Outbox::default();
        out.push(job(1));
        let mut callouts = out.take(0);
        out.sent(7, callouts.remove(0));
        assert_eq!(out.len(), 1);
        assert_eq!(out.answered(8, Some(200), 0), None, "an unknown token");
        assert_eq!(out.answered(7, Some(200), 0), Some(Delivery::Stored));
        assert!(out.is_empty());
    }

    #[test]
    fn a_report_not_taken_is_sent_again_after_a_growing_backoff() {
        let mut out = Outbox::default();
        out.push(job(1));
        out.push(job(2));
        let mut callouts = out.take(1_000).into_iter();
        out.sent(1, callouts.next().unwrap());
        out.sent(2, callouts.next().unwrap());
        assert_eq!(out.answered(2, Some(200), 1_000), Some(Delivery::Stored));
        assert_eq!(out.answered(1, None, 1_000), Some(Delivery::Failed));
        assert!(out.take(1_100).is_empty(), "backing off");
        let again = out.take(1_000 + FIRST_BACKOFF_MS);
        assert_eq!(again.len(), 1, "the stored report is gone");
        assert_eq!(alone(&again[0]).body, vec![1]);
        out.unsent(again.into_iter().next().unwrap(), 2_000);
        assert!(out.take(2_000 + FIRST_BACKOFF_MS).is_empty());
        assert_eq!(out.take(2_000 + 2 * FIRST_BACKOFF_MS).len(), 1);
        for _ in 0..20 {
            out.unsent(Callout::Alone(job(3)), 0);
        }
        assert!(out.take(MAX_BACKOFF_MS - 1).is_empty());
        assert!(
            !out.take(MAX_BACKOFF_MS).is_empty(),
            "the backoff is capped"
        );
    }
}
