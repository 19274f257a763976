//! Recovery's rules for Amazon Bedrock's Converse API (`/model/{model}/converse`): how the original
//! request is asked again. The instruction is one more `system` text block. Tool history is a
//! `toolUse` or `toolResult` block in `messages`: without it `toolConfig` goes; with it the tools
//! must stay, since Bedrock refuses a request whose messages hold those blocks without a
//! `toolConfig` ("The toolConfig field must be defined when using toolUse and toolResult content
//! blocks", a `ValidationException`), and Converse has no tool choice that forbids a call (its
//! `ToolChoice` is `auto`, `any` or `tool`). So the tools stay and the choice goes (the default,
//! `auto`: the model may answer in text; `any` and `tool` would force a call): a retry's answer
//! that still calls a tool is never shown (the filter asks again or withholds, as for every API).
//! A streamed original (`converse-stream`) is asked again at `converse`.
//!
//! A Converse request to a stored prompt (Prompt management: a prompt ARN as the model) may not
//! set `system` or `toolConfig` (the Converse operation's documentation in the service model,
//! boto/botocore `bedrock-runtime/2023-09-30/service-2.json`), so the instruction has no place:
//! such a request is not asked again. Shapes: the same service model (`ConverseRequest`,
//! `SystemContentBlock`, `ToolConfiguration`, `ToolChoice`).
//!
//! Bedrock's requests are signed by the caller: a retry goes only with the upstream's own key
//! ([`super::platform`]).

use std::borrow::Cow;

use serde_json::{json, Map, Value};

use super::{objects, Failure};

pub(super) fn adapt(
    body: &mut Map<String, Value>,
    instruction: String,
    keep_tools: bool,
) -> Result<(), Failure> {
    if !keep_tools {
        let tool_history = objects(body.get("messages"))
            .flat_map(|m| objects(m.get("content")))
            .any(|b| ["toolUse", "toolResult"].iter().any(|k| b.contains_key(*k)));
        match body.get_mut("toolConfig") {
            Some(Value::Object(config)) if tool_history => {
                config.remove("toolChoice");
            }
            _ => {
                body.remove("toolConfig");
            }
        }
    }
    let block = json!({"text": instruction});
    match body.get_mut("system") {
        Some(Value::Array(system)) => system.push(block),
        None | Some(Value::Null) => {
            body.insert("system".into(), json!([block]));
        }
        Some(_) => return Err(Failure::BadRequest),
    }
    Ok(())
}

/// Whether the path's model is a stored prompt (`arn:…:prompt/…`), where a request may not set
/// `system`.
pub(super) fn names_a_stored_prompt(path: &str) -> bool {
    livecheck_wire::endpoint("POST", path)
        .and_then(|e| e.model)
        .is_some_and(|m| m.starts_with("arn:") && m.contains(":prompt/"))
}

/// `…/converse-stream` → `…/converse` (the query kept); any other path as it is.
pub(super) fn retry_path(path: &str) -> Cow<'_, str> {
    let (bare, query) = path.split_at(path.find('?').unwrap_or(path.len()));
    match bare.strip_suffix("/converse-stream") {
        Some(model) => Cow::Owned(format!("{model}/converse{query}")),
        None => Cow::Borrowed(path),
    }
}

#[cfg(test)]
mod tests {
    use livecheck_wire::Api;
    use serde_json::{json, Value};

    use super::super::tests::rules;
    use super::super::{instruction, retry_body, Failure};
    use super::{names_a_stored_prompt, retry_path};

    fn adapted(request: Value, keep_tools: bool) -> Value {
        retry_body(Api::Converse, &request.to_string(), &rules(), keep_tools).unwrap()
    }

    fn tool_config() -> Value {
        json!({"tools": [{"toolSpec": {"name": "send_email", "inputSchema": {"json": {"type": "object"}}}}],
               "toolChoice": {"any": {}}})
    }

    #[test]
    fn the_instruction_is_one_more_system_text_block() {
        let said = json!({"text": instruction(&rules())});
        let body = adapted(
            json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}],
                   "system": [{"text": "Be kind."}, {"cachePoint": {"type": "default"}}],
                   "inferenceConfig": {"maxTokens": 64}, "guardrailConfig": {"guardrailIdentifier": "g",
                   "guardrailVersion": "1"}}),
            false,
        );
        assert_eq!(
            body["system"],
            json!([{"text": "Be kind."}, {"cachePoint": {"type": "default"}}, said])
        );
        assert_eq!(body["inferenceConfig"]["maxTokens"], 64);
        assert_eq!(body["guardrailConfig"]["guardrailIdentifier"], "g");
        assert_eq!(body["messages"][0]["content"][0]["text"], "hi");
        let body = adapted(json!({"messages": []}), false);
        assert_eq!(body["system"], json!([said]));
        assert_eq!(
            retry_body(Api::Converse, r#"{"system": "Be kind."}"#, &rules(), false),
            Err(Failure::BadRequest)
        );
    }

    #[test]
    fn without_tool_history_the_tool_config_goes() {
        let body = adapted(
            json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}],
                   "toolConfig": tool_config()}),
            false,
        );
        assert!(body.get("toolConfig").is_none(), "{body}");
    }

    #[test]
    fn with_tool_history_the_tools_stay_as_bedrock_requires_and_no_call_is_forced() {
        let tool_use = json!({"role": "assistant", "content": [{"toolUse": {"toolUseId": "t1",
            "name": "send_email", "input": {}}}]});
        let tool_result = json!({"role": "user", "content": [{"toolResult": {"toolUseId": "t1",
            "content": [{"text": "sent"}]}}]});
        for history in [vec![tool_use.clone(), tool_result], vec![tool_use]] {
            let mut messages = vec![json!({"role": "user", "content": [{"text": "hi"}]})];
            messages.extend(history);
            let body = adapted(
                json!({"messages": messages, "toolConfig": tool_config()}),
                false,
            );
            assert_eq!(body["toolConfig"]["tools"], tool_config()["tools"]);
            assert!(body["toolConfig"].get("toolChoice").is_none(), "{body}");
        }
    }

    #[test]
    fn after_a_denied_tool_call_the_tool_config_is_kept() {
        let body = adapted(
            json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}],
                   "toolConfig": tool_config()}),
            true,
        );
        assert_eq!(body["toolConfig"], tool_config());
    }

    #[test]
    fn a_streamed_request_is_asked_again_at_converse_and_a_stored_prompt_is_known() {
        let model = "/model/us.anthropic.claude-3-5-sonnet-20241022-v2%3A0";
        assert_eq!(
            retry_path(&format!("{model}/converse-stream")),
            format!("{model}/converse")
        );
        assert_eq!(
            retry_path(&format!("{model}/converse")),
            format!("{model}/converse")
        );
        assert!(!names_a_stored_prompt(&format!("{model}/converse")));
        let prompt =
            "/model/arn%3Aaws%3Abedrock%3Aeu-west-1%3A123456789012%3Aprompt%2FPROMPT12345%3A1";
        assert!(names_a_stored_prompt(&format!("{prompt}/converse")));
        assert!(names_a_stored_prompt(&format!("{prompt}/converse-stream")));
        let profile = "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2Fus.anthropic.claude-3-haiku-20240307-v1%3A0";
        assert!(!names_a_stored_prompt(&format!("{profile}/converse")));
    }
}
