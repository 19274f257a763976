//! What a caller got, read the way a client reads it: the answer text and whether the vendor's
//! shape says it was stopped (Anthropic `refusal`, Chat `content_filter`, Responses `incomplete`
//! with `content_filter`, Gemini a blocking `finishReason` or `promptFeedback.blockReason`,
//! Converse `guardrail_intervened` or `content_filtered`), from a JSON body, an SSE stream or
//! Bedrock's event stream. Written apart from the filter's own readers, so a case checks the
//! filter's output rather than trusting it (only the event-stream framing is the filter's codec,
//! itself checked against botocore's test vectors).

use serde_json::Value;

use crate::cases::Api;

/// The answer as the caller's client would show it.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Shown {
    /// The answer text, in order.
    pub text: String,
    /// The vendor's marker says the answer was stopped by a content filter or refused.
    pub stopped: bool,
    /// The body was an SSE stream.
    pub streamed: bool,
}

/// Reads a body the caller got for `api`.
pub fn read(api: Api, body: &[u8]) -> Shown {
    let text = String::from_utf8_lossy(body);
    if let Ok(v) = serde_json::from_str::<Value>(&text) {
        return read_json(api, &v);
    }
    let mut shown = Shown {
        streamed: true,
        ..Shown::default()
    };
    if api == Api::Converse {
        read_event_stream(body, &mut shown);
        return shown;
    }
    // Google ends its events with `\r\n\r\n`; SSE allows either line end.
    let text = text.replace("\r\n", "\n");
    for block in text.split("\n\n") {
        let data: Vec<&str> = block
            .lines()
            .filter_map(|l| l.strip_prefix("data:").map(|d| d.trim_start()))
            .collect();
        if data.is_empty() {
            continue;
        }
        if let Ok(v) = serde_json::from_str::<Value>(&data.join("\n")) {
            read_event(api, &v, &mut shown);
        }
    }
    shown
}

/// The value at a JSON pointer, `null` when there is none.
fn at<'a>(v: &'a Value, pointer: &str) -> &'a Value {
    v.pointer(pointer).unwrap_or(&Value::Null)
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn read_json(api: Api, v: &Value) -> Shown {
    let mut shown = Shown::default();
    match api {
        Api::Anthropic => {
            for block in at(v, "/content").as_array().into_iter().flatten() {
                if at(block, "/type") == "text" {
                    shown.text.push_str(str_at(block, "/text"));
                }
            }
            shown.stopped = at(v, "/stop_reason") == "refusal";
        }
        Api::Chat => {
            shown.text = str_at(v, "/choices/0/message/content").to_owned();
            shown.stopped = v.pointer("/choices/0/finish_reason") == Some(&"content_filter".into());
        }
        Api::Responses => {
            for item in at(v, "/output").as_array().into_iter().flatten() {
                for part in at(item, "/content").as_array().into_iter().flatten() {
                    if at(part, "/type") == "output_text" {
                        shown.text.push_str(str_at(part, "/text"));
                    }
                }
            }
            shown.stopped = responses_stopped(v);
        }
        Api::Mcp => read_mcp(v, &mut shown),
        Api::Gemini => read_gemini(v, &mut shown),
        Api::Converse => {
            for block in at(v, "/output/message/content")
                .as_array()
                .into_iter()
                .flatten()
            {
                shown.text.push_str(str_at(block, "/text"));
            }
            shown.stopped = converse_stopped(at(v, "/stopReason"));
        }
    }
    shown
}

/// A Gemini response, or one chunk of its stream (each chunk is a response holding its new
/// parts): the first candidate's text parts but thoughts, and whether the prompt was blocked or
/// the candidate stopped for a blocking reason (google-genai's `FinishReason`, `BlockedReason`).
fn read_gemini(v: &Value, shown: &mut Shown) {
    for part in at(v, "/candidates/0/content/parts")
        .as_array()
        .into_iter()
        .flatten()
    {
        if at(part, "/thought") != &Value::Bool(true) {
            shown.text.push_str(str_at(part, "/text"));
        }
    }
    let finish = str_at(v, "/candidates/0/finishReason");
    if matches!(
        finish,
        "SAFETY" | "PROHIBITED_CONTENT" | "BLOCKLIST" | "SPII"
    ) || !at(v, "/promptFeedback/blockReason").is_null()
    {
        shown.stopped = true;
    }
}

fn converse_stopped(reason: &Value) -> bool {
    reason == "guardrail_intervened" || reason == "content_filtered"
}

/// A Converse stream (AWS event-stream messages, each a `ConverseStreamOutput` member named by
/// its `:event-type`): text deltas in order, and the stop reason of `messageStop`. A stream that
/// cannot be framed shows what came before the bad message.
fn read_event_stream(body: &[u8], shown: &mut Shown) {
    use livecheck::eventstream::Decoder;
    let mut messages = Vec::new();
    let _ = Decoder::new(body.len().max(16)).push(body, &mut messages);
    for message in messages {
        let Ok(v) = serde_json::from_slice::<Value>(&message.payload) else {
            continue;
        };
        match message.event_type() {
            Some("contentBlockDelta") => shown.text.push_str(str_at(&v, "/delta/text")),
            Some("messageStop") if converse_stopped(at(&v, "/stopReason")) => {
                shown.stopped = true;
            }
            _ => {}
        }
    }
}

