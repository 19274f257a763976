//! Gemini bodies as Google documents them (<https://ai.google.dev/api/generate-content>, the
//! function-calling guide <https://ai.google.dev/gemini-api/docs/function-calling?lang=rest>, the
//! thinking guide <https://ai.google.dev/gemini-api/docs/thinking>), and the filter's bodies read
//! back as google-genai reads them (`google/genai/types.py`).

use serde::Deserialize;
use serde_json::{json, Value};

use super::super::{Dialect, Ids, Request};
use super::*;
use crate::json::{parse_answer_node, parse_node, Node};

const REPLY: &str = "I cannot help with that. Never share a password in this conversation.";

/// A multi-turn request with a function call round: system instruction, an image, a file, the
/// model's own turn with a function call, the function's result, and a last user question.
const REQUEST: &str = r#"{
  "systemInstruction": {"parts": [{"text": "You answer questions about orders."}]},
  "contents": [
    {"role": "user", "parts": [
      {"text": "Where is order 17?"},
      {"inlineData": {"mimeType": "image/png", "data": "cGFzc3dvcmQ="}},
      {"fileData": {"mimeType": "application/pdf", "fileUri": "https://generativelanguage.googleapis.com/v1beta/files/password"}}
    ]},
    {"role": "model", "parts": [
      {"text": "Let me look that up, my password is hunter2."},
      {"functionCall": {"name": "lookup", "args": {"order": 17, "note": "password"}}}
    ]},
    {"role": "user", "parts": [
      {"functionResponse": {"name": "lookup", "response": {"status": "shipped, password secret"}}}
    ]},
    {"role": "user", "parts": [{"text": "And when does it arrive?"}, {"text": "Today?"}]}
  ],
  "tools": [{"functionDeclarations": [{"name": "lookup", "description": "Finds an order",
    "parameters": {"type": "object", "properties": {"order": {"type": "integer"}}}}]}],
  "generationConfig": {"temperature": 0.2, "maxOutputTokens": 1024, "thinkingConfig": {"includeThoughts": true}}
}"#;

