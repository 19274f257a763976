//! Anthropic Message Batches, `POST /v1/messages/batches` (create): input only
//! ([`Api::has_answer`](super::Api::has_answer)).
//!
//! Reference: <https://docs.anthropic.com/en/api/creating-message-batches>. The body is
//! `{"requests": [{"custom_id": "…", "params": {a Messages body}}, …]}`; every request's `params`
//! is read as Messages is ([`super::anthropic`]) and its input checks decide on it alone. The
//! answers are read back later (`GET …/batches/{id}/results`), past every output check.

use serde_json::Value;

use super::{anthropic, Request};
use crate::json::{FieldError, Node, Obj};

/// One request of a batch: its `custom_id` (what a refusal names, never its text) and what its
/// input checks read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchRequest {
    pub custom_id: String,
    pub request: Request,
}

/// Every request of the batch, in order. A request whose `params` cannot be read as Messages
/// refuses the batch, the error naming its field under `requests[i].params`. A request may ask for
/// a stream: a batch never streams.
pub(super) fn parse_requests(body: &Obj<'_>) -> Result<Vec<BatchRequest>, FieldError> {
    let Some(Node::Array(requests)) = body.get("requests") else {
        return Err(FieldError::must_be("requests", "an array"));
    };
    let mut read = Vec::with_capacity(requests.len());
    for (i, request) in requests.iter().enumerate() {
        let Node::Object(request) = request else {
            return Err(FieldError::must_be(format!("requests[{i}]"), "an object"));
        };
        let Some(custom_id) = request.str_field("custom_id") else {
            return Err(FieldError::must_be(
                format!("requests[{i}].custom_id"),
                "a string",
            ));
        };
        let Some(Node::Object(params)) = request.get("params") else {
            return Err(FieldError::must_be(
                format!("requests[{i}].params"),
                "an object",
            ));
        };
        let request = anthropic::parse_request(params).map_err(|e| match e {
            FieldError::MustBe { field, expected } => {
                FieldError::must_be(format!("requests[{i}].params.{field}"), expected)
            }
            other @ FieldError::Needs { .. } => other,
        })?;
        read.push(BatchRequest {
            custom_id: custom_id.to_owned(),
            request,
        });
    }
    Ok(read)
}

/// The batch as one request: every request's text, joined by `"\n"` (no user message of its own:
/// no answer of a batch is judged); the model when every request names the same one; never a
/// stream.
pub(super) fn as_one(requests: &[BatchRequest]) -> Request {
    let mut input_text = String::new();
    for text in requests
        .iter()
        .map(|r| r.request.input_text.as_str())
        .filter(|t| !t.is_empty())
    {
        if !input_text.is_empty() {
            input_text.push('\n');
        }
        input_text.push_str(text);
    }
    let mut models = requests.iter().map(|r| r.request.model.as_ref());
    let first = models.next().flatten();
    let model = first.filter(|m| models.all(|o| o == Some(*m))).cloned();
    Request {
        input_text,
        model,
        ..Request::default()
    }
}

/// The message of a batch refused for one of its requests: it names the request by its
/// `custom_id`, never its text, and says that none of the batch was queued.
pub(super) fn refused_message(custom_id: &str) -> String {
    format!(
        "this gateway's input checks refused the batch's request with custom_id {custom_id:?}: \
         no request of the batch was queued"
    )
}

/// A batch refused when no one request is named (its judged checks would stop it): Anthropic's
/// error, the caller gets status 400.
pub(super) fn refusal() -> Value {
    anthropic::error(
        400,
        "this gateway's input checks refused a request of the batch: no request of the batch was queued",
    )
}

#[cfg(test)]
mod tests {
    use crate::api::{parse_request, read_batch, refusal, Api, Ids};
    use serde_json::json;

    fn messages(text: &str) -> serde_json::Value {
        json!({"model": "claude-sonnet-4-5", "max_tokens": 64,
               "messages": [{"role": "user", "content": text}]})
    }

    fn batch(requests: &[(&str, serde_json::Value)]) -> Vec<u8> {
        let requests: Vec<_> = requests
            .iter()
            .map(|(id, params)| json!({"custom_id": id, "params": params}))
            .collect();
        json!({ "requests": requests }).to_string().into_bytes()
    }

    #[test]
    fn each_request_is_read_as_messages_under_its_custom_id() {
        let mut streamed = messages("second");
        streamed["stream"] = json!(true);
        streamed["system"] = json!("be brief");
        let body = batch(&[("a", messages("first")), ("b", streamed)]);
        let (one, requests) = read_batch(&body).unwrap();
        let read: Vec<_> = requests
            .iter()
            .map(|r| (r.custom_id.as_str(), r.request.input_text.as_str()))
            .collect();
        assert_eq!(read, [("a", "first"), ("b", "be brief\nsecond")]);
        assert_eq!(one.input_text, "first\nbe brief\nsecond");
        assert_eq!(one.model.as_deref(), Some("claude-sonnet-4-5"));
        assert!(!one.stream, "a batch never streams");
        assert_eq!(parse_request(Api::MessageBatches, &body).unwrap(), one);
    }

    #[test]
    fn the_model_is_the_batchs_only_when_every_request_names_it() {
        let mut other = messages("x");
        other["model"] = json!("claude-haiku-4-5");
        let (one, _) = read_batch(&batch(&[("a", messages("x")), ("b", other)])).unwrap();
        assert_eq!(one.model, None);
        let (empty, requests) = read_batch(br#"{"requests": []}"#).unwrap();
        assert!(requests.is_empty());
        assert_eq!(empty.input_text, "");
    }

    #[test]
    fn an_unreadable_request_refuses_the_batch_naming_its_field() {
        let bad = json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user",
                         "content": [{"type": "text"}]}]});
        let cases = [
            (br#"{}"#.to_vec(), "requests must be an array"),
            (
                br#"{"requests": [1]}"#.to_vec(),
                "requests[0] must be an object",
            ),
            (
                br#"{"requests": [{"params": {}}]}"#.to_vec(),
                "requests[0].custom_id must be a string",
            ),
            (
                br#"{"requests": [{"custom_id": "a"}]}"#.to_vec(),
                "requests[0].params must be an object",
            ),
            (
                batch(&[("a", messages("x")), ("b", bad)]),
                "requests[1].params.messages[0].content[0].text must be a string",
            ),
            (
                batch(&[("a", json!({"model": "m", "max_tokens": 1}))]),
                "requests[0].params.messages must be an array",
            ),
        ];
        for (body, message) in cases {
            assert_eq!(read_batch(&body).unwrap_err().message(), message);
        }
        // Strict like every reader: a repeated key could hide a request from the checks.
        let twice = br#"{"requests": [], "requests": []}"#;
        assert!(read_batch(twice).is_err());
    }

    #[test]
    fn a_refused_batch_is_an_anthropic_error() {
        let (one, _) = read_batch(&batch(&[("a", messages("x"))])).unwrap();
        let ids = Ids {
            token: "t".into(),
            created: 1,
        };
        let reply = refusal(Api::MessageBatches, "the agent's reply", &one, &ids);
        let body: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
        assert_eq!(body["type"], "error");
        assert_eq!(body["error"]["type"], "invalid_request_error");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(!message.contains("the agent's reply"), "{message}");
        let refused = crate::api::batch_refused("req-7");
        let body: serde_json::Value = serde_json::from_slice(&refused.body).unwrap();
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert!(body["error"]["message"]
            .as_str()
            .unwrap()
            .contains(r#"custom_id "req-7""#));
    }
}
