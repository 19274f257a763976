use std::collections::BTreeMap;
use std::rc::Rc;

use serde_json::Value;

use super::args::ArgsReader;
use super::fixtures::*;
use super::format::Unit;
use super::*;
use crate::config::Policy;
use crate::sse;

const IBAN: usize = 0;
const PASSWORD: usize = 1;

fn version(policy: &str) -> Rc<Version> {
    Policy::from_json(policy.as_bytes())
        .unwrap()
        .select(None, None, None)
        .unwrap()
}

fn request(include_usage: bool) -> Request {
    Request {
        stream: true,
        include_usage,
        model: Some("test-model".into()),
        ..Request::default()
    }
}

/// Feeds `chunks`, then the end of the stream; everything the caller receives.
fn run(api: Api, version: &Rc<Version>, hold: Hold, chunks: &[&[u8]]) -> (Vec<u8>, Option<Cut>) {
    let mut rw = Rewriter::new(api, Rc::clone(version), &request(true), hold, 1 << 20);
    feed_all(&mut rw, chunks)
}

/// [`run`] with a rewriter of the test's own.
fn feed_all(rw: &mut Rewriter, chunks: &[&[u8]]) -> (Vec<u8>, Option<Cut>) {
    let (mut out, mut cut) = (Vec::new(), None);
    for chunk in chunks {
        let step = rw.feed(chunk);
        out.extend(step.out);
        cut = cut.or(step.cut);
    }
    let step = rw.finish();
    out.extend(step.out);
    (out, cut.or(step.cut))
}

/// What a caller's SDK makes of a stream: each channel's checked text (answer text, and tool
/// call values after `"\n"`, as the filter reads them), and how it ended. Asserts the stream is
/// valid in the vendor's format on the way.
#[derive(Debug, Default)]
struct Seen {
    texts: BTreeMap<usize, String>,
    readers: BTreeMap<(usize, u64), ArgsReader>,
    last_call: BTreeMap<usize, u64>,
    /// Each tool call's arguments as sent, and the bytes of its channel's text they span.
    calls: BTreeMap<(usize, u64), Call>,
    answer: String,
    filtered: bool,
}

#[derive(Debug, Default)]
struct Call {
    json: String,
    start: usize,
    end: usize,
}

impl Seen {
    fn text(&mut self, channel: usize, text: &str) {
        let t = self.texts.entry(channel).or_default();
        if self.last_call.remove(&channel).is_some() {
            t.push('\n');
        }
        t.push_str(text);
        self.answer.push_str(text);
    }

    fn args(&mut self, channel: usize, call: u64, json: &str) {
        self.last_call.insert(channel, call);
        let decoded = self.readers.entry((channel, call)).or_default().read(json);
        let text = self.texts.entry(channel).or_default();
        let seen = self.calls.entry((channel, call)).or_insert_with(|| Call {
            start: text.len(),
            ..Call::default()
        });
        text.push_str(&decoded.text);
        seen.json.push_str(json);
        seen.end = text.len();
    }

    /// Where a caller's text must end when forbidden text starts at byte `hit` of channel 0: there,
    /// or where the tool call it is in starts (a call is never shown in part).
    fn stop_at(&self, hit: usize) -> usize {
        self.calls
            .iter()
            .filter(|((channel, _), c)| *channel == 0 && c.start <= hit && hit < c.end)
            .map(|(_, c)| c.start)
            .min()
            .unwrap_or(hit)
    }

    /// Every tool call `caller` received has all its arguments (some call of this upstream's).
    fn has_whole_calls(&self, caller: &Seen) -> bool {
        caller
            .calls
            .values()
            .all(|c| self.calls.values().any(|u| u.json == c.json))
    }

    fn channel(&self, channel: usize) -> &str {
        self.texts.get(&channel).map_or("", String::as_str)
    }
}

fn events(bytes: &[u8]) -> Vec<sse::Event> {
    let mut decoder = sse::Decoder::new(1 << 20);
    let mut events = Vec::new();
    decoder.push(bytes, &mut events).unwrap();
    decoder.finish(&mut events).unwrap();
    events
}

fn read(api: Api, bytes: &[u8]) -> Seen {
    match api {
        Api::AnthropicMessages => read_anthropic(bytes),
        Api::ChatCompletions => read_chat(bytes),
        Api::Responses => read_responses(bytes),
        other => unreachable!("{other:?} is not among these tests' APIs"),
    }
}

fn read_anthropic(bytes: &[u8]) -> Seen {
    let mut seen = Seen::default();
    let events = events(bytes);
    let mut blocks: Vec<(String, bool)> = Vec::new();
    let mut stop_reason = None;
    for (i, event) in events.iter().enumerate() {
        let data: Value = serde_json::from_str(&event.data).unwrap();
        let kind = data["type"].as_str().unwrap();
        assert_eq!(event.event.as_deref(), Some(kind));
        assert_eq!(i == 0, kind == "message_start", "message_start comes first");
        let index = data["index"].as_u64().map(|i| i as usize);
        match kind {
            "content_block_start" => {
                assert_eq!(index, Some(blocks.len()), "blocks are numbered in order");
                blocks.push((data["content_block"]["type"].as_str().unwrap().into(), true));
            }
            "content_block_delta" => {
                let index = index.unwrap();
                assert!(blocks[index].1, "a delta for an open block");
                match data["delta"]["type"].as_str().unwrap() {
                    "text_delta" => seen.text(0, data["delta"]["text"].as_str().unwrap()),
                    "input_json_delta" => seen.args(
                        0,
                        index as u64,
                        data["delta"]["partial_json"].as_str().unwrap(),
                    ),
                    _ => {}
                }
            }
            "content_block_stop" => blocks[index.unwrap()].1 = false,
            "message_delta" => {
                assert!(blocks.iter().all(|b| !b.1), "every block closed");
                assert!(data["usage"]["output_tokens"].is_u64());
                stop_reason = data["delta"]["stop_reason"].as_str().map(str::to_owned);
            }
            "message_stop" => assert_eq!(i, events.len() - 1, "message_stop comes last"),
            _ => {}
        }
    }
    assert_eq!(
        events.last().unwrap().event.as_deref(),
        Some("message_stop")
    );
    seen.filtered = stop_reason.as_deref() == Some("refusal");
    seen
}

fn read_chat(bytes: &[u8]) -> Seen {
    let mut seen = Seen::default();
    let events = events(bytes);
    assert_eq!(events.last().unwrap().data, "[DONE]");
    let (mut roles, mut names) = (
        std::collections::BTreeSet::new(),
        std::collections::BTreeSet::new(),
    );
    for event in &events[..events.len() - 1] {
        assert_eq!(event.event, None);
        let data: Value = serde_json::from_str(&event.data).unwrap();
        assert_eq!(data["object"], "chat.completion.chunk");
        for choice in data["choices"].as_array().unwrap() {
            let channel = choice["index"].as_u64().unwrap() as usize;
            if let Some(text) = choice["delta"]["content"].as_str() {
                if !text.is_empty() {
                    seen.text(channel, text);
                }
            }
            if choice["delta"].get("role").is_some() {
                assert!(roles.insert(channel), "a role is sent once per choice");
            }
            if let Some(calls) = choice["delta"]["tool_calls"].as_array() {
                for call in calls {
                    // The SDKs concatenate every string they receive twice.
                    if call.get("id").is_some() || call["function"].get("name").is_some() {
                        assert!(
                            names.insert((channel, call["index"].as_u64())),
                            "a call is named once"
                        );
                    }
                    if let Some(args) = call["function"]["arguments"].as_str() {
                        if !args.is_empty() {
                            seen.args(channel, call["index"].as_u64().unwrap(), args);
                        }
                    }
                }
            }
            if choice["finish_reason"] == "content_filter" {
                seen.filtered = true;
            }
        }
    }
    seen
}

fn read_responses(bytes: &[u8]) -> Seen {
    let mut seen = Seen::default();
    let events = events(bytes);
    let mut items = 0;
    let mut reply_id = Value::Null;
    for (i, event) in events.iter().enumerate() {
        let data: Value = serde_json::from_str(&event.data).unwrap();
        let kind = data["type"].as_str().unwrap();
        assert_eq!(event.event.as_deref(), Some(kind));
        assert_eq!(
            data["sequence_number"].as_u64(),
            Some(i as u64),
            "renumbered"
        );
        let index = data["output_index"].as_u64();
        match kind {
            "response.output_item.added" => {
                assert_eq!(index, Some(items), "items are numbered in order");
                items += 1;
                reply_id = data["item"]["id"].clone();
            }
            "response.output_text.delta" => {
                assert!(index.unwrap() < items);
                seen.text(0, data["delta"].as_str().unwrap());
            }
            "response.function_call_arguments.delta" => {
                seen.args(0, index.unwrap(), data["delta"].as_str().unwrap());
            }
            "response.incomplete" => {
                assert_eq!(
                    data["response"]["incomplete_details"]["reason"],
                    "content_filter"
                );
                // The output is the blocked reply alone, the last item written.
                let output = data["response"]["output"].as_array().unwrap();
                assert!(output.len() <= 1, "what was sent is not restated");
                if let Some(reply) = output.first() {
                    assert_eq!(reply["id"], reply_id);
                }
                seen.filtered = true;
            }
            _ => {}
        }
        let last = i == events.len() - 1;
        let terminal = matches!(kind, "response.completed" | "response.incomplete");
        assert_eq!(last, terminal, "the stream ends with its terminal event");
    }
    seen
}

const EXAMPLES: &[(Api, &str, &str)] = &[
    (
        Api::AnthropicMessages,
        "iban across events",
        ANTHROPIC_IBAN_ACROSS_EVENTS,
    ),
    (
        Api::AnthropicMessages,
        "word beside a tool",
        ANTHROPIC_WORD_BESIDE_TOOL,
    ),
    (
        Api::AnthropicMessages,
        "iban in a tool",
        ANTHROPIC_IBAN_IN_TOOL,
    ),
    (Api::AnthropicMessages, "clean", ANTHROPIC_CLEAN),
    (
        Api::ChatCompletions,
        "iban across events",
        CHAT_IBAN_ACROSS_EVENTS,
    ),
    (
        Api::ChatCompletions,
        "word beside a tool",
        CHAT_WORD_BESIDE_TOOL,
    ),
    (Api::ChatCompletions, "iban in a tool", CHAT_IBAN_IN_TOOL),
    (Api::ChatCompletions, "clean", CHAT_CLEAN),
    (
        Api::Responses,
        "iban across events",
        RESPONSES_IBAN_ACROSS_EVENTS,
    ),
    (
        Api::Responses,
        "word beside a tool",
        RESPONSES_WORD_BESIDE_TOOL,
    ),
    (Api::Responses, "iban in a tool", RESPONSES_IBAN_IN_TOOL),
    (Api::Responses, "clean", RESPONSES_CLEAN),
];

