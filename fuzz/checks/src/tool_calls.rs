//! The tool-call readers. Mode 0: an MCP POST body (`mcp::read`): a `tools/call` it reads is the
//! one serde_json reads (id, name, arguments), whatever else is `Other` or refused with a reason.
//! Mode 1-3: a non-streamed answer per vendor (`api::parse_answer`): a body it reads, serde_json
//! reads; its rule text starts with its text; Anthropic's arguments are JSON. Mode 4-6: a streamed answer
//! per vendor under a tool check (`allowed_tools`): every call the stream reader hands over
//! carries its name, and allowing or denying it never panics.

use std::rc::Rc;

use livecheck::api::{parse_answer, Api, Request};
use livecheck::mcp::{self, Message};
use livecheck::stream::{caller, Hold, Rewriter};
use serde_json::Value;

use crate::version_of;

const APIS: [Api; 3] = [Api::AnthropicMessages, Api::ChatCompletions, Api::Responses];

const POLICY: &str = r#"{"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {
  "live_checks": [
    {"name": "no-passwords", "stage": "output", "kind": "not_contains", "expected": "password"}
  ],
  "allowed_tools": ["lookup"]}}}}}"#;

fn mcp_body(body: &[u8]) {
    match mcp::read(body) {
        Message::ToolsCall { id, call } => {
            let plain: Value =
                serde_json::from_slice(body).expect("read a body serde_json refuses");
            assert_eq!(
                plain.get("method").and_then(Value::as_str),
                Some("tools/call")
            );
            assert_eq!(plain.get("id"), Some(&id));
            assert_eq!(
                plain.pointer("/params/name").and_then(Value::as_str),
                Some(call.name.as_str())
            );
            let args: Value = serde_json::from_str(&call.arguments).expect("arguments not JSON");
            match plain.pointer("/params/arguments") {
                None | Some(Value::Null) => assert_eq!(args, serde_json::json!({})),
                Some(given) => assert_eq!(&args, given, "other arguments than serde_json reads"),
            }
        }
        Message::Other => {
            if let Ok(plain) = serde_json::from_slice::<Value>(body) {
                let calls =
                    |v: &Value| v.get("method").and_then(Value::as_str) == Some("tools/call");
                assert!(!calls(&plain), "a tools/call passed unchecked");
                if let Value::Array(items) = &plain {
                    assert!(
                        !items.iter().any(calls),
                        "a batched tools/call passed unchecked"
                    );
                }
            } else {
                panic!("a body serde_json refuses passed as Other");
            }
        }
        Message::Refused { message, .. } => assert!(!message.is_empty()),
    }
}

fn answer_body(api: Api, body: &[u8]) {
    match parse_answer(api, body, true) {
        Ok(answer) => {
            assert!(
                serde_json::from_slice::<Value>(body).is_ok(),
                "read a body serde_json refuses"
            );
            let rule_text = answer.rule_text.as_deref().unwrap_or_default();
            assert!(
                answer.rule_text.is_some() && rule_text.starts_with(&answer.text),
                "no rule text, or it does not start with the text"
            );
            // Read without its rule text, the same answer.
            let plain = parse_answer(api, body, false).expect("read once, read again");
            assert!(
                plain.rule_text.is_none()
                    && plain.text == answer.text
                    && plain.calls == answer.calls
            );
            // Chat and Responses carry arguments as the model wrote them (a string that may not be
            // JSON); Anthropic's `input` is a JSON value, written back as JSON text.
            for call in &answer.calls {
                if call.json && api == Api::AnthropicMessages {
                    assert!(
                        serde_json::from_str::<Value>(&call.arguments).is_ok(),
                        "arguments not JSON"
                    );
                }
            }
        }
        Err(bad) => assert!(!bad.message().is_empty()),
    }
}

fn streamed(api: Api, body: &[u8], size: usize) {
    let version = version_of(POLICY);
    let request = Request {
        stream: true,
        ..Request::default()
    };
    let mut rw = Rewriter::new(api, Rc::clone(&version), &request, Hold::Rules, 1 << 16);
    let mut out = Vec::new();
    let mut turn = 0usize;
    let mut decide =
        |rw: &mut Rewriter, calls: Vec<(u64, livecheck::api::ToolCall)>, out: &mut Vec<u8>| {
            for (key, _call) in calls {
                turn += 1;
                if turn.is_multiple_of(2) {
                    out.extend(rw.allow_calls(&[key]));
                } else {
                    out.extend(rw.deny_calls("denied by the fuzz target"));
                }
            }
        };
    for chunk in body.chunks(size) {
        let step = rw.feed(chunk);
        out.extend(step.out);
        decide(&mut rw, step.calls, &mut out);
    }
    let step = rw.finish();
    out.extend(step.out);
    decide(&mut rw, step.calls, &mut out);
    if let Ok(seen) = caller::decode(api, &out) {
        assert!(
            version.output_rules.first_hit(&seen.text).is_none(),
            "the caller decoded a match"
        );
    } else if caller::decode(api, body).is_ok() {
        panic!("a readable stream came out unreadable");
    }
}

/// The target's body: panics when `input` breaks one of the properties above.
pub fn check(input: &[u8]) {
    let [mode, size, body @ ..] = input else {
        return;
    };
    match mode % 7 {
        0 => mcp_body(body),
        m @ 1..=3 => answer_body(APIS[usize::from(m - 1)], body),
        m => streamed(APIS[usize::from(m - 4)], body, usize::from(*size) + 1),
    }
}
