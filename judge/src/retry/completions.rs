//! Recovery's rules for OpenAI's legacy text completions (`POST /v1/completions`, Azure's
//! `/openai/deployments/{d}/completions`): how the original request is asked again.
//!
//! The API has no instructions field, no roles and no tools: the only text the model reads is the
//! prompt (and the suffix after the insertion point). So the instruction goes before the prompt,
//! separated by a blank line, and only where that is one place: a prompt that is one string (or an
//! array holding one string). Several prompts are several answers to several texts, with no single
//! place to say which broke a rule; token ids have no text to put it before; and `echo: true`
//! would return the prompt, instruction included, as part of the answer the caller sees. Each of
//! those fails with [`Failure::NoPlaceForInstruction`], and the filter withholds the answer as
//! without recovery. `n` and `best_of` stay: every choice of the retry is checked, as Chat's.

use serde_json::{Map, Value};

use super::Failure;

pub(super) fn adapt(body: &mut Map<String, Value>, instruction: String) -> Result<(), Failure> {
    if body.get("echo").and_then(Value::as_bool) == Some(true) {
        return Err(Failure::NoPlaceForInstruction);
    }
    let prompt = match body.get_mut("prompt") {
        Some(Value::String(prompt)) => prompt,
        Some(Value::Array(prompts)) if prompts.len() == 1 => match prompts.first_mut() {
            Some(Value::String(prompt)) => prompt,
            _ => return Err(Failure::NoPlaceForInstruction),
        },
        _ => return Err(Failure::NoPlaceForInstruction),
    };
    *prompt = format!("{instruction}\n\n{prompt}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::tests::rules;
    use super::super::{instruction, retry_body, Failure};
    use livecheck_wire::Api;

    #[test]
    fn the_instruction_goes_before_the_one_prompt_and_the_retry_is_not_streamed() {
        let request = r#"{"model": "gpt-3.5-turbo-instruct", "prompt": "Say hi", "suffix": "!",
            "n": 2, "stream": true, "stream_options": {"include_usage": true}}"#;
        let body = retry_body(Api::Completions, request, &rules(), false).unwrap();
        let expected = format!("{}\n\nSay hi", instruction(&rules()));
        assert_eq!(body["prompt"], json!(expected));
        assert_eq!(body["suffix"], "!");
        assert_eq!(body["n"], 2);
        assert_eq!(body["model"], "gpt-3.5-turbo-instruct");
        assert!(body.get("stream").is_none() && body.get("stream_options").is_none());
        let one = retry_body(
            Api::Completions,
            r#"{"prompt": ["Say hi"]}"#,
            &rules(),
            false,
        )
        .unwrap();
        assert_eq!(one["prompt"], json!([expected]));
    }

    #[test]
    fn a_request_with_no_one_place_for_the_instruction_is_not_asked_again() {
        for request in [
            r#"{"prompt": ["a", "b"]}"#,
            r#"{"prompt": [1212, 318]}"#,
            r#"{"prompt": [[1212]]}"#,
            r#"{"prompt": []}"#,
            r#"{}"#,
            r#"{"prompt": "a", "echo": true}"#,
        ] {
            assert_eq!(
                retry_body(Api::Completions, request, &rules(), false),
                Err(Failure::NoPlaceForInstruction),
                "{request}"
            );
        }
    }
}
