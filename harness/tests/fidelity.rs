//! The fidelity suite against the harness: every scenario of `tests/fidelity/scenarios.json`
//! (recorded from real Envoy, see `tests/fidelity/README.md`) replayed with the fidelity filter
//! (`tests/fidelity-filter`), asserting the same `expect`. Where the two disagree, the harness is
//! wrong. One test per scenario, named after it; `scenario_list_matches_the_file` keeps the list
//! below equal to the file so none is silently missed, and every scenario runs here: a field this
//! runner does not know (an old `envoy_only` among them) fails the suite instead of being ignored.

// Test helpers outside #[test] functions may unwrap too (clippy.toml covers only the tests).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use livecheck_harness::{compile, read_fresh_wasm, FailurePolicy, Host, Module, Options, StreamId};
use serde_json::{Map, Value};

/// The scenario file (compiled in, so editing it rebuilds this test).
const SCENARIOS: &str = include_str!("../../tests/fidelity/scenarios.json");

/// The clusters of the Envoy config the Envoy runner renders (`tests/e2e/envoy_process.py`:
/// `envoy/livecheck.yaml` plus `fidelity_callout`).
const CLUSTERS: [&str; 3] = ["vendor_api", "livecheck-judge", "fidelity_callout"];

/// What the raw client puts in `host:` (`tests/e2e/raw_client.py`).
const AUTHORITY: &str = "fidelity.test";

macro_rules! scenarios {
    ($($name:ident),* $(,)?) => {
        /// Every scenario this runner replays, in file order.
        const NAMES: &[&str] = &[$(stringify!($name)),*];
        $(
            #[test]
            fn $name() {
                replay(stringify!($name));
            }
        )*
    };
}

scenarios![
    response_body_size_is_what_is_buffered,
    continue_after_pause_forwards_buffered_data,
    set_body_replaces_whole_chunk,
    set_body_appends_at_end,
    set_body_prepends_at_zero,
    set_body_replaces_prefix,
    set_body_middle_offset_is_bad_argument,
    set_body_past_end_appends,
    local_reply_runs_response_callbacks,
    second_local_reply_from_response_phase,
    local_reply_from_response_headers_replaces_answer,
    local_reply_after_headers_sent_resets,
    unexported_response_callbacks_are_skipped,
    callout_without_authority_is_bad_argument,
    callout_without_path_is_bad_argument,
    callout_without_method_is_bad_argument,
    callout_to_unknown_cluster_is_bad_argument,
    callout_answer_reaches_the_filter,
    callout_timeout_is_a_504_answer,
    callout_reset_after_its_headers_arrives_empty,
    held_body_replaced_from_a_callout_after_headers_went,
    request_body_held_across_a_callout_after_headers_went,
    response_headers_pause_with_allow_on_headers_stop_iteration,
    response_headers_pause_without_allow_stalls_body,
    request_body_size_is_what_is_buffered,
    request_headers_pause_reads_body_then_sets_header,
    request_buffered_past_limit_is_413,
    response_buffered_past_limit_after_headers_resets,
    response_buffered_past_limit_with_headers_held_is_500,
    metrics_appear_as_wasmcustom_stats,
    vm_environment_is_what_the_vm_config_gives,
    vm_environment_is_empty_without_environment_variables,
    panic_fails_closed_then_fresh_vm,
    request_headers_unreadable_in_request_body_after_continue,
    request_headers_unreadable_in_response_phase,
    properties_request_and_plugin,
    shared_data_round_trip_and_cas,
];

fn scenarios() -> Vec<Value> {
    let file: Value = serde_json::from_str(SCENARIOS).expect("scenarios.json is JSON");
    file["scenarios"]
        .as_array()
        .expect("`scenarios` is a list")
        .clone()
}

#[test]
fn scenario_list_matches_the_file() {
    let in_file: Vec<String> = scenarios()
        .iter()
        .map(|s| {
            s["name"]
                .as_str()
                .expect("every scenario has a name")
                .to_owned()
        })
        .collect();
    let unique: BTreeSet<&String> = in_file.iter().collect();
    assert_eq!(unique.len(), in_file.len(), "scenario names are unique");
    let listed: Vec<String> = NAMES.iter().map(|n| (*n).to_owned()).collect();
    assert_eq!(
        listed, in_file,
        "the scenarios! list in harness/tests/fidelity.rs must name every scenario of \
         tests/fidelity/scenarios.json, in file order"
    );
}

