//! Converse bodies as botocore's service model shapes them (boto/botocore
//! `botocore/data/bedrock-runtime/2023-09-30/service-2.json`) and as the AWS user guide's tool-use
//! and guardrail examples send them, and the filter's bodies read back through serde types shaped
//! as that model's `ConverseResponse` (its required members required, its enums closed).

use serde::Deserialize;
use serde_json::{json, Value};

use super::*;
use crate::json::{parse_answer_node, parse_node, Node};

const REPLY: &str = "I cannot help with that. Never share a password in this conversation.";

/// A multi-turn request with a tool round: system text, a guardrail-wrapped system block and a
/// cache point, an image and a document, the model's own turn with a tool use and reasoning, the
/// tool's result, and a last user turn whose question is wrapped for the guardrail.
const REQUEST: &str = r#"{
  "system": [
    {"text": "You answer questions about orders."},
    {"guardContent": {"text": {"text": "Never reveal card numbers.", "qualifiers": ["guard_content"]}}},
    {"cachePoint": {"type": "default"}}
  ],
  "messages": [
    {"role": "user", "content": [
      {"text": "Where is order 17?"},
      {"image": {"format": "png", "source": {"bytes": "cGFzc3dvcmQ="}}},
      {"document": {"format": "txt", "name": "password notes", "source": {"bytes": "cGFzc3dvcmQ="}}},
      {"video": {"format": "mp4", "source": {"s3Location": {"uri": "s3://bucket/password.mp4"}}}}
    ]},
    {"role": "assistant", "content": [
      {"reasoningContent": {"reasoningText": {"text": "the password is hunter2", "signature": "sig"}}},
      {"text": "Let me look that up, my password is hunter2."},
      {"toolUse": {"toolUseId": "tooluse_1", "name": "lookup", "input": {"order": 17, "note": "password"}}}
    ]},
    {"role": "user", "content": [
      {"toolResult": {"toolUseId": "tooluse_1", "content": [{"text": "shipped, password secret"}, {"json": {"status": "password"}}], "status": "success"}}
    ]},
    {"role": "user", "content": [
      {"guardContent": {"text": {"text": "And when does it arrive?"}}},
      {"cachePoint": {"type": "default"}},
      {"text": "Today?"}
    ]}
  ],
  "toolConfig": {"tools": [{"toolSpec": {"name": "lookup", "description": "Finds an order password",
    "inputSchema": {"json": {"type": "object", "properties": {"order": {"type": "integer"}}}}}}]},
  "inferenceConfig": {"maxTokens": 512, "temperature": 0.5, "stopSequences": ["password"]},
  "guardrailConfig": {"guardrailIdentifier": "gr-1", "guardrailVersion": "1", "trace": "enabled"},
  "additionalModelRequestFields": {"top_k": 200, "note": "password"}
}"#;

/// A text answer with reasoning first (a Claude model with thinking on), as `ConverseResponse`
/// shapes it.
const ANSWER_TEXT: &str = r#"{
  "output": {"message": {"role": "assistant", "content": [
    {"reasoningContent": {"reasoningText": {"text": "the IBAN is NL91ABNA0417164300", "signature": "EqQB"}}},
    {"text": "Your order "},
    {"text": "ships tomorrow."}
  ]}},
  "stopReason": "end_turn",
  "usage": {"inputTokens": 12, "outputTokens": 30, "totalTokens": 142,
    "cacheReadInputTokens": 80, "cacheWriteInputTokens": 20},
  "metrics": {"latencyMs": 1375},
  "additionalModelResponseFields": {"stop_sequence": null}
}"#;

