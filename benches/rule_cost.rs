//! What rule checks cost per 4 KiB request body: natively (the pure logic) and inside the built
//! filter in the wasmtime harness (a whole turn, the 4 KiB question and a 1 KiB answer, with the
//! seed's checks against the same turn with no checks, so the harness's own cost cancels out; the
//! seed's input rule reads the question, its output rule the answer, and each must have passed on
//! every turn). Prints medians of repeated runs, as ratios and per-request figures measured side
//! by side in one run.
//!
//! Then the scanning throughput of the bench rule set (`benches/rules.json`: 5 input and 5 output
//! rules) on Chat requests of 1 KiB, 64 KiB and 1 MiB: natively (the input stage's automaton on the
//! request's text; and parsing the request plus that scan) and in the harness (a whole question
//! through livecheck.wasm minus the same question through the no-op filter's .wasm). Written as JSON
//! to `$BENCH_JSON` (default `target/bench/rule_cost.json`) for `benches/compare.py`.
// A benchmark, not filter code: a broken set-up should stop it loudly.
#![allow(
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing
)]

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use livecheck::api::{self, Api};
use livecheck::config::{Policy, Stage};
use livecheck::verdict::{decide, Reading};
use livecheck_harness::{compile, read_fresh_wasm, Host, Options};

const SEED: &str = include_str!("../examples/seed.json");
const RULES: &str = include_str!("rules.json");
const SCAN_SIZES: [usize; 3] = [1 << 10, 64 << 10, 1 << 20];
const NO_CHECKS: &str =
    r#"{"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {}}}}}"#;

/// A Chat request of about 4 KiB of ordinary text, which passes the seed's checks.
fn body_4k() -> String {
    let sentence = "Where is my order 17 and when will it arrive at the depot near the station? ";
    let text: String = sentence
        .repeat(4096 / sentence.len() + 1)
        .chars()
        .take(4030)
        .collect();
    serde_json::json!({"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": text}]})
        .to_string()
}

/// A Chat Completions answer of about 1 KiB of ordinary text, which passes the seed's output rule.
fn answer_1k() -> String {
    let sentence =
        "Your order 17 left the depot this morning and arrives at the station on Monday. ";
    let text: String = sentence
        .repeat(1024 / sentence.len() + 1)
        .chars()
        .take(860)
        .collect();
    serde_json::json!({
        "id": "chatcmpl-bench", "object": "chat.completion", "created": 1, "model": "gpt-4.1-mini",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 900, "completion_tokens": 180, "total_tokens": 1080}})
    .to_string()
}

/// A Chat request of exactly `size` bytes of ordinary text, which passes the bench rules.
fn chat_body(size: usize) -> String {
    let sentence = "where is my order and when will it arrive at the depot near the station ? ";
    let wrap = |text: &str| {
        serde_json::json!({"model": "gpt-4.1-mini", "messages": [
            {"role": "system", "content": "You are a helpful shop assistant."},
            {"role": "user", "content": text}]})
        .to_string()
    };
    let overhead = wrap("").len();
    let text: String = sentence
        .chars()
        .cycle()
        .take(size.saturating_sub(overhead))
        .collect();
    let body = wrap(&text);
    assert_eq!(body.len(), size);
    body
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs.get(xs.len() / 2).copied().unwrap_or_default()
}

/// Median over `rounds` of the mean time of `iters` calls.
fn measure(rounds: usize, iters: u32, mut f: impl FnMut()) -> Duration {
    let mut samples = Vec::new();
    for _ in 0..rounds {
        let start = Instant::now();
        for _ in 0..iters {
            f();
        }
        samples.push(start.elapsed() / iters);
    }
    median(samples)
}

/// One question through the filter; returns how many body bytes reached upstream.
fn turn(host: &mut Host, body: &str) -> usize {
    exchange(host, body, None).0
}

/// One question through the filter, answered with `answer` when given; returns how many body
/// bytes reached upstream and how many the caller received.
fn exchange(host: &mut Host, body: &str, answer: Option<&str>) -> (usize, usize) {
    let s = host.new_stream();
    host.send_request_headers(
        s,
        &[
            (":method", "POST"),
            (":path", "/v1/chat/completions"),
            (":authority", "api"),
        ],
        false,
    )
    .ok();
    host.send_request_body(s, body.as_bytes(), true).ok();
    let reached = host.upstream_received(s).body.len();
    if let Some(answer) = answer {
        host.send_response_headers(
            s,
            &[(":status", "200"), ("content-type", "application/json")],
            false,
        )
        .ok();
        host.send_response_body(s, answer.as_bytes(), true).ok();
    }
    let received = host.caller_received(s).body.len();
    host.finish_stream(s).ok();
    (reached, received)
}

/// The `.passed` counter of each check (`livecheck.<agent>.<check>`).
fn passes(host: &Host, checks: &[impl AsRef<str>]) -> Vec<u64> {
    checks
        .iter()
        .map(|c| host.metric(&format!("{}.passed", c.as_ref())).unwrap_or(0))
        .collect()
}