/// A JSON-RPC message of an MCP server: a tool result's text parts, and whether it is an error
/// (`isError: true`, what a denied call gets, or a JSON-RPC error).
fn read_mcp(v: &Value, shown: &mut Shown) {
    for part in at(v, "/result/content").as_array().into_iter().flatten() {
        if at(part, "/type") == "text" {
            shown.text.push_str(str_at(part, "/text"));
        }
    }
    if at(v, "/result/isError") == &Value::Bool(true) || !at(v, "/error").is_null() {
        shown.stopped = true;
    }
}

fn responses_stopped(response: &Value) -> bool {
    at(response, "/status") == "incomplete"
        && response.pointer("/incomplete_details/reason") == Some(&"content_filter".into())
}

fn read_event(api: Api, v: &Value, shown: &mut Shown) {
    match api {
        Api::Anthropic => match at(v, "/type").as_str() {
            Some("content_block_delta") if at(v, "/delta/type") == "text_delta" => {
                shown.text.push_str(str_at(v, "/delta/text"));
            }
            Some("message_delta") if at(v, "/delta/stop_reason") == "refusal" => {
                shown.stopped = true;
            }
            _ => {}
        },
        Api::Chat => {
            shown.text.push_str(str_at(v, "/choices/0/delta/content"));
            if v.pointer("/choices/0/finish_reason") == Some(&"content_filter".into()) {
                shown.stopped = true;
            }
        }
        Api::Responses => match at(v, "/type").as_str() {
            Some("response.output_text.delta") => shown.text.push_str(str_at(v, "/delta")),
            Some("response.incomplete") if responses_stopped(at(v, "/response")) => {
                shown.stopped = true;
            }
            _ => {}
        },
        Api::Mcp => read_mcp(v, shown),
        Api::Gemini => read_gemini(v, shown),
        // Its stream is not SSE: `read_event_stream`.
        Api::Converse => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chat_stream_cut_by_content_filter_reads_as_stopped_with_its_text() {
        let body = concat!(
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Pay \"}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"to \"}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"content_filter\"}]}\n\n",
            "data: [DONE]\n\n"
        );
        let shown = read(Api::Chat, body.as_bytes());
        assert_eq!(
            shown,
            Shown {
                text: "Pay to ".into(),
                stopped: true,
                streamed: true
            }
        );
    }

    #[test]
    fn an_mcp_tool_result_reads_its_text_and_is_error_as_stopped() {
        let denied = r#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"Never email a competitor."}],"isError":true}}"#;
        let shown = read(Api::Mcp, denied.as_bytes());
        assert_eq!(
            (shown.text.as_str(), shown.stopped, shown.streamed),
            ("Never email a competitor.", true, false)
        );
        let streamed = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"sent\"}]}}\n\n";
        let shown = read(Api::Mcp, streamed.as_bytes());
        assert_eq!(
            (shown.text.as_str(), shown.stopped, shown.streamed),
            ("sent", false, true)
        );
        let error = r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"unknown tool"}}"#;
        assert!(read(Api::Mcp, error.as_bytes()).stopped);
    }

    #[test]
    fn a_gemini_answer_and_stream_read_their_text_parts_and_blocking_stops() {
        let blocked = r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"No."}]},"finishReason":"SAFETY","index":0}],"promptFeedback":{"blockReason":"SAFETY"}}"#;
        let shown = read(Api::Gemini, blocked.as_bytes());
        assert_eq!((shown.text.as_str(), shown.stopped), ("No.", true));
        let stream = concat!(
            "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"x\",\"thought\":true},{\"text\":\"Pay \"}]}}]}\r\n\r\n",
            "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"to \"}]},\"finishReason\":\"STOP\"}]}\r\n\r\n",
        );
        let shown = read(Api::Gemini, stream.as_bytes());
        assert_eq!(
            (shown.text.as_str(), shown.stopped, shown.streamed),
            ("Pay to ", false, true)
        );
    }

    #[test]
    fn a_converse_answer_and_event_stream_read_their_text_and_guardrail_stop() {
        let body = r#"{"output":{"message":{"role":"assistant","content":[{"text":"No."}]}},"stopReason":"guardrail_intervened"}"#;
        let shown = read(Api::Converse, body.as_bytes());
        assert_eq!((shown.text.as_str(), shown.stopped), ("No.", true));
        let mut stream = Vec::new();
        for (name, payload) in [
            ("messageStart", r#"{"role":"assistant"}"#),
            (
                "contentBlockDelta",
                r#"{"contentBlockIndex":0,"delta":{"text":"Pay "}}"#,
            ),
            (
                "contentBlockDelta",
                r#"{"contentBlockIndex":0,"delta":{"text":"to "}}"#,
            ),
            ("contentBlockStop", r#"{"contentBlockIndex":0}"#),
            ("messageStop", r#"{"stopReason":"guardrail_intervened"}"#),
        ] {
            livecheck::eventstream::encode_event(&mut stream, name, payload.as_bytes())
                .expect("frames");
        }
        let shown = read(Api::Converse, &stream);
        assert_eq!(
            (shown.text.as_str(), shown.stopped, shown.streamed),
            ("Pay to ", true, true)
        );
    }

    #[test]
    fn an_anthropic_answer_reads_its_text_blocks_and_stop_reason() {
        let body = r#"{"content":[{"type":"text","text":"No."},{"type":"tool_use","id":"t"}],"stop_reason":"end_turn"}"#;
        let shown = read(Api::Anthropic, body.as_bytes());
        assert_eq!((shown.text.as_str(), shown.stopped), ("No.", false));
    }
}
