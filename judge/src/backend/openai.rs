//! OpenAI-compatible Chat Completions (`POST {base}/v1/chat/completions`): the verdict comes back as
//! the message content, constrained by `response_format: json_schema` with `strict: true` (the
//! schema of the verdict the prompt asks for: [`Form`]).

use livecheck_wire::Usage;
use serde_json::{json, Value};

use super::{answer_object, count, no_usage};
use crate::prompt::Prompt;
use crate::verdict::{Failure, Form, ModelVerdict, Reply};

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
            "json_schema": {
                "name": prompt.form.schema_name(),
                "strict": true,
                "schema": prompt.form.schema()
            }
        }
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
    let usage = Usage {
        input_tokens: count(&answer, "/usage/prompt_tokens"),
        output_tokens: count(&answer, "/usage/completion_tokens"),
    };
    Reply {
        verdict: verdict(form, &answer),
        usage,
    }
}

fn verdict(form: Form, answer: &Value) -> Result<ModelVerdict, Failure> {
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
    form.read(&value)
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
            Form::Judged,
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
            read_answer(Form::Judged, 200, &completion(json!(""))).verdict,
            Err(Failure::Empty)
        );
        assert_eq!(
            read_answer(Form::Judged, 200, &completion(Value::Null)).verdict,
            Err(Failure::Empty)
        );
        assert_eq!(
            read_answer(Form::Judged, 200, br#"{"choices":[]}"#).verdict,
            Err(Failure::Empty)
        );
        assert_eq!(
            read_answer(Form::Judged, 200, &completion(json!("It passed."))).verdict,
            Err(Failure::Malformed)
        );
        let refused = json!({"choices": [{"message": {"content": null, "refusal": "I can't."}}]});
        assert_eq!(
            read_answer(Form::Judged, 200, refused.to_string().as_bytes()).verdict,
            Err(Failure::Refused)
        );
    }

    #[test]
    fn a_tool_check_reads_result_and_explanation_and_nothing_around_them() {
        let r = read_answer(
            Form::ToolCheck,
            200,
            &completion(json!(
                r#"{"result":true,"explanation":"It mails an invoice."}"#
            )),
        );
        assert_eq!(
            r.verdict.map(|v| (v.passed, v.score, v.reason)),
            Ok((false, None, "It mails an invoice.".into()))
        );
        assert_eq!(r.usage.input_tokens, 100);
        for bad in [
            r#"{"result":true,"explanation":"x"} and more"#,
            r#"Sure: {"result":true,"explanation":"x"}"#,
            r#"{"result":"yes","explanation":"x"}"#,
            r#"{"passed":true,"score":1,"reason":"x"}"#,
        ] {
            assert_eq!(
                read_answer(Form::ToolCheck, 200, &completion(json!(bad))).verdict,
                Err(Failure::Malformed),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_request_asks_for_the_prompts_own_schema() {
        let prompt = Prompt {
            system: "s".into(),
            user: "u".into(),
            nonce: "n".into(),
            form: Form::ToolCheck,
        };
        let body = request_body("m", &prompt, 64);
        let format = &body["response_format"]["json_schema"];
        assert_eq!(format["name"], "tool_check_verdict");
        assert_eq!(format["strict"], true);
        assert_eq!(format["schema"], Form::ToolCheck.schema());
    }

    #[test]
    fn errors_and_garbage_are_failures() {
        assert_eq!(
            read_answer(Form::Judged, 502, b"").verdict,
            Err(Failure::Status(502))
        );
        assert_eq!(
            read_answer(Form::Judged, 200, b"<html>").verdict,
            Err(Failure::NotJson)
        );
        assert_eq!(
            read_answer(Form::Judged, 200, br#"{"error":{"message":"overloaded"}}"#).verdict,
            Err(Failure::ErrorInAnswer)
        );
    }
}
