//! The VM's root context, as plain Rust over [`RootHost`]: what it does on configure, on its tick
//! and when the sidecar answers a report, and the state it shares with the VM's streams ([`Vm`]).
//!
//! The root context outlives every stream, so what must not end with a stream happens here: turn
//! reports leave from the root's tick ([`crate::outbox`]) so no stream's end can cancel them; the
//! tick writes the VM's count of undelivered reports and counts the reports of VMs that stopped
//! ([`crate::lost_reports`]); and it acts on streams that asked to be woken ([`timers`]). The
//! proxy-wasm adapter (`proxy/`) only translates callbacks and host calls into calls on this, so
//! another adapter can drive the same logic.

pub mod timers;

use std::cell::RefCell;
use std::rc::Rc;

use crate::config::Policy;
use crate::host::{Host, LogLevel, RootHost, SharedStore};
use crate::judge;
use crate::lost_reports::{self, Ledger};
use crate::outbox::{Callout, Delivery, Job, Outbox};
use timers::Timers;

/// How often the root context sends waiting turn reports and closes cut streams.
pub const TICK_MS: u32 = 200;
/// How long the sidecar has to store one report before it is sent again.
pub const REPORT_TIMEOUT_MS: u64 = 5_000;

/// The counters whose names do not come from the policy (a check's and a tool row's come from
/// [`crate::config::Policy::counter_names`]). A host that must define counters up front (the
/// dynamic module's Envoy freezes them after the configuration) defines these and the policy's.
pub const FIXED_COUNTERS: [&str; 6] = [
    "livecheck.reports.dropped",
    "livecheck.reports.lost",
    "livecheck.reports.refused",
    "livecheck.reports.retried",
    crate::turn::UNREAD_FORWARDED,
    crate::turn::UNREAD_REFUSED,
];

/// What the root and every stream of one VM share: the outbox of turn reports, the timers the
/// streams asked for, and the VM's entry in the shared count of undelivered reports.
#[derive(Debug, Default)]
pub struct Vm {
    outbox: RefCell<Outbox>,
    timers: RefCell<Timers>,
    ledger: Ledger,
}

impl Vm {
    /// A finished turn's report joins the outbox (and the VM's count), or is dropped and counted
    /// when the outbox is full.
    pub fn deliver<H: Host + SharedStore>(&self, host: &mut H, job: Job) {
        let queued = self.outbox.borrow_mut().push(job);
        if queued {
            self.publish(host);
        } else {
            host.increment_counter("livecheck.reports.dropped");
        }
    }

    /// Writes the outbox's count of undelivered reports to the shared data.
    fn publish(&self, store: &mut impl SharedStore) {
        let pending = self.outbox.borrow().len();
        self.ledger.publish(store, pending);
    }

    /// Stream `stream` was cut: a later tick resets it (see [`Host::close_response_soon`]).
    pub fn close_soon(&self, stream: u32, now_ms: u64) {
        self.timers.borrow_mut().close_soon(stream, now_ms);
    }

    /// Stream `stream` holds its answer's headers (see [`Host::release_response_headers_soon`]).
    pub fn release_soon(&self, stream: u32, now_ms: u64) {
        self.timers.borrow_mut().release_soon(stream, now_ms);
    }

    /// See [`Host::response_headers_released`].
    pub fn headers_released(&self, stream: u32) -> bool {
        self.timers.borrow_mut().headers_released(stream)
    }

    /// Stream `stream` ended or was closed: no timer acts on it any more.
    pub fn forget(&self, stream: u32) {
        self.timers.borrow_mut().forget(stream);
    }

    /// Reports waiting or in flight.
    pub fn pending_reports(&self) -> usize {
        self.outbox.borrow().len()
    }
}

/// The root context's behaviour: the policy, and the [`Vm`] it shares with its streams.
#[derive(Debug, Default)]
pub struct Root {
    policy: Option<Rc<Policy>>,
    /// When to look next for VMs that stopped with reports undelivered.
    next_sweep_ms: u64,
    vm: Rc<Vm>,
}

