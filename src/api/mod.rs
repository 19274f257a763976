//! The API shapes the filter checks: Anthropic Messages, OpenAI Chat Completions and OpenAI
//! Responses; the legacy text completions of both (OpenAI `/v1/completions`, Anthropic
//! `/v1/complete`); embeddings (input only); Anthropic Message Batches (input only). The paths
//! that call them, on each platform (Azure, Vertex, Bedrock), are [`endpoint`]'s.
//!
//! For each: which request text an input check reads, what a non-streamed answer says (its text, the
//! text beside its tool calls, whether it asks for a tool), and the bodies the filter writes in the
//! vendor's own shape (a refused question, a withheld answer, an error). Pure Rust: the caller
//! supplies ids and timestamps ([`Ids`]), since this module draws no randomness and reads no clock.
//!
//! Request bodies are parsed strictly (valid UTF-8, one JSON value, no duplicate keys at any depth)
//! so that the text a check reads is the text the vendor reads: a parser that kept the first of two
//! `"messages"` where the vendor keeps the last would let a question past its checks.

pub(crate) mod anthropic;
pub(crate) mod chat;
pub(crate) mod complete;
pub(crate) mod completions;
pub(crate) mod converse;
mod dialect;
mod embeddings;
#[cfg(test)]
mod fixtures;
pub(crate) mod gemini;
mod message_batches;
mod peek;
mod recovered;
pub(crate) mod responses;

use std::ops::Range;

use serde_json::Value;

use crate::json::{self, FieldError};
pub use anthropic::platform::signed_header;
pub use dialect::{unread_message, Dialect};
pub use message_batches::BatchRequest;
pub use peek::{peek_id, PEEK_BYTES};
pub use recovered::{answer_usage, as_stream, stream_usage, with_usage, Usage};

/// The API shapes the filter reads (one enum with the sidecar's), and the paths that call them
/// ([`endpoint`]: which API a request's method and path call, on which platform).
pub use livecheck_wire::{endpoint, Api, Endpoint, Platform};

/// What the caller wrote, as input checks read it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Request {
    /// System, developer and user text and values filled into the prompt, joined by `"\n"`; never
    /// images, files, audio, tool results or assistant messages.
    pub input_text: String,
    /// Where the text of each of the last user messages that have text (at most
    /// [`livecheck_wire::INTENT_MESSAGES`]) lies in `input_text`, oldest first: a message's pieces
    /// are joined there as in the message, so its text is never copied ([`Request::intent`]).
    pub user_texts: Vec<Range<usize>>,
    /// `"stream": true`.
    pub stream: bool,
    /// `"background": true` (Responses only).
    pub background: bool,
    /// Chat Completions `stream_options.include_usage`: a streamed reply ends with a usage chunk.
    pub include_usage: bool,
    /// The answer streams as one JSON array, not as server-sent events (the path's:
    /// [`Endpoint::json_array`]).
    pub json_array: bool,
    /// The requested model, when the request names one.
    pub model: Option<String>,
    /// Where the request went (what the path says): Bedrock streams Messages events inside
    /// event-stream chunks ([`in_bedrock_chunks`]).
    pub platform: Platform,
}

impl Request {
    /// The text of the last user messages that have text, oldest first: what a tool-call check's
    /// judge reads as the user's intent.
    pub fn intent(&self) -> Vec<&str> {
        self.user_texts.iter().map(|r| self.text_at(r)).collect()
    }

    /// The text of the last user message that has text (a turn that only returns tool results is
    /// skipped): what a judge reads beside an answer.
    pub fn last_user_text(&self) -> &str {
        self.user_texts.last().map_or("", |r| self.text_at(r))
    }

    fn text_at(&self, range: &Range<usize>) -> &str {
        self.input_text.get(range.clone()).unwrap_or("")
    }
}

