#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::rc::Rc;

use serde_json::{json, Value};

use crate::api::{
    answer_usage, as_stream, parse_answer, parse_request, refusal, stream_usage, with_usage,
    withheld, Api, Ids, Request, Usage,
};
use crate::config::{Policy, Version};
use crate::stream::{answer_of, caller, Hold, Rewriter};

const API: Api = Api::Completions;
const REPLY: &str = "I cannot help with that.";

fn request(body: Value) -> Result<Request, String> {
    parse_request(API, body.to_string().as_bytes()).map_err(|e| e.message().to_owned())
}

fn ids() -> Ids {
    Ids {
        token: "0123abcd".into(),
        created: 1_760_000_000,
    }
}

fn asked(stream: bool, include_usage: bool) -> Request {
    Request {
        stream,
        include_usage,
        model: Some("gpt-3.5-turbo-instruct".into()),
        ..Request::default()
    }
}

/// The data of each SSE event of `bytes`, `[DONE]` as a string.
fn events(bytes: &[u8]) -> Vec<Value> {
    let text = std::str::from_utf8(bytes).unwrap();
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    text.split_terminator("\n\n")
        .map(|e| {
            let data = e.strip_prefix("data: ").unwrap();
            serde_json::from_str(data).unwrap_or_else(|_| json!(data))
        })
        .collect()
}

#[test]
fn a_prompt_and_its_suffix_are_the_callers_text_each_prompt_a_user_message() {
    let one = request(json!({"model": "m", "prompt": "Say password", "suffix": "end."})).unwrap();
    assert_eq!(one.input_text, "Say password\nend.");
    assert_eq!(one.intent(), ["Say password"]);
    assert_eq!(one.model.as_deref(), Some("m"));
    assert!(!one.stream);
    let many = request(json!({"prompt": ["first", "", "second"], "stream": true,
                              "stream_options": {"include_usage": true}}))
    .unwrap();
    assert_eq!(many.input_text, "first\nsecond");
    assert_eq!(many.intent(), ["first", "second"]);
    assert!(many.stream && many.include_usage);
}

#[test]
fn token_prompts_and_unreadable_fields_are_refused_by_name() {
    let cases = [
        (
            json!({}),
            "prompt must be a string or an array of strings (token ids cannot be checked)",
        ),
        (
            json!({"prompt": null}),
            "prompt must be a string or an array of strings",
        ),
        (
            json!({"prompt": [1212, 318]}),
            "prompt[0] must be a string (token ids cannot be checked)",
        ),
        (
            json!({"prompt": ["a", [1212, 318]]}),
            "prompt[1] must be a string",
        ),
        (
            json!({"prompt": [[1212], [318]]}),
            "prompt[0] must be a string",
        ),
        (
            json!({"prompt": "a", "suffix": 7}),
            "suffix must be a string",
        ),
        (
            json!({"prompt": "a", "stream": "yes"}),
            "stream must be a boolean",
        ),
        (
            json!({"prompt": "a", "stream_options": {"include_usage": 1}}),
            "stream_options.include_usage must be a boolean",
        ),
        (json!({"prompt": "a", "model": 4}), "model must be a string"),
    ];
    for (body, says) in cases {
        let error = request(body.clone()).unwrap_err();
        assert!(error.starts_with(says), "{body}: {error}");
    }
    let twice = br#"{"prompt": "hello", "prompt": "password"}"#;
    assert!(parse_request(API, twice).is_err());
}