/// The fields of a scenario this runner replays (`tests/fidelity/README.md`); `then` steps have
/// the exchange's fields and `after_ms`.
const SCENARIO_FIELDS: [&str; 8] = [
    "name", "rule", "filter", "request", "upstream", "callouts", "expect", "then",
];
const STEP_FIELDS: [&str; 5] = ["after_ms", "request", "upstream", "callouts", "expect"];

#[test]
fn every_scenario_states_its_rule_and_has_only_fields_this_runner_replays() {
    for s in scenarios() {
        let name = s["name"].as_str().unwrap_or_default();
        assert!(
            s["rule"].as_str().is_some_and(|r| !r.trim().is_empty()),
            "{name} states no rule"
        );
        assert!(s.get("expect").is_some(), "{name} has no expect");
        // A field nobody reads here would be a part of the scenario the harness never checked
        // (as `envoy_only`, which once skipped a scenario and passed): every scenario runs in both.
        let fields = s.as_object().expect("a scenario is an object").keys();
        for field in fields {
            assert!(
                SCENARIO_FIELDS.contains(&field.as_str()),
                "{name}: `{field}` is not a field this runner replays"
            );
        }
        for step in s
            .get("then")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            for field in step.as_object().expect("a step is an object").keys() {
                assert!(
                    STEP_FIELDS.contains(&field.as_str()),
                    "{name}: `then` step field `{field}` is not one this runner replays"
                );
            }
        }
    }
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The fidelity filter's bytes, read once for all tests (refused when missing or stale).
fn wasm() -> &'static [u8] {
    static WASM: OnceLock<Vec<u8>> = OnceLock::new();
    WASM.get_or_init(|| {
        read_fresh_wasm(
            &workspace().join("tests/fidelity-filter"),
            "fidelity_filter",
        )
        .unwrap_or_else(|e| panic!("{e}"))
    })
}

/// The fidelity filter, compiled once for all tests.
fn module() -> &'static Module {
    static MODULE: OnceLock<Module> = OnceLock::new();
    MODULE.get_or_init(|| compile(wasm()).unwrap_or_else(|e| panic!("{e}")))
}

/// The module a scenario runs: the fidelity filter, less the exports its `filter.without_exports`
/// names (as the Envoy runner loads it).
fn module_for(filter: Option<&Value>) -> Module {
    let names = text_list(filter.and_then(|f| f.get("without_exports")));
    if names.is_empty() {
        return module().clone();
    }
    compile(&without_exports(wasm(), &names)).unwrap_or_else(|e| panic!("{e}"))
}

/// `wasm` with the named exports taken out of its export section (section 7: a vector of name,
/// kind byte, index); every other byte as it was. Each name must be exported.
fn without_exports(wasm: &[u8], names: &[String]) -> Vec<u8> {
    let mut out = wasm[..8].to_vec();
    let mut pos = 8;
    let mut removed = Vec::new();
    while pos < wasm.len() {
        let id = wasm[pos];
        let (size, start) = read_leb(wasm, pos + 1);
        let end = start + size;
        let mut body = wasm[start..end].to_vec();
        if id == 7 {
            let (count, mut at) = read_leb(&body, 0);
            let mut kept = Vec::new();
            let mut kept_count = 0;
            for _ in 0..count {
                let (length, name_at) = read_leb(&body, at);
                let name = std::str::from_utf8(&body[name_at..name_at + length]).unwrap();
                let (_, next) = read_leb(&body, name_at + length + 1);
                if names.iter().any(|n| n == name) {
                    removed.push(name.to_owned());
                } else {
                    kept.extend_from_slice(&body[at..next]);
                    kept_count += 1;
                }
                at = next;
            }
            body = write_leb(kept_count);
            body.extend(kept);
        }
        out.push(id);
        out.extend(write_leb(body.len()));
        out.extend(body);
        pos = end;
    }
    removed.sort();
    let mut wanted = names.to_vec();
    wanted.sort();
    assert_eq!(removed, wanted, "the fidelity filter exports each name");
    out
}

/// An unsigned LEB128 number at `at`, and where what follows it starts.
fn read_leb(bytes: &[u8], mut at: usize) -> (usize, usize) {
    let (mut value, mut shift) = (0usize, 0);
    loop {
        let byte = bytes[at];
        at += 1;
        value |= usize::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return (value, at);
        }
        shift += 7;
    }
}

