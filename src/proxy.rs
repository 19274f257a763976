//! The proxy-wasm adapter: the only code that talks to the host.
//!
//! Every host call goes through `proxy_wasm::hostcalls` so errors come back as values; nothing
//! here unwraps. A panic hook logs where a panic happened (never its message, which can quote
//! request text) before the VM aborts; Envoy's `failure_policy: FAIL_RELOAD` then starts a fresh VM.

use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{ContextType, LogLevel};

use crate::build_info;

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    std::panic::set_hook(Box::new(|info| {
        let at = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_else(|| "unknown location".to_owned());
        let _ = hostcalls::log(LogLevel::Critical, &format!("livecheck panicked at {at}"));
    }));
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(Root) });
}}

struct Root;

impl Context for Root {}

impl RootContext for Root {
    fn on_vm_start(&mut self, _vm_configuration_size: usize) -> bool {
        let _ = hostcalls::log(LogLevel::Info, &build_info::banner());
        true
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Turn))
    }
}

/// One HTTP stream. Checks arrive with the rule-checks issue; until then every turn passes through.
struct Turn;

impl Context for Turn {}

impl HttpContext for Turn {}