/// The model's non-streamed answer, as output checks read it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Answer {
    /// The answer's text blocks, concatenated in order without separator: what judged checks read.
    pub text: String,
    /// `text`, then for each tool call `"\n"` and its argument values joined by `"\n"`: what rule
    /// checks read, so forbidden text never reaches a tool. Only when asked for ([`parse_answer`]'s
    /// `rule_text`): gathering the values reads every call's arguments once more.
    pub rule_text: Option<String>,
    /// The round ended asking the caller to run a tool.
    pub asks_for_tool: bool,
    /// The answer's id (`msg_…`, `chatcmpl-…`, `resp_…`).
    pub id: Option<String>,
    /// The tool calls it asks the caller to run, in order (tool-call checks read them). Tools the
    /// vendor runs itself (Anthropic server tools, Responses hosted tools) already ran: not here.
    pub calls: Vec<ToolCall>,
}

/// A tool call as tool-call checks read it: a model's (any vendor, streamed or not) or an MCP
/// client's `tools/call`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolCall {
    /// The tool's name; for a Responses built-in tool (`computer_call`, `local_shell_call`, …) the
    /// item's type.
    pub name: String,
    /// The arguments as written: JSON text, or free text when `json` is false (a custom tool).
    pub arguments: String,
    pub json: bool,
}

/// Ids and time for a body the filter writes on its own (a refused question).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ids {
    /// A fresh random token (letters and digits); each vendor adds its own prefix (`msg_`,
    /// `chatcmpl-`, `resp_`).
    pub token: String,
    /// Unix time in seconds.
    pub created: u64,
}

/// A body the filter writes, with its content type. The status is the caller's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

const JSON: &str = "application/json";
const EVENT_STREAM: &str = "text/event-stream";
/// The content type of an AWS event stream (Bedrock's `converse-stream`).
const AWS_EVENT_STREAM: &str = crate::eventstream::MEDIA_TYPE;

/// Whether an answer's `content-type` says it streams: server-sent events, or an AWS event stream.
pub fn is_stream(content_type: &str) -> bool {
    let t = content_type.trim_start();
    t.starts_with(EVENT_STREAM) || t.starts_with(AWS_EVENT_STREAM)
}

/// A request body the filter refuses to forward unchecked. The message is safe to show the caller:
/// it names fields, never quotes the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRequest(String);

