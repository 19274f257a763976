//! What the streamed-answer rewriter costs per upstream event, natively (the pure logic, no host):
//! a Chat Completions stream of 2,000 four-character deltas (the text `benches/streaming.py`
//! sends) through `Rewriter` with the bench rules (`benches/rules.json`), against parsing and
//! re-serializing the same events' JSON alone (the floor any design that rewrites events pays);
//! then the same text as an Anthropic Messages and a Responses stream (each vendor's text deltas
//! after its opening events), 16 events to a chunk.
//!
//! The answer is clean, so a rewriter that cut it, lost or changed its text, or rewrote an event
//! it had no reason to touch would be measuring other work: every case asserts that nothing was
//! cut, that the caller decodes the whole text, and that every upstream event went out as it came
//! (byte for byte), but where a body chunk ended inside text that could still begin a match and
//! that text was divided anew among the events around the chunk's end; word-aligned, every event.
//! The events so divided are the same ones in each vendor's stream of the same text and chunks.
//!
//! `make bench-stream-cost`, or `cargo bench --profile bench-native --bench stream_cost` (the
//! release profile's `panic = "abort"` does not link the bench); for where the time goes, run the
//! binary it built under callgrind (bench/optimisation-log-streaming.md, "A text chunk of the last
//! one's shape is read without parsing").
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::HashSet;
use std::rc::Rc;
use std::time::Instant;

use livecheck::api::{Api, Request};
use livecheck::config::Policy;
use livecheck::stream::{caller, Hold, Rewriter};

const EVENTS: usize = 2000;
const REPEATS: usize = 50;

/// The bench's text in deltas of 4 characters cut anywhere (most end inside a word, which the
/// e-mail rule holds until the next character), or, `aligned`, of one word and a space each
/// (words without digits: no event ends inside text that could still begin a match).
fn text_deltas(aligned: bool) -> Vec<String> {
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
    deltas.truncate(EVENTS);
    deltas
}

/// Each delta as `api`'s text event.
fn text_events(api: Api, deltas: &[String]) -> Vec<String> {
    deltas
        .iter()
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
                other => unreachable!("the bench streams three APIs, not {other:?}"),
            }
        })
        .collect()
}

/// What `api`'s stream says before its first text delta.
fn opening(api: Api) -> &'static str {
    match api {
        Api::Completions
        | Api::AnthropicComplete
        | Api::Embeddings
        | Api::MessageBatches
        | Api::Gemini
        | Api::Converse => {
            unreachable!("the bench streams three APIs, not {api:?}")
        }
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
    // The same text in the same chunks is held back the same way whatever the vendor: which events
    // were divided anew, by the first case of each chunking, for the others to match.
    let mut divided: Vec<((bool, usize), &str, Vec<bool>)> = Vec::new();
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
        let deltas = text_deltas(aligned);
        let events = text_events(api, &deltas);
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
        let changed = went_through_untouched(
            name,
            api,
            &version,
            &request,
            (&deltas, &events),
            (&chunks, per_chunk, aligned),
        );
        match divided.iter().find(|(k, _, _)| *k == (aligned, per_chunk)) {
            Some((_, first, theirs)) => {
                let how = |c: bool| if c { "changed" } else { "as it came" };
                if let Some(i) = changed.iter().zip(theirs).position(|(a, b)| a != b) {
                    panic!(
                        "{name}: event {i} went out {} here, {} in {first}",
                        how(changed[i]),
                        how(theirs[i])
                    );
                }
            }
            None => divided.push(((aligned, per_chunk), name, changed.clone())),
        }
        let unchanged = changed.iter().filter(|c| !**c).count();
        println!(
            "stream_cost ({name}): rewriter {rewriter:.0} ns/event, JSON parse + serialize alone \
             {json:.0} ns/event ({:.1}x), {EVENTS} events x {REPEATS}; {unchanged} of {EVENTS} \
             events went out as they came, none cut (checksum {sink})",
            rewriter / json,
        );
    }
}

/// The stream once more through a fresh rewriter: asserts that nothing was cut, that the caller
/// decodes the whole text of `deltas`, and that the upstream text events (`events`, `per_chunk` to
/// a body chunk in `chunks`) went out as they came, byte for byte and at the same place in the
/// text, but where a chunk ended inside text that could still begin a match: that text goes out
/// with the next chunk, so the events from it to its chunk's end, and from the next chunk's start
/// to where it is confirmed, are divided anew. Word-aligned, no chunk ends inside such text.
/// Returns, event by event, whether it went out changed.
fn went_through_untouched(
    name: &str,
    api: Api,
    version: &Rc<livecheck::config::Version>,
    request: &Request,
    (deltas, events): (&[String], &[String]),
    (chunks, per_chunk, aligned): (&[String], usize, bool),
) -> Vec<bool> {
    let mut rw = Rewriter::new(api, Rc::clone(version), request, Hold::Rules, 1 << 20);
    let mut steps: Vec<_> = chunks.iter().map(|c| rw.feed(c.as_bytes())).collect();
    steps.push(rw.finish());
    assert!(
        steps.iter().all(|s| s.cut.is_none()),
        "{name}: the clean answer was cut"
    );
    let out: Vec<u8> = steps.into_iter().flat_map(|s| s.out).collect();
    let decoded = caller::decode(api, &out).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(
        decoded.text == deltas.concat(),
        "{name}: the caller decoded {} of the answer's {} bytes of text",
        decoded.text.len(),
        deltas.concat().len()
    );
    let out = String::from_utf8_lossy(&out);
    let sent: HashSet<(usize, &str)> = text_events_at(api, out.split_inclusive("\n\n"))
        .into_iter()
        .collect();
    let upstream = text_events_at(api, events.iter().map(String::as_str));
    assert_eq!(upstream.len(), events.len(), "{name}: every delta has text");
    let changed: Vec<bool> = upstream.iter().map(|e| !sent.contains(e)).collect();
    if aligned {
        let unchanged = changed.iter().filter(|c| !**c).count();
        assert_eq!(
            unchanged,
            events.len(),
            "{name}: {unchanged} of {} events went out as they came",
            events.len()
        );
    }
    for (n, chunk) in changed.chunks(per_chunk).enumerate() {
        let from_start = chunk.iter().take_while(|c| **c).count();
        let to_end = chunk.iter().rev().take_while(|c| **c).count();
        let middle = chunk.get(from_start..chunk.len().saturating_sub(to_end));
        if let Some(k) = middle.and_then(|m| m.iter().position(|c| *c)) {
            panic!(
                "{name}: event {} went out changed, though no chunk's end is held through it",
                n * per_chunk + from_start + k
            );
        }
    }
    changed
}

/// The text events of a stream (whole SSE events) with where each one's text begins in the
/// answer's text; events without text left out.
fn text_events_at<'a>(api: Api, events: impl Iterator<Item = &'a str>) -> Vec<(usize, &'a str)> {
    let mut at = 0;
    events
        .filter_map(|e| {
            let text = caller::decode(api, e.as_bytes()).ok()?.text;
            let start = at;
            at += text.len();
            (!text.is_empty()).then_some((start, e))
        })
        .collect()
}
