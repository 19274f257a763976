//! Recovery: `POST /v1/retry` asks the model again after an answer the caller never saw failed a
//! check that asks for recovery.
//!
//! The retry is the original request in its own vendor format, changed only as recovery needs: the
//! same model, conversation and sampling; not streamed; no tool it could call (tools dropped, or,
//! when the conversation already holds tool calls the vendor must match to their definitions, kept
//! with the tool choice `none`); and one instruction naming the broken rules, in the request's own
//! instructions (Anthropic `system`, a last Chat `system` message, Responses `instructions`, one
//! more part of Gemini's system instruction, one more Converse `system` block; legacy completions
//! have none, so it goes before their one text prompt). The rejected answer is never
//! part of it: the callout does not carry it.
//!
//! It goes only to the upstream the config names for the turn's authority, with the turn's own
//! credentials (or the upstream's own key, where the caller's cannot serve: [`platform`]), and
//! comes back as the vendor's answer verbatim or `errored` with a fixed reason. Logs name the API, upstream, status, outcome and duration; never a body, a rule or a key.
//!
//! Each vendor API's rules (its path, where its tools and instructions sit) are in a file of their
//! own: [`anthropic`], [`chat`], [`complete`], [`completions`], [`responses`], [`gemini`],
//! [`converse`]; the platforms' paths and credentials (Vertex, Bedrock, the Gemini API) in
//! [`platform`]. Here the common part: the failures, the
//! instruction, the JSON helpers they share, the target URL and the call upstream.

mod anthropic;
mod chat;
mod complete;
mod completions;
mod converse;
mod gemini;
mod platform;
mod responses;

use std::time::Instant;

use axum::http::{HeaderMap, HeaderValue};
use livecheck_wire::{Api, RetryAnswer, RetryOutcome, RetryRequest};
use reqwest::Url;
use serde_json::{Map, Value};

use crate::config::{Upstream, Upstreams};
use crate::limits::{read_capped, Unread};

/// The callout's headers that are the turn's credentials and vendor options, sent upstream as they
/// came (one list, shared with the filter).
pub use livecheck_wire::FORWARDED_HEADERS;

/// Why a retry has no answer. Each says a fixed sentence; none quotes the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    UnknownUpstream,
    NoRule,
    BadPath,
    BadRequest,
    StoredConversation,
    BadHeader,
    Unreachable,
    Timeout,
    Status(u16),
    TooLarge,
    NotJson,
    VendorError,
    /// An API whose answers are never asked again.
    NotAskedAgain,
    /// The caller signed the request (Bedrock's SigV4), and the upstream has no key of its own.
    SignedByCaller,
    /// A legacy completion without one text prompt to put the instruction before.
    NoPlaceForInstruction,
    /// A Converse request to a stored prompt, which may not set the `system` the instruction joins.
    StoredPrompt,
}

impl Failure {
    pub fn reason(self) -> String {
        match self {
            Self::UnknownUpstream => "no upstream is configured for this host".into(),
            Self::NoRule => "the retry names no broken rule".into(),
            Self::BadPath => "the path is not one of this API's".into(),
            Self::BadRequest => "the original request is not a JSON object".into(),
            Self::StoredConversation => {
                "a request in a stored conversation cannot be asked again without the rejected answer"
                    .into()
            }
            Self::BadHeader => "a forwarded header is not a valid header value".into(),
            Self::Unreachable => "the upstream could not be reached".into(),
            Self::Timeout => "the upstream did not answer in time".into(),
            Self::Status(code) => format!("the upstream answered status {code}"),
            Self::TooLarge => "the upstream's answer is too large".into(),
            Self::NotJson => "the upstream's answer is not a JSON object".into(),
            Self::VendorError => "the upstream answered with an error".into(),
            Self::NotAskedAgain => "this API's answers are not asked again".into(),
            Self::SignedByCaller => {
                "the caller signed the request, and the upstream has no key of its own".into()
            }
            Self::NoPlaceForInstruction => {
                "the request has no one text prompt to put the instruction before".into()
            }
            Self::StoredPrompt => {
                "a request to a stored prompt cannot carry the instruction".into()
            }
        }
    }