impl BadRequest {
    pub fn message(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for BadRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<json::BodyError> for BadRequest {
    fn from(e: json::BodyError) -> Self {
        BadRequest(e.to_string())
    }
}

impl From<FieldError> for BadRequest {
    fn from(e: FieldError) -> Self {
        BadRequest(e.to_string())
    }
}

/// An answer body the filter cannot read, so it is withheld rather than passed. The message names
/// fields, never quotes the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadAnswer(String);

impl BadAnswer {
    pub fn message(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for BadAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<FieldError> for BadAnswer {
    fn from(e: FieldError) -> Self {
        BadAnswer(e.to_string())
    }
}

/// Reads a request body: what input checks read and how the caller wants the answer.
pub fn parse_request(api: Api, body: &[u8]) -> Result<Request, BadRequest> {
    let endpoint = Endpoint {
        api,
        platform: Platform::Direct,
        model: None,
        stream: None,
        json_array: false,
    };
    read_request(&endpoint, body)
}

/// Reads a request on its endpoint: the body as its API reads it, with what its platform asks of
/// the body, then what the path says (the model it names wins over the body's; whether the answer
/// streams, when the path decides it).
pub fn read_request(endpoint: &Endpoint, body: &[u8]) -> Result<Request, BadRequest> {
    let _span = crate::profile::span("phase.parse_request");
    let arena = json::arena_for(body);
    let body = request_object(body, &arena)?;
    let mut request = read_body(endpoint.api, body.clone())?;
    if endpoint.api == Api::AnthropicMessages {
        anthropic::platform::read(&body, endpoint.platform)?;
    }
    if let Some(model) = &endpoint.model {
        request.model = Some(model.clone());
    }
    if let Some(stream) = endpoint.stream {
        request.stream = stream;
    }
    request.json_array = endpoint.json_array;
    request.platform = endpoint.platform;
    Ok(request)
}

/// Whether the answer streams as Bedrock's `invoke-with-response-stream` does: the API's events,
/// each base64 in an AWS event-stream `chunk` message (`stream::chunks`), where the vendor's own
/// path streams them as server-sent events.
pub(crate) fn in_bedrock_chunks(api: Api, request: &Request) -> bool {
    api == Api::AnthropicMessages && request.platform == Platform::Bedrock && request.stream
}

/// The body as its API reads it.
fn read_body(api: Api, body: json::Obj<'_>) -> Result<Request, BadRequest> {
    match api {
        Api::AnthropicMessages => anthropic::parse_request(&body),
        Api::ChatCompletions => chat::parse_request(&body),
        Api::Responses => responses::parse_request(&body),
        Api::Completions => completions::parse_request(&body),
        Api::AnthropicComplete => complete::parse_request(&body),
        Api::Embeddings => embeddings::parse_request(&body),
        Api::MessageBatches => {
            message_batches::parse_requests(&body).map(|r| message_batches::as_one(&r))
        }
        Api::Gemini => gemini::parse_request(&body),
        Api::Converse => converse::parse_request(&body),
    }
    .map_err(BadRequest::from)
}

/// A request body as every reader reads it: one JSON object, parsed strictly.
fn request_object<'a>(
    body: &'a [u8],
    arena: &'a bumpalo::Bump,
) -> Result<json::Obj<'a>, BadRequest> {
    match json::parse_node(body, arena).map_err(BadRequest::from)? {
        json::Node::Object(body) => Ok(body),
        _ => Err(BadRequest("the request body must be a JSON object".into())),
    }
}

/// Reads a Message Batch (`POST …/v1/messages/batches`): each request under its `custom_id`, its
/// input checks to decide on it alone, and the batch as one request ([`parse_request`]'s).
pub fn read_batch(body: &[u8]) -> Result<(Request, Vec<BatchRequest>), BadRequest> {
    let _span = crate::profile::span("phase.parse_request");
    let arena = json::arena_for(body);
    let requests = message_batches::parse_requests(&request_object(body, &arena)?)?;
    Ok((message_batches::as_one(&requests), requests))
}

/// A Message Batch refused for its request `custom_id` (an input check stopped it): Anthropic's
/// error, naming the request, never its text. The caller gets status 400.
pub fn batch_refused(custom_id: &str) -> Reply {
    Dialect::Anthropic
        .error(400, &message_batches::refused_message(custom_id))
        .0
}

/// Reads a non-streamed answer body; its [`Answer::rule_text`] too when `rule_text` (when a rule
/// check will read it).
pub fn parse_answer(api: Api, raw: &[u8], rule_text: bool) -> Result<Answer, BadAnswer> {
    let _span = crate::profile::span("phase.parse_answer");
    let arena = json::arena_for(raw);
    let body = match json::parse_answer_node(raw, &arena) {
        Ok(json::Node::Object(body)) => body,
        Ok(_) => return Err(BadAnswer("the answer body is not a JSON object".into())),
        Err(json::AnswerFault::NotUtf8) => {
            return Err(BadAnswer("the answer body is not UTF-8".into()))
        }
        Err(json::AnswerFault::NotJson) => {
            return Err(BadAnswer("the answer body is not JSON".into()))
        }
    };
    match api {
        Api::AnthropicMessages => anthropic::parse_answer(raw, &body, rule_text),
        Api::ChatCompletions => chat::parse_answer(&body, rule_text),
        Api::Responses => responses::parse_answer(&body, rule_text),
        Api::Completions => completions::parse_answer(&body, rule_text),
        Api::AnthropicComplete => complete::parse_answer(&body, rule_text),
        Api::Gemini => gemini::parse_answer(&body, rule_text),
        Api::Converse => converse::parse_answer(raw, &body, rule_text),
        Api::Embeddings | Api::MessageBatches => no_answer(),
    }
    .map_err(BadAnswer::from)
}

/// What the answer readers say of an input-only API ([`Api::has_answer`]): a turn never reads its
/// answer, so none is ever asked for; were one, it is unreadable (withheld, never passed unread).
fn no_answer<T>() -> Result<T, FieldError> {
    Err(FieldError::must_be(
        "the answer",
        "of an API whose answers livecheck reads (embeddings and Message Batches have none)",
    ))
}

/// The answer to a refused question (a blocking input check failed, or a Responses request with
/// `background: true`): `reply` as the model's whole answer, ending the way the vendor ends a
/// refusal, streamed when the request asked for a stream (as SSE; Converse as an AWS event stream,
/// `application/vnd.amazon.eventstream`). Usage is zero: no model was called.
pub fn refusal(api: Api, reply: &str, req: &Request, ids: &Ids) -> Reply {
    let body = match (api, req.stream) {
        (Api::AnthropicMessages, false) => anthropic::refusal(reply, req, ids),
        (Api::AnthropicMessages, true) => anthropic::refusal_stream(reply, req, ids),
        (Api::ChatCompletions, false) => chat::refusal(reply, req, ids),
        (Api::ChatCompletions, true) => chat::refusal_stream(reply, req, ids),
        (Api::Responses, false) => responses::refusal(reply, req, ids),
        (Api::Responses, true) => responses::refusal_stream(reply, req, ids),
        (Api::Completions, false) => completions::refusal(reply, req, ids),
        (Api::Completions, true) => completions::refusal_stream(reply, req, ids),
        (Api::AnthropicComplete, false) => complete::refusal(reply, req, ids),
        (Api::AnthropicComplete, true) => complete::refusal_stream(reply, req, ids),
        (Api::Gemini, false) => gemini::refusal(reply, req, ids),
        (Api::Gemini, true) => gemini::refusal_stream(reply, req, ids),
        (Api::Converse, false) => converse::refusal(reply),
        (Api::Converse, true) => converse::stream::refusal_stream(reply),
        (Api::Embeddings, _) => json::to_vec(&embeddings::refusal(reply)),
        (Api::MessageBatches, _) => json::to_vec(&message_batches::refusal()),
    };
    if in_bedrock_chunks(api, req) {
        return Reply {
            content_type: crate::stream::chunks::CONTENT_TYPE,
            body: crate::stream::chunks::reframed(&body),
        };
    }
    Reply {
        // Gemini's JSON-array stream is `application/json`, as Google sends it.
        content_type: match (api, req.stream) {
            (_, false) => JSON,
            (Api::Converse, true) => AWS_EVENT_STREAM,
            (_, true) if req.json_array => JSON,
            (_, true) => EVENT_STREAM,
        },
        body,
    }
}

/// A failed non-streamed answer rewritten to say `reply` instead: id, model, usage and timestamps
/// kept, content (tool calls included) replaced, ending the way the vendor ends a refusal.
/// The content type stays `application/json`.
pub fn withheld(api: Api, answer_body: &[u8], reply: &str) -> Result<Vec<u8>, BadAnswer> {
    let mut body = answer_object(answer_body)?;
    match api {
        Api::AnthropicMessages => anthropic::withhold(&mut body, reply),
        Api::ChatCompletions => chat::withhold(&mut body, reply),
        Api::Responses => responses::withhold(&mut body, reply),
        Api::Completions => completions::withhold(&mut body, reply),
        Api::AnthropicComplete => complete::withhold(&mut body, reply),
        Api::Gemini => gemini::withhold(&mut body, reply),
        Api::Converse => converse::withhold(&mut body, reply),
        Api::Embeddings | Api::MessageBatches => no_answer(),
    }
    .map_err(BadAnswer::from)?;
    Ok(json::to_vec(&Value::Object(body)))
}

fn answer_object(body: &[u8]) -> Result<serde_json::Map<String, Value>, BadAnswer> {
    let body =
        std::str::from_utf8(body).map_err(|_| BadAnswer("the answer body is not UTF-8".into()))?;
    match serde_json::from_str(body) {
        Ok(Value::Object(body)) => Ok(body),
        Ok(_) => Err(BadAnswer("the answer body is not a JSON object".into())),
        Err(_) => Err(BadAnswer("the answer body is not JSON".into())),
    }
}

/// The caller's text of a request, gathered message by message as the vendor's reader walks it:
/// every piece that is read, joined by `"\n"` (empty pieces left out), and where in it the text of
/// each user message that has any lies (its pieces, joined the same way).
#[derive(Debug, Default)]
struct CallerText {
    input: String,
    user_texts: Vec<Range<usize>>,
}

impl CallerText {
    /// A piece of text an input check reads that is no user message's (instructions, a system
    /// prompt, a prompt's variables).
    fn piece(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        if !self.input.is_empty() {
            self.input.push('\n');
        }
        self.input.push_str(text);
    }

    /// A message's text pieces, read as input; a user's are also its intent.
    fn message(&mut self, user: bool, texts: &[&str]) {
        // The message's pieces follow one another in the input, joined as the message joins them.
        let mut text: Option<Range<usize>> = None;
        for piece in texts.iter().filter(|p| !p.is_empty()) {
            self.piece(piece);
            let end = self.input.len();
            let start = text
                .as_ref()
                .map_or(end.saturating_sub(piece.len()), |t| t.start);
            text = Some(start..end);
        }
        if let Some(text) = text.filter(|_| user) {
            self.user_texts.push(text);
        }
    }

    /// The input text, and where the last [`livecheck_wire::INTENT_MESSAGES`] user texts lie in it.
    fn finish(mut self) -> (String, Vec<Range<usize>>) {
        let extra = self
            .user_texts
            .len()
            .saturating_sub(livecheck_wire::INTENT_MESSAGES);
        self.user_texts.drain(..extra);
        (self.input, self.user_texts)
    }
}

/// The text of a message's `content`: the string itself, or the `text` of each block whose `type`
/// is one of `text_types` (other blocks: images, files, audio, tool results, are not read).
/// `path` names the field in errors.
fn content_texts<'n>(
    content: Option<&'n json::Node<'_>>,
    text_types: &[&str],
    path: &dyn Fn() -> String,
) -> Result<Vec<&'n str>, FieldError> {
    use json::Node;
    // The path is written only for an error: most bodies have none.
    match content {
        None | Some(Node::Null) => Ok(Vec::new()),
        Some(Node::Str(s)) => Ok(vec![s]),
        Some(Node::Array(blocks)) => {
            let mut texts = Vec::new();
            for (i, block) in blocks.iter().enumerate() {
                let Node::Object(block) = block else {
                    return Err(FieldError::must_be(format!("{}[{i}]", path()), "an object"));
                };
                let Some(kind) = block.str_field("type") else {
                    return Err(FieldError::must_be(
                        format!("{}[{i}].type", path()),
                        "a string",
                    ));
                };
                if text_types.contains(&kind) {
                    match block.str_field("text") {
                        Some(text) => texts.push(text),
                        None => {
                            return Err(FieldError::must_be(
                                format!("{}[{i}].text", path()),
                                "a string",
                            ))
                        }
                    }
                }
            }
            Ok(texts)
        }
        Some(_) => Err(FieldError::must_be(
            path(),
            "a string or an array of content blocks",
        )),
    }
}