/// An answer asking for two tools (the user guide's tool-use example, `stopReason: tool_use`), a
/// server tool Bedrock ran beside them.
const ANSWER_CALLS: &str = r#"{
  "output": {"message": {"role": "assistant", "content": [
    {"text": "Checking both."},
    {"toolUse": {"toolUseId": "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", "name": "top_song", "input": {"sign": "WZPZ"}}},
    {"toolUse": {"toolUseId": "tooluse_2", "name": "start_music", "input": {"energetic": true, "playlist": "password 12", "volume": 7}}},
    {"toolUse": {"toolUseId": "srvtooluse_3", "name": "web_search", "input": {"query": "password leak"}, "type": "server_tool_use"}}
  ]}},
  "stopReason": "tool_use",
  "usage": {"inputTokens": 375, "outputTokens": 80, "totalTokens": 455},
  "metrics": {"latencyMs": 2201}
}"#;

/// An answer a guardrail traced: its trace quotes the model's output and what matched.
const ANSWER_TRACED: &str = r#"{
  "output": {"message": {"role": "assistant", "content": [
    {"citationsContent": {"content": [{"text": "The refund window is 30 days."}],
      "citations": [{"title": "policy", "sourceContent": [{"text": "30 days"}], "location": {"documentChar": {"documentIndex": 0, "start": 0, "end": 7}}}]}},
    {"text": " Card 4111 1111 1111 1111."}
  ]}},
  "stopReason": "end_turn",
  "usage": {"inputTokens": 40, "outputTokens": 15, "totalTokens": 55},
  "metrics": {"latencyMs": 900},
  "trace": {"guardrail": {"modelOutput": ["The refund window is 30 days. Card 4111 1111 1111 1111."],
      "outputAssessments": {"gr-1": [{"sensitiveInformationPolicy": {"piiEntities": [{"match": "4111 1111 1111 1111", "type": "CREDIT_DEBIT_CARD_NUMBER", "action": "NONE"}], "regexes": []}}]}},
    "promptRouter": {"invokedModelId": "arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-3-haiku-20240307-v1:0"}},
  "performanceConfig": {"latency": "standard"}
}"#;

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
        Node::Object(object) => parse_answer(body.as_bytes(), &object, true),
        _ => panic!("not an object"),
    }
}

fn error_text(result: Result<impl std::fmt::Debug, FieldError>) -> String {
    result.unwrap_err().to_string()
}

/// `ConverseResponse` as the service model shapes it: `required` members are not `Option`s,
/// `StopReason` and `ConversationRole` are closed enums, and an unknown member is refused, so a
/// body that reads here holds what botocore's model says it must and nothing it does not know.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ModelResponse {
    output: ModelOutput,
    stop_reason: ModelStopReason,
    usage: ModelUsage,
    metrics: ModelMetrics,
    additional_model_response_fields: Option<Value>,
    trace: Option<Value>,
    performance_config: Option<Value>,
    service_tier: Option<Value>,
}

/// `ConverseOutput`: a union whose one member is `message`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelOutput {
    message: ModelMessage,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelMessage {
    role: ModelRole,
    content: Vec<ModelBlock>,
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "lowercase")]
enum ModelRole {
    User,
    Assistant,
    System,
}

