//! The proxy-wasm adapter: the only code that talks to the host.
//!
//! `on_configure` compiles the plugin configuration into a [`Policy`] and refuses the whole config,
//! one log line per problem, when anything is wrong; Envoy then rejects it. Each HTTP stream runs a
//! [`Turn`] through [`WasmHost`]. A panic hook logs where a panic happened (never its message,
//! which can quote request text) before the VM aborts; `failure_policy: FAIL_RELOAD` then starts
//! a fresh VM.

mod abi;

use std::cell::{Cell, RefCell};
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::rc::Rc;

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, LogLevel as SdkLevel};

use crate::build_info;
use crate::config::Policy;
use crate::host::{Flow, Host, LogLevel};
use crate::judge;
use crate::lost_reports::{self, SharedStore};
use crate::outbox::{Callout, Delivery, Job, Outbox};
use crate::turn::Turn;

proxy_wasm::main! {{
    proxy_wasm::set_log_level(SdkLevel::Info);
    #[cfg(feature = "profile")]
    crate::profile::set_clock(|| abi::now_nanos().unwrap_or(0));
    std::panic::set_hook(Box::new(|info| {
        let at = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_else(|| "unknown location".to_owned());
        abi::log(level(LogLevel::Error) + 1, &format!("livecheck panicked at {at}"));
    }));
    proxy_wasm::set_root_context(|id| -> Box<dyn RootContext> { Box::new(Root::new(id)) });
}}

fn level(l: LogLevel) -> u32 {
    match l {
        LogLevel::Debug => 1,
        LogLevel::Info => 2,
        LogLevel::Warn => 3,
        LogLevel::Error => 4,
    }
}

/// Counter ids by name, shared by every stream of the VM (Envoy defines each name once).
type Counters = Rc<RefCell<HashMap<String, u32>>>;

/// What the root's tick does to streams, by context id and when (ms since the epoch).
#[derive(Debug, Default)]
struct Timers {
    /// Cut streams to reset.
    closing: Vec<(u32, u64)>,
    /// Answers whose headers the filter holds: they go on unless a body callback came first.
    releasing: Vec<(u32, u64)>,
    /// Streams whose held headers a tick let go.
    released: Vec<u32>,
    /// Whether the VM logged yet that held headers had to be let go.
    warned: bool,
}

/// The VM's [`Timers`], shared by the root and every stream.
type SharedTimers = Rc<RefCell<Timers>>;

/// Lists stream `id` in `list` to be acted on at `at`, unless it is listed already.
fn schedule(list: &mut Vec<(u32, u64)>, id: u32, at: u64) {
    if !list.iter().any(|(c, _)| *c == id) {
        list.push((id, at));
    }
}

/// Takes the streams of `list` whose time came by `now`.
fn take_due(list: &mut Vec<(u32, u64)>, now: u64) -> Vec<u32> {
    let due = list
        .iter()
        .filter(|(_, at)| *at <= now)
        .map(|(id, _)| *id)
        .collect();
    list.retain(|(_, at)| *at > now);
    due
}

/// How long an answer's held headers wait for its first body callback (`hold_answer_headers`):
/// without the wasm filter's `allow_on_headers_stop_iteration` Envoy sends none behind them.
const HEADERS_GRACE_MS: u64 = 1_000;

/// The request header that makes a fault-injection build trap (`--features faults`, never shipped).
#[cfg(feature = "faults")]
const FAULT_HEADER: &str = "x-livecheck-fault";

/// This root's entry in the shared count of undelivered reports (`lost_reports`), shared with its
/// streams: its id (0 until configured) and when the root last ticked, the time a count written
/// between ticks carries.
#[derive(Debug, Default)]
struct Ledger {
    id: Cell<u64>,
    tick_ms: Cell<u64>,
}

type SharedLedger = Rc<Ledger>;

impl Ledger {
    /// Writes the outbox's count of undelivered reports to Envoy's shared data.
    fn publish(&self, pending: usize) {
        let id = self.id.get();
        if id != 0 {
            lost_reports::publish(&mut EnvoyShared, id, pending, self.tick_ms.get());
        }
    }
}

/// Envoy's shared data of this plugin's VMs.
struct EnvoyShared;