/// The caller's text is the unfiltered text up to the first match, never a match, whatever the
/// split; and every split gives the same bytes.
#[test]
fn every_example_split_at_every_byte_never_sends_a_match() {
    let version = version(POLICY);
    let rules = &version.output_rules;
    for &(api, name, stream) in EXAMPLES {
        let stream = stream.as_bytes();
        let upstream = read(api, stream);
        let unfiltered = upstream.channel(0);
        let hit = rules.first_hit(unfiltered);
        let (whole, cut) = run(api, &version, Hold::Rules, &[stream]);
        let seen = read(api, &whole);
        let expected = &unfiltered[..hit.map_or(unfiltered.len(), |h| upstream.stop_at(h.start))];
        assert_eq!(seen.channel(0), expected, "{api:?} {name}");
        assert!(upstream.has_whole_calls(&seen), "{api:?} {name}: {seen:?}");
        assert_eq!(rules.first_hit(seen.channel(0)), None, "{api:?} {name}");
        assert_eq!(seen.filtered, hit.is_some(), "{api:?} {name}");
        assert_eq!(
            cut.and_then(|c| c.check),
            hit.map(|h| h.check),
            "{api:?} {name}"
        );
        if let Some(cut) = cut {
            assert_eq!(cut.why, CutWhy::Matched);
        }
        for i in 0..=stream.len() {
            let (a, b) = stream.split_at(i);
            let (out, _) = run(api, &version, Hold::Rules, &[a, b]);
            assert!(out == whole, "{api:?} {name}: split at {i} differs");
        }
        for i in (0..stream.len()).step_by(61) {
            for j in (i..stream.len()).step_by(89) {
                let (out, _) = run(
                    api,
                    &version,
                    Hold::Rules,
                    &[&stream[..i], &stream[i..j], &stream[j..]],
                );
                assert!(out == whole, "{api:?} {name}: split at {i}, {j} differs");
            }
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert!(
            run(api, &version, Hold::Rules, &bytes).0 == whole,
            "{api:?} {name}: bytes"
        );
    }
}

#[test]
fn the_examples_stop_where_expected() {
    let version = version(POLICY);
    let cases: &[(Api, &str, &str, usize)] = &[
        (
            Api::AnthropicMessages,
            ANTHROPIC_IBAN_ACROSS_EVENTS,
            "Pay é日本 to ",
            IBAN,
        ),
        (
            Api::ChatCompletions,
            CHAT_WORD_BESIDE_TOOL,
            "Setting 日本 your ",
            PASSWORD,
        ),
        // The IBAN is in the call's arguments: none of the call is shown.
        (Api::Responses, RESPONSES_IBAN_IN_TOOL, "", IBAN),
    ];
    for &(api, stream, text, check) in cases {
        let (out, cut) = run(api, &version, Hold::Rules, &[stream.as_bytes()]);
        assert_eq!(read(api, &out).channel(0), text);
        assert_eq!(
            cut,
            Some(Cut {
                check: Some(check),
                why: CutWhy::Matched
            })
        );
    }
}

#[test]
fn chat_choices_are_separate_texts() {
    let version = version(POLICY);
    let stream = CHAT_TWO_CHOICES.as_bytes();
    let (whole, cut) = run(Api::ChatCompletions, &version, Hold::Rules, &[stream]);
    let seen = read(Api::ChatCompletions, &whole);
    // "NL91" in the first choice and "AB…" in the second never join; the cut waits for nothing
    // else, so the first choice ends where the stream stopped.
    assert_eq!(seen.channel(0), "First: NL91");
    assert_eq!(seen.channel(1), "Second: ");
    assert_eq!(cut.and_then(|c| c.check), Some(IBAN));
    for i in 0..=stream.len() {
        let (a, b) = stream.split_at(i);
        let (out, split_cut) = run(Api::ChatCompletions, &version, Hold::Rules, &[a, b]);
        let split = read(Api::ChatCompletions, &out);
        assert_eq!(
            (split.channel(0), split.channel(1)),
            ("First: NL91", "Second: ")
        );
        assert_eq!(split_cut.and_then(|c| c.check), Some(IBAN));
    }
}

#[test]
fn text_streams_at_once_unless_it_could_begin_a_match() {
    let version = version(POLICY);
    let mut rw = Rewriter::new(
        Api::AnthropicMessages,
        version,
        &request(false),
        Hold::Rules,
        4096,
    );
    let start = r#"event: message_start
data: {"type":"message_start","message":{"id":"m","type":"message","role":"assistant","model":"x","content":[],"usage":{"input_tokens":1,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

"#;
    let out = rw.feed(start.as_bytes()).out;
    assert_eq!(events(&out).len(), 2);
    let delta = |t: &str| {
        format!(
            "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{t}\"}}}}\n\n"
        )
    };
    // Nothing here can begin an IBAN or a forbidden word: all of it goes out at once.
    let step = rw.feed(delta("é日本 4567 and more").as_bytes());
    let sent = events(&step.out);
    assert_eq!(sent.len(), 1);
    let data: Value = serde_json::from_str(&sent[0].data).unwrap();
    assert_eq!(data["delta"]["text"], "é日本 4567 and more");
    // "NL9" could begin an IBAN: it is held, and the text before it goes out in an event of its own.
    let step = rw.feed(delta(" to NL9").as_bytes());
    let data: Value = serde_json::from_str(&events(&step.out)[0].data).unwrap();
    assert_eq!(data["delta"]["text"], " to ");
    // "NL9x" cannot: the held rest of the earlier event goes out at the start of the new one (as
    // many events as the upstream sent: a split costs no extra event on the wire).
    let step = rw.feed(delta("x").as_bytes());
    let texts: Vec<String> = events(&step.out)
        .iter()
        .map(|e| serde_json::from_str::<Value>(&e.data).unwrap()["delta"]["text"].to_string())
        .collect();
    assert_eq!(texts, ["\"NL9x\""]);
    // Not into an event of another kind: the rest goes alone before it.
    rw.feed(delta(" NL9").as_bytes());
    assert!(rw
        .feed(b"event: ping\ndata: {\"type\":\"ping\"}\n\n")
        .out
        .is_empty());
    let sent = events(&rw.finish().out);
    let data: Value = serde_json::from_str(&sent[0].data).unwrap();
    assert_eq!(data["delta"]["text"], "NL9");
    assert_eq!(sent[1].event.as_deref(), Some("ping"));
}

#[test]
fn unreadable_json_cuts_with_the_first_blocking_check_errored() {
    let version = version(POLICY);
    let stream = format!(
        "{}data: {{not json\n\n",
        &CHAT_CLEAN[..CHAT_CLEAN.find("\n\n").unwrap() + 2]
    );
    let (out, cut) = run(
        Api::ChatCompletions,
        &version,
        Hold::Rules,
        &[stream.as_bytes()],
    );
    assert_eq!(
        cut,
        Some(Cut {
            check: Some(IBAN),
            why: CutWhy::Unreadable
        })
    );
    assert!(read_chat(&out).filtered);
    let (_, cut) = run(
        Api::AnthropicMessages,
        &version,
        Hold::Rules,
        &[b"data: \xff\n\n"],
    );
    assert_eq!(cut.map(|c| c.why), Some(CutWhy::Unreadable));
}

#[test]
fn an_upstream_error_event_passes_through() {
    let version = version(POLICY);
    let stream = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
    let (out, cut) = run(
        Api::AnthropicMessages,
        &version,
        Hold::Rules,
        &[stream.as_bytes()],
    );
    assert_eq!(cut, None);
    let out = events(&out);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].event.as_deref(), Some("error"));
    let data: Value = serde_json::from_str(&out[0].data).unwrap();
    assert_eq!(data["error"]["type"], "overloaded_error");
}

#[test]
fn whole_text_holds_the_answer_while_tool_calls_stream() {
    let version = version(POLICY_JUDGED);
    assert_eq!(Hold::for_version(&version), Some(Hold::WholeText));
    let mut rw = Rewriter::new(
        Api::AnthropicMessages,
        version,
        &request(false),
        Hold::WholeText,
        4096,
    );
    let stream = ANTHROPIC_CLEAN.replace("no pass\\u0077d.", "thanks.");
    let step = rw.feed(stream.as_bytes());
    let round = step.round_end.clone().unwrap();
    assert_eq!(
        round.answer_text,
        "Your IBAN NL91 is é日本 safe 😀, thanks."
    );
    assert_eq!(
        round.rule_text,
        "Your IBAN NL91 is é日本 safe 😀, thanks.\npass\n1"
    );
    assert!(round.asks_for_tool);
    // Before the decision: the message start and the tool call, renumbered to index 0.
    let shown: Vec<Value> = events(&step.out)
        .iter()
        .map(|e| serde_json::from_str(&e.data).unwrap())
        .collect();
    // The tool call's arguments go through the rules like answer text in `Rules`; none of their
    // text can begin an IBAN, so nothing of them was held: one delta.
    assert_eq!(shown.len(), 4, "{shown:?}");
    assert_eq!(shown[1]["content_block"]["type"], "tool_use");
    assert_eq!(shown[1]["index"], 0);
    let released = rw.release();
    let all = read_anthropic(&[step.out, released].concat());
    assert_eq!(all.answer, round.answer_text);
    assert!(!all.filtered);
}

#[test]
fn whole_text_cut_says_the_blocked_reply() {
    let version = version(POLICY_JUDGED);
    for api in [Api::AnthropicMessages, Api::ChatCompletions, Api::Responses] {
        let stream = match api {
            Api::AnthropicMessages => ANTHROPIC_CLEAN,
            Api::ChatCompletions => CHAT_CLEAN,
            Api::Responses => RESPONSES_CLEAN,
            other => unreachable!("{other:?} is not among these tests' APIs"),
        };
        let mut rw = Rewriter::new(
            api,
            Rc::clone(&version),
            &request(true),
            Hold::WholeText,
            4096,
        );
        let step = rw.feed(stream.as_bytes());
        assert!(step.round_end.is_some(), "{api:?}");
        let cut = rw.cut(1);
        let seen = read(api, &[step.out, cut].concat());
        assert_eq!(seen.answer, "Sorry, I can't share that.", "{api:?}");
        assert!(seen.filtered, "{api:?}");
        assert!(rw.feed(b"data: more\n\n").out.is_empty());
    }
}

/// A stream fed 5 bytes at a time to a rewriter that holds everything: nothing goes out, nothing
/// is cut, one round ends. Returns the rewriter, the round, and how many chunks came after it.
fn held_round(version: &Rc<Version>, api: Api, stream: &str) -> (Rewriter, RoundEnd, usize) {
    let mut rw = Rewriter::new(
        api,
        Rc::clone(version),
        &request(true),
        Hold::Everything,
        4096,
    );
    let mut round = None;
    let mut fed_after = 0;
    for chunk in stream.as_bytes().chunks(5) {
        if round.is_some() {
            fed_after += 1;
        }
        let step = rw.feed(chunk);
        assert!(step.out.is_empty() && step.cut.is_none(), "{api:?}");
        assert!(round.is_none() || step.round_end.is_none(), "one round end");
        round = round.or(step.round_end);
    }
    (rw, round.expect("the round ended"), fed_after)
}

#[test]
fn everything_shows_nothing_and_ends_the_round_once_its_text_holds_a_match() {
    let version = version(POLICY);
    for (api, stream) in [
        (Api::AnthropicMessages, ANTHROPIC_IBAN_ACROSS_EVENTS),
        (Api::ChatCompletions, CHAT_IBAN_ACROSS_EVENTS),
        (Api::Responses, RESPONSES_IBAN_ACROSS_EVENTS),
    ] {
        let (mut rw, round, fed_after) = held_round(&version, api, stream);
        assert_eq!(round.early, Some(IBAN), "{api:?}");
        assert!(fed_after > 0, "{api:?}: decided before the answer ended");
        assert!(
            round
                .answer_text
                .starts_with("Pay é日本 to NL91ABNA0417164300")
                && "Pay é日本 to NL91ABNA0417164300 😀 today.".starts_with(&round.answer_text),
            "{api:?}: the text read so far, the match in it: {:?}",
            round.answer_text
        );
        assert_eq!(
            version.output_rules.failed_checks(&round.rule_text),
            vec![IBAN]
        );
        assert!(rw.finish().out.is_empty(), "the rest is not read");
        // Withheld: the blocked reply, closed the vendor's way.
        let seen = read(api, &rw.cut(IBAN));
        assert_eq!(seen.answer, "Sorry, I can't share that.", "{api:?}");
        assert!(!seen.answer.contains("NL91"), "{api:?}");
    }
}

/// Found by the `stream_rewriter` fuzz target: a round that ended early on a match read the rest of
/// the chunk it came in (here the upstream's `message_delta` and its usage), so the blocked reply's
/// usage depended on how the upstream was split. The rest of a doomed answer is never read.
#[test]
fn a_round_ended_early_reads_nothing_more_of_its_chunk() {
    let version = version(POLICY);
    for (api, stream) in [
        (Api::AnthropicMessages, ANTHROPIC_IBAN_ACROSS_EVENTS),
        (Api::ChatCompletions, CHAT_IBAN_ACROSS_EVENTS),
        (Api::Responses, RESPONSES_IBAN_ACROSS_EVENTS),
    ] {
        let cut_after = |size: usize| {
            let mut rw = Rewriter::new(
                api,
                Rc::clone(&version),
                &request(true),
                Hold::Everything,
                4096,
            );
            let mut round = None;
            for chunk in stream.as_bytes().chunks(size) {
                round = round.or(rw.feed(chunk).round_end);
            }
            assert_eq!(round.and_then(|r| r.early), Some(IBAN), "{api:?}");
            rw.cut(IBAN)
        };
        let whole = cut_after(stream.len());
        assert_eq!(whole, cut_after(12), "{api:?}");
        assert_eq!(whole, cut_after(1), "{api:?}");
    }
}

#[test]
fn everything_reads_a_clean_round_to_its_end() {
    let version = version(POLICY);
    for (api, stream) in [
        (Api::AnthropicMessages, ANTHROPIC_IBAN_ACROSS_EVENTS),
        (Api::ChatCompletions, CHAT_IBAN_ACROSS_EVENTS),
        (Api::Responses, RESPONSES_IBAN_ACROSS_EVENTS),
    ] {
        let stream = stream.replace("L91", "X91");
        let (mut rw, round, _) = held_round(&version, api, &stream);
        assert_eq!(round.early, None);
        assert_eq!(
            round.answer_text,
            "Pay é日本 to NX91ABNA0417164300 😀 today."
        );
        let released = rw.release();
        assert_eq!(read(api, &released).answer, round.answer_text, "{api:?}");
        assert!(rw.finish().out.is_empty());
    }
}

#[test]
fn a_cut_before_anything_was_sent_still_starts_the_stream() {
    let version = version(POLICY_JUDGED);
    for api in [Api::AnthropicMessages, Api::ChatCompletions, Api::Responses] {
        let mut rw = Rewriter::new(
            api,
            Rc::clone(&version),
            &request(false),
            Hold::Everything,
            4096,
        );
        let seen = read(api, &rw.cut(0));
        assert_eq!(seen.answer, "Sorry, I can't share that.", "{api:?}");
        assert!(seen.filtered);
    }
}

#[test]
fn a_stream_without_its_last_blank_line_is_flushed_at_the_end() {
    let version = version(POLICY);
    let stream = CHAT_CLEAN.trim_end();
    let (out, cut) = run(
        Api::ChatCompletions,
        &version,
        Hold::Rules,
        &[stream.as_bytes()],
    );
    assert_eq!(cut, None);
    assert_eq!(
        read_chat(&out).channel(0),
        "Your IBAN NL91 is é日本 safe 😀, no passwd."
    );
}

#[test]
fn a_cut_reports_the_usage_and_output_so_far() {
    let version = version(POLICY);
    let (out, _) = run(
        Api::ChatCompletions,
        &version,
        Hold::Rules,
        &[CHAT_IBAN_ACROSS_EVENTS.as_bytes()],
    );
    let chunks = events(&out);
    let usage: Value = serde_json::from_str(&chunks[chunks.len() - 2].data).unwrap();
    assert_eq!(usage["choices"], serde_json::json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 3);
    let filtered: Value = serde_json::from_str(&chunks[chunks.len() - 3].data).unwrap();
    assert_eq!(filtered["choices"][0]["finish_reason"], "content_filter");
    assert_eq!(filtered["id"], "chatcmpl-1");

    let (out, _) = run(
        Api::Responses,
        &version,
        Hold::Rules,
        &[RESPONSES_IBAN_ACROSS_EVENTS.as_bytes()],
    );
    let all: Vec<Value> = events(&out)
        .iter()
        .map(|e| serde_json::from_str(&e.data).unwrap())
        .collect();
    let response = &all.last().unwrap()["response"];
    assert_eq!(response["id"], "resp_1");
    assert_eq!(response["status"], "incomplete");
    // What the caller was sent is not restated (kept, it would grow with the answer): the output
    // holds the blocked reply alone (none in this policy), and the message open at the cut gets
    // no `.done` event; the reasoning item, done before the cut, got its own.
    assert_eq!(response["output"], serde_json::json!([]));
    let done: Vec<_> = all
        .iter()
        .filter(|e| e["type"].as_str().is_some_and(|t| t.ends_with(".done")))
        .map(|e| (e["type"].as_str().unwrap(), e["output_index"].as_u64()))
        .collect();
    assert_eq!(done, [("response.output_item.done", Some(0))]);

    let (out, _) = run(
        Api::AnthropicMessages,
        &version,
        Hold::Rules,
        &[ANTHROPIC_IBAN_ACROSS_EVENTS.as_bytes()],
    );
    let all = events(&out);
    let delta: Value = serde_json::from_str(&all[all.len() - 2].data).unwrap();
    assert_eq!(delta["delta"]["stop_reason"], "refusal");
    assert_eq!(delta["usage"]["output_tokens"], 5);
}

#[test]
fn a_line_over_the_limit_is_unreadable() {
    let version = version(POLICY);
    let mut rw = Rewriter::new(
        Api::ChatCompletions,
        version,
        &request(false),
        Hold::Rules,
        64,
    );
    let step = rw.feed(format!("data: {}", "x".repeat(100)).as_bytes());
    assert_eq!(step.cut.map(|c| c.why), Some(CutWhy::Unreadable));
    assert!(read_chat(&step.out).filtered);
}

/// Fed one upstream event at a time, the caller gets nothing of a tool call until the event that
/// completes it, then all of it at once; text before the call streams meanwhile.
#[test]
fn a_tool_call_is_sent_only_once_complete_and_then_whole() {
    let version = version(POLICY);
    // (stream, what marks a tool call in what the caller gets, upstream event that completes it)
    let cases = [
        (Api::AnthropicMessages, ANTHROPIC_CLEAN, "tool_use"),
        (Api::ChatCompletions, CHAT_TOOL_CALL, "tool_calls"),
        (Api::Responses, RESPONSES_TOOL_CALL, "function_call"),
    ];
    for (api, stream, marker) in cases {
        let upstream = read(api, stream.as_bytes());
        let blocks: Vec<&str> = stream.split_inclusive("\n\n").collect();
        let completes = blocks
            .iter()
            .position(|b| {
                b.contains("\"content_block_stop\",\"index\":1")
                    || b.contains("\"finish_reason\":\"tool_calls\"")
                    || b.contains("response.output_item.done")
            })
            .unwrap();
        let mut rw = Rewriter::new(api, Rc::clone(&version), &request(false), Hold::Rules, 4096);
        let mut out = Vec::new();
        for (i, block) in blocks.iter().enumerate() {
            out.extend(rw.feed(block.as_bytes()).out);
            let text = String::from_utf8_lossy(&out);
            assert_eq!(
                text.contains(marker),
                i >= completes,
                "{api:?} after event {i}"
            );
            if i == 0 && api == Api::ChatCompletions {
                assert!(text.contains("Sending it."), "text before the call streams");
            }
        }
        out.extend(rw.finish().out);
        let seen = read(api, &out);
        assert!(upstream.has_whole_calls(&seen), "{api:?}");
        assert_eq!(seen.calls.len(), upstream.calls.len(), "{api:?}");
        assert_eq!(seen.channel(0), upstream.channel(0), "{api:?}");
    }
}

/// Tool checks alone: text streams as it comes; a tool call's events wait until the call is
/// complete, when it is reported once (whole, as tool checks read it), and then until it is allowed
/// or denied. Allowed, it arrives whole; denied, nothing of it arrives and the stream ends saying
/// the reason, filtered. Fed whole and at every byte split.
#[test]
fn tool_checks_hold_a_complete_call_until_it_is_allowed_or_denied() {
    let version = version(
        r#"{"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {
          "tool_checks": [{"name": "billing", "when": "The call has billing information"}]}}}}}"#,
    );
    assert_eq!(Hold::for_version(&version), Some(Hold::Rules));
    let cases = [
        (
            Api::AnthropicMessages,
            ANTHROPIC_CLEAN,
            "note",
            r#"{"text": "pass", "n": 1}"#,
            "toolu_1",
        ),
        (
            Api::ChatCompletions,
            CHAT_TOOL_CALL,
            "send",
            r#"{"to": "Bob"}"#,
            "call_1",
        ),
        (
            Api::Responses,
            RESPONSES_TOOL_CALL,
            "send",
            r#"{"to": "Bob"}"#,
            "call_1",
        ),
    ];
    for (api, stream, name, arguments, call_id) in cases {
        let upstream = read(api, stream.as_bytes());
        let bytes = stream.as_bytes();
        for split in 0..=bytes.len() {
            let chunks: [&[u8]; 2] = [&bytes[..split], &bytes[split..]];
            for allow in [true, false] {
                let mut rw =
                    Rewriter::new(api, Rc::clone(&version), &request(false), Hold::Rules, 4096);
                let (mut out, mut calls) = (Vec::new(), Vec::new());
                for chunk in chunks {
                    let step = rw.feed(chunk);
                    out.extend(step.out);
                    calls.extend(step.calls);
                }
                let last = rw.finish();
                out.extend(last.out);
                calls.extend(last.calls);
                assert_eq!(calls.len(), 1, "{api:?} at {split}");
                let (key, call) = &calls[0];
                assert_eq!(
                    (call.name.as_str(), call.arguments.as_str(), call.json),
                    (name, arguments, true)
                );
                let before = String::from_utf8_lossy(&out).into_owned();
                assert!(
                    !before.contains(call_id),
                    "{api:?} at {split}: the call went before it was allowed"
                );
                assert!(rw.awaits_calls());
                if allow {
                    out.extend(rw.allow_calls(&[*key]));
                    let seen = read(api, &out);
                    assert!(!seen.filtered, "{api:?}");
                    assert_eq!(seen.calls.len(), 1, "{api:?} at {split}");
                    assert!(upstream.has_whole_calls(&seen), "{api:?}");
                    assert_eq!(seen.channel(0), upstream.channel(0), "{api:?}");
                } else {
                    out.extend(rw.deny_calls("No billing info in calls."));
                    let all = String::from_utf8_lossy(&out).into_owned();
                    assert!(!all.contains(call_id), "{api:?} at {split}");
                    let seen = read(api, &out);
                    assert!(seen.filtered, "{api:?} at {split}");
                    assert!(seen.calls.is_empty(), "{api:?}");
                    assert!(
                        seen.answer.ends_with("No billing info in calls."),
                        "{api:?}: {}",
                        seen.answer
                    );
                    // Nothing more after the end.
                    assert!(rw.allow_calls(&[*key]).is_empty());
                }
            }
        }
    }
}

