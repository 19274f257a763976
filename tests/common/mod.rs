//! Shared set-up for the filter's harness tests: the fresh `.wasm` compiled once per test binary,
//! hosts configured from readable JSON, and turns driven under several chunkings.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod fixtures;

use std::path::Path;
use std::sync::OnceLock;

use livecheck_harness::{
    compile, read_fresh_wasm, Callout, HarnessError, Host, Module, Options, StreamId,
};

/// The filter built for wasm32-wasip1, refused when missing or stale, compiled once.
fn module() -> &'static Module {
    static MODULE: OnceLock<Module> = OnceLock::new();
    MODULE.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let wasm = read_fresh_wasm(root, "livecheck").unwrap_or_else(|e| panic!("{e}"));
        compile(&wasm).unwrap_or_else(|e| panic!("{e}"))
    })
}

/// A host (one Envoy worker) running livecheck with `config` as its plugin configuration.
pub fn livecheck(config: &str) -> Host {
    try_livecheck(config).unwrap_or_else(|e| panic!("{e}"))
}

/// `config` (a policy's JSON object) with `max_body_bytes` set to `bytes`.
pub fn with_max_body_bytes(config: &str, bytes: usize) -> String {
    with_setting(config, "max_body_bytes", &bytes.to_string())
}

/// `config` (a policy's JSON object) with the top-level `key` set to `json`.
pub fn with_setting(config: &str, key: &str, json: &str) -> String {
    let rest = config
        .trim_start()
        .strip_prefix('{')
        .unwrap_or_else(|| panic!("not a JSON object"));
    format!("{{\"{key}\": {json},{rest}")
}

/// Like [`livecheck`], for configurations the filter may refuse.
pub fn try_livecheck(config: &str) -> Result<Host, HarnessError> {
    livecheck_with(config, false)
}

/// Like [`livecheck`], with the wasm filter's `allow_on_headers_stop_iteration` as given (Istio and
/// Envoy Gateway cannot set it: `false`; envoy/livecheck.yaml sets it: `true`).
pub fn livecheck_with(
    config: &str,
    allow_on_headers_stop_iteration: bool,
) -> Result<Host, HarnessError> {
    Host::from_module(
        module(),
        Options {
            plugin_config: config.as_bytes().to_vec(),
            allow_on_headers_stop_iteration,
            // As envoy/livecheck.yaml: the judge sidecar's cluster.
            clusters: vec!["livecheck-judge".to_owned()],
            ..Options::default()
        },
    )
}

/// How a body is cut into body callbacks.
#[derive(Debug, Clone, Copy)]
pub enum Chunking {
    Bytes(usize),
    Whole,
}

/// The chunkings every body scenario runs under.
pub const CHUNKINGS: [Chunking; 3] = [Chunking::Bytes(1), Chunking::Bytes(7), Chunking::Whole];

impl Chunking {
    pub fn split<'a>(&self, body: &'a [u8]) -> Vec<&'a [u8]> {
        match self {
            Chunking::Bytes(n) => body.chunks(*n).collect(),
            Chunking::Whole => vec![body],
        }
    }
}

/// Sends a request as Envoy delivers it: headers, each chunk, then the end of the body as its own
/// empty callback (what Envoy does for a chunked body; see tests/fidelity).
pub fn send_request(
    host: &mut Host,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
    chunking: Chunking,
) -> StreamId {
    let s = host.new_stream();
    let mut all = vec![
        (":method", "POST"),
        (":path", path),
        (":authority", "api.test"),
    ];
    all.push(("content-type", "application/json"));
    all.extend_from_slice(headers);
    host.send_request_headers(s, &all, false).unwrap();
    for chunk in chunking.split(body.as_bytes()) {
        host.send_request_body(s, chunk, false).unwrap();
    }
    host.send_request_body(s, b"", true).unwrap();
    s
}

/// The upstream answers, chunked the same way.
pub fn send_answer(
    host: &mut Host,
    s: StreamId,
    headers: &[(&str, &str)],
    body: &str,
    chunking: Chunking,
) {
    let mut all = vec![(":status", "200")];
    all.extend_from_slice(headers);
    host.send_response_headers(s, &all, false).unwrap();
    for chunk in chunking.split(body.as_bytes()) {
        host.send_response_body(s, chunk, false).unwrap();
    }
    host.send_response_body(s, b"", true).unwrap();
}

pub fn json(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(bytes)))
}

/// The callouts in flight to the sidecar's `path` (`/v1/judge`, `/v1/retry`, `/v1/results`).
pub fn callouts_to(host: &Host, path: &str) -> Vec<Callout> {
    host.pending_callouts()
        .into_iter()
        .filter(|c| c.header(":path") == Some(path))
        .collect()
}

/// The callouts in flight that carry turn reports: alone (`/v1/results`) or batched
/// (`/v1/results/batch`).
pub fn report_callouts(host: &Host) -> Vec<Callout> {
    host.pending_callouts()
        .into_iter()
        .filter(|c| matches!(c.header(":path"), Some("/v1/results" | "/v1/results/batch")))
        .collect()
}

/// The reports one callout carries, in order.
pub fn reports_in(c: &Callout) -> Vec<serde_json::Value> {
    let body = json(&c.body);
    match c.header(":path") {
        Some("/v1/results/batch") => body
            .get("reports")
            .and_then(|r| r.as_array().cloned())
            .unwrap_or_default(),
        _ => vec![body],
    }
}

/// The one report a callout carries.
pub fn report_of(c: &Callout) -> serde_json::Value {
    let mut reports = reports_in(c);
    assert_eq!(reports.len(), 1, "one report in the callout");
    reports.remove(0)
}

/// Whether the question is still held from the upstream: its headers may have gone on (the filter
/// never holds headers), but no byte of its body and no end did, so no model was asked.
pub fn question_held(host: &Host, s: StreamId) -> bool {
    let upstream = host.upstream_received(s);
    upstream.body.is_empty() && !upstream.end_of_stream
}

/// Whether the answer is still held from the caller: its headers may have gone on, but no byte of
/// its body and no end did.
pub fn answer_held(host: &Host, s: StreamId) -> bool {
    let caller = host.caller_received(s);
    caller.body.is_empty() && !caller.end_of_stream && !caller.reset
}