impl Root {
    /// The compiled policy a new stream runs with; `None` until a configuration was taken.
    pub fn policy(&self) -> Option<Rc<Policy>> {
        self.policy.clone()
    }

    /// The state a new stream shares with the root.
    pub fn vm(&self) -> Rc<Vm> {
        Rc::clone(&self.vm)
    }

    /// Compiles the plugin configuration `config` and takes it, registers the VM in the shared
    /// count of undelivered reports and starts the tick; or refuses it whole, one log line per
    /// problem (`false`: Envoy then rejects the configuration).
    pub fn configure(&mut self, host: &mut impl RootHost, config: &[u8]) -> bool {
        // The text-folding table, built here once per VM so that no turn waits for it.
        crate::fold::warm();
        let policy = Policy::from_json(config).and_then(|mut policy| {
            policy
                .resolve_token(|name| std::env::var(name).ok())
                .map_err(|e| vec![e])?;
            Ok(policy)
        });
        match policy {
            Ok(policy) => {
                let agents = policy.agents.len();
                if let Some(warning) = policy.unread.warning() {
                    host.log(LogLevel::Warn, &format!("livecheck: {warning}"));
                }
                self.policy = Some(Rc::new(policy));
                // Nonzero: 0 means "not configured".
                let id = host.random().max(1);
                let now = host.now_unix_millis();
                self.vm.ledger.start(id, now);
                lost_reports::register(host, id);
                if !host.set_tick_period(TICK_MS) {
                    host.log(
                        LogLevel::Warn,
                        "livecheck: no timer: turn reports cannot be sent",
                    );
                }
                host.log(
                    LogLevel::Info,
                    &format!("livecheck configured: {agents} agent(s)"),
                );
                true
            }
            Err(errors) => {
                for e in &errors {
                    host.log(LogLevel::Error, &e.to_string());
                }
                host.log(
                    LogLevel::Error,
                    &format!("config refused: {} problem(s)", errors.len()),
                );
                false
            }
        }
    }

    /// Sends waiting turn reports from the root context, so no stream's end can cancel them,
    /// keeps the VM's count of undelivered reports, then closes cut streams whose upstream went
    /// quiet and lets go held headers that waited in vain.
    pub fn tick(&mut self, host: &mut impl RootHost) {
        let now = host.now_unix_millis();
        self.send_reports(host, now);
        self.keep_ledger(host, now);
        self.close_due_streams(host, now);
        self.release_due_headers(host, now);
    }

    /// A finished turn's report handed to the root by a stream of another thread (the dynamic
    /// module's streams run on Envoy's workers, its root on the main thread): it joins the outbox
    /// and leaves on a later tick, or is dropped and counted when the outbox is full.
    pub fn take_report(&mut self, host: &mut impl RootHost, job: Job) {
        let queued = self.vm.outbox.borrow_mut().push(job);
        if queued {
            self.vm.publish(host);
        } else {
            host.count("livecheck.reports.dropped", 1);
        }
    }

    /// The sidecar's answer to the turn report callout `token`: a 2xx means stored, a 4xx that it
    /// never will be; anything else (no answer, a reset, a 5xx) puts the report back in line.
    pub fn report_answered(&mut self, host: &mut impl RootHost, token: u32) {
        let status = host.callout_status();
        let now = host.now_unix_millis();
        let delivery = self.vm.outbox.borrow_mut().answered(token, status, now);
        let Some(delivery) = delivery else {
            return;
        };
        self.vm.publish(host);
        match delivery {
            Delivery::Stored => {}
            Delivery::NoBatches => host.log(
                LogLevel::Warn,
                "livecheck: the sidecar takes no batched turn reports (a livecheck-judge from before them): reports go one by one",
            ),
            Delivery::Failed => host.count("livecheck.reports.retried", 1),
            Delivery::Refused => {
                host.count("livecheck.reports.refused", 1);
                host.log(
                    LogLevel::Error,
                    "livecheck: the sidecar refused a turn report; it is dropped",
                );
            }
        }
    }

