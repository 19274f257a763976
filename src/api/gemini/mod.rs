//! Google Gemini `generateContent`, on the Gemini API (`/v1beta/models/{model}:generateContent`)
//! and on Vertex AI (`…/publishers/google/models/{model}:generateContent`): one body shape.
//! Read for `Api::Gemini` (issue 55); its stream is [`stream`].
//!
//! References: <https://ai.google.dev/api/generate-content> (request and `GenerateContentResponse`),
//! <https://ai.google.dev/api/caching#Content> (`Content`, `Part`), and google-genai's own reading
//! of both (googleapis/python-genai `google/genai/types.py`: `Part`, `Candidate`, `FinishReason`,
//! `BlockedReason`, `GenerateContentResponse.text`; `google/genai/models.py`
//! `_GenerateContentResponse_from_mldev`). Errors are Google's ([`super::Dialect::Google`]).
//!
//! Field names: Google reads a request's JSON under each field's JSON name (`systemInstruction`)
//! and its proto name (`system_instruction`): its own REST docs send the latter
//! (<https://ai.google.dev/gemini-api/docs/system-instructions?lang=rest>), and it refuses a body
//! that sets the field under both ("oneof field '_system_instruction' is already set",
//! BerriAI/litellm#37028). So does livecheck, for every field it reads that has two names. The
//! same docs send one `Content` where `contents` is a list and one `Part` where `parts` is one:
//! Google reads a lone object as a one-element list, and so does livecheck. In an answer,
//! google-genai reads a part's `function_call` as a function call (pydantic `populate_by_name`;
//! checked with google-genai 3.6.1) and refuses a part holding both names: livecheck reads both
//! and withholds such a part as unreadable.
//!
//! Stop shapes, chosen from what google-genai does (it raises on neither: `.text` is `None` when
//! there is no candidate with parts, and a chat leaves such a turn, question included, out of
//! its history; `chats.py` `_validate_response`):
//! - a refused question is a blocked prompt, `promptFeedback.blockReason: "SAFETY"`, and beside it
//!   one candidate holding the reply with `finishReason: "SAFETY"`. Google sends the first alone
//!   (no candidate), which leaves nothing for `.text`; the response shape holds both (the SDK
//!   reads each field on its own), so a caller that looks for the block finds it, and one that
//!   reads `.text` reads the reply;
//! - a withheld answer keeps its id, model version, usage and prompt feedback, and each candidate
//!   becomes the reply with `finishReason: "SAFETY"` (content that stopped for safety).

use serde_json::{json, Map, Value};

use super::{Answer, CallValues, CallerText, Ids, Request, ToolCall, Usage};
use crate::json::{scalars_of_value, FieldError, Node, Obj};

/// The finish reason (`Candidate.finishReason`) and block reason (`promptFeedback.blockReason`)
/// of a stop: both enums' `SAFETY`.
const STOP_REASON: &str = "SAFETY";

/// A field Google reads under two names (its JSON name and its proto name): the name the body
/// writes it under and its value, or an error when it holds both (Google would read one of them;
/// livecheck must not read the other). `null` is a value here: the field is written.
fn either<'a>(
    object: &Obj<'a>,
    json_name: &'static str,
    proto_name: &'static str,
    path: &dyn Fn() -> String,
) -> Result<Option<(&'static str, &'a Node<'a>)>, FieldError> {
    match (object.get(json_name), object.get(proto_name)) {
        (Some(_), Some(_)) => Err(FieldError::must_be(
            format!("{}{json_name} and {}{proto_name}", path(), path()),
            "one field, written under one of its two names",
        )),
        (Some(value), None) => Ok(Some((json_name, value))),
        (None, Some(value)) => Ok(Some((proto_name, value))),
        (None, None) => Ok(None),
    }
}

/// A repeated field as Google reads it: absent or `null` is empty, one object is a list of one.
fn list<'n>(
    field: Option<&'n Node<'n>>,
    path: &dyn Fn() -> String,
) -> Result<&'n [Node<'n>], FieldError> {
    match field {
        None | Some(Node::Null) => Ok(&[]),
        Some(Node::Array(items)) => Ok(items),
        Some(one @ Node::Object(_)) => Ok(std::slice::from_ref(one)),
        Some(_) => Err(FieldError::must_be(path(), "an array of objects")),
    }
}

