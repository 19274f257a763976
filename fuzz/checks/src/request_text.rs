//! Request text extraction, against a plain JSON parser: `parse_request` accepts a body exactly
//! when serde_json reads it, it repeats no key at any depth, and its fields have the shapes the
//! vendor documents; what it extracts (input text, last user text, intent, model, stream) equals
//! what this target reads from serde_json's `Value` with the vendor's rules written out plainly.
//! Whatever the filter refuses is explained by one of those three reasons, in its message.

mod input_only;

use std::collections::HashSet;
use std::fmt;

use livecheck::api::{parse_request, Api};
use livecheck_wire::INTENT_MESSAGES;
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// What input checks read, from the reference reading.
#[derive(Debug, PartialEq)]
struct Read {
    input_text: String,
    last_user_text: String,
    intent: Vec<String>,
    model: Option<String>,
    stream: bool,
}

/// Deserializes any JSON, failing on an object that repeats a key (after unescaping).
struct NoDuplicates;

impl<'de> Deserialize<'de> for NoDuplicates {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NoDuplicatesVisitor)
    }
}

struct NoDuplicatesVisitor;

impl<'de> Visitor<'de> for NoDuplicatesVisitor {
    type Value = NoDuplicates;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JSON")
    }
    fn visit_bool<E>(self, _: bool) -> Result<NoDuplicates, E> {
        Ok(NoDuplicates)
    }
    fn visit_i64<E>(self, _: i64) -> Result<NoDuplicates, E> {
        Ok(NoDuplicates)
    }
    fn visit_u64<E>(self, _: u64) -> Result<NoDuplicates, E> {
        Ok(NoDuplicates)
    }
    fn visit_f64<E>(self, _: f64) -> Result<NoDuplicates, E> {
        Ok(NoDuplicates)
    }
    fn visit_str<E>(self, _: &str) -> Result<NoDuplicates, E> {
        Ok(NoDuplicates)
    }
    fn visit_unit<E>(self) -> Result<NoDuplicates, E> {
        Ok(NoDuplicates)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<NoDuplicates, A::Error> {
        while seq.next_element::<NoDuplicates>()?.is_some() {}
        Ok(NoDuplicates)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<NoDuplicates, A::Error> {
        let mut keys = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !keys.insert(key) {
                return Err(serde::de::Error::custom("duplicate key"));
            }
            map.next_value::<NoDuplicates>()?;
        }
        Ok(NoDuplicates)
    }
}

fn opt_str(body: &Value, key: &str) -> Result<Option<String>, ()> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(()),
    }
}

fn flag(body: &Value, key: &str) -> Result<bool, ()> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(()),
    }
}

/// A message's `content`: a string, or the `text` of the blocks of a text type.
fn texts(content: Option<&Value>, text_types: &[&str]) -> Result<Vec<String>, ()> {
    match content {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(blocks)) => {
            let mut out = Vec::new();
            for block in blocks {
                let kind = block.get("type").and_then(Value::as_str).ok_or(())?;
                if text_types.contains(&kind) {
                    out.push(
                        block
                            .get("text")
                            .and_then(Value::as_str)
                            .ok_or(())?
                            .to_owned(),
                    );
                }
            }
            Ok(out)
        }
        Some(_) => Err(()),
    }
}

fn joined(pieces: &[String]) -> String {
    let kept: Vec<&str> = pieces
        .iter()
        .filter(|p| !p.is_empty())
        .map(String::as_str)
        .collect();
    kept.join("\n")
}

/// The messages of Anthropic and Chat: every role but `skip`'s is read.
fn messages(body: &Value, skip: &[&str], pieces: &mut Vec<String>) -> Result<Vec<String>, ()> {
    let mut users = Vec::new();
    for message in body.get("messages").and_then(Value::as_array).ok_or(())? {
        if !message.is_object() {
            return Err(());
        }
        let role = message.get("role").and_then(Value::as_str).ok_or(())?;
        let texts = texts(message.get("content"), &["text"])?;
        if skip.contains(&role) {
            continue;
        }
        let text = joined(&texts);
        if role == "user" && !text.is_empty() {
            users.push(text);
        }
        pieces.extend(texts);
    }
    Ok(users)
}