/// A text answer with a thought summary part first (`includeThoughts`), as the thinking guide shows.
const ANSWER_TEXT: &str = r#"{
  "candidates": [{
    "content": {"role": "model", "parts": [
      {"text": "**Recalling** the IBAN is NL91ABNA0417164300", "thought": true},
      {"text": "Your order "},
      {"text": "ships tomorrow."}
    ]},
    "finishReason": "STOP",
    "index": 0,
    "safetyRatings": [{"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "NEGLIGIBLE"}]
  }],
  "usageMetadata": {"promptTokenCount": 12, "candidatesTokenCount": 6, "totalTokenCount": 40,
    "thoughtsTokenCount": 22, "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 12}]},
  "modelVersion": "gemini-2.5-flash",
  "responseId": "mAitaLmkHPPlz7IPvtfUqQ4"
}"#;

/// An answer that calls two functions (parallel function calling, the guide's example).
const ANSWER_CALLS: &str = r#"{
  "candidates": [{
    "content": {"role": "model", "parts": [
      {"text": "Checking both."},
      {"functionCall": {"name": "power_disco_ball", "args": {"power": true}}},
      {"functionCall": {"id": "call_2", "name": "start_music", "args": {"energetic": true, "loud": false, "playlist": "password 12"}}}
    ]},
    "finishReason": "STOP",
    "index": 0
  }],
  "usageMetadata": {"promptTokenCount": 80, "candidatesTokenCount": 20, "totalTokenCount": 100},
  "modelVersion": "gemini-2.5-flash",
  "responseId": "resp-calls-1"
}"#;

/// A blocked prompt: no candidate, the block in `promptFeedback` (`GenerateContentResponse`).
const ANSWER_BLOCKED: &str = r#"{
  "promptFeedback": {"blockReason": "SAFETY", "safetyRatings": [
    {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": true}]},
  "usageMetadata": {"promptTokenCount": 9, "totalTokenCount": 9},
  "modelVersion": "gemini-2.5-flash",
  "responseId": "resp-blocked-1"
}"#;

fn ids() -> Ids {
    Ids {
        token: "0123abcd".into(),
        created: 1_760_000_000,
    }
}

fn request(body: &str) -> Result<Request, FieldError> {
    let arena = crate::json::arena_for(body.as_bytes());
    match parse_node(body.as_bytes(), &arena).unwrap() {
        Node::Object(body) => parse_request(&body),
        _ => panic!("not an object"),
    }
}

fn answer(body: &str) -> Result<Answer, FieldError> {
    let arena = crate::json::arena_for(body.as_bytes());
    match parse_answer_node(body.as_bytes(), &arena).unwrap() {
        Node::Object(body) => parse_answer(&body, true),
        _ => panic!("not an object"),
    }
}

fn error_text(result: Result<impl std::fmt::Debug, FieldError>) -> String {
    result.unwrap_err().to_string()
}

/// A `GenerateContentResponse` as google-genai reads it: camelCase fields (its `from_mldev`
/// converters), enums that refuse a value they do not know (`FinishReason`, `BlockedReason`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SdkResponse {
    candidates: Option<Vec<SdkCandidate>>,
    prompt_feedback: Option<SdkPromptFeedback>,
    usage_metadata: Option<SdkUsage>,
    model_version: Option<String>,
    response_id: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SdkCandidate {
    content: Option<SdkContent>,
    finish_reason: Option<FinishReason>,
    index: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SdkContent {
    role: Option<String>,
    parts: Option<Vec<SdkPart>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SdkPart {
    text: Option<String>,
    thought: Option<bool>,
    function_call: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SdkPromptFeedback {
    block_reason: Option<BlockedReason>,
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct SdkUsage {
    prompt_token_count: Option<u64>,
    candidates_token_count: Option<u64>,
    total_token_count: Option<u64>,
}

/// google-genai `FinishReason` (the values a stop may end with).
#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
enum FinishReason {
    Stop,
    MaxTokens,
    Safety,
    Recitation,
    ProhibitedContent,
    Blocklist,
    Spii,
    Other,
}

/// google-genai `BlockedReason`.
#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
enum BlockedReason {
    Safety,
    Other,
    Blocklist,
    ProhibitedContent,
}

impl SdkResponse {
    fn read(body: &[u8]) -> Self {
        serde_json::from_slice(body).unwrap()
    }

    /// `GenerateContentResponse.text`: the first candidate's text parts but thoughts, `None`
    /// when it has no parts or no text part.
    fn text(&self) -> Option<String> {
        let parts = self
            .candidates
            .as_ref()?
            .first()?
            .content
            .as_ref()?
            .parts
            .as_ref()?;
        let texts: Vec<&str> = parts
            .iter()
            .filter(|p| p.thought != Some(true))
            .filter_map(|p| p.text.as_deref())
            .collect();
        (!texts.is_empty()).then(|| texts.concat())
    }
}

#[test]
fn input_reads_the_system_instruction_and_the_callers_text_parts_only() {
    let req = request(REQUEST).unwrap();
    assert_eq!(
        req.input_text,
        "You answer questions about orders.\nWhere is order 17?\nAnd when does it arrive?\nToday?"
    );
    // Never the model's turn, its function call, a function's result, inline data or a file.
    for unread in ["hunter2", "password", "secret", "cGFzc3dvcmQ="] {
        assert!(!req.input_text.contains(unread), "{unread}");
    }
    assert!(!req.stream);
    assert_eq!(req.model, None);
}

#[test]
fn the_intent_is_each_user_content_with_text_and_a_function_result_turn_is_skipped() {
    let req = request(REQUEST).unwrap();
    assert_eq!(
        req.intent(),
        vec!["Where is order 17?", "And when does it arrive?\nToday?"]
    );
    assert_eq!(req.last_user_text(), "And when does it arrive?\nToday?");
}

#[test]
fn a_content_without_role_is_the_users_and_an_unexpected_role_is_read_not_intent() {
    let req = request(
        r#"{"contents": [
            {"parts": [{"text": "no role"}]},
            {"role": "function", "parts": [{"text": "odd role"}]}
        ]}"#,
    )
    .unwrap();
    assert_eq!(req.input_text, "no role\nodd role");
    assert_eq!(req.intent(), vec!["no role"]);
}

#[test]
fn googles_own_rest_example_is_read_with_its_proto_names_and_single_objects() {
    // ai.google.dev/gemini-api/docs/system-instructions?lang=rest, as Google sends it.
    let req = request(
        r#"{ "system_instruction": {
            "parts":
              { "text": "You are Neko the cat respond like one"}},
            "contents": {
              "parts": {
                "text": "Good morning! How are you?"}}}"#,
    )
    .unwrap();
    assert_eq!(
        req.input_text,
        "You are Neko the cat respond like one\nGood morning! How are you?"
    );
    assert_eq!(req.intent(), vec!["Good morning! How are you?"]);
}

#[test]
fn a_field_under_both_its_names_is_refused() {
    let both = r#"{"systemInstruction": {"parts": [{"text": "a"}]},
                   "system_instruction": {"parts": [{"text": "b"}]},
                   "contents": []}"#;
    assert_eq!(
        error_text(request(both)),
        "systemInstruction and system_instruction must be one field, written under one of its two names"
    );
    let both = r#"{"candidates": [{"content": {"role": "model", "parts": [
        {"functionCall": {"name": "a", "args": {}}, "function_call": {"name": "b", "args": {}}}]}}]}"#;
    assert_eq!(
        error_text(answer(both)),
        "candidates[0].content.parts[0].functionCall and candidates[0].content.parts[0].function_call \
         must be one field, written under one of its two names"
    );
}

