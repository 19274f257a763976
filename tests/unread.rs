//! Requests livecheck does not read, through the built `.wasm` in the harness: refused in the
//! dialect their path suggests (fail closed), naming the path, counted and logged; passed when a
//! reading method, a `pass_paths` glob or `unread: "pass"` says so.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::fixtures::*;
use common::*;
use livecheck_harness::{Host, StreamId};

/// Sends one request's headers (and, when `body` is given, its body) to a fresh stream.
fn request(
    host: &mut Host,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> StreamId {
    let s = host.new_stream();
    let mut all = vec![
        (":method", method),
        (":path", path),
        (":authority", "api.test"),
    ];
    all.extend_from_slice(headers);
    host.send_request_headers(s, &all, body.is_none()).unwrap();
    if let Some(body) = body {
        host.send_request_body(s, body.as_bytes(), true).unwrap();
    }
    s
}

fn refused(host: &Host, s: StreamId) -> bool {
    host.caller_received(s).header(":status") == Some("403")
}

#[test]
fn a_post_to_a_path_livecheck_does_not_read_is_refused_in_its_vendors_shape() {
    let mut host = livecheck(SEED);
    let cases = [
        (
            // Counting tokens makes no model generate: not a turn.
            "/v1beta/models/gemini-2.5-pro:countTokens?key=sk-secret",
            vec![],
            "google",
        ),
        (
            // Bedrock's bidirectional stream (HTTP/2, events both ways): not read.
            "/model/amazon.nova-sonic-v1%3A0/invoke-with-bidirectional-stream",
            vec![],
            "bedrock",
        ),
        (
            "/v1/files",
            vec![("anthropic-version", "2023-06-01")],
            "anthropic",
        ),
        ("/v1/batches", vec![], "openai"),
        ("/v1/made-up", vec![], "openai"),
    ];
    let refused_cases = cases.len() as u64;
    for (path, headers, dialect) in cases {
        let s = request(
            &mut host,
            "POST",
            path,
            &headers,
            Some(r#"{"q": "my password"}"#),
        );
        assert!(refused(&host, s), "{path}");
        let got = host.caller_received(s);
        assert_eq!(
            got.header("x-core-check"),
            Some("code=unread_path"),
            "{path}"
        );
        let body = json(&got.body);
        let message = match dialect {
            "google" => {
                assert_eq!(body["error"]["status"], "PERMISSION_DENIED");
                body["error"]["message"].as_str().unwrap().to_owned()
            }
            "bedrock" => {
                assert_eq!(
                    got.header("x-amzn-errortype"),
                    Some("AccessDeniedException")
                );
                body["message"].as_str().unwrap().to_owned()
            }
            "anthropic" => {
                assert_eq!(body["error"]["type"], "permission_error");
                body["error"]["message"].as_str().unwrap().to_owned()
            }
            _ => body["error"]["message"].as_str().unwrap().to_owned(),
        };
        let bare = path.split('?').next().unwrap();
        assert!(message.contains(&format!("POST {bare}")), "{message}");
        assert!(!message.contains("sk-secret"));
        assert!(
            host.upstream_received(s).body.is_empty(),
            "{path}: nothing went upstream"
        );
    }
    assert_eq!(host.metric("livecheck.unread.refused"), Some(refused_cases));
    assert!(host.logs_contain("refused a request livecheck does not read"));
    assert!(!host.logs_contain("sk-secret"));
}

#[test]
fn reading_methods_and_default_pass_paths_pass_and_only_the_passes_are_counted() {
    let mut host = livecheck(SEED);
    for method in ["GET", "HEAD", "OPTIONS"] {
        let s = request(&mut host, method, "/v1/models", &[], None);
        assert!(!refused(&host, s), "{method}");
        assert!(host.upstream_received(s).headers.is_some());
    }
    for path in ["/v1/messages/count_tokens", "/v1/responses/resp_1/cancel"] {
        let s = request(
            &mut host,
            "POST",
            path,
            &[],
            Some(r#"{"q": "my password"}"#),
        );
        assert!(!refused(&host, s), "{path}");
        assert_eq!(host.upstream_received(s).body, br#"{"q": "my password"}"#);
    }
    assert_eq!(host.metric("livecheck.unread.forwarded"), Some(2));
    assert_eq!(host.metric("livecheck.unread.refused"), None);
}

#[test]
fn a_websocket_upgrade_is_refused_whatever_its_method() {
    let mut host = livecheck(SEED);
    let s = request(
        &mut host,
        "GET",
        "/v1/realtime?model=gpt-realtime",
        &[("upgrade", "websocket")],
        None,
    );
    assert!(refused(&host, s));
}

#[test]
fn an_operators_pass_paths_replace_the_default_list() {
    let config = with_setting(SEED, "pass_paths", r#"["/healthz", "*/v1/files"]"#);
    let mut host = livecheck(&config);
    for (path, passes) in [
        ("/healthz", true),
        ("/openai/v1/files", true),
        ("/v1/files/../chat/completions", false),
        ("/v1/messages/count_tokens", false),
    ] {
        let s = request(&mut host, "POST", path, &[], Some("{}"));
        assert_eq!(!refused(&host, s), passes, "{path}");
    }
}

#[test]
fn unread_pass_forwards_every_unread_request_and_counts_it() {
    let config = with_setting(SEED, "unread", r#""pass""#);
    let mut host = livecheck(&config);
    assert!(host.logs_contain(
        "`unread: \"pass\"` forwards every request livecheck does not read unchecked"
    ));
    let s = request(
        &mut host,
        "POST",
        "/v1/files",
        &[],
        Some(r#"{"q": "my password"}"#),
    );
    assert!(!refused(&host, s));
    assert_eq!(host.metric("livecheck.unread.forwarded"), Some(1));
    // What livecheck reads it still checks.
    let vendor = Vendor::Chat;
    let s = send_request(
        &mut host,
        vendor.path(),
        &[],
        &vendor.request(FORBIDDEN_QUESTION, false),
        Chunking::Whole,
    );
    assert_eq!(
        host.caller_received(s)
            .header("x-core-check")
            .map(|h| h.contains("no-passwords")),
        Some(true)
    );
}

#[test]
fn a_bad_unread_setting_or_pass_path_is_refused_at_configuration() {
    for (key, value) in [
        ("unread", r#""maybe""#),
        ("pass_paths", r#"["v1/files"]"#),
        ("pass_paths", r#"["/a b"]"#),
    ] {
        assert!(
            try_livecheck(&with_setting(SEED, key, value)).is_err(),
            "{key} {value}"
        );
    }
}

#[test]
fn an_mcp_endpoint_without_tool_checks_passes() {
    let mut host = livecheck(SEED);
    let s = request(
        &mut host,
        "POST",
        "/mcp",
        &[],
        Some(r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}"#),
    );
    assert!(!refused(&host, s));
}

#[test]
fn an_mcp_session_is_ended_through_the_filter() {
    let mut host = livecheck(SEED);
    let s = request(
        &mut host,
        "DELETE",
        "/tools/mcp",
        &[("mcp-session-id", "s1")],
        None,
    );
    assert!(!refused(&host, s));
    let s = request(&mut host, "DELETE", "/v1/responses/resp_1", &[], None);
    assert!(refused(&host, s), "a DELETE elsewhere is no reading method");
}
