#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use super::*;

fn event(data: &str) -> sse::Event {
    sse::Event {
        event: None,
        data: data.to_owned(),
    }
}

fn request() -> Request {
    Request {
        model: Some("gemini-2.5-flash".into()),
        ..Request::default()
    }
}

/// The chunks of a streamed answer, shaped as Google sends them (simonw/llm-gemini#97):
/// new parts only, cumulative usage, the finish on the last.
const CLEAN: &[&str] = &[
    r#"{"candidates": [{"content": {"parts": [{"text": "Hello"}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 5,"totalTokenCount": 5,"promptTokensDetails": [{"modality": "TEXT","tokenCount": 5}]},"modelVersion": "gemini-2.5-flash","responseId": "r-1"}"#,
    r#"{"candidates": [{"content": {"parts": [{"text": "I'm thinking.", "thought": true}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 5,"totalTokenCount": 9,"thoughtsTokenCount": 4},"modelVersion": "gemini-2.5-flash","responseId": "r-1"}"#,
    r#"{"candidates": [{"content": {"parts": [{"text": ", world."}],"role": "model"},"finishReason": "STOP","index": 0}],"usageMetadata": {"promptTokenCount": 5,"candidatesTokenCount": 3,"totalTokenCount": 12,"thoughtsTokenCount": 4},"modelVersion": "gemini-2.5-flash","responseId": "r-1"}"#,
];

fn sse_of(chunks: &[&str]) -> String {
    chunks.iter().map(|c| format!("data: {c}\n\n")).collect()
}