/// The `text` of each part of a `Content`'s `parts` (images, files, function calls and results,
/// code, and any part kind Google adds later hold no text read here). `path` names the content.
fn part_texts<'n>(
    content: &Obj<'n>,
    path: &dyn Fn() -> String,
) -> Result<Vec<&'n str>, FieldError> {
    let parts_path = || format!("{}parts", path());
    let mut texts = Vec::new();
    for (i, part) in list(content.get("parts"), &parts_path)?.iter().enumerate() {
        let Node::Object(part) = part else {
            return Err(FieldError::must_be(
                format!("{}[{i}]", parts_path()),
                "an object",
            ));
        };
        match part.get("text") {
            None | Some(Node::Null) => {}
            Some(Node::Str(text)) => texts.push(*text),
            Some(_) => {
                return Err(FieldError::must_be(
                    format!("{}[{i}].text", parts_path()),
                    "a string",
                ))
            }
        }
    }
    Ok(texts)
}

/// A `generateContent` request: `systemInstruction` and the text parts of every content that is
/// not the model's own. A content without `role` is the user's (Google's single-turn form).
/// Whether the answer streams is the path's (`:streamGenerateContent`), not the body's.
pub(super) fn parse_request(body: &Obj<'_>) -> Result<Request, FieldError> {
    let mut caller = CallerText::default();
    let top = String::new;
    match either(body, "systemInstruction", "system_instruction", &top)? {
        None | Some((_, Node::Null)) => {}
        Some((name, Node::Object(system))) => {
            let path = || format!("{name}.");
            for piece in part_texts(system, &path)? {
                caller.piece(piece);
            }
        }
        Some((name, _)) => return Err(FieldError::must_be(name, "an object")),
    }
    // A request may name content cached at Google earlier (`cachedContents/{id}`: a system
    // instruction, tools, contents), which livecheck never read: refused, not passed unchecked.
    match either(body, "cachedContent", "cached_content", &top)? {
        None | Some((_, Node::Null)) => {}
        Some((name, _)) => {
            return Err(FieldError::must_be(
                name,
                "absent: content cached at Google is content livecheck cannot check",
            ))
        }
    }
    let contents = match body.get("contents") {
        Some(contents @ (Node::Array(_) | Node::Object(_))) => {
            list(Some(contents), &|| "contents".into())?
        }
        _ => return Err(FieldError::must_be("contents", "an array of objects")),
    };
    for (i, content) in contents.iter().enumerate() {
        let Node::Object(content) = content else {
            return Err(FieldError::must_be(format!("contents[{i}]"), "an object"));
        };
        let role = match content.get("role") {
            None | Some(Node::Null) => None,
            Some(Node::Str(role)) => Some(*role),
            Some(_) => {
                return Err(FieldError::must_be(
                    format!("contents[{i}].role"),
                    "a string",
                ))
            }
        };
        let path = || format!("contents[{i}].");
        let texts = part_texts(content, &path)?;
        // Every role but the model's own is read, so an unexpected role cannot hide text.
        if role == Some("model") {
            continue;
        }
        caller.message(matches!(role, None | Some("user")), &texts);
    }
    let (input_text, user_texts) = caller.finish();
    Ok(Request {
        input_text,
        user_texts,
        stream: false,
        background: false,
        include_usage: false,
        json_array: false,
        model: body.opt_str_field("model")?,
        ..Request::default()
    })
}

