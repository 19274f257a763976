use serde_json::{json, Value};

use super::fixtures::*;
use super::*;

const REPLY: &str = "I cannot help with that. Never share a password in this conversation.";
const ALL: [Api; 3] = [Api::AnthropicMessages, Api::ChatCompletions, Api::Responses];

fn ids() -> Ids {
    Ids {
        token: "0123abcd".into(),
        created: 1_760_000_000,
    }
}

fn request(stream: bool) -> Request {
    Request {
        input_text: "password".into(),
        user_texts: std::iter::once(0..8).collect(),
        stream,
        background: false,
        include_usage: true,
        json_array: false,
        model: Some("some-model".into()),
        ..Request::default()
    }
}

fn json_of(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

/// The SSE events of a body the filter wrote: (event name, data).
fn events(body: &[u8]) -> Vec<(Option<String>, String)> {
    let text = std::str::from_utf8(body).unwrap();
    assert!(text.ends_with("\n\n"));
    text.split_terminator("\n\n")
        .map(|event| {
            let mut name = None;
            let mut data = None;
            for line in event.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = Some(n.to_owned());
                } else if let Some(d) = line.strip_prefix("data: ") {
                    assert!(data.is_none(), "one data line per event");
                    data = Some(d.to_owned());
                } else {
                    panic!("unexpected line {line:?}");
                }
            }
            (name, data.unwrap())
        })
        .collect()
}

#[test]
fn api_is_chosen_by_method_and_path_suffix() {
    let cases = [
        ("POST", "/v1/messages", Some(Api::AnthropicMessages)),
        (
            "POST",
            "/v1/messages?beta=true",
            Some(Api::AnthropicMessages),
        ),
        (
            "POST",
            "/anthropic/v1/messages/",
            Some(Api::AnthropicMessages),
        ),
        ("POST", "/v1/chat/completions", Some(Api::ChatCompletions)),
        (
            "POST",
            "/openai/v1/chat/completions?x=1",
            Some(Api::ChatCompletions),
        ),
        ("POST", "/v1/responses", Some(Api::Responses)),
        ("GET", "/v1/responses", None),
        ("POST", "/v1/responses/resp_1/cancel", None),
        ("POST", "/v1/messages/count_tokens", None),
        ("POST", "/v1/messagesx", None),
        ("POST", "/v1/models", None),
        ("POST", "", None),
    ];
    for (method, path, api) in cases {
        assert_eq!(
            endpoint(method, path).map(|e| e.api),
            api,
            "{method} {path}"
        );
    }
}

#[test]
fn anthropic_input_reads_system_and_user_text_only() {
    let req = parse_request(Api::AnthropicMessages, ANTHROPIC_REQUEST.as_bytes()).unwrap();
    assert_eq!(
        req.input_text,
        "You answer questions about orders.\nWhere is order 17?\nAnd when does it arrive?"
    );
    assert_eq!(req.last_user_text(), "And when does it arrive?");
    assert!(req.stream && !req.background);
    assert_eq!(req.model.as_deref(), Some("claude-sonnet-4-5"));
}

#[test]
fn chat_input_reads_system_developer_and_user_text_only() {
    let req = parse_request(Api::ChatCompletions, CHAT_REQUEST.as_bytes()).unwrap();
    assert_eq!(
        req.input_text,
        "You answer questions about orders.\nBe brief.\nWhere is order 17?"
    );
    assert_eq!(req.last_user_text(), "Where is order 17?");
    assert!(req.stream && req.include_usage);
}

#[test]
fn responses_input_reads_instructions_prompt_values_and_caller_messages() {
    let req = parse_request(Api::Responses, RESPONSES_REQUEST.as_bytes()).unwrap();
    // Prompt variables in name order: customer, topic.
    assert_eq!(
        req.input_text,
        "You answer questions about orders.\nAda\nrefunds\nBe brief.\nWhere is order 17?"
    );
    assert!(!req.input_text.contains("password"));
    assert_eq!(req.last_user_text(), "Where is order 17?");
    assert!(req.background && !req.stream);
}