fn write_leb(mut value: usize) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = u8::try_from(value & 0x7f).unwrap();
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

/// The plugin options the Envoy runner configures (`tests/e2e/conftest.py` `fidelity_envoy`).
fn options(filter: Option<&Value>) -> Options {
    let empty = Map::new();
    let filter = filter.and_then(Value::as_object).unwrap_or(&empty);
    let plugin_config = filter
        .get("plugin_config")
        .map_or_else(|| "{}".to_owned(), Value::to_string);
    let failure_policy = match filter.get("failure_policy").and_then(Value::as_str) {
        None | Some("FAIL_RELOAD") => FailurePolicy::FailReload,
        Some("FAIL_CLOSED") => FailurePolicy::FailClosed,
        Some("FAIL_OPEN") => FailurePolicy::FailOpen,
        Some(other) => panic!("unknown failure_policy {other}"),
    };
    let mut options = Options {
        plugin_config: plugin_config.into_bytes(),
        clusters: CLUSTERS.iter().map(|c| (*c).to_owned()).collect(),
        allow_on_headers_stop_iteration: filter
            .get("allow_on_headers_stop_iteration")
            .and_then(Value::as_bool)
            .unwrap_or(true),
        failure_policy,
        root_id: "fidelity".to_owned(),
        plugin_name: "fidelity".to_owned(),
        vm_id: "fidelity".to_owned(),
        ..Options::default()
    };
    if let Some(env) = filter.get("environment").and_then(Value::as_object) {
        options.environment = env
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
            .collect();
    }
    if let Some(limit) = filter.get("buffer_limit").and_then(Value::as_u64) {
        options.buffer_limit = usize::try_from(limit).unwrap();
    }
    options
}

fn replay(name: &str) {
    let scenario = scenarios()
        .into_iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("{name} is not in tests/fidelity/scenarios.json"));
    let module = module_for(scenario.get("filter"));
    let mut host = Host::from_module(&module, options(scenario.get("filter")))
        .unwrap_or_else(|e| panic!("{name}: the fidelity filter did not start: {e}"));
    exchange(&mut host, &scenario, name);
    for (i, step) in scenario
        .get("then")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        if let Some(ms) = step.get("after_ms").and_then(Value::as_u64) {
            host.advance_time(Duration::from_millis(ms));
        }
        exchange(&mut host, step, &format!("{name} (then #{})", i + 1));
    }
}

fn text_list(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| c.as_str().expect("chunks are strings").to_owned())
        .collect()
}

fn string_map(v: Option<&Value>) -> Vec<(String, String)> {
    v.and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| {
            let v = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
            (k.to_lowercase(), v)
        })
        .collect()
}

/// One scripted answer of the upstream double (`tests/e2e/upstream_double.py` `Answer`).
struct Answer {
    status: u64,
    headers: Vec<(String, String)>,
    body_chunks: Vec<String>,
    after_upstream_end: bool,
    hang: bool,
    /// The answer breaks off after its headers (`"reset"`): Envoy fails the callout.
    reset: bool,
}

impl Answer {
    fn from_spec(spec: &Value) -> Self {
        if spec == "timeout" || spec == "reset" {
            return Self {
                status: 0,
                headers: Vec::new(),
                body_chunks: Vec::new(),
                after_upstream_end: false,
                hang: spec == "timeout",
                reset: spec == "reset",
            };
        }
        let mut body_chunks = text_list(spec.get("body_chunks"));
        if spec.get("body_chunks").is_none() {
            if let Some(body) = spec.get("body").and_then(Value::as_str) {
                if !body.is_empty() {
                    body_chunks.push(body.to_owned());
                }
            }
        }
        Self {
            status: spec.get("status").and_then(Value::as_u64).unwrap_or(200),
            headers: string_map(spec.get("headers")),
            body_chunks,
            after_upstream_end: spec.get("after").and_then(Value::as_str) == Some("upstream_end"),
            hang: false,
            reset: false,
        }
    }

    /// What the double answers a path nobody scripted when no upstream answer is scripted.
    fn unscripted() -> Self {
        Self {
            status: 599,
            headers: Vec::new(),
            body_chunks: vec!["upstream was not scripted".to_owned()],
            after_upstream_end: false,
            hang: false,
            reset: false,
        }
    }