/// A `GenerateContentResponse`: the text of every candidate's parts but its thoughts
/// (`thought: true`, reasoning, read nowhere as the other APIs' reasoning is not), its
/// `functionCall` parts as tool calls, its id from `responseId`. A blocked prompt has no
/// candidates: no text, no call.
pub(super) fn parse_answer(body: &Obj<'_>, rule_text: bool) -> Result<Answer, FieldError> {
    let candidates = match body.get("candidates") {
        None | Some(Node::Null) => &[][..],
        Some(Node::Array(candidates)) => candidates,
        Some(_) => return Err(FieldError::must_be("candidates", "an array")),
    };
    let mut text = String::new();
    let mut values = CallValues::new(rule_text);
    let mut calls = Vec::new();
    for (i, candidate) in candidates.iter().enumerate() {
        let Node::Object(candidate) = candidate else {
            return Err(FieldError::must_be(format!("candidates[{i}]"), "an object"));
        };
        let content = match candidate.get("content") {
            None | Some(Node::Null) => continue,
            Some(Node::Object(content)) => content,
            Some(_) => {
                return Err(FieldError::must_be(
                    format!("candidates[{i}].content"),
                    "an object",
                ))
            }
        };
        let parts = match content.get("parts") {
            None | Some(Node::Null) => &[][..],
            Some(Node::Array(parts)) => parts,
            Some(_) => {
                return Err(FieldError::must_be(
                    format!("candidates[{i}].content.parts"),
                    "an array",
                ))
            }
        };
        for (j, part) in parts.iter().enumerate() {
            let path = || format!("candidates[{i}].content.parts[{j}].");
            let Node::Object(part) = part else {
                return Err(FieldError::must_be(
                    format!("candidates[{i}].content.parts[{j}]"),
                    "an object",
                ));
            };
            read_part(part, &path, &mut text, &mut values, &mut calls)?;
        }
    }
    Ok(Answer {
        rule_text: values.rule_text(&text),
        text,
        asks_for_tool: !calls.is_empty(),
        id: body.str_field("responseId").map(str::to_owned),
        calls,
    })
}

/// One part of an answer: its text (unless a thought), its function call, the code Google ran for
/// it (`executableCode`, already run: read by rule checks as a hosted tool's input is, not a call).
fn read_part(
    part: &Obj<'_>,
    path: &dyn Fn() -> String,
    text: &mut String,
    values: &mut CallValues,
    calls: &mut Vec<ToolCall>,
) -> Result<(), FieldError> {
    let thought = matches!(part.get("thought"), Some(Node::Bool(true)));
    match part.get("text") {
        None | Some(Node::Null) => {}
        Some(Node::Str(piece)) if !thought => text.push_str(piece),
        Some(Node::Str(_)) => {}
        Some(_) => return Err(FieldError::must_be(format!("{}text", path()), "a string")),
    }
    match either(part, "functionCall", "function_call", path)? {
        None | Some((_, Node::Null)) => {}
        Some((name, Node::Object(call))) => {
            let (arguments, args) = match call.get("args") {
                None | Some(Node::Null) => ("{}".to_owned(), None),
                Some(args @ Node::Object(_)) => {
                    let args = args.to_value();
                    (args.to_string(), Some(args))
                }
                Some(_) => {
                    return Err(FieldError::must_be(
                        format!("{}{name}.args", path()),
                        "an object",
                    ))
                }
            };
            values.push(|| args.as_ref().map(scalars_of_value).unwrap_or_default());
            calls.push(ToolCall {
                name: call.str_field("name").unwrap_or_default().to_owned(),
                arguments,
                json: true,
            });
        }
        Some((name, _)) => {
            return Err(FieldError::must_be(
                format!("{}{name}", path()),
                "an object",
            ))
        }
    }
    match either(part, "executableCode", "executable_code", path)? {
        Some((_, Node::Object(code))) => match code.get("code") {
            Some(Node::Str(code)) => values.push(|| vec![(*code).to_owned()]),
            _ => values.push(Vec::new),
        },
        None | Some((_, Node::Null)) => {}
        Some((name, _)) => {
            return Err(FieldError::must_be(
                format!("{}{name}", path()),
                "an object",
            ))
        }
    }
    Ok(())
}

/// `usageMetadata` in livecheck's terms (`GenerateContentResponseUsageMetadata`): input is the
/// prompt (cached content included) and the tool results Google fed back
/// (`toolUsePromptTokenCount`); output is the candidates and the thoughts, which Google counts
/// apart (`totalTokenCount` is the sum of all four), so reasoning is part of the output as
/// OpenAI's is. A count Google leaves out is 0 (a blocked prompt states no candidates); `None`
/// without `promptTokenCount`.
pub(super) fn usage(usage_metadata: &Value) -> Option<Usage> {
    let count = |key: &str| usage_metadata.get(key).and_then(Value::as_u64);
    let zero_if_absent = |key: &str| count(key).unwrap_or(0);
    let thoughts = zero_if_absent("thoughtsTokenCount");
    Some(Usage {
        input_tokens: count("promptTokenCount")?
            .saturating_add(zero_if_absent("toolUsePromptTokenCount")),
        output_tokens: zero_if_absent("candidatesTokenCount").saturating_add(thoughts),
        cache_read_tokens: zero_if_absent("cachedContentTokenCount"),
        cache_creation_tokens: 0,
        reasoning_tokens: thoughts,
    })
}