/// A call the vendor runs itself (an Anthropic server tool) already ran: nothing waits for it.
#[test]
fn a_server_tool_is_not_held_for_tool_checks() {
    let version = version(
        r#"{"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {
          "allowed_tools": ["nothing"]}}}}}"#,
    );
    let stream = ANTHROPIC_CLEAN.replace(
        r#""type":"tool_use","id":"toolu_1","name":"note""#,
        r#""type":"server_tool_use","id":"srvtoolu_1","name":"web_search""#,
    );
    let mut rw = Rewriter::new(
        Api::AnthropicMessages,
        version,
        &request(false),
        Hold::Rules,
        4096,
    );
    let step = rw.feed(stream.as_bytes());
    assert!(step.calls.is_empty());
    let mut out = step.out;
    out.extend(rw.finish().out);
    assert!(String::from_utf8_lossy(&out).contains("srvtoolu_1"));
}

/// A Chat stream: `CHAT_CLEAN`'s first chunk, then `chunks`, then `[DONE]`.
fn chat_after_first(chunks: &[&str]) -> String {
    let first = &CHAT_CLEAN[..CHAT_CLEAN.find("\n\n").unwrap() + 2];
    let mut stream = first.as_bytes().to_vec();
    for chunk in chunks {
        sse::encode(&mut stream, None, chunk);
    }
    String::from_utf8(stream).unwrap() + "data: [DONE]\n\n"
}

