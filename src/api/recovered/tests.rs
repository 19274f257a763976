use std::rc::Rc;

use serde_json::{json, Map, Value};

use super::*;
use crate::config::{Policy, Version};

const POLICY: &str = r#"{"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {
  "blocked_reply": "Sorry.",
  "live_checks": [{"name": "no-passwords", "stage": "output", "kind": "not_contains",
                   "expected": "password", "recover": true}]}}}}}"#;

const ANTHROPIC: &str = r#"{
  "id": "msg_01Retry", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
  "content": [
    {"type": "thinking", "thinking": "Say no politely.", "signature": "c2ln"},
    {"type": "redacted_thinking", "data": "ZW5j"},
    {"type": "text", "text": "I'm not allowed to do that. "},
    {"type": "text", "text": "Ask me something else, 日本 😀.",
     "citations": [{"type": "char_location", "cited_text": "x", "document_index": 0,
                    "document_title": null, "start_char_index": 0, "end_char_index": 1}]}
  ],
  "stop_reason": "end_turn", "stop_sequence": null,
  "usage": {"input_tokens": 40, "cache_creation_input_tokens": 5, "cache_read_input_tokens": 100,
            "output_tokens": 12, "service_tier": "standard"}
}"#;

const CHAT: &str = r#"{
  "id": "chatcmpl-Retry", "object": "chat.completion", "created": 1760000000,
  "model": "gpt-4.1-mini-2025-04-14", "system_fingerprint": "fp_1", "service_tier": "default",
  "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "I'm not allowed to do that.",
                              "refusal": null, "annotations": []},
     "logprobs": null, "finish_reason": "stop"},
    {"index": 1, "message": {"role": "assistant", "content": " Nor that, 日本 😀.",
                              "refusal": null, "annotations": []},
     "logprobs": {"content": [{"token": " Nor", "logprob": -0.1, "bytes": [32], "top_logprobs": []}],
                  "refusal": null},
     "finish_reason": "length"}
  ],
  "usage": {"prompt_tokens": 30, "completion_tokens": 9, "total_tokens": 39,
            "prompt_tokens_details": {"cached_tokens": 10, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 2, "audio_tokens": 0}}
}"#;

const RESPONSES: &str = r#"{
  "id": "resp_Retry", "object": "response", "created_at": 1760000000, "status": "completed",
  "error": null, "incomplete_details": null, "instructions": "Be kind.",
  "model": "gpt-4.1-2025-04-14",
  "output": [
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Decline."}]},
    {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant", "content": [
      {"type": "output_text", "text": "I'm not allowed ", "annotations": [], "logprobs": []},
      {"type": "refusal", "refusal": "no"},
      {"type": "output_text", "text": "to do that, 日本 😀.", "annotations": [], "logprobs": []}
    ]}
  ],
  "parallel_tool_calls": true, "store": false, "tool_choice": "none", "tools": [],
  "usage": {"input_tokens": 36, "input_tokens_details": {"cached_tokens": 6},
            "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 8},
            "total_tokens": 56},
  "output_text": "I'm not allowed to do that, 日本 😀."
}"#;

const ALL: [(Api, &str); 3] = [
    (Api::AnthropicMessages, ANTHROPIC),
    (Api::ChatCompletions, CHAT),
    (Api::Responses, RESPONSES),
];

fn version() -> Rc<Version> {
    Policy::from_json(POLICY.as_bytes())
        .unwrap()
        .select(None, None, None)
        .unwrap()
}

fn request(include_usage: bool) -> Request {
    Request {
        stream: true,
        include_usage,
        model: Some("asked-model".into()),
        ..Request::default()
    }
}

fn object(text: &[u8]) -> Map<String, Value> {
    match serde_json::from_slice(text).unwrap() {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

/// The events of a stream, as `(event: line, data)`; `[DONE]` is data `null`.
fn events(bytes: &[u8]) -> Vec<(Option<String>, Value)> {
    let text = std::str::from_utf8(bytes).unwrap();
    assert!(text.ends_with("\n\n"), "a stream ends with a blank line");
    let mut decoder = sse::Decoder::new(bytes.len());
    let mut out = Vec::new();
    decoder.push(bytes, &mut out).unwrap();
    decoder.finish(&mut out).unwrap();
    out.into_iter()
        .map(|e| {
            let data = if e.data == "[DONE]" {
                Value::Null
            } else {
                serde_json::from_str(&e.data).unwrap()
            };
            (e.event, data)
        })
        .collect()
}

fn types(events: &[(Option<String>, Value)]) -> Vec<&str> {
    events
        .iter()
        .map(|(_, d)| d.get("type").and_then(Value::as_str).unwrap_or("-"))
        .collect()
}

/// What the filter's own stream reader makes of a stream: the answer text.
fn read_back(api: Api, bytes: &[u8], include_usage: bool) -> Option<String> {
    crate::stream::answer_of(api, &version(), &request(include_usage), bytes)
}

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    }
}

