//! What the streamed-answer rewriter costs per upstream event, natively (the pure logic, no host):
//! a Chat Completions stream of 2,000 four-character deltas (the text `benches/streaming.py`
//! sends) through `Rewriter` with the bench rules (`benches/rules.json`), against parsing and
//! re-serializing the same events' JSON alone (the floor any design that rewrites events pays).
//!
//! `cargo bench --bench stream_cost`; for where the time goes, build it with debug info and run
//! it under `perf record --call-graph dwarf` (ARCHITECTURE.md, "What a streamed event costs").
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::rc::Rc;
use std::time::Instant;

use livecheck::api::{Api, Request};
use livecheck::config::Policy;
use livecheck::stream::{Hold, Rewriter};

const EVENTS: usize = 2000;
const REPEATS: usize = 50;

fn chat_events() -> Vec<String> {
    let words = "the order ships from our depot near the station on Monday and arrives within 3 to 5 \
                 days ; your invoice 4471 lists two items , a lamp and a chair , both in stock . Please \
                 keep the receipt"
        .split(' ')
        .collect::<Vec<_>>();
    let mut text = String::new();
    let mut i = 0;
    while text.chars().count() < EVENTS * 4 {
        text.push_str(words[i % words.len()]);
        text.push(' ');
        i += 7;
    }
    let chars: Vec<char> = text.chars().collect();
    chars
        .chunks(4)
        .take(EVENTS)
        .map(|c| {
            let delta = serde_json::to_string(&c.iter().collect::<String>()).unwrap();
            format!(
                "data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\
                 \"model\":\"gpt-4.1-mini\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":{delta}}},\
                 \"finish_reason\":null}}]}}\n\n"
            )
        })
        .collect()
}

fn per_event(start: Instant) -> f64 {
    start.elapsed().as_nanos() as f64 / (REPEATS * EVENTS) as f64
}

fn main() {
    let rules = std::fs::read("benches/rules.json").expect("run from the repository root");
    let policy = Policy::from_json(&rules).unwrap();
    let version = policy.select(Some("bench"), None, None).unwrap();
    let events = chat_events();
    let request = Request {
        stream: true,
        ..Request::default()
    };
    let mut sink = 0usize;
    let start = Instant::now();
    for _ in 0..REPEATS {
        let mut rw = Rewriter::new(
            Api::ChatCompletions,
            Rc::clone(&version),
            &request,
            Hold::Rules,
            1 << 20,
        );
        for e in &events {
            sink += rw.feed(e.as_bytes()).out.len();
        }
        sink += rw.finish().out.len();
    }
    let rewriter = per_event(start);
    let start = Instant::now();
    for _ in 0..REPEATS {
        for e in &events {
            let data = e.trim_start_matches("data: ").trim_end();
            let v: serde_json::Value = serde_json::from_str(data).unwrap();
            sink += serde_json::to_string(&v).unwrap().len();
        }
    }
    let json = per_event(start);
    println!(
        "stream_cost: rewriter {rewriter:.0} ns/event, JSON parse + serialize alone {json:.0} ns/event \
         ({:.1}x), {EVENTS} Chat events x {REPEATS} (checksum {sink})",
        rewriter / json
    );
}