/// A `ContentBlock` of the answer, as far as the filter writes one: the `text` member alone.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelBlock {
    text: String,
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
enum ModelStopReason {
    EndTurn,
    ToolUse,
    MaxTokens,
    StopSequence,
    GuardrailIntervened,
    ContentFiltered,
    MalformedModelOutput,
    MalformedToolUse,
    ModelContextWindowExceeded,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ModelUsage {
    input_tokens: u64,
    output_tokens: u64,
    total_tokens: u64,
    cache_read_input_tokens: Option<u64>,
    cache_write_input_tokens: Option<u64>,
    cache_details: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ModelMetrics {
    latency_ms: i64,
}

#[test]
fn input_reads_system_guarded_text_and_the_callers_text_only() {
    let req = request(REQUEST).unwrap();
    assert_eq!(
        req.input_text,
        "You answer questions about orders.\nNever reveal card numbers.\n\
         Where is order 17?\nAnd when does it arrive?\nToday?"
    );
    assert!(
        !req.input_text.contains("password"),
        "images, documents, tool rounds, settings"
    );
    assert!(!req.input_text.contains("hunter2"), "the model's own turn");
    assert!(!req.stream, "the path decides a stream: converse-stream");
    assert_eq!(req.model, None, "the path names the model");
}

#[test]
fn the_intent_is_each_user_message_with_text_and_a_tool_result_turn_is_skipped() {
    let req = request(REQUEST).unwrap();
    assert_eq!(
        req.intent(),
        ["Where is order 17?", "And when does it arrive?\nToday?"]
    );
    assert_eq!(req.last_user_text(), "And when does it arrive?\nToday?");
}

#[test]
fn prompt_variables_are_read_as_the_prompts_values_in_the_order_of_their_names() {
    let req = request(
        r#"{"promptVariables": {"topic": {"text": "refunds"}, "customer": {"text": "Ana"}},
            "messages": [{"role": "user", "content": [{"text": "and exchanges?"}]}]}"#,
    )
    .unwrap();
    assert_eq!(req.input_text, "Ana\nrefunds\nand exchanges?");
    assert_eq!(req.intent(), ["and exchanges?"]);
    // A stored prompt holds the messages: a request may send none.
    let req = request(r#"{"promptVariables": {"topic": {"text": "refunds"}}}"#).unwrap();
    assert_eq!(req.input_text, "refunds");
    assert!(req.intent().is_empty());
}

#[test]
fn a_system_role_message_is_read_and_is_no_intent() {
    let req = request(
        r#"{"messages": [{"role": "system", "content": [{"text": "Be brief."}]},
                         {"role": "user", "content": [{"text": "Hi"}]}]}"#,
    )
    .unwrap();
    assert_eq!(req.input_text, "Be brief.\nHi");
    assert_eq!(req.intent(), ["Hi"]);
}

#[test]
fn cited_text_a_caller_sends_is_read_and_search_results_are_not() {
    let req = request(
        r#"{"messages": [{"role": "user", "content": [
            {"citationsContent": {"content": [{"text": "quoted"}], "citations": []}},
            {"searchResult": {"source": "s", "title": "t", "content": [{"text": "password"}]}},
            {"audio": {"format": "mp3", "source": {"bytes": "AA=="}}},
            {"someFutureBlock": {"text": "password"}}]}]}"#,
    )
    .unwrap();
    assert_eq!(req.input_text, "quoted");
}

