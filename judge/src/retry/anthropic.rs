//! Recovery's rules for the Anthropic Messages API (`POST /v1/messages`): how the original request
//! is asked again. Tool history is any `*tool_use` / `*tool_result` block (server and MCP tools
//! included); without it the tools and MCP servers go, with it they stay and the choice is `none`;
//! the instruction joins `system` (a string, or one more text block). Its own file so that a reader
//! looking for what the sidecar does with an Anthropic request opens one place.

use serde_json::{json, Map, Value};

use super::{disable_tools, objects, type_of};

/// The path suffix of this API, as the filter recognises it.
pub(super) fn adapt(body: &mut Map<String, Value>, instruction: String, keep_tools: bool) {
    // `tool_use`, `tool_result`, and the server and MCP tools' `server_tool_use`,
    // `web_search_tool_result`, `mcp_tool_use`, `mcp_tool_result`, …
    let tool_history = objects(body.get("messages"))
        .flat_map(|m| objects(m.get("content")))
        .any(|b| {
            let kind = type_of(b);
            kind.ends_with("tool_use") || kind.ends_with("tool_result")
        });
    if !keep_tools {
        disable_tools(
            body,
            tool_history,
            &["tools", "mcp_servers"],
            &["tool_choice"],
            json!({"type": "none"}),
        );
    }
    match body.get_mut("system") {
        Some(Value::String(system)) if !system.is_empty() => {
            system.push_str("\n\n");
            system.push_str(&instruction);
        }
        Some(Value::Array(system)) => system.push(json!({"type": "text", "text": instruction})),
        _ => {
            body.insert("system".into(), Value::String(instruction));
        }
    }
}

#[cfg(test)]
mod tests {
    use livecheck_wire::Api;
    use serde_json::json;

    use super::super::tests::rules;
    use super::super::{instruction, retry_body};

    #[test]
    fn anthropic_system_blocks_get_one_more_block() {
        let body = retry_body(
            Api::AnthropicMessages,
            r#"{"system": [{"type": "text", "text": "Be kind.", "cache_control": {"type": "ephemeral"}}],
                "messages": []}"#,
            &rules(),
            false,
        )
        .unwrap();
        let system = body["system"].as_array().unwrap();
        assert_eq!(system.len(), 2);
        assert_eq!(system[1]["text"], json!(instruction(&rules())));
    }
}
