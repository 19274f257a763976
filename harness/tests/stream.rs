//! The filter manager's rules: body buffering, buffer limits, local replies, header pauses.

// Test helpers outside #[test] functions may unwrap too (clippy.toml covers only the tests).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use common::{results, status, wat_host, GET, OK};
use livecheck_harness::Options;

/// on_request_body records body_size and pauses until the end of stream.
const PAUSE_UNTIL_END: &str = r#"
    (func (export "proxy_on_request_body") (param i32 i32 i32) (result i32)
        (call $record (local.get 1))
        (i32.eqz (local.get 2)))"#;

#[test]
fn body_size_counts_everything_buffered_while_paused() {
    let mut host = wat_host(PAUSE_UNTIL_END, Options::default());
    let s = host.new_stream();
    host.send_request_headers(s, &GET, false).unwrap();
    host.send_request_body(s, b"ab", false).unwrap();
    host.send_request_body(s, b"cd", false).unwrap();
    assert!(
        host.upstream_received(s).body.is_empty(),
        "paused data is held"
    );
    host.send_request_body(s, b"ef", true).unwrap();
    assert_eq!(results(&host), vec![2, 4, 6]);
    let up = host.upstream_received(s);
    assert_eq!(
        up.body_chunks,
        vec![b"abcdef".to_vec()],
        "continue forwards the buffer as one chunk"
    );
    assert!(up.end_of_stream);
}

#[test]
fn continue_forwards_each_chunk_as_it_comes() {
    let mut host = wat_host(
        r#"(func (export "proxy_on_request_body") (param i32 i32 i32) (result i32)
            (call $record (local.get 1)) i32.const 0)"#,
        Options::default(),
    );
    let s = host.new_stream();
    host.send_request_headers(s, &GET, false).unwrap();
    host.send_request_body(s, b"ab", false).unwrap();
    host.send_request_body(s, b"cde", true).unwrap();
    assert_eq!(results(&host), vec![2, 3]);
    assert_eq!(
        host.upstream_received(s).body_chunks,
        vec![b"ab".to_vec(), b"cde".to_vec()]
    );
}

/// A guest whose on_request_body calls set_buffer_bytes(start, size, "XY") on the request body.
fn set_buffer_guest(start: u32, size: u32) -> String {
    format!(
        r#"(data (i32.const 16) "XY")
        (func (export "proxy_on_request_body") (param i32 i32 i32) (result i32)
            (call $record (call $set_buffer (i32.const 0) (i32.const {start}) (i32.const {size}) (i32.const 16) (i32.const 2)))
            i32.const 0)"#
    )
}

fn body_after_set_buffer(start: u32, size: u32) -> (Vec<i32>, Vec<u8>) {
    let mut host = wat_host(&set_buffer_guest(start, size), Options::default());
    let s = host.new_stream();
    host.send_request_headers(s, &GET, false).unwrap();
    host.send_request_body(s, b"hello", true).unwrap();
    (results(&host), host.upstream_received(s).body.clone())
}

#[test]
fn set_buffer_at_start_zero_with_full_size_replaces_the_body() {
    assert_eq!(
        body_after_set_buffer(0, 5),
        (vec![status::OK], b"XY".to_vec())
    );
}

#[test]
fn set_buffer_at_start_zero_with_size_zero_prepends() {
    assert_eq!(
        body_after_set_buffer(0, 0),
        (vec![status::OK], b"XYhello".to_vec())
    );
}

#[test]
fn set_buffer_at_start_zero_with_a_short_size_replaces_that_prefix() {
    assert_eq!(
        body_after_set_buffer(0, 2),
        (vec![status::OK], b"XYllo".to_vec())
    );
}

#[test]
fn set_buffer_at_the_end_appends() {
    assert_eq!(
        body_after_set_buffer(5, 0),
        (vec![status::OK], b"helloXY".to_vec())
    );
}

#[test]
fn set_buffer_at_middle_offset_is_bad_argument() {
    assert_eq!(
        body_after_set_buffer(2, 1),
        (vec![status::BAD_ARGUMENT], b"hello".to_vec())
    );
}

#[test]
fn request_buffered_past_the_limit_is_answered_413() {
    let mut host = wat_host(
        r#"(func (export "proxy_on_request_body") (param i32 i32 i32) (result i32) i32.const 1)"#,
        Options {
            buffer_limit: 4,
            ..Options::default()
        },
    );
    let s = host.new_stream();
    host.send_request_headers(s, &GET, false).unwrap();
    host.send_request_body(s, b"abc", false).unwrap();
    assert_eq!(host.caller_received(s).status(), None);
    host.send_request_body(s, b"de", false).unwrap();
    let caller = host.caller_received(s);
    assert_eq!(caller.status(), Some(413));
    assert_eq!(caller.body_text(), "Payload Too Large");
    assert!(
        host.upstream_received(s).reset,
        "the upstream request is abandoned"
    );
}