impl SharedStore for EnvoyShared {
    fn get(&self, key: &str) -> Option<(Vec<u8>, u32)> {
        abi::shared_data(key).ok().flatten()
    }

    fn set(&mut self, key: &str, value: &[u8], cas: u32) -> bool {
        abi::set_shared_data(key, value, cas).is_ok()
    }
}

/// How often the root context sends waiting turn reports and closes cut streams.
const TICK_MS: u32 = 200;
/// How long a cut stream's closing events have to reach the caller before a timer resets it.
const CLOSE_GRACE_MS: u64 = 50;
/// How long the sidecar has to store one report before it is sent again.
const REPORT_TIMEOUT_MS: u64 = 5_000;

struct Root {
    policy: Option<Rc<Policy>>,
    /// When to look next for VMs that stopped with reports undelivered.
    next_sweep_ms: u64,
    /// The root's own door to the host, sharing counters, the outbox and the timers with every
    /// stream.
    host: WasmHost,
}

impl Root {
    fn new(context_id: u32) -> Self {
        Self {
            policy: None,
            next_sweep_ms: 0,
            host: WasmHost::new(
                context_id,
                Counters::default(),
                Rc::new(RefCell::new(Outbox::default())),
                SharedTimers::default(),
                SharedLedger::default(),
            ),
        }
    }

    /// Resets the cut streams whose grace is over.
    fn close_due_streams(&mut self, now: u64) {
        let due = take_due(&mut self.host.timers.borrow_mut().closing, now);
        self.as_each(&due, || {
            let _ = abi::close_stream(abi::HTTP_RESPONSE_STREAM);
        });
    }

    /// Lets go the held answer headers that waited their grace for a body callback in vain: this
    /// Envoy gives the filter no body behind held headers, so the answers go on as if the filter
    /// held none (decided after their headers went), and the VM says so once.
    fn release_due_headers(&mut self, now: u64) {
        let due = {
            let mut timers = self.host.timers.borrow_mut();
            let due = take_due(&mut timers.releasing, now);
            timers.released.extend(&due);
            due
        };
        if due.is_empty() {
            return;
        }
        self.as_each(&due, || {
            let _ = abi::continue_stream(abi::HTTP_RESPONSE_STREAM);
        });
        let warned = std::mem::replace(&mut self.host.timers.borrow_mut().warned, true);
        if !warned {
            self.host.log(
                LogLevel::Warn,
                "livecheck: an answer's held headers got no body within 1 s and were let go: \
                 hold_answer_headers needs the wasm filter's allow_on_headers_stop_iteration: true",
            );
        }
    }

    /// Runs `act` as each of the streams `ids` (the ABI acts on the effective context), then makes
    /// the root effective again.
    fn as_each(&self, ids: &[u32], act: impl Fn()) {
        if ids.is_empty() {
            return;
        }
        for &id in ids {
            if abi::set_effective_context(id).is_ok() {
                act();
            }
        }
        let _ = abi::set_effective_context(self.host.context_id);
    }

    /// The profile's totals since the last tick, added to its counters (`src/profile.rs`).
    #[cfg(feature = "profile")]
    fn flush_profile(&mut self) {
        for total in crate::profile::take_totals() {
            for (what, by) in [("calls", total.calls), ("ns", total.nanos)] {
                let name = format!("livecheck.profile.{}.{what}", total.name);
                let id = self.host.counters.borrow().get(&name).copied();
                let id = match id {
                    Some(id) => Some(id),
                    None => abi::define_counter(&name).ok().inspect(|id| {
                        self.host.counters.borrow_mut().insert(name.clone(), *id);
                    }),
                };
                if let Some(id) = id {
                    let _ = abi::increment_untimed(id, i64::try_from(by).unwrap_or(i64::MAX));
                }
            }
        }
    }

    /// Writes this root's count of undelivered reports, and every [`lost_reports::SWEEP_EVERY_MS`]
    /// counts the reports of VMs that stopped ticking as lost.
    fn keep_ledger(&mut self, now: u64) {
        let ledger = Rc::clone(&self.host.ledger);
        let id = ledger.id.get();
        if id == 0 {
            return;
        }
        ledger.tick_ms.set(now);
        ledger.publish(self.host.outbox.borrow().len());
        if now < self.next_sweep_ms {
            return;
        }
        self.next_sweep_ms = now.saturating_add(lost_reports::SWEEP_EVERY_MS);
        let lost = lost_reports::sweep(&mut EnvoyShared, id, now);
        if lost > 0 {
            self.host.count(
                "livecheck.reports.lost",
                i64::try_from(lost).unwrap_or(i64::MAX),
            );
            self.host.log(
                LogLevel::Error,
                &format!(
                    "livecheck: {lost} turn report(s) of a VM that stopped (a trap or a replaced configuration) were never delivered; counted in livecheck.reports.lost"
                ),
            );
        }
    }

