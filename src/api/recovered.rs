//! A recovered answer on its way to the caller: the usage of every attempt, the passing answer with
//! the usage of all of them, and that answer as the event stream a streaming caller expects.
//!
//! A retry is never streamed (the sidecar asks for a whole answer), so a caller that streamed gets
//! the passing answer re-emitted in its vendor's event sequence, built so the official SDKs
//! accumulate it to the same final message. Reasoning is re-emitted, not dropped: Anthropic
//! `thinking` as `thinking_delta` and `signature_delta`, other Anthropic blocks whole in their
//! `content_block_start`; Responses `reasoning` and every other non-message item whole in
//! `response.output_item.added` / `.done`; Chat `reasoning_content` (OpenAI-compatible servers)
//! as one delta. Each vendor's sequence is built in its own folder (`api/<vendor>/recovered.rs`);
//! the usage, which all three read and write by one table of fields, stays here.
//!
//! References: <https://docs.anthropic.com/en/docs/build-with-claude/streaming>,
//! <https://platform.openai.com/docs/api-reference/chat-streaming>,
//! <https://platform.openai.com/docs/api-reference/responses-streaming>.

use serde_json::{json, Map, Value};

use super::{answer_object, Api, BadAnswer, Request};
use crate::json::{to_vec, FieldError};
use crate::sse;

/// Tokens one answer (or several, summed) cost, in the vendor's own terms: Anthropic's input
/// excludes cached tokens, OpenAI's includes them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Anthropic `cache_read_input_tokens`; OpenAI `cached_tokens` (part of the input).
    pub cache_read_tokens: u64,
    /// Anthropic `cache_creation_input_tokens`.
    pub cache_creation_tokens: u64,
    /// OpenAI `reasoning_tokens` (part of the output).
    pub reasoning_tokens: u64,
}

