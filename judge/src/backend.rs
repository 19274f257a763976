//! Calling a judge backend: one module per API shape builds the request body and reads the answer
//! (plain functions, tested natively); this module sends it with the turn's key.

pub mod anthropic;
pub mod openai;

use axum::http::{HeaderMap, HeaderValue};
use livecheck_wire::Usage;
use serde_json::Value;

use crate::config::{Api, Backend};
use crate::limits::{read_capped, Unread};
use crate::prompt::Prompt;
use crate::verdict::{Failure, Reply};

/// The turn's credentials as the callout carried them. Never printed.
#[derive(Clone, Default)]
pub struct TurnKey {
    bearer: Option<String>,
    api_key: Option<String>,
}

impl std::fmt::Debug for TurnKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TurnKey(<redacted>)")
    }
}

impl TurnKey {
    /// From the callout's `authorization: Bearer …` (OpenAI style) and `x-api-key` (Anthropic).
    pub fn from_headers(headers: &HeaderMap) -> Self {
        let text = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|v| !v.is_empty())
        };
        let bearer = text("authorization").and_then(|v| {
            let (scheme, token) = v.split_once(' ')?;
            let token = token.trim();
            (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then(|| token.to_owned())
        });
        Self {
            bearer,
            api_key: text("x-api-key").map(str::to_owned),
        }
    }

    /// Whether the callout carried no key at all.
    pub fn is_empty(&self) -> bool {
        self.bearer.is_none() && self.api_key.is_none()
    }

    /// The key for a backend: the style it speaks first, then the other, then its own fallback.
    fn for_backend<'a>(&'a self, backend: &'a Backend) -> Option<&'a str> {
        let (first, second) = match backend.api {
            Api::Openai => (&self.bearer, &self.api_key),
            Api::Anthropic => (&self.api_key, &self.bearer),
        };
        first
            .as_deref()
            .or(second.as_deref())
            .or(backend.fallback_key.as_deref())
    }
}

/// Sends one judge call and reads the answer, at most `max_answer_bytes` of it (a larger answer is
/// [`Failure::TooLarge`]). The caller bounds it with the request timeout.
pub async fn ask(
    client: &reqwest::Client,
    backend: &Backend,
    model: &str,
    prompt: &Prompt,
    key: &TurnKey,
    max_answer_bytes: usize,
) -> Reply {
    let (body, auth) = match backend.api {
        Api::Openai => (
            openai::request_body(model, prompt, backend.max_tokens),
            key.for_backend(backend)
                .map(|k| ("authorization", format!("Bearer {k}"))),
        ),
        Api::Anthropic => (
            anthropic::request_body(model, prompt, backend.max_tokens),
            key.for_backend(backend)
                .map(|k| ("x-api-key", k.to_owned())),
        ),
    };
    let mut request = client
        .post(backend.endpoint.clone())
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .body(body.to_string());
    if backend.api == Api::Anthropic {
        request = request.header("anthropic-version", anthropic::VERSION);
    }
    if let Some((name, value)) = auth {
        let Ok(mut value) = HeaderValue::from_str(&value) else {
            return Reply::failed(Failure::BadKey);
        };
        value.set_sensitive(true);
        request = request.header(name, value);
    }
    let response = match request.send().await {
        Ok(r) => r,
        Err(e) if e.is_timeout() => return Reply::failed(Failure::Timeout),
        Err(_) => return Reply::failed(Failure::Unreachable),
    };
    let status = response.status().as_u16();
    let bytes = match read_capped(response, max_answer_bytes).await {
        Ok(bytes) => bytes,
        Err(Unread::TooLarge) => return Reply::failed(Failure::TooLarge),
        Err(Unread::Broken) => return Reply::failed(Failure::Unreachable),
    };
    match backend.api {
        Api::Openai => openai::read_answer(prompt.form, status, &bytes),
        Api::Anthropic => anthropic::read_answer(prompt.form, status, &bytes),
    }
}

/// The common first steps of reading an answer: a 2xx with a JSON object carrying no error.
fn answer_object(status: u16, body: &[u8]) -> Result<Value, Failure> {
    if !(200..300).contains(&status) {
        return Err(Failure::Status(status));
    }
    let value: Value = serde_json::from_slice(body).map_err(|_| Failure::NotJson)?;
    if !value.is_object() {
        return Err(Failure::NotJson);
    }
    let has_error = value.get("error").is_some_and(|e| !e.is_null())
        || value.get("type").and_then(Value::as_str) == Some("error");
    if has_error {
        return Err(Failure::ErrorInAnswer);
    }
    Ok(value)
}

fn count(value: &Value, pointer: &str) -> u64 {
    value.pointer(pointer).and_then(Value::as_u64).unwrap_or(0)
}

fn no_usage() -> Usage {
    Usage::default()
}