#[test]
fn responses_string_input_is_the_user_message() {
    let req = parse_request(Api::Responses, br#"{"model":"m","input":"hi there"}"#).unwrap();
    assert_eq!(req.input_text, "hi there");
    assert_eq!(req.last_user_text(), "hi there");
}

#[test]
fn an_unexpected_role_is_read_rather_than_skipped() {
    let body = br#"{"messages":[{"role":"system","content":"secret password"}]}"#;
    for api in [Api::AnthropicMessages, Api::ChatCompletions] {
        assert_eq!(
            parse_request(api, body).unwrap().input_text,
            "secret password"
        );
    }
}

#[test]
fn a_repeated_key_is_refused_at_any_depth() {
    let bodies: [&[u8]; 3] = [
        br#"{"messages":[],"messages":[{"role":"user","content":"password"}]}"#,
        br#"{"messages":[{"role":"user","content":"hi","content":"password"}]}"#,
        br#"{"messages":[],"mess\u0061ges":[]}"#,
    ];
    for body in bodies {
        let err = parse_request(Api::ChatCompletions, body).unwrap_err();
        assert!(err.message().contains("duplicate key"), "{err}");
    }
}

/// Found by the `request_text` fuzz target (its oracle, not the filter, was wrong): a body that
/// repeats a key and is broken JSON after it is refused for the first fault read, the repeated key.
#[test]
fn a_repeated_key_before_broken_json_is_refused_as_repeated() {
    let body = br#"{"metadata":{"a":1,"a":2},"messages":[}"#;
    assert!(serde_json::from_slice::<Value>(body).is_err());
    for api in ALL {
        let err = parse_request(api, body).unwrap_err();
        assert!(err.message().contains("duplicate key"), "{api:?}: {err}");
    }
}

#[test]
fn a_repeated_key_among_many_members_is_refused() {
    let members: Vec<String> = (0..40).map(|i| format!("\"k{i}\":{i}")).collect();
    let body = format!(
        "{{\"messages\":[{{\"role\":\"user\",\"content\":\"hi\",\"meta\":{{{},\"k\\u0037\":1}}}}]}}",
        members.join(",")
    );
    let err = parse_request(Api::ChatCompletions, body.as_bytes()).unwrap_err();
    assert!(err.message().contains("duplicate key"), "{err}");
}

#[test]
fn the_request_tree_reads_every_value_as_serde_json_does() {
    let bodies = [
        ANTHROPIC_REQUEST,
        CHAT_REQUEST,
        RESPONSES_REQUEST,
        r#"{"a":"tab\there \u00e9 \ud83d\ude00 \"q\" \\","n":[-0.5e3,18446744073709551615,-9223372036854775808,1.0],"t":true,"z":null,"o":{}}"#,
    ];
    for body in bodies {
        let strict = json::parse_strict(body.as_bytes()).unwrap();
        assert_eq!(strict, serde_json::from_str::<Value>(body).unwrap());
    }
}

#[test]
fn an_answer_key_written_twice_counts_with_its_last_value() {
    let body =
        br#"{"id":"a","id":"b","choices":[{"message":{"content":"first","content":"second"}}]}"#;
    let answer = parse_answer(Api::ChatCompletions, body, true).unwrap();
    assert_eq!(
        (answer.id.as_deref(), answer.text.as_str()),
        (Some("b"), "second")
    );
}

#[test]
fn prompt_variables_are_read_in_the_order_of_their_names() {
    let body = br#"{"input":"x","prompt":{"id":"p","variables":{"zeta":"last","alpha":"first"}}}"#;
    let req = parse_request(Api::Responses, body).unwrap();
    assert_eq!(req.input_text, "first\nlast\nx");
}

#[test]
fn bad_requests_are_named_without_quoting_the_body() {
    let cases: [(Api, &[u8], &str); 10] = [
        (Api::ChatCompletions, b"\xff{\"password\"}", "not UTF-8"),
        (Api::ChatCompletions, b"{\"password\": ", "not valid JSON"),
        (Api::ChatCompletions, b"{} password", "not valid JSON"),
        (
            Api::ChatCompletions,
            b"[\"password\"]",
            "must be a JSON object",
        ),
        (
            Api::ChatCompletions,
            b"{\"password\": 1}",
            "messages must be an array",
        ),
        (
            Api::AnthropicMessages,
            br#"{"messages":[{"role":"user","content":7}]}"#,
            "messages[0].content must be",
        ),
        (
            Api::AnthropicMessages,
            br#"{"messages":[{"role":"user","content":[{"type":"text","text":{"password":1}}]}]}"#,
            "messages[0].content[0].text must be a string",
        ),
        (
            Api::ChatCompletions,
            br#"{"messages":[],"stream":"password"}"#,
            "stream must be a boolean",
        ),
        (
            Api::Responses,
            br#"{"input":{"password":1}}"#,
            "input must be a string or an array",
        ),
        (
            Api::Responses,
            br#"{"input":"x","prompt":{"variables":{"password":[1]}}}"#,
            "prompt.variables values",
        ),
    ];
    for (api, body, expected) in cases {
        let err = parse_request(api, body).unwrap_err();
        assert!(err.message().contains(expected), "{err}");
        assert!(!err.message().contains("password"), "{err}");
    }
}

#[test]
fn deep_nesting_is_refused_without_exhausting_the_stack() {
    let deep = format!(
        "{{\"messages\":{}{}}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    for api in ALL {
        assert!(parse_request(api, deep.as_bytes()).is_err());
        assert!(parse_answer(api, deep.as_bytes(), true).is_err());
        assert!(withheld(api, deep.as_bytes(), REPLY).is_err());
    }
}

#[test]
fn anthropic_answer_text_is_its_text_blocks_never_thinking() {
    let answer = parse_answer(
        Api::AnthropicMessages,
        ANTHROPIC_ANSWER_TEXT.as_bytes(),
        true,
    )
    .unwrap();
    assert_eq!(answer.text, "Your order ships tomorrow.");
    assert_eq!(answer.rule_text.as_deref().unwrap(), answer.text);
    assert!(!answer.asks_for_tool);
    assert_eq!(answer.id.as_deref(), Some("msg_01XFDUDYJgAACzvnptvVoYEL"));
}

#[test]
fn anthropic_rule_text_carries_tool_input_values_as_written() {
    let answer = parse_answer(
        Api::AnthropicMessages,
        ANTHROPIC_ANSWER_TOOL.as_bytes(),
        true,
    )
    .unwrap();
    assert_eq!(answer.text, "Sending it now.");
    assert_eq!(
        answer.rule_text.as_deref().unwrap(),
        "Sending it now.\nNL91ABNA0417164300\n12345678901234567890123\ntrue\na\nb\n1.50\n"
    );
    assert!(answer.asks_for_tool);
}

/// Found by the `tool_calls` fuzz target (its oracle expected `asks_for_tool` beside every call): an
/// Anthropic answer without `stop_reason` does not ask for a tool, yet its `tool_use` blocks are still
/// read as calls, so tool-call checks see every call an SDK could run.
#[test]
fn anthropic_tool_use_blocks_are_read_whatever_the_stop_reason() {
    let mut body: Value = serde_json::from_str(ANTHROPIC_ANSWER_TOOL).unwrap();
    body.as_object_mut().unwrap().remove("stop_reason");
    let answer = parse_answer(Api::AnthropicMessages, body.to_string().as_bytes(), true).unwrap();
    assert!(!answer.asks_for_tool);
    let names: Vec<&str> = answer.calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["pay", "noop"]);
    assert!(answer
        .rule_text
        .as_deref()
        .unwrap()
        .contains("NL91ABNA0417164300"));
}