fn responses_input(body: &Value, pieces: &mut Vec<String>) -> Result<Vec<String>, ()> {
    let mut users = Vec::new();
    match body.get("input") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => {
            users.push(s.clone());
            pieces.push(s.clone());
        }
        Some(Value::Array(items)) => {
            for item in items {
                if !item.is_object() {
                    return Err(());
                }
                if !matches!(
                    item.get("type").and_then(Value::as_str),
                    None | Some("message")
                ) {
                    continue;
                }
                let role = item.get("role").and_then(Value::as_str).ok_or(())?;
                let texts = texts(item.get("content"), &["input_text", "text", "output_text"])?;
                if role == "assistant" {
                    continue;
                }
                let text = joined(&texts);
                if role == "user" && !text.is_empty() {
                    users.push(text);
                }
                pieces.extend(texts);
            }
        }
        Some(_) => return Err(()),
    }
    Ok(users)
}

/// A stored prompt's variables, in the order of their keys.
fn prompt_variables(body: &Value, pieces: &mut Vec<String>) -> Result<(), ()> {
    let variables = match body.get("prompt") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Object(prompt)) => match prompt.get("variables") {
            None | Some(Value::Null) => return Ok(()),
            Some(Value::Object(v)) => v,
            Some(_) => return Err(()),
        },
        Some(_) => return Err(()),
    };
    let mut keys: Vec<&String> = variables.keys().collect();
    keys.sort();
    for key in keys {
        match &variables[key] {
            Value::String(s) => pieces.push(s.clone()),
            Value::Object(part) => match part.get("type").and_then(Value::as_str) {
                Some("input_text") => pieces.push(
                    part.get("text")
                        .and_then(Value::as_str)
                        .ok_or(())?
                        .to_owned(),
                ),
                Some(_) => {}
                None => return Err(()),
            },
            _ => return Err(()),
        }
    }
    Ok(())
}

/// Anthropic Text Completions: the `prompt` string read a character at a time, each
/// `"\n\nHuman:"` or `"\n\nAssistant:"` starting a turn; the text before the first (a system
/// prompt) and every Human turn, trimmed, are read, Assistant turns are not.
fn prompt_turns(body: &Value, pieces: &mut Vec<String>) -> Result<Vec<String>, ()> {
    let prompt = body.get("prompt").and_then(Value::as_str).ok_or(())?;
    let mut turns = vec![("system", String::new())];
    let mut rest = prompt;
    while let Some(c) = rest.chars().next() {
        let next = [("\n\nHuman:", "human"), ("\n\nAssistant:", "assistant")]
            .into_iter()
            .find(|(marker, _)| rest.starts_with(marker));
        if let Some((marker, who)) = next {
            turns.push((who, String::new()));
            rest = &rest[marker.len()..];
            continue;
        }
        if let Some((_, text)) = turns.last_mut() {
            text.push(c);
        }
        rest = &rest[c.len_utf8()..];
    }
    let mut users = Vec::new();
    for (who, text) in turns {
        let text = text.trim().to_owned();
        if who == "human" && !text.is_empty() {
            users.push(text.clone());
        }
        if who != "assistant" {
            pieces.push(text);
        }
    }
    Ok(users)
}

/// OpenAI's legacy completions: each prompt of `prompt` (a string or an array of strings; token
/// ids are refused) is a user message, then `suffix`; `stream_options` as Chat's.
fn completions(body: &Value, pieces: &mut Vec<String>) -> Result<Vec<String>, ()> {
    let prompts = match body.get("prompt") {
        Some(Value::String(prompt)) => vec![prompt.clone()],
        Some(Value::Array(prompts)) => prompts
            .iter()
            .map(|p| p.as_str().map(str::to_owned).ok_or(()))
            .collect::<Result<_, ()>>()?,
        _ => return Err(()),
    };
    let users: Vec<String> = prompts.iter().filter(|p| !p.is_empty()).cloned().collect();
    pieces.extend(prompts);
    pieces.extend(opt_str(body, "suffix")?);
    match body.get("stream_options") {
        None | Some(Value::Null) => {}
        Some(options @ Value::Object(_)) => {
            flag(options, "include_usage")?;
        }
        Some(_) => return Err(()),
    }
    Ok(users)
}

