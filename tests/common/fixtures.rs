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
