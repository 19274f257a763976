//! The proxy-wasm adapter: the only code that talks to the host, and nothing but a translation.
//!
//! Each proxy-wasm callback becomes a call on the logic: the root context's on
//! [`crate::root::Root`] through [`RootAbi`] (a [`RootHost`]), each HTTP stream's on a
//! [`crate::turn::Turn`] through [`stream::WasmHost`] (a [`crate::host::Host`]). `on_configure`
//! reads the plugin configuration and hands it to the root, which refuses the whole config, one
//! log line per problem, when anything is wrong; Envoy then rejects it. A panic hook logs where a
//! panic happened (never its message, which can quote request text) before the VM aborts;
//! `failure_policy: FAIL_RELOAD` then starts a fresh VM.

mod abi;
mod stream;

use std::cell::RefCell;
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::rc::Rc;

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{ContextType, LogLevel as SdkLevel};

use crate::build_info;
use crate::host::{LogLevel, RootHost, SharedStore};
use crate::root::Root;
use crate::turn::Turn;
use stream::{Stream, WasmHost};

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
    proxy_wasm::set_root_context(|id| -> Box<dyn RootContext> { Box::new(WasmRoot::new(id)) });
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
type Counters = Rc<RefCell<HashMap<String, u32, BuildHasherDefault<NameHash>>>>;

/// The hash of a counter's name: a word at a time (FxHash's step), where the default SipHash
/// took ~0.1 µs a lookup in V8 and a checked turn looks ten up. The names are the policy's
/// and livecheck's own, never a caller's, so nothing can choose them to collide.
#[derive(Default)]
struct NameHash(u64);

impl Hasher for NameHash {
    fn write(&mut self, bytes: &[u8]) {
        const K: u64 = 0x517c_c1b7_2722_0a95;
        let mut words = bytes.chunks_exact(8);
        for word in words.by_ref() {
            let word = word.try_into().map_or(0, u64::from_le_bytes);
            self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(K);
        }
        for &byte in words.remainder() {
            self.0 = (self.0.rotate_left(5) ^ u64::from(byte)).wrapping_mul(K);
        }
    }

    fn finish(&self) -> u64 {
        // The multiply leaves its entropy in the high bits; the table indexes by the low ones.
        self.0.rotate_left(26)
    }
}

/// Adds `by` to the counter `name`, defined on first use.
fn count(counters: &Counters, name: &str, by: i64) {
    let id = {
        let known = counters.borrow().get(name).copied();
        match known {
            Some(id) => Some(id),
            None => abi::define_counter(name).ok().inspect(|id| {
                counters.borrow_mut().insert(name.to_owned(), *id);
            }),
        }
    };
    if let Some(id) = id {
        let _ = abi::increment(id, by);
    }
}

/// Sends an HTTP callout, answered to the context that sends it.
fn dispatch(cluster: &str, headers: &[(&str, &str)], body: &[u8], timeout_ms: u64) -> Option<u32> {
    let _span = crate::profile::span("host.dispatch_http_call");
    // The SDK's call registers the token with its dispatcher, which routes the answer back to
    // the sending context's `on_http_call_response`; it returns errors for the statuses Envoy
    // gives.
    proxy_wasm::hostcalls::dispatch_http_call(
        cluster,
        headers.to_vec(),
        Some(body),
        Vec::new(),
        std::time::Duration::from_millis(timeout_ms),
    )
    .ok()
}

/// The `:status` of the callout being answered.
fn callout_status() -> Option<u16> {
    abi::header(abi::HTTP_CALL_RESPONSE_HEADERS, ":status")
        .ok()
        .flatten()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .and_then(|s| s.parse().ok())
}

fn now_unix_millis() -> u64 {
    let _span = crate::profile::span("host.now");
    abi::now_nanos().map_or(0, |n| n / 1_000_000)
}

/// A fresh unpredictable u64: `RandomState` keys come from the host's WASI `random_get`; hashing
/// a constant under a fresh state gives a new value per call.
fn random() -> u64 {
    let _span = crate::profile::span("host.random");
    RandomState::new().hash_one(0u8)
}

/// Envoy's shared data of this plugin's VMs.
fn shared_get(key: &str) -> Option<(Vec<u8>, u32)> {
    abi::shared_data(key).ok().flatten()
}

