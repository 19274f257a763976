//! What the streamed-answer rewriter costs per upstream event, natively (the pure logic, no host):
//! a Chat Completions stream of 2,000 four-character deltas (the text `benches/streaming.py`
//! sends) through `Rewriter` with the bench rules (`benches/rules.json`), against parsing and
//! re-serializing the same events' JSON alone (the floor any design that rewrites events pays);
//! then the same text as an Anthropic Messages and a Responses stream (each vendor's text deltas
//! after its opening events), 16 events to a chunk.
//!
//! `cargo bench --profile bench-native --bench stream_cost` (the release profile's `panic =
//! "abort"` does not link the bench); for where the time goes, run the binary it built under
//! callgrind (ARCHITECTURE.md, "A text chunk of the last one's shape is read without parsing").
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

/// The bench's text in deltas of 4 characters cut anywhere (most end inside a word, which the
/// e-mail rule holds until the next character), or, `aligned`, of one word and a space each
/// (words without digits: no event ends inside text that could still begin a match); each delta
/// as `api`'s text event.
fn text_events(api: Api, aligned: bool) -> Vec<String> {
    let words = "the order ships from our depot near the station on Monday and arrives within 3 to 5 \
                 days ; your invoice 4471 lists two items , a lamp and a chair , both in stock . Please \
                 keep the receipt"
        .split(' ')
        .filter(|w| !aligned || !w.contains(|c: char| c.is_ascii_digit()))
        .collect::<Vec<_>>();
    let mut text = String::new();
    let mut deltas = Vec::new();
    let mut i = 0;
    while text.chars().count() < EVENTS * 4 || deltas.len() < EVENTS {
        let word = format!("{} ", words[i % words.len()]);
        text.push_str(&word);
        deltas.push(word);
        i += 7;
    }
    if !aligned {
        let chars: Vec<char> = text.chars().collect();
        deltas = chars.chunks(4).map(|c| c.iter().collect()).collect();
    }
    deltas
        .iter()
        .take(EVENTS)
        .enumerate()
        .map(|(n, d)| {
            let delta = serde_json::to_string(d).unwrap();
            match api {
                Api::ChatCompletions => format!(
                    "data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\
                     \"model\":\"gpt-4.1-mini\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":{delta}}},\
                     \"finish_reason\":null}}]}}\n\n"
                ),
                Api::AnthropicMessages => format!(
                    "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\
                     \"delta\":{{\"type\":\"text_delta\",\"text\":{delta}}}}}\n\n"
                ),
                Api::Responses => format!(
                    "event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\
                     \"sequence_number\":{},\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\
                     \"delta\":{delta},\"logprobs\":[]}}\n\n",
                    n + 3
                ),
            }
        })
        .collect()
}

/// What `api`'s stream says before its first text delta.
fn opening(api: Api) -> &'static str {
    match api {
        Api::ChatCompletions => "",
        Api::AnthropicMessages => {
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\
             \"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\
             \"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n\
             event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\
             \"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"
        }
        Api::Responses => {
            "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\
             \"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"created_at\":1700000000,\
             \"status\":\"in_progress\",\"model\":\"gpt-4.1-mini\",\"output\":[],\"usage\":null}}\n\n\
             event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\
             \"sequence_number\":1,\"output_index\":0,\"item\":{\"id\":\"msg_1\",\"type\":\"message\",\
             \"status\":\"in_progress\",\"role\":\"assistant\",\"content\":[]}}\n\n\
             event: response.content_part.added\ndata: {\"type\":\"response.content_part.added\",\
             \"sequence_number\":2,\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\
             \"part\":{\"type\":\"output_text\",\"text\":\"\",\"annotations\":[],\"logprobs\":[]}}\n\n"
        }
    }
}

/// The events, `n` to a body chunk.
fn chunks_of(events: &[String], n: usize) -> Vec<String> {
    events.chunks(n).map(|c| c.concat()).collect()
}

fn per_event(start: Instant) -> f64 {
    start.elapsed().as_nanos() as f64 / (REPEATS * EVENTS) as f64
}

fn main() {
    let rules = std::fs::read("benches/rules.json").expect("run from the repository root");
    let policy = Policy::from_json(&rules).unwrap();
    let version = policy.select(Some("bench"), None, None).unwrap();
    let request = Request {
        stream: true,
        ..Request::default()
    };
    let mut sink = 0usize;
    // Paced streams come one event per body chunk; an upstream writing faster than Envoy reads
    // gives several events per chunk (`benches/streaming.py`'s unpaced run).
    for (name, api, aligned, per_chunk) in [
        ("cut anywhere", Api::ChatCompletions, false, 1),
        ("word-aligned", Api::ChatCompletions, true, 1),
        (
            "cut anywhere, 16 events per chunk",
            Api::ChatCompletions,
            false,
            16,
        ),
        (
            "Anthropic, cut anywhere, 16 events per chunk",
            Api::AnthropicMessages,
            false,
            16,
        ),
        (
            "Responses, cut anywhere, 16 events per chunk",
            Api::Responses,
            false,
            16,
        ),
    ] {
        // `STREAM_COST_ONLY=<part of a case's name>`: that case alone (to count its instructions).
        if std::env::var("STREAM_COST_ONLY").is_ok_and(|only| !name.contains(only.as_str())) {
            continue;
        }
        let events = text_events(api, aligned);
        let mut chunks = chunks_of(&events, per_chunk);
        if !opening(api).is_empty() {
            chunks.insert(0, opening(api).to_owned());
        }
        let start = Instant::now();
        for _ in 0..REPEATS {
            let mut rw = Rewriter::new(api, Rc::clone(&version), &request, Hold::Rules, 1 << 20);
            for c in &chunks {
                sink += rw.feed(c.as_bytes()).out.len();
            }
            sink += rw.finish().out.len();
        }
        let rewriter = per_event(start);
        let start = Instant::now();
        for _ in 0..REPEATS {
            for e in &events {
                let data = e
                    .split_once("data: ")
                    .map_or(e.as_str(), |(_, d)| d)
                    .trim_end();
                let v: serde_json::Value = serde_json::from_str(data).unwrap();
                sink += serde_json::to_string(&v).unwrap().len();
            }
        }
        let json = per_event(start);
        println!(
            "stream_cost ({name}): rewriter {rewriter:.0} ns/event, JSON parse + serialize alone \
             {json:.0} ns/event ({:.1}x), {EVENTS} events x {REPEATS}; {} of {EVENTS} events \
             went out as they came (checksum {sink})",
            rewriter / json,
            unchanged(api, &version, &request, &events, &chunks)
        );
    }
}

/// How many upstream events the caller received byte for byte (the rest were split, joined or
/// rewritten).
fn unchanged(
    api: Api,
    version: &Rc<livecheck::config::Version>,
    request: &Request,
    events: &[String],
    chunks: &[String],
) -> usize {
    let mut rw = Rewriter::new(api, Rc::clone(version), request, Hold::Rules, 1 << 20);
    let mut out = Vec::new();
    for c in chunks {
        out.extend(rw.feed(c.as_bytes()).out);
    }
    out.extend(rw.finish().out);
    let out = String::from_utf8_lossy(&out);
    let sent: std::collections::HashSet<&str> = out.split_inclusive("\n\n").collect();
    events.iter().filter(|e| sent.contains(e.as_str())).count()
}
