//! Amazon Bedrock Converse, `POST /model/{modelId}/converse`: one body shape for every model
//! Bedrock serves (`Api::Converse`). `converse-stream`'s answer is an AWS event stream
//! ([`crate::eventstream`]), read and rewritten by [`stream`]; a recovered answer is re-emitted as
//! one by [`recovered`].
//!
//! Reference: botocore's service model of bedrock-runtime (boto/botocore
//! `botocore/data/bedrock-runtime/2023-09-30/service-2.json`, commit 0e6e2404: `ConverseRequest`,
//! `Message`, `ContentBlock`, `SystemContentBlock`, `GuardrailConverseContentBlock`,
//! `PromptVariableValues`, `ConverseResponse`, `ToolUseBlock`, `CitationsContentBlock`,
//! `TokenUsage`, `StopReason`), the AWS API reference `API_runtime_Converse`. Content blocks are
//! unions: one member names the block's kind (`{"text": …}`, `{"toolUse": {…}}`), there is no
//! `type` field.
//!
//! The request body names no model (the path does: `modelId`) and never streams (the path does).
//! A Converse answer carries no id: Bedrock's request id is the `x-amzn-requestid` response header,
//! so [`Answer::id`] is `None` here.
//!
//! Stop shapes: Bedrock's own for a guardrail that stopped a turn (`stopReason:
//! "guardrail_intervened"`, the guardrail's message as the assistant's one text block), so that
//! boto3 reads the reply as `response["output"]["message"]["content"][0]["text"]`. Every member the
//! service model requires of `ConverseResponse` is there (`output`, `stopReason`, `usage` with
//! `inputTokens`, `outputTokens`, `totalTokens`, and `metrics.latencyMs`).

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use super::{Answer, CallValues, CallerText, Request, ToolCall, Usage};
use crate::json::{scalars_of_text, scalars_of_value, FieldError, Node, Obj};

/// `StopReason` of a turn a guardrail stopped: a refusal and a withheld answer alike.
const STOP_REASON: &str = "guardrail_intervened";

/// An array field: absent or `null` is empty; anything else but an array is an error.
fn array<'n>(
    field: Option<&'n Node<'n>>,
    path: &dyn Fn() -> String,
) -> Result<&'n [Node<'n>], FieldError> {
    match field {
        None | Some(Node::Null) => Ok(&[]),
        Some(Node::Array(items)) => Ok(items),
        Some(_) => Err(FieldError::must_be(path(), "an array")),
    }
}

/// An optional object member of `object`: absent or `null` is `None`.
fn object<'n>(
    object: &Obj<'n>,
    key: &str,
    path: &dyn Fn() -> String,
) -> Result<Option<&'n Obj<'n>>, FieldError> {
    match object.get(key) {
        None | Some(Node::Null) => Ok(None),
        Some(Node::Object(member)) => Ok(Some(member)),
        Some(_) => Err(FieldError::must_be(format!("{}{key}", path()), "an object")),
    }
}

/// An optional string member of `object`: absent or `null` is `None`.
fn string<'n>(
    object: &Obj<'n>,
    key: &str,
    path: &dyn Fn() -> String,
) -> Result<Option<&'n str>, FieldError> {
    match object.get(key) {
        None | Some(Node::Null) => Ok(None),
        Some(Node::Str(text)) => Ok(Some(text)),
        Some(_) => Err(FieldError::must_be(format!("{}{key}", path()), "a string")),
    }
}

