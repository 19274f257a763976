//! Low-level ABI rules: bounds checks, bad arguments, buffers, metrics, shared data, WASI.

// Test helpers outside #[test] functions may unwrap too (clippy.toml covers only the tests).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use common::{results, status, try_wat_host, wat_host, GET, OK};
use livecheck_harness::{HarnessError, LogLevel, Options};

#[test]
fn out_of_range_pointers_are_invalid_memory_access_and_the_host_survives() {
    let host = wat_host(
        r#"(func (export "proxy_on_vm_start") (param i32 i32) (result i32)
            ;; message far past the end of memory
            (call $record (call $log (i32.const 2) (i32.const 0x7ffffff0) (i32.const 64)))
            ;; return slot past the end of memory
            (call $record (call $get_buffer (i32.const 6) (i32.const 0) (i32.const 10)
                (i32.const 0xfffffff0) (i32.const 0xfffffff8)))
            ;; length that wraps around
            (call $record (call $log (i32.const 2) (i32.const 16) (i32.const -1)))
            i32.const 1)"#,
        Options {
            vm_config: b"vm".to_vec(),
            ..Options::default()
        },
    );
    assert_eq!(
        results(&host),
        vec![status::INVALID_MEMORY_ACCESS; 3],
        "every out-of-range access is reported, never a host panic"
    );
    assert!(!host.vm_failed());
}

#[test]
fn log_level_above_critical_is_bad_argument() {
    let host = wat_host(
        r#"(data (i32.const 16) "hello")
        (func (export "proxy_on_vm_start") (param i32 i32) (result i32)
            (call $record (call $log (i32.const 6) (i32.const 16) (i32.const 5)))
            (call $record (call $log (i32.const 3) (i32.const 16) (i32.const 5)))
            i32.const 1)"#,
        Options::default(),
    );
    assert_eq!(results(&host), vec![status::BAD_ARGUMENT, status::OK]);
    assert_eq!(host.logs().len(), 1);
    assert_eq!(host.logs()[0].level, LogLevel::Warn);
    assert!(host.logs_contain("hello"));
}

#[test]
fn logs_below_the_configured_level_are_not_recorded() {
    let host = wat_host(
        r#"(data (i32.const 16) "quiet")
        (func (export "proxy_on_vm_start") (param i32 i32) (result i32)
            (drop (call $log (i32.const 1) (i32.const 16) (i32.const 5)))
            i32.const 1)"#,
        Options::default(),
    );
    assert!(host.logs().is_empty());
}

#[test]
fn unknown_map_and_buffer_types_are_bad_argument() {
    let host = wat_host(
        r#"(data (i32.const 16) ":path")
        (func (export "proxy_on_vm_start") (param i32 i32) (result i32)
            (call $record (call $get_header (i32.const 8) (i32.const 16) (i32.const 5) (i32.const 64) (i32.const 68)))
            (call $record (call $get_buffer (i32.const 9) (i32.const 0) (i32.const 1) (i32.const 64) (i32.const 68)))
            i32.const 1)"#,
        Options::default(),
    );
    assert_eq!(
        results(&host),
        vec![status::BAD_ARGUMENT, status::BAD_ARGUMENT]
    );
}

#[test]
fn request_headers_are_bad_argument_from_the_root_context() {
    let host = wat_host(
        r#"(data (i32.const 16) ":path")
        (func (export "proxy_on_vm_start") (param i32 i32) (result i32)
            (call $record (call $get_header (i32.const 0) (i32.const 16) (i32.const 5) (i32.const 64) (i32.const 68)))
            (call $record (call $add_header (i32.const 0) (i32.const 16) (i32.const 5) (i32.const 16) (i32.const 5)))
            i32.const 1)"#,
        Options::default(),
    );
    assert_eq!(
        results(&host),
        vec![status::BAD_ARGUMENT, status::BAD_ARGUMENT]
    );
}