/// Found by the `tool_calls` fuzz target: a `tool_use` block without `input` gave the call empty
/// arguments (not JSON, though the call says it is); it is a call with no arguments, `{}`.
#[test]
fn an_anthropic_tool_use_without_input_has_no_arguments() {
    let mut body: Value = serde_json::from_str(ANTHROPIC_ANSWER_TOOL).unwrap();
    body["content"][1].as_object_mut().unwrap().remove("input");
    let answer = parse_answer(Api::AnthropicMessages, body.to_string().as_bytes(), true).unwrap();
    let call = &answer.calls[0];
    assert_eq!(
        (call.name.as_str(), call.arguments.as_str(), call.json),
        ("pay", "{}", true)
    );
    assert!(answer.asks_for_tool);
}

#[test]
fn chat_answer_reads_every_choice_and_every_tool_call() {
    let answer = parse_answer(Api::ChatCompletions, CHAT_ANSWER_TOOL.as_bytes(), true).unwrap();
    assert_eq!(answer.text, "Paying now. Second choice.");
    assert_eq!(
        answer.rule_text.as_deref().unwrap(),
        "Paying now. Second choice.\nNL91ABNA0417164300\n1e2\nfalse\nnot json at all\necho {\"x\": 1}"
    );
    assert!(answer.asks_for_tool);
}

#[test]
fn chat_asks_for_tool_on_finish_reason_or_tool_calls() {
    let by_reason = br#"{"choices":[{"message":{"content":"x"},"finish_reason":"tool_calls"}]}"#;
    let by_calls = br#"{"choices":[{"message":{"content":null,"tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"stop"}]}"#;
    let plain =
        br#"{"choices":[{"message":{"content":"x","tool_calls":[]},"finish_reason":"stop"}]}"#;
    assert!(
        parse_answer(Api::ChatCompletions, by_reason, true)
            .unwrap()
            .asks_for_tool
    );
    assert!(
        parse_answer(Api::ChatCompletions, by_calls, true)
            .unwrap()
            .asks_for_tool
    );
    assert!(
        !parse_answer(Api::ChatCompletions, plain, true)
            .unwrap()
            .asks_for_tool
    );
}

#[test]
fn responses_answer_reads_output_text_and_tool_arguments_never_reasoning() {
    let answer = parse_answer(Api::Responses, RESPONSES_ANSWER.as_bytes(), true).unwrap();
    assert_eq!(answer.text, "Your order ships tomorrow.");
    assert_eq!(
        answer.rule_text.as_deref().unwrap(),
        "Your order ships tomorrow.\norder 17 status\nsearch\nNL91ABNA0417164300\n12"
    );
    assert!(answer.asks_for_tool);
}