    /// Resets the cut streams whose grace is over.
    fn close_due_streams(&mut self, host: &mut impl RootHost, now: u64) {
        let due = self.vm.timers.borrow_mut().due_closes(now);
        if !due.is_empty() {
            host.close_streams(&due);
        }
    }

    /// Lets go the held answer headers that waited their grace for a body callback in vain: this
    /// Envoy gives the filter no body behind held headers, so the answers go on as if the filter
    /// held none (decided after their headers went), and the VM says so once.
    fn release_due_headers(&mut self, host: &mut impl RootHost, now: u64) {
        let due = self.vm.timers.borrow_mut().due_releases(now);
        if due.is_empty() {
            return;
        }
        host.resume_responses(&due);
        if self.vm.timers.borrow_mut().first_warning() {
            host.log(
                LogLevel::Warn,
                "livecheck: an answer's held headers got no body within 1 s and were let go: \
                 hold_answer_headers needs the wasm filter's allow_on_headers_stop_iteration: true",
            );
        }
    }

    /// Writes this VM's count of undelivered reports, and every [`lost_reports::SWEEP_EVERY_MS`]
    /// counts the reports of VMs that stopped ticking as lost.
    fn keep_ledger(&mut self, host: &mut impl RootHost, now: u64) {
        let id = self.vm.ledger.id();
        if id == 0 {
            return;
        }
        self.vm.ledger.ticked(now);
        self.vm.publish(host);
        if now < self.next_sweep_ms {
            return;
        }
        self.next_sweep_ms = now.saturating_add(lost_reports::SWEEP_EVERY_MS);
        let lost = lost_reports::sweep(host, id, now);
        if lost > 0 {
            host.count(
                "livecheck.reports.lost",
                i64::try_from(lost).unwrap_or(i64::MAX),
            );
            host.log(
                LogLevel::Error,
                &format!(
                    "livecheck: {lost} turn report(s) of a VM that stopped (a trap or a replaced configuration) were never delivered; counted in livecheck.reports.lost"
                ),
            );
        }
    }

    /// Sends the outbox's callouts due now; one Envoy refuses waits again and counts as retried.
    fn send_reports(&mut self, host: &mut impl RootHost, now: u64) {
        let Some(policy) = &self.policy else {
            return;
        };
        let callouts = self.vm.outbox.borrow_mut().take(now);
        for callout in callouts {
            let sent = match (&callout, callout.batch_body()) {
                (_, Some(body)) => {
                    let headers = judge::batch_headers(policy);
                    host.dispatch_callout(
                        &policy.judge_cluster,
                        &pairs(&headers),
                        &body,
                        REPORT_TIMEOUT_MS,
                    )
                }
                (Callout::Alone(job), None) if job.batchable => {
                    let headers = judge::report_headers(policy);
                    host.dispatch_callout(
                        &policy.judge_cluster,
                        &pairs(&headers),
                        &job.body,
                        REPORT_TIMEOUT_MS,
                    )
                }
                (Callout::Alone(job), None) => host.dispatch_callout(
                    &policy.judge_cluster,
                    &pairs(&job.headers),
                    &job.body,
                    REPORT_TIMEOUT_MS,
                ),
                (Callout::Batch(_), None) => None,
            };
            match sent {
                Some(token) => self.vm.outbox.borrow_mut().sent(token, callout),
                None => {
                    host.count("livecheck.reports.retried", 1);
                    self.vm.outbox.borrow_mut().unsent(callout, now);
                }
            }
        }
    }
}

fn pairs(headers: &[(String, String)]) -> Vec<(&str, &str)> {
    headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

#[cfg(test)]
mod tests;
