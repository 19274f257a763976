//! The fidelity filter: one proxy-wasm behaviour per request, chosen by the `x-fidelity-case`
//! request header, each pinning one rule of Envoy's host. Every case makes its outcome visible
//! to the caller (status, a response header, or a rewritten body) so the same scenario data
//! (`tests/fidelity/scenarios.json`) can be asserted against real Envoy and against the harness.
//!
//! Body callbacks are recorded as `body_size` values, the end-of-stream one suffixed `:eos`,
//! e.g. `5,10,15:eos`.

#[cfg(target_os = "wasi")]
mod cut;
#[cfg(target_os = "wasi")]
mod filter;
#[cfg(target_os = "wasi")]
mod raw;
