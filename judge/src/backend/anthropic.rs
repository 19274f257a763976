//! The Anthropic Messages API (`POST {base}/v1/messages`): the verdict comes back as the input of a
//! forced tool call (`tool_choice: {type: "tool"}`), whose `input_schema` is the schema of the verdict
//! the prompt asks for ([`Form`]).

use livecheck_wire::Usage;
use serde_json::{json, Value};

use super::{answer_object, count, no_usage};
use crate::prompt::Prompt;
use crate::verdict::{Failure, Form, ModelVerdict, Reply};

pub const VERSION: &str = "2023-06-01";
pub const TOOL_NAME: &str = "record_verdict";

pub fn request_body(model: &str, prompt: &Prompt, max_tokens: u32) -> Value {
    json!({
        "model": model,
        "max_tokens": max_tokens,
        "temperature": 0,
        "system": prompt.system,
        "messages": [{"role": "user", "content": prompt.user}],
        "tools": [{
            "name": TOOL_NAME,
            "description": prompt.form.tool_description(),
            "input_schema": prompt.form.schema()
        }],
        "tool_choice": {"type": "tool", "name": TOOL_NAME}
    })
}

/// Reads an answer to a prompt that asked for a `form` verdict.
pub fn read_answer(form: Form, status: u16, body: &[u8]) -> Reply {
    let answer = match answer_object(status, body) {
        Ok(a) => a,
        Err(failure) => {
            return Reply {
                verdict: Err(failure),
                usage: no_usage(),
            }
        }
    };
    // Cached prompt tokens are billed too, so they count.
    let usage = Usage {
        input_tokens: count(&answer, "/usage/input_tokens")
            + count(&answer, "/usage/cache_creation_input_tokens")
            + count(&answer, "/usage/cache_read_input_tokens"),
        output_tokens: count(&answer, "/usage/output_tokens"),
    };
    Reply {
        verdict: verdict(form, &answer),
        usage,
    }
}

fn verdict(form: Form, answer: &Value) -> Result<ModelVerdict, Failure> {
    if answer.get("stop_reason").and_then(Value::as_str) == Some("refusal") {
        return Err(Failure::Refused);
    }
    let call = answer
        .get("content")
        .and_then(Value::as_array)
        .and_then(|blocks| {
            blocks.iter().find(|b| {
                b.get("type").and_then(Value::as_str) == Some("tool_use")
                    && b.get("name").and_then(Value::as_str) == Some(TOOL_NAME)
            })
        })
        .ok_or(Failure::Empty)?;
    let input = call.get("input").ok_or(Failure::Malformed)?;
    form.read(input)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(content: Value) -> Vec<u8> {
        json!({
            "type": "message", "role": "assistant", "content": content, "stop_reason": "tool_use",
            "usage": {"input_tokens": 90, "cache_read_input_tokens": 10, "output_tokens": 20}
        })
        .to_string()
        .into_bytes()
    }

    #[test]
    fn the_tool_input_is_the_verdict() {
        let r = read_answer(
            Form::Judged,
            200,
            &message(json!([
                {"type": "text", "text": "Deciding."},
                {"type": "tool_use", "id": "t", "name": TOOL_NAME,
                 "input": {"passed": false, "score": 0.1, "reason": "Hostile."}}
            ])),
        );
        assert_eq!(
            r.verdict.map(|v| (v.passed, v.score)),
            Ok((false, Some(0.1)))
        );
        assert_eq!(
            r.usage,
            Usage {
                input_tokens: 100,
                output_tokens: 20
            }
        );
    }

    #[test]
    fn text_alone_or_another_tool_is_no_verdict() {
        let text = message(
            json!([{"type": "text", "text": "{\"passed\":true,\"score\":1,\"reason\":\"x\"}"}]),
        );
        assert_eq!(
            read_answer(Form::Judged, 200, &text).verdict,
            Err(Failure::Empty)
        );
        let other = message(json!([{"type": "tool_use", "name": "other", "input": {}}]));
        assert_eq!(
            read_answer(Form::Judged, 200, &other).verdict,
            Err(Failure::Empty)
        );
        assert_eq!(
            read_answer(Form::Judged, 200, &message(json!([]))).verdict,
            Err(Failure::Empty)
        );
    }

    #[test]
    fn a_tool_check_verdict_is_the_forced_tool_calls_input() {
        let prompt = Prompt {
            system: "s".into(),
            user: "u".into(),
            nonce: "n".into(),
            form: Form::ToolCheck,
        };
        let body = request_body("m", &prompt, 64);
        assert_eq!(body["tools"][0]["input_schema"], Form::ToolCheck.schema());
        assert_eq!(body["tool_choice"]["name"], TOOL_NAME);
        let answer = |input: Value| {
            read_answer(
                Form::ToolCheck,
                200,
                &message(
                    json!([{"type": "tool_use", "id": "t", "name": TOOL_NAME, "input": input}]),
                ),
            )
            .verdict
        };
        assert_eq!(
            answer(json!({"result": false, "explanation": "No billing data."})),
            Ok(ModelVerdict {
                passed: true,
                score: None,
                reason: "No billing data.".into()
            })
        );
        assert_eq!(answer(json!({"result": true})), Err(Failure::Malformed));
    }

    #[test]
    fn an_error_event_in_a_200_is_a_failure() {
        let body =
            br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(
            read_answer(Form::Judged, 200, body).verdict,
            Err(Failure::ErrorInAnswer)
        );
        assert_eq!(
            read_answer(Form::Judged, 529, body).verdict,
            Err(Failure::Status(529))
        );
    }
}
