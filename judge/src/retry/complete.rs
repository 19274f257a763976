//! Recovery's rules for Anthropic's legacy Text Completions (`POST /v1/complete`): how the original
//! request is asked again. The request has no tools and no field for instructions, only its
//! `prompt` of `"\n\nHuman:"` and `"\n\nAssistant:"` turns; the text before the first Human turn is
//! its system prompt, so the instruction joins that text, just before the first `"\n\nHuman:"`
//! (after a system prompt the prompt has, as a paragraph of its own). There it reads as the
//! Messages retry's instruction in `system` does, and the turns after it, the last
//! `"\n\nAssistant:"` the model answers from included, stay as the caller wrote them. A prompt
//! with no Human turn gets it at its start, as a paragraph before it.

use serde_json::{Map, Value};

use super::Failure;

const HUMAN: &str = "\n\nHuman:";

pub(super) fn adapt(body: &mut Map<String, Value>, instruction: &str) -> Result<(), Failure> {
    let Some(Value::String(prompt)) = body.get_mut("prompt") else {
        return Err(Failure::BadRequest);
    };
    let joined = match prompt.find(HUMAN) {
        Some(0) => format!("{instruction}{prompt}"),
        Some(at) => match prompt.split_at_checked(at) {
            Some((system, turns)) => format!("{system}\n\n{instruction}{turns}"),
            None => return Err(Failure::BadRequest),
        },
        None => format!("{instruction}\n\n{prompt}"),
    };
    *prompt = joined;
    Ok(())
}

#[cfg(test)]
mod tests {
    use livecheck_wire::Api;
    use serde_json::json;

    use super::super::tests::rules;
    use super::super::{instruction, retry_body, Failure};

    fn prompt_of(prompt: &str) -> String {
        let request = json!({"model": "claude-2.1", "prompt": prompt,
                             "max_tokens_to_sample": 300, "stream": true});
        let body = retry_body(
            Api::AnthropicComplete,
            &request.to_string(),
            &rules(),
            false,
        )
        .unwrap();
        assert!(body.get("stream").is_none(), "a retry is never streamed");
        assert_eq!(body["max_tokens_to_sample"], json!(300));
        assert_eq!(body["model"], json!("claude-2.1"));
        body["prompt"].as_str().unwrap().to_owned()
    }

    #[test]
    fn the_instruction_goes_before_the_first_human_turn() {
        let rule = instruction(&rules());
        assert_eq!(
            prompt_of("\n\nHuman: hi\n\nAssistant: hello\n\nHuman: again\n\nAssistant:"),
            format!("{rule}\n\nHuman: hi\n\nAssistant: hello\n\nHuman: again\n\nAssistant:")
        );
    }

    #[test]
    fn after_a_system_prompt_the_instruction_is_a_paragraph_of_it() {
        let rule = instruction(&rules());
        assert_eq!(
            prompt_of("Be terse.\n\nHuman: hi\n\nAssistant:"),
            format!("Be terse.\n\n{rule}\n\nHuman: hi\n\nAssistant:")
        );
        // No Human turn: at the start.
        assert_eq!(prompt_of("Say hi."), format!("{rule}\n\nSay hi."));
    }

    #[test]
    fn a_prompt_that_is_not_a_string_is_a_bad_request() {
        for request in [r#"{"prompt": ["hi"]}"#, r#"{"model": "m"}"#] {
            assert_eq!(
                retry_body(Api::AnthropicComplete, request, &rules(), false),
                Err(Failure::BadRequest)
            );
        }
    }
}
