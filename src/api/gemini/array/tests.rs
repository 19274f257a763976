#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::rc::Rc;

use serde_json::{json, Value};

use crate::api::{Api, Request};
use crate::config::{Policy, Version};
use crate::stream::caller::{decode_array, rewrite_request, upstream_array, Rewritten};
use crate::stream::{CutWhy, Hold};

const POLICY: &str = r#"{"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {
  "blocked_reply": "Sorry, I can't share that.",
  "live_checks": [
    {"name": "no-iban", "stage": "output", "kind": "matches_pattern",
     "pattern": "NL\\d{2}[A-Z]{4}\\d{10}", "max_match": 18}
  ]}}}}}"#;

fn version() -> Rc<Version> {
    Policy::from_json(POLICY.as_bytes())
        .unwrap()
        .select(None, None, None)
        .unwrap()
}

fn request() -> Request {
    Request {
        stream: true,
        json_array: true,
        model: Some("gemini-2.5-flash".into()),
        ..Request::default()
    }
}

fn deltas(pieces: &[&str]) -> Vec<String> {
    pieces.iter().map(|p| (*p).to_owned()).collect()
}

fn rewrite(hold: Hold, body: &[u8], size: usize) -> Rewritten {
    rewrite_request(
        Api::Gemini,
        &request(),
        hold,
        &version(),
        body,
        size,
        1 << 20,
    )
}

/// The elements of what the caller got, which must be one JSON array.
fn elements(out: &[u8]) -> Vec<Value> {
    serde_json::from_slice(out)
        .unwrap_or_else(|_| panic!("not one JSON array: {}", String::from_utf8_lossy(out)))
}

const HOLDS: [Hold; 3] = [Hold::Rules, Hold::WholeText, Hold::Everything];

#[test]
fn a_clean_array_passes_byte_for_byte_under_every_chunking() {
    let body = upstream_array(&deltas(&["Your order ", "ships \"[tomorrow]\"."]));
    for hold in HOLDS {
        for size in 1..=body.len() {
            let done = rewrite(hold, &body, size);
            assert_eq!(done.cut, None, "{hold:?} {size}");
            assert_eq!(
                String::from_utf8_lossy(&done.out),
                String::from_utf8_lossy(&body),
                "{hold:?} chunks of {size}"
            );
        }
    }
}

#[test]
fn a_cut_at_the_match_leaves_one_json_array_ending_stopped_for_safety_under_every_chunking() {
    let body = upstream_array(&deltas(&["Pay to NL9", "1ABNA04", "17164300", " today."]));
    for size in 1..=body.len() {
        let done = rewrite(Hold::Rules, &body, size);
        assert_eq!(done.cut.map(|c| c.why), Some(CutWhy::Matched), "{size}");
        let got = elements(&done.out);
        assert_eq!(decode_array(&done.out).unwrap().text, "Pay to ", "{size}");
        let last = got.last().unwrap();
        assert_eq!(last["candidates"][0]["finishReason"], "SAFETY", "{size}");
        assert_eq!(last["responseId"], "r_1");
        let finishes = got
            .iter()
            .filter(|c| {
                c["candidates"][0]
                    .get("finishReason")
                    .is_some_and(|f| !f.is_null())
            })
            .count();
        assert_eq!(finishes, 1, "{size}: the candidate finishes once");
    }
}

#[test]
fn a_held_round_that_fails_is_the_reply_alone_in_one_array() {
    let body = upstream_array(&deltas(&["Pay to NL9", "1ABNA04", "17164300", " today."]));
    for size in [1, 7, body.len()] {
        let done = rewrite(Hold::Everything, &body, size);
        let got = elements(&done.out);
        assert_eq!(
            got.len(),
            1,
            "{size}: nothing of the answer, one chunk of the reply"
        );
        assert_eq!(
            decode_array(&done.out).unwrap().text,
            "Sorry, I can't share that."
        );
        assert_eq!(got[0]["candidates"][0]["finishReason"], "SAFETY");
        assert_eq!(
            got[0]["modelVersion"], "m",
            "the answer's model version kept"
        );
    }
}

#[test]
fn what_is_not_one_array_is_cut_and_the_caller_still_gets_one() {
    let whole = upstream_array(&deltas(&["Hello", " there."]));
    let unfinished = &whole[..whole.len() - 1];
    let sse = format!("data: {}\n\n", json!({"candidates": []}));
    let mut trailing = whole.clone();
    trailing.extend_from_slice(b",{}");
    let mut not_object = whole[..whole.len() - 1].to_vec();
    not_object.extend_from_slice(b",\r\n7]");
    // What the caller saw finish stays finished; nothing seen ends stopped for safety.
    for (name, body, finish) in [
        ("ends before ]", unfinished.to_vec(), "STOP"),
        ("bytes after ]", trailing, "STOP"),
        ("an element not an object", not_object, "STOP"),
        ("server-sent events", sse.into_bytes(), "SAFETY"),
        ("nothing", Vec::new(), "SAFETY"),
    ] {
        for size in [1, 5, body.len().max(1)] {
            let done = rewrite(Hold::Rules, &body, size);
            assert_eq!(
                done.cut.map(|c| c.why),
                Some(CutWhy::Unreadable),
                "{name} {size}"
            );
            let got = elements(&done.out);
            let last = got.last().unwrap();
            assert_eq!(last["candidates"][0]["finishReason"], finish, "{name}");
        }
    }
}

#[test]
fn a_refusal_and_a_recovered_answer_are_one_element_arrays_of_json() {
    let ids = crate::api::Ids {
        token: "t0".into(),
        created: 1,
    };
    let reply = crate::api::refusal(Api::Gemini, "No.", &request(), &ids);
    assert_eq!(reply.content_type, "application/json");
    let got = elements(&reply.body);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["promptFeedback"]["blockReason"], "SAFETY");
    let answer = json!({"candidates": [{"content": {"parts": [{"text": "Hi."}], "role": "model"},
                        "finishReason": "STOP", "index": 0}], "modelVersion": "m"});
    let stream = crate::api::as_stream(Api::Gemini, answer.to_string().as_bytes(), &request());
    assert_eq!(elements(&stream.unwrap()), vec![answer]);
}