#[test]
fn plugin_configuration_is_readable_only_during_on_configure() {
    let host = wat_host(
        r#"(func (export "proxy_on_vm_start") (param i32 i32) (result i32)
            (call $record (call $get_buffer (i32.const 7) (i32.const 0) (i32.const 100) (i32.const 64) (i32.const 68)))
            (call $record (call $get_buffer (i32.const 6) (i32.const 0) (i32.const 100) (i32.const 64) (i32.const 68)))
            (call $record (i32.load (i32.const 68)))
            i32.const 1)
        (func (export "proxy_on_configure") (param i32 i32) (result i32)
            (call $record (local.get 1))
            (call $record (call $get_buffer (i32.const 7) (i32.const 0) (i32.const 100) (i32.const 64) (i32.const 68)))
            (call $record (i32.load (i32.const 68)))
            i32.const 1)"#,
        Options {
            vm_config: b"vm-config".to_vec(),
            plugin_config: b"{\"a\":1}".to_vec(),
            ..Options::default()
        },
    );
    assert_eq!(
        results(&host),
        vec![status::NOT_FOUND, status::OK, 9, 7, status::OK, 7]
    );
}

#[test]
fn on_configure_returning_false_rejects_the_config() {
    let err = try_wat_host(
        r#"(func (export "proxy_on_configure") (param i32 i32) (result i32) i32.const 0)"#,
        Options::default(),
    )
    .err();
    assert_eq!(err, Some(HarnessError::ConfigRejected));
}

#[test]
fn on_vm_start_returning_false_rejects_the_config() {
    let err = try_wat_host(
        r#"(func (export "proxy_on_vm_start") (param i32 i32) (result i32) i32.const 0)"#,
        Options::default(),
    )
    .err();
    assert_eq!(err, Some(HarnessError::ConfigRejected));
}

#[test]
fn an_import_envoy_does_not_provide_fails_to_load() {
    let wasm = wat::parse_str(
        r#"(module
            (import "wasi_snapshot_preview1" "sock_accept" (func (param i32 i32 i32) (result i32)))
            (memory (export "memory") 1)
            (func (export "proxy_abi_version_0_2_1")))"#,
    )
    .unwrap();
    let err = livecheck_harness::Host::new(&wasm, Options::default()).err();
    assert!(matches!(err, Some(HarnessError::Instantiate(_))), "{err:?}");
}