impl Usage {
    /// Adds another answer's usage to this one (saturating).
    pub fn add(&mut self, other: &Usage) {
        for field in FIELDS {
            let sum = field.get(self).saturating_add(field.get(other));
            *field.get_mut(self) = sum;
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Input,
    Output,
    CacheRead,
    CacheCreation,
    Reasoning,
}

const FIELDS: [Field; 5] = [
    Field::Input,
    Field::Output,
    Field::CacheRead,
    Field::CacheCreation,
    Field::Reasoning,
];

impl Field {
    fn get(self, usage: &Usage) -> u64 {
        match self {
            Field::Input => usage.input_tokens,
            Field::Output => usage.output_tokens,
            Field::CacheRead => usage.cache_read_tokens,
            Field::CacheCreation => usage.cache_creation_tokens,
            Field::Reasoning => usage.reasoning_tokens,
        }
    }

    fn get_mut(self, usage: &mut Usage) -> &mut u64 {
        match self {
            Field::Input => &mut usage.input_tokens,
            Field::Output => &mut usage.output_tokens,
            Field::CacheRead => &mut usage.cache_read_tokens,
            Field::CacheCreation => &mut usage.cache_creation_tokens,
            Field::Reasoning => &mut usage.reasoning_tokens,
        }
    }

    /// Where the field is in the vendor's usage object (nested for OpenAI's details), if it has it.
    fn path(self, api: Api) -> Option<&'static [&'static str]> {
        match (api, self) {
            (Api::AnthropicMessages, Field::Input) => Some(&["input_tokens"]),
            (Api::AnthropicMessages, Field::Output) => Some(&["output_tokens"]),
            (Api::AnthropicMessages, Field::CacheRead) => Some(&["cache_read_input_tokens"]),
            (Api::AnthropicMessages, Field::CacheCreation) => {
                Some(&["cache_creation_input_tokens"])
            }
            (Api::AnthropicMessages, Field::Reasoning) => None,
            (Api::ChatCompletions, Field::Input) => Some(&["prompt_tokens"]),
            (Api::ChatCompletions, Field::Output) => Some(&["completion_tokens"]),
            (Api::ChatCompletions, Field::CacheRead) => {
                Some(&["prompt_tokens_details", "cached_tokens"])
            }
            (Api::ChatCompletions, Field::Reasoning) => {
                Some(&["completion_tokens_details", "reasoning_tokens"])
            }
            (Api::Responses, Field::Input) => Some(&["input_tokens"]),
            (Api::Responses, Field::Output) => Some(&["output_tokens"]),
            (Api::Responses, Field::CacheRead) => Some(&["input_tokens_details", "cached_tokens"]),
            (Api::Responses, Field::Reasoning) => {
                Some(&["output_tokens_details", "reasoning_tokens"])
            }
            (Api::ChatCompletions | Api::Responses, Field::CacheCreation) => None,
            (Api::Completions, Field::Input) => Some(&["prompt_tokens"]),
            (Api::Completions, Field::Output) => Some(&["completion_tokens"]),
            (Api::Completions, _) => None,
            // Text Completions state no usage.
            (Api::AnthropicComplete, _) => None,
            (Api::Embeddings, _) => None,
            (Api::MessageBatches, _) => None,
            // Gemini's `usageMetadata` is not a table of fields: [`super::gemini::usage`].
            (Api::Gemini, _) => None,
            // Bedrock's `inputTokens` leaves cache reads and writes out, as Anthropic's does.
            (Api::Converse, Field::Input) => Some(&["inputTokens"]),
            (Api::Converse, Field::Output) => Some(&["outputTokens"]),
            (Api::Converse, Field::CacheRead) => Some(&["cacheReadInputTokens"]),
            (Api::Converse, Field::CacheCreation) => Some(&["cacheWriteInputTokens"]),
            (Api::Converse, Field::Reasoning) => None,
        }
    }
}

/// Reads a vendor usage object: input and output are required, the details count 0 when absent.
fn read_usage(api: Api, usage: &Value) -> Option<Usage> {
    let mut out = Usage::default();
    for field in FIELDS {
        let Some(path) = field.path(api) else {
            continue;
        };
        let value = path
            .iter()
            .try_fold(usage, |v, key| v.get(*key))
            .and_then(Value::as_u64);
        match (field, value) {
            (_, Some(n)) => *field.get_mut(&mut out) = n,
            (Field::Input | Field::Output, None) => return None,
            (_, None) => {}
        }
    }
    Some(out)
}

/// The usage of a non-streamed answer, when it states one.
pub fn answer_usage(api: Api, body: &[u8]) -> Option<Usage> {
    let body = answer_object(body).ok()?;
    if api == Api::Gemini {
        return super::gemini::usage(body.get("usageMetadata")?);
    }
    read_usage(api, body.get("usage")?)
}

/// The usage of a complete streamed answer, from its raw SSE bytes: Anthropic's `message_start`
/// usage updated by every `message_delta` (its counts are cumulative); Chat's usage chunk (only
/// sent with `stream_options.include_usage`); Responses' usage on its terminal event; Converse's
/// `metadata` event (an AWS event stream, not SSE). `None` when
/// the stream states none or cannot be read.
pub fn stream_usage(api: Api, sse: &[u8]) -> Option<Usage> {
    if api == Api::Converse {
        return super::converse::recovered::stream_usage(sse);
    }
    let mut decoder = sse::Decoder::new(sse.len().max(1));
    let mut events = Vec::new();
    decoder.push(sse, &mut events).ok()?;
    decoder.finish(&mut events).ok()?;
    let mut usage: Option<Map<String, Value>> = None;
    for event in events {
        let Ok(data) = serde_json::from_str::<Value>(&event.data) else {
            continue;
        };
        let found = match (api, data.get("type").and_then(Value::as_str)) {
            (Api::AnthropicMessages, Some("message_start")) => data.pointer("/message/usage"),
            (Api::AnthropicMessages, Some("message_delta")) => data.get("usage"),
            (Api::ChatCompletions, _) => data.get("usage"),
            (Api::Completions, _) => data.get("usage"),
            (
                Api::Responses,
                Some("response.completed" | "response.incomplete" | "response.failed"),
            ) => data.pointer("/response/usage"),
            // Cumulative on every chunk: the last one is the answer's.
            (Api::Gemini, _) => data.get("usageMetadata"),
            _ => None,
        };
        let Some(Value::Object(found)) = found else {
            continue;
        };
        match (&mut usage, api) {
            // Anthropic's later counts replace the earlier ones field by field.
            (Some(so_far), Api::AnthropicMessages) => {
                for (key, value) in found {
                    if !value.is_null() {
                        so_far.insert(key.clone(), value.clone());
                    }
                }
            }
            _ => usage = Some(found.clone()),
        }
    }
    let usage = Value::Object(usage?);
    if api == Api::Gemini {
        return super::gemini::usage(&usage);
    }
    read_usage(api, &usage)
}

/// The passing non-streamed answer with its usage replaced by `total`, the usage of every attempt
/// summed; everything else unchanged. Chat and Responses get `total_tokens` = input + output
/// (Converse `totalTokens`, which adds the cache reads and writes too); a
/// detail count (cached, cache creation, reasoning) is written where the answer has it or the
/// total is not zero.
pub fn with_usage(api: Api, body: &[u8], total: &Usage) -> Result<Vec<u8>, BadAnswer> {
    let mut body = answer_object(body)?;
    if api == Api::Gemini {
        super::gemini::set_usage(&mut body, total).map_err(BadAnswer::from)?;
        return Ok(to_vec(&Value::Object(body)));
    }
    // An API that states no usage (Anthropic's Text Completions) gets none.
    if FIELDS.iter().all(|field| field.path(api).is_none()) {
        return Ok(to_vec(&Value::Object(body)));
    }
    let usage = body
        .entry("usage")
        .or_insert_with(|| Value::Object(Map::new()));
    if usage.is_null() {
        *usage = Value::Object(Map::new());
    }
    let Value::Object(usage) = usage else {
        return Err(BadAnswer("usage must be an object".into()));
    };
    for field in FIELDS {
        let Some(path) = field.path(api) else {
            continue;
        };
        let n = field.get(total);
        let always = matches!(field, Field::Input | Field::Output);
        set_count(usage, path, n, always).map_err(BadAnswer::from)?;
    }
    match api {
        Api::AnthropicMessages => {}
        // Bedrock's `totalTokens` adds all four counts (its input leaves the cache out).
        Api::Converse => {
            let sum = [total.cache_read_tokens, total.cache_creation_tokens]
                .iter()
                .fold(
                    total.input_tokens.saturating_add(total.output_tokens),
                    |s, n| s.saturating_add(*n),
                );
            usage.insert("totalTokens".into(), json!(sum));
        }
        _ => {
            let sum = total.input_tokens.saturating_add(total.output_tokens);
            usage.insert("total_tokens".into(), json!(sum));
        }
    }
    Ok(to_vec(&Value::Object(body)))
}

/// Writes `n` at `path` when `always`, or the field is there, or `n` is not zero. The error names
/// a parent that is not an object.
fn set_count(
    usage: &mut Map<String, Value>,
    path: &[&str],
    n: u64,
    always: bool,
) -> Result<(), FieldError> {
    let Some((last, parents)) = path.split_last() else {
        return Ok(());
    };
    let exists = parents
        .iter()
        .try_fold(&*usage, |map, key| match map.get(*key) {
            Some(Value::Object(next)) => Some(next),
            _ => None,
        })
        .is_some_and(|map| map.contains_key(*last));
    if !(always || exists || n > 0) {
        return Ok(());
    }
    let mut map = usage;
    for parent in parents {
        let slot = map
            .entry(*parent)
            .or_insert_with(|| Value::Object(Map::new()));
        if slot.is_null() {
            *slot = Value::Object(Map::new());
        }
        map = match slot {
            Value::Object(next) => next,
            _ => return Err(FieldError::must_be(format!("usage.{parent}"), "an object")),
        };
    }
    map.insert((*last).to_owned(), json!(n));
    Ok(())
}

/// The event stream a streaming caller of `api` expects for this non-streamed answer, with the
/// answer's own ids, model and usage (call [`with_usage`] first for the total). Chat ends with a
/// usage chunk only when `request.include_usage`, then `data: [DONE]`.
pub fn as_stream(api: Api, body: &[u8], request: &Request) -> Result<Vec<u8>, BadAnswer> {
    let body = answer_object(body)?;
    match api {
        Api::AnthropicMessages => super::anthropic::recovered::stream(body),
        Api::ChatCompletions => super::chat::recovered::stream(body, request),
        Api::Responses => super::responses::recovered::stream(body),
        Api::Completions => super::completions::recovered::stream(body, request),
        Api::AnthropicComplete => super::complete::recovered::stream(body),
        // A whole response is one chunk of Google's stream (each chunk is a response).
        Api::Gemini => Ok(super::gemini::as_chunk(&Value::Object(body), request)),
        Api::Converse => super::converse::recovered::stream(body),
        Api::Embeddings | Api::MessageBatches => super::no_answer(),
    }
    .map(|sse| {
        if super::in_bedrock_chunks(api, request) {
            crate::stream::chunks::reframed(&sse)
        } else {
            sse
        }
    })
    .map_err(BadAnswer::from)
}

#[cfg(test)]
mod tests;
