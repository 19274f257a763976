//! livecheck-harness: a wasmtime emulator of Envoy's proxy-wasm host (ABI 0.2.1).
//!
//! A [`Host`] is one VM with its root context, like one Envoy worker thread running the
//! plugin. Drive streams through it as Envoy's filter manager would (request headers, body,
//! trailers from the caller; response headers, body, trailers from the upstream; callout
//! answers; time), then ask what the caller and the upstream received, what was logged,
//! metrics and shared data. The rules it follows are Envoy's, each pinned by a test in
//! `tests/` and documented in `README.md`. Nothing is global: hosts are independent.
//!
//! ```no_run
//! use livecheck_harness::{Host, Options};
//! # fn main() -> Result<(), livecheck_harness::HarnessError> {
//! let wasm = livecheck_harness::read_fresh_wasm(std::path::Path::new("."), "livecheck")?;
//! let mut host = Host::new(&wasm, Options::default())?;
//! let s = host.new_stream();
//! host.send_request_headers(s, &[(":method", "GET"), (":path", "/")], true)?;
//! host.send_response_headers(s, &[(":status", "200")], true)?;
//! assert_eq!(host.caller_received(s).status(), Some(200));
//! host.finish_stream(s)?;
//! # Ok(()) }
//! ```

// Native only: on wasm targets (the filter's own builds list this crate as a dev-dependency)
// the crate is empty.
#![cfg(not(target_family = "wasm"))]
#![deny(missing_docs)]

mod abi;
mod buffers;
mod callout;
mod chain;
mod clock;
mod error;
mod headers;
mod host;
mod hostcalls;
mod memory;
mod metrics;
mod options;
mod pairs;
mod shared;
mod state;
mod stream;
mod vm;
mod wasi;
mod wasm_file;

pub use callout::Callout;
pub use error::HarnessError;
pub use host::{compile, Host};
pub use metrics::STAT_PREFIX;
pub use options::{FailurePolicy, LogLevel, Options};
pub use state::LogRecord;
pub use stream::{Downstream, Received, StreamId, Upstream};
pub use wasm_file::{fresh_wasm, fresh_wasm_in, read_fresh_wasm, WASM_DIR_ENV};
/// The compiled module type accepted by [`Host::from_module`].
pub use wasmtime::Module;