#[test]
fn a_request_that_is_not_the_documented_shape_is_refused_naming_the_field() {
    let cases = [
        (r#"{"messages": {}}"#, "messages must be an array"),
        (r#"{"messages": [1]}"#, "messages[0] must be an object"),
        (
            r#"{"messages": [{"content": []}]}"#,
            "messages[0].role must be a string",
        ),
        (
            r#"{"messages": [{"role": "user"}]}"#,
            "messages[0].content must be an array",
        ),
        (
            r#"{"messages": [{"role": "user", "content": "Hi"}]}"#,
            "messages[0].content must be an array",
        ),
        (
            r#"{"messages": [{"role": "user", "content": ["Hi"]}]}"#,
            "messages[0].content[0] must be an object",
        ),
        (
            r#"{"messages": [{"role": "user", "content": [{"text": 3}]}]}"#,
            "messages[0].content[0].text must be a string",
        ),
        (
            r#"{"messages": [{"role": "assistant", "content": [{"text": ["x"]}]}]}"#,
            "messages[0].content[0].text must be a string",
        ),
        (
            r#"{"messages": [{"role": "user", "content": [{"guardContent": "x"}]}]}"#,
            "messages[0].content[0].guardContent must be an object",
        ),
        (
            r#"{"messages": [{"role": "user", "content": [{"guardContent": {"text": "x"}}]}]}"#,
            "messages[0].content[0].guardContent.text must be an object",
        ),
        (
            r#"{"messages": [{"role": "user", "content": [{"guardContent": {"text": {}}}]}]}"#,
            "messages[0].content[0].guardContent.text.text must be a string",
        ),
        (
            r#"{"messages": [{"role": "user", "content": [{"citationsContent": {"content": [{"text": 1}]}}]}]}"#,
            "messages[0].content[0].citationsContent.content[0].text must be a string",
        ),
        (r#"{"system": "Be brief."}"#, "system must be an array"),
        (
            r#"{"system": ["Be brief."]}"#,
            "system[0] must be an object",
        ),
        (
            r#"{"system": [{"text": 1}]}"#,
            "system[0].text must be a string",
        ),
        (
            r#"{"system": [{"guardContent": {"text": {"text": null}}}]}"#,
            "system[0].guardContent.text.text must be a string",
        ),
        (
            r#"{"promptVariables": []}"#,
            "promptVariables must be an object",
        ),
        (
            r#"{"promptVariables": {"a": "x"}}"#,
            "promptVariables.a must be an object",
        ),
        (
            r#"{"promptVariables": {"a": {"text": 1}}}"#,
            "promptVariables.a.text must be a string",
        ),
    ];
    for (body, message) in cases {
        assert_eq!(error_text(request(body)), message, "{body}");
    }
}

#[test]
fn answer_text_is_its_text_blocks_never_its_reasoning_and_it_has_no_id() {
    let answer = answer(ANSWER_TEXT).unwrap();
    assert_eq!(answer.text, "Your order ships tomorrow.");
    assert_eq!(
        answer.rule_text.as_deref(),
        Some("Your order ships tomorrow.")
    );
    assert!(!answer.asks_for_tool);
    assert!(answer.calls.is_empty());
    assert_eq!(
        answer.id, None,
        "Converse's request id is the x-amzn-requestid header"
    );
}

#[test]
fn tool_uses_are_tool_calls_with_their_input_as_json_and_a_server_tool_is_none() {
    let answer = answer(ANSWER_CALLS).unwrap();
    assert_eq!(answer.text, "Checking both.");
    assert!(answer.asks_for_tool);
    assert_eq!(
        answer.calls,
        [
            ToolCall {
                name: "top_song".into(),
                arguments: r#"{"sign": "WZPZ"}"#.into(),
                json: true
            },
            ToolCall {
                name: "start_music".into(),
                arguments: r#"{"energetic": true, "playlist": "password 12", "volume": 7}"#.into(),
                json: true
            },
        ]
    );
    let arguments: Value = serde_json::from_str(&answer.calls[1].arguments).unwrap();
    assert_eq!(arguments["volume"], 7);
    let rule_text = answer.rule_text.unwrap();
    assert!(
        rule_text.starts_with("Checking both.\nWZPZ\n"),
        "{rule_text}"
    );
    assert!(rule_text.contains("password 12"));
    assert!(
        rule_text.contains("password leak"),
        "a server tool's input reaches rule checks"
    );
}

#[test]
fn tool_use_input_keeps_its_digits_as_written() {
    let paid = answer(
        r#"{"output": {"message": {"role": "assistant", "content": [
              {"toolUse": {"toolUseId": "t1", "name": "pay", "input": {"amount": 100.50, "to": 12345678901234567890123}}}]}},
            "stopReason": "tool_use"}"#,
    )
    .unwrap();
    assert_eq!(
        paid.calls[0].arguments,
        r#"{"amount": 100.50, "to": 12345678901234567890123}"#
    );
    assert!(paid.rule_text.unwrap().contains("100.50"));
    // Where the raw read cannot follow the shape (a key written twice), the parsed input is used.
    let paid = answer(
        r#"{"output": {"message": {"role": "assistant", "content": [
              {"toolUse": {"toolUseId": "t1", "name": "pay", "input": {"amount": 1}, "input": {"amount": 2}}}]}},
            "stopReason": "tool_use"}"#,
    )
    .unwrap();
    assert_eq!(paid.calls[0].arguments, r#"{"amount":2}"#);
}

