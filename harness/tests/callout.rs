//! `proxy_http_call`: what Envoy refuses, and how answers, failures and timeouts arrive.

// Test helpers outside #[test] functions may unwrap too (clippy.toml covers only the tests).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::time::Duration;

use common::{results, status, wat_host, with_clusters, GET};
use livecheck_harness::Host;

/// A guest whose on_request_headers dispatches a callout with the headers at 512 (pairs of
/// length `len`) and timeout `timeout_ms`, records the status and token, and pauses; its
/// on_http_call_response records context, token, counts and the body's first byte.
fn callout_guest(headers: &[(&str, &str)], timeout_ms: u32) -> String {
    let pairs = pairs(headers);
    let bytes: String = pairs.iter().map(|b| format!("\\{b:02x}")).collect();
    let len = pairs.len();
    format!(
        r#"(data (i32.const 16) "judge")
        (data (i32.const 512) "{bytes}")
        (data (i32.const 32) "ask")
        (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32)
            (call $record (call $http_call (i32.const 16) (i32.const 5) (i32.const 512) (i32.const {len})
                (i32.const 32) (i32.const 3) (i32.const 0) (i32.const 0) (i32.const {timeout_ms}) (i32.const 200)))
            (call $record (i32.load (i32.const 200)))
            i32.const 1)
        (func (export "proxy_on_http_call_response") (param i32 i32 i32 i32 i32)
            (call $record (local.get 0))
            (call $record (local.get 1))
            (call $record (local.get 2))
            (call $record (local.get 3))
            (call $record (local.get 4))
            (call $record (call $get_buffer (i32.const 4) (i32.const 0) (i32.const 100) (i32.const 300) (i32.const 304)))
            (if (i32.load (i32.const 304))
                (then (call $record (i32.load8_u (i32.load (i32.const 300))))))
            (drop (call $set_effective (i32.const 2)))
            (drop (call $continue (i32.const 0))))"#
    )
}

fn pairs(headers: &[(&str, &str)]) -> Vec<u8> {
    let mut out = (headers.len() as u32).to_le_bytes().to_vec();
    for (k, v) in headers {
        out.extend_from_slice(&(k.len() as u32).to_le_bytes());
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
    }
    for (k, v) in headers {
        out.extend_from_slice(k.as_bytes());
        out.push(0);
        out.extend_from_slice(v.as_bytes());
        out.push(0);
    }
    out
}

const CALL: [(&str, &str); 3] = [
    (":method", "POST"),
    (":path", "/judge"),
    (":authority", "judge"),
];

fn dispatch(
    headers: &[(&str, &str)],
    clusters: &[&str],
    timeout_ms: u32,
) -> (Host, livecheck_harness::StreamId) {
    let mut host = wat_host(&callout_guest(headers, timeout_ms), with_clusters(clusters));
    let s = host.new_stream();
    host.send_request_headers(s, &GET, true).unwrap();
    (host, s)
}

#[test]
fn http_call_without_authority_is_bad_argument_and_nothing_is_sent() {
    let (host, _) = dispatch(&[(":method", "POST"), (":path", "/")], &["judge"], 0);
    assert_eq!(results(&host), vec![status::BAD_ARGUMENT, 0]);
    assert!(host.pending_callouts().is_empty());
}

#[test]
fn http_call_without_method_or_path_is_bad_argument() {
    for missing in [":method", ":path"] {
        let headers: Vec<_> = CALL
            .iter()
            .copied()
            .filter(|(k, _)| *k != missing)
            .collect();
        let (host, _) = dispatch(&headers, &["judge"], 0);
        assert_eq!(results(&host)[0], status::BAD_ARGUMENT, "without {missing}");
        assert!(host.pending_callouts().is_empty());
    }
}

#[test]
fn http_call_to_an_unknown_cluster_is_bad_argument() {
    let (host, _) = dispatch(&CALL, &["other"], 0);
    assert_eq!(results(&host), vec![status::BAD_ARGUMENT, 0]);
    assert!(host.pending_callouts().is_empty());
}

#[test]
fn http_call_is_recorded_with_content_length_and_no_timeout_for_zero() {
    let (host, _) = dispatch(&CALL, &["judge"], 0);
    assert_eq!(results(&host), vec![status::OK, 1]);
    let callouts = host.pending_callouts();
    assert_eq!(callouts.len(), 1);
    let c = &callouts[0];
    assert_eq!(
        (c.token, c.cluster.as_str(), c.body.as_slice()),
        (1, "judge", &b"ask"[..])
    );
    assert_eq!(c.header("content-length"), Some("3"));
    assert_eq!(c.timeout, None);
}

#[test]
fn answering_a_callout_calls_the_root_context_with_counts_and_a_readable_body() {
    let (mut host, s) = dispatch(&CALL, &["judge"], 0);
    host.answer_callout(1, &[(":status", "200"), ("x-a", "1")], b"yes")
        .unwrap();
    let root = host.root_context_id() as i32;
    assert_eq!(
        results(&host),
        vec![status::OK, 1, root, 1, 2, 3, 0, status::OK, i32::from(b'y')]
    );
    assert!(host.pending_callouts().is_empty());
    assert_eq!(
        host.upstream_received(s).header(":path"),
        Some("/"),
        "continue_request resumed"
    );
}

#[test]
fn a_failed_callout_arrives_with_no_headers_and_no_body() {
    let (mut host, _) = dispatch(&CALL, &["judge"], 0);
    host.fail_callout(1).unwrap();
    let root = host.root_context_id() as i32;
    assert_eq!(
        results(&host),
        vec![status::OK, 1, root, 1, 0, 0, 0, status::NOT_FOUND]
    );
}

#[test]
fn a_callout_times_out_with_a_504_when_time_passes_its_timeout() {
    let (mut host, _) = dispatch(&CALL, &["judge"], 100);
    assert_eq!(
        host.pending_callouts()[0].timeout,
        Some(Duration::from_millis(100))
    );
    host.advance_time(Duration::from_millis(99));
    assert_eq!(results(&host).len(), 2, "not yet");
    host.advance_time(Duration::from_millis(1));
    let root = host.root_context_id() as i32;
    assert_eq!(
        results(&host),
        vec![
            status::OK,
            1,
            root,
            1,
            3,
            24,
            0,
            status::OK,
            i32::from(b'u')
        ]
    );
    assert!(host.pending_callouts().is_empty());
}

#[test]
fn answering_an_unknown_token_is_an_error() {
    let (mut host, _) = dispatch(&CALL, &["judge"], 0);
    assert!(host.answer_callout(7, &[(":status", "200")], b"").is_err());
}