#[test]
fn the_answer_is_every_choices_text() {
    let body = json!({"id": "cmpl-1", "object": "text_completion", "choices": [
        {"text": "Hello ", "index": 0, "logprobs": null, "finish_reason": "stop"},
        {"text": "world", "index": 1, "logprobs": null, "finish_reason": "length"}]});
    let answer = parse_answer(API, body.to_string().as_bytes(), true).unwrap();
    assert_eq!(answer.text, "Hello world");
    assert_eq!(answer.rule_text.as_deref(), Some("Hello world"));
    assert_eq!(answer.id.as_deref(), Some("cmpl-1"));
    assert!(!answer.asks_for_tool && answer.calls.is_empty());
    let bad = json!({"choices": [{"text": 7}]});
    let error = parse_answer(API, bad.to_string().as_bytes(), false).unwrap_err();
    assert_eq!(error.message(), "choices[0].text must be a string");
    assert!(parse_answer(API, b"{\"choices\": {}}", false).is_err());
}

#[test]
fn a_refusal_is_the_whole_answer_ended_by_the_content_filter() {
    let reply = refusal(API, REPLY, &asked(false, false), &ids());
    assert_eq!(reply.content_type, "application/json");
    let body: Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(
        body,
        json!({"id": "cmpl-0123abcd", "object": "text_completion", "created": 1_760_000_000,
               "model": "gpt-3.5-turbo-instruct",
               "choices": [{"text": REPLY, "index": 0, "logprobs": null,
                            "finish_reason": "content_filter"}],
               "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}})
    );
}

#[test]
fn a_streamed_refusal_is_chunks_then_usage_then_done() {
    let reply = refusal(API, REPLY, &asked(true, true), &ids());
    assert_eq!(reply.content_type, "text/event-stream");
    let chunks = events(&reply.body);
    assert_eq!(chunks.len(), 4);
    assert_eq!(chunks[0]["object"], "text_completion");
    assert_eq!(chunks[0]["choices"][0]["text"], REPLY);
    assert_eq!(chunks[0]["choices"][0]["finish_reason"], Value::Null);
    assert_eq!(chunks[0]["usage"], Value::Null);
    assert_eq!(chunks[1]["choices"][0]["finish_reason"], "content_filter");
    assert_eq!(chunks[2]["choices"], json!([]));
    assert_eq!(chunks[2]["usage"]["total_tokens"], 0);
    assert_eq!(chunks[3], "[DONE]");
    let decoded = caller::decode(API, &reply.body).unwrap();
    assert_eq!(decoded.text, REPLY);
    // Without include_usage: no usage anywhere.
    let reply = refusal(API, REPLY, &asked(true, false), &ids());
    let chunks = events(&reply.body);
    assert_eq!(chunks.len(), 3);
    assert!(chunks[0].get("usage").is_none());
}

#[test]
fn a_withheld_answer_keeps_its_id_model_and_usage_and_says_the_reply_in_every_choice() {
    let body = json!({"id": "cmpl-9", "object": "text_completion", "created": 5, "model": "m",
        "choices": [
            {"text": "the password is", "index": 0, "logprobs": {"tokens": ["the"]},
             "finish_reason": "stop"},
            {"text": "hunter2", "index": 1, "logprobs": null, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}});
    let out: Value =
        serde_json::from_slice(&withheld(API, body.to_string().as_bytes(), REPLY).unwrap())
            .unwrap();
    assert_eq!(out["id"], "cmpl-9");
    assert_eq!(out["model"], "m");
    assert_eq!(out["usage"], body["usage"]);
    for (i, choice) in out["choices"].as_array().unwrap().iter().enumerate() {
        assert_eq!(
            choice,
            &json!({"text": REPLY, "index": i, "logprobs": null,
                    "finish_reason": "content_filter"})
        );
    }
    assert!(!out.to_string().contains("password") && !out.to_string().contains("hunter2"));
    assert!(withheld(API, b"{\"choices\": 1}", REPLY).is_err());
}

#[test]
fn usage_is_read_and_rewritten_in_prompt_and_completion_tokens() {
    let body = json!({"id": "cmpl-1", "choices": [{"text": "Hi", "index": 0,
        "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}});
    let bytes = body.to_string();
    let read = answer_usage(API, bytes.as_bytes()).unwrap();
    assert_eq!((read.input_tokens, read.output_tokens), (3, 4));
    let total = Usage {
        input_tokens: 10,
        output_tokens: 20,
        ..Usage::default()
    };
    let summed: Value =
        serde_json::from_slice(&with_usage(API, bytes.as_bytes(), &total).unwrap()).unwrap();
    assert_eq!(
        summed["usage"],
        json!({"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30})
    );
    let streamed = as_stream(
        API,
        &serde_json::to_vec(&summed).unwrap(),
        &asked(true, true),
    )
    .unwrap();
    let read = stream_usage(API, &streamed).unwrap();
    assert_eq!((read.input_tokens, read.output_tokens), (10, 20));
}

fn version(policy_checks: &str) -> Rc<Version> {
    let policy = format!(
        r#"{{"default_agent": "a", "agents": {{"a": {{"published": "1", "versions": {{"1":
        {{"live_checks": [{policy_checks}]}}}}}}}}}}"#
    );
    Policy::from_json(policy.as_bytes())
        .unwrap()
        .select(None, None, None)
        .unwrap()
}

const NO_PASSWORD: &str =
    r#"{"name": "no-pw", "stage": "output", "kind": "not_contains", "expected": "password"}"#;

#[test]
fn a_recovered_answer_streams_as_chunks_the_rewriter_reads_back() {
    let body = json!({"id": "cmpl-7", "object": "text_completion", "created": 5, "model": "m",
        "choices": [{"text": "Hello there", "index": 0, "logprobs": null,
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}});
    let streamed = as_stream(API, body.to_string().as_bytes(), &asked(true, false)).unwrap();
    let chunks = events(&streamed);
    assert_eq!(chunks.len(), 3);
    assert_eq!(chunks[0]["id"], "cmpl-7");
    assert_eq!(chunks[1]["choices"][0]["finish_reason"], "stop");
    let request = asked(true, false);
    let text = answer_of(API, &version(NO_PASSWORD), &request, &streamed);
    assert_eq!(text.as_deref(), Some("Hello there"));
}

/// `deltas` through the rewriter in chunks of `size` bytes, holding only what rules need.
fn rewrite(deltas: &[&str], size: usize, include_usage: bool) -> (Vec<u8>, bool) {
    let deltas: Vec<String> = deltas.iter().map(|d| (*d).to_owned()).collect();
    let mut upstream = caller::upstream(API, &deltas);
    if include_usage {
        // The usage chunk goes before [DONE].
        let done = upstream.len() - b"data: [DONE]\n\n".len();
        let usage = "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\
            \"choices\":[],\"model\":\"m\",\"usage\":{\"prompt_tokens\":5,\
            \"completion_tokens\":9,\"total_tokens\":14}}\n\n";
        upstream.splice(done..done, usage.bytes());
    }
    let request = asked(true, include_usage);
    let mut rw = Rewriter::new(API, version(NO_PASSWORD), &request, Hold::Rules, 1 << 20);
    let mut out = Vec::new();
    let mut cut = false;
    for chunk in upstream.chunks(size) {
        let step = rw.feed(chunk);
        cut |= step.cut.is_some();
        out.extend(step.out);
    }
    let step = rw.finish();
    cut |= step.cut.is_some();
    out.extend(step.out);
    (out, cut)
}

#[test]
fn a_clean_stream_passes_whole_however_it_is_split() {
    let deltas = ["Hello", ", pass", "port ", "ok"];
    for size in [1, 7, 64, 4096] {
        let (out, cut) = rewrite(&deltas, size, true);
        assert!(!cut);
        assert_eq!(
            caller::decode(API, &out).unwrap().text,
            "Hello, passport ok"
        );
        let chunks = events(&out);
        assert_eq!(chunks[chunks.len() - 2]["usage"]["total_tokens"], 14);
    }
}

#[test]
fn a_stream_is_cut_at_the_matchs_first_character_and_closed_as_filtered() {
    let deltas = ["Your pa", "ss", "word is hunter2", " and more"];
    for size in [1, 3, 11, 4096] {
        for include_usage in [false, true] {
            let (out, cut) = rewrite(&deltas, size, include_usage);
            assert!(cut);
            assert_eq!(caller::decode(API, &out).unwrap().text, "Your ");
            let chunks = events(&out);
            let last = if include_usage { 3 } else { 2 };
            let ended = &chunks[chunks.len() - last];
            assert_eq!(ended["choices"][0]["finish_reason"], "content_filter");
            assert_eq!(ended["object"], "text_completion");
            if include_usage {
                assert_eq!(chunks[chunks.len() - 2]["choices"], json!([]));
                assert!(chunks[chunks.len() - 2]["usage"]["completion_tokens"].is_u64());
            }
        }
    }
}

#[test]
fn a_text_that_is_not_a_string_cuts_the_stream() {
    let request = asked(true, false);
    let mut rw = Rewriter::new(API, version(NO_PASSWORD), &request, Hold::Rules, 1 << 20);
    let step = rw.feed(b"data: {\"id\":\"cmpl-1\",\"choices\":[{\"text\":7,\"index\":0}]}\n\n");
    assert!(step.cut.is_some());
    assert!(!String::from_utf8_lossy(&step.out).contains('7'));
}

#[test]
fn a_chunk_of_the_last_ones_shape_is_read_without_its_tree_as_the_tree_reads_it() {
    use crate::sse;
    use crate::stream::format::Format;
    let first = r#"{"id":"cmpl-1","object":"text_completion","created":1,"choices":[{"text":"Hel","index":0,"logprobs":null,"finish_reason":null}],"model":"m"}"#;
    let event = |data: &str| sse::Event {
        event: None,
        data: data.to_owned(),
    };
    let same_shape = first.replace(r#""Hel""#, r#""lo, w\"orld é\n""#);
    let other = [
        first.replace(r#""finish_reason":null"#, r#""finish_reason":"stop""#),
        first.replace(r#""logprobs":null"#, r#""logprobs":{"tokens":["a"]}"#),
        first.replace(r#""text":"Hel""#, r#""text":"""#),
        first.replace("cmpl-1", "cmpl-2"),
    ];
    let mut with = super::stream::Completions::new(&Request::default());
    with.read(event(first)).unwrap();
    let unit = with.read(event(&same_shape)).unwrap();
    assert_eq!(
        unit.ev.join_id(),
        Some(r#""cmpl-1""#),
        "read by the template"
    );
    assert_eq!(unit.texts[0].text.as_deref(), Some("lo, w\"orld é\n"));
    for next in &other {
        let mut reader = super::stream::Completions::new(&Request::default());
        reader.read(event(first)).unwrap();
        let unit = reader.read(event(next)).unwrap();
        assert_eq!(unit.ev.join_id(), None, "read as a tree: {next}");
    }
}

#[test]
fn a_held_round_cut_says_the_blocked_reply_then_ends_as_filtered() {
    let deltas: Vec<String> = ["Your pa", "ssword is ", "hunter2"]
        .iter()
        .map(|d| (*d).to_owned())
        .collect();
    let upstream = caller::upstream(API, &deltas);
    let version = version(NO_PASSWORD);
    for hold in [Hold::WholeText, Hold::Everything] {
        let request = asked(true, true);
        let mut rw = Rewriter::new(API, Rc::clone(&version), &request, hold, 1 << 20);
        let mut out = rw.feed(&upstream).out;
        let mut step = rw.finish();
        out.append(&mut step.out);
        out.extend(rw.cut(0));
        let text = caller::decode(API, &out).unwrap().text;
        assert_eq!(text, version.blocked_reply, "{hold:?}");
        let chunks = events(&out);
        let n = chunks.len();
        assert_eq!(
            chunks[n - 3]["choices"][0]["finish_reason"],
            "content_filter"
        );
        assert_eq!(chunks[n - 2]["choices"], json!([]));
        assert!(!String::from_utf8_lossy(&out).contains("hunter2"));
    }
}