#[test]
fn a_request_naming_content_cached_at_google_is_refused() {
    for name in ["cachedContent", "cached_content"] {
        let body = format!(r#"{{"{name}": "cachedContents/abc", "contents": []}}"#);
        assert_eq!(
            error_text(request(&body)),
            format!(
                "{name} must be absent: content cached at Google is content livecheck cannot check"
            )
        );
    }
    let body = r#"{"cachedContent": null, "contents": [{"parts": [{"text": "hi"}]}]}"#;
    assert!(request(body).is_ok());
}

#[test]
fn a_request_that_is_not_the_documented_shape_is_refused_naming_the_field() {
    for (body, message) in [
        (r#"{}"#, "contents must be an array of objects"),
        (
            r#"{"contents": "hi"}"#,
            "contents must be an array of objects",
        ),
        (r#"{"contents": ["hi"]}"#, "contents[0] must be an object"),
        (
            r#"{"contents": [{"role": 1, "parts": []}]}"#,
            "contents[0].role must be a string",
        ),
        (
            r#"{"contents": [{"parts": "hi"}]}"#,
            "contents[0].parts must be an array of objects",
        ),
        (
            r#"{"contents": [{"parts": [{"text": "a"}, "b"]}]}"#,
            "contents[0].parts[1] must be an object",
        ),
        (
            r#"{"contents": [{"role": "model", "parts": [{"text": 7}]}]}"#,
            "contents[0].parts[0].text must be a string",
        ),
        (
            r#"{"systemInstruction": "be brief", "contents": []}"#,
            "systemInstruction must be an object",
        ),
        (
            r#"{"systemInstruction": {"parts": [{"text": ["a"]}]}, "contents": []}"#,
            "systemInstruction.parts[0].text must be a string",
        ),
        (
            r#"{"system_instruction": [], "contents": []}"#,
            "system_instruction must be an object",
        ),
    ] {
        assert_eq!(error_text(request(body)), message, "{body}");
    }
}

#[test]
fn a_part_of_an_unknown_kind_is_not_read_and_not_refused() {
    let req = request(
        r#"{"contents": [{"role": "user", "parts": [
            {"videoMetadata": {"startOffset": "1s"}, "fileData": {"fileUri": "gs://b/v.mp4"}},
            {"someFuturePart": {"text": "not a text part"}},
            {"text": "What is in the video?"}
        ]}]}"#,
    )
    .unwrap();
    assert_eq!(req.input_text, "What is in the video?");
}