#[test]
fn a_hosted_tool_call_does_not_ask_the_caller_for_a_tool() {
    let answer = parse_answer(
        Api::Responses,
        RESPONSES_ANSWER_HOSTED_ONLY.as_bytes(),
        true,
    )
    .unwrap();
    assert_eq!(answer.text, "Sunny.");
    assert!(!answer.asks_for_tool);
}

/// Argument values are the strings decoded (escaped or not, empty included), numbers and
/// booleans as written, keys and `null` left out; calls keep their name and arguments as written,
/// a custom tool its free input; an entry that is not an object names nothing.
#[test]
fn chat_tool_calls_are_read_with_their_values_decoded() {
    let args = r#"{"to":"a@b.example","n":[1,-2.5e3,true,null],"s":"line\nbreak \"q\" \u00e9\\","e":"","k":{"deep":"x"}}"#;
    let body = json!({"id": "chatcmpl-1", "choices": [{"message": {"content": null, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "send", "arguments": args}},
        {"id": "c2", "type": "custom", "custom": {"name": "shell", "input": "ls \"-la\""}},
        "not an object",
        {"id": "c3", "type": "function", "function": "not an object"}]},
        "finish_reason": "tool_calls"}]});
    let answer = parse_answer(Api::ChatCompletions, body.to_string().as_bytes(), true).unwrap();
    assert_eq!(
        answer.rule_text.as_deref().unwrap(),
        "\na@b.example\n1\n-2.5e3\ntrue\nline\nbreak \"q\" é\\\n\nx\nls \"-la\"\n\n"
    );
    let calls: Vec<(&str, &str, bool)> = answer
        .calls
        .iter()
        .map(|c| (c.name.as_str(), c.arguments.as_str(), c.json))
        .collect();
    assert_eq!(
        calls,
        [
            ("send", args, true),
            ("shell", "ls \"-la\"", false),
            ("", "", false),
            ("", "", true)
        ]
    );
    assert_eq!(answer.id.as_deref(), Some("chatcmpl-1"));
}

#[test]
fn arguments_nested_past_the_parser_limit_are_read_as_text() {
    let args = format!(
        "{}\"NL91ABNA0417164300\"{}",
        "[".repeat(5_000),
        "]".repeat(5_000)
    );
    let body = json!({"choices": [{"message": {"content": "", "tool_calls": [
        {"type": "function", "function": {"name": "f", "arguments": args}}]}}]});
    let answer = parse_answer(Api::ChatCompletions, body.to_string().as_bytes(), true).unwrap();
    assert!(answer
        .rule_text
        .as_deref()
        .unwrap()
        .contains("NL91ABNA0417164300"));
}

#[test]
fn unreadable_answers_are_bad_answers() {
    for api in ALL {
        assert!(parse_answer(api, b"\xff", true).is_err());
        assert!(parse_answer(api, b"{", true).is_err());
        assert!(parse_answer(api, b"[]", true).is_err());
        assert!(parse_answer(api, b"{}", true).is_err());
        assert!(withheld(api, b"{}", REPLY).is_err());
    }
}

#[test]
fn anthropic_refusal_is_a_refusal_message_with_zero_usage() {
    let reply = refusal(Api::AnthropicMessages, REPLY, &request(false), &ids());
    assert_eq!(reply.content_type, "application/json");
    let body = json_of(&reply.body);
    assert_eq!(body["id"], "msg_0123abcd");
    assert_eq!(body["type"], "message");
    assert_eq!(body["model"], "some-model");
    assert_eq!(body["content"], json!([{"type": "text", "text": REPLY}]));
    assert_eq!(body["stop_reason"], "refusal");
    assert_eq!(body["stop_sequence"], Value::Null);
    assert_eq!(body["usage"]["output_tokens"], 0);
}

#[test]
fn anthropic_streamed_refusal_is_the_full_event_sequence() {
    let reply = refusal(Api::AnthropicMessages, REPLY, &request(true), &ids());
    assert_eq!(reply.content_type, "text/event-stream");
    let events = events(&reply.body);
    let names: Vec<_> = events.iter().map(|(n, _)| n.clone().unwrap()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    for (name, data) in &events {
        assert_eq!(json_of(data.as_bytes())["type"], name.as_deref().unwrap());
    }
    let delta = json_of(events[2].1.as_bytes());
    assert_eq!(delta["delta"], json!({"type": "text_delta", "text": REPLY}));
    let end = json_of(events[4].1.as_bytes());
    assert_eq!(end["delta"]["stop_reason"], "refusal");
    assert_eq!(end["usage"]["output_tokens"], 0);
}

#[test]
fn chat_refusal_ends_with_content_filter() {
    let body = json_of(&refusal(Api::ChatCompletions, REPLY, &request(false), &ids()).body);
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["id"], "chatcmpl-0123abcd");
    assert_eq!(body["created"], 1_760_000_000);
    assert_eq!(body["choices"][0]["message"]["content"], REPLY);
    assert_eq!(body["choices"][0]["finish_reason"], "content_filter");
}