    fn headers(&self) -> Vec<(String, String)> {
        let mut headers = vec![(":status".to_owned(), self.status.to_string())];
        headers.extend(self.headers.iter().cloned());
        headers
    }

    fn body(&self) -> String {
        self.body_chunks.concat()
    }
}

/// The callout side of one exchange: what the callout cluster was asked, and what it answers.
struct Callouts<'a> {
    by_path: Option<&'a Map<String, Value>>,
    upstream: Option<&'a Value>,
    /// Paths of the callouts the scripted paths received, in dispatch order.
    received: Vec<String>,
    seen: BTreeSet<u32>,
    /// Tokens answered only after the upstream's last chunk.
    after_upstream_end: Vec<u32>,
}

impl Callouts<'_> {
    fn answer_for(&self, path: &str) -> (Answer, bool) {
        let bare = path.split('?').next().unwrap_or(path);
        match self.by_path.and_then(|m| m.get(bare)) {
            Some(spec) => (Answer::from_spec(spec), true),
            None => (
                self.upstream
                    .map_or_else(Answer::unscripted, Answer::from_spec),
                false,
            ),
        }
    }

    /// Answers every newly dispatched callout that is answered at once, until none is left.
    fn pump(&mut self, host: &mut Host) {
        loop {
            let fresh: Vec<_> = host
                .pending_callouts()
                .into_iter()
                .filter(|c| !self.seen.contains(&c.token))
                .collect();
            if fresh.is_empty() {
                return;
            }
            for c in fresh {
                self.seen.insert(c.token);
                let path = c.header(":path").unwrap_or_default().to_owned();
                let (answer, scripted) = self.answer_for(&path);
                if scripted {
                    self.received.push(path);
                }
                if answer.hang {
                    continue;
                }
                if answer.reset {
                    host.fail_callout(c.token).unwrap();
                    continue;
                }
                if answer.after_upstream_end {
                    self.after_upstream_end.push(c.token);
                    continue;
                }
                host.answer_callout(c.token, &answer.headers(), answer.body().as_bytes())
                    .unwrap();
            }
        }
    }

    /// The upstream finished: the callouts waiting for it are answered.
    fn upstream_ended(&mut self, host: &mut Host) {
        for token in std::mem::take(&mut self.after_upstream_end) {
            let Some(c) = host
                .pending_callouts()
                .into_iter()
                .find(|c| c.token == token)
            else {
                continue;
            };
            let path = c.header(":path").unwrap_or_default().to_owned();
            let (answer, _) = self.answer_for(&path);
            host.answer_callout(token, &answer.headers(), answer.body().as_bytes())
                .unwrap();
            self.pump(host);
        }
    }

    /// Callouts nobody answers: emulated time runs until their own timeouts fire.
    fn let_time_out(&mut self, host: &mut Host) {
        loop {
            let waiting = host
                .pending_callouts()
                .into_iter()
                .filter_map(|c| c.timeout)
                .max();
            let Some(timeout) = waiting else {
                return;
            };
            host.advance_time(timeout);
            self.pump(host);
        }
    }
}