/// Each `data:` line of what was written, as JSON.
fn chunks_of(out: &[u8]) -> Vec<Value> {
    String::from_utf8(out.to_vec())
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

#[test]
fn a_clean_stream_is_read_per_candidate_and_written_back_as_it_came() {
    let mut gemini = Gemini::new(&request());
    let mut out = Vec::new();
    let units: Vec<Unit> = CLEAN
        .iter()
        .map(|c| gemini.read(event(c)).unwrap())
        .collect();
    let lanes: Vec<Lane> = units.iter().map(|u| u.lane).collect();
    assert_eq!(lanes, [Lane::Answer, Lane::Side, Lane::Answer]);
    let texts: Vec<Vec<&str>> = units
        .iter()
        .map(|u| u.texts.iter().map(|t| t.pointer.as_ref()).collect())
        .collect();
    assert_eq!(
        texts,
        [
            vec!["/candidates/0/content/parts/0/text"],
            vec![],
            vec!["/candidates/0/content/parts/0/text"],
        ],
        "the thought is no checked text"
    );
    assert!(units.iter().all(|u| u.texts.iter().all(|t| t.channel == 0)));
    assert_eq!(units[2].ends, [0], "the finish ends the candidate");
    assert!(units.iter().all(|u| !u.asks_for_tool && u.calls.is_empty()));
    for unit in units {
        gemini.write(unit.ev, &mut out);
    }
    assert_eq!(String::from_utf8(out).unwrap(), sse_of(CLEAN));
    let mut after = Vec::new();
    gemini.close(Some("late"), &mut after);
    assert!(after.is_empty(), "a finished stream is not closed again");
}

#[test]
fn each_candidate_is_its_own_channel() {
    let mut gemini = Gemini::new(&request());
    let chunk = r#"{"candidates": [{"content": {"parts": [{"text": "a"}]},"index": 0},{"content": {"parts": [{"text": "b"},{"text": "c"}]},"index": 1,"finishReason": "STOP"}]}"#;
    let unit = gemini.read(event(chunk)).unwrap();
    let places: Vec<(&str, usize)> = unit
        .texts
        .iter()
        .map(|t| (t.pointer.as_ref(), t.channel))
        .collect();
    assert_eq!(
        places,
        [
            ("/candidates/0/content/parts/0/text", 0),
            ("/candidates/1/content/parts/0/text", 1),
            ("/candidates/1/content/parts/1/text", 1),
        ]
    );
    assert_eq!(unit.ends, [1]);
    let mut out = Vec::new();
    gemini.write(unit.ev, &mut out);
    gemini.close(None, &mut out);
    let last = chunks_of(&out).pop().unwrap();
    assert_eq!(
        last["candidates"],
        json!([{"finishReason": "SAFETY", "index": 0}]),
        "only the open candidate is stopped"
    );
}

#[test]
fn a_cut_stream_ends_with_the_reply_stopped_for_safety_and_the_usage_so_far() {
    let mut gemini = Gemini::new(&request());
    let mut out = Vec::new();
    for c in &CLEAN[..2] {
        let unit = gemini.read(event(c)).unwrap();
        gemini.write(unit.ev, &mut out);
    }
    gemini.close(Some("I can't share that."), &mut out);
    let mut chunks = chunks_of(&out);
    assert_eq!(chunks.len(), 3);
    let last = chunks.pop().unwrap();
    assert_eq!(
        last["candidates"],
        json!([{"content": {"role": "model", "parts": [{"text": "I can't share that."}]},
                "finishReason": "SAFETY", "index": 0}])
    );
    assert_eq!(last["responseId"], "r-1");
    assert_eq!(last["modelVersion"], "gemini-2.5-flash");
    let usage = &last["usageMetadata"];
    assert_eq!(usage["promptTokenCount"], 5);
    assert_eq!(usage["thoughtsTokenCount"], 4);
    assert_eq!(usage["candidatesTokenCount"], 1, "one chunk of text read");
    assert_eq!(usage["totalTokenCount"], 10);
    let mut again = Vec::new();
    gemini.close(Some("twice"), &mut again);
    assert!(again.is_empty(), "closed once");
}

#[test]
fn a_stream_cut_before_any_chunk_is_one_chunk_of_the_reply() {
    let mut gemini = Gemini::new(&request());
    let mut out = Vec::new();
    gemini.close(Some("No."), &mut out);
    let chunks = chunks_of(&out);
    assert_eq!(chunks.len(), 1);
    assert_eq!(
        chunks[0]["candidates"][0]["content"]["parts"][0]["text"],
        "No."
    );
    assert_eq!(chunks[0]["candidates"][0]["finishReason"], "SAFETY");
    assert_eq!(chunks[0]["modelVersion"], "gemini-2.5-flash");
    assert_eq!(chunks[0]["usageMetadata"]["totalTokenCount"], 0);
}

#[test]
fn a_split_chunk_keeps_its_finish_for_the_rest_and_the_rest_is_its_text_alone() {
    let mut gemini = Gemini::new(&request());
    let chunk = r#"{"candidates": [{"content": {"parts": [{"text": "why", "thought": true},{"text": "Hello"}],"role": "model"},"finishReason": "STOP","index": 0}],"usageMetadata": {"promptTokenCount": 5},"promptFeedback": {"safetyRatings": []},"responseId": "r-1"}"#;
    let unit = gemini.read(event(chunk)).unwrap();
    assert_eq!(unit.texts.len(), 1);
    let pointer = unit.texts[0].pointer.clone();
    let set = |ev: &mut Ev, text: &str| {
        *ev.data_mut().unwrap().pointer_mut(&pointer).unwrap() = json!(text);
    };
    let mut first = unit.ev.clone();
    set(&mut first, "He");
    gemini.part(&mut first);
    assert_eq!(first.data()["candidates"][0].get("finishReason"), None);
    assert_eq!(
        first.data()["candidates"][0]["content"]["parts"][1]["text"],
        "He"
    );
    let mut rest = unit.ev.clone();
    gemini.rest(&mut rest);
    set(&mut rest, "llo");
    assert_eq!(
        rest.data()["candidates"],
        json!([{"content": {"parts": [{"text": ""}, {"text": "llo"}], "role": "model"},
                "finishReason": "STOP", "index": 0}])
    );
    assert_eq!(rest.data().get("promptFeedback"), None);
    // A null finish (proto3 JSON's "not set") stays: both parts keep the chunk's shape.
    let open = chunk.replace(r#""finishReason": "STOP""#, r#""finishReason": null"#);
    let unit = gemini.read(event(&open)).unwrap();
    let mut first = unit.ev.clone();
    gemini.part(&mut first);
    assert_eq!(first.data()["candidates"][0]["finishReason"], Value::Null);
    assert!(first.data()["candidates"][0].get("finishReason").is_some());
    assert_eq!(rest.data()["responseId"], "r-1");
}

#[test]
fn a_function_call_is_one_tool_call_complete_in_its_chunk() {
    let mut gemini = Gemini::new(&request());
    let chunk = r#"{"candidates": [{"content": {"parts": [{"text": "Let me look."},{"functionCall": {"name": "get_weather","args": {"city": "Paris","days": 2,"where": {"a/b": "x"}}}},{"function_call": {"name": "now"}}],"role": "model"},"finishReason": "STOP","index": 0}]}"#;
    let unit = gemini.read(event(chunk)).unwrap();
    assert!(unit.asks_for_tool);
    assert_eq!(unit.lane, Lane::Answer, "its text is answer text");
    assert_eq!(unit.calls, [0, 1]);
    assert_eq!(unit.calls_done, [0, 1], "a call comes whole");
    let tool: Vec<(&str, TextKind)> = unit
        .texts
        .iter()
        .map(|t| (t.pointer.as_ref(), t.kind))
        .collect();
    let of_call = TextKind::Tool {
        call: 0,
        json: false,
    };
    assert_eq!(
        tool,
        [
            ("/candidates/0/content/parts/0/text", TextKind::Answer),
            (
                "/candidates/0/content/parts/1/functionCall/args/city",
                of_call
            ),
            (
                "/candidates/0/content/parts/1/functionCall/args/where/a~1b",
                of_call
            ),
        ],
        "the arguments' strings are the call's checked text"
    );
    for t in &unit.texts {
        assert!(util::at(unit.ev.data(), &t.pointer).is_some_and(Value::is_string));
    }
    let call = gemini.call_of(0, &[&unit.ev]).unwrap();
    assert_eq!(call.name, "get_weather");
    assert!(call.json);
    let args: Value = serde_json::from_str(&call.arguments).unwrap();
    assert_eq!(
        args,
        json!({"city": "Paris", "days": 2, "where": {"a/b": "x"}})
    );
    let call = gemini.call_of(1, &[&unit.ev]).unwrap();
    assert_eq!((call.name.as_str(), call.arguments.as_str()), ("now", "{}"));
    assert!(gemini.call_of(2, &[&unit.ev]).is_none());
    // Calls in a later chunk get keys of their own; another candidate's are apart.
    let next = r#"{"candidates": [{"content": {"parts": [{"functionCall": {"name": "a"}}]},"index": 0},{"content": {"parts": [{"functionCall": {"name": "b"}}]},"index": 1}]}"#;
    let unit = gemini.read(event(next)).unwrap();
    assert_eq!(unit.lane, Lane::Side);
    assert_eq!(unit.calls, [2, 1 << 32]);
    assert_eq!(gemini.call_of(1 << 32, &[&unit.ev]).unwrap().name, "b");
}

#[test]
fn unreadable_chunks_are_unreadable() {
    let bad = [
        "not json",
        "[1]",
        r#"{"candidates": {}}"#,
        r#"{"candidates": [7]}"#,
        r#"{"candidates": [{"content": "x"}]}"#,
        r#"{"candidates": [{"content": {"parts": {"text": "a"}}}]}"#,
        r#"{"candidates": [{"content": {"parts": ["a"]}}]}"#,
        r#"{"candidates": [{"content": {"parts": [{"text": 1}]}}]}"#,
        r#"{"candidates": [{"content": {"parts": [{"functionCall": "f"}]}}]}"#,
        r#"{"candidates": [{"content": {"parts": [{"functionCall": {"name": "f", "args": []}}]}}]}"#,
        r#"{"candidates": [{"content": {"parts": [{"functionCall": {"name": "f"}, "function_call": {"name": "f"}}]}}]}"#,
        r#"{"candidates": [{"content": {"parts": [{"executableCode": "print(1)"}]}}]}"#,
        r#"{"candidates": [{"finishReason": 1}]}"#,
        r#"{"candidates": [{"index": -1, "content": {"parts": [{"text": "a"}]}}]}"#,
        r#"{"candidates": [{"index": 4294967296}]}"#,
        r#"{"usageMetadata": 5}"#,
    ];
    for data in bad {
        let mut gemini = Gemini::new(&request());
        assert_eq!(gemini.read(event(data)).err(), Some(Unreadable), "{data}");
    }
}

#[test]
fn a_blocked_prompt_an_error_and_a_usage_chunk_end_the_round_and_carry_no_text() {
    let ends = [
        r#"{"promptFeedback": {"blockReason": "SAFETY"},"usageMetadata": {"promptTokenCount": 5}}"#,
        r#"{"error": {"code": 500, "message": "internal", "status": "INTERNAL"}}"#,
        r#"{"candidates": [{"content": {"parts": []},"finishReason": "SAFETY","index": 0}]}"#,
    ];
    for data in ends {
        let mut gemini = Gemini::new(&request());
        let unit = gemini.read(event(data)).unwrap();
        assert_eq!(unit.lane, Lane::End, "{data}");
        assert!(unit.texts.is_empty(), "{data}");
    }
}
