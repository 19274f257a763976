//! The stream rewriter's own cost in V8, function by function: `make bench-v8-stream` runs this
//! ignored test under Node with `--cpu-prof` and `benches/v8_turn_profile.py` sums the samples per
//! function.

use std::rc::Rc;

use crate::api::{Api, Request};
use crate::config::Policy;
use crate::stream::{Hold, Rewriter};

/// `make bench-v8-stream`: `LIVECHECK_PROFILE_STREAMS` streams (default 200) of the bench's answer
/// (`benches/stream_cost.rs`: 2,000 Chat deltas of 4 characters cut anywhere, `benches/rules.json`),
/// 16 events to a body chunk (`benches/streaming.py`'s chunked run; `LIVECHECK_PROFILE_CHUNK_EVENTS=1` for a paced
/// stream's one), through `Rewriter::feed`, for
/// V8's profiler; ignored in `make test`.
#[test]
#[ignore = "a profiling workload: make bench-v8-stream"]
fn chat_stream() {
    let rules = include_str!("../../benches/rules.json");
    let version = Policy::from_json(rules.as_bytes())
        .unwrap()
        .select(Some("bench"), None, None)
        .unwrap();
    let streams: usize = std::env::var("LIVECHECK_PROFILE_STREAMS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200);
    // Events to a body chunk: 16 (the chunked run's), or 1 (a paced stream's).
    let per_chunk: usize = std::env::var("LIVECHECK_PROFILE_CHUNK_EVENTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(16);
    let words = "the order ships from our depot near the station on Monday and arrives within 3 to 5 \
                 days ; your invoice 4471 lists two items , a lamp and a chair , both in stock . Please \
                 keep the receipt";
    let words: Vec<&str> = words.split(' ').collect();
    let text: String = (0..)
        .step_by(7)
        .map(|i| words[i % words.len()])
        .take(2000)
        .collect::<Vec<_>>()
        .join(" ");
    let chars: Vec<char> = text.chars().collect();
    let events: Vec<String> = chars
        .chunks(4)
        .take(2000)
        .map(|d| {
            let delta = serde_json::to_string(&d.iter().collect::<String>()).unwrap();
            format!(
                "data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\
                 \"model\":\"gpt-4.1-mini\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":{delta}}},\
                 \"finish_reason\":null}}]}}\n\n"
            )
        })
        .collect();
    let head = "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4.1-mini\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n";
    let chunks: Vec<String> = std::iter::once(head.to_owned())
        .chain(events.chunks(per_chunk).map(|c| c.concat()))
        .collect();
    let chunks: Vec<&[u8]> = chunks.iter().map(|c| c.as_bytes()).collect();
    let mut sent = 0;
    let began = std::time::Instant::now();
    for _ in 0..streams {
        let mut rw = Rewriter::new(
            Api::ChatCompletions,
            Rc::clone(&version),
            &Request {
                stream: true,
                model: Some("test-model".into()),
                ..Request::default()
            },
            Hold::Rules,
            1 << 20,
        );
        let (mut out, mut cut) = (Vec::new(), None);
        for chunk in &chunks {
            let step = rw.feed(chunk);
            out.extend(step.out);
            cut = cut.or(step.cut);
        }
        let step = rw.finish();
        out.extend(step.out);
        let cut = cut.or(step.cut);
        assert_eq!(cut, None);
        sent += out.len();
    }
    assert!(sent > 0);
    let per_event = began.elapsed().as_nanos() as f64 / (streams * events.len()) as f64;
    eprintln!(
        "profiling chat_stream: {per_event:.0} ns per event over {streams} streams, \
         {per_chunk} events to a chunk"
    );
}