#[test]
fn a_tool_use_without_input_calls_with_no_arguments_and_only_tool_use_asks() {
    let answer = answer(
        r#"{"output": {"message": {"role": "assistant", "content": [
              {"toolUse": {"toolUseId": "t1", "name": "now"}}]}},
            "stopReason": "max_tokens"}"#,
    )
    .unwrap();
    assert_eq!(answer.calls[0].arguments, "{}");
    assert!(
        !answer.asks_for_tool,
        "asks only when stopReason is tool_use"
    );
}

#[test]
fn cited_content_is_answer_text() {
    let answer = answer(ANSWER_TRACED).unwrap();
    assert_eq!(
        answer.text,
        "The refund window is 30 days. Card 4111 1111 1111 1111."
    );
}

#[test]
fn usage_counts_cache_reads_and_writes_apart_from_input() {
    let body: Value = serde_json::from_str(ANSWER_TEXT).unwrap();
    assert_eq!(
        usage(&body["usage"]),
        Some(Usage {
            input_tokens: 12,
            output_tokens: 30,
            cache_read_tokens: 80,
            cache_creation_tokens: 20,
            reasoning_tokens: 0,
        })
    );
    assert_eq!(
        usage(&json!({"inputTokens": 3, "outputTokens": 4, "totalTokens": 7})),
        Some(Usage {
            input_tokens: 3,
            output_tokens: 4,
            ..Usage::default()
        })
    );
    assert_eq!(usage(&json!({"outputTokens": 3})), None);
    assert_eq!(usage(&json!({"inputTokens": 3})), None);
    assert_eq!(usage(&json!({"inputTokens": "3", "outputTokens": 4})), None);
}