/// A stream's bytes, one chunk per event (as a paced upstream sends them).
fn per_event(stream: &str) -> Vec<&[u8]> {
    stream.split_inclusive("\n\n").map(str::as_bytes).collect()
}

/// [`run`] for one Chat stream in rules mode, fed whole.
fn run_chat(version: &Rc<Version>, stream: &[u8]) -> (Vec<u8>, Option<Cut>) {
    run(Api::ChatCompletions, version, Hold::Rules, &[stream])
}

#[test]
fn an_unchanged_chat_chunk_goes_out_as_it_came() {
    let version = version(POLICY);
    // Spacing, key order and escapes a serializer would change; the text holds nothing to check.
    let odd = [
        r#"{ "choices" : [ { "finish_reason":null, "delta": {"content": "caf\u00e9 \/ \"ok\" "}, "index":0 } ],
            "model":"gpt-4.1-mini" ,"created":1700000000,"object":"chat.completion.chunk","id":"chatcmpl-5"}"#,
        r#"{"id":"chatcmpl-5","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4.1-mini","system_fingerprint":"fp_1","service_tier":"default","obfuscation":"x1","usage":null,"choices":[{"index":0,"delta":{"content":"done.","refusal":null},"logprobs":null,"finish_reason":"stop"}]}"#,
    ];
    let stream = chat_after_first(&odd);
    let (out, cut) = run_chat(&version, stream.as_bytes());
    assert_eq!(cut, None);
    let sent = events(&out);
    assert_eq!(sent.len(), 4);
    assert_eq!(sent[1].data, odd[0]);
    assert_eq!(sent[2].data, odd[1]);
    assert_eq!(
        read(Api::ChatCompletions, &out).channel(0),
        "Your IBAN NL91 is é日本café / \"ok\" done."
    );
    // Held whole (5 bytes at a time), then released: still as it came.
    let (mut rw, round, _) = held_round(&version, Api::ChatCompletions, &stream);
    assert!(round.answer_text.ends_with("done."));
    let released = rw.release();
    assert!(events(&released).iter().any(|e| e.data == odd[0]));
    assert!(events(&released).iter().any(|e| e.data == odd[1]));
}

/// An Anthropic message's opening events, up to its first text block.
const ANTHROPIC_TEXT_OPENING: &str = "event: message_start\n\
    data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n\
    event: content_block_start\n\
    data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n";

/// Anthropic and Responses events are read into trees; one nothing changes goes out as it came
/// (key order, spacing, escapes), not serialized again, held whole or not.
#[test]
fn an_unchanged_anthropic_or_responses_event_goes_out_as_it_came() {
    let version = version(POLICY);
    let anthropic = &(ANTHROPIC_TEXT_OPENING.to_owned()
        + "event: content_block_delta\n\
        data: { \"type\" : \"content_block_delta\", \"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"caf\\u00e9 \\/ ok \"}}\n\n\
        event: content_block_delta\n\
        data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"done.\"}}\n\n\
        event: content_block_stop\n\
        data: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
        event: message_delta\n\
        data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":3}}\n\n\
        event: message_stop\n\
        data: {\"type\":\"message_stop\"}\n\n");
    let responses = "event: response.created\n\
        data: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"in_progress\",\"model\":\"m\",\"output\":[]}}\n\n\
        event: response.output_item.added\n\
        data: {\"type\":\"response.output_item.added\",\"sequence_number\":1,\"output_index\":0,\"item\":{\"id\":\"msg_1\",\"type\":\"message\",\"status\":\"in_progress\",\"role\":\"assistant\",\"content\":[]}}\n\n\
        event: response.output_text.delta\n\
        data: { \"type\":\"response.output_text.delta\",\"sequence_number\":2,\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"caf\\u00e9 \\/ ok \"}\n\n\
        event: response.output_text.delta\n\
        data: {\"type\":\"response.output_text.delta\",\"sequence_number\":3,\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"done.\"}\n\n\
        event: response.completed\n\
        data: {\"type\":\"response.completed\",\"sequence_number\":4,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"completed\",\"model\":\"m\",\"output\":[]}}\n\n";
    for (api, stream) in [
        (Api::AnthropicMessages, anthropic.as_str()),
        (Api::Responses, responses),
    ] {
        let (out, cut) = run(api, &version, Hold::Rules, &per_event(stream));
        assert_eq!(cut, None, "{api:?}");
        assert_eq!(String::from_utf8_lossy(&out), stream, "{api:?}");
        assert_eq!(read(api, &out).channel(0), "café / ok done.", "{api:?}");
        // Held whole (5 bytes at a time), then released: still as it came.
        let (mut rw, round, _) = held_round(&version, api, stream);
        assert!(round.answer_text.ends_with("done."), "{api:?}");
        let released = String::from_utf8(rw.release()).unwrap();
        assert!(stream.starts_with(&released), "{api:?}");
    }
}

