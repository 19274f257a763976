use serde_json::{json, Value};

use crate::api::{
    as_stream, parse_answer, parse_request, refusal, with_usage, withheld, Api, Ids, Request, Usage,
};

const API: Api = Api::AnthropicComplete;
const REPLY: &str = "I cannot help with that.";

fn request(prompt: Value) -> Request {
    let body = json!({"model": "claude-2.1", "prompt": prompt, "max_tokens_to_sample": 256});
    parse_request(API, body.to_string().as_bytes()).unwrap()
}

fn ids() -> Ids {
    Ids {
        token: "0123abcd".into(),
        created: 1_760_000_000,
    }
}

/// The events of an SSE body: (name, data as JSON).
fn events(body: &[u8]) -> Vec<(Option<String>, Value)> {
    let mut decoder = crate::sse::Decoder::new(1 << 20);
    let mut events = Vec::new();
    decoder.push(body, &mut events).unwrap();
    decoder.finish(&mut events).unwrap();
    events
        .into_iter()
        .map(|e| (e.event, serde_json::from_str(&e.data).unwrap()))
        .collect()
}

const ANSWER: &str = r#"{"type":"completion","id":"compl_01","completion":" Hello there.","stop_reason":"stop_sequence","model":"claude-2.1","stop":"\n\nHuman:","log_id":"compl_01"}"#;

#[test]
fn the_prompt_is_read_as_a_conversation_system_then_human_turns_without_the_models() {
    let req = request(json!(
        "You are terse.\n\nHuman: my password is hunter2\n\nAssistant: I will not repeat it.\n\nHuman: What was it?\n\nAssistant:"
    ));
    assert_eq!(
        req.input_text,
        "You are terse.\nmy password is hunter2\nWhat was it?"
    );
    assert_eq!(req.intent(), ["my password is hunter2", "What was it?"]);
    assert_eq!(req.last_user_text(), "What was it?");
    assert_eq!(req.model.as_deref(), Some("claude-2.1"));
    assert!(!req.stream);
}

#[test]
fn text_outside_the_turn_markers_is_still_read() {
    // No marker at all: the whole prompt is read (as a system prompt would be).
    let req = request(json!("password please"));
    assert_eq!(req.input_text, "password please");
    assert!(req.intent().is_empty());
    // A marker written otherwise (one newline) is part of the turn's text.
    let req = request(json!("\n\nHuman: hi\nAssistant: password\n\nAssistant:"));
    assert_eq!(req.input_text, "hi\nAssistant: password");
}

#[test]
fn a_prompt_that_is_not_a_string_is_refused_naming_the_field() {
    for prompt in [json!(["\n\nHuman: hi"]), json!(7), json!(null)] {
        let body = json!({"model": "m", "prompt": prompt, "max_tokens_to_sample": 1});
        let err = parse_request(API, body.to_string().as_bytes()).unwrap_err();
        assert!(err.message().contains("prompt"), "{err}");
    }
    let err = parse_request(API, br#"{"model": "m"}"#).unwrap_err();
    assert!(err.message().contains("prompt"), "{err}");
    let twice = br#"{"prompt": "\n\nHuman: hi\n\nAssistant:", "prompt": "x"}"#;
    assert!(parse_request(API, twice).is_err());
}

#[test]
fn stream_is_read_and_must_be_a_boolean() {
    let body = json!({"prompt": "\n\nHuman: hi\n\nAssistant:", "stream": true});
    assert!(
        parse_request(API, body.to_string().as_bytes())
            .unwrap()
            .stream
    );
    let body = json!({"prompt": "\n\nHuman: hi\n\nAssistant:", "stream": "yes"});
    assert!(parse_request(API, body.to_string().as_bytes()).is_err());
}

#[test]
fn the_answer_is_its_completion_and_never_asks_for_a_tool() {
    let answer = parse_answer(API, ANSWER.as_bytes(), true).unwrap();
    assert_eq!(answer.text, " Hello there.");
    assert_eq!(answer.rule_text.as_deref(), Some(" Hello there."));
    assert_eq!(answer.id.as_deref(), Some("compl_01"));
    assert!(!answer.asks_for_tool);
    assert!(answer.calls.is_empty());
    let bad = parse_answer(API, br#"{"type":"completion","completion":7}"#, false);
    assert!(bad.unwrap_err().message().contains("completion"));
}

#[test]
fn a_refusal_is_the_reply_as_the_whole_completion_ending_as_the_model_ends() {
    let mut req = request(json!("\n\nHuman: hi\n\nAssistant:"));
    let reply = refusal(API, REPLY, &req, &ids());
    assert_eq!(reply.content_type, "application/json");
    assert_eq!(
        serde_json::from_slice::<Value>(&reply.body).unwrap(),
        json!({"type": "completion", "id": "compl_0123abcd", "completion": REPLY,
               "stop_reason": "stop_sequence", "model": "claude-2.1"})
    );
    req.stream = true;
    let reply = refusal(API, REPLY, &req, &ids());
    assert_eq!(reply.content_type, "text/event-stream");
    let events = events(&reply.body);
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].0.as_deref(), Some("completion"));
    assert_eq!(events[0].1["completion"], json!(REPLY));
    assert_eq!(events[0].1["stop_reason"], Value::Null);
    assert_eq!(events[1].1["completion"], json!(""));
    assert_eq!(events[1].1["stop_reason"], json!("stop_sequence"));
}

#[test]
fn a_withheld_answer_keeps_its_id_and_model_and_says_the_reply() {
    let body = withheld(API, ANSWER.as_bytes(), REPLY).unwrap();
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["completion"], json!(REPLY));
    assert_eq!(body["stop_reason"], json!("stop_sequence"));
    assert_eq!(body["stop"], Value::Null);
    assert_eq!(body["id"], json!("compl_01"));
    assert_eq!(body["model"], json!("claude-2.1"));
    assert!(withheld(API, br#"{"type":"completion"}"#, REPLY).is_err());
}

#[test]
fn a_recovered_answer_gets_no_usage_and_streams_as_the_vendor_streams() {
    let total = Usage {
        input_tokens: 5,
        output_tokens: 7,
        ..Usage::default()
    };
    let kept = with_usage(API, ANSWER.as_bytes(), &total).unwrap();
    assert_eq!(
        serde_json::from_slice::<Value>(&kept).unwrap(),
        serde_json::from_str::<Value>(ANSWER).unwrap()
    );
    let stream = as_stream(API, ANSWER.as_bytes(), &Request::default()).unwrap();
    let events = events(&stream);
    assert_eq!(events.len(), 2);
    assert!(events
        .iter()
        .all(|(name, _)| name.as_deref() == Some("completion")));
    assert_eq!(events[0].1["completion"], json!(" Hello there."));
    assert_eq!(events[0].1["stop_reason"], Value::Null);
    assert_eq!(events[0].1["id"], json!("compl_01"));
    assert_eq!(events[1].1["completion"], json!(""));
    assert_eq!(events[1].1["stop_reason"], json!("stop_sequence"));
    assert_eq!(events[1].1["stop"], json!("\n\nHuman:"));
    let decoded = crate::stream::caller::decode(API, &stream).unwrap();
    assert_eq!(decoded.text, " Hello there.");
}