/// Writes `total` (livecheck's terms, [`usage`]) as the answer's `usageMetadata`: the prompt with
/// the tool results Google fed back, the candidates apart from the thoughts, the cached part, and
/// the total; other fields (`*TokensDetails`) kept as they were.
pub(super) fn set_usage(body: &mut Map<String, Value>, total: &Usage) -> Result<(), FieldError> {
    let usage = body
        .entry("usageMetadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if usage.is_null() {
        *usage = Value::Object(Map::new());
    }
    let Value::Object(usage) = usage else {
        return Err(FieldError::must_be("usageMetadata", "an object"));
    };
    usage.remove("toolUsePromptTokenCount");
    usage.insert("promptTokenCount".into(), json!(total.input_tokens));
    let candidates = total.output_tokens.saturating_sub(total.reasoning_tokens);
    usage.insert("candidatesTokenCount".into(), json!(candidates));
    for (key, n) in [
        ("thoughtsTokenCount", total.reasoning_tokens),
        ("cachedContentTokenCount", total.cache_read_tokens),
    ] {
        if n > 0 || usage.contains_key(key) {
            usage.insert(key.into(), json!(n));
        }
    }
    let sum = total.input_tokens.saturating_add(total.output_tokens);
    usage.insert("totalTokenCount".into(), json!(sum));
    Ok(())
}

/// A response as the stream the request asked for: one chunk of `:streamGenerateContent?alt=sse`,
/// or the one element of its JSON array.
pub(super) fn as_chunk(body: &Value, req: &Request) -> Vec<u8> {
    one_chunk(crate::json::to_vec(body), req)
}

/// A whole response (JSON) as the one chunk of the stream the request asked for.
fn one_chunk(response: Vec<u8>, req: &Request) -> Vec<u8> {
    if req.json_array {
        return array::whole(response);
    }
    let mut out = b"data: ".to_vec();
    out.extend(response);
    out.extend_from_slice(b"\n\n");
    out
}

/// A candidate whose whole content is `reply`, stopped as content that breaks a safety policy.
fn candidate(index: Value, reply: &str) -> Value {
    json!({
        "content": {"role": "model", "parts": [{"text": reply}]},
        "finishReason": STOP_REASON,
        "index": index,
    })
}

/// The answer to a refused question: the prompt blocked, and the reply as the one candidate (see
/// the module's note on stop shapes). Usage is zero: no model was called.
pub(super) fn refusal(reply: &str, req: &Request, ids: &Ids) -> Vec<u8> {
    crate::json::to_vec(&json!({
        "candidates": [candidate(json!(0), reply)],
        "promptFeedback": {"blockReason": STOP_REASON},
        "usageMetadata": {"promptTokenCount": 0, "candidatesTokenCount": 0, "totalTokenCount": 0},
        "modelVersion": req.model.as_deref().unwrap_or_default(),
        "responseId": ids.token,
    }))
}

/// The streamed answer to a refused question: the refusal's body as the one chunk of the stream
/// (`data:` event, or array element; Google's chunks are whole responses).
pub(super) fn refusal_stream(reply: &str, req: &Request, ids: &Ids) -> Vec<u8> {
    one_chunk(refusal(reply, req, ids), req)
}

/// A failed answer rewritten to say `reply`: every candidate (one when there was none) becomes the
/// reply, stopped for safety, its index kept; function calls, citations, grounding and safety
/// ratings go with the content they describe. Everything else (`responseId`, `modelVersion`,
/// `usageMetadata`, `promptFeedback`, `createTime`) is kept.
pub(super) fn withhold(body: &mut Map<String, Value>, reply: &str) -> Result<(), FieldError> {
    let candidates = match body.get_mut("candidates") {
        None | Some(Value::Null) => {
            body.insert("candidates".into(), json!([candidate(json!(0), reply)]));
            return Ok(());
        }
        Some(Value::Array(candidates)) => candidates,
        Some(_) => return Err(FieldError::must_be("candidates", "an array")),
    };
    if candidates.is_empty() {
        candidates.push(candidate(json!(0), reply));
    }
    for (i, slot) in candidates.iter_mut().enumerate() {
        let index = slot.get("index").cloned().unwrap_or_else(|| json!(i));
        *slot = candidate(index, reply);
    }
    Ok(())
}

mod array;
pub(crate) mod stream;

#[cfg(test)]
mod tests;