    fn send_reports(&mut self, now: u64) {
        let Some(policy) = &self.policy else {
            return;
        };
        let callouts = self.host.outbox.borrow_mut().take(now);
        for callout in callouts {
            let sent = match (&callout, callout.batch_body()) {
                (_, Some(body)) => {
                    let headers = judge::batch_headers(policy);
                    self.host.dispatch_callout(
                        &policy.judge_cluster,
                        &pairs(&headers),
                        &body,
                        REPORT_TIMEOUT_MS,
                    )
                }
                (Callout::Alone(job), None) if job.batchable => {
                    let headers = judge::report_headers(policy);
                    self.host.dispatch_callout(
                        &policy.judge_cluster,
                        &pairs(&headers),
                        &job.body,
                        REPORT_TIMEOUT_MS,
                    )
                }
                (Callout::Alone(job), None) => self.host.dispatch_callout(
                    &policy.judge_cluster,
                    &pairs(&job.headers),
                    &job.body,
                    REPORT_TIMEOUT_MS,
                ),
                (Callout::Batch(_), None) => None,
            };
            match sent {
                Some(token) => self.host.outbox.borrow_mut().sent(token, callout),
                None => {
                    self.host.increment_counter("livecheck.reports.retried");
                    self.host.outbox.borrow_mut().unsent(callout, now);
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

impl Context for Root {
    /// The sidecar's answer to a turn report: a 2xx means stored, a 4xx that it never will be;
    /// anything else (no answer, a reset, a 5xx) puts the report back in line.
    fn on_http_call_response(
        &mut self,
        token: u32,
        _headers: usize,
        _body: usize,
        _trailers: usize,
    ) {
        let _span = crate::profile::span("cb.report_answered");
        let status = self.host.callout_status();
        let now = self.host.now_unix_millis();
        let delivery = self.host.outbox.borrow_mut().answered(token, status, now);
        let Some(delivery) = delivery else {
            return;
        };
        self.host.ledger.publish(self.host.outbox.borrow().len());
        match delivery {
            Delivery::Stored => {}
            Delivery::NoBatches => self.host.log(
                LogLevel::Warn,
                "livecheck: the sidecar takes no batched turn reports (a livecheck-judge from before them): reports go one by one",
            ),
            Delivery::Failed => self.host.increment_counter("livecheck.reports.retried"),
            Delivery::Refused => {
                self.host.increment_counter("livecheck.reports.refused");
                self.host.log(
                    LogLevel::Error,
                    "livecheck: the sidecar refused a turn report; it is dropped",
                );
            }
        }
    }
}

impl RootContext for Root {
    fn on_vm_start(&mut self, _vm_configuration_size: usize) -> bool {
        abi::log(level(LogLevel::Info), &build_info::banner());
        true
    }

    fn on_configure(&mut self, plugin_configuration_size: usize) -> bool {
        let bytes = match abi::buffer(abi::PLUGIN_CONFIGURATION, 0, plugin_configuration_size) {
            Ok(b) => b,
            Err(abi::Refused(code)) => {
                abi::log(
                    level(LogLevel::Error),
                    &format!(
                        "config: the plugin configuration could not be read (host status {code})"
                    ),
                );
                return false;
            }
        };
        // The text-folding table, built here once per VM so that no turn waits for it.
        crate::fold::warm();
        let policy = Policy::from_json(&bytes).and_then(|mut policy| {
            policy
                .resolve_token(|name| std::env::var(name).ok())
                .map_err(|e| vec![e])?;
            Ok(policy)
        });
        match policy {
            Ok(policy) => {
                let agents = policy.agents.len();
                self.policy = Some(Rc::new(policy));
                // Nonzero: 0 means "not configured".
                let id = self.host.random().max(1);
                self.host.ledger.id.set(id);
                self.host.ledger.tick_ms.set(self.host.now_unix_millis());
                lost_reports::register(&mut EnvoyShared, id);
                if abi::set_tick_period_ms(TICK_MS).is_err() {
                    abi::log(
                        level(LogLevel::Warn),
                        "livecheck: no timer: turn reports cannot be sent",
                    );
                }
                abi::log(
                    level(LogLevel::Info),
                    &format!("livecheck configured: {agents} agent(s)"),
                );
                true
            }
            Err(errors) => {
                for e in &errors {
                    abi::log(level(LogLevel::Error), &e.to_string());
                }
                abi::log(
                    level(LogLevel::Error),
                    &format!("config refused: {} problem(s)", errors.len()),
                );
                false
            }
        }
    }

    /// Sends waiting turn reports from the root context, so no stream's end can cancel them,
    /// then closes cut streams whose upstream went quiet.
    fn on_tick(&mut self) {
        let _span = crate::profile::span("cb.tick");
        let now = self.host.now_unix_millis();
        self.send_reports(now);
        self.keep_ledger(now);
        self.close_due_streams(now);
        self.release_due_headers(now);
        #[cfg(feature = "profile")]
        self.flush_profile();
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }

    fn create_http_context(&self, context_id: u32) -> Option<Box<dyn HttpContext>> {
        let _span = crate::profile::span("cb.create_context");
        // Envoy creates no stream on a plugin whose configuration was refused; should one come,
        // it is refused too rather than passed unchecked.
        Some(Box::new(Stream {
            turn: self.policy.clone().map(Turn::new),
            host: WasmHost::new(
                context_id,
                Rc::clone(&self.host.counters),
                Rc::clone(&self.host.outbox),
                Rc::clone(&self.host.timers),
                Rc::clone(&self.host.ledger),
            ),
        }))
    }
}

struct Stream {
    turn: Option<Turn>,
    host: WasmHost,
}

impl Context for Stream {
    fn on_http_call_response(
        &mut self,
        token_id: u32,
        _num_headers: usize,
        body_size: usize,
        _num_trailers: usize,
    ) {
        let _span = crate::profile::span("cb.callout_response");
        self.host.new_callback();
        if let Some(turn) = &mut self.turn {
            turn.on_callout_response(&mut self.host, token_id, body_size);
        }
    }
}

impl HttpContext for Stream {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        let _span = crate::profile::span("cb.request_headers");
        self.host.new_callback();
        #[cfg(feature = "faults")]
        if self.host.request_header(FAULT_HEADER).as_deref() == Some("trap") {
            core::arch::wasm32::unreachable();
        }
        match &mut self.turn {
            Some(turn) => action(turn.on_request_headers(&mut self.host, end_of_stream)),
            None => {
                self.host.send_local_reply(
                    503,
                    &[("content-type", "text/plain"), ("x-should-retry", "false")],
                    b"livecheck has no valid configuration\n",
                );
                Action::Pause
            }
        }
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        let _span = crate::profile::span("cb.request_body");
        self.host.new_callback();
        self.turn.as_mut().map_or(Action::Continue, |turn| {
            action(turn.on_request_body(&mut self.host, body_size, end_of_stream))
        })
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        let _span = crate::profile::span("cb.response_headers");
        self.host.new_callback();
        self.turn.as_mut().map_or(Action::Continue, |turn| {
            action(turn.on_response_headers(&mut self.host, end_of_stream))
        })
    }

    fn on_http_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        let _span = crate::profile::span("cb.response_body");
        self.host.new_callback();
        self.turn.as_mut().map_or(Action::Continue, |turn| {
            action(turn.on_response_body(&mut self.host, body_size, end_of_stream))
        })
    }

    fn on_log(&mut self) {
        let _span = crate::profile::span("cb.log");
        self.host.new_callback();
        if let Some(turn) = &mut self.turn {
            turn.on_done(&mut self.host);
        }
        self.host.forget_close();
    }
}

fn action(flow: Flow) -> Action {
    match flow {
        Flow::Continue => Action::Continue,
        Flow::Pause => Action::Pause,
    }
}

/// [`Host`] over the proxy-wasm ABI. Every refusal by the host becomes `None`/`false`.
struct WasmHost {
    /// The context this host acts for (the root's, or a stream's).
    context_id: u32,
    counters: Counters,
    outbox: Rc<RefCell<Outbox>>,
    timers: SharedTimers,
    ledger: SharedLedger,
    random: RandomState,
    /// The request and response header maps as read in the current callback (one host call per
    /// map instead of one per header); emptied whenever a callback starts or the map is written.
    headers: [RefCell<Option<HeaderMap>>; 2],
}

/// A header map as Envoy lists it: lowercase names, in order, values as bytes.
type HeaderMap = abi::Pairs;

const REQUEST: usize = 0;
const RESPONSE: usize = 1;

/// The ABI's header map for one of the two maps a stream reads.
fn abi_map(which: usize) -> u32 {
    if which == REQUEST {
        abi::REQUEST_HEADERS
    } else {
        abi::RESPONSE_HEADERS
    }
}

impl WasmHost {
    /// Adds `by` to the counter `name`, defined on first use.
    fn count(&mut self, name: &str, by: i64) {
        let id = {
            let known = self.counters.borrow().get(name).copied();
            match known {
                Some(id) => Some(id),
                None => abi::define_counter(name).ok().inspect(|id| {
                    self.counters.borrow_mut().insert(name.to_owned(), *id);
                }),
            }
        };
        if let Some(id) = id {
            let _ = abi::increment(id, by);
        }
    }

    fn new(
        context_id: u32,
        counters: Counters,
        outbox: Rc<RefCell<Outbox>>,
        timers: SharedTimers,
        ledger: SharedLedger,
    ) -> Self {
        Self {
            context_id,
            counters,
            outbox,
            timers,
            ledger,
            random: RandomState::new(),
            headers: Default::default(),
        }
    }

    /// A callback begins: header maps read before may have changed.
    fn new_callback(&self) {
        for map in &self.headers {
            map.borrow_mut().take();
        }
    }

    /// A header's first value, as Envoy's `get_header_map_value` gives it (names compared without
    /// case), from the map read whole once per callback; `None` when absent or unreadable (the
    /// host refuses a map it no longer lets the filter read).
    fn header(&self, which: usize, name: &str) -> Option<String> {
        let slot = self.headers.get(which)?;
        let mut cached = slot.borrow_mut();
        let map =
            cached.get_or_insert_with(|| abi::header_pairs(abi_map(which)).unwrap_or_default());
        let (_, value) = map
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name.as_bytes()))?;
        std::str::from_utf8(value).ok().map(str::to_owned)
    }

    /// Sets (or with `None` removes) a header, unless the map as read in this callback already
    /// says so: a write the host would make no change with is not made (one host call fewer).
    fn write_header(&mut self, which: usize, name: &str, value: Option<&str>) {
        let unchanged = self
            .headers
            .get(which)
            .and_then(|slot| {
                let cached = slot.borrow();
                let map = cached.as_ref()?;
                let mut values = map
                    .iter()
                    .filter(|(k, _)| k.eq_ignore_ascii_case(name.as_bytes()))
                    .map(|(_, v)| v);
                Some(match (value, values.next(), values.next()) {
                    (None, None, _) => true,
                    (Some(want), Some(only), None) => only == want.as_bytes(),
                    _ => false,
                })
            })
            .unwrap_or(false);
        if unchanged {
            return;
        }
        self.forget_headers(which);
        let _ = abi::set_header(abi_map(which), name, value);
    }

    fn forget_headers(&self, which: usize) {
        if let Some(slot) = self.headers.get(which) {
            slot.borrow_mut().take();
        }
    }

    /// The stream ended or was closed: no timer may reset it or let its headers go (or a later
    /// stream's given its id).
    fn forget_close(&mut self) {
        let id = self.context_id;
        let mut timers = self.timers.borrow_mut();
        timers.closing.retain(|(c, _)| *c != id);
        timers.releasing.retain(|(c, _)| *c != id);
        timers.released.retain(|c| *c != id);
    }
}

fn text(bytes: Vec<u8>) -> Option<String> {
    String::from_utf8(bytes).ok()
}

impl Host for WasmHost {
    fn request_header(&self, name: &str) -> Option<String> {
        self.header(REQUEST, name)
    }