#[test]
fn chat_streamed_refusal_is_chunks_then_done() {
    let mut req = request(true);
    let with_usage = refusal(Api::ChatCompletions, REPLY, &req, &ids());
    req.include_usage = false;
    let without_usage = refusal(Api::ChatCompletions, REPLY, &req, &ids());
    for (reply, chunks) in [(with_usage, 3), (without_usage, 2)] {
        let events = events(&reply.body);
        assert_eq!(events.len(), chunks + 1);
        assert!(events.iter().all(|(name, _)| name.is_none()));
        assert_eq!(events.last().unwrap().1, "[DONE]");
        let first = json_of(events[0].1.as_bytes());
        assert_eq!(first["object"], "chat.completion.chunk");
        assert_eq!(
            first["choices"][0]["delta"],
            json!({"role": "assistant", "content": REPLY})
        );
        let last = json_of(events[1].1.as_bytes());
        assert_eq!(last["choices"][0]["finish_reason"], "content_filter");
        if chunks == 3 {
            let usage = json_of(events[2].1.as_bytes());
            assert_eq!(usage["choices"], json!([]));
            assert_eq!(usage["usage"]["total_tokens"], 0);
        }
    }
}

#[test]
fn responses_refusal_is_incomplete_with_content_filter() {
    let body = json_of(&refusal(Api::Responses, REPLY, &request(false), &ids()).body);
    assert_eq!(body["object"], "response");
    assert_eq!(body["id"], "resp_0123abcd");
    assert_eq!(body["status"], "incomplete");
    assert_eq!(body["incomplete_details"]["reason"], "content_filter");
    assert_eq!(body["output"][0]["content"][0]["type"], "output_text");
    assert_eq!(body["output"][0]["content"][0]["text"], REPLY);
}

#[test]
fn responses_streamed_refusal_is_the_standard_event_sequence() {
    let reply = refusal(Api::Responses, REPLY, &request(true), &ids());
    let events = events(&reply.body);
    let names: Vec<_> = events.iter().map(|(n, _)| n.clone().unwrap()).collect();
    assert_eq!(
        names,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.incomplete"
        ]
    );
    for (i, (name, data)) in events.iter().enumerate() {
        let data = json_of(data.as_bytes());
        assert_eq!(data["type"], name.as_deref().unwrap());
        assert_eq!(data["sequence_number"], i);
    }
    let last = json_of(events[8].1.as_bytes());
    assert_eq!(
        last["response"]["incomplete_details"]["reason"],
        "content_filter"
    );
}

#[test]
fn withheld_anthropic_answer_keeps_id_and_usage_and_drops_tool_use() {
    let body = withheld(
        Api::AnthropicMessages,
        ANTHROPIC_ANSWER_TOOL.as_bytes(),
        REPLY,
    )
    .unwrap();
    let body = json_of(&body);
    assert_eq!(body["id"], "msg_01Tool");
    assert_eq!(
        body["usage"],
        json!({"input_tokens": 20, "output_tokens": 30})
    );
    assert_eq!(body["content"], json!([{"type": "text", "text": REPLY}]));
    assert_eq!(body["stop_reason"], "refusal");
}

#[test]
fn withheld_chat_answer_replaces_every_choice() {
    let body = withheld(Api::ChatCompletions, CHAT_ANSWER_TOOL.as_bytes(), REPLY).unwrap();
    let answer = parse_answer(Api::ChatCompletions, &body, true).unwrap();
    assert_eq!(
        answer.rule_text.as_deref().unwrap(),
        format!("{REPLY}{REPLY}")
    );
    assert!(!answer.asks_for_tool);
    let body = json_of(&body);
    assert_eq!(body["id"], "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT");
    assert_eq!(body["created"], 1741569952);
    assert_eq!(body["usage"]["total_tokens"], 29);
    for (i, choice) in body["choices"].as_array().unwrap().iter().enumerate() {
        assert_eq!(choice["index"], i);
        assert_eq!(choice["finish_reason"], "content_filter");
        assert_eq!(choice["logprobs"], Value::Null);
        assert!(choice["message"].get("tool_calls").is_none());
    }
}

#[test]
fn withheld_responses_answer_is_incomplete_with_one_message() {
    let body = withheld(Api::Responses, RESPONSES_ANSWER.as_bytes(), REPLY).unwrap();
    let answer = parse_answer(Api::Responses, &body, true).unwrap();
    assert_eq!(answer.rule_text.as_deref().unwrap(), REPLY);
    let body = json_of(&body);
    assert_eq!(
        body["id"],
        "resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b"
    );
    assert_eq!(body["status"], "incomplete");
    assert_eq!(body["incomplete_details"]["reason"], "content_filter");
    assert_eq!(body["usage"]["total_tokens"], 123);
    assert_eq!(body["output"].as_array().unwrap().len(), 1);
    assert_eq!(
        body["output"][0]["id"],
        "msg_67ccd2bf17f0819081ff3bb2cf6508e6"
    );
    assert!(body.get("output_text").is_none());
}

