//! Readable vendor bodies for the filter's tests: one request and one answer per API shape.
#![allow(clippy::indexing_slicing, clippy::unwrap_used)]

use serde_json::{json, Value};

/// The seed configuration shipped in `examples/`: `no-passwords` on input, `no-iban` on output.
pub const SEED: &str = include_str!("../../examples/seed.json");

/// A question that fails `no-passwords`, and an answer that fails `no-iban`.
pub const FORBIDDEN_QUESTION: &str = "My PASSWORD is hunter2, where is order 17?";
pub const CLEAN_QUESTION: &str = "Where is order 17?";
pub const FORBIDDEN_ANSWER: &str = "Pay to NL91ABNA0417164300 today.";
pub const CLEAN_ANSWER: &str = "Your order ships tomorrow.";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vendor {
    Anthropic,
    Chat,
    Responses,
}

pub const VENDORS: [Vendor; 3] = [Vendor::Anthropic, Vendor::Chat, Vendor::Responses];

impl Vendor {
    pub fn path(self) -> &'static str {
        match self {
            Vendor::Anthropic => "/v1/messages",
            Vendor::Chat => "/v1/chat/completions",
            Vendor::Responses => "/v1/responses",
        }
    }

    pub fn request(self, question: &str, stream: bool) -> String {
        let body = match self {
            Vendor::Anthropic => json!({
                "model": "claude-sonnet-4-5", "max_tokens": 256, "stream": stream,
                "system": "You answer questions about orders.",
                "messages": [{"role": "user", "content": [{"type": "text", "text": question}]}]
            }),
            Vendor::Chat => json!({
                "model": "gpt-4.1-mini", "stream": stream,
                "messages": [
                    {"role": "system", "content": "You answer questions about orders."},
                    {"role": "user", "content": question}
                ]
            }),
            Vendor::Responses => json!({
                "model": "gpt-4.1-mini", "stream": stream,
                "instructions": "You answer questions about orders.",
                "input": [{"role": "user", "content": [{"type": "input_text", "text": question}]}]
            }),
        };
        body.to_string()
    }

    /// A non-streamed answer saying `text`, with usage 11 in / 7 out.
    pub fn answer(self, text: &str) -> String {
        let body = match self {
            Vendor::Anthropic => json!({
                "id": "msg_01Up", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                "content": [{"type": "text", "text": text}],
                "stop_reason": "end_turn", "stop_sequence": null,
                "usage": {"input_tokens": 11, "output_tokens": 7}
            }),
            Vendor::Chat => json!({
                "id": "chatcmpl-up", "object": "chat.completion", "created": 1790000000, "model": "gpt-4.1-mini",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": null},
                             "finish_reason": "stop", "logprobs": null}],
                "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
            }),
            Vendor::Responses => json!({
                "id": "resp_up", "object": "response", "created_at": 1790000000, "status": "completed",
                "model": "gpt-4.1-mini", "incomplete_details": null,
                "output": [{"type": "message", "id": "msg_up", "status": "completed", "role": "assistant",
                            "content": [{"type": "output_text", "text": text, "annotations": []}]}],
                "usage": {"input_tokens": 11, "output_tokens": 7, "total_tokens": 18}
            }),
        };
        body.to_string()
    }

    /// The text a non-streamed body (an answer or a refusal) shows the person.
    pub fn text_of(self, body: &Value) -> String {
        match self {
            Vendor::Anthropic => body["content"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|b| b["type"] == "text")
                .map(|b| b["text"].as_str().unwrap())
                .collect(),
            Vendor::Chat => body["choices"][0]["message"]["content"]
                .as_str()
                .unwrap()
                .to_owned(),
            Vendor::Responses => body["output"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|o| o["content"].as_array().cloned().unwrap_or_default())
                .filter(|c| c["type"] == "output_text")
                .map(|c| c["text"].as_str().unwrap().to_owned())
                .collect(),
        }
    }

    /// How the vendor says a turn was refused or withheld, read off a non-streamed body.
    pub fn stop_marker(self, body: &Value) -> String {
        match self {
            Vendor::Anthropic => body["stop_reason"].as_str().unwrap_or_default().to_owned(),
            Vendor::Chat => body["choices"][0]["finish_reason"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            Vendor::Responses => format!(
                "{}/{}",
                body["status"].as_str().unwrap_or_default(),
                body["incomplete_details"]["reason"]
                    .as_str()
                    .unwrap_or_default()
            ),
        }
    }

    /// The marker `stop_marker` reads on a refused or withheld turn.
    pub fn refused_marker(self) -> &'static str {
        match self {
            Vendor::Anthropic => "refusal",
            Vendor::Chat => "content_filter",
            Vendor::Responses => "incomplete/content_filter",
        }
    }
}

