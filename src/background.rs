//! Background checks wait here after a turn until the root context hands them to the sidecar.
//!
//! The turn is never delayed or changed by them: a job is queued when the turn completed, sent
//! from the VM's root context on its next tick (so a stream that ended cannot cancel it), and
//! dropped, counted, when the queue is full or the sidecar does not take it.

use std::collections::VecDeque;

/// The most jobs waiting in one VM.
pub const CAPACITY: usize = 1024;
/// The most jobs sent per tick.
pub const PER_TICK: usize = 32;

/// A callout ready to send: headers (with `:path` etc.) and the JSON body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

#[derive(Debug, Default)]
pub struct Outbox {
    jobs: VecDeque<Job>,
    /// Jobs dropped because the queue was full, since the VM started.
    pub dropped: u64,
}

impl Outbox {
    /// Queues a job; `false` (and counted) when full.
    pub fn push(&mut self, job: Job) -> bool {
        if self.jobs.len() >= CAPACITY {
            self.dropped += 1;
            return false;
        }
        self.jobs.push_back(job);
        true
    }

    /// The next jobs to send, oldest first.
    pub fn take_batch(&mut self) -> Vec<Job> {
        let n = self.jobs.len().min(PER_TICK);
        self.jobs.drain(..n).collect()
    }

    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }
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
    fn batches_leave_oldest_first_and_bounded() {
        let mut out = Outbox::default();
        for i in 0..40 {
            out.push(job(i));
        }
        let first = out.take_batch();
        assert_eq!(first.len(), PER_TICK);
        assert_eq!(first[0].body, vec![0]);
        assert_eq!(out.take_batch().len(), 40 - PER_TICK);
        assert!(out.is_empty());
    }
}
