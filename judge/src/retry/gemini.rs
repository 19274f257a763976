//! Recovery's rules for Google Gemini `generateContent`, on the Gemini API and on Vertex AI: how
//! the original request is asked again. Tool history is a `functionCall` / `functionResponse` part
//! in `contents`; without it the tools and their config go, with it the tools stay (the history's
//! calls name them) and function calling is `NONE`; the instruction is one more text part of the
//! system instruction. A streamed original (`:streamGenerateContent?alt=sse`) is asked again at
//! `:generateContent`, the rest of its query (a `?key=`) kept. Its own file so that a reader
//! looking for what the sidecar does with a Gemini request opens one place.
//!
//! Google reads a field under its JSON name (`systemInstruction`) or its proto name
//! (`system_instruction`) and refuses a body holding both, so each field is changed under the name
//! the body wrote it (a new one under the JSON name). A lone object where a list is expected is a
//! list of one, as Google reads it. Sources: <https://ai.google.dev/api/generate-content>
//! (`GenerateContentRequest`: `contents`, `tools`, `toolConfig`, `systemInstruction`),
//! <https://ai.google.dev/api/caching#FunctionCallingConfig> (`mode: NONE`: "the model will not
//! predict any function call; behavior is the same as when not passing any function
//! declarations"; `allowedFunctionNames` "should only be set when the Mode is ANY or VALIDATED"),
//! <https://ai.google.dev/api/caching#Part> (`functionCall`, `functionResponse`).

use std::borrow::Cow;

use serde_json::{json, Map, Value};

use super::Failure;

const STREAMED: &str = ":streamGenerateContent";
const NOT_STREAMED: &str = ":generateContent";

/// The name `body` writes a field under: its proto name when that is the one written, else its
/// JSON name.
fn name_in(
    body: &Map<String, Value>,
    json_name: &'static str,
    proto_name: &'static str,
) -> &'static str {
    if body.contains_key(proto_name) && !body.contains_key(json_name) {
        proto_name
    } else {
        json_name
    }
}

/// The objects of a repeated field as Google reads it (one object is a list of one).
fn items(field: Option<&Value>) -> Vec<&Map<String, Value>> {
    match field {
        Some(Value::Array(list)) => list.iter().filter_map(Value::as_object).collect(),
        Some(Value::Object(one)) => vec![one],
        _ => Vec::new(),
    }
}

fn set(value: Option<&Value>) -> bool {
    value.is_some_and(|v| !v.is_null())
}

pub(super) fn adapt(
    body: &mut Map<String, Value>,
    instruction: String,
    keep_tools: bool,
) -> Result<(), Failure> {
    if !keep_tools {
        let tool_history = items(body.get("contents"))
            .into_iter()
            .flat_map(|content| items(content.get("parts")))
            .any(|part| {
                [
                    "functionCall",
                    "function_call",
                    "functionResponse",
                    "function_response",
                ]
                .iter()
                .any(|k| set(part.get(*k)))
            });
        if tool_history && set(body.get("tools")) {
            let name = name_in(body, "toolConfig", "tool_config");
            let config = body.entry(name).or_insert_with(|| json!({}));
            if !config.is_object() {
                *config = json!({});
            }
            if let Value::Object(config) = config {
                let name = name_in(config, "functionCallingConfig", "function_calling_config");
                // The whole config: its allowed names are only for `ANY` and `VALIDATED`.
                config.insert(name.to_owned(), json!({"mode": "NONE"}));
            }
        } else {
            for key in ["tools", "toolConfig", "tool_config"] {
                body.remove(key);
            }
        }
    }
    let part = json!({"text": instruction});
    let name = name_in(body, "systemInstruction", "system_instruction");
    match body.get_mut(name) {
        None | Some(Value::Null) => {
            body.insert(name.to_owned(), json!({"parts": [part]}));
        }
        Some(Value::Object(system)) => match system.get_mut("parts") {
            Some(Value::Array(parts)) => parts.push(part),
            Some(one @ Value::Object(_)) => *one = json!([one.take(), part]),
            None | Some(Value::Null) => {
                system.insert("parts".into(), json!([part]));
            }
            Some(_) => return Err(Failure::BadRequest),
        },
        Some(_) => return Err(Failure::BadRequest),
    }
    Ok(())
}