fn reference(api: Api, body: &Value) -> Result<Read, ()> {
    if !body.is_object() {
        return Err(());
    }
    let mut pieces = Vec::new();
    let users = match api {
        Api::AnthropicMessages => {
            pieces = texts(body.get("system"), &["text"])?;
            messages(body, &["assistant"], &mut pieces)?
        }
        Api::ChatCompletions => {
            let users = messages(body, &["assistant", "tool", "function"], &mut pieces)?;
            match body.get("stream_options") {
                None | Some(Value::Null) => {}
                Some(options @ Value::Object(_)) => {
                    flag(options, "include_usage")?;
                }
                Some(_) => return Err(()),
            }
            users
        }
        Api::Responses => {
            pieces.extend(opt_str(body, "instructions")?);
            prompt_variables(body, &mut pieces)?;
            let users = responses_input(body, &mut pieces)?;
            flag(body, "background")?;
            users
        }
        Api::AnthropicComplete => prompt_turns(body, &mut pieces)?,
        Api::Completions => completions(body, &mut pieces)?,
        Api::Embeddings => return input_only::embeddings(body),
        Api::MessageBatches => return input_only::message_batches(body),
        // No reference reader for Gemini or Converse yet (issue 55): `check` never draws them,
        // and a body checked against them would be called refused.
        Api::Gemini | Api::Converse => return Err(()),
    };
    let skip = users.len().saturating_sub(INTENT_MESSAGES);
    Ok(Read {
        input_text: joined(&pieces),
        last_user_text: users.last().cloned().unwrap_or_default(),
        intent: users[skip..].to_vec(),
        model: opt_str(body, "model")?,
        stream: flag(body, "stream")?,
    })
}

/// The target's body: panics when `input` breaks one of the properties above.
pub fn check(input: &[u8]) {
    let [which, body @ ..] = input else {
        return;
    };
    let apis = [
        Api::AnthropicMessages,
        Api::ChatCompletions,
        Api::Responses,
        Api::AnthropicComplete,
        Api::Completions,
    ];
    let api = apis[usize::from(*which) % apis.len()];
    check_body(api, body);
}

/// [`check`] for one API's request body.
pub fn check_body(api: Api, body: &[u8]) {
    let filter = parse_request(api, body);
    let plain = serde_json::from_slice::<Value>(body);
    let duplicates = serde_json::from_slice::<NoDuplicates>(body).is_err() && plain.is_ok();
    let expected = match &plain {
        Ok(value) if !duplicates => reference(api, value),
        _ => Err(()),
    };
    match (&filter, &expected) {
        (Ok(request), Ok(read)) => {
            let got = Read {
                input_text: request.input_text.clone(),
                last_user_text: request.last_user_text().to_owned(),
                intent: request.intent().into_iter().map(str::to_owned).collect(),
                model: request.model.clone(),
                stream: request.stream,
            };
            assert_eq!(&got, read, "the filter read other text than serde_json's");
        }
        (Err(refused), Err(())) => {
            let message = refused.message();
            if plain.is_err() {
                assert!(
                    // A repeated key before the syntax error is the first fault the filter meets.
                    message.contains("not valid JSON")
                        || message.contains("not UTF-8")
                        || message.contains("duplicate key"),
                    "a body serde_json refuses, refused for another reason: {message}"
                );
            } else if duplicates {
                assert!(
                    message.contains("duplicate key"),
                    "a repeated key, refused as: {message}"
                );
            } else {
                assert!(
                    message.contains("must") || message.contains("needs"),
                    "a shape refusal that names no rule: {message}"
                );
            }
        }
        (Ok(_), Err(())) => {
            panic!("the filter accepted a body serde_json or the vendor's shape refuses")
        }
        (Err(refused), Ok(_)) => panic!("the filter refused a plain body: {}", refused.message()),
    }
}