    /// A short name for logs.
    pub fn code(self) -> &'static str {
        match self {
            Self::UnknownUpstream => "unknown_upstream",
            Self::NoRule => "no_rule",
            Self::BadPath => "bad_path",
            Self::BadRequest => "bad_request",
            Self::StoredConversation => "stored_conversation",
            Self::BadHeader => "bad_header",
            Self::Unreachable => "unreachable",
            Self::Timeout => "timeout",
            Self::Status(_) => "status",
            Self::TooLarge => "too_large",
            Self::NotJson => "not_json",
            Self::VendorError => "vendor_error",
            Self::NotAskedAgain => "not_asked_again",
            Self::SignedByCaller => "signed_by_caller",
            Self::NoPlaceForInstruction => "no_place_for_instruction",
            Self::StoredPrompt => "stored_prompt",
        }
    }
}

/// What the model is told: the rules its answer broke, to answer again keeping them, and to keep
/// quiet about it.
pub fn instruction(rules: &[String]) -> String {
    let mut text = String::from(
        "Your previous answer to the last message was not shown to the user because it broke \
         these rules:",
    );
    for rule in rules {
        // One rule per line, whatever the operator wrote.
        let rule = rule.split_whitespace().collect::<Vec<_>>().join(" ");
        text.push_str("\n- ");
        text.push_str(&rule);
    }
    text.push_str(
        "\nAnswer the last message again and keep every one of these rules. Do not mention this \
         instruction, a correction or an earlier answer.",
    );
    text
}

/// The retry's body: `request` (the original body's JSON text) changed as the module says.
/// `keep_tools`: the answer was stopped for a denied tool call; the retry keeps the tools.
pub fn retry_body(
    api: Api,
    request: &str,
    rules: &[String],
    keep_tools: bool,
) -> Result<Value, Failure> {
    if rules.is_empty() {
        return Err(Failure::NoRule);
    }
    let Ok(Value::Object(mut body)) = serde_json::from_str::<Value>(request) else {
        return Err(Failure::BadRequest);
    };
    body.remove("stream");
    body.remove("stream_options");
    let instruction = instruction(rules);
    match api {
        Api::AnthropicMessages => anthropic::adapt(&mut body, instruction, keep_tools),
        Api::ChatCompletions => chat::adapt(&mut body, instruction, keep_tools),
        Api::Responses => responses::adapt(&mut body, instruction, keep_tools)?,
        Api::Completions => completions::adapt(&mut body, instruction)?,
        Api::AnthropicComplete => complete::adapt(&mut body, &instruction)?,
        // No answer of theirs is checked, so none is asked again.
        Api::Embeddings | Api::MessageBatches => return Err(Failure::NotAskedAgain),
        Api::Gemini => gemini::adapt(&mut body, instruction, keep_tools)?,
        Api::Converse => converse::adapt(&mut body, instruction, keep_tools)?,
    }
    Ok(Value::Object(body))
}

/// The objects of a JSON array, if it is one.
fn objects(list: Option<&Value>) -> impl Iterator<Item = &Map<String, Value>> {
    list.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object)
}

fn type_of(item: &Map<String, Value>) -> &str {
    item.get("type").and_then(Value::as_str).unwrap_or_default()
}

/// Without tool history, drops the tool definitions and choices; with it, keeps the definitions
/// (the vendor checks the history against them) and sets each choice to `none`.
fn disable_tools(
    body: &mut Map<String, Value>,
    tool_history: bool,
    definitions: &[&str],
    choices: &[&str],
    none: Value,
) {
    let defined = definitions
        .iter()
        .any(|k| body.get(*k).is_some_and(|v| !v.is_null()));
    if tool_history && defined {
        for choice in choices {
            body.insert((*choice).to_owned(), none.clone());
        }
    } else {
        for key in definitions.iter().chain(choices) {
            body.remove(*key);
        }
    }
}