/// The caller's text of one request block (a `ContentBlock` or a `SystemContentBlock`), `path`
/// naming it with a trailing `.`: `text`; a `guardContent`'s `text.text` (text the caller marks
/// for Bedrock's guardrail, read by the model all the same); a `citationsContent`'s generated
/// `content[].text` (text a model wrote, which a caller may send in any turn). Images, documents,
/// videos, audio, tool uses and results, search results, reasoning, cache points and any kind
/// Bedrock adds later are not read.
fn block_texts<'n>(
    block: &Obj<'n>,
    path: &dyn Fn() -> String,
    texts: &mut Vec<&'n str>,
) -> Result<(), FieldError> {
    texts.extend(string(block, "text", path)?);
    if let Some(guard) = object(block, "guardContent", path)? {
        let guard_path = || format!("{}guardContent.", path());
        if let Some(text) = object(guard, "text", &guard_path)? {
            let text_path = || format!("{}text.", guard_path());
            match string(text, "text", &text_path)? {
                Some(text) => texts.push(text),
                None => {
                    return Err(FieldError::must_be(
                        format!("{}text", text_path()),
                        "a string",
                    ))
                }
            }
        }
    }
    if let Some(cited) = object(block, "citationsContent", path)? {
        texts.extend(cited_texts(cited, &|| {
            format!("{}citationsContent.", path())
        })?);
    }
    Ok(())
}

/// The generated text of a `CitationsContentBlock`: each `content[].text` (`path` ends with `.`).
fn cited_texts<'n>(cited: &Obj<'n>, path: &dyn Fn() -> String) -> Result<Vec<&'n str>, FieldError> {
    let content_path = || format!("{}content", path());
    let mut texts = Vec::new();
    for (i, piece) in array(cited.get("content"), &content_path)?
        .iter()
        .enumerate()
    {
        let Node::Object(piece) = piece else {
            return Err(FieldError::must_be(
                format!("{}[{i}]", content_path()),
                "an object",
            ));
        };
        texts.extend(string(piece, "text", &|| {
            format!("{}[{i}].", content_path())
        })?);
    }
    Ok(texts)
}

/// The blocks of a list of content blocks (`path` names the list), each an object.
fn blocks<'n>(
    list: Option<&'n Node<'n>>,
    path: &dyn Fn() -> String,
) -> Result<Vec<&'n Obj<'n>>, FieldError> {
    array(list, path)?
        .iter()
        .enumerate()
        .map(|(i, block)| match block {
            Node::Object(block) => Ok(block),
            _ => Err(FieldError::must_be(format!("{}[{i}]", path()), "an object")),
        })
        .collect()
}

/// A Converse request: the `system` blocks' text, the values `promptVariables` fill into a stored
/// prompt (a prompt ARN as `modelId`), and the text of every message but the model's own
/// (`assistant`). A message of any other role is read, so an unexpected role cannot hide text; a
/// `user` message with text is an intent. `toolConfig`, `inferenceConfig`, `guardrailConfig`,
/// `additionalModelRequestFields` and the rest are settings, not read.
pub(super) fn parse_request(body: &Obj<'_>) -> Result<Request, FieldError> {
    let mut caller = CallerText::default();
    let system_path = || "system".to_owned();
    for (i, block) in blocks(body.get("system"), &system_path)?
        .into_iter()
        .enumerate()
    {
        let mut texts = Vec::new();
        block_texts(block, &|| format!("system[{i}]."), &mut texts)?;
        for text in texts {
            caller.piece(text);
        }
    }
    for variable in prompt_variables(body)? {
        caller.piece(variable);
    }
    // A request from a stored prompt may send no message (the prompt holds them).
    let messages_path = || "messages".to_owned();
    for (i, message) in array(body.get("messages"), &messages_path)?
        .iter()
        .enumerate()
    {
        let Node::Object(message) = message else {
            return Err(FieldError::must_be(format!("messages[{i}]"), "an object"));
        };
        let Some(role) = message.str_field("role") else {
            return Err(FieldError::must_be(
                format!("messages[{i}].role"),
                "a string",
            ));
        };
        let content_path = || format!("messages[{i}].content");
        if !matches!(message.get("content"), Some(Node::Array(_))) {
            return Err(FieldError::must_be(content_path(), "an array"));
        }
        let mut texts = Vec::new();
        for (j, block) in blocks(message.get("content"), &content_path)?
            .into_iter()
            .enumerate()
        {
            block_texts(
                block,
                &|| format!("messages[{i}].content[{j}]."),
                &mut texts,
            )?;
        }
        if role == "assistant" {
            continue;
        }
        caller.message(role == "user", &texts);
    }
    let (input_text, user_texts) = caller.finish();
    Ok(Request {
        input_text,
        user_texts,
        stream: false,
        background: false,
        include_usage: false,
        json_array: false,
        model: None,
        ..Request::default()
    })
}