#[test]
fn errors_are_in_each_vendor_shape() {
    let error = |api, status, message| Dialect::of(api, Platform::Direct).error(status, message).0;
    let body = json_of(&error(Api::AnthropicMessages, 413, "too large").body);
    assert_eq!(
        body,
        json!({"type": "error", "error": {"type": "request_too_large", "message": "too large"}})
    );
    let body = json_of(&error(Api::AnthropicMessages, 400, "bad").body);
    assert_eq!(body["error"]["type"], "invalid_request_error");
    for api in [Api::ChatCompletions, Api::Responses] {
        let reply = error(api, 415, "unsupported");
        assert_eq!(reply.content_type, "application/json");
        assert_eq!(
            json_of(&reply.body),
            json!({"error": {"message": "unsupported", "type": "invalid_request_error",
                             "param": null, "code": null}})
        );
    }
}

const EVERY_FIXTURE: [&str; 8] = [
    ANTHROPIC_REQUEST,
    ANTHROPIC_ANSWER_TEXT,
    ANTHROPIC_ANSWER_TOOL,
    CHAT_REQUEST,
    CHAT_ANSWER_TOOL,
    RESPONSES_REQUEST,
    RESPONSES_ANSWER,
    RESPONSES_ANSWER_HOSTED_ONLY,
];

#[test]
fn every_prefix_and_byte_flip_of_every_fixture_is_read_without_panic() {
    for fixture in EVERY_FIXTURE {
        let bytes = fixture.as_bytes();
        let mut bodies: Vec<Vec<u8>> = (0..bytes.len()).map(|n| bytes[..n].to_vec()).collect();
        for i in (0..bytes.len()).step_by(3) {
            let mut flipped = bytes.to_vec();
            flipped[i] ^= 0x22;
            bodies.push(flipped);
        }
        for body in &bodies {
            for api in ALL {
                let _ = parse_request(api, body);
                let _ = parse_answer(api, body, true);
                let _ = withheld(api, body, REPLY);
            }
        }
    }
}

/// Whatever [`reader`](crate::json::reader) accepts, serde_json accepts as the same tree; it
/// declines the rest, which serde_json then reads or refuses (`json::read_node`).
fn assert_reader_agrees(body: &[u8], strict: bool) -> bool {
    let (arena, serde_arena) = (json::arena_for(body), json::arena_for(body));
    let ours = crate::json::reader::read(body, strict, &arena);
    let serdes = if strict {
        json::read_node::<true>(body, &serde_arena).ok()
    } else {
        json::read_node::<false>(body, &serde_arena).ok()
    };
    if let Some(node) = &ours {
        assert_eq!(
            Some(node),
            serdes.as_ref(),
            "{:?}",
            String::from_utf8_lossy(body)
        );
    }
    if strict {
        // The same reading straight into a `Value` (a streamed event's): the same acceptance, and
        // serde_json's own tree.
        let value = crate::json::reader::read_value(body);
        assert_eq!(
            value.is_some(),
            ours.is_some(),
            "{:?}",
            String::from_utf8_lossy(body)
        );
        if let Some(value) = value {
            assert_eq!(Some(value), serde_json::from_slice::<Value>(body).ok());
        }
    }
    ours.is_some()
}

#[test]
fn reader_agrees_with_serde_json() {
    for fixture in EVERY_FIXTURE {
        let bytes = fixture.as_bytes();
        for strict in [true, false] {
            // The vendors' own shapes are read here, not left to serde_json.
            assert!(assert_reader_agrees(bytes, strict), "{fixture}");
            for n in 0..bytes.len() {
                assert_reader_agrees(&bytes[..n], strict);
            }
            for i in 0..bytes.len() {
                for flip in [0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x22, 0x40, 0x80, 0x5c] {
                    let mut flipped = bytes.to_vec();
                    flipped[i] ^= flip;
                    assert_reader_agrees(&flipped, strict);
                }
            }
        }
    }
}