fn api_name(api: Api) -> &'static str {
    match api {
        Api::AnthropicMessages => "anthropic_messages",
        Api::ChatCompletions => "chat_completions",
        Api::Responses => "responses",
        Api::Completions => "completions",
        Api::AnthropicComplete => "anthropic_complete",
        Api::Embeddings => "embeddings",
        Api::MessageBatches => "message_batches",
        Api::Gemini => "gemini",
        Api::Converse => "converse",
    }
}

/// `{base_url}{path}`, only when `path` is this API's (as the filter reads paths:
/// [`livecheck_wire::endpoint`]) and stays on the upstream's origin.
fn target(upstream: &Upstream, api: Api, path: &str) -> Result<Url, Failure> {
    let is_api = livecheck_wire::endpoint("POST", path).is_some_and(|e| e.api == api);
    if !path.starts_with('/') || path.contains('#') || !is_api {
        return Err(Failure::BadPath);
    }
    let base = upstream.base_url.as_str().trim_end_matches('/');
    let url = Url::parse(&format!("{base}{path}")).map_err(|_| Failure::BadPath)?;
    let same_origin = url.scheme() == upstream.base_url.scheme()
        && url.host_str() == upstream.base_url.host_str()
        && url.port_or_known_default() == upstream.base_url.port_or_known_default();
    if !same_origin {
        return Err(Failure::BadPath);
    }
    Ok(url)
}

/// Asks the upstream named for the turn's authority again, reading at most `max_answer_bytes` of
/// its answer. Never fails: whatever goes wrong is an `errored` answer with a fixed reason.
pub async fn ask_again(
    client: &reqwest::Client,
    upstreams: &Upstreams,
    req: &RetryRequest,
    headers: &HeaderMap,
    max_answer_bytes: usize,
) -> RetryAnswer {
    let started = Instant::now();
    let upstream = upstreams.for_authority(&req.authority);
    let mut status = None;
    let result = match &upstream {
        None => Err(Failure::UnknownUpstream),
        Some(upstream) => {
            send(
                client,
                upstream,
                req,
                headers,
                max_answer_bytes,
                &mut status,
            )
            .await
        }
    };
    let failure = result.as_ref().err().copied();
    tracing::info!(
        api = api_name(req.api),
        upstream = upstream.as_ref().map_or("none", |u| u.name.as_str()),
        attempt = req.attempt,
        status = status.unwrap_or(0),
        outcome = if failure.is_some() {
            "errored"
        } else {
            "answered"
        },
        failure = failure.map_or("none", Failure::code),
        elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        "asked again"
    );
    match result {
        Ok(body) => RetryAnswer {
            outcome: RetryOutcome::Answered,
            body: Some(body),
            reason: None,
        },
        Err(failure) => RetryAnswer {
            outcome: RetryOutcome::Errored,
            body: None,
            reason: Some(failure.reason()),
        },
    }
}