#[test]
fn each_vendors_answer_usage_is_read_with_its_details() {
    assert_eq!(
        answer_usage(Api::AnthropicMessages, ANTHROPIC.as_bytes()),
        Some(Usage {
            input_tokens: 40,
            output_tokens: 12,
            cache_read_tokens: 100,
            cache_creation_tokens: 5,
            reasoning_tokens: 0,
        })
    );
    assert_eq!(
        answer_usage(Api::ChatCompletions, CHAT.as_bytes()),
        Some(Usage {
            input_tokens: 30,
            output_tokens: 9,
            cache_read_tokens: 10,
            cache_creation_tokens: 0,
            reasoning_tokens: 2,
        })
    );
    assert_eq!(
        answer_usage(Api::Responses, RESPONSES.as_bytes()),
        Some(Usage {
            input_tokens: 36,
            output_tokens: 20,
            cache_read_tokens: 6,
            cache_creation_tokens: 0,
            reasoning_tokens: 8,
        })
    );
}

#[test]
fn an_answer_without_usable_usage_has_none() {
    for (api, body) in [
        (Api::AnthropicMessages, r#"{"content": []}"#),
        (Api::AnthropicMessages, r#"{"usage": {"input_tokens": 3}}"#),
        (Api::ChatCompletions, r#"{"usage": null}"#),
        (
            Api::Responses,
            r#"{"usage": {"input_tokens": -1, "output_tokens": 2}}"#,
        ),
        (Api::Responses, "not json"),
        (Api::Responses, "[1]"),
    ] {
        assert_eq!(answer_usage(api, body.as_bytes()), None, "{body}");
    }
}

#[test]
fn usages_add_up_field_by_field_without_overflow() {
    let mut total = Usage {
        input_tokens: 1,
        output_tokens: 2,
        cache_read_tokens: 3,
        cache_creation_tokens: 4,
        reasoning_tokens: 5,
    };
    total.add(&Usage {
        input_tokens: 10,
        output_tokens: u64::MAX,
        cache_read_tokens: 30,
        cache_creation_tokens: 40,
        reasoning_tokens: 50,
    });
    assert_eq!(
        total,
        Usage {
            input_tokens: 11,
            output_tokens: u64::MAX,
            cache_read_tokens: 33,
            cache_creation_tokens: 44,
            reasoning_tokens: 55,
        }
    );
}

#[test]
fn with_usage_replaces_the_usage_and_nothing_else() {
    for (api, body) in ALL {
        let mut total = answer_usage(api, body.as_bytes()).unwrap();
        total.add(&Usage {
            input_tokens: 100,
            output_tokens: 7,
            cache_read_tokens: 1,
            cache_creation_tokens: 1,
            reasoning_tokens: 1,
        });
        let out = with_usage(api, body.as_bytes(), &total).unwrap();
        assert_eq!(
            answer_usage(api, &out),
            Some(total_for(api, total)),
            "{api:?}"
        );
        let (mut before, mut after) = (object(body.as_bytes()), object(&out));
        let (old, new) = (
            before.remove("usage").unwrap(),
            after.remove("usage").unwrap(),
        );
        assert_eq!(before, after, "{api:?}: only the usage changes");
        // Fields the filter does not count stay as they were.
        match api {
            Api::AnthropicMessages => {
                assert_eq!(new["service_tier"], old["service_tier"]);
            }
            Api::ChatCompletions => {
                assert_eq!(new["total_tokens"], json!(39 + 107));
                assert_eq!(new["prompt_tokens_details"]["audio_tokens"], json!(0));
            }
            Api::Responses => assert_eq!(new["total_tokens"], json!(56 + 107)),
            other => unreachable!("{other:?} is not among these tests' APIs"),
        }
    }
}

/// `total` as the vendor can state it: OpenAI has no cache creation count.
fn total_for(api: Api, mut total: Usage) -> Usage {
    match api {
        Api::AnthropicMessages => total.reasoning_tokens = 0,
        Api::ChatCompletions | Api::Responses => total.cache_creation_tokens = 0,
        other => unreachable!("{other:?} is not among these tests' APIs"),
    }
    total
}

#[test]
fn with_usage_adds_detail_counts_only_when_they_count() {
    let bare = br#"{"id": "x", "usage": {"prompt_tokens": 1, "completion_tokens": 1}}"#;
    let out = with_usage(Api::ChatCompletions, bare, &usage(5, 6)).unwrap();
    assert_eq!(
        object(&out)["usage"],
        json!({"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11})
    );
    let total = Usage {
        reasoning_tokens: 3,
        ..usage(5, 6)
    };
    let out = with_usage(Api::Responses, br#"{"usage": null}"#, &total).unwrap();
    assert_eq!(
        object(&out)["usage"],
        json!({"input_tokens": 5, "output_tokens": 6, "total_tokens": 11,
               "output_tokens_details": {"reasoning_tokens": 3}})
    );
    let out = with_usage(Api::AnthropicMessages, br#"{"content": []}"#, &usage(2, 3)).unwrap();
    assert_eq!(
        object(&out)["usage"],
        json!({"input_tokens": 2, "output_tokens": 3})
    );
    assert!(with_usage(Api::Responses, br#"{"usage": 3}"#, &total).is_err());
    assert!(with_usage(
        Api::Responses,
        br#"{"usage": {"output_tokens_details": 3}}"#,
        &total
    )
    .is_err());
    assert!(with_usage(Api::ChatCompletions, b"nope", &total).is_err());
}

#[test]
fn each_vendors_stream_usage_is_read() {
    let anthropic = br#"event: message_start
data: {"type":"message_start","message":{"id":"msg_1","content":[],"usage":{"input_tokens":12,"cache_read_input_tokens":4,"output_tokens":1}}}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":20}}

event: message_delta
data: {"type":"message_delta","delta":{},"usage":{"output_tokens":25,"cache_read_input_tokens":null,"input_tokens":13}}

event: message_stop
data: {"type":"message_stop"}

"#;
    assert_eq!(
        stream_usage(Api::AnthropicMessages, anthropic),
        Some(Usage {
            cache_read_tokens: 4,
            ..usage(13, 25)
        })
    );
    let chat = br#"data: {"id":"c","choices":[{"index":0,"delta":{"content":"Hi"}}],"usage":null}

data: {"id":"c","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9}}

data: [DONE]

"#;
    assert_eq!(stream_usage(Api::ChatCompletions, chat), Some(usage(7, 2)));
    let without = b"data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: [DONE]\n\n";
    assert_eq!(stream_usage(Api::ChatCompletions, without), None);
    let responses = br#"event: response.created
data: {"type":"response.created","response":{"id":"r","usage":null},"sequence_number":0}

event: response.incomplete
data: {"type":"response.incomplete","response":{"id":"r","usage":{"input_tokens":3,"output_tokens":4,"total_tokens":7}},"sequence_number":1}

"#;
    assert_eq!(stream_usage(Api::Responses, responses), Some(usage(3, 4)));
    assert_eq!(stream_usage(Api::Responses, b"\xff\n\n"), None);
}

#[test]
fn every_recovered_stream_states_the_usage_it_was_given() {
    for (api, body) in ALL {
        let total = answer_usage(api, body.as_bytes()).unwrap();
        let stream = as_stream(api, body.as_bytes(), &request(true)).unwrap();
        assert_eq!(stream_usage(api, &stream), Some(total), "{api:?}");
    }
}

#[test]
fn anthropic_stream_is_the_documented_event_sequence() {
    let stream = as_stream(
        Api::AnthropicMessages,
        ANTHROPIC.as_bytes(),
        &request(false),
    )
    .unwrap();
    let events = events(&stream);
    assert_eq!(
        types(&events),
        [
            "message_start",
            "content_block_start", // thinking
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "content_block_start", // redacted_thinking, whole
            "content_block_stop",
            "content_block_start", // text
            "content_block_delta",
            "content_block_stop",
            "content_block_start", // text with a citation
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
    );
    for (name, data) in &events {
        assert_eq!(
            name.as_deref(),
            data["type"].as_str(),
            "each event names itself"
        );
    }
    let start = &events[0].1["message"];
    assert_eq!(start["content"], json!([]));
    assert_eq!(start["stop_reason"], Value::Null);
    assert_eq!(start["usage"]["output_tokens"], json!(0));
    assert_eq!(start["usage"]["input_tokens"], json!(40));
    assert_eq!(
        read_back(Api::AnthropicMessages, &stream, false).as_deref(),
        Some("I'm not allowed to do that. Ask me something else, 日本 😀.")
    );
    assert_eq!(
        Value::Object(accumulate_anthropic(&events)),
        serde_json::from_str::<Value>(ANTHROPIC).unwrap(),
        "the SDK's accumulation gives back the answer"
    );
}

/// The Anthropic SDK's accumulation (`anthropic.lib.streaming`): blocks from their start,
/// deltas appended, the message delta's stop reason and usage copied on.
fn accumulate_anthropic(events: &[(Option<String>, Value)]) -> Map<String, Value> {
    let mut message = Map::new();
    let mut json_bufs: Vec<String> = Vec::new();
    for (_, event) in events {
        match event["type"].as_str().unwrap() {
            "message_start" => message = event["message"].as_object().unwrap().clone(),
            "content_block_start" => {
                let content = message["content"].as_array_mut().unwrap();
                assert_eq!(event["index"], json!(content.len()));
                content.push(event["content_block"].clone());
                json_bufs.push(String::new());
            }
            "content_block_delta" => {
                let i = event["index"].as_u64().unwrap() as usize;
                let block = &mut message["content"][i];
                let delta = &event["delta"];
                let append = |block: &mut Value, key: &str, more: &Value| {
                    let s = format!("{}{}", block[key].as_str().unwrap(), more.as_str().unwrap());
                    block[key] = json!(s);
                };
                match delta["type"].as_str().unwrap() {
                    "text_delta" => append(block, "text", &delta["text"]),
                    "thinking_delta" => append(block, "thinking", &delta["thinking"]),
                    "signature_delta" => block["signature"] = delta["signature"].clone(),
                    "citations_delta" => {
                        let citations = block
                            .as_object_mut()
                            .unwrap()
                            .entry("citations")
                            .or_insert(json!([]));
                        citations
                            .as_array_mut()
                            .unwrap()
                            .push(delta["citation"].clone());
                    }
                    "input_json_delta" => {
                        json_bufs[i].push_str(delta["partial_json"].as_str().unwrap());
                        block["input"] = serde_json::from_str(&json_bufs[i]).unwrap();
                    }
                    other => panic!("unexpected delta {other}"),
                }
            }
            "content_block_stop" => {}
            "message_delta" => {
                for key in ["stop_reason", "stop_sequence"] {
                    message.insert(key.into(), event["delta"][key].clone());
                }
                let usage = message["usage"].as_object_mut().unwrap();
                for (key, value) in event["usage"].as_object().unwrap() {
                    if !value.is_null() {
                        usage.insert(key.clone(), value.clone());
                    }
                }
            }
            "message_stop" => {}
            other => panic!("unexpected event {other}"),
        }
    }
    message
}

#[test]
fn anthropic_tool_use_input_arrives_as_json_deltas() {
    let body = br#"{"id": "msg_t", "type": "message", "role": "assistant", "model": "m",
      "content": [{"type": "tool_use", "id": "toolu_1", "name": "pay",
                   "input": {"to": "Ada", "amount": 12}},
                  {"type": "tool_use", "id": "toolu_2", "name": "noop", "input": {}}],
      "stop_reason": "tool_use", "stop_sequence": null,
      "usage": {"input_tokens": 1, "output_tokens": 2}}"#;
    let stream = as_stream(Api::AnthropicMessages, body, &request(false)).unwrap();
    let events = events(&stream);
    assert_eq!(events[1].1["content_block"]["input"], json!({}));
    assert_eq!(events[2].1["delta"]["type"], json!("input_json_delta"));
    assert_eq!(
        Value::Object(accumulate_anthropic(&events)),
        serde_json::from_slice::<Value>(body).unwrap()
    );
}

#[test]
fn chat_stream_is_chunks_then_usage_then_done() {
    for include_usage in [false, true] {
        let stream = as_stream(
            Api::ChatCompletions,
            CHAT.as_bytes(),
            &request(include_usage),
        )
        .unwrap();
        let events = events(&stream);
        assert!(stream.ends_with(b"data: [DONE]\n\n"));
        assert_eq!(events.last().unwrap().1, Value::Null);
        let named = &events[..events.len() - 1];
        let chunks: Vec<&Value> = named.iter().map(|(_, c)| c).collect();
        for (name, chunk) in named {
            assert_eq!(*name, None, "chat chunks have no event line");
            assert_eq!(chunk["id"], json!("chatcmpl-Retry"));
            assert_eq!(chunk["object"], json!("chat.completion.chunk"));
            assert_eq!(chunk["created"], json!(1_760_000_000));
            assert_eq!(chunk["model"], json!("gpt-4.1-mini-2025-04-14"));
            assert_eq!(chunk["system_fingerprint"], json!("fp_1"));
            assert_eq!(chunk.get("usage").is_some(), include_usage);
        }
        // Per choice: role, content, finish.
        assert_eq!(chunks.len(), 6 + usize::from(include_usage));
        assert_eq!(chunks[0]["choices"][0]["delta"]["role"], json!("assistant"));
        assert_eq!(chunks[2]["choices"][0]["finish_reason"], json!("stop"));
        assert_eq!(chunks[5]["choices"][0]["finish_reason"], json!("length"));
        if include_usage {
            let last = &chunks[6];
            assert_eq!(last["choices"], json!([]));
            assert_eq!(last["usage"], object(CHAT.as_bytes())["usage"]);
            assert!(chunks[..6].iter().all(|c| c["usage"].is_null()));
        }
        assert_eq!(
            read_back(Api::ChatCompletions, &stream, include_usage).as_deref(),
            Some("I'm not allowed to do that. Nor that, 日本 😀.")
        );
        let body = object(CHAT.as_bytes());
        let accumulated = accumulate_chat(named);
        for (i, choice) in body["choices"].as_array().unwrap().iter().enumerate() {
            let got = &accumulated[i];
            assert_eq!(got["message"]["role"], choice["message"]["role"]);
            assert_eq!(got["message"]["content"], choice["message"]["content"]);
            assert_eq!(got["finish_reason"], choice["finish_reason"]);
            assert_eq!(got["logprobs"], choice["logprobs"]);
        }
    }
}

/// The OpenAI SDK's accumulation (`ChatCompletionStreamState`), for what these answers use.
fn accumulate_chat(chunks: &[(Option<String>, Value)]) -> Vec<Value> {
    let mut choices: Vec<Value> = Vec::new();
    for (_, chunk) in chunks {
        for choice in chunk["choices"].as_array().unwrap() {
            let i = choice["index"].as_u64().unwrap() as usize;
            if choices.len() <= i {
                choices.resize(i + 1, json!({"message": {}, "logprobs": null}));
            }
            let slot = &mut choices[i];
            for (key, value) in choice["delta"].as_object().unwrap() {
                let message = slot["message"].as_object_mut().unwrap();
                match (message.get(key), value) {
                    (Some(Value::String(old)), Value::String(more)) => {
                        let joined = format!("{old}{more}");
                        message.insert(key.clone(), json!(joined));
                    }
                    (_, value) => {
                        message.insert(key.clone(), value.clone());
                    }
                }
            }
            if !choice["logprobs"].is_null() {
                assert!(slot["logprobs"].is_null(), "logprobs sent once");
                slot["logprobs"] = choice["logprobs"].clone();
            }
            if !choice["finish_reason"].is_null() {
                slot["finish_reason"] = choice["finish_reason"].clone();
            }
        }
    }
    choices
}

#[test]
fn chat_tool_calls_and_refusals_are_streamed_as_deltas() {
    let body = br#"{"id": "c", "object": "chat.completion", "created": 1, "model": "m",
      "choices": [{"index": 0, "finish_reason": "tool_calls", "logprobs": null,
        "message": {"role": "assistant", "content": null, "refusal": "I won't.",
          "tool_calls": [{"id": "call_1", "type": "function",
                          "function": {"name": "f", "arguments": "{\"a\":1}"}}]}}]}"#;
    let stream = as_stream(Api::ChatCompletions, body, &request(false)).unwrap();
    let events = events(&stream);
    let deltas: Vec<&Value> = events
        .iter()
        .filter(|(_, c)| !c.is_null())
        .map(|(_, c)| &c["choices"][0]["delta"])
        .collect();
    assert_eq!(
        deltas,
        [
            &json!({"role": "assistant", "content": "", "refusal": null}),
            &json!({"refusal": "I won't."}),
            &json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                    "function": {"name": "f", "arguments": "{\"a\":1}"}}]}),
            &json!({}),
        ]
    );
}

#[test]
fn responses_stream_is_the_documented_event_sequence() {
    let stream = as_stream(Api::Responses, RESPONSES.as_bytes(), &request(false)).unwrap();
    let events = events(&stream);
    assert_eq!(
        types(&events),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added", // reasoning, whole
            "response.output_item.done",
            "response.output_item.added", // message, empty
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.content_part.added",
            "response.refusal.delta",
            "response.refusal.done",
            "response.content_part.done",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    for (i, (name, data)) in events.iter().enumerate() {
        assert_eq!(name.as_deref(), data["type"].as_str());
        assert_eq!(data["sequence_number"], json!(i));
    }
    let created = &events[0].1["response"];
    assert_eq!(created["id"], json!("resp_Retry"));
    assert_eq!(created["status"], json!("in_progress"));
    assert_eq!(created["output"], json!([]));
    assert_eq!(created["usage"], Value::Null);
    assert_eq!(events[4].1["item"]["content"], json!([]));
    assert_eq!(events[6].1["item_id"], json!("msg_1"));
    assert_eq!(events[6].1["output_index"], json!(1));
    assert_eq!(events[14].1["content_index"], json!(2));
    assert_eq!(
        events.last().unwrap().1["response"],
        serde_json::from_str::<Value>(RESPONSES).unwrap(),
        "the SDK's final response is the answer"
    );
    assert_eq!(
        read_back(Api::Responses, &stream, false).as_deref(),
        Some("I'm not allowed to do that, 日本 😀.")
    );
}

#[test]
fn an_incomplete_responses_answer_ends_incomplete() {
    let body = br#"{"id": "resp_i", "status": "incomplete",
      "incomplete_details": {"reason": "max_output_tokens"},
      "output": [{"type": "message", "id": "msg_i", "role": "assistant", "status": "incomplete",
                  "content": [{"type": "output_text", "text": "Cut", "annotations": []}]}],
      "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}}"#;
    let stream = as_stream(Api::Responses, body, &request(false)).unwrap();
    let events = events(&stream);
    assert_eq!(types(&events).last(), Some(&"response.incomplete"));
    assert_eq!(events[0].1["response"]["incomplete_details"], Value::Null);
    assert_eq!(
        read_back(Api::Responses, &stream, false).as_deref(),
        Some("Cut")
    );
}

#[test]
fn a_body_that_is_not_an_answer_is_bad() {
    for (api, body) in [
        (Api::AnthropicMessages, &b"not json"[..]),
        (Api::AnthropicMessages, br#"{"content": "text"}"#),
        (Api::AnthropicMessages, br#"{"content": [1]}"#),
        (Api::ChatCompletions, br#"{"choices": {}}"#),
        (Api::ChatCompletions, br#"{"choices": [null]}"#),
        (Api::Responses, br#"{"output": null}"#),
        (
            Api::Responses,
            br#"{"output": [{"type": "message", "content": 3}]}"#,
        ),
    ] {
        assert!(as_stream(api, body, &request(true)).is_err(), "{api:?}");
    }
}

/// Bedrock's Converse usage is camelCase: the total is its `totalTokens` (input, output, cache
/// reads and writes), never OpenAI's `total_tokens`.
#[test]
fn with_usage_writes_converses_total_under_its_own_name() {
    let body = r#"{"output": {"message": {"role": "assistant", "content": [{"text": "Hi"}]}},
        "stopReason": "end_turn", "metrics": {"latencyMs": 9},
        "usage": {"inputTokens": 8, "outputTokens": 6, "totalTokens": 14}}"#;
    let total = Usage {
        input_tokens: 16,
        output_tokens: 12,
        cache_read_tokens: 3,
        cache_creation_tokens: 2,
        reasoning_tokens: 0,
    };
    let out = object(&with_usage(Api::Converse, body.as_bytes(), &total).unwrap());
    assert_eq!(
        out["usage"],
        json!({"inputTokens": 16, "outputTokens": 12, "cacheReadInputTokens": 3,
               "cacheWriteInputTokens": 2, "totalTokens": 33})
    );
    assert_eq!(out["metrics"], json!({"latencyMs": 9}));
}