/// The `text` of each `promptVariables` value (`PromptVariableValues`, a union whose one member is
/// `text`), in the order of their names as the Responses reader reads a prompt's variables.
fn prompt_variables<'n>(body: &Obj<'n>) -> Result<Vec<&'n str>, FieldError> {
    let Some(variables) = object(body, "promptVariables", &String::new)? else {
        return Ok(Vec::new());
    };
    let mut texts = Vec::new();
    for (name, value) in variables.members_by_key() {
        let path = || format!("promptVariables.{name}");
        let Node::Object(value) = value else {
            return Err(FieldError::must_be(path(), "an object"));
        };
        texts.extend(string(value, "text", &|| format!("{}.", path()))?);
    }
    Ok(texts)
}

/// The answer read again for its tool uses' `input` as written, so numbers keep their digits (as
/// the Anthropic reader does).
#[derive(Deserialize)]
struct RawAnswer<'a> {
    #[serde(borrow)]
    output: RawOutput<'a>,
}

#[derive(Deserialize)]
struct RawOutput<'a> {
    #[serde(borrow)]
    message: RawMessage<'a>,
}

#[derive(Deserialize)]
struct RawMessage<'a> {
    #[serde(borrow)]
    content: Vec<RawBlock<'a>>,
}

#[derive(Deserialize)]
struct RawBlock<'a> {
    #[serde(borrow, default, rename = "toolUse")]
    tool_use: Option<RawToolUse<'a>>,
}

#[derive(Deserialize)]
struct RawToolUse<'a> {
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
}

/// A `ConverseResponse`: the text of `output.message`'s `text` blocks and of its cited content
/// (`citationsContent.content[].text`, the text a model writes when it cites documents), never
/// its reasoning (`reasoningContent`, read nowhere as the other APIs' reasoning is not); its
/// `toolUse` blocks as tool calls, their `input` as written (`raw`) as the arguments (a server
/// tool's, `type: "server_tool_use"`, ran at Bedrock: rule checks read its input, it is no call).
/// It asks for a tool when `stopReason` is `tool_use`. No id: see the module's note.
pub(super) fn parse_answer(
    raw: &[u8],
    body: &Obj<'_>,
    rule_text: bool,
) -> Result<Answer, FieldError> {
    let top = String::new;
    let Some(output) = object(body, "output", &top)? else {
        return Err(FieldError::must_be("output", "an object"));
    };
    let output_path = || "output.".to_owned();
    let Some(message) = object(output, "message", &output_path)? else {
        return Err(FieldError::must_be("output.message", "an object"));
    };
    let content_path = || "output.message.content".to_owned();
    if !matches!(message.get("content"), Some(Node::Array(_))) {
        return Err(FieldError::must_be(content_path(), "an array"));
    }
    let mut text = String::new();
    let mut values = CallValues::new(rule_text);
    let mut calls = Vec::new();
    let mut raw_blocks = None;
    for (i, block) in blocks(message.get("content"), &content_path)?
        .into_iter()
        .enumerate()
    {
        let path = || format!("output.message.content[{i}].");
        if let Some(piece) = string(block, "text", &path)? {
            text.push_str(piece);
        }
        if let Some(cited) = object(block, "citationsContent", &path)? {
            for piece in cited_texts(cited, &|| format!("{}citationsContent.", path()))? {
                text.push_str(piece);
            }
        }
        if let Some(tool_use) = object(block, "toolUse", &path)? {
            let tool_path = || format!("{}toolUse.", path());
            let Some(name) = string(tool_use, "name", &tool_path)? else {
                return Err(FieldError::must_be(
                    format!("{}name", tool_path()),
                    "a string",
                ));
            };
            let server_tool = string(tool_use, "type", &tool_path)? == Some("server_tool_use");
            // Read again only when there is a tool use: its input as written; as parsed where the
            // raw read found none (a body serde cannot read as the shape, a key written twice). A
            // tool use without input calls the tool with no arguments, `{}`.
            let raw_blocks: &Vec<RawBlock> = raw_blocks.get_or_insert_with(|| {
                serde_json::from_slice::<RawAnswer>(raw)
                    .map(|a| a.output.message.content)
                    .unwrap_or_default()
            });
            let raw_input = raw_blocks
                .get(i)
                .and_then(|b| b.tool_use.as_ref())
                .and_then(|t| t.input);
            let arguments = match (raw_input, tool_use.get("input")) {
                (Some(input), Some(_)) => {
                    values.push(|| scalars_of_text(input.get()));
                    input.get().to_owned()
                }
                (_, Some(input)) => {
                    let input = input.to_value();
                    values.push(|| scalars_of_value(&input));
                    input.to_string()
                }
                (_, None) => {
                    values.push(Vec::new);
                    "{}".to_owned()
                }
            };
            // A server tool ran at Bedrock: rule checks read its input, it is no call to check.
            if !server_tool {
                calls.push(ToolCall {
                    name: name.to_owned(),
                    arguments,
                    json: true,
                });
            }
        }
    }
    Ok(Answer {
        rule_text: values.rule_text(&text),
        text,
        asks_for_tool: string(body, "stopReason", &top)? == Some("tool_use"),
        id: None,
        calls,
    })
}