/// An event with a key twice goes out as its tree, which kept the last: no reader of what the
/// caller gets can take text that was not checked, nor take the event for another kind.
#[test]
fn an_anthropic_event_with_a_key_twice_is_written_as_its_tree() {
    let version = version(POLICY);
    let stream = &(ANTHROPIC_TEXT_OPENING.to_owned()
        + "event: content_block_delta\n\
        data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"my password\",\"text\":\"clean\"}}\n\n");
    let (out, cut) = run(
        Api::AnthropicMessages,
        &version,
        Hold::Rules,
        &per_event(stream),
    );
    assert_eq!(cut, None);
    let out = String::from_utf8_lossy(&out);
    assert!(!out.contains("password"), "{out}");
    assert!(
        out.contains(r#"data: {"delta":{"text":"clean","type":"text_delta"},"index":0,"type":"content_block_delta"}"#),
        "{out}"
    );
}

#[test]
fn a_held_rest_is_written_into_the_chunks_own_json_on_both_sides() {
    let version = version(POLICY);
    // "NL9" may begin an IBAN: held from the first chunk, then joined to the second. Both chunks
    // keep their spacing and key order; only the text of each changes, in place.
    let odd = [
        r#"{ "choices" : [ { "finish_reason":null, "delta": {"content": "pay to NL9"}, "index":0 } ], "model":"gpt-4.1-mini" ,"created":1700000000,"object":"chat.completion.chunk","id":"chatcmpl-5"}"#,
        r#"{ "choices" : [ { "finish_reason":null, "delta": {"content": "9 caf\u00e9"}, "index":0 } ], "model":"gpt-4.1-mini" ,"created":1700000000,"object":"chat.completion.chunk","id":"chatcmpl-5"}"#,
    ];
    let stream = chat_after_first(&odd);
    // Fed whole, the second chunk confirms the first's text before anything is sent: both go as
    // they came.
    let (out, cut) = run_chat(&version, stream.as_bytes());
    assert_eq!(cut, None);
    let sent = events(&out);
    assert_eq!(
        (sent[1].data.as_str(), sent[2].data.as_str()),
        (odd[0], odd[1])
    );
    for chunks in [per_event(&stream), stream.as_bytes().chunks(7).collect()] {
        let (out, cut) = run(Api::ChatCompletions, &version, Hold::Rules, &chunks);
        assert_eq!(cut, None);
        let sent = events(&out);
        assert_eq!(sent.len(), 4, "as many events as the upstream sent");
        assert_eq!(
            sent[1].data,
            odd[0].replace(r#""pay to NL9""#, r#""pay to ""#)
        );
        assert_eq!(
            sent[2].data,
            odd[1].replace(r#""9 caf\u00e9""#, r#""NL99 café""#)
        );
        assert_eq!(
            read(Api::ChatCompletions, &out).channel(0),
            "Your IBAN NL91 is é日本pay to NL99 café"
        );
    }
}

#[test]
fn a_held_rest_joins_only_a_chunk_of_the_same_id_and_text_alone() {
    let version = version(POLICY);
    let chunk = |id: &str, delta: &str| {
        format!(
            r#"{{"id":"{id}","object":"chat.completion.chunk","created":1,"model":"m","choices":[{{"index":0,"delta":{delta},"finish_reason":null}}]}}"#
        )
    };
    let held = chunk("chatcmpl-5", r#"{"content":"pay to NL9"}"#);
    for (next, joined) in [
        (chunk("chatcmpl-5", r#"{"content":"9 ok"}"#), true),
        (chunk("chatcmpl-6", r#"{"content":"9 ok"}"#), false),
        // A null refusal carries nothing: still text alone.
        (
            chunk("chatcmpl-5", r#"{"content":"9 ok","refusal":null}"#),
            true,
        ),
        (
            chunk("chatcmpl-5", r#"{"content":"9 ok"}"#)
                .replace(r#""finish_reason":null"#, r#""finish_reason":"stop""#),
            false,
        ),
    ] {
        let stream = chat_after_first(&[&held, &next]);
        let (out, cut) = run(
            Api::ChatCompletions,
            &version,
            Hold::Rules,
            &per_event(&stream),
        );
        assert_eq!(cut, None);
        let sent = events(&out);
        assert_eq!(sent.len(), if joined { 4 } else { 5 }, "{next}");
        assert_eq!(
            read(Api::ChatCompletions, &out).channel(0),
            "Your IBAN NL91 is é日本pay to NL99 ok"
        );
        if !joined {
            // The rest went alone: the held chunk again, with only the rest as its text.
            assert_eq!(sent[2].data, held.replace("pay to NL9", "NL9"));
        }
    }
}

#[test]
fn a_chat_chunk_with_a_key_twice_is_read_and_written_as_a_tree() {
    let version = version(POLICY);
    // serde_json's tree keeps the last of two equal keys, and the chunk is written from the tree:
    // what the caller gets is the text that was checked, once.
    let twice = [
        r#"{"id":"chatcmpl-5","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4.1-mini","choices":[{"index":0,"delta":{"content":"clean ","content":"pay NL91ABNA0417164300 now"},"finish_reason":null}]}"#,
    ];
    let (out, cut) = run_chat(&version, chat_after_first(&twice).as_bytes());
    assert_eq!(cut.and_then(|c| c.check), Some(IBAN));
    assert!(!String::from_utf8_lossy(&out).contains("clean"));
    assert_eq!(
        read(Api::ChatCompletions, &out).channel(0),
        "Your IBAN NL91 is é日本pay "
    );
    let clean = [
        r#"{"id":"chatcmpl-5","id":"chatcmpl-6","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4.1-mini","choices":[{"index":0,"delta":{"content":"a","content":"b"},"finish_reason":null}]}"#,
    ];
    let (out, cut) = run_chat(&version, chat_after_first(&clean).as_bytes());
    assert_eq!(cut, None);
    let tree: Value = serde_json::from_str(clean[0]).unwrap();
    assert_eq!(events(&out)[1].data, serde_json::to_string(&tree).unwrap());
    assert_eq!(tree["id"], "chatcmpl-6");
    assert_eq!(tree["choices"][0]["delta"]["content"], "b");
}

/// A Chat stream whose events after the first carry these texts, not yet ended (no `[DONE]`).
fn chat_texts_unended(texts: impl Iterator<Item = String>) -> String {
    let chunks: Vec<String> = texts
        .map(|text| {
            format!(
                r#"{{"id":"chatcmpl-5","object":"chat.completion.chunk","created":1,"model":"m","choices":[{{"index":0,"delta":{{"content":"{text}"}},"finish_reason":null}}]}}"#
            )
        })
        .collect();
    let refs: Vec<&str> = chunks.iter().map(String::as_str).collect();
    let stream = chat_after_first(&refs);
    stream.strip_suffix("data: [DONE]\n\n").unwrap().to_owned()
}

fn chat_rewriter(policy: &str) -> Rewriter {
    chat_rewriter_limited(policy, Hold::Rules, 1 << 20)
}

fn chat_rewriter_limited(policy: &str, hold: Hold, limit: usize) -> Rewriter {
    Rewriter::new(
        Api::ChatCompletions,
        version(policy),
        &request(true),
        hold,
        limit,
    )
}

#[test]
fn a_chunk_of_many_events_leaves_no_room_behind_in_the_stream() {
    let body = chat_texts_unended((0..500).map(|i| format!("word{i} ")));
    let mut rw = chat_rewriter(POLICY);
    // The general path's queue (the short path takes such events without it).
    rw.short_path = false;
    let step = rw.feed(body.as_bytes());
    assert_eq!(step.cut, None);
    assert_eq!(
        events(&step.out).len(),
        501,
        "every event went in the same callback"
    );
    // What a stream keeps between chunks does not grow with the chunk.
    assert_eq!(rw.queue.capacity(), rw.queue.len());
}

/// A stream's memory between chunks is what it holds, not the most any chunk before needed: the
/// queue keeps no room beyond its pieces, on both paths, whatever the chunks were.
#[test]
fn between_chunks_the_queue_keeps_room_for_what_it_holds_only() {
    // "NL" may begin the IBAN rule's match: held until the next event's text.
    let body = chat_texts_unended((0..400).map(|i| format!("word{i} and NL")));
    let body = body.as_bytes();
    for short_path in [true, false] {
        let mut rw = chat_rewriter(POLICY);
        rw.short_path = short_path;
        let mut most = 0;
        let mut at = 0;
        // Chunks of 1 byte up to many events, cut anywhere.
        for size in [1, 7, 180, 4000, 33, 16384, 250, 9000].iter().cycle() {
            let end = (at + size).min(body.len());
            let step = rw.feed(&body[at..end]);
            assert_eq!(step.cut, None);
            most = most.max(rw.queue.len());
            assert_eq!(
                rw.queue.capacity(),
                rw.queue.len(),
                "short path {short_path}"
            );
            at = end;
            if at == body.len() {
                break;
            }
        }
        assert!(most >= 1, "the stream held a piece between chunks");
    }
}

/// Chat chunks of text alone whose text is confirmed as it is read go out as the bytes they came
/// as, without being taken apart (`Rewriter::pass_whole`); what the caller receives is byte for
/// byte what the general path sends, however the body is split, held, cut or clean.
#[test]
fn text_alone_on_the_short_path_is_sent_as_the_general_path_sends_it() {
    let chunk = |text: &str| {
        format!(
            "data: {{\"id\":\"chatcmpl-9\",\"object\":\"chat.completion.chunk\",\"created\":1,\
             \"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":{}}},\
             \"logprobs\":null,\"finish_reason\":null}}]}}\n\n",
            serde_json::to_string(text).unwrap()
        )
    };
    let head = "data: {\"id\":\"chatcmpl-9\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n";
    let tail = "data: {\"id\":\"chatcmpl-9\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    let stream_of = |texts: &[&str]| {
        let texts: String = texts.iter().map(|t| chunk(t)).collect();
        format!("{head}{}{texts}{tail}", chunk("Well, "))
    };
    short_path_sends_what_the_general_path_sends(Api::ChatCompletions, head.len(), &stream_of);
}

/// An Anthropic text delta of block `index`, in the vendor's compact JSON.
fn anthropic_delta(index: u64, text: &str) -> String {
    format!(
        "event: content_block_delta\n\
         data: {{\"type\":\"content_block_delta\",\"index\":{index},\
         \"delta\":{{\"type\":\"text_delta\",\"text\":{}}}}}\n\n",
        serde_json::to_string(text).unwrap()
    )
}

/// The end of an Anthropic stream of one text block (0) after [`ANTHROPIC_TEXT_OPENING`].
const ANTHROPIC_TEXT_CLOSING: &str = "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
    event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":9}}\n\n\
    event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

#[test]
fn an_anthropic_text_delta_on_the_short_path_is_sent_as_the_general_path_sends_it() {
    let delta = anthropic_delta;
    let tail = ANTHROPIC_TEXT_CLOSING;
    let stream_of = |texts: &[&str]| {
        let texts: String = texts.iter().map(|t| delta(0, t)).collect();
        format!(
            "{ANTHROPIC_TEXT_OPENING}{}{texts}{tail}",
            delta(0, "Well, ")
        )
    };
    short_path_sends_what_the_general_path_sends(
        Api::AnthropicMessages,
        ANTHROPIC_TEXT_OPENING.len(),
        &stream_of,
    );
    // Deltas the template does not read (other spacing, a ping between, a second block under
    // another index, a text written with escapes) go the general way, and the output is the same.
    let ping = "event: ping\ndata: {\"type\": \"ping\"}\n\n";
    let spaced = "event: content_block_delta\ndata: {\"type\": \"content_block_delta\", \"index\": 0, \"delta\": {\"type\": \"text_delta\", \"text\": \"to NL9\"}}\n\n";
    let escaped = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"1AB\\u004eA04\\/\"}}\n\n";
    let second = "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
        event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n";
    let stream = [
        ANTHROPIC_TEXT_OPENING.to_owned(),
        delta(0, "Pay "),
        ping.to_owned(),
        spaced.to_owned(),
        escaped.to_owned(),
        delta(0, "17164300 now"),
        delta(0, " and "),
        second.to_owned(),
        delta(1, "then NL9"),
        delta(1, "1ABNA0417164300"),
        tail.replace("\"index\":0", "\"index\":1"),
    ]
    .concat();
    let stream = stream.as_bytes();
    let run_with = |short: bool, chunks: &[&[u8]]| {
        let mut rw = Rewriter::new(
            Api::AnthropicMessages,
            version(POLICY),
            &request(false),
            Hold::Rules,
            1 << 20,
        );
        rw.short_path = short;
        let (out, cut) = feed_all(&mut rw, chunks);
        (out, cut)
    };
    let (whole, cut) = run_with(true, &[stream]);
    assert_eq!(cut.and_then(|c| c.check), Some(IBAN));
    for chunks in (0..=stream.len())
        .step_by(2)
        .map(|i| {
            let (a, b) = stream.split_at(i);
            vec![a, b]
        })
        .chain([
            per_event(std::str::from_utf8(stream).unwrap()),
            stream.chunks(1).collect(),
            stream.chunks(61).collect(),
        ])
    {
        let (short, short_cut) = run_with(true, &chunks);
        let (general, general_cut) = run_with(false, &chunks);
        assert!(short == general, "{} chunks differ", chunks.len());
        assert_eq!(short_cut, general_cut);
        if chunks.len() == 1 {
            assert!(short == whole);
        }
    }
    // A block the caller sees under another index (the upstream's first block is 3): its deltas
    // are renumbered, so none goes as it came, on either path.
    let renumbered = [
        ANTHROPIC_TEXT_OPENING.to_owned(),
        delta(0, "Well, "),
        delta(0, "all is "),
        delta(0, "fine"),
        tail.to_owned(),
    ]
    .concat()
    .replace("\"index\":0", "\"index\":3");
    let renumbered = renumbered.as_bytes();
    let (whole, cut) = run_with(true, &[renumbered]);
    assert_eq!(cut, None);
    let text = String::from_utf8(whole.clone()).unwrap();
    assert!(
        !text.contains("\"index\":3") && text.contains("\"index\":0"),
        "{text}"
    );
    for chunks in (0..=renumbered.len()).step_by(3).map(|i| {
        let (a, b) = renumbered.split_at(i);
        vec![a, b]
    }) {
        assert!(run_with(true, &chunks).0 == run_with(false, &chunks).0);
    }
}

/// A Responses stream of `texts` (after "Well, "): every event numbered as the vendor numbers
/// them, from 0; `obfuscation` set on the deltas when given (the vendor's padding).
fn responses_stream_of(texts: &[&str], obfuscation: bool, index: u64) -> String {
    let mut n = 0u64;
    let mut next = || {
        n += 1;
        n - 1
    };
    let mut out = String::new();
    let mut event = |name: &str, data: String| {
        out.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    };
    event("response.created", format!("{{\"type\":\"response.created\",\"sequence_number\":{},\"response\":{{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"in_progress\",\"model\":\"m\",\"output\":[]}}}}", next()));
    event("response.output_item.added", format!("{{\"type\":\"response.output_item.added\",\"sequence_number\":{},\"output_index\":{index},\"item\":{{\"id\":\"msg_1\",\"type\":\"message\",\"status\":\"in_progress\",\"role\":\"assistant\",\"content\":[]}}}}", next()));
    for text in std::iter::once(&"Well, ").chain(texts) {
        let pad = if obfuscation {
            format!(
                ",\"obfuscation\":{}",
                serde_json::to_string(&"x".repeat(text.len() % 5)).unwrap()
            )
        } else {
            String::new()
        };
        event("response.output_text.delta", format!("{{\"type\":\"response.output_text.delta\",\"sequence_number\":{},\"item_id\":\"msg_1\",\"output_index\":{index},\"content_index\":0,\"delta\":{},\"logprobs\":[]{pad}}}", next(), serde_json::to_string(text).unwrap()));
    }
    event("response.completed", format!("{{\"type\":\"response.completed\",\"sequence_number\":{},\"response\":{{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"completed\",\"model\":\"m\",\"output\":[]}}}}", next()));
    out
}

#[test]
fn a_responses_text_delta_on_the_short_path_is_sent_as_the_general_path_sends_it() {
    let head = responses_stream_of(&[], false, 0)
        .find("event: response.output_text.delta")
        .unwrap();
    // With `obfuscation`, a string slot beside the sequence number's.
    let stream_of = |texts: &[&str]| responses_stream_of(texts, true, 0);
    short_path_sends_what_the_general_path_sends(Api::Responses, head, &stream_of);
    // An item the caller sees under another output index (the upstream's first is 2): renumbered,
    // so no delta goes as it came, on either path; and a sequence the upstream starts at 7.
    let run_with = |short: bool, chunks: &[&[u8]]| {
        let mut rw = Rewriter::new(
            Api::Responses,
            version(POLICY),
            &request(false),
            Hold::Rules,
            1 << 20,
        );
        rw.short_path = short;
        (feed_all(&mut rw, chunks).0, rw.passed_whole)
    };
    let renumbered = responses_stream_of(&["all is ", "fine"], false, 2);
    let late = responses_stream_of(&["all is ", "fine"], false, 0)
        .replace("\"sequence_number\":", "\"sequence_number\":7");
    for stream in [renumbered, late] {
        let stream = stream.as_bytes();
        let (whole, passed) = run_with(true, &[stream]);
        assert_eq!(passed, 0);
        let text = String::from_utf8(whole).unwrap();
        assert!(text.contains("\"output_index\":0") && text.contains("\"sequence_number\":0"));
        for i in (0..=stream.len()).step_by(3) {
            let (a, b) = stream.split_at(i);
            assert!(run_with(true, &[a, b]).0 == run_with(false, &[a, b]).0);
        }
    }
}

/// What the short path sends (`Rewriter::pass_whole`) against the general path alone, for
/// streams of `api` that `stream_of` makes of text events ("Well, " first), its first `head`
/// bytes before the text: byte for byte the same, fed whole, at every split in two, one event at
/// a time and in small chunks.
fn short_path_sends_what_the_general_path_sends(
    api: Api,
    head: usize,
    stream_of: &dyn Fn(&[&str]) -> String,
) {
    let version = version(POLICY);
    let cases: [(&[&str], Option<usize>); 6] = [
        (&["Pay ", "to N", "L91ABNA0417164300", " now"], Some(IBAN)),
        (
            &[
                "Hello ",
                "there, ",
                "all ",
                "is ",
                "well: é日本 \"q\"\n",
                "ok",
            ],
            None,
        ),
        // Held ("NL9", "NL91"), then confirmed by the next chunk, in part or whole.
        (
            &["Pay ", "to NL9", "x and ", "NL91", " then ", "more"],
            None,
        ),
        (
            &["Pay ", "to NL9", "1ABNA0417164300", " now", " and more"],
            Some(IBAN),
        ),
        (&["a ", "pass", "word", " b", " c"], Some(PASSWORD)),
        (&["a ", "password", " b"], Some(PASSWORD)),
    ];
    let run_with = |short: bool, chunks: &[&[u8]]| {
        let mut rw = Rewriter::new(
            api,
            Rc::clone(&version),
            &request(false),
            Hold::Rules,
            1 << 20,
        );
        rw.short_path = short;
        let (out, cut) = feed_all(&mut rw, chunks);
        (out, cut, rw.passed_whole, rw.joined_short, rw.read_short)
    };
    for (texts, check) in cases {
        let stream = stream_of(texts);
        let stream = stream.as_bytes();
        let (whole, cut, _, _, read) = run_with(true, &[stream]);
        assert!(read >= 1, "{texts:?}: nothing took the short path");
        assert_eq!(run_with(false, &[stream]).0, whole, "{texts:?}");
        assert_eq!(cut.and_then(|c| c.check), check, "{texts:?}");
        if check.is_none() && texts.iter().all(|t| !t.contains("NL9")) {
            // Nothing held: every byte after the first chunk (read as a tree) as it came.
            assert!(whole.ends_with(&stream[head..]), "{texts:?}");
        }
        let mut splits: Vec<Vec<&[u8]>> = (0..=stream.len())
            .map(|i| {
                let (a, b) = stream.split_at(i);
                vec![a, b]
            })
            .collect();
        // One event a chunk: a held rest waits between chunks, and the short path reads the
        // event behind it (a paced stream's usual case).
        let one_each = per_event(std::str::from_utf8(stream).unwrap());
        let held = texts.iter().any(|t| t.ends_with("NL9"));
        assert!(!held || run_with(true, &one_each).3 >= 1, "{texts:?}");
        splits.push(one_each);
        splits.push(stream.chunks(1).collect());
        splits.push(stream.chunks(97).collect());
        for chunks in splits {
            let (short, short_cut, ..) = run_with(true, &chunks);
            let (general, general_cut, passed, _, read) = run_with(false, &chunks);
            assert_eq!((passed, read), (0, 0));
            assert!(
                short == general,
                "{texts:?}: {} chunks differ",
                chunks.len()
            );
            assert_eq!(short_cut, general_cut);
        }
    }
    // A text that is not UTF-8 (the template compares bytes): unreadable on both paths.
    let mut stream = stream_of(&["so é ok"]).into_bytes();
    let e = stream.iter().rposition(|&b| b == 0xc3).unwrap();
    stream[e] = 0xff;
    // Whole, and with the bad event starting a chunk.
    let start = stream[..e].windows(2).rposition(|w| w == b"\n\n").unwrap() + 2;
    let (before, from) = stream.split_at(start);
    for chunks in [vec![&stream[..]], vec![before, from]] {
        let (short, cut, ..) = run_with(true, &chunks);
        assert!(short == run_with(false, &chunks).0);
        assert_eq!(cut.map(|c| c.why), Some(CutWhy::Unreadable));
    }
}

/// What is held whole lives in the VM, so it is bounded as a non-streamed answer is: past the
/// policy's `max_body_bytes` of upstream the stream ends as one that cannot be read, and nothing
/// of what was held reaches the caller.
#[test]
fn a_held_round_past_the_limit_is_cut_as_unreadable_and_none_of_it_is_sent() {
    let body = chat_texts_unended((0..400).map(|i| format!("word{i} ")));
    assert!(body.len() > 40_000);
    for hold in [Hold::WholeText, Hold::Everything] {
        let mut rw = chat_rewriter_limited(POLICY_JUDGED, hold, 8192);
        let (mut out, mut cut, mut fed) = (Vec::new(), None, 0);
        for chunk in body.as_bytes().chunks(1000) {
            let step = rw.feed(chunk);
            assert!(step.round_end.is_none(), "{hold:?}");
            out.extend(step.out);
            if step.cut.is_some() {
                cut = step.cut;
                break;
            }
            fed += chunk.len();
        }
        let cut = cut.unwrap_or_else(|| panic!("{hold:?}: never cut"));
        assert_eq!(cut.why, CutWhy::Unreadable, "{hold:?}");
        assert!(fed <= 8192, "{hold:?}: held {fed} bytes");
        let seen = read_chat(&out);
        assert!(seen.filtered, "{hold:?}");
        assert_eq!(seen.answer, "Sorry, I can't share that.", "{hold:?}");
        assert!(rw.feed(b"data: more\n\n").out.is_empty(), "{hold:?}: ended");
    }
}

/// The judged check says `on_error: "pass"`: past the limit it cannot decide, so the round goes on
/// as if it had passed (as a non-streamed answer over the limit does): what was held is sent, the
/// rest streams under the rules, and a rule match later still cuts where it starts.
#[test]
fn a_held_round_past_the_limit_goes_on_unjudged_when_its_judged_checks_pass_on_error() {
    let policy = POLICY_JUDGED.replace(
        r#""kind": "polite_tone"}"#,
        r#""kind": "polite_tone", "on_error": "pass"}"#,
    );
    let words: String = (0..400).map(|i| format!("word{i} ")).collect();
    let body = format!(
        "{}data: [DONE]\n\n",
        chat_texts_unended((0..400).map(|i| format!("word{i} ")))
    );
    let mut rw = chat_rewriter_limited(&policy, Hold::WholeText, 8192);
    let (mut out, mut unjudged, mut fed, mut sent_at) = (Vec::new(), 0, 0, None);
    for chunk in body.as_bytes().chunks(1000) {
        let step = rw.feed(chunk);
        assert_eq!(step.cut, None);
        assert!(step.round_end.is_none(), "no round for the judge");
        unjudged += usize::from(step.unjudged);
        fed += chunk.len();
        if sent_at.is_none() && !step.out.is_empty() {
            sent_at = Some(fed);
        }
        out.extend(step.out);
    }
    let last = rw.finish();
    assert_eq!(last.cut, None);
    assert!(last.round_end.is_none());
    out.extend(last.out);
    assert_eq!(unjudged, 1, "said once");
    let sent_at = sent_at.unwrap_or_default();
    assert!(
        sent_at > 8192 && sent_at <= 8192 + 1000,
        "held until past the limit, then sent: first bytes after {sent_at}"
    );
    let seen = read_chat(&out);
    assert!(!seen.filtered);
    assert!(seen.answer.ends_with(&words), "all of it, in order");

    // The rules still read what follows, and cut at a match.
    let body = chat_texts_unended(
        (0..400)
            .map(|i| format!("word{i} "))
            .chain(["NL91ABNA0417164300 ".to_owned(), "after".to_owned()]),
    );
    let mut rw = chat_rewriter_limited(&policy, Hold::WholeText, 8192);
    let (out, cut) = feed_all(
        &mut rw,
        &body.as_bytes().chunks(1000).collect::<Vec<&[u8]>>(),
    );
    assert_eq!(
        cut.map(|c| (c.check, c.why)),
        Some((Some(0), CutWhy::Matched))
    );
    let seen = read_chat(&out);
    assert!(
        seen.answer.ends_with("word399 "),
        "{:?}",
        &seen.answer[seen.answer.len() - 40..]
    );
    assert!(
        seen.filtered,
        "ends as the vendor's content filter ends an answer"
    );
    assert!(
        !String::from_utf8_lossy(&out).contains("NL91ABNA"),
        "nothing of the match"
    );

    // A judged check without `on_error: "pass"` among them: cut as unreadable, as before.
    let both = policy.replace(
        r#"{"name": "polite", "stage": "output", "kind": "polite_tone", "on_error": "pass"}"#,
        r#"{"name": "polite", "stage": "output", "kind": "polite_tone", "on_error": "pass"},
    {"name": "tone", "stage": "output", "kind": "polite_tone"}"#,
    );
    assert_ne!(both, policy);
    let mut rw = chat_rewriter_limited(&both, Hold::WholeText, 8192);
    let (_, cut) = feed_all(
        &mut rw,
        &body.as_bytes().chunks(1000).collect::<Vec<&[u8]>>(),
    );
    assert_eq!(
        cut.map(|c| (c.check, c.why)),
        Some((Some(2), CutWhy::Unreadable))
    );
}

#[test]
fn a_stream_checked_by_rules_is_never_cut_for_its_length() {
    let body = chat_texts_unended((0..400).map(|i| format!("word{i} ")));
    let mut rw = chat_rewriter_limited(POLICY, Hold::Rules, 8192);
    let body = format!("{body}data: [DONE]\n\n");
    let chunks: Vec<&[u8]> = body.as_bytes().chunks(1000).collect();
    let (out, cut) = feed_all(&mut rw, &chunks);
    assert_eq!(cut, None);
    let words: String = (0..400).map(|i| format!("word{i} ")).collect();
    assert!(read_chat(&out).answer.ends_with(&words));
}

#[test]
fn a_tool_call_held_past_the_limit_is_cut_and_never_shown_in_part() {
    let start = r#"data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Sending it."},"finish_reason":null}]}

data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"send","arguments":"{\"body\": \""}}]},"finish_reason":null}]}

"#;
    let delta = r#"data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"lorem ipsum "}}]},"finish_reason":null}]}

"#;
    let body = format!("{start}{}", delta.repeat(200));
    let mut rw = chat_rewriter_limited(POLICY, Hold::Rules, 8192);
    let (mut out, mut cut) = (Vec::new(), None);
    for chunk in body.as_bytes().chunks(500) {
        let step = rw.feed(chunk);
        out.extend(step.out);
        if step.cut.is_some() {
            cut = step.cut;
            break;
        }
    }
    assert_eq!(cut.map(|c| c.why), Some(CutWhy::Unreadable));
    let seen = read_chat(&out);
    assert!(seen.filtered);
    assert_eq!(
        seen.answer, "Sending it.",
        "the text before the call streamed"
    );
    assert!(
        !String::from_utf8_lossy(&out).contains("lorem"),
        "no part of the call"
    );
}

#[test]
fn an_unreadable_stream_of_a_version_with_tool_checks_alone_names_no_check() {
    // Its only check is an input check, already decided: the cut must not count it again.
    let policy = r#"{"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {
      "live_checks": [{"name": "in", "stage": "input", "kind": "not_contains", "expected": "x"}],
      "tool_checks": [{"name": "billing", "when": "The call has billing information"}]}}}}}"#;
    assert_eq!(Hold::for_version(&version(policy)), Some(Hold::Rules));
    let mut rw = chat_rewriter(policy);
    let step = rw.feed(b"data: {not json\n\n");
    assert_eq!(
        step.cut,
        Some(Cut {
            check: None,
            why: CutWhy::Unreadable
        })
    );
}

