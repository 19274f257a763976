//! OpenAI-compatible Chat Completions (`POST {base}/v1/chat/completions`): the verdict comes back as
//! the message content, constrained by `response_format: json_schema` with `strict: true`.

use livecheck_wire::Usage;
use serde_json::{json, Value};

use super::{answer_object, count, no_usage};
use crate::prompt::Prompt;
use crate::verdict::{schema, Failure, ModelVerdict, Reply};

pub const SCHEMA_NAME: &str = "judge_verdict";

pub fn request_body(model: &str, prompt: &Prompt, max_tokens: u32) -> Value {
    json!({
        "model": model,
        "messages": [
            {"role": "system", "content": prompt.system},
            {"role": "user", "content": prompt.user}
        ],
        "temperature": 0,
        "max_tokens": max_tokens,
        "stream": false,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": SCHEMA_NAME, "strict": true, "schema": schema()}
        }
    })
}

pub fn read_answer(status: u16, body: &[u8]) -> Reply {
    let answer = match answer_object(status, body) {
        Ok(a) => a,
        Err(failure) => {
            return Reply {
                verdict: Err(failure),
                usage: no_usage(),
            }
        }
    };
    let usage = Usage {
        input_tokens: count(&answer, "/usage/prompt_tokens"),
        output_tokens: count(&answer, "/usage/completion_tokens"),
    };
    Reply {
        verdict: verdict(&answer),
        usage,
    }
}

fn verdict(answer: &Value) -> Result<ModelVerdict, Failure> {
    let message = answer.pointer("/choices/0/message").ok_or(Failure::Empty)?;
    if message
        .get("refusal")
        .and_then(Value::as_str)
        .is_some_and(|r| !r.trim().is_empty())
    {
        return Err(Failure::Refused);
    }
    let content = message
        .get("content")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .ok_or(Failure::Empty)?;
    let value: Value = serde_json::from_str(content).map_err(|_| Failure::Malformed)?;
    ModelVerdict::from_value(&value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completion(content: Value) -> Vec<u8> {
        json!({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 12}
        })
        .to_string()
        .into_bytes()
    }

    #[test]
    fn the_content_is_the_verdict() {
        let r = read_answer(
            200,
            &completion(json!(r#"{"passed":true,"score":0.9,"reason":"Polite."}"#)),
        );
        assert_eq!(
            r.verdict.map(|v| (v.passed, v.reason)),
            Ok((true, "Polite.".into()))
        );
        assert_eq!(
            r.usage,
            Usage {
                input_tokens: 100,
                output_tokens: 12
            }
        );
    }

    #[test]
    fn no_content_a_refusal_or_prose_is_no_verdict() {
        assert_eq!(
            read_answer(200, &completion(json!(""))).verdict,
            Err(Failure::Empty)
        );
        assert_eq!(
            read_answer(200, &completion(Value::Null)).verdict,
            Err(Failure::Empty)
        );
        assert_eq!(
            read_answer(200, br#"{"choices":[]}"#).verdict,
            Err(Failure::Empty)
        );
        assert_eq!(
            read_answer(200, &completion(json!("It passed."))).verdict,
            Err(Failure::Malformed)
        );
        let refused = json!({"choices": [{"message": {"content": null, "refusal": "I can't."}}]});
        assert_eq!(
            read_answer(200, refused.to_string().as_bytes()).verdict,
            Err(Failure::Refused)
        );
    }

    #[test]
    fn errors_and_garbage_are_failures() {
        assert_eq!(read_answer(502, b"").verdict, Err(Failure::Status(502)));
        assert_eq!(read_answer(200, b"<html>").verdict, Err(Failure::NotJson));
        assert_eq!(
            read_answer(200, br#"{"error":{"message":"overloaded"}}"#).verdict,
            Err(Failure::ErrorInAnswer)
        );
    }
}