    fn set_request_header(&mut self, name: &str, value: Option<&str>) {
        self.write_header(REQUEST, name, value);
    }

    fn response_header(&self, name: &str) -> Option<String> {
        self.header(RESPONSE, name)
    }

    fn set_response_header(&mut self, name: &str, value: Option<&str>) {
        self.write_header(RESPONSE, name, value);
    }

    fn request_body(&self, size: usize) -> Option<Vec<u8>> {
        abi::buffer(abi::REQUEST_BODY, 0, size).ok()
    }

    fn response_body(&self, size: usize) -> Option<Vec<u8>> {
        abi::buffer(abi::RESPONSE_BODY, 0, size).ok()
    }

    fn replace_response_body(&mut self, size: usize, body: &[u8]) -> bool {
        abi::set_buffer(abi::RESPONSE_BODY, 0, size, body).is_ok()
    }

    fn send_local_reply(&mut self, status: u32, headers: &[(&str, &str)], body: &[u8]) {
        if let Err(abi::Refused(code)) = abi::send_local_response(status, headers, body) {
            self.log(
                LogLevel::Error,
                &format!("livecheck: Envoy refused a local reply (host status {code})"),
            );
        }
    }

    fn dispatch_callout(
        &mut self,
        cluster: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        timeout_ms: u64,
    ) -> Option<u32> {
        let _span = crate::profile::span("host.dispatch_http_call");
        // The SDK's call registers the token with its dispatcher, which routes the answer back to
        // this stream's `on_http_call_response`; it returns errors for the statuses Envoy gives.
        proxy_wasm::hostcalls::dispatch_http_call(
            cluster,
            headers.to_vec(),
            Some(body),
            Vec::new(),
            std::time::Duration::from_millis(timeout_ms),
        )
        .ok()
    }