/// What a unit says, as the rewriter takes it: the event's name and JSON, each text field's
/// pointer, channel, kind and text (read from the tree when the reader did not read it), the
/// lane and the tool calls.
fn unit_as_taken(unit: &Unit) -> String {
    let texts: Vec<String> = unit
        .texts
        .iter()
        .map(|t| {
            let text = t
                .text
                .clone()
                .or_else(|| util::str_at(unit.ev.data(), &t.pointer).map(str::to_owned));
            format!("{} {} {:?} {text:?}", t.pointer, t.channel, t.kind)
        })
        .collect();
    format!(
        "{:?} {:?} {:?} {texts:?} {:?} {:?} {:?} {:?} {} {}",
        unit.ev.name,
        unit.ev.raw(),
        unit.ev.data(),
        unit.lane,
        unit.ends,
        unit.calls,
        unit.calls_done,
        unit.terminal,
        unit.asks_for_tool
    )
}

/// An event's name and its data.
type NamedEvent<'a> = (&'a str, String);

/// A text delta the template reads (Anthropic, Responses) is the unit the JSON reader makes of
/// it: the same event, texts, lane and calls; and an event of another shape is left to the JSON
/// reader.
#[test]
fn a_templated_text_delta_is_the_unit_its_json_makes() {
    let request = request(false);
    let anthropic = |index: u64, text: &str| {
        format!(
            "{{\"type\":\"content_block_delta\",\"index\":{index},\"delta\":{{\"type\":\"text_delta\",\"text\":{}}}}}",
            serde_json::to_string(text).unwrap()
        )
    };
    let responses = |seq: &str, text: &str| {
        format!(
            "{{\"type\":\"response.output_text.delta\",\"sequence_number\":{seq},\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":{},\"logprobs\":[],\"obfuscation\":\"ab\"}}",
            serde_json::to_string(text).unwrap()
        )
    };
    let anthropic_head = [
        ("message_start", "{\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[]}}".to_owned()),
        ("content_block_start", "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}".to_owned()),
        ("content_block_delta", anthropic(0, "first")),
    ];
    let responses_head = [
        ("response.output_item.added", "{\"type\":\"response.output_item.added\",\"sequence_number\":0,\"output_index\":0,\"item\":{\"id\":\"msg_1\",\"type\":\"message\",\"status\":\"in_progress\",\"role\":\"assistant\",\"content\":[]}}".to_owned()),
        ("response.output_text.delta", responses("1", "first")),
    ];
    // (the API, the events before, the event read, whether the template reads it)
    let cases: Vec<(Api, &[NamedEvent], NamedEvent, bool)> = vec![
        (
            Api::AnthropicMessages,
            &anthropic_head,
            ("content_block_delta", anthropic(0, "next words")),
            true,
        ),
        (
            Api::AnthropicMessages,
            &anthropic_head,
            ("content_block_delta", anthropic(0, "é \"q\"\n\\ \u{1F600}")),
            true,
        ),
        (
            Api::AnthropicMessages,
            &anthropic_head,
            (
                "content_block_delta",
                anthropic(0, "caf\\u00e9").replace("\\\\u", "\\u"),
            ),
            true,
        ),
        // Another index, an empty text, another name, spacing: the JSON reader's.
        (
            Api::AnthropicMessages,
            &anthropic_head,
            ("content_block_delta", anthropic(1, "x")),
            false,
        ),
        (
            Api::AnthropicMessages,
            &anthropic_head,
            ("content_block_delta", anthropic(0, "")),
            false,
        ),
        (
            Api::AnthropicMessages,
            &anthropic_head,
            ("ping", anthropic(0, "x")),
            false,
        ),
        (
            Api::AnthropicMessages,
            &anthropic_head,
            ("content_block_delta", anthropic(0, "x").replace(",", ", ")),
            false,
        ),
        (
            Api::Responses,
            &responses_head,
            ("response.output_text.delta", responses("2", "next words")),
            true,
        ),
        (
            Api::Responses,
            &responses_head,
            (
                "response.output_text.delta",
                responses("12345", "é \"q\"\n"),
            ),
            true,
        ),
        // A sequence number JSON writes otherwise, or that is not one: the JSON reader's.
        (
            Api::Responses,
            &responses_head,
            ("response.output_text.delta", responses("2.0", "x")),
            false,
        ),
        (
            Api::Responses,
            &responses_head,
            ("response.output_text.delta", responses("-2", "x")),
            false,
        ),
        (
            Api::Responses,
            &responses_head,
            (
                "response.output_text.delta",
                responses("18446744073709551616", "x"),
            ),
            false,
        ),
        (
            Api::Responses,
            &responses_head,
            (
                "response.output_text.delta",
                responses("2", "x").replace("\"ab\"", "1"),
            ),
            false,
        ),
    ];
    let format_of = |api: Api| -> Box<dyn Format> {
        match api {
            Api::AnthropicMessages => Box::new(anthropic::Anthropic::new(&request)),
            _ => Box::new(responses::Responses::new(&request)),
        }
    };
    let event = |(name, data): &(&str, String)| sse::Event {
        event: Some((*name).to_owned()),
        data: data.clone(),
    };
    for (api, head, last, templated) in cases {
        // With a template (the head's last event made it), and without (the head's last left out).
        let mut with = format_of(api);
        for e in head {
            with.read(event(e)).unwrap();
        }
        let mut without = format_of(api);
        for e in &head[..head.len() - 1] {
            without.read(event(e)).unwrap();
        }
        let (a, b) = (with.read(event(&last)), without.read(event(&last)));
        assert_eq!(a.is_ok(), b.is_ok(), "{last:?}");
        let (Ok(a), Ok(b)) = (a, b) else { continue };
        assert_eq!(unit_as_taken(&a), unit_as_taken(&b), "{last:?}");
        // Read by the template: its tree was never built.
        let read_plain = a.ev.raw().is_some() && a.texts.iter().all(|t| t.text.is_some());
        assert_eq!(read_plain && !a.texts.is_empty(), templated, "{last:?}");
    }
}