/// Each check passed exactly once per measured turn since `before`, and none failed or erred:
/// a filter that skipped the scan, or ran it on some turns only, would measure nothing.
fn ran_on_every_turn(
    host: &Host,
    checks: &[impl AsRef<str>],
    before: &[u64],
    turns: u64,
    what: &str,
) {
    for (check, (after, before)) in checks.iter().zip(passes(host, checks).iter().zip(before)) {
        let check = check.as_ref();
        assert_eq!(
            after - before,
            turns,
            "{check} passed {} times in {turns} of {what}",
            after - before
        );
        for outcome in ["failed", "errored"] {
            let n = host.metric(&format!("{check}.{outcome}")).unwrap_or(0);
            assert_eq!(n, 0, "{check}.{outcome}");
        }
    }
}

fn main() {
    let body = body_4k();
    assert!((4096..4200).contains(&body.len()), "{}", body.len());
    let policy = Policy::from_json(SEED.as_bytes()).unwrap_or_else(|e| panic!("{e:?}"));
    let version = policy
        .select(None, None, None)
        .unwrap_or_else(|e| panic!("{e}"));

    let parse = measure(15, 2000, || {
        black_box(api::parse_request(Api::ChatCompletions, black_box(body.as_bytes())).ok());
    });
    let request =
        api::parse_request(Api::ChatCompletions, body.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    let scan = measure(15, 2000, || {
        let reading = Reading {
            rule_text: black_box(&request.input_text),
            failed: None,
            judged_apply: true,
            readable: true,
            judged: &[],
        };
        black_box(decide(&version, Stage::Input, &reading, 1));
    });

    let wasm = read_fresh_wasm(Path::new(env!("CARGO_MANIFEST_DIR")), "livecheck")
        .unwrap_or_else(|e| panic!("{e}"));
    let module = compile(&wasm).unwrap_or_else(|e| panic!("{e}"));
    let host_with = |config: &str| {
        Host::from_module(
            &module,
            Options {
                plugin_config: config.as_bytes().to_vec(),
                // As every shipped Envoy config (and Istio's, Envoy Gateway's): no
                // allow_on_headers_stop_iteration, which livecheck does not need.
                ..Options::default()
            },
        )
        .unwrap_or_else(|e| panic!("{e}"))
    };
    let answer = answer_1k();
    let (mut checked, mut unchecked) = (host_with(SEED), host_with(NO_CHECKS));
    // The turn must really run the checks, reach upstream and come back whole, or this measures
    // nothing.
    for host in [&mut checked, &mut unchecked] {
        assert_eq!(
            exchange(host, &body, Some(&answer)),
            (body.len(), answer.len()),
            "the question reached upstream and the answer the caller"
        );
    }
    // The input rule reads the question, the output rule the answer.
    let seed_rules = ["livecheck.orders.no-passwords", "livecheck.orders.no-iban"];
    let ran_before = passes(&checked, &seed_rules);
    // Interleave the two so machine noise hits both alike.
    let (rounds, per_round) = (15, 300);
    let mut with = Vec::new();
    let mut without = Vec::new();
    for _ in 0..rounds {
        with.push(measure(1, per_round, || {
            black_box(exchange(&mut checked, &body, Some(&answer)));
        }));
        without.push(measure(1, per_round, || {
            black_box(exchange(&mut unchecked, &body, Some(&answer)));
        }));
    }
    let (with, without) = (median(with), median(without));
    ran_on_every_turn(
        &checked,
        &seed_rules,
        &ran_before,
        u64::from(rounds * per_round),
        "the 4 KiB turns",
    );

    println!(
        "rule-check cost per 4 KiB request body ({} bytes; whole turns answered with {} bytes; \
         seed: 1 input rule, 1 output rule)",
        body.len(),
        answer.len()
    );
    println!("| where | per request |");
    println!("| --- | --- |");
    println!("| native: parse the vendor request | {parse:.2?} |");
    println!("| native: decide the input stage (automaton scan) | {scan:.2?} |");
    println!("| harness (wasmtime): whole turn, seed checks | {with:.2?} |");
    println!("| harness (wasmtime): whole turn, no checks | {without:.2?} |");
    println!(
        "| harness: added by the checks | {:.2?} ({:.2}x the unchecked turn) |",
        with.saturating_sub(without),
        with.as_secs_f64() / without.as_secs_f64().max(1e-12)
    );

    scanning_throughput(&module);
}

/// Median and range of `reps` interleaved samples of each series, in ns per call.
#[derive(Default)]
struct Series(Vec<f64>);

impl Series {
    fn push(&mut self, d: Duration) {
        self.0.push(d.as_secs_f64() * 1e9);
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!(self.0)
    }
}

fn scanning_throughput(livecheck: &livecheck_harness::Module) {
    const REPS: usize = 5;
    let policy = Policy::from_json(RULES.as_bytes()).unwrap_or_else(|e| panic!("{e:?}"));
    let version = policy
        .select(None, None, None)
        .unwrap_or_else(|e| panic!("{e}"));
    let noop_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/noop-filter");
    let noop = read_fresh_wasm(&noop_dir, "noop_filter").unwrap_or_else(|e| panic!("{e}"));
    let noop = compile(&noop).unwrap_or_else(|e| panic!("{e}"));
    // The no-op filter reads its configuration as a list of host actions (`make bench-floor`) and
    // refuses anything else: it gets none, so it does nothing but continue.
    let options = |plugin_config: &[u8]| Options {
        plugin_config: plugin_config.to_vec(),
        buffer_limit: 4 << 20,
        ..Options::default()
    };
    let host = |module, config: &[u8]| {
        Host::from_module(module, options(config)).unwrap_or_else(|e| panic!("{e}"))
    };
    let (mut checked, mut baseline) = (host(livecheck, RULES.as_bytes()), host(&noop, b""));
    let input_rules: Vec<String> = version
        .checks
        .iter()
        .filter(|c| c.stage == Stage::Input)
        .map(|c| format!("livecheck.bench.{}", c.name))
        .collect();
    assert_eq!(input_rules.len(), 5, "{input_rules:?}");

    let mut sizes = Vec::new();
    println!();
    println!("scanning throughput, bench rules (5 input rules) on Chat requests, median of {REPS}");
    println!("| body | native scan | native parse + scan | harness (livecheck - no-op) |");
    println!("| --- | --- | --- | --- |");
    for size in SCAN_SIZES {
        let body = chat_body(size);
        // Enough calls per sample for ~20 ms of native scanning.
        let iters = u32::try_from((64 << 20) / size)
            .unwrap_or(1)
            .clamp(4, 20_000);
        let turns = u32::try_from((8 << 20) / size).unwrap_or(1).clamp(2, 2_000);
        let request = api::parse_request(Api::ChatCompletions, body.as_bytes())
            .unwrap_or_else(|e| panic!("{e}"));
        let reading = Reading {
            rule_text: &request.input_text,
            failed: None,
            judged_apply: true,
            readable: true,
            judged: &[],
        };
        // The checks must run and pass, and the question must reach upstream whole.
        let verdict = decide(&version, Stage::Input, &reading, 1);
        assert!(verdict.stop.is_none() && verdict.results.len() == 5);
        for h in [&mut checked, &mut baseline] {
            assert_eq!(turn(h, &body), body.len(), "the question reached upstream");
        }
        let ran_before = passes(&checked, &input_rules);
        let (mut scan, mut parse_scan, mut with, mut without) = (
            Series::default(),
            Series::default(),
            Series::default(),
            Series::default(),
        );
        for _ in 0..REPS {
            scan.push(measure(1, iters, || {
                black_box(decide(&version, Stage::Input, black_box(&reading), 1));
            }));
            parse_scan.push(measure(1, iters, || {
                let r = api::parse_request(Api::ChatCompletions, black_box(body.as_bytes()))
                    .unwrap_or_else(|e| panic!("{e}"));
                let reading = Reading {
                    rule_text: &r.input_text,
                    failed: None,
                    judged_apply: true,
                    readable: true,
                    judged: &[],
                };
                black_box(decide(&version, Stage::Input, &reading, 1));
            }));
            with.push(measure(1, turns, || {
                black_box(turn(&mut checked, &body));
            }));
            without.push(measure(1, turns, || {
                black_box(turn(&mut baseline, &body));
            }));
        }
        ran_on_every_turn(
            &checked,
            &input_rules,
            &ran_before,
            REPS as u64 * u64::from(turns),
            &format!("the {size}-byte questions"),
        );
        let med = |s: &Series| {
            let mut v = s.0.clone();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let mbps = |ns: f64| size as f64 / ns * 1e3;
        println!(
            "| {} KiB | {:.0} MB/s | {:.0} MB/s | {:.0} MB/s |",
            size >> 10,
            mbps(med(&scan)),
            mbps(med(&parse_scan)),
            mbps(med(&with) - med(&without)),
        );
        sizes.push(serde_json::json!({
            "body_bytes": size,
            "text_chars": request.input_text.chars().count(),
            "native_scan_ns": scan.json(),
            "native_parse_scan_ns": parse_scan.json(),
            "harness_livecheck_ns": with.json(),
            "harness_noop_ns": without.json(),
        }));
    }
    let out = std::env::var("BENCH_JSON")
        .unwrap_or_else(|_| format!("{}/target/bench/rule_cost.json", env!("CARGO_MANIFEST_DIR")));
    let out = Path::new(&out);
    std::fs::create_dir_all(out.parent().unwrap_or(Path::new("."))).unwrap();
    std::fs::write(out, serde_json::json!({"sizes": sizes}).to_string()).unwrap();
    println!("wrote {}", out.display());
}