/// OpenAI's `stream_options.include_usage` (Chat and legacy completions): a streamed answer ends
/// with a usage chunk.
fn include_usage(body: &json::Obj<'_>) -> Result<bool, FieldError> {
    match body.get("stream_options") {
        None | Some(json::Node::Null) => Ok(false),
        Some(json::Node::Object(options)) => options
            .bool_field("include_usage")
            .map_err(|_| FieldError::must_be("stream_options.include_usage", "a boolean")),
        Some(_) => Err(FieldError::must_be("stream_options", "an object")),
    }
}

/// The argument values of an answer's tool calls, gathered only when its rule text is asked for.
struct CallValues(Option<Vec<Vec<String>>>);

impl CallValues {
    fn new(wanted: bool) -> Self {
        Self(wanted.then(Vec::new))
    }

    /// Adds a call's values, made by `values` only when they are wanted.
    fn push(&mut self, values: impl FnOnce() -> Vec<String>) {
        if let Some(calls) = &mut self.0 {
            calls.push(values());
        }
    }

    /// The answer's rule text: `text`, then for each call `"\n"` and its values joined by `"\n"`.
    fn rule_text(self, text: &str) -> Option<String> {
        self.0.map(|calls| {
            let mut rule_text = text.to_owned();
            for values in &calls {
                rule_text.push('\n');
                rule_text.push_str(&values.join("\n"));
            }
            rule_text
        })
    }
}

#[cfg(test)]
mod tests;
