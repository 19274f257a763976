//! A proxy-wasm HTTP filter that does nothing: every callback continues at once. Loaded exactly as
//! livecheck is (V8, same filter position, same plugin settings), it is the benchmarks' baseline for
//! what any wasm filter costs in Envoy (the VM calls, copying headers in and out), so the difference
//! to livecheck is livecheck's own work.

#[cfg(target_os = "wasi")]
mod filter {
    use proxy_wasm::traits::{Context, HttpContext, RootContext};
    use proxy_wasm::types::{ContextType, LogLevel};

    proxy_wasm::main! {{
        proxy_wasm::set_log_level(LogLevel::Warn);
        proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(Root) });
    }}

    struct Root;

    impl Context for Root {}

    impl RootContext for Root {
        fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
            Some(Box::new(Noop))
        }

        fn get_type(&self) -> Option<ContextType> {
            Some(ContextType::HttpContext)
        }
    }

    /// The SDK's default callbacks: headers, body and trailers all `Continue`, nothing read.
    struct Noop;

    impl Context for Noop {}

    impl HttpContext for Noop {}
}