#[test]
fn answer_text_is_its_text_parts_never_its_thoughts() {
    let a = answer(ANSWER_TEXT).unwrap();
    assert_eq!(a.text, "Your order ships tomorrow.");
    assert_eq!(a.rule_text.as_deref(), Some("Your order ships tomorrow."));
    assert_eq!(a.id.as_deref(), Some("mAitaLmkHPPlz7IPvtfUqQ4"));
    assert!(!a.asks_for_tool);
    assert!(a.calls.is_empty());
}

#[test]
fn function_calls_are_tool_calls_with_their_args_as_json() {
    let a = answer(ANSWER_CALLS).unwrap();
    assert_eq!(a.text, "Checking both.");
    assert!(a.asks_for_tool);
    assert_eq!(a.id.as_deref(), Some("resp-calls-1"));
    let names: Vec<&str> = a.calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["power_disco_ball", "start_music"]);
    assert!(a.calls.iter().all(|c| c.json));
    let args: Value = serde_json::from_str(&a.calls[1].arguments).unwrap();
    assert_eq!(
        args,
        json!({"energetic": true, "loud": false, "playlist": "password 12"})
    );
    // Rule checks read every argument value, so forbidden text never reaches a tool.
    let rule_text = a.rule_text.unwrap();
    assert!(rule_text.starts_with("Checking both.\ntrue\n"));
    assert!(rule_text.contains("password 12"));
}

#[test]
fn a_function_call_under_its_proto_name_or_without_args_is_still_a_tool_call() {
    let a = answer(
        r#"{"candidates": [{"content": {"role": "model", "parts": [
            {"function_call": {"name": "delete_all", "args": {"path": "/"}}},
            {"functionCall": {"name": "ping"}}
        ]}, "finishReason": "STOP"}]}"#,
    )
    .unwrap();
    assert!(a.asks_for_tool);
    assert_eq!(a.calls[0].name, "delete_all");
    assert_eq!(a.calls[0].arguments, r#"{"path":"/"}"#);
    assert_eq!(a.calls[1].name, "ping");
    assert_eq!(a.calls[1].arguments, "{}");
}

#[test]
fn every_candidate_is_read_and_code_google_ran_reaches_rule_checks_only() {
    let a = answer(
        r#"{"candidates": [
            {"content": {"role": "model", "parts": [{"text": "one "},
                {"executableCode": {"language": "PYTHON", "code": "print('password')"}},
                {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "password"}}]}, "index": 0},
            {"content": {"role": "model", "parts": [{"text": "two"}]}, "index": 1}
        ]}"#,
    )
    .unwrap();
    assert_eq!(a.text, "one two");
    assert!(!a.asks_for_tool);
    assert_eq!(a.rule_text.as_deref(), Some("one two\nprint('password')"));
}

#[test]
fn usage_counts_thoughts_as_output_and_tool_results_as_input() {
    let body: Value = serde_json::from_str(ANSWER_TEXT).unwrap();
    let mut metadata = body["usageMetadata"].clone();
    metadata["cachedContentTokenCount"] = json!(4);
    metadata["toolUsePromptTokenCount"] = json!(3);
    assert_eq!(
        usage(&metadata),
        Some(Usage {
            input_tokens: 15,
            output_tokens: 28,
            cache_read_tokens: 4,
            cache_creation_tokens: 0,
            reasoning_tokens: 22,
        })
    );
    let blocked: Value = serde_json::from_str(ANSWER_BLOCKED).unwrap();
    let blocked = usage(&blocked["usageMetadata"]).unwrap();
    assert_eq!((blocked.input_tokens, blocked.output_tokens), (9, 0));
    assert_eq!(usage(&json!({"candidatesTokenCount": 5})), None);
}