fn shared_set(key: &str, value: &[u8], cas: u32) -> bool {
    abi::set_shared_data(key, value, cas).is_ok()
}

/// [`RootHost`] over the proxy-wasm ABI, for the root context `context_id`.
struct RootAbi {
    context_id: u32,
    counters: Counters,
}

impl RootAbi {
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
        let _ = abi::set_effective_context(self.context_id);
    }
}

impl SharedStore for RootAbi {
    fn get(&self, key: &str) -> Option<(Vec<u8>, u32)> {
        shared_get(key)
    }

    fn set(&mut self, key: &str, value: &[u8], cas: u32) -> bool {
        shared_set(key, value, cas)
    }
}

impl RootHost for RootAbi {
    fn now_unix_millis(&self) -> u64 {
        now_unix_millis()
    }

    fn random(&mut self) -> u64 {
        random()
    }

    fn log(&mut self, level_: LogLevel, message: &str) {
        abi::log(level(level_), message);
    }

    fn count(&mut self, name: &str, by: i64) {
        count(&self.counters, name, by);
    }

    fn dispatch_callout(
        &mut self,
        cluster: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        timeout_ms: u64,
    ) -> Option<u32> {
        dispatch(cluster, headers, body, timeout_ms)
    }

    fn callout_status(&self) -> Option<u16> {
        callout_status()
    }

    fn set_tick_period(&mut self, period_ms: u32) -> bool {
        abi::set_tick_period_ms(period_ms).is_ok()
    }

    fn close_streams(&mut self, streams: &[u32]) {
        self.as_each(streams, || {
            let _ = abi::close_stream(abi::HTTP_RESPONSE_STREAM);
        });
    }

    fn resume_responses(&mut self, streams: &[u32]) {
        self.as_each(streams, || {
            let _ = abi::continue_stream(abi::HTTP_RESPONSE_STREAM);
        });
    }
}

/// The root context: the [`Root`] logic and its door to the host.
struct WasmRoot {
    root: Root,
    host: RootAbi,
}

impl WasmRoot {
    fn new(context_id: u32) -> Self {
        Self {
            root: Root::default(),
            host: RootAbi {
                context_id,
                counters: Counters::default(),
            },
        }
    }

    /// The profile's totals since the last tick, added to its counters (`src/profile.rs`).
    #[cfg(feature = "profile")]
    fn flush_profile(&mut self) {
        let counters = &self.host.counters;
        for total in crate::profile::take_totals() {
            for (what, by) in [("calls", total.calls), ("ns", total.nanos)] {
                let name = format!("livecheck.profile.{}.{what}", total.name);
                let id = counters.borrow().get(&name).copied();
                let id = match id {
                    Some(id) => Some(id),
                    None => abi::define_counter(&name).ok().inspect(|id| {
                        counters.borrow_mut().insert(name.clone(), *id);
                    }),
                };
                if let Some(id) = id {
                    let _ = abi::increment_untimed(id, i64::try_from(by).unwrap_or(i64::MAX));
                }
            }
        }
    }
}

impl Context for WasmRoot {
    fn on_http_call_response(
        &mut self,
        token: u32,
        _headers: usize,
        _body: usize,
        _trailers: usize,
    ) {
        let _span = crate::profile::span("cb.report_answered");
        self.root.report_answered(&mut self.host, token);
    }
}

impl RootContext for WasmRoot {
    fn on_vm_start(&mut self, _vm_configuration_size: usize) -> bool {
        abi::log(level(LogLevel::Info), &build_info::banner());
        true
    }

    fn on_configure(&mut self, plugin_configuration_size: usize) -> bool {
        match abi::buffer(abi::PLUGIN_CONFIGURATION, 0, plugin_configuration_size) {
            Ok(bytes) => self.root.configure(&mut self.host, &bytes),
            Err(abi::Refused(code)) => {
                abi::log(
                    level(LogLevel::Error),
                    &format!(
                        "config: the plugin configuration could not be read (host status {code})"
                    ),
                );
                false
            }
        }
    }

    fn on_tick(&mut self) {
        let _span = crate::profile::span("cb.tick");
        self.root.tick(&mut self.host);
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
            turn: self.root.policy().map(Turn::new),
            host: WasmHost::new(context_id, Rc::clone(&self.host.counters), self.root.vm()),
        }))
    }
}