#[test]
fn an_answer_not_in_the_documented_shape_is_unreadable() {
    let cases = [
        (r#"{}"#, "output must be an object"),
        (r#"{"output": []}"#, "output must be an object"),
        (r#"{"output": {}}"#, "output.message must be an object"),
        (
            r#"{"output": {"message": {}}}"#,
            "output.message.content must be an array",
        ),
        (
            r#"{"output": {"message": {"content": [[]]}}}"#,
            "output.message.content[0] must be an object",
        ),
        (
            r#"{"output": {"message": {"content": [{"text": 1}]}}}"#,
            "output.message.content[0].text must be a string",
        ),
        (
            r#"{"output": {"message": {"content": [{"toolUse": {"input": {}}}]}}}"#,
            "output.message.content[0].toolUse.name must be a string",
        ),
        (
            r#"{"output": {"message": {"content": [{"toolUse": []}]}}}"#,
            "output.message.content[0].toolUse must be an object",
        ),
        (
            r#"{"output": {"message": {"content": [{"citationsContent": {"content": {}}}]}}}"#,
            "output.message.content[0].citationsContent.content must be an array",
        ),
        (
            r#"{"output": {"message": {"content": []}}, "stopReason": 1}"#,
            "stopReason must be a string",
        ),
    ];
    for (body, message) in cases {
        assert_eq!(error_text(answer(body)), message, "{body}");
    }
}

#[test]
fn a_refused_question_is_bedrocks_guardrail_stop_with_every_required_member() {
    let body = refusal(REPLY);
    let read: ModelResponse = serde_json::from_slice(&body).unwrap();
    assert_eq!(read.stop_reason, ModelStopReason::GuardrailIntervened);
    assert_eq!(read.output.message.role, ModelRole::Assistant);
    assert_eq!(read.output.message.content.len(), 1);
    assert_eq!(read.output.message.content[0].text, REPLY);
    assert_eq!(
        (
            read.usage.input_tokens,
            read.usage.output_tokens,
            read.usage.total_tokens
        ),
        (0, 0, 0)
    );
    assert_eq!(read.metrics.latency_ms, 0);
    assert!(read.usage.cache_read_input_tokens.is_none() && read.usage.cache_details.is_none());
    assert!(read.trace.is_none() && read.additional_model_response_fields.is_none());
    // And livecheck's own reader reads it as the reply, asking for nothing.
    let answer = answer(std::str::from_utf8(&body).unwrap()).unwrap();
    assert_eq!(answer.text, REPLY);
    assert!(answer.calls.is_empty() && !answer.asks_for_tool);
}

#[test]
fn the_fixtures_are_the_service_models_shape_but_their_blocks() {
    // The answers above are ConverseResponses by the model's members (their blocks are richer than
    // the text-only block the filter writes, so they are checked up to `output`).
    for fixture in [ANSWER_TEXT, ANSWER_CALLS, ANSWER_TRACED] {
        let mut body: Value = serde_json::from_str(fixture).unwrap();
        body["output"]["message"]["content"] = json!([]);
        serde_json::from_value::<ModelResponse>(body).unwrap();
    }
}

#[test]
fn a_withheld_answer_keeps_usage_and_metrics_and_drops_the_tool_uses() {
    let mut body = serde_json::from_str::<Value>(ANSWER_CALLS).unwrap();
    let Value::Object(map) = &mut body else {
        panic!()
    };
    withhold(map, REPLY).unwrap();
    let read: ModelResponse = serde_json::from_value(body.clone()).unwrap();
    assert_eq!(read.stop_reason, ModelStopReason::GuardrailIntervened);
    assert_eq!(read.output.message.content[0].text, REPLY);
    assert_eq!(
        (
            read.usage.input_tokens,
            read.usage.output_tokens,
            read.usage.total_tokens
        ),
        (375, 80, 455)
    );
    assert_eq!(read.metrics.latency_ms, 2201);
    let answer = answer(&body.to_string()).unwrap();
    assert_eq!(answer.text, REPLY);
    assert!(answer.calls.is_empty() && !answer.asks_for_tool);
}

#[test]
fn a_withheld_answer_drops_what_quotes_the_withheld_text() {
    let mut body = serde_json::from_str::<Value>(ANSWER_TRACED).unwrap();
    let Value::Object(map) = &mut body else {
        panic!()
    };
    withhold(map, REPLY).unwrap();
    let text = body.to_string();
    assert!(!text.contains("4111"), "{text}");
    assert!(!text.contains("30 days"), "{text}");
    let read: ModelResponse = serde_json::from_value(body).unwrap();
    assert_eq!(
        read.trace,
        Some(
            json!({"promptRouter": {"invokedModelId": "arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-3-haiku-20240307-v1:0"}})
        )
    );
    assert_eq!(
        read.performance_config,
        Some(json!({"latency": "standard"}))
    );
    assert_eq!(read.service_tier, None);
    let mut body = serde_json::from_str::<Value>(ANSWER_TEXT).unwrap();
    let Value::Object(map) = &mut body else {
        panic!()
    };
    withhold(map, REPLY).unwrap();
    let read: ModelResponse = serde_json::from_value(body).unwrap();
    assert_eq!(read.additional_model_response_fields, None);
    assert_eq!(
        (
            read.usage.cache_read_input_tokens,
            read.usage.cache_write_input_tokens
        ),
        (Some(80), Some(20))
    );
}

#[test]
fn a_body_without_output_is_not_withheld_as_an_answer() {
    for body in [
        json!({}),
        json!({"output": "x"}),
        json!({"message": "Rate exceeded"}),
    ] {
        let Value::Object(mut map) = body else {
            panic!()
        };
        assert_eq!(
            withhold(&mut map, REPLY).unwrap_err().to_string(),
            "output must be an object"
        );
    }
}

#[test]
fn every_prefix_and_byte_flip_of_every_fixture_is_read_without_panic() {
    for fixture in [REQUEST, ANSWER_TEXT, ANSWER_CALLS, ANSWER_TRACED] {
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
                let _ = parse_answer(body, &object, true);
            }
            if let Ok(Value::Object(mut map)) = serde_json::from_slice::<Value>(body) {
                let _ = withhold(&mut map, REPLY);
            }
        }
    }
}
