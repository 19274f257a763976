//! An HTTP stream's side of the adapter: each proxy-wasm HTTP callback becomes a call on the
//! stream's [`Turn`], and [`WasmHost`] is the [`Host`] it runs through.
//!
//! Its own room because the header maps are cached here per callback (one host call per map
//! instead of one per header), the one thing the stream's door does beyond translating calls.

use std::cell::RefCell;
use std::rc::Rc;

use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::Action;

use super::{abi, level, Counters};
use crate::host::{Flow, Host, LogLevel, SharedStore};
use crate::outbox::Job;
use crate::root::Vm;
use crate::turn::Turn;

/// The request header that makes a fault-injection build trap (`--features faults`, never shipped).
#[cfg(feature = "faults")]
const FAULT_HEADER: &str = "x-livecheck-fault";

pub(super) struct Stream {
    pub(super) turn: Option<Turn>,
    pub(super) host: WasmHost,
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
        self.host.vm.forget(self.host.context_id);
    }
}

fn action(flow: Flow) -> Action {
    match flow {
        Flow::Continue => Action::Continue,
        Flow::Pause => Action::Pause,
    }
}

/// [`Host`] over the proxy-wasm ABI. Every refusal by the host becomes `None`/`false`.
pub(super) struct WasmHost {
    /// The stream's context.
    context_id: u32,
    counters: Counters,
    /// What the stream shares with the root: the outbox, the timers, the VM's report count.
    vm: Rc<Vm>,
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
    pub(super) fn new(context_id: u32, counters: Counters, vm: Rc<Vm>) -> Self {
        Self {
            context_id,
            counters,
            vm,
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
}

impl SharedStore for WasmHost {
    fn get(&self, key: &str) -> Option<(Vec<u8>, u32)> {
        super::shared_get(key)
    }

    fn set(&mut self, key: &str, value: &[u8], cas: u32) -> bool {
        super::shared_set(key, value, cas)
    }
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
        super::dispatch(cluster, headers, body, timeout_ms)
    }

    fn callout_status(&self) -> Option<u16> {
        super::callout_status()
    }

    fn callout_body(&self, size: usize) -> Option<Vec<u8>> {
        abi::buffer(abi::HTTP_CALL_RESPONSE_BODY, 0, size).ok()
    }

    fn deliver(&mut self, job: Job) {
        let vm = Rc::clone(&self.vm);
        vm.deliver(self, job);
    }

    fn resume_request(&mut self) {
        let _ = abi::continue_stream(abi::HTTP_REQUEST_STREAM);
    }

    fn resume_response(&mut self) {
        let _ = abi::continue_stream(abi::HTTP_RESPONSE_STREAM);
    }

    fn close_response(&mut self) {
        self.vm.forget(self.context_id);
        let _ = abi::close_stream(abi::HTTP_RESPONSE_STREAM);
    }

    fn close_response_soon(&mut self) {
        let now = self.now_unix_millis();
        self.vm.close_soon(self.context_id, now);
    }

    fn release_response_headers_soon(&mut self) {
        let now = self.now_unix_millis();
        self.vm.release_soon(self.context_id, now);
    }

    fn response_headers_released(&mut self) -> bool {
        self.vm.headers_released(self.context_id)
    }

    fn holds_response_headers(&self) -> bool {
        // Only where Envoy's `allow_on_headers_stop_iteration` lets it (the operator says so
        // with `hold_answer_headers`).
        false
    }

    fn ends_response_cleanly(&self) -> bool {
        // proxy-wasm has no call that ends a response: a cut stream is reset after its closing
        // events.
        false
    }

    fn increment_counter(&mut self, name: &str) {
        super::count(&self.counters, name, 1);
    }

    fn log(&mut self, level_: LogLevel, message: &str) {
        abi::log(level(level_), message);
    }

    fn now_unix_millis(&self) -> u64 {
        super::now_unix_millis()
    }

    fn random(&mut self) -> u64 {
        super::random()
    }
}