/// `usage` (`TokenUsage`) in livecheck's terms: Bedrock counts input apart from the cache reads and
/// writes (as Anthropic does; `totalTokens` adds all four), and reasoning inside the output
/// without a count of its own. The cache counts are 0 when left out; `None` without `inputTokens`
/// or `outputTokens` (both required by `TokenUsage`), as `recovered::read_usage` reads the others.
/// The same as rows of `recovered`'s field table would read it: the wiring may use either.
pub(super) fn usage(usage: &Value) -> Option<Usage> {
    let count = |key: &str| usage.get(key).and_then(Value::as_u64);
    let zero_if_absent = |key: &str| count(key).unwrap_or(0);
    Some(Usage {
        input_tokens: count("inputTokens")?,
        output_tokens: count("outputTokens")?,
        cache_read_tokens: zero_if_absent("cacheReadInputTokens"),
        cache_creation_tokens: zero_if_absent("cacheWriteInputTokens"),
        reasoning_tokens: 0,
    })
}

/// The assistant's message saying `reply` (`ConverseOutput`, a union: its `message` member).
fn output(reply: &str) -> Value {
    json!({"message": {"role": "assistant", "content": [{"text": reply}]}})
}

/// The answer to a refused question: the reply as the assistant's message, stopped by a guardrail.
/// Usage and latency are zero: no model was called.
pub(super) fn refusal(reply: &str) -> Vec<u8> {
    crate::json::to_vec(&json!({
        "output": output(reply),
        "stopReason": STOP_REASON,
        "usage": {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0},
        "metrics": {"latencyMs": 0},
    }))
}

/// A failed answer rewritten to say `reply`: its message becomes the reply (tool uses, reasoning
/// and citations go with it), stopped by a guardrail. What describes the withheld content goes
/// too: `additionalModelResponseFields` (the model's own output fields) and `trace.guardrail`
/// (its `modelOutput` is the model's text; its assessments quote what they matched). `usage`,
/// `metrics`, `trace.promptRouter`, `performanceConfig` and `serviceTier` are kept.
pub(super) fn withhold(body: &mut Map<String, Value>, reply: &str) -> Result<(), FieldError> {
    if !matches!(body.get("output"), Some(Value::Object(_))) {
        return Err(FieldError::must_be("output", "an object"));
    }
    body.insert("output".into(), output(reply));
    body.insert("stopReason".into(), json!(STOP_REASON));
    body.remove("additionalModelResponseFields");
    if let Some(Value::Object(trace)) = body.get_mut("trace") {
        trace.remove("guardrail");
    }
    Ok(())
}

pub(super) mod recovered;
pub(crate) mod stream;
#[cfg(test)]
mod tests;