/// A streamed answer as the vendor sends it, one text delta per piece, then the vendor's end.
pub fn stream(vendor: Vendor, pieces: &[&str]) -> Vec<String> {
    let mut events = Vec::new();
    let ev = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
    match vendor {
        Vendor::Anthropic => {
            events.push(ev("message_start", json!({"type": "message_start", "message": {
                "id": "msg_01Up", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 11, "output_tokens": 1}}})));
            events.push(ev(
                "content_block_start",
                json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}}),
            ));
            for p in pieces {
                events.push(ev(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": p}}),
                ));
            }
            events.push(ev(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0}),
            ));
            events.push(ev("message_delta", json!({"type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 7}})));
            events.push(ev("message_stop", json!({"type": "message_stop"})));
        }
        Vendor::Chat => {
            let chunk = |delta: Value, finish: Value| {
                format!(
                    "data: {}\n\n",
                    json!({"id": "chatcmpl-up", "object": "chat.completion.chunk",
                    "created": 1790000000, "model": "gpt-4.1-mini",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
                )
            };
            events.push(chunk(
                json!({"role": "assistant", "content": ""}),
                Value::Null,
            ));
            for p in pieces {
                events.push(chunk(json!({"content": p}), Value::Null));
            }
            events.push(chunk(json!({}), json!("stop")));
            events.push("data: [DONE]\n\n".to_owned());
        }
        Vendor::Responses => {
            let mut seq = 0;
            let mut push = |name: &str, mut data: Value| {
                data["type"] = json!(name);
                data["sequence_number"] = json!(seq);
                seq += 1;
                events.push(ev(name, data));
            };
            let response = |status: &str, output: Value| {
                json!({"id": "resp_up", "object": "response",
                "created_at": 1790000000, "status": status, "model": "gpt-4.1-mini", "output": output,
                "usage": if status == "completed" { json!({"input_tokens": 11, "output_tokens": 7, "total_tokens": 18}) } else { Value::Null }})
            };
            push(
                "response.created",
                json!({"response": response("in_progress", json!([]))}),
            );
            let item = |status: &str, text: &str| {
                json!({"type": "message", "id": "msg_up", "status": status,
                "role": "assistant", "content": if status == "completed" { json!([{"type": "output_text", "text": text, "annotations": []}]) } else { json!([]) }})
            };
            push(
                "response.output_item.added",
                json!({"output_index": 0, "item": item("in_progress", "")}),
            );
            push(
                "response.content_part.added",
                json!({"item_id": "msg_up", "output_index": 0, "content_index": 0,
                "part": {"type": "output_text", "text": "", "annotations": []}}),
            );
            for p in pieces {
                push(
                    "response.output_text.delta",
                    json!({"item_id": "msg_up", "output_index": 0, "content_index": 0, "delta": p}),
                );
            }
            let full: String = pieces.concat();
            push(
                "response.output_text.done",
                json!({"item_id": "msg_up", "output_index": 0, "content_index": 0, "text": full}),
            );
            push(
                "response.content_part.done",
                json!({"item_id": "msg_up", "output_index": 0, "content_index": 0,
                "part": {"type": "output_text", "text": full, "annotations": []}}),
            );
            push(
                "response.output_item.done",
                json!({"output_index": 0, "item": item("completed", &full)}),
            );
            push(
                "response.completed",
                json!({"response": response("completed", json!([item("completed", &full)]))}),
            );
        }
    }
    events
}

/// Reads what a caller got from a stream: the answer text, how it ended, and whether its events
/// were well formed (every `data:` JSON parses).
#[derive(Debug, Default)]
pub struct Streamed {
    pub text: String,
    pub end: String,
    pub events: usize,
}

pub fn read_stream(vendor: Vendor, body: &str) -> Streamed {
    let mut out = Streamed::default();
    for block in body.split("\n\n") {
        let data: Vec<&str> = block
            .lines()
            .filter_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")))
            .collect();
        if data.is_empty() {
            continue;
        }
        out.events += 1;
        let data = data.join("\n");
        if data == "[DONE]" {
            out.end.push_str("+[DONE]");
            continue;
        }
        let v: Value = serde_json::from_str(&data).unwrap_or_else(|e| panic!("{e}: {data}"));
        match vendor {
            Vendor::Anthropic => match v["type"].as_str().unwrap_or_default() {
                "content_block_delta" if v["delta"]["type"] == "text_delta" => {
                    out.text.push_str(v["delta"]["text"].as_str().unwrap())
                }
                "message_delta" => {
                    out.end = v["delta"]["stop_reason"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned()
                }
                _ => {}
            },
            Vendor::Chat => {
                if let Some(c) = v["choices"][0]["delta"]["content"].as_str() {
                    out.text.push_str(c);
                }
                if let Some(f) = v["choices"][0]["finish_reason"].as_str() {
                    out.end = f.to_owned();
                }
            }
            Vendor::Responses => match v["type"].as_str().unwrap_or_default() {
                "response.output_text.delta" => out.text.push_str(v["delta"].as_str().unwrap()),
                "response.completed" => out.end = "completed".into(),
                "response.incomplete" => {
                    out.end = format!(
                        "incomplete/{}",
                        v["response"]["incomplete_details"]["reason"]
                            .as_str()
                            .unwrap_or_default()
                    )
                }
                _ => {}
            },
        }
    }
    out
}