#[test]
fn a_module_without_an_abi_marker_fails_to_load() {
    let wasm = wat::parse_str(r#"(module (memory (export "memory") 1))"#).unwrap();
    let err = livecheck_harness::Host::new(&wasm, Options::default()).err();
    assert_eq!(err, Some(HarnessError::AbiVersion));
}

#[test]
fn metrics_are_readable_by_guest_name_and_by_envoy_stats_name() {
    let host = wat_host(
        r#"(data (i32.const 16) "requests")
        (data (i32.const 32) "inflight")
        (data (i32.const 48) "latency")
        (func (export "proxy_on_vm_start") (param i32 i32) (result i32)
            (call $record (call $define_metric (i32.const 0) (i32.const 16) (i32.const 8) (i32.const 200)))
            (call $record (call $increment_metric (i32.load (i32.const 200)) (i64.const 3)))
            ;; counters only go up
            (call $record (call $increment_metric (i32.load (i32.const 200)) (i64.const 0)))
            (call $record (call $define_metric (i32.const 1) (i32.const 32) (i32.const 8) (i32.const 204)))
            (call $record (call $record_metric (i32.load (i32.const 204)) (i64.const 7)))
            (call $record (call $increment_metric (i32.load (i32.const 204)) (i64.const -2)))
            (call $record (call $define_metric (i32.const 2) (i32.const 48) (i32.const 7) (i32.const 208)))
            (call $record (call $record_metric (i32.load (i32.const 208)) (i64.const 42)))
            ;; histograms cannot be read
            (call $record (call $get_metric (i32.load (i32.const 208)) (i32.const 216)))
            ;; unknown metric type
            (call $record (call $define_metric (i32.const 3) (i32.const 16) (i32.const 8) (i32.const 212)))
            (call $record (call $get_metric (i32.load (i32.const 200)) (i32.const 216)))
            (call $record (i32.load (i32.const 216)))
            i32.const 1)"#,
        Options::default(),
    );
    assert_eq!(
        results(&host),
        vec![
            0,
            0,
            status::BAD_ARGUMENT,
            0,
            0,
            0,
            0,
            0,
            status::BAD_ARGUMENT,
            status::BAD_ARGUMENT,
            0,
            3
        ]
    );
    assert_eq!(host.metric("requests"), Some(3));
    assert_eq!(host.metric("wasmcustom.requests"), Some(3));
    assert_eq!(host.metric("wasmcustom.inflight"), Some(5));
    assert_eq!(host.histogram("wasmcustom.latency"), Some(vec![42]));
    assert_eq!(host.metric("missing"), None);
}

#[test]
fn shared_data_set_with_a_stale_cas_is_cas_mismatch() {
    let host = wat_host(
        r#"(data (i32.const 16) "key")
        (data (i32.const 32) "v1v2")
        (func (export "proxy_on_vm_start") (param i32 i32) (result i32)
            (call $record (call $set_shared (i32.const 16) (i32.const 3) (i32.const 32) (i32.const 2) (i32.const 0)))
            (call $record (call $get_shared (i32.const 16) (i32.const 3) (i32.const 64) (i32.const 68) (i32.const 72)))
            (call $record (call $set_shared (i32.const 16) (i32.const 3) (i32.const 34) (i32.const 2) (i32.load (i32.const 72))))
            (call $record (call $set_shared (i32.const 16) (i32.const 3) (i32.const 32) (i32.const 2) (i32.load (i32.const 72))))
            i32.const 1)"#,
        Options::default(),
    );
    assert_eq!(
        results(&host),
        vec![status::OK, status::OK, status::OK, status::CAS_MISMATCH]
    );
    assert_eq!(host.shared_data("key").map(|d| d.0), Some(b"v2".to_vec()));
}

#[test]
fn stdout_and_stderr_writes_become_info_and_error_logs() {
    let host = wat_host(
        r#"(data (i32.const 16) "to stdout\n")
        (data (i32.const 32) "to stderr")
        (func (export "proxy_on_vm_start") (param i32 i32) (result i32)
            ;; one iovec at 256: {ptr, len}
            (i32.store (i32.const 256) (i32.const 16))
            (i32.store (i32.const 260) (i32.const 10))
            (call $record (call $fd_write (i32.const 1) (i32.const 256) (i32.const 1) (i32.const 300)))
            (call $record (i32.load (i32.const 300)))
            (i32.store (i32.const 256) (i32.const 32))
            (i32.store (i32.const 260) (i32.const 9))
            (call $record (call $fd_write (i32.const 2) (i32.const 256) (i32.const 1) (i32.const 300)))
            ;; other descriptors are EBADF
            (call $record (call $fd_write (i32.const 3) (i32.const 256) (i32.const 1) (i32.const 300)))
            i32.const 1)"#,
        Options::default(),
    );
    assert_eq!(results(&host), vec![0, 10, 0, 8]);
    let logs: Vec<_> = host
        .logs()
        .iter()
        .map(|l| (l.level, l.message.as_str()))
        .collect();
    assert_eq!(
        logs,
        vec![
            (LogLevel::Info, "to stdout"),
            (LogLevel::Error, "to stderr")
        ]
    );
}

#[test]
fn request_headers_are_bad_argument_after_on_request_headers_continued() {
    let mut host = wat_host(
        r#"(data (i32.const 16) ":path")
        (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32)
            (call $record (call $get_header (i32.const 0) (i32.const 16) (i32.const 5) (i32.const 64) (i32.const 68)))
            i32.const 0)
        (func (export "proxy_on_request_body") (param i32 i32 i32) (result i32)
            (call $record (call $get_header (i32.const 0) (i32.const 16) (i32.const 5) (i32.const 64) (i32.const 68)))
            i32.const 0)"#,
        Options::default(),
    );
    let s = host.new_stream();
    host.send_request_headers(s, &GET, false).unwrap();
    host.send_request_body(s, b"x", true).unwrap();
    // Envoy forgets `request_headers_` once on_request_headers returned Continue.
    assert_eq!(results(&host), vec![status::OK, status::BAD_ARGUMENT]);
    let _ = OK;
}

#[test]
fn memory_bytes_is_the_linear_memory_the_guest_has_grown_to() {
    // The common module starts with 4 pages; this one grows by 3 more when configured.
    let mut host = wat_host(
        r#"(func (export "proxy_on_configure") (param i32 i32) (result i32)
            (drop (memory.grow (i32.const 3)))
            i32.const 1)"#,
        Options::default(),
    );
    assert_eq!(host.memory_bytes(), 7 * 65536);
}