    fn callout_status(&self) -> Option<u16> {
        abi::header(abi::HTTP_CALL_RESPONSE_HEADERS, ":status")
            .ok()
            .flatten()
            .and_then(text)
            .and_then(|s| s.parse().ok())
    }

    fn callout_body(&self, size: usize) -> Option<Vec<u8>> {
        abi::buffer(abi::HTTP_CALL_RESPONSE_BODY, 0, size).ok()
    }

    fn deliver(&mut self, job: Job) {
        let queued = self.outbox.borrow_mut().push(job);
        if queued {
            self.ledger.publish(self.outbox.borrow().len());
        } else {
            self.increment_counter("livecheck.reports.dropped");
        }
    }

    fn resume_request(&mut self) {
        let _ = abi::continue_stream(abi::HTTP_REQUEST_STREAM);
    }

    fn resume_response(&mut self) {
        let _ = abi::continue_stream(abi::HTTP_RESPONSE_STREAM);
    }

    fn close_response(&mut self) {
        self.forget_close();
        let _ = abi::close_stream(abi::HTTP_RESPONSE_STREAM);
    }

    fn close_response_soon(&mut self) {
        let at = self.now_unix_millis().saturating_add(CLOSE_GRACE_MS);
        schedule(&mut self.timers.borrow_mut().closing, self.context_id, at);
    }

    fn release_response_headers_soon(&mut self) {
        let at = self.now_unix_millis().saturating_add(HEADERS_GRACE_MS);
        schedule(&mut self.timers.borrow_mut().releasing, self.context_id, at);
    }

    fn response_headers_released(&mut self) -> bool {
        let id = self.context_id;
        let mut timers = self.timers.borrow_mut();
        timers.releasing.retain(|(c, _)| *c != id);
        let released = timers.released.contains(&id);
        timers.released.retain(|c| *c != id);
        released
    }

    fn increment_counter(&mut self, name: &str) {
        self.count(name, 1);
    }

    fn log(&mut self, level_: LogLevel, message: &str) {
        abi::log(level(level_), message);
    }

    fn now_unix_millis(&self) -> u64 {
        let _span = crate::profile::span("host.now");
        abi::now_nanos().map_or(0, |n| n / 1_000_000)
    }

    fn random(&mut self) -> u64 {
        // `RandomState` keys come from the host's WASI `random_get`; hashing a counter under a
        // fresh state gives an unpredictable u64 per call.
        let _span = crate::profile::span("host.random");
        self.random = RandomState::new();
        self.random.hash_one(0u8)
    }
}