/// With allow_on_headers_stop_iteration the response headers are held while the body is read.
const HOLD_RESPONSE: &str = r#"
    (func (export "proxy_on_response_headers") (param i32 i32 i32) (result i32) i32.const 1)
    (func (export "proxy_on_response_body") (param i32 i32 i32) (result i32)
        (call $record (local.get 1)) i32.const 1)"#;

#[test]
fn response_buffered_past_the_limit_before_headers_went_out_is_500() {
    let mut host = wat_host(
        HOLD_RESPONSE,
        Options {
            buffer_limit: 4,
            allow_on_headers_stop_iteration: true,
            ..Options::default()
        },
    );
    let s = host.new_stream();
    host.send_request_headers(s, &GET, true).unwrap();
    host.send_response_headers(s, &OK, false).unwrap();
    host.send_response_body(s, b"abc", false).unwrap();
    host.send_response_body(s, b"de", false).unwrap();
    // The new chunk joins the buffer before the guest is called (`addEncodedData`), so the
    // limit trips first and the guest never sees 5 bytes.
    assert_eq!(results(&host), vec![3]);
    let caller = host.caller_received(s);
    assert_eq!(caller.status(), Some(500));
    assert!(!caller.reset);
}

#[test]
fn response_buffered_past_the_limit_after_headers_went_out_resets() {
    let mut host = wat_host(
        r#"(func (export "proxy_on_response_body") (param i32 i32 i32) (result i32) i32.const 1)"#,
        Options {
            buffer_limit: 4,
            ..Options::default()
        },
    );
    let s = host.new_stream();
    host.send_request_headers(s, &GET, true).unwrap();
    host.send_response_headers(s, &OK, false).unwrap();
    host.send_response_body(s, b"abcde", false).unwrap();
    let caller = host.caller_received(s);
    assert_eq!(caller.status(), Some(200));
    assert!(caller.reset);
}

#[test]
fn pausing_response_headers_without_the_flag_stalls_body_callbacks_until_continue() {
    let mut host = wat_host(
        &format!(
            r#"{HOLD_RESPONSE}
            (func (export "proxy_on_tick") (param i32)
                (drop (call $set_effective (i32.const 2)))
                (drop (call $continue (i32.const 1))))
            (func (export "proxy_on_configure") (param i32 i32) (result i32)
                (drop (call $set_tick (i32.const 1000))) i32.const 1)"#
        ),
        Options::default(),
    );
    let s = host.new_stream();
    host.send_request_headers(s, &GET, true).unwrap();
    host.send_response_headers(s, &OK, false).unwrap();
    host.send_response_body(s, b"ab", false).unwrap();
    host.send_response_body(s, b"cd", true).unwrap();
    assert!(
        results(&host).is_empty(),
        "StopAllIterationAndWatermark: no body callback"
    );
    assert_eq!(host.caller_received(s).headers, None);
    host.advance_time(std::time::Duration::from_secs(1));
    assert_eq!(
        results(&host),
        vec![4],
        "after continue the buffered body arrives at once"
    );
    assert_eq!(host.caller_received(s).status(), Some(200));
}

#[test]
fn pausing_response_headers_with_the_flag_still_delivers_body_callbacks() {
    let mut host = wat_host(
        HOLD_RESPONSE,
        Options {
            allow_on_headers_stop_iteration: true,
            ..Options::default()
        },
    );
    let s = host.new_stream();
    host.send_request_headers(s, &GET, true).unwrap();
    host.send_response_headers(s, &OK, false).unwrap();
    host.send_response_body(s, b"ab", false).unwrap();
    assert_eq!(results(&host), vec![2]);
    assert_eq!(
        host.caller_received(s).headers,
        None,
        "headers are still held"
    );
}