/// What an Anthropic or Responses stream's caller receives is the same, byte for byte, whether its
/// text deltas are read, written, joined and split through templates (without trees) or every
/// event is read from its JSON: held, cut and clean streams, renumbered blocks and items, fed
/// whole and at every split in two.
#[test]
fn templates_change_nothing_the_caller_receives() {
    let anthropic = |texts: &[&str]| {
        let deltas: String = texts.iter().map(|t| anthropic_delta(0, t)).collect();
        format!("{ANTHROPIC_TEXT_OPENING}{deltas}{ANTHROPIC_TEXT_CLOSING}")
    };
    let texts: [&[&str]; 4] = [
        &["Pay ", "to N", "L91ABNA0417164300", " now"],
        &["Pay ", "to NL9", "x and ", "NL91", " then ", "more"],
        &["a ", "pass", "word", " b", " c"],
        &["Hello ", "there, ", "é日本 \"q\"\n", "ok"],
    ];
    let mut streams: Vec<(Api, String)> = Vec::new();
    for t in texts {
        streams.push((Api::AnthropicMessages, anthropic(t)));
        streams.push((
            Api::AnthropicMessages,
            anthropic(t).replace("\"index\":0", "\"index\":3"),
        ));
        streams.push((Api::Responses, responses_stream_of(t, true, 0)));
        streams.push((Api::Responses, responses_stream_of(t, false, 2)));
        let late = responses_stream_of(t, true, 0)
            .replace("\"sequence_number\":", "\"sequence_number\":7");
        streams.push((Api::Responses, late));
        let logprobs = responses_stream_of(t, false, 0).replace(
            "\"logprobs\":[]",
            "\"logprobs\":[{\"token\":\"x\",\"logprob\":-0.5,\"top_logprobs\":[]}]",
        );
        streams.push((Api::Responses, logprobs));
    }
    let run_with = |api: Api, templates: bool, chunks: &[&[u8]]| {
        let mut rw = Rewriter::new(api, version(POLICY), &request(false), Hold::Rules, 1 << 20);
        if !templates {
            rw.format.without_templates();
        }
        feed_all(&mut rw, chunks)
    };
    for (api, stream) in &streams {
        let stream = stream.as_bytes();
        for i in (0..=stream.len()).step_by(17).chain([stream.len()]) {
            let (a, b) = stream.split_at(i);
            let with = run_with(*api, true, &[a, b]);
            assert!(
                with == run_with(*api, false, &[a, b]),
                "{api:?} split at {i}: {}",
                String::from_utf8_lossy(stream)
            );
        }
        let events = per_event(std::str::from_utf8(stream).unwrap());
        assert!(run_with(*api, true, &events) == run_with(*api, false, &events));
    }
}

