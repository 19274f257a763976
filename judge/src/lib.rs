//! livecheck-judge: the sidecar that decides judged checks. The filter sends one `POST /v1/judge`
//! callout per judged check (types in `livecheck-wire`); the sidecar asks the judge model chosen by
//! the check's `judge_model`, through an OpenAI-compatible or an Anthropic backend, with the turn's own
//! key, and answers `passed`, `failed` or `errored`. It never answers `passed` without a verdict.
//!
//! Native only: on wasm targets this crate compiles to nothing.

#![cfg(not(target_family = "wasm"))]

pub mod backend;
pub mod config;
pub mod prompt;
pub mod retry;
pub mod server;
pub mod verdict;

pub use config::{ConfigError, Settings};
pub use server::{router, serve, App};
