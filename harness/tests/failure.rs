//! A guest trap fails the VM; what the in-flight stream and later streams get per policy.

// Test helpers outside #[test] functions may unwrap too (clippy.toml covers only the tests).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use common::{results, wat_host, GET, OK};
use std::time::Duration;

use livecheck_harness::{FailurePolicy, Host, Options};

/// Traps in on_request_headers when the request has an `x-crash` header; counts VM starts.
const CRASH_ON_HEADER: &str = r#"
    (data (i32.const 16) "x-crash")
    (func (export "proxy_on_vm_start") (param i32 i32) (result i32)
        (call $record (i32.const 100)) i32.const 1)
    (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32)
        (if (i32.eqz (call $get_header (i32.const 0) (i32.const 16) (i32.const 7) (i32.const 64) (i32.const 68)))
            (then unreachable))
        i32.const 0)
    (func (export "proxy_on_response_body") (param i32 i32 i32) (result i32)
        (if (i32.eq (local.get 1) (i32.const 5)) (then unreachable))
        i32.const 0)"#;

fn host(policy: FailurePolicy) -> Host {
    wat_host(
        CRASH_ON_HEADER,
        Options {
            failure_policy: policy,
            ..Options::default()
        },
    )
}

fn crash(host: &mut Host) -> livecheck_harness::StreamId {
    let s = host.new_stream();
    let mut headers = GET.to_vec();
    headers.push(("x-crash", "1"));
    host.send_request_headers(s, &headers, true).unwrap();
    s
}

#[test]
fn a_trap_answers_the_in_flight_stream_503_and_fail_reload_gives_a_fresh_vm_after_the_backoff() {
    let mut host = host(FailurePolicy::FailReload);
    let s = crash(&mut host);
    let caller = host.caller_received(s);
    assert_eq!(caller.status(), Some(503));
    assert!(caller.body.is_empty());
    assert_eq!(host.upstream_received(s).headers, None);
    assert!(host.vm_failed());
    assert!(host.logs_contain("proxy_on_request_headers failed"));

    // Within the reload backoff (1 s since the VM was loaded) the failed VM fails closed.
    host.advance_time(Duration::from_millis(999));
    let early = host.new_stream();
    assert_eq!(host.vm_starts(), 1);
    host.send_request_headers(early, &GET, true).unwrap();
    assert_eq!(host.caller_received(early).status(), Some(503));
    assert!(host.caller_received(early).body.is_empty());

    host.advance_time(Duration::from_millis(1));
    let next = host.new_stream();
    assert_eq!(host.vm_starts(), 2);
    assert_eq!(
        results(&host),
        vec![100],
        "the fresh VM ran on_vm_start (its own records start over)"
    );
    host.send_request_headers(next, &GET, true).unwrap();
    host.send_response_headers(next, &OK, true).unwrap();
    assert_eq!(host.caller_received(next).status(), Some(200));
}

#[test]
fn the_reload_backoff_counts_from_the_last_load_not_from_the_failure() {
    let mut host = wat_host(
        CRASH_ON_HEADER,
        Options {
            reload_backoff: Duration::from_secs(5),
            ..Options::default()
        },
    );
    host.advance_time(Duration::from_secs(10));
    crash(&mut host);
    // Envoy's `maybeReloadHandleIfNeeded` compares now with the handle's `last_load`: a VM that
    // ran longer than the backoff is replaced at the very next stream.
    let next = host.new_stream();
    assert_eq!(host.vm_starts(), 2);
    // The fresh VM traps too: the next reload waits for the backoff from this load.
    host.send_request_headers(
        next,
        &[
            (":method", "GET"),
            (":path", "/"),
            (":authority", "a"),
            ("x-crash", "1"),
        ],
        true,
    )
    .unwrap();
    assert!(host.vm_failed());
    host.advance_time(Duration::from_secs(4));
    let during = host.new_stream();
    assert_eq!(host.vm_starts(), 2);
    host.send_request_headers(during, &GET, true).unwrap();
    assert_eq!(host.caller_received(during).status(), Some(503));
    host.advance_time(Duration::from_secs(1));
    host.new_stream();
    assert_eq!(host.vm_starts(), 3);
}

#[test]
fn fail_closed_answers_later_streams_503_too() {
    let mut host = host(FailurePolicy::FailClosed);
    crash(&mut host);
    let next = host.new_stream();
    host.send_request_headers(next, &GET, true).unwrap();
    assert_eq!(host.caller_received(next).status(), Some(503));
    assert_eq!(host.vm_starts(), 1);
}

#[test]
fn fail_open_lets_the_in_flight_and_later_streams_pass() {
    let mut host = host(FailurePolicy::FailOpen);
    let s = crash(&mut host);
    assert_eq!(host.caller_received(s).headers, None);
    assert!(
        host.upstream_received(s).headers.is_some(),
        "the request goes on unfiltered"
    );
    let next = host.new_stream();
    host.send_request_headers(next, &GET, true).unwrap();
    host.send_response_headers(next, &OK, true).unwrap();
    assert_eq!(host.caller_received(next).status(), Some(200));
}

#[test]
fn a_trap_after_response_headers_went_out_resets_the_stream() {
    let mut host = host(FailurePolicy::FailReload);
    let s = host.new_stream();
    host.send_request_headers(s, &GET, true).unwrap();
    host.send_response_headers(s, &OK, false).unwrap();
    host.send_response_body(s, b"crash", false).unwrap();
    let caller = host.caller_received(s);
    assert_eq!(caller.status(), Some(200));
    assert!(caller.reset);
}

#[test]
fn other_streams_of_the_failed_vm_fail_at_their_next_callback() {
    let mut host = host(FailurePolicy::FailReload);
    let other = host.new_stream();
    host.send_request_headers(other, &GET, false).unwrap();
    crash(&mut host);
    host.send_request_body(other, b"more", true).unwrap();
    assert_eq!(host.caller_received(other).status(), Some(503));
}