#[test]
fn a_blocked_prompt_answers_no_text_and_no_call() {
    let a = answer(ANSWER_BLOCKED).unwrap();
    assert_eq!(a.text, "");
    assert!(a.calls.is_empty());
    assert_eq!(a.id.as_deref(), Some("resp-blocked-1"));
}

#[test]
fn an_answer_not_in_the_documented_shape_is_unreadable() {
    for (body, message) in [
        (r#"{"candidates": {}}"#, "candidates must be an array"),
        (r#"{"candidates": [1]}"#, "candidates[0] must be an object"),
        (
            r#"{"candidates": [{"content": []}]}"#,
            "candidates[0].content must be an object",
        ),
        (
            r#"{"candidates": [{"content": {"parts": {}}}]}"#,
            "candidates[0].content.parts must be an array",
        ),
        (
            r#"{"candidates": [{"content": {"parts": [{"text": 1}]}}]}"#,
            "candidates[0].content.parts[0].text must be a string",
        ),
        (
            r#"{"candidates": [{"content": {"parts": [{"functionCall": "f()"}]}}]}"#,
            "candidates[0].content.parts[0].functionCall must be an object",
        ),
        (
            r#"{"candidates": [{"content": {"parts": [{"functionCall": {"name": "f", "args": "[1]"}}]}}]}"#,
            "candidates[0].content.parts[0].functionCall.args must be an object",
        ),
        (
            r#"{"candidates": [{"content": {"parts": [{"function_call": []}]}}]}"#,
            "candidates[0].content.parts[0].function_call must be an object",
        ),
        (
            r#"{"candidates": [{"content": {"parts": [{"executableCode": "print(1)"}]}}]}"#,
            "candidates[0].content.parts[0].executableCode must be an object",
        ),
    ] {
        assert_eq!(error_text(answer(body)), message, "{body}");
    }
}

#[test]
fn a_refused_question_is_a_blocked_prompt_whose_reply_reads_as_text() {
    let req = Request {
        model: Some("gemini-2.5-flash".into()),
        ..Request::default()
    };
    let body = refusal(REPLY, &req, &ids());
    let sdk = SdkResponse::read(&body);
    assert_eq!(sdk.text().as_deref(), Some(REPLY));
    assert_eq!(
        sdk.prompt_feedback.unwrap().block_reason,
        Some(BlockedReason::Safety)
    );
    let candidate = &sdk.candidates.as_ref().unwrap()[0];
    assert_eq!(candidate.finish_reason, Some(FinishReason::Safety));
    assert_eq!(candidate.index, Some(0));
    assert_eq!(
        candidate.content.as_ref().unwrap().role.as_deref(),
        Some("model")
    );
    assert_eq!(
        sdk.usage_metadata,
        Some(SdkUsage {
            prompt_token_count: Some(0),
            candidates_token_count: Some(0),
            total_token_count: Some(0),
        })
    );
    assert_eq!(sdk.model_version.as_deref(), Some("gemini-2.5-flash"));
    assert_eq!(sdk.response_id.as_deref(), Some("0123abcd"));
    // The filter reads its own refusal as the reply, asking for no tool.
    let own = answer(std::str::from_utf8(&body).unwrap()).unwrap();
    assert_eq!(own.text, REPLY);
    assert!(!own.asks_for_tool);
}

#[test]
fn a_withheld_answer_keeps_id_version_and_usage_and_drops_function_calls() {
    let mut body = serde_json::from_str::<Value>(ANSWER_CALLS)
        .unwrap()
        .as_object()
        .unwrap()
        .clone();
    withhold(&mut body, REPLY).unwrap();
    let out = crate::json::to_vec(&Value::Object(body));
    let sdk = SdkResponse::read(&out);
    assert_eq!(sdk.text().as_deref(), Some(REPLY));
    assert_eq!(sdk.response_id.as_deref(), Some("resp-calls-1"));
    assert_eq!(sdk.model_version.as_deref(), Some("gemini-2.5-flash"));
    assert_eq!(
        sdk.usage_metadata,
        Some(SdkUsage {
            prompt_token_count: Some(80),
            candidates_token_count: Some(20),
            total_token_count: Some(100),
        })
    );
    let candidates = sdk.candidates.unwrap();
    assert_eq!(candidates.len(), 1);
    assert_eq!(candidates[0].finish_reason, Some(FinishReason::Safety));
    let parts = candidates[0]
        .content
        .as_ref()
        .unwrap()
        .parts
        .as_ref()
        .unwrap();
    assert!(parts.iter().all(|p| p.function_call.is_none()));
    let own = answer(std::str::from_utf8(&out).unwrap()).unwrap();
    assert!(!own.asks_for_tool);
    assert!(own.calls.is_empty());
}

#[test]
fn a_withheld_answer_replaces_every_candidate_keeping_its_index() {
    let mut body = json!({
        "candidates": [
            {"content": {"role": "model", "parts": [{"text": "a"}]}, "index": 0,
             "citationMetadata": {"citationSources": [{"uri": "https://example.com"}]}},
            {"content": {"role": "model", "parts": [{"text": "b"}]}, "index": 1}
        ],
        "promptFeedback": {"safetyRatings": []},
        "responseId": "r"
    });
    let map = body.as_object_mut().unwrap();
    withhold(map, REPLY).unwrap();
    assert_eq!(
        map["candidates"],
        json!([
            {"content": {"role": "model", "parts": [{"text": REPLY}]}, "finishReason": "SAFETY", "index": 0},
            {"content": {"role": "model", "parts": [{"text": REPLY}]}, "finishReason": "SAFETY", "index": 1}
        ])
    );
    assert_eq!(map["promptFeedback"], json!({"safetyRatings": []}));
}

#[test]
fn a_withheld_answer_without_candidates_gets_one_and_a_bad_one_is_unreadable() {
    let mut body = serde_json::from_str::<Value>(ANSWER_BLOCKED).unwrap();
    let map = body.as_object_mut().unwrap();
    withhold(map, REPLY).unwrap();
    let sdk = SdkResponse::read(&crate::json::to_vec(&body));
    assert_eq!(sdk.text().as_deref(), Some(REPLY));
    assert_eq!(sdk.response_id.as_deref(), Some("resp-blocked-1"));

    let mut bad = json!({"candidates": "none"});
    assert_eq!(
        withhold(bad.as_object_mut().unwrap(), REPLY)
            .unwrap_err()
            .to_string(),
        "candidates must be an array"
    );
}

#[test]
fn googles_error_is_read_as_google_genai_reads_it() {
    // google/genai/errors.py `APIError`: `error.code`, `error.message`, `error.status`.
    let (reply, headers) = Dialect::Google.error(400, "contents must be an array of objects");
    assert_eq!(reply.content_type, "application/json");
    assert!(headers.is_empty());
    let body: Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(
        body,
        json!({"error": {"code": 400, "message": "contents must be an array of objects",
                         "status": "INVALID_ARGUMENT"}})
    );
}

#[test]
fn every_prefix_and_byte_flip_of_every_fixture_is_read_without_panic() {
    for fixture in [REQUEST, ANSWER_TEXT, ANSWER_CALLS, ANSWER_BLOCKED] {
        let bytes = fixture.as_bytes();
        let mut bodies: Vec<Vec<u8>> = (0..bytes.len()).map(|n| bytes[..n].to_vec()).collect();
        for i in 0..bytes.len() {
            let mut flipped = bytes.to_vec();
            flipped[i] ^= 0x20;
            bodies.push(flipped);
        }
        for body in &bodies {
            let arena = crate::json::arena_for(body);
            if let Ok(Node::Object(object)) = parse_node(body, &arena) {
                let _ = parse_request(&object);
            }
            if let Ok(Node::Object(object)) = parse_answer_node(body, &arena) {
                let _ = parse_answer(&object, true);
            }
            if let Ok(Value::Object(mut map)) = serde_json::from_slice::<Value>(body) {
                let _ = withhold(&mut map, REPLY);
            }
        }
    }
}
