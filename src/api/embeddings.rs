//! OpenAI embeddings, `POST /v1/embeddings` (on Azure `…/openai/deployments/{d}/embeddings`):
//! input only ([`Api::has_answer`](super::Api::has_answer)).
//!
//! Reference: <https://platform.openai.com/docs/api-reference/embeddings/create>. The caller's text
//! reaches the vendor in `input`: a string, an array of strings, or tokens (an array of integers,
//! or an array of such arrays). Tokens are not text livecheck can read, so a request that sends
//! them is refused (fail closed). The answer is a list of vectors: nothing an output check reads.

use serde_json::Value;

use super::{CallerText, Request};
use crate::json::{FieldError, Node, Obj};

/// What `input` must be for livecheck to read it.
const READABLE_INPUT: &str =
    "a string or an array of strings (livecheck cannot read token arrays, so it refuses them)";

/// The text input checks read: every string of `input`, one user message.
pub(super) fn parse_request(body: &Obj<'_>) -> Result<Request, FieldError> {
    let texts: Vec<&str> = match body.get("input") {
        Some(Node::Str(text)) => vec![text],
        Some(Node::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                item.as_str()
                    .ok_or_else(|| FieldError::must_be(format!("input[{i}]"), READABLE_INPUT))
            })
            .collect::<Result<_, _>>()?,
        _ => return Err(FieldError::must_be("input", READABLE_INPUT)),
    };
    let mut caller = CallerText::default();
    caller.message(true, &texts);
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

/// A refused input: embeddings have no refusal of their own, so the agent's reply comes as
/// OpenAI's error (the caller gets status 400).
pub(super) fn refusal(reply: &str) -> Value {
    super::chat::error(reply)
}

#[cfg(test)]
mod tests {
    use crate::api::{parse_request, refusal, Api, Ids, Request};

    fn read(body: &str) -> Result<Request, String> {
        parse_request(Api::Embeddings, body.as_bytes()).map_err(|e| e.to_string())
    }

    #[test]
    fn a_string_or_every_string_of_an_array_is_read() {
        let one = read(r#"{"model": "text-embedding-3-small", "input": "my password"}"#).unwrap();
        assert_eq!(one.input_text, "my password");
        assert_eq!(one.last_user_text(), "my password");
        assert_eq!(one.model.as_deref(), Some("text-embedding-3-small"));
        assert!(!one.stream);
        let many = read(
            r#"{"model": "m", "input": ["first", "", "the password"],
                            "encoding_format": "base64", "dimensions": 8}"#,
        )
        .unwrap();
        assert_eq!(many.input_text, "first\nthe password");
    }

    #[test]
    fn token_arrays_and_other_inputs_are_refused_naming_the_field() {
        for (body, field) in [
            (r#"{"model": "m", "input": [1, 2, 3]}"#, "input[0]"),
            (r#"{"model": "m", "input": [[1, 2], [3]]}"#, "input[0]"),
            (r#"{"model": "m", "input": ["text", 7]}"#, "input[1]"),
            (r#"{"model": "m", "input": 7}"#, "input"),
            (r#"{"model": "m"}"#, "input"),
            (r#"{"model": "m", "input": null}"#, "input"),
        ] {
            let message = read(body).unwrap_err();
            assert!(
                message.starts_with(&format!("{field} must be a string or an array of strings")),
                "{body}: {message}"
            );
            assert!(message.contains("token arrays"), "{message}");
        }
        assert!(read(r#"{"model": 1, "input": "x"}"#)
            .unwrap_err()
            .starts_with("model must be"));
        // Strict like every reader: a repeated key could hide text from the checks.
        assert!(read(r#"{"model": "m", "input": "a", "input": "password"}"#).is_err());
    }

    #[test]
    fn a_refused_input_is_an_openai_error_holding_the_reply() {
        let request = read(r#"{"model": "m", "input": "password"}"#).unwrap();
        let ids = Ids {
            token: "t".into(),
            created: 1,
        };
        let reply = refusal(Api::Embeddings, "Not here.", &request, &ids);
        assert_eq!(reply.content_type, "application/json");
        let body: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
        assert_eq!(body["error"]["message"], "Not here.");
        assert_eq!(body["error"]["type"], "invalid_request_error");
    }
}
