//! The error shapes the filter writes on its own, by the dialect a client speaks: Anthropic's,
//! OpenAI's, Google's and Amazon Bedrock's. A read endpoint's errors follow its API and platform
//! ([`Dialect::of`]); a path livecheck does not read is refused in the dialect its path and
//! headers suggest ([`Dialect::guess`]), so the client's SDK raises its usual error.

use serde_json::{json, Value};

use super::{anthropic, chat, Api, Platform, Reply, JSON};
use crate::json;

/// A vendor's error dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Anthropic,
    OpenAi,
    /// The Gemini API and Vertex AI: `{"error": {"code", "message", "status"}}`.
    Google,
    /// Amazon Bedrock: `{"message"}` and the error's type in `x-amzn-errortype`.
    Bedrock,
}

impl Dialect {
    /// The dialect of a read endpoint: Bedrock's on Bedrock, else its API's vendor's.
    pub fn of(api: Api, platform: Platform) -> Self {
        if platform == Platform::Bedrock {
            return Self::Bedrock;
        }
        match api {
            Api::AnthropicMessages | Api::AnthropicComplete | Api::MessageBatches => {
                Self::Anthropic
            }
            Api::ChatCompletions | Api::Responses | Api::Completions | Api::Embeddings => {
                Self::OpenAi
            }
            Api::Gemini => Self::Google,
            Api::Converse => Self::Bedrock,
        }
    }

    /// The dialect of a request to a path livecheck does not read, from its path (the query
    /// ignored) and whether it carries an `anthropic-version` header.
    pub fn guess(path: &str, anthropic_version: bool) -> Self {
        let path = path.split(['?', '#']).next().unwrap_or(path);
        if path.contains("/publishers/anthropic/") {
            Self::Anthropic
        } else if path.contains("/model/") && !path.contains("/models/") {
            Self::Bedrock
        } else if path.contains(":generateContent")
            || path.contains(":streamGenerateContent")
            || path.contains("/publishers/")
            || path.starts_with("/v1beta/")
        {
            Self::Google
        } else if anthropic_version
            || path.contains("/v1/messages")
            || path.contains("/v1/complete")
        {
            Self::Anthropic
        } else {
            Self::OpenAi
        }
    }

    /// An error body in this dialect for `status`, with the headers the dialect adds.
    pub fn error(self, status: u16, message: &str) -> (Reply, Vec<(&'static str, &'static str)>) {
        let (body, headers): (Value, Vec<(&str, &str)>) = match self {
            Self::Anthropic if status == 403 => (
                json!({"type": "error", "error": {"type": "permission_error", "message": message}}),
                Vec::new(),
            ),
            Self::Anthropic => (anthropic::error(status, message), Vec::new()),
            Self::OpenAi => (chat::error(message), Vec::new()),
            Self::Google => (
                json!({"error": {"code": status, "message": message, "status": google_status(status)}}),
                Vec::new(),
            ),
            Self::Bedrock => (
                json!({"message": message}),
                vec![("x-amzn-errortype", bedrock_type(status))],
            ),
        };
        let reply = Reply {
            content_type: JSON,
            body: json::to_vec(&body),
        };
        (reply, headers)
    }
}

fn google_status(status: u16) -> &'static str {
    match status {
        403 => "PERMISSION_DENIED",
        413 => "OUT_OF_RANGE",
        _ => "INVALID_ARGUMENT",
    }
}

fn bedrock_type(status: u16) -> &'static str {
    match status {
        403 => "AccessDeniedException",
        _ => "ValidationException",
    }
}

/// The message of a refused unread request: names the method and path (the query left out: it
/// may hold a key), says livecheck does not check it, and how an operator passes one on purpose.
pub fn unread_message(method: &str, path: &str) -> String {
    let path = path.split(['?', '#']).next().unwrap_or(path);
    let shown: String = path.chars().take(200).collect();
    let cut = if shown.len() < path.len() { "…" } else { "" };
    format!(
        "livecheck does not check {method} {shown}{cut}, so this gateway refuses it: livecheck \
         reads the model APIs it can check and refuses the rest (an endpoint that makes no model \
         generate can be passed with `pass_paths` in the livecheck configuration)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(dialect: Dialect, status: u16) -> (Value, Vec<(&'static str, &'static str)>) {
        let (reply, headers) = dialect.error(status, "no");
        (serde_json::from_slice(&reply.body).unwrap(), headers)
    }

    #[test]
    fn each_dialect_writes_its_vendors_error_shape() {
        let (b, _) = body(Dialect::Anthropic, 403);
        assert_eq!(b["error"]["type"], "permission_error");
        assert_eq!(b["type"], "error");
        let (b, _) = body(Dialect::OpenAi, 403);
        assert_eq!(b["error"]["message"], "no");
        let (b, _) = body(Dialect::Google, 403);
        assert_eq!(b["error"]["status"], "PERMISSION_DENIED");
        assert_eq!(b["error"]["code"], 403);
        let (b, h) = body(Dialect::Bedrock, 400);
        assert_eq!(b, json!({"message": "no"}));
        assert_eq!(h, vec![("x-amzn-errortype", "ValidationException")]);
    }

    #[test]
    fn an_unread_path_is_refused_in_the_dialect_its_path_suggests() {
        for (path, anthropic, dialect) in [
            (
                "/v1beta/models/gemini-2.5-pro:generateContent?key=k",
                false,
                Dialect::Google,
            ),
            (
                "/v1/projects/p/locations/l/publishers/google/models/g:streamGenerateContent",
                false,
                Dialect::Google,
            ),
            (
                "/model/amazon.nova-pro-v1%3A0/converse",
                false,
                Dialect::Bedrock,
            ),
            (
                "/model/anthropic.claude-v2/invoke-with-response-stream",
                false,
                Dialect::Bedrock,
            ),
            ("/v1/messages/batches/b/results", false, Dialect::Anthropic),
            ("/v1/files", true, Dialect::Anthropic),
            ("/v1/files", false, Dialect::OpenAi),
            ("/v1/batches", false, Dialect::OpenAi),
        ] {
            assert_eq!(Dialect::guess(path, anthropic), dialect, "{path}");
        }
    }

    #[test]
    fn the_message_names_the_path_without_its_query() {
        let m = unread_message("POST", "/v1beta/models/g:generateContent?key=secret");
        assert!(m.contains("POST /v1beta/models/g:generateContent,"));
        assert!(!m.contains("secret"));
        let long = format!("/{}", "a".repeat(500));
        assert!(unread_message("POST", &long).len() < 500);
    }
}
