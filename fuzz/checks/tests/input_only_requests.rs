//! The request_text property (the filter reads what serde_json and the vendor's rules read, and
//! refuses only for a reason it names) on embeddings and Message Batch bodies, written by hand: the
//! fuzz target's input picks among the three chat APIs only.

use livecheck::api::Api;
use livecheck_fuzz_checks::request_text::check_body;

const EMBEDDINGS: &[&str] = &[
    r#"{"model": "text-embedding-3-small", "input": "my password"}"#,
    r#"{"model": "m", "input": ["a", "", "b"], "encoding_format": "base64", "dimensions": 8}"#,
    r#"{"model": "m", "input": [], "stream": true}"#,
    r#"{"model": "m", "input": ""}"#,
    r#"{"input": "no model"}"#,
    r#"{"model": "m", "input": [1, 2, 3]}"#,
    r#"{"model": "m", "input": [[1, 2], [3]]}"#,
    r#"{"model": "m", "input": ["a", 1]}"#,
    r#"{"model": "m", "input": null}"#,
    r#"{"model": "m"}"#,
    r#"{"model": 7, "input": "x"}"#,
    r#"{"model": "m", "input": "a", "input": "b"}"#,
    r#"["input"]"#,
    r#"{"model": "m", "input": "a""#,
];

const BATCHES: &[&str] = &[
    r#"{"requests": []}"#,
    r#"{"requests": [{"custom_id": "a", "params": {"model": "m", "max_tokens": 1, "system": "be brief",
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"},
                     {"role": "user", "content": [{"type": "text", "text": "password"}]}]}},
        {"custom_id": "b", "params": {"model": "m", "stream": true,
         "messages": [{"role": "user", "content": ""}]}}]}"#,
    r#"{"requests": [{"custom_id": "a", "params": {"model": "m", "messages": []}},
                     {"custom_id": "b", "params": {"model": "n", "messages": []}}]}"#,
    r#"{"requests": [{"custom_id": "a", "params": {"messages": []}},
                     {"custom_id": "b", "params": {"model": "n", "messages": []}}]}"#,
    r#"{"requests": [{"custom_id": "a", "params": {"model": "m", "stream": "yes", "messages": []}}]}"#,
    r#"{"requests": [{"custom_id": 1, "params": {"messages": []}}]}"#,
    r#"{"requests": [{"custom_id": "a"}]}"#,
    r#"{"requests": [{"custom_id": "a", "params": []}]}"#,
    r#"{"requests": [{"custom_id": "a", "params": {"messages": [{"role": "user", "content": 7}]}}]}"#,
    r#"{"requests": [{"custom_id": "a", "params": {"messages": [], "messages": []}}]}"#,
    r#"{"requests": [7]}"#,
    r#"{"requests": {}}"#,
    r#"{}"#,
];

#[test]
fn embeddings_bodies_read_as_serde_json_reads_them() {
    for body in EMBEDDINGS {
        check_body(Api::Embeddings, body.as_bytes());
    }
}

#[test]
fn message_batch_bodies_read_as_serde_json_reads_them() {
    for body in BATCHES {
        check_body(Api::MessageBatches, body.as_bytes());
    }
}
