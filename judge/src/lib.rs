//! livecheck-judge: the sidecar that decides judged checks. The filter sends one `POST /v1/judge`
//! callout per judged check (types in `livecheck-wire`); the sidecar asks the judge model chosen by
//! the check's `judge_model`, through an OpenAI-compatible or an Anthropic backend, with the turn's own
//! key, and answers `passed`, `failed` or `errored`. It never answers `passed` without a verdict.
//! Tool-call checks (`POST /v1/tool-check`) ask the same way whether an operator's condition holds
//! for a tool call the agent's model is about to make ([`tool_prompt`]).
//!
//! It also keeps the results: the filter reports each finished turn (`POST /v1/results`); results,
//! pending background checks, alert state and the event outbox live in SQLite or PostgreSQL
//! ([`store`]); operators read them through [`api`] and the pages of [`pages`]; [`alerts`] and [`events`] tell people and
//! systems when checks fail.
//!
//! Native only: on wasm targets this crate compiles to nothing.

#![cfg(not(target_family = "wasm"))]

pub mod alerts;
pub mod api;
pub mod api_error;
pub mod app;
pub mod auth;
pub mod backend;
pub mod config;
pub mod event_body;
pub mod events;
pub mod ids;
pub mod limits;
pub mod pages;
pub mod pending;
pub mod prompt;
pub mod replicas;
pub mod retry;
pub mod server;
pub mod store;
pub mod tool_prompt;
pub mod verdict;

pub use app::App;
pub use config::{ConfigError, Settings};
pub use server::{router, serve, StartError};
