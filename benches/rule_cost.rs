//! What rule checks cost per 4 KiB request body: natively (the pure logic) and inside the built
//! filter in the wasmtime harness (a whole turn with the seed's checks against the same turn with
//! no checks, so the harness's own cost cancels out). Prints medians of repeated runs, as ratios
//! and per-request figures measured side by side in one run.
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

use livecheck::config::{Policy, Stage};
use livecheck::vendor::{self, Api};
use livecheck::verdict::{decide, Reading};
use livecheck_harness::{compile, read_fresh_wasm, Host, Options};

const SEED: &str = include_str!("../examples/seed.json");
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
    host.finish_stream(s).ok();
    reached
}

fn main() {
    let body = body_4k();
    assert!((4096..4200).contains(&body.len()), "{}", body.len());
    let policy = Policy::from_json(SEED.as_bytes()).unwrap_or_else(|e| panic!("{e:?}"));
    let version = policy
        .select(None, None, None)
        .unwrap_or_else(|e| panic!("{e}"));

    let parse = measure(15, 2000, || {
        black_box(vendor::parse_request(Api::ChatCompletions, black_box(body.as_bytes())).ok());
    });
    let request = vendor::parse_request(Api::ChatCompletions, body.as_bytes())
        .unwrap_or_else(|e| panic!("{e}"));
    let scan = measure(15, 2000, || {
        let reading = Reading {
            rule_text: black_box(&request.input_text),
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
                // As every shipped Envoy config: the question's headers are held while it is read.
                allow_on_headers_stop_iteration: true,
                ..Options::default()
            },
        )
        .unwrap_or_else(|e| panic!("{e}"))
    };
    let (mut checked, mut unchecked) = (host_with(SEED), host_with(NO_CHECKS));
    // The turn must really run the checks and reach upstream, or this measures nothing.
    for host in [&mut checked, &mut unchecked] {
        assert_eq!(
            turn(host, &body),
            body.len(),
            "the question reached upstream"
        );
    }
    assert_eq!(
        checked.metric("livecheck.orders.no-passwords.passed"),
        Some(1)
    );
    // Interleave the two so machine noise hits both alike.
    let mut with = Vec::new();
    let mut without = Vec::new();
    for _ in 0..15 {
        with.push(measure(1, 300, || {
            black_box(turn(&mut checked, &body));
        }));
        without.push(measure(1, 300, || {
            black_box(turn(&mut unchecked, &body));
        }));
    }
    let (with, without) = (median(with), median(without));

    println!(
        "rule-check cost per 4 KiB request body ({} bytes; seed: 1 input rule, 1 output rule)",
        body.len()
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
}