/// `…:streamGenerateContent?alt=sse&…` → `…:generateContent?…` (the stream's `alt` gone, however
/// written: `alt=sse`, `$alt=sse`, `alt=json`; the rest of the query kept: a `key=` is the caller's
/// credential, gone only when `own_key`: the upstream's key goes instead).
pub(super) fn retry_path(path: &str, own_key: bool) -> Cow<'_, str> {
    let (bare, query) = path.split_once('?').unwrap_or((path, ""));
    let streamed = bare.strip_suffix(STREAMED);
    let params = || query.split('&').filter(|p| !p.is_empty());
    let kept: Vec<&str> = params()
        .filter(|p| !(streamed.is_some() && (p.starts_with("alt=") || p.starts_with("$alt="))))
        .filter(|p| !(own_key && p.starts_with("key=")))
        .collect();
    let bare = match streamed {
        Some(model) => format!("{model}{NOT_STREAMED}"),
        None if kept.len() == params().count() => return Cow::Borrowed(path),
        None => bare.to_owned(),
    };
    if kept.is_empty() {
        Cow::Owned(bare)
    } else {
        Cow::Owned(format!("{bare}?{}", kept.join("&")))
    }
}

#[cfg(test)]
mod tests {
    use livecheck_wire::Api;
    use serde_json::{json, Value};

    use super::super::tests::rules;
    use super::super::{instruction, retry_body, Failure};
    use super::retry_path;

    fn adapted(request: Value, keep_tools: bool) -> Value {
        retry_body(Api::Gemini, &request.to_string(), &rules(), keep_tools).unwrap()
    }

    const TOOLS: &str =
        r#"[{"functionDeclarations": [{"name": "send_email"}]}, {"googleSearch": {}}]"#;