/// One request through the host, as the Envoy runner's `_exchange` does, then its asserts.
fn exchange(host: &mut Host, step: &Value, label: &str) {
    let request = &step["request"];
    let upstream = step.get("upstream");
    let mut callouts = Callouts {
        by_path: step.get("callouts").and_then(Value::as_object),
        upstream,
        received: Vec::new(),
        seen: BTreeSet::new(),
        after_upstream_end: Vec::new(),
    };

    let s = host.new_stream();
    let mut headers = vec![
        (":authority".to_owned(), AUTHORITY.to_owned()),
        (
            ":path".to_owned(),
            request["path"].as_str().unwrap_or("/").to_owned(),
        ),
        (
            ":method".to_owned(),
            request["method"].as_str().unwrap_or("GET").to_owned(),
        ),
        (":scheme".to_owned(), "http".to_owned()),
    ];
    headers.extend(string_map(request.get("headers")));
    headers.push(("x-forwarded-proto".to_owned(), "http".to_owned()));
    let chunks = text_list(request.get("body_chunks"));
    host.send_request_headers(s, &headers, chunks.is_empty())
        .unwrap();
    callouts.pump(host);
    if !chunks.is_empty() {
        for chunk in &chunks {
            host.send_request_body(s, chunk.as_bytes(), false).unwrap();
            callouts.pump(host);
        }
        // Envoy delivers the end of a chunked body as its own, empty callback.
        host.send_request_body(s, b"", true).unwrap();
        callouts.pump(host);
    }

    // The double answers once it read the whole request.
    let up = host.upstream_received(s);
    if let Some(spec) = upstream {
        if up.headers.is_some() && up.end_of_stream && !up.reset {
            let answer = Answer::from_spec(spec);
            let body = answer.body_chunks.clone();
            host.send_response_headers(s, &answer.headers(), body.is_empty())
                .unwrap();
            callouts.pump(host);
            if !body.is_empty() {
                for chunk in &body {
                    if open_response(host, s) {
                        host.send_response_body(s, chunk.as_bytes(), false).unwrap();
                        callouts.pump(host);
                    }
                }
                if open_response(host, s) {
                    host.send_response_body(s, b"", true).unwrap();
                    callouts.pump(host);
                }
            }
        }
    }
    callouts.upstream_ended(host);
    callouts.let_time_out(host);
    host.finish_stream(s).unwrap();

    check(host, s, step, label, &callouts.received);
}

/// Whether the upstream can still send on the stream (Envoy drops what follows a reset).
fn open_response(host: &Host, s: StreamId) -> bool {
    !host.upstream_received(s).reset
}

fn check(host: &Host, s: StreamId, step: &Value, label: &str, callout_paths: &[String]) {
    let expect = &step["expect"];
    let got = host.caller_received(s);
    let body = got.body_text();
    let seen = format!(
        "{label}: status={:?} reset={} end_of_stream={} headers={:?} body={body:?}",
        got.status(),
        got.reset,
        got.end_of_stream,
        got.headers
    );

    if let Some(status) = expect.get("status").and_then(Value::as_u64) {
        assert_eq!(got.status().map(u64::from), Some(status), "{seen}");
    }
    for (name, value) in string_map(expect.get("headers")) {
        assert_eq!(got.header(&name), Some(value.as_str()), "{name}: {seen}");
    }
    for name in text_list(expect.get("absent_headers")) {
        assert_eq!(got.header(&name), None, "{name} present: {seen}");
    }
    if let Some(want) = expect.get("body").and_then(Value::as_str) {
        assert_eq!(body, want, "{seen}");
    }
    let reset = expect
        .get("reset")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    assert_eq!(got.reset, reset, "reset: {seen}");
    if !reset {
        assert!(got.end_of_stream, "the response never completed: {seen}");
    }

    let up = host.upstream_received(s);
    let up_seen = format!(
        "{label}: upstream headers={:?} body={:?} end_of_stream={} reset={}",
        up.headers,
        up.body_text(),
        up.end_of_stream,
        up.reset
    );
    let incomplete = up.headers.is_some() && !up.end_of_stream;
    let want_incomplete = expect
        .get("upstream_incomplete")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    assert_eq!(
        incomplete, want_incomplete,
        "upstream incomplete: {up_seen}"
    );
    let complete = up.headers.is_some() && up.end_of_stream;
    if step.get("upstream").is_none() {
        assert!(!complete, "the request reached upstream: {up_seen}");
    } else {
        assert!(complete, "the upstream got no complete request: {up_seen}");
        if let Some(want) = expect.get("upstream_body").and_then(Value::as_str) {
            assert_eq!(up.body_text(), want, "{up_seen}");
        }
        for (name, value) in string_map(expect.get("upstream_headers")) {
            assert_eq!(
                up.header(&name),
                Some(value.as_str()),
                "upstream {name}: {up_seen}"
            );
        }
    }
    if expect.get("callout_paths").is_some() {
        assert_eq!(
            callout_paths,
            text_list(expect.get("callout_paths")).as_slice(),
            "callout paths: {seen}"
        );
    }
    for (metric, value) in expect
        .get("metrics")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        assert_eq!(
            host.metric(metric),
            value.as_u64(),
            "{label}: metric {metric} (guest name {:?}: {:?})",
            metric.strip_prefix("wasmcustom."),
            metric
                .strip_prefix("wasmcustom.")
                .and_then(|m| host.metric(m))
        );
    }
}
