//! livecheck: live checks for LLM agent turns, as a proxy-wasm HTTP filter for Envoy.
//!
//! The logic lives in plain Rust modules, tested natively and as wasm32-wasip1 (Node's WASI); the
//! proxy-wasm adapter (`proxy`, wasip1 builds only) is a thin layer over it.

pub mod api;
pub mod base64;
pub mod build_info;
pub mod check;
pub mod config;
pub mod eventstream;
pub mod fold;
pub mod frame;
pub mod host;
pub(crate) mod json;
pub mod jsonarray;
pub mod judge;
pub mod lanes;
pub mod lost_reports;
pub mod mcp;
pub mod outbox;
pub mod pattern;
pub mod profile;
#[cfg(test)]
mod profiling;
pub mod record;
pub mod recovery;
pub mod root;
pub mod scan;
pub mod sse;
pub mod stream;
pub mod swar;
pub mod tools;
pub mod turn;
pub mod verdict;

#[cfg(target_os = "wasi")]
mod proxy;