/// on_request_headers answers 403; on_response_headers marks what it sees with x-seen and,
/// when told, sends a second local reply.
fn local_reply_guest(second_reply: bool) -> String {
    let second = if second_reply {
        "(drop (call $local_reply (i32.const 418) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const -1)))"
    } else {
        ""
    };
    format!(
        r#"(data (i32.const 16) "denied")
        (data (i32.const 32) "x-seen")
        (data (i32.const 48) "yes")
        (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32)
            (drop (call $local_reply (i32.const 403) (i32.const 0) (i32.const 0)
                (i32.const 16) (i32.const 6) (i32.const 0) (i32.const 0) (i32.const -1)))
            i32.const 0)
        (func (export "proxy_on_response_headers") (param i32 i32 i32) (result i32)
            (call $record (i32.const 1))
            (drop (call $add_header (i32.const 2) (i32.const 32) (i32.const 6) (i32.const 48) (i32.const 3)))
            {second}
            i32.const 0)
        (func (export "proxy_on_response_body") (param i32 i32 i32) (result i32)
            (call $record (local.get 1)) i32.const 0)"#
    )
}

#[test]
fn local_reply_from_request_headers_runs_through_the_response_callbacks() {
    let mut host = wat_host(&local_reply_guest(false), Options::default());
    let s = host.new_stream();
    host.send_request_headers(s, &GET, true).unwrap();
    assert_eq!(
        results(&host),
        vec![1, 6],
        "on_response_headers, then on_response_body(6)"
    );
    let caller = host.caller_received(s);
    assert_eq!(caller.status(), Some(403));
    assert_eq!(caller.header("x-seen"), Some("yes"));
    assert_eq!(caller.header("content-type"), Some("text/plain"));
    assert_eq!(caller.body_text(), "denied");
    assert_eq!(
        host.upstream_received(s).headers,
        None,
        "the request never went upstream"
    );
}

#[test]
fn local_reply_reaches_the_caller_when_the_filter_exports_no_response_callbacks() {
    // A callback the module does not export is skipped and the stream goes on (Continue); the
    // stop that send_local_response asked of the request headers callback is not carried over
    // to the response headers (found with a WAT filter; the Rust SDK exports every callback).
    let mut host = wat_host(
        r#"(data (i32.const 16) "denied")
        (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32)
            (drop (call $local_reply (i32.const 403) (i32.const 0) (i32.const 0)
                (i32.const 16) (i32.const 6) (i32.const 0) (i32.const 0) (i32.const -1)))
            i32.const 1)"#,
        Options::default(),
    );
    let s = host.new_stream();
    host.send_request_headers(s, &GET, true).unwrap();
    let caller = host.caller_received(s);
    assert_eq!(caller.status(), Some(403));
    assert_eq!(caller.body_text(), "denied");
    assert!(caller.end_of_stream);
    assert_eq!(host.upstream_received(s).headers, None);
}

#[test]
fn second_local_reply_from_the_response_callbacks_goes_straight_to_the_caller() {
    let mut host = wat_host(&local_reply_guest(true), Options::default());
    let s = host.new_stream();
    host.send_request_headers(s, &GET, true).unwrap();
    // filter_manager.cc: response headers are in the chain but not sent, so the second reply
    // is sent directly, skipping the encoder filters.
    assert_eq!(results(&host), vec![1]);
    let caller = host.caller_received(s);
    assert_eq!(caller.status(), Some(418));
    assert_eq!(caller.header("x-seen"), None);
    assert!(caller.body.is_empty());
}

#[test]
fn local_reply_after_response_headers_went_out_resets_the_stream() {
    let mut host = wat_host(
        r#"(func (export "proxy_on_response_body") (param i32 i32 i32) (result i32)
            (drop (call $local_reply (i32.const 500) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const -1)))
            i32.const 0)"#,
        Options::default(),
    );
    let s = host.new_stream();
    host.send_request_headers(s, &GET, true).unwrap();
    host.send_response_headers(s, &OK, false).unwrap();
    host.send_response_body(s, b"partial", false).unwrap();
    let caller = host.caller_received(s);
    assert_eq!(caller.status(), Some(200));
    assert!(caller.reset);
    assert!(
        caller.body.is_empty(),
        "send_local_response forces a stop: the chunk is not sent"
    );
}

#[test]
fn finish_stream_calls_on_log_on_done_on_delete_in_that_order() {
    let mut host = wat_host(
        r#"(func (export "proxy_on_log") (param i32) (call $record (i32.const 1)))
        (func (export "proxy_on_done") (param i32) (result i32) (call $record (i32.const 2)) i32.const 1)
        (func (export "proxy_on_delete") (param i32) (call $record (i32.const 3)))"#,
        Options::default(),
    );
    let s = host.new_stream();
    host.send_request_headers(s, &GET, true).unwrap();
    host.send_response_headers(s, &OK, true).unwrap();
    host.finish_stream(s).unwrap();
    assert_eq!(results(&host), vec![1, 2, 3]);
    assert!(host.send_request_body(s, b"late", true).is_err());
}