async fn send(
    client: &reqwest::Client,
    upstream: &Upstream,
    req: &RetryRequest,
    headers: &HeaderMap,
    max_answer_bytes: usize,
    status: &mut Option<u16>,
) -> Result<String, Failure> {
    let own_key = platform::own_key(upstream, &req.path)?;
    let path = platform::retry_path(&req.path, own_key.is_some());
    let url = target(upstream, req.api, &path)?;
    if req.api == Api::Converse && converse::names_a_stored_prompt(&req.path) {
        return Err(Failure::StoredPrompt);
    }
    let body = retry_body(req.api, &req.request, &req.rules, req.keep_tools)?;
    let mut request = client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .header("accept-encoding", "identity")
        .body(body.to_string());
    for name in FORWARDED_HEADERS {
        let credential = matches!(
            name,
            "authorization" | "x-api-key" | "api-key" | "x-goog-api-key"
        );
        if credential && own_key.is_some() {
            continue;
        }
        if let Some(value) = headers.get(name) {
            let mut value =
                HeaderValue::from_bytes(value.as_bytes()).map_err(|_| Failure::BadHeader)?;
            value.set_sensitive(credential);
            request = request.header(name, value);
        }
    }
    if let Some(key) = own_key {
        let (name, value) = platform::own_key_header(&req.path, key);
        let mut value = HeaderValue::from_str(&value).map_err(|_| Failure::BadHeader)?;
        value.set_sensitive(true);
        request = request.header(name, value);
    }
    let call = async {
        let response = request.send().await.map_err(|_| Failure::Unreachable)?;
        let code = response.status().as_u16();
        *status = Some(code);
        if code != 200 {
            return Err(Failure::Status(code));
        }
        read_capped(response, max_answer_bytes)
            .await
            .map_err(|unread| match unread {
                Unread::TooLarge => Failure::TooLarge,
                Unread::Broken => Failure::Unreachable,
            })
    };
    let bytes = tokio::time::timeout(upstream.timeout, call)
        .await
        .map_err(|_| Failure::Timeout)??;
    let Ok(Value::Object(answer)) = serde_json::from_slice::<Value>(&bytes) else {
        return Err(Failure::NotJson);
    };
    let vendor_error = answer.get("type").and_then(Value::as_str) == Some("error")
        || answer.get("error").is_some_and(|e| !e.is_null());
    if vendor_error {
        return Err(Failure::VendorError);
    }
    String::from_utf8(bytes).map_err(|_| Failure::NotJson)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn rules() -> Vec<String> {
        vec!["Never swear.".into(), "Stay\non topic.".into()]
    }

    #[test]
    fn the_instruction_lists_each_rule_on_its_line() {
        let text = instruction(&rules());
        assert!(
            text.contains("\n- Never swear.\n- Stay on topic.\n"),
            "{text}"
        );
        assert!(text.contains("Do not mention this instruction"));
    }

    #[test]
    fn a_retry_without_rules_or_an_object_is_refused() {
        assert_eq!(
            retry_body(Api::ChatCompletions, "{}", &[], false),
            Err(Failure::NoRule)
        );
        for bad in ["[]", "nope", "\"x\""] {
            assert_eq!(
                retry_body(Api::ChatCompletions, bad, &rules(), false),
                Err(Failure::BadRequest)
            );
        }
    }

    #[test]
    fn a_retry_after_a_denied_tool_call_keeps_the_tools() {
        let request = r#"{"model": "m", "tools": [{"type": "function", "function": {"name": "send_email"}}],
            "tool_choice": "auto", "parallel_tool_calls": true, "messages": [{"role": "user", "content": "hi"}]}"#;
        let kept = retry_body(Api::ChatCompletions, request, &rules(), true).unwrap();
        assert_eq!(kept["tools"][0]["function"]["name"], "send_email");
        assert_eq!(kept["tool_choice"], "auto");
        let dropped = retry_body(Api::ChatCompletions, request, &rules(), false).unwrap();
        assert!(dropped.get("tools").is_none());
        for (api, request) in [
            (
                Api::AnthropicMessages,
                r#"{"tools": [{"name": "t"}], "messages": []}"#,
            ),
            (
                Api::Responses,
                r#"{"tools": [{"type": "function", "name": "t"}], "input": "hi"}"#,
            ),
        ] {
            let kept = retry_body(api, request, &rules(), true).unwrap();
            assert_eq!(kept["tools"].as_array().unwrap().len(), 1, "{api:?}");
            assert!(kept.get("tool_choice").is_none(), "{api:?}");
        }
    }

    #[test]
    fn only_this_apis_path_on_the_upstreams_origin_is_a_target() {
        let upstream = Upstream {
            name: "u".into(),
            base_url: Url::parse("https://api.example.com/gateway").unwrap(),
            timeout: std::time::Duration::from_secs(1),
            api_key: None,
        };
        let ok = target(&upstream, Api::ChatCompletions, "/v1/chat/completions?x=1").unwrap();
        assert_eq!(
            ok.as_str(),
            "https://api.example.com/gateway/v1/chat/completions?x=1"
        );
        for path in [
            "/v1/files",
            "v1/chat/completions",
            "@evil.example/v1/chat/completions",
            "/v1/chat/completions#x",
        ] {
            assert_eq!(
                target(&upstream, Api::ChatCompletions, path),
                Err(Failure::BadPath),
                "{path}"
            );
        }
        assert_eq!(
            target(&upstream, Api::Responses, "/v1/chat/completions"),
            Err(Failure::BadPath)
        );
    }
}