    #[test]
    fn the_instruction_is_one_more_part_of_the_system_instruction_under_the_bodys_name() {
        let said = json!({"text": instruction(&rules())});
        let body = adapted(
            json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
                   "systemInstruction": {"parts": [{"text": "Be kind."}]},
                   "generationConfig": {"temperature": 0.2}}),
            false,
        );
        assert_eq!(
            body["systemInstruction"]["parts"],
            json!([{"text": "Be kind."}, said])
        );
        assert_eq!(
            body["generationConfig"]["temperature"], 0.2,
            "sampling kept"
        );
        assert_eq!(
            body["contents"][0]["parts"][0]["text"], "hi",
            "the conversation kept"
        );

        // Google's REST docs write proto names and lone objects: the same field is changed, and
        // no second name is written (Google refuses a body holding both).
        let body = adapted(
            json!({"contents": {"parts": {"text": "hi"}},
                   "system_instruction": {"parts": {"text": "Be kind."}}}),
            false,
        );
        assert_eq!(
            body["system_instruction"]["parts"],
            json!([{"text": "Be kind."}, said])
        );
        assert!(body.get("systemInstruction").is_none(), "{body}");

        for system in [None, Some(Value::Null), Some(json!({"role": "system"}))] {
            let mut request = json!({"contents": [{"parts": [{"text": "hi"}]}]});
            if let Some(system) = system {
                request["systemInstruction"] = system;
            }
            let body = adapted(request, false);
            assert_eq!(body["systemInstruction"]["parts"], json!([said]), "{body}");
        }
        for bad in [json!("Be kind."), json!({"parts": "Be kind."})] {
            let request = json!({"contents": [], "systemInstruction": bad});
            assert_eq!(
                retry_body(Api::Gemini, &request.to_string(), &rules(), false),
                Err(Failure::BadRequest)
            );
        }
    }

    #[test]
    fn without_function_call_history_the_tools_and_their_config_go() {
        let tools: Value = serde_json::from_str(TOOLS).unwrap();
        for (tools_key, config_key) in [("tools", "toolConfig"), ("tools", "tool_config")] {
            let body = adapted(
                json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
                       tools_key: tools,
                       config_key: {"functionCallingConfig": {"mode": "ANY"}}}),
                false,
            );
            assert!(body.get("tools").is_none(), "{body}");
            assert!(body.get(config_key).is_none(), "{body}");
        }
    }

    #[test]
    fn with_function_call_history_the_tools_stay_and_function_calling_is_none() {
        let tools: Value = serde_json::from_str(TOOLS).unwrap();
        let call = json!({"role": "model", "parts": [{"functionCall": {"name": "send_email", "args": {}}}]});
        let result = json!({"role": "user",
            "parts": [{"function_response": {"name": "send_email", "response": {"ok": true}}}]});
        for history in [call, result] {
            let contents = json!([{"role": "user", "parts": [{"text": "hi"}]}, history]);
            let body = adapted(
                json!({"contents": contents, "tools": tools,
                       "toolConfig": {"functionCallingConfig": {"mode": "ANY",
                                      "allowedFunctionNames": ["send_email"]},
                                      "retrievalConfig": {"languageCode": "en"}}}),
                false,
            );
            assert_eq!(body["tools"], tools);
            assert_eq!(
                body["toolConfig"]["functionCallingConfig"],
                json!({"mode": "NONE"})
            );
            assert_eq!(body["toolConfig"]["retrievalConfig"]["languageCode"], "en");

            let body = adapted(
                json!({"contents": contents, "tools": tools,
                       "tool_config": {"function_calling_config": {"mode": "AUTO"}}}),
                false,
            );
            assert_eq!(
                body["tool_config"]["function_calling_config"],
                json!({"mode": "NONE"})
            );
            assert!(body.get("toolConfig").is_none(), "{body}");

            let body = adapted(json!({"contents": contents, "tools": tools}), false);
            assert_eq!(
                body["toolConfig"],
                json!({"functionCallingConfig": {"mode": "NONE"}})
            );
        }
    }

    #[test]
    fn after_a_denied_tool_call_the_tools_and_their_config_are_kept() {
        let tools: Value = serde_json::from_str(TOOLS).unwrap();
        let config = json!({"functionCallingConfig": {"mode": "ANY"}});
        let body = adapted(
            json!({"contents": [{"parts": [{"text": "hi"}]}], "tools": tools, "toolConfig": config}),
            true,
        );
        assert_eq!(body["tools"], tools);
        assert_eq!(body["toolConfig"], config);
    }

    #[test]
    fn a_streamed_request_is_asked_again_at_generate_content_with_its_key() {
        let base = "/v1beta/models/gemini-2.5-flash";
        for (path, want) in [
            (
                format!("{base}:streamGenerateContent?alt=sse"),
                format!("{base}:generateContent"),
            ),
            (
                format!("{base}:streamGenerateContent?alt=sse&key=AIza-k"),
                format!("{base}:generateContent?key=AIza-k"),
            ),
            (
                format!("{base}:streamGenerateContent?key=AIza-k&alt=sse"),
                format!("{base}:generateContent?key=AIza-k"),
            ),
            // Google's system parameter written `$alt`, and the JSON-array stream.
            (
                format!("{base}:streamGenerateContent?$alt=sse&key=AIza-k"),
                format!("{base}:generateContent?key=AIza-k"),
            ),
            (
                format!("{base}:streamGenerateContent?alt=json"),
                format!("{base}:generateContent"),
            ),
            (
                format!("{base}:streamGenerateContent?key=AIza-k"),
                format!("{base}:generateContent?key=AIza-k"),
            ),
            (
                format!("{base}:generateContent?key=AIza-k"),
                format!("{base}:generateContent?key=AIza-k"),
            ),
        ] {
            assert_eq!(retry_path(&path, false), want, "{path}");
        }
        // The upstream's own key goes instead of the caller's: the caller's `?key=` goes.
        for (path, want) in [
            (
                format!("{base}:streamGenerateContent?alt=sse&key=AIza-k"),
                format!("{base}:generateContent"),
            ),
            (
                format!("{base}:generateContent?key=AIza-k&x=1"),
                format!("{base}:generateContent?x=1"),
            ),
            (
                format!("{base}:generateContent"),
                format!("{base}:generateContent"),
            ),
        ] {
            assert_eq!(retry_path(&path, true), want, "{path}");
        }
    }
}