#[test]
fn reader_reads_or_declines_each_kind_of_value_as_serde_json_reads_it() {
    let read = [
        r#""plain""#,
        r#""tab\tquote\"slash\\solidus\/\b\f\n\r""#,
        r#""\u00e9\u0041\uffff\u0000 and a pair \ud83d\ude00""#,
        // Escapes first, last, side by side, before and after a letter of several bytes.
        r#""\"first, last\"""#,
        r#""\\\\\"\u00E9é\n\ud83d\ude00é\t""#,
        r#""{\"to\":\"ops@example.com\",\"n\":[1,2]}""#,
        "\"caf\u{e9} \u{1f600} \u{7f}\"",
        "0",
        "17",
        "18446744073709551615",
        "9999999999999999999",
        "18446744073709551616",
        "-0",
        "-1",
        "-9223372036854775808",
        "-9223372036854775809",
        "0.5",
        "-0.0",
        "1e3",
        "1E+3",
        "2.5e-3",
        "123456789012345678901234567890",
        "1.7976931348623157e308",
        "true",
        "false",
        "null",
        " \t\r\n [ 1 , { \"a\" : [ ] , \"b\" : { } } ] \n",
        r#"{"a": 1, "b": {"a": 2}}"#,
    ];
    for text in read {
        for strict in [true, false] {
            assert!(assert_reader_agrees(text.as_bytes(), strict), "{text}");
        }
    }
    let declined = [
        "",
        " ",
        "01",
        "-",
        "1.",
        ".5",
        "1e",
        "1e+",
        "+1",
        "1e400",
        "-1e400",
        "tru",
        "nul",
        "[1,]",
        "[1 2]",
        r#"{"a" 1}"#,
        r#"{"a": 1,}"#,
        r#"{a: 1}"#,
        r#"{"a": 1} x"#,
        "\"raw\ncontrol\"",
        "\"raw\u{0}nul\"",
        r#""unterminated"#,
        r#""bad \x escape""#,
        "\"an escaped non-ASCII letter \\\u{e9}\"",
        r#""short \u12""#,
        r#""signed \u+123""#,
        r#""spaced \u 123""#,
        r#""cut \""#,
        r#""lone high \ud83d""#,
        r#""lone high then text \ud83dabcdef""#,
        r#""high then high \ud83d\ud83d""#,
        r#""lone low \ude00""#,
        "\u{feff}{}",
    ];
    for text in declined {
        for strict in [true, false] {
            assert!(!assert_reader_agrees(text.as_bytes(), strict), "{text}");
        }
    }
    // Invalid UTF-8 inside a string, and a key twice in a strict read only.
    assert!(!assert_reader_agrees(b"\"\xc3\x28\"", false));
    assert!(!assert_reader_agrees(b"\"\xed\xa0\x80\"", false));
    assert!(!assert_reader_agrees(br#"{"a": 1, "a": 2}"#, true));
    assert!(assert_reader_agrees(br#"{"a": 1, "a": 2}"#, false));
    assert!(!assert_reader_agrees(br#"[{"k": 1, "\u006b": 2}]"#, true));
    // Nesting: the reader goes to 100 levels and leaves deeper to serde_json.
    let nested = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    assert!(assert_reader_agrees(nested(100).as_bytes(), true));
    assert!(!assert_reader_agrees(nested(101).as_bytes(), true));
    let deep = nested(101);
    let arena = json::arena_for(deep.as_bytes());
    assert!(json::read_node::<true>(deep.as_bytes(), &arena).is_ok());
}

/// Each vendor's user messages, read where they lie in the input text: pieces joined by `"\n"`,
/// empty pieces at either end or between left out, escapes decoded, other text between messages.
#[test]
fn the_intent_of_every_vendor_is_each_user_message_as_written() {
    let pieces = |kind: &str| {
        json!([
            {"type": kind, "text": ""},
            {"type": kind, "text": "Send \"the\" invoice"},
            {"type": kind, "text": ""},
            {"type": kind, "text": "to Zoë\nplease"},
            {"type": kind, "text": ""}])
    };
    let want = ["first one", "Send \"the\" invoice\nto Zoë\nplease"];
    let bodies = [
        (
            Api::AnthropicMessages,
            json!({"model": "m", "max_tokens": 5, "system": "Be brief.", "messages": [
                {"role": "user", "content": "first one"},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": pieces("text")}]}),
        ),
        (
            Api::ChatCompletions,
            json!({"model": "m", "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "first one"},
                {"role": "assistant", "content": "ok"},
                {"role": "developer", "content": "Be kind."},
                {"role": "user", "content": pieces("text")}]}),
        ),
        (
            Api::Responses,
            json!({"model": "m", "instructions": "Be brief.", "input": [
                {"role": "user", "content": "first one"},
                {"role": "developer", "content": "Be kind."},
                {"role": "user", "content": pieces("input_text")}]}),
        ),
    ];
    for (api, body) in bodies {
        let req = parse_request(api, body.to_string().as_bytes()).unwrap();
        assert_eq!(req.intent(), want, "{api:?}");
        assert_eq!(req.last_user_text(), want[1], "{api:?}");
        assert!(req.input_text.ends_with(want[1]), "{api:?}");
    }
}

#[test]
fn the_intent_is_the_last_ten_user_texts_each_joined_and_none_empty() {
    let mut messages = vec![serde_json::json!({"role": "system", "content": "Be brief."})];
    for i in 0..12 {
        messages.push(serde_json::json!({"role": "user", "content": [
            {"type": "text", "text": format!("ask {i}")},
            {"type": "text", "text": ""},
            {"type": "text", "text": "please"}]}));
        messages.push(serde_json::json!({"role": "assistant", "content": format!("answer {i}")}));
    }
    messages.push(serde_json::json!({"role": "user", "content": ""}));
    let body = serde_json::json!({"model": "m", "messages": messages}).to_string();
    let req = parse_request(Api::ChatCompletions, body.as_bytes()).unwrap();
    let want: Vec<String> = (2..12).map(|i| format!("ask {i}\nplease")).collect();
    assert_eq!(req.intent(), want);
    assert_eq!(req.last_user_text(), "ask 11\nplease");
    let asked: Vec<String> = (0..12).map(|i| format!("ask {i}\nplease")).collect();
    assert_eq!(req.input_text, format!("Be brief.\n{}", asked.join("\n")));
}

/// An answer read without its rule text (no output rule reads it) is the same answer otherwise:
/// its text, its calls (name and arguments as written), its id.
#[test]
fn an_answer_read_without_its_rule_text_is_the_same_answer() {
    for (api, body) in [
        (Api::AnthropicMessages, ANTHROPIC_ANSWER_TOOL),
        (Api::ChatCompletions, CHAT_ANSWER_TOOL),
        (Api::Responses, RESPONSES_ANSWER),
    ] {
        let whole = parse_answer(api, body.as_bytes(), true).unwrap();
        let plain = parse_answer(api, body.as_bytes(), false).unwrap();
        assert!(
            whole.rule_text.as_deref().unwrap().len() > whole.text.len(),
            "{api:?}"
        );
        assert_eq!(plain.rule_text, None);
        assert_eq!(
            Answer {
                rule_text: None,
                ..whole
            },
            plain,
            "{api:?}"
        );
    }
}

/// A tool call's argument values as rule checks read them: strings decoded (escapes, pairs of
/// surrogate escapes), numbers and booleans as written, keys and `null` left out; whatever
/// serde_json accepts is JSON (the reader declines past 100 levels), anything else is one value
/// as written.
#[test]
fn argument_values_are_read_as_written() {
    let cases: [(&str, &[&str]); 9] = [
        (
            r#"{"to":"ops@example.com","n":1.50,"ok":true,"none":null,"e":1e2}"#,
            &["ops@example.com", "1.50", "true", "1e2"],
        ),
        (
            r#"{"q":"say \"hi\"\n","u":"\u00e9\ud83d\ude00","k\"ey":"v"}"#,
            &["say \"hi\"\n", "é😀", "v"],
        ),
        (r#"["a", ["b", {"c": "d"}], -3]"#, &["a", "b", "d", "-3"]),
        (r#""just a string""#, &["just a string"]),
        ("not json at all", &["not json at all"]),
        (r#"{"a": 1} trailing"#, &[r#"{"a": 1} trailing"#]),
        (r#"{"bad": "\x"}"#, &[r#"{"bad": "\x"}"#]),
        // A lone surrogate escape (serde_json's skipping read lets it by, as Python's json reads
        // it): the rest of the string still counts.
        (
            r#"{"lone": "NL91 \ud83d then \ude00 end", "pair": "\ud83d\ude00"}"#,
            &["NL91 \u{fffd} then \u{fffd} end", "😀"],
        ),
        ("", &[""]),
    ];
    for (text, values) in cases {
        assert_eq!(json::scalars_of_text(text), values, "{text}");
    }
    // Deeper than the reader reads: serde_json's skipping read has no depth limit.
    for depth in [120, 2_000] {
        let deep = format!("{}\"x\"{}", "[".repeat(depth), "]".repeat(depth));
        assert_eq!(json::scalars_of_text(&deep), ["x"], "{depth}");
    }
}

/// Found while moving argument values off serde_json: a value holding a lone surrogate escape was
/// left out of the rule text (serde_json read the arguments as JSON, then refused the string), so
/// an output rule could not see what else it held while the caller's JSON reader takes it whole.
#[test]
fn a_lone_surrogate_does_not_hide_an_argument_from_output_rules() {
    let arguments = r#"{"iban": "NL91ABNA0417164300 \ud83d"}"#;
    let body = json!({"id": "chatcmpl-1", "choices": [{"index": 0, "finish_reason": "tool_calls",
        "message": {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1",
            "type": "function", "function": {"name": "pay", "arguments": arguments}}]}}]});
    let answer = parse_answer(Api::ChatCompletions, body.to_string().as_bytes(), true).unwrap();
    assert_eq!(
        answer.rule_text.as_deref().unwrap(),
        "\nNL91ABNA0417164300 \u{fffd}"
    );
}