/// A text written into an event's JSON is the literal serde_json writes for it, whatever its
/// characters (the short way writes most texts between quotes as they are).
#[test]
fn a_spliced_text_is_the_literal_serde_json_writes() {
    let texts = (0u32..0x80)
        .filter_map(char::from_u32)
        .map(|c| format!("a{c}b"))
        .chain(
            [
                "",
                "é日本",
                "\u{2028}\u{2029}",
                "\u{7f}\u{80}",
                "😀 \"q\" \\ /",
            ]
            .map(String::from),
        );
    for text in texts {
        let mut literal = String::new();
        super::event::push_literal(&mut literal, &text).unwrap();
        assert_eq!(literal, serde_json::to_string(&text).unwrap(), "{text:?}");
    }
}

/// What a caller reads of a stream fed in chunks of `size` under `limit` (sorted and each event
/// once outside `Hold::Rules`: events beside a held answer run ahead of it as far as the chunks let
/// them), the cut, and whether the round went on unjudged.
type Outcome = (
    (Option<String>, Vec<(Option<String>, String)>),
    Option<Cut>,
    bool,
);

fn limited_outcome(
    api: Api,
    version: &Rc<Version>,
    hold: Hold,
    body: &[u8],
    size: usize,
    limit: usize,
) -> Outcome {
    let done = caller::rewrite(api, hold, version, body, size, limit);
    let mut read = caller::read_by_caller(api, &done.out);
    if hold != Hold::Rules {
        read.1.sort();
        // A round gone on unjudged streams under the rules from where the limit fell: its text
        // divided among events as the chunks fell, between pings that ran ahead.
        read.1.dedup();
    }
    (read, done.cut, done.unjudged)
}

/// The limit on what is held whole is met at the same event however the upstream was split: a
/// match before it is found and cut as a match, the events before it are read (a round's id, the
/// text before a tool call), and what the caller reads is what one whole chunk gives, at every
/// limit from the first event to past the end.
#[test]
fn what_is_held_whole_meets_its_limit_at_the_same_event_however_the_upstream_is_split() {
    let pass_on_error = POLICY_JUDGED.replace(
        r#""kind": "polite_tone"}"#,
        r#""kind": "polite_tone", "on_error": "pass"}"#,
    );
    let versions = [
        (version(POLICY_JUDGED), Hold::WholeText),
        (version(&pass_on_error), Hold::WholeText),
        (version(POLICY_JUDGED), Hold::Everything),
    ];
    let deltas: Vec<String> = (0..12)
        .map(|i| format!("word{i} "))
        .chain(["NL91ABNA0417164300 ".to_owned()])
        .chain((12..18).map(|i| format!("word{i} ")))
        .collect();
    let mut cases: Vec<(Api, Rc<Version>, Hold, Vec<u8>)> = Vec::new();
    for api in [Api::AnthropicMessages, Api::ChatCompletions, Api::Responses] {
        let body = caller::upstream(api, &deltas);
        for (version, hold) in &versions {
            cases.push((api, Rc::clone(version), *hold, body.clone()));
        }
    }
    // A tool call held until complete, text streaming before it; CRLF line ends too.
    let long_call = CHAT_TOOL_CALL.replacen(
        r#""{\"to\": "}"#,
        r#""{\"to\": \"lorem ipsum dolor sit amet\", \"n\": "}"#,
        1,
    );
    for stream in [CHAT_TOOL_CALL.to_owned(), long_call.replace('\n', "\r\n")] {
        cases.push((
            Api::ChatCompletions,
            version(POLICY),
            Hold::Rules,
            stream.into_bytes(),
        ));
    }
    cases.push((
        Api::Responses,
        version(POLICY),
        Hold::Rules,
        RESPONSES_TOOL_CALL.as_bytes().to_vec(),
    ));
    let mut limited = 0;
    for (api, version, hold, body) in &cases {
        for limit in (40..body.len() + 40).step_by(47) {
            let whole = limited_outcome(*api, version, *hold, body, body.len(), limit);
            limited += usize::from(whole.1.is_some_and(|c| c.why == CutWhy::Unreadable) || whole.2);
            for size in [1, 7, 64, 301] {
                let split = limited_outcome(*api, version, *hold, body, size, limit);
                assert_eq!(
                    split, whole,
                    "{api:?} {hold:?}, limit {limit}, chunks of {size}"
                );
            }
        }
    }
    assert!(limited > 100, "the limit was met in {limited} cases");
}

/// Legacy completion chunks of text alone on the short path are sent as the general path sends
/// them, however the body is split, held, cut or clean.
#[test]
fn a_completion_chunk_on_the_short_path_is_sent_as_the_general_path_sends_it() {
    let chunk = |text: &str| {
        format!(
            "data: {{\"id\":\"cmpl-9\",\"object\":\"text_completion\",\"created\":1,\
             \"choices\":[{{\"text\":{},\"index\":0,\"logprobs\":null,\"finish_reason\":null}}],\
             \"model\":\"m\"}}\n\n",
            serde_json::to_string(text).unwrap()
        )
    };
    let tail = "data: {\"id\":\"cmpl-9\",\"object\":\"text_completion\",\"created\":1,\"choices\":[{\"text\":\"\",\"index\":0,\"logprobs\":null,\"finish_reason\":\"stop\"}],\"model\":\"m\"}\n\ndata: [DONE]\n\n";
    let stream_of = |texts: &[&str]| {
        let texts: String = texts.iter().map(|t| chunk(t)).collect();
        format!("{}{texts}{tail}", chunk("Well, "))
    };
    short_path_sends_what_the_general_path_sends(Api::Completions, 0, &stream_of);
}
